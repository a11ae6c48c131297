//! Reductions with few outputs over long contiguous rows (a full sum, the
//! norm of a whole tensor, a handful of very long rows): one work-group
//! per output would leave most of the GPU idle, so the reduction itself
//! is spread over the grid. Each work-group reduces one chunk of a row as
//! the row-reduction rule does (threads on consecutive elements, combined
//! in LDS), then combines its part into the output with one atomic update
//! (the output is first filled with the operation's identity).

use super::{along_rows, fuse_any, DefaultSchedule, Knobs, RuleCx};
use crate::index::VarId;
use crate::kernel::Stage;

/// At most this many output elements get the grid-wide reduction; more
/// rows already fill the GPU with a work-group each (`row-reduction`).
pub(crate) const MAX_OUTPUTS: i64 = 64;

/// Rows shorter than this (a constant) are reduced by one work-group each.
pub(crate) const MIN_ROW: i64 = 1 << 16;

/// `grid-reduction`: the reduced axis split into chunks on blockIdx.x
/// (outputs on blockIdx.y), each chunk walked by `THREADS` threads taking
/// `PER` elements `THREADS` apart per step for `STEPS` steps.
pub(super) fn grid_reduction(st: &Stage, names: &[&str], cx: &RuleCx) -> Option<DefaultSchedule> {
    let r = st.reduce()?;
    st.grid_combine().ok()?;
    let [axis] = r.axes.as_slice() else {
        return None;
    };
    if axis.extent.as_const().is_some_and(|c| c < MIN_ROW) {
        return None;
    }
    let outputs = st
        .axes
        .iter()
        .map(|a| a.extent.as_const())
        .product::<Option<i64>>()?;
    if outputs > MAX_OUTPUTS {
        return None;
    }
    let kv = VarId(st.axes.len() as u32);
    if !along_rows(&super::reduced(st), kv) {
        return None;
    }
    let mut kn = Knobs::new(&st.name, cx.given);
    let threads = kn.get(
        "THREADS",
        &[128, 256, 512, 1024],
        256,
        "threads per work-group",
    );
    // A chunk of 4,096 elements (2 per step for 8 steps) measured fastest
    // on the H100 for f32 and f16 rows of 2^25 to 2^26 elements, 3 % ahead
    // of 16,384 (bench/gpu/runs/h100-grid-3).
    let per = kn.get(
        "PER",
        &[1, 2, 4, 8],
        2,
        "elements per thread and step, `threads` apart",
    );
    let steps_per = kn.get(
        "STEPS",
        &[1, 2, 4, 8, 16, 32, 64],
        8,
        "steps per work-group: its chunk is threads x per x steps elements",
    );
    let k = axis.name.as_str();
    let (mut steps, block) = fuse_any(names);
    steps.extend([
        format!("{k}_g, {k}_r = split({k}, {})", threads * per * steps_per),
        format!("{k}_o, {k}_i = split({k}_r, {})", threads * per),
        format!("{k}_v, {k}_t = split({k}_i, {threads})"),
        format!("bind({k}_g, blockIdx.x)"),
    ]);
    if let Some(b) = block {
        steps.push(format!("bind({b}, blockIdx.y)"));
    }
    steps.extend([
        format!("bind({k}_t, threadIdx.x)"),
        format!("unroll({k}_v)"),
    ]);
    Some(kn.done("grid-reduction", steps))
}
