//! `rocmc tune`: search a kernel's [tune] parameters on a device.

use super::build::rocmc_ir_kernel;
use super::run::parse_size;
use super::{read_kernel, FpContract};
use crate::{Error, Options};
use clap::ValueEnum;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TuneArgs {
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
    #[arg(long, value_name = "FILE", default_value = crate::tune::db::DEFAULT_FILE)]
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
fn on_event(bar: &indicatif::ProgressBar, e: crate::tune::Event) {
    use crate::tune::Event;
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
                bar.set_message(format!("best {ms:.4} ms: {}", crate::ir::tune::describe(c)));
            }
        }
    }
}

pub fn tune(a: TuneArgs) -> Result<(), Error> {
    use crate::tune::db;
    let source = read_kernel(&a.kernel)?;
    let file = a.kernel.display().to_string();
    let k = rocmc_ir_kernel(&file, &source)?;
    let names: Vec<String> = k.sizes.iter().map(|s| s.name.clone()).collect();
    let hash = db::kernel_hash(&source).map_err(Error::Usage)?;
    let bar = progress_bar();
    let (report, sizes, seed) = if let Some(dir) = &a.import {
        let (plan, report) = crate::tune::plan::import(dir).map_err(Error::Usage)?;
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
        let sizes = crate::run::size_values(&k, &given)?;
        let mut opts = Options::new(a.target.as_deref().unwrap_or("x86-64"));
        opts.fp_contract = a.fp_contract == FpContract::Fast;
        let mut req = crate::tune::TuneRequest::new(&file, &source, sizes.clone(), opts);
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
            // The flag here is --target; the compiler's message names --mcpu.
            let target = crate::targets(&req.opts)
                .map_err(|e| match e {
                    Error::Target(t) => Error::Usage(format!("--target: {t}")),
                    other => other,
                })?
                .remove(0);
            let plan = crate::tune::export(&req, &target, dir, &mut |e| on_event(&bar, e))?;
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
            let mut dev =
                crate::runtime::open(&devices[0]).map_err(|e| Error::Runtime(e.to_string()))?;
            crate::tune::tune(&req, dev.as_mut(), &mut |e| on_event(&bar, e))?
        } else {
            crate::tune::tune_on(&req, crate::tune::Devices::Named(devices), &mut |e| {
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
    print!("{}", crate::tune::table(&report, a.show));
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
            crate::tune::Outcome::Timed(ms) => Some(ms),
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
