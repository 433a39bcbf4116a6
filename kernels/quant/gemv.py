"""The W4A16 GEMV, batch 1 (chapter 9.5): op ``w4a16_gemv``, versions v0-v6.

``out (1, N) bf16 = x (1, K) bf16 @ dequant(W)``, W INT4 with group-128 zero points and bf16 scales. Every
version takes ``(x, qweight, qzeros, scales, out)`` in GPTQ's layout; v4 reads the mma-shuffled copy of
the weights (``qmma=pack_mma(q)``) and v6 the tiled copy (``qtiled=pack_gemv_tiled(qweight)``), passed
as keywords (their ``prepare`` makes them from ``qweight``). ``splits`` overrides the K split of the
split-K versions (v2, v5); None lets the plan choose whole waves.

The GEMM of the same chapter (``w4a16_gemm``, :mod:`kernels.quant.gemm`) is another op with its own
numbering: GEMV v2 and GEMM v2 are different kernels.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

from .formats import (
    GEMV_COLS,
    GROUP,
    SEQ_ORDER,
    THREADS,
    gemv_check_shapes,
    pack_gemv_tiled,
    pack_mma,
    unpack_nibbles,
)

# Template instances (tile and pipeline depth): the defaults plus the variants the tuning script compares.
GemvV2 = config_type("GemvV2", "columns stages")                  # BN columns per CTA, cp.async stages
GemvV3 = config_type("GemvV3", "rows stages")                     # qweight rows per stage, ring depth
GemvV4 = config_type("GemvV4", "n16_tiles warps")                 # n16 tiles per warp, warps per CTA
GemvV5 = config_type("GemvV5", "columns rows")                    # BN columns per CTA, rows per load batch
GEMV_V2_CONFIGS = (GemvV2(128, 4), GemvV2(256, 4))
GEMV_V3_CONFIGS = (GemvV3(8, 3), GemvV3(4, 5))
GEMV_V4_CONFIGS = (GemvV4(1, 4), GemvV4(1, 8), GemvV4(2, 8))
GEMV_V5_CONFIGS = (GemvV5(32, 8), GemvV5(64, 8), GemvV5(64, 4))
GEMV_V2_DEFAULT, GEMV_V3_DEFAULT, GEMV_V4_DEFAULT, GEMV_V5_DEFAULT = (
    GEMV_V2_CONFIGS[0], GEMV_V3_CONFIGS[0], GEMV_V4_CONFIGS[0], GEMV_V5_CONFIGS[1])

GEMV_V2_CTAS_PER_SM = 2                    # the split-K plan fills 2 CTAs per SM (smem allows them)
GEMV_V3_STATIC_SMEM = 32 * 33 * 4          # gemv_reduce_store's [32 K-slices][33] fp32
GEMV_V5_CTAS_PER_SM = 4                    # launch bounds (256, 4): <= 64 registers; smem is ~8 KB


def gemv_v2_name(c: GemvV2) -> str:
    return f"w4a16_gemv_v2_pipelined<{c.columns}, {c.stages}>"


def gemv_v3_name(c: GemvV3) -> str:
    return f"w4a16_gemv_v3_ring<{c.rows}, {c.stages}>"


def gemv_v4_name(c: GemvV4) -> str:
    return f"w4a16_gemv_v4_mma<{c.n16_tiles}, {c.warps}>"


def gemv_v5_name(c: GemvV5) -> str:
    return f"w4a16_gemv_v5_split<{c.columns}, {c.rows}>"


GEMV_V0_SOURCE = KernelSource("quant/gemv_v0_naive.cu")
GEMV_V1_SOURCE = KernelSource("quant/gemv_v1_magic.cu")
GEMV_V2_SOURCE = KernelSource("quant/gemv_v2_pipelined.cu", name_expressions=tuple(map(gemv_v2_name, GEMV_V2_CONFIGS)))
GEMV_V3_SOURCE = KernelSource("quant/gemv_v3_ring.cu", name_expressions=tuple(map(gemv_v3_name, GEMV_V3_CONFIGS)))
GEMV_V4_SOURCE = KernelSource("quant/gemv_v4_mma.cu", name_expressions=tuple(map(gemv_v4_name, GEMV_V4_CONFIGS)))
GEMV_V5_SOURCE = KernelSource("quant/gemv_v5_split.cu", name_expressions=tuple(map(gemv_v5_name, GEMV_V5_CONFIGS)))
GEMV_V6_SOURCE = KernelSource("quant/gemv_v6_tiled.cu")


@dataclasses.dataclass(frozen=True)
class GemvProblem:
    K: int
    N: int
    x: object
    qweight: object
    qzeros: object
    scales: object
    out: object
    qmma: object = None
    qtiled: object = None
    splits: int | None = None


def gemv_problem(x, qweight, qzeros, scales, out, *, qmma=None, qtiled=None, splits=None) -> GemvProblem:
    """Validate the GEMV's arguments (GPTQ tensors, batch 1; the optional weight copies v4 and v6 read)."""
    expect_array(x, "x", dtype=bf16(), ndim=2)
    if int(x.shape[0]) != 1:
        raise ValueError(f"x: expected one row (batch 1, shape (1, K)), got shape {tuple(x.shape)}")
    K = int(x.shape[1])
    expect_array(qweight, "qweight", dtype=np.int32, ndim=2)
    N = int(qweight.shape[1])
    gemv_check_shapes(K, N)
    expect_array(qweight, "qweight", dtype=np.int32, shape=(K // 8, N))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16(), shape=(K // GROUP, N))
    expect_array(out, "out", dtype=bf16(), shape=(1, N))
    extra = []
    if qmma is not None:
        expect_array(qmma, "qmma (pack_mma)", dtype=np.int32, shape=(N // 16, K // 64, 32, 4))
        extra.append(qmma)
    if qtiled is not None:
        expect_array(qtiled, "qtiled (pack_gemv_tiled)", dtype=np.int32, shape=(ceil_div(N, GEMV_COLS), K // 8, GEMV_COLS))
        extra.append(qtiled)
    if splits is not None and int(splits) < 1:
        raise ValueError(f"splits: expected a positive int or None, got {splits}")
    expect_same_device(x, qweight, qzeros, scales, out, *extra)
    return GemvProblem(K, N, x, qweight, qzeros, scales, out, qmma, qtiled, None if splits is None else int(splits))


# --- planning helpers (pure) ---------------------------------------------------------------------------

def gemv_grid(N: int) -> tuple[int, int, int]:
    """v0, v1, v3, v6: one block of 256 threads per 32 columns, all of K."""
    return (ceil_div(N, GEMV_COLS), 1, 1)


def hardware():
    from utils.hardware import facts
    return facts()


def ctas_per_sm_by_smem(smem: int, cap: int = 8, facts=None) -> int:
    """How many CTAs with ``smem`` bytes of dynamic shared memory fit on one SM (registers not counted)."""
    f = facts or hardware()
    return max(1, min(cap, f.smem_per_sm // (smem + f.reserved_smem_per_block)))


def plan_splits(tiles: int, units: int, sms: int, ctas_per_sm: int) -> int:
    """K splits so that tiles x splits CTAs fill ``ctas_per_sm`` slots on every SM (at least one unit each)."""
    want = max(1, round(sms * ctas_per_sm / tiles))
    return max(1, min(units, want))


def gemv_v2_stage_bytes(columns: int) -> int:
    """One stage of w4a16_gemv_v2: 16 qweight rows x BN columns, 128 x, BN scales, BN/8 zero words."""
    return 16 * columns * 4 + GROUP * 2 + columns * 2 + columns // 2


def gemv_v3_smem_bytes(c: GemvV3) -> int:
    """Dynamic smem of w4a16_gemv_v3_ring: the weight ring [stages][rows][256] uint4 and the (scales,
    zero word) side ring [stages][256] uint4."""
    return c.stages * (c.rows + 1) * THREADS * 16


def gemv_v3_ctas_per_sm(c: GemvV3, facts=None) -> int:
    """CTAs per SM that shared memory allows (the kernel's launch bounds ask for 2)."""
    f = facts or hardware()
    return f.smem_per_sm // (gemv_v3_smem_bytes(c) + GEMV_V3_STATIC_SMEM + f.reserved_smem_per_block)


def gemv_v3_bytes_in_flight_per_sm(c: GemvV3, facts=None) -> int:
    """Weight bytes each SM keeps in flight in the steady state: STAGES - 1 stages per thread."""
    return (c.stages - 1) * c.rows * 16 * THREADS * min(2, gemv_v3_ctas_per_sm(c, facts))


def splitk_workspaces(splits: int, N: int, tiles: int) -> tuple[Workspace, Workspace]:
    """The fp32 partial sums [splits, N] (one word when unsplit) and the per-tile arrival counters, zeroed
    once: the last CTA of a tile sets its counter back to zero."""
    return (Workspace((splits * N if splits > 1 else 1,), np.float32),
            Workspace((tiles,), np.uint32, fill=0, every_launch=False))


def dims(K: int, N: int):
    return np.int32(K), np.int32(N)


# --- plans -------------------------------------------------------------------------------------------

def plan_gemv_plain(kernel: str):
    def plan(p: GemvProblem, config=None):
        return [Launch(kernel, gemv_grid(p.N), (THREADS, 1, 1),
                       (p.qweight, p.qzeros, p.scales, p.x, p.out, *dims(p.K, p.N)))]
    return plan


def plan_gemv_v2(p: GemvProblem, c: GemvV2) -> list[Launch]:
    smem = c.stages * gemv_v2_stage_bytes(c.columns)
    tiles, groups = ceil_div(p.N, c.columns), p.K // GROUP
    splits = p.splits or plan_splits(tiles, groups, hardware().sms, min(GEMV_V2_CTAS_PER_SM, ctas_per_sm_by_smem(smem)))
    if splits > groups:
        raise Unsupported(f"splits = {splits}: v2 splits K by whole groups, at most {groups} here")
    ws, counters = splitk_workspaces(splits, p.N, tiles)
    return [Launch(gemv_v2_name(c), (tiles, splits, 1), (THREADS, 1, 1),
                   (p.qweight, p.qzeros, p.scales, p.x, p.out, ws, counters, *dims(p.K, p.N)), smem=smem)]


def plan_gemv_v3(p: GemvProblem, c: GemvV3) -> list[Launch]:
    return [Launch(gemv_v3_name(c), gemv_grid(p.N), (THREADS, 1, 1),
                   (p.qweight, p.qzeros, p.scales, p.x, p.out, *dims(p.K, p.N)), smem=gemv_v3_smem_bytes(c))]


def plan_gemv_v4(p: GemvProblem, c: GemvV4) -> list[Launch]:
    if p.N % 16:
        raise Unsupported(f"N = {p.N}: v4 reads 16-column mma tiles (pack_mma) and needs N % 16 == 0")
    if p.qmma is None:
        raise Unsupported("v4 reads the mma-shuffled weights: pass qmma=pack_mma(q) (or its prepare(qweight))")
    return [Launch(gemv_v4_name(c), (ceil_div(p.N // 16, c.n16_tiles), 1, 1), (32 * c.warps, 1, 1),
                   (p.qmma, p.qzeros, p.scales, p.x, p.out, *dims(p.K, p.N)))]


def plan_gemv_v5(p: GemvProblem, c: GemvV5) -> list[Launch]:
    tiles, blocks = ceil_div(p.N, c.columns), p.K // 8 // c.rows
    splits = p.splits or plan_splits(tiles, blocks, hardware().sms, GEMV_V5_CTAS_PER_SM)
    if splits > blocks:
        raise Unsupported(f"splits = {splits}: v5 splits K by blocks of {c.rows} qweight rows, at most {blocks} here")
    ws, counters = splitk_workspaces(splits, p.N, tiles)
    return [Launch(gemv_v5_name(c), (tiles, splits, 1), (THREADS, 1, 1),
                   (p.qweight, p.qzeros, p.scales, p.x, p.out, ws, counters, *dims(p.K, p.N)))]


def plan_gemv_v6(p: GemvProblem, config=None) -> list[Launch]:
    if p.qtiled is None:
        raise Unsupported("v6 reads the tiled weights: pass qtiled=pack_gemv_tiled(qweight) (or its prepare(qweight))")
    return [Launch("w4a16_gemv_v6_tiled", gemv_grid(p.N), (THREADS, 1, 1),
                   (p.qtiled, p.qzeros, p.scales, p.x, p.out, *dims(p.K, p.N)))]


def prepare_qmma(qweight) -> dict:
    """GPTQ qweight -> the keyword v4 reads (an offline shuffle)."""
    return {"qmma": pack_mma(unpack_nibbles(qweight, 0, SEQ_ORDER))}


def prepare_qtiled(qweight) -> dict:
    """GPTQ qweight -> the keyword v6 reads (an offline repack)."""
    return {"qtiled": pack_gemv_tiled(qweight)}


def prepare_nothing(qweight) -> dict:
    return {}


def fixed(config):
    return lambda problem=None: config


GEMV = Registry("w4a16_gemv", gemv_problem, [
    Version("w4a16_gemv_v0_naive", "32 columns x all K per block, 16-byte weight loads, shift/mask/int-to-float, fp32 FMA",
            GEMV_V0_SOURCE, plan_gemv_plain("w4a16_gemv_v0_naive"), snippet="w4a16_gemv_v0", prepare=prepare_nothing),
    Version("w4a16_gemv_v1_magic", "v0 with the magic-number conversion and bf16x2 products, fp32 sums every 4 products",
            GEMV_V1_SOURCE, plan_gemv_plain("w4a16_gemv_v1_magic"), parent="v0_naive", snippet="w4a16_gemv_v1",
            prepare=prepare_nothing),
    Version("w4a16_gemv_v2_pipelined", "v1's arithmetic; a cp.async pipeline through smem; split-K over CTAs",
            GEMV_V2_SOURCE, plan_gemv_v2, parent="v1_magic", snippet="w4a16_gemv_v2", configs=GEMV_V2_CONFIGS,
            default=fixed(GEMV_V2_DEFAULT), prepare=prepare_nothing),
    Version("w4a16_gemv_v3_ring", "v1's layout; each thread streams its own rows through a private cp.async ring",
            GEMV_V3_SOURCE, plan_gemv_v3, parent="v1_magic", snippet="w4a16_gemv_v3", configs=GEMV_V3_CONFIGS,
            default=fixed(GEMV_V3_DEFAULT), prepare=prepare_nothing),
    Version("w4a16_gemv_v4_mma", "tensor cores on the shuffled weights: mma on 128 + q, zero point and scale per group",
            GEMV_V4_SOURCE, plan_gemv_v4, parent="v1_magic", snippet="w4a16_gemv_v4", configs=GEMV_V4_CONFIGS,
            default=fixed(GEMV_V4_DEFAULT), prepare=prepare_qmma),
    Version("w4a16_gemv_v5_split", "v1's arithmetic; split-K grid of whole waves, <= 64 registers, row batches' loads first",
            GEMV_V5_SOURCE, plan_gemv_v5, parent="v1_magic", snippet="w4a16_gemv_v5", configs=GEMV_V5_CONFIGS,
            default=fixed(GEMV_V5_DEFAULT), prepare=prepare_nothing),
    Version("w4a16_gemv_v6_tiled", "v1 on a tiled copy of qweight: one contiguous weight range per block",
            GEMV_V6_SOURCE, plan_gemv_v6, parent="v1_magic", snippet="w4a16_gemv_v6", prepare=prepare_qtiled),
])

# The GEMV the shape sweep uses: v1 was the fastest of v1-v3 in both tuning batches on the H200
# (2026-11-29: 15.0 us vs 18.2-19.9 us for v2/v3 at K = N = 8192); v4 needs the shuffled weights.
BEST_GEMV = "v1_magic"
