#!/usr/bin/env bash
# Chapter 13 on the GPU host, in two calls of at most 10 minutes (a warm host keeps the build cache between them):
#   scripts/ch13_device.sh run     its GPU tests, then the notebook executed (stamped, its record written)
#   scripts/ch13_device.sh verify  compute-sanitizer over the chapter's two op families, then nbval re-executing it
# Everything lands in $OUT (gpu_session.sh's logs and tarball).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
case "${1:-}" in
  run)
    RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-330} TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-180} bash scripts/gpu_session.sh --tests-first \
      --test-args "tests/gpu/test_w4a16_sm90.py tests/gpu/test_gemm_sm90.py -q --maxfail=10" \
      --run "chapters/13-cutlass.ipynb --allow-errors --cell-timeout 280" --out "$OUT" ;;
  verify)
    SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-50} NBVAL_NOTEBOOKS=chapters/13-cutlass.ipynb \
      bash scripts/gpu_session.sh --sanitize "w4a16_wgmma gemm_sm90" --nbval --out "$OUT" ;;
  *) echo "usage: scripts/ch13_device.sh run|verify" >&2; exit 2 ;;
esac
