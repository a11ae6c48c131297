//! `rocmc-gpu-check bench`: times each kernel of a folder at the sizes a
//! plan gives and checks a sample of its results there against the
//! reference interpreter, in pieces that each fit one short call.

use crate::fill::Fills;
use crate::{flag, in_part, kernels, opt, part_flag, DeviceRunner, Placed, Res};
use rocmc_device::launch::{ArgRole, LaunchInfo};
use rocmc_ir::interp::{self, Buffer, Elements, Scalar};
use rocmc_ir::reference::{compare_sampled, random_inputs, Tolerances};
use rocmc_ir::{DType, Kernel, TensorKind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const USAGE: &str = "bench DIR PLAN.json [--reps R] [--only NAME,...] [--part I/N] \
[--check-rows R] [--check-cols C] [--fill DIR | --host-inputs]";

/// What a run of `bench` covers and how.
struct Options {
    reps: u32,
    only: Option<Vec<String>>,
    /// Part `.0` of `.1` (1-based): the plan's kernels in name order, every
    /// `.1`-th from the `.0`-th.
    part: (usize, usize),
    rows: usize,
    cols: usize,
    /// The fill kernels; `None`: inputs drawn on the host and uploaded.
    fills: Option<PathBuf>,
}

fn options(dir: &Path, args: &[String]) -> Res<Options> {
    let fills = match (
        opt(args, "--fill")?,
        args.iter().any(|a| a == "--host-inputs"),
    ) {
        (Some(_), true) => return Err("--fill and --host-inputs exclude each other".into()),
        (Some(d), false) => Some(PathBuf::from(d)),
        (None, true) => None,
        // The bundle's layout: kernels/ and fill/ side by side.
        (None, false) => dir.parent().map(|p| p.join("fill")).filter(|p| p.is_dir()),
    };
    Ok(Options {
        reps: flag(args, "--reps", 50)? as u32,
        only: opt(args, "--only")?.map(|v| v.split(',').map(str::to_string).collect()),
        part: part_flag(args)?,
        rows: flag(args, "--check-rows", 8)? as usize,
        cols: flag(args, "--check-cols", 64)? as usize,
        fills,
    })
}

pub(crate) fn bench(args: &[String]) -> Res<bool> {
    let dir = PathBuf::from(args.first().ok_or(USAGE)?);
    let plan_path = args.get(1).ok_or(USAGE)?;
    let o = options(&dir, args)?;
    let plan: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(plan_path).map_err(|e| format!("{plan_path}: {e}"))?,
    )
    .map_err(|e| format!("{plan_path}: {e}"))?;
    if let Some(only) = &o.only {
        if let Some(n) = only.iter().find(|n| plan.get(n.as_str()).is_none()) {
            return Err(format!("--only {n}: the plan has no entry `{n}`"));
        }
    }
    let local = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let mut runner = DeviceRunner::new(local, "ptx");
    let mut fills = o.fills.as_deref().map(Fills::open).transpose()?;
    let chosen: Vec<_> = kernels(&dir, "ptx")?
        .into_iter()
        .filter(|(name, _, _)| plan.get(name).is_some())
        .filter(|(name, _, _)| o.only.as_ref().is_none_or(|only| only.contains(name)))
        .enumerate()
        .filter(|(i, _)| in_part(*i, o.part))
        .map(|(_, e)| e)
        .collect();
    let mut all_ok = true;
    for (name, k, ptx) in chosen {
        let given = &plan[&name];
        let sizes: Vec<i64> = k
            .sizes
            .iter()
            .map(|s| {
                given
                    .get(&s.name)
                    .and_then(|v| v.as_i64())
                    .ok_or(format!("{name}: plan lacks size {}", s.name))
            })
            .collect::<Res<_>>()?;
        // One kernel's failure is reported and the others still run.
        match one(&mut runner, fills.as_mut(), &o, &name, &k, &ptx, &sizes) {
            Ok(line) => {
                all_ok &= line["check"]["result"] != "MISMATCH";
                println!("{line}");
            }
            Err(e) => {
                all_ok = false;
                eprintln!("{name}: {e}");
                println!(
                    "{}",
                    serde_json::json!({"tool": "rocmc-error", "kernel": name, "error": e})
                );
            }
        }
    }
    Ok(all_ok)
}

/// Places, checks and times one kernel: its JSON line.
fn one(
    runner: &mut DeviceRunner,
    fills: Option<&mut Fills>,
    o: &Options,
    name: &str,
    k: &Kernel,
    ptx: &[u8],
    sizes: &[i64],
) -> Res<serde_json::Value> {
    runner.load(ptx)?;
    let placed = match fills {
        Some(f) => f.place(&mut *runner.dev, k, sizes, 42)?,
        None => runner.place(k, &random_inputs(k, sizes, &HashMap::new(), 42)?)?,
    };
    // Checked on the first run's results, before timing runs it again (a
    // kernel that accumulates into its output would not keep them).
    runner.launch(k, sizes, &placed)?;
    let check = match o.rows {
        0 => serde_json::json!({"result": "not checked: --check-rows 0"}),
        _ => check_sampled(runner, k, sizes, &placed, o)?,
    };
    let mut ms = runner.time(k, sizes, &placed, o.reps)?;
    let bytes = bytes_moved(k, runner.launch_info()?, &placed.lens);
    runner.release(placed)?;
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    let flops = rocmc_ir::reference::flops(k, sizes);
    let sz: serde_json::Map<String, serde_json::Value> = k
        .sizes
        .iter()
        .zip(sizes)
        .map(|(s, v)| (s.name.clone(), (*v).into()))
        .collect();
    Ok(serde_json::json!({
        "tool": "rocmc", "kernel": name, "sizes": sz, "ms": median,
        "min_ms": ms[0], "gbps": bytes as f64 / median / 1e6,
        "tflops": flops as f64 / median / 1e9, "bytes": bytes, "flops": flops,
        "inputs": if o.fills.is_some() { "drawn on the GPU" } else { "drawn on the host" },
        "check": check,
    }))
}

/// A sample of every result's rows at the plan's sizes against the
/// reference interpreter, which computes only what those rows need and
/// reads only those inputs' elements from the device, a page at a time.
fn check_sampled(
    runner: &mut DeviceRunner,
    k: &Kernel,
    sizes: &[i64],
    p: &Placed,
    o: &Options,
) -> Res<serde_json::Value> {
    let cell = RefCell::new(runner);
    let inputs: Vec<Paged> = (0..k.tensors.len())
        .filter(|&i| k.tensors[i].kind == TensorKind::Input)
        .map(|i| Paged {
            runner: &cell,
            id: p.ids[i],
            dtype: k.tensors[i].dtype,
            len: p.lens[i] as usize,
            pages: RefCell::new(HashMap::new()),
        })
        .collect();
    let sources: Vec<&dyn Elements> = inputs.iter().map(|x| x as &dyn Elements).collect();
    let run = interp::run_sampled_from(k, sizes, &p.pvals, &sources, o.rows, o.cols, 7);
    let pages: usize = inputs.iter().map(|x| x.pages.borrow().len()).sum();
    drop(sources);
    drop(inputs);
    let runner = cell.into_inner();
    let sampled = match run {
        Ok(s) => s,
        Err(e) => return Ok(serde_json::json!({"result": format!("not checked: {e}")})),
    };
    let tol = Tolerances::default().with_sums(k, sizes);
    let cmp = compare_sampled(k, &sampled, &tol, |i| runner.read(p, i))?;
    let ok = cmp.iter().all(|c| c.ok());
    let worst = cmp.iter().map(|c| c.max_error).fold(0.0, f64::max);
    let rows: Vec<String> = sampled
        .iter()
        .map(|s| {
            format!(
                "{}: {} of {} rows",
                k.tensors[s.tensor].name, s.rows_sampled, s.rows
            )
        })
        .collect();
    Ok(serde_json::json!({
        "result": if ok { "ok" } else { "MISMATCH" },
        "max_error": worst,
        "elements": cmp.iter().map(|c| c.elements).sum::<usize>(),
        "rows": rows.join(", "),
        "input_pages_read": pages,
    }))
}

/// Elements of one input on the device, read in pages of [`PAGE`] as the
/// sampled interpreter asks for them.
struct Paged<'a, 'r> {
    runner: &'a RefCell<&'r mut DeviceRunner>,
    id: u32,
    dtype: DType,
    len: usize,
    pages: RefCell<HashMap<usize, Buffer>>,
}

const PAGE: usize = 1 << 16;

impl Elements for Paged<'_, '_> {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn len(&self) -> usize {
        self.len
    }
    fn get(&self, off: usize) -> Result<Scalar, String> {
        let page = off / PAGE;
        if let Some(b) = self.pages.borrow().get(&page) {
            return Ok(b.get(off % PAGE));
        }
        let (start, size) = (page * PAGE, self.dtype.size());
        let n = PAGE.min(self.len - start);
        let bytes = self
            .runner
            .borrow_mut()
            .dev
            .read(self.id, (start * size) as u64, (n * size) as u64)
            .map_err(|e| e.to_string())?;
        let b = Buffer::from_bytes(self.dtype, &bytes);
        let v = b.get(off % PAGE);
        self.pages.borrow_mut().insert(page, b);
        Ok(v)
    }
}

/// Bytes of every tensor a kernel of the module reads or writes, once.
fn bytes_moved(k: &Kernel, launch: &LaunchInfo, lens: &[u64]) -> u64 {
    let mut seen = Vec::new();
    for kl in &launch.kernels {
        for a in &kl.args {
            if a.role == ArgRole::Buffer && !seen.contains(&a.name) {
                seen.push(a.name.clone());
            }
        }
    }
    k.tensors
        .iter()
        .zip(lens)
        .filter(|(t, _)| seen.contains(&t.name))
        .filter(|(t, _)| match t.kind {
            TensorKind::Input => true,
            TensorKind::Stage(s) => k.stored(s),
        })
        .map(|(t, n)| n * t.dtype.size() as u64)
        .sum()
}
