//! The stages that are not one value per output element: scatters (each
//! point combined into a place the data names), evaluated over their
//! whole iteration space, and scans, top-k and attention, evaluated a row
//! at a time (so that a sampled run computes only the rows it needs).

use super::*;
use crate::kernel::ReduceKind;

/// A scatter stage: the output starts at the operation's identity, then
/// every point of the stage's axes combines its value in, row-major (one
/// of the orders the GPU may take).
pub(super) fn scatter_stage(
    env: &Env,
    st: &Stage,
    sc: &Scatter,
    bufs: &[Buffer],
    out: &mut Buffer,
) -> Result<(), InterpError> {
    let t = out.dtype;
    let id = env.eval(&sc.op.identity(t), &[], bufs, &[], &[])?;
    for i in 0..out.len() {
        out.set(i, id);
    }
    let ext: Vec<i64> = st
        .axes
        .iter()
        .map(|a| a.extent.eval(env.sizes, &[]).unwrap_or(0))
        .collect();
    let mut point = vec![0i64; ext.len()];
    for flat in 0..ext.iter().product::<i64>() {
        unflatten(flat, &ext, &mut point);
        let at = env.scatter_place(st.output, &sc.indices, &point, bufs, &[], &[])?;
        let v = env.eval(&st.value, &point, bufs, &[], &[])?;
        if let Some(off) = at {
            let new = env.combine(sc.op, t, out.get(off), v)?;
            out.set(off, new);
        }
    }
    Ok(())
}

/// Whether any of `exprs` reads a size or parameter, known only at run time.
fn reads_runtime<'e>(exprs: impl IntoIterator<Item = &'e Expr>) -> bool {
    let mut runtime = false;
    for e in exprs {
        e.each(&mut |x| runtime |= matches!(x.kind, ExprKind::Param(_) | ExprKind::Index(_)));
    }
    runtime
}

/// An environment for expressions of constants alone: no sizes,
/// parameters or tensors.
fn constant_env<'a>(
    k: &'a Kernel,
    out_of_range: &'a std::cell::RefCell<Option<super::OutOfRange>>,
    stage: &'a str,
) -> Env<'a> {
    Env {
        races: Default::default(),
        out_of_range,
        k,
        sizes: &[],
        params: &[],
        shapes: &[],
        stage,
        lazy: None,
        bound: Default::default(),
    }
}

/// For the front end: whether `tup`'s combiner keeps its `init` when it
/// meets `init`, where both are made of constants alone (`None` where
/// they use sizes or parameters, known only at run time). `names` are the
/// tuple's tensors, not yet in `k`.
pub fn tuple_identity(
    k: &Kernel,
    stage: &str,
    tup: &crate::kernel::TupleReduce,
    names: &[String],
) -> Option<InterpError> {
    if reads_runtime(tup.init.iter().chain(&tup.combine)) {
        return None;
    }
    let cell = std::cell::RefCell::new(None);
    let env = constant_env(k, &cell, stage);
    let init: Result<Vec<Expr>, InterpError> = tup
        .init
        .iter()
        .map(|e| Ok(constant(env.eval(e, &[], &[], &[], &[])?, e.dtype)))
        .collect();
    match init {
        Ok(acc) => env
            .identity(tup, &|slot| names[slot].clone(), &acc, &[], &[])
            .err(),
        Err(e) => Some(e),
    }
}

/// Whether `tup`'s combiner is commutative: `combine(x, y)` equals
/// `combine(y, x)`, up to rounding, on a few probe values of each slot's
/// dtype. Schedules that spread a reduction over threads combine partial
/// results out of order, which only a commutative combiner survives (the
/// pair `(a1·a2, h1·a2 + h2)` of a linear recurrence does not). A
/// combiner that reads sizes or parameters is taken as commutative (its
/// values are known only at run time).
pub fn tuple_commutes(k: &Kernel, tup: &crate::kernel::TupleReduce) -> bool {
    if reads_runtime(&tup.combine) {
        return true;
    }
    let cell = std::cell::RefCell::new(None);
    let env = constant_env(k, &cell, "");
    // Positive probes, none an identity of + or ×: combiners often mark
    // an empty side with a negative value (an argmax's index -1), a state
    // no two real partial results are in.
    const PROBES: [f64; 5] = [0.75, 1.5, 3.0, 2.5, 0.625];
    let side = |shift: usize| -> Vec<Expr> {
        tup.combine
            .iter()
            .enumerate()
            .map(|(slot, e)| {
                let v = PROBES[(slot + shift) % PROBES.len()];
                match e.dtype.is_float() {
                    true => constant(Scalar::F(v), e.dtype),
                    false => constant(Scalar::I((v * 4.0) as i64), e.dtype),
                }
            })
            .collect()
    };
    for shift in 1..PROBES.len() {
        let (x, y) = (side(0), side(shift));
        let eval = |es: Vec<Expr>| -> Option<Vec<Scalar>> {
            es.iter()
                .map(|e| env.eval(e, &[], &[], &[], &[]).ok())
                .collect()
        };
        let (Some(xy), Some(yx)) = (eval(tup.apply(&x, &y)), eval(tup.apply(&y, &x))) else {
            continue;
        };
        // Rounding may differ (Welford's update is commutative in exact
        // arithmetic): only a difference far past it counts.
        let differs = |a: &Scalar, b: &Scalar| match (a, b) {
            (Scalar::F(a), Scalar::F(b)) if a.is_nan() || b.is_nan() => a.is_nan() != b.is_nan(),
            (Scalar::F(a), Scalar::F(b)) => (a - b).abs() > 1e-3 * (1.0 + a.abs().max(b.abs())),
            (a, b) => a != b,
        };
        if xy.iter().zip(&yx).any(|(a, b)| differs(a, b)) {
            return false;
        }
    }
    true
}

/// Elements of stage results: (tensor, offset, value).
pub(super) type Entries = Vec<(TensorId, usize, Scalar)>;

/// How many rows a stage computed a row at a time has (a scan along its
/// axis, a top-k, an attention); `None` for the others.
pub(super) fn row_count(env: &Env, st: &Stage) -> Option<i64> {
    let r = st.reduce()?;
    let ext = &env.shapes[st.output.0 as usize];
    let mut rows_ext = ext.clone();
    match &r.kind {
        ReduceKind::Scan(scan) => rows_ext[scan.axis] = 1,
        ReduceKind::TopK(_) | ReduceKind::Attention(_) => *rows_ext.last_mut()? = 1,
        ReduceKind::Op(_) | ReduceKind::Tuple(_) => return None,
    }
    Some(rows_ext.iter().product())
}

/// The row of a stage computed a row at a time (see [`row_count`]) that
/// holds element `off` of its result `t`.
pub(super) fn row_of(env: &Env, st: &Stage, t: TensorId, off: usize) -> i64 {
    let r = st.reduce().expect("a row stage reduces");
    let ext = &env.shapes[st.output.0 as usize];
    if let Some(scan) = r.scan() {
        // Drop the scan axis's coordinate from the row-major offset.
        let inner: i64 = ext[scan.axis + 1..].iter().product();
        let (o, e) = (off as i64, ext[scan.axis]);
        return o / (inner * e) * inner + o % inner;
    }
    // An attention's log-sum-exp has one element per row.
    let lse = r.attention().and_then(|a| a.outputs.get(1));
    if lse == Some(&t) {
        return off as i64;
    }
    off as i64 / ext.last().copied().unwrap_or(1).max(1)
}

/// Row `row` of a stage computed a row at a time, its elements pushed to
/// `out`.
pub(super) fn stage_row(
    env: &Env,
    st: &Stage,
    row: i64,
    bufs: &[Buffer],
    out: &mut Entries,
) -> Result<(), InterpError> {
    let r = st.reduce().expect("a row stage reduces");
    match &r.kind {
        ReduceKind::Scan(scan) => scan_row(env, st, r, *scan, row, bufs, out),
        ReduceKind::TopK(t) => topk_row(env, st, r, t, row, bufs, out),
        ReduceKind::Attention(a) => attention_row(env, st, r, a, row, bufs, out),
        ReduceKind::Op(_) | ReduceKind::Tuple(_) => unreachable!("not a row stage"),
    }
}

/// A scan stage's row: the triangular reduction it stands for, folded
/// once along the row (the same order of operations, so the same
/// rounding, as folding each prefix afresh), in linear time.
fn scan_row(
    env: &Env,
    st: &Stage,
    r: &crate::kernel::Reduction,
    scan: crate::kernel::Scan,
    row: i64,
    bufs: &[Buffer],
    out: &mut Entries,
) -> Result<(), InterpError> {
    let ext = &env.shapes[st.output.0 as usize];
    let n = ext.len();
    let a = scan.axis;
    let mut rows_ext = ext.clone();
    rows_ext[a] = 1;
    let t = r.body.dtype;
    let mut point = vec![0i64; n + 1];
    unflatten(row, &rows_ext, &mut point[..n]);
    let mut acc = env.eval(&scan.op.identity(t), &point, bufs, &[], &[])?;
    for c in 0..ext[a] {
        point[a] = c;
        point[n] = c;
        let before = acc;
        let x = env.eval(&r.body, &point, bufs, &[], &[])?;
        acc = env.accumulate(scan.op, t, acc, x)?;
        let got = normalize(t, if scan.exclusive { before } else { acc });
        let v = env.eval_with_reduced(&st.value, (got, t), &point, bufs)?;
        out.push((st.output, env.offset(st.output, &point[..n])?, v));
    }
    Ok(())
}

/// The output's shape with its last axis reduced to 1 (the rows a top-k
/// or an attention computes one at a time).
fn row_shape(ext: &[i64]) -> Vec<i64> {
    let mut rows_ext = ext.to_vec();
    if let Some(last) = rows_ext.last_mut() {
        *last = 1;
    }
    rows_ext
}

/// A top-k stage's row: the row's keys, largest first; position `j` holds
/// the `j`-th (`i64::MIN` past the row's end), and each output its
/// epilogue.
fn topk_row(
    env: &Env,
    st: &Stage,
    r: &crate::kernel::Reduction,
    t: &crate::kernel::TopK,
    row: i64,
    bufs: &[Buffer],
    out: &mut Entries,
) -> Result<(), InterpError> {
    let ext = &env.shapes[st.output.0 as usize];
    let n = ext.len();
    let len = r.axes[0].extent.eval(env.sizes, &[]).unwrap_or(0).max(0);
    let mut point = vec![0i64; n + 1];
    unflatten(row, &row_shape(ext), &mut point[..n]);
    let mut keys = Vec::with_capacity(len as usize);
    for c in 0..len {
        point[n] = c;
        match env.eval(&r.body, &point, bufs, &[], &[])? {
            Scalar::I(key) => keys.push(key),
            Scalar::F(_) => unreachable!("top-k keys are i64"),
        }
    }
    keys.sort_unstable_by(|a, b| b.cmp(a));
    for j in 0..ext[n - 1] {
        point[n - 1] = j;
        let key = keys.get(j as usize).copied().unwrap_or(i64::MIN);
        for (o, e) in t.outputs.iter().zip(&t.epilogues) {
            let v = env.eval_with_reduced(e, (Scalar::I(key), DType::I64), &point, bufs)?;
            out.push((*o, env.offset(*o, &point[..n])?, v));
        }
    }
    Ok(())
}

/// An attention's ([`crate::kernel::Attention`]) query row: the f32
/// scores (each a sum over the head axis in its order, then scaled), the
/// softmax's maximum, weights and sum in f64, and the outputs rounded once.
fn attention_row(
    env: &Env,
    st: &Stage,
    r: &crate::kernel::Reduction,
    a: &crate::kernel::Attention,
    row: i64,
    bufs: &[Buffer],
    out: &mut Entries,
) -> Result<(), InterpError> {
    let ext = &env.shapes[st.output.0 as usize];
    let n = ext.len();
    let f32r = |x: f64| crate::dtype::round_to(x, DType::F32);
    let scale = env.eval(&a.scale, &[], bufs, &[], &[])?.f();
    let mut point = vec![0i64; n + 2];
    unflatten(row, &row_shape(ext), &mut point[..n]);
    let keys = r.axes[0].extent.eval(env.sizes, &point).unwrap_or(0).max(0);
    let head = r.axes[1].extent.eval(env.sizes, &point).unwrap_or(0).max(0);
    let mut scores = Vec::with_capacity(keys as usize);
    for j in 0..keys {
        point[n] = j;
        let mut acc = Scalar::F(0.0);
        for e in 0..head {
            point[n + 1] = e;
            let x = env.eval(&r.body, &point, bufs, &[], &[])?;
            acc = env.combine(ReduceOp::Sum, DType::F32, acc, x)?;
        }
        scores.push(f32r(acc.f() * scale));
    }
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let sum: f64 = weights.iter().sum();
    point[n + 1] = 0;
    for d in 0..ext[n - 1] {
        point[n - 1] = d;
        let mut o = 0.0;
        for (j, w) in weights.iter().enumerate() {
            point[n] = j as i64;
            o += w * env.eval(&a.v, &point, bufs, &[], &[])?.f();
        }
        let o = if keys == 0 { 0.0 } else { o / sum };
        let v = Scalar::F(crate::dtype::round_to(o, st.value.dtype));
        out.push((a.outputs[0], env.offset(a.outputs[0], &point[..n])?, v));
    }
    if let Some(lse) = a.outputs.get(1) {
        let l = if keys == 0 {
            f64::NEG_INFINITY
        } else {
            f32r(m + sum.ln())
        };
        out.push((*lse, env.offset(*lse, &point[..n - 1])?, Scalar::F(l)));
    }
    Ok(())
}
