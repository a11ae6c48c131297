#!/usr/bin/env bash
# Second command of the README: installs what is missing, checks the house
# rules, builds, runs every test, and prints what each phase cost.
# Arguments go to the test run: `scripts/test.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

# LLVM's work for a module it has compiled before is read back, not redone
# (codegen/src/cache.rs): tests that compile the same kernel for the same
# target share it within a run, and a rerun after a change recompiles
# only the modules the change altered. `rm -rf target/rocmc-cache` empties it.
export ROCMC_CACHE_DIR=${ROCMC_CACHE_DIR:-$PWD/target/rocmc-cache}

times=$(mktemp)
log=$(mktemp)
phase() { # phase NAME COMMAND...: runs it and records its seconds
  local name=$1 start=$SECONDS
  shift
  echo "rocmc: == $name: $*" >&2
  "$@"
  echo "$name $((SECONDS - start))" >>"$times"
}
report() {
  echo
  echo "rocmc: where the time went (seconds)"
  # Each test binary as cargo announced it, with the time libtest reported.
  awk '/^ +Running /{src=$0; sub(/^ +Running /, "", src); sub(/ \(.*/, "", src)
                    bin=$0; sub(/.*\//, "", bin); sub(/\).*/, "", bin); sub(/-[0-9a-f]+$/, "", bin)}
       /^test result:/{t=""; for (i = 1; i < NF; i++) if ($i == "in") {t=$(i+1); sub(/s$/, "", t)}
                       printf "  test %-50s %8.1f\n", bin" ("src")", t}' "$log"
  awk '{printf "  %-55s %8d\n", $1, $2}' "$times"
  rm -f "$times" "$log"
}
trap report EXIT

# Function and file length, import circles (docs/architecture.md).
phase structure python3 scripts/structure.py
# Every test binary and every program the tests run (rocmc, the worker,
# the example applications), in one feature resolution: the tests' own
# `cargo build --workspace --all-targets` (tests/common.rs) then finds
# everything built. `cargo build -p PACKAGE` would resolve features for
# that package alone and compile much of the workspace a second time.
phase build cargo build --workspace --all-targets
start=$SECONDS
echo "rocmc: == test: cargo test --workspace --all-targets $*" >&2
cargo test --workspace --all-targets "$@" 2>&1 | tee "$log"
echo "test $((SECONDS - start))" >>"$times"

# A CPU-only application's runtime: no TLS, no GPU runtime, and a device
# kind left out is refused naming its feature (docs/own-crate.md).
cpu_only() {
  local extra
  extra=$(cargo tree -q -p rocmc-runtime --no-default-features --features cpu -e normal --prefix none |
    grep -E '^(rustls|ring|rcgen|rocmc-remote|rocmc-runtime-hip|rocmc-runtime-cuda) ' || true)
  if [ -n "$extra" ]; then
    echo "rocmc: a CPU-only rocmc-runtime pulls:" >&2
    echo "$extra" >&2
    return 1
  fi
  cargo test -q -p rocmc-runtime --no-default-features --features cpu
}
phase runtime-cpu-only cpu_only

# Running kernels on a GPU is not part of this suite (CI has no GPU): say so.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "rocmc: an NVIDIA GPU is here: scripts/gpu-bundle.sh && scripts/bench-gpu.sh runs the GPU checks"
else
  echo "rocmc: GPU checks not run (no GPU here): scripts/bench-gpu.sh runs them on an NVIDIA machine (docs/gpu-performance.md)"
fi
