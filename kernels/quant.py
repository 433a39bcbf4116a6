"""Quantization (chapter 9): formats, references, packers, cost models, launchers, versions.

Formats
- INT8 per-channel, symmetric: ``W [N, K]`` (nn.Linear layout, row n = output channel n),
  ``scale[n] = amax_n / 127``, ``q = rint(w * (127 / amax_n))`` clamped to [-127, 127].
- FP8 e4m3, per-tensor scale: ``scale = amax / 448``, ``q = e4m3(x * (448 / amax))`` (round to nearest
  even, saturating); stored as uint8 bit patterns (view them as ``torch.float8_e4m3fn``).
- INT4 asymmetric, group 128 along K: ``W [K, N] ~ (q - z) * s`` with ``q, z`` in [0, 15] and
  ``s, z`` per (group of 128 rows of K, column n).

Packings of the INT4 codes (8 nibbles per int32, nibble i in bits [4i, 4i + 4)):
- GPTQ: ``qweight [K/8, N]`` packed along K, sequential (nibble i of row r = k = 8r + i);
  ``qzeros [K/G, N/8]`` packed along N, sequential.
- AWQ: ``qweight [K, N/8]`` and ``qzeros [K/G, N/8]`` packed along N in the interleaved order
  :data:`AWQ_ORDER` (nibble i of word c = column ``8c + AWQ_ORDER[i]``).
The W4A16 GEMV consumes GPTQ's ``qweight`` and ``qzeros`` with bf16 ``scales [K/G, N]`` directly.

Every host function here takes NumPy or CuPy arrays (``xp`` follows the input).
"""
from __future__ import annotations

import numpy as np

from utils.build import KernelSource
from utils.ops import Version, expect_array, expect_same_device, registry

try:                                  # ml_dtypes ships with the book's requirements; no GPU needed
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
    FP8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:                   # pragma: no cover
    ml_dtypes = None
    BF16 = FP8_E4M3 = None

# Template instances (CTA tile and pipeline depth): the defaults below plus the variants the tuning
# script compares. One NVRTC compile builds them all.
GEMV_V2_CONFIGS = ((128, 4), (256, 4))                                   # (BN columns, stages)
GEMV_V3_CONFIGS = ((8, 3), (4, 5))                                      # (rows per stage, stages)
GEMV_V4_CONFIGS = ((1, 4), (1, 8), (2, 8))                                      # (n16 tiles per warp, warps per CTA)
GEMV_V4_DEFAULT = (1, 4)
MARLIN_CONFIGS = ((1, 1, 4), (1, 2, 4), (2, 1, 4), (3, 1, 4), (4, 1, 4), (4, 1, 3))   # (m16 tiles, n16/warp, stages)
# w4a16_marlin_v4_post: w4a16_marlin's grid and pipeline; four m16 tiles would spill at 2 CTAs per SM (the
# per-group sums double the accumulators), so it takes M <= 48.
MARLIN_V4 = "w4a16_marlin_v4_post"
MARLIN_V4_CONFIGS = ((1, 1, 4), (1, 2, 4), (2, 1, 4), (3, 1, 4))
GEMV_V5_CONFIGS = ((32, 8), (64, 8), (64, 4))                          # (BN columns, rows per load batch)
GEMV_V5_DEFAULT = (64, 8)
MARLIN_V3_CONFIGS = ((1, 1, 4), (1, 1, 6), (1, 2, 4), (2, 1, 4), (3, 1, 4), (4, 1, 3))   # (m16 tiles, n16/warp, stages)


def gemv_v2_name(bn: int, stages: int) -> str:
    return f"w4a16_gemv_v2_pipelined<{bn}, {stages}>"


def gemv_v3_name(rows: int, stages: int) -> str:
    return f"w4a16_gemv_v3_ring<{rows}, {stages}>"


def gemv_v4_name(ntw: int, warps: int) -> str:
    return f"w4a16_gemv_v4_mma<{ntw}, {warps}>"


def marlin_name(mt: int, ntw: int, stages: int, kernel: str = "w4a16_marlin") -> str:
    return f"{kernel}<{mt}, {ntw}, {stages}>"


def gemv_v5_name(bn: int, rows: int) -> str:
    return f"w4a16_gemv_v5_split<{bn}, {rows}>"


def marlin_v3_name(mt: int, ntw: int, stages: int) -> str:
    return f"w4a16_marlin_v3_stripe<{mt}, {ntw}, {stages}>"


SOURCE = KernelSource("quant.cu", name_expressions=tuple(
    [gemv_v2_name(*c) for c in GEMV_V2_CONFIGS] + [gemv_v3_name(*c) for c in GEMV_V3_CONFIGS]
    + [gemv_v4_name(*c) for c in GEMV_V4_CONFIGS] + [marlin_name(*c) for c in MARLIN_CONFIGS]
    + [marlin_name(*c, kernel=MARLIN_V4) for c in MARLIN_V4_CONFIGS]
    + [gemv_v5_name(*c) for c in GEMV_V5_CONFIGS] + [marlin_v3_name(*c) for c in MARLIN_V3_CONFIGS]))

GROUP = 128
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)      # AutoAWQ: nibble i of a word holds column 8c + AWQ_ORDER[i]
SEQ_ORDER = tuple(range(8))
FP8_MAX = 448.0                            # largest finite e4m3 value
INT8_MAX = 127
GEMV_COLS = 32                             # columns per block of the W4A16 GEMV
THREADS = 256
CONVERT_REPS = 64                          # conversion rounds per thread in the throughput benchmark


def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy.get_array_module(a)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- INT8 per-channel ------------------------------------------------------------------------------

def int8_reference(w):
    """(q int8 [N, K], scale float32 [N]) for W [N, K] (bf16 or float32), as the kernel computes them.

    amax, 127 / amax and amax / 127 are computed in float32 with IEEE division, the products
    ``w * inv`` in float32, rounding half to even: the kernel must match bit for bit.
    """
    xp = _xp(w)
    wf = w.astype(xp.float32)
    amax = xp.abs(wf).max(axis=1)
    amax_h = amax.get() if xp is not np else amax               # N values: divide on the host (IEEE)
    amax_h = np.asarray(amax_h, dtype=np.float32)
    with np.errstate(divide="ignore"):
        inv_h = np.where(amax_h > 0, np.float32(INT8_MAX) / amax_h, np.float32(0)).astype(np.float32)
    scale_h = (amax_h / np.float32(INT8_MAX)).astype(np.float32)
    inv = xp.asarray(inv_h)
    q = xp.clip(xp.rint(wf * inv[:, None]), -INT8_MAX, INT8_MAX).astype(xp.int8)
    return q, xp.asarray(scale_h)


def int8_dequant_reference(q, scale):
    xp = _xp(q)
    return q.astype(xp.float32) * scale.astype(xp.float32)[:, None]


# --- FP8 e4m3 per tensor ---------------------------------------------------------------------------

def fp8_reference(x):
    """(q uint8 bit patterns, scale float32) for any-shaped x, as the kernels compute them (NumPy/CuPy)."""
    xp = _xp(x)
    xf = x.astype(xp.float32)
    amax = np.float32(float(xp.abs(xf).max()))
    inv = np.float32(FP8_MAX) / amax if amax > 0 else np.float32(0)
    scale = np.float32(amax / np.float32(FP8_MAX))
    scaled = xf * inv
    if xp is np:
        q = scaled.astype(FP8_E4M3).view(np.uint8)
    else:                             # on the GPU: PyTorch's own float32 -> float8_e4m3fn conversion
        import torch
        t = torch.from_dlpack(xp.ascontiguousarray(scaled)).to(torch.float8_e4m3fn).view(torch.uint8)
        q = xp.from_dlpack(t).copy()
    return q, scale


def fp8_decode(q):
    """float32 values of e4m3 bit patterns (uint8), NumPy or CuPy."""
    xp = _xp(q)
    if xp is np:
        return np.asarray(q, dtype=np.uint8).view(FP8_E4M3).astype(np.float32)
    import torch
    t = torch.from_dlpack(xp.ascontiguousarray(q)).view(torch.float8_e4m3fn).float()
    return xp.from_dlpack(t).copy()


# --- INT4: quantization, packing, dequantization ---------------------------------------------------

def quantize_int4(w, group: int = GROUP):
    """Asymmetric INT4 with one (scale, zero) per ``group`` rows of K and column: W [K, N] float.

    Returns q uint8 [K, N] in [0, 15], scales float32 [K/group, N], zeros uint8 [K/group, N] in [0, 15]:
    ``s = (max - min) / 15``, ``z = clip(rint(-min / s), 0, 15)``, ``q = clip(rint(w / s) + z, 0, 15)``.
    """
    xp = _xp(w)
    K, N = w.shape
    if K % group:
        raise ValueError(f"K = {K} is not a multiple of the group size {group}")
    wg = w.astype(xp.float32).reshape(K // group, group, N)
    lo = xp.minimum(wg.min(axis=1), 0)
    hi = xp.maximum(wg.max(axis=1), 0)
    s = (hi - lo) / 15
    s = xp.where(s > 0, s, 1).astype(xp.float32)
    z = xp.clip(xp.rint(-lo / s), 0, 15)
    q = xp.clip(xp.rint(wg / s[:, None, :]) + z[:, None, :], 0, 15)
    return q.reshape(K, N).astype(xp.uint8), s, z.astype(xp.uint8)


def dequantize_int4(q, scales, zeros, group: int = GROUP):
    """W [K, N] float32 = (q - z) * s, the group's (s, z) broadcast over its rows."""
    xp = _xp(q)
    K, N = q.shape
    qg = q.astype(xp.float32).reshape(K // group, group, N)
    w = (qg - zeros.astype(xp.float32)[:, None, :]) * scales.astype(xp.float32)[:, None, :]
    return w.reshape(K, N)


def pack_nibbles(a, axis: int, order=SEQ_ORDER):
    """Pack a uint8 array of values in [0, 15] along ``axis`` (length divisible by 8) into int32.

    Word c holds elements 8c .. 8c+7 of the axis; nibble i (bits 4i..4i+3) holds element 8c + order[i].
    """
    xp = _xp(a)
    a = xp.moveaxis(a, axis, -1)
    *lead, L = a.shape
    if L % 8:
        raise ValueError(f"cannot pack an axis of length {L} into int32 words of 8 nibbles")
    g = a.reshape(*lead, L // 8, 8).astype(xp.uint32)
    words = xp.zeros((*lead, L // 8), dtype=xp.uint32)
    for i, e in enumerate(order):
        words |= (g[..., e] & 0xF) << (4 * i)
    return xp.ascontiguousarray(xp.moveaxis(words.view(xp.int32), -1, axis))


def unpack_nibbles(words, axis: int, order=SEQ_ORDER):
    """The inverse of :func:`pack_nibbles`: uint8 values, the axis 8 times longer."""
    xp = _xp(words)
    w = xp.moveaxis(words, axis, -1).astype(xp.uint32)     # same bits (int32 -> uint32 wraps)
    *lead, C = w.shape
    out = xp.zeros((*lead, C, 8), dtype=xp.uint8)
    for i, e in enumerate(order):
        out[..., e] = ((w >> (4 * i)) & 0xF).astype(xp.uint8)
    return xp.ascontiguousarray(xp.moveaxis(out.reshape(*lead, C * 8), -1, axis))


def pack_gptq(q, zeros):
    """GPTQ layout: qweight [K/8, N] (along K, sequential), qzeros [K/G, N/8] (along N, sequential).

    Zero points are stored as z itself; some GPTQ checkpoints store z - 1 and add the 1 back on load.
    """
    return pack_nibbles(q, 0, SEQ_ORDER), pack_nibbles(zeros, 1, SEQ_ORDER)


def pack_awq(q, zeros):
    """AWQ layout: qweight [K, N/8] and qzeros [K/G, N/8], both along N in AWQ_ORDER."""
    return pack_nibbles(q, 1, AWQ_ORDER), pack_nibbles(zeros, 1, AWQ_ORDER)


def random_int4_problem(K: int, N: int, xp=None, group: int = GROUP):
    """Random INT4 codes q uint8 [K, N] in [0, 15], zero points z uint8 [K/group, N] in [0, 15] and bf16
    group scales s [K/group, N] uniform in [0.005, 0.02]: the inputs the W4A16 tests and benchmarks use.

    ``xp`` is the array module (CuPy by default; NumPy works too, with a NumPy ``Generator`` underneath)."""
    if xp is None:
        import cupy as xp
    if K % group:
        raise ValueError(f"K = {K} is not a multiple of the group size {group}")
    rand = xp.random if xp is not np else np.random.default_rng()
    q = rand.integers(0, 16, (K, N)) if xp is np else rand.randint(0, 16, (K, N), dtype=xp.int32)
    z = rand.integers(0, 16, (K // group, N)) if xp is np else rand.randint(0, 16, (K // group, N), dtype=xp.int32)
    s = rand.uniform(0.005, 0.02, (K // group, N)) if xp is np else rand.uniform(0.005, 0.02, (K // group, N),
                                                                                 dtype=xp.float32)
    return q.astype(xp.uint8), z.astype(xp.uint8), s.astype(xp.float32).astype(_bf16())


# --- cost models -----------------------------------------------------------------------------------

def int8_quant_nbytes(N: int, K: int) -> int:
    """Read W (bf16) once, write q (int8) and the scales: the minimum."""
    return N * K * 2 + N * K + N * 4


def int8_dequant_nbytes(N: int, K: int) -> int:
    return N * K + N * 4 + N * K * 2


def fp8_quant_nbytes(n: int) -> int:
    """Minimum for quantize-with-amax: read x once (bf16), write q (1 byte each). Our two passes read x twice."""
    return 2 * n + n + 4


def fp8_dequant_nbytes(n: int) -> int:
    return n + 4 + 2 * n


def gemv_nbytes(K: int, N: int, group: int = GROUP) -> int:
    """W4A16 GEMV, batch 1: packed weights + bf16 scales + packed zeros + bf16 x + bf16 out."""
    return K * N // 2 + (K // group) * N * 2 + (K // group) * N // 2 + K * 2 + N * 2


def gemv_bf16_nbytes(K: int, N: int) -> int:
    """The same GEMV with bf16 weights (what cuBLAS streams)."""
    return K * N * 2 + K * 2 + N * 2


def gemv_flops(K: int, N: int) -> float:
    return 2.0 * K * N


def convert_ops(n_vec: int, reps: int = CONVERT_REPS) -> int:
    """Nibbles converted by one launch of a conversion benchmark kernel (the stored round included)."""
    return n_vec * 32 * (reps + 1)


# --- launchers -------------------------------------------------------------------------------------

def _bf16():
    if BF16 is None:
        raise ValueError("bf16 arrays need the ml_dtypes package")
    return BF16


def launch_int8_quant(w, q, scale):
    """W [N, K] bf16 -> q [N, K] int8, scale [N] float32: one block per row."""
    expect_array(w, "w", dtype=_bf16(), ndim=2)
    N, K = (int(s) for s in w.shape)
    if N < 1 or K < 1:
        raise ValueError(f"w: expected a non-empty matrix, got shape {(N, K)}")
    if N > 2**31 - 1 or K > 2**31 - 1:
        raise ValueError(f"w: shape {(N, K)} exceeds the int32 kernel arguments")
    expect_array(q, "q", dtype=np.int8, shape=(N, K))
    expect_array(scale, "scale", dtype=np.float32, shape=(N,), align=4)
    expect_same_device(w, q, scale)
    SOURCE.function("int8_quant_rowwise")((N, 1, 1), (THREADS, 1, 1), (w, q, scale, np.int32(K)))
    return q, scale


def launch_int8_dequant(q, scale, w):
    expect_array(q, "q", dtype=np.int8, ndim=2)
    N, K = (int(s) for s in q.shape)
    if N < 1 or K < 1:
        raise ValueError(f"q: expected a non-empty matrix, got shape {(N, K)}")
    expect_array(scale, "scale", dtype=np.float32, shape=(N,), align=4)
    expect_array(w, "w", dtype=_bf16(), shape=(N, K))
    expect_same_device(q, scale, w)
    SOURCE.function("int8_dequant_rowwise")((N, 1, 1), (THREADS, 1, 1), (q, scale, w, np.int32(K)))
    return w


def fp8_amax_grid(n: int) -> int:
    return max(1, min(132 * 8, ceil_div(ceil_div(n, 8), THREADS)))


def launch_fp8_quant(x, q, scale, amax_bits):
    """x (any shape, bf16) -> q (same shape, uint8 e4m3 bits), scale [1] float32; amax_bits [1] uint32 scratch."""
    expect_array(x, "x", dtype=_bf16())
    n = int(np.prod(x.shape))
    if n < 1:
        raise ValueError("x: expected at least one element")
    expect_array(q, "q", dtype=np.uint8, shape=tuple(x.shape))
    expect_array(scale, "scale", dtype=np.float32, shape=(1,), align=4)
    expect_array(amax_bits, "amax_bits", dtype=np.uint32, shape=(1,), align=4)
    expect_same_device(x, q, scale, amax_bits)
    amax_bits.fill(0)
    SOURCE.function("fp8_amax")((fp8_amax_grid(n), 1, 1), (THREADS, 1, 1), (x, amax_bits, np.int64(n)))
    grid = ceil_div(ceil_div(n, 8), THREADS)
    SOURCE.function("fp8_quant")((grid, 1, 1), (THREADS, 1, 1), (x, amax_bits, q, scale, np.int64(n)))
    return q, scale


def launch_fp8_dequant(q, scale, x):
    expect_array(q, "q", dtype=np.uint8)
    n = int(np.prod(q.shape))
    if n < 1:
        raise ValueError("q: expected at least one element")
    expect_array(scale, "scale", dtype=np.float32, shape=(1,), align=4)
    expect_array(x, "x", dtype=_bf16(), shape=tuple(q.shape))
    expect_same_device(q, scale, x)
    grid = ceil_div(ceil_div(n, 8), THREADS)
    SOURCE.function("fp8_dequant")((grid, 1, 1), (THREADS, 1, 1), (q, scale, x, np.int64(n)))
    return x


def _convert_launcher(kernel: str, out_dtype: str):
    def launch(packed, out, sink, reps: int = CONVERT_REPS):
        expect_array(packed, "packed", dtype=(np.int32, np.uint32), ndim=1)
        words = int(packed.shape[0])
        if words < 4 or words % 4:
            raise ValueError(f"packed: expected a positive multiple of 4 words (16 bytes per thread), got {words}")
        if words // 4 > 2**31 - 1:
            raise ValueError(f"packed: {words} words exceed the int32 thread count")
        want = _bf16() if out_dtype == "bfloat16" else np.dtype(np.float16)
        expect_array(out, "out", dtype=want, shape=(words * 8,))
        expect_array(sink, "sink", dtype=np.uint32, shape=(1,), align=4)
        if not 0 <= int(reps) < 2**31:
            raise ValueError(f"reps: expected a non-negative int32, got {reps}")
        expect_same_device(packed, out, sink)
        n_vec = words // 4
        SOURCE.function(kernel)((ceil_div(n_vec, THREADS), 1, 1), (THREADS, 1, 1),
                                (packed, out, sink, np.int32(n_vec), np.int32(reps)))
        return out
    launch.__name__ = f"launch_{kernel}"
    launch.__doc__ = (f"Launch {kernel}: out ({out_dtype}, 8 per word) = the nibbles of packed, then "
                      "`reps` timed rounds of conversions that only feed a sink.")
    return launch


def gemv_check_shapes(K: int, N: int, group: int = GROUP) -> None:
    """The W4A16 GEMV's shape rules (pure function, tested on the CPU)."""
    if K < 1 or N < 1:
        raise ValueError(f"expected K >= 1 and N >= 1, got K={K}, N={N}")
    if K % group:
        raise ValueError(f"K = {K} is not a multiple of the group size {group}: INT4 group quantization "
                         "needs whole groups along K")
    if N % 8:
        raise ValueError(f"N = {N} is not a multiple of 8: qzeros packs 8 columns per int32")
    if K * N // 8 >= 2**31 or N >= 2**31:
        raise ValueError(f"K x N = {K} x {N} is too large for the int32 indexing of this kernel")


def gemv_grid(N: int) -> tuple[int, int, int]:
    return (ceil_div(N, GEMV_COLS), 1, 1)


def _gemv_validate(x, qweight, qzeros, scales, out) -> tuple[int, int]:
    """Check the GEMV's arguments (GPTQ tensors, batch 1); return (K, N)."""
    bf16 = _bf16()
    expect_array(x, "x", dtype=bf16, ndim=2)
    if int(x.shape[0]) != 1:
        raise ValueError(f"x: expected one row (batch 1, shape (1, K)), got shape {tuple(x.shape)}")
    K = int(x.shape[1])
    expect_array(qweight, "qweight", dtype=np.int32, ndim=2)
    N = int(qweight.shape[1])
    gemv_check_shapes(K, N)
    expect_array(qweight, "qweight", dtype=np.int32, shape=(K // 8, N))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16, shape=(K // GROUP, N))
    expect_array(out, "out", dtype=bf16, shape=(1, N))
    expect_same_device(x, qweight, qzeros, scales, out)
    return K, N


def _gemv_launcher(kernel: str):
    def launch(x, qweight, qzeros, scales, out):
        K, N = _gemv_validate(x, qweight, qzeros, scales, out)
        SOURCE.function(kernel)(gemv_grid(N), (THREADS, 1, 1),
                                (qweight, qzeros, scales, x, out, np.int32(K), np.int32(N)))
        return out
    launch.__name__ = f"launch_{kernel}"
    launch.__doc__ = f"Launch {kernel}: out (1, N) = x (1, K) @ dequant(qweight, qzeros, scales), bf16."
    return launch


# --- split-K planning and scratch memory (GEMV v2 and the Marlin-style GEMM) -------------------------

SMEM_PER_SM = 228 * 1024                   # H100/H200: shared memory per SM, 1 KB of it reserved per CTA
SMEM_RESERVED_PER_CTA = 1024
H200_SMS = 132


def gemv_v2_stage_bytes(bn: int) -> int:
    """One stage of w4a16_gemv_v2: 16 qweight rows x BN columns, 128 x, BN scales, BN/8 zero words."""
    return 16 * bn * 4 + GROUP * 2 + bn * 2 + bn // 2


def marlin_stage_bytes(mt: int, ntw: int) -> int:
    """One stage of w4a16_marlin: 8 NTW n16 tiles x k128 of weights, 16 MT rows x 128 of A, scales, zeros."""
    bn = 128 * ntw
    return 8 * ntw * 1024 + 16 * mt * GROUP * 2 + bn * 2 + bn // 2


def ctas_per_sm_by_smem(smem: int, cap: int = 8) -> int:
    """How many CTAs with ``smem`` bytes of dynamic shared memory fit on one SM (registers not counted)."""
    return max(1, min(cap, SMEM_PER_SM // (smem + SMEM_RESERVED_PER_CTA)))


def plan_splits(tiles: int, groups: int, sms: int, ctas_per_sm: int) -> int:
    """K splits so that tiles x splits CTAs fill ``ctas_per_sm`` slots on every SM (at least one group each)."""
    want = max(1, round(sms * ctas_per_sm / tiles))
    return max(1, min(groups, want))


_SMS: dict[int, int] = {}


def _sms() -> int:
    """SM count of the current device, cached: the launchers run inside timed loops, where host work
    must stay well under the benchmark's 50 us spin."""
    import cupy
    dev = cupy.cuda.Device()
    if dev.id not in _SMS:
        _SMS[dev.id] = int(cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount,
                                                                dev.id))
    return _SMS[dev.id]


_SCRATCH: dict = {}


def _scratch(kind: str, n: int, dtype):
    """A cached device array of at least ``n`` elements per device (zeros when first allocated).

    Split-K counters must be zero before a launch; the kernels set them back to zero when they finish,
    so one zeroed allocation serves every later launch on the same stream."""
    import cupy
    key = (cupy.cuda.Device().id, kind)
    buf = _SCRATCH.get(key)
    if buf is None or buf.size < n:
        buf = cupy.zeros(max(n, 4096), dtype=dtype)
        _SCRATCH[key] = buf
    return buf


def _set_smem(fn, smem: int):
    if fn.max_dynamic_shared_size_bytes < smem:       # opt in above the default 48 KB
        fn.max_dynamic_shared_size_bytes = int(smem)
    return fn


GEMV_V2_DEFAULT = (128, 4)                 # (BN, stages)


def gemv_v2_plan(K: int, N: int, bn: int | None = None, stages: int | None = None, splits: int | None = None,
                 sms: int = H200_SMS):
    """(kernel name, grid, dynamic smem bytes) of w4a16_gemv_v2 for a 1 x K x N product."""
    gemv_check_shapes(K, N)
    bn = bn or GEMV_V2_DEFAULT[0]
    stages = stages or GEMV_V2_DEFAULT[1]
    if (bn, stages) not in GEMV_V2_CONFIGS:
        raise ValueError(f"w4a16_gemv_v2: (BN, stages) = {(bn, stages)} is not instantiated; "
                         f"choose one of {GEMV_V2_CONFIGS}")
    smem = stages * gemv_v2_stage_bytes(bn)
    tiles, groups = ceil_div(N, bn), K // GROUP
    if splits is None:
        splits = plan_splits(tiles, groups, sms, min(2, ctas_per_sm_by_smem(smem)))
    if not 1 <= splits <= groups:
        raise ValueError(f"splits = {splits}: expected 1 .. {groups} (K / 128 groups)")
    return gemv_v2_name(bn, stages), (tiles, splits, 1), smem


def launch_gemv_v2(x, qweight, qzeros, scales, out, *, bn=None, stages=None, splits=None):
    """out (1, N) = x (1, K) @ dequant(GPTQ tensors), bf16, through the cp.async pipeline (w4a16_gemv_v2)."""
    K, N = _gemv_validate(x, qweight, qzeros, scales, out)
    name, grid, smem = gemv_v2_plan(K, N, bn, stages, splits, sms=_sms())
    ws = _scratch("ws", grid[1] * N if grid[1] > 1 else 1, np.float32)
    counters = _scratch("counters", grid[0], np.uint32)
    _set_smem(SOURCE.function(name), smem)(grid, (THREADS, 1, 1),
                                           (qweight, qzeros, scales, x, out, ws, counters, np.int32(K), np.int32(N)),
                                           shared_mem=smem)
    return out


GEMV_V3_DEFAULT = (8, 3)                   # (rows per stage, stages)
GEMV_V3_STATIC_SMEM = 32 * 33 * 4          # gemv_reduce_store's [32 K-slices][33] fp32


def gemv_v3_smem_bytes(rows: int, stages: int) -> int:
    """Dynamic smem of w4a16_gemv_v3_ring: the weight ring [stages][rows][256] uint4 and the (scales,
    zero word) side ring [stages][256] uint4."""
    return stages * (rows + 1) * THREADS * 16


def gemv_v3_plan(K: int, N: int, rows: int | None = None, stages: int | None = None):
    """(kernel name, grid, dynamic smem bytes) of w4a16_gemv_v3_ring for a 1 x K x N product."""
    gemv_check_shapes(K, N)
    rows, stages = rows or GEMV_V3_DEFAULT[0], stages or GEMV_V3_DEFAULT[1]
    if (rows, stages) not in GEMV_V3_CONFIGS:
        raise ValueError(f"w4a16_gemv_v3_ring: (rows, stages) = {(rows, stages)} is not instantiated; "
                         f"choose one of {GEMV_V3_CONFIGS}")
    return gemv_v3_name(rows, stages), gemv_grid(N), gemv_v3_smem_bytes(rows, stages)


def gemv_v3_ctas_per_sm(rows: int, stages: int) -> int:
    """CTAs per SM that shared memory allows (the kernel's launch bounds ask for 2)."""
    return SMEM_PER_SM // (gemv_v3_smem_bytes(rows, stages) + GEMV_V3_STATIC_SMEM + SMEM_RESERVED_PER_CTA)


def gemv_v3_bytes_in_flight_per_sm(rows: int, stages: int) -> int:
    """Weight bytes each SM keeps in flight in the steady state: STAGES - 1 stages per thread."""
    return (stages - 1) * rows * 16 * THREADS * min(2, gemv_v3_ctas_per_sm(rows, stages))


def launch_gemv_v3(x, qweight, qzeros, scales, out, *, rows=None, stages=None):
    """out (1, N) = x (1, K) @ dequant(GPTQ tensors), bf16, each thread streaming its own rows through a
    private cp.async ring (w4a16_gemv_v3_ring)."""
    K, N = _gemv_validate(x, qweight, qzeros, scales, out)
    name, grid, smem = gemv_v3_plan(K, N, rows, stages)
    _set_smem(SOURCE.function(name), smem)(grid, (THREADS, 1, 1),
                                           (qweight, qzeros, scales, x, out, np.int32(K), np.int32(N)),
                                           shared_mem=smem)
    return out


CONVERT_VERSIONS = registry(
    Version("int4_convert_v0_naive", "v0_naive", _convert_launcher("int4_convert_v0_naive", "bfloat16"),
            "shift, mask and integer-to-bf16 conversion per nibble (sequential order)"),
    Version("int4_convert_v1_magic", "v1_magic", _convert_launcher("int4_convert_v1_magic", "bfloat16"),
            "lop3 into the mantissa of 128.0 for two nibbles at once, subtract, prmt back to order"),
    Version("int4_convert_v2_magic_interleaved", "v2_magic_interleaved",
            _convert_launcher("int4_convert_v2_magic_interleaved", "bfloat16"),
            "v1 on AWQ's interleaved order: pairs come out in order, no prmt"),
    Version("int4_convert_v3_magic_fp16", "v3_magic_fp16", _convert_launcher("int4_convert_v3_magic_fp16", "float16"),
            "fp16 output, magic 1024.0: one shift per 8 nibbles, the odd nibble scaled by 1/16"),
)
# Which packing order each conversion version expects its input words in.
CONVERT_ORDER = {"v0_naive": SEQ_ORDER, "v1_magic": SEQ_ORDER, "v2_magic_interleaved": AWQ_ORDER,
                 "v3_magic_fp16": AWQ_ORDER}

GEMV_VERSIONS = registry(
    Version("w4a16_gemv_v0_naive", "v0_naive", _gemv_launcher("w4a16_gemv_v0_naive"),
            "32 columns x all K per block, 16-byte weight loads, shift/mask/int-to-float, fp32 FMA"),
    Version("w4a16_gemv_v1_magic", "v1_magic", _gemv_launcher("w4a16_gemv_v1_magic"),
            "v0 with the magic-number conversion and bf16x2 products, fp32 sums every 4 products"),
    Version("w4a16_gemv_v2_pipelined", "v2_pipelined", launch_gemv_v2,
            "v1's arithmetic; a cp.async pipeline through smem keeps ~50 KB in flight per SM; split-K over CTAs"),
    Version("w4a16_gemv_v3_ring", "v3_ring", launch_gemv_v3,
            "v1's layout; each thread streams its own rows through a private cp.async ring, no barrier"),
)

# The registered GEMV the shape sweep uses: v1 was the fastest of v1-v3 in both tuning batches on the H200
# (2026-11-29: 15.0 us vs 18.2-19.9 us for v2/v3 at K = N = 8192); v4 needs the shuffled weights.
BEST_GEMV = "v1_magic"


# --- W4A16 tensor-core GEMM (Marlin-style) ---------------------------------------------------------

MMA_COLS = 64                              # columns per block (4 n16 tiles)


def mma_fragment_map():
    """(dk, dn) [32 lanes, 8 nibbles]: nibble i of lane (g, t)'s word for a k16 x n16 tile holds
    W[16 kt + dk[lane, i], 16 nt + dn[lane, i]]. Pairs (i, i + 4) are the B registers of mma.m16n8k16:
    (0, 4) = b0 and (1, 5) = b1 of the n8 tile at column g; (2, 6), (3, 7) the same at column g + 8."""
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    dk = np.stack([2 * t, 2 * t + 8, 2 * t, 2 * t + 8, 2 * t + 1, 2 * t + 9, 2 * t + 1, 2 * t + 9], axis=1)
    dn = np.stack([g, g, g + 8, g + 8, g, g, g + 8, g + 8], axis=1)
    return dk, dn


def pack_mma(q):
    """Offline shuffle of INT4 codes q [K, N] into mma B-fragment order: int32 [N/16, K/64, 32, 4].

    Word j of lane l in (n16 tile nt, k64 chunk kc) covers the k16 tile 4 kc + j (see mma_fragment_map)."""
    xp = _xp(q)
    K, N = q.shape
    if K % 64 or N % 16:
        raise ValueError(f"pack_mma needs K % 64 == 0 and N % 16 == 0, got K={K}, N={N}")
    dk, dn = (xp.asarray(a) for a in mma_fragment_map())
    q4 = q.reshape(K // 16, 16, N // 16, 16).transpose(0, 2, 1, 3)   # [kt, nt, dk, dn]
    vals = q4[:, :, dk, dn].astype(xp.uint32)                        # [K/16, N/16, 32 lanes, 8 nibbles]
    words = xp.zeros((K // 16, N // 16, 32), dtype=xp.uint32)
    for i in range(8):
        words |= (vals[..., i] & 0xF) << (4 * i)
    words = words.reshape(K // 64, 4, N // 16, 32).transpose(2, 0, 3, 1)   # [N/16, K/64, 32, 4]
    return xp.ascontiguousarray(words).view(xp.int32)


def mma_check_shapes(M: int, K: int, N: int, group: int = GROUP) -> None:
    if M < 1 or K < 1 or N < 1:
        raise ValueError(f"expected M, K, N >= 1, got M={M}, K={K}, N={N}")
    if K % group:
        raise ValueError(f"K = {K} is not a multiple of the group size {group}: INT4 group quantization "
                         "needs whole groups along K")
    if N % 16:
        raise ValueError(f"N = {N} is not a multiple of 16: the weights are shuffled in 16-column mma tiles")
    if M * K >= 2**31 or M * N >= 2**31 or K * N // 8 >= 2**31:
        raise ValueError(f"M, K, N = {M}, {K}, {N} are too large for the int32 indexing of this kernel")


def mma_kernel_and_grid(M: int, N: int):
    """The kernel (16 or 32 rows per block) and its grid for an M x N output."""
    if M <= 16:
        return "w4a16_mma_m16", (ceil_div(N, MMA_COLS), ceil_div(M, 16), 1)
    return "w4a16_mma_m32", (ceil_div(N, MMA_COLS), ceil_div(M, 32), 1)


def _mma_validate(a, qmma, qzeros, scales, out) -> tuple[int, int, int]:
    """Check the tensor-core GEMM's arguments (shuffled weights, GPTQ zeros, bf16 scales); return (M, K, N)."""
    bf16 = _bf16()
    expect_array(a, "a", dtype=bf16, ndim=2)
    M, K = (int(s) for s in a.shape)
    expect_array(qmma, "qmma", dtype=np.int32, ndim=4)
    N = int(qmma.shape[0]) * 16
    mma_check_shapes(M, K, N)
    expect_array(qmma, "qmma", dtype=np.int32, shape=(N // 16, K // 64, 32, 4))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16, shape=(K // GROUP, N))
    expect_array(out, "out", dtype=bf16, shape=(M, N))
    expect_same_device(a, qmma, qzeros, scales, out)
    return M, K, N


def launch_mma(a, qmma, qzeros, scales, out):
    """out (M, N) bf16 = a (M, K) bf16 @ dequant(qmma, qzeros, scales) on tensor cores (mma.sync)."""
    M, K, N = _mma_validate(a, qmma, qzeros, scales, out)
    kernel, grid = mma_kernel_and_grid(M, N)
    SOURCE.function(kernel)(grid, (THREADS, 1, 1),
                            (qmma, qzeros, scales, a, out, np.int32(M), np.int32(K), np.int32(N)))
    return out


def gemm_nbytes(M: int, K: int, N: int, group: int = GROUP) -> int:
    """W4A16 GEMM: packed weights + scales + packed zeros + bf16 A and C."""
    return K * N // 2 + (K // group) * N * 2 + (K // group) * N // 2 + M * K * 2 + M * N * 2


def gemm_bf16_nbytes(M: int, K: int, N: int) -> int:
    return K * N * 2 + M * K * 2 + M * N * 2


def gemv_reference(x, qweight, qzeros, scales):
    """out (1, N) float32 = x @ dequantized W, from the packed GPTQ tensors (NumPy or CuPy)."""
    xp = _xp(qweight)
    q = unpack_nibbles(qweight, 0, SEQ_ORDER)
    z = unpack_nibbles(qzeros, 1, SEQ_ORDER)
    w = dequantize_int4(q, scales.astype(xp.float32), z)
    return x.astype(xp.float32) @ w


def gemv_v4_plan(K: int, N: int, ntw: int | None = None, warps: int | None = None):
    """(kernel name, grid, block) of w4a16_gemv_v4_mma for a 1 x K x N product on the shuffled weights."""
    mma_check_shapes(1, K, N)
    d_ntw, d_warps = GEMV_V4_DEFAULT
    ntw, warps = ntw or d_ntw, warps or d_warps
    if (ntw, warps) not in GEMV_V4_CONFIGS:
        raise ValueError(f"w4a16_gemv_v4_mma: (n16 tiles per warp, warps) = {(ntw, warps)} is not instantiated; "
                         f"choose one of {list(GEMV_V4_CONFIGS)}")
    return gemv_v4_name(ntw, warps), (ceil_div(N // 16, ntw), 1, 1), (32 * warps, 1, 1)


def launch_gemv_v4(x, qmma, qzeros, scales, out, *, ntw=None, warps=None):
    """out (1, N) bf16 = x (1, K) bf16 @ dequant(qmma, qzeros, scales) on tensor cores (GEMV v4).

    Takes the Marlin-shuffled weights (pack_mma), so N must be a multiple of 16."""
    M, K, N = _mma_validate(x, qmma, qzeros, scales, out)
    if M != 1:
        raise ValueError(f"x: expected one row (batch 1, shape (1, K)), got shape {tuple(x.shape)}")
    name, grid, block = gemv_v4_plan(K, N, ntw, warps)
    SOURCE.function(name)(grid, block, (qmma, qzeros, scales, x, out, np.int32(K), np.int32(N)))
    return out


# --- W4A16 tensor-core GEMM v2: Marlin's structure ---------------------------------------------------

MARLIN_MAX_M = 64
MARLIN_DEFAULT = {1: (1, 4), 2: (1, 4), 3: (1, 4), 4: (1, 3)}     # m16 tiles -> (n16 tiles per warp, stages)


def marlin_plan(M: int, K: int, N: int, ntw: int | None = None, stages: int | None = None,
                splits: int | None = None, sms: int = H200_SMS, kernel: str = "w4a16_marlin"):
    """(kernel name, grid, dynamic smem bytes) of w4a16_marlin (or ``kernel`` = MARLIN_V4, the same grid and
    stages) for an M x K x N product."""
    mma_check_shapes(M, K, N)
    tables = {"w4a16_marlin": MARLIN_CONFIGS, MARLIN_V4: MARLIN_V4_CONFIGS}
    if kernel not in tables:
        raise ValueError(f"kernel = {kernel!r}: expected one of {list(tables)}")
    configs = tables[kernel]
    max_m = 16 * max(c[0] for c in configs)
    if M > max_m:
        raise ValueError(f"M = {M}: {kernel} keeps all rows of A in one CTA and takes M <= {max_m}; "
                         + ("use w4a16_marlin (v2_marlin) up to 64" if max_m < MARLIN_MAX_M else
                            "larger batches are compute-bound, use a dense GEMM on dequantized weights"))
    mt = ceil_div(M, 16)
    d_ntw, d_stages = MARLIN_DEFAULT[mt]
    ntw, stages = ntw or d_ntw, stages or d_stages
    if (mt, ntw, stages) not in configs:
        avail = [c[1:] for c in configs if c[0] == mt]
        raise ValueError(f"{kernel}: (n16 tiles per warp, stages) = {(ntw, stages)} is not instantiated "
                         f"for {mt} m16 tiles (M = {M}); choose one of {avail}")
    smem = stages * marlin_stage_bytes(mt, ntw)
    tiles, groups = ceil_div(N, 128 * ntw), K // GROUP
    if splits is None:
        splits = plan_splits(tiles, groups, sms, min(2, ctas_per_sm_by_smem(smem)))
    if not 1 <= splits <= groups:
        raise ValueError(f"splits = {splits}: expected 1 .. {groups} (K / 128 groups)")
    return marlin_name(mt, ntw, stages, kernel), (tiles, splits, 1), smem


def launch_marlin(a, qmma, qzeros, scales, out, *, ntw=None, stages=None, splits=None, kernel="w4a16_marlin"):
    """out (M, N) bf16 = a (M, K) bf16 @ dequant(qmma, qzeros, scales), M <= 64, Marlin-style (w4a16_marlin, or
    ``kernel`` = MARLIN_V4)."""
    M, K, N = _mma_validate(a, qmma, qzeros, scales, out)
    name, grid, smem = marlin_plan(M, K, N, ntw, stages, splits, sms=_sms(), kernel=kernel)
    ws = _scratch("ws", grid[1] * M * N if grid[1] > 1 else 1, np.float32)
    counters = _scratch("counters", grid[0], np.uint32)
    _set_smem(SOURCE.function(name), smem)(grid, (THREADS, 1, 1),
                                           (qmma, qzeros, scales, a, out, ws, counters,
                                            np.int32(M), np.int32(K), np.int32(N)), shared_mem=smem)
    return out


def launch_marlin_v4(a, qmma, qzeros, scales, out, *, ntw=None, stages=None, splits=None):
    """launch_marlin with w4a16_marlin_v4_post: zero point and scale applied per group after the mma."""
    return launch_marlin(a, qmma, qzeros, scales, out, ntw=ntw, stages=stages, splits=splits, kernel=MARLIN_V4)


# --- W4A16 GEMV v5: split-K over CTAs, <= 64 registers, whole waves ---------------------------------

GEMV_V5_CTAS_PER_SM = 4                    # launch bounds (256, 4): <= 64 registers; smem is ~8 KB


def gemv_v5_plan(K: int, N: int, bn: int | None = None, rows: int | None = None, splits: int | None = None,
                 sms: int = H200_SMS):
    """(kernel name, grid) of w4a16_gemv_v5_split for a 1 x K x N product. ``splits=None``: the K split that
    makes tiles x splits closest to whole waves of GEMV_V5_CTAS_PER_SM CTAs per SM."""
    gemv_check_shapes(K, N)
    d_bn, d_rows = GEMV_V5_DEFAULT
    bn, rows = bn or d_bn, rows or d_rows
    if (bn, rows) not in GEMV_V5_CONFIGS:
        raise ValueError(f"w4a16_gemv_v5_split: (BN, rows) = {(bn, rows)} is not instantiated; "
                         f"choose one of {list(GEMV_V5_CONFIGS)}")
    tiles, blocks = ceil_div(N, bn), K // 8 // rows
    if splits is None:
        splits = plan_splits(tiles, blocks, sms, GEMV_V5_CTAS_PER_SM)
    if not 1 <= splits <= blocks:
        raise ValueError(f"splits = {splits}: expected 1 .. {blocks} (K / 8 / rows row blocks)")
    return gemv_v5_name(bn, rows), (tiles, splits, 1)


def launch_gemv_v5(x, qweight, qzeros, scales, out, *, bn=None, rows=None, splits=None):
    """out (1, N) = x (1, K) @ dequant(GPTQ tensors), bf16: v1's arithmetic on a split-K grid of whole waves,
    <= 64 registers, every row batch's loads issued before its math (w4a16_gemv_v5_split)."""
    K, N = _gemv_validate(x, qweight, qzeros, scales, out)
    name, grid = gemv_v5_plan(K, N, bn, rows, splits, sms=_sms())
    ws = _scratch("ws", grid[1] * N if grid[1] > 1 else 1, np.float32)
    counters = _scratch("counters", grid[0], np.uint32)
    SOURCE.function(name)(grid, (THREADS, 1, 1),
                          (qweight, qzeros, scales, x, out, ws, counters, np.int32(K), np.int32(N)))
    return out


GEMV_VERSIONS = registry(*GEMV_VERSIONS.values(), Version(
    "w4a16_gemv_v5_split", "v5_split", launch_gemv_v5,
    "v1's arithmetic; split-K grid of whole waves, <= 64 registers, row batches' loads first"))


# --- W4A16 GEMV v6: v1 on a tiled copy of qweight ---------------------------------------------------

def pack_gemv_tiled(qweight):
    """GPTQ qweight [K/8, N] int32 -> [ceil(N/32), K/8, 32] int32: each 32-column tile's rows back to back
    (the last tile zero-padded), the layout w4a16_gemv_v6_tiled streams. An offline repack, like pack_mma."""
    xp = _xp(qweight)
    if qweight.ndim != 2 or qweight.dtype != np.int32:
        raise ValueError(f"qweight: expected a 2-D int32 array [K/8, N], got {qweight.dtype} shape "
                         f"{tuple(qweight.shape)}")
    rows, N = (int(d) for d in qweight.shape)
    tiles = ceil_div(N, GEMV_COLS)
    padded = xp.zeros((rows, tiles * GEMV_COLS), dtype=np.int32)
    padded[:, :N] = qweight
    return xp.ascontiguousarray(padded.reshape(rows, tiles, GEMV_COLS).transpose(1, 0, 2))


def launch_gemv_v6(x, qtiled, qzeros, scales, out):
    """out (1, N) = x (1, K) @ dequant(qweight, qzeros, scales), bf16, with qweight tiled by pack_gemv_tiled
    (w4a16_gemv_v6_tiled: v1's threads and arithmetic, one contiguous weight range per block)."""
    bf16 = _bf16()
    expect_array(x, "x", dtype=bf16, ndim=2)
    if int(x.shape[0]) != 1:
        raise ValueError(f"x: expected one row (batch 1, shape (1, K)), got shape {tuple(x.shape)}")
    K = int(x.shape[1])
    expect_array(scales, "scales", dtype=bf16, ndim=2)
    N = int(scales.shape[1])
    gemv_check_shapes(K, N)
    expect_array(qtiled, "qtiled (pack_gemv_tiled)", dtype=np.int32, shape=(ceil_div(N, GEMV_COLS), K // 8, GEMV_COLS))
    expect_array(qzeros, "qzeros", dtype=np.int32, shape=(K // GROUP, N // 8))
    expect_array(scales, "scales", dtype=bf16, shape=(K // GROUP, N))
    expect_array(out, "out", dtype=bf16, shape=(1, N))
    expect_same_device(x, qtiled, qzeros, scales, out)
    SOURCE.function("w4a16_gemv_v6_tiled")(gemv_grid(N), (THREADS, 1, 1),
                                           (qtiled, qzeros, scales, x, out, np.int32(K), np.int32(N)))
    return out


# --- PyTorch's own W4A16 kernel (tinygemm), as a peer -------------------------------------------------

TINYGEMM_INNER_K_TILES = 8                 # the fastest of 2, 4, 8 at K = N = 8192 on the H200 (probe_int4pack.py)


def pack_tinygemm(q, z, s, inner_k_tiles: int = TINYGEMM_INNER_K_TILES):
    """The operands of ``torch._weight_int4pack_mm(a, w, 128, sz)`` (PyTorch's tinygemm, sm80+) for the INT4
    problem q [K, N] codes, z [K/128, N] zero points, s [K/128, N] bf16 scales (CuPy arrays).

    tinygemm takes codes as uint8 [N, K/2] (even k in the high nibble), repacked by
    torch._convert_weight_to_int4pack, and per group a bf16 (scale, zero) pair with w = (q - 8) scale + zero;
    zero = (8 - z) s gives GPTQ's (q - z) s up to the bf16 rounding of that product."""
    import cupy
    import torch
    from .softmax import as_torch
    K, N = (int(d) for d in q.shape)
    if z.shape != (K // GROUP, N) or s.shape != (K // GROUP, N):
        raise ValueError(f"z, s: expected shape {(K // GROUP, N)} for q of shape {(K, N)}, "
                         f"got {tuple(z.shape)} and {tuple(s.shape)}")
    qn = torch.from_dlpack(cupy.ascontiguousarray(q.T)).to(torch.int32)           # [N, K]
    w = torch._convert_weight_to_int4pack(((qn[:, ::2] << 4) | qn[:, 1::2]).to(torch.uint8), inner_k_tiles)
    st = as_torch(cupy.ascontiguousarray(s))
    zero = ((8.0 - torch.from_dlpack(cupy.ascontiguousarray(z)).float()) * st.float()).to(torch.bfloat16)
    return w, torch.stack([st, zero], dim=2).contiguous()


# --- W4A16 tensor-core GEMM v3: Marlin's stage on a persistent, striped grid -------------------------

MARLIN_V3_DEFAULT = {1: (1, 4), 2: (1, 4), 3: (1, 4), 4: (1, 3)}  # m16 tiles -> (n16 tiles per warp, stages)


def marlin_v3_ctas_per_sm(mt: int, ntw: int, stages: int) -> int:
    """Resident CTAs per SM: the launch bounds' minimum (3 for MT <= 2, else 2) capped by shared memory."""
    return min(3 if mt <= 2 else 2, ctas_per_sm_by_smem(stages * marlin_stage_bytes(mt, ntw)))


def stripe_partition(tiles: int, groups: int, ctas: int) -> tuple[int, int]:
    """(P, max_contrib) of the striped partition: P = min(ctas, units) CTAs, CTA c owning units
    [c U / P, (c+1) U / P) of U = tiles x groups (tile-major); max_contrib = the most CTAs sharing a tile."""
    U = tiles * groups
    P = max(1, min(ctas, U))

    def owner(u):
        return ((u + 1) * P - 1) // U

    return P, max(owner(T * groups + groups - 1) - owner(T * groups) + 1 for T in range(tiles))


_STRIPE_PLANS: dict = {}


def marlin_v3_plan(M: int, K: int, N: int, ntw: int | None = None, stages: int | None = None,
                   ctas: int | None = None, sms: int = H200_SMS):
    """(kernel name, grid, dynamic smem bytes, max_contrib) of w4a16_marlin_v3_stripe. ``ctas=None``: one
    persistent wave, SMs x resident CTAs per SM."""
    key = (M, K, N, ntw, stages, ctas, sms)
    if key in _STRIPE_PLANS:
        return _STRIPE_PLANS[key]
    mma_check_shapes(M, K, N)
    if M > MARLIN_MAX_M:
        raise ValueError(f"M = {M}: w4a16_marlin_v3_stripe keeps all rows of A in one CTA and takes M <= "
                         f"{MARLIN_MAX_M}; larger batches are compute-bound, use a dense GEMM on dequantized weights")
    mt = ceil_div(M, 16)
    d_ntw, d_stages = MARLIN_V3_DEFAULT[mt]
    ntw, stages = ntw or d_ntw, stages or d_stages
    if (mt, ntw, stages) not in MARLIN_V3_CONFIGS:
        avail = [c[1:] for c in MARLIN_V3_CONFIGS if c[0] == mt]
        raise ValueError(f"w4a16_marlin_v3_stripe: (n16 tiles per warp, stages) = {(ntw, stages)} is not "
                         f"instantiated for {mt} m16 tiles (M = {M}); choose one of {avail}")
    if ctas is None:
        ctas = sms * marlin_v3_ctas_per_sm(mt, ntw, stages)
    if ctas < 1:
        raise ValueError(f"ctas = {ctas}: expected at least 1")
    smem = stages * marlin_stage_bytes(mt, ntw)
    P, max_contrib = stripe_partition(ceil_div(N, 128 * ntw), K // GROUP, ctas)
    plan = (marlin_v3_name(mt, ntw, stages), (P, 1, 1), smem, max_contrib)
    _STRIPE_PLANS[key] = plan
    return plan


def launch_marlin_v3(a, qmma, qzeros, scales, out, *, ntw=None, stages=None, ctas=None):
    """out (M, N) bf16 = a (M, K) bf16 @ dequant(qmma, qzeros, scales), M <= 64, on a persistent striped
    grid (w4a16_marlin_v3_stripe)."""
    M, K, N = _mma_validate(a, qmma, qzeros, scales, out)
    name, grid, smem, max_contrib = marlin_v3_plan(M, K, N, ntw, stages, ctas, sms=_sms())
    bn = 128 * (ntw or MARLIN_V3_DEFAULT[ceil_div(M, 16)][0])
    tiles = ceil_div(N, bn)
    ws = _scratch("ws", tiles * max_contrib * M * bn, np.float32)
    counters = _scratch("counters", tiles, np.uint32)
    _set_smem(SOURCE.function(name), smem)(grid, (THREADS, 1, 1),
                                           (qmma, qzeros, scales, a, out, ws, counters, np.int32(M), np.int32(K),
                                            np.int32(N), np.int32(max_contrib)), shared_mem=smem)
    return out


# The GEMM versions, all called as launch(a, qmma, qzeros, scales, out).
GEMM_VERSIONS = registry(
    Version("w4a16_mma", "mma_marlin_style", launch_mma,
            "shuffled B fragments dequantized in registers; 8 warps split K; weights prefetched one chunk ahead"),
    Version("w4a16_marlin", "v2_marlin", launch_marlin,
            "one group per stage through a cp.async pipeline; A by ldmatrix from swizzled smem; split-K over CTAs"),
    Version("w4a16_marlin_v3_stripe", "v3_stripe", launch_marlin_v3,
            "v2's stage on a persistent grid of one wave; (tile, group) units striped evenly over the CTAs"),
    Version(MARLIN_V4, "v4_post", launch_marlin_v4,
            "v2 with GEMV v4's arithmetic: mma on 128 + q, zero point and scale per group after the mma"),
)
BEST_GEMM = "v2_marlin"


# --- reading the SASS (utils.build.sass on a GPU host) ------------------------------------------------

def _sass_ops(listing: str) -> list[str]:
    """The opcodes of a cuobjdump/nvdisasm listing, in order (predicates and operands dropped)."""
    import re
    ops = []
    for line in listing.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops.append(m.group(1))
    return ops


def sass_weight_loads_before_math(listing: str) -> int:
    """16-byte evict-first loads (``LDG.E.EF.128``: the GEMV's ``__ldcs`` of qweight) issued before the
    first bf16x2 instruction (``*.BF16_V2``): how many weight loads a thread really has in flight when it
    starts to compute."""
    n = 0
    for op in _sass_ops(listing):
        if "BF16_V2" in op:                  # (a bare HFMA2.MMA with RZ operands is a register move)
            break
        n += op.startswith("LDG.E.EF.128")
    return n


def sass_stage_instructions(listing: str) -> int:
    """Instructions from the first ``BAR.SYNC`` to the last ``HMMA``: the body of w4a16_marlin's main loop,
    i.e. what each warp issues per stage (one group of 128 k)."""
    ops = _sass_ops(listing)
    bars = [i for i, op in enumerate(ops) if op.startswith("BAR.SYNC")]
    mmas = [i for i, op in enumerate(ops) if op.startswith("HMMA")]
    if not bars or not mmas:
        raise ValueError("expected a listing with a BAR.SYNC and HMMA instructions (w4a16_marlin)")
    return mmas[-1] - bars[0] + 1


def kernel_report() -> dict[str, dict]:
    """ptxas report (registers, smem, spills) keyed by readable names: plain kernels by their name, template
    instances by their name expression (``w4a16_marlin<1, 1, 4>``) instead of the mangled symbol."""
    from utils.build import compile_source
    comp = compile_source(SOURCE)
    report = dict(comp.report)
    for expr, mangled in comp.symbols.items():
        if mangled in report:
            report[expr] = report.pop(mangled)
    return report
