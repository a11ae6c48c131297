//! `AS = cache_read(A, shared|local, at, pad=N, vec=W, prefetch=1)` and `cache_write`: stage a tile of a tensor in LDS or registers at a loop.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let write = s.name == "cache_write";
    const EX: &str = "AS = cache_read(A, shared, ko)";
    let mut r = results(s, 1, EX)?;
    if s.args.len() < 3 || s.args.len() > 6 {
        return Err(Diagnostic::new(
            s.span,
            format!(
                "`{}` takes 3 to 6 arguments, {} given",
                s.name,
                s.args.len()
            ),
        )
        .hint(format!(
            "write `{EX}`, optionally with `pad=1`, `vec=8` and `prefetch=1`"
        )));
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
    let (mut pad, mut vec, mut prefetch) = (None, None, None);
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
            Some("prefetch") if prefetch.is_none() => match value {
                Some(v @ (0 | 1)) => prefetch = Some(v == 1),
                _ => return Err(Diagnostic::new(a.value.span, "prefetch must be 0 or 1")),
            },
            Some(k @ ("pad" | "vec" | "prefetch")) => {
                return Err(Diagnostic::new(a.value.span, format!("`{k}` given twice")))
            }
            _ => {
                return Err(Diagnostic::new(
                    a.value.span,
                    "expected `pad=N`, `vec=N` or `prefetch=1`",
                ))
            }
        }
    }
    let (pad, vec, prefetch) = (
        pad.unwrap_or(0),
        vec.unwrap_or(1),
        prefetch.unwrap_or(false),
    );
    if (vec > 1 || prefetch) && (write || local) {
        return Err(Diagnostic::new(
            s.span,
            "`vec` and `prefetch` apply to `cache_read(..., shared, ...)` tiles only",
        ));
    }
    Ok(StepKind::Cache {
        tensor,
        at,
        pad,
        vec,
        prefetch,
        kind: CacheKind::of(write, local),
        result: r.remove(0),
    })
}

pub(crate) fn apply(
    st: &mut State,
    tensor: &Name,
    at: &Name,
    (pad, vec, prefetch): (i64, i64, bool),
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
        prefetch,
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
