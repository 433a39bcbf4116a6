"""Chapter 3 host side on a CPU: index formulas, the wave model, references, cost models, launch checks."""
import numpy as np
import pytest

from kernels import cluster as cl
from kernels import launch as ln
from kernels import progmodel as pm
from tests.fakes import FakeDeviceArray
from utils.check import CheckFailed
from utils.record import Record

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
    assert fit.blocks == tuple(blocks) and fit.us == pytest.approx(tuple(us))
    assert pm.plot_staircases({1: fit}).axes
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


# --- the chapter's experiments, read and described on the host ------------------------------------------

FAKE_DEV = {"sms": 132, "max_threads_per_sm": 2048, "regs_per_sm": 65536, "smem_per_sm": 233472,
            "smem_per_block_optin": 232448, "l2_bytes": 60 << 20, "memory_bytes": 140 << 30}


def test_device_facts_and_whoami_readings():
    t = pm.device_facts(FAKE_DEV)
    assert t.column("value") == ["132", "2,048", "64", "65,536", "233,472", "232,448", "60"]
    grid, block = (3, 2, 2), (5, 3, 4)
    table = pm.whoami_expected(grid, block)
    table[:, pm.SMID] = np.repeat(np.arange(12) + 100, 60)
    text = pm.describe_whoami(table, grid, block)
    assert text.splitlines() == [
        "720 threads = 12 blocks x 60: every field but smid matches the formulas; %laneid == tid % 32 on all of them",
        "a block holds 2 warps of [32, 28] threads: 4 of its 64 lanes idle",
        "the 12 blocks landed on 12 different SMs"]
    rows = pm.whoami_rows(table)
    assert rows.columns == list(pm.WHOAMI_FIELDS) and len(rows.rows) == len(pm.WHOAMI_PICK)
    assert rows.rows[5][pm.WHOAMI_FIELDS.index("global_id")] == "32" and rows.rows[-1][8] == "719"


def test_wave_configs_tables_and_labels(monkeypatch):
    monkeypatch.setattr(pm, "wave_kernel", lambda smem: smem)
    monkeypatch.setattr(pm, "resident_blocks", lambda fn, threads, smem: 233472 // (smem + 1024))
    occ = pm.wave_configs((1, 2, 4), smem_per_sm=233472, sms=132)
    assert [(o.k, o.resident, o.per_wave) for o in occ.values()] == [(1, 1, 132), (2, 2, 264), (4, 4, 528)]
    assert occ[2].smem == pm.wave_smem_bytes(2)
    t = pm.wave_config_table(occ)
    assert t.column("blocks per wave W") == ["132", "264", "528"] and t.rows[0][1] == f"{pm.wave_smem_bytes(1):,}"
    assert pm.wave_label(4, 20_000) == "wait20us.4_per_sm"


class ClockRecord(Record):
    """A Record whose ``time`` runs ``fn`` once and records a time from ``ms_of(op, impl, shape)``: the
    chapter's bookkeeping without a GPU."""

    def __init__(self, tmp_path, ms_of):
        super().__init__("03-test", gpu="test", root=tmp_path)
        self.ms_of = ms_of

    def time(self, op, impl, fn, *, dtype, shape, nbytes=None, flops=None, is_peer=False, check=None,
             metric_name=None, extra=None, **bench_kw):
        fn()
        if check is not None:
            check()
        return self.add(op, impl, dtype=dtype, shape=shape, ms=self.ms_of(op, impl, tuple(shape)), nbytes=nbytes,
                        flops=flops, is_peer=is_peer, metric_name=metric_name, **(extra or {}))


def test_wave_sweep_records_every_grid_size_and_the_fit_reads_them(tmp_path, monkeypatch):
    import sys
    import types
    fake_tqdm = types.ModuleType("tqdm.auto")
    fake_tqdm.tqdm = lambda it, **kw: it
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake_tqdm)
    monkeypatch.setitem(sys.modules, "cupy", np)               # cupy.empty(n, dtype=cupy.int32) works on NumPy
    launched = []
    monkeypatch.setattr(pm, "launch_wave_spin", lambda b, ns, smem, *arrays: launched.append((b, ns, smem)))
    occ = {k: pm.WaveConfig(k, 1000 * k, k, 4 * k) for k in (1, 2)}          # a GPU of 4 SMs
    rec = ClockRecord(tmp_path, lambda op, impl, shape: (2.5 + 20.4 * -(-shape[0] // (4 * int(impl[9])))) / 1e3)
    sweep = pm.wave_sweep(rec, occ, 20_000)
    assert sweep == {k: pm.wave_points(4 * k) for k in (1, 2)}
    assert launched == [(b, 20_000, occ[k].smem) for k in (1, 2) for b in sweep[k]]
    assert len(rec.entries) == len(launched)
    e = rec.get("waves", "wait20us.2_per_sm", shape=(9,))
    assert e["metric_name"] == "us" and e["dtype"] == "none" and e["metric"] == pytest.approx(2.5 + 20.4 * 2)
    fits = pm.fit_wave_sweep(rec, occ, sweep, 20_000)
    assert fits[2].per_wave == 8 and fits[2].slope == pytest.approx(20.4) and fits[2].fixed == pytest.approx(2.5)
    report = pm.staircase_report(fits, 20.0).splitlines()
    assert report[1] == ("k=2: each wave adds 20.4 us (1.02x the 20 us a block stays), fixed part 2.5 us; going "
                         "from W=8 to W+1 blocks adds 20.4 us; model off by at most 0.0 us")
    shown = pm.summary_entries(rec.entries + [dict(e, op="launch"), dict(e, op="cluster_reduce")])
    assert [(x["op"], x["shape"][0]) for x in shown] == [("launch", 9), ("waves", 1), ("waves", 14),
                                                        ("waves", 1), ("waves", 28)]


def test_wave_stamps_are_checked_and_split_into_waves():
    per_wave, sms, ns = 8, 4, 20_000                      # 2 blocks per SM, 20 blocks: waves of 8, 8, 4
    b = np.arange(20)
    start = (b // per_wave) * 20_500 + b                  # a few ns apart inside a wave
    smid = (b % per_wave) // 2
    st = pm.read_wave_stamps(smid, start, start + ns + 10, ns=ns, sms=sms)
    assert st.sizes == [8, 8, 4] and st.in_order and st.per_sm.tolist() == [2, 2, 2, 2]
    assert st.first_wave_sms == 4 and st.wave_of.tolist() == (b // per_wave).tolist()
    assert st.describe().splitlines()[0] == "20 blocks started in 3 waves of [8, 8, 4] blocks"
    assert "wave 1 used 4 of 4 SMs, 2 to 2 blocks on each" in st.describe()
    with pytest.raises(CheckFailed, match="stayed less"):
        pm.read_wave_stamps(smid, start, start + ns - 1, ns=ns, sms=sms)
    with pytest.raises(CheckFailed, match="no SM"):
        pm.read_wave_stamps(np.full(20, -1), start, start + ns, ns=ns, sms=sms)
    shuffled = start.copy()
    shuffled[[3, 12]] = shuffled[[12, 3]]
    assert not pm.read_wave_stamps(smid, shuffled, shuffled + ns, ns=ns, sms=sms).in_order


def test_filter_readings():
    r = pm.FilterRun(2.0, 0.023, {"v0_atomic": 0.9, "v1_coalesced": 0.9, "v2_block": 0.25}, 1100.0)
    assert r.v0_over_v1 == 1.0 and r.v1_over_v2 == pytest.approx(3.6)
    assert r.describe(4400.0) == ("x > 2 keeps 2.3%: v0_atomic 0.900 ms, v1_coalesced 0.900 ms, v2_block 0.250 ms; "
                                  "v0/v1 = 1.00, v1/v2 = 3.6x, v2 at 0.25 of the copy bandwidth")
    assert pm.filter_op(0.0) == "filter_gt0" and pm.filter_op(2.0) == "filter_gt2"


SASS = """
        /*0080*/                   VOTEU.ANY UR4, UPT, PT ;
        /*0090*/                   FLO.U32 R7, UR4 ;
        /*00a0*/              @!P0 BRA `(.L_x_1) ;
        /*00b0*/                   POPC R9, UR4 ;
        /*00c0*/               @P1 ATOMG.E.ADD.STRONG.GPU PT, R11, desc[UR6][R2.64], R9 ;
        /*00d0*/                   SHFL.IDX PT, R13, R11, R7, 0x1f ;
        /*00e0*/                   STG.E desc[UR6][R4.64], R0 ;
"""


def test_warp_ops_read_a_sass_listing():
    ops = pm.warp_ops(SASS)
    assert ops == ["VOTEU.ANY", "FLO.U32", "POPC", "ATOMG.E.ADD.STRONG.GPU", "SHFL.IDX"]
    assert pm.aggregated_per_warp(ops)
    assert not pm.aggregated_per_warp(["ATOMG.E.ADD.STRONG.GPU"])
