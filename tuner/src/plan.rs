//! Offline tuning, for GPU hosts that the compiler's machine cannot reach
//! (air-gapped, behind a batch queue): `rocmc tune --export DIR` compiles
//! the candidates here and writes a plan; `rocmc-worker measure DIR` (no
//! LLVM) checks and times them there and writes `results.json` beside it;
//! `rocmc tune --import DIR` reads both back and records the winner.
//!
//! A plan is one generation (exhaustive, or a seeded sample of the
//! budget): the evolutionary search needs timings between generations.
//!
//! The folder: `plan.json` (the kernel file's text, its hash, the target,
//! sizes, seed, repetitions and every candidate with its configuration and
//! either its module's file name and launch document or why it was
//! refused), one module file per compiled candidate (`c0007.ptx`,
//! `c0007.hsaco`, `c0007.so`), and after measuring `results.json`.

use crate::{Candidate, Compiled, Outcome, TuneReport};
use rocmc_device::launch::LaunchInfo;
use rocmc_ir::tune::Config;
use rocmc_remote::proto::DeviceInfo;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};

/// Bumped when the plan or results format changes incompatibly.
pub const FORMAT: u32 = 1;

/// A compiled generation, ready to carry to the GPU host.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// [`FORMAT`].
    pub format: u32,
    /// The rocmc version that compiled it.
    pub rocmc: String,
    /// The kernel file's name.
    pub kernel_file: String,
    /// Its text (the worker parses it for the kernel's computation).
    pub source: String,
    /// [`crate::db::kernel_hash`] of it.
    pub kernel_hash: String,
    /// The target compiled for.
    pub target: String,
    /// Sizes to time at, in the kernel's order.
    pub sizes: Vec<i64>,
    /// Seed of the sample and the inputs.
    pub seed: u64,
    /// Timed launches per kernel and candidate.
    pub reps: u32,
    /// Configurations in the candidates' product (as text: it may exceed 64 bits).
    pub space: String,
    /// Those meeting the constraints.
    pub valid: usize,
    /// Seconds the compiling took.
    pub compile_seconds: f64,
    /// The candidates.
    pub candidates: Vec<PlanCandidate>,
}

/// One candidate of a plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanCandidate {
    /// Its values.
    pub config: Config,
    /// Its module's file in the plan's folder (absent when refused).
    #[serde(default)]
    pub module: Option<String>,
    /// Its launch document (absent when refused).
    #[serde(default)]
    pub launch: Option<LaunchInfo>,
    /// Why the compiler refused it.
    #[serde(default)]
    pub refused: Option<String>,
}

/// What measuring a plan found.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    /// [`FORMAT`].
    pub format: u32,
    /// The plan's kernel hash, so results never meet another kernel's plan.
    pub kernel_hash: String,
    /// The devices measured on.
    pub devices: Vec<DeviceInfo>,
    /// Sizes the results were checked at.
    pub check_sizes: Vec<i64>,
    /// Every candidate of the plan, in the plan's order.
    pub candidates: Vec<Candidate>,
    /// Seconds the measuring took.
    pub measure_seconds: f64,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}:{}:{}: {e}", path.display(), e.line(), e.column()))
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), String> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(v).expect("plain data serialises");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Plan {
    /// Writes the plan and its modules into `dir` (created if missing).
    /// `compiled[i]` belongs to `self.candidates[i]`, whose `module`
    /// names are filled in here.
    pub fn write(
        &mut self,
        dir: &Path,
        compiled: &[Result<Compiled, String>],
        ext: &str,
    ) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (i, (c, r)) in self.candidates.iter_mut().zip(compiled).enumerate() {
            match r {
                Ok(m) => {
                    let name = format!("c{i:04}.{ext}");
                    let path = dir.join(&name);
                    std::fs::write(&path, &m.module)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    c.module = Some(name);
                    c.launch = Some(m.launch.clone());
                }
                Err(why) => c.refused = Some(why.clone()),
            }
        }
        // Results of an older plan in the folder belong to other modules.
        let _ = std::fs::remove_file(dir.join("results.json"));
        write_json(&dir.join("plan.json"), self)
    }

    /// Reads `dir/plan.json` and its modules.
    pub fn read(dir: &Path) -> Result<(Plan, Vec<Result<Compiled, String>>), String> {
        let path = dir.join("plan.json");
        let plan: Plan = read_json(&path)?;
        if plan.format != FORMAT {
            return Err(format!(
                "{}: plan format {} (this rocmc reads {FORMAT}); export it again",
                path.display(),
                plan.format
            ));
        }
        let mut compiled = Vec::new();
        for c in &plan.candidates {
            compiled.push(match (&c.module, &c.launch, &c.refused) {
                (Some(m), Some(l), None) => {
                    let p = dir.join(m);
                    if m.contains('/') || m.contains("..") {
                        return Err(format!("{}: module name {m:?} leaves the folder", path.display()));
                    }
                    Ok(Compiled {
                        module: std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?,
                        launch: l.clone(),
                    })
                }
                (None, None, Some(why)) => Err(why.clone()),
                _ => {
                    return Err(format!(
                        "{}: candidate {} needs either a module and its launch document or a reason it was refused",
                        path.display(),
                        rocmc_ir::tune::describe(&c.config)
                    ))
                }
            });
        }
        Ok((plan, compiled))
    }
}

/// Checks and times every compiled candidate of the plan in `dir` on
/// `devices`, writes `dir/results.json` and returns the report.
pub fn measure(
    dir: &Path,
    devices: crate::Devices,
    on: &mut dyn FnMut(crate::Event),
) -> Result<TuneReport, String> {
    let start = Instant::now();
    let (plan, compiled) = Plan::read(dir)?;
    let k = rocmc_ir::parse_kernel(&plan.kernel_file, &plan.source).map_err(|e| e.render())?;
    let bench = crate::Bench::new(k, plan.sizes.clone(), plan.seed, plan.reps, None)?;
    let (infos, candidates) = crate::measure::with_pool(devices, &bench, |pool| {
        let infos = pool.infos();
        if infos[0].target != plan.target {
            return Err(format!(
                "the plan was compiled for {}, but {} is {}",
                plan.target, infos[0].name, infos[0].target
            ));
        }
        let mut done: Vec<Candidate> = plan
            .candidates
            .iter()
            .zip(&compiled)
            .map(|(c, r)| Candidate {
                config: c.config.clone(),
                outcome: match r {
                    Ok(_) => Outcome::Skipped,
                    Err(why) => Outcome::Refused(why.clone()),
                },
            })
            .collect();
        let runs: Vec<_> = compiled
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().ok().map(|c| (i, std::sync::Arc::new(c.clone()))))
            .collect();
        let mut best = None;
        crate::measure_batch(pool, &bench, runs, &mut done, &mut best, on);
        Ok((infos, done))
    })?;
    let results = Results {
        format: FORMAT,
        kernel_hash: plan.kernel_hash.clone(),
        devices: infos,
        check_sizes: bench.check_sizes.clone(),
        candidates,
        measure_seconds: start.elapsed().as_secs_f64(),
    };
    write_json(&dir.join("results.json"), &results)?;
    Ok(report(&plan, &results))
}

/// Reads a measured plan back: the plan and the report its results make.
pub fn import(dir: &Path) -> Result<(Plan, TuneReport), String> {
    let (plan, _) = Plan::read(dir)?;
    let path = dir.join("results.json");
    if !path.exists() {
        return Err(format!(
            "{}: no results yet; measure the plan first (`rocmc-worker measure {}` on the GPU host)",
            path.display(),
            dir.display()
        ));
    }
    let results: Results = read_json(&path)?;
    if results.format != FORMAT {
        return Err(format!(
            "{}: results format {} (this rocmc reads {FORMAT})",
            path.display(),
            results.format
        ));
    }
    if results.kernel_hash != plan.kernel_hash
        || results.candidates.len() != plan.candidates.len()
        || results
            .candidates
            .iter()
            .zip(&plan.candidates)
            .any(|(r, p)| r.config != p.config)
    {
        return Err(format!(
            "{}: these results are not of the plan beside them (kernel or candidates differ)",
            path.display()
        ));
    }
    let r = report(&plan, &results);
    Ok((plan, r))
}

fn report(plan: &Plan, results: &Results) -> TuneReport {
    let k_name = rocmc_ir::parse_kernel(&plan.kernel_file, &plan.source)
        .map(|k| k.name)
        .unwrap_or_default();
    let mut r = TuneReport {
        kernel: k_name,
        devices: results.devices.clone(),
        target: plan.target.clone(),
        strategy: if plan.valid <= plan.candidates.len() {
            crate::Strategy::Exhaustive
        } else {
            crate::Strategy::Sample
        },
        space: plan.space.parse().unwrap_or(0),
        valid: plan.valid,
        candidates: results.candidates.clone(),
        check_sizes: results.check_sizes.clone(),
        reps: plan.reps,
        elapsed: Duration::from_secs_f64(plan.compile_seconds + results.measure_seconds),
    };
    r.sort();
    r
}
