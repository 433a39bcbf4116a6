"""The ladder harness: one declarative object per chapter ladder, as Triton's ``perf_report`` is for its
tutorials.

A :class:`Ladder` holds an op's :class:`~utils.version.Registry`, the shapes and dtypes the chapter
measures, the odd shapes it checks, how to make inputs, the reference, the cost model and the peers.
Then, for each version, one call::

    ladder.run("v4_cluster_row", predict=0.85)   # check on odd shapes (outputs poisoned), then time on
                                                  # every shape beside the peers; record; return a Table

checks it on fresh seeded inputs of every odd shape with its outputs poisoned, times it on every
shape it supports (L2 flushed, medians, the output re-checked after timing), records every result in
the chapter's :class:`~utils.record.Record`, and returns the standard table: the version next to its
parent, the peers and the copy ceiling measured in the same run. :meth:`Ladder.summary` and
:meth:`Ladder.plot` draw the whole ladder from the record.

Inputs are made by ``make(shape, dtype, rng) -> Case``: the arguments the versions take, in order,
and which of them are outputs (poisoned before every checked run). Everything random comes from a
``numpy.random.Generator`` seeded per (ladder seed, version, shape, dtype); a failure names the seed.
"""
from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .check import CheckFailed, assert_close, poison
from .table import Table


@dataclasses.dataclass
class Case:
    """One problem instance: the arguments a version takes, in order, and the indices of the outputs."""
    args: tuple
    outputs: tuple[int, ...] = (-1,)
    kwargs: dict = dataclasses.field(default_factory=dict)

    @property
    def out(self):
        outs = tuple(self.args[i] for i in self.outputs)
        return outs[0] if len(outs) == 1 else outs


def shape_name(shape) -> str:
    return "x".join(str(int(s)) for s in shape)


def dtype_name(dtype) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def metric_text(v: float) -> str:
    """A metric for a table: whole numbers from 100 up (GB/s, fast TFLOP/s), three significant digits below,
    so a kernel at 0.512 TFLOP/s does not print as 1."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def case_seed(base: int, *parts) -> int:
    """A seed that depends on the ladder's seed and on what is being made (version, shape, dtype),
    stable across runs and processes."""
    return (int(base) * 1_000_003 + zlib.crc32(repr(parts).encode())) % 2**32


class Ladder:
    """A chapter's ladder of versions of one op (see the module docstring).

    ``make(shape, dtype, rng) -> Case``; ``reference(case) -> array`` (or a tuple, one per output) in
    float64; ``nbytes(shape, dtype)`` and/or ``flops(shape, dtype)``: the op's cost model (minimum
    bytes, FLOPs); ``peers``: {impl name: factory(case) -> zero-argument callable that launches the peer
    on ``case`` and returns its output}. ``tol``: dtype name -> tolerance override (default by dtype).
    ``ceiling``: "copy" (the 1 GiB device copy, measured once), "same_bytes" (a copy of each shape's
    bytes, for small inputs) or None.
    """

    def __init__(self, rec, registry, *, shapes: Sequence[tuple], dtypes: Sequence[str],
                 make: Callable[[tuple, Any, np.random.Generator], Case], reference: Callable[[Case], Any],
                 nbytes: Callable[[tuple, Any], float] | None = None,
                 flops: Callable[[tuple, Any], float] | None = None,
                 odd_shapes: Sequence[tuple] = (), peers: dict[str, Callable] | None = None,
                 tol: dict[str, float] | None = None, ceiling: str | None = "copy", seed: int = 0,
                 bench: dict | None = None):
        if nbytes is None and flops is None:
            raise ValueError("a ladder needs a cost model: nbytes(shape, dtype) and/or flops(shape, dtype)")
        if ceiling not in ("copy", "same_bytes", None):
            raise ValueError(f"ceiling must be 'copy', 'same_bytes' or None, got {ceiling!r}")
        self.rec, self.registry = rec, registry
        self.shapes = [tuple(int(s) for s in sh) for sh in shapes]
        self.dtypes = [dtype_name(d) for d in dtypes]
        self.odd_shapes = [tuple(int(s) for s in sh) for sh in odd_shapes]
        self.make, self.reference = make, reference
        self.nbytes_fn, self.flops_fn = nbytes, flops
        self.peers = dict(peers or {})
        self.tol = dict(tol or {})
        self.ceiling = ceiling
        self.seed = int(seed)
        self.bench = dict(bench or {})
        self.predictions: dict[tuple, float] = {}
        self._cases: dict[tuple, tuple[Case, Any]] = {}
        self._copy: dict[tuple, float] = {}

    # --- inputs ----------------------------------------------------------------------------------
    def case(self, shape, dtype, *, fresh_for: str | None = None) -> tuple[Case, Any, int]:
        """(case, reference, seed). Timing shares one case per (shape, dtype) across versions and peers
        (the same data for all, as honest ratios need); checks pass ``fresh_for`` to get inputs of
        their own."""
        dn = dtype_name(dtype)
        seed = case_seed(self.seed, fresh_for or "timing", tuple(shape), dn)
        key = (tuple(shape), dn)
        if fresh_for is None and key in self._cases:
            case, ref = self._cases[key]
            return case, ref, seed
        case = self.make(tuple(shape), np.dtype(dn), np.random.default_rng(seed))
        ref = self.reference(case)
        if fresh_for is None:
            self._cases[key] = (case, ref)
        return case, ref, seed

    def _assert(self, case: Case, ref, dn: str, what: str) -> None:
        outs = case.out if len(case.outputs) > 1 else (case.out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        for i, (o, r) in enumerate(zip(outs, refs)):
            assert_close(o, r, dtype=dn if dn not in self.tol else None, tol=self.tol.get(dn),
                         name=what + (f" output {i}" if len(outs) > 1 else ""))

    # --- checking --------------------------------------------------------------------------------
    def check(self, label, shapes: Sequence[tuple] | None = None, config=None) -> int:
        """Run version ``label`` once on fresh seeded inputs of every odd shape (or ``shapes``) and dtype
        it supports, outputs poisoned first; raise CheckFailed naming the case and its seed. Returns
        the number of cases checked (at least one, or it raises)."""
        v = self.registry[label]
        n = 0
        for shape in (shapes or self.odd_shapes or self.shapes):
            for dn in self.dtypes:
                case, ref, seed = self.case(shape, dn, fresh_for=v.label)
                for i in case.outputs:
                    poison(case.args[i])
                problem = v.validate(*case.args, **case.kwargs)
                if not v.supports(problem, config):
                    continue
                v(*case.args, config=config, **case.kwargs)
                self._assert(case, ref, dn, f"{v.name} {dn} {shape_name(shape)} (seed {seed})")
                n += 1
        if n == 0:
            raise CheckFailed(f"{v.name}: supports none of the shapes it was to be checked on")
        return n

    # --- timing ----------------------------------------------------------------------------------
    def cost(self, shape, dn) -> dict:
        out = {}
        if self.nbytes_fn is not None:
            out["nbytes"] = self.nbytes_fn(shape, np.dtype(dn))
        if self.flops_fn is not None:
            out["flops"] = self.flops_fn(shape, np.dtype(dn))
        return out

    def copy_gbps(self, shape=None, dn=None) -> float:
        """The copy ceiling of this run (GB/s, read + written): the 1 GiB copy, or a copy of the same
        bytes as ``shape`` when the ladder's ceiling is "same_bytes". Measured once, recorded."""
        from .hardware import measure_copy, measure_copy_same_bytes
        if self.ceiling == "same_bytes" and shape is not None:
            nb = int(self.cost(shape, dn)["nbytes"]) // 2
            key = ("same", nb)
            if key not in self._copy:
                self._copy[key] = measure_copy_same_bytes(self.rec, nb)["metric"]
            return self._copy[key]
        if "copy" not in self._copy:
            self._copy["copy"] = measure_copy(self.rec)["metric"]
        return self._copy["copy"]

    def time(self, label, shapes: Sequence[tuple] | None = None, config=None, impl: str | None = None,
             extra: dict | None = None) -> list[dict]:
        """Time version ``label`` on every shape and dtype it supports; record and return the entries.
        ``impl`` names a non-default config's entry (``"v7_warp_raw[4,8,6]"``)."""
        v = self.registry[label]
        entries = []
        for shape in (shapes or self.shapes):
            for dn in self.dtypes:
                case, ref, seed = self.case(shape, dn)
                problem = v.validate(*case.args, **case.kwargs)
                if not v.supports(problem, config):
                    continue
                for i in case.outputs:
                    poison(case.args[i])
                run = v.bind(*case.args, config=config, **case.kwargs)
                what = f"{v.name} {dn} {shape_name(shape)} (seed {seed})"
                entries.append(self.rec.time(
                    self.registry.op, impl or v.label, run, dtype=dn, shape=shape, **self.cost(shape, dn),
                    check=lambda case=case, ref=ref, dn=dn, what=what: self._assert(case, ref, dn, what),
                    extra={"config": jsonable_config(v.resolve_config(problem, config)), **(extra or {})},
                    **self.bench))
        return entries

    def time_peers(self, shapes: Sequence[tuple] | None = None) -> list[dict]:
        """Time every peer on every shape and dtype, on the same data the versions get."""
        entries = []
        for shape in (shapes or self.shapes):
            for dn in self.dtypes:
                case, ref, seed = self.case(shape, dn)
                for impl, factory in self.peers.items():
                    fn = factory(case)
                    box = {}

                    def run(fn=fn, box=box):
                        box["out"] = fn()

                    def check(box=box, ref=ref, dn=dn, impl=impl, shape=shape):
                        got = peer_output(box["out"])
                        if isinstance(ref, tuple):
                            got = got if isinstance(got, tuple) else (got,)
                            for i, (o, r) in enumerate(zip(got, ref)):
                                assert_close(o, r, dtype=dn, tol=self.tol.get(dn), name=f"{impl} output {i}")
                        else:
                            assert_close(got, ref, dtype=dn, tol=self.tol.get(dn),
                                         name=f"{impl} {dn} {shape_name(shape)}")
                    entries.append(self.rec.time(self.registry.op, impl, run, dtype=dn, shape=shape,
                                                 is_peer=True, check=check, **self.cost(shape, dn),
                                                 **self.bench))
        return entries

    def predict(self, label, value: float, shape=None, dtype=None) -> None:
        """Write down a prediction (a fraction of copy for bandwidth ladders, TFLOP/s for FLOP ladders)
        before timing: for one shape/dtype, or for all."""
        for sh in ([tuple(shape)] if shape is not None else self.shapes):
            for dn in ([dtype_name(dtype)] if dtype is not None else self.dtypes):
                self.predictions[self.registry[label].label, sh, dn] = float(value)

    def run(self, label, *, predict: float | dict | None = None, shapes=None, config=None) -> Table:
        """check + time + table: the one call per version."""
        if isinstance(predict, dict):
            for (sh, dn), val in predict.items():
                self.predict(label, val, sh, dn)
        elif predict is not None:
            self.predict(label, predict)
        self.check(label, config=config)
        self.time(label, shapes, config=config)
        return self.table([label], shapes=shapes)

    # --- reading the record ----------------------------------------------------------------------
    def entry(self, impl, shape, dtype) -> dict | None:
        hits = self.rec.find(self.registry.op, impl, dtype=dtype_name(dtype), shape=list(shape))
        return hits[0] if hits else None

    def fraction_of_copy(self, impl, shape, dtype) -> float | None:
        e = self.entry(impl, shape, dtype)
        if e is None or e["metric_name"] != "GB/s":
            return None
        return e["metric"] / self.copy_gbps(shape, dtype_name(dtype))

    def ratio(self, impl, over, shape, dtype) -> float | None:
        """metric(impl) / metric(over) on one shape and dtype, both from this run."""
        a, b = self.entry(impl, shape, dtype), self.entry(over, shape, dtype)
        return None if a is None or b is None else a["metric"] / b["metric"]

    def best(self, shape, dtype, among: Sequence[str] | None = None) -> str | None:
        """The version (not peer) with the highest metric on one shape and dtype."""
        labels = list(among or self.registry)
        es = [(self.entry(lab, shape, dtype), lab) for lab in labels]
        es = [(e["metric"], lab) for e, lab in es if e is not None]
        return max(es)[1] if es else None

    def impl_name(self, label: str) -> str:
        """A version's label, or the name a config variant was timed under (``time(..., impl="v6[pad]")``)."""
        try:
            return self.registry[label].label
        except KeyError:
            return label

    def table(self, labels: Sequence[str], shapes=None, peers: Sequence[str] | None = None) -> Table:
        """The standard table: per shape and dtype, each version's time and metric, its fraction of copy
        (bandwidth ladders), the prediction if one was written down, and the ratio to each peer."""
        labels = [self.impl_name(lab) for lab in labels]
        peers = list(self.peers) if peers is None else list(peers)
        rows = []
        for shape in (shapes or self.shapes):
            for dn in self.dtypes:
                for lab in labels:
                    e = self.entry(lab, shape, dn)
                    if e is None:
                        continue
                    row = [shape_name(shape), dn, lab, f"{e['ms'] * 1e3:.1f}", metric_text(e["metric"])]
                    frac = self.fraction_of_copy(lab, shape, dn) if self.ceiling else None
                    if self.ceiling:
                        row.append("" if frac is None else f"{frac:.0%}")
                    pred = self.predictions.get((lab, tuple(shape), dn))
                    row.append("" if pred is None else (f"{pred:.0%}" if e["metric_name"] == "GB/s"
                                                        else metric_text(pred)))
                    for p in peers:
                        r = self.ratio(lab, p, shape, dn)
                        row.append("" if r is None else (f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"))
                    rows.append(row)
        metric = self._metric_name()
        cols = ["shape", "dtype", "version", "µs", metric]
        if self.ceiling:
            cols.append("of copy")
        cols.append("predicted")
        cols += [f"vs {p}" for p in peers]
        return Table(cols, rows, align="lll" + "r" * (len(cols) - 3))

    def summary(self, labels: Sequence[str] | None = None, shapes=None) -> Table:
        """Every version and peer on every shape: the metric (and fraction of copy), one column each."""
        labels = [self.impl_name(lab) for lab in (labels or self.registry)]
        shapes = shapes or self.shapes
        # a column only for what was recorded on these shapes (a later chapter's versions stay out)
        impls = [i for i in labels + list(self.peers)
                 if any(self.entry(i, sh, dn) for sh in shapes for dn in self.dtypes)]
        rows = []
        for shape in shapes:
            for dn in self.dtypes:
                row = [shape_name(shape), dn]
                for impl in impls:
                    e = self.entry(impl, shape, dn)
                    frac = self.fraction_of_copy(impl, shape, dn) if self.ceiling else None
                    if e is None:
                        row.append("")
                    elif frac is not None:
                        row.append(f"{frac:.0%}")
                    else:
                        row.append(metric_text(e["metric"]))
                rows.append(row)
        unit = "of copy" if self.ceiling else self._metric_name()
        return Table(["shape", "dtype", *impls], rows, caption=f"every version and peer ({unit})",
                     align="ll" + "r" * len(impls))

    def plot(self, labels: Sequence[str] | None = None, shapes=None, title: str = "", ax=None):
        """Small multiples: one panel per shape and dtype, each a dot plot of every version and peer
        (the metric as % of copy for bandwidth ladders, else TFLOP/s). Versions keep one colour and
        marker across panels (utils.plot's ordered palette); peers are grey crosses, and the best peer
        of each panel is a dashed grey line, so a version right of it beats every peer there.
        ``ax`` draws into one given axes, for a ladder with a single shape and dtype."""
        from . import plot as P
        labels = [self.registry[lab].label for lab in (labels or self.registry)]
        groups = [(sh, dn) for sh in (shapes or self.shapes) for dn in self.dtypes]
        impls = [i for i in labels + list(self.peers) if any(self.entry(i, sh, dn) for sh, dn in groups)]
        groups = [g for g in groups if any(self.entry(i, *g) for i in impls)]
        if not groups:
            raise ValueError("nothing recorded to plot for these versions and shapes: run() them first")
        frac_mode = self.ceiling is not None and self._metric_name() == "GB/s"
        styles = P.series_styles(impls, peers=list(self.peers))
        if ax is not None:
            if len(groups) != 1:
                raise ValueError(f"ax= draws one panel, but this ladder has {len(groups)} shape/dtype groups; "
                                 "leave ax out for small multiples")
            axes, cols = [ax], 1
        else:
            rows, cols = P.grid_shape(len(groups), cols=4 if len(groups) != 6 else 3)
            fig, grid = P.figure(rows, cols, height=0.19 * len(impls) + 0.75, sharey=True)
            axes = list(grid.flat)
            for extra in axes[len(groups):]:
                extra.set_visible(False)
            if title:
                fig.suptitle(title)
        ypos = {impl: k for k, impl in enumerate(impls)}
        for a, (sh, dn) in zip(axes, groups):
            best_peer, top = None, 0.0
            for impl in impls:
                e = self.entry(impl, sh, dn)
                if e is None:
                    continue
                x = self.fraction_of_copy(impl, sh, dn) * 100 if frac_mode else e["metric"]
                st = styles[impl]
                top = max(top, x)
                a.plot([x], [ypos[impl]], ls="none", marker=st["marker"], color=st["color"],
                       markersize=6, mew=1.5)
                if impl in self.peers:
                    best_peer = x if best_peer is None else max(best_peer, x)
            if best_peer is not None:
                a.axvline(best_peer, color="0.5", ls="--", lw=0.9)
            if frac_mode:
                a.axvline(100, color="k", lw=0.8)
            a.set_xlim(0, max(110.0, 1.06 * top) if frac_mode else 1.1 * top)   # from zero: honest lengths
            a.set_title(f"{shape_name(sh)}\n{dn}", fontsize=P.FONT_PT - 1)   # two lines: 4 panels fit across
            a.grid(True, axis="x", alpha=0.3)
            a.grid(False, axis="y")
        axes[0].set_yticks(range(len(impls)))
        axes[0].set_yticklabels([i + (" (peer)" if i in self.peers else "") for i in impls])
        axes[0].invert_yaxis()
        xlabel = "% of copy" if frac_mode else self._metric_name()
        for k, a in enumerate(axes[:len(groups)]):
            if k + cols >= len(groups):          # the lowest panel of its column
                a.set_xlabel(xlabel)
        if ax is not None and title:
            ax.set_title(f"{title}\n{shape_name(groups[0][0])} {groups[0][1]}", fontsize=P.FONT_PT)
        return axes[0]

    def _metric_name(self) -> str:
        return "TFLOP/s" if self.flops_fn is not None else "GB/s"


def peer_output(out):
    """A peer's output as an array the checks read. Torch tensors (the usual peers) are viewed as CuPy
    arrays, zero-copy, only here, after timing: converting inside the timed call would add its host cost
    to a short kernel's time."""
    if isinstance(out, tuple):
        return tuple(peer_output(o) for o in out)
    if type(out).__module__.startswith("torch"):
        from .arrays import from_torch
        return from_torch(out)
    return out


def jsonable_config(config):
    """A version's config as JSON-ready values (named tuples and dataclasses become dicts of their fields)."""
    if config is None:
        return None
    if hasattr(config, "_asdict"):
        return {k: jsonable_config(v) for k, v in config._asdict().items()}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {k: jsonable_config(v) for k, v in dataclasses.asdict(config).items()}
    if isinstance(config, (tuple, list)):
        return [jsonable_config(c) for c in config]
    if isinstance(config, (np.integer, np.floating)):
        return config.item()
    return config
