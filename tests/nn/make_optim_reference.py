#!/usr/bin/env python3
"""Makes tests/nn/data/optim_reference.npz: parameters after each of a few optimizer steps, computed by
PyTorch, which tests/nn/optim_torch_test.cc replays with kiln's optimizers and compares.

The problem (float64): X [6, 5], Y [6, 3], parameters W [5, 3] and b [3];
loss = mean((tanh(X @ W + b) - Y) ** 2). Each config starts from the same W0, b0 and runs STEPS
iterations of: zero_grad, loss, backward, optimizer.step(), then scheduler.step() when it has one.
Saved (np.savez, float64): X, Y, W0, b0, and per config <name>_W [STEPS, 5, 3], <name>_b [STEPS, 3]
(the parameters after each step) and <name>_lr [STEPS] (the learning rate each step used).

The data are fixed numbers (no random generator), so the fixtures depend only on PyTorch's update
rules. Regenerate (needs torch and numpy; CI does not, the .npz file is committed):
    python3 tests/nn/make_optim_reference.py
The committed file was made with torch 2.15.0 (the PyPI wheel, run on the CPU) and NumPy 2.4.
"""
import math
import os

import numpy as np
import torch

STEPS = 6
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "optim_reference.npz")


def fixed(shape, phase):
    """Deterministic, non-zero, non-repeating values in about [-1.5, 1.5]."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.float64)
    return (1.3 * np.sin(0.7 * i + phase) + 0.2 * np.cos(2.3 * i + 0.5 * phase)).reshape(shape)


X = fixed((6, 5), 0.1)
Y = np.tanh(fixed((6, 3), 1.7))
W0 = 0.5 * fixed((5, 3), 2.9)
B0 = 0.3 * fixed((3,), 4.3)


def sgd(lr, **kw):
    return lambda p: torch.optim.SGD(p, lr=lr, **kw)


def adam(lr, **kw):
    return lambda p: torch.optim.Adam(p, lr=lr, **kw)


def adamw(lr, **kw):
    return lambda p: torch.optim.AdamW(p, lr=lr, **kw)


# name -> (optimizer factory, scheduler factory or None). Keep in sync with optim_torch_test.cc.
CONFIGS = {
    "sgd": (sgd(0.3), None),
    "sgd_momentum": (sgd(0.2, momentum=0.9), None),
    "sgd_dampening": (sgd(0.2, momentum=0.8, dampening=0.3), None),
    "sgd_nesterov_wd": (sgd(0.2, momentum=0.9, nesterov=True, weight_decay=0.05), None),
    "sgd_wd": (sgd(0.25, weight_decay=0.1), None),
    "adam": (adam(0.05), None),
    "adam_wd": (adam(0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1), None),
    "adamw": (adamw(0.05), None),
    "adamw_wd": (adamw(0.05, betas=(0.85, 0.99), eps=1e-7, weight_decay=0.3), None),
    "step_lr": (sgd(0.3, momentum=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    # T_max = 5 over 6 steps: the last step runs at eta_min. Past T_max PyTorch's schedule rises again
    # (it is periodic) while kiln's holds at eta_min, so the fixture stops at T_max.
    "cosine_lr": (adam(0.05), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.005)),
    # kiln's LinearWarmupLR is PyTorch's LinearLR from start_factor to 1 over total_iters steps.
    "warmup_lr": (adamw(0.05, weight_decay=0.1),
                  lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4)),
}


def run(make_opt, make_sched):
    w = torch.tensor(W0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    x, y = torch.tensor(X), torch.tensor(Y)
    opt = make_opt([w, b])
    sched = make_sched(opt) if make_sched else None
    ws, bs, lrs = [], [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((torch.tanh(x @ w + b) - y) ** 2).mean()
        loss.backward()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        ws.append(w.detach().numpy().copy())
        bs.append(b.detach().numpy().copy())
    return np.stack(ws), np.stack(bs), np.array(lrs, dtype=np.float64)


def main():
    torch.set_default_dtype(torch.float64)
    arrays = {"X": X, "Y": Y, "W0": W0, "b0": B0}
    for name, (make_opt, make_sched) in CONFIGS.items():
        ws, bs, lrs = run(make_opt, make_sched)
        assert np.all(np.isfinite(ws)) and not math.isclose(float(np.abs(ws[-1] - W0).max()), 0.0)
        arrays.update({f"{name}_W": ws, f"{name}_b": bs, f"{name}_lr": lrs})
        print(f"{name}: lr {', '.join(f'{v:.4g}' for v in lrs)}; |W - W0| max {np.abs(ws[-1] - W0).max():.4g}")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    np.savez(OUT, **arrays)
    print(f"wrote {OUT} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
