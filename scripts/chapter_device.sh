#!/usr/bin/env bash
# One chapter on the GPU host, in two calls of at most 10 minutes (a warm host keeps the build cache between them):
#   scripts/chapter_device.sh run NOTEBOOK "TESTS"        its GPU tests, then the notebook executed (stamped, its
#                                                         record written)
#   scripts/chapter_device.sh verify NOTEBOOK "FAMILIES"  compute-sanitizer over the chapter's op families
#                                                         (scripts/sanitize.py), then nbval re-executing it
#   scripts/chapter_device.sh land "NOTEBOOKS" "FAMILIES" ["TESTS"]
#                                                         both in one call, for a host that goes cold between calls:
#                                                         the notebooks executed, nbval re-executing them (on the
#                                                         compile cache the run left), then TESTS and the sanitizer;
#                                                         $OUT gets book_outputs.tar.gz, logs.tar.gz and (PACK_CACHE=1)
#                                                         kernel_cache.tar.gz: three files, whatever the logs
# Everything lands in $OUT (gpu_session.sh's logs and tarball). Limits: RUN_TIMEOUT_S, TEST_TIMEOUT_S, CELL_TIMEOUT_S,
# SANITIZE_TIMEOUT_S (per tool), NBVAL_TIMEOUT_S, CHECK_TIMEOUT_S (land's sanitizer + tests); PACK_CACHE=1 brings the compile cache back (gpu_session.sh --pack-cache).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
usage() { echo "usage: scripts/chapter_device.sh run NOTEBOOK \"TESTS\" | verify NOTEBOOK \"FAMILIES\"" \
  "| land \"NOTEBOOKS\" \"FAMILIES\" [\"TESTS\"]" >&2; exit 2; }
[ $# -eq 3 ] || { [ $# -eq 4 ] && [ "$1" = land ]; } || usage
case "$1" in
  run)
    RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-330} TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-180} bash scripts/gpu_session.sh --tests-first \
      --test-args "$3 -q --maxfail=10" --run "$2 --allow-errors --cell-timeout ${CELL_TIMEOUT_S:-280}" --out "$OUT" \
      ${PACK_CACHE:+--pack-cache} ;;
  verify)
    SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-50} NBVAL_NOTEBOOKS="$2" \
      bash scripts/gpu_session.sh --sanitize "$3" --nbval --out "$OUT" ;;
  land)
    mkdir -p "$OUT"
    # shellcheck disable=SC2086
    RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-300} NBVAL_TIMEOUT_S=${NBVAL_TIMEOUT_S:-150} NBVAL_NOTEBOOKS="$2" \
      bash scripts/gpu_session.sh --run "$2 --allow-errors --cell-timeout ${CELL_TIMEOUT_S:-280}" --nbval \
      --out "$OUT/land"
    status=$?
    if [ -n "$3" ] || [ -n "${4:-}" ]; then
      SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-50} TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-180} \
        timeout "${CHECK_TIMEOUT_S:-86400}" bash scripts/gpu_session.sh \
        ${3:+--sanitize "$3"} ${4:+--test-args "$4 -q --maxfail=10"} --out "$OUT/check" ${PACK_CACHE:+--pack-cache} \
        || status=1
    fi
    mv "$OUT/land/book_outputs.tar.gz" "$OUT/check/kernel_cache.tar.gz" "$OUT/" 2>/dev/null
    tar czf "$OUT/logs.tar.gz" -C "$OUT" land $( [ -d "$OUT/check" ] && echo check ) && rm -rf "$OUT/land" "$OUT/check"
    exit $status ;;
  *) usage ;;
esac
