"""Chapter 3's cluster experiments read on a CPU: the placement, occupancy and model tables, the checks'
grids, and the exchange timing's bookkeeping (record names and shapes) with a fake GPU."""
import numpy as np
import pytest

from kernels import cluster as cl
from tests.test_progmodel_host import fake_exchange_entries


def test_describe_placement():
    b = np.arange(64)
    smid = np.array([10, 11, 26, 27] * 16) + 2 * (b // 4)
    table = np.stack([b, b % 4, b // 4, np.full(64, 4), smid], axis=1)
    cl.check_cluster_whoami(table, 132)
    lines = cl.describe_placement(table).splitlines()
    assert lines[0] == "rank == blockIdx.x % 4 and cluster id == blockIdx.x // 4 on all 64 blocks"
    assert lines[1] == "  cluster 0: its blocks (rank 0..3) run on SMs [10, 11, 26, 27]"
    assert lines[2] == "  cluster 1: its blocks (rank 0..3) run on SMs [12, 13, 28, 29]"
    assert len(lines) == 6 and lines[-1] == "0 of 16 clusters placed two or more of their blocks on the same SM"
    assert cl.clusters_sharing_an_sm(table) == 0
    table[1, 4] = table[0, 4]
    assert cl.describe_placement(table).splitlines()[-1].startswith("1 of 16 clusters")
    assert cl.clusters_sharing_an_sm(table) == 1


def test_occupancy_and_model_tables():
    t = cl.occupancy_table({1: 132, 2: 66, 16: 7, 12: None}, 132)
    assert t.rows == [["1", "132", "132", "0"], ["2", "66", "132", "0"], ["16", "7", "112", "20"]]
    g = 64 * 132
    m = cl.model_table(g, 4000.0)
    assert m.column("N") == [str(n) for n in cl.CLUSTER_SIZES] and "4,000 GB/s" in m.caption
    row = m.rows[0]
    assert row[2] == f"{cl.global_bytes('v0', g, 2) / 1e6:.1f}" and row[5] == f"{cl.model_us('v3', g, 2, 4000.0):.1f}"
    assert row[6] == f"{(2 + 1 / 2) / (1 / 2):.1f}x"          # (2 + 1/N) tiles of traffic against 1/N
    big = {n: {"v0_global_2launch": 2.0 * n, "v3_cluster_dsmem": 1.0} for n in (2, 4)}
    model = {n: {"v0": 1.0 * n, "v3": 0.25} for n in (2, 4)}
    r = cl.model_ratio_table(big, model, g)
    assert r.rows == [["2", "2.00x", "4.00x"], ["4", "2.00x", "4.00x"]] and r.caption == f"G = {g}"


def test_check_grids_are_multiples_of_the_group():
    for n in cl.CLUSTER_SIZES:
        grids = cl.check_grids(n)
        assert grids[0] == n and all(g % n == 0 for g in grids) and 528 in grids


def test_plot_exchange_stacks_one_panel_per_size():
    import matplotlib
    matplotlib.use("Agg")
    from utils.plot import COLUMN_IN
    t = cl.exchange_times(fake_exchange_entries(), (528, 8448))
    fig = cl.plot_exchange(t)
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
