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


def plot_branch(times: dict, paths=BRANCH_PATHS, title: str = ""):
    """Time against the number of distinct paths, by lane and by warp, with paths x time(1 path)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(paths, times["lane"], "o-", label="branch by lane (divergent in each warp)")
    ax.plot(paths, times["warp"], "s-", label="branch by warp (uniform in each warp)")
    ax.plot(paths, times["lane"][0] * np.array(paths), "k:", lw=1, label="paths x time(1 path)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("distinct paths")
    ax.set_ylabel("time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


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
    import matplotlib.pyplot as plt
    _, ilp, inflight, gbps = sweep_points(entries)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k, marker in zip(READ_ILPS, "os^D"):
        ax.scatter(inflight[ilp == k] / 1024, gbps[ilp == k], marker=marker, label=f"ILP {k}", zorder=3)
    xs = np.logspace(np.log10(inflight.min() / 1024 / 1.5), np.log10(inflight.max() / 1024 * 1.5), 100)
    ax.plot(xs, np.minimum(littles_law_gbps(xs * 1024, sms, latency_ns), copy_gbps), "k:", lw=1,
            label=f"min(copy, Little's law at {latency_ns:.0f} ns)")
    ax.axhline(copy_gbps, color="k", ls="--", lw=1, label="copy (this run)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("load bytes in flight per SM (KiB) = warps x 512 B x ILP")
    ax.set_ylabel("GB/s")
    ax.set_title("read bandwidth vs bytes in flight (512 MiB stream)")
    ax.legend(fontsize=8)
    return fig
