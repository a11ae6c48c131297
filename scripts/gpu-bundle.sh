#!/usr/bin/env bash
# Where rocmc is built: compiles every example to PTX for one NVIDIA
# processor (default sm_90) and puts it, the kernel files and the
# runtime-only checker (no LLVM in it) into target/gpu-bundle, which
# scripts/bench-gpu.sh runs on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}
dir=target/gpu-bundle
rm -rf "$dir" && mkdir -p "$dir/kernels"
cargo build -q --release -p rocmc -p rocmc-gpu-check
# Every example, and the variants the benchmark compares with them.
for f in examples/*.toml bench/gpu/variants/*.toml; do
  name=$(basename "$f" .toml)
  cp "$f" "$dir/kernels/"
  target/release/rocmc build -q --mcpu "$arch" "$f" -o "$dir/kernels/$name.ptx"
done
cp target/release/rocmc-gpu-check "$dir/"
du -sh "$dir"
