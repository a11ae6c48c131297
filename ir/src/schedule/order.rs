//! Whether a schedule keeps a reduction's operands in order, which a
//! combiner that is not commutative (a linear recurrence's pair) needs.
//!
//! A reduction loop bound to threads keeps the order when every thread
//! folds one contiguous share of the elements, in turn, and the shares
//! follow the threads: `t_o, t_i = split(t, nparts=256)` with `t_o` bound
//! to threadIdx. Lowering then combines the threads' results left with
//! right ([`crate::lower`]'s ordered tree). Interleaved shares
//! (`split(t, 256)` with the inner loop bound) and work-groups (whose
//! parts meet in atomic updates) do not.

use super::{LoopKind, LoopNest, State};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::Stage;
use crate::plan::GpuAxis;

/// The leaf loops `e` counts in, most significant first, where it is a
/// mixed-radix number of them as splits build it (`o * scale + rest`,
/// with `rest` below `scale`); `None` for any other form (a fused loop's
/// quotient or remainder).
fn digits(nest: &LoopNest, e: &Index) -> Option<Vec<VarId>> {
    match e {
        Index::Var(v) => Some(vec![*v]),
        Index::Bin(IOp::Add, hi, rest) => {
            let Index::Bin(IOp::Mul, o, scale) = &**hi else {
                return None;
            };
            let Index::Var(o) = **o else {
                return None;
            };
            let mut out = vec![o];
            out.extend(digits(nest, rest)?);
            below(nest, rest, scale).then_some(out)
        }
        _ => None,
    }
}

/// How many values a mixed-radix `e` (see [`digits`]) takes.
fn span(nest: &LoopNest, e: &Index) -> Option<Index> {
    match e {
        Index::Var(v) => Some(nest.var(*v).extent.clone()),
        Index::Bin(IOp::Add, hi, _) => {
            let Index::Bin(IOp::Mul, o, scale) = &**hi else {
                return None;
            };
            Some(span(nest, o)? * (**scale).clone())
        }
        _ => None,
    }
}

/// Whether every iteration that runs has `rest < scale`: the values
/// `rest` takes are exactly `scale` many, or a guard cuts them there (a
/// split that does not divide adds one).
fn below(nest: &LoopNest, rest: &Index, scale: &Index) -> bool {
    span(nest, rest).is_some_and(|s| s == *scale)
        || nest
            .guards
            .iter()
            .any(|g| g.value == *rest && g.extent == *scale)
}

/// Whether the threads of reduction loop `t` each fold a contiguous share
/// of the reduction's elements in order, the shares following `t`: the
/// reduction axes, read as one number (the first axis most significant)
/// in leaf loops, have `t` as the most significant digit and the other
/// reduction loops, in the order they run (serial, unrolled or
/// vectorized: each folds its elements in turn), as the rest. The error
/// says what breaks the order.
pub(super) fn contiguous_shares(nest: &LoopNest, t: VarId) -> Result<(), String> {
    let mut number = Vec::new();
    for (i, v) in nest.vars.iter().enumerate().take(nest.axis_values.len()) {
        if !v.reduce {
            continue;
        }
        match digits(nest, &nest.axis_values[i]) {
            Some(d) => number.extend(d),
            None => {
                return Err(format!(
                    "reduction axis `{}` is no longer a plain split of loops (a fuse makes quotients and remainders), so the threads' shares are not contiguous",
                    v.name
                ))
            }
        }
    }
    if number.first() != Some(&t) {
        return Err(format!(
            "`{}` is not the outermost part of the reduction, so each thread gets interleaved elements; split with `nparts=` and bind the outer loop",
            nest.var(t).name
        ));
    }
    let serial: Vec<VarId> = nest
        .order
        .iter()
        .copied()
        .filter(|v| nest.var(*v).reduce && *v != t)
        .collect();
    if let Some(b) = serial
        .iter()
        .find(|v| matches!(nest.var(**v).kind, LoopKind::Bound(_)))
    {
        return Err(format!(
            "reduction loop `{}` is bound too, and only one loop may spread it",
            nest.var(*b).name
        ));
    }
    if let Some(i) = (0..serial.len()).find(|i| number[1 + i] != serial[*i]) {
        return Err(format!(
            "within each thread's share, loop `{}` runs where `{}` should (the elements must come in order: reorder the loops back)",
            nest.var(serial[i]).name,
            nest.var(number[1 + i]).name
        ));
    }
    Ok(())
}

impl State<'_> {
    /// A tuple reduction whose combiner is not commutative may spread over
    /// the threads of a work-group only in contiguous shares
    /// ([`contiguous_shares`]); never over work-groups.
    pub(super) fn check_order(&self, stage: &Stage) -> Result<(), Diagnostic> {
        if !stage.keeps_order() {
            return Ok(());
        }
        let Some(v) = self.nest.order.iter().copied().find(|v| {
            self.nest.var(*v).reduce && matches!(self.nest.var(*v).kind, LoopKind::Bound(_))
        }) else {
            return Ok(());
        };
        let lv = self.nest.var(v);
        let why = match lv.kind {
            LoopKind::Bound(GpuAxis::Thread(_)) => match contiguous_shares(&self.nest, v) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            },
            _ => "work-groups combine their parts in any order".to_string(),
        };
        let span = self.bind_spans.get(&v).copied().unwrap_or(lv.span);
        Err(Diagnostic::new(
            span,
            format!(
                "reduction loop `{}` of stage `{}` cannot be spread this way: its combiner is not commutative (combine(a, b) differs from combine(b, a)), and {why}",
                lv.name, stage.name
            ),
        )
        .hint("split the reduction loop with `nparts=` and bind the outer loop to a threadIdx (`t_o, t_i = split(t, nparts=256)`, `bind(t_o, threadIdx.x)`), keep it serial, or give no schedule"))
    }
}
