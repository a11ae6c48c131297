//! `rocmc tune`: the compiler's half of autotuning. The search, the
//! measuring, offline plans and the tuning database live in
//! [`rocmc_tuner`] (no LLVM there, so `rocmc-worker` can measure a plan
//! where only the GPU is); this module compiles each candidate for them.

pub use rocmc_tuner::{
    candidates, check_sizes, db, plan, table, Candidate, Devices, Event, Outcome, Search, Strategy,
    TuneReport,
};

use crate::{Emit, Error, Options};
use rocmc_ir::tune::Config;
use rocmc_remote::Device;
use rocmc_target::{ModuleForm, Target};
use rocmc_tuner::Compiled;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// What to tune and how hard.
#[derive(Clone, Debug)]
pub struct TuneRequest {
    /// The kernel file's name (for diagnostics).
    pub file: String,
    /// Its text.
    pub source: String,
    /// The sizes to tune for, in the kernel's order.
    pub sizes: Vec<i64>,
    /// At most this many candidates.
    pub budget: usize,
    /// Stop starting new measurements after this long.
    pub time_limit: Option<Duration>,
    /// Seed of the search and of the inputs.
    pub seed: u64,
    /// Timed launches per kernel per candidate (after warm-up).
    pub reps: u32,
    /// Parallel compilations.
    pub jobs: usize,
    /// Breed generations from the fastest when the space exceeds the
    /// budget (else one uniform sample); see [`rocmc_tuner::search`].
    pub evolve: bool,
    /// Refuse candidates whose occupancy is below this: on AMD waves per
    /// SIMD (as LLVM computes it from registers and LDS), on NVIDIA warps
    /// per scheduler (from ptxas's registers and shared memory).
    pub min_occupancy: Option<u32>,
    /// Compiler options; `mcpu` is taken from the device.
    pub opts: Options,
}

impl TuneRequest {
    /// A request with the CLI's defaults.
    pub fn new(file: &str, source: &str, sizes: Vec<i64>, opts: Options) -> TuneRequest {
        TuneRequest {
            file: file.into(),
            source: source.into(),
            sizes,
            budget: 64,
            time_limit: None,
            seed: 1,
            reps: 30,
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
            evolve: true,
            min_occupancy: None,
            opts,
        }
    }
}

/// The targets devices report, each parsed once for every candidate
/// compiled for it (the search names a device's target by its string).
#[derive(Default)]
struct Parsed(std::sync::Mutex<HashMap<String, Result<Target, String>>>);

impl Parsed {
    fn get(&self, req: &TuneRequest, target: &str) -> Result<Target, String> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(target.to_string())
            .or_insert_with(|| {
                let mut o = req.opts.clone();
                o.mcpu = target.to_string();
                crate::targets(&o)
                    .map(|mut t| t.remove(0))
                    .map_err(first_line)
            })
            .clone()
    }
}

fn compile(req: &TuneRequest, t: &Target, config: &Config) -> Result<Compiled, String> {
    let front = crate::frontend_with(&req.file, &req.source, config).map_err(first_line)?;
    let mut o = req.opts.clone();
    o.mcpu = t.to_string();
    let ptx = t.module_form() == ModuleForm::Ptx;
    let amd = t.module_form() == ModuleForm::CodeObject;
    // LLVM states each AMD kernel's occupancy in its assembly.
    let occupancy = amd && req.min_occupancy.is_some();
    let art = crate::backend(
        &front,
        t,
        &o,
        Emit {
            code_object: !ptx,
            asm: ptx || occupancy,
            ..Default::default()
        },
    )
    .map_err(first_line)?;
    if let (true, Some(floor), Some(asm)) = (occupancy, req.min_occupancy, &art.asm) {
        if let Some(low) = asm
            .lines()
            .filter_map(|l| l.trim().strip_prefix("; Occupancy:"))
            .filter_map(|v| v.trim().parse::<u32>().ok())
            .min()
            .filter(|&w| w < floor)
        {
            return Err(format!(
                "occupancy {low} waves per SIMD, below the floor of {floor} (--min-occupancy)"
            ));
        }
    }
    if let (true, Some(floor)) = (ptx, req.min_occupancy) {
        let text = art.asm.as_deref().unwrap_or_default();
        // Threads per block, and the dynamic shared memory ptxas does not count.
        let block = |name: &str| {
            art.launch.kernel(name).map_or((1, 0), |k| {
                (k.block.iter().product::<u32>(), k.dynamic_shared)
            })
        };
        if let Some((kernel, warps)) = nvidia_occupancy(t, text, &block)?
            .into_iter()
            .min_by_key(|(_, w)| *w)
            .filter(|(_, w)| *w < floor)
        {
            return Err(format!(
                "{kernel}: occupancy {warps} warps per scheduler (ptxas's registers and shared memory), below the floor of {floor} (--min-occupancy)"
            ));
        }
    }
    let module = if ptx {
        art.asm.unwrap_or_default().into_bytes()
    } else {
        art.code_object.unwrap_or_default()
    };
    if amd {
        if let Ok(co) = rocmc_linker::codeobject::read(&module) {
            for k in &co.kernels {
                if k.vgpr_spill_count > 0
                    || k.sgpr_spill_count > 0
                    || k.private_segment_fixed_size > 0
                {
                    return Err(format!(
                        "{} spills ({} VGPRs, {} SGPRs spilled, {} bytes of scratch)",
                        k.name,
                        k.vgpr_spill_count,
                        k.sgpr_spill_count,
                        k.private_segment_fixed_size
                    ));
                }
            }
        }
    }
    Ok(Compiled {
        module,
        launch: art.launch,
    })
}

/// Per kernel, resident warps per warp scheduler (4 per SM) as the
/// occupancy rules of NVIDIA's CUDA guide give them from ptxas's registers
/// and static shared memory, plus the dynamic shared memory `block` gives
/// with each kernel's threads: the NVIDIA counterpart of AMD's waves per
/// SIMD. Spilling kernels are refused outright.
fn nvidia_occupancy(
    t: &rocmc_codegen::Target,
    ptx: &str,
    block: &dyn Fn(&str) -> (u32, u32),
) -> Result<Vec<(String, u32)>, String> {
    let ptxas = rocmc_linker::ptxas::find().ok_or(
        "--min-occupancy on NVIDIA needs ptxas for register counts (scripts/install-ptxas.sh)",
    )?;
    let sm = t.processor();
    let cc: u32 = sm
        .trim_start_matches("sm_")
        .trim_end_matches(['a', 'f'])
        .parse()
        .unwrap_or(0);
    // (max warps, max blocks, shared memory bytes) per SM, by compute capability.
    let (max_warps, max_blocks, smem_per_sm) = match cc {
        0..=75 => (32, 16, 64 << 10),
        80 => (64, 32, 164 << 10),
        86..=89 => (48, 16, 100 << 10),
        90 => (64, 32, 228 << 10),
        _ => (48, 32, 228 << 10),
    };
    let reports = rocmc_linker::ptxas::assemble(&ptxas, ptx, sm)?;
    let mut out = Vec::new();
    for r in reports {
        if r.spill_stores > 0 {
            return Err(format!(
                "{} spills ({} bytes of spill stores, ptxas)",
                r.kernel, r.spill_stores
            ));
        }
        let (threads, dynamic_shared) = block(&r.kernel);
        let warps_per_block = threads.div_ceil(32).max(1);
        // Registers are allocated per warp in units of 256.
        let regs_per_warp = (r.registers.max(1) * 32).div_ceil(256) * 256;
        let by_regs = 65536 / regs_per_warp / warps_per_block;
        // Each block also reserves 1 KiB of shared memory for the system.
        let by_smem = smem_per_sm / (r.shared_bytes + dynamic_shared + 1024);
        let blocks = by_regs
            .min(by_smem)
            .min(max_blocks)
            .min(max_warps / warps_per_block);
        out.push((r.kernel, blocks * warps_per_block / 4));
    }
    Ok(out)
}

fn first_line(e: Error) -> String {
    let t = e.to_string();
    // Compiler errors render with the source; the message is what matters here.
    t.lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or(t.lines().next().unwrap_or(""))
        .trim_start_matches("error: ")
        .to_string()
}

/// The kernel and its tune space as compiled for `target` (the knobs of
/// its default schedules depend on it); without a target, as written.
fn parse(
    req: &TuneRequest,
    target: Option<&str>,
) -> Result<(rocmc_ir::Kernel, rocmc_ir::tune::Tuning), Error> {
    let k = match target {
        Some(t) => {
            let mut o = req.opts.clone();
            o.mcpu = t.to_string();
            let t = crate::targets(&o)?.remove(0);
            crate::kernel_for(&req.file, &req.source, &[], &t, &o)?
        }
        None => rocmc_ir::front::parse_kernel(&req.file, &req.source)?,
    };
    let Some(tuning) = k.tuning.clone() else {
        return Err(Error::Usage(format!(
            "{}: the kernel has no [tune] section and every stage has a schedule: nothing to tune (see docs/kernel-format.md, \"Tunable parameters\", and docs/tuning.md on default schedules)",
            req.file
        )));
    };
    if req.sizes.len() != k.sizes.len() {
        return Err(Error::Usage(
            "every size of the kernel must be given".into(),
        ));
    }
    Ok((k, tuning))
}

/// Tunes the kernel of `req` on one open device.
pub fn tune(
    req: &TuneRequest,
    dev: &mut dyn Device,
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, Error> {
    tune_on(req, Devices::One(dev), on)
}

/// Tunes the kernel of `req`, spreading the measuring over `devices`.
pub fn tune_on(
    req: &TuneRequest,
    devices: Devices,
    on: &mut dyn FnMut(Event),
) -> Result<TuneReport, Error> {
    let start = Instant::now();
    // The space is that of the first device's target (`cpu` when named).
    let target = match &devices {
        Devices::One(d) => Some(d.info().target.clone()),
        Devices::Named(n) => n
            .first()
            .filter(|d| d.as_str() == "cpu")
            .map(|_| "x86-64".to_string()),
    };
    let (k, tuning) = parse(req, target.as_deref())?;
    let parsed = Parsed::default();
    let bench = rocmc_tuner::Bench::new(
        k,
        req.sizes.clone(),
        req.seed,
        req.reps,
        req.time_limit.map(|t| start + t),
    )
    .map_err(Error::Usage)?;
    let settings = rocmc_tuner::SearchSettings {
        budget: req.budget,
        seed: req.seed,
        evolve: req.evolve,
        jobs: req.jobs,
    };
    let mut r = rocmc_tuner::search(
        &tuning.space,
        &bench,
        &settings,
        devices,
        &|target: &str, c: &Config| compile(req, &parsed.get(req, target)?, c),
        on,
    )
    .map_err(Error::Runtime)?;
    r.elapsed = start.elapsed();
    Ok(r)
}

/// Compiles one generation for `target` into an offline plan in `dir`
/// (see [`rocmc_tuner::plan`]); `rocmc-worker measure DIR` measures it.
pub fn export(
    req: &TuneRequest,
    target: &str,
    dir: &Path,
    on: &mut dyn FnMut(Event),
) -> Result<plan::Plan, Error> {
    let start = Instant::now();
    let mut o = req.opts.clone();
    o.mcpu = target.to_string();
    // The flag here is --target; the compiler's message names --mcpu.
    let t = crate::targets(&o)
        .map_err(|e| match e {
            Error::Target(t) => Error::Usage(format!("--target: {t}")),
            other => other,
        })?
        .remove(0);
    let target = t.to_string();
    let (_, tuning) = parse(req, Some(&target))?;
    let (valid, configs) = candidates(&tuning.space, req.budget.max(1), req.seed);
    on(Event::Compiling {
        round: 1,
        n: configs.len(),
    });
    let compiled =
        rocmc_tuner::compile_all(&configs, &|c: &Config| compile(req, &t, c), req.jobs, on);
    let ext = match t.module_form() {
        ModuleForm::Ptx => "ptx",
        ModuleForm::CodeObject => "hsaco",
        ModuleForm::SharedObject => "so",
    };
    let mut p = plan::Plan {
        format: plan::FORMAT,
        rocmc: db::VERSION.into(),
        kernel_file: Path::new(&req.file)
            .file_name()
            .map_or(req.file.clone(), |f| f.to_string_lossy().into_owned()),
        source: req.source.clone(),
        kernel_hash: db::kernel_hash(&req.source).map_err(Error::Usage)?,
        target: target.clone(),
        sizes: req.sizes.clone(),
        seed: req.seed,
        reps: req.reps,
        space: tuning.space.size().to_string(),
        valid,
        compile_seconds: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        candidates: configs
            .iter()
            .map(|c| plan::PlanCandidate {
                config: c.clone(),
                module: None,
                launch: None,
                refused: None,
            })
            .collect(),
    };
    p.write(dir, &compiled, ext).map_err(Error::Usage)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dynamic shared memory counts against the SM's like static: eight
    /// 32-deep stages of the example's tiles at 128x128 blocks (148 KiB)
    /// leave room for one block, where its registers would allow two.
    #[test]
    fn nvidia_occupancy_counts_dynamic_shared_memory() {
        if rocmc_linker::ptxas::find().is_none() {
            panic!("ptxas is missing: scripts/install-ptxas.sh installs it");
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let src = std::fs::read_to_string(root.join("examples/gemm_f16_mma.toml"))
            .unwrap()
            .replace("tile(i, j, 128, 256)", "tile(i, j, 128, 128)")
            .replace("split(k, 64)", "split(k, 32)")
            .replace("stages=4)", "stages=8)");
        let opts = crate::Options::new("sm_90");
        let emit = crate::Emit {
            asm: true,
            ..Default::default()
        };
        let art = crate::compile("k.toml", &src, &opts, emit).unwrap();
        let launch = &art.launch.kernels[0];
        assert_eq!(launch.dynamic_shared, 8 * (128 * 40 + 32 * 136) * 2);
        let t = crate::targets(&opts).unwrap().remove(0);
        let ptx = art.asm.unwrap();
        let warps = |dynamic: u32| nvidia_occupancy(&t, &ptx, &|_| (128, dynamic)).unwrap()[0].1;
        // 4 warps per block: two blocks by registers, one by shared memory.
        assert_eq!(warps(0), 2);
        assert_eq!(warps(launch.dynamic_shared), 1);
    }
}
