#!/usr/bin/env bash
# Tuning batch for a GPU host: the chapters' tune scripts, each under a time cap, then GPU tests; the logs
# and JSON tables are tarred into $OUT/tune.tar.gz after each step (a host's per-command limit can cut
# the run short without losing what finished). See CONTRIBUTING.md, "Tuning".
#   TUNES="name:cap_s:args ..."   which scripts (default: all four chapters 6-9)
#   TESTS="pytest paths"          which tests (default: tests/gpu); TEST_CAP=seconds
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
OUT=${OUT:-$PWD/tune_out}; mkdir -p "$OUT"
L=/tmp/tunelogs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $L/env.log 2>&1
pack() { tar czf "$OUT/tune.tar.gz" -C /tmp tunelogs; }
TUNES=${TUNES:-"ch06_softmax:120:--no-compile ch07_layernorm:120:--no-compile ch08_fusion:70: ch09_quant:110:"}
for spec in $TUNES; do
  IFS=: read -r name cap args <<< "$spec"
  [ -f scripts/tune/$name.py ] || continue
  s=$(date +%s)
  OUT=$L timeout $cap python3 scripts/tune/$name.py $args > $L/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - s )) s" | tee -a $L/summary.log
  pack
done
s=$(date +%s)
timeout ${TEST_CAP:-130} python3 -m pytest -q -rfE -p no:cacheprovider ${TESTS:-tests/gpu} > $L/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - s )) s" | tee -a $L/summary.log
tail -3 $L/tests.log
pack
