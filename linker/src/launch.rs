//! rocmc's launch geometry, stored in code objects (and, for NVIDIA, in a
//! comment line of the PTX).
//!
//! HIP's loader ignores non-allocated ELF sections, so each code object rocmc
//! writes carries a `.rocmc.launch` section holding this JSON document: for
//! every kernel, the work-group size and the grid as expressions of the size
//! arguments, and the arguments with their dtypes and shapes. The runtime
//! and generated launchers read it; it needs no LLVM to use.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Name of the ELF section holding the launch document.
pub const SECTION: &str = ".rocmc.launch";
pub const FORMAT_VERSION: u32 = 1;
/// Start of the PTX comment line holding the launch document.
pub const PTX_MARKER: &str = "// rocmc.launch ";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchInfo {
    pub version: u32,
    /// The size arguments and the largest value each may take; the kernel's
    /// index arithmetic is exact only up to these.
    #[serde(default)]
    pub sizes: Vec<SizeBound>,
    pub kernels: Vec<KernelLaunch>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeBound {
    pub name: String,
    pub max: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelLaunch {
    pub name: String,
    /// Threads per work-group in x, y, z.
    pub block: [u32; 3],
    /// Work-groups in x, y, z.
    pub grid: [Extent; 3],
    /// The same, as text for people (`ceil(n / 64)`).
    pub grid_text: [String; 3],
    /// Arguments in kernel order.
    pub args: Vec<LaunchArg>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgRole {
    /// A tensor in global memory.
    Buffer,
    /// A symbolic size, `i32`.
    Size,
    /// A scalar parameter passed by value.
    Scalar,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchArg {
    pub name: String,
    pub role: ArgRole,
    /// Element type of a buffer, type of a size or scalar (`f32`, `i32`, ...).
    pub dtype: String,
    /// Extents of a buffer, outermost first; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shape: Vec<Extent>,
    /// Whether the kernel writes this buffer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub written: bool,
}

/// An integer expression of size arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Extent {
    Const(i64),
    Size(String),
    Add(Box<Extent>, Box<Extent>),
    Sub(Box<Extent>, Box<Extent>),
    Mul(Box<Extent>, Box<Extent>),
    Div(Box<Extent>, Box<Extent>),
    CeilDiv(Box<Extent>, Box<Extent>),
    Mod(Box<Extent>, Box<Extent>),
    Min(Box<Extent>, Box<Extent>),
    Max(Box<Extent>, Box<Extent>),
}

impl Extent {
    /// Evaluates with the given sizes; `None` if a size is missing, a
    /// division is by zero, or the arithmetic overflows.
    pub fn eval(&self, sizes: &HashMap<String, i64>) -> Option<i64> {
        use Extent::*;
        let bin = |a: &Extent, b: &Extent| Some((a.eval(sizes)?, b.eval(sizes)?));
        match self {
            Const(v) => Some(*v),
            Size(s) => sizes.get(s).copied(),
            Add(a, b) => bin(a, b).and_then(|(x, y)| x.checked_add(y)),
            Sub(a, b) => bin(a, b).and_then(|(x, y)| x.checked_sub(y)),
            Mul(a, b) => bin(a, b).and_then(|(x, y)| x.checked_mul(y)),
            Div(a, b) => bin(a, b).and_then(|(x, y)| (y != 0).then(|| x.div_euclid(y))),
            CeilDiv(a, b) => bin(a, b).and_then(|(x, y)| (y != 0).then(|| -((-x).div_euclid(y)))),
            Mod(a, b) => bin(a, b).and_then(|(x, y)| (y != 0).then(|| x.rem_euclid(y))),
            Min(a, b) => bin(a, b).map(|(x, y)| x.min(y)),
            Max(a, b) => bin(a, b).map(|(x, y)| x.max(y)),
        }
    }
}

impl LaunchInfo {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("launch info is always serialisable")
    }

    pub fn from_json(s: &[u8]) -> Result<LaunchInfo, serde_json::Error> {
        serde_json::from_slice(s)
    }

    /// Top-level assembly that places the document in [`SECTION`], a
    /// non-allocated section (never loaded onto the GPU).
    pub fn module_asm(&self) -> String {
        let json = self.to_json();
        let mut out = format!("\t.pushsection {SECTION},\"\",@progbits\n");
        // .ascii with escapes keeps the document readable in `--emit asm`.
        for chunk in json.as_bytes().chunks(120) {
            out.push_str("\t.ascii \"");
            for &b in chunk {
                match b {
                    b'"' => out.push_str("\\\""),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(b as char),
                    _ => out.push_str(&format!("\\{b:03o}")),
                }
            }
            out.push_str("\"\n");
        }
        out.push_str("\t.popsection\n");
        out
    }

    /// The document as one PTX comment line (PTX has no sections; the CUDA
    /// driver skips comments, rocmc's CUDA runtime reads this line back).
    pub fn ptx_comment(&self) -> String {
        // serde_json escapes every control character, so the line cannot end early.
        format!("{PTX_MARKER}{}\n", self.to_json())
    }

    /// The document a PTX module carries: `None` when it has none (not
    /// rocmc's), else the parsed document or why it does not parse.
    pub fn from_ptx(ptx: &str) -> Option<Result<LaunchInfo, serde_json::Error>> {
        let line = ptx
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(PTX_MARKER))?;
        Some(LaunchInfo::from_json(line.as_bytes()))
    }

    pub fn kernel(&self, name: &str) -> Option<&KernelLaunch> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_expressions_evaluate() {
        let e = Extent::CeilDiv(
            Box::new(Extent::Size("n".into())),
            Box::new(Extent::Const(64)),
        );
        let sizes = HashMap::from([("n".to_string(), 1000)]);
        assert_eq!(e.eval(&sizes), Some(16));
        assert_eq!(e.eval(&HashMap::new()), None);
    }

    #[test]
    fn json_round_trips() {
        let l = LaunchInfo {
            version: FORMAT_VERSION,
            sizes: vec![SizeBound {
                name: "n".into(),
                max: 100,
            }],
            kernels: vec![KernelLaunch {
                name: "k".into(),
                block: [64, 1, 1],
                grid: [Extent::Size("n".into()), Extent::Const(1), Extent::Const(1)],
                grid_text: ["n".into(), "1".into(), "1".into()],
                args: vec![LaunchArg {
                    name: "n".into(),
                    role: ArgRole::Size,
                    dtype: "i32".into(),
                    shape: vec![],
                    written: false,
                }],
            }],
        };
        assert_eq!(LaunchInfo::from_json(l.to_json().as_bytes()).unwrap(), l);
        assert!(l.module_asm().contains(".pushsection .rocmc.launch"));
        let ptx = format!(".version 7.8\n{}.target sm_90\n", l.ptx_comment());
        assert_eq!(LaunchInfo::from_ptx(&ptx).unwrap().unwrap(), l);
        assert!(LaunchInfo::from_ptx(".version 7.8\n").is_none());
    }
}
