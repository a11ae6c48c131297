#!/usr/bin/env bash
# Where rocmc is built: exports an offline tuning plan (`rocmc tune
# --export`) for each kernel and size of bench/tuning/plan.json, compiled
# for one NVIDIA processor (default sm_90), into target/tune-bundle with
# rocmc-worker (no LLVM), which measures them on the GPU machine:
#   scripts/tune-bundle.sh sm_90                     # here
#   scripts/bench-tune.sh target/tune-bundle OUT     # there
#   scripts/tune-report.sh OUT                       # here: import, write bench/tuning-results.md
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}
budget=${BUDGET:-128}
dir=target/tune-bundle
rm -rf "$dir" && mkdir -p "$dir/plans"
cargo build -q --release -p rocmc
# Built apart from rocmc: together, Cargo would unify the linker crate's
# features and link LLVM into the worker.
cargo build -q --release -p rocmc-worker
if ldd target/release/rocmc-worker | grep -q libLLVM; then
  echo "tune-bundle: rocmc-worker links LLVM; the GPU machine has none" >&2
  exit 1
fi
cp target/release/rocmc-worker "$dir/"
python3 - "$arch" "$budget" "$dir" <<'PY'
import json, subprocess, sys, time
arch, budget, out = sys.argv[1], sys.argv[2], sys.argv[3]
plan = json.load(open("bench/tuning/plan.json"))
for kernel, size_sets in plan.items():
    for sizes in size_sets:
        tag = kernel + "-" + "x".join(str(v) for v in sizes.values())
        args = ["target/release/rocmc", "tune", f"examples/{kernel}.toml", "--export",
                f"{out}/plans/{tag}", "--target", arch, "--budget", budget]
        for n, v in sizes.items():
            args += ["--size", f"{n}={v}"]
        t = time.time()
        subprocess.run(args, check=True)
        print(f"{tag}: exported in {time.time() - t:.1f} s", flush=True)
PY
du -sh "$dir"
