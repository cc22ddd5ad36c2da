#!/usr/bin/env python3
"""Writes .npy/.npz fixtures with NumPy for kiln's io tests, plus a manifest of their values.

Usage: make_npy.py OUT_DIR

The manifest (OUT_DIR/manifest.txt) has one line per array:
    FILE KEY DTYPE SHAPE VALUES...
KEY is '-' for a .npy file, DTYPE a kiln dtype name (f32, i64, bool, ...), SHAPE the dims joined
by ',' ('scalar' for 0-d), VALUES the elements in C order (floats exactly, as repr() writes them).
Exits non-zero (failing the tests that need the fixtures) when NumPy cannot be imported.
"""
import os
import sys

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - the failure is the point
    sys.exit(f"make_npy.py: NumPy is not importable ({e}); run scripts/install-deps.sh")

KILN_NAMES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "int8": "i8", "uint8": "u8",
    "int32": "i32", "int64": "i64", "bool": "bool",
}


def values(dtype, shape):
    """Deterministic, nonzero-rich values exactly representable in `dtype`."""
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.int64)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = ((i * 37) % 101 - 50) / 8.0
    elif dt.kind == "b":
        v = (i * 5) % 3 == 0
    elif dt == np.uint8:
        v = (i * 37) % 251 + 3
    elif dt == np.int8:
        v = (i * 37) % 101 - 50
    elif dt == np.int32:
        v = (i * 7919) % 200003 - 100000
    else:  # int64: beyond what a double holds exactly
        v = ((i * 7919) % 200003 - 100000) * 1000000000007
    return v.astype(dt).reshape(shape)


def fmt(x):
    if isinstance(x, (bool, np.bool_)):
        return "1" if x else "0"
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    return str(int(x))


def manifest_line(fname, key, arr):
    shape = ",".join(str(d) for d in arr.shape) if arr.ndim else "scalar"
    name = KILN_NAMES[arr.dtype.newbyteorder("=").name]
    vals = " ".join(fmt(x) for x in arr.ravel(order="C").tolist())
    return f"{fname} {key} {name} {shape} {vals}".rstrip()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_npy.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lines = []

    def save(fname, arr, version=None):
        path = os.path.join(out, fname)
        with open(path, "wb") as f:
            if version is None:
                np.save(f, arr)
            else:
                np.lib.format.write_array(f, arr, version=version)
        lines.append(manifest_line(fname, "-", arr))

    dtypes = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"]
    for dt in dtypes:
        name = KILN_NAMES[dt]
        save(f"{name}_2x3x4.npy", values(dt, (2, 3, 4)))
        save(f"{name}_7.npy", values(dt, (7,)))
        save(f"{name}_scalar.npy", values(dt, ()))
        save(f"{name}_empty.npy", values(dt, (0, 3)))
    # Fortran order: a transposed array is saved column-major with fortran_order True.
    save("f32_fortran.npy", np.asfortranarray(values("float32", (3, 4, 5))))
    save("i64_transposed.npy", values("int64", (3, 5)).T)
    # Big-endian data.
    for dt in ["float32", "float64", "float16", "int32", "int64"]:
        arr = values(dt, (2, 5)).astype(np.dtype(dt).newbyteorder(">"))
        save(f"{KILN_NAMES[dt]}_bigendian.npy", arr)
    save("f32_bigendian_fortran.npy", np.asfortranarray(values("float32", (4, 3)).astype(">f4")))
    # Format versions 2.0 and 3.0.
    save("f64_v2.npy", values("float64", (3, 3)), version=(2, 0))
    save("i32_v3.npy", values("int32", (2, 2)), version=(3, 0))
    # Special values.
    save("f32_special.npy", np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], dtype=np.float32))
    # Archives, stored and deflated.
    members = {"weights": values("float32", (4, 3)), "bias": values("float64", (3,)),
               "mask": values("bool", (2, 2)), "empty": values("int64", (0,)), "step": values("int32", ())}
    np.savez(os.path.join(out, "stored.npz"), **members)
    np.savez_compressed(os.path.join(out, "compressed.npz"), **members)
    for fname in ("stored.npz", "compressed.npz"):
        for key, arr in members.items():
            lines.append(manifest_line(fname, key, arr))

    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"make_npy.py: wrote {len(lines)} arrays to {out} with NumPy {np.__version__}")


if __name__ == "__main__":
    main()
