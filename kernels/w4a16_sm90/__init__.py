"""The W4A16 GEMM on Hopper's wgmma (chapter 13): op ``w4a16_wgmma``, version v1 ``rs``.

``out (M, N) bf16 = x (M, K) bf16 @ dequant(W)``, W INT4 in groups of 128 along K with GPTQ's zero points and bf16
scales (chapter 9's format, :mod:`kernels.quant.formats`), for batches M = 1-64. Every version takes
``(x, qwgmma, qzeros, scales, out)``: ``qwgmma = pack_wgmma(q)`` the codes reordered offline (below), ``qzeros``
[K/128, N/8] int32 and ``scales`` [K/128, N] bf16 as GPTQ stores them. ``Version.prepare(qweight, qzeros, scales)``
makes that triple from GPTQ's. ``ctas`` overrides the number of CTAs (the emulation uses a few).
Chapter 9's ``w4a16_gemm`` (mma.sync, Marlin's structure) is another op with its own numbering.

Design (Machete's idea, chapter 9's arithmetic)
-----------------------------------------------
The weights are the register operand. wgmma's A must be 64 rows and may come from registers; its B is read from
shared memory with N (the instruction's n) a multiple of 8 up to 256. So the kernel computes the transpose,
``y^T [N, M] = W^T [N, K] x^T [K, M]``: 64 output columns of y per warpgroup and slice are the 64 rows of A, the
M <= 64 tokens are n = TOK (16, 32 or 64), and x [M, K] row-major is B "K-major" as it lies in memory.

- **Weights to registers, no shared-memory shuffle.** wgmma's A fragment for bf16 is mma.sync's: warp w of the
  warpgroup holds rows 16w..16w+15, thread (g, t) rows g, g+8 at k 2t, 2t+1, 2t+8, 2t+9. Those 8 values of one k16
  step are exactly chapter 9's ``pack_mma`` word of the n16 tile (W^T's rows are W's columns), so one 32-bit word
  per thread and k16 step, and chapter 9's ``dequant_b_frags`` (lop3 magic number, hsub2 zero point, hmul2 scale)
  turns it into the four A registers. ``pack_wgmma`` only regroups pack_mma's words: for each n64 slice and k64
  chunk a 2 KB record [128 threads][4 words], so a thread's four k16 steps are one 16-byte load and a warpgroup's
  record is contiguous (Machete's prepacked B blocks, vLLM csrc/quantization/machete/machete_prepacked_layout.cuh:
  PPBlockShape_NK = 128 x 64 with each thread's data contiguous, read at commit 00e11cf of the stored copy).
- **Streaming.** At M <= 64 the problem is memory-bound: at M = 16, K = N = 8192 the weights are 33.5 MB of the
  35.4 MB the kernel must move (weights + scales + zeros + x + y, :func:`nbytes`); the tensor cores need ~2.3 us
  at ~990 dense TFLOP/s. One producer thread streams stages by TMA into a ring (x: TOK x 128 bf16; the group's
  NS weight records of 4 KB; one row of scales and of qzeros), STAGES deep: 8 stages of 8 KB of weights keep
  64 KB per SM in flight, above the ~25 KB that 4 TB/s x ~0.8 us of DRAM latency asks of each of 132 SMs.
- **Every SM streams.** N / BN tiles are few (64 at N = 8192, BN = 128), so the grid is one CTA per SM over a
  stream-K partition of the (tile, group) units (chapter 9's stripe, :func:`kernels.quant.gemm.stripe_partition`):
  each CTA streams the same number of groups (+-1); a tile cut between CTAs is summed from an fp32 workspace by
  its last contributor, in rank order (deterministic).
- **Consumers.** Per k16 step a thread dequantizes one word per slice (15 instructions for 8 weights) and its
  warpgroup issues ``wgmma.m64nTOKk16`` (A registers, B through a 128-byte-swizzle K-major descriptor); four
  wgmmas stay in flight (4 k16 steps of one slice, or 2 of two), so the conversion of a step overlaps the wgmmas
  of the steps before it.

Expected time, written before the first GPU run (chapter 13 measures it): bytes / ~4.0 TB/s of streaming plus the ~3-4 us a timed launch
costs under utils.bench (launch, ramp, tail), against cuBLAS bf16's 35 us at M = 16, K = N = 8192:

- M = 16: 35.4 MB, 8.8 us of streaming, 12-13 us predicted: 2.7-2.9x cuBLAS (bar 2.2x; chapter 9's Marlin-style
  kernel measured 1.42x);
- M = 32: 35.9 MB, 9.0 us, 12.5-13.5 us: 2.6-2.8x (bar 1.8x);
- M = 64: 37.0 MB, 9.2 us, 14-16 us: ~2.3x (bar 1.3x): here the tensor pipe (8.6 GFLOP, ~9 us at the dense peak
  with n = 64) and x's reads from L2 (TOK x 256 bytes per stage, once per CTA tile: BN = 256 halves them per
  weight byte) come close to the bytes' time.

At N = 28672 (123 MB at M = 16) the streaming is 31 us and the fixed cost matters less.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kernels.quant.formats import (GROUP, dequantize_int4, gemm_nbytes, mma_check_shapes, mma_fragment_map,
                                   pack_mma, unpack_nibbles)
from kernels.quant.gemm import stripe_partition
from utils.arrays import bf16, ceil_div
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.hardware import facts
from utils.ops import expect_array, expect_same_device
from utils.paths import KERNELS
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

SLICE = 64                       # columns of y per wgmma (its m = 64 rows of W^T)
KC = 64                          # k per weight record (2 KB: 128 threads x 4 k16 words)
RECORD_BYTES = 128 * 16
MAX_M = 64                       # tokens per CTA: wgmma's n = TOK <= 64 here
TOKS = (16, 32, 64)
TMA_SWIZZLED_ALIGN = 128         # bytes: x's base under a 128-byte swizzled tensor map (utils.tma)
BARRIER_BYTES = 8
# bytes an L2 miss of a TMA load fetches: CUTLASS v4.7.0 sets 128 for every TMA map
# (include/cute/atom/copy_traits_sm90_tma.hpp, tma_l2Promotion)
L2_PROMOTION = 128

# (tokens = wgmma n, consumer warpgroups, n64 slices per warpgroup, stages): BN = 64 consumers slices columns
RsConfig = config_type("RsConfig", "tok consumers slices stages")
RS_CONFIGS = tuple(RsConfig(*c) for c in ((16, 2, 1, 8), (16, 2, 2, 6), (16, 4, 1, 6), (32, 2, 1, 8), (32, 2, 2, 6),
                                          (64, 2, 1, 6)))
# by token tile, the fastest at K = N = 8192 on the H200 (chapter 13's sweep, 2026-12-02): four consumer warpgroups
# of one slice at 16 tokens; two of one slice above (two slices a warpgroup need more registers than 32 and 64
# tokens leave: slower at 32, spilling at 64)
RS_DEFAULT = {16: RsConfig(16, 4, 1, 6), 32: RsConfig(32, 2, 1, 8), 64: RsConfig(64, 2, 1, 6)}


def rs_name(c: RsConfig) -> str:
    return f"w4a16_wgmma_rs<{c.tok}, {c.consumers}, {c.slices}, {c.stages}>"


V1_SOURCE = KernelSource("w4a16_sm90/v01_rs.cu", requires=("wgmma", "tma"),
                         name_expressions=tuple(map(rs_name, RS_CONFIGS)),
                         include_dirs=(str(KERNELS / "hgemm"), str(KERNELS / "quant")))


# --- the weights' layout ---------------------------------------------------------------------------------------

def pack_wgmma(q):
    """INT4 codes q [K, N] (uint8 in [0, 15]) -> qwgmma int32 [ceil(N/64), K/64, 128, 4], offline.

    Record (slice s, chunk c) holds, for thread 32 w + lane of a warpgroup, word j = the k16 step 4c + j of the n16
    tile 4s + w in chapter 9's mma order (:func:`kernels.quant.formats.pack_mma`), which is wgmma's A fragment of
    W^T for that thread. Columns past N (up to a multiple of 64) are zero codes."""
    xp = array_module(q)
    K, N = (int(d) for d in q.shape)
    if K % KC or K < 1 or N < 1:
        raise ValueError(f"pack_wgmma needs K a positive multiple of {KC} and N >= 1, got K={K}, N={N}")
    slices = ceil_div(N, SLICE)
    padded = xp.zeros((K, slices * SLICE), dtype=xp.uint8)
    padded[:, :N] = q
    words = pack_mma(padded).reshape(slices, 4, K // KC, 32, 4)            # [slice, warp, chunk, lane, word]
    return xp.ascontiguousarray(words.transpose(0, 2, 1, 3, 4).reshape(slices, K // KC, 128, 4))


def unpack_mma(qmma):
    """The inverse of pack_mma: int32 [N/16, K/64, 32, 4] -> codes uint8 [K, N]."""
    xp = array_module(qmma)
    tiles, chunks = (int(d) for d in qmma.shape[:2])
    dk, dn = (xp.asarray(a) for a in mma_fragment_map())                   # [32 lanes, 8 nibbles]
    words = qmma.view(xp.uint32)[..., None]                                # [tile, chunk, lane, word, 1]
    nibbles = ((words >> (4 * xp.arange(8, dtype=xp.uint32))) & 0xF).astype(xp.uint8)
    tile = xp.arange(tiles)[:, None, None, None, None]
    chunk = xp.arange(chunks)[None, :, None, None, None]
    word = xp.arange(4)[None, None, None, :, None]
    k = 64 * chunk + 16 * word + dk[None, None, :, None, :]
    n = 16 * tile + dn[None, None, :, None, :]
    q = xp.zeros((64 * chunks, 16 * tiles), dtype=xp.uint8)
    q[k, n] = nibbles
    return q


def unpack_wgmma(qwgmma, N: int):
    """The inverse of :func:`pack_wgmma`: codes uint8 [K, N]."""
    slices, chunks = (int(d) for d in qwgmma.shape[:2])
    words = qwgmma.reshape(slices, chunks, 4, 32, 4).transpose(0, 2, 1, 3, 4).reshape(4 * slices, chunks, 32, 4)
    return unpack_mma(words)[:, :N]


def prepare(qweight, qzeros, scales):
    """GPTQ's (qweight [K/8, N], qzeros, scales) -> what every version reads: (qwgmma, qzeros, scales)."""
    return pack_wgmma(unpack_nibbles(qweight, 0)), qzeros, scales


def reference(x, qwgmma, qzeros, scales):
    """float64 (M, N) = x @ W with W = (q - z) s rounded to bf16 once, as the kernels' hmul2 rounds it."""
    xp = array_module(x)
    N = int(scales.shape[1])
    w = dequantize_int4(unpack_wgmma(qwgmma, N), scales.astype(xp.float32), unpack_nibbles(qzeros, 1))
    return x.astype(xp.float64) @ w.astype(bf16()).astype(xp.float64)


def nbytes(M: int, K: int, N: int) -> int:
    """What the GEMM must move: packed weights, scales, zeros, x and y (chapter 9's count)."""
    return gemm_nbytes(M, K, N)


def flops(M: int, K: int, N: int) -> float:
    return 2.0 * M * K * N


# --- the problem -------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    M: int
    K: int
    N: int
    x: object
    qwgmma: object
    qzeros: object
    scales: object
    out: object
    ctas: int | None = None


def check_shapes(M: int, K: int, N: int) -> None:
    """The op's shape rules (pure, tested on the CPU): chapter 9's GEMM's (positive sizes, whole groups along K,
    int32 indexing) and N a multiple of 32."""
    if N % 32:
        raise ValueError(f"N = {N} is not a multiple of 32: TMA reads a row of qzeros (N/8 int32) only when its "
                         "stride is a multiple of 16 bytes")
    mma_check_shapes(M, K, N)


def problem(x, qwgmma, qzeros, scales, out, *, ctas=None) -> Problem:
    """Validate the arguments: x (M, K) bf16 (128-byte aligned: TMA reads it 128-byte swizzled), qwgmma
    (pack_wgmma), GPTQ qzeros, bf16 scales, out (M, N) bf16, all C-contiguous device arrays on one device."""
    expect_array(x, "x", dtype=bf16(), ndim=2, align=TMA_SWIZZLED_ALIGN)
    M, K = (int(s) for s in x.shape)
    expect_array(out, "out", dtype=bf16(), ndim=2)
    if int(out.shape[0]) != M:
        raise ValueError(f"out: expected {M} rows (one per row of x), got shape {tuple(out.shape)}")
    N = int(out.shape[1])
    check_shapes(M, K, N)
    expect_array(qwgmma, "qwgmma (pack_wgmma)", dtype=np.int32, shape=(ceil_div(N, SLICE), K // KC, 128, 4))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16(), shape=(K // GROUP, N))
    if ctas is not None and (isinstance(ctas, bool) or int(ctas) < 1):
        raise ValueError(f"ctas: expected a positive int or None, got {ctas!r}")
    expect_same_device(x, qwgmma, qzeros, scales, out)
    return Problem(M, K, N, x, qwgmma, qzeros, scales, out, None if ctas is None else int(ctas))


# --- the plan ----------------------------------------------------------------------------------------------------

def round_up(x: int, m: int) -> int:
    return ceil_div(x, m) * m


def stage_bytes(c: RsConfig) -> int:
    """One stage of the ring (rs_common.cuh Stage<TOK, NS>::BYTES): x's two 128-byte swizzled boxes, NS weight
    slices of two records, the rows of scales and qzeros, rounded up to the swizzle's 1024-byte period."""
    bn = SLICE * c.consumers * c.slices
    z_off = 2 * c.tok * 128 + bn // SLICE * 2 * RECORD_BYTES + round_up(2 * bn, 128)
    return round_up(z_off + round_up(bn // 2, 128), 1024)


def smem_bytes(c: RsConfig) -> int:
    """The ring, full and empty barriers, a flag per consumer warpgroup, and 1024 bytes to align the ring."""
    return c.stages * stage_bytes(c) + 2 * c.stages * BARRIER_BYTES + 4 * c.consumers + 1024


def tensor_arg(array, shape, strides, dtype, box, swizzle=0):
    """A TMA map over ``array``'s memory seen as ``shape`` (outermost first, byte ``strides``) in ``box``es: a
    ``TensorMap.arg`` on a GPU host; the validated ``TiledSpec`` in a CPU plan (no driver to encode it).
    L2 promotion :data:`L2_PROMOTION` as CUTLASS sets it."""
    from utils.gpu import has_gpu
    from utils.tma import tiled, tiled_spec
    address = int(array.__cuda_array_interface__["data"][0])
    if not has_gpu():
        return tiled_spec(address, shape, strides, dtype, box, swizzle=swizzle, l2_promotion=L2_PROMOTION)
    return tiled(address, shape, strides, dtype, box, swizzle=swizzle, l2_promotion=L2_PROMOTION, owner=array).arg


def tensor_maps(p: Problem, c: RsConfig) -> tuple:
    """x in boxes of TOK tokens x 64 k (128-byte swizzle, what x_desc reads); qwgmma as rows of one record
    (256 uint64) in boxes of 2 records; one row of scales (BN bf16) and of qzeros (BN / 8 int32) per box."""
    bn = SLICE * c.consumers * c.slices
    rows = ceil_div(p.N, SLICE) * (p.K // KC)
    return (tensor_arg(p.x, (p.M, p.K), (2 * p.K, 2), bf16(), (c.tok, KC), swizzle=128),
            tensor_arg(p.qwgmma, (rows, RECORD_BYTES // 8), (RECORD_BYTES, 8), np.uint64, (2, RECORD_BYTES // 8)),
            tensor_arg(p.scales, (p.K // GROUP, p.N), (2 * p.N, 2), bf16(), (1, bn)),
            tensor_arg(p.qzeros, (p.K // GROUP, p.N // 8), (p.N // 2, 4), np.int32, (1, bn // 8)))


def plan_rs(p: Problem, c: RsConfig) -> list[Launch]:
    """One CTA per SM (or ``ctas``) over the stream-K units; C consumer warpgroups and a producer warp."""
    if p.M > MAX_M:
        raise Unsupported(f"M = {p.M}: w4a16_wgmma keeps the tokens in one wgmma (n <= {MAX_M}); larger batches are "
                          "compute-bound: use a dense GEMM on dequantized weights")
    if c.tok < p.M:
        raise ValueError(f"w4a16_wgmma_v1_rs: config {c} holds {c.tok} tokens, not M = {p.M}")
    if smem_bytes(c) > facts().smem_per_block_optin:
        raise Unsupported(f"{c}: {smem_bytes(c):,} bytes of shared memory, above what a block may use")
    bn = SLICE * c.consumers * c.slices
    tiles = ceil_div(p.N, bn)
    ctas, max_contrib = stripe_partition(tiles, p.K // GROUP, p.ctas or facts().sms)
    ws = Workspace((tiles * max_contrib * bn * c.tok,), np.float32)
    counters = Workspace((tiles * c.consumers,), np.uint32, fill=0, every_launch=False)
    return [Launch(rs_name(c), (ctas, 1, 1), (128 * c.consumers + 32, 1, 1),
                   (*tensor_maps(p, c), p.out, ws, counters, np.int32(p.M), np.int32(p.K), np.int32(p.N),
                    np.int32(max_contrib)), smem=smem_bytes(c))]


def rs_configs(problem=None) -> tuple:
    """The instantiated configs, those whose token tile holds the problem's M when a problem is given."""
    return tuple(c for c in RS_CONFIGS if problem is None or c.tok >= problem.M)


def rs_default(problem: Problem):
    fits = [t for t in TOKS if t >= problem.M]
    return RS_DEFAULT[fits[0]] if fits else None     # None: the plan says why not


W4A16_WGMMA = Registry("w4a16_wgmma", problem, [
    Version("w4a16_wgmma_v1_rs", "weights as wgmma's register operand: prepacked INT4 words dequantized into A "
            "fragments, x from smem by TMA, a producer thread and a stage ring, stream-K over (tile, group)",
            V1_SOURCE, plan_rs, snippet="w4a16_wgmma_v1", configs=rs_configs, default=rs_default, prepare=prepare),
])


# --- what the chapter measures around the kernel -------------------------------------------------------------

ABLATIONS = {"skip dequant": ("W4A16_SKIP_DEQUANT",), "skip mma": ("W4A16_SKIP_MMA",),
             "stream only": ("W4A16_SKIP_DEQUANT", "W4A16_SKIP_MMA")}


def ablation(what: str) -> Version:
    """v1_rs built without a part of its work (``ABLATIONS``): the raw words as the A registers (no dequant), no
    wgmma, or neither (the stage ring alone), default configs only. For timing only: the output is wrong."""
    if what not in ABLATIONS:
        raise ValueError(f"ablation: expected one of {list(ABLATIONS)}, got {what!r}")
    v = W4A16_WGMMA["v1_rs"]
    src = dataclasses.replace(V1_SOURCE, defines=tuple((d, "1") for d in ABLATIONS[what]),
                              name_expressions=tuple(dict.fromkeys(map(rs_name, RS_DEFAULT.values()))))
    return dataclasses.replace(v, source=src)


CHAIN_NS = (16, 32, 64)
CHAIN_COUNTS = (1, 2, 4)
CHAIN_SOURCE = KernelSource("w4a16_sm90/chain.cu", requires=("wgmma",),
                            name_expressions=tuple(f"wgmma_chain<{n}, {c}>" for n in CHAIN_NS for c in CHAIN_COUNTS),
                            include_dirs=(str(KERNELS / "hgemm"),))
CHAIN_SMEM = 64 * 128 + 1024     # chain.cu's B tile and the 1024 bytes that align it


def chain_cycles(n: int, chains: int, warpgroups: int = 1, iters: int = 256) -> float:
    """Cycles per wgmma m64n{n}k16 (A from registers) on one SM when each of ``warpgroups`` warpgroups adds
    into ``chains`` accumulators in turn: the median over one CTA per SM of each warpgroup's loop time / its
    wgmmas / warpgroups. (Two warpgroups at most: 4 chains of n = 64 take 182 registers a thread.)"""
    if n not in CHAIN_NS or chains not in CHAIN_COUNTS or warpgroups not in (1, 2) or iters < 1:
        raise ValueError(f"chain_cycles: n in {CHAIN_NS}, chains in {CHAIN_COUNTS}, warpgroups in (1, 2) and "
                         f"iters >= 1 expected, got n={n}, chains={chains}, warpgroups={warpgroups}, iters={iters}")
    import cupy
    fn = CHAIN_SOURCE.launchable(f"wgmma_chain<{n}, {chains}>", dynamic_smem=CHAIN_SMEM)
    sms = facts().sms
    cycles = cupy.zeros(sms * warpgroups, dtype=cupy.int64)
    sink = cupy.empty(sms * 128 * warpgroups, dtype=cupy.float32)
    for _ in range(2):                                     # the first launch loads the module and warms the clocks
        fn((sms,), (128 * warpgroups,), (np.int32(iters), cycles, sink), shared_mem=CHAIN_SMEM)
    cupy.cuda.get_current_stream().synchronize()
    want = np.float32(chains * (n // 2) * iters * 16)     # each accumulator: iters wgmmas of 16 ones x ones
    if not bool(cupy.all(sink == want)):
        raise AssertionError(f"wgmma_chain: a thread's accumulators do not add up to {want}")
    return float(np.median(cycles.get())) / (iters * chains) / warpgroups



def with_timeline(version: Version | None = None) -> Version:
    """``version`` (v1_rs or an :func:`ablation` of it) built with W4A16_TIMELINE: each CTA writes the globaltimer
    at its start, when its first stage is full and when its consumers are done (rs_common.cuh W4A16_STAMP)."""
    v = version or W4A16_WGMMA["v1_rs"]
    if not v.source.file.endswith("v01_rs.cu"):
        raise ValueError(f"with_timeline: expected v1_rs or an ablation of it, got {v.name} ({v.source.file})")
    return dataclasses.replace(v, source=dataclasses.replace(
        v.source, defines=tuple(v.source.defines) + (("W4A16_TIMELINE", "1"),)))


def cta_timeline(version: Version, *args, reps: int = 5):
    """Per CTA, in µs from the earliest CTA's start: (start, first stage full, consumers done), of the launch whose
    last CTA finished at the median over ``reps`` launches, each after an L2 flush. ``version`` from
    :func:`with_timeline`; ``args`` as the op takes them. Returns a float64 array [CTAs, 3]."""
    if not any(d == "W4A16_TIMELINE" for d, _ in version.source.defines):
        raise ValueError("cta_timeline: expected a version from with_timeline (built with W4A16_TIMELINE)")
    import cupy

    from utils.bench import flush_l2
    from utils.build import load
    run = version.bind(*args)
    ctas = version.launches(version.validate(*args))[0].grid[0]
    if ctas > 1024:
        raise ValueError(f"cta_timeline: {ctas} CTAs, above the 1024 that w4a16_timeline holds")
    stamps = cupy.ndarray((3 * 1024,), dtype=cupy.uint64, memptr=load(version.source).raw.get_global("w4a16_timeline"))
    runs = []
    for _ in range(reps):
        stamps.fill(0)
        flush_l2()
        run()
        t = stamps[: 3 * ctas].get().reshape(ctas, 3).astype(np.int64)
        runs.append((t - t[:, 0].min()) / 1e3)
    runs.sort(key=lambda r: r[:, 2].max())
    return runs[len(runs) // 2]
