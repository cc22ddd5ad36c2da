#!/usr/bin/env python3
"""kiln engines against ONNX Runtime on the models of bench/models.py (issue #9).

For each model: `kiln compile -O3 --batch 1:8` once (timed: the compile time column), then per
batch and thread count, alternating kiln and ONNX Runtime in separate processes (two thread pools
in one process starve each other on 2 cores) for --rounds rounds, each process timing
--iterations runs after --warmup untimed ones. The table gives the best median of each side, their
ratio (kiln / ORT: below 1, kiln is faster) and the compute floor: the model's FLOPs divided by
--peak-gflops per thread (the measured f32 FMA peak of one core).

ONNX Runtime: all graph optimizations, intra-op threads = the row's threads, inter-op 1,
sequential execution. kiln: `kiln bench ENGINE --batch B --threads T --json`.

    cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target kiln_cli
    python3 bench/run_vs_ort.py --kiln build/tools/kiln [--models resnet18,resnet50,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (bench/models.py)


def ort_worker(args):
    """Runs in its own process: times one model at one batch and thread count with ORT."""
    import onnx
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(args.ort_worker, opts, providers=["CPUExecutionProvider"])
    feed = models.feeds(os.path.basename(args.ort_worker), onnx.load(args.ort_worker, load_external_data=False),
                        args.batch[0])
    for _ in range(args.warmup):
        sess.run(None, feed)
    times = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"median": statistics.median(times), "min": min(times)}))


def run_kiln(kiln, engine, batch, threads, iterations, warmup):
    out = subprocess.run([kiln, "bench", engine, "--batch", str(batch), "--threads", str(threads), "--iterations",
                          str(iterations), "--warmup", str(warmup), "--json"], check=True, capture_output=True,
                         text=True).stdout
    lat = json.loads(out)["latency_ms"]
    return {"median": lat["median"], "min": lat["min"]}


def run_ort(model, batch, threads, iterations, warmup):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--ort-worker", model, "--batch", str(batch),
                          "--threads", str(threads), "--iterations", str(iterations), "--warmup", str(warmup)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--work", default="/tmp/kiln_bench_models", help="where models and engines are written")
    ap.add_argument("--models", default=",".join(models.DEFAULT_MODELS), help="of " + ", ".join(models.MODELS))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--opt-level", default="3")
    ap.add_argument("--peak-gflops", type=float, default=220.0, help="f32 peak of one core (GFLOP/s)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--ort-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ort_worker:
        args.threads = args.threads[0]
        return ort_worker(args)

    os.makedirs(args.work, exist_ok=True)
    rows = []
    print("| model | batch | threads | kiln ms | ORT ms | kiln / ORT | floor ms | compile s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model_path = os.path.join(args.work, name + ".onnx")
        m, macs = models.MODELS[name]()
        if not os.path.exists(model_path):
            import onnx
            onnx.save(m, model_path)
        engine = os.path.join(args.work, name + ".kiln")
        t0 = time.perf_counter()
        subprocess.run([args.kiln, "compile", model_path, "-o", engine, "-O", args.opt_level, "--batch", "1:" +
                        str(max(args.batch))], check=True, capture_output=True)
        compile_s = time.perf_counter() - t0
        # The engine just written (100 MB for ResNet-50) is still being written back to disk: a
        # kernel thread doing that on one of 2 cores slowed the first rounds of kiln by up to 1.2x.
        os.sync()
        time.sleep(2)
        for batch in args.batch:
            for threads in args.threads:
                k_best = o_best = None
                for _ in range(args.rounds):
                    k = run_kiln(args.kiln, engine, batch, threads, args.iterations, args.warmup)
                    o = run_ort(model_path, batch, threads, args.iterations, args.warmup)
                    k_best = k["median"] if k_best is None else min(k_best, k["median"])
                    o_best = o["median"] if o_best is None else min(o_best, o["median"])
                floor = 2.0 * macs * batch / (args.peak_gflops * 1e9 * threads) * 1e3
                row = {"model": name, "batch": batch, "threads": threads, "kiln_ms": k_best, "ort_ms": o_best,
                       "ratio": k_best / o_best, "floor_ms": floor, "compile_s": compile_s}
                rows.append(row)
                print(f"| {name} | {batch} | {threads} | {k_best:.2f} | {o_best:.2f} | {k_best / o_best:.2f} | "
                      f"{floor:.2f} | {compile_s:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
