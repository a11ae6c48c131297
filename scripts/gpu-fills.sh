#!/usr/bin/env bash
# The benchmark's input fills, one kernel per dtype, built from
# bench/gpu/fill.toml.in into DIR (rocmc-gpu-check bench draws every input
# on the GPU with them): floats uniform from a hash of the index and a
# seed, integers the hash modulo a span, 8-bit floats as bits.
#   scripts/gpu-fills.sh ROCMC ARCH DIR
set -euo pipefail
cd "$(dirname "$0")/.."
rocmc=${1:?usage: gpu-fills.sh ROCMC ARCH DIR}
arch=${2:?usage: gpu-fills.sh ROCMC ARCH DIR}
dir=${3:?usage: gpu-fills.sh ROCMC ARCH DIR}
mkdir -p "$dir"
for t in f16 bf16 f32 f64 f8e4m3fn f8e5m2 f8e4m3fnuz f8e5m2fnuz bool i8 u8 i32 u32 i64; do
  case "$t" in
    # 8-bit floats are storage types only: the fill writes their bits as
    # u8, magnitudes below 1 with a random sign (never the NaN of fnuz).
    f8e4m3fn) value="u8((H[i] \\& u32(128)) | ((H[i] >> u32(8)) % u32(56)))" ;;
    f8e5m2) value="u8((H[i] \\& u32(128)) | ((H[i] >> u32(8)) % u32(60)))" ;;
    f8*fnuz) value="u8((H[i] \\& u32(128)) | ((H[i] >> u32(8)) % u32(63) + u32(1)))" ;;
    f*|bf16) value="$t(f32(lo) + f32(span) * f32(H[i] >> u32(8)) * 5.9604644775390625e-08)" ;;
    bool) value="(H[i] \\& u32(1)) == u32(1)" ;;
    *) value="$t(i64(lo) + i64(H[i] % u32(span)))" ;;
  esac
  sed -e "s/@T@/$t/g" -e "s/@VALUE@/$value/" bench/gpu/fill.toml.in > "$dir/fill_$t.toml"
  "$rocmc" build -q --mcpu "$arch" "$dir/fill_$t.toml" -o "$dir/fill_$t.ptx"
done
