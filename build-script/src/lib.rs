//! Compiling rocmc kernels from a Cargo build script without linking the
//! compiler: this crate runs the `rocmc` executable, in cc-rs's shape.
//!
//! ```no_run
//! // build.rs
//! rocmc_build::Build::new()
//!     .kernel("kernels/vadd.toml")
//!     .mcpu("gfx942")
//!     .mcpu("gfx1100")
//!     .offline("rocmc-kernels")
//!     .compile();
//! ```
//!
//! ```ignore
//! // main.rs
//! include!(concat!(env!("OUT_DIR"), "/rocmc_kernels.rs"));
//! ```
//!
//! It writes what `rocmc::Build` writes (that type, in the `rocmc` crate,
//! does the work inside `rocmc build-script`): per kernel file an AMD
//! offload bundle, PTX per NVIDIA target or a shared object per CPU
//! target, and `rocmc_kernels.rs` with typed launchers over
//! `rocmc-runtime-hip`, `rocmc-runtime-cuda` or, with
//! [`Build::any_device`], `rocmc-device`.
//!
//! The executable is [`Build::rocmc`], else `ROCMC`, else `rocmc` on
//! `PATH`. With [`Build::offline`] the build also works with none: the
//! folder holds the kernels a machine with `rocmc` wrote
//! (`ROCMC_OFFLINE=write`), and a build without `rocmc` copies them into
//! `OUT_DIR` when the kernel files, tuning database and options are the
//! ones they were built from, or fails naming what changed.
//! `ROCMC_OFFLINE=only` uses the folder even where `rocmc` is installed.
//! `ROCMC_MCPU` (comma-separated targets) replaces the targets the script
//! names.

mod error;
mod locate;
pub mod offline;
pub mod rules;

pub use error::Error;
pub use locate::ROCMC_ENV;
pub use rules::MCPU_ENV;

use offline::Input;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable choosing how offline kernels are used: `only` or `write`.
pub const OFFLINE_ENV: &str = "ROCMC_OFFLINE";

/// How a build with [`Build::offline`] uses its folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offline {
    /// Compile with `rocmc` when there is one (warning when the folder is
    /// stale), else use the folder. The default.
    Auto,
    /// Use the folder even where `rocmc` is installed.
    Only,
    /// Compile with `rocmc` and write the results into the folder.
    Write,
}

/// A set of kernels to compile into `OUT_DIR`; the methods are those of
/// `rocmc::Build`, plus where the compiler and offline kernels are.
#[derive(Clone, Debug, Default)]
pub struct Build {
    kernels: Vec<PathBuf>,
    tune_values: Vec<(PathBuf, Option<String>, String)>,
    mcpus: Vec<String>,
    out_dir: Option<PathBuf>,
    code_object_version: Option<u32>,
    cargo_metadata: Option<bool>,
    tuning: Option<PathBuf>,
    no_tuning: bool,
    tuned_for: Option<String>,
    any_device: bool,
    rocmc: Option<PathBuf>,
    offline: Option<PathBuf>,
    offline_mode: Option<Offline>,
}

/// Where a build's kernels came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Compiled by this executable (its `--version` line).
    Compiled(PathBuf, String),
    /// Copied from this offline folder.
    Offline(PathBuf),
}

/// What a build wrote.
#[derive(Clone, Debug)]
pub struct Outputs {
    /// The modules: offload bundles, PTX files, shared objects.
    pub modules: Vec<PathBuf>,
    /// The generated launchers, for `include!`.
    pub launchers: PathBuf,
    /// Where they came from.
    pub source: Source,
    /// What the compiler warned about (also Cargo warnings when run by
    /// Cargo): a stage that runs on one GPU thread, a stale tuning entry.
    pub warnings: Vec<String>,
}

/// The launchers' file name in the output folder.
pub const LAUNCHERS: &str = "rocmc_kernels.rs";

impl Build {
    /// An empty set: add kernels and targets.
    pub fn new() -> Build {
        Build::default()
    }

    /// Adds a kernel file (kernel.toml format).
    pub fn kernel(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.add_once(path.as_ref());
        self
    }

    /// Adds a kernel file built with these tune values (`"Y_BN=128"`, as
    /// `rocmc build --tune`); the tuning database is not read for it.
    pub fn kernel_tuned(&mut self, path: impl AsRef<Path>, values: &str) -> &mut Build {
        self.add_once(path.as_ref());
        self.tune_values
            .push((path.as_ref().to_path_buf(), None, values.to_string()));
        self
    }

    /// Tune values for one target of a kernel file, replacing those of
    /// [`Build::kernel_tuned`] there.
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

    /// Adds a target: `gfx942`, `gfx1100`, `sm_90`, `x86-64` (with
    /// [`Build::any_device`]), or any `rocmc targets` name.
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

    /// The tuning database; default `rocmc-tuning.toml` in the package's
    /// folder when there is one.
    pub fn tuning(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.tuning = Some(path.as_ref().to_path_buf());
        self
    }

    /// Builds the `[tune]` defaults, ignoring any tuning database.
    pub fn no_tuning(&mut self) -> &mut Build {
        self.no_tuning = true;
        self
    }

    /// Picks the database entry tuned for these sizes (`"M=4096,N=4096"`).
    pub fn tuned_for(&mut self, sizes: &str) -> &mut Build {
        self.tuned_for = Some(sizes.to_string());
        self
    }

    /// Launchers over the one device interface (`rocmc_device::Device`):
    /// targets may mix AMD, NVIDIA and the CPU.
    pub fn any_device(&mut self) -> &mut Build {
        self.any_device = true;
        self
    }

    /// The `rocmc` executable to run, instead of `ROCMC` or `PATH`.
    pub fn rocmc(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.rocmc = Some(path.as_ref().to_path_buf());
        self
    }

    /// A folder of the crate (relative to the package) holding offline
    /// kernels: used where no `rocmc` is installed, written with
    /// `ROCMC_OFFLINE=write`. One folder per `Build`.
    pub fn offline(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.offline = Some(dir.as_ref().to_path_buf());
        self
    }

    /// How the offline folder is used, instead of `ROCMC_OFFLINE`.
    pub fn offline_mode(&mut self, mode: Offline) -> &mut Build {
        self.offline_mode = Some(mode);
        self
    }

    /// Compiles, or fails the build script with the error printed once
    /// (file, line and column of a kernel mistake).
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

    /// Like [`Build::compile`], returning the error instead of failing the build.
    pub fn try_compile(&self) -> Result<Outputs, Error> {
        let metadata = rules::cargo_metadata(self.cargo_metadata);
        let out_dir = rules::out_dir(self.out_dir.as_deref()).map_err(Error::Usage)?;
        if metadata {
            self.declare_inputs();
        }
        let args = self.arguments()?;
        let mode = self.mode()?;
        let compiler = match mode {
            Offline::Only => None,
            _ => locate::find(self.rocmc.as_deref())?,
        };
        let Some(rocmc) = compiler else {
            let Some(dir) = &self.offline else {
                return Err(Error::NoCompiler {
                    searched: locate::searched(),
                });
            };
            let files = offline::restore(dir, &self.inputs(&args)?, &out_dir)?;
            return Ok(outputs(
                files,
                &out_dir,
                Source::Offline(dir.clone()),
                Vec::new(),
            ));
        };
        let version = version(&rocmc)?;
        compatible(&rocmc, &version)?;
        let (files, mut warnings) = run(&rocmc, &args, &out_dir, metadata)?;
        if let Some(dir) = &self.offline {
            let inputs = self.inputs(&args)?;
            if mode == Offline::Write {
                offline::write(dir, &version, &inputs, &files)?;
            } else if let Some(why) = offline::stale(dir, &inputs) {
                let why: Vec<&str> = why.lines().map(str::trim).collect();
                let w = format!(
                    "the offline kernels in {} are out of date ({}); `{OFFLINE_ENV}=write cargo build` writes them anew",
                    dir.display(),
                    why.join("; ")
                );
                if metadata {
                    println!("cargo:warning={w}");
                }
                eprintln!("warning: {w}");
                warnings.push(w);
            }
        }
        Ok(outputs(
            files,
            &out_dir,
            Source::Compiled(rocmc, version),
            warnings,
        ))
    }

    fn mode(&self) -> Result<Offline, Error> {
        let m = match self.offline_mode {
            Some(m) => m,
            None => match std::env::var(OFFLINE_ENV).as_deref().map(str::trim) {
                Err(_) | Ok("") => Offline::Auto,
                Ok("only") => Offline::Only,
                Ok("write") => Offline::Write,
                Ok(v) => {
                    return Err(Error::Usage(format!(
                        "{OFFLINE_ENV}={v:?}: expected `only` or `write`"
                    )))
                }
            },
        };
        match (&self.offline, m) {
            (None, Offline::Only | Offline::Write) if self.offline_mode.is_some() => Err(
                Error::Usage("offline_mode needs a folder: call offline(DIR)".into()),
            ),
            // The variable may be set for a whole workspace; builds
            // without a folder compile as usual.
            (None, _) => Ok(Offline::Auto),
            (Some(_), m) => Ok(m),
        }
    }

    /// Tells Cargo what reruns the script.
    fn declare_inputs(&self) {
        for v in [ROCMC_ENV, MCPU_ENV, OFFLINE_ENV] {
            println!("cargo:rerun-if-env-changed={v}");
        }
        for k in self.kernels.iter().filter(|k| !rules::generated(k)) {
            println!("cargo:rerun-if-changed={}", k.display());
        }
        if let Some(t) = self.tuning_database() {
            println!("cargo:rerun-if-changed={}", t.display());
        }
        if let Some(d) = &self.offline {
            println!(
                "cargo:rerun-if-changed={}",
                d.join(offline::MANIFEST).display()
            );
        }
    }

    fn tuning_database(&self) -> Option<PathBuf> {
        rules::tuning_database(self.tuning.as_deref(), self.no_tuning)
    }

    /// `rocmc build-script`'s arguments, but the output folder.
    fn arguments(&self) -> Result<Vec<String>, Error> {
        let mcpus = rules::targets(&self.mcpus).map_err(Error::Usage)?;
        if self.kernels.is_empty() {
            return Err(Error::Usage("no kernel file; call .kernel(PATH)".into()));
        }
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut a = vec!["--mcpu".to_string(), mcpus];
        for k in &self.kernels {
            a.extend(["--kernel".into(), text(k)]);
        }
        for (k, on, v) in &self.tune_values {
            match on {
                None => a.extend(["--kernel-tuned".into(), text(k), v.clone()]),
                Some(t) => a.extend(["--kernel-tuned-on".into(), text(k), t.clone(), v.clone()]),
            }
        }
        if let Some(t) = &self.tuning {
            a.extend(["--tuning".into(), text(t)]);
        }
        if self.no_tuning {
            a.push("--no-tuning".into());
        }
        if let Some(s) = &self.tuned_for {
            a.extend(["--tuned-for".into(), s.clone()]);
        }
        if self.any_device {
            a.push("--any-device".into());
        }
        if let Some(v) = self.code_object_version {
            a.extend(["--code-object-version".into(), v.to_string()]);
        }
        Ok(a)
    }

    /// What the offline kernels must have been built from: the arguments,
    /// every kernel file and the tuning database.
    fn inputs(&self, args: &[String]) -> Result<Vec<Input>, Error> {
        let args: Vec<String> = args.iter().map(|a| portable(a)).collect();
        let mut v = vec![Input {
            label: format!("arguments {}", args.join(" ")),
            digest: offline::digest(args.join("\0").as_bytes()),
        }];
        let files = self
            .kernels
            .iter()
            .map(|k| ("kernel", k.clone()))
            .chain(self.tuning_database().map(|t| ("tuning", t)));
        for (what, p) in files {
            let bytes = std::fs::read(&p).map_err(error::io(&p))?;
            v.push(Input {
                label: format!("{what} {}", portable(&p.to_string_lossy())),
                digest: offline::digest(&bytes),
            });
        }
        Ok(v)
    }
}

/// A path as the manifest records it: relative to the package when inside
/// it, `$OUT_DIR/…` for a kernel file the build script wrote, so the
/// folder matches on every machine the crate is built on.
fn portable(p: &str) -> String {
    let under = |var: &str| {
        let d = std::env::var(var).ok().filter(|d| !d.is_empty())?;
        let rest = p.strip_prefix(d.trim_end_matches('/'))?.strip_prefix('/')?;
        Some(rest.to_string())
    };
    // OUT_DIR lies inside the package's target folder at times: it first.
    under("OUT_DIR")
        .map(|r| format!("$OUT_DIR/{r}"))
        .or_else(|| under("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|| p.to_string())
}

fn outputs(files: Vec<PathBuf>, out_dir: &Path, source: Source, warnings: Vec<String>) -> Outputs {
    let launchers = out_dir.join(LAUNCHERS);
    Outputs {
        modules: files.into_iter().filter(|f| *f != launchers).collect(),
        launchers,
        source,
        warnings,
    }
}

/// `rocmc --version`'s line: which compiler wrote the kernels.
fn version(rocmc: &Path) -> Result<String, Error> {
    let out = Command::new(rocmc)
        .arg("--version")
        .output()
        .map_err(error::io(rocmc))?;
    if !out.status.success() {
        return Err(Error::BadRocmc(rocmc.to_path_buf()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `rocmc --version`'s `version` writes launchers this crate's
/// runtimes take: the same major and minor version (0.1.x today).
fn compatible(rocmc: &Path, version: &str) -> Result<(), Error> {
    let minor = |v: &str| -> Option<String> {
        let mut parts = v.trim().rsplit(' ').next()?.split('.');
        Some(format!("{}.{}", parts.next()?, parts.next()?))
    };
    let ours = env!("CARGO_PKG_VERSION");
    if minor(version).is_some_and(|m| Some(m) == minor(ours)) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{} is `{version}`, and this rocmc-build is {ours}: the launchers of one minor version need its runtimes; install rocmc {ours} (pip install rocmc=={ours}) or set ROCMC",
            rocmc.display()
        )))
    }
}

/// Runs `rocmc build-script`; returns the files it wrote (launchers last)
/// and its warnings.
fn run(
    rocmc: &Path,
    args: &[String],
    out_dir: &Path,
    metadata: bool,
) -> Result<(Vec<PathBuf>, Vec<String>), Error> {
    let mut c = Command::new(rocmc);
    c.arg("build-script")
        .args(args)
        .arg("--out-dir")
        .arg(out_dir);
    if metadata {
        c.arg("--cargo-metadata");
    }
    // The targets are in the arguments already, resolved from it.
    c.env_remove(MCPU_ENV).stdin(Stdio::null());
    let out = c.output().map_err(error::io(rocmc))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(Error::Failed {
            rocmc: rocmc.to_path_buf(),
            message: stderr.into_owned(),
        });
    }
    eprint!("{stderr}");
    let mut files = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(f) = line.strip_prefix("rocmc-build:file=") {
            files.push(PathBuf::from(f));
        } else if line.starts_with("cargo:") {
            println!("{line}");
        }
    }
    files.push(out_dir.join(LAUNCHERS));
    let warnings = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: "))
        .map(str::to_string)
        .collect();
    Ok((files, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: it sets process-wide variables.
    #[test]
    fn manifests_record_portable_paths_and_versions_must_match() {
        std::env::set_var("CARGO_MANIFEST_DIR", "/home/a/app");
        std::env::set_var("OUT_DIR", "/home/a/app/target/debug/build/app-1/out");
        assert_eq!(portable("/home/a/app/kernels/k.toml"), "kernels/k.toml");
        assert_eq!(
            portable("/home/a/app/target/debug/build/app-1/out/gen/k.toml"),
            "$OUT_DIR/gen/k.toml"
        );
        assert_eq!(portable("../shared/k.toml"), "../shared/k.toml");
        assert_eq!(
            portable("/home/a/application/k.toml"),
            "/home/a/application/k.toml"
        );
        let exe = Path::new("/usr/bin/rocmc");
        let ours = env!("CARGO_PKG_VERSION");
        assert!(compatible(exe, &format!("rocmc {ours}")).is_ok());
        let (major, rest) = ours.split_once('.').unwrap();
        let minor: u32 = rest.split('.').next().unwrap().parse().unwrap();
        let patch_later = format!("rocmc {major}.{minor}.99");
        assert!(compatible(exe, &patch_later).is_ok());
        let e = compatible(exe, &format!("rocmc {major}.{}.0", minor + 1)).unwrap_err();
        assert!(e.to_string().contains("install rocmc"), "{e}");
        assert!(compatible(exe, "not a version").is_err());
    }
}
