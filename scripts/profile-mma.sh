#!/usr/bin/env bash
# On the NVIDIA machine: profiles rocmc's mma kernels with Nsight Compute
# (one launch each at the plan's sizes), to see where a GEMM's time goes.
# Input: the bundle of scripts/gpu-bundle.sh.
#   scripts/profile-mma.sh [--full|--l2|--sass] BUNDLE OUT KERNEL...
# --full (the default): Nsight Compute's full set, the stall counts and the
#   SASS (KERNEL.ncu.txt, KERNEL.stalls.txt, KERNEL.sass);
# --l2: L2 requests and sectors, tensor-pipe activity and stall counts
#   (KERNEL.l2.txt), summarised at the end;
# --sass: warp-stall samples per SASS instruction (KERNEL.source.csv and
#   its .gz).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=full
case ${1:-} in --full | --l2 | --sass) mode=${1#--}; shift ;; esac
bundle=$1 out=$2
shift 2
mkdir -p "$out"
stalls=smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_lg_throttle
l2=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_requests_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_tag_requests.sum,lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
for k in "$@"; do
  dir=$(mktemp -d)
  cp "$bundle/kernels/$k.toml" "$bundle/kernels/$k.ptx" "$dir/"
  run=("$bundle/rocmc-gpu-check" bench "$dir" bench/matrix/plan.json --reps 1)
  case $mode in
    full)
      ptxas -arch sm_90 "$dir/$k.ptx" -o "$dir/$k.cubin" && cuobjdump -sass "$dir/$k.cubin" > "$out/$k.sass"
      ncu --set full -k regex:gemm -c 1 --print-details all "${run[@]}" > "$out/$k.ncu.txt" 2>&1
      ncu --metrics "$stalls,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum" \
        -k regex:gemm -c 1 "${run[@]}" > "$out/$k.stalls.txt" 2>&1
      ;;
    l2)
      ncu --metrics "$l2,$stalls,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" \
        -k regex:gemm -c 1 "${run[@]}" > "$out/$k.l2.txt" 2>&1
      ;;
    sass)
      ncu --section WarpStateStats --section SourceCounters -k regex:gemm -c 1 \
        --page source --csv --print-source sass "${run[@]}" > "$out/$k.source.csv" 2> "$out/$k.source.log"
      gzip -kf "$out/$k.source.csv"
      ;;
  esac
  rm -rf "$dir"
done
if [ "$mode" = l2 ]; then
  for k in "$@"; do
    echo "== $k"
    grep -E "^\s+(gpu__|sm__|lts__|smsp__)" "$out/$k.l2.txt" | awk '{print $1, $(NF)}'
  done
fi
