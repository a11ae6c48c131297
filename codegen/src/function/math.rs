//! Math functions without device libraries.
//!
//! LLVM's AMDGPU backend lowers `llvm.exp`, `llvm.log` and friends only for
//! f32 and f16; for f64 it asks for a libcall, which a code object cannot
//! have. So rocmc expands what the hardware lacks itself, the same way for
//! every target (the CPU path runs exactly the code a GPU runs, which is how
//! the accuracy of these expansions is measured: tests/accuracy.rs and
//! docs/math-accuracy.md):
//!
//! - f16 and bf16 are computed in f32 and rounded once (exact for sqrt,
//!   floor and ceil; within an ulp elsewhere);
//! - f32 `exp exp2 log log2 sqrt` stay LLVM intrinsics (AMDGPU lowers them
//!   natively); `tanh sigmoid gelu erf` are expanded in f32, `pow` in f64;
//!   `exp2_approx` is the target's approximate instruction (the backend
//!   names it), f64's being the accurate expansion;
//! - f64 `exp exp2 log log2` use Cody–Waite range reduction, a polynomial
//!   and `llvm.ldexp`/`llvm.frexp` (single instructions on AMDGPU); `pow`
//!   carries `log|x|` and `y·log|x|` in double-double so large results keep
//!   full precision; `tanh` uses `expm1` where `1 − e^{−2|x|}` would cancel;
//!   `erf` is the rational approximation of FreeBSD's msun (below).

use crate::function::{llvm_err, FnCx, R};
use inkwell::types::{BasicTypeEnum, FloatType};
use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};
use rocmc_ir::{DType, MathFn};

const LN2_HI: f64 = 6.931_471_803_691_238e-1; // 0x3FE62E42FEE00000: e · LN2_HI is exact
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
const INV_LN2: f64 = std::f64::consts::LOG2_E;
const INV_LN2_LO: f64 = 2.035_527_374_093_103_3e-17;
const LN2: f64 = std::f64::consts::LN_2;
const LN2_REST: f64 = 2.319_046_813_846_299_6e-17; // ln 2 − LN2
/// ln 2 split for f32 Cody–Waite: 16 significant bits, and the rest.
const LN2_HI_F32: f64 = 0.693_145_751_953_125;
const LN2_LO_F32: f64 = 1.428_606_820_286_226_8e-6;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// `f(xs)` at dtype `t` (a float type).
    pub(crate) fn math_float(
        &self,
        f: MathFn,
        t: DType,
        xs: &[BasicValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let m = Mb { cx: self };
        let args: Vec<FloatValue<'ctx>> = xs.iter().map(|v| v.into_float_value()).collect();
        // Where the target's half-precision fma goes through a wider one
        // (rounding twice), rocmc rounds once itself.
        if f == MathFn::Fma && matches!(t, DType::F16 | DType::BF16) && !self.be.fma_rounds_once(t)
        {
            return Ok(m.fma16(&args)?.into());
        }
        if matches!(t, DType::F16 | DType::BF16) && f != MathFn::Abs {
            let f32t = self.cx.f32_type();
            let wide = args
                .iter()
                .map(|x| m.ext(*x, f32t))
                .collect::<R<Vec<_>>>()?;
            let r = self.math_float(
                f,
                DType::F32,
                &wide.iter().map(|v| (*v).into()).collect::<Vec<_>>(),
            )?;
            let lt = crate::function::ty(self.cx, t).into_float_type();
            return Ok(m.trunc(r.into_float_value(), lt)?.into());
        }
        let x = args[0];
        let f64 = t == DType::F64;
        Ok(match f {
            MathFn::Abs => m.un("llvm.fabs", x)?,
            MathFn::Sqrt => m.un("llvm.sqrt", x)?,
            MathFn::Floor => m.un("llvm.floor", x)?,
            MathFn::Ceil => m.un("llvm.ceil", x)?,
            MathFn::Rsqrt => m.div(m.c(x, 1.0), m.un("llvm.sqrt", x)?)?,
            MathFn::Fma => m.fma(x, args[1], args[2])?,
            MathFn::Exp if f64 => m.exp64(x)?,
            MathFn::Exp2 if f64 => m.exp2_64(x)?,
            MathFn::Log if f64 => m.log64(x)?,
            MathFn::Log2 if f64 => m.log2_64(x)?,
            MathFn::Exp => m.un("llvm.exp", x)?,
            MathFn::Exp2 => m.un("llvm.exp2", x)?,
            MathFn::Exp2Approx if f64 => m.exp2_64(x)?,
            MathFn::Exp2Approx => self
                .call(self.be.exp2_approx_f32(), &[m.ty(x)], &[x.into()])?
                .into_float_value(),
            MathFn::Log => m.un("llvm.log", x)?,
            MathFn::Log2 => m.un("llvm.log2", x)?,
            MathFn::Tanh => m.tanh(x)?,
            MathFn::Sigmoid => m.sigmoid(x)?,
            MathFn::Gelu => m.gelu(x)?,
            MathFn::Erf => m.erf(x)?,
            MathFn::Pow if f64 => m.pow64(x, args[1])?,
            MathFn::Pow => {
                // f32 pow through the f64 one: exact to half an f32 ulp.
                let dt = self.cx.f64_type();
                let r = m.pow64(m.ext(x, dt)?, m.ext(args[1], dt)?)?;
                m.trunc(r, x.get_type())?
            }
        }
        .into())
    }
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// f32 GELU for a result rounded to f16 or bf16: x / (1 + 2^(−k·z)),
    /// z = x + 0.044715·x³, k = 2√(2/π)·log2 e, in plain f32 with the
    /// target's approximate 2^x. Relative error below 2^-16 for |x| ≤ 20
    /// (under a tenth of an f16 ulp), so the rounded result is the
    /// correctly rounded one or its neighbour; infinities and NaN as the
    /// exact form (x³ overflowing gives x or −0).
    pub(crate) fn gelu_for_half(&self, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let m = Mb { cx: self };
        let x3 = m.mul(m.mul(x, x)?, x)?;
        let z = m.fma(x3, m.c(x, 0.044715), x)?;
        let k = -2.0 * rocmc_ir::interp::GELU_C * std::f64::consts::LOG2_E;
        let w = m.mul(z, m.c(x, k))?;
        let e = self
            .call(self.be.exp2_approx_f32(), &[m.ty(x)], &[w.into()])?
            .into_float_value();
        // The quotient is rounded to 16 bits: a 1-ulp f32 reciprocal
        // leaves it within the rounding (tests/run_data.rs checks 1 ulp).
        let d = m.add(m.c(x, 1.0), e)?;
        let r = match self.be.rcp_approx_f32(&self.ctx(), d)? {
            Some(inv) => m.mul(x, inv)?,
            None => m.div(x, d)?,
        };
        // 2^(−k·z) overflows only for x below −10 (GELU is −0 in both
        // 16-bit types there); x = −∞ would give ∞/∞.
        let over = m.cmp(FloatPredicate::OEQ, e, m.c(x, f64::INFINITY))?;
        m.sel(over, m.c(x, -0.0), r)
    }
}

/// A thin layer over the builder for float code: every call returns a
/// value or the LLVM error, so the expansions read like formulas.
struct Mb<'r, 'a, 'ctx> {
    cx: &'r FnCx<'a, 'ctx>,
}

type F<'ctx> = FloatValue<'ctx>;

impl<'r, 'a, 'ctx> Mb<'r, 'a, 'ctx> {
    fn c(&self, like: F<'ctx>, v: f64) -> F<'ctx> {
        like.get_type().const_float(v)
    }
    fn add(&self, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_add(a, b, "").map_err(llvm_err)
    }
    fn sub(&self, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_sub(a, b, "").map_err(llvm_err)
    }
    fn mul(&self, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_mul(a, b, "").map_err(llvm_err)
    }
    fn div(&self, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_div(a, b, "").map_err(llvm_err)
    }
    fn neg(&self, a: F<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_neg(a, "").map_err(llvm_err)
    }
    fn ext(&self, a: F<'ctx>, t: FloatType<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_ext(a, t, "").map_err(llvm_err)
    }
    fn trunc(&self, a: F<'ctx>, t: FloatType<'ctx>) -> R<F<'ctx>> {
        self.cx.b.build_float_trunc(a, t, "").map_err(llvm_err)
    }
    fn ty(&self, a: F<'ctx>) -> BasicTypeEnum<'ctx> {
        a.get_type().into()
    }
    fn un(&self, name: &str, a: F<'ctx>) -> R<F<'ctx>> {
        let f32_fallback = match name {
            "llvm.exp" => Some(MathFn::Exp),
            "llvm.exp2" => Some(MathFn::Exp2),
            "llvm.log" => Some(MathFn::Log),
            "llvm.log2" => Some(MathFn::Log2),
            _ => None,
        };
        let narrow = a.get_type() == self.cx.cx.f32_type();
        if let Some(f) = f32_fallback.filter(|f| narrow && !self.cx.be.native_f32_math(*f)) {
            if f == MathFn::Exp {
                // The hot one (softmax, sigmoid, tanh, gelu): in f32.
                return self.exp32(a);
            }
            // Through the f64 expansion: one more rounding of a result good
            // to 2^-52 relative, so within half an f32 ulp and a hair.
            let x = self.ext(a, self.cx.cx.f64_type())?;
            let r = match f {
                MathFn::Exp2 => self.exp2_64(x)?,
                MathFn::Log => self.log64(x)?,
                _ => self.log2_64(x)?,
            };
            return self.trunc(r, a.get_type());
        }
        Ok(self
            .cx
            .call(name, &[self.ty(a)], &[a.into()])?
            .into_float_value())
    }
    /// A two-operand intrinsic at the operands' type (`llvm.minnum`).
    fn bin2(&self, name: &str, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        Ok(self
            .cx
            .call(name, &[self.ty(a)], &[a.into(), b.into()])?
            .into_float_value())
    }
    fn fma(&self, a: F<'ctx>, b: F<'ctx>, c: F<'ctx>) -> R<F<'ctx>> {
        Ok(self
            .cx
            .call("llvm.fma", &[self.ty(a)], &[a.into(), b.into(), c.into()])?
            .into_float_value())
    }
    fn cmp(&self, p: FloatPredicate, a: F<'ctx>, b: F<'ctx>) -> R<IntValue<'ctx>> {
        self.cx.b.build_float_compare(p, a, b, "").map_err(llvm_err)
    }
    fn sel(&self, c: IntValue<'ctx>, a: F<'ctx>, b: F<'ctx>) -> R<F<'ctx>> {
        Ok(self
            .cx
            .b
            .build_select(c, a, b, "")
            .map_err(llvm_err)?
            .into_float_value())
    }
    fn and(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        self.cx.b.build_and(a, b, "").map_err(llvm_err)
    }
    /// Horner's scheme with FMAs; `cs` from the highest degree down.
    fn horner(&self, x: F<'ctx>, cs: &[f64]) -> R<F<'ctx>> {
        let mut p = self.c(x, cs[0]);
        for &k in &cs[1..] {
            p = self.fma(p, x, self.c(x, k))?;
        }
        Ok(p)
    }
    /// Round to the nearest integer, as an i32 (saturating; NaN gives 0).
    fn rint_i32(&self, x: F<'ctx>) -> R<(F<'ctx>, IntValue<'ctx>)> {
        let r = self.un("llvm.rint", x)?;
        let i32t = self.cx.cx.i32_type();
        let k = self
            .cx
            .call("llvm.fptosi.sat", &[i32t.into(), self.ty(x)], &[r.into()])?
            .into_int_value();
        Ok((r, k))
    }
    fn ldexp(&self, x: F<'ctx>, k: IntValue<'ctx>) -> R<F<'ctx>> {
        Ok(self
            .cx
            .call(
                "llvm.ldexp",
                &[self.ty(x), k.get_type().into()],
                &[x.into(), k.into()],
            )?
            .into_float_value())
    }
    /// (mantissa in [0.5, 1), exponent) of a finite non-zero x.
    fn frexp(&self, x: F<'ctx>) -> R<(F<'ctx>, IntValue<'ctx>)> {
        let i32t = self.cx.cx.i32_type();
        let wide = x.get_type() == self.cx.cx.f64_type();
        if !self.cx.be.frexp_intrinsic() && (wide || x.get_type() == self.cx.cx.f32_type()) {
            return self.frexp_bits(x, wide);
        }
        let s = self
            .cx
            .call("llvm.frexp", &[self.ty(x), i32t.into()], &[x.into()])?
            .into_struct_value();
        let b = &self.cx.b;
        let m = b.build_extract_value(s, 0, "").map_err(llvm_err)?;
        let e = b.build_extract_value(s, 1, "").map_err(llvm_err)?;
        Ok((m.into_float_value(), e.into_int_value()))
    }

    /// [`Self::frexp`] from the float's bits, for f32 and f64: subnormals
    /// are first scaled into the normal range (by 2^54 or 2^25, undone in
    /// the exponent), then the biased exponent is read and replaced by
    /// that of 0.5.
    fn frexp_bits(&self, x: F<'ctx>, wide: bool) -> R<(F<'ctx>, IntValue<'ctx>)> {
        let b = &self.cx.b;
        let (it, mbits, bias, shift) = if wide {
            (self.cx.cx.i64_type(), 52u64, 1022u64, 54i32)
        } else {
            (self.cx.cx.i32_type(), 23, 126, 25)
        };
        let i32t = self.cx.cx.i32_type();
        let tiny = self.cmp(
            FloatPredicate::OLT,
            self.un("llvm.fabs", x)?,
            self.c(x, f64::powi(2.0, if wide { -1022 } else { -126 })),
        )?;
        let y = self.sel(tiny, self.mul(x, self.c(x, f64::powi(2.0, shift)))?, x)?;
        let bits = b
            .build_bit_cast(y, it, "")
            .map_err(llvm_err)?
            .into_int_value();
        let field = b
            .build_right_shift(bits, it.const_int(mbits, false), false, "")
            .map_err(llvm_err)?;
        let field = b
            .build_and(
                field,
                it.const_int(if wide { 0x7ff } else { 0xff }, false),
                "",
            )
            .map_err(llvm_err)?;
        let field = b
            .build_int_truncate_or_bit_cast(field, i32t, "")
            .map_err(llvm_err)?;
        let e = b
            .build_int_sub(field, i32t.const_int(bias, false), "")
            .map_err(llvm_err)?;
        let undo = b
            .build_select(
                tiny,
                i32t.const_int(shift as u64, false),
                i32t.const_zero(),
                "",
            )
            .map_err(llvm_err)?
            .into_int_value();
        let e = b.build_int_sub(e, undo, "").map_err(llvm_err)?;
        let keep = !(((1u64 << (if wide { 11 } else { 8 })) - 1) << mbits);
        let keep = if wide { keep } else { keep & 0xffff_ffff };
        let m = b
            .build_and(bits, it.const_int(keep, false), "")
            .map_err(llvm_err)?;
        let m = b
            .build_or(m, it.const_int(bias << mbits, false), "")
            .map_err(llvm_err)?;
        let m = b
            .build_bit_cast(m, self.ty(x), "")
            .map_err(llvm_err)?
            .into_float_value();
        Ok((m, e))
    }

    /// e^x at x's own type: the intrinsic for f32, the expansion for f64.
    fn exp(&self, x: F<'ctx>) -> R<F<'ctx>> {
        if x.get_type() == self.cx.cx.f64_type() {
            self.exp64(x)
        } else {
            self.un("llvm.exp", x)
        }
    }

    /// e^r − 1 for |r| ≤ ln2/2 (Taylor; the error term is below 2^−60
    /// for f64, 2^−30 for f32).
    fn expm1_reduced(&self, r: F<'ctx>) -> R<F<'ctx>> {
        let n = if r.get_type() == self.cx.cx.f64_type() {
            14
        } else {
            8
        };
        // 1/n!, …, 1/2!, 1/1!
        let cs: Vec<f64> = (1..=n).rev().map(|k| 1.0 / factorial(k)).collect();
        let p = self.horner(r, &cs)?;
        self.mul(p, r)
    }

    /// e^(hi + lo) for f64, with |lo| ≪ |hi|: 0 below −745.2, ∞ above 709.8.
    fn exp_dd(&self, hi: F<'ctx>, lo: F<'ctx>) -> R<F<'ctx>> {
        let (k, ki) = self.rint_i32(self.mul(hi, self.c(hi, INV_LN2))?)?;
        // Cody–Waite: k·LN2_HI is exact for |k| < 2^21.
        let r = self.fma(self.neg(k)?, self.c(hi, LN2_HI), hi)?;
        let r = self.fma(self.neg(k)?, self.c(hi, LN2_LO), r)?;
        let r = self.add(r, lo)?;
        let p = self.add(self.expm1_reduced(r)?, self.c(hi, 1.0))?;
        let v = self.ldexp(p, ki)?;
        let over = self.cmp(FloatPredicate::OGT, hi, self.c(hi, 709.782_712_893_384))?;
        let under = self.cmp(FloatPredicate::OLT, hi, self.c(hi, -745.2))?;
        let v = self.sel(over, self.c(hi, f64::INFINITY), v)?;
        self.sel(under, self.c(hi, 0.0), v)
    }

    fn exp64(&self, x: F<'ctx>) -> R<F<'ctx>> {
        self.exp_dd(x, self.c(x, 0.0))
    }

    /// e^x in f32 arithmetic, for targets without an accurate `llvm.exp.f32`:
    /// x clamped to where the result is finite and non-zero, so that k
    /// lies in [−150, 128]; Cody–Waite reduction by ln 2 (k·LN2_HI_F32 is
    /// exact for |k| < 2^8); the degree-8 polynomial of `expm1_reduced`;
    /// then 2^k as two normal powers of two, k = k1 + k2, built from their
    /// bits: p·2^k1 is exact, and the product with 2^k2 rounds once, into
    /// the denormals where need be, as `llvm.ldexp` would — in 8
    /// instructions instead of its 30 with saturation (softmax runs two
    /// per element). Within about 1 ulp.
    fn exp32(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let b = &self.cx.b;
        let i32t = self.cx.cx.i32_type();
        let xc = self.bin2("llvm.maxnum", x, self.c(x, -104.0))?;
        let xc = self.bin2("llvm.minnum", xc, self.c(x, 89.0))?;
        let k = self.un("llvm.rint", self.mul(xc, self.c(x, INV_LN2))?)?;
        let ki = b.build_float_to_signed_int(k, i32t, "").map_err(llvm_err)?;
        let r = self.fma(self.neg(k)?, self.c(x, LN2_HI_F32), xc)?;
        let r = self.fma(self.neg(k)?, self.c(x, LN2_LO_F32), r)?;
        let p = self.add(self.expm1_reduced(r)?, self.c(x, 1.0))?;
        let pow2 = |e: IntValue<'ctx>| -> R<F<'ctx>> {
            let biased = b
                .build_int_add(e, i32t.const_int(127, false), "")
                .map_err(llvm_err)?;
            let bits = b
                .build_left_shift(biased, i32t.const_int(23, false), "")
                .map_err(llvm_err)?;
            Ok(b.build_bit_cast(bits, self.ty(x), "")
                .map_err(llvm_err)?
                .into_float_value())
        };
        let k1 = b
            .build_right_shift(ki, i32t.const_int(1, false), true, "")
            .map_err(llvm_err)?;
        let k2 = b.build_int_sub(ki, k1, "").map_err(llvm_err)?;
        let v = self.mul(self.mul(p, pow2(k1)?)?, pow2(k2)?)?;
        // Past these e^x rounds to ∞ or 0 in f32; NaN (which the clamps
        // dropped) comes back.
        let over = self.cmp(FloatPredicate::OGT, x, self.c(x, 88.722_839_355_468_75))?;
        let under = self.cmp(FloatPredicate::OLT, x, self.c(x, -103.972_084))?;
        let nan = self.cmp(FloatPredicate::UNO, x, x)?;
        let v = self.sel(over, self.c(x, f64::INFINITY), v)?;
        let v = self.sel(under, self.c(x, 0.0), v)?;
        self.sel(nan, x, v)
    }

    /// 2^x = 2^k · e^{(x − k)·ln 2}: x − k is exact, its product with ln 2
    /// is carried in two parts.
    fn exp2_64(&self, x: F<'ctx>) -> R<F<'ctx>> {
        // Clamped so the exponent fits an i32; NaN compares false and stays.
        let big = self.cmp(FloatPredicate::OGT, x, self.c(x, 1100.0))?;
        let x = self.sel(big, self.c(x, 1100.0), x)?;
        let small = self.cmp(FloatPredicate::OLT, x, self.c(x, -1100.0))?;
        let x = self.sel(small, self.c(x, -1100.0), x)?;
        let (k, ki) = self.rint_i32(x)?;
        let f = self.sub(x, k)?;
        let hi = self.mul(f, self.c(x, LN2))?;
        let lo = self.fma(f, self.c(x, LN2), self.neg(hi)?)?;
        let lo = self.fma(f, self.c(x, LN2_REST), lo)?;
        let p = self.add(self.expm1_reduced(self.add(hi, lo)?)?, self.c(x, 1.0))?;
        self.ldexp(p, ki)
    }

    /// ln x as a double-double (hi, lo) for finite x > 0, and the
    /// exponent-free part: ln x = e·ln 2 + ln(1 + f), with
    /// ln(1 + f) = 2·atanh(s), s = f / (2 + f), s carried in two parts.
    fn log_dd(&self, x: F<'ctx>) -> R<(F<'ctx>, F<'ctx>, F<'ctx>, F<'ctx>)> {
        let b = &self.cx.b;
        let (m, e) = self.frexp(x)?;
        let low = self.cmp(
            FloatPredicate::OLT,
            m,
            self.c(x, std::f64::consts::FRAC_1_SQRT_2),
        )?;
        let m = self.sel(low, self.mul(m, self.c(x, 2.0))?, m)?;
        let e = b
            .build_int_sub(
                e,
                b.build_int_z_extend(low, e.get_type(), "")
                    .map_err(llvm_err)?,
                "",
            )
            .map_err(llvm_err)?;
        let ef = b
            .build_signed_int_to_float(e, x.get_type(), "")
            .map_err(llvm_err)?;
        let f = self.sub(m, self.c(x, 1.0))?; // exact (Sterbenz)
        let two = self.c(x, 2.0);
        let d_hi = self.add(two, f)?;
        let d_lo = self.add(self.sub(two, d_hi)?, f)?;
        let s_hi = self.div(f, d_hi)?;
        let res = self.fma(self.neg(s_hi)?, d_hi, f)?;
        let res = self.fma(self.neg(s_hi)?, d_lo, res)?;
        let s_lo = self.div(res, d_hi)?;
        // ln(1 + f) = 2s + (2/3)s³ + 2s·z²·Q(z), z = s²: the first two terms
        // in two parts (pow multiplies this by up to ~1000, so it must be
        // good to ~2^−70), the rest plainly.
        let (zh, zl) = self.two_prod(s_hi, s_hi)?;
        let zl = self.fma(self.mul(s_hi, two)?, s_lo, zl)?; // (s_hi + s_lo)² − zh
        let s3 = self.dd_mul((zh, zl), (s_hi, s_lo))?;
        let t1 = self.dd_mul(
            s3,
            (self.c(x, 2.0 / 3.0), self.c(x, 3.700_743_415_417_188e-17)),
        )?;
        // 2/(2k+1) for k = 11 … 2: the series after its second term.
        let cs: Vec<f64> = (2..=11).rev().map(|k| 2.0 / (2 * k + 1) as f64).collect();
        let q = self.horner(zh, &cs)?;
        let r2 = self.mul(self.mul(s_hi, self.mul(zh, zh)?)?, q)?;
        let (a, b2) = self.two_sum(self.mul(s_hi, two)?, t1.0)?;
        let lo = self.add(self.add(b2, t1.1)?, self.fma(s_lo, two, r2)?)?;
        let l_hi = self.add(a, lo)?;
        let l_lo = self.sub(lo, self.sub(l_hi, a)?)?;
        Ok((ef, l_hi, l_lo, f))
    }

    /// ln x with the IEEE special cases: NaN below 0, −∞ at ±0, ∞ at ∞.
    fn log64(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let (hi, lo) = self.log_sum(x)?;
        self.log_specials(x, self.add(hi, lo)?)
    }

    fn log_sum(&self, x: F<'ctx>) -> R<(F<'ctx>, F<'ctx>)> {
        let (ef, l_hi, l_lo, _) = self.log_dd(x)?;
        let a = self.mul(ef, self.c(x, LN2_HI))?;
        // TwoSum(a, l_hi)
        let s = self.add(a, l_hi)?;
        let bb = self.sub(s, a)?;
        let err = self.add(self.sub(a, self.sub(s, bb)?)?, self.sub(l_hi, bb)?)?;
        let lo = self.add(err, self.fma(ef, self.c(x, LN2_LO), l_lo)?)?;
        // Fast2Sum to normalise.
        let hi = self.add(s, lo)?;
        let lo = self.sub(lo, self.sub(hi, s)?)?;
        Ok((hi, lo))
    }

    fn log_specials(&self, x: F<'ctx>, v: F<'ctx>) -> R<F<'ctx>> {
        let zero = self.cmp(FloatPredicate::OEQ, x, self.c(x, 0.0))?;
        let inf = self.cmp(FloatPredicate::OEQ, x, self.c(x, f64::INFINITY))?;
        let bad = self.cmp(FloatPredicate::ULT, x, self.c(x, 0.0))?;
        let v = self.sel(zero, self.c(x, f64::NEG_INFINITY), v)?;
        let v = self.sel(inf, x, v)?;
        self.sel(bad, self.c(x, f64::NAN), v)
    }

    /// log2 x = e + ln(1 + f)/ln 2, the division by ln 2 in two parts.
    fn log2_64(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let (ef, l_hi, l_lo, _) = self.log_dd(x)?;
        let t_hi = self.mul(l_hi, self.c(x, INV_LN2))?;
        let t_lo = self.fma(l_hi, self.c(x, INV_LN2), self.neg(t_hi)?)?;
        let t_lo = self.fma(l_hi, self.c(x, INV_LN2_LO), t_lo)?;
        let t_lo = self.fma(l_lo, self.c(x, INV_LN2), t_lo)?;
        let s = self.add(ef, t_hi)?;
        let err = self.sub(t_hi, self.sub(s, ef)?)?; // exact: |ef| ≥ |t_hi| or ef = 0
        let v = self.add(s, self.add(err, t_lo)?)?;
        self.log_specials(x, v)
    }

    /// pow(x, y) for f64 with C99's special cases, from
    /// e^{y·ln|x|} with ln|x| and the product in double-double.
    fn pow64(&self, x: F<'ctx>, y: F<'ctx>) -> R<F<'ctx>> {
        let b = &self.cx.b;
        let ax = self.un("llvm.fabs", x)?;
        let (lh, ll) = self.log_sum(ax)?;
        // ln|x| at 0 and ∞, where the expansion is not defined.
        let lh = self.log_specials(ax, lh)?;
        let fin = self.cmp(FloatPredicate::ONE, ax, self.c(x, f64::INFINITY))?;
        let nz = self.cmp(FloatPredicate::ONE, ax, self.c(x, 0.0))?;
        let regular = self.and(fin, nz)?;
        let ll = self.sel(regular, ll, self.c(x, 0.0))?;
        let t_hi = self.mul(y, lh)?;
        let t_lo = self.fma(y, lh, self.neg(t_hi)?)?;
        let t_lo = self.fma(y, ll, t_lo)?;
        // With an infinite product the low part is NaN; it no longer matters.
        let t_fin = self.cmp(
            FloatPredicate::ONE,
            self.un("llvm.fabs", t_hi)?,
            self.c(x, f64::INFINITY),
        )?;
        let t_lo = self.sel(t_fin, t_lo, self.c(x, 0.0))?;
        let mag = self.exp_dd(t_hi, t_lo)?;
        // Sign and domain: y an integer (±∞ counts as even), odd or not.
        let ty = self.un("llvm.trunc", y)?;
        let y_int = self.cmp(FloatPredicate::OEQ, ty, y)?;
        let half = self.mul(y, self.c(x, 0.5))?;
        let y_odd = self.and(
            y_int,
            self.cmp(FloatPredicate::UNE, self.un("llvm.trunc", half)?, half)?,
        )?;
        let i64t = self.cx.cx.i64_type();
        let bits = b
            .build_bit_cast(x, i64t, "")
            .map_err(llvm_err)?
            .into_int_value();
        let sign = b
            .build_int_compare(IntPredicate::SLT, bits, i64t.const_zero(), "")
            .map_err(llvm_err)?;
        let flip = self.and(sign, y_odd)?;
        let v = self.sel(flip, self.neg(mag)?, mag)?;
        // A finite negative x to a non-integer power has no real value.
        let neg_fin = self.and(self.cmp(FloatPredicate::OLT, x, self.c(x, 0.0))?, fin)?;
        let nan = self.and(neg_fin, b.build_not(y_int, "").map_err(llvm_err)?)?;
        let v = self.sel(nan, self.c(x, f64::NAN), v)?;
        // |x| = 1 with y = ±∞ is 1; x = 1 and y = 0 give 1 even with NaN.
        let abs1 = self.cmp(FloatPredicate::OEQ, ax, self.c(x, 1.0))?;
        let y_inf = self.cmp(
            FloatPredicate::OEQ,
            self.un("llvm.fabs", y)?,
            self.c(x, f64::INFINITY),
        )?;
        let v = self.sel(self.and(abs1, y_inf)?, self.c(x, 1.0), v)?;
        let one = self.cmp(FloatPredicate::OEQ, x, self.c(x, 1.0))?;
        let v = self.sel(one, self.c(x, 1.0), v)?;
        let y0 = self.cmp(FloatPredicate::OEQ, y, self.c(x, 0.0))?;
        self.sel(y0, self.c(x, 1.0), v)
    }

    /// fma of three f16 or bf16 values, rounded once. Through an f32 fma
    /// the result would be rounded twice (to f32, then to 16 bits), which is
    /// wrong where the first rounding lands on a 16-bit tie (found by
    /// tests/difffuzz.rs). Instead: a·b is exact in f32 (at most 22
    /// significant bits), the sum is rounded to f32 *to odd* using its exact
    /// error from TwoSum, and rounding that to 16 bits is then correct.
    fn fma16(&self, xs: &[F<'ctx>]) -> R<F<'ctx>> {
        let b = &self.cx.b;
        let t16 = xs[0].get_type();
        let f32t = self.cx.cx.f32_type();
        let (a, bb, c) = (
            self.ext(xs[0], f32t)?,
            self.ext(xs[1], f32t)?,
            self.ext(xs[2], f32t)?,
        );
        let p = self.mul(a, bb)?;
        let (s, e) = self.two_sum(p, c)?;
        let i32t = self.cx.cx.i32_type();
        let bits = |f: F<'ctx>| -> R<IntValue<'ctx>> {
            Ok(b.build_bit_cast(f, i32t, "")
                .map_err(llvm_err)?
                .into_int_value())
        };
        let (sb, eb) = (bits(s)?, bits(e)?);
        let inexact = self.cmp(FloatPredicate::ONE, e, self.c(e, 0.0))?;
        let even = b
            .build_int_compare(
                IntPredicate::EQ,
                b.build_and(sb, i32t.const_int(1, false), "")
                    .map_err(llvm_err)?,
                i32t.const_zero(),
                "",
            )
            .map_err(llvm_err)?;
        // Toward the exact value: up in magnitude when e has s's sign.
        let same_sign = b
            .build_int_compare(
                IntPredicate::SGE,
                b.build_xor(sb, eb, "").map_err(llvm_err)?,
                i32t.const_zero(),
                "",
            )
            .map_err(llvm_err)?;
        let step = b
            .build_select(
                same_sign,
                i32t.const_int(1, false),
                i32t.const_all_ones(),
                "",
            )
            .map_err(llvm_err)?
            .into_int_value();
        let nudge = self.and(inexact, even)?;
        let step = b
            .build_select(nudge, step, i32t.const_zero(), "")
            .map_err(llvm_err)?
            .into_int_value();
        let odd = b.build_int_add(sb, step, "").map_err(llvm_err)?;
        let r = b
            .build_bit_cast(odd, f32t, "")
            .map_err(llvm_err)?
            .into_float_value();
        self.trunc(r, t16)
    }

    /// (a·b, its rounding error), exact with an FMA.
    fn two_prod(&self, a: F<'ctx>, b: F<'ctx>) -> R<(F<'ctx>, F<'ctx>)> {
        let p = self.mul(a, b)?;
        Ok((p, self.fma(a, b, self.neg(p)?)?))
    }

    /// (a + b, its rounding error) for any a, b (Knuth's TwoSum).
    fn two_sum(&self, a: F<'ctx>, b: F<'ctx>) -> R<(F<'ctx>, F<'ctx>)> {
        let s = self.add(a, b)?;
        let bb = self.sub(s, a)?;
        let err = self.add(self.sub(a, self.sub(s, bb)?)?, self.sub(b, bb)?)?;
        Ok((s, err))
    }

    /// A constant as (hi, lo) at x's precision: `lo64`/`lo32` are the
    /// remainders of the exact value after rounding to f64/f32.
    fn dd_const(&self, x: F<'ctx>, v: f64, lo64: f64, lo32: f64) -> (F<'ctx>, F<'ctx>) {
        let lo = if x.get_type() == self.cx.cx.f64_type() {
            lo64
        } else {
            lo32
        };
        (self.c(x, v), self.c(x, lo))
    }

    /// (hi, lo) · (c_hi, c_lo), to about twice the working precision.
    fn dd_mul(
        &self,
        (h, l): (F<'ctx>, F<'ctx>),
        (ch, cl): (F<'ctx>, F<'ctx>),
    ) -> R<(F<'ctx>, F<'ctx>)> {
        let (p, e) = self.two_prod(h, ch)?;
        let e = self.fma(h, cl, e)?;
        Ok((p, self.fma(l, ch, e)?))
    }

    /// GELU's tanh form as x·sigmoid(2z), 2z = 2√(2/π)·(x + 0.044715·x³)
    /// carried in two parts: the exponential amplifies any error of 2z by
    /// |2z|, which reaches hundreds for |x| of 5 to 20.
    fn gelu(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let (x2h, x2l) = self.two_prod(x, x)?;
        let x3 = self.dd_mul((x2h, x2l), (x, self.c(x, 0.0)))?;
        let k = self.dd_const(
            x,
            0.044715,
            2.196_021_142_708_559_5e-18,
            1.546_144_485_473_633e-9,
        );
        let t = self.dd_mul(x3, k)?;
        let (uh, ul) = self.two_sum(x, t.0)?;
        let ul = self.add(ul, t.1)?;
        let c2 = self.dd_const(
            x,
            2.0 * rocmc_ir::interp::GELU_C,
            -9.969_308_809_110_92e-17,
            -4.534_068_042_105_272e-8,
        );
        let (wh, wl) = self.dd_mul((uh, ul), c2)?;
        // sigmoid(w) with e = e^{−|w|} = e^{−|wh|}·(1 ∓ wl).
        let pos = self.cmp(FloatPredicate::OGE, wh, self.c(x, 0.0))?;
        let a_lo = self.sel(pos, self.neg(wl)?, wl)?;
        let e0 = self.exp(self.neg(self.un("llvm.fabs", wh)?)?)?;
        let e = self.fma(e0, a_lo, e0)?;
        let d = self.add(self.c(x, 1.0), e)?;
        let num = self.sel(pos, self.c(x, 1.0), e)?;
        let v = self.mul(x, self.div(num, d)?)?;
        // Where x³ overflows the parts are NaN: the limits are x and −0.
        let huge = if x.get_type() == self.cx.cx.f64_type() {
            1e100
        } else {
            1e12
        };
        let big = self.cmp(
            FloatPredicate::OGT,
            self.un("llvm.fabs", x)?,
            self.c(x, huge),
        )?;
        let xpos = self.cmp(FloatPredicate::OGT, x, self.c(x, 0.0))?;
        let lim = self.sel(xpos, x, self.c(x, -0.0))?;
        let v = self.sel(big, lim, v)?;
        let nan = self.cmp(FloatPredicate::UNO, x, x)?;
        self.sel(nan, x, v)
    }

    /// 1/(1 + e^{−x}) for x ≥ 0 and e^{x}/(1 + e^{x}) below: the exponential
    /// never overflows, so tiny results for very negative x survive.
    fn sigmoid(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let ax = self.un("llvm.fabs", x)?;
        let e = self.exp(self.neg(ax)?)?;
        let d = self.add(self.c(x, 1.0), e)?;
        let pos = self.cmp(FloatPredicate::OGE, x, self.c(x, 0.0))?;
        let num = self.sel(pos, self.c(x, 1.0), e)?;
        let v = self.div(num, d)?;
        // NaN compares false above; keep it NaN.
        let nan = self.cmp(FloatPredicate::UNO, x, x)?;
        self.sel(nan, x, v)
    }

    /// tanh x = sign(x)·u/(u + 2) with u = e^{2|x|} − 1 for |x| < 0.55
    /// (no cancellation near 0), else sign(x)·(1 − 2/(e^{2|x|} + 1)).
    fn tanh(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let ax = self.un("llvm.fabs", x)?;
        let two_ax = self.mul(ax, self.c(x, 2.0))?;
        // 2|x| < 1.1: e^{2|x|} − 1 = 2^k·(e^r − 1) + (2^k − 1), k ∈ {0, 1, 2}.
        let (k, ki) = self.rint_i32(self.mul(two_ax, self.c(x, INV_LN2))?)?;
        let r = self.fma(self.neg(k)?, self.c(x, LN2_HI), two_ax)?;
        let r = self.fma(self.neg(k)?, self.c(x, LN2_LO), r)?;
        let em = self.expm1_reduced(r)?;
        let pk = self.ldexp(self.c(x, 1.0), ki)?;
        let u = self.add(self.mul(em, pk)?, self.sub(pk, self.c(x, 1.0))?)?;
        let e = self.exp(two_ax)?;
        let is_small = self.cmp(FloatPredicate::OLT, ax, self.c(x, 0.55))?;
        // One division for both branches (an IEEE divide is a long
        // sequence on NVIDIA): u/(u + 2) below 0.55, 1 − 2/(e + 1) above,
        // the operands chosen first. The same operations on the same
        // values as two divisions would be, so the same results.
        let num = self.sel(is_small, u, self.c(x, 2.0))?;
        let den = self.sel(
            is_small,
            self.add(u, self.c(x, 2.0))?,
            self.add(e, self.c(x, 1.0))?,
        )?;
        let q = self.div(num, den)?;
        let v = self.sel(is_small, q, self.sub(self.c(x, 1.0), q)?)?;
        self.with_sign_of(v, x)
    }

    /// |v| with the sign bit of x, for v ≥ 0 (or NaN): the sign bit ORed in
    /// with integer operations. Not `llvm.copysign`: for an f16 result
    /// computed in f32, LLVM folds the final `fptrunc` into an f16
    /// `fcopysign` that AMDGPU instruction selection cannot match ("Cannot
    /// select", a fatal error; found by tests/difffuzz.rs).
    fn with_sign_of(&self, v: F<'ctx>, x: F<'ctx>) -> R<F<'ctx>> {
        let b = &self.cx.b;
        let is64 = x.get_type() == self.cx.cx.f64_type();
        let (it, sign) = if is64 {
            (self.cx.cx.i64_type(), 1u64 << 63)
        } else {
            (self.cx.cx.i32_type(), 1u64 << 31)
        };
        let bits = |f: F<'ctx>| -> R<IntValue<'ctx>> {
            Ok(b.build_bit_cast(f, it, "")
                .map_err(llvm_err)?
                .into_int_value())
        };
        let s = b
            .build_and(bits(x)?, it.const_int(sign, false), "")
            .map_err(llvm_err)?;
        let r = b.build_or(bits(v)?, s, "").map_err(llvm_err)?;
        Ok(b.build_bit_cast(r, x.get_type(), "")
            .map_err(llvm_err)?
            .into_float_value())
    }

    /// erf after FreeBSD msun's s_erf.c (below): four rational
    /// approximations chosen by |x|, evaluated branch-free (one rational
    /// function whose coefficients are selected per element).
    fn erf(&self, x: F<'ctx>) -> R<F<'ctx>> {
        let b = &self.cx.b;
        let ax = self.un("llvm.fabs", x)?;
        let r1 = self.cmp(FloatPredicate::OLT, ax, self.c(x, 0.84375))?;
        let r2 = self.cmp(FloatPredicate::OLT, ax, self.c(x, 1.25))?;
        let r3 = self.cmp(FloatPredicate::OLT, ax, self.c(x, 1.0 / 0.35))?;
        let pick = |cs: [f64; 4]| -> R<F<'ctx>> {
            let v = self.sel(r3, self.c(x, cs[2]), self.c(x, cs[3]))?;
            let v = self.sel(r2, self.c(x, cs[1]), v)?;
            self.sel(r1, self.c(x, cs[0]), v)
        };
        let sq = self.mul(x, x)?;
        let t = self.sel(
            r2,
            self.sel(r1, sq, self.sub(ax, self.c(x, 1.0))?)?,
            self.div(self.c(x, 1.0), sq)?,
        )?;
        // Numerator P (degree 7) and denominator Q (degree 8, Q(0) = 1),
        // highest degree first; the regions' shorter polynomials count as padded with 0.
        // Horner over the coefficients of every region, selected per element.
        let poly = |top: f64, tables: [&[f64]; 4]| -> R<F<'ctx>> {
            let mut acc = pick([0.0, 0.0, top, 0.0])?;
            for i in (0..7).rev() {
                let at = |tb: &[f64]| tb.get(i).copied().unwrap_or(0.0);
                acc = self.fma(acc, t, pick(tables.map(at))?)?;
            }
            Ok(acc)
        };
        let p = poly(ERF_RA[7], [&ERF_PP, &ERF_PA, &ERF_RA, &ERF_RB])?;
        let mut q = poly(ERF_SA[7], [&ERF_QQ, &ERF_QA, &ERF_SA, &ERF_SB])?;
        q = self.fma(q, t, self.c(x, 1.0))?;
        let rq = self.div(p, q)?;
        // |x| < 0.84375: x + x·R
        let v1 = self.fma(x, rq, x)?;
        // < 1.25: sign·(erx + R)
        let v2 = self.add(self.c(x, ERF_ERX), rq)?;
        // beyond: sign·(1 − e^{−z²−0.5625}·e^{(z−|x|)(z+|x|)+R}/|x|), z = |x| with its low bits cleared
        let is64 = x.get_type() == self.cx.cx.f64_type();
        let it = if is64 {
            self.cx.cx.i64_type()
        } else {
            self.cx.cx.i32_type()
        };
        let mask = if is64 {
            it.const_int(0xFFFF_FFFF_0000_0000, false)
        } else {
            it.const_int(0xFFFF_E000, false)
        };
        let zb = b
            .build_and(
                b.build_bit_cast(ax, it, "")
                    .map_err(llvm_err)?
                    .into_int_value(),
                mask,
                "",
            )
            .map_err(llvm_err)?;
        let z = b
            .build_bit_cast(zb, x.get_type(), "")
            .map_err(llvm_err)?
            .into_float_value();
        let e1 = self.exp(self.sub(self.neg(self.mul(z, z)?)?, self.c(x, 0.5625))?)?;
        let e2 = self.exp(self.fma(self.sub(z, ax)?, self.add(z, ax)?, rq)?)?;
        let erfc = self.div(self.mul(e1, e2)?, ax)?;
        let v3 = self.sub(self.c(x, 1.0), erfc)?;
        let big = self.cmp(FloatPredicate::OGE, ax, self.c(x, 6.0))?;
        let v3 = self.sel(big, self.c(x, 1.0), v3)?;
        let v23 = self.sel(r2, v2, v3)?;
        let v23 = self.with_sign_of(v23, x)?;
        let v = self.sel(r1, v1, v23)?;
        // NaN stays NaN (every comparison above is false for it).
        let nan = self.cmp(FloatPredicate::UNO, x, x)?;
        self.sel(nan, x, v)
    }
}

fn factorial(n: u32) -> f64 {
    (1..=n).map(f64::from).product()
}

// The coefficients of erf's rational approximations, lowest degree first,
// from FreeBSD's lib/msun/src/s_erf.c, which carries this notice:
//
//   Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//   Developed at SunPro, a Sun Microsystems, Inc. business.
//   Permission to use, copy, modify, and distribute this
//   software is freely granted, provided that this notice
//   is preserved.
const ERF_ERX: f64 = 8.450_629_115_104_675e-1;
// |x| < 0.84375, in x²: the numerator starts at PP0 (EFX8 is folded away).
const ERF_PP: [f64; 5] = [
    1.283_791_670_955_125_6e-1,
    -3.250_421_072_470_015e-1,
    -2.848_174_957_559_851e-2,
    -5.770_270_296_489_442e-3,
    -2.376_301_665_665_016_3e-5,
];
const ERF_QQ: [f64; 5] = [
    3.979_172_239_591_553_5e-1,
    6.502_224_998_876_73e-2,
    5.081_306_281_875_766e-3,
    1.324_947_380_043_216_4e-4,
    -3.960_228_278_775_368e-6,
];
// 0.84375 ≤ |x| < 1.25, in |x| − 1.
const ERF_PA: [f64; 7] = [
    -2.362_118_560_752_659_4e-3,
    4.148_561_186_837_483e-1,
    -3.722_078_760_357_013e-1,
    3.183_466_199_011_617_5e-1,
    -1.108_946_942_823_966_8e-1,
    3.547_830_432_561_823_6e-2,
    -2.166_375_594_868_791e-3,
];
const ERF_QA: [f64; 6] = [
    1.064_208_804_008_442_3e-1,
    5.403_979_177_021_71e-1,
    7.182_865_441_419_627e-2,
    1.261_712_198_087_616_4e-1,
    1.363_708_391_202_905e-2,
    1.198_449_984_679_910_7e-2,
];
// 1.25 ≤ |x| < 1/0.35, in 1/x².
const ERF_RA: [f64; 8] = [
    -9.864_944_034_847_148e-3,
    -6.938_585_727_071_818e-1,
    -1.055_862_622_532_329_1e1,
    -6.237_533_245_032_601e1,
    -1.623_966_694_625_734_7e2,
    -1.846_050_929_067_110_4e2,
    -8.128_743_550_630_66e1,
    -9.814_329_344_169_145,
];
const ERF_SA: [f64; 8] = [
    1.965_127_166_743_925_7e1,
    1.376_577_541_435_190_4e2,
    4.345_658_774_752_292_3e2,
    6.453_872_717_332_679e2,
    4.290_081_400_275_678e2,
    1.086_350_055_417_794_3e2,
    6.570_249_770_319_282,
    -6.042_441_521_485_81e-2,
];
// 1/0.35 ≤ |x| < 6, in 1/x².
const ERF_RB: [f64; 7] = [
    -9.864_942_924_700_1e-3,
    -7.992_832_376_805_23e-1,
    -1.775_795_491_775_475_2e1,
    -1.606_363_848_558_219_2e2,
    -6.375_664_433_683_896e2,
    -1.025_095_131_611_077_2e3,
    -4.835_191_916_086_514e2,
];
const ERF_SB: [f64; 7] = [
    3.033_806_074_348_245_6e1,
    3.257_925_129_965_739e2,
    1.536_729_586_084_437e3,
    3.199_858_219_508_595_5e3,
    2.553_050_406_433_164_4e3,
    4.745_285_412_069_554e2,
    -2.244_095_244_658_582e1,
];
