#!/usr/bin/env python3
"""PyTorch-exported ONNX models through kiln: `kiln compile -O N` + `kiln run ENGINE` (and `kiln run
MODEL.onnx`, the reference executor) against the outputs PyTorch computed (numpy only, no torch).

Each case directory (written by export_models.py) holds model.onnx, inputs and PyTorch outputs as
.npy and meta.json. A dynamic-batch case is also run at a second batch (alt_*.npy); symbolic dims
besides the batch (meta.json's "dims", a sequence exported dynamic) are bound with --dim. An output
passes when every element satisfies |kiln - torch| <= atol * scale + rtol * |torch|, scale being
max(1, max |torch|) of that output (float32 tolerances: rtol 1e-4, atol 1e-5 by default); the
table reports the max-norm relative error max |kiln - torch| / max(1, max |torch|).

  check_models.py --kiln build/tools/kiln --cases tests/onnx/torch_models/fixtures --work DIR \
      [--levels 0,3] [--no-reference] [--filter SUBSTR]

Exit status 1 when any case fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np


def run(cmd, timeout):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def out_file(out_dir, name):
    return os.path.join(out_dir, name.replace("/", "_").replace("\\", "_") + ".npy")


def compare(case_dir, out_dir, outputs, rtol, atol):
    """(ok, max relative error, message)."""
    worst, msg = 0.0, ""
    for o in outputs:
        want = np.load(os.path.join(case_dir, o["file"]))
        path = out_file(out_dir, o["name"])
        if not os.path.exists(path):
            return False, float("inf"), "no output file for '{}'".format(o["name"])
        got = np.load(path)
        if got.shape != want.shape:
            return False, float("inf"), "output '{}': shape {} != torch {}".format(o["name"], got.shape, want.shape)
        if want.dtype.kind in "biu":
            if not np.array_equal(got, want):
                return False, float("inf"), "output '{}': integer values differ".format(o["name"])
            continue
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        if not np.all(np.isfinite(got64) == np.isfinite(want64)):
            return False, float("inf"), "output '{}': non-finite values differ".format(o["name"])
        fin = np.isfinite(want64)
        diff = np.abs(got64[fin] - want64[fin])
        scale = max(1.0, float(np.max(np.abs(want64[fin]))) if diff.size else 1.0)
        err = float(diff.max() / scale) if diff.size else 0.0
        worst = max(worst, err)
        if diff.size and not np.all(diff <= atol * scale + rtol * np.abs(want64[fin])):
            bad = np.argmax(diff - (atol * scale + rtol * np.abs(want64[fin])))
            return False, worst, "output '{}': max abs err {:.3g} (scale {:.3g}), worst element {} vs torch {}".format(
                o["name"], float(diff.max()), scale, got64[fin].flat[bad], want64[fin].flat[bad])
    return True, worst, msg


def run_case(args, case, case_dir, work):
    with open(os.path.join(case_dir, "meta.json")) as f:
        meta = json.load(f)
    model = os.path.join(case_dir, "model.onnx")
    runs = [("main", meta["inputs"], meta["outputs"])]
    if meta.get("alt"):
        runs.append(("b{}".format(meta["alt"]["batch"]), meta["alt"]["inputs"], meta["alt"]["outputs"]))
    # Symbolic dims besides the batch (a sequence exported dynamic) get the size the case was run at.
    dims = [a for k, v in sorted(meta.get("dims", {}).items()) for a in ("--dim", "{}={}".format(k, v))]
    targets = [("O{}".format(n), n) for n in args.levels]
    if args.reference:
        targets.append(("ref", None))
    results = []
    for label, level in targets:
        if level is not None:
            engine = os.path.join(work, "O{}.kiln".format(level))
            cmd = [args.kiln, "compile", model, "-o", engine, "-O", str(level)] + dims
            if meta.get("dynamic_batch") and args.batch:
                cmd += ["--batch", args.batch]  # default: kiln compile's own range (1..64)
            rc, text = run(cmd, args.timeout)
            if rc != 0:
                results.append((label, "*", False, float("inf"), "compile: " + last_line(text)))
                continue
            runnable = engine
        else:
            runnable = model
        for run_label, inputs, outputs in runs:
            out_dir = os.path.join(work, "{}_{}".format(label, run_label))
            shutil.rmtree(out_dir, ignore_errors=True)
            cmd = [args.kiln, "run", runnable, "-o", out_dir] + (dims if level is None else [])
            for i in inputs:
                cmd += ["-i", "{}={}".format(i["name"], os.path.join(case_dir, i["file"]))]
            rc, text = run(cmd, args.timeout)
            if rc != 0:
                results.append((label, run_label, False, float("inf"), "run: " + last_line(text)))
                continue
            ok, err, msg = compare(case_dir, out_dir, outputs, args.rtol, args.atol)
            results.append((label, run_label, ok, err, msg))
    return meta, results


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:400] if lines else "(no output)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cases", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--levels", default="0,1,2,3")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip `kiln run MODEL.onnx` (the reference executor)")
    ap.add_argument("--filter", default="")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--batch", default="", help="kiln compile --batch for dynamic-batch models (default: none, "
                    "as a user would compile them)")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x != ""]
    cases = sorted(d for d in os.listdir(args.cases) if os.path.exists(os.path.join(args.cases, d, "meta.json")))
    cases = [c for c in cases if args.filter in c]
    if not cases:
        print("no cases under", args.cases)
        return 1
    failed, rows = 0, 0
    print("{:52s} {:>6s} {:>4s} {:>5s} {:>6s} {:>10s}  {}".format("case", "opset", "run", "batch", "status", "max rel", ""))
    for case in cases:
        work = os.path.join(args.work, case)
        os.makedirs(work, exist_ok=True)
        meta, results = run_case(args, case, os.path.join(args.cases, case), work)
        for label, run_label, ok, err, msg in results:
            rows += 1
            failed += not ok
            print("{:52s} {:>6} {:>4s} {:>5s} {:>6s} {:>10.2e}  {}".format(
                case, meta["opset"], label, run_label, "ok" if ok else "FAIL", err, msg), flush=True)
    print("{} of {} runs failed ({} cases)".format(failed, rows, len(cases)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
