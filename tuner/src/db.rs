//! The tuning database: one TOML file per project (`rocmc-tuning.toml`),
//! meant to be committed and reviewed. `rocmc tune` writes an entry per
//! kernel, target and size bucket; `rocmc build` and `rocmc::Build` read
//! the matching one.
//!
//! An entry is used only when everything in its key still holds: the
//! kernel's content hash (the file without its `[tune]` section, so
//! editing candidates keeps entries, editing the computation or schedule
//! does not), the full target, and the rocmc version. Anything else is
//! reported as stale with the reason, and never used.

use rocmc_ir::tune::{describe, Config};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The file's name, looked for in the current folder.
pub const DEFAULT_FILE: &str = "rocmc-tuning.toml";

/// The database.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TuningDb {
    /// One entry per kernel, target and size bucket.
    #[serde(default, rename = "entry")]
    pub entries: Vec<Entry>,
}

/// One tuned configuration and how it was found.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The kernel's name.
    pub kernel: String,
    /// [`kernel_hash`] of the file it was tuned from.
    pub kernel_hash: String,
    /// The full target (processor and features, or compute capability).
    pub target: String,
    /// Every size rounded up to a power of two.
    pub bucket: BTreeMap<String, i64>,
    /// The rocmc version that measured it.
    pub rocmc: String,
    /// The chosen configuration.
    pub config: BTreeMap<String, i64>,
    /// Its median time, ms.
    pub median_ms: f64,
    /// The runner-up's configuration and how much slower it was, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<RunnerUp>,
    /// How it was measured (device, sizes, repetitions, candidates).
    pub measured: Measured,
}

/// The second-best candidate.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunnerUp {
    /// Its configuration.
    pub config: BTreeMap<String, i64>,
    /// Its median time, ms.
    pub median_ms: f64,
    /// How much slower than the chosen one, percent.
    pub slower_percent: f64,
}

/// How an entry was measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// The device, as people read it.
    pub device: String,
    /// The exact sizes timed.
    pub sizes: BTreeMap<String, i64>,
    /// Timed launches per kernel (median taken), over three input sets.
    pub reps: u32,
    /// Candidates timed.
    pub timed: usize,
    /// Candidates refused before running (compiler, spills).
    pub refused: usize,
    /// Candidates whose results were wrong.
    pub wrong: usize,
    /// Configurations meeting the constraints.
    pub valid: usize,
    /// Seed of sampling and inputs.
    pub seed: u64,
    /// Seconds the search took.
    pub seconds: f64,
    /// How the candidates were chosen (exhaustive, evolutionary, random sample).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
}

/// Why an entry was not used.
#[derive(Clone, Debug, PartialEq)]
pub struct Stale {
    /// The entry.
    pub entry: Entry,
    /// Why it is not used.
    pub reason: String,
}

/// What a build finds for a kernel and target.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// Usable entries (one per bucket).
    pub usable: Vec<Entry>,
    /// Entries for this kernel and target that may not be used, and why.
    pub stale: Vec<Stale>,
}

/// The version a build must match.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A kernel file's identity for tuning: SHA-256 of its TOML without the
/// `[tune]` section, re-serialised (so comments, layout and candidate
/// lists do not matter; the computation and the schedule do).
pub fn kernel_hash(source: &str) -> Result<String, String> {
    let mut v: toml::Table = toml::from_str(source).map_err(|e| e.message().to_string())?;
    v.remove("tune");
    let canon = toml::to_string(&v).map_err(|e| e.to_string())?;
    let h = Sha256::digest(canon.as_bytes());
    Ok(format!(
        "sha256:{}",
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// Each size rounded up to a power of two.
pub fn bucket(names: &[String], sizes: &[i64]) -> BTreeMap<String, i64> {
    names
        .iter()
        .zip(sizes)
        .map(|(n, &v)| (n.clone(), (v.max(1) as u64).next_power_of_two() as i64))
        .collect()
}

/// `M=1024,N=1024`.
pub fn show_map(m: &BTreeMap<String, i64>) -> String {
    m.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl TuningDb {
    /// Reads a database; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<TuningDb, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TuningDb::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        toml::from_str(&text).map_err(|e| {
            let (line, col) = e
                .span()
                .map(|s| rocmc_ir::diag::line_col(&text, s.start))
                .unwrap_or((1, 1));
            format!(
                "{}:{line}:{col}: {}",
                path.display(),
                e.message().trim_end()
            )
        })
    }

    /// The file's text: entries sorted by kernel, target and bucket, so a
    /// re-tune changes only its own lines.
    pub fn to_text(&self) -> String {
        let mut sorted = self.clone();
        sorted.entries.sort_by(|a, b| {
            (&a.kernel, &a.target, show_map(&a.bucket)).cmp(&(
                &b.kernel,
                &b.target,
                show_map(&b.bucket),
            ))
        });
        let body = toml::to_string_pretty(&sorted).expect("plain data serialises");
        format!("# rocmc tuning database: written by `rocmc tune`, read by `rocmc build`.\n# Commit it; review changes like code. See docs/tuning.md.\n\n{body}")
    }

    /// Writes the file whole, through a temporary file (never half a file).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, self.to_text())
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Adds `e`, replacing the entry with the same kernel, target and bucket.
    pub fn insert(&mut self, e: Entry) {
        self.entries
            .retain(|o| !(o.kernel == e.kernel && o.target == e.target && o.bucket == e.bucket));
        self.entries.push(e);
    }

    /// The entries for `kernel` on `target`, split into usable and stale.
    pub fn lookup(&self, kernel: &str, hash: &str, target: &str) -> Lookup {
        let mut out = Lookup::default();
        for e in self
            .entries
            .iter()
            .filter(|e| e.kernel == kernel && e.target == target)
        {
            let reason = if e.kernel_hash != hash {
                Some("the kernel changed since it was tuned (its content hash differs)".to_string())
            } else if e.rocmc != VERSION {
                Some(format!(
                    "it was measured with rocmc {}, this is {VERSION}",
                    e.rocmc
                ))
            } else {
                None
            };
            match reason {
                Some(reason) => out.stale.push(Stale {
                    entry: e.clone(),
                    reason,
                }),
                None => out.usable.push(e.clone()),
            }
        }
        out
    }
}

impl Entry {
    /// The configuration in the kernel's parameter order.
    pub fn config_for(&self, space: &rocmc_ir::tune::TuneSpace) -> Result<Config, String> {
        let given: Vec<(String, i64)> = self.config.iter().map(|(n, v)| (n.clone(), *v)).collect();
        space.resolve(&given)
    }

    /// One line for a build summary.
    pub fn summary(&self, cfg: &Config) -> String {
        let ahead = self.runner_up.as_ref().map_or(String::new(), |r| {
            format!(", {:.1}% ahead of the runner-up", r.slower_percent)
        });
        format!(
            "tuned configuration {} (measured on {} at {}: {:.4} ms{ahead})",
            describe(cfg),
            self.measured.device,
            show_map(&self.measured.sizes),
            self.median_ms
        )
    }
}

/// Makes the entry for a finished search, or `None` when no candidate was timed.
pub fn entry_from(
    r: &crate::TuneReport,
    names: &[String],
    sizes: &[i64],
    hash: &str,
    seed: u64,
) -> Option<Entry> {
    let map = |c: &Config| c.iter().cloned().collect::<BTreeMap<_, _>>();
    let mut timed = r.timed();
    let (best, ms) = timed.next()?;
    // Microsecond-of-a-millisecond precision: more is noise, and it keeps the file readable.
    let round = |ms: f64| (ms * 1e6).round() / 1e6;
    let runner_up = timed.next().map(|(c, t)| RunnerUp {
        config: map(c),
        median_ms: round(t),
        slower_percent: ((t / ms - 1.0) * 1000.0).round() / 10.0,
    });
    let count =
        |f: fn(&crate::Outcome) -> bool| r.candidates.iter().filter(|c| f(&c.outcome)).count();
    Some(Entry {
        kernel: r.kernel.clone(),
        kernel_hash: hash.into(),
        target: r.target.clone(),
        bucket: bucket(names, sizes),
        rocmc: VERSION.into(),
        config: map(best),
        median_ms: round(ms),
        runner_up,
        measured: Measured {
            device: r.device_text(),
            strategy: r.strategy.describe().into(),
            sizes: names.iter().cloned().zip(sizes.iter().copied()).collect(),
            reps: r.reps,
            timed: count(|o| matches!(o, crate::Outcome::Timed(_))),
            refused: count(|o| matches!(o, crate::Outcome::Refused(_))),
            wrong: count(|o| matches!(o, crate::Outcome::Wrong(_))),
            valid: r.valid,
            seed,
            seconds: (r.elapsed.as_secs_f64() * 10.0).round() / 10.0,
        },
    })
}

/// What a build takes from the database.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// The values to build with (empty: the `[tune]` defaults).
    pub config: Config,
    /// A line for the build summary: which configuration and why.
    pub note: String,
    /// Entries that were not used, and why (for warnings).
    pub warnings: Vec<String>,
}

/// Chooses the entry a build for `target` uses: the usable entry for the
/// kernel (a bare processor matches any of its feature settings), the one
/// of bucket `tuned_for` when several sizes were tuned. Stale entries are
/// reported in `warnings` and never used; several usable buckets without
/// `tuned_for` is an error (a build must not guess).
pub fn select(
    d: &TuningDb,
    path: &Path,
    source: &str,
    kernel: &rocmc_ir::Kernel,
    target: &rocmc_target::Target,
    tuned_for: Option<&[(String, i64)]>,
) -> Result<Selection, String> {
    let mut sel = Selection::default();
    let Some(tuning) = &kernel.tuning else {
        return Ok(sel);
    };
    let hash = kernel_hash(source)?;
    let matching = |e: &Entry| e.kernel == kernel.name && target.takes_tuning_of(&e.target);
    let mut found = Lookup::default();
    if let Some(e) = d.entries.iter().find(|e| matching(e)) {
        found = d.lookup(&kernel.name, &hash, &e.target);
    }
    for s in &found.stale {
        sel.warnings.push(format!(
            "{}: tuning entry for {} at {} not used: {}; re-run `rocmc tune`",
            path.display(),
            s.entry.target,
            show_map(&s.entry.bucket),
            s.reason
        ));
    }
    let mut usable = found.usable;
    if let Some(given) = tuned_for {
        let names: Vec<String> = given.iter().map(|(n, _)| n.clone()).collect();
        let values: Vec<i64> = given.iter().map(|(_, v)| *v).collect();
        let b = bucket(&names, &values);
        usable.retain(|e| e.bucket == b);
        if usable.is_empty() {
            return Err(format!(
                "{} has no usable entry for {} on {target} in bucket {}",
                path.display(),
                kernel.name,
                show_map(&b)
            ));
        }
    }
    let entry = match usable.len() {
        0 => {
            sel.note = format!(
                "no tuning entry for {target} in {}: the [tune] defaults",
                path.display()
            );
            return Ok(sel);
        }
        1 => usable.remove(0),
        _ => {
            return Err(format!(
                "{} has entries for {} on {target} at several sizes ({}); pick one with --tuned-for (or Build::tuned_for)",
                path.display(),
                kernel.name,
                usable
                    .iter()
                    .map(|e| show_map(&e.bucket))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        }
    };
    match entry.config_for(&tuning.space) {
        Ok(cfg) => {
            sel.note = format!("{}, from {}", entry.summary(&cfg), path.display());
            sel.config = cfg;
        }
        Err(why) => {
            sel.warnings.push(format!(
                "{}: tuning entry for {} not used: {why}; re-run `rocmc tune`",
                path.display(),
                entry.target
            ));
            sel.note = "the [tune] defaults".into();
        }
    }
    Ok(sel)
}
