#!/usr/bin/env python3
"""Check the built HTML book: links, offline assets, and rendering in headless Chromium.

    python scripts/check_html.py _build/html [--no-browser] [--screenshots DIR] [--timeout S]

Static checks over every page (no browser):
  * every relative href/src resolves to a file of the build, and every #anchor exists in its page;
  * no <script src>, stylesheet, preload, icon, <img>/<iframe>/<source> is an http(s) URL: the book
    must render offline (external links in <a href> are allowed);
  * the chapter status table on the landing page (id "chapter-status") is honest: a row says
    "已收录" exactly when it links to a page of the book, and every chapter page is linked there;
  * no paragraph is an unrendered pipe table (text that starts with "|" and holds a "|---" row,
    which smart quotes may have turned into "|—|"): a table from a code cell must render as a table;
  * no page shows a code cell's stderr (a warning with the GPU host's paths) beyond the known
    ones in KNOWN_STDERR, which wait for their chapter's next GPU run;
  * searchindex.js indexes Chinese words: 寄存器, 量化 and 共享内存 each name at least one page
    (Sphinx segments Chinese only when jieba is installed).

Browser checks (headless Chromium, driven over the DevTools protocol through a pipe, so nothing
but the standard library is needed): each page is loaded from a private http.server on 127.0.0.1,
with networking to anything else cut off (a dead proxy); then
  * a page with math must have every math element typeset by MathJax (mjx-container, no
    mjx-merror, no undefined macro), and no raw $$, \\( or \\[ may remain in its text outside code;
  * a page with mermaid blocks must have an <svg> rendered inside every one, and no error diagram;
  * no page may request anything outside the local server, fail to load a local file, or throw a
    JavaScript exception;
  * nothing inside the article is wider than its column unless it sits in a scroll container
    (overflow-x auto or scroll): content cut off at the right edge fails;
  * the page's Chinese text is drawn with a font that has the glyphs: each of up to 40 distinct
    CJK characters of the page, drawn on a canvas in the page's own font stack, must differ from
    the missing-glyph box (U+FFFF); without a CJK font every one of them is that box;
  * every code listing longer than FOLD_OVER lines is folded by _static/book.js (its height cut,
    a "展开全部 N 行" toggle after it) and the toggle unfolds it; every run stamp (a stream output
    that starts with "run on ") wraps inside its box instead of being cut;
  * the search page finds pages for 寄存器, 量化 and 共享内存;
  * full-page screenshots of chapters 2, 6 and 9 and of the results page are saved, in pieces of
    at most 4000 px, to <build>/../screenshots/ (--screenshots DIR elsewhere; --all-screenshots
    for every page), for a maintainer to look at.
Prints one line per problem and a summary; exits 1 on any failure, 2 on a usage or setup error.
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import functools
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

# Pages that are Sphinx/theme machinery or vendored files, not the book's own pages.
SKIP_DIRS = ("_static/", "_sources/", "_images/", "_downloads/", "_sphinx_design_static/")
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")
OFFLINE_LINK_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut", "manifest",
                     "prefetch"}
STATUS_TABLE_ID = "chapter-status"
STATUS_IN_BOOK = "已收录"
# Words a Chinese reader searches for; each must find pages in the built search index.
SEARCH_WORDS = ("寄存器", "量化", "共享内存")
# A paragraph that is a pipe table markdown left unrendered: starts with "|" and has a separator
# row ("|---|", "| :--- |", or "|—|" after smart quotes turned "---" into an em dash).
UNRENDERED_TABLE = re.compile(r"^\s*\|.*\|\s*:?(?:-{3,}|[\u2013\u2014]+)", re.S)
# stderr outputs already in stored notebooks, tolerated until the chapter is re-executed on a GPU
# (page -> how many): a new one fails the check, a fixed one prints a note to shrink this table.
KNOWN_STDERR: dict[str, int] = {}   # none: a warning in a stored output is silenced at its source
# Pages whose full-page screenshots are always saved (path prefixes inside the build).
SCREENSHOT_PAGES = ("chapters/02-", "chapters/06-", "chapters/09-", "measured-results")
SCREENSHOT_PIECE_PX = 4000
SCREENSHOT_WIDTH_PX = 1280


# ------------------------------------------------------------------ static checks -------------
class PageParser(HTMLParser):
    """Collects ids, references and the chapter status table of one page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []   # (tag, attribute, url)
        self.heavy: list[tuple[str, str]] = []       # external URLs the page must not load
        self.redirect: str | None = None           # <meta http-equiv="refresh"> target
        self.has_math = False
        self.has_mermaid = False
        # status table: list of rows, each a list of (cell text, [hrefs])
        self._table_depth = 0
        self.status_rows: list[list[tuple[str, list[str]]]] = []
        self._cell: list | None = None
        self.unrendered_tables: list[str] = []      # paragraphs that are raw pipe tables
        self.stderr_outputs = 0                    # code-cell outputs on stderr
        self._para: str | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "meta" and a.get("http-equiv", "").lower() == "refresh":
            m = re.search(r"url\s*=\s*['\"]?([^'\";]+)", a.get("content", ""), re.I)
            if m:
                self.redirect = m.group(1).strip()
                self.refs.append(("meta", "refresh", self.redirect))
        classes = a.get("class", "").split()
        if "math" in classes:
            self.has_math = True
        if tag == "pre" and "mermaid" in classes:
            self.has_mermaid = True
        if tag == "p":
            self._para = ""
        if tag == "div" and "output" in classes and "stderr" in classes:
            self.stderr_outputs += 1

        for attr in ("href", "src", "data"):
            url = a.get(attr)
            if url is None or (attr == "data" and tag != "object"):
                continue
            self.refs.append((tag, attr, url))
            if EXTERNAL.match(url) and urlsplit(url).scheme in ("http", "https", ""):
                rels = set(a.get("rel", "").lower().split())
                if tag == "link" and rels & OFFLINE_LINK_RELS:
                    self.heavy.append((f"<link rel={a.get('rel')}>", url))
                elif tag in ("script", "img", "iframe", "source", "video", "audio", "embed",
                             "object", "track"):
                    self.heavy.append((f"<{tag} {attr}>", url))

        if tag == "table" and (self._table_depth or a.get("id") == STATUS_TABLE_ID):
            self._table_depth += 1
        elif self._table_depth:
            if tag == "tr":
                self.status_rows.append([])
            elif tag in ("td", "th") and self.status_rows:
                self._cell = ["", []]
                self.status_rows[-1].append(self._cell)
            elif tag == "a" and self._cell is not None and a.get("href"):
                self._cell[1].append(a["href"])

    def handle_endtag(self, tag):
        if tag == "p" and self._para is not None:
            if UNRENDERED_TABLE.match(self._para):
                self.unrendered_tables.append(self._para.strip())
            self._para = None
        if self._table_depth:
            if tag == "table":
                self._table_depth -= 1
            elif tag in ("td", "th"):
                self._cell = None

    def handle_data(self, data):
        if self._para is not None:
            self._para += data
        if self._cell is not None:
            self._cell[0] += data


def content_pages(build: Path) -> list[Path]:
    pages = []
    for p in sorted(build.rglob("*.html")):
        rel = p.relative_to(build).as_posix()
        if not rel.startswith(SKIP_DIRS):
            pages.append(p)
    return pages


def static_checks(build: Path, pages: list[Path]) -> tuple[list[str], dict[Path, PageParser]]:
    problems: list[str] = []
    parsed: dict[Path, PageParser] = {}

    def parse(p: Path) -> PageParser:
        if p not in parsed:
            pp = PageParser()
            pp.feed(p.read_text(encoding="utf-8", errors="replace"))
            pp.close()
            parsed[p] = pp
        return parsed[p]

    n_refs = 0
    for page in pages:
        rel = page.relative_to(build).as_posix()
        pp = parse(page)
        for what, url in pp.heavy:
            problems.append(f"{rel}: {what} loads {url} from the network; the book must render "
                            "offline (vendor it under _static/)")
        for tag, attr, url in pp.refs:
            if not url or EXTERNAL.match(url):
                continue              # external links, mailto:, data:, javascript: ...
            n_refs += 1
            parts = urlsplit(url)
            if not parts.path:        # "#anchor" in this page
                target = page
            else:
                target_url = urljoin("file:///" + rel, unquote(parts.path))
                target = build / urlsplit(target_url).path.lstrip("/")
                if target_url.endswith("/"):
                    target = target / "index.html"
                try:
                    target.resolve().relative_to(build.resolve())
                except ValueError:
                    problems.append(f"{rel}: <{tag} {attr}={url!r}> points outside the build")
                    continue
                if not target.exists():
                    problems.append(f"{rel}: <{tag} {attr}={url!r}> is a broken link "
                                    f"(no {target.relative_to(build).as_posix()})")
                    continue
            frag = unquote(parts.fragment)
            if frag and target.suffix == ".html" and tag in ("a", "area"):
                if frag not in parse(target).ids:
                    trel = target.relative_to(build).as_posix()
                    problems.append(f"{rel}: <{tag} {attr}={url!r}>: no id {frag!r} in {trel}")

    problems += status_table_checks(build, pages, parsed)
    n_tables = 0
    for page in pages:
        rel = page.relative_to(build).as_posix()
        for text in parse(page).unrendered_tables:
            n_tables += 1
            first = text.splitlines()[0][:100]
            problems.append(f"{rel}: a pipe table left as a paragraph, not rendered as a table: "
                            f"{first!r} (text/markdown output parsed as CommonMark? set "
                            "nb_render_markdown_format: myst, or print it with utils.table.Table)")
    problems += stderr_checks(build, pages, parsed)
    hits, search_problems = search_index_checks(build)
    problems += search_problems
    print(f"static: {len(pages)} pages, {n_refs} internal references checked, "
          f"{n_tables} unrendered pipe table(s); search index: "
          + ", ".join(f"{w} in {n} page(s)" for w, n in hits.items()))
    return problems, parsed


def stderr_checks(build: Path, pages: list[Path], parsed: dict[Path, "PageParser"]) -> list[str]:
    """No stderr output on a page beyond KNOWN_STDERR; a note when a known one has gone."""
    problems = []
    for page in pages:
        rel = page.relative_to(build).as_posix()
        n, known = parsed[page].stderr_outputs, KNOWN_STDERR.get(rel, 0)
        if n > known:
            problems.append(f"{rel}: {n} code-cell output(s) on stderr ({known} known): silence the "
                            "warning at its source and re-execute the chapter")
        elif n < known:
            print(f"note: {rel} has {n} stderr output(s), KNOWN_STDERR allows {known}: lower it")
    return problems


def load_search_index(build: Path) -> dict:
    """The JSON inside searchindex.js (``Search.setIndex({...})``)."""
    text = (build / "searchindex.js").read_text(encoding="utf-8")
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        raise ValueError(f"searchindex.js: expected Search.setIndex({{...}}), got {text[:60]!r}")
    return json.loads(text[start + 1:end])


def pages_for_term(index: dict, word: str) -> set[int]:
    """Documents whose text or title holds WORD, as Sphinx's search looks it up (exact term)."""
    found: set[int] = set()
    for table in ("terms", "titleterms"):
        docs = index.get(table, {}).get(word)
        if docs is None:
            continue
        found |= set(docs) if isinstance(docs, list) else {docs}
    return found


def search_index_checks(build: Path) -> tuple[dict[str, int], list[str]]:
    """Each of SEARCH_WORDS must name pages in the search index (Chinese segmented by jieba)."""
    if not (build / "searchindex.js").is_file():
        return {}, ["searchindex.js is missing: the book has no search"]
    try:
        index = load_search_index(build)
    except ValueError as e:          # json.JSONDecodeError is a ValueError
        return {}, [f"searchindex.js cannot be read: {e}"]
    hits = {w: len(pages_for_term(index, w)) for w in SEARCH_WORDS}
    problems = [f"search: {w!r} finds no page in searchindex.js (is jieba installed? Sphinx "
                "indexes Chinese words only with it)" for w, n in hits.items() if n == 0]
    return hits, problems


def status_table_checks(build: Path, pages: list[Path], parsed: dict[Path, PageParser]) -> list[str]:
    """The landing page's chapter table must say which chapters are in the book, truthfully."""
    problems = []
    holders = [p for p in pages if parsed[p].status_rows]
    chapter_pages = {p.resolve() for p in pages
                     if p.relative_to(build).as_posix().startswith("chapters/")}
    if not holders:
        if chapter_pages:
            problems.append(f"no page holds the chapter status table (id {STATUS_TABLE_ID!r}), "
                            "but the book has chapter pages")
        return problems
    linked: set[Path] = set()
    for page in holders:
        rel = page.relative_to(build).as_posix()
        for row in parsed[page].status_rows[1:]:             # the first row is the header
            if not row:
                continue
            hrefs = [h for c in row for h in c[1]
                     if not EXTERNAL.match(h) and urlsplit(h).path.endswith(".html")]
            targets = {(page.parent / urlsplit(h).path).resolve() for h in hrefs}
            in_book = STATUS_IN_BOOK in row[-1][0]
            label = row[0][0].strip()
            if in_book and not targets:
                problems.append(f"{rel}: status table says {label} is {STATUS_IN_BOOK} but the "
                                "row links to no page")
            if targets and not in_book:
                problems.append(f"{rel}: status table links {label} to a page but its status is "
                                f"{row[-1][0].strip()!r}, not {STATUS_IN_BOOK!r}")
            linked |= targets
    for p in sorted(chapter_pages - linked):
        problems.append(f"{p.relative_to(build.resolve()).as_posix()} is in the book but the chapter "
                        f"status table does not link it as {STATUS_IN_BOOK}")
    return problems


# ------------------------------------------------------------------ browser -------------------
class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class LocalServer:
    def __init__(self, root: Path):
        handler = functools.partial(QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL framed)."""

    def __init__(self, exe: str, log_path: Path):
        self.profile = tempfile.mkdtemp(prefix="check_html_chromium_")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Move the child's ends above fd 9, so that the shell's 3<& / 4>& cannot clobber them.
        to_browser_r, from_browser_w = (self._high_fd(to_browser_r), self._high_fd(from_browser_w))
        args = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--no-first-run",
            "--no-default-browser-check", "--metrics-recording-only", "--mute-audio",
            "--hide-scrollbars", f"--user-data-dir={self.profile}",
            # networking off: every request that is not to 127.0.0.1 goes to a dead proxy, and
            # every host name but 127.0.0.1 fails to resolve
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--remote-debugging-pipe", "--window-size=1280,900", "about:blank",
        ]
        # Hand the pipe ends to the browser as fds 3 and 4, as --remote-debugging-pipe expects.
        shell = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(["bash", "-c", shell, exe, *args], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._responses: dict[int, dict] = {}
        self._events: queue.Queue = queue.Queue()
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @staticmethod
    def _high_fd(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._responses[-1] = {"closed": True}
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._responses[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._events.put(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        self._next_id += 1
        mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._responses:
                if -1 in self._responses:
                    raise RuntimeError(f"Chromium exited while waiting for {method}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no answer to {method} within {timeout:.0f} s")
                self._cond.wait(left)
            resp = self._responses.pop(mid)
        if "error" in resp:
            raise RuntimeError(f"{method}: {resp['error'].get('message')}")
        return resp.get("result", {})

    def events(self):
        while True:
            try:
                yield self._events.get_nowait()
            except queue.Empty:
                return

    def wait_event(self, method: str, session: str, timeout: float, sink: list) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                ev = self._events.get(timeout=left)
            except queue.Empty:
                return False
            sink.append(ev)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return True

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


# Runs in the page: waits for MathJax and mermaid, then reports what it finds.
PAGE_PROBE = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const deadline = Date.now() + __TIMEOUT_MS__;
  const mathEls = () => Array.from(document.querySelectorAll(".math"));
  const mermaidEls = () => Array.from(document.querySelectorAll("pre.mermaid"));
  if (mathEls().length) {
    while (!(window.MathJax && MathJax.startup && MathJax.startup.promise) && Date.now() < deadline)
      await sleep(50);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      await Promise.race([MathJax.startup.promise, sleep(Math.max(0, deadline - Date.now()))]);
    }
  }
  const mermaidDone = () => mermaidEls().every(
    el => el.querySelector("svg") || el.getAttribute("data-processed"));
  while (mermaidEls().length && !mermaidDone() && Date.now() < deadline) await sleep(100);
  await sleep(200);
  const math = mathEls();
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const skip = "PRE,CODE,SCRIPT,STYLE,TEXTAREA,KBD,SAMP".split(",");
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.nodeValue;
    if (!/\$\$|\\\(|\\\[/.test(t)) continue;
    let p = n.parentElement, inCode = false;
    for (; p; p = p.parentElement) {
      if (skip.includes(p.tagName) || p.tagName.startsWith("MJX-")) { inCode = true; break; }
    }
    if (!inCode) raw.push(t.trim().slice(0, 80));
  }
  return JSON.stringify({
    mathjax: !!(window.MathJax && MathJax.version),
    math: math.length,
    mathUntypeset: math.filter(el => !el.querySelector("mjx-container"))
                       .map(el => el.textContent.trim().slice(0, 60)),
    mjx: document.querySelectorAll("mjx-container").length,
    merror: Array.from(document.querySelectorAll("mjx-merror"))
                 .map(el => el.getAttribute("data-mjx-error") || el.textContent.slice(0, 60)),
    // MathJax's noundefined extension shows an unknown macro as red text instead of an error
    undefinedMacros: Array.from(document.querySelectorAll('mjx-assistive-mml mtext[mathcolor="red"]'))
                 .map(el => el.textContent).filter(t => t.startsWith("\\")),
    raw: raw.slice(0, 5),
    mermaid: mermaidEls().map(el => {
      const svg = el.querySelector("svg");
      return {svg: !!svg,
              error: !!svg && (svg.getAttribute("aria-roledescription") === "error"
                               || /Syntax error/.test(svg.textContent)),
              text: svg ? "" : el.textContent.trim().slice(0, 60)};
    }),
  });
})()
"""


# Runs in the page after PAGE_PROBE: what is wider than the article's column without a scroll
# container, and which CJK characters are drawn as the missing-glyph box.
LAYOUT_PROBE = r"""
(() => {
  const col = document.querySelector("article.bd-article") || document.querySelector("main")
              || document.body;
  const colRight = col.getBoundingClientRect().right + 1;
  const scrolls = el => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  const inScroller = el => {
    for (let p = el.parentElement; p && p !== col; p = p.parentElement) if (scrolls(p)) return true;
    return false;
  };
  const describe = el => {
    const cls = (el.getAttribute("class") || "").trim().split(/\s+/).slice(0, 2).join(".");
    return el.tagName.toLowerCase() + (cls ? "." + cls : "") + " \u00ab"
           + (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 50) + "\u00bb";
  };
  const wide = [];
  for (const el of col.querySelectorAll("*")) {
    if (wide.some(w => w.el.contains(el))) continue;          // report the outermost only
    const style = getComputedStyle(el);
    if (style.position === "absolute" || style.position === "fixed"
        || el.closest("mjx-assistive-mml")) continue;          // clipped, for screen readers
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const cut = style.display !== "inline" && ["hidden", "clip"].includes(style.overflowX)
                && el.scrollWidth > el.clientWidth + 1
                && !el.tagName.startsWith("MJX-") && !el.classList.contains("math");
    // (MathJax's hidden assistive MathML inflates a formula's scrollWidth; a display formula
    // scrolls inside its mjx-container, an inline one is short)
    if ((r.right > colRight || cut) && !inScroller(el)) {
      wide.push({el, what: describe(el), px: Math.round(cut ? el.scrollWidth - el.clientWidth
                                                              : r.right - colRight + 1),
                 cut});
    }
  }
  // CJK glyphs: each distinct character drawn in its element's font must differ from U+FFFF.
  const chars = new Map();
  const walker = document.createTreeWalker(col, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n && chars.size < 40; n = walker.nextNode()) {
    const parent = n.parentElement;
    if (!parent || ["SCRIPT", "STYLE"].includes(parent.tagName)) continue;
    for (const ch of n.nodeValue.match(/[\u4e00-\u9fff]/g) || []) {
      if (!chars.has(ch) && chars.size < 40) {
        const st = getComputedStyle(parent);
        chars.set(ch, `${st.fontStyle} ${st.fontWeight} 32px ${st.fontFamily}`);
      }
    }
  }
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 48;
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  const pixels = (ch, font) => {
    ctx.clearRect(0, 0, 48, 48);
    ctx.font = font;
    ctx.fillStyle = "#000";
    ctx.fillText(ch, 4, 38);
    return ctx.getImageData(0, 0, 48, 48).data.join(",");
  };
  const tofu = [];
  for (const [ch, font] of chars) {
    if (pixels(ch, font) === pixels("\uffff", font)) tofu.push(ch);
  }
  return JSON.stringify({
    columnWidth: Math.round(col.getBoundingClientRect().width),
    wide: wide.slice(0, 8).map(w => ({what: w.what, px: w.px, cut: w.cut})),
    nWide: wide.length,
    cjkChecked: chars.size,
    tofu: tofu.join(""),
    font: chars.size ? chars.values().next().value : "",
  });
})()
"""

# Runs in the page after LAYOUT_PROBE: are long listings folded by _static/book.js, does the toggle
# unfold and fold them again, and does the run stamp wrap? (Selectors as in book.js; the line
# count is the probe's own, so a listing the script forgets is found.)
FOLD_OVER = 40
FOLD_PROBE = r"""
(() => {
  const col = document.querySelector("article.bd-article") || document.body;
  const lines = pre => { const t = pre.textContent.replace(/\n$/, "");
                         return t === "" ? 0 : t.split("\n").length; };
  const head = pre => pre.textContent.trim().split("\n")[0].slice(0, 50);
  const listings = Array.from(col.querySelectorAll(
    "div[class*='highlight-']:not(.output) > div.highlight > pre")).filter(p => lines(p) > __OVER__);
  const unfolded = [], noToggle = [], badToggle = [];
  for (const pre of listings) {
    const box = pre.parentElement, button = box.nextElementSibling;
    const isToggle = button && button.classList.contains("book-fold-toggle");
    if (!isToggle) { noToggle.push(head(pre)); continue; }
    if (!(pre.clientHeight < pre.scrollHeight - 1)) { unfolded.push(head(pre)); continue; }
    const folded = pre.clientHeight;
    button.click();
    const open = pre.clientHeight >= pre.scrollHeight - 1 && button.textContent === "收起";
    button.click();
    if (!open || pre.clientHeight !== folded || !/^展开全部 \d+ 行$/.test(button.textContent))
      badToggle.push(head(pre));
  }
  const stamps = Array.from(col.querySelectorAll("div.output.stream pre"))
                      .filter(pre => pre.textContent.startsWith("run on "));
  const cutStamps = stamps.filter(pre => getComputedStyle(pre).whiteSpace !== "pre-wrap"
                                         || pre.scrollWidth > pre.clientWidth + 1)
                          .map(head);
  return JSON.stringify({long: listings.length, noToggle, unfolded, badToggle,
                         stamps: stamps.length, cutStamps});
})()
""".replace("__OVER__", str(FOLD_OVER))

# Runs on search.html?q=WORD: waits for Sphinx's search to list results, returns how many.
SEARCH_PROBE = r"""
(async () => {
  const deadline = Date.now() + __TIMEOUT_MS__;
  const count = () => document.querySelectorAll("#search-results ul.search li").length;
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  // results are appended one by one: wait for the first, then until the list stops growing
  let last = -1, stableSince = Date.now();
  while (Date.now() < deadline) {
    const n = count();
    if (n !== last) { last = n; stableSince = Date.now(); }
    else if (n > 0 && Date.now() - stableSince > 1000) break;
    await sleep(100);
  }
  return count();
})()
"""


def save_full_page(browser: "Chromium", sess: str, stem: Path, max_pieces: int = 25) -> int:
    """PNGs of the whole page, SCREENSHOT_PIECE_PX tall each: STEM-01.png, ...; returns how many."""
    height = int(browser.send("Page.getLayoutMetrics", session=sess)["cssContentSize"]["height"])
    pieces = list(range(0, height, SCREENSHOT_PIECE_PX))[:max_pieces]
    for i, y in enumerate(pieces, 1):
        clip = {"x": 0, "y": y, "width": SCREENSHOT_WIDTH_PX,
                "height": min(SCREENSHOT_PIECE_PX, height - y), "scale": 1}
        shot = browser.send("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                       "captureBeyondViewport": True},
                            session=sess, timeout=120)
        Path(f"{stem}-{i:02d}.png").write_bytes(base64.b64decode(shot["data"]))
    return len(pieces)


def wants_screenshot(rel: str, every_page: bool) -> bool:
    return every_page or rel.startswith(SCREENSHOT_PAGES)


def evaluate(browser: "Chromium", sess: str, expr: str, timeout: float):
    """Runs EXPR in the page and returns its value; RuntimeError if the script threw."""
    res = browser.send("Runtime.evaluate", {"expression": expr, "awaitPromise": True,
                                            "returnByValue": True},
                       session=sess, timeout=timeout + 30)
    if "exceptionDetails" in res:
        d = res["exceptionDetails"]
        desc = (d.get("exception") or {}).get("description") or d.get("text")
        raise RuntimeError(f"the probe threw: {str(desc).splitlines()[0]}")
    return res["result"]["value"]


def load(browser: "Chromium", sess: str, url: str, timeout: float, evs: list) -> str | None:
    """Navigates to URL (via about:blank, so no earlier page's events count); None or why not."""
    browser.send("Page.navigate", {"url": "about:blank"}, session=sess)
    browser.wait_event("Page.loadEventFired", sess, 10, [])
    list(browser.events())
    nav = browser.send("Page.navigate", {"url": url}, session=sess)
    if nav.get("errorText"):
        return f"did not load: {nav['errorText']}"
    if not browser.wait_event("Page.loadEventFired", sess, timeout, evs):
        return f"no load event within {timeout:.0f} s"
    return None


def search_page_checks(browser: "Chromium", sess: str, base: str, timeout: float) -> list[str]:
    """The search page, as a reader uses it, lists pages for every word of SEARCH_WORDS."""
    from urllib.parse import quote
    problems, found = [], []
    for word in SEARCH_WORDS:
        why = load(browser, sess, f"{base}search.html?q={quote(word)}", timeout, [])
        if why:
            problems.append(f"search.html?q={word}: {why}")
            continue
        n = evaluate(browser, sess, SEARCH_PROBE.replace("__TIMEOUT_MS__", "10000"), 15)
        found.append(f"{word} {n}")
        if not n:
            problems.append(f"search.html: searching {word!r} lists no page")
    print("browser: search page results: " + ", ".join(found))
    return problems


def browser_checks(build: Path, pages: list[Path], parsed: dict[Path, PageParser], exe: str,
                   timeout: float, shots: Path, every_page_shot: bool) -> list[str]:
    problems: list[str] = []
    log_path = Path(tempfile.mkstemp(prefix="check_html_chromium_", suffix=".log")[1])
    n_loaded = n_math = n_mermaid = n_cjk = n_shots = n_folded = n_stamps = 0
    with LocalServer(build) as server:
        browser = Chromium(exe, log_path)
        try:
            version = browser.send("Browser.getVersion", timeout=60)
            print(f"browser: {version.get('product')} (headless, network off), "
                  f"pages from {server.base}")
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            sess = browser.send("Target.attachToTarget",
                                {"targetId": target, "flatten": True})["sessionId"]
            for method in ("Page.enable", "Runtime.enable", "Network.enable", "Log.enable"):
                browser.send(method, session=sess)
            for page in pages:
                rel = page.relative_to(build).as_posix()
                pp = parsed[page]
                if pp.redirect is not None:
                    continue                      # a redirect; its target is checked statically
                n_loaded += 1
                evs: list[dict] = []
                why = load(browser, sess, server.base + rel, timeout, evs)
                if why:
                    problems.append(f"{rel}: {why}")
                    continue
                try:
                    info = json.loads(evaluate(
                        browser, sess, PAGE_PROBE.replace("__TIMEOUT_MS__", str(int(timeout * 1000))),
                        timeout))
                    layout = json.loads(evaluate(browser, sess, LAYOUT_PROBE, timeout))
                    fold = json.loads(evaluate(browser, sess, FOLD_PROBE, timeout))
                except RuntimeError as e:
                    problems.append(f"{rel}: {e}")
                    continue
                evs += list(browser.events())
                problems += page_problems(rel, pp, info, evs, server.base)
                problems += layout_problems(rel, layout)
                problems += fold_problems(rel, fold)
                n_folded += fold["long"]
                n_stamps += fold["stamps"]
                n_math += bool(info["math"])
                n_mermaid += bool(info["mermaid"])
                n_cjk += layout["cjkChecked"]
                if wants_screenshot(rel, every_page_shot):
                    n_shots += save_full_page(browser, sess, shots / rel.replace("/", "__")[:-5])
            problems += search_page_checks(browser, sess, server.base, timeout)
        except (RuntimeError, TimeoutError, OSError) as e:
            problems.append(f"browser: {e}")
            tail = log_path.read_text(errors="replace")[-2000:]
            print("---- chromium log (tail) ----\n" + tail + "\n-----------------------------")
        finally:
            browser.close()
    log_path.unlink(missing_ok=True)
    print(f"browser: {n_loaded} pages loaded; math typeset checked on {n_math}, "
          f"mermaid checked on {n_mermaid}; {n_cjk} CJK characters checked for glyphs; "
          f"{n_folded} listings over {FOLD_OVER} lines checked folded; {n_stamps} run stamps "
          "checked wrapped; "
          f"{n_shots} screenshot piece(s) in {shots}")
    return problems


def layout_problems(rel: str, layout: dict) -> list[str]:
    """Content wider than the column with no scroll container, and CJK drawn as missing glyphs."""
    out = []
    col = layout["columnWidth"]
    for w in layout["wide"]:
        how = (f"clips {w['px']} px of its content (overflow hidden)" if w["cut"]
               else f"reaches {w['px']} px past the {col} px column")
        out.append(f"{rel}: {w['what']} {how} with no scroll container: wrap it or put it in "
                   "a box with overflow-x: auto")
    if layout["nWide"] > len(layout["wide"]):
        out.append(f"{rel}: {layout['nWide'] - len(layout['wide'])} more element(s) overflow "
                   "the column")
    if layout["tofu"]:
        out.append(f"{rel}: {len(layout['tofu'])} of {layout['cjkChecked']} Chinese characters "
                   f"render as missing glyphs ({layout['tofu'][:10]}) in {layout['font']!r}: "
                   "no CJK font (Debian: apt-get install fonts-noto-cjk)")
    return out


def fold_problems(rel: str, fold: dict) -> list[str]:
    """Long listings that _static/book.js left unfolded or without a working toggle; cut stamps."""
    out = [f"{rel}: a listing of more than {FOLD_OVER} lines has no fold toggle "
           f"(_static/book.js not loaded?): {h!r}" for h in fold["noToggle"]]
    out += [f"{rel}: a listing of more than {FOLD_OVER} lines is not folded: {h!r}"
            for h in fold["unfolded"]]
    out += [f"{rel}: the fold toggle does not unfold and fold again the listing {h!r}"
            for h in fold["badToggle"]]
    out += [f"{rel}: the run stamp does not wrap inside its box: {h!r}" for h in fold["cutStamps"]]
    return out


def page_problems(rel: str, pp: PageParser, info: dict, evs: list[dict], base: str) -> list[str]:
    out = []
    if pp.has_math or info["math"]:
        if not info["mathjax"]:
            out.append(f"{rel}: has math but MathJax did not load")
        elif info["mathUntypeset"]:
            out.append(f"{rel}: {len(info['mathUntypeset'])} of {info['math']} math elements not "
                       f"typeset by MathJax, e.g. {info['mathUntypeset'][0]!r}")
        elif info["mjx"] == 0:
            out.append(f"{rel}: has math but no mjx-container")
    for err in info["merror"]:
        out.append(f"{rel}: MathJax error: {err}")
    for macro in info["undefinedMacros"]:
        out.append(f"{rel}: MathJax does not know the macro {macro} (undefined control sequence)")
    for t in info["raw"]:
        out.append(f"{rel}: raw TeX left in the text: {t!r}")
    if pp.has_mermaid and not info["mermaid"]:
        out.append(f"{rel}: mermaid blocks vanished from the page")
    for i, m in enumerate(info["mermaid"], 1):
        if not m["svg"]:
            out.append(f"{rel}: mermaid diagram {i} was not rendered (text {m['text']!r})")
        elif m["error"]:
            out.append(f"{rel}: mermaid diagram {i} rendered as an error (syntax error?)")
    for ev in evs:
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Network.requestWillBeSent":
            u = params.get("request", {}).get("url", "")
            if not u.startswith((base, "data:", "blob:", "about:")):
                out.append(f"{rel}: requested {u} (the book must render offline)")
        elif method == "Network.loadingFailed":
            if params.get("canceled"):
                continue
            out.append(f"{rel}: a request failed: {params.get('errorText')} "
                       f"({params.get('type')})")
        elif method == "Network.responseReceived":
            r = params.get("response", {})
            if r.get("status", 200) >= 400 and r.get("url") != base + "favicon.ico":
                out.append(f"{rel}: {r.get('status')} for {r.get('url')}")
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            desc = (d.get("exception") or {}).get("description") or d.get("text")
            out.append(f"{rel}: JavaScript exception: {str(desc).splitlines()[0]}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            out.append(f"{rel}: console error: {args[:200]}")
    # one line per distinct problem
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------ main ----------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=Path, help="the built HTML, e.g. _build/html")
    ap.add_argument("--no-browser", action="store_true", help="static checks only")
    ap.add_argument("--screenshots", type=Path, metavar="DIR",
                    help="where the full-page screenshots go (default: BUILD/../screenshots)")
    ap.add_argument("--all-screenshots", action="store_true",
                    help="screenshot every page, not only chapters 2, 6, 9 and the results page")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds a page may take to load and render (default 60)")
    args = ap.parse_args(argv)

    build = args.build
    if not (build / "index.html").is_file():
        print(f"check_html: {build}/index.html not found; build the book first (make book)",
              file=sys.stderr)
        return 2
    pages = content_pages(build)
    problems, parsed = static_checks(build, pages)

    if not args.no_browser:
        exe = find_chromium()
        if not exe:
            print("check_html: Chromium not found. Install it (Debian: sudo apt-get install -y "
                  "chromium) or set CHROMIUM=/path/to/chrome; --no-browser skips these checks",
                  file=sys.stderr)
            return 2
        shots = args.screenshots or build.resolve().parent / "screenshots"
        shutil.rmtree(shots, ignore_errors=True)        # no stale pieces from a longer page
        shots.mkdir(parents=True, exist_ok=True)
        problems += browser_checks(build, pages, parsed, exe, args.timeout, shots,
                                   args.all_screenshots)

    for p in problems:
        print("FAIL " + p)
    verdict = "FAILED" if problems else "passed"
    print(f"check_html: {verdict}: {len(pages)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
