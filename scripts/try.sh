#!/usr/bin/env bash
# First command of the README: installs what is missing, builds rocmc, and
# compiles examples/vadd.toml for GPUs you may not have (AMD, then NVIDIA),
# showing the result.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build -q -p rocmc
rocmc=target/debug/rocmc
mcpu="${1:-gfx90a}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== rocmc build --mcpu $mcpu examples/vadd.toml"
$rocmc build --mcpu "$mcpu" examples/vadd.toml -o "$out/vadd.hsaco"
echo
echo "== the schedule, lowered (--emit loops)"
$rocmc build --mcpu "$mcpu" examples/vadd.toml --emit loops -o -
echo
echo "== GCN assembly of the kernel (--emit asm)"
$rocmc build --mcpu "$mcpu" examples/vadd.toml --emit asm -o - | sed -n '/^vadd:/,/s_endpgm/p'
echo
echo "== what is in the code object (rocmc inspect)"
$rocmc inspect "$out/vadd.hsaco"
echo
echo "== checked independently by llvm-readobj-22"
llvm-readobj-22 --file-headers "$out/vadd.hsaco" | grep -E "OS/ABI|ABIVersion|Machine|EF_AMDGPU"
echo
echo "== the same kernel file for an NVIDIA GPU: rocmc build --mcpu sm_90 (PTX)"
$rocmc build --mcpu sm_90 examples/vadd.toml -o "$out/vadd.ptx"
sed -n '/^\.visible \.entry/,/^}/p' "$out/vadd.ptx"
ptxas=$(ls -d "${ROCMC_CACHE:-$HOME/.cache/rocmc}"/ptxas-*/ptxas 2>/dev/null | tail -1)
if [ -n "$ptxas" ]; then
  echo
  echo "== checked independently by NVIDIA's ptxas"
  "$ptxas" -v -arch sm_90 "$out/vadd.ptx" -o "$out/vadd.cubin" 2>&1 | grep -E "Used|spill"
fi
