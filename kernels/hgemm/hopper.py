"""Chapter 12's Hopper-way model on the CPU: the shared-memory matrix descriptors of ``hopper_common.cuh`` (the
bits, and the byte each one makes wgmma read for every element of a k16 slice) beside the shared-memory image a
TMA load writes (``utils.tma``, whose model the GPU test of chapter 17's TMA kernels checks byte for byte).
If the two agree for every element of every k-step of a stage, wgmma multiplies the tile TMA delivered.

Byte offsets are relative to a stage aligned to 1024 bytes (the 128-byte swizzle's period), as the kernels
align it; the swizzle is a function of those address bits (``utils.tma.swizzle_offset``).
"""
from __future__ import annotations

import numpy as np

from utils.table import Table
from utils.tma import smem_byte_offsets, swizzle_offset

BK = 64                  # k per stage (hopper_common.cuh HOPPER_BK)
ATOM = 1024              # 8 rows of 128 bytes
B_BOX = 64 * 64 * 2      # one [64 k][64 n] box of B
SW128 = 1                # the descriptor's layout type for the 128-byte swizzle


def descriptor(start: int, lbo: int, sbo: int, layout: int = SW128) -> int:
    """The 64-bit descriptor of gmma_desc_sw128: start / 16 in bits 0-13, LBO / 16 in 16-29, SBO / 16 in 32-45,
    the layout type in 62-63."""
    return ((start & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (layout << 62)


def fields(desc: int) -> dict:
    """The descriptor read back: start, LBO and SBO in bytes, the layout type."""
    return {"start": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4,
            "sbo": ((desc >> 32) & 0x3FFF) << 4, "layout": desc >> 62}


def a_descriptor(m0: int, j: int) -> int:
    """a_desc(a_stage, m0, j): rows m0 .. m0 + 63 of A's stage, k-step j."""
    return descriptor(m0 * 128 + 32 * j, 16, ATOM)


def b_descriptor(j: int) -> int:
    """b_desc(b_stage, j): k rows 16 j .. 16 j + 15 of every box of B's stage."""
    return descriptor(2048 * j, B_BOX, ATOM)


def k_major_offset(desc: int, mn: int, k: int) -> int:
    """The byte wgmma reads for element (mn, k) of a K-major 128-byte-swizzled operand (CUTLASS's canonical
    layout ((8, m), (8, 2)) : ((128 B, SBO), (2 B, 16 B)) under Swizzle<3,4,3>)."""
    f = fields(desc)
    return int(swizzle_offset(f["start"] + (mn % 8) * 128 + (mn // 8) * f["sbo"] + (k // 8) * 16 + (k % 8) * 2, 128))


def mn_major_offset(desc: int, mn: int, k: int) -> int:
    """The byte wgmma reads for element (mn, k) of an MN-major 128-byte-swizzled operand: 64 mn of one k per
    128-byte row, 8 k rows per atom; 64-wide groups LBO apart, 8-k groups SBO apart."""
    f = fields(desc)
    return int(swizzle_offset(f["start"] + ((mn % 64) // 8) * 16 + (mn // 64) * f["lbo"] + (k % 8) * 128
                              + (k // 8) * f["sbo"] + (mn % 8) * 2, 128))


def tma_a_offsets(bm: int) -> np.ndarray:
    """[bm, 64]: where TMA puts element (m, k) of A's box (bm rows of 64 bf16)."""
    return smem_byte_offsets((bm, BK), 2, 128)[..., 0]


def tma_b_offsets(bn: int) -> np.ndarray:
    """[64, bn]: where TMA puts element (k, n) of B's stage (bn / 64 boxes of [64 k][64 n], one after another)."""
    box = smem_byte_offsets((BK, 64), 2, 128)[..., 0]
    return np.concatenate([box + b * B_BOX for b in range(bn // 64)], axis=1)


def disagreements(bm: int = 128, bn: int = 256) -> dict[str, int]:
    """Elements of a stage where the descriptors of every k-step (and every m64 half of A) make wgmma read a
    different byte than TMA wrote, for A and for B (0 and 0: they agree everywhere)."""
    ta, tb = tma_a_offsets(bm), tma_b_offsets(bn)
    bad_a = sum(k_major_offset(a_descriptor(m0, j), m, k) != ta[m0 + m, 16 * j + k]
                for m0 in range(0, bm, 64) for j in range(BK // 16) for m in range(64) for k in range(16))
    bad_b = sum(mn_major_offset(b_descriptor(j), n, k) != tb[16 * j + k, n]
                for j in range(BK // 16) for n in range(bn) for k in range(16))
    return {"A": int(bad_a), "B": int(bad_b)}


def descriptor_table() -> Table:
    rows = []
    for name, d in [("A, rows 0-63, k-step 0", a_descriptor(0, 0)), ("A, rows 0-63, k-step 1", a_descriptor(0, 1)),
                    ("A, rows 64-127, k-step 0", a_descriptor(64, 0)), ("B, k-step 0", b_descriptor(0)),
                    ("B, k-step 1", b_descriptor(1))]:
        f = fields(d)
        rows.append([name, f"0x{d:016x}", str(f["start"]), str(f["lbo"]), str(f["sbo"]), "128-byte swizzle"])
    return Table(["operand", "descriptor", "start (bytes into the stage)", "LBO (bytes)", "SBO (bytes)", "layout"], rows,
                 caption="the descriptors hopper_common.cuh builds for one stage", align="ll" + "r" * 3 + "l")


def plot_swizzle(ax=None):
    """The 128-byte swizzle as a picture: 8 rows of 128 bytes (a 1024-byte atom), each cell a 16-byte chunk of
    shared memory labelled with the logical chunk (column block of the row) TMA put there: c ^ row."""
    from utils.plot import COLUMN_IN, figure
    from utils.tma import swizzle_pattern
    where = swizzle_pattern(128)                       # [row, logical chunk] -> physical chunk
    logical = np.empty_like(where)
    for r in range(8):
        logical[r, where[r]] = np.arange(8)
    if ax is None:
        fig, axes = figure(1, 1, width=COLUMN_IN, height=3.4)
        ax = axes[0, 0]
    else:
        fig = ax.figure
    ax.imshow(logical, cmap="tab10", vmin=0, vmax=9)
    for r in range(8):
        for c in range(8):
            ax.text(c, r, str(logical[r, c]), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(8), [f"{16 * c}" for c in range(8)])
    ax.set_yticks(range(8), [str(r) for r in range(8)])
    ax.set_xlabel("byte offset of the 16-byte chunk in its 128-byte row")
    ax.set_ylabel("row (k for B, m for A)")
    ax.set_title("128-byte swizzle: which logical chunk sits where (chunk c of row r -> c xor r)")
    ax.grid(False)
    return fig


def wgmma_accumulator_layout(n: int) -> np.ndarray:
    """(128, n / 2, 2): the (row, col) of the 64 x n tile each thread of a warpgroup holds in d[0 .. n/2), as
    store_wgmma_tile (hopper_common.cuh) and the CPU emulation read it: warp w rows 16 w .., and in each n8 block j
    d[4 j .. 4 j + 3] at rows g, g + 8 and columns 8 j + 2 t, + 1."""
    out = np.empty((128, n // 2, 2), dtype=np.int64)
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        for j in range(n // 8):
            for i in range(4):
                out[tid, 4 * j + i] = (16 * w + g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1))
    return out
