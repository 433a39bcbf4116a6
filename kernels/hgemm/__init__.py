"""bf16 GEMM, chapter 12: op ``hgemm``, tensor cores the Ampere way (v0-v3) and the Hopper way (v4-v8).

``C = A @ B`` for row-major, C-contiguous bfloat16 matrices ``A [M, K]``, ``B [K, N]`` and ``C [M, N]`` on the
GPU, any ``M, N, K >= 1``, accumulated in float32 and rounded to bf16 once, in the epilogue (what cuBLAS's
bf16 GEMM and ``torch.matmul`` compute). Shapes are written ``M x N x K``. Every version predicates its own
tails (zero-filled tiles in shared memory, tested stores), so nothing is padded by the caller; offsets in the
kernels are 32-bit, so :func:`problem` refuses matrices of 2^31 elements or more.

The versions, one .cu each beside this module (``v00_wmma.cu`` ...), sharing ``hgemm_common.cuh``:

- v0 ``wmma``: the portable WMMA API, opaque fragments, the epilogue through shared memory;
- v1 ``mma``: ``mma.sync.m16n8k16`` with ``ldmatrix``/``ldmatrix.trans`` fragments, stored from registers;
- v2 ``swizzle``: v1 with XOR-swizzled shared-memory tiles (no bank conflicts in ``ldmatrix``);
- v3 ``pipeline``: v2 with a multi-stage ``cp.async`` pipeline, a grouped tile order and tuned tiles;

and the Hopper way (sm_90a), sharing ``hopper_common.cuh``:

- v4 ``wgmma``: one warpgroup, ``wgmma`` with both operands in shared memory, TMA loads into 128-byte swizzled
  stages counted by mbarriers;
- v5 ``warp_specialized``: a producer warpgroup (TMA) and two consumer warpgroups (wgmma), ``setmaxnreg``,
  full/empty mbarriers per stage;
- v6 ``persistent``: v5 on a persistent grid, the pipeline running on across tiles;
- v7 ``multicast``: v6 in 2-CTA clusters sharing B: each CTA loads half of B's boxes and multicasts them;
- v8 ``tma_store``: v7 with the epilogue through a swizzled staging tile and TMA stores.

v0-v3 each come in two instances: VEC (16-byte loads, K and N multiples of 8, A and B 16-byte aligned, C
4-byte aligned) and one that loads element by element for every other shape (:func:`vec_ok` picks). TMA needs
rows a multiple of 16 bytes and 128-byte aligned bases: where A or B do not have them, v4-v8 copy A and B into
zero-padded workspaces (``pack.cu``), run v3's 16-byte instance on those and copy C back out (:func:`fallback`);
where only C does not, v8 runs v7. Importing this package never needs a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from kernels.sgemm import tile_name as instance  # a name expression: kernel<arg, arg, ...>
from utils.arrays import bf16, ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

INDEX_LIMIT = 2**31          # every matrix has fewer elements than this (32-bit offsets in the kernels)
MAX_GRID = 2**31 - 1         # grid x (v3's one-dimensional grid)
MAX_GRID_Y = 65535           # grid y (v0-v2 put the row tiles there)
STATIC_SMEM = 48 * 1024      # static __shared__ per block
DYNAMIC_SMEM = 163 * 1024    # dynamic shared memory a block may opt into on an A100 (227 KiB on Hopper):
                             # every config must run on both, as the Ampere way promises


# --- the problem -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated bf16 GEMM: the sizes and the arrays (None in a CPU-only plan)."""
    M: int
    N: int
    K: int
    a: Any = None
    b: Any = None
    c: Any = None

    @property
    def out(self):
        return self.c

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.N, self.K)


def shape_problem(M: int, N: int, K: int) -> Problem:
    """A problem of this shape without arrays: plans and the ledger on a CPU."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    M, N, K = int(M), int(N), int(K)
    for name, rows, cols in (("a", M, K), ("b", K, N), ("c", M, N)):
        if rows * cols >= INDEX_LIMIT:
            raise ValueError(f"{name}: {rows} x {cols} = {rows * cols:,} elements; the kernels index with 32-bit "
                             f"offsets, so each matrix must have fewer than 2**31 = {INDEX_LIMIT:,} (split the GEMM)")
    return Problem(M, N, K)


def span(x) -> tuple[int, int]:
    """[first byte, last byte + 1) of a C-contiguous device array."""
    start = int(x.__cuda_array_interface__["data"][0])
    return start, start + int(x.size) * np.dtype(x.dtype).itemsize


def problem(a, b, c) -> Problem:
    """Validate ``a`` (M x K), ``b`` (K x N) and ``c`` (M x N): bfloat16, 2-D, C-contiguous, on one GPU, ``c``
    not overlapping ``a`` or ``b``. The 16-byte path's alignment is the plan's business (:func:`vec_ok`)."""
    expect_array(a, "a", dtype=bf16(), ndim=2, align=2)
    M, K = (int(s) for s in a.shape)
    expect_array(b, "b", dtype=bf16(), ndim=2, align=2)
    if int(b.shape[0]) != K:
        raise ValueError(f"b: expected {K} rows (a is {M} x {K}, so b must be {K} x N), got shape {tuple(b.shape)}")
    N = int(b.shape[1])
    expect_array(c, "c", dtype=bf16(), shape=(M, N), align=2)
    expect_same_device(a, b, c)
    p = shape_problem(M, N, K)
    c0, c1 = span(c)
    for name, x in (("a", a), ("b", b)):
        x0, x1 = span(x)
        if c0 < x1 and x0 < c1:
            raise ValueError(f"c: overlaps the memory of {name}; the kernels read {name} while they write c: "
                             "pass a separate output array")
    return dataclasses.replace(p, a=a, b=b, c=c)


# --- the reference and the cost model ------------------------------------------------------------------

def reference(a, b):
    """``a @ b`` in float64 from the bf16 operands, wherever they live (NumPy or CuPy)."""
    from utils.arrays import xp
    m = xp(a)
    return m.matmul(a.astype(m.float64), b.astype(m.float64))


def flops(M: int, N: int, K: int) -> int:
    """2 M N K."""
    return 2 * int(M) * int(N) * int(K)


def nbytes(M: int, N: int, K: int) -> int:
    """Minimum bytes: A and B read once, C written once, 2 bytes an element."""
    return 2 * (M * K + K * N + M * N)


# --- configs and instances -----------------------------------------------------------------------------
# Every version is a template compiled through name expressions. v0-v2 instantiate one tile config; v3 its
# tuning space. A config names the block tile (bm x bn, bk deep), the warp tile (wm x wn) and, for v3, the
# pipeline's depth and the tile order's group of row tiles.

Tile = config_type("Tile", "bm bn bk wm wn")
Pipe = config_type("Pipe", "bm bn bk wm wn stages group_m")

V0_TILE = Tile(64, 64, 32, 32, 32)          # 4 warps of 2 x 2 WMMA fragments
V1_TILE = Tile(128, 128, 32, 64, 32)        # 8 warps of 4 x 4 m16n8 tiles: 64 accumulators a lane
V2_TILE = V1_TILE
# v3's space. The first is v2's tiles with 4 stages: what the pipeline alone is worth. Then bigger warp
# tiles (more mma per ldmatrix byte), a 128 x 256 block (more reuse per byte from L2) and BK = 64 (half the
# barriers per FLOP), alone and in a big block (CUTLASS's default for sm80 bf16: 256 x 128 x 64, 3 stages).
# Each needs at most 163 KiB of shared memory, so it runs on an A100 too.
V3_CONFIGS = tuple(Pipe(*c) for c in (
    (128, 128, 32, 64, 32, 4, 8),
    (128, 128, 32, 64, 64, 4, 8),
    (128, 256, 32, 64, 64, 3, 8),
    (128, 256, 32, 64, 64, 4, 8),
    (256, 128, 32, 64, 64, 3, 8),
    (128, 128, 64, 64, 64, 3, 8),
    (256, 128, 64, 64, 64, 3, 8),
))
V3_DEFAULT = V3_CONFIGS[1]       # the fastest on the H200 over 4096^3 and 8192^3 (chapter 12's sweep)
BOTH = (True, False)


def v0_name(t: Tile, vec: bool) -> str:
    return instance("hgemm_v0_wmma", *t, vec)


def v1_name(t: Tile, vec: bool) -> str:
    return instance("hgemm_v1_mma", *t, vec)


def v2_name(t: Tile, vec: bool) -> str:
    return instance("hgemm_v2_swizzle", *t, vec)


def v3_name(c: Pipe, vec: bool) -> str:
    return instance("hgemm_v3_pipeline", *c, vec)


REQUIRES = ("bf16-mma",)
PEAK_CHAINS = 8          # mma_peak.cu: independent accumulator chains per warp
PEAK_SOURCE = KernelSource("hgemm/mma_peak.cu", requires=REQUIRES, name_expressions=(f"hgemm_mma_peak<{PEAK_CHAINS}>",))
V0_SOURCE = KernelSource("hgemm/v00_wmma.cu", requires=REQUIRES, name_expressions=tuple(
    v0_name(V0_TILE, v) for v in BOTH))
V1_SOURCE = KernelSource("hgemm/v01_mma.cu", requires=REQUIRES, name_expressions=tuple(
    v1_name(V1_TILE, v) for v in BOTH))
V2_SOURCE = KernelSource("hgemm/v02_swizzle.cu", requires=REQUIRES, name_expressions=tuple(
    v2_name(V2_TILE, v) for v in BOTH))
V3_SOURCE = KernelSource("hgemm/v03_pipeline.cu", requires=REQUIRES, name_expressions=tuple(
    v3_name(c, v) for c in V3_CONFIGS for v in BOTH))


def threads_of(c) -> int:
    """One warp per warp tile."""
    return (c.bm // c.wm) * (c.bn // c.wn) * 32


def smem_bytes(c) -> int:
    """Shared memory of a config: A and B tiles per stage (v0 adds its float scratch of 1 KiB per warp)."""
    stages = getattr(c, "stages", 1)
    return 2 * stages * (c.bm * c.bk + c.bk * c.bn)


def check_config(kernel: str, c, *, scratch: bool = False) -> None:
    """Raise Unsupported where a config cannot build or launch (the kernels' static_asserts, said in words)."""
    def no(why):
        raise Unsupported(f"{kernel} {c}: {why}")
    if c.bm % c.wm or c.bn % c.wn:
        no(f"the warp tile {c.wm} x {c.wn} must divide the block tile {c.bm} x {c.bn}")
    if c.wm % 16 or c.wn % 16 or c.bk % 16:
        no("warp tiles and bk must be multiples of 16 (m16 x n16 x k16 steps)")
    t = threads_of(c)
    if not 32 <= t <= 1024:
        no(f"{t} threads per block: expected 32 to 1024")
    for name, rows, cols in (("A", c.bm, c.bk), ("B", c.bk, c.bn)):
        chunks = rows * cols // 8
        if chunks % t:
            no(f"the {name} tile's {chunks} 16-byte chunks do not split evenly over {t} threads")
        per_row = cols // 8
        if per_row & (per_row - 1):
            no(f"the {name} tile's rows must hold a power of two of 16-byte chunks (the swizzle), got {per_row}")
    if hasattr(c, "stages"):
        if c.stages < 2 or c.group_m < 1:
            no("stages >= 2 and group_m >= 1 expected")
        if smem_bytes(c) > DYNAMIC_SMEM:
            no(f"{smem_bytes(c):,} bytes of shared memory, above the {DYNAMIC_SMEM:,} an A100 block may use")
    else:
        total = smem_bytes(c) + (t // 32 * 1024 if scratch else 0)
        if total > STATIC_SMEM:
            no(f"{total:,} bytes of static shared memory, above the {STATIC_SMEM:,} a block may declare")


def aligned(x, n: int) -> bool:
    """A device array's data pointer is a multiple of ``n`` bytes (True for a plan without arrays)."""
    return x is None or span(x)[0] % n == 0


def vec_ok(p: Problem) -> bool:
    """The 16-byte path: every 8-element chunk of A's and B's rows starts 16-byte aligned and lies wholly
    inside or outside its row (K and N multiples of 8, A and B 16-byte aligned), and C's column pairs are
    4-byte aligned. Elsewhere the element-wise instance runs, on the same tiles."""
    return p.K % 8 == 0 and p.N % 8 == 0 and aligned(p.a, 16) and aligned(p.b, 16) and aligned(p.c, 4)


def args_of(p: Problem) -> tuple:
    return (np.int32(p.M), np.int32(p.N), np.int32(p.K), p.a, p.b, p.c)


def plan_2d(kernel: str, name, *, scratch: bool = False):
    """v0-v2: one block per tile, x walking the column tiles and y the row tiles; static shared memory."""
    def plan(p: Problem, c: Tile) -> list[Launch]:
        check_config(kernel, c, scratch=scratch)
        grid = (ceil_div(p.N, c.bn), ceil_div(p.M, c.bm), 1)
        if grid[1] > MAX_GRID_Y:
            raise Unsupported(f"M = {p.M}: {kernel} puts the {grid[1]} row tiles on grid y, which holds at most "
                              f"{MAX_GRID_Y}")
        return [Launch(name(c, vec_ok(p)), grid, (threads_of(c), 1, 1), args_of(p))]
    return plan


def plan_v3(p: Problem, c: Pipe) -> list[Launch]:
    """v3: one block per tile on a one-dimensional grid (the tile order is the kernel's), the stages in
    dynamic shared memory."""
    check_config("hgemm_v3_pipeline", c)
    blocks = ceil_div(p.M, c.bm) * ceil_div(p.N, c.bn)
    if blocks > MAX_GRID:
        raise Unsupported(f"{blocks} tiles: more than grid x holds ({MAX_GRID})")
    return [Launch(v3_name(c, vec_ok(p)), (blocks, 1, 1), (threads_of(c), 1, 1), args_of(p), smem=smem_bytes(c))]


# --- the Hopper way, v4-v6 -----------------------------------------------------------------------------------

Hopper = config_type("Hopper", "bm bn stages group_m")
HOPPER_BK = 64                   # k per stage: one 128-byte row of A (hopper_common.cuh)
SW128_ATOM = 1024                # the launch asks for this many extra bytes to align the stages
HOPPER_SMEM = 227 * 1024         # dynamic shared memory a block may opt into on sm_90
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # setmaxnreg in v5, v6 (hopper_common.cuh): 128 x 40 + 256 x 232 <= 65536
V4_CONFIG = Hopper(128, 128, 4, 8)
V5_CONFIG = Hopper(128, 256, 4, 8)
V6_CONFIG = V5_CONFIG
V7_CONFIG = V5_CONFIG
V8_CONFIG = V5_CONFIG
C_CHUNK_BYTES = 64 * 64 * 2      # v8: a consumer warpgroup's staging tile of C
HOPPER_REQUIRES = ("wgmma", "tma", "setmaxnreg")
CLUSTER = 2                      # v7: two CTAs, vertically adjacent tiles, one B


def v4_name(c) -> str:
    return instance("hgemm_v4_wgmma", c.bm, c.bn, c.stages, c.group_m)


def v5_name(c) -> str:
    return instance("hgemm_v5_warp_specialized", c.bn, c.stages, c.group_m)


def v6_name(c) -> str:
    return instance("hgemm_v6_persistent", c.bn, c.stages, c.group_m)


V4_SOURCE = KernelSource("hgemm/v04_wgmma.cu", requires=("wgmma", "tma"), name_expressions=(v4_name(V4_CONFIG),))
V5_SOURCE = KernelSource("hgemm/v05_warp_specialized.cu", requires=HOPPER_REQUIRES,
                         name_expressions=(v5_name(V5_CONFIG),))
V6_SOURCE = KernelSource("hgemm/v06_persistent.cu", requires=HOPPER_REQUIRES, name_expressions=(v6_name(V6_CONFIG),))


def v7_name(c) -> str:
    return instance("hgemm_v7_multicast", c.bn, c.stages, c.group_m)


V7_SOURCE = KernelSource("hgemm/v07_multicast.cu", requires=(*HOPPER_REQUIRES, "clusters"),
                         name_expressions=(v7_name(V7_CONFIG),))
BARRIER_BYTES = 8                # one mbarrier


def v8_name(c) -> str:
    return instance("hgemm_v8_tma_store", c.bn, c.stages, c.group_m)


V8_SOURCE = KernelSource("hgemm/v08_tma_store.cu", requires=(*HOPPER_REQUIRES, "clusters"),
                         name_expressions=(v8_name(V8_CONFIG),))


def hopper_smem(c) -> int:
    """Dynamic shared memory of a Hopper config: the stages of A [bm x 64] and B [64 x bn], plus the alignment."""
    return c.stages * 2 * HOPPER_BK * (c.bm + c.bn) + SW128_ATOM


def check_hopper(kernel: str, c, *, bm=None) -> None:
    def no(why):
        raise Unsupported(f"{kernel} {c}: {why}")
    if bm is not None and c.bm != bm:
        no(f"the tile has {bm} rows (two consumer warpgroups of 64)")
    if c.bm % 64 or c.bn not in (128, 256):
        no("bm a multiple of 64 (m64 wgmmas) and bn 128 or 256 (the wgmma shapes instantiated)")
    if c.stages < 2 or c.group_m < 1:
        no("stages >= 2 and group_m >= 1 expected")
    if hopper_smem(c) > HOPPER_SMEM:
        no(f"{hopper_smem(c):,} bytes of shared memory, above the {HOPPER_SMEM:,} a block may use on sm_90")


TMA_SWIZZLED_ALIGN = 128        # bytes: a 128-byte swizzled tensor map's global address (utils.tma)


def tma_ok(p: Problem) -> bool:
    """TMA can read A and B through 128-byte swizzled maps: every row's stride a multiple of 16 bytes (K and N
    multiples of 8) and both base addresses 128-byte aligned. C is written by ordinary stores."""
    return (p.K % 8 == 0 and p.N % 8 == 0 and aligned(p.a, TMA_SWIZZLED_ALIGN)
            and aligned(p.b, TMA_SWIZZLED_ALIGN))


def operand_map(x, shape, box):
    """A TMA descriptor over the row-major bf16 matrix ``x`` of ``shape``, in ``box``es, with the 128-byte swizzle
    and zero fill outside the matrix: a ``TensorMap.arg`` on a GPU host. Without a GPU (a CPU plan) a map cannot
    be encoded, and the plan carries the map's validated ``TiledSpec`` instead; None without an array."""
    from utils.gpu import has_gpu
    from utils.tma import tensor_map, tiled_spec
    if x is None:
        return None
    if not has_gpu():
        return tiled_spec(span(x)[0], shape, (2 * shape[1], 2), bf16(), box, swizzle=128)
    return tensor_map(x, box, swizzle=128).arg


def tensor_maps(p: Problem, bm: int):
    """The maps of A (boxes of bm x 64) and B (boxes of 64 x 64)."""
    return operand_map(p.a, (p.M, p.K), (bm, HOPPER_BK)), operand_map(p.b, (p.K, p.N), (HOPPER_BK, 64))


def tma_store_ok(p: Problem) -> bool:
    """TMA can write C through a 128-byte swizzled map: rows a multiple of 16 bytes, a 128-byte aligned base."""
    return p.N % 8 == 0 and aligned(p.c, TMA_SWIZZLED_ALIGN)


def c_tensor_map(p: Problem):
    """v8's map of C: boxes of 64 x 64."""
    return operand_map(p.c, (p.M, p.N), (64, 64))


PACK_SOURCE = KernelSource("hgemm/pack.cu")
PACK_THREADS = 256
PACK_MAX_BLOCKS = 8192           # the copies stride over their element pairs; this many blocks fill any GPU


def pack_launch(kernel: str, args: tuple, pairs: int) -> Launch:
    blocks = max(1, min(PACK_MAX_BLOCKS, ceil_div(pairs, PACK_THREADS)))
    return Launch(kernel, (blocks, 1, 1), (PACK_THREADS, 1, 1), args, source=PACK_SOURCE)


def fallback(p: Problem) -> list[Launch]:
    """Where TMA cannot read A and B (K or N not a multiple of 8, or a base not 128-byte aligned): copy A and B into
    zero-padded workspaces whose rows are multiples of 8 elements, multiply those with v3's default config (its
    16-byte instance) into a padded C, and copy C's first N columns out. A's zero columns meet B's zero rows, so
    the padding adds nothing to the product."""
    K8, N8 = 8 * ceil_div(p.K, 8), 8 * ceil_div(p.N, 8)
    wa, wb, wc = Workspace((p.M, K8), bf16()), Workspace((K8, N8), bf16()), Workspace((p.M, N8), bf16())
    (gemm,) = plan_v3(shape_problem(p.M, N8, K8), V3_DEFAULT)
    i32 = np.int32
    return [pack_launch("hgemm_pack", (p.a, i32(p.M), i32(p.K), wa, i32(p.M), i32(K8)), p.M * K8 // 2),
            pack_launch("hgemm_pack", (p.b, i32(p.K), i32(p.N), wb, i32(K8), i32(N8)), K8 * N8 // 2),
            dataclasses.replace(gemm, args=(*gemm.args[:3], wa, wb, wc), source=V3_SOURCE),
            pack_launch("hgemm_unpack", (wc, i32(N8), p.c, i32(p.M), i32(p.N)), p.M * N8 // 2)]


def plan_hopper(kernel: str, name, *, bm=None, persistent: bool = False, cluster: int = 1):
    """v4-v7: one block per tile (v6, v7: as many blocks as fit at once; v7: in clusters of two, one block per
    tile of a vertical pair, the pairs' barriers after the stages), 128 threads per warpgroup; TMA maps for A
    and B; :func:`fallback` where TMA cannot read A and B."""
    def plan(p: Problem, c) -> list[Launch]:
        check_hopper(kernel, c, bm=bm)
        if not tma_ok(p):
            return fallback(p)
        tiles_m, tiles_n = ceil_div(p.M, c.bm), ceil_div(p.N, c.bn)
        blocks = tiles_m * tiles_n if cluster == 1 else cluster * ceil_div(tiles_m, cluster) * tiles_n
        if blocks > MAX_GRID:
            raise Unsupported(f"{blocks} blocks: more than grid x holds ({MAX_GRID})")
        threads = 128 if bm is None else 384
        smem = hopper_smem(c) + (2 * c.stages * BARRIER_BYTES if cluster > 1 else 0)
        map_a, map_b = tensor_maps(p, c.bm)
        return [Launch(name(c), (blocks, 1, 1), (threads, 1, 1), (np.int32(p.M), np.int32(p.N), np.int32(p.K),
                                                                   map_a, map_b, p.c),
                       smem=smem, persistent=persistent, cluster=cluster)]
    return plan


def plan_v8(p: Problem, c) -> list[Launch]:
    """v8: v7's launch with the map of C in place of C, and room for two staging tiles; v7 itself where TMA cannot
    write C, :func:`fallback` where TMA cannot read A and B."""
    launches = plan_hopper("hgemm_v7_multicast", v7_name, bm=128, persistent=True, cluster=CLUSTER)(p, c)
    if is_fallback(launches):
        return launches
    (ln,) = launches
    if not tma_store_ok(p):
        return [dataclasses.replace(ln, source=V7_SOURCE)]
    return [dataclasses.replace(ln, kernel=v8_name(c), args=(*ln.args[:5], c_tensor_map(p)),
                                smem=ln.smem + 2 * C_CHUNK_BYTES)]


def is_fallback(launches) -> bool:
    """Whether a Hopper version's plan handed the problem to :func:`fallback` (packed copies and v3)."""
    return any(ln.source is PACK_SOURCE for ln in launches)


def fixed(config):
    return {"configs": (config,), "default": lambda p: config}


HGEMM = Registry("hgemm", problem, [
    Version("hgemm_v0_wmma",
            "tensor cores through WMMA: 16 x 16 x 16 fragments from shared-memory tiles, opaque register layout, "
            "the epilogue through a float scratch tile",
            V0_SOURCE, plan_2d("hgemm_v0_wmma", v0_name, scratch=True), snippet="hgemm_v0", **fixed(V0_TILE)),
    Version("hgemm_v1_mma",
            "mma.sync.m16n8k16 with ldmatrix (A) and ldmatrix.trans (B) fragments, 128 x 128 x 32 tiles, 8 warps "
            "of 64 x 32; the epilogue stores from the accumulators",
            V1_SOURCE, plan_2d("hgemm_v1_mma", v1_name), parent="v0_wmma", snippet="hgemm_v1", **fixed(V1_TILE)),
    Version("hgemm_v2_swizzle",
            "v1 with both shared-memory tiles XOR-swizzled: ldmatrix without bank conflicts",
            V2_SOURCE, plan_2d("hgemm_v2_swizzle", v2_name), parent="v1_mma", snippet="hgemm_v2",
            **fixed(V2_TILE)),
    Version("hgemm_v3_pipeline",
            "v2 with a multi-stage cp.async pipeline, grouped tile order and tuned tiles",
            V3_SOURCE, plan_v3, parent="v2_swizzle", snippet="hgemm_v3",
            configs=V3_CONFIGS, default=lambda p: V3_DEFAULT),
    Version("hgemm_v4_wgmma",
            "the Hopper way: one warpgroup of wgmma m64n128k16 on 128-byte swizzled stages that TMA fills, "
            "counted by mbarriers; padded copies and v3 where TMA cannot read A and B",
            V4_SOURCE, plan_hopper("hgemm_v4_wgmma", v4_name), parent="v3_pipeline", snippet="hgemm_v4",
            **fixed(V4_CONFIG)),
    Version("hgemm_v5_warp_specialized",
            "v4 split into a TMA producer warpgroup and two wgmma consumer warpgroups (setmaxnreg), full and "
            "empty mbarriers per stage, 128 x 256 tiles",
            V5_SOURCE, plan_hopper("hgemm_v5_warp_specialized", v5_name, bm=128), parent="v4_wgmma",
            snippet="hgemm_v5", **fixed(V5_CONFIG)),
    Version("hgemm_v6_persistent",
            "v5 on a persistent grid: one block per SM walking the tiles, the pipeline running on across them",
            V6_SOURCE, plan_hopper("hgemm_v6_persistent", v6_name, bm=128, persistent=True),
            parent="v5_warp_specialized", snippet="hgemm_v6", **fixed(V6_CONFIG)),
    Version("hgemm_v7_multicast",
            "v6 in clusters of two CTAs on vertically adjacent tiles: each loads half of B with a multicast TMA into "
            "both; the empty barriers count both CTAs' consumers",
            V7_SOURCE, plan_hopper("hgemm_v7_multicast", v7_name, bm=128, persistent=True, cluster=CLUSTER),
            parent="v6_persistent", snippet="hgemm_v7", **fixed(V7_CONFIG)),
    Version("hgemm_v8_tma_store",
            "v7 with the epilogue through a 128-byte swizzled staging tile per warpgroup and TMA stores that clip "
            "at C's edges; v7 where TMA cannot write C",
            V8_SOURCE, plan_v8, parent="v7_multicast", snippet="hgemm_v8", **fixed(V8_CONFIG)),
])


def hgemm(a, b, c, *, version: str = "v3_pipeline", config=None):
    """``c = a @ b`` (bf16, fp32 accumulation) with one version of :data:`HGEMM`; returns ``c``."""
    HGEMM[version](a, b, c, config=config)
    return c
