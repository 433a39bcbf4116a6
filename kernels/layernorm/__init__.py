"""LayerNorm and RMSNorm forward (chapter 7): references, the numerics on the CPU, the cost model, row
layouts, and the two ladders of versions (``LAYERNORM``, ``RMSNORM``: two ops, numbered separately) on
the one version model (:mod:`utils.version`), with a dispatcher per shape.

``x`` is a C-contiguous ``rows x n`` array (float32 or bfloat16); ``w`` (and ``b`` for LayerNorm) are
length-``n`` arrays of the same dtype; ``y`` has the shape and dtype of ``x``. Arithmetic is fp32::

    LAYERNORM["v5_raw"](x, w, b, y)                       # validate, plan, launch once
    run = RMSNORM["v4_raw"].bind(x, w, y)                 # validate and plan once; run() only launches

Device code: one ``.cu`` per ladder step in this folder (``v0_naive.cu`` ... ``v8_early_arrive.cu``;
RMSNorm's versions sit beside the LayerNorm step they share), with the shared machinery in
``norm_common.cuh``, ``rows.cuh`` (v1-v4) and ``raw.cuh`` (v5, v6). A version's config is a
:class:`Layout` (named fields: threads per row, block size, values per thread, blocks per row).
Layouts with clusters (CLUSTER > 1) are built from KernelSources that require clusters (sm_90); on an
older GPU a version's plan says so (:class:`~utils.version.Unsupported`) and its shorter rows still run.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import ceil_div, dtype_name
from utils.arrays import xp as array_module
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version

EPS_LN = 1e-5
EPS_RMS = 1e-6
NAIVE_THREADS = 256
MAX_GRID_X = 2**31 - 1
OPS = ("layernorm", "rmsnorm")


# --- references (NumPy or CuPy, computed in float64) -----------------------------------------------

def layer_norm_ref(x, w, b, eps: float = EPS_LN):
    """LayerNorm over the last axis in float64 (two-pass in float64: exact enough to judge fp32)."""
    xp = array_module(x)
    x64 = x.astype(xp.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x64 - mean) / xp.sqrt(var + eps) * w.astype(xp.float64) + b.astype(xp.float64)


def rms_norm_ref(x, w, eps: float = EPS_RMS):
    """RMSNorm over the last axis in float64."""
    xp = array_module(x)
    x64 = x.astype(xp.float64)
    ms = (x64 * x64).mean(axis=-1, keepdims=True)
    return x64 / xp.sqrt(ms + eps) * w.astype(xp.float64)


# --- the numerics, in NumPy float32 (what the kernels do, one row at a time) ----------------------

def var_naive(x: np.ndarray) -> float:
    """E[x^2] - E[x]^2, every operation in float32 (sequential sums, as one thread would do them)."""
    x = np.asarray(x, np.float32)
    s = np.float32(0)
    ss = np.float32(0)
    for v in x:
        s = np.float32(s + v)
        ss = np.float32(ss + v * v)
    n = np.float32(len(x))
    mean = np.float32(s / n)
    return float(np.float32(ss / n) - mean * mean)


def var_twopass(x: np.ndarray) -> float:
    """Mean first, then the mean of squared deviations; float32 throughout, sequential sums."""
    x = np.asarray(x, np.float32)
    s = np.float32(0)
    for v in x:
        s = np.float32(s + v)
    mean = np.float32(s / np.float32(len(x)))
    d2 = np.float32(0)
    for v in x:
        d = np.float32(v - mean)
        d2 = np.float32(d2 + d * d)
    return float(d2 / np.float32(len(x)))


def var_shifted(x: np.ndarray, shift: float | None = None) -> float:
    """What layernorm_v6 does: sums of d = x - K and d^2 (K = the first value unless given), then
    Q / n - (S / n)^2; float32 throughout, sequential sums. The cancellation is between
    var + (mean - K)^2 and (mean - K)^2, not between var + mean^2 and mean^2."""
    x = np.asarray(x, np.float32)
    k = np.float32(x[0] if shift is None else shift)
    s = np.float32(0)
    q = np.float32(0)
    for v in x:
        d = np.float32(v - k)
        s = np.float32(s + d)
        q = np.float32(q + d * d)
    n = np.float32(len(x))
    dm = np.float32(s / n)
    return float(max(np.float32(q / n) - dm * dm, np.float32(0)))


def welford_state(x: np.ndarray) -> tuple[float, float, float]:
    """Welford's incremental (n, mean, M2) in float32, one value at a time."""
    n, mean, m2 = np.float32(0), np.float32(0), np.float32(0)
    for v in np.asarray(x, np.float32):
        n = np.float32(n + 1)
        d = np.float32(v - mean)
        mean = np.float32(mean + d / n)
        m2 = np.float32(m2 + d * np.float32(v - mean))
    return float(n), float(mean), float(m2)


def welford_merge(a, b) -> tuple[float, float, float]:
    """Chan et al.'s merge of the states (n, mean, M2) of two disjoint partitions, in float32,
    in the same operation order as ``welford_merge`` in kernels/include/welford.cuh."""
    na, ma, m2a = (np.float32(v) for v in a)
    nb, mb, m2b = (np.float32(v) for v in b)
    n = np.float32(na + nb)
    wb = np.float32(nb / n) if n > 0 else np.float32(0)
    delta = np.float32(mb - ma)
    return float(n), float(np.float32(ma + delta * wb)), float(np.float32(m2a + m2b + delta * delta * na * wb))


def welford_tree(x: np.ndarray, parts: int) -> tuple[float, float, float]:
    """Split ``x`` into ``parts`` contiguous partitions, Welford each, merge pairwise as a tree
    (what a warp's butterfly does with 32 partitions)."""
    states = [welford_state(c) for c in np.array_split(np.asarray(x, np.float32), parts)]
    while len(states) > 1:
        states = [welford_merge(states[i], states[i + 1]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    return states[0]


def twopass_chan(x: np.ndarray, parts: int) -> tuple[float, float, float]:
    """What layernorm_v4 does for a row split over ``parts`` cluster ranks: an exact two-pass
    (n, mean, M2) per contiguous partition in float32, then Chan's merge of the partitions."""
    states = []
    for c in np.array_split(np.asarray(x, np.float32), parts):
        n = len(c)
        mean = np.float32(np.float32(c.sum(dtype=np.float32)) / np.float32(n)) if n else np.float32(0)
        m2 = np.float32(((c - mean) ** 2).sum(dtype=np.float32))
        states.append((float(n), float(mean), float(m2)))
    out = states[0]
    for st in states[1:]:
        out = welford_merge(out, st)
    return out


# --- cost model ------------------------------------------------------------------------------------

def nbytes(rows: int, n: int, itemsize: int, op: str = "layernorm") -> int:
    """Minimum bytes: read x, write y, read the weights once (w and b for LayerNorm, w for RMSNorm)."""
    n_weights = {"layernorm": 2, "rmsnorm": 1}[op]
    return itemsize * (2 * rows * n + n_weights * n)


def flops(rows: int, n: int, op: str = "layernorm") -> int:
    """Arithmetic per element (not the limit: the op is memory-bound): LayerNorm about 8 (sum, deviation,
    square-accumulate, subtract, two multiplies, add), RMSNorm about 4."""
    return {"layernorm": 8, "rmsnorm": 4}[op] * rows * n


# --- row layouts: a version's config ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Layout:
    """How a row is spread over threads: TPR threads per row (32: a warp per row; else the whole
    block), THREADS per block, ITEMS values per thread, CLUSTER blocks per row. For the persistent
    streams (v7 / RMSNorm v5): THREADS per CTA, ITEMS = chunks x VEC values per thread per buffer,
    CLUSTER CTAs per row."""
    tpr: int
    threads: int
    items: int
    cluster: int = 1

    def _asdict(self) -> dict:
        """The fields by name, as a named tuple gives them: the ladder records a version's config
        through ``_asdict`` (the named-tuple protocol), so a Layout lands in the JSON record as
        ``{"tpr": ..., "threads": ..., "items": ..., "cluster": ...}``."""
        return dataclasses.asdict(self)

    @property
    def capacity(self) -> int:
        """The longest row this layout holds in registers."""
        return self.cluster * self.tpr * self.items

    @property
    def rows_per_block(self) -> int:
        return self.threads // self.tpr

    @property
    def name(self) -> str:
        if self.tpr == 32:
            return f"warp/row x{self.items}, block {self.threads}"
        c = f", cluster {self.cluster}" if self.cluster > 1 else ""
        return f"block {self.threads}/row x{self.items}{c}"


# Shortest first; a row takes the first layout that holds it. ITEMS is a multiple of 8 so that every
# layout also serves 16-byte accesses of bf16 (8 values). Registers: ITEMS fp32 values per thread,
# 64 at most with 512 threads (ptxas reports about 90 registers, no spills; one block per SM).
LAYOUTS = (
    Layout(32, 128, 8),        # n <= 256:     a warp per row, 4 rows per block
    Layout(32, 128, 32),       # n <= 1024:    a warp per row, 4 rows per block
    Layout(512, 512, 8),       # n <= 4096:    a block per row
    Layout(512, 512, 32),      # n <= 16384:   a block per row
    Layout(512, 512, 16, 8),   # n <= 65536:   a cluster of 8 blocks per row
    Layout(512, 512, 64, 8),   # n <= 262144:  a cluster of 8 blocks per row
)
MAX_N = LAYOUTS[-1].capacity

# Alternatives the tune script (scripts/tune/ch07_layernorm.py) measures for the fast versions
# (layernorm_v4_ilp, rmsnorm_v3_ilp) on the chapter's widths: more or fewer threads per row, and
# for the long rows clusters of 2 or 4 wider blocks instead of 8 (a smaller cluster is easier to
# place on a GPC and waits on fewer blocks at its barrier).
TUNE_LAYOUTS = (
    Layout(128, 128, 8),       # n = 1024: a block of 128 per row, 16 blocks per SM
    Layout(32, 256, 32),       # n = 1024: a warp per row, 8 rows per block
    Layout(256, 256, 16),      # n = 4096
    Layout(128, 128, 32),      # n = 4096
    Layout(1024, 1024, 16),    # n = 16384
    Layout(256, 256, 64),      # n = 16384
    Layout(1024, 1024, 16, 4),     # n = 65536
    Layout(512, 512, 32, 4),       # n = 65536
    Layout(1024, 1024, 32, 2),     # n = 65536
    Layout(1024, 1024, 32, 8),     # n = 262144
)
FAST_LAYOUTS = LAYOUTS + TUNE_LAYOUTS

# Layouts of the raw-chunk versions (layernorm_v5_raw, rmsnorm_v4_raw), per dtype: a raw chunk costs 4
# registers for 4 fp32 or 8 bf16, so the layouts are chosen by chunks per thread (ITEMS / VEC), not by
# values. The defaults (shortest first, the first that holds the row) follow what chapter 6's raw
# softmax measured best at the same widths: a warp per row up to 1024; 128 threads x 4-8 chunks at
# 4096; 256-512 threads x 8 chunks at 16384; 256-512-thread blocks in clusters of 4-8 beyond, so that
# several clusters share an SM. The extras are the tune script's second guesses.
RAW_LAYOUTS = {
    "float32": (
        Layout(32, 256, 8),            # n <= 256:    2 chunks per lane
        Layout(32, 256, 32),           # n <= 1024:   8 chunks per lane
        Layout(128, 128, 32),          # n <= 4096:   8 chunks, 128 threads (softmax fp32: 95%)
        Layout(512, 512, 32),          # n <= 16384:  8 chunks, 512 threads (softmax fp32: 95%)
        Layout(256, 256, 32, 8),       # n <= 65536:  8 chunks, 256 threads, cluster 8 (3 blocks per SM)
        Layout(512, 512, 64, 8),       # n <= 262144: 16 chunks, cluster 8 (softmax fp32: 71%)
    ),
    "bfloat16": (
        Layout(32, 256, 8),            # n <= 256:    1 chunk per lane
        Layout(32, 256, 32),           # n <= 1024:   4 chunks per lane
        Layout(128, 128, 32),          # n <= 4096:   4 chunks, 128 threads (softmax bf16: 82%)
        Layout(256, 256, 64),          # n <= 16384:  8 chunks, 256 threads (softmax bf16: 92%)
        Layout(256, 256, 32, 8),       # n <= 65536:  4 chunks, 256 threads, cluster 8 (softmax bf16: 64%)
        Layout(512, 512, 64, 8),       # n <= 262144: 8 chunks, cluster 8 (softmax bf16: 59%)
    ),
}
RAW_TUNE_LAYOUTS = {
    "float32": (
        Layout(256, 256, 16),          # n = 4096:   4 chunks
        Layout(256, 256, 64),          # n = 16384:  16 chunks, 256 threads
        Layout(512, 512, 32, 4),       # n = 65536:  8 chunks, cluster 4 (softmax fp32: 75%)
        Layout(1024, 1024, 32, 8),     # n = 262144: 8 chunks, 1024 threads, cluster 8
    ),
    "bfloat16": (
        Layout(256, 256, 16),          # n = 4096:   2 chunks
        Layout(512, 512, 32),          # n = 16384:  4 chunks, 512 threads
        Layout(256, 256, 64, 4),       # n = 65536:  8 chunks, cluster 4
        Layout(256, 256, 128, 8),      # n = 262144: 16 chunks, 256 threads, cluster 8
    ),
}
RAW_ALL_LAYOUTS = {d: RAW_LAYOUTS[d] + RAW_TUNE_LAYOUTS[d] for d in RAW_LAYOUTS}

# Layouts of the early-arrive versions (layernorm_v8_early_arrive, rmsnorm_v6_early_arrive: v6_shift /
# v4_raw with the exit cluster barrier split), per dtype: only the cluster layouts that TUNED names at
# 65536 and 262144 for either op, so that each new version times on its old twin's layout, and the
# NVRTC build stays small. The defaults (the first that holds the row) are LayerNorm's TUNED layouts;
# the extra is RMSNorm's fp32 262144 one. Every one of them is a raw layout too (the twins run on it).
# Shorter rows run on the 65536 layout (later ranks empty): correct, not meant to be fast.
EARLY_LAYOUTS = {
    "float32": (Layout(256, 256, 32, 8), Layout(512, 512, 64, 8)),
    "bfloat16": (Layout(256, 256, 64, 4), Layout(512, 512, 64, 8)),
}
EARLY_TUNE_LAYOUTS = {
    "float32": (Layout(1024, 1024, 32, 8),),
    "bfloat16": (),
}
EARLY_ALL_LAYOUTS = {d: EARLY_LAYOUTS[d] + EARLY_TUNE_LAYOUTS[d] for d in EARLY_LAYOUTS}

# Layouts of the persistent streams (layernorm_v7_stream, rmsnorm_v5_stream): chapter 6's softmax_v9
# configurations (NC chunks x THREADS per CTA slice, CL CTAs per row) as Layouts: tpr = threads = THREADS,
# items = NC x VEC values per thread per buffer, cluster = CL; capacity = CL x THREADS x NC x VEC. A CTA's
# slice is double-buffered in shared memory (2 x 16 x NC x THREADS bytes) and its w (and b) chunks stay in
# registers (8 per chunk for LayerNorm), so NC <= 8. The grid is not one row group per cluster but as
# many clusters as fit at once (stream_clusters), each walking rows c, c + G, ...
def stream_layouts(configs, vec):
    return tuple(Layout(t, t, nc * vec, cl) for nc, t, cl in configs)


STREAM_LAYOUTS = {
    # fp32 16384 in two CTAs of 4 chunks: LayerNorm's one CTA of 8 chunks x 512 spills at 128 registers
    "float32": stream_layouts(((4, 512, 2), (8, 512, 4), (8, 512, 16)), 4),
    "bfloat16": stream_layouts(((8, 256, 1), (8, 512, 2), (8, 512, 8)), 8),
}
STREAM_TUNE_LAYOUTS = {
    "float32": stream_layouts(((8, 256, 2), (8, 256, 8), (4, 512, 8), (4, 1024, 16)), 4),
    "bfloat16": stream_layouts(((4, 512, 1), (8, 256, 4), (4, 512, 4), (8, 256, 16), (4, 512, 16)), 8),
}
STREAM_ALL_LAYOUTS = {d: STREAM_LAYOUTS[d] + STREAM_TUNE_LAYOUTS[d] for d in STREAM_LAYOUTS}
STREAM_MAX_N = STREAM_LAYOUTS["float32"][-1].capacity
# What the dispatcher launches per (op, dtype, n) for the chapter's widths: (version label, layout),
# the best of the tune script's measurements (second H200 batch, 2026-11-29: the raw versions won
# every width; rmsnorm bf16 16384 was a tie with v3_ilp, 65.4 us each). Other widths take the fast
# version at layout_for(n). The third batch measured layernorm_v6_shift (one reduction of shifted sums,
# RMSNorm's barrier structure): it won LayerNorm at 65536 and 262144 in both dtypes (fp32 79% / 57% of
# copy vs v5's 61% / 48%), so those four entries are v6; at the shorter widths v5 stayed ahead or tied.
# The fifth batch (2026-11-29) measured the early-arrive twins on the same layouts: faster on every long
# row (LayerNorm v8 / v6: 1.05x-1.10x, RMSNorm v6 / v4: 1.04x-1.18x), so the eight long-row entries name
# them; the layouts are unchanged.
TUNED: dict[tuple[str, str, int], tuple[str, Layout]] = {
    ("layernorm", "float32", 1024): ("v5_raw", Layout(32, 256, 32)),
    ("layernorm", "float32", 4096): ("v5_raw", Layout(256, 256, 16)),
    ("layernorm", "float32", 16384): ("v5_raw", Layout(512, 512, 32)),
    ("layernorm", "float32", 65536): ("v8_early_arrive", Layout(256, 256, 32, 8)),
    ("layernorm", "float32", 262144): ("v8_early_arrive", Layout(512, 512, 64, 8)),
    ("layernorm", "bfloat16", 1024): ("v5_raw", Layout(32, 256, 32)),
    ("layernorm", "bfloat16", 4096): ("v5_raw", Layout(128, 128, 32)),
    ("layernorm", "bfloat16", 16384): ("v5_raw", Layout(256, 256, 64)),
    ("layernorm", "bfloat16", 65536): ("v8_early_arrive", Layout(256, 256, 64, 4)),
    ("layernorm", "bfloat16", 262144): ("v8_early_arrive", Layout(512, 512, 64, 8)),
    ("rmsnorm", "float32", 1024): ("v4_raw", Layout(32, 256, 32)),
    ("rmsnorm", "float32", 4096): ("v4_raw", Layout(128, 128, 32)),
    ("rmsnorm", "float32", 16384): ("v4_raw", Layout(512, 512, 32)),
    ("rmsnorm", "float32", 65536): ("v6_early_arrive", Layout(256, 256, 32, 8)),
    ("rmsnorm", "float32", 262144): ("v6_early_arrive", Layout(1024, 1024, 32, 8)),
    ("rmsnorm", "bfloat16", 1024): ("v4_raw", Layout(32, 256, 32)),
    ("rmsnorm", "bfloat16", 4096): ("v4_raw", Layout(256, 256, 16)),
    ("rmsnorm", "bfloat16", 16384): ("v4_raw", Layout(256, 256, 64)),
    ("rmsnorm", "bfloat16", 65536): ("v6_early_arrive", Layout(256, 256, 64, 4)),
    ("rmsnorm", "bfloat16", 262144): ("v6_early_arrive", Layout(512, 512, 64, 8)),
}



STREAM_MAX_N = STREAM_LAYOUTS["float32"][-1].capacity


def first_fitting(n: int, layouts, what: str) -> Layout:
    """The first (shortest) of ``layouts`` that holds rows of ``n`` values."""
    for lay in layouts:
        if n <= lay.capacity:
            return lay
    raise Unsupported(f"x: rows of {n} values exceed the longest row the {what} layouts hold "
                      f"({max(lay.capacity for lay in layouts)})")


def layout_for(n: int) -> Layout:
    """The default layout of v1-v4 for rows of ``n`` values (the first, i.e. smallest, that holds the row)."""
    return first_fitting(n, LAYOUTS, "register")


def raw_layout_for(n: int, dtype: str, layouts: dict | None = None) -> Layout:
    """The default raw-version layout for rows of ``n`` values of ``dtype`` (the first that holds it);
    ``layouts``: another per-dtype table of defaults (EARLY_LAYOUTS) instead of RAW_LAYOUTS."""
    return first_fitting(n, (RAW_LAYOUTS if layouts is None else layouts)[dtype], "raw")


def stream_layout_for(n: int, dtype: str) -> Layout:
    """The default stream layout for rows of ``n`` values of ``dtype`` (the first that holds it)."""
    return first_fitting(n, STREAM_LAYOUTS[dtype], "stream")


def stream_smem(lay: Layout, dtype: str) -> int:
    """Dynamic shared memory of a stream CTA: two buffers of the slice (THREADS x ITEMS values)."""
    return 2 * 16 * lay.threads * (lay.items // VEC16[dtype])


def stream_ctas_per_sm(lay: Layout, dtype: str, facts=None) -> int:
    """Stream CTAs per SM that the kernel's __launch_bounds__ asks for (stream_min_blocks in
    row_stream.cuh): by threads and by shared memory (2 KiB of static smem and reservation per CTA)."""
    from utils.hardware import facts as hardware_facts
    f = hardware_facts() if facts is None else facts
    return max(1, min(f.max_threads_per_sm // lay.threads, f.smem_per_sm // (stream_smem(lay, dtype) + 2048)))


def stream_clusters(rows: int, lay: Layout, dtype: str, facts=None) -> int:
    """Clusters of a persistent stream grid: as many as fit on the GPU's SMs at once, at most one per row
    (a bound launch lowers it to the driver's cuOccupancyMaxActiveClusters where that is smaller)."""
    from utils.hardware import facts as hardware_facts
    f = hardware_facts() if facts is None else facts
    return max(1, min(rows, f.sms * stream_ctas_per_sm(lay, dtype, f) // lay.cluster))


def grid_of(rows: int, lay: Layout) -> int:
    """Blocks along x: ceil(rows / rows_per_block) row groups, CLUSTER blocks each."""
    return ceil_div(rows, lay.rows_per_block) * lay.cluster


DTYPES = {"float32": "float", "bfloat16": "__nv_bfloat16"}
VEC16 = {"float32": 4, "bfloat16": 8}     # values per 16-byte access


def dtype_of(dt) -> str:
    """'float32' or 'bfloat16'; ValueError for any other dtype."""
    name = dtype_name(dt)
    if name not in DTYPES:
        raise ValueError(f"x: expected dtype float32 or bfloat16, got {name}")
    return name


def name_expression(kernel: str, dtype: str, vec: int, lay: Layout) -> str:
    """kernel<T, VEC, TPR, THREADS, ITEMS, CLUSTER> of a row layout."""
    return f"{kernel}<{DTYPES[dtype]}, {vec}, {lay.tpr}, {lay.threads}, {lay.items}, {lay.cluster}>"


def stream_name_expression(kernel: str, dtype: str, lay: Layout) -> str:
    """kernel<T, NC, THREADS, CL> of a stream layout."""
    return f"{kernel}<{DTYPES[dtype]}, {lay.items // VEC16[dtype]}, {lay.threads}, {lay.cluster}>"


# --- how each kernel is built: its file, its layouts per dtype, its default layouts ----------------

@dataclasses.dataclass(frozen=True)
class Build:
    """A row kernel's instantiations: its .cu file, whether it moves 16 bytes per access (else one value),
    the layouts it is instantiated for per dtype, and its default layouts per dtype (shortest first)."""
    file: str
    vec16: bool
    layouts: dict
    defaults: dict

    def vec(self, dtype: str) -> int:
        return VEC16[dtype] if self.vec16 else 1


def per_dtype(layouts) -> dict:
    return {d: tuple(layouts) for d in DTYPES}


BUILDS = {
    "layernorm_v1_twopass": Build("v1_twopass.cu", False, per_dtype(LAYOUTS), per_dtype(LAYOUTS)),
    "rmsnorm_v1_registers": Build("v1_twopass.cu", False, per_dtype(LAYOUTS), per_dtype(LAYOUTS)),
    "layernorm_v2_welford": Build("v2_welford.cu", False, per_dtype(LAYOUTS), per_dtype(LAYOUTS)),
    "layernorm_v3_vec16": Build("v3_vec16.cu", True, per_dtype(LAYOUTS), per_dtype(LAYOUTS)),
    "rmsnorm_v2_vec16": Build("v3_vec16.cu", True, per_dtype(LAYOUTS), per_dtype(LAYOUTS)),
    "layernorm_v4_ilp": Build("v4_ilp.cu", True, per_dtype(FAST_LAYOUTS), per_dtype(LAYOUTS)),
    "rmsnorm_v3_ilp": Build("v4_ilp.cu", True, per_dtype(FAST_LAYOUTS), per_dtype(LAYOUTS)),
    "layernorm_v5_raw": Build("v5_raw.cu", True, RAW_ALL_LAYOUTS, RAW_LAYOUTS),
    "rmsnorm_v4_raw": Build("v5_raw.cu", True, RAW_ALL_LAYOUTS, RAW_LAYOUTS),
    "layernorm_v6_shift": Build("v6_shift.cu", True, RAW_ALL_LAYOUTS, RAW_LAYOUTS),
    "layernorm_v8_early_arrive": Build("v8_early_arrive.cu", True, EARLY_ALL_LAYOUTS, EARLY_LAYOUTS),
    "rmsnorm_v6_early_arrive": Build("v8_early_arrive.cu", True, EARLY_ALL_LAYOUTS, EARLY_LAYOUTS),
}
STREAM_BUILDS = {"layernorm_v7_stream": "v7_stream.cu", "rmsnorm_v5_stream": "v7_stream.cu"}
# The early-arrive versions and the version each one is the twin of (the same kernel but for the split
# exit barrier): on a width TUNED gives to either, both time on the same layout.
EARLY_TWINS = {"layernorm_v8_early_arrive": "layernorm_v6_shift", "rmsnorm_v6_early_arrive": "rmsnorm_v4_raw"}

CLUSTERS = ("clusters",)
# Files whose every kernel needs clusters: one KernelSource each, requiring them.
CLUSTER_ONLY_FILES = ("v7_stream.cu", "v8_early_arrive.cu")


def row_expressions(file: str, clustered: bool) -> tuple[str, ...]:
    """The name expressions of ``file``'s row kernels on layouts with (or without) clusters."""
    out = []
    for kernel, bld in BUILDS.items():
        if bld.file != file:
            continue
        for dtype in DTYPES:
            out += [name_expression(kernel, dtype, bld.vec(dtype), lay) for lay in bld.layouts[dtype]
                    if (lay.cluster > 1) == clustered]
    return tuple(dict.fromkeys(out))


def source(file: str, expressions, requires=(), spill_free: bool = True) -> KernelSource:
    return KernelSource(f"layernorm/{file}", name_expressions=tuple(expressions), spill_free=spill_free,
                        requires=tuple(requires))


# ptxas spills 28 bytes in one instantiation: the scalar Welford version, bf16, 64 values per thread
# (the incremental update keeps more values live than the two-pass sum; 128 registers do not hold it).
# It is built as a source of its own, marked as spilling, so the CI check holds every other kernel to
# zero spills. The chapter shows the report.
SPILLING = (name_expression("layernorm_v2_welford", "bfloat16", 1, LAYOUTS[-1]),)

V0_SOURCE = source("v0_naive.cu", [f"{op}_v0_naive<{t}>" for op in OPS for t in DTYPES.values()])
V1_SOURCE = source("v1_twopass.cu", row_expressions("v1_twopass.cu", False))
V1_CLUSTER_SOURCE = source("v1_twopass.cu", row_expressions("v1_twopass.cu", True), CLUSTERS)
V2_SOURCE = source("v2_welford.cu", row_expressions("v2_welford.cu", False))
V2_CLUSTER_SOURCE = source("v2_welford.cu", [e for e in row_expressions("v2_welford.cu", True)
                                              if e not in SPILLING], CLUSTERS)
V2_SPILLING_SOURCE = source("v2_welford.cu", SPILLING, CLUSTERS, spill_free=False)
V3_SOURCE = source("v3_vec16.cu", row_expressions("v3_vec16.cu", False))
V3_CLUSTER_SOURCE = source("v3_vec16.cu", row_expressions("v3_vec16.cu", True), CLUSTERS)
V4_SOURCE = source("v4_ilp.cu", row_expressions("v4_ilp.cu", False))
V4_CLUSTER_SOURCE = source("v4_ilp.cu", row_expressions("v4_ilp.cu", True), CLUSTERS)
V5_SOURCE = source("v5_raw.cu", row_expressions("v5_raw.cu", False))
V5_CLUSTER_SOURCE = source("v5_raw.cu", row_expressions("v5_raw.cu", True), CLUSTERS)
V6_SOURCE = source("v6_shift.cu", row_expressions("v6_shift.cu", False))
V6_CLUSTER_SOURCE = source("v6_shift.cu", row_expressions("v6_shift.cu", True), CLUSTERS)
V7_SOURCE = source("v7_stream.cu", [stream_name_expression(k, d, lay) for k in STREAM_BUILDS for d in DTYPES
                                    for lay in STREAM_ALL_LAYOUTS[d]], CLUSTERS)
V8_SOURCE = source("v8_early_arrive.cu", row_expressions("v8_early_arrive.cu", True), CLUSTERS)


def sources() -> list[KernelSource]:
    """Every KernelSource of the op family, in ladder order."""
    return [v for v in globals().values() if isinstance(v, KernelSource)]


def source_of(expression: str) -> KernelSource:
    """The KernelSource that instantiates a name expression."""
    for src in sources():
        if expression in src.name_expressions:
            return src
    raise ValueError(f"{expression} is instantiated by no layernorm source; pick a layout the version lists "
                     "in its configs")


# --- problems: argument validation -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class NormProblem:
    """A validated LayerNorm or RMSNorm call: sizes, dtype and arrays (``b`` is None for RMSNorm)."""
    op: str
    rows: int
    n: int
    dtype: str
    eps: float
    x: object = None
    w: object = None
    b: object = None
    y: object = None

    @property
    def out(self):
        return self.y

    @property
    def args(self) -> tuple:
        """The kernel arguments: x, w, (b,) y, rows, n, eps."""
        tail = (self.y, np.int32(self.rows), np.int32(self.n), np.float32(self.eps))
        return (self.x, self.w, self.b, *tail) if self.op == "layernorm" else (self.x, self.w, *tail)


def validate(op: str, x, w, b, y, eps: float) -> NormProblem:
    expect_array(x, "x", ndim=2)
    dtype = dtype_of(x.dtype)
    rows, n = (int(s) for s in x.shape)
    if rows < 1 or n < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, n)}")
    if rows >= 2**31 or n >= 2**24:
        raise ValueError(f"x: rows must be below 2**31 and n below 2**24 (int32 indices, counts exact "
                         f"in fp32), got {(rows, n)}")
    expect_array(w, "w", dtype=x.dtype, shape=(n,))
    if op == "layernorm":
        expect_array(b, "b", dtype=x.dtype, shape=(n,))
    expect_array(y, "y", dtype=x.dtype, shape=(rows, n))
    expect_same_device(*(a for a in (x, w, b, y) if a is not None))
    return NormProblem(op, rows, n, dtype, float(eps), x, w, b, y)


def layernorm_problem(x, w, b, y, eps: float = EPS_LN) -> NormProblem:
    """y = (x - mean) / sqrt(var + eps) * w + b over the rows of x (rows x n)."""
    return validate("layernorm", x, w, b, y, eps)


def rmsnorm_problem(x, w, y, eps: float = EPS_RMS) -> NormProblem:
    """y = x / sqrt(mean(x^2) + eps) * w over the rows of x (rows x n)."""
    return validate("rmsnorm", x, w, None, y, eps)


def shape_problem(op: str, rows: int, n: int, dtype) -> NormProblem:
    """A problem with sizes and no arrays, for plans on the CPU (which kernel, grid, layout)."""
    if op not in OPS:
        raise ValueError(f"expected op 'layernorm' or 'rmsnorm', got {op!r}")
    return NormProblem(op, int(rows), int(n), dtype_of(dtype), EPS_LN if op == "layernorm" else EPS_RMS)


# --- plans ---------------------------------------------------------------------------------------------

def clusters_missing() -> str | None:
    """Why cluster layouts cannot run here (a GPU older than sm_90, or the Ampere emulation), else None.
    Without a GPU a plan describes the H200 and takes clusters."""
    from utils.gpu import has_gpu, supports
    if has_gpu() and not supports("clusters"):
        return "this GPU has no thread-block clusters (sm_90): rows longer than 16384 need them here"
    return None


def plan_naive(p: NormProblem, config=None) -> list[Launch]:
    if config is not None:
        raise ValueError(f"{p.op}_v0_naive has one fixed layout (a block of {NAIVE_THREADS} threads per row), "
                         f"got config {config}")
    if p.rows > MAX_GRID_X:
        raise ValueError(f"x: {p.rows} rows exceed the grid limit {MAX_GRID_X}")
    return [Launch(f"{p.op}_v0_naive<{DTYPES[p.dtype]}>", (p.rows, 1, 1), (NAIVE_THREADS, 1, 1), p.args)]


def check_layout(kernel: str, p: NormProblem, lay: Layout, instantiated) -> None:
    if lay not in instantiated:
        raise ValueError(f"layout {lay} is not instantiated for {kernel} ({p.dtype}); pick one of its configs")
    if p.n > lay.capacity:
        raise Unsupported(f"x: rows of {p.n} values do not fit layout {lay.name} (capacity {lay.capacity})")
    if lay.cluster > 1 and clusters_missing():
        raise Unsupported(f"{kernel} on {lay.name}: {clusters_missing()}")


def row_plan(kernel: str):
    """The plan of a row kernel (v1-v6, v8): one launch, one row group per block (or cluster)."""
    bld = BUILDS[kernel]

    def plan(p: NormProblem, lay: Layout) -> list[Launch]:
        vec = bld.vec(p.dtype)
        if p.n % vec:
            raise Unsupported(f"x: {kernel} moves {vec} values per 16-byte access, so n must be a multiple "
                              f"of {vec}; got n = {p.n} (use a scalar version for this width)")
        check_layout(kernel, p, lay, bld.layouts[p.dtype])
        grid = grid_of(p.rows, lay)
        if grid > MAX_GRID_X:
            raise ValueError(f"x: {p.rows} rows need {grid} blocks, more than the grid limit {MAX_GRID_X}")
        expr = name_expression(kernel, p.dtype, vec, lay)
        return [Launch(expr, (grid, 1, 1), (lay.threads, 1, 1), p.args, cluster=lay.cluster,
                       source=source_of(expr))]
    return plan


def stream_plan(kernel: str):
    """The plan of a persistent stream (v7 / RMSNorm v5): as many clusters as fit at once, each walking
    rows c, c + G, ...; the bound launch lowers the grid to cuOccupancyMaxActiveClusters."""
    def plan(p: NormProblem, lay: Layout) -> list[Launch]:
        check_layout(kernel, p, lay, STREAM_ALL_LAYOUTS[p.dtype])
        clusters = stream_clusters(p.rows, lay, p.dtype)
        return [Launch(stream_name_expression(kernel, p.dtype, lay), (clusters * lay.cluster, 1, 1),
                       (lay.threads, 1, 1), p.args, smem=stream_smem(lay, p.dtype), cluster=lay.cluster,
                       persistent=True)]
    return plan


def layouts_of(kernel: str):
    """A version's configs: the layouts its kernel is instantiated for (for the problem's dtype)."""
    table = ({d: STREAM_ALL_LAYOUTS[d] for d in DTYPES} if kernel in STREAM_BUILDS else BUILDS[kernel].layouts)

    def configs(p: NormProblem | None) -> tuple:
        if p is None:
            return tuple(dict.fromkeys(lay for d in DTYPES for lay in table[d]))
        return table[p.dtype]
    return configs


def default_of(kernel: str):
    """A version's default layout for a problem: the one TUNED names where the dispatcher picks this
    version (or its early-arrive twin) at this width, so that the chapter times every version the way the
    dispatcher would run it; for layernorm_v6_shift elsewhere RMSNorm's TUNED layout (v6 has rmsnorm_v4's
    one reduction per row and register budget); else the first default layout that holds the row."""
    op = kernel.split("_v")[0]

    def default(p: NormProblem) -> Layout:
        tuned = TUNED.get((op, p.dtype, p.n))
        if tuned is not None:
            chosen = f"{op}_{tuned[0]}"
            same = chosen == kernel or EARLY_TWINS.get(kernel) == chosen or EARLY_TWINS.get(chosen) == kernel
            if same and tuned[1] in layouts_of(kernel)(p):
                return tuned[1]
        if kernel == "layernorm_v6_shift" and ("rmsnorm", p.dtype, p.n) in TUNED:
            return TUNED["rmsnorm", p.dtype, p.n][1]
        if kernel in STREAM_BUILDS:
            defaults = STREAM_LAYOUTS[p.dtype]
        else:
            defaults = BUILDS[kernel].defaults[p.dtype]
        fits = [lay for lay in defaults if p.n <= lay.capacity]
        return fits[0] if fits else defaults[-1]      # too long: the plan says so (Unsupported)
    return default


def snippet_name(kernel: str) -> str:
    """``layernorm_v5_raw`` -> ``layernorm_v5`` (the snippet marker of the kernel in its .cu)."""
    op, rest = kernel.split("_v", 1)
    return f"{op}_v{rest.split('_')[0]}"


def norm_version(kernel: str, summary: str, parent: str | None = None) -> Version:
    if kernel.endswith("_v0_naive"):
        return Version(kernel, summary, V0_SOURCE, plan_naive, parent=parent, snippet=snippet_name(kernel))
    file = STREAM_BUILDS.get(kernel) or BUILDS[kernel].file
    src = next(s for s in sources() if s.file == f"layernorm/{file}")    # the file's first source
    plan = stream_plan(kernel) if kernel in STREAM_BUILDS else row_plan(kernel)
    return Version(kernel, summary, src, plan, parent=parent, snippet=snippet_name(kernel),
                   configs=layouts_of(kernel), default=default_of(kernel))


LAYERNORM = Registry("layernorm", layernorm_problem, [
    norm_version("layernorm_v0_naive",
                 "block per row, var = E[x^2] - E[x]^2 in one sweep, x re-read to normalize"),
    norm_version("layernorm_v1_twopass",
                 "row in registers (warp / block / cluster of 8 per row), mean then squared deviations: one read",
                 "v0_naive"),
    norm_version("layernorm_v2_welford",
                 "Welford states per thread, merged by warps, blocks and clusters (Chan): one reduction",
                 "v1_twopass"),
    norm_version("layernorm_v3_vec16", "v2 with 16-byte loads and stores", "v2_welford"),
    norm_version("layernorm_v4_ilp",
                 "16-byte layout, exact two-pass from registers with 4 accumulators, Chan merge over the cluster",
                 "v3_vec16"),
    norm_version("layernorm_v5_raw",
                 "v4 with raw 16-byte chunks in registers, grouped weight loads, several blocks per SM",
                 "v4_ilp"),
    norm_version("layernorm_v6_shift",
                 "v5 with sums shifted by the row's first value: one reduction (as RMSNorm), RMSNorm's registers",
                 "v5_raw"),
    norm_version("layernorm_v7_stream",
                 "persistent clusters, each CTA a fixed row slice double-buffered in smem (cp.async), exact stats",
                 "v6_shift"),
    norm_version("layernorm_v8_early_arrive",
                 "v6 with the exit cluster barrier split: relaxed arrive after the DSMEM reads, wait after the stores",
                 "v6_shift"),
])

RMSNORM = Registry("rmsnorm", rmsnorm_problem, [
    norm_version("rmsnorm_v0_naive", "block per row, sum of squares, x re-read to normalize"),
    norm_version("rmsnorm_v1_registers", "row in registers (warp / block / cluster of 8 per row): one read",
                 "v0_naive"),
    norm_version("rmsnorm_v2_vec16", "v1 with 16-byte loads and stores", "v1_registers"),
    norm_version("rmsnorm_v3_ilp", "v2 with 4 accumulators and a register budget sized to the values held",
                 "v2_vec16"),
    norm_version("rmsnorm_v4_raw",
                 "v3 with raw 16-byte chunks in registers, grouped weight loads, several blocks per SM", "v3_ilp"),
    norm_version("rmsnorm_v5_stream",
                 "persistent clusters, each CTA a fixed row slice double-buffered in smem (cp.async)", "v4_raw"),
    norm_version("rmsnorm_v6_early_arrive",
                 "v4 with the exit cluster barrier split: relaxed arrive after the DSMEM reads, wait after the stores",
                 "v4_raw"),
])

VERSIONS = {"layernorm": LAYERNORM, "rmsnorm": RMSNORM}


def ptxas_of(launch: Launch) -> dict:
    """The ptxas report (registers, smem, spills) of a planned launch's kernel instantiation."""
    from utils.build import compile_source
    src = launch.source
    return src.ptxas()[compile_source(src).symbols[launch.kernel]]


def timed_launch(op: str, label: str, rows: int, n: int, dtype) -> Launch:
    """The launch the chapter times for version ``label`` of ``op`` on a (rows, n) problem (its default
    layout), planned on the CPU."""
    p = shape_problem(op, rows, n, dtype)
    return VERSIONS[op][label].launches(p)[0]


# --- dispatcher ------------------------------------------------------------------------------------

FAST_LABEL = {"layernorm": "v4_ilp", "rmsnorm": "v3_ilp"}


def pick(op: str, n: int, dtype) -> str:
    """The version label the dispatcher uses for rows of ``n`` values: the measured winner (TUNED) on
    the chapter's widths, else the fast 16-byte version where n is a multiple of the 16-byte vector,
    else the best scalar one; the naive kernel beyond MAX_N."""
    name = dtype_of(dtype)
    if n > MAX_N:
        return "v0_naive"
    if (op, name, n) in TUNED:
        return TUNED[op, name, n][0]
    if n % VEC16[name] == 0:
        return FAST_LABEL[op]
    return "v1_twopass" if op == "layernorm" else "v1_registers"


def pick_layout(op: str, n: int, dtype) -> Layout | None:
    """The layout the dispatcher passes with :func:`pick`'s version (None: the version's default)."""
    name = dtype_of(dtype)
    if (op, name, n) in TUNED:
        return TUNED[op, name, n][1]
    if pick(op, n, dtype) != FAST_LABEL[op]:
        return None
    return layout_for(n)


def layer_norm(x, w, b, eps: float = EPS_LN, out=None):
    """LayerNorm of the rows of ``x`` (rows x n, fp32 or bf16) with the version :func:`pick` chooses."""
    import cupy
    expect_array(x, "x", ndim=2)
    y = cupy.empty_like(x) if out is None else out
    n = int(x.shape[1])
    return LAYERNORM[pick("layernorm", n, x.dtype)](x, w, b, y, eps=eps,
                                                    config=pick_layout("layernorm", n, x.dtype))


def rms_norm(x, w, eps: float = EPS_RMS, out=None):
    """RMSNorm of the rows of ``x`` (rows x n, fp32 or bf16) with the version :func:`pick` chooses."""
    import cupy
    expect_array(x, "x", ndim=2)
    y = cupy.empty_like(x) if out is None else out
    n = int(x.shape[1])
    return RMSNORM[pick("rmsnorm", n, x.dtype)](x, w, y, eps=eps, config=pick_layout("rmsnorm", n, x.dtype))


# --- the chapter's ladder: inputs, reference, peers, resources -------------------------------------

INPUT_MEAN = {"layernorm": 0.0, "rmsnorm": 0.5}   # RMSNorm's rows get a mean, so that it is not zero


def random_arrays(op: str, shape, dtype, seed: int, mean: float | None = None) -> tuple:
    """x, w, (b,) and an output y of one problem on the GPU, all drawn from ``seed``: x ~ N(mean, 1)
    (``INPUT_MEAN`` by default), w ~ 1 + 0.1 N(0, 1), b ~ 0.1 N(0, 1); y uninitialised."""
    import cupy

    from utils.arrays import bf16, random_normal
    rows, n = (int(s) for s in shape)
    name = dtype_of(dtype)
    mu = INPUT_MEAN[op] if mean is None else mean
    target = bf16() if name == "bfloat16" else np.dtype(np.float32)
    x = (random_normal((rows, n), "float32", seed=seed)[0] + np.float32(mu)).astype(target)
    w = (1 + random_normal((n,), "float32", seed=seed + 1, scale=0.1)[0]).astype(target)
    y = cupy.empty((rows, n), dtype=x.dtype)
    if op == "rmsnorm":
        return x, w, y
    b = random_normal((n,), "float32", seed=seed + 2, scale=0.1)[0].astype(target)
    return x, w, b, y


def reference_of(op: str, args: tuple):
    """The float64 reference of a problem's arguments (x, w, (b,) y), rounded to float32: its own
    rounding (~3e-8) is far below every tolerance, and it halves the memory a cached reference holds."""
    ref = layer_norm_ref(*args[:3]) if op == "layernorm" else rms_norm_ref(*args[:2])
    return ref.astype(np.float32)


def torch_peers(op: str, compiled: bool = True) -> dict:
    """The peers of the chapter's ladder: {name: factory(case) -> callable returning the output tensor}:
    torch.nn.functional.layer_norm / rms_norm, eager and (``compiled``) torch.compile(dynamic=False),
    on the case's own memory (zero copy)."""
    import torch
    import torch._dynamo

    from utils.arrays import as_torch
    for name in ("recompile_limit", "cache_size_limit"):      # 10 fixed shapes per op, one compile each
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    fname = "layer_norm" if op == "layernorm" else "rms_norm"

    def eager(n):
        if op == "layernorm":
            return lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b, EPS_LN)
        return lambda x, w, b: torch.nn.functional.rms_norm(x, (n,), w, EPS_RMS)

    def factory(compile_it):
        def make(case):
            x, w = as_torch(case.args[0]), as_torch(case.args[1])
            b = as_torch(case.args[2]) if op == "layernorm" else None
            fn = eager(int(x.shape[1]))
            fn = torch.compile(fn, dynamic=False) if compile_it else fn
            return lambda: fn(x, w, b)       # a torch tensor: the ladder views it as CuPy after timing
        return make
    out = {f"torch.{fname}": factory(False)}
    if compiled:
        out[f"torch.compile.{fname}"] = factory(True)
    return out


def ladder(rec, op: str, shapes, dtypes, odd_shapes=(), seed: int = 0, compiled: bool = True,
           ceiling: str | None = "copy", bench: dict | None = None):
    """The chapter's :class:`utils.ladder.Ladder` for ``op``: seeded inputs (``random_arrays``), the
    float64 reference, the cost model, the torch peers (``compiled``: torch.compile too), bandwidth
    against the 1 GiB copy (``ceiling``); ``bench``: options for utils.bench (tests take fewer reps)."""
    from utils.arrays import bf16
    from utils.ladder import Case, Ladder
    if "bfloat16" in dtypes:
        bf16()                   # imports ml_dtypes, which gives NumPy the dtype name 'bfloat16'

    def make(shape, dtype, rng):
        args = random_arrays(op, shape, dtype, int(rng.integers(2**31)))
        return Case(args, outputs=(len(args) - 1,))

    return Ladder(rec, VERSIONS[op], shapes=shapes, dtypes=dtypes, odd_shapes=odd_shapes,
                  make=make, reference=lambda case: reference_of(op, case.args),
                  nbytes=lambda shape, dt: nbytes(*shape, np.dtype(dt).itemsize, op),
                  peers=torch_peers(op, compiled), ceiling=ceiling, seed=seed, bench=bench)


def resources(op: str, label: str, rows: int, n: int, dtype, facts=None) -> dict | None:
    """What the chapter times for a version on a shape: layout, ptxas registers and spills, dynamic smem,
    and the blocks per SM they allow (utils.occupancy), for the launch the version plans; None where the
    version does not take the shape (its plan says Unsupported)."""
    from utils.occupancy import from_function
    v = VERSIONS[op][label]
    p = shape_problem(op, rows, n, dtype)
    if not v.supports(p):
        return None
    (ln,) = v.launches(p)
    ln = ln if ln.source is not None else dataclasses.replace(ln, source=v.source)
    report = ptxas_of(ln)
    occ = from_function(report, ln.threads, ln.smem, facts)
    return {"layout": v.resolve_config(p), "registers": report["registers"],
            "spills": (report["spill_stores"], report["spill_loads"]), "smem": ln.smem,
            "blocks_per_sm": occ.blocks, "limiter": occ.limiter, "clusters": ln.grid[0] // ln.cluster,
            "launch": ln}


def resource_table(pairs, shapes, dtypes, facts=None):
    """A Table of :func:`resources` for [(op, label), ...] x shapes x dtypes (rows a version does not
    take are left out)."""
    from utils.ladder import shape_name
    from utils.table import Table
    rows = []
    for op, label in pairs:
        for dtype in dtypes:
            for rows_n in shapes:
                r = resources(op, label, *rows_n, dtype, facts)
                if r is None:
                    continue
                lay = r["layout"]
                rows.append([op, label, dtype, shape_name(rows_n), lay.name if lay else "block 256/row",
                             r["registers"], "{}/{}".format(*r["spills"]), r["smem"] // 1024,
                             f"{r['blocks_per_sm']} x {r['launch'].threads}"])
    return Table(["op", "version", "dtype", "shape", "layout", "registers", "spill st/ld (B)",
                  "dyn. smem (KiB)", "blocks x threads per SM"], rows, align="lllll" + "r" * 4)
