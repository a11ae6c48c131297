"""Reads an AMDGPU code object the way the benchmark compares them: its
kernels' resources from the metadata (llvm-readobj-22), its code from the
disassembly (llvm-objdump-22), the hot loop, that loop's instruction mix,
and an estimate of the loop's time from LLVM's scheduling model
(llvm-mca-22) and the matrix instructions' documented rates.

Independent of rocmc: the same reader judges rocmc's and Triton's code."""

import json
import re
import subprocess
from dataclasses import dataclass, field

OBJDUMP = "llvm-objdump-22"
READOBJ = "llvm-readobj-22"
MCA = "llvm-mca-22"

# Dense matrix throughput per SIMD per clock (flops; an FMA is 2), by
# processor and operand type, from AMD's published peak figures divided by
# clock x CUs x 4 SIMDs: MI300X (gfx942) 1307 TFLOPS f16 dense at 2.1 GHz
# on 304 CUs, twice that for 8-bit types; MI355X (gfx950) 2.5 PFLOPS f16
# at 2.4 GHz on 256 CUs, twice that for 8-bit; RX 7900 XTX (gfx1100) 123
# TFLOPS f16 at 2.5 GHz on 96 CUs (two SIMDs per CU). The instruction
# cycles below are flops per instruction over this rate. On gfx950 only the
# new double-K shapes (16x16x32, 32x32x16 for 16-bit) reach its rate; the
# gfx942 shapes run at gfx942's cost per instruction, as CDNA4's ISA guide
# lists them with the same pass counts.
RATE = {
    "gfx942": {"16": 512, "8": 1024},
    "gfx950": {"16": 1024, "8": 2048},
    "gfx1100": {"16": 256, "8": 256},
}


def matrix_cycles(proc, mnemonic, at_peak=False):
    """Cycles the matrix unit is busy with one instruction of one wave, in
    llvm-mca's unit for `proc`: LLVM's AMDGPU scheduling model counts gfx9
    time in passes of 4 clocks (a wave64 VALU instruction on a 16-lane SIMD
    is 1, v_mfma_f32_16x16x16_f16 on gfx942 is 4), gfx11's in clocks."""
    m = re.match(r"v_(?:mfma|wmma|smfmac)_([a-z0-9]+)_(\d+)x(\d+)x(\d+)(?:x\d+)?_?([a-z0-9_]*)", mnemonic)
    if not m:
        return 0.0
    _, a, b, c, ty = m.groups()
    flops = 2 * int(a) * int(b) * int(c)
    eight = any(t in ty for t in ("fp8", "bf8", "i8", "f8"))
    rate = RATE[proc]["8" if eight else "16"]
    # With `at_peak`, the time the same work takes at the chip's peak for
    # the type: what an instruction of half the rate (gfx950's gfx942
    # shapes) loses shows as work per cycle, not as a busier unit.
    if proc == "gfx950" and not eight and int(c) * (2 if int(a) == 32 else 1) < 32 and not at_peak:
        rate = RATE["gfx942"]["16"]
    if proc == "gfx950" and eight and int(c) * (2 if int(a) == 32 else 1) < 64 and not at_peak:
        rate = RATE["gfx942"]["8"]
    if ty.startswith("f32") or ty == "xf32" or ty.startswith("f64"):
        rate = rate // 4
    return flops / rate / (4 if proc.startswith("gfx9") else 1)


@dataclass
class Insn:
    addr: int
    text: str
    mnemonic: str
    target: int | None = None


@dataclass
class Kernel:
    name: str
    code: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def disassemble(path, proc):
    """Kernels of a code object with their instructions."""
    out = subprocess.run([OBJDUMP, "-d", f"--mcpu={proc}", path], check=True,
                         capture_output=True, text=True).stdout
    kernels, cur = {}, None
    base = {}
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]+) <([^>]+)>:$", line)
        if m:
            cur = Kernel(m.group(2))
            base[cur.name] = int(m.group(1), 16)
            kernels[cur.name] = cur
            continue
        if cur is None or "//" not in line:
            continue
        text, comment = line.split("//", 1)
        text = text.strip()
        a = re.match(r"\s*([0-9A-Fa-f]+):", comment)
        if not text or not a:
            continue
        target = None
        t = re.search(r"<([^>+]+)\+0x([0-9a-f]+)>", comment)
        if t and text.startswith(("s_cbranch", "s_branch")):
            target = base.get(t.group(1), 0) + int(t.group(2), 16)
        cur.code.append(Insn(int(a.group(1), 16), text, text.split()[0], target))
    return kernels


def metadata(path):
    """Per-kernel resources from the code object's metadata note."""
    out = subprocess.run([READOBJ, "--notes", path], check=True,
                         capture_output=True, text=True).stdout
    kernels, cur = {}, None
    for line in out.splitlines():
        # Kernel-level keys sit at one indentation; arguments' deeper.
        m = re.match(r"^  (- |  )\.(\w+):\s*(.*)$", line)
        if not m:
            continue
        lead, k, v = m.groups()
        if lead == "- ":
            cur = {}
        if cur is None:
            continue
        if re.fullmatch(r"\d+", v.strip()):
            cur[k] = int(v)
        elif k == "name":
            cur["name"] = v.strip()
            kernels[cur["name"]] = cur
    return kernels


def loops(code):
    """(first, last) instruction indices of each loop: a backward branch's
    target to the last backward branch to it (a loop with two latches is
    one loop)."""
    index = {i.addr: n for n, i in enumerate(code)}
    last = {}
    for n, i in enumerate(code):
        if i.target is not None and i.target <= i.addr and i.target in index:
            if not ends_at_once(code, index[i.target]):
                last[index[i.target]] = n
    return sorted(last.items())


def ends_at_once(code, start):
    """Whether the instructions from `start` reach `s_endpgm` before any
    branch: a backward branch there is a jump to the kernel's exit laid
    out earlier (LLVM places a vector path after its scalar fallback and
    jumps back to the shared end), not a loop."""
    for i in code[start:]:
        if i.mnemonic == "s_endpgm":
            return True
        if i.mnemonic.startswith(("s_cbranch", "s_branch", "s_setpc")):
            return False
    return False


CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
       "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def version_taken(code, value, bound):
    """The instructions a kernel versioned on a size runs at `value` of it,
    in order: rocmc's kernels with a version for sizes up to `bound` (a
    row kept in registers) start by comparing the size with `bound` (or
    `bound + 1`) and branching on the result; this takes that branch as
    `value` decides and keeps what is reachable from the entry, every
    other branch both ways. None if no such compare-and-branch is there."""
    index = {i.addr: n for n, i in enumerate(code)}
    guard = None
    for n, i in enumerate(code[:-1]):
        m = re.match(r"s_cmpk?_(eq|lg|gt|ge|lt|le)_[iu]32\s+s\d+,\s*(0x[0-9a-f]+|\d+)$", i.text)
        nxt = code[n + 1]
        if m and int(m.group(2), 0) in (bound, bound + 1) and nxt.mnemonic in ("s_cbranch_scc0", "s_cbranch_scc1"):
            scc = CMP[m.group(1)](value, int(m.group(2), 0))
            taken = scc == (nxt.mnemonic == "s_cbranch_scc1")
            guard = (n + 1, taken)
            break
        if i.mnemonic.startswith(("global_", "buffer_", "ds_")) or i.target is not None:
            break
    if guard is None:
        return None
    seen, todo = set(), [0]
    while todo:
        n = todo.pop()
        if n in seen or n >= len(code):
            continue
        seen.add(n)
        i = code[n]
        if n == guard[0]:
            todo.append(index[i.target] if guard[1] else n + 1)
            continue
        if i.target is not None and i.target in index:
            todo.append(index[i.target])
        if i.mnemonic not in ("s_branch", "s_endpgm", "s_setpc_b64"):
            todo.append(n + 1)
    return [code[n] for n in sorted(seen)]


def is_matrix(m):
    return m.startswith(("v_mfma", "v_smfmac", "v_wmma", "v_swmmac"))


def hot_loop(code):
    """The loop with the most matrix instructions, else the most vector
    memory instructions; the innermost of equals. None: straight-line code.
    Of loops with equally many matrix instructions the shortest: a loop
    versioned on a run-time fact (rocmc's whole-vector tile copies, taken
    when rows are multiples of 8 elements, as at the benchmark's sizes)
    runs its short version there, and the general one is longer."""
    best = None
    for a, b in loops(code):
        body = code[a:b + 1]
        matrix = sum(is_matrix(i.mnemonic) for i in body)
        loads = sum(i.mnemonic.startswith(("global_load", "buffer_load", "flat_load")) for i in body)
        key = (matrix, 0 if matrix else loads, -(b - a))
        # A loop that neither loads nor multiplies (a spin, a store tail)
        # is not where the kernel's time goes.
        if key[0] == 0 and key[1] == 0:
            continue
        if best is None or key > best[0]:
            best = (key, (a, b))
    return None if best is None else best[1]


WIDTH = [("dwordx4", 16), ("b128", 16), ("dwordx3", 12), ("b96", 12), ("dwordx2", 8), ("b64", 8),
         ("dword", 4), ("b32", 4), ("short", 2), ("u16", 2), ("b16", 2), ("byte", 1), ("u8", 1), ("i8", 1), ("b8", 1)]


def width(m):
    if m.startswith(("ds_read2", "ds_write2", "ds_load_2", "ds_store_2")):
        for s, w in WIDTH:
            if s in m:
                return 2 * w
    for s, w in WIDTH:
        if s in m:
            return w
    return 0


def mix(body, proc):
    """The instruction mix of a run of instructions."""
    c = {"instructions": 0, "matrix": 0, "matrix_cycles": 0.0, "peak_cycles": 0.0, "vmem_load": {}, "vmem_store": {},
         "lds_read": {}, "lds_write": {}, "to_lds": 0, "waits": 0, "barriers": 0, "branches": 0,
         "valu": 0, "salu": 0}

    def bump(d, w):
        d[w] = d.get(w, 0) + 1

    for i in body:
        m = i.mnemonic
        if m == "s_nop":
            continue
        c["instructions"] += 1
        if is_matrix(m):
            c["matrix"] += 1
            c["matrix_cycles"] += matrix_cycles(proc, m)
            c["peak_cycles"] += matrix_cycles(proc, m, at_peak=True)
        elif m.startswith(("global_load", "buffer_load", "flat_load")):
            if " lds" in i.text or "_lds" in m:
                c["to_lds"] += 1
            bump(c["vmem_load"], width(m))
        elif m.startswith(("global_store", "buffer_store", "flat_store")):
            bump(c["vmem_store"], width(m))
        elif m.startswith(("ds_read", "ds_load", "ds_bpermute", "ds_permute")):
            bump(c["lds_read"], width(m) if "tr_" not in m else 8)
        elif m.startswith(("ds_write", "ds_store")):
            bump(c["lds_write"], width(m))
        elif m.startswith(("s_waitcnt", "s_wait_")):
            c["waits"] += 1
        elif m == "s_barrier" or m.startswith("s_barrier_"):
            c["barriers"] += 1
        elif m.startswith(("s_cbranch", "s_branch", "s_setpc")):
            c["branches"] += 1
        elif m.startswith("v_"):
            c["valu"] += 1
        elif m.startswith("s_"):
            c["salu"] += 1
    return c


def mca_cycles(body, proc):
    """(latency, throughput): cycles per iteration of `body` by llvm-mca's
    model of `proc` for one wave alone (its dependences' latencies; memory
    at the model's fixed latencies), and the resource bound with enough
    waves to hide every latency (Block RThroughput); or None.
    Instructions llvm-mca cannot parse are left out, up to a few."""
    lines = [i.text for i in body if not i.mnemonic.startswith(("s_cbranch", "s_branch"))]
    for _ in range(6):
        r = subprocess.run([MCA, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={proc}", "-iterations=50"],
                           input="\n".join(lines), capture_output=True, text=True)
        m = re.search(r"Total Cycles:\s+(\d+)", r.stdout)
        t = re.search(r"Block RThroughput:\s+([\d.]+)", r.stdout)
        if m and t:
            return int(m.group(1)) / 50, float(t.group(1))
        bad = {int(n) - 1 for n in re.findall(r"<stdin>:(\d+):\d+: error", r.stderr)}
        if not bad:
            return None
        lines = [l for n, l in enumerate(lines) if n not in bad]
    return None


def load_loops(code):
    """The outermost loops that load from global memory, as (first, last)
    ranges: the passes a kernel makes over its inputs."""
    ls = sorted(loops(code), key=lambda ab: ab[0] - ab[1])
    out = []
    for a, b in ls:
        if any(a >= x and b <= y for x, y in out):
            continue
        if any(i.mnemonic.startswith(("global_load", "buffer_load", "flat_load")) for i in code[a:b + 1]):
            out.append((a, b))
    return out


def in_flight(body, wave):
    """The most global-load bytes a wave has issued and not waited for,
    over `body`: a wait on `vmcnt` (or a gfx12 `s_wait_loadcnt`) retires
    what came before it, as far as its count allows."""
    pending, most = [], 0
    for i in body:
        m = i.mnemonic
        if m.startswith(("global_load", "buffer_load", "flat_load")):
            pending.append(width(m) * wave)
            most = max(most, sum(pending))
        elif m.startswith("s_waitcnt") or m.startswith("s_wait_loadcnt"):
            c = re.search(r"(?:vmcnt|loadcnt)\((\d+)\)", i.text) or (
                re.match(r"s_wait_loadcnt\s+(?:0x)?([0-9a-f]+)", i.text))
            if c:
                keep = int(c.group(1), 16) if "0x" in i.text else int(c.group(1))
                pending = pending[len(pending) - keep:] if keep else []
    return most
