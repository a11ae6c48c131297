//! A stage's schedule as data: the steps written (or chosen by a rule)
//! for it, and the loop nest [`crate::schedule::apply`] makes of them,
//! which lowering turns into loop IR. Kept apart from the scheduling code
//! so that the tensor IR ([`crate::kernel`]) can hold a stage's schedule
//! without depending on how schedules are applied.

use crate::diag::Span;
use crate::index::{Index, TensorId, VarId};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    X,
    Y,
    Z,
}

impl Dim {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A hardware index a loop can be bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuAxis {
    Block(Dim),
    Thread(Dim),
}

impl GpuAxis {
    pub const ALL: [&'static str; 6] = [
        "blockIdx.x",
        "blockIdx.y",
        "blockIdx.z",
        "threadIdx.x",
        "threadIdx.y",
        "threadIdx.z",
    ];

    pub fn parse(s: &str) -> Option<GpuAxis> {
        let i = GpuAxis::ALL.iter().position(|a| *a == s)?;
        let d = [Dim::X, Dim::Y, Dim::Z][i % 3];
        Some(if i < 3 {
            GpuAxis::Block(d)
        } else {
            GpuAxis::Thread(d)
        })
    }
}

impl fmt::Display for GpuAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, d) = match self {
            GpuAxis::Block(d) => ("blockIdx", d),
            GpuAxis::Thread(d) => ("threadIdx", d),
        };
        write!(f, "{kind}.{}", ["x", "y", "z"][d.index()])
    }
}

/// A name in a step, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Name {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// `outer, inner = split(loop, factor)`; or `nparts=` for the outer extent.
    Split {
        target: Name,
        by: SplitBy,
        outer: Name,
        inner: Name,
    },
    /// `fused = fuse(outer, inner)`; the two loops must be adjacent.
    Fuse {
        outer: Name,
        inner: Name,
        fused: Name,
    },
    /// `reorder(a, b, ...)`: these loops take the positions they occupy, in this order.
    Reorder(Vec<Name>),
    /// `xo, yo, xi, yi = tile(x, y, fx, fy)`
    Tile {
        x: Name,
        y: Name,
        fx: i64,
        fy: i64,
        results: [Name; 4],
    },
    Bind {
        target: Name,
        axis: GpuAxis,
    },
    Unroll(Name),
    /// `occupancy(blocks=N)`: registers budgeted so that N work-groups fit
    /// on one SM (CU).
    Occupancy(u32),
    /// `privatize(H)`: a scatter accumulates into a per-work-group LDS copy
    /// of its output, combined into memory once per element at the end.
    Privatize(Name),
    /// `mma(ri, rj, rk)` or `mma(ri, rj, rk, instr=v_mfma_f32_16x16x16_f16)`:
    /// the three innermost loops (rows, columns and reduction of a matrix
    /// product) become one matrix instruction of the target, executed by a
    /// wave together; threadIdx.x becomes the lane within the wave.
    Mma {
        rows: Name,
        cols: Name,
        k: Name,
        instr: Option<Name>,
    },
    /// `scan(c, threads=256, per=4)`: a scan stage computed by one
    /// work-group per row of `c`, in chunks (see [`steps::scan`]);
    /// `chunks=S` splits each row over work-groups of S chunks.
    Scan {
        axis: Name,
        threads: u32,
        per: u32,
        chunks: Option<u32>,
    },
    /// `topk(c, threads=256, per=4)`: a top-k stage computed by one
    /// work-group per row (see [`steps::topk`]).
    TopK {
        axis: Name,
        threads: u32,
        per: u32,
    },
    /// `rowwise(j, ...)` or `flash(j, ...)`: how an attention stage is
    /// built (see [`steps::attention`]).
    Attention {
        axis: Name,
        plan: AttnPlan,
    },
    /// `vectorize(v)`: the innermost loop `v` (2, 4, 8 or 16 iterations)
    /// becomes vector loads and stores where every lane is in range.
    Vectorize(Name),
    /// `compute_inline()`: no kernel for this stage; its expression is
    /// substituted into every stage that reads it.
    ComputeInline,
    /// `compute_at(Y, r)`: no kernel for this stage; it is computed inside
    /// stage `Y`'s kernel at each iteration of `Y`'s loop `r`, only over
    /// the part `Y` reads there, into LDS (when this stage binds threads:
    /// the work-group computes it together) or registers (when it binds
    /// none: each thread computes its own part).
    ComputeAt {
        consumer: Name,
        at: Name,
    },
    /// `AS = cache_read(A, shared, at, pad=1)`: at each iteration of loop
    /// `at` (or once per work-group if `at` is bound to a blockIdx), the
    /// work-group copies the part of `A` that the loops inside read into
    /// LDS, and those reads come from LDS. `pad` widens the last dimension
    /// of the tile to avoid bank conflicts; `vec` is how many consecutive
    /// elements each thread copies at once (one vector access); `prefetch`
    /// and `stages` pipeline the copy with the computation.
    Cache {
        tensor: Name,
        at: Name,
        opts: CopyOpts,
        kind: CacheKind,
        result: Name,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    Serial,
    Unrolled,
    /// Unrolled, with the guards hoisted so contiguous accesses become vectors.
    Vectorized,
    Bound(GpuAxis),
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoopVar {
    pub name: String,
    /// Whether the loop iterates a reduction axis (or a split of one).
    pub reduce: bool,
    /// Trip count; an expression of sizes and constants.
    pub extent: Index,
    pub kind: LoopKind,
    /// The step that made it (the axis declaration for original axes).
    pub span: Span,
}

/// `value < extent` must hold for an iteration to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    pub value: Index,
    pub extent: Index,
}

/// Which of the four staging steps a cache is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// `cache_read(A, shared, at)`: the work-group copies A's tile into LDS.
    ReadShared,
    /// `cache_read(A, local, at)`: each thread copies its part into registers.
    ReadLocal,
    /// `cache_write(C, shared, at)`: the stage's stores go to an LDS tile,
    /// which the work-group then copies to memory.
    WriteShared,
    /// `cache_write(C, local, at)`: the stores go to a per-thread register
    /// array, which the thread then copies to memory.
    WriteLocal,
}

impl CacheKind {
    pub(crate) fn of(write: bool, local: bool) -> CacheKind {
        match (write, local) {
            (false, false) => CacheKind::ReadShared,
            (false, true) => CacheKind::ReadLocal,
            (true, false) => CacheKind::WriteShared,
            (true, true) => CacheKind::WriteLocal,
        }
    }
    /// In registers of each thread rather than LDS.
    pub fn local(self) -> bool {
        matches!(self, CacheKind::ReadLocal | CacheKind::WriteLocal)
    }
    /// Stages the stage's own stores rather than reads.
    pub fn write(self) -> bool {
        matches!(self, CacheKind::WriteShared | CacheKind::WriteLocal)
    }
}

/// A tensor staged through LDS or registers (see [`StepKind::Cache`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Cache {
    pub tensor: TensorId,
    pub at: VarId,
    pub pad: i64,
    /// Elements of the last dimension each thread copies per access (1:
    /// one element; `vec=8`: eight, one 16-byte access for f16).
    pub vec: i64,
    /// `prefetch=1`: the next iteration's tile is loaded into registers
    /// while this iteration computes, and stored to LDS at the top of the
    /// next (software pipelining of the copy).
    pub prefetch: bool,
    /// `stages=N` (N >= 2): the tile has N buffers in LDS; the copies of the
    /// next N - 1 iterations are in flight (asynchronous where the target
    /// has it: `cp.async` on sm_80 and later) while this one computes. 1:
    /// one buffer, copied synchronously.
    pub stages: u32,
    /// `swizzle=128`: rows of 128 bytes whose 16-byte chunk `c` of row `r`
    /// sits at `c ^ r % 8`, the layout Hopper's `wgmma` reads from LDS;
    /// `swizzle=64` and `32`, its narrower modes (the row span in bytes).
    pub swizzle: Option<i64>,
    /// `tma=1` (with `swizzle=128` and `stages`): each buffer is filled by
    /// the tensor memory accelerator (`cp.async.bulk.tensor`, sm_90a), one
    /// thread issuing the whole tile and every thread waiting on the
    /// buffer's mbarrier, instead of every thread copying its share.
    pub tma: bool,
    /// `unroll=U` (2 to 8): a copy loop over a row of run-time length
    /// (a bounded tile's) runs U of a thread's copies at a time, their
    /// loads in flight together where all U lie inside what the loops
    /// reach; 1: one at a time.
    pub unroll: u32,
    /// `transpose=1`: the tile's last two dimensions are swapped in LDS
    /// (`pad` then widens the second-to-last), so that reads running
    /// along the tensor's second-to-last dimension (a k-major operand's
    /// fragment, on AMD) find consecutive addresses; the copy still reads
    /// the tensor along its last dimension, `vec` at a time, and writes
    /// each element to its place.
    pub transpose: bool,
    /// `dtype=f16`: the tile holds its elements converted to this type
    /// on the way (i8 weights staged as f16 for a matrix instruction that
    /// takes f16); only conversions that keep every value
    /// ([`crate::DType::holds_exactly`]), so reading the tile means what
    /// reading the tensor does. `None`: the tensor's own type.
    pub dtype: Option<crate::DType>,
    pub kind: CacheKind,
    pub name: String,
    pub span: Span,
}

/// How a `cache_read` copies its tile: `pad=`, `vec=`, `prefetch=`,
/// `stages=`, `swizzle=`, `tma=`, `unroll=`, `transpose=`, `dtype=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyOpts {
    pub pad: i64,
    pub vec: i64,
    pub prefetch: bool,
    pub stages: u32,
    pub swizzle: Option<i64>,
    pub tma: bool,
    pub unroll: u32,
    pub transpose: bool,
    pub dtype: Option<crate::DType>,
}

/// How a split divides its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitBy {
    /// `split(i, 64)` or `factor=64`: the inner loop has this many iterations.
    Factor(i64),
    /// `nparts=4`: the outer loop has this many iterations.
    Parts(i64),
}

/// The most iterations a loop may count: its counter is 32 bits wide.
pub const COUNTER_MAX: u64 = u32::MAX as u64;

/// What a launch must satisfy for the code to be exact: `extent <= max`
/// at the launch's sizes. A `fuse` of loops whose sizes have no `max`
/// that could make the fused count pass a 32-bit counter runs
/// `min(extent, max)` times and records this; the runtimes refuse a launch
/// that breaks it (as PyTorch's kernels index in 32 bits where they can).
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    /// An expression of sizes and constants.
    pub extent: Index,
    pub max: u64,
    /// What relies on it, for messages: "loop `b_h` of stage `O`".
    pub what: String,
    pub span: Span,
}

impl Requirement {
    /// `extent` as a loop's trip count: itself where `[kernel] max`
    /// keeps it within [`COUNTER_MAX`] (or it depends on other loops),
    /// else `min(extent, COUNTER_MAX)` with the requirement pushed on
    /// `requires`.
    pub fn counted(
        extent: Index,
        size_max: &[u64],
        requires: &mut Vec<Requirement>,
        what: impl FnOnce() -> String,
        span: Span,
    ) -> Index {
        if extent.has_vars() || extent.max_value(size_max, &[]) <= u128::from(COUNTER_MAX) {
            return extent;
        }
        requires.push(Requirement {
            extent: extent.clone(),
            max: COUNTER_MAX,
            what: what(),
            span,
        });
        Index::bin(crate::index::IOp::Min, extent, Index::c(COUNTER_MAX as i64))
    }
}

/// A scheduled stage: loops, how axes map onto them, and the guards.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopNest {
    /// Launch-time requirements the loops rely on.
    pub requires: Vec<Requirement>,
    /// Tensors staged through LDS, in schedule order.
    pub caches: Vec<Cache>,
    /// Vectorized loops and the steps that asked for them.
    pub vectorized: Vec<(VarId, Span)>,
    /// Every variable ever created; the stage's axes come first.
    pub vars: Vec<LoopVar>,
    /// Leaf loops, outermost first.
    pub order: Vec<VarId>,
    /// Value of each original axis in leaf variables.
    pub axis_values: Vec<Index>,
    pub guards: Vec<Guard>,
    /// The loops `mma` maps onto a matrix instruction, if any.
    pub matrix: Option<MatrixRequest>,
    /// `occupancy(blocks=N)`: work-groups that must fit on one SM (CU).
    pub min_blocks: Option<(u32, Span)>,
    /// `privatize(H)`: the step, where a scatter stage asked for it.
    pub privatized: Option<Span>,
    /// `scan(c, ...)`: how a scan stage's work-group scan is shaped.
    pub scan: Option<GroupPlan>,
    /// `topk(c, ...)`: how a top-k stage's work-group is shaped.
    pub topk: Option<GroupPlan>,
    /// `rowwise` or `flash`: how an attention stage is built.
    pub attention: Option<AttnPlan>,
}

/// The schedule of an attention stage ([`crate::kernel::Attention`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttnPlan {
    /// `rowwise(j, threads=T)`: a thread per query row.
    Rows { threads: u32, span: Span },
    /// `flash(j, rows=BM, keys=BN, stages=S, wave_rows=R)`: a work-group
    /// per `BM` query rows on the matrix instructions, keys `BN` at a
    /// time, `R` rows per wave (0: one per lane).
    Flash {
        rows: u32,
        keys: u32,
        stages: u32,
        wave_rows: u32,
        span: Span,
    },
}

impl AttnPlan {
    pub fn span(&self) -> Span {
        match *self {
            AttnPlan::Rows { span, .. } | AttnPlan::Flash { span, .. } => span,
        }
    }
    /// The step's name.
    pub fn step(&self) -> &'static str {
        match self {
            AttnPlan::Rows { .. } => "rowwise",
            AttnPlan::Flash { .. } => "flash",
        }
    }
}

/// What a step that gives each row to one work-group asked for (`scan`,
/// `topk`): its threads and elements per thread and step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupPlan {
    pub threads: u32,
    pub per: u32,
    pub span: Span,
    /// `scan(..., chunks=S)`: each work-group scans S chunks of a row, and
    /// the row is spread over work-groups (reduce, then scan the parts'
    /// totals, then scan with them); `None`: a row per work-group.
    pub chunks: Option<u32>,
    /// Which of a split scan's kernels the lowering builds.
    pub part: ScanPart,
}

/// The kernels of a scan whose rows are split over work-groups
/// (`scan(..., chunks=S)`), in launch order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanPart {
    /// Each part's total, stored in the output at the next part's first
    /// element (overwritten later by its result).
    Totals,
    /// Per row, those totals scanned in place: the carry into each part.
    Carries,
    /// Each part scanned, starting from its carry; the only kernel of an
    /// unsplit scan.
    #[default]
    Main,
}

/// What `mma` asked for. The instruction itself depends on the target and
/// is chosen when the stage is lowered for one.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixRequest {
    /// The instruction's rows (m), columns (n) and reduction (k) loops.
    pub rows: VarId,
    pub cols: VarId,
    pub k: VarId,
    /// The lane within the wave, bound to threadIdx.x; its extent is the
    /// target's wave size, set when lowering.
    pub lane: VarId,
    /// The instruction the author named (`instr=`), if any.
    pub instr: Option<Name>,
    pub span: Span,
}

impl LoopNest {
    pub fn var(&self, v: VarId) -> &LoopVar {
        &self.vars[v.0 as usize]
    }
    pub fn var_names(&self) -> Vec<String> {
        self.vars.iter().map(|v| v.name.clone()).collect()
    }
    /// The loop bound to a GPU index, if any.
    pub fn bound(&self, axis: GpuAxis) -> Option<VarId> {
        self.order
            .iter()
            .copied()
            .find(|v| self.var(*v).kind == LoopKind::Bound(axis))
    }
}

/// A schedule a rule wrote for a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultSchedule {
    /// The rule that wrote it (`elementwise-2d`, `row-reduction`, ...).
    pub rule: &'static str,
    /// The steps, as a user would write them.
    pub steps: Vec<String>,
    /// Its numbers, as tune parameters.
    pub knobs: Vec<Knob>,
    /// What the knobs must meet together, as `[tune] constraints` are
    /// written (`C_BM % C_WM == 0`): the tuner's space leaves out the rest.
    pub constraints: Vec<String>,
    /// Whether the rules may choose otherwise for a GPU target than
    /// without one (a matrix product whose types a matrix unit may take):
    /// the compiler then applies them again per target.
    pub by_target: bool,
    /// A size, and a bound below its `[kernel] max` under which the rule
    /// would write a faster schedule (a row kept in registers, read from
    /// memory once): the compiler then builds that version too and runs
    /// it where the size is within the bound (`loops::version`).
    pub version_at: Option<(String, u64)>,
}

/// One number of a rule's schedule, tunable: `rocmc tune` searches
/// `values`; a build takes `value` (the tuning database's, `--tune`'s, or
/// `default`, which may depend on the target).
#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    /// `<stage>_<NAME>`: `C_BM`.
    pub name: String,
    /// Candidates, ascending.
    pub values: Vec<i64>,
    pub default: i64,
    /// What the schedule was written with.
    pub value: i64,
    /// What it sets, for `--emit schedule`.
    pub doc: &'static str,
}
