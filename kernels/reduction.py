"""Sum of a 1-D array (chapter 5): the reference, the cost model, error bounds, launchers, versions.

``out[0] = x[0] + ... + x[n-1]`` for a C-contiguous 1-D ``x`` of float32 (every version) or bfloat16
(v4-v6), accumulated and returned in float32 into a float32 array ``out`` of shape (1,).

Correctness is judged against a float64 sum with a bound on the rounding error of the version's own
order of additions (:func:`error_bound`), not a fixed tolerance: a sum of 2**28 terms in fp32 carries
an error that depends on how the additions are arranged.
"""
from __future__ import annotations

import math

import numpy as np

from utils.build import KernelSource
from utils.check import CheckFailed
from utils.ops import Version, expect_array, registry

SOURCE = KernelSource("reduction.cu")

THREADS = 256            # block size of every kernel (reduction.cu)
UNROLL = 4               # 16-byte loads per thread per iteration in v4-v6
BLOCKS_PER_SM = 8        # v4-v6 grid: 8 blocks of 256 threads per SM (32 registers: all fit at once)
CLUSTER_SIZES = (2, 4, 8)
CLUSTER = 4              # v6's default cluster size
MAX_GRID_X = 2**31 - 1
U32 = 2.0 ** -24         # unit roundoff of fp32 (round to nearest)


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


def per16(dtype) -> int:
    """Elements per 16-byte load: 4 fp32 or 8 bf16."""
    return 16 // np.dtype(dtype).itemsize


def ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


# --- reference and cost model ----------------------------------------------------------------------

def reference(x):
    """(sum, sum of |x|) in float64, on the device where ``x`` lives (bf16 widened exactly first)."""
    xp = np
    if not isinstance(x, np.ndarray):
        import cupy as xp
    x32 = x if x.dtype == np.float32 else x.astype(np.float32)   # bf16 -> fp32 is exact
    x64 = x32.astype(xp.float64)
    return float(x64.sum()), float(xp.abs(x64).sum())


def nbytes(n: int, itemsize: int = 4) -> int:
    """Minimum bytes moved: every element read once (the 4-byte result is left out)."""
    return int(n) * int(itemsize)


def flops(n: int) -> int:
    return max(int(n) - 1, 0)


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


# --- rounding-error bounds -------------------------------------------------------------------------

def depth(version: str, n: int, dtype=np.float32, sms: int = 132, blocks_per_sm: int = BLOCKS_PER_SM,
          cluster: int = CLUSTER) -> int:
    """The most fp32 additions any one input element passes through on its way to the result.

    Any order of summation with depth d satisfies |s - sum x| <= gamma_d * sum |x|,
    gamma_d = d u / (1 - d u) (Higham, Accuracy and Stability of Numerical Algorithms, ch. 4).
    A block_sum is 10 levels (5 shuffle levels per warp, 5 more in warp 0).
    """
    n = int(n)
    if version == "v0_atomic":
        return max(n - 1, 1)
    if version in ("v1_interleaved", "v2_sequential", "v3_shuffle"):
        return 10 * len(tree_passes(n))
    if version in ("v4_vec", "v5_lastblock", "v6_cluster"):
        c = cluster if version == "v6_cluster" else 1
        g = vec_grid(n, dtype, sms, blocks_per_sm, c)
        chunks = n // per16(dtype)
        per_thread = ceil_div(max(chunks, 1), g * THREADS)     # additions into one accumulator lane
        lane_adds = per_thread * (2 if per16(dtype) == 8 else 1)
        partials = ceil_div(g, c)
        return lane_adds + 3 + 10 + (c - 1) + ceil_div(partials, THREADS) + 10
    raise KeyError(f"unknown reduction version {version!r}")


def error_bound(version: str, n: int, sum_abs: float, **kw) -> float:
    """Largest |result - exact sum| the version's order of additions allows (worst case).

    For v0 the worst case (n u sum|x|) says nothing at large n; there the bound is the probabilistic
    one of Higham and Mary (2019): with lambda = 8 the error stays under lambda sqrt(n) u sum|x| with
    probability 1 - 2 exp(-lambda^2 / 2), for rounding errors that behave as independent and unbiased.
    """
    d = depth(version, n, **kw)
    if version == "v0_atomic":
        return min(gamma(d), 8.0 * math.sqrt(n) * U32) * sum_abs
    return gamma(d) * sum_abs


def gamma(d: int) -> float:
    du = d * U32
    return du / (1 - du) if du < 1 else math.inf


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


# --- kernels and scratch buffers -------------------------------------------------------------------

_scratch: dict = {}


def kernel(name: str):
    """The CuPy kernel ``name`` (KernelSource.function is itself cheap per launch)."""
    return SOURCE.function(name)


def scratch(name: str, size: int, dtype=np.float32):
    """A device buffer of at least ``size`` elements, kept per (device, name) and grown on demand.

    Counters (uint32) are created zeroed; the kernels that use them leave them zero after each launch.
    """
    import cupy
    key = (cupy.cuda.Device().id, name, np.dtype(dtype).str)
    buf = _scratch.get(key)
    if buf is None or buf.size < size:
        buf = cupy.zeros(max(int(size), 1), dtype=dtype)
        _scratch[key] = buf
    return buf


def _sms() -> int:
    from utils.gpu import device_summary
    return int(device_summary()["sms"])


def _ptr(a) -> np.uint64:
    return np.uint64(a.__cuda_array_interface__["data"][0])


# --- launchers -------------------------------------------------------------------------------------

def _validate(x, out, version: str, dtypes) -> int:
    expect_array(x, "x", dtype=dtypes, ndim=1)
    n = int(x.shape[0])
    if n < 1:
        raise ValueError(f"x: expected at least one element, got shape {tuple(x.shape)}")
    if n >= 2**40:
        raise ValueError(f"x: {n} elements is more than {version} handles (2**40)")
    expect_array(out, "out", dtype=np.float32, shape=(1,), align=4)
    if version in ("v0_atomic", "v1_interleaved", "v2_sequential", "v3_shuffle") \
            and ceil_div(n, THREADS) > MAX_GRID_X:
        raise ValueError(f"x: {n} elements need more than {MAX_GRID_X} blocks for {version}")
    return n


def launch_v0(x, out):
    """v0: n atomicAdds on out[0] (zeroed first, in the same stream). fp32 only."""
    n = _validate(x, out, "v0_atomic", (np.float32,))
    import cupy
    stream = cupy.cuda.get_current_stream()
    cupy.cuda.runtime.memsetAsync(int(_ptr(out)), 0, 4, stream.ptr)
    kernel("reduce_v0_atomic")((ceil_div(n, THREADS),), (THREADS,), (_ptr(x), out, np.int64(n)))
    return out


def _tree_launcher(version: str):
    name = "reduce_" + version

    def launch(x, out):
        n = _validate(x, out, version, (np.float32,))
        fn = kernel(name)
        grids = tree_passes(n)
        bufs = (scratch("tree_a", grids[0]), scratch("tree_b", ceil_div(grids[0], THREADS)))
        src, m = _ptr(x), n
        for k, g in enumerate(grids):
            dst = out if g == 1 else bufs[k % 2]
            fn((g,), (THREADS,), (src, dst, np.int64(m)))
            src, m = _ptr(dst), g
        return out
    launch.__name__ = f"launch_{version}"
    launch.__doc__ = (f"{version}: one element per thread, one partial per block of {THREADS}; launched again "
                      "on the partials until one value is left (deterministic). fp32 only.")
    return launch


def _suffix(dtype) -> str:
    return "" if np.dtype(dtype) == np.float32 else "_bf16"


def launch_v4(x, out, *, blocks_per_sm: int = BLOCKS_PER_SM):
    """v4: grid-stride 16-byte loads, a partial per block; a second launch sums the partials."""
    n = _validate(x, out, "v4_vec", (np.float32, _bf16()))
    g = vec_grid(n, x.dtype, _sms(), blocks_per_sm)
    partial = scratch("partials", g)
    kernel("reduce_v4_vec" + _suffix(x.dtype))((g,), (THREADS,), (_ptr(x), partial, np.int64(n)))
    kernel("reduce_v4_finish")((1,), (THREADS,), (partial, out, np.int32(g)))
    return out


def launch_v5(x, out, *, blocks_per_sm: int = BLOCKS_PER_SM):
    """v5: v4 in one launch; the last block to finish sums the partials (deterministic)."""
    n = _validate(x, out, "v5_lastblock", (np.float32, _bf16()))
    g = vec_grid(n, x.dtype, _sms(), blocks_per_sm)
    name = "reduce_v5_lastblock" + _suffix(x.dtype)
    partial, counter = scratch("partials", g), scratch("counter_" + name, 1, np.uint32)
    kernel(name)((g,), (THREADS,), (_ptr(x), partial, counter, out, np.int64(n)))
    return out


def launch_v6(x, out, *, cluster: int = CLUSTER, blocks_per_sm: int = BLOCKS_PER_SM):
    """v6: v5 with clusters of ``cluster`` blocks combining their totals through DSMEM (sm_90)."""
    n = _validate(x, out, "v6_cluster", (np.float32, _bf16()))
    if cluster not in CLUSTER_SIZES:
        raise ValueError(f"cluster: expected one of {CLUSTER_SIZES} (compiled in reduction.cu), got {cluster}")
    g = vec_grid(n, x.dtype, _sms(), blocks_per_sm, cluster)
    name = f"reduce_v6_cluster{_suffix(x.dtype)}_c{cluster}"
    partial, counter = scratch("partials", g // cluster), scratch("counter_" + name, 1, np.uint32)
    kernel(name)((g,), (THREADS,), (_ptr(x), partial, counter, out, np.int64(n)))
    return out


VERSIONS = registry(
    Version("reduce_v0_atomic", "v0_atomic", launch_v0,
            "one atomicAdd per element on one address"),
    Version("reduce_v1_interleaved", "v1_interleaved", _tree_launcher("v1_interleaved"),
            "shared-memory tree, interleaved addressing (divergent); partials reduced by further launches"),
    Version("reduce_v2_sequential", "v2_sequential", _tree_launcher("v2_sequential"),
            "the same tree with sequential addressing: contiguous active threads, no bank conflicts"),
    Version("reduce_v3_shuffle", "v3_shuffle", _tree_launcher("v3_shuffle"),
            "warp shuffles inside each warp, shared memory only for the 8 warp totals"),
    Version("reduce_v4_vec", "v4_vec", launch_v4,
            "grid-stride 16-byte loads, 4 per iteration (~2 in flight), fp32 accumulators; second tiny launch"),
    Version("reduce_v5_lastblock", "v5_lastblock", launch_v5,
            "one launch: the last block (atomic ticket) sums the partials in index order"),
    Version("reduce_v6_cluster", "v6_cluster", launch_v6,
            "clusters of blocks combine their totals through DSMEM before the global step"),
)

BF16_VERSIONS = ("v4_vec", "v5_lastblock", "v6_cluster")
BEST = "v5_lastblock"   # the chapter names the fastest version from its own run


def reduce_sum(x, version: str = BEST):
    """Sum ``x`` with one of :data:`VERSIONS` into a new float32 array of shape (1,)."""
    import cupy
    out = cupy.empty((1,), dtype=cupy.float32)
    return VERSIONS[version].launch(x, out)
