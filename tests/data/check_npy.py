#!/usr/bin/env python3
"""Loads the .npy/.npz files kiln wrote and checks them with NumPy against kiln's manifest.

Usage: check_npy.py DIR      (DIR/manifest.txt in the format make_npy.py documents)
Exits 0 when every array NumPy loads has the manifest's dtype, shape and values; prints each
mismatch and exits 1 otherwise (2 when NumPy cannot be imported).
"""
import os
import sys

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"check_npy.py: NumPy is not importable ({e}); run scripts/install-deps.sh")
    sys.exit(2)

NUMPY_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "i8": "int8", "u8": "uint8",
               "i32": "int32", "i64": "int64", "bool": "bool"}


def expected_array(dtype, shape, vals):
    dt = np.dtype(NUMPY_NAMES[dtype])
    if dt.kind == "f":
        data = [float(v) for v in vals]
    else:
        data = [int(v) for v in vals]
    return np.array(data, dtype=np.float64 if dt.kind == "f" else object).astype(dt).reshape(shape)


def main():
    d = sys.argv[1]
    failures, checked = [], 0
    archives = {}
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            fname, key, dtype, shape_s = parts[:4]
            shape = () if shape_s == "scalar" else tuple(int(x) for x in shape_s.split(","))
            want = expected_array(dtype, shape, parts[4:])
            path = os.path.join(d, fname)
            where = fname if key == "-" else f"{fname}[{key}]"
            try:
                if key == "-":
                    got = np.load(path, allow_pickle=False)
                else:
                    if path not in archives:
                        archives[path] = np.load(path, allow_pickle=False)
                    got = archives[path][key]
            except Exception as e:  # noqa: BLE001 - report any load failure
                failures.append(f"{where}: NumPy could not load it: {e}")
                continue
            checked += 1
            if got.dtype != want.dtype:
                failures.append(f"{where}: dtype {got.dtype}, expected {want.dtype}")
            elif got.shape != want.shape:
                failures.append(f"{where}: shape {got.shape}, expected {want.shape}")
            elif not np.array_equal(got, want, equal_nan=want.dtype.kind == "f"):
                failures.append(f"{where}: values differ: got {got.ravel()[:8]}, expected {want.ravel()[:8]}")
    for msg in failures:
        print("check_npy.py:", msg)
    print(f"check_npy.py: {checked} arrays checked, {len(failures)} mismatches")
    sys.exit(1 if failures or checked == 0 else 0)


if __name__ == "__main__":
    main()
