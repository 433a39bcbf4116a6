"""Condense an Nsight Compute run of profile_misses.sh into one text page (ncu_summary.txt).

    python scripts/tune/profile_summary.py OUT_DIR

Per profiled kernel: duration, DRAM throughput and bytes, achieved and theoretical occupancy, registers,
issue-slot use, eligible warps per scheduler and the stall reasons as cycles per issued instruction
(largest first); then, per ncu_source_*.csv, the stall samples per SASS opcode and the hottest
instructions.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

HEAD = (("gpu__time_duration.sum", "time"),
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram % of peak"),
        ("dram__bytes.sum.per_second", "dram bandwidth"),
        ("smsp__inst_executed.sum", "warp instructions"),
        ("launch__waves_per_multiprocessor", "waves"),
        ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occ %"),
        ("sm__maximum_warps_per_active_cycle_pct", "theoretical occ %"),
        ("launch__registers_per_thread", "regs"),
        ("launch__grid_size", "grid"),
        ("launch__block_size", "block"),
        ("launch__cluster_size", "cluster"),
        ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue active %"),
        ("smsp__warps_eligible.avg.per_cycle_active", "eligible warps/sched"),
        ("smsp__warps_active.avg.per_cycle_active", "active warps/sched"))
STALL = "smsp__average_warps_issue_stalled_"
STALL_TAIL = "_per_issue_active.ratio"


def read_raw(path: Path):
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return [], {}
    rows = list(csv.reader(lines[start:]))
    header, units, data = rows[0], rows[1], rows[2:]
    return [dict(zip(header, r)) for r in data], dict(zip(header, units))


def num(v: str) -> float | None:
    try:
        return float(v.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def kernel_report(r: dict, units: dict) -> list[str]:
    out = [f"== {r.get('Kernel Name', '?')[:150]}"]
    for key, label in HEAD:
        if key in r:
            out.append(f"   {label:22s} {r[key]} {units.get(key, '')}".rstrip())
    stalls = [(k[len(STALL):-len(STALL_TAIL)], num(v)) for k, v in r.items()
              if k.startswith(STALL) and k.endswith(STALL_TAIL) and "not_issued" not in k]
    stalls = sorted((s for s in stalls if s[1]), key=lambda s: -s[1])
    total = sum(v for _, v in stalls)
    out.append(f"   stall cycles per issued instruction, total {total:.2f}:")
    out += [f"      {name:24s} {v:6.2f}  ({100 * v / total:4.1f}%)" for name, v in stalls[:9]]
    return out


def _source_tables(path: Path):
    """(kernel header, column names, rows) per kernel table of an ``ncu --page source --csv`` export."""
    lines = path.read_text(errors="replace").splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith('"Kernel Name"')]
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        rows = list(csv.reader(lines[a + 1:b]))
        if rows:
            yield lines[a], rows[0], [dict(zip(rows[0], r)) for r in rows[1:] if len(r) == len(rows[0])]


def source_report(path: Path, top: int = 12) -> list[str]:
    """Stall samples per SASS opcode (with its three largest reasons) and the hottest instructions, for the
    first kernel of a source export (rows deduplicated by address)."""
    tables = list(_source_tables(path))
    if not tables:
        return [f"== {path.name}: no source table"]
    head, header, rows = tables[0]
    key = "Warp Stall Sampling (All Samples)"
    if key not in header:
        return [f"== {path.name}: columns {header[:12]}"]
    rows = list({r["Address"]: r for r in rows}.values())
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[key]) or 0 for r in rows) or 1.0
    by_op: dict = {}
    for r in rows:
        words = [w for w in r["Source"].split() if not w.startswith("@")]
        op = words[0].split(".")[0] if words else "?"
        d = by_op.setdefault(op, {"all": 0.0})
        d["all"] += num(r[key]) or 0
        for h in reasons:
            d[h] = d.get(h, 0.0) + (num(r[h]) or 0)
    out = [f"== {path.name}: {head.split(',', 1)[1][:110]}",
           f"   {len(rows)} SASS instructions, {total:.0f} stall samples; by opcode (top reasons):"]
    for op, d in sorted(by_op.items(), key=lambda kv: -kv[1]["all"])[:top]:
        rs = sorted(((h, v) for h, v in d.items() if h != "all"), key=lambda hv: -hv[1])[:3]
        out.append(f"   {op:10s} {100 * d['all'] / total:5.1f}%   "
                   + ", ".join(f"{h[6:]} {100 * v / total:.1f}%" for h, v in rs if v))
    out.append("   hottest instructions:")
    for r in sorted(rows, key=lambda r: -(num(r[key]) or 0))[:top]:
        why = max(reasons, key=lambda h: num(r[h]) or 0)
        out.append(f"   {100 * (num(r[key]) or 0) / total:5.1f}% {why[6:]:14s} {r['Source'].strip()[:80]}")
    return out


def main(out_dir: str) -> None:
    d = Path(out_dir)
    rows, units = read_raw(d / "ncu_raw.csv")
    print(f"{len(rows)} profiled kernels")
    for r in rows:
        print("\n".join(kernel_report(r, units)))
    for p in sorted(d.glob("ncu_source_*.csv")):
        print("\n".join(source_report(p)))


if __name__ == "__main__":
    main(sys.argv[1])
