"""Chapter 1 host side on a CPU: references, cost models, grids, plans, validation."""

import numpy as np
import pytest

from kernels import simt
from tests.fakes import FakeDeviceArray
from utils.occupancy import from_function

SEED = 20261201


def f32(*shape, ptr=0x10000):
    return FakeDeviceArray(shape, np.float32, ptr)


# --- cost models ---------------------------------------------------------------------------------------

def test_cost_models():
    assert simt.vector_add_nbytes(2**28) == 12 * 2**28
    assert simt.vector_add_nbytes(10, itemsize=2) == 60
    assert simt.vector_add_flops(7) == 7
    assert simt.branch_flops(100, 512) == 100 * 512 * 4 * 2
    assert simt.read_sum_nbytes(1000, 64) == 16_000 + 256
    assert simt.bytes_in_flight_per_sm(64, 1) == 64 * 32 * 16
    assert simt.bytes_in_flight_per_sm(8, 4, bytes_per_load=8) == 8 * 32 * 8 * 4
    # Little's law: 32 KiB per SM on 132 SMs at 1000 ns -> 4.3 GB/ms = 4325 GB/s
    assert simt.littles_law_gbps(32768, 132, 1000.0) == pytest.approx(4325.376)


# --- references ----------------------------------------------------------------------------------------

def simulate_branch(x, paths, iters, by_lane, threads=256):
    """The kernel's arithmetic, step by step, in float32 (c = 1)."""
    n = x.size
    y = np.full(n, np.nan, np.float32)
    for i in range(n):
        lane, warp = (i % threads) % 32, i // 32
        path = (lane if by_lane else warp) % paths
        for p in range(paths):
            if path != p:
                continue
            d = np.float32(p + 1)
            v = [np.float32(x[i] + q) for q in range(4)]
            for _ in range(iters):
                v = [np.float32(vq * np.float32(1.0) + d) for vq in v]
            y[i] = np.float32((v[0] + v[1]) + (v[2] + v[3]))
    return y


@pytest.mark.parametrize("by_lane", [True, False])
@pytest.mark.parametrize("paths", [1, 3, 32])
def test_branch_ref_matches_the_kernel_arithmetic(by_lane, paths):
    x = simt.integer_valued(300, seed=SEED, xp=np)
    got = simulate_branch(x, paths, 5, by_lane)
    ref = simt.branch_ref(x, paths, 5, by_lane)
    np.testing.assert_array_equal(got.astype(np.float64), ref, err_msg=f"seed {SEED}")


def emulate_branch_fp32(x, d, iters):
    """The kernel's four chains for one path constant d, all elements at once, rounded to fp32 per step."""
    one, d = np.float32(1.0), np.float32(d)
    v = [x + np.float32(q) for q in range(4)]
    for _ in range(iters):
        v = [(vq * one + d).astype(np.float32) for vq in v]
    return ((v[0] + v[1]) + (v[2] + v[3])).astype(np.float32)


def test_branch_experiment_stays_exact_in_fp32():
    """The chapter's parameters (BRANCH_ITERS, BRANCH_X_MAX, 32 paths) keep every value an exact fp32
    integer: the fp32 emulation of the extreme inputs equals the float64 reference bit for bit."""
    assert simt.branch_largest_value() < 2**24, simt.branch_largest_value()
    x = np.array([-simt.BRANCH_X_MAX, -1, 0, simt.BRANCH_X_MAX], np.float32)
    for p in (0, simt.WARP - 1):                      # the smallest and the largest path constant
        got = emulate_branch_fp32(x, p + 1, simt.BRANCH_ITERS)
        want = 4.0 * x.astype(np.float64) + 6.0 + 4.0 * simt.BRANCH_ITERS * (p + 1)
        np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=f"path {p}")


def simulate_read_sum(x4, T, ilp):
    """The read kernel's index walk: main loop of ILP loads, then single loads."""
    n4 = x4.shape[0]
    out = np.zeros(T)
    seen = np.zeros(n4, int)
    for t in range(T):
        acc = 0.0
        i = t
        while i + (ilp - 1) * T < n4:
            for j in range(ilp):
                acc += x4[i + j * T].sum()
                seen[i + j * T] += 1
            i += ilp * T
        while i < n4:
            acc += x4[i].sum()
            seen[i] += 1
            i += T
        out[t] = acc
    return out, seen


@pytest.mark.parametrize("n4,T,ilp", [(1, 64, 1), (37, 64, 2), (1003, 64, 4), (1003, 128, 8), (5000, 96, 8)])
def test_read_sum_ref_matches_the_index_walk(n4, T, ilp):
    seed = SEED + n4 + T + ilp
    x4 = np.random.default_rng(seed).standard_normal((n4, 4))
    out, seen = simulate_read_sum(x4, T, ilp)
    assert (seen == 1).all(), "every float4 is read exactly once"
    np.testing.assert_allclose(simt.read_sum_ref(x4.sum(axis=1), T), out, rtol=1e-12, atol=1e-12,
                               err_msg=f"seed {seed}")


def test_expected_masks():
    m = simt.expected_masks(2)
    assert m[0] == 0x55555555 and m[1] == 0xAAAAAAAA
    assert (simt.expected_masks(1) == 0xFFFFFFFF).all()
    assert [int(v) for v in simt.expected_masks(32)[:3]] == [1, 2, 4]
    assert int(simt.expected_masks(4)[3]) == 0x88888888


# --- grids and plans ------------------------------------------------------------------------------------

def test_grids():
    assert simt.grid_one_per_thread(1) == 1
    assert simt.grid_one_per_thread(2**28) == 2**20
    assert simt.grid_one_per_thread(257) == 2
    assert simt.grid_stride_blocks(2**28, 1056) == 1056
    assert simt.grid_stride_blocks(37, 1056) == 1       # never more blocks than work
    assert simt.grid_stride_blocks(0, 1056) == 1
    with pytest.raises(ValueError, match="blocks"):
        simt.grid_stride_blocks(100, 0)
    assert simt.grid_tiles(1) == 1 and simt.grid_tiles(3) == 1
    assert simt.grid_tiles(2**28) == 2**26 // 512
    assert simt.grid_tiles(4 * 512 + 4) == 2
    src = simt.SOURCE.path.read_text()
    assert f"#define V3_PER_THREAD {simt.V3_PER_THREAD} " in src


def vector_problem(n, ptrs=(0x10000, 0x20000, 0x30000)):
    return simt.VECTOR_ADD.problem(*(f32(n, ptr=p) for p in ptrs))


# (n, grid, persistent) of each version's default plan (256-thread blocks)
PLANS = {
    "v0_one_per_thread": [(1, 1, False), (257, 2, False), (2**28, 2**20, False)],
    "v1_grid_stride": [(1, 1, True), (257, 2, True), (2**28, 2**20, True)],
    "v2_float4": [(1, 1, True), (4 * 257, 2, True), (2**28, 2**18, True)],
    "v3_float4_tile": [(1, 1, False), (4 * 512 + 4, 2, False), (2**28, 2**17, False)],
}


@pytest.mark.parametrize("label", list(simt.VECTOR_ADD))
def test_vector_add_plans(label):
    v = simt.VECTOR_ADD[label]
    for n, grid, persistent in PLANS[label]:
        (ln,) = v.launches(vector_problem(n))
        assert ln.kernel == v.name and ln.block == (256, 1, 1), (n, ln)
        assert (ln.grid[0], ln.persistent) == (grid, persistent), (n, ln)
        assert int(ln.args[-1]) == n


@pytest.mark.parametrize("label", ["v1_grid_stride", "v2_float4"])
def test_grid_stride_versions_take_an_explicit_grid(label):
    v = simt.VECTOR_ADD[label]
    (ln,) = v.launches(vector_problem(2**28), simt.VectorAddConfig(threads=128, blocks=264))
    assert ln.grid == (264, 1, 1) and ln.block == (128, 1, 1) and not ln.persistent
    (ln,) = v.launches(vector_problem(40), simt.VectorAddConfig(threads=128, blocks=264))
    assert ln.grid == (1, 1, 1)


@pytest.mark.parametrize("label", list(simt.VECTOR_ADD))
def test_vector_add_versions_reject_bad_threads(label):
    with pytest.raises(ValueError, match="multiple of 32"):
        simt.VECTOR_ADD[label].launches(vector_problem(64), simt.VectorAddConfig(threads=100, blocks=None))


def test_read_kernels_hold_32_warps_per_sm_and_the_report_covers_every_version():
    """Every ILP variant has registers for at least 32 warps per SM (the sweep needs them)."""
    rep = simt.SOURCE.ptxas()
    for ilp in simt.READ_ILPS:
        occ = from_function(rep[simt.read_kernel(ilp)], 256)
        assert occ.warps >= 32, (ilp, occ)
    for v in simt.VECTOR_ADD.values():
        assert v.name in rep


def test_read_config():
    assert simt.read_config(2) == (64, 1)
    assert simt.read_config(4) == (128, 1)
    assert simt.read_config(8) == (256, 1)
    assert simt.read_config(64) == (256, 8)
    for w in simt.READ_WARPS:
        t, b = simt.read_config(w)
        assert t * b == 32 * w and t <= simt.READ_MAX_THREADS
    with pytest.raises(ValueError):
        simt.read_config(12)


# --- launcher validation ------------------------------------------------------------------------------------

def test_vector_add_problem_rejects_bad_arguments():
    P = simt.VECTOR_ADD.problem
    with pytest.raises(ValueError, match="expected a CUDA device array"):
        P(np.zeros(4, np.float32), f32(4), f32(4))
    with pytest.raises(ValueError, match="expected dtype float32, got float64"):
        P(FakeDeviceArray((4,), np.float64), f32(4), f32(4))
    with pytest.raises(ValueError, match=r"expected shape \(4\)"):
        P(f32(4), f32(5), f32(4))
    with pytest.raises(ValueError, match="expected 1 dimensions"):
        P(f32(2, 2), f32(2, 2), f32(2, 2))
    with pytest.raises(ValueError, match="at least one element"):
        P(f32(0), f32(0), f32(0))


@pytest.mark.parametrize("label", list(simt.VECTOR_ADD))
def test_vector_versions_alignment(label):
    """v2 and v3 (float4) need 16-byte aligned arrays; v0 and v1 take 4-byte aligned ones."""
    v = simt.VECTOR_ADD[label]
    for ptrs in ((0x10004, 0x20000, 0x30000), (0x10000, 0x20000, 0x30008)):
        p = vector_problem(4, ptrs)
        if label in ("v2_float4", "v3_float4_tile"):
            with pytest.raises(ValueError, match="16-byte aligned"):
                v.launches(p)
        else:
            assert v.launches(p)


def test_branch_launcher_rejects_bad_arguments():
    with pytest.raises(ValueError, match="by must be"):
        simt.launch_branch("block", f32(64), f32(64), paths=2, iters=1)
    with pytest.raises(ValueError, match="paths must be within"):
        simt.launch_branch("lane", f32(64), f32(64), paths=33, iters=1)
    with pytest.raises(ValueError, match="paths must be within"):
        simt.launch_branch("lane", f32(64), f32(64), paths=0, iters=1)
    with pytest.raises(ValueError, match="iters"):
        simt.launch_branch("warp", f32(64), f32(64), paths=2, iters=-1)
    with pytest.raises(ValueError, match=r"expected shape \(64\)"):
        simt.launch_branch("warp", f32(64), f32(65), paths=2, iters=1)
    with pytest.raises(ValueError, match="int32"):
        simt.launch_branch("warp", f32(2**31), f32(2**31), paths=2, iters=1)


def test_read_launcher_rejects_bad_arguments():
    ok = {"ilp": 1, "threads": 64, "blocks": 2}
    x4, out, smid = f32(100, 4), f32(128), FakeDeviceArray((2,), np.int32)
    with pytest.raises(ValueError, match="ilp must be one of"):
        simt.launch_read_sum(x4, out, smid, ilp=3, threads=64, blocks=2)
    with pytest.raises(ValueError, match="up to 256"):
        simt.launch_read_sum(x4, out, smid, ilp=1, threads=512, blocks=2)
    with pytest.raises(ValueError, match=r"expected shape \(\*, 4\)"):
        simt.launch_read_sum(f32(100, 3), out, smid, **ok)
    with pytest.raises(ValueError, match=r"expected shape \(128\)"):
        simt.launch_read_sum(x4, f32(64), smid, **ok)
    with pytest.raises(ValueError, match="expected dtype int32"):
        simt.launch_read_sum(x4, out, f32(2), **ok)
    with pytest.raises(ValueError, match="16-byte aligned"):
        simt.launch_read_sum(f32(100, 4, ptr=0x10008), out, smid, **ok)


def test_ptx_helpers():
    ptx = (".visible .entry k0(\n\t.param .u64 p\n)\n{\n\tld.global.nc.f32 \t%f1, [%rd1];\n"
           "\tadd.f32 %f2, %f1, %f1;\n\tst.global.f32 \t[%rd2], %f2;\n\tret;\n}\n"
           ".visible .entry k1(\n)\n{\n\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd1];\n}\n")
    assert simt.ptx_memory_ops(ptx, "k0") == ["ld.global.nc.f32", "st.global.f32"]
    assert simt.ptx_memory_ops(ptx, "k1") == ["ld.global.nc.v4.f32"]
    with pytest.raises(KeyError):
        simt.ptx_entry(ptx, "k2")




def test_the_chapter_ladder_and_its_cases():
    from tests.test_version_ladder import FakeRecord
    lad = simt.ladder(FakeRecord())
    assert lad.registry is simt.VECTOR_ADD and lad.shapes == [(simt.CHAPTER_N,)] and lad.tol == {"float32": 0.0}
    assert (1,) in lad.odd_shapes and "cupy.add" in lad.peers
    case = simt.make_case((37,), np.float32, np.random.default_rng(SEED), xp=np)
    a, b, c = case.args
    assert c.shape == (37,) and case.out is c
    np.testing.assert_array_equal(lad.reference(case), a + b, err_msg=f"seed {SEED}")
    assert lad.cost((37,), np.float32)["nbytes"] == 12 * 37


def sweep_entry(warps, ilp, gbps):
    return {"shape": [1 << 25, warps, ilp], "metric": gbps}


def test_latency_sweep_readings():
    import matplotlib
    matplotlib.use("Agg")
    sms, copy = 132, 4000.0
    lat = 500.0                                   # ns: every point below the ceiling obeys Little's law
    pts = [sweep_entry(w, i, min(copy, simt.littles_law_gbps(simt.bytes_in_flight_per_sm(w, i), sms, lat)))
           for i in simt.READ_ILPS for w in (2, 4, 8, 16)]
    fit = simt.fit_latency(pts, sms, copy)
    assert fit.latency_ns == pytest.approx(lat) and fit.knee_bytes == pytest.approx(copy * lat / sms)
    assert fit.points == sum(1 for e in pts if e["metric"] < 0.5 * copy)
    assert simt.ilp_over_warps(pts) and all(r == pytest.approx(1.0) for r in simt.ilp_over_warps(pts))
    x = simt.bytes_in_flight_per_sm(4, 1)
    assert simt.swept_gbps(pts, x) == pytest.approx(simt.littles_law_gbps(x, sms, lat))
    assert simt.plot_latency_sweep(pts, sms, copy, fit.latency_ns).axes
    with pytest.raises(ValueError, match="below half"):
        simt.fit_latency([sweep_entry(64, 8, copy)], sms, copy)


def test_branch_plot():
    import matplotlib
    matplotlib.use("Agg")
    t = {"lane": np.array(simt.BRANCH_PATHS, float), "warp": np.ones(len(simt.BRANCH_PATHS))}
    assert simt.plot_branch(t, title="branches").axes


# --- the chapter's experiments: what runs without a GPU -------------------------------------------------

class FakeLadder:
    """Records va.time calls; fraction_of_copy reads a table of made-up fractions by impl."""

    def __init__(self, frac):
        self.frac, self.timed = frac, []

    def time(self, label, config=None, impl=None):
        self.timed.append((label, config, impl))

    def fraction_of_copy(self, impl, shape, dtype):
        assert dtype == "float32"
        return self.frac[impl]


class FakeRec:
    def __init__(self, entries):
        self.entries = entries

    def find(self, op=None, impl=None, **match):
        from utils.record import select
        return select(self.entries, op=op, impl=impl, **match)

    def get(self, op, impl, **match):
        (e,) = self.find(op, impl, **match)
        return e


def test_copy_vs_datasheet(monkeypatch, capsys):
    import utils.hardware
    monkeypatch.setattr(utils.hardware, "datasheet", lambda name=None: {"part": "H200", "hbm_tbps": 4.8})
    assert simt.copy_vs_datasheet(4200.0) == pytest.approx(0.875)
    assert "= 88% of the datasheet's 4,800 GB/s (predicted ~87%: ratio 1.01)" in capsys.readouterr().out

    def unknown(name=None):
        raise KeyError("no datasheet figures")
    monkeypatch.setattr(utils.hardware, "datasheet", unknown)
    assert simt.copy_vs_datasheet(4200.0) is None
    assert "no datasheet figure for this GPU" in capsys.readouterr().out


def test_peer_table():
    entries = [{"impl": "cupy.add", "ms": 1.2744, "metric": 2529.4}, {"impl": "torch.add", "ms": 0.7321, "metric": 4401.9}]
    t = simt.peer_table(entries, 4246.6, {"cupy.add": 0.85, "torch.add": 0.95})
    assert t.column("peer") == ["cupy.add", "torch.add"]
    assert t.column("ms") == ["1.274", "0.732"] and t.column("GB/s") == ["2,529", "4,402"]
    assert t.column("of copy") == ["59.6%", "103.7%"] and t.column("predicted") == ["85%", "95%"]


def test_block_size_sweep_times_the_other_sizes_under_the_records_names():
    assert simt.v0_impl(simt.THREADS) == "v0_one_per_thread"
    assert simt.v0_impl(128) == "v0_one_per_thread[threads=128]"
    va = FakeLadder({simt.v0_impl(t): f for t, f in zip(simt.BLOCK_SIZES, (0.6, 0.81, 0.76, 0.7))})
    frac, table = simt.block_size_sweep(va, (2**28,))
    assert [(lab, cfg.threads, cfg.blocks, impl) for lab, cfg, impl in va.timed] == [
        ("v0_one_per_thread", t, None, f"v0_one_per_thread[threads={t}]") for t in (128, 512, 1024)]
    assert frac == {128: 0.6, 256: 0.81, 512: 0.76, 1024: 0.7}
    assert table.column("blocks") == ["2,097,152", "1,048,576", "524,288", "262,144"]
    assert table.column("of copy") == ["60%", "81%", "76%", "70%"]


def test_grid_sweep_names_sizes_table_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    assert simt.grid_impl("v2_float4", 6) == "v2_float4[blocks_per_sm=6]"
    assert simt.grid_sizes(8) == [1, 2, 4, 8, 16] and simt.grid_sizes(4) == [1, 2, 4, 8]
    resident = {"v1_grid_stride": 8, "v2_float4": 6}
    frac = {simt.grid_impl(lab, k): 0.5 + 0.01 * k for lab in resident for k in simt.grid_sizes(resident[lab])}
    va = FakeLadder(frac)
    g = simt.grid_sweep(va, resident, 132, (2**28,))
    assert [(lab, cfg.blocks, impl) for lab, cfg, impl in va.timed][:2] == [
        ("v1_grid_stride", 132, "v1_grid_stride[blocks_per_sm=1]"), ("v1_grid_stride", 264, "v1_grid_stride[blocks_per_sm=2]")]
    assert all(cfg.threads == simt.THREADS for _, cfg, _ in va.timed) and len(va.timed) == 5 + 5
    assert list(g) == ["v1_grid_stride", "v2_float4"] and list(g["v2_float4"]) == [1, 2, 4, 6, 12]
    assert g["v1_grid_stride"][16] == pytest.approx(0.66)
    t = simt.grid_sweep_table(g)
    assert t.columns == ["blocks per SM", "v1_grid_stride", "v2_float4"]
    assert t.column("blocks per SM") == ["1", "2", "4", "6", "8", "12", "16"]
    assert t.column("v2_float4")[4] == "" and t.column("v1_grid_stride")[4] == "58%"
    assert simt.plot_grid_sweep(g).axes


def test_resource_table_and_residency(monkeypatch, capsys):
    """The driver's and the formula's answers per version, from fakes of the loaded kernels."""
    import utils.occupancy
    import utils.version

    class Fn:
        def __init__(self, name):
            self.num_regs = 40 if "v2" in name else 32
            self.shared_size_bytes, self.local_size_bytes = 0, 0

    class Source:
        function = Fn
    monkeypatch.setattr(simt, "SOURCE", Source())
    monkeypatch.setattr(utils.version, "driver_blocks_per_sm", lambda fn, threads: 6 if fn.num_regs == 40 else 8)
    t = simt.resource_table()
    assert t.column("kernel") == [v.name for v in simt.VECTOR_ADD.values()]
    assert t.column("registers per thread") == ["32", "32", "40", "32"]
    occ = simt.residency(132)
    assert list(occ) == list(simt.VECTOR_ADD)
    assert {lab: d for lab, (_, d) in occ.items()}["v2_float4"] == 6
    assert all(o.blocks == d for o, d in occ.values())            # 40 registers: 6 blocks of 256, as the driver
    out = capsys.readouterr().out
    assert "v2_float4: 40 registers/thread -> driver: 6 resident blocks of 256 threads = 48 warps per SM" in out
    assert "one wave = 792 blocks" in out


def test_print_ptx_memory_ops(monkeypatch, capsys):
    import utils.build
    simt.print_ptx_memory_ops()          # NVRTC on the CPU
    out = capsys.readouterr().out
    assert "v0_one_per_thread: ld.global.nc.f32 x2, st.global.f32 x1" in out, out
    assert out.count("\n") == 4 and "v2_float4: ld.global.nc.v4.f32" in out

    def broken(src):
        raise RuntimeError("no NVRTC")
    monkeypatch.setattr(utils.build, "ptx", broken)
    simt.print_ptx_memory_ops()
    assert capsys.readouterr().out == "PTX listing not available here (RuntimeError: no NVRTC)\n"


def test_print_branch(monkeypatch, capsys):
    import utils.hardware
    monkeypatch.setattr(utils.hardware, "datasheet", lambda name=None: {"fp32": 67.0})
    n, paths = 1000, simt.BRANCH_PATHS
    rec = FakeRec([{"op": "branch", "impl": "by_lane", "shape": [n, p], "metric": 53.6 / p} for p in paths])
    t = {"lane": np.array([1.0 * p for p in paths]), "warp": np.array([1.0, 1.0, 1.0, 1.0, 1.05, 1.1])}
    simt.print_branch(rec, t, n, paths)
    out = capsys.readouterr().out
    assert "1 path: 53.6 TFLOP/s = 80% of the datasheet fp32 peak (predicted 80%: ratio 1.00)" in out
    assert "by lane: time / time(1 path) = 1.00, 2.00, 4.00, 8.00, 16.00, 32.00  for paths = (1, 2, 4, 8, 16, 32)" in out
    assert "By lane, 32 paths cost 32.0x one path (predicted 32x: ratio 1.00); by warp, the slowest point is 1.10x" in out


def test_print_branch_sass(monkeypatch, capsys):
    import utils.build
    listing = "\n".join(f"        /*{i:04x}*/                   {op} ;" for i, op in enumerate(
        ["IMAD R1, R2, R3", "BSSY B0, 0x100", "@P0 BRA 0x80", "FFMA R1, R1, R2, R3", "FFMA R1, R1, R2, R3",
         "BSYNC B0", "@!P1 BRA 0x40", "EXIT"]))
    monkeypatch.setattr(utils.build, "sass", lambda src, kernel: listing)
    simt.print_branch_sass()
    assert capsys.readouterr().out.splitlines() == ["BSSY B0, 0x100", "@P0 BRA 0x80", "FFMA x2", "BSYNC B0",
                                                    "@!P1 BRA 0x40"]

    def missing(src, kernel):
        raise FileNotFoundError("cuobjdump")
    monkeypatch.setattr(utils.build, "sass", missing)
    simt.print_branch_sass()
    assert capsys.readouterr().out.startswith("SASS not available here (FileNotFoundError)")


def test_latency_configs_skip_what_the_registers_do_not_allow():
    configs, skipped = simt.latency_configs(lambda ilp, threads: 4 if ilp >= 4 else 8)
    assert [(w, i) for w, i, _, _ in skipped] == [(64, 4), (64, 8)]
    assert len(configs) == len(simt.READ_ILPS) * len(simt.READ_WARPS) - 2
    assert (64, 1, 256, 8) in configs and (32, 8, 256, 4) in configs


def littles_sweep(sms=132, copy=4000.0, lat=500.0, warps=(2, 4, 8, 16, 32)):
    return [sweep_entry(w, i, min(1.05 * copy, simt.littles_law_gbps(simt.bytes_in_flight_per_sm(w, i), sms, lat)))
            for i in simt.READ_ILPS for w in warps]


def test_read_latency_sweep(capsys):
    pts = littles_sweep()
    fit = simt.fit_latency(pts, 132, 4000.0)
    r = simt.read_latency_sweep(pts, fit, 4000.0)
    assert (r.best_warps, r.best_ilp) == (32, 1)         # the first of the points at the cap, in sweep order
    assert r.ilp8_16w == pytest.approx(1.05) and r.pairs and max(r.pairs) == pytest.approx(1.0)
    out = capsys.readouterr().out
    assert "implied memory latency (median over" in out and "500 ns (predicted 650 ns: ratio 0.77)" in out
    assert "over 9 pairs (1.00 = interchangeable)" in out
    for e in pts:                                        # one point below the cap: ILP 8 with 16 warps
        if e["shape"][1:] == [16, 8]:
            e["metric"] = 3960.0
    assert simt.read_latency_sweep(pts, fit, 4000.0).ilp8_16w == pytest.approx(0.99)
    r = simt.read_latency_sweep([e for e in pts if e["shape"][2] != 8], fit, 4000.0)
    assert np.isnan(r.ilp8_16w)


def test_pointer_chase_ns(tmp_path):
    import json
    (tmp_path / "gpu-x").mkdir()
    entries = [{"chapter": "04", "op": "pointer_chase", "impl": "chase", "is_peer": False, "dtype": "int32",
                "shape": [ws // 4], "ms": 1.0, "metric_name": "us", "metric": 1.0, "run": "r", "ws_bytes": ws,
                "ns_per_load": ns} for ws, ns in ((1 << 20, 200.0), (256 << 20, 400.0), (1 << 30, 420.0))]
    (tmp_path / "gpu-x" / "04-memory-hierarchy.json").write_text(json.dumps({"entries": entries}))
    assert simt.pointer_chase_ns("gpu-x", root=tmp_path) == pytest.approx(410.0)
    assert simt.pointer_chase_ns("gpu-y", root=tmp_path) is None


def test_versions_at_the_knee(capsys):
    sms, copy, lat = 132, 4000.0, 500.0
    pts = littles_sweep(sms, copy, lat)
    fit = simt.fit_latency(pts, sms, copy)
    per_thread = {"v0_one_per_thread": 8, "v1_grid_stride": 32, "v2_float4": 64, "v3_float4_tile": 64}
    resident = {"v0_one_per_thread": 8, "v1_grid_stride": 8, "v2_float4": 6, "v3_float4_tile": 8}
    rec = FakeRec([{"op": "vector_add", "impl": lab, "metric": m} for lab, m in
                   zip(per_thread, (3000.0, 3600.0, 4000.0, 4100.0))])
    kv = simt.versions_at_the_knee(rec, resident, per_thread, pts, sms, copy, lat, fit.knee_bytes)
    assert kv.inflight == {"v0_one_per_thread": 64 * 32 * 8, "v1_grid_stride": 64 * 32 * 32,
                           "v2_float4": 48 * 32 * 64, "v3_float4_tile": 64 * 32 * 64}
    assert kv.swept["v0_one_per_thread"] == pytest.approx(simt.swept_gbps(pts, 16384))
    assert kv.measured["v2_float4"] == 4000.0
    assert kv.table.column("warps per SM") == ["64", "64", "48", "64"]
    assert kv.table.column("KiB in flight per SM") == ["16", "64", "96", "128"]
    assert kv.table.column("measured, of copy") == ["75%", "90%", "100%", "102%"]
    assert "v0: 16 KiB in flight per SM (knee" in capsys.readouterr().out
