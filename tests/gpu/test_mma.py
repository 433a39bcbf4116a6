"""Chapter 12's probes on the GPU against the CPU model (kernels/mma/fragments.py): every lane's registers
after loading A, B and C by the model's formulas, D after one mma.sync.m16n8k16 (per lane and as a matrix,
against a float64 reference), ldmatrix.x4 and .x2.trans from shared memory, and the accumulator packing
into the next A fragment. Inputs hold distinct values, so a lane holding the wrong element cannot pass."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SEED = 2026


def _inputs(seed):
    from kernels.mma import probe_inputs
    a, b, c, p = probe_inputs(seed)
    assert len(np.unique(a.astype(np.float32))) == 256 and len(np.unique(b.astype(np.float32))) == 128
    return a, b, c, p


def _packed(x, layout):
    from kernels.mma.fragments import packed
    return packed(x, layout)


@pytest.mark.parametrize("trial", range(3))
def test_probes_match_the_fragment_model(trial):
    from kernels.mma import fragments as F
    from kernels.mma import run_probes
    seed = SEED + trial
    a, b, c, p = _inputs(seed)
    out = run_probes(a, b, c, p)
    A, B = a.astype(np.float64), b.astype(np.float64)
    # what went in: the loads by the model's formulas, read back raw
    np.testing.assert_array_equal(out["a_regs"], _packed(a, F.mma_a_layout()), err_msg=f"A fragment (seed {seed})")
    np.testing.assert_array_equal(out["b_regs"], _packed(b, F.mma_b_layout()), err_msg=f"B fragment (seed {seed})")
    np.testing.assert_array_equal(out["c_regs"], F.gather(c, F.mma_c_layout()), err_msg=f"C fragment (seed {seed})")
    # what came out: A @ B is exact in fp32 here (products of multiples of 1/8, sums below 2^24 / 64)
    ref = A @ B + c
    np.testing.assert_array_equal(out["d_regs"], F.gather(ref, F.mma_c_layout()).astype(np.float32),
                                  err_msg=f"D per lane (seed {seed})")
    np.testing.assert_array_equal(out["d_regs"], F.emulate_mma(F.gather(A, F.mma_a_layout()),
                                                                F.gather(B, F.mma_b_layout()),
                                                                F.gather(c, F.mma_c_layout())).astype(np.float32))
    np.testing.assert_array_equal(out["d"], ref.astype(np.float32), err_msg=f"D (seed {seed})")
    # ldmatrix from shared memory: the stacked-matrix model seen through the tile addresses
    x4 = F.ldmatrix_tile_layout(4, False, F.ldmatrix_a_row_addresses())
    x2t = F.ldmatrix_tile_layout(2, True, F.ldmatrix_b_row_addresses())
    np.testing.assert_array_equal(out["x4_regs"], _packed(a, x4), err_msg=f"ldmatrix.x4 (seed {seed})")
    np.testing.assert_array_equal(out["x2t_regs"], _packed(b, x2t), err_msg=f"ldmatrix.x2.trans (seed {seed})")
    # and they are the mma operands
    np.testing.assert_array_equal(out["x4_regs"], out["a_regs"])
    np.testing.assert_array_equal(out["x2t_regs"], out["b_regs"])
    # the accumulators of P, rounded and packed in place, are P's A fragment
    cl = F.mma_c_layout()
    np.testing.assert_array_equal(out["p_regs"], F.accumulators_to_a(F.gather(p[:, :8], cl), F.gather(p[:, 8:], cl)),
                                  err_msg=f"accumulators to A (seed {seed})")
    # the chapter's summary of the same comparison agrees
    from kernels.mma import probe_agreement
    assert all(ok == n for ok, n in probe_agreement(out, a, b, c, p).values())
