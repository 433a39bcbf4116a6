"""Chapter 9's figures, in the book's style (:mod:`utils.plot`). Two pictures drawn from the same
definitions the kernels and tests use: the bf16 bit layout of the magic-number conversion
(``0x4300 | q = 128 + q``) and the nibble order of the mma B fragments
(:func:`kernels.quant.formats.mma_fragment_map`); and the time-vs-bytes plot of the measured copies and
GEMVs. ``draw_*`` draw into a given axis; ``plot_*`` make the figure at the column width. CPU only
(matplotlib)."""
from __future__ import annotations

import numpy as np

from .formats import mma_fragment_map

MAGIC_BF16 = 0x4300                        # 128.0 in bf16: sign 0, exponent 134 = 127 + 7, mantissa 0


def bf16_fields(bits: int) -> tuple[int, int, int]:
    """(sign, biased exponent, mantissa) of a 16-bit bf16 pattern."""
    if not 0 <= bits < 1 << 16:
        raise ValueError(f"expected a 16-bit pattern, got {bits:#x}")
    return bits >> 15, (bits >> 7) & 0xFF, bits & 0x7F


def bf16_value(bits: int) -> float:
    """The value of a normal bf16 pattern (what the magic trick relies on)."""
    s, e, m = bf16_fields(bits)
    return (-1) ** s * 2.0 ** (e - 127) * (1 + m / 128)


def draw_bf16_magic(ax, q: int = 0b1011):
    """16 boxes per row: 128.0 (0x4300), the nibble q in the low mantissa bits, and their OR = 128 + q."""
    from matplotlib.patches import Rectangle
    if not 0 <= q < 16:
        raise ValueError(f"q must be a nibble (0..15), got {q}")
    rows = [("128.0 = 0x4300", MAGIC_BF16), (f"q = {q}", q), (f"0x4300 | q = {bf16_value(MAGIC_BF16 | q):g}", MAGIC_BF16 | q)]
    colour = {"sign": "#d9d9d9", "exponent": "#9ecae1", "mantissa": "#fdd0a2", "nibble": "#fb6a4a"}
    for r, (label, bits) in enumerate(rows):
        y = len(rows) - 1 - r
        for i in range(16):
            bit = (bits >> (15 - i)) & 1
            field = "sign" if i == 0 else "exponent" if i < 9 else "mantissa"
            face = colour["nibble"] if (r > 0 and i >= 12) else colour[field]
            ax.add_patch(Rectangle((i, y), 1, 0.8, facecolor=face, edgecolor="k", lw=0.6))
            ax.text(i + 0.5, y + 0.4, str(bit), ha="center", va="center", fontsize=9)
        ax.text(-0.3, y + 0.4, label, ha="right", va="center", fontsize=9)
    for name, x0, x1 in (("s", 0, 1), ("exponent 134 = 127 + 7", 1, 9), ("mantissa, ulp = 1", 9, 16)):
        ax.text((x0 + x1) / 2, len(rows) - 0.05, name, ha="center", va="bottom", fontsize=8)
    ax.set_xlim(-7, 16.2)
    ax.set_ylim(-0.3, len(rows) + 0.4)
    ax.axis("off")
    ax.set_title("bf16 magic number: OR a nibble into the mantissa of 128.0")
    return ax


def fragment_owner_grid(lane: int) -> np.ndarray:
    """[16 k, 16 n] array: which nibble (0..7) of lane ``lane``'s int32 holds each weight of a k16 x n16
    tile, -1 where the lane holds none."""
    if not 0 <= lane < 32:
        raise ValueError(f"lane must be 0..31, got {lane}")
    dk, dn = mma_fragment_map()
    grid = -np.ones((16, 16), dtype=int)
    for i in range(8):
        grid[dk[lane, i], dn[lane, i]] = i
    return grid


def draw_fragment_order(ax, lanes=(0, 5), first_colour: int = 0):
    """The k16 x n16 weight tile with the 8 nibbles of each of ``lanes`` marked: pairs (i, i + 4) sit at
    rows (2t, 2t + 1) or (2t + 8, 2t + 9) of one column, which is what b0/b1 of mma.m16n8k16 want. Lane j
    of ``lanes`` gets the book's version colour ``first_colour + j``."""
    import matplotlib.pyplot as plt

    from utils.plot import version_style
    ax.set_xlim(0, 16)
    ax.set_ylim(16, 0)
    ax.set_xticks(range(0, 17, 4))
    ax.set_yticks(range(0, 17, 4))
    ax.grid(True, lw=0.3)
    ax.set_aspect("equal")
    for j, lane in enumerate(lanes):
        grid = fragment_owner_grid(lane)
        colour = version_style(first_colour + j)["color"]
        for k, n in zip(*np.nonzero(grid >= 0)):
            ax.add_patch(plt.Rectangle((n, k), 1, 1, color=colour, alpha=0.6))
            ax.text(n + 0.5, k + 0.5, str(grid[k, n]), ha="center", va="center", fontsize=8)
    ax.set_xlabel("n (column of W in the tile)")
    ax.set_ylabel("k (row of W in the tile)")
    ax.set_title(", ".join(f"lane {l} (g={l // 4}, t={l % 4})" for l in lanes))
    return ax


def plot_fragment_order(lanes=(0, 5)):
    """Small multiples: one k16 x n16 tile per lane of ``lanes``, the numbers being nibble i of that lane's
    int32. Returns the figure."""
    from utils.plot import COLUMN_IN, figure, grid_shape
    rows, cols = grid_shape(len(lanes), cols=2)
    fig, axes = figure(rows, cols, height=COLUMN_IN / cols)
    for j, (ax, lane) in enumerate(zip(axes.flat, lanes)):
        draw_fragment_order(ax, lanes=(lane,), first_colour=j)
    for ax in list(axes.flat)[len(lanes):]:
        ax.axis("off")
    fig.suptitle("nibble i of one int32 per lane, in a k16 x n16 tile of W")
    return fig


def plot_bf16_magic(q: int = 0b1011):
    """The bit layout of :func:`draw_bf16_magic` at the column width. Returns the figure."""
    from utils.plot import figure
    fig, axes = figure(1, 1, height=2.4)
    draw_bf16_magic(axes[0, 0], q=q)
    return fig


def plot_time_vs_bytes(moved, us, *, fit=None, series=None, peers=(), marks=None, limit_mb=None, title=""):
    """Time (µs) against MB: the measured copies (``moved`` bytes read + written, ``us``) as grey points, the
    line ``fit`` through them (an object with ``.us(nbytes)``, labelled by its ``str``), ``series``
    ({label: [(bytes, µs), ...]}: GEMV versions in their registry colour, ``peers`` in grey and dashed), and
    dotted vertical ``marks`` ({label: bytes}). ``limit_mb`` crops both axes to [0, limit]. Returns the figure."""
    from utils.plot import figure, peer_style, version_style

    from .gemv import GEMV
    fig, axes = figure(1, 1, height=3.6)
    ax = axes[0, 0]
    moved, us = np.asarray(moved, dtype=float), np.asarray(us, dtype=float)
    copy = peer_style(len(peers))
    ax.plot(moved / 1e6, us, linestyle="none", marker="o", color=copy["color"], label="device copy, same bench")
    if fit is not None:
        xs = np.linspace(0, moved.max(), 50)
        ax.plot(xs / 1e6, [fit.us(x) for x in xs], "-", lw=1, color=copy["color"], label=f"fit: {fit}")
    for label, pts in (series or {}).items():
        style = (peer_style(list(peers).index(label)) if label in peers
                 else version_style(list(GEMV).index(label) if label in GEMV else 0))
        ax.plot([b / 1e6 for b, _ in pts], [t for _, t in pts], label=label, **style)
    for label, nbytes in (marks or {}).items():
        ax.axvline(nbytes / 1e6, color="0.5", ls=":", lw=0.8)
        ax.annotate(" " + label, xy=(nbytes / 1e6, 0.9), xycoords=("data", "axes fraction"), fontsize=8)
    if limit_mb is not None:
        ax.set_xlim(0, limit_mb)
        ax.set_ylim(0, limit_mb)
    ax.set_xlabel("MB (copies: read + written; GEMVs: ledger bytes)" if series else "MB moved (read + written)")
    ax.set_ylabel("time (us)")
    ax.set_title(title)
    ax.legend(loc="lower right" if marks else "upper left")      # clear of the mark labels at the top
    return fig
