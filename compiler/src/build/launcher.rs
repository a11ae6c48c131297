//! The Rust a build script includes: per kernel file, a module with the
//! compiled code embedded and a typed launcher, over one vendor's runtime
//! ([`launcher`]) or over any device of the one device interface
//! ([`device_launcher`]).

use crate::Error;
use rocmc_ir::loops::ArgKind;
use rocmc_ir::{DType, Kernel, TensorKind};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The code a launcher embeds.
pub enum Code {
    /// An AMD offload bundle, for rocmc-runtime-hip.
    Bundle(PathBuf),
    /// PTX files, one per NVIDIA target, for rocmc-runtime-cuda.
    Ptx(Vec<PathBuf>),
}

fn rust_type(t: DType, rt: &str) -> String {
    let s = match t {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::F16 => "RT::f16",
        DType::BF16 => "RT::bf16",
        DType::Bool => "RT::Bool8",
        // Their encoding's bytes: no Rust type holds an 8-bit float.
        DType::F8E4M3FN | DType::F8E5M2 | DType::F8E4M3FNUZ | DType::F8E5M2FNUZ => "u8",
    };
    s.replace("RT", rt)
}

fn type_name(kernel: &str) -> String {
    kernel
        .split('_')
        .filter(|p| !p.is_empty())
        .map(|p| p[..1].to_uppercase() + &p[1..])
        .collect()
}

/// The Rust module with the embedded code and a typed launcher.
pub fn launcher(k: &Kernel, p: &rocmc_ir::Program, code: &Code) -> Result<String, Error> {
    let ty = type_name(&k.name);
    let rt = match code {
        Code::Bundle(_) => "rocmc_runtime_hip",
        Code::Ptx(_) => "rocmc_runtime_cuda",
    };
    let (params, body) = parts(
        k,
        p,
        |t| format!("&{rt}::DeviceBuffer<{}>", rust_type(t, rt)),
        |t| rust_type(t, rt),
        |kind, name| match kind {
            ArgKind::Buffer { .. } => format!("{rt}::KernelArg::buffer({name})"),
            ArgKind::Size(_) => format!("{rt}::KernelArg::size({name})"),
            ArgKind::Param(_) => format!("{rt}::KernelArg::scalar({name})"),
        },
        |kernel, args| format!("self.module.kernel({kernel:?})?.launch(&[{args}], None)?;"),
    );
    let doc_sig: Vec<String> = params
        .iter()
        .map(|s| s.replace(&format!("{rt}::"), ""))
        .collect();
    let (consts, load) = match code {
        Code::Bundle(bundle) => (
            format!(
                "    /// The offload bundle, one code object per target.\n    pub const CODE_OBJECT: &[u8] = include_bytes!({:?});\n",
                beside(bundle)
            ),
            "device.load_module(CODE_OBJECT)?".to_string(),
        ),
        Code::Ptx(files) => (
            format!(
                "    /// The PTX of each target; `load` picks the one for the device.\n    pub const PTX: &[&str] = &[{}];\n",
                files
                    .iter()
                    .map(|f| format!("include_str!({:?})", beside(f)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "device.load_best_ptx(PTX)?".to_string(),
        ),
    };
    Ok(format!(
        r#"
/// Kernel `{name}` compiled by rocmc ({kernels} GPU kernel(s)).
#[allow(dead_code, non_snake_case, clippy::too_many_arguments)]
pub mod {name} {{
{consts}
    pub struct {ty} {{
        module: {rt}::Module,
    }}

    impl {ty} {{
        /// Loads the code on `device`, checking it has code for it.
        pub fn load(device: &{rt}::Device) -> {rt}::Result<{ty}> {{
            Ok({ty} {{ module: {load} }})
        }}

        /// Launches every stage in order: `{doc}`. Grids follow the sizes;
        /// arguments are checked against the launch document before launch.
        pub fn launch(&self, {params}) -> {rt}::Result<()> {{
{body}            Ok(())
        }}
    }}
}}
"#,
        name = k.name,
        kernels = p.kernels.len(),
        doc = doc_sig.join(", "),
        params = params.join(", "),
    ))
}

/// A launcher's parameters (every materialised tensor in order, then the
/// sizes, then the scalar parameters, each typed by `buffer` or `scalar`)
/// and the body that launches each GPU kernel of the module in order
/// (`arg` spells one argument, `launch` one kernel's launch).
fn parts(
    k: &Kernel,
    p: &rocmc_ir::Program,
    buffer: impl Fn(DType) -> String,
    scalar: impl Fn(DType) -> String,
    arg: impl Fn(&ArgKind, &str) -> String,
    launch: impl Fn(&str, &str) -> String,
) -> (Vec<String>, String) {
    let mut params: Vec<String> = k
        .tensors
        .iter()
        .filter(|t| !matches!(t.kind, TensorKind::Stage(s) if !k.stored(s)))
        .map(|t| format!("{}: {}", t.name, buffer(t.dtype)))
        .collect();
    params.extend(k.sizes.iter().map(|s| format!("{}: i32", s.name)));
    params.extend(
        k.params
            .iter()
            .map(|q| format!("{}: {}", q.name, scalar(q.dtype))),
    );
    let mut body = String::new();
    for g in &p.kernels {
        let args: Vec<String> = g.args.iter().map(|a| arg(&a.kind, &a.name)).collect();
        let _ = writeln!(body, "            {}", launch(&g.name, &args.join(", ")));
    }
    (params, body)
}

/// What a launcher over any device embeds: each vendor's modules of one
/// kernel file.
#[derive(Default)]
pub struct Embedded {
    /// The AMD offload bundle (every gfx target), if any was built.
    pub amd: Option<PathBuf>,
    /// Each NVIDIA target's PTX.
    pub ptx: Vec<(String, PathBuf)>,
    /// Each CPU target's shared object.
    pub cpu: Vec<(String, PathBuf)>,
}

/// How the launchers name a module file: by its name alone, resolved
/// beside the launchers' file (the modules are written to the same folder),
/// so the folder can move — into a crate's committed offline kernels.
fn beside(f: &Path) -> String {
    f.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| f.display().to_string())
}

fn device_type(t: DType) -> String {
    rust_type(t, "rocmc_device")
}

/// The Rust module of one kernel file for any device: the embedded code
/// of every target, `load` picking the module for the device it is given
/// (`cpu`, `cuda:N`, `amdgpu:N`, a worker's), and a typed `launch` of
/// [`rocmc_device::Tensor`]s.
pub fn device_launcher(
    k: &Kernel,
    p: &rocmc_ir::Program,
    code: &Embedded,
) -> Result<String, Error> {
    let ty = type_name(&k.name);
    let (params, body) = parts(
        k,
        p,
        |t| format!("&rocmc_device::Tensor<{}>", device_type(t)),
        device_type,
        |kind, name| match kind {
            ArgKind::Buffer { .. } => format!("{name}.arg()"),
            ArgKind::Size(_) => format!("rocmc_device::Arg::Size({name})"),
            ArgKind::Param(_) => format!("rocmc_device::scalar_arg({name})"),
        },
        |kernel, args| format!("device.launch(&self.module, {kernel:?}, &[{args}])?;"),
    );
    let names: Vec<String> = p.kernels.iter().map(|g| format!("{:?}", g.name)).collect();
    let pairs = |v: &[(String, PathBuf)], inc: &str| {
        v.iter()
            .map(|(t, f)| format!("({t:?}, {inc}!({:?}))", beside(f)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let amd = match &code.amd {
        Some(b) => format!("Some(include_bytes!({:?}) as &[u8])", beside(b)),
        None => "None".into(),
    };
    let doc_sig: Vec<String> = params
        .iter()
        .map(|s| s.replace("rocmc_device::", ""))
        .collect();
    Ok(format!(
        r#"
/// Kernel `{name}` compiled by rocmc for every target the build named.
#[allow(dead_code, non_snake_case, clippy::too_many_arguments)]
pub mod {name} {{
    /// The code of every target; `load` picks the device's.
    pub const CODE: rocmc_device::Code = rocmc_device::Code {{
        kernel: {name:?},
        amd: {amd},
        ptx: &[{ptx}],
        cpu: &[{cpu}],
    }};

    /// The GPU kernels one launch runs, in order.
    pub const KERNELS: &[&str] = &[{names}];

    /// The kernel loaded on one device.
    pub struct {ty} {{
        module: rocmc_device::ModuleId,
    }}

    impl {ty} {{
        /// Loads the code for `device`'s target on it; a device the build
        /// named no target for is refused, naming the targets it has.
        pub fn load(device: &mut dyn rocmc_device::Device) -> rocmc_device::Result<{ty}> {{
            let bytes = CODE.for_device(device.info())?;
            Ok({ty} {{ module: device.load_module(bytes)? }})
        }}

        /// Launches every stage in order on the device it was loaded on:
        /// `{doc}`. Arguments are checked against the module's launch
        /// document before anything runs.
        pub fn launch(&self, device: &mut dyn rocmc_device::Device, {params}) -> rocmc_device::Result<()> {{
{body}            Ok(())
        }}
    }}
}}
"#,
        name = k.name,
        ptx = pairs(&code.ptx, "include_str"),
        cpu = pairs(&code.cpu, "include_bytes"),
        names = names.join(", "),
        doc = doc_sig.join(", "),
        params = params.join(", "),
    ))
}
