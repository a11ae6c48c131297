//! Zero-filled tile copies by range-checked loads (AMD buffer loads): a
//! fill whose W lanes are either all inside its row or all past it reads
//! one whole vector, and the hardware returns zeros for a vector past the
//! tensor. The copy then needs neither the per-lane path nor the branch to
//! it, which is most of a staged GEMM's loop on AMD when no tile divides
//! the sizes. Where a row's length is not known to be a multiple of W, the
//! loop holding such fills is versioned once on that fact.

use super::*;
use crate::CodegenError;
use rocmc_ir::loops::visit::walk;
use rocmc_ir::loops::{Addressing, Mem, Stmt};
use rocmc_ir::{DType, Expr, ExprKind, Index, TensorId};

/// Whether a fill's lanes are whole vectors of its rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Whole {
    /// Not a range-checked fill.
    No,
    /// Proven from the index and the kernel's `divisible` facts.
    Proven,
    /// When the row length (the tensor's last extent) is a multiple of W.
    IfRows,
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// How statement `stmt` stands towards a range-checked vector load
    /// ([`Self::whole_fill`]; `No` for anything but a fill).
    pub(super) fn whole(&self, stmt: &Stmt) -> Whole {
        match stmt {
            Stmt::Fill {
                value,
                width,
                zero,
                asynchronous,
                ..
            } => self.whole_fill(value, *width, *zero, *asynchronous),
            _ => Whole::No,
        }
    }

    /// How a fill of `value` stands towards a range-checked vector load:
    /// a `zero` fill from a tensor (not bools) whose last index is a known
    /// multiple of its width, in a kernel with 32-bit byte offsets, on a
    /// target with such loads.
    pub(super) fn whole_fill(
        &self,
        value: &Expr,
        width: u32,
        zero: bool,
        asynchronous: bool,
    ) -> Whole {
        let ExprKind::Load { tensor, indices } = &value.kind else {
            return Whole::No;
        };
        let w = u64::from(width);
        let bytes = w * value.dtype.size() as u64;
        let (Some(last), Some(extent)) = (indices.last(), self.k.tensor(*tensor).shape.last())
        else {
            return Whole::No;
        };
        let multiple = |d: u64| d == 0 || d.is_multiple_of(w);
        if !zero
            || asynchronous
            || !self.be.range_checked_loads()
            || self.g.addressing != Addressing::Offset32
            || value.dtype == DType::Bool
            || !matches!(bytes, 1 | 2 | 4 | 8 | 16)
            || !multiple(last.known_divisor_in(&self.divisors))
        {
            return Whole::No;
        }
        if multiple(extent.known_divisor_in(&self.divisors)) {
            Whole::Proven
        } else {
            Whole::IfRows
        }
    }

    /// Whether a fill classed `whole` is a range-checked vector load here.
    pub(super) fn range_checked(&self, whole: Whole) -> bool {
        match whole {
            Whole::No => false,
            Whole::Proven => true,
            Whole::IfRows => self.whole_rows,
        }
    }

    /// Whether every fill of a group is a range-checked load: the group
    /// is then straight-line code, with no check of its own.
    pub(super) fn group_range_checked(&self, stmts: &[Stmt]) -> bool {
        let mut all = true;
        walk(stmts, &mut |s| {
            if matches!(s, Stmt::Fill { .. }) && !self.range_checked(self.whole(s)) {
                all = false;
            }
        });
        all
    }

    /// A serial loop whose body holds fills that are whole vectors when
    /// their rows' lengths are multiples of their widths: one version of
    /// the loop for launches where they are (each fill one range-checked
    /// load), one for the rest. The test is uniform and made once.
    pub(super) fn whole_rows_loop(
        &mut self,
        body: &[Stmt],
        emit_loop: &mut dyn FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        let mut rows: Vec<(Index, u32)> = Vec::new();
        if !self.whole_rows {
            walk(body, &mut |s| {
                if self.whole(s) != Whole::IfRows {
                    return;
                }
                let Stmt::Fill { value, width, .. } = s else {
                    return;
                };
                let ExprKind::Load { tensor, .. } = &value.kind else {
                    return;
                };
                let extent = self.k.tensor(*tensor).shape.last().cloned();
                if let Some(e) = extent {
                    if !rows.contains(&(e.clone(), *width)) {
                        rows.push((e, *width));
                    }
                }
            });
        }
        if rows.is_empty() {
            return emit_loop(self);
        }
        let mut all = self.cx.bool_type().const_int(1, false);
        for (e, w) in &rows {
            let ok = self.multiple_of(e, u64::from(*w))?;
            all = self.b.build_and(all, ok, "").map_err(llvm_err)?;
        }
        let whole = self.cx.append_basic_block(self.f, "rows.whole");
        let any = self.cx.append_basic_block(self.f, "rows.any");
        let join = self.cx.append_basic_block(self.f, "rows.join");
        self.b
            .build_conditional_branch(all, whole, any)
            .map_err(llvm_err)?;
        self.b.position_at_end(whole);
        self.whole_rows = true;
        let r = emit_loop(self);
        self.whole_rows = false;
        r?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(any);
        emit_loop(self)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// Fill `tensor[indices..+width]` (a [`Self::range_checked`] one) into
    /// `mem` array `array` at `index`: the vector's byte offset where all
    /// its indices lie inside the tensor, else the tensor's size, whose
    /// load reads zeros.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_range_checked(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        tensor: TensorId,
        indices: &[Index],
        dt: DType,
        width: u32,
    ) -> R<()> {
        let vt = self.fill_vector_type(dt, width).ok_or_else(|| {
            CodegenError::Llvm("a range-checked fill without a vector type (a rocmc bug)".into())
        })?;
        let inside = self
            .fill_inside(tensor, indices, width, true)?
            .ok_or_else(|| {
                CodegenError::Llvm("a range-checked fill of a scalar (a rocmc bug)".into())
            })?;
        let i32t = self.cx.i32_type();
        let i64t = self.cx.i64_type();
        // Offset32 addressing proves every byte offset of the tensor, and
        // its size, below 2^32.
        let mut size = i32t.const_int(dt.size() as u64, false);
        for e in &self.k.tensor(tensor).shape {
            let n = self.index(e)?;
            size = self.b.build_int_nuw_mul(size, n, "").map_err(llvm_err)?;
        }
        let base = self.bufs[&tensor];
        // Out of range the address's no-wrap flags make it poison; the
        // select below never takes it there.
        let p = self.address(tensor, indices)?;
        let pi = self.b.build_ptr_to_int(p, i64t, "").map_err(llvm_err)?;
        let bi = self.b.build_ptr_to_int(base, i64t, "").map_err(llvm_err)?;
        let off = self.b.build_int_sub(pi, bi, "").map_err(llvm_err)?;
        let off = self.b.build_int_truncate(off, i32t, "").map_err(llvm_err)?;
        let off = self
            .b
            .build_select(inside, off, size, "")
            .map_err(llvm_err)?
            .into_int_value();
        let bytes = width * dt.size() as u32;
        let raw = self
            .be
            .range_checked_load(&self.ctx(), base, size, off, bytes)?;
        let v = self.b.build_bit_cast(raw, vt, "").map_err(llvm_err)?;
        self.fill_store_vector(mem, array, index, dt, width, v)
    }
}
