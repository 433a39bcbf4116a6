"""Sphinx extension of the book: render with no network, and typeset Chinese line breaks.

Loaded by _config.yml (`sphinx.local_extensions`). It does five things:

1. jupyter-book adds every *.js and *.css found under _static/ to every page. The vendored
   MathJax tree alone holds about a hundred scripts that MathJax loads itself on demand, so the
   ``vendor/`` entries are taken out of ``html_js_files`` / ``html_css_files`` again.
2. sphinxcontrib-mermaid 1.0.0 emits ``import mermaid from "<url>"`` module scripts (which only
   work with an absolute URL, so a CDN) and a d3 script from a CDN. Its page hook is replaced: a
   page with a mermaid block gets the vendored UMD build ``vendor/mermaid.min.js`` (it defines
   ``window.mermaid``) and a small inline script that renders every ``pre.mermaid`` on load.
   Markdown pages and notebooks go through the same hook, since both carry mermaid nodes.
3. MathJax comes from ``mathjax_path`` (set to the vendored tex-chtml.js in _config.yml); a build
   whose vendored files are missing stops with a warning (an error under ``-W``) that says how
   to fetch them.
4. A line break inside a Chinese paragraph of the source (Markdown pages and notebook Markdown
   cells alike) would show as a stray space in the browser. Text nodes lose the newline where
   both neighbours are CJK characters or one of them is CJK punctuation; code and math are left
   alone. A break between Chinese and a Latin word keeps its space, as Chinese typesetting wants.
5. The results page (measured-results.md, not committed) is generated from results/ at the start
   of every build by utils.report, so it always shows exactly the stored record.
6. ``{glue:text}`` shows the glued text as it was formatted. myst-nb 1.x passes the text through
   ``ast.literal_eval`` before printing it, which turns "3,955" into the tuple (3, 955) and "1.00" into 1.0;
   with no format spec in the role (myst-nb then passes "s"), the text now stays verbatim (a quoted string
   literal still loses its quotes).
"""
from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

VENDOR = "vendor/"
MERMAID_JS = VENDOR + "mermaid.min.js"

# Runs right after mermaid.min.js: switch off its own start-on-load first (left on, the UMD build renders
# every .mermaid node at DOMContentLoaded with its default settings, before the handler below, so the
# first diagrams of a page came out in another style and a diagram with an init directive stayed text);
# then render every diagram once the page has loaded. The theme follows the page's light/dark setting.
MERMAID_INIT = """
(function () {
  if (typeof window.mermaid === "undefined") {
    console.error("mermaid.min.js did not load: diagrams stay as text");
    return;
  }
  window.mermaid.initialize({startOnLoad: false, securityLevel: "strict"});
  window.addEventListener("load", function () {
    var dark = document.documentElement.dataset.theme === "dark";
    window.mermaid.initialize({startOnLoad: false, securityLevel: "strict",
                               theme: dark ? "dark" : "default"});
    window.mermaid.run({querySelector: "pre.mermaid"});
  });
})();
""".strip()


def _not_vendor(entry) -> bool:
    name = entry[0] if isinstance(entry, (tuple, list)) else entry
    return not str(name).startswith(VENDOR)


def prune_vendor_assets(app: Sphinx, config) -> None:
    config.html_js_files = [e for e in config.html_js_files if _not_vendor(e)]
    config.html_css_files = [e for e in config.html_css_files if _not_vendor(e)]


def check_vendor_files(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    src = Path(app.srcdir) / "_static"
    needed = [MERMAID_JS]
    if "://" not in app.config.mathjax_path:
        needed.append(app.config.mathjax_path)
    for rel in needed:
        if not (src / rel).is_file():
            logger.warning(f"_static/{rel} is missing: run `bash scripts/fetch_vendor.sh "
                           f"_static/vendor` (or `make book`), then build again")


def install_mermaid(app: Sphinx, pagename, templatename, context, doctree) -> None:
    from sphinxcontrib.mermaid import mermaid as mermaid_node
    if app.builder.format != "html" or doctree is None or doctree.next_node(mermaid_node) is None:
        return
    app.builder.add_js_file(MERMAID_JS, priority=500)
    app.builder.add_js_file(None, body=MERMAID_INIT, priority=501)


_CJK = "\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef"
_CJK_PUNCT = "\u3000-\u303f\uff00-\uffef\u201c\u201d"
_IS_CJK = re.compile(f"[{_CJK}]")
_IS_PUNCT = re.compile(f"[{_CJK_PUNCT}]")
_CJK_BREAK = re.compile(
    f"(?:(?<=[{_CJK}])[ \\t]*\\n[ \\t]*(?=[{_CJK}]))"
    f"|(?:(?<=[{_CJK_PUNCT}])[ \\t]*\\n[ \\t]*)"
    f"|(?:[ \\t]*\\n[ \\t]*(?=[{_CJK_PUNCT}]))")
_KEEP = (nodes.literal_block, nodes.literal, nodes.math, nodes.math_block, nodes.raw,
         nodes.comment, nodes.doctest_block, nodes.FixedTextElement)


def _joinable(before: str, after: str) -> bool:
    """May the line break between these two characters vanish?"""
    if not before or not after:
        return False
    return bool((_IS_CJK.match(before) and _IS_CJK.match(after))
                or _IS_PUNCT.match(before) or _IS_PUNCT.match(after))


def _edge(node, last: bool) -> str:
    t = node.astext() if node is not None else ""
    return (t[-1] if last else t[0]) if t else ""


def join_cjk_lines(app: Sphinx, doctree) -> None:
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or "\n" not in text:
            continue
        anc, keep = parent, False
        while anc is not None:
            if isinstance(anc, _KEEP):
                keep = True
                break
            anc = anc.parent
        if keep:
            continue
        s = str(text)
        if not s.strip(" \t\n"):
            # a soft line break of its own (how MyST renders one): look at the neighbours
            i = parent.index(text)
            prev = parent[i - 1] if i > 0 else None
            nxt = parent[i + 1] if i + 1 < len(parent) else None
            if _joinable(_edge(prev, True), _edge(nxt, False)):
                parent.remove(text)
            continue
        joined = _CJK_BREAK.sub("", s)
        if joined != s:
            parent.replace(text, nodes.Text(joined))


RESULTS_PAGE = "measured-results.md"


def write_results_page(app: Sphinx, config) -> None:
    """Generate the results page from results/ before the TOC is read (it lists that page)."""
    import sys
    root = Path(app.confdir)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from utils.report import write_results_page as write
    write(root / RESULTS_PAGE)


def glue_text_verbatim(text: str, fmt_spec: str) -> str:
    """myst-nb's format_plain_text, except that with no format spec (the role passes "s" when ``key:spec`` has
    none) the glued text is returned as written."""
    from ast import literal_eval

    from myst_nb.core.variables import format_plain_text
    if fmt_spec not in ("", "s"):
        return format_plain_text(text, fmt_spec)
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        return text
    return value if isinstance(value, str) else text


def install_glue_text_verbatim() -> None:
    """Point myst-nb's two users of format_plain_text (the glue roles and cross-references) at ours."""
    from myst_nb.ext.glue import crossref, roles
    roles.format_plain_text = crossref.format_plain_text = glue_text_verbatim


def setup(app: Sphinx):
    install_glue_text_verbatim()
    app.setup_extension("sphinxcontrib.mermaid")
    from sphinxcontrib.mermaid import install_js
    for listener in list(app.events.listeners.get("html-page-context", [])):
        if listener.handler is install_js:
            app.disconnect(listener.id)
    app.connect("config-inited", write_results_page, priority=100)
    app.connect("config-inited", prune_vendor_assets, priority=900)
    app.connect("builder-inited", check_vendor_files)
    app.connect("html-page-context", install_mermaid)
    app.connect("doctree-read", join_cjk_lines)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
