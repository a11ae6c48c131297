//! `compute_at(Y, r)`: this stage is computed inside stage `Y` at its loop `r` (lowering places it).

use crate::diag::Diagnostic;
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "compute_at(Y, r)";
    results(s, 0, EX)?;
    arity(s, 2, EX)?;
    Ok(StepKind::ComputeAt {
        consumer: arg_name(&s.args[0], "the stage that reads this one")?,
        at: arg_name(&s.args[1], "a loop of that stage")?,
    })
}

#[cfg(test)]
mod tests {
    use crate::syntax::parse_step;

    #[test]
    fn names_a_stage_and_a_loop() {
        let s = parse_step("compute_at(Y, r)", 0).unwrap();
        assert!(matches!(
            super::parse(&s),
            Ok(crate::schedule::StepKind::ComputeAt { .. })
        ));
        let s = parse_step("compute_at(Y)", 0).unwrap();
        assert!(super::parse(&s).is_err());
    }
}
