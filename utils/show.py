"""Show kernel source in notebooks and in the built book, straight from kernels/ files.

A snippet is the text between ``// [[snippet: NAME]]`` and ``// [[/snippet]]`` in a .cu file. It is
displayed as a Markdown code block tagged ``cuda``, which JupyterLab and the book both highlight.
"""
from __future__ import annotations

import re
import textwrap

from .paths import KERNELS

_OPEN = re.compile(r"^\s*//\s*\[\[snippet:\s*([\w.-]+)\s*\]\]\s*$")
_CLOSE = re.compile(r"^\s*//\s*\[\[/snippet\]\]\s*$")


class SnippetError(KeyError):
    pass


def snippets(text: str) -> dict[str, str]:
    """All snippets in a source text, by name. Markers may nest; marker lines are left out."""
    out: dict[str, list[str]] = {}
    stack: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _OPEN.match(line)
        if m:
            name = m.group(1)
            if name in out:
                raise SnippetError(f"snippet {name!r} opened twice (line {lineno})")
            out[name] = []
            stack.append(name)
            continue
        if _CLOSE.match(line):
            if not stack:
                raise SnippetError(f"[[/snippet]] without an open snippet (line {lineno})")
            stack.pop()
            continue
        for name in stack:
            out[name].append(line)
    if stack:
        raise SnippetError(f"snippet {stack[-1]!r} is never closed")
    return {k: textwrap.dedent("\n".join(v)).strip("\n") for k, v in out.items()}


def snippet(file: str, name: str) -> str:
    text = (KERNELS / file).read_text()
    found = snippets(text)
    if name not in found:
        raise SnippetError(f"no snippet {name!r} in kernels/{file}; it has {sorted(found)}")
    return found[name]


def _display_code(code: str, caption: str, lang: str = "cuda"):
    from IPython.display import Markdown, display
    display(Markdown(f"`{caption}`\n\n```{lang}\n{code}\n```"))


def show(file: str, name: str | None = None) -> None:
    """Display one snippet (or the whole file) of kernels/<file> with CUDA highlighting."""
    code = snippet(file, name) if name else (KERNELS / file).read_text()
    _display_code(code, f"kernels/{file}" + (f" · {name}" if name else ""))


def show_ptxas(report: dict, kernels=None) -> None:
    """A table of registers, shared memory and spills from a ptxas report (utils.build)."""
    from IPython.display import Markdown, display
    rows = ["| kernel | registers | smem (B) | stack (B) | spill st/ld (B) |", "|---|---|---|---|---|"]
    for k, r in report.items():
        if kernels and k not in kernels:
            continue
        rows.append(f"| `{k}` | {r['registers']} | {r['smem_bytes']} | {r['stack_bytes']} | "
                    f"{r['spill_stores']}/{r['spill_loads']} |")
    display(Markdown("\n".join(rows)))


def snippet_diff(file_a: str, name_a: str | None, file_b: str, name_b: str | None, context: int = 3) -> str:
    """A unified diff from one snippet (or whole file, name None) of kernels/ to another."""
    import difflib

    def text(file, name):
        return snippet(file, name) if name else (KERNELS / file).read_text()

    a, b = text(file_a, name_a).splitlines(), text(file_b, name_b).splitlines()
    label_a = f"kernels/{file_a}" + (f" · {name_a}" if name_a else "")
    label_b = f"kernels/{file_b}" + (f" · {name_b}" if name_b else "")
    return "\n".join(difflib.unified_diff(a, b, label_a, label_b, n=context, lineterm=""))


def show_diff(file_a: str, name_a: str | None, file_b: str, name_b: str | None, context: int = 3) -> None:
    """Display what a version changes against its parent ("same as v3, but ..."), as a highlighted diff."""
    diff = snippet_diff(file_a, name_a, file_b, name_b, context)
    if not diff:
        raise SnippetError(f"kernels/{file_a} · {name_a} and kernels/{file_b} · {name_b} are identical")
    _display_code(diff, f"{name_b or file_b} against {name_a or file_a}", lang="diff")
