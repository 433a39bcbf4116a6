"""Chapter 5's experiment helpers on a CPU: the ledger and bound texts, the figures read from a ladder's
record (grid sweep, size sweep and its fit), the determinism table, the plot, and how the ladder is built."""
import numpy as np
import pytest

from kernels import reduction as R
from utils.hardware import datasheet

ml_dtypes = pytest.importorskip("ml_dtypes")


class FakeLadder:
    """Just enough of utils.ladder.Ladder for the helpers that read the record: entries keyed by (impl,
    shape, dtype), a copy ceiling, and time() that records an entry from ``ms_of(label, config)``."""

    def __init__(self, entries=None, copy_gbps=4000.0, ms_of=None):
        self.entries = dict(entries or {})
        self.copy = copy_gbps
        self.ms_of = ms_of
        self.timed = []

    def entry(self, impl, shape, dtype):
        return self.entries.get((impl, tuple(shape), dtype))

    def fraction_of_copy(self, impl, shape, dtype):
        return self.entry(impl, shape, dtype)["metric"] / self.copy

    def ratio(self, impl, over, shape, dtype):
        return self.entry(impl, shape, dtype)["metric"] / self.entry(over, shape, dtype)["metric"]

    def time(self, label, config=None, impl=None, shapes=None):
        self.timed.append((label, config, impl))
        n = 1 << 28
        ms = self.ms_of(label, config)
        self.entries[(impl or label, (n,), "float32")] = {"ms": ms, "bytes": 4 * n, "metric": 4 * n / ms / 1e6}


def test_ledger_states_bytes_intensity_and_floors():
    spec = datasheet("H200")
    text = R.ledger(1 << 28, 4000.0, spec)
    size, copy, floor = text.splitlines()
    assert "1 GiB" in size and f"{(1 << 28) - 1:,} additions" in size and "0.25 FLOP per byte" in size
    assert "4000 GB/s" in copy and f"{4000 / (spec['hbm_tbps'] * 1e3):.0%}" in copy
    assert f"{(1 << 30) / 4e12 * 1e6:.0f} us at the copy rate" in floor


def test_bound_report_gives_each_versions_depth_and_bound():
    x = np.full(1 << 12, 2.0, np.float32)
    text = R.bound_report(x, ["v1_interleaved", "v5_lastblock"], sms=132)
    lines = text.splitlines()
    assert "8192.000000" in lines[0] and "condition number sum|x| / |sum x| = 1.000" in lines[0]
    d1 = R.depth("v1_interleaved", x.size, sms=132)
    assert lines[1].startswith(f"v1_interleaved: depth {d1},")
    assert f"{R.gamma(d1):.2e} relative" in lines[1]
    assert lines[2].startswith(f"v5_lastblock: depth {R.depth('v5_lastblock', x.size, sms=132)},")


def test_atomic_rate_reads_the_timing_as_atomics_per_clock():
    a = R.AtomicRate(n=1 << 24, ms=20.0, clock_hz=2e9, error=1e-6, bound=3e-5)
    assert a.rate == pytest.approx((1 << 24) / 0.02)
    assert a.per_clock == pytest.approx(a.rate / 2e9)
    assert a.seconds_for(1 << 28) == pytest.approx(16 * 0.02)
    first, second = str(a).splitlines()
    assert "per SM clock" in first and "2**28 elements would take 320 ms" in first
    assert "n = 2**24: 1.0e-06" in second and "bound: 3.0e-05" in second


def test_repeats_count_distinct_bit_patterns():
    one = np.float32(1.0)
    next_up = np.nextafter(one, np.float32(2))
    r = R.Repeats(1 << 24, 1.0, 1.0, (one, next_up, one))
    assert r.distinct == 2
    assert r.spread_ulps == pytest.approx(float(next_up - one) / float(np.spacing(one)))
    assert r.spread == pytest.approx(float(next_up - one))
    assert R.Repeats(4, 1.0, 1.0, (one,) * 5).distinct == 1
    z = R.Repeats(4, 0.5, 0.5, (np.float32(0.0), np.float32(-0.0)))
    assert z.distinct == 2                       # bit for bit: +0 and -0 differ


def test_determinism_table_rows():
    reps = {"v0_atomic": R.Repeats(1 << 24, 3.0, 3.0, (np.float32(3), np.float32(3.0000002))),
            "cupy.sum": R.Repeats(1000, 1.0, 1.0, (np.float32(1), np.float32(1)))}
    t = R.determinism_table(reps)
    assert t.columns[2] == "distinct results in 2 runs"
    assert t.column("impl") == ["v0_atomic", "cupy.sum"]
    assert t.column("elements") == ["2**24", "1000"]
    assert t.column("distinct results in 2 runs") == ["2", "1"]
    assert t.column("first result (hex)")[1] == "0x3f800000"


def test_fit_floor_recovers_a_model():
    nb = [1 << k for k in range(10, 31, 2)]
    t0, gbps = 6.0, 3500.0
    us = [t0 + b / (gbps * 1e3) for b in nb]
    us[0] -= 0.2                                    # noise on the floor: the median of three takes it
    f = R.fit_floor(nb, us)
    assert f.t0 == pytest.approx(us[1])
    assert f.gbps == pytest.approx(nb[-1] / (us[-1] - f.t0) * 1e-3)
    assert f.gbps == pytest.approx(gbps, rel=1e-4)
    assert f.n_half == pytest.approx(f.t0 * 1e-6 * f.gbps * 1e9)
    assert f.us_at(1 << 16) == us[3]
    assert f.model_us([nb[-1]])[0] == pytest.approx(us[-1])
    with pytest.raises(ValueError, match="four ascending"):
        R.fit_floor(nb[:3], us[:3])
    with pytest.raises(ValueError, match="no slope"):
        R.fit_floor(nb[:4], [5.0] * 4)


def test_floor_fit_reads_the_ladders_entries():
    sizes = [1 << k for k in range(8, 27, 2)]
    lad = FakeLadder({("v5_lastblock", (n,), "float32"): {"ms": (5 + 4 * n / 3e6) * 1e-3, "bytes": 4 * n,
                                                            "metric": 0.0} for n in sizes})
    f = R.floor_fit(lad, "v5_lastblock", sizes)
    assert f.nbytes == tuple(4 * n for n in sizes)
    assert f.t0 == pytest.approx(5 + 4 * sizes[1] / 3e6)
    assert f.gbps == pytest.approx(3000, rel=1e-3)


def test_time_grids_times_each_config_under_its_own_name():
    ms = {b: 0.3 if b == 2 else 0.25 for b in (2, 4, 8, 16, 32)}
    lad = FakeLadder(ms_of=lambda label, cfg: ms[cfg.blocks_per_sm])
    g = R.time_grids(lad, (1 << 28,))
    assert [t[2] for t in lad.timed] == [f"v4_vec[{b}/SM]" for b in (2, 4, 8, 16, 32)]
    assert all(t[0] == "v4_vec" for t in lad.timed)
    assert set(g.frac) == {2, 4, 8, 16, 32}
    assert g.frac[2] == pytest.approx((1 << 30) / 0.3 / 1e6 / 4000)
    assert g.table.column("grid") == [str(R.vec_grid(1 << 28, np.float32, 132, b)) for b in (2, 4, 8, 16, 32)]
    assert g.table.column("µs")[0] == "300.0"


def test_plot_size_sweep_draws_every_fit_and_its_model():
    import matplotlib
    matplotlib.use("Agg")
    nb = [1 << k for k in range(10, 31, 2)]
    fits = {impl: R.fit_floor(nb, [t0 + b / 3.5e6 for b in nb]) for impl, t0 in (("v5_lastblock", 8.0),
                                                                                  ("cupy.sum", 5.0))}
    fig = R.plot_size_sweep(fits, l2_bytes=60 << 20)
    ax = fig.axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "v5_lastblock" in labels and "cupy.sum (peer)" in labels and "t0 + bytes / B" in labels
    peer = next(ln for ln in ax.get_lines() if ln.get_label() == "cupy.sum (peer)")
    assert peer.get_linestyle() == "--"            # peers dashed and grey (utils.plot)
    assert len(ax.get_xticks()) == len(nb)


def test_ladder_checks_odd_sizes_and_picks_peers(monkeypatch):
    monkeypatch.setattr(R, "peers", lambda: {"cupy.sum": "c", "torch.sum": "t"})
    lad = R.ladder(None, [(1 << 28,)], "bfloat16", seed=6)
    assert lad.dtypes == ["bfloat16"] and lad.shapes == [(1 << 28,)] and lad.seed == 6
    assert lad.odd_shapes == [tuple(s) for s in R.ODD_SIZES] and lad.ceiling == "copy"
    assert list(lad.peers) == ["cupy.sum", "torch.sum"]
    assert lad.nbytes_fn((1000,), np.dtype(ml_dtypes.bfloat16)) == 2000
    sweep = R.ladder(None, [(256,)], seed=7, peer_names=["cupy.sum"], ceiling=None)
    assert list(sweep.peers) == ["cupy.sum"] and sweep.ceiling is None and sweep.dtypes == ["float32"]
