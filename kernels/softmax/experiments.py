"""Chapter 6's experiments: the ladder of every version beside torch's softmax, the ledger, and the
sweeps, tables and plots the chapter calls once each. The notebook shows what is measured and what is
claimed; the loops, the record reading and the table building are here.
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import numpy as np

from . import (
    CLUSTER_ROW_VERSIONS,
    DEFAULTS,
    EXTRAS,
    VERSIONS,
    capacity,
    config_of,
    dispatch,
    nbytes,
    reference,
    resident,
    shape_problem,
)

ODD_SHAPES = [(1, 1), (37, 7), (199, 33), (37, 1000), (1, 4097)]   # rows 1/37/199, widths off the chunk
BENCH = {"target_ms": 100, "max_reps": 100}

# Inductor warns, once per long-row shape it compiles, that it split the reduction and so turned its own
# online softmax off: a note on its code generation, not on any result. The message starts with a newline.
INDUCTOR_NOTE = r"\s*Online softmax is disabled"


def ignore_inductor_note() -> None:
    """Ignore Inductor's note that it turned its online softmax off (and only that warning)."""
    warnings.filterwarnings("ignore", message=INDUCTOR_NOTE, category=UserWarning)


# --- the ladder ----------------------------------------------------------------------------------------

def make_case(shape, dtype, rng):
    """Standard-normal x drawn on the GPU from the ladder's seeded generator; y (poisoned by the ladder)."""
    import cupy

    from utils.arrays import random_normal
    from utils.ladder import Case
    x, _ = random_normal(shape, np.dtype(dtype).name, seed=int(rng.integers(2**31)))
    return Case(args=(x, cupy.empty_like(x)), outputs=(1,))


def peers() -> dict:
    """The peers, reading the case's x through DLPack (the same memory, no copy): torch.softmax (eager) and
    torch.compile of the same function (dynamic=False: one compile per shape and dtype, in the warm-up
    before timing). Inductor's note on its online softmax is ignored here, where the compile happens."""
    import torch

    from utils.arrays import as_torch
    ignore_inductor_note()
    for knob in ("recompile_limit", "cache_size_limit"):   # ten static shapes of one compiled function
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)

    def peer(fn):
        def factory(case):
            t = as_torch(case.args[0])
            return lambda: fn(t)
        return factory
    return {"torch.softmax": peer(lambda t: torch.softmax(t, dim=-1)), "torch.compile.softmax": peer(compiled)}


def ladder(rec, shapes, dtypes, seed: int = 6):
    """Chapter 6's :class:`utils.ladder.Ladder`: every version checked on :data:`ODD_SHAPES` (fresh seeded
    inputs, outputs poisoned) against the float64 reference on the GPU, and timed on ``shapes`` x ``dtypes``
    beside :func:`peers` and the 1 GiB copy, all on the same data."""
    from utils.ladder import Ladder
    return Ladder(rec, VERSIONS, shapes=shapes, dtypes=dtypes, make=make_case, seed=seed,
                  reference=lambda case: reference(case.args[0]),                  # float64, on the GPU
                  nbytes=lambda shape, dt: nbytes(*shape, itemsize=dt.itemsize),   # x read once, y written once
                  odd_shapes=ODD_SHAPES, peers=peers(), bench=dict(BENCH))


def shape_name(shape) -> str:
    return f"{shape[0]}x{shape[1]}"


# --- the ledger ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Ledger:
    """This run's ledger: the 1 GiB copy (GB/s, read + written), the fixed cost of a near-empty launch (µs),
    and per (shape, dtype) the floor time at the copy rate, the share of the copy a kernel could reach if
    the fixed cost added to the floor (``ceil``), and a copy of the same bytes as a fraction of the 1 GiB
    copy (``same``)."""
    copy: float
    fixed_us: float
    same: dict
    floor_us: dict = dataclasses.field(init=False)
    ceil: dict = dataclasses.field(init=False)

    def __post_init__(self):
        self.floor_us = {(s, dn): nbytes(*s, itemsize=np.dtype(dn).itemsize) / self.copy / 1e3
                         for s, dn in self.same}
        self.ceil = {k: f / (f + self.fixed_us) for k, f in self.floor_us.items()}

    def table(self, bar: float = 0.75):
        from utils.table import Table
        rows = [[shape_name(s), dn, f"{nbytes(*s, itemsize=np.dtype(dn).itemsize) / 2**20:.0f}",
                 f"{self.floor_us[s, dn]:.1f}", f"{self.floor_us[s, dn] / bar:.1f}", f"{self.ceil[s, dn]:.0%}",
                 f"{self.same[s, dn]:.0%}"] for s, dn in self.same]
        return Table(["shape", "dtype", "MiB moved", "floor (us)", f"{bar:.0%} bar (us)", "floor / (floor + fixed)",
                      "same-bytes copy"], rows,
                     caption="the ledger: floor at this run's copy bandwidth, the bar, the fixed cost's share")


def fixed_cost_us(bench_kw: dict | None = None) -> float:
    """The fixed cost of a launch that moves almost nothing: v2's bound closure on one 32-float row per SM,
    from start event to end event (launch, the first reads' latency, the tail), µs."""
    import cupy

    from utils.arrays import random_normal
    from utils.bench import bench
    from utils.hardware import facts
    x_tiny, _ = random_normal((facts().sms, 32), "float32", seed=0)          # one 128-byte row per SM
    return bench(VERSIONS["v2_warp_row"].bind(x_tiny, cupy.empty_like(x_tiny)), **(bench_kw or BENCH)).ms * 1e3


def ledger(ladder) -> Ledger:
    """Measure the ledger for the ladder's shapes and dtypes: its 1 GiB copy, the fixed cost, and a copy
    of each shape's bytes (recorded as op ``copy_same_bytes``)."""
    from utils.hardware import measure_copy_same_bytes
    copy_gbps = ladder.copy_gbps()
    fixed = fixed_cost_us(ladder.bench)
    same = {}
    for shape in ladder.shapes:
        for dn in ladder.dtypes:
            nb = nbytes(*shape, itemsize=np.dtype(dn).itemsize)
            same[shape, dn] = measure_copy_same_bytes(ladder.rec, nb // 2)["metric"] / copy_gbps
    return Ledger(copy_gbps, fixed, same)


# --- tables read from the record -----------------------------------------------------------------------

def fractions_table(ladder, impls, caption: str = ""):
    """Per shape and dtype of the ladder, each of ``impls`` as a fraction of the copy."""
    from utils.table import Table
    return Table(["shape", "dtype", *impls],
                 [[shape_name(s), dn, *(f"{ladder.fraction_of_copy(p, s, dn):.0%}" for p in impls)]
                  for s in ladder.shapes for dn in ladder.dtypes], caption=caption)


def residency_table(cases, dtypes):
    """For each (label, shapes) of ``cases``, per shape and dtype: the default config, its registers per
    thread (ptxas), blocks per SM (utils.occupancy) and the KiB of rows each SM holds until it writes."""
    from utils.table import Table
    rows = []
    for label, shapes in cases:
        for shape in shapes:
            for dn in dtypes:
                p = shape_problem(*shape, dn)
                r = resident(label, p)
                rows.append([label, dn, shape_name(shape), str(VERSIONS[label].default(p)), r.registers, r.blocks,
                             f"{r.bytes_per_sm / 1024:.0f}"])
    return Table(["version", "dtype", "shape", "config", "registers", "blocks/SM", "KiB of rows per SM"], rows)


def cluster_fit(label: str, shape, dtype) -> tuple[int, int, int]:
    """(clusters the driver fits on the GPU at once, blocks per cluster, threads per block) for a one-launch
    cluster version's default instance on ``shape`` (cuOccupancyMaxActiveClusters)."""
    from utils.occupancy import clusters_per_device
    v = VERSIONS[label]
    (ln,) = v.launches(shape_problem(*shape, dtype))
    fit = clusters_per_device(v.source.function(ln.kernel), ln.threads, ln.smem, ln.cluster)
    return fit, ln.cluster, ln.threads


def cluster_fit_table(cases, shape):
    """:func:`cluster_fit` for each (label, dtype) of ``cases`` on ``shape``, with the SMs' worth of blocks."""
    from utils.hardware import facts
    from utils.table import Table
    rows = []
    for label, dn in cases:
        fit, cl, threads = cluster_fit(label, shape, dn)
        rows.append([label, dn, shape_name(shape), fit, f"{cl} x {threads}", f"{fit * cl} of {facts().sms}"])
    return Table(["version", "dtype", "shape", "clusters resident at once (driver)", "blocks x threads",
                  "blocks resident / SMs"], rows)


# --- tuning: the runners-up, and bytes resident per SM ----------------------------------------------

def time_extras(ladder, labels=("v5_block_raw", "v6_cluster_raw")) -> list[dict]:
    """Time the instances the tuning script kept beside the defaults (:data:`EXTRAS`), each on the shape whose
    row it holds (the shortest of the ladder's widths it takes, less than twice that), recorded as
    ``<label>[<config>]``."""
    entries = []
    for dn in ladder.dtypes:
        one_dtype = copy.copy(ladder)       # the same record and inputs, this dtype only: an extra is instantiated
        one_dtype.dtypes = [dn]             # for its own dtype (the other dtype's configs do not list it)
        for label in labels:
            for cfg in EXTRAS[label][dn]:
                shape = next(s for s in ladder.shapes if s[1] <= capacity(label, cfg, dn) < 2 * s[1])
                entries += one_dtype.time(label, [shape], config=cfg, impl=f"{label}{list(cfg)}")
    return entries


def residency_points(entries, copy_gbps: float) -> list[tuple[float, float, bool]]:
    """(KiB of rows resident per SM, fraction of copy, one cluster per row?) for every recorded entry of a
    one-launch register version (peers, the dispatcher and the persistent v9 left out)."""
    pts = []
    for e in entries:
        label = e["impl"].split("[")[0]
        if e["is_peer"] or label not in DEFAULTS or label == "v9_stream":
            continue
        r = resident(label, shape_problem(*e["shape"], e["dtype"]), config_of(label, e["config"]))
        pts.append((r.bytes_per_sm / 1024, e["metric"] / copy_gbps, label in CLUSTER_ROW_VERSIONS))
    return pts


def plot_residency(pts, bar: float = 0.75):
    """Fraction of copy against KiB of rows resident per SM: warp/block-per-row versions and cluster-per-row
    versions as two series, the bar dashed. Returns the figure."""
    from utils.plot import ceiling_line, figure, version_style
    fig, axes = figure(1, 1, height=3.6)
    ax = axes[0, 0]
    for k, (cluster, name) in enumerate(((False, "warp / block per row"), (True, "cluster per row"))):
        mine = [p for p in pts if p[2] == cluster]
        st = version_style(k)
        ax.scatter([p[0] for p in mine], [100 * p[1] for p in mine], marker=st["marker"], color=st["color"],
                   label=name, alpha=0.7)
    ceiling_line(ax, 100 * bar, f"{bar:.0%} bar")
    ax.set_xlabel("KiB of rows resident per SM")
    ax.set_ylabel("% of copy bandwidth")
    ax.set_title("One-read versions: bytes resident per SM")
    ax.legend()
    return fig


# --- the dispatcher ----------------------------------------------------------------------------------

def time_dispatch(ladder) -> list[dict]:
    """Time :func:`softmax` (the dispatcher, its Python work included) on the ladder's data for every shape
    and dtype, outputs poisoned and checked, recorded as impl ``dispatch`` with the version it chose."""
    from utils.check import assert_close, poison

    from . import softmax
    entries = []
    for shape in ladder.shapes:
        for dn in ladder.dtypes:
            case, ref, seed = ladder.case(shape, dn)
            x, y = case.args
            poison(y)
            what = f"dispatch {dn} {shape} (seed {seed})"
            entries.append(ladder.rec.time(
                "softmax", "dispatch", lambda x=x, y=y: softmax(x, out=y), dtype=dn, shape=shape,
                nbytes=nbytes(*shape, itemsize=np.dtype(dn).itemsize),
                extra={"chosen": dispatch(*shape, dn)},
                check=lambda y=y, ref=ref, dn=dn, what=what: assert_close(y, ref, dtype=dn, name=what),
                **ladder.bench))
    return entries


@dataclasses.dataclass
class DispatchResults:
    """The dispatcher's figures per (shape, dtype): fraction of copy, the same for the chosen version's
    bound launch in the ladder, and per (peer, shape, dtype) its ratio to the peer; and the table."""
    of_copy: dict
    bound: dict
    vs: dict
    table: Any


def dispatch_results(ladder, same: dict) -> DispatchResults:
    """Read the dispatcher's entries (:func:`time_dispatch`) beside the chosen versions, the peers and the
    same-bytes copy (``same``, from the :class:`Ledger`)."""
    from utils.table import Table
    keys = [(s, dn) for s in ladder.shapes for dn in ladder.dtypes]
    chosen = {(s, dn): dispatch(*s, dn) for s, dn in keys}
    of_copy = {(s, dn): ladder.fraction_of_copy("dispatch", s, dn) for s, dn in keys}
    bound = {(s, dn): ladder.fraction_of_copy(chosen[s, dn], s, dn) for s, dn in keys}
    vs = {(p, s, dn): ladder.ratio("dispatch", p, s, dn) for p in ladder.peers for s, dn in keys}
    rows = [[shape_name(s), dn, chosen[s, dn], f"{of_copy[s, dn]:.0%}", f"{bound[s, dn]:.0%}", f"{same[s, dn]:.0%}",
             *(f"{vs[p, s, dn]:.2f}x" for p in ladder.peers)] for s, dn in keys]
    table = Table(["shape", "dtype", "chosen", "of copy", "chosen, bound launch", "same-bytes copy",
                   *(f"vs {p.replace('.compile.softmax', '.compile')}" for p in ladder.peers)], rows,
                  caption="the dispatcher, this run")
    return DispatchResults(of_copy, bound, vs, table)
