"""The peers of rocmc's examples on the same GPU, at the sizes of plan.json:
PyTorch (cuBLAS, cuDNN and its own kernels) and a Triton kernel written for
the same computation. Prints one JSON line per (tool, kernel), timed as
rocmc-gpu-check times rocmc: warm-up, then the median of many launches,
each between two CUDA events. fp32 throughout: TF32 is off everywhere."""
import json, sys, math
import torch
import triton
import triton.language as tl

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
plan = json.load(open(sys.argv[1]))
dev = "cuda"


def timed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def rnd(*shape):
    return torch.rand(*shape, device=dev, dtype=torch.float32) * 2 - 1


@triton.jit
def k_vadd(a, b, c, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(c + i, tl.load(a + i, mask=m) + tl.load(b + i, mask=m), mask=m)


@triton.jit
def k_saxpy(x, y, out, alpha, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, alpha * tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


@triton.jit
def k_bias2d(x, bias, y, scale, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    m = (r < rows) & (c < cols)
    v = tl.load(x + r * cols + c, mask=m) * scale + tl.load(bias + c, mask=c < cols)
    tl.store(y + r * cols + c, v, mask=m)


@triton.jit
def k_gelu_mask(x, b, keep, y, cols, BC: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    m = c < cols
    h = tl.load(x + r * cols + c, mask=m) * 1.5 + tl.load(b + c, mask=m)
    z = 0.7978845608 * (h + 0.044715 * h * h * h)
    g = 0.5 * h * (1.0 + (2.0 * tl.sigmoid(2.0 * z) - 1.0))
    k = tl.load(keep + r * cols + c, mask=m)
    tl.store(y + r * cols + c, tl.where(k != 0, g * 2.0, 0.0), mask=m)


@triton.jit
def k_transpose(a, b, rows, cols, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)[:, None]
    c = tl.program_id(1) * B + tl.arange(0, B)[None, :]
    v = tl.load(a + r * cols + c, mask=(r < rows) & (c < cols))
    rt = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    ct = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    tl.store(b + ct * rows + rt, tl.trans(v), mask=(ct < cols) & (rt < rows))


@triton.jit
def k_softmax(x, y, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    v = tl.load(x + row * cols + c, mask=c < cols, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(y + row * cols + c, e / tl.sum(e, axis=0), mask=c < cols)


@triton.jit
def k_layernorm(x, g, bta, y, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    v = tl.load(x + row * cols + c, mask=m, other=0.0)
    mean = tl.sum(v, axis=0) / cols
    d = tl.where(m, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
    out = d * rstd * tl.load(g + c, mask=m) + tl.load(bta + c, mask=m)
    tl.store(y + row * cols + c, out, mask=m)


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 128, "BK": 32}, num_warps=8, num_stages=3),
        triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_warps=4, num_stages=4),
        triton.Config({"BM": 64, "BN": 128, "BK": 32}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def k_matmul(a, b, c, bias, M, N, K, GELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        x = tl.load(a + rm[:, None] * K + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        w = tl.load(b + ka[:, None] * N + rn[None, :], mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    if GELU:
        acc += tl.load(bias + rn, mask=rn < N)[None, :]
        z = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * z))
    tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_warps=8, num_stages=3),
        triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=4),
        triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_warps=4, num_stages=4),
        triton.Config({"BM": 64, "BN": 256, "BK": 64}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def k_matmul_nt(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C = A @ B.T with B [N, K], as nn.Linear stores its weight.
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        x = tl.load(a + rm[:, None] * K + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        w = tl.load(b + rn[None, :] * K + ka[:, None], mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_nt_triton(a, b, c):
    M, K = a.shape
    N = b.shape[0]
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    k_matmul_nt[grid](a, b, c, M, N, K)


def matmul_triton(a, b, c, bias=None):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    k_matmul[grid](a, b, c, bias if bias is not None else c, M, N, K, GELU=bias is not None)


def report(tool, kernel, sizes, ms, bytes_=0, flops=0):
    med, lo = ms
    print(json.dumps({"tool": tool, "kernel": kernel, "sizes": sizes, "ms": med, "min_ms": lo,
                      "gbps": bytes_ / med / 1e6, "tflops": flops / med / 1e9}), flush=True)


def run(name, s):
    F = torch.nn.functional
    if name == "vadd":
        n = s["n"]; a, b, c = rnd(n), rnd(n), torch.empty(n, device=dev)
        by = 12 * n
        report("pytorch", name, s, timed(lambda: torch.add(a, b, out=c)), by)
        report("triton", name, s, timed(lambda: k_vadd[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)), by)
    elif name == "saxpy":
        n = s["n"]; x, y, o = rnd(n), rnd(n), torch.empty(n, device=dev)
        by = 12 * n
        report("pytorch", name, s, timed(lambda: torch.add(y, x, alpha=1.5, out=o)), by)
        report("triton", name, s, timed(lambda: k_saxpy[(triton.cdiv(n, 1024),)](x, y, o, 1.5, n, BLOCK=1024)), by)
    elif name in ("bias2d", "bias2d_vec", "bias2d_vec_nofact"):
        r, c = s["rows"], s["cols"]; x, bias, y = rnd(r, c), rnd(c), torch.empty(r, c, device=dev)
        by = 8 * r * c + 4 * c
        report("pytorch", name, s, timed(lambda: torch.add(bias, x, alpha=1.5, out=y)), by)
        grid = (triton.cdiv(r, 32), triton.cdiv(c, 128))
        report("triton", name, s, timed(lambda: k_bias2d[grid](x, bias, y, 1.5, r, c, BR=32, BC=128)), by)
    elif name in ("transpose", "transpose_coarse"):
        r, c = s["rows"], s["cols"]; a, b = rnd(r, c), torch.empty(c, r, device=dev)
        by = 8 * r * c
        report("pytorch", name, s, timed(lambda: b.copy_(a.t())), by)
        grid = (triton.cdiv(r, 64), triton.cdiv(c, 64))
        report("triton", name, s, timed(lambda: k_transpose[grid](a, b, r, c, B=64)), by)
    elif name in ("transpose4d_fallback", "transpose3d_batched", "permute4d_heads"):
        # Transposes of rank 3 and 4 (issue 61): PyTorch's strided copy
        # (with the scale, for transpose4d_fallback) into a contiguous output.
        if name == "transpose3d_batched":
            x = rnd(s["B"], s["R"], s["C"])
            view, scale = x.transpose(1, 2), None
        elif name == "permute4d_heads":
            x = rnd(s["B"], s["S"], s["H"], s["D"]).half()
            view, scale = x.permute(0, 2, 3, 1), None
        else:
            x = rnd(s["B"], s["H"], s["S"], s["D"]).half()
            view, scale = x.transpose(2, 3), 0.5
        o = torch.empty(view.shape, device=dev, dtype=x.dtype)
        by = 2 * x.numel() * x.element_size()
        eager = (lambda: o.copy_(view)) if scale is None else (lambda: torch.mul(view, scale, out=o))
        report("pytorch", name, s, timed(eager), by)
    elif name == "gelu_mask":
        # Bias and scale, tanh GELU, a kept-elements mask scaled by 2:
        # PyTorch's eager operators, and one fused Triton kernel.
        r, c = s["rows"], s["cols"]
        x, b = rnd(r, c), rnd(c)
        keep = torch.randint(0, 2, (r, c), device=dev, dtype=torch.uint8)
        y = torch.empty(r, c, device=dev)
        by = 9 * r * c + 4 * c
        eager = lambda: torch.where(keep != 0, F.gelu(x * 1.5 + b, approximate="tanh") * 2.0, 0.0)
        report("pytorch", name, s, timed(eager), by)
        grid = (r, triton.cdiv(c, 1024))
        report("triton", name, s, timed(lambda: k_gelu_mask[grid](x, b, keep, y, c, BC=1024)), by)
    elif name == "bias_grad":
        # A linear layer's bias gradient: column sums of the output gradient.
        r, c = s["rows"], s["cols"]
        dy = rnd(r, c)
        report("pytorch", name, s, timed(lambda: torch.sum(dy, dim=0)), 4 * r * c + 4 * c)
    elif name in ("reduce_all", "reduce_all_one_group"):
        # The sum of a whole tensor (a loss, a norm): one output.
        n = s["n"]
        x = rnd(n)
        report("pytorch", name, s, timed(lambda: torch.sum(x)), 4 * n + 4)
    elif name == "norm_all":
        # Gradient clipping's global L2 norm.
        n = s["n"]
        x = rnd(n)
        report("pytorch", name, s, timed(lambda: torch.linalg.vector_norm(x)), 4 * n + 4)
    elif name == "mean_rows4_f16":
        # The mean of a few long f16 rows, accumulated in f32.
        c = s["cols"]
        x = rnd(4, c).half()
        report("pytorch", name, s, timed(lambda: torch.mean(x, dim=1, dtype=torch.float32)), 2 * 4 * c + 16)
    elif name in ("cumsum_long", "cumsum_long_whole"):
        # The prefix sums of one long row.
        n = s["n"]
        x = rnd(n)
        report("pytorch", name, s, timed(lambda: torch.cumsum(x, 0)), 8 * n)
    elif name == "linear_recurrence_order":
        # The last state of h_t = a_t * h_(t-1) + x_t along each row (and
        # the product of the a's): PyTorch has no linear-recurrence
        # operator, so its eager form sums x_t times the suffix products of
        # the a's after t (a flipped cumprod), and torch.compile fuses that.
        b, l = s["B"], s["L"]
        a, x = torch.rand(b, l, device=dev), rnd(b, l)
        one = torch.ones(b, 1, device=dev)

        def rec():
            suf = torch.flip(torch.cumprod(torch.flip(a, [1]), 1), [1])
            return suf[:, 0], (x * torch.cat([suf[:, 1:], one], 1)).sum(1)

        by = 8 * b * l + 8 * b
        report("pytorch", name, s, timed(rec), by)
        report("torch-compile", name, s, timed(torch.compile(rec)), by)
    elif name == "cumsum_long_i32":
        n = s["n"]
        x = torch.randint(-1000, 1000, (n,), device=dev, dtype=torch.int32)
        report("pytorch", name, s, timed(lambda: torch.cumsum(x, 0, dtype=torch.int32)), 8 * n)
    elif name == "reduce_rows8":
        # A few very long rows: more work-groups than rows are needed.
        c = s["cols"]
        x = rnd(8, c)
        report("pytorch", name, s, timed(lambda: torch.sum(x, dim=1)), 4 * 8 * c + 32)
    elif name in ("bias_grad_narrow", "bias_grad_narrow_two_groups"):
        # A narrow layer's bias gradient: 64 column sums of many rows.
        r = s["rows"]
        dy = rnd(r, 64)
        report("pytorch", name, s, timed(lambda: torch.sum(dy, dim=0)), 4 * r * 64 + 4 * 64)
    elif name in ("softmax", "softmax_online", "softmax_wide"):
        r, c = s["rows"], s["cols"]; x, y = rnd(r, c), torch.empty(r, c, device=dev)
        by = 8 * r * c
        report("pytorch", name, s, timed(lambda: torch.softmax(x, dim=1, out=y)), by)
        B = triton.next_power_of_2(c)
        report("triton", name, s, timed(lambda: k_softmax[(r,)](x, y, c, BLOCK=B, num_warps=8)), by)
    elif name in ("layernorm", "layernorm_wide"):
        r, c = s["rows"], s["cols"]; x, g, bt = rnd(r, c), rnd(c), rnd(c)
        y = torch.empty(r, c, device=dev)
        by = 8 * r * c + 8 * c
        report("pytorch", name, s, timed(lambda: F.layer_norm(x, (c,), g, bt, 1e-5)), by)
        B = triton.next_power_of_2(c)
        report("triton", name, s, timed(lambda: k_layernorm[(r,)](x, g, bt, y, c, 1e-5, BLOCK=B, num_warps=8)), by)
    elif name == "groupnorm_stats":
        # GroupNorm's per-(sample, group) means over channels and pixels.
        n, c, hw = s["N"], s["C"], s["HW"]
        x = rnd(n, c, hw)
        by = 4 * n * c * hw + 4 * n * 32
        report("pytorch", name, s, timed(lambda: x.view(n, 32, -1).mean(-1)), by)
        report("torch-compile", name, s, timed(torch.compile(lambda: x.view(n, 32, -1).mean(-1))), by)
    elif name == "residual_rmsnorm":
        # A transformer block's residual add + RMSNorm, the sum H kept (the
        # next block reads it): PyTorch's eager operators, and the same
        # under torch.compile, which fuses them into one kernel.
        r, c = s["rows"], s["cols"]
        x, res, w = rnd(r, c), rnd(r, c), rnd(c)
        by = 16 * r * c + 4 * c
        def eager():
            h = x + res
            return h, h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        report("pytorch", name, s, timed(eager), by)
        report("torch-compile", name, s, timed(torch.compile(eager)), by)
    elif name == "embedding":
        # GPT-2's token embedding: 768-wide f16 rows, int32 ids in range.
        t, v = s["T"], s["V"]
        table = rnd(v, 768).half()
        ids = torch.randint(0, v, (t,), device=dev, dtype=torch.int32)
        by = 4 * t + 2 * 2 * 768 * t
        report("pytorch", name, s, timed(lambda: F.embedding(ids, table)), by)
    elif name == "gathered_tile":
        # A projection of gathered rows: F.embedding, then the product
        # with W (cuBLAS SGEMM, TF32 off).
        t, v, d, n = s["T"], s["V"], s["D"], s["N"]
        table, w = rnd(v, d), rnd(d, n)
        ids = torch.randint(0, v, (t,), device=dev, dtype=torch.int32)
        by = 4 * (t + t * d + d * n + t * n)
        report("pytorch", name, s, timed(lambda: F.embedding(ids, table) @ w), by)
    elif name == "argmax":
        # Greedy decoding over GPT-2's vocabulary: the index of each row's max.
        r, c = s["rows"], s["cols"]
        x = rnd(r, c)
        by = 4 * r * c + 8 * r
        report("pytorch", name, s, timed(lambda: torch.argmax(x, dim=1)), by)
    elif name in ("topk", "topk_k64", "topk_small"):
        # Top-k sampling over GPT-2's vocabulary: the k best logits and
        # their indices (k = 8, 64; the 8 smallest).
        r, c = s["rows"], s["cols"]
        x = rnd(r, c)
        k = 64 if name == "topk_k64" else 8
        largest = name != "topk_small"
        by = 4 * r * c + 8 * k * r
        report("pytorch", name, s, timed(lambda: torch.topk(x, k, dim=1, largest=largest)), by)
    elif name.startswith("attention"):
        # SDPA at the same shape, causality and dtype: the flash backend
        # (FlashAttention-2) as "pytorch", cuDNN's attention as "cudnn".
        # TFLOP/s as FlashAttention counts: 4·B·H·S·T·D, halved if causal.
        from torch.nn.attention import sdpa_kernel, SDPBackend
        # A decode file may fix one query row in its shape (no `S` size).
        b, h, sq = s["B"], s["H"], s.get("S", 1)
        t = s.get("T", sq)
        d = 64 if name.split("__")[0] in ("attention_causal", "attention_d64") else 128
        dt = torch.bfloat16 if name.split("__")[0] == "attention_causal" else torch.float16
        causal = "causal" in name
        q, k, v = rnd(b, h, sq, d).to(dt), rnd(b, h, t, d).to(dt), rnd(b, h, t, d).to(dt)
        fl = 4 * b * h * sq * t * d // (2 if causal else 1)
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        for tool, backend in (("pytorch", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    report(tool, name, s, timed(sdpa), 0, fl)
            except Exception as e:  # a backend that does not take the shape
                print(f"{name} {tool}: {e}", file=sys.stderr)
    elif name == "cumsum":
        r, c = s["rows"], s["cols"]
        x = rnd(r, c)
        report("pytorch", name, s, timed(lambda: torch.cumsum(x, dim=1)), 8 * r * c)
    elif name == "log_softmax":
        # Over GPT-2's vocabulary: read the row, write it (the statistics
        # pass reads it once more in both).
        r, c = s["rows"], s["cols"]
        x = rnd(r, c)
        report("pytorch", name, s, timed(lambda: torch.log_softmax(x, dim=1)), 8 * r * c)
    elif name == "cross_entropy":
        # Per-row loss over GPT-2's vocabulary, targets in range.
        r, v = s["rows"], s["vocab"]
        x = rnd(r, v)
        tgt = torch.randint(0, v, (r,), device=dev, dtype=torch.int64)
        report("pytorch", name, s, timed(lambda: F.cross_entropy(x, tgt, reduction="none")), 4 * r * v + 12 * r)
    elif name == "welford_layernorm":
        r, c = s["rows"], s["cols"]; x, g, bt = rnd(r, c), rnd(c), rnd(c)
        report("pytorch", name, s, timed(lambda: F.layer_norm(x, (c,), g, bt, 1e-5)), 8 * r * c + 8 * c)
    elif name in ("histogram", "histogram_global"):
        # 256 bins of bytes; bincount of uint8 (its int64 counts are its own).
        n = s["n"]
        x = torch.randint(0, 256, (n,), device=dev, dtype=torch.uint8)
        report("pytorch", name, s, timed(lambda: torch.bincount(x, minlength=256)), n + 4 * 256)
    elif name.startswith("matmul") or name == "gelu_linear":
        M, N, K = s["M"], s["N"], s["K"]
        a, b, c = rnd(M, K), rnd(K, N), torch.empty(M, N, device=dev)
        fl = 2 * M * N * K
        if name == "gelu_linear":
            bias = rnd(N)
            report("pytorch", name, s, timed(lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh")), 0, fl)
            report("triton", name, s, timed(lambda: matmul_triton(a, b, c, bias)), 0, fl)
        else:
            report("pytorch", name, s, timed(lambda: torch.matmul(a, b, out=c)), 0, fl)
            report("triton", name, s, timed(lambda: matmul_triton(a, b, c)), 0, fl)
    elif name.startswith("gemm_fp8_wgmma"):
        # e4m3 x e4m3 -> f32 accumulate, B [N, K]: cuBLASLt through
        # torch._scaled_mm (unit scales; bf16 out where f32 out is refused).
        M, N, K = s["M"], s["N"], s["K"]
        a = rnd(M, K).to(torch.float8_e4m3fn)
        b = rnd(N, K).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=dev)
        fl = 2 * M * N * K
        try:
            torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
            out = torch.float32
        except Exception:  # noqa: BLE001 - fall back to what every version takes
            out = torch.bfloat16
        # rocmc accumulates in the tensor cores' own fp8 accumulator, as
        # cuBLASLt's fast accumulation does: that is the like-for-like peer.
        # Without it cuBLASLt promotes partial sums into f32 (more precise,
        # slower): reported beside it, as "pytorch-promoted".
        for tool, fast in (("pytorch", True), ("pytorch-promoted", False)):
            mm = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=out, use_fast_accum=fast)
            report(tool, name, s, timed(mm), 0, fl)
    elif name.startswith("gemm_i8_wgmma"):
        # int8 x int8 -> int32, B [N, K]: cuBLAS through torch._int_mm.
        M, N, K = s["M"], s["N"], s["K"]
        a = torch.randint(-128, 128, (M, K), device=dev, dtype=torch.int8)
        b = torch.randint(-128, 128, (N, K), device=dev, dtype=torch.int8)
        fl = 2 * M * N * K
        report("pytorch", name, s, timed(lambda: torch._int_mm(a, b.t())), 0, fl)
    elif name.startswith("gemm_f16_wgmma_tn"):
        # A is [K, M] (a weight gradient's Xᵀ): cuBLAS of A.T @ B.T (f16
        # out, f32 accumulate); the Triton kernels here take contiguous
        # operands only.
        M, N, K = s["M"], s["N"], s["K"]
        a = rnd(K, M).half()
        b = rnd(N, K).half()
        c = torch.empty(M, N, device=dev, dtype=torch.half)
        fl = 2 * M * N * K
        report("pytorch", name, s, timed(lambda: torch.matmul(a.t(), b.t(), out=c)), 0, fl)
    elif name == "gemm_batched_f16":
        # A batched GEMM with bias and ReLU (issue 61): torch.bmm and the
        # epilogue as eager operators, and the same under torch.compile.
        B, M, N, K = s["B"], s["M"], s["N"], s["K"]
        a, w, bias = rnd(B, M, K).half(), rnd(B, K, N).half(), rnd(N).half()
        fl = 2 * B * M * N * K
        eager = lambda: torch.relu(torch.bmm(a, w) + bias)
        report("pytorch", name, s, timed(eager), 0, fl)
        report("torch-compile", name, s, timed(torch.compile(eager)), 0, fl)
    elif name.startswith("gemm_wq_i8"):
        # A weight-only int8 linear layer (issue 61): f16 X [M, K], int8 W
        # [N, K], an f16 scale per column. PyTorch dequantises W then runs
        # cuBLAS; torch.compile the same; cuBLAS on f16 weights is the
        # ceiling (no dequantisation at all).
        M, N, K = s["M"], s["N"], s["K"]
        x = rnd(M, K).half()
        wq = torch.randint(-128, 128, (N, K), device=dev, dtype=torch.int8)
        sc = (rnd(N) / 64).half()
        fl = 2 * M * N * K
        eager = lambda: torch.matmul(x, wq.to(torch.half).t()) * sc
        report("pytorch", name, s, timed(eager), 0, fl)
        report("torch-compile", name, s, timed(torch.compile(eager)), 0, fl)
        w16 = wq.half()
        report("cublas-f16-weights", name, s, timed(lambda: torch.matmul(x, w16.t())), 0, fl)
    elif name == "qk_scores_f16":
        # Every (batch, head)'s Q K^T, scaled: a matmul over two batch axes.
        B, H, S, D = s["B"], s["H"], s["S"], s["D"]
        q, k = rnd(B, H, S, D).half(), rnd(B, H, S, D).half()
        fl = 2 * B * H * S * S * D
        eager = lambda: torch.matmul(q, k.transpose(-1, -2)) * 0.125
        report("pytorch", name, s, timed(eager), 0, fl)
        report("torch-compile", name, s, timed(torch.compile(eager)), 0, fl)
    elif name.startswith(("gemm_f16_wgmma", "gemm_bf16_wgmma")) and "_nn" not in name:
        # B is [N, K] (nn.Linear's weight): cuBLAS of A @ B.T (16-bit out,
        # f32 accumulate) and Triton's tl.dot on the same layout.
        M, N, K = s["M"], s["N"], s["K"]
        t = torch.bfloat16 if name.startswith("gemm_bf16") else torch.half
        a = rnd(M, K).to(t)
        b = rnd(N, K).to(t)
        c = torch.empty(M, N, device=dev, dtype=t)
        fl = 2 * M * N * K
        report("pytorch", name, s, timed(lambda: torch.matmul(a, b.t(), out=c)), 0, fl)
        report("triton", name, s, timed(lambda: matmul_nt_triton(a, b, c)), 0, fl)
    elif name.startswith("gemm_f16"):
        # (gemm_f16_wgmma_nn too: B [K, N].) cuBLAS HGEMM (f16 in, f32 accumulate, f16 out) and Triton's tl.dot;
        # rocmc's kernel writes f32, which moves twice the bytes of C.
        M, N, K = s["M"], s["N"], s["K"]
        a = rnd(M, K).half()
        b = rnd(K, N).half()
        c = torch.empty(M, N, device=dev, dtype=torch.half)
        fl = 2 * M * N * K
        report("pytorch", name, s, timed(lambda: torch.matmul(a, b, out=c)), 0, fl)
        report("triton", name, s, timed(lambda: matmul_triton(a, b, c)), 0, fl)
    elif name == "conv2d":
        n, ch, h, w, k = s["N"], s["C"], s["H"], s["W"], s["K"]
        i, f = rnd(n, ch, h, w), rnd(k, ch, 3, 3)
        fl = 2 * n * k * (h - 2) * (w - 2) * ch * 9
        report("pytorch", name, s, timed(lambda: F.conv2d(i, f)), 0, fl)
    elif name == "conv2d_bias_relu":
        n, ch, h, w, k = s["N"], s["C"], s["H"], s["W"], s["K"]
        i, f, b = rnd(n, ch, h, w), rnd(k, ch, 3, 3), rnd(k)
        fl = 2 * n * k * (h - 2) * (w - 2) * ch * 9
        report("pytorch", name, s, timed(lambda: F.relu(F.conv2d(i, f, b))), 0, fl)
    elif name == "conv1d":
        n, ch, t, k = s["N"], s["C"], s["T"], s["K"]
        x, f = rnd(n, ch, t), rnd(k, ch, 5)
        fl = 2 * n * k * (t - 4) * ch * 5
        report("pytorch", name, s, timed(lambda: F.conv1d(x, f)), 0, fl)
    elif name == "conv1d_grouped":
        n, g, ch, t, k = s["N"], s["G"], s["C"], s["T"], s["K"]
        x, f = rnd(n, g * ch, t), rnd(g * k, ch, 3)
        fl = 2 * n * g * k * (t - 2) * ch * 3
        report("pytorch", name, s, timed(lambda: F.conv1d(x, f, groups=g)), 0, fl)
    elif name == "conv2d_f16":
        n, ch, h, w, k = s["N"], s["C"], s["H"], s["W"], s["K"]
        i, f = rnd(n, ch, h, w).half(), rnd(k, ch, 3, 3).half()
        fl = 2 * n * k * (h - 2) * (w - 2) * ch * 9
        report("pytorch", name, s, timed(lambda: F.conv2d(i, f)), 0, fl)
    elif name == "conv2d_stride2_f16":
        # cuDNN in f16 (tensor cores, f16 output): rocmc's default runs the
        # f16 operands on FMAs, f32 out.
        n, ch, p, q, k = s["N"], s["C"], s["P"], s["Q"], s["K"]
        i, f = rnd(n, ch, 2 * p + 3, 2 * q + 3).half(), rnd(k, ch, 5, 5).half()
        fl = 2 * n * k * p * q * ch * 25
        report("pytorch", name, s, timed(lambda: F.conv2d(i, f, stride=2)), 0, fl)


def copy_bw():
    n = 1 << 28
    a, b = torch.empty(n, device=dev), torch.empty(n, device=dev)
    report("pytorch", "copy", {"n": n}, timed(lambda: b.copy_(a)), 8 * n)


copy_bw()
for name, sizes in plan.items():
    try:
        run(name, sizes)
    except Exception as e:  # a peer that fails is reported, not fatal
        print(json.dumps({"tool": "error", "kernel": name, "error": str(e)[:300]}), flush=True)
