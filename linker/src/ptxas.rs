//! NVIDIA's PTX assembler as an independent checker of the PTX rocmc
//! writes (rocmc itself never needs it: the CUDA driver compiles PTX when
//! it loads it). The tests and the benchmark use it; scripts/install-ptxas.sh
//! installs it from PyPI without CUDA.

use std::path::{Path, PathBuf};
use std::process::Command;

/// ptxas: `ROCMC_PTXAS`, else the newest copy scripts/install-ptxas.sh put
/// in `~/.cache/rocmc` (or `ROCMC_CACHE`), else `ptxas` on PATH.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ROCMC_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("ROCMC_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rocmc")));
    if let Some(dir) = cache.and_then(|c| std::fs::read_dir(c).ok()) {
        let mut found: Vec<PathBuf> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("ptxas"))
            .filter(|p| p.exists())
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Some(p);
        }
    }
    Command::new("ptxas")
        .arg("--version")
        .output()
        .ok()
        .map(|_| PathBuf::from("ptxas"))
}

/// What ptxas reports for one kernel: registers, shared memory, spills.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The kernel (`.entry`) name.
    pub kernel: String,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
    /// Stack frame, bytes.
    pub stack_bytes: u32,
    /// Whether ptxas serialized the kernel's `wgmma` instructions (its
    /// C7515 "Potential Performance Loss"), which costs most of their speed.
    pub wgmma_serialized: bool,
    /// Whether ptxas inserted fences of its own before `wgmma` instructions
    /// whose registers were written after the program's `wgmma.fence`
    /// (C7519): a fence per instruction, where one per group would do.
    pub wgmma_fences_added: bool,
}

/// Assembles `ptx` for `arch` with the ptxas at `ptxas` (`-v`, warnings as
/// errors); its per-kernel report, or ptxas's output as the error.
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<Report>, String> {
    let entry = cached(ptxas, ptx, arch);
    if let Some(text) = entry.as_ref().and_then(|e| std::fs::read_to_string(e).ok()) {
        return Ok(parse(&text));
    }
    let text = run(ptxas, ptx, arch)?;
    if let Some(e) = entry {
        store(&e, &text);
    }
    Ok(parse(&text))
}

/// Where `ROCMC_CACHE_DIR` is set (as for LLVM's outputs: codegen's
/// cache.rs), the file that holds the report of an accepted `ptx` for
/// `arch` by this `ptxas` (known by its path, size and modification time):
/// ptxas is a pure function of them, and the tests ask it about the same
/// PTX in every run.
fn cached(ptxas: &Path, ptx: &str, arch: &str) -> Option<std::path::PathBuf> {
    use sha2::{Digest, Sha256};
    let dir = std::env::var_os("ROCMC_CACHE_DIR").filter(|d| !d.is_empty())?;
    let exe = std::fs::metadata(ptxas)
        .or_else(|_| std::fs::metadata(which(ptxas)?))
        .ok()?;
    let mut h = Sha256::new();
    for part in [
        b"rocmc-ptxas-cache 1".as_slice(),
        ptxas.as_os_str().as_encoded_bytes(),
        format!("{} {:?}", exe.len(), exe.modified().ok()?).as_bytes(),
        arch.as_bytes(),
        ptx.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    Some(
        PathBuf::from(dir)
            .join("ptxas")
            .join(format!("{:x}", h.finalize())),
    )
}

/// `ptxas` as PATH finds it, for a bare name.
fn which(ptxas: &Path) -> std::io::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(ptxas))
        .find(|p| p.is_file())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
}

/// Keeps an accepted report; written aside and renamed, so a reader sees
/// all of it or nothing.
fn store(entry: &Path, text: &str) {
    static WRITER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(dir) = entry.parent() else { return };
    let n = WRITER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("tmp.{}-{n}", std::process::id()));
    if std::fs::create_dir_all(dir).is_ok()
        && std::fs::write(&tmp, text).is_ok()
        && std::fs::rename(&tmp, entry).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// One ptxas run: its output where it accepts the PTX, else as the error.
fn run(ptxas: &Path, ptx: &str, arch: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let src = dir.path().join("k.ptx");
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .args(["-v", "--warning-as-error", "-arch", arch, "-o"])
        .arg(dir.path().join("k.cubin"))
        .arg(&src)
        .output()
        .map_err(|e| format!("{}: {e}", ptxas.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(text);
    }
    Ok(text)
}

/// Parses `ptxas -v` output.
pub fn parse(text: &str) -> Vec<Report> {
    let num = |line: &str, before: &str| -> u32 {
        line.split(before)
            .next()
            .and_then(|s| s.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut out: Vec<Report> = Vec::new();
    let mut serialized: Vec<String> = Vec::new();
    let mut fenced: Vec<String> = Vec::new();
    // Printed before the entry they concern, naming it.
    let named = |line: &str, before: &str| {
        line.split(before)
            .nth(1)
            .map(|n| n.split('\'').next().unwrap_or_default().to_string())
    };
    for line in text.lines() {
        if line.contains("(C7515)") {
            serialized.extend(named(line, "in the function '"));
            continue;
        }
        if line.contains("(C7519)") {
            fenced.extend(named(line, "in function '"));
            continue;
        }
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.push(Report {
                kernel: rest.split('\'').next().unwrap_or_default().to_string(),
                ..Default::default()
            });
        } else if let Some(r) = out.last_mut() {
            if line.contains("bytes stack frame") {
                r.stack_bytes = num(line, " bytes stack frame");
                r.spill_stores = num(line, " bytes spill stores");
                r.spill_loads = num(line, " bytes spill loads");
            } else if line.contains("Used ") && line.contains(" registers") {
                r.registers = num(line, " registers");
                if line.contains(" bytes smem") {
                    r.shared_bytes = num(line, " bytes smem");
                }
            }
        }
    }
    for r in &mut out {
        r.wgmma_serialized = serialized.contains(&r.kernel);
        r.wgmma_fences_added = fenced.contains(&r.kernel);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn ptxas_reports_parse() {
        let text = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\nptxas info    : Used 40 registers, used 1 barriers, 8448 bytes smem, 380 bytes cmem[0]\n";
        let r = &super::parse(text)[0];
        assert_eq!(
            (
                r.kernel.as_str(),
                r.registers,
                r.shared_bytes,
                r.spill_stores,
                r.spill_loads,
                r.stack_bytes
            ),
            ("k", 40, 8448, 8, 4, 16)
        );
        assert!(!r.wgmma_serialized && !r.wgmma_fences_added);
        let text = "ptxas info    : (C7519) warpgroup.arrive is injected in around line 813 by compiler to allow use of registers in GMMA in function 'a'\nptxas info    : Compiling entry function 'a' for 'sm_90a'\nptxas info    : Compiling entry function 'b' for 'sm_90a'\n";
        let r = super::parse(text);
        assert!(r[0].wgmma_fences_added && !r[1].wgmma_fences_added);
    }
}
