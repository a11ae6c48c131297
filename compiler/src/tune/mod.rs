//! `rocmc tune`: the compiler's half of autotuning. The search, the
//! measuring, offline plans and the tuning database live in
//! [`rocmc_tuner`] (no LLVM there, so `rocmc-worker` can measure a plan
//! where only the GPU is); this module compiles each candidate for them.

pub use rocmc_tuner::{
    candidates, check_sizes, db, plan, table, Candidate, Devices, Event, Outcome, Search, Strategy,
    TuneReport,
};

use crate::{Error, Options};
use rocmc_ir::tune::Config;
use rocmc_remote::Device;
use rocmc_target::Target;
use rocmc_tuner::Compiled;
use std::path::Path;
use std::time::{Duration, Instant};

/// What to tune and how hard.
#[derive(Clone, Debug)]
pub struct TuneRequest {
    /// The kernel file's name (for diagnostics).
    pub file: String,
    /// Its text.
    pub source: String,
    /// The sizes to tune for, in the kernel's order.
    pub sizes: Vec<i64>,
    /// At most this many candidates.
    pub budget: usize,
    /// Stop starting new measurements after this long.
    pub time_limit: Option<Duration>,
    /// Seed of the search and of the inputs.
    pub seed: u64,
    /// Timed launches per kernel per candidate (after warm-up).
    pub reps: u32,
    /// Parallel compilations.
    pub jobs: usize,
    /// Breed generations from the fastest when the space exceeds the
    /// budget (else one uniform sample); see [`rocmc_tuner::search`].
    pub evolve: bool,
    /// Refuse candidates whose occupancy is below this: on AMD waves per
    /// SIMD (as LLVM computes it from registers and LDS), on NVIDIA warps
    /// per scheduler (from ptxas's registers and shared memory).
    pub min_occupancy: Option<u32>,
    /// Compiler options; `mcpu` is taken from the device.
    pub opts: Options,
}

impl TuneRequest {
    /// A request with the CLI's defaults.
    pub fn new(file: &str, source: &str, sizes: Vec<i64>, opts: Options) -> TuneRequest {
        TuneRequest {
            file: file.into(),
            source: source.into(),
            sizes,
            budget: 64,
            time_limit: None,
            seed: 1,
            reps: 30,
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
            evolve: true,
            min_occupancy: None,
            opts,
        }
    }
}

/// The target to compile for on a device, parsed once from its report.
fn device_target(req: &TuneRequest, info: &rocmc_device::DeviceInfo) -> Result<Target, String> {
    info.compile_target(req.opts.code_object_version, req.opts.wave_size)
        .map_err(|e| format!("{}: {e}", info.target))
}

fn compile(req: &TuneRequest, t: &Target, config: &Config) -> Result<Compiled, String> {
    let front = crate::frontend_with(&req.file, &req.source, config).map_err(first_line)?;
    let tc = crate::toolchain::lookup(t);
    let art = crate::backend(&front, t, &req.opts, tc.candidate_emit(req.min_occupancy))
        .map_err(first_line)?;
    tc.check_candidate(&art, req.min_occupancy)?;
    let launch = art.launch.clone();
    Ok(Compiled {
        module: tc.module_bytes(art),
        launch,
    })
}

fn first_line(e: Error) -> String {
    let t = e.to_string();
    // Compiler errors render with the source; the message is what matters here.
    t.lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or(t.lines().next().unwrap_or(""))
        .trim_start_matches("error: ")
        .to_string()
}

/// The kernel and its tune space as compiled for `target` (the knobs of
/// its default schedules depend on it); without a target, as written.
fn parse(
    req: &TuneRequest,
    target: Option<&Target>,
) -> Result<(rocmc_ir::Kernel, rocmc_ir::tune::Tuning), Error> {
    let k = match target {
        Some(t) => crate::kernel_for(&req.file, &req.source, &[], t, &req.opts)?,
        None => rocmc_ir::parse_kernel(&req.file, &req.source)?,
    };
    let Some(tuning) = k.tuning.clone() else {
        return Err(Error::Usage(format!(
            "{}: the kernel has no [tune] section and every stage has a schedule: nothing to tune (see docs/kernel-format.md, \"Tunable parameters\", and docs/tuning.md on default schedules)",
            req.file
        )));
    };
    if req.sizes.len() != k.sizes.len() {
        return Err(Error::Usage(
            "every size of the kernel must be given".into(),
        ));
    }
    Ok((k, tuning))
}

/// Tunes the kernel of `req` on one open device.
pub fn tune(
    req: &TuneRequest,
    dev: &mut dyn Device,
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, Error> {
    tune_on(req, Devices::One(dev), on)
}

/// Tunes the kernel of `req`, spreading the measuring over `devices`.
pub fn tune_on(
    req: &TuneRequest,
    devices: Devices,
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, Error> {
    let start = Instant::now();
    // The space is that of the first device's target (`cpu` when named).
    let target = match &devices {
        Devices::One(d) => Some(device_target(req, d.info()).map_err(Error::Usage)?),
        Devices::Named(n) => match n.first().map(String::as_str) {
            Some("cpu") => Some(Target::parse("x86-64", None, req.opts.code_object_version)?),
            _ => None,
        },
    };
    let (k, tuning) = parse(req, target.as_ref())?;
    let bench = rocmc_tuner::Bench::new(
        k,
        req.sizes.clone(),
        req.seed,
        req.reps,
        req.time_limit.map(|t| start + t),
    )
    .map_err(Error::Usage)?;
    let settings = rocmc_tuner::SearchSettings {
        budget: req.budget,
        seed: req.seed,
        evolve: req.evolve,
        jobs: req.jobs,
    };
    let mut r = rocmc_tuner::search(
        &tuning.space,
        &bench,
        &settings,
        devices,
        &|info| device_target(req, info),
        &|target: &Target, c: &Config| compile(req, target, c),
        on,
    )
    .map_err(Error::Runtime)?;
    r.elapsed = start.elapsed();
    Ok(r)
}

/// Compiles one generation for `target` into an offline plan in `dir`
/// (see [`rocmc_tuner::plan`]); `rocmc-worker measure DIR` measures it.
pub fn export(
    req: &TuneRequest,
    t: &Target,
    dir: &Path,
    on: &mut dyn FnMut(Event),
) -> Result<plan::Plan, Error> {
    let start = Instant::now();
    let target = t.to_string();
    let (_, tuning) = parse(req, Some(t))?;
    let (valid, configs) = candidates(&tuning.space, req.budget.max(1), req.seed);
    on(Event::Compiling {
        round: 1,
        n: configs.len(),
    });
    let compiled =
        rocmc_tuner::compile_all(&configs, &|c: &Config| compile(req, t, c), req.jobs, on);
    let ext = crate::toolchain::lookup(t).module_output().ext();
    let mut p = plan::Plan {
        format: plan::FORMAT,
        rocmc: db::VERSION.into(),
        kernel_file: Path::new(&req.file)
            .file_name()
            .map_or(req.file.clone(), |f| f.to_string_lossy().into_owned()),
        source: req.source.clone(),
        kernel_hash: db::kernel_hash(&req.source).map_err(Error::Usage)?,
        target: target.clone(),
        sizes: req.sizes.clone(),
        seed: req.seed,
        reps: req.reps,
        space: tuning.space.size().to_string(),
        valid,
        compile_seconds: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        candidates: configs
            .iter()
            .map(|c| plan::PlanCandidate {
                config: c.clone(),
                module: None,
                launch: None,
                refused: None,
            })
            .collect(),
    };
    p.write(dir, &compiled, ext).map_err(Error::Usage)?;
    Ok(p)
}
