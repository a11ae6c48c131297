"""The peer side of the AMD benchmark: the same computations as
bench/amd/rocmc/*.toml, written for Triton the way its AMD backend is
usually driven (block sizes, warps, stages and the AMD-only options its
tutorials and tuning tables use), compiled ahead of time for a gfx target
with no GPU present."""

import triton
import triton.language as tl


@triton.jit
def tile_product(A, B, M, N, K, sam, sak, sbk, sbn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    # This program's BM x BN tile of A @ B in f32 and its tile coordinates.
    # Grouped tile order, so that neighbouring programs share B tiles in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP * tiles_n
    first = (pid // per_group) * GROUP
    rows = min(tiles_m - first, GROUP)
    pm = first + (pid % per_group) % rows
    pn = (pid % per_group) // rows
    om = (pm * BM + tl.arange(0, BM)) % M
    on = (pn * BN + tl.arange(0, BN)) % N
    ok = tl.arange(0, BK)
    a = A + om[:, None] * sam + ok[None, :] * sak
    b = B + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(a, mask=ok[None, :] < K - k * BK, other=0.0)
        y = tl.load(b, mask=ok[:, None] < K - k * BK, other=0.0)
        # 8-bit weights by 16-bit activations (weight-only quantised): B
        # converted to A's type; a no-op where the types agree.
        acc = tl.dot(x, y.to(x.dtype), acc)
        a += BK * sak
        b += BK * sbk
    return acc, pm, pn


@triton.jit
def matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    acc, pm, pn = tile_product(A, B, M, N, K, sam, sak, sbk, sbn, BM, BN, BK, GROUP)
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    c = C + cm[:, None] * scm + cn[None, :] * scn
    tl.store(c, acc.to(C.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def matmul_scaled(A, B, C, Scale, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    # `matmul` times a scale per column (a weight-only quantised layer).
    acc, pm, pn = tile_product(A, B, M, N, K, sam, sak, sbk, sbn, BM, BN, BK, GROUP)
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    acc *= tl.load(Scale + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    c = C + cm[:, None] * scm + cn[None, :] * scn
    tl.store(c, acc.to(C.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def bmm_bias_relu(A, B, C, Bias, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    # `matmul` per batch (program_id(1)), then the bias of each column and
    # a ReLU: examples/gemm_batched_f16.toml.
    z = tl.program_id(1)
    acc, pm, pn = tile_product(A + z * sab, B + z * sbb, M, N, K, sam, sak, sbk, sbn, BM, BN, BK, GROUP)
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    acc += tl.load(Bias + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    acc = tl.maximum(acc, 0.0)
    c = C + z * scb + cm[:, None] * scm + cn[None, :] * scn
    tl.store(c, acc.to(C.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def attention(Q, K, V, O, L, sqz, sqh, sqm, skz, skh, skn, svz, svh, svn, soz, soh, som,
              H, S, scale,
              D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
    # One program per (block of query rows, batch x head); online softmax in base 2.
    start = tl.program_id(0)
    zh = tl.program_id(1)
    z = zh // H
    h = zh % H
    rm = start * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(Q + z * sqz + h * sqh + rm[:, None] * sqm + rd[None, :], mask=rm[:, None] < S, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    qk_scale = scale * 1.44269504
    end = tl.minimum((start + 1) * BM, S) if CAUSAL else S
    kb = K + z * skz + h * skh
    vb = V + z * svz + h * svh
    for n0 in range(0, end, BN):
        cols = n0 + rn
        k = tl.load(kb + cols[None, :] * skn + rd[:, None], mask=cols[None, :] < S, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (rm[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(vb + cols[:, None] * svn + rd[None, :], mask=cols[:, None] < S, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + z * soz + h * soh + rm[:, None] * som + rd[None, :], acc.to(O.dtype.element_ty), mask=rm[:, None] < S)
    tl.store(L + zh * S + rm, m_i / 1.44269504 + tl.log(l_i), mask=rm < S)


@triton.jit
def softmax(X, Y, cols, sx, sy, BLOCK: tl.constexpr):
    # A row per program, held in registers.
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    x = tl.load(X + r * sx + c, mask=c < cols, other=-float("inf"))
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(Y + r * sy + c, e / tl.sum(e, 0), mask=c < cols)


@triton.jit
def layernorm(X, Y, W, Bias, cols, sx, sy, eps, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    x = tl.load(X + r * sx + c, mask=m, other=0.0)
    mean = tl.sum(x, 0) / cols
    d = tl.where(m, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / cols + eps)
    w = tl.load(W + c, mask=m)
    b = tl.load(Bias + c, mask=m)
    tl.store(Y + r * sy + c, d * rstd * w + b, mask=m)


@triton.jit
def rmsnorm(X, Y, W, cols, sx, sy, eps, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    x = tl.load(X + r * sx + c, mask=m, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / cols + eps)
    w = tl.load(W + c, mask=m)
    tl.store(Y + r * sy + c, x * rstd * w, mask=m)


@triton.jit
def vadd(A, B, C, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(C + o, tl.load(A + o, mask=m) + tl.load(B + o, mask=m), mask=m)
