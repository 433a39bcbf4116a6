"""Chapter 1 host side: vector add (four versions in one Registry), the divergence and latency-hiding
experiments.

Everything here imports without a GPU: references, cost models, plans and grid arithmetic are plain
Python/NumPy; CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Version, config_type

SOURCE = KernelSource("simt.cu")

THREADS = 256          # threads per block for vector add and the branch experiment
WARP = 32

# --- cost models -----------------------------------------------------------------------------------


def vector_add_nbytes(n: int, itemsize: int = 4) -> int:
    """Minimum bytes of c = a + b: read a and b, write c."""
    return 3 * int(n) * itemsize


def vector_add_flops(n: int) -> int:
    return int(n)


def branch_flops(n: int, iters: int) -> int:
    """Useful FLOPs of the branch experiment: 4 chains x iters FMAs x 2 FLOP per element."""
    return 8 * int(n) * int(iters)


def read_sum_nbytes(n4: int, threads_total: int) -> int:
    """The read kernel streams n4 float4 (16 B each) and writes one float per thread."""
    return 16 * int(n4) + 4 * int(threads_total)


def bytes_in_flight_per_sm(warps_per_sm: int, ilp: int, bytes_per_load: int = 16) -> int:
    """Upper bound on load bytes outstanding on one SM: every warp has all its ILP loads in flight."""
    return int(warps_per_sm) * WARP * bytes_per_load * int(ilp)


def littles_law_gbps(inflight_bytes_per_sm: float, sms: int, latency_ns: float) -> float:
    """Bandwidth that `inflight` bytes per SM sustain at a given latency: B = bytes in flight / latency."""
    return inflight_bytes_per_sm * sms / latency_ns        # bytes per ns = GB/s


# --- references --------------------------------------------------------------------------------------


def vector_add_ref(a, b):
    """fp32 addition is correctly rounded: every correct kernel matches this bit for bit."""
    return a + b


def branch_ref(x, paths: int, iters: int, by_lane: bool):
    """Exact result of branch_by_lane / branch_by_warp with c = 1 on integer-valued x.

    Element i runs in lane i % 32 of warp i // 32 (blocks are multiples of 32 threads); it takes
    path p = (lane or warp) % paths and adds d = p + 1 to four chains x, x+1, x+2, x+3, iters times.
    """
    xp = array_module(x)
    i = xp.arange(x.shape[0], dtype=xp.int64)
    sel = (i % WARP) if by_lane else (i // WARP)
    p = sel % paths
    return 4.0 * x.astype(xp.float64) + 6.0 + 4.0 * iters * (p + 1).astype(xp.float64)


def read_sum_ref(x4sum, threads_total: int):
    """Per-thread sums of the read kernel: thread t adds float4 number t, t + T, t + 2T, ...

    ``x4sum`` holds the sum of each float4 (float64, length n4). Returns float64 of length T.
    """
    xp = array_module(x4sum)
    T = int(threads_total)
    n4 = x4sum.shape[0]
    pad = (-n4) % T
    s = xp.concatenate([x4sum.astype(xp.float64), xp.zeros(pad, dtype=xp.float64)])
    return s.reshape(-1, T).sum(axis=0)


BRANCH_ITERS = 512      # FMA steps per chain in the chapter's divergence experiment
BRANCH_X_MAX = 1000     # |x| bound of its integer-valued inputs


def branch_largest_value(x_max: int = BRANCH_X_MAX, paths: int = WARP, iters: int = BRANCH_ITERS) -> int:
    """The largest |value| the branch kernels form: four chains x + q + iters * d summed, d <= paths.
    Below 2**24 every step is an exact fp32 integer, so the reference can be compared bit for bit."""
    return 4 * (int(x_max) + 3 + int(iters) * int(paths))


def integer_valued(n: int, lo: int = -BRANCH_X_MAX, hi: int = BRANCH_X_MAX, seed: int = 0, xp=None):
    """Seeded random integers stored as fp32: FMA chains on them stay exact (every value below 2**24)."""
    if xp is None:
        import cupy as xp
    return xp.asarray(np.random.default_rng(seed).integers(lo, hi + 1, size=int(n)).astype(np.float32))


# --- grids ----------------------------------------------------------------------------


def check_threads(threads: int, most: int = 1024) -> int:
    """``threads`` if it is a positive multiple of 32 up to ``most``, else ValueError."""
    if not isinstance(threads, (int, np.integer)) or threads <= 0 or threads % WARP or threads > most:
        raise ValueError(f"threads per block must be a positive multiple of 32 up to {most}, got {threads!r}")
    return int(threads)


def grid_one_per_thread(n: int, threads: int = THREADS) -> int:
    """v0: one thread per element, so the grid grows with n."""
    return max(1, math.ceil(int(n) / threads))


def grid_stride_blocks(items: int, blocks: int, threads: int = THREADS) -> int:
    """v1/v2 with an explicit grid: ``blocks``, never more than there are items to give a thread."""
    if blocks < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks}")
    return max(1, min(int(blocks), math.ceil(int(items) / threads)))


def kernel_resources(name: str) -> dict:
    """Registers, static shared memory and local memory (spills, stack) per thread, from the driver.

    The same numbers as the ptxas report, read off the loaded kernel, so they describe exactly the
    code that runs.
    """
    fn = SOURCE.function(name)
    return {"registers": int(fn.num_regs), "smem_bytes": int(fn.shared_size_bytes),
            "local_bytes": int(fn.local_size_bytes)}


# --- vector add: one problem, four versions ---------------------------------------------------------

V3_PER_THREAD = 2     # float4 per thread per input in v3 (the .cu's V3_PER_THREAD)

# threads per block, and the grid of the grid-stride versions: None = one full wave of resident blocks
VectorAddConfig = config_type("VectorAddConfig", "threads blocks")
DEFAULT_CONFIG = VectorAddConfig(threads=THREADS, blocks=None)


@dataclasses.dataclass(frozen=True)
class VectorAddProblem:
    a: object
    b: object
    c: object
    n: int

    @property
    def out(self):
        return self.c

    def args(self):
        return (self.a, self.b, self.c, np.int64(self.n))


def vector_add_problem(a, b, c) -> VectorAddProblem:
    """c = a + b: three 1-D float32 device arrays of one length n >= 1."""
    expect_array(a, "a", dtype=np.float32, ndim=1, align=4)
    n = int(a.shape[0])
    expect_array(b, "b", dtype=np.float32, shape=(n,), align=4)
    expect_array(c, "c", dtype=np.float32, shape=(n,), align=4)
    expect_same_device(a, b, c)
    if n < 1:
        raise ValueError("a: expected at least one element, got an empty array")
    return VectorAddProblem(a, b, c, n)


def expect_16_byte_aligned(p: VectorAddProblem) -> None:
    """The float4 versions read and write 16 bytes at a time."""
    for name in ("a", "b", "c"):
        expect_array(getattr(p, name), name, dtype=np.float32, ndim=1, align=16)


def grid_tiles(n: int, threads: int = THREADS, per_thread: int = V3_PER_THREAD) -> int:
    """v3: one block per tile of threads x per_thread float4; at least one block for the scalar tail."""
    return max(1, math.ceil((int(n) // 4) / (threads * per_thread)))


def plan_v0(p: VectorAddProblem, cfg) -> list[Launch]:
    threads = check_threads(cfg.threads)
    return [Launch("vector_add_v0_one_per_thread", (grid_one_per_thread(p.n, threads), 1, 1), (threads, 1, 1),
                   p.args())]


def grid_stride_launch(kernel: str, items: int, p: VectorAddProblem, cfg) -> Launch:
    """A grid-stride launch over ``items`` work items: one full wave (persistent) or ``cfg.blocks``."""
    threads = check_threads(cfg.threads)
    if cfg.blocks is None:   # as many blocks as items need, lowered by the driver to one wave
        return Launch(kernel, (math.ceil(items / threads), 1, 1), (threads, 1, 1), p.args(), persistent=True)
    return Launch(kernel, (grid_stride_blocks(items, cfg.blocks, threads), 1, 1), (threads, 1, 1), p.args())


def plan_v1(p: VectorAddProblem, cfg) -> list[Launch]:
    return [grid_stride_launch("vector_add_v1_grid_stride", p.n, p, cfg)]


def plan_v2(p: VectorAddProblem, cfg) -> list[Launch]:
    expect_16_byte_aligned(p)
    # at least one item even when n < 4: threads 0..2 of the first block write the scalar tail
    return [grid_stride_launch("vector_add_v2_float4", max(p.n // 4, 1), p, cfg)]


def plan_v3(p: VectorAddProblem, cfg) -> list[Launch]:
    expect_16_byte_aligned(p)
    threads = check_threads(cfg.threads)
    grid = grid_tiles(p.n, threads)
    if grid >= 2**31:
        raise ValueError(f"n = {p.n} needs {grid} blocks, more than a grid holds; use v1 or v2")
    return [Launch("vector_add_v3_float4_tile", (grid, 1, 1), (threads, 1, 1), p.args())]


def vector_add_version(name, summary, plan, parent=None, snippet=None) -> Version:
    return Version(name, summary, SOURCE, plan, parent=parent, snippet=snippet,
                   default=lambda p: DEFAULT_CONFIG)


VECTOR_ADD = Registry("vector_add", vector_add_problem, [
    vector_add_version("vector_add_v0_one_per_thread", "one thread per element; the grid grows with n",
                       plan_v0, snippet="vector_add_v0"),
    vector_add_version("vector_add_v1_grid_stride",
                       "a fixed grid (one full wave of resident blocks) walks the array with a grid-stride loop",
                       plan_v1, parent="v0_one_per_thread", snippet="vector_add_v1"),
    vector_add_version("vector_add_v2_float4",
                       "16-byte float4 loads and stores in the grid-stride loop; scalar tail for n % 4",
                       plan_v2, parent="v1_grid_stride", snippet="vector_add_v2"),
    vector_add_version("vector_add_v3_float4_tile",
                       "no grid-stride: each block a tile of 2 float4 per thread and input, all loads before stores",
                       plan_v3, parent="v2_float4", snippet="vector_add_v3"),
])


# --- the chapter's ladder ---------------------------------------------------------------------------

CHAPTER_N = 1 << 28
ODD_SIZES = ((1,), (37,), (199,), ((1 << 20) + 3,))   # a tail only, partial blocks, n % 4 != 0


def make_case(shape, dtype, rng, xp=None):
    """Fresh standard-normal a, b (float32) and an output c: a utils.ladder.Case (NumPy with xp=numpy)."""
    from utils.ladder import Case
    if xp is np:
        a, b = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
        return Case((a, b, np.empty(shape, dtype=np.float32)))
    import cupy

    from utils.arrays import random_normal
    # drawn on the GPU (2 x 1 GiB at the chapter's size), from seeds the ladder's generator decides
    a, b = (random_normal(shape, "float32", seed=int(rng.integers(2**31)))[0] for _ in range(2))
    return Case((a, b, cupy.empty(shape, dtype=np.float32)))


def peers() -> dict:
    """cupy.add and (where torch is installed) torch.add, writing into the ladder's own output."""
    def cupy_peer(case):
        import cupy
        a, b, c = case.args
        return lambda: cupy.add(a, b, out=c)

    out = {"cupy.add": cupy_peer}
    try:
        import torch
    except ImportError:
        return out

    def torch_peer(case):
        from utils.arrays import as_torch
        a, b, c = (as_torch(t) for t in case.args)

        def run():
            torch.add(a, b, out=c)
            return case.args[2]
        return run

    out["torch.add"] = torch_peer
    return out


def ladder(rec, shapes=((CHAPTER_N,),), seed: int = 1):
    """Chapter 1's ladder: every version checked bit for bit (fp32 addition is correctly rounded) on
    ODD_SIZES with poisoned outputs, timed on ``shapes`` beside cupy.add, torch.add and the 1 GiB copy."""
    from utils.ladder import Ladder
    return Ladder(rec, VECTOR_ADD, shapes=shapes, dtypes=["float32"], make=make_case,
                  reference=lambda case: vector_add_ref(*case.args[:2]),
                  nbytes=lambda shape, dtype: vector_add_nbytes(shape[0]), flops=None,
                  odd_shapes=ODD_SIZES, peers=peers(), tol={"float32": 0.0}, ceiling="copy", seed=seed)


def copy_vs_datasheet(copy_gbps: float, predicted: float = 0.87) -> float | None:
    """The copy ceiling as a fraction of the datasheet's HBM bandwidth, printed beside the prediction;
    None (and a line saying so) on a GPU the datasheet table does not know."""
    from utils.hardware import datasheet
    try:
        sheet = datasheet()["hbm_tbps"] * 1e3
    except KeyError:
        print(f"copy: {copy_gbps:,.0f} GB/s (read + write); no datasheet figure for this GPU")
        return None
    frac = copy_gbps / sheet
    print(f"copy: {copy_gbps:,.0f} GB/s (read + write) = {frac:.0%} of the datasheet's {sheet:,.0f} GB/s "
          f"(predicted ~{predicted:.0%}: ratio {frac / predicted:.2f})")
    return frac


def peer_table(entries, copy_gbps: float, predicted: dict):
    """The peers' times, bandwidths and fractions of the copy beside the fractions the text predicted."""
    from utils.table import Table
    return Table(["peer", "ms", "GB/s", "of copy", "predicted"],
                 [[e["impl"], f"{e['ms']:.3f}", f"{e['metric']:,.0f}", f"{e['metric'] / copy_gbps:.1%}",
                   f"{predicted[e['impl']]:.0%}"] for e in entries])


def progress(items, desc: str):
    """``items`` behind a tqdm progress bar where tqdm is installed (every GPU host), else as they are."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc)


BLOCK_SIZES = (128, 256, 512, 1024)     # threads per block in v0's block-size experiment


def v0_impl(threads: int) -> str:
    """The record's name of v0 with ``threads`` per block (the ladder's own entry at THREADS)."""
    return "v0_one_per_thread" if threads == THREADS else f"v0_one_per_thread[threads={threads}]"


def block_size_sweep(va, shape, sizes=BLOCK_SIZES):
    """Time v0 with each block size of ``sizes`` (THREADS is the ladder's own run), recorded as
    ``v0_one_per_thread[threads=T]``. Returns ({threads: fraction of copy}, the table of them)."""
    from utils.table import Table
    for threads in progress([t for t in sizes if t != THREADS], desc="v0 block size"):
        va.time("v0_one_per_thread", config=VectorAddConfig(threads=threads, blocks=None), impl=v0_impl(threads))
    frac = {t: va.fraction_of_copy(v0_impl(t), shape, "float32") for t in sizes}
    return frac, Table(["threads per block", "blocks", "of copy"],
                       [[t, f"{shape[0] // t:,}", f"{f:.0%}"] for t, f in frac.items()])


def resource_table():
    """Registers, static shared memory and local memory per thread of every vector-add version."""
    from utils.table import Table
    rows = []
    for v in VECTOR_ADD.values():
        res = kernel_resources(v.name)
        rows.append([v.name, res["registers"], res["smem_bytes"], res["local_bytes"]])
    return Table(["kernel", "registers per thread", "static smem (B)", "local memory (B)"], rows)


def residency(sms: int) -> dict:
    """Per version label: (the book's occupancy formula, the driver's resident blocks per SM) for blocks
    of THREADS threads, each printed with the warps per SM and one wave's size."""
    from utils.occupancy import from_function
    from utils.version import driver_blocks_per_sm
    out = {}
    for v in VECTOR_ADD.values():
        fn = SOURCE.function(v.name)
        occ = from_function(fn, THREADS)                     # the book's one occupancy formula
        driver = driver_blocks_per_sm(fn, THREADS)           # cudaOccupancyMaxActiveBlocksPerMultiprocessor
        out[v.label] = (occ, driver)
        print(f"{v.label:>18}: {fn.num_regs} registers/thread -> driver: {driver} resident blocks of {THREADS} "
              f"threads = {driver * THREADS // WARP} warps per SM; formula: {occ.blocks} (limited by "
              f"{occ.limiter}); one wave = {driver * sms} blocks")
    return out


def print_ptx_memory_ops() -> None:
    """Each version's global loads and stores in the PTX, with counts (the unrolled main loop, the
    remainder loop and the tail together). An aside: where there is no PTX, one line says why."""
    try:
        from utils.build import ptx
        ptx_text = ptx(SOURCE)
        for v in VECTOR_ADD.values():
            ops = ptx_memory_ops(ptx_text, v.name)
            counts = {op: ops.count(op) for op in dict.fromkeys(ops)}
            print(f"{v.label:>18}: " + ", ".join(f"{op} x{k}" for op, k in counts.items()))
    except Exception as e:  # noqa: BLE001 - the PTX listing is an aside, never a blocker
        print(f"PTX listing not available here ({type(e).__name__}: {e})")


GRID_SWEEP = ("v1_grid_stride", "v2_float4")    # the grid-stride versions, whose grid is free


def grid_impl(label: str, blocks_per_sm: int) -> str:
    """The record's name of a grid-stride version launched with ``blocks_per_sm`` blocks on every SM."""
    return f"{label}[blocks_per_sm={blocks_per_sm}]"


def grid_sizes(resident_blocks: int) -> list[int]:
    """Blocks per SM the grid sweep tries: 1, 2, 4, one full wave and two."""
    return sorted({1, 2, 4, int(resident_blocks), 2 * int(resident_blocks)})


def grid_sweep(va, resident: dict, sms: int, shape) -> dict:
    """Time v1 and v2 (THREADS per block) at each of :func:`grid_sizes` blocks per SM, recorded as
    ``label[blocks_per_sm=k]``; ``resident`` gives each version's blocks per SM in one wave.
    Returns {label: {blocks per SM: fraction of copy}}."""
    ks = {label: grid_sizes(resident[label]) for label in GRID_SWEEP}
    for label in GRID_SWEEP:
        for k in progress(ks[label], desc=label):
            va.time(label, config=VectorAddConfig(threads=THREADS, blocks=k * sms), impl=grid_impl(label, k))
    return {label: {k: va.fraction_of_copy(grid_impl(label, k), shape, "float32") for k in ks[label]}
            for label in GRID_SWEEP}


def grid_sweep_table(g: dict):
    """Blocks per SM down, one column per version, fractions of copy (blank where not swept)."""
    from utils.table import Table
    ks = sorted(set().union(*g.values()))
    return Table(["blocks per SM", *g], [[k, *[f"{g[lab][k]:.0%}" if k in g[lab] else "" for lab in g]]
                                          for k in ks])


def plot_grid_sweep(g: dict, title: str = "vector add, n = 2^28: grid size"):
    """Percent of copy against blocks per SM (log2), one line per version, the copy as a reference."""
    from utils.plot import ceiling_line, figure, version_style
    fig, axes = figure(1, 1, height=3.2)
    ax = axes[0, 0]
    order = list(VECTOR_ADD)
    for label, frac in g.items():
        ax.plot(list(frac), [100 * f for f in frac.values()], label=label, **version_style(order.index(label)))
    ceiling_line(ax, 100, "copy (this run)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set().union(*g.values())), [str(k) for k in sorted(set().union(*g.values()))])
    ax.set_xlabel("blocks per SM (256 threads each)")
    ax.set_ylabel("% of copy bandwidth")
    ax.set_ylim(0, 115)
    ax.set_title(title)
    ax.legend(loc="lower right")
    return fig


# --- branch divergence -------------------------------------------------------------------------------

BRANCH_KERNELS = {"lane": "branch_by_lane", "warp": "branch_by_warp"}


def launch_branch(by: str, x, y, *, paths: int, iters: int, c: float = 1.0, threads: int = THREADS):
    """y = branch work on x, with ``paths`` branches chosen by the lane ('lane') or the warp ('warp')."""
    if by not in BRANCH_KERNELS:
        raise ValueError(f"by must be 'lane' or 'warp', got {by!r}")
    if not 1 <= int(paths) <= WARP:
        raise ValueError(f"paths must be within 1..32, got {paths}")
    if int(iters) < 0:
        raise ValueError(f"iters must be non-negative, got {iters}")
    threads = check_threads(threads)
    expect_array(x, "x", dtype=np.float32, ndim=1, align=4)
    n = x.shape[0]
    expect_array(y, "y", dtype=np.float32, shape=(n,), align=4)
    if n >= 2**31:
        raise ValueError(f"x has {n} elements; the branch kernels index with int32 (< 2**31)")
    if n == 0:
        return y
    SOURCE.function(BRANCH_KERNELS[by])((grid_one_per_thread(n, threads),), (threads,),
                                        (x, y, np.int32(n), np.int32(paths), np.int32(iters),
                                         np.float32(c)))
    return y


def active_masks(paths: int) -> np.ndarray:
    """One warp, ``paths`` branches by lane: the __activemask() each lane saw inside its branch."""
    if not 1 <= int(paths) <= WARP:
        raise ValueError(f"paths must be within 1..32, got {paths}")
    import cupy
    m = cupy.zeros(WARP, dtype=cupy.uint32)
    SOURCE.function("branch_active_mask")((1,), (WARP,), (m, np.int32(paths)))
    return m.get()


def expected_masks(paths: int) -> np.ndarray:
    """Lanes that share a branch when they all run together: {l : l % paths == lane % paths}."""
    lanes = np.arange(WARP)
    out = np.zeros(WARP, dtype=np.uint32)
    for lane in lanes:
        same = lanes[lanes % paths == lane % paths]
        out[lane] = np.uint32(sum(1 << int(s) for s in same))
    return out


BRANCH_PATHS = (1, 2, 4, 8, 16, 32)


def branch_sweep(rec, n: int, paths=BRANCH_PATHS, iters: int = BRANCH_ITERS, seed: int = 3) -> dict:
    """Time the branch experiment by lane and by warp for every path count on ``n`` seeded integer-valued
    inputs, each run checked bit for bit (poisoned first) and recorded as op ``branch`` (shape (n, paths)).
    Returns {"lane": ms per path count, "warp": ...} as arrays in the order of ``paths``."""
    from utils.check import assert_close, poisoned
    x = integer_valued(n, seed=seed)
    y = poisoned(n, np.float32)
    times = {}
    for by in ("lane", "warp"):
        for p in paths:
            want = branch_ref(x, p, iters, by == "lane")

            def run(by=by, p=p):
                launch_branch(by, x, y, paths=p, iters=iters)

            def check(by=by, p=p, want=want):
                assert_close(y, want, dtype="exact", name=f"branch_by_{by} paths={p} (seed {seed})")
            y.fill(np.nan)
            run()
            check()
            rec.time("branch", f"by_{by}", run, dtype="float32", shape=(n, p), flops=branch_flops(n, iters),
                     check=check, target_ms=100)
        times[by] = np.array([rec.get("branch", f"by_{by}", shape=[n, p])["ms"] for p in paths])
    return times


def plain_log_ticks(axis) -> None:
    """Ticks of a log axis at 1, 2, 5 x 10^k, labelled as plain numbers (0.2, 1, 5) rather than powers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_branch(times: dict, paths=BRANCH_PATHS, title: str = ""):
    """Time against the number of distinct paths, by lane and by warp, with paths x time(1 path)."""
    from utils.plot import figure, version_style
    fig, axes = figure(1, 1, height=3.2)
    ax = axes[0, 0]
    ax.plot(paths, times["lane"], label="branch by lane (divergent in each warp)", **version_style(0))
    ax.plot(paths, times["warp"], label="branch by warp (uniform in each warp)", **version_style(1))
    ax.plot(paths, times["lane"][0] * np.array(paths), "k:", lw=1, label="paths x time(1 path)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(paths), [str(p) for p in paths])
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("distinct paths")
    ax.set_ylabel("time (ms)")
    ax.set_title(title)
    ax.legend()
    return fig


def print_branch(rec, times: dict, n: int, paths=BRANCH_PATHS) -> None:
    """The branch sweep read out: one path's TFLOP/s against the datasheet's FP32 peak (predicted 80%),
    time over time(1 path) by lane and by warp, and the two ratios the text predicts (32x and 1x)."""
    from utils.hardware import datasheet
    e1 = rec.get("branch", "by_lane", shape=[n, paths[0]])
    try:
        fp32_peak = datasheet()["fp32"]
        print(f"1 path: {e1['metric']:.1f} TFLOP/s = {e1['metric'] / fp32_peak:.0%} of the datasheet fp32 peak "
              f"(predicted 80%: ratio {e1['metric'] / fp32_peak / 0.80:.2f})")
    except KeyError:
        print(f"1 path: {e1['metric']:.1f} TFLOP/s")
    for by in ("lane", "warp"):
        r = times[by] / times[by][0]
        print(f"by {by}: time / time(1 path) = " + ", ".join(f"{x:.2f}" for x in r) + f"  for paths = {tuple(paths)}")
    lane = times["lane"][-1] / times["lane"][0]
    print(f"By lane, {paths[-1]} paths cost {lane:.1f}x one path (predicted {paths[-1]}x: ratio "
          f"{lane / paths[-1]:.2f}); by warp, the slowest point is {times['warp'].max() / times['warp'].min():.2f}x "
          f"the fastest (predicted 1x).")


def print_branch_sass(kernel: str = "branch_by_lane") -> None:
    """The control flow of ``kernel``'s SASS between its first BSSY and its last BSYNC (FFMA runs folded);
    where there is no SASS (cuobjdump comes with the CUDA toolkit), one line describing it."""
    try:
        from utils.build import sass
        lines = sass_summary(sass(SOURCE, kernel))
        first = next(i for i, s in enumerate(lines) if s.startswith("BSSY"))
        last = max(i for i, s in enumerate(lines) if s.startswith("BSYNC"))
        print("\n".join(lines[first:last + 2]))
    except Exception as e:  # noqa: BLE001 - needs cuobjdump (CUDA toolkit): an aside, never a blocker
        print(f"SASS not available here ({type(e).__name__}); the loop is BSSY, a predicated BRA around "
              "the FFMA body, BSYNC")


# --- latency hiding: the read stream ----------------------------------------------------------------

READ_ILPS = (1, 2, 4, 8)
READ_WARPS = (2, 4, 8, 16, 32, 64)      # resident warps per SM in the sweep
READ_MAX_THREADS = 256                  # the kernels' __launch_bounds__


def read_config(warps_per_sm: int) -> tuple[int, int]:
    """(threads per block, blocks per SM) giving ``warps_per_sm`` warps on each SM."""
    if warps_per_sm < 1:
        raise ValueError(f"warps_per_sm must be at least 1, got {warps_per_sm}")
    threads = min(READ_MAX_THREADS, WARP * int(warps_per_sm))
    if (WARP * warps_per_sm) % threads:
        raise ValueError(f"{warps_per_sm} warps per SM is not a whole number of {threads}-thread blocks")
    return threads, WARP * int(warps_per_sm) // threads


def read_kernel(ilp: int) -> str:
    if ilp not in READ_ILPS:
        raise ValueError(f"ilp must be one of {READ_ILPS}, got {ilp!r}")
    return f"read_sum_ilp{ilp}"


def launch_read_sum(x4, out, smid, *, ilp: int, threads: int, blocks: int):
    """Stream x4 ([n4, 4] fp32, 16-byte aligned) with ``blocks`` x ``threads`` threads, ILP loads each.

    out: [blocks * threads] fp32, one partial sum per thread. smid: [blocks] int32, the SM of each block.
    """
    name = read_kernel(ilp)
    threads = check_threads(threads, READ_MAX_THREADS)
    if int(blocks) < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks}")
    expect_array(x4, "x4", dtype=np.float32, ndim=2, shape=(None, 4), align=16)
    expect_array(out, "out", dtype=np.float32, shape=(int(blocks) * threads,), align=4)
    expect_array(smid, "smid", dtype=np.int32, shape=(int(blocks),), align=4)
    SOURCE.function(name)((int(blocks),), (threads,), (x4, np.int64(x4.shape[0]), out, smid))
    return out


READ_N4 = 1 << 25                       # float4 in the read stream: 512 MiB, 8x the H200's L2


@dataclasses.dataclass(frozen=True)
class LatencySweep:
    entries: list       # the record's latency_sweep entries: shape (n4, warps per SM, ILP), GB/s
    skipped: list       # (warps per SM, ILP) the registers do not allow
    uneven: list        # (distinct SMs, fewest blocks, most, wanted) of every launch not spread evenly


def latency_configs(fits) -> tuple[list, list]:
    """(warps, ILP, threads, blocks per SM) of the sweep's points: those ``fits(ilp, threads)`` (the
    driver's resident blocks per SM) allows, and those it does not."""
    configs, skipped = [], []
    for ilp in READ_ILPS:
        for w in READ_WARPS:
            threads, bps = read_config(w)
            (configs if bps <= fits(ilp, threads) else skipped).append((w, ilp, threads, bps))
    return configs, skipped


def latency_sweep(rec, sms: int, n4: int = READ_N4, seed: int = 4) -> LatencySweep:
    """The read stream at every (warps per SM, ILP) the registers allow: each launch exactly
    SMs x blocks per SM, checked against float64 per-thread sums, recorded as op ``latency_sweep``
    (impl ``read_ilp<k>``, shape (n4, warps, ILP)); each block records its SM, to confirm the placement."""
    import cupy

    from utils.arrays import random_normal
    from utils.check import assert_close, poisoned
    from utils.version import driver_blocks_per_sm
    x4, _ = random_normal((n4, 4), "float32", seed=seed)
    x4sum = x4.astype(cupy.float64).sum(axis=1)              # per-float4 sums for the reference
    configs, skipped = latency_configs(
        lambda ilp, threads: driver_blocks_per_sm(SOURCE.function(read_kernel(ilp)), threads))
    print("registers per thread: " + ", ".join(f"ILP {i}: {kernel_resources(read_kernel(i))['registers']}"
                                              for i in READ_ILPS))
    print(f"{len(configs)} configurations; skipped (registers do not allow that many warps): "
          + (", ".join(f"{w} warps x ILP {i}" for w, i, _, _ in skipped) or "none"))
    placement = []
    for w, ilp, threads, bps in progress(configs, desc="latency sweep"):
        blocks = bps * sms
        out = poisoned(blocks * threads, np.float32)
        smid = cupy.full(blocks, -1, dtype=cupy.int32)
        want = read_sum_ref(x4sum, blocks * threads)

        def run(ilp=ilp, threads=threads, blocks=blocks, out=out, smid=smid):
            launch_read_sum(x4, out, smid, ilp=ilp, threads=threads, blocks=blocks)

        def check(out=out, want=want, w=w, ilp=ilp):
            assert_close(out, want, dtype="float32", name=f"read_sum {w} warps ILP {ilp}")
        run()
        check()
        _, per_sm = np.unique(smid.get(), return_counts=True)
        placement.append((len(per_sm), int(per_sm.min()), int(per_sm.max()), bps))
        rec.time("latency_sweep", f"read_ilp{ilp}", run, dtype="float32", shape=(n4, w, ilp),
                 nbytes=read_sum_nbytes(n4, blocks * threads), check=check, target_ms=100)
    uneven = [p for p in placement if not (p[0] == sms and p[1] == p[2] == p[3])]
    print(f"block placement (distinct SMs, fewest, most, wanted) where uneven: {uneven or 'none'}")
    return LatencySweep(rec.find("latency_sweep"), [(w, i) for w, i, _, _ in skipped], uneven)


# --- reading the compiler's output --------------------------------------------------------------------


def ptx_entry(ptx_text: str, kernel: str) -> str:
    """The body of one ``.entry`` in a PTX listing."""
    start = ptx_text.find(f".entry {kernel}(")
    if start < 0:
        raise KeyError(f"no .entry {kernel} in the PTX")
    end = ptx_text.find("\n}", start)
    return ptx_text[start:end + 2]


def ptx_memory_ops(ptx_text: str, kernel: str) -> list[str]:
    """The global loads and stores of one kernel, as PTX instructions (operands dropped)."""
    ops = []
    for line in ptx_entry(ptx_text, kernel).splitlines():
        tok = line.strip().split()
        if tok and (tok[0].startswith("ld.global") or tok[0].startswith("st.global")):
            ops.append(tok[0])
    return ops


def sass_summary(sass_text: str, keep=("BSSY", "BSYNC", "BRA", "WARPSYNC", "FFMA", "EXIT")) -> list[str]:
    """Instructions of a SASS listing whose opcode is in ``keep``, with runs of one opcode folded.

    Predicates stay (``@P2 BRA``); operands are dropped except a branch's or barrier's target.
    """
    import re
    out: list[str] = []
    pat = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
    for line in sass_text.splitlines():
        m = pat.search(line)
        if not m:
            continue
        pred, op, args = (m.group(1) or "").strip(), m.group(2), m.group(3).strip()
        if op.split(".")[0] not in keep:
            continue
        text = " ".join(t for t in (pred, op) if t)
        if op.split(".")[0] in ("BSSY", "BSYNC", "BRA"):
            text += " " + args
        if out and out[-1].split(" x")[0] == text and op.startswith("FFMA"):
            head, _, n = out[-1].partition(" x")
            out[-1] = f"{head} x{int(n or 1) + 1}"
        else:
            out.append(text)
    return out


# --- reading the latency sweep ----------------------------------------------------------------------
# The record's latency_sweep entries have shape (n4, warps per SM, ILP) and metric GB/s.

def sweep_points(entries) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(warps per SM, ILP, load bytes in flight per SM, GB/s) of every point of the latency sweep."""
    if not entries:
        raise ValueError("expected latency_sweep entries, got none")
    warps = np.array([int(e["shape"][1]) for e in entries])
    ilp = np.array([int(e["shape"][2]) for e in entries])
    inflight = np.array([bytes_in_flight_per_sm(w, i) for w, i in zip(warps, ilp)], dtype=float)
    return warps, ilp, inflight, np.array([float(e["metric"]) for e in entries])


@dataclasses.dataclass(frozen=True)
class LatencyFit:
    latency_ns: float   # median of SMs x bytes in flight / bandwidth over the points below half of copy
    knee_bytes: float   # load bytes in flight per SM that sustain the copy at that latency (Little's law)
    points: int         # how many points the median took


def fit_latency(entries, sms: int, copy_gbps: float) -> LatencyFit:
    """Little's law on the points far below the ceiling: latency = bytes in flight / bandwidth."""
    _, _, inflight, gbps = sweep_points(entries)
    low = gbps < 0.5 * copy_gbps
    if not low.any():
        raise ValueError("no point of the sweep is below half of the copy: nothing to read a latency from")
    lat = float(np.median(sms * inflight[low] / gbps[low]))
    return LatencyFit(lat, copy_gbps * lat / sms, int(low.sum()))


def ilp_over_warps(entries) -> list[float]:
    """Bandwidth of (w warps, ILP k) over (w * k warps, ILP 1): the same bytes in flight from ILP
    instead of warps, for every pair the sweep has."""
    warps, ilp, _, gbps = sweep_points(entries)
    by = {(int(w), int(i)): g for w, i, g in zip(warps, ilp, gbps)}
    return [g / by[w * i, 1] for (w, i), g in by.items() if i > 1 and (w * i, 1) in by]


def swept_gbps(entries, inflight_bytes: float) -> float:
    """The read stream's best bandwidth at ``inflight_bytes`` per SM, interpolated in log2 of the bytes."""
    _, _, inflight, gbps = sweep_points(entries)
    xs = np.array(sorted(set(inflight)))
    ys = np.array([gbps[inflight == x].max() for x in xs])
    return float(np.interp(np.log2(inflight_bytes), np.log2(xs), ys))


def plot_latency_sweep(entries, sms: int, copy_gbps: float, latency_ns: float):
    """Bandwidth against load bytes in flight per SM, one marker per ILP, with min(copy, Little's law)."""
    from matplotlib.ticker import FuncFormatter

    from utils.plot import ceiling_line, figure, version_style
    _, ilp, inflight, gbps = sweep_points(entries)
    fig, axes = figure(1, 1, height=3.8)
    ax = axes[0, 0]
    for i, k in enumerate(READ_ILPS):
        ax.scatter(inflight[ilp == k] / 1024, gbps[ilp == k], label=f"ILP {k}", zorder=3, **version_style(i))
    xs = np.logspace(np.log10(inflight.min() / 1024 / 1.5), np.log10(inflight.max() / 1024 * 1.5), 100)
    ax.plot(xs, np.minimum(littles_law_gbps(xs * 1024, sms, latency_ns), copy_gbps), "k:", lw=1,
            label=f"min(copy, Little's law at {latency_ns:.0f} ns)")
    ceiling_line(ax, copy_gbps, "copy (this run)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("load KiB in flight per SM = warps x 512 B x ILP")
    ax.set_ylabel("GB/s")
    ax.set_ylim(0, 1.15 * max(copy_gbps, gbps.max()))
    ax.set_title("read bandwidth vs bytes in flight (512 MiB stream)")
    ax.legend(loc="lower right")
    return fig


@dataclasses.dataclass(frozen=True)
class SweepReading:
    best_warps: int       # the fastest point of the sweep: warps per SM
    best_ilp: int         # and its ILP
    pairs: list           # bandwidth of (w warps, ILP k) over (w * k warps, ILP 1), every pair swept
    ilp8_16w: float       # ILP 8 with 16 warps per SM, fraction of copy (NaN where not swept)


def read_latency_sweep(entries, fit: LatencyFit, copy_gbps: float, predicted_ns: float = 650) -> SweepReading:
    """The sweep read out, printed: the implied latency against the prediction, the knee, the fastest
    point, and how ILP compares with warps at equal bytes in flight."""
    print(f"implied memory latency (median over {fit.points} points below half of copy): {fit.latency_ns:.0f} ns "
          f"(predicted {predicted_ns:.0f} ns: ratio {fit.latency_ns / predicted_ns:.2f})")
    print(f"Little's law knee: copy bandwidth x latency / SMs = {fit.knee_bytes / 1024:.1f} KiB in flight per SM")
    best = max(entries, key=lambda e: e["metric"])
    print(f"best point: {best['shape'][1]} warps x ILP {best['shape'][2]}: {best['metric']:,.0f} GB/s "
          f"= {best['metric'] / copy_gbps:.0%} of copy")
    pairs = ilp_over_warps(entries)
    if pairs:
        print(f"same bytes in flight from ILP instead of warps: bandwidth ratio {min(pairs):.2f} .. "
              f"{max(pairs):.2f} over {len(pairs)} pairs (1.00 = interchangeable)")
    ilp8_16 = [e["metric"] / copy_gbps for e in entries if e["shape"][1] == 16 and e["shape"][2] == 8]
    return SweepReading(int(best["shape"][1]), int(best["shape"][2]), pairs,
                        ilp8_16[0] if ilp8_16 else float("nan"))


def pointer_chase_ns(gpu: str | None = None, root=None, min_ws_bytes: int = 256 << 20) -> float | None:
    """Chapter 4's pointer chase on this GPU, from its stored record: the median ns per load over working
    sets of ``min_ws_bytes`` and more (HBM, unloaded); None where chapter 4 has no such entry."""
    from utils.gpu import gpu_slug
    from utils.paths import REPO
    from utils.record import load
    chase = [e for e in load(gpu or gpu_slug(), "04-memory-hierarchy", root=root or REPO / "results")
             if e["op"] == "pointer_chase" and e.get("ws_bytes", 0) >= min_ws_bytes]
    return float(np.median([e["ns_per_load"] for e in chase])) if chase else None


@dataclasses.dataclass(frozen=True)
class KneeView:
    table: object         # a utils.table.Table, one row per version
    inflight: dict        # label -> load bytes in flight per SM (every warp's loads out at once: a bound)
    swept: dict           # label -> the read sweep's GB/s at those bytes in flight
    measured: dict        # label -> the version's measured GB/s


def versions_at_the_knee(rec, resident: dict, per_thread: dict, entries, sms: int, copy_gbps: float,
                         latency_ns: float, knee_bytes: float) -> KneeView:
    """Each vector-add version's bytes in flight per SM (resident blocks x THREADS x ``per_thread`` load
    bytes) beside what Little's law at the unloaded latency and the read sweep give for them, and what
    it measured. Prints v0's row against the knee."""
    from utils.table import Table
    rows, inflight, swept, meas = [], {}, {}, {}
    for label, bpt in per_thread.items():
        warps = resident[label] * THREADS // WARP
        inflight[label] = warps * WARP * bpt
        pred = min(copy_gbps, littles_law_gbps(inflight[label], sms, latency_ns))
        swept[label] = swept_gbps(entries, inflight[label])
        meas[label] = rec.get("vector_add", label)["metric"]
        rows.append([label, warps, bpt, f"{inflight[label] / 1024:.0f}", f"{pred / copy_gbps:.0%}",
                     f"{swept[label] / copy_gbps:.0%}", f"{meas[label] / copy_gbps:.0%}"])
    v0 = "v0_one_per_thread"
    if v0 in per_thread:
        print(f"v0: {inflight[v0] / 1024:.0f} KiB in flight per SM (knee {knee_bytes / 1024:.0f} KiB); the read "
              f"sweep at that point reaches {swept[v0] / copy_gbps:.0%} of copy; measured "
              + ", ".join(f"{lab.split('_')[0]} {meas[lab] / copy_gbps:.0%}" for lab in (v0, "v2_float4")
                          if lab in meas))
    table = Table(["version", "warps per SM", "load bytes in flight per thread", "KiB in flight per SM",
                   "Little's law at the unloaded latency, of copy", "read sweep at those bytes in flight, of copy",
                   "measured, of copy"], rows)
    return KneeView(table, inflight, swept, meas)
