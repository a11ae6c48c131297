#!/usr/bin/env bash
# Installs what rocmc needs from Debian 12 when it is missing: LLVM 22's
# static libraries and headers (llvm-22-dev, and libpolly-22-dev because
# llvm-config lists Polly among the static libraries), lld 22's static libraries, clang-22 and the LLVM
# tools used as reference and independent checkers in tests, Debian's HIP
# runtime (tests of the "no GPU" path use the real library), MPFR and GMP
# (the math accuracy test's high-precision reference), a C++
# compiler for the two small shims, zlib/zstd for linking lld, and pip to
# fetch NVIDIA's PTX assembler (scripts/install-ptxas.sh), which checks the
# PTX rocmc writes, and NumPy for the Python API's test (tests/python.rs,
# run by Debian's Python 3). Does nothing when everything is present. Needs root or
# sudo to install packages.
set -euo pipefail

packages=(llvm-22-dev libpolly-22-dev liblld-22-dev clang-22 clang-tools-22 lld-22 llvm-22 llvm-22-tools zlib1g-dev libzstd-dev g++ libamdhip64-5 libmpfr-dev libgmp-dev pkg-config python3-pip python3-numpy)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exec "$(dirname "$0")/install-ptxas.sh"
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "rocmc: missing packages: ${missing[*]}; run this script as root (apt-get install)" >&2; exit 1
  fi
fi
echo "rocmc: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
exec "$(dirname "$0")/install-ptxas.sh"
