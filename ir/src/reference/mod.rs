//! Seeded inputs, the reference interpreter's results, and the comparison
//! of a run against them: shared by `rocmc run` (CPU and HIP) and by the
//! runtime-only GPU checker, which runs where no LLVM is.

mod choice;
pub mod gelu16;

use crate::interp::{self, Buffer, Data, Scalar};
pub use crate::rng::Rng;
use crate::{DType, Kernel, TensorKind};
pub use choice::{Distribution, InputChoice, Tolerances, DISTRIBUTION_FORMS};
use std::collections::HashMap;

/// How one output tensor compares with the interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The tensor's name.
    pub tensor: String,
    /// Its element type.
    pub dtype: DType,
    /// Number of elements compared.
    pub elements: usize,
    /// Largest |got − want|.
    pub max_abs_error: f64,
    /// Largest |got − want| / (1 + |want|).
    pub max_error: f64,
    /// The tolerance for `max_error` (see [`tolerance`]).
    pub tolerance: f64,
}

impl Comparison {
    /// Whether the tensor is within tolerance.
    pub fn ok(&self) -> bool {
        self.max_error <= self.tolerance
    }
}

/// Tolerance on |got − want| / (1 + |want|) by dtype: the scheduled kernel
/// may reorder, contract (FMA) and approximate (exp, tanh) where the
/// interpreter rounds each operation; integers must match exactly.
pub fn tolerance(t: DType) -> f64 {
    match t {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        DType::BF16 => 5e-2,
        _ => 0.0,
    }
}

/// What a random input holds, by dtype: the one rule the host's draws
/// ([`random_buffer`], [`random_inputs`]) and the GPU benchmark's fills
/// on the device follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Draw {
    /// Uniform in `[lo, lo + span)`, rounded to the dtype.
    Float { lo: f64, span: f64 },
    /// `lo + r % span` for a uniform 64-bit `r`.
    Int { lo: i64, span: u64 },
}

/// The draw of an input of dtype `t`; `index_range` is the extent it
/// indexes where it is read as a gather's or scatter's subscript
/// ([`index_ranges`]): floats in [-1, 1), small integers (0..100 unsigned,
/// -100..=100 signed), booleans 0 or 1, subscripts in `0..extent`.
pub fn input_draw(t: DType, index_range: Option<i64>) -> Draw {
    match index_range {
        Some(e) if !t.is_float() && e <= crate::kernel::int_range(t).1 => Draw::Int {
            lo: 0,
            span: e.max(1) as u64,
        },
        _ => match t {
            t if t.is_float() => Draw::Float {
                lo: -1.0,
                span: 2.0,
            },
            DType::Bool => Draw::Int { lo: 0, span: 2 },
            DType::U8 | DType::U32 => Draw::Int { lo: 0, span: 100 },
            _ => Draw::Int {
                lo: -100,
                span: 201,
            },
        },
    }
}

/// `n` values of dtype `t` drawn as `d` says.
fn draw_buffer(rng: &mut Rng, t: DType, d: Draw, n: usize) -> Buffer {
    let data = match d {
        Draw::Float { lo, span } => Data::F(
            (0..n)
                .map(|_| crate::dtype::round_to(rng.uniform(lo, lo + span), t))
                .collect(),
        ),
        Draw::Int { lo, span } => Data::I(
            (0..n)
                .map(|_| lo + (rng.next_u64() % span) as i64)
                .collect(),
        ),
    };
    Buffer { dtype: t, data }
}

/// `n` seeded random values of dtype `t`: floats in [-1, 1) (rounded to `t`), small integers.
pub fn random_buffer(rng: &mut Rng, t: DType, n: usize) -> Buffer {
    draw_buffer(rng, t, input_draw(t, None), n)
}

/// The parameters' values, given in `params` or drawn from `rng`
/// (uniform in [0.5, 1.5)), and their 8-byte slots.
pub fn random_params(
    k: &Kernel,
    params: &HashMap<String, f64>,
    rng: &mut Rng,
) -> Result<(Vec<Scalar>, Vec<u8>), String> {
    let mut pvals = Vec::new();
    let mut pbytes = Vec::new();
    for name in params.keys() {
        if !k.params.iter().any(|p| &p.name == name) {
            return Err(format!(
                "--param {name}: the kernel has no parameter `{name}`"
            ));
        }
    }
    for p in &k.params {
        let v = params
            .get(&p.name)
            .copied()
            .unwrap_or_else(|| rng.uniform(0.5, 1.5));
        let (s, bytes): (Scalar, Vec<u8>) = match p.dtype {
            DType::F32 => (
                Scalar::F(v as f32 as f64),
                (v as f32).to_le_bytes().to_vec(),
            ),
            DType::F64 => (Scalar::F(v), v.to_le_bytes().to_vec()),
            t if t.is_float() => {
                let b = Buffer {
                    dtype: t,
                    data: Data::F(vec![v]),
                };
                (Scalar::F(crate::dtype::round_to(v, t)), b.to_bytes())
            }
            t => {
                let i = interp::normalize_int(t, v as i64);
                (Scalar::I(i), i.to_le_bytes()[..t.size()].to_vec())
            }
        };
        pvals.push(s);
        let mut slot = bytes;
        slot.resize(8, 0);
        pbytes.extend(slot);
    }
    Ok((pvals, pbytes))
}

/// Seeded random inputs, parameter values and their 8-byte slots.
pub fn random_inputs(
    k: &Kernel,
    sizes: &[i64],
    params: &HashMap<String, f64>,
    seed: u64,
) -> Result<Inputs, String> {
    prepare_inputs(k, sizes, params, seed, &HashMap::new())
}

/// [`random_inputs`], with some input tensors chosen: drawn from a given
/// distribution or given as data. The others get exactly the values
/// [`random_inputs`] gives them.
pub fn prepare_inputs(
    k: &Kernel,
    sizes: &[i64],
    params: &HashMap<String, f64>,
    seed: u64,
    choices: &HashMap<String, InputChoice>,
) -> Result<Inputs, String> {
    for name in choices.keys() {
        match k.tensors.iter().find(|t| &t.name == name) {
            Some(t) if t.kind == TensorKind::Input => {}
            Some(_) => {
                return Err(format!(
                    "--input {name}: `{name}` is computed by the kernel; only inputs can be given (its inputs: {})",
                    input_names(k)
                ))
            }
            None => {
                return Err(format!(
                    "--input {name}: the kernel has no tensor `{name}` (its inputs: {})",
                    input_names(k)
                ))
            }
        }
    }
    let mut rng = Rng(seed);
    let (pvals, pbytes) = random_params(k, params, &mut rng)?;
    let shapes: Vec<Vec<i64>> = k
        .tensors
        .iter()
        .map(|t| interp::shape_of(t, sizes))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let ranges = index_ranges(k, &shapes);
    let mut inputs: Vec<Buffer> = Vec::new();
    for (id, t) in k.inputs() {
        let n = shapes[id.0 as usize].iter().product::<i64>() as usize;
        let chosen = match choices.get(&t.name) {
            None => None,
            Some(InputChoice::Random(d)) => {
                d.check(t.dtype)
                    .map_err(|e| format!("--input {}: {e}", t.name))?;
                Some(d.draw(&mut choice::stream_for(seed, &t.name), t.dtype, n))
            }
            Some(InputChoice::Given(b)) if b.len() != n || b.dtype != t.dtype => {
                return Err(format!(
                    "--input {}: {} {} elements given, the kernel's `{}` has {n} {} for these sizes",
                    t.name,
                    b.len(),
                    b.dtype,
                    t.name,
                    t.dtype
                ))
            }
            Some(InputChoice::Given(b)) => Some(b.clone()),
        };
        if let Some(b) = chosen {
            // The default draws one number per element: skip them, so the
            // tensors after this one keep their values.
            rng.0 = rng
                .0
                .wrapping_add((n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            inputs.push(b);
            continue;
        }
        let draw = input_draw(t.dtype, ranges[id.0 as usize]);
        inputs.push(draw_buffer(&mut rng, t.dtype, draw, n));
    }
    let host = host_buffers(k, &shapes, &inputs);
    Ok(Inputs {
        inputs,
        pvals,
        pbytes,
        host,
    })
}

fn input_names(k: &Kernel) -> String {
    k.inputs()
        .map(|(_, t)| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// For each tensor read directly as a data subscript of a gather or a
/// scatter (`table[ids[t], j]`, `H[X[i]] += 1`, also through a conversion),
/// the smallest extent it indexes: random inputs for it are drawn from
/// `0..extent`, the range in which the access means what it says (outside
/// it a gather clamps, a scatter drops). Other
/// integer inputs get the usual small integers.
pub fn index_ranges(k: &Kernel, shapes: &[Vec<i64>]) -> Vec<Option<i64>> {
    let mut out = vec![None; k.tensors.len()];
    let mut direct = |tensor: crate::TensorId, indices: &[crate::Expr]| {
        for (d, sub) in indices.iter().enumerate() {
            let mut inner = sub;
            while let crate::ExprKind::Cast(a) = &inner.kind {
                inner = a;
            }
            if let crate::ExprKind::Load { tensor: src, .. } = &inner.kind {
                let e = shapes[tensor.0 as usize][d].max(1);
                let r: &mut Option<i64> = &mut out[src.0 as usize];
                *r = Some(r.map_or(e, |x| x.min(e)));
            }
        }
    };
    let mut gathers = Vec::new();
    for st in &k.stages {
        // A scatter's subscripts are handled below, as its output's.
        let exprs = st.exprs().take_while(|_| st.scatter().is_none());
        for e in std::iter::once(&st.value).chain(exprs.skip(1)) {
            e.each(&mut |x| {
                if let crate::ExprKind::Gather { tensor, indices } = &x.kind {
                    gathers.push((*tensor, indices.clone()));
                }
            });
        }
        if let Some(sc) = st.scatter() {
            gathers.push((st.output, sc.indices.clone()));
        }
    }
    for (t, ix) in &gathers {
        direct(*t, ix);
    }
    out
}

/// Seeded random inputs and everything derived from them.
#[derive(Clone)]
pub struct Inputs {
    /// One buffer per input tensor, in order.
    pub inputs: Vec<Buffer>,
    /// The parameters' values.
    pub pvals: Vec<Scalar>,
    /// One 8-byte slot per parameter.
    pub pbytes: Vec<u8>,
    /// One byte vector per tensor: inputs filled, outputs zeroed.
    pub host: Vec<Vec<u8>>,
}

fn host_buffers(k: &Kernel, shapes: &[Vec<i64>], inputs: &[Buffer]) -> Vec<Vec<u8>> {
    let mut ins = inputs.iter();
    k.tensors
        .iter()
        .zip(shapes)
        .map(|(t, shape)| match t.kind {
            TensorKind::Input => ins.next().expect("one buffer per input").to_bytes(),
            TensorKind::Stage(_) => {
                vec![0u8; shape.iter().product::<i64>() as usize * t.dtype.size()]
            }
        })
        .collect()
}

/// Compares every tensor in memory (not inlined or computed at another stage) of `got` with `want`.
pub fn compare<E>(
    k: &Kernel,
    want: &[Buffer],
    got: impl FnMut(usize) -> Result<Vec<u8>, E>,
) -> Result<Vec<Comparison>, E> {
    compare_with(k, want, &Tolerances::default(), false, got).map(|(c, _)| c)
}

/// The results [`compare_with`] kept: tensor index and values.
pub type Kept = Vec<(usize, Buffer)>;

/// [`compare`] with the given tolerances; with `keep`, also returns what
/// was compared (tensor index, values), to be written out.
pub fn compare_with<E>(
    k: &Kernel,
    want: &[Buffer],
    tol: &Tolerances,
    keep: bool,
    mut got: impl FnMut(usize) -> Result<Vec<u8>, E>,
) -> Result<(Vec<Comparison>, Kept), E> {
    let mut kept = Vec::new();
    let mut out = Vec::new();
    for (i, t) in k.stored_results() {
        let g = Buffer::from_bytes(t.dtype, &got(i)?);
        let (max_abs_error, max_error) = errors(&g, &want[i]);
        out.push(Comparison {
            tensor: t.name.clone(),
            dtype: t.dtype,
            elements: want[i].len(),
            max_abs_error,
            max_error,
            tolerance: tol.of(&t.name, t.dtype),
        });
        if keep {
            kept.push((i, g));
        }
    }
    Ok((out, kept))
}

/// Largest |got − want| and largest |got − want| / (1 + |want|); NaN where
/// the other is not NaN counts as an infinite error.
pub fn errors(got: &Buffer, want: &Buffer) -> (f64, f64) {
    worst((0..want.len()).map(|j| (got.get(j), want.get(j))))
}

/// [`errors`] over pairs (got, want).
fn worst(pairs: impl Iterator<Item = (Scalar, Scalar)>) -> (f64, f64) {
    let (mut max_abs, mut max_err) = (0f64, 0f64);
    for (g, w) in pairs {
        let (g, w) = (scalar_f(g), scalar_f(w));
        let d = if g == w || (g.is_nan() && w.is_nan()) {
            0.0
        } else {
            (g - w).abs()
        };
        let d = if d.is_nan() { f64::INFINITY } else { d };
        max_abs = max_abs.max(d);
        max_err = max_err.max(d / (1.0 + w.abs()));
    }
    (max_abs, max_err)
}

/// [`compare`] for a sampled run ([`interp::run_sampled`]): each result's
/// sampled elements against the same elements of `got`.
pub fn compare_sampled<E>(
    k: &Kernel,
    sampled: &[interp::Sampled],
    tol: &Tolerances,
    mut got: impl FnMut(usize) -> Result<Vec<u8>, E>,
) -> Result<Vec<Comparison>, E> {
    let mut out = Vec::new();
    for s in sampled {
        let t = &k.tensors[s.tensor];
        let g = Buffer::from_bytes(t.dtype, &got(s.tensor)?);
        // A result shorter than the kernel's (a device that wrote less)
        // compares as NaN: infinitely wrong.
        let at = |o: usize| match o < g.len() {
            true => g.get(o),
            false => Scalar::F(f64::NAN),
        };
        let (max_abs_error, max_error) =
            worst(s.offsets.iter().zip(&s.values).map(|(o, w)| (at(*o), *w)));
        out.push(Comparison {
            tensor: t.name.clone(),
            dtype: t.dtype,
            elements: s.offsets.len(),
            max_abs_error,
            max_error,
            tolerance: tol.of(&t.name, t.dtype),
        });
    }
    Ok(out)
}

/// Arithmetic operations of the plain kernel for these sizes: each float
/// or integer arithmetic operation or math call once per point it is
/// evaluated (so an int8 GEMM's multiply-adds count as a float GEMM's do,
/// two per term, as TOPS are quoted).
pub fn flops(k: &Kernel, sizes: &[i64]) -> u64 {
    fn count(e: &crate::Expr) -> u64 {
        use crate::ExprKind::*;
        let numeric = e.dtype.is_float() || e.dtype.is_int();
        let own = u64::from(numeric && matches!(e.kind, Binary(..) | Call(..) | Unary(..)));
        own + match &e.kind {
            Unary(_, a) | Cast(a) => count(a),
            Binary(_, a, b) => count(a) + count(b),
            Select(c, a, b) => count(c) + count(a) + count(b),
            Call(_, xs) => xs.iter().map(count).sum(),
            _ => 0,
        }
    }
    k.stages
        .iter()
        .filter(|s| !s.is_inlined() && !s.absorbed)
        .map(|s| {
            if let (Some(r), Some(_)) = (s.reduce(), s.attention()) {
                return attention_flops(s, r, sizes);
            }
            let points: i64 = s
                .axes
                .iter()
                .map(|a| a.extent.eval(sizes, &[]).unwrap_or(0))
                .product();
            let (red_points, body_ops) = match s.reduce() {
                Some(r) => (
                    r.axes
                        .iter()
                        .map(|a| a.extent.eval(sizes, &[]).unwrap_or(0))
                        .product::<i64>(),
                    match r.tuple() {
                        Some(t) => t.elems.iter().chain(&t.combine).map(count).sum(),
                        None => count(&r.body) + 1,
                    },
                ),
                None => (0, 0),
            };
            points as u64 * (count(&s.value) + red_points as u64 * body_ops)
        })
        .sum()
}

/// An attention's two products, as FlashAttention counts them: 2·e
/// (q·k) plus 2·d (p·v) per query row and key it sees (causal rows see
/// fewer keys).
fn attention_flops(s: &crate::kernel::Stage, r: &crate::kernel::Reduction, sizes: &[i64]) -> u64 {
    let n = s.axes.len();
    let ext = |ix: &crate::Index, pt: &[i64]| ix.eval(sizes, pt).unwrap_or(0).max(0) as u64;
    let batch: u64 = s.axes[..n - 2]
        .iter()
        .map(|a| ext(&a.extent, &[]))
        .product();
    let rows = ext(&s.axes[n - 2].extent, &[]);
    let (e, d) = (ext(&r.axes[1].extent, &[]), ext(&s.axes[n - 1].extent, &[]));
    let mut pt = vec![0i64; n + 2];
    let keys: u64 = (0..rows)
        .map(|i| {
            pt[n - 2] = i as i64;
            ext(&r.axes[0].extent, &pt)
        })
        .sum();
    batch * keys * 2 * (e + d)
}

fn scalar_f(s: Scalar) -> f64 {
    match s {
        Scalar::F(x) => x,
        Scalar::I(x) => x as f64,
    }
}
