"""Combines rocmc-gpu-check's and peers.py's JSON lines into a table
(printed) and bench/gpu-results.md with an SVG chart beside it."""
import json, sys, os

rows = []
for path in sys.argv[1:-1]:
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
out_md = sys.argv[-1]
by = {}
for r in rows:
    by.setdefault(r["kernel"], {})[r["tool"]] = r
copy_bw = max((r["gbps"] for r in rows if r["kernel"] == "copy"), default=0.0)
MEM = {"vadd": 0.90, "saxpy": 0.90, "bias2d": 0.90, "bias2d_vec": 0.90, "bias2d_vec_nofact": 0.90, "transpose": 0.80, "transpose_coarse": 0.80, "gelu_mask": 0.85, "transpose3d_batched": 0.85, "transpose4d_fallback": 0.85, "permute4d_heads": 0.85}
RELATIVE = {"bias_grad": 1.0, "bias_grad_narrow": 1.0, "bias_grad_narrow_two_groups": 1.0, "reduce_all": 1.0, "reduce_all_one_group": 1.0, "reduce_rows8": 1.0, "norm_all": 1.0, "mean_rows4_f16": 1.0, "cumsum_long": 1.0, "cumsum_long_whole": 1.0, "cumsum_long_i32": 1.0, "softmax": 1.0, "softmax_online": 1.0, "layernorm": 1.0, "embedding": 1.0, "histogram": 1.0, "histogram_global": 1.0, "argmax": 1.0, "topk": 1.0, "topk_k64": 1.0, "topk_small": 1.0, "log_softmax": 1.0, "cross_entropy": 1.0, "welford_layernorm": 1.0, "cumsum": 1.0, "linear_recurrence_order": 1.0, "residual_rmsnorm": 1.0, "groupnorm_stats": 1.0}
ATTENTION = {"attention", "attention_causal", "attention_causal128", "attention_d64", "attention_decode", "attention_decode_s1"}
MATMUL = {"matmul", "matmul_lds", "matmul_regtile", "matmul_sgemm", "matmul_sgemm_k8", "matmul_sgemm_k32", "gelu_linear", "gemm_f16_mma"}
# Hopper's warpgroup GEMMs (sm_90a): against cuBLAS at 80 % (issue 36).
WGMMA = {"gemm_f16_wgmma", "gemm_f16_wgmma_8k", "gemm_bf16_wgmma", "gemm_f16_wgmma_nn", "gemm_f16_wgmma_nn_8k", "gemm_f16_wgmma_tn", "gemm_fp8_wgmma", "gemm_i8_wgmma"}
MATMUL |= WGMMA
# Batched products (issue 61), against cuBLAS's batched GEMM through PyTorch.
BATCHED = {"gemm_batched_f16", "qk_scores_f16"}
MATMUL |= BATCHED
# Weight-only quantised products (issue 61): at least PyTorch's
# dequantise-then-cuBLAS.
WEIGHT_ONLY = {"gemm_wq_i8", "gemm_wq_i8_m16"}
MATMUL |= WEIGHT_ONLY
RELATIVE.update({k: 1.0 for k in WEIGHT_ONLY})
order = ["vadd", "saxpy", "bias2d", "bias2d_vec", "bias2d_vec_nofact", "transpose", "transpose_coarse", "transpose3d_batched", "transpose4d_fallback", "permute4d_heads", "gelu_mask", "bias_grad", "bias_grad_narrow", "bias_grad_narrow_two_groups", "reduce_all", "reduce_all_one_group", "reduce_rows8", "norm_all", "mean_rows4_f16", "softmax", "softmax_online", "layernorm", "embedding", "histogram", "histogram_global", "argmax", "topk", "topk_k64", "topk_small", "log_softmax", "cross_entropy", "welford_layernorm", "cumsum", "cumsum_long", "cumsum_long_whole", "cumsum_long_i32", "linear_recurrence_order", "residual_rmsnorm", "groupnorm_stats",
         "attention", "attention_causal", "attention_causal128", "attention_d64", "attention_decode", "attention_decode_s1",
         "matmul", "matmul_lds", "matmul_regtile", "matmul_sgemm", "matmul_sgemm_k8", "matmul_sgemm_k32", "gelu_linear", "gemm_f16_mma", *sorted(WGMMA), *sorted(BATCHED), *sorted(WEIGHT_ONLY), "conv2d", "conv2d_f16", "conv2d_bias_relu", "conv1d", "conv1d_grouped", "conv2d_stride2_f16"]
# NAME_default: NAME without its schedule (rocmc's default schedules), and
# NAME__TAG: another schedule of NAME, each beside NAME and against NAME's peers.
order = [x for k in order for x in (k, k + "_default", *sorted(v for v in by if v.split("__")[0] == k and "__" in v))]
for k in list(by):
    if k.endswith("_default") or "__" in k:
        base = k.split("__")[0] if "__" in k else k[: -len("_default")]
        for tool, r in by.get(base, {}).items():
            if tool != "rocmc":
                by[k].setdefault(tool, r)
        for d in (MEM, RELATIVE):
            if base in d:
                d[k] = d[base]
        if base in MATMUL:
            MATMUL.add(k)
def base_of(k):
    return k.split("__")[0].removesuffix("_default")


table = []
for k in order:
    t = by.get(k, {})
    if "rocmc" not in t:
        continue
    r = t["rocmc"]
    pt, tr = t.get("pytorch"), t.get("triton")
    peers = [p for p in (pt, tr) if p]
    best = min(peers, key=lambda p: p["ms"]) if peers else None
    unit = "TFLOP/s" if k in MATMUL or base_of(k) in ATTENTION or k.startswith("conv") else "GB/s"
    val = (lambda p: p["tflops"]) if unit == "TFLOP/s" else (lambda p: p["gbps"])
    if k in MEM:
        target = f"≥ {MEM[k]:.0%} of copy ({MEM[k] * copy_bw:.0f} GB/s)"
        ok = r["gbps"] >= MEM[k] * copy_bw
        vs = f"{r['gbps'] / copy_bw:.0%} of copy" if copy_bw else "-"
    elif k in RELATIVE and pt:
        target = "≥ PyTorch's speed"
        ok = r["ms"] <= pt["ms"]
        vs = f"{pt['ms'] / r['ms']:.2f}× PyTorch"
        for tool, what in (("torch-compile", "torch.compile"), ("cublas-f16-weights", "cuBLAS on f16 weights")):
            if tool in t:
                vs += f", {t[tool]['ms'] / r['ms']:.2f}× {what}"
    elif base_of(k) in ATTENTION and pt:
        target = "≥ SDPA flash (FlashAttention-2)"
        ok = r["ms"] <= pt["ms"]
        cd = t.get("cudnn")
        vs = f"{pt['ms'] / r['ms']:.2f}× SDPA flash" + (f", {cd['ms'] / r['ms']:.2f}× cuDNN" if cd else "")
    elif k in MATMUL and pt:
        share = 0.8 if base_of(k) in WGMMA else 0.6
        target = f"≥ {share:.0%} of cuBLAS" if k != "gelu_linear" else "(no target)"
        ok = r["tflops"] >= share * pt["tflops"] if k != "gelu_linear" else None
        vs = f"{r['tflops'] / pt['tflops']:.0%} of cuBLAS"
        compiled = t.get("torch-compile")
        if compiled:
            vs += f", {compiled['ms'] / r['ms']:.2f}× torch.compile"
        promoted = t.get("pytorch-promoted")
        if promoted:
            vs += f" (fast accumulation; {r['tflops'] / promoted['tflops']:.0%} of its promoted f32 sums)"
    else:
        target, ok, vs = "(no target)", None, f"{best['ms'] / r['ms']:.2f}× best peer" if best else "-"
    sizes = ",".join(f"{a}={b}" for a, b in r["sizes"].items())
    # rocmc-gpu-check's sampled check of the results at these sizes.
    c = r.get("check", {}).get("result", "-")
    checked = c if c in ("ok", "MISMATCH", "-") else "no (" + c.removeprefix("not checked: ")[:40] + ")"
    table.append((k, sizes, r["ms"], f"{val(r):.1f}", f"{val(pt):.1f}" if pt else "-",
                  f"{val(tr):.1f}" if tr else "-", f"{best['ms'] / r['ms']:.2f}" if best else "-",
                  vs, target, "yes" if ok else ("no" if ok is False else "-"), unit, val(r),
                  val(pt) if pt else 0, val(tr) if tr else 0, checked))

hdr = ["kernel", "sizes", "rocmc ms", "rocmc", "PyTorch", "Triton", "speed vs best peer", "measure", "target", "met", "unit", "results checked at these sizes"]
lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
for t in table:
    lines.append("| " + " | ".join(str(x if not isinstance(x, float) else f"{x:.3f}") for x in (*t[:11], t[14])) + " |")
print("\n".join(lines))
print(f"device-to-device copy: {copy_bw:.0f} GB/s")
# What did not run or did not match: rocmc-gpu-check's failed kernels and
# the results its sampled check found wrong at the plan's sizes.
failed = [r for r in rows if r.get("tool") == "rocmc-error"]
wrong = [r for r in rows if r.get("tool") == "rocmc" and r.get("check", {}).get("result") == "MISMATCH"]
notes = [f"- rocmc failed on {r['kernel']}: {r['error']}" for r in failed]
notes += [f"- {r['kernel']}: a sampled result differs from the interpreter by {r['check']['max_error']:.2e} ({r['check'].get('rows', '')})" for r in wrong]
if notes:
    print("\n".join(notes))

# SVG: per kernel, three bars (rocmc, PyTorch, Triton) as a fraction of the best of the three.
W, BH, GAP = 760, 12, 10
h = 40 + len(table) * (3 * BH + GAP)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="sans-serif" font-size="11">',
       '<text x="10" y="16" font-size="13">Throughput relative to the fastest of rocmc / PyTorch / Triton (longer is faster)</text>']
colors = {"rocmc": "#c0392b", "PyTorch": "#2c3e50", "Triton": "#7f8c8d"}
y = 30
for t in table:
    vals = {"rocmc": t[11], "PyTorch": t[12], "Triton": t[13]}
    top = max(vals.values()) or 1.0
    svg.append(f'<text x="10" y="{y + 2 * BH}">{t[0]}</text>')
    for i, (tool, v) in enumerate(vals.items()):
        wbar = 0 if not v else int(420 * v / top)
        svg.append(f'<rect x="150" y="{y + i * BH}" width="{wbar}" height="{BH - 2}" fill="{colors[tool]}"/>')
        label = f"{tool} {v:.1f} {t[10]}" if v else f"{tool} -"
        svg.append(f'<text x="{155 + wbar}" y="{y + i * BH + BH - 3}">{label}</text>')
    y += 3 * BH + GAP
svg.append("</svg>")
svg_path = os.path.splitext(out_md)[0] + ".svg"
open(svg_path, "w").write("\n".join(svg))
dev = next((r for r in rows if r.get("tool") == "device"), None)
md = ["# GPU benchmark: rocmc against PyTorch and Triton", "",
      "Written by `scripts/bench-gpu.sh` (see README). Times are medians of many launches, each between two CUDA events, after warm-up;",
      "inputs are random and non-zero; fp32 throughout, TF32 off. GB/s counts each tensor once (inputs read, outputs written).", "",
      f"Device-to-device copy bandwidth, the reference for memory-bound kernels: **{copy_bw:.0f} GB/s**.", "",
      *lines, "", f"![chart]({os.path.basename(svg_path)})", ""]
errors = [r for r in rows if r.get("tool") == "error"]
for e in errors:
    md.append(f"- peer failed for {e['kernel']}: {e['error']}")
md.extend(notes)
open(out_md, "w").write("\n".join(md) + "\n")
