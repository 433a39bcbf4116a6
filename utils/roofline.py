"""Plots drawn from record entries: the roofline, and bandwidth against the copy ceiling.

Labels are in English so that plots render without CJK fonts.
"""
from __future__ import annotations


def _label(e: dict, with_shape: bool = False) -> str:
    shape = " " + "x".join(str(s) for s in e["shape"]) if with_shape else ""
    return e["impl"] + shape + (" (peer)" if e.get("is_peer") else "")


def _labels(entries) -> list[str]:
    """Labels that tell entries apart: the op is added where one impl name serves several ops, the
    shape where one impl appears more than once within an op."""
    ops_of: dict[str, set] = {}
    for e in entries:
        ops_of.setdefault(e["impl"], set()).add(e["op"])
    keys = [(e["op"], e["impl"]) for e in entries]
    out = []
    for e, k in zip(entries, keys):
        name = _label(e, keys.count(k) > 1)
        out.append(f"{e['op']}: {name}" if len(ops_of[e["impl"]]) > 1 else name)
    return out


def _place_labels(ax, xs, ys, names, fontsize: float = 8) -> None:
    """Annotate points so that labels do not overlap: highest point first, each later label moved
    down until its box (estimated from its length, in display pixels) clears every placed one."""
    ax.autoscale_view()
    to_px = ax.transData.transform
    dpi_scale = ax.figure.dpi / 72.0
    h = (fontsize + 3) * dpi_scale
    boxes: list[tuple[float, float, float, float]] = []
    for i in sorted(range(len(xs)), key=lambda k: -ys[k]):
        px, py = to_px((xs[i], ys[i]))
        w = 0.7 * fontsize * dpi_scale * len(names[i]) + 4 * dpi_scale
        x0, dy = px + 6 * dpi_scale, 4 * dpi_scale
        while any(x0 < bx1 and bx0 < x0 + w and py + dy < by1 and by0 < py + dy + h
                  for bx0, by0, bx1, by1 in boxes):
            dy -= h
        boxes.append((x0, py + dy, x0 + w, py + dy + h))
        # a thin leader line keeps each label attached to its point when it had to move down
        ax.annotate(names[i], (xs[i], ys[i]), textcoords="offset pixels", xytext=(6 * dpi_scale, dy),
                    fontsize=fontsize, va="bottom",
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.45", "shrinkA": 0, "shrinkB": 3})


def roofline(entries, ceil: dict, *, title: str = "", ax=None):
    """Arithmetic intensity (FLOP/byte) vs attained TFLOP/s, under the measured ceilings.

    ``ceil`` holds 'copy' (GB/s) and any of 'fma_fp32', 'cublas_bf16' (TFLOP/s). Entries need both
    ``flops`` and ``bytes``. An entry may name its legend ``series`` (default: its impl) and a short
    ``tag`` written beside its point (default: none when series are given, else the full label):
    e.g. series "cublas_bf16 (peer)" and tag "M=16". Our series get the book's version colours, peers
    grey markers (utils.plot).
    """
    import numpy as np

    from . import plot as P
    pts = [e for e in entries if e.get("flops") and e.get("bytes")]
    if not pts:
        raise ValueError("roofline needs entries with both a FLOP and a byte count")
    if ax is None:
        _, grid = P.figure(height=4.4)
        ax = grid[0, 0]
    ai = np.array([e["flops"] / e["bytes"] for e in pts])
    perf = np.array([e["flops"] / (e["ms"] * 1e-3) / 1e12 for e in pts])
    lo, hi = min(ai.min(), 0.1) / 2, max(ai.max(), 1000) * 2
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    bw = ceil["copy"] * 1e9 / 1e12  # TB/s -> TFLOP/s per FLOP/byte
    for name, style in (("fma_fp32", ":"), ("cublas_bf16", "-")):
        if name in ceil:
            ax.plot(x, np.minimum(bw * x, ceil[name]), style, color="0.55", lw=1)
            ridge = ceil[name] / bw
            ax.text(ridge, ceil[name] * 1.15, f"{name} {ceil[name]:.0f} TFLOP/s (ridge {ridge:.0f} FLOP/B)",
                    ha="right", fontsize=P.FONT_PT - 2, color="0.4")
    ax.text(lo * 1.5, bw * lo * 1.5 * 1.3, f"copy {ceil['copy']:.0f} GB/s", fontsize=P.FONT_PT - 2, color="0.4")
    named = any("series" in e for e in pts)
    series = [e.get("series") or _label(e) for e in pts]
    order = list(dict.fromkeys(series))
    peers = [s for s in order if any(e.get("is_peer") for e, s2 in zip(pts, series) if s2 == s)]
    styles = P.series_styles(order, peers=peers)
    for s in order:
        idx = [k for k, s2 in enumerate(series) if s2 == s]
        st = styles[s]
        ax.plot(ai[idx], perf[idx], ls="none", marker=st["marker"], color=st["color"], markersize=7,
                mew=1.6, label=s, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi * 4)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("attained TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(loc="lower right")
    tags = [e.get("tag", "") for e in pts] if named else _labels(pts)
    keep = [k for k, t in enumerate(tags) if t]
    if keep:
        _place_labels(ax, [ai[k] for k in keep], [perf[k] for k in keep], [tags[k] for k in keep],
                      fontsize=P.FONT_PT - 2)
    return ax


def bandwidth_bars(entries, copy_gbps: float, *, title: str = "", ax=None):
    """Attained GB/s of each entry as a bar, with the copy ceiling measured in the same run as a line."""
    import matplotlib.pyplot as plt
    pts = [e for e in entries if e["metric_name"] == "GB/s"]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.45 * len(pts) + 1.2))
    names = _labels(pts)
    vals = [e["metric"] for e in pts]
    colors = ["tab:gray" if e.get("is_peer") else "tab:blue" for e in pts]
    ax.barh(names, vals, color=colors)
    ax.axvline(copy_gbps, color="k", ls="--", lw=1)
    ax.text(copy_gbps, -0.6, f" copy {copy_gbps:.0f} GB/s", fontsize=8, va="bottom")
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.0f} ({v / copy_gbps:.0%})", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (bytes read + written)")
    ax.set_xlim(0, max(vals + [copy_gbps]) * 1.25)
    ax.set_title(title)
    return ax
