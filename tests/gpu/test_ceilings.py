"""Chapter 2's probes on a GPU: each on fresh random inputs, awkward sizes, outputs poisoned first."""
import numpy as np
import pytest

from kernels import ceilings as C
from utils.check import assert_close, poisoned

pytestmark = pytest.mark.gpu


def normal(shape, seed):
    from utils.arrays import random_normal
    return random_normal(shape, "float32", seed=seed)[0]


@pytest.mark.parametrize("label", list(C.COPY))
@pytest.mark.parametrize("n", [1, 3, 4, 37, 1823 * 781, (1 << 20) + 3])
def test_copy(label, n):
    x = normal(n, seed=n)
    y = poisoned((n,), np.float32)
    C.COPY[label](x, y)
    assert_close(y, x, dtype="exact", name=f"{label} n={n} (seed {n})")


@pytest.mark.parametrize("n,grid", [(1, 1), (5, 3), (37, 2), (1823 * 781, 7), ((1 << 20) + 2, 132 * 8)])
def test_read_v1_per_block(n, grid):
    x = normal(n, seed=n + grid)
    partial = poisoned((grid,), np.float32)
    C.read_v1(x, partial)
    assert_close(partial, C.read_reference(x, grid), dtype=np.float32, name="read_v1 partials")


@pytest.mark.parametrize("n,grid,repeats", [(4099, 2, 3), (1823 * 781, 5, 4), (1 << 16, 132 * 8, 7)])
def test_read_v1_repeated(n, grid, repeats):
    x = normal(n, seed=n + grid)
    partial = poisoned((grid,), np.float32)
    C.read_v1(x, partial, repeats=repeats)
    assert_close(partial, C.read_reference(x, grid, repeats), dtype=np.float32, name="read_v1 partials")
    C.check_read_total(partial, x, repeats)


@pytest.mark.parametrize("blocks,iters", [(1, 1), (3, 7), (264, 64)])
def test_smem_read_v1(blocks, iters):
    import cupy
    seed = C.smem_seed()
    out = poisoned((blocks * C.SMEM_THREADS,), np.float32)
    clk = cupy.zeros(2, dtype=cupy.uint64)
    C.smem_read_v1(seed, out, clk, iters)
    assert_close(out, C.smem_reference(seed, blocks, iters), dtype="exact")
    cycles, ns = (int(v) for v in clk.get())
    assert cycles > 0 and ns >= 0


@pytest.mark.parametrize("n", [1, 37, 199, 256, 1000])
def test_fma_v1_exact(n):
    import cupy
    x = C.fma_exact_inputs((C.FMA_CHAINS, n))
    y = poisoned((C.FMA_CHAINS, n), np.float32)
    clk = cupy.zeros(2, dtype=cupy.uint64)
    for iters in (1, 3):
        C.fma_v1(x, y, clk, iters=iters, **C.FMA_EXACT)
        assert_close(y, C.fma_reference(x, steps=C.fma_steps(iters), **C.FMA_EXACT), dtype="exact")


def test_fma_v1_busy_and_clock():
    import cupy
    n = 4 * 1024 + 17
    x = cupy.asarray(np.random.default_rng(n).uniform(1, 2, size=(C.FMA_CHAINS, n)).astype(np.float32))
    y = poisoned((C.FMA_CHAINS, n), np.float32)
    clk = cupy.zeros(2, dtype=cupy.uint64)
    C.fma_v1(x, y, clk, iters=1024, **C.FMA_BUSY)
    assert_close(y, C.fma_reference(x, steps=C.fma_steps(1024), **C.FMA_BUSY), tol=C.FMA_BUSY_TOL)
    assert 0.5 < C.clock_ghz(clk) < 3.0


def test_device_clocks():
    d = C.device_clocks()
    assert d["sm_khz"] and 500_000 < d["sm_khz"] < 3_000_000, d
    if d["mem_khz"] and d["bus_bits"]:
        assert 500 < C.hbm_peak_gbps(d["mem_khz"], d["bus_bits"]) < 20_000
