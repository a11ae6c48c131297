//! Compiling kernels from a Cargo build script, in the style of cc-rs.
//!
//! ```no_run
//! // build.rs
//! rocmc::Build::new()
//!     .kernel("kernels/vadd.toml")
//!     .mcpu("gfx90a")
//!     .mcpu("gfx1100")
//!     .compile();
//! ```
//!
//! ```ignore
//! // main.rs
//! include!(concat!(env!("OUT_DIR"), "/rocmc_kernels.rs"));
//! let dev = rocmc_runtime_hip::Hip::load()?.device("amdgpu")?;
//! let vadd = vadd::Vadd::load(&dev)?;
//! vadd.launch(&a, &b, &c, n)?; // a, b, c: &DeviceBuffer<f32>
//! ```
//!
//! For each kernel file this writes one offload bundle (all targets) to
//! `OUT_DIR/<kernel>.hipfb` and a module of `OUT_DIR/rocmc_kernels.rs` with
//! the bundle embedded by `include_bytes!` and a typed launcher. The
//! application depends on `rocmc-runtime-hip` only; `rocmc` is a
//! build-dependency. Buffers and parameters map to `f32`, `f64`, `i8`,
//! `u8`, `i32`, `u32`, `i64`, `rocmc_runtime_hip::{f16, bf16}` (the
//! `half` crate's types) and `rocmc_runtime_hip::Bool8` (one byte, 0 or 1).
//!
//! With NVIDIA targets (`.mcpu("sm_80").mcpu("sm_90")`) it writes one PTX
//! file per target (`OUT_DIR/<kernel>.<sm>.ptx`) and launchers over
//! `rocmc-runtime-cuda` that embed them all and load the best one for the
//! device they run on. One `Build` is for one vendor; an application for
//! both runs two, each with its own `out_dir`.

use crate::{Error, Options};
use rocmc_ir::loops::ArgKind;
use rocmc_ir::{DType, Kernel, TensorKind};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Environment variable that replaces the targets a build script names
/// (comma-separated target IDs), e.g. to build for the GPU at hand.
pub const MCPU_ENV: &str = "ROCMC_MCPU";

/// A set of kernels to compile into `OUT_DIR`.
#[derive(Clone, Debug, Default)]
pub struct Build {
    kernels: Vec<PathBuf>,
    mcpus: Vec<String>,
    out_dir: Option<PathBuf>,
    code_object_version: Option<u32>,
    cargo_metadata: Option<bool>,
    tuning: Option<PathBuf>,
    no_tuning: bool,
    tuned_for: Option<String>,
}

/// What [`Build::try_compile`] wrote.
#[derive(Clone, Debug)]
pub struct Outputs {
    /// One offload bundle per kernel file (AMD), or one PTX file per kernel
    /// file and target (NVIDIA).
    pub bundles: Vec<PathBuf>,
    /// The generated launchers, for `include!`.
    pub launchers: PathBuf,
    /// Per kernel file with a `[tune]` section: which configuration was
    /// built and why.
    pub tuning: Vec<String>,
}

impl Build {
    /// An empty set: add kernels and targets.
    pub fn new() -> Build {
        Build::default()
    }

    /// Adds a kernel file (kernel.toml format).
    pub fn kernel(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.kernels.push(path.as_ref().to_path_buf());
        self
    }

    /// Adds a target: an AMDGPU target ID (`gfx90a`, `gfx942:sramecc+:xnack-`,
    /// `mi300x`) or an NVIDIA processor (`sm_90`, `h100`).
    pub fn mcpu(&mut self, target: &str) -> &mut Build {
        self.mcpus.push(target.to_string());
        self
    }

    /// Where to write; default `OUT_DIR`.
    pub fn out_dir(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Code object version (default 5).
    pub fn code_object_version(&mut self, v: u32) -> &mut Build {
        self.code_object_version = Some(v);
        self
    }

    /// Whether to print `cargo:` lines; default: when run by Cargo (`OUT_DIR` set).
    pub fn cargo_metadata(&mut self, on: bool) -> &mut Build {
        self.cargo_metadata = Some(on);
        self
    }

    /// The tuning database to take `[tune]` values from. Default:
    /// `rocmc-tuning.toml` in the package's folder (`CARGO_MANIFEST_DIR`)
    /// when there is one. Entries whose kernel changed are reported as
    /// Cargo warnings and never used.
    pub fn tuning(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.tuning = Some(path.as_ref().to_path_buf());
        self
    }

    /// Builds the `[tune]` defaults, ignoring any tuning database.
    pub fn no_tuning(&mut self) -> &mut Build {
        self.no_tuning = true;
        self
    }

    /// Picks the database entry tuned for these sizes (`"M=4096,N=4096,K=4096"`)
    /// when a kernel was tuned for several.
    pub fn tuned_for(&mut self, sizes: &str) -> &mut Build {
        self.tuned_for = Some(sizes.to_string());
        self
    }

    /// The `[tune]` values for one kernel file: the database's entry when
    /// every target agrees on one (a bundle's launcher serves all its
    /// targets, so they must share a launch geometry), else the defaults.
    fn tuning_for(
        &self,
        file: &str,
        text: &str,
        targets: &[rocmc_codegen::Target],
        metadata: bool,
    ) -> Result<(rocmc_ir::tune::Config, Option<String>), Error> {
        use crate::tune::db;
        let k = rocmc_ir::front::parse_kernel(file, text)?;
        if k.tuning.is_none() {
            return Ok((Vec::new(), None));
        }
        if self.no_tuning {
            return Ok((
                Vec::new(),
                Some(format!("{}: the [tune] defaults (no_tuning)", k.name)),
            ));
        }
        let path = match &self.tuning {
            Some(p) => p.clone(),
            None => match std::env::var_os("CARGO_MANIFEST_DIR") {
                Some(d) if Path::new(&d).join(db::DEFAULT_FILE).exists() => {
                    Path::new(&d).join(db::DEFAULT_FILE)
                }
                _ => {
                    return Ok((
                        Vec::new(),
                        Some(format!(
                            "{}: the [tune] defaults (no tuning database)",
                            k.name
                        )),
                    ))
                }
            },
        };
        if metadata {
            println!("cargo:rerun-if-changed={}", path.display());
        }
        let d = db::TuningDb::load(&path).map_err(Error::Usage)?;
        let tuned_for = match &self.tuned_for {
            Some(t) => Some(
                rocmc_ir::tune::parse_assignments(t)
                    .map_err(|e| Error::Usage(format!("rocmc::Build::tuned_for: {e}")))?,
            ),
            None => None,
        };
        let mut picked: Vec<db::Selection> = Vec::new();
        for t in targets {
            let sel =
                db::select(&d, &path, text, &k, t, tuned_for.as_deref()).map_err(Error::Usage)?;
            for w in &sel.warnings {
                if metadata {
                    println!("cargo:warning={w}");
                }
                eprintln!("warning: {w}");
            }
            picked.push(sel);
        }
        if picked.iter().any(|p| p.config != picked[0].config) {
            let w = format!(
                "{}: the tuning database chooses different configurations for the targets {}; one bundle needs one, so the [tune] defaults are built (use one Build per target to use each)",
                k.name,
                targets.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
            );
            if metadata {
                println!("cargo:warning={w}");
            }
            return Ok((Vec::new(), Some(w)));
        }
        let sel = picked.remove(0);
        Ok((sel.config, Some(format!("{}: {}", k.name, sel.note))))
    }

    /// Compiles, or fails the build script with the error (file, line and
    /// column of a kernel mistake), like `cc::Build::compile`.
    pub fn compile(&self) -> Outputs {
        match self.try_compile() {
            Ok(o) => o,
            Err(e) => {
                // A build script reports failure by panicking; Cargo shows this text.
                eprintln!("{e}");
                panic!("rocmc: kernel compilation failed:\n{e}");
            }
        }
    }

    /// Like [`Build::compile`], returning the error instead of failing the build.
    pub fn try_compile(&self) -> Result<Outputs, Error> {
        let metadata = self
            .cargo_metadata
            .unwrap_or_else(|| std::env::var_os("OUT_DIR").is_some());
        let out_dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| {
                Error::Usage("OUT_DIR is not set: run from a build script or call out_dir()".into())
            })?),
        };
        if metadata {
            println!("cargo:rerun-if-env-changed={MCPU_ENV}");
        }
        let mcpus = match std::env::var(MCPU_ENV) {
            Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
            _ if self.mcpus.is_empty() => {
                return Err(Error::Usage(format!(
                    "rocmc::Build: no target; call .mcpu(\"gfx90a\") or set {MCPU_ENV}"
                )))
            }
            _ => self.mcpus.join(","),
        };
        let mut opts = Options::new(&mcpus);
        if let Some(v) = self.code_object_version {
            opts.code_object_version = v;
        }
        let targets = crate::targets(&opts)?;
        let tc = crate::toolchain::lookup(&targets[0]);
        // Where the assembly is the module (PTX), one file per target; else one bundle.
        let nvidia = tc.asm_is_module();
        if targets
            .iter()
            .any(|t| crate::toolchain::lookup(t).module_output() != tc.module_output())
        {
            return Err(Error::Usage(format!(
                "rocmc::Build: targets {mcpus} mix AMD and NVIDIA; use one Build per vendor, each with its own out_dir"
            )));
        }
        let mut bundles = Vec::new();
        let mut tuning = Vec::new();
        let mut src = String::from("// Generated by rocmc::Build; do not edit.\n");
        for path in &self.kernels {
            if metadata {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            let file = path.display().to_string();
            let emit = tc.module_emit();
            let (tune, note) = self.tuning_for(&file, &text, &targets, metadata)?;
            tuning.extend(note);
            let opts = Options {
                tune,
                ..opts.clone()
            };
            let arts = crate::compile_for(&file, &text, &targets, &opts, emit)?;
            let name = arts[0].kernel.name.clone();
            let write = |path: &Path, bytes: &[u8]| {
                std::fs::write(path, bytes).map_err(|source| Error::Io {
                    path: path.display().to_string(),
                    source,
                })
            };
            let code = if nvidia {
                let mut files = Vec::new();
                for a in &arts {
                    let ptx = out_dir.join(format!("{name}.{}.ptx", a.target));
                    write(&ptx, a.asm.as_deref().unwrap_or_default().as_bytes())?;
                    files.push(ptx.clone());
                    bundles.push(ptx);
                }
                Code::Ptx(files)
            } else {
                let bundle = out_dir.join(format!("{name}.hipfb"));
                write(&bundle, &crate::bundle(&arts))?;
                bundles.push(bundle.clone());
                Code::Bundle(bundle)
            };
            src.push_str(&launcher(&arts[0].kernel, &arts[0].program, &code)?);
        }
        let launchers = out_dir.join("rocmc_kernels.rs");
        std::fs::write(&launchers, src).map_err(|source| Error::Io {
            path: launchers.display().to_string(),
            source,
        })?;
        Ok(Outputs {
            bundles,
            launchers,
            tuning,
        })
    }
}

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
    // Every materialised tensor in order, then sizes, then parameters.
    let mut params = Vec::new();
    for t in k
        .tensors
        .iter()
        .filter(|t| !matches!(t.kind, TensorKind::Stage(s) if k.stage(s).is_internal()))
    {
        params.push(format!(
            "{}: &{rt}::DeviceBuffer<{}>",
            t.name,
            rust_type(t.dtype, rt)
        ));
    }
    params.extend(k.sizes.iter().map(|s| format!("{}: i32", s.name)));
    for q in &k.params {
        params.push(format!("{}: {}", q.name, rust_type(q.dtype, rt)));
    }
    let mut body = String::new();
    for g in &p.kernels {
        let args: Vec<String> = g
            .args
            .iter()
            .map(|a| match &a.kind {
                ArgKind::Buffer { .. } => format!("{rt}::KernelArg::buffer({})", a.name),
                ArgKind::Size(_) => format!("{rt}::KernelArg::size({})", a.name),
                ArgKind::Param(_) => format!("{rt}::KernelArg::scalar({})", a.name),
            })
            .collect();
        let _ = writeln!(
            body,
            "            self.module.kernel({:?})?.launch(&[{}], None)?;",
            g.name,
            args.join(", ")
        );
    }
    let doc_sig: Vec<String> = params
        .iter()
        .map(|s| s.replace(&format!("{rt}::"), ""))
        .collect();
    let (consts, load) = match code {
        Code::Bundle(bundle) => (
            format!(
                "    /// The offload bundle, one code object per target.\n    pub const CODE_OBJECT: &[u8] = include_bytes!({bundle:?});\n"
            ),
            "device.load_module(CODE_OBJECT)?".to_string(),
        ),
        Code::Ptx(files) => (
            format!(
                "    /// The PTX of each target; `load` picks the one for the device.\n    pub const PTX: &[&str] = &[{}];\n",
                files
                    .iter()
                    .map(|f| format!("include_str!({f:?})"))
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
