"""rocmc's Python API on an NVIDIA GPU beside PyTorch (scripts/python-gpu.sh).

1. Correctness on CUDA tensors used in place: vadd, saxpy (a scalar),
   softmax and layernorm (rows x cols from 2-D shapes) against PyTorch, on
   the default stream and inside `torch.cuda.stream(side)` with the inputs
   made and the outputs read on that stream without synchronising; NumPy
   arrays on the same device (copied); the refusals.
2. The host's cost of one launch of vadd on 1,024 elements, K launches
   queued then one synchronize: the rocmc call from Python on CUDA tensors,
   PyTorch's own torch.add(out=) (the peer, same run), and the same kernel
   through the Rust typed launcher (vadd-app cuda launches K).
"""

import os
import subprocess
import sys
import time

import numpy as np
import torch

import rocmc

d = sys.argv[1]
dev = rocmc.device("cuda:0")
print(f"device: {dev.info['description']} ({dev.target}); rocmc {rocmc.__version__}; torch {torch.__version__}")
k = {n: dev.load(open(f"{d}/ptx/{n}.ptx", "rb").read()) for n in ["vadd", "saxpy", "softmax", "layernorm"]}
rows = []


def check(name, got, want, tol):
    err = (got.float() - want.float()).abs().max().item()
    ok = err <= tol
    rows.append((name, err, tol, "ok" if ok else "FAIL"))


g = torch.Generator(device="cuda").manual_seed(0)


def call(name, kernel, inputs, want, tol, **outs):
    """Runs ``kernel`` with ``inputs`` and ``outs``; ``want`` was computed
    before, from copies; the inputs must come back unchanged."""
    before = {n: t.clone() for n, t in inputs.items() if torch.is_tensor(t)}
    kernel(**inputs, **outs)
    got = next(iter(outs.values()))
    check(name, got, want, tol)
    for n, t in before.items():
        check(f"  {n} unchanged", inputs[n], t, 0.0)


n = (1 << 20) + 3
a = torch.randn(n, device="cuda", generator=g)
b = torch.randn(n, device="cuda", generator=g)
c = torch.empty_like(a)
call("vadd, default stream", k["vadd"], {"A": a, "B": b}, a + b, 0.0, C=c)
call("saxpy, default stream", k["saxpy"], {"x": a, "y": b, "alpha": 0.25}, 0.25 * a + b, 1e-6, out=c)

X = torch.randn(4099, 1000, device="cuda", generator=g)
call("softmax 4099x1000", k["softmax"], {"X": X}, torch.softmax(X, 1), 1e-6, Y=torch.empty_like(X))

# A side stream: inputs made there, the kernels queued there, the result
# read there, no synchronize in between.
side = torch.cuda.Stream()
worst = 0.0
with torch.cuda.stream(side):
    for i in range(20):
        x = torch.randn(2048, 4096, device="cuda", generator=g) * (i + 1)
        gamma = torch.randn(4096, device="cuda", generator=g)
        beta = torch.randn(4096, device="cuda", generator=g)
        want = torch.nn.functional.layer_norm(x, (4096,), gamma, beta, 1e-5)
        y = torch.empty_like(x)
        k["layernorm"](X=x, gamma=gamma, beta=beta, Y=y, eps=1e-5)
        worst = max(worst, (y - want).abs().max().item())
    side.synchronize()
rows.append(("layernorm 2048x4096, side stream (20 rounds)", worst, 1e-4, "ok" if worst <= 1e-4 else "FAIL"))

# NumPy on the GPU device: copied there and back.
an = a[:1000].cpu().numpy()
cn = np.empty_like(an)
k["vadd"](A=an, B=an, C=cn)
rows.append(("vadd, NumPy copied to the GPU", float(np.abs(cn - 2 * an).max()), 0.0,
             "ok" if np.array_equal(cn, 2 * an) else "FAIL"))

# A CPU tensor beside GPU ones: host memory, copied there and back.
ch = torch.empty(n)
call("vadd, GPU inputs and a CPU output (copied back)", k["vadd"], {"A": a, "B": b}, (a + b).cpu(), 0.0, C=ch)

for what, fn in [
    ("f64 tensor", lambda: k["vadd"](A=a.double(), B=b, C=c)),
    ("strided tensor", lambda: k["vadd"](A=a[::2], B=b[::2], C=c[::2])),
    ("short tensor", lambda: k["vadd"](A=a, B=b[:-1], C=c)),
]:
    try:
        fn()
        rows.append((f"refuses a {what}", 0, 0, "FAIL"))
    except (TypeError, ValueError, rocmc.RocmcError) as e:
        rows.append((f"refuses a {what}: {str(e)[:60]}", 0, 0, "ok"))

# As PyTorch operators (torch.library), eagerly and under torch.compile.
import rocmc.torch as rt
vadd_op = rt.op(k["vadd"], "rocmc_bench::vadd")
saxpy_op = rt.op(k["saxpy"], "rocmc_bench::saxpy")
ln_op = rt.op(k["layernorm"], "rocmc_bench::layernorm")
want = a + b
check("torch.ops.rocmc_bench.vadd", vadd_op(a, b), want, 0.0)
want = 3 * a + b
check("torch.ops.rocmc_bench.saxpy(alpha=3)", saxpy_op(a, b, 3.0), want, 1e-6)


def block(x, gamma, beta):
    h = ln_op(x, gamma, beta, 1e-5)
    # vadd is 1-D: rows and columns as one.
    return torch.relu(vadd_op(h.reshape(-1), x.reshape(-1)).view(x.shape)) * 0.5


compiled = torch.compile(block, fullgraph=True)
for rows_ in [512, 300]:
    x = torch.randn(rows_, 4096, device="cuda", generator=g)
    gamma = torch.randn(4096, device="cuda", generator=g)
    beta = torch.randn(4096, device="cuda", generator=g)
    x0 = x.clone()
    want = torch.relu(torch.nn.functional.layer_norm(x, (4096,), gamma, beta, 1e-5) + x) * 0.5
    check(f"layernorm+vadd ops eagerly, {rows_} rows", block(x, gamma, beta), want, 1e-4)
    check(f"layernorm+vadd ops under torch.compile(fullgraph), {rows_} rows", compiled(x, gamma, beta), want, 1e-4)
    check("  x unchanged", x, x0, 0.0)

# Launch cost.
K = 2000
small = torch.ones(1024, device="cuda")
out = torch.empty_like(small)


def per_launch(fn):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(K):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / K * 1e6)
    return best


py = per_launch(lambda: k["vadd"](A=small, B=small, C=out))
py_op = per_launch(lambda: vadd_op(small, small))
pt = per_launch(lambda: torch.add(small, small, out=out))
r = subprocess.run([f"{d}/vadd-app", "cuda", "launches", str(K)], capture_output=True, text=True)
rust = float(r.stdout.split(":")[1].split()[0]) if r.returncode == 0 else float("nan")
print(r.stdout.strip() or r.stderr.strip())

print()
print(f"{'check':58} {'max |err|':>10} {'tol':>7}  result")
for name, err, tol, res in rows:
    print(f"{name:58} {err:10.2e} {tol:7.0e}  {res}")
print()
print("host cost of one launch of vadd on 1,024 elements (best of 5 x 2,000 queued launches)")
print(f"{'caller':44} {'us/launch':>10} {'vs torch.add':>13}")
for name, us in [("rocmc from Python, CUDA tensors", py),
                 ("rocmc as a torch.library operator (allocates C)", py_op),
                 ("torch.add(out=) (peer)", pt),
                 ("rocmc Rust typed launcher (vadd-app)", rust)]:
    print(f"{name:44} {us:10.2f} {us / pt:12.2f}x")
sys.exit(0 if all(x[3] == "ok" for x in rows) else 1)
