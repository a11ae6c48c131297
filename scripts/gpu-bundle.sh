#!/usr/bin/env bash
# Where rocmc is built: compiles every example to PTX for one NVIDIA
# processor (default sm_90) and puts it, the kernel files and the
# runtime-only checker, the worker and the example application (no LLVM in
# any of them)
# into target/gpu-bundle, which
# scripts/bench-gpu.sh runs on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}
dir=target/gpu-bundle
rm -rf "$dir" && mkdir -p "$dir/kernels"
# ROCMC=target/debug/rocmc uses a debug build (same output, no release
# link of LLVM on a small machine).
rocmc=${ROCMC:-target/release/rocmc}
[ -n "${ROCMC:-}" ] || cargo build -q --release -p rocmc
# Separately: built together with rocmc, Cargo would unify the linker
# crate's features and link LLVM into the runtime-only binaries.
cargo build -q --release -p rocmc-gpu-check -p vadd-app -p rocmc-worker
# Every example and the variants the benchmark compares with them, built
# as users build them (contraction into FMAs on, results within the float
# tolerance of the interpreter's); and the regression kernels, checked
# against the interpreter and not timed, built with --fp-contract off: some
# turn float results into integers, where one FMA's rounding can move a
# value across an integer boundary and no tolerance applies. The
# convolution and gather test kernels are bundled too: the plan times some
# of them (conv1d, gathered_tile, ...), and all are checked on the GPU.
for f in examples/*.toml bench/gpu/variants/*.toml bench/matrix/variants/*.toml tests/regress/*.toml tests/conv/*.toml tests/gather/*.toml; do
  name=$(basename "$f" .toml)
  cp "$f" "$dir/kernels/"
  contract=fast
  case "$f" in tests/regress/*) contract=off ;; esac
  if ! "$rocmc" build -q --mcpu "$arch" --fp-contract "$contract" "$f" -o "$dir/kernels/$name.ptx" 2> "$dir/build.err"; then
    # Matrix-core examples are shaped for one family's instructions.
    if grep -q '"mma(' "$f"; then
      echo "gpu-bundle: $name skipped: $(grep -m1 'error' "$dir/build.err")" >&2
      rm -f "$dir/kernels/$name.toml"
      continue
    fi
    cat "$dir/build.err" >&2
    exit 1
  fi
done
# Plan entries that are another file at other sizes (bench/gpu/aliases.txt):
# the file renamed, so every entry of bench/gpu/plan.json has a kernel here.
grep -v '^#' bench/gpu/aliases.txt | while read -r name base; do
  [ -n "$name" ] || continue
  sed "s/^name = \"[^\"]*\"/name = \"$name\"/" "$base" > "$dir/kernels/$name.toml"
  if ! "$rocmc" build -q --mcpu "$arch" "$dir/kernels/$name.toml" -o "$dir/kernels/$name.ptx" 2> "$dir/build.err"; then
    echo "gpu-bundle: $name skipped: $(grep -m1 'error' "$dir/build.err")" >&2
    rm -f "$dir/kernels/$name.toml"
  fi
done
rm -f "$dir/build.err"
# The benchmark's inputs are drawn on the GPU (bench/gpu/fill.toml.in).
scripts/gpu-fills.sh "$rocmc" "$arch" "$dir/fill"
for exe in rocmc-gpu-check vadd-app rocmc-worker; do
  if ldd "target/release/$exe" | grep -q libLLVM; then
    echo "gpu-bundle: $exe links LLVM; the GPU machine has none" >&2
    exit 1
  fi
  cp "target/release/$exe" "$dir/"
done
# vadd for the CPU (a shared object needing only libc and libm): the
# remote path's costs on the worker's CPU device beside its GPU.
mkdir -p "$dir/cpu"
cp examples/vadd.toml "$dir/cpu/"
"$rocmc" build -q --mcpu x86-64 examples/vadd.toml -o "$dir/cpu/vadd.so"
# PTX for a GPU newer than the one at hand: the runtime must refuse it.
mkdir -p "$dir/extra"
"$rocmc" build -q --mcpu sm_100 examples/vadd.toml -o "$dir/extra/vadd.sm_100.ptx"
du -sh "$dir"
