"""Fused element-wise epilogues (chapter 8): references, byte ledgers, the versions (one
:class:`utils.version.Registry` per op: BIAS_GELU, SWIGLU, ADD_RMSNORM, ROPE), the peers (eager torch chains,
torch.compile, the CuPy library route) and the inputs of the chapter's ladders.

Four ops of a transformer layer, bf16 in and out, fp32 math inside:

- ``bias_gelu``: ``y = gelu(x + b)``, x [rows, cols], b [cols]; GELU in its exact erf form, which is
  ``torch.nn.functional.gelu``'s default (``approximate='none'``).
- ``swiglu``: ``y = silu(x[:, :H]) * x[:, H:]``, x [rows, 2H] -> y [rows, H] (gate half first, as vLLM's
  ``silu_and_mul``).
- ``add_rmsnorm``: ``h = x + residual`` (stored in bf16, the new residual stream) and
  ``y = h * rsqrt(mean(h^2) + eps) * w``, the norm taken over the bf16-rounded h, as torch and vLLM do.
- ``rope``: rotate-half (GPT-NeoX style) rotary embedding of q [T, Hq, D] and k [T, Hk, D] with cos/sin
  tables [T, D/2] (token t at position t): ``out[d] = x[d] cos - x[d + D/2] sin``,
  ``out[d + D/2] = x[d + D/2] cos + x[d] sin`` for d < D/2.

The references compute the fp32-math formula in float64 from the bf16 inputs (NumPy or CuPy, wherever
the inputs live). The ledgers count the HBM bytes of each op of the unfused torch chain the chapter times,
and the minimal bytes of the fused kernel, so that ``chain / fused`` is the speedup predicted before
measuring.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from utils.arrays import bf16, ceil_div, xp
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.paths import INCLUDE
from utils.version import Launch, Registry, Unsupported, Version, config_type

SOURCE = KernelSource("fusion.cu")

BF16 = bf16()
THREADS = 256          # FUSE_THREADS in fusion.cu
UNROLL = 2             # FUSE_UNROLL: 16-byte chunks (or scalar items) per thread
RMS_MAX_CHUNKS = 2     # RMS_MAX_CHUNKS: 16-byte chunks of a row per thread in add_rmsnorm
INT32_LIMIT = 2**31
EPS = 1e-6


# --- references (float64, from the bf16 inputs) ------------------------------------------------------

def _f64(a):
    """bf16 (or any float) array -> float64, exactly (through float32)."""
    return a.astype(np.float32).astype(np.float64)


def _erfc(v):
    m = xp(v)
    if m is np:
        return np.vectorize(math.erfc, otypes=[np.float64])(v)
    from cupyx.scipy.special import erfc
    return erfc(v)


def reference_bias_gelu(x, b):
    """gelu(v) = v Phi(v) = 0.5 v erfc(-v / sqrt 2): erfc, not 1 + erf, which cancels in float64 for
    v < -5 (1 + erf(-8.5 / sqrt 2) rounds to 0 where Phi(-8.5) = 1e-17) and would make tiny outputs 0."""
    v = _f64(x) + _f64(b)[None, :]
    return 0.5 * v * _erfc(-v / math.sqrt(2.0))


def gelu_poly_coefficients() -> list[float]:
    """Q's fp32 coefficients, highest degree first, read from kernels/include/fusion_scalar.cuh (one source)."""
    import re
    text = (INCLUDE / "fusion_scalar.cuh").read_text()
    body = text[text.index("float log2_phi_neg"):text.index("return p;", text.index("float log2_phi_neg"))]
    return [float(c) for c in re.findall(r"([-+]?\d\.\d+e[-+]\d+)f", body)]


def gelu_poly_emulated(v, a_max: float = 13.0):
    """gelu_poly in NumPy, fp32 step by step (each fmaf exact in float64, then rounded once); the ex2 exact,
    flushed below 2^-126 like ex2.approx.ftz. For the host test of the bound stated in the header."""
    v = np.asarray(v, np.float32)
    a = np.minimum(np.abs(v), np.float32(a_max))
    coef = gelu_poly_coefficients()
    p = np.full(a.shape, coef[0], np.float32)
    for c in coef[1:]:
        p = (p.astype(np.float64) * a + c).astype(np.float32)
    e = np.exp2(p.astype(np.float64))
    e = np.where(e < 2.0**-126, 0.0, e).astype(np.float32)
    r = np.where(np.isnan(v), v, np.maximum(v, np.float32(0)))
    return (-(a.astype(np.float64)) * e + r).astype(np.float32)


def reference_swiglu(x):
    H = x.shape[1] // 2
    g, u = _f64(x[:, :H]), _f64(x[:, H:])
    m = xp(x)
    return g / (1.0 + m.exp(-g)) * u


def reference_add_rmsnorm(x, residual, w, eps: float = EPS):
    """(h, y): h = x + residual rounded to bf16 (the stored residual stream), y normalized from that h."""
    h32 = x.astype(np.float32) + residual.astype(np.float32)     # exact: two bf16 add exactly in fp32
    h = _f64(h32.astype(BF16))
    m = xp(x)
    rstd = 1.0 / m.sqrt((h * h).mean(axis=1, keepdims=True) + eps)
    return h, h * rstd * _f64(w)[None, :]


def reference_rope(x, cos, sin):
    """Rotate-half RoPE of one tensor x [T, H, D] with tables [T, D/2]."""
    half = x.shape[2] // 2
    m = xp(x)
    v = _f64(x)
    c, s = _f64(cos)[:, None, :], _f64(sin)[:, None, :]
    x1, x2 = v[..., :half], v[..., half:]
    return m.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_tables(T: int, half: int, base: float = 10000.0, xp=np):
    """cos/sin tables [T, half] in bf16 for positions 0..T-1 (inverse frequencies base^(-i/half))."""
    inv = base ** (-np.arange(half, dtype=np.float64) / half)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32).astype(BF16), np.sin(ang).astype(np.float32).astype(BF16)
    if xp is np:
        return cos, sin
    return xp.asarray(cos), xp.asarray(sin)


# --- byte ledgers: (op, bytes read, bytes written) for the unfused chains, and the fused minimum -------

def ledger_bias_gelu(rows: int, cols: int, itemsize: int = 2) -> dict:
    """Eager ``F.gelu(x + b)``: two kernels, the sum written to HBM and read back."""
    n, b = rows * cols * itemsize, cols * itemsize
    chain = [("x + b", n + b, n), ("gelu", n, n)]
    return {"chain": chain, "fused": n + b + n}


def ledger_swiglu(rows: int, H: int, itemsize: int = 2) -> dict:
    """Eager ``F.silu(x[:, :H]) * x[:, H:]``: silu writes its result, the product reads it back."""
    h = rows * H * itemsize
    chain = [("silu(gate)", h, h), ("* up", 2 * h, h)]
    return {"chain": chain, "fused": 2 * h + h}


def ledger_add_rmsnorm(rows: int, D: int) -> dict:
    """The chain as Hugging Face's LlamaRMSNorm writes it (after the residual add), bf16 storage,
    the normalization in fp32: h = x + r; hf = h.float(); var = hf.pow(2).mean(-1); hf * rsqrt(var + eps);
    .to(bf16); w * (...)."""
    n2, n4, r4, w2 = rows * D * 2, rows * D * 4, rows * 4, D * 2
    chain = [("x + r", 2 * n2, n2), ("h.float()", n2, n4), ("pow(2)", n4, n4), ("mean(-1)", n4, r4),
             ("var + eps", r4, r4), ("rsqrt", r4, r4), ("hf * rstd", n4 + r4, n4),
             (".to(bf16)", n4, n2), ("w * ...", n2 + w2, n2)]
    return {"chain": chain, "fused": 2 * n2 + 2 * n2 + w2}


def ledger_add_rms_norm_op(rows: int, D: int) -> dict:
    """``x + r`` then ``torch.nn.functional.rms_norm`` counted as one read and one write of h."""
    n2, w2 = rows * D * 2, D * 2
    chain = [("x + r", 2 * n2, n2), ("F.rms_norm", n2 + w2, n2)]
    return {"chain": chain, "fused": 2 * n2 + 2 * n2 + w2}


def ledger_rope(T: int, Hq: int, Hk: int, D: int) -> dict:
    """Eager ``x * cos + rotate_half(x) * sin`` for q and for k, with the [T, 1, D] tables built once
    outside (as Hugging Face's rotary module does): per tensor x * c, -x2, cat, * s, +."""
    chain = []
    tab = T * D * 2                                     # one full [T, D] bf16 table
    for name, H in (("q", Hq), ("k", Hk)):
        n = T * H * D * 2
        chain += [(f"{name} * cos", n + tab, n), (f"-{name}2", n // 2, n // 2), ("cat", n, n),
                  (f"rot({name}) * sin", n + tab, n), (f"{name} add", 2 * n, n)]
    nq, nk, half_tabs = T * Hq * D * 2, T * Hk * D * 2, 2 * T * (D // 2) * 2
    return {"chain": chain, "fused": 2 * nq + 2 * nk + half_tabs}


def chain_bytes(ledger: dict) -> int:
    return int(sum(r + w for _, r, w in ledger["chain"]))


def predicted_speedup(ledger: dict) -> float:
    """Unfused bytes / fused bytes: the speedup if every kernel ran at the same bandwidth."""
    return chain_bytes(ledger) / ledger["fused"]


# --- launch geometry (pure functions, tested on the CPU) ----------------------------------------------

def grid_elementwise(n_out: int) -> int:
    """bias_gelu / swiglu: a block covers THREADS * UNROLL chunks of 8 = 4096 output elements (both paths)."""
    return ceil_div(n_out, THREADS * UNROLL * 8)


def rmsnorm_block(D: int) -> int:
    """Threads per row for add_rmsnorm: the fewest multiple of 32 (at least 32) with
    D <= 8 * RMS_MAX_CHUNKS * block; 256 for D = 4096."""
    per = 8 * RMS_MAX_CHUNKS
    return max(32, ceil_div(ceil_div(D, per), 32) * 32)


def rope_items(T: int, Hq: int, Hk: int, half: int) -> int:
    vec = 8 if half % 8 == 0 else 1
    return T * (Hq + Hk) * (half // vec)


def grid_rope(T: int, Hq: int, Hk: int, half: int) -> int:
    return ceil_div(rope_items(T, Hq, Hk, half), THREADS * UNROLL)


def sass_instructions_per_element(sass_text: str, elements: int = 8 * UNROLL) -> float:
    """SASS instructions a thread spends between its last 16-byte load and its last 16-byte store, per
    element: the math and conversions of its UNROLL chunks of 8 (the vector path of an element-wise kernel)."""
    lines = [ln for ln in sass_text.splitlines() if ln.strip().startswith("/*") and ";" in ln]
    last_ld = max(i for i, ln in enumerate(lines) if "LDG.E.128" in ln)
    last_st = max(i for i, ln in enumerate(lines) if "STG.E.128" in ln)
    return (last_st - last_ld - 1) / elements


def sass_span_per_element(sass_text: str, elements: int) -> float:
    """SASS instructions from a kernel's first 16-byte load to its last 16-byte store, per element of one
    thread's work (``elements``): the vector path's whole body, index arithmetic and bias handling
    included (sass_instructions_per_element counts only what follows the last load)."""
    lines = [ln for ln in sass_text.splitlines() if ln.strip().startswith("/*") and ";" in ln]
    first_ld = min(i for i, ln in enumerate(lines) if "LDG.E.128" in ln)
    last_st = max(i for i, ln in enumerate(lines) if "STG.E.128" in ln)
    return (last_st - first_ld + 1) / elements


# --- launch geometry of v3 and RoPE v2 ---------------------------------------------------------------

def grid_bias_gelu_rows(rows: int, cols: int, rows_per_thread: int) -> tuple[int, int]:
    """bias_gelu_v3 (2-D): grid.x = row blocks of ``rows_per_thread`` rows, grid.y = column blocks of THREADS
    16-byte chunks (or THREADS columns on the scalar path, cols % 8 != 0)."""
    units = cols // 8 if cols % 8 == 0 else cols
    return ceil_div(rows, rows_per_thread), ceil_div(units, THREADS)


def rope_v2_block(half: int) -> tuple[int, int]:
    """rope_v2_tok's block (bx, by): bx chunk positions of the half head (8-element chunks when
    half % 8 == 0, else single elements), at most 32; by = THREADS // bx head slots."""
    nj = half // 8 if half % 8 == 0 else half
    bx = min(nj, 32)
    return bx, THREADS // bx


# --- problems: argument validation, one per op ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated call of one fused op: the arrays in the kernels' argument order, the sizes, the outputs."""
    arrays: tuple
    sizes: dict
    out: Any


def expect_rows(x, name: str) -> tuple[int, int]:
    expect_array(x, name, dtype=BF16, ndim=2)
    rows, cols = (int(s) for s in x.shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"{name}: expected at least one row and one column, got shape {(rows, cols)}")
    return rows, cols


def bias_gelu_problem(x, b, y) -> Problem:
    """y = gelu(x + b): x, y [rows, cols] bf16, b [cols] bf16."""
    rows, cols = expect_rows(x, "x")
    if rows * cols > INT32_LIMIT - THREADS * UNROLL * 8:
        # the scalar path's int32 index runs up to one block (4096 elements) past the end before its check
        raise ValueError(f"x: {rows * cols} elements; the kernel indexes with int32, at most 2**31 - 4096")
    expect_array(b, "b", dtype=BF16, shape=(cols,))
    expect_array(y, "y", dtype=BF16, shape=(rows, cols))
    expect_same_device(x, b, y)
    return Problem((x, b, y), {"rows": rows, "cols": cols}, y)


def swiglu_problem(x, y) -> Problem:
    """y = silu(x[:, :H]) * x[:, H:]: x [rows, 2H] bf16, y [rows, H] bf16."""
    expect_array(x, "x", dtype=BF16, ndim=2)
    rows, two_h = (int(s) for s in x.shape)
    if rows < 1 or two_h < 2 or two_h % 2:
        raise ValueError(f"x: expected shape (rows, 2H) with rows >= 1 and an even last dimension, got {(rows, two_h)}")
    if rows * two_h >= INT32_LIMIT:
        raise ValueError(f"x: {rows * two_h} elements; the kernel indexes with int32, at most 2**31 - 1")
    expect_array(y, "y", dtype=BF16, shape=(rows, two_h // 2))
    expect_same_device(x, y)
    return Problem((x, y), {"rows": rows, "H": two_h // 2}, y)


def add_rmsnorm_problem(x, residual, w, residual_out, y, eps: float = EPS) -> Problem:
    """residual_out = x + residual (bf16); y = rmsnorm(residual_out) * w. x, residual, residual_out, y
    [rows, D] bf16, w [D] bf16."""
    rows, D = expect_rows(x, "x")
    if rows >= INT32_LIMIT:
        raise ValueError(f"x: {rows} rows; at most 2**31 - 1")
    expect_array(residual, "residual", dtype=BF16, shape=(rows, D))
    expect_array(w, "w", dtype=BF16, shape=(D,))
    expect_array(residual_out, "residual_out", dtype=BF16, shape=(rows, D))
    expect_array(y, "y", dtype=BF16, shape=(rows, D))
    expect_same_device(x, residual, w, residual_out, y)
    return Problem((x, residual, w, residual_out, y), {"rows": rows, "D": D, "eps": float(eps)}, (residual_out, y))


def rope_problem(q, k, cos, sin, q_out, k_out) -> Problem:
    """Rotate-half RoPE of q [T, Hq, D] and k [T, Hk, D] (bf16) with cos/sin [T, D/2]."""
    expect_array(q, "q", dtype=BF16, ndim=3)
    T, Hq, D = (int(s) for s in q.shape)
    if T < 1 or Hq < 1 or D < 2 or D % 2:
        raise ValueError(f"q: expected (T, Hq, D) with T, Hq >= 1 and an even head size D, got {(T, Hq, D)}")
    expect_array(k, "k", dtype=BF16, ndim=3)
    if int(k.shape[0]) != T or int(k.shape[2]) != D or int(k.shape[1]) < 1:
        raise ValueError(f"k: expected shape ({T}, *, {D}) to match q, got {tuple(k.shape)}")
    Hk, half = int(k.shape[1]), D // 2
    # the int32 work-item index runs up to one block (THREADS * UNROLL items) past the end before its check
    items = rope_items(T, Hq, Hk, half)
    if max(T * Hq * D, T * Hk * D) >= INT32_LIMIT or items > INT32_LIMIT - THREADS * UNROLL:
        raise ValueError(f"q/k: too large for int32 indexing ({T * max(Hq, Hk) * D} elements)")
    expect_array(cos, "cos", dtype=BF16, shape=(T, half))
    expect_array(sin, "sin", dtype=BF16, shape=(T, half))
    expect_array(q_out, "q_out", dtype=BF16, shape=(T, Hq, D))
    expect_array(k_out, "k_out", dtype=BF16, shape=(T, Hk, D))
    expect_same_device(q, k, cos, sin, q_out, k_out)
    return Problem((q, k, cos, sin, q_out, k_out), {"T": T, "Hq": Hq, "Hk": Hk, "half": half}, (q_out, k_out))


# --- plans ---------------------------------------------------------------------------------------------

BLOCK = (THREADS, 1, 1)


def elementwise_plan(kernel: str):
    """bias_gelu v1/v2: a 1-D grid of blocks of THREADS * UNROLL chunks of 8 (or scalar items)."""
    def plan(p: Problem, config=None) -> list[Launch]:
        rows, cols = p.sizes["rows"], p.sizes["cols"]
        return [Launch(kernel, (grid_elementwise(rows * cols), 1, 1), BLOCK,
                       (*p.arrays, np.int32(rows * cols), np.int32(cols)))]
    plan.__name__ = f"plan_{kernel}"
    return plan


# bias_gelu_v3's instances: rows per thread and GELU form -> the extern "C" kernel fusion.cu instantiates.
BiasGeluRows = config_type("BiasGeluRows", "rows gelu")
BIAS_GELU_ROWS_KERNELS = {BiasGeluRows(4, "poly"): "bias_gelu_v3_rows4", BiasGeluRows(2, "poly"): "bias_gelu_v3_rows2",
                          BiasGeluRows(8, "poly"): "bias_gelu_v3_rows8", BiasGeluRows(4, "erf"): "bias_gelu_erf_rows4"}
BIAS_GELU_V3 = BiasGeluRows(4, "poly")   # the instance picked by the tuning batch (scripts/tune/ch08_fusion.py)


def plan_bias_gelu_v3(p: Problem, config: BiasGeluRows) -> list[Launch]:
    rows, cols = p.sizes["rows"], p.sizes["cols"]
    gx, gy = grid_bias_gelu_rows(rows, cols, config.rows)
    if gy > 65535:
        raise Unsupported(f"x: {cols} columns need {gy} column blocks; bias_gelu_v3 takes at most 65535 "
                          f"({65535 * THREADS * 8} columns); v1/v2 take any width")
    return [Launch(BIAS_GELU_ROWS_KERNELS[config], (gx, gy, 1), BLOCK, (*p.arrays, np.int32(rows), np.int32(cols)))]


def plan_swiglu_v1(p: Problem, config=None) -> list[Launch]:
    rows, H = p.sizes["rows"], p.sizes["H"]
    return [Launch("swiglu_v1_vec8", (grid_elementwise(rows * H), 1, 1), BLOCK, (*p.arrays, np.int32(rows), np.int32(H)))]


def plan_add_rmsnorm_v1(p: Problem, config=None) -> list[Launch]:
    rows, D = p.sizes["rows"], p.sizes["D"]
    block = rmsnorm_block(D)
    if block > 1024:
        raise Unsupported(f"x: rows of {D} elements need {block} threads per row; at most "
                          f"{8 * RMS_MAX_CHUNKS * 1024} elements per row are supported")
    return [Launch("add_rmsnorm_v1_vec8", (rows, 1, 1), (block, 1, 1),
                   (*p.arrays, np.int32(rows), np.int32(D), np.float32(p.sizes["eps"])))]


def rope_args(p: Problem) -> tuple:
    s = p.sizes
    return (*p.arrays, np.int32(s["T"]), np.int32(s["Hq"]), np.int32(s["Hk"]), np.int32(s["half"]))


def plan_rope_v1(p: Problem, config=None) -> list[Launch]:
    s = p.sizes
    return [Launch("rope_neox_v1_vec8", (grid_rope(s["T"], s["Hq"], s["Hk"], s["half"]), 1, 1), BLOCK, rope_args(p))]


def plan_rope_v2(p: Problem, config=None) -> list[Launch]:
    bx, by = rope_v2_block(p.sizes["half"])
    return [Launch("rope_neox_v2_tok", (p.sizes["T"], 1, 1), (bx, by, 1), rope_args(p))]


# --- the versions: one registry per op -------------------------------------------------------------------

BIAS_GELU = Registry("bias_gelu", bias_gelu_problem, [
    Version("bias_gelu_v1_vec8", "x + b and erf-GELU in one pass: 16-byte loads of 8 bf16, 2 chunks per thread, "
            "fp32 math", SOURCE, elementwise_plan("bias_gelu_v1_vec8"), snippet="bias_gelu_v1"),
    Version("bias_gelu_v2_poly", "v1 with GELU from a degree-9 polynomial for log2 Phi and one ex2: ~18 instead "
            "of ~35 instructions per element", SOURCE, elementwise_plan("bias_gelu_v2_poly"),
            parent="v1_vec8", snippet="bias_gelu_v2"),
    Version("bias_gelu_v3_rows", "v2's GELU in a 2-D layout: a thread owns one column chunk of several rows, its "
            "bias loaded once, no modulo, more x-chunks in flight", SOURCE, plan_bias_gelu_v3, parent="v2_poly",
            snippet="bias_gelu_v3", configs=tuple(BIAS_GELU_ROWS_KERNELS), default=lambda p: BIAS_GELU_V3),
])

SWIGLU = Registry("swiglu", swiglu_problem, [
    Version("swiglu_v1_vec8", "silu(gate) * up in one pass over both halves of each row, 16-byte chunks",
            SOURCE, plan_swiglu_v1, snippet="swiglu_v1"),
])

ADD_RMSNORM = Registry("add_rmsnorm", add_rmsnorm_problem, [
    Version("add_rmsnorm_v1_vec8", "residual add, store, sum of squares and scaling in one block per row, the "
            "row in registers", SOURCE, plan_add_rmsnorm_v1, snippet="add_rmsnorm_v1"),
])

ROPE = Registry("rope", rope_problem, [
    Version("rope_v1_vec8", "rotate-half (NeoX) RoPE of q and k in one launch, 8 (d, d + D/2) pairs per work item",
            SOURCE, plan_rope_v1, snippet="rope_neox_v1"),
    Version("rope_v2_tok", "one block per token, threads over (chunk, head slot): no division, cos/sin loaded "
            "once per thread, 57 instead of 78 registers", SOURCE, plan_rope_v2, parent="v1_vec8",
            snippet="rope_neox_v2"),
])

REGISTRIES = {r.op: r for r in (BIAS_GELU, SWIGLU, ADD_RMSNORM, ROPE)}


# --- inputs for the ladders (shapes as the chapter names them) -------------------------------------------
# bias_gelu (rows, cols); swiglu (rows, H): x is [rows, 2H]; add_rmsnorm (rows, D); rope (T, Hq, Hk, D).

def random_bf16(shape, rng):
    """Fresh standard-normal bf16 data on the GPU, seeded from ``rng``."""
    from utils.arrays import random_normal
    return random_normal(tuple(shape), "bfloat16", seed=int(rng.integers(2**31)))[0]


def make_case(op: str, shape, dtype, rng):
    """A ladder case of ``op``: fresh inputs, outputs allocated (the ladder poisons them)."""
    import cupy

    from utils.ladder import Case

    def empty(*s):
        return cupy.empty(s, dtype=BF16)
    if op == "bias_gelu":
        rows, cols = shape
        return Case((random_bf16((rows, cols), rng), random_bf16((cols,), rng), empty(rows, cols)), outputs=(2,))
    if op == "swiglu":
        rows, H = shape
        return Case((random_bf16((rows, 2 * H), rng), empty(rows, H)), outputs=(1,))
    if op == "add_rmsnorm":
        rows, D = shape
        return Case((random_bf16((rows, D), rng), random_bf16((rows, D), rng), random_bf16((D,), rng),
                     empty(rows, D), empty(rows, D)), outputs=(3, 4))
    if op == "rope":
        T, Hq, Hk, D = shape
        cos, sin = rope_tables(T, D // 2, xp=cupy)
        return Case((random_bf16((T, Hq, D), rng), random_bf16((T, Hk, D), rng), cos, sin, empty(T, Hq, D),
                     empty(T, Hk, D)), outputs=(4, 5))
    raise ValueError(f"op: expected one of {list(REGISTRIES)}, got {op!r}")


def reference_case(op: str, case):
    """The float64 reference of a ladder case (a tuple for ops with two outputs)."""
    a = case.args
    if op == "bias_gelu":
        return reference_bias_gelu(a[0], a[1])
    if op == "swiglu":
        return reference_swiglu(a[0])
    if op == "add_rmsnorm":
        return reference_add_rmsnorm(a[0], a[1], a[2])
    if op == "rope":
        return reference_rope(a[0], a[2], a[3]), reference_rope(a[1], a[2], a[3])
    raise ValueError(f"op: expected one of {list(REGISTRIES)}, got {op!r}")


# op -> its ledger function, taking the op's ladder shape
LEDGERS = {"bias_gelu": ledger_bias_gelu, "swiglu": ledger_swiglu, "add_rmsnorm": ledger_add_rmsnorm,
           "rope": ledger_rope}


def fused_bytes(op: str, shape) -> int:
    """The fused kernel's minimal HBM bytes for ``op`` at ``shape`` (the ledgers' 'fused')."""
    if op not in LEDGERS:
        raise ValueError(f"op: expected one of {list(LEDGERS)}, got {op!r}")
    return LEDGERS[op](*shape)["fused"]


def ladder_inputs(op: str) -> dict:
    """make / reference / nbytes for ``utils.ladder.Ladder(rec, REGISTRIES[op], ..., **ladder_inputs(op))``."""
    if op not in REGISTRIES:
        raise ValueError(f"op: expected one of {list(REGISTRIES)}, got {op!r}")
    return {"make": functools.partial(make_case, op), "reference": functools.partial(reference_case, op),
            "nbytes": lambda shape, dtype: fused_bytes(op, shape)}


# --- the library route: CuPy ElementwiseKernel / ReductionKernel -------------------------------------
# The expressions call the scalar helpers of kernels/include/fusion_scalar.cuh (passed as the preamble).
# CuPy sees the bf16 arrays as uint16 bit patterns (x.view(cupy.uint16)): the conversions are the
# helpers' shifts and rounding, so the arithmetic is the same as in the hand-written kernels.

CUPY_EXPRESSIONS = {
    "bias_gelu": "y = float_to_bf16_bits(gelu_erf(bf16_bits_to_float(x) + bf16_bits_to_float(b)))",
    "swiglu": "y = float_to_bf16_bits(silu(bf16_bits_to_float(g)) * bf16_bits_to_float(u))",
    "rms_sumsq": "square(add_round_bf16(x, r))",
    "rms_apply": ("float h = add_round_bf16(x, r); ro = float_to_bf16_bits(h); "
                  "y = float_to_bf16_bits(h * rsqrtf(ss * inv_d + eps) * bf16_bits_to_float(w))"),
    "rope": ("const int D = 2 * hd; const int d = (int)(i % D); const long long t = i / ((long long)H * D); "
             "const int j = d < hd ? d : d - hd; "
             "const float c = bf16_bits_to_float(cs[t * hd + j]), s = bf16_bits_to_float(sn[t * hd + j]); "
             "const float p = d < hd ? -bf16_bits_to_float(x[i + hd]) : bf16_bits_to_float(x[i - hd]); "
             "y = float_to_bf16_bits(bf16_bits_to_float(x[i]) * c + p * s)"),
}


def cupy_preamble() -> str:
    """The scalar helpers, as CuPy's preamble (the header without its include guard)."""
    text = (INCLUDE / "fusion_scalar.cuh").read_text()
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#pragma once"))


@functools.cache
def _cupy_kernels():
    import cupy
    pre = cupy_preamble()
    ek = cupy.ElementwiseKernel
    return {
        "bias_gelu": ek("uint16 x, uint16 b", "uint16 y", CUPY_EXPRESSIONS["bias_gelu"],
                        "book_bias_gelu", preamble=pre),
        "swiglu": ek("uint16 g, uint16 u", "uint16 y", CUPY_EXPRESSIONS["swiglu"], "book_swiglu", preamble=pre),
        "rms_sumsq": cupy.ReductionKernel("uint16 x, uint16 r", "float32 ss", CUPY_EXPRESSIONS["rms_sumsq"],
                                          "a + b", "ss = a", "0", "book_rms_sumsq", reduce_type="float",
                                          preamble=pre),
        "rms_apply": ek("uint16 x, uint16 r, float32 ss, uint16 w, float32 inv_d, float32 eps",
                        "uint16 ro, uint16 y", CUPY_EXPRESSIONS["rms_apply"], "book_rms_apply", preamble=pre),
        "rope": ek("raw uint16 x, raw uint16 cs, raw uint16 sn, int32 H, int32 hd", "uint16 y",
                   CUPY_EXPRESSIONS["rope"], "book_rope", preamble=pre),
    }


def _u16(a):
    import cupy
    return a.view(cupy.uint16)


def cupy_bias_gelu(x, b, y):
    """One ElementwiseKernel: b broadcast over the rows."""
    _cupy_kernels()["bias_gelu"](_u16(x), _u16(b), _u16(y))
    return y


def cupy_swiglu(x, y):
    """One ElementwiseKernel over the two halves, passed as strided views of x."""
    H = x.shape[1] // 2
    xv = _u16(x)
    _cupy_kernels()["swiglu"](xv[:, :H], xv[:, H:], _u16(y))
    return y


def cupy_add_rmsnorm(x, residual, w, residual_out, y, ss, eps: float = EPS):
    """Two kernels: a ReductionKernel for the row sums of squares (into ss [rows] fp32), then an
    ElementwiseKernel that re-reads x and residual and writes both outputs."""
    k = _cupy_kernels()
    xv, rv = _u16(x), _u16(residual)
    k["rms_sumsq"](xv, rv, axis=1, out=ss)
    k["rms_apply"](xv, rv, ss[:, None], _u16(w), np.float32(1.0 / x.shape[1]), np.float32(eps),
                   _u16(residual_out), _u16(y))
    return residual_out, y


def cupy_rope(q, k, cos, sin, q_out, k_out):
    """One ElementwiseKernel per tensor: each element reads its partner through a raw argument."""
    kern = _cupy_kernels()["rope"]
    half = q.shape[2] // 2
    for x, o in ((q, q_out), (k, k_out)):
        kern(_u16(x), _u16(cos), _u16(sin), np.int32(x.shape[1]), np.int32(half), _u16(o))
    return q_out, k_out


CUPY_ROUTE = {"bias_gelu": cupy_bias_gelu, "swiglu": cupy_swiglu, "add_rmsnorm": cupy_add_rmsnorm,
              "rope": cupy_rope}


# --- the peers: the torch chains a reader writes (eager, and under torch.compile), and the CuPy route ---
# Each chain takes the op's input tensors and returns its output(s); torch is imported by the callers.

def eager_bias_gelu(x, b):
    import torch.nn.functional as TF
    return TF.gelu(x + b)                           # erf GELU, torch's default


def eager_swiglu(x):
    import torch.nn.functional as TF
    H = x.shape[1] // 2
    return TF.silu(x[:, :H]) * x[:, H:]


def eager_add_rmsnorm(x, r, w):
    """Residual add, then Hugging Face's LlamaRMSNorm: fp32 statistics, bf16 storage."""
    import torch
    h = x + r
    hf = h.float()
    var = hf.pow(2).mean(-1, keepdim=True)
    hf = hf * torch.rsqrt(var + EPS)
    return h, w * hf.to(torch.bfloat16)


def add_then_rms_norm(x, r, w):
    """Residual add, then PyTorch's own rms_norm operator."""
    import torch.nn.functional as TF
    h = x + r
    return h, TF.rms_norm(h, (x.shape[1],), w, EPS)


def rotate_half(x):
    import torch
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def eager_rope(q, k, c, s):
    """c, s: [T, 1, D] tables built once per forward pass (as Hugging Face's rotary module does)."""
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s


EAGER_CHAINS = {"bias_gelu": eager_bias_gelu, "swiglu": eager_swiglu, "add_rmsnorm": eager_add_rmsnorm,
                "rope": eager_rope}
CUPY_NAMES = {"bias_gelu": "cupy.ElementwiseKernel", "swiglu": "cupy.ElementwiseKernel",
              "add_rmsnorm": "cupy.ReductionKernel+ElementwiseKernel", "rope": "cupy.ElementwiseKernel"}
N_INPUTS = {"bias_gelu": 2, "swiglu": 1, "add_rmsnorm": 3, "rope": 4}


def torch_inputs(op: str, case) -> list:
    """The case's input arrays as torch tensors on the same memory; RoPE's [T, D/2] tables widened once to
    the [T, 1, D] tables the eager chain multiplies by."""
    import torch

    from utils.arrays import as_torch
    ts = [as_torch(a) for a in case.args[:N_INPUTS[op]]]
    if op == "rope":
        ts[2:] = [torch.cat((t, t), -1)[:, None, :] for t in ts[2:]]
    return ts


def torch_peer(op: str, chain, compile_seconds: dict | None = None, name: str = ""):
    """A ladder peer factory running ``chain`` (torch tensors in, tensors out) on a case's inputs. It returns
    the torch tensors as they come: the ladder views them as CuPy arrays only in its check, after timing,
    so no conversion's host cost lands inside a short peer's timed call. With ``compile_seconds`` (a dict)
    the chain runs under torch.compile (dynamic=False: this one shape), compiled by a first call outside
    the timing, its seconds recorded."""
    def factory(case):
        import time

        import torch
        fn, ts = chain, torch_inputs(op, case)
        if compile_seconds is not None:
            fn = torch.compile(chain, dynamic=False)
            t0 = time.perf_counter()
            fn(*ts)
            torch.cuda.synchronize()
            compile_seconds[name or op] = time.perf_counter() - t0

        def run():
            return fn(*ts)
        return run
    return factory


def cupy_peer(op: str):
    """A ladder peer factory for the CuPy route of ``op``, writing into buffers of its own."""
    def factory(case):
        import cupy
        ins = case.args[:N_INPUTS[op]]
        outs = tuple(cupy.empty_like(case.args[i]) for i in case.outputs)
        extra = (cupy.empty(ins[0].shape[0], cupy.float32),) if op == "add_rmsnorm" else ()

        def run():
            CUPY_ROUTE[op](*ins, *outs, *extra)
            return outs if len(outs) > 1 else outs[0]
        return run
    return factory


def peers(op: str, compile_seconds: dict | None = None) -> dict:
    """The chapter's peers of ``op`` as ladder factories: the eager torch chain (and, for add_rmsnorm, torch's
    own rms_norm after the add), the same chain under torch.compile (compile seconds into ``compile_seconds``
    when given), and the CuPy route."""
    if op not in EAGER_CHAINS:
        raise ValueError(f"op: expected one of {list(EAGER_CHAINS)}, got {op!r}")
    out = {"torch.eager": torch_peer(op, EAGER_CHAINS[op])}
    if op == "add_rmsnorm":
        out["torch.add+F.rms_norm"] = torch_peer(op, add_then_rms_norm)
    out["torch.compile"] = torch_peer(op, EAGER_CHAINS[op], {} if compile_seconds is None else compile_seconds)
    out[CUPY_NAMES[op]] = cupy_peer(op)
    return out


# --- the chapter's experiments: ladders, ledger tables, issue counts, the GEMM + epilogue, the summary -----
# The notebook makes one call per experiment and keeps its glue and expect lines; the loops, lookups and
# table formatting live here. A ladder has one shape and dtype (bf16) per op.

DTYPE = "bfloat16"
OP_TAG = {"bias_gelu": "bg", "swiglu": "sw", "add_rmsnorm": "rms", "rope": "rope"}     # short glue names
IMPL_TAG = {"torch.eager": "eager", "torch.compile": "compile", "cupy.ElementwiseKernel": "cupy",
            "cupy.ReductionKernel+ElementwiseKernel": "cupy", "torch.add+F.rms_norm": "rmsop"}


def ladder(rec, op: str, shape, odd_shapes=(), seed: int = 0, compile_seconds: dict | None = None,
           bench: dict | None = None):
    """The chapter's :class:`utils.ladder.Ladder` for ``op``: its registry, ``shape`` in bf16, the odd
    shapes every version is checked on first, the peers (torch.compile's first-call seconds into
    ``compile_seconds``), inputs, reference and cost model from :func:`ladder_inputs`."""
    from utils.ladder import Ladder
    if op not in REGISTRIES:
        raise ValueError(f"op: expected one of {list(REGISTRIES)}, got {op!r}")
    return Ladder(rec, REGISTRIES[op], shapes=[tuple(shape)], dtypes=[DTYPE], odd_shapes=odd_shapes,
                  peers=peers(op, compile_seconds), seed=seed, bench=bench, **ladder_inputs(op))


def ledger_table(op: str, shape):
    """The eager chain of ``op`` at ``shape``, one row per torch kernel (MiB read and written); the caption
    gives the totals and the predicted speedup of fusion (chain bytes / fused bytes)."""
    from utils.table import Table
    lg = LEDGERS[op](*shape)
    return Table(["op", "read (MiB)", "written (MiB)"],
                 [(name, f"{r / 2**20:.1f}", f"{w / 2**20:.1f}") for name, r, w in lg["chain"]],
                 caption=f"{op}: eager chain of {len(lg['chain'])} kernels, {chain_bytes(lg) / 2**20:.0f} MiB; "
                         f"fused {lg['fused'] / 2**20:.0f} MiB -> predicted speedup {predicted_speedup(lg):.2f}x")


def copy_floor_us(op: str, shape, copy_gbps: float) -> tuple[float, float]:
    """(fused, chain): µs to move the fused kernel's minimal bytes and the eager chain's bytes at the copy
    rate (GB/s, read + written)."""
    lg = LEDGERS[op](*shape)
    return lg["fused"] / (copy_gbps * 1e9) * 1e6, chain_bytes(lg) / (copy_gbps * 1e9) * 1e6


def floor_table(shapes: dict, copy_gbps: float):
    """Per op ({op: shape}): the floor at the copy rate on the fused bytes and on the eager chain's."""
    from utils.table import Table
    rows = [(op, *(f"{t:.1f}" for t in copy_floor_us(op, shape, copy_gbps))) for op, shape in shapes.items()]
    return Table(["op", "floor at the copy rate (µs, fused bytes)", "eager chain at the copy rate (µs)"], rows,
                 caption=f"device-to-device copy: {copy_gbps:.0f} GB/s")


def time_peers(lad, compile_seconds: dict) -> None:
    """Time the ladder's peers (torch.compile compiles on its first call, outside the timing) and print
    the seconds that compile took."""
    lad.time_peers()
    print(f"torch.compile: first call (compile) {compile_seconds[lad.registry.op]:.1f} s")


def fractions(lad, impls=None) -> dict:
    """{impl: fraction of copy} on the ladder's shape, for the versions and peers timed so far (or ``impls``)."""
    shape = lad.shapes[0]
    names = list(impls) if impls is not None else [*lad.registry, *lad.peers]
    out = {i: lad.fraction_of_copy(i, shape, DTYPE) for i in names}
    return {k: v for k, v in out.items() if v is not None}


def ratio(lad, impl: str, over: str) -> float:
    """metric(impl) / metric(over) on the ladder's shape, same run (the speedup of ``impl``)."""
    r = lad.ratio(impl, over, lad.shapes[0], DTYPE)
    if r is None:
        raise KeyError(f"{lad.registry.op}: {impl} or {over} was not timed in this run")
    return r


def times_us(lad, *impls) -> tuple[float, ...]:
    """The median µs of each of ``impls`` on the ladder's shape."""
    out = []
    for impl in impls:
        e = lad.entry(impl, lad.shapes[0], DTYPE)
        if e is None:
            raise KeyError(f"{lad.registry.op}: {impl} was not timed in this run")
        out.append(e["ms"] * 1e3)
    return tuple(out)


def impl_figures(lad, impls) -> dict:
    """{glue name: (value, format)} of each implementation in ``impls`` that was timed: its fraction of
    copy, µs, and speedups over the eager chain and torch.compile, named ``<op tag>-<impl tag>-frac`` etc.
    (``bg-v1_vec8-frac``, ``rms-eager-us``)."""
    shape, op = lad.shapes[0], lad.registry.op
    out = {}
    for impl in impls:
        e = lad.entry(impl, shape, DTYPE)
        if e is None:
            continue
        key = f"{OP_TAG[op]}-{IMPL_TAG.get(impl, impl)}"
        out[key + "-frac"] = (lad.fraction_of_copy(impl, shape, DTYPE), "{:.1%}")
        out[key + "-us"] = (e["ms"] * 1e3, "{:.1f}")
        out[key + "-x-eager"] = (lad.ratio(impl, "torch.eager", shape, DTYPE), "{:.2f}")
        out[key + "-x-compile"] = (lad.ratio(impl, "torch.compile", shape, DTYPE), "{:.2f}")
    return out


def range_verdict(frac: float, lo: float, hi: float, slack: float = 0.05) -> str:
    """The prose's verdict (Chinese) on a measured fraction of copy against a predicted range [lo, hi]."""
    if lo <= frac <= hi:
        return "落在预测之内"
    if frac > hi:
        return "略高于预测的上沿"
    return "略低于预测的下沿" if frac >= lo - slack else "远低于预测"


# --- instruction issue: SASS per element, registers, bytes in flight (bias + GELU) --------------------------

def sass_per_element(kernels) -> dict:
    """{kernel: SASS instructions per element after its last 16-byte load} (see
    :func:`sass_instructions_per_element`); empty, with one line printed, where cuobjdump is missing."""
    from utils.build import sass
    try:
        return {k: sass_instructions_per_element(sass(SOURCE, k)) for k in kernels}
    except FileNotFoundError as exc:                                      # no cuobjdump on this host
        print(f"SASS not available here ({exc}); skipping the count")
        return {}


def issue_table(per_element: dict, lane_instr_per_s: float, n_elems: int):
    """Per kernel: SASS per element, per byte moved (4 bytes per output element, 6 for swiglu), and the
    µs that issuing them takes for ``n_elems`` elements at ``lane_instr_per_s``."""
    from utils.table import Table
    rows = []
    for kname, ipe in per_element.items():
        nbytes = 6 if kname.startswith("swiglu") else 4                  # bytes moved per output element
        rows.append((kname, f"{ipe:.1f}", f"{ipe / nbytes:.1f}", f"{n_elems * ipe / lane_instr_per_s * 1e6:.0f}"))
    return Table(["kernel", "SASS per element", "per byte moved", "issue alone (µs)"], rows,
                 caption=f"at {lane_instr_per_s / 1e12:.1f} T lane-instructions/s, {n_elems / 1e6:.1f} M elements")


@dataclasses.dataclass
class IssueReport:
    """{label: (SASS per element, KB of x in flight per SM)} per bias + GELU instance, and the table."""
    figures: dict
    table: Any


def bias_gelu_issue(erf_rows, lane_instr_per_s: float, n_elems: int, facts=None) -> IssueReport:
    """bias + GELU v1, v2, v3's layout with erf GELU (config ``erf_rows``, shown as ``v3_erf_rows4``) and v3:
    SASS per element from the first 16-byte load to the last store (nan without cuobjdump), the µs that
    issue takes for ``n_elems``, ptxas registers, blocks per SM and KB of x requested per SM before any math."""
    from utils.build import sass
    from utils.occupancy import from_function
    from utils.table import Table
    kernels = {"v1_vec8": "bias_gelu_v1_vec8", "v2_poly": "bias_gelu_v2_poly",
               f"v3_erf_rows{erf_rows.rows}": BIAS_GELU_ROWS_KERNELS[erf_rows],
               "v3_rows": BIAS_GELU_ROWS_KERNELS[BIAS_GELU_V3]}
    elems = dict(zip(kernels, (8 * UNROLL, 8 * UNROLL, 8 * erf_rows.rows, 8 * BIAS_GELU_V3.rows)))  # per thread
    rep = SOURCE.ptxas()
    rows, figures = [], {}
    for label, kname in kernels.items():
        try:
            ipe = sass_span_per_element(sass(SOURCE, kname), elems[label])
        except FileNotFoundError:                                         # no cuobjdump on this host
            ipe = float("nan")
        blocks = from_function(rep[kname], THREADS, 0, facts).blocks
        in_flight = blocks * THREADS * elems[label] * 2 / 1024          # KB of x requested before any math, per SM
        rows.append((label, f"{ipe:.1f}", f"{n_elems * ipe / lane_instr_per_s * 1e6:.0f}", rep[kname]["registers"],
                     blocks, f"{in_flight:.0f}"))
        figures[label] = (ipe, in_flight)
    return IssueReport(figures, Table(["version", "SASS per element (first load to last store)", "issue alone (us)",
                                       "registers", "blocks per SM", "KB of x in flight per SM"], rows))


@dataclasses.dataclass
class RegisterReport:
    """Threads per block and blocks per SM of every kernel the chapter times, and the table."""
    threads: dict
    blocks: dict
    table: Any


def register_report(ladders: dict, facts=None) -> RegisterReport:
    """Each version of each op ({op: ladder}) planned on its ladder's timing case: the kernel it launches,
    ptxas registers, threads per block, and the blocks per SM and limiter utils.occupancy derives."""
    from utils.occupancy import from_function
    from utils.table import Table
    rep = SOURCE.ptxas()
    threads = {}                                  # kernel -> threads per block at the chapter's shapes
    for op, lad in ladders.items():
        case = lad.case(lad.shapes[0], DTYPE)[0]
        for v in REGISTRIES[op].values():
            (ln,) = v.launches(v.validate(*case.args))
            threads[ln.kernel] = ln.threads
    rows, blocks = [], {}
    for kname, t in threads.items():
        occ = from_function(rep[kname], t, 0, facts)
        blocks[kname] = occ.blocks
        rows.append((kname, rep[kname]["registers"], t, occ.blocks, f"{occ.occupancy_fraction:.0%}", occ.limiter))
    return RegisterReport(threads, blocks, Table(["kernel", "registers", "threads per block", "blocks per SM",
                                                  "warp slots used", "limited by"], rows))


# --- 8.7: bias + GELU after the GEMM that feeds it ----------------------------------------------------------

MLP_IMPLS = ("cupy.matmul", "cupy.matmul+bias_gelu_v3", "torch.matmul+add+gelu")


@dataclasses.dataclass
class MlpUp:
    """µs per implementation (MLP_IMPLS), the GEMM's TFLOP/s, and the table."""
    us: dict
    tflops: float
    table: Any


def time_mlp_up(rec, M: int, N: int, K: int, seed: int = 88) -> MlpUp:
    """Time, as op ``mlp_up`` in the record, an [M, K] x [K, N] bf16 GEMM (cupy.matmul: cuBLAS) alone, then
    followed by bias_gelu_v3 as a separate kernel, and torch's matmul + add + gelu; each checked (64 rows of
    the GEMM against an fp32 product, the epilogues against the float64 reference of the GEMM's output).
    The operands are freed before it returns."""
    import cupy

    from utils.table import Table
    _record_mlp_up(rec, M, N, K, seed)          # its arrays die with it
    cupy.get_default_memory_pool().free_all_blocks()
    us = {impl: rec.get("mlp_up", impl)["ms"] * 1e3 for impl in MLP_IMPLS}
    t_gemm = us["cupy.matmul"]
    rows = [(k, f"{v:.1f}", f"+{v / t_gemm - 1:.0%}") for k, v in us.items()]
    return MlpUp(us, rec.get("mlp_up", "cupy.matmul")["metric"], Table(["impl", "us", "over GEMM alone"], rows))


def _record_mlp_up(rec, M: int, N: int, K: int, seed: int) -> None:
    import cupy
    import torch
    import torch.nn.functional as TF

    from utils.arrays import as_torch, from_torch, random_normal
    from utils.check import assert_close, poisoned
    rng = np.random.default_rng(seed)
    a_m, w_m, bias = (random_normal(s, "bfloat16", seed=int(rng.integers(2**31)))[0] for s in ((M, K), (K, N), (N,)))
    c_m, y_m = cupy.empty((M, N), BF16), poisoned((M, N), BF16)
    at, wt, bt = as_torch(a_m), as_torch(w_m), as_torch(bias)
    epilogue = BIAS_GELU["v3_rows"].bind(c_m, bias, y_m)
    out = {}

    def check_gemm():
        rows = slice(0, 64)                          # 64 rows of C against an fp32 product
        assert_close(c_m[rows], a_m[rows].astype(cupy.float32) @ w_m.astype(cupy.float32), dtype="bfloat16",
                     name="cupy.matmul")

    def gemm_then_fused():
        cupy.matmul(a_m, w_m, out=c_m)
        epilogue()

    def gemm_then_eager():
        out["y"] = TF.gelu(torch.matmul(at, wt) + bt)

    cost = {"dtype": "bfloat16", "shape": (M, N, K), "flops": 2.0 * M * N * K, "nbytes": 2 * (M * K + K * N + M * N)}
    rec.time("mlp_up", "cupy.matmul", lambda: cupy.matmul(a_m, w_m, out=c_m), is_peer=True, check=check_gemm, **cost)
    rec.time("mlp_up", "torch.matmul+add+gelu", gemm_then_eager, is_peer=True, **cost,
             check=lambda: assert_close(from_torch(out["y"]), reference_bias_gelu(c_m, bias), dtype="bfloat16",
                                        name="torch matmul + add + gelu"))
    rec.time("mlp_up", "cupy.matmul+bias_gelu_v3", gemm_then_fused, **cost,
             check=lambda: assert_close(y_m, reference_bias_gelu(c_m, bias), dtype="bfloat16", name="matmul + v3"))


# --- 8.8: every op's fastest version against the chapter's lines -------------------------------------------

@dataclasses.dataclass
class Summary:
    """Per op: ``best`` (the fastest version), ``frac`` (of copy), ``ratio`` (measured speedup over eager /
    the ledger's), ``vc`` (over torch.compile), ``excess`` (µs above the copy floor); and the table."""
    verdict: dict
    table: Any


def summary(ladders: dict, copy_gbps: float, compile_seconds: dict) -> Summary:
    """Each op's fastest version ({op: ladder}) beside the ledger's prediction, the eager chain,
    torch.compile and the CuPy route, and its µs above the copy floor of its fused bytes."""
    from utils.table import Table
    rows, verdict = [], {}
    for op, lad in ladders.items():
        shape = lad.shapes[0]
        best = lad.best(shape, DTYPE)
        pred = predicted_speedup(LEDGERS[op](*shape))
        frac = lad.fraction_of_copy(best, shape, DTYPE)
        sp, vc = ratio(lad, best, "torch.eager"), ratio(lad, best, "torch.compile")
        excess = lad.entry(best, shape, DTYPE)["ms"] * 1e3 - copy_floor_us(op, shape, copy_gbps)[0]
        verdict[op] = {"best": best, "frac": frac, "ratio": sp / pred, "vc": vc, "excess": excess}
        rows.append((op, best, f"{frac:.1%}", f"{pred:.2f}x", f"{sp:.2f}x", f"{sp / pred:.2f}", f"{vc:.2f}x",
                     f"{ratio(lad, best, CUPY_NAMES[op]):.2f}x", f"{excess:.1f}", f"{compile_seconds[op]:.1f} s"))
    return Summary(verdict, Table(["op", "ours (fastest)", "of copy", "predicted speedup over eager", "measured",
                                   "measured / predicted", "vs torch.compile", "vs CuPy", "us over the copy floor",
                                   "torch.compile compile time"], rows))


def plot_ladders(ladders: dict):
    """Every op's ladder (one shape each) as one panel of a column-wide figure, one row per op."""
    from utils.plot import figure
    sizes = [len(lad.registry) + len(lad.peers) for lad in ladders.values()]
    heights = [0.19 * n + 0.9 for n in sizes]
    fig, axes = figure(len(ladders), 1, height=sum(heights) / len(heights),
                       gridspec_kw={"height_ratios": heights})
    for ax, (op, lad) in zip(axes[:, 0], ladders.items()):
        lad.plot(ax=ax, title=op)
    fig.suptitle("% of copy, on each fused kernel's minimal bytes")
    return fig
