//! Element types of tensors, parameters and expressions.

use std::fmt;

/// The element type of a tensor or of an expression's value.
///
/// Integers wrap on overflow (two's complement at their width), floats follow
/// IEEE 754 at their width with round-to-nearest-even; `bool` is the result
/// of comparisons and is stored as one byte (0 or 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    U8,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    F8E4M3FN,
    F8E5M2,
    F8E4M3FNUZ,
    F8E5M2FNUZ,
}

impl DType {
    pub const ALL: [DType; 14] = [
        DType::Bool,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E4M3FN,
        DType::F8E5M2,
        DType::F8E4M3FNUZ,
        DType::F8E5M2FNUZ,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The dtype other languages' names for it mean (`float32`, `half`,
    /// `int`), for "did you mean" hints.
    pub fn from_synonym(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "float" | "float32" | "single" | "fp32" => DType::F32,
            "double" | "float64" | "fp64" => DType::F64,
            "half" | "float16" | "fp16" => DType::F16,
            "bfloat16" | "bfloat" => DType::BF16,
            "int" | "int32" => DType::I32,
            "long" | "int64" => DType::I64,
            "uint" | "uint32" | "unsigned" => DType::U32,
            "int8" | "char" => DType::I8,
            "uint8" | "byte" => DType::U8,
            "fp8" | "float8" | "e4m3" | "fp8e4m3" => DType::F8E4M3FN,
            "bf8" | "e5m2" | "fp8e5m2" => DType::F8E5M2,
            "boolean" => DType::Bool,
            other => return DType::parse(other),
        })
    }

    /// Size in bytes of one element in memory.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F8E4M3FN | DType::F8E5M2 | DType::F8E4M3FNUZ | DType::F8E5M2FNUZ => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64) || self.is_f8()
    }

    /// One of the 8-bit float storage types ([`F8Format`]).
    pub fn is_f8(self) -> bool {
        self.f8_format().is_some()
    }

    /// The layout of an 8-bit float type.
    pub fn f8_format(self) -> Option<F8Format> {
        let (exp, bias, kind) = match self {
            DType::F8E4M3FN => (4, 7, F8Kind::Fn),
            DType::F8E5M2 => (5, 15, F8Kind::Ieee),
            DType::F8E4M3FNUZ => (4, 8, F8Kind::Fnuz),
            DType::F8E5M2FNUZ => (5, 16, F8Kind::Fnuz),
            _ => return None,
        };
        Some(F8Format {
            exp,
            man: 7 - exp,
            bias,
            kind,
        })
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::U8 | DType::I32 | DType::U32 | DType::I64
        )
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }

    /// The smallest and largest value of an integer type (bool: 0 and 1);
    /// `None` for floats. Float → integer conversions saturate to this range.
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::Bool => (0, 1),
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::U8 => (0, u8::MAX.into()),
            DType::I32 => (i32::MIN.into(), i32::MAX.into()),
            DType::U32 => (0, u32::MAX.into()),
            DType::I64 => (i64::MIN, i64::MAX),
            _ => return None,
        })
    }

    /// Whether every value of `from` converts to `self` exactly (the
    /// same number, NaN to NaN, infinity to infinity), so that a copy
    /// converted on the way (`cache_read(..., dtype=)`) means what the
    /// tensor holds: 8-bit integers into any float of 8 or more
    /// significand bits, 8-bit floats into f16, bf16 or wider, a float
    /// into a wider one, an integer into a wider integer of its range.
    pub fn holds_exactly(self, from: DType) -> bool {
        use DType::*;
        if self == from {
            return true;
        }
        match (from, self) {
            (Bool, _) | (_, Bool) => false,
            (I8 | U8, F16 | BF16 | F32 | F64) => true,
            (I32 | U32, F64) => true,
            (I8, I32 | I64) | (U8, I32 | U32 | I64) | (I32 | U32, I64) => true,
            (f, F16 | BF16 | F32 | F64) if f.is_f8() => true,
            (F16 | BF16, F32 | F64) | (F32, F64) => true,
            _ => false,
        }
    }

    /// Width in bits of the value (1 for bool).
    pub fn bits(self) -> u32 {
        match self {
            DType::Bool => 1,
            other => other.size() as u32 * 8,
        }
    }
}

/// `x` rounded to f32 *to odd*: truncated toward zero, with the last bit
/// set when anything was cut off. Rounding that to a format with at least
/// two fewer bits (f16, bf16) gives the correctly rounded result of `x`,
/// which rounding to nearest twice does not (ties would be broken twice).
pub fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    if !r.is_finite() || f64::from(r) == x {
        return r;
    }
    let mut bits = r.to_bits();
    // Toward zero first: round-to-nearest may have gone up in magnitude.
    if f64::from(r).abs() > x.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `x` correctly rounded to f16 (the `half` crate's f64 conversion ignores
/// the low 32 bits of the significand and so breaks some ties wrongly).
pub fn f64_to_f16(x: f64) -> half::f16 {
    half::f16::from_f32(f64_to_f32_odd(x))
}

/// `x` correctly rounded to bf16 (see [`f64_to_f16`]).
pub fn f64_to_bf16(x: f64) -> half::bf16 {
    half::bf16::from_f32(f64_to_f32_odd(x))
}

/// How an 8-bit float spends its special encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F8Kind {
    /// OCP E4M3: no infinity; NaN is every bit of exponent and mantissa set.
    Fn,
    /// OCP E5M2, as IEEE 754: the top exponent holds infinity and NaN.
    Ieee,
    /// AMD/Graphcore FNUZ: 0x80 is the one NaN; no infinity, no -0.
    Fnuz,
}

/// The layout of an 8-bit float: sign, `exp` exponent bits, `man`
/// mantissa bits, the exponent `bias`, and how specials are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F8Format {
    pub exp: u32,
    pub man: u32,
    pub bias: i32,
    pub kind: F8Kind,
}

impl F8Format {
    /// The value of the byte `b` (exact: every 8-bit float is an f32).
    pub fn decode(self, b: u8) -> f64 {
        let e = i32::from(b >> self.man) & ((1 << self.exp) - 1);
        let f = i32::from(b) & ((1 << self.man) - 1);
        let top = (1 << self.exp) - 1;
        match self.kind {
            F8Kind::Fnuz if b == 0x80 => return f64::NAN,
            F8Kind::Fn if e == top && f == (1 << self.man) - 1 => return f64::NAN,
            F8Kind::Ieee if e == top && f == 0 => {
                return if b & 0x80 != 0 {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            F8Kind::Ieee if e == top => return f64::NAN,
            _ => {}
        }
        let man = f64::from(f) / f64::from(1 << self.man);
        let mag = if e == 0 {
            man * 2f64.powi(1 - self.bias)
        } else {
            (1.0 + man) * 2f64.powi(e - self.bias)
        };
        if b & 0x80 != 0 {
            -mag
        } else {
            mag
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        let top = (1 << self.exp) - 1;
        let ulp = 2f64.powi(-(self.man as i32));
        match self.kind {
            // The top exponent with every mantissa bit but the NaN's.
            F8Kind::Fn => (2.0 - 2.0 * ulp) * 2f64.powi(top - self.bias),
            F8Kind::Ieee => (2.0 - ulp) * 2f64.powi(top - 1 - self.bias),
            F8Kind::Fnuz => (2.0 - ulp) * 2f64.powi(top - self.bias),
        }
    }

    /// `x` rounded to the nearest value (ties to an even encoding),
    /// saturating to the largest finite value (as the hardware's
    /// conversions with saturation do); NaN to NaN.
    pub fn encode(self, x: f64) -> u8 {
        if x.is_nan() {
            return match self.kind {
                F8Kind::Fnuz => 0x80,
                F8Kind::Fn | F8Kind::Ieee => 0x7f,
            };
        }
        let a = x.abs().min(self.max());
        let step = |e: i32| 2f64.powi(e - self.man as i32);
        let b = if a < 2f64.powi(1 - self.bias) {
            // Subnormal: a multiple of the smallest step (rounding up to
            // the first normal value gives its encoding too).
            (a / step(1 - self.bias)).round_ties_even() as u32
        } else {
            let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
            let f = ((a - 2f64.powi(e)) / step(e)).round_ties_even() as u32;
            (((e + self.bias) as u32) << self.man) + f
        } as u8;
        match self.kind {
            F8Kind::Fnuz if b == 0 => 0,
            _ if x.is_sign_negative() => b | 0x80,
            _ => b,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds a constant to what the dtype can hold.
pub fn round_to(v: f64, t: DType) -> f64 {
    match t {
        DType::F32 => v as f32 as f64,
        DType::F16 => f64_to_f16(v).to_f64(),
        DType::BF16 => f64_to_bf16(v).to_f64(),
        t => match t.f8_format() {
            Some(f) => f.decode(f.encode(v)),
            None => v,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_16_bits_is_correct_at_sticky_ties() {
        // Halfway between two bf16 values in the top bits, with a bit set far
        // below (beyond f32): must round up, not to even.
        let x = f64::from_bits(0x3FF0_1000_0000_0001); // 1 + 2^-8 + 2^-52
        assert_eq!(f64_to_bf16(x).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(f64_to_bf16(1.0 + 2f64.powi(-8)).to_f64(), 1.0); // an exact tie: to even
        let y = 1.0 + 2f64.powi(-11) + 2f64.powi(-50);
        assert_eq!(f64_to_f16(y).to_f64(), 1.0 + 2f64.powi(-10));
        for v in [0.1, -3.7e-5, 65504.0, 1e10, f64::INFINITY, -0.0] {
            assert_eq!(
                f64_to_f16(v).to_f64(),
                half::f16::from_f32(v as f32).to_f64().max(f64::MIN),
                "{v}"
            );
        }
        assert!(f64_to_bf16(f64::NAN).is_nan());
    }

    #[test]
    fn eight_bit_floats_decode_and_round() {
        let e4 = DType::F8E4M3FN.f8_format().unwrap();
        let e5 = DType::F8E5M2.f8_format().unwrap();
        let e4z = DType::F8E4M3FNUZ.f8_format().unwrap();
        let e5z = DType::F8E5M2FNUZ.f8_format().unwrap();
        assert_eq!(
            (e4.max(), e5.max(), e4z.max(), e5z.max()),
            (448.0, 57344.0, 240.0, 57344.0)
        );
        // The same bits mean half as much in FNUZ (bias one higher).
        assert_eq!(e4.decode(0x38), 1.0);
        assert_eq!(e4z.decode(0x38), 0.5);
        assert_eq!(e4.decode(0x01), 2f64.powi(-9));
        assert_eq!(e5.decode(0x01), 2f64.powi(-16));
        assert!(e4.decode(0x7f).is_nan() && e4.decode(0xff).is_nan());
        assert_eq!(e4.decode(0x7e), 448.0);
        assert_eq!(e5.decode(0x7c), f64::INFINITY);
        assert!(e5.decode(0x7d).is_nan());
        assert!(e4z.decode(0x80).is_nan() && e5z.decode(0x80).is_nan());
        assert_eq!(e4.decode(0x80), 0.0);
        for f in [e4, e5, e4z, e5z] {
            for b in 0..=255u8 {
                let v = f.decode(b);
                if v.is_finite() && !(v == 0.0 && b == 0x80) {
                    assert_eq!(f.encode(v), b, "{f:?} {b:#x}");
                }
            }
            // Halfway between 1 and the next value: to the even encoding.
            let one = f.encode(1.0);
            let next = f.decode(one + 1);
            assert_eq!(f.encode((1.0 + next) / 2.0), one);
            assert_eq!(f.encode(1e9), f.encode(f.max()));
            assert_eq!(f.decode(f.encode(-1e9)), -f.max());
        }
        assert_eq!(e4.encode(0.3), 0x2a); // 0.3 -> 0.3125 (1.25 x 2^-2)
        assert_eq!(e4z.encode(-0.0), 0);
    }

    /// `holds_exactly` agrees with the conversions themselves, both ways,
    /// for every value of each 8- and 16-bit type into every float type.
    #[test]
    fn exact_conversions_are_the_ones_that_keep_every_value() {
        let values = |t: DType| -> Vec<f64> {
            match t {
                DType::I8 => (-128..=127).map(f64::from).collect(),
                DType::U8 => (0..=255).map(f64::from).collect(),
                DType::F16 => (0..=u16::MAX)
                    .map(|b| half::f16::from_bits(b).to_f64())
                    .collect(),
                DType::BF16 => (0..=u16::MAX)
                    .map(|b| half::bf16::from_bits(b).to_f64())
                    .collect(),
                t => (0..=255u8)
                    .map(|b| t.f8_format().unwrap().decode(b))
                    .collect(),
            }
        };
        let small = DType::ALL
            .into_iter()
            .filter(|t| matches!(t, DType::I8 | DType::U8 | DType::F16 | DType::BF16) || t.is_f8());
        for from in small {
            // (Into itself trivially; `round_to` saturates infinities.)
            for to in DType::ALL
                .into_iter()
                .filter(|t| t.is_float() && *t != from)
            {
                let keeps = values(from).iter().all(|&v| {
                    let r = round_to(v, to);
                    r == v || (r.is_nan() && v.is_nan())
                });
                assert_eq!(to.holds_exactly(from), keeps, "{from} into {to}");
            }
        }
        assert!(DType::I32.holds_exactly(DType::I8) && !DType::I8.holds_exactly(DType::I32));
        assert!(!DType::F32.holds_exactly(DType::I32) && DType::F64.holds_exactly(DType::I32));
        assert!(!DType::F32.holds_exactly(DType::Bool));
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("float"), None);
    }
}
