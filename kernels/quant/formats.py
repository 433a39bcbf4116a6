"""Chapter 9's formats, references, packers and cost models, and the INT8 / FP8 kernels (no ladder).

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
- mma: ``qmma [N/16, K/64, 32, 4]``, the codes shuffled into mma.m16n8k16 B-fragment order (:func:`pack_mma`).
- tiled: ``qtiled [ceil(N/32), K/8, 32]``, GPTQ's rows of each 32-column tile back to back (:func:`pack_gemv_tiled`).

Every host function here takes NumPy or CuPy arrays (the array module follows the input).
"""
from __future__ import annotations

import numpy as np

from utils.arrays import as_torch, bf16, ceil_div
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device

try:                                  # ml_dtypes ships with the book's requirements; no GPU needed
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
    FP8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:                   # pragma: no cover
    ml_dtypes = None
    BF16 = FP8_E4M3 = None

INT8_FP8_SOURCE = KernelSource("quant/int8_fp8.cu")

GROUP = 128
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)      # AutoAWQ: nibble i of a word holds column 8c + AWQ_ORDER[i]
SEQ_ORDER = tuple(range(8))
FP8_MAX = 448.0                            # largest finite e4m3 value
INT8_MAX = 127
THREADS = 256
CONVERT_REPS = 64                          # conversion rounds per thread in the throughput benchmark




# --- INT8 per-channel ------------------------------------------------------------------------------

def int8_reference(w):
    """(q int8 [N, K], scale float32 [N]) for W [N, K] (bf16 or float32), as the kernel computes them.

    amax, 127 / amax and amax / 127 are computed in float32 with IEEE division, the products
    ``w * inv`` in float32, rounding half to even: the kernel must match bit for bit.
    """
    xp = array_module(w)
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
    xp = array_module(q)
    return q.astype(xp.float32) * scale.astype(xp.float32)[:, None]


# --- FP8 e4m3 per tensor ---------------------------------------------------------------------------

def fp8_reference(x):
    """(q uint8 bit patterns, scale float32) for any-shaped x, as the kernels compute them (NumPy/CuPy)."""
    xp = array_module(x)
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
    xp = array_module(q)
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
    xp = array_module(w)
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
    xp = array_module(q)
    K, N = q.shape
    qg = q.astype(xp.float32).reshape(K // group, group, N)
    w = (qg - zeros.astype(xp.float32)[:, None, :]) * scales.astype(xp.float32)[:, None, :]
    return w.reshape(K, N)


def pack_nibbles(a, axis: int, order=SEQ_ORDER):
    """Pack a uint8 array of values in [0, 15] along ``axis`` (length divisible by 8) into int32.

    Word c holds elements 8c .. 8c+7 of the axis; nibble i (bits 4i..4i+3) holds element 8c + order[i].
    """
    xp = array_module(a)
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
    xp = array_module(words)
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


def random_int4_problem(K: int, N: int, xp=None, group: int = GROUP, seed: int = 0):
    """Random INT4 codes q uint8 [K, N] in [0, 15], zero points z uint8 [K/group, N] in [0, 15] and bf16
    group scales s [K/group, N] uniform in [0.005, 0.02]: the inputs the W4A16 tests and benchmarks use.

    ``xp`` is the array module (CuPy by default, or NumPy); ``seed`` seeds its ``RandomState``, so a
    failing case can be made again."""
    if xp is None:
        import cupy as xp
    if K % group:
        raise ValueError(f"K = {K} is not a multiple of the group size {group}")
    rand = xp.random.RandomState(seed)
    q = rand.randint(0, 16, (K, N), dtype=np.int32)
    z = rand.randint(0, 16, (K // group, N), dtype=np.int32)
    s = rand.uniform(0.005, 0.02, (K // group, N))
    return q.astype(xp.uint8), z.astype(xp.uint8), s.astype(xp.float32).astype(bf16())


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


def gemm_nbytes(M: int, K: int, N: int, group: int = GROUP) -> int:
    """W4A16 GEMM: packed weights + scales + packed zeros + bf16 A and C."""
    return K * N // 2 + (K // group) * N * 2 + (K // group) * N // 2 + M * K * 2 + M * N * 2


def gemm_bf16_nbytes(M: int, K: int, N: int) -> int:
    return K * N * 2 + M * K * 2 + M * N * 2


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


# --- INT4 weight layouts the kernels read ----------------------------------------------------------

GEMV_COLS = 32                             # columns per block of the W4A16 GEMV (and per tile of qtiled)


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
    xp = array_module(q)
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


def pack_gemv_tiled(qweight):
    """GPTQ qweight [K/8, N] int32 -> [ceil(N/32), K/8, 32] int32: each 32-column tile's rows back to back
    (the last tile zero-padded), the layout w4a16_gemv_v6_tiled streams. An offline repack, like pack_mma."""
    xp = array_module(qweight)
    if qweight.ndim != 2 or qweight.dtype != np.int32:
        raise ValueError(f"qweight: expected a 2-D int32 array [K/8, N], got {qweight.dtype} shape "
                         f"{tuple(qweight.shape)}")
    rows, N = (int(d) for d in qweight.shape)
    tiles = ceil_div(N, GEMV_COLS)
    padded = xp.zeros((rows, tiles * GEMV_COLS), dtype=np.int32)
    padded[:, :N] = qweight
    return xp.ascontiguousarray(padded.reshape(rows, tiles, GEMV_COLS).transpose(1, 0, 2))


def gemv_reference(x, qweight, qzeros, scales):
    """out (1, N) float32 = x @ dequantized W, from the packed GPTQ tensors (NumPy or CuPy)."""
    xp = array_module(qweight)
    q = unpack_nibbles(qweight, 0, SEQ_ORDER)
    z = unpack_nibbles(qzeros, 1, SEQ_ORDER)
    w = dequantize_int4(q, scales.astype(xp.float32), z)
    return x.astype(xp.float32) @ w


# --- INT8 and FP8 kernels (one kernel each, no ladder) ---------------------------------------------


def launch_int8_quant(w, q, scale):
    """W [N, K] bf16 -> q [N, K] int8, scale [N] float32: one block per row."""
    expect_array(w, "w", dtype=bf16(), ndim=2)
    N, K = (int(s) for s in w.shape)
    if N < 1 or K < 1:
        raise ValueError(f"w: expected a non-empty matrix, got shape {(N, K)}")
    if N > 2**31 - 1 or K > 2**31 - 1:
        raise ValueError(f"w: shape {(N, K)} exceeds the int32 kernel arguments")
    expect_array(q, "q", dtype=np.int8, shape=(N, K))
    expect_array(scale, "scale", dtype=np.float32, shape=(N,), align=4)
    expect_same_device(w, q, scale)
    INT8_FP8_SOURCE.function("int8_quant_rowwise")((N, 1, 1), (THREADS, 1, 1), (w, q, scale, np.int32(K)))
    return q, scale


def launch_int8_dequant(q, scale, w):
    expect_array(q, "q", dtype=np.int8, ndim=2)
    N, K = (int(s) for s in q.shape)
    if N < 1 or K < 1:
        raise ValueError(f"q: expected a non-empty matrix, got shape {(N, K)}")
    expect_array(scale, "scale", dtype=np.float32, shape=(N,), align=4)
    expect_array(w, "w", dtype=bf16(), shape=(N, K))
    expect_same_device(q, scale, w)
    INT8_FP8_SOURCE.function("int8_dequant_rowwise")((N, 1, 1), (THREADS, 1, 1), (q, scale, w, np.int32(K)))
    return w


def fp8_amax_grid(n: int, sms: int | None = None) -> int:
    """Blocks of fp8_amax: one per 8 x 256 elements, at most 8 per SM (grid-stride beyond)."""
    if sms is None:
        from utils.hardware import facts
        sms = facts().sms
    return max(1, min(sms * 8, ceil_div(ceil_div(n, 8), THREADS)))


def launch_fp8_quant(x, q, scale, amax_bits):
    """x (any shape, bf16) -> q (same shape, uint8 e4m3 bits), scale [1] float32; amax_bits [1] uint32 scratch."""
    expect_array(x, "x", dtype=bf16())
    n = int(np.prod(x.shape))
    if n < 1:
        raise ValueError("x: expected at least one element")
    expect_array(q, "q", dtype=np.uint8, shape=tuple(x.shape))
    expect_array(scale, "scale", dtype=np.float32, shape=(1,), align=4)
    expect_array(amax_bits, "amax_bits", dtype=np.uint32, shape=(1,), align=4)
    expect_same_device(x, q, scale, amax_bits)
    amax_bits.fill(0)
    INT8_FP8_SOURCE.function("fp8_amax")((fp8_amax_grid(n), 1, 1), (THREADS, 1, 1), (x, amax_bits, np.int64(n)))
    grid = ceil_div(ceil_div(n, 8), THREADS)
    INT8_FP8_SOURCE.function("fp8_quant")((grid, 1, 1), (THREADS, 1, 1), (x, amax_bits, q, scale, np.int64(n)))
    return q, scale


def launch_fp8_dequant(q, scale, x):
    expect_array(q, "q", dtype=np.uint8)
    n = int(np.prod(q.shape))
    if n < 1:
        raise ValueError("q: expected at least one element")
    expect_array(scale, "scale", dtype=np.float32, shape=(1,), align=4)
    expect_array(x, "x", dtype=bf16(), shape=tuple(q.shape))
    expect_same_device(q, scale, x)
    grid = ceil_div(ceil_div(n, 8), THREADS)
    INT8_FP8_SOURCE.function("fp8_dequant")((grid, 1, 1), (THREADS, 1, 1), (q, scale, x, np.int64(n)))
    return x


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
    K, N = (int(d) for d in q.shape)
    if z.shape != (K // GROUP, N) or s.shape != (K // GROUP, N):
        raise ValueError(f"z, s: expected shape {(K // GROUP, N)} for q of shape {(K, N)}, "
                         f"got {tuple(z.shape)} and {tuple(s.shape)}")
    qn = torch.from_dlpack(cupy.ascontiguousarray(q.T)).to(torch.int32)           # [N, K]
    w = torch._convert_weight_to_int4pack(((qn[:, ::2] << 4) | qn[:, 1::2]).to(torch.uint8), inner_k_tiles)
    st = as_torch(cupy.ascontiguousarray(s))
    zero = ((8.0 - torch.from_dlpack(cupy.ascontiguousarray(z)).float()) * st.float()).to(torch.bfloat16)
    return w, torch.stack([st, zero], dim=2).contiguous()
