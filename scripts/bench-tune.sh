#!/usr/bin/env bash
# Runs on the NVIDIA GPU machine (no LLVM, no Rust needed): measures every
# tuning plan of the bundle from scripts/tune-bundle.sh with
# `rocmc-worker measure`, and times the PyTorch and Triton peers at the
# same sizes. Writes under OUT: plans/<tag>/results.json, measure logs,
# peers-<n>.jsonl. scripts/tune-report.sh turns them into
# bench/tuning-results.md where rocmc is built.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-target/tune-bundle}
out=${2:-${OUT:-target/tune-out}}
mkdir -p "$out/plans"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
rc=0
for p in "$bundle"/plans/*/; do
  tag=$(basename "$p")
  echo "== measure $tag"
  start=$(date +%s%N)
  "$bundle/rocmc-worker" measure "$p" --device cuda:0 --show 5 > "$out/$tag.txt" 2> "$out/$tag.log" || rc=1
  end=$(date +%s%N)
  tail -8 "$out/$tag.txt"
  echo "$tag $(( (end - start) / 1000000 ))" >> "$out/measure-ms.txt"
  mkdir -p "$out/plans/$tag" && cp "$p/results.json" "$out/plans/$tag/" 2>/dev/null || rc=1
done
echo "== peers (PyTorch, Triton) at the same sizes"
if python3 -c "import torch, triton" 2>/dev/null; then
  for i in 0 1; do
    python3 - "$i" > "$out/peer-plan-$i.json" <<'PY'
import json, sys
i = int(sys.argv[1])
plan = json.load(open("bench/tuning/plan.json"))
print(json.dumps({k.replace("_tunable", ""): v[i] for k, v in plan.items()}))
PY
    python3 bench/gpu/peers.py "$out/peer-plan-$i.json" "${REPS:-50}" > "$out/peers-$i.jsonl" 2>> "$out/peers.log" || rc=1
  done
else
  echo "PyTorch/Triton not installed: peers not run" | tee "$out/peers.log"
fi
exit $rc
