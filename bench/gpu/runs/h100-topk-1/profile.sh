#!/usr/bin/env bash
# ncu on the row kernels: where softmax's and topk_k64's time goes.
set -uo pipefail
b=target/gpu-focus out=$OUT
stalls=smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_no_instructions
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed
for k in softmax softmax_online topk topk_k64; do
  d=$(mktemp -d); cp $b/kernels/$k.toml $b/kernels/$k.ptx $d/
  ptxas -v -arch sm_90 $d/$k.ptx -o $d/$k.cubin > $out/$k.ptxas.txt 2>&1
  ncu --metrics "$m,$stalls" -c 3 $b/rocmc-gpu-check bench $d bench/gpu/plan.json --reps 1 > $out/$k.ncu.txt 2>&1
done
for k in softmax softmax_online topk topk_k64; do echo "== $k"; grep -E "^\s+(gpu__time|dram__|sm__warps|launch__reg|launch__occ|smsp__inst|lts__|sm__thr|smsp__pcsamp)" $out/$k.ncu.txt | awk '{print $1, $(NF)}' | sort | uniq | head -40; grep -E "registers|spill" $out/$k.ptxas.txt | head -6; done
