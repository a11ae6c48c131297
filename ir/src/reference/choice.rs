//! What `rocmc run` feeds a kernel and how closely it must match: the
//! per-tensor input distributions (`--input X=normal:0,2`), inputs given as
//! data (`--input X=x.npy`, read by the CLI), and tolerances
//! (`--tolerance 1e-3`, `--tolerance Y=0`).
//!
//! Each chosen tensor draws from a stream of its own, derived from the seed
//! and its name, and the shared stream skips the draws the default would
//! have made: choosing one tensor's values never changes the others'.

use super::Rng;
use crate::interp::{Buffer, Data};
use crate::kernel::{int_range, Kernel, ReduceOp};
use crate::DType;
use std::collections::HashMap;

/// How one input tensor is filled.
#[derive(Clone, Debug, PartialEq)]
pub enum InputChoice {
    /// Seeded random values from this distribution.
    Random(Distribution),
    /// These values, in row-major order (shape checked by the caller,
    /// length checked here).
    Given(Buffer),
}

/// A distribution of input values. Integer tensors draw integers: uniform
/// ones over `lo..hi` (half-open), normal ones rounded; every value must
/// fit the dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Distribution {
    /// `uniform:LO,HI`: uniform in [LO, HI).
    Uniform { lo: f64, hi: f64 },
    /// `normal:MEAN,STD`.
    Normal { mean: f64, std: f64 },
    /// `const:X`: every element X.
    Const(f64),
}

/// The forms `--input NAME=…` takes, for error messages.
pub const DISTRIBUTION_FORMS: &str =
    "uniform:LO,HI (integers: LO..HI, HI excluded), normal:MEAN,STD or const:X; \
     a bound may be a size's name (uniform:0,vocab)";

impl Distribution {
    /// Parses `uniform:0,V`, `normal:0,1`, `const:1`; a bound may name a
    /// size, whose value `size` gives.
    pub fn parse(text: &str, size: &dyn Fn(&str) -> Option<i64>) -> Result<Distribution, String> {
        let (kind, args) = text
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not a distribution: write {DISTRIBUTION_FORMS}"))?;
        let num = |s: &str| -> Result<f64, String> {
            let s = s.trim();
            match s {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => s.parse::<f64>().or_else(|_| {
                    size(s).map(|v| v as f64).ok_or_else(|| {
                        format!("`{s}` in `{text}` is neither a number nor a size of the kernel")
                    })
                }),
            }
        };
        let two = || -> Result<(f64, f64), String> {
            match args.split(',').collect::<Vec<_>>()[..] {
                [a, b] => Ok((num(a)?, num(b)?)),
                _ => Err(format!(
                    "`{text}`: `{kind}` takes two numbers, e.g. `{kind}:0,1`"
                )),
            }
        };
        let d = match kind.trim() {
            "uniform" => {
                let (lo, hi) = two()?;
                if lo >= hi || !lo.is_finite() || !hi.is_finite() {
                    return Err(format!("`{text}`: a uniform range needs finite LO < HI"));
                }
                Distribution::Uniform { lo, hi }
            }
            "normal" => {
                let (mean, std) = two()?;
                if std < 0.0 || !mean.is_finite() || !std.is_finite() {
                    return Err(format!(
                        "`{text}`: a normal distribution needs a finite mean and STD >= 0"
                    ));
                }
                Distribution::Normal { mean, std }
            }
            "const" => Distribution::Const(num(args)?),
            other => {
                return Err(format!(
                    "`{other}` is not a distribution: write {DISTRIBUTION_FORMS}"
                ))
            }
        };
        Ok(d)
    }

    /// Whether every value drawn fits dtype `t`: integer tensors need
    /// integer bounds within the dtype's range.
    pub fn check(&self, t: DType) -> Result<(), String> {
        if t.is_float() {
            return Ok(());
        }
        let (min, max) = int_range(t);
        let whole = |x: f64| x.fract() == 0.0 && x >= min as f64 && x <= max as f64;
        let ok = match *self {
            Distribution::Uniform { lo, hi } => whole(lo) && whole(hi - 1.0),
            Distribution::Normal { mean, .. } => whole(mean.round()),
            Distribution::Const(x) => whole(x),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "the tensor is {t}, which holds integers in {min}..={max}: the distribution must draw integers inside that range"
            ))
        }
    }

    /// `n` values of dtype `t`, floats rounded to it; integers of a normal
    /// distribution rounded and clamped into the dtype.
    pub fn draw(&self, rng: &mut Rng, t: DType, n: usize) -> Buffer {
        let value = |rng: &mut Rng| match *self {
            Distribution::Uniform { lo, hi } if !t.is_float() => {
                let span = (hi - lo) as u64;
                lo + (rng.next_u64() % span) as f64
            }
            Distribution::Uniform { lo, hi } => rng.uniform(lo, hi),
            Distribution::Normal { mean, std } => {
                // Box–Muller; 1 - unit() is in (0, 1], so the log is finite.
                let (u, v) = (1.0 - rng.unit(), rng.unit());
                mean + std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
            }
            Distribution::Const(x) => x,
        };
        let data = if t.is_float() {
            Data::F(
                (0..n)
                    .map(|_| crate::dtype::round_to(value(rng), t))
                    .collect(),
            )
        } else {
            let (min, max) = int_range(t);
            Data::I(
                (0..n)
                    .map(|_| (value(rng).round() as i64).clamp(min, max))
                    .collect(),
            )
        };
        Buffer { dtype: t, data }
    }
}

/// The stream of a chosen tensor: the seed mixed with its name (FNV-1a),
/// so it neither depends on nor disturbs the other tensors' values.
pub(super) fn stream_for(seed: u64, name: &str) -> Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut r = Rng(seed ^ h);
    r.next_u64();
    r
}

/// Maximum |got − want| / (1 + |want|) accepted per computed tensor:
/// one value for all, values by name, else [`super::tolerance`] by dtype,
/// widened for long float sums ([`Tolerances::with_sums`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tolerances {
    /// `--tolerance X`: for every tensor without its own.
    pub all: Option<f64>,
    /// `--tolerance NAME=X`.
    pub by_tensor: HashMap<String, f64>,
    /// Defaults widened by [`Tolerances::with_sums`], below the two above.
    pub sums: HashMap<String, f64>,
}

impl Tolerances {
    /// The tolerance of tensor `name` of dtype `t`.
    pub fn of(&self, name: &str, t: DType) -> f64 {
        self.by_tensor
            .get(name)
            .copied()
            .or(self.all)
            .or_else(|| self.sums.get(name).copied())
            .unwrap_or_else(|| super::tolerance(t))
    }

    /// The defaults of results that a float sum or product of `n` terms
    /// makes (a reduction, or a scan along `n`), widened at `sizes` to
    /// `n · u`, `u` the unit roundoff of the type it accumulates in: the
    /// bound of the kernel's own rounding whatever order it adds in (the
    /// interpreter adds in f64). Where that is below the dtype's default,
    /// the default stands. An f16 GEMM accumulating 4096 products in f32
    /// (2.4e-4) was 1.5e-4 from the interpreter on the H200, over the f32
    /// default of 1e-4.
    pub fn with_sums(mut self, k: &Kernel, sizes: &[i64]) -> Tolerances {
        for st in &k.stages {
            let Some(r) = st.reduce() else { continue };
            let float = r.body.dtype.is_float();
            // Plain sums and products, and scans of them.
            let summed = matches!(r.op(), Some(ReduceOp::Sum | ReduceOp::Prod));
            if !float || !summed {
                continue;
            }
            // Extents that grow with an output axis (triangular) at that
            // axis's last value.
            let last: Vec<i64> = st
                .axes
                .iter()
                .map(|a| a.extent.eval(sizes, &[]).unwrap_or(1).max(1) - 1)
                .collect();
            let n = r
                .axes
                .iter()
                .map(|a| a.extent.eval(sizes, &last).unwrap_or(1).max(1) as f64)
                .product::<f64>();
            let u = unit_roundoff(r.body.dtype);
            let t = k.tensor(st.output);
            let wide = n * u;
            if wide > super::tolerance(t.dtype) {
                self.sums.insert(t.name.clone(), wide);
            }
        }
        self
    }
}

/// Half the distance from 1 to the next float of type `t`.
fn unit_roundoff(t: DType) -> f64 {
    match t {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sum of K products in f32, a cumulative sum in f32 and a maximum:
    /// the sums' defaults widen to n·u where that passes 1e-4; a given
    /// tolerance still wins.
    #[test]
    fn long_float_sums_widen_their_default_tolerance() {
        let src = r#"
[kernel]
name = "k"
sizes = ["M", "K"]

[inputs]
A = { dtype = "f16", shape = ["M", "K"] }

[[stage]]
compute = "S[i] = sum(f32(A[i, k]) * 2.0, k)"
shape = ["M"]
reduce = { k = "K" }

[[stage]]
compute = "C[i, j] = cumsum(f32(A[i, j]), j)"
shape = ["M", "K"]

[[stage]]
compute = "X[i] = reduce_max(f32(A[i, k]), k)"
shape = ["M"]
reduce = { k = "K" }
"#;
        let k = crate::parse_kernel("k.toml", src).unwrap_or_else(|e| panic!("{e:?}"));
        let t = Tolerances::default().with_sums(&k, &[3, 4096]);
        let u = 2f64.powi(-24);
        assert_eq!(t.of("S", DType::F32), 4096.0 * u);
        assert_eq!(t.of("C", DType::F32), 4096.0 * u);
        assert_eq!(t.of("X", DType::F32), 1e-4);
        let short = Tolerances::default().with_sums(&k, &[3, 100]);
        assert_eq!(short.of("S", DType::F32), 1e-4);
        let given = Tolerances {
            all: Some(1e-6),
            ..Default::default()
        };
        assert_eq!(given.with_sums(&k, &[3, 4096]).of("S", DType::F32), 1e-6);
    }

    fn parse(s: &str) -> Result<Distribution, String> {
        Distribution::parse(s, &|n| (n == "vocab").then_some(50257))
    }

    #[test]
    fn forms_parse_and_mistakes_are_named() {
        assert_eq!(
            parse("uniform:0,vocab").unwrap(),
            Distribution::Uniform {
                lo: 0.0,
                hi: 50257.0
            }
        );
        assert_eq!(
            parse("normal:0,3").unwrap(),
            Distribution::Normal {
                mean: 0.0,
                std: 3.0
            }
        );
        assert_eq!(
            parse("const:-inf").unwrap(),
            Distribution::Const(f64::NEG_INFINITY)
        );
        assert!(parse("uniform:1,1").unwrap_err().contains("LO < HI"));
        assert!(parse("gauss:0,1")
            .unwrap_err()
            .contains("`gauss` is not a distribution"));
        assert!(parse("uniform:0,V").unwrap_err().contains("`V`"));
        assert!(parse("normal:0").unwrap_err().contains("two numbers"));
        assert!(parse("uniform:0,300").unwrap().check(DType::U8).is_err());
        assert!(parse("uniform:0,256").unwrap().check(DType::U8).is_ok());
        assert!(parse("uniform:0.5,2").unwrap().check(DType::I32).is_err());
    }

    #[test]
    fn integers_cover_the_whole_range_and_nothing_outside() {
        let mut r = Rng(5);
        let b = parse("uniform:0,256")
            .unwrap()
            .draw(&mut r, DType::U8, 20000);
        let Data::I(v) = &b.data else { panic!() };
        assert_eq!(*v.iter().min().unwrap(), 0);
        assert_eq!(*v.iter().max().unwrap(), 255);
    }

    #[test]
    fn normal_values_have_the_asked_moments() {
        let mut r = Rng(9);
        let b = parse("normal:3,2")
            .unwrap()
            .draw(&mut r, DType::F64, 100_000);
        let Data::F(v) = &b.data else { panic!() };
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!((mean - 3.0).abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "{var}");
    }
}
