#!/usr/bin/env python3
"""PyTorch (CPU) side of bench/train_step_bench.cc: one training step (zero_grad, forward,
cross_entropy, backward, SGD step) of the MLP 784-512-256-10 at batch 128 and of the digits CNN on
28x28 inputs at batch 64. Prints one line per case:
`<case> threads:<n> <wall microseconds per step> <process CPU microseconds per step>`.

PyTorch's best configuration here: torch.set_num_threads(n) explicitly (it defaults to 1 thread on
these machines), OMP_WAIT_POLICY=PASSIVE (set by bench/run_train_step_vs_torch.sh), and for each case
the faster of SGD's for-loop and foreach implementations.

    python3 bench/torch_train_step.py --case mlp --threads 2 --min-time 1
Needs torch (pip install torch); a benchmark-only dependency, never CI's.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def make_mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def make_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


CASES = {
    "mlp": (make_mlp, (128, 784), 128),
    "cnn": (make_cnn, (64, 1, 28, 28), 64),
}


def time_steps(case, foreach, min_time):
    """(wall, process CPU) mean microseconds per step over at least min_time seconds, after a warm-up."""
    make, xshape, batch = CASES[case]
    torch.manual_seed(0)
    net = make()
    x = torch.randn(*xshape)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, foreach=foreach)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    iters, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while True:
        step()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and iters >= 10:
            return elapsed / iters * 1e6, (time.process_time() - cpu_start) / iters * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="default: all")
    ap.add_argument("--threads", type=int, action="append", help="default: 1 and 2")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    args = ap.parse_args()
    for case in args.case or sorted(CASES):
        for n in args.threads or [1, 2]:
            torch.set_num_threads(n)
            assert torch.get_num_threads() == n
            wall, cpu = min(time_steps(case, foreach, args.min_time) for foreach in (False, True))
            print(f"{case} threads:{n} {wall:.1f} {cpu:.1f}", flush=True)


if __name__ == "__main__":
    main()
