"""CuTe's names for the layouts the book's kernels use, in chapter 13's model (:mod:`kernels.cute`), and the
comparisons with the book's own models that chapter 13 shows and tests/test_cute_model.py asserts:

- the mma.sync m16n8k16 fragments, as CUTLASS v4.7.0 writes them (include/cute/atom/mma_traits_sm80.hpp:
  ``SM80_16x8x16_F32BF16BF16F32_TN``'s ALayout, BLayout and CLayout ``SM80_16x8_Row``), against
  :mod:`kernels.mma.fragments`;
- wgmma's accumulator layout ``CLayout_64xN`` (include/cute/atom/mma_traits_sm90_gmma.hpp) against
  :func:`kernels.hgemm.hopper.wgmma_accumulator_layout`;
- ``Swizzle<3,4,3>`` on byte offsets against :func:`utils.tma.swizzle_offset` (TMA's 128-byte swizzle), and
  ``Swizzle<B,3,S>`` composed with a row-major tile against hgemm's ``Swizzled<COLS>``.
"""
from __future__ import annotations

import numpy as np

from . import Layout, Swizzle, idx2crd, make_layout, swizzled, tv_layout

LANES = (4, 8)                                                          # CuTe's lane order: t0 + 4 t1
SM80_A = tv_layout(Layout(LANES, (32, 1)), Layout((2, 2, 2), (16, 8, 128)))   # (M16, K16), column-major
SM80_B = tv_layout(Layout(LANES, (16, 1)), Layout((2, 2), (8, 64)))          # (N8, K16)
SM80_C = tv_layout(Layout(LANES, (32, 1)), Layout((2, 2), (16, 8)))          # (M16, N8)


def gmma_c_layout(n: int) -> Layout:
    """CLayout_64xN: ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)), a warpgroup's 128 threads into the 64 x N
    accumulator tile, column-major."""
    return tv_layout(Layout((4, 8, 4), (128, 1, 16)), Layout((2, 2, n // 8), (64, 8, 512)))


def fragment(layout: Layout, rows: int, threads=LANES) -> np.ndarray:
    """(threads, values, 2): the (row, col) of each thread's values, from a thread-value layout into a
    column-major tile of ``rows`` rows."""
    n_threads, values = layout.modes()[0].size(), layout.modes()[1].size()
    out = np.empty((n_threads, values, 2), dtype=np.int64)
    for t in range(n_threads):
        for v in range(values):
            idx = layout((idx2crd(t, threads), idx2crd(v, layout.shape[1])))
            out[t, v] = (idx % rows, idx // rows)
    return out


def hgemm_swizzle(cols: int):
    """hgemm's Swizzled<COLS> in CuTe's terms: Swizzle<B, 3, S> o (16, COLS):(COLS, 1) on bf16 offsets. M = 3 keeps
    8-element (16-byte) chunks whole; B = log2 of the chunks a row, at most 3 (8 bank groups); S = 3 while a
    128-byte line holds several rows, else log2 of the chunks a row (the XOR takes the row itself)."""
    log_chunks = (cols // 8).bit_length() - 1          # 16-byte chunks a row, as a power of two
    bits, shift = min(3, log_chunks), max(3, log_chunks)
    return swizzled(Swizzle(bits, 3, shift), make_layout((16, cols), "row")), (bits, 3, shift)


def comparisons() -> list[dict]:
    """Every comparison: what, CuTe's expression, the book's model, elements compared, elements that agree."""
    from kernels.hgemm import hopper, smem
    from kernels.mma import fragments as F
    from utils.tma import swizzle_offset

    rows = []

    def add(what, cute, ours, got, want):
        got, want = np.asarray(got), np.asarray(want)
        rows.append({"what": what, "cute": cute, "ours": ours, "compared": int(want.size),
                     "agree": int((got == want).sum()) if got.shape == want.shape else 0})

    add("mma.sync A fragment", "SM80_16x8x16 ALayout", "kernels/mma/fragments.py", fragment(SM80_A, 16), F.mma_a_layout())
    add("mma.sync B fragment", "SM80_16x8x16 BLayout", "kernels/mma/fragments.py",
        fragment(SM80_B, 8)[..., ::-1], F.mma_b_layout())
    add("mma.sync C fragment", "SM80_16x8_Row", "kernels/mma/fragments.py", fragment(SM80_C, 16), F.mma_c_layout())
    for n in (128, 256):
        add(f"wgmma accumulators, N = {n}", f"CLayout_64x{n}", "kernels/hgemm/hopper.py",
            fragment(gmma_c_layout(n), 64, (4, 8, 4)), hopper.wgmma_accumulator_layout(n))
    add("TMA 128-byte swizzle (bytes)", "Swizzle<3,4,3>", "utils/tma.py",
        [Swizzle(3, 4, 3)(o) for o in range(4096)], [swizzle_offset(o, 128) for o in range(4096)])
    for cols in (16, 32, 64, 128, 256):
        layout, (b, m, s) = hgemm_swizzle(cols)
        add(f"hgemm tile, {cols} bf16 a row", f"Swizzle<{b},{m},{s}> o (16,{cols}):({cols},1)",
            "kernels/hgemm/smem.py", [layout((r, c)) for r in range(16) for c in range(cols)],
            [smem.swizzled(r, c, cols) for r in range(16) for c in range(cols)])
    return rows
