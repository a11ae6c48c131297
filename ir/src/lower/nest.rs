//! Pass `nest`: the stage's loop nest as statements. Bound loops become
//! bindings and the launch geometry; the remaining loops wrap either the
//! store of the stage's value or its reduction, serial (per-thread
//! accumulators) or cooperative (threads combine partial results through
//! LDS in a tree).

use super::body::{self, build, clamp_loads, Frame};
use super::slots::{Home, Slots};
use super::threads::Threads;
use super::{inline_producers, Lowering, Stmt, MAX_ACCUMULATORS};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::schedule::{GpuAxis, Guard, LoopKind};

/// A body and the arrays it uses.
type Body = (Vec<Stmt>, Vec<super::Local>, Vec<super::Local>);

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    let (k, sid) = (l.k, l.sid);
    let stage = k.stage(sid);
    if let Some(built) = (l.templates.build)(l) {
        return built;
    }
    let r = body::frame(l);
    l.g.block = r.block;
    l.g.grid = r.grid.clone();
    l.tid = r.tid.clone();
    // The `matrix` pass writes the body of a stage with `mma`.
    if l.nest.matrix.is_some() {
        l.region = Some(r);
        return Ok(());
    }
    // A grid reduction stores its bare result: the parts meet in the
    // output, and the epilogue runs afterwards in a kernel of its own.
    let grid = super::scatter::grid_op(stage);
    let mut r = r;
    if let (Some(_), Some(t)) = (grid, stage.reduced_dtype()) {
        r.value = crate::kernel::Expr {
            kind: crate::kernel::ExprKind::Reduced,
            dtype: t,
        };
    }
    let nest = &l.nest;
    let (body, locals, shared) = match stage.reduce() {
        None => store_body(l, &r),
        Some(_)
            if nest.order.iter().any(|v| {
                nest.var(*v).reduce
                    && matches!(nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_)))
            }) =>
        {
            cooperative(l, &r)?
        }
        Some(_) => serial(l, &r)?,
    };
    let body = match grid {
        Some(op) => super::scatter::combine_stores(body, stage.output, op),
        None => body,
    };
    let mut all = r.binds;
    all.extend(body);
    l.g.body = all;
    l.g.locals = locals;
    l.g.shared = shared;
    Ok(())
}

/// A stage without a reduction: the store (or scatter) of its value in
/// its loops, privatized in LDS where the schedule asks.
fn store_body(l: &mut Lowering, r: &Frame) -> Body {
    let (k, sid, nest) = (l.k, l.sid, &l.nest);
    let stage = k.stage(sid);
    let (subst, value, indices) = (&r.subst, r.value.clone(), r.indices.clone());
    let (tid, block, loops) = (&r.tid, r.block, &r.loops);
    let all_guards: Vec<&Guard> = nest.guards.iter().collect();
    let mut shared = Vec::new();
    let mut body = Vec::new();
    let leaf = match stage.scatter() {
        // Subscripts read inlined producers as the value does.
        Some(sc) => Stmt::Scatter {
            tensor: stage.output,
            indices: sc
                .indices
                .iter()
                .map(|e| inline_producers(k, sid, e).map_indices(&|ix| ix.subst(subst)))
                .collect(),
            op: sc.op,
            value,
            shared: nest.privatized.map(|_| shared.len() as u32),
        },
        None => Stmt::Store {
            tensor: stage.output,
            indices,
            value,
        },
    };
    let main = build(nest, loops, &all_guards, vec![leaf]);
    match nest.privatized {
        Some(_) => body.extend(super::scatter::privatized(
            k,
            stage,
            shared.len() as u32,
            main,
            tid,
            block.iter().product::<u32>() as i64,
            &mut l.g.vars,
            &mut shared,
        )),
        None => body.extend(main),
    }
    (body, Vec::new(), shared)
}

/// A cooperative reduction: each thread reduces its share serially, then
/// the threads bound to the reduction loop combine their partial results
/// ([`Threads`]: an LDS tree, or lane exchanges first). Barriers and lane
/// exchanges are never under a guard: every thread reaches them.
fn cooperative(l: &Lowering, r: &Frame) -> Result<Body, Diagnostic> {
    let (k, sid, nest) = (l.k, l.sid, &l.nest);
    let stage = k.stage(sid);
    let (subst, value, indices) = (&r.subst, &r.value, &r.indices);
    let (tid, block, loops, cached) = (&r.tid, r.block, &r.loops, &r.cached);
    let all_guards: Vec<&Guard> = nest.guards.iter().collect();
    let mut body = Vec::new();
    let tr = *nest
        .order
        .iter()
        .find(|v| {
            nest.var(**v).reduce
                && matches!(nest.var(**v).kind, LoopKind::Bound(GpuAxis::Thread(_)))
        })
        .expect("found above");
    let LoopKind::Bound(GpuAxis::Thread(dim)) = nest.var(tr).kind else {
        unreachable!("a thread-bound loop")
    };
    let t_count = nest.var(tr).extent.as_const().unwrap_or(1);
    let r0 = loops
        .iter()
        .position(|v| nest.var(*v).reduce)
        .unwrap_or(loops.len());
    let (outer, inner) = loops.split_at(r0);
    if let Some(v) = inner.iter().find(|v| !nest.var(**v).reduce) {
        return Err(Diagnostic::new(
            nest.var(*v).span,
            format!(
                "loop `{}` runs inside the reduction loops of a cooperative reduction",
                nest.var(*v).name
            ),
        )
        .hint("move output loops outside the reduction loops with reorder"));
    }
    // The stride of the reduction's dimension in the linear thread index.
    let stride: i64 = block[..dim.index()].iter().map(|b| *b as i64).product();
    let slots = Slots::new(k, sid, stage, subst).expect("a reduction");
    let zero = Index::c(0);
    let mut locals = slots.locals(stage, 1);
    let spatial: Vec<Guard> = spatial_guards(nest).into_iter().cloned().collect();
    let mut leaf = slots.init(&zero);
    let update = slots.update(&zero);
    // With tiles staged inside the reduction, the barriers there must
    // be reached by every thread: out-of-range outputs accumulate from
    // clamped loads (never stored) instead of skipping the loops.
    if cached.is_empty() || spatial.is_empty() {
        leaf.extend(build(nest, inner, &all_guards, update));
    } else {
        let guarded: Vec<VarId> = (0..nest.vars.len() as u32)
            .map(VarId)
            .filter(|v| spatial.iter().any(|g| g.value.uses_var(*v)))
            .collect();
        let reduction_guards: Vec<&Guard> = nest
            .guards
            .iter()
            .filter(|g| !spatial.contains(g))
            .collect();
        let update = update
            .into_iter()
            .map(|u| clamp_loads(k, u, &guarded, cached))
            .collect();
        leaf.extend(build(nest, inner, &reduction_guards, update));
    }
    let threads = Threads {
        slots: &slots,
        stage,
        tr,
        count: t_count,
        stride,
        tid,
        block,
        locals: locals.len() as u32,
        repeats: outer
            .iter()
            .any(|v| nest.var(*v).extent.as_const() != Some(1)),
        span: nest.var(tr).span,
    };
    let finish =
        |result: &dyn Fn(usize) -> crate::kernel::Expr| slots.stores(value, indices, result);
    let tuple = slots.len() > 1;
    let (tail, more, shared) = match threads.lanes(l.unit.and_then(|u| u.lane_reduction(tuple))) {
        Some(w) => threads.by_lanes(w, spatial, &finish),
        None => threads.tree(spatial, &finish),
    };
    leaf.extend(tail);
    locals.extend(more);
    body.extend(build(nest, outer, &[], leaf));
    Ok((body, locals, shared))
}

/// A serial reduction: loops from the first reduction loop inward
/// accumulate; the output loops among them index a per-thread
/// accumulator array.
fn serial(l: &Lowering, r: &Frame) -> Result<Body, Diagnostic> {
    let (k, sid, nest) = (l.k, l.sid, &l.nest);
    let stage = k.stage(sid);
    let (subst, value, indices) = (&r.subst, &r.value, &r.indices);
    let (loops, cached) = (&r.loops, &r.cached);
    let all_guards: Vec<&Guard> = nest.guards.iter().collect();
    let mut body = Vec::new();
    // Loops from the first reduction loop inward accumulate; the
    // output loops among them index a per-thread accumulator array.
    let r0 = loops
        .iter()
        .position(|v| nest.var(*v).reduce)
        .unwrap_or(loops.len());
    let (outer, inner) = loops.split_at(r0);
    let acc_loops: Vec<VarId> = inner
        .iter()
        .copied()
        .filter(|v| !nest.var(*v).reduce)
        .collect();
    let mut len: i64 = 1;
    let mut acc_index = Index::c(0);
    for v in &acc_loops {
        let lv = nest.var(*v);
        let Some(e) = lv.extent.as_const() else {
            return Err(Diagnostic::new(lv.span, format!("loop `{}` runs inside a reduction loop but has a symbolic extent", lv.name))
                .hint("its iterations each keep an accumulator: split it by a constant factor, or move it outside the reduction loops with reorder"));
        };
        len *= e;
        acc_index = acc_index * Index::c(e) + Index::Var(*v);
    }
    if len > MAX_ACCUMULATORS {
        return Err(Diagnostic::new(stage.span, format!("stage `{}` needs {len} accumulators per thread; at most {MAX_ACCUMULATORS} are allowed", stage.name))
            .hint("use smaller factors for the output loops inside the reduction loops"));
    }
    let slots = Slots::new(k, sid, stage, subst).expect("a reduction");
    let locals = slots.locals(stage, len as u32);
    let spatial = spatial_guards(nest);
    let init = slots.init(&acc_index);
    let update = slots.update(&acc_index);
    let store = slots.stores(value, indices, &|s| slots.at(Home::Local, 0, s, &acc_index));
    // With several accumulators per thread, the accumulation keeps only
    // the reduction's guards: out-of-range outputs accumulate values
    // that are never stored, and loads indexed by guarded loops are
    // clamped into bounds instead of branched around, so loads shared
    // by several accumulators (A[i, k] for every j) are loaded once.
    // With one accumulator, one branch around the reduction is cheaper.
    let (update, update_guards): (Vec<Stmt>, Vec<&Guard>) =
        if (acc_loops.is_empty() && cached.is_empty()) || spatial.is_empty() {
            (update, all_guards.clone())
        } else {
            let guarded: Vec<VarId> = (0..nest.vars.len() as u32)
                .map(VarId)
                .filter(|v| spatial.iter().any(|g| g.value.uses_var(*v)))
                .collect();
            (
                update
                    .into_iter()
                    .map(|u| clamp_loads(k, u, &guarded, cached))
                    .collect(),
                nest.guards
                    .iter()
                    .filter(|g| !spatial.contains(g))
                    .collect(),
            )
        };
    let mut leaf = build(nest, &acc_loops, &[], init);
    leaf.extend(build(nest, inner, &update_guards, update));
    leaf.extend(build(nest, &acc_loops, &spatial, store));
    body.extend(build(nest, outer, &[], leaf));
    Ok((body, locals, Vec::new()))
}

/// The nest's guards that depend on no reduction loop: those of the output.
fn spatial_guards(nest: &crate::schedule::LoopNest) -> Vec<&Guard> {
    nest.guards
        .iter()
        .filter(|g| {
            !nest
                .vars
                .iter()
                .enumerate()
                .any(|(i, lv)| lv.reduce && g.value.uses_var(VarId(i as u32)))
        })
        .collect()
}
