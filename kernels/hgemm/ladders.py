"""Chapter 12's measurements over the hgemm registry: the ladder (utils.ladder.Ladder) with its peers, the
ceiling of ``mma.sync`` on this GPU, the v3 sweep, and the SASS census.

Every version and peer gets the same standard-normal bf16 A and B of a shape (the card's clocks follow the
data, DESIGN.md), and C poisoned with NaN before every checked run. The peers are cuBLAS's bf16 GEMM through
``cupy.matmul`` and ``torch.matmul``, both fp32-accumulating with a bf16 result, like the versions.
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np

from utils.ladder import Case, Ladder, shape_name
from utils.version import Registry
from utils.table import Table

from . import HGEMM, PEAK_CHAINS, PEAK_SOURCE, V3_CONFIGS, flops, nbytes, problem, reference

PEERS = ("cupy.matmul", "torch.matmul")
HIDDEN, MLP, TOKENS = 4096, 11008, 8192   # a 7B model (Llama-2-7B) at 8192 tokens, as chapter 10's ledger
SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]       # the bars' shapes
QKV = (TOKENS, 3 * HIDDEN, HIDDEN)
MLP_UP = (TOKENS, MLP, HIDDEN)
UNALIGNED = (4095, 4097, 4095)   # leading dimensions that are not multiples of 8: cuBLAS leaves its fast path
PADDED = (UNALIGNED[0], -(-UNALIGNED[1] // 8) * 8, -(-UNALIGNED[2] // 8) * 8)   # the GEMM the fallback runs there
PADDED_IMPL = "v3_pipeline[padded]"
SHAPES = [*SQUARE, QKV, MLP_UP, UNALIGNED]
TAGS = {SQUARE[0]: "4096^3", SQUARE[1]: "8192^3", QKV: "QKV", MLP_UP: "MLP up", UNALIGNED: "4095x4097x4095"}
LEDGER = {"square 4096": SQUARE[0], "square 8192": SQUARE[1], "QKV projection, prefill": QKV,
          "MLP up-projection, prefill": MLP_UP, "unaligned leading dimensions": UNALIGNED}
AMPERE_BAR, AMPERE_GOAL = 0.55, 0.70       # TARGETS.md: the mma.sync GEMM against cuBLAS at 4096^3 and 8192^3
UNALIGNED_BAR, UNALIGNED_GOAL = 1.0, 2.5   # TARGETS.md: against cuBLAS at 4095 x 4097 x 4095
HOPPER_BAR, HOPPER_GOAL = 0.90, 1.03       # TARGETS.md: the wgmma GEMM against cuBLAS (the goal at 4096^3)
# Checked (fresh inputs, C poisoned) before any timing: single elements, one row, K below one k16 step, tails of
# every tile in M, N and K, and the unaligned shape's cousins.
ODD_SHAPES = [(1, 1, 1), (37, 199, 1823), (1, 4096, 4096), (199, 37, 4095), (33, 65, 7), (4095, 4097, 1023)]


def make(shape, dtype, rng) -> Case:
    """(a, b, c): standard-normal bf16 A [M, K] and B [K, N] from ``rng``, C [M, N] uninitialised (the ladder
    poisons it before every checked run). The ladder's dtype is bfloat16 by construction."""
    import cupy

    from utils.arrays import bf16, random_normal
    M, N, K = shape
    a = random_normal((M, K), "bfloat16", seed=int(rng.integers(2**31)))[0]
    b = random_normal((K, N), "bfloat16", seed=int(rng.integers(2**31)))[0]
    return Case((a, b, cupy.empty((M, N), dtype=bf16())), outputs=(2,))


def ladder_reference(case: Case):
    a, b, _ = case.args
    return reference(a, b)


def cublas_peer(case: Case):
    """cuBLAS bf16 (``cupy.matmul``: fp32 accumulation, bf16 out) on the case's A and B, into its own output."""
    import cupy
    a, b, c = case.args
    out = cupy.empty_like(c)
    return lambda: cupy.matmul(a, b, out=out)


def torch_peer(case: Case):
    """``torch.matmul`` on the same memory (DLPack, no copy). Returns the torch tensor: the ladder views it as a
    CuPy array only in the check, outside the timing."""
    import torch

    from utils.arrays import as_torch
    a, b, c = (as_torch(x) for x in case.args)
    out = torch.empty_like(c)
    return lambda: torch.matmul(a, b, out=out)


def peers(names=PEERS) -> dict:
    every = {"cupy.matmul": cublas_peer, "torch.matmul": torch_peer}
    return {n: every[n] for n in names}


def ladder(rec, shapes=None, *, seed: int = 12, peer_names=PEERS, registry=HGEMM) -> Ladder:
    """Chapter 12's ladder: checked on :data:`ODD_SHAPES`, timed on ``shapes`` (default :data:`SHAPES`) beside the
    peers, in TFLOP/s; every entry also carries the minimum bytes, for the roofline. ``registry`` replaces
    :data:`HGEMM` for a ladder of variants (:func:`time_release_cluster`)."""
    return Ladder(rec, registry, shapes=list(shapes or SHAPES), dtypes=["bfloat16"], make=make,
                  reference=ladder_reference, nbytes=lambda s, dt: nbytes(*s), flops=lambda s, dt: flops(*s),
                  odd_shapes=ODD_SHAPES, peers=peers(peer_names), ceiling=None, seed=seed)


def floor_us(shape, ceil: dict) -> tuple[float, float]:
    """(time of the FLOPs at chapter 2's cuBLAS bf16 ceiling, time of the minimum bytes at the copy ceiling), µs."""
    return flops(*shape) / (ceil["cublas_bf16"] * 1e12) * 1e6, nbytes(*shape) / (ceil["copy"] * 1e9) * 1e6


def ledger_table(ceil: dict, shapes: dict | None = None) -> Table:
    """Per shape: GFLOP, minimum MB, FLOP/B, the two floor times and which one binds."""
    rows = []
    for name, s in (shapes or LEDGER).items():
        t_flops, t_bytes = floor_us(s, ceil)
        rows.append([shape_name(s), name, f"{flops(*s) / 1e9:,.0f}", f"{nbytes(*s) / 1e6:,.0f}",
                     f"{flops(*s) / nbytes(*s):,.0f}", f"{t_flops:,.0f}", f"{t_bytes:,.0f}",
                     "compute" if t_flops >= t_bytes else "memory"])
    return Table(["M x N x K", "what", "GFLOP", "min MB", "FLOP/B", "bf16 floor µs", "copy floor µs", "bound by"], rows,
                 caption=f"bf16 GEMM ledger: cuBLAS bf16 ceiling {ceil['cublas_bf16']:.0f} TFLOP/s, copy "
                         f"{ceil['copy']:.0f} GB/s (chapter 2); ridge {ceil['cublas_bf16'] * 1e3 / ceil['copy']:.0f} FLOP/B",
                 align="ll" + "r" * 5 + "l")


def roofline_points(lad: Ladder, impls, shapes) -> list[dict]:
    """Roofline entries of ``impls`` on ``shapes``, one legend series per impl, the shape as each point's tag."""
    pts = []
    for impl in impls:
        for s in shapes:
            e = lad.entry(impl, s, "bfloat16")
            if e is not None:
                pts.append({**e, "series": impl + (" (peer)" if e["is_peer"] else ""),
                            "tag": TAGS.get(tuple(s), shape_name(s))})
    return pts


def bar_table(lad: Ladder, labels, shapes=SQUARE, peer: str = "cupy.matmul") -> Table:
    """Each version's TFLOP/s and fraction of cuBLAS on the bar's shapes, this run."""
    rows = []
    for lab in labels:
        row = [lab]
        for s in shapes:
            row += [f"{tflops(lad, lab, s):.0f}", f"{lad.ratio(lab, peer, s, 'bfloat16'):.2f}"]
        rows.append(row)
    rows.append([peer, *[x for s in shapes for x in (f"{tflops(lad, peer, s):.0f}", "1.00")]])
    cols = ["version", *[c for s in shapes for c in (f"{shape_name(s)} TFLOP/s", "of cuBLAS")]]
    return Table(cols, rows, caption=f"every version against {peer} (cuBLAS bf16), one run", align="l" + "r" * (len(cols) - 1))


def tflops(lad: Ladder, impl: str, shape) -> float:
    e = lad.entry(impl, shape, "bfloat16")
    if e is None:
        raise KeyError(f"hgemm: nothing recorded for {impl} on {shape_name(shape)}")
    return e["metric"]


# --- v3's sweep: every config timed in this run --------------------------------------------------------

def against_prediction(value: float, low: float, high: float) -> str:
    """Where a measured ratio lies against the range the chapter predicted before the run, in the chapter's
    words: inside it, or below or above it."""
    if value < low:
        return "低于预测"
    return "高于预测" if value > high else "落在预测之内"


def config_impl(c) -> str:
    """The record's impl name of one v3 config: ``v3_pipeline[128,256,32,64,64,3,8]``."""
    return f"v3_pipeline[{','.join(str(x) for x in c)}]"


def sweep(lad: Ladder, shapes, configs=V3_CONFIGS) -> dict:
    """Time every v3 config on every shape in this run (a progress bar; each checked against float64 after
    its timing), each recorded under :func:`config_impl`. Returns {shape: fastest config}. The chapter's v3
    is the fastest config of this run, per shape; the others stay in the record."""
    from tqdm.auto import tqdm
    for shape, c in tqdm([(tuple(s), c) for s in shapes for c in configs], desc="hgemm v3 configs"):
        lad.time("v3_pipeline", [shape], config=c, impl=config_impl(c), extra={"swept": True})
    return {tuple(s): best_config(lad, s, configs) for s in shapes}


def best_config(lad: Ladder, shape, configs=V3_CONFIGS):
    return max(configs, key=lambda c: tflops(lad, config_impl(c), shape))


def sweep_table(lad: Ladder, shapes, configs=V3_CONFIGS) -> Table:
    rows = []
    for c in configs:
        rows.append([f"{c.bm}x{c.bn}x{c.bk}", f"{c.wm}x{c.wn}", str(c.stages), str((c.bm // c.wm) * (c.bn // c.wn)),
                     f"{2 * c.stages * (c.bm * c.bk + c.bk * c.bn) // 1024}",
                     *[f"{tflops(lad, config_impl(c), s):.0f}" for s in shapes]])
    return Table(["block tile", "warp tile", "stages", "warps", "smem KiB", *[f"{shape_name(s)} TFLOP/s" for s in shapes]],
                 rows, caption="v3's configs, each timed in this run")


# --- the ceiling of mma.sync ----------------------------------------------------------------------------

PEAK_THREADS = 256


def peak_fragments(seed: int):
    """Random bf16 A [16, 16] and B [16, 8] (float64 copies of the bf16 values) and the (32, 6) uint32 registers
    each lane feeds the mma: A's four, then B's two (kernels.mma.fragments' layouts)."""
    from kernels.mma import fragments as F
    from utils.arrays import bf16
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((16, 16)).astype(bf16()).astype(np.float64)
    B = rng.standard_normal((16, 8)).astype(bf16()).astype(np.float64)
    regs = np.concatenate([F.pack_bf16_pairs(F.gather(A, F.mma_a_layout())),
                           F.pack_bf16_pairs(F.gather(B, F.mma_b_layout()))], axis=1)
    return A, B, regs


def time_mma_peak(rec, *, iters: int = 4096, blocks_per_sm: int = 2, seed: int = 121) -> dict:
    """The mma.sync ceiling: ``blocks_per_sm`` x SMs blocks of 8 warps, each warp ``iters`` x PEAK_CHAINS
    mma.sync.m16n8k16 (4096 FLOPs each). Checked: warp 0's sum equals PEAK_CHAINS * iters * A @ B (relative
    1e-3). Recorded as impl ``mma.sync peak``, shape (blocks, iters)."""
    import cupy

    from utils.check import assert_close
    from utils.hardware import facts
    A, B, regs = peak_fragments(seed)
    fn = PEAK_SOURCE.function(f"hgemm_mma_peak<{PEAK_CHAINS}>")
    frags = cupy.asarray(regs.astype(np.uint32))
    D = cupy.full((16, 8), np.nan, dtype=cupy.float32)
    blocks = blocks_per_sm * facts().sms

    def run():
        fn((blocks,), (PEAK_THREADS,), (frags, np.int32(iters), D))

    def check():
        assert_close(D, PEAK_CHAINS * iters * (A @ B), tol=1e-3, name=f"mma.sync peak (seed {seed})")
    work = blocks * (PEAK_THREADS // 32) * iters * PEAK_CHAINS * 2 * 16 * 8 * 16
    return rec.time("hgemm", "mma.sync peak", run, dtype="bfloat16", shape=(blocks, iters), flops=work,
                    check=check, flush=False)


# --- resources (NVRTC's ptxas report, no GPU needed) -----------------------------------------------------

def resources(version, config=None, facts=None) -> dict:
    """Registers, shared memory and the blocks and warps an SM holds for one version's 16-byte instance at
    4096^3 (``config``: the version's default when None)."""
    from utils.build import compile_source
    from utils.occupancy import from_function

    from . import shape_problem
    c = config or version.default(None)
    (ln,) = version.launches(shape_problem(*SQUARE[0]), c)
    comp = compile_source(version.source)
    rep = comp.report[comp.symbols[ln.kernel]]
    threads = ln.block[0]
    occ = from_function(rep, threads, ln.smem, facts)
    return {"kernel": ln.kernel, "threads": threads, "registers": int(rep["registers"]),
            "smem_kib": (int(rep["smem_bytes"]) + ln.smem) / 1024, "blocks": occ.blocks, "warps": occ.warps,
            "limiter": occ.limiter}


def resources_table(versions, configs: dict | None = None, facts=None) -> Table:
    rows = []
    for v in versions:
        r = resources(v, (configs or {}).get(v.label), facts)
        rows.append([v.label, r["kernel"].split("<", 1)[1].rstrip(">"), str(r["threads"]), str(r["registers"]),
                     f"{r['smem_kib']:.0f}", str(r["blocks"]), str(r["warps"]), r["limiter"]])
    return Table(["version", "template arguments", "threads", "registers", "smem KiB", "blocks/SM", "warps/SM",
                  "limited by"], rows, caption="each version at 4096^3 (v0-v3: the 16-byte instance): ptxas report and occupancy",
                 align="ll" + "r" * 5 + "l")


# --- SASS -------------------------------------------------------------------------------------------------

def sass_counts(version, config=None, vec: bool = True) -> dict:
    """Opcode counts (the part before the first dot: HMMA, LDSM, LDGSTS, ...) in the SASS of one instance of a
    version (its default config, the 16-byte instance unless ``vec`` is False). Needs cuobjdump (GPU hosts)."""
    from kernels.quant import sass_ops
    from utils.build import sass

    from . import shape_problem
    p = shape_problem(4096, 4096, 4096)
    (ln,) = version.launches(p, config)
    name = ln.kernel if vec else ln.kernel.replace(", true>", ", false>")
    return dict(collections.Counter(op.split(".")[0] for op in sass_ops(sass(version.source, name))))


def sass_table(versions, keep=("HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "UTMASTG", "STG", "SYNCS", "BAR")) -> Table:
    rows = []
    for v in versions:
        counts = sass_counts(v)
        rows.append([v.label, *[str(counts.get(k, 0)) for k in keep]])
    return Table(["version", *keep], rows,
                 caption="static instruction counts in each version's SASS (v0-v3: the 16-byte instance)")


# --- v7's remote arrivals at cluster scope ---------------------------------------------------------------

RELEASE_CLUSTER_IMPL = "v7_multicast[release.cluster]"
RELEASE_CLUSTER_DEFINE = ("CLUSTER_ARRIVE_RELEASE_CLUSTER", "1")    # kernels/include/cluster_sm90.cuh


def release_cluster_variant():
    """v7 compiled with its remote arrivals spelled ``mbarrier.arrive.release.cluster``."""
    v = HGEMM["v7_multicast"]   # alone in a registry of its own, so without v7's parent
    return dataclasses.replace(v, source=dataclasses.replace(v.source, defines=(RELEASE_CLUSTER_DEFINE,)), parent=None)


def time_release_cluster(lad: Ladder, shapes=SQUARE) -> list[dict]:
    """Time :func:`release_cluster_variant` as impl :data:`RELEASE_CLUSTER_IMPL` on ``lad``'s record, on the same
    seeded data (a ladder of its own with ``lad``'s seed and no peers)."""
    variant = ladder(lad.rec, shapes, seed=lad.seed, peer_names=(),
                     registry=Registry("hgemm", problem, [release_cluster_variant()]))
    return variant.time("v7_multicast", shapes, impl=RELEASE_CLUSTER_IMPL)


def sass_before(version, opcode: str, lines: int = 6) -> str:
    """The first instruction of the SASS of ``version`` (default config, 4096^3) whose opcode starts with
    ``opcode``, with the ``lines`` instructions before it, addresses and encodings dropped. Needs cuobjdump."""
    from utils.build import sass

    from . import shape_problem
    (ln,) = version.launches(shape_problem(4096, 4096, 4096))
    code = [ln_.split("*/", 1)[1].split("/*")[0].strip().rstrip(";").strip()
            for ln_ in sass(version.source, ln.kernel).splitlines() if ln_.strip().startswith("/*") and "*/" in ln_]
    code = [c for c in code if c]
    at = next(i for i, c in enumerate(code) if c.split()[0].startswith(opcode))
    return "\n".join(code[max(0, at - lines):at + 1])


def time_padded_gemm(lad: Ladder) -> list[dict]:
    """v3's default config alone on :data:`PADDED` (impl :data:`PADDED_IMPL`): the GEMM inside the Hopper versions'
    fallback on :data:`UNALIGNED`, so the copies' share is the difference."""
    from . import V3_DEFAULT
    return lad.time("v3_pipeline", [PADDED], config=V3_DEFAULT, impl=PADDED_IMPL)
