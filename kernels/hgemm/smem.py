"""Chapter 12's shared-memory model: the tile layouts of ``hgemm_common.cuh`` (row-major and XOR-swizzled) in
Python, the bank groups each ``ldmatrix`` phase of the kernels touches under each layout, and Nsight Compute's
LDSM counters for v1 (row-major) and v2 (swizzled) beside the model.

Banks. Shared memory serves one 128-byte wavefront per cycle: 32 banks of 4 bytes, i.e. 8 groups of 16 bytes.
An ``ldmatrix`` m8n8 matrix is 8 row addresses of 16 bytes each, read in one phase; it costs one wavefront when
the 8 rows fall into 8 different groups, and as many wavefronts as the most crowded group holds otherwise.
The model counts, per phase, ``max over groups of rows in that group``; ncu's ``bank conflicts`` are the
wavefronts above one per phase.
"""
from __future__ import annotations

import sys

import numpy as np

from utils.table import Table

from . import HGEMM, V1_TILE

GROUPS = 8        # 16-byte bank groups in one 128-byte wavefront


# --- the layouts, as hgemm_common.cuh writes them ----------------------------------------------------------

def row_major(row: int, col: int, cols: int) -> int:
    """RowMajor<COLS>::at: element offset of (row, col)."""
    return row * cols + col


def swizzled(row: int, col: int, cols: int) -> int:
    """Swizzled<COLS>::at: the 16-byte chunk index XOR-ed with the row's 128-byte line number, modulo the chunks
    a line can hold."""
    chunks = cols // 8
    if cols % 8 or chunks & (chunks - 1):
        raise ValueError(f"rows of a power-of-two number of 16-byte chunks expected, got {cols} columns")
    line = 1 if chunks >= 8 else 8 // chunks
    mask = min(chunks, 8) - 1
    chunk = (col >> 3) ^ ((row // line) & mask)
    return row * cols + (chunk << 3) + (col & 7)


LAYOUTS = {"row-major": row_major, "swizzled": swizzled}


def bank_group(offset: int) -> int:
    """The 16-byte bank group of a bf16 element offset (2 bytes per element)."""
    return (offset * 2 // 16) % GROUPS


def phase_wavefronts(rows) -> int:
    """Wavefronts one ldmatrix phase needs: the most rows that share a bank group. ``rows``: the 8 offsets."""
    return int(np.bincount([bank_group(o) for o in rows], minlength=GROUPS).max())


# --- the addresses of warp_tile_mma's ldmatrix calls ------------------------------------------------------

def a_phases(layout, bk: int, wm0: int, wm: int, kk: int = 0) -> list[list[int]]:
    """The phases of one warp's A loads at k-step ``kk`` (its rows from ``wm0``): per m16 block, ldmatrix.x4 with
    lane l at row l % 16, chunk l / 16; matrix i gets lanes 8i .. 8i + 7."""
    out = []
    for mi in range(wm // 16):
        lanes = [layout(wm0 + mi * 16 + lane % 16, kk + 8 * (lane // 16), bk) for lane in range(32)]
        out += [lanes[8 * i:8 * i + 8] for i in range(4)]
    return out


def b_phases(layout, bn: int, wn0: int, wn: int, kk: int = 0) -> list[list[int]]:
    """The phases of one warp's B loads at k-step ``kk`` (its columns from ``wn0``): per n16 block,
    ldmatrix.x4.trans with lane l at k row l % 8 + 8 ((l / 8) & 1), n chunk l / 16."""
    out = []
    for nj in range(wn // 16):
        lanes = [layout(kk + lane % 8 + 8 * ((lane // 8) & 1), wn0 + nj * 16 + 8 * (lane // 16), bn)
                 for lane in range(32)]
        out += [lanes[8 * i:8 * i + 8] for i in range(4)]
    return out


def model(tile=V1_TILE) -> dict:
    """Per layout: the mean wavefronts per ldmatrix phase of A's and of B's loads over every warp and k-step of a
    block tile, over all of them, and the extra wavefronts per phase (what ncu reports as conflicts)."""
    out = {}
    for name, layout in LAYOUTS.items():
        a, b = [], []
        for warp in range((tile.bm // tile.wm) * (tile.bn // tile.wn)):
            wm0, wn0 = (warp // (tile.bn // tile.wn)) * tile.wm, (warp % (tile.bn // tile.wn)) * tile.wn
            for kk in range(0, tile.bk, 16):
                a += [phase_wavefronts(p) for p in a_phases(layout, tile.bk, wm0, tile.wm, kk)]
                b += [phase_wavefronts(p) for p in b_phases(layout, tile.bn, wn0, tile.wn, kk)]
        both = a + b
        out[name] = {"A": float(np.mean(a)), "B": float(np.mean(b)), "all": float(np.mean(both)),
                     "conflicts per phase": float(np.mean(both)) - 1.0}
    return out


MMA_FLOPS = 2 * 16 * 8 * 16      # one mma.sync.m16n8k16


def wavefronts_per_mma(tile, layout: str) -> float:
    """ldmatrix wavefronts per mma.sync in warp_tile_mma under ``layout``: per warp and k-step, WM/16 x4 loads of
    A and WN/16 x4.trans loads of B (4 phases each) feed (WM/16) (WN/8) mmas."""
    m = model(tile)[layout]
    phases = 4 * (tile.wm // 16) * m["A"] + 4 * (tile.wn // 16) * m["B"]
    return phases / ((tile.wm // 16) * (tile.wn // 8))


def smem_bound_tflops(tile, layout: str, sms: int, clock_khz: int) -> float:
    """The rate at which shared memory alone lets the mmas run: one 128-byte wavefront per SM and clock."""
    return MMA_FLOPS / wavefronts_per_mma(tile, layout) * sms * clock_khz * 1e3 / 1e12


# --- Nsight Compute -----------------------------------------------------------------------------------------

LDSM_METRICS = {
    "wavefronts": "sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",
    "conflicts": "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
    "duration (ns)": "gpu__time_duration.sum",
}
PROFILED = ("v1_mma", "v2_swizzle")
PROFILE_SHAPE = (2048, 2048, 2048)


def ncu_command(report, ncu: str = "ncu", python: str = sys.executable) -> list[str]:
    """ncu on a child process that launches v1 and v2 once each inside the profiler range: warm launches only,
    clocks left alone, only :data:`LDSM_METRICS`."""
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "-k", "regex:hgemm_v[12]_",
            "--metrics", ",".join(LDSM_METRICS.values()), "-o", str(report), "-f",
            python, "-m", "kernels.hgemm.smem", *(str(s) for s in PROFILE_SHAPE)]


def counters(timeout_s: int = 240) -> dict[str, dict] | None:
    """{label: {name: value}} for v1 and v2 from ncu; None, after one printed line saying why, where ncu is
    missing or fails."""
    from kernels.sgemm.traffic import parse_ncu_csv, run_ncu, skipped
    text = run_ncu(lambda report, exe: ncu_command(report, ncu=exe), timeout_s)
    if text is None:
        return None
    try:
        entries = parse_ncu_csv(text, LDSM_METRICS.values())
    except ValueError as e:
        skipped(f"ncu's export could not be read ({e})")
        return None
    out = {}
    for label in PROFILED:
        hits = [e for e in entries if e["kernel"].removeprefix("void ").startswith(HGEMM[label].name)]
        if len(hits) != 1:
            skipped(f"expected one profiled launch of {HGEMM[label].name}, got {len(hits)}")
            return None
        out[label] = {k: hits[0][m] for k, m in LDSM_METRICS.items() if m in hits[0]}
    return out


def conflicts_per_phase(c: dict) -> float:
    """ncu's extra wavefronts per ideal wavefront (one per ldmatrix phase)."""
    ideal = c["wavefronts"] - c["conflicts"]
    return c["conflicts"] / ideal


def bank_table(measured: dict | None, tile=V1_TILE) -> Table:
    m = model(tile)
    rows = []
    for label, layout in zip(PROFILED, LAYOUTS):
        got = measured.get(label) if measured else None
        rows.append([label, layout, f"{m[layout]['A']:.2f}", f"{m[layout]['B']:.2f}",
                     f"{m[layout]['conflicts per phase']:.2f}",
                     "n/a" if got is None else f"{conflicts_per_phase(got):.2f}",
                     "n/a" if got is None else f"{got['duration (ns)'] / 1e3:.0f}"])
    return Table(["version", "layout", "model: A wavefronts/phase", "model: B wavefronts/phase",
                  "model: conflicts/phase", "ncu: conflicts/phase", "ncu: µs"], rows,
                 caption=f"ldmatrix bank conflicts at {'x'.join(map(str, PROFILE_SHAPE))}: the model and Nsight Compute",
                 align="ll" + "r" * 5)


def main(argv=None) -> None:
    """``python -m kernels.hgemm.smem M N K``: v1 and v2 once outside the profiler range, then once inside."""
    import cupy

    from kernels.sgemm.traffic import profiled
    from utils.arrays import bf16, random_normal
    M, N, K = (int(s) for s in (sys.argv[1:] if argv is None else argv)[:3])
    a = random_normal((M, K), "bfloat16", seed=1)[0]
    b = random_normal((K, N), "bfloat16", seed=2)[0]
    c = cupy.empty((M, N), dtype=bf16())
    profiled([HGEMM[label].bind(a, b, c) for label in PROFILED])


if __name__ == "__main__":
    main()
