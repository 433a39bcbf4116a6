"""What each SGEMM version asks of the memory system, counted from its access pattern, and Nsight Compute's
counters of the same launches beside the count (chapter 10).

The model counts, per version and shape, at each level from the SM outwards:

- **requests**: warp-level global load and store instructions. v0 and v1 issue the same ones: per active
  warp, one load of A and one of B per k, and one store of C (one load of C too when beta != 0);
- **sectors**: the 32-byte sectors those requests touch, which L1 is asked for. One warp access touches one
  sector when all its lanes read one address (a broadcast), 4 when they read 128 contiguous bytes, and 32
  when they read 4 bytes each from 32 rows K floats apart;
- **lines**: the 128-byte lines they touch. L1 serves about one line per clock per SM (128 B/clk), which is
  the time model of :func:`l1_bound_tflops`: the loads alone, nothing else counted;
- **L2 read sectors**: :attr:`Traffic.l2_read_sectors` where L1 keeps every block's A panel (its 32 rows,
  all of K) and B panel (all of K, its 32 columns) while the block's 32 warps use them, so each block
  fetches its panels once (less where two blocks on one SM share a panel; more where L1 evicts a panel
  before the block is done); :attr:`Traffic.l2_read_max_sectors`, the load sectors, where L1 keeps
  nothing. v0 and v1 share the first figure: their blocks cover the same tiles of C;
- **DRAM**: A and B read at least once (C too when beta != 0), C written once: the ledger's bytes.

Base pointers are taken as 32-byte aligned, as every fresh CuPy allocation is (256 bytes).

:func:`profile` runs Nsight Compute on the same launches in a child process (``python -m
kernels.sgemm.traffic M N K LABEL...`` is that process) and :func:`parse_ncu_csv` reads its raw CSV page;
:func:`compare_table` sets the counters beside the model.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import re
import sys

import numpy as np

from utils.arrays import ceil_div
from utils.table import Table

from . import SGEMM, TILE, flops, shape_problem

SECTOR = 32                  # bytes: what L1 and L2 move
LINE = 128                   # bytes: what L1 serves per clock per SM
WARP = 32
LABELS = ("v0_uncoalesced", "v1_coalesced")
NCU_SHAPE = (2048, 2048, 2048)   # A and B (32 MiB) fit in the H200's 60 MiB L2: DRAM reads them once


# --- counting the touched sectors and lines -----------------------------------------------------------

def touched(bases, stride: int, lanes: int, unit: int) -> int:
    """Sum over the warp accesses whose lane 0 reads the 4 bytes at ``bases[i]`` (bytes, multiples of 4) of
    the distinct ``unit``-byte blocks each touches when lane ``l < lanes`` reads at ``base + l * stride``.
    Only a base's offset inside a block matters, so the bases are counted by offset first."""
    bases = np.asarray(bases, dtype=np.int64).ravel()
    if lanes <= 0 or bases.size == 0:
        return 0
    if stride == 0:
        return int(bases.size)
    by_offset = np.bincount(bases % unit, minlength=unit)
    lane_bytes = np.arange(lanes, dtype=np.int64) * stride
    return int(sum(int(n) * len(np.unique((r + lane_bytes) // unit)) for r, n in enumerate(by_offset) if n))


def lane_groups(n: int) -> list[tuple[np.ndarray, int]]:
    """``n`` consecutive indices cut into warps of 32 lanes: [(first index of every full warp, 32), (first
    index of the tail warp, its active lanes)]."""
    full, tail = divmod(int(n), WARP)
    out = [(np.arange(full, dtype=np.int64) * WARP, WARP)] if full else []
    if tail:
        out.append((np.array([full * WARP], dtype=np.int64), tail))
    return out


@dataclasses.dataclass
class Count:
    requests: int = 0
    sectors: int = 0
    lines: int = 0

    def broadcast(self, n: int) -> None:
        """``n`` warp accesses whose active lanes all read one address: one sector and one line each."""
        self.requests += n
        self.sectors += n
        self.lines += n

    def add(self, row_bytes, col_bytes, stride: int, lanes: int, copies: int = 1) -> None:
        """Warp accesses whose lane 0 reads byte ``row_bytes[i] + col_bytes[j]`` (every i, j), each made
        ``copies`` times."""
        row_bytes, col_bytes = np.asarray(row_bytes, np.int64), np.asarray(col_bytes, np.int64)
        n = row_bytes.size * col_bytes.size
        if n == 0 or lanes == 0:
            return
        self.requests += n * copies
        bases = np.add.outer(row_bytes, col_bytes)
        self.sectors += touched(bases, stride, lanes, SECTOR) * copies
        self.lines += touched(bases, stride, lanes, LINE) * copies


def span_sectors(start, end):
    """Sectors touched by the byte ranges [start, end) (arrays; end > start)."""
    return (np.asarray(end, np.int64) - 1) // SECTOR - np.asarray(start, np.int64) // SECTOR + 1


def panel_sectors(first_row: int, rows: int, pitch: int, c0: int, c1: int) -> int:
    """Distinct sectors of columns [c0, c1) of ``rows`` rows (from ``first_row``) of a row-major fp32 matrix of
    ``pitch`` columns: one block's panel. Whole rows are one contiguous range; otherwise a row's range can
    share a sector only with the row before it (rows are >= 128 bytes apart when a tile is narrower than
    the matrix)."""
    if c0 == 0 and c1 == pitch:
        return int(span_sectors(4 * first_row * pitch, 4 * (first_row + rows) * pitch))
    r = np.arange(first_row, first_row + rows, dtype=np.int64)
    s = (4 * (r * pitch + c0)) // SECTOR
    e = (4 * (r * pitch + c1) - 1) // SECTOR
    return int((e - s + 1).sum() - np.maximum(0, e[:-1] - s[1:] + 1).sum())


# --- the model ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Traffic:
    """One version's memory traffic on one shape (see the module docstring)."""
    label: str
    shape: tuple[int, int, int]
    beta: float
    load_requests: int
    load_sectors: int
    load_lines: int
    store_requests: int
    store_sectors: int
    store_lines: int
    l2_read_sectors: int
    dram_read_min_bytes: int
    dram_write_bytes: int

    @property
    def sectors_per_request(self) -> float:
        return self.load_sectors / self.load_requests

    @property
    def lines_per_request(self) -> float:
        return self.load_lines / self.load_requests

    @property
    def l2_read_max_sectors(self) -> int:
        """L1 keeps nothing: every load sector goes to L2."""
        return self.load_sectors

    @property
    def l1_hit_rate(self) -> float:
        """The share of load sectors L1 serves when each block fetches its panels once."""
        return 1 - self.l2_read_sectors / self.load_sectors


def check_label(label: str) -> str:
    lab = SGEMM[label].label
    if lab not in LABELS:
        raise ValueError(f"the byte model covers {list(LABELS)}, not {lab!r}")
    return lab


@functools.lru_cache(maxsize=64)
def traffic(label: str, M: int, N: int, K: int, beta: float = 0.0) -> Traffic:
    """The byte model of version ``label`` (v0 or v1) on ``M x N x K`` (see the module docstring)."""
    lab = check_label(label)
    shape_problem(M, N, K, beta=beta)                  # the sizes the versions take
    k = np.arange(K, dtype=np.int64)
    loads, stores = Count(), Count()
    if lab == "v0_uncoalesced":                          # warp = one column x 32 rows
        cols = np.arange(N, dtype=np.int64)
        for g0, lanes in lane_groups(M):
            loads.add(4 * g0 * K, 4 * k, stride=4 * K, lanes=lanes, copies=N)   # A[row, k]: rows K floats apart
            loads.broadcast(g0.size * N * K)                                     # B[k, col]: one address
            c = (4 * g0 * N, 4 * cols, 4 * N, lanes)                             # C[row, col]: N floats apart
            stores.add(*c)
            if beta:
                loads.add(*c)
    else:                                                # warp = one row x 32 columns
        rows = np.arange(M, dtype=np.int64)
        for h0, lanes in lane_groups(N):
            loads.broadcast(h0.size * M * K)                                     # A[row, k]: one address
            loads.add(4 * k * N, 4 * h0, stride=4, lanes=lanes, copies=M)        # B[k, cols]: contiguous
            c = (4 * rows * N, 4 * h0, 4, lanes)                                 # C[row, cols]: contiguous
            stores.add(*c)
            if beta:
                loads.add(*c)
    return Traffic(lab, (M, N, K), float(beta), loads.requests, loads.sectors, loads.lines, stores.requests,
                   stores.sectors, stores.lines, l2_read_sectors(M, N, K, beta), 4 * (M * K + K * N) +
                   (4 * M * N if beta else 0), 4 * M * N)


def tiles(n: int) -> list[tuple[int, int]]:
    """(first index, size) of each 32-wide tile of ``n``."""
    return [(t * TILE, min(TILE, n - t * TILE)) for t in range(ceil_div(n, TILE))]


def l2_read_sectors(M: int, N: int, K: int, beta: float = 0.0) -> int:
    """Sectors L1 fetches from L2 if it keeps each block's panels while the block runs and shares none across
    blocks: every 32 x 32 tile of C reads its A panel and its B panel once (and its tile of C when beta != 0).
    The same for v0 and v1."""
    gm, gn = ceil_div(M, TILE), ceil_div(N, TILE)
    a = sum(panel_sectors(r0, rows, K, 0, K) for r0, rows in tiles(M))
    b = sum(panel_sectors(0, K, N, c0, c0 + cols) for c0, cols in tiles(N))
    c = sum(panel_sectors(r0, rows, N, c0, c0 + cols) for r0, rows in tiles(M) for c0, cols in tiles(N)) if beta else 0
    return a * gn + b * gm + c


def l1_bound_tflops(label: str, shape, sms: int, clock_hz: float, beta: float = 0.0) -> float:
    """TFLOP/s if L1 serving one 128-byte line per clock per SM were the only limit: the time of the
    version's load and store lines on ``sms`` SMs at ``clock_hz``."""
    t = traffic(label, *(int(s) for s in shape), beta)
    seconds = (t.load_lines + t.store_lines) / (sms * clock_hz)
    return flops(*shape) / seconds / 1e12


def predictions(label: str, shapes, facts=None) -> dict:
    """:func:`l1_bound_tflops` for every shape, keyed as ``Ladder.run(predict=...)`` takes them; ``facts``:
    utils.hardware.facts() (the GPU's SMs and clock; the H200's documented figures without a GPU)."""
    if facts is None:
        from utils.hardware import facts as hardware_facts
        facts = hardware_facts()
    clock_hz = facts.sm_clock_khz * 1e3
    return {(tuple(int(x) for x in s), "float32"): l1_bound_tflops(label, s, facts.sms, clock_hz) for s in shapes}


def glue_texts(shape, counters: dict | None, labels=LABELS) -> dict[str, str]:
    """The figures of :func:`comparison` as text for the chapter's prose, by glue name
    (``ncu_v0_sectors``, ...); 'n/a' where ncu did not run."""
    out = {}
    for lab, c in comparison(shape, counters, labels).items():
        short = lab.split("_")[0]
        for key, fmt in (("instructions", "{:.3f}"), ("requests", "{:.3f}"), ("sectors", "{:.3f}"),
                         ("store_sectors", "{:.3f}"), ("l2_over_model", "{:.2f}"), ("dram_over_min", "{:.2f}"),
                         ("l1_hit_pct", "{:.1f}%"), ("duration_us", "{:,.0f}")):
            out[f"ncu_{short}_{key}"] = "n/a" if c[key] is None else fmt.format(c[key])
    return out


def human(v: float | None) -> str:
    """3 significant digits with a K/M/G/T suffix ('1.34 G'); '—' for None."""
    if v is None:
        return "—"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g}"


def model_table(shape, labels=LABELS) -> Table:
    """The model of each version on one shape, one column per version."""
    ts = [traffic(lab, *shape) for lab in labels]
    rows = [
        ("load requests (warp instructions)", [human(t.load_requests) for t in ts]),
        ("load sectors (32 B)", [human(t.load_sectors) for t in ts]),
        ("sectors per load request", [f"{t.sectors_per_request:.2f}" for t in ts]),
        ("128-B lines per load request", [f"{t.lines_per_request:.2f}" for t in ts]),
        ("store sectors", [human(t.store_sectors) for t in ts]),
        ("L2 read sectors, each block's panels once", [human(t.l2_read_sectors) for t in ts]),
        ("L2 read sectors, L1 keeping nothing", [human(t.l2_read_max_sectors) for t in ts]),
        ("L1 hit rate of load sectors", [f"{t.l1_hit_rate:.1%}" for t in ts]),
        ("DRAM bytes read, at least", [human(t.dram_read_min_bytes) for t in ts]),
    ]
    return Table(["per launch", *[SGEMM[lab].label for lab in labels]], [[name, *cells] for name, cells in rows],
                 caption=f"byte model, {'x'.join(map(str, shape))}, beta = 0")


# --- Nsight Compute ------------------------------------------------------------------------------------

# What the chapter reads from ncu, by the model's name for it.
NCU_METRICS = {
    "load instructions": "smsp__sass_inst_executed_op_global_ld.sum",
    "load requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "load sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "store sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "L1 hit rate (%)": "l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct",
    "L2 read sectors": "lts__t_sectors_srcunit_tex_op_read.sum",
    "DRAM bytes read": "dram__bytes_read.sum",
    "duration (ns)": "gpu__time_duration.sum",
}
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
COUNT_UNITS = ("byte", "B", "sector", "request", "inst", "cycle", "warp", "thread")
# to ns; ncu 2025 writes the short forms ("ns"), older versions the long ones ("nsecond")
TIME_UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def unit_scale(unit: str) -> float:
    """The factor that turns a value in ncu's ``unit`` into base units (bytes, sectors, ns, %)."""
    u = unit.strip()
    if u in ("", "%") or u in COUNT_UNITS:
        return 1.0
    if u in TIME_UNITS:
        return TIME_UNITS[u]
    if u[:1] in PREFIX and u[1:] in COUNT_UNITS:
        return PREFIX[u[:1]]
    raise ValueError(f"ncu unit {unit!r} is not one the parser knows ({', '.join(COUNT_UNITS)}, "
                     f"{', '.join(TIME_UNITS)}, with K/M/G/T prefixes)")


def number(text: str) -> float | None:
    """A value of ncu's CSV ('1,234,567', '12.5') as a float; None for 'n/a' and empty cells."""
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def parse_ncu_csv(text: str, wanted=None) -> list[dict]:
    """One dict per profiled kernel of an ``ncu --page raw --csv`` export: ``'kernel'`` (its name) and every
    metric (names with ``__``; only those in ``wanted`` when given) as a float in base units. A units row
    under the header (its ID cell empty) or units in brackets after a header name are applied. ncu adds
    launch metrics of its own (``launch__block_size`` in 'block', ...): ``wanted`` leaves them out."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError('not an ncu raw CSV export: no header row starting with "ID"')
    rows = list(csv.reader(lines[start:]))
    header, units = [], {}
    for h in rows[0]:
        m = re.match(r"^(.*?)\s*\[(.*)\]$", h)
        header.append(m.group(1) if m else h)
        if m:
            units[header[-1]] = m.group(2)
    data = rows[1:]
    if data and data[0] and data[0][0] == "":
        units.update((h, u) for h, u in zip(header, data[0]) if u)
        data = data[1:]
    out = []
    for r in data:
        if len(r) != len(header):
            continue
        cells = dict(zip(header, r))
        entry = {"kernel": cells.get("Kernel Name", "")}
        for name, cell in cells.items():
            v = number(cell) if "__" in name and (wanted is None or name in wanted) else None
            if v is not None:
                entry[name] = v * unit_scale(units.get(name, ""))
        out.append(entry)
    return out


def by_label(entries: list[dict], labels=LABELS) -> dict[str, dict]:
    """The counters of each version's kernel (the last launch of that name), by label."""
    out = {}
    for lab in labels:
        name = SGEMM[lab].name
        hits = [e for e in entries if e["kernel"].split("(")[0].strip() == name]
        if not hits:
            raise ValueError(f"the ncu export has no launch of {name}; it has {sorted({e['kernel'] for e in entries})}")
        out[SGEMM[lab].label] = hits[-1]
    return out


def ncu_command(report, shape, labels=LABELS, ncu: str = "ncu", python: str = sys.executable) -> list[str]:
    """Nsight Compute on the profiled process: warm launches only (the process launches each kernel once before
    its profiler range), the card's clocks left as they are (--clock-control none), caches flushed before
    every replayed pass (ncu's default), only the metrics of :data:`NCU_METRICS`."""
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "-k", "regex:^sgemm_v",
            "--metrics", ",".join(NCU_METRICS.values()), "-o", str(report), "-f",
            python, "-m", "kernels.sgemm.traffic", *(str(int(s)) for s in shape), *labels]


def export_command(report_file, ncu: str = "ncu") -> list[str]:
    """The report's raw page as CSV, values in base units (the parser also converts ncu's scaled units)."""
    return [ncu, "-i", str(report_file), "--page", "raw", "--csv", "--print-units", "base"]


def find_ncu(env=None) -> str | None:
    """Nsight Compute's command line: on PATH, else in $CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin
    (where the CUDA toolkit puts it); None where none is executable."""
    import os
    import shutil
    env = os.environ if env is None else env
    found = shutil.which("ncu", path=env.get("PATH"))
    if found:
        return found
    dirs = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    return next((p for p in (os.path.join(d, "bin", "ncu") for d in dirs if d) if os.access(p, os.X_OK)), None)


def skipped(reason: str) -> None:
    print(f"skipped: {reason}; the table shows the model only.")


def run_ncu(command_for, timeout_s: int = 300) -> str | None:
    """Run Nsight Compute in a child process in the repository (``command_for(report, ncu)`` gives the command
    line that writes ``report``) and return the report's raw page as CSV text; None, after one printed line
    saying why, where ncu is missing or fails (no permission to the counters, a timeout)."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from utils.paths import REPO
    exe = find_ncu()
    if exe is None:
        skipped("Nsight Compute (ncu) is not on PATH nor in the CUDA toolkit's bin on this machine")
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "sgemm"
        try:
            run = subprocess.run(command_for(report, exe), cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=timeout_s, check=False)
            rep = report.with_name(report.name + ".ncu-rep")
            if run.returncode != 0 or not rep.exists():
                tail = (run.stdout + run.stderr).strip().splitlines()[-1:] or ["no output"]
                skipped(f"ncu exited with {run.returncode} ({tail[0][:160]})")
                return None
            for cmd in (export_command(rep, ncu=exe), export_command(rep, ncu=exe)[:-2]):   # then without --print-units
                export = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
                if export.returncode == 0 and '"ID"' in export.stdout:
                    break
            return export.stdout
        except subprocess.TimeoutExpired:
            skipped(f"ncu took longer than {timeout_s} s")
        return None


def profile(shape=NCU_SHAPE, labels=LABELS, timeout_s: int = 300) -> dict[str, dict] | None:
    """Nsight Compute's :data:`NCU_METRICS` for each version on ``shape`` (random normal A and B, beta = 0),
    by label; None, after one printed line saying why, where ncu is missing or fails (:func:`run_ncu`)."""
    text = run_ncu(lambda report, exe: ncu_command(report, shape, labels, ncu=exe), timeout_s)
    if text is None:
        return None
    try:
        return by_label(parse_ncu_csv(text, NCU_METRICS.values()), labels)
    except ValueError as e:
        skipped(f"ncu's export could not be read ({e})")
        return None


def measured(counters: dict | None, label: str, key: str) -> float | None:
    """Nsight Compute's value of :data:`NCU_METRICS` ``key`` for one version; None where ncu did not run."""
    c = (counters or {}).get(SGEMM[label].label)
    return None if c is None else c.get(NCU_METRICS[key])


def comparison(shape, counters: dict | None, labels=LABELS) -> dict[str, dict[str, float | None]]:
    """Per version: measured / model for the load instructions, requests, load sectors, store sectors and L2 read
    sectors (each block's panels once), the DRAM bytes read over A and B once, the L1 hit rate (%) and the
    duration (µs); None where ncu did not run."""
    out = {}
    for lab in labels:
        t = traffic(lab, *shape)

        def ratio(key, model, lab=lab):
            got = measured(counters, lab, key)
            return None if got is None else got / model
        duration = measured(counters, lab, "duration (ns)")
        out[SGEMM[lab].label] = {
            "instructions": ratio("load instructions", t.load_requests),
            "requests": ratio("load requests", t.load_requests),
            "sectors": ratio("load sectors", t.load_sectors),
            "store_sectors": ratio("store sectors", t.store_sectors),
            "l2_over_model": ratio("L2 read sectors", t.l2_read_sectors),
            "dram_over_min": ratio("DRAM bytes read", t.dram_read_min_bytes),
            "l1_hit_pct": measured(counters, lab, "L1 hit rate (%)"),
            "duration_us": None if duration is None else duration / 1e3,
        }
    return out


def compare_table(shape, counters: dict | None, labels=LABELS) -> Table:
    """The model beside Nsight Compute's counters ('—' where ncu did not run), one row per quantity."""
    rows = []
    for name in ("load requests", "load sectors", "store sectors", "L2 read sectors", "DRAM bytes read",
                 "L1 hit rate (%)"):
        row = [name]
        for lab in labels:
            t = traffic(lab, *shape)
            model = {"load requests": human(t.load_requests), "load sectors": human(t.load_sectors),
                     "store sectors": human(t.store_sectors),
                     "L2 read sectors": f"{human(t.l2_read_sectors)} (at most {human(t.l2_read_max_sectors)})",
                     "DRAM bytes read": f"{human(t.dram_read_min_bytes)} (at least)",
                     "L1 hit rate (%)": f"{t.l1_hit_rate:.1%}"}[name]
            got = measured(counters, lab, name)
            row += [model, "—" if got is None else (f"{got:.1f}%" if name == "L1 hit rate (%)" else human(got))]
        rows.append(row)
    cols = ["per launch"] + [f"{SGEMM[lab].label} {what}" for lab in labels for what in ("model", "ncu")]
    return Table(cols, rows, caption=f"byte model and Nsight Compute, {'x'.join(map(str, shape))}, beta = 0")


# --- the profiled process -------------------------------------------------------------------------------

def profiled(runs) -> None:
    """Each launcher once outside the profiler range (compile, load, first touch), then once inside it, in order,
    each waited for."""
    import cupy
    for run in runs:
        run()
    cupy.cuda.get_current_stream().synchronize()
    cupy.cuda.runtime.profilerStart()
    for run in runs:
        run()
        cupy.cuda.get_current_stream().synchronize()
    cupy.cuda.runtime.profilerStop()


def main(argv=None) -> None:
    """``python -m kernels.sgemm.traffic M N K [LABEL...]``: launch each version once outside the profiler range
    (compile, load, first touch), then once inside it, on random normal A and B (beta = 0)."""
    import cupy

    from utils.arrays import random_normal
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        raise SystemExit("usage: python -m kernels.sgemm.traffic M N K [LABEL...]")
    M, N, K = (int(s) for s in args[:3])
    labels = args[3:] or list(LABELS)
    a = random_normal((M, K), seed=1)[0]
    b = random_normal((K, N), seed=2)[0]
    c = cupy.empty((M, N), dtype=cupy.float32)
    runs = [SGEMM[lab].bind(a, b, c) for lab in labels]
    profiled(runs)


if __name__ == "__main__":
    main()
