"""kiln against ONNX Runtime (and optionally another kiln build), every run labelled by how far apart
the two CPUs were while it ran.

This VM's two vCPUs are at times ~90 ns apart for a round trip of a shared cache line and at times
~350-400 ns or more (the host moves them; minutes of each, flipping often). Everything that runs on
two threads slows down at the far distance, kiln and ORT both, and not by the same factor, so a
ratio from a table of best medians says little about the far distance. This script alternates the
sides for --seconds, measures the distance (kiln_bench_core_distance) before and after each round,
and keeps a round only when both measurements agree on the distance: near (< --near ns), far
(< --far ns), or slower still. It prints, per model and distance, the median of each side's medians
and the median of the ratios to the first side.

Engines and inputs come from bench/exported_vs_ort.py's --work directory (run that first with the
same --work and --models):

    python3 bench/exported_vs_ort.py --kiln build/tools/kiln --work /tmp/exported --models mnasnet1_0
    python3 bench/by_distance_vs_ort.py --kiln build/tools/kiln --work /tmp/exported \\
        --models mnasnet1_0,mobilenet_v2 --batch 1 --seconds 300 [--other-kiln /tmp/old/kiln]

--other-kiln runs a second kiln build (its own directory first on LD_LIBRARY_PATH) as a third side:
the A/B comparison of two builds that bench/RESULTS.md quotes by distance.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exported_vs_ort import ENCODERS, ORT_CHILD  # noqa: E402


def distance(probe):
    r = subprocess.run([probe], check=True, capture_output=True, text=True)
    return float(re.search(r"round trip ([0-9.]+) ns", r.stdout).group(1))


def kiln_median(kiln, engine, batch, threads, iters, in_args):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(kiln)) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    r = subprocess.run([kiln, "bench", engine, "--batch", str(batch), "--threads", str(threads), "--iterations",
                        str(iters), "--warmup", "2"] + in_args, check=True, capture_output=True, text=True, env=env)
    return float(re.search(r"median ([0-9.]+)", r.stdout).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--other-kiln", help="a second kiln build, timed as a third side")
    ap.add_argument("--probe", default="build/bench/kiln_bench_core_distance")
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--near", type=float, default=200)
    ap.add_argument("--far", type=float, default=600)
    a = ap.parse_args()
    models = a.models.split(",")
    sides = ["kiln"] + (["other kiln"] if a.other_kiln else []) + ["ORT"]
    rounds = {}  # (model, distance) -> [[ms per side]]
    end = time.time() + a.seconds
    while time.time() < end:
        for name in models:
            engine, model = os.path.join(a.work, f"{name}.kiln"), os.path.join(a.work, f"{name}.onnx")
            feed_file = os.path.join(a.work, f"{name}_b{a.batch}.npz")
            in_args = []
            with np.load(feed_file) as feeds:
                for k in feeds.files:
                    in_args += ["-i", f"{k}={os.path.join(a.work, f'{name}_b{a.batch}_{k}.npy')}"]
            heavy = name in ENCODERS or name == "vit_b_16"
            iters = (3 if a.batch > 1 else 6) if heavy else (20 if a.batch > 1 else 200)
            d0 = distance(a.probe)
            ms = [kiln_median(a.kiln, engine, a.batch, a.threads, iters, in_args)]
            if a.other_kiln:
                ms.append(kiln_median(a.other_kiln, engine, a.batch, a.threads, iters, in_args))
            r = subprocess.run([sys.executable, "-c", ORT_CHILD, model, str(a.threads), str(iters), "2", feed_file],
                               check=True, capture_output=True, text=True)
            ms.append(float(r.stdout))
            d1 = distance(a.probe)
            label = lambda d: "near" if d < a.near else "far" if d < a.far else "farther"  # noqa: E731
            if label(d0) == label(d1):
                rounds.setdefault((name, label(d0)), []).append(ms)
    print(f"batch {a.batch}, {a.threads} threads; medians over the rounds whose distance held (ms), and the "
          f"median ratio to {sides[0]}")
    for (name, where), rs in sorted(rounds.items()):
        med = [statistics.median(r[i] for r in rs) for i in range(len(sides))]
        ratio = [statistics.median(r[i] / r[0] for r in rs) for i in range(len(sides))]
        cells = "  ".join(f"{s} {m:.3f} ({q:.3f})" for s, m, q in zip(sides, med, ratio))
        print(f"{name:22} {where:8} {len(rs):3} rounds  {cells}")


if __name__ == "__main__":
    main()
