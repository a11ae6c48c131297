//! rocmc: an ahead-of-time GPU kernel compiler for AMD GPUs.
//!
//! [`compile`] turns a kernel file's text into an [`Artifact`]: the loop IR,
//! optimised LLVM IR, GCN assembly, the relocatable object and the linked
//! code object (`.hsaco`), in memory. The `rocmc` CLI is a thin layer over it.
//!
//! ```no_run
//! let src = std::fs::read_to_string("examples/vadd.toml").unwrap();
//! let opts = rocmc::Options::new("gfx90a");
//! let art = rocmc::compile("examples/vadd.toml", &src, &opts, rocmc::Emit::all()).unwrap();
//! std::fs::write("vadd.hsaco", art.code_object.unwrap()).unwrap();
//! ```

#![deny(missing_docs)]

use rocmc_codegen::{target::DEFAULT_CODE_OBJECT_VERSION, Request, Target, TargetError};
use rocmc_ir::front::RulesFor;
use rocmc_ir::loops::{ArgKind, GpuKernel, Pretty};
use rocmc_ir::{Index, Kernel, KernelError, MathFn, Program};
use rocmc_linker::launch::{
    ArgRole, Extent, KernelLaunch, LaunchArg, LaunchInfo, LaunchRequirement, SizeBound,
    TensorMapLaunch, FORMAT_VERSION,
};
use std::time::{Duration, Instant};

pub mod build;
pub mod cli;
pub mod explain;
pub mod header;
pub mod run;
pub mod toolchain;
pub mod tune;
mod versions;

pub use rocmc_linker::ptxas;

pub use build::Build;
pub use toolchain::Toolchain;

pub use rocmc_codegen as codegen;
pub use rocmc_device as device;
pub use rocmc_ir as ir;
pub use rocmc_linker as linker;
pub use rocmc_remote as remote;
pub use rocmc_runtime as runtime;
pub use rocmc_runtime_hip as runtime_hip;
pub use rocmc_target as target;

/// How to compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Target ID, e.g. `gfx90a` or `gfx942:sramecc+:xnack-`.
    pub mcpu: String,
    /// Code object version: 4, 5 (default) or 6.
    pub code_object_version: u32,
    /// Wave size: `None` for the target's default (64 on gfx9, 32 on gfx10
    /// and later), or `Some(32)` / `Some(64)`.
    pub wave_size: Option<u32>,
    /// Allow fusing `a * b + c` into FMAs (clang's HIP default). Off gives
    /// exactly the reference interpreter's separately rounded operations.
    pub fp_contract: bool,
    /// Values for the kernel's `[tune]` parameters (the rest take their
    /// defaults): what `rocmc build` takes from the tuning database.
    pub tune: Vec<(String, i64)>,
    /// On the CPU, run the matrix instructions (`mma` steps) of this GPU
    /// processor, through its lane layouts (`--emulate gfx942`).
    pub emulate: Option<String>,
}

impl Options {
    /// Options for one target ID (or a comma list), with the defaults: code object v5, the target's wave size, contraction on.
    pub fn new(mcpu: &str) -> Options {
        Options {
            mcpu: mcpu.to_string(),
            code_object_version: DEFAULT_CODE_OBJECT_VERSION,
            wave_size: None,
            fp_contract: true,
            tune: Vec::new(),
            emulate: None,
        }
    }
}

/// Which forms to produce. The loop IR is always produced; the rest only
/// when asked (printing the LLVM module costs as much as a small kernel's
/// code generation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Emit {
    /// Optimised LLVM IR, as text ([`Artifact::llvm_ir`]; empty otherwise).
    pub llvm: bool,
    /// GCN assembly.
    pub asm: bool,
    /// The relocatable object (before linking).
    pub object: bool,
    /// The linked code object (`.hsaco`).
    pub code_object: bool,
}

impl Emit {
    /// Every form.
    pub fn all() -> Emit {
        Emit {
            llvm: true,
            asm: true,
            object: true,
            code_object: true,
        }
    }
}

/// Everything one compilation produced.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The checked kernel.
    pub kernel: Kernel,
    /// Its loop IR.
    pub program: Program,
    /// The target compiled for.
    pub target: Target,
    /// The launch geometry stored in the code object.
    pub launch: LaunchInfo,
    /// Loop IR as pseudo-code.
    pub loops: String,
    /// Optimised LLVM IR, as text.
    pub llvm_ir: String,
    /// GCN assembly, when asked for.
    pub asm: Option<String>,
    /// The relocatable object, when asked for.
    pub object: Option<Vec<u8>>,
    /// The linked code object, when asked for.
    pub code_object: Option<Vec<u8>>,
    /// Wall time of each phase, in order.
    pub timings: Vec<(&'static str, Duration)>,
}

#[derive(Debug, thiserror::Error)]
/// What can go wrong in a compilation; [`Error::exit_code`] maps it to the CLI's exit code.
pub enum Error {
    #[error("{0}")]
    /// A mistake in the kernel file, rendered with file, line and column.
    Kernel(#[from] KernelError),
    #[error("--mcpu: {0}")]
    /// An unknown or malformed target, or an unsupported combination.
    Target(#[from] TargetError),
    #[error("code generation failed: {0}")]
    /// LLVM refused the module rocmc built, or a compiler thread died (a rocmc bug).
    Codegen(#[source] rocmc_codegen::CodegenError),
    /// LLVM's backend could not compile something for the target; rendered
    /// with the kernel file, line and column of the stage it comes from.
    #[error("{0}")]
    Backend(KernelError),
    #[error("linking failed: {0}")]
    /// lld failed (its diagnostics and exit code are in the error).
    Link(#[from] rocmc_linker::LinkError),
    #[error("{path}: {source}")]
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    #[error("{0}")]
    /// A wrong option or argument.
    Usage(String),
    /// The HIP runtime failed (a HIP error, an incompatible code object).
    #[error("{0}")]
    Runtime(String),
    /// A kernel run whose results differ from the reference interpreter.
    #[error("{0}")]
    Mismatch(String),
    /// The loop IR breaks a rule of GPU execution (an LDS race, a barrier
    /// some threads skip): a rocmc bug, found by [`run::run_loops`].
    #[error("{0}")]
    Lowering(String),
}

impl Error {
    /// 2 for mistakes in the user's input, 1 for internal and I/O errors.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Kernel(_) | Error::Target(_) | Error::Usage(_) => 2,
            Error::Codegen(_)
            | Error::Backend(_)
            | Error::Link(_)
            | Error::Io { .. }
            | Error::Mismatch(_)
            | Error::Lowering(_)
            | Error::Runtime(_) => 1,
        }
    }
}

/// What selects the machine code besides the processor, for people:
/// `code object v5, wave64` (AMD), `PTX 7.8, warp 32` (NVIDIA).
pub fn target_summary(t: &Target) -> String {
    toolchain::lookup(t).summary()
}

/// Parses `--mcpu` (one target ID, or several separated by commas) into targets.
pub fn targets(opts: &Options) -> Result<Vec<Target>, Error> {
    let mut out: Vec<Target> = Vec::new();
    for part in opts.mcpu.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(Error::Usage(format!(
                "--mcpu {:?}: empty target in the list",
                opts.mcpu
            )));
        }
        let t = Target::parse(part, opts.wave_size, opts.code_object_version)?;
        if out.iter().any(|o| o.to_string() == t.to_string()) {
            return Err(Error::Usage(format!("--mcpu: target {t} is given twice")));
        }
        out.push(t);
    }
    Ok(out)
}

/// A kernel file parsed, checked and lowered: everything that does not depend on the target.
#[derive(Clone, Debug)]
pub struct Frontend {
    /// The checked kernel.
    pub kernel: Kernel,
    /// Its loop IR.
    pub program: Program,
    /// The launch geometry.
    pub launch: LaunchInfo,
    /// The loop IR as pseudo-code.
    pub loops: String,
    /// Wall time of parsing, validation and lowering.
    pub timings: Vec<(&'static str, Duration)>,
    /// The matrix instructions it was lowered for: `None` unless a stage
    /// has an `mma` step, whose lowering depends on the target (then
    /// [`backend`] lowers it again for each target).
    pub matrix: Option<rocmc_ir::lower::matrix::MatrixUnit>,
    /// The kernel file's name and text, for messages from later phases.
    pub file: String,
    /// See `file`.
    pub source: String,
    /// The tune values it was parsed with: the rules of default
    /// schedules apply again for each target ([`Frontend::for_target`]).
    tune: Vec<(String, i64)>,
}

/// Parses, validates and lowers kernel source text. `file` names it in diagnostics.
///
/// ```no_run
/// let src = std::fs::read_to_string("examples/matmul.toml").unwrap();
/// let front = rocmc::frontend("matmul.toml", &src)?;
/// println!("{}", front.loops); // the scheduled loop nest
/// let opts = rocmc::Options::new("gfx942");
/// let target = rocmc::targets(&opts)?.remove(0);
/// let art = rocmc::backend(&front, &target, &opts, rocmc::Emit { asm: true, ..Default::default() })?;
/// println!("{}", art.asm.unwrap());
/// # Ok::<(), rocmc::Error>(())
/// ```
pub fn frontend(file: &str, source: &str) -> Result<Frontend, Error> {
    frontend_with(file, source, &[])
}

/// [`frontend`] for one configuration of the kernel's `[tune]` parameters:
/// the defaults overridden by `tune`.
pub fn frontend_with(file: &str, source: &str, tune: &[(String, i64)]) -> Result<Frontend, Error> {
    frontend_rules(file, source, tune, RulesFor::default())
}

/// [`frontend_with`] with default schedules written for a target.
fn frontend_rules(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    rules: RulesFor,
) -> Result<Frontend, Error> {
    let first = frontend_defaults(file, source, tune, 2, rules);
    let Err(e) = first else {
        return first;
    };
    // A rule's schedule that does not lower must not make a kernel that
    // compiled without it an error: first each rule the kernel took left
    // out (its stage takes the next rule that fits: a 4-D transpose whose
    // LDS tile is refused gets element-wise tiles, not one thread), then
    // rules without row chains, then the one-thread nest.
    let took: Vec<&'static str> =
        rocmc_ir::parse_kernel_for(file, source, tune, 2, rules).map_or(Vec::new(), |(k, _)| {
            let mut v: Vec<&'static str> = k
                .stages
                .iter()
                .filter_map(|s| s.default.as_ref().map(|d| d.rule))
                .collect();
            v.dedup();
            v
        });
    for rule in &took {
        let skip = [*rule];
        let rules = RulesFor {
            skip: &skip,
            ..rules
        };
        if let Ok(f) = frontend_defaults(file, source, tune, 2, rules) {
            return Ok(f);
        }
    }
    let had_default = rocmc_ir::parse_kernel_with(file, source, tune)
        .is_ok_and(|k| k.stages.iter().any(|s| s.default.is_some()));
    if had_default {
        for level in [1, 0] {
            if let Ok(f) = frontend_defaults(file, source, tune, level, rules) {
                return Ok(f);
            }
        }
    }
    Err(e)
}

fn frontend_defaults(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
    rules: RulesFor,
) -> Result<Frontend, Error> {
    let (kernel, [parse, validate]) =
        rocmc_ir::parse_kernel_for(file, source, tune, defaults, rules)?;
    let t1 = Instant::now();
    let launch = launch_info(&kernel, &Program { kernels: vec![] });
    let mut front = Frontend {
        kernel,
        program: Program { kernels: vec![] },
        launch,
        loops: String::new(),
        timings: vec![("parse", parse), ("validate", validate)],
        matrix: None,
        file: file.into(),
        source: source.into(),
        tune: tune.to_vec(),
    };
    if rocmc_ir::lower::needs_target(&front.kernel) {
        // Lowered per target by `backend`; until then, say so.
        front.loops = format!(
            "// {}: a stage has an `mma` step, so its loops depend on the target (rocmc build --emit loops --mcpu ...)\n",
            front.kernel.name
        );
    } else {
        front.lower(None)?;
    }
    front.timings.push(("lower", t1.elapsed()));
    Ok(front)
}

impl Frontend {
    fn lower(&mut self, unit: Option<rocmc_ir::lower::matrix::MatrixUnit>) -> Result<(), Error> {
        let program = rocmc_ir::lower_file(&self.kernel, &self.file, &self.source, unit.as_ref())?;
        self.set_program(program);
        self.matrix = unit;
        Ok(())
    }

    /// Takes `program` as the kernel's lowering: its launch document and
    /// loop text follow.
    fn set_program(&mut self, program: Program) {
        self.program = program;
        self.launch = launch_info(&self.kernel, &self.program);
        self.loops = self
            .program
            .kernels
            .iter()
            .map(|g| {
                Pretty {
                    kernel: &self.kernel,
                    gpu: g,
                }
                .to_string()
            })
            .collect();
    }

    /// One diagnostic about this kernel's file, as an error to render.
    pub fn diagnostic(&self, d: rocmc_ir::Diagnostic) -> KernelError {
        KernelError {
            file: self.file.clone(),
            source: self.source.clone(),
            diagnostics: vec![d],
        }
    }

    /// [`Frontend::for_target`] without the versions for small sizes.
    fn for_target_unversioned(
        &self,
        target: &Target,
        opts: &Options,
    ) -> Result<std::borrow::Cow<'_, Frontend>, Error> {
        use std::borrow::Cow;
        let by_target = self
            .kernel
            .stages
            .iter()
            .any(|s| s.default.as_ref().is_some_and(|d| d.by_target));
        if by_target {
            // The rules choose again, knowing the target (a matrix product
            // onto its matrix instructions). Where that does not compile,
            // the target-independent choice stands, unless values were
            // given for the knobs: then the error is the user's to see.
            let (rt, shared_limit) = rules_target(target, opts)?;
            let rules = RulesFor {
                target: Some(&rt),
                shared_limit,
                ..RulesFor::default()
            };
            let again = frontend_rules(&self.file, &self.source, &self.tune, rules)
                .and_then(|f| f.lowered_for(target, opts).map(Cow::into_owned));
            match again {
                Ok(f) => return Ok(Cow::Owned(f)),
                Err(e) if !self.tune.is_empty() => return Err(e),
                Err(_) => {}
            }
        }
        self.lowered_for(target, opts)
    }

    /// This kernel, its schedules as they are, lowered for `target`.
    fn lowered_for(
        &self,
        target: &Target,
        opts: &Options,
    ) -> Result<std::borrow::Cow<'_, Frontend>, Error> {
        use std::borrow::Cow;
        let needs = rocmc_ir::lower::needs_target(&self.kernel);
        if !needs && !rocmc_ir::lower::reduces_across_threads(&self.kernel) {
            return Ok(Cow::Borrowed(self));
        }
        // Else lowered again only where the target exchanges lanes.
        let unit = match matrix_unit(target, opts) {
            Err(_) if !needs => return Ok(Cow::Borrowed(self)),
            u => u?,
        };
        let lanes = unit.as_ref().and_then(|u| u.lane_reduction(false));
        if !needs && lanes.is_none() {
            return Ok(Cow::Borrowed(self));
        }
        if self.matrix.is_some() && self.matrix == unit {
            return Ok(Cow::Borrowed(self));
        }
        let mut f = self.clone();
        let t1 = Instant::now();
        f.lower(unit)?;
        if let Some(t) = f.timings.iter_mut().find(|t| t.0 == "lower") {
            t.1 += t1.elapsed();
        }
        Ok(Cow::Owned(f))
    }

    /// The matrix instructions the kernel uses, once lowered for a target.
    pub fn matrix_instructions(&self) -> Vec<&'static rocmc_codegen::target::matrix::MatrixInstr> {
        rocmc_ir::lower::matrix::uses_matrix(&self.program)
    }
}

/// The processor default schedules are written for on `target`: itself,
/// or on the CPU the one `opts.emulate` names, within the CPU's shared
/// memory.
pub fn rules_target(target: &Target, opts: &Options) -> Result<(Target, Option<u32>), Error> {
    toolchain::lookup(target).rules_target(opts)
}

/// The kernel of `source` as compiled for `target`: its default schedules
/// written for it, `tune` applied. What `rocmc tune` searches and what
/// the tuning database is matched against.
pub fn kernel_for(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    target: &Target,
    opts: &Options,
) -> Result<Kernel, Error> {
    let (rt, shared_limit) = rules_target(target, opts)?;
    let rules = RulesFor {
        target: Some(&rt),
        shared_limit,
        ..RulesFor::default()
    };
    Ok(rocmc_ir::parse_kernel_for(file, source, tune, 2, rules)?.0)
}

/// Which matrix instructions `mma` steps use on `target`: its own, or on
/// the CPU those of `opts.emulate`.
pub fn matrix_unit(
    target: &Target,
    opts: &Options,
) -> Result<Option<rocmc_ir::lower::matrix::MatrixUnit>, Error> {
    toolchain::lookup(target).matrix_unit(opts)
}

/// Compiles a lowered kernel for one target.
pub fn backend(
    front: &Frontend,
    target: &Target,
    opts: &Options,
    emit: Emit,
) -> Result<Artifact, Error> {
    let tc = toolchain::lookup(target);
    let lowered = front.for_target(target, opts)?;
    let front: &Frontend = &lowered;
    check_lds(front, &*tc)?;
    check_partial(front, &*tc)?;
    rocmc_codegen::set_crash_context(&front.file);
    let mut timings = front.timings.clone();
    for (asked, out) in [
        (emit.object, toolchain::Output::Object),
        (emit.code_object, tc.module_output()),
    ] {
        if let Some(why) = asked.then(|| tc.refuses(out)).flatten() {
            return Err(Error::Usage(why));
        }
    }
    let req = Request {
        llvm_ir: emit.llvm,
        asm: emit.asm,
        object: (emit.object || emit.code_object) && !tc.asm_is_module(),
        no_fp_contract: !opts.fp_contract,
    };
    let mut launch = front.launch.clone();
    let module_asm = tc.embed_launch(&mut launch, &front.program);
    let out = rocmc_codegen::compile(&front.kernel, &front.program, target, &module_asm, req)
        .map_err(|e| match e {
            rocmc_codegen::CodegenError::Target(t) => Error::Target(t),
            rocmc_codegen::CodegenError::Backend { message, kernel } => {
                Error::Backend(backend_diagnostic(front, &*tc, &message, kernel.as_deref()))
            }
            other => Error::Codegen(other),
        })?;
    let t1 = Instant::now();
    timings.extend(out.timings.iter().copied());
    let code_object = match (&out.object, emit.code_object) {
        (Some(obj), true) => tc.link(obj).transpose()?,
        _ => None,
    };
    timings.push(("link", t1.elapsed()));
    Ok(Artifact {
        kernel: front.kernel.clone(),
        program: front.program.clone(),
        target: target.clone(),
        launch,
        loops: front.loops.clone(),
        llvm_ir: out.llvm_ir,
        asm: out.asm,
        object: out.object.filter(|_| emit.object),
        code_object,
        timings,
    })
}

/// Points an error of LLVM's backend at the kernel file: at the stage of
/// the kernel function it is about (`kernel`, from codegen) or, within
/// it, at the inlined stage calling the math function the message names
/// (LLVM says `fexp` for `exp`); without a kernel, at the first stage
/// calling that function, else at the first stage.
pub fn backend_diagnostic(
    front: &Frontend,
    tc: &dyn Toolchain,
    msg: &str,
    kernel: Option<&str>,
) -> KernelError {
    use rocmc_ir::kernel::{Expr, ExprKind};
    fn calls(e: &Expr, f: MathFn) -> bool {
        match &e.kind {
            ExprKind::Call(g, args) => *g == f || args.iter().any(|a| calls(a, f)),
            ExprKind::Unary(_, a) | ExprKind::Cast(a) => calls(a, f),
            ExprKind::Binary(_, a, b) => calls(a, f) || calls(b, f),
            ExprKind::Select(c, a, b) => calls(c, f) || calls(a, f) || calls(b, f),
            _ => false,
        }
    }
    let k = &front.kernel;
    let named = MathFn::ALL.into_iter().find(|f| {
        msg.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == f.name() || w.strip_prefix('f') == Some(f.name()))
    });
    // The stage whose kernel it is, and the stages inlined into kernels.
    let own = kernel
        .and_then(|n| front.program.kernels.iter().find(|g| g.name == n))
        .map(|g| k.stage(g.stage));
    let candidates: Vec<&rocmc_ir::kernel::Stage> = match own {
        Some(st) => std::iter::once(st)
            .chain(k.stages.iter().filter(|s| s.is_inlined()))
            .collect(),
        None => k.stages.iter().collect(),
    };
    let stage = named
        .and_then(|f| {
            candidates
                .iter()
                .copied()
                .find(|s| calls(&s.value, f) || s.reduce().is_some_and(|r| calls(&r.body, f)))
        })
        .or(own)
        .or(k.stages.first());
    let what = named.map_or("this kernel".to_string(), |f| format!("`{}`", f.name()));
    let span = stage.map_or(rocmc_ir::diag::Span::new(0, 0), |s| s.span);
    front.diagnostic(
        rocmc_ir::diag::Diagnostic::new(
            span,
            format!(
                "LLVM's {} backend cannot compile {what} for {}",
                tc.llvm_backend(),
                tc.target()
            ),
        )
        .label("in this stage")
        .hint(format!("LLVM said: {msg}"))
        .hint("this is a rocmc bug (rocmc expands every math function itself): please report it with this kernel"),
    )
}

/// Refuses kernels whose LDS exceeds what one work-group of `target` may
/// use, pointing at the step that asked for the largest array.
/// A written schedule is kept as written, not completed by the rules; one
/// that binds no loop to the GPU's indices would run a whole stage on one
/// GPU thread, which no one wants: refused on GPU targets (the CPU runs
/// such a nest as the serial loops it is).
fn check_partial(front: &Frontend, tc: &dyn Toolchain) -> Result<(), Error> {
    use rocmc_ir::schedule::StepKind;
    if !tc.needs_bound_schedule() {
        return Ok(());
    }
    let target = tc.target();
    for st in &front.kernel.stages {
        let written = st.default.is_none() && !st.schedule.is_empty() && !st.is_internal();
        let work = !st.axes.is_empty() || st.reduce().is_some();
        let binds = st.schedule.iter().any(|s| {
            matches!(
                s.kind,
                StepKind::Bind { .. }
                    | StepKind::Scan { .. }
                    | StepKind::TopK { .. }
                    | StepKind::Attention { .. }
            )
        });
        if written && work && !binds {
            let d = rocmc_ir::Diagnostic::new(
                st.schedule[0].span,
                format!(
                    "stage `{}`'s schedule binds no loop to blockIdx or threadIdx: on {target} one GPU thread would run all of it",
                    st.name
                ),
            )
            .hint("bind its loops (`bind(io, blockIdx.x)`, `bind(ii, threadIdx.x)`), or leave `schedule` out for the default, which `rocmc build --emit schedule` prints; rocmc does not complete a partial schedule");
            return Err(Error::Kernel(front.diagnostic(d)));
        }
    }
    Ok(())
}

fn check_lds(front: &Frontend, tc: &dyn Toolchain) -> Result<(), Error> {
    let target = tc.target();
    let limit = u64::from(target.lds_limit());
    for g in &front.program.kernels {
        let used: u64 = g.shared.iter().map(|s| s.bytes()).sum();
        let Some(big) = g.shared.iter().max_by_key(|s| s.bytes()) else {
            continue;
        };
        if used > limit {
            let parts: Vec<String> = g
                .shared
                .iter()
                .map(|s| format!("{} {} B", s.name, s.bytes()))
                .collect();
            let d = rocmc_ir::Diagnostic::new(
                big.span,
                format!(
                    "kernel `{}` needs {used} bytes of {}; a {} on {target} has {limit}",
                    g.name,
                    target.shared_memory_name(),
                    tc.group_name()
                ),
            )
            .hint(format!("{} arrays: {}", target.shared_memory_name(), parts.join(", ")))
            .hint("use smaller tiles, or build for a processor with more LDS (`rocmc targets` lists them)");
            return Err(Error::Kernel(front.diagnostic(d)));
        }
    }
    Ok(())
}

/// Compiles kernel source text for the one target `opts.mcpu` names.
pub fn compile(file: &str, source: &str, opts: &Options, emit: Emit) -> Result<Artifact, Error> {
    let ts = targets(opts)?;
    if ts.len() != 1 {
        return Err(Error::Usage(format!(
            "--mcpu {}: `compile` takes one target; use `compile_all` for several",
            opts.mcpu
        )));
    }
    backend(&frontend(file, source)?, &ts[0], opts, emit)
}

/// ```no_run
/// let src = std::fs::read_to_string("examples/vadd.toml").unwrap();
/// let opts = rocmc::Options::new("gfx90a,gfx942,gfx1100");
/// let arts = rocmc::compile_all("vadd.toml", &src, &opts, rocmc::Emit::all())?;
/// std::fs::write("vadd.hipfb", rocmc::bundle(&arts)).unwrap();
/// # Ok::<(), rocmc::Error>(())
/// ```
///
/// Compiles for every target in `opts.mcpu`, in parallel (one thread per
/// target; linking is serialised inside lld's lock). Results follow the
/// order of the targets.
pub fn compile_all(
    file: &str,
    source: &str,
    opts: &Options,
    emit: Emit,
) -> Result<Vec<Artifact>, Error> {
    compile_for(file, source, &targets(opts)?, opts, emit)
}

/// [`compile_all`] for targets already parsed (with [`targets`]): the
/// target IDs are parsed once, at the boundary.
pub fn compile_for(
    file: &str,
    source: &str,
    ts: &[Target],
    opts: &Options,
    emit: Emit,
) -> Result<Vec<Artifact>, Error> {
    let front = frontend_with(file, source, &opts.tune)?;
    if ts.len() == 1 {
        return Ok(vec![backend(&front, &ts[0], opts, emit)?]);
    }
    let arts: Vec<Artifact> = std::thread::scope(|s| {
        let handles: Vec<_> = ts
            .iter()
            .map(|t| s.spawn(|| backend(&front, t, opts, emit)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Codegen(rocmc_codegen::CodegenError::Internal(
                        "a compiler thread panicked (a rocmc bug)".into(),
                    )))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    // One bundle has one launch: with `mma`, the block follows the wave size.
    for a in &arts[1..] {
        for (x, y) in arts[0].launch.kernels.iter().zip(&a.launch.kernels) {
            if x.block != y.block {
                return Err(Error::Usage(format!(
                    "kernel `{}` launches blocks of {:?} on {} and {:?} on {} (its `mma` step makes threadIdx.x the lane of a wave); build these targets separately",
                    x.name, x.block, arts[0].target, y.block, a.target
                )));
            }
        }
    }
    Ok(arts)
}

/// Packs the code objects of several artifacts into one clang offload bundle.
pub fn bundle(artifacts: &[Artifact]) -> Vec<u8> {
    let entries: Vec<(String, Vec<u8>)> = artifacts
        .iter()
        .filter_map(|a| a.code_object.clone().map(|c| (a.target.to_string(), c)))
        .collect();
    rocmc_linker::bundle::write(&entries)
}

pub(crate) fn extent(e: &Index, names: &[String]) -> Extent {
    use rocmc_ir::IOp;
    match e {
        Index::Const(v) => Extent::Const(*v),
        Index::Size(s) => Extent::Size(names[s.0 as usize].clone()),
        // Launch geometry and shapes never mention loop variables.
        Index::Var(_) => Extent::Const(0),
        Index::Bin(op, a, b) => {
            let (a, b) = (Box::new(extent(a, names)), Box::new(extent(b, names)));
            match op {
                IOp::Add => Extent::Add(a, b),
                IOp::Sub => Extent::Sub(a, b),
                IOp::Mul => Extent::Mul(a, b),
                IOp::Div => Extent::Div(a, b),
                IOp::CeilDiv => Extent::CeilDiv(a, b),
                IOp::Mod => Extent::Mod(a, b),
                IOp::Min => Extent::Min(a, b),
                IOp::Max => Extent::Max(a, b),
                IOp::Xor => Extent::Xor(a, b),
            }
        }
    }
}

/// The launch document for a lowered program.
pub fn launch_info(k: &Kernel, p: &Program) -> LaunchInfo {
    let names = k.size_names();
    let kernel = |g: &GpuKernel| KernelLaunch {
        name: g.name.clone(),
        block: g.block,
        grid: [
            extent(&g.grid[0], &names),
            extent(&g.grid[1], &names),
            extent(&g.grid[2], &names),
        ],
        grid_text: [0, 1, 2].map(|d| g.grid[d].display(&names, &[]).to_string()),
        args: g
            .args
            .iter()
            .map(|a| match &a.kind {
                ArgKind::Buffer { tensor, access } => {
                    let t = k.tensor(*tensor);
                    LaunchArg {
                        name: a.name.clone(),
                        role: ArgRole::Buffer,
                        dtype: t.dtype.to_string(),
                        shape: t.shape.iter().map(|e| extent(e, &names)).collect(),
                        // A scatter's output is read and written (atomically).
                        written: *access != rocmc_ir::loops::Access::Read,
                    }
                }
                ArgKind::Size(_) => LaunchArg {
                    name: a.name.clone(),
                    role: ArgRole::Size,
                    dtype: "i32".into(),
                    shape: vec![],
                    written: false,
                },
                ArgKind::Param(p) => LaunchArg {
                    name: a.name.clone(),
                    role: ArgRole::Scalar,
                    dtype: k.params[p.0 as usize].dtype.to_string(),
                    shape: vec![],
                    written: false,
                },
            })
            .collect(),
        // Set per target by `backend`: only NVIDIA has the static limit,
        // and where dynamic arrays start depends on the target.
        dynamic_shared: 0,
        dynamic_shared_bytes: None,
        tensor_maps: g
            .tensor_maps
            .iter()
            .map(|m| TensorMapLaunch {
                arg: g
                    .args
                    .iter()
                    .position(
                        |a| matches!(a.kind, ArgKind::Buffer { tensor, .. } if tensor == m.tensor),
                    )
                    .expect("a tensor copy's tensor is a buffer argument"),
                boxed: m.boxed.clone(),
                swizzle: m.swizzle,
            })
            .collect(),
        requires: g
            .requires
            .iter()
            .map(|r| LaunchRequirement {
                extent: extent(&r.extent, &names),
                max: r.max,
                text: r.extent.display(&names, &[]).to_string(),
                what: r.what.clone(),
            })
            .collect(),
    };
    LaunchInfo {
        version: FORMAT_VERSION,
        sizes: k
            .sizes
            .iter()
            .map(|s| SizeBound {
                name: s.name.clone(),
                max: s.max,
                divisor: s.divisor,
            })
            .collect(),
        kernels: p.kernels.iter().map(kernel).collect(),
    }
}

/// One line per kernel: name, block, grid and arguments, prefixed by `prefix`.
pub fn launch_summary(l: &LaunchInfo, prefix: &str) -> String {
    let mut s = String::new();
    for k in &l.kernels {
        let args: Vec<String> = k
            .args
            .iter()
            .map(|a| match a.role {
                ArgRole::Buffer => {
                    let shape: Vec<String> = a.shape.iter().map(extent_text).collect();
                    format!(
                        "{}: {}{}[{}]",
                        a.name,
                        if a.written { "out " } else { "" },
                        a.dtype,
                        shape.join(", ")
                    )
                }
                _ => format!("{}: {}", a.name, a.dtype),
            })
            .collect();
        s.push_str(&format!(
            "{prefix}kernel {}: block ({}, {}, {}), grid ({}, {}, {}); args {}\n",
            k.name,
            k.block[0],
            k.block[1],
            k.block[2],
            k.grid_text[0],
            k.grid_text[1],
            k.grid_text[2],
            args.join(", ")
        ));
        for r in &k.requires {
            s.push_str(&format!(
                "{prefix}  requires {} <= {} at launch ({})\n",
                r.text, r.max, r.what
            ));
        }
    }
    s
}

fn extent_text(e: &Extent) -> String {
    // Operands that are themselves operations get parentheses.
    let sub = |x: &Extent| match x {
        Extent::Const(_)
        | Extent::Size(_)
        | Extent::CeilDiv(..)
        | Extent::Min(..)
        | Extent::Max(..)
        | Extent::Xor(..) => extent_text(x),
        _ => format!("({})", extent_text(x)),
    };
    match e {
        Extent::Const(v) => v.to_string(),
        Extent::Size(n) => n.clone(),
        Extent::Add(a, b) => format!("{} + {}", sub(a), sub(b)),
        Extent::Sub(a, b) => format!("{} - {}", sub(a), sub(b)),
        Extent::Mul(a, b) => format!("{} * {}", sub(a), sub(b)),
        Extent::Div(a, b) => format!("{} / {}", sub(a), sub(b)),
        Extent::CeilDiv(a, b) => format!("ceil({} / {})", sub(a), sub(b)),
        Extent::Mod(a, b) => format!("{} % {}", sub(a), sub(b)),
        Extent::Min(a, b) => format!("min({}, {})", extent_text(a), extent_text(b)),
        Extent::Max(a, b) => format!("max({}, {})", extent_text(a), extent_text(b)),
        Extent::Xor(a, b) => format!("xor({}, {})", extent_text(a), extent_text(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_errors_point_at_the_stage_that_calls_the_function() {
        let src = "[kernel]\nname = \"k\"\nsizes = [\"n\"]\n\n[inputs]\nx = { dtype = \"f64\", shape = [\"n\"] }\n\n[[stage]]\ncompute = \"A[i] = x[i] * 2.0\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n\n[[stage]]\ncompute = \"B[i] = exp(A[i])\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n";
        let front = frontend("k.toml", src).unwrap();
        let t = Target::parse("gfx90a", None, 5).unwrap();
        let e = backend_diagnostic(
            &front,
            &*toolchain::lookup(&t),
            "no libcall available for fexp",
            None,
        );
        let text = e.render();
        assert!(text.contains("cannot compile `exp` for gfx90a"), "{text}");
        assert!(text.contains("k.toml:13:"), "{text}");
        assert!(
            text.contains("LLVM said: no libcall available for fexp"),
            "{text}"
        );
    }

    /// With the kernel codegen names, the error points at that kernel's
    /// stage even when the message names no function rocmc knows.
    #[test]
    fn backend_errors_point_at_the_kernel_codegen_names() {
        let src = "[kernel]\nname = \"k\"\nsizes = [\"n\"]\n\n[inputs]\nx = { dtype = \"f32\", shape = [\"n\"] }\n\n[[stage]]\ncompute = \"A[i] = x[i] * 2.0\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n\n[[stage]]\ncompute = \"B[i] = A[i] + 1.0\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n";
        let front = frontend("k.toml", src).unwrap();
        let t = Target::parse("gfx90a", None, 5).unwrap();
        let second = &front.program.kernels[1].name;
        let e = backend_diagnostic(
            &front,
            &*toolchain::lookup(&t),
            "cannot select: something",
            Some(second),
        );
        let text = e.render();
        assert!(text.contains("k.toml:13:"), "{text}");
        let e = backend_diagnostic(&front, &*toolchain::lookup(&t), "cannot select", None);
        assert!(e.render().contains("k.toml:8:"), "{}", e.render());
    }
}
