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
    /// Every value must be a multiple of this (`[kernel] divisible`): the
    /// code relies on it for alignment. Absent in documents before it.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub divisor: u64,
}

fn one() -> u64 {
    1
}

fn is_one(d: &u64) -> bool {
    *d == 1
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
    /// Bytes of dynamic shared memory the kernel is launched with (NVIDIA
    /// kernels whose shared arrays exceed the 48 KiB a block may declare
    /// statically); the runtime opts the kernel in to that much.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dynamic_shared: u32,
    /// Where the kernel has shared arrays sized at launch (tiles over
    /// loops of symbolic extent): the bytes of dynamic shared memory (LDS)
    /// it is launched with, an expression of its sizes; at most
    /// `dynamic_shared` on NVIDIA, which the kernel is opted in to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_shared_bytes: Option<Extent>,
    /// The tensor maps of a kernel whose tiles the tensor memory
    /// accelerator copies (`cache_read(..., tma=1)`, NVIDIA sm_90a): the
    /// runtime encodes one per entry at launch and passes their address
    /// as a hidden argument after the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_maps: Vec<TensorMapLaunch>,
    /// What a launch's sizes must satisfy for the code to be exact (a
    /// fused loop of sizes without `max`, counted in 32 bits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<LaunchRequirement>,
}

/// `extent <= max` at the launch's sizes; `text` shows the extent and
/// `what` names what relies on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequirement {
    pub extent: Extent,
    pub max: u64,
    pub text: String,
    pub what: String,
}

/// One tensor map a kernel reads: buffer argument `arg` (an index into
/// [`KernelLaunch::args`]), dense in row-major order, copied in boxes of
/// `boxed` elements (outermost first), swizzled in rows of `swizzle` bytes
/// (128, 64 or 32), elements outside the tensor read as zeros. In memory,
/// 128 bytes per map, 64-byte aligned (CUDA's `CUtensorMap`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapLaunch {
    pub arg: usize,
    pub boxed: Vec<u32>,
    #[serde(default = "swizzle_128", skip_serializing_if = "is_128")]
    pub swizzle: u32,
}

fn swizzle_128() -> u32 {
    128
}

fn is_128(s: &u32) -> bool {
    *s == 128
}

/// The size arguments of a launch of `kl` with `args`, by name.
fn size_values(kl: &KernelLaunch, args: &[ArgValue]) -> HashMap<String, i64> {
    kl.args
        .iter()
        .zip(args)
        .filter_map(|(la, a)| match (&la.role, a) {
            (ArgRole::Size, ArgValue::Size(v)) => Some((la.name.clone(), *v as i64)),
            _ => None,
        })
        .collect()
}

/// What a runtime needs to encode a [`TensorMapLaunch`] for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapShape {
    /// The buffer argument.
    pub arg: usize,
    /// Bytes of an element.
    pub elem_bytes: usize,
    /// The tensor's extents, outermost first. An empty tensor (an extent
    /// of 0) has no map: no tile of it is ever copied, as the loop over
    /// its tiles runs no iteration.
    pub dims: Vec<u64>,
    /// The box, outermost first.
    pub boxed: Vec<u32>,
    /// The swizzle's span in bytes.
    pub swizzle: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// Bitwise exclusive or (index expressions have it; launch shapes so far do not).
    Xor(Box<Extent>, Box<Extent>),
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
            Xor(a, b) => bin(a, b).map(|(x, y)| x ^ y),
        }
    }
}

/// One argument as the caller passes it.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    /// A device buffer: its element type name (`f32`) and length in elements.
    /// A device buffer of `len` elements of dtype `dtype`.
    Buffer {
        /// Element type name (`f32`).
        dtype: &'static str,
        /// Length in elements.
        len: usize,
    },
    /// A 32-bit size argument.
    Size(i32),
    /// A by-value scalar: its type name and little-endian bytes.
    /// A by-value scalar of dtype `dtype` and its bytes.
    Scalar {
        /// Type name (`f32`).
        dtype: &'static str,
        /// Little-endian value.
        bytes: Vec<u8>,
    },
}

impl ArgValue {
    /// The argument for people: `a buffer of 10 f32`.
    pub fn describe(&self) -> String {
        match self {
            ArgValue::Buffer { dtype, len } => format!("a buffer of {len} {dtype}"),
            ArgValue::Size(v) => format!("the size {v}"),
            ArgValue::Scalar { dtype, .. } => format!("a {dtype} scalar"),
        }
    }
}

/// The dtype names of device buffers and scalars, as `'static` strings.
pub const DTYPES: [&str; 14] = [
    "f32",
    "f64",
    "f16",
    "bf16",
    "i8",
    "u8",
    "i32",
    "u32",
    "i64",
    "bool",
    // 8-bit floats: bytes to the devices, whose kernels decode them.
    "f8e4m3fn",
    "f8e5m2",
    "f8e4m3fnuz",
    "f8e5m2fnuz",
];

/// The `'static` name of dtype `d` and its size in bytes, if it is one of [`DTYPES`].
pub fn dtype(d: &str) -> Option<(&'static str, usize)> {
    let name = DTYPES.iter().copied().find(|x| *x == d)?;
    let size = match name {
        "f64" | "i64" => 8,
        "f32" | "i32" | "u32" => 4,
        "f16" | "bf16" => 2,
        _ => 1,
    };
    Some((name, size))
}

/// Element types of device buffers.
pub trait DeviceScalar: Copy + Default + 'static {
    /// rocmc's dtype name, as in kernel files and launch geometry.
    const DTYPE: &'static str;
    /// Its size in bytes.
    const SIZE: usize;
    /// Appends the value's little-endian bytes (as devices hold it).
    fn put_le(self, out: &mut Vec<u8>);
    /// The value of `SIZE` little-endian bytes.
    fn from_le(bytes: &[u8]) -> Self;
}
macro_rules! scalar {
    ($t:ty, $n:literal) => {
        impl DeviceScalar for $t {
            const DTYPE: &'static str = $n;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}
scalar!(f32, "f32");
scalar!(f64, "f64");
scalar!(i8, "i8");
scalar!(u8, "u8");
scalar!(i32, "i32");
scalar!(u32, "u32");
scalar!(i64, "i64");
scalar!(half::f16, "f16");
scalar!(half::bf16, "bf16");

impl DeviceScalar for Bool8 {
    const DTYPE: &'static str = "bool";
    const SIZE: usize = 1;
    fn put_le(self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
    fn from_le(bytes: &[u8]) -> Self {
        Bool8(bytes[0])
    }
}

/// An element of a `bool` buffer or parameter: one byte, 0 or 1, as
/// kernels store it. (Rust's `bool` cannot be used: any other byte, e.g.
/// in an uninitialised buffer, would be undefined behaviour.)
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bool8(pub u8);

impl From<bool> for Bool8 {
    fn from(b: bool) -> Bool8 {
        Bool8(b as u8)
    }
}

impl From<Bool8> for bool {
    fn from(b: Bool8) -> bool {
        b.0 != 0
    }
}

/// Device memory a kernel argument can point at: each runtime's buffers.
pub trait DeviceMemory {
    /// The element type.
    type Elem: DeviceScalar;
    /// The address the kernel receives.
    fn device_address(&self) -> u64;
    /// Length in elements.
    fn elements(&self) -> usize;
}

/// One argument of a launch, with its bytes as the kernel receives them;
/// every runtime launches these and checks them with
/// [`LaunchInfo::check_args`].
#[derive(Clone, Debug)]
pub struct KernelArg {
    value: ArgValue,
    bytes: Vec<u8>,
}

impl KernelArg {
    /// A device buffer, passed by pointer.
    pub fn buffer<B: DeviceMemory>(b: &B) -> KernelArg {
        KernelArg::raw_buffer(b, B::Elem::DTYPE, b.elements())
    }

    /// Device memory holding `len` elements of the dtype named `dtype`
    /// (for callers that handle dtypes at run time, like `rocmc run`).
    pub fn raw_buffer<B: DeviceMemory>(b: &B, dtype: &'static str, len: usize) -> KernelArg {
        KernelArg::raw_buffer_at(b, dtype, len, 0)
    }

    /// [`KernelArg::raw_buffer`] of the memory from byte `start` on (a
    /// view; the caller has checked it lies inside the buffer).
    pub fn raw_buffer_at<B: DeviceMemory>(
        b: &B,
        dtype: &'static str,
        len: usize,
        start: u64,
    ) -> KernelArg {
        KernelArg {
            value: ArgValue::Buffer { dtype, len },
            bytes: (b.device_address() + start).to_le_bytes().to_vec(),
        }
    }

    /// A size argument (`i32`).
    pub fn size(n: i32) -> KernelArg {
        KernelArg {
            value: ArgValue::Size(n),
            bytes: n.to_le_bytes().to_vec(),
        }
    }

    /// A by-value argument of the dtype named `dtype`, as little-endian bytes.
    pub fn raw_scalar(dtype: &'static str, bytes: Vec<u8>) -> KernelArg {
        KernelArg {
            value: ArgValue::Scalar {
                dtype,
                bytes: bytes.clone(),
            },
            bytes,
        }
    }

    /// A by-value scalar of a supported element type.
    pub fn scalar<T: DeviceScalar>(v: T) -> KernelArg {
        let n = std::mem::size_of::<T>();
        // SAFETY: T is a plain scalar of n bytes (the DeviceScalar types).
        let bytes =
            unsafe { std::slice::from_raw_parts((&v as *const T).cast::<u8>(), n) }.to_vec();
        KernelArg::raw_scalar(T::DTYPE, bytes)
    }

    /// What the argument is, for the launch checks.
    pub fn value(&self) -> &ArgValue {
        &self.value
    }

    /// Its bytes, as the kernel receives them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl LaunchArg {
    /// What the role is called in messages.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            ArgRole::Buffer => "buffer",
            ArgRole::Size => "size",
            ArgRole::Scalar => "scalar",
        }
    }
}

impl KernelLaunch {
    /// Whether `sizes` (by name) keep the launch requirements: each fused
    /// loop's count within the 32-bit counter it was compiled with.
    pub fn check_requirements(&self, sizes: &HashMap<String, i64>) -> Result<(), String> {
        for r in &self.requires {
            let v = r.extent.eval(sizes);
            if v.is_none_or(|v| v < 0 || v as u64 > r.max) {
                let at = v.map_or_else(|| "beyond 64 bits".to_string(), |v| v.to_string());
                return Err(format!(
                    "{} runs {} = {at} times at these sizes, more than the {} of the 32-bit \
                     counter it was compiled with; a schedule that does not fuse those loops \
                     takes these sizes",
                    r.what, r.text, r.max
                ));
            }
        }
        Ok(())
    }
}

impl LaunchInfo {
    /// Checks a launch of `kl` (one of this document's kernels) with `args`:
    /// their number and kinds, dtypes, sizes within the bounds the kernel
    /// was compiled for, buffers long enough for the shapes those sizes
    /// give. Returns the grid and block to launch with, or what is wrong.
    pub fn check_args(
        &self,
        kl: &KernelLaunch,
        args: &[ArgValue],
    ) -> Result<([u32; 3], [u32; 3]), String> {
        if kl.args.len() != args.len() {
            return Err(format!(
                "the kernel takes {} arguments, {} given",
                kl.args.len(),
                args.len()
            ));
        }
        let mut sizes: HashMap<String, i64> = HashMap::new();
        for (la, a) in kl.args.iter().zip(args) {
            if let (ArgRole::Size, ArgValue::Size(v)) = (&la.role, a) {
                let bound = self.sizes.iter().find(|s| s.name == la.name);
                let max = bound.map_or(i32::MAX as u64, |s| s.max);
                if *v < 0 || *v as u64 > max {
                    return Err(format!(
                    "size `{}` = {v} is outside 0..={max}, the range the kernel was compiled for",
                    la.name
                ));
                }
                let d = bound.map_or(1, |s| s.divisor.max(1));
                if !(*v as u64).is_multiple_of(d) {
                    return Err(format!(
                        "size `{}` = {v} is not a multiple of {d}, which the kernel was compiled \
                         to rely on (`divisible = {{ {} = {d} }}`)",
                        la.name, la.name
                    ));
                }
                sizes.insert(la.name.clone(), *v as i64);
            }
        }
        kl.check_requirements(&sizes)?;
        for (la, a) in kl.args.iter().zip(args) {
            match (&la.role, a) {
                (ArgRole::Buffer, ArgValue::Buffer { dtype, len }) => {
                    if *dtype != la.dtype {
                        return Err(format!(
                            "buffer `{}` holds {}, but a buffer of {dtype} was given",
                            la.name, la.dtype
                        ));
                    }
                    let mut need: i64 = 1;
                    for e in &la.shape {
                        need = need.saturating_mul(e.eval(&sizes).ok_or_else(|| {
                            format!("cannot evaluate the shape of `{}`", la.name)
                        })?);
                    }
                    if (*len as i64) < need {
                        return Err(format!("buffer `{}` must hold at least {need} elements for these sizes, but has {len}", la.name));
                    }
                }
                (ArgRole::Scalar, ArgValue::Scalar { dtype, .. }) if *dtype != la.dtype => {
                    return Err(format!(
                        "scalar `{}` is {}, but a {dtype} was given",
                        la.name, la.dtype
                    ));
                }
                (ArgRole::Size, ArgValue::Size(_)) | (ArgRole::Scalar, ArgValue::Scalar { .. }) => {
                }
                _ => {
                    return Err(format!(
                        "argument `{}` is a {}, but {} was given",
                        la.name,
                        la.role_name(),
                        a.describe()
                    ))
                }
            }
        }
        let mut grid = [1u32; 3];
        for (d, e) in kl.grid.iter().enumerate() {
            let v = e
                .eval(&sizes)
                .ok_or_else(|| "cannot evaluate the grid".to_string())?;
            grid[d] = u32::try_from(v).map_err(|_| format!("grid dimension {d} would be {v}"))?;
        }
        Ok((grid, kl.block))
    }

    /// The bytes of dynamic shared memory a launch of `kl` with `args`
    /// needs: [`KernelLaunch::dynamic_shared_bytes`] at these sizes, else
    /// the constant [`KernelLaunch::dynamic_shared`].
    pub fn shared_bytes(&self, kl: &KernelLaunch, args: &[ArgValue]) -> Result<u32, String> {
        let Some(e) = &kl.dynamic_shared_bytes else {
            return Ok(kl.dynamic_shared);
        };
        let sizes = size_values(kl, args);
        let v = e
            .eval(&sizes)
            .ok_or_else(|| "cannot evaluate the kernel's shared memory".to_string())?;
        u32::try_from(v).map_err(|_| format!("the kernel would need {v} bytes of shared memory"))
    }

    /// The shapes of the kernel's tensor maps for a launch with `args`
    /// (already checked by [`LaunchInfo::check_args`]); an error names a
    /// tensor the accelerator cannot describe (a row not a multiple of 16
    /// bytes, an extent beyond 2^32).
    pub fn tensor_map_shapes(
        &self,
        kl: &KernelLaunch,
        args: &[ArgValue],
    ) -> Result<Vec<TensorMapShape>, String> {
        let sizes = size_values(kl, args);
        kl.tensor_maps
            .iter()
            .map(|m| {
                let la = kl
                    .args
                    .get(m.arg)
                    .filter(|la| la.role == ArgRole::Buffer)
                    .ok_or_else(|| format!("tensor map of argument #{}, which is not a buffer", m.arg))?;
                let (_, elem_bytes) = dtype(&la.dtype)
                    .ok_or_else(|| format!("buffer `{}` has unknown dtype {}", la.name, la.dtype))?;
                let mut dims = Vec::new();
                for e in &la.shape {
                    let v = e
                        .eval(&sizes)
                        .ok_or_else(|| format!("cannot evaluate the shape of `{}`", la.name))?;
                    if !(0..=1 << 32).contains(&v) {
                        return Err(format!(
                            "`{}` has an extent of {v}; the tensor memory accelerator describes extents up to 2^32",
                            la.name
                        ));
                    }
                    dims.push(v as u64);
                }
                let row = dims.last().copied().unwrap_or(1) * elem_bytes as u64;
                if dims.len() > 1 && !row.is_multiple_of(16) {
                    return Err(format!(
                        "`{}`'s rows are {row} bytes; the tensor memory accelerator needs a multiple of 16",
                        la.name
                    ));
                }
                if dims.len() != m.boxed.len() {
                    return Err(format!("the tensor map of `{}` has a box of {} dimensions for a tensor of {}", la.name, m.boxed.len(), dims.len()));
                }
                Ok(TensorMapShape {
                    arg: m.arg,
                    elem_bytes,
                    dims,
                    boxed: m.boxed.clone(),
                    swizzle: m.swizzle,
                })
            })
            .collect()
    }

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

    /// 8-bit floats pass as bytes (the runtimes once refused them);
    /// tests/runtime.rs checks every kernel dtype against this table.
    #[test]
    fn buffer_dtypes_have_their_sizes() {
        assert_eq!(dtype("f8e4m3fn"), Some(("f8e4m3fn", 1)));
        assert_eq!(dtype("f8e5m2fnuz"), Some(("f8e5m2fnuz", 1)));
        assert_eq!(dtype("bf16"), Some(("bf16", 2)));
        assert_eq!(dtype("f128"), None);
    }

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
    fn launches_are_checked_against_the_document() {
        let l = LaunchInfo {
            version: FORMAT_VERSION,
            sizes: vec![SizeBound {
                name: "n".into(),
                max: 1000,
                divisor: 1,
            }],
            kernels: vec![KernelLaunch {
                name: "k".into(),
                block: [64, 1, 1],
                grid: [
                    Extent::CeilDiv(
                        Box::new(Extent::Size("n".into())),
                        Box::new(Extent::Const(64)),
                    ),
                    Extent::Const(1),
                    Extent::Const(1),
                ],
                grid_text: ["ceil(n / 64)".into(), "1".into(), "1".into()],
                args: vec![
                    LaunchArg {
                        name: "x".into(),
                        role: ArgRole::Buffer,
                        dtype: "f32".into(),
                        shape: vec![Extent::Size("n".into())],
                        written: false,
                    },
                    LaunchArg {
                        name: "n".into(),
                        role: ArgRole::Size,
                        dtype: "i32".into(),
                        shape: vec![],
                        written: false,
                    },
                ],
                dynamic_shared: 0,
                dynamic_shared_bytes: None,
                tensor_maps: Vec::new(),
                requires: Vec::new(),
            }],
        };
        let k = &l.kernels[0];
        let buf = |dtype, len| ArgValue::Buffer { dtype, len };
        assert_eq!(
            l.check_args(k, &[buf("f32", 100), ArgValue::Size(100)]),
            Ok(([2, 1, 1], [64, 1, 1]))
        );
        let err = |args: &[ArgValue]| l.check_args(k, args).unwrap_err();
        assert!(err(&[buf("f32", 100)]).contains("takes 2 arguments, 1 given"));
        assert!(err(&[buf("f64", 100), ArgValue::Size(100)]).contains("holds f32"));
        assert!(err(&[buf("f32", 99), ArgValue::Size(100)]).contains("at least 100 elements"));
        assert!(err(&[buf("f32", 2000), ArgValue::Size(1001)]).contains("outside 0..=1000"));
        assert!(err(&[ArgValue::Size(3), ArgValue::Size(3)]).contains("is a buffer"));
        // A divisibility fact is checked; documents without one accept any size.
        let mut l4 = l.clone();
        l4.sizes[0].divisor = 4;
        let e = l4
            .check_args(k, &[buf("f32", 1000), ArgValue::Size(999)])
            .unwrap_err();
        assert!(e.contains("`n` = 999 is not a multiple of 4"), "{e}");
        assert!(l4
            .check_args(k, &[buf("f32", 1000), ArgValue::Size(996)])
            .is_ok());
        let json = l.to_json();
        assert!(!json.contains("divisor"), "{json}");
        assert!(!json.contains("requires"), "{json}");
        assert_eq!(LaunchInfo::from_json(l4.to_json().as_bytes()).unwrap(), l4);
        // A fused loop's count, checked before the buffers (a launch past it
        // is refused however little memory it was given).
        let mut lr = l.clone();
        let n = || Box::new(Extent::Size("n".into()));
        lr.kernels[0].requires.push(LaunchRequirement {
            extent: Extent::Mul(n(), n()),
            max: 10_000,
            text: "n * n".into(),
            what: "loop `f` of stage `y`".into(),
        });
        let k = &lr.kernels[0];
        assert!(lr
            .check_args(k, &[buf("f32", 100), ArgValue::Size(100)])
            .is_ok());
        let e = lr
            .check_args(k, &[buf("f32", 1), ArgValue::Size(101)])
            .unwrap_err();
        assert!(
            e.contains("loop `f` of stage `y` runs n * n = 10201 times at these sizes, more than the 10000"),
            "{e}"
        );
        assert_eq!(LaunchInfo::from_json(lr.to_json().as_bytes()).unwrap(), lr);
    }

    /// A kernel reading `A: f16[m, k]` through a tensor map of 128 x 64 boxes.
    fn tma_kernel() -> KernelLaunch {
        let size = |n: &str| LaunchArg {
            name: n.into(),
            role: ArgRole::Size,
            dtype: "i32".into(),
            shape: vec![],
            written: false,
        };
        KernelLaunch {
            name: "k".into(),
            block: [128, 1, 1],
            grid: [Extent::Const(1), Extent::Const(1), Extent::Const(1)],
            grid_text: ["1".into(), "1".into(), "1".into()],
            args: vec![
                LaunchArg {
                    name: "A".into(),
                    role: ArgRole::Buffer,
                    dtype: "f16".into(),
                    shape: vec![Extent::Size("m".into()), Extent::Size("k".into())],
                    written: false,
                },
                size("m"),
                size("k"),
            ],
            dynamic_shared: 0,
            dynamic_shared_bytes: None,
            tensor_maps: vec![TensorMapLaunch {
                arg: 0,
                boxed: vec![128, 64],
                swizzle: 128,
            }],
            requires: Vec::new(),
        }
    }

    #[test]
    fn tensor_maps_take_the_launchs_extents() {
        let l = LaunchInfo {
            version: FORMAT_VERSION,
            sizes: vec![],
            kernels: vec![tma_kernel()],
        };
        let k = &l.kernels[0];
        let args = |m, kk| {
            [
                ArgValue::Buffer {
                    dtype: "f16",
                    len: 1 << 20,
                },
                ArgValue::Size(m),
                ArgValue::Size(kk),
            ]
        };
        assert_eq!(
            l.tensor_map_shapes(k, &args(70, 136)),
            Ok(vec![TensorMapShape {
                arg: 0,
                elem_bytes: 2,
                dims: vec![70, 136],
                boxed: vec![128, 64],
                swizzle: 128,
            }])
        );
        // 36 halves are 72 bytes a row: not a stride the accelerator takes.
        let e = l.tensor_map_shapes(k, &args(70, 36)).unwrap_err();
        assert!(e.contains("rows are 72 bytes"), "{e}");
        // The document names its maps; older documents have none.
        let json = l.to_json();
        assert!(
            json.contains(r#""tensor_maps":[{"arg":0,"boxed":[128,64]}]"#),
            "{json}"
        );
        let old = json.replace(r#","tensor_maps":[{"arg":0,"boxed":[128,64]}]"#, "");
        assert!(LaunchInfo::from_json(old.as_bytes()).unwrap().kernels[0]
            .tensor_maps
            .is_empty());
    }

    #[test]
    fn json_round_trips() {
        let l = LaunchInfo {
            version: FORMAT_VERSION,
            sizes: vec![SizeBound {
                name: "n".into(),
                max: 100,
                divisor: 1,
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
                dynamic_shared: 80 * 1024,
                dynamic_shared_bytes: None,
                tensor_maps: Vec::new(),
                requires: Vec::new(),
            }],
        };
        assert_eq!(LaunchInfo::from_json(l.to_json().as_bytes()).unwrap(), l);
        assert!(l.module_asm().contains(".pushsection .rocmc.launch"));
        let ptx = format!(".version 7.8\n{}.target sm_90\n", l.ptx_comment());
        assert_eq!(LaunchInfo::from_ptx(&ptx).unwrap().unwrap(), l);
        assert!(LaunchInfo::from_ptx(".version 7.8\n").is_none());
    }
}
