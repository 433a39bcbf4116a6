"""Chapter 6's experiment helpers (kernels.softmax.experiments) on a CPU: the Inductor note filter, the
ledger's arithmetic and table, the tables and figures read from a ladder's record, which runners-up are
timed where, the bytes-resident points and their plot, and how the ladder is built."""
import warnings

import numpy as np
import pytest

from kernels import softmax as S
from kernels.softmax import experiments as E

SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]
DTYPES = ["float32", "bfloat16"]
PEERS = ("torch.softmax", "torch.compile.softmax")
# Inductor's warning as torch/_inductor/lowering.py words it: it opens with a newline.
INDUCTOR_TEXT = ("\nOnline softmax is disabled on the fly since Inductor decides to\nsplit the reduction. Cut an "
                 "issue to PyTorch if this is an\nimportant use case and you want to speed it up with online\n"
                 "softmax.\n")

pytest.importorskip("ml_dtypes")


class FakeLadder:
    """Enough of utils.ladder.Ladder for the helpers that read a record: metrics keyed by (impl, shape,
    dtype), a copy ceiling, peers, and time() that remembers what it was asked to time."""

    def __init__(self, metrics=None, copy_gbps=4000.0, shapes=SHAPES, dtypes=DTYPES):
        self.metrics = dict(metrics or {})
        self.copy = copy_gbps
        self.shapes, self.dtypes = list(shapes), list(dtypes)
        self.peers = dict.fromkeys(PEERS)
        self.timed = []

    def fraction_of_copy(self, impl, shape, dtype):
        return self.metrics[impl, tuple(shape), dtype] / self.copy

    def ratio(self, impl, over, shape, dtype):
        return self.metrics[impl, tuple(shape), dtype] / self.metrics[over, tuple(shape), dtype]

    def time(self, label, shapes=None, config=None, impl=None):
        self.timed.append((label, tuple(self.dtypes), tuple(shapes), config, impl))
        return [{"impl": impl}]


def test_the_inductor_note_is_ignored_with_its_leading_newline():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        E.ignore_inductor_note()
        warnings.warn(INDUCTOR_TEXT, UserWarning)
        warnings.warn("Online softmax is disabled", UserWarning)
        warnings.warn("another note from Inductor", UserWarning)
        warnings.warn(INDUCTOR_TEXT, RuntimeWarning)          # only UserWarnings are ignored
    assert [(str(w.message), w.category) for w in caught] == [("another note from Inductor", UserWarning),
                                                              (INDUCTOR_TEXT, RuntimeWarning)]


def test_the_notebook_level_filter_it_replaces_would_not_have_matched():
    # the old filter matched at the start of the message, where the newline is: the note got through
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="Online softmax is disabled", category=UserWarning)
        warnings.warn(INDUCTOR_TEXT, UserWarning)
    assert len(caught) == 1


def test_ledger_floor_ceiling_and_table():
    same = {(s, dn): 0.5 + 0.1 * k for k, (s, dn) in enumerate((s, dn) for s in SHAPES for dn in DTYPES)}
    led = E.Ledger(copy=4000.0, fixed_us=5.0, same=same)
    nb = S.nbytes(8192, 1024, itemsize=2)
    assert led.floor_us[SHAPES[0], "bfloat16"] == pytest.approx(nb / 4000.0 / 1e3)
    f = led.floor_us[SHAPES[0], "bfloat16"]
    assert led.ceil[SHAPES[0], "bfloat16"] == pytest.approx(f / (f + 5.0))
    assert led.ceil[SHAPES[4], "float32"] > led.ceil[SHAPES[0], "float32"]    # more bytes: the fixed cost matters less
    t = led.table()
    assert t.columns == ["shape", "dtype", "MiB moved", "floor (us)", "75% bar (us)", "floor / (floor + fixed)",
                         "same-bytes copy"]
    row = t.rows[1]
    assert row[:3] == ["8192x1024", "bfloat16", "32"]     # x read, y written: 2 x 16 MiB
    assert row[4] == f"{f / 0.75:.1f}" and row[6] == f"{same[SHAPES[0], 'bfloat16']:.0%}"


def test_fractions_table_reads_every_shape_and_dtype():
    m = {(p, s, dn): 1000.0 * (k + 1) for k, p in enumerate(PEERS) for s in SHAPES for dn in DTYPES}
    t = E.fractions_table(FakeLadder(m), list(PEERS), caption="peers")
    assert t.columns == ["shape", "dtype", *PEERS] and len(t.rows) == len(SHAPES) * len(DTYPES)
    assert t.rows[0] == ["8192x1024", "float32", "25%", "50%"] and t.caption == "peers"


def test_dispatch_results_read_the_dispatcher_beside_its_choice_and_the_peers():
    keys = [(s, dn) for s in SHAPES for dn in DTYPES]
    m = {}
    for s, dn in keys:
        m["dispatch", s, dn] = 3000.0
        m[S.dispatch(*s, dn), s, dn] = 3200.0
        m["torch.softmax", s, dn] = 2000.0
        m["torch.compile.softmax", s, dn] = 3000.0
    same = {k: 0.9 for k in keys}
    r = E.dispatch_results(FakeLadder(m), same)
    assert r.of_copy[SHAPES[0], "float32"] == pytest.approx(0.75)
    assert r.bound[SHAPES[0], "float32"] == pytest.approx(0.8)
    assert r.vs["torch.softmax", SHAPES[2], "bfloat16"] == pytest.approx(1.5)
    assert r.table.columns == ["shape", "dtype", "chosen", "of copy", "chosen, bound launch", "same-bytes copy",
                               "vs torch.softmax", "vs torch.compile"]
    assert r.table.rows[0] == ["8192x1024", "float32", S.dispatch(8192, 1024, "float32"), "75%", "80%", "90%",
                               "1.50x", "1.00x"]


def test_time_extras_times_each_runner_up_in_its_own_dtype_on_the_width_it_holds():
    lad = FakeLadder()
    entries = E.time_extras(lad)
    want = [(label, dn, cfg) for dn in DTYPES for label in ("v5_block_raw", "v6_cluster_raw")
            for cfg in S.EXTRAS[label][dn]]
    assert [(t[0], t[1], t[3]) for t in lad.timed] == [(label, (dn,), cfg) for label, dn, cfg in want]
    for label, dtypes, shapes, cfg, impl in lad.timed:
        (shape,) = shapes
        assert shape[1] <= S.capacity(label, cfg, dtypes[0]) < 2 * shape[1]
        assert impl == f"{label}{list(cfg)}"
    assert lad.dtypes == DTYPES                                  # the ladder itself keeps both dtypes
    assert len(entries) == len(want)


def test_residency_points_and_table_from_the_compile_report():
    cfg = S.V6(16, 128, 8)
    entries = [
        {"impl": "v6_cluster_raw[16, 128, 8]", "is_peer": False, "shape": [1024, 65536], "dtype": "float32",
         "config": dict(cfg._asdict()), "metric": 3000.0},
        {"impl": "torch.softmax", "is_peer": True, "shape": [1024, 65536], "dtype": "float32", "config": None,
         "metric": 2000.0},
        {"impl": "dispatch", "is_peer": False, "shape": [1024, 65536], "dtype": "float32", "config": None,
         "metric": 3000.0},
        {"impl": "v9_stream", "is_peer": False, "shape": [128, 262144], "dtype": "float32", "config": [8, 512, 16],
         "metric": 1000.0},
    ]
    pts = E.residency_points(entries, 4000.0)
    assert pts == [(160.0, 0.75, True)]          # v6 [16, 128, 8]: 5 blocks of 32 KiB per SM (test_softmax_host)
    t = E.residency_table([("v6_cluster_raw", [(1024, 65536)])], ["float32"])
    assert t.rows[0][:3] == ["v6_cluster_raw", "float32", "1024x65536"]
    p = S.shape_problem(1024, 65536, "float32")
    r = S.resident("v6_cluster_raw", p)
    assert t.rows[0][3:] == [str(S.VERSIONS["v6_cluster_raw"].default(p)), str(r.registers), str(r.blocks),
                             f"{r.bytes_per_sm / 1024:.0f}"]


def test_plot_residency_draws_two_series_and_the_bar():
    import matplotlib
    matplotlib.use("Agg")
    pts = [(32.0, 0.6, True), (160.0, 0.8, True), (96.0, 0.9, False)]
    fig = E.plot_residency(pts)
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.collections] == ["warp / block per row", "cluster per row"]
    assert [len(c.get_offsets()) for c in ax.collections] == [1, 2]
    assert np.allclose(ax.collections[1].get_offsets()[:, 1], [60, 80])
    assert any(np.allclose(ln.get_ydata(), 75) for ln in ax.get_lines())


def test_ladder_checks_odd_shapes_and_times_beside_the_peers(monkeypatch):
    monkeypatch.setattr(E, "peers", lambda: dict.fromkeys(PEERS))
    lad = E.ladder(None, SHAPES, DTYPES, seed=6)
    assert lad.shapes == SHAPES and lad.dtypes == DTYPES and lad.seed == 6 and lad.ceiling == "copy"
    assert lad.odd_shapes == E.ODD_SHAPES and list(lad.peers) == list(PEERS) and lad.bench == E.BENCH
    assert lad.nbytes_fn((8192, 1024), np.dtype("bfloat16")) == S.nbytes(8192, 1024, itemsize=2)
    x = np.array([[0.0, np.log(3.0)]], np.float32)
    assert np.allclose(lad.reference(type("Case", (), {"args": (x, None)})()), [[0.25, 0.75]])
