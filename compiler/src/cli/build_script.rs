//! `rocmc build-script`: what a Cargo build script asks for through the
//! `rocmc-build` crate, which runs this executable instead of linking the
//! compiler. The arguments mirror `crate::Build`'s methods one to one.

use crate::Error;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct BuildScriptArgs {
    /// Where to write the modules and `rocmc_kernels.rs`.
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// Targets, comma-separated or repeated (as `rocmc build --mcpu`).
    #[arg(long, value_name = "TARGET", value_delimiter = ',', required = true)]
    mcpu: Vec<String>,
    /// A kernel file, in the order the launchers list them.
    #[arg(long, value_name = "FILE", required = true)]
    kernel: Vec<PathBuf>,
    /// Tune values for a kernel file on every target: FILE VALUES.
    #[arg(long, num_args = 2, value_names = ["FILE", "VALUES"])]
    kernel_tuned: Vec<String>,
    /// Tune values for a kernel file on one target: FILE TARGET VALUES.
    #[arg(long, num_args = 3, value_names = ["FILE", "TARGET", "VALUES"])]
    kernel_tuned_on: Vec<String>,
    /// The tuning database (default: rocmc-tuning.toml in CARGO_MANIFEST_DIR).
    #[arg(long, value_name = "FILE")]
    tuning: Option<PathBuf>,
    /// Build the [tune] defaults, ignoring any tuning database.
    #[arg(long)]
    no_tuning: bool,
    /// Pick the database entry tuned for these sizes (M=4096,N=4096).
    #[arg(long, value_name = "SIZES")]
    tuned_for: Option<String>,
    /// Launchers over the one device interface (targets may mix vendors and the CPU).
    #[arg(long)]
    any_device: bool,
    /// Code object version (default 5).
    #[arg(long, value_name = "N")]
    code_object_version: Option<u32>,
    /// Print `cargo:` lines (rerun-if-changed, warnings) to stdout.
    #[arg(long)]
    cargo_metadata: bool,
}

pub fn build_script(a: BuildScriptArgs) -> Result<(), Error> {
    let mut b = crate::Build::new();
    b.out_dir(&a.out_dir).cargo_metadata(a.cargo_metadata);
    for k in &a.kernel {
        b.kernel(k);
    }
    for t in &a.mcpu {
        b.mcpu(t);
    }
    for v in a.kernel_tuned.chunks_exact(2) {
        b.kernel_tuned(&v[0], &v[1]);
    }
    for v in a.kernel_tuned_on.chunks_exact(3) {
        b.kernel_tuned_on(&v[0], &v[1], &v[2]);
    }
    if let Some(t) = &a.tuning {
        b.tuning(t);
    }
    if a.no_tuning {
        b.no_tuning();
    }
    if let Some(s) = &a.tuned_for {
        b.tuned_for(s);
    }
    if a.any_device {
        b.any_device();
    }
    if let Some(v) = a.code_object_version {
        b.code_object_version(v);
    }
    let out = b.try_compile()?;
    // What rocmc-build copies into a crate's offline folder.
    for f in &out.bundles {
        println!("rocmc-build:file={}", f.display());
    }
    for t in &out.tuning {
        eprintln!("note: {t}");
    }
    for w in &out.warnings {
        eprintln!("warning: {w}");
    }
    Ok(())
}
