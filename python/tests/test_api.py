"""The Python API against NumPy on the CPU device: run by
tests/python.rs (cargo test) with the extension just built; every check
fails loudly. Run by hand: PYTHONPATH=<package dir> python3 test_api.py
from the repository's root."""

import subprocess
import sys
import tempfile
import os

import numpy as np

import rocmc

checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def raises(exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            check(w in str(e), f"{w!r} not in {e}")
        return str(e)
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


cpu = rocmc.device("cpu")
check(cpu.target == "x86-64", cpu.info)
check(any(d["name"] == "cpu" for d in rocmc.devices()), rocmc.devices())

# vadd: by name, positionally, sizes read off the shapes.
vadd = cpu.load(rocmc.compile("examples/vadd.toml", target=cpu.target))
check(str(vadd.signature) == "(A: f32[n], B: f32[n], C: out f32[n], n: i32)", str(vadd.signature))
a = np.arange(1000, dtype=np.float32)
b = np.full(1000, 0.5, np.float32)
c = np.zeros(1000, np.float32)
vadd(A=a, B=b, C=c)
check(np.array_equal(c, a + b), "vadd by name")
c[:] = 0
vadd(a, b, c, n=1000)
check(np.array_equal(c, a + b), "vadd in order")
# The same array under two names is one buffer: C = A + A, in place.
d = a.copy()
vadd(A=d, B=d, C=d)
check(np.array_equal(d, 2 * a), "aliased in place")

raises(TypeError, lambda: vadd(A=a.astype(np.float64), B=b, C=c), "A: float64 array where the kernel takes f32")
raises(ValueError, lambda: vadd(A=a, B=b[:10], C=c), "size n is 1000 elsewhere but 10 here")
raises(TypeError, lambda: vadd(A=a, B=b), "missing C")
raises(TypeError, lambda: vadd(A=a, B=b, C=c, X=a), "no argument `X`")
raises(ValueError, lambda: vadd(A=a, B=b, C=np.zeros(2000, np.float32)[::2]), "C: an output must be a writeable C-contiguous array")
# The device's own check of the launch document, under the Python checks.
m = cpu._dev
buf = m.upload(a.tobytes())
raises(rocmc.RocmcError, lambda: m.call(vadd._module, vadd._plan, [(0, buf, 4000, 1000)] * 3, [2000], [], 0), "vadd")
raises(rocmc.RocmcError, lambda: m.call(vadd._module, vadd._plan, [(0, buf, 4000, 1000)] * 3, [], [], 0), "passes")
m.free(buf)

# saxpy: a scalar parameter.
saxpy = cpu.load(rocmc.compile("examples/saxpy.toml", target="x86-64"))
out = np.empty(257, np.float32)
x = np.linspace(-1, 1, 257, dtype=np.float32)
saxpy(x=x, y=b[:257], out=out, alpha=3.0)
check(np.allclose(out, 3 * x + b[:257], rtol=1e-6), "saxpy")

# Three kernels in one module (softmax without its compute_at steps),
# rows by columns from a 2-D array's shape.
src = open("examples/softmax.toml").read()
src3 = src.replace('"compute_at(Y, r)", ', '"bind(r, blockIdx.x)", ')
check(src3 != src, "softmax has the step the test removes")
sm = cpu.load(rocmc.compile(source=src3, target="x86-64", name="softmax3.toml"))
check(len(sm.signature.kernels) >= 2, sm.signature.kernels)
X = np.random.default_rng(1).standard_normal((37, 129)).astype(np.float32)
outs = {s.name: np.zeros(X.shape if len(s.shape) == 2 else X.shape[0], np.float32)
        for s in sm.signature if s.role == "buffer" and s.written}
sm(X=X, **outs)
want = np.exp(X - X.max(1, keepdims=True))
want /= want.sum(1, keepdims=True)
check(np.allclose(outs["Y"], want, atol=1e-6), "softmax")

# f16 and bool: a half-precision scale under a mask, through DLPack.
half = """
[kernel]
name = "hmask"
sizes = ["n"]
[inputs]
X = { dtype = "f16", shape = ["n"] }
M = { dtype = "bool", shape = ["n"] }
[params]
s = "f16"
[[stage]]
compute = "Y[i] = select(M[i], X[i] * s, X[i])"
shape = ["n"]
"""
hm = cpu.load(rocmc.compile(source=half, target="x86-64"))


class Dl:
    """Something with DLPack and no NumPy type."""
    def __init__(self, a):
        self.a = a
    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)
    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


xh = np.arange(64, dtype=np.float16)
mk = (np.arange(64) % 3 == 0)
yh = np.zeros(64, np.float16)
hm(X=Dl(xh), M=mk, Y=yh, s=2.0)
check(np.array_equal(yh, np.where(mk, xh * np.float16(2), xh)), "f16 masked scale")

# Kernel mistakes: file, line and column.
e = raises(rocmc.RocmcError, lambda: rocmc.compile(source=half.replace("X[i] * s", "X[i] * q"), target="x86-64", name="hmask.toml"),
           "hmask.toml:", "`q`")
check("^" in e, e)
raises(rocmc.RocmcError, lambda: rocmc.compile("examples/vadd.toml", target="gfx9999"), "gfx9999")

# Other targets: an AMD code object, PTX; neither loads on the CPU.
hsaco = rocmc.compile("examples/vadd.toml", target="gfx942")
check(hsaco[:4] == b"\x7fELF", hsaco[:4])
ptx = rocmc.compile("examples/vadd.toml", target="sm_90")
check(b".target sm_90" in ptx, ptx[:200])
raises(rocmc.RocmcError, lambda: cpu.load(hsaco))

# The command line, in this process and as `python -m rocmc`.
with tempfile.TemporaryDirectory() as t:
    out = os.path.join(t, "vadd.hsaco")
    r = subprocess.run([sys.executable, "-m", "rocmc", "build", "--mcpu", "gfx1100", "examples/vadd.toml", "-o", out],
                       capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(out) > 0, r.stderr)
    bad = os.path.join(t, "bad.toml")
    open(bad, "w").write(half.replace("X[i] * s", "X[i] * q"))
    r = subprocess.run([sys.executable, "-m", "rocmc", "build", "--mcpu", "gfx942", bad], capture_output=True, text=True)
    check(r.returncode != 0 and "bad.toml:" in r.stderr and r.stderr.count("error") == 1, r.stderr)
    check(not os.path.exists(os.path.join(t, "bad.hsaco")), "no partial output")

print(f"python api: {checks} checks passed")
