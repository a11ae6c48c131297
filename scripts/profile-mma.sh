#!/usr/bin/env bash
# On the NVIDIA machine: profiles rocmc's mma kernels with Nsight Compute
# (one launch each at the plan's sizes) and writes their SASS, to see where
# a GEMM's time goes. Input: the bundle of scripts/gpu-bundle.sh.
#   scripts/profile-mma.sh BUNDLE OUT KERNEL...
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1 out=$2
shift 2
mkdir -p "$out"
for k in "$@"; do
  dir=$(mktemp -d)
  cp "$bundle/kernels/$k.toml" "$bundle/kernels/$k.ptx" "$dir/"
  ptxas -arch sm_90 "$dir/$k.ptx" -o "$dir/$k.cubin" && cuobjdump -sass "$dir/$k.cubin" > "$out/$k.sass"
  ncu --set full -k regex:gemm -c 1 --print-details all \
    "$bundle/rocmc-gpu-check" bench "$dir" bench/matrix/plan.json --reps 1 > "$out/$k.ncu.txt" 2>&1
  ncu --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    -k regex:gemm -c 1 "$bundle/rocmc-gpu-check" bench "$dir" bench/matrix/plan.json --reps 1 > "$out/$k.stalls.txt" 2>&1
  rm -rf "$dir"
done
