#!/usr/bin/env bash
# One chapter on the GPU host, in two calls of at most 10 minutes (a warm host keeps the build cache between them):
#   scripts/chapter_device.sh run NOTEBOOK "TESTS"        its GPU tests, then the notebook executed (stamped, its
#                                                         record written)
#   scripts/chapter_device.sh verify NOTEBOOK "FAMILIES"  compute-sanitizer over the chapter's op families
#                                                         (scripts/sanitize.py), then nbval re-executing it
# Everything lands in $OUT (gpu_session.sh's logs and tarball). Limits: RUN_TIMEOUT_S, TEST_TIMEOUT_S, CELL_TIMEOUT_S,
# SANITIZE_TIMEOUT_S (per tool); PACK_CACHE=1 brings the compile cache back (gpu_session.sh --pack-cache).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
usage() { echo "usage: scripts/chapter_device.sh run NOTEBOOK \"TESTS\" | verify NOTEBOOK \"FAMILIES\"" >&2; exit 2; }
[ $# -eq 3 ] || usage
case "$1" in
  run)
    RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-330} TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-180} bash scripts/gpu_session.sh --tests-first \
      --test-args "$3 -q --maxfail=10" --run "$2 --allow-errors --cell-timeout ${CELL_TIMEOUT_S:-280}" --out "$OUT" \
      ${PACK_CACHE:+--pack-cache} ;;
  verify)
    SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-50} NBVAL_NOTEBOOKS="$2" \
      bash scripts/gpu_session.sh --sanitize "$3" --nbval --out "$OUT" ;;
  *) usage ;;
esac
