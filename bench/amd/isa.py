"""Reads an AMDGPU code object the way the benchmark compares them: its
kernels' resources from the metadata (llvm-readobj-22), its code from the
disassembly (llvm-objdump-22), the hot loop, that loop's instruction mix,
and an estimate of the loop's time from LLVM's scheduling model
(llvm-mca-22) and the matrix instructions' documented rates.

Independent of rocmc: the same reader judges rocmc's and Triton's code."""

import functools
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


def load_destination(text):
    """The VGPR numbers a load writes (none for a load into LDS)."""
    m = re.match(r"\S+\s+v(?:(\d+)|\[(\d+):(\d+)\])", text)
    if not m or " lds" in text or "_lds" in text.split()[0]:
        return frozenset()
    lo = int(m.group(1) or m.group(2))
    return frozenset(range(lo, int(m.group(3) or lo) + 1))


EXEC_OPS = re.compile(
    r"s_(and|or|xor|andn2|and_not1|orn2|or_not1|mov)(_saveexec)?_b(32|64)\s+([^,]+),\s*([^,]+)(?:,\s*(.+))?$")


def exec_step(i, live, saved):
    """The exec-mask instructions of AMDGPU's structured control flow, with
    every lane agreeing on every condition (as at the benchmark's sizes):
    exec is all lanes (True) or none (False), and so is each scalar
    register holding a mask. A mask of a condition is unknown (None): the
    path chooses. Returns [(live, saved)], one per choice, or None where
    `i` does not touch exec."""
    if i.mnemonic.startswith("v_cmpx"):
        # exec &= a condition (gfx10+).
        return [(live, saved), (False, saved)]
    m = EXEC_OPS.match(i.text)
    if not m or "exec" not in i.text:
        return None
    op, save, _, d, x, y = m.groups()
    op = {"and_not1": "andn2", "or_not1": "orn2"}.get(op, op)
    d = d.strip()
    get = lambda r: live if r.strip().startswith("exec") else saved.get(r.strip())
    apply = lambda a, b: {"and": a and b, "or": a or b, "xor": a != b, "andn2": a and not b,
                          "orn2": a or not b, "mov": a}[op]
    either = lambda v: [v] if v is not None else [True, False]
    if save:
        # D = exec; exec = op(S, exec).
        return [(apply(s, live), {**saved, d: live}) for s in either(get(x))]
    a = get(x)
    b = get(y) if y is not None else a
    if not d.startswith("exec"):
        rest = {k: v for k, v in saved.items() if k != d}
        return [(live, rest if a is None or b is None else {**rest, d: apply(a, b)})]
    return [(v, saved) for v in dict.fromkeys(apply(av, bv) for av in either(a) for bv in either(b))]


def in_flight(body, wave, loop=False):
    """The most global-load bytes a wave has issued and not waited for,
    along the path through `body` that a run at the benchmark's sizes
    takes (two iterations of `body` if `loop`: loads a loop issues for the
    next iteration stay in flight across its branch). A wait on `vmcnt`
    (or a gfx12 `s_wait_loadcnt`) retires what came before it, as far as
    its count allows; a load into registers a pending load also writes
    retires that one (nothing read its value).

    Paths, not the instructions in order: the two sides of a branch do not
    run one after the other. rocmc's kernels hold a straight vector version
    of a group of loads beside a checked one (each vector, or each element,
    on its own: for lanes past a row's end or unaligned rows), and AMDGPU
    lays both out one after the other under exec masks, skipping one at
    run time. At the benchmark's sizes (rows a multiple of every vector
    width) every lane decides alike, so exec is all lanes or none
    ([`exec_step`]: the two sides of an if are complements), a load under
    an empty exec issues nothing, `s_cbranch_execz`/`execnz` follow exec,
    and of the paths left the one taken writes the most registers by
    16-byte loads (it skips none: every lane is in range, loading whole
    vectors), then has the fewest narrow loads (under 16 bytes), then the
    fewest instructions (the straight version, not the checked one, nor
    both), then the most in flight. A branch on a vote
    (vcc, scc) leads both ways, except past code whose loads are all
    16-byte ones (every lane loads whole vectors); an unconditional one
    only to its target; at a join the better path by that order is kept,
    per state of exec; a branch out of `body` ends a path there; backward
    branches lead to the loop's next
    iteration (the second copy) or, in the second copy, out."""
    n = len(body)
    copies = 2 if loop else 1
    at = {i.addr: k for k, i in enumerate(body)}
    # Per position and exec state (live, saved masks): (-registers loaded
    # by 16-byte loads, narrow loads, instructions, -most in flight,
    # pending [(bytes, registers)], registers loaded by 16-byte loads).
    states = [dict() for _ in range(n * copies)]
    states[0][(True, frozenset())] = (0, 0, 0, 0, [], frozenset())
    ends = []

    def send(to, ex, st):
        if to >= len(states):
            ends.append(st)
            return
        k = (ex[0], frozenset(ex[1].items()))
        if k not in states[to] or st[:4] < states[to][k][:4]:
            states[to][k] = st

    @functools.lru_cache(maxsize=None)
    def vector_only(a, b):
        ws = [width(i.mnemonic) for i in body[a:b]
              if i.mnemonic.startswith(("global_load", "buffer_load", "flat_load"))]
        return bool(ws) and min(ws) >= 16

    for pos in range(n * copies):
        copy, k = divmod(pos, n)
        i = body[k]
        m = i.mnemonic
        for (live, sv), (_, narrow, count, most, pending, loaded) in states[pos].items():
            saved = dict(sv)
            if live and m.startswith(("global_load", "buffer_load", "flat_load")):
                regs = load_destination(i.text)
                pending = [p for p in pending if not p[1] & regs] + [(width(m) * wave, regs)]
                most = min(most, -sum(b for b, _ in pending))
                narrow += width(m) < 16
                if width(m) >= 16:
                    # A load into LDS writes no register: it counts by its place.
                    loaded = loaded | (regs or {("lds", i.addr)})
            elif m.startswith("s_waitcnt") or m.startswith("s_wait_loadcnt"):
                c = re.search(r"(?:vmcnt|loadcnt)\((\d+)\)", i.text) or (
                    re.match(r"s_wait_loadcnt\s+(?:0x)?([0-9a-f]+)", i.text))
                if c:
                    keep = int(c.group(1), 16) if "0x" in i.text else int(c.group(1))
                    pending = pending[len(pending) - keep:] if keep else []
            st = (-len(loaded), narrow, count + 1, most, pending, loaded)
            if m in ("s_endpgm", "s_setpc_b64"):
                ends.append(st)
                continue
            nexts = exec_step(i, live, saved) or [(live, saved)]
            for ex in nexts:
                taken = fall = True
                if m == "s_cbranch_execz":
                    taken, fall = not ex[0], ex[0]
                elif m == "s_cbranch_execnz":
                    taken, fall = ex[0], not ex[0]
                elif m == "s_branch":
                    fall = False
                if i.target is not None and i.target not in at and taken:
                    # Out of the range: the path leaves it.
                    ends.append(st)
                if i.target is not None and i.target in at and taken:
                    t = at[i.target]
                    vote = m.startswith("s_cbranch") and "exec" not in m
                    if t > k and not (vote and vector_only(k + 1, t)):
                        send(copy * n + t, ex, st)
                    elif t <= k and copy + 1 < copies:
                        send((copy + 1) * n + t, ex, st)
                    elif t <= k:
                        ends.append(st)
                if fall:
                    send(pos + 1, ex, st)
        states[pos] = None
    return -min(ends, key=lambda x: x[:4])[3] if ends else 0
