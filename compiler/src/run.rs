//! `rocmc run --device cpu`: execute a kernel's scheduled, lowered form on
//! the host through LLVM and compare it with the reference interpreter.

use crate::{Error, Frontend};
use rocmc_ir::interp::{self, Buffer, Data, Scalar};
use rocmc_ir::{DType, Kernel, TensorKind};
use std::collections::HashMap;

/// How one output tensor compares with the interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The tensor's name.
    pub tensor: String,
    /// Its element type.
    pub dtype: DType,
    /// Number of elements compared.
    pub elements: usize,
    /// Largest |got − want|.
    pub max_abs_error: f64,
    /// Largest |got − want| / (1 + |want|).
    pub max_error: f64,
    /// The tolerance for `max_error` (see [`tolerance`]).
    pub tolerance: f64,
}

impl Comparison {
    /// Whether the tensor is within tolerance.
    pub fn ok(&self) -> bool {
        self.max_error <= self.tolerance
    }
}

/// Tolerance on |got − want| / (1 + |want|) by dtype: the scheduled kernel
/// may reorder, contract (FMA) and approximate (exp, tanh) where the
/// interpreter rounds each operation; integers must match exactly.
pub fn tolerance(t: DType) -> f64 {
    match t {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        DType::BF16 => 5e-2,
        _ => 0.0,
    }
}

/// The seeded generator of `rocmc run`'s inputs (and of the tests' random
/// kernels and sweeps): splitmix64, fixed and documented, so a seed gives
/// the same values in every version.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform in 0..n (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

fn random_buffer(rng: &mut Rng, t: DType, n: usize) -> Buffer {
    let data = match t {
        t if t.is_float() => Data::F(
            (0..n)
                .map(|_| rocmc_ir::front::round_to(rng.uniform(-1.0, 1.0), t))
                .collect(),
        ),
        DType::Bool => Data::I((0..n).map(|_| (rng.next_u64() & 1) as i64).collect()),
        DType::U8 | DType::U32 => Data::I((0..n).map(|_| (rng.next_u64() % 100) as i64).collect()),
        _ => Data::I(
            (0..n)
                .map(|_| (rng.next_u64() % 201) as i64 - 100)
                .collect(),
        ),
    };
    Buffer { dtype: t, data }
}

/// Seeded random inputs, parameter values and their 8-byte slots.
fn random_inputs(
    k: &Kernel,
    sizes: &[i64],
    params: &HashMap<String, f64>,
    seed: u64,
) -> Result<Inputs, Error> {
    let mut rng = Rng(seed);
    let mut pvals = Vec::new();
    let mut pbytes = Vec::new();
    for name in params.keys() {
        if !k.params.iter().any(|p| &p.name == name) {
            return Err(Error::Usage(format!(
                "--param {name}: the kernel has no parameter `{name}`"
            )));
        }
    }
    for p in &k.params {
        let v = params
            .get(&p.name)
            .copied()
            .unwrap_or_else(|| rng.uniform(0.5, 1.5));
        let (s, bytes): (Scalar, Vec<u8>) = match p.dtype {
            DType::F32 => (
                Scalar::F(v as f32 as f64),
                (v as f32).to_le_bytes().to_vec(),
            ),
            DType::F64 => (Scalar::F(v), v.to_le_bytes().to_vec()),
            t if t.is_float() => {
                let b = Buffer {
                    dtype: t,
                    data: Data::F(vec![v]),
                };
                (Scalar::F(rocmc_ir::front::round_to(v, t)), b.to_bytes())
            }
            t => {
                let i = interp::normalize_int(t, v as i64);
                (Scalar::I(i), i.to_le_bytes()[..t.size()].to_vec())
            }
        };
        pvals.push(s);
        let mut slot = bytes;
        slot.resize(8, 0);
        pbytes.extend(slot);
    }
    let shapes: Vec<Vec<i64>> = k
        .tensors
        .iter()
        .map(|t| interp::shape_of(t, sizes))
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Usage(e.to_string()))?;
    let inputs: Vec<Buffer> = k
        .inputs()
        .map(|(id, t)| {
            random_buffer(
                &mut rng,
                t.dtype,
                shapes[id.0 as usize].iter().product::<i64>() as usize,
            )
        })
        .collect();
    let host = host_buffers(k, &shapes, &inputs);
    Ok(Inputs {
        inputs,
        pvals,
        pbytes,
        host,
    })
}

/// Seeded random inputs and everything derived from them.
struct Inputs {
    inputs: Vec<Buffer>,
    pvals: Vec<Scalar>,
    /// One 8-byte slot per parameter.
    pbytes: Vec<u8>,
    /// One byte vector per tensor: inputs filled, outputs zeroed.
    host: Vec<Vec<u8>>,
}

fn host_buffers(k: &Kernel, shapes: &[Vec<i64>], inputs: &[Buffer]) -> Vec<Vec<u8>> {
    let mut ins = inputs.iter();
    k.tensors
        .iter()
        .zip(shapes)
        .map(|(t, shape)| match t.kind {
            TensorKind::Input => ins.next().expect("one buffer per input").to_bytes(),
            TensorKind::Stage(_) => {
                vec![0u8; shape.iter().product::<i64>() as usize * t.dtype.size()]
            }
        })
        .collect()
}

/// Compares every tensor in memory (not inlined or computed at another stage) of `got` with `want`.
fn compare(
    k: &Kernel,
    want: &[Buffer],
    mut got: impl FnMut(usize) -> Result<Vec<u8>, Error>,
) -> Result<Vec<Comparison>, Error> {
    let mut out = Vec::new();
    for (i, t) in k.tensors.iter().enumerate() {
        let TensorKind::Stage(s) = t.kind else {
            continue;
        };
        if k.stage(s).is_internal() {
            continue;
        }
        let g = Buffer::from_bytes(t.dtype, &got(i)?);
        let (max_abs_error, max_error) = errors(&g, &want[i]);
        out.push(Comparison {
            tensor: t.name.clone(),
            dtype: t.dtype,
            elements: want[i].len(),
            max_abs_error,
            max_error,
            tolerance: tolerance(t.dtype),
        });
    }
    Ok(out)
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
        .collect()
}

fn names(k: &Kernel) -> String {
    k.sizes
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
    let k = &front.kernel;
    let Inputs {
        inputs,
        pvals,
        pbytes,
        mut host,
    } = random_inputs(k, sizes, params, seed)?;
    let want = interp::run(k, sizes, &pvals, &inputs).map_err(|e| {
        Error::Usage(format!(
            "the reference interpreter refused these inputs: {e}"
        ))
    })?;
    let sizes32: Vec<i32> = sizes.iter().map(|s| *s as i32).collect();
    rocmc_codegen::host::run_on_host(k, &front.program, &sizes32, &pbytes, &mut host, fp_contract)
        .map_err(|e| Error::Codegen(e.to_string()))?;
    compare(k, &want, |i| Ok(std::mem::take(&mut host[i])))
}

/// Largest |got − want| and largest |got − want| / (1 + |want|); NaN where
/// the other is not NaN counts as an infinite error.
pub fn errors(got: &Buffer, want: &Buffer) -> (f64, f64) {
    let (mut max_abs, mut max_err) = (0f64, 0f64);
    for j in 0..want.len() {
        let (g, w) = (scalar_f(got.get(j)), scalar_f(want.get(j)));
        let d = if g == w || (g.is_nan() && w.is_nan()) {
            0.0
        } else {
            (g - w).abs()
        };
        let d = if d.is_nan() { f64::INFINITY } else { d };
        max_abs = max_abs.max(d);
        max_err = max_err.max(d / (1.0 + w.abs()));
    }
    (max_abs, max_err)
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
}

/// What a GPU run does besides running: compare, time.
#[derive(Clone, Copy, Debug, Default)]
pub struct GpuRun {
    /// Compare the results with the reference interpreter.
    pub check: bool,
    /// Time this many repetitions with HIP events.
    pub bench: usize,
}

/// Compiles the kernel for the device's architecture, runs it on seeded
/// random inputs, optionally compares with the interpreter and times
/// repetitions with HIP events.
pub fn run_gpu(
    front: &Frontend,
    device: &str,
    sizes: &[i64],
    params: &HashMap<String, f64>,
    seed: u64,
    what: GpuRun,
    opts: &crate::Options,
) -> Result<GpuReport, Error> {
    use rocmc_runtime_hip::{Hip, KernelArg};
    let rt = |e: rocmc_runtime_hip::Error| match e {
        rocmc_runtime_hip::Error::DeviceSelection(..) => Error::Usage(e.to_string()),
        other => Error::Runtime(other.to_string()),
    };
    let GpuRun { check, bench } = what;
    let hip = Hip::load().map_err(rt)?;
    let dev = hip.device(device).map_err(rt)?;
    let processor = dev
        .info
        .arch
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let cov = rocmc_runtime_hip::compat::max_code_object_version(hip.runtime_version())
        .min(opts.code_object_version);
    let mut o = opts.clone();
    o.mcpu = processor;
    o.code_object_version = cov;
    let target = crate::targets(&o)?.remove(0);
    let art = crate::backend(
        front,
        &target,
        &o,
        crate::Emit {
            code_object: true,
            ..Default::default()
        },
    )?;
    let module = dev
        .load_module(art.code_object.as_deref().unwrap_or_default())
        .map_err(rt)?;

    let k = &front.kernel;
    let Inputs {
        inputs,
        pvals,
        pbytes,
        host,
    } = random_inputs(k, sizes, params, seed)?;
    let mut bufs = Vec::new();
    for (t, bytes) in k.tensors.iter().zip(&host) {
        let b = dev.alloc::<u8>(bytes.len()).map_err(rt)?;
        b.copy_from_host(bytes).map_err(rt)?;
        bufs.push((b, bytes.len() / t.dtype.size()));
    }
    let mut report = GpuReport {
        device: format!("{} ({})", dev.info.name, dev.info.arch),
        ..Default::default()
    };
    let launch_all = |stream_events: bool| -> Result<Vec<f64>, Error> {
        let mut times = Vec::new();
        for g in &front.program.kernels {
            let kern = module.kernel(&g.name).map_err(rt)?;
            let args: Vec<KernelArg> = g
                .args
                .iter()
                .map(|a| match &a.kind {
                    rocmc_ir::lower::ArgKind::Buffer { tensor, .. } => {
                        let (b, n) = &bufs[tensor.0 as usize];
                        KernelArg::raw_buffer(b, k.tensor(*tensor).dtype.name(), *n)
                    }
                    rocmc_ir::lower::ArgKind::Size(s) => {
                        KernelArg::size(sizes[s.0 as usize] as i32)
                    }
                    rocmc_ir::lower::ArgKind::Param(p) => {
                        let t = k.params[p.0 as usize].dtype;
                        KernelArg::raw_scalar(
                            t.name(),
                            pbytes[p.0 as usize * 8..p.0 as usize * 8 + t.size()].to_vec(),
                        )
                    }
                })
                .collect();
            if stream_events {
                let (a, b) = (dev.event().map_err(rt)?, dev.event().map_err(rt)?);
                a.record(None).map_err(rt)?;
                kern.launch(&args, None).map_err(rt)?;
                b.record(None).map_err(rt)?;
                times.push(b.elapsed_since(&a).map_err(rt)? as f64);
            } else {
                kern.launch(&args, None).map_err(rt)?;
            }
        }
        Ok(times)
    };
    launch_all(bench > 0)?;
    if check {
        let want = interp::run(k, sizes, &pvals, &inputs).map_err(|e| {
            Error::Usage(format!(
                "the reference interpreter refused these inputs: {e}"
            ))
        })?;
        report.comparisons = compare(k, &want, |i| bufs[i].0.to_vec().map_err(rt))?;
    }
    if bench > 0 {
        let mut per_kernel: Vec<Vec<f64>> = vec![Vec::new(); front.program.kernels.len()];
        for _ in 0..bench {
            for (i, t) in launch_all(true)?.into_iter().enumerate() {
                per_kernel[i].push(t);
            }
        }
        for (g, mut ts) in front.program.kernels.iter().zip(per_kernel) {
            ts.sort_by(f64::total_cmp);
            report.kernel_ms.push((g.name.clone(), ts[ts.len() / 2]));
        }
    }
    report.bytes_moved = host.iter().map(|b| b.len() as u64).sum();
    report.flops = flops(k, sizes);
    Ok(report)
}

/// Floating-point operations of the plain kernel for these sizes: each
/// float arithmetic operation or math call once per point it is evaluated.
pub fn flops(k: &Kernel, sizes: &[i64]) -> u64 {
    fn count(e: &rocmc_ir::Expr) -> u64 {
        use rocmc_ir::ExprKind::*;
        let own =
            u64::from(e.dtype.is_float() && matches!(e.kind, Binary(..) | Call(..) | Unary(..)));
        own + match &e.kind {
            Unary(_, a) | Cast(a) => count(a),
            Binary(_, a, b) => count(a) + count(b),
            Select(c, a, b) => count(c) + count(a) + count(b),
            Call(_, xs) => xs.iter().map(count).sum(),
            _ => 0,
        }
    }
    k.stages
        .iter()
        .filter(|s| !s.is_inlined())
        .map(|s| {
            let points: i64 = s
                .axes
                .iter()
                .map(|a| a.extent.eval(sizes, &[]).unwrap_or(0))
                .product();
            let (red_points, body_ops) = match &s.reduce {
                Some(r) => (
                    r.axes
                        .iter()
                        .map(|a| a.extent.eval(sizes, &[]).unwrap_or(0))
                        .product::<i64>(),
                    count(&r.body) + 1,
                ),
                None => (0, 0),
            };
            points as u64 * (count(&s.value) + red_points as u64 * body_ops)
        })
        .sum()
}

fn scalar_f(s: Scalar) -> f64 {
    match s {
        Scalar::F(x) => x,
        Scalar::I(x) => x as f64,
    }
}

/// Runs a compiled code object or bundle on a GPU, with inputs generated
/// from the launch geometry rocmc stored in it (dtypes, shapes, size
/// bounds). There is no kernel source, so no comparison with the
/// interpreter; `bench` repetitions are timed.
pub fn run_code_object(
    bytes: &[u8],
    device: &str,
    sizes: &HashMap<String, i64>,
    params: &HashMap<String, f64>,
    seed: u64,
    bench: usize,
) -> Result<GpuReport, Error> {
    use rocmc_linker::launch::ArgRole;
    use rocmc_runtime_hip::{Hip, KernelArg};
    let rt = |e: rocmc_runtime_hip::Error| match e {
        rocmc_runtime_hip::Error::DeviceSelection(..) => Error::Usage(e.to_string()),
        other => Error::Runtime(other.to_string()),
    };
    // Read the launch geometry before touching the GPU, so a file without it is refused anywhere.
    let co = if rocmc_linker::bundle::is_bundle(bytes) {
        let entries = rocmc_linker::bundle::read(bytes).map_err(|e| Error::Usage(e.to_string()))?;
        let e = entries
            .iter()
            .find(|e| !e.range.is_empty())
            .ok_or_else(|| Error::Usage("the bundle holds no code object".into()))?;
        rocmc_linker::codeobject::read(&bytes[e.range.clone()])
    } else {
        rocmc_linker::codeobject::read(bytes)
    }
    .map_err(|e| Error::Usage(e.to_string()))?;
    let launch = co.launch.clone().ok_or_else(|| Error::Usage("the code object has no rocmc launch geometry (was it built by rocmc?); run the kernel file instead".into()))?;
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
    let hip = Hip::load().map_err(rt)?;
    let dev = hip.device(device).map_err(rt)?;
    let module = dev.load_module(bytes).map_err(rt)?;
    let mut rng = Rng(seed);
    // One buffer per named tensor, shared by every kernel that names it.
    let mut buffers: HashMap<String, (rocmc_runtime_hip::DeviceBuffer<u8>, usize, &'static str)> =
        HashMap::new();
    let mut report = GpuReport {
        device: format!("{} ({})", dev.info.name, dev.info.arch),
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
            let b = dev.alloc::<u8>(host.len()).map_err(rt)?;
            b.copy_from_host(&host).map_err(rt)?;
            report.bytes_moved += host.len() as u64;
            buffers.insert(a.name.clone(), (b, n, t.name()));
        }
    }
    let mut times = vec![Vec::new(); launch.kernels.len()];
    for rep in 0..bench.max(1) {
        for (i, kl) in launch.kernels.iter().enumerate() {
            let kern = module.kernel(&kl.name).map_err(rt)?;
            let mut args = Vec::new();
            for a in &kl.args {
                args.push(match a.role {
                    ArgRole::Buffer => {
                        let (b, n, d) = &buffers[&a.name];
                        KernelArg::raw_buffer(b, d, *n)
                    }
                    ArgRole::Size => KernelArg::size(all_sizes[&a.name] as i32),
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
                        KernelArg::raw_scalar(t.name(), b.to_bytes())
                    }
                });
            }
            let (s, e) = (dev.event().map_err(rt)?, dev.event().map_err(rt)?);
            s.record(None).map_err(rt)?;
            kern.launch(&args, None).map_err(rt)?;
            e.record(None).map_err(rt)?;
            let ms = e.elapsed_since(&s).map_err(rt)? as f64;
            if bench > 0 && rep < bench {
                times[i].push(ms);
            }
        }
    }
    if bench > 0 {
        for (kl, mut ts) in launch.kernels.iter().zip(times) {
            ts.sort_by(f64::total_cmp);
            report.kernel_ms.push((kl.name.clone(), ts[ts.len() / 2]));
        }
    }
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
