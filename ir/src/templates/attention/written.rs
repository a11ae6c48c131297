//! Attention written out as ordinary stages, found and made the template:
//!
//! ```text
//! S[i, j] = sum(f32(Q[i, e]) * f32(K[j, e]), e) * scale
//! M[i]    = reduce_max(S[i, j], j)
//! P[i, j] = exp(S[i, j] - M[i])
//! L[i]    = sum(P[i, j], j)
//! O[i, d] = f16(sum(P[i, j] * f32(V[j, d]), j) / L[i])
//! ```
//!
//! with any leading axes (batch, heads) shared by all five, any key extent
//! of M, L and O (causal: `min(i + 1, T)`) within S's, and the scale a
//! factor of constants, sizes and parameters (none: 1). O becomes
//! `attention(Q[i, e], K[j, e], V[j, d], scale=scale)` and the other four
//! are absorbed into it ([`Stage::absorbed`]): no kernel, no buffer. Only
//! where none of the four is read elsewhere, declared `output = true` or
//! given a schedule by the file (nor is O). The values differ from the
//! five stages' only by rounding: the template keeps the softmax in f64
//! and rounds once (see [`crate::kernel::Attention`]).

use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::kernel::*;
use std::collections::HashMap;

/// The five stages' ids, and the pieces of the attention they write out.
struct Found {
    absorbed: [usize; 4],
    q: Expr,
    k: Expr,
    v: Expr,
    scale: Expr,
    head: Axis,
}

/// Rewrites every written-out attention of `k` into the template; the
/// stages rewritten (each now an attention with no schedule).
pub(crate) fn rewrite(k: &mut Kernel) -> Vec<usize> {
    let mut out = Vec::new();
    for o in 0..k.stages.len() {
        let Some(f) = find(k, o) else { continue };
        let st = &mut k.stages[o];
        let Some(keys) = st.reduce().map(|r| r.axes[0].clone()) else {
            continue;
        };
        let body = Expr {
            kind: ExprKind::Binary(
                BinOp::Mul,
                Box::new(f.q.clone().cast_to(DType::F32)),
                Box::new(f.k.clone().cast_to(DType::F32)),
            ),
            dtype: DType::F32,
        };
        st.value = Expr {
            kind: ExprKind::Reduced,
            dtype: f.v.dtype,
        };
        st.kind = StageKind::Reduce(Reduction {
            axes: vec![keys, f.head],
            body,
            kind: ReduceKind::Attention(Attention {
                q: f.q,
                k: f.k,
                v: f.v,
                scale: f.scale,
                outputs: vec![st.output],
            }),
        });
        st.schedule.clear();
        st.default = None;
        st.nest = None;
        for a in f.absorbed {
            let st = &mut k.stages[a];
            st.absorbed = true;
            // No loops of its own: what the rules chose for it goes.
            st.schedule.clear();
            st.default = None;
            st.nest = None;
        }
        out.push(o);
    }
    out
}

/// The stage of tensor `t`, if a stage computes it.
fn producer(k: &Kernel, t: TensorId) -> Option<usize> {
    match k.tensor(t).kind {
        TensorKind::Stage(s) => Some(s.0 as usize),
        TensorKind::Input => None,
    }
}

/// Whether `e` loads `t` at exactly the variables `0..n`, in order.
fn loads_at(e: &Expr, n: usize) -> Option<TensorId> {
    let ExprKind::Load { tensor, indices } = &e.kind else {
        return None;
    };
    let plain = indices.len() == n
        && indices
            .iter()
            .enumerate()
            .all(|(i, x)| *x == Index::Var(VarId(i as u32)));
    plain.then_some(*tensor)
}

/// `e` loads `t` at the variables `0..n - 1` and then `last`.
fn loads_row(e: &Expr, n: usize, last: VarId) -> Option<TensorId> {
    let ExprKind::Load { tensor, indices } = &e.kind else {
        return None;
    };
    let (lead, tail) = indices.split_at(indices.len().checked_sub(1)?);
    let plain = indices.len() == n
        && lead
            .iter()
            .enumerate()
            .all(|(i, x)| *x == Index::Var(VarId(i as u32)))
        && tail[0] == Index::Var(last);
    plain.then_some(*tensor)
}

/// A stage's single-axis reduction by `op`, its value the bare result.
fn bare(st: &Stage, op: ReduceOp) -> Option<&Reduction> {
    let r = st.reduce()?;
    (r.plain() == Some(op) && r.axes.len() == 1 && st.value.kind == ExprKind::Reduced).then_some(r)
}

/// The operands of a product, either way round: the one `pick` accepts first.
fn product<'e, T>(e: &'e Expr, pick: impl Fn(&'e Expr) -> Option<T>) -> Option<(T, &'e Expr)> {
    let ExprKind::Binary(BinOp::Mul, a, b) = &e.kind else {
        return None;
    };
    pick(a)
        .map(|t| (t, &**b))
        .or_else(|| pick(b).map(|t| (t, &**a)))
}

/// Whether `e` reads only constants, sizes and parameters.
fn constant(e: &Expr) -> bool {
    let mut ok = true;
    e.each(&mut |x| {
        ok &= !matches!(
            x.kind,
            ExprKind::Load { .. }
                | ExprKind::Gather { .. }
                | ExprKind::Index(_)
                | ExprKind::Reduced
        )
    });
    ok
}

/// A stage the rules scheduled (or nobody did): the file gave it no steps.
fn unscheduled(st: &Stage) -> bool {
    st.default.is_some() || st.schedule.is_empty()
}

/// `x` with the variables renumbered by `to`.
fn renumber(x: &Expr, to: &HashMap<VarId, Index>) -> Expr {
    x.map_indices(&|ix| ix.subst(to))
}

/// An operand of an attention: f16, bf16 or f32, read as f32.
fn operand(x: &Expr) -> Option<Expr> {
    let inner = match &x.kind {
        ExprKind::Cast(a) if x.dtype == DType::F32 => (**a).clone(),
        _ => x.clone(),
    };
    matches!(inner.dtype, DType::F16 | DType::BF16 | DType::F32).then_some(inner)
}

fn find(k: &Kernel, o: usize) -> Option<Found> {
    let os = &k.stages[o];
    let n = os.axes.len();
    if n < 2 || !unscheduled(os) || os.absorbed {
        return None;
    }
    let or = bare_sum_with_epilogue(os)?;
    let (jv, iv, dv) = (VarId(n as u32), VarId(n as u32 - 2), VarId(n as u32 - 1));
    let keys = &or.axes[0].extent;
    // O = [cast](Reduced / L[lead, i]).
    let (out_t, quotient) = match &os.value.kind {
        ExprKind::Cast(x) => (os.value.dtype, &**x),
        _ => (os.value.dtype, &os.value),
    };
    let ExprKind::Binary(BinOp::Div, num, den) = &quotient.kind else {
        return None;
    };
    if num.kind != ExprKind::Reduced || num.dtype != DType::F32 {
        return None;
    }
    let l_t = loads_at(den, n - 1)?;
    let (p_t, vx) = product(&or.body, |x| loads_row(x, n, jv))?;
    let (p, l) = (producer(k, p_t)?, producer(k, l_t)?);
    // The values: O's type where O converts, else f32.
    let v = match out_t {
        DType::F32 => vx.clone(),
        t => match &vx.kind {
            ExprKind::Cast(w) if w.dtype == t && vx.dtype == DType::F32 => (**w).clone(),
            _ => return None,
        },
    };
    if !matches!(v.dtype, DType::F16 | DType::BF16 | DType::F32)
        || v.uses_var(iv)
        || !v.uses_var(jv)
    {
        return None;
    }
    // P[lead, i, j] = exp(S[lead, i, j] - M[lead, i]).
    let ps = &k.stages[p];
    if ps.axes.len() != n || ps.reduce().is_some() || ps.scatter().is_some() {
        return None;
    }
    let ExprKind::Call(MathFn::Exp, args) = &ps.value.kind else {
        return None;
    };
    let [arg] = args.as_slice() else { return None };
    let ExprKind::Binary(BinOp::Sub, sx, mx) = &arg.kind else {
        return None;
    };
    let (s, m) = (
        producer(k, loads_at(sx, n)?)?,
        producer(k, loads_at(mx, n - 1)?)?,
    );
    // M[lead, i] = max(S[lead, i, j], j), L[lead, i] = sum(P[lead, i, j], j),
    // over O's keys.
    let (ms, ls) = (&k.stages[m], &k.stages[l]);
    let mr = bare(ms, ReduceOp::Max)?;
    let lr = bare(ls, ReduceOp::Sum)?;
    let row = VarId(n as u32 - 1);
    if ms.axes.len() != n - 1 || ls.axes.len() != n - 1 {
        return None;
    }
    if producer(k, loads_row(&mr.body, n, row)?)? != s
        || producer(k, loads_row(&lr.body, n, row)?)? != p
    {
        return None;
    }
    if mr.axes[0].extent != *keys || lr.axes[0].extent != *keys || keys.uses_var(dv) {
        return None;
    }
    // S[lead, i, j] = sum(q * k, e) [* scale].
    let ss = &k.stages[s];
    let sr = ss.reduce()?;
    if ss.axes.len() != n
        || sr.plain() != Some(ReduceOp::Sum)
        || sr.axes.len() != 1
        || ss.value.dtype != DType::F32
    {
        return None;
    }
    let scale = match &ss.value.kind {
        ExprKind::Reduced => Expr {
            kind: ExprKind::Float(1.0),
            dtype: DType::F32,
        },
        _ => product(&ss.value, |x| (x.kind == ExprKind::Reduced).then_some(()))
            .map(|((), f)| f.clone())
            .filter(|f| constant(f) && f.dtype == DType::F32)?,
    };
    // S's keys (its last axis) cover O's: the same extent, or O's bounded by it.
    let full = &ss.axes[n - 1].extent;
    let covered = keys == full
        || matches!(keys, Index::Bin(crate::index::IOp::Min, a, b) if **a == *full || **b == *full);
    let lead_same = (0..n - 1).all(|d| {
        [&ss.axes[d], &ps.axes[d], &ms.axes[d], &ls.axes[d]]
            .iter()
            .all(|a| a.extent == os.axes[d].extent)
    });
    if !covered || !lead_same || ps.axes[n - 1].extent != *full {
        return None;
    }
    // S numbers its keys n - 1 and the head n; the attention n and n + 1.
    let to = HashMap::from([
        (VarId(n as u32 - 1), Index::Var(VarId(n as u32))),
        (VarId(n as u32), Index::Var(VarId(n as u32 + 1))),
    ]);
    let ev = VarId(n as u32 + 1);
    let (qx, kx) = product(&sr.body, operand)?;
    let (q, kk) = (renumber(&qx, &to), renumber(&operand(kx)?, &to));
    let (q, kk) = if q.uses_var(jv) { (kk, q) } else { (q, kk) };
    if q.uses_var(jv) || !q.uses_var(ev) || kk.uses_var(iv) || !kk.uses_var(jv) || !kk.uses_var(ev)
    {
        return None;
    }
    if (0..n as u32).any(|a| sr.axes[0].extent.uses_var(VarId(a))) {
        return None;
    }
    let absorbed = [s, m, p, l];
    let distinct = absorbed.iter().all(|a| *a != o)
        && (0..4).all(|i| (i + 1..4).all(|j| absorbed[i] != absorbed[j]));
    if !distinct || !alone(k, o, absorbed) {
        return None;
    }
    Some(Found {
        absorbed,
        q,
        k: kk,
        v,
        scale,
        head: sr.axes[0].clone(),
    })
}

/// O's reduction: a sum over one axis (its value divides it by L).
fn bare_sum_with_epilogue(st: &Stage) -> Option<&Reduction> {
    let r = st.reduce()?;
    (r.plain() == Some(ReduceOp::Sum) && r.axes.len() == 1).then_some(r)
}

/// Whether the four stages are only the chain's: unscheduled by the file,
/// not declared results, and read by no stage outside the five.
fn alone(k: &Kernel, o: usize, absorbed: [usize; 4]) -> bool {
    let mine: Vec<TensorId> = absorbed.iter().map(|a| k.stages[*a].output).collect();
    let own = absorbed.iter().all(|a| {
        let st = &k.stages[*a];
        unscheduled(st) && !st.absorbed && !k.kept.contains(&st.output) && st.compute_at().is_none()
    });
    let outside = k
        .stages
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != o && !absorbed.contains(i))
        .any(|(_, st)| {
            let mut reads = false;
            for e in st.exprs() {
                e.visit_loads(&mut |t, _| reads |= mine.contains(&t));
            }
            reads
        });
    own && !outside
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = include_str!("../../../../tests/attention/written_out.toml");

    fn parse(src: &str, templates: &crate::front::Templates) -> Kernel {
        let rules = crate::front::RulesFor::default();
        crate::front::parse_kernel_for("k.toml", src, &[], 2, rules, templates)
            .map(|(k, _)| k)
            .unwrap_or_else(|e| panic!("{}", e.render()))
    }

    /// The stages that keep a kernel of their own.
    fn kernels(k: &Kernel) -> Vec<&str> {
        k.stages
            .iter()
            .filter(|s| !s.is_internal())
            .map(|s| s.name.as_str())
            .collect()
    }

    #[test]
    fn the_five_stages_become_one_attention_that_means_what_they_do() {
        let with = parse(SRC, &crate::templates::FRONT);
        assert_eq!(kernels(&with), ["O"]);
        let o = &with.stages[4];
        assert!(o.attention().is_some());
        assert_eq!(o.default.as_ref().map(|d| d.rule), Some("rowwise"));
        let without = parse(SRC, &crate::front::hooks::NONE);
        assert_eq!(kernels(&without).len(), 5);
        // Both kernels on the same inputs: O agrees within f16 rounding.
        let sizes = [37, 41];
        let data = crate::reference::random_inputs(&with, &sizes, &HashMap::new(), 7).unwrap();
        let a = crate::interp::run(&with, &sizes, &data.pvals, &data.inputs).unwrap();
        let b = crate::interp::run(&without, &sizes, &data.pvals, &data.inputs).unwrap();
        let out = o.output.0 as usize;
        assert_eq!(a[out].len(), 2 * 37 * 24);
        for i in 0..a[out].len() {
            let f = |s| match s {
                crate::interp::Scalar::F(x) => x,
                crate::interp::Scalar::I(x) => x as f64,
            };
            let (x, y) = (f(a[out].get(i)), f(b[out].get(i)));
            assert!(
                (x - y).abs() <= 2e-3 * (1.0 + y.abs()),
                "element {i}: {x} against {y}"
            );
        }
    }

    #[test]
    fn the_stages_stay_where_another_needs_them() {
        let cases = [
            // M is a result of the kernel.
            SRC.replace(
                "reduce = { j = \"min(i + 1, T)\" }\n\n[[stage]]\ncompute = \"P",
                "reduce = { j = \"min(i + 1, T)\" }\noutput = true\n\n[[stage]]\ncompute = \"P",
            ),
            // A later stage reads P.
            format!("{SRC}\n[[stage]]\ncompute = \"Z[b, i, j] = P[b, i, j] * 2.0\"\nshape = [2, \"S\", \"T\"]\n"),
            // The file schedules O.
            format!("{SRC}schedule = [\"bind(i, blockIdx.x)\"]\n"),
            // Not the softmax: exp(S) without the maximum.
            SRC.replace("exp(Sc[b, i, j] - M[b, i])", "exp(Sc[b, i, j] - 1.0)"),
            // The keys of the sum are not the maximum's.
            SRC.replace(
                "reduce = { j = \"min(i + 1, T)\" }\n\n[[stage]]\ncompute = \"O",
                "reduce = { j = \"T\" }\n\n[[stage]]\ncompute = \"O",
            ),
        ];
        for src in cases {
            assert_ne!(src, SRC);
            let k = parse(&src, &crate::templates::FRONT);
            assert!(kernels(&k).len() >= 5, "{src}");
        }
    }
}
