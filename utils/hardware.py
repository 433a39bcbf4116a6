"""Hardware facts labelled with their sources, datasheet leads, and the measured ceilings.

:func:`facts` is the one place kernels and chapters ask for SM count, shared memory, registers and the
rest: read off the device where the driver can say, from the architecture tables and the parts'
public documents otherwise (a CPU plan gets the H200's numbers), every value labelled with where it
came from. Datasheet peaks (:data:`DATASHEET`) are leads, not ceilings: the ceilings every chapter
compares against are *measured* by the book (chapter 2 records them as impl ``ceiling.*``), and a
chapter that states a ratio to copy bandwidth measures the copy again in its own run.
"""
from __future__ import annotations

import dataclasses
import functools
import html
from collections.abc import Iterator, Mapping

from .gpu import device_summary, gpu_slug, has_gpu, require_gpu
from .paths import RESULTS

# Vendor figures (SXM parts). Bandwidth in TB/s, rates in TFLOP/s (dense), sizes as named.
# L2 sizes are NVIDIA's "MB", which are binary: the devices report 40, 50 and 60 MiB.
#   A100 40 MB: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020).
#   H100 50 MB: NVIDIA Technical Blog, "NVIDIA Hopper Architecture In-Depth" (2022-03-22,
#     https://developer.nvidia.com/blog/nvidia-hopper-architecture-in-depth/): "A 50 MB L2 cache in H100
#     is 1.25x larger than the A100 40 MB L2"; the full GH100 die carries 60 MB.
#   H200 60 MB: NOT from a datasheet. NVIDIA's H200 datasheet (Nov 2024) gives no L2 size; 60 MiB is what
#     the H200 itself reports (cudaGetDeviceProperties.l2CacheSize = 62,914,560 bytes, chapter 1's stored
#     output of the book's H200 run): the H200 enables the whole 60 MB of the GH100 die's L2.
DATASHEET = {
    "H200": dict(sms=132, hbm_tbps=4.8, hbm_gb=141, l2_mb=60, smem_per_sm_kb=228, fp32=67.0,
                 tf32=494.7, bf16=989.4, fp8=1978.9, boost_mhz=1980),
    "H100": dict(sms=132, hbm_tbps=3.35, hbm_gb=80, l2_mb=50, smem_per_sm_kb=228, fp32=67.0,
                 tf32=494.7, bf16=989.4, fp8=1978.9, boost_mhz=1980),
    "A100": dict(sms=108, hbm_tbps=2.039, hbm_gb=80, l2_mb=40, smem_per_sm_kb=164, fp32=19.5,
                 tf32=156.0, bf16=312.0, fp8=None, boost_mhz=1410),
}


def datasheet(name: str | None = None) -> dict:
    """The datasheet entry matching a device name ('NVIDIA H200' -> H200); the running GPU if None."""
    if name is None:
        name = device_summary()["name"]
    for key, spec in DATASHEET.items():
        if key in name.upper():
            return {"part": key, **spec}
    raise KeyError(f"no datasheet figures for {name!r}; known parts: {sorted(DATASHEET)}")


# --- facts: one value, its unit, and where it came from ----------------------------------------------

@dataclasses.dataclass(frozen=True)
class Fact:
    value: int | str
    unit: str
    source: str


class FactTable:
    """Rows (name, value, unit, source) that Jupyter shows as an HTML table and the book as markdown."""

    def __init__(self, rows: list[tuple[str, str, str, str]]):
        self.rows = rows

    def _repr_html_(self) -> str:
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                        for row in self.rows)
        return ("<table><thead><tr><th>name</th><th>value</th><th>unit</th><th>source</th></tr></thead>"
                f"<tbody>{cells}</tbody></table>")

    def _repr_markdown_(self) -> str:
        lines = ["| name | value | unit | source |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in self.rows]
        return "\n".join(lines)

    __str__ = _repr_markdown_


def _shown(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


class Facts(Mapping):
    """Name -> :class:`Fact`. ``facts["sms"]`` is the Fact; ``facts.sms`` is its value."""

    def __init__(self, part: str, on_device: bool, entries: dict[str, Fact]):
        self.part, self.on_device = part, on_device
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> Fact:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getattr__(self, name: str):
        if name.startswith("_"):                       # copy/pickle probe dunders before __init__ ran
            raise AttributeError(name)
        try:
            return self._entries[name].value
        except KeyError:
            raise AttributeError(f"no hardware fact {name!r}; known: {', '.join(self._entries)}") from None

    def table(self, names=None) -> FactTable:
        """The facts ``names`` (all if None) as a table: name, value, unit, source."""
        names = list(self._entries) if names is None else list(names)
        unknown = [n for n in names if n not in self._entries]
        if unknown:
            raise ValueError(f"expected names of hardware facts ({', '.join(self._entries)}), got {unknown}")
        return FactTable([(n, _shown(self[n].value), self[n].unit, self[n].source) for n in names])

    def _repr_html_(self) -> str:                  # a notebook cell ending in facts() shows the table
        return self.table()._repr_html_()

    def _repr_markdown_(self) -> str:
        return self.table()._repr_markdown_()

    def __repr__(self) -> str:
        where = "read off the device" if self.on_device else "from documents, no device asked"
        return f"<Facts {self.part} ({where}): " + ", ".join(f"{n}={self[n].value!r}" for n in self) + ">"


# Read off the device: fact -> (cudaDeviceAttr enumerator, its value in CUDA 13's driver_types.h, unit).
DEVICE_ATTRIBUTES = {
    "sms": ("cudaDevAttrMultiProcessorCount", 16, "SMs"),
    "l2_bytes": ("cudaDevAttrL2CacheSize", 38, "bytes"),
    "smem_per_sm": ("cudaDevAttrMaxSharedMemoryPerMultiprocessor", 81, "bytes"),
    "smem_per_block_optin": ("cudaDevAttrMaxSharedMemoryPerBlockOptin", 97, "bytes"),
    "reserved_smem_per_block": ("cudaDevAttrReservedSharedMemoryPerBlock", 111, "bytes"),
    "regs_per_sm": ("cudaDevAttrMaxRegistersPerMultiprocessor", 82, "32-bit registers"),
    "regs_per_block": ("cudaDevAttrMaxRegistersPerBlock", 12, "32-bit registers"),
    "max_threads_per_sm": ("cudaDevAttrMaxThreadsPerMultiProcessor", 39, "threads"),
    "max_threads_per_block": ("cudaDevAttrMaxThreadsPerBlock", 1, "threads"),
    "max_blocks_per_sm": ("cudaDevAttrMaxBlocksPerMultiprocessor", 106, "blocks"),
    "warp_size": ("cudaDevAttrWarpSize", 10, "threads"),
    "sm_clock_khz": ("cudaDevAttrClockRate", 13, "kHz"),
    "mem_bus_bits": ("cudaDevAttrGlobalMemoryBusWidth", 37, "bits"),
}
CC_ATTRIBUTES = (("cudaDevAttrComputeCapabilityMajor", 75), ("cudaDevAttrComputeCapabilityMinor", 76))

# What the device does not report: the per-SM limits of a compute capability, for a CPU plan.
PROGRAMMING_GUIDE = ("architecture: CUDA C++ Programming Guide, Technical Specifications per Compute "
                     "Capability, compute capability {cc} column")
RESERVED_SMEM_SOURCE = ("architecture: CUDA C++ Programming Guide, compute capability 8.x/9.0 shared memory: "
                        "1 KB per thread block is reserved for system use")
ARCHITECTURE = {
    "8.0": dict(smem_per_sm=164 * 1024, smem_per_block_optin=163 * 1024),
    "9.0": dict(smem_per_sm=228 * 1024, smem_per_block_optin=227 * 1024),
}
COMMON_LIMITS = dict(regs_per_sm=65536, regs_per_block=65536, max_threads_per_sm=2048,
                     max_threads_per_block=1024, max_blocks_per_sm=32, warp_size=32)

# How the hardware hands resources out (cuda_occupancy.h of CUDA 13.0, by compute capability major;
# the same numbers for 8.x to 12.x). Neither the device nor the Programming Guide tables say these.
OCCUPANCY_HEADER = "architecture: cuda_occupancy.h (CUDA 13.0), {}"
ALLOCATION_RULES = {
    # major: (registers per allocation unit, shared memory allocation granularity in bytes)
    7: (256, 256), 8: (256, 128), 9: (256, 128), 10: (256, 128), 11: (256, 128), 12: (256, 128),
}
REG_SUB_PARTITIONS = 4                     # cudaOccSubPartitionsPerMultiprocessor for every cc >= 7
MAX_REGS_PER_THREAD = 255                  # what ptxas can allocate to one thread


def allocation_facts(cc: str) -> dict[str, Fact]:
    """The allocation rules the occupancy formula needs, for compute capability ``cc`` ('9.0')."""
    major = int(cc.split(".")[0])
    if major not in ALLOCATION_RULES:
        raise LookupError(f"no allocation rules for compute capability {cc}; known majors: "
                          f"{sorted(ALLOCATION_RULES)}")
    reg_unit, smem_unit = ALLOCATION_RULES[major]
    return {
        "reg_alloc_unit": Fact(reg_unit, "registers per warp",
                               OCCUPANCY_HEADER.format("cudaOccRegAllocationGranularity")),
        "reg_sub_partitions": Fact(REG_SUB_PARTITIONS, "register file partitions per SM",
                                   OCCUPANCY_HEADER.format("cudaOccSubPartitionsPerMultiprocessor")),
        "smem_alloc_unit": Fact(smem_unit, "bytes",
                                OCCUPANCY_HEADER.format("cudaOccSMemAllocationGranularity")),
        "max_regs_per_thread": Fact(MAX_REGS_PER_THREAD, "32-bit registers",
                                    PROGRAMMING_GUIDE.format(cc=cc) + " (maximum registers per thread)"),
    }


# The parts a CPU plan may ask for: what belongs to the part, not to its compute capability.
HOPPER_BLOG = ("NVIDIA Technical Blog, 'NVIDIA Hopper Architecture In-Depth' (2022-03-22), "
               "https://developer.nvidia.com/blog/nvidia-hopper-architecture-in-depth/")
A100_WHITEPAPER = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"
H200_RUN = "recorded: the book's H200 run, {} (stored output of chapter {})"
# NVIDIA's memory "GB" are binary; a device reports a little less (totalGlobalMem: what the driver leaves).
BINARY_GB = " (binary GB, as NVIDIA counts; the device's totalGlobalMem is a little less)"
PARTS = {
    "H200": dict(
        name=("NVIDIA H200", "", "datasheet: NVIDIA H200 Tensor Core GPU datasheet (Nov 2024)"),
        cc=("9.0", "", "datasheet: NVIDIA H200 Tensor Core GPU datasheet (Nov 2024): Hopper"),
        sms=(132, "SMs", H200_RUN.format("cudaGetDeviceProperties.multiProcessorCount", 1)
             + "; the same GH100 configuration as H100 SXM5 (" + HOPPER_BLOG + ")"),
        l2_bytes=(60 * 2**20, "bytes", H200_RUN.format("cudaGetDeviceProperties.l2CacheSize = 62,914,560", 1)
                  + "; the H200 datasheet (Nov 2024) gives no L2 size; the full GH100 die has 60 MB ("
                  + HOPPER_BLOG + ")"),
        hbm_bytes=(141 * 2**30, "bytes", "datasheet: NVIDIA H200 Tensor Core GPU datasheet (Nov 2024): "
                   "141 GB HBM3e" + BINARY_GB),
        sm_clock_khz=(1_980_000, "kHz", H200_RUN.format("cudaDevAttrClockRate (max SM clock)", 2)),
        mem_bus_bits=(6016, "bits", H200_RUN.format("cudaDevAttrGlobalMemoryBusWidth", 2)),
    ),
    "H100": dict(
        name=("NVIDIA H100 SXM5", "", "datasheet: NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
        cc=("9.0", "", "datasheet: " + HOPPER_BLOG),
        sms=(132, "SMs", "datasheet: " + HOPPER_BLOG + ": H100 SXM5 has 132 SMs"),
        l2_bytes=(50 * 2**20, "bytes", "datasheet: " + HOPPER_BLOG + ": 50 MB L2 in H100"),
        hbm_bytes=(80 * 2**30, "bytes", "datasheet: NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3"
                   + BINARY_GB),
        sm_clock_khz=(1_980_000, "kHz", "datasheet lead: DATASHEET['H100']['boost_mhz'] (max boost clock; "
                      "not read off an H100 by this book)"),
        mem_bus_bits=(5120, "bits", "datasheet: " + HOPPER_BLOG + ": five HBM3 stacks, ten 512-bit "
                      "memory controllers"),
    ),
    "A100": dict(
        name=("NVIDIA A100 SXM4 80GB", "", "datasheet: NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB)"),
        cc=("8.0", "", "datasheet: " + A100_WHITEPAPER),
        sms=(108, "SMs", "datasheet: " + A100_WHITEPAPER + ": A100 has 108 SMs"),
        l2_bytes=(40 * 2**20, "bytes", "datasheet: " + A100_WHITEPAPER + ": 40 MB L2"),
        hbm_bytes=(80 * 2**30, "bytes", "datasheet: NVIDIA A100 Tensor Core GPU datasheet: 80 GB HBM2e"
                   + BINARY_GB),
        sm_clock_khz=(1_410_000, "kHz", "datasheet: " + A100_WHITEPAPER + ": 1410 MHz boost clock"),
        mem_bus_bits=(5120, "bits", "datasheet: " + A100_WHITEPAPER + ": five HBM2 stacks, ten 512-bit "
                      "memory controllers"),
    ),
}
DEFAULT_PART = "H200"                      # the book's GPU: what a CPU plan assumes


@functools.cache
def part_facts(part: str) -> Facts:
    """Facts of a named part ('H200', 'H100', 'A100') from documents: no device is asked. Cached: a
    kernel's CPU plan may ask on every call."""
    key = part.upper()
    if key not in PARTS:
        raise ValueError(f"expected a part among {sorted(PARTS)}, got {part!r}")
    entries = {name: Fact(*spec) for name, spec in PARTS[key].items()}
    cc = entries["cc"].value
    source = PROGRAMMING_GUIDE.format(cc=cc)
    units = {name: DEVICE_ATTRIBUTES[name][2] for name in DEVICE_ATTRIBUTES}
    for name, value in {**ARCHITECTURE[cc], **COMMON_LIMITS}.items():
        entries[name] = Fact(value, units[name], source)
    entries["reserved_smem_per_block"] = Fact(1024, "bytes", RESERVED_SMEM_SOURCE)
    entries.update(allocation_facts(cc))
    return Facts(key, False, entries)


@functools.lru_cache(maxsize=None)
def device_facts(device: int = 0) -> Facts:
    """Facts read off CUDA device ``device`` (cudaDeviceGetAttribute, cudaGetDeviceProperties)."""
    require_gpu()
    import cupy
    attr = cupy.cuda.runtime.deviceGetAttribute
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    cc = ".".join(str(attr(number, device)) for _, number in CC_ATTRIBUTES)
    entries = {
        "name": Fact(name, "", "device: cudaGetDeviceProperties.name"),
        "cc": Fact(cc, "", "device: cudaDeviceGetAttribute(" + ", ".join(e for e, _ in CC_ATTRIBUTES) + ")"),
    }
    for fact, (enum, number, unit) in DEVICE_ATTRIBUTES.items():
        entries[fact] = Fact(int(attr(number, device)), unit, f"device: cudaDeviceGetAttribute({enum})")
    entries["hbm_bytes"] = Fact(int(props["totalGlobalMem"]), "bytes",
                                "device: cudaGetDeviceProperties.totalGlobalMem")
    entries.update(allocation_facts(cc))
    return Facts(name, True, entries)


def facts(part: str | None = None, device: int = 0) -> Facts:
    """The hardware facts, each labelled with its source.

    ``part=None``: read off the GPU when there is one, else the H200's documented figures (the book's
    GPU), so a kernel's CPU plan sizes a persistent grid as it would on the H200. ``part='A100'`` (or
    'H100', 'H200'): that part's documented figures, whatever GPU is present.
    """
    if part is not None:
        return part_facts(part)
    return device_facts(device) if has_gpu() else part_facts(DEFAULT_PART)


# --- measured ceilings ---------------------------------------------------------------------------------

CEILING_IMPLS = {
    "copy": "ceiling.copy",            # device-to-device copy, GB/s counting read + write
    "fma_fp32": "ceiling.fma_fp32",    # FP32 FMA rate, TFLOP/s
    "cublas_bf16": "cublas_bf16",      # cuBLAS bf16 GEMM, TFLOP/s
}


def ceilings(gpu: str | None = None, notebook: str = "02-hopper-architecture") -> dict:
    """Measured ceilings from chapter 2's record: {'copy': GB/s, 'fma_fp32': TFLOP/s, ...}.

    Chapters use these for rooflines; ratios that targets are judged by are taken in the chapter's own run.
    """
    from .record import load
    gpu = gpu or gpu_slug()
    out = {}
    entries = load(gpu, notebook)
    for name, impl in CEILING_IMPLS.items():
        hits = [e for e in entries if e["impl"] == impl]
        if hits:
            out[name] = max(hits, key=lambda e: e["metric"])["metric"]
    if not out:
        raise LookupError(f"no measured ceilings for {gpu} in {RESULTS / gpu / (notebook + '.json')}; "
                          "execute chapter 2 on this GPU first")
    return out


def _copy_job(nbytes: int):
    """(n, run, check) for a device-to-device copy (cudaMemcpyAsync) of ``nbytes`` of fp32."""
    require_gpu()
    import cupy
    n = nbytes // 4
    src = cupy.random.standard_normal(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)

    def run():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, n * 4,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)

    def check():
        if not bool((dst == src).all()):
            raise AssertionError("device-to-device copy produced different bytes")

    return n, run, check


def measure_copy(rec, nbytes: int = 1 << 30) -> dict:
    """Device-to-device copy (cudaMemcpyAsync) of ``nbytes``: the HBM ceiling, recorded as ceiling.copy.

    Counts bytes read plus bytes written, as every bandwidth figure in the book does.
    """
    n, run, check = _copy_job(nbytes)
    return rec.time("copy", CEILING_IMPLS["copy"], run, dtype="float32", shape=(n,),
                    nbytes=2 * n * 4, is_peer=True, check=check)


def measure_copy_same_bytes(rec, nbytes: int) -> dict:
    """A device-to-device copy of ``nbytes`` (read ``nbytes``, write ``nbytes``), recorded as op
    ``copy_same_bytes``: what a plain copy of one kernel's input reaches at that size under the same bench,
    launch and ramp included. A kernel that reads and writes those bytes once cannot beat it; on inputs of a
    few tens of MB it sits well below the 1 GiB ``ceiling.copy``."""
    n, run, check = _copy_job(nbytes)
    return rec.time("copy_same_bytes", CEILING_IMPLS["copy"], run, dtype="float32", shape=(n,),
                    nbytes=2 * n * 4, is_peer=True, check=check)


def copy_gbps(nbytes: int = 1 << 30, **bench_kw) -> float:
    """The same copy ceiling in GB/s (read + written), timed without a record (tuning scripts)."""
    from .bench import bench
    n, run, check = _copy_job(nbytes)
    t = bench(run, **bench_kw)
    check()
    return 2 * n * 4 / (t.ms * 1e-3) / 1e9


def measure_cublas_bf16(rec, n: int = 8192) -> dict:
    """cuBLAS bf16 GEMM (n×n×n, fp32 accumulation) on standard-normal data, recorded as cublas_bf16."""
    require_gpu()
    import cupy
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(bf16)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(bf16)
    c = cupy.empty((n, n), dtype=bf16)

    def run():
        cupy.matmul(a, b, out=c)

    def check():
        from .check import assert_close
        rows = slice(0, 64)
        ref = a[rows].astype(cupy.float32) @ b.astype(cupy.float32)
        assert_close(c[rows], ref, dtype="bfloat16", name="cuBLAS bf16 GEMM")

    return rec.time("gemm", CEILING_IMPLS["cublas_bf16"], run, dtype="bfloat16", shape=(n, n, n),
                    flops=2.0 * n ** 3, nbytes=3 * n * n * 2, is_peer=True, check=check, flush=False)
