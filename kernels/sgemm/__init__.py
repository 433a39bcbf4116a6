"""fp32 GEMM, chapters 10-11: op ``sgemm``, one version ladder with one numbering (chapter 10 owns v0 and v1,
chapter 11 continues from v2).

``C = alpha * A @ B + beta * C`` for row-major, C-contiguous float32 matrices ``A [M, K]``, ``B [K, N]``,
``C [M, N]`` on the GPU, any ``M, N, K >= 1``; shapes are written ``M x N x K`` everywhere (the ledger, the
ladder, the record). ``beta == 0`` never reads C, as BLAS: an output poisoned with NaN stays a valid output.
Every version takes ``(a, b, c)`` and the keywords ``alpha=1.0, beta=0.0``; it predicates its own tails,
so nothing is padded by the caller. Offsets in the kernels are 32-bit: :func:`problem` refuses matrices of
2^31 elements or more.

One .cu file per version beside this module (``v00_uncoalesced.cu``, ``v01_coalesced.cu``, ...), each with
its ``// [[snippet: sgemm_vN]]``. The chapter's measurements live beside the op, imported on their own:
:mod:`.ledger` (FLOPs, bytes, intensity, floor times, the roofline placement), :mod:`.traffic` (each
version's loads as requests, sectors and lines; Nsight Compute's counters beside them) and :mod:`.ladders`
(the ladder, its peers cuBLAS and PyTorch, the tables read back from the record). Importing this package
never needs a GPU.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from utils.arrays import ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version

TILE = 32                    # v0, v1: a block of 32 x 32 threads covers a 32 x 32 tile of C
MAX_GRID_Y = 65535           # gridDim.y limit: v0 and v1 put the column tiles there
INDEX_LIMIT = 2**31          # every matrix has fewer elements than this (32-bit offsets in the kernels)

V0_SOURCE = KernelSource("sgemm/v00_uncoalesced.cu")
V1_SOURCE = KernelSource("sgemm/v01_coalesced.cu")


# --- the problem -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated SGEMM: the sizes, alpha and beta, and the arrays (None in a CPU-only plan)."""
    M: int
    N: int
    K: int
    alpha: float = 1.0
    beta: float = 0.0
    a: Any = None
    b: Any = None
    c: Any = None

    @property
    def out(self):
        return self.c

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.N, self.K)


def shape_problem(M: int, N: int, K: int, alpha: float = 1.0, beta: float = 0.0) -> Problem:
    """A problem of this shape without arrays: plans, the ledger and the byte model on a CPU."""
    dims = {"M": M, "N": N, "K": K}
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    M, N, K = int(M), int(N), int(K)
    for name, rows, cols in (("a", M, K), ("b", K, N), ("c", M, N)):
        if rows * cols >= INDEX_LIMIT:
            raise ValueError(f"{name}: {rows} x {cols} = {rows * cols:,} elements; the kernels index with 32-bit "
                             f"offsets, so each matrix must have fewer than 2**31 = {INDEX_LIMIT:,} (split the GEMM)")
    for name, v in (("alpha", alpha), ("beta", beta)):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected a real number, got {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"{name}: expected a finite number, got {v!r}")
    return Problem(M, N, K, float(alpha), float(beta))


def _span(x) -> tuple[int, int]:
    """[first byte, last byte + 1) of a C-contiguous device array."""
    start = int(x.__cuda_array_interface__["data"][0])
    return start, start + int(x.size) * np.dtype(x.dtype).itemsize


def problem(a, b, c, *, alpha: float = 1.0, beta: float = 0.0) -> Problem:
    """Validate ``a`` (M x K), ``b`` (K x N) and ``c`` (M x N): float32, 2-D, C-contiguous, 4-byte aligned, on
    one GPU, ``c`` not overlapping ``a`` or ``b``; alpha and beta finite. Versions that load 16 bytes at a
    time check their stronger alignment in their plans."""
    expect_array(a, "a", dtype=np.float32, ndim=2, align=4)
    M, K = (int(s) for s in a.shape)
    expect_array(b, "b", dtype=np.float32, ndim=2, align=4)
    if int(b.shape[0]) != K:
        raise ValueError(f"b: expected {K} rows (a is {M} x {K}, so b must be {K} x N), got shape {tuple(b.shape)}")
    N = int(b.shape[1])
    expect_array(c, "c", dtype=np.float32, shape=(M, N), align=4)
    expect_same_device(a, b, c)
    p = shape_problem(M, N, K, alpha, beta)
    c0, c1 = _span(c)
    for name, x in (("a", a), ("b", b)):
        x0, x1 = _span(x)
        if c0 < x1 and x0 < c1:
            raise ValueError(f"c: overlaps the memory of {name}; the kernels read {name} while they write c: "
                             "pass a separate output array")
    return dataclasses.replace(p, a=a, b=b, c=c)


# --- the reference and the cost model ------------------------------------------------------------------

def reference(a, b, c=None, alpha: float = 1.0, beta: float = 0.0):
    """``alpha * a @ b + beta * c`` in float64, wherever the arrays live (NumPy or CuPy). ``beta == 0``
    ignores ``c`` (it may hold NaN), as the kernels and BLAS do."""
    from utils.arrays import xp
    m = xp(a)
    out = m.matmul(a.astype(m.float64), b.astype(m.float64))
    if alpha != 1.0:
        out *= float(alpha)
    if beta != 0.0:
        if c is None:
            raise ValueError("reference: beta != 0 needs c")
        out += float(beta) * c.astype(m.float64)
    return out


def flops(M: int, N: int, K: int) -> int:
    """2 M N K: one multiply and one add per term of every dot product (the epilogue's 2-3 per element of C
    are left out, as every GEMM figure counts)."""
    return 2 * int(M) * int(N) * int(K)


def nbytes(M: int, N: int, K: int, beta: float = 0.0, itemsize: int = 4) -> int:
    """Minimum bytes: A and B read once, C written once (and read once when beta != 0)."""
    return itemsize * (M * K + K * N + M * N * (2 if beta else 1))


def intensity(M: int, N: int, K: int, beta: float = 0.0) -> float:
    """Arithmetic intensity of the minimum traffic, FLOP per byte (n / 6 for a square n^3 with beta 0)."""
    return flops(M, N, K) / nbytes(M, N, K, beta)


# --- plans -------------------------------------------------------------------------------------------

def naive_grid(p: Problem) -> tuple[int, int, int]:
    """v0, v1: one block per 32 x 32 tile of C; x walks the row tiles, y the column tiles."""
    return (ceil_div(p.M, TILE), ceil_div(p.N, TILE), 1)


def plan_naive(kernel: str):
    def plan(p: Problem, config=None) -> list[Launch]:
        grid = naive_grid(p)
        if grid[1] > MAX_GRID_Y:
            raise Unsupported(f"N = {p.N}: {kernel} puts the {grid[1]} column tiles on grid y, which holds at most "
                              f"{MAX_GRID_Y} (N <= {MAX_GRID_Y * TILE})")
        args = (np.int32(p.M), np.int32(p.N), np.int32(p.K), np.float32(p.alpha), p.a, p.b, np.float32(p.beta), p.c)
        return [Launch(kernel, grid, (TILE, TILE, 1), args)]
    return plan


SGEMM = Registry("sgemm", problem, [
    Version("sgemm_v0_uncoalesced",
            "one thread per element of C from global memory; a warp's lanes take 32 rows: A loads K floats apart",
            V0_SOURCE, plan_naive("sgemm_v0_uncoalesced"), snippet="sgemm_v0"),
    Version("sgemm_v1_coalesced",
            "v0 with threadIdx.x and threadIdx.y swapped: a warp's lanes take 32 columns, B and C move 128 B",
            V1_SOURCE, plan_naive("sgemm_v1_coalesced"), parent="v0_uncoalesced", snippet="sgemm_v1"),
])


def sgemm(a, b, c, *, alpha: float = 1.0, beta: float = 0.0, version: str = "v1_coalesced"):
    """``c = alpha * a @ b + beta * c`` with one version of :data:`SGEMM`; returns ``c``."""
    return SGEMM[version](a, b, c, alpha=alpha, beta=beta)
