"""Chapter 3 cluster kernels on a Hopper GPU: every exchange version against the exact reference."""
import numpy as np
import pytest

from utils.gpu import has_gpu, supports

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(has_gpu() and not supports("clusters"), reason="needs thread block clusters")]


def _sms():
    from utils.gpu import device_summary
    return device_summary()["sms"]


def test_cluster_ranks_follow_block_index():
    from kernels import cluster as cl
    cl.check_cluster_whoami(cl.launch_cluster_whoami(264), _sms())


@pytest.mark.parametrize("label", ["v0_global_2launch", "v1_global_lastblock", "v2_cluster_global",
                                   "v3_cluster_dsmem"])
@pytest.mark.parametrize("group", [2, 4, 8])
@pytest.mark.parametrize("blocks_per_group", [1, 3, 33])
def test_every_version_reduces_exactly(label, group, blocks_per_group):
    from kernels import cluster as cl
    blocks = group * blocks_per_group
    v = cl.VERSIONS[label]
    bufs = cl.make_buffers(blocks, group)
    rng = np.random.default_rng(group * 100 + blocks_per_group)
    for _ in range(2):      # twice: v1 must leave its counters re-armed
        seed = int(rng.integers(1, 2**32 - 1))
        bufs.out.fill(np.uint32(0xFFFFFFFF))
        v(bufs, seed)
        cl.check_reduce(bufs.out, seed, blocks, group)
    assert int(bufs.arrivals.sum()) == 0


@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
def test_clusters_per_device_answers_for_every_size(cluster):
    """The driver's cuOccupancyMaxActiveClusters, through utils.occupancy, for the sizes chapter 3 prints."""
    from kernels import cluster as cl
    from utils.occupancy import clusters_per_device
    n = clusters_per_device(cl.SOURCE.function(cl.occupancy_probe_kernel(cluster)), cl.THREADS, 0, cluster)
    assert n is not None and n >= 1 and n * cluster <= _sms() * 32
