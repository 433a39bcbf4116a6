"""Chapter 3 launch/stream kernels on a GPU: chunk_work, the pipeline's events, queued launches, graphs."""
import numpy as np
import pytest

from kernels import launch as ln

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n,iters", [(1, 0), (1007, 1), (1 << 16, 40)])
def test_chunk_work(n, iters):
    from utils.arrays import random_normal
    from utils.check import assert_close, poisoned
    x, seed = random_normal(n, "float32", seed=n + iters)
    y = poisoned((n,), np.float32)
    ln.launch_chunk_work(x, y, iters, blocks=min(64, (n + 255) // 256))
    assert_close(y, ln.chunk_work_ref(x, iters), dtype="float32", name=f"chunk_work (seed {seed})")


@pytest.mark.parametrize("nstreams", [1, 2, 3])
def test_pipeline_results_and_event_order(nstreams):
    import cupy
    import cupyx
    from utils.check import assert_close, poisoned
    chunks, n, iters = 4, 10007, 30
    h = cupyx.empty_pinned((chunks, n), np.float32)
    h[...] = np.random.default_rng(chunks * n).standard_normal((chunks, n), dtype=np.float32)
    d_x = cupy.empty((chunks, n), dtype=cupy.float32)
    d_y = poisoned((chunks, n), np.float32)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(nstreams)]
    total, rows = ln.pipeline_times(*ln.run_pipeline(h, d_x, d_y, iters, streams, blocks=40))
    assert_close(d_y, ln.chunk_work_ref(cupy.asarray(h), iters), dtype="float32")
    assert total > 0 and (rows[:, 0] <= rows[:, 1]).all() and (rows[:, 1] <= rows[:, 2]).all()
    assert rows.max() <= total + 1e-3


def test_queued_launches_and_graph_replay():
    import cupy
    per, enqueue_ms = ln.queued_launches_ms(20, 2_000_000)
    assert 0 < per < 1.0 and enqueue_ms > 0
    s = cupy.cuda.Stream(non_blocking=True)
    g = ln.capture_empty_graph(10, s)
    times = ln.graph_replay_ms(g, 10, s, reps=3)
    assert all(0 < t < 1.0 for t in times)


def test_measure_launch_costs_records_five_ways(tmp_path):
    from kernels import launch as ln
    from utils.gpu import gpu_slug
    from utils.record import Record
    rec = Record("test-launch", gpu=gpu_slug(), root=tmp_path)
    costs = ln.measure_launch_costs(rec, 50)
    assert set(costs.us) == set(ln.LAUNCH_IMPLS) and all(v > 0 for v in costs.us.values())
    assert len(rec.find("launch")) == 5
