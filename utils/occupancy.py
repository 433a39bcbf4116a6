"""One occupancy formula: how many blocks of a kernel an SM holds at once, and what stops the next one.

The rules are those of ``cuda_occupancy.h`` (CUDA 13.0; ``cudaOccMaxActiveBlocksPerMultiprocessor``),
for compute capability 8.0 and 9.0 with the default shared-memory carveout, and
``tests/gpu/test_occupancy_gpu.py`` checks them against the driver's
``cuOccupancyMaxActiveBlocksPerMultiprocessor``:

- warps: a block takes ceil(threads / 32) warp slots of the SM's 64;
- registers: given out per warp in units of 256 (registers per thread rounded up to a multiple of 8),
  from each of the SM's 4 register-file partitions separately (so a partition's 16K registers hold
  whole warps); a block whose warps, rounded up to a multiple of 4, need more than the 64K registers a
  block may have does not launch;
- shared memory: static + dynamic + the 1 KiB the driver reserves per block, rounded up to 128 bytes,
  out of the SM's 228 KiB (164 KiB on sm_80); a block over the opt-in limit does not launch;
- blocks: at most 32 per SM.

Not modelled: named-barrier limits (sm_90 kernels using more than two of the 16 named barriers), a
carveout preference set on the function, and partitioned global caching (pre-Volta).
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping

from .arrays import ceil_div
from .gpu import has_gpu
from .hardware import Facts
from .hardware import facts as hardware_facts

LIMITERS = ("threads", "registers", "smem", "blocks")   # the order ties are reported in, as the header does


@dataclasses.dataclass(frozen=True)
class Occupancy:
    blocks: int                  # resident blocks per SM: the minimum of the four limits
    limiter: str                 # which limit that is: 'threads', 'registers', 'smem' or 'blocks'
    by_threads: int              # blocks the SM's warp slots allow
    by_registers: int | None     # blocks the register file allows (None: the kernel uses no registers)
    by_smem: int                 # blocks shared memory allows (0: one block does not fit)
    by_blocks: int               # the hardware's cap on resident blocks
    warps: int                   # resident warps per SM
    occupancy_fraction: float    # warps / the SM's warp slots
    smem_per_block: int          # bytes a block is allocated: static + dynamic + reserved, rounded up
    registers_per_warp: int      # registers a warp is allocated


def _count(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high]; ValueError saying what was expected otherwise."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)          # ints and NumPy integers; not floats, not strings
    except TypeError:
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an integer {bound}, got {value}")
    return value


def registers_per_warp(registers_per_thread: int, f: Facts) -> int:
    """Registers a warp is allocated: per-thread count times 32, rounded up to the allocation unit."""
    return ceil_div(registers_per_thread * f.warp_size, f.reg_alloc_unit) * f.reg_alloc_unit


def blocks_by_registers(warps_per_block: int, per_warp: int, f: Facts) -> int | None:
    """Blocks the register file holds (cudaOccMaxBlocksPerSMRegsLimit); None when no registers are used."""
    if per_warp == 0:
        return None
    # The launch check counts a block's warps rounded up to a multiple of the 4 partitions (as if
    # allocated to all of them at once) against the per-block limit.
    assumed = per_warp * ceil_div(warps_per_block, f.reg_sub_partitions) * f.reg_sub_partitions
    if assumed > f.regs_per_block:
        return 0
    warps_per_partition = f.regs_per_sm // f.reg_sub_partitions // per_warp
    return warps_per_partition * f.reg_sub_partitions // warps_per_block


def smem_allocated(smem_static: int, smem_dynamic: int, f: Facts) -> int:
    """Bytes of shared memory a block is allocated: its own plus the reserved 1 KiB, rounded up."""
    need = smem_static + smem_dynamic + f.reserved_smem_per_block
    return ceil_div(need, f.smem_alloc_unit) * f.smem_alloc_unit


def blocks_by_smem(per_block: int, f: Facts) -> int:
    """Blocks shared memory holds (cudaOccMaxBlocksPerSMSmemLimit, default carveout, opted in)."""
    if per_block > f.smem_per_block_optin + f.reserved_smem_per_block:
        return 0
    return f.smem_per_sm // per_block


def blocks_per_sm(threads: int, registers_per_thread: int, smem_static: int = 0, smem_dynamic: int = 0,
                  facts: Facts | None = None) -> Occupancy:
    """Resident blocks per SM of a kernel launched with ``threads`` per block.

    ``registers_per_thread`` and ``smem_static`` as the ptxas report (or the loaded function) gives
    them, ``smem_dynamic`` the launch's dynamic shared memory in bytes. ``facts``: the hardware to
    plan for (default :func:`utils.hardware.facts`: this GPU, or the H200 on a CPU). Assumes a launch
    with more than 48 KiB of dynamic shared memory has opted in (``utils.build.prepare_launch`` does).
    """
    f = hardware_facts() if facts is None else facts
    threads = _count("threads", threads, 1, f.max_threads_per_block)
    regs = _count("registers_per_thread", registers_per_thread, 0, f.max_regs_per_thread)
    smem_static = _count("smem_static", smem_static, 0)
    smem_dynamic = _count("smem_dynamic", smem_dynamic, 0)

    warps_per_block = ceil_div(threads, f.warp_size)
    max_warps = f.max_threads_per_sm // f.warp_size
    per_warp = registers_per_warp(regs, f)
    per_block = smem_allocated(smem_static, smem_dynamic, f)
    limits = {
        "threads": max_warps // warps_per_block,
        "registers": blocks_by_registers(warps_per_block, per_warp, f),
        "smem": blocks_by_smem(per_block, f),
        "blocks": f.max_blocks_per_sm,
    }
    blocks = min(v for v in limits.values() if v is not None)
    limiter = next(k for k in LIMITERS if limits[k] == blocks)
    warps = blocks * warps_per_block
    return Occupancy(blocks=blocks, limiter=limiter, by_threads=limits["threads"],
                     by_registers=limits["registers"], by_smem=limits["smem"], by_blocks=limits["blocks"],
                     warps=warps, occupancy_fraction=warps / max_warps, smem_per_block=per_block,
                     registers_per_warp=per_warp)


def kernel_resources(kernel) -> tuple[int, int]:
    """(registers per thread, static shared memory bytes) of a loaded kernel or a ptxas report entry."""
    if isinstance(kernel, Mapping):
        if "registers" not in kernel:
            raise ValueError("expected one kernel's ptxas report entry (a dict with 'registers' and "
                             f"'smem_bytes'), got a dict with keys {sorted(kernel)[:6]}; index the report "
                             "by the kernel's (mangled) name first")
        return int(kernel["registers"]), int(kernel.get("smem_bytes", 0))
    if hasattr(kernel, "num_regs") and hasattr(kernel, "shared_size_bytes"):
        return int(kernel.num_regs), int(kernel.shared_size_bytes)
    raise ValueError("expected a loaded kernel (cupy.RawKernel: num_regs, shared_size_bytes) or a ptxas "
                     f"report entry (dict with 'registers', 'smem_bytes'), got {type(kernel).__name__}")


def from_function(kernel, threads: int, smem_dynamic: int = 0, facts: Facts | None = None) -> Occupancy:
    """:func:`blocks_per_sm` of a loaded kernel (``KernelSource.function(name)``) or of its ptxas report
    entry (``KernelSource.ptxas()[mangled_name]``), launched with ``threads`` and ``smem_dynamic``."""
    registers, smem_static = kernel_resources(kernel)
    return blocks_per_sm(threads, registers, smem_static, smem_dynamic, facts)


def clusters_per_device(fn, threads: int, smem_dynamic: int = 0, cluster: int = 1) -> int | None:
    """Clusters of ``cluster`` blocks of the loaded kernel ``fn`` (compiled with ``__cluster_dims__``)
    that the whole GPU holds at once, as the driver says (``cuOccupancyMaxActiveClusters``: per-SM
    occupancy and how clusters pack into GPCs). None without a GPU, or where the driver cannot say."""
    threads = _count("threads", threads, 1)
    smem_dynamic = _count("smem_dynamic", smem_dynamic, 0)
    cluster = _count("cluster", cluster, 1)
    if not has_gpu():
        return None
    from .build import max_active_clusters, prepare_launch
    prepare_launch(fn, cluster, smem_dynamic)   # clusters over 8 and > 48 KiB smem must be opted into
    return max_active_clusters(fn, threads, smem_dynamic, cluster)


def waves(grid_blocks: int, occ: Occupancy, sms: int | None = None) -> float:
    """How many full waves a grid of ``grid_blocks`` takes at occupancy ``occ`` on ``sms`` SMs."""
    grid_blocks = _count("grid_blocks", grid_blocks, 0)
    sms = hardware_facts().sms if sms is None else _count("sms", sms, 1)
    if occ.blocks == 0:
        raise ValueError("expected an occupancy of at least one block per SM, got 0 (the block does not fit)")
    return grid_blocks / (occ.blocks * sms)
