//! Attention stages: `flash` where the target's matrix instructions take
//! the query, key and value types, else `rowwise`, a thread per query
//! row.

use super::{Knobs, RuleCx};
use crate::kernel::{Kernel, Stage};
use crate::plan::DefaultSchedule;

pub(super) fn candidates(_k: &Kernel, st: &Stage, cx: &RuleCx) -> Vec<DefaultSchedule> {
    let red = st.reduce.as_ref().expect("an attention is a reduction");
    let j = &red.axes[0].name;
    let mut kn = Knobs::new(&st.name, cx.given);
    let threads = kn.get(
        "THREADS",
        &[32, 64, 128, 256],
        64,
        "query rows (threads) per work-group",
    );
    vec![kn.done("rowwise", vec![format!("rowwise({j}, threads={threads})")])]
}
