/* The book's page script (jupyter-book adds every _static/*.js to every page).

   1. A code listing (a highlighted block: a CUDA snippet from utils.show, a diff, a code cell's
      input) longer than FOLD_OVER lines shows its first FOLD_TO lines and a toggle button
      ("展开全部 N 行" / "收起"). Only the listing's height is limited: its text stays in the page,
      so the browser's find-in-page still reaches it (a find that scrolls inside a folded listing
      unfolds it), and print shows every line (book.css, @media print). Without JavaScript nothing is folded.
   2. The run stamp (a code cell's output whose text starts with "run on ") wraps inside the column
      instead of being cut at its right edge.

   scripts/check_html.py checks both in headless Chromium (FOLD_PROBE). */
(function () {
  "use strict";

  var FOLD_OVER = 40;   // a listing with more lines than this is folded ...
  var FOLD_TO = 25;     // ... to this many lines
  var STAMP_PREFIX = "run on ";

  // Stream outputs (print) are results, not listings; they are never folded.
  var LISTINGS = "div[class*='highlight-']:not(.output) > div.highlight > pre";
  var STREAMS = "div.output.stream > div.highlight > pre";

  function lineCount(pre) {
    var text = pre.textContent.replace(/\n$/, "");
    return text === "" ? 0 : text.split("\n").length;
  }

  // The pre's height showing its first FOLD_TO lines (top padding included).
  function foldedHeight(pre, lines) {
    var style = getComputedStyle(pre);
    var padTop = parseFloat(style.paddingTop) || 0;
    var padBottom = parseFloat(style.paddingBottom) || 0;
    var perLine = (pre.scrollHeight - padTop - padBottom) / lines;
    if (!(perLine > 0)) {                       // not laid out (inside a closed dropdown)
      perLine = parseFloat(style.lineHeight) || 1.5 * (parseFloat(style.fontSize) || 14);
    }
    return Math.ceil(padTop + perLine * FOLD_TO);
  }

  function setFolded(box, pre, button, lines, folded) {
    box.classList.toggle("book-folded", folded);
    pre.style.maxHeight = folded ? foldedHeight(pre, lines) + "px" : "";
    if (folded) pre.scrollTop = 0;
    button.textContent = folded ? "展开全部 " + lines + " 行" : "收起";
    button.setAttribute("aria-expanded", folded ? "false" : "true");
  }

  function makeFoldable(pre) {
    var lines = lineCount(pre);
    if (lines <= FOLD_OVER) return;
    var box = pre.parentElement;                // div.highlight
    var button = document.createElement("button");
    button.type = "button";
    button.className = "book-fold-toggle";
    box.classList.add("book-foldable");
    box.insertAdjacentElement("afterend", button);
    setFolded(box, pre, button, lines, true);
    button.addEventListener("click", function () {
      var fold = !box.classList.contains("book-folded");
      setFolded(box, pre, button, lines, fold);
      // after folding, keep the listing's start on screen rather than the text below it
      if (fold && box.getBoundingClientRect().top < 0) box.scrollIntoView({block: "start"});
    });
    // find-in-page scrolls a folded listing to a hidden match: show the whole listing instead
    pre.addEventListener("scroll", function () {
      if (pre.scrollTop > 0 && box.classList.contains("book-folded")) {
        setFolded(box, pre, button, lines, false);
      }
    });
  }

  function markStamps() {
    document.querySelectorAll(STREAMS).forEach(function (pre) {
      if (pre.textContent.indexOf(STAMP_PREFIX) === 0) {
        pre.parentElement.parentElement.classList.add("book-stamp");
      }
    });
  }

  function init() {
    var article = document.querySelector("article.bd-article") || document.body;
    markStamps();
    article.querySelectorAll(LISTINGS).forEach(makeFoldable);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
