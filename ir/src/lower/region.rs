//! Where tiles and parts go: the box of a tensor a set of accesses
//! touches, the statements a loop's tile serves, and inserting a fill
//! there. Shared by the `caches` and `compute_at` passes.

use super::{Diagnostic, Stmt};
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Expr, ExprKind, TensorId};
use crate::loops::visit::walk;
use crate::schedule::{GpuAxis, Guard, LoopKind, LoopVar};

/// `e` as Σ coefₜ·t over terms t of the `varying` variables plus a rest
/// free of them; `None` if a varying variable appears other than with a
/// constant coefficient (under a minimum, a product of variables...). A
/// term is a variable, or a division or remainder by a constant of an
/// expression of variables and constants only (a lane's place in a matrix
/// fragment, `(lane / 4) % 8`), which spans a fixed range.
pub(super) fn split_varying(e: &Index, varying: &[VarId]) -> Option<(Vec<(Index, i64)>, Index)> {
    let uses = |x: &Index| varying.iter().any(|v| x.uses_var(*v));
    if !uses(e) {
        return Some((Vec::new(), e.clone()));
    }
    match e {
        Index::Var(_) => Some((vec![(e.clone(), 1)], Index::c(0))),
        Index::Bin(IOp::Add, a, b) => {
            let (mut ca, ra) = split_varying(a, varying)?;
            let (cb, rb) = split_varying(b, varying)?;
            ca.extend(cb);
            Some((ca, ra + rb))
        }
        Index::Bin(IOp::Mul, a, b) => {
            let (x, c) = match (a.as_const(), b.as_const()) {
                (_, Some(c)) => (a, c),
                (Some(c), _) => (b, c),
                _ => return None,
            };
            let (cx, rx) = split_varying(x, varying)?;
            let scaled = cx
                .into_iter()
                .map(|(v, k)| k.checked_mul(c).map(|kc| (v, kc)))
                .collect::<Option<Vec<_>>>()?;
            Some((scaled, rx * Index::c(c)))
        }
        Index::Bin(IOp::Div | IOp::Mod, a, b)
            if b.as_const().is_some_and(|c| c > 0) && only_varying(a, varying) =>
        {
            Some((vec![(e.clone(), 1)], Index::c(0)))
        }
        _ => None,
    }
}

/// The smallest part of `e` that keeps it from being affine in the
/// `varying` loops (where [`split_varying`] fails): a minimum or maximum
/// of a loop variable, a product of two loop-dependent parts, a division
/// by something other than a positive constant, or one of a size. Named in
/// errors so the user sees which subexpression to change.
fn non_affine_part<'e>(e: &'e Index, varying: &[VarId]) -> Option<&'e Index> {
    let uses = |x: &Index| varying.iter().any(|v| x.uses_var(*v));
    match e {
        _ if !uses(e) => None,
        Index::Var(_) | Index::Const(_) | Index::Size(_) => None,
        Index::Bin(IOp::Add, a, b) => {
            non_affine_part(a, varying).or_else(|| non_affine_part(b, varying))
        }
        Index::Bin(IOp::Mul, a, b) if a.as_const().is_some() || b.as_const().is_some() => {
            non_affine_part(a, varying).or_else(|| non_affine_part(b, varying))
        }
        Index::Bin(IOp::Div | IOp::Mod, a, b)
            if b.as_const().is_some_and(|c| c > 0) && only_varying(a, varying) =>
        {
            None
        }
        Index::Bin(..) => Some(e),
    }
}

/// Why a non-affine part is not affine, for the error.
fn non_affine_reason(e: &Index) -> &'static str {
    match e {
        Index::Bin(IOp::Min | IOp::Max, ..) => {
            "a minimum or maximum of a loop variable (a clamp) is not affine: the tile a cache copies \
             is a box that moves with the loops; leave the tensor uncached, or cache it at a loop \
             over which the clamped subscript does not vary"
        }
        Index::Bin(IOp::Mul, ..) => "a product of two loop-dependent terms is not affine",
        Index::Bin(IOp::Xor, ..) => "an exclusive or of a loop variable is not affine",
        Index::Bin(IOp::Sub, ..) => {
            "a loop variable subtracted walks the tensor backwards, which a tile cannot follow"
        }
        _ => {
            "a division or remainder is affine only of loop variables and constants, by a positive constant"
        }
    }
}

/// Whether `e` is made of constants and `varying` variables only.
fn only_varying(e: &Index, varying: &[VarId]) -> bool {
    match e {
        Index::Size(_) => false,
        Index::Var(v) => varying.contains(v),
        Index::Bin(_, a, b) => only_varying(a, varying) && only_varying(b, varying),
        Index::Const(_) => true,
    }
}

/// The box of a tensor that a set of accesses touches while the `varying`
/// loops run: per dimension a base (free of the varying loops; the lowest
/// constant offset included), that lowest offset, and the extent.
pub(super) struct Region {
    pub(super) base: Vec<Index>,
    pub(super) lo: Vec<i64>,
    pub(super) size: Vec<i64>,
    /// Per dimension, where a loop of symbolic extent spans it, the
    /// extent the accesses actually reach (free of the varying loops, at
    /// most `size`, which is then its bound from the sizes' `max`); `None`
    /// where the extent is `size` itself.
    pub(super) live: Vec<Option<Index>>,
}

/// The most elements a region bounded by `max` may have: beyond that the
/// bound is taken for a missing `max`, not a part that fits anywhere.
const MAX_BOUNDED: i64 = 1 << 20;

/// Where a region is inferred, for its errors: the loops (by [`VarId`]),
/// the kernel's size names, and the name of the loop the tile sits at.
pub(super) struct Place<'a> {
    pub(super) vars: &'a [LoopVar],
    pub(super) sizes: &'a [String],
    /// The sizes' upper bounds (`[kernel] max`), which bound a part over
    /// loops of symbolic extent.
    pub(super) size_max: &'a [u64],
    pub(super) at: &'a str,
}

/// Infers the [`Region`] of `accesses`: each dimension must be affine in the
/// `varying` loops with non-negative coefficients, and every access must
/// share one symbolic base. A loop of symbolic extent is sized by its bound
/// (the sizes' `max`), and its dimension records the extent reached.
pub(super) fn infer_region(
    tensor: &str,
    dims: usize,
    accesses: &[Vec<Index>],
    varying: &[VarId],
    place: &Place<'_>,
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<Region, Diagnostic> {
    let Place {
        vars, sizes, at, ..
    } = *place;
    let var_names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
    let too_large = || {
        err(format!(
            "the part of `{tensor}` accessed inside `{at}` is too large"
        ))
    };
    let (mut base, mut lo, mut size, mut live) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for d in 0..dims {
        let (mut sym, mut min, mut max) = (None::<Index>, i64::MAX, i64::MIN);
        // The highest offset reached, as an expression, where a loop of
        // symbolic extent spans this dimension.
        // (One end per distinct access, past the highest offset; `plain`
        // keeps the constant ends met before the first symbolic one.)
        let (mut reach, mut plain): (Vec<Index>, Vec<Index>) = (Vec::new(), Vec::new());
        for l in accesses {
            let (coefs, rest) = split_varying(&l[d], varying).ok_or_else(|| {
                let whole = l[d].display(sizes, &var_names).to_string();
                let part = non_affine_part(&l[d], varying).unwrap_or(&l[d]);
                let part_text = part.display(sizes, &var_names).to_string();
                let which = if part_text == whole {
                    String::new()
                } else {
                    format!(", and its part `{part_text}` is not")
                };
                err(format!(
                    "the accesses of `{tensor}` are not affine in the loops inside `{at}`: \
                     dimension {d} is `{whole}`{which}"
                ))
                .hint(non_affine_reason(part))
            })?;
            let (s, off) = peel_const(&rest);
            match &sym {
                None => sym = Some(s),
                Some(x) if *x == s => {}
                Some(_) => {
                    return Err(err(format!(
                        "the accesses of `{tensor}` do not share one tile (dimension {d})"
                    )))
                }
            }
            let (mut hi, mut hi_sym, mut symbolic) = (off, Index::c(off), false);
            for (term, coef) in &coefs {
                if *coef < 0 {
                    return Err(err(format!(
                        "`{tensor}` is accessed backwards along dimension {d}"
                    )));
                }
                let (thi, last) = term_reach(term, d, tensor, place, varying, err)?;
                symbolic |= last.is_some();
                let e = i64::try_from(thi).map_err(|_| too_large())? + 1;
                hi = coef
                    .checked_mul(e - 1)
                    .and_then(|x| hi.checked_add(x))
                    .ok_or_else(&too_large)?;
                hi_sym = hi_sym + Index::c(*coef) * last.unwrap_or(Index::c(e - 1));
            }
            let here = if symbolic {
                tidy(&(hi_sym + Index::c(1)))
            } else {
                Index::c(hi + 1)
            };
            if symbolic || !reach.is_empty() {
                if !reach.contains(&here) {
                    reach.push(here);
                }
            } else {
                plain.push(here);
            }
            min = min.min(off);
            max = max.max(hi);
        }
        base.push(sym.expect("at least one access") + Index::c(min));
        lo.push(min);
        let n = max
            .checked_sub(min)
            .and_then(|x| x.checked_add(1))
            .ok_or_else(&too_large)?;
        size.push(n);
        live.push(if reach.is_empty() {
            None
        } else {
            reach.extend(plain.into_iter().filter(|p| p.as_const() > Some(min)));
            let end = reach
                .into_iter()
                .reduce(|a, b| Index::bin(IOp::Max, a, b))
                .expect("not empty");
            Some(tidy(&(end - Index::c(min))))
        });
    }
    let elems = size.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    if live.iter().any(Option::is_some) && elems > MAX_BOUNDED {
        let d = live.iter().position(Option::is_some).unwrap_or(0);
        return Err(err(format!(
            "the part of `{tensor}` accessed inside `{at}` spans loops of symbolic extent, \
             and the sizes' bounds allow it {elems} elements (dimension {d} up to {})",
            size[d]
        ))
        .hint(format!(
            "bound the sizes with `[kernel] max` (e.g. `max = {{ {} = 4096 }}`), so the part fits \
             in LDS or registers by construction",
            live[d]
                .as_ref()
                .and_then(first_size)
                .and_then(|s| sizes.get(s.0 as usize))
                .map_or("n", |s| s.as_str())
        )));
    }
    Ok(Region {
        base,
        lo,
        size,
        live,
    })
}

/// The first size `e` names, if any.
fn first_size(e: &Index) -> Option<crate::index::SizeId> {
    match e {
        Index::Size(s) => Some(*s),
        Index::Bin(_, a, b) => first_size(a).or_else(|| first_size(b)),
        Index::Var(_) | Index::Const(_) => None,
    }
}

/// `e` rebuilt from its affine form, so that `256 * (n - 1) + 255 + 1`
/// reads `256 * n`: the extent is evaluated once per part, and shown.
pub(super) fn tidy(e: &Index) -> Index {
    let (terms, c) = e.affine();
    let mut terms: Vec<(Index, i64)> = terms.into_iter().collect();
    // A fixed order: the map's is not.
    terms.sort_by_key(|(t, _)| format!("{t:?}"));
    terms
        .into_iter()
        .fold(Index::c(0), |acc, (t, k)| acc + t * Index::c(k))
        + Index::c(c)
}

/// The largest value `term` takes while the `varying` loops run: a bound
/// (constant), and where the term is one loop of symbolic extent, that
/// extent less one (what the accesses reach at run time). Symbolic
/// extents are bounded by the sizes' `max`; they must not depend on the
/// varying loops themselves.
fn term_reach(
    term: &Index,
    d: usize,
    tensor: &str,
    place: &Place<'_>,
    varying: &[VarId],
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<(u128, Option<Index>), Diagnostic> {
    let Place {
        vars,
        sizes,
        size_max,
        at,
    } = *place;
    let mut var_max = Vec::new();
    let mut last = None;
    for (i, lv) in vars.iter().enumerate() {
        if !term.uses_var(VarId(i as u32)) {
            var_max.push(0);
            continue;
        }
        let e = match lv.extent.as_const() {
            Some(e) => e.max(1) as u64,
            None => {
                if let Some(v) = varying.iter().find(|v| lv.extent.uses_var(**v)) {
                    return Err(err(format!(
                        "loop `{}` inside `{at}` runs to `{}`, which depends on loop `{}` inside it too, so the part of `{tensor}` along dimension {d} has no fixed box",
                        lv.name,
                        lv.extent.display(sizes, &vars.iter().map(|v| v.name.clone()).collect::<Vec<_>>()),
                        vars[v.0 as usize].name
                    )));
                }
                if *term == Index::Var(VarId(i as u32)) {
                    last = Some(lv.extent.clone() - Index::c(1));
                }
                u64::try_from(lv.extent.max_value(size_max, &[]))
                    .unwrap_or(u64::MAX)
                    .max(1)
            }
        };
        var_max.push(e - 1);
    }
    let (tlo, thi) = term.range(&[], &var_max);
    if tlo < 0 {
        return Err(err(format!(
            "`{tensor}` is accessed backwards along dimension {d}"
        )));
    }
    Ok((thi as u128, last))
}

/// The dimension a bounded part's loops of symbolic extent span, where it
/// is the only one and every dimension before it is one element wide:
/// the elements used at run time are then the leading ones, and the part
/// can be copied and sized at launch by that extent alone.
pub(super) fn leading_live(live: &[Option<Index>], size: &[i64]) -> Option<usize> {
    let d = live.iter().position(Option::is_some)?;
    let single =
        live.iter().filter(|l| l.is_some()).count() == 1 && size[..d].iter().all(|n| *n == 1);
    single.then_some(d)
}

/// Per dimension, the offset of an access inside its [`Region`].
pub(super) fn region_offsets(ix: &[Index], varying: &[VarId], lo: &[i64]) -> Vec<Index> {
    ix.iter()
        .enumerate()
        .map(|(d, x)| {
            let (coefs, rest) = split_varying(x, varying).expect("checked by infer_region");
            coefs
                .iter()
                .fold(Index::c(peel_const(&rest).1 - lo[d]), |acc, (t, k)| {
                    acc + t.clone() * Index::c(*k)
                })
        })
        .collect()
}

/// A symbolic part and a constant offset: `s + 3` → (`s`, 3).
pub(super) fn peel_const(e: &Index) -> (Index, i64) {
    match e {
        Index::Const(c) => (Index::c(0), *c),
        Index::Bin(IOp::Add, a, b) => match (a.as_const(), b.as_const()) {
            (_, Some(c)) => match peel_const(a) {
                (s, k) if k.checked_add(c).is_some() => (s, k + c),
                _ => (e.clone(), 0),
            },
            (Some(c), _) => match peel_const(b) {
                (s, k) if k.checked_add(c).is_some() => (s, k + c),
                _ => (e.clone(), 0),
            },
            _ => (e.clone(), 0),
        },
        _ => (e.clone(), 0),
    }
}

/// The indices of every load of `tensor` in `body`.
pub(super) fn loads_of(body: &[Stmt], tensor: TensorId) -> Vec<Vec<Index>> {
    let mut out = Vec::new();
    walk(body, &mut |s| {
        // A scatter's subscripts read too.
        for e in s.exprs() {
            e.visit_loads(&mut |t, ix| {
                if t == tensor {
                    out.push(ix.to_vec());
                }
            });
        }
    });
    out
}

/// Replaces loads of `tensor` by `with(indices)`.
pub(super) fn replace_loads(e: &Expr, tensor: TensorId, with: &impl Fn(&[Index]) -> Expr) -> Expr {
    e.rewrite(&|x: &Expr| match &x.kind {
        ExprKind::Load { tensor: t, indices } if *t == tensor => Some(with(indices)),
        _ => None,
    })
}

/// The statements a tile or part placed at loop `at` serves: that loop's
/// body, or with `top` (a bound loop) everything after the binds.
pub(super) fn scope_of(body: &[Stmt], at: VarId, top: bool) -> Option<Vec<Stmt>> {
    if top {
        return Some(
            body.iter()
                .filter(|s| !matches!(s, Stmt::Bind { .. }))
                .cloned()
                .collect(),
        );
    }
    let mut found = None;
    walk(body, &mut |s| {
        if let Stmt::Loop { var, body, .. } = s {
            if *var == at {
                found = Some(body.clone());
            }
        }
    });
    found
}

/// Puts `fill` first in the body of loop `at` (or, with `top`, first after
/// the binds), applies `rewrite` to what follows it there, and with `sync`
/// separates the two by a barrier, and one iteration of `at` from the next
/// by another, so nothing is overwritten while another thread still reads it.
pub(super) fn insert_fill(
    body: Vec<Stmt>,
    at: VarId,
    top: bool,
    fill: Vec<Stmt>,
    rewrite: &dyn Fn(Vec<Stmt>) -> Vec<Stmt>,
    sync: bool,
) -> Vec<Stmt> {
    if top {
        let (binds, rest): (Vec<Stmt>, Vec<Stmt>) = body
            .into_iter()
            .partition(|s| matches!(s, Stmt::Bind { .. }));
        let mut out = binds;
        out.extend(fill);
        if sync {
            out.push(Stmt::Barrier);
        }
        out.extend(rewrite(rest));
        return out;
    }
    let mut wrap = |inner: Vec<Stmt>| {
        let mut v = fill.clone();
        if sync {
            v.push(Stmt::Barrier);
        }
        v.extend(rewrite(inner));
        if sync {
            v.push(Stmt::Barrier);
        }
        v
    };
    at_loop(body, at, &mut wrap)
}

/// Applies `f` to the body of loop `at`.
pub(super) fn at_loop(
    body: Vec<Stmt>,
    at: VarId,
    f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>,
) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Loop { var, .. } if var == at => s.map_bodies(f),
            other => other.map_bodies(&mut |b| at_loop(b, at, f)),
        })
        .collect()
}

/// Refuses to put barriers inside loop `at` when it runs under a guard that
/// depends on the thread: threads that skip it would never reach them.
pub(super) fn divergence_check(
    body: &[Stmt],
    at: VarId,
    vars: &[LoopVar],
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    let thread_dependent = |g: &Guard| {
        vars.iter().enumerate().any(|(i, lv)| {
            matches!(lv.kind, LoopKind::Bound(GpuAxis::Thread(_)))
                && g.value.uses_var(VarId(i as u32))
        })
    };
    if guards_around(body, at)
        .unwrap_or_default()
        .iter()
        .any(thread_dependent)
    {
        return Err(err(format!(
            "loop `{}` runs only in some threads (under a guard on a thread index), so the work-group cannot synchronise inside it",
            vars[at.0 as usize].name
        ))
        .hint("choose a loop outside the guarded part, or split so that the thread loops divide their extents"));
    }
    Ok(())
}

/// The guards of the `If`s around loop `at`, outermost first.
pub(super) fn guards_around(body: &[Stmt], at: VarId) -> Option<Vec<Guard>> {
    for s in body {
        match s {
            Stmt::Loop { var, .. } if *var == at => return Some(Vec::new()),
            Stmt::Loop { body, .. } => {
                if let Some(g) = guards_around(body, at) {
                    return Some(g);
                }
            }
            Stmt::If { guards, body } => {
                if let Some(mut g) = guards_around(body, at) {
                    g.splice(0..0, guards.iter().cloned());
                    return Some(g);
                }
            }
            _ => {}
        }
    }
    None
}
