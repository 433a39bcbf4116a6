#!/usr/bin/env bash
# Chapter 13 on the GPU host in two calls (scripts/chapter_device.sh):
#   scripts/ch13_device.sh run     its GPU tests, then the notebook executed (stamped, its record written)
#   scripts/ch13_device.sh verify  compute-sanitizer over the chapter's two op families, then nbval re-executing it
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  run) exec bash scripts/chapter_device.sh run chapters/13-cutlass.ipynb "tests/gpu/test_w4a16_sm90.py tests/gpu/test_gemm_sm90.py" ;;
  verify) exec bash scripts/chapter_device.sh verify chapters/13-cutlass.ipynb "w4a16_wgmma gemm_sm90" ;;
  *) echo "usage: scripts/ch13_device.sh run|verify" >&2; exit 2 ;;
esac
