"""Chapter 10's ladder (utils.ladder.Ladder) over the SGEMM registry: how to make a problem of a shape, its
float64 reference, its cost, the peers timed beside the versions (cuBLAS fp32 through ``cupy.matmul``, and
``torch.matmul`` with TF32 off), and the tables read back from the record.

Every version and peer gets the same standard-normal A and B of a shape (the card's clocks follow the data),
alpha = 1 and beta = 0 (what ``matmul`` computes), and C poisoned with NaN before every checked run.
"""
from __future__ import annotations

import contextlib
import os

from utils.ladder import Case, Ladder, shape_name
from utils.table import Table

from . import SGEMM, flops, nbytes, reference
from .ledger import DECODE, MLP_UP, QKV, SQUARE

PEERS = ("cupy.matmul", "torch.matmul")
SHAPES = [*SQUARE, QKV, MLP_UP, DECODE[0], DECODE[-1]]
# v0 is timed on the small squares and on decode only: at 4096^3 one launch would take about a quarter second
V0_SHAPES = [SQUARE[0], SQUARE[1], DECODE[0], DECODE[-1]]
# Checked (fresh inputs, C poisoned) on odd shapes: single elements, one row, ragged tails of every 32-wide
# tile, K below a sector's 8 floats; the largest takes v0 about 0.1 s.
ODD_SHAPES = [(1, 1, 1), (37, 199, 1823), (1, 4096, 4096), (33, 65, 7), (4095, 4097, 1023)]
CLAIM_SHAPE = SQUARE[1]          # where "cuBLAS is 30x faster" is measured against both naive kernels


def make(shape, dtype, rng) -> Case:
    """(a, b, c): standard-normal A [M, K] and B [K, N] from ``rng``, C [M, N] uninitialised (the ladder
    poisons it before every checked run)."""
    import cupy

    from utils.arrays import random_normal
    M, N, K = shape
    a = random_normal((M, K), "float32", seed=int(rng.integers(2**31)))[0]
    b = random_normal((K, N), "float32", seed=int(rng.integers(2**31)))[0]
    return Case((a, b, cupy.empty((M, N), dtype=cupy.float32)), outputs=(2,))


def ladder_reference(case: Case):
    a, b, _ = case.args
    return reference(a, b)


def cost_flops(shape, dtype) -> int:
    return flops(*shape)


def cost_bytes(shape, dtype) -> int:
    return nbytes(*shape)


def cublas_peer(case: Case):
    """cuBLAS fp32 (``cupy.matmul``) on the case's A and B into its own output. CuPy runs fp32 GEMMs in full
    fp32 unless CUPY_TF32=1, which this refuses: the peer would then be a TF32 GEMM."""
    import cupy
    if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        raise RuntimeError("CUPY_TF32 is set: cupy.matmul would run TF32, not fp32; unset it for this chapter")
    a, b, c = case.args
    out = cupy.empty_like(c)
    return lambda: cupy.matmul(a, b, out=out)


TF32_API_NOTE = ".*new API settings to control TF32.*"   # PyTorch 2.9+: a one-time note that allow_tf32 is legacy


@contextlib.contextmanager
def tf32_off():
    """``torch.backends.cuda.matmul.allow_tf32 = False`` inside, the caller's setting restored after. PyTorch
    2.9 and later note once, as a warning, that this flag is the legacy spelling of ``fp32_precision``; the note
    is silenced here (it would be a stray stderr output in the chapter), nothing else is."""
    import warnings

    import torch
    matmul = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TF32_API_NOTE)
        before = matmul.allow_tf32
        matmul.allow_tf32 = False
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=TF32_API_NOTE)
            matmul.allow_tf32 = before


def torch_peer(case: Case):
    """``torch.matmul`` on the same memory (DLPack, no copy), TF32 off for the call and restored after it.
    Returns the torch tensor: the ladder views it as a CuPy array only in the check, outside the timing."""
    import torch

    from utils.arrays import as_torch
    a, b, c = (as_torch(x) for x in case.args)
    out = torch.empty_like(c)

    def run():
        with tf32_off():
            torch.matmul(a, b, out=out)
        return out
    return run


def peers(names=PEERS) -> dict:
    every = {"cupy.matmul": cublas_peer, "torch.matmul": torch_peer}
    return {n: every[n] for n in names}


def ladder(rec, shapes=None, *, seed: int = 10, peer_names=PEERS) -> Ladder:
    """Chapter 10's ladder: checked on :data:`ODD_SHAPES`, timed on ``shapes`` (default :data:`SHAPES`) beside
    the peers, in TFLOP/s (no copy ceiling: a GEMM of these shapes is bound by arithmetic, see the ledger);
    every entry also carries the ledger's minimum bytes, for the roofline."""
    return Ladder(rec, SGEMM, shapes=list(shapes or SHAPES), dtypes=["float32"], make=make,
                  reference=ladder_reference, nbytes=cost_bytes, flops=cost_flops, odd_shapes=ODD_SHAPES,
                  peers=peers(peer_names), ceiling=None, seed=seed)


# --- reading the ladder back from the record -----------------------------------------------------------

def tflops(lad: Ladder, impl: str, shape) -> float:
    e = lad.entry(impl, shape, "float32")
    if e is None:
        raise KeyError(f"sgemm: nothing recorded for {impl} on {shape_name(shape)}")
    return e["metric"]


def peer_table(lad: Ladder, fma_tflops: float, shapes=None) -> Table:
    """Per shape: each peer's TFLOP/s and its fraction of the FMA ceiling, and torch over cupy."""
    rows = []
    for s in shapes or lad.shapes:
        cu, th = tflops(lad, "cupy.matmul", s), tflops(lad, "torch.matmul", s)
        rows.append([shape_name(s), f"{cu:.1f}", f"{cu / fma_tflops:.0%}", f"{th:.1f}", f"{th / fma_tflops:.0%}",
                     f"{th / cu:.2f}"])
    return Table(["M x N x K", "cupy.matmul TFLOP/s", "of FMA", "torch.matmul TFLOP/s", "of FMA", "torch / cupy"],
                 rows, caption=f"cuBLAS fp32 beside the FMA ceiling ({fma_tflops:.1f} TFLOP/s, chapter 2)")


def speedups(lad: Ladder, shape=CLAIM_SHAPE, labels=("v0_uncoalesced", "v1_coalesced")) -> tuple[Table, dict]:
    """How many times faster each peer is than each naive version on one shape, all from this run.
    Returns (table, {(peer, label): ratio})."""
    ratio, rows = {}, []
    for lab in labels:
        row = [lab, f"{tflops(lad, lab, shape):.2f}"]
        for p in PEERS:
            ratio[p, lab] = tflops(lad, p, shape) / tflops(lad, lab, shape)
            row.append(f"{ratio[p, lab]:.1f}x")
        rows.append(row)
    return Table(["version", "TFLOP/s", *[f"{p} is faster by" for p in PEERS]], rows,
                 caption=f"cuBLAS against the naive kernels, {shape_name(shape)}, one run"), ratio


def roofline_points(lad: Ladder, impls, shapes) -> list[dict]:
    """Roofline entries of ``impls`` on ``shapes`` (each entry's recorded FLOPs and minimum bytes), one legend
    series per impl, the shape as each point's tag."""
    from .ledger import SHAPES as NAMED
    from .ledger import TAGS
    tag_of = {s: TAGS[name] for name, s in NAMED.items()}
    pts = []
    for impl in impls:
        for s in shapes:
            e = lad.entry(impl, s, "float32")
            if e is not None:
                pts.append({**e, "series": impl + (" (peer)" if e["is_peer"] else ""),
                            "tag": tag_of.get(tuple(s), shape_name(s))})
    return pts
