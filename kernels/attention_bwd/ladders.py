"""Chapter 16's ladder (utils.ladder.Ladder over :data:`ATTN_BWD`): how to make a backward problem of a shape, its
reference, its FLOPs, and the peers: PyTorch's scaled_dot_product_attention backward restricted to one backend
(``torch.nn.attention.sdpa_kernel``), FlashAttention-2 (``flash``) and cuDNN (``cudnn``), timing only the backward.

Shapes are chapter 15's (``(B, Hq, Hkv, Sq, Sk, D, causal)``, :func:`kernels.attention.ladders.bench_shapes`: 16k
tokens a batch, model width 2048, ``Sq = Sk`` so that PyTorch's top-left causal mask agrees with ours) and its odd
shapes. The FLOPs are 2.5 times the forward's (five products against two: flash-attention's count), whatever a
version recomputes. ``out`` and ``lse`` come from the forward's fastest version on the same inputs.
"""
from __future__ import annotations

import numpy as np

from kernels.attention.ladders import (ODD, SEQLENS, bench_shapes, config_name, fractions,  # noqa: F401  (re-exported
                                       roofline_points, tflops)                            # for the chapter)
from utils.ladder import Case, Ladder
from utils.table import Table

from . import ATTN_BWD, ATTN_BWD_VARLEN, TILES, dkdv_smem, flops, reference_grads, varlen_reference_grads

FORWARD = "v4_tuned"             # the forward version that writes out and lse for the cases


def make(shape, dtype, rng) -> Case:
    """(q, k, v, out, lse, dout, dq, dk, dv): standard-normal bf16 q, k, v, dout from ``rng``; out and lse from the
    forward; dq, dk, dv uninitialised (the ladder poisons them before every checked run); ``causal`` a keyword."""
    import cupy

    from kernels.attention import ATTN_FWD
    from utils.arrays import bf16
    B, Hq, Hkv, Sq, Sk, D, causal = (int(s) for s in shape)
    rs = cupy.random.RandomState(int(rng.integers(2**31)))
    q, dout = (rs.standard_normal((B, Hq, Sq, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    k, v = (rs.standard_normal((B, Hkv, Sk, D), dtype=cupy.float32).astype(bf16()) for _ in range(2))
    out, lse = cupy.empty((B, Hq, Sq, D), bf16()), cupy.empty((B, Hq, Sq), cupy.float32)
    ATTN_FWD[FORWARD](q, k, v, out, lse, causal=bool(causal))
    dq = cupy.empty((B, Hq, Sq, D), bf16())
    dk, dv = cupy.empty((B, Hkv, Sk, D), bf16()), cupy.empty((B, Hkv, Sk, D), bf16())
    return Case((q, k, v, out, lse, dout, dq, dk, dv), outputs=(6, 7, 8), kwargs={"causal": bool(causal)})


def ladder_reference(case: Case):
    q, k, v, _, _, dout = case.args[:6]
    return reference_grads(q, k, v, dout, case.kwargs["causal"])


def cost(shape, dtype) -> float:
    B, Hq, _, Sq, Sk, D, causal = shape
    return flops(B, Hq, Sq, Sk, D, bool(causal))


def nbytes(shape, dtype=None) -> float:
    """The minimum bytes: q, k, v, out and dout read, dq, dk and dv written once (bf16), lse read once (fp32)."""
    B, Hq, Hkv, Sq, Sk, D, _ = shape
    return 2.0 * D * (4 * B * Hq * Sq + 4 * B * Hkv * Sk) + 4.0 * B * Hq * Sq


def sdpa_backward_peer(backend: str):
    """A peer factory: PyTorch SDPA with only ``backend`` ("FLASH_ATTENTION", "CUDNN_ATTENTION") enabled. The forward
    runs once, outside the timing, on leaf tensors that share the case's memory; the timed call is the backward
    alone, ``torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)``, which returns (dq, dk, dv)."""
    def factory(case: Case):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        from utils.arrays import as_torch
        q, k, v = (as_torch(a).detach().requires_grad_(True) for a in case.args[:3])
        dout = as_torch(case.args[5])
        causal, gqa = case.kwargs["causal"], q.shape[1] != k.shape[1]
        if causal and q.shape[2] != k.shape[2]:
            raise ValueError("sdpa peers: PyTorch's causal mask is top-left aligned; compare only Sq == Sk")
        with sdpa_kernel(getattr(SDPBackend, backend)):
            out = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        def run():
            return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        return run
    return factory


PEERS = {"torch.sdpa.flash": sdpa_backward_peer("FLASH_ATTENTION"),
         "torch.sdpa.cudnn": sdpa_backward_peer("CUDNN_ATTENTION")}


def bwd_ladder(rec, shapes, *, peers=None, seed: int = 16) -> Ladder:
    """The backward ladder: checked on ODD (dq, dk, dv poisoned), timed on ``shapes`` beside ``peers`` (default
    PEERS)."""
    return Ladder(rec, ATTN_BWD, shapes=shapes, dtypes=["bfloat16"], make=make, reference=ladder_reference,
                  flops=cost, nbytes=nbytes, odd_shapes=ODD, peers=PEERS if peers is None else peers, ceiling=None,
                  seed=seed)


# --- what the chapter's tables read from the ladder -----------------------------------------------------------

V1_PRODUCTS = 7                  # v1 computes S and dP twice: 7 products a (query, key) pair against the op's 5


def geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(xs, dtype=float)))))


def ledger_table(shapes, mma_peak: float, copy_gbps: float) -> Table:
    """Per configuration: the backward's GFLOP (five products), minimum MB, FLOP per byte, and the floor times: the
    five products and v1's seven at the mma.sync peak (chapter 12), the minimum bytes at the copy bandwidth."""
    rows = []
    for s in shapes:
        f, b = cost(s, None), nbytes(s)
        floor = f / (mma_peak * 1e12) * 1e6
        rows.append([config_name(s), f"{s[0]}x{s[1]}", f"{f / 1e9:,.0f}", f"{b / 1e6:,.0f}", f"{f / b:,.0f}",
                     f"{floor:,.0f}", f"{floor * V1_PRODUCTS / 5:,.0f}", f"{b / (copy_gbps * 1e9) * 1e6:,.0f}"])
    return Table(["configuration", "batch x heads", "GFLOP", "min MB", "FLOP/B", "5 products µs", "v1's 7 µs",
                  "copy µs"], rows,
                 caption=f"attention backward ledger, floors at the mma.sync peak {mma_peak:.0f} TFLOP/s (chapter 12) "
                         f"and the copy bandwidth {copy_gbps:.0f} GB/s (chapter 2)", align="ll" + "r" * 6)


def tile_impl(label: str, tile) -> str:
    """The record's impl name of one key-tile shape of a version: ``v1_deterministic[128,64]``."""
    return f"{ATTN_BWD[label].label}[{tile.bn},{tile.bm}]"


def sweep(lad: Ladder, shapes, labels=("v0_atomic_dq", "v1_deterministic")) -> dict:
    """Time every key-tile shape each version instantiates for each shape's head dimension (a progress bar; each
    checked after its timing), recorded under :func:`tile_impl`. Returns {(label, D): the tile with the best
    geometric mean over the shapes of that D}."""
    from tqdm.auto import tqdm
    jobs = [(lab, tuple(s), t) for lab in labels for s in shapes for t in TILES[s[5]]]
    for lab, shape, tile in tqdm(jobs, desc="attn_bwd tiles"):
        lad.time(lab, [shape], config=tile, impl=tile_impl(lab, tile), extra={"swept": True})
    return {(lab, D): max(TILES[D], key=lambda t: geomean([tflops(lad, tile_impl(lab, t), s)
                                                           for s in shapes if s[5] == D]))
            for lab in labels for D in sorted({s[5] for s in shapes})}


def sweep_table(lad: Ladder, shapes, labels=("v0_atomic_dq", "v1_deterministic"),
                peer: str = "torch.sdpa.flash") -> Table:
    """Each version's tiles: warps, shared memory, the fraction of ``peer`` on each swept configuration (one
    head dimension's configurations per row) and their geometric mean."""
    rows = []
    for lab in labels:
        atomic = ATTN_BWD[lab].label == "v0_atomic_dq"
        for D in sorted({s[5] for s in shapes}):
            mine = [tuple(s) for s in shapes if s[5] == D]
            for t in TILES[D]:
                r = fractions(lad, tile_impl(lab, t), peer, mine)
                rows.append([lab, f"d{D}", f"{t.bn} x {t.bm}", str(t.bn // 16),
                             f"{dkdv_smem(D, t, atomic) / 1024:.0f}", *[f"{x:.2f}" for x in r], f"{geomean(r):.2f}"])
    cols = ["version", "head dim", "keys x queries a step", "warps", "smem KiB",
            *[config_name(s).split(" ", 1)[1] for s in shapes if s[5] == shapes[0][5]], "geomean"]
    return Table(cols, rows, caption=f"the key-tile kernel's tiles, fraction of {peer} in this run",
                 align="lllll" + "r" * (len(cols) - 5))


def bar_table(lad: Ladder, labels, shapes, peers=("torch.sdpa.flash", "torch.sdpa.cudnn")) -> Table:
    """The peers' TFLOP/s and each version's, with its fraction of each peer, on every configuration (one run)."""
    rows = []
    for s in shapes:
        row = [config_name(s), *[f"{tflops(lad, p, s):.0f}" for p in peers]]
        for lab in labels:
            mine = tflops(lad, lab, s)
            row += [f"{mine:.0f}", *[f"{mine / tflops(lad, p, s):.2f}" for p in peers]]
        rows.append(row)
    short = [p.split(".")[-1] for p in peers]
    cols = ["configuration", *[f"{p} TFLOP/s" for p in short],
            *[c for lab in labels for c in (f"{lab} TFLOP/s", *[f"of {p}" for p in short])]]
    return Table(cols, rows, caption="the backward against PyTorch SDPA's backends (backward only), every "
                                     "configuration, one run", align="l" + "r" * (len(cols) - 1))


def run_twice(label: str, shape, seed: int = 165) -> dict:
    """Run one version twice on the same inputs (outputs poisoned before each run). Per output (dq, dk, dv): how
    many elements differ in their bits, out of how many, and the largest |difference| over the largest |value|."""
    import cupy

    from utils.check import poison
    case = make(tuple(shape), "bfloat16", np.random.default_rng(seed))
    runs = []
    for _ in range(2):
        for i in case.outputs:
            poison(case.args[i])
        ATTN_BWD[label](*case.args, **case.kwargs)
        runs.append([case.args[i].copy() for i in case.outputs])
    out = {}
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        fa, fb = a.astype(cupy.float32), b.astype(cupy.float32)
        out[name] = {"differ": int(cupy.count_nonzero(a.view(cupy.uint16) != b.view(cupy.uint16))), "of": int(a.size),
                     "max_rel": float(cupy.abs(fa - fb).max() / cupy.abs(fa).max())}
    return out


# --- variable-length batches ---------------------------------------------------------------------------------

def make_varlen(shape, dtype, rng) -> Case:
    """A packed batch, ``shape = (Hq, Hkv, D, causal, *lengths)`` (queries and keys of a sequence alike): q, k, v,
    dout standard-normal bf16, out and lse from the forward's varlen entry, dq, dk, dv uninitialised; arguments as
    ATTN_BWD_VARLEN takes them, the int32 offsets last."""
    import cupy

    from kernels.attention import ATTN_FWD_VARLEN
    from kernels.attention.ladders import varlen_inputs
    from utils.arrays import bf16
    Hq, Hkv, D, causal, *lengths = (int(s) for s in shape)
    seed = int(rng.integers(2**31))
    q, k, v, out, lse, cu = varlen_inputs(lengths, Hq, Hkv, D, seed)
    ATTN_FWD_VARLEN["v4_tuned"](q, k, v, out, lse, cu, cu, causal=bool(causal))
    dout = cupy.random.RandomState(seed + 1).standard_normal(q.shape, dtype=cupy.float32).astype(bf16())
    dq, dk, dv = cupy.empty_like(q), cupy.empty_like(k), cupy.empty_like(v)
    return Case((q, k, v, out, lse, dout, dq, dk, dv, cu, cu), outputs=(6, 7, 8), kwargs={"causal": bool(causal)})


def varlen_ladder_reference(case: Case):
    q, k, v, _, _, dout, _, _, _, cu_q, cu_k = case.args
    return varlen_reference_grads(q, k, v, dout, cu_q, cu_k, case.kwargs["causal"])


def time_varlen_bwd(rec, lengths, label: str = "v0_atomic_dq", *, Hq: int = 16, Hkv: int = 16, D: int = 128,
                    causal: bool = True, seed: int = 161) -> tuple[dict, dict]:
    """Time ``label``'s varlen entry on a packed batch and its dense entry on the same sequences padded to the
    longest (useful FLOPs counted for both, as chapter 15 does for the forward); the varlen gradients are checked
    against :func:`varlen_reference_grads` after timing. Returns the two entries."""
    import cupy

    from kernels.attention import ATTN_FWD
    from kernels.attention.ladders import padded_inputs
    from utils.check import assert_close
    case = make_varlen((Hq, Hkv, D, int(causal), *lengths), "bfloat16", np.random.default_rng(seed))
    q, k, v = case.args[:3]
    useful = sum(flops(1, Hq, n, n, D, causal) for n in lengths)
    shape = (len(lengths), Hq, Hkv, max(lengths), sum(lengths), D, int(causal))

    def check():
        want = varlen_ladder_reference(case)
        for name, got, ref in zip(("dq", "dk", "dv"), case.out, want):
            assert_close(got, ref, dtype="bfloat16", name=f"attn_bwd_varlen {label} {name}, lengths {list(lengths)} "
                                                          f"(seed {seed})")
    packed = rec.time("attn_bwd_varlen", f"varlen_{label}", ATTN_BWD_VARLEN[label].bind(*case.args, **case.kwargs),
                      dtype="bfloat16", shape=shape, flops=useful, check=check, extra={"lengths": list(lengths)})
    qp, kp, vp, outp, lsep = padded_inputs(q, k, v, lengths)
    ATTN_FWD["v4_tuned"](qp, kp, vp, outp, lsep, causal=causal)
    dense = (qp, kp, vp, outp, lsep, cupy.zeros_like(qp), cupy.empty_like(qp), cupy.empty_like(kp),
             cupy.empty_like(vp))
    padded = rec.time("attn_bwd_varlen", f"padded_{label}", ATTN_BWD[label].bind(*dense, causal=causal),
                      dtype="bfloat16", shape=shape, flops=useful, extra={"lengths": list(lengths)})
    return packed, padded
