//! `rocmc-gpu-check`: the GPU half of "compile here, run there" for NVIDIA.
//!
//! rocmc compiles kernels to PTX where LLVM is; this binary, which links no
//! LLVM, runs them where the GPU is:
//!
//! - `rocmc-gpu-check check DIR [--cases N] [--seed S]` runs every
//!   `DIR/<name>.ptx` on seeded random inputs at fixed awkward sizes and at
//!   `N` random sizes, and compares every output with the reference
//!   interpreter run on the kernel file `DIR/<name>.toml`;
//! - `rocmc-gpu-check bench DIR PLAN.json [--reps R]` times each kernel at
//!   the sizes the plan gives (median of `R` launches after warm-up, CUDA
//!   events) and prints GB/s and TFLOP/s as JSON lines, with inputs drawn
//!   on the GPU and a sampled check of the results at those sizes
//!   (`bench.rs`: `--only`, `--part I/N` split a run);
//! - `rocmc-gpu-check copy` measures device-to-device copy bandwidth, the
//!   reference for memory-bound kernels;
//! - `rocmc-gpu-check errors VADD_PTX NEWER_PTX [WIDE_PTX]` checks the
//!   runtime's refusals on the real driver: PTX for a newer GPU, PTX the
//!   driver's compiler rejects (its log must be the error), launches whose
//!   arguments disagree with the launch document, and (WIDE_PTX:
//!   tests/regress/transpose4d_unbounded) sizes past a fused loop's 32-bit
//!   counter or past NVIDIA's grid;
//! - `rocmc-gpu-check remote WORKER DIR [--device cuda:0|cpu]` starts the
//!   `rocmc-worker` binary on loopback and runs `check` through it, over
//!   TLS with the certificate pinned, as `rocmc run --device remote://…`;
//! - `rocmc-gpu-check latency WORKER DIR [--device cuda:0|cpu]` measures
//!   what that path costs over the device itself (a Markdown table);
//! - `rocmc-gpu-check mma [--seed S]` checks the `mma.sync` lane layouts
//!   of rocmc's matrix-instruction table on the GPU, element by element;
//! - `rocmc-gpu-check wgmma [--seed S] [--perturb]` checks sm_90a's
//!   warpgroup MMA on the GPU: descriptors, swizzle, k steps and the
//!   accumulator layout, element by element;
//! - `rocmc-gpu-check tma [--perturb]` checks the tensor memory
//!   accelerator's copies (tensor maps the runtime encodes, the 128-byte
//!   swizzle, zeros past the tensor) against rocmc's tile layout;
//! - `rocmc-gpu-check gelu16 DIR` checks that rocmc's `f16(gelu(x))` is
//!   within one f16 ulp of the exact value on the GPU.

use rocmc_ir::interp;
use rocmc_ir::reference::{
    compare_sampled, compare_with, random_inputs, Comparison, Inputs, Rng, Tolerances,
};
use rocmc_ir::Kernel;
use rocmc_runtime_cuda::{Cuda, KernelArg};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod bench;
mod fill;
mod mma;
mod remote;
mod tma;
mod transfer;
mod ulp;
mod wgmma;

type Res<T> = Result<T, String>;

/// ptxas for the tests of the hand-written kernels, found as rocmc finds
/// it (`ROCMC_PTXAS`, else the newest under `~/.cache/rocmc` that
/// scripts/install-ptxas.sh fills); required in CI, where the README's
/// test command installs it.
#[cfg(test)]
fn test_ptxas() -> Option<PathBuf> {
    let found = std::env::var_os("ROCMC_PTXAS")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = std::env::var_os("ROCMC_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rocmc"))
                })?;
            let mut all: Vec<PathBuf> = std::fs::read_dir(cache)
                .ok()?
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("ptxas"))
                .filter(|p| p.exists())
                .collect();
            all.sort();
            all.pop()
        });
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "ptxas not found: run scripts/install-ptxas.sh (or set ROCMC_PTXAS)"
    );
    found
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("check") => check(&args[1..]),
        Some("bench") => bench::bench(&args[1..]),
        Some("copy") => copy(),
        Some("errors") => errors(&args[1..]),
        Some("remote") => remote::check(&args[1..]),
        Some("latency") => remote::latency(&args[1..]),
        Some("transfer") => transfer::transfer(&args[1..]),
        Some("mma") => mma::check(&args[1..]),
        Some("wgmma") => wgmma::check(&args[1..]),
        Some("tma") => tma::check(&args[1..]),
        Some("gelu16") => ulp::gelu16(&args[1..]),
        _ => Err("usage: rocmc-gpu-check check DIR [--cases N] [--seed S] [--part I/N] | bench DIR PLAN.json [--reps R] [--only NAME,...] [--part I/N] [--check-rows R] [--check-cols C] [--fill DIR | --host-inputs] | copy | errors VADD_PTX NEWER_PTX [WIDE_PTX] | remote WORKER DIR [--device D] [--cases N] [--seed S] | latency WORKER DIR [--device D] [--reps N] | transfer WORKER [--device D] [--sizes MIB,...] | mma [--seed S] [--perturb] | wgmma [--seed S] [--perturb] | tma [--perturb] | gelu16 DIR".into()),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn flag(args: &[String], name: &str, default: u64) -> Res<u64> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}

/// The value after flag `name`; an error where the flag ends the line.
pub(crate) fn opt<'a>(args: &'a [String], name: &str) -> Res<Option<&'a str>> {
    args.iter()
        .position(|a| a == name)
        .map(|i| {
            args.get(i + 1)
                .map(String::as_str)
                .ok_or(format!("{name} needs a value"))
        })
        .transpose()
}

/// `--part I/N` (1-based): of a folder's kernels in name order, every
/// `N`-th from the `I`-th, so that a long run splits into calls; (1, 1)
/// when not given.
pub(crate) fn part_flag(args: &[String]) -> Res<(usize, usize)> {
    let Some(v) = opt(args, "--part")? else {
        return Ok((1, 1));
    };
    v.split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|&(i, n)| i >= 1 && i <= n)
        .ok_or(format!("--part {v}: expected I/N with 1 <= I <= N"))
}

/// Whether the `i`-th kernel (0-based) is in `part`.
pub(crate) fn in_part(i: usize, part: (usize, usize)) -> bool {
    i % part.1 == part.0 - 1
}

/// The kernels of a folder: (name, kernel file, module), sorted by name.
pub(crate) fn kernels(dir: &Path, ext: &str) -> Res<Vec<(String, Kernel, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let toml = path.with_extension("toml");
        let src = std::fs::read_to_string(&toml).map_err(|e| format!("{}: {e}", toml.display()))?;
        let k =
            rocmc_ir::parse_kernel(&toml.display().to_string(), &src).map_err(|e| e.render())?;
        let module = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push((name, k, module));
    }
    Ok(out)
}

/// Sizes to check a kernel at: awkward fixed ones (1, a prime, not a
/// multiple of any tile), one of multiples of 8, and seeded random ones,
/// each within the kernel's bounds and small enough for the interpreter.
pub(crate) fn size_cases(k: &Kernel, cases: u64, rng: &mut Rng) -> Vec<Vec<i64>> {
    let dims = k.sizes.len() as u32;
    // The interpreter's work grows with the product of the sizes.
    let cap = match dims {
        1 => 200_000,
        2 => 700,
        3 => 160,
        _ => 20,
    };
    let clamp = |v: i64, max: u64| v.clamp(1, (max as i64).min(cap));
    let clamp_to = |v: i64, max: u64| v.clamp(1, max as i64);
    let mut out: Vec<Vec<i64>> = [1, 7, 65, 129]
        .iter()
        .map(|v| k.sizes.iter().map(|s| clamp(*v, s.max)).collect())
        .collect();
    out.push(k.sizes.iter().map(|s| clamp(cap - 3, s.max)).collect());
    // Multiples of 8, past the cap: the sizes at which every vector copy is
    // aligned and whole tiles come one after another, so that the fast
    // paths (straight-line staged copies, grouped fills) run several steps
    // deep, which the awkward sizes above never reach.
    let aligned = match dims {
        1 => 262_152,
        2 => 1032,
        3 => 264,
        _ => 24,
    };
    out.push(k.sizes.iter().map(|s| clamp_to(aligned, s.max)).collect());
    for _ in 0..cases {
        out.push(
            k.sizes
                .iter()
                .map(|s| clamp(1 + rng.below(cap as usize) as i64, s.max))
                .collect(),
        );
    }
    attention_cases(k, &mut out);
    // conv2d: the window needs H, W of at least 3; keep tiny batches.
    for c in &mut out {
        for (v, s) in c.iter_mut().zip(&k.sizes) {
            if matches!(s.name.as_str(), "H" | "W") {
                *v = (*v).max(3);
            }
            if dims > 3 && matches!(s.name.as_str(), "N") {
                *v = (*v).min(2);
            }
        }
        // Sizes the kernel states are multiples (`divisible`) become so.
        *c = k.fit_sizes(c);
    }
    out
}

/// An attention's interpreter work is batch · rows · keys · head: one or
/// two batch points, and row and key counts of one to several tiles,
/// odd and whole, different from each other.
fn attention_cases(k: &Kernel, out: &mut [Vec<i64>]) {
    fn uses(ix: &rocmc_ir::Index, s: usize) -> bool {
        match ix {
            rocmc_ir::Index::Size(id) => id.0 as usize == s,
            rocmc_ir::Index::Bin(_, a, b) => uses(a, s) || uses(b, s),
            _ => false,
        }
    }
    let Some(st) = k.stages.iter().find(|s| s.attention().is_some()) else {
        return;
    };
    let n = st.axes.len();
    const LENS: [i64; 7] = [1, 7, 65, 129, 200, 256, 300];
    for (ci, c) in out.iter_mut().enumerate() {
        for (si, v) in c.iter_mut().enumerate() {
            let batch = st.axes[..n - 2].iter().any(|a| uses(&a.extent, si));
            let want = if batch {
                1 + (ci % 2) as i64
            } else {
                LENS[(ci + si) % LENS.len()]
            };
            *v = want.min(k.sizes[si].max as i64);
        }
    }
}

/// Runs a folder's kernels on any device through the one device interface
/// (`rocmc_device::Device`): the local GPU (`CudaDevice`) or a device of a
/// worker (`RemoteDevice`). [`check_all`] drives either the same way.
pub(crate) struct DeviceRunner {
    pub(crate) dev: Box<dyn rocmc_device::Device>,
    /// What the folder's modules end in (`ptx`, `so`).
    pub(crate) ext: &'static str,
    module: Option<(String, rocmc_device::launch::LaunchInfo)>,
}

impl DeviceRunner {
    pub(crate) fn new(dev: Box<dyn rocmc_device::Device>, ext: &'static str) -> DeviceRunner {
        DeviceRunner {
            dev,
            ext,
            module: None,
        }
    }

    /// Makes `module` the one [`DeviceRunner::run`] launches.
    pub(crate) fn load(&mut self, module: &[u8]) -> Res<()> {
        let info = rocmc_device::module_launch(module).map_err(|e| e.to_string())?;
        let id = self.dev.load_module(module).map_err(|e| e.to_string())?;
        self.module = Some((id, info));
        Ok(())
    }

    /// The launch document of the module [`DeviceRunner::load`] loaded.
    pub(crate) fn launch_info(&self) -> Res<&rocmc_device::launch::LaunchInfo> {
        self.module
            .as_ref()
            .map(|m| &m.1)
            .ok_or("no module loaded".into())
    }

    /// Every tensor of `k` on the device, as `inputs` holds them.
    pub(crate) fn place(&mut self, k: &Kernel, inputs: &Inputs) -> Res<Placed> {
        let mut ids = Vec::new();
        for b in &inputs.host {
            ids.push(self.dev.upload(b).map_err(|e| e.to_string())?);
        }
        Ok(Placed {
            ids,
            lens: rocmc_remote::device::element_counts(k, &inputs.host),
            pbytes: inputs.pbytes.clone(),
            pvals: inputs.pvals.clone(),
        })
    }

    /// Runs every kernel of the module once, in order, on `p`.
    pub(crate) fn launch(&mut self, k: &Kernel, sizes: &[i64], p: &Placed) -> Res<()> {
        let (id, info) = self.module.as_ref().ok_or("no module loaded")?;
        for kl in &info.kernels {
            let args = rocmc_remote::device::wire_args(k, kl, &p.ids, &p.lens, sizes, &p.pbytes)?;
            self.dev
                .launch(id, &kl.name, &args)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Times every kernel of the module on `p` with the device's clock (3
    /// warm-up launches, then `reps`): per repetition, the sum of the
    /// kernels' times.
    pub(crate) fn time(
        &mut self,
        k: &Kernel,
        sizes: &[i64],
        p: &Placed,
        reps: u32,
    ) -> Res<Vec<f64>> {
        let (id, info) = self.module.as_ref().ok_or("no module loaded")?;
        let mut total = vec![0.0; reps as usize];
        for kl in &info.kernels {
            let args = rocmc_remote::device::wire_args(k, kl, &p.ids, &p.lens, sizes, &p.pbytes)?;
            let ms = self
                .dev
                .time(id, &kl.name, &args, 3, reps)
                .map_err(|e| e.to_string())?;
            for (t, m) in total.iter_mut().zip(ms) {
                *t += m;
            }
        }
        Ok(total)
    }

    /// Tensor `i` of `p`, read back.
    pub(crate) fn read(&mut self, p: &Placed, i: usize) -> Res<Vec<u8>> {
        self.dev.read_all(p.ids[i]).map_err(|e| e.to_string())
    }

    /// Frees `p`'s buffers and reports any failure queued before.
    pub(crate) fn release(&mut self, p: Placed) -> Res<()> {
        for id in p.ids {
            self.dev.free(id).map_err(|e| e.to_string())?;
        }
        self.dev.synchronize().map_err(|e| e.to_string())
    }

    /// Uploads `inputs`, runs every kernel of the module in order and returns
    /// the contents of every tensor afterwards.
    pub(crate) fn run(&mut self, k: &Kernel, sizes: &[i64], inputs: &Inputs) -> Res<Vec<Vec<u8>>> {
        let p = self.place(k, inputs)?;
        self.launch(k, sizes, &p)?;
        let out = (0..p.ids.len())
            .map(|i| self.read(&p, i))
            .collect::<Res<Vec<_>>>()?;
        self.release(p)?;
        Ok(out)
    }
}

/// A kernel's tensors on a device: one buffer per tensor (in the kernel's
/// order), its element count, and the parameters' 8-byte slots and
/// values.
pub(crate) struct Placed {
    pub(crate) ids: Vec<u32>,
    pub(crate) lens: Vec<u64>,
    pub(crate) pbytes: Vec<u8>,
    pub(crate) pvals: Vec<rocmc_ir::interp::Scalar>,
}

fn check(args: &[String]) -> Res<bool> {
    let dir = PathBuf::from(args.first().ok_or("check needs a folder")?);
    let cases = flag(args, "--cases", 6)?;
    let seed = flag(args, "--seed", 1)?;
    let cuda = Cuda::load().map_err(|e| e.to_string())?;
    let dev = cuda.device("cuda").map_err(|e| e.to_string())?;
    let (a, b) = cuda.driver_version();
    println!(
        "device: {} ({}, {} SMs), driver for CUDA {a}.{b}",
        dev.info.name,
        dev.info.processor(),
        dev.info.sm_count
    );
    drop(dev);
    let local = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let part = part_flag(args)?;
    check_all(
        &mut DeviceRunner::new(local, "ptx"),
        &dir,
        cases,
        seed,
        part,
    )
}

/// Interpreter work (arithmetic operations) past which a check compares a
/// sample of rows instead of whole results.
const WHOLE_RUN_FLOPS: u64 = 20_000_000;
const SAMPLE_ROWS: usize = 16;
const SAMPLE_COLS: usize = 64;

/// What the interpreter gave: every tensor, or a sample of each result.
enum Want {
    Whole(Vec<rocmc_ir::interp::Buffer>),
    Sampled(Vec<rocmc_ir::interp::Sampled>),
}

/// Runs every kernel of `dir` through `runner` at awkward and random sizes
/// and compares each output with the reference interpreter.
pub(crate) fn check_all(
    runner: &mut DeviceRunner,
    dir: &Path,
    cases: u64,
    seed: u64,
    part: (usize, usize),
) -> Res<bool> {
    let mut rng = Rng(seed);
    let mut all_ok = true;
    let (mut compared, mut skipped) = (0usize, 0usize);
    println!(
        "{:<16} {:<28} {:>8} {:>12} {:>10}  result",
        "kernel", "sizes", "tensor", "max error", "tolerance"
    );
    let all = kernels(dir, runner.ext)?.into_iter().enumerate();
    for (_, (name, k, module)) in all.filter(|(i, _)| in_part(*i, part)) {
        runner.load(&module).map_err(|e| format!("{name}: {e}"))?;
        for sizes in size_cases(&k, cases, &mut rng) {
            let seed = rng.next_u64();
            let text: Vec<String> = k
                .sizes
                .iter()
                .zip(&sizes)
                .map(|(s, v)| format!("{}={v}", s.name))
                .collect();
            // A kernel whose tensors have negative extents at these sizes
            // (a convolution's `T - 4` at T = 3), or whose reads leave its
            // tensors, has no meaning there (the interpreter defines it):
            // nothing to compare.
            // Kernels past a budget of work are checked on a sample of
            // their results' rows (the first, the last and random ones),
            // which the interpreter computes alone.
            let sample = rocmc_ir::reference::flops(&k, &sizes) > WHOLE_RUN_FLOPS;
            let run = random_inputs(&k, &sizes, &HashMap::new(), seed).and_then(|inputs| {
                let want = match sample {
                    true => Want::Sampled(
                        interp::run_sampled(
                            &k,
                            &sizes,
                            &inputs.pvals,
                            &inputs.inputs,
                            SAMPLE_ROWS,
                            SAMPLE_COLS,
                            seed,
                        )
                        .map_err(|e| e.to_string())?,
                    ),
                    false => Want::Whole(
                        interp::run(&k, &sizes, &inputs.pvals, &inputs.inputs)
                            .map_err(|e| e.to_string())?,
                    ),
                };
                Ok((inputs, want))
            });
            let (inputs, want) = match run {
                Ok(w) => w,
                Err(e) => {
                    skipped += 1;
                    println!(
                        "{:<16} {:<28} not defined at these sizes: {e}",
                        name,
                        text.join(",")
                    );
                    continue;
                }
            };
            let got = runner
                .run(&k, &sizes, &inputs)
                .map_err(|e| format!("{name}: {e}"))?;
            let fetch = |i: usize| Ok::<_, String>(got[i].clone());
            let tol = Tolerances::default().with_sums(&k, &sizes);
            let (cmp, note): (Vec<Comparison>, Vec<String>) = match &want {
                Want::Whole(w) => (compare_with(&k, w, &tol, false, fetch)?.0, Vec::new()),
                Want::Sampled(s) => (
                    compare_sampled(&k, s, &tol, fetch)?,
                    s.iter()
                        .map(|s| format!("  (sampled: {} of {} rows)", s.rows_sampled, s.rows))
                        .collect(),
                ),
            };
            for (j, c) in cmp.iter().enumerate() {
                all_ok &= c.ok();
                compared += 1;
                println!(
                    "{:<16} {:<28} {:>8} {:>12.3e} {:>10.0e}  {}{}",
                    name,
                    text.join(","),
                    c.tensor,
                    c.max_error,
                    c.tolerance,
                    if c.ok() { "ok" } else { "MISMATCH" },
                    note.get(j).map_or("", String::as_str)
                );
            }
        }
    }
    println!(
        "{compared} comparisons ({skipped} size sets where a kernel is not defined skipped): {}",
        if all_ok {
            "all kernels match the reference interpreter"
        } else {
            "MISMATCHES found"
        }
    );
    Ok(all_ok)
}

fn copy() -> Res<bool> {
    let cuda = Cuda::load().map_err(|e| e.to_string())?;
    let dev = cuda.device("cuda").map_err(|e| e.to_string())?;
    let n = 1usize << 28; // 1 GiB of f32
    let a = dev.alloc::<f32>(n).map_err(|e| e.to_string())?;
    let b = dev.alloc::<f32>(n).map_err(|e| e.to_string())?;
    b.copy_from_device(&a).map_err(|e| e.to_string())?;
    let mut ms = Vec::new();
    for _ in 0..20 {
        let (s, e) = (
            dev.event().map_err(|e| e.to_string())?,
            dev.event().map_err(|e| e.to_string())?,
        );
        s.record(None).map_err(|e| e.to_string())?;
        b.copy_from_device(&a).map_err(|e| e.to_string())?;
        e.record(None).map_err(|e| e.to_string())?;
        ms.push(f64::from(e.elapsed_since(&s).map_err(|e| e.to_string())?));
    }
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    // A copy reads and writes every byte.
    let gbps = 2.0 * (n * 4) as f64 / median / 1e6;
    println!(
        "{}",
        serde_json::json!({"tool": "cuMemcpyDtoD", "kernel": "copy", "ms": median, "gbps": gbps})
    );
    Ok(true)
}

/// Each refusal the CUDA runtime promises, provoked on the real driver.
/// A kernel of sizes without `max` (tests/regress/transpose4d_unbounded:
/// b, h and d's tiles fused on x, s's on y) at sizes past its fused
/// loop's 32-bit counter and past NVIDIA's 65,535 blocks along y: both
/// refused before the driver sees them, naming what; and at sizes within
/// both, it runs.
/// Checks one refusal: what is tried, its result, the words the error must hold.
type Expect<'a> = dyn FnMut(&str, Result<(), String>, &str) + 'a;

fn wide_refusals(dev: &rocmc_runtime_cuda::Device, ptx: &str, expect: &mut Expect) -> Res<bool> {
    let m = dev.load_ptx(ptx).map_err(|e| e.to_string())?;
    let k = m
        .kernel("transpose4d_unbounded")
        .map_err(|e| e.to_string())?;
    let x = dev
        .alloc::<half::f16>(4_200_000)
        .map_err(|e| e.to_string())?;
    let o = dev
        .alloc::<half::f16>(4_200_000)
        .map_err(|e| e.to_string())?;
    let launch = |[b, h, s, d]: [i32; 4]| {
        let args = [
            KernelArg::buffer(&x),
            KernelArg::buffer(&o),
            KernelArg::size(b),
            KernelArg::size(h),
            KernelArg::size(s),
            KernelArg::size(d),
        ];
        k.launch(&args, None).map_err(|e| e.to_string())
    };
    expect(
        "a fused loop past its 32-bit counter",
        launch([1 << 17, 1 << 17, 1, 32]),
        "times at these sizes",
    );
    expect(
        "a grid past NVIDIA's 65,535 blocks along y",
        launch([1, 1, 2_100_000, 2]),
        "more than NVIDIA's 65535",
    );
    let within = launch([1, 1, 2_000_000, 2]);
    let runs = within.is_ok() && dev.synchronize().is_ok();
    println!(
        "{:<44} {}",
        "the same kernel within both",
        if runs { "runs" } else { "WRONG" }
    );
    Ok(runs)
}

fn errors(args: &[String]) -> Res<bool> {
    let (vadd_path, newer_path, wide_path) = match args {
        [v, n] => (v, n, None),
        [v, n, w] => (v, n, Some(w)),
        _ => {
            return Err(
                "errors needs the vadd PTX, one built for a newer GPU and optionally \
                        tests/regress/transpose4d_unbounded's"
                    .into(),
            )
        }
    };
    let read = |p: &String| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let (vadd, newer) = (read(vadd_path)?, read(newer_path)?);
    let cuda = Cuda::load().map_err(|e| e.to_string())?;
    let dev = cuda.device("cuda").map_err(|e| e.to_string())?;
    let mut ok = true;
    let mut expect = |what: &str, r: Result<(), String>, want: &str| {
        let pass = matches!(&r, Err(e) if e.contains(want));
        ok &= pass;
        println!(
            "{:<44} {}  {}",
            what,
            if pass { "refused as expected" } else { "WRONG" },
            r.err()
                .unwrap_or_else(|| "(accepted)".into())
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    };
    expect(
        "PTX for a newer GPU",
        dev.load_ptx(&newer).map(|_| ()).map_err(|e| e.to_string()),
        "rebuild with --mcpu",
    );
    let broken = vadd.replacen("add.f32", "add.f33", 1);
    expect(
        "PTX the driver's compiler rejects",
        dev.load_ptx(&broken).map(|_| ()).map_err(|e| e.to_string()),
        "ptxas application ptx input",
    );
    let m = dev.load_ptx(&vadd).map_err(|e| e.to_string())?;
    let k = m.kernel("vadd").map_err(|e| e.to_string())?;
    let a = dev.alloc::<f32>(100).map_err(|e| e.to_string())?;
    let short = dev.alloc::<f32>(10).map_err(|e| e.to_string())?;
    let ints = dev.alloc::<i32>(100).map_err(|e| e.to_string())?;
    let launch = |args: &[KernelArg]| k.launch(args, None).map_err(|e| e.to_string());
    expect(
        "a buffer shorter than the sizes need",
        launch(&[
            KernelArg::buffer(&a),
            KernelArg::buffer(&short),
            KernelArg::buffer(&a),
            KernelArg::size(100),
        ]),
        "at least 100 elements",
    );
    expect(
        "a buffer of the wrong dtype",
        launch(&[
            KernelArg::buffer(&a),
            KernelArg::buffer(&ints),
            KernelArg::buffer(&a),
            KernelArg::size(100),
        ]),
        "holds f32",
    );
    expect(
        "too few arguments",
        launch(&[KernelArg::buffer(&a), KernelArg::size(100)]),
        "takes 4 arguments",
    );
    expect(
        "a kernel the module does not have",
        m.kernel("saxpy").map(|_| ()).map_err(|e| e.to_string()),
        "no such kernel",
    );
    if let Some(w) = wide_path {
        ok &= wide_refusals(&dev, &read(w)?, &mut expect)?;
    }
    // And the same launch, right, runs.
    let good = launch(&[
        KernelArg::buffer(&a),
        KernelArg::buffer(&a),
        KernelArg::buffer(&a),
        KernelArg::size(100),
    ]);
    println!(
        "{:<44} {}",
        "the correct launch",
        if good.is_ok() { "runs" } else { "WRONG" }
    );
    ok &= good.is_ok();
    Ok(ok)
}
