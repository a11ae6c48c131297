//! Statements: a body, each statement, runs of stores merged into vector
//! stores, and the leaves (stores, scatters, barriers) a target may emit itself.

use super::fill::fill_group_size;
use super::pack::byte_pack_run;
use super::*;
use crate::CodegenError;
use rocmc_ir::loops::Stmt;
use rocmc_ir::{DType, Expr, Index};
use std::collections::HashMap;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    pub(crate) fn body(&mut self, stmts: &[Stmt]) -> R<()> {
        let mut i = 0;
        while i < stmts.len() {
            if self.be.packs_bytes() {
                let n = byte_pack_run(&self.g.locals, &stmts[i..], &self.divisors);
                if n > 0 {
                    self.byte_pack(&stmts[i..i + n])?;
                    i += n;
                    continue;
                }
            }
            if self.lane_align.is_some() && self.lane_vector_store(&stmts[i])? {
                i += 1;
                continue;
            }
            let width = if self.be.vector_stores() {
                store_run(&stmts[i..], &self.divisors)
            } else {
                0
            };
            if width >= 2 {
                self.store_vector(&stmts[i..i + width])?;
                i += width;
            } else {
                self.stmt(&stmts[i])?;
                i += 1;
            }
        }
        Ok(())
    }

    /// One statement of a body.
    pub(super) fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Bind { var, axis } => {
                let v = self.be.axis_index(&self.ctx(), *axis)?;
                self.vars[var.0 as usize] = Some(v);
            }
            Stmt::Loop {
                var,
                extent,
                unroll: true,
                body,
            } => {
                let n = extent.as_const().ok_or_else(|| {
                    CodegenError::Llvm("unrolled loop with a symbolic extent (a rocmc bug)".into())
                })?;
                for i in 0..n {
                    self.vars[var.0 as usize] = Some(self.i32(i));
                    self.body(body)?;
                }
                self.vars[var.0 as usize] = None;
            }
            Stmt::Loop {
                var,
                extent,
                unroll: false,
                body,
            } => self.serial_loop(*var, extent, body)?,
            Stmt::If { guards, body } if fill_group_size(body) >= 2 => {
                self.guarded(guards, |me| me.fill_group(body))?
            }
            Stmt::If { guards, body } => self.guarded(guards, |me| me.body(body))?,
            Stmt::Barrier => {
                if self.reads_descriptors() {
                    self.be.async_proxy_fence(&self.ctx())?;
                }
                self.be.barrier(&self.ctx())?
            }
            Stmt::AsyncCommit => self.be.async_commit(&self.ctx())?,
            Stmt::AsyncWait { pending } => self.be.async_wait(&self.ctx(), *pending)?,
            Stmt::Unswitch { guards, fast, slow } => self.unswitch(guards, fast, slow)?,
            Stmt::Matrix {
                instr,
                acc,
                a,
                desc: Some(desc),
                ..
            } if instr.warpgroup() => self.group_matrix(instr, a, desc, acc)?,
            Stmt::Matrix { instr, .. } if instr.warpgroup() => {
                return Err(CodegenError::Llvm(format!(
                    "{} without its operands' descriptors (a rocmc bug)",
                    instr.name
                )))
            }
            Stmt::Matrix {
                instr, a, b, acc, ..
            } => self.matrix(instr, a, b, acc)?,
            Stmt::MatrixDesc {
                local,
                index,
                shared,
                start,
                mn_block,
                row_bytes,
                stores,
            } => self.matrix_desc(
                *local,
                index,
                *shared,
                start,
                (*mn_block, *row_bytes),
                stores,
            )?,
            Stmt::MatrixAsync(op) => self.matrix_async(*op)?,
            Stmt::TensorCopy {
                map,
                coords,
                boxes,
                shared,
                start,
                bar,
                fills,
                ..
            } => self.tensor_copy(*map, coords, *boxes, *shared, start, bar, fills)?,
            Stmt::Mbarrier(m) => self.mbarrier(m)?,
            Stmt::Shuffle {
                local,
                index,
                value,
                mask,
                lane,
                width,
                ..
            } => {
                let v = self.expr(value)?.into_float_value();
                let lane = self.index(lane)?;
                let got = self.be.lane_xor(&self.ctx(), v, lane, *mask, *width)?;
                let p = self.local_ptr(*local, index)?;
                self.b.build_store(p, got).map_err(llvm_err)?;
            }
            Stmt::MatrixLoad {
                shared,
                row,
                count,
                trans,
                stores,
            } => self.matrix_load(*shared, row, *count, *trans, stores)?,
            leaf @ (Stmt::Store { .. }
            | Stmt::Scatter { .. }
            | Stmt::LocalStore { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Fill { .. }) => self.leaf(leaf)?,
        }
        Ok(())
    }

    /// A run of W stores to consecutive elements of one row
    /// ([`store_run`]), each maybe under its own guards: where every guard
    /// holds and the row's first element is aligned to the whole vector,
    /// one W-wide store; else each store as written. Alignment comes from
    /// the index ([`Self::fill_aligned_known`]): only the row length and the
    /// base are tested, and both are loop-invariant.
    pub(super) fn store_vector(&mut self, run: &[Stmt]) -> R<()> {
        let (guards, stores): (Vec<_>, Vec<_>) = run.iter().filter_map(guarded_store).unzip();
        let values: Vec<&Expr> = stores
            .iter()
            .filter_map(|s| match s {
                Stmt::Store { value, .. } => Some(value),
                _ => None,
            })
            .collect();
        let (tensor, indices, dt) = match (stores.first(), values.first()) {
            (
                Some(Stmt::Store {
                    tensor, indices, ..
                }),
                Some(v),
            ) => (*tensor, indices, v.dtype),
            _ => {
                return Err(CodegenError::Llvm(
                    "an empty store run (a rocmc bug)".into(),
                ))
            }
        };
        let width = run.len() as u32;
        // Guards that differ only in their constant (a row's columns:
        // `v < e`, `v + 1 < e`, ..) all hold when `v < e - (max - min)`
        // does: one comparison against the lowest value, which the first
        // store's address needs anyway. (One per element made LLVM keep
        // each element's offset live from before the k loop, and ptxas
        // spill.)
        let mut groups: Vec<(&rocmc_ir::schedule::Guard, HashMap<Index, i64>, i64, i64)> =
            Vec::new();
        for g in guards.into_iter().flatten() {
            let (terms, c) = g.value.affine();
            match groups
                .iter_mut()
                .find(|(h, t, ..)| h.extent == g.extent && *t == terms)
            {
                Some(same) => {
                    if c < same.2 {
                        same.0 = g;
                    }
                    same.2 = same.2.min(c);
                    same.3 = same.3.max(c);
                }
                None => groups.push((g, terms, c, c)),
            }
        }
        let all: Vec<rocmc_ir::schedule::Guard> = groups
            .into_iter()
            .map(|(g, _, lo, hi)| rocmc_ir::schedule::Guard {
                value: g.value.clone(),
                extent: if hi == lo {
                    g.extent.clone()
                } else {
                    g.extent.clone() - Index::c(hi - lo)
                },
            })
            .collect();
        let vt = self.fill_vector_type(dt, width).ok_or_else(|| {
            CodegenError::Llvm("a store run without a vector type (a rocmc bug)".into())
        })?;
        let aligned = self
            .fill_aligned_known(tensor, indices, dt, width)?
            .ok_or_else(|| {
                CodegenError::Llvm("a store run not known to be aligned (a rocmc bug)".into())
            })?;
        let inside = self.all_hold(&all)?;
        let ok = self.b.build_and(inside, aligned, "").map_err(llvm_err)?;
        self.if_else(
            ok,
            ["store.vector", "store.each", "store.join"],
            |me| {
                let mut acc = vt.into_vector_type().get_poison();
                for (l, value) in values.iter().enumerate() {
                    let v = me.expr(value)?;
                    let v = me.to_mem(value.dtype, v)?;
                    acc =
                        me.b.build_insert_element(acc, v, me.i32(l as i64), "")
                            .map_err(llvm_err)?;
                }
                let p = me.address(tensor, indices)?;
                let st = me.b.build_store(p, acc).map_err(llvm_err)?;
                st.set_alignment(width * dt.size() as u32).map_err(llvm_err)
            },
            |me| run.iter().try_for_each(|s| me.stmt(s)),
        )
    }

    /// A leaf statement: a store to a tensor or to a local array, a scatter.
    pub(crate) fn leaf(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                let v = self.to_mem(value.dtype, v)?;
                let p = self.address(*tensor, indices)?;
                let st = self.b.build_store(p, v).map_err(llvm_err)?;
                let align = self.access_alignment(*tensor, indices, value.dtype);
                st.set_alignment(align).map_err(llvm_err)?;
            }
            Stmt::LocalStore {
                local,
                index,
                value,
            } => {
                let v = self.expr(value)?;
                let p = self.local_ptr(*local, index)?;
                self.b.build_store(p, v).map_err(llvm_err)?;
            }
            Stmt::SharedStore {
                shared,
                index,
                value,
            } => {
                let v = self.expr(value)?;
                let p = self.shared_ptr(*shared, index)?;
                self.b.build_store(p, v).map_err(llvm_err)?;
            }
            Stmt::Fill {
                mem,
                array,
                index,
                value,
                width,
                asynchronous,
                zero,
            } => self.fill(*mem, *array, index, value, *width, *asynchronous, *zero)?,
            Stmt::Scatter {
                tensor,
                indices,
                op,
                value,
                shared,
            } => self.scatter(*tensor, indices, *op, value, *shared)?,
            _ => {
                return Err(CodegenError::Llvm(
                    "not a leaf statement (a rocmc bug)".into(),
                ))
            }
        }
        Ok(())
    }
}

/// Whether `s` is or holds a barrier.
/// A store to a tensor, alone or as the whole body of an `If`, with the
/// `If`'s guards.
pub(super) fn guarded_store(s: &Stmt) -> Option<(&[rocmc_ir::schedule::Guard], &Stmt)> {
    match s {
        Stmt::Store { .. } => Some((&[], s)),
        Stmt::If { guards, body } => match body.as_slice() {
            [st @ Stmt::Store { .. }] => Some((guards.as_slice(), st)),
            _ => None,
        },
        _ => None,
    }
}

/// How many of the statements at the start of `stmts` (4 or 2; 0 for none)
/// store one vector's worth of consecutive elements of a tensor row: the
/// same tensor, dtype and leading indices, last indices `c, c + 1, ..`
/// with `c` a known multiple of the count (so the row length and base
/// decide the alignment), and no value reading that tensor (the stores
/// then commute with each other's loads). Each may sit under its own
/// guards; [`FnCx::store_vector`] checks them all before the vector store.
pub(super) fn store_run(stmts: &[Stmt], size_divisors: &[u64]) -> usize {
    let run: Vec<&Stmt> = stmts
        .iter()
        .take(4)
        .map_while(|s| guarded_store(s).map(|(_, st)| st))
        .collect();
    let Some(Stmt::Store {
        tensor,
        indices,
        value,
    }) = run.first()
    else {
        return 0;
    };
    let Some((last, lead)) = indices.split_last() else {
        return 0;
    };
    if value.dtype == DType::Bool {
        return 0;
    }
    let (terms, c0) = last.affine();
    let mut n = 0;
    for (l, s) in run.iter().enumerate() {
        let Stmt::Store {
            tensor: t,
            indices: ix,
            value: v,
        } = s
        else {
            break;
        };
        let mut reads = false;
        v.visit_tensors(&mut |lt| reads |= lt == *tensor);
        let next = ix.split_last().is_some_and(|(x, rest)| {
            let (tx, cx) = x.affine();
            rest == lead && tx == terms && cx == c0 + l as i64
        });
        if *t != *tensor || v.dtype != value.dtype || reads || !next {
            break;
        }
        n += 1;
    }
    let d = last.known_divisor_in(size_divisors);
    [4, 2]
        .into_iter()
        .find(|&w| n >= w && (d == 0 || d % w as u64 == 0))
        .unwrap_or(0)
}

/// Whether `s` only reads memory and writes registers: no barrier, wait,
/// commit, fill or store to a tensor or to LDS anywhere inside.
pub(super) fn register_only(s: &Stmt) -> bool {
    match s {
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().all(register_only),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).all(register_only),
        Stmt::MatrixLoad { stores, .. } | Stmt::MatrixDesc { stores, .. } => {
            stores.iter().all(register_only)
        }
        Stmt::LocalStore { .. } | Stmt::Matrix { .. } | Stmt::Shuffle { .. } => true,
        _ => false,
    }
}
