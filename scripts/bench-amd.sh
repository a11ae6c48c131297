#!/usr/bin/env bash
# rocmc's AMD code against Triton's AMD backend, with no AMD GPU: both
# compile the same computations for gfx942, gfx950 and gfx1100, and the same
# reader (bench/amd/isa.py: llvm-readobj-22, llvm-objdump-22, llvm-mca-22)
# compares registers, LDS, occupancy and the hot loops. Writes
# bench/amd/results.md and bench/amd/results.svg; see bench/amd/README.md.
# Usage: scripts/bench-amd.sh  (BENCH_AMD_ONLY=attention: only the cases whose
# name contains it, tables under target/bench-amd instead of bench/amd)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
venv=target/bench-amd-venv
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian ships venv apart from python3.
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >&2
    rm -rf "$venv"; python3 -m venv "$venv"
  fi
fi
# The Triton release the committed figures were made with.
"$venv/bin/pip" install -q "triton==3.9.0"
cargo build -q -p rocmc
out=target/bench-amd
mkdir -p "$out"
TRITON_HIP_LLD_PATH="$(command -v ld.lld-22)" TRITON_DEFAULT_FP_FUSION=1 \
  TRITON_CACHE_DIR="$PWD/$out/triton-cache" \
  "$venv/bin/python" bench/amd/compare.py "$PWD/target/debug/rocmc" "$PWD/$out"
