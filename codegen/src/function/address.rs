//! Addresses: tensor elements (affine, gathered, with the proven index
//! width), shared and per-thread arrays, and the zeros an empty gather reads.

use super::*;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;
use rocmc_ir::index::IOp;
use rocmc_ir::loops::Addressing;
use rocmc_ir::{DType, Expr, ExprKind, Index, TensorId};

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// Address of element `indices` of `tensor`, in the kernel's addressing
    /// mode. With `Offset32` the byte offset is formed in 32 bits and
    /// zero-extended, which lets the backend use the scalar-base + 32-bit
    /// vector-offset mode of global memory; the wider modes are chosen by
    /// lowering when sizes could overflow that.
    pub(super) fn address(&self, tensor: TensorId, indices: &[Index]) -> R<PointerValue<'ctx>> {
        let wide = self.g.addressing == Addressing::Index64;
        // Constant terms of the last index (unrolled loop steps, `x + 1`)
        // become a second, constant GEP: accesses that differ only by them
        // then share one base, and LLVM merges them into vector accesses
        // with immediate offsets instead of forming each address.
        let last = indices.len().saturating_sub(1);
        let (last_value, step) = match indices.last() {
            Some(ix) => self.split_constant(ix, wide)?,
            None => (self.i32(0), 0),
        };
        let mut values = Vec::with_capacity(indices.len());
        for (d, ix) in indices.iter().enumerate() {
            values.push(if d == last {
                last_value
            } else {
                self.at_width(ix)?
            });
        }
        self.element_address_in(tensor, &values, step, None)
    }

    /// Loads an element of dtype `t` from global memory (bools are bytes).
    pub(super) fn load_element(&self, p: PointerValue<'ctx>, t: DType) -> R<BasicValueEnum<'ctx>> {
        let v = self
            .b
            .build_load(mem_ty(self.cx, t), p, "")
            .map_err(llvm_err)?;
        v.as_instruction_value()
            .expect("load")
            .set_alignment(t.size() as u32)
            .map_err(llvm_err)?;
        if t != DType::Bool {
            return Ok(v);
        }
        let z = self.cx.i8_type().const_zero();
        Ok(self
            .b
            .build_int_compare(IntPredicate::NE, v.into_int_value(), z, "")
            .map_err(llvm_err)?
            .into())
    }

    /// A gathered element.
    pub(super) fn gather(
        &self,
        tensor: TensorId,
        subs: &[Expr],
        t: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        let p = self.gather_address(tensor, subs)?;
        self.load_element(p, t)
    }

    /// [`ZERO_BYTES`] of zeros in address space `space` (every dtype's
    /// zero, for the lanes of a vector access too), read by the module's
    /// gathers from tensors that turn out to be empty.
    pub(super) fn zero_global(&self, space: inkwell::AddressSpace) -> R<PointerValue<'ctx>> {
        let digits: String = format!("{space:?}")
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let name = format!("rocmc_zero_as{digits}");
        if let Some(g) = self.m.get_global(&name) {
            return Ok(g.as_pointer_value());
        }
        let ty = self.cx.i8_type().array_type(ZERO_BYTES as u32);
        let g = self.m.add_global(ty, Some(space), &name);
        g.set_initializer(&ty.const_zero());
        g.set_constant(true);
        g.set_linkage(inkwell::module::Linkage::Internal);
        g.set_alignment(16);
        Ok(g.as_pointer_value())
    }

    /// An `i32` subscript known to be non-negative at the kernel's
    /// addressing width.
    pub(crate) fn to_addressing_width(&self, v: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        if self.g.addressing != Addressing::Index64 {
            return Ok(v);
        }
        self.b
            .build_int_z_extend(v, self.cx.i64_type(), "")
            .map_err(llvm_err)
    }

    /// An index at the kernel's addressing width.
    pub(super) fn at_width(&self, ix: &Index) -> R<IntValue<'ctx>> {
        if self.g.addressing == Addressing::Index64 {
            self.index_wide(ix)
        } else {
            self.index(ix)
        }
    }

    /// The address of a gathered element. Data subscripts are clamped into
    /// `0..=extent - 1` (the meaning of [`ExprKind::Gather`]), so the
    /// address is inside the tensor; where the tensor may be empty it is
    /// instead a constant of zeros ([`Self::zero_global`]), chosen by a
    /// select, so the expression stays straight-line code. An affine last
    /// subscript keeps its constant terms apart, as in [`Self::address`],
    /// so the lanes of a vectorized loop share one base.
    pub(super) fn gather_address(&self, tensor: TensorId, subs: &[Expr]) -> R<PointerValue<'ctx>> {
        let t = self.k.tensor(tensor);
        let wide = self.g.addressing == Addressing::Index64;
        let mut values = Vec::with_capacity(subs.len());
        let mut nonempty: Option<IntValue<'ctx>> = None;
        let mut step = 0;
        for (d, (sub, ext)) in subs.iter().zip(&t.shape).enumerate() {
            if let ExprKind::Index(ix) = &sub.kind {
                if d + 1 == subs.len() {
                    let (v, k) = self.split_constant(ix, wide)?;
                    if (k + 1) * t.dtype.size() as i64 <= ZERO_BYTES {
                        values.push(v);
                        step = k;
                        continue;
                    }
                }
                values.push(self.at_width(ix)?);
                continue;
            }
            let v = self.expr(sub)?.into_int_value();
            let e = self.index(ext)?;
            if ext.as_const().is_none_or(|c| c <= 0) {
                let has = self
                    .b
                    .build_int_compare(IntPredicate::SGT, e, self.i32(0), "")
                    .map_err(llvm_err)?;
                nonempty = Some(match nonempty {
                    Some(n) => self.b.build_and(n, has, "").map_err(llvm_err)?,
                    None => has,
                });
            }
            let hi = self.b.build_int_sub(e, self.i32(1), "").map_err(llvm_err)?;
            let i32t = self.cx.i32_type().into();
            let v = self.call("llvm.smin", &[i32t], &[v.into(), hi.into()])?;
            let v = self.call("llvm.smax", &[i32t], &[v.into(), self.i32(0).into()])?;
            values.push(self.to_addressing_width(v.into_int_value())?);
        }
        self.element_address_in(tensor, &values, step, nonempty)
    }

    /// The address of the element at `values` (one per dimension, at the
    /// addressing width, each inside its dimension) plus `step` elements;
    /// where `nonempty` is false, the same offset `step` into
    /// [`Self::zero_global`] instead.
    pub(crate) fn element_address_in(
        &self,
        tensor: TensorId,
        values: &[IntValue<'ctx>],
        step: i64,
        nonempty: Option<IntValue<'ctx>>,
    ) -> R<PointerValue<'ctx>> {
        let t = self.k.tensor(tensor);
        let i64t = self.cx.i64_type();
        let wide = self.g.addressing == Addressing::Index64;
        let mut off = if wide { i64t.const_zero() } else { self.i32(0) };
        for (d, i) in values.iter().enumerate() {
            off = if d == 0 {
                *i
            } else {
                let ext = self.at_width(&t.shape[d])?;
                let m = self.b.build_int_nuw_mul(off, ext, "").map_err(llvm_err)?;
                self.b.build_int_nuw_add(m, *i, "").map_err(llvm_err)?
            };
        }
        let size = t.dtype.size() as u64;
        let bytes = match self.g.addressing {
            Addressing::Offset32 => {
                let b32 = self
                    .b
                    .build_int_nuw_mul(off, self.i32(size as i64), "")
                    .map_err(llvm_err)?;
                self.b.build_int_z_extend(b32, i64t, "").map_err(llvm_err)?
            }
            Addressing::Index32 => {
                let e = self.b.build_int_z_extend(off, i64t, "").map_err(llvm_err)?;
                self.b
                    .build_int_nuw_mul(e, i64t.const_int(size, false), "")
                    .map_err(llvm_err)?
            }
            Addressing::Index64 => self
                .b
                .build_int_nuw_mul(off, i64t.const_int(size, false), "")
                .map_err(llvm_err)?,
        };
        let mut base = self.bufs[&tensor];
        let mut bytes = bytes;
        if let Some(n) = nonempty {
            let zero = self.zero_global(base.get_type().get_address_space())?;
            base = self
                .b
                .build_select(n, base, zero, "")
                .map_err(llvm_err)?
                .into_pointer_value();
            bytes = self
                .b
                .build_select(n, bytes, i64t.const_zero(), "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        // SAFETY: in-bounds by the kernel's guards (the first pointer lies at
        // or before the element); inkwell marks GEP unsafe because LLVM cannot check it.
        let p = unsafe {
            self.b
                .build_in_bounds_gep(self.cx.i8_type(), base, &[bytes], "")
        }
        .map_err(llvm_err)?;
        if step == 0 {
            return Ok(p);
        }
        let k = i64t.const_int(step as u64 * size, false);
        // SAFETY: as above, `p` plus the constant is the element itself.
        unsafe { self.b.build_in_bounds_gep(self.cx.i8_type(), p, &[k], "") }.map_err(llvm_err)
    }

    /// An index as (value without its constant terms, their positive sum),
    /// when every term is non-negative (so the rest cannot be negative);
    /// else (value, 0). Unrolled loop variables count as constants. The
    /// value is an `i64` when `wide`, else an `i32`.
    pub(super) fn split_constant(&self, ix: &Index, wide: bool) -> R<(IntValue<'ctx>, i64)> {
        fn terms<'a>(e: &'a Index, out: &mut Vec<&'a Index>) {
            match e {
                Index::Bin(IOp::Add, a, b) => {
                    terms(a, out);
                    terms(b, out);
                }
                other => out.push(other),
            }
        }
        fn has_sub(e: &Index) -> bool {
            match e {
                Index::Bin(IOp::Sub, ..) => true,
                Index::Bin(_, a, b) => has_sub(a) || has_sub(b),
                Index::Const(c) => *c < 0,
                _ => false,
            }
        }
        let whole = |ix: &Index| {
            if wide {
                self.index_wide(ix)
            } else {
                self.index(ix)
            }
        };
        let mut ts = Vec::new();
        terms(ix, &mut ts);
        if ts.len() < 2
            || self.needs_wide(ix)
            || ts.iter().any(|t| has_sub(t) || self.range(t).0 < 0)
        {
            return Ok((whole(ix)?, 0));
        }
        let mut step = 0i64;
        let mut rest: Option<IntValue<'ctx>> = None;
        for t in ts {
            let v = whole(t)?;
            match v.get_zero_extended_constant() {
                Some(c) if v.is_const() => step += c as i64,
                _ => {
                    rest = Some(match rest {
                        None => v,
                        Some(r) => self.b.build_int_nuw_add(r, v, "").map_err(llvm_err)?,
                    })
                }
            }
        }
        // Every term is already emitted: reuse them rather than the whole index.
        Ok(match rest {
            Some(r) if step > 0 => (r, step),
            Some(r) => (r, 0),
            None if wide => (self.cx.i64_type().const_int(step as u64, false), 0),
            None => (self.i32(step), 0),
        })
    }
}
