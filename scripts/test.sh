#!/usr/bin/env bash
# What `make test` runs: every check of the book, in order, with a summary at the end.
#
#   1. unit          pytest -q tests  (CPU tests and NVRTC compile checks everywhere; the GPU
#                    kernel tests too where CuPy in .venv sees a GPU, else they skip); ruff lint
#   2. notebooks     python -m utils.stamp: every notebook in _toc.yml executed on an H100/H200,
#                    fresh (code and kernels unchanged since), no errors, counts in order
#   3. build         the book from the stored outputs, warnings as errors
#   4. html          scripts/check_html.py: links, offline assets, math and mermaid rendered in
#                    headless Chromium with the network off
#   5. nbval         only on a GPU host: re-executes the TOC's notebooks and compares
#
# Sets up what it needs first (the .venv from requirements.txt, the vendored mermaid/MathJax).
# Every step runs even if an earlier one failed (the build is skipped only when it cannot start),
# so one run reports everything; the exit status is non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

VENV=.venv
PY=$VENV/bin/python
declare -a RESULTS=()
FAILED=0

step() { echo; echo "==== $1 ===="; }
record() {   # record NAME STATUS(0=ok, other=fail) [NOTE]
  local name=$1 rc=$2 note=${3:-}
  if [ "$rc" = 0 ]; then RESULTS+=("ok    $name${note:+  ($note)}")
  else RESULTS+=("FAIL  $name (exit $rc)${note:+  ($note)}"); FAILED=1; fi
}
skip() { RESULTS+=("skip  $1  ($2)"); }

step "setup: .venv and the vendored mermaid/MathJax"
if ! make -s setup _static/vendor/.done; then
  echo "test.sh: setting up failed (see above); nothing was tested" >&2
  exit 2
fi

step "1/5 unit tests: pytest -q tests, then lint (pyflakes rules: unused names, undefined names)"
$PY -m pytest -q tests
record "unit tests" $?
$PY -m ruff check --select F,E9 --quiet utils kernels tests scripts _ext
record "lint (ruff F, E9)" $?

step "2/5 notebooks in _toc.yml: python -m utils.stamp"
$PY -m utils.stamp
record "notebooks fresh (utils.stamp)" $?

step "3/5 strict book build (warnings are errors)"
rm -rf _build/html _build/.doctrees _build/jupyter_execute
$VENV/bin/jupyter-book build . --path-output . --warningiserror --keep-going -q
build_rc=$?
record "book build, -W" $build_rc

step "4/5 HTML check: links, offline assets, math and mermaid in headless Chromium"
if [ "$build_rc" != 0 ] || [ ! -f _build/html/index.html ]; then
  skip "HTML check" "no book was built"
  FAILED=1
elif [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
     && ! command -v google-chrome >/dev/null; then
  echo "test.sh: Chromium is needed for the HTML check and is not installed." >&2
  echo "          Debian/Ubuntu: sudo apt-get install -y chromium   (or set CHROMIUM=/path/to/chrome)" >&2
  record "HTML check" 3 "Chromium missing: sudo apt-get install -y chromium"
else
  $PY scripts/check_html.py _build/html
  record "HTML check" $?
fi

step "5/5 nbval over the TOC's notebooks (GPU hosts only)"
if ! nvidia-smi -L >/dev/null 2>&1; then
  skip "nbval" "no GPU: nvidia-smi does not answer"
elif ! $PY -c "import cupy, sys; sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)" >/dev/null 2>&1; then
  echo "test.sh: nvidia-smi sees a GPU but CuPy in $VENV does not, so the GPU tests above skipped" >&2
  echo "          and nbval cannot run. Install it: $VENV/bin/pip install cupy-cuda13x torch" >&2
  echo "          (air-gapped hosts: scripts/gpu_session.sh --tests --nbval, see README.md)" >&2
  skip "nbval" "CuPy in $VENV sees no GPU"
else
  mapfile -t NBS < <($PY -c "from utils.stamp import toc_notebooks; print('\n'.join(map(str, toc_notebooks())))")
  if [ "${#NBS[@]}" = 0 ]; then
    skip "nbval" "no notebooks in _toc.yml"
  else
    # records of this verification pass go to a scratch folder, not over the stored ones
    BOOK_RESULTS=$(mktemp -d) $PY -m pytest -q --nbval-lax --nbval-current-env "${NBS[@]}"
    record "nbval (${#NBS[@]} notebooks)" $?
  fi
fi

echo
echo "==== summary ===="
printf '%s\n' "${RESULTS[@]}"
if [ "$FAILED" = 0 ]; then
  echo "make test: all checks passed"
  exit 0
fi
echo "make test: FAILED (see the steps marked FAIL above)"
exit 1
