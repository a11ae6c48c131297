//! Autotuning: the `[tune]` section, `rocmc tune` on the CPU device (here
//! and through a TLS worker on loopback), the tuning database and builds
//! that read it.

use crate::common::{cpu_module, rocmc, rocmc_bin, root, text, worker_bin, Worker};
use rocmc::device::{Arg, BufferId, Device, DeviceInfo, Result as DevResult};
use rocmc::tune::{self, db, Outcome, TuneRequest};
use std::path::Path;
use std::process::Command;

const KERNEL: &str = r#"
[kernel]
name = "scale_tunable"
sizes = ["n"]

[inputs]
A = { dtype = "f32", shape = ["n"] }

[tune]
constraints = ["T * U <= 512"]

[tune.params]
T = { pow2 = [32, 256], default = 64 }
U = { values = [1, 2, 4], default = 1 }

[[stage]]
compute = "B[x] = A[x] * 2.0 + 1.0"
shape = ["n"]
schedule = [
  "xo, xi = split(x, T * U)",
  "xio, xii = split(xi, U)",
  "bind(xo, blockIdx.x)",
  "bind(xio, threadIdx.x)",
  "unroll(xii)",
]
"#;

fn request(budget: usize, seed: u64) -> TuneRequest {
    let mut r = TuneRequest::new(
        "scale_tunable.toml",
        KERNEL,
        vec![100_003],
        rocmc::Options::new("x86-64"),
    );
    r.budget = budget;
    r.seed = seed;
    r.reps = 3;
    r.jobs = 2;
    r
}

#[test]
fn tune_section_errors_name_the_place() {
    let bad = |from: &str, to: &str, want: &str| {
        let src = KERNEL.replacen(from, to, 1);
        assert_ne!(src, KERNEL, "{from}");
        let e = rocmc::ir::parse_kernel("k.toml", &src)
            .expect_err(to)
            .render();
        assert!(e.contains(want), "{to}: {e}");
        assert!(e.contains("k.toml:"), "{e}");
    };
    bad(
        "default = 64",
        "default = 48",
        "the default 48 is not among `T`'s candidates (32, 64, 128, 256)",
    );
    bad(
        "T * U <= 512",
        "T * V <= 512",
        "`V` is not a tune parameter",
    );
    bad(
        "T * U <= 512",
        "T * U <= 32",
        "the default configuration (T=64 U=1) breaks this constraint",
    );
    bad(
        "pow2 = [32, 256]",
        "pow2 = [32, 256], values = [1]",
        "exactly one of `values`, `pow2` or `range`",
    );
    bad("pow2 = [32, 256]", "range = [8, 4]", "1 <= low <= high");
    bad(
        "\"xio, xii = split(xi, U)\"",
        "\"T, xii = split(xi, U)\"",
        "loop `T` has the name of a tune parameter",
    );
    bad(
        "[tune.params]",
        "[tune.params]\nn = { values = [1], default = 1 }",
        "`n` is already declared",
    );
    // A configuration asked for is checked too.
    let e = rocmc::ir::parse_kernel_with("k.toml", KERNEL, &[("U".into(), 3)])
        .unwrap_err()
        .render();
    assert!(
        e.contains("3 is not a candidate of tune parameter `U` (1, 2, 4)"),
        "{e}"
    );
    let e = rocmc::ir::parse_kernel_with("k.toml", KERNEL, &[("T".into(), 256), ("U".into(), 4)])
        .unwrap_err()
        .render();
    assert!(e.contains("`T * U <= 512` is false for T=256 U=4"), "{e}");
}

/// `[tune.params]` with no `[tune]` line is valid TOML (the table is
/// created implicitly) and means the same as with it.
#[test]
fn a_tune_section_may_be_created_by_its_params_table() {
    let implicit = KERNEL.replacen("[tune]\nconstraints = [\"T * U <= 512\"]\n", "", 1);
    assert_ne!(implicit, KERNEL);
    let k = rocmc::ir::parse_kernel_with("k.toml", &implicit, &[("T".into(), 128)])
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let t = k.tuning.expect("the [tune] section is read");
    assert_eq!(rocmc::ir::tune::describe(&t.config), "T=128 U=1");
    // A wrong value given for it still names the parameter.
    let e = rocmc::ir::parse_kernel_with("k.toml", &implicit, &[("U".into(), 3)])
        .unwrap_err()
        .render();
    assert!(e.contains("parameter `U`") && e.contains("k.toml:"), "{e}");
}

#[test]
fn the_search_is_deterministic_for_a_seed_and_samples_within_budget() {
    let k = rocmc::ir::parse_kernel("k.toml", KERNEL).unwrap();
    let space = &k.tuning.as_ref().unwrap().space;
    // 4 x 3 = 12 configurations, 11 meet T * U <= 512.
    let (valid, all) = tune::candidates(space, 100, 1);
    assert_eq!((valid, all.len()), (11, 11));
    let (_, a) = tune::candidates(space, 5, 7);
    let (_, b) = tune::candidates(space, 5, 7);
    let (_, c) = tune::candidates(space, 5, 8);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 5);
    // The defaults are always tried, so a tuned result is never worse than untuned.
    assert!(a.contains(&space.default_config()) && c.contains(&space.default_config()));
    for cfg in &a {
        assert!(space.broken(cfg).is_none());
    }
}

/// A CPU device that returns wrong results, and flatteringly short times,
/// for one module: a candidate that would win if it were not checked.
struct Planted {
    inner: Box<dyn Device>,
    bad_module: Vec<u8>,
    loaded: Vec<u8>,
}

impl Device for Planted {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn alloc(&mut self, bytes: u64) -> DevResult<BufferId> {
        self.inner.alloc(bytes)
    }
    fn free(&mut self, id: BufferId) -> DevResult<()> {
        self.inner.free(id)
    }
    fn size(&self, id: BufferId) -> DevResult<u64> {
        self.inner.size(id)
    }
    fn write(&mut self, id: BufferId, offset: u64, data: &[u8]) -> DevResult<()> {
        self.inner.write(id, offset, data)
    }
    fn read(&mut self, id: BufferId, offset: u64, len: u64) -> DevResult<Vec<u8>> {
        let mut d = self.inner.read(id, offset, len)?;
        if self.loaded == self.bad_module {
            // The top byte of each f32: sign and exponent.
            for b in d.iter_mut().skip(3).step_by(4) {
                *b ^= 0x40;
            }
        }
        Ok(d)
    }
    fn load_module(&mut self, bytes: &[u8]) -> DevResult<String> {
        self.loaded = bytes.to_vec();
        self.inner.load_module(bytes)
    }
    fn launch(&mut self, module: &str, kernel: &str, args: &[Arg]) -> DevResult<()> {
        self.inner.launch(module, kernel, args)
    }
    fn time(
        &mut self,
        module: &str,
        kernel: &str,
        args: &[Arg],
        warmup: u32,
        reps: u32,
    ) -> DevResult<Vec<f64>> {
        let t = self.inner.time(module, kernel, args, warmup, reps)?;
        Ok(if self.loaded == self.bad_module {
            t.iter().map(|_| 1e-6).collect()
        } else {
            t
        })
    }
    fn synchronize(&mut self) -> DevResult<()> {
        self.inner.synchronize()
    }
}

fn cpu() -> Box<dyn Device> {
    rocmc::runtime::open_local("cpu").unwrap()
}

#[test]
fn a_wrong_candidate_is_reported_and_never_chosen() {
    let planted = vec![("T".to_string(), 128), ("U".to_string(), 2)];
    let mut dev = Planted {
        inner: cpu(),
        bad_module: cpu_module(KERNEL, &planted).0,
        loaded: Vec::new(),
    };
    let r = tune::tune(&request(100, 1), &mut dev, &mut |_| {}).unwrap();
    let c = r.candidates.iter().find(|c| c.config == planted).unwrap();
    assert!(
        matches!(&c.outcome, Outcome::Wrong(w) if w.contains("differs from the interpreter")),
        "{:?}",
        c.outcome
    );
    let (best, _) = r.best().unwrap();
    assert_ne!(best, &planted);
    assert_eq!(r.timed().count(), 10, "{}", tune::table(&r, 20));
    let e = db::entry_from(&r, &["n".into()], &[100_003], "sha256:x", 1).unwrap();
    assert_eq!(e.measured.wrong, 1);
    assert_eq!(e.bucket.get("n"), Some(&131_072));
}

#[test]
fn the_database_round_trips_and_refuses_stale_entries() {
    let mut dev = cpu();
    let r = tune::tune(&request(3, 2), dev.as_mut(), &mut |_| {}).unwrap();
    let hash = db::kernel_hash(KERNEL).unwrap();
    let e = db::entry_from(&r, &["n".into()], &[100_003], &hash, 2).unwrap();
    let mut d = db::TuningDb::default();
    d.insert(e.clone());
    // Re-tuning the same kernel, target and bucket replaces the entry.
    d.insert(e.clone());
    assert_eq!(d.entries.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rocmc-tuning.toml");
    d.save(&path).unwrap();
    let back = db::TuningDb::load(&path).unwrap();
    assert_eq!(back, d);
    assert_eq!(back.to_text(), d.to_text());

    // Comments, layout and the candidate lists do not change the hash; the computation does.
    let relaid = KERNEL
        .replace("[tune.params]", "# tuned\n[tune.params]")
        .replace("values = [1, 2, 4]", "values = [1, 2, 4, 8]");
    assert_eq!(db::kernel_hash(&relaid).unwrap(), hash);
    let changed = KERNEL.replace("* 2.0", "* 3.0");
    let l = back.lookup(
        "scale_tunable",
        &db::kernel_hash(&changed).unwrap(),
        "x86-64",
    );
    assert!(l.usable.is_empty());
    assert!(
        l.stale[0].reason.contains("the kernel changed"),
        "{:?}",
        l.stale
    );
    let mut old = back.clone();
    old.entries[0].rocmc = "0.0.1".into();
    let l = old.lookup("scale_tunable", &hash, "x86-64");
    assert!(
        l.stale[0].reason.contains("measured with rocmc 0.0.1"),
        "{:?}",
        l.stale
    );
    assert_eq!(
        back.lookup("scale_tunable", &hash, "x86-64").usable.len(),
        1
    );
    assert!(back
        .lookup("scale_tunable", &hash, "sm_90")
        .usable
        .is_empty());
    // A damaged file is refused with its place.
    std::fs::write(&path, "[[entry]]\nkernel = 3\n").unwrap();
    let err = db::TuningDb::load(&path).unwrap_err();
    assert!(err.contains("rocmc-tuning.toml:2:"), "{err}");
}

#[test]
fn tune_then_build_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("scale_tunable.toml");
    std::fs::write(&k, KERNEL).unwrap();
    let out = rocmc(
        dir.path(),
        &[
            "tune",
            "scale_tunable.toml",
            "--device",
            "cpu",
            "--size",
            "n=100003",
            "--reps",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("12 configurations, 11 meet the constraints, 11 tried"),
        "{shown}"
    );
    assert!(shown.contains("recorded in rocmc-tuning.toml"), "{shown}");
    let d = db::TuningDb::load(&dir.path().join("rocmc-tuning.toml")).unwrap();
    let cfg = d.entries[0]
        .config
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>();

    // The build finds the database in the current folder and says what it used.
    let b = rocmc(
        dir.path(),
        &[
            "build",
            "--mcpu",
            "x86-64",
            "scale_tunable.toml",
            "-o",
            "a.so",
        ],
    );
    let err = text(&b.stderr);
    assert!(b.status.success(), "{err}");
    assert!(err.contains("tuned configuration"), "{err}");
    // Config keys are sorted in the file (T, U), as the kernel declares them.
    assert!(err.contains(&cfg.join(" ")), "{err}");
    let b2 = rocmc(
        dir.path(),
        &[
            "build",
            "-q",
            "--mcpu",
            "x86-64",
            "scale_tunable.toml",
            "-o",
            "b.so",
        ],
    );
    assert!(b2.status.success());
    assert_eq!(
        std::fs::read(dir.path().join("a.so")).unwrap(),
        std::fs::read(dir.path().join("b.so")).unwrap(),
        "builds from one database are byte-identical"
    );
    let n = rocmc(
        dir.path(),
        &[
            "build",
            "--mcpu",
            "x86-64",
            "scale_tunable.toml",
            "-o",
            "c.so",
            "--no-tuning",
        ],
    );
    assert!(
        text(&n.stderr).contains("--no-tuning"),
        "{}",
        text(&n.stderr)
    );

    // Changing the computation makes the entry stale: reported, not used.
    std::fs::write(&k, KERNEL.replace("* 2.0", "* 3.0")).unwrap();
    let s = rocmc(
        dir.path(),
        &[
            "build",
            "--mcpu",
            "x86-64",
            "scale_tunable.toml",
            "-o",
            "d.so",
        ],
    );
    let err = text(&s.stderr);
    assert!(s.status.success(), "{err}");
    assert!(
        err.contains("not used: the kernel changed since it was tuned"),
        "{err}"
    );
    assert!(err.contains("the [tune] defaults"), "{err}");

    // Tuning a kernel without [tune] is refused.
    let v = rocmc(
        root().as_path(),
        &["tune", "examples/vadd.toml", "--size", "n=10", "--dry-run"],
    );
    assert!(!v.status.success());
    assert!(
        text(&v.stderr).contains("has no [tune] section"),
        "{}",
        text(&v.stderr)
    );
}

#[test]
fn tune_on_a_worker_over_loopback() {
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.toml"), KERNEL).unwrap();
    let out = Command::new(rocmc_bin())
        .args([
            "tune", "k.toml", "--size", "n=5000", "--budget", "4", "--reps", "3",
        ])
        .args(["--device", &w.url("cpu")])
        .env("ROCMC_WORKER_SECRET", &w.secret)
        .env(
            "ROCMC_WORKER_FINGERPRINT",
            w.fingerprint.as_deref().unwrap(),
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    drop(w);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("4 tried"), "{shown}");
    let d = db::TuningDb::load(&dir.path().join("rocmc-tuning.toml")).unwrap();
    assert_eq!(d.entries.len(), 1);
    assert_eq!(d.entries[0].target, "x86-64");
    assert!(Path::new(&dir.path().join("rocmc-tuning.toml")).exists());
}

/// Compile here, measure there: a plan exported for the CPU, measured by
/// `rocmc-worker measure` (the binary a GPU host has, no LLVM), imported
/// into the database. Tampering between the steps is refused.
#[test]
fn offline_plan_export_measure_import() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.toml"), KERNEL).unwrap();
    let ex = rocmc(
        dir.path(),
        &[
            "tune", "k.toml", "--export", "plan", "--target", "x86-64", "--size", "n=5000",
            "--budget", "5", "--reps", "3",
        ],
    );
    assert!(ex.status.success(), "{}", text(&ex.stderr));
    assert!(
        text(&ex.stdout).contains("wrote a plan of 5 candidates"),
        "{}",
        text(&ex.stdout)
    );
    let plan = dir.path().join("plan");
    // Importing before measuring says what to do.
    let early = rocmc(dir.path(), &["tune", "k.toml", "--import", "plan"]);
    assert!(!early.status.success());
    assert!(
        text(&early.stderr).contains("measure the plan first"),
        "{}",
        text(&early.stderr)
    );
    let m = Command::new(worker_bin())
        .args(["measure"])
        .arg(&plan)
        .args(["--device", "cpu"])
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", text(&m.stderr));
    assert!(text(&m.stdout).contains("wrote"), "{}", text(&m.stdout));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plan.join("results.json")).unwrap()).unwrap();
    let timed = results["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"].get("Timed").is_some())
        .count();
    assert_eq!(timed, 5, "{results}");

    // A plan from another version of the kernel is refused on import.
    std::fs::write(dir.path().join("k2.toml"), KERNEL.replace("* 2.0", "* 3.0")).unwrap();
    let other = rocmc(dir.path(), &["tune", "k2.toml", "--import", "plan"]);
    assert!(!other.status.success());
    assert!(
        text(&other.stderr).contains("content hashes differ"),
        "{}",
        text(&other.stderr)
    );

    let im = rocmc(dir.path(), &["tune", "k.toml", "--import", "plan"]);
    assert!(im.status.success(), "{}", text(&im.stderr));
    let shown = text(&im.stdout);
    assert!(shown.contains("imported plan: 5 candidates"), "{shown}");
    assert!(shown.contains("recorded in rocmc-tuning.toml"), "{shown}");
    let d = db::TuningDb::load(&dir.path().join("rocmc-tuning.toml")).unwrap();
    assert_eq!(d.entries[0].target, "x86-64");
    assert_eq!(d.entries[0].measured.timed, 5);
    assert_eq!(d.entries[0].bucket.get("n"), Some(&8192));

    // Results edited to claim another candidate set are refused.
    let mut r = results.clone();
    r["candidates"][0]["config"][0][1] = serde_json::json!(4096);
    std::fs::write(plan.join("results.json"), r.to_string()).unwrap();
    let bad = rocmc(dir.path(), &["tune", "k.toml", "--import", "plan"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("not of the plan beside them"),
        "{}",
        text(&bad.stderr)
    );
}

/// The evolutionary search: deterministic for a seed and timings, within
/// the budget, no repeats, only valid configurations, and it moves toward
/// faster configurations on a landscape with one optimum.
#[test]
fn evolutionary_search_is_deterministic_and_converges() {
    let src = r#"
[kernel]
name = "big_space"
sizes = ["n"]
[inputs]
A = { dtype = "f32", shape = ["n"] }
[tune]
constraints = ["P + Q + R + S <= 44"]
[tune.params]
P = { range = [1, 16], step = 1, default = 1 }
Q = { range = [1, 16], step = 1, default = 1 }
R = { range = [1, 16], step = 1, default = 1 }
S = { range = [1, 16], step = 1, default = 1 }
[[stage]]
compute = "B2[x] = A[x]"
shape = ["n"]
"#;
    let k = rocmc::ir::parse_kernel("b.toml", src).unwrap();
    let space = &k.tuning.as_ref().unwrap().space;
    // One optimum at (11, 3, 7, 9); the cost grows with the distance.
    let cost = |c: &[(String, i64)]| -> f64 {
        let want = [11, 3, 7, 9];
        1.0 + c
            .iter()
            .zip(want)
            .map(|((_, v), w)| ((v - w) * (v - w)) as f64)
            .sum::<f64>()
    };
    let run = |seed: u64| {
        let mut s = tune::Search::new(space, 120, seed, true);
        assert_eq!(s.strategy, tune::Strategy::Evolve);
        let mut all = Vec::new();
        let mut batch = s.first();
        while !batch.is_empty() {
            all.extend(batch.iter().cloned());
            let mut ranked: Vec<_> = all.iter().map(|c| (c.clone(), cost(c))).collect();
            ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            batch = s.next(&ranked);
        }
        all
    };
    let a = run(5);
    assert_eq!(a, run(5));
    assert_ne!(a, run(6));
    assert!(a.len() <= 120 && a.len() >= 100, "{}", a.len());
    let unique: std::collections::HashSet<_> = a.iter().collect();
    assert_eq!(unique.len(), a.len(), "no configuration tried twice");
    assert!(a.iter().all(|c| space.broken(c).is_none()));
    assert_eq!(a[0], space.default_config());
    // Breeding beats its own first generation by far (a random draw of the
    // same size is the baseline); the landscape's spread is 1..~700.
    // Over 20 seeds, the same budget: breeding finds configurations much
    // nearer the optimum than one random draw (the landscape spans 1..~700).
    let (mut evolved, mut random) = (0.0, 0.0);
    for seed in 1..=20u64 {
        let e = run(seed).iter().map(|c| cost(c)).fold(f64::MAX, f64::min);
        let mut s = tune::Search::new(space, 120, seed, false);
        let r = s.first().iter().map(|c| cost(c)).fold(f64::MAX, f64::min);
        eprintln!("seed {seed}: best cost evolutionary {e}, random sample {r}");
        evolved += e;
        random += r;
    }
    assert!(
        evolved * 1.5 < random,
        "evolutionary {evolved} vs random {random} (sums of the best costs over 20 seeds)"
    );
}

/// Several devices at once (here this machine's CPU and a worker's on
/// loopback): candidates are spread over both, the finalists re-timed on
/// the first, and devices of different targets are refused.
#[test]
fn tune_across_two_devices() {
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.toml"), KERNEL).unwrap();
    let run = |extra: &[&str]| {
        Command::new(rocmc_bin())
            .args([
                "tune", "k.toml", "--size", "n=5000", "--budget", "6", "--reps", "3", "--device",
                "cpu",
            ])
            .args(extra)
            .env("ROCMC_WORKER_SECRET", &w.secret)
            .env(
                "ROCMC_WORKER_FINGERPRINT",
                w.fingerprint.as_deref().unwrap(),
            )
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let url = w.url("cpu");
    let out = run(&["--device", &url]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains(&format!("(cpu, {url})")), "{shown}");
    assert!(shown.contains("6 tried"), "{shown}");
    let d = db::TuningDb::load(&dir.path().join("rocmc-tuning.toml")).unwrap();
    assert!(
        d.entries[0].measured.device.contains(&url),
        "{:?}",
        d.entries[0].measured
    );
    // A device that does not exist fails the whole run with its name.
    let bad = run(&["--device", "cuda:7"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("cuda:7"),
        "{}",
        text(&bad.stderr)
    );
}

/// On AMD the occupancy LLVM states for each candidate is checked against
/// `--min-occupancy` before anything runs (here in an exported plan, which
/// needs no GPU).
#[test]
fn occupancy_floor_refuses_candidates_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let plan = export_matmul_plan(dir.path(), "gfx942", "6");
    let candidates = plan["candidates"].as_array().unwrap();
    let reasons: Vec<&str> = candidates
        .iter()
        .filter_map(|c| c["refused"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("below the floor of 6")),
        "{reasons:?}"
    );
    // Those that pass are code objects whose occupancy meets the floor.
    for c in candidates.iter().filter(|c| c["module"].is_string()) {
        let bytes = std::fs::read(dir.path().join(c["module"].as_str().unwrap())).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
    }
}

/// `rocmc tune --export` of matmul_tunable at 512³ (6 candidates) for
/// `target` with an occupancy floor; the plan it wrote.
fn export_matmul_plan(dir: &Path, target: &str, floor: &str) -> serde_json::Value {
    let out = rocmc(
        &root(),
        &[
            "tune",
            "examples/matmul_tunable.toml",
            "--export",
            dir.to_str().unwrap(),
            "--target",
            target,
            "--size",
            "M=512",
            "--size",
            "N=512",
            "--size",
            "K=512",
            "--budget",
            "6",
            "--min-occupancy",
            floor,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap()
}

/// `rocmc::Build` (build.rs) reads the tuning database like `rocmc build`:
/// the entry's configuration is built and said, a stale one is warned
/// about and not used, `no_tuning` builds the defaults.
#[test]
fn build_rs_api_uses_the_tuning_database() {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("scale_tunable.toml");
    std::fs::write(&k, KERNEL).unwrap();
    let mut dev = cpu();
    let r = tune::tune(&request(3, 4), dev.as_mut(), &mut |_| {}).unwrap();
    let e = db::entry_from(
        &r,
        &["n".into()],
        &[100_003],
        &db::kernel_hash(KERNEL).unwrap(),
        4,
    )
    .unwrap();
    let mut d = db::TuningDb::default();
    d.insert(e.clone());
    let dbp = dir.path().join("rocmc-tuning.toml");
    d.save(&dbp).unwrap();
    let want = rocmc::ir::tune::describe(&e.config.clone().into_iter().collect());
    let build = |f: &dyn Fn(&mut rocmc::Build)| {
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let mut b = rocmc::Build::new();
        b.kernel(&k)
            .mcpu("sm_90")
            .out_dir(&out)
            .cargo_metadata(false)
            .tuning(&dbp);
        f(&mut b);
        b.try_compile()
    };
    // The entry is for x86-64: an sm_90 build has none and says so.
    let o = build(&|_| {}).unwrap();
    assert!(
        o.tuning[0].contains("no tuning entry for sm_90"),
        "{:?}",
        o.tuning
    );
    // Re-key the entry for sm_90 (as if tuned there) and the build uses it.
    d.entries[0].target = "sm_90".into();
    d.save(&dbp).unwrap();
    let o = build(&|_| {}).unwrap();
    assert!(
        o.tuning[0].contains(&format!("tuned configuration {want}")),
        "{:?}",
        o.tuning
    );
    let ptx = std::fs::read_to_string(&o.bundles[0]).unwrap();
    let o2 = build(&|b| {
        b.no_tuning();
    })
    .unwrap();
    assert!(o2.tuning[0].contains("defaults"), "{:?}", o2.tuning);
    let t = e.config["T"] * e.config["U"];
    if t != 64 {
        assert_ne!(ptx, std::fs::read_to_string(&o2.bundles[0]).unwrap());
    }
    // The kernel changes: the entry is stale and the defaults are built.
    std::fs::write(&k, KERNEL.replace("* 2.0", "* 3.0")).unwrap();
    let o3 = build(&|_| {}).unwrap();
    assert!(o3.tuning[0].contains("defaults"), "{:?}", o3.tuning);
}

/// On NVIDIA the floor is in warps per scheduler, from ptxas's registers
/// and shared memory; matmul_sgemm's 128x128 tiles (the defaults) hold 4.
#[test]
fn occupancy_floor_on_nvidia_uses_ptxas() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |floor: &str| -> Vec<(String, String)> {
        export_matmul_plan(dir.path(), "sm_90", floor)["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| {
                c["refused"]
                    .as_str()
                    .map(|r| (c["config"].to_string(), r.to_string()))
            })
            .collect()
    };
    let high = refused("8");
    let defaults = "[[\"BM\",128],[\"BN\",128],[\"TM\",8],[\"TN\",8],[\"KS\",16]]";
    assert!(
        high.iter().any(|(c, r)| c == defaults
            && r.contains("occupancy 4 warps per scheduler")
            && r.contains("below the floor of 8")),
        "{high:?}"
    );
    // A floor every candidate meets refuses none.
    assert!(refused("1").is_empty());
}
