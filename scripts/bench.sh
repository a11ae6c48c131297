#!/usr/bin/env bash
# Compile time and code quality of rocmc against clang-22 + ld.lld-22, for
# every example with a reference in bench/reference/. Writes
# bench/results.md and bench/compile_time.svg. Usage: scripts/bench.sh [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build -q --release -p rocmc -p rocmc-bench
target/release/rocmc-bench target/release/rocmc "$@"
