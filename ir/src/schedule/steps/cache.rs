//! `AS = cache_read(A, shared|local, at, pad=N, vec=W)` and `cache_write`: stage a tile of a tensor in LDS or registers at a loop.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let write = s.name == "cache_write";
    const EX: &str = "AS = cache_read(A, shared, ko)";
    let mut r = results(s, 1, EX)?;
    if s.args.len() < 3 || s.args.len() > 5 {
        return Err(Diagnostic::new(
            s.span,
            format!(
                "`{}` takes 3 to 5 arguments, {} given",
                s.name,
                s.args.len()
            ),
        )
        .hint(format!("write `{EX}`, optionally with `pad=1` and `vec=8`")));
    }
    let tensor = arg_name(&s.args[0], "the tensor to cache")?;
    let scope = arg_name(&s.args[1], "a memory scope such as `shared`")?;
    let local = match scope.name.as_str() {
            "shared" => false,
            "local" => true,
            _ => {
                return Err(Diagnostic::new(scope.span, format!("unknown scope `{}`", scope.name))
                    .hint("cache_read stages tiles in `shared` memory (LDS, per work-group) or `local` (registers, per thread)"))
            }
        };
    let at = arg_name(&s.args[2], "the loop at which to stage the tile")?;
    let (mut pad, mut vec) = (None, None);
    for a in &s.args[3..] {
        let key = a.key.as_ref().map(|k| k.0.as_str());
        let value = match &a.value.kind {
            AstKind::Int(v) => Some(*v),
            _ => None,
        };
        match key {
            Some("pad") if pad.is_none() => match value {
                Some(v) if (0..=64).contains(&v) => pad = Some(v),
                _ => {
                    return Err(Diagnostic::new(
                        a.value.span,
                        "pad must be an integer from 0 to 64",
                    ))
                }
            },
            Some("vec") if vec.is_none() => match value {
                Some(v @ (1 | 2 | 4 | 8 | 16)) => vec = Some(v),
                _ => return Err(Diagnostic::new(
                    a.value.span,
                    "vec must be 1, 2, 4, 8 or 16 elements",
                )
                .hint(
                    "a thread copies `vec` consecutive elements with one access of up to 16 bytes",
                )),
            },
            Some(k @ ("pad" | "vec")) => {
                return Err(Diagnostic::new(a.value.span, format!("`{k}` given twice")))
            }
            _ => return Err(Diagnostic::new(a.value.span, "expected `pad=N` or `vec=N`")),
        }
    }
    let (pad, vec) = (pad.unwrap_or(0), vec.unwrap_or(1));
    if vec > 1 && (write || local) {
        return Err(Diagnostic::new(
            s.span,
            "`vec` applies to `cache_read(..., shared, ...)` tiles only",
        ));
    }
    Ok(StepKind::Cache {
        tensor,
        at,
        pad,
        vec,
        kind: CacheKind::of(write, local),
        result: r.remove(0),
    })
}

pub(crate) fn apply(
    st: &mut State,
    tensor: &Name,
    at: &Name,
    (pad, vec): (i64, i64),
    kind: CacheKind,
    result: &Name,
    span: Span,
) -> Result<(), Diagnostic> {
    let Some(t) = st.k.tensors.iter().position(|x| x.name == tensor.name) else {
        return Err(
            Diagnostic::new(tensor.span, format!("unknown tensor `{}`", tensor.name))
                .suggest(&tensor.name, st.k.tensors.iter().map(|t| t.name.as_str())),
        );
    };
    if kind.write() && st.stage_output != Some(crate::TensorId(t as u32)) {
        return Err(Diagnostic::new(
            tensor.span,
            format!(
                "cache_write stages the stage's own output, not `{}`",
                tensor.name
            ),
        ));
    }
    let v = st.lookup(at)?;
    st.fresh(result)?;
    st.nest.caches.push(Cache {
        tensor: crate::TensorId(t as u32),
        at: v,
        pad,
        vec,
        kind,
        name: result.name.clone(),
        span,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::nest;
    use crate::schedule::CacheKind;

    #[test]
    fn caches_name_a_tensor_a_scope_and_a_loop() {
        let n = nest(&["AS = cache_read(A, shared, r, pad=1)"]);
        // `A` is read through the inlined stage `T`: the cache is recorded here, placed by lowering.
        let n = n.unwrap();
        assert_eq!(n.caches[0].kind, CacheKind::ReadShared);
        assert_eq!(n.caches[0].pad, 1);
        let e = nest(&["AS = cache_read(Q, shared, r)"]).unwrap_err();
        assert!(e.contains("unknown tensor `Q`"), "{e}");
        let e = nest(&["AS = cache_read(A, global, r)"]).unwrap_err();
        assert!(e.contains("unknown scope `global`"), "{e}");
        let e = nest(&["AS = cache_write(A, shared, r)"]).unwrap_err();
        assert!(e.contains("stages the stage's own output"), "{e}");
    }
}
