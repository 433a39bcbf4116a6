"""Chapter 3 host side on a CPU: index formulas, the wave model, references, cost models, launch checks."""
import numpy as np
import pytest

from kernels import cluster as cl
from kernels import launch as ln
from kernels import progmodel as pm
from tests.fakes import FakeDeviceArray
from utils.check import CheckFailed


# --- whoami -------------------------------------------------------------------------------------------

def test_whoami_expected_follows_the_formulas():
    grid, block = (3, 2, 2), (5, 3, 4)
    t = pm.whoami_expected(grid, block)
    F = {f: i for i, f in enumerate(pm.WHOAMI_FIELDS)}
    assert t.shape == (3 * 2 * 2 * 60, len(pm.WHOAMI_FIELDS))
    assert (t[:, F["global_id"]] == np.arange(t.shape[0])).all()
    assert (t[:, F["thread_in_block"]] == np.arange(t.shape[0]) % 60).all()
    assert (t[:, F["block_linear"]] == np.arange(t.shape[0]) // 60).all()
    assert set(t[:, F["warp"]]) == {0, 1} and (t[:, F["warp"]] == 1).sum() == 12 * 28
    # thread (x=4, y=2, z=3) of block (2, 1, 1): linear tid 4 + 5 * (2 + 3 * 3) = 59
    row = t[(2 + 3 * (1 + 2 * 1)) * 60 + 59]
    assert row[F["thread_x"]] == 4 and row[F["thread_y"]] == 2 and row[F["thread_z"]] == 3
    assert (row[F["x"]], row[F["y"]], row[F["z"]]) == (2 * 5 + 4, 1 * 3 + 2, 1 * 4 + 3)
    # every global (x, y, z) appears exactly once
    xyz = t[:, [F["x"], F["y"], F["z"]]]
    assert len({tuple(r) for r in xyz}) == t.shape[0]


@pytest.mark.parametrize("grid,block,msg", [((0,), (32,), "positive"), ((1,), (1025,), "limits"),
                                            ((1,), (32, 32, 2), "at most 1024"), ((1,), (1, 1, 65), "limits")])
def test_launch_shape_checks(grid, block, msg):
    with pytest.raises(ValueError, match=msg):
        pm.check_launch_shape(grid, block)


def test_check_whoami_catches_wrong_fields_and_split_blocks():
    grid, block = (2, 1, 1), (40, 1, 1)
    good = pm.whoami_expected(grid, block)
    good[:, pm.SMID] = np.repeat([3, 7], 40)
    pm.check_whoami(good, grid, block, sms=132)
    bad = good.copy()
    bad[45, pm.WHOAMI_FIELDS.index("lane")] = 0
    with pytest.raises(CheckFailed, match="lane"):
        pm.check_whoami(bad, grid, block, sms=132)
    split = good.copy()
    split[41, pm.SMID] = 8
    with pytest.raises(CheckFailed, match="different SMs"):
        pm.check_whoami(split, grid, block, sms=132)


# --- waves ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", range(1, 9))
def test_wave_smem_caps_blocks_per_sm(k):
    s = pm.wave_smem_bytes(k)
    assert k * (s + 1024) <= 233472 < (k + 1) * (s + 1024) and s % 1024 == 0 and s <= 232448


def test_wave_smem_known_values_and_errors():
    assert [pm.wave_smem_bytes(k) for k in (1, 2, 4)] == [232448, 115712, 57344]
    with pytest.raises(ValueError):
        pm.wave_smem_bytes(0)


def test_wave_model():
    W = 528
    pts = pm.wave_points(W)
    assert 1 in pts and W in pts and W + 1 in pts and 3 * W + 1 in pts and pts == sorted(set(pts))
    assert list(pm.waves([1, W, W + 1, 2 * W + 1], W)) == [1, 1, 2, 3]
    assert pm.wave_model_ms([W, W + 1], W, 0.02, 0.005).tolist() == pytest.approx([0.025, 0.045])
    assert pm.wave_efficiency([W, W + 1], W).tolist() == pytest.approx([1.0, (W + 1) / (2 * W)])


def test_split_waves():
    starts = [0, 32, 64, 20000, 20032, 40000]
    assert pm.split_waves(starts, gap_ns=5000) == [3, 2, 1]
    assert pm.split_waves([], 1.0) == []


# --- block sum and filter --------------------------------------------------------------------------------

@pytest.mark.parametrize("n,blocks,threads", [(1, 1, 256), (37, 3, 4), (1000, 5, 8), (4099, 2, 32)])
def test_block_sum_ref_matches_a_direct_walk(n, blocks, threads):
    x = pm.integer_valued(n, seed=n + blocks, xp=np)
    want = np.zeros(blocks)
    n4 = n // 4
    T = blocks * threads
    for t in range(T):                       # the kernel's loop, thread by thread
        for q in range(t, n4, T):
            want[t // threads] += x[4 * q:4 * q + 4].sum()
        if t < n - 4 * n4:
            want[t // threads] += x[4 * n4 + t]
    assert np.array_equal(pm.block_sum_ref(x, blocks, threads), want)


def test_block_sum_and_filter_problems_check_arguments():
    x = FakeDeviceArray((1024,), np.float32)
    with pytest.raises(ValueError, match="16-byte aligned"):
        pm.BLOCK_SUM.problem(FakeDeviceArray((1024,), np.float32, ptr=0x10004), FakeDeviceArray((8,), np.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        pm.BLOCK_SUM.problem(x, FakeDeviceArray((8,), np.float64))
    with pytest.raises(ValueError, match="dtype uint32"):
        pm.FILTER.problem(x, 0.0, FakeDeviceArray((1024,), np.float32), FakeDeviceArray((1,), np.int32))
    with pytest.raises(ValueError, match=r"shape \(1024\)"):
        pm.FILTER.problem(x, 0.0, FakeDeviceArray((1000,), np.float32), FakeDeviceArray((1,), np.uint32))
    assert pm.block_sum_nbytes(100, 3) == 412 and pm.filter_nbytes(100, 10) == 440


@pytest.mark.parametrize("label", list(pm.BLOCK_SUM))
def test_block_sum_plans_one_block_per_partial(label):
    v = pm.BLOCK_SUM[label]
    (ln,) = v.launches(pm.BLOCK_SUM.problem(FakeDeviceArray((1001,), np.float32), FakeDeviceArray((7,), np.float32)))
    assert (ln.kernel, ln.grid, ln.block, int(ln.args[1])) == (v.name, (7, 1, 1), (pm.SUM_THREADS, 1, 1), 1001)


@pytest.mark.parametrize("label", list(pm.FILTER))
def test_filter_plans_a_persistent_grid_stride_launch(label):
    v = pm.FILTER[label]
    p = pm.FILTER.problem(FakeDeviceArray((1001,), np.float32), 0.5, FakeDeviceArray((1001,), np.float32),
                          FakeDeviceArray((1,), np.uint32))
    (ln,) = v.launches(p)
    assert ln.kernel == v.name and ln.persistent and ln.grid == (4, 1, 1) and float(ln.args[2]) == 0.5


# --- clusters --------------------------------------------------------------------------------------------

def _mix(seed, i):
    h = (i * 0x9E3779B1 + seed) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_payload_ref_matches_python_integers():
    seed = 0xDEADBEEF
    idx = np.array([0, 1, 2047, 2048, 17_000_000], dtype=np.uint32)
    assert cl.payload_ref(seed, idx).tolist() == [_mix(seed, int(i)) for i in idx]


def test_reduce_ref_sums_each_group_mod_2_32():
    seed, blocks, group = 7, 6, 2
    p = [[_mix(seed, b * cl.TILE + i) for i in range(cl.TILE)] for b in range(blocks)]
    ref = cl.reduce_ref(seed, blocks, group)
    assert ref.shape == (3, cl.TILE) and ref.dtype == np.uint32
    for c in range(3):
        assert ref[c, 5] == (p[2 * c][5] + p[2 * c + 1][5]) % 2**32


def test_cluster_cost_model_and_checks():
    G, N = 8448, 4
    tiles = 4 * cl.TILE * G
    assert cl.global_bytes("v0", G, N) == 2 * tiles + tiles // N
    assert cl.global_bytes("v3", G, N) == tiles // N
    assert cl.dsmem_bytes(G, N) == tiles * 3 // 4
    with pytest.raises(ValueError, match="multiple of the group"):
        cl.check_group(10, 4)
    with pytest.raises(ValueError, match="divide the tile"):
        cl.check_group(12, 3)
    with pytest.raises(ValueError, match="unknown version"):
        cl.global_bytes("v9", G, N)


def cluster_buffers(blocks=16, group=4, **change):
    parts = dict(work=FakeDeviceArray((blocks, cl.TILE), np.uint32),
                 out=FakeDeviceArray((blocks // group, cl.TILE), np.uint32, ptr=0x20000),
                 arrivals=FakeDeviceArray((blocks // group,), np.uint32, ptr=0x30000))
    parts.update(change)
    return cl.Buffers(blocks, group, **parts)


def test_cluster_problem_checks_arguments():
    with pytest.raises(ValueError, match="dtype uint32"):
        cl.VERSIONS.problem(cluster_buffers(out=FakeDeviceArray((4, cl.TILE), np.int32)), 1)
    with pytest.raises(ValueError, match="one of"):
        cl.VERSIONS.problem(cluster_buffers(32, 16), 1)
    with pytest.raises(ValueError, match="multiple of 4"):
        cl.launch_cluster_whoami(6)


@pytest.mark.parametrize("label", list(cl.VERSIONS))
def test_cluster_plans(label):
    v = cl.VERSIONS[label]
    assert v.requires == ("clusters",)
    launches = v.launches(cl.VERSIONS.problem(cluster_buffers(), 7))
    assert [ln.grid for ln in launches] == [(16, 1, 1)] * len(launches)
    assert launches[-1].kernel.endswith("_c4") and launches[-1].cluster == (4 if "cluster" in label else 1)
    assert len(launches) == (2 if label == "v0_global_2launch" else 1)
    bad_work = cl.VERSIONS.problem(cluster_buffers(work=FakeDeviceArray((8, cl.TILE), np.uint32)), 1)
    if label == "v3_cluster_dsmem":          # v3 keeps its tiles in shared memory: no workspace
        assert v.launches(bad_work)
    else:
        with pytest.raises(ValueError, match="work"):
            v.launches(bad_work)
    if label == "v1_global_lastblock":
        with pytest.raises(ValueError, match="arrivals"):
            v.launches(cl.VERSIONS.problem(cluster_buffers(arrivals=FakeDeviceArray((3,), np.uint32)), 1))


def test_check_cluster_whoami():
    b = np.arange(8)
    t = np.stack([b, b % 4, b // 4, np.full(8, 4), np.full(8, 5)], axis=1)
    cl.check_cluster_whoami(t, sms=132)
    t[5, 1] = 0
    with pytest.raises(CheckFailed, match="block 5"):
        cl.check_cluster_whoami(t, sms=132)


# --- streams and launches -------------------------------------------------------------------------------

def test_chunk_work_ref_is_the_iteration():
    x = np.array([1.5, -2.0, 3.25])
    for iters in (0, 1, 5, 40):
        v = x.copy()
        for _ in range(iters):
            v = 0.5 * v + x
        assert np.allclose(ln.chunk_work_ref(x, iters), v, rtol=1e-15, atol=0)
    assert ln.chunk_work_flops(10, 3) == 60


def test_pipeline_model():
    assert ln.pipeline_model(8, 1.0, 1.0, 1) == pytest.approx(16.0)
    assert ln.pipeline_model(8, 1.0, 1.0, 2) == pytest.approx(9.0)
    assert ln.pipeline_model(8, 1.0, 1.0, 3) == pytest.approx(9.0)
    assert ln.pipeline_model(4, 1.0, 0.25, 3) == pytest.approx(4.25)     # copy-bound
    assert ln.pipeline_model(4, 0.25, 1.0, 3) == pytest.approx(4.25)     # compute-bound
    with pytest.raises(ValueError):
        ln.pipeline_model(0, 1.0, 1.0, 1)


def test_stream_and_launch_helpers_check_arguments():
    with pytest.raises(ValueError, match="dtype float32"):
        ln.launch_chunk_work(FakeDeviceArray((10,), np.float64), FakeDeviceArray((10,), np.float32), 3, blocks=1)
    with pytest.raises(ValueError, match="pinned"):
        ln.run_pipeline(np.zeros((2, 4), np.float64), FakeDeviceArray((2, 4), np.float32),
                        FakeDeviceArray((2, 4), np.float32), 1, [object()], blocks=1)
    with pytest.raises(ValueError, match="reps"):
        ln.capture_graph(lambda: None, 0, object())


def test_cluster_occupancy_probes_exist_for_every_size():
    from utils.show import snippets
    src = cl.SOURCE.path.read_text()
    assert "cluster_probe" in snippets(src)
    for n in cl.PROBE_SIZES:
        assert f"CLUSTER_PROBE({n})" in src and cl.occupancy_probe_kernel(n) == f"cluster_probe_c{n}"
    with pytest.raises(ValueError, match="1..16"):
        cl.occupancy_probe_kernel(17)
    assert set(cl.SOURCE.ptxas()) >= {f"cluster_probe_c{n}" for n in cl.PROBE_SIZES}


def fake_exchange_entries(sizes=(528, 8448)):
    out = []
    for g in sizes:
        for n in cl.CLUSTER_SIZES:
            for k, lab in enumerate(cl.VERSIONS):
                out.append({"op": "cluster_reduce", "impl": lab, "shape": [g, cl.TILE, n], "metric": 1.0 + k + n})
    return out


def test_exchange_times_table_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    t = cl.exchange_times(fake_exchange_entries() + [{"op": "other", "impl": "x", "shape": [1], "metric": 0}],
                          (528, 8448))
    assert t[528, 4]["v2_cluster_global"] == 1.0 + 2 + 4 and len(t) == 6
    table = cl.exchange_table(t)
    assert table.columns[-2:] == ["v0 / v3", "v2 / v3"] and len(table.rows) == 6
    assert table.rows[0][-2] == f"{(1 + 0 + 2) / (1 + 3 + 2):.2f}x"
    assert len(cl.plot_exchange(t).axes) == 2
    with pytest.raises(ValueError, match="missing"):
        cl.exchange_times(fake_exchange_entries()[:-1], (528, 8448))
    assert cl.model_us("v3", 8, 4, 1.0) == cl.global_bytes("v3", 8, 4) / 1e3


def test_pictures_and_readings_of_the_experiments():
    import matplotlib
    matplotlib.use("Agg")
    grid, block = (3, 2), (16, 6)
    table = pm.whoami_expected(grid, block)
    table[:, pm.SMID] = 0
    assert len(pm.plot_whoami(table, grid, block).axes) >= 3
    per_wave = 132
    blocks = np.array(pm.wave_points(per_wave))
    us = pm.wave_model_ms(blocks, per_wave, 20.4, 2.6)          # an exact staircase
    fit = pm.fit_staircase(blocks, us, per_wave)
    assert fit.slope == pytest.approx(20.4) and fit.fixed == pytest.approx(2.6) and fit.jump == pytest.approx(20.4)
    assert fit.worst == pytest.approx(0, abs=1e-9) and fit.holds(20.0) and not fit.holds(40.0)
    with pytest.raises(ValueError, match="133"):
        pm.fit_staircase(blocks[blocks != 133], us[blocks != 133], per_wave)
    assert pm.plot_staircases({"k = 1": (blocks, us, fit)}).axes
    a = np.arange(10) * 1000
    assert pm.plot_wave_stamps(a, a + 20000, 4, "stamps").axes
    marks = [(0.0, 0.3, 0.6), (0.3, 0.6, 0.9)]
    assert len(ln.plot_pipeline({1: marks, 3: marks}, {1: 0.9, 3: 0.9}).axes) == 2


def test_launch_cost_helpers():
    import matplotlib
    matplotlib.use("Agg")
    assert ln.spread([1.0, 2.0, 3.0]) == (2.0, pytest.approx(1.2), pytest.approx(2.8), 3)
    with pytest.raises(ValueError, match="at least one"):
        ln.spread([])
    launches = [{"impl": i, "metric": 1.0 + k} for k, i in enumerate(ln.LAUNCH_IMPLS)]
    pipe = [{"impl": "serial.1stream", "ms": 4.7}, {"impl": "overlap.3streams", "ms": 2.9}]
    assert len(ln.plot_costs(launches, pipe, {"model.serial": 4.6, "model.overlap.3streams": 2.8}).axes) == 2
