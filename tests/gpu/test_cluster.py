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


@pytest.mark.parametrize("group", [2, 4, 8])
@pytest.mark.parametrize("blocks_per_group", [1, 3, 33])
def test_every_version_reduces_exactly(group, blocks_per_group, rng):
    from kernels import cluster as cl
    blocks = group * blocks_per_group
    for v in cl.VERSIONS.values():
        bufs = cl.make_buffers(blocks, group)
        for _ in range(2):      # twice: v1 must leave its counters re-armed
            seed = int(rng.integers(1, 2**32 - 1))
            bufs.out.fill(np.uint32(0xFFFFFFFF))
            v.launch(bufs, seed)
            cl.check_reduce(bufs.out, seed, blocks, group)
        assert int(bufs.arrivals.sum()) == 0
