"""Sum of a 1-D array (chapter 5): the reference, the cost model, error bounds and the versions.

``out[0] = x[0] + ... + x[n-1]`` for a C-contiguous 1-D ``x`` of float32 (every version) or bfloat16
(v4-v6), accumulated and returned in float32 into a float32 array ``out`` of shape (1,).

Correctness is judged against a float64 sum with a bound on the rounding error of the version's own
order of additions (:func:`error_bound`), not a fixed tolerance: a sum of 2**28 terms in fp32 carries
an error that depends on how the additions are arranged.

Every version is a :class:`utils.version.Version` of :data:`VERSIONS` (op ``reduce``); v6 needs thread
block clusters and lives in its own file (``reduction_cluster.cu``), so ``reduction.cu`` builds for sm_80.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.build import KernelSource
from utils.check import CheckFailed
from utils.ops import expect_array
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

SOURCE = KernelSource("reduction.cu")
CLUSTER_SOURCE = KernelSource("reduction_cluster.cu", requires=("clusters",))

THREADS = 256            # block size of every kernel (include/reduction.cuh)
UNROLL = 4               # 16-byte loads per thread per iteration in v4-v6
BLOCKS_PER_SM = 8        # v4-v6 default grid: 8 blocks of 256 threads per SM (32 registers: all fit at once)
CLUSTER_SIZES = (2, 4, 8)
MAX_GRID_X = 2**31 - 1
MAX_ELEMENTS = 2**40
U32 = 2.0 ** -24         # unit roundoff of fp32 (round to nearest)

# Tunable configs, with field names: the grid of v4/v5, and the cluster size and grid of v6.
VecGrid = config_type("VecGrid", "blocks_per_sm")
ClusterGrid = config_type("ClusterGrid", "cluster blocks_per_sm")
VEC_CONFIGS = tuple(VecGrid(b) for b in (1, 2, 4, 8, 16, 32))
CLUSTER_CONFIGS = tuple(ClusterGrid(c, b) for c in CLUSTER_SIZES for b in (1, BLOCKS_PER_SM, 32))


def per16(dtype) -> int:
    """Elements per 16-byte load: 4 fp32 or 8 bf16."""
    return 16 // np.dtype(dtype).itemsize


# --- reference and cost model ----------------------------------------------------------------------

def reference(x):
    """(sum, sum of |x|) in float64, on the device where ``x`` lives (bf16 widened exactly first)."""
    from utils.arrays import xp
    m = xp(x)
    x64 = (x if x.dtype == np.float32 else x.astype(np.float32)).astype(m.float64)   # bf16 -> fp32 is exact
    return float(x64.sum()), float(m.abs(x64).sum())


def nbytes(n: int, itemsize: int = 4) -> int:
    """Minimum bytes moved: every element read once (the 4-byte result is left out)."""
    return int(n) * int(itemsize)


def flops(n: int) -> int:
    return max(int(n) - 1, 0)


# --- the problem -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SumProblem:
    """A validated sum: the input ``x`` (n elements of ``dtype``), the output ``out`` (float32, (1,)), and
    the SM count the grids of v4-v6 are sized for."""
    x: Any
    out: Any
    n: int
    dtype: np.dtype
    sms: int


def problem(x, out, *, sms: int | None = None) -> SumProblem:
    """Validate ``x`` (1-D, C-contiguous, 16-byte aligned, float32 or bfloat16, 1 <= n < 2**40) and ``out``
    (float32, shape (1,)). ``sms``: the SM count to plan for (default: the device's, or the H200's on a CPU)."""
    expect_array(x, "x", dtype=(np.float32, bf16()), ndim=1)
    n = int(x.shape[0])
    if n < 1:
        raise ValueError(f"x: expected at least one element, got shape {tuple(x.shape)}")
    if n >= MAX_ELEMENTS:
        raise ValueError(f"x: expected fewer than 2**40 elements, got {n}")
    expect_array(out, "out", dtype=np.float32, shape=(1,), align=4)
    if sms is None:
        from utils.hardware import facts
        sms = facts().sms
    return SumProblem(x, out, n, np.dtype(x.dtype), int(sms))


def fp32_only(p: SumProblem, name: str) -> None:
    if p.dtype != np.float32:
        raise Unsupported(f"{name} sums float32 only, got {p.dtype.name}; v4-v6 take bfloat16")


def one_element_per_thread(p: SumProblem, name: str) -> None:
    if ceil_div(p.n, THREADS) > MAX_GRID_X:
        raise Unsupported(f"{name}: {p.n} elements need more than {MAX_GRID_X} blocks of {THREADS}; "
                          "v4-v6 stride over any size")


# --- launch geometry -------------------------------------------------------------------------------

def tree_passes(n: int) -> list[int]:
    """Grid sizes of the launches v1-v3 need: each pass turns m values into ceil(m / 256) partials."""
    out, m = [], int(n)
    while True:
        g = ceil_div(m, THREADS)
        out.append(g)
        if g == 1:
            return out
        m = g


def vec_grid(n: int, dtype, sms: int, blocks_per_sm: int = BLOCKS_PER_SM, cluster: int = 1) -> int:
    """Blocks of v4-v6: enough for one 16-byte chunk per thread, at most ``blocks_per_sm`` per SM,
    rounded up to a whole number of clusters."""
    chunks = max(1, int(n) // per16(dtype))
    g = max(1, min(int(sms) * int(blocks_per_sm), ceil_div(chunks, THREADS)))
    return ceil_div(g, cluster) * cluster


def suffix(dtype) -> str:
    """Kernel name suffix of a dtype: '' for float32, '_bf16' for bfloat16."""
    return "" if np.dtype(dtype) == np.float32 else "_bf16"


# --- plans -----------------------------------------------------------------------------------------

def plan_v0(p: SumProblem, config=None) -> list[Launch]:
    """v0: zero out, then n atomicAdds on out[0]."""
    fp32_only(p, "v0_atomic")
    one_element_per_thread(p, "v0_atomic")
    return [Launch("reduce_v0_zero", (1, 1, 1), (1, 1, 1), (p.out,)),
            Launch("reduce_v0_atomic", (ceil_div(p.n, THREADS), 1, 1), (THREADS, 1, 1),
                   (p.x, p.out, np.int64(p.n)))]


def tree_plan(kernel: str):
    """v1-v3: one element per thread, one partial per block; launched again on the partials until one
    value is left, ping-ponging between two scratch buffers."""
    def plan(p: SumProblem, config=None) -> list[Launch]:
        fp32_only(p, kernel)
        one_element_per_thread(p, kernel)
        grids = tree_passes(p.n)
        bufs = (Workspace((grids[0],)), Workspace((max(1, ceil_div(grids[0], THREADS)),)))
        launches, src, m = [], p.x, p.n
        for k, g in enumerate(grids):
            dst = p.out if g == 1 else bufs[k % 2]
            launches.append(Launch(kernel, (g, 1, 1), (THREADS, 1, 1), (src, dst, np.int64(m))))
            src, m = dst, g
        return launches
    plan.__name__ = f"plan_{kernel}"
    return plan


def plan_v4(p: SumProblem, config: VecGrid) -> list[Launch]:
    """v4: grid-stride 16-byte loads, a partial per block; a second launch of one block sums the partials."""
    g = vec_grid(p.n, p.dtype, p.sms, config.blocks_per_sm)
    partial = Workspace((g,))
    return [Launch("reduce_v4_vec" + suffix(p.dtype), (g, 1, 1), (THREADS, 1, 1), (p.x, partial, np.int64(p.n))),
            Launch("reduce_v4_finish", (1, 1, 1), (THREADS, 1, 1), (partial, p.out, np.int32(g)))]


def ticket_counter() -> Workspace:
    """v5/v6's atomic ticket counter: zeroed once when bound; the last block sets it back to 0."""
    return Workspace((1,), np.uint32, fill=0, every_launch=False)


def plan_v5(p: SumProblem, config: VecGrid) -> list[Launch]:
    """v5: v4 in one launch; the last block to finish sums the partials."""
    g = vec_grid(p.n, p.dtype, p.sms, config.blocks_per_sm)
    return [Launch("reduce_v5_lastblock" + suffix(p.dtype), (g, 1, 1), (THREADS, 1, 1),
                   (p.x, Workspace((g,)), ticket_counter(), p.out, np.int64(p.n)))]


def plan_v6(p: SumProblem, config: ClusterGrid) -> list[Launch]:
    """v6: v5 with clusters of ``config.cluster`` blocks combining their totals through DSMEM."""
    c = config.cluster
    g = vec_grid(p.n, p.dtype, p.sms, config.blocks_per_sm, c)
    return [Launch(f"reduce_v6_cluster{suffix(p.dtype)}_c{c}", (g, 1, 1), (THREADS, 1, 1),
                   (p.x, Workspace((g // c,)), ticket_counter(), p.out, np.int64(p.n)), cluster=c)]


VERSIONS = Registry("reduce", problem, [
    Version("reduce_v0_atomic", "one atomicAdd per element on one address", SOURCE, plan_v0,
            snippet="reduce_v0"),
    Version("reduce_v1_interleaved",
            "a shared-memory tree per block, interleaved addressing (divergent); partials reduced by further "
            "launches", SOURCE, tree_plan("reduce_v1_interleaved"), parent="v0_atomic", snippet="reduce_v1"),
    Version("reduce_v2_sequential",
            "the same tree with sequential addressing: contiguous active threads, no bank conflicts",
            SOURCE, tree_plan("reduce_v2_sequential"), parent="v1_interleaved", snippet="reduce_v2"),
    Version("reduce_v3_shuffle", "warp shuffles inside each warp, shared memory only for the 8 warp totals",
            SOURCE, tree_plan("reduce_v3_shuffle"), parent="v2_sequential", snippet="reduce_v3"),
    Version("reduce_v4_vec",
            "grid-stride 16-byte loads, 4 per iteration (~2 in flight), fp32 accumulators; a second tiny launch",
            SOURCE, plan_v4, parent="v3_shuffle", snippet="reduce_v4", configs=VEC_CONFIGS,
            default=lambda p: VecGrid(BLOCKS_PER_SM)),
    Version("reduce_v5_lastblock", "one launch: the last block (atomic ticket) sums the partials in index order",
            SOURCE, plan_v5, parent="v4_vec", snippet="reduce_v5", configs=VEC_CONFIGS,
            default=lambda p: VecGrid(BLOCKS_PER_SM)),
    Version("reduce_v6_cluster", "clusters of blocks combine their totals through DSMEM before the global step",
            CLUSTER_SOURCE, plan_v6, parent="v5_lastblock", snippet="reduce_v6", configs=CLUSTER_CONFIGS,
            default=lambda p: ClusterGrid(4, BLOCKS_PER_SM)),
])

BF16_VERSIONS = ("v4_vec", "v5_lastblock", "v6_cluster")


# --- rounding-error bounds -------------------------------------------------------------------------

def depth(version: str, n: int, dtype=np.float32, sms: int | None = None, config=None) -> int:
    """The most fp32 additions any one input element passes through on its way to the result, for the
    version labelled ``version`` with ``config`` (its default if None), on a GPU of ``sms`` SMs (default: this
    one's, or the H200's on a CPU).

    Any order of summation with depth d satisfies |s - sum x| <= gamma_d * sum |x|,
    gamma_d = d u / (1 - d u) (Higham, Accuracy and Stability of Numerical Algorithms, ch. 4).
    A block_sum is 10 levels (5 shuffle levels per warp, 5 more in warp 0).
    """
    n = int(n)
    label = VERSIONS[version].label
    if sms is None:
        from utils.hardware import facts
        sms = facts().sms                                   # this GPU's, or the H200's on a CPU
    if label == "v0_atomic":
        return max(n - 1, 1)
    if label in ("v1_interleaved", "v2_sequential", "v3_shuffle"):
        return 10 * len(tree_passes(n))
    if config is None:
        config = ClusterGrid(4, BLOCKS_PER_SM) if label == "v6_cluster" else VecGrid(BLOCKS_PER_SM)
    c = config.cluster if label == "v6_cluster" else 1
    g = vec_grid(n, dtype, sms, config.blocks_per_sm, c)
    chunks = n // per16(dtype)
    per_thread = ceil_div(max(chunks, 1), g * THREADS)     # additions into one accumulator lane
    lane_adds = per_thread * (2 if per16(dtype) == 8 else 1)
    partials = ceil_div(g, c)
    return lane_adds + 3 + 10 + (c - 1) + ceil_div(partials, THREADS) + 10


def gamma(d: int) -> float:
    du = d * U32
    return du / (1 - du) if du < 1 else math.inf


def error_bound(version: str, n: int, sum_abs: float, **kw) -> float:
    """Largest |result - exact sum| the version's order of additions allows (worst case); ``kw`` as
    :func:`depth` takes them (dtype, sms, config).

    For v0 the worst case (n u sum|x|) says nothing at large n; there the bound is the probabilistic
    one of Higham and Mary (2019): with lambda = 8 the error stays under lambda sqrt(n) u sum|x| with
    probability 1 - 2 exp(-lambda^2 / 2), for rounding errors that behave as independent and unbiased.
    """
    d = depth(version, n, **kw)
    if VERSIONS[version].label == "v0_atomic":
        return min(gamma(d), 8.0 * math.sqrt(n) * U32) * sum_abs
    return gamma(d) * sum_abs


def check_sum(got: float, ref: float, bound: float, name: str = "sum") -> float:
    """Raise CheckFailed unless |got - ref| <= bound (and got is a number); return the relative error."""
    got = float(got)
    if not math.isfinite(got):
        raise CheckFailed(f"{name}: result is {got} (unwritten or invalid); expected {ref:.9g}")
    err = abs(got - ref)
    if err > bound:
        raise CheckFailed(f"{name}: got {got:.9g}, expected {ref:.9g}; error {err:.3g} exceeds the bound "
                          f"{bound:.3g} for this order of additions")
    return err / abs(ref) if ref else err


def check_within_bound(version: str, x, out, config=None, name: str | None = None) -> float:
    """Check the result a version left in ``out`` for input ``x`` against its own error bound (raises
    CheckFailed); return the relative error."""
    p = problem(x, out)
    v = VERSIONS[version]
    ref, sabs = reference(x)
    bound = error_bound(v.label, p.n, sabs, dtype=p.dtype, sms=p.sms, config=v.resolve_config(p, config))
    return check_sum(float(out[0]), ref, bound, name=name or f"{v.name} {p.dtype.name} n={p.n}")


# --- inputs for the ladder, and the peers ----------------------------------------------------------

def make_case(shape, dtype, rng):
    """A ladder case: fresh N(1, 1) data of ``shape`` (n,) on the GPU (a well-conditioned sum: never near
    zero), seeded from ``rng``, and an output of shape (1,)."""
    import cupy

    from utils.arrays import random_normal
    from utils.ladder import Case
    x, _ = random_normal(tuple(shape), "float32", seed=int(rng.integers(2**31)))
    x += 1                                    # in fp32, then rounded once to the input dtype
    if np.dtype(dtype) != np.float32:
        x = x.astype(dtype)
    return Case((x, cupy.empty((1,), cupy.float32)))


def reference_out(case):
    """The float64 sum of a ladder case, shaped as the output (1,)."""
    return np.array([reference(case.args[0])[0]])


def peers() -> dict:
    """The chapter's peers as ladder factories: CuPy's sum (CUB DeviceReduce for fp32) and torch.sum, on the
    same memory, accumulating in float32; each returns its result as an array of shape (1,)."""
    import cupy
    import torch

    from utils.arrays import as_torch, from_torch

    def cupy_sum(case):
        x = case.args[0]
        return lambda: cupy.sum(x, dtype=cupy.float32).reshape(1)

    def torch_sum(case):
        xt = as_torch(case.args[0])
        return lambda: from_torch(torch.sum(xt, dtype=torch.float32).reshape(1))
    return {"cupy.sum": cupy_sum, "torch.sum": torch_sum}


def reduce_sum(x, version: str = "v5_lastblock", config=None):
    """Sum ``x`` with one of :data:`VERSIONS` into a new float32 array of shape (1,)."""
    import cupy
    out = cupy.empty((1,), dtype=cupy.float32)
    VERSIONS[version](x, out, config=config)
    return out


# --- the chapter's experiments ---------------------------------------------------------------------
# Chapter 5 calls each of these once; they hold the loops, the record reading and the tables, so that the
# notebook shows what is measured and what is claimed.

ODD_SIZES = ((1,), (37,), (199,), (4099,), (20011,))   # not multiples of a block or of a 16-byte load
LADDER_TOL = {"float32": 3e-4, "bfloat16": 3e-4}     # a net for unwritten or garbage sums, not the bound


def ladder(rec, shapes, dtype: str = "float32", *, seed: int, peer_names=None, ceiling: str | None = "copy"):
    """Chapter 5's :class:`utils.ladder.Ladder` of :data:`VERSIONS` for one dtype: every version and peer is
    checked on fresh seeded N(1, 1) data of :data:`ODD_SIZES` (outputs poisoned first) and timed on
    ``shapes`` ((n,) each), all on the same data. The ladder's tolerance (:data:`LADDER_TOL`) only catches
    unwritten or garbage results; a version's own error bound is :func:`check_within_bound`.
    ``peer_names``: which of :func:`peers` to time (default: all)."""
    from utils.ladder import Ladder
    every = peers()
    chosen = every if peer_names is None else {p: every[p] for p in peer_names}
    return Ladder(rec, VERSIONS, shapes=list(shapes), dtypes=[dtype], make=make_case, reference=reference_out,
                  tol=dict(LADDER_TOL), nbytes=lambda shape, dt: nbytes(shape[0], dt.itemsize), peers=chosen,
                  odd_shapes=list(ODD_SIZES), ceiling=ceiling, seed=seed)


def ledger(n: int, copy_gbps: float, spec: dict | None = None) -> str:
    """The sum's ledger for ``n`` fp32 elements, as text: bytes and arithmetic intensity, this run's copy
    bandwidth against the datasheet's, and the floor times (at the copy rate, at the datasheet rate, and
    for the additions alone at one add per lane per clock). ``spec``: :func:`utils.hardware.datasheet`."""
    if spec is None:
        from utils.hardware import datasheet
        spec = datasheet()
    nb, adds = nbytes(n), flops(n)
    hbm = spec["hbm_tbps"]
    adds_per_s = spec["fp32"] * 1e12 / 2      # the datasheet counts an FMA as 2 FLOPs
    size = f"input {nb / 2**30:g} GiB, read once; {adds:,} additions = {adds / nb:.2f} FLOP per byte"
    copy = (f"device-to-device copy (1 GiB, read + write): {copy_gbps:.0f} GB/s = "
            f"{copy_gbps / (hbm * 1e3):.0%} of the {hbm} TB/s datasheet figure")
    floor = (f"floor: {nb / (copy_gbps * 1e9) * 1e6:.0f} us at the copy rate, {nb / (hbm * 1e12) * 1e6:.0f} us "
             f"at the datasheet rate; the additions alone would take {adds / adds_per_s * 1e6:.1f} us")
    return f"{size}\n{copy}\n{floor}"


def bound_report(x, labels, sms: int | None = None) -> str:
    """The float64 reference of ``x``, its condition number sum|x| / |sum x|, and for each version in
    ``labels`` its depth d and worst-case bound gamma_d * sum|x| relative to the sum, as text."""
    ref, sabs = reference(x)
    n = int(x.shape[0])
    out = [f"float64 reference: {ref:.6f}; condition number sum|x| / |sum x| = {sabs / abs(ref):.3f}"]
    for label in labels:
        d = depth(label, n, dtype=x.dtype, sms=sms)
        out.append(f"{label}: depth {d}, worst-case bound gamma_d * sum|x| = {gamma(d) * sabs / abs(ref):.2e} relative")
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class AtomicRate:
    """v0's timing read as a rate of atomicAdds on one address."""
    n: int              # elements summed (one atomic each)
    ms: float           # the timed median
    clock_hz: float     # the nominal SM clock
    error: float        # relative error of the timed result
    bound: float        # v0's (probabilistic) error bound at n, relative

    @property
    def rate(self) -> float:
        """Atomics per second."""
        return self.n / (self.ms * 1e-3)

    @property
    def per_clock(self) -> float:
        return self.rate / self.clock_hz

    def seconds_for(self, n: int) -> float:
        return n / self.rate

    def __str__(self) -> str:
        return (f"{self.rate / 1e9:.2f} G atomics per second on one address = {self.per_clock:.2f} per SM clock; "
                f"2**28 elements would take {self.seconds_for(1 << 28) * 1e3:.0f} ms\n"
                f"relative error at n = 2**{self.n.bit_length() - 1}: {self.error:.1e} "
                f"(the probabilistic bound: {self.bound:.1e})")


def atomic_rate(ladder, case) -> AtomicRate:
    """v0 as timed by ``ladder`` on ``case``: its rate of atomics, and its result (left in ``case``'s
    output by the timing) checked against its own error bound (raises CheckFailed beyond it)."""
    from utils.hardware import datasheet, facts
    x = case.args[0]
    n = int(x.shape[0])
    err = check_within_bound("v0_atomic", *case.args)
    ref, sabs = reference(x)
    clock_hz = (facts().sm_clock_khz or datasheet()["boost_mhz"] * 1000) * 1e3
    return AtomicRate(n, ladder.entry("v0_atomic", (n,), "float32")["ms"], clock_hz, err,
                      error_bound("v0_atomic", n, sabs) / abs(ref))


@dataclasses.dataclass
class Sweep:
    """Figures of one sweep over configs: per key (blocks per SM, cluster size), each figure, and the table."""
    table: Any
    frac: dict = dataclasses.field(default_factory=dict)        # fraction of copy
    vs_v5: dict = dataclasses.field(default_factory=dict)       # metric / v5's metric
    waves: dict = dataclasses.field(default_factory=dict)       # clusters in the grid / resident at once


def time_grids(ladder, shape, dtype: str = "float32", configs=VEC_CONFIGS[1:]) -> Sweep:
    """v4 at each grid of ``configs`` (blocks per SM), timed on the ladder's shapes and recorded as
    ``v4_vec[<b>/SM]``; the sweep's table and fractions of copy on ``shape``, keyed by blocks per SM."""
    from utils.hardware import facts
    from utils.table import Table
    sms = facts().sms
    rows, frac = [], {}
    for cfg in configs:
        impl = f"v4_vec[{cfg.blocks_per_sm}/SM]"
        ladder.time("v4_vec", config=cfg, impl=impl)
        e = ladder.entry(impl, shape, dtype)
        frac[cfg.blocks_per_sm] = ladder.fraction_of_copy(impl, shape, dtype)
        rows.append((cfg.blocks_per_sm, vec_grid(shape[0], np.dtype(dtype), sms, cfg.blocks_per_sm),
                     f"{e['ms'] * 1e3:.1f}", f"{frac[cfg.blocks_per_sm]:.1%}"))
    return Sweep(Table(["blocks per SM", "grid", "µs", "of copy"], rows), frac=frac)


def time_cluster_sizes(ladder, case, dtype: str = "float32") -> Sweep:
    """v6 with every cluster size at the default blocks per SM: each checked on the odd sizes, timed
    (recorded as ``v6_cluster[C=<c>]``), its timed result checked against its own error bound, and the
    grid's clusters set against how many the driver fits at once (cuOccupancyMaxActiveClusters). Keyed by
    cluster size: fraction of copy, ratio to v5, waves; the table shows them all."""
    from utils.occupancy import clusters_per_device
    from utils.table import Table
    v6 = VERSIONS["v6_cluster"]
    shape = tuple(case.args[0].shape)
    p6 = v6.validate(*case.args)
    out, rows = Sweep(None), []
    for cfg in [c for c in v6.all_configs() if c.blocks_per_sm == BLOCKS_PER_SM]:
        c = cfg.cluster
        impl = f"v6_cluster[C={c}]"
        ladder.check("v6_cluster", config=cfg)
        ladder.time("v6_cluster", config=cfg, impl=impl)
        check_within_bound("v6_cluster", *case.args, config=cfg)
        (ln,) = v6.launches(p6, cfg)
        resident = clusters_per_device(CLUSTER_SOURCE.launchable(ln.kernel, c), THREADS, 0, c)
        needed = ln.grid[0] // c
        out.vs_v5[c] = ladder.ratio(impl, "v5_lastblock", shape, dtype)
        out.frac[c] = ladder.fraction_of_copy(impl, shape, dtype)
        out.waves[c] = needed / resident if resident else float("nan")
        rows.append((c, needed, resident, f"{out.waves[c]:.2f}" if resident else "n/a", f"{out.frac[c]:.1%}",
                     f"{out.vs_v5[c]:.3f}x"))
    out.table = Table(["cluster size C", "clusters in the grid", "clusters resident at once (driver)", "waves",
                       "of copy", "vs v5"], rows)
    return out


# --- determinism: the same sum, run after run -------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Repeats:
    """The float32 results of one implementation run several times on the same input."""
    n: int                  # elements summed
    ref: float              # float64 sum of that input
    sum_abs: float          # float64 sum of |x|
    values: tuple           # np.float32 per run

    @property
    def distinct(self) -> int:
        """How many different results, compared bit for bit."""
        return len({np.float32(v).view(np.uint32).item() for v in self.values})

    @property
    def spread(self) -> float:
        """(max - min) / |reference|."""
        return float(max(self.values) - min(self.values)) / abs(self.ref)

    @property
    def spread_ulps(self) -> float:
        """max - min in units of the last place of the reference in fp32."""
        return float(max(self.values) - min(self.values)) / float(np.spacing(np.float32(self.ref)))


def repeated_sums(atomic_case, case, runs: int = 20) -> dict[str, Repeats]:
    """Run v0 on ``atomic_case`` and v5, cupy.sum and torch.sum on ``case``, ``runs`` times each, back to
    back on the same memory, reading every result as float32."""
    import cupy
    import torch

    from utils.arrays import as_torch
    x, out = case.args
    xt = as_torch(x)

    refs = {id(c): reference(c.args[0]) for c in (atomic_case, case)}

    def results(c, launch, result) -> Repeats:
        vals = []
        for _ in range(runs):
            launch()
            vals.append(np.float32(float(result())))
        return Repeats(int(c.args[0].shape[0]), *refs[id(c)], tuple(vals))

    run_v0, run_v5 = VERSIONS["v0_atomic"].bind(*atomic_case.args), VERSIONS["v5_lastblock"].bind(x, out)
    return {"v0_atomic": results(atomic_case, run_v0, lambda: atomic_case.args[1][0]),
            "v5_lastblock": results(case, run_v5, lambda: out[0]),
            "cupy.sum": results(case, lambda: None, lambda: cupy.sum(x)),
            "torch.sum": results(case, lambda: None, lambda: torch.sum(xt))}


def determinism_table(reps: dict[str, Repeats]):
    """Per implementation: the input size, the distinct results (bitwise), the first one in hex, the spread."""
    from utils.table import Table
    runs = max(len(r.values) for r in reps.values())
    return Table(["impl", "elements", f"distinct results in {runs} runs", "first result (hex)",
                  "spread (max - min) / reference"],
                 [(name, f"2**{r.n.bit_length() - 1}" if (r.n & (r.n - 1)) == 0 else str(r.n), r.distinct,
                   f"{np.float32(r.values[0]).view(np.uint32).item():#010x}", f"{r.spread:.1e}")
                  for name, r in reps.items()])


# --- the size sweep: fixed cost, then bandwidth ------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FloorFit:
    """One implementation's times over a size sweep and the two-parameter model t(n) = t0 + bytes / B:
    t0 is the median time of the three smallest sizes, B the slope to the largest size."""
    nbytes: tuple       # bytes read per size, ascending
    us: tuple           # median time per size, µs
    t0: float           # µs
    gbps: float         # B, GB/s

    @property
    def n_half(self) -> float:
        """Bytes at which the fixed cost equals the transfer time (half of B is reached): t0 * B."""
        return self.t0 * 1e-6 * self.gbps * 1e9

    def us_at(self, nbytes: int) -> float:
        return self.us[self.nbytes.index(int(nbytes))]

    def model_us(self, nbytes) -> np.ndarray:
        return self.t0 + np.asarray(nbytes, float) / (self.gbps * 1e3)


def fit_floor(nbytes, us) -> FloorFit:
    """Fit t0 + bytes / B to times ``us`` (µs) at sizes ``nbytes`` (at least four, ascending)."""
    b, t = [int(v) for v in nbytes], [float(v) for v in us]
    if len(b) < 4 or b != sorted(b):
        raise ValueError(f"fit_floor needs at least four ascending sizes, got {b}")
    t0 = float(np.median(t[:3]))                      # the three smallest sizes: the floor
    if t[-1] <= t0:
        raise ValueError(f"the largest size takes {t[-1]:.1f} us, no more than the floor {t0:.1f} us: no slope")
    return FloorFit(tuple(b), tuple(t), t0, b[-1] / (t[-1] - t0) * 1e-3)


def floor_fit(ladder, impl: str, sizes, dtype: str = "float32") -> FloorFit:
    """:func:`fit_floor` of ``impl``'s recorded times at ``sizes`` (elements, ascending)."""
    es = [ladder.entry(impl, (int(n),), dtype) for n in sizes]
    return fit_floor([e["bytes"] for e in es], [e["ms"] * 1e3 for e in es])


def plot_size_sweep(fits: dict[str, FloorFit], l2_bytes: int, peer_names=("cupy.sum",),
                    title: str = "Sum: fixed cost, then bandwidth"):
    """Time against bytes (log-log) for each fit, with its model t0 + bytes / B dotted and the L2 size
    marked; peers in grey, dashed. Returns the figure."""
    from utils.plot import figure, series_styles
    fig, axes = figure(1, 1, height=3.8)
    ax = axes[0, 0]
    styles = series_styles(list(fits), peer_names)
    for k, (impl, f) in enumerate(fits.items()):
        b = np.array(f.nbytes, float)
        ax.plot(b, f.us, label=impl + (" (peer)" if impl in peer_names else ""), **styles[impl])
        ax.plot(b, f.model_us(b), ":", color="gray", lw=1, label="t0 + bytes / B" if k == 0 else None)
    b = np.array(sorted({v for f in fits.values() for v in f.nbytes}), float)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(b)
    ax.set_xticklabels([f"{v / 2**20:g}M" if v >= 2**20 else f"{v / 2**10:g}K" for v in b], rotation=45)
    ax.axvline(l2_bytes, color="gray", ls="--", lw=1)
    ax.text(l2_bytes, ax.get_ylim()[0] * 1.2, " L2 size", color="gray")
    ax.set_xlabel("input size (fp32 bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title(title)
    ax.legend()
    return fig
