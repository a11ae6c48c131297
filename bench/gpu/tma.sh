#!/usr/bin/env bash
# Hopper's tensor memory accelerator on the lent GPU (bench/gpu/runs/h100-tma-*):
# its copies element by element (`rocmc-gpu-check tma`, and with --perturb,
# which must fail), the wgmma layouts, then every warpgroup GEMM with
# cp.async and with `tma=1`, checked against the interpreter at odd sizes
# and timed beside cuBLAS (and Triton) at 4096³ (8192³ for `_8k`).
#
# Where rocmc is built:
#   V=bench/gpu/variants
#   ARCH=sm_90a scripts/gpu-focus.sh build examples/gemm_f16_wgmma.toml \
#     $V/gemm_{bf16_wgmma,f16_wgmma_nn,f16_wgmma_tn,fp8_wgmma,i8_wgmma}.toml $V/*__tma.toml
#   # and gemm_f16_wgmma_8k: the example renamed (its kernel name is the file's).
# Where the GPU is:
#   bench/gpu/tma.sh target/gpu-focus OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-target/gpu-focus}
out=${2:-${OUT:-target/tma-out}}
mkdir -p "$out"
"$dir/rocmc-gpu-check" tma > "$out/tma.txt" 2>&1; echo "tma check exit code: $?" >> "$out/tma.txt"
"$dir/rocmc-gpu-check" tma --perturb > "$out/tma-perturb.txt" 2>&1; echo "tma --perturb exit code (1 expected): $?" >> "$out/tma-perturb.txt"
"$dir/rocmc-gpu-check" wgmma > "$out/wgmma.txt" 2>&1; echo "wgmma check exit code: $?" >> "$out/wgmma.txt"
CASES=${CASES:-6} REPS=${REPS:-50} scripts/gpu-focus.sh run "$dir" "$out/gemm" > "$out/gemm.txt" 2>&1
cat "$out/tma.txt" "$out/tma-perturb.txt"
tail -3 "$out/wgmma.txt"
grep -c " ok$" "$out/gemm/check.txt"; grep MISMATCH "$out/gemm/check.txt" | grep -v fp8
cat "$out/gemm/table.txt"
