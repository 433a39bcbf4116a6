"""Softmax over the last dim (chapter 6): the reference, the cost model, launch plans, launchers, versions.

``y[r, :] = softmax(x[r, :])`` for a C-contiguous ``rows x cols`` array of float32 or bfloat16
(``ml_dtypes.bfloat16``); ``y`` has the dtype of ``x``. bf16 is read and written as bf16, all arithmetic
is fp32. A row of only -inf gives NaN, as ``torch.softmax`` does; a single -inf entry gives 0.

Every version's geometry (which template instance, grid, block) is a pure function of (rows, cols,
dtype), tested on the CPU; :func:`plan` is the dispatcher that picks a version per shape.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.build import PORTABLE_CLUSTER, KernelSource, max_active_clusters  # noqa: F401 (S.PORTABLE_CLUSTER)
from utils.ops import Version, expect_array, expect_same_device, registry

try:                                     # bf16 on the host side; present wherever CuPy handles bf16
    from ml_dtypes import bfloat16 as BF16
except ImportError:                      # pragma: no cover - the toolkit's CPU tests install it
    BF16 = None

MAX_GRID_Y = 65535
MAX_GRID_X = 2**31 - 1

# Launch constants; they must match the constexprs of the same names in softmax.cu.
V0_THREADS = 256
V1_THREADS = 512
V2_ROWS = 8                      # warps (= rows) per block of v2
V2_NC = (1, 2, 4, 8)             # 16-byte chunks per lane that v2 is instantiated for
V3_THREADS = (128, 256, 512, 1024)
V3_ELEMS = 16                    # elements per thread in v3 (4 chunks fp32, 2 chunks bf16)
V4_THREADS = 1024
V4_CLUSTERS = (2, 4, 8)
V4_ELEMS = (16, 32)              # elements per thread in v4: 16 first, 32 only with 8 blocks

# v5 / v6 configurations per dtype name, (NC chunks per thread, THREADS[, CL]), in the order the default
# geometry tries them: the first whose row capacity (CL x THREADS x NC x VEC elements) holds the row.
# The defaults are the winners of the second H200 tuning run (scripts/tune/ch06_softmax.py) at the
# chapter's widths. What decided them was the row bytes each SM keeps resident in registers (blocks per SM
# x bytes per block): 128-160 KiB per SM won every width but fp32 4096, where (4, 256) at 96 KiB and
# (8, 128) at 128 KiB tie within 1% (bf16 4096 in 64-thread blocks of 8 chunks, 16
# blocks per SM; fp32 65536 in clusters of 8 128-thread blocks of 16 chunks, 5 per SM; bf16 262144 in
# clusters of 16, four 32 KiB blocks per SM, the non-portable size the launcher allows). The extras are the
# first run's defaults and the runner-ups, kept for the notebook's tuning table.
V5_DEFAULT = {"float32": ((2, 128), (4, 256), (4, 512), (8, 512)),
              "bfloat16": ((1, 128), (2, 128), (8, 64), (4, 256), (8, 256), (4, 1024))}
V5_EXTRA = {"float32": ((8, 128),),
            "bfloat16": ((4, 128),)}
V6_DEFAULT = {"float32": ((4, 512, 2), (16, 128, 8), (16, 512, 8)),
              "bfloat16": ((4, 512, 2), (8, 256, 4), (4, 512, 8), (8, 256, 16))}
V6_EXTRA = {"float32": ((4, 512, 8), (8, 512, 4), (16, 256, 16)),
            "bfloat16": ((4, 512, 4), (4, 256, 8), (8, 512, 8))}
# v7 configurations, (NC chunks per lane, ROWS warps per block, MIN_BLOCKS per SM asked of ptxas).
# bf16 (4, 8, 6) won 8192 x 1024 (by a hair over v2 and (4, 8, 8), all within 2%).
V7_DEFAULT = {"float32": ((4, 8, 8), (8, 8, 5)),
              "bfloat16": ((4, 8, 6), (8, 8, 5))}
V7_EXTRA = {"float32": (),
            "bfloat16": ((4, 8, 8),)}
# v8 configurations, (NC chunks per lane, ROWS warps per block, MIN_BLOCKS, RPW rows per warp): the grid
# is ceil(rows / (ROWS x RPW)) blocks, each warp streaming RPW rows; MIN_BLOCKS is chosen so that the
# grid fits one wave on 132 SMs with near-equal blocks per SM. A warp holds its current row widened (32
# registers for bf16 1024) plus the next row raw (16), so at 64 registers (8 blocks of 4 warps) ptxas
# spills: the bf16 default is 64-thread blocks, 12 per SM (84 registers), 3 rows per warp: 1366 blocks,
# 10.3 per SM (at most 11), ~21 warps and ~42 KiB of reads in flight per SM; the extra is 16 warps per
# SM with 4 rows each (32 KiB). fp32 (8, 4, 5, 4): 512 blocks, ~3.9 per SM, 16 warps of 4 KiB rows.
# The third H200 tuning run (2026-11-29) put bf16 (4, 4, 4, 4) first at 8192 x 1024 (12.4 us, 63% of
# copy, vs 12.7 us for (4, 2, 12, 3) and ~13.1 us for v7), so it is the default.
V8_DEFAULT = {"float32": ((8, 4, 5, 4),),
              "bfloat16": ((4, 4, 4, 4),)}
V8_EXTRA = {"float32": (),
            "bfloat16": ((4, 2, 12, 3),)}
# v9 configurations, (NC chunks per thread per buffer, THREADS, CL): a CTA's slice of a row is
# NC x THREADS 16-byte chunks, double-buffered in shared memory (2 x 16 x NC x THREADS bytes), and a row
# is CL slices. From the arithmetic, not yet measured: a slice of 64 KiB (512 threads x 8 chunks) is
# 128 KiB of smem, one CTA per SM and 64 KiB of reads in flight per SM; a slice of 32 KiB (256 x 8 or
# 512 x 4) fits two or three CTAs per SM with the same bytes in flight and more CTAs to overlap one's
# barrier with another's copies. fp32 262144 (1 MiB rows) needs CL = 16 for 64 KiB slices (non-portable);
# bf16 262144 takes CL = 8 x 64 KiB or 16 x 32 KiB; 65536 CL = 2-8; 16384 CL = 1-2 (no cluster barrier).
# NC stays at 8 or below: the norm kernels of chapter 7 keep w (and b) of their slice in registers.
V9_DEFAULT = {"float32": ((8, 512, 1), (8, 512, 4), (8, 512, 16)),
              "bfloat16": ((8, 256, 1), (8, 512, 2), (8, 512, 8))}
V9_EXTRA = {"float32": ((8, 256, 2), (8, 256, 8), (4, 512, 8), (4, 1024, 16)),
            "bfloat16": ((4, 512, 1), (8, 256, 4), (4, 512, 4), (8, 256, 16), (4, 512, 16))}
# v10 (v6 with one exponential per element): v6's default instances, so that the two compare like for like.
V10_DEFAULT = V6_DEFAULT
V10_EXTRA = {"float32": (), "bfloat16": ()}
# v11 (v10 with its exit cluster barrier split: relaxed arrive, stores, wait): v10's instances, likewise.
V11_DEFAULT = V6_DEFAULT
V11_EXTRA = {"float32": (), "bfloat16": ()}
RAW_TABLES = {"v5_block_raw": (V5_DEFAULT, V5_EXTRA), "v6_cluster_raw": (V6_DEFAULT, V6_EXTRA),
              "v7_warp_raw": (V7_DEFAULT, V7_EXTRA), "v8_warp_stream": (V8_DEFAULT, V8_EXTRA),
              "v9_stream": (V9_DEFAULT, V9_EXTRA), "v10_cluster_once": (V10_DEFAULT, V10_EXTRA),
              "v11_early_arrive": (V11_DEFAULT, V11_EXTRA)}
# The versions of one cluster per row: grid (CL, rows), the cluster size is grid x (rows on grid y)
CLUSTER_ROW_VERSIONS = ("v4_cluster_row", "v6_cluster_raw", "v10_cluster_once", "v11_early_arrive")
# Clusters above PORTABLE_CLUSTER (8) need the non-portable attribute: utils.build.prepare_launch sets it.
NUM_SMS = 132                    # H200 / H100 SXM: the persistent grid's size when no GPU is asked
SMEM_PER_SM = 228 * 1024         # shared memory per SM on sm_90 (1 KiB of it reserved per resident block)


def _dtypes():
    out = [np.dtype(np.float32)]
    if BF16 is not None:
        out.append(np.dtype(BF16))
    return tuple(out)


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def vec(dtype) -> int:
    """Elements per 16-byte chunk: 4 fp32, 8 bf16."""
    return 16 // np.dtype(dtype).itemsize


def ctype(dtype) -> str:
    name = dtype_name(dtype)
    if name == "float32":
        return "float"
    if name == "bfloat16":
        return "__nv_bfloat16"
    raise ValueError(f"softmax supports float32 and bfloat16, got {name}")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- the reference and the cost model --------------------------------------------------------------

def reference(x):
    """softmax over the last dim in float64 (NumPy or CuPy, wherever ``x`` lives); -inf rows give NaN."""
    if isinstance(x, np.ndarray):
        xp = np
    else:
        import cupy as xp
    x64 = x.astype(np.float32).astype(np.float64)
    m = x64.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = xp.exp(x64 - m)                  # -inf - (-inf) = NaN on fully masked rows, as torch
        return e / e.sum(axis=-1, keepdims=True)


def nbytes(rows: int, cols: int, itemsize: int = 4) -> int:
    """Minimum bytes: x read once, y written once."""
    return 2 * itemsize * rows * cols


def traffic(version: str, rows: int, cols: int, itemsize: int = 4) -> int:
    """Bytes a version moves if no second read of x hits in a cache (v0: 3 reads, v1: 2, others: 1)."""
    reads = {"v0_three_pass": 3, "v1_online": 2}.get(version, 1)
    return (reads + 1) * itemsize * rows * cols


def flops(rows: int, cols: int) -> int:
    """About 5 per element (max, subtract, exp, add, multiply); softmax is bound by bytes, not these."""
    return 5 * rows * cols


# --- launch geometry ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: template instance (name expression), grid, block."""
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0                # dynamic shared memory (bytes)
    cluster: int = 0             # blocks per cluster when not implied by the grid (v9), else 0


def kname(base: str, dtype, *params: int) -> str:
    """The name expression of a template instance: softmax_v2_warp_row<float, 8>."""
    return f"{base}<{', '.join([ctype(dtype), *map(str, params)])}>"


def v2_chunks(cols: int, dtype) -> int | None:
    """Chunks per lane for v2 (the fewest that hold the row), None if the row is too long."""
    for nc in V2_NC:
        if 32 * vec(dtype) * nc >= cols:
            return nc
    return None


def v3_threads(cols: int) -> int | None:
    for t in V3_THREADS:
        if t * V3_ELEMS >= cols:
            return t
    return None


def v4_config(cols: int) -> tuple[int, int] | None:
    """(cluster size, elements per thread) for v4: 16 elements with the smallest cluster that holds the
    row, else 32 elements with 8 blocks; None above 8 x 1024 x 32 = 262144."""
    for cl in V4_CLUSTERS:
        if cl * V4_THREADS * V4_ELEMS[0] >= cols:
            return cl, V4_ELEMS[0]
    if V4_CLUSTERS[-1] * V4_THREADS * V4_ELEMS[-1] >= cols:
        return V4_CLUSTERS[-1], V4_ELEMS[-1]
    return None


def raw_capacity(dtype, nc: int, threads: int, cl: int = 1) -> int:
    """Elements of a row that v5 (cl = 1) or v6 hold: cl blocks x threads x nc chunks x VEC."""
    return cl * threads * nc * vec(dtype)


def capacity(version: str, dtype, config: tuple) -> int:
    """Elements per row that one v5/v6/v7 configuration holds (v7: a warp of 32 lanes x NC chunks)."""
    if version in ("v7_warp_raw", "v8_warp_stream"):
        return raw_capacity(dtype, config[0], 32)
    return raw_capacity(dtype, *config)


def raw_configs(version: str, dtype) -> tuple:
    """Every instantiated configuration of a raw version: the defaults, then the tuning extras."""
    table, extra = RAW_TABLES[version]
    return table[dtype_name(dtype)] + extra[dtype_name(dtype)]


def raw_config(version: str, cols: int, dtype, config: tuple | None = None) -> tuple:
    """(NC, THREADS) for v5, (NC, THREADS, CL) for v6, (NC, ROWS, MIN_BLOCKS) for v7, (NC, ROWS,
    MIN_BLOCKS, RPW) for v8: ``config`` if
    given (it must be instantiated and hold the row), else the first default that holds the row."""
    table = RAW_TABLES[version][0][dtype_name(dtype)]
    dn = dtype_name(dtype)
    if config is not None:
        config = tuple(int(c) for c in config)
        if config not in raw_configs(version, dtype):
            raise ValueError(f"{version}: config {config} is not instantiated for {dn}; "
                             f"choose one of {raw_configs(version, dtype)}")
        if capacity(version, dtype, config) < cols:
            raise ValueError(f"{version}: config {config} holds at most {capacity(version, dtype, config)} "
                             f"elements per row, got cols={cols}")
        return config
    for cfg in table:
        if capacity(version, dtype, cfg) >= cols:
            return cfg
    raise ValueError(f"{version} holds at most {capacity(version, dtype, table[-1])} {dn} elements per row, "
                     f"got cols={cols}")


def max_cols(version: str, dtype) -> int | None:
    """Longest row a version handles with its default configurations (None: any)."""
    if version in RAW_TABLES:
        return capacity(version, dtype, RAW_TABLES[version][0][dtype_name(dtype)][-1])
    return {"v2_warp_row": 32 * vec(dtype) * V2_NC[-1], "v3_block_row": V3_THREADS[-1] * V3_ELEMS,
            "v4_cluster_row": V4_CLUSTERS[-1] * V4_THREADS * V4_ELEMS[-1]}.get(version)


def stream_smem(dtype, config: tuple) -> int:
    """Dynamic shared memory of a v9 CTA: two buffers of NC x THREADS 16-byte chunks."""
    nc, threads, _ = config
    return 2 * 16 * nc * threads


def stream_ctas_per_sm(dtype, config: tuple) -> int:
    """v9 CTAs one SM holds by threads and shared memory (the registers are ptxas's, checked by the
    tuning script): the double buffer plus ~1 KiB of static slots and the per-block reservation."""
    _, threads, _ = config
    return max(1, min(2048 // threads, SMEM_PER_SM // (stream_smem(dtype, config) + 2048)))


def stream_clusters(rows: int, dtype, config: tuple, sms: int = NUM_SMS) -> int:
    """Clusters of the persistent v9 grid: as many as fit on ``sms`` SMs at once, at most one per row.
    The launcher lowers this to the driver's cuOccupancyMaxActiveClusters where that is smaller (a
    cluster of 16 must fit in one GPC, and GPCs do not all have 16 free SMs)."""
    cl = config[2]
    return max(1, min(rows, sms * stream_ctas_per_sm(dtype, config) // cl))


def geometry(version: str, rows: int, cols: int, dtype, config: tuple | None = None) -> list[Launch]:
    """The launches of ``version`` for a rows x cols input (pure function, tested on the CPU).
    ``config`` picks a non-default instance of v5/v6/v7 (see :func:`raw_config`)."""
    if config is not None and version not in RAW_TABLES:
        raise ValueError(f"{version} takes no config, got {config}")
    if version == "v7_warp_raw":
        nc, rows_per_block, min_blocks = raw_config(version, cols, dtype, config)
        return [Launch(kname("softmax_v7_warp_raw", dtype, nc, rows_per_block, min_blocks),
                       (ceil_div(rows, rows_per_block), 1, 1), (32 * rows_per_block, 1, 1))]
    if version == "v8_warp_stream":
        nc, rows_per_block, min_blocks, rpw = raw_config(version, cols, dtype, config)
        return [Launch(kname("softmax_v8_warp_stream", dtype, nc, rows_per_block, min_blocks),
                       (ceil_div(rows, rows_per_block * rpw), 1, 1), (32 * rows_per_block, 1, 1))]
    if version == "v9_stream":
        cfg = raw_config(version, cols, dtype, config)
        nc, t, cl = cfg
        return [Launch(kname("softmax_v9_stream", dtype, nc, t, cl), (stream_clusters(rows, dtype, cfg) * cl, 1, 1),
                       (t, 1, 1), smem=stream_smem(dtype, cfg), cluster=cl)]
    if version == "v5_block_raw":
        nc, t = raw_config(version, cols, dtype, config)
        return [Launch(kname("softmax_v5_block_raw", dtype, nc, t), (rows, 1, 1), (t, 1, 1))]
    if version in ("v6_cluster_raw", "v10_cluster_once", "v11_early_arrive"):
        nc, t, cl = raw_config(version, cols, dtype, config)
        return [Launch(kname("softmax_" + version, dtype, nc, t, cl), (cl, rows, 1), (t, 1, 1))]
    if version == "v0_three_pass":
        g, b = (rows, 1, 1), (V0_THREADS, 1, 1)
        return [Launch(kname("softmax_v0_three_pass_max", dtype), g, b),
                Launch(kname("softmax_v0_three_pass_sum", dtype), g, b),
                Launch(kname("softmax_v0_three_pass_normalize", dtype), g, b)]
    if version == "v1_online":
        return [Launch(kname("softmax_v1_online", dtype), (rows, 1, 1), (V1_THREADS, 1, 1))]
    if version == "v2_warp_row":
        nc = v2_chunks(cols, dtype)
        if nc is None:
            raise ValueError(f"v2_warp_row holds at most {max_cols(version, dtype)} {dtype_name(dtype)} "
                             f"elements per row in one warp's registers, got cols={cols}")
        return [Launch(kname("softmax_v2_warp_row", dtype, nc), (ceil_div(rows, V2_ROWS), 1, 1),
                       (32 * V2_ROWS, 1, 1))]
    if version == "v3_block_row":
        t = v3_threads(cols)
        if t is None:
            raise ValueError(f"v3_block_row holds at most {max_cols(version, dtype)} elements per row "
                             f"({V3_THREADS[-1]} threads x {V3_ELEMS}), got cols={cols}")
        return [Launch(kname("softmax_v3_block_row", dtype, V3_ELEMS // vec(dtype), t), (rows, 1, 1), (t, 1, 1))]
    if version == "v4_cluster_row":
        cfg = v4_config(cols)
        if cfg is None:
            raise ValueError(f"v4_cluster_row holds at most {max_cols(version, dtype)} elements per row "
                             f"(8 blocks x {V4_THREADS} threads x {V4_ELEMS[-1]}), got cols={cols}")
        cl, elems = cfg
        return [Launch(kname("softmax_v4_cluster_row", dtype, elems // vec(dtype), cl), (cl, rows, 1),
                       (V4_THREADS, 1, 1))]
    raise KeyError(f"unknown softmax version {version!r}")


# The dispatcher's table: for each dtype, (longest row, version) in order; the first row limit that
# holds cols wins; the second H200 tuning run's winners at the chapter's widths. fp32: v2 for short rows,
# v5 (4, 256) at 4096 and v3 at 16384 (the two within 1% of each other at both widths); bf16: v7's
# register-capped warps for short rows, v5 up to a block; rows longer than a block go to v6 (rows on grid y).
# bf16 rows of up to 1024 go to v8 (each warp streams 4 rows): the third tuning run's winner there
# (fp32 v8 tied v2 within 0.3%, so fp32 keeps v2). Rows longer than a block go to v10, v6 with one
# exponential per element: in its first H200 run (2026-11-29) 1.07x v6 at fp32 65536, 1.03x at bf16 65536,
# 1.00-1.01x at 262144, on v6's instances.
PLAN = {"float32": ((1024, "v2_warp_row"), (4096, "v5_block_raw"), (16384, "v3_block_row"),
                    (262144, "v10_cluster_once")),
        "bfloat16": ((1024, "v8_warp_stream"), (2048, "v7_warp_raw"), (32768, "v5_block_raw"),
                     (262144, "v10_cluster_once"))}


def plan(rows: int, cols: int, dtype) -> str:
    """The dispatcher's choice: the one-read version :data:`PLAN` names for the row length, else the
    two-read v1 (rows longer than 262144, or more rows than a cluster version's grid y takes)."""
    for limit, version in PLAN[dtype_name(dtype)]:
        if cols <= limit and supports(version, cols, dtype):
            if version in CLUSTER_ROW_VERSIONS and rows > MAX_GRID_Y:
                break
            return version
    return "v1_online"


def name_expressions() -> tuple[str, ...]:
    """Every template instance any geometry can ask for."""
    names = []
    for dt in _dtypes():
        v = vec(dt)
        names += [kname(b, dt) for b in ("softmax_v0_three_pass_max", "softmax_v0_three_pass_sum",
                                         "softmax_v0_three_pass_normalize", "softmax_v1_online")]
        names += [kname("softmax_v2_warp_row", dt, nc) for nc in V2_NC]
        names += [kname("softmax_v3_block_row", dt, V3_ELEMS // v, t) for t in V3_THREADS]
        names += [kname("softmax_v4_cluster_row", dt, V4_ELEMS[0] // v, cl) for cl in V4_CLUSTERS]
        names.append(kname("softmax_v4_cluster_row", dt, V4_ELEMS[-1] // v, V4_CLUSTERS[-1]))
        for version in RAW_TABLES:
            names += [kname("softmax_" + version, dt, *c[:3]) for c in raw_configs(version, dt)]
    return tuple(names)


# --- the kernels' work split and the (m, l) algebra, mirrored in NumPy (tested on the CPU) -----------

def thread_elements(version: str, cols: int, dtype) -> np.ndarray:
    """[threads per row, elements per thread] column indices each thread of v2-v7 holds (-1: none).

    Mirrors softmax_thread_state: thread t holds chunks first + j * stride (j < NC), chunk c holding
    elements c * VEC .. c * VEC + VEC - 1.
    """
    v = vec(dtype)
    if version == "v2_warp_row":
        nc, threads, firsts, stride = v2_chunks(cols, dtype), 32, np.arange(32), 32
    elif version in ("v7_warp_raw", "v8_warp_stream"):
        nc, threads, firsts, stride = raw_config(version, cols, dtype)[0], 32, np.arange(32), 32
    elif version == "v3_block_row":
        t = v3_threads(cols)
        nc, threads, firsts, stride = V3_ELEMS // v, t, np.arange(t), t
    elif version == "v4_cluster_row":
        cl, elems = v4_config(cols)
        nc, threads, stride = elems // v, cl * V4_THREADS, V4_THREADS
        rank, t = np.divmod(np.arange(threads), V4_THREADS)
        firsts = rank * nc * V4_THREADS + t
    elif version in ("v5_block_raw", "v6_cluster_raw", "v9_stream", "v10_cluster_once", "v11_early_arrive"):
        cfg = raw_config(version, cols, dtype)
        nc, tpb, cl = cfg[0], cfg[1], (cfg[2] if len(cfg) == 3 else 1)
        threads, stride = cl * tpb, tpb
        rank, t = np.divmod(np.arange(threads), tpb)
        firsts = rank * nc * tpb + t
    else:
        raise KeyError(f"{version} does not hold the row in registers")
    chunks = firsts[:, None] + stride * np.arange(nc)[None, :]             # [threads, NC]
    elems = (chunks[:, :, None] * v + np.arange(v)[None, None, :]).reshape(threads, nc * v)
    return np.where(elems < cols, elems, -1)


def state(x):
    """(m, l) of the last dim of x in float64: m = max x, l = sum e^{x - m} (-inf rows: (-inf, 0))."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    return m, np.exp(x - m_safe[..., None]).sum(axis=-1)


def merge(a, b):
    """The merge operator on (m, l) pairs (NumPy arrays of states): the state of the union."""
    (ma, la), (mb, lb) = a, b
    m = np.maximum(ma, mb)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    return m, la * np.exp(ma - m_safe) + lb * np.exp(mb - m_safe)


def simulate(version: str, x: np.ndarray) -> np.ndarray:
    """A register version's algorithm on the CPU, in float64: per-thread states from the elements the
    thread holds, merged pairwise (a butterfly-like tree), then y = e^{x - m_t} e^{m_t - m} / l."""
    rows, cols = x.shape
    idx = thread_elements(version, cols, x.dtype)                         # [threads, E]
    vals = np.where(idx[None] >= 0, x.astype(np.float64)[:, np.maximum(idx, 0)], -np.inf)  # [rows, threads, E]
    m_t, l_t = state(vals)                                                # [rows, threads]
    ms, ls = m_t, l_t
    while ms.shape[1] > 1:                                                # pairwise tree over threads
        if ms.shape[1] % 2:
            ms = np.concatenate([ms, np.full((rows, 1), -np.inf)], axis=1)
            ls = np.concatenate([ls, np.zeros((rows, 1))], axis=1)
        ms, ls = merge((ms[:, 0::2], ls[:, 0::2]), (ms[:, 1::2], ls[:, 1::2]))
    m, l = ms[:, 0], ls[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        inv_l = np.where(l > 0, 1.0 / np.where(l > 0, l, 1.0), np.nan)
        m_t_safe = np.where(np.isneginf(m_t), 0.0, m_t)
        factor = np.where(np.isneginf(m)[:, None], 0.0, np.exp(m_t - np.where(np.isneginf(m), 0.0, m)[:, None]))
        p = np.exp(vals - m_t_safe[..., None]) * (factor * inv_l[:, None])[..., None]
    y = np.full((rows, cols), np.inf)
    for t in range(idx.shape[0]):
        ok = idx[t] >= 0
        y[:, idx[t][ok]] = p[:, t, ok]
    return y


SOURCE = KernelSource("softmax.cu", name_expressions=name_expressions())


# --- launchers ------------------------------------------------------------------------------------

def _validate(x, y, version: str, config: tuple | None = None):
    expect_array(x, "x", dtype=_dtypes(), ndim=2)
    rows, cols = (int(s) for s in x.shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, cols)}")
    if rows * cols >= 2**31:
        raise ValueError(f"x: at most 2**31 - 1 elements (int32 chunk indices), got {rows} x {cols}")
    expect_array(y, "y", dtype=np.dtype(x.dtype), ndim=2, shape=(rows, cols))
    expect_same_device(x, y)
    launches = geometry(version, rows, cols, x.dtype, config)
    for ln in launches:
        if ln.grid[1] > MAX_GRID_Y:
            raise ValueError(f"x: {rows} rows need {ln.grid[1]} blocks along grid y for {version}, "
                             f"more than the limit {MAX_GRID_Y}")
    return rows, cols, launches


def block_row_bytes(ln: Launch, cols: int, dtype) -> int:
    """Bytes of input rows one block of ``ln`` holds until it writes: a warp version's rows per block,
    a block's row, or a cluster block's slice. Times resident blocks per SM: the bytes an SM keeps
    in flight, the quantity that decided the first tuning run."""
    rows_per_block = ln.block[0] // 32 if ln.kernel.startswith(("softmax_v2", "softmax_v7", "softmax_v8")) else 1
    return rows_per_block * ceil_div(cols, cluster_size(ln)) * np.dtype(dtype).itemsize


# kernels that take (x, y, rows, cols)
_WARP_VERSIONS = ("v2_warp_row", "v7_warp_raw", "v8_warp_stream", "v9_stream")


def cluster_size(ln: Launch) -> int:
    """Blocks per cluster of a launch (1 for the versions without clusters)."""
    if ln.cluster:
        return ln.cluster
    return ln.grid[0] if ln.kernel.startswith(tuple(f"softmax_{v}<" for v in CLUSTER_ROW_VERSIONS)) else 1


def _function(ln: Launch):
    """The kernel of a launch, with the attributes it needs set once per loaded function (through
    utils.build.prepare_launch): non-portable cluster sizes for v6 / v9 with CL = 16, and more than
    48 KB of dynamic shared memory for v9's double buffer."""
    return SOURCE.launchable(ln.kernel, cluster_size(ln), ln.smem)


def _resident(ln: Launch, fn) -> Launch:
    """A persistent launch (v9) with its grid lowered to the clusters the driver says fit at once:
    a cluster beyond them would run after the others, a second wave of one cluster's rows."""
    if not ln.cluster:
        return ln
    fit = max_active_clusters(fn, ln.block[0], ln.smem, ln.cluster)
    if fit is None or fit * ln.cluster >= ln.grid[0]:
        return ln
    return dataclasses.replace(ln, grid=(fit * ln.cluster, 1, 1))


def _launcher(version: str):
    def launch(x, y):
        rows, cols, launches = _validate(x, y, version)
        c = np.int32(cols)
        if version == "v0_three_pass":
            import cupy
            m = cupy.empty((rows,), dtype=cupy.float32)     # row maxima
            l = cupy.empty((rows,), dtype=cupy.float32)     # row sums of e^{x - m}
            k_max, k_sum, k_norm = (SOURCE.function(ln.kernel) for ln in launches)
            k_max(launches[0].grid, launches[0].block, (x, m, c))
            k_sum(launches[1].grid, launches[1].block, (x, m, l, c))
            k_norm(launches[2].grid, launches[2].block, (x, m, l, y, c))
        elif version in _WARP_VERSIONS:
            (ln,) = launches
            fn = _function(ln)
            ln = _resident(ln, fn)
            fn(ln.grid, ln.block, (x, y, np.int32(rows), c), shared_mem=ln.smem)
        else:
            (ln,) = launches
            _function(ln)(ln.grid, ln.block, (x, y, c))
        return y
    launch.__name__ = f"launch_softmax_{version}"
    launch.__doc__ = f"Launch softmax {version}: y (rows x cols) = softmax(x) over the last dim."
    return launch


def bind(version: str, x, y, config: tuple | None = None):
    """Validate once and return a zero-argument callable that only launches (for timing loops).
    ``config``: a non-default v5/v6 instance (the tuning script's candidates)."""
    rows, cols, launches = _validate(x, y, version, config)
    c = np.int32(cols)
    if version == "v0_three_pass":
        import cupy
        m = cupy.empty((rows,), dtype=cupy.float32)
        l = cupy.empty((rows,), dtype=cupy.float32)
        ks = [(SOURCE.function(ln.kernel), ln.grid, ln.block) for ln in launches]
        args = [(x, m, c), (x, m, l, c), (x, m, l, y, c)]

        def run():
            for (k, g, b), a in zip(ks, args):
                k(g, b, a)
        return run
    (ln,) = launches
    k = _function(ln)
    ln = _resident(ln, k)
    args = (x, y, np.int32(rows), c) if version in _WARP_VERSIONS else (x, y, c)
    return lambda: k(ln.grid, ln.block, args, shared_mem=ln.smem)


VERSIONS = registry(
    Version("softmax_v0_three_pass", "v0_three_pass", _launcher("v0_three_pass"),
            "safe softmax as three kernels (max, sum, normalize): x read three times"),
    Version("softmax_v1_online", "v1_online", _launcher("v1_online"),
            "block per row, online (m, l) in one read, then a second read to normalize"),
    Version("softmax_v2_warp_row", "v2_warp_row", _launcher("v2_warp_row"),
            "warp per row, the row in registers: one read, warp-level (m, l) merge"),
    Version("softmax_v3_block_row", "v3_block_row", _launcher("v3_block_row"),
            "block per row, the row in registers (16 per thread): one read, block-level merge"),
    Version("softmax_v4_cluster_row", "v4_cluster_row", _launcher("v4_cluster_row"),
            "cluster of 2-8 blocks per row, slices in registers, (m, l) merged over DSMEM: one read"),
    Version("softmax_v5_block_raw", "v5_block_raw", _launcher("v5_block_raw"),
            "v3 with raw 16-byte chunks in registers (bf16: twice the bytes per register), tunable block"),
    Version("softmax_v6_cluster_raw", "v6_cluster_raw", _launcher("v6_cluster_raw"),
            "v4 with raw chunks and 128-512-thread blocks: several clusters per SM overlap their barriers"),
    Version("softmax_v7_warp_raw", "v7_warp_raw", _launcher("v7_warp_raw"),
            "v2 with raw chunks and a register cap: every short bf16 row of a small input in flight at once"),
    Version("softmax_v8_warp_stream", "v8_warp_stream", _launcher("v8_warp_stream"),
            "v2 as a stream: each warp walks several rows, loading the next while computing and writing one"),
    Version("softmax_v9_stream", "v9_stream", _launcher("v9_stream"),
            "persistent clusters, each CTA a fixed row slice double-buffered in smem (cp.async): reads never stop"),
    Version("softmax_v10_cluster_once", "v10_cluster_once", _launcher("v10_cluster_once"),
            "v6 with one exponential per element: e^{x - m_t} kept in place of x, the write only multiplies"),
    Version("softmax_v11_early_arrive", "v11_early_arrive", _launcher("v11_early_arrive"),
            "v10 with the exit cluster barrier split: relaxed arrive after the DSMEM reads, wait after the stores"),
)


def supports(version: str, cols: int, dtype) -> bool:
    limit = max_cols(version, dtype)
    return limit is None or cols <= limit


def softmax(x, out=None):
    """softmax over the last dim of a 2-D float32/bf16 CuPy array, with the version :func:`plan` picks."""
    import cupy
    expect_array(x, "x", dtype=_dtypes(), ndim=2)
    y = cupy.empty(x.shape, dtype=x.dtype) if out is None else out
    return VERSIONS[plan(int(x.shape[0]), int(x.shape[1]), x.dtype)].launch(x, y)


# --- interop with the PyTorch peers (zero-copy, the same memory) -----------------------------------

def random_input(shape, dtype, scale: float = 1.0):
    """Fresh standard-normal data times ``scale`` as a CuPy array of ``dtype`` (float32 or bfloat16)."""
    import cupy
    x = cupy.random.standard_normal(shape, dtype=cupy.float32)
    if scale != 1.0:
        x *= np.float32(scale)
    return x if np.dtype(dtype) == np.float32 else x.astype(dtype)


def as_torch(x):
    """A torch tensor on the same memory as the CuPy array ``x`` (bf16 travels as raw 16-bit words)."""
    import cupy
    import torch
    if np.dtype(x.dtype) == np.float32:
        return torch.from_dlpack(x)
    return torch.from_dlpack(x.view(cupy.int16)).view(torch.bfloat16)


def from_torch(t):
    """A CuPy array on the same memory as the torch tensor ``t`` (float32 or bfloat16)."""
    import cupy
    import torch
    if t.dtype == torch.float32:
        return cupy.from_dlpack(t)
    return cupy.from_dlpack(t.view(torch.int16)).view(BF16)
