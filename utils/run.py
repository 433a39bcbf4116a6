"""Execute chapter notebooks in place on a GPU host, stamp them, and write their records.

    python -m utils.run --stale            # the TOC's notebooks (and chapters/ drafts) that are not fresh
    python -m utils.run --all              # every notebook in chapters/
    python -m utils.run chapters/04-memory-hierarchy.ipynb ...
    python -m utils.run --stale --budget-s 540   # stop starting notebooks after 9 minutes
    python -m utils.run --stale --allow-errors   # first run of new code: every failing cell shown
                                                 # (a notebook with any error is not stamped)
    BOOK_ARCH=sm_80 python -m utils.run --toc --scratch /tmp/ampere   # the A100 reader's pass: copies in
                                                 # /tmp/ampere, never stamped; counts tracebacks and skip lines

A host may allow only minutes per command: with ``--budget-s`` the run stops before starting a
notebook it might not finish, and says which are left, so the book executes in parts.
Exit status is non-zero if any notebook failed; a failed notebook is written with its error output
and without a stamp, so ``make check-notebooks`` names it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .paths import CHAPTERS, REPO
from .stamp import STAMP_KEY, problems, source_sha256, static_inputs, toc_notebooks


def all_notebooks() -> list[Path]:
    return sorted(CHAPTERS.glob("*.ipynb"))


def stale_notebooks() -> list[Path]:
    ordered = list(dict.fromkeys([*toc_notebooks(), *all_notebooks()]))
    return [p for p in ordered if p.exists() and problems(p)]


def first_errors(nb, limit: int = 3) -> str:
    """'cell N: Name: value' for the first few cells whose outputs hold an error."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {str(out.get('evalue'))[:200]}")
    more = f" (+{len(found) - limit} more)" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more


SKIP_LINE = "skipped: this cell needs"


def skip_lines(nb) -> int:
    """How many cells printed the one-line skip of ``%%requires`` (a feature the GPU lacks)."""
    return sum(SKIP_LINE in (out.get("text") or "") for cell in nb.cells for out in cell.get("outputs", [])
               if out.get("output_type") == "stream")


def error_outputs(nb) -> int:
    return sum(out.get("output_type") == "error" for cell in nb.cells for out in cell.get("outputs", []))


def execute(path: Path, cell_timeout: int = 600, allow_errors: bool = False,
            scratch: Path | None = None) -> tuple[bool, float, str]:
    """Run one notebook top to bottom with nbclient; stamp it on success. Returns (ok, wall_s, error).

    With allow_errors every cell runs even after one fails (a diagnostic pass on a first run: one
    call shows every failure); a notebook with any error output is not stamped. With ``scratch`` (a folder) the
    executed copy is written there, never stamped, its record goes to ``scratch/results``, and the
    message counts its error outputs and skip lines: the repository is left as it was.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from .stamp import environment

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop(STAMP_KEY, None)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.NamedTemporaryFile("w+", suffix=".inputs", delete=False) as log:
        log_path = log.name
    with tempfile.NamedTemporaryFile("w+", suffix=".compile", delete=False) as log:
        compile_log = log.name
    env_before = {k: os.environ.get(k) for k in ("BOOK_INPUTS_LOG", "BOOK_COMPILE_LOG", "BOOK_RUN_STARTED",
                                                "PYTHONPATH", "TQDM_DISABLE", "BOOK_RESULTS")}
    if scratch is not None:
        allow_errors = True
        os.environ["BOOK_RESULTS"] = str(Path(scratch) / "results")
    os.environ["BOOK_INPUTS_LOG"] = log_path
    os.environ["BOOK_COMPILE_LOG"] = compile_log
    os.environ["BOOK_RUN_STARTED"] = started
    # Progress bars are for people watching; in the stored outputs they would be frames of noise.
    os.environ["TQDM_DISABLE"] = "1"
    # The kernel must import utils/ and kernels/ whatever its working directory.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env_before["PYTHONPATH"]) if p)
    t0 = time.time()
    error = ""
    try:
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=allow_errors,
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
        error = first_errors(nb)
        ok = not error
    except CellExecutionError as e:
        ok, error = False, str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
    except Exception as e:  # kernel died, timeout
        ok, error = False, f"{type(e).__name__}: {e}"
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    wall = time.time() - t0
    raw = json.loads(nbformat.writes(nb))
    inputs = sorted(set(Path(log_path).read_text().split()) | set(static_inputs(raw)))
    os.unlink(log_path)
    compiled = compile_summary(Path(compile_log).read_text())
    os.unlink(compile_log)
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, Path(scratch) / path.name)
        errors = error_outputs(nb)
        return errors == 0, wall, (f"{errors} error output(s), {skip_lines(nb)} skip line(s), "
                                   f"compile {compiled['compile_s']} s")
    print(f"     compile: {compiled}", flush=True)
    if ok:
        stamp = {**environment(), "started": started, "wall_s": round(wall, 1), "inputs": inputs, **compiled}
        stamp["source_sha256"] = source_sha256(raw, inputs)
        nb.metadata[STAMP_KEY] = stamp
    nbformat.write(nb, path)
    return ok, wall, error


def compile_summary(log: str) -> dict:
    """Compile seconds of one execution from the BOOK_COMPILE_LOG lines utils.build appends
    (``kind<TAB>seconds<TAB>file<TAB>arch``, kind nvrtc | nvcc | disk): {compile_s, compile_builds,
    cache_load_s, cache_hits}."""
    out = {"compile_s": 0.0, "compile_builds": 0, "cache_load_s": 0.0, "cache_hits": 0}
    for line in log.splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        kind, secs = parts[0], float(parts[1])
        if kind == "disk":
            out["cache_load_s"] += secs
            out["cache_hits"] += 1
        else:
            out["compile_s"] += secs
            out["compile_builds"] += 1
    out["compile_s"] = round(out["compile_s"], 2)
    out["cache_load_s"] = round(out["cache_load_s"], 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--stale", action="store_true", help="only notebooks that are not fresh")
    ap.add_argument("--all", action="store_true", help="every notebook in chapters/")
    ap.add_argument("--toc", action="store_true", help="the notebooks in _toc.yml")
    ap.add_argument("--scratch", type=Path, default=None,
                    help="write executed copies here, unstamped (verification passes, e.g. BOOK_ARCH=sm_80)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="do not start another notebook after this many seconds")
    ap.add_argument("--expect-s", type=float, default=90,
                    help="how long a notebook may take, for the budget (default 90 s)")
    ap.add_argument("--cell-timeout", type=int, default=600, help="seconds one cell may run (default 600)")
    ap.add_argument("--allow-errors", action="store_true",
                    help="run every cell even after an error (diagnostics; such notebooks are not stamped)")
    args = ap.parse_args(argv)
    from .gpu import require_gpu
    require_gpu()
    if os.environ.get("BOOK_ARCH") and args.scratch is None:
        ap.error("BOOK_ARCH emulates another GPU: such a run must not overwrite or stamp the book's notebooks; "
                 "pass --scratch DIR")
    if args.notebooks:
        todo = [p.resolve() for p in args.notebooks]
    elif args.all:
        todo = all_notebooks()
    elif args.toc:
        todo = toc_notebooks()
    elif args.stale:
        todo = stale_notebooks()
    else:
        ap.error("name notebooks, or pass --stale, --toc or --all")
    t_start, failed, done = time.time(), [], []
    for i, p in enumerate(todo):
        spent = time.time() - t_start
        if args.budget_s is not None and spent + args.expect_s > args.budget_s:
            left = [str(q.relative_to(REPO)) for q in todo[i:]]
            print(f"budget: {spent:.0f} s spent; left for the next command: {' '.join(left)}")
            break
        ok, wall, err = execute(p, args.cell_timeout, args.allow_errors, args.scratch)
        rel = p.relative_to(REPO)
        print(f"{'ok  ' if ok else 'FAIL'} {rel} {wall:6.1f} s {err}", flush=True)
        (done if ok else failed).append(rel)
    print(f"executed {len(done)} notebook(s) in {time.time() - t_start:.0f} s; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
