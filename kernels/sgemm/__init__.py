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
import hashlib
import math
from typing import Any

import numpy as np

from utils.arrays import ceil_div
from utils.build import KernelSource, local_includes
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version, config_type

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


# --- chapter 11: tiled versions, v2-v9 -----------------------------------------------------------------
# Every version from v2 on is a template compiled through name expressions: its tile sizes are a named-tuple
# config. v2-v8 instantiate their default only (one or two kernels each: v5-v9 come in a 16-byte and a
# 4-byte instance, VEC below); v9 instantiates its tuning space.

MAX_THREADS = 1024
STATIC_SMEM = 48 * 1024          # static __shared__ arrays: at most 48 KiB per block
MAX_GRID_X = 2**31 - 1

Tile = config_type("Tile", "bm bn bk tm tn")             # v2-v5, v7: block tile and thread tile
V6 = config_type("V6", "bm bn bk tm tn layout")          # layout: "pad" or "xor" (the switch of v6)
Warp = config_type("Warp", "bm bn bk wm wn wniter")     # v8: block tile, warp tile, sub-tiles across N
V9 = config_type("V9", "bm bn bk wm wn wniter min_blocks group_m")

V2_TILE = Tile(32, 32, 32, 1, 1)
V3_TILE = Tile(64, 64, 8, 8, 1)
V4_TILE = Tile(128, 128, 8, 8, 8)
V5_TILE = V4_TILE
V6_CONFIGS = (V6(128, 128, 8, 8, 8, "xor"), V6(128, 128, 8, 8, 8, "pad"))
V7_TILE = V4_TILE
V8_WARP = Warp(128, 128, 8, 64, 32, 2)
LAYOUTS = {"pad": 1, "xor": 2}   # the LAYOUT template argument of atile.cuh
# v9's space, around v8's tiles: the tile order (groups of 8 row tiles, or v8's row by row), BK 16 (half the
# barriers per FLOP), the occupancy hint off, and two tiles of 128 threads (fewer registers per block, more
# blocks per SM). Each compiles spill-free for sm_90 (tests/test_compile.py); the whole sweep at 4096^3 is six
# timings of a few milliseconds each, well under a minute on an H200.
V9_CONFIGS = tuple(V9(*c) for c in (
    (128, 128, 8, 64, 32, 2, 2, 8),      # the default: v8's tiles, groups of 8 row tiles
    (128, 128, 8, 64, 32, 2, 2, 1),      # v8's tiles and v8's order: what the order alone is worth
    (128, 128, 16, 64, 32, 2, 1, 8),     # twice the K per barrier (with 2 blocks per SM its 128 registers spill)
    (128, 128, 8, 64, 32, 2, 1, 8),      # no occupancy hint: ptxas may use up to 255 registers
    (128, 64, 16, 64, 32, 2, 2, 8),      # 128 threads, 8 x 8 per thread, half the block tile
    (64, 128, 16, 32, 64, 4, 2, 8),      # 128 threads, 4 x 16 per thread
))
V9_DEFAULT = V9_CONFIGS[0]


def tile_name(kernel: str, *args) -> str:
    """A name expression: ``sgemm_v5_vec4<128, 128, 8, 8, 8, true>``."""
    return f"{kernel}<{', '.join(str(a).lower() if isinstance(a, bool) else str(a) for a in args)}>"


def v2_name(t: Tile) -> str:
    return tile_name("sgemm_v2_smem_tile", t.bm)


def v3_name(t: Tile) -> str:
    return tile_name("sgemm_v3_reg1d", t.bm, t.bn, t.bk, t.tm)


def v4_name(t: Tile) -> str:
    return tile_name("sgemm_v4_reg2d", t.bm, t.bn, t.bk, t.tm, t.tn)


def v5_name(t: Tile, vec: bool) -> str:
    return tile_name("sgemm_v5_vec4", t.bm, t.bn, t.bk, t.tm, t.tn, vec)


def v6_name(c: V6, vec: bool) -> str:
    return tile_name("sgemm_v6_swizzle", c.bm, c.bn, c.bk, c.tm, c.tn, LAYOUTS[c.layout], vec)


def v7_name(t: Tile, vec: bool) -> str:
    return tile_name("sgemm_v7_double_buffer", t.bm, t.bn, t.bk, t.tm, t.tn, vec)


def v8_name(w: Warp, vec: bool) -> str:
    return tile_name("sgemm_v8_warptile", w.bm, w.bn, w.bk, w.wm, w.wn, w.wniter, vec)


def v9_name(c: V9, vec: bool, whole: bool = False) -> str:
    return tile_name("sgemm_v9_tuned", c.bm, c.bn, c.bk, c.wm, c.wn, c.wniter, c.min_blocks, c.group_m, vec, whole)


V9_PATHS = ((True, True), (True, False), (False, False))   # (vec, whole): whole needs the 16-byte path


def is_vec_instance(name: str) -> bool:
    """Whether a v5-v9 name expression is a 16-byte (VEC) instance: VEC is the last template argument, except
    in v9, where WHOLE follows it."""
    args = [a.strip() for a in name.rstrip(">").split("<", 1)[1].split(",")]
    flag = args[-2] if name.startswith("sgemm_v9_tuned<") else args[-1]
    if flag not in ("true", "false"):
        raise ValueError(f"{name!r} is not a v5-v9 instance with a VEC argument")
    return flag == "true"


BOTH = (True, False)
V2_SOURCE = KernelSource("sgemm/v02_smem_tile.cu", name_expressions=(v2_name(V2_TILE),))
V3_SOURCE = KernelSource("sgemm/v03_reg1d.cu", name_expressions=(v3_name(V3_TILE),))
V4_SOURCE = KernelSource("sgemm/v04_reg2d.cu", name_expressions=(v4_name(V4_TILE),))
V5_SOURCE = KernelSource("sgemm/v05_vec4.cu", name_expressions=tuple(v5_name(V5_TILE, v) for v in BOTH))
V6_SOURCE = KernelSource("sgemm/v06_swizzle.cu", name_expressions=tuple(
    v6_name(c, v) for c in V6_CONFIGS for v in BOTH))
V7_SOURCE = KernelSource("sgemm/v07_double_buffer.cu", name_expressions=tuple(v7_name(V7_TILE, v) for v in BOTH))
V8_SOURCE = KernelSource("sgemm/v08_warptile.cu", name_expressions=tuple(v8_name(V8_WARP, v) for v in BOTH))
V9_SOURCE = KernelSource("sgemm/v09_tuned.cu", name_expressions=tuple(
    v9_name(c, v, w) for c in V9_CONFIGS for v, w in V9_PATHS))


def aligned16(x) -> bool:
    """A device array's data pointer is a multiple of 16 bytes (True for a plan without arrays)."""
    return x is None or _span(x)[0] % 16 == 0


def vec_ok(p: Problem) -> bool:
    """v5-v9 take the 16-byte path (VEC = true) only where every 4-float group of A's and B's rows and of
    C's rows starts 16-byte aligned and lies wholly inside or wholly outside its row: K and N multiples of
    4 and A, B, C 16-byte aligned. Elsewhere they take the 4-byte path, on the same tiles."""
    return p.K % 4 == 0 and p.N % 4 == 0 and all(aligned16(x) for x in (p.a, p.b, p.c))


def args_of(p: Problem) -> tuple:
    return (np.int32(p.M), np.int32(p.N), np.int32(p.K), np.float32(p.alpha), p.a, p.b, np.float32(p.beta), p.c)


def threads_of(c) -> int:
    """Threads per block of a config: one per TM x TN thread tile (v2-v7), 32 per warp tile (v8, v9)."""
    if hasattr(c, "wm"):
        return (c.bm // c.wm) * (c.bn // c.wn) * 32
    return (c.bm // c.tm) * (c.bn // c.tn)


def smem_bytes(c, stages: int = 1) -> int:
    """Static shared memory of a config: the A tile (with v6's padding) and the B tile, per stage."""
    pad = 32 // c.bk if getattr(c, "layout", "xor") == "pad" else 0
    return 4 * stages * (c.bk * (c.bm + pad) + c.bk * c.bn)


def check_config(kernel: str, c, *, stages: int = 1, vec4: bool = False) -> None:
    """Raise Unsupported where a config cannot build or launch: threads, static shared memory, tiles that do
    not divide, groups of 4 the 16-byte accesses need, and the layouts' conditions (atile.cuh)."""
    def no(why):
        raise Unsupported(f"{kernel} {c}: {why}")
    if hasattr(c, "wm"):
        if c.bm % c.wm or c.bn % c.wn:
            no(f"the warp tile {c.wm} x {c.wn} must divide the block tile {c.bm} x {c.bn}")
        if c.wn % c.wniter or (c.wm * c.wn) % (32 * 16 * c.wniter):
            no("each warp tile must split into sub-tiles of 32 lanes x 4 x 4 results: wm * wn / (512 * wniter) "
               "must be a whole number of sub-tiles across M")
        wmiter = c.wm * c.wn // (32 * 16 * c.wniter)
        if wmiter < 1 or c.wm % wmiter or (c.wm // wmiter // 4) * (c.wn // c.wniter // 4) != 32:
            no("a sub-tile must hold exactly one 4 x 4 thread tile per lane (32 in all)")
    else:
        if c.bm % c.tm or c.bn % c.tn:
            no(f"the thread tile {c.tm} x {c.tn} must divide the block tile {c.bm} x {c.bn}")
    if vec4 and (c.bk % 4 or c.bn % 4 or getattr(c, "tm", 4) % 4 or getattr(c, "tn", 4) % 4):
        no("the 16-byte accesses move groups of 4: bk, bn and the thread tile must be multiples of 4")
    if vec4 and (c.bm % 32 or not 4 <= c.bk <= 32):
        no("the transposed A tile's layouts permute groups of 32 rows and take 4 <= bk <= 32")
    if getattr(c, "layout", None) == "pad" and (32 // c.bk) % 4:
        no(f"padding rows by 32 / bk = {32 // c.bk} floats breaks the 16-byte alignment of the LDS.128 reads; "
           "it works for bk <= 8 (use layout='xor')")
    t = threads_of(c)
    if not 32 <= t <= MAX_THREADS or t % 32:
        no(f"{t} threads per block: expected a multiple of 32 between 32 and {MAX_THREADS}")
    if getattr(c, "min_blocks", 1) < 1 or getattr(c, "group_m", 1) < 1:
        no("min_blocks and group_m must be positive")
    if smem_bytes(c, stages) > STATIC_SMEM:
        no(f"{smem_bytes(c, stages):,} bytes of static shared memory, above the {STATIC_SMEM:,} a block may "
           "declare statically")


def tile_grid(p: Problem, c, kernel: str) -> tuple[int, int, int]:
    """v2-v8: x walks the column tiles, y the row tiles (gridDim.y <= 65535)."""
    grid = (ceil_div(p.N, c.bn), ceil_div(p.M, c.bm), 1)
    if grid[1] > MAX_GRID_Y:
        raise Unsupported(f"M = {p.M}: {kernel} puts the {grid[1]} row tiles on grid y, which holds at most "
                          f"{MAX_GRID_Y} (M <= {MAX_GRID_Y * c.bm})")
    return grid


def plan_tiled(kernel: str, name, *, stages: int = 1, vec4: bool = False):
    """The plan of v2-v8: check the config, pick the 16-byte or 4-byte instance (v5 on), one launch."""
    def plan(p: Problem, c) -> list[Launch]:
        check_config(kernel, c, stages=stages, vec4=vec4)
        expr = name(c, vec_ok(p)) if vec4 else name(c)
        return [Launch(expr, tile_grid(p, c, kernel), (threads_of(c), 1, 1), args_of(p))]
    return plan


def whole_tiles(p: Problem, c: V9) -> bool:
    """v9's untested loads (iterator.cuh) apply: the 16-byte path, and the tiles divide M, N and K."""
    return vec_ok(p) and p.M % c.bm == 0 and p.N % c.bn == 0 and p.K % c.bk == 0


def plan_v9(p: Problem, c: V9) -> list[Launch]:
    """v9: one block per tile on a one-dimensional grid, the tile order inside the kernel; the instance without
    bounds tests where the tiles divide the shape."""
    check_config("sgemm_v9_tuned", c, stages=2, vec4=True)
    blocks = ceil_div(p.M, c.bm) * ceil_div(p.N, c.bn)
    if blocks > MAX_GRID_X:
        raise Unsupported(f"{blocks} tiles: more than grid x holds ({MAX_GRID_X})")
    expr = v9_name(c, vec_ok(p), whole_tiles(p, c))
    return [Launch(expr, (blocks, 1, 1), (threads_of(c), 1, 1), args_of(p))]


def fixed(config):
    """configs/default of a version with one instantiated config."""
    return (config,), (lambda p: config)


SGEMM = Registry("sgemm", problem, [
    Version("sgemm_v0_uncoalesced",
            "one thread per element of C from global memory; a warp's lanes take 32 rows: A loads K floats apart",
            V0_SOURCE, plan_naive("sgemm_v0_uncoalesced"), snippet="sgemm_v0"),
    Version("sgemm_v1_coalesced",
            "v0 with threadIdx.x and threadIdx.y swapped: a warp's lanes take 32 columns, B and C move 128 B",
            V1_SOURCE, plan_naive("sgemm_v1_coalesced"), parent="v0_uncoalesced", snippet="sgemm_v1"),
    Version("sgemm_v2_smem_tile",
            "v1 with 32 x 32 tiles of A and B staged in shared memory, 32 k at a time",
            V2_SOURCE, plan_tiled("sgemm_v2_smem_tile", v2_name), parent="v1_coalesced", snippet="sgemm_v2",
            configs=fixed(V2_TILE)[0], default=fixed(V2_TILE)[1]),
    Version("sgemm_v3_reg1d",
            "v2 with 8 results per thread down a column of C: one Bs load feeds 8 FMAs; 64 x 64 x 8 tiles",
            V3_SOURCE, plan_tiled("sgemm_v3_reg1d", v3_name), parent="v2_smem_tile", snippet="sgemm_v3",
            configs=fixed(V3_TILE)[0], default=fixed(V3_TILE)[1]),
    Version("sgemm_v4_reg2d",
            "v3 with 8 x 8 results per thread (outer products in registers); 128 x 128 x 8 tiles, 256 threads",
            V4_SOURCE, plan_tiled("sgemm_v4_reg2d", v4_name), parent="v3_reg1d", snippet="sgemm_v4",
            configs=fixed(V4_TILE)[0], default=fixed(V4_TILE)[1]),
    Version("sgemm_v5_vec4",
            "v4 with 16-byte global loads and stores and A transposed in shared memory (LDS.128 reads); "
            "4-byte accesses where K or N % 4 or a pointer is not 16-byte aligned",
            V5_SOURCE, plan_tiled("sgemm_v5_vec4", v5_name, vec4=True), parent="v4_reg2d", snippet="sgemm_v5",
            configs=fixed(V5_TILE)[0], default=fixed(V5_TILE)[1]),
    Version("sgemm_v6_swizzle",
            "v5 without bank conflicts: As padded (layout 'pad') or XOR-swizzled ('xor', the default), and "
            "each thread's columns in groups of 4 spread over the tile",
            V6_SOURCE, plan_tiled("sgemm_v6_swizzle", v6_name, vec4=True), parent="v5_vec4", snippet="sgemm_v6",
            configs=V6_CONFIGS, default=lambda p: V6_CONFIGS[0]),
    Version("sgemm_v7_double_buffer",
            "v6 (XOR) with two shared-memory stages: tile k+1's loads are in flight while tile k is computed",
            V7_SOURCE, plan_tiled("sgemm_v7_double_buffer", v7_name, stages=2, vec4=True), parent="v6_swizzle",
            snippet="sgemm_v7", configs=fixed(V7_TILE)[0], default=fixed(V7_TILE)[1]),
    Version("sgemm_v8_warptile",
            "v7 with warp tiles: 8 warps of 64 x 32, each lane 2 x 2 sub-tiles of 4 x 4, every LDS.128 "
            "conflict-free",
            V8_SOURCE, plan_tiled("sgemm_v8_warptile", v8_name, stages=2, vec4=True), parent="v7_double_buffer",
            snippet="sgemm_v8", configs=fixed(V8_WARP)[0], default=fixed(V8_WARP)[1]),
    Version("sgemm_v9_tuned",
            "v8 with its tiles, occupancy hint and an L2-friendly tile order as a tuned config",
            V9_SOURCE, plan_v9, parent="v8_warptile", snippet="sgemm_v9",
            configs=V9_CONFIGS, default=lambda p: V9_DEFAULT),
])


# --- v9's sweep ----------------------------------------------------------------------------------------

TUNED = "v9_tuned"


def config_impl(c: V9) -> str:
    """The record's impl name of one swept config: ``v9_tuned[128,128,8,64,32,2,2,8]``."""
    return f"{TUNED}[{','.join(str(x) for x in c)}]"


def _progress(items, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        def plain():
            for i, x in enumerate(items):
                print(f"{desc}: {i + 1}/{len(items)} {x}", flush=True)
                yield x
        return plain()
    return tqdm(items, desc=desc)


def tune(rec, shapes, configs=None, *, seed: int = 11) -> dict:
    """Time every config of v9 (``configs``: a subset of :data:`V9_CONFIGS`, default all of them) on every
    shape through the chapter's ladder (checked against float64 on each timed run, C poisoned), with a
    progress bar. Each config's result is recorded as its own impl (:func:`config_impl`) with its config in
    the entry, so :func:`tuned_config` can read the choice back without sweeping. Returns {shape: best}."""
    from .ladders import ladder
    configs = list(configs or V9_CONFIGS)
    unknown = [c for c in configs if c not in V9_CONFIGS]
    if unknown:
        raise ValueError(f"tune: {unknown} are not instantiated; choose from V9_CONFIGS")
    shapes = [tuple(int(x) for x in s) for s in shapes]
    lad = ladder(rec, shapes, seed=seed, peer_names=())
    digest = v9_digest()
    for shape, c in _progress([(s, c) for s in shapes for c in configs], "sgemm v9 sweep"):
        lad.time(TUNED, [shape], config=c, impl=config_impl(c), extra={"swept": True, "source": digest})
    return {s: tuned_config(rec, s) for s in shapes}


def v9_digest() -> str:
    """sha256 (12 hex digits) of v9's source and every header it includes. A sweep's entries carry it, and only
    entries with the current digest count: a table timed on other code is never read back as this code's."""
    h = hashlib.sha256()
    for path in local_includes(V9_SOURCE.path):
        h.update(path.name.encode() + b"\x00" + path.read_bytes())
    return h.hexdigest()[:12]


def swept(records_or_rec, shape) -> list[tuple[V9, dict]]:
    """(config, entry) of every v9 config a sweep of the current v9 code recorded on ``shape`` (float32),
    fastest first."""
    entries = getattr(records_or_rec, "entries", records_or_rec)
    digest = v9_digest()
    out = []
    for e in entries:
        if (e.get("op") != "sgemm" or not str(e.get("impl", "")).startswith(TUNED + "[") or not e.get("swept")
                or e.get("source") != digest
                or list(e.get("shape", ())) != [int(x) for x in shape] or e.get("dtype") != "float32"):
            continue
        cfg = e.get("config")
        try:
            c = V9(**cfg) if isinstance(cfg, dict) else None
        except TypeError:
            c = None
        if c is not None and c in V9_CONFIGS:
            out.append((c, e))
    return sorted(out, key=lambda ce: -ce[1]["metric"])


def tuned_config(records_or_rec, shape) -> V9:
    """The fastest recorded v9 config on ``shape`` (from a Record or a list of entries, e.g.
    ``utils.record.load(gpu, notebook)``), or :data:`V9_DEFAULT` when nothing is recorded for it."""
    hits = swept(records_or_rec, shape)
    return hits[0][0] if hits else V9_DEFAULT


def sgemm(a, b, c, *, alpha: float = 1.0, beta: float = 0.0, version: str = "v1_coalesced"):
    """``c = alpha * a @ b + beta * c`` with one version of :data:`SGEMM`; returns ``c``."""
    return SGEMM[version](a, b, c, alpha=alpha, beta=beta)
