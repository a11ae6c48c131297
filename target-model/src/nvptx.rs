//! NVIDIA targets: the `sm_NN` processors LLVM 22's NVPTX backend knows,
//! the PTX ISA version each needs, and whether PTX built for one runs on a
//! device of a given compute capability. A test in rocmc-codegen compares
//! the table with the LLVM that rocmc links.

use std::fmt;

/// One processor of LLVM's NVPTX table, with the lowest PTX ISA version
/// that can target it (LLVM's default for it), as `major * 10 + minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvProcessor {
    pub name: &'static str,
    pub ptx: u32,
}

const fn p(name: &'static str, ptx: u32) -> NvProcessor {
    NvProcessor { name, ptx }
}

/// LLVM 22's NVPTX processors, in its (alphabetical) order.
pub const PROCESSORS: &[NvProcessor] = &[
    p("sm_100", 86),
    p("sm_100a", 86),
    p("sm_100f", 88),
    p("sm_101", 86),
    p("sm_101a", 86),
    p("sm_101f", 88),
    p("sm_103", 88),
    p("sm_103a", 88),
    p("sm_103f", 88),
    p("sm_110", 90),
    p("sm_110a", 90),
    p("sm_110f", 90),
    p("sm_120", 87),
    p("sm_120a", 87),
    p("sm_120f", 88),
    p("sm_121", 88),
    p("sm_121a", 88),
    p("sm_121f", 88),
    p("sm_20", 32),
    p("sm_21", 32),
    p("sm_30", 32),
    p("sm_32", 40),
    p("sm_35", 32),
    p("sm_37", 41),
    p("sm_50", 40),
    p("sm_52", 41),
    p("sm_53", 42),
    p("sm_60", 50),
    p("sm_61", 50),
    p("sm_62", 50),
    p("sm_70", 60),
    p("sm_72", 61),
    p("sm_75", 63),
    p("sm_80", 70),
    p("sm_86", 71),
    p("sm_87", 74),
    p("sm_88", 90),
    p("sm_89", 78),
    p("sm_90", 78),
    p("sm_90a", 80),
];

/// Product names accepted for `--mcpu`, and the processor each one is.
pub const PRODUCT_ALIASES: &[(&str, &str)] = &[
    ("v100", "sm_70"),
    ("t4", "sm_75"),
    ("a100", "sm_80"),
    ("a30", "sm_80"),
    ("a10", "sm_86"),
    ("a40", "sm_86"),
    ("rtx3090", "sm_86"),
    ("l4", "sm_89"),
    ("l40", "sm_89"),
    ("l40s", "sm_89"),
    ("rtx4090", "sm_89"),
    ("h100", "sm_90"),
    ("h200", "sm_90"),
    ("gh200", "sm_90"),
    ("b200", "sm_100"),
    ("gb200", "sm_100"),
    ("rtx5090", "sm_120"),
];

/// Static shared memory one block may declare, in bytes, on every NVIDIA
/// GPU. A kernel that needs more gets its shared arrays carved out of one
/// dynamic (`.extern .shared`) array instead, which the runtime opts in to
/// per kernel ([`NvidiaTarget::max_shared_per_block`] bounds it).
pub const STATIC_SHARED_PER_BLOCK: u32 = 48 * 1024;

/// Threads one block may have.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;

/// Blocks a grid may have in x, y and z (every processor since sm_30).
pub const MAX_GRID: [u64; 3] = [(1 << 31) - 1, 65_535, 65_535];

/// The processor `name` names: itself (`sm_90`), or a product (`h100`,
/// case and `-` ignored).
pub fn canonical_processor(name: &str) -> Option<&'static str> {
    let key: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .collect();
    if let Some((_, p)) = PRODUCT_ALIASES.iter().find(|(a, _)| *a == key) {
        return Some(p);
    }
    PROCESSORS.iter().find(|e| e.name == name).map(|e| e.name)
}

/// Whether `--mcpu name` means an NVIDIA target.
pub fn is_nvidia_name(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.starts_with("sm_")
        || l.starts_with("sm") && l[2..].starts_with(|c: char| c.is_ascii_digit())
        || canonical_processor(name).is_some()
}

/// Product names of a processor.
pub fn aliases_of(processor: &str) -> Vec<String> {
    PRODUCT_ALIASES
        .iter()
        .filter(|(_, p)| *p == processor)
        .map(|(a, _)| a.to_string())
        .collect()
}

/// A compute capability, `(major, minor)`: what a device reports.
pub type ComputeCapability = (u32, u32);

/// The CUDA release whose driver first accepts a PTX ISA version, as
/// `(major, minor)` of the CUDA version (PTX ISA manual, release notes).
pub fn cuda_for_ptx(ptx: u32) -> (u32, u32) {
    match ptx {
        0..=32 => (5, 5),
        40 => (6, 0),
        41 => (6, 5),
        42 => (7, 0),
        43 => (7, 5),
        50 => (8, 0),
        60 => (9, 0),
        61 => (9, 1),
        62 => (9, 2),
        63 => (10, 0),
        64 => (10, 1),
        65 => (10, 2),
        70..=78 => (11, ptx - 70),
        80..=88 => (12, ptx - 80 + (ptx >= 86) as u32),
        _ => (ptx / 10 + 4, ptx % 10),
    }
}

/// An NVIDIA target: the processor and the PTX ISA version written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NvidiaTarget {
    pub processor: String,
    /// PTX ISA version, `major * 10 + minor` (78 is PTX 7.8).
    pub ptx_version: u32,
}

impl NvidiaTarget {
    /// A processor name as LLVM spells it, or a product name. `None` when
    /// it is neither.
    pub fn parse(name: &str) -> Option<NvidiaTarget> {
        let processor = canonical_processor(name)?;
        let e = PROCESSORS.iter().find(|e| e.name == processor)?;
        Some(NvidiaTarget {
            processor: processor.to_string(),
            ptx_version: e.ptx,
        })
    }

    /// The compute capability the processor is, e.g. (9, 0) for `sm_90a`.
    pub fn compute_capability(&self) -> ComputeCapability {
        parse_cc(&self.processor).unwrap_or((0, 0))
    }

    /// LLVM subtarget features: the PTX ISA version.
    pub fn llvm_features(&self) -> String {
        format!("+ptx{}", self.ptx_version)
    }

    /// PTX ISA version as text, `7.8`.
    pub fn ptx_text(&self) -> String {
        format!("{}.{}", self.ptx_version / 10, self.ptx_version % 10)
    }

    /// Whether PTX for this target runs on a device of compute capability
    /// `dev`: plain targets on that capability or any later one (the driver
    /// compiles PTX for newer GPUs); `sm_90a`-style ones only on exactly
    /// that capability; `sm_100f`-style ones on the same major family.
    pub fn runs_on(&self, dev: ComputeCapability) -> bool {
        let cc = self.compute_capability();
        match self.processor.chars().last() {
            Some('a') => dev == cc,
            Some('f') => dev.0 == cc.0 && dev.1 >= cc.1,
            _ => dev >= cc,
        }
    }

    /// Shared memory one block may use, in bytes, once the kernel opts in
    /// to more than [`STATIC_SHARED_PER_BLOCK`] (CUDA's "maximum amount of
    /// shared memory per thread block" per compute capability).
    pub fn max_shared_per_block(&self) -> u32 {
        const KIB: u32 = 1024;
        match self.compute_capability() {
            (7, 0) | (7, 2) => 96 * KIB,
            (7, 5) => 64 * KIB,
            (8, 0) | (8, 7) => 163 * KIB,
            (8, _) | (12, _) => 99 * KIB,
            (9, _) | (10, _) | (11, _) => 227 * KIB,
            _ => STATIC_SHARED_PER_BLOCK,
        }
    }

    /// Whether the instruction set has native f16 arithmetic (`fma.rn.f16`).
    pub fn has_f16_math(&self) -> bool {
        self.compute_capability() >= (5, 3)
    }

    /// Whether the instruction set has native bf16 arithmetic (`fma.rn.bf16`).
    pub fn has_bf16_math(&self) -> bool {
        self.compute_capability() >= (9, 0)
    }
}

fn parse_cc(p: &str) -> Option<ComputeCapability> {
    let digits: String = p
        .strip_prefix("sm_")?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let n: u32 = digits.parse().ok()?;
    Some((n / 10, n % 10))
}

impl fmt::Display for NvidiaTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_products_parse() {
        let t = NvidiaTarget::parse("sm_90").unwrap();
        assert_eq!((t.compute_capability(), t.ptx_version), ((9, 0), 78));
        assert_eq!(NvidiaTarget::parse("H100").unwrap().processor, "sm_90");
        assert_eq!(
            NvidiaTarget::parse("sm_121a").unwrap().compute_capability(),
            (12, 1)
        );
        assert!(NvidiaTarget::parse("sm_91").is_none());
        assert!(is_nvidia_name("sm_91") && is_nvidia_name("h100") && !is_nvidia_name("gfx90a"));
    }

    #[test]
    fn ptx_runs_forward_except_arch_specific() {
        let t = |s: &str| NvidiaTarget::parse(s).unwrap();
        assert!(t("sm_80").runs_on((9, 0)));
        assert!(!t("sm_90").runs_on((8, 9)));
        assert!(t("sm_90a").runs_on((9, 0)));
        assert!(!t("sm_90a").runs_on((10, 0)));
        assert!(t("sm_100f").runs_on((10, 3)));
        assert!(!t("sm_100f").runs_on((12, 0)));
    }

    #[test]
    fn ptx_versions_map_to_cuda_releases() {
        assert_eq!(cuda_for_ptx(78), (11, 8));
        assert_eq!(cuda_for_ptx(80), (12, 0));
        assert_eq!(cuda_for_ptx(85), (12, 5));
        assert_eq!(cuda_for_ptx(86), (12, 7));
        assert_eq!(cuda_for_ptx(88), (12, 9));
        assert_eq!(cuda_for_ptx(90), (13, 0));
        assert_eq!(cuda_for_ptx(63), (10, 0));
    }
}
