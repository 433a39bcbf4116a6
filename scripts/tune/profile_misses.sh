#!/usr/bin/env bash
# Nsight Compute on the kernels that miss their bars and on their peers (see profile_misses.py): one
# process, warm launches only (--profile-from-start off), --clock-control none (the card's clocks are left
# as they are). Reports under $OUT: ncu_misses.ncu-rep, ncu_details.txt (the sections, per kernel),
# ncu_raw.csv (every metric), ncu_source_<kernel>.csv (per-SASS-instruction stall samples) and
# ncu_summary.txt (profile_summary.py: time, DRAM, occupancy, issue rate, stall reasons, hottest SASS).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/tune_out}; mkdir -p "$OUT"
REGEX=${NCU_REGEX:-"w4a16|softmax_v|layernorm_v|rmsnorm_v|gemv|gemm|Kernel|cutlass|sm90"}
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv > "$OUT/clocks.txt" 2>&1
ncu --profile-from-start off --clock-control none --kernel-name-base demangled -k "regex:$REGEX" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no \
    -o "$OUT/ncu_misses" -f python3 scripts/tune/profile_misses.py > "$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?" >> "$OUT/ncu_run.log"
ncu -i "$OUT/ncu_misses.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/ncu_misses.ncu-rep" --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
for k in w4a16_marlin w4a16_marlin_v4 w4a16_gemv_v1_magic softmax_v10 layernorm_v6 rmsnorm_v4 layernorm_v8 rmsnorm_v6; do
  ncu -i "$OUT/ncu_misses.ncu-rep" --page source --csv --print-source sass -k "regex:$k" -c 1 \
      > "$OUT/ncu_source_$k.csv" 2>&1
done
python3 scripts/tune/profile_summary.py "$OUT" > "$OUT/ncu_summary.txt" 2>&1
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv >> "$OUT/clocks.txt" 2>&1
