#!/usr/bin/env bash
# Runs on any machine with an NVIDIA GPU and its driver (no LLVM, no Rust,
# no CUDA toolkit needed): checks every example's PTX against the reference
# interpreter, then times rocmc's kernels and their PyTorch and Triton peers
# on the same GPU and writes bench/gpu-results.md (+ .svg).
#
# Its input is the bundle scripts/gpu-bundle.sh makes where rocmc is built:
#   scripts/gpu-bundle.sh sm_90        # here: PTX of every example + rocmc-gpu-check
#   scripts/bench-gpu.sh [BUNDLE] [OUT] # there (BUNDLE defaults to target/gpu-bundle)
# PyTorch and Triton are needed for the peers only; without them the check
# and rocmc's own timings still run.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-target/gpu-bundle}
out=${2:-${OUT:-target/gpu-out}}
mkdir -p "$out"
bin="$bundle/rocmc-gpu-check"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
echo "== check: every example against the reference interpreter (awkward and random sizes)"
"$bin" check "$bundle/kernels" --cases "${CASES:-6}" --seed "${SEED:-1}" | tee "$out/check.txt"
check_rc=${PIPESTATUS[0]}
echo "== bench: rocmc"
"$bin" copy | tee "$out/rocmc.jsonl"
"$bin" bench "$bundle/kernels" bench/gpu/plan.json --reps "${REPS:-50}" | tee -a "$out/rocmc.jsonl"
echo "== bench: PyTorch and Triton"
if python3 -c "import torch, triton" 2>/dev/null; then
  python3 bench/gpu/peers.py bench/gpu/plan.json "${REPS:-50}" > "$out/peers.jsonl" 2> "$out/peers.log" || echo "peers.py failed: see $out/peers.log"
else
  echo "PyTorch/Triton not installed: peers not run" | tee "$out/peers.log"; : > "$out/peers.jsonl"
fi
python3 bench/gpu/report.py "$out/rocmc.jsonl" "$out/peers.jsonl" "$out/gpu-results.md" | tee "$out/table.txt"
echo "check exit code: $check_rc"
exit $check_rc
