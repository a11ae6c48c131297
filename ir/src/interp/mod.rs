//! The reference interpreter: the definition of what a kernel means.
//!
//! [`run`] evaluates each stage in order over its whole iteration space,
//! ignoring the schedule. Values are kept as `f64` (floats) or `i64`
//! (integers and bools) and rounded to their dtype after every operation,
//! which for f32 gives exactly IEEE single-precision results for + − × ÷;
//! a float `sum` (a reduction's, a scan's) adds in f64 and rounds once per
//! result, the order-free meaning every schedule's order approximates.
//!
//! [`run_lowered`] executes loop IR the way a GPU would (every block, every
//! thread, the remaining loops, the guards); comparing it with [`run`]
//! checks a schedule without any GPU or LLVM.
//!
//! One scalar operation (casts, operators, math) is in [`scalar`]'s
//! functions; [`run_lowered`] with its threads is in `lowered.rs`.

mod lowered;
mod races;
mod sample;
mod scalar;
mod stages;

pub use lowered::run_lowered;
use races::{Cell, Races};
pub use sample::{run_sampled, run_sampled_from, Elements, Sampled};
pub use scalar::cast;
use scalar::{binary, bitcast, constant, math, zero};
use stages::scatter_stage;
pub use stages::{tuple_commutes, tuple_identity};

use crate::dtype::DType;
use crate::index::Index;
use crate::kernel::*;
use std::fmt;

/// Elements of one tensor. Integers and bools use `I`, floats `F`.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub dtype: DType,
    pub data: Data,
}

impl Buffer {
    pub fn zeros(dtype: DType, len: usize) -> Buffer {
        let data = if dtype.is_float() {
            Data::F(vec![0.0; len])
        } else {
            Data::I(vec![0; len])
        };
        Buffer { dtype, data }
    }
    pub fn len(&self) -> usize {
        match &self.data {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> Scalar {
        match &self.data {
            Data::F(v) => Scalar::F(v[i]),
            Data::I(v) => Scalar::I(v[i]),
        }
    }
    fn set(&mut self, i: usize, s: Scalar) {
        match (&mut self.data, s) {
            (Data::F(v), Scalar::F(x)) => v[i] = x,
            (Data::I(v), Scalar::I(x)) => v[i] = x,
            (Data::F(v), Scalar::I(x)) => v[i] = x as f64,
            (Data::I(v), Scalar::F(x)) => v[i] = x as i64,
        }
    }
    /// Little-endian bytes as the GPU stores them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * self.dtype.size());
        for i in 0..self.len() {
            match (self.dtype, self.get(i)) {
                (DType::F32, Scalar::F(x)) => out.extend((x as f32).to_le_bytes()),
                (DType::F64, Scalar::F(x)) => out.extend(x.to_le_bytes()),
                (DType::F16, Scalar::F(x)) => out.extend(half::f16::from_f64(x).to_le_bytes()),
                (DType::BF16, Scalar::F(x)) => out.extend(half::bf16::from_f64(x).to_le_bytes()),
                (t, Scalar::F(x)) if t.is_f8() => {
                    out.push(t.f8_format().expect("an 8-bit float").encode(x))
                }
                (t, Scalar::I(x)) => out.extend(&x.to_le_bytes()[..t.size()]),
                (_, Scalar::F(_)) => unreachable!("float data in an integer buffer"),
            }
        }
        out
    }
    /// Parses little-endian bytes of `dtype`.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Buffer {
        let n = bytes.len() / dtype.size();
        let mut b = Buffer::zeros(dtype, n);
        for (i, c) in bytes.chunks_exact(dtype.size()).enumerate() {
            let s = match dtype {
                DType::F32 => Scalar::F(f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64),
                DType::F64 => Scalar::F(f64::from_le_bytes(c.try_into().expect("8 bytes"))),
                DType::F16 => {
                    Scalar::F(half::f16::from_le_bytes(c.try_into().expect("2 bytes")).to_f64())
                }
                DType::BF16 => {
                    Scalar::F(half::bf16::from_le_bytes(c.try_into().expect("2 bytes")).to_f64())
                }
                t if t.is_f8() => Scalar::F(t.f8_format().expect("an 8-bit float").decode(c[0])),
                t => {
                    let mut w = [0u8; 8];
                    w[..t.size()].copy_from_slice(c);
                    Scalar::I(normalize_int(t, i64::from_le_bytes(w)))
                }
            };
            b.set(i, s);
        }
        b
    }
}

/// One value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
}

impl Scalar {
    fn f(self) -> f64 {
        match self {
            Scalar::F(x) => x,
            Scalar::I(x) => x as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            Scalar::I(x) => x,
            Scalar::F(x) => x as i64,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum InterpError {
    OutOfBounds {
        stage: String,
        tensor: String,
        index: Vec<i64>,
        shape: Vec<i64>,
    },
    DivisionByZero {
        stage: String,
    },
    /// Two threads of a work-group touched one LDS element, at least one
    /// writing, with no barrier between (a bug in lowering, never in a kernel file).
    Race {
        kernel: String,
        buffer: String,
        index: usize,
        first: (usize, Access),
        second: (usize, Access),
    },
    /// A barrier reached by only some threads of a work-group (a bug in
    /// lowering, never in a kernel file).
    DivergentBarrier {
        kernel: String,
        thread: usize,
    },
    /// An LDS element past its array's end (a bug in lowering, never in a
    /// kernel file: on a GPU it would touch another array or fault).
    LdsOutOfBounds {
        kernel: String,
        buffer: String,
        index: usize,
        len: usize,
    },
    BadInput(String),
    /// A tuple reduction whose combiner does not keep `init` when it meets
    /// `init` (a cooperative schedule combines the empty shares of idle
    /// threads, so the result would depend on the schedule).
    NotIdentity {
        stage: String,
        /// The first tensor whose slot changes.
        tensor: String,
        init: String,
        combined: String,
    },
}

/// How a thread touched an LDS element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// A read by a group of warpgroup matrix instructions (`wgmma`) still
    /// in flight: committed, not yet retired by a wait.
    InFlight,
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterpError::OutOfBounds {
                stage,
                tensor,
                index,
                shape,
            } => {
                write!(
                    f,
                    "stage `{stage}` reads {tensor}{index:?}, outside its shape {shape:?}"
                )
            }
            InterpError::DivisionByZero { stage } => {
                write!(f, "stage `{stage}` divides an integer by zero")
            }
            InterpError::Race {
                kernel,
                buffer,
                index,
                first,
                second,
            } => {
                let verb = |a: Access| match a {
                    Access::Read => "reads",
                    Access::Write => "writes",
                    Access::InFlight => "reads",
                };
                if first.1 == Access::InFlight {
                    return write!(
                        f,
                        "LDS race in kernel `{kernel}`: thread {}'s warpgroup matrix instructions read {buffer}[{index}] and were still in flight (committed, not waited for) when thread {} wrote it",
                        first.0, second.0
                    );
                }
                write!(
                    f,
                    "LDS race in kernel `{kernel}`: thread {} {} {buffer}[{index}], then thread {} {} it before a barrier",
                    first.0,
                    verb(first.1),
                    second.0,
                    verb(second.1)
                )
            }
            InterpError::DivergentBarrier { kernel, thread } => write!(
                f,
                "barrier in kernel `{kernel}` skipped by thread {thread} (under a guard), reached by others"
            ),
            InterpError::LdsOutOfBounds {
                kernel,
                buffer,
                index,
                len,
            } => write!(
                f,
                "kernel `{kernel}` accesses LDS array {buffer}[{index}], past its {len} elements"
            ),
            InterpError::BadInput(m) => f.write_str(m),
            InterpError::NotIdentity {
                stage,
                tensor,
                init,
                combined,
            } => write!(
                f,
                "stage `{stage}`: combining `init` ({init}) with itself gives ({combined}), \
                 which changes `{tensor}`; \
                 the combiner must leave a partial result unchanged when the other side is `init` \
                 (schedules combine the empty shares of threads with no elements)"
            ),
        }
    }
}

impl std::error::Error for InterpError {}

pub fn normalize_int(t: DType, v: i64) -> i64 {
    match t {
        DType::Bool => (v != 0) as i64,
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

fn normalize(t: DType, s: Scalar) -> Scalar {
    if t.is_float() {
        Scalar::F(crate::dtype::round_to(s.f(), t))
    } else {
        Scalar::I(normalize_int(t, s.i()))
    }
}

/// Concrete extents of a tensor for the given sizes.
pub fn shape_of(t: &Tensor, sizes: &[i64]) -> Result<Vec<i64>, InterpError> {
    t.shape
        .iter()
        .map(|e| match e.eval(sizes, &[]) {
            Some(v) if v >= 0 => Ok(v),
            _ => Err(InterpError::BadInput(format!(
                "tensor `{}` has an invalid extent for these sizes",
                t.name
            ))),
        })
        .collect()
}

/// The first gather or scatter whose data put a subscript outside its
/// dimension: the gather then read the clamped element
/// ([`ExprKind::Gather`]), the scatter dropped the update ([`Scatter`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    pub stage: String,
    pub tensor: String,
    /// The subscripts as the data gave them.
    pub index: Vec<i64>,
    pub shape: Vec<i64>,
    /// A scatter's update (dropped), not a gather's read (clamped).
    pub scatter: bool,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, then) = match self.scatter {
            true => ("scatters into", "the update was dropped"),
            false => ("gathers", "the subscripts were clamped into it"),
        };
        write!(
            f,
            "stage `{}` {verb} {}{:?}, outside its shape {:?}; {then}",
            self.stage, self.tensor, self.index, self.shape
        )
    }
}

struct Env<'a> {
    races: std::cell::RefCell<Races>,
    out_of_range: &'a std::cell::RefCell<Option<OutOfRange>>,
    k: &'a Kernel,
    sizes: &'a [i64],
    params: &'a [Scalar],
    shapes: &'a [Vec<i64>],
    stage: &'a str,
    /// Stage results computed on demand, point by point ([`run_sampled`]);
    /// `None` where every stage is evaluated whole, in order.
    lazy: Option<&'a sample::Lazy<'a>>,
    /// What [`ExprKind::Reduced`] and [`ExprKind::Operand`] stand for while
    /// a stage's epilogue or a tuple's combiner is evaluated.
    bound: std::cell::RefCell<Bound>,
}

/// Values bound to the placeholders of an expression, each with the dtype
/// the constant that replaced it had: evaluated in place of a copy of the
/// expression with constants substituted (one copy per point and per
/// element was most of a tuple reduction's time), with the same result.
#[derive(Default)]
struct Bound {
    reduced: Option<(Scalar, DType)>,
    /// A combiner's left (`a.X`) and right (`b.X`) partial results.
    operands: [Vec<(Scalar, DType)>; 2],
}

impl Env<'_> {
    fn offset(&self, t: TensorId, idx: &[i64]) -> Result<usize, InterpError> {
        let shape = &self.shapes[t.0 as usize];
        let mut off: i64 = 0;
        for (i, e) in idx.iter().zip(shape) {
            if *i < 0 || i >= e {
                return Err(InterpError::OutOfBounds {
                    stage: self.stage.to_string(),
                    tensor: self.k.tensor(t).name.clone(),
                    index: idx.to_vec(),
                    shape: shape.clone(),
                });
            }
            off = off * e + i;
        }
        Ok(off as usize)
    }

    /// Element `off` of `t`: from `bufs`, or, when the run is sampled,
    /// given or computed on demand (`bufs` is then empty).
    fn read(&self, t: TensorId, off: usize, bufs: &[Buffer]) -> Result<Scalar, InterpError> {
        match self.lazy {
            Some(lazy) => lazy.get(t, off),
            None => Ok(bufs[t.0 as usize].get(off)),
        }
    }

    /// The value of a stage with one value per output point (a plain
    /// expression, a reduction, a tuple reduction) at `point` (its output
    /// coordinates, then room for the reduction's); a tuple's other
    /// results are pushed to `extra`.
    fn point_value(
        &self,
        st: &Stage,
        point: &mut [i64],
        nout: usize,
        bufs: &[Buffer],
        extra: &mut Vec<(TensorId, Scalar)>,
    ) -> Result<Scalar, InterpError> {
        let Some(r) = st.reduce() else {
            return self.eval(&st.value, point, bufs, &[], &[]);
        };
        // Extents may depend on the output point (triangular); one below
        // zero counts as zero.
        let rext: Vec<i64> = r
            .axes
            .iter()
            .map(|a| a.extent.eval(self.sizes, point).unwrap_or(0).max(0))
            .collect();
        let rtotal: i64 = rext.iter().product();
        if let Some(tup) = r.tuple() {
            let acc = self.fold_tuple(tup, &rext, rtotal, point, nout, bufs)?;
            for (out, a) in tup.outputs.iter().zip(&acc).skip(1) {
                extra.push((*out, self.eval(a, point, bufs, &[], &[])?));
            }
            return self.eval(&acc[0], point, bufs, &[], &[]);
        }
        let t = r.body.dtype;
        // A scan folded at one point is the triangular sum it stands for.
        let op = r
            .op()
            .expect("a top-k and an attention are computed a row at a time");
        let mut acc = self.eval(&op.identity(t), point, bufs, &[], &[])?;
        for rflat in 0..rtotal {
            unflatten(rflat, &rext, &mut point[nout..]);
            let x = self.eval(&r.body, point, bufs, &[], &[])?;
            acc = self.accumulate(op, t, acc, x)?;
        }
        self.eval_with_reduced(&st.value, (normalize(t, acc), t), point, bufs)
    }

    /// `e` evaluated with its [`ExprKind::Reduced`] standing for the
    /// constant `(v, t)`.
    fn eval_with_reduced(
        &self,
        e: &Expr,
        (v, t): (Scalar, DType),
        point: &[i64],
        bufs: &[Buffer],
    ) -> Result<Scalar, InterpError> {
        self.bound.borrow_mut().reduced = Some((v, t));
        let out = self.eval(e, point, bufs, &[], &[]);
        self.bound.borrow_mut().reduced = None;
        out
    }

    fn note_out_of_range(&self, tensor: TensorId, index: &[i64], scatter: bool) {
        self.out_of_range
            .borrow_mut()
            .get_or_insert_with(|| OutOfRange {
                stage: self.stage.to_string(),
                tensor: self.k.tensor(tensor).name.clone(),
                index: index.to_vec(),
                shape: self.shapes[tensor.0 as usize].clone(),
                scatter,
            });
    }

    /// One update of a scatter: `tensor[indices] op= value`, dropped when
    /// a subscript leaves the tensor.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &self,
        tensor: TensorId,
        indices: &[Expr],
        op: ReduceOp,
        value: &Expr,
        vars: &[i64],
        bufs: &mut [Buffer],
        locals: &[Vec<Scalar>],
        shared: &[Vec<Scalar>],
    ) -> Result<(), InterpError> {
        let at = self.scatter_place(tensor, indices, vars, bufs, locals, shared)?;
        let v = self.eval(value, vars, bufs, locals, shared)?;
        let Some(off) = at else {
            return Ok(());
        };
        let t = self.k.tensor(tensor).dtype;
        let new = self.combine(op, t, bufs[tensor.0 as usize].get(off), v)?;
        bufs[tensor.0 as usize].set(off, new);
        Ok(())
    }

    /// `acc` and `x` combined by `op` (a reduction's or a scatter's step),
    /// rounded to `t`.
    fn combine(
        &self,
        op: ReduceOp,
        t: DType,
        acc: Scalar,
        x: Scalar,
    ) -> Result<Scalar, InterpError> {
        let v = binary(op.combine(), t, acc, x).ok_or_else(|| InterpError::DivisionByZero {
            stage: self.stage.to_string(),
        })?;
        Ok(normalize(t, v))
    }

    /// One step of a reduction or scan: [`Env::combine`], except that a
    /// float sum runs on unrounded (f64) partial sums, rounded to `t` once
    /// where a result is taken ([`normalize`]). A kernel adds in some
    /// order of its schedule's choosing (a tree, per-thread runs), each
    /// order off the exact sum by its own rounding; the definition keeps
    /// to the exact sum as closely as f64 allows, so that a correct kernel
    /// over 10^5 elements is within tolerance whichever order it takes
    /// (an f32 sum in row-major order is itself 1e-4 off there).
    fn accumulate(
        &self,
        op: ReduceOp,
        t: DType,
        acc: Scalar,
        x: Scalar,
    ) -> Result<Scalar, InterpError> {
        match (op, acc, x) {
            (ReduceOp::Sum, Scalar::F(a), Scalar::F(b)) if t.is_float() => Ok(Scalar::F(a + b)),
            _ => self.combine(op, t, acc, x),
        }
    }

    /// A tuple reduction at one output point (the first `nout` entries of
    /// `point`): `init`, then each element combined in row-major order.
    /// The result as constants, one per slot.
    fn fold_tuple(
        &self,
        tup: &crate::kernel::TupleReduce,
        rext: &[i64],
        rtotal: i64,
        point: &mut [i64],
        nout: usize,
        bufs: &[Buffer],
    ) -> Result<Vec<Expr>, InterpError> {
        let consts = |es: &[Expr], point: &[i64]| -> Result<Vec<Expr>, InterpError> {
            es.iter()
                .map(|e| Ok(constant(self.eval(e, point, bufs, &[], &[])?, e.dtype)))
                .collect()
        };
        let acc = consts(&tup.init, point)?;
        let name = |slot: usize| self.k.tensor(tup.outputs[slot]).name.clone();
        self.identity(tup, &name, &acc, point, bufs)?;
        let literal = |e: &Expr| match e.kind {
            ExprKind::Float(v) => (Scalar::F(v), e.dtype),
            ExprKind::Int(v) => (Scalar::I(v), e.dtype),
            _ => unreachable!("`consts` gives constants"),
        };
        let mut left: Vec<(Scalar, DType)> = acc.iter().map(literal).collect();
        for rflat in 0..rtotal {
            unflatten(rflat, rext, &mut point[nout..]);
            let mut right = Vec::with_capacity(tup.elems.len());
            for e in &tup.elems {
                right.push((self.eval(e, point, bufs, &[], &[])?, e.dtype));
            }
            self.bound.borrow_mut().operands = [left, right];
            let mut next = Vec::with_capacity(tup.combine.len());
            for c in &tup.combine {
                next.push((self.eval(c, point, bufs, &[], &[])?, c.dtype));
            }
            left = next;
        }
        self.bound.borrow_mut().operands = Default::default();
        Ok(left.into_iter().map(|(v, t)| constant(v, t)).collect())
    }

    /// Whether `tup`'s combiner keeps `init` (evaluated: `acc`) when it
    /// meets `init`; `name` names a slot's tensor for the error.
    fn identity(
        &self,
        tup: &crate::kernel::TupleReduce,
        name: &dyn Fn(usize) -> String,
        acc: &[Expr],
        point: &[i64],
        bufs: &[Buffer],
    ) -> Result<(), InterpError> {
        let mut twice = Vec::new();
        for e in tup.apply(acc, acc) {
            twice.push(constant(self.eval(&e, point, bufs, &[], &[])?, e.dtype));
        }
        let same = |x: &Expr, y: &Expr| match (&x.kind, &y.kind) {
            (ExprKind::Float(a), ExprKind::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (a, b) => a == b,
        };
        let Some(slot) = acc.iter().zip(&twice).position(|(x, y)| !same(x, y)) else {
            return Ok(());
        };
        let show = |es: &[Expr]| {
            es.iter()
                .map(|e| match e.kind {
                    ExprKind::Float(v) => format!("{v}"),
                    ExprKind::Int(v) => format!("{v}"),
                    _ => "?".into(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(InterpError::NotIdentity {
            stage: self.stage.to_string(),
            tensor: name(slot),
            init: show(acc),
            combined: show(&twice),
        })
    }

    /// The element offset a scatter's subscripts name, or `None` (noted)
    /// where they leave the tensor.
    fn scatter_place(
        &self,
        tensor: TensorId,
        indices: &[Expr],
        vars: &[i64],
        bufs: &[Buffer],
        locals: &[Vec<Scalar>],
        shared: &[Vec<Scalar>],
    ) -> Result<Option<usize>, InterpError> {
        let mut idx = Vec::with_capacity(indices.len());
        for sub in indices {
            idx.push(self.eval(sub, vars, bufs, locals, shared)?.i());
        }
        let shape = &self.shapes[tensor.0 as usize];
        if idx.iter().zip(shape).any(|(i, e)| *i < 0 || i >= e) {
            self.note_out_of_range(tensor, &idx, true);
            return Ok(None);
        }
        Ok(Some(self.offset(tensor, &idx)?))
    }

    fn eval(
        &self,
        e: &Expr,
        vars: &[i64],
        bufs: &[Buffer],
        locals: &[Vec<Scalar>],
        shared: &[Vec<Scalar>],
    ) -> Result<Scalar, InterpError> {
        let ix = |i: &Index| {
            i.eval(self.sizes, vars)
                .ok_or_else(|| InterpError::DivisionByZero {
                    stage: self.stage.to_string(),
                })
        };
        let t = e.dtype;
        let v = match &e.kind {
            ExprKind::Int(v) => Scalar::I(*v),
            ExprKind::Float(v) => Scalar::F(*v),
            ExprKind::Param(p) => self.params[p.0 as usize],
            ExprKind::Local { local, index } => {
                let i = ix(index)?;
                locals[*local as usize][i as usize]
            }
            ExprKind::Shared { shared: a, index } => {
                let i = ix(index)?;
                self.races.borrow_mut().read(*a as usize, i as usize)?;
                shared[*a as usize][i as usize]
            }
            ExprKind::Reduced | ExprKind::Operand { .. } => {
                let bound = self.bound.borrow();
                let value = match e.kind {
                    ExprKind::Operand { right, slot } => {
                        bound.operands[right as usize].get(slot as usize)
                    }
                    _ => bound.reduced.as_ref(),
                };
                // As the constant it stands for: rounded to that constant's dtype.
                return match value {
                    Some(&(v, dt)) => Ok(normalize(dt, v)),
                    None => Err(InterpError::BadInput(
                        "internal: a reduction result outside its stage".into(),
                    )),
                };
            }
            ExprKind::Index(i) => Scalar::I(ix(i)?),
            ExprKind::Load { tensor, indices } => on_stack(
                0,
                indices.len(),
                |d| ix(&indices[d]),
                |idx| self.read(*tensor, self.offset(*tensor, idx)?, bufs),
            )?,
            ExprKind::Gather { tensor, indices } => {
                let shape = &self.shapes[tensor.0 as usize];
                let sub = |d: usize| Ok(self.eval(&indices[d], vars, bufs, locals, shared)?.i());
                on_stack(0, indices.len(), sub, |idx| {
                    if shape.contains(&0) {
                        return Ok(zero(t));
                    }
                    let outside = |(d, (i, e)): (usize, (&i64, &i64))| {
                        indices[d].gather_subscript_is_clamped() && (*i < 0 || i >= e)
                    };
                    if idx.iter().zip(shape).enumerate().any(outside) {
                        self.note_out_of_range(*tensor, idx, false);
                        for ((i, sub), e) in idx.iter_mut().zip(indices).zip(shape) {
                            if sub.gather_subscript_is_clamped() {
                                *i = (*i).clamp(0, e - 1);
                            }
                        }
                    }
                    self.read(*tensor, self.offset(*tensor, idx)?, bufs)
                })?
            }
            ExprKind::Unary(UnaryOp::Neg, a) => match self.eval(a, vars, bufs, locals, shared)? {
                Scalar::F(x) => Scalar::F(-x),
                Scalar::I(x) => Scalar::I(x.wrapping_neg()),
            },
            ExprKind::Unary(UnaryOp::Not, a) => {
                Scalar::I((self.eval(a, vars, bufs, locals, shared)?.i() == 0) as i64)
            }
            ExprKind::Cast(a) => {
                let x = self.eval(a, vars, bufs, locals, shared)?;
                cast(a.dtype, t, x)
            }
            ExprKind::Bitcast(a) => bitcast(a.dtype, t, self.eval(a, vars, bufs, locals, shared)?),
            ExprKind::Select(c, a, b) => {
                if self.eval(c, vars, bufs, locals, shared)?.i() != 0 {
                    self.eval(a, vars, bufs, locals, shared)?
                } else {
                    self.eval(b, vars, bufs, locals, shared)?
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (
                    self.eval(a, vars, bufs, locals, shared)?,
                    self.eval(b, vars, bufs, locals, shared)?,
                );
                binary(*op, a.dtype, x, y).ok_or_else(|| InterpError::DivisionByZero {
                    stage: self.stage.to_string(),
                })?
            }
            ExprKind::Call(f, args) => {
                let arg = |d: usize| self.eval(&args[d], vars, bufs, locals, shared);
                on_stack(Scalar::I(0), args.len(), arg, |xs| Ok(math(*f, t, xs)))?
            }
        };
        Ok(normalize(t, v))
    }
}

/// √(2/π), the constant of the tanh approximation of GELU.
pub const GELU_C: f64 = 0.797_884_560_802_865_4;

fn check_inputs(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[Buffer],
) -> Result<Vec<Vec<i64>>, InterpError> {
    let shapes = check_launch(k, sizes, params)?;
    let given: Vec<(DType, usize)> = inputs.iter().map(|b| (b.dtype, b.len())).collect();
    check_given(k, &shapes, &given)?;
    Ok(shapes)
}

/// The tensors' shapes, after the sizes' and parameters' counts and the
/// kernel's `divisible` facts are checked.
fn check_launch(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
) -> Result<Vec<Vec<i64>>, InterpError> {
    if sizes.len() != k.sizes.len() || params.len() != k.params.len() {
        return Err(InterpError::BadInput(format!(
            "expected {} size(s) and {} parameter(s), got {} and {}",
            k.sizes.len(),
            k.params.len(),
            sizes.len(),
            params.len()
        )));
    }
    // A launch that breaks a `divisible` fact has no meaning: refused, as
    // every runtime refuses it.
    k.check_sizes(sizes).map_err(InterpError::BadInput)?;
    k.tensors
        .iter()
        .map(|t| shape_of(t, sizes))
        .collect::<Result<Vec<_>, _>>()
}

/// Checks the inputs given, as (dtype, elements), against the kernel's.
fn check_given(
    k: &Kernel,
    shapes: &[Vec<i64>],
    given: &[(DType, usize)],
) -> Result<(), InterpError> {
    let ins: Vec<_> = k.inputs().collect();
    if ins.len() != given.len() {
        return Err(InterpError::BadInput(format!(
            "expected {} input tensor(s), got {}",
            ins.len(),
            given.len()
        )));
    }
    for ((id, t), (dtype, len)) in ins.iter().zip(given) {
        let n: i64 = shapes[id.0 as usize].iter().product();
        if *dtype != t.dtype || *len as i64 != n {
            return Err(InterpError::BadInput(format!(
                "input `{}` must be {n} element(s) of {}, got {len} of {dtype}",
                t.name, t.dtype
            )));
        }
    }
    Ok(())
}

fn all_buffers(k: &Kernel, shapes: &[Vec<i64>], inputs: &[Buffer]) -> Vec<Buffer> {
    let mut it = inputs.iter();
    k.tensors
        .iter()
        .zip(shapes)
        .map(|(t, s)| match t.kind {
            TensorKind::Input => it.next().expect("checked count").clone(),
            TensorKind::Stage(_) => Buffer::zeros(t.dtype, s.iter().product::<i64>() as usize),
        })
        .collect()
}

/// `then` given the `n` values `get` yields, kept on the stack up to eight
/// (every access's subscripts, every call's arguments): the interpreter
/// reads one element per access, and a list on the heap per read was a
/// fifth of its time.
fn on_stack<V: Copy, T>(
    fill: V,
    n: usize,
    mut get: impl FnMut(usize) -> Result<V, InterpError>,
    then: impl FnOnce(&mut [V]) -> Result<T, InterpError>,
) -> Result<T, InterpError> {
    const N: usize = 8;
    if n <= N {
        let mut buf = [fill; N];
        for (d, slot) in buf[..n].iter_mut().enumerate() {
            *slot = get(d)?;
        }
        then(&mut buf[..n])
    } else {
        let mut v = (0..n).map(get).collect::<Result<Vec<_>, _>>()?;
        then(&mut v)
    }
}

/// Row-major coordinates of `flat` within `ext`.
fn unflatten(mut flat: i64, ext: &[i64], out: &mut [i64]) {
    for d in (0..ext.len()).rev() {
        out[d] = flat % ext[d];
        flat /= ext[d];
    }
}

/// Runs a kernel with its plain semantics. Returns every tensor, indexed by
/// [`TensorId`] (inputs as given, then each stage's result).
pub fn run(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[Buffer],
) -> Result<Vec<Buffer>, InterpError> {
    Ok(run_reporting(k, sizes, params, inputs)?.0)
}

/// [`run`], also returning the first gather or scatter whose subscripts the
/// data put out of range (a clamped read, a dropped update).
pub fn run_reporting(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[Buffer],
) -> Result<(Vec<Buffer>, Option<OutOfRange>), InterpError> {
    let shapes = check_inputs(k, sizes, params, inputs)?;
    let mut bufs = all_buffers(k, &shapes, inputs);
    let out_of_range = std::cell::RefCell::new(None);
    for st in &k.stages {
        let env = Env {
            out_of_range: &out_of_range,
            races: Default::default(),
            k,
            sizes,
            params,
            shapes: &shapes,
            stage: &st.name,
            lazy: None,
            bound: Default::default(),
        };
        whole_stage(&env, st, &mut bufs)?;
    }
    Ok((bufs, out_of_range.into_inner()))
}

/// Evaluates stage `st` over its whole iteration space into `bufs`.
fn whole_stage(env: &Env, st: &Stage, bufs: &mut [Buffer]) -> Result<(), InterpError> {
    if let Some(sc) = st.scatter() {
        let o = st.output.0 as usize;
        let empty = Buffer::zeros(bufs[o].dtype, 0);
        let mut out = std::mem::replace(&mut bufs[o], empty);
        let r = scatter_stage(env, st, sc, bufs, &mut out);
        bufs[o] = out;
        return r;
    }
    let mut entries = Vec::new();
    if let Some(rows) = stages::row_count(env, st) {
        for row in 0..rows {
            stages::stage_row(env, st, row, bufs, &mut entries)?;
            for (t, off, v) in entries.drain(..) {
                bufs[t.0 as usize].set(off, v);
            }
        }
        return Ok(());
    }
    let ext = &env.shapes[st.output.0 as usize];
    let nred = st.reduce().map_or(0, |r| r.axes.len());
    let total: i64 = ext.iter().product();
    let mut point = vec![0i64; ext.len() + nred];
    let mut extra = Vec::new();
    for flat in 0..total {
        unflatten(flat, ext, &mut point[..ext.len()]);
        let v = env.point_value(st, &mut point, ext.len(), bufs, &mut extra)?;
        for (out, x) in extra.drain(..) {
            bufs[out.0 as usize].set(flat as usize, x);
        }
        bufs[st.output.0 as usize].set(flat as usize, v);
    }
    Ok(())
}

/// The value of a loop variable outside its loop: any index computed from
/// it overflows or falls out of bounds, so using it is an error, not a 0.
const UNSET: i64 = i64::MIN / 4;
