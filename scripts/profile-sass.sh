#!/usr/bin/env bash
# On the NVIDIA machine: per-instruction warp-stall samples of chosen
# kernels of a bundle (Nsight Compute's source page at SASS level, CSV),
# then the instructions where most samples fall, per stall reason.
#   scripts/profile-sass.sh BUNDLE OUT KERNEL...
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1 out=$2
shift 2
mkdir -p "$out"
for k in "$@"; do
  dir=$(mktemp -d)
  cp "$bundle/kernels/$k.toml" "$bundle/kernels/$k.ptx" "$dir/"
  ncu --section WarpStateStats --section SourceCounters -k regex:gemm -c 1 \
    --page source --csv --print-source sass \
    "$bundle/rocmc-gpu-check" bench "$dir" bench/matrix/plan.json --reps 1 > "$out/$k.source.csv" 2> "$out/$k.source.log"
  rm -rf "$dir"
  gzip -kf "$out/$k.source.csv"
done
ls -la "$out"
head -c 3000 "$out/$1.source.csv"
