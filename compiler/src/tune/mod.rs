//! `rocmc tune`: finds the best configuration of a kernel's `[tune]`
//! parameters on a device, and the tuning database ([`db`]) that builds
//! read it from.
//!
//! The search, in order:
//! 1. candidates: every configuration that meets the constraints when
//!    there are at most `budget` of them; otherwise `budget` of them drawn
//!    at random (seeded, without repeats), the defaults always among them;
//! 2. compiled in parallel for the device's target; a candidate the
//!    compiler refuses (threads, LDS, …) or whose code object spills to
//!    scratch is discarded before anything runs;
//! 3. each survivor runs once at a small awkward size (every dimension
//!    capped so the interpreter is quick, and not a multiple of common
//!    tiles) and is compared with the reference interpreter: a wrong one is
//!    reported and never chosen;
//! 4. each survivor is timed at the requested sizes with the device's
//!    clock: warm-up, then the median of many launches spread over three
//!    sets of random inputs used in turn, so no candidate finds its data in
//!    cache from the one before.

pub mod db;

use crate::{Emit, Error, Options};
use rocmc_ir::reference::{compare, random_inputs, Inputs};
use rocmc_ir::tune::{describe, Config, TuneSpace};
use rocmc_ir::Kernel;
use rocmc_linker::launch::{KernelLaunch, LaunchInfo};
use rocmc_remote::proto::{DeviceInfo, WireArg};
use rocmc_remote::Device;
use std::collections::HashMap;
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
    /// Seed of the sampling and of the inputs.
    pub seed: u64,
    /// Timed launches per kernel per candidate (after warm-up).
    pub reps: u32,
    /// Parallel compilations.
    pub jobs: usize,
    /// Compiler options; `mcpu` is taken from the device.
    pub opts: Options,
}

/// What became of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Timed: median milliseconds of one run of the whole program.
    Timed(f64),
    /// Discarded before running (compiler refusal, spills), with why.
    Refused(String),
    /// Ran, but its results differ from the interpreter's.
    Wrong(String),
    /// The device failed running it.
    Failed(String),
    /// Not measured: the time limit was reached.
    Skipped,
}

/// One candidate and its outcome.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The values.
    pub config: Config,
    /// What became of it.
    pub outcome: Outcome,
}

/// The search's record.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The kernel's name.
    pub kernel: String,
    /// Where it was measured.
    pub device: DeviceInfo,
    /// The target compiled for.
    pub target: String,
    /// Configurations in the candidates' product.
    pub space: u128,
    /// Those meeting the constraints.
    pub valid: usize,
    /// Every candidate tried, fastest first (then the rest).
    pub candidates: Vec<Candidate>,
    /// Sizes the results were checked at.
    pub check_sizes: Vec<i64>,
    /// Timed launches per kernel and candidate.
    pub reps: u32,
    /// How long the search took.
    pub elapsed: Duration,
}

impl TuneReport {
    /// The fastest correct candidate and its time.
    pub fn best(&self) -> Option<(&Config, f64)> {
        self.timed().next()
    }

    /// Timed candidates, fastest first.
    pub fn timed(&self) -> impl Iterator<Item = (&Config, f64)> {
        self.candidates.iter().filter_map(|c| match c.outcome {
            Outcome::Timed(ms) => Some((&c.config, ms)),
            _ => None,
        })
    }
}

/// Progress, for a bar.
pub enum Event<'a> {
    /// Compiling `n` candidates.
    Compiling(usize),
    /// One compiled.
    Compiled,
    /// Measuring `n` survivors.
    Measuring(usize),
    /// One measured, with the best so far.
    Measured(&'a Candidate, Option<(&'a Config, f64)>),
}

/// Sizes to check results at: each capped so the interpreter is quick,
/// and odd, so partial tiles are exercised.
pub fn check_sizes(k: &Kernel, sizes: &[i64]) -> Vec<i64> {
    let cap = match k.sizes.len() {
        1 => 4099,
        2 => 193,
        3 => 97,
        _ => 17,
    };
    sizes.iter().map(|&v| v.min(cap)).collect()
}

/// The configurations to try: all valid ones when they fit the budget,
/// else a seeded sample with the defaults in it.
pub fn candidates(space: &TuneSpace, budget: usize, seed: u64) -> (usize, Vec<Config>) {
    // Enumerating beyond this is pointless for a budgeted search.
    const ENUMERATE: u128 = 1 << 20;
    let n = space.size().min(ENUMERATE) as u64;
    let valid: Vec<u64> = (0..n)
        .filter(|&i| {
            space
                .nth(u128::from(i))
                .is_some_and(|c| space.broken(&c).is_none())
        })
        .collect();
    let count = valid.len();
    let mut picked: Vec<Config> = if count <= budget {
        valid
            .iter()
            .filter_map(|&i| space.nth(u128::from(i)))
            .collect()
    } else {
        let mut rng = rocmc_ir::reference::Rng(seed ^ 0x7475_6e65);
        let mut idx = valid;
        // A partial Fisher-Yates shuffle: the first `budget` are a uniform sample.
        for i in 0..budget {
            let j = i + rng.below(idx.len() - i);
            idx.swap(i, j);
        }
        idx[..budget]
            .iter()
            .filter_map(|&i| space.nth(u128::from(i)))
            .collect()
    };
    let def = space.default_config();
    if !picked.contains(&def) {
        if picked.len() >= budget.max(1) {
            picked.pop();
        }
        picked.insert(0, def);
    }
    (count, picked)
}

/// A compiled candidate.
struct Compiled {
    module: Vec<u8>,
    launch: LaunchInfo,
}

fn compile(req: &TuneRequest, target: &str, config: &Config) -> Result<Compiled, String> {
    let front = crate::frontend_with(&req.file, &req.source, config).map_err(first_line)?;
    let mut o = req.opts.clone();
    o.mcpu = target.to_string();
    let t = crate::targets(&o).map_err(first_line)?.remove(0);
    let ptx = t.vendor() == rocmc_codegen::Vendor::Nvidia;
    let art = crate::backend(
        &front,
        &t,
        &o,
        Emit {
            code_object: !ptx,
            asm: ptx,
            ..Default::default()
        },
    )
    .map_err(first_line)?;
    let module = if ptx {
        art.asm.unwrap_or_default().into_bytes()
    } else {
        art.code_object.unwrap_or_default()
    };
    if t.vendor() == rocmc_codegen::Vendor::Amd {
        if let Ok(co) = rocmc_linker::codeobject::read(&module) {
            for k in &co.kernels {
                if k.vgpr_spill_count > 0
                    || k.sgpr_spill_count > 0
                    || k.private_segment_fixed_size > 0
                {
                    return Err(format!(
                        "{} spills ({} VGPRs, {} SGPRs spilled, {} bytes of scratch)",
                        k.name,
                        k.vgpr_spill_count,
                        k.sgpr_spill_count,
                        k.private_segment_fixed_size
                    ));
                }
            }
        }
    }
    Ok(Compiled {
        module,
        launch: art.launch,
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

/// Buffers of one input set on the device.
struct Set {
    ids: Vec<u32>,
    inputs: Inputs,
}

fn upload(dev: &mut dyn Device, inputs: Inputs) -> Result<Set, String> {
    let mut ids = Vec::new();
    for b in &inputs.host {
        let id = dev.alloc(b.len() as u64).map_err(|e| e.to_string())?;
        dev.write(id, b).map_err(|e| e.to_string())?;
        ids.push(id);
    }
    Ok(Set { ids, inputs })
}

fn free(dev: &mut dyn Device, set: &Set) {
    for &id in &set.ids {
        let _ = dev.free(id);
    }
}

/// A kernel's arguments for one input set.
fn wire_args(
    k: &Kernel,
    kl: &KernelLaunch,
    set: &Set,
    sizes: &[i64],
) -> Result<Vec<WireArg>, String> {
    rocmc_remote::device::wire_args(k, kl, &set.ids, &set.inputs.host, sizes, &set.inputs.pbytes)
}

/// Runs one candidate at the check sizes and compares with `want`.
fn check_one(
    dev: &mut dyn Device,
    k: &Kernel,
    c: &Compiled,
    hash: &str,
    sizes: &[i64],
    inputs: &Inputs,
    want: &[rocmc_ir::interp::Buffer],
) -> Result<Result<(), String>, String> {
    let set = upload(dev, inputs.clone())?;
    let r = (|| {
        for kl in &c.launch.kernels {
            let args = wire_args(k, kl, &set, sizes)?;
            dev.launch(hash, &c.launch, &kl.name, args)
                .map_err(|e| e.to_string())?;
        }
        let got = compare(k, want, |i| dev.read(set.ids[i]).map_err(|e| e.to_string()))?;
        Ok(match got.iter().find(|c| !c.ok()) {
            None => Ok(()),
            Some(bad) => Err(format!(
                "{} differs from the interpreter by {:.3e} (tolerance {:.0e})",
                bad.tensor, bad.max_error, bad.tolerance
            )),
        })
    })();
    free(dev, &set);
    r
}

/// Median milliseconds of one run of all the program's kernels.
fn time_one(
    dev: &mut dyn Device,
    k: &Kernel,
    c: &Compiled,
    hash: &str,
    sizes: &[i64],
    sets: &[Set],
    reps: u32,
) -> Result<f64, String> {
    let per_set = reps.div_ceil(sets.len() as u32).max(1);
    let mut total = 0.0;
    for kl in &c.launch.kernels {
        let mut samples = Vec::new();
        for (i, set) in sets.iter().enumerate() {
            let args = wire_args(k, kl, set, sizes)?;
            let warmup = if i == 0 { 3 } else { 1 };
            samples.extend(
                dev.time(hash, &c.launch, &kl.name, args, warmup, per_set)
                    .map_err(|e| e.to_string())?,
            );
        }
        samples.sort_by(f64::total_cmp);
        total += samples[samples.len() / 2];
    }
    Ok(total)
}

/// Tunes the kernel of `req` on `dev`.
pub fn tune(
    req: &TuneRequest,
    dev: &mut dyn Device,
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, Error> {
    let start = Instant::now();
    let k = rocmc_ir::front::parse_kernel(&req.file, &req.source)?;
    let Some(tuning) = &k.tuning else {
        return Err(Error::Usage(format!(
            "{}: the kernel has no [tune] section: nothing to tune (see docs/kernel-format.md, \"Tunable parameters\")",
            req.file
        )));
    };
    if req.sizes.len() != k.sizes.len() {
        return Err(Error::Usage(
            "every size of the kernel must be given".into(),
        ));
    }
    let info = dev.info().clone();
    let target = info.target.clone();
    let (valid, configs) = candidates(&tuning.space, req.budget.max(1), req.seed);

    // Compile in parallel; the order of results follows the candidates'.
    on(Event::Compiling(configs.len()));
    // Workers take candidates from a shared counter and send each result
    // back with its index, so the bar moves as each one finishes.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut compiled: Vec<Option<Result<Compiled, String>>> =
        (0..configs.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..req.jobs.max(1).min(configs.len().max(1)) {
            let tx = tx.clone();
            let (next, configs, target) = (&next, &configs, &target);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = configs.get(i) else { break };
                if tx.send((i, compile(req, target, c))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            compiled[i] = Some(r);
            on(Event::Compiled);
        }
    });
    let compiled: Vec<Result<Compiled, String>> = compiled
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not compiled (a compiler thread panicked)".into())))
        .collect();

    // One reference result at the check sizes serves every candidate: the
    // computation is the same, only the schedule differs.
    let csizes = check_sizes(&k, &req.sizes);
    let cinputs = random_inputs(&k, &csizes, &HashMap::new(), req.seed).map_err(Error::Usage)?;
    let want =
        rocmc_ir::interp::run(&k, &csizes, &cinputs.pvals, &cinputs.inputs).map_err(|e| {
            Error::Usage(format!(
                "the reference interpreter refused the check sizes: {e}"
            ))
        })?;

    let rt = |e: String| Error::Runtime(e);
    let mut sets = Vec::new();
    for i in 0..3 {
        let inputs = random_inputs(&k, &req.sizes, &HashMap::new(), req.seed + 1 + i)
            .map_err(Error::Usage)?;
        sets.push(upload(dev, inputs).map_err(rt)?);
    }
    dev.sync().map_err(|e| rt(e.to_string()))?;

    let survivors = compiled.iter().filter(|c| c.is_ok()).count();
    on(Event::Measuring(survivors));
    let mut done: Vec<Candidate> = Vec::new();
    let mut best: Option<(Config, f64)> = None;
    for (config, c) in configs.iter().zip(&compiled) {
        let outcome = match c {
            Err(why) => Outcome::Refused(why.clone()),
            Ok(_) if req.time_limit.is_some_and(|t| start.elapsed() > t) => Outcome::Skipped,
            Ok(c) => match dev.load_module(&c.module) {
                Err(e) => Outcome::Failed(e.to_string()),
                Ok(hash) => match check_one(dev, &k, c, &hash, &csizes, &cinputs, &want) {
                    Err(e) => Outcome::Failed(e),
                    Ok(Err(why)) => Outcome::Wrong(why),
                    Ok(Ok(())) => match time_one(dev, &k, c, &hash, &req.sizes, &sets, req.reps) {
                        Ok(ms) => Outcome::Timed(ms),
                        Err(e) => Outcome::Failed(e),
                    },
                },
            },
        };
        if let Outcome::Timed(ms) = outcome {
            if best.as_ref().is_none_or(|(_, b)| ms < *b) {
                best = Some((config.clone(), ms));
            }
        }
        // A failure may leave the session unusable; say so at once.
        if let Outcome::Failed(_) = outcome {
            let _ = dev.sync();
        }
        done.push(Candidate {
            config: config.clone(),
            outcome,
        });
        if c.is_ok() {
            on(Event::Measured(
                done.last().expect("pushed"),
                best.as_ref().map(|(c, t)| (c, *t)),
            ));
        }
    }
    for s in &sets {
        free(dev, s);
    }
    let _ = dev.sync();
    // Fastest first; ties broken by configuration so the order is stable.
    done.sort_by(|a, b| match (&a.outcome, &b.outcome) {
        (Outcome::Timed(x), Outcome::Timed(y)) => {
            x.total_cmp(y).then_with(|| a.config.cmp(&b.config))
        }
        (Outcome::Timed(_), _) => std::cmp::Ordering::Less,
        (_, Outcome::Timed(_)) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    });
    Ok(TuneReport {
        kernel: k.name.clone(),
        device: info,
        target,
        space: tuning.space.size(),
        valid,
        candidates: done,
        check_sizes: csizes,
        reps: req.reps,
        elapsed: start.elapsed(),
    })
}

/// The report as a table, fastest first, then what was not timed and why.
pub fn table(r: &TuneReport, show: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let best = r.best().map(|(_, t)| t);
    let _ = writeln!(
        out,
        "{:>4}  {:>10}  {:>8}  configuration",
        "rank", "ms", "vs best"
    );
    for (i, (c, ms)) in r.timed().take(show).enumerate() {
        let rel = best.map_or(String::new(), |b| format!("{:.2}x", ms / b));
        let _ = writeln!(
            out,
            "{:>4}  {:>10.4}  {:>8}  {}",
            i + 1,
            ms,
            rel,
            describe(c)
        );
    }
    let timed = r.timed().count();
    if timed > show {
        let _ = writeln!(out, "      ({} more timed)", timed - show);
    }
    for c in &r.candidates {
        let (what, why) = match &c.outcome {
            Outcome::Timed(_) => continue,
            Outcome::Refused(w) => ("refused", w.as_str()),
            Outcome::Wrong(w) => ("WRONG", w.as_str()),
            Outcome::Failed(w) => ("failed", w.as_str()),
            Outcome::Skipped => ("skipped", "the time limit was reached"),
        };
        let _ = writeln!(out, "{what:>8}  {}: {why}", describe(&c.config));
    }
    out
}
