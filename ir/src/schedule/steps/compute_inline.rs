//! `compute_inline()`: this stage is substituted into its readers.

use crate::diag::Diagnostic;
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    results(s, 0, "compute_inline()")?;
    arity(s, 0, "compute_inline()")?;
    Ok(StepKind::ComputeInline)
}

#[cfg(test)]
mod tests {
    use crate::syntax::parse_step;

    #[test]
    fn takes_no_arguments() {
        let s = parse_step("compute_inline()", 0).unwrap();
        assert_eq!(
            super::parse(&s),
            Ok(crate::schedule::StepKind::ComputeInline)
        );
        let s = parse_step("compute_inline(r)", 0).unwrap();
        assert!(super::parse(&s).is_err());
    }
}
