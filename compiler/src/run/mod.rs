//! `rocmc run --device cpu`: execute a kernel's scheduled, lowered form on
//! the host through LLVM and compare it with the reference interpreter.

pub mod npy;

use crate::{Error, Frontend};
use rocmc_ir::interp::{self, Buffer, Data};
use rocmc_ir::reference::{compare_with, prepare_inputs, random_buffer, Inputs};
pub use rocmc_ir::reference::{
    errors, flops, tolerance, Comparison, Distribution, InputChoice, Rng, Tolerances,
};
use rocmc_ir::{DType, Kernel};
use std::collections::HashMap;

/// What a run feeds the kernel and how it judges the results.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    /// Sizes in kernel order ([`size_values`]).
    pub sizes: Vec<i64>,
    /// Parameter values by name (the rest: seeded random in [0.5, 1.5)).
    pub params: HashMap<String, f64>,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Input tensors drawn from a chosen distribution or given as data.
    pub inputs: HashMap<String, InputChoice>,
    /// Tolerances of the comparison with the interpreter.
    pub tolerance: Tolerances,
    /// Keep the inputs, the results and the interpreter's ([`Kept`]).
    pub keep: bool,
}

impl RunSpec {
    /// Seeded random inputs for these sizes, nothing chosen, default tolerances.
    pub fn new(sizes: &[i64], params: &HashMap<String, f64>, seed: u64) -> RunSpec {
        RunSpec {
            sizes: sizes.to_vec(),
            params: params.clone(),
            seed,
            ..Default::default()
        }
    }
}

/// One tensor's values, with its name and shape, as a run kept them.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The tensor's name in the kernel file.
    pub name: String,
    /// Its extents for the run's sizes.
    pub shape: Vec<i64>,
    /// Its values, row-major.
    pub values: Buffer,
}

/// What a run with [`RunSpec::keep`] kept: every input, every computed
/// tensor in memory, and the interpreter's results where it ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kept {
    /// The inputs the kernel was given.
    pub inputs: Vec<Tensor>,
    /// The kernel's results.
    pub outputs: Vec<Tensor>,
    /// The reference interpreter's results (empty where it did not run).
    pub reference: Vec<Tensor>,
}

/// Comparisons with the interpreter (if `want`) and, with `spec.keep`,
/// the results and the reference as [`Tensor`]s.
fn judge<E>(
    k: &Kernel,
    spec: &RunSpec,
    want: Option<&[Buffer]>,
    mut got: impl FnMut(usize) -> Result<Vec<u8>, E>,
    kept: &mut Kept,
) -> Result<Vec<Comparison>, E> {
    let shape = |i: usize| interp::shape_of(&k.tensors[i], &spec.sizes).unwrap_or_default();
    let named = |i: usize, values: Buffer| Tensor {
        name: k.tensors[i].name.clone(),
        shape: shape(i),
        values,
    };
    let Some(want) = want else {
        if spec.keep {
            for (i, t) in k.stored_results() {
                let b = Buffer::from_bytes(t.dtype, &got(i)?);
                kept.outputs.push(named(i, b));
            }
        }
        return Ok(Vec::new());
    };
    let tolerance = spec.tolerance.clone().with_sums(k, &spec.sizes);
    let (cmp, outs) = compare_with(k, want, &tolerance, spec.keep, got)?;
    for (i, b) in outs {
        kept.reference.push(named(i, want[i].clone()));
        kept.outputs.push(named(i, b));
    }
    Ok(cmp)
}

/// After a device run: the interpreter's results on the same `given`
/// parameters and inputs (with `check`), compared with what the device
/// computed (`got`), and what the run keeps, into `report`.
fn judge_device(
    k: &Kernel,
    spec: &RunSpec,
    check: bool,
    given: (&[interp::Scalar], &[Buffer]),
    report: &mut GpuReport,
    got: impl FnMut(usize) -> Result<Vec<u8>, Error>,
) -> Result<(), Error> {
    let (pvals, inputs) = given;
    let want = if check {
        Some(reference(k, &spec.sizes, pvals, inputs)?)
    } else {
        None
    };
    report.kept.inputs = kept_inputs(k, spec, inputs);
    report.comparisons = judge(k, spec, want.as_deref(), got, &mut report.kept)?;
    Ok(())
}

/// The inputs as [`Tensor`]s, for [`Kept`].
fn kept_inputs(k: &Kernel, spec: &RunSpec, inputs: &[Buffer]) -> Vec<Tensor> {
    if !spec.keep {
        return Vec::new();
    }
    k.inputs()
        .zip(inputs)
        .map(|((_, t), b)| Tensor {
            name: t.name.clone(),
            shape: interp::shape_of(t, &spec.sizes).unwrap_or_default(),
            values: b.clone(),
        })
        .collect()
}

/// Refuses sizes that break a kernel's launch requirements before any
/// input is drawn (they imply tensors of billions of elements).
fn check_requirements(front: &Frontend, sizes: &[i64]) -> Result<(), Error> {
    let by_name: HashMap<String, i64> = front
        .kernel
        .sizes
        .iter()
        .zip(sizes)
        .map(|(s, v)| (s.name.clone(), *v))
        .collect();
    for kl in &front.launch.kernels {
        kl.check_requirements(&by_name)
            .map_err(|e| Error::Usage(format!("--size: kernel `{}`: {e}", kl.name)))?;
    }
    Ok(())
}

fn inputs_for(k: &Kernel, spec: &RunSpec) -> Result<Inputs, Error> {
    k.check_sizes(&spec.sizes).map_err(Error::Usage)?;
    prepare_inputs(k, &spec.sizes, &spec.params, spec.seed, &spec.inputs).map_err(Error::Usage)
}

/// Sizes in kernel order from `name=value` pairs; every size must be given,
/// non-negative and within its declared maximum.
pub fn size_values(k: &Kernel, given: &HashMap<String, i64>) -> Result<Vec<i64>, Error> {
    for name in given.keys() {
        if !k.sizes.iter().any(|s| &s.name == name) {
            return Err(Error::Usage(format!(
                "--size {name}: the kernel has no size `{name}` (its sizes: {})",
                names(k)
            )));
        }
    }
    k.sizes
        .iter()
        .map(|s| match given.get(&s.name) {
            None => Err(Error::Usage(format!(
                "missing --size {}=N (the kernel's sizes: {})",
                s.name,
                names(k)
            ))),
            Some(v) if *v < 0 || *v as u64 > s.max => Err(Error::Usage(format!(
                "--size {}={v}: must be between 0 and {}",
                s.name, s.max
            ))),
            Some(v) => Ok(*v),
        })
        .collect::<Result<Vec<i64>, Error>>()
        .and_then(|v| {
            k.check_divisible(&v)
                .map_err(|e| Error::Usage(format!("--size: {e}")))?;
            Ok(v)
        })
}

fn names(k: &Kernel) -> String {
    k.sizes
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reference interpreter's result. A gather whose data subscripts
/// fell outside their tensor (and were clamped, as on every path) is
/// reported on stderr: the result is defined, but rarely what was meant.
fn reference(
    k: &Kernel,
    sizes: &[i64],
    pvals: &[interp::Scalar],
    inputs: &[interp::Buffer],
) -> Result<Vec<interp::Buffer>, Error> {
    let (bufs, clamped) = interp::run_reporting(k, sizes, pvals, inputs).map_err(|e| {
        Error::Usage(format!(
            "the reference interpreter refused these inputs: {e}"
        ))
    })?;
    if let Some(c) = clamped {
        eprintln!("rocmc: note: {c} (the first such access)");
    }
    Ok(bufs)
}

/// Runs the kernel on the host through LLVM and with the interpreter, on
/// the same seeded random inputs, and compares every computed tensor.
pub fn run_cpu(
    front: &Frontend,
    sizes: &[i64],
    params: &HashMap<String, f64>,
    seed: u64,
    fp_contract: bool,
) -> Result<Vec<Comparison>, Error> {
    run_cpu_with(front, &RunSpec::new(sizes, params, seed), fp_contract).map(|(c, _)| c)
}

/// [`run_cpu`] with chosen inputs and tolerances; returns what it kept too.
pub fn run_cpu_with(
    front: &Frontend,
    spec: &RunSpec,
    fp_contract: bool,
) -> Result<(Vec<Comparison>, Kept), Error> {
    let k = &front.kernel;
    check_requirements(front, &spec.sizes)?;
    let Inputs {
        inputs,
        pvals,
        pbytes,
        mut host,
    } = inputs_for(k, spec)?;
    let want = reference(k, &spec.sizes, &pvals, &inputs)?;
    let sizes32: Vec<i32> = spec.sizes.iter().map(|s| *s as i32).collect();
    rocmc_codegen::host::run_on_host(k, &front.program, &sizes32, &pbytes, &mut host, fp_contract)
        .map_err(Error::Codegen)?;
    let mut kept = Kept {
        inputs: kept_inputs(k, spec, &inputs),
        ..Default::default()
    };
    let cmp = judge(
        k,
        spec,
        Some(&want),
        |i| Ok::<_, Error>(std::mem::take(&mut host[i])),
        &mut kept,
    )?;
    Ok((cmp, kept))
}

/// Runs the kernel's loop IR as a GPU would (every work-group, its threads
/// in lockstep, LDS, asynchronous copies landing as late as allowed) with
/// the interpreter, checking every LDS access for races between threads
/// and every barrier for divergence, and compares the results with the
/// kernel's meaning. For a kernel lowered for a target
/// ([`Frontend::for_target`]), matrix instructions run through that
/// target's lane layouts. A race or divergent barrier is an
/// [`Error::Lowering`]: a rocmc bug, never the kernel author's.
pub fn run_loops(front: &Frontend, spec: &RunSpec) -> Result<Vec<Comparison>, Error> {
    let k = &front.kernel;
    check_requirements(front, &spec.sizes)?;
    let Inputs { inputs, pvals, .. } = inputs_for(k, spec)?;
    let want = reference(k, &spec.sizes, &pvals, &inputs)?;
    let got = interp::run_lowered(k, &front.program, &spec.sizes, &pvals, &inputs)
        .map_err(|e| Error::Lowering(format!("{}: {e}", front.file)))?;
    let tolerance = spec.tolerance.clone().with_sums(k, &spec.sizes);
    compare_with(k, &want, &tolerance, false, |i| {
        Ok::<_, Error>(got[i].to_bytes())
    })
    .map(|(c, _)| c)
}

/// Result of a GPU run: comparisons (with `--check`) and kernel times.
#[derive(Clone, Debug, Default)]
pub struct GpuReport {
    /// The device: name and architecture.
    pub device: String,
    /// Comparisons with the interpreter (with `check`).
    pub comparisons: Vec<Comparison>,
    /// Median time of each kernel over the benchmark repetitions, ms.
    pub kernel_ms: Vec<(String, f64)>,
    /// Bytes of all tensors (inputs and outputs), for GB/s.
    pub bytes_moved: u64,
    /// Floating-point operations of the kernel, for GFLOP/s.
    pub flops: u64,
    /// What the run kept (with [`RunSpec::keep`]).
    pub kept: Kept,
}

/// What a GPU run does besides running: compare, time.
#[derive(Clone, Copy, Debug, Default)]
pub struct GpuRun {
    /// Compare the results with the reference interpreter.
    pub check: bool,
    /// Time this many repetitions with HIP events.
    pub bench: usize,
}

/// Runs a compiled module (code object, bundle, PTX or CPU shared object)
/// on a device, with inputs generated from the launch geometry rocmc
/// stored in it (dtypes, shapes, size bounds). There is no kernel source,
/// so no comparison with the interpreter; `bench` repetitions are timed.
pub fn run_code_object(
    bytes: &[u8],
    device: &str,
    sizes: &HashMap<String, i64>,
    params: &HashMap<String, f64>,
    seed: u64,
    bench: usize,
) -> Result<GpuReport, Error> {
    use rocmc_device::launch::ArgRole;
    use rocmc_device::Arg;
    let rt = device_error;
    // Read the launch geometry before touching the device, so a file without it is refused anywhere.
    let launch = rocmc_device::module_launch(bytes).map_err(|e| {
        Error::Usage(format!(
            "the module has no rocmc launch geometry ({e}); run the kernel file instead"
        ))
    })?;
    let mut all_sizes = HashMap::new();
    for s in &launch.sizes {
        let v = *sizes.get(&s.name).ok_or_else(|| {
            Error::Usage(format!(
                "missing --size {}=N (the kernel's sizes: {})",
                s.name,
                launch
                    .sizes
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if v < 0 || v as u64 > s.max {
            return Err(Error::Usage(format!(
                "--size {}={v}: must be between 0 and {}",
                s.name, s.max
            )));
        }
        all_sizes.insert(s.name.clone(), v);
    }
    let mut dev = open_device(device)?;
    let module = dev.load_module(bytes).map_err(rt)?;
    let mut rng = Rng(seed);
    // One buffer per named tensor, shared by every kernel that names it.
    let mut buffers: HashMap<String, (u32, usize, &'static str)> = HashMap::new();
    let info = dev.info().clone();
    let mut report = GpuReport {
        device: format!("{} ({})", info.description, info.target),
        ..Default::default()
    };
    for kl in &launch.kernels {
        for a in kl.args.iter().filter(|a| a.role == ArgRole::Buffer) {
            if buffers.contains_key(&a.name) {
                continue;
            }
            let t = DType::parse(&a.dtype)
                .ok_or_else(|| Error::Usage(format!("unknown dtype {}", a.dtype)))?;
            let n = a
                .shape
                .iter()
                .map(|e| e.eval(&all_sizes).unwrap_or(0))
                .product::<i64>()
                .max(0) as usize;
            let host = random_buffer(&mut rng, t, n).to_bytes();
            let b = dev.upload(&host).map_err(rt)?;
            report.bytes_moved += host.len() as u64;
            buffers.insert(a.name.clone(), (b, n, t.name()));
        }
    }
    let mut times = vec![Vec::new(); launch.kernels.len()];
    for (i, kl) in launch.kernels.iter().enumerate() {
        let mut args = Vec::new();
        for a in &kl.args {
            args.push(match a.role {
                ArgRole::Buffer => {
                    let (b, n, d) = &buffers[&a.name];
                    Arg::Buffer {
                        id: *b,
                        dtype: d.to_string(),
                        len: *n as u64,
                        offset: 0,
                    }
                }
                ArgRole::Size => Arg::Size(all_sizes[&a.name] as i32),
                ArgRole::Scalar => {
                    let t = DType::parse(&a.dtype)
                        .ok_or_else(|| Error::Usage(format!("unknown dtype {}", a.dtype)))?;
                    let v = params.get(&a.name).copied().unwrap_or(1.0);
                    let b = Buffer {
                        dtype: t,
                        data: if t.is_float() {
                            Data::F(vec![v])
                        } else {
                            Data::I(vec![v as i64])
                        },
                    };
                    Arg::Scalar {
                        dtype: t.name().into(),
                        bytes: b.to_bytes(),
                    }
                }
            });
        }
        times[i] = dev
            .time(&module, &kl.name, &args, 0, bench.max(1) as u32)
            .map_err(rt)?;
    }
    dev.synchronize().map_err(rt)?;
    if bench > 0 {
        for (kl, mut ts) in launch.kernels.iter().zip(times) {
            ts.sort_by(f64::total_cmp);
            report.kernel_ms.push((kl.name.clone(), ts[ts.len() / 2]));
        }
    }
    Ok(report)
}

/// A device's error as the CLI reports it: a device name, module or
/// launch is the user's to fix (exit 2), the rest happened at run time.
fn device_error(e: rocmc_device::Error) -> Error {
    if e.is_usage() {
        Error::Usage(e.to_string())
    } else {
        Error::Runtime(e.to_string())
    }
}

/// Opens a device by name: `cpu`, `cuda:N`, `amdgpu:N`,
/// `amdgpu://GPU-<uuid>` or `remote://HOST:PORT/DEVICE`. A worker met for
/// the first time gets its certificate pinned, and the user is told.
pub fn open_device(name: &str) -> Result<Box<dyn rocmc_device::Device>, Error> {
    if name.starts_with("remote://") {
        let dev = rocmc_remote::RemoteDevice::connect(name, &Default::default())
            .map_err(|e| device_error(e.into()))?;
        if let Some(f) = &dev.first_use {
            eprintln!(
                "note: first connection to this worker: its certificate {f} is now pinned in the known-workers file"
            );
        }
        return Ok(Box::new(dev));
    }
    rocmc_runtime::open_local(name).map_err(device_error)
}

/// Runs the kernel on a device of any kind (see [`open_device`]): compiles
/// here for the target the device reports, uploads the module and the
/// inputs, runs, compares with the interpreter here (`check`) and times
/// with the device's own clock (`bench`).
pub fn run_device(
    front: &Frontend,
    device: &str,
    spec: &RunSpec,
    what: GpuRun,
    opts: &crate::Options,
) -> Result<GpuReport, Error> {
    if let Some(rest) = device.strip_prefix("loops") {
        let mcpu = rest.strip_prefix(':').unwrap_or("gfx942");
        if !rest.is_empty() && !rest.starts_with(':') {
            return Err(Error::Usage(format!(
                "--device {device}: write `loops` or `loops:PROCESSOR`, e.g. loops:gfx1100"
            )));
        }
        let target_opts = crate::Options::new(mcpu);
        let target = match crate::targets(&target_opts) {
            Ok(mut t) => t.remove(0),
            Err(Error::Target(e)) => return Err(Error::Usage(format!("--device {device}: {e}"))),
            Err(e) => return Err(e),
        };
        let lowered = front.for_target(&target, &target_opts)?;
        return Ok(GpuReport {
            device: format!("the loop IR for {mcpu}, interpreted with the race check"),
            comparisons: run_loops(&lowered, spec)?,
            ..Default::default()
        });
    }
    let mut dev = open_device(device)?;
    let place = match device.strip_prefix("remote://") {
        Some(rest) => rest.split('/').next().unwrap_or("").to_string(),
        None => "this machine".to_string(),
    };
    run_on(front, dev.as_mut(), &place, spec, what, opts)
}

/// Compiles for `dev`'s target, runs on seeded random inputs, compares
/// with the interpreter (`check`) and times with the device's clock (`bench`).
fn run_on(
    front: &Frontend,
    dev: &mut dyn rocmc_device::Device,
    place: &str,
    spec: &RunSpec,
    what: GpuRun,
    opts: &crate::Options,
) -> Result<GpuReport, Error> {
    let sizes = &spec.sizes[..];
    use rocmc_device::Arg as WireArg;
    let rt = device_error;
    let info = dev.info().clone();
    let target = info.compile_target(opts.code_object_version, opts.wave_size)?;
    let tc = crate::toolchain::lookup(&target);
    // Kernels with `mma` steps are lowered for the device's target.
    let front = &front.for_target(&target, opts)?;
    check_requirements(front, sizes)?;
    let art = crate::backend(front, &target, opts, tc.module_emit())?;
    let module_bytes = tc.module_bytes(art);
    let hash = dev.load_module(&module_bytes).map_err(rt)?;
    let k = &front.kernel;
    let Inputs {
        inputs,
        pvals,
        pbytes,
        host,
    } = inputs_for(k, spec)?;
    let mut ids = Vec::new();
    for bytes in &host {
        ids.push(dev.upload(bytes).map_err(rt)?);
    }
    let args_of = |g: &rocmc_ir::loops::GpuKernel| -> Vec<WireArg> {
        g.args
            .iter()
            .map(|a| match &a.kind {
                rocmc_ir::loops::ArgKind::Buffer { tensor, .. } => {
                    let t = k.tensor(*tensor);
                    WireArg::Buffer {
                        id: ids[tensor.0 as usize],
                        dtype: t.dtype.name().into(),
                        len: (host[tensor.0 as usize].len() / t.dtype.size()) as u64,
                        offset: 0,
                    }
                }
                rocmc_ir::loops::ArgKind::Size(s) => WireArg::Size(sizes[s.0 as usize] as i32),
                rocmc_ir::loops::ArgKind::Param(p) => {
                    let t = k.params[p.0 as usize].dtype;
                    WireArg::Scalar {
                        dtype: t.name().into(),
                        bytes: pbytes[p.0 as usize * 8..p.0 as usize * 8 + t.size()].to_vec(),
                    }
                }
            })
            .collect()
    };
    for g in &front.program.kernels {
        dev.launch(&hash, &g.name, &args_of(g)).map_err(rt)?;
    }
    dev.synchronize().map_err(rt)?;
    let mut report = GpuReport {
        device: format!("{} on {place} ({})", info.name, info.target),
        ..Default::default()
    };
    judge_device(k, spec, what.check, (&pvals, &inputs), &mut report, |i| {
        dev.read_all(ids[i]).map_err(rt)
    })?;
    if what.bench > 0 {
        for g in &front.program.kernels {
            let mut ts = dev
                .time(&hash, &g.name, &args_of(g), 2, what.bench as u32)
                .map_err(rt)?;
            ts.sort_by(f64::total_cmp);
            report.kernel_ms.push((g.name.clone(), ts[ts.len() / 2]));
        }
    }
    for id in ids {
        dev.free(id).map_err(rt)?;
    }
    dev.synchronize().map_err(rt)?;
    report.bytes_moved = host.iter().map(|b| b.len() as u64).sum();
    report.flops = flops(k, sizes);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_catch_differences_and_nans() {
        let w = Buffer {
            dtype: DType::F32,
            data: Data::F(vec![1.0, 2.0, 3.0]),
        };
        assert_eq!(errors(&w, &w), (0.0, 0.0));
        let g = Buffer {
            dtype: DType::F32,
            data: Data::F(vec![1.0, 2.5, 3.0]),
        };
        assert_eq!(errors(&g, &w), (0.5, 0.5 / 3.0));
        let n = Buffer {
            dtype: DType::F32,
            data: Data::F(vec![1.0, f64::NAN, 3.0]),
        };
        assert_eq!(errors(&n, &w).1, f64::INFINITY);
        let c = Comparison {
            tensor: "C".into(),
            dtype: DType::F32,
            elements: 3,
            max_abs_error: 0.5,
            max_error: 0.5 / 3.0,
            tolerance: tolerance(DType::F32),
        };
        assert!(!c.ok());
        let i = Buffer {
            dtype: DType::I32,
            data: Data::I(vec![1, 2]),
        };
        let j = Buffer {
            dtype: DType::I32,
            data: Data::I(vec![1, 3]),
        };
        assert!(errors(&i, &j).1 > tolerance(DType::I32));
    }
}
