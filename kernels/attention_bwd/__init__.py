"""FlashAttention-2 backward, chapter 16: op ``attn_bwd``, one version ladder.

Given the forward's inputs and results and the gradient of the output, every version computes the gradients of
q, k and v. Arguments ``(q, k, v, out, lse, dout, dq, dk, dv)`` and the keywords ``causal=False, scale=None``:

- ``q, k, v, out, lse``: exactly what :data:`kernels.attention.ATTN_FWD` takes and writes (same shapes, dtypes and
  rules: ``D`` in ``HEAD_DIMS``, GQA, bottom-right causal masking, ``Sq != Sk``; ``lse`` the natural log, -inf for a
  row that sees no key). They are validated by the forward's own ``problem`` function.
- ``dout`` and ``dq [B, Hq, Sq, D]``, ``dk`` and ``dv [B, Hkv, Sk, D]``: bf16, C-contiguous, on the same GPU. dK and
  dV of a key/value head are summed over the query heads of its GQA group. Rows that see no key contribute nothing
  and get ``dq = 0``.

With ``S = scale q k^T`` (masked), ``P = exp(S - lse)``, ``dP = dout v^T``, ``delta = rowsum(dout o out)`` and
``dS = P o (dP - delta)``: ``dv = P^T dout``, ``dq = scale dS k``, ``dk = scale dS^T q`` (Dao 2023, Algorithm 2).

Versions (``// [[snippet: attn_bwd_vN]]``): v0 ``atomic_dq``, a block per key tile walking the query tiles (dK, dV in
registers) and adding dQ with atomics into an fp32 workspace; v1 ``deterministic``, the same dK/dV kernel plus a
query-tile kernel that recomputes P and dS to build dQ in registers, bit-reproducible. Both start with
``attn_bwd_preprocess`` (delta and lse in base 2 per row). Importing this package never needs a GPU.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from kernels import attention as fwd
from utils.arrays import bf16, ceil_div
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.paths import KERNELS
from utils.version import Launch, Registry, Version, Workspace, config_type

HEAD_DIMS = fwd.HEAD_DIMS
ROW_PAD = 128                    # lse/delta workspaces hold whole tiles of up to 128 query rows (padding: +inf, 0)
PREP_THREADS = 256               # attn_bwd_preprocess: 8 threads a row, 32 rows a block
CONVERT_THREADS = 256            # attn_bwd_dq_convert: 8 elements a thread
BWD_FLOPS_PER_FWD = 2.5          # five products against the forward's two (flash-attention's count)

_INCLUDES = (str(KERNELS / "attention"),)

# The key-tile kernel's shape: BN keys a block (16 a warp: BN / 16 warps), BM query rows a step.
Tile = config_type("Tile", "bn bm")
TILES = {64: (Tile(128, 128), Tile(128, 64), Tile(64, 64)), 128: (Tile(128, 64), Tile(64, 64))}
DEFAULT_TILE = {64: Tile(128, 128), 128: Tile(128, 64)}   # the best of the sweep at 4k (chapter 16, H200)
# v1's query-tile kernel: 64 mt query rows a block (4 warps, mt m16 tiles each), bc keys a K/V tile.
DqTile = config_type("DqTile", "mt bc")
DQ_TILE = {64: DqTile(2, 32), 128: DqTile(1, 64)}


def prep_kernel(D: int, zero_dq: bool) -> str:
    return f"attn_bwd_preprocess<{D}, {'true' if zero_dq else 'false'}>"


def dkdv_kernel(D: int, tile: Tile, atomic_dq: bool) -> str:
    return f"attn_bwd_dkdv<{D}, {tile.bn}, {tile.bm}, {'true' if atomic_dq else 'false'}>"


def dq_kernel(D: int, tile: DqTile) -> str:
    return f"attn_bwd_dq<{D}, {tile.mt}, {tile.bc}>"


PREP_SOURCE = KernelSource("attention_bwd/preprocess.cu", include_dirs=_INCLUDES,
                           name_expressions=tuple(prep_kernel(d, z) for d in HEAD_DIMS for z in (True, False)))
# Not spill-free: at D = 128 dK and dV hold 128 registers a thread beside S^T and dP^T (64), and ptxas spills 8-16
# bytes at its 255-register limit (at D = 64 only the 128 x 128 tile does); every D = 64 default is spill-free.
V0_SOURCE = KernelSource("attention_bwd/v00_atomic_dq.cu", requires=("bf16-mma", "cp.async"), include_dirs=_INCLUDES,
                         spill_free=False,
                         name_expressions=tuple(dkdv_kernel(d, t, a) for d in HEAD_DIMS for t in TILES[d]
                                                for a in (True, False)))
V1_SOURCE = KernelSource("attention_bwd/v01_deterministic.cu", requires=("bf16-mma", "cp.async"),
                         include_dirs=_INCLUDES, name_expressions=tuple(dq_kernel(d, DQ_TILE[d]) for d in HEAD_DIMS))


@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated backward problem: the forward's (``fwd``: q, k, v, out, lse and the sizes) plus the gradients."""
    fwd: fwd.Problem
    dout: object
    dq: object
    dk: object
    dv: object

    B = property(lambda self: self.fwd.B)
    Hq = property(lambda self: self.fwd.Hq)
    Hkv = property(lambda self: self.fwd.Hkv)
    Sq = property(lambda self: self.fwd.Sq)
    Sk = property(lambda self: self.fwd.Sk)
    D = property(lambda self: self.fwd.D)
    causal = property(lambda self: self.fwd.causal)
    scale = property(lambda self: self.fwd.scale)

    @property
    def out(self):
        """What the op writes, (dq, dk, dv): what calling a version returns (the forward's out is ``fwd.out``)."""
        return self.dq, self.dk, self.dv

    @property
    def Sq_pad(self) -> int:
        return ceil_div(self.Sq, ROW_PAD) * ROW_PAD


def problem(q, k, v, out, lse, dout, dq, dk, dv, *, causal=False, scale=None) -> Problem:
    """Validate the arguments (module docstring): the forward's through its own problem function, then the
    gradients against them."""
    try:
        f = fwd.problem(q, k, v, out, lse, causal=causal, scale=scale)
    except ValueError as e:                      # same rules, this op's name
        raise ValueError(str(e).replace("attn_fwd:", "attn_bwd:", 1)) from None
    expect_array(dout, "dout", dtype=bf16(), shape=(f.B, f.Hq, f.Sq, f.D))
    expect_array(dq, "dq", dtype=bf16(), shape=(f.B, f.Hq, f.Sq, f.D))
    expect_array(dk, "dk", dtype=bf16(), shape=(f.B, f.Hkv, f.Sk, f.D))
    expect_array(dv, "dv", dtype=bf16(), shape=(f.B, f.Hkv, f.Sk, f.D))
    expect_same_device(q, dout, dq, dk, dv)
    return Problem(f, dout, dq, dk, dv)


class VarlenProblem(Problem):
    """A validated varlen backward problem: ``fwd`` is the forward's :class:`kernels.attention.VarlenProblem` (q, out,
    dout, dq packed [Tq, Hq, D]; k, v, dk, dv [Tk, Hkv, D]; lse [Hq, Tq]; the offsets). Sq and Sk are the longest
    sequences: what the grids and the row workspaces cover; each block reads its own lengths from the offsets."""
    Sq = property(lambda self: max(1, *self.fwd.seqlens_q))
    Sk = property(lambda self: max(1, *self.fwd.seqlens_k))


def varlen_problem(q, k, v, out, lse, dout, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, *, causal=False,
                   scale=None) -> VarlenProblem:
    """Validate a varlen backward call: the forward's varlen arguments (kernels.attention.varlen_problem, offsets
    read once on the host), then dout and dq shaped as q, dk and dv as k."""
    try:
        f = fwd.varlen_problem(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal=causal, scale=scale)
    except ValueError as e:                      # same rules, this op's name
        raise ValueError(str(e).replace("attn_fwd_varlen:", "attn_bwd_varlen:", 1)) from None
    Tq, Tk = int(q.shape[0]), int(k.shape[0])
    expect_array(dout, "dout", dtype=bf16(), shape=(Tq, f.Hq, f.D))
    expect_array(dq, "dq", dtype=bf16(), shape=(Tq, f.Hq, f.D))
    expect_array(dk, "dk", dtype=bf16(), shape=(Tk, f.Hkv, f.D))
    expect_array(dv, "dv", dtype=bf16(), shape=(Tk, f.Hkv, f.D))
    expect_same_device(q, dout, dq, dk, dv)
    return VarlenProblem(f, dout, dq, dk, dv)


# --- the reference and the cost model ------------------------------------------------------------------

def reference_grads(q, k, v, dout, causal: bool = False, scale: float | None = None):
    """(dq, dk, dv) in float64 from bf16 (or any float) inputs, NumPy or CuPy as the inputs: the module docstring's
    formulas with P from the exact softmax (rows that see no key: P = 0). One (batch, query head) at a time, so that
    the [Sq, Sk] intermediates of long sequences fit."""
    xp = array_module(q)
    B, Hq, Sq, D = (int(s) for s in q.shape)
    Hkv, Sk = int(k.shape[1]), int(k.shape[2])
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    seen = xp.asarray(fwd.visible_keys(Sq, Sk, causal))
    mask = xp.arange(Sk)[None, :] < seen[:, None]                         # [Sq, Sk]
    dq = xp.zeros((B, Hq, Sq, D))
    dk, dv = xp.zeros((B, Hkv, Sk, D)), xp.zeros((B, Hkv, Sk, D))
    for b in range(B):
        for h in range(Hq):
            qf, df = q[b, h].astype(xp.float64), dout[b, h].astype(xp.float64)
            kf, vf = k[b, h // group].astype(xp.float64), v[b, h // group].astype(xp.float64)
            s = xp.where(mask, scale * (qf @ kf.T), -xp.inf)
            m = s.max(axis=1, keepdims=True)
            p = xp.exp(s - xp.where(xp.isfinite(m), m, 0.0))
            l = p.sum(axis=1, keepdims=True)
            p = p / xp.where(l > 0, l, 1.0)                               # rows that see no key: all 0
            dp = df @ vf.T
            ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))          # rowsum(P o dP) = rowsum(dO o O)
            dq[b, h] = scale * (ds @ kf)
            dk[b, h // group] += scale * (ds.T @ qf)
            dv[b, h // group] += p.T @ df
    return dq, dk, dv


def varlen_reference_grads(q, k, v, dout, cu_seqlens_q, cu_seqlens_k, causal: bool = False,
                           scale: float | None = None):
    """(dq [Tq, Hq, D], dk, dv [Tk, Hkv, D]) in float64: :func:`reference_grads` on each sequence of the packed
    batch (a sequence without queries leaves its keys' gradients 0, one without keys its queries')."""
    xp = array_module(q)
    cq, ck = (np.asarray(c.get() if hasattr(c, "get") else c) for c in (cu_seqlens_q, cu_seqlens_k))
    dq, dk, dv = xp.zeros(q.shape), xp.zeros(k.shape), xp.zeros(k.shape)
    heads = lambda a, s: a[s].transpose(1, 0, 2)[None]              # noqa: E731 - [S, H, D] -> [1, H, S, D]
    for b in range(cq.size - 1):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        if qs.start == qs.stop or ks.start == ks.stop:
            continue
        g = reference_grads(heads(q, qs), heads(k, ks), heads(v, ks), heads(dout, qs), causal, scale)
        dq[qs], dk[ks], dv[ks] = (x[0].transpose(1, 0, 2) for x in g)
    return dq, dk, dv


def flops(B: int, Hq: int, Sq: int, Sk: int, D: int, causal: bool) -> float:
    """2.5 times the forward's: five products (S, dP, dV, dK, dQ) against two, as flash-attention counts (v1's
    recomputation of S and dP is not counted: it is the version's cost, not the op's)."""
    return BWD_FLOPS_PER_FWD * fwd.flops(B, Hq, Sq, Sk, D, causal)


# --- the plans -----------------------------------------------------------------------------------------

NULL = np.uint64(0)              # a null pointer argument: a dense batch has no sequence offsets


def size_args(p: Problem) -> tuple:
    """The sizes and scales every backward kernel takes after its pointers: the forward's convention
    (Hq, Hkv, Sq, Sk, causal, scale, scale_log2), the padded row count of the lse/delta workspaces, then where the
    sequences start (:func:`seq_args`)."""
    return (np.int32(p.Hq), np.int32(p.Hkv), np.int32(p.Sq), np.int32(p.Sk), np.int32(p.causal),
            np.float32(p.scale), np.float32(p.scale * fwd.LOG2E), np.int32(p.Sq_pad), *seq_args(p))


def seq_args(p: Problem) -> tuple:
    """(cu_q, cu_k, Tq, Tk): a varlen batch's offsets and packed lengths; null pointers for a dense batch, which
    the kernels take as "B sequences of Sq and Sk"."""
    if isinstance(p, VarlenProblem):
        return p.fwd.cu_q, p.fwd.cu_k, np.int32(p.fwd.q.shape[0]), np.int32(p.fwd.k.shape[0])
    return NULL, NULL, np.int32(0), np.int32(0)


def row_workspaces(p: Problem) -> tuple[Workspace, Workspace]:
    """(lse_log2, delta): [B, Hq, Sq_pad] float32, written whole by attn_bwd_preprocess."""
    return Workspace((p.B, p.Hq, p.Sq_pad), np.float32), Workspace((p.B, p.Hq, p.Sq_pad), np.float32)


def prep_launch(p: Problem, lse_log2, delta, dq_accum) -> Launch:
    """attn_bwd_preprocess over B Hq Sq_pad rows (a whole number of 32-row blocks); dq_accum None: no zeroing (the
    delta workspace stands in for the unused pointer)."""
    rows = p.B * p.Hq * p.Sq_pad
    return Launch(prep_kernel(p.D, dq_accum is not None), (rows // 32, 1, 1), (PREP_THREADS, 1, 1),
                  (p.fwd.out, p.dout, p.fwd.lse, lse_log2, delta, delta if dq_accum is None else dq_accum,
                   np.int32(p.Sq), np.int32(p.Sq_pad), seq_args(p)[0], np.int32(p.Hq), seq_args(p)[2]),
                  source=PREP_SOURCE)


def dkdv_smem(D: int, tile: Tile, atomic_dq: bool) -> int:
    """K, V; two stages of Q, dO, lse and delta; with atomic dQ, dS^T [BN][BM] bf16."""
    return (2 * tile.bn + 4 * tile.bm) * D * 2 + 16 * tile.bm + (tile.bn * tile.bm * 2 if atomic_dq else 0)


def dkdv_launch(p: Problem, tile: Tile, lse_log2, delta, dq_accum) -> Launch:
    atomic = dq_accum is not None
    return Launch(dkdv_kernel(p.D, tile, atomic), (ceil_div(p.Sk, tile.bn), p.Hkv, p.B), (2 * tile.bn, 1, 1),
                  (p.fwd.q, p.fwd.k, p.fwd.v, p.dout, lse_log2, delta, dq_accum if atomic else delta, p.dk, p.dv,
                   *size_args(p)), smem=dkdv_smem(p.D, tile, atomic), source=V0_SOURCE)


def dq_smem(D: int, tile: DqTile) -> int:
    """Q and dO rows, two stages of K and V."""
    return (2 * 64 * tile.mt + 4 * tile.bc) * D * 2


def plan_v0(p: Problem, config: Tile) -> list[Launch]:
    lse_log2, delta = row_workspaces(p)
    dq_accum = Workspace(tuple(p.dq.shape), np.float32)           # dq's layout; zeroed by the preprocess launch
    n8 = int(np.prod(p.dq.shape)) // 8
    return [prep_launch(p, lse_log2, delta, dq_accum),
            dkdv_launch(p, config, lse_log2, delta, dq_accum),
            Launch("attn_bwd_dq_convert", (ceil_div(n8, CONVERT_THREADS), 1, 1), (CONVERT_THREADS, 1, 1),
                   (dq_accum, p.dq, np.int64(n8), np.float32(p.scale)), source=PREP_SOURCE)]


def plan_v1(p: Problem, config: Tile) -> list[Launch]:
    lse_log2, delta = row_workspaces(p)
    dqt = DQ_TILE[p.D]
    return [prep_launch(p, lse_log2, delta, None),
            dkdv_launch(p, config, lse_log2, delta, None),
            Launch(dq_kernel(p.D, dqt), (ceil_div(p.Sq, 64 * dqt.mt), p.Hq, p.B), (128, 1, 1),
                   (p.fwd.q, p.fwd.k, p.fwd.v, p.dout, lse_log2, delta, p.dq, *size_args(p)),
                   smem=dq_smem(p.D, dqt), source=V1_SOURCE)]


def _tiles(p):
    return TILES[p.D] if p is not None else tuple(t for d in HEAD_DIMS for t in TILES[d])


ATTN_BWD = Registry("attn_bwd", problem, [
    Version("attn_bwd_v0_atomic_dq", "a block per key tile of one kv head walks the query tiles of its GQA group "
            "that see it: S^T, P^T and dS^T recomputed in registers, dK and dV accumulated in registers, dQ added "
            "into an fp32 workspace with atomics (bf16 at the end)", V0_SOURCE, plan_v0, snippet="attn_bwd_v0",
            configs=_tiles, default=lambda p: DEFAULT_TILE[p.D]),
    Version("attn_bwd_v1_deterministic", "v0's dK/dV kernel without atomics, plus a query-tile kernel that "
            "recomputes P and dS and keeps dQ in registers: bit-reproducible, two more products per pair",
            V1_SOURCE, plan_v1, parent="v0_atomic_dq", snippet="attn_bwd_v1", configs=_tiles,
            default=lambda p: DEFAULT_TILE[p.D]),
])


ATTN_BWD_VARLEN = Registry("attn_bwd_varlen", varlen_problem, [
    Version("attn_bwd_varlen_v0_atomic_dq", "v0 over a packed batch of sequences of different lengths: the same "
            "kernels, the offsets locating each block's rows, the grids covering the longest sequence", V0_SOURCE,
            plan_v0, snippet="attn_bwd_v0", configs=_tiles, default=lambda p: DEFAULT_TILE[p.D]),
    Version("attn_bwd_varlen_v1_deterministic", "v1 over a packed batch: bit-reproducible dQ per sequence",
            V1_SOURCE, plan_v1, parent="v0_atomic_dq", snippet="attn_bwd_v1", configs=_tiles,
            default=lambda p: DEFAULT_TILE[p.D]),
])
