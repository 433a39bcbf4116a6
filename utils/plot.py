"""The book's plotting style: one look for every chapter's figures, readable at the column width.

The HTML column is about 784 px wide and figures are saved at 110 dpi, so a figure
:data:`COLUMN_IN` inches wide is shown at its natural size and a 10 pt label stays about 15 px
tall. Wider figures are scaled down and their text shrinks with them: draw several panels
(small multiples) rather than one wide axis.

Our versions get colours from one ordered palette (early versions light, later ones dark, so a
ladder reads left to right); peers (cuBLAS, torch, CuPy, ...) are drawn in greys with their own
markers and dashed lines or hatched bars, so a peer never shares a colour with a version.
"""
from __future__ import annotations

from typing import Sequence

COLUMN_IN = 7.0        # inches: the book's text column at 110 dpi
DPI = 110
FONT_PT = 10

# Colour-blind-safe, ordered (Okabe-Ito, then a few darker tones): the n-th version of a ladder
VERSION_COLORS = ("#56B4E9", "#E69F00", "#009E73", "#CC79A7", "#0072B2", "#D55E00", "#A6761D",
                  "#332288", "#117733", "#882255", "#44AA99", "#AA4499", "#999933", "#661100")
PEER_COLORS = ("#222222", "#777777", "#AAAAAA", "#555555")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p", "d", "8")
PEER_MARKERS = ("x", "+", "H", "*")


def apply_style() -> None:
    """Set matplotlib's defaults to the book's style (setup_notebook calls this)."""
    import matplotlib
    from cycler import cycler
    matplotlib.rcParams.update({
        "figure.dpi": DPI, "savefig.dpi": DPI, "figure.figsize": (COLUMN_IN, 3.6),
        "font.size": FONT_PT, "axes.titlesize": FONT_PT + 1, "axes.labelsize": FONT_PT,
        "xtick.labelsize": FONT_PT - 1, "ytick.labelsize": FONT_PT - 1, "legend.fontsize": FONT_PT - 1,
        "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
        "axes.prop_cycle": cycler(color=VERSION_COLORS[:8]),
        "legend.frameon": False,
        "lines.linewidth": 1.6, "lines.markersize": 5,
    })


def version_style(index: int) -> dict:
    """Colour and marker of the ``index``-th of our versions (stable: v3 looks the same in every plot
    of a chapter when the index is the version's position in its registry)."""
    return {"color": VERSION_COLORS[index % len(VERSION_COLORS)], "marker": MARKERS[index % len(MARKERS)]}


def peer_style(index: int) -> dict:
    """Colour, marker and line of the ``index``-th peer: greys and dashes, never a version's colour."""
    return {"color": PEER_COLORS[index % len(PEER_COLORS)], "marker": PEER_MARKERS[index % len(PEER_MARKERS)],
            "linestyle": "--"}


def series_styles(labels: Sequence[str], peers: Sequence[str] = ()) -> dict[str, dict]:
    """Styles for a mix of versions and peers, in order: versions by position, peers in grey."""
    out, nv, np_ = {}, 0, 0
    for lab in labels:
        if lab in peers:
            out[lab] = peer_style(np_)
            np_ += 1
        else:
            out[lab] = version_style(nv)
            nv += 1
    return out


def figure(rows: int = 1, cols: int = 1, *, height: float = 3.4, width: float = COLUMN_IN, **kw):
    """A figure ``width`` inches wide (the column by default) with ``rows`` x ``cols`` panels of
    ``height`` inches each; returns ``(fig, axes)`` with axes always a 2-D array."""
    import matplotlib.pyplot as plt
    kw.setdefault("squeeze", False)
    kw.setdefault("layout", "constrained")   # only for the book's figures: plt.tight_layout elsewhere still works
    return plt.subplots(rows, cols, figsize=(width, height * rows), **kw)


def grid_shape(n: int, cols: int = 3) -> tuple[int, int]:
    """Rows and columns for ``n`` small multiples, at most ``cols`` across."""
    if n < 1:
        raise ValueError(f"grid_shape needs at least one panel, got {n}")
    c = min(n, cols)
    return -(-n // c), c


def ceiling_line(ax, y: float, label: str, color: str = "k") -> None:
    """A dashed horizontal reference (a copy ceiling, a datasheet peak) labelled at its right end."""
    ax.axhline(y, color=color, ls="--", lw=0.9)
    ax.annotate(label, xy=(1.0, y), xycoords=("axes fraction", "data"), xytext=(-2, 3),
                textcoords="offset points", ha="right", va="bottom", fontsize=FONT_PT - 1, color=color)


def label_points(ax, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str],
                 offsets: Sequence[tuple[float, float]] | None = None) -> None:
    """Label each point with a short leader line, so a label stays attached to its point. Offsets (in
    points) default to alternating above/below, which keeps neighbours apart on a rising curve."""
    for i, (x, y, lab) in enumerate(zip(xs, ys, labels)):
        dx, dy = offsets[i] if offsets else (6, 10 if i % 2 == 0 else -14)
        ax.annotate(lab, xy=(x, y), xytext=(dx, dy), textcoords="offset points", fontsize=FONT_PT - 1,
                    ha="left", va="center", arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.4"})
