//! The `rocmc` command line: a thin layer over the `rocmc` library.

use clap::{Parser, Subcommand, ValueEnum};
use rocmc::{Emit, Error, Options};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rocmc", version, about = "Ahead-of-time GPU kernel compiler for AMD and NVIDIA GPUs", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a kernel file into a code object (.hsaco) and other forms.
    Build(BuildArgs),
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
    },
}

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
        }
    }
    fn is_text(self) -> bool {
        matches!(self, Kind::Loops | Kind::Llvm | Kind::Asm | Kind::Ptx)
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// The kernel file, or a code object / bundle built by rocmc (.hsaco, .hipfb: GPU only, no --check).
    kernel: PathBuf,
    /// Where to run: `cpu` (the scheduled kernel compiled for this machine by LLVM, blocks and
    /// threads as loops), an AMD GPU: `amdgpu`, `amdgpu:N`, `amdgpu://GPU-<uuid>` (the HIP
    /// runtime is loaded from ROCMC_HIP_LIBRARY or libamdhip64.so.7/.6/.5), an NVIDIA GPU:
    /// `cuda:N` (through the CUDA driver, libcuda.so.1), or a worker's
    /// device: `remote://HOST:PORT/DEVICE` (DEVICE: cpu, cuda:N, amdgpu:N; secret from
    /// ROCMC_WORKER_SECRET, see docs/remote.md).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// A size argument, `name=value`; every size of the kernel must be given.
    #[arg(long = "size", value_name = "NAME=N", value_parser = parse_size)]
    sizes: Vec<(String, i64)>,
    /// A scalar parameter, `name=value` (default: a seeded random value in [0.5, 1.5)).
    #[arg(long = "param", value_name = "NAME=X", value_parser = parse_param)]
    params: Vec<(String, f64)>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Floating-point contraction in the compiled kernel (see `rocmc build --help`).
    #[arg(long, value_enum, default_value = "fast", value_name = "MODE")]
    fp_contract: FpContract,
    /// On the CPU: run the matrix instructions of `mma` steps as this GPU
    /// processor does (gfx942, gfx1100, sm_90), through its lane layouts.
    #[arg(long, value_name = "PROCESSOR")]
    emulate: Option<String>,
    /// On a GPU: compare the results with the reference interpreter (always done on the CPU).
    #[arg(long)]
    check: bool,
    /// On a GPU: time N repetitions with HIP events and report the median, GB/s and GFLOP/s.
    #[arg(long, value_name = "N", default_value_t = 0)]
    bench: usize,
}

fn parse_size(s: &str) -> Result<(String, i64), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write NAME=N, e.g. n=1024"))?;
    let v = v
        .trim()
        .replace('_', "")
        .parse::<i64>()
        .map_err(|_| format!("`{s}`: {v} is not an integer"))?;
    Ok((n.trim().to_string(), v))
}

fn parse_param(s: &str) -> Result<(String, f64), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write NAME=X, e.g. alpha=2.5"))?;
    let v = v
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("`{s}`: {v} is not a number"))?;
    Ok((n.trim().to_string(), v))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FpContract {
    Fast,
    Off,
}

#[derive(clap::Args)]
struct TuneArgs {
    /// The kernel file; it must have a [tune] section.
    kernel: PathBuf,
    /// Where to measure: cpu, cuda:N, amdgpu:N, or remote://HOST:PORT/DEVICE (see docs/remote.md).
    /// Repeat to spread the measuring over several devices of one target.
    #[arg(long = "device", value_name = "DEVICE")]
    devices: Vec<String>,
    /// A size to tune for, `name=value`; every size of the kernel must be given.
    #[arg(long = "size", value_name = "NAME=N", value_parser = parse_size)]
    sizes: Vec<(String, i64)>,
    /// Try at most N candidates (all when the space is smaller).
    #[arg(long, value_name = "N", default_value_t = 64)]
    budget: usize,
    /// How to search a space larger than the budget: generations bred from the fastest so far,
    /// or one uniform random sample.
    #[arg(long, value_enum, default_value = "evolve")]
    strategy: StrategyArg,
    /// Stop measuring new candidates after S seconds.
    #[arg(long = "time", value_name = "S")]
    time: Option<f64>,
    /// Seed of the search and of the inputs (the search is deterministic for a seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed launches per kernel and candidate (median taken), over three rotating input sets.
    #[arg(long, default_value_t = 30)]
    reps: u32,
    /// Parallel compilations (default: the machine's cores).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Refuse candidates below this occupancy: AMD waves per SIMD (as LLVM states it), NVIDIA warps
    /// per scheduler (from ptxas's registers and shared memory).
    #[arg(long, value_name = "WAVES")]
    min_occupancy: Option<u32>,
    /// Offline: compile the candidates for --target into a plan folder for
    /// `rocmc-worker measure DIR` on a GPU host this machine cannot reach.
    #[arg(long, value_name = "DIR", requires = "target", conflicts_with_all = ["devices", "import"])]
    export: Option<PathBuf>,
    /// The target an exported plan is compiled for (the GPU host's, e.g. sm_90, gfx942:sramecc+:xnack-).
    #[arg(long, value_name = "TARGET", requires = "export")]
    target: Option<String>,
    /// Offline: read a plan folder measured by `rocmc-worker measure` and record its winner.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["devices", "sizes"])]
    import: Option<PathBuf>,
    /// The tuning database to update.
    #[arg(long, value_name = "FILE", default_value = rocmc::tune::db::DEFAULT_FILE)]
    db: PathBuf,
    /// Print the results only; do not write the database.
    #[arg(long)]
    dry_run: bool,
    /// Rows of the results table.
    #[arg(long, default_value_t = 10)]
    show: usize,
    /// Floating-point contraction in the compiled kernels (see `rocmc build --help`).
    #[arg(long, value_enum, default_value = "fast", value_name = "MODE")]
    fp_contract: FpContract,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    Evolve,
    Sample,
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Progress events onto a bar, with the best so far.
fn on_event(bar: &indicatif::ProgressBar, e: rocmc::tune::Event) {
    use rocmc::tune::Event;
    match e {
        Event::Compiling { round, n } => {
            bar.set_prefix(if round > 1 {
                format!("compiling {round}")
            } else {
                "compiling".into()
            });
            bar.set_length(n as u64);
            bar.set_position(0);
        }
        Event::Compiled => bar.inc(1),
        Event::Measuring(n) => {
            bar.set_prefix("measuring");
            bar.set_length(n as u64);
            bar.set_position(0);
        }
        Event::Measured(_, best) => {
            bar.inc(1);
            if let Some((c, ms)) = best {
                bar.set_message(format!("best {ms:.4} ms: {}", rocmc::ir::tune::describe(c)));
            }
        }
    }
}

fn tune(a: TuneArgs) -> Result<(), Error> {
    use rocmc::tune::db;
    let source = std::fs::read_to_string(&a.kernel).map_err(io(&a.kernel))?;
    let file = a.kernel.display().to_string();
    let k = rocmc_ir_kernel(&file, &source)?;
    let names: Vec<String> = k.sizes.iter().map(|s| s.name.clone()).collect();
    let hash = db::kernel_hash(&source).map_err(Error::Usage)?;
    let bar = progress_bar();
    let (report, sizes, seed) = if let Some(dir) = &a.import {
        let (plan, report) = rocmc::tune::plan::import(dir).map_err(Error::Usage)?;
        if plan.kernel_hash != hash {
            return Err(Error::Usage(format!(
                "{}: the plan was exported from another version of {file} (content hashes differ); export it again",
                dir.display()
            )));
        }
        println!(
            "imported {}: {} candidates measured on {}",
            dir.display(),
            report.candidates.len(),
            report.device_text()
        );
        (report, plan.sizes, plan.seed)
    } else {
        let given: std::collections::HashMap<String, i64> = a.sizes.iter().cloned().collect();
        let sizes = rocmc::run::size_values(&k, &given)?;
        let mut opts = Options::new(a.target.as_deref().unwrap_or("x86-64"));
        opts.fp_contract = a.fp_contract == FpContract::Fast;
        let mut req = rocmc::tune::TuneRequest::new(&file, &source, sizes.clone(), opts);
        req.budget = a.budget;
        req.time_limit = a.time.map(std::time::Duration::from_secs_f64);
        req.seed = a.seed;
        req.reps = a.reps;
        if let Some(j) = a.jobs {
            req.jobs = j;
        }
        req.evolve = a.strategy == StrategyArg::Evolve;
        req.min_occupancy = a.min_occupancy;
        if let Some(dir) = &a.export {
            let target = a.target.as_deref().unwrap_or_default();
            let plan = rocmc::tune::export(&req, target, dir, &mut |e| on_event(&bar, e))?;
            bar.finish_and_clear();
            let refused = plan
                .candidates
                .iter()
                .filter(|c| c.refused.is_some())
                .count();
            println!(
                "wrote a plan of {} candidates ({} refused by the compiler) for {} to {} in {:.1} s",
                plan.candidates.len(),
                refused,
                plan.target,
                dir.display(),
                plan.compile_seconds
            );
            println!(
                "next: copy it to the GPU host, run `rocmc-worker measure {} --device DEVICE` there, copy it back, then `rocmc tune {file} --import {}`",
                dir.display(),
                dir.display()
            );
            return Ok(());
        }
        let devices = if a.devices.is_empty() {
            vec!["cpu".to_string()]
        } else {
            a.devices.clone()
        };
        eprintln!(
            "tuning {} on {} at {}",
            k.name,
            devices.join(", "),
            db::show_map(&names.iter().cloned().zip(sizes.iter().copied()).collect())
        );
        let report = if devices.len() == 1 {
            let mut dev = rocmc::remote::device::open(&devices[0])
                .map_err(|e| Error::Runtime(e.to_string()))?;
            rocmc::tune::tune(&req, dev.as_mut(), &mut |e| on_event(&bar, e))?
        } else {
            rocmc::tune::tune_on(&req, rocmc::tune::Devices::Named(devices), &mut |e| {
                on_event(&bar, e)
            })?
        };
        (report, sizes, a.seed)
    };
    bar.finish_and_clear();
    println!(
        "{} on {}, {}: {} configurations, {} meet the constraints, {} tried ({}); checked against the interpreter at {}; {:.1} s",
        report.kernel,
        report.device_text(),
        report.target,
        report.space,
        report.valid,
        report.candidates.len(),
        report.strategy.describe(),
        db::show_map(&names.iter().cloned().zip(report.check_sizes.iter().copied()).collect()),
        report.elapsed.as_secs_f64()
    );
    print!("{}", rocmc::tune::table(&report, a.show));
    let Some(entry) = db::entry_from(&report, &names, &sizes, &hash, seed) else {
        return Err(Error::Runtime(
            "no candidate ran correctly: nothing to record".into(),
        ));
    };
    let default_ms = report
        .candidates
        .iter()
        .find(|c| k.tuning.as_ref().is_some_and(|t| t.config == c.config))
        .and_then(|c| match c.outcome {
            rocmc::tune::Outcome::Timed(ms) => Some(ms),
            _ => None,
        });
    if let Some(def) = default_ms {
        println!(
            "the defaults take {def:.4} ms; the best {:.4} ms ({:.2}x)",
            entry.median_ms,
            def / entry.median_ms
        );
    }
    if a.dry_run {
        return Ok(());
    }
    let mut d = db::TuningDb::load(&a.db).map_err(Error::Usage)?;
    d.insert(entry);
    d.save(&a.db).map_err(Error::Usage)?;
    println!(
        "recorded in {} (kernel {}, target {}, bucket {})",
        a.db.display(),
        k.name,
        report.target,
        db::show_map(&db::bucket(&names, &sizes))
    );
    Ok(())
}

fn rocmc_ir_kernel(file: &str, source: &str) -> Result<rocmc::ir::Kernel, Error> {
    Ok(rocmc::ir::front::parse_kernel(file, source)?)
}

/// Chooses the [tune] values a build uses: `--tune` by hand, else the
/// database's entry for this kernel and target (stale ones reported and
/// skipped), else the defaults. Returns a line for the summary.
fn tuning_for_build(
    a: &BuildArgs,
    file: &str,
    source: &str,
    targets: &[rocmc::codegen::Target],
    opts: &mut Options,
) -> Result<Option<String>, Error> {
    use rocmc::tune::db;
    if let Some(t) = &a.tune {
        opts.tune = rocmc::ir::tune::parse_assignments(t)
            .map_err(|e| Error::Usage(format!("--tune: {e}")))?;
        let k = rocmc::ir::front::parse_kernel_with(file, source, &opts.tune)?;
        return Ok(k.tuning.map(|t| {
            format!(
                "tune values given: {}",
                rocmc::ir::tune::describe(&t.config)
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
    let k = rocmc::ir::front::parse_kernel(file, source)?;
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
            rocmc::ir::tune::parse_assignments(sz)
                .map_err(|e| Error::Usage(format!("--tuned-for: {e}")))?,
        ),
        None => None,
    };
    let sel = db::select(
        &d,
        &path,
        source,
        &k,
        &targets[0].to_string(),
        tuned_for.as_deref(),
    )
    .map_err(|e| match &a.tuned_for {
        Some(sz) => Error::Usage(format!("--tuned-for {sz}: {e}")),
        None => Error::Usage(e),
    })?;
    for w in &sel.warnings {
        eprintln!("warning: {w}");
    }
    opts.tune = sel.config;
    Ok(Some(sel.note))
}

#[derive(clap::Args)]
struct BuildArgs {
    /// The kernel file (kernel.toml format, see docs/kernel-format.md).
    kernel: PathBuf,
    /// Target(s) to compile for: an AMDGPU target ID (gfx90a, gfx942:sramecc+:xnack-, mi300x) or
    /// an NVIDIA processor (sm_90, h100), or a comma list of one vendor's (gfx90a,gfx942,gfx1100:
    /// compiled in parallel, packed into one offload bundle). Required.
    #[arg(long, value_name = "TARGET")]
    mcpu: String,
    /// What to write: loops, llvm, asm, obj, hsaco (AMD), ptx (NVIDIA). A comma list or repeated.
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Build(a) => build(a),
        Command::Run(a) => run(a),
        Command::Tune(a) => tune(a),
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
    let targets = rocmc::targets(&opts)?;
    let mut opts = opts;
    let tuning_note = tuning_for_build(&a, &file, &source, &targets, &mut opts)?;
    let multi = targets.len() > 1;
    let vendor = targets[0].vendor();
    let nvidia = vendor == rocmc::codegen::Vendor::Nvidia;
    let cpu = vendor == rocmc::codegen::Vendor::Cpu;
    if targets.iter().any(|t| t.vendor() != vendor) {
        return Err(Error::Usage(format!(
            "--mcpu {}: AMD, NVIDIA and CPU targets cannot share one build (their outputs differ: \
             code objects, PTX, shared objects); build once per vendor",
            a.mcpu
        )));
    }
    if kinds.is_empty() {
        kinds.push(if nvidia {
            Kind::Ptx
        } else if cpu {
            Kind::So
        } else {
            Kind::Hsaco
        });
    }
    if let Some(k) = kinds.iter().find(|k| {
        if cpu {
            matches!(k, Kind::Hsaco | Kind::Ptx)
        } else {
            **k == Kind::So
        }
    }) {
        return Err(Error::Usage(if cpu {
            format!(
                "--emit {}: {} is the CPU target; rocmc writes a shared object for it (--emit so)",
                k.ext(),
                targets[0]
            )
        } else {
            format!(
                "--emit so: {} is a GPU target; shared objects are for the CPU target (--mcpu x86-64)",
                targets[0]
            )
        }));
    }
    // For NVIDIA the assembly is the PTX: one output, written as .ptx.
    if nvidia && kinds.contains(&Kind::Asm) {
        kinds.retain(|k| *k != Kind::Asm);
        kinds.push(Kind::Ptx);
        kinds.sort();
        kinds.dedup();
    }
    if let Some(k) = kinds.iter().find(|k| {
        if nvidia {
            matches!(k, Kind::Obj | Kind::Hsaco)
        } else {
            **k == Kind::Ptx && !cpu
        }
    }) {
        return Err(Error::Usage(if nvidia {
            format!(
                "--emit {}: {} is an NVIDIA target; rocmc writes PTX for it (--emit ptx), which \
                 the CUDA driver compiles when it loads it",
                k.ext(),
                targets[0]
            )
        } else {
            format!(
                "--emit ptx: {} is an AMD target; PTX is for NVIDIA targets (sm_NN)",
                targets[0]
            )
        }));
    }
    if to_stdout
        && kinds.iter().any(|k| !k.is_text())
        && (kinds.len() > 1 || (multi && kinds != [Kind::Hsaco]))
    {
        return Err(Error::Usage("-o - writes binary output only for a single --emit kind; text kinds (loops, llvm, asm, ptx) can be combined".into()));
    }
    let emit = Emit {
        llvm: kinds.contains(&Kind::Llvm),
        asm: kinds.contains(&Kind::Asm) || kinds.contains(&Kind::Ptx),
        object: kinds.contains(&Kind::Obj),
        code_object: kinds.contains(&Kind::Hsaco) || kinds.contains(&Kind::So),
    };
    let arts = rocmc::compile_for(&file, &source, &targets, &opts, emit)?;
    let first = &arts[0];
    let header = |art: &rocmc::Artifact, comment: &str| {
        format!(
            "{comment} rocmc {} for {} ({})\n{}",
            env!("CARGO_PKG_VERSION"),
            art.target,
            rocmc::target_summary(&art.target),
            rocmc::launch_summary(&art.launch, &format!("{comment} "))
        )
    };
    // (kind, target suffix for file names, bytes)
    let mut outputs: Vec<(Kind, Option<String>, Vec<u8>)> = Vec::new();
    for k in &kinds {
        match k {
            Kind::Loops => outputs.push((*k, None, first.loops.clone().into_bytes())),
            Kind::Hsaco if multi => outputs.push((*k, None, rocmc::bundle(&arts))),
            _ => {
                for art in &arts {
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
        for art in &arts {
            let mut timings = art.timings.clone();
            timings.push(("write", t_write.elapsed()));
            let total: f64 = timings.iter().map(|(_, d)| d.as_secs_f64()).sum();
            eprintln!("phase ({:<16})     time (ms)", art.target.to_string());
            for (name, d) in &timings {
                eprintln!("{name:<26} {:>9.3}", d.as_secs_f64() * 1e3);
            }
            eprintln!("{:<26} {:>9.3}", "total", total * 1e3);
        }
    }
    if !a.quiet && !to_stdout {
        let targets: Vec<String> = arts
            .iter()
            .map(|a| format!("{}, {}", a.target, rocmc::target_summary(&a.target)))
            .collect();
        eprintln!("wrote {} ({})", written.join(", "), targets.join("; "));
        if let Some(note) = &tuning_note {
            eprintln!("  {note}");
        }
        eprint!("{}", rocmc::launch_summary(&first.launch, "  "));
        for art in &arts {
            let used = rocmc::ir::lower::matrix::uses_matrix(&art.program);
            if !used.is_empty() {
                let names: Vec<String> = used
                    .iter()
                    .map(|i| format!("{} ({}x{}x{}, wave{})", i.name, i.m, i.n, i.k, i.wave))
                    .collect();
                eprintln!(
                    "  matrix instructions on {}: {}",
                    art.target,
                    names.join(", ")
                );
            }
        }
    }
    Ok(())
}

fn run(a: RunArgs) -> Result<(), Error> {
    let ext = a
        .kernel
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    if matches!(ext, "hsaco" | "hipfb" | "co") {
        return run_binary(&a);
    }
    let source = std::fs::read_to_string(&a.kernel).map_err(io(&a.kernel))?;
    let front = rocmc::frontend(&a.kernel.display().to_string(), &source)?;
    let given: std::collections::HashMap<String, i64> = a.sizes.iter().cloned().collect();
    let sizes = rocmc::run::size_values(&front.kernel, &given)?;
    let params: std::collections::HashMap<String, f64> = a.params.iter().cloned().collect();
    let shown: Vec<String> = front
        .kernel
        .sizes
        .iter()
        .zip(&sizes)
        .map(|(s, v)| format!("{}={v}", s.name))
        .collect();
    let t0 = std::time::Instant::now();
    let (where_, report) = if a.device == "cpu" {
        let mut opts = Options::new("cpu");
        opts.emulate = a.emulate.clone();
        let cpu = rocmc::targets(&opts)?.remove(0);
        let front = front.for_target(&cpu, &opts)?;
        (
            "cpu".to_string(),
            rocmc::run::run_cpu(
                &front,
                &sizes,
                &params,
                a.seed,
                a.fp_contract == FpContract::Fast,
            )?,
        )
    } else {
        let mut opts = Options::new("gfx900");
        opts.fp_contract = a.fp_contract == FpContract::Fast;
        let what = rocmc::run::GpuRun {
            check: a.check,
            bench: a.bench,
        };
        let r = if a.device.starts_with("remote://") {
            rocmc::run::run_remote(&front, &a.device, &sizes, &params, a.seed, what, &opts)?
        } else if a.device.starts_with("cuda") {
            rocmc::run::run_local(&front, &a.device, &sizes, &params, a.seed, what, &opts)?
        } else {
            rocmc::runtime_hip::DeviceSelector::parse(&a.device)
                .map_err(|e| Error::Usage(e.to_string()))?;
            rocmc::run::run_gpu(&front, &a.device, &sizes, &params, a.seed, what, &opts)?
        };
        for (name, ms) in &r.kernel_ms {
            println!("{name}: median {ms:.4} ms over {} runs", a.bench);
        }
        if !r.kernel_ms.is_empty() {
            let total: f64 = r.kernel_ms.iter().map(|(_, m)| m).sum();
            println!(
                "total {total:.4} ms: {:.1} GB/s, {:.1} GFLOP/s",
                r.bytes_moved as f64 / total / 1e6,
                r.flops as f64 / total / 1e6
            );
        }
        (r.device.clone(), r.comparisons)
    };
    println!(
        "{} on {where_} ({}), seed {}, {:.0} ms",
        front.kernel.name,
        shown.join(" "),
        a.seed,
        t0.elapsed().as_secs_f64() * 1e3
    );
    if report.is_empty() {
        return Ok(());
    }
    println!(
        "{:<12} {:>6} {:>10} {:>12} {:>12} {:>10}  result",
        "tensor", "dtype", "elements", "max |error|", "max error*", "tolerance"
    );
    for c in &report {
        println!(
            "{:<12} {:>6} {:>10} {:>12.3e} {:>12.3e} {:>10.0e}  {}",
            c.tensor,
            c.dtype.to_string(),
            c.elements,
            c.max_abs_error,
            c.max_error,
            c.tolerance,
            if c.ok() { "ok" } else { "MISMATCH" }
        );
    }
    println!("* |got - want| / (1 + |want|), against the reference interpreter");
    if report.iter().all(|c| c.ok()) {
        Ok(())
    } else {
        Err(Error::Mismatch(
            "results differ from the reference interpreter".into(),
        ))
    }
}

/// `rocmc run FILE.hsaco|FILE.hipfb --device amdgpu...`: a compiled kernel, without its source.
fn run_binary(a: &RunArgs) -> Result<(), Error> {
    if a.device == "cpu" {
        return Err(Error::Usage(format!(
            "{}: a code object runs on a GPU only; to run on the CPU, give the kernel file",
            a.kernel.display()
        )));
    }
    if a.check {
        return Err(Error::Usage("--check needs the kernel file: the reference interpreter runs kernel source, not code objects".into()));
    }
    rocmc::runtime_hip::DeviceSelector::parse(&a.device)
        .map_err(|e| Error::Usage(e.to_string()))?;
    let bytes = std::fs::read(&a.kernel).map_err(io(&a.kernel))?;
    let sizes: std::collections::HashMap<String, i64> = a.sizes.iter().cloned().collect();
    let params: std::collections::HashMap<String, f64> = a.params.iter().cloned().collect();
    let r = rocmc::run::run_code_object(&bytes, &a.device, &sizes, &params, a.seed, a.bench)?;
    println!("{} ran on {}", a.kernel.display(), r.device);
    for (name, ms) in &r.kernel_ms {
        println!("{name}: median {ms:.4} ms over {} runs", a.bench);
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
    use rocmc::codegen::target;
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:<24} {:<17} {:>8}  {:<15} {}\n",
        "processor", "family", "waves", "LDS/WG", "features", "aliases"
    ));
    for p in target::canonical_processors() {
        let Some(info) = target::processor_info(&p) else {
            continue;
        };
        let hw = rocmc::linker::hw::hardware(&p);
        let waves = if info.wave32 {
            "32 (default), 64"
        } else {
            "64"
        };
        let feats: Vec<&str> = [
            ("xnack", info.supports_xnack),
            ("sramecc", info.supports_sramecc),
        ]
        .iter()
        .filter(|f| f.1)
        .map(|f| f.0)
        .collect();
        let extra = if p.contains("generic") {
            " [code object v6]"
        } else {
            ""
        };
        out.push_str(&format!(
            "{p:<16} {:<24} {waves:<17} {:>5} KiB  {:<15} {}{extra}\n",
            hw.family,
            hw.lds_per_workgroup / 1024,
            if feats.is_empty() {
                "-".to_string()
            } else {
                feats.join(", ")
            },
            target::aliases_of(&p).join(", ")
        ));
    }
    out.push_str("\nNVIDIA (PTX; the CUDA driver compiles it when it loads the module)\n");
    out.push_str(&format!(
        "{:<16} {:<24} {:<17} {:>8}  {:<15} {}\n",
        "processor", "compute capability", "warps", "smem/blk", "PTX ISA", "aliases"
    ));
    for p in target::nvptx::PROCESSORS {
        let t = rocmc::codegen::NvidiaTarget::parse(p.name).expect("a processor of the table");
        let (a, b) = t.compute_capability();
        let runs = match p.name.chars().last() {
            Some('a') => format!("{a}.{b} only"),
            Some('f') => format!("{a}.{b}+ ({a}.x)"),
            _ => format!("{a}.{b} and later"),
        };
        out.push_str(&format!(
            "{:<16} {runs:<24} {:<17} {:>5} KiB  {:<15} {}\n",
            p.name,
            "32",
            t.max_shared_per_block() / 1024,
            t.ptx_text(),
            target::nvptx::aliases_of(p.name).join(", ")
        ));
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io(Path::new("<stdout>")))
}

fn inspect(file: &Path, json: bool) -> Result<(), Error> {
    use rocmc::linker::{bundle, codeobject};
    let bytes = std::fs::read(file).map_err(io(file))?;
    let bad = |e: codeobject::ReadError| Error::Usage(format!("{}: {e}", file.display()));
    // (entry name, code object) pairs: one for a code object, one per device entry for a bundle.
    let mut objects: Vec<(Option<String>, codeobject::CodeObject)> = Vec::new();
    if bundle::is_bundle(&bytes) {
        for e in bundle::read(&bytes).map_err(bad)? {
            if e.range.is_empty() {
                continue;
            }
            let co = codeobject::read(&bytes[e.range.clone()]).map_err(|err| {
                Error::Usage(format!("{}: bundle entry {}: {err}", file.display(), e.id))
            })?;
            objects.push((Some(e.id), co));
        }
    } else {
        objects.push((None, codeobject::read(&bytes).map_err(bad)?));
    }
    let mut out = String::new();
    if json {
        let list: Vec<serde_json::Value> = objects
            .iter()
            .map(|(entry, co)| inspect_json(entry.as_deref(), co))
            .collect();
        let v = if bundle::is_bundle(&bytes) {
            serde_json::json!({ "bundle": list })
        } else {
            list.into_iter().next().unwrap_or_default()
        };
        out = serde_json::to_string_pretty(&v).unwrap_or_default();
        out.push('\n');
    } else {
        for (entry, co) in &objects {
            if let Some(e) = entry {
                out.push_str(&format!("bundle entry {e}\n"));
            }
            out.push_str(&inspect_text(file, co));
        }
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io(Path::new("<stdout>")))
}

fn inspect_json(
    entry: Option<&str>,
    co: &rocmc::linker::codeobject::CodeObject,
) -> serde_json::Value {
    let mut v = serde_json::to_value(co).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("target_id".into(), co.target_id().into());
        if let Some(e) = entry {
            m.insert("bundle_entry".into(), e.into());
        }
        if let Some(l) = &co.launch {
            m.insert(
                "launch".into(),
                serde_json::from_str(&l.to_json()).unwrap_or_default(),
            );
        }
        if let Some(ks) = m.get_mut("kernels").and_then(|k| k.as_array_mut()) {
            for (kv, k) in ks.iter_mut().zip(&co.kernels) {
                let (w, why) = rocmc::linker::hw::kernel_occupancy(co.target_id(), k);
                kv["occupancy_waves_per_simd"] = w.into();
                kv["occupancy_limited_by"] = why.into();
            }
        }
    }
    v
}

fn inspect_text(file: &Path, co: &rocmc::linker::codeobject::CodeObject) -> String {
    let mut out = format!(
        "{}: target {} (code object v{}, ELF ABI version {}, e_flags {:#x})\n",
        file.display(),
        co.target_id(),
        co.code_object_version,
        co.abi_version,
        co.e_flags
    );
    for k in &co.kernels {
        let (w, why) = rocmc::linker::hw::kernel_occupancy(co.target_id(), k);
        out.push_str(&format!(
            "kernel {}: kernarg {} B, LDS {} B, scratch {} B, VGPR {}, SGPR {}{}, spills {} VGPR / {} SGPR, wave{}, max work-group {}, occupancy {} waves/SIMD ({})\n",
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
            k.max_flat_workgroup_size,
            w,
            why
        ));
        for a in &k.args {
            out.push_str(&format!(
                "  arg {:<22} offset {:>3} size {:>2} {}{}\n",
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
    out
}
