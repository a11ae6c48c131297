//! Default schedules: a stage written without `schedule` gets one by rule,
//! in the manner of TVM's DLight. A rule looks at the stage's shape (an
//! element-wise map over rows, a reduction along contiguous rows, a
//! matrix product, a scatter into a small table) and writes the steps of
//! the measured example of that shape (bias2d_vec and saxpy at copy
//! bandwidth, argmax at 94 % of copy, histogram 5× `torch.bincount`,
//! gemm_f16_mma on the tensor cores). Each stage gets a list of
//! candidates, best first, ending with a plain flat grid; the front end
//! keeps the first that applies, so no default is ever an error.
//! `rocmc build --emit schedule` prints the rule and the steps, ready to
//! paste into the file and edit.
//!
//! Every number a rule writes is a *knob* ([`Knob`]): a tune parameter
//! named after the stage (`C_BM`), so `rocmc tune` searches an
//! unscheduled kernel as it does a `[tune]` section, and builds take the
//! tuning database's values.
//!
//! Most rules do not depend on the target (256 threads and 4 elements per
//! thread suit both wave sizes). The matrix-product rule does: with a
//! target whose matrix instructions take the operands' types it writes
//! the `mma` path with that target's fragment shape, tile sizes and
//! pipeline, within its shared memory ([`RuleCx::target`]).

mod conv;
mod elementwise;
mod fuse;
pub(crate) mod grid;
mod matmul;
mod rows;
mod scatter;

pub use crate::plan::{DefaultSchedule, Knob};
pub use fuse::inlinable;
pub use rows::row_chains;

use crate::index::{Index, VarId};
use crate::kernel::{Expr, Kernel, Stage};
use rocmc_target::Target;

/// What the rules may consult besides the kernel.
#[derive(Clone, Copy, Debug)]
pub struct RuleCx<'a> {
    /// The processor the schedule is for (on the CPU with `--emulate`, the
    /// emulated one); `None` writes target-independent schedules.
    pub target: Option<&'a Target>,
    /// Shared memory a work-group may use, if less than the target's (the
    /// CPU that emulates it has its own limit).
    pub shared_limit: Option<u32>,
    /// Knob values given by the tuner, `--tune` or the tuning database.
    pub given: &'a [(String, i64)],
    /// The templates' rules ([`crate::templates`]), handed down as the
    /// front end's other hooks are: a template's candidates for a stage it
    /// marks, `None` for the others.
    pub(crate) templates: TemplateRules,
}

/// See [`RuleCx::templates`].
pub(crate) type TemplateRules = fn(&Kernel, &Stage, &RuleCx) -> Option<Vec<DefaultSchedule>>;

impl RuleCx<'_> {
    /// Shared memory one work-group may use.
    pub(crate) fn shared_bytes(&self) -> u32 {
        let t = self.target.map_or(u32::MAX, Target::lds_limit);
        t.min(self.shared_limit.unwrap_or(u32::MAX))
    }
}

/// The knobs one candidate reads, by stage.
pub(crate) struct Knobs<'a> {
    stage: String,
    given: &'a [(String, i64)],
    used: Vec<Knob>,
    constraints: Vec<String>,
}

impl<'a> Knobs<'a> {
    pub(crate) fn new(stage: &str, given: &'a [(String, i64)]) -> Knobs<'a> {
        Knobs {
            stage: stage.to_string(),
            given,
            used: Vec::new(),
            constraints: Vec::new(),
        }
    }

    /// A constraint between knobs, `{NAME}` standing for knob NAME.
    fn require(&mut self, text: &str) {
        let mut t = text.to_string();
        for k in &self.used {
            let short = &k.name[self.stage.len() + 1..];
            t = t.replace(&format!("{{{short}}}"), &k.name);
        }
        self.constraints.push(t);
    }

    /// The value of knob `name`: given, else `default`. A value that is
    /// not a candidate is kept here and refused by the front end, which
    /// names the candidates.
    pub(crate) fn get(
        &mut self,
        name: &str,
        values: &[i64],
        default: i64,
        doc: &'static str,
    ) -> i64 {
        let full = format!("{}_{name}", self.stage);
        let value = self
            .given
            .iter()
            .find(|(n, _)| *n == full)
            .map_or(default, |g| g.1);
        let mut values = values.to_vec();
        if !values.contains(&default) {
            values.push(default);
        }
        values.sort_unstable();
        values.dedup();
        if let Some(k) = self.used.iter_mut().find(|k| k.name == full) {
            k.value = value;
        } else {
            self.used.push(Knob {
                name: full,
                values,
                default,
                value,
                doc,
            });
        }
        value
    }

    /// Whether a given value is not a candidate: the rule writes its
    /// schedule anyway, so that the front end names this rule's
    /// candidates rather than falling back to another rule.
    fn bad(&self) -> bool {
        self.used.iter().any(Knob::bad)
    }

    pub(crate) fn done(self, rule: &'static str, steps: Vec<String>) -> DefaultSchedule {
        DefaultSchedule {
            rule,
            steps,
            knobs: self.used,
            constraints: self.constraints,
            by_target: false,
            version_at: None,
        }
    }
}

impl Knob {
    /// A value given that is not among the candidates.
    pub fn bad(&self) -> bool {
        !self.values.contains(&self.value)
    }
}

impl DefaultSchedule {
    /// Whether a knob was given a value that is not a candidate.
    pub fn bad_knob(&self) -> bool {
        self.knobs.iter().any(Knob::bad)
    }
}

/// Output tables of at most this many elements are counted in LDS first
/// (`privatize`) by the scatter rule.
const PRIVATE_TABLE: i64 = 4096;

/// `e` as the stage reads it once inlined producers are substituted
/// (producers of producers too).
pub(crate) fn inlined(k: &Kernel, e: &Expr) -> Expr {
    let mut value = e.clone();
    for _ in 0..k.stages.len() {
        let before = value.clone();
        for p in k.stages.iter().filter(|p| p.is_inlined()) {
            value = p.inline_into(&value);
        }
        if value == before {
            break;
        }
    }
    value
}

/// Candidate schedules for `st`, best first. Empty for a stage with no
/// output axes and no reduction worth spreading (it runs on one thread).
pub fn candidates(k: &Kernel, st: &Stage, cx: &RuleCx) -> Vec<DefaultSchedule> {
    let mut out = Vec::new();
    let value = inlined(k, &st.value);
    let vector = !st.axes.is_empty() && unit_stride(&value, VarId(st.axes.len() as u32 - 1));
    let names: Vec<&str> = st.axes.iter().map(|a| a.name.as_str()).collect();
    // A template's stage takes its template's rule.
    if let Some(own) = (cx.templates)(k, st, cx) {
        return own;
    }
    if st.scatter().is_some() {
        out.extend(scatter::scatter(k, st, &names, cx));
    } else if let Some(m) = matmul::Matmul::find(k, st) {
        out.extend(m.schedules(k, st, cx));
    } else if let Some(c) = conv::Conv::find(k, st) {
        out.extend(c.schedules(k, st, cx));
    } else {
        out.extend(grid::grid_reduction(st, &names, cx));
        if let Some(r) = elementwise::row_reduction(st, &names, cx) {
            out.push(r);
        } else if let Some(c) = elementwise::column_reduction(st, &names, cx) {
            out.push(c);
        }
    }
    let reduces = st.reduce().is_some();
    if !reduces && !vector && st.scatter().is_none() {
        out.extend(elementwise::transpose(k, st, &value, &names, cx));
    }
    out.extend(elementwise::elementwise(
        k,
        st,
        &value,
        &names,
        (reduces, vector),
        cx,
    ));
    out.extend(flat(&st.name, &names, cx));
    out.dedup();
    // Values given that one rule takes: the rules they do not fit drop
    // out. Values no rule takes: the first rule that reads them alone,
    // so that the front end names its candidates (see `Knobs::bad`).
    if let Some(p) = out.iter().position(DefaultSchedule::bad_knob) {
        let claimed = out.iter().any(|c| {
            !c.bad_knob()
                && c.knobs
                    .iter()
                    .any(|k| cx.given.iter().any(|g| g.0 == k.name))
        });
        if !claimed {
            return vec![out.swap_remove(p)];
        }
        out.retain(|c| !c.bad_knob());
    }
    out
}

/// The steps that fuse all `names` (leading ones first) into one loop; its
/// name. One name needs no step.
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

/// The index range of `axes` fused: the product of their extents' bounds
/// under `[kernel] max` (a size without one counts as 2^31 - 1), at most
/// the 32-bit counter `fuse` keeps it within at launch.
fn fused_range<'a>(k: &Kernel, axes: impl IntoIterator<Item = &'a crate::kernel::Axis>) -> u128 {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let product = axes.into_iter().fold(1u128, |p, a| {
        p.saturating_mul(a.extent.max_value(&size_max, &[]))
    });
    product.min(u128::from(crate::schedule::COUNTER_MAX))
}

/// Work-groups along blockIdx.z the schedule may count on: the target's
/// (NVIDIA's 65,535; AMD's counts work items in 32 bits, so 2^31 - 1 for
/// work-groups up to two threads deep in z), NVIDIA's where the rule
/// writes for no target.
fn grid_z(cx: &RuleCx) -> u64 {
    let nvidia = rocmc_target::nvptx::MAX_GRID[2];
    cx.target.map_or(nvidia, |t| t.max_grid(2, 2))
}

/// [`fuse_all`], or nothing where there are no names.
fn fuse_any(names: &[&str]) -> (Vec<String>, Option<String>) {
    if names.is_empty() {
        return (Vec::new(), None);
    }
    let (steps, f) = fuse_all(names);
    (steps, Some(f))
}

/// The types of `a`, of `b` and of the sum when `st` sums a plain
/// product of the two (casts allowed) and a matrix instruction could take
/// them, as `mma` needs.
fn product_types(
    k: &Kernel,
    st: &Stage,
    a: crate::kernel::TensorId,
    b: crate::kernel::TensorId,
) -> Option<[crate::DType; 3]> {
    let t = factor_types(k, st, a, b)?;
    t.iter()
        .all(|d| crate::mtype::mtype(*d).is_some())
        .then_some(t)
}

/// The types of a product's operands and sum, whatever a matrix
/// instruction takes ([`product_types`] asks that too).
fn factor_types(
    k: &Kernel,
    st: &Stage,
    a: crate::kernel::TensorId,
    b: crate::kernel::TensorId,
) -> Option<[crate::DType; 3]> {
    let r = st.reduce()?;
    matches!(
        r.body.kind,
        crate::kernel::ExprKind::Binary(crate::kernel::BinOp::Mul, ..)
    )
    .then(|| [k.tensor(a).dtype, k.tensor(b).dtype, r.body.dtype])
}

/// The target's matrix instruction for operands of types `a` and `b`
/// summed in `acc`: NVIDIA's m16n8 (A fragments reused over twice the
/// columns), AMD's 16 × 16, the longest k of that shape. `None` where the
/// target has none for the types, or reads 8-bit floats of the other
/// encoding.
fn matrix_instr(
    target: &rocmc_target::Target,
    [a, b, acc]: [crate::DType; 3],
) -> Option<(crate::mtype::MatrixUnit, rocmc_target::matrix::MatrixInstr)> {
    use crate::mtype::{f8_types, mtype, MatrixUnit};
    let unit = MatrixUnit::of(target)?;
    let f8 = f8_types(&unit);
    if [a, b].iter().any(|t| t.is_f8() && !f8.contains(t)) {
        return None;
    }
    let types = (mtype(a), mtype(b), mtype(acc));
    let typed: Vec<rocmc_target::matrix::MatrixInstr> = unit
        .instructions()
        .into_iter()
        .filter(|i| types == (Some(i.a), Some(i.b), Some(i.acc)))
        .copied()
        .collect();
    let nvidia = typed.first()?.family == rocmc_target::matrix::Family::MmaSync;
    let want_n = if nvidia { 8 } else { 16 };
    let instr = typed
        .iter()
        .filter(|i| i.m == 16 && i.n == want_n)
        .max_by_key(|i| i.k)
        .or_else(|| typed.first())
        .copied()?;
    Some((unit, instr))
}

/// Threads per work-group a rule may choose from.
pub(crate) const THREADS: &[i64] = &[64, 128, 256, 512, 1024];

/// Every output point on its own thread: fused, split by 256 threads.
pub(crate) fn flat(stage: &str, names: &[&str], cx: &RuleCx) -> Option<DefaultSchedule> {
    if names.is_empty() {
        return None;
    }
    let mut kn = Knobs::new(stage, cx.given);
    let threads = kn.get("THREADS", THREADS, 256, "threads per work-group");
    let (mut steps, f) = fuse_all(names);
    steps.extend([
        format!("{f}_b, {f}_t = split({f}, {threads})"),
        format!("bind({f}_b, blockIdx.x)"),
        format!("bind({f}_t, threadIdx.x)"),
    ]);
    Some(kn.done("flat", steps))
}

/// Whether `e` reads along rows in `v`: some tensor has `v` in its last
/// subscript, and none has it elsewhere (a matrix product's `B[k, j]`
/// walks columns).
fn along_rows(es: &[&Expr], v: VarId) -> bool {
    let (mut last, mut elsewhere) = (false, false);
    for e in es {
        e.visit_loads(&mut |_, ix| {
            if let Some((l, lead)) = ix.split_last() {
                last |= l.uses_var(v);
                elsewhere |= lead.iter().any(|i| i.uses_var(v));
            }
        });
    }
    last && !elsewhere
}

/// What a stage reduces: its reduction's body, or each element of a tuple.
fn reduced(st: &crate::kernel::Stage) -> Vec<&Expr> {
    match (st.tuple(), st.reduce()) {
        (Some(t), _) => t.elems.iter().collect(),
        (None, Some(r)) => vec![&r.body],
        (None, None) => Vec::new(),
    }
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
