"""Chapter 7's experiments and tables: the float32 numerics demos, the large-mean test, and the figures the
chapter reads off its two ladders (LayerNorm and RMSNorm). The notebook makes one call per experiment
and keeps the glue and expect lines; the loops, the lookups and the table formatting live here.

A *ladder* here is the chapter's :class:`utils.ladder.Ladder` (``layernorm.ladder(...)``); the functions
that read one use only its ``shapes``, ``dtypes``, ``peers``, ``entry``, ``fraction_of_copy`` and
``ratio``, so the host tests pass a stand-in.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.table import Table

from . import (
    EPS_LN,
    LAYERNORM,
    LAYOUTS,
    dtype_of,
    layer_norm_ref,
    nbytes,
    pick,
    random_arrays,
    resources,
    var_naive,
    var_shifted,
    var_twopass,
    welford_state,
    welford_tree,
)

VARIANCE_ALGOS = ("naive E[x^2]-E[x]^2", "two-pass", "Welford")
ITEMSIZE = {"float32": 4, "bfloat16": 2}


# --- reading the ladders ---------------------------------------------------------------------------

def by_width(ladder, pred: dict) -> dict:
    """A prediction per row width (fraction of copy), as ``Ladder.run(predict=...)`` takes it:
    {(shape, dtype): pred[width]} for the ladder's shapes and dtypes whose width ``pred`` names."""
    return {(s, d): pred[s[1]] for s in ladder.shapes for d in ladder.dtypes if s[1] in pred}


def fracs(ladder, impl: str, shapes=None, dtypes=None) -> dict:
    """{(shape, dtype): fraction of copy} of a version or peer, for the cases this run timed."""
    out = {(s, d): ladder.fraction_of_copy(impl, s, d)
           for s in (ladder.shapes if shapes is None else shapes)
           for d in (ladder.dtypes if dtypes is None else dtypes)}
    return {k: v for k, v in out.items() if v is not None}


def ratios(ladder, new: str, old: str, shapes=None, dtypes=None) -> dict:
    """{(shape, dtype): metric(new) / metric(old)}, same run, for the cases both were timed on."""
    out = {(s, d): ladder.ratio(new, old, s, d)
           for s in (ladder.shapes if shapes is None else shapes)
           for d in (ladder.dtypes if dtypes is None else dtypes)}
    return {k: v for k, v in out.items() if v is not None}


def pooled(ln, rms, impls: tuple[str, str], shapes=None, dtypes=None) -> list[float]:
    """The fractions of copy of LayerNorm's ``impls[0]`` and RMSNorm's ``impls[1]``, in one list (the
    prose quotes one range for both ops)."""
    return [*fracs(ln, impls[0], shapes, dtypes).values(), *fracs(rms, impls[1], shapes, dtypes).values()]


def metric_ratios(a, impl_a: str, b, impl_b: str, shapes=None, dtypes=None) -> dict:
    """{(shape, dtype): metric of ``impl_a`` on ladder ``a`` / metric of ``impl_b`` on ladder ``b``}
    (LayerNorm against RMSNorm: the same bytes but one weight vector), where both were timed."""
    out = {}
    for s in (a.shapes if shapes is None else shapes):
        for d in (a.dtypes if dtypes is None else dtypes):
            ea, eb = a.entry(impl_a, s, d), b.entry(impl_b, s, d)
            if ea is not None and eb is not None:
                out[s, d] = ea["metric"] / eb["metric"]
    return out


def dtype_ratio(ladder, impl: str, shapes=None) -> dict:
    """{shape: GB/s of bf16 / GB/s of fp32} of one version: near 0.5 when it is limited by instructions
    per element rather than by bytes."""
    out = {}
    for s in (ladder.shapes if shapes is None else shapes):
        bf, fp = ladder.entry(impl, s, "bfloat16"), ladder.entry(impl, s, "float32")
        if bf is not None and fp is not None:
            out[s] = bf["metric"] / fp["metric"]
    return out


def span(values, fmt: str = "{:.0%}") -> str:
    """'lo–hi' of some figures, for the prose."""
    values = list(values)
    if not values:
        raise ValueError("span of no figures: nothing of this was timed in this run")
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


# --- 7.1: the numerics on the CPU (NumPy float32, sequential sums) ---------------------------------

@dataclasses.dataclass
class VarianceDemo:
    """Relative errors of the variance per algorithm (``errors[algo][i]`` at ``means[i]``) and the table."""
    means: list
    n: int
    errors: dict
    table: Table


def variance_demo(means, n: int, rng) -> VarianceDemo:
    """For each mean, ``n`` values of N(mean, 1) in float32 (drawn from ``rng`` in order): the variance by
    the naive formula, two-pass and Welford, each against float64. Errors are floored at 1e-9 (log plot)."""
    errs = {k: [] for k in VARIANCE_ALGOS}
    rows = []
    for mu in means:
        xd = (mu + rng.standard_normal(n)).astype(np.float32)
        true = float(np.var(xd.astype(np.float64)))
        n_w, _, m2_w = welford_state(xd)
        got = dict(zip(VARIANCE_ALGOS, (var_naive(xd), var_twopass(xd), m2_w / n_w)))
        for k, v in got.items():
            errs[k].append(max(abs(v - true) / true, 1e-9))
        rows.append([f"{mu:g}", f"{true:.6f}", *(f"{v:.6g}" for v in got.values())])
    table = Table(["mean", "true var (float64)", *VARIANCE_ALGOS], rows, caption=f"float32 variance of {n} values")
    return VarianceDemo(list(means), n, errs, table)


def plot_variance_errors(demo: VarianceDemo):
    """The demo's relative errors against the row mean (log-log), with the eps * (mean/std)^2 line."""
    from utils.plot import figure, version_style
    _, axes = figure(1, 1, height=3.4)
    ax = axes[0, 0]
    xs = [max(m, 1.0) for m in demo.means]
    for i, (k, v) in enumerate(demo.errors.items()):
        ax.plot(xs, v, label=k, **version_style(i))
    ax.plot([1, 1e4], [6e-8, 6e-8 * 1e8], ":", color="0.5", label="eps * (mean/std)^2")
    ax.set(xscale="log", yscale="log", xlabel="row mean (std 1); mean 0 plotted at 1",
           ylabel="relative error of the variance", title=f"float32 variance of {demo.n} values")
    ax.legend()
    return ax


@dataclasses.dataclass
class TreeDemo:
    """Relative errors of the variance per partition count, and the table."""
    parts: tuple
    errors: list
    table: Table


def welford_tree_demo(rng, n: int, parts=(1, 32, 512, 4096), mean: float = 1e4) -> TreeDemo:
    """One row of ``n`` values of N(mean, 1) in float32, split into each count of ``parts`` partitions,
    Welford per partition, merged pairwise as a tree (Chan); mean, variance and its error vs float64."""
    xd = (mean + rng.standard_normal(n)).astype(np.float32)
    ref64 = xd.astype(np.float64)
    rows, errs = [], []
    for p in parts:
        n_, m_, m2_ = welford_tree(xd, p)
        errs.append(abs(m2_ / n_ - ref64.var()) / ref64.var())
        rows.append([p, f"{m_:.6f}", f"{m2_ / n_:.6f}", f"{errs[-1]:.1e}"])
    rows.append(["float64 reference", f"{ref64.mean():.6f}", f"{ref64.var():.6f}", ""])
    return TreeDemo(tuple(parts), errs, Table(["partitions merged as a tree", "mean", "var", "var rel. error"], rows))


SHIFT_CASES = ("two-pass", "shifted", "outlier", "zero")


@dataclasses.dataclass
class ShiftDemo:
    """``errors[mean][case]`` for the cases of SHIFT_CASES, and the table."""
    errors: dict
    table: Table


def shifted_demo(means, n: int, rng) -> ShiftDemo:
    """layernorm_v6's shifted sums on the CPU: for each mean, ``n`` values of N(mean, 1) in float32; the
    variance's relative error by two-pass, shifted by K = x_0, shifted with x_0 an outlier (mean + 64 std),
    and shifted by K = 0 (the naive formula)."""
    errors, rows = {}, []
    for mu in means:
        xd = (mu + rng.standard_normal(n)).astype(np.float32)
        xo = xd.copy()
        xo[0] = np.float32(mu + 64.0)         # the bad case: the shift is an outlier, 64 std from the mean
        cells = []
        for fn, arr in ((var_twopass, xd), (var_shifted, xd), (var_shifted, xo), (lambda a: var_shifted(a, 0.0), xd)):
            true = float(np.var(arr.astype(np.float64)))
            cells.append(abs(fn(arr) - true) / true)
        errors[mu] = dict(zip(SHIFT_CASES, cells))
        rows.append([f"{mu:g}", *(f"{c:.1e}" for c in cells)])
    table = Table(["mean", "two-pass", "shifted, K = x_0", "shifted, x_0 = mean + 64 std", "shifted, K = 0 (naive)"],
                  rows, caption="relative error of the variance, float32, sequential sums")
    return ShiftDemo(errors, table)


# --- the ledger, the peers, the layouts ------------------------------------------------------------

def floor_table(shapes, dtypes, copy_gbps: float, bar: float = 0.75, goal: float = 0.88) -> Table:
    """LayerNorm's minimum bytes per shape and dtype, and the times at the copy rate, the bar and the goal."""
    rows = []
    for d in dtypes:
        for s in shapes:
            nb = nbytes(*s, ITEMSIZE[dtype_of(d)], "layernorm")
            floor = nb / (copy_gbps * 1e9) * 1e6
            rows.append([f"{s[0]}x{s[1]}", d, f"{nb / 2**20:.0f}", f"{floor:.0f}", f"{floor / bar:.0f}",
                         f"{floor / goal:.0f}"])
    return Table(["shape", "dtype", "LayerNorm MiB", "floor at copy (µs)", f"bar {bar:.0%} (µs)",
                  f"goal {goal:.0%} (µs)"], rows)


def peer_table(ln, rms) -> Table:
    """Every peer of both ladders as a fraction of copy, per shape and dtype."""
    rows = []
    for d in ln.dtypes:
        for s in ln.shapes:
            cells = [lad.fraction_of_copy(p, s, d) for lad in (ln, rms) for p in lad.peers]
            rows.append([f"{s[0]}x{s[1]}", d, *("" if f is None else f"{f:.0%}" for f in cells)])
    return Table(["shape", "dtype", *ln.peers, *rms.peers], rows, caption="peers, fraction of the copy bandwidth")


def layout_table(layouts=LAYOUTS) -> Table:
    return Table(["layout", "threads/row", "block", "values/thread", "blocks/row", "longest row"],
                 [[lay.name, lay.tpr, lay.threads, lay.items, lay.cluster, lay.capacity] for lay in layouts])


# --- rows of mean 1e4: the test that breaks E[x^2] - E[x]^2 ---------------------------------------

class LargeMeanTest:
    """fp32 rows of mean ``mean`` and std 1 (``shape``, drawn from ``seed``), and the relative L2 error of
    each implementation on them: a LayerNorm version label or ``"torch.layer_norm"``. ``errors`` keeps
    every result in the order measured."""

    TORCH = "torch.layer_norm"

    def __init__(self, seed: int, shape=(64, 4096), mean: float = 1e4):
        self.x, self.w, self.b, _ = random_arrays("layernorm", shape, "float32", seed=seed, mean=mean)
        self.ref = layer_norm_ref(self.x, self.w, self.b)
        self.errors: dict[str, float] = {}

    def error(self, impl: str) -> float:
        """The relative L2 error of ``impl`` (measured once, then remembered)."""
        if impl not in self.errors:
            self.errors[impl] = self._measure(impl)
        return self.errors[impl]

    def _measure(self, impl: str) -> float:
        import cupy

        from utils.check import rel_l2_error
        if impl == self.TORCH:
            import torch.nn.functional as TF

            from utils.arrays import as_torch, from_torch
            yt = TF.layer_norm(as_torch(self.x), (int(self.x.shape[1]),), as_torch(self.w), as_torch(self.b), EPS_LN)
            return rel_l2_error(from_torch(yt), self.ref)
        y = cupy.full(self.x.shape, np.nan, np.float32)
        LAYERNORM[impl](self.x, self.w, self.b, y)
        return rel_l2_error(y, self.ref)

    def every_version(self) -> dict:
        """The errors of every LayerNorm version that takes these rows on this GPU (and of all measured
        before)."""
        import cupy
        for label, v in LAYERNORM.items():
            if label not in self.errors and v.supports(v.validate(self.x, self.w, self.b, cupy.empty_like(self.x))):
                self.error(label)
        return self.errors

    def table(self) -> Table:
        return Table(["impl", "relative L2 error at mean 1e4"], [[k, f"{v:.1e}"] for k, v in self.errors.items()])


# --- 7.12 and 7.13: the streams against the dispatcher, the dispatcher against the bar --------------

def stream_vs_picked(ln, rms, streams: tuple[str, str], shapes=None, dtypes=None) -> list[float]:
    """metric(stream) / metric(the dispatcher's version, :func:`pick`) for LayerNorm's ``streams[0]`` and
    RMSNorm's ``streams[1]``, on every shape and dtype both were timed on."""
    out = []
    for op, lad, stream in (("layernorm", ln, streams[0]), ("rmsnorm", rms, streams[1])):
        for s in (lad.shapes if shapes is None else shapes):
            for d in (lad.dtypes if dtypes is None else dtypes):
                r = lad.ratio(stream, pick(op, s[1], d), s, d)
                if r is not None:
                    out.append(r)
    return out


@dataclasses.dataclass
class DispatchSummary:
    """Per op, one dict per timed case: fraction of copy (``frac``) and the ratios to the eager and
    compiled peers (``eager``, ``comp``) of the dispatcher's version; and the table."""
    cases: dict
    table: Table


def dispatch_summary(ladders: dict) -> DispatchSummary:
    """The dispatcher (``pick``) on every shape and dtype of each ladder ({op: ladder}, peers in the order
    eager, compiled): its version, the fastest version, fraction of copy, ratios to the peers. Cases the
    dispatched version was not timed on (clusters missing) are left out."""
    rows, cases = [], {}
    for op, lad in ladders.items():
        eager, comp = list(lad.peers)[:2]
        cases[op] = []
        for d in lad.dtypes:
            for s in lad.shapes:
                picked = pick(op, s[1], d)
                f = lad.fraction_of_copy(picked, s, d)
                if f is None:
                    continue                  # a version this GPU does not run (clusters)
                c = {"shape": s, "dtype": d, "frac": f, "eager": lad.ratio(picked, eager, s, d),
                     "comp": lad.ratio(picked, comp, s, d)}
                cases[op].append(c)
                rows.append([op, d, f"{s[0]}x{s[1]}", picked, lad.best(s, d), f"{f:.0%}", f"{c['eager']:.2f}x",
                             f"{c['comp']:.2f}x"])
    table = Table(["op", "dtype", "shape", "dispatched", "fastest version", "of copy", "vs eager", "vs torch.compile"],
                  rows, caption="the dispatcher (L.layer_norm / L.rms_norm) on the chapter's shapes")
    return DispatchSummary(cases, table)


@dataclasses.dataclass
class SameBytesCopy:
    """The record entry of a plain copy of ``shape``'s x bytes, and of each op's dispatched version there."""
    copy: dict
    dispatched: dict


def same_bytes_copy(rec, ladders: dict, shape, dtype: str) -> SameBytesCopy:
    """Time a plain device copy of x's bytes at ``shape`` and ``dtype`` the way every kernel is timed
    (launch, ramp and drain included; recorded), beside the entries of the dispatcher's version of each op
    ({op: ladder}) on the same shape from this run."""
    from utils.hardware import measure_copy_same_bytes
    copy = measure_copy_same_bytes(rec, int(shape[0]) * int(shape[1]) * ITEMSIZE[dtype_of(dtype)])
    return SameBytesCopy(copy, {op: lad.entry(pick(op, shape[1], dtype), shape, dtype) for op, lad in ladders.items()})


@dataclasses.dataclass
class LongRowResources:
    """{(op, dtype): resources(...) of the dispatched version} on the long shape, and the table."""
    resources: dict
    table: Table


def long_row_resources(ladders: dict, shape, dtypes, facts=None) -> LongRowResources:
    """Layout, registers and blocks per SM of the dispatcher's version of each op on ``shape`` (the
    128-row shape), with its fraction of copy where this run timed it."""
    found, rows = {}, []
    for op, lad in ladders.items():
        for d in dtypes:
            picked = pick(op, shape[1], d)
            r = resources(op, picked, *shape, d, facts)
            if r is None:
                continue                      # the dispatched version does not take this shape here
            frac = lad.fraction_of_copy(picked, shape, d)      # None where this run has no timing of it
            found[op, d] = r
            rows.append([op, d, r["layout"].name, r["registers"], r["blocks_per_sm"],
                         "—" if frac is None else f"{frac:.0%}"])
    table = Table(["op", "dtype", f"layout ({shape[0]} x {shape[1]})", "registers", "blocks per SM", "of copy"], rows)
    return LongRowResources(found, table)
