//! Tensor copies and mbarriers ([`Stmt::TensorCopy`], [`Stmt::Mbarrier`]):
//! issued by the work-group's first thread where the target has the tensor
//! memory accelerator; elsewhere the copies' fills run and the mbarriers
//! are nothing.

use super::*;
use crate::backend::MbarrierOp;
use inkwell::IntPredicate;
use rocmc_ir::loops::{Mbarrier, Stmt};
use rocmc_ir::schedule::Dim;
use rocmc_ir::schedule::GpuAxis;
use rocmc_ir::Index;

/// Bytes of one tensor map (CUDA's `CUtensorMap`).
const TENSOR_MAP_BYTES: u64 = 128;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// Whether this kernel issues its tensor copies (the target has the
    /// accelerator and the kernel its maps).
    fn issues_tensor_copies(&self) -> bool {
        self.tensor_maps.is_some()
    }

    /// `then` run by thread (0, 0, 0) of the work-group alone.
    fn first_thread(&mut self, then: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let mut first = None;
        for d in [Dim::X, Dim::Y, Dim::Z] {
            let t = self.be.axis_index(&self.ctx(), GpuAxis::Thread(d))?;
            let z = self
                .b
                .build_int_compare(IntPredicate::EQ, t, self.i32(0), "")
                .map_err(llvm_err)?;
            first = Some(match first {
                None => z,
                Some(f) => self.b.build_and(f, z, "").map_err(llvm_err)?,
            });
        }
        self.when(first.expect("three axes"), then)
    }

    /// A [`Stmt::TensorCopy`]: its boxes issued by the first thread, or
    /// its fills.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tensor_copy(
        &mut self,
        map: u32,
        coords: &[Index],
        boxes: u32,
        shared: u32,
        start: &Index,
        bar: &(u32, Index),
        fills: &[Stmt],
    ) -> R<()> {
        let Some(maps) = self.tensor_maps else {
            return self.body(fills);
        };
        let boxed = &self.g.tensor_maps[map as usize].boxed;
        let box_elems: i64 = boxed.iter().map(|b| i64::from(*b)).product();
        let inner = i64::from(*boxed.last().expect("a box has dimensions"));
        // The accelerator takes coordinates innermost first.
        let mut at: Vec<IntValue<'ctx>> = Vec::new();
        for c in coords.iter().rev() {
            at.push(self.index(c)?);
        }
        let bar_ptr = self.shared_ptr(bar.0, &bar.1)?;
        let offset = self.i32(i64::from(map) * TENSOR_MAP_BYTES as i64);
        // SAFETY: map `map` lies inside the array of maps the runtime passes.
        let map_ptr = unsafe { self.b.build_gep(self.cx.i8_type(), maps, &[offset], "") }
            .map_err(llvm_err)?;
        let mut dsts = Vec::new();
        for b in 0..i64::from(boxes) {
            dsts.push(self.shared_ptr(shared, &(start.clone() + Index::c(b * box_elems)))?);
        }
        self.first_thread(|fc| {
            for (b, dst) in dsts.into_iter().enumerate() {
                let mut c = at.clone();
                c[0] =
                    fc.b.build_int_add(at[0], fc.i32(b as i64 * inner), "")
                        .map_err(llvm_err)?;
                fc.be.tensor_copy(&fc.ctx(), dst, map_ptr, &c, bar_ptr)?;
            }
            Ok(())
        })
    }

    /// A [`Stmt::Mbarrier`]; nothing where copies complete at once.
    pub(super) fn mbarrier(&mut self, m: &Mbarrier) -> R<()> {
        if !self.issues_tensor_copies() {
            return Ok(());
        }
        let bar = self.shared_ptr(m.bar().0, &m.bar().1)?;
        match m {
            Mbarrier::Init { .. } => self.first_thread(|fc| {
                fc.be
                    .mbarrier(&fc.ctx(), MbarrierOp::Init, bar, None)
                    .map(|_| ())
            }),
            Mbarrier::Inval { .. } => self.first_thread(|fc| {
                fc.be
                    .mbarrier(&fc.ctx(), MbarrierOp::Inval, bar, None)
                    .map(|_| ())
            }),
            Mbarrier::Expect { bytes, .. } => {
                let n = self.i32(i64::from(*bytes));
                self.first_thread(|fc| {
                    fc.be
                        .mbarrier(&fc.ctx(), MbarrierOp::Expect, bar, Some(n))
                        .map(|_| ())
                })
            }
            Mbarrier::Wait { parity, .. } => {
                let parity = self.index(parity)?;
                let test = self.cx.append_basic_block(self.f, "mbarrier.wait");
                let done = self.cx.append_basic_block(self.f, "mbarrier.done");
                self.b.build_unconditional_branch(test).map_err(llvm_err)?;
                self.b.position_at_end(test);
                let ok = self
                    .be
                    .mbarrier(&self.ctx(), MbarrierOp::TryWait, bar, Some(parity))?
                    .ok_or_else(|| {
                        crate::CodegenError::Llvm("mbarrier wait without a result".into())
                    })?;
                self.b
                    .build_conditional_branch(ok, done, test)
                    .map_err(llvm_err)?;
                self.b.position_at_end(done);
                Ok(())
            }
        }
    }
}
