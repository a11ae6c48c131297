//! The loop-IR race check (`rocmc::run::run_loops`): every bundled kernel,
//! lowered for every target family, runs as the GPU runs it with no LDS
//! race and no divergent barrier, and computes what the kernel means; and
//! the check finds the race flash attention had across key tiles.

use crate::common::*;
use rocmc::ir::loops::Stmt;
use rocmc::Options;

/// One target per wave size and matrix-instruction family: wave64 MFMA
/// (two generations), wave32 WMMA (two), NVIDIA's `mma.sync`, `cp.async`
/// and the warpgroup path.
const TARGETS: &[&str] = &[
    "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "sm_80", "sm_90", "sm_90a",
];

/// What the interpreter may do per kernel and target: enough for two
/// work-groups of 128 rows and several trips of each tile loop.
const RACE_BUDGET: u128 = 1 << 21;

/// Sizes past one tile of every common tiling (130: two 128-row
/// work-groups, the second partial), the leading ones (batch, heads)
/// shrunk first to stay within the budget.
fn race_sizes(k: &rocmc::ir::Kernel) -> Vec<i64> {
    let mut v = k.fit_sizes(&vec![130; k.sizes.len()]);
    for i in 0..v.len() {
        while k.work(&v) > RACE_BUDGET {
            let floor = k.sizes[i].divisor.max(1) as i64;
            if v[i] <= floor {
                break;
            }
            let mut smaller = v.clone();
            smaller[i] = (v[i] / 4).max(floor);
            v = k.fit_sizes(&smaller);
        }
    }
    v
}

/// Every kernel file the project ships or keeps as a regression.
fn bundled() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in ["examples", "examples/gpt2/kernels", "tests/regress"] {
        let d = root().join(dir);
        for f in files_in(&d).into_iter().filter(|f| f.ends_with(".toml")) {
            let src = std::fs::read_to_string(d.join(&f)).unwrap();
            out.push((format!("{dir}/{f}"), src));
        }
    }
    assert!(
        out.len() > 40,
        "bundled kernels went missing: {}",
        out.len()
    );
    out
}

/// `file` lowered for `mcpu` and run by the race check at its race sizes;
/// `None` where the kernel does not build for the target (a matrix example
/// written for another family's instruction) or lowers to loop IR already
/// checked (`seen`: the check is a function of the loop IR and the sizes).
fn check(
    file: &str,
    src: &str,
    mcpu: &str,
    seen: &mut std::collections::HashSet<String>,
) -> Option<Result<(), String>> {
    let front = rocmc::frontend(file, src).unwrap_or_else(|e| panic!("{e}"));
    let opts = Options::new(mcpu);
    let target = rocmc::targets(&opts).unwrap().remove(0);
    let lowered = match front.for_target(&target, &opts) {
        Ok(l) => l,
        Err(_) if src.contains("\"mma(") => return None,
        Err(e) => panic!("{file} on {mcpu}: {e}"),
    };
    let sizes = race_sizes(&lowered.kernel);
    if !seen.insert(format!("{sizes:?}{}", lowered.loops)) {
        return None;
    }
    let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 11);
    Some(match rocmc::run::run_loops(&lowered, &spec) {
        Err(e) => Err(format!("{file} on {mcpu} at {sizes:?}: {e}")),
        Ok(cmp) => cmp.iter().find(|c| !c.ok()).map_or(Ok(()), |c| {
            Err(format!(
                "{file} on {mcpu} at {sizes:?}: {} differs by {} (tolerance {})",
                c.tensor, c.max_error, c.tolerance
            ))
        }),
    })
}

#[test]
fn every_bundled_kernel_is_race_free_on_every_target() {
    let kernels = bundled();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (file, src) in &kernels {
        let mut seen = Default::default();
        for mcpu in TARGETS {
            match check(file, src, mcpu, &mut seen) {
                Some(Ok(())) => checked += 1,
                Some(Err(e)) => failures.push(e),
                None => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Each kernel at least once (its loop IR is often the same everywhere).
    assert!(checked >= kernels.len(), "{checked}");
}

/// The kernel of the race: three key tiles (the last partial), two waves of
/// rows on gfx942, one buffer for K and V.
const FLASH_RACE: &str = "tests/regress/flash_key_tile_race.toml";

/// Before the fix, barrier placement dropped the barrier at the top of the
/// key-tile loop: a wave done with its P·V could copy the next V tile over
/// the one the other wave still read. Dropping it again must be caught, on
/// wave64 and wave32 targets alike.
#[test]
fn the_check_finds_the_flash_attention_race() {
    let src = std::fs::read_to_string(root().join(FLASH_RACE)).unwrap();
    for mcpu in ["gfx942", "gfx1100", "sm_90"] {
        check(FLASH_RACE, &src, mcpu, &mut Default::default())
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        let front = rocmc::frontend(FLASH_RACE, &src).unwrap();
        let opts = Options::new(mcpu);
        let target = rocmc::targets(&opts).unwrap().remove(0);
        let mut lowered = front.for_target(&target, &opts).unwrap().into_owned();
        let removed = drop_loop_head_barriers(&mut lowered.program.kernels[0].body);
        assert_eq!(
            removed, 1,
            "{mcpu}: the key-tile loop starts with a barrier"
        );
        let spec = rocmc::run::RunSpec::new(&[128, 70], &Default::default(), 3);
        match rocmc::run::run_loops(&lowered, &spec) {
            Err(rocmc::Error::Lowering(e)) => {
                assert!(e.contains("LDS race"), "{mcpu}: {e}");
                assert!(e.contains("O_k[") || e.contains("O_v["), "{mcpu}: {e}");
            }
            other => panic!("{mcpu}: the race went unseen: {other:?}"),
        }
    }
}

/// Removes the barrier that starts a loop body, in every loop; how many.
fn drop_loop_head_barriers(body: &mut [Stmt]) -> usize {
    let mut n = 0;
    for s in body.iter_mut() {
        if let Stmt::Loop { body, .. } = s {
            if matches!(body.first(), Some(Stmt::Barrier)) {
                body.remove(0);
                n += 1;
            }
            n += drop_loop_head_barriers(body);
        }
    }
    n
}

/// A warpgroup's matrix instructions read their LDS operands at some
/// moment between issue and the wait that retires their group, so a tile
/// stored while a group that reads it is in flight races, even by the
/// thread that issued it. Rule matmul-wgmma's weight-only form keeps one
/// group in flight past each iteration, which its tiles' buffers allow (X
/// in four stages, W's prefetched stores in two; `group_lag`). Leaving one
/// more in flight must be caught on a tile overwritten under it.
#[test]
fn the_check_finds_an_lds_tile_stored_under_matrix_instructions_in_flight() {
    use rocmc::ir::loops::MatrixAsync;
    fn leave_one_more_in_flight(body: Vec<Stmt>, n: &mut usize) -> Vec<Stmt> {
        body.into_iter()
            .map(|s| match s {
                Stmt::MatrixAsync(MatrixAsync::Wait(k)) => {
                    *n += 1;
                    Stmt::MatrixAsync(MatrixAsync::Wait(k + 1))
                }
                other => other.map_bodies(&mut |b| leave_one_more_in_flight(b, n)),
            })
            .collect()
    }
    let path = "bench/gpu/variants/gemm_wq_i8.toml";
    let src = std::fs::read_to_string(root().join(path)).unwrap();
    let front = rocmc::frontend(path, &src).unwrap();
    let opts = Options::new("sm_90a");
    let target = rocmc::targets(&opts).unwrap().remove(0);
    let mut lowered = front.for_target(&target, &opts).unwrap().into_owned();
    assert_eq!(
        lowered.kernel.stages[0].default.as_ref().unwrap().rule,
        "matmul-wgmma"
    );
    let spec = rocmc::run::RunSpec::new(&[33, 260, 140], &Default::default(), 3);
    for c in rocmc::run::run_loops(&lowered, &spec).unwrap() {
        assert!(c.ok(), "{c:?}");
    }
    let body = std::mem::take(&mut lowered.program.kernels[0].body);
    let mut waits = 0;
    lowered.program.kernels[0].body = leave_one_more_in_flight(body, &mut waits);
    assert!(waits > 0, "the k loop waits for its groups");
    match rocmc::run::run_loops(&lowered, &spec) {
        Err(rocmc::Error::Lowering(e)) => {
            let tile = e.contains("W_tile[") || e.contains("X_tile[");
            assert!(e.contains("still in flight") && tile, "{e}");
        }
        other => panic!("the race went unseen: {other:?}"),
    }
}
