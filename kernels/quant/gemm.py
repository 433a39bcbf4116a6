"""The W4A16 tensor-core GEMM, batch 1-64 (chapter 9.6): op ``w4a16_gemm``, versions v1-v4.

``out (M, N) bf16 = a (M, K) bf16 @ dequant(W)``, M <= 64, the INT4 weights shuffled offline into mma
B-fragment order (``qmma = pack_mma(q)``), GPTQ's ``qzeros`` and bf16 ``scales``. Every version takes
``(a, qmma, qzeros, scales, out)``. ``splits`` overrides v2/v4's K split, ``ctas`` v3's persistent grid.

Its numbering is its own: GEMM v2 (Marlin's structure) is not GEMV v2 (:mod:`kernels.quant.gemv`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

from .formats import GROUP, THREADS, mma_check_shapes
from .gemv import ctas_per_sm_by_smem, hardware, plan_splits

MMA_COLS = 64                              # columns per block of v1 (4 n16 tiles)
MAX_M = 64                                 # every version keeps all rows of A in one CTA

# (m16 tiles, n16 tiles per warp, stages): m16 tiles follow from M; the other two are tunable.
Marlin = config_type("Marlin", "m16_tiles n16_tiles stages")
MARLIN_CONFIGS = tuple(Marlin(*c) for c in ((1, 1, 4), (1, 2, 4), (2, 1, 4), (3, 1, 4), (4, 1, 4), (4, 1, 3)))
MARLIN_V3_CONFIGS = tuple(Marlin(*c) for c in ((1, 1, 4), (1, 1, 6), (1, 2, 4), (2, 1, 4), (3, 1, 4), (4, 1, 3)))
# v4: v2's grid and pipeline; four m16 tiles would spill at 2 CTAs per SM (the per-group sums double the
# accumulators), so it takes M <= 48.
MARLIN_V4_CONFIGS = tuple(Marlin(*c) for c in ((1, 1, 4), (1, 2, 4), (2, 1, 4), (3, 1, 4)))
MARLIN_DEFAULT = {1: Marlin(1, 1, 4), 2: Marlin(2, 1, 4), 3: Marlin(3, 1, 4), 4: Marlin(4, 1, 3)}


def marlin_name(c: Marlin, kernel: str = "w4a16_marlin") -> str:
    return f"{kernel}<{c.m16_tiles}, {c.n16_tiles}, {c.stages}>"


GEMM_V1_SOURCE = KernelSource("quant/gemm_v1_mma.cu")
GEMM_V2_SOURCE = KernelSource("quant/gemm_v2_marlin.cu", name_expressions=tuple(
    marlin_name(c, "w4a16_marlin") for c in MARLIN_CONFIGS))
GEMM_V3_SOURCE = KernelSource("quant/gemm_v3_stripe.cu", name_expressions=tuple(
    marlin_name(c, "w4a16_marlin_v3_stripe") for c in MARLIN_V3_CONFIGS))
GEMM_V4_SOURCE = KernelSource("quant/gemm_v4_post.cu", name_expressions=tuple(
    marlin_name(c, "w4a16_marlin_v4_post") for c in MARLIN_V4_CONFIGS))


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    M: int
    K: int
    N: int
    a: object
    qmma: object
    qzeros: object
    scales: object
    out: object
    splits: int | None = None
    ctas: int | None = None

    @property
    def m16_tiles(self) -> int:
        return ceil_div(self.M, 16)


def gemm_problem(a, qmma, qzeros, scales, out, *, splits=None, ctas=None) -> GemmProblem:
    """Validate the GEMM's arguments (shuffled weights, GPTQ zeros, bf16 scales)."""
    expect_array(a, "a", dtype=bf16(), ndim=2)
    M, K = (int(s) for s in a.shape)
    expect_array(qmma, "qmma", dtype=np.int32, ndim=4)
    N = int(qmma.shape[0]) * 16
    mma_check_shapes(M, K, N)
    expect_array(qmma, "qmma", dtype=np.int32, shape=(N // 16, K // 64, 32, 4))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16(), shape=(K // GROUP, N))
    expect_array(out, "out", dtype=bf16(), shape=(M, N))
    for name, v in (("splits", splits), ("ctas", ctas)):
        if v is not None and int(v) < 1:
            raise ValueError(f"{name}: expected a positive int or None, got {v}")
    expect_same_device(a, qmma, qzeros, scales, out)
    return GemmProblem(M, K, N, a, qmma, qzeros, scales, out,
                       None if splits is None else int(splits), None if ctas is None else int(ctas))


def marlin_stage_bytes(c: Marlin) -> int:
    """One stage: 8 NTW n16 tiles x k128 of weights, 16 MT rows x 128 of A, scales, zeros."""
    bn = 128 * c.n16_tiles
    return 8 * c.n16_tiles * 1024 + 16 * c.m16_tiles * GROUP * 2 + bn * 2 + bn // 2


def configs_for(table):
    """A version's instantiated configs, those for the problem's m16 tile count when a problem is given."""
    def configs(problem=None):
        return tuple(c for c in table if problem is None or c.m16_tiles == problem.m16_tiles)
    return configs


def default_for(table):
    def default(problem):
        if problem.m16_tiles > max(c.m16_tiles for c in table):
            return None                   # the plan says why not
        d = MARLIN_DEFAULT[problem.m16_tiles]
        return d if d in table else next(c for c in table if c.m16_tiles == problem.m16_tiles)
    return default


def check_rows(p: GemmProblem, c, table, kernel: str) -> Marlin:
    most = 16 * max(t.m16_tiles for t in table)
    if p.M > most:
        raise Unsupported(f"M = {p.M}: {kernel} keeps all rows of A in one CTA and takes M <= {most}"
                          + ("; v2 and v3 take up to 64" if most < MAX_M else
                             "; larger batches are compute-bound: use a dense GEMM on dequantized weights"))
    if c.m16_tiles != p.m16_tiles:
        raise ValueError(f"{kernel}: config {c} is for M <= {16 * c.m16_tiles}, not M = {p.M}")
    return c


def dims(p: GemmProblem):
    return np.int32(p.M), np.int32(p.K), np.int32(p.N)


# --- plans -------------------------------------------------------------------------------------------

def plan_gemm_v1(p: GemmProblem, config=None) -> list[Launch]:
    """The kernel (16 or 32 rows per block) and its grid."""
    kernel, rows = ("w4a16_mma_m16", 16) if p.M <= 16 else ("w4a16_mma_m32", 32)
    return [Launch(kernel, (ceil_div(p.N, MMA_COLS), ceil_div(p.M, rows), 1), (THREADS, 1, 1),
                   (p.qmma, p.qzeros, p.scales, p.a, p.out, *dims(p)))]


def plan_split_k(kernel: str, table):
    """v2 and v4: tiles x splits CTAs, the split chosen to fill 2 CTAs per SM (smem permitting)."""
    def plan(p: GemmProblem, c: Marlin) -> list[Launch]:
        check_rows(p, c, table, kernel)
        smem = c.stages * marlin_stage_bytes(c)
        tiles, groups = ceil_div(p.N, 128 * c.n16_tiles), p.K // GROUP
        splits = p.splits or plan_splits(tiles, groups, hardware().sms, min(2, ctas_per_sm_by_smem(smem)))
        if splits > groups:
            raise Unsupported(f"splits = {splits}: {kernel} splits K by whole groups, at most {groups} here")
        ws = Workspace((splits * p.M * p.N if splits > 1 else 1,), np.float32)
        counters = Workspace((tiles,), np.uint32, fill=0, every_launch=False)
        return [Launch(marlin_name(c, kernel), (tiles, splits, 1), (THREADS, 1, 1),
                       (p.qmma, p.qzeros, p.scales, p.a, p.out, ws, counters, *dims(p)), smem=smem)]
    return plan


def marlin_v3_ctas_per_sm(c: Marlin) -> int:
    """Resident CTAs per SM: the launch bounds' minimum (3 for MT <= 2, else 2) capped by shared memory."""
    return min(3 if c.m16_tiles <= 2 else 2, ctas_per_sm_by_smem(c.stages * marlin_stage_bytes(c)))


def stripe_partition(tiles: int, groups: int, ctas: int) -> tuple[int, int]:
    """(P, max_contrib) of the striped partition: P = min(ctas, units) CTAs, CTA c owning units
    [c U / P, (c+1) U / P) of U = tiles x groups (tile-major); max_contrib = the most CTAs sharing a tile."""
    U = tiles * groups
    P = max(1, min(ctas, U))

    def owner(u):
        return ((u + 1) * P - 1) // U

    return P, max(owner(T * groups + groups - 1) - owner(T * groups) + 1 for T in range(tiles))


def plan_gemm_v3(p: GemmProblem, c: Marlin) -> list[Launch]:
    """One persistent wave (SMs x resident CTAs per SM, or ``ctas``) over the striped (tile, group) units."""
    check_rows(p, c, MARLIN_V3_CONFIGS, "w4a16_marlin_v3_stripe")
    ctas = p.ctas or hardware().sms * marlin_v3_ctas_per_sm(c)
    bn = 128 * c.n16_tiles
    tiles = ceil_div(p.N, bn)
    P, max_contrib = stripe_partition(tiles, p.K // GROUP, ctas)
    ws = Workspace((tiles * max_contrib * p.M * bn,), np.float32)
    counters = Workspace((tiles,), np.uint32, fill=0, every_launch=False)
    return [Launch(marlin_name(c, "w4a16_marlin_v3_stripe"), (P, 1, 1), (THREADS, 1, 1),
                   (p.qmma, p.qzeros, p.scales, p.a, p.out, ws, counters, *dims(p), np.int32(max_contrib)),
                   smem=c.stages * marlin_stage_bytes(c))]


def plan_up_to_64(plan):
    """v1's plan behind the common M <= 64 rule."""
    def checked(p: GemmProblem, config=None):
        if p.M > MAX_M:
            raise Unsupported(f"M = {p.M}: the W4A16 GEMM takes M <= {MAX_M}; larger batches are compute-bound")
        return plan(p, config)
    return checked


GEMM = Registry("w4a16_gemm", gemm_problem, [
    Version("w4a16_gemm_v1_mma", "shuffled B fragments dequantized in registers; 8 warps split K; weights prefetched "
            "one chunk ahead", GEMM_V1_SOURCE, plan_up_to_64(plan_gemm_v1), snippet="w4a16_mma"),
    Version("w4a16_gemm_v2_marlin", "one group per stage through a cp.async pipeline; A by ldmatrix from swizzled smem; "
            "split-K over CTAs", GEMM_V2_SOURCE, plan_split_k("w4a16_marlin", MARLIN_CONFIGS), parent="v1_mma",
            snippet="w4a16_gemm_v2", configs=configs_for(MARLIN_CONFIGS), default=default_for(MARLIN_CONFIGS)),
    Version("w4a16_gemm_v3_stripe", "v2's stage on a persistent grid of one wave; (tile, group) units striped evenly "
            "over the CTAs", GEMM_V3_SOURCE, plan_gemm_v3, parent="v2_marlin", snippet="w4a16_marlin_v3",
            configs=configs_for(MARLIN_V3_CONFIGS), default=default_for(MARLIN_V3_CONFIGS)),
    Version("w4a16_gemm_v4_post", "v2 with GEMV v4's arithmetic: mma on 128 + q, zero point and scale per group after "
            "the mma", GEMM_V4_SOURCE, plan_split_k("w4a16_marlin_v4_post", MARLIN_V4_CONFIGS), parent="v2_marlin",
            snippet="w4a16_gemm_v4", configs=configs_for(MARLIN_V4_CONFIGS), default=default_for(MARLIN_V4_CONFIGS)),
])
BEST_GEMM = "v2_marlin"
