"""Probe: PyTorch's own W4A16 kernel (tinygemm, torch._weight_int4pack_mm) at the chapter 9 bar shapes.

    python scripts/tune/probe_int4pack.py

Chapter 9 compares its GEMV and Marlin-style GEMM with cuBLAS bf16 on dequantized weights; this asks
whether the W4A16 kernel a PyTorch user already has (sm80+) is a stronger peer. The same INT4 problem
(group 128) is packed the tinygemm way: codes as uint8 [N, K/2] with even k in the high nibble, and
per-group (scale, zero) [K/128, N, 2] with w = (q - 8) * scale + zero, so zero = (8 - z) * scale for a
GPTQ zero point z. Prints the error of each candidate nibble order against the fp32 reference, and the
medians of the book's bench (events, L2 flushed) for M = 1 and 16 next to torch.matmul (cuBLAS) bf16.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from utils.bench import bench  # noqa: E402

K = N = 8192
G = 128


def problem():
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randint(0, 16, (K, N), device="cuda", generator=g, dtype=torch.int32)
    z = torch.randint(0, 16, (K // G, N), device="cuda", generator=g, dtype=torch.int32)
    s = (torch.rand((K // G, N), device="cuda", generator=g) * 0.015 + 0.005).to(torch.bfloat16)
    w = (q.float() - z.repeat_interleave(G, 0).float()) * s.float().repeat_interleave(G, 0)   # [K, N]
    return q, z, s, w


def pack(q, high_first: bool, inner_k_tiles: int):
    qn = q.t().contiguous()                                              # [N, K]
    hi, lo = (qn[:, ::2], qn[:, 1::2]) if high_first else (qn[:, 1::2], qn[:, ::2])
    return torch._convert_weight_to_int4pack(((hi << 4) | lo).to(torch.uint8), inner_k_tiles)


def main() -> None:
    print(torch.__version__, torch.cuda.get_device_name())
    q, z, s, w = problem()
    sz = torch.stack([s, ((8 - z).float() * s.float()).to(torch.bfloat16)], dim=2).contiguous()  # [K/G, N, 2]
    w_bf16 = w.to(torch.bfloat16)
    for M in (1, 16):
        a = torch.randn((M, K), device="cuda").to(torch.bfloat16)
        ref = a.float() @ w
        y = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        t_cublas = bench(lambda: torch.matmul(a, w_bf16, out=y)).ms
        print(f"M={M:2d} cublas_bf16 {t_cublas * 1e3:7.1f} us")
        for tiles in (2, 4, 8):
            for high_first in (True, False):
                try:
                    wp = pack(q, high_first, tiles)
                    out = torch._weight_int4pack_mm(a, wp, G, sz)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    t = bench(lambda: torch._weight_int4pack_mm(a, wp, G, sz)).ms
                    print(f"M={M:2d} tinygemm inner_k_tiles={tiles} high_first={high_first}: rel_l2 {err:.1e} "
                          f"{t * 1e3:7.1f} us  ({t_cublas / t:.2f}x cuBLAS)")
                except Exception as e:                                   # the op's support varies by build
                    print(f"M={M:2d} tinygemm inner_k_tiles={tiles} high_first={high_first}: "
                          f"{type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
