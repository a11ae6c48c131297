//! `rocmc build`: compile a kernel file into the forms asked for.

use super::{io, read_kernel, FpContract};
use crate::{Emit, Error, Options};
use clap::ValueEnum;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Kind {
    /// Loop IR after scheduling, as pseudo-code (.loops)
    Loops,
    /// Optimised LLVM IR (.ll)
    Llvm,
    /// Assembly: GCN (.s), or PTX for NVIDIA targets (.ptx)
    Asm,
    /// PTX for NVIDIA targets (.ptx): the same as asm there
    Ptx,
    /// Relocatable ELF object, before linking (.o)
    Obj,
    /// Linked code object that HIP loads (.hsaco)
    Hsaco,
    /// Shared object that rocmc's CPU runtime loads (.so), for `--mcpu x86-64`
    So,
    /// C header: entry points, argument order and types, launch geometry (.h)
    Header,
    /// Each stage's schedule as text, and the rule that wrote it where the file gives none (.schedule)
    Schedule,
}

impl Kind {
    fn ext(self) -> &'static str {
        match self {
            Kind::Loops => "loops",
            Kind::Llvm => "ll",
            Kind::Asm => "s",
            Kind::Ptx => "ptx",
            Kind::Obj => "o",
            Kind::Hsaco => "hsaco",
            Kind::So => "so",
            Kind::Header => "h",
            Kind::Schedule => "schedule",
        }
    }
    fn is_text(self) -> bool {
        matches!(
            self,
            Kind::Loops | Kind::Llvm | Kind::Asm | Kind::Ptx | Kind::Header | Kind::Schedule
        )
    }
}

pub fn rocmc_ir_kernel(file: &str, source: &str) -> Result<crate::ir::Kernel, Error> {
    Ok(crate::ir::parse_kernel(file, source)?)
}

/// Chooses the [tune] values a build uses: `--tune` by hand, else the
/// database's entry for this kernel and target (stale ones reported and
/// skipped), else the defaults. Returns a line for the summary.
fn tuning_for_build(
    a: &BuildArgs,
    file: &str,
    source: &str,
    targets: &[crate::codegen::Target],
    opts: &mut Options,
) -> Result<Option<String>, Error> {
    use crate::tune::db;
    if let Some(t) = &a.tune {
        opts.tune = crate::ir::tune::parse_assignments(t)
            .map_err(|e| Error::Usage(format!("--tune: {e}")))?;
        // Default schedules' knobs depend on the target: the first one's.
        let k = crate::kernel_for(file, source, &opts.tune, &targets[0], opts)?;
        return Ok(k.tuning.map(|t| {
            format!(
                "tune values given: {}",
                crate::ir::tune::describe(&t.config)
            )
        }));
    }
    if a.no_tuning {
        return Ok(Some(
            "tuning database not used (--no-tuning): the [tune] defaults".into(),
        ));
    }
    let path = match &a.tuning {
        Some(p) => p.clone(),
        None => {
            let p = PathBuf::from(db::DEFAULT_FILE);
            if !p.exists() {
                return Ok(None);
            }
            p
        }
    };
    let k = crate::kernel_for(file, source, &[], &targets[0], opts)?;
    if k.tuning.is_none() {
        return Ok(None);
    }
    if targets.len() > 1 {
        return Ok(Some(
            "several targets: the [tune] defaults (tune and build one target at a time)".into(),
        ));
    }
    let d = db::TuningDb::load(&path).map_err(Error::Usage)?;
    let tuned_for = match &a.tuned_for {
        Some(sz) => Some(
            crate::ir::tune::parse_assignments(sz)
                .map_err(|e| Error::Usage(format!("--tuned-for: {e}")))?,
        ),
        None => None,
    };
    let sel = db::select(&d, &path, source, &k, &targets[0], tuned_for.as_deref()).map_err(
        |e| match &a.tuned_for {
            Some(sz) => Error::Usage(format!("--tuned-for {sz}: {e}")),
            None => Error::Usage(e),
        },
    )?;
    for w in &sel.warnings {
        eprintln!("warning: {w}");
    }
    opts.tune = sel.config;
    Ok(Some(sel.note))
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The kernel file (kernel.toml format, see docs/kernel-format.md).
    kernel: PathBuf,
    /// Target(s) to compile for: an AMDGPU target ID (gfx90a, gfx942:sramecc+:xnack-, mi300x) or
    /// an NVIDIA processor (sm_90, h100), or a comma list of one vendor's (gfx90a,gfx942,gfx1100:
    /// compiled in parallel, packed into one offload bundle). Required.
    #[arg(long, value_name = "TARGET")]
    mcpu: String,
    /// What to write: loops, llvm, asm, obj, hsaco (AMD), ptx (NVIDIA), so (CPU), header (C),
    /// schedule (each stage's steps; the rule's where the file gives none). A comma list or repeated.
    /// Default: hsaco for AMD targets, ptx for NVIDIA ones.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KINDS")]
    emit: Vec<Kind>,
    /// Output path; `-` writes to stdout. With several outputs, the path's extension is replaced per
    /// kind (and target). Default: the kernel's name in the current folder, e.g. vadd.hsaco, or
    /// vadd.hipfb (an offload bundle) for several targets.
    #[arg(short, long, value_name = "PATH")]
    output: Option<String>,
    /// Code object version: 4, 5 or 6. Version 5 loads on ROCm 5.x and later; generic targets need 6.
    #[arg(long, default_value_t = 5, value_name = "N")]
    code_object_version: u32,
    /// Use 64-wide waves on gfx10 and later (default there is 32; gfx9 is always 64).
    #[arg(long, conflicts_with = "wave32")]
    wave64: bool,
    /// Use 32-wide waves (the default on gfx10 and later; refused on gfx9, which has only wave64).
    #[arg(long)]
    wave32: bool,
    /// Floating-point contraction: `fast` fuses `a * b + c` into FMAs (clang's HIP default),
    /// `off` keeps every operation separately rounded, exactly as the reference interpreter.
    #[arg(long, value_enum, default_value = "fast", value_name = "MODE")]
    fp_contract: FpContract,
    /// Print the wall time of each compiler phase to stderr.
    #[arg(long)]
    time_passes: bool,
    /// The tuning database to take [tune] values from (default: ./rocmc-tuning.toml if present).
    #[arg(long, value_name = "FILE")]
    tuning: Option<PathBuf>,
    /// Build the [tune] defaults, ignoring any tuning database.
    #[arg(long, conflicts_with = "tuning")]
    no_tuning: bool,
    /// Which size bucket's tuned entry to use when the database has several, e.g. M=1024,N=1024,K=1024.
    #[arg(long, value_name = "SIZES")]
    tuned_for: Option<String>,
    /// Set [tune] parameters by hand, e.g. BM=64,TM=4 (overrides the database).
    #[arg(long, value_name = "NAME=N,...", conflicts_with = "tuned_for")]
    tune: Option<String>,
    /// Do not print the summary of what was written.
    #[arg(short, long)]
    quiet: bool,
}

pub fn build(a: BuildArgs) -> Result<(), Error> {
    let source = read_kernel(&a.kernel)?;
    let file = a.kernel.display().to_string();
    let mut kinds = a.emit.clone();
    kinds.sort();
    kinds.dedup();
    let to_stdout = a.output.as_deref() == Some("-");
    let opts = Options {
        fp_contract: a.fp_contract == FpContract::Fast,
        mcpu: a.mcpu.clone(),
        code_object_version: a.code_object_version,
        wave_size: if a.wave64 {
            Some(64)
        } else if a.wave32 {
            Some(32)
        } else {
            None
        },
        tune: Vec::new(),
        emulate: None,
    };
    let targets = crate::targets(&opts)?;
    let mut opts = opts;
    let tuning_note = tuning_for_build(&a, &file, &source, &targets, &mut opts)?;
    let multi = targets.len() > 1;
    let kinds = kinds_for(&a, kinds, &targets, to_stdout)?;
    let emit = Emit {
        llvm: kinds.contains(&Kind::Llvm),
        asm: kinds.contains(&Kind::Asm) || kinds.contains(&Kind::Ptx),
        object: kinds.contains(&Kind::Obj),
        code_object: kinds.contains(&Kind::Hsaco) || kinds.contains(&Kind::So),
    };
    let arts = crate::compile_for(&file, &source, &targets, &opts, emit)?;
    let first = &arts[0];
    let outputs = render(&kinds, &arts, &source, multi);
    let t_write = std::time::Instant::now();
    let mut written = Vec::new();
    if to_stdout {
        let mut out = std::io::stdout().lock();
        for (_, _, b) in &outputs {
            out.write_all(b)
                .and_then(|_| out.flush())
                .map_err(io(Path::new("<stdout>")))?;
        }
    } else {
        // Compute every path first so a bad path fails before anything is written.
        let paths: Vec<PathBuf> = outputs
            .iter()
            .map(|(k, suffix, _)| {
                let ext = match (k, multi) {
                    (Kind::Hsaco, true) => "hipfb",
                    _ => k.ext(),
                };
                let ext = match suffix {
                    Some(t) => format!("{t}.{ext}"),
                    None => ext.to_string(),
                };
                match &a.output {
                    Some(p) if outputs.len() == 1 => PathBuf::from(p),
                    Some(p) => PathBuf::from(p).with_extension(ext),
                    None => PathBuf::from(format!("{}.{ext}", first.kernel.name)),
                }
            })
            .collect();
        for ((_, _, bytes), path) in outputs.iter().zip(&paths) {
            write_atomic(path, bytes)?;
            written.push(path.display().to_string());
        }
    }
    if a.time_passes {
        time_passes(&arts, t_write.elapsed());
    }
    if !a.quiet && !to_stdout {
        summary(&arts, &written, tuning_note.as_deref());
    }
    Ok(())
}

/// The output kinds of a build: the target's own module by default, and
/// refusals (naming the target) for kinds its module form has not.
fn kinds_for(
    a: &BuildArgs,
    mut kinds: Vec<Kind>,
    targets: &[crate::target::Target],
    to_stdout: bool,
) -> Result<Vec<Kind>, Error> {
    use crate::toolchain::Output;
    let tcs: Vec<_> = targets.iter().map(crate::toolchain::lookup).collect();
    let module = tcs[0].module_output();
    if tcs.iter().any(|t| t.module_output() != module) {
        return Err(Error::Usage(format!(
            "--mcpu {}: AMD, NVIDIA and CPU targets cannot share one build (their outputs differ: \
             code objects, PTX, shared objects); build once per vendor",
            a.mcpu
        )));
    }
    let tc = &tcs[0];
    let kind_of = |o: Output| match o {
        Output::Asm => Kind::Asm,
        Output::Object => Kind::Obj,
        Output::CodeObject => Kind::Hsaco,
        Output::Ptx => Kind::Ptx,
        Output::SharedObject => Kind::So,
    };
    if kinds.is_empty() {
        kinds.push(kind_of(module));
    }
    // Where the assembly is the module (PTX): one output, written as the module.
    if tc.asm_is_module() && kinds.contains(&Kind::Asm) {
        kinds.retain(|k| *k != Kind::Asm);
        kinds.push(kind_of(module));
        kinds.sort();
        kinds.dedup();
    }
    let refused = kinds.iter().find_map(|&k| {
        let out = match k {
            Kind::Asm => Output::Asm,
            Kind::Obj => Output::Object,
            Kind::Hsaco => Output::CodeObject,
            Kind::Ptx => Output::Ptx,
            Kind::So => Output::SharedObject,
            Kind::Loops | Kind::Llvm | Kind::Header | Kind::Schedule => return None,
        };
        tc.refuses(out)
    });
    if let Some(m) = refused {
        return Err(Error::Usage(m));
    }
    let multi = targets.len() > 1;
    if to_stdout
        && kinds.iter().any(|k| !k.is_text())
        && (kinds.len() > 1 || (multi && kinds != [Kind::Hsaco]))
    {
        return Err(Error::Usage("-o - writes binary output only for a single --emit kind; text kinds (loops, llvm, asm, ptx) can be combined".into()));
    }
    Ok(kinds)
}

/// Each output's kind, target suffix for file names (several targets) and bytes.
fn render(
    kinds: &[Kind],
    arts: &[crate::Artifact],
    source: &str,
    multi: bool,
) -> Vec<(Kind, Option<String>, Vec<u8>)> {
    let first = &arts[0];
    let header = |art: &crate::Artifact, comment: &str| {
        format!(
            "{comment} rocmc {} for {} ({})\n{}",
            env!("CARGO_PKG_VERSION"),
            art.target,
            crate::target_summary(&art.target),
            crate::launch_summary(&art.launch, &format!("{comment} "))
        )
    };
    // (kind, target suffix for file names, bytes)
    let mut outputs: Vec<(Kind, Option<String>, Vec<u8>)> = Vec::new();
    for k in kinds {
        match k {
            Kind::Loops => outputs.push((*k, None, first.loops.clone().into_bytes())),
            Kind::Schedule => outputs.push((
                *k,
                None,
                crate::explain::schedules(&first.kernel, source).into_bytes(),
            )),
            // One header for every target: the launch document is the same.
            Kind::Header => outputs.push((
                *k,
                None,
                crate::header::c_header(&first.kernel.name, &first.target, &first.launch)
                    .into_bytes(),
            )),
            Kind::Hsaco if multi => outputs.push((*k, None, crate::bundle(arts))),
            _ => {
                for art in arts {
                    let bytes = match k {
                        Kind::Llvm => format!("{}{}", header(art, ";"), art.llvm_ir).into_bytes(),
                        Kind::Asm => format!(
                            "{}{}",
                            header(art, ";"),
                            art.asm.clone().unwrap_or_default()
                        )
                        .into_bytes(),
                        Kind::Ptx => {
                            let ptx = art.asm.clone().unwrap_or_default();
                            // LLVM ends the PTX without a newline; text files end with one.
                            let nl = if ptx.ends_with('\n') { "" } else { "\n" };
                            format!("{}{ptx}{nl}", header(art, "//")).into_bytes()
                        }
                        Kind::Obj => art.object.clone().unwrap_or_default(),
                        _ => art.code_object.clone().unwrap_or_default(),
                    };
                    let suffix = multi.then(|| art.target.to_string().replace(':', "_"));
                    outputs.push((*k, suffix, bytes));
                }
            }
        }
    }
    outputs
}

/// `--time-passes`: each target's phases, with the write.
fn time_passes(arts: &[crate::Artifact], write: std::time::Duration) {
    for art in arts {
        let mut timings = art.timings.clone();
        timings.push(("write", write));
        let total: f64 = timings.iter().map(|(_, d)| d.as_secs_f64()).sum();
        eprintln!("phase ({:<16})     time (ms)", art.target.to_string());
        for (name, d) in &timings {
            eprintln!("{name:<26} {:>9.3}", d.as_secs_f64() * 1e3);
        }
        eprintln!("{:<26} {:>9.3}", "total", total * 1e3);
    }
}

/// What a build wrote, for the user: files, targets, tuning, launch
/// geometry, matrix instructions.
fn summary(arts: &[crate::Artifact], written: &[String], tuning_note: Option<&str>) {
    let first = &arts[0];
    let targets: Vec<String> = arts
        .iter()
        .map(|a| format!("{}, {}", a.target, crate::target_summary(&a.target)))
        .collect();
    eprintln!("wrote {} ({})", written.join(", "), targets.join("; "));
    for w in crate::explain::one_thread_warnings(&first.kernel) {
        eprintln!("warning: {w}");
    }
    if let Some(note) = tuning_note {
        eprintln!("  {note}");
    }
    eprint!("{}", crate::launch_summary(&first.launch, "  "));
    for art in arts {
        let used = crate::ir::lower::matrix::uses_matrix(&art.program);
        if !used.is_empty() {
            let names: Vec<String> = used
                .iter()
                .map(|i| {
                    let regs = if i.warpgroup() && !i.a_in_shared() {
                        ", A in registers"
                    } else {
                        ""
                    };
                    format!("{} ({}x{}x{}, wave{}{regs})", i.name, i.m, i.n, i.k, i.wave)
                })
                .collect();
            eprintln!(
                "  matrix instructions on {}: {}",
                art.target,
                names.join(", ")
            );
        }
    }
}

/// Writes through a temporary file in the same folder, then renames, so a
/// failure never leaves a partial output behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    // A device or a pipe (`-o /dev/null`, `-o /dev/stdout`, a FIFO) is
    // written in place: renaming over it would replace, as root, the
    // system's /dev/null with a regular file.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(io(path));
    }
    // A symbolic link is written through: renaming over the link itself
    // would cut it from its file (and as root, `-o /dev/stdout` redirected
    // to a file would replace the system's /dev/stdout link).
    let resolved = std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.file_type().is_symlink())
        .then(|| std::fs::canonicalize(path).ok())
        .flatten();
    let path = resolved.as_deref().unwrap_or(path);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // The temporary file's name means nothing to the user: a failure to
    // create it is reported against the folder.
    let mut tmp = tempfile::Builder::new()
        .prefix(".rocmc-")
        .tempfile_in(dir)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Io {
                path: path.display().to_string(),
                source: std::io::Error::new(
                    e.kind(),
                    format!(
                        "the folder {} does not exist (rocmc does not create folders)",
                        dir.display()
                    ),
                ),
            },
            _ => Error::Io {
                path: dir.display().to_string(),
                source: std::io::Error::from(e.kind()),
            },
        })?;
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
