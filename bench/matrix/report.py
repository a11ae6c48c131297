"""The matrix-core table of scripts/bench-mma.sh: every rocmc kernel of the
run (gemm_f16_mma and its schedule variants in bench/matrix/variants/)
beside cuBLAS HGEMM and Triton timed in the same run on the same sizes.
Usage: report.py ROCMC.jsonl PEERS.jsonl OUT.md"""
import json, sys

rows = [json.loads(l) for p in sys.argv[1:3] for l in open(p) if l.strip().startswith("{")]
peers = {r["tool"]: r for r in rows if r.get("kernel") == "gemm_f16_mma" and r["tool"] in ("pytorch", "triton")}
cublas, triton = peers.get("pytorch"), peers.get("triton")
lines = ["| kernel | sizes | ms | TFLOP/s | of cuBLAS HGEMM | of Triton |", "|---|---|---:|---:|---:|---:|"]
mine = sorted((r for r in rows if r.get("tool") == "rocmc"), key=lambda r: r["ms"])
for r in mine:
    sizes = ",".join(f"{a}={b}" for a, b in r["sizes"].items())
    of = lambda p: f"{r['tflops'] / p['tflops']:.0%}" if p and r["kernel"].startswith("gemm_f16") else "-"
    lines.append(f"| rocmc {r['kernel']} | {sizes} | {r['ms']:.3f} | {r['tflops']:.1f} | {of(cublas)} | {of(triton)} |")
for name, p in (("cuBLAS HGEMM (PyTorch, f16 out)", cublas), ("Triton tl.dot (f16 out)", triton)):
    if p:
        lines.append(f"| {name} | " + ",".join(f"{a}={b}" for a, b in p["sizes"].items()) + f" | {p['ms']:.3f} | {p['tflops']:.1f} | | |")
table = "\n".join(lines)
print(table)
open(sys.argv[3], "w").write("# Matrix cores on the NVIDIA GPU (scripts/bench-mma.sh)\n\nMedians of many launches between CUDA events after warm-up; random inputs. rocmc's kernels write f32 C, cuBLAS and Triton f16.\n\n" + table + "\n")
