//! The kernel.toml front end: TOML → checked [`Kernel`].
//!
//! Parsing and validation happen in one pass over the document so every
//! error carries the span of the text it is about. The format is documented
//! in docs/kernel-format.md.

mod bits;
mod scan;
mod scatter;
mod tuple;
use crate::diag::{Diagnostic, KernelError, Span};
use crate::dtype::DType;
use crate::index::{IOp, Index, SizeId, VarId};
use crate::kernel::*;
use crate::schedule::{self, Step};
use crate::syntax::{self, Arg, Ast, AstKind, BinaryOp, UnaryOp as AUnary};
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
enum Extent {
    Int(i64),
    Expr(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageDecl {
    compute: Spanned<String>,
    /// Reduction axes and their extents: `reduce = { k = "K" }`.
    #[serde(default)]
    reduce: IndexMap<Spanned<String>, Spanned<Extent>>,
    /// A scatter's axes and their extents: `over = { i = "n" }`.
    #[serde(default)]
    over: IndexMap<Spanned<String>, Spanned<Extent>>,
    shape: Option<Spanned<Vec<Spanned<Extent>>>>,
    dtype: Option<Spanned<String>>,
    #[serde(default)]
    schedule: Vec<Spanned<String>>,
    /// A tuple reduction's start, one formula per computed tensor.
    #[serde(default)]
    init: IndexMap<Spanned<String>, Spanned<Formula>>,
    /// A tuple reduction's combiner, one formula per computed tensor over
    /// `a.X` and `b.X`.
    #[serde(default)]
    combine: IndexMap<Spanned<String>, Spanned<Formula>>,
}

/// A value written as a TOML number or as an expression string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Formula {
    Int(i64),
    Float(f64),
    Text(String),
}

/// Parses and checks a kernel file. `file` names it in diagnostics.
pub fn parse_kernel(file: &str, source: &str) -> Result<Kernel, KernelError> {
    parse_kernel_timed(file, source, &[]).map(|(k, _)| k)
}

/// [`parse_kernel`] for one configuration of its tune parameters: the
/// defaults overridden by `tune` (each checked against its candidates and
/// the constraints).
pub fn parse_kernel_with(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
) -> Result<Kernel, KernelError> {
    parse_kernel_timed(file, source, tune).map(|(k, _)| k)
}

/// [`parse_kernel_with`], also returning the time spent parsing TOML and
/// checking it.
pub fn parse_kernel_timed(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    parse_kernel_defaults(file, source, tune, 2)
}

/// [`parse_kernel_timed`] with a level of default schedules for stages
/// the file gives none: 2 (the default) each stage's rule and row chains
/// fused, 1 each stage's rule only, 0 the one-thread nest (the fallbacks
/// where a default schedule fails to lower).
pub fn parse_kernel_defaults(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    parse_kernel_for(file, source, tune, defaults, RulesFor::default())
}

/// The target default schedules are written for, and the shared memory
/// they may use (see [`schedule::default::RuleCx`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RulesFor<'a> {
    pub target: Option<&'a rocmc_target::Target>,
    pub shared_limit: Option<u32>,
}

/// [`parse_kernel_defaults`] with the rules writing default schedules for
/// a target (the matrix-product rule's `mma` path and its numbers).
pub fn parse_kernel_for(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
    rules: RulesFor,
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
        scan: None,
    };
    let kernel = cx.kernel(doc);
    match kernel {
        Some(k) if cx.diags.is_empty() => Ok((k, [t1 - t0, t1.elapsed()])),
        _ => Err(err(cx.diags)),
    }
}

/// The reduction of the stage being parsed.
struct RedCx {
    /// Reduction axes as variables, after the output axes.
    vars: Vec<(String, VarId)>,
    /// The reduction once parsed: operation and body.
    result: Option<(ReduceOp, Expr)>,
    /// Parsing the body now (reductions do not nest).
    inside: bool,
}

struct Cx<'s> {
    src: &'s str,
    diags: Vec<Diagnostic>,
    red: Option<RedCx>,
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
    /// The scan of the stage being parsed, once its value has one.
    scan: Option<scan::ScanCx>,
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

fn span_of<T>(s: &Spanned<T>) -> Span {
    let r = s.span();
    Span::new(r.start, r.end)
}

/// Reserved words: GPU axes and function names may not name tensors, sizes, params or axes.
fn is_reserved(name: &str) -> bool {
    DType::parse(name).is_some()
        || MathFn::ALL.iter().any(|f| f.name() == name)
        || matches!(name, "select" | "min" | "max" | "blockIdx" | "threadIdx")
}

/// A rule's steps parsed, each pointing at the stage (`span`): the text
/// is rocmc's, not the file's.
fn default_steps(cand: &schedule::default::DefaultSchedule, span: Span) -> Option<Vec<Step>> {
    let mut steps = cand
        .steps
        .iter()
        .map(|t| syntax::parse_step(t, span.start).and_then(|s| Step::from_syntax(&s)))
        .collect::<Result<Vec<Step>, Diagnostic>>()
        .ok()?;
    for s in &mut steps {
        s.span = span;
    }
    Some(steps)
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl<'s> Cx<'s> {
    fn error(&mut self, d: Diagnostic) {
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

    /// `[tune]`: the space, and the configuration to parse the schedules
    /// with (into `self.config`). Parameter names join `names`.
    fn tune(
        &mut self,
        decl: Option<&TuneDecl>,
        names: &mut Vec<(String, Span)>,
    ) -> Option<crate::tune::Tuning> {
        use crate::tune::{Constraint, TuneParam, TuneSpace};
        let Some(decl) = decl else {
            self.knobs_given = self.given.to_vec();
            return None;
        };
        let mut space = TuneSpace::default();
        let before = self.diags.len();
        // Errors about the whole section point at its first parameter.
        let decl_span = decl.params.keys().next().map(span_of).unwrap_or_default();
        for (name, p) in &decl.params {
            if !self.name(name, "tune parameter", names) {
                continue;
            }
            names.push((name.get_ref().clone(), span_of(name)));
            let d = p.get_ref();
            let picked = [d.values.is_some(), d.pow2.is_some(), d.range.is_some()];
            if picked.iter().filter(|x| **x).count() != 1 {
                self.error(
                    Diagnostic::new(
                        span_of(p),
                        format!("tune parameter `{}` needs exactly one of `values`, `pow2` or `range`", name.get_ref()),
                    )
                    .hint("`values = [32, 64]`, `pow2 = [2, 16]` (2, 4, 8, 16) or `range = [8, 32], step = 8`"),
                );
                continue;
            }
            if let (Some(st), None) = (&d.step, &d.range) {
                self.error(Diagnostic::new(span_of(st), "`step` goes with `range`"));
                continue;
            }
            let bounds = |r: &Spanned<Vec<i64>>, cx: &mut Self| -> Option<(i64, i64)> {
                match r.get_ref().as_slice() {
                    [lo, hi] if 1 <= *lo && lo <= hi && *hi <= 1 << 30 => Some((*lo, *hi)),
                    _ => {
                        cx.error(Diagnostic::new(
                            span_of(r),
                            "expected `[low, high]` with 1 <= low <= high <= 2^30",
                        ));
                        None
                    }
                }
            };
            let values: Vec<i64> = if let Some(v) = &d.values {
                let mut out = Vec::new();
                for x in v {
                    if *x.get_ref() < 1 || *x.get_ref() > 1 << 30 {
                        self.error(Diagnostic::new(
                            span_of(x),
                            format!("candidate {} is out of range (1 to 2^30)", x.get_ref()),
                        ));
                    } else if !out.contains(x.get_ref()) {
                        out.push(*x.get_ref());
                    }
                }
                out.sort_unstable();
                out
            } else if let Some(r) = &d.pow2 {
                let Some((lo, hi)) = bounds(r, self) else {
                    continue;
                };
                (0..31)
                    .map(|e| 1i64 << e)
                    .filter(|v| (lo..=hi).contains(v))
                    .collect()
            } else {
                let r = d.range.as_ref().unwrap();
                let Some((lo, hi)) = bounds(r, self) else {
                    continue;
                };
                let step = d.step.as_ref().map_or(1, |s| *s.get_ref());
                if step < 1 || (hi - lo) / step >= 4096 {
                    self.error(Diagnostic::new(
                        d.step.as_ref().map_or(span_of(r), span_of),
                        format!("a step of {step} over [{lo}, {hi}]: it must be at least 1 and give at most 4096 values"),
                    ));
                    continue;
                }
                (lo..=hi).step_by(step as usize).collect()
            };
            if values.is_empty() {
                self.error(Diagnostic::new(
                    span_of(p),
                    format!("tune parameter `{}` has no candidates", name.get_ref()),
                ));
                continue;
            }
            let def = *d.default.get_ref();
            if !values.contains(&def) {
                self.error(Diagnostic::new(
                    span_of(&d.default),
                    format!(
                        "the default {def} is not among `{}`'s candidates ({})",
                        name.get_ref(),
                        values
                            .iter()
                            .map(i64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
                continue;
            }
            space.params.push(TuneParam {
                name: name.get_ref().clone(),
                values,
                default: def,
                span: span_of(name),
            });
        }
        let defaults = space.default_config();
        for c in &decl.constraints {
            let base = self.content_base(c);
            let ast = match syntax::parse_expr(c.get_ref(), base) {
                Ok(a) => a,
                Err(e) => {
                    self.error(e);
                    continue;
                }
            };
            // Checked on the defaults: a name that is not a parameter or a
            // default configuration that breaks it is reported here.
            match crate::tune::eval(&ast, &defaults) {
                Ok(0) => self.error(
                    Diagnostic::new(
                        span_of(c),
                        format!(
                            "the default configuration ({}) breaks this constraint",
                            crate::tune::describe(&defaults)
                        ),
                    )
                    .hint("change a `default` so that the kernel builds untuned"),
                ),
                Ok(_) => {}
                Err((span, m)) => self.error(Diagnostic::new(span, m)),
            }
            space.constraints.push(Constraint {
                text: c.get_ref().clone(),
                ast,
                span: span_of(c),
            });
        }
        if self.diags.len() > before {
            return None;
        }
        let (declared, knobs): (Vec<_>, Vec<_>) = self
            .given
            .iter()
            .cloned()
            .partition(|(n, _)| space.params.iter().any(|p| p.name == *n));
        self.knobs_given = knobs;
        match space.resolve(&declared) {
            Ok(config) => {
                self.config = config.clone();
                Some(crate::tune::Tuning { space, config })
            }
            Err(m) => {
                self.error(Diagnostic::new(decl_span, m));
                None
            }
        }
    }

    fn kernel(&mut self, doc: Doc) -> Option<Kernel> {
        let kdecl = doc.kernel;
        let kernel_span = span_of(&kdecl.name);
        let kname = kdecl.name.get_ref().clone();
        if !is_ident(&kname) {
            self.error(
                Diagnostic::new(span_of(&kdecl.name), format!("`{kname}` is not a valid kernel name"))
                    .hint("the kernel name becomes a symbol in the code object: use letters, digits and `_`"),
            );
        }
        let mut names: Vec<(String, Span)> = Vec::new();
        let mut sizes = Vec::new();
        for s in &kdecl.sizes {
            if self.name(s, "size", &names) {
                names.push((s.get_ref().clone(), span_of(s)));
                sizes.push(SizeVar {
                    divisor: 1,
                    name: s.get_ref().clone(),
                    max: i32::MAX as u64,
                    span: span_of(s),
                });
            }
        }
        for (name, v) in &kdecl.max {
            let Some(sv) = self.declared_size(&kdecl, &mut sizes, name, "max") else {
                continue;
            };
            match *v.get_ref() {
                m if (1..=i32::MAX as i64).contains(&m) => sv.max = m as u64,
                m => {
                    let d = Diagnostic::new(
                        span_of(v),
                        format!(
                            "the maximum of `{}` must be between 1 and 2147483647, not {m}",
                            sv.name
                        ),
                    )
                    .hint("sizes are i32 kernel arguments");
                    self.error(d)
                }
            }
        }
        self.divisible(&kdecl, &mut sizes);
        let mut k = Kernel {
            name: kname,
            sizes,
            tensors: Vec::new(),
            params: Vec::new(),
            stages: Vec::new(),
            tuning: None,
        };

        for (name, decl) in &doc.inputs {
            let ok = self.name(name, "tensor", &names);
            let span = span_of(name);
            names.push((name.get_ref().clone(), span));
            let d = decl.get_ref();
            let dtype = self.dtype(&d.dtype);
            let shape = self.shape(&k, &d.shape);
            if let (true, Some(dtype), Some(shape)) = (ok, dtype, shape) {
                k.tensors.push(Tensor {
                    name: name.get_ref().clone(),
                    dtype,
                    shape,
                    kind: TensorKind::Input,
                    span,
                });
            } else {
                self.poisoned.push(name.get_ref().clone());
            }
        }
        for (name, dt) in &doc.params {
            let ok = self.name(name, "parameter", &names);
            names.push((name.get_ref().clone(), span_of(name)));
            let dtype = self.dtype(dt).filter(|t| {
                if t.is_f8() {
                    self.error(
                        Diagnostic::new(span_of(dt), format!("a parameter cannot be `{t}`"))
                            .hint("8-bit floats are for tensors; pass an f32 parameter"),
                    );
                }
                !t.is_f8()
            });
            if let (true, Some(dtype)) = (ok, dtype) {
                k.params.push(Param {
                    name: name.get_ref().clone(),
                    dtype,
                    span: span_of(name),
                });
            } else {
                self.poisoned.push(name.get_ref().clone());
            }
        }
        let before_tune = self.diags.len();
        let tuning = self.tune(doc.tune.as_ref(), &mut names);
        if self.diags.len() > before_tune {
            // Schedules name the parameters: without values they would
            // only repeat this error in other words.
            return Some(k);
        }
        if doc.stage.is_empty() {
            self.error(
                Diagnostic::new(kernel_span, "the kernel has no stage")
                    .hint("add a `[[stage]]` with `compute = \"C[i] = A[i] + B[i]\"`"),
            );
        }
        for st in &doc.stage {
            self.stage(&mut k, &mut names, st);
        }
        k.tuning = tuning;
        if self.defaults > 1 && self.diags.is_empty() {
            self.fuse_producers(&mut k);
            self.row_chains(&mut k);
        }
        if self.diags.is_empty() {
            self.knobs(&mut k);
        }
        // A refused later stage would leave an earlier one last: only
        // judge the last stage of a kernel whose stages were all accepted.
        let last = k
            .stages
            .last()
            .filter(|_| k.stages.len() == doc.stage.len());
        if let Some(last) = last {
            if let Some(step) = last
                .schedule
                .iter()
                .find(|s| s.kind == schedule::StepKind::ComputeInline)
            {
                self.error(
                    Diagnostic::new(
                        step.span,
                        format!(
                            "`{}` is the kernel's last stage, its output, and cannot be inlined",
                            last.name
                        ),
                    )
                    .hint("inline the stages that feed it instead"),
                );
            }
        }
        Some(k)
    }

    /// The size `name` of a `[kernel]` table (`max`, `divisible`), or an
    /// error suggesting the declared sizes.
    fn declared_size<'v>(
        &mut self,
        kdecl: &KernelDecl,
        sizes: &'v mut [SizeVar],
        name: &Spanned<String>,
        table: &str,
    ) -> Option<&'v mut SizeVar> {
        let found = sizes.iter_mut().find(|s| s.name == *name.get_ref());
        if found.is_none() {
            let d = Diagnostic::new(
                span_of(name),
                format!("`{}` in `{table}` is not a declared size", name.get_ref()),
            )
            .suggest(
                name.get_ref(),
                kdecl.sizes.iter().map(|s| s.get_ref().as_str()),
            );
            self.error(d);
        }
        found
    }

    /// `[kernel] divisible`: each named size's divisor, between 1 and its maximum.
    fn divisible(&mut self, kdecl: &KernelDecl, sizes: &mut [SizeVar]) {
        for (name, v) in &kdecl.divisible {
            let Some(sv) = self.declared_size(kdecl, sizes, name, "divisible") else {
                continue;
            };
            match *v.get_ref() {
                d if d >= 1 && d as u64 <= sv.max => sv.divisor = d as u64,
                d => self.error(
                    Diagnostic::new(
                        span_of(v),
                        format!(
                            "`{}` cannot be a multiple of {d}: a divisor is between 1 and the size's maximum ({})",
                            sv.name, sv.max
                        ),
                    )
                    .hint("`divisible = { cols = 4 }` states that every `cols` the kernel is launched with is a multiple of 4"),
                ),
            }
        }
    }

    fn dtype(&mut self, s: &Spanned<String>) -> Option<DType> {
        let d = DType::parse(s.get_ref());
        if d.is_none() {
            let all: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            let mut diag = Diagnostic::new(span_of(s), format!("unknown dtype `{}`", s.get_ref()));
            diag = match DType::from_synonym(s.get_ref()) {
                Some(t) => diag.hint(format!("did you mean `{t}`?")),
                None => diag.suggest(s.get_ref(), all.iter().copied()),
            };
            self.error(diag.hint(format!("dtypes: {}", all.join(", "))));
        }
        d
    }

    fn shape(&mut self, k: &Kernel, shape: &Spanned<Vec<Spanned<Extent>>>) -> Option<Vec<Index>> {
        if shape.get_ref().is_empty() || shape.get_ref().len() > 4 {
            self.error(
                Diagnostic::new(
                    span_of(shape),
                    format!(
                        "a tensor has 1 to 4 dimensions, not {}",
                        shape.get_ref().len()
                    ),
                )
                .hint("write the extents outermost first, e.g. shape = [\"m\", \"n\"]"),
            );
            return None;
        }
        let mut out = Vec::new();
        for e in shape.get_ref() {
            out.push(self.extent(k, e)?);
        }
        Some(out)
    }

    /// One extent: a positive integer or a string holding a size expression.
    fn extent(&mut self, k: &Kernel, e: &Spanned<Extent>) -> Option<Index> {
        let span = span_of(e);
        let ix = match e.get_ref() {
            Extent::Int(v) => Index::c(*v),
            Extent::Expr(text) => {
                let base = self.content_base(&Spanned::new(e.span(), text.clone()));
                match syntax::parse_expr(text, base) {
                    Ok(ast) => self.size_expr(k, &ast)?,
                    Err(d) => {
                        self.error(d);
                        return None;
                    }
                }
            }
        };
        if let Index::Const(v) = ix {
            if v <= 0 {
                self.error(Diagnostic::new(span, format!("extent {v} is not positive")));
                return None;
            }
        }
        Some(ix)
    }

    /// An expression over sizes and integer constants.
    fn size_expr(&mut self, k: &Kernel, ast: &Ast) -> Option<Index> {
        let vars: Vec<(String, VarId)> = Vec::new();
        self.index(
            k,
            &vars,
            ast,
            "an extent is an integer expression of sizes and constants",
        )
    }

    /// Converts an AST to an index expression over sizes and the given vars.
    fn index(
        &mut self,
        k: &Kernel,
        vars: &[(String, VarId)],
        ast: &Ast,
        what: &str,
    ) -> Option<Index> {
        match &ast.kind {
            AstKind::Int(v) => Some(Index::c(*v)),
            AstKind::Name(n) => {
                if let Some((_, v)) = vars.iter().find(|(x, _)| x == n) {
                    return Some(Index::Var(*v));
                }
                if let Some(i) = k.sizes.iter().position(|s| &s.name == n) {
                    return Some(Index::Size(SizeId(i as u32)));
                }
                let cands: Vec<&str> = vars
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .chain(k.sizes.iter().map(|s| s.name.as_str()))
                    .collect();
                let mut d = Diagnostic::new(
                    ast.span,
                    format!("unknown name `{n}` in an index expression"),
                )
                .suggest(n, cands);
                if !k.sizes.iter().any(|s| s.name == *n) && vars.is_empty() {
                    d = d.hint(format!("declare it in `[kernel] sizes = [..., \"{n}\"]`"));
                }
                self.error(d.label(what.to_string()));
                None
            }
            AstKind::Binary(op, a, b) => {
                let op = match op {
                    BinaryOp::Add => IOp::Add,
                    BinaryOp::Sub => IOp::Sub,
                    BinaryOp::Mul => IOp::Mul,
                    BinaryOp::Div => IOp::Div,
                    BinaryOp::Rem => IOp::Mod,
                    other => {
                        self.error(
                            Diagnostic::new(
                                ast.span,
                                format!("`{}` is not allowed here", other.symbol()),
                            )
                            .label(what.to_string()),
                        );
                        return None;
                    }
                };
                let a = self.index(k, vars, a, what);
                let b = self.index(k, vars, b, what);
                if let (IOp::Div | IOp::Mod, Some(Index::Const(0))) = (op, &b) {
                    self.error(Diagnostic::new(
                        ast.span,
                        "division by zero in an index expression",
                    ));
                    return None;
                }
                Some(Index::bin(op, a?, b?))
            }
            AstKind::Call { name, args, .. }
                if (name == "min" || name == "max") && args.len() == 2 =>
            {
                let a = self.index(k, vars, &args[0].value, what);
                let b = self.index(k, vars, &args[1].value, what);
                Some(Index::bin(
                    if name == "min" { IOp::Min } else { IOp::Max },
                    a?,
                    b?,
                ))
            }
            _ => {
                self.error(
                    Diagnostic::new(ast.span, "not an integer index expression")
                        .label(what.to_string()),
                );
                None
            }
        }
    }

    fn stage(
        &mut self,
        k: &mut Kernel,
        names: &mut Vec<(String, Span)>,
        decl: &Spanned<StageDecl>,
    ) {
        let d = decl.get_ref();
        let base = self.content_base(&d.compute);
        let stmt = match syntax::parse_compute(d.compute.get_ref(), base) {
            Ok(s) => s,
            Err(e) => return self.error(e),
        };
        let target = Spanned::new(stmt.target_span.range(), stmt.target.clone());
        if !self.name(&target, "tensor", names) {
            return;
        }
        if let Some(lhs) = &stmt.scatter {
            return scatter::stage(self, k, names, decl, &stmt, lhs);
        }
        if let Some((name, _)) = d.over.first() {
            return self.error(
                Diagnostic::new(span_of(name), "`over` is for scatters only").hint(format!(
                    "combine into the output with `{}[...] += ...`, or drop `over`",
                    stmt.target
                )),
            );
        }
        // Axes: plain, distinct names that shadow nothing else.
        let mut axes_names: Vec<(String, VarId)> = Vec::new();
        for (i, (a, sp)) in stmt.axes.iter().enumerate() {
            let taken: Vec<(String, Span)> = names
                .iter()
                .cloned()
                .chain(stmt.axes[..i].iter().cloned())
                .collect();
            if !self.name(&Spanned::new(sp.range(), a.clone()), "axis", &taken) {
                return;
            }
            axes_names.push((a.clone(), VarId(i as u32)));
        }
        let Some(shape_decl) = &d.shape else {
            return self.error(
                Diagnostic::new(
                    stmt.target_span,
                    format!("stage `{}` has no `shape`", stmt.target),
                )
                .hint(format!(
                    "give the extent of each axis, e.g. shape = [{}]",
                    stmt.axes
                        .iter()
                        .map(|_| "\"n\"")
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
        };
        let Some(shape) = self.shape(k, shape_decl) else {
            return;
        };
        if shape.len() != stmt.axes.len() {
            return self.error(
                Diagnostic::new(
                    span_of(shape_decl),
                    format!(
                        "shape has {} extent(s) but `{}` has {} axis(es)",
                        shape.len(),
                        stmt.target,
                        stmt.axes.len()
                    ),
                )
                .hint("give one extent per axis on the left of `=`"),
            );
        }
        // Reduction axes follow the output axes as variables.
        let taken: Vec<(String, Span)> = names.iter().chain(&stmt.axes).cloned().collect();
        // Their extents may depend on the output axes: `j` in 0..i + 1.
        let outer: Vec<(String, VarId)> = stmt
            .axes
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), VarId(i as u32)))
            .collect();
        let Some(red_axes) =
            self.declared_axes(k, &d.reduce, "reduction axis", &taken, &outer, &shape)
        else {
            return;
        };
        let tuple = !stmt.more.is_empty()
            || matches!(&stmt.value.kind, AstKind::Call { name, .. } if name == "reduce");
        if tuple {
            let ax = tuple::Axes {
                vars: axes_names,
                shape,
                reduce: red_axes,
            };
            return tuple::stage(self, k, names, decl, &stmt, ax);
        }
        if let Some((key, _)) = d.init.first().or(d.combine.first()) {
            return self.error(
                Diagnostic::new(span_of(key), "`init` and `combine` belong to tuple reductions")
                    .hint(format!(
                        "write the stage as `{}[...] = reduce(...)` with one element per tensor, or drop them",
                        stmt.target
                    )),
            );
        }
        let declared = match &d.dtype {
            Some(s) => match self.dtype(s) {
                Some(t) => Some((t, span_of(s))),
                None => return,
            },
            None => None,
        };
        self.red = (!red_axes.is_empty()).then(|| RedCx {
            vars: red_axes
                .iter()
                .enumerate()
                .map(|(j, a)| (a.name.clone(), VarId((stmt.axes.len() + j) as u32)))
                .collect(),
            result: None,
            inside: false,
        });
        let value = self.expr(k, &axes_names, &stmt.value, declared.map(|d| d.0));
        let red = self.red.take();
        let scan = self.scan.take();
        let Some(value) = value else { return };
        let reduce = match red {
            Some(RedCx {
                result: Some((op, body)),
                ..
            }) => Some(Reduction {
                op,
                axes: match &scan {
                    Some(s) => vec![self.scan_axis(s)],
                    None => red_axes,
                },
                body,
                tuple: None,
                scan: scan.map(|s| Scan {
                    axis: s.axis,
                    exclusive: s.exclusive,
                }),
            }),
            Some(_) => {
                return self.error(
                    Diagnostic::new(
                        stmt.value.span,
                        "the stage declares reduction axes but computes no reduction",
                    )
                    .hint(format!(
                        "reduce over them: `{}[...] = sum(..., {})`",
                        stmt.target,
                        red_axes
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                )
            }
            None => None,
        };
        let dtype = match declared {
            Some((t, sp)) if t != value.dtype => {
                return self.error(
                    Diagnostic::new(
                        stmt.value.span,
                        format!(
                            "the expression has dtype `{}` but the stage declares `{t}`",
                            value.dtype
                        ),
                    )
                    .label(format!("this is `{}`", value.dtype))
                    .hint(format!(
                        "convert it with `{t}(...)`, or change the dtype at line {}",
                        crate::diag::line_col(self.src, sp.start).0
                    )),
                );
            }
            Some((t, _)) => t,
            None => value.dtype,
        };
        let output = TensorId(k.tensors.len() as u32);
        let axes: Vec<Axis> = stmt
            .axes
            .iter()
            .zip(&shape)
            .map(|((n, sp), e)| Axis {
                name: n.clone(),
                extent: e.clone(),
                span: *sp,
            })
            .collect();
        let steps = self.steps(d);
        let stage = Stage {
            name: stmt.target.clone(),
            output,
            axes,
            reduce,
            scatter: None,
            value,
            schedule: steps,
            span: span_of(decl),
            nest: None,
            default: None,
        };
        self.push_stage(k, names, &stmt, dtype, shape, stage);
    }

    /// Adds a checked stage and its tensor (`stage.output`, the next id)
    /// to `k`. Applying the schedule here reports its errors with the
    /// kernel's other errors, and lowering reuses the result; a stage
    /// computed at another's loop has the extents of the part computed
    /// there, known only when lowering.
    pub(crate) fn push_stage(
        &mut self,
        k: &mut Kernel,
        names: &mut Vec<(String, Span)>,
        stmt: &syntax::ComputeStmt,
        dtype: DType,
        shape: Vec<Index>,
        mut stage: Stage,
    ) {
        names.push((stmt.target.clone(), stmt.target_span));
        let kind = TensorKind::Stage(StageId(k.stages.len() as u32));
        k.tensors.push(Tensor {
            name: stmt.target.clone(),
            dtype,
            shape: shape.clone(),
            kind,
            span: stmt.target_span,
        });
        // A tuple reduction's other tensors follow its first.
        let more_types = stage.tuple().map(|t| t.elems[1..].to_vec());
        for ((name, span), e) in stmt.more.iter().zip(more_types.iter().flatten()) {
            names.push((name.clone(), *span));
            k.tensors.push(Tensor {
                name: name.clone(),
                dtype: e.dtype,
                shape: shape.clone(),
                kind,
                span: *span,
            });
        }
        if stage.compute_at().is_none() {
            // A stage some earlier stage is computed at keeps its axes:
            // that stage's `compute_at` names them.
            let host = k
                .stages
                .iter()
                .any(|s| s.compute_at().is_some_and(|(c, _, _)| c.name == stage.name));
            if self.defaults > 0 && stage.schedule.is_empty() && !host {
                self.default_schedule(k, &mut stage);
            }
            if stage.nest.is_none() {
                match schedule::apply_with_source(k, &stage, self.src) {
                    Ok(nest) => stage.nest = Some(nest),
                    Err(e) => self.error(e),
                }
            }
        }
        k.stages.push(stage);
    }

    /// The knobs of the default schedules join the kernel's tune space
    /// (so `rocmc tune` searches an unscheduled kernel); values given for
    /// them were applied by the rules and are checked here.
    fn knobs(&mut self, k: &mut Kernel) {
        use crate::tune::{TuneParam, Tuning};
        let at: Vec<(Span, &schedule::default::Knob)> = k
            .stages
            .iter()
            .filter_map(|s| s.default.as_ref().map(|d| (s.span, d)))
            .flat_map(|(span, d)| d.knobs.iter().map(move |kb| (span, kb)))
            .collect();
        let knobs: Vec<&schedule::default::Knob> = at.iter().map(|x| x.1).collect();
        // Without a target, a matrix product's knobs may be those of the
        // rule the target will choose: checked when it is known.
        let later = self.rules.target.is_none()
            && k.stages
                .iter()
                .any(|s| s.default.as_ref().is_some_and(|d| d.by_target));
        let mut errors = Vec::new();
        for (n, v) in self.knobs_given.iter().filter(|_| !later) {
            let found = at.iter().find(|(_, kb)| kb.name == *n);
            // A knob's errors point at the stage whose rule reads it.
            let span = found.map_or(Span::default(), |f| f.0);
            let msg = match found.map(|f| f.1) {
                Some(kb) if kb.values.contains(v) => continue,
                Some(kb) => crate::tune::not_a_candidate(n, *v, &kb.values),
                None => {
                    let mut names: Vec<&str> = knobs.iter().map(|kb| kb.name.as_str()).collect();
                    if let Some(t) = &k.tuning {
                        names.extend(t.space.params.iter().map(|p| p.name.as_str()));
                    }
                    if names.is_empty() {
                        format!("tune parameter `{n}` given, but the kernel has no [tune] section and no default schedule with knobs")
                    } else {
                        format!(
                            "no tune parameter `{n}`; the kernel has: {}",
                            names.join(", ")
                        )
                    }
                }
            };
            errors.push(Diagnostic::new(span, msg));
        }
        for e in errors {
            self.error(e);
        }
        if knobs.is_empty() || !self.diags.is_empty() {
            return;
        }
        let t = k.tuning.get_or_insert_with(|| Tuning {
            space: Default::default(),
            config: Vec::new(),
        });
        let texts: Vec<&String> = k
            .stages
            .iter()
            .filter_map(|s| s.default.as_ref())
            .flat_map(|d| &d.constraints)
            .collect();
        for kb in knobs {
            if t.space.params.iter().any(|p| p.name == kb.name) {
                continue;
            }
            t.space.params.push(TuneParam {
                name: kb.name.clone(),
                values: kb.values.clone(),
                default: kb.default,
                span: Span::default(),
            });
            t.config.push((kb.name.clone(), kb.value));
        }
        // Kept where the defaults meet them (rocmc wrote both).
        let defaults = t.space.default_config();
        for text in texts {
            let Ok(ast) = syntax::parse_expr(text, 0) else {
                continue;
            };
            if matches!(crate::tune::eval(&ast, &defaults), Ok(v) if v != 0) {
                t.space.constraints.push(crate::tune::Constraint {
                    text: text.clone(),
                    ast,
                    span: Span::default(),
                });
            }
        }
    }

    /// Default-scheduled element-wise producers inlined into their
    /// readers ([`schedule::default::inlinable`]), whose rules then choose
    /// again; kept only if every changed stage applies.
    fn fuse_producers(&self, k: &mut Kernel) {
        let plan = schedule::default::inlinable(k);
        if plan.is_empty() {
            return;
        }
        let mut next = k.clone();
        let fused: Vec<TensorId> = plan.iter().map(|(i, _)| k.stages[*i].output).collect();
        for (i, cand) in plan {
            let Some(steps) = default_steps(&cand, next.stages[i].span) else {
                return;
            };
            let st = &mut next.stages[i];
            st.schedule = steps;
            st.default = Some(cand);
            match schedule::apply_with_source(&next, &next.stages[i], self.src) {
                Ok(nest) => next.stages[i].nest = Some(nest),
                Err(_) => return,
            }
        }
        for i in 0..next.stages.len() {
            let st = &next.stages[i];
            if fused.contains(&st.output) || st.default.is_none() {
                continue;
            }
            let mut reads = false;
            for e in st.exprs() {
                e.visit_loads(&mut |t, _| reads |= fused.contains(&t));
            }
            if !reads {
                continue;
            }
            let mut again = st.clone();
            again.schedule.clear();
            again.default = None;
            again.nest = None;
            self.default_schedule(&next, &mut again);
            if again.nest.is_none() {
                return;
            }
            next.stages[i] = again;
        }
        *k = next;
    }

    /// Default-scheduled row reductions fused into the stage that
    /// normalises the rows ([`schedule::default::row_chains`]); kept only
    /// if every rescheduled stage applies.
    fn row_chains(&self, k: &mut Kernel) {
        let plan = schedule::default::row_chains(k, &self.knobs_given);
        if plan.is_empty() {
            return;
        }
        let mut next = k.clone();
        for (i, cand) in plan {
            let Some(steps) = default_steps(&cand, next.stages[i].span) else {
                return;
            };
            let st = &mut next.stages[i];
            st.schedule = steps;
            st.nest = None;
            st.default = Some(cand);
        }
        for i in 0..next.stages.len() {
            let st = &next.stages[i];
            if st.nest.is_none() && st.compute_at().is_none() {
                match schedule::apply_with_source(&next, st, self.src) {
                    Ok(nest) => next.stages[i].nest = Some(nest),
                    Err(_) => return,
                }
            }
        }
        *k = next;
    }

    /// A stage the file gives no schedule: the first candidate of the
    /// rules that applies (see [`schedule::default`]), its steps pointing at
    /// the stage. None applying leaves the one-thread nest.
    fn default_schedule(&self, k: &Kernel, stage: &mut Stage) {
        let cx = schedule::default::RuleCx {
            target: self.rules.target,
            shared_limit: self.rules.shared_limit,
            given: &self.knobs_given,
        };
        for cand in schedule::default::candidates(k, stage, &cx) {
            // Rules whose tiles may not lower for every kernel come only
            // at the first level (see `frontend_with`'s fallbacks).
            if self.defaults < 2 && cand.rule == "matmul-tiles" {
                continue;
            }
            if cand.bad_knob() {
                // Refused once the stages are parsed (`knobs`), naming
                // this rule's candidates.
                stage.default = Some(cand);
                return;
            }
            let Some(steps) = default_steps(&cand, stage.span) else {
                continue;
            };
            let mut trial = stage.clone();
            trial.schedule = steps;
            if let Ok(nest) = schedule::apply_with_source(k, &trial, self.src) {
                trial.nest = Some(nest);
                trial.default = Some(cand);
                *stage = trial;
                return;
            }
        }
    }

    /// Axes declared with their extents (`reduce = { k = "K" }`, `over`):
    /// distinct names that take none of `taken`.
    /// Their extents may use the axes `outer` (with extents `outer_ext`):
    /// a triangular reduction, never negative.
    fn declared_axes(
        &mut self,
        k: &Kernel,
        decl: &IndexMap<Spanned<String>, Spanned<Extent>>,
        what: &str,
        taken: &[(String, Span)],
        outer: &[(String, VarId)],
        outer_ext: &[Index],
    ) -> Option<Vec<Axis>> {
        let mut axes: Vec<Axis> = Vec::new();
        for (name, ext) in decl {
            let taken: Vec<(String, Span)> = taken
                .iter()
                .cloned()
                .chain(axes.iter().map(|a| (a.name.clone(), a.span)))
                .collect();
            if !self.name(name, what, &taken) {
                return None;
            }
            if let Extent::Expr(text) = ext.get_ref() {
                let sibling = text
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .find(|w| axes.iter().any(|a| a.name == *w));
                if let Some(w) = sibling {
                    self.error(
                        Diagnostic::new(
                            span_of(ext),
                            format!(
                                "`{w}` is another {what} of this stage: an extent may use sizes, \
                                 constants and the output's axes, not another {what}"
                            ),
                        )
                        .hint(format!(
                            "bound `{}` by a size and mask the extra points inside the expression \
                             (`select(...)`), or make `{w}` an axis of the output",
                            name.get_ref()
                        )),
                    );
                    return None;
                }
            }
            let extent = match (ext.get_ref(), outer.is_empty()) {
                (Extent::Expr(text), false) => {
                    self.dependent_extent(k, ext, text, outer, outer_ext)?
                }
                _ => self.extent(k, ext)?,
            };
            axes.push(Axis {
                name: name.get_ref().clone(),
                extent,
                span: span_of(name),
            });
        }
        Some(axes)
    }

    /// An extent that may use the axes `outer`: parsed over them, and
    /// refused where some point of theirs could make it negative.
    fn dependent_extent(
        &mut self,
        k: &Kernel,
        e: &Spanned<Extent>,
        text: &str,
        outer: &[(String, VarId)],
        outer_ext: &[Index],
    ) -> Option<Index> {
        let base = self.content_base(&Spanned::new(e.span(), text.to_string()));
        let ast = match syntax::parse_expr(text, base) {
            Ok(a) => a,
            Err(d) => {
                self.error(d);
                return None;
            }
        };
        let ix = self.index(
            k,
            outer,
            &ast,
            "an extent is an integer expression of sizes, constants and the output's axes",
        )?;
        if !ix.has_vars() {
            return self.extent(k, e);
        }
        let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let var_max: Vec<u64> = outer_ext
            .iter()
            .map(|x| {
                x.max_value(&size_max, &[])
                    .saturating_sub(1)
                    .min(u64::MAX as u128) as u64
            })
            .collect();
        if ix.range(&size_max, &var_max).0 < 0 {
            self.error(
                Diagnostic::new(span_of(e), format!("the extent `{text}` may be negative"))
                    .hint(format!("clamp it: `max({text}, 0)`")),
            );
            return None;
        }
        Some(ix)
    }

    /// The stage's schedule steps, parsed with the tune configuration.
    /// Reports each step that a kind of stage (`what`, as "a scatter
    /// stage") cannot take: `refused` names the step, `hint` says what it may.
    fn refuse_steps(
        &mut self,
        steps: &[Step],
        what: &str,
        hint: &str,
        refused: impl Fn(&schedule::StepKind) -> Option<&'static str>,
    ) {
        for s in steps {
            if let Some(step) = refused(&s.kind) {
                self.error(
                    Diagnostic::new(s.span, format!("{what} cannot take `{step}`")).hint(hint),
                );
            }
        }
    }

    fn steps(&mut self, d: &StageDecl) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for s in &d.schedule {
            let base = self.content_base(s);
            match syntax::parse_step(s.get_ref(), base)
                .and_then(|mut st| {
                    crate::tune::substitute(&mut st, &self.config)?;
                    Ok(st)
                })
                .and_then(|st| schedule::Step::from_syntax(&st))
            {
                Ok(step) => steps.push(step),
                Err(e) => self.error(e),
            }
        }
        steps
    }

    /// Typed conversion of a value expression. `hint` gives untyped
    /// literals a dtype from their context.
    fn expr(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        ast: &Ast,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let e = |kind, dtype| Some(Expr { kind, dtype });
        match &ast.kind {
            AstKind::Int(v) => match hint {
                Some(t) if t.is_float() => e(ExprKind::Float(*v as f64), t),
                Some(DType::Bool) | None => e(ExprKind::Int(*v), DType::I32),
                Some(t) => e(ExprKind::Int(*v), t),
            },
            AstKind::Float(v) => match hint {
                Some(t) if t.is_float() => e(ExprKind::Float(round_to(*v, t)), t),
                None => e(ExprKind::Float(round_to(*v, DType::F32)), DType::F32),
                Some(t) => {
                    self.error(
                        Diagnostic::new(
                            ast.span,
                            format!("float constant where an integer (`{t}`) is expected"),
                        )
                        .hint("write an integer, or convert the other side to a float type"),
                    );
                    None
                }
            },
            AstKind::Name(n) => {
                if let Some((_, v)) = axes.iter().find(|(x, _)| x == n) {
                    return e(ExprKind::Index(Index::Var(*v)), DType::I32);
                }
                if let Some(i) = k.sizes.iter().position(|s| &s.name == n) {
                    return e(ExprKind::Index(Index::Size(SizeId(i as u32))), DType::I32);
                }
                if let Some(i) = k.params.iter().position(|p| &p.name == n) {
                    return e(ExprKind::Param(ParamId(i as u32)), k.params[i].dtype);
                }
                if let Some(t) = k.tensors.iter().find(|t| &t.name == n) {
                    let idx = vec!["_"; t.shape.len()].join(", ");
                    self.error(
                        Diagnostic::new(ast.span, format!("tensor `{n}` is used without indices"))
                            .hint(format!("index it: `{n}[{idx}]`")),
                    );
                    return None;
                }
                if self.poisoned.contains(n) {
                    return None;
                }
                if let Some(x) = self.operand(n) {
                    return Some(x);
                }
                if let Some(lit) = self.float_literal(n, ast.span, hint) {
                    return lit;
                }
                let cands = axes
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .chain(k.sizes.iter().map(|s| s.name.as_str()))
                    .chain(k.params.iter().map(|p| p.name.as_str()))
                    .chain(k.tensors.iter().map(|t| t.name.as_str()));
                self.error(
                    Diagnostic::new(ast.span, format!("unknown name `{n}`")).suggest(n, cands),
                );
                None
            }
            AstKind::Access {
                name,
                name_span,
                indices,
            } => {
                let Some(ti) = k.tensors.iter().position(|t| &t.name == name) else {
                    if self.poisoned.contains(name) {
                        return None;
                    }
                    let scalar = k.params.iter().any(|p| &p.name == name)
                        || k.sizes.iter().any(|s| &s.name == name);
                    let d = if scalar {
                        Diagnostic::new(
                            ast.span,
                            format!("`{name}` is a scalar, not a tensor, and takes no indices"),
                        )
                        .hint(format!("write `{name}` without `[...]`"))
                    } else {
                        let cands: Vec<&str> = k.tensors.iter().map(|t| t.name.as_str()).collect();
                        Diagnostic::new(*name_span, format!("unknown tensor `{name}`"))
                            .suggest(name, cands)
                    };
                    self.error(d);
                    return None;
                };
                let t = &k.tensors[ti];
                if indices.len() != t.shape.len() {
                    self.error(
                        Diagnostic::new(
                            ast.span,
                            format!(
                                "`{name}` has {} dimension(s) but is indexed with {}",
                                t.shape.len(),
                                indices.len()
                            ),
                        )
                        .hint(format!(
                            "`{name}` is declared with shape [{}]",
                            t.shape
                                .iter()
                                .map(|s| s.display(&k.size_names(), &[]).to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    );
                    return None;
                }
                if indices.iter().any(reads_tensor) {
                    return self.gather(k, axes, ti, indices, ast.span);
                }
                let mut ix = Vec::new();
                for i in indices {
                    ix.push(self.index(
                        k,
                        axes,
                        i,
                        "a subscript is an integer expression of axes, sizes, constants and integer tensor elements",
                    ));
                }
                let indices: Option<Vec<Index>> = ix.into_iter().collect();
                e(
                    ExprKind::Load {
                        tensor: TensorId(ti as u32),
                        indices: indices?,
                    },
                    t.dtype,
                )
            }
            AstKind::Unary(op, a) => {
                let a = self.expr(k, axes, a, hint)?;
                if a.dtype.is_f8() {
                    return self.f8_refused(&a, ast.span, "this operator");
                }
                match op {
                    AUnary::Neg if a.dtype != DType::Bool => {
                        e(ExprKind::Unary(UnaryOp::Neg, Box::new(a.clone())), a.dtype)
                    }
                    AUnary::Not if a.dtype == DType::Bool => {
                        e(ExprKind::Unary(UnaryOp::Not, Box::new(a)), DType::Bool)
                    }
                    _ => {
                        self.error(Diagnostic::new(
                            ast.span,
                            format!("this operator does not apply to `{}`", a.dtype),
                        ));
                        None
                    }
                }
            }
            AstKind::Binary(op, a, b) => {
                let bop = match op {
                    BinaryOp::Add => BinOp::Add,
                    BinaryOp::Sub => BinOp::Sub,
                    BinaryOp::Mul => BinOp::Mul,
                    BinaryOp::Div => BinOp::Div,
                    BinaryOp::Rem => BinOp::Rem,
                    BinaryOp::Eq => BinOp::Eq,
                    BinaryOp::Ne => BinOp::Ne,
                    BinaryOp::Lt => BinOp::Lt,
                    BinaryOp::Le => BinOp::Le,
                    BinaryOp::Gt => BinOp::Gt,
                    BinaryOp::Ge => BinOp::Ge,
                    BinaryOp::And => BinOp::And,
                    BinaryOp::Or => BinOp::Or,
                    BinaryOp::BitAnd => BinOp::BitAnd,
                    BinaryOp::BitOr => BinOp::BitOr,
                    BinaryOp::BitXor => BinOp::BitXor,
                    BinaryOp::Shl => BinOp::Shl,
                    BinaryOp::Shr => BinOp::Shr,
                };
                let operand_hint =
                    if op.is_comparison() || matches!(op, BinaryOp::And | BinaryOp::Or) {
                        None
                    } else {
                        hint
                    };
                let (a, b) = self.operands(k, axes, a, b, operand_hint)?;
                self.binary(bop, a, b, ast.span)
            }
            AstKind::Call {
                name,
                name_span,
                args,
            } => self.call(k, axes, name, *name_span, args, ast.span, hint),
        }
    }

    /// `T[..]` whose subscripts read tensors: a gather. Subscripts that are
    /// affine stay index expressions; the others are `i32` values (integer
    /// elements of other types are converted, as by `i32(...)`) clamped
    /// into their dimension.
    fn gather(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        ti: usize,
        indices: &[Ast],
        span: Span,
    ) -> Option<Expr> {
        let t = &k.tensors[ti];
        if let TensorKind::Stage(p) = t.kind {
            let ps = k.stages.get(p.0 as usize)?;
            if ps.is_internal() {
                self.error(
                    Diagnostic::new(
                        span,
                        format!(
                            "`{}` is read at data-dependent subscripts, so it must be in memory, but its schedule computes it inside another stage",
                            t.name
                        ),
                    )
                    .hint(format!(
                        "remove `compute_inline()`/`compute_at(...)` from the schedule of `{}`",
                        ps.name
                    )),
                );
                return None;
            }
        }
        let indices = self.data_subscripts(k, axes, indices);
        Some(Expr {
            kind: ExprKind::Gather {
                tensor: TensorId(ti as u32),
                indices: indices?,
            },
            dtype: t.dtype,
        })
    }

    /// Subscripts of a gather or scatter: affine ones as index expressions,
    /// those that read tensors as `i32` values (other integer types
    /// converted, as by `i32(...)`).
    pub(crate) fn data_subscripts(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        indices: &[Ast],
    ) -> Option<Vec<Expr>> {
        let mut subs = Vec::new();
        for i in indices {
            if !reads_tensor(i) {
                let ix = self.index(
                    k,
                    axes,
                    i,
                    "a subscript is an integer expression of axes, sizes, constants and integer tensor elements",
                );
                subs.push(ix.map(|ix| Expr {
                    kind: ExprKind::Index(ix),
                    dtype: DType::I32,
                }));
                continue;
            }
            let Some(v) = self.expr(k, axes, i, Some(DType::I32)) else {
                subs.push(None);
                continue;
            };
            if v.dtype == DType::I32 {
                subs.push(Some(v));
            } else if v.dtype.is_float() || v.dtype == DType::Bool {
                self.error(
                    Diagnostic::new(
                        i.span,
                        format!("a subscript must be an integer, but this is `{}`", v.dtype),
                    )
                    .hint("convert it: `i32(...)`"),
                );
                subs.push(None);
            } else {
                subs.push(Some(Expr {
                    kind: ExprKind::Cast(Box::new(v)),
                    dtype: DType::I32,
                }));
            }
        }
        subs.into_iter().collect()
    }

    /// Converts two operands so that an untyped literal takes the other side's type.
    fn operands(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        a: &Ast,
        b: &Ast,
        hint: Option<DType>,
    ) -> Option<(Expr, Expr)> {
        let lit = |x: &Ast| matches!(x.kind, AstKind::Int(_) | AstKind::Float(_));
        if lit(a) && !lit(b) {
            let b = self.expr(k, axes, b, hint)?;
            let a = self.expr(k, axes, a, Some(b.dtype))?;
            Some((a, b))
        } else {
            let a = self.expr(k, axes, a, hint);
            let b = self.expr(k, axes, b, a.as_ref().map(|a| a.dtype).or(hint));
            Some((a?, b?))
        }
    }

    /// Refuses `what` on an 8-bit float value: those are storage types.
    fn f8_refused(&mut self, a: &Expr, span: Span, what: &str) -> Option<Expr> {
        self.error(
            Diagnostic::new(
                span,
                format!("{what} does not apply to `{}` values", a.dtype),
            )
            .label("8-bit floats are storage types: load, move, store or convert them")
            .hint("convert to a wider type first, e.g. `f32(A[i, k])`"),
        );
        None
    }

    fn binary(&mut self, op: BinOp, a: Expr, b: Expr, span: Span) -> Option<Expr> {
        if a.dtype != b.dtype {
            self.error(
                Diagnostic::new(
                    span,
                    format!("dtype mismatch: `{}` and `{}`", a.dtype, b.dtype),
                )
                .label("operands of one operation must have the same dtype")
                .hint(format!(
                    "convert one side, e.g. `{}(...)`",
                    if a.dtype.is_float() { a.dtype } else { b.dtype }
                )),
            );
            return None;
        }
        let t = a.dtype;
        if t.is_f8() {
            return self.f8_refused(&a, span, "arithmetic or comparison");
        }
        let ok = match op {
            BinOp::And | BinOp::Or => t == DType::Bool,
            BinOp::Eq | BinOp::Ne => true,
            BinOp::Rem => t.is_int(),
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => t.is_int(),
            _ => t != DType::Bool,
        };
        if !ok {
            let what = match op {
                BinOp::Rem => "`%` needs integer operands".to_string(),
                BinOp::And | BinOp::Or => format!("`&&` and `||` need bool operands, not `{t}`"),
                BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                    format!("`&`, `|`, `^`, `<<` and `>>` need integer operands, not `{t}`")
                }
                _ => format!("arithmetic does not apply to `{t}` values"),
            };
            let mut d = Diagnostic::new(span, what);
            if op == BinOp::Rem && t.is_float() {
                d = d.hint("for a float remainder write `x - floor(x / y) * y`");
            }
            self.error(d);
            return None;
        }
        let dtype = if op.is_comparison() { DType::Bool } else { t };
        Some(Expr {
            kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
            dtype,
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn reduction(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        op: ReduceOp,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let name = op.name();
        self.reduction_with(k, axes, op, name, name_span, args, span, hint, &|v| Ok(v))
    }

    /// A reduction `name(body, axes...)` combining `wrap(body)` with `op`
    /// (`wrap` is how `argmax` makes its keys; an `Err` names the type it
    /// cannot take).
    #[allow(clippy::too_many_arguments)]
    fn reduction_with(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        op: ReduceOp,
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
        wrap: &dyn Fn(Expr) -> Result<Expr, String>,
    ) -> Option<Expr> {
        let Some(red) = &self.red else {
            self.error(
                Diagnostic::new(
                    name_span,
                    format!(
                        "`{}` needs reduction axes, and the stage declares none",
                        name
                    ),
                )
                .hint("declare them in the stage: `reduce = { k = \"K\" }`"),
            );
            return None;
        };
        if red.inside {
            self.error(
                Diagnostic::new(span, "reductions do not nest")
                    .hint("compute the inner reduction in a stage of its own"),
            );
            return None;
        }
        if red.result.is_some() {
            self.error(
                Diagnostic::new(span, "a stage computes one reduction")
                    .hint("compute the other reduction in a stage of its own"),
            );
            return None;
        }
        let declared: Vec<(String, VarId)> = red.vars.clone();
        let Some((body, over)) = args.split_first() else {
            self.error(
                Diagnostic::new(
                    span,
                    format!("`{}` needs an expression and its reduction axes", name),
                )
                .hint(format!("`{}(A[i, k], k)`", name)),
            );
            return None;
        };
        let mut listed: Vec<&str> = Vec::new();
        for a in over {
            match &a.value.kind {
                AstKind::Name(n)
                    if declared.iter().any(|(r, _)| r == n) && !listed.contains(&n.as_str()) =>
                {
                    listed.push(n)
                }
                _ => {
                    self.error(
                        Diagnostic::new(a.value.span, "expected one of the stage's reduction axes")
                            .hint(format!(
                                "the stage reduces over: {}",
                                declared
                                    .iter()
                                    .map(|a| a.0.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                    );
                    return None;
                }
            }
        }
        if listed.len() != declared.len() {
            let missing: Vec<&str> = declared
                .iter()
                .map(|a| a.0.as_str())
                .filter(|n| !listed.contains(n))
                .collect();
            self.error(
                Diagnostic::new(
                    span,
                    format!(
                        "the reduction does not name the axes {}",
                        missing.join(", ")
                    ),
                )
                .hint("list every reduction axis the stage declares"),
            );
            return None;
        }
        let mut all = axes.to_vec();
        all.extend(declared);
        if let Some(r) = &mut self.red {
            r.inside = true;
        }
        let v = self.expr(k, &all, &body.value, hint);
        if let Some(r) = &mut self.red {
            r.inside = false;
        }
        let v = v?;
        if v.dtype.is_f8() {
            return self.f8_refused(&v, body.value.span, &format!("`{}`", name));
        }
        if v.dtype == DType::Bool {
            self.error(
                Diagnostic::new(
                    body.value.span,
                    format!("`{}` does not apply to bool values", name),
                )
                .hint("convert to an integer first, e.g. `i32(...)`"),
            );
            return None;
        }
        if matches!(op, ReduceOp::Or | ReduceOp::And) && !v.dtype.is_int() {
            self.error(
                Diagnostic::new(
                    body.value.span,
                    format!("`{name}` combines integer bits, not `{}` values", v.dtype),
                )
                .hint("convert to an integer first, e.g. `i32(...)`, or use `bitcast`"),
            );
            return None;
        }
        let v = match wrap(v) {
            Ok(v) => v,
            Err(what) => {
                self.error(
                    Diagnostic::new(
                        body.value.span,
                        format!("`{name}` of {what} values is not supported"),
                    )
                    .hint("convert them: f16, bf16 and f32 values, and i8, u8 and i32, are"),
                );
                return None;
            }
        };
        let t = v.dtype;
        if let Some(r) = &mut self.red {
            r.result = Some((op, v));
        }
        Some(Expr {
            kind: ExprKind::Reduced,
            dtype: t,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        if let Some(op) = scan::scan_op(name) {
            return self.scan_call(k, axes, op, name, args, span);
        }
        if let Some(a) = args.iter().find_map(|a| a.key.as_ref()) {
            self.error(Diagnostic::new(
                a.1,
                format!("`{name}` takes no named arguments"),
            ));
            return None;
        }
        let want = |cx: &mut Self, n: usize| {
            if args.len() != n {
                cx.error(Diagnostic::new(
                    span,
                    format!("`{name}` takes {n} argument(s), {} given", args.len()),
                ));
                false
            } else {
                true
            }
        };
        if let Some(t) = DType::parse(name) {
            if !want(self, 1) {
                return None;
            }
            let a = self.expr(k, axes, &args[0].value, Some(t))?;
            if t.is_f8() && a.dtype != t {
                self.error(
                    Diagnostic::new(span, format!("conversion to `{t}` is not supported"))
                        .label("8-bit floats are storage types for matrix-instruction inputs")
                        .hint(format!(
                            "give the kernel `{t}` inputs and convert them to a wider type"
                        )),
                );
                return None;
            }
            return Some(if a.dtype == t {
                a
            } else {
                Expr {
                    kind: ExprKind::Cast(Box::new(a)),
                    dtype: t,
                }
            });
        }
        if let Some(op) = ReduceOp::ALL.into_iter().find(|r| r.name() == name) {
            return self.reduction(k, axes, op, name_span, args, span, hint);
        }
        if let Some(r) = self.bit_function(k, axes, name, name_span, args, span) {
            return r;
        }
        match name {
            "select" => {
                if !want(self, 3) {
                    return None;
                }
                let c = self.expr(k, axes, &args[0].value, None)?;
                if c.dtype != DType::Bool {
                    self.error(
                        Diagnostic::new(
                            args[0].value.span,
                            format!("the condition of `select` must be bool, not `{}`", c.dtype),
                        )
                        .hint("compare, e.g. `x > 0`"),
                    );
                    return None;
                }
                let (a, b) = self.operands(k, axes, &args[1].value, &args[2].value, hint)?;
                if a.dtype != b.dtype {
                    self.error(Diagnostic::new(
                        span,
                        format!("`select` branches differ: `{}` and `{}`", a.dtype, b.dtype),
                    ));
                    return None;
                }
                let t = a.dtype;
                Some(Expr {
                    kind: ExprKind::Select(Box::new(c), Box::new(a), Box::new(b)),
                    dtype: t,
                })
            }
            "min" | "max" => {
                if !want(self, 2) {
                    return None;
                }
                let (a, b) = self.operands(k, axes, &args[0].value, &args[1].value, hint)?;
                self.binary(
                    if name == "min" {
                        BinOp::Min
                    } else {
                        BinOp::Max
                    },
                    a,
                    b,
                    span,
                )
            }
            _ => {
                let Some(f) = MathFn::ALL.into_iter().find(|f| f.name() == name) else {
                    let cands: Vec<&str> = MathFn::ALL
                        .iter()
                        .map(|f| f.name())
                        .chain([
                            "select", "min", "max", "isnan", "isinf", "bitcast", "argmax",
                            "argmin", "cumsum", "cumprod", "cummax", "cummin", "reduce",
                        ])
                        .chain(ReduceOp::ALL.iter().map(|r| r.name()))
                        .chain(DType::ALL.iter().map(|d| d.name()))
                        .collect();
                    self.error(
                        Diagnostic::new(name_span, format!("unknown function `{name}`"))
                            .suggest(name, cands),
                    );
                    return None;
                };
                if !want(self, f.arity()) {
                    return None;
                }
                let mut xs = Vec::new();
                let mut t = hint.filter(|t| t.is_float());
                for a in args {
                    let x = self.expr(k, axes, &a.value, t)?;
                    t = Some(x.dtype);
                    xs.push(x);
                }
                let t = xs[0].dtype;
                if t.is_f8() {
                    return self.f8_refused(&xs[0], span, &format!("`{name}`"));
                }
                if xs.iter().any(|x| x.dtype != t) {
                    self.error(Diagnostic::new(
                        span,
                        format!("arguments of `{name}` must have one dtype"),
                    ));
                    return None;
                }
                if !(t.is_float() || (f.accepts_int() && t.is_int())) {
                    self.error(
                        Diagnostic::new(
                            span,
                            format!("`{name}` needs a float argument, not `{t}`"),
                        )
                        .hint(format!("convert it, e.g. `{name}(f32(...))`")),
                    );
                    return None;
                }
                Some(Expr {
                    kind: ExprKind::Call(f, xs),
                    dtype: t,
                })
            }
        }
    }
}

/// Rounds a constant to what the dtype can hold.
pub fn round_to(v: f64, t: DType) -> f64 {
    match t {
        DType::F32 => v as f32 as f64,
        DType::F16 => crate::dtype::f64_to_f16(v).to_f64(),
        DType::BF16 => crate::dtype::f64_to_bf16(v).to_f64(),
        t => match t.f8_format() {
            Some(f) => f.decode(f.encode(v)),
            None => v,
        },
    }
}
