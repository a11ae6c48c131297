#!/usr/bin/env bash
# Where rocmc is built: the smaller bundle scripts/bench-remote.sh needs on
# the GPU machine (the worker, the runtime-only checker, every example as
# PTX and vadd for the CPU device), without a release build of the
# compiler: the PTX does not depend on the compiler's build profile, so the
# debug `rocmc` the tests built serves (ROCMC names another).
#   scripts/remote-bundle.sh [sm_90]   -> target/gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}
rocmc=${ROCMC:-target/debug/rocmc}
dir=target/gpu-bundle
[ -x "$rocmc" ] || cargo build -q -p rocmc
cargo build -q --release -p rocmc-gpu-check -p rocmc-worker
rm -rf "$dir" && mkdir -p "$dir/kernels" "$dir/cpu"
for f in examples/*.toml; do
  name=$(basename "$f" .toml)
  if "$rocmc" build -q --mcpu "$arch" "$f" -o "$dir/kernels/$name.ptx" 2> "$dir/build.err"; then
    cp "$f" "$dir/kernels/"
  elif grep -q '"mma(' "$f"; then
    # Matrix-core examples are shaped for one family's instructions.
    echo "remote-bundle: $name skipped: $(grep -m1 'error' "$dir/build.err")" >&2
  else
    cat "$dir/build.err" >&2
    exit 1
  fi
done
rm -f "$dir/build.err"
for exe in rocmc-gpu-check rocmc-worker; do
  if ldd "target/release/$exe" | grep -q libLLVM; then
    echo "remote-bundle: $exe links LLVM; the GPU machine has none" >&2
    exit 1
  fi
  cp "target/release/$exe" "$dir/"
done
cp examples/vadd.toml "$dir/cpu/"
"$rocmc" build -q --mcpu x86-64 examples/vadd.toml -o "$dir/cpu/vadd.so"
du -sh "$dir"
