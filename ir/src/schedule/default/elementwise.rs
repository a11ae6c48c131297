//! Element-wise maps (bias2d_vec, saxpy) and reductions along rows
//! (argmax).

use super::{along_rows, flat, fuse_all, fuse_any, DefaultSchedule, Knobs, RuleCx, THREADS};
use crate::index::{Index, VarId};
use crate::kernel::{Expr, Kernel, Stage, TensorId};

/// An element-wise map (a reduction, if any, runs serially per thread):
/// rows of 256 columns per work-group of 64 × 4 threads, 4 consecutive
/// columns per thread as one vector access (bias2d_vec); a 1-D stage as
/// saxpy does. A matrix product gets 16 × 16 output tiles (matmul.toml).
pub(super) fn elementwise(
    k: &Kernel,
    st: &Stage,
    value: &Expr,
    names: &[&str],
    (reduces, vector): (bool, bool),
    cx: &RuleCx,
) -> Vec<DefaultSchedule> {
    let Some((&last, lead)) = names.split_last() else {
        return Vec::new();
    };
    let mut kn = Knobs::new(&st.name, cx.given);
    let narrow = st
        .axes
        .last()
        .and_then(|a| a.extent.as_const())
        .is_some_and(|c| c < 64);
    if lead.is_empty() || narrow {
        if reduces || !vector || !lead.is_empty() {
            return flat(&st.name, names, cx).into_iter().collect();
        }
        let threads = kn.get("THREADS", THREADS, 256, "threads per work-group");
        let vec = kn.get(
            "VEC",
            &[1, 2, 4],
            4,
            "consecutive elements per thread, one vector access",
        );
        // On AMD's wave32 processors (gfx11, gfx12) a thread takes two
        // vectors a step, both in flight before the first is waited for:
        // 2 KiB a wave per input, as Triton's 1024-wide programs of 4
        // waves (bench/amd: vadd's bytes in flight per CU on gfx1100 32
        // KiB -> 64 KiB). Wave64 and NVIDIA are left as measured.
        let wave32 =
            matches!(cx.target, Some(t @ rocmc_target::Target::Amd(_)) if t.wave_size() == 32);
        let per = kn.get(
            "VECS",
            &[1, 2],
            if wave32 { 2 } else { 1 },
            "vectors per thread, adjacent work-group-wide runs, unrolled",
        );
        let (mut steps, f) = fuse_all(names);
        let inner = if per > 1 {
            steps.extend([
                format!("{f}_b, {f}_t = split({f}, {})", threads * vec * per),
                format!("{f}_u, {f}_w = split({f}_t, {})", threads * vec),
            ]);
            format!("{f}_w")
        } else {
            steps.push(format!("{f}_b, {f}_t = split({f}, {})", threads * vec));
            format!("{f}_t")
        };
        steps.extend([
            format!("{f}_x, {f}_v = split({inner}, {vec})"),
            format!("bind({f}_b, blockIdx.x)"),
            format!("bind({f}_x, threadIdx.x)"),
            format!("vectorize({f}_v)"),
        ]);
        if per > 1 {
            steps.push(format!("unroll({f}_u)"));
        }
        let mut d = kn.done("elementwise-1d", steps);
        // Without a target the compiler applies the rule again per target.
        d.by_target = cx.target.is_none();
        return vec![d];
    }
    let (mut steps, r) = fuse_all(lead);
    let c = last;
    if reduces || !vector {
        // A serial reduction per output, or a transpose-like access (16 x
        // 16 tiles keep both sides in short runs).
        let t = kn.get(
            "TILE",
            &[8, 16, 32],
            16,
            "rows and columns of a work-group's tile",
        );
        steps.extend([
            format!("{r}_o, {c}_o, {r}_i, {c}_i = tile({r}, {c}, {t}, {t})"),
            format!("bind({r}_o, blockIdx.x)"),
            format!("bind({c}_o, blockIdx.y)"),
            format!("bind({r}_i, threadIdx.y)"),
            format!("bind({c}_i, threadIdx.x)"),
        ]);
        let rule = if reduces {
            "tiles-16x16"
        } else {
            "elementwise-tiles"
        };
        return vec![kn.done(rule, steps)];
    }
    // Rows of a known length, or bounded by `max`, shorter than the 256
    // columns (a head of 64 in `K[s, b, h, d]`) would leave most threads of
    // each row idle: the columns shrink to the row and the rows grow to
    // keep 1,024 elements per work-group (GPT-2's KV store at 64, 73 % of
    // copy: bench/gpu/runs/h100-gpt2-gemms-1).
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let row = st.axes.last().map(|a| a.extent.max_value(&size_max, &[]));
    let (cols0, rows0) = match row {
        Some(e) if e < 256 => {
            let c = (e.max(1) as u64).next_power_of_two().max(64) as i64;
            (c, 4 * 256 / c)
        }
        _ => (256, 4),
    };
    // 16 bytes a thread where every element is 2 bytes or less: 8 halves
    // one vector access, where 4 made half-width accesses (a 4-D f16 copy
    // bounded to 128 columns: 58 % of copy at 4 of 256, 90 % at 8 of 128,
    // H200, bench/gpu/runs/h200-transpose-f16).
    let mut widest = k.tensor(st.output).dtype.size();
    value.visit_loads(&mut |t, _| widest = widest.max(k.tensor(t).dtype.size()));
    let vec0 = if widest <= 2 { 8 } else { 4 };
    let rows = kn.get("ROWS", &[1, 2, 4, 8, 16], rows0, "rows per work-group");
    let cols = kn.get(
        "COLS",
        &[64, 128, 256, 512],
        cols0,
        "columns per work-group",
    );
    let vec = kn.get(
        "VEC",
        &[1, 2, 4, 8],
        vec0,
        "consecutive columns per thread, one vector access",
    );
    kn.require("{ROWS} * ({COLS} / {VEC}) <= 1024");
    steps.extend([
        format!("{r}_o, {c}_o, {r}_i, {c}_i = tile({r}, {c}, {rows}, {cols})"),
        format!("{c}_t, {c}_v = split({c}_i, {vec})"),
        format!("bind({r}_o, blockIdx.x)"),
        format!("bind({c}_o, blockIdx.y)"),
        format!("bind({r}_i, threadIdx.y)"),
        format!("bind({c}_t, threadIdx.x)"),
        format!("vectorize({c}_v)"),
    ]);
    vec![kn.done("elementwise-2d", steps)]
}

/// A reduction along contiguous memory (its axis is the last subscript of
/// a tensor it reads) over a long row: one work-group of 512 threads per
/// output point, each thread 4 elements 512 apart per step, combined in
/// the work-group (argmax.toml). Short constant rows stay serial.
pub(super) fn row_reduction(st: &Stage, names: &[&str], cx: &RuleCx) -> Option<DefaultSchedule> {
    let r = st.reduce()?;
    let (last, outer) = r.axes.split_last()?;
    let length: Option<i64> = r.axes.iter().map(|a| a.extent.as_const()).product();
    if length.is_some_and(|c| c < 256) {
        return None;
    }
    // Several reduced axes (GroupNorm's statistics over channels and
    // pixels) are one row where the last runs along the tensors' rows and
    // the others stay out of their last subscript. Without this each
    // output's whole group ran on one thread. The threads split the last
    // axis and walk the others as serial loops around it, where the last
    // is not a short constant: the addresses stay affine. Fused into one
    // loop instead, each element's address took a division by the pixel
    // count: at 8 x 512 x 4096 on the H200, 2.7x slower than the loops
    // left apart (1.56x PyTorch; bench/gpu/runs/h200-groupnorm-1). A short
    // last axis (a 7 x 7 window) is fused with the others.
    let first = st.axes.len() as u32;
    let kv = VarId(first + outer.len() as u32);
    let reduced = super::reduced(st);
    let outer_in_last = reduced.iter().any(|e| {
        let mut inside = false;
        e.visit_loads(&mut |_, ix| {
            inside |= ix
                .last()
                .is_some_and(|l| (0..outer.len() as u32).any(|a| l.uses_var(VarId(first + a))));
        });
        inside
    });
    if !along_rows(&reduced, kv) || outer_in_last {
        return None;
    }
    // A combiner that keeps the order needs one sequence to split into
    // contiguous shares: the axes fused.
    let short = last.extent.as_const().is_some_and(|c| c < 256) || st.keeps_order();
    let row: Vec<&str> = match short {
        true => r.axes.iter().map(|a| a.name.as_str()).collect(),
        false => vec![last.name.as_str()],
    };
    let (fused, k) = super::fuse_all(&row);
    let mut kn = Knobs::new(&st.name, cx.given);
    let threads = kn.get("THREADS", &THREADS[1..], 512, "threads per row");
    let per = kn.get(
        "PER",
        &[1, 2, 4, 8],
        4,
        "elements per thread and step, `threads` apart",
    );
    let k = k.as_str();
    let (mut steps, block) = fuse_any(names);
    steps.extend(fused);
    // A combiner that is not commutative needs each thread's share
    // contiguous (`schedule::order`): slower loads (lanes a share apart),
    // but the row still spreads over the work-group.
    steps.extend(match st.keeps_order() {
        false => [
            format!("{k}_o, {k}_i = split({k}, {})", threads * per),
            format!("{k}_v, {k}_t = split({k}_i, {threads})"),
        ],
        true => [
            format!("{k}_t, {k}_s = split({k}, nparts={threads})"),
            format!("{k}_o, {k}_v = split({k}_s, {per})"),
        ],
    });
    if let Some(b) = block {
        steps.push(format!("bind({b}, blockIdx.x)"));
    }
    steps.extend([
        format!("bind({k}_t, threadIdx.x)"),
        format!("unroll({k}_v)"),
    ]);
    Some(kn.done("row-reduction", steps))
}

/// A reduction down columns (`S[j] = sum(X[i, j], i)`: the reduced axis
/// is never a last subscript, the output's last axis is, at stride 1):
/// a work-group per 32 columns, consecutive threads on consecutive
/// columns (coalesced), 32 threads down the rows combined in LDS; leading
/// output axes on blockIdx.y (bias_grad.toml, 1.01x `torch.sum(dim=0)`).
pub(super) fn column_reduction(st: &Stage, names: &[&str], cx: &RuleCx) -> Option<DefaultSchedule> {
    let r = st.reduce()?;
    let ([axis], Some((&last, lead))) = (r.axes.as_slice(), names.split_last()) else {
        return None;
    };
    if axis.extent.as_const().is_some_and(|c| c < 64) {
        return None;
    }
    let kv = VarId(st.axes.len() as u32);
    let jv = VarId(st.axes.len() as u32 - 1);
    let mut down = false;
    let mut along = true;
    let mut unit = true;
    for e in super::reduced(st) {
        e.visit_loads(&mut |_, ix| {
            if let Some((l, rest)) = ix.split_last() {
                down |= rest.iter().any(|x| x.uses_var(kv));
                along &= !l.uses_var(kv);
            }
        });
        unit &= super::unit_stride(e, jv);
    }
    if !(down && along && unit) {
        return None;
    }
    let mut kn = Knobs::new(&st.name, cx.given);
    let cols = kn.get(
        "COLS",
        &[16, 32, 64],
        32,
        "columns per work-group, one per thread",
    );
    // 32 measured fastest on the H100 at 32768 x 4096 (bench/gpu/runs/h100-defaults-6).
    let rows = kn.get(
        "ROWS",
        &[4, 8, 16, 32],
        32,
        "threads down the rows, combined in LDS",
    );
    kn.require("{COLS} * {ROWS} <= 1024");
    let k = axis.name.as_str();
    let (mut steps, block) = fuse_any(lead);
    // Few columns (a narrow layer's bias gradient) would make few
    // work-groups: the rows are then split over the grid as well, each
    // work-group's part added into the output atomically (a grid
    // reduction), where the stage allows it.
    let outputs = st
        .axes
        .iter()
        .map(|a| a.extent.as_const())
        .product::<Option<i64>>();
    let groups = outputs.map(|o| (o + cols - 1) / cols);
    let split = groups.is_some_and(|g| g < COLUMN_GROUPS)
        && st.grid_combine().is_ok()
        && axis
            .extent
            .as_const()
            .is_none_or(|c| c >= super::grid::MIN_ROW);
    let mut rule = "column-reduction";
    if split {
        let steps_per = kn.get(
            "STEPS",
            &[4, 8, 16, 32, 64, 128],
            32,
            "steps down the rows per work-group: its part is rows x steps rows",
        );
        // The rows' parts on blockIdx.x, which counts to 2^31 - 1 (y and
        // z stop at 65,535 on NVIDIA); the few column groups on z.
        steps.extend([
            format!("{k}_g, {k}_r = split({k}, {})", rows * steps_per),
            format!("{k}_o, {k}_t = split({k}_r, {rows})"),
            format!("bind({k}_g, blockIdx.x)"),
        ]);
        rule = "column-reduction-grid";
        steps.extend([
            format!("{last}_o, {last}_t = split({last}, {cols})"),
            format!("bind({last}_o, blockIdx.z)"),
        ]);
    } else {
        steps.extend([
            format!("{last}_o, {last}_t = split({last}, {cols})"),
            format!("{k}_o, {k}_t = split({k}, {rows})"),
            format!("bind({last}_o, blockIdx.x)"),
        ]);
    }
    steps.extend([
        format!("bind({last}_t, threadIdx.x)"),
        format!("bind({k}_t, threadIdx.y)"),
    ]);
    if let Some(b) = block {
        steps.push(format!("bind({b}, blockIdx.y)"));
    }
    Some(kn.done(rule, steps))
}

/// The output axis (an index into the leading axes) every tensor in
/// `across` runs along in its last subscript, when they agree, and
/// whether the other leading axes' index range fits blockIdx.z (65,535
/// work-groups on NVIDIA).
fn across_rows(
    k: &Kernel,
    st: &Stage,
    value: &Expr,
    across: &[TensorId],
    cx: &RuleCx,
) -> Option<(usize, bool)> {
    let lead = st.axes.len() - 1;
    let mut rows: Option<Option<usize>> = None;
    value.visit_loads(&mut |t, ix| {
        if across.contains(&t) {
            let here = match ix.last() {
                Some(Index::Var(v)) if (v.0 as usize) < lead => Some(v.0 as usize),
                _ => None,
            };
            rows = Some(match rows {
                None => here,
                Some(r) if r == here => r,
                Some(_) => None,
            });
        }
    });
    let rows = rows.flatten()?;
    let others = st.axes[..lead]
        .iter()
        .enumerate()
        .filter(|&(a, _)| a != rows);
    let range = super::fused_range(k, others.map(|(_, x)| x));
    Some((rows, range <= u128::from(super::grid_z(cx))))
}

/// Fewer work-groups of columns than this (a constant count) split the
/// rows too (`column-reduction-grid`): a fraction of the H100's 132 SMs.
const COLUMN_GROUPS: i64 = 64;

/// A map whose reads do not all run along the output's rows (a
/// transpose): 32 x 32 tiles of the output per work-group of 32 x 8
/// threads, 4 rows each, and every tensor read across its rows staged
/// through LDS at the tile (padded by one so the column reads avoid bank
/// conflicts), so both the reads and the writes are coalesced
/// (transpose_coarse.toml, 93 % of copy on the H100). Of three axes and
/// more, the tile's rows are the axis those reads run along, and the rest
/// of the output's axes go on blockIdx.z ([`across_rows`]), or, past it,
/// fused with the tile's row index on blockIdx.x.
pub(super) fn transpose(
    k: &Kernel,
    st: &Stage,
    value: &Expr,
    names: &[&str],
    cx: &RuleCx,
) -> Option<DefaultSchedule> {
    let (&c, lead) = names.split_last()?;
    if lead.is_empty() || st.axes.last()?.extent.as_const().is_some_and(|e| e < 32) {
        return None;
    }
    let cv = VarId(st.axes.len() as u32 - 1);
    // Tensors whose last subscript does not follow the last axis at stride 1.
    let mut across: Vec<TensorId> = Vec::new();
    value.visit_loads(&mut |t, ix| {
        let follows = ix.last().is_some_and(|l| *l == Index::Var(cv));
        if !follows && ix.iter().any(|x| x.uses_var(cv)) && !across.contains(&t) {
            across.push(t);
        }
    });
    // `cache_read` copies a box that moves with the loops: every read of a
    // staged tensor must be affine in the stage's axes, with positive
    // coefficients (a clamp `A[i, min(j + 1, m - 1)]` is not).
    let vars = st.axes.len() as u32;
    let mut boxed = true;
    value.visit_loads(&mut |t, ix| {
        if across.contains(&t) {
            boxed &= ix.iter().all(|x| {
                x.affine().0.iter().all(|(term, c)| {
                    let moves = (0..vars).any(|v| term.uses_var(VarId(v)));
                    !moves || (matches!(term, Index::Var(_)) && *c > 0)
                })
            });
        }
    });
    if across.is_empty() || !boxed {
        return None;
    }
    let placed = across_rows(k, st, value, &across, cx);
    if let Some(d) = register_transpose(k, st, names, &across, placed, cx) {
        return Some(d);
    }
    let mut kn = Knobs::new(&st.name, cx.given);
    let t = kn.get(
        "TILE",
        &[16, 32, 64],
        32,
        "rows and columns of a work-group's tile",
    );
    let per = kn.get("PER", &[1, 2, 4, 8], 8, "rows per thread");
    kn.require("{TILE} % {PER} == 0 && ({TILE} / {PER}) * {TILE} <= 1024");
    // The tile of rows `r` and the last axis, then `fused` (steps on its
    // outer loops), and `grid` binding those.
    let tiled = |r: &str, fused: Vec<String>, grid: [String; 2]| {
        let mut steps = vec![format!(
            "{r}_o, {c}_o, {r}_i, {c}_i = tile({r}, {c}, {t}, {t})"
        )];
        steps.extend(fused);
        steps.extend([
            format!("{r}_t, {r}_v = split({r}_i, {per})"),
            format!("reorder({r}_t, {c}_i, {r}_v)"),
        ]);
        steps.extend(grid);
        steps.extend([
            format!("bind({r}_t, threadIdx.y)"),
            format!("bind({c}_i, threadIdx.x)"),
            format!("unroll({r}_v)"),
        ]);
        steps
    };
    let grid = |r: &str| {
        [
            format!("bind({r}_o, blockIdx.y)"),
            format!("bind({c}_o, blockIdx.x)"),
        ]
    };
    let mut steps = match placed {
        // Rank 3 and more: the tile takes the axis the staged reads run
        // along and the output's last; the other axes go on the grid
        // unfused with them, so the reads stay affine in the tile.
        Some((rows, true)) if lead.len() > 1 => {
            let mut steps = others_on_z(lead, rows);
            steps.extend(tiled(lead[rows], Vec::new(), grid(lead[rows])));
            steps
        }
        // Past blockIdx.z (NVIDIA's 65,535, or sizes without `max`), where
        // the tile's rows come just before the last axis: the others are
        // fused with the row tiles' index on blockIdx.x, after the tile,
        // so the reads inside it stay affine.
        Some((rows, false)) if lead.len() > 1 && rows + 1 == lead.len() => {
            let r = lead[rows];
            let ro = format!("{r}_o");
            let mut outer: Vec<&str> = lead[..rows].to_vec();
            outer.push(&ro);
            let (fuse, x) = fuse_all(&outer);
            let grid = [
                format!("bind({x}, blockIdx.x)"),
                format!("bind({c}_o, blockIdx.y)"),
            ];
            tiled(r, fuse, grid)
        }
        _ => {
            let (mut steps, r) = fuse_all(lead);
            steps.extend(tiled(&r, Vec::new(), grid(&r)));
            steps
        }
    };
    for &tid in &across {
        let n = &k.tensor(tid).name;
        steps.push(format!("{n}_tile = cache_read({n}, shared, {c}_o, pad=1)"));
    }
    let mut d = kn.done("transpose-tiles", steps);
    // NVIDIA's rule for 2-byte elements is its own (register_transpose).
    d.by_target = cx.target.is_none() && register_elements(k, &across);
    Some(d)
}

/// The steps that fuse the leading axes but the tile's rows `rows` and
/// bind them to blockIdx.z.
fn others_on_z(lead: &[&str], rows: usize) -> Vec<String> {
    let others: Vec<&str> = (0..lead.len())
        .filter(|&a| a != rows)
        .map(|a| lead[a])
        .collect();
    let (mut steps, z) = fuse_all(&others);
    steps.push(format!("bind({z}, blockIdx.z)"));
    steps
}

/// Whether the tensors a transpose reads across its rows are all of
/// 2-byte elements, which [`register_transpose`] moves.
fn register_elements(k: &Kernel, across: &[TensorId]) -> bool {
    across.iter().all(|&t| k.tensor(t).dtype.size() == 2)
}

/// A transpose of 2-byte elements on NVIDIA, as each thread's 8 x 8 block
/// in registers: eight 16-byte loads along the rows (`cache_read(X,
/// local, ..., vec=8, unroll=8)`), eight 16-byte stores along the
/// output's rows, no LDS and no barrier. Through an LDS tile each element
/// costs a 2-byte access on both sides: the H200 moved such transposes at
/// 69 % and 46 % of copy bandwidth, this form written in CUDA at 93-96 %
/// (bench/gpu/runs/h200-transpose-f16-cuda). Threads: 4 x 16 x 4 (x along the output's
/// rows, y along the read's, z along the output's rows again), so a warp
/// reads 32 rows of 64 bytes and writes 16 rows of 64; the tile is 128 x
/// 128 elements, or as many of the read's rows as its bound allows.
fn register_transpose(
    k: &Kernel,
    st: &Stage,
    names: &[&str],
    across: &[TensorId],
    placed: Option<(usize, bool)>,
    cx: &RuleCx,
) -> Option<DefaultSchedule> {
    if !matches!(cx.target, Some(rocmc_target::Target::Nvidia(_))) || !register_elements(k, across)
    {
        return None;
    }
    let (&c, lead) = names.split_last()?;
    // The output's other axes on blockIdx.z, unfused with the two of the
    // tile (as the LDS tile's rule does), or a matrix's one row axis.
    let (mut steps, r) = match placed {
        Some((rows, true)) if lead.len() > 1 => (others_on_z(lead, rows), rows),
        _ if lead.len() == 1 => (Vec::new(), 0),
        _ => return None,
    };
    let bound = super::fused_range(k, [&st.axes[r]]);
    let r = lead[r];
    let mut kn = Knobs::new(&st.name, cx.given);
    // Threads along the read's rows: 8 elements each, as many as the rows'
    // bound asks for (a head dimension of 64 keeps 8).
    let fit = bound.div_ceil(8).next_power_of_two().clamp(4, 16) as i64;
    let rt = kn.get(
        "REG_ROWS",
        &[4, 8, 16],
        fit,
        "threads along the read's rows, 8 elements each",
    );
    let cz = 64 / rt;
    steps.extend([
        format!("{r}_o, {r}_i = split({r}, {})", rt * 8),
        format!("{r}_t, {r}_v = split({r}_i, 8)"),
        format!("{c}_o, {c}_i = split({c}, {})", cz * 32),
        format!("{c}_h, {c}_r = split({c}_i, 32)"),
        format!("{c}_l, {c}_v = split({c}_r, 8)"),
        format!("reorder({r}_o, {c}_o, {c}_h, {r}_t, {c}_l, {r}_v, {c}_v)"),
        format!("bind({r}_o, blockIdx.y)"),
        format!("bind({c}_o, blockIdx.x)"),
        format!("bind({c}_h, threadIdx.z)"),
        format!("bind({r}_t, threadIdx.y)"),
        format!("bind({c}_l, threadIdx.x)"),
        format!("unroll({r}_v)"),
        format!("vectorize({c}_v)"),
    ]);
    for &tid in across {
        let n = &k.tensor(tid).name;
        steps.push(format!(
            "{n}_reg = cache_read({n}, local, {c}_o, vec=8, unroll=8)"
        ));
    }
    Some(kn.done("transpose-registers", steps))
}
