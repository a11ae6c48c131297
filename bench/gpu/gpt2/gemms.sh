#!/usr/bin/env bash
# GPT-2 small's GEMMs and copies at its prefill sizes (1,024 tokens at
# batch 1 and 8), each kernel file of examples/gpt2 built with several knob
# tables of its default rule, checked against the interpreter and timed
# beside cuBLAS (the GEMMs) and a device copy (the rest).
#
# Where rocmc is built:
#   bash bench/gpu/gpt2/gemms.sh build            # PTX + checker into target/gpt2-gemms
# Where the GPU is:
#   bash bench/gpu/gpt2/gemms.sh run DIR OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
mode=${1:?usage: gemms.sh build | run DIR OUT}
K=examples/gpt2/kernels
# kernel file, N, K of each GEMM of a layer (and the LM head).
GEMMS="linear:2304:768 linear_residual:768:768 linear_gelu:3072:768 linear_residual:768:3072 lm_head:50257:768"
# BM,BN,WM,WN,STAGES of the `matmul-mma` rule.
TABLES="128,256,2,4,4 128,128,2,4,4 128,128,2,2,4 128,128,2,4,3 128,128,2,2,3 64,128,2,4,4 64,128,2,2,4 64,128,1,4,4 64,256,1,4,4 128,64,2,2,4 256,128,4,2,3 64,64,2,2,4"
case "$mode" in
build)
  dir=target/gpt2-gemms
  rm -rf "$dir" && mkdir -p "$dir/kernels"
  cargo build -q -p rocmc
  cargo build -q --release -p rocmc-gpu-check
  echo "{" > "$dir/plan.json"
  for g in $GEMMS; do
    IFS=: read -r file n k <<< "$g"
    stage=Y; [ "$file" = lm_head ] && stage=L
    nk=$n; [ "$file" = lm_head ] && nk=V
    for t in $TABLES; do
      IFS=, read -r bm bn wm wn st <<< "$t"
      for m in 1024 8192; do
        name="${file}_n${n}_k${k}_m${m}_${bm}x${bn}_w${wm}x${wn}_s${st}"
        # One build per table: the larger size's files are copied at the GPU.
        if [ "$m" = 1024 ]; then
          cp "$K/$file.toml" "$dir/kernels/$name.toml"
          target/debug/rocmc build -q --mcpu sm_90 \
            --tune "${stage}_BM=$bm,${stage}_BN=$bn,${stage}_WM=$wm,${stage}_WN=$wn,${stage}_STAGES=$st" \
            "$K/$file.toml" -o "$dir/kernels/$name.ptx" || { rm "$dir/kernels/$name.toml"; continue; }
        fi
        if [ "$file" = lm_head ]; then sz="\"M\": $m, \"V\": $n, \"K\": $k"; else sz="\"M\": $m, \"N\": $n, \"K\": $k"; fi
        echo "\"$name\": {$sz}," >> "$dir/plan.json"
      done
    done
  done
  # The copies, with their default schedules (16 rows of 64 for the heads).
  for t in kv_store merge_heads; do
    sed 's/{D}/64/g' "$K/$t.toml.in" > "$dir/kernels/${t}_d64.toml"
    target/debug/rocmc build -q --mcpu sm_90 "$dir/kernels/${t}_d64.toml" -o "$dir/kernels/${t}_d64.ptx"
  done
  echo "\"kv_store_d64\": {\"B\": 8, \"S\": 1024, \"H\": 12}," >> "$dir/plan.json"
  echo "\"merge_heads_d64\": {\"B\": 8, \"S\": 1024, \"H\": 12}," >> "$dir/plan.json"
  for per in 1 2 4; do
    for th in 128 256; do
      name="layernorm_t${th}_p${per}"
      cp "$K/layernorm.toml" "$dir/kernels/$name.toml"
      target/debug/rocmc build -q --mcpu sm_90 --tune "Y_ROW_THREADS=$th,Y_ROW_PER=$per" "$K/layernorm.toml" -o "$dir/kernels/$name.ptx"
      echo "\"$name\": {\"T\": 8192, \"C\": 768}," >> "$dir/plan.json"
    done
  done
  echo "\"_\": {}}" >> "$dir/plan.json"
  cp target/release/rocmc-gpu-check "$dir/"
  du -sh "$dir"
  ;;
run)
  dir=$2; out=$3
  mkdir -p "$out"
  rc=0
  # The interpreter takes ~10 s a GEMM file (h100-gpt2-gemms-1 checked 64
  # in 600 s): CHECK=0 times without it.
  if [ "${CHECK:-1}" = 1 ]; then
    "$dir/rocmc-gpu-check" check "$dir/kernels" --cases 2 --seed 7 > "$out/check.txt" 2>&1 || rc=1
    tail -3 "$out/check.txt"
  fi
  work=$(mktemp -d)
  cp "$dir"/kernels/* "$work/"
  for f in "$work"/*_m1024_*.ptx; do
    g=${f/_m1024_/_m8192_}; cp "$f" "$g"; cp "${f%.ptx}.toml" "${g%.ptx}.toml"
  done
  "$dir/rocmc-gpu-check" copy > "$out/rocmc.jsonl"
  "$dir/rocmc-gpu-check" bench "$work" "$dir/plan.json" --reps 50 >> "$out/rocmc.jsonl"
  rm -rf "$work"
  python3 - "$out/rocmc.jsonl" > "$out/table.md" <<'PY'
import json, re, sys, torch
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
copy = next(r["gbps"] for r in rows if r["kernel"] == "copy")
def cublas(m, n, k, t=None):
    a = torch.randn(m, k, device="cuda", dtype=torch.half)
    b = torch.randn(k, n, device="cuda", dtype=torch.half)
    c = torch.empty(m, n, device="cuda", dtype=torch.half)
    for _ in range(3): torch.matmul(a, b, out=c)
    ts = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.matmul(a, b, out=c); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return 2 * m * n * k / ts[len(ts) // 2] / 1e9
peer = {}
gemm = lambda r: re.search(r"_m[0-9]+_", r["kernel"]) is not None
print(f"copy: {copy:.0f} GB/s")
print()
print("| kernel | M | N | K | tiles (BM×BN, waves, stages) | rocmc TFLOP/s | cuBLAS TFLOP/s | ratio |")
print("|---|---:|---:|---:|---|---:|---:|---:|")
best = {}
for r in rows:
    if not gemm(r): continue
    s = r["sizes"]; m, k = s["M"], s["K"]; n = s.get("N", s.get("V"))
    r["tflops"] = 2 * m * n * k / r["ms"] / 1e9
    key = (m, n, k)
    if key not in peer: peer[key] = cublas(m, n, k)
    parts = r["kernel"].split("_")
    tiles = " ".join(parts[-3:])
    file = r["kernel"].split("_n")[0]
    ratio = r["tflops"] / peer[key]
    print(f"| {file} | {m} | {n} | {k} | {tiles} | {r['tflops']:.0f} | {peer[key]:.0f} | {ratio:.2f} |")
    b = best.get((file, m, n, k))
    if b is None or r["tflops"] > b[1]: best[(file, m, n, k)] = (tiles, r["tflops"], ratio)
print("\n| kernel | M | N | K | best tiles | TFLOP/s | vs cuBLAS |")
print("|---|---:|---:|---:|---|---:|---:|")
for (f, m, n, k), (t, tf, ra) in best.items():
    print(f"| {f} | {m} | {n} | {k} | {t} | {tf:.0f} | {ra:.2f} |")
print("\n| copy kernel | sizes | ms | GB/s | of copy |")
print("|---|---|---:|---:|---:|")
for r in rows:
    if r["kernel"] == "copy" or gemm(r): continue
    print(f"| {r['kernel']} | {r['sizes']} | {r['ms']:.4f} | {r['gbps']:.0f} | {r['gbps'] / copy:.2f} |")
PY
  # Every table, and on the terminal the best tiles per size and the copies.
  head -1 "$out/table.md"; sed -n '/best tiles/,$p' "$out/table.md"
  echo "check exit code: $rc"
  exit $rc
  ;;
esac
