"""The book's results page: every entry of the record, per GPU and chapter, drawn from results/.

Written at build time (the book's Sphinx extension calls :func:`write_results_page`), so it can
never disagree with the record it shows.
"""
from __future__ import annotations

import json
from pathlib import Path

from .paths import CHAPTERS, REPO, RESULTS
from .record import markdown_table


def _chapter_title(notebook: str) -> str:
    """The first Markdown heading of chapters/<notebook>.ipynb, or the notebook's name."""
    p = CHAPTERS / f"{notebook}.ipynb"
    if p.exists():
        for cell in json.loads(p.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for line in "".join(cell["source"]).splitlines():
                    if line.startswith("# "):
                        return line[2:].strip()
    return notebook


def _of_copy(entries: list[dict]):
    """A column: GB/s entries as a fraction of the ceiling.copy measured in the same run."""
    copy = {e["run"]: e["metric"] for e in entries if e["impl"] == "ceiling.copy"}

    def cell(e):
        if e["metric_name"] != "GB/s" or e["run"] not in copy:
            return ""
        return f"{e['metric'] / copy[e['run']]:.0%}"
    return cell


def results_markdown(root: Path = RESULTS) -> str:
    lines = ["# 实测结果汇总", "",
             "本页在构建时由 `results/` 下的运行记录生成：每一行都是某一章在 GPU 上执行时记录的一次计时，"
             "“占 copy”一栏是同一次运行里测得的设备内拷贝带宽（`ceiling.copy`）的比例。"
             "表格与各章正文里的表格出自同一份记录。", ""]
    gpus = sorted(p for p in Path(root).glob("*") if p.is_dir())
    if not gpus:
        lines.append("（还没有任何运行记录。）")
    for gpu in gpus:
        lines += [f"## {gpu.name}", ""]
        for f in sorted(gpu.glob("*.json")):
            doc = json.loads(f.read_text())
            entries = doc["entries"]
            # the heading and run stay visible; the table (up to a few hundred rows) folds
            lines += [f"### {_chapter_title(doc['notebook'])}", "",
                      f"运行 `{doc['run']}`，{len(entries)} 条记录。", "",
                      f":::{{admonition}} 展开 {len(entries)} 条记录", ":class: dropdown", "",
                      markdown_table(entries, extra={"占 copy": _of_copy(entries)}), ":::", ""]
    return "\n".join(lines) + "\n"


def write_results_page(path: Path, root: Path = RESULTS) -> None:
    text = results_markdown(root)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def profile_excerpt(kernel: str, name: str, gpu: str = "nvidia-h200", root: Path = REPO / "results") -> str:
    """The block of one kernel (its line starts with ``== ``, ``kernel`` a substring of it) from a stored
    Nsight Compute summary, results/<gpu>/profiles/<name>.txt (scripts/tune/profile_summary.py writes them).
    Read from the repository's results/ even when BOOK_RESULTS redirects the record (nbval): a profile is
    stored data that a notebook quotes, not something the run writes."""
    path = Path(root) / gpu / "profiles" / f"{name}.txt"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no stored profile of that name (scripts/tune/profile_misses.sh writes one)")
    block, found = [], False
    for line in path.read_text().splitlines():
        if line.startswith("== "):
            if found:
                break
            found = kernel in line
        if found:
            block.append(line)
    if not block:
        raise KeyError(f"{kernel!r}: no such kernel in {path.name}")
    return "\n".join(block)
