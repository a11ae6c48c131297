//! `flash(j, rows=BM, keys=BN, stages=S)`.

use super::*;

/// What `flash` asked for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tiles {
    pub rows: u32,
    pub keys: u32,
    pub stages: u32,
}

pub(super) fn build(
    _l: &mut Lowering,
    _a: &Attention,
    _t: Tiles,
    span: Span,
) -> Result<(), Diagnostic> {
    Err(Diagnostic::new(span, "`flash` is not built yet"))
}
