//! The `rocmc` command line: a thin layer over the `rocmc` library.

use clap::{Parser, Subcommand, ValueEnum};
use rocmc::{Emit, Error, Options};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rocmc", version, about = "Ahead-of-time GPU kernel compiler for AMD GPUs", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a kernel file into a code object (.hsaco) and other forms.
    Build(BuildArgs),
    /// List the AMDGPU processors LLVM supports (valid --mcpu values).
    Targets,
    /// Show what a code object contains: target, kernels, arguments, resources.
    Inspect {
        /// A code object (.hsaco).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Kind {
    /// Loop IR after scheduling, as pseudo-code (.loops)
    Loops,
    /// Optimised LLVM IR (.ll)
    Llvm,
    /// GCN assembly (.s)
    Asm,
    /// Relocatable ELF object, before linking (.o)
    Obj,
    /// Linked code object that HIP loads (.hsaco)
    Hsaco,
}

impl Kind {
    fn ext(self) -> &'static str {
        match self {
            Kind::Loops => "loops",
            Kind::Llvm => "ll",
            Kind::Asm => "s",
            Kind::Obj => "o",
            Kind::Hsaco => "hsaco",
        }
    }
    fn is_text(self) -> bool {
        matches!(self, Kind::Loops | Kind::Llvm | Kind::Asm)
    }
}

#[derive(clap::Args)]
struct BuildArgs {
    /// The kernel file (kernel.toml format, see docs/kernel-format.md).
    kernel: PathBuf,
    /// Target ID to compile for, e.g. gfx90a, gfx1100, gfx942:sramecc+:xnack-. Required: there is no default target.
    #[arg(long, value_name = "TARGET")]
    mcpu: String,
    /// What to write: loops, llvm, asm, obj, hsaco. A comma list or repeated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "hsaco",
        value_name = "KINDS"
    )]
    emit: Vec<Kind>,
    /// Output path; `-` writes to stdout. With several --emit kinds, the path's extension is replaced per kind.
    /// Default: the kernel's name in the current folder, e.g. vadd.hsaco.
    #[arg(short, long, value_name = "PATH")]
    output: Option<String>,
    /// Code object version: 4, 5 or 6. Version 5 loads on ROCm 5.x and later; generic targets need 6.
    #[arg(long, default_value_t = 5, value_name = "N")]
    code_object_version: u32,
    /// Use 64-wide waves on gfx10 and later (default there is 32; gfx9 is always 64).
    #[arg(long)]
    wave64: bool,
    /// Print the wall time of each compiler phase to stderr.
    #[arg(long)]
    time_passes: bool,
    /// Do not print the summary of what was written.
    #[arg(short, long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Build(a) => build(a),
        Command::Targets => targets(),
        Command::Inspect { file, json } => inspect(&file, json),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = e.to_string();
            if text.starts_with("error") {
                eprintln!("{}", text.trim_end());
            } else {
                eprintln!("error: {}", text.trim_end());
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn build(a: BuildArgs) -> Result<(), Error> {
    let source = std::fs::read_to_string(&a.kernel).map_err(io(&a.kernel))?;
    let file = a.kernel.display().to_string();
    let mut kinds = a.emit.clone();
    kinds.sort();
    kinds.dedup();
    let to_stdout = a.output.as_deref() == Some("-");
    if to_stdout && kinds.len() > 1 && kinds.iter().any(|k| !k.is_text()) {
        return Err(Error::Usage(
            "-o - with several --emit kinds only works for text (loops, llvm, asm)".into(),
        ));
    }
    let opts = Options {
        mcpu: a.mcpu.clone(),
        code_object_version: a.code_object_version,
        wave64: a.wave64,
    };
    let emit = Emit {
        asm: kinds.contains(&Kind::Asm),
        object: kinds.contains(&Kind::Obj),
        code_object: kinds.contains(&Kind::Hsaco),
    };
    let art = rocmc::compile(&file, &source, &opts, emit)?;
    let header = |comment: &str| {
        format!(
            "{comment} rocmc {} for {} (code object v{}, wave{})\n{}",
            env!("CARGO_PKG_VERSION"),
            art.target.id,
            art.target.code_object_version,
            art.target.wavefront_size(),
            rocmc::launch_summary(&art.launch, &format!("{comment} "))
        )
    };
    let mut outputs: Vec<(Kind, Vec<u8>)> = Vec::new();
    for k in &kinds {
        let bytes = match k {
            Kind::Loops => art.loops.clone().into_bytes(),
            Kind::Llvm => format!("{}{}", header(";"), art.llvm_ir).into_bytes(),
            Kind::Asm => {
                format!("{}{}", header(";"), art.asm.clone().unwrap_or_default()).into_bytes()
            }
            Kind::Obj => art.object.clone().unwrap_or_default(),
            Kind::Hsaco => art.code_object.clone().unwrap_or_default(),
        };
        outputs.push((*k, bytes));
    }
    let t_write = std::time::Instant::now();
    let mut written = Vec::new();
    if to_stdout {
        let mut out = std::io::stdout().lock();
        for (_, b) in &outputs {
            out.write_all(b)
                .and_then(|_| out.flush())
                .map_err(io(Path::new("<stdout>")))?;
        }
    } else {
        // Compute every path first so a bad path fails before anything is written.
        let paths: Vec<PathBuf> = outputs
            .iter()
            .map(|(k, _)| match &a.output {
                Some(p) if kinds.len() == 1 => PathBuf::from(p),
                Some(p) => PathBuf::from(p).with_extension(k.ext()),
                None => PathBuf::from(format!("{}.{}", art.kernel.name, k.ext())),
            })
            .collect();
        for ((_, bytes), path) in outputs.iter().zip(&paths) {
            write_atomic(path, bytes)?;
            written.push(path.display().to_string());
        }
    }
    if a.time_passes {
        let mut timings = art.timings.clone();
        timings.push(("write", t_write.elapsed()));
        let total: f64 = timings.iter().map(|(_, d)| d.as_secs_f64()).sum();
        eprintln!("phase                      time (ms)");
        for (name, d) in &timings {
            eprintln!("{name:<26} {:>9.3}", d.as_secs_f64() * 1e3);
        }
        eprintln!("{:<26} {:>9.3}", "total", total * 1e3);
    }
    if !a.quiet && !to_stdout {
        eprintln!(
            "wrote {} ({}, code object v{}, wave{})",
            written.join(", "),
            art.target.id,
            art.target.code_object_version,
            art.target.wavefront_size()
        );
        eprint!("{}", rocmc::launch_summary(&art.launch, "  "));
    }
    Ok(())
}

/// Writes through a temporary file in the same folder, then renames, so a
/// failure never leaves a partial output behind.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".rocmc-")
        .tempfile_in(dir)
        .map_err(io(path))?;
    tmp.write_all(bytes).map_err(io(path))?;
    // Temporary files are created 0600; outputs get the usual 0644.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io(path))?;
    }
    tmp.persist(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e.error,
    })?;
    Ok(())
}

fn targets() -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    for p in rocmc::codegen::target::processors() {
        let info = rocmc::codegen::target::processor_info(&p);
        let (waves, feats) = match info {
            Some(i) => (
                if i.wave32 {
                    "wave32 (default), wave64"
                } else {
                    "wave64"
                },
                [("xnack", i.supports_xnack), ("sramecc", i.supports_sramecc)]
                    .iter()
                    .filter(|f| f.1)
                    .map(|f| f.0)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            None => ("?", String::new()),
        };
        writeln!(out, "{p:<16} {waves:<26} {feats}").map_err(io(Path::new("<stdout>")))?;
    }
    Ok(())
}

fn inspect(file: &Path, json: bool) -> Result<(), Error> {
    let bytes = std::fs::read(file).map_err(io(file))?;
    let co = rocmc::linker::codeobject::read(&bytes)
        .map_err(|e| Error::Usage(format!("{}: {e}", file.display())))?;
    let mut out = String::new();
    if json {
        let mut v = serde_json::to_value(&co).unwrap_or_default();
        if let (Some(l), Some(m)) = (&co.launch, v.as_object_mut()) {
            m.insert(
                "launch".into(),
                serde_json::from_str(&l.to_json()).unwrap_or_default(),
            );
        }
        out = serde_json::to_string_pretty(&v).unwrap_or_default();
        out.push('\n');
    } else {
        out.push_str(&format!(
            "{}: {} (code object v{}, ELF ABI version {})\n",
            file.display(),
            co.target,
            co.code_object_version,
            co.abi_version
        ));
        for k in &co.kernels {
            out.push_str(&format!(
                "kernel {}: kernarg {} B, LDS {} B, scratch {} B, VGPR {}, SGPR {}{}, spills {} VGPR / {} SGPR, wave{}, max work-group {}\n",
                k.name,
                k.kernarg_segment_size,
                k.group_segment_fixed_size,
                k.private_segment_fixed_size,
                k.vgpr_count,
                k.sgpr_count,
                k.agpr_count.map(|a| format!(", AGPR {a}")).unwrap_or_default(),
                k.vgpr_spill_count,
                k.sgpr_spill_count,
                k.wavefront_size,
                k.max_flat_workgroup_size
            ));
            for a in &k.args {
                out.push_str(&format!(
                    "  arg {:<10} offset {:>3} size {:>2} {}{}\n",
                    a.name.as_deref().unwrap_or("-"),
                    a.offset,
                    a.size,
                    a.value_kind,
                    a.address_space
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                ));
            }
        }
        if let Some(l) = &co.launch {
            out.push_str(&rocmc::launch_summary(l, "launch: "));
        }
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io(Path::new("<stdout>")))
}
