//! Conversions between dtypes, including the 8-bit float formats.

use super::*;
use crate::CodegenError;
use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};
use rocmc_ir::DType;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// An i8 or u8 as f16 by its bits: the byte (offset by 128 if signed,
    /// so 0..=255) in the mantissa of 1024 (`0x6400`) is 1024 plus it,
    /// exactly; subtracting 1024 (1152) leaves the value, exactly. Integer
    /// and f16 arithmetic only, which pairs of lanes share.
    fn byte_to_half(&self, from: DType, x: IntValue<'ctx>) -> R<BasicValueEnum<'ctx>> {
        let (b, i8t, i16t) = (&self.b, self.cx.i8_type(), self.cx.i16_type());
        let (x, bias) = match from {
            DType::I8 => (
                b.build_xor(x, i8t.const_int(0x80, false), "")
                    .map_err(llvm_err)?,
                1152.0,
            ),
            _ => (x, 1024.0),
        };
        let wide = b.build_int_z_extend(x, i16t, "").map_err(llvm_err)?;
        let bits = b
            .build_or(wide, i16t.const_int(0x6400, false), "")
            .map_err(llvm_err)?;
        let h = self.cx.f16_type();
        let shifted = b
            .build_bit_cast(bits, h, "")
            .map_err(llvm_err)?
            .into_float_value();
        Ok(b.build_float_sub(shifted, h.const_float(bias), "")
            .map_err(llvm_err)?
            .into())
    }

    pub(super) fn cast(
        &self,
        from: DType,
        to: DType,
        v: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        if to.is_f8() {
            return Err(CodegenError::Llvm(format!(
                "a conversion to {to} (the front end refuses them; a rocmc bug)"
            )));
        }
        if let Some(f) = from.f8_format() {
            // Exact in f32, then as from f32.
            let x = self.f8_decode(f, v.into_int_value())?;
            return self.cast(DType::F32, to, x.into());
        }
        if matches!(from, DType::I8 | DType::U8)
            && to == DType::F16
            && self.be.byte_to_half_by_bits()
        {
            return self.byte_to_half(from, v.into_int_value());
        }
        let b = &self.b;
        let lt = ty(self.cx, to);
        Ok(match (from.is_float(), to.is_float()) {
            // f16 ↔ bf16: neither holds the other, so through f32 (exact), then one rounding.
            (true, true) if from != to && from.size() == 2 && to.size() == 2 => {
                let wide = b
                    .build_float_ext(v.into_float_value(), self.cx.f32_type(), "")
                    .map_err(llvm_err)?;
                b.build_float_trunc(wide, lt.into_float_type(), "")
                    .map_err(llvm_err)?
                    .into()
            }
            (true, true) => b
                .build_float_cast(v.into_float_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (false, true) if from == DType::Bool || !from.is_signed() => b
                .build_unsigned_int_to_float(v.into_int_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (false, true) => b
                .build_signed_int_to_float(v.into_int_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (true, false) if to == DType::Bool => {
                let z = v.into_float_value().get_type().const_zero();
                b.build_float_compare(FloatPredicate::UNE, v.into_float_value(), z, "")
                    .map_err(llvm_err)?
                    .into()
            }
            // Saturating conversion matches the interpreter and never yields poison.
            (true, false) => self.call(
                if to.is_signed() {
                    "llvm.fptosi.sat"
                } else {
                    "llvm.fptoui.sat"
                },
                &[lt, v.get_type()],
                &[v.into()],
            )?,
            (false, false) if to == DType::Bool => {
                let z = v.into_int_value().get_type().const_zero();
                b.build_int_compare(IntPredicate::NE, v.into_int_value(), z, "")
                    .map_err(llvm_err)?
                    .into()
            }
            (false, false) => {
                let (x, it) = (v.into_int_value(), lt.into_int_type());
                let (fw, tw) = (x.get_type().get_bit_width(), it.get_bit_width());
                if fw == tw {
                    x.into()
                } else if fw > tw {
                    b.build_int_truncate(x, it, "").map_err(llvm_err)?.into()
                } else if from.is_signed() {
                    b.build_int_s_extend(x, it, "").map_err(llvm_err)?.into()
                } else {
                    b.build_int_z_extend(x, it, "").map_err(llvm_err)?.into()
                }
            }
        })
    }

    /// The f32 value of an 8-bit float's bits `b` (an i8), by the format's
    /// definition: sign, exponent and mantissa moved into an f32's fields,
    /// subnormals scaled from the integer mantissa, and the format's NaN
    /// and infinity encodings. Every target and the CPU run the same
    /// integer code, so it means what [`rocmc_ir::dtype::F8Format::decode`]
    /// means.
    pub(super) fn f8_decode(
        &self,
        f: rocmc_ir::dtype::F8Format,
        b: IntValue<'ctx>,
    ) -> R<FloatValue<'ctx>> {
        use rocmc_ir::dtype::F8Kind;
        if self.be.f8_decode_by_table() {
            return self.f8_table_decode(f, b);
        }
        let (bd, i32t, f32t) = (&self.b, self.cx.i32_type(), self.cx.f32_type());
        let c = |v: i64| i32t.const_int(v as u64, true);
        let x = bd.build_int_z_extend(b, i32t, "").map_err(llvm_err)?;
        let (eb, mb) = (i64::from(f.exp), i64::from(f.man));
        let e = bd
            .build_and(
                bd.build_right_shift(x, c(mb), false, "")
                    .map_err(llvm_err)?,
                c((1 << eb) - 1),
                "",
            )
            .map_err(llvm_err)?;
        let m = bd.build_and(x, c((1 << mb) - 1), "").map_err(llvm_err)?;
        // Normal: exponent rebiased into f32's, mantissa at its top.
        let fe = bd
            .build_int_add(e, c(127 - i64::from(f.bias)), "")
            .map_err(llvm_err)?;
        let bits = bd
            .build_or(
                bd.build_left_shift(fe, c(23), "").map_err(llvm_err)?,
                bd.build_left_shift(m, c(23 - mb), "").map_err(llvm_err)?,
                "",
            )
            .map_err(llvm_err)?;
        let normal = bd
            .build_bit_cast(bits, f32t, "")
            .map_err(llvm_err)?
            .into_float_value();
        // Subnormal: the mantissa times the smallest step.
        let sub = bd
            .build_float_mul(
                bd.build_unsigned_int_to_float(m, f32t, "")
                    .map_err(llvm_err)?,
                f32t.const_float(2f64.powi(1 - f.bias - f.man as i32)),
                "",
            )
            .map_err(llvm_err)?;
        let zero_e = bd
            .build_int_compare(IntPredicate::EQ, e, c(0), "")
            .map_err(llvm_err)?;
        let mag = bd
            .build_select(zero_e, sub, normal, "")
            .map_err(llvm_err)?
            .into_float_value();
        let neg = bd
            .build_int_compare(IntPredicate::UGE, x, c(0x80), "")
            .map_err(llvm_err)?;
        let signed = bd
            .build_select(neg, bd.build_float_neg(mag, "").map_err(llvm_err)?, mag, "")
            .map_err(llvm_err)?
            .into_float_value();
        let top = c((1 << eb) - 1);
        let (special, value) = match f.kind {
            F8Kind::Fnuz => (
                bd.build_int_compare(IntPredicate::EQ, x, c(0x80), "")
                    .map_err(llvm_err)?,
                f32t.const_float(f64::NAN),
            ),
            F8Kind::Fn => (
                bd.build_int_compare(
                    IntPredicate::EQ,
                    bd.build_and(x, c(0x7f), "").map_err(llvm_err)?,
                    c(0x7f),
                    "",
                )
                .map_err(llvm_err)?,
                f32t.const_float(f64::NAN),
            ),
            F8Kind::Ieee => {
                let top_e = bd
                    .build_int_compare(IntPredicate::EQ, e, top, "")
                    .map_err(llvm_err)?;
                let inf = bd
                    .build_select(
                        neg,
                        f32t.const_float(f64::NEG_INFINITY),
                        f32t.const_float(f64::INFINITY),
                        "",
                    )
                    .map_err(llvm_err)?
                    .into_float_value();
                let no_m = bd
                    .build_int_compare(IntPredicate::EQ, m, c(0), "")
                    .map_err(llvm_err)?;
                let v = bd
                    .build_select(no_m, inf, f32t.const_float(f64::NAN), "")
                    .map_err(llvm_err)?
                    .into_float_value();
                (top_e, v)
            }
        };
        Ok(bd
            .build_select(special, value, signed, "")
            .map_err(llvm_err)?
            .into_float_value())
    }

    /// [`Self::f8_decode`] as a load from a 256-entry table that
    /// [`rocmc_ir::dtype::F8Format::decode`] itself fills: on the CPU the
    /// integer code's float selects each split a block in x86's
    /// instruction selection, which made the emulated 8-bit `wgmma` tiles
    /// (thousands of decodes in one block) take minutes to compile.
    fn f8_table_decode(
        &self,
        f: rocmc_ir::dtype::F8Format,
        b: IntValue<'ctx>,
    ) -> R<FloatValue<'ctx>> {
        let f32t = self.cx.f32_type();
        let name = format!("rocmc_f8_e{}m{}_{:?}", f.exp, f.man, f.kind);
        let table = match self.m.get_global(&name) {
            Some(g) => g,
            None => {
                let values: Vec<_> = (0..=255u8)
                    .map(|x| f32t.const_float(f64::from(f.decode(x) as f32)))
                    .collect();
                let g = self.m.add_global(f32t.array_type(256), None, &name);
                g.set_initializer(&f32t.const_array(&values));
                g.set_constant(true);
                g.set_linkage(inkwell::module::Linkage::Internal);
                g
            }
        };
        let i = self
            .b
            .build_int_z_extend(b, self.cx.i64_type(), "")
            .map_err(llvm_err)?;
        // The index is a byte: always inside the 256 entries.
        let p = unsafe {
            self.b
                .build_in_bounds_gep(f32t, table.as_pointer_value(), &[i], "")
                .map_err(llvm_err)?
        };
        Ok(self
            .b
            .build_load(f32t, p, "")
            .map_err(llvm_err)?
            .into_float_value())
    }
}
