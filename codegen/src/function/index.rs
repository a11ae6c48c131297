//! Index arithmetic: subscripts, loop bounds and guards as LLVM integers.
//!
//! Index expressions have floor-division semantics over unbounded integers
//! ([`rocmc_ir::index::fold`]). Code generation picks, per expression, the
//! cheapest machine arithmetic that is exact for every value the expression
//! can take, from the interval each node lies in ([`Index::range`]):
//!
//! - every node non-negative and below 2^32: 32-bit unsigned (`nuw`, `udiv`,
//!   `umin`), the common case and what clang emits for `unsigned` indices;
//! - some node may be negative (`i - 1` in `A[max(i - 1, 0)]`) but all fit
//!   in `i32`: 32-bit two's complement, with signed min/max/compare and
//!   floor division and modulo built from `sdiv`/`srem`;
//! - otherwise (no size bounds and a negative intermediate): the whole
//!   expression in 64 bits, signed.

use crate::function::{llvm_err, FnCx, R};
use crate::CodegenError;
use inkwell::types::IntType;
use inkwell::values::IntValue;
use inkwell::IntPredicate;
use rocmc_ir::index::IOp;
use rocmc_ir::loops::GpuKernel;
use rocmc_ir::{Index, Kernel};

const U32: i128 = 1 << 32;
const I32_MIN: i128 = -(1 << 31);
const I32_END: i128 = 1 << 31;

/// Upper bounds of the sizes (`[kernel] max`) and of the loop variables
/// (their extent minus one), for [`Index::range`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Bounds {
    pub sizes: Vec<u64>,
    pub vars: Vec<u64>,
}

impl Bounds {
    pub(crate) fn of(k: &Kernel, g: &GpuKernel) -> Bounds {
        let sizes: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let vars = g
            .vars
            .iter()
            .map(|v| {
                let e = v.extent.max_value(&sizes, &[]);
                u64::try_from(e.saturating_sub(1)).unwrap_or(u64::MAX)
            })
            .collect();
        Bounds { sizes, vars }
    }
}

fn unsigned32((lo, hi): (i128, i128)) -> bool {
    lo >= 0 && hi < U32
}

fn signed32((lo, hi): (i128, i128)) -> bool {
    lo >= I32_MIN && hi < I32_END
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    pub(crate) fn range(&self, e: &Index) -> (i128, i128) {
        e.range(&self.bounds.sizes, &self.bounds.vars)
    }

    /// Whether 32-bit arithmetic cannot represent every intermediate of `e`
    /// under one consistent reading (unsigned or signed) per operation.
    pub(crate) fn needs_wide(&self, e: &Index) -> bool {
        let r = self.range(e);
        if !unsigned32(r) && !signed32(r) {
            return true;
        }
        match e {
            Index::Bin(op, a, b) => {
                if self.needs_wide(a) || self.needs_wide(b) {
                    return true;
                }
                let (ra, rb) = (self.range(a), self.range(b));
                match op {
                    IOp::Add | IOp::Sub | IOp::Mul => false,
                    // These read their operands' bits as numbers (an exclusive
                    // or of 32 bits is exact where both sign- or zero-extend
                    // alike): one reading must fit both.
                    IOp::Min | IOp::Max | IOp::Xor => {
                        !(unsigned32(ra) && unsigned32(rb) || signed32(ra) && signed32(rb))
                    }
                    IOp::Div | IOp::CeilDiv | IOp::Mod => {
                        // A negative divisor (and i32::MIN / -1) only in 64 bits.
                        rb.0 <= 0
                            || !(unsigned32(ra) && unsigned32(rb) || signed32(ra) && signed32(rb))
                    }
                }
            }
            _ => false,
        }
    }

    /// `e` as an `i32`: exact for every value that fits in 32 bits, which
    /// every subscript of an in-bounds access, loop bound and LDS index does.
    pub(crate) fn index(&self, e: &Index) -> R<IntValue<'ctx>> {
        if self.needs_wide(e) {
            let v = self.emit(e, true)?;
            return self
                .b
                .build_int_truncate(v, self.cx.i32_type(), "")
                .map_err(llvm_err);
        }
        self.emit(e, false)
    }

    /// `e` as an `i64`, for 64-bit addressing.
    pub(crate) fn index_wide(&self, e: &Index) -> R<IntValue<'ctx>> {
        if self.needs_wide(e) {
            return self.emit(e, true);
        }
        let v = self.emit(e, false)?;
        self.extend(v, self.range(e).0 < 0)
    }

    fn extend(&self, v: IntValue<'ctx>, signed: bool) -> R<IntValue<'ctx>> {
        let i64t = self.cx.i64_type();
        if signed {
            self.b.build_int_s_extend(v, i64t, "").map_err(llvm_err)
        } else {
            self.b.build_int_z_extend(v, i64t, "").map_err(llvm_err)
        }
    }

    /// `value < extent` as an i1, with the comparison the values' ranges need
    /// (a negative value is below every extent, as in the interpreter).
    pub(crate) fn less_than(&self, value: &Index, extent: &Index) -> R<IntValue<'ctx>> {
        let (rv, re) = (self.range(value), self.range(extent));
        let signed = rv.0 < 0 || re.0 < 0;
        let wide = self.needs_wide(value)
            || self.needs_wide(extent)
            || signed && !(signed32(rv) && signed32(re));
        let (v, e) = if wide {
            (self.index_wide(value)?, self.index_wide(extent)?)
        } else {
            (self.emit(value, false)?, self.emit(extent, false)?)
        };
        let p = if signed {
            IntPredicate::SLT
        } else {
            IntPredicate::ULT
        };
        self.b.build_int_compare(p, v, e, "").map_err(llvm_err)
    }

    fn int_type(&self, wide: bool) -> IntType<'ctx> {
        if wide {
            self.cx.i64_type()
        } else {
            self.cx.i32_type()
        }
    }

    /// Emits `e` in 32 or 64 bits; the caller checked with
    /// [`FnCx::needs_wide`] that the width is exact.
    fn emit(&self, e: &Index, wide: bool) -> R<IntValue<'ctx>> {
        let it = self.int_type(wide);
        let leaf32 = |v: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            if wide {
                // Sizes and loop counters are never negative.
                self.b.build_int_z_extend(v, it, "").map_err(llvm_err)
            } else {
                Ok(v)
            }
        };
        Ok(match e {
            Index::Const(v) => it.const_int(*v as u64, true),
            Index::Size(s) => leaf32(self.sizes[s.0 as usize])?,
            Index::Var(v) => leaf32(self.vars[v.0 as usize].ok_or_else(|| {
                CodegenError::Llvm(format!(
                    "loop variable {} used outside its loop (a rocmc bug)",
                    self.g.vars[v.0 as usize].name
                ))
            })?)?,
            Index::Bin(op, a, c) => {
                let (ra, rc) = (self.range(a), self.range(c));
                let (x, mut y) = (self.emit(a, wide)?, self.emit(c, wide)?);
                if self.be.zero_divisor_traps()
                    && matches!(op, IOp::Div | IOp::Mod | IOp::CeilDiv)
                    && rc.0 <= 0
                    && rc.1 >= 0
                {
                    // The interpreter reports a zero divisor; the host must not trap on it.
                    let it = self.int_type(wide);
                    let z = self
                        .b
                        .build_int_compare(IntPredicate::EQ, y, it.const_zero(), "")
                        .map_err(llvm_err)?;
                    y = self
                        .b
                        .build_select(z, it.const_int(1, false), y, "")
                        .map_err(llvm_err)?
                        .into_int_value();
                }
                // Unsigned when both operands are non-negative (and, in 32
                // bits, below 2^32); otherwise signed.
                let unsigned = ra.0 >= 0 && rc.0 >= 0;
                self.op(*op, x, y, unsigned, wide, self.range(e))?
            }
        })
    }

    fn op(
        &self,
        op: IOp,
        x: IntValue<'ctx>,
        y: IntValue<'ctx>,
        unsigned: bool,
        wide: bool,
        (lo, hi): (i128, i128),
    ) -> R<IntValue<'ctx>> {
        let b = &self.b;
        let it = self.int_type(wide);
        let one = it.const_int(1, false);
        let zero = it.const_zero();
        // Flags only where the interval proves them: `nuw` for the unsigned
        // reading, `nsw` in 64 bits (ranges there are far inside i64).
        let nuw = unsigned && lo >= 0 && hi < if wide { i128::from(u64::MAX) } else { U32 };
        match op {
            IOp::Add if nuw && !wide => b.build_int_nuw_add(x, y, ""),
            IOp::Add if wide => b.build_int_nsw_add(x, y, ""),
            IOp::Add => b.build_int_add(x, y, ""),
            IOp::Sub if wide => b.build_int_nsw_sub(x, y, ""),
            IOp::Sub => b.build_int_sub(x, y, ""),
            IOp::Mul if nuw && !wide => b.build_int_nuw_mul(x, y, ""),
            IOp::Mul if wide => b.build_int_nsw_mul(x, y, ""),
            IOp::Mul => b.build_int_mul(x, y, ""),
            IOp::Min | IOp::Max => {
                let name = match (op, unsigned) {
                    (IOp::Min, true) => "llvm.umin",
                    (IOp::Min, false) => "llvm.smin",
                    (_, true) => "llvm.umax",
                    (_, false) => "llvm.smax",
                };
                return Ok(self
                    .call(name, &[it.into()], &[x.into(), y.into()])?
                    .into_int_value());
            }
            IOp::Xor => b.build_xor(x, y, ""),
            IOp::Div if unsigned => b.build_int_unsigned_div(x, y, ""),
            IOp::Mod if unsigned => b.build_int_unsigned_rem(x, y, ""),
            IOp::CeilDiv if unsigned => {
                let t = b
                    .build_int_nuw_add(x, b.build_int_sub(y, one, "").map_err(llvm_err)?, "")
                    .map_err(llvm_err)?;
                b.build_int_unsigned_div(t, y, "")
            }
            IOp::Div | IOp::Mod | IOp::CeilDiv => {
                // Euclidean division from truncating division: where the
                // remainder is negative, step the quotient away from the
                // divisor's sign and add |divisor| to the remainder.
                let q = b.build_int_signed_div(x, y, "").map_err(llvm_err)?;
                let r = b.build_int_signed_rem(x, y, "").map_err(llvm_err)?;
                let neg = b
                    .build_int_compare(IntPredicate::SLT, r, zero, "")
                    .map_err(llvm_err)?;
                let ypos = b
                    .build_int_compare(IntPredicate::SGT, y, zero, "")
                    .map_err(llvm_err)?;
                let step = b
                    .build_select(ypos, one, it.const_all_ones(), "")
                    .map_err(llvm_err)?
                    .into_int_value();
                let absy = b
                    .build_select(ypos, y, b.build_int_neg(y, "").map_err(llvm_err)?, "")
                    .map_err(llvm_err)?
                    .into_int_value();
                let q_adj = b
                    .build_select(neg, step, zero, "")
                    .map_err(llvm_err)?
                    .into_int_value();
                let r_adj = b
                    .build_select(neg, absy, zero, "")
                    .map_err(llvm_err)?
                    .into_int_value();
                let fq = b.build_int_sub(q, q_adj, "").map_err(llvm_err)?;
                let fr = b.build_int_add(r, r_adj, "").map_err(llvm_err)?;
                match op {
                    IOp::Div => return Ok(fq),
                    IOp::Mod => return Ok(fr),
                    _ => {
                        // ceil(x / y) = floor(x / y) + (x mod y ≠ 0) for y > 0.
                        let inexact = b
                            .build_int_compare(IntPredicate::NE, fr, zero, "")
                            .map_err(llvm_err)?;
                        let up = b.build_int_z_extend(inexact, it, "").map_err(llvm_err)?;
                        b.build_int_add(fq, up, "")
                    }
                }
            }
        }
        .map_err(llvm_err)
    }
}
