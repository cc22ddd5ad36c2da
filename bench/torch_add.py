#!/usr/bin/env python3
"""PyTorch's CUDA add timed like bench/cuda_add_bench.cc: 200 adds, then one element copied back."""
import time

import torch

for n in (1 << 16, 1 << 20, 1 << 24, 1 << 26):
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    c = a + b
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            c = a + b
        c[:1].cpu()
        best = min(best, (time.perf_counter() - t0) / 200 * 1e6)
    print(f"torch add n={n}  {best:.2f} us  {12.0 * n / best / 1e3:.1f} GB/s")
