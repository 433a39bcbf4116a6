"""Chapter 13's W4A16 ladder (utils.ladder.Ladder over :data:`W4A16_WGMMA`): chapter 9's problem and shapes, timed
beside cuBLAS bf16 on the same weights dequantized and chapter 9's Marlin-style GEMM (``w4a16_gemm`` v2_marlin) on
the same INT4 codes, all on one seeded draw per shape. Also: the configuration sweep, the ablations (the kernel
without its dequant, its wgmmas, or both) and the roofline points, read back from the record."""
from __future__ import annotations

import dataclasses

from kernels.quant import ladders as quant_ladders
from kernels.quant.formats import BF16, gemm_bf16_nbytes, gemm_nbytes, pack_gptq, pack_mma
from kernels.quant.gemm import GEMM
from utils.bench import bench
from utils.ladder import Case, Ladder, shape_name
from utils.table import Table

from . import ABLATIONS, W4A16_WGMMA, ablation, pack_wgmma, rs_configs

K = 8192
SHAPES = [(M, K, n) for n in (8192, 28672) for M in (16, 32, 64)]          # chapter 9's GEMM shapes
# partial n64 slices and BN tiles, one group and nine, M from 1 to 64; N a multiple of 32 (check_shapes)
ODD = [(1, 128, 32), (5, 384, 288), (17, 1152, 96), (37, 256, 1056), (64, 1152, 416)]
MARLIN = "w4a16_gemm_v2_marlin"
BARS = {16: 2.2, 32: 1.8, 64: 1.3}            # TARGETS.md: fastest version / cuBLAS bf16, by M


@dataclasses.dataclass
class W4Case(Case):
    """A case of the wgmma op, with the same problem in chapter 9's layout (qmma), which its kernel and the cuBLAS
    peer read."""
    chapter9: Case | None = None


def make(shape, dtype, rng) -> W4Case:
    """(x, qwgmma, qzeros, scales, out), and chapter 9's (x, qmma, qzeros, scales, out) of the same draw."""
    import cupy
    M, K_, N = shape
    q, z, s = quant_ladders.int4_weights(K_, N, rng)
    x = quant_ladders.activations(M, K_, rng)
    qzeros = pack_gptq(q, z)[1]
    ch9 = Case((x, pack_mma(q), qzeros, s, cupy.empty((M, N), BF16)), outputs=(4,))
    return W4Case((x, pack_wgmma(q), qzeros, s, cupy.empty((M, N), BF16)), outputs=(4,), chapter9=ch9)


def reference(case: W4Case):
    return quant_ladders.gemm_ref(case.chapter9)


def cublas_peer(case: W4Case):
    return quant_ladders.cublas_peer(case.chapter9)


def marlin_peer(case: W4Case):
    """Chapter 9's fastest GEMM at M = 16 (v2_marlin: mma.sync, Marlin's structure) on the same codes."""
    run = GEMM["v2_marlin"].bind(*case.chapter9.args)
    out = case.chapter9.args[4]

    def launch():
        run()
        return out
    return launch


def w4_ladder(rec, shapes=None, *, seed: int = 13) -> Ladder:
    """Checked on ODD (outputs poisoned), timed on ``shapes`` (default SHAPES) beside cuBLAS and Marlin-style."""
    return Ladder(rec, W4A16_WGMMA, shapes=shapes or SHAPES, dtypes=["bfloat16"], make=make, reference=reference,
                  nbytes=quant_ladders.gemm_cost, odd_shapes=ODD,
                  peers={"cublas_bf16": cublas_peer, MARLIN: marlin_peer}, ceiling="same_bytes", seed=seed)


def config_impl(c) -> str:
    return f"v1_rs[{c.tok},{c.consumers},{c.slices},{c.stages}]"


def sweep(lad: Ladder, shapes) -> Table:
    """Every instantiated config on each shape (each entry recorded under :func:`config_impl`): µs and the
    speed-up over cuBLAS, the default config marked."""
    v = W4A16_WGMMA["v1_rs"]
    rows = []
    for shape in shapes:
        case, _, _ = lad.case(shape, "bfloat16")
        problem = v.validate(*case.args)
        default = v.resolve_config(problem, None)
        for c in rs_configs(problem):
            lad.time("v1_rs", [shape], config=c, impl=config_impl(c))
            t = quant_ladders.us(lad, config_impl(c), shape)
            rows.append([shape_name(shape), config_impl(c) + (" (default)" if c == default else ""), f"{t:.1f}",
                         f"{quant_ladders.us(lad, 'cublas_bf16', shape) / t:.2f}x"])
    return Table(["shape", "config [tok, consumers, slices, stages]", "us", "vs cuBLAS"], rows,
                 caption="w4a16_wgmma v1_rs: every configuration, same data and run")


def time_ablations(lad: Ladder, shapes) -> dict:
    """The default config without its dequant, its wgmmas, or both, on the timing data of each shape; recorded as
    impl ``v1_rs (<ablation>)`` (no output check: the outputs are wrong by construction). Returns {(what, shape):
    µs}, "full" included (read from the record)."""
    times = {}
    for shape in shapes:
        case, _, _ = lad.case(shape, "bfloat16")
        times["full", shape] = quant_ladders.us(lad, "v1_rs", shape)
        for what in ABLATIONS:
            t = bench(ablation(what).bind(*case.args))
            lad.rec.add(W4A16_WGMMA.op, f"v1_rs ({what})", dtype="bfloat16", shape=shape, ms=t.ms,
                        nbytes=gemm_nbytes(*shape), p10_ms=t.p10, p90_ms=t.p90, reps=t.n)
            times[what, shape] = t.ms * 1e3
    return times


def ablation_table(times: dict, shapes) -> Table:
    whats = ["full", *ABLATIONS]
    return Table(["shape", *whats], [[shape_name(s), *(f"{times[w, s]:.1f}" for w in whats)] for s in shapes],
                 caption="w4a16_wgmma v1_rs, us: the whole kernel and the kernel without parts of its work")


def roofline_points(lad: Ladder, shapes) -> list[dict]:
    """Roofline entries of ours, Marlin-style and cuBLAS on ``shapes`` with the bytes each really reads (cuBLAS:
    bf16 weights), one series per implementation and the M as each point's tag."""
    points = []
    for shape in shapes:
        M, K_, N = shape
        for impl in ("v1_rs", MARLIN, "cublas_bf16"):
            e = lad.entry(impl, shape, "bfloat16")
            nbytes = gemm_bf16_nbytes(M, K_, N) if impl == "cublas_bf16" else gemm_nbytes(M, K_, N)
            series = "w4a16_wgmma v1_rs (ours)" if impl == "v1_rs" else f"{impl} (peer)"
            points.append(dict(e, op="w4a16", impl=f"M={M}: {impl}", flops=2.0 * M * K_ * N, bytes=nbytes,
                               series=series, tag=f"M={M}"))
    return points


def timeline_stats(t) -> dict:
    """Medians and spread of a :func:`kernels.w4a16_sm90.cta_timeline` (µs): first stage full after the start,
    consumers done (median, 90th percentile, last)."""
    import numpy as np
    done = t[:, 2]
    return {"first_full": float(np.median(t[:, 1] - t[:, 0])), "done_median": float(np.median(done)),
            "done_p90": float(np.percentile(done, 90)), "done_last": float(done.max())}


def plot_timelines(timelines: dict, title: str = ""):
    """One panel per timeline ({label: [CTAs, 3] µs}): a bar per CTA, sorted by when its consumers are done, grey
    from its start until its first stage is full, coloured from there until its consumers are done."""
    import numpy as np

    from utils import plot as P
    fig, axes = P.figure(1, len(timelines), height=3.2, sharex=True)
    for i, (ax, (label, t)) in enumerate(zip(axes[0], timelines.items())):
        order = np.argsort(t[:, 2])
        y = np.arange(len(order))
        ax.barh(y, t[order, 1] - t[order, 0], left=t[order, 0], height=1.0, color="#BBBBBB",
                label="start -> first stage full")
        ax.barh(y, t[order, 2] - t[order, 1], left=t[order, 1], height=1.0, color=P.VERSION_COLORS[i],
                label="-> consumers done")
        ax.set_title(label)
        ax.set_xlabel("us from the first CTA's start")
        ax.legend(loc="upper left", fontsize=8)
    axes[0][0].set_ylabel("CTA (sorted by finish)")
    if title:
        fig.suptitle(title)
    return fig
