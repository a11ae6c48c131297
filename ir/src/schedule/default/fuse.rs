//! Fusing element-wise producers into their readers (TVM's `compute_inline`
//! of injective stages): a default-scheduled map whose every element each
//! reader reads once gets no kernel and no buffer of its own; its
//! expression is computed where it is read. A GELU chain `H = X W + b`,
//! `G = gelu(H)`, `Y = G * mask` becomes one pass over memory.

use super::{DefaultSchedule, Knobs};
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, TensorId};

/// The stages to inline, by index: default-scheduled element-wise stages
/// (no reduction, no scatter) that some later stage reads, whose readers
/// are all default-scheduled and each read them one element per
/// iteration (every read `P[v0, v1, ...]` names distinct loop variables
/// covering the reader's axes and reduction axes: no element recomputed
/// along a broadcast or a matrix product's k), never gathered from, and
/// not the last stage (the kernel's result).
pub fn inlinable(k: &Kernel) -> Vec<(usize, DefaultSchedule)> {
    let last = k.stages.len().saturating_sub(1);
    let mut gathered: Vec<TensorId> = Vec::new();
    for st in &k.stages {
        for e in st.exprs() {
            e.visit_gathers(&mut |t| gathered.push(t));
        }
    }
    let mut out = Vec::new();
    for (pi, p) in k.stages.iter().enumerate() {
        let candidate = pi < last
            && p.default.is_some()
            && p.reduce().is_none()
            && p.scatter().is_none()
            && !p.is_internal()
            && !k.kept.contains(&p.output)
            && !gathered.contains(&p.output);
        if !candidate {
            continue;
        }
        let mut readers = 0;
        let mut ok = true;
        for r in &k.stages[pi + 1..] {
            let vars = r.axes.len() + r.reduce().map_or(0, |x| x.axes.len());
            let mut reads = false;
            for e in r.exprs() {
                e.visit_loads(&mut |t, ix| {
                    if t == p.output {
                        reads = true;
                        ok &= one_per_iteration(ix, vars);
                    }
                });
            }
            if reads {
                readers += 1;
                ok &= r.default.is_some() && r.scatter().is_none() && !r.is_internal();
            }
        }
        if ok && readers > 0 {
            let steps = vec!["compute_inline()".to_string()];
            out.push((pi, Knobs::new(&p.name, &[]).done("inline", steps)));
        }
    }
    out
}

/// Whether subscripts `ix` are distinct plain variables, all `vars` of
/// the reader among them.
fn one_per_iteration(ix: &[Index], vars: usize) -> bool {
    let mut seen: Vec<VarId> = Vec::new();
    for x in ix {
        match x {
            Index::Var(v) if !seen.contains(v) => seen.push(*v),
            _ => return false,
        }
    }
    (0..vars as u32).all(|v| seen.contains(&VarId(v)))
}
