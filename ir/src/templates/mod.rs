//! Templates: compound constructs defined by ordinary stages of the
//! general language, each with a fast path beside that definition.
//!
//! A template's meaning is a stage the general language can already write
//! (a scan is the triangular reduction `sum(X[r, k], k)` over `k < c + 1`),
//! so the interpreter, every schedule and every back end give it that
//! meaning, and it is the fallback wherever the fast path refuses. What a
//! template adds, each in its own folder here:
//! - the **recogniser** ([`Template::recognise`]) that finds the template
//!   in a stage written without naming it and marks the stage as it —
//!   never changing what the stage computes, only which rule and steps
//!   apply to it;
//! - the kernel language's spelling of it (`cumsum(x, c)`), which builds
//!   the same marked stage;
//! - its schedule step, default rule and fast lowering.
//!
//! [`TEMPLATES`] is the registry. The phases name no template: the
//! crate's entry points ([`crate::parse_kernel`], [`crate::lower`]) give
//! them the hooks made from it ([`FRONT`]), so a template's folder uses
//! the phases as any code above them does.

use crate::diag::Diagnostic;
use crate::front;
use crate::index::VarId;
use crate::kernel::{Expr, Kernel, Stage, StageId};
use crate::lower::{self, Given, GpuKernel, Lowering};

pub mod attention;
pub mod scan;
pub mod topk;

/// A template: its name and what it adds to each phase.
pub struct Template {
    /// The construct's name, as docs and `--explain` output call it, and
    /// the call that is a stage's whole value where it has a stage form.
    pub name: &'static str,
    /// Marks `stage` as this template where its reduction is the
    /// template's definition written out; `true` where it did. The stage
    /// computes exactly what it did before.
    pub recognise: fn(&Kernel, &mut Stage) -> bool,
    /// Makes the template's definitions written out over several stages
    /// the template (see [`front::hooks::Templates::rewrite`]).
    pub rewrite: fn(&mut Kernel) -> Vec<usize>,
    /// The function names its spellings use.
    pub spellings: &'static [&'static str],
    /// Its spelling inside an expression, which writes the definition out
    /// for the recogniser to mark.
    pub(crate) call: front::hooks::Call,
    /// Its spelling as a stage's whole value, `name(...)`.
    pub(crate) stage: Option<front::hooks::StageForm>,
    /// Its default rule: the candidates for a stage it marks, best first.
    pub(crate) rule: crate::schedule::default::TemplateRules,
    /// Its fast lowering (see [`lower::Templates::build`]).
    pub(crate) lower: fn(&mut Lowering) -> Option<Result<(), Diagnostic>>,
    /// The kernels its stage launches before its own.
    pub(crate) before: fn(&Kernel, StageId, Given) -> Result<Vec<GpuKernel>, Diagnostic>,
}

/// Every template, in the order the recognisers are tried.
pub const TEMPLATES: [Template; 3] = [
    Template {
        name: "scan",
        recognise: scan::recognise,
        rewrite: |_| Vec::new(),
        spellings: &["cumsum", "cumprod", "cummax", "cummin"],
        call: scan::front::call,
        stage: None,
        rule: scan::rule::rule,
        lower: scan::lower::lowering,
        before: scan::lower::split_parts,
    },
    Template {
        name: "topk",
        recognise: topk::recognise,
        rewrite: |_| Vec::new(),
        spellings: &["topk"],
        call: topk::front::in_expression,
        stage: Some(topk::front::stage),
        rule: topk::rule::rule,
        lower: topk::lower::lowering,
        before: |_, _, _| Ok(Vec::new()),
    },
    Template {
        name: "attention",
        recognise: attention::recognise,
        rewrite: attention::written::rewrite,
        spellings: &["attention"],
        call: |_, _, _, _| None,
        stage: Some(attention::front::stage),
        rule: attention::rule::rule,
        lower: attention::lower::lowering,
        before: |_, _, _| Ok(Vec::new()),
    },
];

/// What the front end gets from [`TEMPLATES`].
pub(crate) static FRONT: front::Templates = front::Templates {
    call,
    stage: |name| TEMPLATES.iter().find(|t| t.name == name)?.stage,
    names: || {
        TEMPLATES
            .iter()
            .flat_map(|t| t.spellings)
            .copied()
            .collect()
    },
    recognise,
    rules: |k, st, cx| TEMPLATES.iter().find_map(|t| (t.rule)(k, st, cx)),
    rewrite: |k| TEMPLATES.iter().flat_map(|t| (t.rewrite)(k)).collect(),
};

/// What lowering gets from [`TEMPLATES`].
pub(crate) static LOWER: lower::Templates = lower::Templates {
    build: |l| TEMPLATES.iter().find_map(|t| (t.lower)(l)),
    before,
};

/// The first template whose spelling `name` is: its call's value.
fn call(
    cx: &mut front::Cx,
    k: &Kernel,
    axes: &[(String, VarId)],
    site: front::hooks::CallSite,
) -> Option<Option<Expr>> {
    TEMPLATES.iter().find_map(|t| (t.call)(cx, k, axes, site))
}

/// Every template's kernels launched before stage `sid`'s own.
fn before(k: &Kernel, sid: StageId, given: Given) -> Result<Vec<GpuKernel>, Diagnostic> {
    let mut out = Vec::new();
    for t in &TEMPLATES {
        out.extend((t.before)(k, sid, given)?);
    }
    Ok(out)
}

/// Marks `stage` as the first template that recognises it; its name.
pub fn recognise(k: &Kernel, stage: &mut Stage) -> Option<&'static str> {
    TEMPLATES
        .iter()
        .find(|t| (t.recognise)(k, stage))
        .map(|t| t.name)
}
