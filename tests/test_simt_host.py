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
    ok = dict(ilp=1, threads=64, blocks=2)
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
