"""Softmax over the last dim (chapter 6): the problem, the reference, the cost model, and the versions.

``y[r, :] = softmax(x[r, :])`` for a C-contiguous ``rows x cols`` array of float32 or bfloat16
(``ml_dtypes.bfloat16``); ``y`` has the dtype of ``x``. bf16 is read and written as bf16, all arithmetic
is fp32. A row of only -inf gives NaN, as ``torch.softmax`` does; a single -inf entry gives 0.

Every version is a :class:`utils.version.Version` of :data:`VERSIONS`, with its own ``.cu`` file in
this package (``v04_cluster_row.cu``), the device headers it shares with others beside them
(``chunks.cuh``, ``registers.cuh``, ``raw.cuh``, ``cluster_merge.cuh``, ``exp_once.cuh``), its
tunable template instances as named configs, and a pure plan (tested on the CPU).
:func:`dispatch` picks a version per shape; :func:`softmax` runs it. The NumPy mirror of the kernels'
work split and of the (m, l) algebra is in :mod:`kernels.softmax.mirror`; chapter 6's ladder, ledger,
sweeps and tables are in :mod:`kernels.softmax.experiments`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from utils.arrays import ceil_div, dtype_name
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type

from .mirror import merge, simulate, state, thread_elements  # noqa: F401 (the NumPy mirror)

try:                                     # bf16 on the host side; present wherever CuPy handles bf16
    from ml_dtypes import bfloat16 as BF16
except ImportError:                      # pragma: no cover - requirements.txt installs it
    BF16 = None

MAX_GRID_Y = 65535

# Launch constants; they must match the constexprs of the same names in the .cu files.
V0_THREADS = 256
V1_THREADS = 512
V2_ROWS = 8                      # warps (= rows) per block of v2
V4_THREADS = 1024

# The configs (template instances) of each version: named tuples, so (4, 8, 6) reads
# V7(chunks=4, rows=8, min_blocks=6). chunks: 16-byte chunks per thread (per lane for the warp versions);
# threads: per block; rows: warps (= rows) per block; cluster: blocks per row; min_blocks: blocks per
# SM asked of ptxas (__launch_bounds__' second argument: a register cap); rows_per_warp: rows each warp
# streams (v8).
V2 = config_type("V2", "chunks")
V3 = config_type("V3", "chunks threads")
V4 = config_type("V4", "chunks cluster")
V5 = config_type("V5", "chunks threads")
V6 = config_type("V6", "chunks threads cluster")
V7 = config_type("V7", "chunks rows min_blocks")
V8 = config_type("V8", "chunks rows min_blocks rows_per_warp")
V9 = config_type("V9", "chunks threads cluster")


def _table(kind, rows: dict) -> dict[str, tuple]:
    return {dn: tuple(kind(*c) for c in cs) for dn, cs in rows.items()}


# Per version and dtype: DEFAULTS, in the order a default is chosen (the first that holds the row), and
# EXTRAS, instances kept for the tuning script and the chapter's tuning table. The raw versions' defaults
# are the H200 tuning runs' winners at the chapter's widths (scripts/tune/ch06_softmax.py).
DEFAULTS = {
    "v2_warp_row": _table(V2, {"float32": ((1,), (2,), (4,), (8,)), "bfloat16": ((1,), (2,), (4,), (8,))}),
    "v3_block_row": _table(V3, {"float32": tuple((4, t) for t in (128, 256, 512, 1024)),
                                "bfloat16": tuple((2, t) for t in (128, 256, 512, 1024))}),
    "v4_cluster_row": _table(V4, {"float32": ((4, 2), (4, 4), (4, 8), (8, 8)),
                                  "bfloat16": ((2, 2), (2, 4), (2, 8), (4, 8))}),
    "v5_block_raw": _table(V5, {"float32": ((2, 128), (4, 256), (4, 512), (8, 512)),
                                "bfloat16": ((1, 128), (2, 128), (8, 64), (4, 256), (8, 256), (4, 1024))}),
    "v6_cluster_raw": _table(V6, {"float32": ((4, 512, 2), (16, 128, 8), (16, 512, 8)),
                                  "bfloat16": ((4, 512, 2), (8, 256, 4), (4, 512, 8), (8, 256, 16))}),
    "v7_warp_raw": _table(V7, {"float32": ((4, 8, 8), (8, 8, 5)), "bfloat16": ((4, 8, 6), (8, 8, 5))}),
    "v8_warp_stream": _table(V8, {"float32": ((8, 4, 5, 4),), "bfloat16": ((4, 4, 4, 4),)}),
    "v9_stream": _table(V9, {"float32": ((8, 512, 1), (8, 512, 4), (8, 512, 16)),
                             "bfloat16": ((8, 256, 1), (8, 512, 2), (8, 512, 8))}),
}
DEFAULTS["v10_cluster_once"] = DEFAULTS["v6_cluster_raw"]     # like for like with v6
DEFAULTS["v11_early_arrive"] = DEFAULTS["v6_cluster_raw"]     # like for like with v10
EXTRAS = {
    "v5_block_raw": _table(V5, {"float32": ((8, 128),), "bfloat16": ((4, 128),)}),
    "v6_cluster_raw": _table(V6, {"float32": ((4, 512, 8), (8, 512, 4), (16, 256, 16)),
                                  "bfloat16": ((4, 512, 4), (4, 256, 8), (8, 512, 8))}),
    "v7_warp_raw": _table(V7, {"float32": (), "bfloat16": ((4, 8, 8),)}),
    "v8_warp_stream": _table(V8, {"float32": (), "bfloat16": ((4, 2, 12, 3),)}),
    "v9_stream": _table(V9, {"float32": ((8, 256, 2), (8, 256, 8), (4, 512, 8), (4, 1024, 16)),
                             "bfloat16": ((4, 512, 1), (8, 256, 4), (4, 512, 4), (8, 256, 16), (4, 512, 16))}),
}

# Versions whose rows sit on grid y (one cluster per row): at most MAX_GRID_Y rows.
CLUSTER_ROW_VERSIONS = ("v4_cluster_row", "v6_cluster_raw", "v10_cluster_once", "v11_early_arrive")
WARP_VERSIONS = ("v2_warp_row", "v7_warp_raw", "v8_warp_stream")


# --- the problem -------------------------------------------------------------------------------------

def dtypes() -> tuple[np.dtype, ...]:
    """The dtypes softmax takes: float32, and bfloat16 where ml_dtypes is installed."""
    return (np.dtype(np.float32),) + ((np.dtype(BF16),) if BF16 is not None else ())


@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated softmax problem: the sizes, the dtype, and the arrays (None in a CPU-only plan)."""
    rows: int
    cols: int
    dtype: np.dtype
    x: Any = None
    y: Any = None

    @property
    def out(self):
        return self.y

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


def shape_problem(rows: int, cols: int, dtype) -> Problem:
    """A problem of this shape without arrays: plans, capacities and the ledger on a CPU."""
    dt = np.dtype(dtype)
    if dt not in dtypes():
        raise ValueError(f"softmax takes float32 or bfloat16, got {dtype_name(dt)}")
    rows, cols = int(rows), int(cols)
    if rows < 1 or cols < 1:
        raise ValueError(f"x: expected at least one row and one column, got shape {(rows, cols)}")
    if rows * cols >= 2**31:
        raise ValueError(f"x: at most 2**31 - 1 elements (int32 chunk indices), got {rows} x {cols}")
    return Problem(rows, cols, dt)


def problem(x, y) -> Problem:
    """Validate ``x`` (rows x cols, float32 or bf16, C-contiguous, 16-byte aligned, on the GPU) and ``y``
    (the same shape and dtype, on the same device)."""
    expect_array(x, "x", dtype=dtypes(), ndim=2)
    p = shape_problem(*x.shape, x.dtype)
    expect_array(y, "y", dtype=p.dtype, ndim=2, shape=(p.rows, p.cols))
    expect_same_device(x, y)
    return dataclasses.replace(p, x=x, y=y)


# --- the reference and the cost model --------------------------------------------------------------

def reference(x):
    """softmax over the last dim in float64 (NumPy or CuPy, wherever ``x`` lives); -inf rows give NaN."""
    from utils.arrays import xp
    m_ = xp(x)
    x64 = x.astype(np.float32).astype(np.float64)
    m = x64.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = m_.exp(x64 - m)                  # -inf - (-inf) = NaN on fully masked rows, as torch
        return e / e.sum(axis=-1, keepdims=True)


def nbytes(rows: int, cols: int, itemsize: int = 4) -> int:
    """Minimum bytes: x read once, y written once."""
    return 2 * itemsize * rows * cols


READS = {"v0_three_pass": 3, "v1_online": 2}     # reads of x per version (the others: 1)


def traffic(label: str, rows: int, cols: int, itemsize: int = 4) -> int:
    """Bytes a version moves if no second read of x hits in a cache (v0: 3 reads, v1: 2, others: 1)."""
    return (READS.get(label, 1) + 1) * itemsize * rows * cols


def flops(rows: int, cols: int) -> int:
    """About 5 per element (max, subtract, exp, add, multiply); softmax is bound by bytes, not these."""
    return 5 * rows * cols


# --- configs: what a template instance holds ----------------------------------------------------------

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


def kname(base: str, dtype, *params: int) -> str:
    """The name expression of a template instance: softmax_v2_warp_row<float, 8>."""
    return f"{base}<{', '.join([ctype(dtype), *map(str, params)])}>"


def row_threads(label: str, config) -> int:
    """Threads that share one row in a version's config (a warp, a block, or a cluster of blocks)."""
    if label in (*WARP_VERSIONS,):
        return 32
    if label == "v4_cluster_row":
        return config.cluster * V4_THREADS
    return config.threads * getattr(config, "cluster", 1)


def capacity(label: str, config, dtype) -> int:
    """Elements of a row one instance holds: threads per row x chunks x elements per chunk."""
    return row_threads(label, config) * config.chunks * vec(dtype)


def all_configs(label: str, dtype) -> tuple:
    """Every instantiated config of a version for one dtype: the defaults, then the extras."""
    dn = dtype_name(dtype)
    return DEFAULTS[label][dn] + EXTRAS.get(label, {}).get(dn, ())


def _configs_of(label: str):
    def configs(p: Problem | None) -> tuple:
        return all_configs(label, p.dtype) if p is not None else tuple(
            c for dt in dtypes() for c in all_configs(label, dt))
    return configs


def _default_of(label: str):
    def default(p: Problem):
        """The first default instance that holds the row (the last one if none does: the plan refuses)."""
        table = DEFAULTS[label][p.dtype.name]
        return next((c for c in table if capacity(label, c, p.dtype) >= p.cols), table[-1])
    return default


def config_of(label: str, recorded):
    """A config as the record stores it (a dict of its fields, or a list) as the version's named config."""
    kind = type(DEFAULTS[label]["float32"][0])
    if isinstance(recorded, kind):
        return recorded
    return kind(**recorded) if isinstance(recorded, dict) else kind(*recorded)


def max_cols(label: str, dtype) -> int | None:
    """The longest row a version takes with its default instances (None: any)."""
    if label not in DEFAULTS:
        return None
    return max(capacity(label, c, dtype) for c in DEFAULTS[label][dtype_name(dtype)])


def _fit(label: str, p: Problem, config):
    """The config as the version's named tuple (a plain tuple is accepted); Unsupported unless the
    instance holds the row (and, one cluster per row, the rows fit grid y)."""
    config = config_of(label, config)
    cap = capacity(label, config, p.dtype)
    if cap < p.cols:
        raise Unsupported(f"{label}: {config} holds at most {cap} {p.dtype.name} elements per row, "
                          f"got cols={p.cols}; rows longer than one cluster go to v1_online")
    if label in CLUSTER_ROW_VERSIONS and p.rows > MAX_GRID_Y:
        raise Unsupported(f"{label}: {p.rows} rows need {p.rows} blocks along grid y, more than the limit "
                          f"{MAX_GRID_Y}; split the rows or use v1_online")
    return config


def _ints(*values) -> tuple:
    return tuple(np.int32(v) for v in values)


# --- plans: problem + config -> launches (pure, no GPU) ----------------------------------------------

def plan_v0(p: Problem, config) -> list[Launch]:
    m = Workspace((p.rows,), np.float32)        # row maxima
    l = Workspace((p.rows,), np.float32)        # row sums of e^{x - m}
    g, b, (c,) = (p.rows, 1, 1), (V0_THREADS, 1, 1), _ints(p.cols)
    return [Launch(kname("softmax_v0_three_pass_max", p.dtype), g, b, (p.x, m, c)),
            Launch(kname("softmax_v0_three_pass_sum", p.dtype), g, b, (p.x, m, l, c)),
            Launch(kname("softmax_v0_three_pass_normalize", p.dtype), g, b, (p.x, m, l, p.y, c))]


def plan_v1(p: Problem, config) -> list[Launch]:
    return [Launch(kname("softmax_v1_online", p.dtype), (p.rows, 1, 1), (V1_THREADS, 1, 1),
                   (p.x, p.y, *_ints(p.cols)))]


def plan_block_per_row(label: str):
    """v3, v5: one block of config.threads per row."""
    def plan(p: Problem, config) -> list[Launch]:
        config = _fit(label, p, config)
        return [Launch(kname("softmax_" + label, p.dtype, *config), (p.rows, 1, 1), (config.threads, 1, 1),
                       (p.x, p.y, *_ints(p.cols)))]
    return plan


def plan_cluster_per_row(label: str):
    """v4, v6, v10, v11: a cluster of config.cluster blocks per row, grid (cluster, rows)."""
    def plan(p: Problem, config) -> list[Launch]:
        config = _fit(label, p, config)
        threads = V4_THREADS if label == "v4_cluster_row" else config.threads
        return [Launch(kname("softmax_" + label, p.dtype, *config), (config.cluster, p.rows, 1),
                       (threads, 1, 1), (p.x, p.y, *_ints(p.cols)), cluster=config.cluster)]
    return plan


def plan_v2(p: Problem, config) -> list[Launch]:
    config = _fit("v2_warp_row", p, config)
    return [Launch(kname("softmax_v2_warp_row", p.dtype, *config), (ceil_div(p.rows, V2_ROWS), 1, 1),
                   (32 * V2_ROWS, 1, 1), (p.x, p.y, *_ints(p.rows, p.cols)))]


def plan_v7(p: Problem, config) -> list[Launch]:
    config = _fit("v7_warp_raw", p, config)
    return [Launch(kname("softmax_v7_warp_raw", p.dtype, *config), (ceil_div(p.rows, config.rows), 1, 1),
                   (32 * config.rows, 1, 1), (p.x, p.y, *_ints(p.rows, p.cols)))]


def plan_v8(p: Problem, config) -> list[Launch]:
    """Each warp streams up to rows_per_warp rows: the grid is ceil(rows / (rows x rows_per_warp))."""
    config = _fit("v8_warp_stream", p, config)
    name = kname("softmax_v8_warp_stream", p.dtype, config.chunks, config.rows, config.min_blocks)
    return [Launch(name, (ceil_div(p.rows, config.rows * config.rows_per_warp), 1, 1), (32 * config.rows, 1, 1),
                   (p.x, p.y, *_ints(p.rows, p.cols)))]


def stream_smem(config) -> int:
    """Dynamic shared memory of a v9 CTA: two buffers of chunks x threads 16-byte chunks."""
    return 2 * 16 * config.chunks * config.threads


def plan_v9(p: Problem, config) -> list[Launch]:
    """One cluster per row at most, lowered at bind time to the clusters that fit on the GPU at once
    (persistent: cluster c walks rows c, c + G, ...)."""
    config = _fit("v9_stream", p, config)
    return [Launch(kname("softmax_v9_stream", p.dtype, *config), (p.rows * config.cluster, 1, 1),
                   (config.threads, 1, 1), (p.x, p.y, *_ints(p.rows, p.cols)), smem=stream_smem(config),
                   cluster=config.cluster, persistent=True)]


# --- the versions ----------------------------------------------------------------------------------

def _source(file: str, label: str | None, bases: tuple[str, ...], requires: tuple[str, ...] = ()) -> KernelSource:
    """The KernelSource of one version's file with every template instance its configs name."""
    names = []
    for dt in dtypes():
        if label is None:
            names += [kname(b, dt) for b in bases]
            continue
        for c in all_configs(label, dt):
            params = c[:3] if label == "v8_warp_stream" else c      # rows_per_warp is a launch parameter
            names += [kname(b, dt, *params) for b in bases]
    return KernelSource("softmax/" + file, name_expressions=tuple(names), requires=requires)


CLUSTERS = ("clusters",)
SOURCE_V0 = _source("v00_three_pass.cu", None, ("softmax_v0_three_pass_max", "softmax_v0_three_pass_sum",
                                                 "softmax_v0_three_pass_normalize"))
SOURCE_V1 = _source("v01_online.cu", None, ("softmax_v1_online",))
SOURCE_V2 = _source("v02_warp_row.cu", "v2_warp_row", ("softmax_v2_warp_row",))
SOURCE_V3 = _source("v03_block_row.cu", "v3_block_row", ("softmax_v3_block_row",))
SOURCE_V4 = _source("v04_cluster_row.cu", "v4_cluster_row", ("softmax_v4_cluster_row",), CLUSTERS)
SOURCE_V5 = _source("v05_block_raw.cu", "v5_block_raw", ("softmax_v5_block_raw",))
SOURCE_V6 = _source("v06_cluster_raw.cu", "v6_cluster_raw", ("softmax_v6_cluster_raw",), CLUSTERS)
SOURCE_V7 = _source("v07_warp_raw.cu", "v7_warp_raw", ("softmax_v7_warp_raw",))
SOURCE_V8 = _source("v08_warp_stream.cu", "v8_warp_stream", ("softmax_v8_warp_stream",))
SOURCE_V9 = _source("v09_stream.cu", "v9_stream", ("softmax_v9_stream",), CLUSTERS)
SOURCE_V10 = _source("v10_cluster_once.cu", "v10_cluster_once", ("softmax_v10_cluster_once",), CLUSTERS)
SOURCE_V11 = _source("v11_early_arrive.cu", "v11_early_arrive", ("softmax_v11_early_arrive",), CLUSTERS)


def _version(label: str, summary: str, source: KernelSource, plan, parent: str | None) -> Version:
    tunable = label in DEFAULTS
    return Version(name="softmax_" + label, summary=summary, source=source, plan=plan, parent=parent,
                   snippet="softmax_" + label.split("_")[0],
                   configs=_configs_of(label) if tunable else (),
                   default=_default_of(label) if tunable else None)


VERSIONS = Registry("softmax", problem, [
    _version("v0_three_pass", "safe softmax as three kernels (max, sum, normalize): x read three times",
             SOURCE_V0, plan_v0, None),
    _version("v1_online", "one kernel, block per row: online (m, l) in one read, a second read to normalize",
             SOURCE_V1, plan_v1, "v0_three_pass"),
    _version("v2_warp_row", "warp per row, the row in registers: one read, warp-level (m, l) merge",
             SOURCE_V2, plan_v2, "v1_online"),
    _version("v3_block_row", "block per row, the row in registers (16 per thread): one read, block-level merge",
             SOURCE_V3, plan_block_per_row("v3_block_row"), "v2_warp_row"),
    _version("v4_cluster_row", "cluster of 2-8 blocks per row, slices in registers, (m, l) merged over DSMEM",
             SOURCE_V4, plan_cluster_per_row("v4_cluster_row"), "v3_block_row"),
    _version("v5_block_raw", "v3 with raw 16-byte chunks in registers (bf16: twice the bytes per register)",
             SOURCE_V5, plan_block_per_row("v5_block_raw"), "v3_block_row"),
    _version("v6_cluster_raw", "v4 with raw chunks and 128-512-thread blocks: clusters overlap their barriers",
             SOURCE_V6, plan_cluster_per_row("v6_cluster_raw"), "v4_cluster_row"),
    _version("v7_warp_raw", "v2 with raw chunks and a register cap: every short row of a small input resident",
             SOURCE_V7, plan_v7, "v2_warp_row"),
    _version("v8_warp_stream", "v2 as a stream: each warp loads its next row while it computes and writes one",
             SOURCE_V8, plan_v8, "v2_warp_row"),
    _version("v9_stream", "persistent clusters, each CTA's row slice double-buffered in smem (cp.async)",
             SOURCE_V9, plan_v9, "v6_cluster_raw"),
    _version("v10_cluster_once", "v6 with one exponential per element: e^{x - m_t} kept in place of x",
             SOURCE_V10, plan_cluster_per_row("v10_cluster_once"), "v6_cluster_raw"),
    _version("v11_early_arrive", "v10 with the exit cluster barrier split: relaxed arrive, stores, wait",
             SOURCE_V11, plan_cluster_per_row("v11_early_arrive"), "v10_cluster_once"),
])


def name_expressions() -> tuple[str, ...]:
    """Every template instance of every version."""
    return tuple(n for src in VERSIONS.sources() for n in src.name_expressions)


# --- the dispatcher ----------------------------------------------------------------------------------

# For each dtype, (longest row, version) in order; the first limit that holds cols wins (the H200
# tuning runs' winners at the chapter's widths). fp32: v2 for short rows, v5 at 4096, v3 at 16384 (the
# two within 1% at both widths); bf16: v8 up to 1024, v7 up to 2048, v5 up to a block; rows longer
# than a block go to v10 (v6 with one exponential per element), rows on grid y.
DISPATCH = {"float32": ((1024, "v2_warp_row"), (4096, "v5_block_raw"), (16384, "v3_block_row"),
                        (262144, "v10_cluster_once")),
            "bfloat16": ((1024, "v8_warp_stream"), (2048, "v7_warp_raw"), (32768, "v5_block_raw"),
                         (262144, "v10_cluster_once"))}


def dispatch(rows: int, cols: int, dtype, has=None) -> str:
    """The label of the version softmax runs for this shape: the one-read version :data:`DISPATCH`
    names for the row length where it takes the problem and ``has(feature)`` for each feature it
    requires, else the two-read v1 (rows longer than 262144, more rows than grid y takes, an Ampere
    GPU). ``has`` defaults to this GPU's features (utils.gpu.supports); without a GPU, the Hopper the
    book targets (every feature)."""
    from utils.gpu import has_gpu, supports
    has = has or (supports if has_gpu() else (lambda feature: True))
    p = shape_problem(rows, cols, dtype)
    for limit, label in DISPATCH[p.dtype.name]:
        v = VERSIONS[label]
        if cols <= limit and v.supports(p) and all(has(f) for f in v.requires):
            return label
    return "v1_online"


# Stand for x and y in the launches softmax() keeps per shape; each call puts its own arrays in their place.
X_SLOT, Y_SLOT = object(), object()
# (rows, cols, dtype) -> (label, loaded launches with X_SLOT / Y_SLOT as array arguments, or None for a
# version whose plan allocates or lowers its grid at bind time). Filled once per shape: the version model's
# path (dispatch, plan, kernel lookup on every call) costs more host time than the 10-100 us kernels it
# launches, and a timing of the dispatcher would measure that Python work instead of the GPU's.
_DISPATCHED: dict[tuple, tuple] = {}


def dispatched(p: Problem) -> tuple[str, tuple | None]:
    """The label :func:`dispatch` picks for ``p``'s shape and its launches as (loaded kernel, grid, block,
    arguments with the arrays left as :data:`X_SLOT` / :data:`Y_SLOT`, dynamic shared memory), planned and
    loaded once per (rows, cols, dtype) in this process, as :meth:`Version.bind` does for one pair of
    arrays; the launches are None where the plan has workspaces or a persistent grid (then the version
    binds them on every call). Raises NoGPU / MissingFeature where the chosen version cannot run here
    (nothing is kept then). :func:`forget_dispatched` empties the table (after editing a kernel file)."""
    key = (p.rows, p.cols, p.dtype)
    hit = _DISPATCHED.get(key)
    if hit is not None:
        return hit
    from utils.gpu import require, require_gpu
    require_gpu()
    label = dispatch(p.rows, p.cols, p.dtype)
    v = VERSIONS[label]
    require(*v.requires, needed_by=f"softmax {label}")
    launches = v.launches(dataclasses.replace(p, x=X_SLOT, y=Y_SLOT))
    if any(ln.persistent or any(isinstance(a, Workspace) for a in ln.args) for ln in launches):
        hit = (label, None)
    else:
        hit = (label, tuple(((ln.source or v.source).launchable(ln.kernel, ln.cluster, ln.smem), ln.grid,
                             ln.block, ln.args, ln.smem) for ln in launches))
    _DISPATCHED[key] = hit
    return hit


def forget_dispatched() -> None:
    """Empty :func:`dispatched`'s table: the next call per shape plans and loads its kernel again."""
    _DISPATCHED.clear()


def softmax(x, out=None):
    """softmax over the last dim of a 2-D float32/bf16 CuPy array, with the version :func:`dispatch` picks.
    Validates ``x`` and ``out`` on every call; the choice, its plan and its kernel are made and loaded
    once per shape (:func:`dispatched`)."""
    import cupy
    expect_array(x, "x", dtype=dtypes(), ndim=2)
    y = cupy.empty(x.shape, dtype=x.dtype) if out is None else out
    p = problem(x, y)
    label, launches = dispatched(p)
    if launches is None:
        VERSIONS[label](x, y)
        return y
    for fn, grid, block, args, smem in launches:
        fn(grid, block, tuple(x if a is X_SLOT else y if a is Y_SLOT else a for a in args), shared_mem=smem)
    return y


# --- what a version keeps in flight --------------------------------------------------------------------

def rows_per_block(launch: Launch, label: str) -> int:
    """Rows one block of a launch holds at once: its warps for the warp versions, else 1."""
    return launch.threads // 32 if label in WARP_VERSIONS else 1


def block_row_bytes(label: str, p: Problem, config=None) -> int:
    """Bytes of input rows one block holds until it writes: a warp version's rows, a block's row, or a
    cluster block's slice (a v9 CTA: one buffer of its double buffer)."""
    v = VERSIONS[label]
    cfg = config_of(label, v.resolve_config(p, config))
    (ln,) = v.launches(p, cfg)
    if label == "v9_stream":
        return stream_smem(cfg) // 2
    return rows_per_block(ln, label) * ceil_div(p.cols, ln.cluster) * p.itemsize


@dataclasses.dataclass(frozen=True)
class Residency:
    """What one SM holds of a launch: the kernel's registers per thread (ptxas), the occupancy
    (utils.occupancy), and the bytes of input rows its resident blocks keep until they write."""
    registers: int
    occupancy: Any
    bytes_per_sm: int

    @property
    def blocks(self) -> int:
        return self.occupancy.blocks


def resident(label: str, p: Problem, config=None) -> Residency:
    """The :class:`Residency` of a one-launch version on ``p`` (compiles its file; no GPU needed)."""
    from utils.build import compile_source
    from utils.occupancy import from_function
    v = VERSIONS[label]
    cfg = config_of(label, v.resolve_config(p, config))
    (ln,) = v.launches(p, cfg)
    comp = compile_source(v.source)
    report = comp.report[comp.symbols[ln.kernel]]
    occ = from_function(report, ln.threads, ln.smem)
    return Residency(int(report["registers"]), occ, occ.blocks * block_row_bytes(label, p, cfg))


# --- inputs -------------------------------------------------------------------------------------------

def random_input(shape, dtype, scale: float = 1.0, seed: int | None = None):
    """Seeded standard-normal data times ``scale`` on the GPU (utils.arrays.random_normal); returns
    ``(x, seed)``."""
    from utils.arrays import random_normal
    return random_normal(shape, dtype_name(dtype), seed=seed, scale=scale)
