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


# --- the chapter's tables and readings, from made-up figures -------------------------------------------

def test_device_table_says_na_where_the_device_gives_nothing():
    dev = {"name": "NVIDIA H200", "cc": "9.0", "sms": 132, "regs_per_sm": 65536, "max_threads_per_sm": 2048,
           "smem_per_sm": 233472, "smem_per_block_optin": 232448, "l2_bytes": 60 << 20, "memory_bytes": 150e9}
    clk = {"sm_khz": 1_980_000, "mem_khz": None, "bus_bits": 6144}
    t = C.device_table(dev, clk, None)
    value = dict(zip(t.column("property (reported by the device)"), t.column("value")))
    assert value["SMs"] == "132" and value["max SM clock (MHz)"] == "1,980" and value["L2 (MiB)"] == "60"
    assert value["shared memory per SM (KiB)"] == "228" and value["memory bus width (bits)"] == "6,144"
    assert value["memory clock (MHz)"] == "n/a" and value["HBM peak = clock x 2 x bus / 8 (GB/s)"] == "n/a"
    t = C.device_table(dev, dict(clk, mem_khz=2_619_000), C.hbm_peak_gbps(2_619_000, 6144))
    assert t.rows[-1][1] == "4,023"


def test_datasheet_here(capsys):
    dev = {"name": "NVIDIA H200", "sms": 132, "l2_bytes": 60 << 20}
    assert C.datasheet_here(dev)["part"] == "H200"
    assert "matches the H200 datasheet; SMs reported 132 vs datasheet 132, L2 reported 60 MiB" in capsys.readouterr().out
    assert C.datasheet_here(dict(dev, name="NVIDIA RTX 4090")) is None
    assert "no datasheet figures" in capsys.readouterr().out


def test_hbm_table():
    rows = {"cudaMemcpyAsync D2D": {"metric": 4200.0}, "read_v1_vec4 (reads only)": {"metric": 4410.0}}
    t = C.hbm_table(rows, 4200.0, 4800.0, None)
    assert t.column("GB/s") == ["4,200", "4,410"] and t.column("of datasheet") == ["87.5%", "91.9%"]
    assert t.column("of clock x bus") == ["n/a", "n/a"] and t.column("of cudaMemcpy") == ["1.000", "1.050"]


def test_l2_sweep_sizes_repeats_and_best():
    assert C.L2_SIZES_MIB[0] < 60 / 3 and C.L2_SIZES_MIB[-1] > 4 * 60     # plateau points, and far past the L2
    # floats of the buffer: 4 MiB is read 2048 times per launch, 64 MiB 128 times, 16 GiB once
    assert C.l2_repeats(1 << 20) == 2048 and C.l2_repeats(16 << 20) == 128 and C.l2_repeats(1 << 32) == 1
    entries = [{"shape": [m * 2**20 // 4], "metric": g} for m, g in ((4, 9000.0), (12, 9500.0), (24, 9900.0), (72, 7000.0))]
    assert C.l2_best(entries, 60.0)["metric"] == 9500.0          # 24 MiB is over a third of 60 MiB


def l2_entries():
    mib_tbs = [(4, 9.6), (12, 8.9), (20, 9.1), (28, 9.1), (36, 9.0), (44, 6.0), (52, 8.9), (60, 8.3),
               (72, 7.3), (96, 6.4), (256, 5.0)]
    return [{"shape": [m * 2**20 // 4], "metric": t * 1e3} for m, t in mib_tbs]


def test_print_l2_sweep(capsys):
    s = C.l2_sweep(l2_entries(), 60 << 20, hbm_read_gbps=4500.0)
    C.print_l2_sweep(s, 9.6, 1.98)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("L2 read, best size below a third of the L2: 9.60 TB/s = 2.13x the HBM read; prediction "
                      "~10 TB/s (ratio 0.96)")
    assert out[1].startswith("= 4,848 B/clk at the 1.98 GHz max clock")
    assert out[3].startswith("half to all of L2") and "36, 44, 52, 60 MiB: median 8.60 TB/s, height 0.89" in out[3]
    assert "from 96 MiB (1.6x the L2) on" in out[5] and out[6].endswith("1.11x the flushed HBM read")
    C.print_l2_sweep(s, 9.6, None)
    assert "B/clk" not in capsys.readouterr().out


def test_print_smem(capsys):
    run = C.SmemRun({"metric": 33000.0, "ms": 0.5}, ghz=1.95, loop_cycles=900_000, loop_ns=460_000, iters=1024)
    C.print_smem(run, 132, 1.98, bpc=128.2, bpc_loop=120.0)
    out = capsys.readouterr().out
    assert "33.0 TB/s in total, 250 GB/s per SM" in out and "1.950 GHz; max clock reported 1.980 GHz" in out
    assert "128.2 over the timed launch, 120.0 for block 0 inside its own loop, which took 92.0% of the timed" in out
    assert ("prediction 128 B/clk x 132 SMs x 1.98 GHz = 33.5 TB/s; measured / predicted = 0.986 = clock 0.985 "
            "(loop / max) x per clock 1.002") in out


def test_fma_readings(capsys):
    e = {"flops": 2 * 8 * 32768 * 270336, "ms": 2.2, "metric": 64.4}
    assert C.flop_per_clock_per_sm(e, 1.98, 132) == pytest.approx(e["flops"] / 2.2e-3 / 1.98e9 / 132)
    run = C.FmaRun(e, dict(e, metric=64.3, ms=2.203), 1.98, 1.98, 1.1e-4)
    C.print_fma(run, 132, 1.98, {"fp32": 67.0})
    out = capsys.readouterr().out
    assert "relative error vs float64 closed form 1.1e-04 (tolerance 1e-03)" in out
    assert "measured / predicted = 0.963 = clock 1.000 (loop / max)" in out and "issue-slot bound 0.988" in out
    assert "measured / datasheet FP32 (67.0) = 0.961" in out and "busy vs exact data: +0.2%" in out


def test_gemm_table_and_roofline_points():
    entries = [{"impl": "cublas_bf16", "dtype": "bfloat16", "shape": [8192] * 3, "ms": 1.6, "metric": 686.0},
               {"impl": "cublas_fp32", "dtype": "float32", "shape": [4096] * 3, "ms": 2.7, "metric": 51.0,
                "bytes": 12345},
               {"impl": "torch.matmul.tf32", "dtype": "tf32", "shape": [4096] * 3, "ms": 0.4, "metric": 359.0}]
    t = C.gemm_table(entries, {"bf16": 989.4, "fp32": 67.0, "tf32": 494.7}, {"cublas_fp32": 1.2e-7})
    assert t.column("shape") == ["8192×8192×8192", "4096×4096×4096", "4096×4096×4096"]
    assert t.column("of datasheet peak") == ["69%", "76%", "73%"]
    assert t.column("rel. error (64 rows)") == ["bf16 checked < 1e-2", "1.2e-07", "bf16 checked < 1e-2"]
    assert C.gemm_table(entries, None, {}).column("of datasheet peak") == ["n/a"] * 3
    fma = {"impl": "ceiling.fma_fp32", "bytes": 64}
    pts = C.roofline_points(fma, entries)
    assert pts[0] is fma and [p["bytes"] for p in pts[1:]] == [3 * 8192 ** 2 * 2, 12345, 3 * 4096 ** 2 * 4]
    assert "bytes" not in entries[0]                              # the record's entries stay as they are


def test_print_ridge_points(capsys):
    from utils.hardware import DATASHEET
    C.print_ridge_points({"copy": 4200.0, "fma_fp32": 63.0, "cublas_bf16": 735.0}, DATASHEET["H200"], DATASHEET["A100"])
    out = capsys.readouterr().out.splitlines()
    assert out == ["ridge points from the measured ceilings: FP32 15.0 FLOP/B, bf16 (cuBLAS) 175 FLOP/B",
                   "from the datasheet: FP32 14.0 FLOP/B, bf16 206 FLOP/B",
                   "A100 datasheet for contrast: FP32 9.6 FLOP/B, bf16 153 FLOP/B"]
