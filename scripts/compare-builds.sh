#!/usr/bin/env bash
# Compares what two rocmc binaries write for every bundled kernel: loop IR,
# optimised LLVM IR and assembly (GCN, PTX, x86-64) for gfx942, gfx1100,
# sm_90 and x86-64, with stderr and the exit code. A refactoring that
# claims "no output changes" shows 0 DIFF lines here.
#
#   scripts/compare-builds.sh OLD_ROCMC NEW_ROCMC [OUTDIR]
#
# Differing outputs are kept in OUTDIR (default target/compare-builds).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "${1:?usage: compare-builds.sh OLD_ROCMC NEW_ROCMC [OUTDIR]}")
new=$(realpath "${2:?usage: compare-builds.sh OLD_ROCMC NEW_ROCMC [OUTDIR]}")
out=${3:-target/compare-builds}
mkdir -p "$out"
one() {
  local f=$1 t=$2 old=$3 new=$4 out=$5 n a b
  n=$(echo "$f" | tr '/' '_')
  # Both binaries run under the same name, so usage messages match.
  a=$(cd "$(dirname "$old")" && "./$(basename "$old")" build --mcpu "$t" --emit loops --emit llvm --emit asm -o - "$OLDPWD/$f" 2>&1; echo "exit $?")
  b=$(cd "$(dirname "$new")" && "./$(basename "$new")" build --mcpu "$t" --emit loops --emit llvm --emit asm -o - "$OLDPWD/$f" 2>&1; echo "exit $?")
  a=${a//$OLDPWD\//}; b=${b//$OLDPWD\//}
  a=${a//$(basename "$old")/rocmc}; b=${b//$(basename "$new")/rocmc}
  if [ "$a" == "$b" ]; then
    echo "same $t $f"
  else
    echo "DIFF $t $f"
    echo "$a" > "$out/$n.$t.old"
    echo "$b" > "$out/$n.$t.new"
  fi
}
export -f one
ls examples/*.toml tests/regress/*.toml tests/{gather,scan,scatter,triangular,tuple,bits}/*.toml |
  while read -r f; do for t in gfx942 gfx1100 sm_90 x86-64; do echo "$f $t"; done; done |
  xargs -P "$(nproc)" -n 2 bash -c 'one "$0" "$1" '"$old $new $out" | sort -k1,1 | tee "$out/summary.txt" | grep -v '^same' || true
echo "$(grep -c '^same' "$out/summary.txt") same, $(grep -c '^DIFF' "$out/summary.txt" || true) differ"
