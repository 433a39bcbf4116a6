"""scripts/check_html.py's newer checks: unrendered pipe tables, the Chinese search index, and (in
headless Chromium, where installed) content wider than the column, CJK text drawn as boxes, and
long listings folded and the run stamp wrapped by _static/book.js."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import check_html  # noqa: E402

TABLE_MARKDOWN = "| kernel | registers |\n|---|---|\n| copy_v1 | 32 |"
# what CommonMark plus smart quotes make of TABLE_MARKDOWN in the HTML: one paragraph, "---" -> "—"
TABLE_AS_PARAGRAPH = "<p>| kernel | registers |\n|—|—|\n| <code>copy_v1</code> | 32 |</p>"
TABLE_RENDERED = ("<table><thead><tr><th>kernel</th><th>registers</th></tr></thead>"
                  "<tbody><tr><td>copy_v1</td><td>32</td></tr></tbody></table>")


def write_build(root: Path, body: str, terms: dict | None = None) -> Path:
    """A minimal built book: index.html holding BODY and a searchindex.js with TERMS."""
    build = root / "html"
    build.mkdir(parents=True)
    (build / "index.html").write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    index = {"docnames": ["index"], "terms": terms if terms is not None else
             {w: 0 for w in check_html.SEARCH_WORDS}, "titleterms": {}}
    (build / "searchindex.js").write_text(f"Search.setIndex({json.dumps(index)})",
                                          encoding="utf-8")
    return build


def static_problems(build: Path) -> list[str]:
    problems, _ = check_html.static_checks(build, check_html.content_pages(build))
    return problems


@pytest.mark.parametrize("markdown", [TABLE_MARKDOWN, TABLE_MARKDOWN.replace("---", ":---"),
                                      TABLE_MARKDOWN.replace("---", "\u2014")])
def test_unrendered_pipe_table_pattern(markdown):
    assert check_html.UNRENDERED_TABLE.match(markdown), markdown


@pytest.mark.parametrize("text", ["a | b |---|", "| one pipe, no separator row |",
                                  "x = a | b  # a bitwise or, then --- a dash"])
def test_prose_with_pipes_is_not_a_table(text):
    assert not check_html.UNRENDERED_TABLE.match(text), text


def test_paragraph_of_pipes_fails_and_a_table_passes(tmp_path):
    bad = static_problems(write_build(tmp_path / "bad", TABLE_AS_PARAGRAPH))
    assert any("pipe table left as a paragraph" in p for p in bad), bad
    good = static_problems(write_build(tmp_path / "good", TABLE_RENDERED))
    assert good == [], good


def test_search_index_must_find_every_chinese_word(tmp_path):
    missing = check_html.SEARCH_WORDS[1]
    terms = {w: [0] for w in check_html.SEARCH_WORDS if w != missing}
    problems = static_problems(write_build(tmp_path / "b", "<p>正文</p>", terms))
    assert len(problems) == 1 and repr(missing) in problems[0], problems
    assert static_problems(write_build(tmp_path / "ok", "<p>正文</p>")) == []


def test_pages_for_term_reads_both_index_shapes():
    index = {"terms": {"量化": [1, 4], "寄存器": 2}, "titleterms": {"量化": 7}}
    assert check_html.pages_for_term(index, "量化") == {1, 4, 7}
    assert check_html.pages_for_term(index, "寄存器") == {2}
    assert check_html.pages_for_term(index, "共享内存") == set()


def test_unreadable_search_index_is_a_problem(tmp_path):
    build = write_build(tmp_path / "b", "<p>x</p>")
    (build / "searchindex.js").write_text("var nothing = 1;", encoding="utf-8")
    hits, problems = check_html.search_index_checks(build)
    assert hits == {} and "cannot be read" in problems[0], problems


# ----------------------------------------------------------------- in Chromium ----------------
CHROMIUM = check_html.find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")

LAYOUT_PAGE = """<html lang="zh-CN"><head><meta charset="utf-8"></head><body style="margin:0">
<article class="bd-article" style="width:400px">
<p>共享内存与寄存器的量化</p>
<div id="wide" style="width:700px">wide box</div>
<div style="overflow-x:auto"><div style="width:900px">scrolls inside its box</div></div>
</article></body></html>"""


def layout_of(html: str, probe: str = check_html.LAYOUT_PROBE) -> dict:
    """PROBE's findings on one page, in headless Chromium (environment inherited)."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "page.html").write_text(html, encoding="utf-8")
        log = Path(d, "chromium.log")
        with check_html.LocalServer(Path(d)) as server:
            browser = check_html.Chromium(CHROMIUM, log)
            try:
                target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
                sess = browser.send("Target.attachToTarget",
                                    {"targetId": target, "flatten": True})["sessionId"]
                browser.send("Page.enable", session=sess)
                assert check_html.load(browser, sess, server.base + "page.html", 30, []) is None
                return json.loads(check_html.evaluate(browser, sess, probe, 30))
            finally:
                browser.close()


@needs_chromium
def test_overflow_outside_a_scroll_container_is_found():
    layout = layout_of(LAYOUT_PAGE)
    assert layout["columnWidth"] == 400
    assert [w["what"].split(" ")[0] for w in layout["wide"]] == ["div"], layout
    assert layout["wide"][0]["px"] == 300, layout
    problems = check_html.layout_problems("page.html", layout)
    assert len(problems) == 1 and "300 px past the 400 px column" in problems[0], problems


STATIC = Path(__file__).resolve().parents[1] / "_static"
STAMP = ("run on NVIDIA H200 (sm 9.0) · driver CUDA 13.0 · runtime 13.2 · NVRTC 13.0 · CuPy 14.2.0 · "
         "Python 3.12.3 · run 2026-12-01T15:17:48Z")


def listing(n_lines: int) -> str:
    code = "\n".join(f"int line_{i} = {i};" for i in range(n_lines))
    return f'<div class="highlight-cuda notranslate"><div class="highlight"><pre>{code}\n</pre></div></div>'


def fold_page(with_book_assets: bool) -> str:
    """A column with a long listing, a short one and a run stamp; the book's CSS and JS inlined."""
    assets = (f"<style>{(STATIC / 'book.css').read_text()}</style>"
              f"<script>{(STATIC / 'book.js').read_text()}</script>") if with_book_assets else ""
    return f"""<html lang="zh-CN"><head><meta charset="utf-8"></head><body style="margin:0">
<article class="bd-article" style="width:400px">
{listing(check_html.FOLD_OVER + 10)}
{listing(check_html.FOLD_OVER)}
<div class="cell_output"><div class="output stream highlight-myst-ansi"><div class="highlight">
<pre style="overflow-x:auto">{STAMP}\n</pre></div></div></div>
</article>{assets}</body></html>"""


@needs_chromium
def test_book_js_folds_long_listings_and_wraps_the_stamp():
    fold = layout_of(fold_page(with_book_assets=True), check_html.FOLD_PROBE)
    assert fold["long"] == 1 and fold["stamps"] == 1, fold
    assert check_html.fold_problems("page.html", fold) == [], fold


@needs_chromium
def test_without_book_js_the_fold_check_fails():
    fold = layout_of(fold_page(with_book_assets=False), check_html.FOLD_PROBE)
    problems = check_html.fold_problems("page.html", fold)
    assert len(problems) == 2, problems
    assert "has no fold toggle" in problems[0] and "int line_0" in problems[0], problems
    assert "run stamp does not wrap" in problems[1], problems


def cjk_font_dirs() -> list[str]:
    """Directories of the fonts that fontconfig says cover Chinese (empty if none or no fc-list)."""
    if not shutil.which("fc-list"):
        return []
    out = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True).stdout
    return sorted({str(Path(line.split(":")[0]).parent) for line in out.splitlines() if line})


@needs_chromium
@pytest.mark.skipif(not cjk_font_dirs(), reason="no CJK font installed (fonts-noto-cjk)")
def test_cjk_glyphs_pass_with_the_font_and_fail_without(tmp_path, monkeypatch):
    with_font = layout_of(LAYOUT_PAGE)
    assert with_font["cjkChecked"] == 10 and with_font["tofu"] == "", with_font

    # A fontconfig with the system font directories that neither hold a CJK font nor contain
    # one below them (fontconfig scans a <dir> recursively).
    hidden = set(cjk_font_dirs())
    dirs = [str(p) for root in ("/usr/share/fonts", "/usr/local/share/fonts")
            for p in Path(root).rglob("*") if p.is_dir() and str(p) not in hidden
            and not any(str(p).startswith(h + os.sep) or h.startswith(str(p) + os.sep)
                        for h in hidden)]
    conf = tmp_path / "fonts.conf"
    conf.write_text('<?xml version="1.0"?><fontconfig>'
                    + "".join(f"<dir>{d}</dir>" for d in dirs)
                    + f"<cachedir>{tmp_path}/cache</cachedir></fontconfig>", encoding="utf-8")
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    without = layout_of(LAYOUT_PAGE)
    assert len(without["tofu"]) == without["cjkChecked"] == 10, without
    problems = check_html.layout_problems("page.html", without)
    assert any("render as missing glyphs" in p for p in problems), problems


def test_stderr_output_fails_unless_known(tmp_path, monkeypatch):
    stderr = '<div class="output stderr highlight-myst-ansi"><pre>UserWarning: x</pre></div>'
    monkeypatch.setattr(check_html, "KNOWN_STDERR", {})
    problems = static_problems(write_build(tmp_path / "new", stderr))
    assert len(problems) == 1 and "on stderr" in problems[0], problems
    monkeypatch.setattr(check_html, "KNOWN_STDERR", {"index.html": 1})
    assert static_problems(write_build(tmp_path / "known", stderr)) == []
