//! `rocmc run`: a kernel on seeded random or given inputs, compared with
//! the reference interpreter.

use super::{io, read_kernel, FpContract};
use crate::{Error, Options};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The kernel file, or a module built by rocmc (.hsaco, .hipfb, .ptx: GPU only; .so: the CPU device; no --check).
    kernel: PathBuf,
    /// Where to run: `cpu` (the scheduled kernel compiled for this machine by LLVM, blocks and
    /// threads as loops), an AMD GPU: `amdgpu`, `amdgpu:N`, `amdgpu://GPU-<uuid>` (the HIP
    /// runtime is loaded from ROCMC_HIP_LIBRARY or libamdhip64.so.7/.6/.5), an NVIDIA GPU:
    /// `cuda:N` (through the CUDA driver, libcuda.so.1), or a worker's
    /// device: `remote://HOST:PORT/DEVICE` (DEVICE: cpu, cuda:N, amdgpu:N; secret from
    /// ROCMC_WORKER_SECRET, see docs/remote.md), or `loops:PROCESSOR`: the loop IR lowered
    /// for that GPU, run by the interpreter as the GPU runs it, every LDS access checked
    /// for races between threads (default gfx942).
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
    /// An input tensor's values: a .npy file (`X=x.npy`; its dtype and shape must be the
    /// tensor's, and sizes not given are read off its shape) or a distribution:
    /// `uniform:LO,HI` (integers: LO..HI, HI excluded), `normal:MEAN,STD`, `const:X`; a bound
    /// may name a size (`ids=uniform:0,vocab`). Default: see docs/run.md.
    #[arg(long = "input", value_name = "NAME=SPEC", value_parser = parse_input)]
    inputs: Vec<(String, String)>,
    /// Write the inputs, the results and the interpreter's results as .npy files into
    /// DIR/inputs, DIR/outputs and DIR/reference (created if missing).
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Set [tune] parameters, e.g. BM=64,TM=4 (as `rocmc build --tune`).
    #[arg(long, value_name = "NAME=N,...")]
    tune: Option<String>,
    /// Largest accepted |got - want| / (1 + |want|): `1e-3` for every computed tensor or
    /// `NAME=X` for one. Defaults by dtype: f64 1e-9, f32 1e-4, f16 1e-2, bf16 5e-2, integers 0.
    #[arg(long = "tolerance", value_name = "[NAME=]X", value_parser = parse_tolerance)]
    tolerances: Vec<(Option<String>, f64)>,
}

fn parse_input(s: &str) -> Result<(String, String), String> {
    let (n, v) = s.split_once('=').ok_or_else(|| {
        format!(
            "`{s}`: write NAME=FILE.npy or NAME=DISTRIBUTION, e.g. X=x.npy or ids=uniform:0,1000"
        )
    })?;
    Ok((n.trim().to_string(), v.trim().to_string()))
}

fn parse_tolerance(s: &str) -> Result<(Option<String>, f64), String> {
    let (name, v) = match s.split_once('=') {
        Some((n, v)) => (Some(n.trim().to_string()), v),
        None => (None, s),
    };
    match v.trim().parse::<f64>() {
        Ok(x) if x >= 0.0 => Ok((name, x)),
        _ => Err(format!("`{s}`: {v} is not a non-negative number")),
    }
}

pub fn parse_size(s: &str) -> Result<(String, i64), String> {
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

pub fn parse_param(s: &str) -> Result<(String, f64), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write NAME=X, e.g. alpha=2.5"))?;
    let v = v
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("`{s}`: {v} is not a number"))?;
    Ok((n.trim().to_string(), v))
}

pub fn run(a: RunArgs) -> Result<(), Error> {
    let ext = a
        .kernel
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    if matches!(ext, "hsaco" | "hipfb" | "co" | "ptx" | "so") {
        return run_binary(&a);
    }
    let source = read_kernel(&a.kernel)?;
    let tune = match &a.tune {
        Some(t) => crate::ir::tune::parse_assignments(t)
            .map_err(|e| Error::Usage(format!("--tune: {e}")))?,
        None => Vec::new(),
    };
    let front = crate::frontend_with(&a.kernel.display().to_string(), &source, &tune)?;
    let spec = spec(&a, &front.kernel)?;
    let sizes = spec.sizes.clone();
    let shown: Vec<String> = front
        .kernel
        .sizes
        .iter()
        .zip(&sizes)
        .map(|(s, v)| format!("{}={v}", s.name))
        .collect();
    let t0 = std::time::Instant::now();
    let (where_, report, kept) = {
        // The target comes from the device (`run_on`); these are the rest.
        let mut opts = Options::new("");
        opts.fp_contract = a.fp_contract == FpContract::Fast;
        opts.emulate = a.emulate.clone();
        let cpu = a.device == "cpu";
        let what = crate::run::GpuRun {
            // On the CPU the comparison is the point of a run.
            check: a.check || cpu || a.device.starts_with("loops"),
            bench: a.bench,
        };
        let r = crate::run::run_device(&front, &a.device, &spec, what, &opts)?;
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
        let where_ = if cpu {
            "cpu".to_string()
        } else {
            r.device.clone()
        };
        (where_, r.comparisons, r.kept)
    };
    if let Some(dir) = &a.output {
        write_kept(dir, &kept)?;
    }
    println!(
        "{} on {where_} ({}), seed {}, {:.0} ms",
        front.kernel.name,
        shown.join(" "),
        a.seed,
        t0.elapsed().as_secs_f64() * 1e3
    );
    // A file's [tune] values, or values given: not the knobs of default
    // schedules nobody asked about (their rule may differ per target).
    let declared = |t: &crate::ir::tune::Tuning| {
        t.space
            .params
            .iter()
            .any(|p| p.span != crate::ir::Span::default())
    };
    if let Some(t) = front
        .kernel
        .tuning
        .as_ref()
        .filter(|t| a.tune.is_some() || declared(t))
    {
        println!("tune values: {}", crate::ir::tune::describe(&t.config));
    }
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

/// `rocmc run FILE.hsaco|.hipfb|.ptx|.so --device D`: a compiled module,
/// without its source, on any device that loads it.
fn run_binary(a: &RunArgs) -> Result<(), Error> {
    let cpu_module = a.kernel.extension().is_some_and(|e| e == "so");
    if a.device == "cpu" && !cpu_module {
        return Err(Error::Usage(format!(
            "{}: a code object or PTX runs on a GPU only; to run on the CPU, give the kernel file or a shared object built with --mcpu x86-64",
            a.kernel.display()
        )));
    }
    if a.check {
        return Err(Error::Usage("--check needs the kernel file: the reference interpreter runs kernel source, not code objects".into()));
    }
    let source_only = [
        ("--input", !a.inputs.is_empty()),
        ("--output", a.output.is_some()),
        ("--tune", a.tune.is_some()),
        ("--tolerance", !a.tolerances.is_empty()),
    ];
    if let Some((flag, _)) = source_only.iter().find(|(_, given)| *given) {
        return Err(Error::Usage(format!(
            "{flag} needs the kernel file: a code object carries no tensor names, [tune] section or reference"
        )));
    }
    let bytes = std::fs::read(&a.kernel).map_err(io(&a.kernel))?;
    let sizes: std::collections::HashMap<String, i64> = a.sizes.iter().cloned().collect();
    let params: std::collections::HashMap<String, f64> = a.params.iter().cloned().collect();
    let r = crate::run::run_code_object(&bytes, &a.device, &sizes, &params, a.seed, a.bench)?;
    println!("{} ran on {}", a.kernel.display(), r.device);
    for (name, ms) in &r.kernel_ms {
        println!("{name}: median {ms:.4} ms over {} runs", a.bench);
    }
    Ok(())
}

/// The run's sizes, parameters, inputs and tolerances from the command
/// line. Sizes not given are read off the shapes of .npy inputs.
fn spec(a: &RunArgs, k: &crate::ir::Kernel) -> Result<crate::run::RunSpec, Error> {
    use crate::ir::Index;
    use crate::run::{Distribution, InputChoice};
    let mut given: HashMap<String, i64> = a.sizes.iter().cloned().collect();
    let size_names = k.size_names();
    let input = |name: &str| -> Result<&crate::ir::Tensor, Error> {
        let inputs: Vec<&str> = k.inputs().map(|(_, t)| t.name.as_str()).collect();
        match k.tensors.iter().find(|t| t.name == name) {
            Some(t) if t.kind == crate::ir::TensorKind::Input => Ok(t),
            Some(_) => Err(Error::Usage(format!(
                "--input {name}: `{name}` is computed by the kernel; only inputs can be given (its inputs: {})",
                inputs.join(", ")
            ))),
            None => Err(Error::Usage(format!(
                "--input {name}: the kernel has no tensor `{name}` (its inputs: {})",
                inputs.join(", ")
            ))),
        }
    };
    // Files first: their shapes may give sizes.
    let mut files: Vec<(String, PathBuf, Vec<i64>, crate::ir::interp::Buffer)> = Vec::new();
    for (name, what) in &a.inputs {
        let path = Path::new(what);
        if !(what.ends_with(".npy") || path.is_file()) {
            continue;
        }
        let t = input(name)?;
        let (shape, values) = crate::run::npy::read(path, name, t.dtype)?;
        if shape.len() != t.shape.len() {
            return Err(Error::Usage(format!(
                "--input {name}={what}: the file holds a {}-dimensional array {shape:?}, the kernel's `{name}` has {} dimensions",
                shape.len(),
                t.shape.len()
            )));
        }
        for (ext, got) in t.shape.iter().zip(&shape) {
            if let Index::Size(s) = ext {
                let n = &size_names[s.0 as usize];
                given.entry(n.clone()).or_insert(*got);
            }
        }
        files.push((name.clone(), path.to_path_buf(), shape, values));
    }
    let sizes = crate::run::size_values(k, &given)?;
    let mut inputs = HashMap::new();
    for (name, path, shape, values) in files {
        let t = input(&name)?;
        let want = crate::ir::interp::shape_of(t, &sizes).unwrap_or_default();
        if shape != want {
            let text: Vec<String> = t
                .shape
                .iter()
                .map(|e| e.display(&size_names, &[]).to_string())
                .collect();
            return Err(Error::Usage(format!(
                "--input {name}={}: the file holds {shape:?}; the kernel's `{name}` is [{}] = {want:?} for these sizes",
                path.display(),
                text.join(", ")
            )));
        }
        inputs.insert(name, InputChoice::Given(values));
    }
    let size_of = |n: &str| k.sizes.iter().position(|s| s.name == n).map(|i| sizes[i]);
    for (name, what) in &a.inputs {
        if inputs.contains_key(name) {
            continue;
        }
        input(name)?;
        let d = Distribution::parse(what, &size_of)
            .map_err(|e| Error::Usage(format!("--input {name}={what}: {e}")))?;
        inputs.insert(name.clone(), InputChoice::Random(d));
    }
    let mut tolerance = crate::run::Tolerances::default();
    for (name, x) in &a.tolerances {
        match name {
            None => tolerance.all = Some(*x),
            Some(n) => {
                let computed = k
                    .tensors
                    .iter()
                    .any(|t| &t.name == n && t.kind != crate::ir::TensorKind::Input);
                if !computed {
                    return Err(Error::Usage(format!(
                        "--tolerance {n}={x}: the kernel computes no tensor `{n}`"
                    )));
                }
                tolerance.by_tensor.insert(n.clone(), *x);
            }
        }
    }
    Ok(crate::run::RunSpec {
        sizes,
        params: a.params.iter().cloned().collect(),
        seed: a.seed,
        inputs,
        tolerance,
        keep: a.output.is_some(),
    })
}

/// Writes what a run kept into DIR/inputs, DIR/outputs and DIR/reference.
fn write_kept(dir: &Path, kept: &crate::run::Kept) -> Result<(), Error> {
    let mut n = 0;
    for (sub, tensors) in [
        ("inputs", &kept.inputs),
        ("outputs", &kept.outputs),
        ("reference", &kept.reference),
    ] {
        if tensors.is_empty() {
            continue;
        }
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
        for t in tensors {
            super::build::write_atomic(
                &d.join(format!("{}.npy", t.name)),
                &crate::run::npy::encode(t),
            )?;
            n += 1;
        }
    }
    eprintln!(
        "wrote {n} .npy files into {}{}",
        dir.display(),
        if kept.reference.is_empty() {
            " (no reference: the interpreter runs with --check)"
        } else {
            ""
        }
    );
    Ok(())
}
