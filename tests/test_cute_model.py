"""Chapter 13's CuTe layout model (kernels/cute) on a CPU: the examples of CuTe's own layout-algebra
documentation, composition checked as a function on every index, complement and logical divide covering their
domain, and the model against the layouts the book's kernels use: CuTe's mma.sync fragment layouts (CUTLASS
v4.7.0, include/cute/atom/mma_traits_sm80.hpp) against kernels/mma/fragments.py, Swizzle<3,4,3> against
utils.tma's 128-byte swizzle (checked on the H200 by tests/gpu/test_tma.py) and Swizzle<B,3,S> against hgemm's
XOR swizzle of every row width."""
import itertools

import numpy as np
import pytest

from kernels.cute import (Layout, Swizzle, coalesce, complement, composition, idx2crd, logical_divide, make_layout,
                          swizzled, tv_layout)


def test_layouts_are_functions_of_coordinates_and_of_1d_indices():
    a = make_layout((4, 8))
    assert repr(a) == "(4,8):(1,4)" and a((1, 2)) == 9 and a(9) == 9 and a.cosize() == 32
    r = make_layout((4, 8), "row")
    assert repr(r) == "(4,8):(8,1)" and r((1, 2)) == 10 and r(9) == 10 * 0 + 8 * 1 + 2
    h = Layout(((2, 2), 3), ((1, 6), 2))
    assert h(((1, 1), 2)) == 1 + 6 + 4 and idx2crd(5, ((2, 2), 3)) == ((1, 0), 1)
    with pytest.raises(ValueError, match="same nesting"):
        Layout((2, 2), 1)
    with pytest.raises(IndexError):
        a(32)


def test_coalesce_keeps_the_function():
    for layout in [Layout((2, 4), (1, 2)), Layout((2, 1, 3), (1, 7, 2)), Layout(((2, 2), 2), ((1, 2), 4)), Layout(1, 5)]:
        c = coalesce(layout)
        assert c.indices() == layout.indices(), (layout, c)
    assert coalesce(Layout((2, 4), (1, 2))) == Layout(8, 1)


def test_the_examples_of_cutes_layout_algebra_documentation():
    """media/docs/cpp/cute/02_layout_algebra.md at CUTLASS v4.7.0: composition, complement, logical divide."""
    assert composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))) == Layout(((2, 2), 3), ((24, 2), 8))
    assert complement(Layout(4, 2), 24) == Layout((2, 3), (1, 8))
    assert logical_divide(Layout(24, 1), Layout(4, 2)) == Layout((4, (2, 3)), (2, (1, 8)))


SMALL = [(s, d) for s in [(2, 4), (4, 2), (2, 2, 2), (8,)] for d in [None, "row"]] + [((3, 4), None)]


@pytest.mark.parametrize("a_shape,major", SMALL)
def test_composition_is_function_composition(a_shape, major):
    a = make_layout(a_shape, major or "col")
    size = a.size()
    tried = 0
    for s, d in itertools.product([1, 2, 4, 8], [1, 2, 4]):
        if s * d > size or size % (s * d):
            continue
        b = Layout(s, d)
        try:
            r = composition(a, b)
        except ValueError:        # CuTe's divisibility conditions do not hold for this pair: refused, not wrong
            continue
        assert r.size() == b.size() and [r(i) for i in range(s)] == [a(b(i)) for i in range(s)], (a, b, r)
        tried += 1
    for b in [Layout((2, 2), (1, 4)), Layout((2, 2), (2, 1)), Layout((2, 4), (4, 1))]:
        if b.cosize() > size:
            continue
        try:
            r = composition(a, b)
        except ValueError:
            continue
        assert [r(i) for i in range(b.size())] == [a(b(i)) for i in range(b.size())], (a, b, r)
        tried += 1
    assert tried >= 2


def test_complement_and_logical_divide_cover_their_domain():
    for a, n in [(Layout(4, 2), 24), (Layout((2, 2), (1, 8)), 32), (Layout(2, 1), 8)]:
        c = complement(a, n)
        both = sorted(a(i) + c(j) for i in range(a.size()) for j in range(c.size()))
        assert both == list(range(n)), (a, c)
    d = logical_divide(make_layout(64), Layout(8, 1))          # 8 tiles of 8 consecutive elements
    assert d.size() == 64 and sorted(d.indices()) == list(range(64))
    assert [d((i, 0)) for i in range(8)] == list(range(8)) and [d((0, j)) for j in range(8)] == list(range(0, 64, 8))


# --- the layouts our kernels use --------------------------------------------------------------------------

def test_cutes_mma_sync_fragments_are_ours():
    from kernels.cute import book
    from kernels.mma import fragments as F
    assert np.array_equal(book.fragment(book.SM80_A, 16), F.mma_a_layout())
    assert np.array_equal(book.fragment(book.SM80_C, 16), F.mma_c_layout())
    nk = book.fragment(book.SM80_B, 8)                                        # (n, k) -> ours is (k, n)
    assert np.array_equal(nk[..., ::-1], F.mma_b_layout())


def test_every_comparison_chapter_13_shows_agrees_and_a_wrong_layout_would_not():
    from kernels.cute import book
    rows = book.comparisons()
    assert len(rows) == 11 and all(r["agree"] == r["compared"] > 0 for r in rows), rows
    wrong = tv_layout(Layout((4, 8), (32, 1)), Layout((2, 2, 2), (8, 16, 128)))   # A's two row halves swapped
    from kernels.mma import fragments as F
    assert not np.array_equal(book.fragment(wrong, 16), F.mma_a_layout())


def test_swizzle_3_4_3_on_bytes_is_tmas_128_byte_swizzle():
    from utils.tma import swizzle_offset
    sw = Swizzle(3, 4, 3)
    assert all(sw(o) == swizzle_offset(o, 128) for o in range(4096))
    assert all(Swizzle(2, 4, 3)(o) == swizzle_offset(o, 64) for o in range(2048))
    assert all(Swizzle(1, 4, 3)(o) == swizzle_offset(o, 32) for o in range(1024))


@pytest.mark.parametrize("cols,bits,shift", [(16, 1, 3), (32, 2, 3), (64, 3, 3), (128, 3, 4), (256, 3, 5)])
def test_hgemm_swizzle_is_a_cute_swizzle_on_element_offsets(cols, bits, shift):
    """hgemm's Swizzled<COLS> (chunk ^= line number) is Swizzle<B, 3, S> o (rows, COLS):(COLS, 1) on bf16 offsets:
    M = 3 keeps 8-element (16-byte) chunks whole."""
    from kernels.cute import book
    from kernels.hgemm import smem
    layout = swizzled(Swizzle(bits, 3, shift), make_layout((16, cols), "row"))
    assert all(layout((r, c)) == smem.swizzled(r, c, cols) for r in range(16) for c in range(cols))
    assert book.hgemm_swizzle(cols)[1] == (bits, 3, shift)


def test_a_swizzle_permutes_and_keeps_blocks_whole():
    sw = Swizzle(3, 3, 3)
    assert sorted(sw(o) for o in range(512)) == list(range(512))
    assert all(sw(o) - sw(o - o % 8) == o % 8 for o in range(512))
    with pytest.raises(ValueError, match="S >= B"):
        Swizzle(3, 3, 2)


@pytest.mark.parametrize("n", [128, 256])
def test_cutes_wgmma_accumulator_layout_is_the_one_our_epilogues_read(n):
    """CLayout_64xN of CUTLASS v4.7.0 (include/cute/atom/mma_traits_sm90_gmma.hpp): ((4,8,4),(2,2,N/8)) :
    ((128,1,16),(64,8,512)) into the 64 x N tile, column-major; thread t = t0 + 4 t1 + 32 w."""
    from kernels.cute import book
    from kernels.hgemm import hopper
    c = book.gmma_c_layout(n)
    ours = hopper.wgmma_accumulator_layout(n)
    for tid in range(128):
        for v in range(n // 2):
            idx = c((idx2crd(tid, (4, 8, 4)), idx2crd(v, (2, 2, n // 8))))
            assert (idx % 64, idx // 64) == tuple(ours[tid, v]), (tid, v)
