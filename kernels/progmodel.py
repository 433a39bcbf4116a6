"""Chapter 3 host side: thread indexing, waves of blocks, block sums and a filter with cooperative groups.

Everything here imports without a GPU: references, the wave model and launch checks are plain
Python/NumPy; CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from utils.arrays import ceil_div
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.check import CheckFailed
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


def device_facts(dev: dict):
    """The device properties the chapter's predictions use (from ``utils.device_summary()``), as a Table."""
    from utils.table import Table
    facts = [("SMs", dev["sms"]), ("max resident threads per SM", dev["max_threads_per_sm"]),
             ("max resident warps per SM", dev["max_threads_per_sm"] // WARP),
             ("32-bit registers per SM", dev["regs_per_sm"]),
             ("shared memory per SM (bytes)", dev["smem_per_sm"]),
             ("shared memory per block, opt-in (bytes)", dev["smem_per_block_optin"]),
             ("L2 (MiB)", dev["l2_bytes"] / 2**20)]
    return Table(["property (reported by the device)", "value"], [(k, f"{v:,.0f}") for k, v in facts])


WHOAMI_PICK = (0, 1, 4, 5, 31, 32, 59, 60, 61, 421, -1)   # the rows the chapter's text reads


def describe_whoami(table, grid, block) -> str:
    """Three lines on a checked whoami table: threads and blocks, how a block splits into warps (idle
    lanes), and on how many SMs the blocks landed."""
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    g, b = check_launch_shape(grid, block)
    blocks, per_block = math.prod(g), math.prod(b)
    f = {name: i for i, name in enumerate(WHOAMI_FIELDS)}
    warp_sizes = np.bincount(t[t[:, f["block_linear"]] == 0, f["warp"]])
    lanes = WARP * len(warp_sizes)
    return "\n".join([
        (f"{t.shape[0]} threads = {blocks} blocks x {per_block}: every field but smid matches the formulas; "
         f"%laneid == tid % 32 on all of them"),
        (f"a block holds {len(warp_sizes)} warps of {warp_sizes.tolist()} threads: {lanes - per_block} of its "
         f"{lanes} lanes idle"),
        f"the {blocks} blocks landed on {len(np.unique(t[:, SMID]))} different SMs"])


def whoami_rows(table, rows=WHOAMI_PICK):
    """The given rows (thread global ids; negative from the end) of a whoami table, every field, as a Table."""
    from utils.table import Table
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    return Table(WHOAMI_FIELDS, [t[r].tolist() for r in rows], align="r" * len(WHOAMI_FIELDS))


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


@dataclasses.dataclass(frozen=True)
class WaveConfig:
    """One curve of the tail-effect sweep: ``k`` blocks per SM asked for through shared memory."""
    k: int            # blocks per SM asked for
    smem: int         # dynamic shared memory per block that caps an SM at k blocks
    resident: int     # the driver's occupancy answer for that much shared memory
    per_wave: int     # W = SMs x resident


def wave_configs(ks, *, smem_per_sm: int, sms: int) -> dict[int, WaveConfig]:
    """k -> the shared memory that caps an SM at k blocks of wave_spin, and what the driver says fits."""
    out = {}
    for k in ks:
        smem = wave_smem_bytes(k, smem_per_sm=smem_per_sm)
        resident = resident_blocks(wave_kernel(smem), WAVE_THREADS, smem)
        out[int(k)] = WaveConfig(int(k), smem, resident, int(sms) * resident)
    return out


def wave_config_table(configs: dict):
    from utils.table import Table
    return Table(["blocks per SM asked", "dynamic smem per block (bytes)", "driver's occupancy answer",
                  "blocks per wave W"], [[k, f"{o.smem:,}", o.resident, o.per_wave] for k, o in configs.items()])


def wave_label(k: int, ns: int) -> str:
    """The record's impl name of one curve: ``wait20us.4_per_sm``."""
    return f"wait{int(ns) // 1000}us.{int(k)}_per_sm"


def wave_sweep(rec, configs: dict, ns: int) -> dict[int, list[int]]:
    """Time wave_spin (every block stays ``ns``) at every grid size of :func:`wave_points` for each config;
    record op ``waves``, impl :func:`wave_label`, shape (blocks,), in us. Returns k -> the grid sizes.

    wave_spin reads no memory, so the L2 is not flushed; bench's spin ahead of each start event keeps the
    launcher's host work (checks, argument packing, the launch call) out of the timed interval.
    """
    import cupy
    from tqdm.auto import tqdm
    sweep = {}
    for k, o in configs.items():
        pts = wave_points(o.per_wave)
        smid = cupy.empty(max(pts), dtype=cupy.int32)
        t_a = cupy.empty(max(pts), dtype=cupy.uint64)
        t_z = cupy.empty(max(pts), dtype=cupy.uint64)
        for b in tqdm(pts, desc=f"{k} block(s) per SM", leave=False):
            def launch(b=b, smem=o.smem, smid=smid, t_a=t_a, t_z=t_z):
                launch_wave_spin(b, ns, smem, smid[:b], t_a[:b], t_z[:b])
            rec.time("waves", wave_label(k, ns), launch, dtype="none", shape=(b,), metric_name="us",
                     flush=False, warmup=2, reps=20)
        sweep[k] = pts
    return sweep


def wave_launch_host_time(config: WaveConfig, ns: int, reps: int = 50):
    """Host wall clock of one launch_wave_spin call (one block): what bench's spin must outlast."""
    import cupy

    from utils.bench import host_time
    smid = cupy.empty(1, dtype=cupy.int32)
    t_a, t_z = cupy.empty(1, dtype=cupy.uint64), cupy.empty(1, dtype=cupy.uint64)
    t = host_time(lambda: launch_wave_spin(1, ns, config.smem, smid, t_a, t_z), reps=reps)
    cupy.cuda.get_current_stream().synchronize()
    return t


@dataclasses.dataclass(frozen=True)
class WaveStamps:
    """Every block's SM and %globaltimer stamps (ns) from one wave_spin launch, and what they say."""
    smid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    sizes: list          # blocks per wave, in time order (a new wave after a gap in the start times)
    wave_of: np.ndarray  # each block's wave (0-based)
    per_sm: np.ndarray   # blocks of the first wave on each SM
    in_order: bool       # blocks were dealt in index order, wave by wave

    @property
    def first_wave_sms(self) -> int:
        """How many different SMs the first wave used."""
        return int(np.count_nonzero(self.per_sm))

    def describe(self) -> str:
        return "\n".join([
            f"{self.smid.size} blocks started in {len(self.sizes)} waves of {self.sizes} blocks",
            (f"wave 1 used {self.first_wave_sms} of {self.per_sm.size} SMs, {self.per_sm.min()} to "
             f"{self.per_sm.max()} blocks on each"),
            f"SMs of blocks 0..15: {self.smid[:16].tolist()}"])


def read_wave_stamps(smid, t_start, t_end, *, ns: int, sms: int) -> WaveStamps:
    """Check the stamps (every block on an SM in range, every block stayed ``ns``) and split them into
    waves: a new wave starts after a gap of more than ns / 2 between consecutive start times."""
    s = np.asarray(smid).astype(np.int64)
    a, z = np.asarray(t_start).astype(np.int64), np.asarray(t_end).astype(np.int64)
    if (s < 0).any() or (s >= sms).any() or ((z - a) < ns).any():
        raise CheckFailed("wave_spin: a block reported no SM, or stayed less than its ns")
    sizes = split_waves(a, gap_ns=ns / 2)
    bounds = np.sort(a)[np.cumsum(sizes)[:-1]]          # first start time of waves 2, 3, ...
    wave_of = np.searchsorted(bounds, a, side="right")
    per_sm = np.bincount(s[wave_of == 0], minlength=sms)
    return WaveStamps(s, a, z, sizes, wave_of, per_sm, bool((np.diff(wave_of) >= 0).all()))


def run_wave_stamps(blocks: int, ns: int, config: WaveConfig, sms: int) -> WaveStamps:
    """One launch of ``blocks`` wave_spin blocks at ``config``'s shared memory; its stamps, checked and read."""
    import cupy
    smid = cupy.full(int(blocks), -1, dtype=cupy.int32)
    t_a = cupy.zeros(int(blocks), dtype=cupy.uint64)
    t_z = cupy.zeros(int(blocks), dtype=cupy.uint64)
    launch_wave_spin(blocks, ns, config.smem, smid, t_a, t_z)
    return read_wave_stamps(smid.get(), t_a.get(), t_z.get(), ns=ns, sms=sms)


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


@dataclasses.dataclass(frozen=True)
class BlockSumRun:
    same: bool      # the versions' partial sums are bit-identical
    gbps: dict      # impl -> GB/s, every version and cupy.sum


def time_block_sums(rec, x, blocks: int) -> BlockSumRun:
    """Time every BLOCK_SUM version on ``x`` with ``blocks`` blocks (outputs poisoned, checked bit for bit
    against the float64 partials) and ``cupy.sum`` as the peer; record op ``block_sum``."""
    import cupy

    from utils.check import assert_close, poisoned
    n = int(x.shape[0])
    ref = block_sum_ref(x, blocks)             # float64 partial of each block, on the GPU
    partials = {}
    for label, v in BLOCK_SUM.items():
        p = poisoned((blocks,), np.float32)
        rec.time("block_sum", label, v.bind(x, p), dtype="float32", shape=(n,),
                 nbytes=block_sum_nbytes(n, blocks),
                 check=lambda p=p, label=label: assert_close(p, ref, dtype="exact", name=label))
        partials[label] = p
    total = cupy.empty((), dtype=cupy.float32)
    rec.time("block_sum", "cupy.sum", lambda: cupy.sum(x, out=total), dtype="float32", shape=(n,),
             nbytes=4 * n, is_peer=True, check=lambda: assert_close(total, ref.sum(), dtype="float32"))
    first = next(iter(partials.values()))
    same = all(bool((p == first).all()) for p in partials.values())
    return BlockSumRun(same, {e["impl"]: e["metric"] for e in rec.find("block_sum")})


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


@dataclasses.dataclass(frozen=True)
class FilterRun:
    """One threshold of the filter experiment: the fraction kept, each version's ms, v2's bandwidth."""
    threshold: float
    kept: float
    ms: dict
    v2_gbps: float

    @property
    def v0_over_v1(self) -> float:
        return self.ms["v0_atomic"] / self.ms["v1_coalesced"]

    @property
    def v1_over_v2(self) -> float:
        return self.ms["v1_coalesced"] / self.ms["v2_block"]

    def describe(self, copy_gbps: float) -> str:
        return (f"x > {self.threshold:g} keeps {self.kept:.1%}: "
                + ", ".join(f"{lab} {ms:.3f} ms" for lab, ms in self.ms.items())
                + f"; v0/v1 = {self.v0_over_v1:.2f}, v1/v2 = {self.v1_over_v2:.1f}x, "
                f"v2 at {self.v2_gbps / copy_gbps:.2f} of the copy bandwidth")


def filter_op(threshold: float) -> str:
    """The record's op name of one threshold: ``filter_gt0``, ``filter_gt2``."""
    return f"filter_gt{threshold:g}"


def time_filters(rec, x, thresholds=(0.0, 2.0)) -> dict[float, FilterRun]:
    """Time every FILTER version on ``x`` at each threshold (op :func:`filter_op`); the counter's reset is a
    tiny kernel timed with each launch; the output is poisoned before and checked after timing."""
    import cupy
    out = cupy.empty_like(x)
    count = cupy.zeros(1, dtype=cupy.uint32)
    runs = {}
    for thr in thresholds:
        kept = int((x > thr).sum())
        op = filter_op(thr)
        for label, v in FILTER.items():
            launch = v.bind(x, thr, out, count)       # one full wave of 256-thread blocks, grid-stride

            def run(launch=launch):
                count.fill(0)
                launch()
            out.fill(np.nan)
            rec.time(op, label, run, dtype="float32", shape=(x.size,), nbytes=filter_nbytes(x.size, kept),
                     check=lambda thr=thr: check_filter(out, count, x, thr))
        ms = {e["impl"]: e["ms"] for e in rec.find(op)}
        runs[thr] = FilterRun(thr, kept / x.size, {lab: ms[lab] for lab in FILTER},
                              rec.get(op, "v2_block")["metric"])
    return runs


# --- what the compiler made of filter_v0 ------------------------------------------------------------

WARP_OPCODES = ("VOTE", "VOTEU", "FLO", "POPC", "ATOMG", "ATOM", "RED", "SHFL")


def warp_ops(listing: str) -> list[str]:
    """The warp-level and atomic instructions of a SASS listing (cuobjdump -sass), in order."""
    import re
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", listing)
    return [o for o in ops if o.split(".")[0] in WARP_OPCODES]


def aggregated_per_warp(ops) -> bool:
    """Did the compiler aggregate the atomic per warp: a vote and a popc among the instructions?"""
    return any(o.startswith("VOTE") for o in ops) and "POPC" in ops


def sass_warp_ops(kernel: str = "filter_v0_atomic"):
    """:func:`warp_ops` of ``kernel``'s SASS, or None (after one printed line) where cuobjdump is missing."""
    from utils.build import sass
    try:
        listing = sass(SOURCE, kernel)
    except Exception as err:  # noqa: BLE001 -- no cuobjdump here, or no device to build for
        print(f"SASS not available here ({type(err).__name__}); the stored output shows it from the H200 run")
        return None
    return warp_ops(listing) if listing else None


# --- pictures and readings of the experiments ----------------------------------------------------------

def plot_whoami(table, grid, block):
    """Three maps of a 2-D launch's threads at their (x, y), stacked: block number, warp in block, lane."""
    from utils.plot import figure
    t = np.asarray(table.get() if hasattr(table, "get") else table)
    (gx, gy, _), (bx, by, _) = check_launch_shape(grid, block)
    f = {name: i for i, name in enumerate(WHOAMI_FIELDS)}
    fig, axes = figure(3, 1, height=1.1 + 5.0 * gy * by / (gx * bx), sharex=True)
    for ax, name, cmap in zip(axes[:, 0], ("block_linear", "warp", "lane"), ("tab10", "Set2", "viridis")):
        img = np.full((gy * by, gx * bx), -1)
        img[t[:, f["y"]], t[:, f["x"]]] = t[:, f[name]]
        ax.imshow(img, cmap=cmap, interpolation="nearest")
        ax.set_title(name)
        ax.set_ylabel("y")
        ax.grid(False)
        if name != "lane":                   # label each block (or each warp of each block) at its centre
            keys = t[:, f["block_linear"]] * 64 + (t[:, f["warp"]] if name == "warp" else 0)
            for key in np.unique(keys):
                sel = keys == key
                ax.text(t[sel, f["x"]].mean(), t[sel, f["y"]].mean(), str(t[sel, f[name]][0]),
                        ha="center", va="center", fontsize=8)
    axes[-1, 0].set_xlabel("x = blockIdx.x * blockDim.x + threadIdx.x")
    return fig


@dataclasses.dataclass(frozen=True)
class Staircase:
    """The wave model fitted to one curve of the tail-effect sweep (times in us)."""
    per_wave: int
    slope: float     # time each wave adds
    fixed: float     # the fixed part
    jump: float      # from per_wave blocks to per_wave + 1
    worst: float     # the model's largest miss
    blocks: tuple = ()   # the sweep's grid sizes ...
    us: tuple = ()       # ... and their measured times

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
    return Staircase(per_wave, float(slope), float(fixed), float(at[per_wave + 1] - at[per_wave]), worst,
                     tuple(int(b) for b in blocks), tuple(float(t) for t in us))


def fit_wave_sweep(rec, configs: dict, sweep: dict, ns: int) -> dict[int, Staircase]:
    """k -> the staircase fitted to the recorded times of :func:`wave_sweep`'s curve k."""
    fits = {}
    for k, pts in sweep.items():
        us = [rec.get("waves", wave_label(k, ns), shape=(b,))["metric"] for b in pts]
        fits[k] = fit_staircase(pts, us, configs[k].per_wave)
    return fits


def staircase_report(fits: dict, step_us: float) -> str:
    """One line per curve: the time each wave adds, the fixed part, the step at W, the model's worst miss."""
    return "\n".join(
        f"k={k}: each wave adds {f.slope:.1f} us ({f.slope / step_us:.2f}x the {step_us:g} us a block stays), "
        f"fixed part {f.fixed:.1f} us; going from W={f.per_wave} to W+1 blocks adds {f.jump:.1f} us; "
        f"model off by at most {f.worst:.1f} us" for k, f in fits.items())


def plot_staircases(fits: dict):
    """``fits``: k -> Staircase (with its points). Measured points and the fitted staircase of each curve."""
    from utils.plot import figure, version_style
    fig, axes = figure(1, 1, height=3.6)
    ax = axes[0, 0]
    for i, (k, fit) in enumerate(fits.items()):
        st = version_style(i)
        xs = np.arange(1, max(fit.blocks) + 1)
        ax.plot(fit.blocks, fit.us, st["marker"], color=st["color"], ms=4,
                label=f"k = {k} per SM (W = {fit.per_wave})")
        ax.plot(xs, wave_model_ms(xs, fit.per_wave, fit.slope, fit.fixed), "-", lw=1, color=st["color"], alpha=0.7)
    ax.set_xlabel("blocks in the grid")
    ax.set_ylabel("time per launch (us)")
    ax.set_title("Time grows in whole waves")
    ax.legend()
    return fig


def plot_wave_stamps(t_start, t_end, per_wave: int, title: str):
    """Every block's start and end stamp (ns, %globaltimer) against its index, a line at each wave."""
    from utils.plot import figure, version_style
    a, z = np.asarray(t_start, dtype=np.int64), np.asarray(t_end, dtype=np.int64)
    t0 = a.min()
    fig, axes = figure(1, 1, height=3.2)
    ax = axes[0, 0]
    idx = np.arange(a.size)
    ax.scatter(idx, (a - t0) / 1e3, s=2, color=version_style(0)["color"], label="start")
    ax.scatter(idx, (z - t0) / 1e3, s=2, color=version_style(1)["color"], label="end")
    for x in range(per_wave, a.size, per_wave):
        ax.axvline(x, color="gray", lw=0.6, ls=":")
    ax.set_xlabel("blockIdx.x")
    ax.set_ylabel("us since first start")
    ax.set_title(title)
    ax.legend(markerscale=4)
    return fig


def summary_entries(entries) -> list[dict]:
    """The chapter's record for its closing table: every entry but the exchange's (3.4 has their table)
    and the wave sweep's, of which only each curve's smallest and largest grid."""
    shown = [e for e in entries if e["op"] not in ("waves", "cluster_reduce")]
    curves: dict[str, list] = {}
    for e in entries:
        if e["op"] == "waves":
            curves.setdefault(e["impl"], []).append(e)
    for es in curves.values():
        es = sorted(es, key=lambda e: e["shape"][0])
        shown += [es[0], es[-1]]
    return shown
