"""LayerNorm and RMSNorm forward (chapter 7): references, the numerics on the CPU, the cost model,
row layouts, launchers, versions and a dispatcher per shape.

``x`` is a C-contiguous ``rows x n`` array (float32 or bfloat16); ``w`` (and ``b`` for LayerNorm) are
length-``n`` arrays of the same dtype; ``y`` has the shape and dtype of ``x``. Arithmetic is fp32.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.build import KernelSource, max_active_clusters
from utils.ops import Version, expect_array, expect_same_device, registry

EPS_LN = 1e-5
EPS_RMS = 1e-6
NAIVE_THREADS = 256
MAX_GRID_X = 2**31 - 1


# --- references (NumPy or CuPy, computed in float64) -----------------------------------------------

def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


def layer_norm_ref(x, w, b, eps: float = EPS_LN):
    """LayerNorm over the last axis in float64 (two-pass in float64: exact enough to judge fp32)."""
    xp = _xp(x)
    x64 = x.astype(xp.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x64 - mean) / xp.sqrt(var + eps) * w.astype(xp.float64) + b.astype(xp.float64)


def rms_norm_ref(x, w, eps: float = EPS_RMS):
    """RMSNorm over the last axis in float64."""
    xp = _xp(x)
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


# --- row layouts -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Layout:
    """How a row is spread over threads: TPR threads per row (32: a warp per row; else the whole
    block), THREADS per block, ITEMS values per thread, CLUSTER blocks per row."""
    tpr: int
    threads: int
    items: int
    cluster: int = 1

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
def _stream_layouts(configs, vec):
    return tuple(Layout(t, t, nc * vec, cl) for nc, t, cl in configs)


STREAM_LAYOUTS = {
    # fp32 16384 in two CTAs of 4 chunks: LayerNorm's one CTA of 8 chunks x 512 spills at 128 registers
    "float32": _stream_layouts(((4, 512, 2), (8, 512, 4), (8, 512, 16)), 4),
    "bfloat16": _stream_layouts(((8, 256, 1), (8, 512, 2), (8, 512, 8)), 8),
}
STREAM_TUNE_LAYOUTS = {
    "float32": _stream_layouts(((8, 256, 2), (8, 256, 8), (4, 512, 8), (4, 1024, 16)), 4),
    "bfloat16": _stream_layouts(((4, 512, 1), (8, 256, 4), (4, 512, 4), (8, 256, 16), (4, 512, 16)), 8),
}
STREAM_ALL_LAYOUTS = {d: STREAM_LAYOUTS[d] + STREAM_TUNE_LAYOUTS[d] for d in STREAM_LAYOUTS}
STREAM_MAX_N = STREAM_LAYOUTS["float32"][-1].capacity
NUM_SMS = 132                    # H200 / H100 SXM: the persistent grid's size when no GPU is asked
SMEM_PER_SM = 228 * 1024         # shared memory per SM on sm_90

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


def layout_for(n: int) -> Layout:
    """The layout for rows of ``n`` values (the first, i.e. smallest, that holds the row)."""
    for lay in LAYOUTS:
        if n <= lay.capacity:
            return lay
    raise ValueError(f"x: rows of {n} values exceed the longest row the register layouts hold ({MAX_N})")


def raw_layout_for(n: int, dtype: str, layouts: dict | None = None) -> Layout:
    """The default raw-version layout for rows of ``n`` values of ``dtype`` (the first that holds it);
    ``layouts``: another per-dtype table of defaults (EARLY_LAYOUTS) instead of RAW_LAYOUTS."""
    for lay in (RAW_LAYOUTS if layouts is None else layouts)[dtype]:
        if n <= lay.capacity:
            return lay
    raise ValueError(f"x: rows of {n} values exceed the longest row the raw layouts hold ({MAX_N})")


def stream_layout_for(n: int, dtype: str) -> Layout:
    """The default stream layout for rows of ``n`` values of ``dtype`` (the first that holds it)."""
    for lay in STREAM_LAYOUTS[dtype]:
        if n <= lay.capacity:
            return lay
    raise ValueError(f"x: rows of {n} values exceed the longest row the stream layouts hold ({STREAM_MAX_N})")


def stream_smem(lay: Layout, dtype: str) -> int:
    """Dynamic shared memory of a stream CTA: two buffers of the slice (THREADS x ITEMS values)."""
    return 2 * 16 * lay.threads * (lay.items // VEC16[dtype])


def stream_ctas_per_sm(lay: Layout, dtype: str) -> int:
    """Stream CTAs per SM by threads and shared memory (as stream_min_blocks in row_stream.cuh)."""
    return max(1, min(2048 // lay.threads, SMEM_PER_SM // (stream_smem(lay, dtype) + 2048)))


def stream_clusters(rows: int, lay: Layout, dtype: str, sms: int = NUM_SMS) -> int:
    """Clusters of a persistent stream grid: as many as fit on ``sms`` SMs at once, at most one per row
    (the launcher lowers it to the driver's cuOccupancyMaxActiveClusters where that is smaller)."""
    return max(1, min(rows, sms * stream_ctas_per_sm(lay, dtype) // lay.cluster))


def grid_of(rows: int, lay: Layout) -> int:
    """Blocks along x: ceil(rows / rows_per_block) row groups, CLUSTER blocks each."""
    return -(-rows // lay.rows_per_block) * lay.cluster


DTYPES = {"float32": "float", "bfloat16": "__nv_bfloat16"}
VEC16 = {"float32": 4, "bfloat16": 8}     # values per 16-byte access


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


def _dtype_name(dt) -> str:
    name = np.dtype(dt).name
    if name not in DTYPES:
        raise ValueError(f"x: expected dtype float32 or bfloat16, got {name}")
    return name


def name_expression(kernel: str, dtype: str, vec: int, lay: Layout) -> str:
    return f"{kernel}<{DTYPES[dtype]}, {vec}, {lay.tpr}, {lay.threads}, {lay.items}, {lay.cluster}>"


# kernel -> values per access ("16": 16 bytes' worth for the dtype)
KERNELS = {
    "layernorm_v1_twopass": 1, "layernorm_v2_welford": 1, "layernorm_v3_vec16": 16,
    "rmsnorm_v1_registers": 1, "rmsnorm_v2_vec16": 16,
}
FAST_KERNELS = {"layernorm_v4_ilp": 16, "rmsnorm_v3_ilp": 16}   # instantiated for FAST_LAYOUTS
RAW_KERNELS = {"layernorm_v5_raw": 16, "rmsnorm_v4_raw": 16,      # instantiated for RAW_ALL_LAYOUTS[dtype]
               "layernorm_v6_shift": 16}
# raw kernels instantiated for EARLY_ALL_LAYOUTS[dtype] only (in SOURCE_RAW too), and the twin each one
# is compared with (the same kernel but for the split exit barrier)
EARLY_KERNELS = {"layernorm_v8_early_arrive": 16, "rmsnorm_v6_early_arrive": 16}
EARLY_TWINS = {"layernorm_v8_early_arrive": "layernorm_v6_shift", "rmsnorm_v6_early_arrive": "rmsnorm_v4_raw"}
# instantiated for STREAM_ALL_LAYOUTS[dtype]; they take any n (rows that are not 16-byte multiples are
# gathered element by element), so they count as one value per access for the width check
STREAM_KERNELS = {"layernorm_v7_stream": 1, "rmsnorm_v5_stream": 1}


def _vec(kernel: str, dtype: str) -> int:
    """Values per access of ``kernel`` (the v0 naive kernels, in no table, read one value at a time)."""
    return VEC16[dtype] if {**KERNELS, **FAST_KERNELS, **RAW_KERNELS, **EARLY_KERNELS}.get(kernel, 1) == 16 else 1


def stream_name_expression(kernel: str, dtype: str, lay: Layout) -> str:
    """kernel<T, NC, THREADS, CL> of a stream layout."""
    return f"{kernel}<{DTYPES[dtype]}, {lay.items // VEC16[dtype]}, {lay.threads}, {lay.cluster}>"


def _all_name_expressions() -> tuple[str, ...]:
    out = [f"{k}<{t}>" for k in ("layernorm_v0_naive", "rmsnorm_v0_naive") for t in DTYPES.values()]
    for kernel in KERNELS:
        for dtype in DTYPES:
            for lay in LAYOUTS:
                out.append(name_expression(kernel, dtype, _vec(kernel, dtype), lay))
    return tuple(out)


# ptxas spills 28 bytes in one instantiation: the scalar Welford version, bf16, 64 values per thread
# (the incremental update keeps more values live than the two-pass sum; 128 registers do not hold it).
# It is built as a source of its own, marked as spilling, so the CI check holds every other kernel
# to zero spills. The chapter shows the report.
SPILLING = (name_expression("layernorm_v2_welford", "bfloat16", 1, LAYOUTS[-1]),)
SOURCE = KernelSource("layernorm.cu",
                      name_expressions=tuple(e for e in _all_name_expressions() if e not in SPILLING))
SOURCE_SPILLING = KernelSource("layernorm.cu", name_expressions=SPILLING, spill_free=False)
# The fast versions in a module of their own, so that the tune script compiles only them.
SOURCE_FAST = KernelSource("layernorm.cu", name_expressions=tuple(
    name_expression(k, d, _vec(k, d), lay) for k in FAST_KERNELS for d in DTYPES for lay in FAST_LAYOUTS))
SOURCE_RAW = KernelSource("layernorm.cu", name_expressions=tuple(
    name_expression(k, d, _vec(k, d), lay) for k in RAW_KERNELS for d in DTYPES for lay in RAW_ALL_LAYOUTS[d])
    + tuple(name_expression(k, d, _vec(k, d), lay) for k in EARLY_KERNELS for d in DTYPES for lay in EARLY_ALL_LAYOUTS[d]))
SOURCE_STREAM = KernelSource("layernorm.cu", name_expressions=tuple(
    stream_name_expression(k, d, lay) for k in STREAM_KERNELS for d in DTYPES for lay in STREAM_ALL_LAYOUTS[d]))


def function(expr: str):
    """The CuPy kernel for a name expression, from whichever source instantiates it."""
    if expr in SPILLING:
        return SOURCE_SPILLING.function(expr)
    if expr.startswith(tuple(RAW_KERNELS) + tuple(EARLY_KERNELS)):
        return SOURCE_RAW.function(expr)
    if expr.startswith(tuple(STREAM_KERNELS)):
        return SOURCE_STREAM.function(expr)
    return (SOURCE_FAST if expr.startswith(tuple(FAST_KERNELS)) else SOURCE).function(expr)


# --- launchers -------------------------------------------------------------------------------------

def _validate(op: str, x, w, b, y, vec: int = 1):
    expect_array(x, "x", ndim=2)
    dtype = _dtype_name(x.dtype)
    dt = x.dtype
    rows, n = (int(s) for s in x.shape)
    if rows < 1 or n < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, n)}")
    if rows >= 2**31 or n >= 2**24:
        raise ValueError(f"x: rows must be below 2**31 and n below 2**24 (int32 indices, counts exact "
                         f"in fp32), got {(rows, n)}")
    if n % vec:
        raise ValueError(f"x: this version moves {vec} values per 16-byte access, so n must be a multiple "
                         f"of {vec}; got n = {n} (use a scalar version for this width)")
    expect_array(w, "w", dtype=dt, shape=(n,))
    if op == "layernorm":
        expect_array(b, "b", dtype=dt, shape=(n,))
        expect_same_device(x, w, b, y)
    expect_array(y, "y", dtype=dt, shape=(rows, n))
    if op == "rmsnorm":
        expect_same_device(x, w, y)
    return dtype, rows, n


def _args(op, x, w, b, y, rows, n, eps):
    tail = (y, np.int32(rows), np.int32(n), np.float32(eps))
    return (x, w, b, *tail) if op == "layernorm" else (x, w, *tail)


def _plan_naive(op, x, w, b, y, eps):
    """(kernel, grid, block, args) of a v0 launch, after validating every argument."""
    dtype, rows, n = _validate(op, x, w, b, y)
    if rows > MAX_GRID_X:
        raise ValueError(f"x: {rows} rows exceed the grid limit {MAX_GRID_X}")
    fn = function(f"{op}_v0_naive<{DTYPES[dtype]}>")
    return fn, (rows, 1, 1), (NAIVE_THREADS, 1, 1), _args(op, x, w, b, y, rows, n, eps)


def _plan_rows(op, kernel, x, w, b, y, eps, layout):
    """(kernel, grid, block, args) of a v1-v3 launch, after validating every argument."""
    expect_array(x, "x", ndim=2)
    vec = _vec(kernel, _dtype_name(x.dtype))
    dtype, rows, n = _validate(op, x, w, b, y, vec)
    if kernel in RAW_KERNELS:
        lay = raw_layout_for(n, dtype) if layout is None else layout
        allowed, allowed_name = RAW_ALL_LAYOUTS[dtype], f"RAW_ALL_LAYOUTS['{dtype}']"
    elif kernel in EARLY_KERNELS:
        lay = raw_layout_for(n, dtype, EARLY_LAYOUTS) if layout is None else layout
        allowed, allowed_name = EARLY_ALL_LAYOUTS[dtype], f"EARLY_ALL_LAYOUTS['{dtype}']"
    else:
        lay = layout_for(n) if layout is None else layout
        allowed, allowed_name = (FAST_LAYOUTS, "FAST_LAYOUTS") if kernel in FAST_KERNELS else (LAYOUTS, "LAYOUTS")
    if lay not in allowed:
        raise ValueError(f"layout {lay} is not instantiated for {kernel} ({dtype}); pick one of {allowed_name}")
    if n > lay.capacity:
        raise ValueError(f"x: rows of {n} values do not fit layout {lay.name} (capacity {lay.capacity})")
    grid = grid_of(rows, lay)
    if grid > MAX_GRID_X:
        raise ValueError(f"x: {rows} rows need {grid} blocks, more than the grid limit {MAX_GRID_X}")
    fn = function(name_expression(kernel, dtype, vec, lay))
    return fn, (grid, 1, 1), (lay.threads, 1, 1), _args(op, x, w, b, y, rows, n, eps)


def _plan_stream(op, kernel, x, w, b, y, eps, layout):
    """(kernel, grid, block, args, smem) of a persistent stream launch, after validating every argument.
    The grid holds as many clusters as the driver says fit at once (stream_clusters, lowered to
    cuOccupancyMaxActiveClusters): a cluster beyond them would run after the others, a second wave."""
    dtype, rows, n = _validate(op, x, w, b, y)
    lay = stream_layout_for(n, dtype) if layout is None else layout
    if lay not in STREAM_ALL_LAYOUTS[dtype]:
        raise ValueError(f"layout {lay} is not instantiated for {kernel} ({dtype}); "
                         f"pick one of STREAM_ALL_LAYOUTS['{dtype}']")
    if n > lay.capacity:
        raise ValueError(f"x: rows of {n} values do not fit layout {lay.name} (capacity {lay.capacity})")
    from utils.build import prepare_launch
    smem = stream_smem(lay, dtype)
    fn = prepare_launch(function(stream_name_expression(kernel, dtype, lay)), lay.cluster, smem)
    clusters = stream_clusters(rows, lay, dtype)
    fit = max_active_clusters(fn, lay.threads, smem, lay.cluster)
    if fit is not None:
        clusters = min(clusters, fit)
    return fn, (clusters * lay.cluster, 1, 1), (lay.threads, 1, 1), _args(op, x, w, b, y, rows, n, eps), smem


def _plan(op, kernel, x, w, b, y, eps, layout):
    """(kernel, grid, block, args, dynamic smem bytes) of a launch of ``kernel``."""
    if kernel in STREAM_KERNELS:
        return _plan_stream(op, kernel, x, w, b, y, eps, layout)
    return (*_plan_fixed(op, kernel, x, w, b, y, eps, layout), 0)


def _plan_fixed(op, kernel, x, w, b, y, eps, layout):
    if kernel.endswith("_v0_naive"):
        if layout is not None:
            raise ValueError(f"{kernel} has one fixed layout (a block of {NAIVE_THREADS} threads per row)")
        return _plan_naive(op, x, w, b, y, eps)
    return _plan_rows(op, kernel, x, w, b, y, eps, layout)


def bind(op: str, label: str, x, w, b, y, eps: float | None = None, layout: Layout | None = None):
    """Validate once and return a zero-argument callable that only launches ``label`` of ``op``.

    For timing loops: on the smallest shapes a kernel runs for a few microseconds, about as long as the
    Python-side checks of a launcher, and the GPU must never wait for the CPU between the start event
    and the kernel. ``b`` is ignored (pass None) for RMSNorm.
    """
    kernel = VERSIONS[op][label].kernel
    eps = (EPS_LN if op == "layernorm" else EPS_RMS) if eps is None else eps
    fn, grid, block, args, smem = _plan(op, kernel, x, w, b if op == "layernorm" else None, y, eps, layout)

    def launch():
        fn(grid, block, args, shared_mem=smem)
    return launch


def _ln_launcher(kernel: str):
    def launch(x, w, b, y, eps: float = EPS_LN, layout: Layout | None = None):
        fn, grid, block, args, smem = _plan("layernorm", kernel, x, w, b, y, eps, layout)
        fn(grid, block, args, shared_mem=smem)
        return y
    launch.__name__ = f"launch_{kernel}"
    launch.__doc__ = f"Launch {kernel}: y = LayerNorm(x) * w + b over rows of x (rows x n)."
    return launch


def _rms_launcher(kernel: str):
    def launch(x, w, y, eps: float = EPS_RMS, layout: Layout | None = None):
        fn, grid, block, args, smem = _plan("rmsnorm", kernel, x, w, None, y, eps, layout)
        fn(grid, block, args, shared_mem=smem)
        return y
    launch.__name__ = f"launch_{kernel}"
    launch.__doc__ = f"Launch {kernel}: y = RMSNorm(x) * w over rows of x (rows x n)."
    return launch


LN_VERSIONS = registry(
    Version("layernorm_v0_naive", "v0_naive", _ln_launcher("layernorm_v0_naive"),
            "block per row, var = E[x^2] - E[x]^2 in one sweep, x re-read to normalize"),
    Version("layernorm_v1_twopass", "v1_twopass", _ln_launcher("layernorm_v1_twopass"),
            "row in registers (warp / block / cluster of 8 per row), mean then squared deviations: one read"),
    Version("layernorm_v2_welford", "v2_welford", _ln_launcher("layernorm_v2_welford"),
            "Welford states per thread, merged by warps, blocks and clusters (Chan): one reduction"),
    Version("layernorm_v3_vec16", "v3_vec16", _ln_launcher("layernorm_v3_vec16"),
            "v2 with 16-byte loads and stores"),
    Version("layernorm_v4_ilp", "v4_ilp", _ln_launcher("layernorm_v4_ilp"),
            "16-byte layout, exact two-pass from registers with 4 accumulators, Chan merge over the cluster"),
    Version("layernorm_v5_raw", "v5_raw", _ln_launcher("layernorm_v5_raw"),
            "v4 with raw 16-byte chunks in registers, grouped weight loads, several blocks per SM"),
    Version("layernorm_v6_shift", "v6_shift", _ln_launcher("layernorm_v6_shift"),
            "v5 with sums shifted by the row's first value: one reduction (as RMSNorm), RMSNorm's registers"),
    Version("layernorm_v7_stream", "v7_stream", _ln_launcher("layernorm_v7_stream"),
            "persistent clusters, each CTA a fixed row slice double-buffered in smem (cp.async), exact stats"),
    Version("layernorm_v8_early_arrive", "v8_early_arrive", _ln_launcher("layernorm_v8_early_arrive"),
            "v6 with the exit cluster barrier split: relaxed arrive after the DSMEM reads, wait after the stores"),
)

RMS_VERSIONS = registry(
    Version("rmsnorm_v0_naive", "v0_naive", _rms_launcher("rmsnorm_v0_naive"),
            "block per row, sum of squares, x re-read to normalize"),
    Version("rmsnorm_v1_registers", "v1_registers", _rms_launcher("rmsnorm_v1_registers"),
            "row in registers (warp / block / cluster of 8 per row): one read"),
    Version("rmsnorm_v2_vec16", "v2_vec16", _rms_launcher("rmsnorm_v2_vec16"),
            "v1 with 16-byte loads and stores"),
    Version("rmsnorm_v3_ilp", "v3_ilp", _rms_launcher("rmsnorm_v3_ilp"),
            "v2 with 4 accumulators and a register budget sized to the values held"),
    Version("rmsnorm_v4_raw", "v4_raw", _rms_launcher("rmsnorm_v4_raw"),
            "v3 with raw 16-byte chunks in registers, grouped weight loads, several blocks per SM"),
    Version("rmsnorm_v5_stream", "v5_stream", _rms_launcher("rmsnorm_v5_stream"),
            "persistent clusters, each CTA a fixed row slice double-buffered in smem (cp.async)"),
    Version("rmsnorm_v6_early_arrive", "v6_early_arrive", _rms_launcher("rmsnorm_v6_early_arrive"),
            "v4 with the exit cluster barrier split: relaxed arrive after the DSMEM reads, wait after the stores"),
)

VERSIONS = {"layernorm": LN_VERSIONS, "rmsnorm": RMS_VERSIONS}


# --- dispatcher ------------------------------------------------------------------------------------

FAST_LABEL = {"layernorm": "v4_ilp", "rmsnorm": "v3_ilp"}


def pick(op: str, n: int, dtype) -> str:
    """The version label the dispatcher uses for rows of ``n`` values: the measured winner (TUNED) on
    the chapter's widths, else the fast 16-byte version where n is a multiple of the 16-byte vector,
    else the best scalar one; the naive kernel beyond MAX_N."""
    name = _dtype_name(dtype)
    if n > MAX_N:
        return "v0_naive"
    if (op, name, n) in TUNED:
        return TUNED[op, name, n][0]
    if n % VEC16[name] == 0:
        return FAST_LABEL[op]
    return "v1_twopass" if op == "layernorm" else "v1_registers"


def pick_layout(op: str, n: int, dtype) -> Layout | None:
    """The layout the dispatcher passes with :func:`pick`'s version (None: the version's default)."""
    name = _dtype_name(dtype)
    if (op, name, n) in TUNED:
        return TUNED[op, name, n][1]
    if pick(op, n, dtype) != FAST_LABEL[op]:
        return None
    return layout_for(n)


def layout_of(op: str, label: str, n: int, dtype) -> Layout | None:
    """The layout to time ``label`` of ``op`` with at width ``n``: the TUNED one when the dispatcher
    picks this version there, or picks its early-arrive twin or twin (EARLY_TWINS, either way round) on a
    layout both are instantiated for, so that the two time side by side; for layernorm_v6_shift elsewhere
    RMSNorm's TUNED layout, since v6 has rmsnorm_v4's reduction (one per row) and register budget; else
    None (the default)."""
    name = _dtype_name(dtype)
    tuned = TUNED.get((op, name, n))
    if tuned is not None and tuned[0] == label:
        return tuned[1]
    kernel = VERSIONS[op][label].kernel if label in VERSIONS[op] else None
    if tuned is not None and tuned[1] in EARLY_ALL_LAYOUTS[name]:
        chosen = VERSIONS[op][tuned[0]].kernel
        if EARLY_TWINS.get(kernel) == chosen or EARLY_TWINS.get(chosen) == kernel:
            return tuned[1]
    if (op, label) == ("layernorm", "v6_shift") and ("rmsnorm", name, n) in TUNED:
        return TUNED["rmsnorm", name, n][1]
    return None


def layer_norm(x, w, b, eps: float = EPS_LN, out=None):
    """LayerNorm of the rows of ``x`` (rows x n, fp32 or bf16) with the version :func:`pick` chooses."""
    import cupy
    expect_array(x, "x", ndim=2)
    y = cupy.empty_like(x) if out is None else out
    n = int(x.shape[1])
    return LN_VERSIONS[pick("layernorm", n, x.dtype)].launch(x, w, b, y, eps,
                                                              layout=pick_layout("layernorm", n, x.dtype))


def rms_norm(x, w, eps: float = EPS_RMS, out=None):
    """RMSNorm of the rows of ``x`` (rows x n, fp32 or bf16) with the version :func:`pick` chooses."""
    import cupy
    expect_array(x, "x", ndim=2)
    y = cupy.empty_like(x) if out is None else out
    n = int(x.shape[1])
    return RMS_VERSIONS[pick("rmsnorm", n, x.dtype)].launch(x, w, y, eps,
                                                             layout=pick_layout("rmsnorm", n, x.dtype))
