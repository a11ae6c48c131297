"""rocmc against Triton's AMD backend, statically: the same computations
compiled by both for gfx942, gfx950 and gfx1100 with no GPU, each code
object read by the same tools (bench/amd/isa.py). Prints a table per
target, writes bench/amd/results.md and bench/amd/results.svg.

Usage (scripts/bench-amd.sh sets it up): python compare.py ROCMC OUTDIR"""

import os
import subprocess
import sys

import isa

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["gfx942", "gfx950", "gfx1100"]
WAVE = {"gfx942": 64, "gfx950": 64, "gfx1100": 32}


def gemm(dt, fp8=None):
    return {"kind": "gemm", "dt": dt, "fp8": fp8}


def attn(d, causal):
    return {"kind": "attention", "d": d, "causal": causal}


# name, rocmc kernel file, targets, Triton side.
CASES = [
    ("gemm f16 (default)", "bench/amd/rocmc/gemm_f16.toml", TARGETS, gemm("fp16")),
    ("gemm bf16 (default)", "bench/amd/rocmc/gemm_bf16.toml", TARGETS, gemm("bf16")),
    ("gemm f16 (examples/gemm_f16)", "examples/gemm_f16.toml", TARGETS, gemm("fp16")),
    ("batched gemm f16 + bias, relu (examples/gemm_batched_f16)", "examples/gemm_batched_f16.toml", TARGETS,
     {"kind": "gemm", "dt": "fp16", "fp8": None, "batched": True}),
    ("gemm f16 x i8 weights, scaled (weight-only int8)", "bench/amd/rocmc/gemm_wq_i8.toml", TARGETS,
     {"kind": "gemm", "dt": "fp16", "fp8": None, "b_dt": "i8", "scaled": True}),
    ("gemm fp8 e4m3fnuz", "bench/amd/rocmc/gemm_fp8_fnuz.toml", ["gfx942"], gemm("fp8e4b8", "fnuz")),
    ("gemm fp8 e4m3fn", "bench/amd/rocmc/gemm_fp8_ocp.toml", ["gfx950"], gemm("fp8e4nv", "ocp")),
    ("attention d64", "bench/amd/rocmc/attention_d64.toml", TARGETS, attn(64, False)),
    ("attention d128", "bench/amd/rocmc/attention_d128.toml", TARGETS, attn(128, False)),
    ("attention d64 causal", "bench/amd/rocmc/attention_d64_causal.toml", TARGETS, attn(64, True)),
    ("attention d128 causal", "bench/amd/rocmc/attention_d128_causal.toml", TARGETS, attn(128, True)),
    ("softmax 4096 f32", "bench/amd/rocmc/softmax.toml", TARGETS, {"kind": "softmax"}),
    ("layernorm 4096 f32", "bench/amd/rocmc/layernorm.toml", TARGETS, {"kind": "layernorm"}),
    ("rmsnorm 4096 f32", "bench/amd/rocmc/rmsnorm.toml", TARGETS, {"kind": "rmsnorm"}),
    # The same with rows bounded as Triton's kernel is (a 4096-wide block):
    # the bound lets the default stage a row in LDS and read it once.
    ("softmax 4096 f32, rows <= 4096", "bench/amd/rocmc/softmax_4096.toml", TARGETS, {"kind": "softmax"}),
    ("layernorm 4096 f32, rows <= 4096", "bench/amd/rocmc/layernorm_4096.toml", TARGETS, {"kind": "layernorm"}),
    ("rmsnorm 4096 f32, rows <= 4096", "bench/amd/rocmc/rmsnorm_4096.toml", TARGETS, {"kind": "rmsnorm"}),
    ("vadd f32", "bench/amd/rocmc/vadd.toml", TARGETS, {"kind": "vadd"}),
]


# Kernels with a version for short rows (rocmc's row chains on AMD keep a
# row of up to 4096 floats in registers, rows read once): the benchmark's
# row length, and the bound of the version it runs there. The reader takes
# the code that runs at that length (isa.version_taken).
RUN_AT = {f"bench/amd/rocmc/{k}.toml": (4096, 4096) for k in ("softmax", "layernorm", "rmsnorm")}

# The sizes the row kernels run at, for LDS sized at launch (`rocmc inspect
# --size`): a row staged in LDS takes what its length needs, not its bound.
LAUNCHED_AT = {f"bench/amd/rocmc/{k}{v}.toml": ["cols=4096"]
               for k in ("softmax", "layernorm", "rmsnorm") for v in ("", "_4096")}


def triton_compile(case, proc, out):
    """Triton's code object for `case` on `proc`, at the configuration its
    AMD backend is usually run with; for GEMM the best of a few such
    configurations by the same model, none that spills. Returns (path,
    LDS bytes at launch, configuration text)."""
    import triton
    from triton.backends.compiler import GPUTarget
    import triton_kernels as tk

    def build(fn, sig, ce, opts, name):
        for k in ce:
            sig[k] = "constexpr"
        div = [["tt.divisibility", 16]]
        attrs = {(i,): div for i, (k, v) in enumerate(sig.items()) if v != "constexpr"}
        src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=ce, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("hip", proc, WAVE[proc]), options=opts)
        path = os.path.join(out, f"triton-{name}.{proc}.hsaco")
        with open(path, "wb") as f:
            f.write(k.asm["hsaco"])
        return path, k.metadata.shared

    kind = case["kind"]
    mfma = {"matrix_instr_nonkdim": 16, "kpack": 1} if proc.startswith("gfx9") else {}
    if kind == "gemm":
        dt = case["dt"]
        eight = dt.startswith("fp8")
        if proc == "gfx1100":
            configs = [(128, 128, 32, 8, 2), (128, 128, 64, 4, 2), (64, 128, 64, 4, 2)]
        else:
            bk = 128 if eight else 64
            configs = [(256, 256, bk, 8, 2), (256, 128, bk, 8, 2), (128, 128, bk, 4, 2),
                       (128, 256, bk, 8, 2)]
        best = None
        for bm, bn, bk, warps, stages in configs:
            b_dt = case.get("b_dt", dt)
            sig = {"A": f"*{dt}", "B": f"*{b_dt}", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                   "sam": "i32", "sak": "constexpr", "sbk": "i32", "sbn": "constexpr", "scm": "i32",
                   "scn": "constexpr"}
            fn, name = tk.matmul, f"gemm_{dt}_{bm}x{bn}x{bk}"
            if case.get("scaled"):
                sig = {"A": f"*{dt}", "B": f"*{b_dt}", "C": "*fp16", "Scale": "*fp16", "M": "i32", "N": "i32",
                       "K": "i32", "sam": "i32", "sak": "constexpr", "sbk": "i32", "sbn": "constexpr",
                       "scm": "i32", "scn": "constexpr"}
                fn, name = tk.matmul_scaled, f"gemm_{dt}_{b_dt}_{bm}x{bn}x{bk}"
            if case.get("batched"):
                sig = {"A": f"*{dt}", "B": f"*{dt}", "C": "*fp16", "Bias": "*fp16", "M": "i32", "N": "i32",
                       "K": "i32", "sab": "i32", "sam": "i32", "sak": "constexpr", "sbb": "i32", "sbk": "i32",
                       "sbn": "constexpr", "scb": "i32", "scm": "i32", "scn": "constexpr"}
                fn, name = tk.bmm_bias_relu, f"bmm_{dt}_{bm}x{bn}x{bk}"
            ce = {"sak": 1, "sbn": 1, "scn": 1, "BM": bm, "BN": bn, "BK": bk, "GROUP": 8}
            try:
                path, shared = build(fn, sig, ce, {"num_warps": warps, "num_stages": stages, **mfma}, name)
            except Exception as e:  # a configuration the backend refuses
                print(f"  triton {name} on {proc}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
                continue
            r = analyse(path, proc, shared)
            # Spilling, or more registers than a work-group of its size can
            # have (not launchable): not a configuration anyone would run.
            if r["spills"] or r["scratch"] or not r["occupancy"]:
                continue
            score = r["simd_peak"] or 0
            text = f"{bm}x{bn}x{bk}, {warps} warps, {stages} stages"
            if best is None or score > best[0]:
                best = (score, path, shared, text)
        if best is None:
            raise RuntimeError(f"no Triton GEMM configuration for {proc}")
        return best[1], best[2], best[3]
    if kind == "attention":
        d, causal = case["d"], case["causal"]
        bm, bn, warps = (128, 64, 4) if proc.startswith("gfx9") else (64, 32, 4)
        sig = {n: "*fp16" for n in ("Q", "K", "V", "O")}
        sig["L"] = "*fp32"
        for n in ("sqz", "sqh", "sqm", "skz", "skh", "skn", "svz", "svh", "svn", "soz", "soh", "som", "H", "S"):
            sig[n] = "i32"
        sig["scale"] = "fp32"
        ce = {"D": d, "BM": bm, "BN": bn, "CAUSAL": causal}
        opts = {"num_warps": warps, "num_stages": 1, **mfma}
        path, shared = build(tk.attention, sig, ce, opts, f"attention_d{d}{'_causal' if causal else ''}")
        return path, shared, f"{bm}x{bn}, {warps} warps, 1 stage"
    if kind in ("softmax", "layernorm", "rmsnorm"):
        sig = {"X": "*fp32", "Y": "*fp32"}
        if kind != "softmax":
            sig["W"] = "*fp32"
        if kind == "layernorm":
            sig["Bias"] = "*fp32"
        sig.update({"cols": "i32", "sx": "i32", "sy": "i32"})
        if kind != "softmax":
            sig["eps"] = "fp32"
        fn = getattr(tk, kind)
        path, shared = build(fn, sig, {"BLOCK": 4096}, {"num_warps": 8}, kind)
        return path, shared, "a row per program, 4096 wide, 8 warps"
    if kind == "vadd":
        sig = {"A": "*fp32", "B": "*fp32", "C": "*fp32", "n": "i32"}
        path, shared = build(tk.vadd, sig, {"BLOCK": 1024}, {"num_warps": 4}, "vadd")
        return path, shared, "1024 per program, 4 warps"
    raise ValueError(kind)


def rocmc_compile(rocmc, file, proc, out):
    name = os.path.splitext(file)[0].replace("/", "_")
    path = os.path.join(out, f"rocmc-{name}.{proc}.hsaco")
    subprocess.run([rocmc, "build", "--mcpu", proc, "-o", path, file], check=True,
                   capture_output=True, text=True)
    return path, launch_lds(rocmc, path, LAUNCHED_AT.get(file, []))


def launch_lds(rocmc, path, sizes):
    """LDS sized at launch, from `rocmc inspect --json`: at `sizes`
    (`NAME=N`), the others at the kernel's size bounds."""
    import json
    args = [a for s in sizes for a in ("--size", s)]
    j = json.loads(subprocess.run([rocmc, "inspect", "--json", *args, path], check=True,
                                  capture_output=True, text=True).stdout)
    j = j[0] if isinstance(j, list) else j
    ks = j.get("kernels", [])
    return max((k.get("lds_at_launch_bytes", 0) for k in ks), default=0)


def occupancy(proc, m, lds_launch):
    """Waves per SIMD (fractional: one 2-wave work-group per CU is 0.5),
    by the rules of LLVM's AMDGPU backend for VGPRs, and whole work-groups
    for LDS and wave slots."""
    wave = m.get("wavefront_size", WAVE[proc])
    simds = 4 if proc.startswith("gfx9") else 2
    slots = 8 if proc.startswith("gfx9") else 16
    lds_cu = 160 * 1024 if proc == "gfx950" else 64 * 1024
    vg, ag = m.get("vgpr_count", 0), m.get("agpr_count", 0)
    if proc.startswith("gfx9"):
        regs = -(-vg // 8) * 8 + ag
        total = 512
        by_regs = min(slots, total // max(8, -(-regs // 8) * 8))
    else:
        gran = 24 if wave == 32 else 12
        total = 1536 if wave == 32 else 768
        by_regs = min(slots, total // max(gran, -(-vg // gran) * gran))
    threads = m.get("max_flat_workgroup_size", 256)
    waves_group = max(1, -(-threads // wave))
    lds = m.get("group_segment_fixed_size", 0) + lds_launch
    groups_lds = lds_cu // lds if lds else 10 ** 9
    groups_regs = (by_regs * simds) // waves_group
    groups = min(groups_lds, groups_regs, (slots * simds) // waves_group)
    return groups * waves_group / simds, ("LDS" if groups == groups_lds else "VGPRs" if groups == groups_regs else "slots")


def simd_time(occ, throughput, latency):
    """Modelled cycles a SIMD spends per wave-iteration with `occ` waves on
    it (the average over the CU's SIMDs): `occ` waves' iterations take at
    least `occ` times the resource bound and at least one wave's latency."""
    if not occ:
        return None
    return max(max(occ, 1.0) * throughput, latency) / occ


def analyse(path, proc, lds_launch, run_at=None):
    ks = isa.disassemble(path, proc)
    meta = isa.metadata(path)
    # The kernel with the most code is the one measured (rocmc may add a
    # small initialising kernel).
    name = max(ks, key=lambda n: len(ks[n].code))
    k = ks[name]
    if run_at:
        taken = isa.version_taken(k.code, *run_at)
        if taken is None:
            sys.exit(f"{path}: no version for rows of {run_at[0]} (a compare with {run_at[1]})")
        k.code = taken
    m = meta.get(name, {})
    h = isa.hot_loop(k.code)
    body = k.code[h[0]:h[1] + 1] if h else k.code
    c = isa.mix(body, proc)
    lat, thr = isa.mca_cycles(body, proc) or (None, None)
    occ, why = occupancy(proc, m, lds_launch)
    mat = c["matrix_cycles"]
    est = max(lat or 0, mat)
    # One wave alone: its latency-bound iteration.
    busy = (mat / est) if est and c["matrix"] else None
    # A SIMD with `occ` waves: they share its issue ports and matrix unit
    # (the resource bound, at least the matrix unit's own time) and hide
    # each other's latency; below one wave per SIMD, SIMDs idle.
    simd = simd_time(occ, max(thr or 0, mat), lat or 0)
    # Cycles per 4-byte input element a wave loads, over every pass over
    # the inputs (each loop that loads, or the whole kernel if none loops).
    passes = isa.load_loops(k.code) or [(0, len(k.code) - 1)]
    cpe = 0.0
    wave = m.get("wavefront_size", WAVE[proc])
    flight = 0
    for a, b in passes:
        run = k.code[a:b + 1]
        words = sum(w * n for w, n in isa.mix(run, proc)["vmem_load"].items()) / 4
        flight = max(flight, isa.in_flight(run, wave, loop=(a, b) != (0, len(k.code) - 1)))
        lt = isa.mca_cycles(run, proc)
        t = simd_time(occ, lt[1], lt[0]) if lt else None
        if words and t:
            cpe += t / words
    return {
        "kernel": name, "vgpr": m.get("vgpr_count"), "agpr": m.get("agpr_count", 0),
        "sgpr": m.get("sgpr_count"), "lds": m.get("group_segment_fixed_size", 0),
        "lds_launch": lds_launch, "scratch": m.get("private_segment_fixed_size", 0),
        "spills": m.get("vgpr_spill_count", 0) + m.get("sgpr_spill_count", 0),
        "occupancy": occ, "occupancy_by": why, "loop": h is not None, **c,
        "mca": lat, "mca_throughput": thr, "estimate": est,
        "matrix_busy": busy,
        # Several waves on a SIMD overlap; fewer than one leaves SIMDs idle.
        "simd_busy": (mat / simd) if simd and c["matrix"] else None,
        # The loop's matrix work over what the SIMD could do at the type's
        # peak in that time: the figure that compares instructions of
        # different rates (gfx950's 16x16x16 runs at half its 16x16x32's).
        "simd_peak": (c["peak_cycles"] / simd) if simd and c["matrix"] else None,
        "in_flight_cu": flight * occ * (4 if proc.startswith("gfx9") else 2),
        "flops_per_cycle": busy,
        "passes": len(passes),
        # Per lane-word: a word per lane is `wave` elements.
        "cycles_per_element": cpe / m.get("wavefront_size", WAVE[proc]) if cpe else None,
        # What bounds a memory-bound kernel's bandwidth (Little's law), per
        # pass it makes over its inputs.
        "flight_per_pass": flight * occ * (4 if proc.startswith("gfx9") else 2) / len(passes),
    }


def widths(d):
    return " ".join(f"{n}x{w}B" for w, n in sorted(d.items(), reverse=True)) or "-"


def row(case, who, r, config=""):
    ipm = f"{r['instructions'] / r['matrix']:.1f}" if r["matrix"] else "-"
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"
    busy = (f"{pct(r['matrix_busy'])} / {pct(r['simd_busy'])} ({pct(r['simd_peak'])} of peak)"
            if r["matrix"] else "-")
    bpc = (f"{r['cycles_per_element']:.3f} ({r['passes']} pass{'es' if r['passes'] > 1 else ''}, "
           f"{r['in_flight_cu'] / 1024:.0f} KiB in flight per CU)" if r["cycles_per_element"] else "-")
    return (f"| {case} | {who} | {r['vgpr']}/{r['agpr']}/{r['sgpr']} | {r['lds']}+{r['lds_launch']} | "
            f"{r['scratch']} | {r['occupancy']:.2g} ({r['occupancy_by']}) | "
            f"{'loop' if r['loop'] else 'whole kernel'}: {r['instructions']} | {r['matrix']} | {ipm} | "
            f"{widths(r['vmem_load'])}{' (' + str(r['to_lds']) + ' to LDS)' if r['to_lds'] else ''} | "
            f"{widths(r['lds_read'])} | {widths(r['lds_write'])} | {r['waits']} | {r['barriers']} | "
            f"{r['branches']} | {r['valu']} | {r['mca'] or '-'} / {r['mca_throughput'] or '-'} | {busy} | {bpc} |")


HEADER = ("| computation | compiler | VGPR/AGPR/SGPR | LDS static+launch (B) | scratch | waves/SIMD | "
          "hot loop: instructions | matrix | instr/matrix | global loads | LDS reads | LDS writes | "
          "waits | barriers | branches | VALU | llvm-mca cycles/iter: one wave / resource bound | matrix busy: wave / SIMD (SIMD work of the peak) | cycles per input element |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def ratio(a, b, key):
    """rocmc over Triton, higher better: a SIMD's matrix work per cycle
    as a fraction of its peak, or bytes in flight per CU per pass over the
    inputs."""
    if a.get(key) and b.get(key):
        return a[key] / b[key]
    return None


def key_of(r, t):
    return "simd_peak" if r["matrix"] or t["matrix"] else "flight_per_pass"


def main():
    rocmc, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    root = os.path.dirname(os.path.dirname(HERE))
    os.chdir(root)
    results = []
    # A partial run (cases whose name contains BENCH_AMD_ONLY) writes its
    # tables under `out`, leaving the committed full ones alone.
    only = os.environ.get("BENCH_AMD_ONLY")
    for proc in TARGETS:
        for name, file, procs, tri in CASES:
            if proc not in procs or (only and only not in name):
                continue
            rp, rl = rocmc_compile(rocmc, file, proc, out)
            r = analyse(rp, proc, rl, RUN_AT.get(file))
            tp, tl, conf = triton_compile(tri, proc, out)
            t = analyse(tp, proc, tl)
            results.append((proc, name, r, t, conf))
            q = ratio(r, t, key_of(r, t))
            print(f"{proc:8} {name:30} rocmc {r['instructions']:5} instr {r['matrix']:4} matrix | "
                  f"triton {t['instructions']:5} instr {t['matrix']:4} matrix | modelled ratio "
                  f"{'-' if q is None else f'{q:.2f}'}", flush=True)
    write(results, out if only else HERE)


def write(results, where):
    lines = ["# rocmc against Triton's AMD backend, statically",
             "",
             "Written by `scripts/bench-amd.sh` (bench/amd/compare.py); how the figures are made and",
             "what they cannot show: bench/amd/README.md. Triton "
             + __import__("triton").__version__ + ", LLVM 22 tools.",
             ""]
    summary = ["| target | computation | modelled rocmc / Triton | by |", "|---|---|---|---|"]
    for proc in TARGETS:
        lines += [f"## {proc}", "", HEADER]
        for p, name, r, t, conf in results:
            if p != proc:
                continue
            lines.append(row(name, "rocmc", r))
            lines.append(row(name, f"Triton ({conf})", t))
            key = key_of(r, t)
            q = ratio(r, t, key)
            summary.append(f"| {proc} | {name} | {'-' if q is None else f'{q:.2f}x'} | "
                           f"{'matrix work per SIMD cycle (of the peak)' if key == 'simd_peak' else 'global-load bytes in flight per CU per pass over the input'} |")
        lines.append("")
    text = "\n".join(lines[:5] + ["## Summary", ""] + summary + [""] + lines[5:]) + "\n"
    with open(os.path.join(where, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(where, "results.svg"), "w") as f:
        f.write(chart(results))
    print()
    print("\n".join(summary))


def chart(results):
    """Horizontal bars: modelled rocmc / Triton per computation and target."""
    rows = []
    for p, name, r, t, _ in results:
        q = ratio(r, t, key_of(r, t))
        rows.append((f"{p} {name}", q))
    h = 18 * len(rows) + 60
    scale = 300 / 1.5
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="{h}" font-family="sans-serif" font-size="11">',
         '<text x="10" y="16" font-size="13">rocmc / Triton AMD backend, modelled (1.0 = parity; static, no GPU)</text>']
    x0 = 260
    for i, (label, q) in enumerate(rows):
        y = 30 + 18 * i
        s.append(f'<text x="{x0 - 6}" y="{y + 12}" text-anchor="end">{label}</text>')
        if q is None:
            s.append(f'<text x="{x0 + 4}" y="{y + 12}">n/a</text>')
            continue
        w = min(q, 1.5) * scale
        color = "#2a7" if q >= 0.95 else "#d73"
        s.append(f'<rect x="{x0}" y="{y + 2}" width="{w:.1f}" height="13" fill="{color}"/>')
        s.append(f'<text x="{x0 + w + 4:.1f}" y="{y + 12}">{q:.2f}</text>')
    s.append(f'<line x1="{x0 + scale}" y1="26" x2="{x0 + scale}" y2="{h - 20}" stroke="#333" stroke-dasharray="3,3"/>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


if __name__ == "__main__":
    main()
