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
from utils.arrays import xp as array_module
from utils.ops import expect_array
from utils.version import Launch, Registry, Version

SOURCE = KernelSource("cluster.cu", requires=("clusters",))   # every kernel of the file: __cluster_dims__


TILE = 2048                  # uint32 per block (8 KB), as in cluster.cu
THREADS = 256
CLUSTER_SIZES = (2, 4, 8)    # group sizes compiled in cluster.cu: the portable cluster sizes
                             # (16 needs the non-portable-size attribute, which a CuPy launch cannot set)
WHOAMI_CLUSTER = 4

_M1, _M2, _M3 = np.uint32(0x9E3779B1), np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


def payload_ref(seed: int, idx):
    """The kernel's integer mix of (seed, global index), in uint32 arithmetic (wraps like the GPU's)."""
    xp = array_module(idx)
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


def cluster_size(group: int) -> int:
    """``group`` if cluster.cu compiles kernels for it, else ValueError naming the sizes it has."""
    if int(group) not in CLUSTER_SIZES:
        raise ValueError(f"group (cluster) size must be one of {CLUSTER_SIZES} (compiled in cluster.cu), "
                         f"got {group}")
    return int(group)


@dataclasses.dataclass(frozen=True)
class ReduceProblem:
    bufs: Buffers
    seed: int
    blocks: int
    group: int

    @property
    def out(self):
        return self.bufs.out


def reduce_problem(bufs: Buffers, seed: int) -> ReduceProblem:
    """The exchange on ``bufs`` (see :func:`make_buffers`) with the tiles of ``seed``."""
    blocks, group = int(bufs.blocks), int(bufs.group)
    check_group(blocks, group)
    cluster_size(group)
    expect_array(bufs.out, "out", dtype=np.uint32, shape=(blocks // group, TILE), align=16)
    return ReduceProblem(bufs, int(seed) & 0xFFFFFFFF, blocks, group)


def expect_workspace(p: ReduceProblem) -> None:
    expect_array(p.bufs.work, "work", dtype=np.uint32, shape=(p.blocks, TILE), align=16)


def plan_v0(p: ReduceProblem, config=None) -> list[Launch]:
    """Two launches: produce every tile into the workspace, then combine each group's slice."""
    expect_workspace(p)
    grid, block = (p.blocks, 1, 1), (THREADS, 1, 1)
    return [Launch("cluster_reduce_v0_produce", grid, block, (p.bufs.work, np.uint32(p.seed))),
            Launch(f"cluster_reduce_v0_combine_c{p.group}", grid, block, (p.bufs.work, p.bufs.out))]


def plan_v1(p: ReduceProblem, config=None) -> list[Launch]:
    """One launch, no cluster: the last block of each group to arrive reduces the group's tiles."""
    expect_workspace(p)
    expect_array(p.bufs.arrivals, "arrivals", dtype=np.uint32, shape=(p.blocks // p.group,), align=4)
    return [Launch(f"cluster_reduce_v1_lastblock_c{p.group}", (p.blocks, 1, 1), (THREADS, 1, 1),
                   (p.bufs.work, p.bufs.out, p.bufs.arrivals, np.uint32(p.seed)))]


def plan_v2(p: ReduceProblem, config=None) -> list[Launch]:
    """One launch, one cluster per group: tiles through global memory, cluster.sync() between."""
    expect_workspace(p)
    return [Launch(f"cluster_reduce_v2_cluster_global_c{p.group}", (p.blocks, 1, 1), (THREADS, 1, 1),
                   (p.bufs.work, p.bufs.out, np.uint32(p.seed)), cluster=p.group)]


def plan_v3(p: ReduceProblem, config=None) -> list[Launch]:
    """One launch, one cluster per group: tiles stay in shared memory, read by the peers through DSMEM."""
    return [Launch(f"cluster_reduce_v3_dsmem_c{p.group}", (p.blocks, 1, 1), (THREADS, 1, 1),
                   (p.bufs.out, np.uint32(p.seed)), cluster=p.group)]


VERSIONS = Registry("cluster_reduce", reduce_problem, [
    Version("cluster_reduce_v0_global_2launch", "tiles through a global workspace, a second kernel reduces them",
            SOURCE, plan_v0, snippet="cluster_reduce_v0"),
    Version("cluster_reduce_v1_global_lastblock",
            "one launch: tiles through global memory, the group's last block (atomic counter) reduces",
            SOURCE, plan_v1, parent="v0_global_2launch", snippet="cluster_reduce_v1"),
    Version("cluster_reduce_v2_cluster_global",
            "one launch, a cluster per group: tiles through global memory, cluster.sync() as the barrier",
            SOURCE, plan_v2, parent="v1_global_lastblock", snippet="cluster_reduce_v2"),
    Version("cluster_reduce_v3_cluster_dsmem",
            "one launch, a cluster per group: tiles stay in shared memory, peers read them over DSMEM",
            SOURCE, plan_v3, parent="v2_cluster_global", snippet="cluster_reduce_v3"),
])


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


# --- how many clusters fit at once: the GPCs seen through the driver -----------------------------------

PROBE_SIZES = tuple(range(1, 17))


def occupancy_probe_kernel(cluster: int) -> str:
    """The empty kernel compiled with ``__cluster_dims__(cluster)`` (cluster.cu's probes)."""
    if int(cluster) not in PROBE_SIZES:
        raise ValueError(f"cluster: expected a size in 1..16 (the probes compiled in cluster.cu), got {cluster}")
    return f"cluster_probe_c{int(cluster)}"


def clusters_at_one_block_per_sm(sizes=PROBE_SIZES, threads: int = THREADS) -> dict[int, int | None]:
    """Cluster size -> clusters resident at once when every block takes a whole SM's shared memory
    (so a cluster of N blocks needs N SMs of one GPC), from cuOccupancyMaxActiveClusters."""
    from utils.hardware import facts
    from utils.occupancy import clusters_per_device
    smem = facts().smem_per_block_optin
    return {n: clusters_per_device(SOURCE.function(occupancy_probe_kernel(n)), threads, smem, n) for n in sizes}


# --- reading the exchange's record ----------------------------------------------------------------------

def exchange_times(entries, sizes, groups=CLUSTER_SIZES) -> dict:
    """(G, N) -> {version label: microseconds per exchange}, from the record's ``cluster_reduce`` entries
    (shape (G, TILE, N), metric in us)."""
    out = {(int(g), int(n)): {} for g in sizes for n in groups}
    for e in entries:
        if e["op"] != "cluster_reduce":
            continue
        g, _, n = (int(s) for s in e["shape"])
        if (g, n) in out:
            out[g, n][e["impl"]] = float(e["metric"])
    missing = [k for k, v in out.items() if len(v) < len(VERSIONS)]
    if missing:
        raise ValueError(f"expected every version timed at every (G, N); missing entries at {missing}")
    return out


def model_us(version: str, blocks: int, group: int, copy_gbps: float) -> float:
    """The bytes model of one exchange: :func:`global_bytes` at the copy bandwidth (GB/s), in us."""
    return global_bytes(version, blocks, group) / (copy_gbps * 1e3)


def exchange_table(times):
    """Per (G, N): every version's time and the two ratios the chapter reads (v0 / v3, v2 / v3)."""
    from utils.table import Table
    labels = list(VERSIONS)
    rows = [[g, n, *[f"{us[lab]:.1f}" for lab in labels],
             f"{us['v0_global_2launch'] / us['v3_cluster_dsmem']:.2f}x",
             f"{us['v2_cluster_global'] / us['v3_cluster_dsmem']:.2f}x"] for (g, n), us in times.items()]
    return Table(["G", "N", *[f"{lab} (us)" for lab in labels], "v0 / v3", "v2 / v3"], rows)


def plot_exchange(times):
    """Bars of every version's time per exchange, one panel per grid size G, one group per N."""
    import matplotlib.pyplot as plt
    sizes = sorted({g for g, _ in times})
    groups = sorted({n for _, n in times})
    labels = list(VERSIONS)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 3.8), squeeze=False)
    width = 0.8 / len(labels)
    for ax, g in zip(axes[0], sizes):
        for j, lab in enumerate(labels):
            ax.bar(np.arange(len(groups)) + (j - (len(labels) - 1) / 2) * width,
                   [times[g, n][lab] for n in groups], width, label=lab)
        ax.set_xticks(range(len(groups)), [f"N = {n}" for n in groups])
        ax.set_ylabel("us per exchange (graph replay)")
        ax.set_title(f"G = {g} blocks, {g * TILE * 4 / 1e6:.1f} MB of partial tiles")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig
