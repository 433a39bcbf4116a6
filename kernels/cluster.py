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

from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.check import CheckFailed, assert_close
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


def check_grids(group: int) -> tuple[int, ...]:
    """The grid sizes every version is checked on for group size N: N, 33 N and 528 (4 waves' worth on an
    H200, a multiple of every compiled N)."""
    return (int(group), 33 * int(group), 528)


def check_versions(rng) -> int:
    """Run every version at every compiled N on each of :func:`check_grids`, each with a fresh seed from
    ``rng`` and a poisoned output, against the NumPy reference (bit for bit). Returns the cases checked."""
    cases = 0
    for n in CLUSTER_SIZES:
        for g in check_grids(n):
            seed = int(rng.integers(1, 2**32 - 1))
            ref = reduce_ref(seed, g, n)                           # NumPy, uint32 arithmetic
            for v in VERSIONS.values():
                bufs = make_buffers(g, n)                          # out is poisoned (0xFFFFFFFF)
                v(bufs, seed)
                check_reduce(bufs.out, seed, g, n, ref=ref)
                cases += 1
    return cases


def time_exchanges(rec, sizes, rng, *, reps: int = 20) -> None:
    """Time every version at every (G in ``sizes``, N) as a CUDA graph of ``reps`` back-to-back exchanges,
    replayed by ``bench`` and divided by ``reps``; the output is poisoned before capture and checked exactly
    after timing. Records op ``cluster_reduce``, shape (G, TILE, N), us per exchange."""
    import cupy
    from tqdm.auto import tqdm

    from kernels.launch import capture_graph
    from utils.bench import bench
    cap = cupy.cuda.Stream(non_blocking=True)      # graphs are captured here, replayed on the current stream
    for g in sizes:
        seed = int(rng.integers(1, 2**32 - 1))
        tiles = partial_tiles(seed, g)                # NumPy reference of every block's tile
        for n in tqdm(CLUSTER_SIZES, desc=f"G = {g}", leave=False):
            ref = cupy.asarray(tiles.reshape(g // n, n, TILE).sum(axis=1, dtype=np.uint32))
            for v in VERSIONS.values():
                bufs = make_buffers(g, n)
                run = v.bind(bufs, seed)              # validate, plan and load outside the graph
                run()
                bufs.out.fill(np.uint32(0xFFFFFFFF))  # poison again: the replays must write it
                graph = capture_graph(run, reps, cap)
                name = f"{v.label} G={g} N={n}"
                t = bench(graph.launch, target_ms=100,
                          check=lambda out=bufs.out, ref=ref, name=name: assert_close(out, ref, dtype="exact",
                                                                                      name=name))
                rec.add("cluster_reduce", v.label, dtype="uint32", shape=(g, TILE, n), ms=t.ms / reps,
                        metric_name="us", p10_ms=t.p10 / reps, p90_ms=t.p90 / reps, reps=t.n,
                        exchanges_per_replay=reps, global_bytes=global_bytes(f"v{v.number}", g, n))


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


# the exchange versions other than v1 (the last block finishes the sum, which costs it a serial tail)
NOT_LASTBLOCK = ("v0_global_2launch", "v2_cluster_global", "v3_cluster_dsmem")


def clusters_sharing_an_sm(table) -> int:
    """On a cluster_whoami table: how many clusters put two or more of their blocks on one SM."""
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    clusters = t.shape[0] // WHOAMI_CLUSTER
    return sum(len(set(t[t[:, 2] == c, 4].tolist())) < WHOAMI_CLUSTER for c in range(clusters))


def describe_placement(table, shown: int = 4) -> str:
    """On a checked cluster_whoami table: the SMs of the first ``shown`` clusters' blocks, and how many
    clusters put two or more of their blocks on one SM."""
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    clusters = t.shape[0] // WHOAMI_CLUSTER
    sms = [t[t[:, 2] == c, 4].tolist() for c in range(clusters)]
    shared = clusters_sharing_an_sm(t)
    return "\n".join(
        [(f"rank == blockIdx.x % {WHOAMI_CLUSTER} and cluster id == blockIdx.x // {WHOAMI_CLUSTER} "
          f"on all {t.shape[0]} blocks")]
        + [f"  cluster {c}: its blocks (rank 0..{WHOAMI_CLUSTER - 1}) run on SMs {sms[c]}" for c in range(shown)]
        + [f"{shared} of {clusters} clusters placed two or more of their blocks on the same SM"])


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


def occupancy_table(fit: dict, sms: int):
    """Cluster size -> clusters resident, SMs used and SMs idle (sizes the driver gave no answer for left out)."""
    from utils.table import Table
    return Table(["cluster size N", "clusters resident", "SMs used", "SMs idle"],
                 [(n, k, k * n, sms - k * n) for n, k in fit.items() if k is not None])


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


def model_table(blocks: int, copy_gbps: float):
    """The bytes model of the exchange at G = ``blocks`` for every N: v0-v2 and v3's global bytes and time."""
    from utils.table import Table
    g = int(blocks)
    rows = [[g, n, f"{global_bytes('v0', g, n) / 1e6:.1f}", f"{model_us('v0', g, n, copy_gbps):.1f}",
             f"{global_bytes('v3', g, n) / 1e6:.1f}", f"{model_us('v3', g, n, copy_gbps):.1f}",
             f"{model_us('v0', g, n, copy_gbps) / model_us('v3', g, n, copy_gbps):.1f}x"] for n in CLUSTER_SIZES]
    return Table(["G", "N", "v0-v2 global MB", "v0-v2 model (us)", "v3 global MB", "v3 model (us)", "ratio"], rows,
                 caption=f"model: bytes / the copy bandwidth measured above ({copy_gbps:,.0f} GB/s); "
                 "no L2 hits, no fixed costs")


def model_ratio_table(big: dict, model: dict, blocks: int):
    """v0 and v3 against their bytes models: ``big`` N -> {label: us}, ``model`` N -> {"v0", "v3": us}."""
    from utils.table import Table
    return Table(["N", "v0 / its bytes model", "v3 / its bytes model"],
                 [[n, f"{big[n]['v0_global_2launch'] / model[n]['v0']:.2f}x",
                   f"{big[n]['v3_cluster_dsmem'] / model[n]['v3']:.2f}x"] for n in big], caption=f"G = {blocks}")


def exchange_table(times):
    """Per (G, N): every version's time and the two ratios the chapter reads (v0 / v3, v2 / v3)."""
    from utils.table import Table
    labels = list(VERSIONS)
    rows = [[g, n, *[f"{us[lab]:.1f}" for lab in labels],
             f"{us['v0_global_2launch'] / us['v3_cluster_dsmem']:.2f}x",
             f"{us['v2_cluster_global'] / us['v3_cluster_dsmem']:.2f}x"] for (g, n), us in times.items()]
    return Table(["G", "N", *[f"{lab} (us)" for lab in labels], "v0 / v3", "v2 / v3"], rows)


def plot_exchange(times):
    """Bars of every version's time per exchange, one panel per grid size G (stacked), one group per N."""
    from utils.plot import figure, version_style
    sizes = sorted({g for g, _ in times})
    groups = sorted({n for _, n in times})
    labels = list(VERSIONS)
    fig, axes = figure(len(sizes), 1, height=2.6)
    width = 0.8 / len(labels)
    for ax, g in zip(axes[:, 0], sizes):
        for j, lab in enumerate(labels):
            ax.bar(np.arange(len(groups)) + (j - (len(labels) - 1) / 2) * width,
                   [times[g, n][lab] for n in groups], width, label=lab, color=version_style(j)["color"])
        ax.set_xticks(range(len(groups)), [f"N = {n}" for n in groups])
        ax.set_ylabel("us per exchange")
        ax.set_title(f"G = {g} blocks ({g * TILE * 4 / 1e6:.1f} MB of tiles)")
    axes[0, 0].legend(ncol=2)
    return fig
