#!/usr/bin/env bash
# Second command of the README: installs what is missing, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --all-targets "$@"
