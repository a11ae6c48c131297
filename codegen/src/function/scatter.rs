//! Scatters: `tensor[indices] op= value` as one atomic read-modify-write
//! per update, skipped where a subscript leaves the tensor.

use crate::function::{llvm_err, FnCx, R};
use inkwell::values::{AsValueRef, BasicValueEnum, InstructionValue, IntValue};
use inkwell::IntPredicate;
use rocmc_ir::{DType, Expr, ExprKind, ReduceOp, TensorId};

impl<'ctx> FnCx<'_, 'ctx> {
    /// One update of a scatter ([`rocmc_ir::loops::Stmt::Scatter`]), into
    /// the tensor or into its LDS copy `shared`.
    pub(crate) fn scatter(
        &mut self,
        tensor: TensorId,
        indices: &[Expr],
        op: ReduceOp,
        value: &Expr,
        shared: Option<u32>,
    ) -> R<()> {
        let t = self.k.tensor(tensor);
        let mut values = Vec::with_capacity(indices.len());
        let mut inside = self.cx.bool_type().const_int(1, false);
        for (sub, ext) in indices.iter().zip(&t.shape) {
            let v = match &sub.kind {
                ExprKind::Index(ix) => self.index(ix)?,
                _ => self.expr(sub)?.into_int_value(),
            };
            // Unsigned: a negative subscript is as far out as a large one.
            let e = self.index(ext)?;
            let ok = self
                .b
                .build_int_compare(IntPredicate::ULT, v, e, "")
                .map_err(llvm_err)?;
            inside = self.b.build_and(inside, ok, "").map_err(llvm_err)?;
            values.push(v);
        }
        let v = self.expr(value)?;
        self.when(inside, |me| {
            if let Some(a) = shared {
                // The copy is laid out as the tensor, whose shape is constant.
                let mut lin = me.i32(0);
                for (v, ext) in values.iter().zip(&t.shape) {
                    let e = me.i32(ext.as_const().unwrap_or(1));
                    let m = me.b.build_int_nuw_mul(lin, e, "").map_err(llvm_err)?;
                    lin = me.b.build_int_nuw_add(m, *v, "").map_err(llvm_err)?;
                }
                let p = me.shared_ptr_at(a, lin)?;
                return me.atomic(op, value.dtype, p, v, me.be.atomic_scope_shared());
            }
            let wide: Vec<IntValue<'ctx>> = values
                .iter()
                .map(|v| me.to_addressing_width(*v))
                .collect::<R<_>>()?;
            let p = me.element_address_in(tensor, &wide, 0, None)?;
            me.atomic(op, value.dtype, p, v, me.be.atomic_scope())
        })
    }

    /// `*p = *p op v`, atomically, relaxed, at synchronisation scope `scope`.
    fn atomic(
        &self,
        op: ReduceOp,
        dt: DType,
        p: inkwell::values::PointerValue<'ctx>,
        v: BasicValueEnum<'ctx>,
        scope: &str,
    ) -> R<()> {
        use inkwell::llvm_sys::LLVMAtomicRMWBinOp as Op;
        let rmw = match (op, dt.is_float(), dt.is_signed()) {
            (ReduceOp::Sum, true, _) => Op::LLVMAtomicRMWBinOpFAdd,
            (ReduceOp::Sum, false, _) => Op::LLVMAtomicRMWBinOpAdd,
            (ReduceOp::Max, true, _) => Op::LLVMAtomicRMWBinOpFMax,
            (ReduceOp::Min, true, _) => Op::LLVMAtomicRMWBinOpFMin,
            (ReduceOp::Max, false, true) => Op::LLVMAtomicRMWBinOpMax,
            (ReduceOp::Min, false, true) => Op::LLVMAtomicRMWBinOpMin,
            (ReduceOp::Max, false, false) => Op::LLVMAtomicRMWBinOpUMax,
            (ReduceOp::Min, false, false) => Op::LLVMAtomicRMWBinOpUMin,
            (ReduceOp::Or, false, _) => Op::LLVMAtomicRMWBinOpOr,
            (ReduceOp::And, false, _) => Op::LLVMAtomicRMWBinOpAnd,
            (ReduceOp::Or | ReduceOp::And, true, _) | (ReduceOp::Prod, ..) => {
                return Err(crate::CodegenError::Llvm(
                    "a scatter with `*` (a rocmc bug: the front end refuses it)".into(),
                ))
            }
        };
        // SAFETY: the context outlives the call; the name is a valid slice.
        let ssid = unsafe {
            inkwell::llvm_sys::core::LLVMGetSyncScopeID(
                self.cx.raw(),
                scope.as_ptr().cast(),
                scope.len(),
            )
        };
        // SAFETY: builder, pointer and value belong to this context, the
        // builder is positioned inside the function, and the value has the
        // pointee's type (inkwell's own atomicrmw takes integers only).
        let inst = unsafe {
            inkwell::llvm_sys::core::LLVMBuildAtomicRMWSyncScope(
                self.b.as_mut_ptr(),
                rmw,
                p.as_value_ref(),
                v.as_value_ref(),
                inkwell::llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                ssid,
            )
        };
        // SAFETY: `inst` is the instruction just built.
        // (LLVM gives it the natural alignment of the value's type.)
        let inst = unsafe { InstructionValue::new(inst) };
        self.be.tune_atomic(&self.ctx(), inst)
    }
}
