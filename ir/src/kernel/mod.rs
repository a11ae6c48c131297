//! The tensor IR: what a kernel computes, independent of how it is scheduled.
//!
//! A [`Kernel`] has symbolic sizes (32-bit kernel arguments), input tensors,
//! scalar parameters and an ordered list of [`Stage`]s. Each stage computes
//! one tensor, element by element: for every point of its iteration space
//! (its axes), the value of an [`Expr`] is stored at that point. Stages and
//! tensors refer to each other through index handles into the kernel's
//! vectors, never through pointers.

use crate::diag::Span;
use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::plan::Step;

pub use crate::index::{ParamId, StageId, TensorId};

mod reduction;
pub use reduction::*;

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    /// Symbolic sizes, each passed to the GPU kernel as an `i32` argument.
    pub sizes: Vec<SizeVar>,
    /// Inputs first, in declaration order, then one tensor per stage.
    pub tensors: Vec<Tensor>,
    /// Scalar parameters passed by value (saxpy's `alpha`).
    pub params: Vec<Param>,
    pub stages: Vec<Stage>,
    /// `[tune]`: the parameters and the configuration this kernel was
    /// parsed with.
    pub tuning: Option<crate::tune::Tuning>,
    /// Computed tensors the file declares results (`output = true`): kept
    /// in memory and compared even where later stages read them, so the
    /// default rules never inline them or compute them at a reader.
    pub kept: Vec<TensorId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SizeVar {
    pub name: String,
    /// The largest value the kernel supports: `[kernel] max`, or `i32::MAX`.
    /// Bounds decide whether 32-bit index arithmetic is exact.
    pub max: u64,
    /// `[kernel] divisible`: every value is a multiple of this (1 where
    /// nothing is stated). Alignment proofs and vector accesses rely on
    /// it; runtimes refuse launches that break it.
    pub divisor: u64,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub dtype: DType,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    Input,
    /// Written by this stage.
    Stage(StageId),
}

/// A dense, row-major tensor in global memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    /// Extents, outermost first; expressions over sizes and constants only.
    pub shape: Vec<Index>,
    pub kind: TensorKind,
    pub span: Span,
}

/// An axis of a stage's iteration space: `i` in `C[i] = ...`, ranging over
/// `0..extent`.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: String,
    pub extent: Index,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub name: String,
    pub output: TensorId,
    /// One axis per output dimension; axis `k` is `VarId(k)`.
    pub axes: Vec<Axis>,
    /// What the stage computes at each point (see [`StageKind`]).
    pub kind: StageKind,
    pub value: Expr,
    pub schedule: Vec<Step>,
    pub span: Span,
    /// The schedule applied, once, while the kernel is checked (absent for
    /// a stage computed at another's loop, whose extents lowering decides).
    pub nest: Option<crate::plan::LoopNest>,
    /// Where the file gives no schedule: the rule that wrote `schedule`
    /// (see [`crate::schedule::default`]).
    pub default: Option<crate::plan::DefaultSchedule>,
    /// A later stage computes what this one is for: a template found it
    /// written out and made that stage the template, so this stage has no
    /// kernel and no buffer (the scores, maximum, exponentials and sum of
    /// a written-out attention). The interpreter still evaluates it.
    pub absorbed: bool,
}

/// What a stage computes at each point of its axes: exactly one of these.
// A stage holds its reduction inline, as `Option<Reduction>` did: one per
// stage, never in a hot collection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum StageKind {
    /// `value` at each point of the output (`Y[i] = X[i] * 2`).
    Map,
    /// For `C[i] = sum(A[i, k], k) * 2`: the reduction, whose axes are the
    /// variables after the output axes. `value` then contains exactly one
    /// [`ExprKind::Reduced`] standing for the reduction's result (the rest is
    /// its epilogue, applied once per output element). Scans, top-k and
    /// attention are reductions of their own kind ([`ReduceKind`]).
    Reduce(Reduction),
    /// A scatter (`H[X[i]] += 1`): `axes` are then the axes of `over`, not
    /// the output's, and `value` is combined into the output at these
    /// subscripts (see [`Scatter`]).
    Scatter(Scatter),
}

impl StageKind {
    /// A map, or the reduction given.
    pub fn of(reduce: Option<Reduction>) -> StageKind {
        reduce.map_or(StageKind::Map, StageKind::Reduce)
    }
}

/// A stage that combines values into data-dependent places of its output:
/// `H[X[i]] += 1` over `over = { i = "n" }`. The output starts as the
/// operation's identity (0 for `+=`, the lowest/highest value for
/// `max=`/`min=`); then, for every point of the axes, `value` is combined
/// into the element at `indices`. Subscripts as in [`ExprKind::Gather`]:
/// plain index expressions or `i32` data; an update whose subscripts fall
/// outside the output is dropped (never written, never clamped onto an
/// edge element). The order of the updates is unspecified, so float sums
/// may differ in rounding from run to run; integer results are exact.
#[derive(Clone, Debug, PartialEq)]
pub struct Scatter {
    /// [`ReduceOp::Sum`], [`ReduceOp::Max`] or [`ReduceOp::Min`].
    pub op: ReduceOp,
    pub indices: Vec<Expr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Bitwise, on integers.
    Or,
    And,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Or,
        ReduceOp::And,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Or => "reduce_or",
            ReduceOp::And => "reduce_and",
        }
    }

    /// The binary operation that combines two partial results.
    pub fn combine(self) -> BinOp {
        match self {
            ReduceOp::Sum => BinOp::Add,
            ReduceOp::Prod => BinOp::Mul,
            ReduceOp::Max => BinOp::Max,
            ReduceOp::Min => BinOp::Min,
            ReduceOp::Or => BinOp::BitOr,
            ReduceOp::And => BinOp::BitAnd,
        }
    }

    /// The identity of the operation as a constant of `t`: 0, 1, the lowest
    /// or the highest value (−∞/+∞ for floats).
    pub fn identity(self, t: DType) -> Expr {
        let kind = match (self, t.is_float()) {
            (ReduceOp::Sum, true) => ExprKind::Float(0.0),
            (ReduceOp::Prod, true) => ExprKind::Float(1.0),
            (ReduceOp::Max, true) => ExprKind::Float(f64::NEG_INFINITY),
            (ReduceOp::Min, true) => ExprKind::Float(f64::INFINITY),
            (ReduceOp::Sum, false) => ExprKind::Int(0),
            (ReduceOp::Prod, false) => ExprKind::Int(1),
            (ReduceOp::Max, false) => ExprKind::Int(int_range(t).0),
            (ReduceOp::Min, false) => ExprKind::Int(int_range(t).1),
            (ReduceOp::Or, _) => ExprKind::Int(0),
            // Every bit set: -1, or the largest value of an unsigned type.
            (ReduceOp::And, _) => ExprKind::Int(if t.is_signed() { -1 } else { int_range(t).1 }),
        };
        Expr { kind, dtype: t }
    }
}

/// Smallest and largest value of an integer dtype.
pub fn int_range(t: DType) -> (i64, i64) {
    match t {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// A typed value expression. Every node knows its [`DType`]; the validator
/// guarantees operand types agree, so back ends never guess.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub dtype: DType,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A constant of the node's dtype. Integers and bools are stored as i64,
    /// floats as f64 already rounded to the dtype.
    Int(i64),
    Float(f64),
    /// Element of a tensor; one index per dimension.
    Load {
        tensor: TensorId,
        indices: Vec<Index>,
    },
    /// Element of a tensor at data-dependent subscripts (a gather:
    /// `table[ids[t], j]`). One `i32` expression per dimension; a subscript
    /// that is a plain [`ExprKind::Index`] is affine as in a `Load`, every
    /// other one is *clamped* to `0..=extent - 1` of its dimension, so no
    /// data can make the access leave the tensor. A tensor with an empty
    /// dimension reads as zero. See [`Expr::gather_subscript_is_clamped`].
    Gather {
        tensor: TensorId,
        indices: Vec<Expr>,
    },
    Param(ParamId),
    /// The value of an integer index expression (an axis used as data), i32.
    Index(Index),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// Conversion to the node's dtype.
    Cast(Box<Expr>),
    /// The same bits as the node's dtype (`bitcast(x, i32)`): f32 with
    /// i32 or u32, f64 with i64.
    Bitcast(Box<Expr>),
    /// `select(cond, a, b)`
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Call(MathFn, Vec<Expr>),
    /// Element of a per-thread local array (loop IR only: reduction
    /// accumulators, see [`crate::loops::Local`]).
    Local {
        local: u32,
        index: Index,
    },
    /// The result of the stage's reduction (tensor IR only).
    Reduced,
    /// Slot `slot` of the left (accumulated) or right partial result in a
    /// tuple reduction's combiner (`a.M`, `b.M`; tensor IR only).
    Operand {
        right: bool,
        slot: u32,
    },
    /// Element of an LDS array shared by the work-group (loop IR only:
    /// cooperative reductions, see [`crate::loops::GpuKernel::shared`]).
    Shared {
        shared: u32,
        index: Index,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Not,
}

/// Binary operations. Operands have the same dtype; comparisons yield bool.
/// Integer `/` and `%` truncate toward zero (C semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    /// Bitwise on integers; shifts take their amount modulo the width
    /// (its low bits, as AMD's and x86's shift instructions do), and `>>`
    /// is arithmetic on signed types, logical on unsigned ones.
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// Math functions on floating-point values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Abs,
    Sqrt,
    Rsqrt,
    Exp,
    Exp2,
    /// 2^x on the hardware's approximate instruction (`ex2.approx.ftz` on
    /// NVIDIA, `v_exp_f32` on AMD): about 2 ulp at f32, results below the
    /// smallest normal may flush to zero. What softmax-like code wants
    /// where `exp`'s accurate expansion costs more than the rest of the
    /// loop; the interpreter defines it as `exp2`.
    Exp2Approx,
    Log,
    Log2,
    Floor,
    Ceil,
    Tanh,
    Sigmoid,
    /// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    Gelu,
    /// The error function.
    Erf,
    /// `pow(x, y)`: x to the power y (NaN for negative x and non-integer y).
    Pow,
    Fma,
}

impl MathFn {
    pub const ALL: [MathFn; 16] = [
        MathFn::Gelu,
        MathFn::Erf,
        MathFn::Pow,
        MathFn::Abs,
        MathFn::Sqrt,
        MathFn::Rsqrt,
        MathFn::Exp,
        MathFn::Exp2,
        MathFn::Exp2Approx,
        MathFn::Log,
        MathFn::Log2,
        MathFn::Floor,
        MathFn::Ceil,
        MathFn::Tanh,
        MathFn::Sigmoid,
        MathFn::Fma,
    ];
    pub fn name(self) -> &'static str {
        match self {
            MathFn::Abs => "abs",
            MathFn::Sqrt => "sqrt",
            MathFn::Rsqrt => "rsqrt",
            MathFn::Exp => "exp",
            MathFn::Exp2 => "exp2",
            MathFn::Exp2Approx => "exp2_approx",
            MathFn::Log => "log",
            MathFn::Log2 => "log2",
            MathFn::Floor => "floor",
            MathFn::Ceil => "ceil",
            MathFn::Tanh => "tanh",
            MathFn::Sigmoid => "sigmoid",
            MathFn::Gelu => "gelu",
            MathFn::Erf => "erf",
            MathFn::Pow => "pow",
            MathFn::Fma => "fma",
        }
    }
    pub fn arity(self) -> usize {
        match self {
            MathFn::Fma => 3,
            MathFn::Pow => 2,
            _ => 1,
        }
    }
    /// `abs` also accepts integers; everything else needs floats.
    pub fn accepts_int(self) -> bool {
        matches!(self, MathFn::Abs)
    }
}

impl Kernel {
    pub fn size_names(&self) -> Vec<String> {
        self.sizes.iter().map(|s| s.name.clone()).collect()
    }
    /// Each size's stated divisor (1 where none), by [`crate::index::SizeId`].
    pub fn size_divisors(&self) -> Vec<u64> {
        self.sizes.iter().map(|s| s.divisor).collect()
    }
    /// `values` (in size order) moved to the nearest multiple of each
    /// size's divisor at or below it (at least the divisor where the value
    /// is positive), within the maximum: sizes a test or a sweep picked
    /// made valid for the kernel.
    pub fn fit_sizes(&self, values: &[i64]) -> Vec<i64> {
        self.sizes
            .iter()
            .zip(values)
            .map(|(s, v)| {
                let d = s.divisor.max(1) as i64;
                let top = (s.max as i64) / d * d;
                match *v {
                    v if v <= 0 => v,
                    v => (v / d * d).max(d).min(top),
                }
            })
            .collect()
    }

    /// An upper bound of the reference interpreter's work at `sizes`: per
    /// stage, the product of its axes' extents (a reduction's that depend
    /// on the output's axes taken at their largest), summed over stages.
    /// Tests that pick sizes at random keep it within a budget with
    /// [`Kernel::fit_work`].
    pub fn work(&self, sizes: &[i64]) -> u128 {
        let size_max: Vec<u64> = sizes.iter().map(|s| (*s).max(0) as u64).collect();
        self.stages
            .iter()
            .map(|st| {
                let mut var_max = Vec::new();
                st.all_axes().fold(1u128, |w, a| {
                    let e = a.extent.max_value(&size_max, &var_max).max(1);
                    var_max.push(u64::try_from(e - 1).unwrap_or(u64::MAX));
                    w.saturating_mul(e)
                })
            })
            .fold(0u128, u128::saturating_add)
    }

    /// `values` made valid ([`Kernel::fit_sizes`]) and, while their
    /// [`Kernel::work`] exceeds `budget`, the largest size shrunk by a
    /// third (never below its divisor or 1).
    pub fn fit_work(&self, values: &[i64], budget: u128) -> Vec<i64> {
        let mut v = self.fit_sizes(values);
        while self.work(&v) > budget {
            let Some(i) = (0..v.len())
                .filter(|&i| v[i] > (self.sizes[i].divisor.max(1) as i64))
                .max_by_key(|&i| v[i])
            else {
                break;
            };
            let mut shrunk = v.clone();
            shrunk[i] = v[i] - (v[i] / 3).max(1);
            v = self.fit_sizes(&shrunk);
        }
        v
    }

    /// Why `values` (in size order) cannot be this kernel's sizes, if they
    /// cannot: one missing or too many, a size negative or past its `max`
    /// (the bound the code was compiled for: past it, indices may wrap and
    /// LDS arrays sized by it overflow), or a `divisible` fact broken.
    pub fn check_sizes(&self, values: &[i64]) -> Result<(), String> {
        if values.len() != self.sizes.len() {
            return Err(format!(
                "{} sizes given, the kernel has {}",
                values.len(),
                self.sizes.len()
            ));
        }
        for (s, v) in self.sizes.iter().zip(values) {
            if *v < 0 || *v as u64 > s.max {
                return Err(format!(
                    "size `{}` = {v}: must be between 0 and {}",
                    s.name, s.max
                ));
            }
        }
        self.check_divisible(values)
    }

    /// Why `values` (in size order) break a `divisible` fact, if they do.
    pub fn check_divisible(&self, values: &[i64]) -> Result<(), String> {
        for (s, v) in self.sizes.iter().zip(values) {
            if s.divisor > 1 && v.rem_euclid(s.divisor as i64) != 0 {
                return Err(format!(
                    "size `{}` = {v} is not a multiple of {}, which the kernel states \
                     (`divisible = {{ {} = {} }}` in [kernel])",
                    s.name, s.divisor, s.name, s.divisor
                ));
            }
        }
        Ok(())
    }
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.0 as usize]
    }
    pub fn stage(&self, id: StageId) -> &Stage {
        &self.stages[id.0 as usize]
    }
    /// The tensors a run stores and compares with the interpreter: stage
    /// results that reach memory ([`Kernel::stored`]).
    pub fn stored_results(&self) -> impl Iterator<Item = (usize, &Tensor)> {
        self.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| match t.kind {
                TensorKind::Stage(s) => self.stored(s),
                TensorKind::Input => false,
            })
    }

    /// Whether stage `s`'s tensor reaches memory: it has a kernel of its
    /// own, or it is a declared result (`output = true`) computed at
    /// another stage's loop, which stores it from there.
    pub fn stored(&self, s: StageId) -> bool {
        let st = self.stage(s);
        !st.is_internal() || (!st.is_inlined() && self.kept.contains(&st.output))
    }
    pub fn inputs(&self) -> impl Iterator<Item = (TensorId, &Tensor)> {
        self.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == TensorKind::Input)
            .map(|(i, t)| (TensorId(i as u32), t))
    }
}

impl Stage {
    /// The stage's reduction, if it computes one.
    pub fn reduce(&self) -> Option<&Reduction> {
        match &self.kind {
            StageKind::Reduce(r) => Some(r),
            StageKind::Map | StageKind::Scatter(_) => None,
        }
    }

    pub fn reduce_mut(&mut self) -> Option<&mut Reduction> {
        match &mut self.kind {
            StageKind::Reduce(r) => Some(r),
            StageKind::Map | StageKind::Scatter(_) => None,
        }
    }

    /// The stage's scatter, if it is one.
    pub fn scatter(&self) -> Option<&Scatter> {
        match &self.kind {
            StageKind::Scatter(s) => Some(s),
            StageKind::Map | StageKind::Reduce(_) => None,
        }
    }

    pub fn axis_var(&self, k: usize) -> VarId {
        VarId(k as u32)
    }

    /// Output axes, then reduction axes: the stage's variables in order.
    pub fn all_axes(&self) -> impl Iterator<Item = &Axis> {
        self.axes
            .iter()
            .chain(self.reduce().into_iter().flat_map(|r| r.axes.iter()))
    }

    /// Every expression of the stage that reads tensors or axes: its
    /// value, its reduction's body (each element of a tuple), a scatter's
    /// subscripts.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        std::iter::once(&self.value)
            .chain(self.reduce().map(|r| &r.body))
            .chain(
                self.tuple()
                    .into_iter()
                    .flat_map(|t| t.elems.iter().skip(1)),
            )
            .chain(self.scatter().into_iter().flat_map(|s| s.indices.iter()))
            .chain(
                self.attention()
                    .into_iter()
                    .flat_map(|a| [&a.q, &a.k, &a.v, &a.scale]),
            )
    }

    /// The tuple reduction this stage computes, if it is one.
    pub fn tuple(&self) -> Option<&TupleReduce> {
        self.reduce().and_then(Reduction::tuple)
    }

    /// Whether the reduction must meet its operands in order: a tuple
    /// combiner that is not commutative (`schedule::order` says which
    /// schedules keep the order, `lower::threads` joins them so).
    pub fn keeps_order(&self) -> bool {
        self.tuple().is_some_and(|t| !t.commutative)
    }

    /// The tensors this stage writes: its own, and a tuple reduction's or
    /// a top-k's others.
    pub fn outputs(&self) -> Vec<TensorId> {
        match self.reduce().map(|r| &r.kind) {
            Some(ReduceKind::Tuple(t)) => t.outputs.clone(),
            Some(ReduceKind::TopK(t)) => t.outputs.clone(),
            Some(ReduceKind::Attention(a)) => a.outputs.clone(),
            Some(ReduceKind::Op(_) | ReduceKind::Scan(_)) | None => vec![self.output],
        }
    }

    /// The attention this stage computes, if it is one.
    pub fn attention(&self) -> Option<&Attention> {
        self.reduce().and_then(Reduction::attention)
    }

    /// The top-k this stage computes, if it is one.
    pub fn topk(&self) -> Option<&TopK> {
        self.reduce().and_then(Reduction::topk)
    }

    /// The atomic update with which work-groups holding parts of this
    /// stage's reduction combine them into its output (a reduction loop
    /// bound to a blockIdx), or why they cannot. Only a plain reduction
    /// qualifies (tuples, scans, top-k and attention carry more than one
    /// value), and its output must hold the reduction's own type: the
    /// parts meet there, and an epilogue (`sum(..) / n`, `sqrt(..)`) is
    /// applied afterwards, in place.
    pub fn grid_combine(&self) -> Result<ReduceOp, String> {
        let Some(r) = self.reduce() else {
            return Err("it is not a reduction".into());
        };
        let Some(op) = r.plain() else {
            let kind = r.construct().unwrap_or("a reduction");
            return Err(format!(
                "it is {kind}, whose parts cannot be combined by one atomic update"
            ));
        };
        if op == ReduceOp::Prod {
            return Err("`prod` has no atomic update".into());
        }
        let acc = self.reduced_dtype().unwrap_or(self.value.dtype);
        if acc != self.value.dtype {
            let arg = if acc == DType::I64 && self.value.dtype == DType::I32 {
                " (argmax and argmin reduce 64-bit keys, then take the index out)"
            } else {
                ""
            };
            return Err(format!(
                "its output is `{}` but the reduction is `{acc}`{arg}, and the work-groups' parts meet in the output; reduce into a `{acc}` stage and convert it in a later one",
                self.value.dtype
            ));
        }
        let t = self.value.dtype;
        if t == DType::Bool || t.is_f8() {
            return Err(format!("`{t}` values have no atomic update"));
        }
        Ok(op)
    }

    /// The type of the reduction's result within the stage's value.
    pub fn reduced_dtype(&self) -> Option<DType> {
        let mut t = None;
        self.value.each(&mut |x| {
            if matches!(x.kind, ExprKind::Reduced) {
                t = Some(x.dtype);
            }
        });
        t
    }

    /// Whether the schedule asks for this stage to be inlined into its consumers.
    pub fn is_inlined(&self) -> bool {
        self.schedule
            .iter()
            .any(|s| s.kind == crate::plan::StepKind::ComputeInline)
    }

    /// `compute_at(Y, r)`: the consumer's and the loop's names, and the step's span.
    pub fn compute_at(&self) -> Option<(&crate::plan::Name, &crate::plan::Name, crate::Span)> {
        self.schedule.iter().find_map(|s| match &s.kind {
            crate::plan::StepKind::ComputeAt { consumer, at } => Some((consumer, at, s.span)),
            _ => None,
        })
    }

    /// Whether the stage has no kernel and no tensor in memory of its own:
    /// inlined into its consumers, computed inside one of them, or
    /// absorbed into a template stage ([`Stage::absorbed`]).
    pub fn is_internal(&self) -> bool {
        self.is_inlined() || self.compute_at().is_some() || self.absorbed
    }

    /// Rewrites every load in `e` of this stage's tensor by this stage's
    /// expression at the loaded point (compute_inline).
    pub fn inline_into(&self, e: &Expr) -> Expr {
        e.rewrite(&|x: &Expr| match &x.kind {
            ExprKind::Load { tensor, indices } if *tensor == self.output => {
                let map: std::collections::HashMap<VarId, Index> = indices
                    .iter()
                    .enumerate()
                    .map(|(k, ix)| (VarId(k as u32), ix.clone()))
                    .collect();
                Some(self.value.map_indices(&|ix| ix.subst(&map)))
            }
            _ => None,
        })
    }
}

impl Expr {
    /// Element `index` of register array `local`.
    pub fn local(local: u32, index: Index, dtype: DType) -> Expr {
        Expr {
            kind: ExprKind::Local { local, index },
            dtype,
        }
    }

    /// This value as a `to`: itself where it is one, else under a cast.
    pub fn cast_to(self, to: DType) -> Expr {
        match self.dtype == to {
            true => self,
            false => Expr {
                kind: ExprKind::Cast(Box::new(self)),
                dtype: to,
            },
        }
    }

    /// Whether a subscript of an [`ExprKind::Gather`] is clamped into its
    /// dimension (it depends on data) rather than affine.
    pub fn gather_subscript_is_clamped(&self) -> bool {
        !matches!(self.kind, ExprKind::Index(_))
    }

    /// Calls `f` on every affine load ([`ExprKind::Load`]) in this
    /// expression, including those inside a gather's subscripts; gathered
    /// tensors themselves are reported by [`Expr::visit_gathers`].
    pub fn visit_loads(&self, f: &mut impl FnMut(TensorId, &[Index])) {
        self.each(&mut |x| {
            if let ExprKind::Load { tensor, indices } = &x.kind {
                f(*tensor, indices);
            }
        });
    }

    /// Calls `f` on the tensor of every gather in this expression (nested
    /// gathers included).
    pub fn visit_gathers(&self, f: &mut impl FnMut(TensorId)) {
        self.each(&mut |x| {
            if let ExprKind::Gather { tensor, .. } = &x.kind {
                f(*tensor);
            }
        });
    }

    /// Calls `f` on every node, parents before children.
    pub fn each(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Unary(_, a) | ExprKind::Cast(a) | ExprKind::Bitcast(a) => a.each(f),
            ExprKind::Binary(_, a, b) => {
                a.each(f);
                b.each(f);
            }
            ExprKind::Select(c, a, b) => {
                c.each(f);
                a.each(f);
                b.each(f);
            }
            ExprKind::Call(_, args) | ExprKind::Gather { indices: args, .. } => {
                args.iter().for_each(|a| a.each(f))
            }
            ExprKind::Int(_)
            | ExprKind::Float(_)
            | ExprKind::Load { .. }
            | ExprKind::Param(_)
            | ExprKind::Index(_)
            | ExprKind::Local { .. }
            | ExprKind::Shared { .. }
            | ExprKind::Operand { .. }
            | ExprKind::Reduced => {}
        }
    }

    /// Calls `f` on every tensor this expression reads, by affine load or
    /// by gather.
    pub fn visit_tensors(&self, f: &mut impl FnMut(TensorId)) {
        self.visit_loads(&mut |t, _| f(t));
        self.visit_gathers(f);
    }

    /// Whether the expression gathers (reads at data-dependent subscripts).
    pub fn has_gather(&self) -> bool {
        let mut any = false;
        self.visit_gathers(&mut |_| any = true);
        any
    }

    /// Replaces [`ExprKind::Reduced`] by `with`.
    pub fn replace_reduced(&self, with: &Expr) -> Expr {
        self.rewrite(&|x: &Expr| matches!(x.kind, ExprKind::Reduced).then(|| with.clone()))
    }

    /// Rebuilds the expression, replacing each node for which `f` returns
    /// `Some` (its children are not visited) and recursing into the others.
    pub fn rewrite(&self, f: &impl Fn(&Expr) -> Option<Expr>) -> Expr {
        if let Some(e) = f(self) {
            return e;
        }
        let r = |x: &Expr| Box::new(x.rewrite(f));
        let kind = match &self.kind {
            ExprKind::Unary(op, a) => ExprKind::Unary(*op, r(a)),
            ExprKind::Cast(a) => ExprKind::Cast(r(a)),
            ExprKind::Bitcast(a) => ExprKind::Bitcast(r(a)),
            ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, r(a), r(b)),
            ExprKind::Select(c, a, b) => ExprKind::Select(r(c), r(a), r(b)),
            ExprKind::Call(m, args) => {
                ExprKind::Call(*m, args.iter().map(|a| a.rewrite(f)).collect())
            }
            ExprKind::Gather { tensor, indices } => ExprKind::Gather {
                tensor: *tensor,
                indices: indices.iter().map(|a| a.rewrite(f)).collect(),
            },
            other => other.clone(),
        };
        Expr {
            kind,
            dtype: self.dtype,
        }
    }

    /// Whether an index expression of `self` (a load's or a gather
    /// subscript's, an index value) uses variable `v`: the indices
    /// [`Expr::map_indices`] rewrites.
    pub fn uses_var(&self, v: VarId) -> bool {
        let mut found = false;
        self.each(&mut |x| {
            found |= match &x.kind {
                ExprKind::Load { indices, .. } => indices.iter().any(|i| i.uses_var(v)),
                ExprKind::Index(i)
                | ExprKind::Local { index: i, .. }
                | ExprKind::Shared { index: i, .. } => i.uses_var(v),
                _ => false,
            };
        });
        found
    }

    /// Rewrites every index expression (loads and index values) with `f`.
    pub fn map_indices(&self, f: &impl Fn(&Index) -> Index) -> Expr {
        self.rewrite(&|x: &Expr| {
            let kind = match &x.kind {
                ExprKind::Load { tensor, indices } => ExprKind::Load {
                    tensor: *tensor,
                    indices: indices.iter().map(f).collect(),
                },
                ExprKind::Index(i) => ExprKind::Index(f(i)),
                ExprKind::Local { local, index } => ExprKind::Local {
                    local: *local,
                    index: f(index),
                },
                ExprKind::Shared { shared, index } => ExprKind::Shared {
                    shared: *shared,
                    index: f(index),
                },
                _ => return None,
            };
            Some(Expr {
                kind,
                dtype: x.dtype,
            })
        })
    }
}
