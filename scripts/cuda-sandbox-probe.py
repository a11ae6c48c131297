#!/usr/bin/env python3
# Run on a GPU machine: python3 scripts/cuda-sandbox-probe.py [FOLDER...] [noioctl]
# Which writes does the CUDA driver need? Applies Landlock rules like a
# rocmc session's (read everywhere, writes to device files and a scratch
# folder) plus the extra folders named, then calls cuInit.
import ctypes, os, stat, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
READ = 1 | 4 | 8
ALL = (1 << 16) - 1
FILE_ALL = 1 | 2 | 4 | 16384 | 32768
class RS(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
class PB(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]
handled = ALL if "noioctl" not in sys.argv else ALL & ~32768
attr = RS(handled, 0, 0)
rs = sc(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
assert rs >= 0, ctypes.get_errno()
def rule(path, access):
    fd = os.open(path, os.O_PATH)
    if not os.path.isdir(path):
        access &= FILE_ALL
    r = sc(445, rs, 1, ctypes.byref(PB(access & handled, fd)), 0)
    assert r == 0, (path, ctypes.get_errno())
rule("/", READ)
for root, dirs, files in os.walk("/dev"):
    for f in files:
        p = os.path.join(root, f)
        try:
            m = os.lstat(p).st_mode
        except OSError:
            continue
        if stat.S_ISCHR(m) or stat.S_ISBLK(m):
            rule(p, ALL)
scratch = tempfile.mkdtemp()
os.environ["TMPDIR"] = scratch
os.environ["CUDA_CACHE_PATH"] = scratch + "/cc"
rule(scratch, ALL)
for extra in sys.argv[1:]:
    if extra.startswith("/"):
        rule(extra, ALL)
libc.prctl(38, 1, 0, 0, 0)
assert sc(446, rs, 0) == 0
cuda = ctypes.CDLL("libcuda.so.1")
r = cuda.cuInit(0)
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
r2 = cuda.cuDeviceGet(ctypes.byref(dev), 0) if r == 0 else -1
r3 = cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) if r2 == 0 else -1
print(" ".join(sys.argv[1:]) or "base", "cuInit", r, "ctx", r3)
