#!/usr/bin/env bash
# Tuning batch for a GPU host: the chapters' tune scripts, each under a time cap, then GPU tests; the logs
# and JSON tables are tarred into $OUT/tune.tar.gz after each step (a host's per-command limit can cut
# the run short without losing what finished). See CONTRIBUTING.md, "Tuning".
#   TUNES="name:cap_s:args; ..."  which scripts, ';'-separated (args may hold spaces; default: chapters 6-9)
#   TESTS="pytest paths"          which tests (default: tests/gpu); TEST_K="-k expression"; TEST_CAP=seconds
#   TESTS_FIRST=1                 the tests before the tuning scripts (new kernels: fail fast)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
OUT=${OUT:-$PWD/tune_out}; mkdir -p "$OUT"
L=/tmp/tunelogs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $L/env.log 2>&1
pack() { tar czf "$OUT/tune.tar.gz" -C /tmp tunelogs; }
TUNES=${TUNES:-"ch06_softmax:120:--no-compile; ch07_layernorm:120:--no-compile; ch08_fusion:70:; ch09_quant:110:"}
run_tests() {
  local s; s=$(date +%s)
  # shellcheck disable=SC2086
  timeout ${TEST_CAP:-130} python3 -m pytest -q -rfE -p no:cacheprovider ${TESTS:-tests/gpu} \
      ${TEST_K:+-k "$TEST_K"} > $L/tests.log 2>&1
  echo "tests rc=$? $(( $(date +%s) - s )) s" | tee -a $L/summary.log
  tail -3 $L/tests.log
  pack
}
[ "${TESTS_FIRST:-0}" = 1 ] && run_tests
IFS=';' read -ra SPECS <<< "$TUNES"
for spec in "${SPECS[@]}"; do
  IFS=: read -r name cap args <<< "$(echo "$spec" | sed 's/^ *//')"
  [ -f scripts/tune/$name.py ] || continue
  s=$(date +%s)
  # shellcheck disable=SC2086
  OUT=$L timeout $cap python3 scripts/tune/$name.py $args > $L/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - s )) s" | tee -a $L/summary.log
  pack
done
[ "${TESTS_FIRST:-0}" = 1 ] || run_tests
