#!/usr/bin/env bash
# On the H100: Nsight Compute's stall samples, instruction counts, tensor-pipe
# activity and LDS bank conflicts of one launch of rocmc's unscheduled
# attention (B=4 H=16 S=T=4096 D=128, f16) and of PyTorch SDPA's flash
# backend (FlashAttention-2) at the same shape, side by side.
#   ARCH=sm_90 scripts/gpu-focus.sh build examples/attention.toml     # here
#   bash bench/gpu/runs/h100-attention-profile-2/profile.sh target/gpu-focus $OUT   # there
set -uo pipefail
dir=$1 out=$2
mkdir -p "$out"
m=smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__inst_executed.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
ncu --clock-control none --metrics "$m" -k regex:attention -c 1 \
  "$dir/rocmc-gpu-check" bench "$dir/kernels" bench/gpu/plan.json --reps 1 > "$out/rocmc.txt" 2>&1
cat > "$out/fa2.py" <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
ncu --clock-control none --metrics "$m" -k regex:flash -c 1 python3 "$out/fa2.py" > "$out/fa2.txt" 2>&1
for f in rocmc fa2; do
  echo "== $f"
  grep -E "^\s+(gpu__|sm__|smsp__|l1tex__|launch__)" "$out/$f.txt" | awk '{print $1, $(NF)}'
done
# With --sass: per SASS instruction, warp-stall samples and shared-memory
# wavefronts (ideal and excessive) of rocmc's kernel.
if [ "${3:-}" = --sass ]; then
  ncu --clock-control none --section WarpStateStats --section SourceCounters -k regex:attention -c 1 \
    --page source --csv --print-source sass \
    "$dir/rocmc-gpu-check" bench "$dir/kernels" bench/gpu/plan.json --reps 1 > "$out/rocmc.source.csv" 2> "$out/rocmc.source.log"
  gzip -kf "$out/rocmc.source.csv"
fi
