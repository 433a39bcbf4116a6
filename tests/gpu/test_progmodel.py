"""Chapter 3 kernels on a GPU: whoami, the wave kernel, block sums and the filter, on fresh inputs."""
import numpy as np
import pytest

from kernels import progmodel as pm

pytestmark = pytest.mark.gpu


def _sms():
    from utils.gpu import device_summary
    return device_summary()["sms"]


@pytest.mark.parametrize("grid,block", [((3, 2, 2), (5, 3, 4)), ((7,), (37,)), ((3, 2), (16, 6)),
                                        ((1,), (1024,))])
def test_whoami_matches_the_formulas(grid, block):
    table = pm.launch_whoami(grid, block)
    pm.check_whoami(table, grid, block, _sms())


def test_wave_spin_stamps_and_occupancy():
    import cupy
    from utils.gpu import device_summary
    smem = pm.wave_smem_bytes(2, smem_per_sm=device_summary()["smem_per_sm"])
    fn = pm.wave_kernel(smem)
    assert pm.resident_blocks(fn, pm.WAVE_THREADS, smem) == 2
    b = 5
    smid = cupy.full(b, -1, dtype=cupy.int32)
    t0 = cupy.zeros(b, dtype=cupy.uint64)
    t1 = cupy.zeros(b, dtype=cupy.uint64)
    pm.launch_wave_spin(b, 20000, smem, smid, t0, t1)
    cupy.cuda.get_current_stream().synchronize()
    s = smid.get()
    assert ((s >= 0) & (s < _sms())).all()
    assert (t1.get() >= t0.get()).all() and (t0.get() > 0).all()


SEED = 303


@pytest.mark.parametrize("n,blocks", [(1, 1), (37, 3), (1823 * 781 + 3, 264), (1 << 20, 1056)])
def test_block_sums_are_exact_and_identical(n, blocks):
    from utils.check import assert_close, poisoned
    x = pm.integer_valued(n, seed=SEED + n)
    ref = pm.block_sum_ref(x, blocks)
    outs = []
    for v in pm.BLOCK_SUM.values():
        p = poisoned((blocks,), np.float32)
        v(x, p)
        assert_close(p, ref, dtype="exact", name=f"{v.label} (seed {SEED + n})")
        outs.append(p)
    for p in outs[1:]:
        assert bool((p == outs[0]).all())


@pytest.mark.parametrize("label", list(pm.FILTER))
@pytest.mark.parametrize("n,threshold", [(1, -10.0), (1000, 0.0), (123457, 1.5), (1 << 22, 0.0)])
def test_filter_keeps_exactly_the_right_elements(label, n, threshold):
    import cupy

    from utils.arrays import random_normal
    from utils.check import poisoned
    x, seed = random_normal(n, "float32", seed=SEED + n)
    out = poisoned((n,), np.float32)
    count = cupy.zeros(1, dtype=cupy.uint32)
    pm.FILTER[label](x, threshold, out, count)
    pm.check_filter(out, count, x, threshold)
