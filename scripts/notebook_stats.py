"""Per notebook: code lines (non-blank), functions defined, markdown characters. For reviews of the
chapters' shape (issue 9 counts these before and after a change).

    python3 scripts/notebook_stats.py [NOTEBOOK ...]      (default: chapters/*.ipynb)
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def stats(path: Path) -> dict:
    nb = json.loads(Path(path).read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    md = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    funcs = 0
    for src in code:
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            funcs += sum(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(ast.parse("\n".join(lines))))
        except SyntaxError:
            pass
    return {"code_lines": sum(1 for s in code for ln in s.splitlines() if ln.strip()),
            "functions": funcs, "markdown_chars": sum(len(s) for s in md)}


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(Path(__file__).resolve().parent.parent.glob("chapters/*.ipynb"))
    total = {"code_lines": 0, "functions": 0, "markdown_chars": 0}
    print(f"{'notebook':32s} {'code lines':>10s} {'functions':>9s} {'md chars':>9s}")
    for p in paths:
        s = stats(p)
        for k in total:
            total[k] += s[k]
        print(f"{p.stem:32s} {s['code_lines']:10d} {s['functions']:9d} {s['markdown_chars']:9d}")
    print(f"{'total':32s} {total['code_lines']:10d} {total['functions']:9d} {total['markdown_chars']:9d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
