//! Default schedules: a stage written without `schedule` gets one by rule,
//! in the manner of TVM's DLight. A rule looks at the stage's shape (an
//! element-wise map over rows, a reduction along contiguous rows, a
//! scatter into a small table) and writes the steps of the measured
//! example of that shape (bias2d_vec and saxpy at copy bandwidth, argmax at
//! 94 % of copy, histogram 5× `torch.bincount`). Each stage gets a list of
//! candidates, best first, ending with a plain flat grid; the front end
//! keeps the first that applies, so no default is ever an error.
//! `rocmc build --emit schedule` prints the rule and the steps, ready to
//! paste into the file and edit.
//!
//! The rules do not depend on the target: the numbers (256 threads, 4
//! elements per thread, 512 threads per row) suit both wave sizes.

use crate::index::{Index, VarId};
use crate::kernel::{Expr, Kernel, Stage};

/// A schedule a rule wrote for a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultSchedule {
    /// The rule that wrote it (`elementwise-2d`, `row-reduction`, ...).
    pub rule: &'static str,
    /// The steps, as a user would write them.
    pub steps: Vec<String>,
}

fn sched(rule: &'static str, steps: &[String]) -> DefaultSchedule {
    DefaultSchedule {
        rule,
        steps: steps.to_vec(),
    }
}

/// Output tables of at most this many elements are counted in LDS first
/// (`privatize`) by the scatter rule.
const PRIVATE_TABLE: i64 = 4096;

/// Candidate schedules for `st`, best first. Empty for a stage with no
/// output axes and no reduction worth spreading (it runs on one thread).
pub fn candidates(k: &Kernel, st: &Stage) -> Vec<DefaultSchedule> {
    let mut out = Vec::new();
    // What the stage reads once its inlined producers are substituted.
    let mut value = st.value.clone();
    for _ in 0..k.stages.len() {
        let before = value.clone();
        for p in k.stages.iter().filter(|p| p.is_inlined()) {
            value = p.inline_into(&value);
        }
        if value == before {
            break;
        }
    }
    let vector = !st.axes.is_empty() && unit_stride(&value, VarId(st.axes.len() as u32 - 1));
    let names: Vec<&str> = st.axes.iter().map(|a| a.name.as_str()).collect();
    if st.scatter.is_some() {
        out.extend(scatter(k, st, &names));
    } else if let Some(m) = matmul(k, st, &names) {
        out.push(m);
    } else if let Some(r) = row_reduction(st, &names) {
        out.push(r);
    }
    let reduces = st.reduce.is_some();
    out.extend(elementwise(st, &names, reduces, vector));
    out.extend(flat(&names, 256));
    out.dedup();
    out
}

/// The steps that fuse all `names` (leading ones first) into one loop; its name.
fn fuse_all(names: &[&str]) -> (Vec<String>, String) {
    let mut steps = Vec::new();
    let mut cur = names[0].to_string();
    for n in &names[1..] {
        let f = format!("{cur}_{n}");
        steps.push(format!("{f} = fuse({cur}, {n})"));
        cur = f;
    }
    (steps, cur)
}

/// Every output point on its own thread: fused, split by `threads`.
fn flat(names: &[&str], threads: i64) -> Option<DefaultSchedule> {
    if names.is_empty() {
        return None;
    }
    let (mut steps, f) = fuse_all(names);
    steps.extend([
        format!("{f}_b, {f}_t = split({f}, {threads})"),
        format!("bind({f}_b, blockIdx.x)"),
        format!("bind({f}_t, threadIdx.x)"),
    ]);
    Some(sched("flat", &steps))
}

/// An element-wise map (a reduction, if any, runs serially per thread):
/// rows of 256 columns per work-group of 64 × 4 threads, 4 consecutive
/// columns per thread as one vector access (bias2d_vec); a 1-D stage as
/// saxpy does. A matrix product gets 16 × 16 output tiles (matmul.toml).
fn elementwise(st: &Stage, names: &[&str], reduces: bool, vector: bool) -> Vec<DefaultSchedule> {
    let Some((&last, lead)) = names.split_last() else {
        return Vec::new();
    };
    let narrow = st
        .axes
        .last()
        .and_then(|a| a.extent.as_const())
        .is_some_and(|c| c < 64);
    if lead.is_empty() || narrow {
        if reduces || !vector || !lead.is_empty() {
            return flat(names, 256).into_iter().collect();
        }
        let (mut steps, f) = fuse_all(names);
        steps.extend([
            format!("{f}_b, {f}_t = split({f}, 1024)"),
            format!("{f}_x, {f}_v = split({f}_t, 4)"),
            format!("bind({f}_b, blockIdx.x)"),
            format!("bind({f}_x, threadIdx.x)"),
            format!("vectorize({f}_v)"),
        ]);
        return vec![sched("elementwise-1d", &steps)];
    }
    let (mut steps, r) = if lead.len() == 1 {
        (Vec::new(), lead[0].to_string())
    } else {
        fuse_all(lead)
    };
    let c = last;
    if reduces || !vector {
        // A serial reduction per output, or a transpose-like access (16 x
        // 16 tiles keep both sides in short runs).
        steps.extend([
            format!("{r}_o, {c}_o, {r}_i, {c}_i = tile({r}, {c}, 16, 16)"),
            format!("bind({r}_o, blockIdx.x)"),
            format!("bind({c}_o, blockIdx.y)"),
            format!("bind({r}_i, threadIdx.y)"),
            format!("bind({c}_i, threadIdx.x)"),
        ]);
        let rule = if reduces {
            "tiles-16x16"
        } else {
            "elementwise-tiles"
        };
        return vec![sched(rule, &steps)];
    }
    steps.extend([
        format!("{r}_o, {c}_o, {r}_i, {c}_i = tile({r}, {c}, 4, 256)"),
        format!("{c}_t, {c}_v = split({c}_i, 4)"),
        format!("bind({r}_o, blockIdx.x)"),
        format!("bind({c}_o, blockIdx.y)"),
        format!("bind({r}_i, threadIdx.y)"),
        format!("bind({c}_t, threadIdx.x)"),
        format!("vectorize({c}_v)"),
    ]);
    vec![sched("elementwise-2d", &steps)]
}

/// A reduction along contiguous memory (its axis is the last subscript of
/// a tensor it reads) over a long row: one work-group of 512 threads per
/// output point, each thread 4 elements 512 apart per step, combined in
/// the work-group (argmax.toml). Short constant rows stay serial.
fn row_reduction(st: &Stage, names: &[&str]) -> Option<DefaultSchedule> {
    let r = st.reduce.as_ref()?;
    let [axis] = r.axes.as_slice() else {
        return None;
    };
    if axis.extent.as_const().is_some_and(|c| c < 256) {
        return None;
    }
    let kv = VarId(st.axes.len() as u32);
    if !along_rows(&r.body, kv) {
        return None;
    }
    let k = axis.name.as_str();
    let mut steps = Vec::new();
    let block = match names {
        [] => None,
        [one] => Some(one.to_string()),
        _ => {
            let (s, f) = fuse_all(names);
            steps.extend(s);
            Some(f)
        }
    };
    steps.extend([
        format!("{k}_o, {k}_i = split({k}, 2048)"),
        format!("{k}_v, {k}_t = split({k}_i, 512)"),
    ]);
    if let Some(b) = block {
        steps.push(format!("bind({b}, blockIdx.x)"));
    }
    steps.extend([
        format!("bind({k}_t, threadIdx.x)"),
        format!("unroll({k}_v)"),
    ]);
    Some(sched("row-reduction", &steps))
}

/// A matrix product `C[i, j] = sum(A[i, k] * B[k, j], k)` (casts and an
/// epilogue allowed): 128 x 128 tiles of C per work-group of 16 x 16
/// threads, 8 x 8 outputs per thread in registers, 16-wide k tiles of A and
/// B staged in LDS (matmul_sgemm.toml, 65 % of cuBLAS SGEMM on the H100).
fn matmul(k: &Kernel, st: &Stage, names: &[&str]) -> Option<DefaultSchedule> {
    let r = st.reduce.as_ref()?;
    let ([i, j], [axis]) = (names, r.axes.as_slice()) else {
        return None;
    };
    if r.op != crate::kernel::ReduceOp::Sum {
        return None;
    }
    let (vi, vj, vk) = (VarId(0), VarId(1), VarId(2));
    let mut loads: Vec<(crate::kernel::TensorId, Vec<Index>)> = Vec::new();
    r.body
        .visit_loads(&mut |t, ix| loads.push((t, ix.to_vec())));
    let uses = |ix: &[Index], v: VarId| ix.iter().any(|x| x.uses_var(v));
    let [(ta, a), (tb, b)] = loads.as_slice() else {
        return None;
    };
    let (ta, tb) = match (
        uses(a, vi) && uses(a, vk) && !uses(a, vj),
        uses(b, vk) && uses(b, vj) && !uses(b, vi),
    ) {
        (true, true) => (ta, tb),
        _ if uses(b, vi) && uses(b, vk) && !uses(b, vj) && uses(a, vk) && uses(a, vj) => (tb, ta),
        _ => return None,
    };
    if ta == tb {
        return None;
    }
    let (an, bn) = (&k.tensor(*ta).name, &k.tensor(*tb).name);
    let kk = axis.name.as_str();
    let steps = [
        format!("{i}_o, {j}_o, {i}_i, {j}_i = tile({i}, {j}, 128, 128)"),
        format!("{i}_t, {j}_t, {i}_r, {j}_r = tile({i}_i, {j}_i, 8, 8)"),
        format!("{kk}_o, {kk}_i = split({kk}, 16)"),
        format!("reorder({kk}_o, {kk}_i, {i}_r, {j}_r)"),
        format!("bind({i}_o, blockIdx.y)"),
        format!("bind({j}_o, blockIdx.x)"),
        format!("bind({i}_t, threadIdx.y)"),
        format!("bind({j}_t, threadIdx.x)"),
        format!("unroll({kk}_i)"),
        format!("unroll({i}_r)"),
        format!("unroll({j}_r)"),
        format!("{an}_tile = cache_read({an}, shared, {kk}_o, pad=1)"),
        format!("{bn}_tile = cache_read({bn}, shared, {kk}_o)"),
    ];
    Some(sched("matmul-tiles", &steps))
}

/// Whether `e` reads along rows in `v`: some tensor has `v` in its last
/// subscript, and none has it elsewhere (a matrix product's `B[k, j]`
/// walks columns).
fn along_rows(e: &Expr, v: VarId) -> bool {
    let (mut last, mut elsewhere) = (false, false);
    e.visit_loads(&mut |_, ix| {
        if let Some((l, lead)) = ix.split_last() {
            last |= l.uses_var(v);
            elsewhere |= lead.iter().any(|i| i.uses_var(v));
        }
    });
    last && !elsewhere
}

/// Whether every read of `e` that moves with `v` moves along its last
/// dimension with stride 1, as `vectorize` requires.
fn unit_stride(e: &Expr, v: VarId) -> bool {
    let mut ok = true;
    e.visit_loads(&mut |_, ix| {
        for (d, x) in ix.iter().enumerate() {
            if !x.uses_var(v) {
                continue;
            }
            let (terms, _) = x.affine();
            ok &= d + 1 == ix.len()
                && terms
                    .iter()
                    .all(|(t, c)| !t.uses_var(v) || (*t == Index::Var(v) && *c == 1));
        }
    });
    ok
}

/// A scatter: 256 threads per work-group over the fused `over` axes; into
/// a small constant table, 16384 updates per work-group counted in LDS
/// first (histogram.toml).
fn scatter(k: &Kernel, st: &Stage, names: &[&str]) -> Vec<DefaultSchedule> {
    if names.is_empty() {
        return Vec::new();
    }
    let out = k.tensor(st.output);
    let table: Option<i64> = out
        .shape
        .iter()
        .map(|e| e.as_const())
        .try_fold(1i64, |a, b| b.and_then(|b| a.checked_mul(b)));
    let (mut steps, f) = fuse_all(names);
    let mut v = Vec::new();
    if table.is_some_and(|n| n <= PRIVATE_TABLE) {
        let mut p = steps.clone();
        p.extend([
            format!("{f}_b, {f}_r = split({f}, 16384)"),
            format!("{f}_e, {f}_t = split({f}_r, 256)"),
            format!("bind({f}_b, blockIdx.x)"),
            format!("bind({f}_t, threadIdx.x)"),
            format!("privatize({})", out.name),
        ]);
        v.push(sched("scatter-privatized", &p));
    }
    steps.extend([
        format!("{f}_b, {f}_t = split({f}, 256)"),
        format!("bind({f}_b, blockIdx.x)"),
        format!("bind({f}_t, threadIdx.x)"),
    ]);
    v.push(sched("scatter", &steps));
    v
}

/// Row-normalisation chains (softmax, layernorm): reductions along rows
/// (`M[r]`, `S[r]`, default-scheduled) whose only readers are a final
/// two-axis stage over the same rows (`Y[r, j]`) and each other, always at
/// that stage's row. The row stays on chip: each reduction is computed at
/// the final stage's row loop by 256 threads, and the final stage runs one
/// work-group per row (softmax.toml). Returns the stages to reschedule, by
/// index, with their schedules.
pub fn row_chains(k: &Kernel) -> Vec<(usize, DefaultSchedule)> {
    let mut out = Vec::new();
    for (yi, y) in k.stages.iter().enumerate() {
        let ok_final = y
            .default
            .as_ref()
            .is_some_and(|d| d.rule.starts_with("elementwise"))
            && y.axes.len() == 2
            && y.reduce.is_none()
            && y.scatter.is_none();
        if !ok_final {
            continue;
        }
        let rows = &y.axes[0];
        let members: Vec<usize> = (0..yi)
            .filter(|&p| {
                let s = &k.stages[p];
                s.default
                    .as_ref()
                    .is_some_and(|d| d.rule == "row-reduction")
                    && s.axes.len() == 1
                    && s.axes[0].extent == rows.extent
            })
            .collect();
        // Every read of a member: by the final stage or another member,
        // at that reader's first axis; and the final stage reads one.
        let reads_ok = |p: usize| {
            let t = k.stages[p].output;
            let mut ok = true;
            let mut by_final = false;
            for (ri, r) in k.stages.iter().enumerate() {
                let exprs = [Some(&r.value), r.reduce.as_ref().map(|x| &x.body)];
                for e in exprs.into_iter().flatten() {
                    e.visit_loads(&mut |tt, ix| {
                        if tt != t {
                            return;
                        }
                        let at_row = ix.len() == 1 && ix[0] == Index::Var(VarId(0));
                        ok &= at_row && (ri == yi || members.contains(&ri));
                        by_final |= ri == yi;
                    });
                }
            }
            ok && (by_final || members.iter().any(|&m| m != p))
        };
        let chain: Vec<usize> = members.iter().copied().filter(|&p| reads_ok(p)).collect();
        if chain.is_empty() || chain.len() != members.len() {
            continue;
        }
        let (r, j) = (rows.name.as_str(), y.axes[1].name.as_str());
        for &p in &chain {
            let s = &k.stages[p];
            let Some(red) = s.reduce.as_ref() else {
                continue;
            };
            let c = red.axes[0].name.as_str();
            out.push((
                p,
                sched(
                    "row-chain",
                    &[
                        format!("compute_at({}, {r})", y.name),
                        format!("{c}_o, {c}_t = split({c}, 256)"),
                        format!("bind({c}_t, threadIdx.x)"),
                    ],
                ),
            ));
        }
        out.push((
            yi,
            sched(
                "row-chain",
                &[
                    format!("bind({r}, blockIdx.x)"),
                    format!("{j}_o, {j}_t = split({j}, 256)"),
                    format!("bind({j}_t, threadIdx.x)"),
                ],
            ),
        ));
    }
    out
}
