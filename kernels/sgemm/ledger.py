"""Chapter 10's ledger of the fp32 GEMM, written before any kernel: FLOPs, minimum bytes, arithmetic intensity
and the floor time of each shape under chapter 2's measured ceilings, and the shapes placed on the roofline.

Shapes are ``M x N x K``. The LLM shapes are those of a 7B model with hidden size 4096 (Llama-2-7B: 32
heads of 128, so the fused Q, K, V projection has N = 3 x 4096; MLP intermediate size 11008): prefill of
8192 tokens, and decode at M = 1..16 tokens, where the same weights serve a handful of rows.
"""
from __future__ import annotations

from utils.ladder import shape_name
from utils.table import Table

from . import flops, intensity, nbytes

HIDDEN = 4096
MLP = 11008
TOKENS = 8192
SQUARE = [(n, n, n) for n in (1024, 2048, 4096, 8192)]
QKV = (TOKENS, 3 * HIDDEN, HIDDEN)
MLP_UP = (TOKENS, MLP, HIDDEN)
DECODE = [(m, 3 * HIDDEN, HIDDEN) for m in (1, 4, 16)]

# name -> shape, in the ledger's order
SHAPES = {
    **{f"square {n}": s for n, s in zip((1024, 2048, 4096, 8192), SQUARE)},
    "QKV projection, prefill": QKV,
    "MLP up-projection, prefill": MLP_UP,
    **{f"QKV projection, decode M={s[0]}": s for s in DECODE},
}
TAGS = {**{f"square {n}": f"{n}^3" for n in (1024, 2048, 4096, 8192)}, "QKV projection, prefill": "QKV",
        "MLP up-projection, prefill": "MLP up", **{f"QKV projection, decode M={s[0]}": f"M={s[0]}" for s in DECODE}}


def measured_ceilings() -> dict:
    """Chapter 2's measured ceilings ({'copy': GB/s, 'fma_fp32': TFLOP/s, ...}, utils.hardware.ceilings). Where
    BOOK_RESULTS points the record elsewhere (a verification pass) and chapter 2 has not run there, the
    repository's stored record of chapter 2 on this GPU."""
    from utils.hardware import CEILING_IMPLS, ceilings
    from utils.paths import REPO
    try:
        return ceilings()
    except LookupError:
        from utils.gpu import gpu_slug
        from utils.record import load
        entries = load(gpu_slug(), "02-hopper-architecture", root=REPO / "results")
        out = {}
        for name, impl in CEILING_IMPLS.items():
            hits = [e["metric"] for e in entries if e["impl"] == impl]
            if hits:
                out[name] = max(hits)
        if not out:
            raise
        return out


def floor_us(shape, ceil: dict) -> tuple[float, float]:
    """(time of the FLOPs at the FMA ceiling, time of the minimum bytes at the copy ceiling), µs."""
    return flops(*shape) / (ceil["fma_fp32"] * 1e12) * 1e6, nbytes(*shape) / (ceil["copy"] * 1e9) * 1e6


def ridge(ceil: dict) -> float:
    """FLOP per byte where the copy line meets the FMA ceiling."""
    return ceil["fma_fp32"] * 1e12 / (ceil["copy"] * 1e9)


def bound(shape, ceil: dict) -> str:
    """'compute' where the FLOPs take longer than the minimum bytes, else 'memory'."""
    t_flops, t_bytes = floor_us(shape, ceil)
    return "compute" if t_flops >= t_bytes else "memory"


def ledger_table(ceil: dict, shapes: dict | None = None) -> Table:
    """Per shape: GFLOP, minimum MB, FLOP/B, the two floor times and which one binds."""
    rows = []
    for name, s in (shapes or SHAPES).items():
        t_flops, t_bytes = floor_us(s, ceil)
        rows.append([shape_name(s), name, f"{flops(*s) / 1e9:,.1f}", f"{nbytes(*s) / 1e6:,.1f}",
                     f"{intensity(*s):,.1f}", f"{t_flops:,.1f}", f"{t_bytes:,.1f}", bound(s, ceil)])
    return Table(["M x N x K", "what", "GFLOP", "min MB", "FLOP/B", "FMA floor µs", "copy floor µs", "bound by"], rows,
                 caption=f"fp32 GEMM ledger: FMA ceiling {ceil['fma_fp32']:.1f} TFLOP/s, copy {ceil['copy']:.0f} GB/s "
                         f"(chapter 2); ridge {ridge(ceil):.1f} FLOP/B", align="ll" + "r" * 5 + "l")


def ledger_points(ceil: dict, shapes: dict | None = None) -> list[dict]:
    """Each shape as a roofline entry at its floor time (so it sits on the roof): squares and LLM shapes as two
    series, a short tag per point."""
    pts = []
    for name, s in (shapes or SHAPES).items():
        ms = max(floor_us(s, ceil)) / 1e3
        series = "square (floor)" if name.startswith("square") else "LLM shapes (floor)"
        pts.append({"op": "sgemm", "impl": name, "is_peer": False, "flops": flops(*s), "bytes": nbytes(*s), "ms": ms,
                    "series": series, "tag": TAGS.get(name, shape_name(s))})
    return pts
