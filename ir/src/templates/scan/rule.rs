//! The scan's default rule: the work-group scan (`scan(c, ...)`), else
//! the triangular reduction the scan stands for, a thread per element.

use crate::kernel::{Kernel, Scan, Stage};
use crate::schedule::default::{flat, grid, DefaultSchedule, Knobs, RuleCx, THREADS};
use crate::schedule::steps::scan::split_refused;

/// The candidates for a scan stage, best first; `None` for other stages
/// (see [`crate::schedule::default::candidates`]).
pub(crate) fn rule(_k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<Vec<DefaultSchedule>> {
    let scan = st.reduce().and_then(|r| r.scan())?;
    let names: Vec<&str> = st.axes.iter().map(|a| a.name.as_str()).collect();
    let mut out = vec![work_group(st, scan, cx)];
    out.extend(flat(&st.name, &names, cx));
    Some(out)
}

/// A scan (`cumsum(x, c)`): `scan(c, ...)`, a work-group per row walking
/// it in chunks (cumsum.toml).
fn work_group(st: &Stage, scan: Scan, cx: &RuleCx) -> DefaultSchedule {
    let mut kn = Knobs::new(&st.name, cx.given);
    let c = &st.axes[scan.axis].name;
    // Few rows of unknown or great length: each row split over
    // work-groups of CHUNKS chunks, as the grid reductions are
    // (`schedule::default::grid`), where the output can hold the parts' totals.
    let rows = st
        .axes
        .iter()
        .enumerate()
        .filter(|(d, _)| *d != scan.axis)
        .map(|(_, a)| a.extent.as_const())
        .product::<Option<i64>>();
    let long = st.axes[scan.axis]
        .extent
        .as_const()
        .is_none_or(|e| e >= grid::MIN_ROW);
    let same_type = split_refused(st).is_none();
    let split = rows.is_some_and(|r| r <= grid::MAX_OUTPUTS) && long && same_type;
    // Split rows: 128 threads and 32 chunks (16,384 elements a part) were
    // the fastest of 100 on one row of 2^26 on the H100, 9 % ahead of 256
    // and 16 (bench/gpu/runs/h100-scan-3); whole rows: 256 (h100-scan-1).
    let threads = kn.get(
        "THREADS",
        THREADS,
        if split { 128 } else { 256 },
        "threads per row",
    );
    let per = kn.get(
        "PER",
        &[1, 2, 4, 8],
        4,
        "consecutive elements per thread in a chunk",
    );
    if split {
        let chunks = kn.get(
            "CHUNKS",
            &[4, 8, 16, 32, 64],
            32,
            "chunks of threads x per elements per work-group, a row split over work-groups",
        );
        return kn.done(
            "scan",
            vec![format!(
                "scan({c}, threads={threads}, per={per}, chunks={chunks})"
            )],
        );
    }
    kn.done(
        "scan",
        vec![format!("scan({c}, threads={threads}, per={per})")],
    )
}
