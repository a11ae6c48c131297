#!/usr/bin/env bash
# Second command of the README: installs what is missing, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --all-targets "$@"
# Running kernels on a GPU is not part of this suite (CI has no GPU): say so.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "rocmc: an NVIDIA GPU is here: scripts/gpu-bundle.sh && scripts/bench-gpu.sh runs the GPU checks"
else
  echo "rocmc: GPU checks not run (no GPU here): scripts/bench-gpu.sh runs them on an NVIDIA machine (docs/gpu-performance.md)"
fi
