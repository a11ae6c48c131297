//! `.npy` files for `rocmc run --input NAME=FILE.npy` and `--output DIR`,
//! through the npyz crate.
//!
//! Each kernel dtype has one numpy dtype (`f32` ↔ `<f4`, `f16` ↔ `<f2`,
//! `i8` ↔ `|i1`, `bool` ↔ `|b1`, …). numpy has no bfloat16 or 8-bit
//! floats: those tensors are read from and written as `<f4` (rounded to the
//! tensor's dtype when read). Files are C-ordered; either byte order is read.

use super::Tensor;
use crate::Error;
use npyz::{TypeChar, WriterBuilder};
use rocmc_ir::interp::{Buffer, Data};
use rocmc_ir::DType;
use std::path::Path;

/// The numpy type a tensor of dtype `t` is stored as: type character and
/// bytes per element.
fn numpy_type(t: DType) -> (TypeChar, u64) {
    match t {
        DType::Bool => (TypeChar::Bool, 1),
        DType::I8 => (TypeChar::Int, 1),
        DType::U8 => (TypeChar::Uint, 1),
        DType::I32 => (TypeChar::Int, 4),
        DType::U32 => (TypeChar::Uint, 4),
        DType::I64 => (TypeChar::Int, 8),
        DType::F16 => (TypeChar::Float, 2),
        DType::F64 => (TypeChar::Float, 8),
        // f32 itself, and the floats numpy lacks (bf16, f8 e4m3/e5m2).
        _ => (TypeChar::Float, 4),
    }
}

/// How people write a numpy type: `float32`, `int8`.
fn numpy_name(c: TypeChar, bytes: u64) -> String {
    match c {
        TypeChar::Bool => "bool".into(),
        TypeChar::Int => format!("int{}", bytes * 8),
        TypeChar::Uint => format!("uint{}", bytes * 8),
        TypeChar::Float => format!("float{}", bytes * 8),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Reads `path` as the values of kernel tensor `name` of dtype `t`: its
/// shape (checked by the caller against the kernel's) and its values.
pub fn read(path: &Path, name: &str, t: DType) -> Result<(Vec<i64>, Buffer), Error> {
    let shown = path.display();
    let bad = |m: String| Error::Usage(format!("--input {name}={shown}: {m}"));
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read the file ({e})")))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| bad(format!("not a .npy file ({e})")))?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(bad(
            "a structured array; rocmc reads plain arrays of numbers".into(),
        ));
    };
    if npy.order() == npyz::Order::Fortran && npy.shape().len() > 1 {
        return Err(bad(
            "stored in Fortran (column-major) order; save `np.ascontiguousarray(x)` instead".into(),
        ));
    }
    let (want_c, want_n) = numpy_type(t);
    let (c, n) = (ts.type_char(), ts.size_field());
    if (c, n) != (want_c, want_n) {
        let numpy_lacks = matches!(t, DType::BF16) || t.is_f8();
        return Err(bad(format!(
            "the file holds {}, the kernel's `{name}` is {t}: save it as {}{}",
            numpy_name(c, n),
            numpy_name(want_c, want_n),
            if numpy_lacks {
                " (numpy has no such type; rocmc rounds float32 values to it)"
            } else {
                ""
            }
        )));
    }
    let shape: Vec<i64> = npy.shape().iter().map(|d| *d as i64).collect();
    let io = |e: std::io::Error| bad(format!("cannot read its values ({e})"));
    let data = match (c, n) {
        (TypeChar::Float, 2) => Data::F(
            npy.into_vec::<npyz::half::f16>()
                .map_err(io)?
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        (TypeChar::Float, 4) => Data::F(
            npy.into_vec::<f32>()
                .map_err(io)?
                .into_iter()
                .map(|x| rocmc_ir::front::round_to(f64::from(x), t))
                .collect(),
        ),
        (TypeChar::Float, _) => Data::F(npy.into_vec::<f64>().map_err(io)?),
        (TypeChar::Bool, _) => Data::I(
            npy.into_vec::<bool>()
                .map_err(io)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        (TypeChar::Int, 1) => Data::I(ints(npy.into_vec::<i8>().map_err(io)?)),
        (TypeChar::Uint, 1) => Data::I(ints(npy.into_vec::<u8>().map_err(io)?)),
        (TypeChar::Int, 4) => Data::I(ints(npy.into_vec::<i32>().map_err(io)?)),
        (TypeChar::Uint, 4) => Data::I(ints(npy.into_vec::<u32>().map_err(io)?)),
        _ => Data::I(npy.into_vec::<i64>().map_err(io)?),
    };
    Ok((shape, Buffer { dtype: t, data }))
}

fn ints<T: Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

/// The bytes of a `.npy` file holding `t` (little-endian, C order).
pub fn encode(t: &Tensor) -> Vec<u8> {
    let shape: Vec<u64> = t.shape.iter().map(|d| (*d).max(0) as u64).collect();
    let floats = || -> Vec<f64> {
        match &t.values.data {
            Data::F(v) => v.clone(),
            Data::I(v) => v.iter().map(|x| *x as f64).collect(),
        }
    };
    let ints = || -> Vec<i64> {
        match &t.values.data {
            Data::I(v) => v.clone(),
            Data::F(v) => v.iter().map(|x| *x as i64).collect(),
        }
    };
    // The values all fit their numpy type (the interpreter keeps them in range).
    match t.values.dtype {
        DType::Bool => npy_of(&shape, ints().into_iter().map(|x| x != 0)),
        DType::I8 => npy_of(&shape, ints().into_iter().map(|x| x as i8)),
        DType::U8 => npy_of(&shape, ints().into_iter().map(|x| x as u8)),
        DType::I32 => npy_of(&shape, ints().into_iter().map(|x| x as i32)),
        DType::U32 => npy_of(&shape, ints().into_iter().map(|x| x as u32)),
        DType::I64 => npy_of(&shape, ints()),
        DType::F64 => npy_of(&shape, floats()),
        DType::F16 => npy_of(&shape, floats().into_iter().map(npyz::half::f16::from_f64)),
        _ => npy_of(&shape, floats().into_iter().map(|x| x as f32)),
    }
}

/// A `.npy` file of `values` with numpy's type for `T`.
fn npy_of<T: npyz::AutoSerialize>(shape: &[u64], values: impl IntoIterator<Item = T>) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let mut w = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .expect("a .npy header into memory");
    w.extend(values).expect("values into memory");
    w.finish().expect("a .npy file into memory");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        for (t, data) in [
            (
                DType::F32,
                Data::F(vec![1.5, -2.0, 0.25, 7.0, f64::INFINITY, -0.0]),
            ),
            (
                DType::F16,
                Data::F(vec![1.5, -2.0, 0.25, 7.0, 65504.0, -0.0]),
            ),
            (
                DType::BF16,
                Data::F(vec![1.5, -2.0, 0.25, 7.0, 256.0, -0.0]),
            ),
            (DType::F64, Data::F(vec![1.5, -2.0, 0.1, 7.0, 1e300, -0.0])),
            (DType::I8, Data::I(vec![-128, 127, 0, 1, 2, 3])),
            (DType::U8, Data::I(vec![0, 255, 1, 2, 3, 4])),
            (DType::I32, Data::I(vec![i32::MIN as i64, 5, 0, 1, 2, 3])),
            (DType::U32, Data::I(vec![u32::MAX as i64, 5, 0, 1, 2, 3])),
            (DType::I64, Data::I(vec![i64::MIN, 5, 0, 1, 2, 3])),
            (DType::Bool, Data::I(vec![1, 0, 0, 1, 1, 0])),
        ] {
            let tensor = Tensor {
                name: "X".into(),
                shape: vec![2, 3],
                values: Buffer { dtype: t, data },
            };
            let p = dir.path().join(format!("{t}.npy"));
            std::fs::write(&p, encode(&tensor)).unwrap();
            let (shape, b) = read(&p, "X", t).unwrap();
            assert_eq!(shape, [2, 3], "{t}");
            assert_eq!(b, tensor.values, "{t}");
        }
    }

    #[test]
    fn a_wrong_dtype_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.npy");
        let t = Tensor {
            name: "X".into(),
            shape: vec![4],
            values: Buffer {
                dtype: DType::F64,
                data: Data::F(vec![0.0; 4]),
            },
        };
        std::fs::write(&p, encode(&t)).unwrap();
        let e = read(&p, "X", DType::F32).unwrap_err().to_string();
        assert!(
            e.contains("the file holds float64, the kernel's `X` is f32: save it as float32"),
            "{e}"
        );
        let e = read(&p, "X", DType::BF16).unwrap_err().to_string();
        assert!(e.contains("numpy has no such type"), "{e}");
        std::fs::write(&p, b"not numpy").unwrap();
        let e = read(&p, "X", DType::F32).unwrap_err().to_string();
        assert!(e.contains("not a .npy file"), "{e}");
    }
}
