//! Differential fuzzing, the way compiler projects find miscompilations
//! (Csmith, YARPGen): generate random *valid* kernels, run each on the CPU
//! path and with the reference interpreter, and compile it for a fixed list
//! of AMDGPU targets. A kernel fails when
//!
//! - the compiled kernel and the interpreter disagree beyond the dtype's
//!   tolerance (contraction off, so only math expansions may differ);
//! - the interpreter refuses it (every generated subscript is in bounds by
//!   construction, so an out-of-bounds access is a lowering bug);
//! - any step reports an internal error or panics.
//!
//! Kernels the front end refuses with a diagnostic (a schedule the
//! generator could not know to be illegal, e.g. a vectorized loop over a
//! strided access) are counted, not failures; at least half must be
//! accepted, so the generator cannot quietly stop testing anything.
//!
//! Generated: subscripts with affine and non-affine forms (min, max, floor
//! division and modulo, negative intermediates, clamps), gathered
//! subscripts (elements of an integer tensor, in range and deliberately
//! out of range, nested one level), scatters (`+=`, `max=`, `min=` into
//! data-dependent, out-of-range and repeated places, privatized in LDS or
//! not), argmax/argmin, tuple reductions (a sum beside a maximum, an
//! argmax pair), scans (cumsum/cumprod/cummax/cummin along either axis,
//! inclusive or exclusive, by the work-group scan — whole rows or rows
//! split over work-groups — or any schedule), top-k
//! (the k best along either axis, largest or smallest, values and
//! indices or the indices alone, k from 1 to 64, default or written),
//! triangular reductions (k < min(i + 1, m)), convolutions with no
//! schedule (1-D and 2-D, strided, batched, epilogues), row chains whose
//! compute_at parts and cached rows span loops of symbolic extent bounded
//! by `max` (reductions, an elementwise part, the row in LDS or not), grid reductions (a
//! reduction loop on blockIdx.x, its parts combined atomically, with or
//! without an epilogue), attention (random dtype,
//! head sizes, batch axis, causal mask, scale, log-sum-exp output, K from
//! a stage, no schedule, `rowwise` or `flash` run through a random
//! target's lane layout; at times written out as the five stages that
//! define it, which the template makes one attention),
//! `isnan`/`isinf` of NaN and infinities made on purpose, bitwise
//! operators and shifts on integers, every dtype,
//! casts, comparisons, select and math functions (`exp2_approx` too);
//! one or two stages
//! (elementwise, reductions); schedules with split (by factor and parts),
//! fuse, reorder, tile, bind, unroll, vectorize, cache_read/cache_write
//! (shared and local), compute_inline, compute_at and cooperative
//! reductions, with random factors, or no schedule at all (the default
//! rules, fusion included); sizes 1, 2, 3 and non-divisible ones.
//!
//! Two tests run: one from a fixed seed (`ROCMC_DIFFUZZ_SEED` overrides it)
//! and one from a seed drawn anew each run and printed first, so CI keeps
//! exploring and every failure can be replayed. `ROCMC_DIFFUZZ_SECS` sets
//! each one's running time (default 20). Failing kernels are written to
//! `target/difffuzz/`; reduce one by hand into tests/regress/. The kernel
//! being checked is always in `target/difffuzz-current-{fixed,fresh}.toml`
//! with its seed, so one that kills the process (a signal, an LLVM abort)
//! is kept.
//!
//! ```sh
//! ROCMC_DIFFUZZ_SECS=1800 ROCMC_DIFFUZZ_SEED=$RANDOM cargo test --release -p rocmc-tests --test e2e -- difffuzz:: --nocapture
//! ```

use rocmc::ir::DType;
use std::collections::HashMap;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// AMD targets get a code object; NVIDIA ones PTX, which ptxas then assembles.
/// sm_52 stands for the processors whose PTX (older than 6.2) lacks
/// instructions newer ones have (tests/regress/vote_old_ptx.toml).
const TARGETS: &[&str] = &[
    "gfx90a", "gfx942", "gfx1100", "gfx1201", "sm_52", "sm_70", "sm_90", "sm_90a",
];

use rocmc::run::Rng;

/// Choices for the generator, over the fixed generator of `rocmc run`.
trait Pick {
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T;
    fn chance(&mut self, percent: usize) -> bool;
}

impl Pick for Rng {
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const FLOATS: &[DType] = &[DType::F32, DType::F32, DType::F64, DType::F16, DType::BF16];
const INTS: &[DType] = &[DType::I32, DType::I8, DType::U8, DType::U32, DType::I64];

/// One input tensor: its name, dtype and which axes its dimensions follow
/// ("n" = rows, "m" = columns).
struct Input {
    name: &'static str,
    dtype: DType,
    dims: &'static [&'static str],
}

struct Gen<'r> {
    rng: &'r mut Rng,
    inputs: Vec<Input>,
    /// The axis names of the stage being generated, by size: ("n" → i, "m" → j).
    axes: HashMap<&'static str, String>,
    /// Inside a gathered subscript (gathers nest one level deep).
    gathering: bool,
}

impl Gen<'_> {
    /// A subscript over `size` from its axis, in bounds for every value of
    /// the axis in [0, size) by construction.
    fn subscript(&mut self, size: &str) -> String {
        if !self.gathering && self.rng.chance(12) {
            return self.gathered(size);
        }
        let Some(a) = self.axes.get(size).cloned() else {
            // No axis for this size: a constant-ish in-bounds index.
            return match self.rng.below(3) {
                0 => "0".into(),
                1 => format!("{size} - 1"),
                _ => format!("{size} / 2"),
            };
        };
        let c = 1 + self.rng.below(5);
        let d = 1 + self.rng.below(4);
        match self.rng.below(13) {
            0 | 1 => a,
            2 => format!("max({a} - {c}, 0)"),
            3 => format!("min({a} + {c}, {size} - 1)"),
            4 => format!("({a} * {d} + {c}) % {size}"),
            5 => format!("{a} / {d}"),
            6 => format!("{size} - 1 - {a}"),
            7 => format!("min(max({a} - {c}, 0) + {d}, {size} - 1)"),
            8 => format!("({a} - {c}) % {size}"),
            9 => format!("max(min({a} * 2 - {c}, {size} - 1), 0)"),
            10 => format!("({a} + {c}) / {d} - {c} / {d}"),
            11 => format!("min(({a} - {c}) % {d} + {a} / 2, {size} - 1)"),
            _ => format!("max({a} - {c}, 0) / {d}"),
        }
    }

    /// A data-dependent subscript over `size`: an element of the integer
    /// tensor G, used directly (random inputs are then drawn in range), or
    /// shifted and scaled so that it leaves the dimension on both sides
    /// (the clamp is then what is tested).
    fn gathered(&mut self, size: &str) -> String {
        self.gathering = true;
        let inner = self.subscript("n");
        self.gathering = false;
        let g = format!("G[{inner}]");
        match self.rng.below(5) {
            0 | 1 => g,
            2 => format!("{g} * 3 - {}", 1 + self.rng.below(9)),
            3 => format!("i32({g}) % {size} + {}", self.rng.below(3)),
            _ => format!("min(i32({g}), {size} - 1) - 1"),
        }
    }

    fn load(&mut self, want: DType) -> (String, bool) {
        let k = self.rng.below(self.inputs.len());
        let (name, dtype, dims) = {
            let i = &self.inputs[k];
            (i.name, i.dtype, i.dims)
        };
        let subs: Vec<String> = dims.iter().map(|d| self.subscript(d)).collect();
        let e = format!("{name}[{}]", subs.join(", "));
        if dtype == want {
            (e, true)
        } else if want.is_float() || !dtype.is_float() {
            (format!("{}({e})", want.name()), true)
        } else {
            // Float → int: scaled so values spread over the integer range.
            (format!("{}({e} * 100.0)", want.name()), true)
        }
    }

    /// An expression of dtype `t`; the flag says whether it is exact (no
    /// approximated math function inside), so float → int casts of it
    /// cannot land on either side of a rounding boundary.
    fn expr(&mut self, t: DType, depth: usize) -> (String, bool) {
        if depth == 0 || self.rng.chance(25) {
            return match self.rng.below(6) {
                0 if t.is_float() => (
                    self.rng.pick(&["0.5", "2.0", "-1.25", "3.0"]).to_string(),
                    true,
                ),
                0 => (self.rng.pick(&["1", "3", "7"]).to_string(), true),
                1 => {
                    let a = self.axes.values().next().cloned().unwrap_or("0".into());
                    if t == DType::I32 {
                        (a, true)
                    } else {
                        (format!("{}({a})", t.name()), true)
                    }
                }
                _ => self.load(t),
            };
        }
        if t.is_float() {
            match self.rng.below(12) {
                0..=2 => self.arith(t, depth),
                3 => {
                    let (a, ea) = self.expr(t, depth - 1);
                    let (b, eb) = self.expr(t, depth - 1);
                    (format!("({a} / (abs({b}) + 1.0))"), ea && eb)
                }
                4 => self.min_max(t, depth),
                5 => self.select(t, depth),
                6 => {
                    // Through another dtype and back. An approximated value
                    // is not widened: its error is the narrow type's, beyond
                    // the wide type's tolerance.
                    let u = *self.rng.pick(FLOATS);
                    let (a, ea) = self.expr(u, depth - 1);
                    if !ea && u.size() < t.size() {
                        self.load(t)
                    } else {
                        (format!("{}({a})", t.name()), ea)
                    }
                }
                7 => {
                    let u = *self.rng.pick(INTS);
                    let (a, ea) = self.expr(u, depth - 1);
                    (format!("{}({a})", t.name()), ea)
                }
                8 => {
                    let (a, _) = self.expr(t, depth - 1);
                    let (b, _) = self.expr(t, depth - 1);
                    let (c, _) = self.expr(t, depth - 1);
                    (format!("fma({a}, {b}, {c})"), false)
                }
                _ => {
                    let (a, ea) = self.expr(t, depth - 1);
                    // floor and ceil of an approximated value jump by 1
                    // where it lies within an ulp of an integer: only of
                    // exact ones (seed 267045513 found floor(sigmoid(x) * 4)).
                    let pick = match self.rng.below(15) {
                        11 | 12 if !ea => 13,
                        k => k,
                    };
                    let e = match pick {
                        // Bounded: e^40 summed with ± weights cancels beyond any tolerance.
                        0 => format!("exp(min(max({a}, -8.0), 8.0) * 0.5)"),
                        1 => format!(
                            "{}(min(max({a}, -8.0), 8.0))",
                            self.rng.pick(&["exp2", "exp2_approx"])
                        ),
                        2 => format!("log(abs({a}) + 0.25)"),
                        3 => format!("log2(abs({a}) + 1.0)"),
                        4 => format!("sqrt(abs({a}))"),
                        5 => format!("rsqrt(abs({a}) + 1.0)"),
                        6 => format!("tanh({a})"),
                        7 => format!("sigmoid({a})"),
                        8 => format!("gelu({a})"),
                        9 => format!("erf({a})"),
                        10 => format!(
                            "pow(abs({a}) + 0.5, {})",
                            self.rng.pick(&["2.0", "-1.5", "0.5", "3.0"])
                        ),
                        11 => format!("floor({a} * 4.0)"),
                        12 => format!("ceil({a})"),
                        13 => format!("abs({a})"),
                        _ => format!("-{a}"),
                    };
                    (e, false)
                }
            }
        } else {
            match self.rng.below(8) {
                0..=2 => self.arith(t, depth),
                3 => {
                    let (a, ea) = self.expr(t, depth - 1);
                    let d = if t.is_signed() {
                        self.rng.pick(&["3", "-7", "5", "2"])
                    } else {
                        self.rng.pick(&["3", "7", "5", "2"])
                    };
                    let op = self.rng.pick(&["/", "%"]);
                    (format!("({a} {op} {d})"), ea)
                }
                4 => self.min_max(t, depth),
                5 => self.select(t, depth),
                6 => {
                    // From a float, only when exactly computed.
                    let u = *self.rng.pick(FLOATS);
                    let (a, ea) = self.expr(u, depth - 1);
                    if ea && u != DType::F16 && u != DType::BF16 {
                        (format!("{}({a} * 10.0)", t.name()), true)
                    } else {
                        self.load(t)
                    }
                }
                _ => {
                    let u = *self.rng.pick(INTS);
                    let (a, ea) = self.expr(u, depth - 1);
                    (format!("{}({a})", t.name()), ea)
                }
            }
        }
    }

    /// `a + b`, `a - b` or `a * b` of dtype `t`.
    fn arith(&mut self, t: DType, depth: usize) -> (String, bool) {
        let (a, ea) = self.expr(t, depth - 1);
        let (b, eb) = self.expr(t, depth - 1);
        // Integers also get bitwise operators and shifts (by any amount:
        // taken modulo the width).
        let op = match t.is_int() {
            true => self.rng.pick(&["+", "-", "*", "&", "|", "^", "<<", ">>"]),
            false => self.rng.pick(&["+", "-", "*"]),
        };
        (format!("({a} {op} {b})"), ea && eb)
    }

    fn min_max(&mut self, t: DType, depth: usize) -> (String, bool) {
        let (a, ea) = self.expr(t, depth - 1);
        let (b, eb) = self.expr(t, depth - 1);
        let f = self.rng.pick(&["min", "max"]);
        (format!("{f}({a}, {b})"), ea && eb)
    }

    fn select(&mut self, t: DType, depth: usize) -> (String, bool) {
        let (c, ec) = self.cond(depth - 1);
        let (a, ea) = self.expr(t, depth - 1);
        let (b, eb) = self.expr(t, depth - 1);
        (format!("select({c}, {a}, {b})"), ec && ea && eb)
    }

    fn cond(&mut self, depth: usize) -> (String, bool) {
        let t = if self.rng.chance(50) {
            *self.rng.pick(FLOATS)
        } else {
            *self.rng.pick(INTS)
        };
        let (a, ea) = self.expr(t, depth);
        if t.is_float() && self.rng.chance(20) {
            // NaN and infinities made on purpose (0/0, x * inf).
            let f = *self.rng.pick(&["isnan", "isinf"]);
            let arg = match self.rng.below(4) {
                0 => a.clone(),
                1 => format!("{a} / ({a} - {a})"),
                2 => format!("{a} * inf"),
                _ => format!("{a} - nan"),
            };
            return (format!("{f}({arg})"), ea);
        }
        let (b, eb) = self.expr(t, depth);
        let op = self.rng.pick(&["<", "<=", ">", ">=", "==", "!="]);
        (format!("({a} {op} {b})"), ea && eb)
    }
}

fn factor(rng: &mut Rng) -> usize {
    *rng.pick(&[1, 2, 3, 4, 5, 7, 8, 16, 32, 64])
}

/// A schedule for a 2-D elementwise stage over (i, j).
/// Sometimes none: the default rules (and their fusion of producers into
/// readers) are then what is tested.
/// A reduction `R[i]` over `k` split into chunks on blockIdx.x, rows on
/// blockIdx.y; inside a chunk serial, or cooperative over threads.
fn grid_reduction_schedule(rng: &mut Rng) -> Vec<String> {
    let mut s = vec![
        "bind(i, blockIdx.y)".to_string(),
        format!("kg, kr = split(k, {})", rng.pick(&[3, 8, 16, 64])),
        "bind(kg, blockIdx.x)".into(),
    ];
    if rng.chance(50) {
        s.push(format!("ko, ki = split(kr, {})", rng.pick(&[2, 4, 8])));
        s.push("bind(ki, threadIdx.x)".into());
    }
    s
}

fn schedule_2d(rng: &mut Rng, vec_ok: bool, bounded: bool) -> Vec<String> {
    if rng.chance(15) {
        return Vec::new();
    }
    let (fy, fx) = (*rng.pick(&[1, 2, 4, 8]), *rng.pick(&[8, 16, 32, 64]));
    let mut s = Vec::new();
    match rng.below(5) {
        0 => {
            s.push(format!("io, jo, ii, ji = tile(i, j, {fy}, {fx})"));
            s.push("bind(io, blockIdx.y)".into());
            s.push("bind(jo, blockIdx.x)".into());
            s.push("bind(ii, threadIdx.y)".into());
            s.push("bind(ji, threadIdx.x)".into());
        }
        1 if bounded => {
            s.push("f = fuse(i, j)".into());
            s.push(format!("fo, fi = split(f, {})", fx * fy));
            s.push("bind(fo, blockIdx.x)".into());
            s.push("bind(fi, threadIdx.x)".into());
        }
        2 => {
            s.push(format!("jo, ji = split(j, nparts={})", 1 + rng.below(4)));
            s.push(format!("ja, jt = split(ji, {fx})"));
            s.push("bind(i, blockIdx.x)".into());
            s.push("bind(jt, threadIdx.x)".into());
            if rng.chance(50) {
                s.push("reorder(ja, jo)".into());
            }
        }
        3 if vec_ok => {
            let w = *rng.pick(&[2, 4]);
            s.push(format!("jo, jt = split(j, {})", fx * w));
            s.push(format!("ja, jv = split(jt, {w})"));
            s.push("bind(i, blockIdx.y)".into());
            s.push("bind(jo, blockIdx.x)".into());
            s.push("bind(ja, threadIdx.x)".into());
            s.push("vectorize(jv)".into());
        }
        _ => {
            s.push(format!("jo, ji = split(j, {fx})"));
            s.push(format!("jt, ju = split(ji, {})", factor(rng).min(4)));
            s.push("bind(i, blockIdx.y)".into());
            s.push("bind(jo, blockIdx.x)".into());
            s.push("bind(jt, threadIdx.x)".into());
            s.push("unroll(ju)".into());
        }
    }
    s
}

/// A tuple reduction over `x` (of dtype `t`) into `R[i], R2[i]`: its
/// compute and its `init`/`combine` lines. A sum beside a maximum (where
/// a sum's order cannot matter beyond the tolerance), or an argmax pair
/// (first index on ties, NaN below every number, so that the combiner is
/// associative whatever the data) where `x` is exactly computed; `None`
/// for types neither takes.
fn tuple_reduction(t: DType, x: &str, exact: bool, rng: &mut Rng) -> Option<(String, String)> {
    let lowest = match t {
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => "\"-inf\"",
        DType::I8 => "-128",
        DType::U8 | DType::U32 => "0",
        DType::I32 => "-2147483648",
        _ => return None,
    };
    let zero = if t.is_float() { "0.0" } else { "0" };
    // A linear recurrence h = 0.75·h + x: associative, not commutative.
    // Only an in-order fold gets it right (tests/regress/linear_recurrence_order.toml).
    if matches!(t, DType::F32 | DType::F64) && rng.chance(40) {
        return Some((
            format!("R[i], R2[i] = reduce(0.75, {x})"),
            "init = { R = 1.0, R2 = 0.0 }\ncombine = { R = \"a.R * b.R\", R2 = \"a.R2 * b.R + b.R2\" }\n".to_string(),
        ));
    }
    if matches!(t, DType::F32 | DType::F64 | DType::I32 | DType::U32) && rng.chance(50) {
        return Some((
            format!("R[i], R2[i] = reduce({x}, {x})"),
            format!(
                "init = {{ R = {zero}, R2 = {lowest} }}\ncombine = {{ R = \"a.R + b.R\", R2 = \"max(a.R2, b.R2)\" }}\n"
            ),
        ));
    }
    if matches!(t, DType::U32 | DType::F64) || !exact {
        return None;
    }
    let (gt, eq) = if t.is_float() {
        (
            "(b.R > a.R || (isnan(a.R) && !isnan(b.R)))",
            "(b.R == a.R || (isnan(a.R) && isnan(b.R)))",
        )
    } else {
        ("b.R > a.R", "b.R == a.R")
    };
    let wins = format!("a.R2 < 0 || (b.R2 >= 0 && ({gt} || ({eq} && b.R2 < a.R2)))");
    Some((
        format!("R[i], R2[i] = reduce({x}, k)"),
        format!(
            "init = {{ R = {lowest}, R2 = -1 }}\ncombine = {{ R = \"select({wins}, b.R, a.R)\", R2 = \"select({wins}, b.R2, a.R2)\" }}\n"
        ),
    ))
}

/// Appends a stage over (n) or (n, m); a 1-D stage reduces over k in 0..m.
fn stage(src: &mut String, compute: &str, dims: usize, schedule: &[String]) {
    let (shape, reduce) = if dims == 1 {
        ("[\"n\"]", "reduce = { k = \"m\" }\n")
    } else {
        ("[\"n\", \"m\"]", "")
    };
    writeln!(
        src,
        "\n[[stage]]\ncompute = \"{compute}\"\nshape = {shape}\n{reduce}schedule = {}",
        quoted(schedule)
    )
    .unwrap();
}

fn quoted(steps: &[String]) -> String {
    let v: Vec<String> = steps.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", v.join(", "))
}

/// A random attention kernel: `O` (and sometimes the log-sum-exp `L`) from
/// Q, K, V of a random dtype, head sizes (1 to 64, none a tile's multiple
/// on purpose), with or without a batch axis, causal or not, with or
/// without `scale=`, K read from the inputs or from a stage before, and
/// no schedule (the default rules), `rowwise` or `flash` with random tiles
/// (and rows per wave).
fn attention_kernel(rng: &mut Rng, id: u64) -> String {
    let dt = *rng.pick(&["f16", "bf16", "f16", "bf16", "f32"]);
    // `flash` runs here through emulated matrix instructions, whose cost
    // grows fast with the head sizes (D = 64 takes minutes): small heads,
    // but for sm_90a's warpgroups, which take 64 (`WG_ATTENTION`).
    let flash = rng.chance(35);
    let group = flash && rng.chance(15);
    let heads: &[u32] = if group {
        &[64]
    } else if flash {
        &[1, 8, 16, 20, 24]
    } else {
        &[1, 8, 16, 20, 24, 32, 64]
    };
    let (e, d) = (*rng.pick(heads), *rng.pick(heads));
    let (bdim, b) = if rng.chance(50) {
        ("3, ", "b, ")
    } else {
        ("", "")
    };
    let mut src = String::from(if group { WG_ATTENTION } else { "" });
    writeln!(src, "[kernel]\nname = \"fz{id}\"\nsizes = [\"n\", \"m\"]").unwrap();
    if rng.chance(50) {
        writeln!(src, "max = {{ n = 4096, m = 4096 }}").unwrap();
    }
    writeln!(
        src,
        "\n[inputs]\nQ = {{ dtype = \"{dt}\", shape = [{bdim}\"n\", {e}] }}\nK = {{ dtype = \"{dt}\", shape = [{bdim}\"m\", {e}] }}\nV = {{ dtype = \"{dt}\", shape = [{bdim}\"m\", {d}] }}"
    )
    .unwrap();
    // K through a stage of its own: materialized or inlined.
    let keys = if rng.chance(30) {
        let sched = if rng.chance(50) {
            "[\"compute_inline()\"]"
        } else {
            "[]"
        };
        writeln!(
            src,
            "\n[[stage]]\ncompute = \"P[{b}r, c] = K[{b}r, c] * 0.5\"\nshape = [{bdim}\"m\", {e}]\nschedule = {sched}"
        )
        .unwrap();
        "P"
    } else {
        "K"
    };
    let extent = if rng.chance(50) { "min(i + 1, m)" } else { "m" };
    let scale = if rng.chance(40) { ", scale=0.25" } else { "" };
    // A quarter written out as the five stages that define it (no
    // schedule, no log-sum-exp), which the template makes one attention.
    let written = !group && rng.chance(25);
    let outs = if !written && rng.chance(50) {
        format!("O[{b}i, d], L[{b}i]")
    } else {
        format!("O[{b}i, d]")
    };
    let sched = if written {
        String::new()
    } else if group {
        format!(
            "\nschedule = [\"flash(j, rows={}, keys=64, stages={})\"]",
            rng.pick(&[64, 128]),
            rng.pick(&[1, 2])
        )
    } else if flash && rng.chance(20) {
        // The default's shape on AMD's CDNA: eight waves of 32 rows, 64
        // keys a tile (refused, and counted so, where LDS is short).
        "\nschedule = [\"flash(j, rows=256, keys=64, stages=1, wave_rows=32)\"]".to_string()
    } else if flash {
        // Fewer rows a wave than lanes at times (every wave is 32 lanes
        // or more; 16 and 32 are whole fragments of every instruction).
        let wave_rows = match rng.chance(40) {
            true => format!(", wave_rows={}", rng.pick(&[16, 32])),
            false => String::new(),
        };
        format!(
            "\nschedule = [\"flash(j, rows={}, keys={}, stages={}{wave_rows})\"]",
            rng.pick(&[32, 64]),
            rng.pick(&[16, 32]),
            rng.pick(&[1, 2, 3])
        )
    } else if rng.chance(50) {
        format!(
            "\nschedule = [\"rowwise(j, threads={})\"]",
            rng.pick(&[32, 64, 128])
        )
    } else {
        String::new()
    };
    if written {
        let (factor, out) = match (scale.is_empty(), dt) {
            (true, "f32") => (
                String::new(),
                "sum(Ex[{b}i, j] * V[{b}j, d], j) / Sm[{b}i]".to_string(),
            ),
            (true, t) => (
                String::new(),
                format!("{t}(sum(Ex[{{b}}i, j] * f32(V[{{b}}j, d]), j) / Sm[{{b}}i])"),
            ),
            (false, "f32") => (
                " * 0.25".into(),
                "sum(Ex[{b}i, j] * V[{b}j, d], j) / Sm[{b}i]".to_string(),
            ),
            (false, t) => (
                " * 0.25".into(),
                format!("{t}(sum(Ex[{{b}}i, j] * f32(V[{{b}}j, d]), j) / Sm[{{b}}i])"),
            ),
        };
        let out = out.replace("{b}", b);
        writeln!(
            src,
            "\n[[stage]]\ncompute = \"Sc[{b}i, j] = sum(f32(Q[{b}i, e]) * f32({keys}[{b}j, e]), e){factor}\"\nshape = [{bdim}\"n\", \"m\"]\nreduce = {{ e = {e} }}\n\n[[stage]]\ncompute = \"Mx[{b}i] = reduce_max(Sc[{b}i, j], j)\"\nshape = [{bdim}\"n\"]\nreduce = {{ j = \"{extent}\" }}\n\n[[stage]]\ncompute = \"Ex[{b}i, j] = exp(Sc[{b}i, j] - Mx[{b}i])\"\nshape = [{bdim}\"n\", \"m\"]\n\n[[stage]]\ncompute = \"Sm[{b}i] = sum(Ex[{b}i, j], j)\"\nshape = [{bdim}\"n\"]\nreduce = {{ j = \"{extent}\" }}\n\n[[stage]]\ncompute = \"O[{b}i, d] = {out}\"\nshape = [{bdim}\"n\", {d}]\nreduce = {{ j = \"{extent}\" }}"
        )
        .unwrap();
        return src;
    }
    writeln!(
        src,
        "\n[[stage]]\ncompute = \"{outs} = attention(Q[{b}i, e], {keys}[{b}j, e], V[{b}j, d]{scale})\"\nshape = [{bdim}\"n\", {d}]\nreduce = {{ j = \"{extent}\", e = {e} }}{sched}"
    )
    .unwrap();
    src
}

/// The first line of a kernel to run on the CPU through a random matrix
/// target's lane layouts (as `flash` kernels are).
const EMULATED: &str = "# run through a matrix target's lanes\n";

/// A convolution with no schedule (rule `conv-tiles`, or another where a
/// window of 1 or a missing channel axis makes it no convolution): 1-D or
/// 2-D, strides 1 or 2, with or without a batch axis, random channel
/// counts and windows (none a tile's multiple on purpose), f32, f16
/// operands summed in f32, or i32; a bias and a ReLU or none.
fn conv_kernel(rng: &mut Rng, id: u64) -> String {
    let dt = *rng.pick(&["f32", "f16", "i32"]);
    let (c, k) = (*rng.pick(&[1, 3, 5]), *rng.pick(&[1, 4, 7, 33, 70]));
    let two_d = rng.chance(60);
    let (r, s) = (*rng.pick(&[1, 2, 3, 5]), *rng.pick(&[1, 2, 3, 5]));
    let (sy, sx) = (*rng.pick(&[1, 1, 2]), *rng.pick(&[1, 1, 2]));
    let (bdim, b) = if two_d || rng.chance(50) {
        ("", "")
    } else {
        ("2, ", "q, ")
    };
    let term = |x: &str| {
        if dt == "f16" {
            format!("f32({x})")
        } else {
            x.to_string()
        }
    };
    let sub = |stride: i64, v: &str, w: &str| {
        if stride == 1 {
            format!("{v} + {w}")
        } else {
            format!("{stride} * {v} + {w}")
        }
    };
    let extent = |stride: i64, size: &str, w: i64| format!("\"{stride} * {size} + {}\"", w - 1);
    let mut src = String::new();
    if dt == "f16" {
        src.push_str(EMULATED);
    }
    writeln!(
        src,
        "[kernel]\nname = \"fz{id}\"\nsizes = [\"n\", \"m\"]\n\n[inputs]"
    )
    .unwrap();
    let (x, f, o_shape, reduce) = if two_d {
        writeln!(
            src,
            "X = {{ dtype = \"{dt}\", shape = [{c}, {}, {}] }}\nF = {{ dtype = \"{dt}\", shape = [{k}, {c}, {r}, {s}] }}",
            extent(sy, "n", r),
            extent(sx, "m", s)
        )
        .unwrap();
        (
            term(&format!(
                "X[c, {}, {}]",
                sub(sy, "y", "r"),
                sub(sx, "x", "s")
            )),
            term("F[o, c, r, s]"),
            (format!("{k}, \"n\", \"m\""), "o, y, x"),
            format!("c = {c}, r = {r}, s = {s}"),
        )
    } else {
        writeln!(
            src,
            "X = {{ dtype = \"{dt}\", shape = [{bdim}{c}, {}] }}\nF = {{ dtype = \"{dt}\", shape = [{k}, {c}, {s}] }}",
            extent(sx, "m", s)
        )
        .unwrap();
        (
            term(&format!("X[{b}c, {}]", sub(sx, "x", "s"))),
            term("F[o, c, s]"),
            (
                format!("{bdim}{k}, \"m\""),
                if b.is_empty() { "o, x" } else { "q, o, x" },
            ),
            format!("c = {c}, s = {s}"),
        )
    };
    let acc = if dt == "f16" { "f32" } else { dt };
    let mut value = format!("sum({x} * {f}, {})", if two_d { "c, r, s" } else { "c, s" });
    if rng.chance(50) {
        writeln!(src, "bias = {{ dtype = \"{acc}\", shape = [{k}] }}").unwrap();
        value = format!("{value} + bias[o]");
    }
    if rng.chance(40) {
        let zero = if acc == "i32" { "0" } else { "0.0" };
        value = format!("max({value}, {zero})");
    }
    writeln!(
        src,
        "\n[[stage]]\ncompute = \"O[{}] = {value}\"\nshape = [{}]\nreduce = {{ {reduce} }}",
        o_shape.1, o_shape.0
    )
    .unwrap();
    src
}

/// The first line of an attention kernel whose `flash` tiles are whole
/// warpgroup instructions, run through sm_90a's lanes.
const WG_ATTENTION: &str = "# attention through sm_90a's warpgroups\n";

/// The first line of a matrix product, run through sm_90a's warpgroup
/// instructions half the time (else another matrix target's, as
/// [`EMULATED`] kernels are).
const GEMM: &str = "# a matrix product, through sm_90a's lanes or another target's\n";

/// A matrix product of 16-bit floats (summed in f32) or int8 (in i32),
/// B stored `[N, K]` (k contiguous, as `wgmma` reads it) or `[K, N]`, with
/// a bias and a ReLU or none; unscheduled (rule `matmul-wgmma` on sm_90a
/// where it applies, `matmul-mma` elsewhere), or with a warpgroup schedule
/// of random width, warpgroups and buffers, staged `swizzle=128` (or the
/// narrower 64 and 32, with k tiles to match), at times by the tensor
/// memory accelerator (`tma=1`, rows of k declared a multiple of 16
/// bytes).
fn gemm_kernel(rng: &mut Rng, id: u64) -> String {
    // OCP fp8 too: gfx950 takes its f8f6f4 instruction (the others
    // their own rules).
    let dt = *rng.pick(&["f16", "bf16", "i8", "f8e4m3fn"]);
    // Weight-only quantised products at times: 16-bit float activations
    // by 8-bit weights, the weights converted as their tile is staged.
    let bt = match dt {
        "f16" | "bf16" if rng.chance(50) => *rng.pick(&["i8", "u8", "f8e4m3fn", "f8e5m2"]),
        _ => dt,
    };
    let (acc, kstep) = match dt {
        "i8" => ("i32", 32),
        "f8e4m3fn" => ("f32", 32),
        _ => ("f32", 16),
    };
    let k_major = rng.chance(70);
    // Unscheduled products have one or two leading batch axes at times,
    // B shared by every batch or not (the rules put them on the grid).
    let batches = if rng.chance(30) {
        *rng.pick(&[1, 2])
    } else {
        0
    };
    let names: Vec<String> = (1..=batches).map(|n| format!("b{n}")).collect();
    let lead = |rest: &[&str], quote: bool| {
        let q = |x: &str| {
            if quote {
                format!("\"{x}\"")
            } else {
                x.to_string()
            }
        };
        let all: Vec<String> = names
            .iter()
            .map(|n| q(&if quote { n.to_uppercase() } else { n.clone() }))
            .chain(rest.iter().map(|x| q(x)))
            .collect();
        all.join(", ")
    };
    let b_shared = batches > 0 && rng.chance(30);
    let b_dims = |dims: [&str; 2], quote: bool| {
        if b_shared {
            let d: Vec<String> = dims
                .iter()
                .map(|x| {
                    if quote {
                        format!("\"{x}\"")
                    } else {
                        x.to_string()
                    }
                })
                .collect();
            d.join(", ")
        } else {
            lead(&dims, quote)
        }
    };
    let (b_shape, b_at) = if k_major {
        (
            b_dims(["n", "k"], true),
            format!("B[{}]", b_dims(["j", "kk"], false)),
        )
    } else {
        (
            b_dims(["k", "n"], true),
            format!("B[{}]", b_dims(["kk", "j"], false)),
        )
    };
    let mut value = format!(
        "sum({acc}(A[{}]) * {acc}({b_at}), kk)",
        lead(&["i", "kk"], false)
    );
    // Batches of at most 4: the race check runs every thread of whole
    // 256 x 256 tiles, however few rows a batch has.
    let bounds: Vec<String> = names
        .iter()
        .map(|n| format!("{} = 4", n.to_uppercase()))
        .collect();
    let max = if batches > 0 {
        format!("max = {{ {} }}\n", bounds.join(", "))
    } else {
        String::new()
    };
    let mut src = format!(
        "{GEMM}[kernel]\nname = \"fz{id}\"\nsizes = [{}]\n{max}\n[inputs]\nA = {{ dtype = \"{dt}\", shape = [{}] }}\nB = {{ dtype = \"{bt}\", shape = [{b_shape}] }}\n",
        lead(&["m", "n", "k"], true),
        lead(&["m", "k"], true),
    );
    if rng.chance(40) {
        writeln!(src, "bias = {{ dtype = \"{acc}\", shape = [\"n\"] }}").unwrap();
        value = format!("{value} + bias[j]");
    }
    if rng.chance(30) {
        let zero = if acc == "i32" { "0" } else { "0.0" };
        value = format!("max({value}, {zero})");
    }
    writeln!(
        src,
        "\n[[stage]]\ncompute = \"C[{}] = {value}\"\nshape = [{}]\nreduce = {{ kk = \"k\" }}",
        lead(&["i", "j"], false),
        lead(&["m", "n"], true),
    )
    .unwrap();
    if k_major && batches == 0 && dt != "f8e4m3fn" && bt == dt && rng.chance(50) {
        let n = *rng.pick(&[64, 128, 128, 256]);
        let wg = *rng.pick(&[1, 2]);
        let stages = *rng.pick(&[1, 2, 3, 4]);
        let t = if dt == "i8" { "i8" } else { dt };
        // The swizzle's span sets the k tile: 128 bytes, or the narrower
        // 64 and 32 (fewer instructions a tile).
        let span = *rng.pick(&[128, 128, 64, 32]);
        let esize = if dt == "i8" { 1 } else { 2 };
        let (ktile, vec) = (span / esize, 16 / esize);
        let tma = if stages >= 2 && rng.chance(40) {
            let per16 = if dt == "i8" { 16 } else { 8 };
            src = src.replacen(
                "sizes = [\"m\", \"n\", \"k\"]\n",
                &format!("sizes = [\"m\", \"n\", \"k\"]\ndivisible = {{ k = {per16} }}\n"),
                1,
            );
            ", tma=1"
        } else {
            ""
        };
        let steps = [
            format!("io, jo, ii, ji = tile(i, j, {}, {n})", 64 * wg),
            "wi, fi = split(ii, 64)".to_string(),
            format!("ko, k2 = split(kk, {ktile})"),
            format!("km, rk = split(k2, {kstep})"),
            "reorder(ko, km, fi, ji, rk)".to_string(),
            "bind(io, blockIdx.y)".to_string(),
            "bind(jo, blockIdx.x)".to_string(),
            "bind(wi, threadIdx.y)".to_string(),
            "unroll(km)".to_string(),
            format!(
                "AS = cache_read(A, shared, ko, vec={vec}, stages={stages}, swizzle={span}{tma})"
            ),
            format!(
                "BS = cache_read(B, shared, ko, vec={vec}, stages={stages}, swizzle={span}{tma})"
            ),
            format!("mma(fi, ji, rk, instr=wgmma_m64n{n}k{kstep}_{t})"),
        ];
        let list: Vec<String> = steps.iter().map(|s| format!("  \"{s}\",")).collect();
        writeln!(src, "schedule = [\n{}\n]", list.join("\n")).unwrap();
    }
    src
}

/// A random kernel file.
/// A row chain over rows of symbolic length bounded by `max` (softmax,
/// layernorm): reductions and an elementwise part computed at the final
/// stage's row, the row of `A` staged in LDS, in each thread's registers
/// (strided) or not, so the parts span loops of symbolic extent and are
/// sized by the bound.
fn row_kernel(rng: &mut Rng, id: u64) -> String {
    // No f16: its sums of a hundred terms round beyond its tolerance.
    let dt = *rng.pick(&["f32", "f32", "f64"]);
    let bound = *rng.pick(&[100, 128, 300, 1000]);
    let t = *rng.pick(&[32, 64, 128]);
    // At times the row in each thread's registers (`cache_read(A, local,
    // r)`): every pass a thread's vectors of 4, `u` runs of them unrolled,
    // under a bound of one run a thread, so the tile is strided.
    let regs = rng.chance(30);
    let u = *rng.pick(&[1, 2, 4]);
    let bound = if regs { bound.min(t * 4 * u) } else { bound };
    let mut src = String::new();
    writeln!(
        src,
        "# bounded-part\n[kernel]\nname = \"fz{id}\"\nsizes = [\"n\", \"m\"]\nmax = {{ m = {bound} }}\n\n[inputs]\nA = {{ dtype = \"{dt}\", shape = [\"n\", \"m\"] }}\n"
    )
    .unwrap();
    let at = |name: &str, c: &str, rng: &mut Rng| {
        // A serial loop of symbolic extent around the thread loop, split
        // once more at times.
        if regs {
            format!(
                "schedule = [\"compute_at(Y, r)\", \"{c}o, {c}i = split({c}, {})\", \"{c}t, {c}v = split({c}i, 4)\", \"bind({c}t, threadIdx.x)\", \"vectorize({c}v)\", \"{c}s, {c}u = split({c}o, {u})\", \"unroll({c}u)\"]\n# {name}",
                t * 4
            )
        } else if rng.chance(30) {
            format!(
                "schedule = [\"compute_at(Y, r)\", \"{c}o, {c}i = split({c}, {t})\", \"{c}a, {c}b = split({c}o, 2)\", \"bind({c}i, threadIdx.x)\"]\n# {name}"
            )
        } else {
            format!(
                "schedule = [\"compute_at(Y, r)\", \"{c}o, {c}i = split({c}, {t})\", \"bind({c}i, threadIdx.x)\"]\n# {name}"
            )
        }
    };
    let red = *rng.pick(&["reduce_max", "sum", "reduce_min"]);
    writeln!(
        src,
        "[[stage]]\ncompute = \"P[r] = {red}(A[r, c], c)\"\nshape = [\"n\"]\nreduce = {{ c = \"m\" }}\n{}\n",
        at("P", "c", rng)
    )
    .unwrap();
    let part = rng.chance(60);
    if part {
        let f = *rng.pick(&["A[r, c] - P[r]", "A[r, c] * A[r, c]", "max(A[r, c], P[r])"]);
        writeln!(
            src,
            "[[stage]]\ncompute = \"E[r, c] = {f}\"\nshape = [\"n\", \"m\"]\n{}\n",
            at("E", "c", rng)
        )
        .unwrap();
        writeln!(
            src,
            "[[stage]]\ncompute = \"S[r] = sum(E[r, c], c)\"\nshape = [\"n\"]\nreduce = {{ c = \"m\" }}\n{}\n",
            at("S", "c", rng)
        )
        .unwrap();
    }
    let value = if part {
        // Every stage computed at `r` must be read there.
        *rng.pick(&["E[r, j] + S[r] * P[r]", "A[r, j] - E[r, j] * P[r] + S[r]"])
    } else {
        *rng.pick(&["A[r, j] - P[r]", "A[r, j] * P[r]"])
    };
    // At times scaled by a vector of one element a column (layernorm's
    // gamma), which a row in registers takes into registers beside it at
    // times, as the row-chain rule does on AMD (`cache_read(w, local, r)`).
    let column = rng.chance(50);
    let value = if column {
        format!("({value}) * w[j]")
    } else {
        value.to_string()
    };
    let mut sched = vec![
        "bind(r, blockIdx.x)".to_string(),
        format!("jo, ji = split(j, {t})"),
        "bind(ji, threadIdx.x)".to_string(),
    ];
    if regs {
        sched = vec![
            "bind(r, blockIdx.x)".to_string(),
            format!("jo, ji = split(j, {})", t * 4),
            "jt, jv = split(ji, 4)".to_string(),
            "bind(jt, threadIdx.x)".to_string(),
            "vectorize(jv)".to_string(),
            format!("js, ju = split(jo, {u})"),
            "unroll(ju)".to_string(),
            // At most 16 bytes a copy: f64 two at a time; the copies at
            // times in groups that take one check (`unroll`, any count,
            // the last group partial where it does not divide).
            format!(
                "AS = cache_read(A, local, r, vec={}{})",
                rng.pick(if dt == "f64" { &[1, 2] } else { &[1, 2, 4] }),
                match rng.chance(50) {
                    true => format!(", unroll={}", rng.pick(&[2, 3, 4, 8])),
                    false => String::new(),
                }
            ),
        ];
        if column && rng.chance(70) {
            sched.push(format!(
                "WS = cache_read(w, local, r, vec={}, unroll={u})",
                rng.pick(if dt == "f64" { &[1, 2] } else { &[1, 2, 4] })
            ));
        }
    }
    // The rows of A gathered by G at times (`A[G[r], c]`): the cached row
    // is then a gathered tile, copied element by element.
    let gathered = !regs && rng.chance(30);
    if !regs && rng.chance(60) {
        let vec = if gathered {
            1
        } else {
            *rng.pick(&[1, 1, 2, 4])
        };
        // Copies in runs at times (`unroll`): the last run of a row is
        // partial at most sizes.
        let runs = match rng.chance(40) {
            true => format!(", unroll={}", rng.pick(&[2, 3, 4])),
            false => String::new(),
        };
        sched.push(if vec > 1 {
            format!("AS = cache_read(A, shared, r, vec={vec}{runs})")
        } else {
            format!("AS = cache_read(A, shared, r{runs})")
        });
    }
    let sched: Vec<String> = sched.iter().map(|s| format!("\"{s}\"")).collect();
    writeln!(
        src,
        "[[stage]]\ncompute = \"Y[r, j] = {value}\"\nshape = [\"n\", \"m\"]\nschedule = [{}]",
        sched.join(", ")
    )
    .unwrap();
    if column {
        src = src.replace(
            "\n[inputs]\n",
            &format!("\n[inputs]\nw = {{ dtype = \"{dt}\", shape = [\"m\"] }}\n"),
        );
    }
    if gathered {
        src = src.replace("A[r, ", "A[G[r], ").replace(
            "\n[inputs]\n",
            "\n[inputs]\nG = { dtype = \"i32\", shape = [\"n\"] }\n",
        );
    }
    src
}

/// An unscheduled row chain fed by an element-wise stage over the same
/// rows and columns (a residual add before an RMSNorm or a softmax), at
/// times declared a result (`output = true`): the row-chain rule then
/// computes it at its row and stores it from there where its row fits
/// the chain's LDS, else leaves it a kernel of its own.
fn kept_row_kernel(rng: &mut Rng, id: u64) -> String {
    let dt = *rng.pick(&["f32", "f32", "f64"]);
    let bound = *rng.pick(&[64, 300, 1000, 4096, 8192]);
    let h = *rng.pick(&[
        "X[r, c] + R[r, c]",
        "X[r, c] * 0.5 - R[r, c]",
        "max(X[r, c], R[r, c])",
    ]);
    let (red, y) = *rng.pick(&[
        (
            "sum(H[r, c] * H[r, c], c) / f32(m)",
            "H[r, c] * S[r] * w[c]",
        ),
        ("reduce_max(H[r, c], c)", "exp(H[r, c] - S[r]) + w[c]"),
        ("sum(H[r, c], c)", "H[r, c] - S[r] * w[c] + R[r, c]"),
    ]);
    let (red, y) = if dt == "f64" {
        (red.replace("f32(", "f64("), y)
    } else {
        (red.to_string(), y)
    };
    let kept = if rng.chance(80) {
        "output = true\n"
    } else {
        ""
    };
    format!(
        "[kernel]\nname = \"fz{id}\"\nsizes = [\"n\", \"m\"]\nmax = {{ m = {bound} }}\n\n[inputs]\nX = {{ dtype = \"{dt}\", shape = [\"n\", \"m\"] }}\nR = {{ dtype = \"{dt}\", shape = [\"n\", \"m\"] }}\nw = {{ dtype = \"{dt}\", shape = [\"m\"] }}\n\n[[stage]]\ncompute = \"H[r, c] = {h}\"\nshape = [\"n\", \"m\"]\n{kept}\n[[stage]]\ncompute = \"S[r] = {red}\"\nshape = [\"n\"]\nreduce = {{ c = \"m\" }}\n\n[[stage]]\ncompute = \"Y[r, c] = {y}\"\nshape = [\"n\", \"m\"]\n"
    )
}

/// The first line of a transpose of 2-byte elements: race-checked through
/// sm_90 most of the time, where it moves through registers.
const TRANSPOSE: &str = "# a transpose of 2-byte elements\n";

/// A permutation of a rank 2 to 4 tensor of f16 or bf16 with no schedule
/// (rule `transpose-tiles`; on NVIDIA `transpose-registers`, each thread's
/// 8 x 8 block in registers): the output's last axis comes from elsewhere
/// than the input's last, the value as it is, scaled, plus a tensor read
/// along the output's rows, or widened to f32; with bounds or without.
fn transpose_kernel(rng: &mut Rng, id: u64) -> String {
    let dt = *rng.pick(&["f16", "bf16"]);
    let rank = *rng.pick(&[2, 3, 3, 4, 4]);
    let (axes, sizes) = (&["a", "b", "c", "e"][..rank], &["A", "B", "C", "E"][..rank]);
    // The input's axes, as positions among the output's: any order whose
    // last is not the output's last.
    let mut perm: Vec<usize> = (0..rank).collect();
    while perm[rank - 1] == rank - 1 {
        for i in (1..rank).rev() {
            perm.swap(i, rng.below(i + 1));
        }
    }
    let list = |xs: Vec<&str>, quote: bool| {
        xs.iter()
            .map(|x| {
                if quote {
                    format!("\"{x}\"")
                } else {
                    x.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let read = format!(
        "X[{}]",
        list(perm.iter().map(|&i| axes[i]).collect(), false)
    );
    let out = list(axes.to_vec(), false);
    let (value, y) = match rng.below(4) {
        0 => (read, false),
        1 => (format!("{read} * {dt}(0.5)"), false),
        2 => (format!("{read} + Y[{out}]"), true),
        _ => (format!("f32({read})"), false),
    };
    let mut src = format!(
        "{TRANSPOSE}[kernel]\nname = \"fz{id}\"\nsizes = [{}]\n",
        list(sizes.to_vec(), true)
    );
    if rng.chance(60) {
        let bounds: Vec<String> = sizes
            .iter()
            .map(|s| format!("{s} = {}", rng.pick(&[64, 130, 4096])))
            .collect();
        writeln!(src, "max = {{ {} }}", bounds.join(", ")).unwrap();
    }
    let shape_x = list(perm.iter().map(|&i| sizes[i]).collect(), true);
    let shape = list(sizes.to_vec(), true);
    writeln!(
        src,
        "\n[inputs]\nX = {{ dtype = \"{dt}\", shape = [{shape_x}] }}"
    )
    .unwrap();
    if y {
        writeln!(src, "Y = {{ dtype = \"{dt}\", shape = [{shape}] }}").unwrap();
    }
    writeln!(
        src,
        "\n[[stage]]\ncompute = \"O[{out}] = {value}\"\nshape = [{shape}]"
    )
    .unwrap();
    src
}

fn kernel(rng: &mut Rng, id: u64) -> String {
    if rng.below(12) == 0 {
        return row_kernel(rng, id);
    }
    if rng.below(16) == 0 {
        return kept_row_kernel(rng, id);
    }
    if rng.below(14) == 0 {
        return gemm_kernel(rng, id);
    }
    if rng.below(10) == 0 {
        return attention_kernel(rng, id);
    }
    if rng.below(12) == 0 {
        return conv_kernel(rng, id);
    }
    if rng.below(14) == 0 {
        return transpose_kernel(rng, id);
    }
    let dt = |rng: &mut Rng| {
        if rng.chance(70) {
            *rng.pick(FLOATS)
        } else {
            *rng.pick(INTS)
        }
    };
    let inputs = vec![
        Input {
            name: "A",
            dtype: dt(rng),
            dims: &["n", "m"],
        },
        Input {
            name: "B",
            dtype: dt(rng),
            dims: &["n"],
        },
        Input {
            name: "C",
            dtype: dt(rng),
            dims: &["m"],
        },
        // Subscripts only: gathers read it (`A[G[i], j]`).
        Input {
            name: "G",
            dtype: *rng.pick(INTS),
            dims: &["n"],
        },
    ];
    let mut src = String::new();
    writeln!(src, "[kernel]\nname = \"fz{id}\"\nsizes = [\"n\", \"m\"]").unwrap();
    let bounded = rng.chance(60);
    if bounded {
        writeln!(src, "max = {{ n = 4096, m = 4096 }}").unwrap();
    }
    // A divisibility fact: rows of a multiple of 2, 4 or 8 elements start
    // aligned, which vector accesses and alignment proofs then rely on.
    if rng.chance(30) {
        let d = *rng.pick(&[2, 4, 8]);
        let size = *rng.pick(&["n", "m"]);
        writeln!(src, "divisible = {{ {size} = {d} }}").unwrap();
    }
    writeln!(src, "\n[inputs]").unwrap();
    for i in &inputs {
        let dims: Vec<String> = i.dims.iter().map(|d| format!("\"{d}\"")).collect();
        writeln!(
            src,
            "{} = {{ dtype = \"{}\", shape = [{}] }}",
            i.name,
            i.dtype.name(),
            dims.join(", ")
        )
        .unwrap();
    }
    let pt = dt(rng);
    let depth = 1 + rng.below(3);
    let mut g = Gen {
        rng,
        inputs,
        axes: HashMap::from([("n", "i".to_string()), ("m", "j".to_string())]),
        gathering: false,
    };
    // Rankings (top-k, argmax) of an approximated P are not compared: a
    // value within the tolerance of its neighbour may rank either side of
    // it (seed 599722107: saturated sigmoids 1 ulp apart reordered top-k).
    let (pe, exact) = g.expr(pt, depth);
    let shape = match g.rng.below(7) {
        // A reduction over j.
        0 => "reduce",
        // Consumed by a second elementwise stage.
        1 => "consumer",
        // Combined into data-dependent or repeated places.
        2 if pt != DType::Bool => "scatter",
        // A running fold along j or i.
        3 if pt != DType::Bool => "scan",
        // The k best along j or i.
        4 if exact
            && matches!(
                pt,
                DType::F16 | DType::BF16 | DType::F32 | DType::I8 | DType::U8 | DType::I32
            ) =>
        {
            "topk"
        }
        _ => "alone",
    };
    let rng = g.rng;
    match shape {
        "reduce" => {
            // P[i, j] feeds R[i] = sum/max over k.
            let p_sched: Vec<String> = match rng.below(3) {
                0 => vec!["compute_inline()".into()],
                _ => schedule_2d(rng, false, bounded),
            };
            stage(&mut src, &format!("P[i, j] = {pe}"), 2, &p_sched);
            let arg_ok = exact
                && matches!(
                    pt,
                    DType::F16 | DType::BF16 | DType::F32 | DType::I8 | DType::U8 | DType::I32
                );
            let acc = if arg_ok && rng.chance(25) {
                *rng.pick(&["argmax", "argmin"])
            } else if matches!(pt, DType::F16 | DType::BF16 | DType::U8 | DType::I8)
                || rng.chance(40)
            {
                "reduce_max"
            } else {
                "sum"
            };
            let extra = match rng.below(3) {
                0 => "P[i, k]".to_string(),
                1 => format!("P[i, k] * {}(C[k])", pt.name()),
                _ => format!("{}(A[i, k]) + P[i, k]", pt.name()),
            };
            let r_sched: Vec<String> = match rng.below(5) {
                0 => vec![
                    format!("bx, tx = split(i, {})", factor(rng)),
                    "bind(bx, blockIdx.x)".into(),
                    "bind(tx, threadIdx.x)".into(),
                ],
                1 => vec![
                    "bind(i, blockIdx.x)".into(),
                    format!("ko, ki = split(k, {})", rng.pick(&[32, 64, 128])),
                    "bind(ki, threadIdx.x)".into(),
                ],
                2 => vec![
                    format!("bx, tx = split(i, {})", rng.pick(&[16, 32])),
                    "bind(bx, blockIdx.x)".into(),
                    "bind(tx, threadIdx.x)".into(),
                    format!("ko, ki = split(k, {})", rng.pick(&[4, 8])),
                    format!("CS = cache_read(C, {}, ko)", rng.pick(&["shared", "local"])),
                    "unroll(ki)".into(),
                ],
                3 => vec![
                    format!("bx, tx = split(i, {})", rng.pick(&[16, 64])),
                    "bind(bx, blockIdx.x)".into(),
                    "bind(tx, threadIdx.x)".into(),
                    format!("ko, ki = split(k, {})", rng.pick(&[2, 4, 8])),
                    "unroll(ki)".into(),
                ],
                _ => vec![
                    format!("bx, tx = split(i, {})", rng.pick(&[32, 64])),
                    "bind(bx, blockIdx.x)".into(),
                    "bind(tx, threadIdx.x)".into(),
                    "RL = cache_write(R, local, bx)".into(),
                ],
            };
            // Sometimes triangular: k runs to a bound that depends on i.
            let extent = *rng.pick(&["m", "m", "m", "min(i + 1, m)", "min(m, i * 2 + 3)"]);
            match rng
                .chance(40)
                .then(|| tuple_reduction(pt, &extra, exact, rng))
                .flatten()
            {
                Some((compute, tables)) => {
                    // A tuple stage takes no cache_write: one thread per row instead.
                    let mut sched = match r_sched.iter().any(|s| s.contains("cache_write")) {
                        true => r_sched[..3].to_vec(),
                        false => r_sched,
                    };
                    // Threads in contiguous shares, the only way a combiner
                    // that is not commutative may spread (always for the
                    // linear recurrence; sometimes for the others).
                    let ordered = compute.contains("reduce(0.75");
                    if sched[1].starts_with("ko, ki = split(k, ") && (ordered || rng.chance(50)) {
                        let threads = rng.pick(&[3, 32, 64, 100]);
                        sched = vec![
                            "bind(i, blockIdx.x)".into(),
                            format!("kt, ks = split(k, nparts={threads})"),
                            "bind(kt, threadIdx.x)".into(),
                        ];
                        if rng.chance(50) {
                            sched.push("ko, ku = split(ks, 2)".into());
                            sched.push("unroll(ku)".into());
                        }
                    }
                    stage(&mut src, &compute, 1, &sched);
                    src.push_str(&tables);
                }
                None => {
                    // Sometimes spread over the grid: k's chunks on
                    // blockIdx.x combine into R atomically (not for an
                    // arg-reduction, nor a triangular k: refused).
                    let mut value = format!("{acc}({extra}, k)");
                    let sched = if extent == "m" && !acc.starts_with("arg") && rng.chance(20) {
                        // Half of them with an epilogue, applied in place
                        // once the parts have met.
                        if rng.chance(50) {
                            value = format!("max({value}, {}(B[i]))", pt.name());
                        }
                        grid_reduction_schedule(rng)
                    } else {
                        r_sched
                    };
                    stage(&mut src, &format!("R[i] = {value}"), 1, &sched)
                }
            }
            if extent != "m" {
                src = src.replace(
                    "reduce = { k = \"m\" }",
                    &format!("reduce = {{ k = \"{extent}\" }}"),
                );
            }
        }
        "consumer" => {
            // A work-group part (into LDS) needs the consumer's block: T threads.
            let threads = *rng.pick(&[8, 16, 32]);
            let p_sched: Vec<String> = match rng.below(5) {
                0 => vec!["compute_inline()".into()],
                1 => vec!["compute_at(Q, jo)".into()],
                2 => vec![
                    "compute_at(Q, jo)".into(),
                    format!("pj, pt = split(j, {threads})"),
                    "bind(pt, threadIdx.x)".into(),
                ],
                _ => schedule_2d(rng, false, bounded),
            };
            stage(&mut src, &format!("P[i, j] = {pe}"), 2, &p_sched);
            let sub = match rng.below(4) {
                0 => "P[i, j]".to_string(),
                1 => "P[i, max(j - 1, 0)]".to_string(),
                2 => "P[i, min(j + 1, m - 1)]".to_string(),
                _ => "P[n - 1 - i, j]".to_string(),
            };
            let qt = pt;
            let q_sched = if p_sched.len() > 1 && p_sched[0].starts_with("compute_at") {
                vec![
                    "bind(i, blockIdx.y)".into(),
                    format!("jo, ji = split(j, {threads})"),
                    "bind(jo, blockIdx.x)".into(),
                    "bind(ji, threadIdx.x)".into(),
                ]
            } else if p_sched.first().is_some_and(|s| s.starts_with("compute_at")) {
                vec![
                    "bind(i, blockIdx.y)".into(),
                    format!("jo, ji = split(j, {})", rng.pick(&[4, 8, 16])),
                    "bind(jo, blockIdx.x)".into(),
                    "unroll(ji)".into(),
                ]
            } else {
                let mut s = schedule_2d(rng, true, bounded);
                if !s.is_empty() && rng.chance(30) {
                    s.push(format!(
                        "QS = cache_write(Q, {}, {})",
                        rng.pick(&["shared", "local"]),
                        "jo"
                    ));
                }
                s
            };
            let op = if qt == DType::Bool { "&&" } else { "+" };
            let two = if qt.is_float() {
                "2.0".to_string()
            } else if qt == DType::Bool {
                "true".into()
            } else {
                "2".into()
            };
            let two = if qt == DType::Bool {
                two
            } else {
                format!("{sub} * {two}")
            };
            stage(
                &mut src,
                &format!("Q[i, j] = {sub} {op} {two}"),
                2,
                &q_sched,
            );
        }
        "scan" => {
            let p_sched: Vec<String> = match rng.below(3) {
                0 => vec!["compute_inline()".into()],
                _ => schedule_2d(rng, false, bounded),
            };
            stage(&mut src, &format!("P[i, j] = {pe}"), 2, &p_sched);
            // Sums only where their order cannot matter beyond the
            // tolerance (integers wrap exactly); products of integers.
            let op = match pt {
                DType::F32 | DType::F64 => *rng.pick(&["cumsum", "cummax", "cummin"]),
                t if t.is_float() => *rng.pick(&["cummax", "cummin"]),
                _ => *rng.pick(&["cumsum", "cumprod", "cummax", "cummin"]),
            };
            let axis = *rng.pick(&["j", "j", "i"]);
            let exclusive = if rng.chance(30) {
                ", exclusive=true"
            } else {
                ""
            };
            let sched: Vec<String> = match rng.below(4) {
                0 => Vec::new(),
                1 => schedule_2d(rng, false, bounded),
                _ => {
                    // Sometimes split over work-groups: parts of a few
                    // chunks, so that small rows span several.
                    let chunks = match rng.chance(40) {
                        true => format!(", chunks={}", rng.pick(&[1, 2])),
                        false => String::new(),
                    };
                    vec![format!(
                        "scan({axis}, threads={}, per={}{chunks})",
                        rng.pick(&[32, 64, 256]),
                        rng.pick(&[1, 2, 3, 4])
                    )]
                }
            };
            if rng.chance(40) {
                // Written out as the triangular reduction that defines it,
                // which the scan template recognises.
                let red = match op {
                    "cumsum" => "sum",
                    "cumprod" => "prod",
                    "cummax" => "reduce_max",
                    _ => "reduce_min",
                };
                let x = if axis == "j" { "P[i, k]" } else { "P[k, j]" };
                let bound = if axis == "j" { "m" } else { "n" };
                let extent = if exclusive.is_empty() && rng.chance(30) {
                    // Bounded by the axis's own extent: the same scan.
                    format!("min({axis} + 1, {bound})")
                } else if exclusive.is_empty() {
                    format!("{axis} + 1")
                } else {
                    axis.to_string()
                };
                writeln!(
                    src,
                    "\n[[stage]]\ncompute = \"R[i, j] = {red}({x}, k)\"\nshape = [\"n\", \"m\"]\nreduce = {{ k = \"{extent}\" }}\nschedule = {}",
                    quoted(&sched)
                )
                .unwrap();
            } else {
                stage(
                    &mut src,
                    &format!("R[i, j] = {op}(P[i, j], {axis}{exclusive})"),
                    2,
                    &sched,
                );
            }
        }
        "topk" => {
            let p_sched: Vec<String> = match rng.below(3) {
                0 => vec!["compute_inline()".into()],
                _ => schedule_2d(rng, false, bounded),
            };
            stage(&mut src, &format!("P[i, j] = {pe}"), 2, &p_sched);
            let kk = *rng.pick(&[1u32, 3, 8, 16, 64]);
            let (rows, len, x) = match rng.below(3) {
                0 => ("m", "n", "P[k, r]"),
                _ => ("n", "m", "P[r, k]"),
            };
            let largest = if rng.chance(30) {
                ", largest=false"
            } else {
                ""
            };
            let outs = if rng.chance(25) {
                "I[r, t]"
            } else {
                "V[r, t], I[r, t]"
            };
            let fit = 32768 / (kk.next_power_of_two() * 8);
            let sched = match rng.below(2) {
                0 => String::new(),
                _ => format!(
                    "\nschedule = [\"topk(k, threads={}, per={})\"]",
                    rng.pick(&[32u32, 64, 256]).min(&fit),
                    rng.pick(&[1, 2, 3, 4])
                ),
            };
            writeln!(
                src,
                "\n[[stage]]\ncompute = \"{outs} = topk({x}, k{largest})\"\nshape = [\"{rows}\", {kk}]\nreduce = {{ k = \"{len}\" }}{sched}"
            )
            .unwrap();
        }
        "scatter" => {
            // Float sums only where their order cannot matter beyond the
            // tolerance; integer sums wrap, exactly, in any order.
            let op = if pt.is_float() && pt != DType::F32 && pt != DType::F64 {
                *rng.pick(&["max=", "min="])
            } else if pt.is_int() {
                *rng.pick(&["+=", "+=", "max=", "min=", "|=", "&="])
            } else {
                *rng.pick(&["+=", "+=", "max=", "min="])
            };
            let (sub, extent) = match rng.below(6) {
                0 => ("G[i]".to_string(), "n"),
                1 => ("G[i] * 3 - 2".to_string(), "n"),
                2 => ("i32(G[i]) % 7".to_string(), "7"),
                3 => ("j % 5".to_string(), "5"),
                4 => ("i32(G[i]) + j".to_string(), "m"),
                _ => ("i".to_string(), "n"),
            };
            let mut s = schedule_2d(rng, false, bounded);
            // A work-group's copy in LDS, where the shape is constant.
            if !s.is_empty() && extent.parse::<u32>().is_ok() && rng.chance(50) {
                s.push("privatize(S)".into());
            }
            writeln!(
                src,
                "\n[[stage]]\ncompute = \"S[{sub}] {op} {pe}\"\nover = {{ i = \"n\", j = \"m\" }}\nshape = [\"{extent}\"]\nschedule = {}",
                quoted(&s)
            )
            .unwrap();
        }
        _ => {
            let s = schedule_2d(rng, true, bounded);
            stage(&mut src, &format!("P[i, j] = {pe}"), 2, &s);
        }
    }
    src
}

#[derive(Default)]
struct Stats {
    generated: usize,
    rejected: usize,
    /// Accepted kernels with a gather, with a scatter, with a tuple reduction.
    gathers: usize,
    scatters: usize,
    tuples: usize,
    /// Accepted kernels whose tuple combiner is not commutative.
    ordered: usize,
    scans: usize,
    /// Accepted kernels whose scan is written out as a triangular reduction.
    written_scans: usize,
    /// Accepted kernels whose attention is written out as five stages.
    written_attentions: usize,
    topks: usize,
    attentions: usize,
    /// Accepted kernels with a reduction loop bound to a blockIdx.
    grids: usize,
    /// Accepted kernels scheduled by rule `conv-tiles` or `conv-mma`.
    convs: usize,
    /// Accepted kernels run on a warpgroup instruction (`wgmma`).
    warpgroups: usize,
    /// Matrix products with batch axes on the grid.
    batched: usize,
    /// Accepted kernels whose tiles the tensor memory accelerator copies.
    tensor_copies: usize,
    /// Matrix products of an f16/bf16 operand by an 8-bit one on a matrix
    /// instruction (weight-only quantised).
    converted: usize,
    /// Race-checked lowerings with a stage of rule `transpose-registers`.
    register_transposes: usize,
    /// Accepted kernels with parts over loops of symbolic extent, sized
    /// by a bound (`row_kernel`).
    bounded: usize,
    /// Accepted kernels with an intermediate declared a result, and of
    /// those, ones whose default computes it at a reader's loop.
    kept: usize,
    kept_at: usize,
    executed: usize,
    /// Runs of the loop IR lowered for a GPU target with the race check.
    race_checked: usize,
    compiled: usize,
    failures: Vec<(String, String)>,
}

/// Targets the race check lowers for: every wave size and matrix family.
const RACE_TARGETS: &[&str] = &[
    "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "sm_80", "sm_90", "sm_90a",
];

/// `src` with its first unscheduled (or inlined) stage that a later stage
/// reads declared a result (`output = true`, unscheduled): the default
/// rules must then store it though they would fuse it into its readers
/// (issue 61, item 10).
fn declare_an_output(src: &str) -> String {
    let parts: Vec<&str> = src.split("\n[[stage]]\n").collect();
    for (i, part) in parts.iter().enumerate().skip(1) {
        let name = part
            .strip_prefix("compute = \"")
            .and_then(|c| c.split('[').next())
            .unwrap_or("");
        let read_later = parts[i + 1..]
            .iter()
            .any(|p| p.contains(&format!("{name}[")));
        // Unscheduled, or inlined by its schedule: then unscheduled (an
        // inlined result has no memory to be stored in).
        let open = ["schedule = []", "schedule = [\"compute_inline()\"]"]
            .into_iter()
            .find(|s| part.contains(s));
        let (false, true, Some(open)) = (name.is_empty(), read_later, open) else {
            continue;
        };
        let mut out = parts[..i].join("\n[[stage]]\n");
        out.push_str("\n[[stage]]\n");
        out.push_str(&part.replacen(open, "output = true\nschedule = []", 1));
        for p in &parts[i + 1..] {
            out.push_str("\n[[stage]]\n");
            out.push_str(p);
        }
        return out;
    }
    src.to_string()
}

fn check(src: &str, rng: &mut Rng, st: &mut Stats) {
    let front = match rocmc::frontend("fuzz.toml", src) {
        Ok(f) => f,
        Err(rocmc::Error::Kernel(e)) => {
            st.rejected += 1;
            if std::env::var("ROCMC_DIFFUZZ_VERBOSE").is_ok() {
                println!("refused: {}\n{src}", e);
            }
            return;
        }
        Err(e) => {
            st.failures
                .push((src.to_string(), format!("front end: {e}")));
            return;
        }
    };
    let k = &front.kernel;
    st.gathers += k
        .stages
        .iter()
        .any(|s| s.value.has_gather() || s.reduce().is_some_and(|r| r.body.has_gather()))
        as usize;
    st.scatters += k.stages.iter().any(|s| s.scatter().is_some()) as usize;
    st.tuples += k.stages.iter().any(|s| s.tuple().is_some()) as usize;
    st.ordered += k
        .stages
        .iter()
        .filter_map(|s| s.tuple())
        .any(|t| !t.commutative) as usize;
    st.scans += k
        .stages
        .iter()
        .any(|s| s.reduce().is_some_and(|r| r.scan().is_some())) as usize;
    st.written_scans += k
        .stages
        .iter()
        .any(|s| s.reduce().is_some_and(|r| r.scan().is_some()) && !src.contains("= cum"))
        as usize;
    st.topks += k.stages.iter().any(|s| s.topk().is_some()) as usize;
    st.bounded += src.starts_with("# bounded-part") as usize;
    st.kept += !k.kept.is_empty() as usize;
    st.kept_at += k
        .stages
        .iter()
        .any(|s| k.kept.contains(&s.output) && s.compute_at().is_some()) as usize;
    st.attentions += k
        .stages
        .iter()
        .any(|s| s.reduce().is_some_and(|r| r.attention().is_some())) as usize;
    st.written_attentions += k.stages.iter().any(|s| s.absorbed) as usize;
    st.grids += k.stages.iter().any(|s| {
        s.nest.as_ref().is_some_and(|n| {
            n.vars.iter().any(|v| {
                v.reduce
                    && matches!(
                        v.kind,
                        rocmc::ir::plan::LoopKind::Bound(rocmc::ir::plan::GpuAxis::Block(_))
                    )
            })
        })
    }) as usize;
    // `flash` needs a matrix target: on the CPU path through one's lane
    // layout, picked at random (a layout it cannot tile is a user error).
    let emulated;
    // A warpgroup schedule runs on sm_90a only: always there.
    let p = if src.starts_with(GEMM) && src.contains("f8e4m3fn") && rng.chance(60) {
        // The OCP fp8 products' own matrix path (f8f6f4).
        "gfx950"
    } else if src.starts_with(TRANSPOSE) && rng.chance(70) {
        "sm_90"
    } else if src.contains("wgmma_")
        || src.starts_with(WG_ATTENTION)
        || (src.starts_with(GEMM) && rng.chance(50))
    {
        "sm_90a"
    } else {
        *rng.pick(RACE_TARGETS)
    };
    // An f16 convolution too: through a matrix target it takes `conv-mma`.
    let run_front = if src.contains("flash(") || src.starts_with(EMULATED) || src.starts_with(GEMM)
    {
        let mut o = rocmc::Options::new("x86-64");
        o.emulate = Some(p.to_string());
        let cpu = rocmc::targets(&rocmc::Options::new("x86-64"))
            .unwrap()
            .remove(0);
        match front.for_target(&cpu, &o) {
            Ok(f) => {
                emulated = f;
                &emulated
            }
            Err(rocmc::Error::Kernel(_)) => {
                st.rejected += 1;
                return;
            }
            Err(e) => {
                st.failures
                    .push((src.to_string(), format!("emulating {p}: {e}")));
                return;
            }
        }
    } else {
        &front
    };
    st.batched += run_front.kernel.stages.iter().any(|s| {
        s.default.as_ref().is_some_and(|d| {
            d.rule.starts_with("matmul-") && d.steps.iter().any(|x| x.contains("blockIdx.z"))
        })
    }) as usize;
    st.warpgroups += run_front
        .matrix_instructions()
        .iter()
        .any(|i| i.warpgroup()) as usize;
    st.tensor_copies += run_front
        .program
        .kernels
        .iter()
        .any(|g| !g.tensor_maps.is_empty()) as usize;
    // A product of operands of two types on a matrix instruction: its
    // 8-bit operand converted, as staged (`dtype=`) or in registers.
    let dtype_of = |name: &str| {
        let t = run_front.kernel.tensors.iter().find(|t| t.name == name);
        t.map(|t| t.dtype)
    };
    st.converted += (src.starts_with(GEMM)
        && dtype_of("A") != dtype_of("B")
        && !run_front.matrix_instructions().is_empty()) as usize;
    st.convs += run_front.kernel.stages.iter().any(|s| {
        s.default
            .as_ref()
            .is_some_and(|d| d.rule.starts_with("conv-"))
    }) as usize;
    for _ in 0..2 {
        let sizes: Vec<i64> = front
            .kernel
            .sizes
            .iter()
            // Multiples of 8 at times for every size of a run: the
            // versions taken where rows are whole vectors (AMD's buffer
            // loads of zero-filled tiles, emulated on the CPU).
            .map(|_| *rng.pick(&[1, 2, 3, 5, 8, 16, 17, 33, 40, 64, 65, 100]))
            .collect();
        // Bounded work: a batched product's five sizes drawn alike would
        // hold the interpreter for minutes.
        let sizes = front.kernel.fit_work(&sizes, 1 << 22);
        match rocmc::run::run_cpu(
            run_front,
            &sizes,
            &HashMap::new(),
            rng.next_u64() % 1000,
            false,
        ) {
            Ok(cmp) => {
                st.executed += 1;
                for c in cmp.iter().filter(|c| !c.ok()) {
                    st.failures.push((
                        src.to_string(),
                        format!("sizes {sizes:?}: {} differs from the interpreter by {:e} (tolerance {:e})", c.tensor, c.max_error, c.tolerance),
                    ));
                }
            }
            Err(e) => st
                .failures
                .push((src.to_string(), format!("sizes {sizes:?}: {e}"))),
        }
    }
    race_check(&front, p, rng, st);
    for t in TARGETS {
        let target = rocmc::targets(&rocmc::Options::new(t)).unwrap().remove(0);
        let nvidia = target.nvidia().is_some();
        let emit = rocmc::Emit {
            object: !nvidia,
            asm: nvidia,
            ..Default::default()
        };
        match rocmc::backend(&front, &target, &rocmc::Options::new(t), emit) {
            Ok(art) if nvidia => {
                match crate::common::assemble_ptx(art.asm.as_deref().unwrap_or_default(), t) {
                    Ok(_) => st.compiled += 1,
                    Err(e) => st
                        .failures
                        .push((src.to_string(), format!("ptxas {t}: {e}"))),
                }
            }
            Ok(_) => st.compiled += 1,
            // Over this target's LDS limit: a user error, reported as such.
            Err(rocmc::Error::Kernel(_)) => {}
            Err(e) => st.failures.push((src.to_string(), format!("{t}: {e}"))),
        }
    }
}

/// The kernel lowered for GPU target `p` and run as the GPU runs it, with
/// the loop-IR interpreter's check for LDS races and divergent barriers,
/// against its meaning. The sizes are bounded: the interpreter runs every
/// thread of every work-group.
fn race_check(front: &rocmc::Frontend, p: &str, rng: &mut Rng, st: &mut Stats) {
    let opts = rocmc::Options::new(p);
    let target = rocmc::targets(&opts).unwrap().remove(0);
    let lowered = match front.for_target(&target, &opts) {
        Ok(f) => f,
        // Over the target's LDS, or a matrix shape it lacks: the user's error.
        Err(rocmc::Error::Kernel(_)) => return,
        Err(e) => {
            st.failures
                .push((front.source.clone(), format!("lowering for {p}: {e}")));
            return;
        }
    };
    let k = &lowered.kernel;
    st.register_transposes += k.stages.iter().any(|s| {
        s.default
            .as_ref()
            .is_some_and(|d| d.rule == "transpose-registers")
    }) as usize;
    let sizes: Vec<i64> = k
        .sizes
        .iter()
        .map(|_| *rng.pick(&[1, 3, 17, 65, 100, 130]))
        .collect();
    let sizes = k.fit_work(&sizes, 1 << 20);
    let spec = rocmc::run::RunSpec::new(&sizes, &HashMap::new(), rng.next_u64() % 1000);
    match rocmc::run::run_loops(&lowered, &spec) {
        Ok(cmp) => {
            st.race_checked += 1;
            for c in cmp.iter().filter(|c| !c.ok()) {
                st.failures.push((
                    front.source.clone(),
                    format!(
                        "loop IR for {p} at sizes {sizes:?}: {} differs from the interpreter by {:e} (tolerance {:e})",
                        c.tensor, c.max_error, c.tolerance
                    ),
                ));
            }
        }
        Err(e) => st.failures.push((
            front.source.clone(),
            format!("loop IR for {p} at sizes {sizes:?}: {e}"),
        )),
    }
}

/// Kernels each run generates at the least, however long they take.
const MIN_KERNELS: usize = 10;

fn secs() -> u64 {
    std::env::var("ROCMC_DIFFUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

/// The fixed seed: every run checks the same kernels first.
#[test]
fn random_kernels_agree_with_the_interpreter() {
    let seed: u64 = std::env::var("ROCMC_DIFFUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xd1ff);
    fuzz(seed, secs(), "fixed");
}

/// A new seed each run, printed before the first kernel (also when LLVM
/// aborts the process), so CI explores beyond the fixed kernels and any
/// failure can be replayed with `ROCMC_DIFFUZZ_SEED=<seed>`.
#[test]
fn fresh_seed_kernels_agree_with_the_interpreter() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
        .unwrap_or(31337)
        % 1_000_000_007;
    eprintln!("difffuzz: fresh seed {seed} (replay: ROCMC_DIFFUZZ_SEED={seed})");
    fuzz(seed, secs(), "fresh");
}

fn fuzz(seed: u64, secs: u64, which: &str) {
    let mut rng = Rng(seed);
    let mut st = Stats::default();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut id = 0u64;
    let current = crate::common::root().join(format!("target/difffuzz-current-{which}.toml"));
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    // At least MIN_KERNELS whatever the time: on a loaded machine the
    // seconds alone would judge the generator on a handful.
    while Instant::now() < end || st.generated < MIN_KERNELS {
        id += 1;
        let src = kernel(&mut rng, id);
        let src = match rng.chance(30) {
            true => declare_an_output(&src),
            false => src,
        };
        st.generated += 1;
        // A kernel that kills the process (a signal or an LLVM abort, not a
        // panic) is left here, with the seed that made it.
        std::fs::write(
            &current,
            format!("# ROCMC_DIFFUZZ_SEED={seed}, kernel {id}\n{src}"),
        )
        .unwrap();
        let mut sub = Rng(rng.next_u64());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut local = Stats::default();
            check(&src, &mut sub, &mut local);
            local
        }));
        match r {
            Ok(l) => {
                st.rejected += l.rejected;
                st.gathers += l.gathers;
                st.scatters += l.scatters;
                st.tuples += l.tuples;
                st.ordered += l.ordered;
                st.scans += l.scans;
                st.written_scans += l.written_scans;
                st.written_attentions += l.written_attentions;
                st.topks += l.topks;
                st.attentions += l.attentions;
                st.grids += l.grids;
                st.convs += l.convs;
                st.warpgroups += l.warpgroups;
                st.batched += l.batched;
                st.tensor_copies += l.tensor_copies;
                st.converted += l.converted;
                st.register_transposes += l.register_transposes;
                st.bounded += l.bounded;
                st.kept += l.kept;
                st.kept_at += l.kept_at;
                st.executed += l.executed;
                st.race_checked += l.race_checked;
                st.compiled += l.compiled;
                st.failures.extend(l.failures);
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                st.failures.push((src.clone(), format!("panic: {msg}")));
            }
        }
    }
    println!(
        "difffuzz: seed {seed}, {secs} s: {} kernels generated, {} refused by the front end ({} of those accepted gather, {} scatter, {} tuple reduction ({} not commutative), {} scan ({} written out), {} top-k, {} attention ({} written out), {} grid reduction, {} convolution, {} bounded part, {} warpgroup product, {} batched product, {} tensor-copied, {} mixed-type matrix product, {} transpose through registers, {} with a declared intermediate result ({} computed at a reader's loop)), {} runs on the CPU path compared, {} loop-IR runs race-checked, {} compilations, {} failures",
        st.generated,
        st.rejected,
        st.gathers,
        st.scatters,
        st.tuples,
        st.ordered,
        st.scans,
        st.written_scans,
        st.topks,
        st.attentions,
        st.written_attentions,
        st.grids,
        st.convs,
        st.bounded,
        st.warpgroups,
        st.batched,
        st.tensor_copies,
        st.converted,
        st.register_transposes,
        st.kept,
        st.kept_at,
        st.executed,
        st.race_checked,
        st.compiled,
        st.failures.len()
    );
    if !st.failures.is_empty() {
        let dir = crate::common::root().join("target/difffuzz");
        std::fs::create_dir_all(&dir).unwrap();
        let mut report = String::new();
        for (i, (src, why)) in st.failures.iter().enumerate() {
            let path = dir.join(format!("{which}-{seed}-fail{i}.toml"));
            std::fs::write(&path, format!("# {why}\n{src}")).unwrap();
            if i < 5 {
                writeln!(report, "{}: {why}\n{src}", path.display()).unwrap();
            }
        }
        panic!(
            "{} failing kernels (first ones below, all in {}):\n{report}",
            st.failures.len(),
            dir.display()
        );
    }
    let accepted = st.generated - st.rejected;
    assert!(
        st.race_checked * 2 >= accepted,
        "the race check ran on {} of {accepted} accepted kernels",
        st.race_checked
    );
    assert!(
        st.generated >= MIN_KERNELS && accepted * 2 >= st.generated,
        "the generator makes too few valid kernels: {accepted} of {}",
        st.generated
    );
}
