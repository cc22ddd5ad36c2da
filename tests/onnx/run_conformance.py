#!/usr/bin/env python3
"""ONNX's own backend tests through kiln, checked twice.

1. `kiln conformance` runs the node, pytorch-converted, pytorch-operator and simple test folders
   and the 9 light real models that ship in the pinned `onnx` wheel, with --expect
   tests/onnx/passing.txt: a case on that list that does not pass fails this test.
2. This script then compares the outputs kiln wrote (--save-outputs) with the stored .pb files
   itself, with onnx.numpy_helper and numpy (rtol/atol as ONNX's runner uses them), so the
   verdict does not rest on kiln's own comparison.

Usage: run_conformance.py --kiln path/to/kiln --passing tests/onnx/passing.txt --work DIR
       [--update] (rewrite the passing list from this run) [--subset node,real,...]
       [--engine N] (compile each case with kiln's compiler at -ON and run the engine instead)
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple", "real"]


def data_root():
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    if not os.path.isdir(os.path.join(root, "node")):
        sys.exit(f"run_conformance: ONNX's backend test data is not in {root}; install onnx==1.22.0 (scripts/install-deps.sh)")
    return root


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def case_dirs(root, suites):
    """Case name -> (folder with test_data_set_*, rtol, atol), as kiln names them."""
    cases = {}
    for suite in suites:
        base = os.path.join(root, suite)
        if suite == "real":
            for name in sorted(os.listdir(base)):
                with open(os.path.join(base, name, "data.json")) as f:
                    meta = json.load(f)
                model = meta["model_name"]
                cases["real_" + model] = (os.path.join(root, "light"), meta.get("rtol", 1e-3), meta.get("atol", 1e-7), model)
            continue
        for name in sorted(os.listdir(base)):
            if os.path.exists(os.path.join(base, name, "model.onnx")):
                cases[name] = (os.path.join(base, name), 1e-3, 1e-7, None)
    return cases


def outside_check(cases, passed, kiln_out):
    """Compares kiln's saved outputs of every passing case with the stored .pb files."""
    bad = []
    checked = 0
    for name in sorted(passed):
        folder, rtol, atol, real_model = cases[name]
        got_dir = os.path.join(kiln_out, name)
        if real_model:
            pairs = [(os.path.join(got_dir, "test_data_set_0", "output_0.pb"),
                      os.path.join(folder, f"light_{real_model}_output_0.pb"))]
        else:
            pairs = []
            for ds in sorted(d for d in os.listdir(folder) if d.startswith("test_data_set_")):
                k = 0
                while os.path.exists(os.path.join(folder, ds, f"output_{k}.pb")):
                    pairs.append((os.path.join(got_dir, ds, f"output_{k}.pb"), os.path.join(folder, ds, f"output_{k}.pb")))
                    k += 1
        for got_path, want_path in pairs:
            if not os.path.exists(got_path):
                bad.append(f"{name}: kiln wrote no {os.path.relpath(got_path, kiln_out)}")
                continue
            got, want = load_pb(got_path), load_pb(want_path)
            checked += 1
            if got.dtype != want.dtype or got.shape != want.shape:
                bad.append(f"{name}: {got.dtype}{list(got.shape)} vs expected {want.dtype}{list(want.shape)}")
                continue
            if want.dtype.name in ("bfloat16",):  # ml_dtypes: compare as float32 (exact in it)
                got, want = got.astype(np.float32), want.astype(np.float32)
            try:
                if np.issubdtype(want.dtype, np.floating):
                    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
                else:
                    np.testing.assert_array_equal(got, want)
            except AssertionError as e:
                bad.append(f"{name}: {str(e).strip().splitlines()[0:4]}")
    return checked, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--passing", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--subset", default=",".join(SUITES))
    ap.add_argument("--threads", default="2")
    ap.add_argument("--engine", type=int, default=-1,
                    help="compile every case into an engine at -ON and run that (kiln conformance --engine)")
    args = ap.parse_args()

    root = data_root()
    suites = [s for s in args.subset.split(",") if s]
    os.makedirs(args.work, exist_ok=True)
    kiln_out = os.path.join(args.work, "outputs")
    report = os.path.join(args.work, "conformance.json")
    cmd = [args.kiln, "conformance", *[os.path.join(root, s) for s in suites], "--quiet", "--threads", args.threads,
           "--json", report, "--save-outputs", kiln_out]
    if not args.update:
        cmd += ["--expect", args.passing]
    if args.engine >= 0:
        if args.update:
            sys.exit("run_conformance: --update records the reference executor's results; drop --engine")
        cmd += ["--engine", str(args.engine)]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    with open(report) as f:
        results = json.load(f)
    passed = {c["name"] for c in results["cases"] if c["status"] == "passed"}
    cases = case_dirs(root, suites)
    missing = sorted(set(cases) - {c["name"] for c in results["cases"]})
    if missing:
        print(f"run_conformance: kiln did not report {len(missing)} case(s): {missing[:5]}")
        rc = rc or 1

    checked, bad = outside_check(cases, passed, kiln_out)
    print(f"outside check: {checked} stored outputs of {len(passed)} passing cases compared with numpy; "
          f"{len(bad)} disagree")
    for b in bad[:20]:
        print("  outside check mismatch:", b)
    if bad:
        rc = 1

    per_suite = {}
    for s in suites:
        names = [n for n in cases if (s == "real" and n.startswith("real_")) or os.path.dirname(cases[n][0]).endswith(os.sep + s)]
        per_suite[s] = (sum(1 for n in names if n in passed), len(names))
    print("per suite (passed/total):", ", ".join(f"{s} {p}/{t}" for s, (p, t) in per_suite.items()))

    if args.update:
        with open(args.passing, "w") as f:
            f.write("# ONNX backend test cases (onnx==1.22.0 wheel) that kiln must keep passing.\n")
            f.write("# Regenerate: tests/onnx/run_conformance.py --kiln build/tools/kiln --passing tests/onnx/passing.txt "
                    "--work /tmp/conf --update\n")
            for n in sorted(passed - {b.split(":")[0] for b in bad}):
                f.write(n + "\n")
        print(f"wrote {args.passing}")
        return 0 if not bad else 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
