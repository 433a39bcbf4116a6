"""Chapter 2's probes on a CPU: cost models, grids, references against plain emulations of the
kernels' index arithmetic, the FMA tolerance, and the launchers' ValueErrors."""
import numpy as np
import pytest

from kernels import ceilings as C
from tests.fakes import FakeDeviceArray
from utils.check import CheckFailed


def test_cost_models():
    assert C.copy_nbytes(10) == 80
    assert C.read_nbytes(10, repeats=3) == 120
    assert C.smem_nbytes(blocks=2, iters=3) == 2 * C.SMEM_THREADS * 3 * C.SMEM_UNROLL * 16
    assert C.fma_flops(n=5, iters=2) == 2 * C.FMA_CHAINS * C.FMA_UNROLL * 2 * 5
    assert C.fma_nbytes(5) == 2 * 8 * 5 * 4
    assert C.gemm_flops(2, 3, 4) == 48
    assert C.gemm_min_bytes(2, 3, 4, 2, 4) == (8 + 12) * 2 + 6 * 4


def test_grids_fill_each_sm_once():
    assert C.copy_grid(1, 132) == 1
    assert C.copy_grid(3, 132) == 1
    assert C.copy_grid(4 * 256 * 5 + 3, 132) == 5
    assert C.copy_grid(4 * 256 * 5 + 4, 132) == 6
    assert C.copy_v2_grid(1) == C.copy_v2_grid(3) == 1
    assert C.copy_v2_grid(4 * 256 * 5 + 4) == 6
    assert C.copy_v2_grid(1 << 28) == (1 << 26) // 256
    assert C.copy_grid(1 << 28, 132) == 132 * 8
    assert C.read_grid(132) == 1056
    assert C.smem_grid(132) == 264
    assert C.fma_threads(132) == 132 * 2048


def test_datasheet_clocks_and_ridge():
    from utils.hardware import DATASHEET
    h = DATASHEET["H100"]
    # the FP32 peak is quoted at the boost clock, the tensor-core peaks at a lower one
    assert C.implied_clock_ghz(h["fp32"], h["sms"], C.PER_SM_PER_CLOCK["H100"]["fp32"]) == pytest.approx(1.98, abs=0.01)
    assert C.implied_clock_ghz(h["bf16"], h["sms"], C.PER_SM_PER_CLOCK["H100"]["bf16"]) == pytest.approx(1.83, abs=0.01)
    a = DATASHEET["A100"]
    assert C.implied_clock_ghz(a["bf16"], a["sms"], C.PER_SM_PER_CLOCK["A100"]["bf16"]) == pytest.approx(1.41, abs=0.01)
    assert C.ridge_point(989.4, 4800) == pytest.approx(206.1, abs=0.1)
    assert C.hbm_peak_gbps(2_619_000, 5120) == pytest.approx(3352, abs=1)
    with pytest.raises(ValueError):
        C.ridge_point(1.0, 0.0)


def emulate_read(x, grid, repeats):
    """read_v1_vec4 thread by thread, in float64: which float4s each block adds."""
    n = len(x)
    n4 = n // 4
    stride = grid * C.READ_THREADS
    out = np.zeros(grid)
    for t in range(stride):
        b = t // C.READ_THREADS
        if n4:
            step, idx, j = stride % n4, t % n4, t
            while j < repeats * n4:
                out[b] += x[4 * idx: 4 * idx + 4].astype(np.float64).sum()
                idx = (idx + step) % n4
                j += stride
        if t < n - 4 * n4:
            out[b] += repeats * float(x[4 * n4 + t])
    return out


@pytest.mark.parametrize("n,grid,repeats", [(1, 1, 1), (3, 2, 2), (5, 1, 1), (37, 3, 1), (1000, 2, 1),
                                            (4 * 256 * 3 + 2, 2, 3), (4099, 1, 5), (6 * 512 + 1, 4, 2)])
def test_read_reference_matches_the_kernels_index_arithmetic(n, grid, repeats):
    x = np.random.default_rng(n * 31 + grid).standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(C.read_reference(x, grid, repeats), emulate_read(x, grid, repeats), rtol=1e-12,
                               atol=1e-9)


def test_check_read_total():
    x = np.random.default_rng(1001).standard_normal(1001).astype(np.float32)
    partial = C.read_reference(x, 3, repeats=4).astype(np.float32)
    assert C.check_read_total(partial, x, repeats=4) < 1e-6
    with pytest.raises(CheckFailed, match="expected"):
        C.check_read_total(partial, x, repeats=3)
    partial[1] = np.nan
    with pytest.raises(CheckFailed, match="NaN"):
        C.check_read_total(partial, x, repeats=4)


def test_smem_reference_is_exact():
    seed = C.smem_seed(xp=np, rng=np.random.default_rng(11))
    assert seed.dtype == np.float32 and seed.shape == (C.SMEM_TILE, 4) and seed.min() >= 1
    iters = 5
    ref = C.smem_reference(seed, blocks=2, iters=iters)
    # emulate one thread in float32, in the kernel's order
    for t in (0, 1, 31, 1023):
        acc = np.zeros(4, np.float32)
        for _ in range(iters):
            for u in range(C.SMEM_UNROLL):
                acc += seed[t + (C.SMEM_THREADS if u % 2 else 0)]
        got = np.float32((acc[0] + acc[1]) + (acc[2] + acc[3]))
        assert got == ref[t] == ref[t + C.SMEM_THREADS]
    assert C.smem_exact_limit(1024) and not C.smem_exact_limit(1 << 20)


def test_fma_exact_config_is_exact_in_float32():
    x = C.fma_exact_inputs((C.FMA_CHAINS, 64), xp=np, rng=np.random.default_rng(12))
    m, c = np.float32(C.FMA_EXACT["m"]), np.float32(C.FMA_EXACT["c"])
    steps = C.fma_steps(1024)
    a = x.copy()
    for _ in range(steps):
        a = a * m + c          # exact in float32 here, so fused or not gives the same bits
    ref = C.fma_reference(x, m, c, steps)
    assert np.array_equal(a.astype(np.float64), ref)
    assert float(ref.max()) < 64


def test_fma_busy_config_stays_within_its_tolerance():
    """Emulate the float32 recurrence (one rounding per step) and compare with the closed form."""
    x = np.random.default_rng(13).uniform(1, 2, size=512).astype(np.float32)
    m, c = np.float32(C.FMA_BUSY["m"]), np.float32(C.FMA_BUSY["c"])
    assert float(m) == C.FMA_BUSY["m"]           # exactly representable
    steps = C.fma_steps(1024)
    a = x.astype(np.float64)
    for _ in range(steps):
        a = (a * float(m) + float(c)).astype(np.float32).astype(np.float64)
    ref = C.fma_reference(x, m, c, steps)
    err = np.linalg.norm(a - ref) / np.linalg.norm(ref)
    assert err < C.FMA_BUSY_TOL / 4, err
    # the values are still moving at the end: far from the fixed point
    f = float(c) / (1 - float(m))
    assert np.abs(ref - f).mean() > 0.1


# --- launchers: every bad argument is a ValueError before anything touches a GPU ---------------------

F32, U64 = np.float32, np.uint64


@pytest.mark.parametrize("src,dst,msg", [
    (np.zeros(8, F32), FakeDeviceArray((8,), F32), "expected a CUDA device array"),
    (FakeDeviceArray((8,), np.float64), FakeDeviceArray((8,), F32), "expected dtype float32"),
    (FakeDeviceArray((8,), F32), FakeDeviceArray((9,), F32), r"expected shape \(8\)"),
    (FakeDeviceArray((8,), F32, ptr=0x10004), FakeDeviceArray((8,), F32), "16-byte aligned"),
    (FakeDeviceArray((2, 4), F32), FakeDeviceArray((8,), F32), "expected 1 dimensions"),
    (FakeDeviceArray((0,), F32), FakeDeviceArray((0,), F32), "at least one element"),
])
def test_copy_problem_rejects(src, dst, msg):
    with pytest.raises(ValueError, match=msg):
        C.COPY.problem(src, dst)


@pytest.mark.parametrize("src,partial,repeats,msg", [
    (FakeDeviceArray((8,), F32), FakeDeviceArray((3,), np.float64), 1, "expected dtype float32"),
    (FakeDeviceArray((8,), F32), FakeDeviceArray((0,), F32), 1, "blocks' sums"),
    (FakeDeviceArray((8,), F32), FakeDeviceArray((3,), F32), 0, "repeats"),
    (FakeDeviceArray((8,), F32), FakeDeviceArray((3,), F32), 1.5, "repeats"),
    (FakeDeviceArray((2 ** 33,), F32), FakeDeviceArray((3,), F32), 2, "32 bits"),
    (FakeDeviceArray((4 * (2 ** 32 - 5 * 256 * 1056 + 1),), F32), FakeDeviceArray((1056,), F32), 1, "32 bits"),
])
def test_read_v1_rejects(src, partial, repeats, msg):
    with pytest.raises(ValueError, match=msg):
        C.read_v1(src, partial, repeats)


def test_smem_read_v1_rejects():
    seed = FakeDeviceArray((C.SMEM_TILE, 4), F32)
    out = FakeDeviceArray((2 * C.SMEM_THREADS,), F32)
    clk = FakeDeviceArray((2,), U64)
    with pytest.raises(ValueError, match="expected shape"):
        C.smem_read_v1(FakeDeviceArray((C.SMEM_TILE,), F32, ), out, clk, 4)
    with pytest.raises(ValueError, match="multiple of 1024"):
        C.smem_read_v1(seed, FakeDeviceArray((1000,), F32), clk, 4)
    with pytest.raises(ValueError, match="expected dtype uint64"):
        C.smem_read_v1(seed, out, FakeDeviceArray((2,), np.int64), 4)
    with pytest.raises(ValueError, match="iters"):
        C.smem_read_v1(seed, out, clk, 0)


def test_fma_v1_rejects():
    x = FakeDeviceArray((C.FMA_CHAINS, 37), F32)
    clk = FakeDeviceArray((2,), U64)
    with pytest.raises(ValueError, match=r"expected shape \(8, \*\)"):
        C.fma_v1(FakeDeviceArray((4, 37), F32), x, clk, 1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"expected shape \(8, 37\)"):
        C.fma_v1(x, FakeDeviceArray((C.FMA_CHAINS, 38), F32), clk, 1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"expected shape \(2\)"):
        C.fma_v1(x, x, FakeDeviceArray((3,), U64), 1.0, 1.0, 1)
    with pytest.raises(ValueError, match="iters"):
        C.fma_v1(x, x, clk, 1.0, 1.0, -1)


@pytest.mark.parametrize("label", list(C.COPY))
def test_copy_plans(label):
    v = C.COPY[label]
    p = C.COPY.problem(FakeDeviceArray((4 * 256 * 5 + 3,), F32), FakeDeviceArray((4 * 256 * 5 + 3,), F32, ptr=0x20000))
    (ln,) = v.launches(p)
    assert ln.kernel == v.name and ln.block == (C.COPY_THREADS, 1, 1) and ln.grid == (5, 1, 1)
    assert ln.persistent == (label == "v1_vec4")      # v1: one wave, lowered by the driver


def test_kernel_lists_match_the_source_and_the_build():
    """KERNELS names exactly the extern "C" kernels of ceilings.cu, and ptxas reports each of them."""
    import re
    src = C.SOURCE.path.read_text()
    declared = set(re.findall(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\(', src))
    assert declared == set(C.KERNELS), declared ^ set(C.KERNELS)
    assert set(C.SOURCE.ptxas()) == set(C.KERNELS)


def test_l2_sweep_bands_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    mib_tbs = [(4, 9.6), (12, 8.9), (20, 9.1), (28, 9.1), (36, 9.0), (44, 6.0), (52, 8.9), (60, 8.3),
               (72, 7.3), (96, 6.4), (256, 5.0)]
    entries = [{"shape": [m * 2**20 // 4], "metric": t * 1e3} for m, t in reversed(mib_tbs)]
    s = C.l2_sweep(entries, 60 << 20, hbm_read_gbps=4500.0)
    assert s.ws_mib.tolist() == [m for m, _ in mib_tbs]                     # sorted by working set
    assert s.plateau == pytest.approx(9.1) and s.level["half to all of L2"] == pytest.approx(8.6)
    assert s.height(s.plateau) == 1 and s.height(4.5) == 0
    assert s.stays_mib == 96     # 6.4 < (9.1 + 4.5) / 2 = 6.8 from 96 MiB on; 44 MiB dips below but 52 is back up
    assert C.plot_l2_sweep(s).axes
    with pytest.raises(ValueError, match="beyond the L2"):
        C.l2_sweep(entries[3:], 60 << 20, 4500.0)


def test_datasheet_and_orientation_tables():
    from utils.hardware import DATASHEET
    t = C.datasheet_table(DATASHEET)
    assert [r[0] for r in t.rows] == list(C.PARTS) and t.column("FP8")[0] == "n/a"
    assert t.column("ridge FP32 (FLOP/B)")[2] == f"{DATASHEET['H200']['fp32'] / DATASHEET['H200']['hbm_tbps']:.1f}"
    clocks = C.implied_clock_table(DATASHEET)
    assert clocks.column("clock implied by FP32 peak (GHz)")[1] == "1.98"
    entries = [{"op": "copy", "impl": "ceiling.copy", "shape": [1 << 28], "metric": 4220.0 * 1.02},
               {"op": "gemm", "impl": "torch.matmul.tf32", "shape": [4096] * 3, "metric": 359.0 * 1.2}]
    table, ratio = C.orientation(entries, fma_tflops=66.0, fp32_sheet=67.0)
    assert ratio == {"ceiling.copy": pytest.approx(1.02), "torch.matmul.tf32": pytest.approx(1.2)}
    assert table.column("within 10%")[0] == "yes" and "NO" in table.column("within 10%")
    assert "not measured" in table.column("measured here") and table.rows[-1][0] == "ceiling.fma_fp32"
