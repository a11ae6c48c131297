//! The `[kernel]` and `[tune]` tables: sizes (with their bounds and
//! `divisible` facts), tensors, dtypes and shapes, tunable parameters.

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{IOp, Index, SizeId, VarId};
use crate::kernel::*;
use crate::schedule::{self};
use crate::syntax::{self, Ast, AstKind, BinaryOp};
use toml::Spanned;

impl<'s> Cx<'s> {
    /// `[tune]`: the space, and the configuration to parse the schedules
    /// with (into `self.config`). Parameter names join `names`.
    pub(super) fn tune(
        &mut self,
        decl: Option<&TuneDecl>,
        names: &mut Vec<(String, Span)>,
    ) -> Option<crate::tune::Tuning> {
        use crate::tune::TuneSpace;
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
            if let Some(param) = self.tune_param(name, p) {
                space.params.push(param);
            }
        }
        let defaults = space.default_config();
        self.constraints(decl, &defaults, &mut space);
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

    /// One `[tune]` parameter: exactly one of `values`, `pow2` or
    /// `range`, giving candidates that include the default.
    fn tune_param(
        &mut self,
        name: &Spanned<String>,
        p: &Spanned<TuneParamDecl>,
    ) -> Option<crate::tune::TuneParam> {
        use crate::tune::TuneParam;
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
            return None;
        }
        if let (Some(st), None) = (&d.step, &d.range) {
            self.error(Diagnostic::new(span_of(st), "`step` goes with `range`"));
            return None;
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
            let (lo, hi) = bounds(r, self)?;
            (0..31)
                .map(|e| 1i64 << e)
                .filter(|v| (lo..=hi).contains(v))
                .collect()
        } else {
            let r = d.range.as_ref().unwrap();
            let (lo, hi) = bounds(r, self)?;
            let step = d.step.as_ref().map_or(1, |s| *s.get_ref());
            if step < 1 || (hi - lo) / step >= 4096 {
                self.error(Diagnostic::new(
                    d.step.as_ref().map_or(span_of(r), span_of),
                    format!("a step of {step} over [{lo}, {hi}]: it must be at least 1 and give at most 4096 values"),
                ));
                return None;
            }
            (lo..=hi).step_by(step as usize).collect()
        };
        if values.is_empty() {
            self.error(Diagnostic::new(
                span_of(p),
                format!("tune parameter `{}` has no candidates", name.get_ref()),
            ));
            return None;
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
            return None;
        }
        Some(TuneParam {
            name: name.get_ref().clone(),
            values,
            default: def,
            span: span_of(name),
        })
    }

    /// The `[tune]` constraints, each checked on the default configuration.
    fn constraints(
        &mut self,
        decl: &TuneDecl,
        defaults: &crate::tune::Config,
        space: &mut crate::tune::TuneSpace,
    ) {
        use crate::tune::Constraint;
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
            match crate::tune::eval(&ast, defaults) {
                Ok(0) => self.error(
                    Diagnostic::new(
                        span_of(c),
                        format!(
                            "the default configuration ({}) breaks this constraint",
                            crate::tune::describe(defaults)
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
    }

    /// Checks every stage in order, then makes the templates written out
    /// over several stages the template ([`Self::rewrite_templates`]).
    fn stages(
        &mut self,
        k: &mut Kernel,
        names: &mut Vec<(String, Span)>,
        decls: &[Spanned<StageDecl>],
    ) {
        for st in decls {
            let before = k.stages.len();
            self.stage(k, names, st);
            let declared = st.get_ref().output.as_ref().is_some_and(|o| *o.get_ref());
            if declared && k.stages.len() > before {
                k.kept.extend(k.stages[before..].iter().map(|s| s.output));
            }
        }
        self.kept_stay_in_memory(k);
        if self.diags.is_empty() {
            self.rewrite_templates(k);
        }
    }

    pub(super) fn kernel(&mut self, doc: Doc) -> Option<Kernel> {
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
        self.version_bounds(&mut sizes);
        let mut k = Kernel {
            name: kname,
            sizes,
            tensors: Vec::new(),
            params: Vec::new(),
            stages: Vec::new(),
            tuning: None,
            kept: Vec::new(),
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
        self.stages(&mut k, &mut names, &doc.stage);
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

    /// A declared output inlined by the file's own schedule would never
    /// reach memory: refused, naming the step. Computed at another
    /// stage's loop, it is stored from there as it is computed.
    fn kept_stay_in_memory(&mut self, k: &Kernel) {
        for st in k.stages.iter().filter(|s| k.kept.contains(&s.output)) {
            let step = st
                .schedule
                .iter()
                .find(|s| matches!(s.kind, schedule::StepKind::ComputeInline));
            if let Some(step) = step {
                self.error(
                    Diagnostic::new(
                        step.span,
                        format!(
                            "`{}` is declared an output (`output = true`): inlined into its readers it would never be stored",
                            st.name
                        ),
                    )
                    .hint("drop this step (`compute_at` keeps it stored), or `output = true`"),
                );
            }
        }
    }

    /// The size `name` of a `[kernel]` table (`max`, `divisible`), or an
    /// error suggesting the declared sizes.
    pub(super) fn declared_size<'v>(
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

    /// The sizes taken at most the bounds a version for small sizes is
    /// written under ([`super::RulesFor::bounds`]).
    fn version_bounds(&self, sizes: &mut [SizeVar]) {
        for (name, bound) in self.rules.bounds {
            if let Some(sv) = sizes.iter_mut().find(|s| s.name == *name) {
                sv.max = sv.max.min(*bound);
            }
        }
    }

    /// `[kernel] divisible`: each named size's divisor, between 1 and its maximum.
    pub(super) fn divisible(&mut self, kdecl: &KernelDecl, sizes: &mut [SizeVar]) {
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

    pub(super) fn dtype(&mut self, s: &Spanned<String>) -> Option<DType> {
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

    pub(super) fn shape(
        &mut self,
        k: &Kernel,
        shape: &Spanned<Vec<Spanned<Extent>>>,
    ) -> Option<Vec<Index>> {
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
    pub(super) fn extent(&mut self, k: &Kernel, e: &Spanned<Extent>) -> Option<Index> {
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
    pub(super) fn size_expr(&mut self, k: &Kernel, ast: &Ast) -> Option<Index> {
        let vars: Vec<(String, VarId)> = Vec::new();
        self.index(
            k,
            &vars,
            ast,
            "an extent is an integer expression of sizes and constants",
        )
    }

    /// Converts an AST to an index expression over sizes and the given vars.
    pub(super) fn index(
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
                let d = self.outside_its_reduction(n, d);
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
}
