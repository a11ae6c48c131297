//! `privatize(H)`: a scatter stage's work-groups each accumulate into a
//! copy of the whole output in LDS (filled with the operation's identity),
//! then combine that copy into memory with one atomic per element: the
//! work-group-local histogram. Contended updates (256 bins hit by every
//! thread) then meet in LDS, and memory sees one update per bin per
//! work-group. The output's shape must be constant and fit in LDS.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "privatize(H)";
    results(s, 0, EX)?;
    arity(s, 1, EX)?;
    Ok(StepKind::Privatize(arg_name(
        &s.args[0],
        "the scatter's output tensor",
    )?))
}

pub(crate) fn apply(st: &mut State, tensor: &Name, span: Span) -> Result<(), Diagnostic> {
    let out = st.stage_output.map(|t| st.k.tensor(t));
    let Some(out) = out.filter(|_| st.scatter) else {
        return Err(
            Diagnostic::new(span, "`privatize` is for scatter stages").hint(
                "a scatter combines into its output: `H[X[i]] += 1` with `over = { i = \"n\" }`",
            ),
        );
    };
    if tensor.name != out.name {
        return Err(Diagnostic::new(
            tensor.span,
            format!("`{}` is not this stage's output", tensor.name),
        )
        .hint(format!("write `privatize({})`", out.name)));
    }
    if out.shape.iter().any(|e| e.as_const().is_none()) {
        return Err(Diagnostic::new(
            span,
            format!(
                "`{}` has a symbolic shape; an LDS copy needs a constant one",
                out.name
            ),
        )
        .hint("give the scatter's output a constant shape, e.g. shape = [256]"));
    }
    let bytes: i64 = out
        .shape
        .iter()
        .filter_map(|e| e.as_const())
        .product::<i64>()
        * out.dtype.size() as i64;
    if bytes > rocmc_target::hardware::MAX_LDS_PER_WORKGROUP as i64 {
        return Err(Diagnostic::new(
            span,
            format!(
                "an LDS copy of `{}` takes {bytes} bytes, more than any GPU's LDS ({} bytes)",
                out.name,
                rocmc_target::hardware::MAX_LDS_PER_WORKGROUP
            ),
        )
        .hint("privatize outputs of a few thousand elements (a histogram's bins); scatter larger ones directly"));
    }
    if let Some(first) = st.nest.privatized {
        let first = st.src.get(first.start..first.end).unwrap_or("");
        return Err(Diagnostic::new(span, "`privatize` given twice")
            .hint(format!("keep one; the first is `{first}`")));
    }
    st.nest.privatized = Some(span);
    Ok(())
}
