#!/usr/bin/env python3
"""Checks a model kiln exported (tests/onnx/export_test.cc) with ONNX and ONNX Runtime.

Each DIR holds model.onnx, input_<i>.pb (graph inputs in order) and output_<i>.pb (kiln's outputs,
graph outputs in order). For each: onnx.checker.check_model(full_check=True) (which includes strict
shape inference against the value_info kiln wrote), then ONNX Runtime runs the model on the inputs
and every output must match kiln's: floats with |ort - kiln| <= rtol * |kiln| + atol elementwise,
integers and bools exactly. Prints one line per output and exits non-zero on any failure.

With --digits CSV, each argument is instead a digits model `kiln train --export` wrote: after the
checker, ONNX Runtime classifies the fixed 360-row test split and must reach --min-accuracy.
"""
import argparse
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def load_pbs(folder, stem):
    paths = sorted(glob.glob(os.path.join(folder, stem + "_*.pb")),
                   key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    arrays = []
    for p in paths:
        t = onnx.TensorProto()
        with open(p, "rb") as f:
            t.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(t))
    return arrays


def check(folder, rtol, atol):
    model_path = os.path.join(folder, "model.onnx")
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"{folder}: checker ok (full_check), opset {model.opset_import[0].version}, "
          f"{len(model.graph.node)} nodes: {' '.join(ops)}")

    inputs = load_pbs(folder, "input")
    expected = load_pbs(folder, "output")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    if len(names) != len(inputs):
        print(f"  FAIL: model has {len(names)} inputs, {len(inputs)} input files")
        return False
    got = sess.run(None, dict(zip(names, inputs)))
    if len(got) != len(expected):
        print(f"  FAIL: model has {len(got)} outputs, {len(expected)} output files")
        return False
    ok = True
    for out, g, e in zip(sess.get_outputs(), got, expected):
        g = np.asarray(g)
        if g.shape != e.shape or g.dtype != e.dtype:
            print(f"  FAIL {out.name}: ONNX Runtime gave {g.dtype}{list(g.shape)}, kiln {e.dtype}{list(e.shape)}")
            ok = False
            continue
        if np.issubdtype(e.dtype, np.floating):
            g64, e64 = g.astype(np.float64), e.astype(np.float64)
            if not np.array_equal(np.isnan(g64), np.isnan(e64)):
                print(f"  FAIL {out.name}: NaNs differ")
                ok = False
                continue
            mask = ~np.isnan(e64)
            diff = np.abs(g64[mask] - e64[mask])
            rel = diff / np.maximum(np.abs(e64[mask]), atol / rtol) if diff.size else np.zeros(1)
            worst = float(rel.max()) if rel.size else 0.0
            bad = diff > rtol * np.abs(e64[mask]) + atol
            status = "FAIL" if bad.any() else "ok"
            print(f"  {status} {out.name} {e.dtype}{list(e.shape)}: max relative error {worst:.3g} "
                  f"(max abs {float(diff.max()) if diff.size else 0.0:.3g})")
            ok = ok and not bad.any()
        else:
            same = np.array_equal(g, e)
            print(f"  {'ok' if same else 'FAIL'} {out.name} {e.dtype}{list(e.shape)}: "
                  f"{'exact' if same else str(int((g != e).sum())) + ' elements differ'}")
            ok = ok and same
    return ok


def check_digits(model_path, csv, min_accuracy):
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    rows = np.loadtxt(csv, delimiter=",", dtype=np.float64)
    test = rows[1437:]
    x = (test[:, :64] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = test[:, 64].astype(np.int64)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {sess.get_inputs()[0].name: x})
    acc = float((logits.argmax(1) == y).mean())
    ok = acc >= min_accuracy
    print(f"{model_path}: checker ok (full_check); ONNX Runtime test accuracy {100 * acc:.2f}% on {len(y)} images "
          f"({'ok' if ok else 'FAIL'}: minimum {100 * min_accuracy:.2f}%)")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--digits", help="digits CSV: check digits models instead of test folders")
    ap.add_argument("--min-accuracy", type=float, default=0.97)
    args = ap.parse_args()
    ok = True
    for d in args.dirs:
        try:
            if args.digits:
                ok = check_digits(d, args.digits, args.min_accuracy) and ok
            else:
                ok = check(d, args.rtol, args.atol) and ok
        except Exception as ex:  # the checker's and ORT's errors: report and go on
            print(f"{d}: FAIL: {type(ex).__name__}: {ex}")
            ok = False
    print("all checks passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
