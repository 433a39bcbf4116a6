"""Cold and warm compile seconds per chapter: what a reader's first and second run spend in NVRTC/nvcc.

    python3 scripts/compile_times.py [NOTEBOOK ...]     (default: the notebooks in _toc.yml)

For each notebook, the kernel sources its last GPU run compiled (the .cu files in its stamp's inputs)
are compiled in a fresh Python process with an empty compile cache (cold), then again in another fresh
process with the cache the first one filled (warm). Runs anywhere NVRTC does (no GPU needed).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COMPILE = """
import sys, time
from kernels import all_sources
from utils.build import compile_source
files = set(sys.argv[1:])
sources = [src for _, _, src in all_sources() if 'kernels/' + src.file in files]   # imports outside the timing
t0 = time.perf_counter()
for src in sources:
    compile_source(src)
print('RESULT', len(sources), time.perf_counter() - t0)
"""


def compiled_files(notebook: Path) -> list[str]:
    stamp = json.loads(notebook.read_text())["metadata"].get("book_run", {})
    return sorted(f for f in stamp.get("inputs", []) if f.endswith(".cu"))


def timed_compile(files: list[str], cache: str) -> tuple[int, float]:
    import os
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "BOOK_CACHE_DIR": cache, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", COMPILE, *files], capture_output=True, text=True, env=env, cwd=REPO)
    result = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not result:
        raise RuntimeError(f"compiling {files} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return int(result[-1][1]), float(result[-1][2])


def main(argv: list[str]) -> int:
    from utils.stamp import toc_notebooks
    notebooks = [Path(a) for a in argv] or toc_notebooks()
    print(f"{'notebook':34s} {'sources':>7s} {'cold s':>8s} {'warm s':>8s}")
    for nb in notebooks:
        files = compiled_files(nb)
        with tempfile.TemporaryDirectory() as cache:
            n, cold = timed_compile(files, cache)
            _, warm = timed_compile(files, cache)
        print(f"{nb.stem:34s} {n:7d} {cold:8.2f} {warm:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
