//! Matrix instructions: fragment loads and the instruction itself, with the
//! operands gathered per lane as the target's layout requires.

use super::stmt::register_only;
use super::*;
use crate::backend::GroupA;
use crate::CodegenError;
use inkwell::types::BasicTypeEnum;
use inkwell::values::BasicValueEnum;
use inkwell::values::IntValue;
use rocmc_ir::loops::Stmt;
use rocmc_ir::Index;
use rocmc_target::matrix::MatrixInstr;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// A [`Stmt::MatrixLoad`]: the target's instruction, each 32-bit
    /// register split into the two 16-bit elements its stores name; the
    /// stores themselves where the target has none.
    pub(super) fn matrix_load(
        &mut self,
        shared: u32,
        row: &Index,
        count: u32,
        trans: bool,
        stores: &[Stmt],
    ) -> R<()> {
        let p = self.shared_ptr(shared, row)?;
        let Some(regs) = self.be.matrix_load(&self.ctx(), p, count, trans)? else {
            return self.body(stores);
        };
        for (e, s) in stores.iter().enumerate() {
            let (
                Stmt::LocalStore {
                    local,
                    index,
                    value,
                },
                Some(reg),
            ) = (s, regs.get(e / 2))
            else {
                return Err(CodegenError::Llvm(
                    "a matrix load with other than register stores (a rocmc bug)".into(),
                ));
            };
            let pair = match mem_ty(self.cx, value.dtype) {
                BasicTypeEnum::FloatType(t) => t.vec_type(2),
                BasicTypeEnum::IntType(t) => t.vec_type(2),
                _ => {
                    return Err(CodegenError::Llvm(
                        "a matrix load of other than 16-bit elements (a rocmc bug)".into(),
                    ))
                }
            };
            let v = self
                .b
                .build_bit_cast(*reg, pair, "")
                .map_err(llvm_err)?
                .into_vector_value();
            let x = self
                .b
                .build_extract_element(v, self.i32((e % 2) as i64), "")
                .map_err(llvm_err)?;
            let dst = self.local_ptr(*local, index)?;
            self.b.build_store(dst, x).map_err(llvm_err)?;
        }
        Ok(())
    }

    /// One matrix instruction: the lane's fragments packed into the
    /// intrinsic's operand types, the backend's call, D back into the
    /// accumulator elements.
    pub(super) fn matrix(
        &mut self,
        instr: &MatrixInstr,
        a: &(u32, Index),
        b: &(u32, Index),
        acc: &(u32, Index),
    ) -> R<()> {
        let av = self.matrix_operands(a, instr.a_per_lane(), instr.llvm_a)?;
        let bv = self.matrix_operands(b, instr.b_per_lane(), instr.llvm_b)?;
        let cv = self.matrix_operands(acc, instr.acc_per_lane(), instr.llvm_c)?;
        // A transposed view is the hardware's instruction with A and B
        // exchanged; its accumulator registers are the hardware's.
        let hw = instr.hardware();
        let (av, bv) = if instr.transposed { (bv, av) } else { (av, bv) };
        let d = self.be.matrix(&self.ctx(), &hw, av, bv, cv)?;
        let mut elems = Vec::new();
        for v in d {
            match v {
                BasicValueEnum::VectorValue(vv) => {
                    for i in 0..vv.get_type().get_size() {
                        elems.push(
                            self.b
                                .build_extract_element(vv, self.i32(i64::from(i)), "")
                                .map_err(llvm_err)?,
                        );
                    }
                }
                other => elems.push(other),
            }
        }
        if elems.len() != instr.acc_per_lane() as usize {
            return Err(CodegenError::Llvm(format!(
                "{} gave {} accumulator elements, not {} (a rocmc bug)",
                instr.name,
                elems.len(),
                instr.acc_per_lane()
            )));
        }
        for (e, v) in elems.into_iter().enumerate() {
            let p = self.local_ptr(acc.0, &(acc.1.clone() + Index::c(e as i64)))?;
            self.b.build_store(p, v).map_err(llvm_err)?;
        }
        Ok(())
    }

    /// A [`Stmt::MatrixDesc`]: the target's descriptor of the operand into
    /// its register, or the fills where the target reads registers.
    pub(super) fn matrix_desc(
        &mut self,
        local: u32,
        index: &Index,
        shared: u32,
        start: &Index,
        (mn_block, row_bytes): (Option<u32>, u32),
        stores: &[Stmt],
    ) -> R<()> {
        let p = self.shared_ptr(shared, start)?;
        match self
            .be
            .matrix_descriptor(&self.ctx(), p, mn_block, row_bytes)?
        {
            Some(d) => {
                let dst = self.local_ptr(local, index)?;
                self.b.build_store(dst, d).map_err(llvm_err)?;
                Ok(())
            }
            None => self.body(stores),
        }
    }

    /// A warpgroup instruction reading A and B through the descriptors in
    /// `desc`, its accumulators in and out of `acc`.
    pub(super) fn group_matrix(
        &mut self,
        instr: &MatrixInstr,
        a: &(u32, Index),
        desc: &[Option<rocmc_ir::loops::OperandDesc>; 2],
        acc: &(u32, Index),
    ) -> R<()> {
        let i64t = self.cx.i64_type();
        let load = |me: &Self, o: &rocmc_ir::loops::OperandDesc| -> R<IntValue<'ctx>> {
            let p = me.local_ptr(o.local, &o.index)?;
            Ok(me
                .b
                .build_load(i64t, p, "")
                .map_err(llvm_err)?
                .into_int_value())
        };
        let [da, Some(db)] = desc else {
            return Err(CodegenError::Llvm(format!(
                "{} without B's descriptor (a rocmc bug)",
                instr.name
            )));
        };
        // A's descriptor, or its fragment as the lane's registers.
        let av = match da {
            Some(o) => GroupA::Desc(load(self, o)?),
            None => GroupA::Regs(
                self.matrix_operands(a, instr.a_per_lane(), instr.llvm_a)?
                    .into_iter()
                    .map(|v| v.into_int_value())
                    .collect(),
            ),
        };
        let db = load(self, db)?;
        let cv = self.matrix_operands(acc, instr.acc_per_lane(), instr.llvm_c)?;
        let trans = desc.clone().map(|o| o.is_some_and(|o| o.transposed));
        let out = self
            .be
            .group_matrix(&self.ctx(), instr, av, db, trans, cv)?;
        for (e, v) in out.into_iter().enumerate() {
            let p = self.local_ptr(acc.0, &(acc.1.clone() + Index::c(e as i64)))?;
            self.b.build_store(p, v).map_err(llvm_err)?;
        }
        Ok(())
    }

    /// A fence, commit or wait of asynchronous matrix instructions. After a
    /// wait, each accumulator register passes through an empty assembly
    /// statement ordered after it, so that LLVM cannot move a read of the
    /// results above the wait.
    pub(super) fn matrix_async(&mut self, op: rocmc_ir::loops::MatrixAsync) -> R<()> {
        // Only once nothing is in flight: an instruction touching the
        // registers of a pending group would serialize every wgmma (ptxas).
        use rocmc_ir::loops::MatrixAsync;
        if !self.reads_descriptors() {
            return self.be.matrix_async(&self.ctx(), op);
        }
        let mut accs: Vec<u32> = Vec::new();
        let mut reg_a: Vec<u32> = Vec::new();
        let mut pending = false;
        rocmc_ir::loops::visit::walk(&self.g.body, &mut |s| match s {
            Stmt::Matrix { instr, acc, a, .. } if instr.warpgroup() => {
                if !accs.contains(&acc.0) {
                    accs.push(acc.0);
                }
                if !instr.a_in_shared() && !reg_a.contains(&a.0) {
                    reg_a.push(a.0);
                }
            }
            Stmt::MatrixAsync(MatrixAsync::Wait(n)) => pending |= *n > 0,
            _ => {}
        });
        let fenced = match op {
            MatrixAsync::Wait(0) => accs,
            // Before a group, so that LLVM computes what it reads (A's
            // registers; the accumulators, where no group is ever left
            // pending across a fence) ahead of `wgmma.fence`: written
            // after it, ptxas inserts a fence of its own before each
            // instruction (C7519).
            MatrixAsync::Fence if pending => reg_a,
            MatrixAsync::Fence => reg_a.into_iter().chain(accs).collect(),
            _ => Vec::new(),
        };
        if op != MatrixAsync::Fence {
            self.be.matrix_async(&self.ctx(), op)?;
        }
        for id in fenced {
            self.fence_registers(id)?;
        }
        if op == MatrixAsync::Fence {
            self.be.matrix_async(&self.ctx(), op)?;
        }
        Ok(())
    }

    /// Every element of `locals[id]` through an empty assembly statement
    /// ordered among the others (16-bit elements in pairs, as the
    /// instructions read them).
    fn fence_registers(&mut self, id: u32) -> R<()> {
        let dtype = self.g.locals[id as usize].dtype;
        let len = self.g.locals[id as usize].len;
        let i32t: BasicTypeEnum = self.cx.i32_type().into();
        let (t, reg, per): (BasicTypeEnum, &str, u32) = match dtype {
            rocmc_ir::DType::I32 => (i32t, "=r,0,~{memory}", 1),
            rocmc_ir::DType::F16 | rocmc_ir::DType::BF16 => (i32t, "=r,0,~{memory}", 2),
            _ => (self.cx.f32_type().into(), "=f,0,~{memory}", 1),
        };
        let et = ty(self.cx, dtype);
        let fty = t.fn_type(&[t.into()], false);
        for e in (0..len).step_by(per as usize) {
            let ptrs = (e..(e + per).min(len))
                .map(|x| self.local_ptr(id, &Index::c(i64::from(x))))
                .collect::<R<Vec<_>>>()?;
            let v: BasicValueEnum = if per == 1 {
                self.b.build_load(t, ptrs[0], "").map_err(llvm_err)?
            } else {
                let BasicTypeEnum::FloatType(ft) = et else {
                    return Err(CodegenError::Llvm(
                        "a 16-bit register that is no float".into(),
                    ));
                };
                let mut acc = ft.vec_type(per).get_poison();
                for (i, p) in ptrs.iter().enumerate() {
                    let x = self.b.build_load(et, *p, "").map_err(llvm_err)?;
                    acc = self
                        .b
                        .build_insert_element(acc, x, self.i32(i as i64), "")
                        .map_err(llvm_err)?;
                }
                self.b.build_bit_cast(acc, t, "").map_err(llvm_err)?
            };
            let f =
                self.cx
                    .create_inline_asm(fty, String::new(), reg.into(), true, false, None, false);
            let r = self
                .b
                .build_indirect_call(fty, f, &[v.into()], "")
                .map_err(llvm_err)?;
            let inkwell::values::ValueKind::Basic(r) = r.try_as_basic_value() else {
                return Err(CodegenError::Llvm(
                    "a register fence returned nothing".into(),
                ));
            };
            if per == 1 {
                self.b.build_store(ptrs[0], r).map_err(llvm_err)?;
                continue;
            }
            let BasicTypeEnum::FloatType(ft) = et else {
                unreachable!("checked above")
            };
            let back = self
                .b
                .build_bit_cast(r, ft.vec_type(per), "")
                .map_err(llvm_err)?
                .into_vector_value();
            for (i, p) in ptrs.iter().enumerate() {
                let x = self
                    .b
                    .build_extract_element(back, self.i32(i as i64), "")
                    .map_err(llvm_err)?;
                self.b.build_store(*p, x).map_err(llvm_err)?;
            }
        }
        Ok(())
    }

    /// Whether the kernel reads matrix operands through descriptors.
    pub(super) fn reads_descriptors(&self) -> bool {
        let mut found = false;
        rocmc_ir::loops::visit::walk(&self.g.body, &mut |s| {
            found |= matches!(s, Stmt::MatrixDesc { .. });
        });
        found
    }

    /// `count` elements of `locals[id]` from `base` as `spec.1` operands of
    /// the LLVM type `spec.0` (`<4 x half>`, `i32` holding four i8 …).
    pub(super) fn matrix_operands(
        &self,
        (id, base): &(u32, Index),
        count: u32,
        spec: (&str, u32),
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let dtype = self.g.locals[*id as usize].dtype;
        let et = ty(self.cx, dtype);
        let mut elems = Vec::new();
        for e in 0..count {
            let p = self.local_ptr(*id, &(base.clone() + Index::c(i64::from(e))))?;
            elems.push(self.b.build_load(et, p, "").map_err(llvm_err)?);
        }
        let target = llvm_type(self.cx, spec.0)?;
        let per = (count / spec.1) as usize;
        let mut out = Vec::new();
        for part in elems.chunks(per) {
            let v: BasicValueEnum = if per == 1 {
                part[0]
            } else {
                let vt = match et {
                    BasicTypeEnum::FloatType(t) => t.vec_type(per as u32),
                    BasicTypeEnum::IntType(t) => t.vec_type(per as u32),
                    _ => {
                        return Err(CodegenError::Llvm(
                            "a matrix operand of a non-scalar type".into(),
                        ))
                    }
                };
                let mut acc = vt.get_poison();
                for (i, x) in part.iter().enumerate() {
                    acc = self
                        .b
                        .build_insert_element(acc, *x, self.i32(i as i64), "")
                        .map_err(llvm_err)?;
                }
                acc.into()
            };
            out.push(if v.get_type() == target {
                v
            } else {
                self.b.build_bit_cast(v, target, "").map_err(llvm_err)?
            });
        }
        Ok(out)
    }
}

/// Whether `s` is or holds a matrix instruction.
pub(super) fn contains_matrix(s: &Stmt) -> bool {
    match s {
        Stmt::Matrix { .. } => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(contains_matrix),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).any(contains_matrix),
        _ => false,
    }
}

/// Where held-back fills may be spread ([`FnCx::interleave`]): the
/// position of the one unrolled loop of constant extent in `fast` that
/// holds matrix instructions, when every statement of `fast` is
/// [`register_only`].
pub(super) fn matrix_steps(fast: &[Stmt]) -> Option<usize> {
    if !fast.iter().all(register_only) {
        return None;
    }
    let mut at = fast.iter().enumerate().filter(|(_, s)| {
        matches!(s, Stmt::Loop { unroll: true, extent, .. } if extent.as_const().is_some_and(|e| e > 0))
            && contains_matrix(s)
    });
    match (at.next(), at.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}
