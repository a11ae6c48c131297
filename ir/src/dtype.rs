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

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("float"), None);
    }
}
