"""Launch each kernel that misses its bar (2026-11-29 H200 run) a few times, for Nsight Compute.

    ncu --clock-control none -k regex:'w4a16_gemv_v1|w4a16_marlin|softmax_v6|layernorm_v6|rmsnorm_v4' \
        --launch-skip 1 --launch-count 1 ... python scripts/tune/profile_misses.py

(--clock-control none: the card's clocks are left as they are.) Each target runs twice: the first
launch warms caches and the loader, ncu profiles a later one. Inputs are the chapters' bar shapes.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kernels import layernorm as L  # noqa: E402
from kernels import quant as Q  # noqa: E402
from kernels import softmax as S  # noqa: E402


def bf16_normal(shape):
    return cupy.random.standard_normal(shape, dtype=cupy.float32).astype(Q.BF16)


def main(reps: int = 2) -> None:
    K = N = 8192
    q, z, s = Q.random_int4_problem(K, N)
    qweight, qzeros = Q.pack_gptq(q, z)
    qmma = Q.pack_mma(q)
    x1, a16 = bf16_normal((1, K)), bf16_normal((16, K))
    y1, y16 = cupy.empty((1, N), Q.BF16), cupy.empty((16, N), Q.BF16)
    targets = {
        "gemv v1 1x8192x8192": lambda: Q.GEMV_VERSIONS["v1_magic"].launch(x1, qweight, qzeros, s, y1),
        "marlin v2 16x8192x8192": lambda: Q.launch_marlin(a16, qmma, qzeros, s, y16),
    }
    for shape, dt in (((1024, 65536), S.BF16), ((128, 262144), S.BF16), ((128, 262144), np.float32)):
        xs = S.random_input(shape, dt)
        ys = cupy.empty_like(xs)
        targets[f"softmax {np.dtype(dt).name} {shape}"] = lambda xs=xs, ys=ys: S.softmax(xs, out=ys)
    for shape, dt in (((128, 262144), np.float32), ((1024, 65536), S.BF16)):
        xs = S.random_input(shape, dt)
        w, b = S.random_input((shape[1],), dt), S.random_input((shape[1],), dt)
        ys = cupy.empty_like(xs)
        targets[f"layernorm {np.dtype(dt).name} {shape}"] = lambda xs=xs, w=w, b=b, ys=ys: L.layer_norm(xs, w, b, out=ys)
        targets[f"rmsnorm {np.dtype(dt).name} {shape}"] = lambda xs=xs, w=w, ys=ys: L.rms_norm(xs, w, out=ys)
    for name, fn in targets.items():
        for _ in range(reps):
            fn()
        cupy.cuda.get_current_stream().synchronize()
        print(f"launched {name} x{reps}", flush=True)


if __name__ == "__main__":
    main()
