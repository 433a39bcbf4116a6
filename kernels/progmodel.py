"""Chapter 3 host side: thread indexing, waves of blocks, block sums and a filter with cooperative groups.

Everything here imports without a GPU: references, the wave model and launch checks are plain
Python/NumPy; CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from utils.build import KernelSource
from utils.check import CheckFailed
from utils.arrays import ceil_div
from utils.arrays import xp as array_module
from utils.ops import expect_array
from utils.version import Launch, Registry, Version, driver_blocks_per_sm

SOURCE = KernelSource("progmodel.cu")


WARP = 32

# --- whoami: who is each thread ------------------------------------------------------------------------

WHOAMI_FIELDS = ("block_x", "block_y", "block_z", "thread_x", "thread_y", "thread_z", "block_linear",
                 "thread_in_block", "global_id", "warp", "lane", "laneid_hw", "smid", "x", "y", "z")
SMID = WHOAMI_FIELDS.index("smid")


def _dim3(v, name: str, limits) -> tuple[int, int, int]:
    t = tuple(int(a) for a in (v if isinstance(v, (tuple, list)) else (v,)))
    t = t + (1,) * (3 - len(t))
    if len(t) != 3 or any(a < 1 for a in t):
        raise ValueError(f"{name} must be 1 to 3 positive sizes, got {v!r}")
    if any(a > m for a, m in zip(t, limits)):
        raise ValueError(f"{name} {t} exceeds the CUDA limits {limits}")
    return t


def check_launch_shape(grid, block) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """grid and block as 3-tuples, within CUDA's limits (block: 1024 threads, z at most 64)."""
    g = _dim3(grid, "grid", (2**31 - 1, 65535, 65535))
    b = _dim3(block, "block", (1024, 1024, 64))
    if math.prod(b) > 1024:
        raise ValueError(f"block {b} has {math.prod(b)} threads; at most 1024")
    return g, b


def whoami_expected(grid, block) -> np.ndarray:
    """Every field of the whoami table but smid, from the formulas, in global-id order (int64).

    Global id = linear block number x threads per block + linear thread number, both with x
    fastest; so a C-order walk over (block z, y, x, thread z, y, x) visits the threads in that order.
    """
    (gx, gy, gz), (bx, by, bz) = check_launch_shape(grid, block)
    BZ, BY, BX, TZ, TY, TX = (a.ravel() for a in np.indices((gz, gy, gx, bz, by, bx)))
    block_linear = BX + gx * (BY + gy * BZ)
    tid = TX + bx * (TY + by * TZ)
    gid = block_linear * (bx * by * bz) + tid
    cols = [BX, BY, BZ, TX, TY, TZ, block_linear, tid, gid, tid // WARP, tid % WARP, tid % WARP,
            np.full_like(BX, -1), BX * bx + TX, BY * by + TY, BZ * bz + TZ]
    return np.stack(cols, axis=1).astype(np.int64)


def check_whoami(table, grid, block, sms: int) -> None:
    """Raise CheckFailed unless the kernel's table matches the formulas; smid must be constant per block."""
    table = np.asarray(table.get() if hasattr(table, "get") else table)
    exp = whoami_expected(grid, block)
    if table.shape != exp.shape:
        raise CheckFailed(f"whoami: table shape {table.shape}, expected {exp.shape}")
    cols = [i for i in range(len(WHOAMI_FIELDS)) if i != SMID]
    bad = np.argwhere(table[:, cols] != exp[:, cols])
    if len(bad):
        r, c = bad[0]
        raise CheckFailed(f"whoami: {len(bad)} fields differ; first: thread {r}, field "
                          f"{WHOAMI_FIELDS[cols[c]]}: got {table[r, cols[c]]}, expected {exp[r, cols[c]]}")
    sm = table[:, SMID]
    if sm.min() < 0 or sm.max() >= sms:
        raise CheckFailed(f"whoami: smid outside [0, {sms}): {sm.min()}..{sm.max()}")
    blocks = table[:, WHOAMI_FIELDS.index("block_linear")]
    for b in np.unique(blocks):
        if len(np.unique(sm[blocks == b])) != 1:
            raise CheckFailed(f"whoami: the threads of block {b} report different SMs")


def launch_whoami(grid, block):
    """Run whoami on a (grid, block) launch; return the [threads, 16] int32 table (CuPy)."""
    import cupy

    from utils.check import poisoned
    g, b = check_launch_shape(grid, block)
    total = math.prod(g) * math.prod(b)
    if total * len(WHOAMI_FIELDS) >= 2**31:
        raise ValueError(f"{total} threads is too many for the whoami table (int32 offsets)")
    out = poisoned((total, len(WHOAMI_FIELDS)), np.int32, xp=cupy)
    SOURCE.function("whoami")(g, b, (out,))
    return out


# --- waves ------------------------------------------------------------------------------------------

WAVE_THREADS = 256


def wave_smem_bytes(blocks_per_sm: int, smem_per_sm: int = 233472, reserved_per_block: int = 1024,
                    max_per_block: int = 232448) -> int:
    """Dynamic shared memory per block that lets exactly ``blocks_per_sm`` blocks share one SM.

    Each block also costs ``reserved_per_block`` bytes the driver keeps; the result is rounded down
    to 1 KB and capped at the per-block opt-in maximum (227 KB on Hopper).
    """
    k = int(blocks_per_sm)
    if k < 1:
        raise ValueError(f"blocks_per_sm must be at least 1, got {blocks_per_sm}")
    s = min(max_per_block, (smem_per_sm // k - reserved_per_block) // 1024 * 1024)
    if s <= 0 or (k + 1) * (s + reserved_per_block) <= smem_per_sm:
        raise ValueError(f"cannot cap an SM at {k} blocks with shared memory alone "
                         f"({smem_per_sm} B per SM, {reserved_per_block} B reserved per block)")
    return s


def wave_points(per_wave: int, max_waves: float = 3.5, step: float = 0.25) -> list[int]:
    """Grid sizes for the tail-effect sweep: every quarter wave, plus one block past each full wave."""
    if per_wave < 1:
        raise ValueError(f"per_wave must be positive, got {per_wave}")
    pts = {1}
    f = step
    while f <= max_waves + 1e-9:
        pts.add(max(1, round(per_wave * f)))
        f += step
    pts.update(per_wave * m + 1 for m in range(1, int(max_waves) + 1))
    return sorted(pts)


def waves(blocks, per_wave: int) -> np.ndarray:
    """Number of waves a grid of ``blocks`` needs when ``per_wave`` blocks run at once."""
    return np.ceil(np.asarray(blocks, dtype=np.float64) / per_wave).astype(np.int64)


def wave_model_ms(blocks, per_wave: int, block_ms: float, fixed_ms: float = 0.0) -> np.ndarray:
    """Time of a grid of equal blocks: a fixed cost plus one block time per wave."""
    return fixed_ms + waves(blocks, per_wave) * block_ms


def wave_efficiency(blocks, per_wave: int) -> np.ndarray:
    """Fraction of the block slots of all waves that hold a block: blocks / (waves x per_wave)."""
    b = np.asarray(blocks, dtype=np.float64)
    return b / (waves(b, per_wave) * per_wave)


def split_waves(t_start, gap_ns: float) -> list[int]:
    """Group block start times into waves: a new wave begins after a gap longer than ``gap_ns``.

    Returns the number of blocks in each wave, in time order.
    """
    t = np.sort(np.asarray(t_start, dtype=np.float64))
    if t.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(t) > gap_ns) + 1
    edges = np.concatenate([[0], cuts, [t.size]])
    return [int(b - a) for a, b in zip(edges[:-1], edges[1:])]


def launch_wave_spin(blocks: int, ns: int, smem: int, smid, t_start, t_end, *,
                     threads: int = WAVE_THREADS):
    """``blocks`` blocks of ``threads`` wait ``ns`` nanoseconds each, asking ``smem`` bytes of shared memory."""
    blocks, ns, smem = int(blocks), int(ns), int(smem)
    if blocks < 1 or ns < 0 or not 0 <= smem <= 232448:
        raise ValueError(f"need blocks >= 1, ns >= 0 and 0 <= smem <= 232448, got {blocks}, {ns}, {smem}")
    if threads % WARP or not 0 < threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 up to 1024, got {threads}")
    expect_array(smid, "smid", dtype=np.int32, shape=(blocks,), align=4)
    expect_array(t_start, "t_start", dtype=np.uint64, shape=(blocks,), align=8)
    expect_array(t_end, "t_end", dtype=np.uint64, shape=(blocks,), align=8)
    fn = wave_kernel(smem)
    fn((blocks,), (threads,), (np.uint64(ns), smid, t_start, t_end), shared_mem=smem)


def wave_kernel(smem: int):
    """The wave_spin kernel, with its dynamic shared memory limit raised to ``smem`` (opt-in above 48 KB)."""
    fn = SOURCE.function("wave_spin")
    if fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = int(smem)
    return fn


def resident_blocks(fn, threads: int, smem: int) -> int:
    """The driver's occupancy answer (cuOccupancyMaxActiveBlocksPerMultiprocessor): blocks of ``fn``
    that one SM holds at once."""
    n = driver_blocks_per_sm(fn, threads, smem)
    if n is None:
        raise RuntimeError("the driver gave no occupancy answer for wave_spin")
    return n


# --- block sum ------------------------------------------------------------------------------------------

SUM_THREADS = 256


def integer_valued(n: int, lo: int = -4, hi: int = 4, seed: int = 0, xp=None):
    """Seeded random small integers stored as fp32: every partial sum of them is exact (far below 2**24)."""
    if xp is None:
        import cupy as xp
    return xp.asarray(np.random.default_rng(seed).integers(lo, hi + 1, size=int(n)).astype(np.float32))


def block_sum_nbytes(n: int, blocks: int) -> int:
    """Read x once, write one float per block."""
    return 4 * int(n) + 4 * int(blocks)


def block_sum_ref(x, blocks: int, threads: int = SUM_THREADS):
    """Partial sum of each block in float64: block b adds float4 q when (q // threads) % blocks == b,
    and block 0 also adds the n % 4 trailing floats. Works on NumPy and CuPy arrays."""
    xp = array_module(x)
    n = x.shape[0]
    n4 = n // 4
    s4 = x[:4 * n4].astype(xp.float64).reshape(n4, 4).sum(axis=1)
    owner = (xp.arange(n4, dtype=xp.int64) // threads) % blocks
    part = xp.bincount(owner, weights=s4, minlength=blocks).astype(xp.float64)
    part[0] += x[4 * n4:].astype(xp.float64).sum()
    return part


@dataclasses.dataclass(frozen=True)
class BlockSumProblem:
    x: object
    out: object      # partial: one float per block
    n: int
    blocks: int


def block_sum_problem(x, partial) -> BlockSumProblem:
    """partial[b] = sum of block b's share of x: x 1-D float32, 16-byte aligned; one block per partial."""
    expect_array(x, "x", dtype=np.float32, ndim=1, align=16)
    expect_array(partial, "partial", dtype=np.float32, ndim=1, align=4)
    n, blocks = int(x.shape[0]), int(partial.shape[0])
    if blocks < 1:
        raise ValueError("partial: expected at least one block's sum, got an empty array")
    if n < 1:
        raise ValueError("x: expected at least one element, got an empty array")
    return BlockSumProblem(x, partial, n, blocks)


def block_sum_version(name: str, summary: str, parent: str | None = None) -> Version:
    def plan(p: BlockSumProblem, config=None) -> list[Launch]:
        return [Launch(name, (p.blocks, 1, 1), (SUM_THREADS, 1, 1), (p.x, np.int64(p.n), p.out))]
    snippet = "block_sum_" + name.split("_")[2]
    return Version(name, summary, SOURCE, plan, parent=parent, snippet=snippet)


BLOCK_SUM = Registry("block_sum", block_sum_problem, [
    block_sum_version("block_sum_v0_shfl", "__shfl_xor_sync butterflies per warp, warp sums through shared memory"),
    block_sum_version("block_sum_v1_cg", "the same tree with cg::tiled_partition<32> and cg::reduce", "v0_shfl"),
    block_sum_version("block_sum_v2_cg_tile16",
                      "sixteen-thread tiles: tiled_partition<16>, sixteen partials per block in smem", "v1_cg"),
])


# --- filter -----------------------------------------------------------------------------------------

def filter_nbytes(n: int, kept: int) -> int:
    """Read x, write the kept elements (the counter's traffic is not counted)."""
    return 4 * int(n) + 4 * int(kept)


def check_filter(out, count, x, threshold: float) -> int:
    """Raise CheckFailed unless out[:count] holds exactly the elements x > threshold (in any order)."""
    import cupy
    want = cupy.sort(x[x > threshold])
    k = int(count.get()[0]) if hasattr(count, "get") else int(count[0])
    if k != want.size:
        raise CheckFailed(f"filter: counter says {k} kept, the reference keeps {want.size}")
    got = cupy.sort(out[:k])
    if not bool((got == want).all()):
        raise CheckFailed("filter: the kept elements differ from the reference (compared sorted)")
    return k


@dataclasses.dataclass(frozen=True)
class FilterProblem:
    x: object
    threshold: float
    out: object
    count: object
    n: int


def filter_problem(x, threshold, out, count) -> FilterProblem:
    """out[:count] = x[x > threshold] in any order; count (uint32 [1]) must be 0 before each launch."""
    expect_array(x, "x", dtype=np.float32, ndim=1, align=4)
    n = int(x.shape[0])
    expect_array(out, "out", dtype=np.float32, shape=(n,), align=4)
    expect_array(count, "count", dtype=np.uint32, shape=(1,), align=4)
    if n < 1:
        raise ValueError("x: expected at least one element, got an empty array")
    return FilterProblem(x, float(threshold), out, count, n)


def filter_version(name: str, summary: str, parent: str | None = None) -> Version:
    def plan(p: FilterProblem, config=None) -> list[Launch]:
        # a grid-stride loop over one full wave of blocks (the driver lowers the grid to what is resident)
        return [Launch(name, (ceil_div(p.n, SUM_THREADS), 1, 1), (SUM_THREADS, 1, 1),
                       (p.x, np.int64(p.n), np.float32(p.threshold), p.out, p.count), persistent=True)]
    snippet = "filter_" + name.split("_")[1]
    return Version(name, summary, SOURCE, plan, parent=parent, snippet=snippet)


FILTER = Registry("filter", filter_problem, [
    filter_version("filter_v0_atomic", "one atomicAdd on the shared counter per kept element"),
    filter_version("filter_v1_coalesced",
                   "cg::coalesced_threads(): one atomicAdd per group of lanes that took the branch together",
                   "v0_atomic"),
    filter_version("filter_v2_block",
                   "warp ballots and a scan of the warp counts in smem: one atomicAdd per block window",
                   "v1_coalesced"),
])


# --- pictures and readings of the experiments ----------------------------------------------------------

def plot_whoami(table, grid, block):
    """Three maps of a 2-D launch's threads at their (x, y): block number, warp in block, lane in warp."""
    import matplotlib.pyplot as plt
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    (gx, gy, _), (bx, by, _) = check_launch_shape(grid, block)
    f = {name: i for i, name in enumerate(WHOAMI_FIELDS)}
    fig, axes = plt.subplots(1, 3, figsize=(12, 2.9))
    for ax, name, cmap in zip(axes, ("block_linear", "warp", "lane"), ("tab10", "Set2", "viridis")):
        img = np.full((gy * by, gx * bx), -1)
        img[t[:, f["y"]], t[:, f["x"]]] = t[:, f[name]]
        ax.imshow(img, cmap=cmap, interpolation="nearest")
        ax.set_title(name)
        ax.set_xlabel("x = blockIdx.x * blockDim.x + threadIdx.x")
        ax.set_ylabel("y")
        if name != "lane":                   # label each block (or each warp of each block) at its centre
            keys = t[:, f["block_linear"]] * 64 + (t[:, f["warp"]] if name == "warp" else 0)
            for key in np.unique(keys):
                sel = keys == key
                ax.text(t[sel, f["x"]].mean(), t[sel, f["y"]].mean(), str(t[sel, f[name]][0]),
                        ha="center", va="center", fontsize=8)
    fig.tight_layout()
    return fig


@dataclasses.dataclass(frozen=True)
class Staircase:
    """The wave model fitted to one curve of the tail-effect sweep (times in us)."""
    per_wave: int
    slope: float     # time each wave adds
    fixed: float     # the fixed part
    jump: float      # from per_wave blocks to per_wave + 1
    worst: float     # the model's largest miss

    def holds(self, step_us: float) -> bool:
        """The prediction: steps of about ``step_us``, per_wave blocks wide, on a fixed part of a few us."""
        return (abs(self.slope / step_us - 1) <= 0.10 and abs(self.jump / step_us - 1) <= 0.25
                and self.worst <= 0.25 * step_us and self.fixed <= 10)


def fit_staircase(blocks, us, per_wave: int) -> Staircase:
    """Least squares of t = fixed + waves x slope over a sweep of grid sizes (``blocks``) and times (``us``);
    the sweep must hold per_wave and per_wave + 1 blocks."""
    blocks, us = np.asarray(blocks), np.asarray(us, dtype=float)
    at = {int(b): t for b, t in zip(blocks, us)}
    if per_wave not in at or per_wave + 1 not in at:
        raise ValueError(f"expected the sweep to hold {per_wave} and {per_wave + 1} blocks, got {sorted(at)}")
    slope, fixed = np.polyfit(waves(blocks, per_wave), us, 1)
    worst = float(np.abs(us - wave_model_ms(blocks, per_wave, slope, fixed)).max())
    return Staircase(per_wave, float(slope), float(fixed), float(at[per_wave + 1] - at[per_wave]), worst)


def plot_staircases(curves: dict):
    """``curves``: label -> (blocks, us, Staircase). Points and the fitted staircase of each."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    for label, (blocks, us, fit) in curves.items():
        xs = np.arange(1, max(blocks) + 1)
        line, = ax.plot(blocks, us, "o", ms=4, label=f"{label} (W = {fit.per_wave})")
        ax.plot(xs, wave_model_ms(xs, fit.per_wave, fit.slope, fit.fixed), "-", lw=1, color=line.get_color(),
                alpha=0.7)
    ax.set_xlabel("blocks in the grid")
    ax.set_ylabel("time per launch (us)")
    ax.set_title("Every block stays 20 us: time grows in whole waves")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_wave_stamps(t_start, t_end, per_wave: int, title: str):
    """Every block's start and end stamp (ns, %globaltimer) against its index, a line at each wave."""
    import matplotlib.pyplot as plt
    a, z = np.asarray(t_start, dtype=np.int64), np.asarray(t_end, dtype=np.int64)
    t0 = a.min()
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    idx = np.arange(a.size)
    ax.scatter(idx, (a - t0) / 1e3, s=2, label="start")
    ax.scatter(idx, (z - t0) / 1e3, s=2, label="end")
    for x in range(per_wave, a.size, per_wave):
        ax.axvline(x, color="gray", lw=0.6, ls=":")
    ax.set_xlabel("blockIdx.x")
    ax.set_ylabel("time since first start (us)")
    ax.set_title(title)
    ax.legend(fontsize=8, markerscale=4)
    return fig
