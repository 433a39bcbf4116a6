"""Probe: PyTorch's own W4A16 kernel (tinygemm, torch._weight_int4pack_mm) at the chapter 9 bar shapes.

    python scripts/tune/probe_int4pack.py

Chapter 9 compares its GEMV and Marlin-style GEMM with cuBLAS bf16 on dequantized weights; this asks
whether the W4A16 kernel a PyTorch user already has (sm80+) is a stronger peer, and which tinygemm tiling
(inner_k_tiles 2, 4, 8) is its fastest, the one quant.TINYGEMM_INNER_K_TILES names. The INT4 problem
(group 128) is the chapter's own (quant.random_int4_problem), packed by quant.pack_tinygemm. Prints each
tiling's error against the fp32 reference and the medians of the book's bench (events, L2 flushed) for
M = 1 and 16, next to cuBLAS bf16 (cupy.matmul) on the same weights dequantized.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import torch  # noqa: E402

from kernels import quant as Q  # noqa: E402
from utils.arrays import as_torch, from_torch  # noqa: E402
from utils.bench import bench  # noqa: E402
from utils.check import rel_l2_error  # noqa: E402

K = N = 8192


def main() -> None:
    print(torch.__version__, torch.cuda.get_device_name())
    q, z, s = Q.random_int4_problem(K, N)
    w = Q.dequantize_int4(q, s, z)                                          # fp32 [K, N]
    w_bf16 = w.astype(Q.BF16)
    packed = {t: Q.pack_tinygemm(q, z, s, inner_k_tiles=t) for t in (2, 4, 8)}
    for M in (1, 16):
        a = cupy.random.standard_normal((M, K), dtype=cupy.float32).astype(Q.BF16)
        ref = a.astype(cupy.float32) @ w
        y = cupy.empty((M, N), dtype=Q.BF16)
        t_cublas = bench(lambda: cupy.matmul(a, w_bf16, out=y)).ms
        print(f"M={M:2d} cublas_bf16 {t_cublas * 1e3:7.1f} us")
        a_t = as_torch(a)
        for tiles, (wt, sz) in packed.items():
            err = rel_l2_error(from_torch(torch._weight_int4pack_mm(a_t, wt, Q.GROUP, sz)), ref)
            t = bench(lambda wt=wt, sz=sz: torch._weight_int4pack_mm(a_t, wt, Q.GROUP, sz)).ms
            print(f"M={M:2d} tinygemm inner_k_tiles={tiles}: rel_l2 {err:.1e} {t * 1e3:7.1f} us "
                  f"({t_cublas / t:.2f}x cuBLAS)")


if __name__ == "__main__":
    main()
