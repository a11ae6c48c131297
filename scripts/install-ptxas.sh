#!/usr/bin/env bash
# Installs NVIDIA's PTX assembler (ptxas), the independent checker of the
# PTX rocmc writes, from PyPI's nvidia-cuda-nvcc-cu12 wheel (no GPU, no
# CUDA install, no root). It lands in ~/.cache/rocmc/ptxas-<version>/ptxas;
# tests find it there, or through ROCMC_PTXAS, or on PATH.
# Does nothing when it is already there.
set -euo pipefail
version=12.9.86
dir="${ROCMC_CACHE:-$HOME/.cache/rocmc}/ptxas-$version"
[ -x "$dir/ptxas" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "rocmc: downloading ptxas $version (PyPI: nvidia-cuda-nvcc-cu12)" >&2
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2010_x86_64 \
  --python-version 3.11 "nvidia-cuda-nvcc-cu12==$version" -d "$tmp" >&2
mkdir -p "$dir"
python3 - "$tmp"/nvidia_cuda_nvcc_cu12-*.whl "$dir" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    data = z.read("nvidia/cuda_nvcc/bin/ptxas")
path = os.path.join(out, "ptxas")
with open(path + ".part", "wb") as f:
    f.write(data)
os.chmod(path + ".part", 0o755)
os.replace(path + ".part", path)
PY
"$dir/ptxas" --version | tail -1 >&2
