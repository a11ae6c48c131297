//! The kernel.toml front end: TOML → checked [`Kernel`].
//!
//! Parsing and validation happen in one pass over the document so every
//! error carries the span of the text it is about. The format is documented
//! in docs/kernel-format.md.
//!
//! This file holds the document's types, the entry points and the checking
//! context [`Cx`]; the rest is split by what it reads: [`decls`] (`[kernel]`,
//! `[tune]`, sizes and tensors), [`stage`] (one `[[stage]]`), [`expr`],
//! [`call`] and [`reduce`] (the expression language), [`defaults`] (the
//! default schedules of unscheduled stages), and one module per construct
//! with its own syntax ([`scatter`], [`tuple`], [`bits`]). Templates
//! ([`crate::templates`]) bring their own spellings through [`Templates`].

pub(crate) mod bits;
mod scatter;
pub(crate) mod tuple;

mod call;
mod decls;
mod defaults;
mod expr;
pub(crate) mod hooks;
mod reduce;
mod stage;

pub(crate) use hooks::Templates;

use crate::diag::{Diagnostic, KernelError, Span};
pub use crate::dtype::round_to;
use crate::dtype::DType;
use crate::index::VarId;
use crate::kernel::*;
use crate::syntax::{Ast, AstKind};
use indexmap::IndexMap;
use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    /// Not `Spanned`, like `tune`: `[kernel.max]` creates it implicitly.
    kernel: KernelDecl,
    #[serde(default)]
    inputs: IndexMap<Spanned<String>, Spanned<InputDecl>>,
    #[serde(default)]
    params: IndexMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    stage: Vec<Spanned<StageDecl>>,
    /// Not `Spanned`: a file may create the table implicitly with
    /// `[tune.params]`, and toml has no span for an implicit table.
    tune: Option<TuneDecl>,
}

/// `[tune]`: see [`crate::tune`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TuneDecl {
    #[serde(default)]
    params: IndexMap<Spanned<String>, Spanned<TuneParamDecl>>,
    #[serde(default)]
    constraints: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TuneParamDecl {
    values: Option<Vec<Spanned<i64>>>,
    pow2: Option<Spanned<Vec<i64>>>,
    range: Option<Spanned<Vec<i64>>>,
    step: Option<Spanned<i64>>,
    default: Spanned<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelDecl {
    name: Spanned<String>,
    #[serde(default)]
    sizes: Vec<Spanned<String>>,
    /// Upper bounds of sizes: `max = { n = 1048576 }`.
    #[serde(default)]
    max: IndexMap<Spanned<String>, Spanned<i64>>,
    /// Divisibility facts: `divisible = { cols = 4 }`.
    #[serde(default)]
    divisible: IndexMap<Spanned<String>, Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputDecl {
    dtype: Spanned<String>,
    shape: Spanned<Vec<Spanned<Extent>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Extent {
    Int(i64),
    Expr(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StageDecl {
    pub(crate) compute: Spanned<String>,
    /// Reduction axes and their extents: `reduce = { k = "K" }`.
    #[serde(default)]
    pub(crate) reduce: IndexMap<Spanned<String>, Spanned<Extent>>,
    /// A scatter's axes and their extents: `over = { i = "n" }`.
    #[serde(default)]
    pub(crate) over: IndexMap<Spanned<String>, Spanned<Extent>>,
    pub(crate) shape: Option<Spanned<Vec<Spanned<Extent>>>>,
    pub(crate) dtype: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) schedule: Vec<Spanned<String>>,
    /// `output = true`: the stage's tensor is a result of the kernel,
    /// stored and compared even where later stages read it.
    pub(crate) output: Option<Spanned<bool>>,
    /// A tuple reduction's start, one formula per computed tensor.
    #[serde(default)]
    pub(crate) init: IndexMap<Spanned<String>, Spanned<Formula>>,
    /// A tuple reduction's combiner, one formula per computed tensor over
    /// `a.X` and `b.X`.
    #[serde(default)]
    pub(crate) combine: IndexMap<Spanned<String>, Spanned<Formula>>,
}

/// A value written as a TOML number or as an expression string.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Formula {
    Int(i64),
    Float(f64),
    Text(String),
}

/// The target default schedules are written for, and the shared memory
/// they may use (see [`schedule::default::RuleCx`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RulesFor<'a> {
    pub target: Option<&'a rocmc_target::Target>,
    pub shared_limit: Option<u32>,
    /// Rules not to use: ones whose schedule did not lower for this
    /// kernel, so that a stage takes the next rule that fits.
    pub skip: &'a [&'static str],
    /// Sizes taken at most these values, below their `[kernel] max`: a
    /// version of the kernel for small sizes, which the compiler places
    /// beside the general one ([`crate::plan::DefaultSchedule::version_at`]).
    pub bounds: &'a [(&'a str, u64)],
}

/// Parses and checks a kernel file (`file` names it in diagnostics) with
/// `templates`' spellings and recognisers: [`crate::parse_kernel_for`]
/// and the other entry points of the crate, which give it every template.
/// `tune` overrides tune parameters' defaults; `defaults` is the level of
/// default schedules (see [`crate::parse_kernel_defaults`]); `rules` the
/// target they are written for.
pub(crate) fn parse_kernel_for(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
    rules: RulesFor,
    templates: &Templates,
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    let t0 = std::time::Instant::now();
    let err = |diagnostics| KernelError {
        file: file.to_string(),
        source: source.to_string(),
        diagnostics,
    };
    let doc: Doc = toml::from_str(source).map_err(|e| {
        let span = e
            .span()
            .map_or(Span::default(), |r| Span::new(r.start, r.end));
        let msg = e.message().trim_end().to_string();
        let mut d = Diagnostic::new(span, msg.clone());
        if msg.contains("missing field `kernel`") {
            d = d.hint("a kernel file starts with `[kernel]`, `name = \"...\"` and `sizes = [...]`; see docs/kernel-format.md");
        }
        err(vec![d])
    })?;
    let t1 = std::time::Instant::now();
    let mut cx = Cx {
        src: source,
        diags: Vec::new(),
        red: None,
        poisoned: Vec::new(),
        given: tune,
        config: Vec::new(),
        defaults,
        rules,
        knobs_given: Vec::new(),
        operands: Vec::new(),
        templates,
    };
    let kernel = cx.kernel(doc);
    match kernel {
        Some(k) if cx.diags.is_empty() => Ok((k, [t1 - t0, t1.elapsed()])),
        _ => Err(err(cx.diags)),
    }
}

/// The reduction of the stage being parsed.
pub(crate) struct RedCx {
    /// Reduction axes as variables, after the output axes.
    pub vars: Vec<(String, VarId)>,
    /// The reduction once parsed: operation and body.
    pub result: Option<(ReduceOp, Expr)>,
    /// Parsing the body now (reductions do not nest).
    pub inside: bool,
    /// The reduction's axes where a template call declared them (a scan's
    /// running position), not the stage's `reduce`.
    pub axes: Option<Vec<Axis>>,
}

/// The checking context: the source, the errors so far, and what the
/// stage being checked has parsed.
pub(crate) struct Cx<'s> {
    src: &'s str,
    diags: Vec<Diagnostic>,
    pub(crate) red: Option<RedCx>,
    /// Names whose declaration was refused: their uses are not reported
    /// again, so one mistake gives one error.
    poisoned: Vec<String>,
    /// Tune parameter values asked for (the rest take their defaults).
    given: &'s [(String, i64)],
    /// Stages without a schedule get a rule's (see [`schedule::default`]):
    /// 0 none, 1 each stage's own, 2 also fused into row chains.
    defaults: u8,
    /// The configuration schedule steps are parsed with.
    config: crate::tune::Config,
    /// What default schedules are written for.
    rules: RulesFor<'s>,
    /// Values given for names that `[tune]` does not declare: knobs of
    /// default schedules (checked once the stages are parsed).
    knobs_given: Vec<(String, i64)>,
    /// Inside a tuple reduction's combiner: its tensors and dtypes, which
    /// `a.X` and `b.X` name.
    operands: Vec<(String, DType)>,
    /// What templates add to the language.
    templates: &'s Templates,
}

/// Whether an expression reads a tensor element (in a subscript, that
/// makes the access a gather).
fn reads_tensor(a: &Ast) -> bool {
    match &a.kind {
        AstKind::Access { .. } => true,
        AstKind::Int(_) | AstKind::Float(_) | AstKind::Name(_) => false,
        AstKind::Call { args, .. } => args.iter().any(|x| reads_tensor(&x.value)),
        AstKind::Unary(_, x) => reads_tensor(x),
        AstKind::Binary(_, x, y) => reads_tensor(x) || reads_tensor(y),
    }
}

/// A stage's output axes: the names on the left of `=`, with the shape's
/// extents. Here, not in `stage`, because tuple, top-k and attention
/// stages, which `stage` dispatches to, use it too.
pub(crate) fn output_axes(
    stmt: &crate::syntax::ComputeStmt,
    shape: &[crate::index::Index],
) -> Vec<Axis> {
    stmt.axes
        .iter()
        .zip(shape)
        .map(|((n, sp), e)| Axis {
            name: n.clone(),
            extent: e.clone(),
            span: *sp,
        })
        .collect()
}

pub(crate) fn span_of<T>(s: &Spanned<T>) -> Span {
    let r = s.span();
    Span::new(r.start, r.end)
}

/// Reserved words: GPU axes and function names may not name tensors, sizes, params or axes.
fn is_reserved(name: &str) -> bool {
    DType::parse(name).is_some()
        || MathFn::ALL.iter().any(|f| f.name() == name)
        || matches!(name, "select" | "min" | "max" | "blockIdx" | "threadIdx")
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl<'s> Cx<'s> {
    pub(crate) fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Byte offset of a TOML string's content, so spans inside it point at
    /// the right characters. Falls back to the string's start when escapes
    /// make the text differ from the source.
    fn content_base(&self, s: &Spanned<String>) -> usize {
        let sp = span_of(s);
        for q in [1usize, 3] {
            let start = sp.start + q;
            if self.src.get(start..start + s.get_ref().len()) == Some(s.get_ref().as_str()) {
                return start;
            }
        }
        sp.start
    }

    fn name(&mut self, s: &Spanned<String>, what: &str, taken: &[(String, Span)]) -> bool {
        let name = s.get_ref();
        let span = span_of(s);
        if !is_ident(name) {
            self.error(
                Diagnostic::new(span, format!("`{name}` is not a valid {what} name")).hint(
                    "names start with a letter or `_` and contain only letters, digits and `_`",
                ),
            );
            return false;
        }
        if is_reserved(name) {
            self.error(Diagnostic::new(
                span,
                format!("`{name}` is reserved and cannot name a {what}"),
            ));
            return false;
        }
        if let Some((_, prev)) = taken.iter().find(|(n, _)| n == name) {
            let (line, _) = crate::diag::line_col(self.src, prev.start);
            self.error(
                Diagnostic::new(span, format!("`{name}` is already declared (line {line})"))
                    .label("declared again here"),
            );
            return false;
        }
        true
    }
}
