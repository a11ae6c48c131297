#!/usr/bin/env bash
# GPT-2 small prefill (1,024 tokens, batch 1 and 8) and decoding (batch 1
# and 16) with several builds of examples/gpt2 (GPT2_TUNE knob tables),
# each with its per-kernel profile at batch 8:
#   bash bench/gpu/gpt2/variants.sh DIR_OF_gpt2-* OUT
set -euo pipefail
DIR=$1; OUT=$2
mkdir -p "$OUT/w"
python3 - "$OUT/w" <<'PY'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config()).half().save_pretrained(sys.argv[1])
g = torch.Generator().manual_seed(2)
for b, s in ((1, 1024), (8, 1024), (1, 128), (16, 128)):
    ids = torch.randint(0, 50257, (b, s), generator=g)
    open(f"{sys.argv[1]}/p{b}_{s}.txt", "w").write("".join(",".join(map(str, r)) + "\n" for r in ids.tolist()))
PY
W="$OUT/w/model.safetensors"
for bin in "$DIR"/gpt2-*; do
  v=$(basename "$bin")
  for b in 1 8; do
    "$bin" --weights "$W" --device cuda:0 --ids-file "$OUT/w/p${b}_1024.txt" --batch $b --new 1 --warmup 1 --runs 5 > "$OUT/$v-prefill-b$b.txt"
  done
  for b in 1 16; do
    "$bin" --weights "$W" --device cuda:0 --ids-file "$OUT/w/p${b}_128.txt" --batch $b --new 65 --warmup 1 --runs 3 > "$OUT/$v-decode-b$b.txt"
  done
  "$bin" --weights "$W" --device cuda:0 --ids-file "$OUT/w/p8_1024.txt" --batch 8 --new 1 --profile > "$OUT/$v-profile-b8.txt"
done
rm -rf "$OUT/w"
echo "| build | prefill b1 ms | prefill b8 ms | decode b1 ms/step | decode b16 ms/step |"
echo "|---|---:|---:|---:|---:|"
for bin in "$DIR"/gpt2-*; do
  v=$(basename "$bin")
  p1=$(grep -o "in [0-9.]* ms (median" "$OUT/$v-prefill-b1.txt" | grep -o "[0-9.]*" | head -1)
  p8=$(grep -o "in [0-9.]* ms (median" "$OUT/$v-prefill-b8.txt" | grep -o "[0-9.]*" | head -1)
  d1=$(grep -o "([0-9.]* ms per step" "$OUT/$v-decode-b1.txt" | grep -o "[0-9.]*" | head -1)
  d16=$(grep -o "([0-9.]* ms per step" "$OUT/$v-decode-b16.txt" | grep -o "[0-9.]*" | head -1)
  echo "| $v | $p1 | $p8 | $d1 | $d16 |"
done
for bin in "$DIR"/gpt2-*; do echo "== $(basename "$bin") profile b8"; grep -A12 "time per kernel" "$OUT/$(basename "$bin")-profile-b8.txt"; done
