"""Writes bench/tuning-results.md from a tuning run on the GPU machine
(scripts/bench-tune.sh's OUT) and the imports scripts/tune-report.sh made:
per kernel and size, the tuned configuration against the example's
hand-written schedule (the [tune] defaults, measured in the same run) and
against PyTorch and Triton, and what the tuning cost."""
import json, re, sys, pathlib

out, imports, md = map(pathlib.Path, sys.argv[1:4])
plan = json.load(open("bench/tuning/plan.json"))
device = (out / "device.txt").read_text().strip()
measure_ms = dict(l.split() for l in (out / "measure-ms.txt").read_text().splitlines() if l.strip())
peers = {}
for f in sorted(out.glob("peers-*.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        if r.get("tool") in ("pytorch", "triton"):
            peers[(r["tool"], r["kernel"], json.dumps(r["sizes"], sort_keys=True))] = r["ms"]

def work(kernel, s):
    if kernel.startswith("matmul"):
        return 2 * s["M"] * s["N"] * s["K"] / 1e9, "TFLOP/s"  # per ms -> TFLOP/s
    return 8 * s["rows"] * s["cols"] / 1e6, "GB/s"  # bytes per ms -> GB/s

rows = []
for kernel, size_sets in plan.items():
    for s in size_sets:
        tag = kernel + "-" + "x".join(str(v) for v in s.values())
        text = (imports / f"{tag}.txt").read_text()
        head = re.search(r"(\d+) configurations, (\d+) meet the constraints, (\d+) tried \(([^)]*)\)", text)
        best = re.search(r"^\s+1\s+([\d.]+)\s+1\.00x\s+(.*)$", text, re.M)
        dflt = re.search(r"the defaults take ([\d.]+) ms", text)
        pl = json.load(open(f"target/tune-bundle/plans/{tag}/plan.json"))
        res = json.load(open(out / "plans" / tag / "results.json"))
        outcomes = [next(iter(c["outcome"])) if isinstance(c["outcome"], dict) else c["outcome"] for c in res["candidates"]]
        w, unit = work(kernel, s)
        short = kernel.replace("_tunable", "")
        key = json.dumps(s, sort_keys=True)
        pt, tr = peers.get(("pytorch", short, key)), peers.get(("triton", short, key))
        tuned = float(best.group(1))
        d = float(dflt.group(1)) if dflt else None
        best_peer = min([x for x in (pt, tr) if x is not None], default=None)
        rows.append({
            "kernel": kernel, "sizes": ",".join(f"{k}={v}" for k, v in s.items()),
            "tried": f"{head.group(3)} of {head.group(2)} ({head.group(4)})",
            "refused": outcomes.count("Refused"), "wrong": outcomes.count("Wrong"),
            "failed": outcomes.count("Failed"),
            "time": f"{pl['compile_seconds']:.1f} s + {int(measure_ms.get(tag, 0)) / 1000:.1f} s",
            "hand": d, "tuned": tuned, "config": best.group(2).strip(),
            "speedup": d / tuned if d else None, "unit": unit, "w": w,
            "pt": pt, "tr": tr, "vs_peer": best_peer / tuned if best_peer else None,
        })

def f(ms, w):
    return "-" if ms is None else f"{ms:.3f} ({w / ms:.0f})"

with open(md, "w") as o:
    o.write("# Autotuning on the GPU: rocmc tune against the hand-written schedules and the peers\n\n")
    o.write(f"Device: {device}. Written by `scripts/tune-report.sh` from a run of `scripts/bench-tune.sh` ")
    o.write("(commands below). Times are medians in ms, with GB/s or TFLOP/s in brackets; fp32 throughout, TF32 off.\n\n")
    o.write("- **hand-written**: the example's own schedule, i.e. the `[tune]` defaults (matmul_tunable's defaults are matmul_sgemm, ")
    o.write("softmax_tunable's are softmax, transpose_tunable's are transpose_coarse), measured in the same run as every candidate.\n")
    o.write("- **tuned**: the fastest candidate that matched the reference interpreter; every candidate was checked before it was timed.\n")
    o.write("- **tuning time**: compiling every candidate here (2-core VM) + checking and timing them on the GPU.\n")
    o.write("- **peers**: PyTorch (cuBLAS / its own kernels) and Triton, timed by bench/gpu/peers.py at the same sizes in the same run.\n\n")
    o.write("| kernel | sizes | candidates | refused / wrong / failed | tuning time | hand-written | tuned | tuned config | speed-up | PyTorch | Triton | tuned vs best peer |\n")
    o.write("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        vp = "-" if r["vs_peer"] is None else f"{r['vs_peer']:.2f}x"
        o.write(f"| {r['kernel']} | {r['sizes']} | {r['tried']} | {r['refused']} / {r['wrong']} / {r['failed']} | {r['time']} | "
                f"{f(r['hand'], r['w'])} | {f(r['tuned'], r['w'])} | {r['config']} | {sp} | {f(r['pt'], r['w'])} | {f(r['tr'], r['w'])} | {vp} |\n")
    o.write("\nSpeed-up: hand-written time / tuned time. Tuned vs best peer: the faster peer's time / tuned time (above 1: rocmc is faster).\n")
    o.write("""
## Reading it

- Tuning pays most where the hand-written schedule was chosen for another size: matmul at 1024³ (the 128x128 tiles of
  matmul_sgemm leave most of the H100's 132 SMs idle with only 64 blocks) and softmax on short rows (256 threads for
  1024 columns). At the sizes the examples were written for, the hand-written schedules were already within a few
  per cent of the best candidate.
- Where rocmc still trails the peers, tuning the open parameters cannot close the gap, because the gap is in the
  schedule's shape, not its sizes: rocmc's softmax reads each row from memory three times (max, sum, output) where
  Triton keeps the row in registers after one read; the fp32 matmul lacks the double-buffered, vectorised loads that fast
  SIMT GEMMs use. Those are new schedule primitives, not tuning.
- Every candidate ran once against the reference interpreter at awkward sizes before it was timed; none was wrong.

## Commands

```
scripts/tune-bundle.sh sm_90                              # here: rocmc tune --export, one plan per kernel and size
scripts/bench-tune.sh target/tune-bundle OUT              # on the GPU machine: rocmc-worker measure, and the peers
scripts/tune-report.sh OUT                                # here: rocmc tune --import into bench/tuning/rocmc-tuning.toml, this file
```

The sizes are in bench/tuning/plan.json; the GPU machine's outputs (each plan's results.json, the per-candidate logs,
the peers' timings) are in bench/tuning/h100/, and what each import printed is in bench/tuning/imports/.
""")
print(open(md).read())
