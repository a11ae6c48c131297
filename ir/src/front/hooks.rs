//! What templates ([`crate::templates`]) add to the front end, and the
//! little of the checking context a template's spelling needs.
//!
//! The front end names no template: the crate's entry points
//! ([`crate::parse_kernel`]) hand it [`Templates`], so a template's folder
//! may use the front end without the front end depending on it.

use super::tuple::Axes;
use super::{Cx, RedCx, StageDecl};
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::VarId;
use crate::kernel::{Axis, Expr, ExprKind, Kernel, ReduceOp, Stage};
use crate::syntax::{Arg, Ast, ComputeStmt};
use toml::Spanned;

/// A call to a template by name, as in `cumsum(X[r, c], c)`: `None` where
/// `name` is not the template's, else the call's value (`Some(None)` once
/// its error is reported).
pub(crate) type Call = fn(&mut Cx, &Kernel, &[(String, VarId)], CallSite) -> Option<Option<Expr>>;

/// A call in an expression: the function's name and where it and the
/// whole call are, and its arguments.
#[derive(Clone, Copy)]
pub(crate) struct CallSite<'a> {
    pub name: &'a str,
    pub name_span: Span,
    pub args: &'a [Arg],
    pub span: Span,
}

/// A stage whose whole value is one call to a template (`V[r, j], I[r, j]
/// = topk(X[r, c], c)`): checks the stage and adds it, with its tensors,
/// to the kernel. `names` are the names declared so far.
pub(crate) type StageForm = fn(
    &mut Cx,
    &mut Kernel,
    names: &mut Vec<(String, Span)>,
    &Spanned<StageDecl>,
    &ComputeStmt,
    Axes,
);

/// The templates' hooks into the front end.
pub(crate) struct Templates {
    /// The kernel language's spellings of templates.
    pub call: Call,
    /// The stage forms, by the name of the call that is the stage's value.
    pub stage: fn(&str) -> Option<StageForm>,
    /// Every name the spellings use, for the "did you mean" of an unknown
    /// function.
    pub names: fn() -> Vec<&'static str>,
    /// Marks a stage as the template whose definition it writes out (see
    /// [`crate::templates::Template::recognise`]); the template's name.
    pub recognise: fn(&Kernel, &mut Stage) -> Option<&'static str>,
    /// The templates' default rules, which the front end hands to the
    /// rules it asks ([`crate::schedule::default::RuleCx::templates`]).
    pub rules: crate::schedule::default::TemplateRules,
    /// Once every stage is checked: makes the templates written out over
    /// several stages (an attention's five) the template, absorbing the
    /// stages it computes; the stages rewritten, to schedule afresh.
    pub rewrite: fn(&mut Kernel) -> Vec<usize>,
}

/// The front end with no template: a scan call is an unknown function and
/// a triangular reduction stays one. For tests of the front end alone.
#[cfg(test)]
pub(crate) const NONE: Templates = Templates {
    call: |_, _, _, _| None,
    stage: |_| None,
    names: Vec::new,
    recognise: |_, _| None,
    rules: |_, _, _| None,
    rewrite: |_| Vec::new(),
};

impl Cx<'_> {
    /// Reports `d` with the kernel's other errors.
    pub(crate) fn report(&mut self, d: Diagnostic) {
        self.error(d);
    }

    /// Whether the stage being checked has its reduction already (a
    /// template call is then a second one).
    pub(crate) fn reducing(&self) -> bool {
        self.red.is_some()
    }

    /// A template's operand: a value expression of `axes` in which no
    /// reduction may appear.
    pub(crate) fn plain_value(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        ast: &Ast,
    ) -> Option<Expr> {
        self.red = Some(RedCx {
            vars: Vec::new(),
            result: None,
            inside: true,
            axes: None,
        });
        let v = self.expr(k, axes, ast, None);
        self.red = None;
        v
    }

    /// Makes the stage's reduction `op` of `body` over `axes`, as the
    /// template's definition writes it out; the value that stands for its
    /// result in the stage's expression.
    pub(crate) fn reduce_over(&mut self, op: ReduceOp, body: Expr, axes: Vec<Axis>) -> Expr {
        let dtype: DType = body.dtype;
        self.red = Some(RedCx {
            vars: Vec::new(),
            result: Some((op, body)),
            inside: false,
            axes: Some(axes),
        });
        Expr {
            kind: ExprKind::Reduced,
            dtype,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::ReduceOp;

    fn parse(src: &str) -> Result<crate::Kernel, crate::KernelError> {
        let rules = super::super::RulesFor::default();
        super::super::parse_kernel_for("k.toml", src, &[], 2, rules, &super::NONE).map(|(k, _)| k)
    }

    const HEAD: &str = "[kernel]\nname = \"k\"\nsizes = [\"N\"]\n\n[inputs]\nX = { dtype = \"f32\", shape = [\"N\"] }\n\n[[stage]]\nshape = [\"N\"]\n";

    #[test]
    fn without_templates_a_scan_call_is_an_unknown_function() {
        let e = parse(&format!("{HEAD}compute = \"Y[i] = cumsum(X[i], i)\"\n")).unwrap_err();
        assert!(
            e.render().contains("unknown function `cumsum`"),
            "{}",
            e.render()
        );
    }

    #[test]
    fn without_templates_a_triangular_sum_stays_a_plain_sum() {
        let src =
            format!("{HEAD}compute = \"Y[i] = sum(X[j], j)\"\nreduce = {{ j = \"i + 1\" }}\n");
        let k = parse(&src).unwrap_or_else(|e| panic!("{}", e.render()));
        assert_eq!(
            k.stages[0].reduce().and_then(|r| r.plain()),
            Some(ReduceOp::Sum)
        );
        let k = crate::parse_kernel("k.toml", &src).unwrap();
        assert!(k.stages[0].reduce().and_then(|r| r.scan()).is_some());
    }
}
