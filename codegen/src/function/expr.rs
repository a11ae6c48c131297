//! Expressions: loads, constants, operators (with fused multiply-adds
//! where allowed and safe integer division), math functions.

use super::*;
use crate::CodegenError;
use inkwell::values::{BasicValue, BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};
use rocmc_ir::{BinOp, DType, Expr, ExprKind, MathFn, UnaryOp};

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    pub(super) fn to_mem(&self, d: DType, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        if d == DType::Bool {
            return Ok(self
                .b
                .build_int_z_extend(v.into_int_value(), self.cx.i8_type(), "")
                .map_err(llvm_err)?
                .into());
        }
        Ok(v)
    }

    pub(crate) fn expr(&self, e: &Expr) -> R<BasicValueEnum<'ctx>> {
        let t = e.dtype;
        let lt = ty(self.cx, t);
        let b = &self.b;
        Ok(match &e.kind {
            ExprKind::Int(v) => lt
                .into_int_type()
                .const_int(*v as u64, t.is_signed())
                .into(),
            ExprKind::Float(v) => match e.dtype.f8_format() {
                Some(f) => self
                    .cx
                    .i8_type()
                    .const_int(u64::from(f.encode(*v)), false)
                    .into(),
                None => lt.into_float_type().const_float(*v).into(),
            },
            ExprKind::Param(p) => self.params[p.0 as usize],
            ExprKind::Reduced | ExprKind::Operand { .. } => {
                return Err(CodegenError::Llvm(
                    "a reduction result outside its stage (a rocmc bug)".into(),
                ))
            }
            ExprKind::Shared { shared, index } => {
                let p = self.shared_ptr(*shared, index)?;
                b.build_load(lt, p, "").map_err(llvm_err)?
            }
            ExprKind::Local { local, index } => {
                let p = self.local_ptr(*local, index)?;
                b.build_load(lt, p, "").map_err(llvm_err)?
            }
            ExprKind::Index(i) => self.index(i)?.into(),
            ExprKind::Gather { tensor, indices } => self.gather(*tensor, indices, t)?,
            ExprKind::Load { tensor, indices } => {
                let p = self.address(*tensor, indices)?;
                let v = self.load_element(p, t)?;
                let align = self.access_alignment(*tensor, indices, t);
                if align > t.size() as u32 {
                    if let Some(i) = v.as_instruction_value() {
                        i.set_alignment(align).map_err(llvm_err)?;
                    }
                }
                v
            }
            ExprKind::Unary(UnaryOp::Neg, a) => {
                let a = self.expr(a)?;
                if t.is_float() {
                    b.build_float_neg(a.into_float_value(), "")
                        .map_err(llvm_err)?
                        .into()
                } else {
                    b.build_int_neg(a.into_int_value(), "")
                        .map_err(llvm_err)?
                        .into()
                }
            }
            ExprKind::Unary(UnaryOp::Not, a) => b
                .build_not(self.expr(a)?.into_int_value(), "")
                .map_err(llvm_err)?
                .into(),
            ExprKind::Cast(a) => {
                let v = match gelu_rounded_to_half(t, a) {
                    Some(x) => {
                        let x = self.expr(x)?.into_float_value();
                        self.gelu_for_half(x)?.into()
                    }
                    None => self.expr(a)?,
                };
                self.cast(a.dtype, t, v)?
            }
            ExprKind::Bitcast(a) => {
                let v = self.expr(a)?;
                b.build_bit_cast(v, lt, "").map_err(llvm_err)?
            }
            ExprKind::Select(c, x, y) => {
                let c = self.expr(c)?.into_int_value();
                b.build_select(c, self.expr(x)?, self.expr(y)?, "")
                    .map_err(llvm_err)?
            }
            ExprKind::Binary(op, x, y) => match self.fused(*op, t, x, y)? {
                Some(v) => v,
                None => self.binary(*op, x.dtype, self.expr(x)?, self.expr(y)?)?,
            },
            ExprKind::Call(f, args) => {
                let xs = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                self.math(*f, t, &xs)?
            }
        })
    }

    /// `a * b + c` and `a * b - c` (either operand order) as
    /// `llvm.fmuladd` when contraction is on, as clang emits for
    /// `-ffp-contract=on`: the multiply and the add stay one operation, so
    /// the SLP vectorizer cannot pair the multiplies into packed ones and
    /// leave the adds unfused.
    pub(super) fn fused(
        &self,
        op: BinOp,
        t: DType,
        x: &Expr,
        y: &Expr,
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        if !self.contract || !matches!(t, DType::F32 | DType::F64 | DType::F16) {
            return Ok(None);
        }
        fn product(e: &Expr) -> Option<(&Expr, &Expr)> {
            match &e.kind {
                ExprKind::Binary(BinOp::Mul, a, b) => Some((a, b)),
                _ => None,
            }
        }
        // (a, b, c, negate c, negate a): the result is (±a)·b + (±c).
        let (a, b, c, neg_c, neg_a) = match (op, product(x), product(y)) {
            (BinOp::Add, Some((a, b)), _) => (a, b, y, false, false),
            (BinOp::Add, None, Some((a, b))) => (a, b, x, false, false),
            (BinOp::Sub, Some((a, b)), _) => (a, b, y, true, false),
            (BinOp::Sub, None, Some((a, b))) => (a, b, x, false, true),
            _ => return Ok(None),
        };
        let bld = &self.b;
        let neg = |v: BasicValueEnum<'ctx>, yes: bool| -> R<BasicValueEnum<'ctx>> {
            Ok(if yes {
                bld.build_float_neg(v.into_float_value(), "")
                    .map_err(llvm_err)?
                    .into()
            } else {
                v
            })
        };
        let a = neg(self.expr(a)?, neg_a)?;
        let b = self.expr(b)?;
        let c = neg(self.expr(c)?, neg_c)?;
        let lt = ty(self.cx, t);
        self.call("llvm.fmuladd", &[lt], &[a.into(), b.into(), c.into()])
            .map(Some)
    }

    pub(super) fn binary(
        &self,
        op: BinOp,
        t: DType,
        x: BasicValueEnum<'ctx>,
        y: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let b = &self.b;
        let lt = ty(self.cx, t);
        if t.is_float() {
            let (x, y) = (x.into_float_value(), y.into_float_value());
            let cmp = |p| -> R<BasicValueEnum<'ctx>> {
                Ok(b.build_float_compare(p, x, y, "").map_err(llvm_err)?.into())
            };
            let contract = |v: FloatValue<'ctx>| -> R<BasicValueEnum<'ctx>> {
                if self.contract {
                    if let Some(i) = v.as_instruction_value() {
                        i.set_fast_math_flags(inkwell::values::FastMathFlags::AllowContract)
                            .map_err(llvm_err)?;
                    }
                }
                Ok(v.into())
            };
            return match op {
                BinOp::Add => contract(b.build_float_add(x, y, "").map_err(llvm_err)?),
                BinOp::Sub => contract(b.build_float_sub(x, y, "").map_err(llvm_err)?),
                BinOp::Mul => contract(b.build_float_mul(x, y, "").map_err(llvm_err)?),
                BinOp::Div => Ok(b.build_float_div(x, y, "").map_err(llvm_err)?.into()),
                BinOp::Min => self.call("llvm.minnum", &[lt], &[x.into(), y.into()]),
                BinOp::Max => self.call("llvm.maxnum", &[lt], &[x.into(), y.into()]),
                BinOp::Eq => cmp(FloatPredicate::OEQ),
                BinOp::Ne => cmp(FloatPredicate::UNE),
                BinOp::Lt => cmp(FloatPredicate::OLT),
                BinOp::Le => cmp(FloatPredicate::OLE),
                BinOp::Gt => cmp(FloatPredicate::OGT),
                BinOp::Ge => cmp(FloatPredicate::OGE),
                BinOp::Rem
                | BinOp::And
                | BinOp::Or
                | BinOp::BitAnd
                | BinOp::BitOr
                | BinOp::BitXor
                | BinOp::Shl
                | BinOp::Shr => Err(CodegenError::Llvm(format!(
                    "{op:?} on floats (a rocmc bug)"
                ))),
            };
        }
        let (x, y) = (x.into_int_value(), y.into_int_value());
        let s = t.is_signed();
        let cmp = |p| -> R<BasicValueEnum<'ctx>> {
            Ok(b.build_int_compare(p, x, y, "").map_err(llvm_err)?.into())
        };
        let pick = |sp, up| if s { sp } else { up };
        let y = if matches!(op, BinOp::Div | BinOp::Rem) {
            self.safe_divisor(x, y, s)?
        } else {
            y
        };
        Ok(match op {
            BinOp::Add => b.build_int_add(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Sub => b.build_int_sub(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Mul => b.build_int_mul(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Div if s => b.build_int_signed_div(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Div => b.build_int_unsigned_div(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Rem if s => b.build_int_signed_rem(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Rem => b.build_int_unsigned_rem(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Min => self.call(
                if s { "llvm.smin" } else { "llvm.umin" },
                &[lt],
                &[x.into(), y.into()],
            )?,
            BinOp::Max => self.call(
                if s { "llvm.smax" } else { "llvm.umax" },
                &[lt],
                &[x.into(), y.into()],
            )?,
            BinOp::And | BinOp::BitAnd => b.build_and(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Or | BinOp::BitOr => b.build_or(x, y, "").map_err(llvm_err)?.into(),
            BinOp::BitXor => b.build_xor(x, y, "").map_err(llvm_err)?.into(),
            // The amount modulo the width: LLVM's shifts are poison beyond it.
            BinOp::Shl | BinOp::Shr => {
                let bits = u64::from(x.get_type().get_bit_width());
                let mask = x.get_type().const_int(bits - 1, false);
                let n = b.build_and(y, mask, "").map_err(llvm_err)?;
                match op {
                    BinOp::Shl => b.build_left_shift(x, n, "").map_err(llvm_err)?.into(),
                    _ => b.build_right_shift(x, n, s, "").map_err(llvm_err)?.into(),
                }
            }
            BinOp::Eq => cmp(IntPredicate::EQ)?,
            BinOp::Ne => cmp(IntPredicate::NE)?,
            BinOp::Lt => cmp(pick(IntPredicate::SLT, IntPredicate::ULT))?,
            BinOp::Le => cmp(pick(IntPredicate::SLE, IntPredicate::ULE))?,
            BinOp::Gt => cmp(pick(IntPredicate::SGT, IntPredicate::UGT))?,
            BinOp::Ge => cmp(pick(IntPredicate::SGE, IntPredicate::UGE))?,
        })
    }

    /// The divisor to use for `x / y` so that the division never traps or
    /// is undefined: `i32::MIN / -1` wraps, as the kernel format says (the
    /// divisor becomes 1, giving `x`); on the host, where `idiv` by zero
    /// raises SIGFPE, a zero divisor becomes 1 too (the interpreter reports
    /// that division as an error; the result is unspecified).
    pub(super) fn safe_divisor(
        &self,
        x: IntValue<'ctx>,
        y: IntValue<'ctx>,
        signed: bool,
    ) -> R<IntValue<'ctx>> {
        let b = &self.b;
        let it = y.get_type();
        let one = it.const_int(1, false);
        let mut y = y;
        if self.be.zero_divisor_traps() {
            let zero = b
                .build_int_compare(IntPredicate::EQ, y, it.const_zero(), "")
                .map_err(llvm_err)?;
            y = b
                .build_select(zero, one, y, "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        if signed {
            let bits = it.get_bit_width();
            let min = it.const_int(1u64 << (bits - 1), false);
            let x_min = b
                .build_int_compare(IntPredicate::EQ, x, min, "")
                .map_err(llvm_err)?;
            let y_m1 = b
                .build_int_compare(IntPredicate::EQ, y, it.const_all_ones(), "")
                .map_err(llvm_err)?;
            let both = b.build_and(x_min, y_m1, "").map_err(llvm_err)?;
            y = b
                .build_select(both, one, y, "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        Ok(y)
    }

    pub(super) fn math(
        &self,
        f: MathFn,
        t: DType,
        xs: &[BasicValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        if t.is_float() {
            return self.math_float(f, t, xs);
        }
        // Only abs accepts integers.
        let lt = ty(self.cx, t);
        let fals = self.cx.bool_type().const_zero();
        self.call("llvm.abs", &[lt], &[xs[0].into(), fals.into()])
    }
}

/// The argument of an f32 `gelu` that `t(gelu(x))` only ever sees rounded
/// to 16 bits: it needs 11 good bits, not the 4-ulp expansion.
fn gelu_rounded_to_half(t: DType, a: &Expr) -> Option<&Expr> {
    match &a.kind {
        ExprKind::Call(MathFn::Gelu, x)
            if matches!(t, DType::F16 | DType::BF16) && a.dtype == DType::F32 && x.len() == 1 =>
        {
            Some(&x[0])
        }
        _ => None,
    }
}
