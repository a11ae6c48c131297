//! `compute_at(Y, r)`: a producer stage computed inside its consumer's
//! kernel, at each iteration of one of the consumer's loops, over only the
//! part of its output the consumer reads there.
//!
//! The producer is lowered on its own over that part (its axes get the
//! part's constant extents; a placeholder variable per axis stands for
//! where the part starts), then merged into the consumer: its variables,
//! registers and LDS arrays are renumbered after the consumer's, its thread
//! loops become the consumer's, the placeholders become the part's origin,
//! and its stores go to an LDS array (a producer that binds threads, which
//! the work-group computes together) or to a per-thread register array (a
//! producer that binds none). The consumer's loads of the producer read
//! that array, and barriers separate the writes from the reads.

use super::region::{
    divergence_check, infer_region, insert_fill, leading_live, loads_of, region_offsets,
    replace_loads, scope_of, Place, Region,
};
use super::{
    lower_stage_in, Addressing, GpuKernel, Local, Lowering, PartBound, Stmt, MAX_ACCUMULATORS,
    MAX_LDS,
};
use crate::diag::Diagnostic;
use crate::index::{Index, SizeId, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, SizeVar, StageId, TensorId};
use crate::loops::visit::{fold_stmt, map_values, walk, Fold};
use crate::schedule::{GpuAxis, LoopKind, LoopNest, LoopVar, Name, StepKind};
use std::collections::HashMap;

/// Pass `compute_at`: places each producer computed at one of this
/// kernel's loops, latest first.
pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    for p in attached(l.k, l.sid) {
        let mut host = Host {
            nest: &l.nest,
            block: l.g.block,
            vars: &mut l.g.vars,
            locals: &mut l.g.locals,
            shared: &mut l.g.shared,
            dynamic: &mut l.g.dynamic_shared,
            addressing: &mut l.g.addressing,
            unit: l.unit,
            templates: l.templates,
        };
        l.g.body = attach(l.k, p, std::mem::take(&mut l.g.body), &mut host)?;
    }
    Ok(())
}

/// Checks the compute_at steps against the list of stages.
pub(super) fn check(k: &Kernel) -> Result<(), Diagnostic> {
    for (i, st) in k.stages.iter().enumerate() {
        let steps: Vec<_> = st
            .schedule
            .iter()
            .filter(|s| matches!(s.kind, StepKind::ComputeAt { .. }))
            .collect();
        let Some(first) = steps.first() else {
            continue;
        };
        if let Some(second) = steps.get(1) {
            return Err(Diagnostic::new(
                second.span,
                format!("stage `{}` is placed by compute_at twice", st.name),
            )
            .hint("keep one compute_at"));
        }
        if st.is_inlined() {
            return Err(Diagnostic::new(
                first.span,
                format!("stage `{}` is both inlined and computed at a loop", st.name),
            )
            .hint("keep compute_inline() or compute_at(...), not both"));
        }
        let (consumer, _, _) = st.compute_at().expect("found above");
        let later: Vec<&str> = k.stages[i + 1..].iter().map(|s| s.name.as_str()).collect();
        let Some(c) = k.stages.iter().position(|s| s.name == consumer.name) else {
            return Err(Diagnostic::new(
                consumer.span,
                format!("there is no stage `{}`", consumer.name),
            )
            .suggest(&consumer.name, later.iter().copied())
            .hint(format!(
                "name a later stage that reads `{}`: {}",
                st.name,
                if later.is_empty() {
                    "there is none, this is the last stage".to_string()
                } else {
                    later.join(", ")
                }
            )));
        };
        if c <= i {
            return Err(Diagnostic::new(
                consumer.span,
                format!(
                    "`{}` comes {} `{}`: a stage is computed at a later stage, one that reads it",
                    consumer.name,
                    if c == i { "as" } else { "before" },
                    st.name
                ),
            ));
        }
        let whole = match (k.stages[c].topk(), k.stages[c].nest.as_ref()) {
            (Some(_), _) => Some("a top-k"),
            (None, _) if k.stages[c].attention().is_some() => Some("an attention"),
            (None, Some(n)) if n.scan.is_some() => Some("a work-group scan"),
            _ => None,
        };
        if let Some(what) = whole {
            return Err(Diagnostic::new(
                consumer.span,
                format!(
                    "`{}` is {what}, built whole: it has no loop to compute `{}` at",
                    consumer.name, st.name
                ),
            )
            .hint(format!(
                "drop the compute_at, so that `{}` has a kernel of its own (or inline it with compute_inline())",
                st.name
            )));
        }
        if k.stages[c].is_inlined() {
            return Err(Diagnostic::new(
                consumer.span,
                format!("`{}` is inlined and has no loops of its own", consumer.name),
            )
            .hint(format!(
                "compute `{}` at the stage that `{}` is inlined into",
                st.name, consumer.name
            )));
        }
    }
    Ok(())
}

/// The stages placed at one of `consumer`'s loops, latest first (so that
/// each is put before the ones already placed, which may read it).
pub(super) fn attached(k: &Kernel, consumer: StageId) -> Vec<StageId> {
    let name = &k.stage(consumer).name;
    (0..k.stages.len())
        .rev()
        .filter(|i| {
            k.stages[*i]
                .compute_at()
                .is_some_and(|(c, _, _)| &c.name == name)
        })
        .map(|i| StageId(i as u32))
        .collect()
}

/// What the consumer's lowering has built so far, which a producer extends.
pub(super) struct Host<'a> {
    pub nest: &'a LoopNest,
    pub block: [u32; 3],
    pub vars: &'a mut Vec<LoopVar>,
    pub locals: &'a mut Vec<Local>,
    pub shared: &'a mut Vec<Local>,
    /// [`GpuKernel::dynamic_shared`].
    pub dynamic: &'a mut Vec<(u32, Index)>,
    pub addressing: &'a mut Addressing,
    /// The target's, for a producer's lane exchanges (a producer with
    /// `mma` is refused: it would need waves of its own).
    pub unit: Option<&'a crate::lower::matrix::MatrixUnit>,
    pub templates: &'a super::Templates,
}

/// Places producer `p` in the consumer's `body` at the loop its
/// compute_at names: checks where ([`cooperative`]), infers the part the
/// consumer reads there ([`part`]), lowers the producer over it, allocates
/// the part ([`part_arrays`]), merges the producer's kernel into the
/// consumer's ([`merge`]) and redirects the reads.
pub(super) fn attach(
    k: &Kernel,
    p: StageId,
    body: Vec<Stmt>,
    host: &mut Host,
) -> Result<Vec<Stmt>, Diagnostic> {
    let ps = k.stage(p);
    let (consumer, at_name, span) = ps.compute_at().expect("attached stages have compute_at");
    let nest = host.nest;
    let err = |m: String| Diagnostic::new(span, m);
    let at = find_loop(nest, &consumer.name, at_name)?;
    let top = matches!(nest.var(at).kind, LoopKind::Bound(_));
    let cooperative = cooperative(k, p, &body, at, host)?;
    let Part {
        varying,
        outputs,
        unread,
        region,
    } = part(k, p, &body, at, cooperative, host)?;
    let t = k.tensor(ps.output);
    if !cooperative && region.live.iter().any(Option::is_some) {
        return Err(err(format!(
            "the part of `{}` read inside `{}` is spanned by loops of symbolic extent, so a \
             per-thread (register) part would need indices known at compile time",
            ps.name, at_name.name
        ))
        .hint(format!(
            "bind `{}`'s loops to threads, so the work-group computes the part in LDS",
            ps.name
        )));
    }
    let (k2, origins, extents) = over_part(k, p, &region.size, &region.live);
    // Points of the part beyond the tensor are not computed (their inputs
    // may not exist); the consumer reads them only for results it never stores.
    let bounds: Vec<PartBound> = (0..ps.axes.len())
        .filter(|d| !within(&region.base[*d], region.size[*d], &t.shape[*d], nest))
        .map(|d| PartBound {
            axis: d,
            origin: Index::Size(origins[d]),
            extent: t.shape[d].clone(),
        })
        .collect();
    // Verified and cleaned of barriers as part of the consumer.
    // A producer with `mma` would need waves of its own: refused as having no target.
    let plain = ps
        .nest
        .as_ref()
        .is_none_or(|n| n.matrix.is_none() && n.attention.is_none());
    let unit = host.unit.filter(|_| plain);
    let given = super::Given {
        unit,
        templates: host.templates,
    };
    let gp = lower_stage_in(&k2, p, &bounds, &|_, _| Ok(()), given)?;
    if let Some(r) = gp.requires.first() {
        // Its count is over the part's own origins, which no launch passes.
        return Err(Diagnostic::new(
            r.span,
            format!(
                "{} may count past a 32-bit counter, which a part computed at `{}` cannot check at launch",
                r.what, consumer.name
            ),
        )
        .hint("declare upper bounds of the sizes in `[kernel] max`"));
    }
    if cooperative && gp.block != host.block {
        let b = |x: [u32; 3]| format!("{}×{}×{}", x[0], x[1], x[2]);
        return Err(err(format!(
            "`{}` runs on work-groups of {} threads, but `{}`'s are {}",
            ps.name,
            b(gp.block),
            consumer.name,
            b(host.block)
        ))
        .hint(format!(
            "bind `{}`'s loops to the same thread extents as `{}`'s",
            ps.name, consumer.name
        )));
    }

    let id = part_arrays(k, p, &outputs, &region, cooperative, &gp, host)?;
    let flat = |o: &[Index]| {
        o.iter()
            .zip(&region.size)
            .fold(Index::c(0), |acc, (x, n)| acc * Index::c(*n) + x.clone())
    };
    let fill = merge(
        k,
        p,
        gp,
        &Merge {
            origins: &origins,
            extents: &extents,
            region: &region,
            outputs: &outputs,
            unread: &unread,
            part: id,
            cooperative,
            flat: &flat,
        },
        host,
    );
    let lo = region.lo.clone();
    let read = |j: usize| {
        let (dtype, lo, varying) = (k.tensor(outputs[j]).dtype, lo.clone(), varying.clone());
        move |ix: &[Index]| {
            let index = flat(&region_offsets(ix, &varying, &lo));
            let array = id + j as u32;
            let kind = if cooperative {
                ExprKind::Shared {
                    shared: array,
                    index,
                }
            } else {
                ExprKind::Local {
                    local: array,
                    index,
                }
            };
            Expr { kind, dtype }
        }
    };
    let reads: Vec<_> = (0..outputs.len()).map(read).collect();
    let rewrite = |e: &Expr| {
        outputs
            .iter()
            .zip(&reads)
            .fold(e.clone(), |e, (t, r)| replace_loads(&e, *t, r))
    };
    Ok(insert_fill(
        body,
        at,
        top,
        fill,
        &|inner| map_values(inner, &rewrite),
        cooperative,
    ))
}

/// Whether producer `p` binds threads, and so is computed by the whole
/// work-group; refused where its binds cannot apply inside the consumer.
fn cooperative(
    k: &Kernel,
    p: StageId,
    body: &[Stmt],
    at: VarId,
    host: &Host,
) -> Result<bool, Diagnostic> {
    let ps = k.stage(p);
    let (consumer, at_name, span) = ps.compute_at().expect("attached stages have compute_at");
    let err = |m: String| Diagnostic::new(span, m);
    let at_kind = host.nest.var(at).kind;
    let top = matches!(at_kind, LoopKind::Bound(_));
    // A producer that binds threads is computed by the whole work-group.
    let mut cooperative = false;
    for s in &ps.schedule {
        if let StepKind::Bind { target, axis } = &s.kind {
            match axis {
                GpuAxis::Thread(_) => cooperative = true,
                GpuAxis::Block(_) => {
                    return Err(Diagnostic::new(
                        s.span,
                        format!(
                            "stage `{}` is computed inside `{}`'s work-groups and cannot bind `{}` to {axis}",
                            ps.name, consumer.name, target.name
                        ),
                    )
                    .hint("remove the bind: the consumer's blockIdx loops apply"))
                }
            }
        }
    }
    if cooperative {
        if let LoopKind::Bound(axis @ GpuAxis::Thread(_)) = at_kind {
            return Err(Diagnostic::new(
                at_name.span,
                format!(
                    "`{}` is bound to {axis}, but `{}` binds threads, so the whole work-group computes it: it needs a loop outside the thread loops",
                    at_name.name, ps.name
                ),
            )
            .hint("attach it at a blockIdx loop or a serial loop; or bind none of its loops, to compute it per thread"));
        }
        if !top {
            divergence_check(body, at, host.vars, &err)?;
        }
    }

    Ok(cooperative)
}

/// The part of a producer its consumer reads at one loop.
struct Part {
    /// The loops at which the part is the same.
    varying: Vec<VarId>,
    /// The producer's tensors read there, and those not read (a tuple's).
    outputs: Vec<TensorId>,
    unread: Vec<TensorId>,
    region: Region,
}

/// The statements the producer serves at loop `at`, the loops that vary
/// there, and the box of the producer they read.
fn part(
    k: &Kernel,
    p: StageId,
    body: &[Stmt],
    at: VarId,
    cooperative: bool,
    host: &Host,
) -> Result<Part, Diagnostic> {
    let ps = k.stage(p);
    let (consumer, at_name, span) = ps.compute_at().expect("attached stages have compute_at");
    let err = |m: String| Diagnostic::new(span, m);
    let nest = host.nest;
    let top = matches!(nest.var(at).kind, LoopKind::Bound(_));
    // The statements the producer serves, and the loops that vary there.
    let scope = scope_of(body, at, top).ok_or_else(|| {
        err(format!(
            "loop `{}` is not in `{}`'s kernel",
            at_name.name, consumer.name
        ))
    })?;
    let mut varying: Vec<VarId> = if cooperative {
        nest.order
            .iter()
            .copied()
            .filter(|v| matches!(nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .collect()
    } else {
        Vec::new()
    };
    walk(&scope, &mut |s| {
        if let Stmt::Loop { var, .. } = s {
            varying.push(*var);
        }
    });
    // A tuple reduction's tensors share one part: the union of the reads.
    // Tensors of a tuple reduction that nothing reads there get no part
    // (their stores are dropped below).
    let (mut outputs, mut unread, mut reads) = (Vec::new(), Vec::new(), Vec::new());
    for o in ps.outputs() {
        let r = loads_of(&scope, o);
        if r.is_empty() && k.kept.contains(&o) {
            return Err(err(format!(
                "`{}` is declared an output (`output = true`), but nothing inside loop `{}` of `{}` reads it, so its part would not be stored",
                k.tensor(o).name,
                at_name.name,
                consumer.name
            ))
            .hint(format!("leave `{}` in its own kernel (no compute_at)", ps.name)));
        }
        if r.is_empty() {
            unread.push(o);
        } else {
            outputs.push(o);
            reads.extend(r);
        }
    }
    if reads.is_empty() {
        return Err(err(format!(
            "nothing inside loop `{}` of `{}` reads `{}`",
            at_name.name, consumer.name, ps.name
        ))
        .hint(format!(
            "compute `{}` at a stage that reads it, at a loop around the reads",
            ps.name
        )));
    }
    let t = k.tensor(ps.output);
    let region = infer_region(
        &t.name,
        t.shape.len(),
        &reads,
        &varying,
        &Place {
            vars: host.vars,
            sizes: &k.size_names(),
            size_max: &k.sizes.iter().map(|s| s.max).collect::<Vec<_>>(),
            at: &at_name.name,
        },
        &err,
    )?;

    Ok(Part {
        varying,
        outputs,
        unread,
        region,
    })
}

/// Allocates one part array per tensor read, in LDS (cooperative) or
/// registers, within their limits; returns the first one's id (the rest
/// follow it, after the producer's own arrays).
fn part_arrays(
    k: &Kernel,
    p: StageId,
    outputs: &[TensorId],
    region: &Region,
    cooperative: bool,
    gp: &GpuKernel,
    host: &Host,
) -> Result<u32, Diagnostic> {
    let ps = k.stage(p);
    let (_, at_name, span) = ps.compute_at().expect("attached stages have compute_at");
    let err = |m: String| Diagnostic::new(span, m);
    // Where the part lives.
    // Saturating: a product beyond i64 is refused by the size limits below.
    let elems: i64 = region.size.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    Ok(if cooperative {
        let used: i64 = host
            .shared
            .iter()
            .chain(&gp.shared)
            .map(|s| s.bytes() as i64)
            .sum();
        let bytes: i64 = outputs
            .iter()
            .map(|o| k.tensor(*o).dtype.size() as i64)
            .sum();
        let need = elems.saturating_mul(bytes);
        if used.saturating_add(need) > MAX_LDS {
            return Err(err(format!(
                "`{}` computed at `{}` needs {need} bytes of LDS; with the rest of the kernel that exceeds the {MAX_LDS} bytes of any AMDGPU",
                ps.name, at_name.name
            ))
            .hint("attach it at an inner loop, so each iteration needs a smaller part"));
        }
        host.shared.len() + gp.shared.len()
    } else {
        if elems.saturating_mul(outputs.len() as i64) > MAX_ACCUMULATORS {
            return Err(err(format!(
                "`{}` computed at `{}` needs {} registers per thread; at most {MAX_ACCUMULATORS} are allowed",
                ps.name, at_name.name, elems.saturating_mul(outputs.len() as i64)
            ))
            .hint("attach it at an inner loop, so each iteration needs a smaller part"));
        }
        host.locals.len() + gp.locals.len()
    } as u32)
}

/// What [`merge`] maps the producer's kernel by.
struct Merge<'a> {
    origins: &'a [SizeId],
    /// The sizes standing for extents reached at run time (symbolic loops).
    extents: &'a [Option<SizeId>],
    region: &'a Region,
    outputs: &'a [TensorId],
    unread: &'a [TensorId],
    part: u32,
    cooperative: bool,
    flat: &'a dyn Fn(&[Index]) -> Index,
}

/// The producer's kernel `gp` merged into the consumer's: its loop
/// variables and arrays renumbered after the host's, its thread loops
/// mapped to the host's, its part origins placed, its stores redirected
/// into the part arrays. Returns the statements that fill the part.
fn merge(k: &Kernel, p: StageId, gp: GpuKernel, m: &Merge, host: &mut Host) -> Vec<Stmt> {
    let ps = k.stage(p);
    let (_, _, span) = ps.compute_at().expect("attached stages have compute_at");
    let nest = host.nest;
    let (origins, region, outputs, unread) = (m.origins, m.region, m.outputs, m.unread);
    let (id, cooperative, flat) = (m.part, m.cooperative, m.flat);
    let elems: i64 = region.size.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    let base = host.vars.len() as u32;
    let mut map: HashMap<VarId, Index> = HashMap::new();
    let mut var_map: HashMap<VarId, VarId> = HashMap::new();
    for (j, _) in gp.vars.iter().enumerate() {
        let v = VarId(j as u32);
        var_map.insert(v, VarId(base + j as u32));
        map.insert(v, Index::Var(VarId(base + j as u32)));
    }
    for s in &gp.body {
        if let Stmt::Bind { var, axis } = s {
            let to = nest.bound(*axis).map_or(Index::c(0), Index::Var);
            map.insert(*var, to);
        }
    }
    let mut origin_map: HashMap<SizeId, Index> = origins
        .iter()
        .copied()
        .zip(region.base.iter().cloned())
        .collect();
    for (e, l) in m.extents.iter().zip(&region.live) {
        if let (Some(e), Some(l)) = (e, l) {
            origin_map.insert(*e, l.clone());
        }
    }
    // Extents may name the part's run-time extents (`Y.extent1`).
    host.vars.extend(gp.vars.iter().map(|v| LoopVar {
        name: format!("{}.{}", ps.name, v.name),
        extent: v.extent.subst(&map).subst_sizes(&origin_map),
        ..v.clone()
    }));
    let (dl, ds) = (host.locals.len() as u32, host.shared.len() as u32);
    // The producer's own arrays keep its name, so two producers' caches differ.
    let own = |l: &Local| Local {
        name: if l.name.starts_with(&format!("{}_", ps.name)) {
            l.name.clone()
        } else {
            format!("{}.{}", ps.name, l.name)
        },
        ..l.clone()
    };
    host.locals.extend(gp.locals.iter().map(own));
    host.shared.extend(gp.shared.iter().map(own));
    host.dynamic.extend(
        gp.dynamic_shared
            .iter()
            .map(|(a, n)| (a + ds, n.subst_sizes(&origin_map))),
    );
    // One part array per tensor, consecutive from `id`; in LDS, sized at
    // launch where loops of symbolic extent span one dimension after unit ones.
    let run_time = leading_live(&region.live, &region.size).and_then(|d| {
        let after: i64 = region.size[d + 1..].iter().product();
        Some(region.live[d].clone()? * Index::c(after))
    });
    for o in outputs {
        if let (true, Some(n)) = (cooperative, &run_time) {
            host.dynamic.push((host.shared.len() as u32, n.clone()));
        }
        let part = Local {
            name: format!("{}_part", k.tensor(*o).name),
            dtype: k.tensor(*o).dtype,
            len: elems as u32,
            span,
        };
        if cooperative {
            host.shared.push(part);
        } else {
            host.locals.push(part);
        }
    }
    *host.addressing = (*host.addressing).max(gp.addressing);
    let fill: Vec<Stmt> = gp
        .body
        .into_iter()
        .filter(|s| !matches!(s, Stmt::Bind { .. }))
        .collect();
    // A declared result (`output = true`) is stored where it is computed
    // as well: at the part's origin plus the producer's offsets, within
    // the tensor.
    let kept: Vec<(TensorId, Vec<Index>)> = outputs
        .iter()
        .filter(|o| k.kept.contains(o))
        .map(|&o| (o, k.tensor(o).shape.clone()))
        .collect();
    let mut cx = Renumber {
        map: &map,
        origins: &origin_map,
        var_map: &var_map,
        dl,
        ds,
        outputs,
        part: id,
        cooperative,
        flat: &flat,
        kept: &kept,
        base: &region.base,
    };
    drop_stores(fill.into_iter().map(|s| cx.stmt(s)).collect(), unread)
}

/// `stmts` without the stores into `tensors`, at any depth.
fn drop_stores(stmts: Vec<Stmt>, tensors: &[TensorId]) -> Vec<Stmt> {
    stmts
        .into_iter()
        .filter(|s| !matches!(s, Stmt::Store { tensor, .. } if tensors.contains(tensor)))
        .map(|s| s.map_bodies(&mut |b| drop_stores(b, tensors)))
        .collect()
}

/// The kernel with producer `p` alone over a part: its axes get the part's
/// constant extents, and every use of output axis `d` is shifted by the
/// part's origin there, a size the part's kernel gains (`Y.origin0` ...;
/// its ids are returned), replaced by the consumer's expression when the
/// part is merged.
///
/// Where loops of symbolic extent span dimension `d` (`live[d]`), the
/// axis runs to a size of the part's kernel too (`Y.extent1`, at most the
/// bound `size[d]`), replaced by the extent reached when merged.
fn over_part(
    k: &Kernel,
    p: StageId,
    size: &[i64],
    live: &[Option<Index>],
) -> (Kernel, Vec<SizeId>, Vec<Option<SizeId>>) {
    let mut k2 = k.clone();
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let out = k.tensor(k.stage(p).output);
    let origins: Vec<SizeId> = (0..out.shape.len())
        .map(|d| {
            let id = SizeId(k2.sizes.len() as u32);
            k2.sizes.push(SizeVar {
                divisor: 1,
                name: format!("{}.origin{d}", k.stage(p).name),
                // An origin lies inside the tensor.
                max: u64::try_from(out.shape[d].max_value(&size_max, &[])).unwrap_or(u64::MAX),
                span: k.stage(p).span,
            });
            id
        })
        .collect();
    let extents: Vec<Option<SizeId>> = live
        .iter()
        .zip(size)
        .enumerate()
        .map(|(d, (l, n))| {
            l.as_ref().map(|_| {
                let id = SizeId(k2.sizes.len() as u32);
                k2.sizes.push(SizeVar {
                    divisor: 1,
                    name: format!("{}.extent{d}", k.stage(p).name),
                    max: *n as u64,
                    span: k.stage(p).span,
                });
                id
            })
        })
        .collect();
    let st = &mut k2.stages[p.0 as usize];
    let shift: HashMap<VarId, Index> = (0..st.axes.len())
        .map(|d| {
            let v = VarId(d as u32);
            (v, Index::Var(v) + Index::Size(origins[d]))
        })
        .collect();
    for ((a, n), e) in st.axes.iter_mut().zip(size).zip(&extents) {
        a.extent = e.map_or(Index::c(*n), Index::Size);
    }
    st.value = st.value.map_indices(&|ix| ix.subst(&shift));
    if let Some(r) = st.reduce_mut() {
        r.body = r.body.map_indices(&|ix| ix.subst(&shift));
        let elems = match &mut r.kind {
            crate::kernel::ReduceKind::Tuple(t) => &mut t.elems[..],
            _ => &mut [],
        };
        for e in elems {
            *e = e.map_indices(&|ix| ix.subst(&shift));
        }
    }
    (k2, origins, extents)
}

/// The consumer's live loop that compute_at names, or an error listing them.
fn find_loop(nest: &LoopNest, consumer: &str, at: &Name) -> Result<VarId, Diagnostic> {
    if let Some(v) = nest
        .order
        .iter()
        .copied()
        .find(|v| nest.var(*v).name == at.name)
    {
        return Ok(v);
    }
    let live: Vec<&str> = nest
        .order
        .iter()
        .map(|v| nest.var(*v).name.as_str())
        .collect();
    let message = if nest.vars.iter().any(|v| v.name == at.name) {
        format!(
            "loop `{}` of `{consumer}` was split or fused by its schedule and no longer exists",
            at.name
        )
    } else {
        format!("stage `{consumer}` has no loop `{}`", at.name)
    };
    Err(Diagnostic::new(at.span, message)
        .suggest(&at.name, live.iter().copied())
        .hint(format!("`{consumer}`'s loops: {}", live.join(", "))))
}

/// Whether `base + 0..size` provably lies inside `0..extent`: the part is
/// one point at a loop that runs exactly over the axis, or starts at 0 and
/// is no longer than a constant extent.
fn within(base: &Index, size: i64, extent: &Index, nest: &LoopNest) -> bool {
    match base {
        Index::Var(v) => {
            size == 1 && (v.0 as usize) < nest.vars.len() && nest.var(*v).extent == *extent
        }
        Index::Const(0) => extent.as_const().is_some_and(|e| size <= e),
        _ => false,
    }
}

/// Renumbers a lowered producer's statements into its consumer's kernel.
struct Renumber<'a> {
    /// Producer variables → consumer expressions (fresh variables, thread
    /// loops).
    map: &'a HashMap<VarId, Index>,
    /// The part's origin sizes → where the part starts in the consumer.
    origins: &'a HashMap<SizeId, Index>,
    /// Producer loop variables → their fresh numbers.
    var_map: &'a HashMap<VarId, VarId>,
    dl: u32,
    ds: u32,
    outputs: &'a [TensorId],
    part: u32,
    cooperative: bool,
    flat: &'a dyn Fn(&[Index]) -> Index,
    /// Declared results among `outputs`, with their shapes, and where the
    /// part starts in each dimension: their stores also go to memory.
    kept: &'a [(TensorId, Vec<Index>)],
    base: &'a [Index],
}

impl Renumber<'_> {
    fn ix(&self, i: &Index) -> Index {
        i.subst(self.map).subst_sizes(self.origins)
    }
}

impl Fold for Renumber<'_> {
    fn index(&mut self, i: Index) -> Index {
        self.ix(&i)
    }

    fn expr(&mut self, e: Expr) -> Expr {
        e.rewrite(&|x: &Expr| {
            let kind = match &x.kind {
                ExprKind::Local { local, index } => ExprKind::Local {
                    local: local + self.dl,
                    index: self.ix(index),
                },
                ExprKind::Shared { shared, index } => ExprKind::Shared {
                    shared: shared + self.ds,
                    index: self.ix(index),
                },
                ExprKind::Load { tensor, indices } => ExprKind::Load {
                    tensor: *tensor,
                    indices: indices.iter().map(|i| self.ix(i)).collect(),
                },
                ExprKind::Index(i) => ExprKind::Index(self.ix(i)),
                _ => return None,
            };
            Some(Expr {
                kind,
                dtype: x.dtype,
            })
        })
    }

    fn var(&mut self, v: VarId) -> VarId {
        // Bindings are dropped before renumbering; loops get fresh numbers.
        self.var_map[&v]
    }

    fn local(&mut self, l: u32) -> u32 {
        l + self.dl
    }

    fn shared(&mut self, s: u32) -> u32 {
        s + self.ds
    }

    fn stmt(&mut self, s: Stmt) -> Stmt {
        match s {
            Stmt::Store {
                tensor,
                indices,
                value,
            } if self.outputs.contains(&tensor) => {
                // Indices of the producer's own stores are offsets in the part.
                let offs: Vec<Index> = indices.iter().map(|i| self.ix(i)).collect();
                let index = (self.flat)(&offs);
                let value = self.expr(value);
                let array =
                    self.part + self.outputs.iter().position(|o| *o == tensor).unwrap_or(0) as u32;
                let put = if self.cooperative {
                    Stmt::SharedStore {
                        shared: array,
                        index,
                        value: value.clone(),
                    }
                } else {
                    Stmt::LocalStore {
                        local: array,
                        index,
                        value: value.clone(),
                    }
                };
                let Some((_, shape)) = self.kept.iter().find(|(t, _)| *t == tensor) else {
                    return put;
                };
                // Where the part passes the tensor (its last, partial
                // rows) nothing reads it: both stores stay within.
                let at: Vec<Index> = offs
                    .iter()
                    .zip(self.base)
                    .map(|(o, b)| b.clone() + o.clone())
                    .collect();
                let guards = at
                    .iter()
                    .zip(shape)
                    .map(|(a, e)| crate::schedule::Guard {
                        value: a.clone(),
                        extent: e.clone(),
                    })
                    .collect();
                let store = Stmt::Store {
                    tensor,
                    indices: at,
                    value,
                };
                Stmt::If {
                    guards,
                    body: vec![put, store],
                }
            }
            other => fold_stmt(self, other),
        }
    }
}
