"""Chapter 12's register layouts, modelled exactly on the CPU: which lane of a warp holds which element.

Every layout is a NumPy int array ``layout[lane, element] -> (row, col)`` of shape ``(32, E, 2)``. The
element axis counts the values a lane holds in the order the PTX ISA numbers them (``a0 .. a7`` for A,
``c0 .. c3`` for C); for 16-bit operands two elements share one 32-bit register, element ``2 * r`` in the
low half of register ``r`` and ``2 * r + 1`` in the high half (:func:`register_of`).

Sources (PTX ISA, chapter "Parallel Synchronization and Communication Instructions"/"Warp Level Matrix
Multiply-Accumulate Instructions"):
- section "Matrix Fragments for mma.m16n8k16 with floating point type": the A (16 x 16, .row), B (16 x 8,
  .col) and C/D (16 x 8, .f32) fragments, written with ``groupID = laneid >> 2`` and
  ``threadID_in_group = laneid % 4``;
- section "Warp-level matrix load instruction: ldmatrix": an m8n8 .b16 matrix is eight rows of 16 bytes,
  each row's address supplied by one lane (threads 0-7 for the first matrix, 8-15 the second, 16-23 the
  third, 24-31 the fourth; .x1 reads only threads 0-7's addresses, .x2 only 0-15's), and each lane
  receives, per matrix, one register holding row ``laneid / 4``, columns ``2 * (laneid % 4) + {0, 1}``;
  .trans delivers the same fragment of the transposed matrix.

FlashAttention-2 keeps P = softmax(S) in registers: :func:`accumulators_to_a` packs two m16n8 fp32
accumulator tiles into the bf16 A fragment of the next ``mma`` (P·V), and :func:`a_from_accumulators_layout`
shows on coordinates why no shuffle is needed.
"""
from __future__ import annotations

import numpy as np

WARP = 32
M, N, K = 16, 8, 16          # mma.sync.aligned.m16n8k16


def _group(lane):
    """PTX's groupID and threadID_in_group of a lane."""
    return lane >> 2, lane % 4


def register_of(element: int) -> tuple[int, int]:
    """(register, half) of a 16-bit element: element 2r is the low half of register r, 2r + 1 the high."""
    return element // 2, element % 2


# --- mma.m16n8k16, "Matrix Fragments for mma.m16n8k16 with floating point type" ----------------------

def mma_a_layout() -> np.ndarray:
    """A, 16 x 16 (M x K, .row), .bf16: (32, 8, 2). Four .b32 registers of two bf16 each, a0 .. a7:
    row = groupID for a0, a1, a4, a5 and groupID + 8 for a2, a3, a6, a7;
    col = threadID_in_group * 2 + (i & 1), plus 8 for a4 .. a7."""
    out = np.empty((WARP, 8, 2), dtype=np.int64)
    for lane in range(WARP):
        g, t = _group(lane)
        for i in range(8):
            row = g + 8 * ((i // 2) % 2)
            col = 2 * t + (i & 1) + 8 * (i // 4)
            out[lane, i] = (row, col)
    return out


def mma_b_layout() -> np.ndarray:
    """B, 16 x 8 (K x N, .col), .bf16: (32, 4, 2). Two .b32 registers of two bf16 each, b0 .. b3:
    row (k) = threadID_in_group * 2 + (i & 1), plus 8 for b2, b3; col (n) = groupID."""
    out = np.empty((WARP, 4, 2), dtype=np.int64)
    for lane in range(WARP):
        g, t = _group(lane)
        for i in range(4):
            out[lane, i] = (2 * t + (i & 1) + 8 * (i // 2), g)
    return out


def mma_c_layout() -> np.ndarray:
    """C and D, 16 x 8 (M x N), .f32: (32, 4, 2), one register per element c0 .. c3:
    row = groupID for c0, c1 and groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 1)."""
    out = np.empty((WARP, 4, 2), dtype=np.int64)
    for lane in range(WARP):
        g, t = _group(lane)
        for i in range(4):
            out[lane, i] = (g + 8 * (i // 2), 2 * t + (i & 1))
    return out


# --- ldmatrix, "Warp-level matrix load instruction: ldmatrix" ------------------------------------------

LDMATRIX_NUM = (1, 2, 4)


def _check_num(num: int) -> None:
    if num not in LDMATRIX_NUM:
        raise ValueError(f"ldmatrix .x{num}: expected .x1, .x2 or .x4")


def ldmatrix_address_lanes(num: int) -> np.ndarray:
    """Which lane supplies the address of each row: (8 * num,) lane ids. The ``num`` 8 x 8 matrices are
    stacked into one (8 * num) x 8 matrix, matrix m's row r being stacked row 8m + r; lane l addresses
    stacked row l, so threads 0-7 feed matrix 0, 8-15 matrix 1, ... Lanes 8 * num .. 31 supply no
    address that is read."""
    _check_num(num)
    return np.arange(8 * num, dtype=np.int64)


def ldmatrix_layout(num: int, trans: bool = False) -> np.ndarray:
    """What each lane receives: (32, 2 * num, 2) -> (row, col) of the stacked (8 * num) x 8 matrix whose
    row s was read from the address lane s supplied. Register m (elements 2m, 2m + 1) holds matrix m:
    without .trans row laneid / 4, cols 2 * (laneid % 4) + {0, 1}; with .trans the transposed fragment,
    rows 2 * (laneid % 4) + {0, 1} of column laneid / 4."""
    _check_num(num)
    out = np.empty((WARP, 2 * num, 2), dtype=np.int64)
    for lane in range(WARP):
        g, t = _group(lane)
        for m in range(num):
            for h in range(2):
                r, c = (2 * t + h, g) if trans else (g, 2 * t + h)
                out[lane, 2 * m + h] = (8 * m + r, c)
    return out


def ldmatrix_a_row_addresses() -> np.ndarray:
    """ldmatrix.x4 of a 16 x 16 row-major A tile into the mma A fragment: (32, 2) -> the (row, col) of the
    tile each lane points at: lane l addresses row l % 16, column 8 * (l // 16), so matrix 0 is the
    top-left 8 x 8 block (a0, a1), 1 the bottom-left (a2, a3), 2 the top-right (a4, a5), 3 the
    bottom-right (a6, a7)."""
    lane = np.arange(WARP)
    return np.stack([lane % 16, 8 * (lane // 16)], axis=1)


def ldmatrix_b_row_addresses() -> np.ndarray:
    """ldmatrix.x2.trans of a 16 x 8 B tile stored row-major as K x N into the mma B fragment: (16, 2) ->
    lane l (< 16) addresses row k = l, column 0 (matrix 0 holds k 0-7: b0, b1; matrix 1 k 8-15: b2, b3)."""
    lane = np.arange(16)
    return np.stack([lane, np.zeros_like(lane)], axis=1)


def ldmatrix_tile_layout(num: int, trans: bool, row_addresses: np.ndarray) -> np.ndarray:
    """:func:`ldmatrix_layout` seen in the tile: stacked row s = 8m + r at column c sits at
    ``row_addresses[s] + (0, c)``. Returns (32, 2 * num, 2) -> (row, col) of the tile."""
    stacked = ldmatrix_layout(num, trans)
    rows = np.asarray(row_addresses)[ldmatrix_address_lanes(num)]      # stacked row -> its (row, col0)
    base = rows[stacked[..., 0]]
    return base + np.stack([np.zeros_like(stacked[..., 1]), stacked[..., 1]], axis=-1)


# --- gathering values and the accumulator-as-A identity -------------------------------------------------

def gather(matrix: np.ndarray, layout: np.ndarray) -> np.ndarray:
    """The values each lane holds: ``matrix[layout[..., 0], layout[..., 1]]``, shape (32, E)."""
    return np.asarray(matrix)[layout[..., 0], layout[..., 1]]


def scatter(values, layout: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of :func:`gather`: a ``shape`` float64 matrix from each lane's values (NaN where no lane
    holds an element)."""
    out = np.full(shape, np.nan)
    out[layout[..., 0], layout[..., 1]] = np.asarray(values, dtype=np.float64)
    return out


def emulate_mma(a_vals, b_vals, c_vals) -> np.ndarray:
    """What ``mma.sync.m16n8k16`` leaves in each lane, in float64: the lanes' A (32, 8), B (32, 4) and C
    (32, 4) element values put back into their matrices by the layouts, D = A @ B + C, and D handed out
    by the C layout: (32, 4)."""
    A = scatter(a_vals, mma_a_layout(), (M, K))
    B = scatter(b_vals, mma_b_layout(), (K, N))
    C = scatter(c_vals, mma_c_layout(), (M, N))
    return gather(A @ B + C, mma_c_layout())


def pack_bf16_pairs(values) -> np.ndarray:
    """(32, 2 * R) values -> (32, R) uint32 registers: each rounded to bf16 (to nearest even, as
    ``cvt.rn.bf16x2.f32`` and ``__floats2bfloat162_rn``), element 2r in the low 16 bits of register r."""
    from utils.arrays import bf16
    v = np.ascontiguousarray(np.asarray(values, dtype=np.float32).astype(bf16()))
    bits = v.view(np.uint16).astype(np.uint32)
    return bits[:, 0::2] | (bits[:, 1::2] << 16)


def packed(x, layout: np.ndarray) -> np.ndarray:
    """Each lane's registers of matrix ``x`` under a 16-bit ``layout`` (32, 2R, 2): the elements rounded to bf16
    (exact for bf16 input) and packed in pairs, element 2r low, as the kernels pack them: (32, R) uint32."""
    from utils.arrays import bf16
    bits = np.ascontiguousarray(np.asarray(x).astype(bf16())).view(np.uint16).astype(np.uint32)
    v = bits[layout[..., 0], layout[..., 1]]
    return v[:, 0::2] | (v[:, 1::2] << 16)


def accumulators_to_a(c_lo, c_hi) -> np.ndarray:
    """The bf16 A fragment (32, 4) uint32 of a 16 x 16 operand P from the two fp32 accumulator fragments
    that hold it, (32, 4) each: ``c_lo`` columns 0-7, ``c_hi`` columns 8-15. Per lane, with no data
    from any other lane: a0a1 = (c_lo[0], c_lo[1]), a2a3 = (c_lo[2], c_lo[3]), a4a5 = (c_hi[0], c_hi[1]),
    a6a7 = (c_hi[2], c_hi[3]); FA2 feeds P·V this way."""
    c_lo, c_hi = np.asarray(c_lo, dtype=np.float32), np.asarray(c_hi, dtype=np.float32)
    if c_lo.shape != (WARP, 4) or c_hi.shape != (WARP, 4):
        raise ValueError(f"accumulators_to_a: expected two (32, 4) fragments, got {c_lo.shape}, {c_hi.shape}")
    return pack_bf16_pairs(np.concatenate([c_lo, c_hi], axis=1))


def a_from_accumulators_layout() -> np.ndarray:
    """The coordinates :func:`accumulators_to_a` produces: the C layout, then the C layout shifted by 8
    columns, per lane, as (32, 8, 2). Equal to :func:`mma_a_layout`, which is the identity."""
    c = mma_c_layout()
    return np.concatenate([c, c + np.array([0, N])], axis=1)


# --- pictures ---------------------------------------------------------------------------------------

def lane_color(lane: int):
    """One of 32 distinct colours (tab20, then tab20b) for a lane."""
    from matplotlib import colormaps
    return colormaps["tab20"](lane) if lane < 20 else colormaps["tab20b"](lane - 20)


def plot_fragment(layout: np.ndarray, title: str, *, prefix: str = "", shape: tuple[int, int] | None = None,
                  ax=None):
    """Draw a layout as the PTX ISA's figures do: one cell per element of the matrix, coloured by the lane
    holding it, labelled ``T<lane>`` and the register element (``prefix`` + index: ``a3``, ``c1``).
    Returns the figure, :data:`utils.plot.COLUMN_IN` wide."""
    from matplotlib.patches import Rectangle

    from utils.plot import COLUMN_IN, figure
    layout = np.asarray(layout)
    rows, cols = shape or (int(layout[..., 0].max()) + 1, int(layout[..., 1].max()) + 1)
    if ax is None:
        fig, axes = figure(1, 1, width=COLUMN_IN, height=min(0.42 * rows + 0.8, 7.5))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    for lane in range(layout.shape[0]):
        for i in range(layout.shape[1]):
            r, c = layout[lane, i]
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=lane_color(lane), edgecolor="white",
                                   linewidth=0.8))
            ax.text(c + 0.5, r + 0.5, f"T{lane}\n{prefix}{i}", ha="center", va="center", fontsize=6)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)])
    ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)])
    ax.tick_params(length=0)
    ax.grid(False)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    ax.set_title(title)
    return fig
