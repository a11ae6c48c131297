#!/usr/bin/env bash
# What an application outside this repository pays to build rocmc kernels
# (docs/own-crate.md, "What it costs"): a fresh crate with two kernel files
# for gfx942 and gfx1100 and its offline folder committed, built cold with
# no `rocmc` on PATH, as a user of the published crates would. Prints the
# wall time and the target folder's size of a debug and a release build,
# and the dependency tree's LLVM crates (there must be none).
#
# The crates are path dependencies on this checkout; CARGO_INCREMENTAL=0
# builds them as Cargo builds crates from a registry.
# Needs target/debug/rocmc (cargo build -p rocmc) to write the folder once.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rocmc=$repo/target/debug/rocmc
[ -x "$rocmc" ] || { echo "own-crate-cost: build rocmc first (cargo build -p rocmc)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
app=$work/app
mkdir -p "$app/kernels" "$app/src"
cp "$repo/examples/vadd.toml" "$repo/examples/saxpy.toml" "$app/kernels/"
cat >"$app/Cargo.toml" <<EOF
[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
rocmc-runtime-hip = { path = "$repo/runtime-hip" }

[build-dependencies]
rocmc-build = { path = "$repo/build-script" }
EOF
cat >"$app/build.rs" <<'EOF'
fn main() {
    rocmc_build::Build::new()
        .kernel("kernels/vadd.toml")
        .kernel("kernels/saxpy.toml")
        .mcpu("gfx942")
        .mcpu("gfx1100")
        .offline("rocmc-kernels")
        .compile();
}
EOF
cat >"$app/src/main.rs" <<'EOF'
include!(concat!(env!("OUT_DIR"), "/rocmc_kernels.rs"));

fn main() -> rocmc_runtime_hip::Result<()> {
    let dev = rocmc_runtime_hip::Hip::load()?.device("amdgpu")?;
    let a = dev.alloc::<f32>(1024)?;
    vadd::Vadd::load(&dev)?.launch(&a, &a, &a, 1024)?;
    Ok(())
}
EOF
cd "$app"
# Once, with the compiler: the folder a crate commits.
ROCMC=$rocmc ROCMC_OFFLINE=write CARGO_TARGET_DIR=$work/write cargo build -q
rm -rf "$work/write"
llvm=$(cargo tree -q -e normal,build --prefix none | grep -ciE '^(inkwell|llvm-sys|rocmc |rocmc-ir|rocmc-codegen)' || true)

# A PATH with cargo and the system's tools but no rocmc.
path=$(dirname "$(command -v cargo)"):/usr/bin:/bin
measure() { # measure NAME CARGO-ARGS...
  local name=$1 start
  shift
  rm -rf target
  start=$(date +%s.%N)
  env -u ROCMC PATH=$path CARGO_INCREMENTAL=0 cargo build -q "$@"
  printf '%-8s %6.1f s %6d MB\n' "$name" "$(echo "$(date +%s.%N) - $start" | bc)" \
    "$(du -sm target | cut -f1)"
}
echo "own-crate-cost: two kernels for gfx942 and gfx1100, offline, no rocmc on PATH"
echo "own-crate-cost: LLVM or compiler crates in the tree: $llvm"
measure debug
measure release --release
bin=target/release/app
printf 'binary   %6.1f MB (stripped: ' "$(echo "$(stat -c %s $bin) / 1048576" | bc -l)"
strip -o "$work/app.stripped" "$bin"
printf '%.1f MB); links: %s\n' "$(echo "$(stat -c %s "$work/app.stripped") / 1048576" | bc -l)" \
  "$(ldd "$bin" | awk '{print $1}' | grep -v -e vdso -e ld-linux | tr '\n' ' ')"
