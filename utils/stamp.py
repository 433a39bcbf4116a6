"""Stamps and freshness: which GPU run produced a notebook's outputs, and is it still current.

A GPU run writes notebook metadata ``book_run`` = {gpu, cc, driver, cuda_runtime, nvrtc, cupy,
python, started, wall_s, source_sha256, inputs}. ``source_sha256`` hashes the notebook's code cells
and every repository file in ``inputs``: the kernels/ sources and headers it compiled (logged at run
time), every kernels module its code imports, directly or through other kernels modules (found by
reading the imports), and every module of utils/ (the toolkit: build, bench, check, record).
On a CPU, :func:`problems` recomputes the hash: changed code, kernels or toolkit make the notebook stale.
"""
from __future__ import annotations

import ast
import hashlib
import json
import platform
from pathlib import Path

from .paths import REPO

STAMP_KEY = "book_run"
BOOK_GPUS = ("H100", "H200")   # the book's outputs must come from one of these


def code_source(nb: dict) -> str:
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return "\n\x1e\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                           for c in cells)


def source_sha256(nb: dict, inputs, root: Path = REPO) -> str:
    h = hashlib.sha256(code_source(nb).encode())
    for rel in sorted(set(inputs)):
        p = Path(root) / rel
        h.update(b"\x1f" + rel.encode() + b"\x1f")
        h.update(p.read_bytes() if p.exists() else b"<missing>")
    return h.hexdigest()


def toolkit_files(root: Path = REPO) -> list[str]:
    """Every module of utils/, relative to the repository: a notebook's results depend on all of it."""
    return sorted(str(p.relative_to(root)) for p in (Path(root) / "utils").rglob("*.py"))


def _imported_modules(code: str) -> set[str]:
    """Absolute module names a piece of Python imports (IPython magics and shell lines ignored)."""
    lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module_file(name: str, root: Path) -> Path | None:
    """kernels.softmax -> kernels/softmax.py (or kernels/softmax/__init__.py); None if not a kernels module."""
    parts = name.split(".")
    if parts[0] != "kernels" or len(parts) < 2:
        return None
    base = Path(root).joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def imported_kernel_modules(nb: dict, root: Path = REPO) -> list[str]:
    """The kernels modules a notebook's code imports, followed through the imports (absolute and
    relative) of those modules, as paths relative to the repository."""
    root = Path(root)
    todo = sorted(_imported_modules(code_source(nb)))
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = _module_file(name, root)
        if path is None or name in found:
            continue
        found[name] = path
        text = path.read_text()
        todo += sorted(_imported_modules(text))
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(base + ([node.module] if node.module else []))
                todo.append(mod)
                todo += [f"{mod}.{a.name}" for a in node.names]
    return sorted({str(p.relative_to(root)) for p in found.values()})


def static_inputs(nb: dict, root: Path = REPO) -> list[str]:
    """The inputs of a notebook that reading it reveals: utils/ and the kernels modules it imports."""
    return sorted(set(toolkit_files(root)) | set(imported_kernel_modules(nb, root)))


def environment() -> dict:
    """The GPU and software versions of this machine (needs a GPU)."""
    import cupy

    from .gpu import device_summary
    rt = cupy.cuda.runtime
    d = device_summary()

    def ver(v):
        return f"{v // 1000}.{(v % 1000) // 10}"
    try:
        nv = cupy.cuda.nvrtc.getVersion()
        nvrtc = f"{nv[0]}.{nv[1]}"
    except Exception:
        nvrtc = "unknown"
    return {"gpu": d["name"], "cc": d["cc"], "driver": ver(rt.driverGetVersion()),
            "cuda_runtime": ver(rt.runtimeGetVersion()), "nvrtc": nvrtc, "cupy": cupy.__version__,
            "python": platform.python_version()}


def stamp_line(s: dict) -> str:
    return (f"{s['gpu']} (sm {s['cc']}) · driver CUDA {s['driver']} · runtime {s['cuda_runtime']} · "
            f"NVRTC {s['nvrtc']} · CuPy {s['cupy']} · Python {s['python']}"
            + (f" · run {s['started']}" if s.get("started") else ""))


def problems(path: Path, root: Path = REPO) -> list[str]:
    """Why a notebook cannot go in the book as it is; empty when it is fresh and clean."""
    nb = json.loads(Path(path).read_text())
    out = []
    stamp = nb.get("metadata", {}).get(STAMP_KEY)
    if not stamp:
        out.append("no book_run stamp: never executed on a GPU by `make run`")
    else:
        if not any(g in stamp.get("gpu", "") for g in BOOK_GPUS):
            out.append(f"executed on {stamp.get('gpu')!r}, not on an H100/H200")
        inputs = stamp.get("inputs", [])
        if source_sha256(nb, inputs, root) != stamp.get("source_sha256"):
            out.append("stale: its code cells or kernel sources changed after its GPU run")
        else:
            uncovered = sorted(set(static_inputs(nb, root)) - set(inputs))
            if uncovered:
                out.append(f"stale: its stamp does not cover {len(uncovered)} file(s) it depends on "
                           f"({', '.join(uncovered[:3])}{', ...' if len(uncovered) > 3 else ''})")
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    errors = sum(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))
    if errors:
        out.append(f"{errors} error output(s)")
    stderr = [k for k, c in enumerate(code) for o in c.get("outputs", [])
              if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    if stderr:   # a warning or a host path in the book: silence it at its source and re-run
        out.append(f"{len(stderr)} stderr output(s) (code cells {sorted(set(stderr))})")
    counts = [c.get("execution_count") for c in code]
    if None in counts:
        out.append(f"{counts.count(None)} code cell(s) not executed")
    elif counts != list(range(1, len(counts) + 1)):
        out.append(f"execution counts out of order: {counts}")
    return out


def toc_notebooks(root: Path = REPO) -> list[Path]:
    """The notebooks listed in _toc.yml, in order."""
    import yaml
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text())
    found: list[Path] = []

    def walk(node):
        if isinstance(node, dict):
            f = node.get("file")
            if f:
                p = Path(root) / f
                if not p.suffix:  # jupyter-book entries may omit the suffix: .md or .ipynb
                    p = p.with_suffix(".md") if p.with_suffix(".md").exists() else p.with_suffix(".ipynb")
                if p.suffix == ".ipynb":
                    found.append(p)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(toc)
    return found


def main(argv=None) -> int:
    """`python -m utils.stamp [NOTEBOOK...]`: check the TOC's notebooks (or those named)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or toc_notebooks()
    bad = 0
    for p in paths:
        if not p.exists():
            print(f"{p}: listed but missing")
            bad += 1
            continue
        issues = problems(p)
        rel = p.resolve().relative_to(REPO) if p.resolve().is_relative_to(REPO) else p
        if issues:
            bad += 1
            print(f"FAIL {rel}: " + "; ".join(issues))
        else:
            s = json.loads(p.read_text())["metadata"][STAMP_KEY]
            print(f"ok   {rel}: {s['gpu']}, {s['started']}, {s['wall_s']:.0f} s")
    print(f"{len(paths) - bad} fresh, {bad} not ready" if paths else "no notebooks in _toc.yml")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
