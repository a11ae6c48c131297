#!/usr/bin/env bash
# On the NVIDIA machine: checks rocmc's mma.sync GEMM (examples/gemm_f16_mma.toml)
# against the reference interpreter at awkward sizes, then times it at
# 4096^3 beside cuBLAS HGEMM (PyTorch) and Triton's tl.dot, and beside
# rocmc's fp32 SGEMM, and times the schedule variants of
# bench/matrix/variants/ (checked too). Input: the bundle of
# scripts/gpu-bundle.sh.
#   scripts/bench-mma.sh [BUNDLE] [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-target/gpu-bundle}
out=${2:-${OUT:-target/mma-out}}
mkdir -p "$out" "$out/kernels"
bin="$bundle/rocmc-gpu-check"
cp "$bundle"/kernels/gemm_f16_mma*.* "$bundle"/kernels/matmul_sgemm.* "$out/kernels/"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
# Registers and spills of each kernel, from NVIDIA's assembler.
if command -v ptxas > /dev/null; then
  for f in "$out"/kernels/*.ptx; do
    echo "$(basename "$f" .ptx): $(ptxas -v -arch sm_90 "$f" -o /dev/null 2>&1 | grep -o 'Used [0-9]* registers\|[0-9]* bytes spill stores' | tr '\n' ' ')"
  done | tee "$out/registers.txt"
fi
echo "== check against the reference interpreter"
"$bin" check "$out/kernels" --cases "${CASES:-6}" --seed "${SEED:-1}" | tee "$out/check.txt"
rc=${PIPESTATUS[0]}
echo "== bench"
"$bin" bench "$out/kernels" bench/matrix/plan.json --reps "${REPS:-50}" | tee "$out/rocmc.jsonl"
# The peers once, not once per variant.
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); json.dump({k: v for k, v in p.items() if k in ("gemm_f16_mma", "matmul_sgemm")}, open(sys.argv[2], "w"))' bench/matrix/plan.json "$out/peers-plan.json"
python3 bench/gpu/peers.py "$out/peers-plan.json" "${REPS:-50}" > "$out/peers.jsonl" 2> "$out/peers.log" || echo "peers failed: see $out/peers.log"
python3 bench/matrix/report.py "$out/rocmc.jsonl" "$out/peers.jsonl" "$out/mma-results.md" | tee "$out/table.txt"
exit $rc
