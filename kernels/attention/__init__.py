"""FlashAttention forward, chapter 15: op ``attn_fwd``, one version ladder.

``out = softmax(scale q k^T + mask) v`` per (batch, query head), and ``lse`` the natural log of each row's sum of
``e^{scale s}`` (what the backward pass recomputes P from). Every version takes ``(q, k, v, out, lse)`` and the
keywords ``causal=False, scale=None`` (None: ``1 / sqrt(D)``):

- ``q [B, Hq, Sq, D]``, ``k`` and ``v [B, Hkv, Sk, D]``, ``out [B, Hq, Sq, D]``: bf16, C-contiguous, on one GPU;
  ``lse [B, Hq, Sq]`` float32. ``Hq`` a multiple of ``Hkv``: query head ``h`` reads key/value head
  ``h // (Hq // Hkv)`` (GQA; MQA is ``Hkv = 1``). ``D`` one of :data:`HEAD_DIMS`. ``Sq`` and ``Sk`` any sizes >= 1,
  and they may differ.
- **Causal masking is bottom-right aligned**, as FlashAttention >= 2.1 does: query ``i`` sees keys
  ``j <= i + Sk - Sq``. With ``Sq == Sk`` that is the usual lower triangle; with ``Sq = 1`` (decode) the one
  query sees every key. A row that sees no key (``i + Sk - Sq < 0``) gets ``out = 0`` and ``lse = -inf``.

Versions (one .cu file each, ``// [[snippet: attn_fwd_vN]]``): v0 ``scalar``, the tiled online-softmax algorithm on
CUDA cores, one thread per query row; v1 ``mma``, both products on mma.sync with S and P in registers
(fa2_common.cuh holds what the tensor-core versions share); v2 ``pipeline``, cp.async into swizzled shared memory,
ldmatrix, K and V double-buffered; v3 ``edge_mask``, the same kernel masking only the tiles that need it; v4 ``tuned``,
128 query rows a block (two m16 tiles a warp), lane offsets computed once, tiles per head dimension (:data:`V4_TILES`).
Importing this package never needs a GPU.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Version, config_type

HEAD_DIMS = (64, 128)
INDEX_LIMIT = 2**31              # elements of q, k, v, out: the kernels index with size_t, the grid with int
MAX_GRID_YZ = 65535              # gridDim.y (query heads) and gridDim.z (batch)
LOG2E = 1.4426950408889634

V0_BC = 32                       # v0: keys per staged tile
# v0's config: query rows per block, one a thread (chapter 14 varies it: K and V are read once per row block).
# Q's padded rows live in static shared memory, so 128 rows fit only at D = 64.
Rows = config_type("Rows", "br")
V0_ROWS = {64: tuple(Rows(br) for br in (16, 32, 64, 128)), 128: tuple(Rows(br) for br in (16, 32, 64))}
V0_DEFAULT = Rows(64)


def v0_kernel(D: int, rows) -> str:
    return f"attn_fwd_scalar<{D}, {rows.br}, {V0_BC}>"


V0_SOURCE = KernelSource("attention/v00_scalar.cu",
                         name_expressions=tuple(v0_kernel(d, r) for d in HEAD_DIMS for r in V0_ROWS[d]))
MMA_BR = 64                      # v1-v3: query rows per block (16 a warp, 4 warps): the kernels' BR
V1_BC = 64                       # v1: keys per staged tile
V1_SOURCE = KernelSource("attention/v01_mma.cu", requires=("bf16-mma",),
                         name_expressions=tuple(f"attn_fwd_mma<{d}, {V1_BC}>" for d in HEAD_DIMS))
V2_BC = {64: 64, 128: 32}         # v2: keys per tile, so that Q and two stages of K and V fit 48 KB of static smem
V2_SOURCE = KernelSource("attention/v02_pipeline.cu", requires=("bf16-mma", "cp.async"),
                         name_expressions=tuple(f"attn_fwd_pipeline<{d}, {V2_BC[d]}, {edge}>"
                                                for d in HEAD_DIMS for edge in ("false", "true")))

# chapter 14's standard attention (kernels/attention/io_aware.py): the causal fill between its two cuBLAS products.
# Declared here, where the compile checks look for every kernels module's sources.
FILL_SOURCE = KernelSource("attention/io_aware.cu")
V4_BR = 128                      # v4: query rows per block (two m16 tiles a warp, 4 warps)


# v4's tunable shape: keys per K/V tile, and whether Q's fragments stay in registers (D = 64 only)
Tile = config_type("Tile", "bc q_regs")

# Instantiated per head dimension: at D = 128 a warp's O alone is 128 registers, so Q cannot stay loaded.
V4_TILES = {64: tuple(Tile(bc, qr) for bc in (64, 128) for qr in (True, False)),
            128: (Tile(32, False), Tile(64, False), Tile(128, False))}
V4_DEFAULT = {64: Tile(64, True), 128: Tile(64, False)}   # the fastest in the H200 sweep (chapter 15)


def v4_kernel(D: int, tile: Tile) -> str:
    return f"attn_fwd_tuned<{D}, {tile.bc}, {'true' if tile.q_regs else 'false'}>"


# v4 fills all 255 registers: at D = 128 ptxas spills a few dozen bytes (chapter 15 times it against the tiles that do
# not spill; the spilling 128-key tile is kept as the sweep's counterexample), so this source is not spill-free.
V4_SOURCE = KernelSource("attention/v04_tuned.cu", requires=("bf16-mma", "cp.async"), spill_free=False,
                         name_expressions=tuple(v4_kernel(d, t) for d in HEAD_DIMS for t in V4_TILES[d]))


@dataclasses.dataclass(frozen=True)
class Problem:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    causal: bool
    scale: float
    q: object
    k: object
    v: object
    out: object
    lse: object


def check_sizes(B: int, Hq: int, Hkv: int, Sq: int, Sk: int, D: int) -> None:
    """The op's size rules (pure, tested on the CPU)."""
    if min(B, Hq, Hkv, Sq, Sk) < 1:
        raise ValueError(f"attn_fwd: batch, heads and sequence lengths must be >= 1, got B={B}, Hq={Hq}, "
                         f"Hkv={Hkv}, Sq={Sq}, Sk={Sk}")
    if D not in HEAD_DIMS:
        raise ValueError(f"attn_fwd: head dimension D = {D} is not one of {HEAD_DIMS}")
    if Hq % Hkv:
        raise ValueError(f"attn_fwd: query heads Hq = {Hq} must be a multiple of key/value heads Hkv = {Hkv} (GQA)")
    if max(B * Hq * Sq, B * Hkv * Sk) * D >= INDEX_LIMIT:
        raise ValueError(f"attn_fwd: q, k or v has {max(B * Hq * Sq, B * Hkv * Sk) * D:,} elements, at least "
                         f"2^31: split the batch")
    if Hq > MAX_GRID_YZ or B > MAX_GRID_YZ:
        raise ValueError(f"attn_fwd: at most {MAX_GRID_YZ} query heads and batch entries a launch, got Hq={Hq}, B={B}")


def qkv_sizes(q, k, v, out) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, Hkv, Sq, Sk, D) of bf16 C-contiguous q, out [B, Hq, Sq, D] and k, v [B, Hkv, Sk, D], checked
    against each other (the sizes themselves: :func:`check_sizes`)."""
    expect_array(q, "q", dtype=bf16(), ndim=4)
    B, Hq, Sq, D = (int(s) for s in q.shape)
    expect_array(k, "k", dtype=bf16(), ndim=4)
    if int(k.shape[0]) != B or int(k.shape[3]) != D:
        raise ValueError(f"k: expected shape ({B}, Hkv, Sk, {D}) to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    Hkv, Sk = int(k.shape[1]), int(k.shape[2])
    expect_array(v, "v", dtype=bf16(), shape=(B, Hkv, Sk, D))
    expect_array(out, "out", dtype=bf16(), shape=(B, Hq, Sq, D))
    return B, Hq, Hkv, Sq, Sk, D


def problem(q, k, v, out, lse, *, causal=False, scale=None) -> Problem:
    """Validate the arguments (module docstring); ``scale`` a positive finite float or None."""
    B, Hq, Hkv, Sq, Sk, D = qkv_sizes(q, k, v, out)
    expect_array(lse, "lse", dtype=np.float32, shape=(B, Hq, Sq))
    check_causal(causal)
    check_sizes(B, Hq, Hkv, Sq, Sk, D)
    scale = resolve_scale(scale, D)
    expect_same_device(q, k, v, out, lse)
    return Problem(B, Hq, Hkv, Sq, Sk, D, bool(causal), scale, q, k, v, out, lse)


def check_causal(causal) -> None:
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected True or False, got {causal!r}")


def resolve_scale(scale, D: int) -> float:
    """The softmax scale: ``scale`` if a positive finite number, 1 / sqrt(D) if None."""
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not (
            math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: expected a positive finite number or None (1/sqrt(D)), got {scale!r}")
    return float(scale)


def visible_keys(Sq: int, Sk: int, causal: bool):
    """Per query row, how many keys it sees (keys 0 .. n - 1): Sk, or i + Sk - Sq + 1 clipped to [0, Sk]."""
    i = np.arange(Sq)
    return np.clip(i + Sk - Sq + 1, 0, Sk) if causal else np.full(Sq, Sk)


def reference(q, k, v, *, causal: bool = False, scale: float | None = None, max_scores: int = 2**28):
    """(out, lse) in float64 from the bf16 inputs (NumPy or CuPy, as the inputs): the softmax of the masked scaled
    scores times v; rows that see no key get out = 0, lse = -inf. Computed a few heads at a time, so that the
    float64 scores of a chunk stay near ``max_scores`` elements (2 GB) however long the sequences."""
    xp = array_module(q)
    B, Hq, Sq, D = (int(s) for s in q.shape)
    Hkv, Sk = int(k.shape[1]), int(k.shape[2])
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    seen = xp.asarray(visible_keys(Sq, Sk, causal))
    mask = xp.arange(Sk)[None, :] < seen[:, None]                          # [Sq, Sk]
    out, lse = xp.empty((B, Hq, Sq, D), xp.float64), xp.empty((B, Hq, Sq), xp.float64)
    chunk = max(1, max_scores // (Sq * Sk))
    for b in range(B):
        for h0 in range(0, Hq, chunk):
            hs = np.arange(h0, min(Hq, h0 + chunk))
            kv = hs // (Hq // Hkv)                                         # key/value head of each query head
            qf, kf, vf = q[b, hs].astype(xp.float64), k[b, kv].astype(xp.float64), v[b, kv].astype(xp.float64)
            s = xp.where(mask, scale * qf @ kf.transpose(0, 2, 1), -xp.inf)
            m = s.max(axis=-1, keepdims=True)
            m_safe = xp.where(xp.isfinite(m), m, 0.0)
            p = xp.exp(s - m_safe)
            del s
            l = p.sum(axis=-1, keepdims=True)
            out[b, hs] = xp.where(l > 0, (p @ vf) / xp.where(l > 0, l, 1.0), 0.0)
            lse[b, hs] = xp.where(l[..., 0] > 0, m_safe[..., 0] + xp.log(xp.where(l[..., 0] > 0, l[..., 0], 1.0)),
                                  -xp.inf)
    return out, lse


def flops(B: int, Hq: int, Sq: int, Sk: int, D: int, causal: bool) -> float:
    """The two matrix products' FLOPs over the keys each row sees (4 D per query-key pair)."""
    return 4.0 * B * Hq * D * float(visible_keys(Sq, Sk, causal).sum())


# --- the plans -----------------------------------------------------------------------------------------

def kernel_args(p: Problem) -> tuple:
    """What every version's kernel takes, in order (scale_log2 = scale log2(e) for exp2f)."""
    return (p.q, p.k, p.v, p.out, p.lse, np.int32(p.Hq), np.int32(p.Hkv), np.int32(p.Sq), np.int32(p.Sk),
            np.int32(p.causal), np.float32(p.scale), np.float32(p.scale * LOG2E))


def plan_v0(p: Problem, config) -> list[Launch]:
    return [Launch(v0_kernel(p.D, config), (ceil_div(p.Sq, config.br), p.Hq, p.B), (config.br, 1, 1),
                   kernel_args(p))]


def tensor_core_launch(p: Problem, kernel: str) -> list[Launch]:
    """v1-v3: 4 warps a block, 16 query rows a warp (the kernels' BR = 64), one block per row tile and head."""
    return [Launch(kernel, (ceil_div(p.Sq, MMA_BR), p.Hq, p.B), (128, 1, 1), kernel_args(p))]


def plan_v1(p: Problem, config=None) -> list[Launch]:
    return tensor_core_launch(p, f"attn_fwd_mma<{p.D}, {V1_BC}>")


def plan_v2(p: Problem, config=None) -> list[Launch]:
    return tensor_core_launch(p, f"attn_fwd_pipeline<{p.D}, {V2_BC[p.D]}, false>")


def plan_v3(p: Problem, config=None) -> list[Launch]:
    return tensor_core_launch(p, f"attn_fwd_pipeline<{p.D}, {V2_BC[p.D]}, true>")


def v4_smem(D: int, tile: Tile) -> int:
    """Bytes of dynamic shared memory: Q's rows and two stages of K and V, bf16."""
    return (V4_BR + 4 * tile.bc) * D * 2


def plan_v4(p: Problem, config: Tile) -> list[Launch]:
    return [Launch(v4_kernel(p.D, config), (ceil_div(p.Sq, V4_BR), p.Hq, p.B), (128, 1, 1), kernel_args(p),
                   smem=v4_smem(p.D, config))]


ATTN_FWD = Registry("attn_fwd", problem, [
    Version("attn_fwd_v0_scalar", "the tiled algorithm with the online softmax on CUDA cores: one thread per "
            "query row, K and V tiles staged in shared memory, S and P kept in the thread", V0_SOURCE, plan_v0,
            snippet="attn_fwd_v0", configs=lambda p: V0_ROWS[p.D] if p is not None else V0_ROWS[64],
            default=lambda p: V0_DEFAULT),
    Version("attn_fwd_v1_mma", "both products on mma.sync.m16n8k16 over 4 warps of 16 query rows: S and P stay in "
            "registers, P's accumulators are the A fragments of P V", V1_SOURCE, plan_v1, parent="v0_scalar",
            snippet="attn_fwd_v1"),
    Version("attn_fwd_v2_pipeline", "Q, K, V tiles by 16-byte cp.async into XOR-swizzled shared memory, fragments by "
            "ldmatrix (V transposed), K and V double-buffered", V2_SOURCE, plan_v2, parent="v1_mma",
            snippet="attn_fwd_v2"),
    Version("attn_fwd_v3_edge_mask", "v2 masking only the tiles that cross a row's last visible key (causal "
            "diagonal tiles, the tile holding Sk): v2's kernel with EDGE_MASK_ONLY", V2_SOURCE, plan_v3,
            parent="v2_pipeline", snippet="attn_fwd_v2"),
    Version("attn_fwd_v4_tuned", "128 query rows a block, two m16 tiles a warp: each K and V fragment feeds four "
            "mmas; dynamic shared memory, tiles per head dimension from a sweep, causal blocks heaviest first",
            V4_SOURCE, plan_v4, parent="v3_edge_mask", snippet="attn_fwd_v4",
            configs=lambda p: V4_TILES[p.D] if p is not None else tuple(t for d in HEAD_DIMS for t in V4_TILES[d]),
            default=lambda p: V4_DEFAULT[p.D]),
])


# --- variable-length batches -----------------------------------------------------------------------------

VARLEN_SOURCE = KernelSource("attention/v04_tuned.cu", requires=("bf16-mma", "cp.async"), spill_free=False,
                             name_expressions=tuple(v4_kernel(d, V4_DEFAULT[d]).replace("tuned<", "tuned_varlen<")
                                                    for d in HEAD_DIMS))


@dataclasses.dataclass(frozen=True)
class VarlenProblem:
    B: int
    Hq: int
    Hkv: int
    D: int
    causal: bool
    scale: float
    seqlens_q: tuple          # per sequence, from the cumulative offsets (host copies)
    seqlens_k: tuple
    q: object
    k: object
    v: object
    out: object
    lse: object
    cu_q: object              # int32 device arrays of B + 1 offsets
    cu_k: object


def check_offsets(cu, total: int, name: str) -> np.ndarray:
    """Cumulative sequence offsets as flash-attention's varlen API takes them: 1-D int32, starting at 0, never
    decreasing, ending at the packed length ``total``. Returns the host copy."""
    host = np.asarray(cu.get() if hasattr(cu, "get") else cu)
    if host.ndim != 1 or host.size < 2 or host.dtype != np.int32:
        raise ValueError(f"{name}: expected a 1-D int32 array of B + 1 >= 2 offsets, got dtype {host.dtype} shape "
                         f"{host.shape}")
    if host[0] != 0 or np.any(np.diff(host) < 0):
        raise ValueError(f"{name}: offsets must start at 0 and never decrease, got {host.tolist()[:8]}...")
    if host[-1] != total:
        raise ValueError(f"{name}: the last offset ({int(host[-1])}) must equal the packed length {total}")
    return host


def varlen_problem(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None) -> VarlenProblem:
    """Validate a varlen call: q, out [Tq, Hq, D], k, v [Tk, Hkv, D] bf16, lse [Hq, Tq] float32, offsets as
    :func:`check_offsets` (host or device arrays; read once on the host here, so bind before timing)."""
    expect_array(q, "q", dtype=bf16(), ndim=3)
    Tq, Hq, D = (int(s) for s in q.shape)
    expect_array(k, "k", dtype=bf16(), ndim=3)
    if int(k.shape[2]) != D:
        raise ValueError(f"k: expected shape (Tk, Hkv, {D}) to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    Tk, Hkv = int(k.shape[0]), int(k.shape[1])
    expect_array(v, "v", dtype=bf16(), shape=(Tk, Hkv, D))
    expect_array(out, "out", dtype=bf16(), shape=(Tq, Hq, D))
    expect_array(lse, "lse", dtype=np.float32, shape=(Hq, Tq))
    check_causal(causal)
    scale = resolve_scale(scale, D)
    expect_same_device(q, k, v, out, lse)
    cq, ck = check_offsets(cu_seqlens_q, Tq, "cu_seqlens_q"), check_offsets(cu_seqlens_k, Tk, "cu_seqlens_k")
    if cq.size != ck.size:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k: expected the same number of sequences, got {cq.size - 1} "
                         f"and {ck.size - 1}")
    check_sizes(cq.size - 1, Hq, Hkv, max(1, int(np.diff(cq).max())), max(1, int(np.diff(ck).max())), D)
    if max(Tq * Hq, Tk * Hkv) * D >= INDEX_LIMIT:
        raise ValueError(f"attn_fwd_varlen: {max(Tq * Hq, Tk * Hkv) * D:,} elements in q or k, at least 2^31")
    xp = array_module(q)
    return VarlenProblem(cq.size - 1, Hq, Hkv, D, bool(causal), scale, tuple(np.diff(cq).tolist()),
                         tuple(np.diff(ck).tolist()), q, k, v, out, lse, xp.asarray(cq), xp.asarray(ck))


def plan_varlen(p: VarlenProblem, config=None) -> list[Launch]:
    tile = V4_DEFAULT[p.D]
    return [Launch(v4_kernel(p.D, tile).replace("tuned<", "tuned_varlen<"),
                   (max(1, ceil_div(max(p.seqlens_q), V4_BR)), p.Hq, p.B), (128, 1, 1),
                   (p.q, p.k, p.v, p.out, p.lse, p.cu_q, p.cu_k, np.int32(p.Hq), np.int32(p.Hkv), np.int32(p.causal),
                    np.float32(p.scale), np.float32(p.scale * LOG2E)), smem=v4_smem(p.D, tile))]


def varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale: float | None = None):
    """(out [Tq, Hq, D], lse [Hq, Tq]) in float64: :func:`reference` on each sequence of the packed batch."""
    xp = array_module(q)
    cq, ck = (np.asarray(c.get() if hasattr(c, "get") else c) for c in (cu_seqlens_q, cu_seqlens_k))
    out = xp.zeros(q.shape, xp.float64)
    lse = xp.full((q.shape[1], q.shape[0]), -xp.inf)
    for b in range(cq.size - 1):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        if qs.start == qs.stop:
            continue
        heads = lambda a, s: a[s].transpose(1, 0, 2)[None]          # noqa: E731 - [S, H, D] -> [1, H, S, D]
        if ks.start == ks.stop:                                      # no keys: every row sees none
            continue
        o, l = reference(heads(q, qs), heads(k, ks), heads(v, ks), causal=causal, scale=scale)
        out[qs] = o[0].transpose(1, 0, 2)
        lse[:, qs] = l[0]
    return out, lse


ATTN_FWD_VARLEN = Registry("attn_fwd_varlen", varlen_problem, [
    Version("attn_fwd_varlen_v4_tuned", "v4's kernel over a packed batch of sequences of different lengths: "
            "cumulative offsets locate each sequence's rows, the grid covers the longest", VARLEN_SOURCE, plan_varlen,
            snippet="attn_fwd_varlen"),
])
