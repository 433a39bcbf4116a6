"""Chapter 3's stream and launch-cost readings on a CPU: record names, the cost summary, the plots' size."""
import pytest

from kernels import launch as ln


def test_pipeline_impl_names():
    assert ln.pipeline_impl(1) == "serial.1stream" and ln.pipeline_impl(3) == "overlap.3streams"


def test_launch_costs_table_and_description():
    us = {"empty_kernel.sync": 11.0, "empty_kernel.async": 5.5, "empty_kernel.device": 1.375,
          "cuda_graph.replay": 0.625, "cuda_graph.wall": 0.7}
    c = ln.LaunchCosts(us, False, 0.7, 1000)
    assert c.table().rows[0] == ["empty_kernel.sync", "11.00"] and len(c.table().rows) == 5
    lines = c.describe().splitlines()
    assert lines[0] == ("a synchronous launch round trip costs 2.0x the host's per-launch enqueue time; the host "
                        "enqueues 4.0x slower than the GPU runs empty kernels back to back; a graph replay runs them "
                        "2.2x faster still")
    assert lines[1] == ("one graph launch of 1000 kernels, wall clock including the host call and the wait: "
                        "0.70 ms (0.70 us per kernel)")


def test_plots_fit_the_column():
    import matplotlib
    matplotlib.use("Agg")
    from utils.plot import COLUMN_IN
    launches = [{"impl": i, "metric": 1.0 + k} for k, i in enumerate(ln.LAUNCH_IMPLS)]
    pipe = [{"impl": "serial.1stream", "ms": 4.7}, {"impl": "overlap.3streams", "ms": 2.9}]
    fig = ln.plot_costs(launches, pipe, {"model.serial": 4.6, "model.overlap.3streams": 2.8})
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    marks = [(0.0, 0.3, 0.6), (0.3, 0.6, 0.9)]
    fig = ln.plot_pipeline({1: marks, 3: marks}, {1: 0.9, 3: 0.9})
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
