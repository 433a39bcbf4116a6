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

from utils.build import KernelSource
from utils.check import CheckFailed
from utils.arrays import xp as array_module
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
    "A100": dict(fp32=128, tf32=1024, bf16=2048, fp8=None, smem_bytes=128),
    "H100": dict(fp32=256, tf32=2048, bf16=4096, fp8=8192, smem_bytes=128),
    "H200": dict(fp32=256, tf32=2048, bf16=4096, fp8=8192, smem_bytes=128),
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
            except Exception:
                out[key] = None
    return out


def hbm_peak_gbps(mem_khz: float, bus_bits: int) -> float:
    """Peak DRAM bandwidth from the memory clock and bus width: two transfers per clock (DDR)."""
    return mem_khz * 1e3 * 2 * bus_bits / 8 / 1e9


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


FMA_EXACT = dict(m=1.0, c=2.0 ** -10)
# A busy multiplier: |m| just under 1 (16 set mantissa bits) and the sign flipping every step, so the
# values oscillate around c / (1 - m) = 1.5 without settling for ~65536 steps. Rounding errors are
# damped by |m| per step only: after 32768 steps the result sits about 1e-4 (relative L2) from the
# float64 closed form in an emulation (tests/test_ceilings_host.py); the tolerance is 1e-3.
FMA_BUSY = dict(m=-(1.0 - 2.0 ** -16), c=3.0)
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
            out[name] = dict(registers=a["num_regs"], smem_bytes=a["shared_size_bytes"],
                                 stack_bytes=a["local_size_bytes"], spill_stores="n/a", spill_loads="n/a")
        except Exception as e:  # a report is a courtesy: never stop the notebook for it
            out[name] = dict(registers=f"n/a ({type(e).__name__})", smem_bytes="n/a", stack_bytes="n/a",
                                 spill_stores="n/a", spill_loads="n/a")
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


def plot_l2_sweep(s: L2Sweep):
    """Read bandwidth against working set (log2), the HBM read, half of and the whole reported L2."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(s.ws_mib, s.tbs, "o-", label="read_v1_vec4, buffer read repeatedly (no L2 flush)")
    ax.axhline(s.hbm_read_tbs, color="gray", ls="--", lw=1, label="HBM read (1 GiB, L2 flushed)")
    ax.axvline(s.l2_mib / 2, color="tab:orange", ls=":", lw=1, label=f"half of L2 ({s.l2_mib / 2:.0f} MiB)")
    ax.axvline(s.l2_mib, color="tab:red", ls=":", lw=1, label=f"L2 as reported ({s.l2_mib:.0f} MiB)")
    ax.set_xscale("log", base=2)
    # ticks at powers of two: the sweep's own sizes crowd together near the L2 size and their labels collide
    ticks = 2.0 ** np.arange(np.floor(np.log2(s.ws_mib.min())), np.ceil(np.log2(s.ws_mib.max())) + 1)
    ax.set_xticks(ticks, [f"{t:.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("working set (MiB)")
    ax.set_ylabel("TB/s read")
    ax.set_ylim(0, s.tbs.max() * 1.15)
    ax.legend(fontsize=8)
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
