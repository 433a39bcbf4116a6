"""The results record: every timed result of a notebook run, one JSON file per notebook and GPU.

``results/<gpu-slug>/<notebook>.json`` holds the entries of the notebook's latest run (a new run
replaces the file on its first write), so separate runs of separate notebooks merge without
conflicts; the record is the union of the files. Tables and plots are drawn from here, never typed.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from .paths import RESULTS
from .stats import Timing, gbps, tflops

REQUIRED = ("chapter", "op", "impl", "is_peer", "dtype", "shape", "ms", "metric_name", "metric", "run")


def new_run_id(notebook: str) -> str:
    return f"{notebook}@{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def make_entry(*, chapter: str, op: str, impl: str, dtype: str, shape, ms: float, run: str,
               is_peer: bool = False, nbytes: float | None = None, flops: float | None = None,
               metric_name: str | None = None, **extra) -> dict:
    """One record entry; the metric follows from the cost model (TFLOP/s if flops count, else GB/s).

    Latency experiments (launch cost, pointer chasing) use metric_name "us": the metric is the time
    itself in microseconds, lower is better.
    """
    if ms is None or not ms > 0:
        raise ValueError(f"{op}/{impl}: time must be a positive number of milliseconds, got {ms!r}")
    if metric_name is None:
        metric_name = "TFLOP/s" if flops else "GB/s"
    if metric_name == "TFLOP/s":
        if not flops:
            raise ValueError(f"{op}/{impl}: TFLOP/s needs a FLOP count")
        metric = tflops(flops, ms)
    elif metric_name == "GB/s":
        if not nbytes:
            raise ValueError(f"{op}/{impl}: GB/s needs a byte count")
        metric = gbps(nbytes, ms)
    elif metric_name == "us":
        metric = ms * 1e3
    else:
        raise ValueError(f"metric_name must be 'GB/s', 'TFLOP/s' or 'us', got {metric_name!r}")
    entry = dict(chapter=chapter, op=op, impl=impl, is_peer=bool(is_peer), dtype=str(dtype),
                 shape=[int(s) for s in shape], ms=float(ms), metric_name=metric_name,
                 metric=float(metric), run=run, bytes=nbytes, flops=flops)
    entry.update(extra)
    return entry


def validate(entry: dict) -> None:
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise ValueError(f"record entry lacks {missing}: {entry}")


class Record:
    """The entries one execution of one notebook produces.

    ``gpu`` is the GPU slug ('nvidia-h200'); ``chapter`` a short label ('04').
    """

    def __init__(self, notebook: str, *, gpu: str, chapter: str | None = None, root: Path = RESULTS):
        self.notebook = notebook
        self.chapter = chapter or notebook.split("-")[0]
        self.gpu = gpu
        self.run = new_run_id(notebook)
        self.path = Path(root) / gpu / f"{notebook}.json"
        self.entries: list[dict] = []

    def add(self, op: str, impl: str, *, dtype, shape, ms: float, **kw) -> dict:
        """Add (or replace, for the same op/impl/dtype/shape) one timed result and save the file."""
        e = make_entry(chapter=self.chapter, op=op, impl=impl, dtype=dtype, shape=shape, ms=ms,
                       run=self.run, **kw)
        key = (e["op"], e["impl"], e["dtype"], tuple(e["shape"]))
        self.entries = [x for x in self.entries
                        if (x["op"], x["impl"], x["dtype"], tuple(x["shape"])) != key]
        self.entries.append(e)
        self.save()
        return e

    def time(self, op: str, impl: str, fn, *, dtype, shape, nbytes=None, flops=None, is_peer=False,
             check=None, metric_name=None, extra: dict | None = None, **bench_kw) -> dict:
        """Benchmark ``fn`` with :func:`utils.bench.bench` and add the result.

        ``extra`` adds fields to the entry (a sweep's configuration, a derived figure).
        """
        from .bench import bench
        t: Timing = bench(fn, check=check, **bench_kw)
        return self.add(op, impl, dtype=dtype, shape=shape, ms=t.ms, nbytes=nbytes, flops=flops,
                        is_peer=is_peer, metric_name=metric_name, p10_ms=t.p10, p90_ms=t.p90, reps=t.n,
                        **(extra or {}))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"notebook": self.notebook, "gpu": self.gpu, "run": self.run, "entries": self.entries}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(self.path)

    def find(self, op: str | None = None, impl: str | None = None, **match) -> list[dict]:
        return select(self.entries, op=op, impl=impl, **match)

    def get(self, op: str, impl: str, **match) -> dict:
        hits = self.find(op, impl, **match)
        if len(hits) != 1:
            raise KeyError(f"expected one entry for {op}/{impl} {match or ''}, found {len(hits)}")
        return hits[0]

    def ratio(self, op: str, impl: str, over: str, *, over_op: str | None = None, **match) -> float:
        """metric(impl) / metric(over), both from this run (same op and shape unless over_op is given)."""
        a = self.get(op, impl, **match)
        b = self.get(over_op or op, over, **({} if over_op else match))
        return a["metric"] / b["metric"]


def select(entries, *, op=None, impl=None, **match) -> list[dict]:
    out = []
    for e in entries:
        if op is not None and e["op"] != op:
            continue
        if impl is not None and e["impl"] != impl:
            continue
        if any((list(v) if isinstance(v, tuple) else v) != e.get(k) for k, v in match.items()):
            continue
        out.append(e)
    return out


def load(gpu: str, notebook: str | None = None, root: Path = RESULTS) -> list[dict]:
    """Entries of the record for one GPU: one notebook's, or the union of all notebooks'."""
    folder = Path(root) / gpu
    files = [folder / f"{notebook}.json"] if notebook else sorted(folder.glob("*.json"))
    entries = []
    for f in files:
        if f.exists():
            doc = json.loads(f.read_text())
            for e in doc["entries"]:
                validate(e)
            entries.extend(doc["entries"])
    return entries


def markdown_table(entries, columns=("op", "impl", "dtype", "shape", "ms", "metric", "metric_name"),
                   extra: dict | None = None) -> str:
    """A Markdown table of entries (rendered by Jupyter and by the book)."""
    extra = extra or {}
    cols = list(columns) + list(extra)
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    rows = []
    for e in entries:
        cells = []
        for c in columns:
            v = e.get(c)
            if c == "shape":
                v = "×".join(str(s) for s in v)
            elif isinstance(v, float):
                v = f"{v:.4g}"
            elif c == "impl" and e.get("is_peer"):
                v = f"**{v}** (peer)"
            cells.append(str(v))
        cells += [str(f(e)) for f in extra.values()]
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows)
