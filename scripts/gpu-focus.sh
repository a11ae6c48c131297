#!/usr/bin/env bash
# A focused GPU check and benchmark of a few kernel files, for one short
# device call instead of the whole of scripts/bench-gpu.sh.
#
# Where rocmc is built:
#   scripts/gpu-focus.sh build FILE.toml...   # PTX (sm_90) + runtime-only checker into target/gpu-focus
# Where the GPU is (no LLVM, no Rust needed):
#   scripts/gpu-focus.sh run [DIR] [OUT]      # check each against the interpreter, time those
#                                             # bench/gpu/plan.json sizes, with their PyTorch peers
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: gpu-focus.sh build FILE.toml... | run [DIR] [OUT]}
shift
case "$mode" in
build)
  dir=target/gpu-focus
  rm -rf "$dir" && mkdir -p "$dir/kernels"
  cargo build -q -p rocmc
  # Separately: built with rocmc, Cargo would link LLVM into the checker.
  cargo build -q --release -p rocmc-gpu-check
  for f in "$@"; do
    name=$(basename "$f" .toml)
    cp "$f" "$dir/kernels/"
    target/debug/rocmc build -q --mcpu "${ARCH:-sm_90}" "$f" -o "$dir/kernels/$name.ptx"
  done
  scripts/gpu-fills.sh target/debug/rocmc "${ARCH:-sm_90}" "$dir/fill"
  # The launches the runtime must refuse (gpu-check errors).
  mkdir -p "$dir/extra"
  for k in examples/vadd tests/regress/transpose4d_unbounded; do
    target/debug/rocmc build -q --mcpu "${ARCH:-sm_90}" "$k.toml" -o "$dir/extra/$(basename "$k").ptx"
  done
  target/debug/rocmc build -q --mcpu sm_100 examples/vadd.toml -o "$dir/extra/vadd.sm_100.ptx"
  if ldd target/release/rocmc-gpu-check | grep -q libLLVM; then
    echo "gpu-focus: rocmc-gpu-check links LLVM" >&2
    exit 1
  fi
  cp target/release/rocmc-gpu-check "$dir/"
  du -sh "$dir"
  ;;
run)
  dir=${1:-target/gpu-focus}
  out=${2:-${OUT:-target/gpu-focus-out}}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
  rc=0
  "$dir/rocmc-gpu-check" check "$dir/kernels" --cases "${CASES:-6}" --seed "${SEED:-1}" | tee "$out/check.txt" || rc=1
  if [ -d "$dir/extra" ]; then
    "$dir/rocmc-gpu-check" errors "$dir/extra/vadd.ptx" "$dir/extra/vadd.sm_100.ptx" \
      "$dir/extra/transpose4d_unbounded.ptx" | tee "$out/errors.txt" || rc=1
  fi
  # The kernels at hand; NAME_default (an example without its schedule,
  # scripts/strip-schedules.py) and NAME__TAG (another schedule of NAME)
  # run at NAME's sizes, against NAME's peers.
  python3 - "$dir/kernels" "$out/plan-all.json" > "$out/plan.json" <<'EOF'
import json, os, sys
plan = json.load(open("bench/gpu/plan.json"))
names = {f[:-4] for f in os.listdir(sys.argv[1]) if f.endswith(".ptx")}
def base(n):
    n = n.split("__")[0]
    return n[: -len("_default")] if n.endswith("_default") else n
everything = dict(plan)
everything.update({n: plan[base(n)] for n in names if base(n) in plan})
json.dump(everything, open(sys.argv[2], "w"))
print(json.dumps({k: v for k, v in plan.items() if k in {base(n) for n in names}}))
EOF
  "$dir/rocmc-gpu-check" copy | tee "$out/rocmc.jsonl"
  "$dir/rocmc-gpu-check" bench "$dir/kernels" "$out/plan-all.json" --reps "${REPS:-100}" | tee -a "$out/rocmc.jsonl"
  python3 bench/gpu/peers.py "$out/plan.json" "${REPS:-100}" > "$out/peers.jsonl" 2> "$out/peers.log" || echo "peers.py failed: see $out/peers.log"
  python3 bench/gpu/report.py "$out/rocmc.jsonl" "$out/peers.jsonl" "$out/gpu-results.md" | tee "$out/table.txt"
  echo "check exit code: $rc"
  exit $rc
  ;;
*)
  echo "usage: gpu-focus.sh build FILE.toml... | run [DIR] [OUT]" >&2
  exit 2
  ;;
esac
