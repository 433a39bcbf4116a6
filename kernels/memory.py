"""Memory-hierarchy microbenchmarks (chapter 4): pointer chasing, strided reads, vector widths, banks.

Each experiment has its launcher (validating its arguments), its reference and its cost model here;
the chapter only sweeps sizes and plots. Functions that build inputs take ``xp`` (NumPy or CuPy), so
their logic is tested on a CPU.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version

SOURCE = KernelSource("memory.cu")

BLOCK = 256


def _cupy():
    import cupy
    return cupy


def _size(a) -> int:
    return int(np.prod(a.shape, dtype=np.int64))


def levels_table(dev: dict, spec: dict):
    """The four levels as the device (``utils.device_summary()``) and the datasheet report them: capacity
    and who shares each one (not measured)."""
    from utils.table import Table
    return Table(["level", "capacity", "shared by"], [
        ("registers", f"{dev['regs_per_sm'] * 4 // 1024} KiB per SM ({dev['regs_per_sm']} x 32 bit)", "thread"),
        ("shared memory", (f"{dev['smem_per_sm'] // 1024} KiB per SM, {dev['smem_per_block_optin'] // 1024} KiB "
                           "per block (opt-in)"), "block"),
        ("L2", f"{dev['l2_bytes'] / 2**20:.0f} MiB", "whole GPU"),
        ("HBM", f"{dev['memory_bytes'] / 2**30:.0f} GiB, datasheet {spec['hbm_tbps']} TB/s", "whole GPU"),
    ], align="lll")


# --- pointer chasing: latency per dependent load ----------------------------------------------------

LINE_BYTES = 128                # one node per 128-byte cache line
NODE_STRIDE = LINE_BYTES // 4   # uint32 words between consecutive nodes


@dataclasses.dataclass
class Chase:
    """A random cycle through ``n_nodes`` nodes, one per 128-byte line of a ``ws_bytes`` buffer.

    ``next[order[k] * NODE_STRIDE] = order[k + 1] * NODE_STRIDE`` (cyclically): following ``next``
    from ``start`` visits every line once per lap, in random order.
    """
    next: object
    order: object
    start: int
    n_nodes: int
    ws_bytes: int

    def end_after(self, hops: int) -> int:
        """The word index where a walk of ``hops`` loads from ``start`` ends."""
        return int(self.order[hops % self.n_nodes]) * NODE_STRIDE


def make_chase(ws_bytes: int, xp=None, seed: int = 0) -> Chase:
    """A pointer-chasing buffer of ``ws_bytes`` (a multiple of 128, at least two lines); the cycle's
    order is drawn from ``seed``."""
    xp = xp or _cupy()
    if ws_bytes % LINE_BYTES or ws_bytes < 2 * LINE_BYTES:
        raise ValueError(f"ws_bytes: expected a multiple of {LINE_BYTES} of at least {2 * LINE_BYTES}, got {ws_bytes}")
    if ws_bytes // 4 > 2**32 - 1:
        raise ValueError(f"ws_bytes: {ws_bytes} bytes need word indices beyond uint32")
    n = ws_bytes // LINE_BYTES
    order = xp.asarray(np.random.default_rng(seed).permutation(n))
    nxt = xp.zeros(n * NODE_STRIDE, dtype=xp.uint32)
    nxt[order * NODE_STRIDE] = (xp.roll(order, -1) * NODE_STRIDE).astype(xp.uint32)
    return Chase(nxt, order, int(order[0]) * NODE_STRIDE, n, ws_bytes)


def chase_plan(ws_bytes: int, l2_bytes: int, *, min_hops: int = 1 << 17, cold_hops: int = 1 << 15):
    """How to walk a working set: (hops, flush_l2).

    A working set smaller than the L2 is walked in whole laps (at least ``min_hops`` loads) with
    the caches left warm between repetitions, so every load after the first lap hits the level that
    holds the set. A larger one is walked for ``cold_hops`` loads (less than a lap: no line is visited
    twice) after the L2 has been flushed, so every load goes to HBM.
    """
    n = ws_bytes // LINE_BYTES
    if ws_bytes < l2_bytes:
        laps = max(1, -(-min_hops // n))
        return n * laps, False
    return min(cold_hops, n), True


def pointer_chase(chase: Chase, hops: int, sink):
    """One thread follows ``hops`` links of ``chase``; ``sink[0]`` receives the end node."""
    expect_array(chase.next, "chase.next", dtype=np.uint32, ndim=1)
    expect_array(sink, "sink", dtype=np.uint32, ndim=1, align=4)
    if not 1 <= hops < 2**63:
        raise ValueError(f"hops: expected a positive count, got {hops}")
    SOURCE.function("memory_pointer_chase")((1,), (1,), (chase.next, np.uint32(chase.start),
                                                         np.uint64(hops), sink))


def chase_sweep(rec, sizes, l2_bytes: int) -> dict:
    """Walk a fresh random cycle of each working set in ``sizes`` (bytes) as :func:`chase_plan` says, timed
    and checked (the walk must end on the right node); record op ``pointer_chase``, shape (words,), with the
    entry's ``ns_per_load``. Returns {working set bytes: ns per dependent load}."""
    import cupy
    from tqdm.auto import tqdm
    sink = cupy.zeros(1, dtype=cupy.uint32)
    out = {}
    for ws in tqdm(sizes, desc="pointer chase"):
        ch = make_chase(ws)
        hops, flush = chase_plan(ws, l2_bytes)

        def check(ch=ch, hops=hops):
            if int(sink[0]) != ch.end_after(hops):
                raise AssertionError(f"the walk over {human_bytes(ch.ws_bytes)} ended at word {int(sink[0])}, "
                                     f"expected {ch.end_after(hops)}")

        e = rec.time("pointer_chase", "chase", lambda ch=ch, hops=hops: pointer_chase(ch, hops, sink),
                     dtype="uint32", shape=(ws // 4,), metric_name="us", check=check, flush=flush, warmup=2, reps=10)
        e.update(ws_bytes=ws, hops=hops, flushed=flush, ns_per_load=e["ms"] * 1e6 / hops)
        out[ws] = e["ns_per_load"]
        del ch
    rec.save()
    return out


def describe_chase(chase_ns: dict, clk_hz: float) -> str:
    """One line per working set: ns per load and the cycles that makes at ``clk_hz``."""
    return "\n".join(f"{human_bytes(w):>8}: {ns:6.1f} ns per load ({ns * 1e-9 * clk_hz:5.0f} cycles)"
                     for w, ns in chase_ns.items())


# --- coalescing: strided reads ----------------------------------------------------------------------

SECTOR_BYTES = 32
STRIDED_ITEMS = 8   # elements per thread in memory_strided_copy (its STRIDED_ITEMS)


def strided_copy(x, y, stride: int):
    """``y[t] = x[t * stride]`` for every t < y.size (fp32)."""
    expect_array(x, "x", dtype=np.float32, ndim=1)
    expect_array(y, "y", dtype=np.float32, ndim=1)
    expect_same_device(x, y)
    n = _size(y)
    if not 1 <= stride < 2**31:
        raise ValueError(f"stride: expected a positive int32, got {stride}")
    if n < 1 or n >= 2**31:
        raise ValueError(f"y: expected 1 to 2**31 - 1 elements, got {n}")
    if (n - 1) * stride + 1 > _size(x):
        raise ValueError(f"x: stride {stride} over {n} outputs needs {(n - 1) * stride + 1} elements, "
                         f"x has {_size(x)}")
    SOURCE.function("memory_strided_copy")((-(-n // (BLOCK * STRIDED_ITEMS)),), (BLOCK,),
                                           (x, y, np.uint32(n), np.uint32(stride)))
    return y


def strided_reference(x, n: int, stride: int):
    return x[: (n - 1) * stride + 1: stride]


def strided_model(stride: int, sector_bytes: int = SECTOR_BYTES) -> float:
    """Predicted effective bandwidth of the strided copy as a fraction of a plain copy.

    Useful bytes are 4 read + 4 written per element. The reads cost a whole sector per
    ``sector_bytes / 4 / stride`` elements, so they move ``4 * min(stride, sector_bytes / 4)`` bytes per
    element; writes stay coalesced (4 bytes). Fraction = 8 / (4 * min(stride, sector/4) + 4).
    """
    words = sector_bytes // 4
    return 2.0 / (min(stride, words) + 1)


def strided_bytes(n: int) -> int:
    """Useful bytes of the strided copy (what the chapter reports as effective bandwidth)."""
    return 2 * 4 * n


def stride_sweep(rec, strides, x_floats: int = 1 << 30, max_out: int = 1 << 25) -> None:
    """Time :func:`strided_copy` at each stride from one random ``x_floats`` input (4 GiB by default: enough
    for 2**24 outputs at stride 64), ``min(max_out, x_floats // stride)`` outputs each, poisoned and checked
    bit for bit; record op ``strided_copy``, impl ``stride_<s>``, useful bytes."""
    import cupy
    from tqdm.auto import tqdm

    from utils.check import assert_close, poisoned
    xs = cupy.random.standard_normal(x_floats, dtype=cupy.float32)
    for s in tqdm(strides, desc="stride sweep"):
        n = min(max_out, x_floats // s)
        ys = poisoned((n,), np.float32)
        rec.time("strided_copy", f"stride_{s}", lambda ys=ys, s=s: strided_copy(xs, ys, s), dtype="float32",
                 shape=(n,), nbytes=strided_bytes(n),
                 check=lambda ys=ys, n=n, s=s: assert_close(ys, strided_reference(xs, n, s), dtype="exact",
                                                            name=f"stride {s}"))
    xs = ys = None                      # 4 GiB: give it back before the next experiment
    cupy.get_default_memory_pool().free_all_blocks()


@dataclasses.dataclass(frozen=True)
class StridedReading:
    """The stride sweep against the two sector models, from stride 16 on (where they part)."""
    err32: float       # mean distance to the 32-byte sector model
    err64: float       # ... and to the 64-byte fetch model
    below64: int | None  # the first stride that falls well below even the 64-byte model, if any

    def describe(self) -> str:
        text = ("For strides of 16 and more the measurement is closer to the "
                + ("32-byte sector model: the memory system fetches only the sectors a warp asks for."
                   if self.err32 <= self.err64 else
                   "64-byte model: for scattered reads the memory system fetches pairs of sectors, so a lone "
                   "4-byte read costs 64 bytes of bandwidth."))
        if self.below64 is not None:
            text += (f"\nAt stride {self.below64} and beyond it falls below even the 64-byte model: past sector "
                     "counting, scattered reads also lose DRAM page locality (each load opens its own DRAM row) "
                     "and spread over more address-translation pages.")
        return text


def read_strides(frac: dict) -> StridedReading:
    """``frac``: stride -> measured fraction of the copy. How the strides of 16 and more compare with the
    32-byte and 64-byte models."""
    far = [s for s in frac if s >= 16]
    if not far:
        raise ValueError(f"expected strides of 16 or more, got {sorted(frac)}")
    err32 = float(np.mean([abs(frac[s] - strided_model(s)) for s in far]))
    err64 = float(np.mean([abs(frac[s] - strided_model(s, 64)) for s in far]))
    low = [s for s in far if frac[s] < 0.85 * strided_model(s, 64)]
    return StridedReading(err32, err64, low[0] if low else None)


def describe_strides(frac: dict) -> str:
    """One line per stride: the measured fraction of the copy beside the 32-byte model."""
    return "\n".join(f"stride {s:>2}: {f:6.1%} of copy; 32-byte model {strided_model(s):6.1%} "
                     f"(measured / model = {f / strided_model(s):.2f})" for s, f in frac.items())


def plot_strided(frac: dict):
    """Measured fraction of the copy against the stride, with the 32-byte and 64-byte models (grey)."""
    from utils.plot import figure, peer_style, version_style
    strides = list(frac)
    fig, axes = figure(1, 1, height=3.4)
    ax = axes[0, 0]
    ax.plot(strides, list(frac.values()), "-", **version_style(0), label="measured (useful bytes)")
    ax.plot(strides, [strided_model(s) for s in strides], **peer_style(0), label="model: 32-byte sectors")
    ax.plot(strides, [strided_model(s, 64) for s in strides], **{**peer_style(1), "linestyle": ":"},
            label="model: 64-byte fetches")
    ax.set_xscale("log", base=2)
    ax.set_xticks(strides)
    ax.set_xticklabels([str(s) for s in strides])
    ax.set_xlabel("stride (floats) between neighbouring threads' reads")
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_ylim(0, 1.1)
    ax.legend()
    ax.set_title("Strided read, coalesced write (fp32)")
    return fig


# --- vector width: 4, 8, 16 bytes per access (one op, three versions) ------------------------------

@dataclasses.dataclass(frozen=True)
class CopyProblem:
    x: object
    out: object
    n: int


def copy_problem(x, y) -> CopyProblem:
    """``y = x``: two 1-D float32 device arrays of one size (at least one element)."""
    expect_array(x, "x", dtype=np.float32, ndim=1)
    expect_array(y, "y", dtype=np.float32, ndim=1, shape=(_size(x),))
    expect_same_device(x, y)
    if _size(x) < 1:
        raise ValueError("x: expected at least one element, got an empty array")
    return CopyProblem(x, y, _size(x))


def copy_width_plan(kernel: str, width: int):
    """The plan of the version that moves ``width`` floats per thread: one element per thread."""
    def plan(p: CopyProblem, config=None) -> list[Launch]:
        if p.n % width:
            raise Unsupported(f"x: size {p.n} is not a multiple of the vector width {width} floats")
        n = p.n // width
        grid = ceil_div(n, BLOCK)
        if grid >= 2**31:
            raise Unsupported(f"x: {p.n} floats need {grid} blocks, more than a grid holds")
        return [Launch(kernel, (grid, 1, 1), (BLOCK, 1, 1), (p.x, p.out, np.uint64(n)))]
    return plan


COPY_WIDTHS = {"v0_float": 1, "v1_float2": 2, "v2_float4": 4}

COPY_WIDTH = Registry("copy_width", copy_problem, [
    Version("copy_width_v0_float", "y = x, one 4-byte float per thread", SOURCE,
            copy_width_plan("copy_width_v0_float", 1), snippet="copy_vec"),
    Version("copy_width_v1_float2", "8-byte float2 per thread: half the threads, instructions and requests",
            SOURCE, copy_width_plan("copy_width_v1_float2", 2), parent="v0_float", snippet="copy_vec"),
    Version("copy_width_v2_float4", "16-byte float4 per thread: a quarter of v0's threads and instructions",
            SOURCE, copy_width_plan("copy_width_v2_float4", 4), parent="v1_float2", snippet="copy_vec"),
])


def time_copy_widths(rec, n: int) -> list[dict]:
    """Time the three COPY_WIDTH versions on ``n`` random floats (op ``copy``, impl ``copy_f<width>``), each
    output poisoned and checked bit for bit; return their entries in width order."""
    import cupy

    from utils.check import assert_close, poisoned
    a = cupy.random.standard_normal(n, dtype=cupy.float32)
    b = poisoned((n,), np.float32)
    out = []
    for label, width in COPY_WIDTHS.items():
        b.fill(np.nan)
        out.append(rec.time("copy", f"copy_f{width}", COPY_WIDTH[label].bind(a, b), dtype="float32", shape=(n,),
                            nbytes=8 * n, check=lambda w=width: assert_close(b, a, dtype="exact", name=f"copy_f{w}")))
    a = b = None
    cupy.get_default_memory_pool().free_all_blocks()
    return out


def copy_width_table(entries, copy_gbps: float, predicted: dict):
    """The copy ceiling and the three widths: ms, GB/s, fraction of the copy, the predicted fraction
    (``predicted``: width in floats -> fraction) and measured / predicted."""
    from utils.table import Table
    rows = []
    for e in entries:
        w = int(e["impl"][-1]) if e["impl"].startswith("copy_f") else None
        frac = e["metric"] / copy_gbps
        rows.append([e["impl"], f"{e['ms']:.4g}", f"{e['metric']:.0f}", f"{frac:.1%}",
                     f"{predicted[w]:.0%}" if w in predicted else "",
                     f"{frac / predicted[w]:.2f}" if w in predicted else ""])
    return Table(["impl", "ms", "GB/s", "of copy", "predicted", "measured / predicted"], rows)


# --- shared-memory banks ----------------------------------------------------------------------------

SMEM_KERNELS = {
    "row": "memory_smem_row",
    "col": "memory_smem_col",
    "col_padded": "memory_smem_col_padded",
    "col_swizzled": "memory_smem_col_swizzled",
    "row_vec4": "memory_smem_row_vec4",
}
TILE = 32


def smem_read(x, y, mode: str, reps: int):
    """Each block stages a 32x32 tile of ``x`` and every lane reads a row or column of it ``reps`` times.

    ``x`` holds blocks * 1024 floats, ``y`` blocks * 256 (one sum per thread).
    """
    if mode not in SMEM_KERNELS:
        raise ValueError(f"mode: expected one of {sorted(SMEM_KERNELS)}, got {mode!r}")
    expect_array(x, "x", dtype=np.float32, ndim=1)
    expect_array(y, "y", dtype=np.float32, ndim=1)
    expect_same_device(x, y)
    if _size(x) % (TILE * TILE) or _size(x) == 0:
        raise ValueError(f"x: expected a positive multiple of {TILE * TILE} floats, got {_size(x)}")
    blocks = _size(x) // (TILE * TILE)
    if _size(y) != blocks * BLOCK:
        raise ValueError(f"y: expected {blocks * BLOCK} floats ({blocks} blocks x {BLOCK}), got {_size(y)}")
    if not 1 <= reps < 2**31:
        raise ValueError(f"reps: expected a positive int32, got {reps}")
    SOURCE.function(SMEM_KERNELS[mode])((blocks,), (BLOCK,), (x, y, np.int32(reps)))
    return y


def smem_reference(x, mode: str, reps: int, xp=None):
    """What ``smem_read`` writes: lane l of every warp sums row l (column modes), column l (row mode),
    or, in row_vec4 mode, columns 4 (l % 8) .. +3 of the rows r = l / 8 (mod 4)."""
    xp = xp or _cupy()
    tiles = x.reshape(-1, TILE, TILE).astype(xp.float64)           # [blocks, r, c]
    if mode == "row":
        per_lane = tiles.sum(axis=1)                                # [blocks, lane]
    elif mode == "row_vec4":
        # [blocks, q, lane // 8, lane % 8, 4]: row 4q + lane // 8, columns 4 (lane % 8) + e
        per_lane = tiles.reshape(-1, 8, 4, 8, 4).sum(axis=(1, 4)).reshape(-1, TILE)
    else:
        per_lane = tiles.sum(axis=2)
    warps = BLOCK // 32
    return (reps * xp.repeat(per_lane[:, None, :], warps, axis=1)).reshape(-1)


def smem_banks(mode: str, lane_count: int = 32, col: int = 0) -> list[int]:
    """Bank of each lane's word for one load instruction of ``smem_read`` (column ``col``)."""
    ld = TILE + 1 if mode == "col_padded" else TILE
    banks = []
    for lane in range(lane_count):
        if mode == "row_vec4":
            raise ValueError("row_vec4 loads 16 bytes per lane; its banks are not one word per lane")
        if mode == "row":
            word = col * ld + lane
        elif mode in ("col", "col_padded"):
            word = lane * ld + col
        else:
            word = lane * ld + (col ^ lane)
        banks.append(word % 32)
    return banks


def conflict_ways(banks) -> int:
    """Passes one warp-wide 4-byte load takes: the most lanes on one bank (distinct words assumed)."""
    counts: dict[int, int] = {}
    for b in banks:
        counts[b] = counts.get(b, 0) + 1
    return max(counts.values())


def smem_bytes(blocks: int, reps: int) -> int:
    """Bytes all warps load from shared memory in one ``smem_read`` launch."""
    return blocks * BLOCK * reps * TILE * 4


def bank_table(modes=("row", "col", "col_padded", "col_swizzled")):
    """The bank model on the CPU: the banks of lanes 0..7 for column 0, and the passes one load takes."""
    from utils.table import Table
    return Table(["access", "banks of lanes 0..7 (column 0)", "ways"],
                 [[mode, str(smem_banks(mode)[:8]), conflict_ways(smem_banks(mode))] for mode in modes],
                 align="llr")


def time_smem_reads(rec, blocks: int, reps: int) -> dict:
    """Time every SMEM_KERNELS mode on ``blocks`` tiles of small random integers (so that every sum is
    exact), outputs poisoned and checked bit for bit; record op ``smem_read``; return mode -> entry."""
    import cupy
    from tqdm.auto import tqdm

    from utils.check import assert_close, poisoned
    x = cupy.random.randint(-8, 9, size=blocks * TILE * TILE).astype(cupy.float32)
    y = poisoned((blocks * BLOCK,), np.float32)
    for mode in tqdm(SMEM_KERNELS, desc="shared memory"):
        y.fill(np.nan)
        rec.time("smem_read", mode, lambda mode=mode: smem_read(x, y, mode, reps), dtype="float32",
                 shape=(blocks * TILE * TILE,), nbytes=smem_bytes(blocks, reps), flush=False,
                 check=lambda mode=mode: assert_close(y, smem_reference(x, mode, reps), dtype="exact", name=mode))
    x = y = None
    return {mode: rec.get("smem_read", mode) for mode in SMEM_KERNELS}


def smem_instructions_per_sm(mode: str, blocks: int, sms: int, reps: int) -> float:
    """Warp-wide load instructions each SM issues in one smem_read launch: 32 loads of 4 bytes per lane and
    repetition (8 of 16 bytes for row_vec4), for every warp of its blocks."""
    return blocks / sms * (BLOCK // 32) * reps * (8 if mode == "row_vec4" else 32)


def smem_table(entries: dict, peak_gbps: float, clk_hz: float, blocks: int, sms: int, reps: int):
    """Per mode: ms, GB/s, the fraction of the bank peak, and clocks per warp instruction."""
    from utils.table import Table
    return Table(["impl", "ms", "GB/s", "of bank peak", "cycles per warp instruction"],
                 [[m, f"{e['ms']:.4g}", f"{e['metric']:.4g}", f"{e['metric'] / peak_gbps:.1%}",
                   f"{e['ms'] * 1e-3 * clk_hz / smem_instructions_per_sm(m, blocks, sms, reps):.1f}"]
                  for m, e in entries.items()])


# --- chapter 2's L2 read sweep, read back: where the bandwidth falls ---------------------------------

@dataclasses.dataclass(frozen=True)
class L2Fall:
    plateau_gbps: float       # median bandwidth of the working sets below half the L2
    lowest_within: float      # the lowest bandwidth at a working set up to the L2 size, as a fraction of it
    lowest_within_mib: float  # ... and that working set
    first_beyond: float       # the bandwidth at the first working set past the L2, as a fraction of it
    first_beyond_mib: float   # ... and that working set


def describe_l2_fall(fall: L2Fall) -> str:
    return (f"chapter 2's L2 read sweep: plateau {fall.plateau_gbps:.0f} GB/s; lowest point up to the L2 size "
            f"{fall.lowest_within:.0%} of it ({fall.lowest_within_mib:g} MiB); first point past the L2 "
            f"{fall.first_beyond:.0%} ({fall.first_beyond_mib:g} MiB)")


def chapter2_l2_fall(gpu: str, l2_bytes: int, root=None) -> L2Fall | None:
    """:func:`l2_fall` of chapter 2's stored L2 read sweep (impl ``l2_read``) on ``gpu``, or None where
    chapter 2 has not been run on that GPU."""
    from utils.paths import REPO
    from utils.record import load
    entries = [e for e in load(gpu, "02-hopper-architecture", root=root or REPO / "results")
               if e["impl"] == "l2_read"]
    return l2_fall(entries, l2_bytes) if entries else None


def l2_fall(entries, l2_bytes: int) -> L2Fall:
    """Summarise an L2 read sweep (entries with ``working_set_mib`` and ``metric`` in GB/s): how far the
    bandwidth drops inside the L2 and at the first working set beyond it."""
    pts = sorted((float(e["working_set_mib"]), float(e["metric"])) for e in entries)
    l2_mib = l2_bytes / 2**20
    below_half = [g for w, g in pts if w < l2_mib / 2]
    within = [(g, w) for w, g in pts if w <= l2_mib]
    beyond = [(w, g) for w, g in pts if w > l2_mib]
    if not below_half or not within or not beyond:
        raise ValueError(f"expected sweep points below {l2_mib / 2:g} MiB, up to {l2_mib:g} MiB and beyond it, "
                         f"got working sets {[w for w, _ in pts]}")
    plateau = float(np.median(below_half))
    g_in, w_in = min(within)
    w_out, g_out = beyond[0]
    return L2Fall(plateau, g_in / plateau, w_in, g_out / plateau, w_out)


# --- reading the pointer chase -------------------------------------------------------------------------

def human_bytes(nbytes: int) -> str:
    """16 KiB, 48 MiB, 1 GiB: the largest binary unit the size reaches."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def chase_plateaus(chase_ns: dict) -> dict:
    """L1, L2 and HBM latency (ns per dependent load) from a chase sweep {working set bytes: ns}: the
    mean up to 64 KiB, the median from 512 KiB to 24 MiB, the mean from 256 MiB on."""
    def pick(lo, hi):
        v = [ns for w, ns in chase_ns.items() if lo <= w <= hi]
        if not v:
            raise ValueError(f"expected working sets between {human_bytes(lo)} and {human_bytes(hi)}, "
                             f"got {[human_bytes(w) for w in chase_ns]}")
        return v
    return {"L1": float(np.mean(pick(0, 64 << 10))), "L2": float(np.median(pick(512 << 10, 24 << 20))),
            "HBM": float(np.mean(pick(256 << 20, 1 << 62)))}


def describe_plateaus(lat: dict, predicted: dict, clk_hz: float) -> str:
    """Each plateau in ns and cycles at ``clk_hz`` beside its prediction, and the ratios between levels."""
    lines = [f"{name:>3} plateau: {ns:6.1f} ns = {ns * 1e-9 * clk_hz:4.0f} cycles at {clk_hz / 1e9:.2f} GHz; "
             f"measured / predicted = {ns / predicted[name]:.2f}" for name, ns in lat.items()]
    lines.append(f"L2 is {lat['L2'] / lat['L1']:.1f}x the L1 latency, HBM {lat['HBM'] / lat['L2']:.1f}x the L2 latency.")
    return "\n".join(lines)


def plot_chase(chase_ns: dict, l2_bytes: int):
    """ns per dependent load against the working set (log-log), the reported L2 size marked."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from utils.plot import FONT_PT, figure, version_style
    fig, axes = figure(1, 1, height=3.4)
    ax = axes[0, 0]
    ax.plot(list(chase_ns), list(chase_ns.values()), "-", **version_style(0))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(chase_ns))
    ax.set_xticklabels([human_bytes(w).replace(" ", "") for w in chase_ns], rotation=45)
    ax.axvline(l2_bytes, color="gray", ls="--", lw=1)
    ax.text(l2_bytes, min(chase_ns.values()), " L2 capacity", fontsize=FONT_PT - 1, color="gray")
    ax.set_xlabel("working set")
    ax.set_ylabel("ns per dependent load")
    ax.set_title("Pointer chase: one thread, one node per 128-byte line")
    return fig
