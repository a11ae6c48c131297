//! `rocmc inspect --loops`: each kernel's loops, read back from its machine
//! code (LLVM's disassembler), with the instruction mix that decides their
//! speed on AMD GPUs: matrix instructions and how much else runs per one,
//! memory and LDS traffic by width, waits, barriers, branches. The same
//! counts as the static benchmark against Triton (bench/amd/isa.py).

use crate::codegen::disasm::{disassemble_amdgpu, Insn};
use crate::linker::codeobject::CodeObject;
use std::collections::BTreeMap;

/// One loop: a backward branch and the instructions from its target to it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoopSummary {
    pub start: u64,
    pub end: u64,
    /// Loops enclosing this one, plus 1.
    pub depth: usize,
    /// The loop with the most matrix instructions (else global loads).
    pub hot: bool,
    pub instructions: usize,
    pub matrix: usize,
    /// Counts by bytes per lane.
    pub global_loads: BTreeMap<u32, usize>,
    pub global_stores: BTreeMap<u32, usize>,
    pub lds_reads: BTreeMap<u32, usize>,
    pub lds_writes: BTreeMap<u32, usize>,
    pub waits: usize,
    pub barriers: usize,
    pub branches: usize,
    pub valu: usize,
    pub salu: usize,
}

/// Bytes per lane of a memory instruction, from its name.
fn width(m: &str) -> u32 {
    const W: [(&str, u32); 14] = [
        ("dwordx4", 16),
        ("b128", 16),
        ("dwordx3", 12),
        ("b96", 12),
        ("dwordx2", 8),
        ("b64", 8),
        ("dword", 4),
        ("b32", 4),
        ("short", 2),
        ("u16", 2),
        ("b16", 2),
        ("byte", 1),
        ("u8", 1),
        ("i8", 1),
    ];
    let pair = if m.contains("read2") || m.contains("write2") || m.contains("load_2") {
        2
    } else {
        1
    };
    W.iter()
        .find(|(s, _)| m.contains(s))
        .map_or(0, |(_, w)| w * pair)
}

fn is_matrix(m: &str) -> bool {
    ["v_mfma", "v_smfmac", "v_wmma", "v_swmmac"]
        .iter()
        .any(|p| m.starts_with(p))
}

fn summarise(body: &[Insn], start: u64, end: u64, depth: usize) -> LoopSummary {
    let mut s = LoopSummary {
        start,
        end,
        depth,
        hot: false,
        instructions: 0,
        matrix: 0,
        global_loads: BTreeMap::new(),
        global_stores: BTreeMap::new(),
        lds_reads: BTreeMap::new(),
        lds_writes: BTreeMap::new(),
        waits: 0,
        barriers: 0,
        branches: 0,
        valu: 0,
        salu: 0,
    };
    for i in body {
        let m = i.mnemonic();
        if m == "s_nop" {
            continue;
        }
        s.instructions += 1;
        let starts = |ps: &[&str]| ps.iter().any(|p| m.starts_with(p));
        if is_matrix(m) {
            s.matrix += 1;
        } else if starts(&["global_load", "buffer_load", "flat_load"]) {
            *s.global_loads.entry(width(m)).or_default() += 1;
        } else if starts(&["global_store", "buffer_store", "flat_store"]) {
            *s.global_stores.entry(width(m)).or_default() += 1;
        } else if starts(&["ds_read", "ds_load", "ds_bpermute", "ds_permute"]) {
            *s.lds_reads.entry(width(m)).or_default() += 1;
        } else if starts(&["ds_write", "ds_store"]) {
            *s.lds_writes.entry(width(m)).or_default() += 1;
        } else if starts(&["s_waitcnt", "s_wait_"]) {
            s.waits += 1;
        } else if starts(&["s_barrier"]) {
            s.barriers += 1;
        } else if starts(&["s_cbranch", "s_branch", "s_setpc"]) {
            s.branches += 1;
        } else if m.starts_with("v_") {
            s.valu += 1;
        } else if m.starts_with("s_") {
            s.salu += 1;
        }
    }
    s
}

/// The loops of the kernel whose code is `code`, outermost first.
pub fn loops_of(code: &[Insn]) -> Vec<LoopSummary> {
    let index: BTreeMap<u64, usize> = code.iter().enumerate().map(|(n, i)| (i.addr, n)).collect();
    let mut spans: Vec<(usize, usize)> = code
        .iter()
        .enumerate()
        .filter_map(|(n, i)| {
            let t = i.target?;
            (t <= i.addr).then(|| index.get(&t).map(|&a| (a, n)))?
        })
        .collect();
    spans.sort_by_key(|&(a, b)| (a, std::cmp::Reverse(b)));
    let mut out: Vec<LoopSummary> = spans
        .iter()
        .map(|&(a, b)| {
            let depth = spans.iter().filter(|&&(x, y)| x <= a && b <= y).count();
            summarise(&code[a..=b], code[a].addr, code[b].addr, depth)
        })
        .collect();
    // A loop that neither loads nor multiplies (a spin, a store tail) is
    // not where the kernel's time goes.
    let hot = out
        .iter()
        .enumerate()
        .filter(|(_, l)| l.matrix > 0 || !l.global_loads.is_empty())
        .max_by_key(|(_, l)| {
            let loads: usize = l.global_loads.values().sum();
            (l.matrix, loads, l.depth)
        })
        .map(|(n, _)| n);
    if let Some(n) = hot {
        out[n].hot = true;
    }
    out
}

/// Each kernel's loops: (kernel name, loops), read from the code object's
/// `.text` at the kernel's symbol.
pub fn kernel_loops(
    bytes: &[u8],
    co: &CodeObject,
) -> Result<Vec<(String, Vec<LoopSummary>)>, String> {
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))?;
    let text = elf
        .section_headers
        .iter()
        .find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(".text"))
        .ok_or("the code object has no .text section")?;
    let cpu = co
        .target_id()
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut out = Vec::new();
    for k in &co.kernels {
        let Some(sym) = elf
            .syms
            .iter()
            .find(|s| s.is_function() && elf.strtab.get_at(s.st_name) == Some(k.name.as_str()))
        else {
            continue;
        };
        let from = sym
            .st_value
            .checked_sub(text.sh_addr)
            .and_then(|o| o.checked_add(text.sh_offset))
            .ok_or_else(|| format!("kernel `{}` lies outside .text", k.name))?;
        let range = usize::try_from(from)
            .ok()
            .zip(usize::try_from(sym.st_size).ok());
        let code = range
            .and_then(|(f, n)| bytes.get(f..f.checked_add(n)?))
            .ok_or_else(|| format!("kernel `{}`'s code lies outside the file", k.name))?;
        let insns = disassemble_amdgpu(&cpu, code, sym.st_value)?;
        out.push((k.name.clone(), loops_of(&insns)));
    }
    Ok(out)
}

fn widths(m: &BTreeMap<u32, usize>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .rev()
        .map(|(w, n)| format!("{n}x{w}B"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line per loop, indented by depth.
pub fn render(l: &LoopSummary) -> String {
    let per = if l.matrix > 0 {
        format!(
            " ({:.1} instructions per matrix instruction)",
            l.instructions as f64 / l.matrix as f64
        )
    } else {
        String::new()
    };
    format!(
        "  {}loop {:#x}-{:#x}{}: {} instructions, {} matrix{per}; global loads {}, stores {}; LDS reads {}, writes {}; {} waits, {} barriers, {} branches, {} VALU, {} SALU\n",
        "  ".repeat(l.depth.saturating_sub(1)),
        l.start,
        l.end,
        if l.hot { " [hot]" } else { "" },
        l.instructions,
        l.matrix,
        widths(&l.global_loads),
        widths(&l.global_stores),
        widths(&l.lds_reads),
        widths(&l.lds_writes),
        l.waits,
        l.barriers,
        l.branches,
        l.valu,
        l.salu
    )
}
