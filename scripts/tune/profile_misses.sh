#!/usr/bin/env bash
# Nsight Compute on the kernels that miss their bars (see profile_misses.py): one process, so each
# source compiles once. --clock-control none: the card's clocks are left as they are.
# Report: $OUT/ncu_misses.txt (and ncu_misses.ncu-rep).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/tune_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.applications.graphics --format=csv > "$OUT/clocks.txt" 2>&1
ncu --clock-control none --kernel-name-base demangled \
    -k "regex:w4a16_gemv_v1|w4a16_marlin|softmax_v6|layernorm_v6|rmsnorm_v4" -c 18 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats -o "$OUT/ncu_misses" -f \
    python3 scripts/tune/profile_misses.py > "$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?" >> "$OUT/ncu_run.log"
ncu -i "$OUT/ncu_misses.ncu-rep" --page details > "$OUT/ncu_misses.txt" 2>&1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.applications.graphics --format=csv >> "$OUT/clocks.txt" 2>&1
