//! Parts over loops of symbolic extent (issue 31, item 5): a row whose
//! length is a run-time size, staged in LDS by `cache_read` or computed
//! there by `compute_at`, sized by the size's bound (`[kernel] max`) and
//! filled only as far as the loops reach. Rule `row-chain` stages a row
//! that fits 16 KiB on its own.

use crate::common::*;
use std::collections::HashMap;

fn kernels() -> Vec<(String, String)> {
    let v = kernel_files("bounded");
    assert!(v.len() >= 3, "tests/bounded/ lost its kernels");
    v
}

fn max_cols(src: &str) -> i64 {
    let f = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}"));
    f.kernel.sizes[1].max as i64
}

#[test]
fn bounded_parts_agree_with_the_interpreter_on_the_cpu() {
    for (name, src) in kernels() {
        let front = rocmc::frontend(&format!("{name}.toml"), &src).unwrap();
        let top = max_cols(&src);
        // Rows shorter than a thread's step, ragged, at the bound, and
        // (softmax_row_runs) a last run of copies partly past the tile.
        for (rows, cols) in [
            (3, 1),
            (5, 257),
            (2, top),
            (4, top - 1),
            (1, 33),
            (2, top - 200),
        ] {
            let cmp = rocmc::run::run_cpu(&front, &[rows, cols], &HashMap::new(), 3, false)
                .unwrap_or_else(|e| panic!("{name} at {rows}x{cols}: {e}"));
            for c in &cmp {
                assert!(
                    c.ok(),
                    "{name} at {rows}x{cols}: {} off by {}",
                    c.tensor,
                    c.max_error
                );
            }
        }
    }
    // The lowered loops as a GPU runs them (barriers, threads) in the interpreter.
    let no_params: Vec<_> = kernels()
        .into_iter()
        .filter(|(_, src)| !src.contains("[params]"))
        .collect();
    check_lowered(&no_params, &[1, 2, 37]);
}

#[test]
fn bounded_parts_compile_for_every_target() {
    compile_everywhere(
        &kernels(),
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_80", "sm_90"],
    );
}

fn loops_of(name: &str, src: &str) -> String {
    rocmc::compile(
        name,
        src,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .loops
}

/// The LDS arrays take the bound's length; the copy runs to what the
/// loops reach (`cols` rounded up to the threads), not to the bound.
#[test]
fn parts_are_sized_by_the_bound_and_filled_to_the_reach() {
    let src = std::fs::read_to_string(root().join("tests/bounded/softmax_row_lds.toml")).unwrap();
    let loops = loops_of("softmax_row_lds", &src);
    // 3000 columns rounded up to 128 threads: 3072.
    assert!(loops.contains("XS: f32[3072]"), "{loops}");
    assert!(
        loops.contains("for XS_copy in 0..ceil(((ceil(cols / 128) * 128) / 4) / 128)"),
        "{loops}"
    );
    // Every pass over the row reads the tile; X is read once, by the copy.
    assert_eq!(loops.matches("X[").count(), 1, "{loops}");
    let src = std::fs::read_to_string(root().join("tests/bounded/softmax_exp_part.toml")).unwrap();
    let loops = loops_of("softmax_exp_part", &src);
    assert!(loops.contains("E_part: f32[2048]"), "{loops}");
    assert!(loops.contains("ceil(cols / 256) * 256"), "{loops}");
    assert_eq!(loops.matches("exp(").count(), 1, "{loops}");
}

fn steps_of(src: &str) -> Vec<String> {
    let f = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}"));
    let last = f.kernel.stages.last().unwrap();
    let d = last.default.as_ref().expect("a default schedule");
    assert_eq!(d.rule, "row-chain");
    d.steps.clone()
}

#[test]
fn the_row_chain_rule_stages_a_row_that_fits() {
    let src = std::fs::read_to_string(root().join("tests/bounded/layernorm_rows.toml")).unwrap();
    let staged = "X_row = cache_read(X, shared, r, vec=4)";
    assert!(steps_of(&src).iter().any(|s| s == staged));
    // A knob turns it off.
    let off = rocmc::frontend_with("k.toml", &src, &[("Y_ROW_LDS".into(), 0)])
        .map(|f| {
            f.kernel
                .stages
                .last()
                .unwrap()
                .default
                .clone()
                .unwrap()
                .steps
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!off.iter().any(|s| s.contains("cache_read")), "{off:?}");
    // 16384 columns (64 KiB) is over the rule's budget; no bound at all too.
    let wide = src.replace("cols = 4096", "cols = 16384");
    assert!(!steps_of(&wide).iter().any(|s| s.contains("cache_read")));
    let unbounded = src.replace("max = { rows = 65536, cols = 4096 }", "");
    assert!(!steps_of(&unbounded)
        .iter()
        .any(|s| s.contains("cache_read")));
    // For a GPU with 128 KiB of LDS or more, a 64 KiB row is staged; not
    // for gfx942's 64 KiB, nor on the CPU.
    let staged_on = |mcpu: &str| {
        rocmc::compile(
            "k",
            &wide,
            &rocmc::Options::new(mcpu),
            rocmc::Emit::default(),
        )
        .unwrap_or_else(|e| panic!("{mcpu}: {e}"))
        .loops
        .contains("X_row: f32[16384]")
    };
    assert!(staged_on("sm_90") && staged_on("gfx950"));
    assert!(!staged_on("gfx942") && !staged_on("sm_75") && !staged_on("x86-64"));
}

fn refusal(src: &str, mcpu: &str) -> String {
    match rocmc::compile(
        "k.toml",
        src,
        &rocmc::Options::new(mcpu),
        rocmc::Emit::default(),
    ) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unbounded_or_oversized_parts_are_refused_by_name() {
    let src = std::fs::read_to_string(root().join("tests/bounded/softmax_row_lds.toml")).unwrap();
    // No bound: the part has no size; the hint says how to give one.
    let e = refusal(
        &src.replace("max = { rows = 65536, cols = 3000 }", ""),
        "gfx942",
    );
    assert!(e.contains("spans loops of symbolic extent"), "{e}");
    assert!(e.contains("max = { cols = 4096 }"), "{e}");
    // A bound beyond the target's LDS: the target's limit, named.
    let e = refusal(&src.replace("cols = 3000", "cols = 30000"), "gfx942");
    assert!(e.contains("bytes of LDS") && e.contains("65536"), "{e}");
    // Per-thread tiles need indices known at compile time.
    let e = refusal(&src.replace("X, shared, r, vec=4", "X, local, r"), "gfx942");
    assert!(e.contains("register tile needs constant indices"), "{e}");
    let e = refusal(
        &src.replace("X, shared, r, vec=4", "X, shared, r, vec=8"),
        "gfx942",
    );
    assert!(e.contains("vec=8"), "{e}");
    // A part computed per thread (no thread binds) over a symbolic row.
    let part = std::fs::read_to_string(root().join("tests/bounded/softmax_exp_part.toml")).unwrap();
    let per_thread = part.replacen(
        "schedule = [\"compute_at(Y, r)\", \"co, ci = split(c, 256)\", \"bind(ci, threadIdx.x)\"]\n\n[[stage]]\ncompute = \"S",
        "schedule = [\"compute_at(Y, r)\"]\n\n[[stage]]\ncompute = \"S",
        1,
    );
    assert_ne!(per_thread, part);
    let e = refusal(&per_thread, "gfx942");
    assert!(e.contains("per-thread (register) part"), "{e}");
}

/// The tile is sized at launch: the code object's static LDS leaves it
/// out, and the launch document gives its bytes as an expression of the
/// sizes, which the runtimes evaluate per launch (AMD: after the static
/// LDS; NVIDIA: after the static arrays in the `.extern .shared` block).
#[test]
fn bounded_tiles_are_sized_at_launch() {
    use rocmc::device::launch::ArgValue;
    let src = std::fs::read_to_string(root().join("tests/bounded/softmax_row_lds.toml")).unwrap();
    let args = |cols: i32| {
        vec![
            ArgValue::Buffer {
                dtype: "f32",
                len: 0,
            },
            ArgValue::Buffer {
                dtype: "f32",
                len: 0,
            },
            ArgValue::Size(8),
            ArgValue::Size(cols),
        ]
    };
    let emit = rocmc::Emit {
        code_object: true,
        ..Default::default()
    };
    let art = rocmc::compile(
        "softmax_row_lds",
        &src,
        &rocmc::Options::new("gfx942"),
        emit,
    )
    .unwrap();
    let meta = rocmc::linker::codeobject::read(art.code_object.as_ref().unwrap()).unwrap();
    // Static: the two reduction trees (128 floats each) and their results.
    let static_lds = meta.kernels[0].group_segment_fixed_size;
    assert!(
        static_lds < 2048,
        "the tile is not static LDS: {static_lds}"
    );
    let kl = &art.launch.kernels[0];
    let bytes = |cols| art.launch.shared_bytes(kl, &args(cols)).unwrap();
    // 1000 columns: 8 chunks of 128 threads; the bound (3000) would be 12 KiB.
    assert_eq!(bytes(1000), 1024 * 4);
    assert_eq!(bytes(3000), 3072 * 4);
    assert_eq!(bytes(1), 128 * 4);

    let art = rocmc::compile(
        "softmax_row_lds",
        &src,
        &rocmc::Options::new("sm_90"),
        rocmc::Emit {
            asm: true,
            ..Default::default()
        },
    )
    .unwrap();
    let ptx = art.asm.unwrap();
    assert!(ptx.contains(".extern .shared .align 16 .b8 softmax_row_lds_dynamic_shared[]"));
    let kl = &art.launch.kernels[0];
    let at = |cols| art.launch.shared_bytes(kl, &args(cols)).unwrap();
    // The static arrays first (16-aligned), then the row.
    assert_eq!(at(3000) - at(1000), (3072 - 1024) * 4);
    assert!(at(1000) >= 1024 * 4 && at(1000) < 1024 * 4 + 2048);
    // The opt-in covers the largest launch.
    assert!(
        kl.dynamic_shared >= at(3000),
        "{} < {}",
        kl.dynamic_shared,
        at(3000)
    );
    assembled(&ptx);
}

fn assembled(ptx: &str) {
    assemble_ptx(ptx, "sm_90").unwrap_or_else(|e| panic!("ptxas: {e}"));
}
