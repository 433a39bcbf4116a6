"""Chapter 3 host side: thread block clusters and distributed shared memory (sm_90).

The exchange (see cluster.cu): G blocks in groups of N, block b produces a partial tile P_b of TILE
uint32, and out[c] = sum of the N tiles of group c, mod 2**32. Four ways to move the tiles: through a
global workspace and a second launch (v0), through global memory with a last-block atomic (v1), through
global memory inside a cluster (v2), through DSMEM inside a cluster (v3).

Imports without a GPU; CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.build import KernelSource
from utils.check import CheckFailed, assert_close
from utils.ops import Version, expect_array, registry

SOURCE = KernelSource("cluster.cu")


TILE = 2048                  # uint32 per block (8 KB), as in cluster.cu
THREADS = 256
CLUSTER_SIZES = (2, 4, 8)    # group sizes compiled in cluster.cu: the portable cluster sizes
                             # (16 needs the non-portable-size attribute, which a CuPy launch cannot set)
WHOAMI_CLUSTER = 4

_M1, _M2, _M3 = np.uint32(0x9E3779B1), np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


def _xp_of(a):
    try:
        import cupy
        return cupy.get_array_module(a)
    except ImportError:
        return np


def payload_ref(seed: int, idx):
    """The kernel's integer mix of (seed, global index), in uint32 arithmetic (wraps like the GPU's)."""
    xp = _xp_of(idx)
    h = idx.astype(xp.uint32) * _M1 + xp.uint32(int(seed) & 0xFFFFFFFF)
    h ^= h >> xp.uint32(16)
    h *= _M2
    h ^= h >> xp.uint32(13)
    h *= _M3
    h ^= h >> xp.uint32(16)
    return h


def partial_tiles(seed: int, blocks: int, xp=np):
    """[blocks, TILE] uint32: the tile each block produces."""
    idx = xp.arange(int(blocks) * TILE, dtype=xp.uint32).reshape(int(blocks), TILE)
    return payload_ref(seed, idx)


def reduce_ref(seed: int, blocks: int, group: int, xp=np):
    """[blocks // group, TILE] uint32: each group's tiles summed mod 2**32."""
    check_group(blocks, group)
    p = partial_tiles(seed, blocks, xp)
    return p.reshape(int(blocks) // int(group), int(group), TILE).sum(axis=1, dtype=xp.uint32)


def check_group(blocks: int, group: int) -> None:
    blocks, group = int(blocks), int(group)
    if group < 1 or TILE % group:
        raise ValueError(f"group must divide the tile of {TILE} elements, got {group}")
    if blocks < group or blocks % group:
        raise ValueError(f"blocks must be a positive multiple of the group size {group}, got {blocks}")


def global_bytes(version: str, blocks: int, group: int) -> int:
    """Bytes each version moves through global memory (L2 / HBM), counting reads and writes.

    v0, v1, v2 write every tile to the workspace, read it back once and write the result; v3 keeps the
    tiles in shared memory and writes only the result.
    """
    check_group(blocks, group)
    tiles = 4 * TILE * int(blocks)
    result = tiles // int(group)
    if version in ("v0", "v1", "v2"):
        return 2 * tiles + result
    if version == "v3":
        return result
    raise ValueError(f"unknown version {version!r}; expected v0, v1, v2 or v3")


def dsmem_bytes(blocks: int, group: int) -> int:
    """Bytes v3 reads from the shared memory of another block of its cluster: (N - 1) / N of every tile."""
    check_group(blocks, group)
    return 4 * TILE * int(blocks) * (int(group) - 1) // int(group)


# --- buffers and launchers ----------------------------------------------------------------------------

@dataclasses.dataclass
class Buffers:
    """What the versions need: the workspace [G, TILE], the result [G / N, TILE], the arrival counters."""
    blocks: int
    group: int
    work: object
    out: object
    arrivals: object


def make_buffers(blocks: int, group: int) -> Buffers:
    import cupy

    from utils.check import poisoned
    check_group(blocks, group)
    return Buffers(int(blocks), int(group), cupy.empty((int(blocks), TILE), dtype=cupy.uint32),
                   poisoned((int(blocks) // int(group), TILE), np.uint32, xp=cupy),
                   cupy.zeros(int(blocks) // int(group), dtype=cupy.uint32))


def _check_buffers(bufs: Buffers, need_work: bool = True) -> tuple[int, int]:
    blocks, group = int(bufs.blocks), int(bufs.group)
    check_group(blocks, group)
    if need_work:
        expect_array(bufs.work, "work", dtype=np.uint32, shape=(blocks, TILE), align=16)
    expect_array(bufs.out, "out", dtype=np.uint32, shape=(blocks // group, TILE), align=16)
    return blocks, group


def _cluster_size(group: int) -> int:
    if int(group) not in CLUSTER_SIZES:
        raise ValueError(f"group (cluster) size must be one of {CLUSTER_SIZES} (compiled in cluster.cu), "
                         f"got {group}")
    return int(group)


def launch_v0(bufs: Buffers, seed: int):
    """Two launches: produce every tile into the workspace, then combine each group's slice."""
    blocks, group = _check_buffers(bufs)
    n = _cluster_size(group)
    SOURCE.function("cluster_reduce_v0_produce")((blocks,), (THREADS,), (bufs.work, np.uint32(seed)))
    SOURCE.function(f"cluster_reduce_v0_combine_c{n}")((blocks,), (THREADS,), (bufs.work, bufs.out))
    return bufs.out


def launch_v1(bufs: Buffers, seed: int):
    """One launch, no cluster: the last block of each group to arrive reduces the group's tiles."""
    blocks, group = _check_buffers(bufs)
    expect_array(bufs.arrivals, "arrivals", dtype=np.uint32, shape=(blocks // group,), align=4)
    n = _cluster_size(group)
    SOURCE.function(f"cluster_reduce_v1_lastblock_c{n}")(
        (blocks,), (THREADS,), (bufs.work, bufs.out, bufs.arrivals, np.uint32(seed)))
    return bufs.out


def launch_v2(bufs: Buffers, seed: int):
    """One launch, one cluster per group: tiles through global memory, cluster.sync() between."""
    blocks, group = _check_buffers(bufs)
    n = _cluster_size(group)
    SOURCE.function(f"cluster_reduce_v2_cluster_global_c{n}")((blocks,), (THREADS,),
                                                              (bufs.work, bufs.out, np.uint32(seed)))
    return bufs.out


def launch_v3(bufs: Buffers, seed: int):
    """One launch, one cluster per group: tiles stay in shared memory, read by the peers through DSMEM."""
    blocks, group = _check_buffers(bufs, need_work=False)
    n = _cluster_size(group)
    SOURCE.function(f"cluster_reduce_v3_dsmem_c{n}")((blocks,), (THREADS,), (bufs.out, np.uint32(seed)))
    return bufs.out


VERSIONS = registry(
    Version("cluster_reduce_v0_produce+combine_cN", "v0_global_2launch", launch_v0,
            "tiles through a global workspace, a second kernel reduces them"),
    Version("cluster_reduce_v1_lastblock_cN", "v1_global_lastblock", launch_v1,
            "one launch: tiles through global memory, the group's last block (atomic counter) reduces"),
    Version("cluster_reduce_v2_cluster_global_cN", "v2_cluster_global", launch_v2,
            "one launch, a cluster per group: tiles through global memory, cluster.sync() as the barrier"),
    Version("cluster_reduce_v3_dsmem_cN", "v3_cluster_dsmem", launch_v3,
            "one launch, a cluster per group: tiles stay in shared memory, peers read them over DSMEM"),
)


def check_reduce(out, seed: int, blocks: int, group: int, *, ref=None) -> None:
    """Raise CheckFailed unless out equals the reference exactly.

    ``ref`` (NumPy or CuPy, [blocks // group, TILE] uint32) defaults to :func:`reduce_ref` in NumPy.
    """
    if ref is None:
        ref = reduce_ref(seed, blocks, group, xp=np)
    if isinstance(ref, np.ndarray) and not isinstance(out, np.ndarray):
        out = out.get()
    assert_close(out, ref, dtype="exact", name=f"cluster reduce (G={blocks}, N={group})")


# --- who is in which cluster ----------------------------------------------------------------------------

CLUSTER_WHOAMI_FIELDS = ("block", "rank", "cluster", "cluster_size", "smid")


def launch_cluster_whoami(blocks: int):
    """Run cluster_whoami_c4 on ``blocks`` blocks (a multiple of 4); return the [blocks, 5] int32 table."""
    blocks = int(blocks)
    if blocks < WHOAMI_CLUSTER or blocks % WHOAMI_CLUSTER:
        raise ValueError(f"blocks must be a positive multiple of {WHOAMI_CLUSTER}, got {blocks}")
    import cupy

    from utils.check import poisoned
    out = poisoned((blocks, len(CLUSTER_WHOAMI_FIELDS)), np.int32, xp=cupy)
    SOURCE.function("cluster_whoami_c4")((blocks,), (32,), (out,))
    return out


def check_cluster_whoami(table, sms: int) -> None:
    """Rank = block % 4, cluster = block // 4, size 4, and an SM number in range; else CheckFailed."""
    t = np.asarray(table.get() if hasattr(table, "get") else table).astype(np.int64)
    b = np.arange(t.shape[0])
    want = np.stack([b, b % WHOAMI_CLUSTER, b // WHOAMI_CLUSTER, np.full_like(b, WHOAMI_CLUSTER)], axis=1)
    if not np.array_equal(t[:, :4], want):
        r = int(np.argwhere(t[:, :4] != want)[0][0])
        raise CheckFailed(f"cluster whoami: block {r} reports {t[r, :4].tolist()}, expected {want[r].tolist()}")
    if t[:, 4].min() < 0 or t[:, 4].max() >= sms:
        raise CheckFailed(f"cluster whoami: smid outside [0, {sms})")
