//! Reductions: what a stage combines over its reduction axes and how
//! ([`ReduceKind`]), with the constructs a reduction stands for (a tuple
//! with the user's combiner, a scan, a top-k, an attention).

use super::*;

/// A reduction over named axes: `body` is combined over every point of
/// the reduction axes, starting from the combiner's identity, in
/// row-major order of the axes (the order that defines float rounding);
/// `kind` says how (see [`ReduceKind`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Reduction {
    pub axes: Vec<Axis>,
    /// The reduced expression, over output and reduction axes.
    pub body: Expr,
    pub kind: ReduceKind,
}

/// What a reduction combines and what it gives: exactly one of these, so a
/// pass that handles one kind matches it and the others are named, never
/// skipped by an unchecked optional field.
#[derive(Clone, Debug, PartialEq)]
pub enum ReduceKind {
    /// `sum`, `prod`, `reduce_max`, `reduce_min` and the bitwise ones.
    Op(ReduceOp),
    /// A reduction over a tuple with the user's combiner
    /// (`M[r], S[r] = reduce(X[r, c], 1.0)`); `body` is the first element.
    Tuple(TupleReduce),
    /// A scan (`cumsum(x, c)`): this reduction is its definition, over
    /// one axis whose extent is `c + 1` (`c` exclusive).
    Scan(Scan),
    /// A top-k (`V[r, j], I[r, j] = topk(X[r, c], c)`): `body` is then
    /// the element's i64 ranking key (see [`TopK`]).
    TopK(TopK),
    /// An attention (`O[b, i, d], L[b, i] = attention(q, k, v)`): `axes`
    /// are then the key axis `j` and the head axis `e`, and `body` one
    /// term of a score, `f32(q) * f32(k)` (see [`Attention`]).
    Attention(Attention),
}

impl Reduction {
    /// The built-in combiner of a plain reduction or a scan; `None` for a
    /// tuple, a top-k or an attention, which combine in their own way.
    pub fn op(&self) -> Option<ReduceOp> {
        match &self.kind {
            ReduceKind::Op(op) => Some(*op),
            ReduceKind::Scan(s) => Some(s.op),
            ReduceKind::Tuple(_) | ReduceKind::TopK(_) | ReduceKind::Attention(_) => None,
        }
    }

    /// A plain reduction's combiner (not a scan's).
    pub fn plain(&self) -> Option<ReduceOp> {
        match &self.kind {
            ReduceKind::Op(op) => Some(*op),
            _ => None,
        }
    }

    pub fn tuple(&self) -> Option<&TupleReduce> {
        match &self.kind {
            ReduceKind::Tuple(t) => Some(t),
            _ => None,
        }
    }

    pub fn scan(&self) -> Option<Scan> {
        match &self.kind {
            ReduceKind::Scan(s) => Some(*s),
            _ => None,
        }
    }

    pub fn topk(&self) -> Option<&TopK> {
        match &self.kind {
            ReduceKind::TopK(t) => Some(t),
            _ => None,
        }
    }

    pub fn attention(&self) -> Option<&Attention> {
        match &self.kind {
            ReduceKind::Attention(a) => Some(a),
            _ => None,
        }
    }

    /// What the construct is called in a message ("a scan"); `None` for a
    /// plain reduction.
    pub fn construct(&self) -> Option<&'static str> {
        match &self.kind {
            ReduceKind::Op(_) => None,
            ReduceKind::Tuple(_) => Some("a tuple reduction"),
            ReduceKind::Scan(_) => Some("a scan"),
            ReduceKind::TopK(_) => Some("a top-k"),
            ReduceKind::Attention(_) => Some("an attention"),
        }
    }
}

/// `O[.., i, d], L[.., i] = attention(q, k, v, scale=s)`: for each query
/// row (the output's axes but the last), the scores `s_j = scale · Σ_e
/// f32(q) · f32(k)` over the key axis `j` (the reduction's first axis,
/// whose extent may grow with `i`: a causal mask) and the head axis `e`
/// (its second); the weights `p_j = exp(s_j − max s) / Σ exp(s − max
/// s)`; the output `O[.., d] = Σ_j p_j · v(j, d)` in `v`'s dtype, and
/// the row's log-sum-exp `L = max s + log Σ exp(s − max s)` (f32). A
/// row with no keys gives `O = 0` and `L = −∞`. `q` does not depend on
/// `j` or `d`, `k` not on `i` or `d`, `v` not on `i` or `e`; `d`'s
/// extent, the head dimension of `v`, is a constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub q: Expr,
    pub k: Expr,
    pub v: Expr,
    /// f32, of constants, sizes and parameters.
    pub scale: Expr,
    /// `O`, then `L` where the stage names it.
    pub outputs: Vec<TensorId>,
}

/// `topk(x, c)`: the `k` best elements along the one reduction axis, best
/// first, where the stage's last axis (extent `k`, a constant) is the
/// position. The reduction's `body` is each element's i64 key, unique per
/// index and larger for better elements (the largest values first, the
/// smallest index on ties, NaN above everything; with `largest=false`
/// the smallest values first, NaN last); position `j` holds
/// the `j`-th largest key, or `i64::MIN` past the row's end. Each output
/// `outputs[s]` is `epilogues[s]` of that key ([`ExprKind::Reduced`]):
/// the value and the index it came from (0 and -1 past the end).
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    pub k: u32,
    pub largest: bool,
    pub outputs: Vec<TensorId>,
    pub epilogues: Vec<Expr>,
}

/// `cumsum(x, c)` (`cumprod`, ...) and its kind along output axis `axis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    pub op: ReduceOp,
    pub axis: usize,
    pub exclusive: bool,
}

/// A multi-result reduction: each point of the reduction axes gives a
/// tuple (`elems`, over output and reduction axes); tuples are folded
/// from `init` with `combine`, in row-major order of the axes, and
/// component `s` of the result is stored in `outputs[s]` (`outputs[0]` is
/// the stage's own tensor; the others are tensors of the same stage).
/// `combine[s]` is slot `s` of the combination of two partial results,
/// written over [`ExprKind::Operand`]s; it must be associative for a
/// cooperative schedule to give the interpreter's result (up to float
/// rounding), which the user states by writing it.
#[derive(Clone, Debug, PartialEq)]
pub struct TupleReduce {
    pub outputs: Vec<TensorId>,
    pub elems: Vec<Expr>,
    /// Constants, sizes and parameters only.
    pub init: Vec<Expr>,
    pub combine: Vec<Expr>,
    /// Whether `combine(a, b)` equals `combine(b, a)` (probed by the front
    /// end, `interp::tuple_commutes`): only then may threads combine
    /// partial results out of order.
    pub commutative: bool,
}

impl TupleReduce {
    /// The combiner applied to two partial results (one expression per slot each).
    pub fn apply(&self, left: &[Expr], right: &[Expr]) -> Vec<Expr> {
        self.combine
            .iter()
            .map(|c| {
                c.rewrite(&|x: &Expr| match x.kind {
                    ExprKind::Operand { right: r, slot } => Some(
                        if r {
                            &right[slot as usize]
                        } else {
                            &left[slot as usize]
                        }
                        .clone(),
                    ),
                    _ => None,
                })
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }
}
