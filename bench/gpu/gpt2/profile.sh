#!/usr/bin/env bash
# Nsight Compute on the GEMMs of a GPT-2 small prefill (1024 tokens, batch
# B) run by examples/gpt2: bash bench/gpu/gpt2/profile.sh GPT2_BINARY OUT [B]
set -euo pipefail
BIN=$1; OUT=$2; B=${3:-1}
mkdir -p "$OUT/w"
python3 - "$OUT/w" "$B" <<'PY'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config()).half().save_pretrained(sys.argv[1])
g = torch.Generator().manual_seed(2)
ids = torch.randint(0, 50257, (int(sys.argv[2]), 1024), generator=g)
open(sys.argv[1] + "/prompts.txt", "w").write("".join(",".join(map(str, r)) + "\n" for r in ids.tolist()))
PY
ncu --kernel-name regex:'^(linear|linear_gelu|linear_residual|lm_head|attention_d64)$' --launch-count 5 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats \
  "$BIN" --weights "$OUT/w/model.safetensors" --device cuda:0 --ids-file "$OUT/w/prompts.txt" --batch "$B" --new 1 \
  > "$OUT/ncu.txt" 2>&1 || true
rm -rf "$OUT/w"
grep -E "^  [a-z_0-9]+ \(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Block Size|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A" "$OUT/ncu.txt" | head -150
