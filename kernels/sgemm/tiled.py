"""Chapter 11's experiments on the tiled SGEMM ladder (v2-v9): the per-version model the predictions come from,
the bank-conflict counters of v5 and v6 under Nsight Compute, v9's tuning table carried in the record, and the
tables the chapter shows (odd shapes, the bar, the LLM shapes).

The model counts, per thread and per step k of the inner loop, what the source asks for (the ``COUNTS`` table,
read off each .cu file): FMAs, shared-memory words loaded and shared-load instructions. One SM does 128 FMAs per
clock (4 schedulers x 32 lanes) and shared memory serves one 128-byte wavefront, 32 words, per clock; a
broadcast (every lane one address) costs a wavefront that delivers one word, and an n-way bank conflict costs
n wavefronts. So:

- the shared-memory bound is ``32 / (128 * wavefront words per FMA)`` of the FMA ceiling;
- the issue bound is ``FMA / (FMA + shared-load instructions)``: each scheduler issues one instruction per
  clock, and every shared load takes a slot an FFMA could have used (address arithmetic, barriers and global
  loads are left out, so this too is an upper bound);
- the L2 bytes per FMA ``4 (BM + BN) / (BM BN)`` of a BM x BN block tile say how much the block reuses each
  element it fetches.

:func:`bound_tflops` is the smaller of the two bounds times the FMA ceiling: what a version could reach if
nothing but its inner loop counted. Registers and shared memory per instance come from NVRTC's ptxas report
(no GPU needed) and give the resident warps per SM (utils.occupancy).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from utils.ladder import shape_name
from utils.table import Table

from . import SGEMM, TUNED, V6_CONFIGS, V9_CONFIGS, V9_DEFAULT, swept, threads_of
from .ledger import DECODE, MLP_UP, QKV

SQUARE_2K, BAR_SHAPE, SQUARE_8K = (2048,) * 3, (4096,) * 3, (8192,) * 3
RUNG_SHAPES = [SQUARE_2K, BAR_SHAPE]                        # v1-v8: two squares, a few seconds in all
FINAL_SHAPES = [SQUARE_2K, BAR_SHAPE, SQUARE_8K, QKV, MLP_UP, DECODE[0], DECODE[-1]]   # v9 and the peers
LLM_SHAPES = [QKV, MLP_UP, DECODE[0], DECODE[-1]]
TUNE_SHAPE = BAR_SHAPE
BAR, GOAL = 0.80, 0.95                                      # of cuBLAS fp32 at 4096^3 (issue 11)
TILED = [lab for lab in SGEMM if SGEMM[lab].number >= 2]
PAD_IMPL = "v6_swizzle[pad]"


@dataclasses.dataclass(frozen=True)
class Counts:
    """Per thread, per step k of the inner loop (read off the version's .cu)."""
    fma: int               # FFMAs
    words: int             # shared-memory words loaded
    loads: int             # shared-load instructions (an LDS.128 is one instruction, four words)
    broadcast: int         # of the words, those every lane of the warp reads at one address
    conflict: float        # average n-way bank conflict of the loads that are not broadcasts


COUNTS = {
    # As[ty][k] (one address per warp) and Bs[k][tx] (32 consecutive floats)
    "v2_smem_tile": Counts(fma=1, words=2, loads=2, broadcast=1, conflict=1),
    # 8 values of As down one column (a warp shares its rows: broadcasts) and one of Bs, for 8 FMAs
    "v3_reg1d": Counts(fma=8, words=9, loads=9, broadcast=8, conflict=1),
    # 8 of As and 8 of Bs as 4-byte loads, an 8 x 8 outer product; a warp covers 2 rows of threads: As is
    # read at 2 addresses 64 floats apart (one bank, 2-way), Bs at 16 addresses 8 floats apart (4-way)
    "v4_reg2d": Counts(fma=64, words=16, loads=16, broadcast=0, conflict=3),
    # the same 16 words as 4 LDS.128; As is transposed (contiguous), Bs's LDS.128 still 2-way (v06's header)
    "v5_vec4": Counts(fma=64, words=16, loads=4, broadcast=0, conflict=1.5),   # Bs's half 2-way: 1.5 on average
    # the same loads, conflict-free (As padded or swizzled, Bs in column groups of 4)
    "v6_swizzle": Counts(fma=64, words=16, loads=4, broadcast=0, conflict=1),
    "v7_double_buffer": Counts(fma=64, words=16, loads=4, broadcast=0, conflict=1),
    "v8_warptile": Counts(fma=64, words=16, loads=4, broadcast=0, conflict=1),
    "v9_tuned": Counts(fma=64, words=16, loads=4, broadcast=0, conflict=1),
}
FMA_PER_CLK = 128          # per SM: 4 schedulers x 32 FP32 lanes
WORDS_PER_CLK = 32         # per SM: 32 banks x 4 bytes, one wavefront


def wavefront_words_per_fma(label: str) -> float:
    """Shared-memory words' worth of wavefronts per FMA: a broadcast costs a whole wavefront (32 words' worth)
    for its one word, spread over the warp's 32 lanes that is one word per lane as a plain load; conflicts
    multiply the rest."""
    c = COUNTS[SGEMM[label].label]
    return (c.broadcast + (c.words - c.broadcast) * c.conflict) / c.fma


def smem_bound(label: str) -> float:
    """Fraction of the FMA ceiling shared memory allows (at most 1)."""
    return min(1.0, WORDS_PER_CLK / (FMA_PER_CLK * wavefront_words_per_fma(label)))


def issue_bound(label: str) -> float:
    """Fraction of the issue slots left to FFMAs when every shared load takes one."""
    c = COUNTS[SGEMM[label].label]
    return c.fma / (c.fma + c.loads)


def l2_bytes_per_fma(label: str, config=None) -> float:
    """Bytes a block fetches from L2 per FMA it does: (BM + BN) x BK floats for BM x BN x BK FMAs."""
    c = config or SGEMM[label].default(None)
    return 4 * (c.bm + c.bn) / (c.bm * c.bn)


def bound_tflops(label: str, fma_tflops: float) -> float:
    """The model's ceiling for a version: the smaller of the shared-memory and issue bounds, times the FMA
    ceiling (TFLOP/s)."""
    return fma_tflops * min(smem_bound(label), issue_bound(label))


def predictions(label: str, shapes, fma_tflops: float) -> dict:
    """:func:`bound_tflops` on every shape, keyed as ``Ladder.run(predict=...)`` takes them."""
    v = bound_tflops(label, fma_tflops)
    return {(tuple(int(x) for x in s), "float32"): v for s in shapes}


# --- resources from the ptxas report ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Resources:
    kernel: str
    threads: int
    registers: int
    smem: int
    blocks: int            # resident blocks per SM
    warps: int             # resident warps per SM
    limiter: str


def resources(label: str, config=None, vec: bool = True, facts=None) -> Resources:
    """Registers and static shared memory of one instance (NVRTC's ptxas report, no GPU needed), and the
    blocks and warps an SM holds (utils.occupancy)."""
    from utils.build import compile_source
    from utils.occupancy import from_function

    from . import shape_problem
    v = SGEMM[label]
    c = config or v.default(None)
    # the instance the plan picks at 4096^3 (v9: the one without bounds tests), or with N % 4 != 0 the 4-byte one
    (ln,) = v.launches(shape_problem(*BAR_SHAPE) if vec else shape_problem(64, 63, 64), c)
    comp = compile_source(v.source)
    rep = comp.report[comp.symbols[ln.kernel]]
    occ = from_function(rep, threads_of(c), 0, facts)
    return Resources(ln.kernel, threads_of(c), int(rep["registers"]), int(rep["smem_bytes"]), occ.blocks,
                     occ.warps, occ.limiter)


def model_table(labels=None, fma_tflops: float | None = None, facts=None) -> Table:
    """Per version: tiles, threads, registers, shared memory, resident warps, L2 bytes and shared-memory
    wavefront words per FMA, the two bounds and (with ``fma_tflops``) the model's TFLOP/s."""
    rows = []
    for lab in labels or TILED:
        c = SGEMM[lab].default(None)
        r = resources(lab, c, facts=facts)
        tm = getattr(c, "tm", None)
        per_thread = f"{tm} x {c.tn}" if tm else "8 x 8"
        row = [lab, f"{c.bm}x{c.bn}x{c.bk}", per_thread, r.threads, r.registers, f"{r.smem:,}", r.warps,
               f"{l2_bytes_per_fma(lab, c):.4f}", f"{wavefront_words_per_fma(lab):.3f}", f"{smem_bound(lab):.0%}",
               f"{issue_bound(lab):.0%}"]
        if fma_tflops:
            row.append(f"{bound_tflops(lab, fma_tflops):.1f}")
        rows.append(row)
    cols = ["version", "block tile", "per thread", "threads", "registers", "smem B", "warps/SM", "L2 B/FMA",
            "smem words/FMA", "smem bound", "issue bound"] + (["bound TFLOP/s"] if fma_tflops else [])
    return Table(cols, rows, caption="the inner loop's model, per version (registers and smem: ptxas, sm_90)",
                 align="l" + "r" * (len(cols) - 1))


# --- Nsight Compute: bank conflicts (v5, v6) and the issue slots (v8, v9) --------------------------------------

BANK_METRICS = {
    "ld conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "st conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "ld wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "st wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "duration (ns)": "gpu__time_duration.sum",
}
ISSUE_METRICS = {
    "instructions": "smsp__inst_executed.sum",                              # warp instructions, all pipes
    "FMA pipe": "smsp__inst_executed_pipe_fma.sum",                         # of them, on the FMA pipe (FFMA)
    "issue busy (%)": "smsp__issue_active.avg.pct_of_peak_sustained_active",  # cycles a scheduler issued
    "eligible warps": "smsp__warps_eligible.avg.per_cycle_active",          # per scheduler and cycle
    "duration (ns)": "gpu__time_duration.sum",
}
V8_ORDER = next(c for c in V9_CONFIGS if c.group_m == 1)   # v9 on v8's tiles and tile order: the iterator alone


@dataclasses.dataclass(frozen=True)
class Profile:
    """One ncu experiment: ``cases`` launched in this order on ``shape``, ``metrics`` read for each."""
    shape: tuple
    cases: tuple
    metrics: dict
    kernels: str            # ncu's -k filter

    def case(self, name: str):
        """(label, config) of a case: ``"v5_vec4"``, ``"v6_swizzle[pad]"``, ``"v9_tuned[v8 order]"``."""
        if "[" not in name:
            return name, None
        label, variant = name.rstrip("]").split("[")
        if label == "v6_swizzle":
            return label, next(c for c in V6_CONFIGS if c.layout == variant)
        if name == ITER_IMPL:
            return label, V8_ORDER
        raise ValueError(f"unknown profiling case {name!r}")


BANK_CASES = ("v5_vec4", "v6_swizzle[pad]", "v6_swizzle[xor]")
ITER_IMPL = "v9_tuned[v8 order]"
PROFILES = {
    "banks": Profile(SQUARE_2K, BANK_CASES, BANK_METRICS, "regex:sgemm_v[56]_"),
    "issue": Profile(BAR_SHAPE, ("v8_warptile", ITER_IMPL), ISSUE_METRICS, "regex:sgemm_v[89]_"),
}


def ncu_command(profile: str, report, ncu: str = "ncu", python: str = sys.executable) -> list[str]:
    """ncu on the child process: warm launches only, clocks left alone, only the profile's metrics."""
    p = PROFILES[profile]
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "-k", p.kernels,
            "--metrics", ",".join(p.metrics.values()), "-o", str(report), "-f",
            python, "-m", "kernels.sgemm.tiled", profile, *(str(int(s)) for s in p.shape)]


def counters(profile: str, timeout_s: int = 240) -> dict[str, dict] | None:
    """Nsight Compute's metrics of ``PROFILES[profile]`` for each of its cases (in launch order); None, after
    one printed line saying why, where ncu is missing or fails (traffic.run_ncu)."""
    from .traffic import parse_ncu_csv, run_ncu, skipped
    text = run_ncu(lambda report, exe: ncu_command(profile, report, ncu=exe), timeout_s)
    if text is None:
        return None
    try:
        return by_case(parse_ncu_csv(text, PROFILES[profile].metrics.values()), profile)
    except ValueError as e:
        skipped(f"ncu's export could not be read ({e})")
        return None


def bank_counters(timeout_s: int = 240) -> dict[str, dict] | None:
    """v5 and both layouts of v6 on :data:`SQUARE_2K`: shared-memory wavefronts and conflicts."""
    return counters("banks", timeout_s)


def issue_counters(timeout_s: int = 240) -> dict[str, dict] | None:
    """v8 and v9 on v8's tiles and order at 4096^3: instructions, issue slots, eligible warps."""
    return counters("issue", timeout_s)


def by_case(entries: list[dict], profile: str = "banks") -> dict[str, dict]:
    """The profiled launches, in launch order, by case name."""
    p = PROFILES[profile]
    prefixes = tuple(sorted({"sgemm_" + p.case(c)[0][:2] + "_" for c in p.cases}))
    hits = [e for e in entries if e["kernel"].removeprefix("void ").startswith(prefixes)]
    if len(hits) != len(p.cases):
        raise ValueError(f"expected {len(p.cases)} launches of {', '.join(p.cases)}, got {len(hits)}")
    return dict(zip(p.cases, hits))


def bank_model(name: str) -> tuple[float, float]:
    """(extra load wavefronts per shared-load wavefront, extra store wavefronts per store wavefront) the model
    expects: v5's Bs reads and A stores are 2-way (half its B reads, all its A stores), v6's none."""
    if name == "v5_vec4":
        # loads, per k and warp: 2 LDS.128 of As (one address per 8-lane phase: 4 wavefronts each) and 2 of Bs
        # (2-way in every phase: 8 wavefronts each, 4 of them conflicts): 8 of 24. A stores: 2-way, 1 of 2.
        return 1 / 3, 0.5
    return 0.0, 0.0


def ncu_us(c: dict | None) -> str:
    d = None if c is None else c.get(BANK_METRICS["duration (ns)"])
    return "—" if d is None else f"{d / 1e3:,.0f}"


def bank_table(counters: dict | None) -> Table:
    """Conflicts per wavefront, loads and stores, per case: the model and ncu ('—' without ncu)."""
    rows = []
    for name in BANK_CASES:
        ld, st = bank_model(name)
        c = (counters or {}).get(name)

        def ratio(kind, c=c):
            if c is None:
                return "—"
            w = c.get(BANK_METRICS[f"{kind} wavefronts"])
            n = c.get(BANK_METRICS[f"{kind} conflicts"])
            return "—" if not w or n is None else f"{n / w:.3f}"
        rows.append([name, f"{ld:.2f}", ratio("ld"), f"{st:.2f}", ratio("st"), ncu_us(c)])
    return Table(["case", "load conflicts / wavefront, model", "ncu", "store conflicts / wavefront, model", "ncu",
                  "ncu µs"], rows, caption=f"shared-memory bank conflicts, {shape_name(SQUARE_2K)}",
                 align="l" + "r" * 5)


def conflict_ratio(counters: dict, name: str, kind: str = "ld") -> float:
    c = counters[name]
    return c[BANK_METRICS[f"{kind} conflicts"]] / c[BANK_METRICS[f"{kind} wavefronts"]]


def issue_table(counters: dict | None) -> Table:
    """v8 against v9 on the same tiles and order: what the scheduler saw ('—' without ncu)."""
    m = ISSUE_METRICS
    rows = []
    for name in PROFILES["issue"].cases:
        c = (counters or {}).get(name)

        def cell(key, fmt, c=c):
            v = None if c is None else c.get(m[key])
            return "—" if v is None else fmt.format(v)
        share = "—" if c is None else f"{c[m['FMA pipe']] / c[m['instructions']]:.1%}"
        rows.append([name, cell("instructions", "{:,.0f}"), share, cell("issue busy (%)", "{:.1f}%"),
                     cell("eligible warps", "{:.2f}"), ncu_us(c)])
    return Table(["kernel", "warp instructions", "FMA pipe share", "issue slots busy", "eligible warps / scheduler",
                  "ncu µs"], rows, caption=f"v8 and v9 under Nsight Compute, {shape_name(BAR_SHAPE)}",
                 align="l" + "r" * 5)


def issue_ratios(counters: dict) -> dict[str, float]:
    """v9 over v8: instructions, issue-busy fraction and duration."""
    m = ISSUE_METRICS
    v8, v9 = (counters[n] for n in PROFILES["issue"].cases)
    return {k: v9[m[k]] / v8[m[k]] for k in ("instructions", "issue busy (%)", "duration (ns)")}


def issue_texts(counters: dict | None) -> dict[str, str]:
    """The figures of :func:`issue_table` for the chapter's prose, by glue name; 'n/a' where ncu did not run."""
    m = ISSUE_METRICS
    names = dict(zip(("v8", "v9"), PROFILES["issue"].cases))
    out = {}
    for short, name in names.items():
        c = (counters or {}).get(name)
        out[f"issue_{short}_busy"] = "n/a" if c is None else f"{c[m['issue busy (%)']]:.0f}%"
        out[f"issue_{short}_eligible"] = "n/a" if c is None else f"{c[m['eligible warps']]:.2f}"
    r = issue_ratios(counters) if counters else None
    out["issue_fewer_inst"] = "n/a" if r is None else f"{1 - r['instructions']:.1%}"
    out["issue_shorter"] = "n/a" if r is None else f"{1 - r['duration (ns)']:.1%}"
    return out


def main(argv=None) -> None:
    """``python -m kernels.sgemm.tiled PROFILE M N K``: each case of ``PROFILES[PROFILE]`` once outside the
    profiler range, then once inside it, in order."""
    import cupy

    from utils.arrays import random_normal

    from .traffic import profiled
    args = list(sys.argv[1:] if argv is None else argv)
    p = PROFILES[args[0]]
    M, N, K = (int(s) for s in args[1:4])
    a = random_normal((M, K), seed=1)[0]
    b = random_normal((K, N), seed=2)[0]
    c = cupy.empty((M, N), dtype=cupy.float32)
    runs = []
    for name in p.cases:
        label, config = p.case(name)
        runs.append(SGEMM[label].bind(a, b, c, config=config))
    profiled(runs)


# --- v9's tuning table, carried in the record ----------------------------------------------------------------

def stored_sweep(rec, shape=TUNE_SHAPE) -> list[dict]:
    """v9's swept entries on ``shape`` from this GPU's stored record of the chapter (the file ``rec`` is about to
    replace; else the repository's results/), fastest first. Call it before the run's first write."""
    from utils.paths import REPO
    from utils.record import load
    for root in (Path(rec.path).parents[1], REPO / "results"):
        try:
            entries = load(rec.gpu, rec.notebook, root=root)
        except (FileNotFoundError, LookupError, ValueError):
            continue
        hits = [e for _, e in swept(entries, shape)]
        if hits:
            return hits
    return []


def sweep_or_carry(rec, shape=TUNE_SHAPE, stored: list[dict] | None = None) -> str:
    """v9's table on ``shape``: the ``stored`` entries (:func:`stored_sweep`) copied into this run's record, each
    with the run it came from; a sweep (:func:`kernels.sgemm.tune`, with its progress bar) when there are none.
    Returns 'carried' or 'swept'."""
    from . import tune
    if stored:
        for e in stored:
            keep = {k: v for k, v in e.items() if k not in ("chapter", "op", "impl", "dtype", "shape", "ms", "run",
                                                             "metric", "metric_name", "bytes", "flops")}
            keep.setdefault("from_run", e.get("run"))
            rec.add("sgemm", e["impl"], dtype="float32", shape=e["shape"], ms=e["ms"], flops=e["flops"],
                    nbytes=e.get("bytes"), **keep)
        return "carried"
    tune(rec, [shape])
    return "swept"


def knobs(c) -> list:
    return [f"{c.bm}x{c.bn}x{c.bk}", f"{c.wm}x{c.wn}", c.wniter, c.min_blocks, c.group_m]


KNOBS = ["block tile", "warp tile", "wniter", "min blocks", "group m"]


def config_table(configs=V9_CONFIGS, facts=None) -> Table:
    """v9's space before any timing: each config's knobs, threads, registers and shared memory (ptxas, no GPU)
    and the blocks and warps an SM holds, with what limits them."""
    rows = []
    for c in configs:
        r = resources("v9_tuned", c, facts=facts)
        rows.append([*knobs(c), r.threads, r.registers, f"{r.smem:,}", r.blocks, r.warps, r.limiter,
                     "default" if c == V9_DEFAULT else ""])
    return Table([*KNOBS, "threads", "registers", "smem B", "blocks/SM", "warps/SM", "limited by", ""], rows,
                 caption="v9's configs: resources from the ptxas report", align="l" + "r" * 9 + "ll")


def tuning_table(rec, shape=TUNE_SHAPE) -> Table:
    """Every recorded v9 config on ``shape``, fastest first: its knobs, resident warps, TFLOP/s, its fraction of
    the fastest, and the run it was timed in."""
    hits = swept(rec, shape)
    if not hits:
        raise LookupError(f"no v9 config recorded on {shape_name(shape)}: run sweep_or_carry first")
    best = hits[0][1]["metric"]
    rows = []
    for c, e in hits:
        rows.append([*knobs(c), resources("v9_tuned", c).warps, f"{e['metric']:.1f}", f"{e['metric'] / best:.0%}",
                     e.get("from_run", e.get("run", "")).split("@")[-1]])
    return Table([*KNOBS, "warps/SM", "TFLOP/s", "of best", "timed"], rows,
                 caption=f"v9's configs on {shape_name(shape)}, fastest first", align="l" + "r" * 7 + "l")


# --- the tables the chapter reads --------------------------------------------------------------------------

def bar_table(lad, labels, shape=BAR_SHAPE, peer: str = "cupy.matmul") -> Table:
    """Each version's TFLOP/s and fraction of ``peer`` on ``shape``, against the bar and the goal."""
    from .ladders import tflops
    ref = tflops(lad, peer, shape)
    rows = []
    for lab in labels:
        e = lad.entry(lab, shape, "float32")
        if e is None:
            continue
        f = e["metric"] / ref
        rows.append([lab, f"{e['metric']:.1f}", f"{f:.0%}", "yes" if f >= BAR else "no", "yes" if f >= GOAL else "no"])
    return Table(["version", "TFLOP/s", f"of {peer}", f">= {BAR:.2f}x (bar)", f">= {GOAL:.2f}x (goal)"], rows,
                 caption=f"{shape_name(shape)}, {peer} {ref:.1f} TFLOP/s, one run", align="l" + "r" * 4)


def llm_table(lad, label: str = TUNED, shapes=LLM_SHAPES, peer: str = "cupy.matmul") -> Table:
    """Per LLM shape: µs and TFLOP/s of ``label`` and of ``peer``, and the ratio."""
    from .ledger import SHAPES as NAMED
    name_of = {s: n for n, s in NAMED.items()}
    rows = []
    for s in shapes:
        a, b = lad.entry(label, s, "float32"), lad.entry(peer, s, "float32")
        if a is None or b is None:
            continue
        rows.append([name_of.get(tuple(s), ""), shape_name(s), f"{a['ms'] * 1e3:,.0f}", f"{b['ms'] * 1e3:,.0f}",
                     f"{a['metric']:.3g}", f"{b['metric']:.3g}", f"{a['metric'] / b['metric']:.2f}"])
    return Table(["shape", "M x N x K", f"{label} µs", f"{peer} µs", f"{label} TFLOP/s", f"{peer} TFLOP/s",
                  "ratio"], rows, caption="the LLM shapes, one run", align="ll" + "r" * 5)


def odd_table(lad, labels) -> Table:
    """Run each version on fresh inputs of every odd shape of the ladder, C poisoned (``Ladder.check`` raises
    on the first wrong element), and list which instance each shape takes: the 16-byte path or the 4-byte one."""
    from . import shape_problem, vec_ok
    rows = []
    for s in lad.odd_shapes:
        p = shape_problem(*s)
        rows.append([shape_name(s), "16-byte" if vec_ok(p) else "4-byte"])
    for lab in labels:
        for s, row in zip(lad.odd_shapes, rows):
            lad.check(lab, [s])
            row.append("ok")
    return Table(["M x N x K", "v5-v9 path", *labels], rows,
                 caption="checked against float64 on fresh inputs, C poisoned with NaN", align="ll" + "c" * len(labels))


def time_variant(lad, label: str, config, impl: str, shapes=RUNG_SHAPES) -> list[dict]:
    """A version with a config other than its default, checked on the odd shapes and timed beside the rest as
    its own impl (the table and the plots show it next to the default)."""
    for s in lad.odd_shapes:
        lad.check(label, [s], config=config)
    return lad.time(label, shapes, config=config, impl=impl)


def time_pad(lad, shapes=RUNG_SHAPES) -> list[dict]:
    """v6 with the padded layout (impl ``v6_swizzle[pad]``)."""
    return time_variant(lad, "v6_swizzle", next(c for c in V6_CONFIGS if c.layout == "pad"), PAD_IMPL, shapes)


def time_iterator(lad, shapes=RUNG_SHAPES) -> list[dict]:
    """v9 on v8's tiles and tile order (impl ``v9_tuned[v8 order]``): v8 with untested loads (iterator.cuh), nothing else."""
    return time_variant(lad, "v9_tuned", V8_ORDER, ITER_IMPL, shapes)


if __name__ == "__main__":
    main()
