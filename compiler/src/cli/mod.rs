//! The `rocmc` command line: a thin layer over the library, itself in the
//! library so that the executable (`src/bin/rocmc/main.rs`) and the Python
//! package's `rocmc` command run the same code in their own process.

use crate::Error;
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};

mod build;
mod build_script;
mod hot_loops;
mod inspect;
mod run;
mod tune;

use build::BuildArgs;
use build_script::BuildScriptArgs;
use run::RunArgs;
use tune::TuneArgs;

#[derive(Parser)]
#[command(name = "rocmc", version, about = "Ahead-of-time GPU kernel compiler for AMD and NVIDIA GPUs", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Check the loop IR after every lowering pass, naming the pass that
    /// broke it (always on in debug builds and tests; costs compile time).
    #[arg(long, global = true)]
    verify: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a kernel file into a code object (.hsaco) and other forms.
    Build(BuildArgs),
    /// Compile kernel files for a Cargo build script: modules and typed
    /// launchers into one folder (what the `rocmc-build` crate runs).
    BuildScript(BuildScriptArgs),
    /// Run a kernel on seeded random inputs and compare with the reference interpreter.
    Run(RunArgs),
    /// Search a kernel's [tune] parameters on a device and record the best in the tuning database.
    Tune(TuneArgs),
    /// List the AMDGPU and NVIDIA processors LLVM supports (valid --mcpu values).
    Targets,
    /// Show what a code object or offload bundle contains: target, kernels, arguments, resources, occupancy.
    Inspect {
        /// A code object (.hsaco) or an offload bundle (.hipfb); clang's work too.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Each kernel's loops from its machine code (AMD): instructions, matrix
        /// instructions and how many others run per one, memory and LDS traffic by
        /// width, waits, barriers, branches; the hot loop marked.
        #[arg(long)]
        loops: bool,
        /// LDS sized at launch, and the occupancy, at these sizes
        /// (`NAME=N`, repeatable; the others at their bounds) instead of at
        /// the kernel's size bounds. rocmc's code objects only.
        #[arg(long = "size", value_name = "NAME=N", value_parser = run::parse_size)]
        sizes: Vec<(String, i64)>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FpContract {
    Fast,
    Off,
}

/// Runs the command line `args` (the first being the program's name) and
/// returns the exit status; errors are printed to stderr, once.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // Help and --version are "errors" that exit 0, on stdout.
            let _ = e.print();
            return e.exit_code().clamp(0, 255) as u8;
        }
    };
    if cli.verify {
        crate::ir::lower::set_verify(true);
    }
    let r = match cli.command {
        Command::Build(a) => build::build(a),
        Command::BuildScript(a) => build_script::build_script(a),
        Command::Run(a) => run::run(a),
        Command::Tune(a) => tune::tune(a),
        Command::Targets => inspect::targets(),
        Command::Inspect {
            file,
            json,
            loops,
            sizes,
        } => inspect::inspect(&file, json, loops, &sizes),
    };
    let code = match r {
        Ok(()) => 0,
        Err(e) => {
            let text = e.to_string();
            if text.starts_with("error") {
                eprintln!("{}", text.trim_end());
            } else {
                eprintln!("error: {}", text.trim_end());
            }
            e.exit_code() as u8
        }
    };
    // A host process (Python) keeps running: what was printed must be out.
    let _ = std::io::stdout().flush();
    code
}

/// A kernel file's text; a binary file (a compiled module given where a
/// kernel file goes) is the user's mistake, said as such.
fn read_kernel(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => Error::Usage(format!(
            "{}: not a kernel file (it is not UTF-8 text); kernel files are TOML \
             (docs/kernel-format.md), and `rocmc run` runs compiled modules ending in \
             .hsaco, .hipfb, .co, .ptx or .so",
            path.display()
        )),
        _ => io(path)(e),
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}
