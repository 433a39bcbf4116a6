"""Chapter 7's experiments module on a CPU: the numerics demos, the readings of the ladders (on a real
utils.ladder.Ladder whose record is filled by hand), the tables, and the dispatcher's summary."""
import numpy as np
import pytest

from kernels import layernorm as L
from kernels.layernorm import experiments as ex
from utils.ladder import Ladder
from utils.record import Record

SEED = 7
COPY = 4000.0            # GB/s of the made-up copy ceiling


class RecordedLadder(Ladder):
    """A Ladder whose entries are added by hand (``put``) and whose copy ceiling is fixed: everything that
    reads the record (entry, fraction_of_copy, ratio, best, table, summary, plot) is the real code."""

    def copy_gbps(self, shape=None, dn=None):
        return COPY

    def put(self, impl, shape, dtype, frac, is_peer=False):
        nb = self.nbytes_fn(shape, dtype)
        self.rec.add(self.registry.op, impl, dtype=dtype, shape=shape, ms=nb / (frac * COPY * 1e9) * 1e3,
                     nbytes=nb, is_peer=is_peer)


def recorded_ladder(tmp_path, registry, shapes, dtypes, peers=(), nbytes=lambda shape, dt: 1 << 20):
    rec = Record("test", gpu="fake", root=tmp_path)
    return RecordedLadder(rec, registry, shapes=shapes, dtypes=dtypes, make=None, reference=None, nbytes=nbytes,
                          peers={p: None for p in peers})


SHAPES = [(8192, 1024), (8192, 4096), (128, 262144)]
DTYPES = ["float32", "bfloat16"]


@pytest.fixture
def ladders(tmp_path):
    ln = recorded_ladder(tmp_path / "ln", L.LAYERNORM, SHAPES, DTYPES,
                         ("torch.layer_norm", "torch.compile.layer_norm"))
    rms = recorded_ladder(tmp_path / "rms", L.RMSNORM, SHAPES, DTYPES, ("torch.rms_norm", "torch.compile.rms_norm"))
    return ln, rms


# --- reading the ladders ---------------------------------------------------------------------------

def test_by_width_names_every_case_of_the_widths_given(ladders):
    ln, _ = ladders
    pred = ex.by_width(ln, {1024: 0.5, 262144: 0.1})
    assert pred == {((8192, 1024), "float32"): 0.5, ((8192, 1024), "bfloat16"): 0.5,
                    ((128, 262144), "float32"): 0.1, ((128, 262144), "bfloat16"): 0.1}


def test_fracs_and_ratios_keep_only_what_was_timed(ladders):
    ln, _ = ladders
    ln.put("v0_naive", SHAPES[0], "float32", 0.4)
    ln.put("v1_twopass", SHAPES[0], "float32", 0.6)
    ln.put("v1_twopass", SHAPES[1], "bfloat16", 0.5)
    assert ex.fracs(ln, "v1_twopass") == pytest.approx({(SHAPES[0], "float32"): 0.6, (SHAPES[1], "bfloat16"): 0.5})
    assert ex.fracs(ln, "v1_twopass", shapes=[SHAPES[1]]) == pytest.approx({(SHAPES[1], "bfloat16"): 0.5})
    assert ex.fracs(ln, "v1_twopass", dtypes=["float32"]) == pytest.approx({(SHAPES[0], "float32"): 0.6})
    assert ex.ratios(ln, "v1_twopass", "v0_naive") == pytest.approx({(SHAPES[0], "float32"): 1.5})


def test_pooled_lists_layernorm_then_rmsnorm(ladders):
    ln, rms = ladders
    ln.put("v0_naive", SHAPES[0], "float32", 0.4)
    rms.put("v0_naive", SHAPES[0], "float32", 0.7)
    rms.put("v0_naive", SHAPES[1], "float32", 0.8)
    assert ex.pooled(ln, rms, ("v0_naive", "v0_naive")) == pytest.approx([0.4, 0.7, 0.8])
    assert ex.pooled(ln, rms, ("v0_naive", "v0_naive"), SHAPES[1:]) == pytest.approx([0.8])


def test_metric_and_dtype_ratios(ladders):
    ln, rms = ladders
    for d, f in (("float32", 0.8), ("bfloat16", 0.4)):
        ln.put("v5_raw", SHAPES[2], d, f / 2)
        rms.put("v4_raw", SHAPES[2], d, f)
    ln.put("v5_raw", SHAPES[0], "float32", 0.5)          # no bf16 twin: left out of the dtype ratio
    assert ex.metric_ratios(ln, "v5_raw", rms, "v4_raw") == pytest.approx(
        {(SHAPES[2], "float32"): 0.5, (SHAPES[2], "bfloat16"): 0.5})
    assert ex.dtype_ratio(ln, "v5_raw") == pytest.approx({SHAPES[2]: 0.5})


def test_span_formats_the_range_and_refuses_nothing():
    assert ex.span([0.5, 0.25, 0.75]) == "25%–75%"
    assert ex.span((x for x in (1.234, 2.5)), "{:.2f}") == "1.23–2.50"
    with pytest.raises(ValueError, match="no figures"):
        ex.span([])


# --- the numerics demos ----------------------------------------------------------------------------

def test_variance_demo_shows_the_cancellation():
    demo = ex.variance_demo([0.0, 1e4], 2048, np.random.default_rng(SEED))
    naive, two, wel = (demo.errors[k] for k in ex.VARIANCE_ALGOS)
    assert naive[-1] > 0.5 and max(two[-1], wel[-1]) < 1e-3 and naive[0] < 1e-4
    assert len(demo.table.rows) == 2 and demo.table.rows[1][0] == "10000"
    again = ex.variance_demo([0.0, 1e4], 2048, np.random.default_rng(SEED))
    assert again.errors == demo.errors                        # the rng's draws, in order


def test_welford_tree_demo_merges_without_cancellation():
    tree = ex.welford_tree_demo(np.random.default_rng(SEED), 2048, parts=(1, 32, 2048))
    assert len(tree.errors) == 3 and max(tree.errors) < 1e-3
    assert [r[0] for r in tree.table.rows] == ["1", "32", "2048", "float64 reference"]


def test_shifted_demo_fails_only_for_a_zero_shift():
    shift = ex.shifted_demo([1e4], 2048, np.random.default_rng(SEED))
    err = shift.errors[1e4]
    assert set(err) == set(ex.SHIFT_CASES)
    assert err["two-pass"] < 1e-3 and err["shifted"] < 1e-3 and err["outlier"] < 1e-2 and err["zero"] > 0.5


def test_plot_variance_errors_draws_every_algorithm_and_the_bound():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    demo = ex.variance_demo([0.0, 1e2], 256, np.random.default_rng(SEED))
    ax = ex.plot_variance_errors(demo)
    assert len(ax.get_lines()) == len(ex.VARIANCE_ALGOS) + 1
    import matplotlib.pyplot as plt
    plt.close("all")


# --- tables ------------------------------------------------------------------------------------------

def test_floor_table_is_the_bytes_at_the_copy_rate():
    t = ex.floor_table([(8192, 1024)], ["bfloat16"], 2000.0, bar=0.5, goal=1.0)
    nb = L.nbytes(8192, 1024, 2, "layernorm")
    floor = nb / 2000e9 * 1e6
    assert t.rows[0] == ["8192x1024", "bfloat16", f"{nb / 2**20:.0f}", f"{floor:.0f}", f"{2 * floor:.0f}",
                         f"{floor:.0f}"]
    assert t.columns[-2:] == ["bar 50% (µs)", "goal 100% (µs)"]


def test_peer_table_leaves_untimed_cells_blank(ladders):
    ln, rms = ladders
    ln.put("torch.layer_norm", SHAPES[0], "float32", 0.5, is_peer=True)
    rms.put("torch.compile.rms_norm", SHAPES[0], "float32", 0.9, is_peer=True)
    t = ex.peer_table(ln, rms)
    assert t.columns == ["shape", "dtype", "torch.layer_norm", "torch.compile.layer_norm", "torch.rms_norm",
                         "torch.compile.rms_norm"]
    assert t.rows[0] == ["8192x1024", "float32", "50%", "", "", "90%"]
    assert len(t.rows) == len(SHAPES) * len(DTYPES)


def test_layout_table_lists_every_layout():
    t = ex.layout_table()
    assert len(t.rows) == len(L.LAYOUTS) and t.rows[-1][-1] == str(L.MAX_N)


# --- the streams and the dispatcher ------------------------------------------------------------------

def test_stream_vs_picked_compares_with_the_dispatchers_version(ladders):
    ln, rms = ladders
    s, d = SHAPES[0], "float32"
    ln.put("v7_stream", s, d, 0.3)
    ln.put(L.pick("layernorm", s[1], d), s, d, 0.6)
    ln.put("v4_ilp", s, d, 0.15)                         # not the dispatcher's choice: not compared
    rms.put("v5_stream", s, d, 0.4)
    rms.put(L.pick("rmsnorm", s[1], d), s, d, 0.8)
    assert ex.stream_vs_picked(ln, rms, ("v7_stream", "v5_stream")) == pytest.approx([0.5, 0.5])


def test_dispatch_summary_reads_the_dispatchers_version_and_skips_the_untimed(ladders):
    ln, rms = ladders
    for op, lad, peers in (("layernorm", ln, ("torch.layer_norm", "torch.compile.layer_norm")),
                           ("rmsnorm", rms, ("torch.rms_norm", "torch.compile.rms_norm"))):
        for s in SHAPES[:2]:
            lad.put(L.pick(op, s[1], "float32"), s, "float32", 0.8)
            lad.put(peers[0], s, "float32", 0.4, is_peer=True)
            lad.put(peers[1], s, "float32", 1.0, is_peer=True)
    summ = ex.dispatch_summary({"layernorm": ln, "rmsnorm": rms})
    assert [len(v) for v in summ.cases.values()] == [2, 2]
    c = summ.cases["rmsnorm"][0]
    assert (c["shape"], c["dtype"]) == (SHAPES[0], "float32")
    assert c["frac"] == pytest.approx(0.8) and c["eager"] == pytest.approx(2.0) and c["comp"] == pytest.approx(0.8)
    assert len(summ.table.rows) == 4 and summ.table.rows[0][3] == L.pick("layernorm", 1024, "float32")


def test_long_row_resources_of_the_dispatchers_versions(ladders, monkeypatch):
    ln, rms = ladders
    asked = []

    def fake_resources(op, label, rows, n, dtype, facts=None):
        asked.append((op, label, rows, n, dtype))
        if dtype == "bfloat16" and op == "rmsnorm":
            return None                                  # a version that does not take the shape here
        return {"layout": L.LAYOUTS[-1], "registers": 96, "blocks_per_sm": 1}
    monkeypatch.setattr(ex, "resources", fake_resources)
    ln.put(L.pick("layernorm", 262144, "float32"), SHAPES[2], "float32", 0.55)
    diag = ex.long_row_resources({"layernorm": ln, "rmsnorm": rms}, SHAPES[2], DTYPES)
    assert asked[0] == ("layernorm", L.pick("layernorm", 262144, "float32"), 128, 262144, "float32")
    assert set(diag.resources) == {("layernorm", "float32"), ("layernorm", "bfloat16"), ("rmsnorm", "float32")}
    assert diag.table.rows[0][-1] == "55%" and diag.table.rows[1][-1] == "—"


def test_same_bytes_copy_times_the_bytes_of_x(ladders, monkeypatch):
    ln, rms = ladders
    import utils.hardware
    seen = []
    monkeypatch.setattr(utils.hardware, "measure_copy_same_bytes",
                        lambda rec, nb: seen.append(nb) or {"ms": 0.01, "metric": 3000.0})
    for op, lad in (("layernorm", ln), ("rmsnorm", rms)):
        lad.put(L.pick(op, 1024, "bfloat16"), SHAPES[0], "bfloat16", 0.6)
    small = ex.same_bytes_copy(None, {"layernorm": ln, "rmsnorm": rms}, SHAPES[0], "bfloat16")
    assert seen == [8192 * 1024 * 2]
    assert small.copy["metric"] == 3000.0 and set(small.dispatched) == {"layernorm", "rmsnorm"}
    assert small.dispatched["rmsnorm"]["impl"] == L.pick("rmsnorm", 1024, "bfloat16")
