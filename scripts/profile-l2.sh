#!/usr/bin/env bash
# On the NVIDIA machine: L2 request and sector counts, tensor-pipe activity
# and stall samples of chosen kernels of a bundle (one launch each).
#   scripts/profile-l2.sh BUNDLE OUT KERNEL...
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1 out=$2
shift 2
mkdir -p "$out"
m=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_requests_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_tag_requests.sum,lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_dispatch_stall
for k in "$@"; do
  dir=$(mktemp -d)
  cp "$bundle/kernels/$k.toml" "$bundle/kernels/$k.ptx" "$dir/"
  ncu --metrics "$m" -k regex:gemm -c 1 "$bundle/rocmc-gpu-check" bench "$dir" bench/matrix/plan.json --reps 1 > "$out/$k.l2.txt" 2>&1
  rm -rf "$dir"
done
cd "$out" && for f in *.l2.txt; do echo "== $f"; grep -E "^\s+(gpu__|sm__|lts__|smsp__)" "$f" | awk '{print $1, $(NF)}'; done
