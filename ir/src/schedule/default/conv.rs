//! Direct convolutions, `O[n, k, y, x] = sum(I[n, c, y + r, x + s] *
//! F[k, c, r, s], c, r, s)` (NCHW, any number of batch-like axes, 1-D or
//! 2-D windows, strides allowed): an implicit GEMM whose rows are the
//! output channels `k`, whose columns are the output pixels `(y, x)` and
//! whose depth is `(c, r, s)`. A work-group computes BK channels × TY
//! rows × BX pixels; each thread TK × TY × TX outputs in registers. Along
//! the input channels, BC of them at a time are staged in LDS: the input's
//! tile with its halo (`TY + R − 1` rows of `BX + S − 1` pixels) and the
//! filters' `BK × BC × R × S`, so that every window position reads the
//! same staged values (LLVM keeps the overlapping reads of one thread in
//! registers: 72 LDS reads feed 576 FMAs per channel at the defaults).
//! Measured on the H100 at N=16, C=K=128, 128×128 (bench/gpu/runs/
//! h100-conv-1): 34.6 TFLOP/s, 0.86× cuDNN's f32 convolution, against
//! the hand-written one-pixel-per-thread example's 6.6.

use super::{DefaultSchedule, Knobs, RuleCx};
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, ReduceOp, Stage, TensorId};
use crate::mtype::instr_id;
use rocmc_target::matrix::Family;

/// A window longer than this along one axis is not unrolled.
const UNROLL_WINDOW: i64 = 8;

/// A stage found to be a convolution, and its loops' names.
pub(super) struct Conv<'k> {
    /// The output channels: read by the filters, not by the input.
    k: &'k str,
    /// The input channels: the reduction axis that is not a window offset.
    c: &'k str,
    /// The output axis of the input's last subscript.
    x: &'k str,
    /// That of the subscript before it, if the window is 2-D.
    y: Option<&'k str>,
    /// The window's axes, with their constant extents.
    windows: Vec<(&'k str, i64)>,
    /// The extents of the windows along y and along x (1 where none),
    /// and the strides of y and x in the input's subscripts.
    wy: i64,
    wx: i64,
    sy: i64,
    sx: i64,
    /// The other output axes (the batch).
    rest: Vec<&'k str>,
    input: TensorId,
    filters: TensorId,
}

/// The output axis `ix` moves with (the only one), if any.
fn output_var(ix: &Index, outputs: u32) -> Option<Option<VarId>> {
    let mut found = None;
    for v in (0..outputs).map(VarId) {
        if ix.uses_var(v) {
            if found.is_some() {
                return None;
            }
            found = Some(v);
        }
    }
    Some(found)
}

impl<'k> Conv<'k> {
    pub(super) fn find(k: &Kernel, st: &'k Stage) -> Option<Conv<'k>> {
        let r = st.reduce()?;
        if r.plain() != Some(ReduceOp::Sum) || st.scatter().is_some() {
            return None;
        }
        let outputs = st.axes.len() as u32;
        let mut loads: Vec<(TensorId, Vec<Index>)> = Vec::new();
        r.body
            .visit_loads(&mut |t, ix| loads.push((t, ix.to_vec())));
        let [a, b] = loads.as_slice() else {
            return None;
        };
        // A window: a reduction axis of constant extent added to an output
        // axis in one subscript.
        let window_of = |ix: &Index| -> Option<VarId> {
            let (terms, _) = ix.affine();
            let mut out = None;
            let mut spatial = false;
            for (t, c) in &terms {
                let Index::Var(v) = t else { return None };
                if v.0 < outputs {
                    spatial |= *c > 0;
                } else if *c == 1 && out.is_none() {
                    out = Some(*v);
                } else {
                    return None;
                }
            }
            let w = out?;
            let ext = r.axes[(w.0 - outputs) as usize].extent.as_const()?;
            (spatial && ext > 1).then_some(w)
        };
        let windowed = |ix: &[Index]| ix.iter().any(|x| window_of(x).is_some());
        let ((input, ix), (filters, fx)) = match (windowed(&a.1), windowed(&b.1)) {
            (true, false) => ((a.0, &a.1), (b.0, &b.1)),
            (false, true) => ((b.0, &b.1), (a.0, &a.1)),
            _ => return None,
        };
        if input == filters || k.tensors.get(input.0 as usize).is_none() {
            return None;
        }
        let (last, lead) = ix.split_last()?;
        let x = output_var(last, outputs)??;
        let y = lead
            .last()
            .and_then(|i| output_var(i, outputs))
            .flatten()
            .filter(|v| *v != x);
        // The output's contiguous axis is x: stores coalesce along it.
        if x.0 + 1 != outputs {
            return None;
        }
        let mut windows: Vec<VarId> = ix.iter().filter_map(window_of).collect();
        windows.sort();
        windows.dedup();
        let uses = |ix: &[Index], v: VarId| ix.iter().any(|i| i.uses_var(v));
        let channels: Vec<VarId> = (outputs..outputs + r.axes.len() as u32)
            .map(VarId)
            .filter(|v| !windows.contains(v))
            .collect();
        let [c] = channels.as_slice() else {
            return None;
        };
        if !uses(ix, *c) || !uses(fx, *c) {
            return None;
        }
        let kout: Vec<VarId> = (0..outputs)
            .map(VarId)
            .filter(|v| !uses(ix, *v) && uses(fx, *v))
            .collect();
        let [kv] = kout.as_slice() else {
            return None;
        };
        let name = |v: VarId| -> &'k str {
            if v.0 < outputs {
                &st.axes[v.0 as usize].name
            } else {
                &r.axes[(v.0 - outputs) as usize].name
            }
        };
        let extent = |v: VarId| r.axes[(v.0 - outputs) as usize].extent.as_const();
        let stride = |i: Option<&Index>, v: Option<VarId>| {
            let (terms, _) = i.map(Index::affine).unwrap_or_default();
            v.and_then(|v| terms.get(&Index::Var(v)).copied())
                .unwrap_or(1)
        };
        let window_extent = |i: Option<&Index>| i.and_then(window_of).and_then(extent).unwrap_or(1);
        let rest = (0..outputs)
            .map(VarId)
            .filter(|v| *v != *kv && *v != x && Some(*v) != y)
            .map(name)
            .collect();
        Some(Conv {
            k: name(*kv),
            c: name(*c),
            x: name(x),
            y: y.map(name),
            windows: windows
                .iter()
                .map(|w| (name(*w), extent(*w).unwrap_or(1)))
                .collect(),
            wy: window_extent(lead.last()),
            wx: window_extent(Some(last)),
            sy: stride(lead.last(), y),
            sx: stride(Some(last), Some(x)),
            rest,
            input,
            filters,
        })
    }

    /// The grid: the batch-like axes and the channel blocks fused on z,
    /// row blocks on y (2-D), pixel blocks on x.
    fn grid_steps(&self, steps: &mut Vec<String>) {
        let mut outer: Vec<&str> = self.rest.clone();
        let ko = format!("{}_o", self.k);
        outer.push(&ko);
        let (fuse, blocks) = super::fuse_all(&outer);
        steps.extend(fuse);
        steps.push(format!("bind({blocks}, blockIdx.z)"));
        if let Some(y) = self.y {
            steps.push(format!("bind({y}_o, blockIdx.y)"));
        }
        steps.push(format!("bind({}_o, blockIdx.x)", self.x));
    }

    /// Every window loop short enough, unrolled.
    fn unroll_windows(&self, steps: &mut Vec<String>) {
        for (w, e) in &self.windows {
            if *e <= UNROLL_WINDOW {
                steps.push(format!("unroll({w})"));
            }
        }
    }

    /// The matrix-instruction schedule where `cx`'s target takes the
    /// operands' types (2-D windows), then the register tiles.
    pub(super) fn schedules(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> Vec<DefaultSchedule> {
        let mut out: Vec<DefaultSchedule> = self.mma(k, st, cx).into_iter().collect();
        let mut tiles = self.tiles(k, st, cx);
        tiles.by_target =
            cx.target.is_none() && self.y.is_some() && self.instr_types(k, st).is_some();
        out.push(tiles);
        out
    }

    /// The filters', the input's and the sum's types when the stage sums a
    /// plain product (casts allowed), as `mma` needs.
    fn instr_types(&self, k: &Kernel, st: &Stage) -> Option<[crate::DType; 3]> {
        super::product_types(k, st, self.filters, self.input)
    }

    /// `conv-mma`: per window position, a GEMM of the filters (output
    /// channels × input channels) by the input (input channels × pixels)
    /// on the target's matrix instruction, its depth the input channels.
    /// A work-group of WK × WY waves computes BK channels × WY rows × WX
    /// pixels, each wave BK / WK channels × WX pixels of one row as
    /// fragments; per step of one instruction's depth of input channels,
    /// the input's tile (with the window's halo) and the filters' are
    /// staged in LDS and every window position is one more GEMM on them.
    /// On the H100, f16 at N=16, C=K=128, 128 × 128: 98 TFLOP/s, 3× the
    /// register tiles and 0.36× cuDNN's tensor cores; 2 × 2 waves of 32 ×
    /// 128 was 1.8–2.6× the same fragments spread over 8 waves
    /// (bench/gpu/runs/h100-conv-2).
    fn mma(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<DefaultSchedule> {
        let target = cx.target?;
        let y = self.y?;
        // Strided windows read the staged input at a stride across the
        // fragment's lanes: a 5 × 5 window of stride 2 ran at 18.7 TFLOP/s
        // this way on the H100, 30.9 with the register tiles (h100-conv-2).
        if self.sy != 1 || self.sx != 1 {
            return None;
        }
        let [da, db, acc] = self.instr_types(k, st)?;
        let (unit, instr) = super::matrix_instr(target, [da, db, acc])?;
        let instr = &instr;
        let (m, n, depth) = (i64::from(instr.m), i64::from(instr.n), i64::from(instr.k));
        let mut kn = Knobs::new(&st.name, cx.given);
        let bk = kn.get("BK", &[32, 64, 128], 64, "output channels per work-group");
        let wk = kn.get("WK", &[1, 2, 4], 2, "waves along the output channels");
        let wy = kn.get("WY", &[1, 2, 4], 2, "rows per work-group, one per wave");
        // wave32's WMMA holds 8 accumulator registers a fragment per lane,
        // twice MFMA's 4: 16 fragments a wave spilt on gfx1100; ptxas
        // spills them for sm_80, not for sm_90.
        let hopper = target
            .nvidia()
            .is_some_and(|t| t.compute_capability() >= (9, 0));
        let dwx = match instr.family {
            Family::WmmaGfx11 | Family::WmmaGfx12 => 64,
            Family::MmaSync if !hopper => 64,
            Family::MmaSync | Family::Wgmma | Family::WgmmaRegA | Family::Mfma => 128,
        };
        let wx = kn.get("WX", &[32, 64, 128], dwx, "pixels along x per wave");
        kn.require("{BK} % {WK} == 0");
        kn.require(&format!(
            "({{BK}} / {{WK}}) % {m} == 0 && {{WX}} % {n} == 0"
        ));
        kn.require(&format!(
            "{{WK}} * {{WY}} * {} <= {}",
            unit.wave(),
            target.max_threads_per_block()
        ));
        let esize = da.size().max(db.size()) as i64;
        let (wyn, wxn, sy, sx) = (self.wy, self.wx, self.sy, self.sx);
        let win: i64 = self.windows.iter().map(|w| w.1).product();
        let shared = i64::from(cx.shared_bytes());
        let bytes = depth * (bk * win + ((wy - 1) * sy + wyn) * ((wx - 1) * sx + wxn)) * esize;
        kn.require(&format!(
            "{depth} * ({{BK}} * {win} + (({{WY}} - 1) * {sy} + {wyn}) * (({{WX}} - 1) * {sx} + {wxn})) * {esize} <= {shared}"
        ));
        let fits = bk % wk == 0 && (bk / wk) % m == 0 && wx % n == 0;
        let threads = wk * wy * i64::from(unit.wave());
        if !kn.bad()
            && (!fits || threads > i64::from(target.max_threads_per_block()) || bytes > shared)
        {
            return None;
        }
        let (kk, c, x) = (self.k, self.c, self.x);
        let mut steps = vec![
            format!("{kk}_o, {kk}_i = split({kk}, {bk})"),
            format!("{kk}_w, {kk}_f = split({kk}_i, {})", bk / wk),
            format!("{kk}_m, {kk}_r = split({kk}_f, {m})"),
            format!("{y}_o, {y}_w = split({y}, {wy})"),
            format!("{x}_o, {x}_f = split({x}, {wx})"),
            format!("{x}_m, {x}_r = split({x}_f, {n})"),
            format!("{c}_o, {c}_r = split({c}, {depth})"),
        ];
        let mut order: Vec<String> = self.rest.iter().map(|n| n.to_string()).collect();
        order.extend([
            format!("{kk}_o"),
            format!("{y}_o"),
            format!("{x}_o"),
            format!("{kk}_w"),
            format!("{y}_w"),
            format!("{c}_o"),
        ]);
        order.extend(self.windows.iter().map(|w| w.0.to_string()));
        order.extend([
            format!("{kk}_m"),
            format!("{x}_m"),
            format!("{kk}_r"),
            format!("{x}_r"),
            format!("{c}_r"),
        ]);
        steps.push(format!("reorder({})", order.join(", ")));
        self.grid_steps(&mut steps);
        steps.extend([
            format!("bind({kk}_w, threadIdx.z)"),
            format!("bind({y}_w, threadIdx.y)"),
        ]);
        self.unroll_windows(&mut steps);
        steps.extend([format!("unroll({kk}_m)"), format!("unroll({x}_m)")]);
        let (i, f) = (&k.tensor(self.input).name, &k.tensor(self.filters).name);
        steps.extend([
            format!("{i}_tile = cache_read({i}, shared, {c}_o)"),
            format!("{f}_tile = cache_read({f}, shared, {c}_o)"),
            format!("mma({kk}_r, {x}_r, {c}_r, instr={})", instr_id(instr)),
        ]);
        let mut s = kn.done("conv-mma", steps);
        s.by_target = true;
        Some(s)
    }

    /// The register-tiled schedule (`conv-tiles`).
    fn tiles(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> DefaultSchedule {
        let out_extent = |n: &str| {
            st.axes
                .iter()
                .find(|a| a.name == n)
                .and_then(|a| a.extent.as_const())
        };
        // A known short axis gets a tile no longer than it needs.
        let fit = |n: &str, d: i64, lo: i64| {
            out_extent(n).map_or(d, |e| d.min((e as u64).next_power_of_two() as i64).max(lo))
        };
        let mut kn = Knobs::new(&st.name, cx.given);
        let tk = kn.get("TK", &[1, 2, 4, 8], 4, "output channels per thread");
        let bk = kn.get(
            "BK",
            &[8, 16, 32, 64, 128],
            fit(self.k, 64, tk * 4),
            "output channels per work-group",
        );
        // Without a y axis a thread's tile is longer along x: 8 × 128 ran
        // as fast as 4 × 64 on the H100 (bench/gpu/runs/h100-conv-1), and
        // ptxas 12.9 spills the latter's window reads.
        let (dtx, dbx) = if self.y.is_some() { (4, 64) } else { (8, 128) };
        let tx = kn.get("TX", &[1, 2, 4, 8], dtx, "pixels along x per thread");
        let bx = kn.get(
            "BX",
            &[16, 32, 64, 128, 256],
            fit(self.x, dbx, tx * 4),
            "pixels along x per work-group",
        );
        let ty = match self.y {
            Some(y) => kn.get(
                "TY",
                &[1, 2, 4, 8],
                fit(y, 4, 1),
                "rows per thread (and work-group)",
            ),
            None => 1,
        };
        // A channel's window reads, unrolled, stay in registers: the
        // input's (rows × columns under the thread's outputs) and the
        // filters'. Four channels of a 3 × 3 window (72 values each) was
        // the fastest on the H100; bigger windows and strides take fewer,
        // so that AMD's VGPRs hold them (a 5 × 5 window of stride 2 spilt
        // on gfx90a with four).
        let per_channel = ((ty - 1) * self.sy + self.wy) * ((tx - 1) * self.sx + self.wx)
            + tk * self.wy * self.wx;
        let dbc = [4, 2, 1]
            .into_iter()
            .find(|b| b * per_channel <= 300)
            .unwrap_or(1);
        let bc = kn.get(
            "BC",
            &[1, 2, 4, 8, 16],
            dbc,
            "input channels staged in LDS per step",
        );
        kn.require("{BK} % {TK} == 0 && {BX} % {TX} == 0");
        kn.require("({BK} / {TK}) * ({BX} / {TX}) >= 32");
        kn.require("({BK} / {TK}) * ({BX} / {TX}) <= 1024");
        // The staged tiles: filters BK × BC × window, input BC × halo rows
        // × halo columns (the y window, if any, is the one before x's).
        let win: i64 = self.windows.iter().map(|w| w.1).product();
        let (wy, wx) = (self.wy, self.wx);
        let esize = k
            .tensor(self.input)
            .dtype
            .size()
            .max(k.tensor(self.filters).dtype.size()) as i64;
        let (sy, sx) = (self.sy, self.sx);
        let rows = if self.y.is_some() { "{TY}" } else { "1" };
        kn.require(&format!(
            "{{BC}} * ({{BK}} * {win} + (({rows} - 1) * {sy} + {wy}) * (({{BX}} - 1) * {sx} + {wx})) * {esize} <= {}",
            cx.shared_bytes()
        ));
        let (kk, c, x) = (self.k, self.c, self.x);
        let mut steps = vec![
            format!("{kk}_o, {kk}_i = split({kk}, {bk})"),
            format!("{kk}_t, {kk}_r = split({kk}_i, {tk})"),
        ];
        if let Some(y) = self.y {
            steps.push(format!("{y}_o, {y}_r = split({y}, {ty})"));
        }
        steps.extend([
            format!("{x}_o, {x}_i = split({x}, {bx})"),
            format!("{x}_t, {x}_r = split({x}_i, {tx})"),
            format!("{c}_o, {c}_i = split({c}, {bc})"),
        ]);
        let mut order: Vec<String> = self.rest.iter().map(|n| n.to_string()).collect();
        order.push(format!("{kk}_o"));
        order.extend(self.y.map(|y| format!("{y}_o")));
        order.extend([
            format!("{x}_o"),
            format!("{kk}_t"),
            format!("{x}_t"),
            format!("{c}_o"),
            format!("{c}_i"),
        ]);
        order.extend(self.windows.iter().map(|w| w.0.to_string()));
        order.extend(self.y.map(|y| format!("{y}_r")));
        order.extend([format!("{kk}_r"), format!("{x}_r")]);
        steps.push(format!("reorder({})", order.join(", ")));
        self.grid_steps(&mut steps);
        steps.extend([
            format!("bind({kk}_t, threadIdx.y)"),
            format!("bind({x}_t, threadIdx.x)"),
            format!("unroll({c}_i)"),
        ]);
        self.unroll_windows(&mut steps);
        steps.extend(self.y.map(|y| format!("unroll({y}_r)")));
        steps.extend([format!("unroll({kk}_r)"), format!("unroll({x}_r)")]);
        let (i, f) = (&k.tensor(self.input).name, &k.tensor(self.filters).name);
        steps.extend([
            format!("{i}_tile = cache_read({i}, shared, {c}_o)"),
            format!("{f}_tile = cache_read({f}, shared, {c}_o)"),
        ]);
        kn.done("conv-tiles", steps)
    }
}
