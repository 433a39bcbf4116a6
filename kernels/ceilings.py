"""Host side of kernels/ceilings.cu: the probes chapter 2 measures the GPU's ceilings with.

For each probe: the cost model (bytes or FLOPs it moves), the reference its output is checked
against, and a launcher that validates its arguments and launches exactly one wave (SMs x blocks per
SM, as the kernel's ``__launch_bounds__`` promise). Also the figures chapter 2 sets the measurements
beside: per-clock rates of the A100 and Hopper SMs, and the H200 orientation figures of TARGETS.md.

Importing this module needs no GPU; the launchers do.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.check import CheckFailed
from utils.ops import expect_array
from utils.version import Launch, Registry, Unsupported, Version

SOURCE = KernelSource("ceilings.cu")

# Launch shapes; each must match the constants and __launch_bounds__ in ceilings.cu.
BLOCKS_PER_SM = 8          # copy, read, fma: 8 x 256 threads = 2048, a full SM
COPY_THREADS = 256
COPY_UNROLL = 4
READ_THREADS = 256
READ_UNROLL = 4
SMEM_THREADS = 1024
SMEM_BLOCKS_PER_SM = 2     # 2 x 1024 threads, 2 x 32 KB of shared memory
SMEM_UNROLL = 8
SMEM_TILE = 2 * SMEM_THREADS   # float4s per block's tile
FMA_THREADS = 256
FMA_CHAINS = 8
FMA_UNROLL = 32

_U32 = 2 ** 32
_I32 = 2 ** 31 - 1

# ---------------------------------------------------------------------------------------------------
# What the chapter compares against.

# FLOP (or shared-memory bytes) per clock per SM, from the architecture: an A100 SM has 64 FP32 lanes,
# a Hopper SM 128; Hopper's tensor cores do twice the A100's dense MMA work per SM per clock.
PER_SM_PER_CLOCK = {
    "A100": {"fp32": 128, "tf32": 1024, "bf16": 2048, "fp8": None, "smem_bytes": 128},
    "H100": {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp8": 8192, "smem_bytes": 128},
    "H200": {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp8": 8192, "smem_bytes": 128},
}

# TARGETS.md: peers measured on one H200 (CUDA 13.0, CuPy 14.2, PyTorch 2.11) for orientation.
# Chapter 2's bar: its copy, FP32 FMA and cuBLAS bf16 ceilings within 10% of these.
ORIENTATION_H200 = {
    ("copy", "ceiling.copy"): ("GB/s", 4220.0),
    ("gemm", "cublas_bf16", 8192): ("TFLOP/s", 686.0),
    ("gemm", "cublas_bf16", 4096): ("TFLOP/s", 730.0),
    ("gemm", "cublas_fp32"): ("TFLOP/s", 51.0),
    ("gemm", "torch.matmul.tf32"): ("TFLOP/s", 359.0),
}


def implied_clock_ghz(peak_tflops: float, sms: int, per_clock: float) -> float:
    """The SM clock at which ``sms`` SMs doing ``per_clock`` FLOP per clock reach ``peak_tflops``."""
    return peak_tflops * 1e12 / (sms * per_clock) / 1e9


def ridge_point(tflops: float, gbps: float) -> float:
    """Arithmetic intensity (FLOP/byte) where a compute ceiling meets a bandwidth ceiling."""
    if not gbps > 0:
        raise ValueError(f"bandwidth must be positive, got {gbps}")
    return tflops * 1e12 / (gbps * 1e9)


# ---------------------------------------------------------------------------------------------------
# Device figures the predictions use (CUDA 13 moved the clocks out of cudaDeviceProp).

_ATTR_CLOCK_RATE = 13        # cudaDevAttrClockRate, kHz
_ATTR_MEM_CLOCK_RATE = 36    # cudaDevAttrMemoryClockRate, kHz
_ATTR_MEM_BUS_WIDTH = 37     # cudaDevAttrGlobalMemoryBusWidth, bits


def device_clocks() -> dict:
    """SM clock (kHz), memory clock (kHz) and memory bus width (bits) of device 0.

    Read from ``utils.device_summary()`` where the runtime fills them, else through
    cudaDeviceGetAttribute (CUDA 13 dropped the clock fields from cudaDeviceProp). A value neither
    gives is None.
    """
    import cupy

    from utils import device_summary
    d = device_summary()
    out = {"sm_khz": d.get("clock_khz"), "mem_khz": d.get("mem_clock_khz"), "bus_bits": d.get("mem_bus_bits")}
    attrs = {"sm_khz": _ATTR_CLOCK_RATE, "mem_khz": _ATTR_MEM_CLOCK_RATE, "bus_bits": _ATTR_MEM_BUS_WIDTH}
    for key, attr in attrs.items():
        if not out[key]:
            try:
                out[key] = int(cupy.cuda.runtime.deviceGetAttribute(attr, d["device_id"])) or None
            except Exception:  # noqa: BLE001 - a figure the driver cannot give is None
                out[key] = None
    return out


def hbm_peak_gbps(mem_khz: float, bus_bits: int) -> float:
    """Peak DRAM bandwidth from the memory clock and bus width: two transfers per clock (DDR)."""
    return mem_khz * 1e3 * 2 * bus_bits / 8 / 1e9


def device_table(dev: dict, clk: dict, hbm_gbps: float | None):
    """What the device reports (``utils.device_summary()``, the clocks of :func:`device_clocks`) and the HBM
    peak its memory clock and bus width imply, as a table ("n/a" where the device gives no figure)."""
    from utils.table import Table
    rows = [
        ("name", dev["name"]), ("compute capability", dev["cc"]), ("SMs", shown(dev["sms"])),
        ("max SM clock (MHz)", shown(clk["sm_khz"] and clk["sm_khz"] / 1e3)),
        ("32-bit registers per SM", shown(dev["regs_per_sm"])),
        ("max resident threads per SM", shown(dev["max_threads_per_sm"])),
        ("shared memory per SM (KiB)", shown(dev["smem_per_sm"] / 1024)),
        ("shared memory per block, opt-in (KiB)", shown(dev["smem_per_block_optin"] / 1024)),
        ("L2 (MiB)", shown(dev["l2_bytes"] / 2**20)),
        ("device memory (GB)", shown(dev["memory_bytes"] / 1e9)),
        ("memory clock (MHz)", shown(clk["mem_khz"] and clk["mem_khz"] / 1e3)),
        ("memory bus width (bits)", shown(clk["bus_bits"])),
        ("HBM peak = clock x 2 x bus / 8 (GB/s)", shown(hbm_gbps)),
    ]
    return Table(["property (reported by the device)", "value"], rows)


def datasheet_here(dev: dict) -> dict | None:
    """The datasheet entry of this device (None where there is none), printed beside what it reports."""
    from utils.hardware import datasheet
    try:
        here = datasheet(dev["name"])
    except KeyError as e:
        print(e)
        return None
    print(f"this device matches the {here['part']} datasheet; SMs reported {dev['sms']} vs datasheet {here['sms']}, "
          f"L2 reported {dev['l2_bytes'] / 2**20:.0f} MiB vs {here['l2_mb']} MB")
    return here


# ---------------------------------------------------------------------------------------------------
# Cost models.

def copy_nbytes(n: int, itemsize: int = 4) -> int:
    """Bytes a copy of n elements moves: read once, written once."""
    return 2 * n * itemsize


def read_nbytes(n: int, repeats: int = 1, itemsize: int = 4) -> int:
    return repeats * n * itemsize


def smem_nbytes(blocks: int, iters: int) -> int:
    """Shared-memory bytes smem_read_v1_vec4 loads: SMEM_UNROLL 16-byte loads per thread per iteration."""
    return blocks * SMEM_THREADS * iters * SMEM_UNROLL * 16


def fma_steps(iters: int) -> int:
    """FMAs per chain in one launch of fma_v1_chains."""
    return FMA_UNROLL * iters


def fma_flops(n: int, iters: int) -> int:
    """2 FLOPs per FMA, FMA_CHAINS chains per thread, n threads."""
    return 2 * FMA_CHAINS * fma_steps(iters) * n


def fma_nbytes(n: int) -> int:
    """Global memory the FMA probe touches: its start values read, its end values written."""
    return 2 * FMA_CHAINS * n * 4


def gemm_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def gemm_min_bytes(m: int, n: int, k: int, in_itemsize: int, out_itemsize: int) -> int:
    """The fewest bytes a GEMM can move: A and B read once, C written once."""
    return (m * k + k * n) * in_itemsize + m * n * out_itemsize


# ---------------------------------------------------------------------------------------------------
# Grids: one wave, every SM the same number of blocks.

def copy_grid(n: int, sms: int) -> int:
    """Blocks for copy_v1_vec4: one full wave, fewer when there are fewer float4s than threads in it."""
    return max(1, min(sms * BLOCKS_PER_SM, math.ceil((n // 4) / COPY_THREADS)))


def copy_v2_grid(n: int) -> int:
    """Blocks for copy_v2_vec4_blocks: one float4 per thread (at least one block, for the tail)."""
    return max(1, math.ceil((n // 4) / COPY_THREADS))


def read_grid(sms: int) -> int:
    return sms * BLOCKS_PER_SM


def smem_grid(sms: int) -> int:
    return sms * SMEM_BLOCKS_PER_SM


def fma_threads(sms: int) -> int:
    """Threads for the FMA probe: 2048 per SM (8 blocks of 256)."""
    return sms * BLOCKS_PER_SM * FMA_THREADS


# ---------------------------------------------------------------------------------------------------
# References (NumPy or CuPy: the arithmetic runs where the arrays live).

def read_reference(x, grid: int, repeats: int = 1):
    """Per-block sums read_v1_vec4 produces, in float64.

    Thread t of the flat grid (block t // READ_THREADS) reads float4 number (j mod n4) for every
    j = t (mod grid * READ_THREADS) below repeats * n4; the n % 4 tail floats go to threads 0..2
    (block 0), once per pass. Memory grows with repeats * n / 4: use repeats > 1 on small arrays only.
    """
    xp = array_module(x)
    n = x.shape[0]
    n4 = n // 4
    stride = grid * READ_THREADS
    out = xp.zeros(grid, dtype=xp.float64)
    if n4:
        v4 = x[: 4 * n4].reshape(n4, 4).sum(axis=1, dtype=xp.float64)
        if repeats == 1:
            j = xp.arange(n4)
            out += xp.bincount((j % stride) // READ_THREADS, weights=v4, minlength=grid)[:grid]
        else:
            j = xp.arange(repeats * n4)
            out += xp.bincount((j % stride) // READ_THREADS, weights=v4[j % n4], minlength=grid)[:grid]
    tail = n - 4 * n4
    if tail:
        out[0] += repeats * x[4 * n4:].astype(xp.float64).sum()
    return out


def check_read_total(partial, x, repeats: int, tol: float = 1e-5, name: str = "read_v1 partial sums") -> float:
    """Check the sum of read_v1's partials against repeats * sum(x), scaled by repeats * sum|x|.

    A cheap check for large repeat counts, where the per-block reference would be large; scaling by
    sum|x| keeps it meaningful when the sum of signed data nearly cancels.
    """
    xp = array_module(partial)
    if not bool(xp.isfinite(partial).all()):
        raise CheckFailed(f"{name}: NaN/inf in the partial sums (unwritten or invalid)")
    got = float(partial.sum(dtype=xp.float64))
    want = repeats * float(x.sum(dtype=xp.float64))
    scale = repeats * float(xp.abs(x).sum(dtype=xp.float64))
    err = abs(got - want) / scale
    if err > tol:
        raise CheckFailed(f"{name}: total {got:.9g}, expected {want:.9g} (error {err:.2e} of sum|x|, "
                          f"tolerance {tol:.0e})")
    return err


def smem_seed(xp=None, rng=None):
    """Random integers 1..7 as float32, [SMEM_TILE, 4]: every sum the smem probe forms is exact."""
    if xp is None:
        import cupy as xp
    rng = rng or np.random.default_rng(0)
    return xp.asarray(rng.integers(1, 8, size=(SMEM_TILE, 4)).astype(np.float32))


def smem_reference(seed, blocks: int, iters: int):
    """Per-thread result of smem_read_v1_vec4: thread t adds tile[t] and tile[t + SMEM_THREADS]
    SMEM_UNROLL / 2 times each per iteration, then the four components."""
    xp = array_module(seed)
    s = seed.astype(xp.float64).sum(axis=1)
    per_thread = (SMEM_UNROLL // 2) * iters * (s[:SMEM_THREADS] + s[SMEM_THREADS:])
    return xp.tile(per_thread, blocks)


def smem_exact_limit(iters: int) -> bool:
    """True while every partial sum of the probe stays an integer below 2^24 (exact in float32)."""
    return 4 * SMEM_UNROLL * iters * 7 < 2 ** 24


def fma_reference(x, m: float, c: float, steps: int):
    """a_s of a <- a * m + c after ``steps`` steps, in float64 from the closed form.

    m == 1: a_0 + s c; otherwise m^s (a_0 - f) + f with the fixed point f = c / (1 - m).
    """
    xp = array_module(x)
    a = x.astype(xp.float64)
    m, c = float(np.float32(m)), float(np.float32(c))
    if m == 1.0:
        return a + steps * c
    f = c / (1.0 - m)
    return m ** steps * (a - f) + f


def fma_exact_inputs(shape, xp=None, rng=None):
    """Start values for the exact FMA check (m = 1, c = 2^-10): multiples of 2^-10 in [1, 2).

    Every a_0 + k * 2^-10 stays a multiple of 2^-10 below 64 for up to 63488 steps, exactly
    representable in float32, so the kernel's result is exactly a_0 + steps * 2^-10.
    """
    if xp is None:
        import cupy as xp
    rng = rng or np.random.default_rng(0)
    return xp.asarray((rng.integers(1024, 2048, size=shape) / 1024.0).astype(np.float32))


FMA_EXACT = {"m": 1.0, "c": 2.0 ** -10}
# A busy multiplier: |m| just under 1 (16 set mantissa bits) and the sign flipping every step, so the
# values oscillate around c / (1 - m) = 1.5 without settling for ~65536 steps. Rounding errors are
# damped by |m| per step only: after 32768 steps the result sits about 1e-4 (relative L2) from the
# float64 closed form in an emulation (tests/test_ceilings_host.py); the tolerance is 1e-3.
FMA_BUSY = {"m": -(1.0 - 2.0 ** -16), "c": 3.0}
FMA_BUSY_TOL = 1e-3

# TF32 keeps 10 of float32's 23 mantissa bits: rounding the operands alone leaves a relative L2 error
# of a few 1e-4 on standard-normal data (more if the hardware truncates). An error under TF32_ENGAGED
# means the product ran in full fp32, i.e. TF32 was not used.
TF32_TOL = 2e-3
TF32_ENGAGED = 1e-5


def gemm_check(a, b, c, *, tol: float, rows: int = 64, name: str = "GEMM") -> float:
    """Relative L2 error of the first ``rows`` rows of c = a @ b against a float64 product; raises
    CheckFailed above ``tol`` or on any NaN/inf (unwritten or invalid) in those rows."""
    import cupy

    from utils.check import rel_l2_error
    r = slice(0, min(rows, a.shape[0]))
    ref = a[r].astype(cupy.float32).astype(cupy.float64) @ b.astype(cupy.float32).astype(cupy.float64)
    out = c[r].astype(cupy.float32).astype(cupy.float64)
    if not bool(cupy.isfinite(out).all()):
        raise CheckFailed(f"{name}: NaN/inf in the output (unwritten or invalid)")
    err = rel_l2_error(out, ref)
    if not err <= tol:
        raise CheckFailed(f"{name}: relative L2 error {err:.3e} exceeds {tol:.1e}")
    return err


# ---------------------------------------------------------------------------------------------------
# Launchers.

@dataclasses.dataclass(frozen=True)
class CopyProblem:
    src: object
    out: object
    n: int


def copy_problem(src, dst) -> CopyProblem:
    """dst[:] = src[:]: 1-D float32 device arrays of one size, 16-byte aligned, at least one element."""
    expect_array(src, "src", dtype=np.float32, ndim=1)
    n = int(src.shape[0])
    expect_array(dst, "dst", dtype=np.float32, shape=(n,))
    if n == 0:
        raise ValueError("src: expected at least one element, got an empty array")
    return CopyProblem(src, dst, n)


def plan_copy_v1(p: CopyProblem, config=None) -> list[Launch]:
    """One wave (the driver lowers the grid to what is resident: 8 blocks per SM), grid-stride."""
    return [Launch("copy_v1_vec4", (copy_v2_grid(p.n), 1, 1), (COPY_THREADS, 1, 1),
                   (p.src, p.out, np.uint64(p.n)), persistent=True)]


def plan_copy_v2(p: CopyProblem, config=None) -> list[Launch]:
    """One float4 per thread: the grid covers the array."""
    grid = copy_v2_grid(p.n)
    if grid > _I32:
        raise Unsupported(f"src: {p.n} elements need {grid} blocks, more than a grid holds")
    return [Launch("copy_v2_vec4_blocks", (grid, 1, 1), (COPY_THREADS, 1, 1), (p.src, p.out, np.uint64(p.n)))]


COPY = Registry("copy", copy_problem, [
    Version("copy_v1_vec4", "float4 copy, one wave, grid-stride, 4 loads in flight per thread before the stores",
            SOURCE, plan_copy_v1, snippet="copy_v1"),
    Version("copy_v2_vec4_blocks", "one float4 per thread, no loop: the block scheduler walks the array in order",
            SOURCE, plan_copy_v2, parent="v1_vec4", snippet="copy_v2"),
])

# The single-purpose probes (one kernel each, plain launchers below) and the copy versions: every
# extern "C" kernel of ceilings.cu.
PROBE_KERNELS = ("read_v1_vec4", "smem_read_v1_vec4", "fma_v1_chains")
KERNELS = tuple(v.name for v in COPY.values()) + PROBE_KERNELS


def read_v1(src, partial, repeats: int = 1) -> None:
    """partial[b] = block b's share of ``repeats`` passes over src (float32); grid = partial.size."""
    expect_array(src, "src", dtype=np.float32, ndim=1)
    expect_array(partial, "partial", dtype=np.float32, ndim=1, align=4)
    n = int(src.shape[0])
    grid = int(partial.shape[0])
    if n == 0:
        raise ValueError("src: expected at least one element, got an empty array")
    if not 1 <= grid <= _I32:
        raise ValueError(f"partial: expected 1 to {_I32} blocks' sums, got {grid}")
    if not (isinstance(repeats, (int, np.integer)) and 1 <= repeats <= _I32):
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    # the kernel's 32-bit index runs up to repeats * n4 plus one unrolled step of the grid
    if repeats * (n // 4) + (READ_UNROLL + 1) * grid * READ_THREADS >= _U32:
        raise ValueError(f"read_v1 indexes with 32 bits: repeats * n / 4 = {repeats * (n // 4)} plus "
                         f"{READ_UNROLL + 1} x {grid * READ_THREADS} threads must stay below 2^32")
    SOURCE.function("read_v1_vec4")((grid,), (READ_THREADS,),
                                    (src, np.uint64(n), np.int32(repeats), partial))


def smem_read_v1(seed, out, clk, iters: int) -> None:
    """Shared-memory probe: out[b * SMEM_THREADS + t] = thread t's sum; grid = out.size / SMEM_THREADS.

    seed: float32 [SMEM_TILE, 4]; clk: uint64 [2] receives {cycles, ns} of block 0's loop.
    """
    expect_array(seed, "seed", dtype=np.float32, shape=(SMEM_TILE, 4))
    expect_array(out, "out", dtype=np.float32, ndim=1, align=4)
    expect_array(clk, "clk", dtype=np.uint64, shape=(2,), align=8)
    if out.shape[0] == 0 or out.shape[0] % SMEM_THREADS:
        raise ValueError(f"out: expected a positive multiple of {SMEM_THREADS} elements (one per thread), "
                         f"got {out.shape[0]}")
    if not (isinstance(iters, (int, np.integer)) and 1 <= iters <= _I32):
        raise ValueError(f"iters: expected an integer >= 1, got {iters!r}")
    grid = out.shape[0] // SMEM_THREADS
    SOURCE.function("smem_read_v1_vec4")((grid,), (SMEM_THREADS,), (seed, np.int32(iters), out, clk))


def fma_v1(x, y, clk, m: float, c: float, iters: int) -> None:
    """FP32 probe: y = FMA_UNROLL * iters steps of a <- a * m + c from a = x; x, y: float32 [FMA_CHAINS, n].

    clk: uint64 [2] receives {cycles, ns} of thread 0's loop.
    """
    expect_array(x, "x", dtype=np.float32, ndim=2, shape=(FMA_CHAINS, None), align=4)
    n = int(x.shape[1])
    expect_array(y, "y", dtype=np.float32, shape=(FMA_CHAINS, n), align=4)
    expect_array(clk, "clk", dtype=np.uint64, shape=(2,), align=8)
    if not 1 <= n <= _I32 // FMA_CHAINS:
        raise ValueError(f"x: expected 1 to {_I32 // FMA_CHAINS} threads' chains, got {n}")
    if not (isinstance(iters, (int, np.integer)) and 1 <= iters <= _I32):
        raise ValueError(f"iters: expected an integer >= 1, got {iters!r}")
    grid = math.ceil(n / FMA_THREADS)
    SOURCE.function("fma_v1_chains")((grid,), (FMA_THREADS,),
                                     (x, np.float32(m), np.float32(c), np.int32(iters), np.int32(n), y, clk))


# ---------------------------------------------------------------------------------------------------
# The chapter's measurements, one call each: check on fresh data with poisoned outputs, then time.

ODD_N = 1823 * 781 + 2      # an awkward size: not a multiple of 4, nor of a block's share


def check_copy_versions(x, y, x_odd, seeds=(None, None)) -> None:
    """Every copy version bit for bit on ``x_odd`` (a fresh poisoned output), then on ``x`` into ``y``
    (poisoned first). ``seeds``: the seeds of x and x_odd, for the failure message."""
    from utils.check import assert_close, poisoned
    for v in COPY.values():
        y_odd = poisoned((x_odd.shape[0],), np.float32)
        v(x_odd, y_odd)
        assert_close(y_odd, x_odd, dtype="exact", name=f"{v.name} (odd size, seed {seeds[1]})")
        y.fill(np.nan)
        v(x, y)
        assert_close(y, x, dtype="exact", name=f"{v.name} (1 GiB, seed {seeds[0]})")


def time_copy(rec, label: str, x, y) -> dict:
    """Copy version ``label`` from x into y (poisoned first), timed and checked bit for bit, recorded as
    op ``copy`` under the version's name."""
    from utils.check import assert_close
    v = COPY[label]
    y.fill(np.nan)
    return rec.time("copy", v.name, v.bind(x, y), dtype="float32", shape=(x.shape[0],),
                    nbytes=copy_nbytes(x.shape[0]), check=lambda: assert_close(y, x, dtype="exact"))


def measure_read(rec, x, x_odd, sms: int) -> dict:
    """read_v1_vec4 checked block by block (float64 reference) on ``x_odd`` and on ``x``, then timed on
    ``x`` (L2 flushed), recorded as op ``read``, impl ``read_kernel``."""
    from utils.check import assert_close, poisoned
    grid = read_grid(sms)
    partial = poisoned((grid,), np.float32)
    read_v1(x_odd, partial)
    assert_close(partial, read_reference(x_odd, grid), dtype=np.float32, name="read_v1 (odd size)")
    partial.fill(np.nan)
    read_v1(x, partial)
    ref = read_reference(x, grid)
    assert_close(partial, ref, dtype=np.float32, name="read_v1 (1 GiB)")
    return rec.time("read", "read_kernel", lambda: read_v1(x, partial), dtype="float32", shape=(x.shape[0],),
                    nbytes=read_nbytes(x.shape[0]), check=lambda: assert_close(partial, ref, dtype=np.float32))


def hbm_table(rows: dict, copy_gbps: float, sheet_gbps: float | None, clock_gbps: float | None):
    """{label: entry} of the HBM measurements as GB/s and fractions of the datasheet, of clock x bus and
    of cudaMemcpy ("n/a" where a reference is missing)."""
    from utils.table import Table

    def pct(v, base):
        return f"{v / base:.1%}" if base else "n/a"
    return Table(["", "GB/s", "of datasheet", "of clock x bus", "of cudaMemcpy"],
                 [[label, f"{e['metric']:,.0f}", pct(e["metric"], sheet_gbps), pct(e["metric"], clock_gbps),
                   f"{e['metric'] / copy_gbps:.3f}"] for label, e in rows.items()])


L2_SIZES_MIB = (4, 12, 20, 28, 36, 44, 52, 60, 72, 96, 256)   # working sets of the L2 sweep
L2_READ_BYTES = 2 ** 33     # bytes one timed launch of the sweep reads: ~8 GiB, about a millisecond


def l2_repeats(floats: int) -> int:
    """Passes over a buffer of ``floats`` fp32 that make one launch read about L2_READ_BYTES."""
    return max(1, round(L2_READ_BYTES / (4 * floats)))


def l2_read_sweep(rec, sms: int, sizes_mib=L2_SIZES_MIB) -> list[dict]:
    """read_v1_vec4 over buffers of ``sizes_mib`` MiB, each read :func:`l2_repeats` times in one launch,
    timed without flushing the L2 (the buffer stays in it between repetitions); the total of the
    partial sums checked; recorded as op ``read_l2``, impl ``l2_read``."""
    from tqdm.auto import tqdm

    from utils.arrays import random_normal
    from utils.check import poisoned
    grid = read_grid(sms)
    entries = []
    for mib in tqdm(sizes_mib, desc="L2 sweep"):
        m = mib * 2**20 // 4
        xs, _ = random_normal(m, "float32", seed=mib)
        reps = l2_repeats(m)
        p = poisoned((grid,), np.float32)
        read_v1(xs, p, repeats=reps)
        check_read_total(p, xs, reps)

        def run(xs=xs, p=p, reps=reps):
            read_v1(xs, p, repeats=reps)

        def check(xs=xs, p=p, reps=reps):
            check_read_total(p, xs, reps)
        entries.append(rec.time("read_l2", "l2_read", run, dtype="float32", shape=(m,),
                                nbytes=read_nbytes(m, reps), flush=False, check=check,
                                extra={"working_set_mib": mib, "repeats": reps}))
        del xs, p, run, check                      # free the buffer before the next, larger one
    return entries


@dataclasses.dataclass(frozen=True)
class SmemRun:
    entry: dict           # the record's smem_bandwidth entry
    ghz: float            # the SM clock during block 0's loop in the last timed run (clock64 / globaltimer)
    loop_cycles: int      # block 0's loop: SM cycles
    loop_ns: int          # ... and nanoseconds
    iters: int


def smem_probe(rec, sms: int, iters: int = 1024) -> SmemRun:
    """smem_read_v1_vec4 on two 1024-thread blocks per SM, checked bit for bit (integer data keeps every
    sum exact), timed without flushing the L2 (it reads no global memory in its loop), recorded as op
    ``smem_read``, impl ``smem_bandwidth``; with block 0's loop clocked."""
    import cupy

    from utils.check import assert_close, poisoned
    blocks = smem_grid(sms)
    if not smem_exact_limit(iters):
        raise ValueError(f"iters = {iters}: the probe's sums would leave float32's exact integers")
    seed = smem_seed()
    out = poisoned((blocks * SMEM_THREADS,), np.float32)
    clk = cupy.zeros(2, dtype=cupy.uint64)
    ref = smem_reference(seed, blocks, iters)
    smem_read_v1(seed, out, clk, iters)
    assert_close(out, ref, dtype="exact", name="smem_read_v1")
    e = rec.time("smem_read", "smem_bandwidth", lambda: smem_read_v1(seed, out, clk, iters),
                 dtype="float32", shape=(blocks, SMEM_THREADS, iters), nbytes=smem_nbytes(blocks, iters),
                 flush=False, check=lambda: assert_close(out, ref, dtype="exact"))
    cycles, ns = (int(v) for v in clk.get())
    return SmemRun(e, clock_ghz(clk), cycles, ns, iters)


def print_smem(run: SmemRun, sms: int, sm_ghz: float | None, bpc: float, bpc_loop: float) -> None:
    """The shared-memory figures: total and per SM, the loop's clock, bytes per clock (over the timed
    launch and inside block 0's loop), and measured / predicted split into a clock and a per-clock factor."""
    e = run.entry
    print(f"shared memory: {e['metric'] / 1e3:.1f} TB/s in total, {e['metric'] / sms:,.0f} GB/s per SM")
    print(f"SM clock during the loop (clock64 / globaltimer): {run.ghz:.3f} GHz"
          + (f"; max clock reported {sm_ghz:.3f} GHz" if sm_ghz else ""))
    print(f"bytes per clock per SM (architecture: 128): {bpc:.1f} over the timed launch, {bpc_loop:.1f} for "
          f"block 0 inside its own loop, which took {run.loop_ns / (e['ms'] * 1e6):.1%} of the timed time")
    if sm_ghz:
        pred = 128 * sms * sm_ghz
        print(f"prediction 128 B/clk x {sms} SMs x {sm_ghz:.2f} GHz = {pred / 1e3:.1f} TB/s; measured / predicted = "
              f"{e['metric'] / pred:.3f} = clock {run.ghz / sm_ghz:.3f} (loop / max) x per clock {bpc / 128:.3f}")


@dataclasses.dataclass(frozen=True)
class FmaRun:
    busy: dict            # the record's ceiling.fma_fp32 entry (busy data)
    exact: dict           # fma_fp32.exact_data
    ghz_busy: float       # the SM clock in thread 0's loop, last timed run of each group
    ghz_exact: float
    err_busy: float       # relative L2 error of the busy group against the float64 closed form


def fma_probe(rec, sms: int, iters: int = 1024) -> FmaRun:
    """fma_v1_chains, one wave of 2048 threads per SM, ``iters`` x FMA_UNROLL steps per chain. The exact
    group checked bit for bit on an awkward thread count and on the full grid, the busy group against its
    closed form; both timed (no L2 flush), recorded as op ``fma_fp32``, impls ``ceiling.fma_fp32`` (busy)
    and ``fma_fp32.exact_data``."""
    import cupy

    from utils.check import assert_close, poisoned
    n_t = fma_threads(sms)
    steps = fma_steps(iters)
    clk = cupy.zeros(2, dtype=cupy.uint64)
    for nt in (1823, n_t):                          # the exact group: an awkward thread count, then the grid
        x_e = fma_exact_inputs((FMA_CHAINS, nt))
        y_e = poisoned((FMA_CHAINS, nt), np.float32)
        fma_v1(x_e, y_e, clk, iters=iters, **FMA_EXACT)
        ref_e = fma_reference(x_e, steps=steps, **FMA_EXACT)
        assert_close(y_e, ref_e, dtype="exact", name=f"fma_v1 exact group, {nt} threads")
    x_b = cupy.asarray(np.random.default_rng(35).uniform(1, 2, size=(FMA_CHAINS, n_t)).astype(np.float32))
    y_b = poisoned((FMA_CHAINS, n_t), np.float32)
    ref_b = fma_reference(x_b, steps=steps, **FMA_BUSY)
    fma_v1(x_b, y_b, clk, iters=iters, **FMA_BUSY)
    err_b = assert_close(y_b, ref_b, tol=FMA_BUSY_TOL, name="fma_v1 busy group")
    kw = {"dtype": "float32", "shape": (FMA_CHAINS, n_t, steps), "flops": fma_flops(n_t, iters),
          "nbytes": fma_nbytes(n_t), "flush": False}
    busy = rec.time("fma_fp32", "ceiling.fma_fp32", lambda: fma_v1(x_b, y_b, clk, iters=iters, **FMA_BUSY),
                    check=lambda: assert_close(y_b, ref_b, tol=FMA_BUSY_TOL), **kw)
    ghz_busy = clock_ghz(clk)
    exact = rec.time("fma_fp32", "fma_fp32.exact_data", lambda: fma_v1(x_e, y_e, clk, iters=iters, **FMA_EXACT),
                     check=lambda: assert_close(y_e, ref_e, dtype="exact"), **kw)
    return FmaRun(busy, exact, ghz_busy, clock_ghz(clk), err_b)


def flop_per_clock_per_sm(entry: dict, ghz: float, sms: int) -> float:
    """An entry's FLOPs per second divided by the clock and the SM count."""
    return entry["flops"] / (entry["ms"] * 1e-3) / (ghz * 1e9) / sms


def print_fma(run: FmaRun, sms: int, sm_ghz: float | None, sheet: dict | None) -> None:
    """Both groups' TFLOP/s, time, loop clock and FLOP/clk/SM; measured / predicted split into a clock and
    a per-clock factor; the datasheet ratio; the difference the data makes."""
    print(f"busy group: relative error vs float64 closed form {run.err_busy:.1e} (tolerance {FMA_BUSY_TOL:.0e})")
    print(f"{'':12s} {'TFLOP/s':>8s} {'ms':>7s} {'clock (GHz)':>12s} {'FLOP/clk/SM':>12s}")
    for e, ghz, label in ((run.busy, run.ghz_busy, "busy data"), (run.exact, run.ghz_exact, "exact data")):
        print(f"{label:12s} {e['metric']:8.2f} {e['ms']:7.3f} {ghz:12.3f} {flop_per_clock_per_sm(e, ghz, sms):12.1f}")
    slots = FMA_CHAINS * FMA_UNROLL
    if sm_ghz:
        pred = 256 * sms * sm_ghz / 1e3
        print(f"prediction 256 FLOP/clk/SM x {sms} x {sm_ghz:.2f} GHz = {pred:.1f} TFLOP/s; "
              f"measured / predicted = {run.busy['metric'] / pred:.3f} = clock {run.ghz_busy / sm_ghz:.3f} "
              f"(loop / max) x per clock {flop_per_clock_per_sm(run.busy, run.ghz_busy, sms) / 256:.3f} "
              f"(issue-slot bound {slots / (slots + 3):.3f})")
    if sheet:
        print(f"measured / datasheet FP32 ({sheet['fp32']}) = {run.busy['metric'] / sheet['fp32']:.3f}")
    print(f"busy vs exact data: {run.busy['metric'] / run.exact['metric'] - 1:+.1%}")


def time_cublas_bf16_uniform(rec, n: int = 8192, seed: int = 39) -> dict:
    """cuBLAS bf16 n x n x n on uniform [0, 1) data (same shape and library as ``cublas_bf16``, a different
    bit activity), checked on 64 rows, recorded as ``cublas_bf16.uniform01``."""
    import cupy
    import ml_dtypes

    from utils.check import TOLERANCES
    rng = np.random.default_rng(seed)
    a = cupy.asarray(rng.random((n, n), dtype=np.float32)).astype(ml_dtypes.bfloat16)
    b = cupy.asarray(rng.random((n, n), dtype=np.float32)).astype(ml_dtypes.bfloat16)
    c = cupy.empty((n, n), dtype=ml_dtypes.bfloat16)
    cupy.matmul(a, b, out=c)
    gemm_check(a, b, c, tol=TOLERANCES["bfloat16"], name="cuBLAS bf16, uniform data")
    return rec.time("gemm", "cublas_bf16.uniform01", lambda: cupy.matmul(a, b, out=c), dtype="bfloat16",
                    shape=(n, n, n), flops=gemm_flops(n, n, n), nbytes=gemm_min_bytes(n, n, n, 2, 2),
                    is_peer=True, flush=False,
                    check=lambda: gemm_check(a, b, c, tol=TOLERANCES["bfloat16"]))


@dataclasses.dataclass(frozen=True)
class Fp32Gemms:
    fp32: dict            # cuBLAS SGEMM (CuPy float32 matmul), impl cublas_fp32
    err_fp32: float
    tf32: dict | None     # torch.matmul with TF32, impl torch.matmul.tf32; None where TF32 did not engage
    err_tf32: float


def time_fp32_gemms(rec, n: int = 4096) -> Fp32Gemms:
    """n x n x n on standard-normal fp32 data: cuBLAS SGEMM through CuPy, then PyTorch's matmul with TF32
    on the same arrays (zero-copy through DLPack), each checked on 64 rows against float64; TF32 is
    recorded only where its error shows it engaged (above TF32_ENGAGED)."""
    import cupy
    import torch

    from utils.check import TOLERANCES, poisoned
    a32 = cupy.random.standard_normal((n, n), dtype=cupy.float32)
    b32 = cupy.random.standard_normal((n, n), dtype=cupy.float32)
    c32 = poisoned((n, n), np.float32)
    kw = {"shape": (n, n, n), "flops": gemm_flops(n, n, n), "nbytes": gemm_min_bytes(n, n, n, 4, 4),
          "is_peer": True, "flush": False}
    cupy.matmul(a32, b32, out=c32)
    err_fp32 = gemm_check(a32, b32, c32, tol=TOLERANCES["float32"], name="cuBLAS fp32")
    e_fp32 = rec.time("gemm", "cublas_fp32", lambda: cupy.matmul(a32, b32, out=c32), dtype="float32",
                      check=lambda: gemm_check(a32, b32, c32, tol=TOLERANCES["float32"]), **kw)
    ta, tb = torch.from_dlpack(a32), torch.from_dlpack(b32)
    tc = torch.full_like(ta, float("nan"))
    c_t = cupy.from_dlpack(tc)
    prec = torch.backends.cuda.matmul
    prev = prec.fp32_precision
    prec.fp32_precision = "tf32"
    try:
        torch.matmul(ta, tb, out=tc)
        err_tf32 = gemm_check(a32, b32, c_t, tol=TF32_TOL, name="torch tf32")
        if err_tf32 > TF32_ENGAGED:
            e_tf32 = rec.time("gemm", "torch.matmul.tf32", lambda: torch.matmul(ta, tb, out=tc), dtype="tf32",
                              check=lambda: gemm_check(a32, b32, c_t, tol=TF32_TOL), **kw)
        else:
            e_tf32 = None
            print(f"TF32 did not engage (error {err_tf32:.1e} is fp32's): no tf32 entry recorded")
    finally:
        prec.fp32_precision = prev
    return Fp32Gemms(e_fp32, err_fp32, e_tf32, err_tf32)


def gemm_table(entries, sheet: dict | None, errors: dict):
    """Every GEMM entry with its fraction of the datasheet peak of its dtype and its checked error
    (``errors``: impl -> relative L2 error; bf16 rows say they passed the 1e-2 check)."""
    from utils.table import Table
    peaks = {"bfloat16": "bf16", "float32": "fp32", "tf32": "tf32"}

    def of_peak(e):
        key = peaks.get(e["dtype"])
        return f"{e['metric'] / sheet[key]:.0%}" if sheet and key else "n/a"
    return Table(["impl", "dtype", "shape", "ms", "TFLOP/s", "of datasheet peak", "rel. error (64 rows)"],
                 [[e["impl"], e["dtype"], "×".join(map(str, e["shape"])), f"{e['ms']:.3f}", f"{e['metric']:.1f}",
                   of_peak(e), f"{errors[e['impl']]:.1e}" if e["impl"] in errors else "bf16 checked < 1e-2"]
                  for e in entries])


def roofline_points(fma: dict, gemms) -> list[dict]:
    """The roofline's points: the FMA probe and the GEMMs (standard-normal data only), each with the
    bytes it moves at least (an entry recorded with FLOPs only gets A, B read once and C written once)."""
    itemsize = {"bfloat16": 2, "float32": 4, "tf32": 4}
    points = [fma]
    for e in gemms:
        if e.get("bytes"):
            points.append(e)
        else:
            m, n, k = e["shape"]
            points.append(dict(e, bytes=gemm_min_bytes(m, n, k, itemsize[e["dtype"]], itemsize[e["dtype"]])))
    return points


def print_ridge_points(ceil: dict, sheet: dict | None, a100: dict) -> None:
    """Ridge points (FLOP/B) from the measured ceilings, from this GPU's datasheet and from the A100's."""
    print(f"ridge points from the measured ceilings: FP32 {ridge_point(ceil['fma_fp32'], ceil['copy']):.1f} FLOP/B, "
          f"bf16 (cuBLAS) {ridge_point(ceil['cublas_bf16'], ceil['copy']):.0f} FLOP/B")
    if sheet:
        print(f"from the datasheet: FP32 {sheet['fp32'] / sheet['hbm_tbps']:.1f} FLOP/B, "
              f"bf16 {sheet['bf16'] / sheet['hbm_tbps']:.0f} FLOP/B")
    print(f"A100 datasheet for contrast: FP32 {a100['fp32'] / a100['hbm_tbps']:.1f} FLOP/B, "
          f"bf16 {a100['bf16'] / a100['hbm_tbps']:.0f} FLOP/B")


def resource_report() -> dict:
    """Registers, shared memory and stack of every probe: the ptxas report of the build, or, where that
    build came without its log, what the driver reports for the loaded kernels (no spill counts then)."""
    rep = SOURCE.ptxas()
    if rep:
        return rep
    out = {}
    for name in KERNELS:
        try:
            a = SOURCE.function(name).attributes
            out[name] = {"registers": a["num_regs"], "smem_bytes": a["shared_size_bytes"],
                         "stack_bytes": a["local_size_bytes"], "spill_stores": "n/a", "spill_loads": "n/a"}
        except Exception as e:  # noqa: BLE001 - a report is a courtesy: never stop the notebook for it
            out[name] = {"registers": f"n/a ({type(e).__name__})", "smem_bytes": "n/a", "stack_bytes": "n/a",
                         "spill_stores": "n/a", "spill_loads": "n/a"}
    return out


def clock_ghz(clk) -> float:
    """SM clock during a probe's loop, from its {cycles, ns} pair."""
    cycles, ns = (int(v) for v in (clk.get() if hasattr(clk, "get") else clk))
    if ns <= 0:
        raise ValueError(f"the probe recorded {ns} ns: the loop was too short to time")
    return cycles / ns




# ---------------------------------------------------------------------------------------------------
# Reading the L2 sweep: read bandwidth against working set, in three bands of working set.

L2_BANDS = ("below half the L2", "half to all of L2", "beyond the L2")


@dataclasses.dataclass(frozen=True)
class L2Sweep:
    ws_mib: np.ndarray        # working sets, MiB
    tbs: np.ndarray           # read bandwidth, TB/s
    hbm_read_tbs: float       # the flushed 1 GiB HBM read
    l2_mib: float
    level: dict               # band -> median TB/s (a band's median shrugs off one odd point)
    stays_mib: float | None   # from this working set on the curve stays below halfway plateau -> HBM read

    @property
    def plateau(self) -> float:
        return self.level[L2_BANDS[0]]

    def height(self, tbs: float) -> float:
        """Where a bandwidth sits between the HBM read (0) and the L2 plateau (1)."""
        return (tbs - self.hbm_read_tbs) / (self.plateau - self.hbm_read_tbs)

    def band(self, name: str) -> np.ndarray:
        w, half = self.ws_mib, self.l2_mib / 2
        sel = {L2_BANDS[0]: w < half, L2_BANDS[1]: (w >= half) & (w <= self.l2_mib), L2_BANDS[2]: w > self.l2_mib}
        return sel[name]


def l2_sweep(entries, l2_bytes: int, hbm_read_gbps: float) -> L2Sweep:
    """The L2 read sweep's entries (shape (floats,), metric GB/s) summarised in three bands of working set."""
    pts = sorted((e["shape"][0] * 4 / 2**20, e["metric"] / 1e3) for e in entries)
    ws, bw = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    l2_mib = l2_bytes / 2**20
    s = L2Sweep(ws, bw, hbm_read_gbps / 1e3, l2_mib, {}, None)
    for name in L2_BANDS:
        if not s.band(name).any():
            raise ValueError(f"expected sweep points {name} ({l2_mib:g} MiB), got working sets {ws.tolist()}")
        s.level[name] = float(np.median(bw[s.band(name)]))
    low = bw < (s.plateau + s.hbm_read_tbs) / 2
    stays = next((float(ws[i]) for i in range(len(ws)) if low[i:].all()), None)
    return dataclasses.replace(s, stays_mib=stays)


def l2_best(entries, l2_mib: float) -> dict:
    """The fastest point of the L2 sweep among working sets up to a third of the L2 (the plateau)."""
    return max((e for e in entries if e["shape"][0] * 4 / 2**20 <= l2_mib / 3), key=lambda e: e["metric"])


def print_l2_sweep(s: L2Sweep, best_tbs: float, sm_ghz: float | None, predicted_tbs: float = 10.0) -> None:
    """The sweep read out: the plateau against the prediction (and per clock), each band's median and
    height, where the curve stays below halfway, and the largest working set against the HBM read."""
    print(f"L2 read, best size below a third of the L2: {best_tbs:.2f} TB/s = {best_tbs / s.hbm_read_tbs:.2f}x the "
          f"HBM read; prediction ~{predicted_tbs:.0f} TB/s (ratio {best_tbs / predicted_tbs:.2f})")
    if sm_ghz:
        print(f"= {best_tbs * 1e12 / (sm_ghz * 1e9):,.0f} B/clk at the {sm_ghz:.2f} GHz max clock "
              f"(A100's whitepaper figure: 5120 B/clk)")
    for name in L2_BANDS:
        print(f"{name:18s} {', '.join(f'{w:.0f}' for w in s.ws_mib[s.band(name)]):>16s} MiB: median "
              f"{s.level[name]:.2f} TB/s, height {s.height(s.level[name]):.2f} (0 = HBM read, 1 = plateau)")
    if s.stays_mib is not None:
        print(f"the curve stays below halfway between plateau and HBM read from {s.stays_mib:.0f} MiB "
              f"({s.stays_mib / s.l2_mib:.1f}x the L2) on")
    print(f"largest working set, {s.ws_mib[-1]:.0f} MiB ({s.ws_mib[-1] / s.l2_mib:.1f}x the L2), unflushed: "
          f"{s.tbs[-1] / s.hbm_read_tbs:.2f}x the flushed HBM read")


def plot_l2_sweep(s: L2Sweep):
    """Read bandwidth against working set (log2), the HBM read, half of and the whole reported L2."""
    import matplotlib.pyplot as plt

    from utils.plot import figure, version_style
    fig, axes = figure(1, 1, height=3.4)
    ax = axes[0, 0]
    ax.plot(s.ws_mib, s.tbs, label="read_v1_vec4, buffer read repeatedly (no L2 flush)", **version_style(0))
    ax.axhline(s.hbm_read_tbs, color="0.4", ls="--", lw=0.9)     # labelled at the left: the curve ends on it
    ax.annotate("HBM read (1 GiB, L2 flushed)", xy=(0.0, s.hbm_read_tbs), xycoords=("axes fraction", "data"),
                xytext=(4, 3), textcoords="offset points", ha="left", va="bottom", fontsize=9, color="0.3")
    for x, label, ls in ((s.l2_mib / 2, "half of L2", ":"), (s.l2_mib, "L2 as reported", "--")):
        ax.axvline(x, color="0.5", ls=ls, lw=0.9)
        ax.annotate(f"{label}\n({x:.0f} MiB)", xy=(x, 0.04), xycoords=("data", "axes fraction"), xytext=(-3, 0),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.3")
    ax.set_xscale("log", base=2)
    # ticks at powers of two: the sweep's own sizes crowd together near the L2 size and their labels collide
    ticks = 2.0 ** np.arange(np.floor(np.log2(s.ws_mib.min())), np.ceil(np.log2(s.ws_mib.max())) + 1)
    ax.set_xticks(ticks, [f"{t:.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("working set (MiB)")
    ax.set_ylabel("TB/s read")
    ax.set_ylim(0, s.tbs.max() * 1.15)
    ax.legend(loc="upper right")
    ax.set_title("Read bandwidth vs working set")
    return fig


# ---------------------------------------------------------------------------------------------------
# Tables the chapter shows: the datasheets side by side, the clocks their peaks imply, the orientation.

PARTS = ("A100", "H100", "H200")


def shown(v, spec: str = ",.0f") -> str:
    """A figure formatted, or "n/a" where there is none."""
    return "n/a" if v is None else format(v, spec)


def datasheet_table(sheets: dict, parts=PARTS):
    """The parts' datasheet figures and their ridge points (peak / HBM bandwidth, FLOP per byte)."""
    from utils.table import Table
    rows = [[p, s["sms"], s["l2_mb"], s["smem_per_sm_kb"], s["hbm_gb"], f"{s['hbm_tbps']:.2f}", f"{s['fp32']:.1f}",
             f"{s['tf32']:.0f}", f"{s['bf16']:.0f}", shown(s["fp8"]), f"{s['fp32'] / s['hbm_tbps']:.1f}",
             f"{s['bf16'] / s['hbm_tbps']:.0f}"] for p, s in ((p, sheets[p]) for p in parts)]
    return Table(["part", "SMs", "L2 (MB)", "smem/SM (KB)", "HBM (GB)", "HBM (TB/s)", "FP32", "TF32", "BF16", "FP8",
                  "ridge FP32 (FLOP/B)", "ridge BF16 (FLOP/B)"], rows,
                 caption="rates in dense TFLOP/s (vendor datasheets, SXM parts); L2: the A100 and H100 figures are "
                         "NVIDIA's, the H200 datasheet gives none and 60 is what the H200 reports")


def implied_clock_table(sheets: dict, parts=PARTS):
    """FLOP per clock per SM of each part, and the SM clock each datasheet peak implies."""
    from utils.table import Table
    rows = []
    for p in parts:
        s, pc = sheets[p], PER_SM_PER_CLOCK[p]
        rows.append([p, pc["fp32"], pc["tf32"], pc["bf16"], shown(pc["fp8"]),
                     *[f"{implied_clock_ghz(s[k], s['sms'], pc[k]):.2f}" for k in ("fp32", "tf32", "bf16")]])
    return Table(["part", "FP32 FLOP/clk/SM", "TF32", "BF16", "FP8", "clock implied by FP32 peak (GHz)", "by TF32",
                  "by BF16"], rows)


def orientation(entries, fma_tflops: float | None = None, fp32_sheet: float | None = None):
    """This run's ceilings beside ORIENTATION_H200 (and the FMA probe beside the datasheet's FP32 peak):
    returns (Table, {impl: measured / orientation})."""
    from utils.record import select
    from utils.table import Table
    rows, ratio = [], {}
    for key, (unit, ref) in ORIENTATION_H200.items():
        match = {"shape": [key[2]] * 3} if len(key) == 3 else {}
        name = f"{key[1]} {'x'.join(map(str, match.get('shape', [])))}".strip()
        hits = select(entries, op=key[0], impl=key[1], **match)
        if not hits:
            rows.append([name, "not measured", f"{ref:,.0f} {unit}", "", ""])
            continue
        v = hits[0]["metric"]
        ratio[key[1]] = v / ref
        rows.append([name, f"{v:,.1f} {unit}", f"{ref:,.0f} {unit}", f"{v / ref:.3f}",
                     "yes" if abs(v / ref - 1) <= 0.10 else "NO"])
    if fma_tflops is not None and fp32_sheet:
        r = fma_tflops / fp32_sheet
        rows.append(["ceiling.fma_fp32", f"{fma_tflops:.2f} TFLOP/s", f"{fp32_sheet} TFLOP/s (datasheet)", f"{r:.3f}",
                     "yes" if abs(r - 1) <= 0.10 else "NO"])
    return Table(["ceiling", "measured here", "orientation (earlier H200 run)", "ratio", "within 10%"], rows), ratio
