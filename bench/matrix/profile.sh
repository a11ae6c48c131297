#!/usr/bin/env bash
# On the NVIDIA machine (as scripts/bench-mma.sh): Nsight Compute on one launch of
# gemm_f16_mma and of a variant, at 4096^3. Output: $OUT/ncu_*.txt
set -u
B=target/gpu-bundle
for v in gemm_f16_mma gemm_f16_mma_v8; do
  d=$OUT/k_$v; mkdir -p $d
  cp $B/kernels/$v.* $d/
  python3 -c "import json; json.dump({'$v': {'M':4096,'N':4096,'K':4096}}, open('$d/plan.json','w'))"
  ncu --clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis_Tables $B/rocmc-gpu-check bench $d $d/plan.json --reps 2 > $OUT/ncu_$v.txt 2>&1
  grep -E "Registers Per|Achieved Occupancy|Theoretical Occupancy|Stall|stall|Duration|Compute \(SM\) Throughput|Memory Throughput|Bank|bank|Block Limit" $OUT/ncu_$v.txt | head -40
  echo ====
done
