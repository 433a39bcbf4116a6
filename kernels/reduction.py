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
