"""The one version model: every numbered kernel version of every op family is a :class:`Version`.

A version knows

- its name, ``<op>_v<N>_<idea>`` (``softmax_v4_cluster_row``), its parent and one line on what it
  changes against that parent;
- its :class:`~utils.build.KernelSource` (which says what the code requires: clusters, TMA, wgmma)
  and the snippet a chapter displays;
- its **plan**: a pure function ``plan(problem, config) -> [Launch, ...]`` from the problem (the
  validated arrays and sizes) and a tunable configuration to the launches (kernel, grid, block,
  dynamic shared memory, cluster, arguments). A plan raises :class:`Unsupported` for a problem the
  version cannot take (a row longer than its registers hold);
- its tunable **configs** (named tuples, so that ``(4, 8, 6)`` reads ``chunks=4, rows=8, min_blocks=6``)
  and which one it uses by default for a problem;
- an optional offline **prepare** step (weight packing) that turns the op's canonical inputs into the
  layout this version reads.

An op family's versions form a :class:`Registry`, which also owns the op's ``problem`` function
(argument validation). Tests, tuning scripts, the ladder harness and chapters iterate the registry;
nothing else knows how a version launches::

    run = SOFTMAX["v4_cluster_row"].bind(x, y)          # validate, plan, load: once
    run()                                                # launch only (timing loops)
    SOFTMAX["v4_cluster_row"](x, y)                      # validate, plan and launch once

Nothing here needs a GPU until a version is bound.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

NAME_RE = re.compile(r"^(?P<op>[a-z][a-z0-9_]*?)_v(?P<number>\d+)_(?P<idea>[a-z0-9][a-z0-9_]*)$")


class Unsupported(ValueError):
    """A version cannot take this problem (the message says why and what it can take)."""


@dataclasses.dataclass(frozen=True)
class Workspace:
    """A scratch buffer a plan asks for; :meth:`Version.bind` allocates it once per bound problem."""
    shape: tuple[int, ...]
    dtype: Any = np.float32
    fill: float | None = None      # None: uninitialised; a value: filled at every launch (atomics' zero)
    every_launch: bool = True      # False: filled once at bind (counters the kernel itself sets back to zero)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan.

    ``kernel`` is an extern "C" name or a template name expression of the version's source (or of
    ``source`` where a version launches a kernel of another file). ``cluster`` is the number of blocks
    per cluster the kernel was compiled for (``__cluster_dims__``), 1 without clusters; it is needed to
    allow non-portable sizes above 8. ``persistent`` lowers the grid to what fits on the device at once
    (the driver's cuOccupancyMaxActiveClusters for clusters; one wave of blocks otherwise).
    """
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple = ()
    smem: int = 0
    cluster: int = 1
    persistent: bool = False
    source: Any = None

    def __post_init__(self):
        for name in ("grid", "block"):
            dims = getattr(self, name)
            if len(dims) != 3 or any(int(d) < 1 for d in dims):
                raise ValueError(f"{self.kernel}: {name} must be three positive ints, got {dims}")
        if self.smem < 0 or self.cluster < 1:
            raise ValueError(f"{self.kernel}: smem >= 0 and cluster >= 1 expected, got {self.smem}, {self.cluster}")

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def _no_prepare(*arrays):
    return arrays


@dataclasses.dataclass(frozen=True)
class Version:
    """One numbered version of an op family (see the module docstring)."""
    name: str                                   # <op>_v<N>_<idea>
    summary: str                                # what it changes against its parent, one line
    source: Any                                 # utils.build.KernelSource
    plan: Callable[[Any, Any], Sequence[Launch]]
    parent: str | None = None                   # label of the version it extends ("v3_block_row")
    snippet: str | None = None                  # snippet name in the source file
    configs: Callable[[Any], Sequence] | Sequence = ()   # tunable configs (all, or those fitting a problem)
    default: Callable[[Any], Any] | None = None  # the config used when none is given
    prepare: Callable[..., tuple] = _no_prepare  # offline: canonical inputs -> this version's layout
    problem: Callable[..., Any] | None = None   # set by the Registry: arrays -> validated problem

    def __post_init__(self):
        if not NAME_RE.match(self.name):
            raise ValueError(f"version name {self.name!r} does not follow <op>_v<N>_<idea> "
                             "(lower case, e.g. softmax_v4_cluster_row)")

    # --- names -----------------------------------------------------------------------------------
    @property
    def op(self) -> str:
        return NAME_RE.match(self.name)["op"]

    @property
    def number(self) -> int:
        return int(NAME_RE.match(self.name)["number"])

    @property
    def idea(self) -> str:
        return NAME_RE.match(self.name)["idea"]

    @property
    def label(self) -> str:
        """``v4_cluster_row``: the name without the op, as tables and plots show it."""
        return f"v{self.number}_{self.idea}"

    @property
    def requires(self) -> tuple[str, ...]:
        """GPU features the version needs (declared on its KernelSource)."""
        return tuple(getattr(self.source, "requires", ()) or ())

    # --- configs and plans -----------------------------------------------------------------------
    def all_configs(self, problem=None) -> tuple:
        """The tunable configs (those that fit ``problem`` where the version filters by problem)."""
        if callable(self.configs):
            return tuple(self.configs(problem))
        return tuple(self.configs)

    def resolve_config(self, problem, config=None):
        """``config`` checked against the instantiated ones, or the default for ``problem``."""
        if config is None:
            return self.default(problem) if self.default is not None else None
        known = self.all_configs(problem)
        if known and config not in known:
            raise ValueError(f"{self.name}: config {config} is not instantiated; choose one of {list(known)}")
        return config

    def launches(self, problem, config=None) -> list[Launch]:
        """The plan for a validated problem (pure: no GPU, no allocation)."""
        out = list(self.plan(problem, self.resolve_config(problem, config)))
        if not out:
            raise ValueError(f"{self.name}: the plan returned no launches")
        return out

    def why_not(self, problem, config=None) -> str | None:
        """None if the version takes ``problem`` (with ``config``), else the reason it does not."""
        try:
            self.launches(problem, config)
        except Unsupported as e:
            return str(e)
        return None

    def supports(self, problem, config=None) -> bool:
        return self.why_not(problem, config) is None

    # --- running ---------------------------------------------------------------------------------
    def validate(self, *arrays, **kw):
        if self.problem is None:
            raise RuntimeError(f"{self.name} is not in a Registry: it has no problem function")
        return self.problem(*arrays, **kw)

    def bind(self, *arrays, config=None, **kw) -> Callable[[], None]:
        """Validate once, plan, load the kernels and allocate workspaces; return a callable that only
        launches (the form timing loops need). Raises MissingFeature where the GPU lacks a requirement."""
        problem = self.validate(*arrays, **kw)
        return bind_launches(self.launches(problem, config), self.source)

    def __call__(self, *arrays, config=None, **kw):
        """Validate, plan and launch once; return the problem's output (``problem.out``) if it has one."""
        problem = self.validate(*arrays, **kw)
        bind_launches(self.launches(problem, config), self.source)()
        return getattr(problem, "out", None)

    def show(self) -> None:
        """Display the version's snippet (or its whole file) with CUDA highlighting."""
        from .show import show
        show(self.source.file, self.snippet)


class Registry(Mapping):
    """The versions of one op family, in order, with the op's ``problem`` (validation) function.

    Look a version up by label (``"v4_cluster_row"``), full name, or number (``4``).
    """

    def __init__(self, op: str, problem: Callable[..., Any], versions: Sequence[Version]):
        self.op = op
        self.problem = problem
        self._by_label: dict[str, Version] = {}
        for v in versions:
            if v.op != op:
                raise ValueError(f"{v.name} is not a version of {op!r} (name must start with {op}_v)")
            if v.label in self._by_label or any(w.number == v.number for w in self._by_label.values()):
                raise ValueError(f"{op}: version number {v.number} appears twice ({v.name})")
            if v.parent is not None and v.parent not in self._by_label:
                raise ValueError(f"{v.name}: parent {v.parent!r} must be an earlier version of {op}")
            self._by_label[v.label] = dataclasses.replace(v, problem=problem)

    def __getitem__(self, key) -> Version:
        if isinstance(key, (int, np.integer)):
            for v in self._by_label.values():
                if v.number == key:
                    return v
        elif isinstance(key, str):
            label = key[len(self.op) + 1:] if key.startswith(self.op + "_v") else key
            if label in self._by_label:
                return self._by_label[label]
        raise KeyError(f"{self.op} has no version {key!r}; it has {list(self._by_label)}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_label)

    def __len__(self) -> int:
        return len(self._by_label)

    def __repr__(self) -> str:
        return f"Registry({self.op!r}, {list(self._by_label)})"

    def sources(self) -> list:
        """The distinct KernelSources of the versions, in order."""
        return list(dict.fromkeys(v.source for v in self.values()))

    def runnable(self) -> list[Version]:
        """The versions whose requirements the GPU (or the emulated arch) meets."""
        from .gpu import supports
        return [v for v in self.values() if all(supports(f) for f in v.requires)]

    def show_diff(self, label, context: int = 3) -> None:
        """Display what version ``label`` changes against its parent, as a diff of their snippets."""
        from .show import show_diff
        child = self[label]
        if child.parent is None:
            raise ValueError(f"{child.name} has no parent to diff against; use .show()")
        parent = self[child.parent]
        show_diff(parent.source.file, parent.snippet, child.source.file, child.snippet, context)

    def lineage(self, label) -> list[Version]:
        """The version and its ancestors, oldest first."""
        chain = [self[label]]
        while chain[0].parent is not None:
            chain.insert(0, self[chain[0].parent])
        return chain


# --- binding: from launches to a callable ----------------------------------------------------------

def bind_launches(launches: Sequence[Launch], default_source) -> Callable[[], None]:
    """Load every launch's kernel with the attributes it needs, allocate workspaces and lower
    persistent grids; return a zero-argument callable that launches them in order."""
    from .gpu import require, require_gpu
    require_gpu()
    bound = []
    fills = []
    buffers: dict[int, Any] = {}   # one buffer per Workspace object: a plan may pass one launch's output to the next
    for ln in launches:
        src = ln.source or default_source
        for feature in getattr(src, "requires", ()) or ():
            require(feature)
        fn = src.launchable(ln.kernel, ln.cluster, ln.smem)
        args = []
        for a in ln.args:
            if isinstance(a, Workspace) and id(a) in buffers:
                args.append(buffers[id(a)])
            elif isinstance(a, Workspace):
                buf = buffers[id(a)] = _allocate(a)
                if a.fill is not None and a.every_launch:
                    fills.append((buf, a.fill))
                elif a.fill is not None:
                    buf.fill(a.fill)
                args.append(buf)
            else:
                args.append(a)
        grid = resident_grid(fn, ln) if ln.persistent else ln.grid
        bound.append((fn, grid, ln.block, tuple(args), ln.smem))

    def run():
        for buf, value in fills:
            buf.fill(value)
        for fn, grid, block, args, smem in bound:
            fn(grid, block, args, shared_mem=smem)
    return run


def _allocate(ws: Workspace):
    import cupy
    return cupy.empty(ws.shape, dtype=ws.dtype)


def resident_grid(fn, ln: Launch) -> tuple[int, int, int]:
    """A persistent launch's grid lowered to what is resident at once: for clusters the driver's
    cuOccupancyMaxActiveClusters; for plain blocks the driver's blocks per SM times the SM count."""
    from .build import max_active_clusters
    if ln.cluster > 1:
        fit = max_active_clusters(fn, ln.threads, ln.smem, ln.cluster)
        if fit is None or fit * ln.cluster >= ln.grid[0]:
            return ln.grid
        return (fit * ln.cluster, ln.grid[1], ln.grid[2])
    from .gpu import device_summary
    per_sm = driver_blocks_per_sm(fn, ln.threads, ln.smem)
    if not per_sm:
        return ln.grid
    return (min(ln.grid[0], per_sm * device_summary()["sms"]), ln.grid[1], ln.grid[2])


def driver_blocks_per_sm(fn, threads: int, dynamic_smem: int = 0) -> int | None:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for a loaded CuPy kernel; None where the driver
    cannot say."""
    try:
        from cuda.bindings import driver as cu
        err, n = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(cu.CUfunction(fn.kernel.ptr), int(threads),
                                                                 int(dynamic_smem))
        return int(n) if err == cu.CUresult.CUDA_SUCCESS else None
    except Exception:  # noqa: BLE001 - no driver or an old binding: the caller keeps its grid
        return None


# --- helpers plans share ---------------------------------------------------------------------------

def config_type(name: str, fields: str):
    """A named tuple type for a version's tunable configs, e.g. ``config_type("V7", "chunks rows
    min_blocks")``; its repr names the fields (``V7(chunks=4, rows=8, min_blocks=6)``)."""
    from collections import namedtuple
    return namedtuple(name, fields)
