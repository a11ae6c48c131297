//! `AS = cache_read(A, shared|local, at, pad=N, vec=W, prefetch=1, stages=S, swizzle=128|64|32, tma=1, unroll=U, transpose=1, dtype=T)` and `cache_write`: stage a tile of a tensor in LDS or registers at a loop.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let write = s.name == "cache_write";
    const EX: &str = "AS = cache_read(A, shared, ko)";
    let mut r = results(s, 1, EX)?;
    if s.args.len() < 3 || s.args.len() > 10 {
        return Err(Diagnostic::new(
            s.span,
            format!(
                "`{}` takes 3 to 10 arguments, {} given",
                s.name,
                s.args.len()
            ),
        )
        .hint(format!(
            "write `{EX}`, optionally with `pad=1`, `vec=8`, `prefetch=1` and `stages=3`"
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
    let (mut pad, mut vec, mut prefetch, mut stages, mut swizzle, mut tma, mut unroll) =
        (None, None, None, None, None, None, None);
    let (mut transpose, mut dtype) = (None, None);
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
            Some("stages") if stages.is_none() => match value {
                Some(v @ 1..=MAX_STAGES) => stages = Some(v as u32),
                _ => {
                    return Err(Diagnostic::new(
                        a.value.span,
                        format!("stages must be an integer from 1 to {MAX_STAGES}"),
                    )
                    .hint("`stages=N` keeps N buffers of the tile, N - 1 of them being filled while one is read"))
                }
            },
            Some("swizzle") if swizzle.is_none() => match value {
                Some(v @ (32 | 64 | 128)) => swizzle = Some(v),
                _ => {
                    return Err(Diagnostic::new(
                        a.value.span,
                        "swizzle must be 128, 64 or 32 (the bytes of a row; at 128, chunk `c` of row `r` at `c ^ r % 8`)",
                    ))
                }
            },
            Some("tma") if tma.is_none() => match value {
                Some(v @ (0 | 1)) => tma = Some(v == 1),
                _ => {
                    return Err(Diagnostic::new(a.value.span, "tma must be 0 or 1")
                        .hint("`tma=1` fills the tile with the tensor memory accelerator (sm_90a)"))
                }
            },
            Some("unroll") if unroll.is_none() => match value {
                Some(v @ 1..=8) => unroll = Some(v as u32),
                _ => {
                    return Err(Diagnostic::new(a.value.span, "unroll must be an integer from 1 to 8")
                        .hint("`unroll=4` runs four of a thread's copies of a row of run-time length at a time"))
                }
            },
            Some("transpose") if transpose.is_none() => match value {
                Some(v @ (0 | 1)) => transpose = Some(v == 1),
                _ => {
                    return Err(Diagnostic::new(a.value.span, "transpose must be 0 or 1")
                        .hint("`transpose=1` keeps the tile's last two dimensions swapped in LDS"))
                }
            },
            Some("dtype") if dtype.is_none() => dtype = Some(tile_dtype(a)?),
            Some(k @ ("pad" | "vec" | "prefetch" | "stages" | "swizzle" | "tma" | "unroll" | "transpose" | "dtype")) => {
                return Err(Diagnostic::new(a.value.span, format!("`{k}` given twice")))
            }
            _ => {
                return Err(Diagnostic::new(
                    a.value.span,
                    "expected `pad=N`, `vec=N`, `prefetch=1`, `stages=N`, `swizzle=128`, `tma=1`, `unroll=N`, `transpose=1` or `dtype=f16`",
                ))
            }
        }
    }
    let opts = CopyOpts {
        pad: pad.unwrap_or(0),
        vec: vec.unwrap_or(1),
        prefetch: prefetch.unwrap_or(false),
        stages: stages.unwrap_or(1),
        swizzle,
        tma: tma.unwrap_or(false),
        unroll: unroll.unwrap_or(1),
        transpose: transpose.unwrap_or(false),
        dtype,
    };
    check_opts(s, &opts, write, local)?;
    Ok(StepKind::Cache {
        tensor,
        at,
        opts,
        kind: CacheKind::of(write, local),
        result: r.remove(0),
    })
}

/// The element type named by `dtype=`.
fn tile_dtype(a: &crate::syntax::Arg) -> Result<crate::DType, Diagnostic> {
    let name = match &a.value.kind {
        AstKind::Name(n) => n.as_str(),
        _ => "",
    };
    crate::DType::parse(name).ok_or_else(|| {
        let d = Diagnostic::new(
            a.value.span,
            "dtype must name an element type such as `f16`",
        );
        match crate::DType::from_synonym(name) {
            Some(t) => d.hint(format!("did you mean `{t}`?")),
            None => {
                d.hint("the tile holds its elements converted to it: `dtype=f16`, `bf16` or `f32`")
            }
        }
    })
}

/// The combinations of copy options that cannot go together, refused
/// naming why.
fn check_opts(s: &StepStmt, opts: &CopyOpts, write: bool, local: bool) -> Result<(), Diagnostic> {
    if opts.tma && (opts.swizzle.is_none() || opts.stages < 2 || opts.prefetch) {
        return Err(Diagnostic::new(
            s.span,
            "`tma=1` fills multi-buffered, swizzled LDS tiles: it needs `swizzle=128` (or 64, 32) and `stages=N` (N >= 2)",
        )
        .hint("the tensor memory accelerator writes the swizzled layouts, and each buffer's mbarrier tells its readers when it has landed"));
    }
    if opts.swizzle.is_some() && (write || local || opts.pad != 0) {
        return Err(Diagnostic::new(
            s.span,
            "`swizzle=` lays out `cache_read(..., shared, ...)` tiles without `pad`",
        )
        .hint("the swizzle already spreads a column's rows over the banks, which is what `pad` is for"));
    }
    if (opts.prefetch || opts.stages > 1) && (write || local) {
        return Err(Diagnostic::new(
            s.span,
            "`prefetch` and `stages` apply to `cache_read(..., shared, ...)` tiles only",
        ));
    }
    if opts.vec > 1 && write {
        return Err(Diagnostic::new(
            s.span,
            "`vec` applies to `cache_read` tiles only (in LDS or registers)",
        ));
    }
    if opts.unroll > 1 && (write || opts.prefetch || opts.stages > 1 || opts.tma) {
        return Err(Diagnostic::new(
            s.span,
            "`unroll` applies to plain `cache_read` copies (no `prefetch`, `stages` or `tma`)",
        )
        .hint("a pipelined copy already overlaps its loads with the computation"));
    }
    if opts.transpose
        && (write
            || local
            || opts.swizzle.is_some()
            || opts.tma
            || opts.stages > 1
            || opts.unroll > 1)
    {
        return Err(Diagnostic::new(
            s.span,
            "`transpose=1` applies to plain or `prefetch=1` `cache_read(..., shared, ...)` tiles (no `swizzle`, `tma`, `stages` or `unroll`)",
        )
        .hint("a transposed tile is written an element at a time, which the asynchronous and accelerated copies do not do"));
    }
    if opts.dtype.is_some() && (write || opts.tma) {
        return Err(Diagnostic::new(
            s.span,
            "`dtype=` converts what a `cache_read` copies (not with `tma=1`, whose copy no thread sees)",
        )
        .hint("a converted tile goes through each thread's registers on its way into LDS"));
    }
    if opts.prefetch && opts.stages > 1 && opts.dtype.is_none() {
        return Err(Diagnostic::new(
            s.span,
            "`prefetch` and `stages` are two ways of overlapping the copy with the computation; choose one",
        )
        .hint("`stages=2` double-buffers the tile in LDS without holding the next one in registers; with `dtype=` (a converted tile, which asynchronous copies cannot fill) `prefetch=1, stages=N` keeps N buffers of the registers' stores"));
    }
    Ok(())
}

/// The most buffers `stages=` may ask for.
const MAX_STAGES: i64 = 8;

pub(crate) fn apply(
    st: &mut State,
    tensor: &Name,
    at: &Name,
    opts: CopyOpts,
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
    let held = st.k.tensors[t].dtype;
    if let Some(d) = opts.dtype.filter(|d| !d.holds_exactly(held)) {
        return Err(Diagnostic::new(
            span,
            format!(
                "`dtype={d}` would change values of `{}` ({held}): a tile converts only where every value stays the same",
                tensor.name
            ),
        )
        .hint("8-bit integers and floats go into f16, bf16 or f32; a float into a wider one"));
    }
    let v = st.lookup(at)?;
    st.fresh(result)?;
    st.nest.caches.push(Cache {
        tensor: crate::TensorId(t as u32),
        at: v,
        pad: opts.pad,
        vec: opts.vec,
        prefetch: opts.prefetch,
        stages: opts.stages,
        swizzle: opts.swizzle,
        tma: opts.tma,
        unroll: opts.unroll,
        transpose: opts.transpose,
        dtype: opts.dtype,
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

    #[test]
    fn copies_run_in_runs_of_one_to_eight() {
        let n = nest(&["AS = cache_read(A, shared, r, vec=4, unroll=4)"]).unwrap();
        assert_eq!(n.caches[0].unroll, 4);
        let n = nest(&["AS = cache_read(A, shared, r)"]).unwrap();
        assert_eq!(n.caches[0].unroll, 1);
        let e = nest(&["AS = cache_read(A, shared, r, unroll=9)"]).unwrap_err();
        assert!(e.contains("unroll must be an integer from 1 to 8"), "{e}");
        let n = nest(&["AS = cache_read(A, local, r, unroll=2)"]).unwrap();
        assert_eq!(n.caches[0].unroll, 2);
        let e = nest(&["AS = cache_read(A, shared, r, prefetch=1, unroll=2)"]).unwrap_err();
        assert!(e.contains("`unroll` applies to plain"), "{e}");
        let e = nest(&["AS = cache_read(A, shared, r, unroll=2, unroll=2)"]).unwrap_err();
        assert!(e.contains("`unroll` given twice"), "{e}");
    }

    /// `dtype=` converts only where every value of the tensor (f32 here)
    /// stays the same, names the type, and reads only.
    #[test]
    fn tiles_convert_only_exactly() {
        let n = nest(&["AS = cache_read(A, shared, r, dtype=f64)"]).unwrap();
        assert_eq!(n.caches[0].dtype, Some(crate::DType::F64));
        assert_eq!(
            nest(&["AS = cache_read(A, shared, r)"]).unwrap().caches[0].dtype,
            None
        );
        let e = nest(&["AS = cache_read(A, shared, r, dtype=f16)"]).unwrap_err();
        assert!(
            e.contains("`dtype=f16` would change values of `A` (f32)"),
            "{e}"
        );
        let e = nest(&["AS = cache_read(A, shared, r, dtype=half)"]).unwrap_err();
        assert!(
            e.contains("dtype must name an element type") && e.contains("`f16`"),
            "{e}"
        );
        let e = nest(&["AS = cache_read(A, shared, r, dtype=f64, dtype=f64)"]).unwrap_err();
        assert!(e.contains("`dtype` given twice"), "{e}");
        let e = nest(&["YS = cache_write(Y, shared, r, dtype=f64)"]).unwrap_err();
        assert!(
            e.contains("`dtype=` converts what a `cache_read` copies"),
            "{e}"
        );
    }
}
