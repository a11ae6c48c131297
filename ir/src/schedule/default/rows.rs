//! Row-normalisation chains (softmax.toml, layernorm.toml).

use super::{DefaultSchedule, Knobs, RuleCx};
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, MathFn, TensorKind};

/// Row-normalisation chains (softmax, layernorm): reductions along rows
/// (`M[r]`, `S[r]`, default-scheduled) whose only readers are a final
/// two-axis stage over the same rows (`Y[r, j]`) and each other, always at
/// that stage's row. The row stays on chip: each reduction is computed at
/// the final stage's row loop by 256 threads, and the final stage runs one
/// work-group per row (softmax.toml). A declared result (`output =
/// true`) the chain reads at its row, element-wise over the same rows and
/// columns (the residual stream `H = X + R` of a fused residual add +
/// RMSNorm), is computed at that row too, into LDS, and stored from there
/// as it is computed: one pass over its inputs, one kernel. Returns the
/// stages to reschedule, by index, with their schedules; the final
/// stage's holds the one knob (threads per row), which every member
/// shares.
pub fn row_chains(k: &Kernel, cx: &RuleCx) -> Vec<(usize, DefaultSchedule)> {
    let given = cx.given;
    let mut out = Vec::new();
    for (yi, y) in k.stages.iter().enumerate() {
        let ok_final = y
            .default
            .as_ref()
            .is_some_and(|d| d.rule.starts_with("elementwise"))
            && y.axes.len() == 2
            && y.reduce().is_none()
            && y.scatter().is_none();
        if !ok_final {
            continue;
        }
        let rows = &y.axes[0];
        let members: Vec<usize> = (0..yi)
            .filter(|&p| {
                let s = &k.stages[p];
                s.default
                    .as_ref()
                    .is_some_and(|d| d.rule == "row-reduction")
                    && s.axes.len() == 1
                    && s.axes[0].extent == rows.extent
                    && !k.kept.contains(&s.output)
            })
            .collect();
        // Every read of a member: by the final stage or another member,
        // at that reader's first axis; and the final stage reads one.
        let reads_ok = |p: usize| {
            let outs = k.stages[p].outputs();
            let mut ok = true;
            let mut by_final = false;
            for (ri, r) in k.stages.iter().enumerate() {
                for e in r.exprs() {
                    e.visit_loads(&mut |tt, ix| {
                        if !outs.contains(&tt) {
                            return;
                        }
                        let at_row = ix.len() == 1 && ix[0] == Index::Var(VarId(0));
                        ok &= at_row && (ri == yi || members.contains(&ri));
                        by_final |= ri == yi;
                    });
                }
            }
            ok && (by_final || members.iter().any(|&m| m != p))
        };
        let chain: Vec<usize> = members.iter().copied().filter(|&p| reads_ok(p)).collect();
        if chain.is_empty() || chain.len() != members.len() {
            continue;
        }
        let kept = kept_producers(k, yi, &chain, row_budget(cx));
        let chain: Vec<usize> = kept.iter().copied().chain(chain).collect();
        let mut kn = Knobs::new(&y.name, given);
        let layout = Layout::of(k, yi, &chain, cx);
        // 256 measured best for softmax and Welford at 4096 columns; long
        // rows want more, which only the sizes tell: the tuner's choice.
        // On the H200 log_softmax over 50257 columns ran 1.10x PyTorch
        // under 1024 threads (8 a step) against 0.84x under 256, but
        // unbounded rows given 1024 made Welford's layernorm at 4096
        // columns 0.44x and softmax 0.46x (bench/gpu/runs/h200-rows-1).
        let threads = kn.get(
            "ROW_THREADS",
            super::THREADS,
            layout.threads,
            "threads per row, shared by the row's reductions",
        );
        // Several loads of a thread in flight at once: the reductions'
        // accumulators chain their steps, so without unrolling each load
        // waits for the previous step. On NVIDIA a thread's elements are
        // `threads` apart, 4 steps unrolled and, where the last one is in
        // the row, one straight run (pass `unswitch_unrolled`; h200-rows-1:
        // softmax 0.80x -> 0.89x PyTorch, log_softmax 0.70x -> 0.84x; with
        // each step checked on its own, 4 had been 1.4 % slower for
        // log_softmax on the H100, bench/gpu/runs/h100-rows-1).
        //
        // On AMD a thread's elements are adjacent instead, one vector
        // access (16 bytes of f32), and 4 is the default: the row kernels
        // had one 4-byte load in flight per lane against Triton's two
        // 16-byte ones (bench/amd: softmax's bytes in flight per CU per
        // pass 2.7 KiB -> 10.9 KiB on gfx942).
        let per = kn.get(
            "ROW_PER",
            &[1, 2, 4, 8],
            layout.per,
            "elements per thread and step of the row's reductions, unrolled (adjacent, one vector access, where the row stays in registers and on AMD)",
        );
        // Adjacent elements: several of a thread's vectors in flight per
        // step too: the reductions' chains otherwise wait for each
        // 16-byte load before the next is issued (Triton's row kernels
        // hold a 4096-wide row in registers, two 16-byte loads per lane
        // at once). Pass `unswitch_unrolled` makes the unrolled steps one
        // straight run.
        let amd = layout.adjacent;
        let unroll = if amd && per > 1 {
            kn.get(
                "ROW_UNROLL",
                &[1, 2, 4],
                4,
                "vectors per thread in flight per step of the row's passes (adjacent elements)",
            )
        } else {
            1
        };
        let (r, j) = (rows.name.as_str(), y.axes[1].name.as_str());
        for &p in &chain {
            let s = &k.stages[p];
            // A kept producer's columns, or a reduction's.
            let c = match s.reduce() {
                Some(red) => red.axes[0].name.as_str(),
                None => s.axes[1].name.as_str(),
            };
            out.push((
                p,
                Knobs::new(&s.name, &[]).done(
                    "row-chain",
                    reduction_steps(&y.name, r, c, threads, (per, amd, unroll)),
                ),
            ));
        }
        let mut steps = final_steps(r, j, threads, (per, amd, unroll));
        let (staging, by_target) =
            staging(k, cx, &mut kn, (yi, &chain, r), (threads, per, unroll, amd));
        steps.extend(staging);
        let mut d = kn.done("row-chain", steps);
        // AMD reads a thread's elements adjacent (above): a target may
        // choose otherwise than no target.
        d.by_target = by_target || cx.target.is_none();
        d.version_at = register_version(k, yi, &chain, &layout, (threads, per, unroll));
        out.push((yi, d));
    }
    out
}

/// Where a row's bound is past one run of a thread's steps (AMD,
/// [`Layout::version`]), the size
/// of the row and that run's length: under it the row stays in the
/// threads' registers (`ROW_LDS` = 2), read from memory once where this
/// schedule reads it at every pass (softmax three times). The compiler
/// builds that version too and runs it at rows that short.
fn register_version(
    k: &Kernel,
    yi: usize,
    chain: &[usize],
    layout: &Layout,
    (threads, per, unroll): (i64, i64, i64),
) -> Option<(String, u64)> {
    let Index::Size(s) = k.stages[yi].axes[1].extent else {
        return None;
    };
    let run = register_run(threads, per, unroll);
    let size = &k.sizes[s.0 as usize];
    let read_twice = !row_inputs(k, yi, chain, u64::MAX).is_empty();
    (layout.version && layout.adjacent && per > 1 && size.max > run && read_twice)
        .then(|| (size.name.clone(), run))
}

/// How a row chain lays out its row: the default threads and elements
/// per step, whether a thread's elements are adjacent (vectors, the
/// layout of the row in registers), and whether the chain asks for a
/// version for rows that fit registers.
struct Layout {
    threads: i64,
    per: i64,
    adjacent: bool,
    version: bool,
}

/// Threads of a row kept in registers: one run is 4096 floats at four
/// vectors of four a thread.
const REGISTER_THREADS: i64 = 256;

impl Layout {
    fn of(k: &Kernel, yi: usize, chain: &[usize], cx: &RuleCx) -> Layout {
        let target = cx.target;
        if target.is_some_and(|t| t.amd().is_some()) {
            return Layout {
                threads: REGISTER_THREADS,
                per: 4,
                adjacent: true,
                version: true,
            };
        }
        if target.and_then(|t| t.nvidia()).is_none() {
            return Layout {
                threads: REGISTER_THREADS,
                per: 1,
                adjacent: false,
                version: false,
            };
        }
        let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let cols = u64::try_from(k.stages[yi].axes[1].extent.max_value(&size_max, &[]))
            .unwrap_or(u64::MAX);
        // On NVIDIA the row stays in registers where its passes evaluate
        // a function per element (softmax's exp, twice): 1.12x PyTorch
        // against 0.89x with the row in LDS; layernorm, whose passes are
        // a few flops an element, keeps LDS (1.19x there against 1.09x
        // in registers; the adjacent layout with the row in LDS or memory
        // was slower than the strided one for both, h200-rows-1).
        let heavy = per_column_calls(k, yi, chain);
        let registers = REGISTER_THREADS as u64 * 16;
        // A version for short rows is not written on NVIDIA: joined with
        // the general one (rows bounded by 16384) softmax at 4096 columns
        // took 0.616 ms against 0.538 without it and 0.383 bounded by
        // 4096 (h200-rows-1).
        Layout {
            threads: REGISTER_THREADS,
            per: 4,
            adjacent: heavy && cols <= registers,
            version: false,
        }
    }
}

/// Whether the chain's passes evaluate a math function of the row's
/// elements (not of a row's statistic, as log_softmax's `log(S[r])`):
/// the reductions' bodies or the final stage's value, with inlined
/// producers substituted.
fn per_column_calls(k: &Kernel, yi: usize, chain: &[usize]) -> bool {
    let column = VarId(1);
    let mut exprs: Vec<crate::kernel::Expr> = chain
        .iter()
        .flat_map(|&p| super::reduced(&k.stages[p]).into_iter().cloned())
        .collect();
    exprs.push(k.stages[yi].value.clone());
    exprs.iter().any(|e| {
        let mut found = false;
        super::inlined(k, e).each(&mut |x| {
            if let crate::kernel::ExprKind::Call(f, args) = &x.kind {
                let cheap = matches!(
                    f,
                    MathFn::Abs | MathFn::Floor | MathFn::Ceil | MathFn::Fma | MathFn::Sqrt
                );
                let mut by_column = false;
                for a in args {
                    a.visit_loads(&mut |_, ix| by_column |= ix.iter().any(|i| i.uses_var(column)));
                }
                found |= !cheap && by_column;
            }
        });
        found
    })
}

/// The longest row a thread's registers keep on AMD: one run of its
/// steps, `per` elements of each of `unroll` steps for `threads` threads.
fn register_run(threads: i64, per: i64, unroll: i64) -> u64 {
    (threads * per * unroll) as u64
}

/// The declared results (`output = true`) before final stage `yi` that
/// the chain can compute at its row: element-wise over the final stage's
/// rows and columns, read only by `chain`, the final stage or stages
/// after it, and by the first two at the row, with a row (at its bound)
/// within `budget` bytes of LDS.
fn kept_producers(k: &Kernel, yi: usize, chain: &[usize], budget: u64) -> Vec<usize> {
    let y = &k.stages[yi];
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    (0..yi)
        .filter(|&p| {
            let s = &k.stages[p];
            let elementwise = s
                .default
                .as_ref()
                .is_some_and(|d| d.rule.starts_with("elementwise"))
                && s.reduce().is_none()
                && s.scatter().is_none()
                && s.axes.len() == 2
                && s.axes[0].extent == y.axes[0].extent
                && s.axes[1].extent == y.axes[1].extent;
            if !elementwise || !k.kept.contains(&s.output) {
                return false;
            }
            let row = u64::try_from(s.axes[1].extent.max_value(&size_max, &[]))
                .unwrap_or(u64::MAX)
                .saturating_mul(k.tensor(s.output).dtype.size() as u64);
            let mut ok = row <= budget;
            for (ri, r) in k.stages.iter().enumerate() {
                for e in r.exprs() {
                    e.visit_loads(&mut |tt, ix| {
                        if tt != s.output || ri > yi {
                            return;
                        }
                        ok &= (ri == yi || chain.contains(&ri))
                            && ix.len() == 2
                            && ix[0] == Index::Var(VarId(0));
                    });
                    e.visit_gathers(&mut |tt| ok &= tt != s.output || ri > yi);
                }
            }
            ok
        })
        .collect()
}

/// Where the chain's inputs stay between its passes (knob `ROW_LDS`),
/// as the final stage's `cache_read` steps; and whether a target may
/// choose otherwise than no target.
fn staging(
    k: &Kernel,
    cx: &RuleCx,
    kn: &mut Knobs,
    (yi, chain, r): (usize, &[usize], &str),
    (threads, per, unroll, amd): (i64, i64, i64, bool),
) -> (Vec<String>, bool) {
    let y = &k.stages[yi];
    let mut steps = Vec::new();
    let staged = row_inputs(k, yi, chain, row_budget(cx));
    // Without a target, rows a large LDS would take are left to it.
    let by_target =
        cx.target.is_none() && row_inputs(k, yi, chain, WIDE_ROW_LDS_BYTES).len() != staged.len();
    // On AMD a row no longer than one run of a thread's steps (4096
    // floats at 256 threads of four vectors of four) stays in the
    // threads' own registers, as Triton's row kernels keep it: one
    // pass over memory, no LDS and no barrier for it.
    let in_registers = amd && per > 1 && {
        let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let cols = u64::try_from(y.axes[1].extent.max_value(&size_max, &[])).unwrap_or(u64::MAX);
        cols <= register_run(threads, per, unroll)
    };
    let lds = if staged.is_empty() {
        0
    } else {
        kn.get(
            "ROW_LDS",
            if in_registers { &[0, 1, 2] } else { &[0, 1] },
            if in_registers { 2 } else { 1 },
            "where the row's inputs stay between passes: memory (0), LDS (1), each thread's own elements in its registers (2: AMD, a row of at most one run of a thread's steps)",
        )
    };
    // The copy of the row in runs of `unroll` too (AMD), in LDS or in
    // registers: a group of vector loads with one check (on gfx1100 a
    // check a load kept one 16-byte load in flight at a time; grouped,
    // bench/amd's bounded layernorm went 0.25x -> 0.50x Triton).
    let runs = match unroll {
        1 => String::new(),
        u => format!(", unroll={u}"),
    };
    if lds == 1 {
        for (name, vec) in &staged {
            steps.push(format!(
                "{name}_row = cache_read({name}, shared, {r}, vec={vec}{runs})"
            ));
        }
    } else if lds == 2 {
        // A thread's vector is `per` elements: its registers' copy too.
        // The final stage's column vectors (layernorm's gamma and beta)
        // come along: their loads issue with the row's, before the
        // reductions, as Triton's row kernels load them, instead of a
        // second pass of loads waited on after the reductions' barrier.
        // On NVIDIA they stay loads of the final pass: in registers
        // they made layernorm 0.79x PyTorch against 1.09x (h200-rows-1).
        let columns = match cx.target.and_then(|t| t.amd()) {
            Some(_) => column_vectors(k, yi),
            None => Vec::new(),
        };
        for (name, vec) in staged.iter().chain(&columns) {
            steps.push(format!(
                "{name}_row = cache_read({name}, local, {r}, vec={}{runs})",
                (*vec).min(per)
            ));
        }
    }
    (steps, by_target)
}

/// The steps of a row's reduction `c`, computed at row `r` of the final
/// stage `y`: `threads` threads, `per` elements each per step (on AMD
/// adjacent, one vector access; elsewhere `threads` apart, unrolled).
fn reduction_steps(
    y: &str,
    r: &str,
    c: &str,
    threads: i64,
    (per, amd, unroll): (i64, bool, i64),
) -> Vec<String> {
    match per {
        1 => vec![
            format!("compute_at({y}, {r})"),
            format!("{c}_o, {c}_t = split({c}, {threads})"),
            format!("bind({c}_t, threadIdx.x)"),
        ],
        _ if amd => vec![
            format!("compute_at({y}, {r})"),
            format!("{c}_o, {c}_i = split({c}, {})", threads * per),
            format!("{c}_t, {c}_v = split({c}_i, {per})"),
            format!("bind({c}_t, threadIdx.x)"),
            format!("vectorize({c}_v)"),
        ]
        .into_iter()
        .chain(unrolled(c, unroll))
        .collect(),
        _ => vec![
            format!("compute_at({y}, {r})"),
            format!("{c}_o, {c}_i = split({c}, {})", threads * per),
            format!("{c}_v, {c}_t = split({c}_i, {threads})"),
            format!("bind({c}_t, threadIdx.x)"),
            format!("unroll({c}_v)"),
        ],
    }
}

/// The final stage's steps: a row per work-group, its columns `j` over
/// `threads` threads (on AMD `per` adjacent ones each, one vector access).
fn final_steps(
    r: &str,
    j: &str,
    threads: i64,
    (per, amd, unroll): (i64, bool, i64),
) -> Vec<String> {
    if amd && per > 1 {
        let mut steps = vec![
            format!("bind({r}, blockIdx.x)"),
            format!("{j}_o, {j}_i = split({j}, {})", threads * per),
            format!("{j}_t, {j}_v = split({j}_i, {per})"),
            format!("bind({j}_t, threadIdx.x)"),
            format!("vectorize({j}_v)"),
        ];
        steps.extend(unrolled(j, unroll));
        steps
    } else {
        vec![
            format!("bind({r}, blockIdx.x)"),
            format!("{j}_o, {j}_t = split({j}, {threads})"),
            format!("bind({j}_t, threadIdx.x)"),
        ]
    }
}

/// `{c}_o` (a row's steps) split so that `unroll` consecutive steps of a
/// thread are one unrolled run: their loads issue before any is waited on.
fn unrolled(c: &str, unroll: i64) -> Vec<String> {
    if unroll <= 1 {
        return Vec::new();
    }
    vec![
        format!("{c}_s, {c}_u = split({c}_o, {unroll})"),
        format!("unroll({c}_u)"),
    ]
}

/// The bound of the rows staged where a work-group may take 128 KiB of
/// LDS or more (sm_80 and later, gfx950): on the H100 a row bounded by
/// 16384 floats (64 KiB) in LDS made layernorm 1.42x faster at 4096
/// columns and 1.07x at 16384, softmax 1.27x at 16384
/// (bench/gpu/runs/h100-rowlds-4 and -5).
const WIDE_ROW_LDS_BYTES: u64 = 64 * 1024;

/// The row budget for the rule's target: [`WIDE_ROW_LDS_BYTES`] where its
/// work-groups have 128 KiB of LDS or more, else [`ROW_LDS_BYTES`].
fn row_budget(cx: &RuleCx) -> u64 {
    match cx.target {
        // A GPU's: the CPU keeps every tile at its bound.
        Some(t)
            if (t.amd().is_some() || t.nvidia().is_some()) && cx.shared_bytes() >= 128 * 1024 =>
        {
            WIDE_ROW_LDS_BYTES
        }
        _ => ROW_LDS_BYTES,
    }
}

/// LDS the rows staged by one work-group may take: four work-groups fit
/// the 64 KiB of most AMD processors at the widest rows, and a default
/// must compile for every target (a 64 KiB bound with the reduction trees
/// does not fit gfx942). On the H100 a 16 KiB row made softmax 1.08x and
/// layernorm 1.38x faster (bench/gpu/runs/h100-rowlds-1); a launch gives
/// the tile only the run's row (h100-rowlds-4).
const ROW_LDS_BYTES: u64 = 16 * 1024;

/// The inputs the final stage `yi` alone reads, one element per column
/// (`gamma[j]`), with the vector width of their copy: kept in registers
/// beside a row that is (staging's `ROW_LDS` = 2).
fn column_vectors(k: &Kernel, yi: usize) -> Vec<(String, i64)> {
    let cols = &k.stages[yi].axes[1].extent;
    let mut out = Vec::new();
    for (ti, t) in k.tensors.iter().enumerate() {
        if !matches!(t.kind, TensorKind::Input) || t.shape.len() != 1 || t.shape[0] != *cols {
            continue;
        }
        let only_here = |si: usize, ix: &[Index]| si == yi && ix == [Index::Var(VarId(1))];
        if reads_if(k, ti, only_here).is_some_and(|n| n > 0) {
            out.push((t.name.clone(), (16 / t.dtype.size().max(1)).max(1) as i64));
        }
    }
    out
}

/// How often the stages read tensor `ti`, if every read is a load that
/// `ok` takes (the reading stage, the indices) and none gathers from it.
fn reads_if(k: &Kernel, ti: usize, ok: impl Fn(usize, &[Index]) -> bool) -> Option<usize> {
    let (mut reads, mut all) = (0, true);
    for (si, st) in k.stages.iter().enumerate() {
        for e in st.exprs() {
            e.visit_loads(&mut |tt, ix| {
                if tt.0 as usize == ti {
                    reads += 1;
                    all &= ok(si, ix);
                }
            });
            e.visit_gathers(&mut |tt| all &= tt.0 as usize != ti);
        }
    }
    all.then_some(reads)
}

/// The inputs worth staging in LDS for a row chain: each read only as
/// `X[row, column]` by the chain and the final stage, at least twice (the
/// passes over the row), with rows whose bound (`[kernel] max`) fits
/// [`ROW_LDS_BYTES`] together. With the vector width of their copy.
fn row_inputs(k: &Kernel, yi: usize, chain: &[usize], budget: u64) -> Vec<(String, i64)> {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let readers: Vec<usize> = chain.iter().copied().chain([yi]).collect();
    let rows = &k.stages[yi].axes[0].extent;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for (ti, t) in k.tensors.iter().enumerate() {
        if !matches!(t.kind, TensorKind::Input) || t.shape.len() != 2 || t.shape[0] != *rows {
            continue;
        }
        let at_row = |si: usize, ix: &[Index]| {
            readers.contains(&si) && ix == [Index::Var(VarId(0)), Index::Var(VarId(1))]
        };
        let reads = reads_if(k, ti, at_row);
        let row = u64::try_from(t.shape[1].max_value(&size_max, &[]))
            .unwrap_or(u64::MAX)
            .saturating_mul(t.dtype.size() as u64);
        if reads.is_none_or(|n| n < 2) || bytes.saturating_add(row) > budget {
            continue;
        }
        bytes += row;
        let vec = (16 / t.dtype.size().max(1)).max(1) as i64;
        out.push((t.name.clone(), vec));
    }
    out
}
