#!/usr/bin/env python3
"""Alternates two kiln engines (each with its own kiln binary and library, so an engine built by an
older kiln can run beside a newer one) at the same batch and thread count, round by round, and
prints each round's min / median latency, the median of the round medians, and, with --steps, the
per-layer times (min over rounds) of the steps whose tactics differ between the two.

    python3 bench/ab_engines.py --a build/tools/kiln:new.kiln \\
        --b /tmp/old/build/tools/kiln:old.kiln --b-lib /tmp/old/build --batch 1 8 --threads 2 --rounds 6

On a shared host only alternated runs compare; absolute times move between phases of the
neighbours' load (bench/RESULTS.md).
"""
import argparse
import json
import os
import statistics
import subprocess


def bench(kiln, engine, lib, batch, threads, iterations, warmup):
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib
    out = subprocess.run([kiln, "bench", engine, "--batch", str(batch), "--threads", str(threads), "--iterations",
                          str(iterations), "--warmup", str(warmup), "--json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="KILN:ENGINE")
    ap.add_argument("--b", required=True, help="KILN:ENGINE")
    ap.add_argument("--a-lib", default="", help="LD_LIBRARY_PATH for A's kiln")
    ap.add_argument("--b-lib", default="", help="LD_LIBRARY_PATH for B's kiln")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", action="store_true", help="per-layer times of the steps whose tactics differ")
    args = ap.parse_args()
    sides = {"A": (*args.a.split(":", 1), args.a_lib), "B": (*args.b.split(":", 1), args.b_lib)}
    for batch in args.batch:
        lat = {"A": [], "B": []}
        layers = {"A": {}, "B": {}}
        tactic = {"A": {}, "B": {}}
        for r in range(args.rounds):
            for side, (kiln, engine, lib) in sides.items():
                d = bench(kiln, engine, lib, batch, args.threads, args.iterations, args.warmup)
                lat[side].append((d["latency_ms"]["min"], d["latency_ms"]["median"]))
                for i, layer in enumerate(d["layers"]):
                    layers[side].setdefault(i, []).append(layer["ms"])
                    tactic[side][i] = (layer["name"], layer.get("tactic", "?"))
            print(f"batch {batch} round {r + 1}: A {lat['A'][-1][0]:.2f} / {lat['A'][-1][1]:.2f} ms, "
                  f"B {lat['B'][-1][0]:.2f} / {lat['B'][-1][1]:.2f} ms (min / median)", flush=True)
        for side in ("A", "B"):
            print(f"batch {batch} {side}: min {min(x[0] for x in lat[side]):.2f} ms, median of the round medians "
                  f"{statistics.median(x[1] for x in lat[side]):.2f} ms")
        if args.steps:
            total = {"A": 0.0, "B": 0.0}
            for i in sorted(tactic["A"]):
                if i not in tactic["B"] or tactic["A"][i] == tactic["B"][i]:
                    continue
                a, b = min(layers["A"][i]), min(layers["B"][i])
                total["A"] += a
                total["B"] += b
                print(f"  {tactic['A'][i][0][:28]:28s} A {tactic['A'][i][1]:15s} {a:8.3f}  B {tactic['B'][i][1]:15s} "
                      f"{b:8.3f} ms")
            print(f"  steps that differ: A {total['A']:.3f} ms, B {total['B']:.3f} ms (min over rounds)")


if __name__ == "__main__":
    main()
