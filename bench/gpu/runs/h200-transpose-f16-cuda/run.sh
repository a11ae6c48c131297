#!/usr/bin/env bash
# On the GPU machine: bash bench/gpu/runs/h200-transpose-f16-cuda/run.sh $OUT
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-/tmp}; shift
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v study.cu -lcuda -o "$out/study" 2> "$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 1; }
grep -E "Compiling|registers|spill" "$out/ptxas.txt" | head -40 > "$out/regs.txt" || true
# Registers and spills of rocmc's PTX (ptxas is the driver's compiler's twin).
for spec in "$@"; do
  f=$(echo "$spec" | cut -d: -f2)
  printf '%s: ' "$f"; ptxas -arch=sm_90 -v "$f" -o /dev/null 2>&1 | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | paste -sd' '
done | tee "$out/rocmc-regs.txt"
"$out/study" "$@" | tee "$out/table.md"
# With NCU_KERNELS set (a regex of kernel names): Nsight Compute on the first
# launch of each matching kernel (clocks left alone), for the instruction
# counts and the stall reasons.
if [ -n "${NCU_KERNELS:-}" ]; then
  ncu --clock-control none --kernel-id "::regex:${NCU_KERNELS}:1" \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
    "$out/study" "$@" > "$out/ncu.txt" 2>&1 || true
  grep -E "^  [a-zA-Z_].*\(|Executed Instructions |Memory Throughput|DRAM Throughput|Duration|Stall|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" "$out/ncu.txt" | head -80
fi
