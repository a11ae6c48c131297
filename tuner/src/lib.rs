//! rocmc's autotuner, without the compiler: which configurations of a
//! kernel's `[tune]` parameters to try ([`search`]), checking and timing
//! compiled candidates on one device or several ([`measure`]), offline
//! plans for GPU hosts that cannot reach the compiler ([`plan`]), and the
//! tuning database that builds read ([`db`]).
//!
//! It links no LLVM: the compiler hands it a function that compiles one
//! configuration, and `rocmc-worker measure` runs an offline plan with it
//! where only the GPU is.
//!
//! A search, in order:
//! 1. candidates: every configuration that meets the constraints when
//!    there are at most `budget` of them; otherwise generations bred from
//!    the fastest so far ([`search`]), the defaults always in the first;
//! 2. compiled in parallel for the device's target; a candidate the
//!    compiler refuses (threads, LDS, spills, occupancy) is discarded
//!    before anything runs;
//! 3. each survivor runs once at a small awkward size (every dimension
//!    capped so the interpreter is quick, and not a multiple of common
//!    tiles) and is compared with the reference interpreter: a wrong one is
//!    reported and never chosen;
//! 4. each survivor is timed at the requested sizes with the device's
//!    clock: warm-up, then the median of many launches spread over three
//!    sets of random inputs used in turn, so no candidate finds its data in
//!    cache from the one before;
//! 5. with several devices, the three fastest are timed again on the first
//!    device, so the winner and its margin are measured on one device.

pub mod db;
pub mod measure;
pub mod plan;
pub mod search;

pub use measure::{Bench, Devices};
pub use rocmc_ir::tune::describe;
pub use search::{Search, Strategy};

use rocmc_device::launch::LaunchInfo;
use rocmc_ir::tune::{Config, TuneSpace};
use rocmc_ir::Kernel;
use rocmc_remote::proto::DeviceInfo;
use rocmc_target::Target;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What became of one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// Timed: median milliseconds of one run of the whole program.
    Timed(f64),
    /// Discarded before running (compiler refusal, spills, occupancy), with why.
    Refused(String),
    /// Ran, but its results differ from the interpreter's.
    Wrong(String),
    /// The device failed running it.
    Failed(String),
    /// Not measured: the time limit was reached.
    Skipped,
}

/// One candidate and its outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The values.
    pub config: Config,
    /// What became of it.
    pub outcome: Outcome,
}

/// A compiled candidate: its module (code object, PTX or shared object)
/// and launch document.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The module's bytes.
    pub module: Vec<u8>,
    /// How to launch its kernels.
    pub launch: LaunchInfo,
}

/// The search's record.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The kernel's name.
    pub kernel: String,
    /// Where it was measured (the first device decides among finalists).
    pub devices: Vec<DeviceInfo>,
    /// The target compiled for.
    pub target: String,
    /// How candidates were chosen.
    pub strategy: Strategy,
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

    /// The devices, as people read them.
    pub fn device_text(&self) -> String {
        let first = &self.devices[0];
        let names: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
        format!("{} ({})", first.description, names.join(", "))
    }

    /// Sorts fastest first; ties broken by configuration so the order is stable.
    pub fn sort(&mut self) {
        self.candidates
            .sort_by(|a, b| match (&a.outcome, &b.outcome) {
                (Outcome::Timed(x), Outcome::Timed(y)) => {
                    x.total_cmp(y).then_with(|| a.config.cmp(&b.config))
                }
                (Outcome::Timed(_), _) => std::cmp::Ordering::Less,
                (_, Outcome::Timed(_)) => std::cmp::Ordering::Greater,
                _ => std::cmp::Ordering::Equal,
            });
    }
}

/// Progress, for a bar.
pub enum Event<'a> {
    /// Compiling `n` candidates of generation `round` (from 1).
    Compiling { round: usize, n: usize },
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

/// The configurations a one-generation search tries: all valid ones when
/// they fit the budget, else a seeded uniform sample with the defaults in
/// it. Returns the number of valid configurations too.
pub fn candidates(space: &TuneSpace, budget: usize, seed: u64) -> (usize, Vec<Config>) {
    let mut s = Search::new(space, budget, seed, false);
    let first = s.first();
    (s.valid_count(), first)
}

/// Compiles one configuration, or says why it cannot be run.
pub type CompileFn<'a> = &'a (dyn Fn(&Config) -> Result<Compiled, String> + Sync);

/// How a search runs.
pub struct SearchSettings {
    /// At most this many candidates.
    pub budget: usize,
    /// Seed of the search and of the inputs.
    pub seed: u64,
    /// Breed generations when the space exceeds the budget (else one sample).
    pub evolve: bool,
    /// Parallel compilations.
    pub jobs: usize,
}

/// Compiles `configs` in parallel, results in their order.
pub fn compile_all(
    configs: &[Config],
    compile: CompileFn,
    jobs: usize,
    on: &mut dyn FnMut(Event),
) -> Vec<Result<Compiled, String>> {
    // Workers take candidates from a shared counter and send each result
    // back with its index, so progress shows as each one finishes.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Result<Compiled, String>>> = (0..configs.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..jobs.max(1).min(configs.len().max(1)) {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = configs.get(i) else { break };
                if tx.send((i, compile(c))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            out[i] = Some(r);
            on(Event::Compiled);
        }
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not compiled (a compiler thread panicked)".into())))
        .collect()
}

/// Measures `runs` (indices into `done`), recording each outcome and
/// reporting it with the best so far.
pub(crate) fn measure_batch(
    pool: &mut measure::Pool,
    bench: &Bench,
    runs: Vec<(usize, Arc<Compiled>)>,
    done: &mut [Candidate],
    best: &mut Option<(Config, f64)>,
    on: &mut dyn FnMut(Event),
) {
    on(Event::Measuring(runs.len()));
    pool.run(bench, runs, &mut |i, o| {
        if let Outcome::Timed(ms) = o {
            if best.as_ref().is_none_or(|(_, b)| ms < *b) {
                *best = Some((done[i].config.clone(), ms));
            }
        }
        done[i].outcome = o;
        on(Event::Measured(
            &done[i],
            best.as_ref().map(|(c, t)| (c, *t)),
        ));
    });
}

/// Searches `space` for the fastest configuration of `bench`'s kernel.
/// `target_of` parses the target the first device reports (known once the
/// devices are open), once; `compile` gets that target and a configuration.
pub fn search(
    space: &TuneSpace,
    bench: &Bench,
    settings: &SearchSettings,
    devices: Devices,
    target_of: &dyn Fn(&DeviceInfo) -> Result<Target, String>,
    compile: &(dyn Fn(&Target, &Config) -> Result<Compiled, String> + Sync),
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, String> {
    let start = Instant::now();
    measure::with_pool(devices, bench, |pool| {
        let infos = pool.infos();
        let parsed = target_of(&infos[0])?;
        let target = infos[0].target.clone();
        let mut s = Search::new(space, settings.budget, settings.seed, settings.evolve);
        let mut done: Vec<Candidate> = Vec::new();
        let mut modules: Vec<Option<Arc<Compiled>>> = Vec::new();
        let mut best: Option<(Config, f64)> = None;
        let mut batch = s.first();
        let mut round = 0;
        while !batch.is_empty() {
            round += 1;
            on(Event::Compiling {
                round,
                n: batch.len(),
            });
            let by_target = |c: &Config| compile(&parsed, c);
            let compiled = compile_all(&batch, &by_target, settings.jobs, on);
            let base = done.len();
            let mut runs = Vec::new();
            for (i, (config, c)) in batch.iter().zip(compiled).enumerate() {
                let (outcome, module) = match c {
                    Ok(c) => {
                        let c = Arc::new(c);
                        runs.push((base + i, c.clone()));
                        (Outcome::Skipped, Some(c))
                    }
                    Err(why) => (Outcome::Refused(why), None),
                };
                done.push(Candidate {
                    config: config.clone(),
                    outcome,
                });
                modules.push(module);
            }
            measure_batch(pool, bench, runs, &mut done, &mut best, on);
            if bench.deadline.is_some_and(|d| Instant::now() > d) {
                break;
            }
            let mut ranked: Vec<(Config, f64)> = done
                .iter()
                .filter_map(|c| match c.outcome {
                    Outcome::Timed(ms) => Some((c.config.clone(), ms)),
                    _ => None,
                })
                .collect();
            ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            batch = s.next(&ranked);
        }
        if infos.len() > 1 {
            let mut finalists: Vec<(usize, f64)> = done
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match c.outcome {
                    Outcome::Timed(ms) => Some((i, ms)),
                    _ => None,
                })
                .collect();
            finalists.sort_by(|a, b| a.1.total_cmp(&b.1));
            let batch = finalists
                .iter()
                .take(3)
                .filter_map(|&(i, _)| modules[i].clone().map(|m| (i, m)))
                .collect();
            for (i, r) in pool.retime(bench, batch) {
                done[i].outcome = match r {
                    Ok(ms) => Outcome::Timed(ms),
                    Err(e) => Outcome::Failed(e),
                };
            }
        }
        let mut report = TuneReport {
            kernel: bench.kernel.name.clone(),
            devices: infos,
            target,
            strategy: s.strategy,
            space: space.size(),
            valid: s.valid_count(),
            candidates: done,
            check_sizes: bench.check_sizes.clone(),
            reps: bench.reps,
            elapsed: start.elapsed(),
        };
        report.sort();
        Ok(report)
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
