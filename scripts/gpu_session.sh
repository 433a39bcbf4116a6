#!/usr/bin/env bash
# Run the book on a GPU host in one command, online or air-gapped.
#
#   scripts/gpu_session.sh [--tests] [--nbval] [--run "RUN ARGS"] [--out DIR]
#
#   --tests         the whole test suite (CPU tests, NVRTC compile checks, GPU kernel tests)
#   --test-args A   pytest arguments instead of the whole suite, e.g. "tests/gpu/test_softmax.py -x"
#   --tests-first   run the tests before the notebooks (a first run of new kernels: fail fast)
#   --nbval         nbval over the TOC's notebooks (re-executes them; slow); env NBVAL_NOTEBOOKS picks
#                   others, and BOOK_ARCH=sm_80 in the environment makes it the A100 reader's nbval pass
#   --ampere        the A100 reader's pass: every TOC notebook executed with BOOK_ARCH=sm_80 into
#                   $OUT/ampere (never stamped), counting tracebacks and one-line skips per notebook
#   --compile-times cold and warm compile seconds per chapter (scripts/compile_times.py)
#   --run ARGS      python -m utils.run ARGS, e.g. --run "--stale --budget-s 480"
#   --sanitize OPS  compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the op families OPS,
#                   e.g. --sanitize "hgemm sgemm" (scripts/sanitize.py; env SANITIZE_TIMEOUT_S per tool)
#   env TEST_TIMEOUT_S / RUN_TIMEOUT_S / NBVAL_TIMEOUT_S cap the tests / the notebook run / nbval (a host's per-command limit:
#                   the tarball is still written when the run is cut off)
#   --out DIR       where logs and the tarball of executed notebooks + results go (default $OUT or gpu_out)
#   --pack-cache    also leave kernel_cache.tar.gz (the compile cache, .cache/kernels) in the out dir: unpacked into
#                   a checkout and carried to the next host (a build output, git-ignored), it saves a cold host the
#                   minutes NVRTC takes to compile the chapters' kernels
#
# Wheels for what the host lacks (make wheelhouse, on a connected machine) are installed from .whl/
# into /tmp/site with no index. Everything is logged; the tarball book_outputs.tar.gz holds
# chapters/*.ipynb and results/ as this run left them, to unpack into the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-gpu_out}
TESTS=0; NBVAL=0; RUN_ARGS=""; TEST_ARGS="tests"; TESTS_FIRST=0; AMPERE=0; COMPILE_TIMES=0; SANITIZE=""; PACK_CACHE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) TESTS=1 ;;
    --nbval) NBVAL=1 ;;
    --ampere) AMPERE=1 ;;
    --compile-times) COMPILE_TIMES=1 ;;
    --test-args) TESTS=1; TEST_ARGS="$2"; shift ;;
    --tests-first) TESTS_FIRST=1 ;;
    --run) RUN_ARGS="$2"; shift ;;
    --sanitize) SANITIZE="$2"; shift ;;
    --out) OUT_DIR="$2"; shift ;;
    --pack-cache) PACK_CACHE=1 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
# The compile cache inside the checkout (git-ignored): kept between calls while a host stays warm.
export BOOK_CACHE_DIR=${BOOK_CACHE_DIR:-$PWD/.cache/kernels}
status=0

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "wheel install failed" >&2; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

# NVRTC reads CUDA's headers from the runtime wheel's include dir (utils.build.cuda_include_dirs). A host
# whose image lacks the nvidia-cuda-crt wheel has no crt/ there, and WMMA's <mma.h> includes crt/mma.h:
# fill it from the host's own toolkit (requirements.txt installs that wheel on a reader's machine).
python3 - <<'PY' || echo "warning: could not check CUDA's crt/ headers" >&2
import os, shutil
from utils.build import cuda_include_dirs
dirs = cuda_include_dirs()
toolkit = "/usr/local/cuda/include/crt"
if dirs and not any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in dirs) and os.path.isdir(toolkit):
    shutil.copytree(toolkit, os.path.join(dirs[0], "crt"), dirs_exist_ok=True)
    print(f"copied {toolkit} into {dirs[0]} (the runtime wheel lacks crt/)")
PY

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 - <<'PY'
import importlib
for m in ("cupy", "torch", "triton", "cuda.core", "cuda.bindings", "numpy", "ml_dtypes", "nbclient", "nbval"):
    try:
        mod = importlib.import_module(m)
        print(f"{m} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"{m} missing ({type(e).__name__})")
PY
} 2>&1 | tee "$OUT_DIR/env.log"

run_tests() {
  # shellcheck disable=SC2086
  timeout "${TEST_TIMEOUT_S:-86400}" python3 -m pytest -q -p no:cacheprovider $TEST_ARGS 2>&1 | tee "$OUT_DIR/tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
[ "$TESTS" = 1 ] && [ "$TESTS_FIRST" = 1 ] && run_tests

if [ -n "$RUN_ARGS" ]; then
  # shellcheck disable=SC2086
  timeout "${RUN_TIMEOUT_S:-86400}" python3 -m utils.run $RUN_ARGS 2>&1 | tee "$OUT_DIR/run.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
# Pack the executed notebooks and records now, so a later step that runs out of time loses nothing.
# Only the notebooks this run wrote (newer than env.log): unpacking must never put back an unexecuted copy.
if [ -n "$RUN_ARGS" ]; then
  mapfile -t written < <(find chapters -name '*.ipynb' -newer "$OUT_DIR/env.log")
  tar czf "$OUT_DIR/book_outputs.tar.gz" "${written[@]}" results 2>/dev/null || true
fi

[ "$TESTS" = 1 ] && [ "$TESTS_FIRST" = 0 ] && run_tests

if [ -n "$SANITIZE" ]; then
  # shellcheck disable=SC2086
  python3 scripts/sanitize.py $SANITIZE --out "$OUT_DIR" --timeout-s "${SANITIZE_TIMEOUT_S:-600}" 2>&1 | tee "$OUT_DIR/sanitize.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if [ "$COMPILE_TIMES" = 1 ]; then
  timeout "${COMPILE_TIMEOUT_S:-86400}" python3 scripts/compile_times.py 2>&1 | tee "$OUT_DIR/compile_times.log"
fi

if [ "$AMPERE" = 1 ]; then
  BOOK_ARCH=sm_80 timeout "${AMPERE_TIMEOUT_S:-86400}" python3 -m utils.run --toc --scratch "$OUT_DIR/ampere" \
    2>&1 | tee "$OUT_DIR/ampere.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  tar czf "$OUT_DIR/ampere.tar.gz" -C "$OUT_DIR" ampere 2>/dev/null && rm -rf "$OUT_DIR/ampere"
fi

if [ "$NBVAL" = 1 ]; then
  nbs=${NBVAL_NOTEBOOKS:-$(python3 -c "from utils.stamp import toc_notebooks; print(' '.join(map(str, toc_notebooks())))")}
  # shellcheck disable=SC2086
  # nbval re-executes to verify; its records go to a scratch folder, not over the stored ones.
  BOOK_RESULTS=$(mktemp -d) timeout "${NBVAL_TIMEOUT_S:-86400}" python3 -m pytest -q -p no:cacheprovider \
    --nbval-lax --nbval-current-env $nbs \
    2>&1 | tee "$OUT_DIR/nbval.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if [ "$PACK_CACHE" = 1 ] && [ -d "$BOOK_CACHE_DIR" ]; then
  tar czf "$OUT_DIR/kernel_cache.tar.gz" -C "$(dirname "$BOOK_CACHE_DIR")" "$(basename "$BOOK_CACHE_DIR")" 2>/dev/null || true
fi

exit $status
