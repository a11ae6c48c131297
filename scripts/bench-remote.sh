#!/usr/bin/env bash
# Runs where the GPU is (bench-gpu.sh calls it; it also runs alone): starts
# the bundled rocmc-worker on loopback and
#  1. checks every example's PTX against the reference interpreter through
#     it, over TLS with the certificate pinned and the secret given, as
#     `rocmc run --device remote://…` does;
#  2. measures what the remote path costs over the device itself, on the
#     GPU and on the CPU device (Markdown tables, as in
#     bench/remote-results.md);
#  3. measures bulk transfers through it beside a plain TLS stream.
#   scripts/bench-remote.sh [BUNDLE] [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-target/gpu-bundle}
out=${2:-${OUT:-target/gpu-out}}
mkdir -p "$out"
bin="$bundle/rocmc-gpu-check"
rc=0
echo "== remote: every example through rocmc-worker on loopback (TLS, pinned certificate, secret)"
# PART=I/N (scripts/bench-gpu.sh): every N-th kernel from the I-th; the
# latency and transfer measurements in piece 1 only.
part=${PART:-1/1}
"$bin" remote "$bundle/rocmc-worker" "$bundle/kernels" --device cuda:0 --cases "${REMOTE_CASES:-2}" --seed "${SEED:-1}" --part "$part" > "$out/remote-check.txt" || rc=1
tail -1 "$out/remote-check.txt"
if [ "${part%/*}" != 1 ]; then
  echo "remote exit code: $rc"
  exit $rc
fi
echo "== remote: what the worker costs over the device itself"
"$bin" latency "$bundle/rocmc-worker" "$bundle/kernels" --device cuda:0 | tee "$out/remote-latency-cuda.md" || rc=1
echo
"$bin" latency "$bundle/rocmc-worker" "$bundle/cpu" --device cpu | tee "$out/remote-latency-cpu.md" || rc=1
echo "== remote: bulk transfers through the worker beside one plain TLS stream"
"$bin" transfer "$bundle/rocmc-worker" --device cuda:0 --sizes "${TRANSFER_MIB:-64,256,1024}" | tee "$out/transfer-cuda.md" || rc=1
echo
"$bin" transfer "$bundle/rocmc-worker" --device cpu --sizes "${TRANSFER_MIB:-64,256,1024}" | tee "$out/transfer-cpu.md" || rc=1
echo "remote exit code: $rc"
exit $rc
