"""Chapter 15's ladder (utils.ladder.Ladder over :data:`ATTN_FWD`): how to make a problem of a shape, its reference,
its FLOPs, and the peers timed beside the versions: PyTorch's scaled_dot_product_attention restricted to one
backend at a time (``torch.nn.attention.sdpa_kernel``): FlashAttention-2 (``flash``), cuDNN (``cudnn``) and the
math backend (``math``, the unfused reference implementation).

A shape is ``(B, Hq, Hkv, Sq, Sk, D, causal)`` with ``causal`` 0 or 1. The timed configurations follow the
FlashAttention-2 paper's: 16k tokens a batch (``B = 16384 / S``) and a model width of 2048 (``H = 2048 / D``),
sequence lengths 1k-16k, D 64 and 128, causal or not, ``Sq = Sk`` (PyTorch aligns its causal mask top-left, this op
bottom-right: the two agree only there). The ladder checks ``out``; ``lse`` (and rows that see no key, whose lse
is -inf) are checked by tests/gpu/test_attention.py.
"""
from __future__ import annotations

import numpy as np

from utils.ladder import Case, Ladder, shape_name
from utils.table import Table

from . import ATTN_FWD, V4_TILES, flops, reference, v4_smem

SEQLENS = (1024, 2048, 4096, 8192, 16384)
TOKENS, WIDTH = 16384, 2048
# odd lengths, one query against 4097 keys, GQA and MQA, causal rows that see no key (Sq > Sk)
ODD = [(1, 1, 1, 1, 1, 64, 0), (1, 2, 1, 17, 17, 64, 1), (1, 2, 2, 1000, 1000, 128, 1),
       (1, 4, 1, 1, 4097, 128, 1), (2, 4, 2, 333, 1000, 64, 0), (1, 2, 1, 300, 100, 128, 1)]


def bench_shapes(D: int, causal: bool, seqlens=SEQLENS) -> list[tuple]:
    """The timed configurations of one head dimension and mask: B = 16k tokens / S, H = 2048 / D heads."""
    if D <= 0 or WIDTH % D or any(TOKENS % s for s in seqlens):
        raise ValueError(f"bench_shapes: D must divide {WIDTH} and every length {TOKENS}, got D={D}, {seqlens}")
    return [(TOKENS // s, WIDTH // D, WIDTH // D, s, s, D, int(causal)) for s in seqlens]


def make(shape, dtype, rng) -> Case:
    """(q, k, v, out, lse): standard-normal bf16 q, k, v from ``rng``, out and lse uninitialised (the ladder poisons
    out before every checked run); ``causal`` as a keyword."""
    import cupy

    from utils.arrays import bf16
    B, Hq, Hkv, Sq, Sk, D, causal = (int(s) for s in shape)
    rs = cupy.random.RandomState(int(rng.integers(2**31)))
    q = rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16())
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = cupy.empty((B, Hq, Sq, D), bf16()), cupy.empty((B, Hq, Sq), cupy.float32)
    return Case((q, k, v, out, lse), outputs=(3,), kwargs={"causal": bool(causal)})


def ladder_reference(case: Case):
    q, k, v = case.args[:3]
    return reference(q, k, v, causal=case.kwargs["causal"])[0]


def cost(shape, dtype) -> float:
    B, Hq, _, Sq, Sk, D, causal = shape
    return flops(B, Hq, Sq, Sk, D, bool(causal))


def nbytes(shape, dtype=None) -> float:
    """The minimum bytes: q, k, v read and out written once (bf16), lse written once (fp32)."""
    B, Hq, Hkv, Sq, Sk, D, _ = shape
    return 2.0 * D * (2 * B * Hq * Sq + 2 * B * Hkv * Sk) + 4.0 * B * Hq * Sq


def sdpa_peer(backend: str):
    """A peer factory: PyTorch SDPA with only ``backend`` ("FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH") enabled, on
    the case's q, k, v as torch tensors (no copy); GQA through ``enable_gqa``. Raises where the backend refuses."""
    def factory(case: Case):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        from utils.arrays import as_torch
        q, k, v = (as_torch(a) for a in case.args[:3])
        causal, gqa = case.kwargs["causal"], q.shape[1] != k.shape[1]
        if causal and q.shape[2] != k.shape[2]:
            raise ValueError("sdpa peers: PyTorch's causal mask is top-left aligned; compare only Sq == Sk")
        chosen = getattr(SDPBackend, backend)

        def run():
            with sdpa_kernel(chosen):
                return scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        return run
    return factory


PEERS = {"torch.sdpa.flash": sdpa_peer("FLASH_ATTENTION"), "torch.sdpa.cudnn": sdpa_peer("CUDNN_ATTENTION")}


def fwd_ladder(rec, shapes, *, peers=None, seed: int = 15) -> Ladder:
    """The forward ladder: checked on ODD (out poisoned), timed on ``shapes`` beside ``peers`` (default PEERS;
    add ``{"torch.sdpa.math": sdpa_peer("MATH")}`` where its O(S^2) memory fits)."""
    return Ladder(rec, ATTN_FWD, shapes=shapes, dtypes=["bfloat16"], make=make, reference=ladder_reference,
                  flops=cost, nbytes=nbytes, odd_shapes=ODD, peers=PEERS if peers is None else peers, ceiling=None,
                  seed=seed)


# --- what the chapter's tables read from the ladder -----------------------------------------------------------

def tflops(lad: Ladder, impl: str, shape) -> float:
    e = lad.entry(impl, tuple(shape), "bfloat16")
    if e is None:
        raise KeyError(f"attn_fwd: nothing recorded for {impl} on {shape_name(shape)}")
    return e["metric"]


def config_name(shape) -> str:
    """``d128 causal 4k``: a timed configuration as the tables name it."""
    B, Hq, Hkv, Sq, Sk, D, causal = shape
    return f"d{D} {'causal' if causal else 'full'} {Sq // 1024}k" if Sq % 1024 == 0 else shape_name(shape)


def ledger_table(shapes, mma_peak: float, copy_gbps: float) -> Table:
    """Per configuration: GFLOP, minimum MB, FLOP per byte, and the floor times at the mma.sync peak (chapter 12)
    and at the copy bandwidth."""
    rows = []
    for s in shapes:
        f, b = cost(s, None), nbytes(s)
        t_f, t_b = f / (mma_peak * 1e12) * 1e6, b / (copy_gbps * 1e9) * 1e6
        rows.append([config_name(s), f"{s[0]}x{s[1]}", f"{f / 1e9:,.0f}", f"{b / 1e6:,.0f}", f"{f / b:,.0f}",
                     f"{t_f:,.0f}", f"{t_b:,.0f}"])
    return Table(["configuration", "batch x heads", "GFLOP", "min MB", "FLOP/B", "mma.sync floor µs",
                  "copy floor µs"], rows,
                 caption=f"attention forward ledger: mma.sync peak {mma_peak:.0f} TFLOP/s (chapter 12), copy "
                         f"{copy_gbps:.0f} GB/s (chapter 2)", align="ll" + "r" * 5)


def tile_impl(tile) -> str:
    """The record's impl name of one v4 tile: ``v4_tuned[64,True]``."""
    return f"v4_tuned[{tile.bc},{tile.q_regs}]"


def sweep(lad: Ladder, shapes) -> dict:
    """Time every v4 tile instantiated for each shape's head dimension (a progress bar; each checked after its
    timing), recorded under :func:`tile_impl`. Returns {D: the tile with the best geometric mean over the shapes
    of that D}."""
    from tqdm.auto import tqdm
    for shape, tile in tqdm([(tuple(s), t) for s in shapes for t in V4_TILES[s[5]]], desc="attn_fwd v4 tiles"):
        lad.time("v4_tuned", [shape], config=tile, impl=tile_impl(tile), extra={"swept": True})
    best = {}
    for D in sorted({s[5] for s in shapes}):
        mine = [tuple(s) for s in shapes if s[5] == D]
        best[D] = max(V4_TILES[D], key=lambda t: np.mean([np.log(tflops(lad, tile_impl(t), s)) for s in mine]))
    return best


def sweep_table(lad: Ladder, shapes, peer: str = "torch.sdpa.flash") -> Table:
    """Each v4 tile's fraction of ``peer`` on each swept configuration, and the geometric mean per head dim."""
    rows = []
    for D in sorted({s[5] for s in shapes}):
        mine = [tuple(s) for s in shapes if s[5] == D]
        for t in V4_TILES[D]:
            r = [tflops(lad, tile_impl(t), s) / tflops(lad, peer, s) for s in mine]
            rows.append([f"d{D}", str(t.bc), "yes" if t.q_regs else "no", f"{v4_smem(D, t) / 1024:.0f}",
                         *[f"{x:.2f}" for x in r], f"{float(np.exp(np.mean(np.log(r)))):.2f}"])
    cols = ["head dim", "keys a tile (BC)", "Q in registers", "smem KiB",
            *[config_name(s).split(" ", 1)[1] for s in shapes if s[5] == shapes[0][5]], "geomean"]
    return Table(cols, rows, caption=f"v4's tiles, fraction of {peer} in this run", align="llll" + "r" * (len(cols) - 4))


def bar_table(lad: Ladder, label: str, shapes, peers=("torch.sdpa.flash", "torch.sdpa.cudnn")) -> Table:
    """``label`` against each peer on every configuration: TFLOP/s and the fraction, one run."""
    rows = []
    for s in shapes:
        mine = tflops(lad, label, s)
        row = [config_name(s), f"{mine:.0f}"]
        for p in peers:
            row += [f"{tflops(lad, p, s):.0f}", f"{mine / tflops(lad, p, s):.2f}"]
        rows.append(row)
    cols = ["configuration", f"{label} TFLOP/s", *[c for p in peers for c in (f"{p} TFLOP/s", f"of {p.split('.')[-1]}")]]
    return Table(cols, rows, caption=f"{label} against PyTorch SDPA's backends, every configuration, one run",
                 align="l" + "r" * (len(cols) - 1))


def fractions(lad: Ladder, label: str, peer: str, shapes) -> list[float]:
    return [tflops(lad, label, s) / tflops(lad, peer, s) for s in shapes]


def roofline_points(lad: Ladder, impls, shapes) -> list[dict]:
    """Roofline entries of ``impls`` on ``shapes``, one legend series per impl, the configuration as each tag."""
    pts = []
    for impl in impls:
        for s in shapes:
            e = lad.entry(impl, tuple(s), "bfloat16")
            if e is not None:
                pts.append({**e, "series": impl + (" (peer)" if e["is_peer"] else ""), "tag": config_name(s)})
    return pts


def resources(version, D: int, config=None) -> dict:
    """Registers, spilled bytes, shared memory and blocks per SM of one version's instance at head dim D (its
    default config unless ``config``), from the ptxas report and the occupancy rules."""
    from utils.build import compile_source
    from utils.occupancy import from_function

    from . import Problem
    p = Problem(1, 1, 1, 4096, 4096, D, False, 1.0, None, None, None, None, None)   # planning reads sizes only
    (ln,) = version.launches(p, config)
    comp = compile_source(version.source)
    rep = comp.report[comp.symbols[ln.kernel]]
    occ = from_function(rep, ln.block[0], ln.smem)
    return {"kernel": ln.kernel, "threads": ln.block[0], "registers": int(rep["registers"]),
            "spill_bytes": int(rep["spill_stores"]) + int(rep["spill_loads"]),
            "smem_kib": (int(rep["smem_bytes"]) + ln.smem) / 1024, "blocks": occ.blocks, "warps": occ.warps}


def resources_table(versions, dims=(64, 128)) -> Table:
    rows = []
    for v in versions:
        for D in dims:
            r = resources(v, D)
            rows.append([v.label, r["kernel"].split("<", 1)[1].rstrip(">"), str(r["threads"]), str(r["registers"]),
                         str(r["spill_bytes"]), f"{r['smem_kib']:.0f}", str(r["blocks"]), str(r["warps"])])
    return Table(["version", "template arguments", "threads", "registers", "spilled bytes (st + ld)", "smem KiB",
                  "blocks/SM", "warps/SM"], rows, caption="each version's default instance: ptxas report and occupancy",
                 align="ll" + "r" * 6)


def peers_table(lad: Ladder, shapes, peers=("torch.sdpa.flash", "torch.sdpa.cudnn")) -> Table:
    """The peers alone: TFLOP/s per configuration and cuDNN's speed over FlashAttention-2's."""
    rows = [[config_name(s), *[f"{tflops(lad, p, s):.0f}" for p in peers],
             f"{tflops(lad, peers[1], s) / tflops(lad, peers[0], s):.2f}"] for s in shapes]
    return Table(["configuration", *[f"{p} TFLOP/s" for p in peers], "cudnn / flash"], rows,
                 caption="PyTorch SDPA's FlashAttention-2 and cuDNN backends, one run", align="l" + "r" * (len(peers) + 1))


# --- variable-length batches ------------------------------------------------------------------------------

def varlen_inputs(lengths, Hq: int, Hkv: int, D: int, seed: int):
    """A packed batch of sequences of the given lengths (queries and keys alike): q, k, v standard normal bf16,
    out and lse NaN-poisoned, int32 offsets on the device."""
    import cupy

    from utils.arrays import bf16
    from utils.check import poisoned
    T = int(sum(lengths))
    rs = cupy.random.RandomState(seed)
    q = rs.standard_normal((T, Hq, D), dtype=cupy.float32).astype(bf16())
    k, v = (rs.standard_normal((T, Hkv, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    cu = cupy.asarray(np.concatenate([[0], np.cumsum(lengths)]), dtype=cupy.int32)
    return q, k, v, poisoned((T, Hq, D), bf16()), poisoned((Hq, T), np.float32), cu


def padded_inputs(q, k, v, lengths):
    """The same sequences as a dense [B, H, max, D] batch, zero-padded at the end (what a caller without varlen
    does), and empty out, lse."""
    import cupy
    B, L = len(lengths), max(lengths)
    offs = np.concatenate([[0], np.cumsum(lengths)])

    def pad(x):
        out = cupy.zeros((B, x.shape[1], L, x.shape[2]), x.dtype)
        for b in range(B):
            out[b, :, :lengths[b]] = x[offs[b]:offs[b + 1]].transpose(1, 0, 2)
        return out
    qp, kp, vp = pad(q), pad(k), pad(v)
    return qp, kp, vp, cupy.empty_like(qp), cupy.empty((B, qp.shape[1], L), cupy.float32)


def time_varlen(rec, lengths, *, Hq: int = 16, Hkv: int = 16, D: int = 128, causal: bool = True, seed: int = 151):
    """Time the varlen kernel on a packed batch and v4 on the same batch padded to the longest sequence (useful
    FLOPs counted for both, so the padded run's TFLOP/s shows the waste); the varlen output is checked against
    :func:`varlen_reference` after timing. Returns the two entries."""
    from utils.check import assert_close

    from . import ATTN_FWD_VARLEN, varlen_reference
    q, k, v, out, lse, cu = varlen_inputs(lengths, Hq, Hkv, D, seed)
    useful = sum(flops(1, Hq, n, n, D, causal) for n in lengths)
    shape = (len(lengths), Hq, Hkv, max(lengths), sum(lengths), D, int(causal))

    def check():
        ref_out, _ = varlen_reference(q, k, v, cu, cu, causal=causal)
        assert_close(out, ref_out, dtype="bfloat16", name=f"attn_fwd_varlen lengths {list(lengths)} (seed {seed})")
    packed = rec.time("attn_fwd_varlen", "varlen_v4", ATTN_FWD_VARLEN["v4_tuned"].bind(q, k, v, out, lse, cu, cu,
                                                                                      causal=causal),
                      dtype="bfloat16", shape=shape, flops=useful, check=check, extra={"lengths": list(lengths)})
    padded = rec.time("attn_fwd_varlen", "padded_v4", ATTN_FWD["v4_tuned"].bind(*padded_inputs(q, k, v, lengths),
                                                                               causal=causal),
                      dtype="bfloat16", shape=shape, flops=useful, extra={"lengths": list(lengths)})
    return packed, padded
