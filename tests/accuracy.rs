//! Accuracy of every math function for every float dtype, in ulps, against
//! MPFR (correctly rounded, 256-bit working precision) as the reference.
//!
//! Each function runs as a kernel `Y[i] = f(x[i])` through the CPU path —
//! the same LLVM expansions a GPU runs (codegen/src/function/math.rs) —
//! over a sweep of inputs: 0, ±denormals, ±inf, NaN, the largest finite
//! values, the points where an expansion switches ranges and their
//! neighbours, random values over the whole exponent range and dense
//! random values where the functions vary. The largest error per function
//! and dtype must not exceed the bound documented in docs/math-accuracy.md
//! (the test reads that table, so the document cannot drift). Print the
//! measured table with:
//!
//! ```sh
//! cargo test -p rocmc-tests --test e2e -- accuracy:: --nocapture
//! ```

use rocmc::ir::DType;
use rug::float::Constant;
use rug::ops::Pow;
use rug::Float;
use std::collections::BTreeMap;

const PREC: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fx {
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Gelu,
    Erf,
    Pow,
}

const FUNCTIONS: [Fx; 11] = [
    Fx::Exp,
    Fx::Exp2,
    Fx::Log,
    Fx::Log2,
    Fx::Sqrt,
    Fx::Rsqrt,
    Fx::Tanh,
    Fx::Sigmoid,
    Fx::Gelu,
    Fx::Erf,
    Fx::Pow,
];
const DTYPES: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

impl Fx {
    fn name(self) -> &'static str {
        match self {
            Fx::Exp => "exp",
            Fx::Exp2 => "exp2",
            Fx::Log => "log",
            Fx::Log2 => "log2",
            Fx::Sqrt => "sqrt",
            Fx::Rsqrt => "rsqrt",
            Fx::Tanh => "tanh",
            Fx::Sigmoid => "sigmoid",
            Fx::Gelu => "gelu",
            Fx::Erf => "erf",
            Fx::Pow => "pow",
        }
    }

    /// The exact value at `PREC` bits (MPFR rounds each step correctly).
    fn reference(self, x: f64, y: f64) -> Float {
        let f = |v: f64| Float::with_val(PREC, v);
        let sigmoid = |t: Float| -> Float {
            let e = Float::with_val(PREC, -t).exp();
            Float::with_val(PREC, 1) / (Float::with_val(PREC, 1) + e)
        };
        match self {
            Fx::Exp => f(x).exp(),
            Fx::Exp2 => f(x).exp2(),
            Fx::Log => f(x).ln(),
            Fx::Log2 => f(x).log2(),
            Fx::Sqrt => f(x).sqrt(),
            // IEEE 754's rSqrt(−0) is −∞; MPFR's rec_sqrt gives +∞ there.
            Fx::Rsqrt if x == 0.0 && x.is_sign_negative() => f(f64::NEG_INFINITY),
            Fx::Rsqrt => f(x).recip_sqrt(),
            Fx::Tanh => f(x).tanh(),
            Fx::Sigmoid => sigmoid(f(x)),
            // The limits: x·sigmoid(2z) is NaN there at any precision.
            Fx::Gelu if x.is_infinite() => f(if x > 0.0 { x } else { -0.0 }),
            Fx::Gelu => {
                // x·sigmoid(2z) = 0.5·x·(1 + tanh z), z = √(2/π)(x + 0.044715x³).
                let pi = Float::with_val(PREC, Constant::Pi);
                let c = (Float::with_val(PREC, 2) / pi).sqrt();
                let k = Float::with_val(PREC, Float::parse("0.044715").unwrap());
                let x3 = f(x).pow(3u32);
                let z = c * (f(x) + k * x3);
                f(x) * sigmoid(z * 2u32)
            }
            Fx::Erf => f(x).erf(),
            Fx::Pow => f(x).pow(f(y)),
        }
    }
}

/// (significand bits, smallest normal exponent) of a float dtype.
fn format(t: DType) -> (i32, i32) {
    match t {
        DType::F64 => (53, -1022),
        DType::F32 => (24, -126),
        DType::F16 => (11, -14),
        _ => (8, -126),
    }
}

fn round_to(t: DType, v: f64) -> f64 {
    match t {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => rocmc::ir::dtype::f64_to_f16(v).to_f64(),
        _ => rocmc::ir::dtype::f64_to_bf16(v).to_f64(),
    }
}

/// The exact value rounded to f32 to odd (toward zero, last bit set when
/// inexact): rounding that to f16 or bf16 is correct.
fn odd_f32(exact: &Float) -> f32 {
    let t = exact.to_f32_round(rug::float::Round::Zero);
    if !t.is_finite() || Float::with_val(PREC, t) == *exact {
        return t;
    }
    f32::from_bits(t.to_bits() | 1)
}

/// The exact value rounded to the dtype.
fn rounded(t: DType, exact: &Float) -> f64 {
    match t {
        DType::F64 => exact.to_f64(),
        DType::F32 => exact.to_f32() as f64,
        // Through f64 rounded to odd (MPFR's own rounding mode), then once
        // more: correctly rounded.
        DType::F16 => half::f16::from_f32(odd_f32(exact)).to_f64(),
        _ => half::bf16::from_f32(odd_f32(exact)).to_f64(),
    }
}

/// |got − exact| in units in the last place of the exact value at dtype `t`;
/// infinite where a NaN, an infinity or a sign is wrong.
fn ulp_error(t: DType, got: f64, exact: &Float) -> f64 {
    if exact.is_nan() || got.is_nan() {
        return if exact.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let want = rounded(t, exact);
    if got.is_infinite() || want.is_infinite() || exact.is_infinite() {
        return if got == want { 0.0 } else { f64::INFINITY };
    }
    if exact.is_zero() {
        return if got == 0.0 && got.is_sign_negative() == exact.is_sign_negative() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let (p, emin) = format(t);
    let e = exact.get_exp().map(|e| (e - 1).max(emin)).unwrap_or(emin);
    let ulp = Float::with_val(PREC, 1) << (e - (p - 1));
    let diff = (Float::with_val(PREC, got) - exact).abs();
    (diff / ulp).to_f64()
}

use rocmc::codegen::host::HostMath;
use rocmc::run::Rng;

/// Any finite value of dtype `t`: random sign, exponent and significand.
fn any(rng: &mut Rng, t: DType) -> f64 {
    let (p, emin) = format(t);
    let emax = -emin + 1;
    let e = (rng.next_u64() % (emax - emin + p) as u64) as i32 + emin - p;
    let v = (1.0 + rng.unit()) * 2f64.powi(e);
    if rng.next_u64() & 1 == 1 {
        -v
    } else {
        v
    }
}
fn next_up(v: f64, t: DType) -> f64 {
    // One step of the dtype's grid above v (v finite), found by bisection-free nudging.
    let (p, emin) = format(t);
    let e = if v == 0.0 {
        emin
    } else {
        (v.abs().log2().floor() as i32).max(emin)
    };
    round_to(t, v + 2f64.powi(e - (p - 1)))
}

/// Inputs for `f` at dtype `t`, all representable in `t`.
fn inputs(f: Fx, t: DType) -> Vec<f64> {
    let (p, emin) = format(t);
    let max = match t {
        DType::F64 => f64::MAX,
        DType::F32 => f32::MAX as f64,
        DType::F16 => 65504.0,
        _ => half::bf16::MAX.to_f64(),
    };
    let tiny = 2f64.powi(emin - (p - 1));
    let mut v = vec![
        0.0,
        -0.0,
        tiny,
        -tiny,
        2f64.powi(emin) - tiny,
        2f64.powi(emin),
        -2f64.powi(emin),
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        max,
        -max,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    // Where expansions switch ranges or functions change behaviour.
    let edges = [
        0.84375,
        1.25,
        1.0 / 0.35,
        6.0,
        0.55,
        0.125,
        std::f64::consts::FRAC_1_SQRT_2,
        std::f64::consts::LN_2 / 2.0,
        709.78,
        -745.1,
        88.72,
        -87.3,
        -103.9,
        11.09,
        -17.3,
        1024.0,
        -1022.0,
        -1074.0,
        10.0,
        1e-8,
        1e-300,
    ];
    for e in edges {
        for s in [1.0, -1.0] {
            let x = round_to(t, s * e);
            if x.is_finite() {
                v.push(x);
                v.push(next_up(x, t));
                v.push(-next_up(-x, t));
            }
        }
    }
    let mut rng = Rng(0xacc0 + f as u64 * 31 + p as u64);
    let n = if t == DType::F64 { 3000 } else { 1500 };
    for _ in 0..n {
        v.push(any(&mut rng, t));
        v.push(rng.uniform(-20.0, 20.0));
        v.push(rng.uniform(-1.0, 1.0) * 2f64.powi(-((rng.next_u64() % 30) as i32)));
    }
    if f == Fx::Pow {
        // Bases for pow: positive over the whole range and near 1.
        for _ in 0..n {
            v.push(rng.uniform(0.0, 4.0));
            v.push(1.0 + rng.uniform(-1e-3, 1e-3));
        }
    }
    let mut out: Vec<f64> = v.into_iter().map(|x| round_to(t, x)).collect();
    out.dedup_by(|a, b| a.to_bits() == b.to_bits());
    out
}

/// Exponents for pow, paired with bases: specials, integers (odd and
/// even, for negative bases) and random ones.
fn exponents(t: DType, xs: &[f64]) -> Vec<f64> {
    let mut rng = Rng(0xe4b0 + format(t).0 as u64);
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        3.0,
        -3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    xs.iter()
        .enumerate()
        .map(|(i, _)| {
            round_to(
                t,
                match i % 4 {
                    0 => special[(rng.next_u64() % special.len() as u64) as usize],
                    1 => (rng.next_u64() % 41) as f64 - 20.0,
                    2 => rng.uniform(-40.0, 40.0),
                    _ => rng.uniform(-1.0, 1.0) * 2f64.powi((rng.next_u64() % 12) as i32),
                },
            )
        })
        .collect()
}

fn to_bytes(t: DType, xs: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in xs {
        match t {
            DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
            DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            _ => out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
        }
    }
    out
}

fn from_bytes(t: DType, b: &[u8]) -> Vec<f64> {
    let w = t.size();
    b.chunks(w)
        .map(|c| match t {
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::F16 => half::f16::from_le_bytes(c.try_into().unwrap()).to_f64(),
            _ => half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64(),
        })
        .collect()
}

/// Runs `Y[i] = f(x[i] [, y[i]])` on the CPU path; returns (x, y, Y).
fn run(f: Fx, t: DType) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    run_with(f, t, HostMath::Native)
}

/// [`run`] with the host's f32 exp/log chosen: libm's, or rocmc's own
/// expansions as NVPTX uses them.
fn run_with(f: Fx, t: DType, math: HostMath) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let xs = inputs(f, t);
    let ys = if f == Fx::Pow {
        exponents(t, &xs)
    } else {
        Vec::new()
    };
    let d = t.name();
    let (decl, call) = if f == Fx::Pow {
        (
            format!("x = {{ dtype = \"{d}\", shape = [\"n\"] }}\ny = {{ dtype = \"{d}\", shape = [\"n\"] }}"),
            "pow(x[i], y[i])".to_string(),
        )
    } else {
        (
            format!("x = {{ dtype = \"{d}\", shape = [\"n\"] }}"),
            format!("{}(x[i])", f.name()),
        )
    };
    let src = format!(
        "[kernel]\nname = \"acc\"\nsizes = [\"n\"]\n\n[inputs]\n{decl}\n\n[[stage]]\ncompute = \"Y[i] = {call}\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n"
    );
    let front = rocmc::frontend("accuracy.toml", &src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let k = &front.kernel;
    let pos = |name: &str| k.tensors.iter().position(|t| t.name == name).unwrap();
    let mut bufs = vec![Vec::new(); k.tensors.len()];
    bufs[pos("x")] = to_bytes(t, &xs);
    if f == Fx::Pow {
        bufs[pos("y")] = to_bytes(t, &ys);
    }
    bufs[pos("Y")] = vec![0u8; xs.len() * t.size()];
    rocmc::codegen::host::run_on_host_with(
        k,
        &front.program,
        &[xs.len() as i32],
        &[],
        &mut bufs,
        false,
        math,
    )
    .unwrap_or_else(|e| panic!("{} {d}: {e}", f.name()));
    let got = from_bytes(t, &bufs[pos("Y")]);
    (xs, ys, got)
}

/// The bounds documented in docs/math-accuracy.md: function → dtype → ulps.
fn documented() -> BTreeMap<String, BTreeMap<String, f64>> {
    let doc = std::fs::read_to_string(crate::common::root().join("docs/math-accuracy.md"))
        .expect("docs/math-accuracy.md");
    let mut rows = BTreeMap::new();
    let mut header: Vec<String> = Vec::new();
    // The first table, whose header starts with `function`.
    for line in doc.lines() {
        if !line.starts_with('|') {
            if header.is_empty() {
                continue;
            }
            break;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect();
        if cells.first().is_some_and(|c| c == "function") {
            header = cells;
            continue;
        }
        let Some(name) = cells.first() else { continue };
        if !FUNCTIONS.iter().any(|f| f.name() == name) {
            continue;
        }
        let mut m = BTreeMap::new();
        for (h, c) in header.iter().zip(&cells).skip(1) {
            if let Ok(v) = c.split_whitespace().next().unwrap_or("").parse::<f64>() {
                m.insert(h.clone(), v);
            }
        }
        rows.insert(name.clone(), m);
    }
    rows
}

#[test]
fn every_math_function_is_within_its_documented_ulp_bound() {
    let doc = documented();
    let mut table = String::from("| function | f64 | f32 | f16 | bf16 |\n|---|---|---|---|---|\n");
    let mut failures = Vec::new();
    let mut points = 0usize;
    for f in FUNCTIONS {
        let mut row = format!("| `{}` |", f.name());
        for t in DTYPES {
            let (xs, ys, got) = run(f, t);
            points += xs.len();
            let mut worst = (0.0f64, 0.0, 0.0, 0.0);
            for i in 0..xs.len() {
                let y = ys.get(i).copied().unwrap_or(0.0);
                let exact = f.reference(xs[i], y);
                let e = ulp_error(t, got[i], &exact);
                if e > worst.0 || e.is_nan() {
                    worst = (e, xs[i], y, got[i]);
                }
            }
            row += &format!(" {:.2} |", worst.0);
            let bound = doc.get(f.name()).and_then(|m| m.get(t.name())).copied();
            match bound {
                None => failures.push(format!(
                    "{} {}: no bound in docs/math-accuracy.md",
                    f.name(),
                    t.name()
                )),
                Some(b) if worst.0 > b || worst.0.is_nan() => failures.push(format!(
                    "{} {}: {:.3} ulp > documented {b} (x = {:e}, y = {:e}, got {:e}, want {:e})",
                    f.name(),
                    t.name(),
                    worst.0,
                    worst.1,
                    worst.2,
                    worst.3,
                    f.reference(worst.1, worst.2).to_f64()
                )),
                Some(_) => {}
            }
            if std::env::var("ROCMC_ACCURACY_WORST").is_ok() {
                println!(
                    "{} {}: {:.3} at x = {:e}, y = {:e}: got {:e}",
                    f.name(),
                    t.name(),
                    worst.0,
                    worst.1,
                    worst.2,
                    worst.3
                );
            }
        }
        table += &row;
        table.push('\n');
    }
    println!("measured max error in ulps over {points} inputs:\n{table}");
    assert!(failures.is_empty(), "{}\n\n{table}", failures.join("\n"));
}

/// NVPTX has no accurate f32 exp or log, so rocmc expands them (exp and
/// exp2 in f32, log and log2 through f64). The host runs the same
/// expansions here; every f32 function (most use exp) stays within the f32
/// bound documented for it.
#[test]
fn the_nvptx_f32_expansions_are_within_the_documented_bounds() {
    let doc = documented();
    let mut failures = Vec::new();
    for f in FUNCTIONS {
        let (xs, ys, got) = run_with(f, DType::F32, HostMath::Expanded);
        let mut worst = (0.0f64, 0.0);
        for i in 0..xs.len() {
            let y = ys.get(i).copied().unwrap_or(0.0);
            let e = ulp_error(DType::F32, got[i], &f.reference(xs[i], y));
            if e > worst.0 || e.is_nan() {
                worst = (e, xs[i]);
            }
        }
        let bound = doc[f.name()]["f32"];
        println!("{} f32 (NVPTX expansions): {:.3} ulp", f.name(), worst.0);
        if worst.0 > bound || worst.0.is_nan() {
            failures.push(format!(
                "{}: {:.3} ulp > {bound} at x = {:e}",
                f.name(),
                worst.0,
                worst.1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The metric itself: a correctly rounded result is within half an ulp,
/// the next value is about one ulp away, and wrong specials are infinite.
#[test]
fn ulp_metric_is_sound() {
    let exact = Float::with_val(PREC, 1.0 / 3.0) + Float::with_val(PREC, 1e-30);
    assert!(ulp_error(DType::F64, 1.0 / 3.0, &exact) <= 0.5);
    let next = f64::from_bits((1.0f64 / 3.0).to_bits() + 1);
    let e = ulp_error(DType::F64, next, &exact);
    assert!((0.5..1.5).contains(&e), "{e}");
    assert_eq!(ulp_error(DType::F32, f64::NAN, &exact), f64::INFINITY);
    assert_eq!(ulp_error(DType::F32, f64::INFINITY, &exact), f64::INFINITY);
    let nan = Float::with_val(PREC, f64::NAN);
    assert_eq!(ulp_error(DType::F16, f64::NAN, &nan), 0.0);
}

/// `exp2_approx` is the hardware's instruction and nothing else: the bare
/// `v_exp_f32` on AMD (no denormal scaling around it, whose compare with
/// −126 = 0xc2fc0000 `llvm.exp2` adds), one `ex2.approx.ftz.f32` on
/// NVIDIA (where `exp2` goes through the f64 expansion), and `exp2`'s
/// value on the CPU (tests/regress/exp2_approx.toml).
#[test]
fn exp2_approx_is_one_hardware_instruction() {
    let src = |f: &str| {
        format!(
            "[kernel]\nname = \"e\"\nsizes = [\"n\"]\n[inputs]\nx = {{ dtype = \"f32\", shape = [\"n\"] }}\n\
             [[stage]]\ncompute = \"Y[i] = {f}(x[i])\"\nshape = [\"n\"]\n\
             schedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n"
        )
    };
    let asm = |f: &str, mcpu: &str| {
        let art = rocmc::compile(
            "e.toml",
            &src(f),
            &rocmc::Options::new(mcpu),
            rocmc::Emit {
                asm: true,
                ..rocmc::Emit::default()
            },
        )
        .unwrap_or_else(|e| panic!("{f} for {mcpu}: {e}"));
        art.asm.expect("assembly")
    };
    for mcpu in ["gfx90a", "gfx942", "gfx1100"] {
        let fast = asm("exp2_approx", mcpu);
        assert_eq!(fast.matches("v_exp_f32").count(), 1, "{mcpu}:\n{fast}");
        assert!(!fast.contains("0xc2fc0000"), "{mcpu}:\n{fast}");
        // The control: the accurate one does scale, so the check above can fail.
        assert!(asm("exp2", mcpu).contains("0xc2fc0000"), "{mcpu}");
    }
    let fast = asm("exp2_approx", "sm_90");
    assert_eq!(fast.matches("ex2.approx.ftz.f32").count(), 1, "{fast}");
    assert!(!fast.contains(".f64"), "{fast}");
    assert!(asm("exp2", "sm_90").contains(".f64"));
}
