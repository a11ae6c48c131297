//! Fills (cache_read copies into LDS or registers): grouped, vectorised
//! when the alignment is proved, asynchronous where the target has it.

use super::*;
use crate::CodegenError;
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;
use rocmc_ir::loops::{Mem, Stmt};
use rocmc_ir::{DType, Expr, ExprKind, Index, TensorId};

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// A [`Stmt::Fill`]: from a tensor, one W-wide load where every lane
    /// lies inside the tensor and the address is aligned to the whole
    /// vector, otherwise each lane's clamped scalar load (the alignment is
    /// checked at run time: it depends on the row length and the base
    /// address); from registers, the W values. Into LDS, one aligned vector
    /// store; into registers, W scalars. An asynchronous fill's vector path
    /// is the target's asynchronous copy where it has one; its lanes path
    /// copies at once, which its semantics allow. A `zero` fill's vector
    /// path needs every index inside the tensor, and its lanes path reads
    /// zero outside it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        width: u32,
        asynchronous: bool,
        zero: bool,
    ) -> R<()> {
        if self.range_checked(self.whole_fill(value, width, zero, asynchronous)) {
            if let ExprKind::Load { tensor, indices } = &value.kind {
                return self.fill_range_checked(
                    mem,
                    array,
                    index,
                    *tensor,
                    indices,
                    value.dtype,
                    width,
                );
            }
        }
        let lanes_only = |me: &mut Self| me.fill_lanes(mem, array, index, value, (width, zero));
        let Some(vt) = self.fill_vector_type(value.dtype, width) else {
            return lanes_only(self);
        };
        // From registers (converted, under a cast): W values, one store.
        let registers = |e: &Expr| matches!(e.kind, ExprKind::Local { .. });
        if registers(value) || matches!(&value.kind, ExprKind::Cast(x) if registers(x)) {
            return self.fill_from_registers(mem, array, index, value, vt, width);
        }
        let ExprKind::Load { tensor, indices } = &value.kind else {
            return lanes_only(self);
        };
        let tensor = *tensor;
        let Some(inside) = self.fill_inside(tensor, indices, width, zero)? else {
            return lanes_only(self);
        };
        let check = self.cx.append_basic_block(self.f, "fill.align");
        let vector = self.cx.append_basic_block(self.f, "fill.vector");
        let lanes = self.cx.append_basic_block(self.f, "fill.lanes");
        let join = self.cx.append_basic_block(self.f, "fill.join");
        self.b
            .build_conditional_branch(inside, check, lanes)
            .map_err(llvm_err)?;
        // Only formed where the lanes are inside: out-of-range indices
        // would make the address arithmetic's no-wrap flags poison.
        self.b.position_at_end(check);
        let p = self.address(tensor, indices)?;
        let aligned = self.fill_aligned_at(tensor, indices, p, value.dtype, width)?;
        self.b
            .build_conditional_branch(aligned, vector, lanes)
            .map_err(llvm_err)?;
        self.b.position_at_end(vector);
        self.fill_vector(mem, array, index, p, vt, value.dtype, width, asynchronous)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(lanes);
        lanes_only(self)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// A fill from registers: its W lanes (converted where the value is a
    /// cast) gathered into one vector, stored at once.
    fn fill_from_registers(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        vt: BasicTypeEnum<'ctx>,
        width: u32,
    ) -> R<()> {
        let acc = self.lanes_vector(vt, width, |me, l| {
            me.expr(&rocmc_ir::loops::fill_lane(me.k, value, l, false))
        })?;
        self.fill_store_vector(mem, array, index, value.dtype, width, acc.into())
    }

    /// The vector of `vt` whose lane `l` is `lane(l)`, for `l < width`.
    fn lanes_vector(
        &mut self,
        vt: BasicTypeEnum<'ctx>,
        width: u32,
        mut lane: impl FnMut(&mut Self, u32) -> R<BasicValueEnum<'ctx>>,
    ) -> R<inkwell::values::VectorValue<'ctx>> {
        let mut acc = vt.into_vector_type().get_poison();
        for l in 0..width {
            let x = lane(self, l)?;
            acc = self
                .b
                .build_insert_element(acc, x, self.i32(i64::from(l)), "")
                .map_err(llvm_err)?;
        }
        Ok(acc)
    }

    /// Several fills from tensors (a tile's copy, each thread's share of
    /// it): when every one of them takes its vector path, they run as
    /// straight-line vector copies with no branch between them (which lets
    /// the assembler schedule them among other work), else each fill checks
    /// its own lanes. One branch instead of two per fill.
    pub(super) fn fill_group(&mut self, stmts: &[Stmt]) -> R<()> {
        if self.group_range_checked(stmts) {
            return self.body(stmts);
        }
        let all = self.fill_group_ok(stmts)?;
        // Each thread's share of the copy: its lanes' conditions differ.
        self.versions(
            all,
            false,
            ["fills.vector", "fills.checked", "fills.join"],
            |me| me.fill_group_vector(stmts),
            |me| me.body(stmts),
        )
    }

    /// Whether every fill of a group may take its vector path: all lanes
    /// inside the tensor, the address aligned.
    pub(super) fn fill_group_ok(&mut self, stmts: &[Stmt]) -> R<IntValue<'ctx>> {
        let mut all = self.cx.bool_type().const_int(1, false);
        self.fill_group_each(stmts, &mut |me, tensor, indices, f| {
            let Stmt::Fill {
                value, width, zero, ..
            } = f
            else {
                return Ok(());
            };
            let Some(inside) = me.fill_inside(tensor, indices, *width, *zero)? else {
                return Err(CodegenError::Llvm(
                    "a grouped fill without a last dimension (a rocmc bug)".into(),
                ));
            };
            let p = me.address(tensor, indices)?;
            let aligned = me.fill_aligned_at(tensor, indices, p, value.dtype, *width)?;
            // A select, not an and: out of range, the address arithmetic's
            // no-wrap flags may make `aligned` poison.
            let no = me.cx.bool_type().const_zero();
            let ok =
                me.b.build_select(inside, aligned, no, "")
                    .map_err(llvm_err)?
                    .into_int_value();
            all = me.b.build_and(all, ok, "").map_err(llvm_err)?;
            Ok(())
        })?;
        Ok(all)
    }

    /// A group's fills as straight-line vector copies, where
    /// [`Self::fill_group_ok`] holds.
    pub(super) fn fill_group_vector(&mut self, stmts: &[Stmt]) -> R<()> {
        self.fill_group_range(stmts, 0..usize::MAX)
    }

    /// The vector copies of the fills numbered `range` of a group, in
    /// [`Self::fill_group_each`]'s order.
    pub(super) fn fill_group_range(
        &mut self,
        stmts: &[Stmt],
        range: std::ops::Range<usize>,
    ) -> R<()> {
        let mut n = 0;
        self.fill_group_each(stmts, &mut |me, tensor, indices, f| {
            n += 1;
            if !range.contains(&(n - 1)) {
                return Ok(());
            }
            let Stmt::Fill {
                mem,
                array,
                index,
                value,
                width,
                asynchronous,
                ..
            } = f
            else {
                return Ok(());
            };
            let vt = me.fill_vector_type(value.dtype, *width).ok_or_else(|| {
                CodegenError::Llvm("a grouped fill without a vector type (a rocmc bug)".into())
            })?;
            let p = me.address(tensor, indices)?;
            me.fill_vector(
                *mem,
                *array,
                index,
                p,
                vt,
                value.dtype,
                *width,
                *asynchronous,
            )
        })
    }

    /// Calls `f` on each fill of a group ([`fill_group_size`]) with its
    /// source tensor and indices, unrolled loops' variables bound.
    pub(super) fn fill_group_each(
        &mut self,
        stmts: &[Stmt],
        f: &mut GroupedFill<'_, 'a, 'ctx>,
    ) -> R<()> {
        for s in stmts {
            match s {
                Stmt::Loop {
                    var, extent, body, ..
                } => {
                    for i in 0..extent.as_const().unwrap_or(0) {
                        self.vars[var.0 as usize] = Some(self.i32(i));
                        self.fill_group_each(body, f)?;
                    }
                    self.vars[var.0 as usize] = None;
                }
                Stmt::Fill { value, .. } => {
                    if let ExprKind::Load { tensor, indices } = &value.kind {
                        f(self, *tensor, indices, s)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The W-wide vector a fill of `dt` moves in one access, if any.
    pub(super) fn fill_vector_type(&self, dt: DType, width: u32) -> Option<BasicTypeEnum<'ctx>> {
        match mem_ty(self.cx, dt) {
            BasicTypeEnum::FloatType(t) if dt != DType::Bool => {
                Some(t.vec_type(width).as_basic_type_enum())
            }
            BasicTypeEnum::IntType(t) if dt != DType::Bool => {
                Some(t.vec_type(width).as_basic_type_enum())
            }
            _ => None,
        }
    }

    /// Whether a fill's W lanes `tensor[.., c..c + W]` all lie inside the
    /// tensor's last dimension (with `all_dims`, inside every dimension);
    /// `None` for a tensor without one.
    pub(super) fn fill_inside(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        width: u32,
        all_dims: bool,
    ) -> R<Option<IntValue<'ctx>>> {
        let shape = &self.k.tensor(tensor).shape;
        let (Some(last), Some(ext)) = (indices.last(), shape.last()) else {
            return Ok(None);
        };
        let mut inside = self.within(last, width, ext)?;
        if all_dims {
            for (i, e) in indices.iter().zip(shape).take(indices.len() - 1) {
                let dim = self.within(i, 1, e)?;
                inside = self.b.build_and(dim, inside, "").map_err(llvm_err)?;
            }
        }
        Ok(Some(inside))
    }

    /// Whether `start..start + len` lies inside `0..extent`.
    fn within(&mut self, start: &Index, len: u32, extent: &Index) -> R<IntValue<'ctx>> {
        let (c, ext) = (self.index(start)?, self.index(extent)?);
        let end = self
            .b
            .build_int_nsw_add(c, self.i32(i64::from(len)), "")
            .map_err(llvm_err)?;
        let lo = self
            .b
            .build_int_compare(IntPredicate::SGE, c, self.i32(0), "")
            .map_err(llvm_err)?;
        let hi = self
            .b
            .build_int_compare(IntPredicate::SLE, end, ext, "")
            .map_err(llvm_err)?;
        self.b.build_and(lo, hi, "").map_err(llvm_err)
    }

    /// Whether a fill's W lanes `tensor[indices..+W]` start on a whole
    /// W-wide vector, from the shape of the index rather than the address:
    /// the last index is a known multiple of W, and the row length and the
    /// tensor's base are (checked at run time where not known; both are
    /// loop-invariant, so the check leaves the loop). `None` where the last
    /// index is not a known multiple of W: the address must be checked.
    pub(super) fn fill_aligned_known(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        dt: DType,
        width: u32,
    ) -> R<Option<IntValue<'ctx>>> {
        let w = u64::from(width);
        let Some(last) = indices.last() else {
            return Ok(None);
        };
        let d = last.known_divisor_in(&self.divisors);
        if d != 0 && !d.is_multiple_of(w) {
            return Ok(None);
        }
        let mut ok = self.cx.bool_type().const_int(1, false);
        let shape = &self.k.tensor(tensor).shape;
        if indices.len() >= 2 {
            let row = &shape[shape.len() - 1];
            let d = row.known_divisor_in(&self.divisors);
            if d != 0 && !d.is_multiple_of(w) {
                ok = self.multiple_of(row, w)?;
            }
        }
        let base = self.bufs[&tensor];
        let based = self.fill_aligned(base, dt, width)?;
        Ok(Some(self.b.build_and(ok, based, "").map_err(llvm_err)?))
    }

    /// Whether the non-negative index `e` is a multiple of `w`, at run time.
    pub(super) fn multiple_of(&mut self, e: &Index, w: u64) -> R<IntValue<'ctx>> {
        let i32t = self.cx.i32_type();
        let n = self.index(e)?;
        let rem = self
            .b
            .build_int_unsigned_rem(n, i32t.const_int(w, false), "")
            .map_err(llvm_err)?;
        self.b
            .build_int_compare(IntPredicate::EQ, rem, i32t.const_zero(), "")
            .map_err(llvm_err)
    }

    /// A fill's alignment check: from the index where the backend asks for
    /// that and it is known ([`Self::fill_aligned_known`]), else from the
    /// address `p`.
    pub(super) fn fill_aligned_at(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        p: PointerValue<'ctx>,
        dt: DType,
        width: u32,
    ) -> R<IntValue<'ctx>> {
        if !self.be.alignment_from_index() {
            return self.fill_aligned(p, dt, width);
        }
        match self.fill_aligned_known(tensor, indices, dt, width)? {
            Some(ok) => Ok(ok),
            None => self.fill_aligned(p, dt, width),
        }
    }

    /// Whether `p` is aligned to a whole W-wide vector of `dt`.
    pub(super) fn fill_aligned(
        &mut self,
        p: PointerValue<'ctx>,
        dt: DType,
        width: u32,
    ) -> R<IntValue<'ctx>> {
        let bytes = u64::from(width) * dt.size() as u64;
        let i64t = self.cx.i64_type();
        let pi = self.b.build_ptr_to_int(p, i64t, "").map_err(llvm_err)?;
        let rem = self
            .b
            .build_and(pi, i64t.const_int(bytes - 1, false), "")
            .map_err(llvm_err)?;
        self.b
            .build_int_compare(IntPredicate::EQ, rem, i64t.const_zero(), "")
            .map_err(llvm_err)
    }

    /// A fill's vector path from the aligned address `p` of its lanes:
    /// the target's asynchronous copy where the fill allows one, else one
    /// vector load and the store into `mem`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_vector(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        p: PointerValue<'ctx>,
        vt: BasicTypeEnum<'ctx>,
        dt: DType,
        width: u32,
        asynchronous: bool,
    ) -> R<()> {
        let bytes = u64::from(width) * dt.size() as u64;
        let sent = asynchronous && mem == Mem::Shared && {
            let sp = self.shared_ptr(array, index)?;
            self.be.async_copy(&self.ctx(), sp, p, bytes as u32)?
        };
        if !sent {
            let v = self.b.build_load(vt, p, "").map_err(llvm_err)?;
            v.as_instruction_value()
                .expect("load")
                .set_alignment(bytes as u32)
                .map_err(llvm_err)?;
            self.fill_store_vector(mem, array, index, dt, width, v)?;
        }
        Ok(())
    }

    /// Stores the W values (of `dt`) of `v` into `mem` array `array` at `index`.
    pub(super) fn fill_store_vector(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        dt: DType,
        width: u32,
        v: BasicValueEnum<'ctx>,
    ) -> R<()> {
        match mem {
            Mem::Shared => {
                let sp = self.shared_ptr(array, index)?;
                let st = self.b.build_store(sp, v).map_err(llvm_err)?;
                st.set_alignment(width * dt.size() as u32).map_err(llvm_err)
            }
            // Bytes a target packs into words (`function::pack`) stay whole
            // vectors: stored a byte at a time, LLVM splits the array into
            // bytes and rebuilds each word it reads.
            Mem::Local if self.whole_local_vectors(dt) => {
                let p = self.local_ptr(array, index)?;
                let st = self.b.build_store(p, v).map_err(llvm_err)?;
                st.set_alignment(1).map_err(llvm_err)
            }
            Mem::Local => {
                // Read lane by lane, an aligned vector load would be split by
                // LLVM's VectorCombine into W scalar loads (on NVPTX) and the
                // alignment checked at run time for it wasted: the freeze
                // hides the lanes' reads from that rewrite and costs nothing.
                let v = self.freeze(v.into_vector_value());
                for l in 0..width {
                    let x = self
                        .b
                        .build_extract_element(v, self.i32(i64::from(l)), "")
                        .map_err(llvm_err)?;
                    let p = self.local_ptr(array, &(index.clone() + Index::c(i64::from(l))))?;
                    self.b.build_store(p, x).map_err(llvm_err)?;
                }
                Ok(())
            }
        }
    }

    /// Whether a fill into registers of `dt` stores its W lanes as one
    /// vector on both of its paths: bytes a target packs into words, and
    /// 2-byte elements, whose halves LLVM otherwise joins lane by lane
    /// after the fill (a 16-bit register each: a transpose's 8 x 8 block
    /// of halves took 114 registers on sm_90 where packed pairs take 48).
    fn whole_local_vectors(&self, dt: DType) -> bool {
        (dt.size() == 1 && self.be.packs_bytes()) || dt.size() == 2
    }

    /// `freeze v`, which inkwell does not build.
    fn freeze(&self, v: inkwell::values::VectorValue<'ctx>) -> inkwell::values::VectorValue<'ctx> {
        use inkwell::values::AsValueRef;
        // SAFETY: builder and value belong to this context and the builder
        // is positioned inside the function; freeze returns the value's type.
        unsafe {
            let r = inkwell::llvm_sys::core::LLVMBuildFreeze(
                self.b.as_mut_ptr(),
                v.as_value_ref(),
                c"".as_ptr(),
            );
            inkwell::values::VectorValue::new(r)
        }
    }

    /// A fill lane by lane: each lane's own (clamped) value.
    pub(super) fn fill_lanes(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        (width, zero): (u32, bool),
    ) -> R<()> {
        if mem == Mem::Local && width > 1 && self.whole_local_vectors(value.dtype) {
            if let Some(vt) = self.fill_vector_type(value.dtype, width) {
                let acc = self.lanes_vector(vt, width, |me, l| {
                    let x = me.expr(&rocmc_ir::loops::fill_lane(me.k, value, l, zero))?;
                    me.to_mem(value.dtype, x)
                })?;
                return self.fill_store_vector(mem, array, index, value.dtype, width, acc.into());
            }
        }
        for l in 0..width {
            let index = index.clone() + Index::c(i64::from(l));
            let v = rocmc_ir::loops::fill_lane(self.k, value, l, zero);
            self.leaf(&match mem {
                Mem::Shared => Stmt::SharedStore {
                    shared: array,
                    index,
                    value: v,
                },
                Mem::Local => Stmt::LocalStore {
                    local: array,
                    index,
                    value: v,
                },
            })?;
        }
        Ok(())
    }
}

/// What [`FnCx::fill_group_each`] calls on each fill: the fill with its
/// source tensor and indices.
pub(super) type GroupedFill<'f, 'a, 'ctx> =
    dyn FnMut(&mut FnCx<'a, 'ctx>, TensorId, &[Index], &Stmt) -> R<()> + 'f;

/// How many fills `stmts` holds when it is nothing but fills from tensors
/// that have a vector path, inside unrolled loops of constant extent
/// ([`FnCx::fill_group`]); 0 when it holds anything else.
pub(super) fn fill_group_size(stmts: &[Stmt]) -> usize {
    let mut n = 0;
    for s in stmts {
        match s {
            Stmt::Loop {
                extent,
                unroll: true,
                body,
                ..
            } => match (extent.as_const(), fill_group_size(body)) {
                (Some(k), m) if k > 0 && m > 0 => n += k as usize * m,
                _ => return 0,
            },
            Stmt::Fill { value, width, .. }
                if *width > 1
                    && value.dtype != DType::Bool
                    && matches!(&value.kind, ExprKind::Load { indices, .. } if !indices.is_empty()) =>
            {
                n += 1
            }
            _ => return 0,
        }
    }
    n
}
