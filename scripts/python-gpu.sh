#!/usr/bin/env bash
# The Python API on an NVIDIA GPU beside PyTorch: `build` here (kernels as
# PTX, the runtime-only extension, the Rust launcher's binary), `run` there
# (bench/python/torch_gpu.py: correctness on CUDA tensors, on PyTorch's
# default and a side stream, and the host cost of a launch from Python,
# from PyTorch and from Rust).
#   ARCH=sm_90 scripts/python-gpu.sh build            -> target/python-gpu
#   scripts/python-gpu.sh run target/python-gpu OUT   (on the GPU machine)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
build)
  arch=${ARCH:-sm_90}
  out=target/python-gpu
  rm -rf "$out" && mkdir -p "$out/pkg/rocmc" "$out/ptx"
  cargo build -q -p rocmc
  for k in vadd saxpy softmax layernorm; do
    target/debug/rocmc build --mcpu "$arch" --emit asm "examples/$k.toml" -o "$out/ptx/$k.ptx"
  done
  # No compiler in the extension: no LLVM, 2 MB.
  cargo build -q --release -p rocmc-python --no-default-features
  cargo build -q --release -p vadd-app
  cp python/rocmc/*.py "$out/pkg/rocmc/"
  cp target/release/lib_rocmc.so "$out/pkg/rocmc/_rocmc.abi3.so"
  cp target/release/vadd-app bench/python/torch_gpu.py "$out/"
  du -sh "$out"
  ;;
run)
  dir=$2 out=$3
  mkdir -p "$out"
  PYTHONPATH="$dir/pkg" python3 "$dir/torch_gpu.py" "$dir" 2>&1 | tee "$out/console.txt"
  ;;
*)
  echo "usage: $0 build | run DIR OUT" >&2
  exit 2
  ;;
esac
