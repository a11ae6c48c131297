//! The top-k's default rule: `topk(c, ...)`, its only lowering.

use crate::kernel::{Kernel, Stage, TopK};
use crate::schedule::default::{DefaultSchedule, Knobs, RuleCx, THREADS};

/// The candidate for a top-k stage; `None` for other stages (see
/// [`crate::schedule::default::candidates`]).
pub(crate) fn rule(_k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<Vec<DefaultSchedule>> {
    Some(vec![work_group(st, st.topk()?, cx)])
}

/// A top-k: `topk(c, ...)`, a work-group per row. Threads share the LDS
/// the lists take (8-byte keys, k rounded up to a power of two), so long
/// lists get fewer threads.
fn work_group(st: &Stage, t: &TopK, cx: &RuleCx) -> DefaultSchedule {
    let mut kn = Knobs::new(&st.name, cx.given);
    let fit = (crate::schedule::steps::topk::LDS_BYTES / (t.k.next_power_of_two() * 8)) as i64;
    let cands: Vec<i64> = THREADS.iter().copied().filter(|&n| n <= fit).collect();
    let threads = kn.get("THREADS", &cands, fit.min(256), "threads per row");
    let per = kn.get(
        "PER",
        &[1, 2, 4, 8],
        4,
        "elements per thread and step, `threads` apart",
    );
    let red = st.reduce().expect("a top-k is a reduction");
    let c = &red.axes[0].name;
    kn.done(
        "topk",
        vec![format!("topk({c}, threads={threads}, per={per})")],
    )
}
