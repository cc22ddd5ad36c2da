#!/usr/bin/env python3
"""Fits the gelu tail table of src/kernels/cpu/vmath_simd.inc (Note [gelu from the normal tail]).

R(a) = Q(a) e^(a^2/2), Q the standard normal's upper tail, on 16 pieces of a in [0, 15): piece
4k + j holds a + 1 in [2^k (1 + j/4), 2^k (1 + (j+1)/4)) and is expanded around its midpoint. Each
piece's degree-6 polynomial minimizes the relative error in least squares over Chebyshev nodes
(mpmath, 40 digits); the coefficients are rounded to float32, and the script reports the worst
relative error of the polynomial evaluated in float32 (Horner, FMA) against R.

    python3 scripts/fit_gelu_tail.py    # needs mpmath and numpy; prints the C++ table
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
DEG = 6


def tail_ratio(a):
    return 0.5 * mp.erfc(a / mp.sqrt(2)) * mp.exp(a * a / 2)


def pieces():
    for k in range(4):
        for j in range(4):
            lo = 2**k * (1 + j / 4) - 1
            w = 2**k / 4
            yield lo, lo + w, lo + w / 2


def fit(lo, hi, mid, nodes=120):
    us = [(hi - lo) / 2 * mp.cos(mp.pi * (i + 0.5) / nodes) + (lo + hi) / 2 - mid for i in range(nodes)]
    a = mp.matrix(nodes, DEG + 1)
    b = mp.matrix(nodes, 1)
    for i, u in enumerate(us):
        r = tail_ratio(mid + u)
        for j in range(DEG + 1):
            a[i, j] = u**j / r
        b[i] = 1
    c = mp.lu_solve(a.T * a, a.T * b)
    return [np.float32(float(c[j])) for j in range(DEG + 1)]


def main():
    table = [[None] * 16 for _ in range(DEG + 1)]
    worst = 0.0
    for p, (lo, hi, mid) in enumerate(pieces()):
        c = fit(lo, hi, mid)
        for j in range(DEG + 1):
            table[j][p] = c[j]
        for a in np.linspace(lo, hi, 300, endpoint=False):
            a32 = np.float32(a)
            u = np.float32(a32 - np.float32(mid))
            q = c[DEG]
            for j in range(DEG - 1, -1, -1):
                q = np.float32(np.float64(q) * np.float64(u) + np.float64(c[j]))  # one rounding: FMA
            worst = max(worst, abs(float(q) / float(tail_ratio(mp.mpf(float(a32)))) - 1))
    print(f"// worst relative error evaluated in float32: {worst:.3g}")
    for row in table:  # six to a line
        cells = [f"{float(v):.9g}f" for v in row]
        print("    {" + ",\n     ".join(", ".join(cells[i:i + 6]) for i in range(0, 16, 6)) + "},")


if __name__ == "__main__":
    main()
