//! Scatters (histogram.toml).

use super::{fuse_all, DefaultSchedule, Knobs, RuleCx, PRIVATE_TABLE};
use crate::kernel::{Kernel, Stage};

/// A scatter: 256 threads per work-group over the fused `over` axes; into
/// a small constant table, 16384 updates per work-group counted in LDS
/// first (histogram.toml).
pub(super) fn scatter(k: &Kernel, st: &Stage, names: &[&str], cx: &RuleCx) -> Vec<DefaultSchedule> {
    if names.is_empty() {
        return Vec::new();
    }
    let out = k.tensor(st.output);
    let table: Option<i64> = out
        .shape
        .iter()
        .map(|e| e.as_const())
        .try_fold(1i64, |a, b| b.and_then(|b| a.checked_mul(b)));
    let (steps, f) = fuse_all(names);
    let mut v = Vec::new();
    if table.is_some_and(|n| n <= PRIVATE_TABLE) {
        let mut kn = Knobs::new(&st.name, cx.given);
        let per = kn.get(
            "PER_GROUP",
            &[2048, 4096, 8192, 16384, 32768, 65536],
            16384,
            "updates per work-group (each work-group's LDS copy is merged once)",
        );
        let threads = kn.get(
            "THREADS",
            &super::THREADS[..4],
            256,
            "threads per work-group",
        );
        let mut p = steps.clone();
        p.extend([
            format!("{f}_b, {f}_r = split({f}, {per})"),
            format!("{f}_e, {f}_t = split({f}_r, {threads})"),
            format!("bind({f}_b, blockIdx.x)"),
            format!("bind({f}_t, threadIdx.x)"),
            format!("privatize({})", out.name),
        ]);
        v.push(kn.done("scatter-privatized", p));
    }
    let mut kn = Knobs::new(&st.name, cx.given);
    let threads = kn.get("THREADS", super::THREADS, 256, "threads per work-group");
    let mut p = steps;
    p.extend([
        format!("{f}_b, {f}_t = split({f}, {threads})"),
        format!("bind({f}_b, blockIdx.x)"),
        format!("bind({f}_t, threadIdx.x)"),
    ]);
    v.push(kn.done("scatter", p));
    v
}
