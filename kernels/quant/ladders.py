"""Chapter 9's two ladders (utils.ladder.Ladder) over the W4A16 GEMV and GEMM registries: how to make a
problem of a shape, its reference, its cost, and the peers timed beside the versions (cuBLAS bf16 on the
same weights dequantized, PyTorch's tinygemm on the same INT4 codes). Shapes are (M, K, N); the GEMV's M
is 1. Everything random comes from the ladder's seeded generator. The end of the module reads the ladders
back from the record: times, the time-vs-bytes points, the tables against TARGETS.md's bars, the roofline."""
from __future__ import annotations

import numpy as np

from utils.ladder import Case, Ladder, shape_name
from utils.table import Table

from .formats import (
    BF16,
    GROUP,
    dequantize_int4,
    gemm_bf16_nbytes,
    gemm_nbytes,
    gemv_nbytes,
    gemv_reference,
    pack_gemv_tiled,
    pack_gptq,
    pack_mma,
    pack_tinygemm,
    random_int4_problem,
    unpack_nibbles,
)
from .gemm import GEMM
from .gemv import GEMV

GEMV_ODD = [(1, 128, 40), (1, 1152, 1040), (1, 4224, 4104)]          # partial tiles, one and 33 groups
GEMM_ODD = [(1, 128, 48), (5, 384, 272), (17, 1152, 80), (37, 256, 1040), (64, 1152, 400)]


def int4_weights(K: int, N: int, rng: np.random.Generator):
    """(q, z, s) on the GPU from one draw of ``rng``."""
    return random_int4_problem(K, N, seed=int(rng.integers(2**31)))


def activations(M: int, K: int, rng: np.random.Generator):
    import cupy
    return cupy.random.RandomState(int(rng.integers(2**31))).standard_normal((M, K), dtype=cupy.float32).astype(BF16)


def make_gemv(shape, dtype, rng) -> Case:
    """(x, qweight, qzeros, scales, out) in GPTQ's layout, and the copies v4 (qmma) and v6 (qtiled) read."""
    import cupy
    M, K, N = shape
    if M != 1:
        raise ValueError(f"the GEMV ladder takes M = 1, got shape {shape}")
    q, z, s = int4_weights(K, N, rng)
    qweight, qzeros = pack_gptq(q, z)
    kw = {"qtiled": pack_gemv_tiled(qweight)}
    if N % 16 == 0:
        kw["qmma"] = pack_mma(q)
    return Case((activations(1, K, rng), qweight, qzeros, s, cupy.empty((1, N), BF16)), outputs=(4,), kwargs=kw)


def make_gemm(shape, dtype, rng) -> Case:
    """(a, qmma, qzeros, scales, out): the weights shuffled into mma B-fragment order."""
    import cupy
    M, K, N = shape
    q, z, s = int4_weights(K, N, rng)
    return Case((activations(M, K, rng), pack_mma(q), pack_gptq(q, z)[1], s, cupy.empty((M, N), BF16)), outputs=(4,))


def codes(case: Case):
    """(q [K, N], z [K/128, N], s) of a case, unpacked from what the kernels read."""
    _, w, qzeros, s = case.args[:4]
    z = unpack_nibbles(qzeros, 1)
    if w.ndim == 2:                                               # GPTQ qweight
        return unpack_nibbles(w, 0), z, s
    return mma_codes(w), z, s


def mma_codes(qmma):
    """The inverse of pack_mma: q [K, N] from qmma [N/16, K/64, 32, 4] (exact)."""
    from .formats import array_module, mma_fragment_map
    xp = array_module(qmma)
    nt, kc = int(qmma.shape[0]), int(qmma.shape[1])
    words = qmma.view(xp.uint32).transpose(1, 3, 0, 2).reshape(kc * 4, nt, 32)     # [K/16, N/16, 32]
    dk, dn = (xp.asarray(m) for m in mma_fragment_map())
    q = xp.zeros((kc * 4, nt, 16, 16), dtype=xp.uint8)                              # [kt, nt, dk, dn]
    lanes = xp.arange(32)
    for i in range(8):
        q[:, :, dk[lanes, i], dn[lanes, i]] = ((words >> (4 * i)) & 0xF).astype(xp.uint8)
    return xp.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(kc * 64, nt * 16))


def dense_weights(case: Case):
    """W [K, N] fp32 holding exactly the bf16 values the kernels' B fragments (and cuBLAS's W) hold."""
    import cupy
    q, z, s = codes(case)
    return dequantize_int4(q, s, z).astype(BF16).astype(cupy.float32)


def gemv_ref(case: Case):
    x, qweight, qzeros, s = case.args[:4]
    return gemv_reference(x, qweight, qzeros, s)


def gemm_ref(case: Case):
    import cupy
    return case.args[0].astype(cupy.float32) @ dense_weights(case)


def cublas_peer(case: Case):
    """cuBLAS bf16 (cupy.matmul) on the same weights dequantized to bf16: what a reader would otherwise run."""
    import cupy
    a, out = case.args[0], case.args[4]
    w = dense_weights(case).astype(BF16)
    y = cupy.empty(out.shape, BF16)
    return lambda: cupy.matmul(a, w, out=y)


def tinygemm_peer(case: Case):
    """PyTorch's own W4A16 kernel (torch._weight_int4pack_mm, tinygemm) on the same INT4 codes. Returns the
    torch tensor: the ladder views it as a CuPy array only in the check, outside the timed call."""
    import torch

    from utils.arrays import as_torch
    q, z, s = codes(case)
    w, sz = pack_tinygemm(q, z, s)
    a = as_torch(case.args[0])
    return lambda: torch._weight_int4pack_mm(a, w, GROUP, sz)


def gemv_cost(shape, dtype) -> int:
    return gemv_nbytes(shape[1], shape[2])


def gemm_cost(shape, dtype) -> int:
    return gemm_nbytes(*shape)


def peers(tinygemm: bool) -> dict:
    out = {"cublas_bf16": cublas_peer}
    if tinygemm:
        out["torch_int4pack_mm"] = tinygemm_peer
    return out


def gemv_ladder(rec, shapes, *, seed: int = 9, tinygemm: bool = True) -> Ladder:
    """The GEMV ladder: checked on GEMV_ODD, timed on ``shapes`` beside a copy of the same bytes."""
    return Ladder(rec, GEMV, shapes=shapes, dtypes=["bfloat16"], make=make_gemv, reference=gemv_ref,
                  nbytes=gemv_cost, odd_shapes=GEMV_ODD, peers=peers(tinygemm), ceiling="same_bytes", seed=seed)


def gemm_ladder(rec, shapes, *, seed: int = 9, tinygemm: bool = True) -> Ladder:
    """The GEMM ladder: checked on GEMM_ODD (M = 1 .. 64), timed on ``shapes`` beside a copy of the same bytes."""
    return Ladder(rec, GEMM, shapes=shapes, dtypes=["bfloat16"], make=make_gemm, reference=gemm_ref,
                  nbytes=gemm_cost, odd_shapes=GEMM_ODD, peers=peers(tinygemm), ceiling="same_bytes", seed=seed)


def measure_read_same_bytes(rec, nbytes: int) -> dict:
    """A read of ``nbytes`` (``cupy.sum`` of that many bytes of fp32, CUB's reduction: reads once, writes one
    value), recorded as op ``read_same_bytes``: the ceiling TARGETS.md sets for the batch-1 GEMV, which reads
    its ledger's bytes and writes almost nothing."""
    import cupy
    n = max(1, int(nbytes) // 4)
    buf = cupy.random.RandomState(n % 2**31).standard_normal(n, dtype=cupy.float32)
    want = float(buf.sum())

    def check():
        got = float(out["sum"])
        if abs(got - want) > 1e-3 * (abs(want) + n ** 0.5):
            raise AssertionError(f"read_same_bytes: sum {got} != {want}")

    out = {}

    def run():
        out["sum"] = buf.sum()

    return rec.time("read_same_bytes", "cupy.sum", run, dtype="float32", shape=(n,), nbytes=n * 4, is_peer=True,
                    check=check)


# --- reading the two ladders back from the record -----------------------------------------------------

def us(ladder: Ladder, impl: str, shape, dtype: str = "bfloat16") -> float:
    """The recorded time of ``impl`` on ``shape`` in µs (any ladder of the op reads the same record)."""
    e = ladder.entry(impl, shape, dtype)
    if e is None:
        raise KeyError(f"{ladder.registry.op}: nothing recorded for {impl} on {shape_name(shape)} {dtype}")
    return e["ms"] * 1e3


def time_vs_bytes(ladder: Ladder, impls, shapes) -> dict[str, list[tuple[int, float]]]:
    """{impl: [(ledger bytes, µs), ...] sorted by bytes} for the GEMV's ``impls`` on ``shapes``: the points of
    the time-vs-bytes plot and of its line fit. Bytes are the INT4 ledger's for every impl."""
    return {impl: sorted((gemv_nbytes(s[1], s[2]), us(ladder, impl, s)) for s in shapes) for impl in impls}


def read_table(rec, ladder: Ladder, impl: str, shapes) -> tuple[Table, dict, dict]:
    """Measure a read of each GEMV shape's ledger bytes (:func:`measure_read_same_bytes`, recorded) and set
    ``impl`` beside it and beside cuBLAS. Returns (table, {shape: read time / impl's time},
    {shape: impl's speed-up over cuBLAS})."""
    reads = {s: measure_read_same_bytes(rec, gemv_nbytes(s[1], s[2]))["ms"] * 1e3 for s in shapes}
    return read_rows(ladder, impl, reads)


def read_rows(ladder: Ladder, impl: str, reads: dict) -> tuple[Table, dict, dict]:
    """The table of :func:`read_table` from the read times (µs by shape) already measured."""
    of_read = {s: reads[s] / us(ladder, impl, s) for s in reads}
    vs_cublas = {s: ladder.ratio(impl, "cublas_bf16", s, "bfloat16") for s in reads}
    table = Table(["shape", "same-bytes read (us)", f"{impl} of read", "vs cuBLAS"],
                  [[shape_name(s), f"{reads[s]:.1f}", f"{of_read[s]:.0%}", f"{vs_cublas[s]:.2f}x"] for s in reads])
    return table, of_read, vs_cublas


def bars_table(ladder: Ladder, shapes, bars: dict, peer: str = "cublas_bf16") -> tuple[Table, dict]:
    """Per shape the fastest version, its speed-up over ``peer`` and the bar TARGETS.md sets for that M
    (``bars`` by M). Returns (table, {shape: speed-up})."""
    x = {s: ladder.ratio(ladder.best(s, "bfloat16"), peer, s, "bfloat16") for s in shapes}
    table = Table(["shape", "fastest version", f"vs {peer}", "bar"],
                  [[shape_name(s), ladder.best(s, "bfloat16"), f"{x[s]:.2f}x", f"{bars[s[0]]}x"] for s in shapes])
    return table, x


def roofline_points(ladders_by_m, K: int, N: int) -> list[dict]:
    """Roofline entries for each (ladder, M): the fastest of ours, cuBLAS bf16 and tinygemm on (M, K, N),
    each with its FLOPs and the bytes it really reads (cuBLAS reads bf16 weights, the others INT4).
    One legend series per implementation (ours: the fastest version at that M), the M as each point's tag."""
    points = []
    for lad, M in ladders_by_m:
        shape = (M, K, N)
        ours = lad.best(shape, "bfloat16")
        for impl in (ours, "cublas_bf16", "torch_int4pack_mm"):
            e = lad.entry(impl, shape, "bfloat16")
            nbytes = gemm_bf16_nbytes(M, K, N) if impl == "cublas_bf16" else gemm_nbytes(M, K, N)
            series = "ours (fastest version)" if impl == ours else f"{impl} (peer)"
            points.append(dict(e, op="w4a16", impl=f"M={M}: {impl}", flops=2.0 * M * K * N, bytes=nbytes,
                               series=series, tag=f"M={M}"))
    return points
