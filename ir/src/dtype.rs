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
}

impl DType {
    pub const ALL: [DType; 10] = [
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
            "boolean" => DType::Bool,
            other => return DType::parse(other),
        })
    }

    /// Size in bytes of one element in memory.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
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

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("float"), None);
    }
}
