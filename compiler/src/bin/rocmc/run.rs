//! `rocmc run`: a kernel on seeded random or given inputs, compared with
//! the reference interpreter.

use crate::{io, FpContract};
use rocmc::{Error, Options};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RunArgs {
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
