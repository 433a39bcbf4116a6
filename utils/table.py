"""Tables for notebooks and the built book: one object that renders as an HTML table (the book, JupyterLab)
and as Markdown (plain-text viewers), never as a paragraph of pipe characters."""
from __future__ import annotations

import html


class Table:
    """Rows of cells under named columns. Cells are shown as given (format numbers before)."""

    def __init__(self, columns, rows, caption: str = "", align: str | None = None):
        self.columns = [str(c) for c in columns]
        self.rows = [[("" if c is None else str(c)) for c in r] for r in rows]
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(f"row {r} has {len(r)} cells, expected {len(self.columns)} ({self.columns})")
        self.caption = caption
        # Default alignment: text columns left, the rest (numbers) right.
        self.align = align or "".join("l" if i == 0 else "r" for i in range(len(self.columns)))

    def _repr_html_(self) -> str:
        side = {"l": "left", "r": "right", "c": "center"}
        head = "".join(f'<th style="text-align:{side[a]}">{html.escape(c)}</th>'
                       for c, a in zip(self.columns, self.align))
        body = "".join("<tr>" + "".join(f'<td style="text-align:{side[a]}">{html.escape(c)}</td>'
                                        for c, a in zip(r, self.align)) + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<table class="book-table">{cap}<thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")

    def _repr_markdown_(self) -> str:
        bar = {"l": ":---", "r": "---:", "c": ":---:"}
        lines = ["| " + " | ".join(self.columns) + " |", "|" + "|".join(bar[a] for a in self.align) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in self.rows]
        return (f"**{self.caption}**\n\n" if self.caption else "") + "\n".join(lines)

    def __repr__(self) -> str:
        return self._repr_markdown_()

    def column(self, name: str) -> list[str]:
        return [r[self.columns.index(name)] for r in self.rows]
