"""Chapter 12's fragment model on the CPU (kernels/mma/fragments.py): each mma.m16n8k16 and ldmatrix layout is
a bijection onto its matrix; spot values from the PTX ISA's figures; ldmatrix's addressing and how x4 and
x2.trans load exactly the A and B fragments; the accumulator-as-A identity FA2 uses for P·V, on coordinates
and on values (bf16 rounding and packing order); the figure's width; and the probe source's declaration."""
import numpy as np
import pytest

from kernels import mma
from kernels.mma import fragments as F

SEED = 12


def covers_once(layout, rows, cols):
    """Every (row, col) of a rows x cols matrix appears exactly once in the layout."""
    flat = layout.reshape(-1, 2)
    assert flat.shape[0] == rows * cols, flat.shape
    assert flat[:, 0].min() == 0 and flat[:, 0].max() == rows - 1
    assert flat[:, 1].min() == 0 and flat[:, 1].max() == cols - 1
    assert len({tuple(x) for x in flat}) == rows * cols


# --- mma.m16n8k16 -----------------------------------------------------------------------------------

def test_mma_layouts_are_bijections_onto_their_matrices():
    a, b, c = F.mma_a_layout(), F.mma_b_layout(), F.mma_c_layout()
    assert a.shape == (32, 8, 2) and b.shape == (32, 4, 2) and c.shape == (32, 4, 2)
    covers_once(a, 16, 16)
    covers_once(b, 16, 8)
    covers_once(c, 16, 8)


def test_a_fragment_spot_values_from_the_ptx_figure():
    a = F.mma_a_layout()
    # lane 0: a0,a1 = A[0][0..1]; a2,a3 = A[8][0..1]; a4,a5 = A[0][8..9]; a6,a7 = A[8][8..9]
    assert a[0].tolist() == [[0, 0], [0, 1], [8, 0], [8, 1], [0, 8], [0, 9], [8, 8], [8, 9]]
    # lane 5: groupID 1, threadID_in_group 1
    assert a[5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3], [1, 10], [1, 11], [9, 10], [9, 11]]
    # lane 31: groupID 7, threadID_in_group 3
    assert a[31].tolist() == [[7, 6], [7, 7], [15, 6], [15, 7], [7, 14], [7, 15], [15, 14], [15, 15]]
    # a register's two halves are neighbours in a row: one 32-bit load of a row-major tile
    assert (a[:, 1::2, 0] == a[:, 0::2, 0]).all() and (a[:, 1::2, 1] == a[:, 0::2, 1] + 1).all()


def test_b_fragment_spot_values_from_the_ptx_figure():
    b = F.mma_b_layout()
    assert b[0].tolist() == [[0, 0], [1, 0], [8, 0], [9, 0]]          # b0,b1 = B[0..1][0]; b2,b3 = B[8..9][0]
    assert b[6].tolist() == [[4, 1], [5, 1], [12, 1], [13, 1]]        # groupID 1, threadID_in_group 2
    assert b[31].tolist() == [[6, 7], [7, 7], [14, 7], [15, 7]]
    # a register's two halves are neighbours in a column (k): one 32-bit load of B stored N x K ("col")
    assert (b[:, 1::2, 1] == b[:, 0::2, 1]).all() and (b[:, 1::2, 0] == b[:, 0::2, 0] + 1).all()


def test_c_fragment_spot_values_from_the_ptx_figure():
    c = F.mma_c_layout()
    for lane in range(32):
        g, t = lane // 4, lane % 4
        # c0, c1: row groupID, cols 2*tid, 2*tid+1; c2, c3: row groupID + 8
        assert c[lane].tolist() == [[g, 2 * t], [g, 2 * t + 1], [g + 8, 2 * t], [g + 8, 2 * t + 1]], lane
    assert c[0].tolist() == [[0, 0], [0, 1], [8, 0], [8, 1]]
    assert c[31].tolist() == [[7, 6], [7, 7], [15, 6], [15, 7]]


def test_register_of_puts_the_even_element_in_the_low_half():
    assert [F.register_of(i) for i in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert F.register_of(7) == (3, 1)


def test_gather_and_scatter_invert_each_other():
    rng = np.random.default_rng(SEED)
    for lay, shape in ((F.mma_a_layout(), (16, 16)), (F.mma_b_layout(), (16, 8)), (F.mma_c_layout(), (16, 8))):
        X = rng.standard_normal(shape)
        np.testing.assert_array_equal(F.scatter(F.gather(X, lay), lay, shape), X)


def test_emulated_mma_is_a_gemm_on_fragments():
    """Each lane's D elements are (A @ B + C) at the lane's C coordinates, from fragments gathered by the model."""
    rng = np.random.default_rng(SEED)
    A, B, C = rng.standard_normal((16, 16)), rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    d = F.emulate_mma(F.gather(A, F.mma_a_layout()), F.gather(B, F.mma_b_layout()), F.gather(C, F.mma_c_layout()))
    assert d.shape == (32, 4)
    np.testing.assert_allclose(d, F.gather(A @ B + C, F.mma_c_layout()), rtol=1e-12)
    g, t = 2, 3                                                # lane 11: d1 = D[2][7]
    np.testing.assert_allclose(d[4 * g + t, 1], A[2] @ B[:, 7] + C[2, 7], rtol=1e-12)


# --- ldmatrix ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_layouts_are_bijections(num, trans):
    lay = F.ldmatrix_layout(num, trans)
    assert lay.shape == (32, 2 * num, 2)
    covers_once(lay, 8 * num, 8)


@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_address_lanes(num):
    """Threads 0-7 address matrix 0's rows, 8-15 matrix 1's, ...; .x1 reads 8 addresses, .x2 16, .x4 32."""
    lanes = F.ldmatrix_address_lanes(num)
    assert lanes.tolist() == list(range(8 * num))


def test_ldmatrix_refuses_other_counts():
    for num in (0, 3, 8):
        with pytest.raises(ValueError, match="x1, .x2 or .x4"):
            F.ldmatrix_layout(num)
        with pytest.raises(ValueError):
            F.ldmatrix_address_lanes(num)


def test_ldmatrix_spot_values():
    x4 = F.ldmatrix_layout(4)
    assert x4[0].tolist() == [[0, 0], [0, 1], [8, 0], [8, 1], [16, 0], [16, 1], [24, 0], [24, 1]]
    assert x4[6, 2:4].tolist() == [[9, 4], [9, 5]]          # lane 6: row 6 // 4 = 1 of matrix 1, cols 4, 5
    assert x4[31, 6:8].tolist() == [[31, 6], [31, 7]]
    x1t = F.ldmatrix_layout(1, trans=True)
    assert x1t[0].tolist() == [[0, 0], [1, 0]]               # .trans: lane 0 gets column 0, rows 0 and 1
    assert x1t[1].tolist() == [[2, 0], [3, 0]]
    assert x1t[4].tolist() == [[0, 1], [1, 1]]
    x2t = F.ldmatrix_layout(2, trans=True)
    assert x2t[13, 2:4].tolist() == [[8 + 2, 3], [8 + 3, 3]]


@pytest.mark.parametrize("num", [1, 2, 4])
def test_trans_is_the_fragment_of_the_transposed_matrices(num):
    plain, trans = F.ldmatrix_layout(num), F.ldmatrix_layout(num, trans=True)
    base = 8 * (plain[..., 0] // 8)
    np.testing.assert_array_equal(trans[..., 0], base + plain[..., 1])
    np.testing.assert_array_equal(trans[..., 1], plain[..., 0] - base)


def test_ldmatrix_x4_loads_the_a_fragment():
    addr = F.ldmatrix_a_row_addresses()
    assert addr.shape == (32, 2) and addr[0].tolist() == [0, 0] and addr[17].tolist() == [1, 8]
    assert (addr[:, 1] % 8 == 0).all()                      # 16-byte aligned row starts in a bf16 tile
    assert len({tuple(x) for x in addr}) == 32               # 32 distinct 16-byte rows
    np.testing.assert_array_equal(F.ldmatrix_tile_layout(4, False, addr), F.mma_a_layout())


def test_ldmatrix_x2_trans_loads_the_b_fragment():
    addr = F.ldmatrix_b_row_addresses()
    assert addr.tolist() == [[k, 0] for k in range(16)]
    np.testing.assert_array_equal(F.ldmatrix_tile_layout(2, True, addr), F.mma_b_layout())
    # without .trans the same addresses give the wrong operand
    assert not np.array_equal(F.ldmatrix_tile_layout(2, False, addr), F.mma_b_layout())


# --- the accumulator as the next A operand ------------------------------------------------------------

def test_two_accumulator_tiles_are_the_a_fragment_in_coordinates():
    np.testing.assert_array_equal(F.a_from_accumulators_layout(), F.mma_a_layout())


def test_pack_bf16_pairs_rounds_to_nearest_even_low_half_first():
    regs = F.pack_bf16_pairs(np.array([[1.0, 2.0, 1 + 2**-8, 1 + 3 * 2**-8]] * 32, dtype=np.float32))
    assert regs.dtype == np.uint32 and regs.shape == (32, 2)
    assert int(regs[0, 0]) == 0x4000_3F80                     # 2.0 high, 1.0 low
    assert int(regs[0, 1]) == 0x3F82_3F80                     # halfway ties to even: 1.0, then 1 + 2^-6


def test_accumulators_to_a_matches_the_a_fragment_of_bf16_p():
    rng = np.random.default_rng(SEED)
    P = rng.standard_normal((16, 16)).astype(np.float32)
    c = F.mma_c_layout()
    c_lo, c_hi = F.gather(P[:, :8], c), F.gather(P[:, 8:], c)
    got = F.accumulators_to_a(c_lo, c_hi)
    # independently: round P to bf16, take each lane's A elements by the A layout, pack the bits
    from utils.arrays import bf16
    bits = P.astype(bf16()).view(np.uint16).astype(np.uint32)
    want = F.gather(bits, F.mma_a_layout())
    want = want[:, 0::2] | (want[:, 1::2] << 16)
    assert got.shape == (32, 4) and got.dtype == np.uint32
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"\(32, 4\)"):
        F.accumulators_to_a(c_lo[:16], c_hi)


# --- the figure and the probe ----------------------------------------------------------------------

def test_plot_fragment_is_one_column_wide_and_draws_every_element():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from utils.plot import COLUMN_IN
    fig = F.plot_fragment(F.mma_a_layout(), "A, m16n8k16 .bf16", prefix="a")
    try:
        assert fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
        ax = fig.axes[0]
        assert ax.get_title() == "A, m16n8k16 .bf16"
        assert len(ax.patches) == 256
        texts = {t.get_text() for t in ax.texts}
        assert "T0\na0" in texts and "T31\na7" in texts and len(texts) == 256
        colors = {p.get_facecolor() for p in ax.patches}
        assert len(colors) == 32                             # one colour per lane
    finally:
        plt.close(fig)


def test_probe_source_is_declared_for_ampere():
    from utils.paths import KERNELS
    from utils.show import snippets
    assert mma.PROBE_SOURCE.file == "mma/probe.cu" and mma.PROBE_SOURCE.requires == ("bf16-mma",)
    text = (KERNELS / "mma" / "probe.cu").read_text()
    for k in mma.PROBE_KERNELS:
        assert f'extern "C" __global__ void __launch_bounds__(32)\n{k}(' in text, k
    assert {"mma_probe", "ldmatrix_probe", "pack_probe"} <= set(snippets(text))


def test_probe_agreement_counts_every_register_and_catches_a_wrong_one():
    """The chapter's summary of the probes, fed what the model says the hardware returns: all agree; one lane's
    register changed: that quantity reports one fewer."""
    from kernels.mma import probe_agreement, probe_inputs
    a, b, c, p = probe_inputs(7)
    cl = F.mma_c_layout()
    out = {"a_regs": F.packed(a, F.mma_a_layout()), "b_regs": F.packed(b, F.mma_b_layout()),
           "d_regs": F.emulate_mma(F.gather(a.astype(float), F.mma_a_layout()), F.gather(b.astype(float), F.mma_b_layout()),
                                   F.gather(c, cl)).astype(np.float32),
           "x4_regs": F.packed(a, F.mma_a_layout()), "x2t_regs": F.packed(b, F.mma_b_layout()),
           "p_regs": F.accumulators_to_a(F.gather(p[:, :8], cl), F.gather(p[:, 8:], cl))}
    got = probe_agreement(out, a, b, c, p)
    assert all(ok == n for ok, n in got.values()) and got["A fragment"] == (128, 128)
    out["x2t_regs"] = out["x2t_regs"].copy()
    out["x2t_regs"][5, 1] ^= 1
    assert probe_agreement(out, a, b, c, p)["ldmatrix.x2.trans (B)"] == (63, 64)
