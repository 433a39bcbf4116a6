"""Chapter 14: why attention is memory-bound, and the IO-aware idea.

Three things live here, each beside its byte model:

- **standard attention**, unfused, as three kernels: ``S = scale Q K^T`` by cuBLAS's strided-batched GEMM
  (``scale`` as its alpha, as FlashAttention's own benchmark does with ``torch.baddbmm``), chapter 6's softmax
  over the rows of ``S`` into ``P``, and ``O = P V`` by cuBLAS again; ``S`` and ``P`` live in HBM, ``B Hq Sq Sk``
  bf16 values each. :func:`standard_attention` takes the arguments of ``kernels.attention`` (bf16
  ``q [B, Hq, Sq, D]``, ``k, v [B, Hkv, Sk, D]``, ``out [B, Hq, Sq, D]``; GQA; causal masking bottom-right
  aligned, rows that see no key give 0) and needs no lse. CuPy's own ``matmul`` is not used: for arrays of more
  than two dimensions it runs bf16 through a generic integer-style kernel, not cuBLAS (``cupy/_core/
  _routines_linalg.pyx``, ``matmul``: only ``'fFdD'`` reach ``gemmStridedBatchedEx``);
- the **byte and footprint models**: what each kernel of the unfused path reads and writes, what PyTorch's math
  SDPA path (fp32 upcast) holds, the fused kernel's compulsory bytes, the longest sequence whose ``S`` and ``P``
  fit in a given number of free bytes, and the IO model of the tiled algorithm: a block of ``BR`` query rows
  reads all of ``K`` and ``V`` once, so K/V are read ``ceil(Sq / BR)`` times per head (Dao et al. 2022,
  Theorem 2: ``Theta(N^2 d^2 / M)`` HBM accesses with ``BR = Theta(M / d)``);
- **Nsight Compute** on ``attn_fwd`` v0 at several ``Rows(br)``: ncu runs in a child process (``python -m
  kernels.attention.io_aware ...`` is that process) through :func:`kernels.sgemm.traffic.run_ncu`, warm launches,
  clocks left alone; where ncu is missing the caller gets None after one printed line.

Shapes are the ladder's ``(B, Hq, Hkv, Sq, Sk, D, causal)`` (kernels/attention/ladders.py). Importing this module
needs no GPU.
"""
from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.arrays import xp as array_module
from utils.ops import expect_array, expect_same_device
from utils.table import Table

from . import (ATTN_FWD, FILL_SOURCE, V0_BC, V0_ROWS, Rows, check_causal, flops, qkv_sizes, resolve_scale,
                visible_keys)

OP = "attn_fwd"
STANDARD = "standard_unfused"            # the record's impl name of the three-kernel path
FUSED = "v4_tuned"                       # chapter 15's fastest forward
MATH = "torch.sdpa.math"                 # PyTorch's math SDPA backend (the peer)
ITEM = 2                                 # bytes of a bf16 value
FP32 = 4
SOFTMAX_ELEMENTS = 2**31 - 1             # kernels.softmax takes rows x cols < 2^31 a launch
SOFTMAX_BLOCK_COLS = 32768               # longest bf16 row a block holds (kernels.softmax.DISPATCH); longer rows
SOFTMAX_GRID_Y = 65535                   # go to a cluster per row, at most 65535 rows a launch
FILL_THREADS = 256
FILL_BLOCKS = 1 << 16                    # grid-stride over rows beyond this

# cuBLAS / CUDA enums (cublas_api.h, library_types.h): stable ABI values, used where cupy_backends lacks a name
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1

# the chapter's shapes
MEM_HEADS, MEM_D = 32, 128               # one layer of a 4096-wide model (Llama-2-7B: 32 heads of 128), batch 1
MEM_SEQLENS = (2048, 4096, 8192, 16384)
NCU_SHAPE = (4, 16, 16, 4096, 4096, 64, 0)    # q, k, v 32 MiB each: together more than the L2; K/V of a head 1 MiB
NCU_ROWS = tuple(r.br for r in V0_ROWS[64])   # 16, 32, 64, 128
SPEEDUP_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, WIDTH = 16384, 2048               # FlashAttention's benchmark: batch x seqlen = 16k, heads x d = 2048
FUSED_FRACTION = 0.45                     # the prediction: a fused forward at ~0.45 of cuBLAS bf16 (TARGETS.md:
                                          # SDPA flash 290-350 TFLOP/s beside cuBLAS 700-760 on the H200)


def speedup_shapes(D: int, causal: bool, seqlens=SPEEDUP_SEQLENS) -> list[tuple]:
    """FlashAttention's benchmark configurations (benchmarks/benchmark_flash_attention.py): 16k tokens a batch,
    model width 2048, ``Sq = Sk``."""
    if D <= 0 or WIDTH % D or any(s <= 0 or TOKENS % s for s in seqlens):
        raise ValueError(f"speedup_shapes: D must divide {WIDTH} and every length {TOKENS}, got D={D}, {seqlens}")
    return [(TOKENS // s, WIDTH // D, WIDTH // D, s, s, D, int(causal)) for s in seqlens]


def memory_shape(N: int, B: int = 1, H: int = MEM_HEADS, D: int = MEM_D) -> tuple:
    return (B, H, H, N, N, D, 0)


def unpack(shape):
    B, Hq, Hkv, Sq, Sk, D, causal = (int(s) for s in shape)
    return B, Hq, Hkv, Sq, Sk, D, bool(causal)


# --- the problem -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StandardProblem:
    shape: tuple             # (B, Hq, Hkv, Sq, Sk, D, causal), as the ladder writes a shape
    scale: float

    B = property(lambda self: self.shape[0])
    Hq = property(lambda self: self.shape[1])
    Hkv = property(lambda self: self.shape[2])
    Sq = property(lambda self: self.shape[3])
    Sk = property(lambda self: self.shape[4])
    D = property(lambda self: self.shape[5])
    causal = property(lambda self: bool(self.shape[6]))

    @property
    def group(self) -> int:
        return self.Hq // self.Hkv

    @property
    def rows(self) -> int:
        """Rows of S and P: one per (batch, query head, query)."""
        return self.B * self.Hq * self.Sq


def check_sizes(B: int, Hq: int, Hkv: int, Sq: int, Sk: int, D: int) -> None:
    """The sizes the unfused path takes (pure): any head dimension (cuBLAS does not care), GQA by an integer
    ratio, and the int32 sizes of cuBLAS."""
    if min(B, Hq, Hkv, Sq, Sk, D) < 1:
        raise ValueError(f"standard attention: every size must be >= 1, got B={B}, Hq={Hq}, Hkv={Hkv}, Sq={Sq}, "
                         f"Sk={Sk}, D={D}")
    if Hq % Hkv:
        raise ValueError(f"standard attention: query heads Hq = {Hq} must be a multiple of key/value heads "
                         f"Hkv = {Hkv} (GQA)")
    if (Hq // Hkv) * Sq >= 2**31 or Sk >= 2**31 or B * Hkv >= 2**31:
        raise ValueError(f"standard attention: cuBLAS takes int32 sizes: (Hq / Hkv) Sq = {(Hq // Hkv) * Sq}, "
                         f"Sk = {Sk}, B Hkv = {B * Hkv}")


def standard_problem(q, k, v, out, *, causal=False, scale=None) -> StandardProblem:
    """Validate the arguments as kernels.attention.problem does (no lse): bf16, C-contiguous, one device."""
    B, Hq, Hkv, Sq, Sk, D = qkv_sizes(q, k, v, out)
    check_causal(causal)
    check_sizes(B, Hq, Hkv, Sq, Sk, D)
    expect_same_device(q, k, v, out)
    return StandardProblem((B, Hq, Hkv, Sq, Sk, D, int(causal)), resolve_scale(scale, D))


def softmax_chunks(rows: int, cols: int) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) for chapter 6's softmax, one launch each: under 2^31 elements a launch, at most 65535
    rows where a row needs a cluster (longer than a block holds), and every range starting at a multiple of 8 rows
    so that its first element is 16-byte aligned whatever ``cols`` is."""
    if rows < 1 or cols < 1:
        raise ValueError(f"softmax_chunks: expected rows, cols >= 1, got {rows}, {cols}")
    step = SOFTMAX_ELEMENTS // cols
    if cols > SOFTMAX_BLOCK_COLS:
        step = min(step, SOFTMAX_GRID_Y)
    step = max(8, step - step % 8) if step >= 8 else step
    if step < 1:
        raise ValueError(f"softmax_chunks: a row of {cols} columns is longer than one softmax launch takes")
    return [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]


def softmax_version(rows: int, cols: int) -> str:
    """The chapter-6 version kernels.softmax.dispatch picks for the launches of :func:`softmax_chunks` (bf16)."""
    from kernels import softmax as SM
    r0, r1 = softmax_chunks(rows, cols)[0]
    return SM.dispatch(r1 - r0, cols, "bfloat16")


# --- standard attention: three kernels --------------------------------------------------------------------

def gemm_bf16(transa: int, transb: int, m: int, n: int, k: int, alpha: float, a, lda: int, stride_a: int, b,
              ldb: int, stride_b: int, c, ldc: int, stride_c: int, batch: int) -> None:
    """C = alpha op(A) op(B) per batch, column-major, bf16 in and out, fp32 accumulation: cublasGemmStridedBatchedEx
    on CuPy's handle and current stream, alpha and beta from host memory."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    one_alpha = np.array(alpha, dtype=np.float32)
    zero = np.array(0.0, dtype=np.float32)
    cublas.gemmStridedBatchedEx(
        cupy.cuda.device.get_cublas_handle(), transa, transb, m, n, k, one_alpha.ctypes.data,
        a.data.ptr, CUDA_R_16BF, lda, stride_a, b.data.ptr, CUDA_R_16BF, ldb, stride_b, zero.ctypes.data,
        c.data.ptr, CUDA_R_16BF, ldc, stride_c, batch, getattr(cublas, "CUBLAS_COMPUTE_32F", CUBLAS_COMPUTE_32F),
        getattr(cublas, "CUBLAS_GEMM_DEFAULT", CUBLAS_GEMM_DEFAULT))


def scores(p: StandardProblem, q, k, s) -> None:
    """S = scale Q K^T into ``s [B, Hq, Sq, Sk]``. Row-major S_b [G Sq, Sk] is column-major S_b^T = K_b Q_b^T: one
    GEMM per (batch, key/value head) with the G query heads that share it stacked as G Sq rows."""
    M = p.group * p.Sq
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, p.Sk, M, p.D, p.scale, k, p.D, p.Sk * p.D, q, p.D, M * p.D,
              s, p.Sk, M * p.Sk, p.B * p.Hkv)


def weighted_values(p: StandardProblem, probs, v, out) -> None:
    """O = P V into ``out``. Row-major O_b [G Sq, D] is column-major O_b^T = V_b^T P_b^T."""
    M = p.group * p.Sq
    gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, p.D, M, p.Sk, 1.0, v, p.D, p.Sk * p.D, probs, p.Sk, M * p.Sk,
              out, p.D, M * p.D, p.B * p.Hkv)


def causal_fill(p: StandardProblem, x, fill: float, empty_rows_only: bool) -> None:
    """``fill`` into the entries of ``x [rows, Sk]`` a row does not see (io_aware.cu); with ``empty_rows_only``,
    into the whole of every row that sees no key and nowhere else."""
    fn = FILL_SOURCE.function("attn_causal_fill_bf16")
    fn((min(p.rows, FILL_BLOCKS),), (FILL_THREADS,),
       (x, np.int64(p.rows), np.int32(p.Sq), np.int32(p.Sk), np.int32(empty_rows_only), np.float32(fill)))


def standard_attention(q, k, v, out=None, *, causal=False, scale=None, trace: list | None = None):
    """Unfused attention: S = scale Q K^T (cuBLAS), [the causal mask into S], P = softmax(S) (chapter 6, one
    launch per :func:`softmax_chunks` range), [0 into rows that see no key], O = P V (cuBLAS). Returns ``out``
    (allocated when None). S is freed before O is computed; ``trace`` (a list) gets the name of each large
    allocation just before it is made ("S", "P"), so a caller that catches an out-of-memory error can say which
    one failed."""
    import cupy

    from kernels import softmax as SM
    if out is None:
        expect_array(q, "q", dtype=bf16(), ndim=4)
        out = cupy.empty(q.shape, dtype=bf16())
    p = standard_problem(q, k, v, out, causal=causal, scale=scale)
    if trace is not None:
        trace.append("S")
    s = cupy.empty((p.rows, p.Sk), dtype=bf16())                 # [B Hq Sq, Sk] in HBM
    scores(p, q, k, s)
    if p.causal:
        causal_fill(p, s, -math.inf, False)
    if trace is not None:
        trace.append("P")
    probs = cupy.empty((p.rows, p.Sk), dtype=bf16())             # [B Hq Sq, Sk] in HBM
    for r0, r1 in softmax_chunks(p.rows, p.Sk):
        SM.softmax(s[r0:r1], out=probs[r0:r1])
    del s
    if p.causal and p.Sq > p.Sk:
        causal_fill(p, probs, 0.0, True)                         # softmax of a row of -inf is NaN
    weighted_values(p, probs, v, out)
    return out


# --- inputs and checks -------------------------------------------------------------------------------------

def make_inputs(shape, seed: int):
    """Standard-normal bf16 q, k, v of a shape on the GPU (drawn in float32, rounded)."""
    import cupy
    B, Hq, Hkv, Sq, Sk, D, _ = unpack(shape)
    rs = cupy.random.RandomState(int(seed))
    q = rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16())
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    return q, k, v


def sample_rows(Sq: int, n: int = 64) -> np.ndarray:
    """Up to ``n`` query rows spread over [0, Sq), the first and last included."""
    return np.unique(np.linspace(0, Sq - 1, num=min(n, Sq)).round().astype(np.int64))


def sample_reference(q, k, v, batches, heads, rows, *, causal=False, scale=None):
    """The float64 reference (kernels.attention.reference) of the query rows ``rows`` of the query heads ``heads``
    of the batch entries ``batches`` only: [len(batches), len(heads), len(rows), D]. A row's output depends on its
    own query and on K and V, so the sample needs no other row; the causal mask keeps the rows' own indices."""
    xp = array_module(q)
    Hq, Sq, D = int(q.shape[1]), int(q.shape[2]), int(q.shape[3])
    Hkv, Sk = int(k.shape[1]), int(k.shape[2])
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    rows = np.asarray(rows, dtype=np.int64)
    seen = xp.asarray(visible_keys(Sq, Sk, causal)[rows])
    mask = xp.arange(Sk)[None, :] < seen[:, None]                     # [rows, Sk]
    idx = xp.asarray(rows)
    out = xp.zeros((len(batches), len(heads), len(rows), D))
    for bi, b in enumerate(batches):
        for hi, h in enumerate(heads):
            g = h // (Hq // Hkv)
            qf = q[b, h].astype(xp.float64)[idx]                        # [rows, D]
            kf, vf = k[b, g].astype(xp.float64), v[b, g].astype(xp.float64)
            s = xp.where(mask, scale * qf @ kf.T, -xp.inf)
            m = s.max(axis=-1, keepdims=True)
            m_safe = xp.where(xp.isfinite(m), m, 0.0)
            e = xp.exp(s - m_safe)
            l_ = e.sum(axis=-1, keepdims=True)
            out[bi, hi] = xp.where(l_ > 0, (e @ vf) / xp.where(l_ > 0, l_, 1.0), 0.0)
    return out


def sample_of(out, batches, heads, rows):
    """The same sample of an output [B, Hq, Sq, D], as float64."""
    xp = array_module(out)
    idx = xp.asarray(np.asarray(rows, dtype=np.int64))
    return xp.stack([xp.stack([out[b, h].astype(xp.float64)[idx] for h in heads]) for b in batches])


def sample_where(shape, n_rows: int = 64):
    """(batches, heads, rows) of the check sample: the first and last batch entry and query head, ``n_rows`` rows."""
    B, Hq, _, Sq, _, _, _ = unpack(shape)
    return sorted({0, B - 1}), sorted({0, Hq - 1}), sample_rows(Sq, n_rows)


def check_sample(out, q, k, v, *, causal=False, scale=None, name="out", n_rows: int = 64) -> float:
    """assert_close (bf16 tolerance) of a sample of ``out`` against :func:`sample_reference`; the relative error."""
    from utils.check import assert_close
    shape = (*q.shape[:2], k.shape[1], q.shape[2], k.shape[2], q.shape[3], int(causal))
    where = sample_where(shape, n_rows)
    ref = sample_reference(q, k, v, *where, causal=causal, scale=scale)
    return assert_close(sample_of(out, *where), ref, dtype="bfloat16", name=name)


# --- byte and footprint models (pure) ------------------------------------------------------------------------

def masked_entries(Sq: int, Sk: int, causal: bool) -> int:
    """Entries of S a causal mask hides (0 without one)."""
    return int(Sq * Sk - visible_keys(Sq, Sk, causal).sum()) if causal else 0


def standard_kernels(shape) -> dict[str, dict]:
    """What each kernel of :func:`standard_attention` moves through HBM at the least (each operand read once, each
    result written once) and computes: {kernel: {"bytes", "flops"}}. The GEMMs read Q, K (V) once a key/value head
    group, as a strided-batched GEMM whose operands fit its tiles; the softmax reads S and writes P."""
    B, Hq, Hkv, Sq, Sk, D, causal = unpack(shape)
    qo, kv, ss = B * Hq * Sq * D, B * Hkv * Sk * D, B * Hq * Sq * Sk
    out = {"S = scale Q K^T (cuBLAS)": {"bytes": ITEM * (qo + kv + ss), "flops": 2.0 * ss * D}}
    if causal:
        out["causal mask into S"] = {"bytes": ITEM * B * Hq * masked_entries(Sq, Sk, True), "flops": 0.0}
    out["P = softmax(S) (chapter 6)"] = {"bytes": 2 * ITEM * ss, "flops": 5.0 * ss}
    out["O = P V (cuBLAS)"] = {"bytes": ITEM * (ss + kv + qo), "flops": 2.0 * ss * D}
    return out


def standard_bytes(shape) -> int:
    """HBM bytes of the unfused path: about 8 bytes per entry of S (written, read, written as P, read)."""
    return int(sum(k["bytes"] for k in standard_kernels(shape).values()))


def fused_bytes(shape) -> int:
    """The compulsory bytes of a fused forward (the forward ladder's minimum bytes): Q, K, V read once, O written
    once, lse (fp32) written once."""
    from .ladders import nbytes
    return int(nbytes(tuple(int(s) for s in shape)))


def math_kernels(shape) -> dict[str, dict]:
    """PyTorch's math SDPA path on bf16 inputs with fp16/bf16 reduction not allowed (the default): q, k, v upcast
    to fp32, q and k each scaled by sqrt(scale), S = Q K^T in fp32, [the mask added], P = softmax(S) in fp32,
    O = P V in fp32, O and P cast back to bf16 (``_scaled_dot_product_attention_math`` returns both)."""
    B, Hq, Hkv, Sq, Sk, D, causal = unpack(shape)
    qo, kv, ss = B * Hq * Sq * D, B * Hkv * Sk * D, B * Hq * Sq * Sk
    out = {
        "upcast q, k, v to fp32": {"bytes": (ITEM + FP32) * (qo + 2 * kv), "flops": 0.0},
        "scale q and k": {"bytes": 2 * FP32 * (qo + kv), "flops": 0.0},
        "S = Q K^T (fp32 GEMM)": {"bytes": FP32 * (qo + kv + ss), "flops": 2.0 * ss * D},
    }
    if causal:
        out["add the mask"] = {"bytes": 2 * FP32 * ss + ITEM * Sq * Sk, "flops": 0.0}
    out["P = softmax(S) (fp32)"] = {"bytes": 2 * FP32 * ss, "flops": 5.0 * ss}
    out["O = P V (fp32 GEMM)"] = {"bytes": FP32 * (ss + kv + qo), "flops": 2.0 * ss * D}
    out["O, P back to bf16"] = {"bytes": (FP32 + ITEM) * (qo + ss), "flops": 0.0}
    return out


def math_bytes(shape) -> int:
    return int(sum(k["bytes"] for k in math_kernels(shape).values()))


def io_bytes(shape) -> int:
    """q, k, v and out in HBM (bf16)."""
    B, Hq, Hkv, Sq, Sk, D, _ = unpack(shape)
    return ITEM * (2 * B * Hq * Sq * D + 2 * B * Hkv * Sk * D)


def standard_peak(shape) -> int:
    """Bytes :func:`standard_attention` allocates beyond its arguments, at its peak: S and P together, during
    the softmax."""
    B, Hq, _, Sq, Sk, _, _ = unpack(shape)
    return 2 * ITEM * B * Hq * Sq * Sk


def math_peak(shape) -> int:
    """Bytes the math SDPA path allocates beyond its arguments at its peak, in the model of :func:`math_kernels`:
    during the softmax the fp32 q, k, v, the scaled q and k, S and P (fp32) are alive."""
    B, Hq, Hkv, Sq, Sk, D, _ = unpack(shape)
    return FP32 * (3 * B * Hq * Sq * D + 3 * B * Hkv * Sk * D) + 2 * FP32 * B * Hq * Sq * Sk


def max_seqlen(free_bytes: int, B: int = 1, H: int = MEM_HEADS, D: int = MEM_D, per_entry: int = 2 * ITEM,
               per_row: int = 4 * ITEM) -> int:
    """The longest N (Sq = Sk = N, Hq = Hkv = H) whose q, k, v, out (``per_row`` D bytes a row) and S, P
    (``per_entry`` bytes an entry of S) fit in ``free_bytes``: the largest N with
    B H (per_entry N^2 + per_row D N) <= free_bytes."""
    if free_bytes < 0 or min(B, H, D, per_entry) < 1:
        raise ValueError(f"max_seqlen: expected free_bytes >= 0 and positive sizes, got {free_bytes}, {B}, {H}, {D}")
    a, b = B * H * per_entry, B * H * per_row * D
    n = int((-b + math.sqrt(b * b + 4.0 * a * free_bytes)) / (2 * a))
    while n > 0 and a * n * n + b * n > free_bytes:
        n -= 1
    while a * (n + 1) ** 2 + b * (n + 1) <= free_bytes:
        n += 1
    return n


# --- the ledger and the predictions (pure) --------------------------------------------------------------------

def floor_us(shape, ceil: dict) -> dict:
    """The floors of one shape under chapter 2's ceilings (``ceil``: copy GB/s, cublas_bf16 TFLOP/s): the FLOPs at
    cuBLAS's rate, the unfused path's bytes and the fused kernel's bytes at the copy rate, in µs."""
    B, Hq, _, Sq, Sk, D, causal = unpack(shape)
    f = flops(B, Hq, Sq, Sk, D, causal)
    return {"flops": f / (ceil["cublas_bf16"] * 1e12) * 1e6,
            "standard_bytes": standard_bytes(shape) / (ceil["copy"] * 1e9) * 1e6,
            "fused_bytes": fused_bytes(shape) / (ceil["copy"] * 1e9) * 1e6}


def intensity(shape, which: str = "standard") -> float:
    """FLOP per byte of HBM traffic: the unfused path (about D / 2), the fused kernel (about Sq / 2) or PyTorch's
    math path."""
    B, Hq, _, Sq, Sk, D, causal = unpack(shape)
    nbytes = {"standard": standard_bytes, "fused": fused_bytes, "math": math_bytes}[which](shape)
    return flops(B, Hq, Sq, Sk, D, causal) / nbytes


def predicted_standard_us(shape, ceil: dict) -> float:
    """The unfused path if each of its kernels ran at the slower of its two floors (bytes at the copy rate, FLOPs at
    cuBLAS's rate) and they ran one after the other, as they do."""
    return sum(max(k["bytes"] / (ceil["copy"] * 1e9), k["flops"] / (ceil["cublas_bf16"] * 1e12))
               for k in standard_kernels(shape).values()) * 1e6


def predicted_math_us(shape, ceil: dict) -> float:
    """PyTorch's math path the same way, its fp32 GEMMs at the FP32 FMA ceiling (``ceil['fma_fp32']``)."""
    return sum(max(k["bytes"] / (ceil["copy"] * 1e9), k["flops"] / (ceil["fma_fp32"] * 1e12))
               for k in math_kernels(shape).values()) * 1e6


def predicted_fused_us(shape, ceil: dict, fraction: float = FUSED_FRACTION) -> float:
    """The fused kernel at ``fraction`` of cuBLAS's rate on the attention FLOPs (its bytes are a rounding error)."""
    B, Hq, _, Sq, Sk, D, causal = unpack(shape)
    return flops(B, Hq, Sq, Sk, D, causal) / (fraction * ceil["cublas_bf16"] * 1e12) * 1e6


def ledger_table(shapes, ceil: dict) -> Table:
    """Per shape: GFLOP, the unfused and the fused bytes, both intensities, the floors and the predicted speedups."""
    rows = []
    for s in shapes:
        B, Hq, _, Sq, Sk, D, causal = unpack(s)
        fl = floor_us(s, ceil)
        std, fus = predicted_standard_us(s, ceil), predicted_fused_us(s, ceil)
        rows.append([f"{B}x{Hq}x{Sq}", str(D), "yes" if causal else "no",
                     f"{flops(B, Hq, Sq, Sk, D, causal) / 1e9:,.0f}", f"{standard_bytes(s) / 1e9:,.2f}",
                     f"{fused_bytes(s) / 1e9:,.3f}", f"{intensity(s):.0f}", f"{intensity(s, 'fused'):,.0f}",
                     f"{fl['flops']:,.0f}", f"{fl['standard_bytes']:,.0f}", f"{std:,.0f}", f"{std / fus:.1f}x",
                     f"{predicted_math_us(s, ceil) / fus:.1f}x"])
    return Table(["B x H x S", "d", "causal", "GFLOP", "unfused GB", "fused GB", "unfused FLOP/B", "fused FLOP/B",
                  "FLOP floor µs", "unfused byte floor µs", "unfused predicted µs", "predicted fused / unfused",
                  "predicted fused / math"], rows,
                 caption=f"attention forward ledger: copy {ceil['copy']:.0f} GB/s, cuBLAS bf16 "
                         f"{ceil['cublas_bf16']:.0f} TFLOP/s, fused kernel assumed at {FUSED_FRACTION:.2f} of cuBLAS",
                 align="lll" + "r" * 10)


def kernel_table(shape) -> Table:
    """The unfused path kernel by kernel: bytes, FLOPs, FLOP per byte."""
    rows = [[name, f"{k['bytes'] / 1e9:,.3f}", f"{k['flops'] / 1e9:,.1f}",
             f"{k['flops'] / k['bytes']:.1f}" if k["bytes"] else ""] for name, k in standard_kernels(shape).items()]
    rows.append(["total", f"{standard_bytes(shape) / 1e9:,.3f}",
                 f"{sum(k['flops'] for k in standard_kernels(shape).values()) / 1e9:,.1f}", f"{intensity(shape):.1f}"])
    B, Hq, _, Sq, _, D, _ = unpack(shape)
    return Table(["kernel", "GB", "GFLOP", "FLOP/B"], rows,
                 caption=f"the unfused path at B={B}, H={Hq}, S={Sq}, d={D}: HBM bytes at the least")


# --- the IO model of the tiled algorithm (pure) -----------------------------------------------------------------

def tiled_kv_reads(shape, br: int) -> int:
    """Bytes of K and V a tiled forward with ``br`` query rows a block reads (non-causal): every block reads all
    of its head's K and V once, and a head has ceil(Sq / br) blocks."""
    B, Hq, Hkv, Sq, Sk, D, causal = unpack(shape)
    if causal:
        raise ValueError("tiled_kv_reads: the model is written for non-causal attention")
    return B * Hq * ceil_div(Sq, br) * 2 * ITEM * Sk * D


def compulsory_reads(shape) -> int:
    """Q, K and V read once."""
    B, Hq, Hkv, Sq, Sk, D, _ = unpack(shape)
    return ITEM * (B * Hq * Sq * D + 2 * B * Hkv * Sk * D)


def v0_l1_sectors(shape, br: int) -> int:
    """32-byte sectors the loads of attn_fwd v0 ask of L1 (non-causal): K and V staged tile by tile, contiguous,
    by every block; Q read element by element, thread t its own row, so a warp's load touches 32 sectors (one per
    row) for 32 values: one sector per value of Q."""
    B, Hq, _, Sq, _, D, _ = unpack(shape)
    return tiled_kv_reads(shape, br) // 32 + B * Hq * Sq * D


def v0_onchip_bytes(D: int, br: int, bc: int = V0_BC) -> int:
    """What one v0 block keeps on chip: Q's padded rows in shared memory (bf16), a K and a V tile (bf16), and each
    thread's output row (fp32 registers). It grows with ``br``; the K/V re-reads fall as 1 / br."""
    return ITEM * br * (D + 2) + 2 * ITEM * bc * D + FP32 * br * D


def theorem2_accesses(N: int, d: int, M: int) -> float:
    """HBM accesses (elements, one head) of the tiled algorithm with on-chip memory of M elements, in the
    FlashAttention-2 loop order: Q read and O written once, K and V read once per row block of
    B_r = floor(M / 4d) rows (Q_i, O_i and one K_j, V_j block of as many rows fill M):
    2 N d + ceil(N / B_r) 2 N d = Theta(N^2 d^2 / M) for d <= M <= N d (Dao et al. 2022, Theorem 2)."""
    br = max(1, M // (4 * d))
    return 2.0 * N * d + ceil_div(N, br) * 2.0 * N * d


def standard_accesses(N: int, d: int) -> float:
    """HBM accesses (elements, one head) of the unfused path: Q, K, V read and O written once, S written and read,
    P written and read: 4 N d + 4 N^2, Theta(N d + N^2)."""
    return 4.0 * N * d + 4.0 * N * N


# --- measuring memory --------------------------------------------------------------------------------------------

def pool_peak(fn) -> tuple[object, int]:
    """(fn(), the most bytes CuPy's memory pool had handed out, and not yet taken back, during the call): a
    ``cupy.cuda.MemoryHook`` counts every allocation and free inside it; what existed before is not counted."""
    import cupy

    class Peak(cupy.cuda.MemoryHook):
        name = "io_aware_pool_peak"

        def __init__(self):
            self.live, self.now, self.peak = {}, 0, 0

        def malloc_postprocess(self, **kw):
            ptr, size = kw.get("mem_ptr", 0), kw.get("mem_size", 0)
            if ptr:
                self.live[ptr] = size
                self.now += size
                self.peak = max(self.peak, self.now)

        def free_postprocess(self, **kw):
            self.now -= self.live.pop(kw.get("mem_ptr", 0), 0)

    hook = Peak()
    with hook:
        result = fn()
    return result, hook.peak


def torch_peak(fn) -> tuple[object, int]:
    """(fn(), the peak bytes PyTorch's caching allocator had allocated during the call, above what it held
    before)."""
    import torch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - base


def release() -> None:
    """Give cached device memory back to the driver: CuPy's pool and, where PyTorch is loaded, its cache."""
    import cupy
    cupy.cuda.get_current_stream().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def free_bytes() -> int:
    """Device memory the driver reports free, after :func:`release`."""
    import cupy
    release()
    return int(cupy.cuda.runtime.memGetInfo()[0])


def math_peer(q, k, v, causal: bool = False):
    """PyTorch SDPA on the math backend only (kernels.attention.ladders.sdpa_peer("MATH")) on q, k, v: a callable
    that returns the output tensor."""
    from utils.ladder import Case

    from .ladders import sdpa_peer
    return sdpa_peer("MATH")(Case((q, k, v), kwargs={"causal": bool(causal)}))


# --- timing --------------------------------------------------------------------------------------------------------

def time_entry(rec, impl: str, run, shape, *, nbytes: int, check, is_peer: bool = False, extra: dict | None = None,
               **bench_kw) -> dict:
    """rec.time on the attention FLOPs (4 D per visible query-key pair), with the implementation's byte model."""
    B, Hq, _, Sq, Sk, D, causal = unpack(shape)
    return rec.time(OP, impl, run, dtype="bfloat16", shape=tuple(shape), flops=flops(B, Hq, Sq, Sk, D, causal),
                    nbytes=nbytes, is_peer=is_peer, check=check, extra=extra, **bench_kw)


def check_odd(shapes, seed: int = 14) -> list[float]:
    """standard_attention on fresh inputs of each shape, out poisoned, against the full float64 reference; the
    relative errors."""
    import cupy

    from utils.check import assert_close, poison

    from . import reference
    errs = []
    for i, shape in enumerate(shapes):
        q, k, v = make_inputs(shape, seed + i)
        out = poison(cupy.empty(q.shape, dtype=bf16()))
        causal = bool(shape[6])
        standard_attention(q, k, v, out, causal=causal)
        errs.append(assert_close(out, reference(q, k, v, causal=causal)[0], dtype="bfloat16",
                                 name=f"standard attention {'x'.join(map(str, shape))} (seed {seed + i})"))
    return errs


@dataclasses.dataclass
class MemoryPoint:
    shape: tuple
    model_peak: int          # S and P
    pool_peak: int           # measured: CuPy's pool during one call
    math_model_peak: int
    math_peak: int | None    # measured: PyTorch's allocator during one math-backend call (None: not run)
    entry: dict              # the timed entry of the unfused path


def time_standard(rec, shape, seed: int, **bench_kw) -> tuple[dict, int]:
    """One shape of the unfused path (non-causal): its peak allocation in one call (:func:`pool_peak`), checked on
    a sample, then timed and recorded with the peak beside the model's. (entry, measured peak)."""
    import cupy

    from utils.check import poison
    q, k, v = make_inputs(shape, seed)
    out = poison(cupy.empty(q.shape, dtype=bf16()))
    name = f"{STANDARD} {'x'.join(map(str, shape))}"
    _, peak = pool_peak(lambda: standard_attention(q, k, v, out))
    check_sample(out, q, k, v, name=name)
    entry = time_entry(rec, STANDARD, lambda: standard_attention(q, k, v, out), shape, nbytes=standard_bytes(shape),
                       extra={"pool_peak_bytes": peak, "model_peak_bytes": standard_peak(shape)},
                       check=lambda: check_sample(out, q, k, v, name=name), **bench_kw)
    return entry, peak


def math_peak_of(shape, seed: int) -> int:
    """The peak PyTorch's allocator reaches in one math-backend call on one shape (non-causal), output checked."""
    from utils.ladder import peer_output
    q, k, v = make_inputs(shape, seed)
    got, peak = torch_peak(math_peer(q, k, v))
    check_sample(peer_output(got), q, k, v, name=f"{MATH} {'x'.join(map(str, shape))}")
    return peak


def memory_sweep(rec, seqlens=MEM_SEQLENS, *, B: int = 1, H: int = MEM_HEADS, D: int = MEM_D, seed: int = 14,
                 with_math: bool = True) -> list[MemoryPoint]:
    """For each length: the unfused path's peak allocation in one call, checked, then timed (recorded); the math
    backend's peak in one call, checked. Cached memory is given back between lengths."""
    points = []
    for N in seqlens:
        shape = memory_shape(N, B, H, D)
        release()
        entry, peak = time_standard(rec, shape, seed + N, target_ms=100)
        release()
        mpeak = math_peak_of(shape, seed + N) if with_math else None
        points.append(MemoryPoint(shape, standard_peak(shape), peak, math_peak(shape), mpeak, entry))
    release()
    return points


def memory_table(points: list[MemoryPoint]) -> Table:
    rows = []
    for p in points:
        rows.append([str(p.shape[3]), f"{io_bytes(p.shape) / 2**30:.2f}", f"{p.model_peak / 2**30:.2f}",
                     f"{p.pool_peak / 2**30:.2f}", f"{p.math_model_peak / 2**30:.2f}",
                     "—" if p.math_peak is None else f"{p.math_peak / 2**30:.2f}",
                     f"{p.entry['ms'] * 1e3:,.0f}", f"{p.entry['bytes'] / p.entry['ms'] / 1e6:,.0f}"])
    B, H, _, _, _, D, _ = points[0].shape if points else (0,) * 7
    return Table(["S", "q, k, v, out GiB", "unfused model GiB", "unfused measured GiB", "math model GiB",
                  "math measured GiB", "unfused µs", "unfused model GB/s"], rows,
                 caption=f"memory beyond the inputs at B={B}, H={H}, d={D}: the model and the peak of one call "
                         "(CuPy's pool; PyTorch's allocator for the math backend)")


@dataclasses.dataclass
class OomResult:
    free_bytes: int          # what the driver reported free before the attempts
    predicted: int           # the longest N the model fits in it
    fit_n: int               # a length below it: ran, checked, timed
    fail_n: int              # a length above it: the allocation failed
    failed_at: str           # which allocation failed ("S" or "P"), or "" if none did
    message: str             # the error's first line
    fit_entry: dict
    fit_peak: int
    fused_entry: dict        # v4 at fail_n


def round_to(n: float, m: int, up: bool) -> int:
    return int(math.ceil(n / m) * m) if up else int(math.floor(n / m) * m)


def attempt_standard(shape, seed: int) -> tuple[str, str]:
    """Run the unfused path on one shape expecting it not to fit: ("S" or "P", the error's first line) for the
    allocation that failed, ("", "") if none did. Every array is freed on return."""
    import cupy
    q, k, v = make_inputs(shape, seed)
    out = cupy.empty(q.shape, dtype=bf16())
    trace: list = []
    try:
        standard_attention(q, k, v, out, trace=trace)
        cupy.cuda.get_current_stream().synchronize()
    except cupy.cuda.memory.OutOfMemoryError as e:
        return (trace[-1] if trace else "?"), str(e).splitlines()[0]
    return "", ""


def time_fused(rec, shape, seed: int, **bench_kw) -> dict:
    """Chapter 15's v4 on one shape, out poisoned, checked on a sample after timing, recorded."""
    import cupy

    from utils.check import poison
    B, Hq, _, Sq, _, _, causal = unpack(shape)
    q, k, v = make_inputs(shape, seed)
    out, lse = poison(cupy.empty(q.shape, dtype=bf16())), cupy.empty((B, Hq, Sq), dtype=cupy.float32)
    fused = ATTN_FWD[FUSED].bind(q, k, v, out, lse, causal=causal)
    return time_entry(rec, FUSED, fused, shape, nbytes=fused_bytes(shape),
                      check=lambda: check_sample(out, q, k, v, causal=causal, name=f"{FUSED} {shape}"), **bench_kw)


def still_works(D: int = MEM_D, seed: int = 14) -> float:
    """A small unfused run, checked against the full reference: the GPU is fine. Its relative error."""
    return check_odd([memory_shape(1000, 1, 2, D)], seed)[0]


def oom_demo(rec, *, B: int = 1, H: int = MEM_HEADS, D: int = MEM_D, margin: float = 0.1,
             seed: int = 14) -> OomResult:
    """Where the unfused path runs out of memory: the longest N the model fits in the free memory; a run at
    (1 - margin) N (checked, timed with 3 repetitions); an attempt at (1 + margin) N that must fail allocating S or
    P (caught, every array freed); the fused kernel at (1 + margin) N (checked, timed)."""
    free = free_bytes()
    n_pred = max_seqlen(free, B, H, D)
    fit_n, fail_n = round_to((1 - margin) * n_pred, 128, False), round_to((1 + margin) * n_pred, 128, True)
    fit_entry, peak = time_standard(rec, memory_shape(fit_n, B, H, D), seed, warmup=1, reps=3)
    release()
    failed_at, message = attempt_standard(memory_shape(fail_n, B, H, D), seed + 1)
    release()
    fused_entry = time_fused(rec, memory_shape(fail_n, B, H, D), seed + 1, warmup=1, reps=3)
    release()
    return OomResult(free, n_pred, fit_n, fail_n, failed_at, message, fit_entry, peak, fused_entry)


def time_math(rec, shape, seed: int, **bench_kw) -> dict:
    """PyTorch's math backend on one shape, checked on a sample after timing, recorded as a peer."""
    from utils.ladder import peer_output
    causal = bool(shape[6])
    q, k, v = make_inputs(shape, seed)
    run, box = math_peer(q, k, v, causal), {}

    def timed():
        box["out"] = run()

    def check():
        check_sample(peer_output(box["out"]), q, k, v, causal=causal, name=f"{MATH} {shape}")
    return time_entry(rec, MATH, timed, shape, nbytes=math_bytes(shape), is_peer=True, check=check, **bench_kw)


def time_standard_causal(rec, shape, seed: int, **bench_kw) -> dict:
    """The unfused path on one shape (causal or not), checked on a sample after timing, recorded."""
    import cupy

    from utils.check import poison
    causal = bool(shape[6])
    q, k, v = make_inputs(shape, seed)
    out = poison(cupy.empty(q.shape, dtype=bf16()))
    return time_entry(rec, STANDARD, lambda: standard_attention(q, k, v, out, causal=causal), shape,
                      nbytes=standard_bytes(shape), **bench_kw,
                      check=lambda: check_sample(out, q, k, v, causal=causal, name=f"{STANDARD} {shape}"))


def speedup_sweep(rec, shapes, *, seed: int = 14, with_math: bool = True, target_ms: float = 100.0) -> None:
    """The fused forward (chapter 15's v4), the unfused path and PyTorch's math backend on the same inputs (one seed
    a shape) of every shape, outputs poisoned, each checked on a sample after timing, all recorded. Cached memory is
    given back between implementations."""
    try:
        from tqdm.auto import tqdm
    except ImportError:                     # pragma: no cover - tqdm is in requirements.txt
        def tqdm(x, **kw):
            return x
    for i, shape in enumerate(tqdm(list(shapes), desc="attention forward")):
        time_fused(rec, shape, seed + i, target_ms=target_ms)
        release()
        time_standard_causal(rec, shape, seed + i, target_ms=target_ms)
        release()
        if with_math:
            time_math(rec, shape, seed + i, target_ms=target_ms)
            release()


def speedups(rec, shapes) -> dict[tuple, dict]:
    """Per shape, from this run's record: the fused kernel's time over the unfused path's and the math backend's."""
    out = {}
    for s in shapes:
        e = {impl: rec.find(OP, impl, dtype="bfloat16", shape=list(s)) for impl in (FUSED, STANDARD, MATH)}
        e = {impl: hits[0] for impl, hits in e.items() if hits}
        if FUSED not in e:
            continue
        out[tuple(s)] = {"fused_tflops": e[FUSED]["metric"],
                         "over_standard": e[STANDARD]["ms"] / e[FUSED]["ms"] if STANDARD in e else None,
                         "over_math": e[MATH]["ms"] / e[FUSED]["ms"] if MATH in e else None,
                         "standard_gbps": e[STANDARD]["bytes"] / e[STANDARD]["ms"] / 1e6 if STANDARD in e else None}
    return out


def speedup_table(rec, shapes, ceil: dict) -> Table:
    rows = []
    for s, r in speedups(rec, shapes).items():
        B, Hq, _, Sq, _, D, causal = unpack(s)
        pred = predicted_standard_us(s, ceil) / predicted_fused_us(s, ceil)
        rows.append([f"{B}x{Hq}x{Sq}", str(D), "yes" if causal else "no", f"{r['fused_tflops']:.0f}",
                     "—" if r["over_standard"] is None else f"{r['over_standard']:.2f}x", f"{pred:.2f}x",
                     "—" if r["standard_gbps"] is None else f"{r['standard_gbps'] / ceil['copy']:.0%}",
                     "—" if r["over_math"] is None else f"{r['over_math']:.1f}x",
                     f"{predicted_math_us(s, ceil) / predicted_fused_us(s, ceil):.1f}x"])
    return Table(["B x H x S", "d", "causal", f"{FUSED} TFLOP/s", f"over {STANDARD}", "predicted",
                  f"{STANDARD} model bytes / copy", f"over {MATH}", "predicted"], rows,
                 caption=f"{FUSED} against the unfused path and PyTorch's math backend, one run (time ratios)",
                 align="lll" + "r" * 6)


def roofline_points(rec, shapes, impls=(FUSED, STANDARD, MATH)) -> list[dict]:
    """Record entries for utils.roofline: each implementation's byte model as its bytes, the length as the tag."""
    pts = []
    for impl in impls:
        for s in shapes:
            for e in rec.find(OP, impl, dtype="bfloat16", shape=list(s)):
                pts.append({**e, "series": impl + (" (peer)" if e["is_peer"] else "") + f" d={s[5]}",
                            "tag": f"{s[3] // 1024}k" if s[3] >= 1024 else str(s[3])})
    return pts


# --- the tiled kernel under Nsight Compute -------------------------------------------------------------------------

NCU_METRICS = {
    "L1 load sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "L2 read sectors from L1": "lts__t_sectors_srcunit_tex_op_read.sum",
    "DRAM bytes read": "dram__bytes_read.sum",
    "DRAM bytes written": "dram__bytes_write.sum",
    "duration (ns)": "gpu__time_duration.sum",
}


def ncu_command(report, shape=NCU_SHAPE, rows=NCU_ROWS, ncu: str = "ncu", python: str = sys.executable) -> list[str]:
    """Nsight Compute on a child process that launches v0 once per rows-per-block config inside its profiler
    range (each launched once before it: compile, load, first touch): warm launches, clocks left as they are,
    caches flushed before every replayed pass (ncu's default), only :data:`NCU_METRICS`."""
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "-k", "regex:attn_fwd_scalar",
            "--metrics", ",".join(NCU_METRICS.values()), "-o", str(report), "-f",
            python, "-m", "kernels.attention.io_aware", *(str(int(s)) for s in shape), *(str(int(r)) for r in rows)]


_TEMPLATE = r"attn_fwd_scalar\s*<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>"


def counters_by_rows(entries: list[dict], rows=NCU_ROWS) -> dict[int, dict]:
    """ncu's entries by rows per block: read off the template arguments in the kernel name where ncu prints
    them, else by launch order (the child launches one config after the other, in ``rows`` order)."""
    import re
    hits = [e for e in entries if "attn_fwd_scalar" in e.get("kernel", "")]
    by_name = {}
    for e in hits:
        m = re.search(_TEMPLATE, e["kernel"])
        if m:
            by_name[int(m.group(2))] = e
    if set(by_name) >= set(rows):
        return {r: by_name[r] for r in rows}
    if len(hits) == len(rows):
        return dict(zip(rows, hits))
    raise ValueError(f"expected one profiled attn_fwd_scalar launch per rows-per-block config {list(rows)}, "
                     f"got {[e.get('kernel') for e in hits]}")


def profile_v0(shape=NCU_SHAPE, rows=NCU_ROWS, timeout_s: int = 300) -> dict[int, dict] | None:
    """{br: {name: value}} of :data:`NCU_METRICS` for v0 at each rows-per-block config; None, after one printed
    line saying why, where ncu is missing or fails (kernels.sgemm.traffic.run_ncu)."""
    from kernels.sgemm.traffic import parse_ncu_csv, run_ncu, skipped
    text = run_ncu(lambda report, exe: ncu_command(report, shape, rows, ncu=exe), timeout_s)
    if text is None:
        return None
    try:
        got = counters_by_rows(parse_ncu_csv(text, NCU_METRICS.values()), rows)
    except ValueError as e:
        skipped(f"ncu's export could not be read ({e})")
        return None
    return {r: {name: c.get(metric) for name, metric in NCU_METRICS.items()} for r, c in got.items()}


def io_model(shape=NCU_SHAPE, rows=NCU_ROWS) -> dict[int, dict]:
    """Per rows-per-block config: the K/V bytes the tiled algorithm reads, the L1 load bytes v0 asks for, the
    compulsory bytes, and what a block keeps on chip."""
    D = unpack(shape)[5]
    return {r: {"kv_bytes": tiled_kv_reads(shape, r), "l1_bytes": 32 * v0_l1_sectors(shape, r),
                "compulsory": compulsory_reads(shape), "onchip": v0_onchip_bytes(D, r)} for r in rows}


def io_table(shape, counters: dict | None, rows=NCU_ROWS) -> Table:
    """The model beside Nsight Compute's counters, one row per rows-per-block config ('—' where ncu did not run)."""
    model = io_model(shape, rows)

    def gb(x):
        return "—" if x is None else f"{x / 1e9:,.2f}"
    out = []
    for r in rows:
        m, c = model[r], (counters or {}).get(r, {})
        l1 = None if c.get("L1 load sectors") is None else 32 * c["L1 load sectors"]
        l2 = None if c.get("L2 read sectors from L1") is None else 32 * c["L2 read sectors from L1"]
        dram = c.get("DRAM bytes read")
        dur = c.get("duration (ns)")
        out.append([str(r), f"{m['onchip'] / 1024:.1f}", gb(m["kv_bytes"]), gb(m["l1_bytes"]), gb(l1), gb(l2),
                    gb(m["compulsory"]), gb(dram), "—" if dur is None else f"{dur / 1e3:,.0f}"])
    B, Hq, _, Sq, _, D, _ = unpack(shape)
    return Table(["rows per block", "on chip per block KiB", "model: K/V read GB", "model: L1 load GB",
                  "ncu: L1 load GB", "ncu: L2 to SM GB", "compulsory read GB", "ncu: DRAM read GB", "ncu: µs"], out,
                 caption=f"attn_fwd v0 at B={B}, H={Hq}, S={Sq}, d={D}: the IO model and Nsight Compute")


def time_v0_rows(rec, shape=NCU_SHAPE, rows=NCU_ROWS, seed: int = 14) -> dict[int, dict]:
    """v0 at each rows-per-block config on the same inputs, checked on a sample, recorded as
    ``v0_scalar[br]``."""
    import cupy

    from utils.check import poison
    B, Hq, _, Sq, _, _, causal = unpack(shape)
    q, k, v = make_inputs(shape, seed)
    out, lse = poison(cupy.empty(q.shape, dtype=bf16())), cupy.empty((B, Hq, Sq), dtype=cupy.float32)
    got = {}
    for r in rows:
        poison(out)
        run = ATTN_FWD["v0_scalar"].bind(q, k, v, out, lse, causal=causal, config=Rows(r))
        got[r] = time_entry(rec, f"v0_scalar[{r}]", run, shape, nbytes=fused_bytes(shape),
                            extra={"config": {"br": r}, "model_kv_bytes": tiled_kv_reads(shape, r)},
                            check=lambda r=r: check_sample(out, q, k, v, name=f"v0_scalar[{r}]"), target_ms=100)
    return got


def main(argv=None) -> None:
    """``python -m kernels.attention.io_aware B Hq Hkv Sq Sk D causal BR...``: v0 at each BR once outside the
    profiler range, then once inside it, on standard-normal inputs."""
    args = [int(a) for a in (sys.argv[1:] if argv is None else argv)]
    if len(args) < 8:
        raise SystemExit("usage: python -m kernels.attention.io_aware B Hq Hkv Sq Sk D causal BR [BR...]")
    import cupy

    from kernels.sgemm.traffic import profiled
    shape, rows = tuple(args[:7]), args[7:]
    B, Hq, _, Sq, _, _, causal = unpack(shape)
    q, k, v = make_inputs(shape, 1)
    out, lse = cupy.empty(q.shape, dtype=bf16()), cupy.empty((B, Hq, Sq), dtype=cupy.float32)
    profiled([ATTN_FWD["v0_scalar"].bind(q, k, v, out, lse, causal=causal, config=Rows(r)) for r in rows])


if __name__ == "__main__":
    main()
