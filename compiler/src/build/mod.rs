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
//!
//! With [`Build::any_device`] one `Build` takes AMD, NVIDIA and CPU
//! (`x86-64`) targets together and writes launchers over the one device
//! interface, `rocmc_device::Device`: each embeds every target's module
//! and loads the one for the device it is given (`cpu`, `cuda:N`,
//! `amdgpu:N`, a worker's `remote://…`); buffers are
//! `rocmc_device::Tensor`s, views included (`examples/gpt2`).
//! [`Build::kernel_tuned`] gives a kernel file tune values by hand.

mod launcher;

pub use launcher::{device_launcher, launcher, Code, Embedded};

use crate::toolchain::Output;
use crate::{Error, Options};
use std::path::{Path, PathBuf};

use rocmc_build::rules;
pub use rocmc_build::MCPU_ENV;

/// A set of kernels to compile into `OUT_DIR`.
#[derive(Clone, Debug, Default)]
pub struct Build {
    kernels: Vec<PathBuf>,
    /// Tune values given by hand, per kernel file (as `--tune`): for every
    /// target (`None`), or for one (its `--mcpu` name), which replace those.
    tune_values: Vec<(PathBuf, Option<String>, String)>,
    mcpus: Vec<String>,
    out_dir: Option<PathBuf>,
    code_object_version: Option<u32>,
    cargo_metadata: Option<bool>,
    tuning: Option<PathBuf>,
    no_tuning: bool,
    tuned_for: Option<String>,
    any_device: bool,
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
    /// What the build warned about (also Cargo warnings when run by
    /// Cargo): each stage that runs on one GPU thread.
    pub warnings: Vec<String>,
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

    /// Adds a kernel file built with these tune values (`"Y_BN=128,Y_WN=2"`,
    /// as `rocmc build --tune`): the `[tune]` parameters or the knobs of
    /// its default schedules, checked like any configuration. The tuning
    /// database is not read for this file.
    pub fn kernel_tuned(&mut self, path: impl AsRef<Path>, values: &str) -> &mut Build {
        self.add_once(path.as_ref());
        self.tune_values
            .push((path.as_ref().to_path_buf(), None, values.to_string()));
        self
    }

    /// Tune values for one target of a kernel file (`target` as given to
    /// [`Build::mcpu`], e.g. `sm_90` or `gfx942`), which replace those of
    /// [`Build::kernel_tuned`] there: knobs measured on one GPU, or knobs
    /// only one target's rule has (`Y_STAGES` of the NVIDIA matrix path).
    /// The file is added if it was not.
    pub fn kernel_tuned_on(
        &mut self,
        path: impl AsRef<Path>,
        target: &str,
        values: &str,
    ) -> &mut Build {
        self.add_once(path.as_ref());
        self.tune_values.push((
            path.as_ref().to_path_buf(),
            Some(target.to_string()),
            values.to_string(),
        ));
        self
    }

    fn add_once(&mut self, path: &Path) {
        if !self.kernels.iter().any(|k| k == path) {
            self.kernels.push(path.to_path_buf());
        }
    }

    /// The hand-given tune values of `path` on target `t`, if any.
    fn given_values(&self, path: &Path, t: &rocmc_target::Target) -> Option<&str> {
        let id = t.to_string();
        let on_t = |sel: &str| id == sel || id.starts_with(&format!("{sel}:"));
        let of_path = || self.tune_values.iter().filter(|(p, _, _)| p == path);
        of_path()
            .filter(|(_, sel, _)| sel.as_deref().is_some_and(on_t))
            .chain(of_path().filter(|(_, sel, _)| sel.is_none()))
            .map(|(_, _, v)| v.as_str())
            .next()
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

    /// Writes launchers over the one device interface
    /// (`rocmc_device::Device`) instead of one vendor's runtime: targets
    /// may then mix AMD, NVIDIA and the CPU (`x86-64`), each launcher
    /// embeds every target's module, and `load` takes any device —
    /// `cpu`, `cuda:N`, `amdgpu:N` or a worker's `remote://…` — picking
    /// its code. The application depends on `rocmc-device` (and on
    /// `rocmc-runtime` to open devices by name).
    pub fn any_device(&mut self) -> &mut Build {
        self.any_device = true;
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
        let k = rocmc_ir::parse_kernel(file, text)?;
        if k.tuning.is_none() {
            return Ok((Vec::new(), None));
        }
        if self.no_tuning {
            return Ok((
                Vec::new(),
                Some(format!("{}: the [tune] defaults (no_tuning)", k.name)),
            ));
        }
        let Some(path) = rules::tuning_database(self.tuning.as_deref(), false) else {
            return Ok((
                Vec::new(),
                Some(format!(
                    "{}: the [tune] defaults (no tuning database)",
                    k.name
                )),
            ));
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
            // A build script fails by panicking (as cc-rs does); Cargo
            // shows the message, once.
            Err(e) => panic!(
                "rocmc: kernel compilation failed:\n{}",
                e.to_string().trim_end()
            ),
        }
    }

    /// The options and targets of this build (`ROCMC_MCPU` replacing the
    /// script's), grouped by the kind of module each gets.
    #[allow(clippy::type_complexity)]
    fn targets(
        &self,
        metadata: bool,
    ) -> Result<(Options, Vec<(Output, Vec<rocmc_target::Target>)>), Error> {
        if metadata {
            println!("cargo:rerun-if-env-changed={MCPU_ENV}");
        }
        let mcpus =
            rules::targets(&self.mcpus).map_err(|e| Error::Usage(format!("rocmc::Build: {e}")))?;
        let mut opts = Options::new(&mcpus);
        if let Some(v) = self.code_object_version {
            opts.code_object_version = v;
        }
        let targets = crate::targets(&opts)?;
        let groups = group_by_output(targets);
        if !self.any_device && groups.len() > 1 {
            return Err(Error::Usage(format!(
                "rocmc::Build: targets {mcpus} mix AMD and NVIDIA; use one Build per vendor, each with its own out_dir, or .any_device() for launchers over every device"
            )));
        }
        Ok((opts, groups))
    }

    /// Like [`Build::compile`], returning the error instead of failing the build.
    pub fn try_compile(&self) -> Result<Outputs, Error> {
        let metadata = rules::cargo_metadata(self.cargo_metadata);
        let out_dir = rules::out_dir(self.out_dir.as_deref()).map_err(Error::Usage)?;
        let (opts, groups) = self.targets(metadata)?;
        let mut bundles = Vec::new();
        let mut tuning = Vec::new();
        let mut warnings = Vec::new();
        let mut src = String::from("// Generated by rocmc::Build; do not edit.\n");
        for path in &self.kernels {
            if metadata && !rules::generated(path) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            let file = path.display().to_string();
            let mut embedded = Embedded::default();
            let mut first: Option<crate::Artifact> = None;
            for (out, ts) in &groups {
                let tc = crate::toolchain::lookup(&ts[0]);
                // Targets given the same tune values compile together.
                let mut parts: Vec<(Option<&str>, Vec<rocmc_target::Target>)> = Vec::new();
                for t in ts {
                    let v = self.given_values(path, t);
                    match parts.iter_mut().find(|(pv, _)| *pv == v) {
                        Some((_, pts)) => pts.push(t.clone()),
                        None => parts.push((v, vec![t.clone()])),
                    }
                }
                if parts.len() > 1 && !self.any_device {
                    // A vendor launcher takes one launch shape for its targets.
                    return Err(Error::Usage(format!(
                        "rocmc::Build::kernel_tuned_on({file:?}): targets {} get different tune values; that needs .any_device(), whose launchers read each target's own launch, or one Build per target",
                        ts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    )));
                }
                let emit = tc.module_emit();
                let mut arts = Vec::new();
                for (given, pts) in &parts {
                    let (tune, note) = match given {
                        Some(v) => (
                            rocmc_ir::tune::parse_assignments(v).map_err(|e| {
                                Error::Usage(format!("rocmc::Build::kernel_tuned({file:?}): {e}"))
                            })?,
                            None,
                        ),
                        None => self.tuning_for(&file, &text, pts, metadata)?,
                    };
                    tuning.extend(note);
                    let opts = Options {
                        tune,
                        ..opts.clone()
                    };
                    if self.any_device && matches!(out, Output::CodeObject | Output::Ptx) {
                        // Each code object of a bundle, and each PTX, carries
                        // its own launch document, which the device reads:
                        // the wave size (`mma`) or a warpgroup instruction
                        // (sm_90a's `wgmma`) may give each target its own block.
                        for t in pts {
                            arts.extend(crate::compile_for(
                                &file,
                                &text,
                                std::slice::from_ref(t),
                                &opts,
                                emit,
                            )?);
                        }
                    } else {
                        arts.extend(crate::compile_for(&file, &text, pts, &opts, emit)?);
                    }
                }
                write_modules(
                    &out_dir,
                    *out,
                    self.any_device,
                    &arts,
                    &mut embedded,
                    &mut bundles,
                )?;
                for b in &arts[1..] {
                    same_kernels(&arts[0], b)?;
                }
                let a = arts.swap_remove(0);
                if let Some(f) = &first {
                    same_kernels(f, &a)?;
                } else {
                    first = Some(a);
                }
            }
            let Some(a) = first else {
                continue;
            };
            for w in crate::explain::one_thread_warnings(&a.kernel) {
                let w = format!("{file}: {w}");
                if metadata {
                    println!("cargo:warning={w}");
                }
                warnings.push(w);
            }
            src.push_str(&if self.any_device {
                device_launcher(&a.kernel, &a.program, &embedded)?
            } else {
                let code = match embedded.amd {
                    Some(bundle) => Code::Bundle(bundle),
                    None => Code::Ptx(embedded.ptx.into_iter().map(|(_, f)| f).collect()),
                };
                launcher(&a.kernel, &a.program, &code)?
            });
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
            warnings,
        })
    }
}

/// One group per kind of module (AMD code objects, PTX, CPU shared
/// objects), in the order the build names them.
fn group_by_output(targets: Vec<rocmc_target::Target>) -> Vec<(Output, Vec<rocmc_target::Target>)> {
    let mut groups: Vec<(Output, Vec<rocmc_target::Target>)> = Vec::new();
    for t in targets {
        let out = crate::toolchain::lookup(&t).module_output();
        match groups.iter_mut().find(|(o, _)| *o == out) {
            Some((_, ts)) => ts.push(t),
            None => groups.push((out, vec![t])),
        }
    }
    groups
}

/// Writes one kernel file's modules for one kind of target: a PTX file or
/// CPU shared object per target, or one AMD offload bundle; records them
/// for the launcher (`embedded`) and the caller (`bundles`).
fn write_modules(
    out_dir: &Path,
    out: Output,
    any_device: bool,
    arts: &[crate::Artifact],
    embedded: &mut Embedded,
    bundles: &mut Vec<PathBuf>,
) -> Result<(), Error> {
    let name = arts[0].kernel.name.clone();
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::write(&path, bytes)
            .map(|()| path.clone())
            .map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })
    };
    match (out, any_device) {
        (Output::Ptx, _) => {
            for a in arts {
                let asm = a.asm.as_deref().unwrap_or_default();
                let f = write(
                    out_dir.join(format!("{name}.{}.ptx", a.target)),
                    asm.as_bytes(),
                )?;
                embedded.ptx.push((a.target.to_string(), f.clone()));
                bundles.push(f);
            }
        }
        (Output::SharedObject, true) => {
            for a in arts {
                let so = a.code_object.as_deref().unwrap_or_default();
                let f = write(out_dir.join(format!("{name}.{}.so", a.target)), so)?;
                embedded.cpu.push((a.target.to_string(), f.clone()));
                bundles.push(f);
            }
        }
        _ => {
            let f = write(out_dir.join(format!("{name}.hipfb")), &crate::bundle(arts))?;
            embedded.amd = Some(f.clone());
            bundles.push(f);
        }
    }
    Ok(())
}

/// Refuses a kernel file whose GPU kernels differ between targets (of
/// different vendors, or given different tune values): one launcher
/// launches the same kernels everywhere.
fn same_kernels(a: &crate::Artifact, b: &crate::Artifact) -> Result<(), Error> {
    let names = |x: &crate::Artifact| {
        x.program
            .kernels
            .iter()
            .map(|g| g.name.clone())
            .collect::<Vec<_>>()
    };
    if names(a) != names(b) {
        return Err(Error::Usage(format!(
            "kernel `{}` launches {:?} on {} but {:?} on {}; build these targets separately",
            a.kernel.name,
            names(a),
            a.target,
            names(b),
            b.target
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The two build APIs look for the same tuning database.
    #[test]
    fn both_build_apis_name_the_tuners_database() {
        assert_eq!(
            rocmc_build::rules::TUNING_FILE,
            crate::tune::db::DEFAULT_FILE
        );
    }
}
