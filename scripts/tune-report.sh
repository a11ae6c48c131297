#!/usr/bin/env bash
# Where rocmc is built, after scripts/bench-tune.sh ran on the GPU machine:
# puts each plan's results beside it, imports them (`rocmc tune --import`)
# into bench/tuning/rocmc-tuning.toml, and writes bench/tuning-results.md.
#   scripts/tune-report.sh OUT      # OUT: bench-tune.sh's output folder
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
bundle=target/tune-bundle
imports=bench/tuning/imports
mkdir -p "$imports"
rm -f bench/tuning/rocmc-tuning.toml
for r in "$out"/plans/*/results.json; do
  tag=$(basename "$(dirname "$r")")
  kernel=${tag%%-*}
  cp "$r" "$bundle/plans/$tag/results.json"
  target/release/rocmc tune "examples/$kernel.toml" --import "$bundle/plans/$tag" \
    --db bench/tuning/rocmc-tuning.toml --show 5 > "$imports/$tag.txt"
done
python3 bench/tuning/report.py "$out" "$imports" bench/tuning-results.md
