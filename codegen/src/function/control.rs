//! Control flow: serial and counted loops, loop versioning (a fast copy
//! without guards beside a guarded one), unswitching, guards and branches.

use super::fill::fill_group_size;
use super::matrix::{contains_matrix, matrix_steps};
use super::*;
use crate::CodegenError;
use inkwell::basic_block::BasicBlock;
use inkwell::values::IntValue;
use inkwell::IntPredicate;
use rocmc_ir::loops::Stmt;
use rocmc_ir::Index;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    pub(super) fn serial_loop(
        &mut self,
        var: rocmc_ir::VarId,
        extent: &Index,
        body: &[Stmt],
    ) -> R<()> {
        let n = self.index(extent)?;
        let name = self.g.vars[var.0 as usize].name.clone();
        self.whole_rows_loop(body, &mut |me| {
            me.counted_loop(n, &name, |me, i| {
                me.vars[var.0 as usize] = Some(i);
                me.versioned_body(body)
            })?;
            me.vars[var.0 as usize] = None;
            Ok(())
        })
    }

    /// A loop body with several conditional statements after its last
    /// barrier or wait (a staged tile's guarded copies, the compute's
    /// unswitch on a whole tile): where every condition holds on every
    /// lane of the wave, one straight-line version takes the likely side
    /// of each (a group of fills its vector copies), else the body as
    /// written. The conditions are pure index comparisons, so evaluating
    /// them up front changes nothing but the branches. The choice is the
    /// wave's, never a lane's, because both sides hold wave-wide
    /// instructions (ldmatrix, mma.sync) that every lane must reach
    /// together; and no barrier is inside, so lanes of different waves
    /// may choose differently.
    pub(crate) fn versioned_body(&mut self, stmts: &[Stmt]) -> R<()> {
        let split = stmts
            .iter()
            .rposition(|s| matches!(s, Stmt::Barrier | Stmt::AsyncWait { .. }))
            .map_or(0, |i| i + 1);
        let (head, tail) = stmts.split_at(split);
        // Warpgroup instructions need one version for all four warps (the
        // choice here is each warp's), and a join of two versions makes LLVM
        // copy their accumulators while a group is in flight.
        if !self.be.versions_loop_bodies()
            || conditionals(tail) < 2
            || tail.iter().any(has_barrier)
            || self.reads_descriptors()
        {
            return self.body(stmts);
        }
        self.body(head)?;
        let mut all = self.cx.bool_type().const_int(1, false);
        for s in tail {
            let c = match s {
                Stmt::If { guards, body } => {
                    let g = self.all_hold(guards)?;
                    if fill_group_size(body) >= 2 {
                        let ok = self.fill_group_ok(body)?;
                        self.b.build_and(g, ok, "").map_err(llvm_err)?
                    } else {
                        g
                    }
                }
                Stmt::Unswitch { guards, .. } => self.all_hold(guards)?,
                _ => continue,
            };
            all = self.b.build_and(all, c, "").map_err(llvm_err)?;
        }
        let all = self.be.wave_all(&self.ctx(), all)?;
        self.if_else(
            all,
            ["straight", "general", "rejoin"],
            |me| me.straight_body(tail),
            |me| me.body(tail),
        )
    }

    /// The straight-line side of [`Self::versioned_body`]. A group of
    /// asynchronous fills followed (past its commit) by an unswitch whose
    /// fast side is an unrolled loop of matrix steps is spread over that
    /// loop's iterations, a share before each iteration's matrix
    /// instructions, with the commit after the loop: the copies then
    /// queue behind the fragment loads a few at a time instead of filling
    /// the load/store queue at once, whose stalled operand reads held up
    /// the registers they free. An asynchronous fill may complete any time
    /// before the next wait, so moving it later past statements that
    /// neither wait, commit, synchronise nor write memory changes nothing
    /// the kernel may observe.
    pub(super) fn straight_body(&mut self, stmts: &[Stmt]) -> R<()> {
        let mut held: Option<&[Stmt]> = None;
        let mut commit = false;
        for s in stmts {
            match s {
                Stmt::If { body, .. }
                    if held.is_none() && fill_group_size(body) >= 2 && all_async(body) =>
                {
                    held = Some(body)
                }
                Stmt::If { body, .. } if fill_group_size(body) >= 2 => {
                    self.fill_group_vector(body)?
                }
                Stmt::AsyncCommit if held.is_some() && !commit => commit = true,
                Stmt::Unswitch { fast, .. } => match (held, matrix_steps(fast)) {
                    (Some(fills), Some(at)) if commit => {
                        self.interleave(fast, at, fills)?;
                        self.be.async_commit(&self.ctx())?;
                        (held, commit) = (None, false);
                    }
                    _ => {
                        self.release(&mut held, &mut commit)?;
                        self.body(fast)?
                    }
                },
                s => {
                    self.release(&mut held, &mut commit)?;
                    match s {
                        Stmt::If { body, .. } => self.body(body)?,
                        s => self.body(std::slice::from_ref(s))?,
                    }
                }
            }
        }
        self.release(&mut held, &mut commit)
    }

    /// Emits fills held back by [`Self::straight_body`], and their commit.
    pub(super) fn release(&mut self, held: &mut Option<&[Stmt]>, commit: &mut bool) -> R<()> {
        if let Some(fills) = held.take() {
            self.fill_group_vector(fills)?;
        }
        if std::mem::take(commit) {
            self.be.async_commit(&self.ctx())?;
        }
        Ok(())
    }

    /// `fast` with the vector fills of `fills` spread over its unrolled
    /// loop at `at` ([`matrix_steps`]): an equal share before the first
    /// matrix instruction of each iteration.
    pub(super) fn interleave(&mut self, fast: &[Stmt], at: usize, fills: &[Stmt]) -> R<()> {
        let Stmt::Loop {
            var, extent, body, ..
        } = &fast[at]
        else {
            return Err(CodegenError::Llvm(
                "matrix steps that are not a loop (a rocmc bug)".into(),
            ));
        };
        let steps = extent.as_const().unwrap_or(1).max(1) as usize;
        let share = fill_group_size(fills).div_ceil(steps);
        self.body(&fast[..at])?;
        for i in 0..steps {
            self.vars[var.0 as usize] = Some(self.i32(i as i64));
            let mut sent = false;
            for s in body {
                if !sent && contains_matrix(s) {
                    self.fill_group_range(fills, i * share..(i + 1) * share)?;
                    sent = true;
                }
                self.body(std::slice::from_ref(s))?;
            }
            if !sent {
                self.fill_group_range(fills, i * share..(i + 1) * share)?;
            }
        }
        self.vars[var.0 as usize] = None;
        self.body(&fast[at + 1..])
    }

    /// `for i in 0..n { body(i) }` with an i32 counter.
    pub(crate) fn counted_loop(
        &mut self,
        n: IntValue<'ctx>,
        name: &str,
        body: impl FnOnce(&mut Self, IntValue<'ctx>) -> R<()>,
    ) -> R<()> {
        let pre: BasicBlock = self.b.get_insert_block().expect("positioned");
        let header = self.cx.append_basic_block(self.f, "loop");
        let inner = self.cx.append_basic_block(self.f, "body");
        let exit = self.cx.append_basic_block(self.f, "exit");
        self.b
            .build_unconditional_branch(header)
            .map_err(llvm_err)?;
        self.b.position_at_end(header);
        let phi = self
            .b
            .build_phi(self.cx.i32_type(), name)
            .map_err(llvm_err)?;
        let i = phi.as_basic_value().into_int_value();
        let c = self
            .b
            .build_int_compare(IntPredicate::ULT, i, n, "")
            .map_err(llvm_err)?;
        self.b
            .build_conditional_branch(c, inner, exit)
            .map_err(llvm_err)?;
        self.b.position_at_end(inner);
        body(self, i)?;
        let next = self
            .b
            .build_int_nuw_add(i, self.i32(1), "")
            .map_err(llvm_err)?;
        let latch = self.b.get_insert_block().expect("positioned");
        self.b
            .build_unconditional_branch(header)
            .map_err(llvm_err)?;
        phi.add_incoming(&[(&self.i32(0), pre), (&next, latch)]);
        self.b.position_at_end(exit);
        Ok(())
    }

    /// `AND` of every guard, as an i1.
    pub(crate) fn all_hold(&self, guards: &[rocmc_ir::schedule::Guard]) -> R<IntValue<'ctx>> {
        let mut cond = self.cx.bool_type().const_int(1, false);
        for g in guards {
            let c = self.less_than(&g.value, &g.extent)?;
            cond = self.b.build_and(cond, c, "").map_err(llvm_err)?;
        }
        Ok(cond)
    }

    /// Runs `fast` when every guard holds, else `slow`.
    pub(super) fn unswitch(
        &mut self,
        guards: &[rocmc_ir::schedule::Guard],
        fast: &[Stmt],
        slow: &[Stmt],
    ) -> R<()> {
        let mut cond = self.all_hold(guards)?;
        let la = match self.lane_alignment(fast)? {
            Some((aligned, la)) => {
                cond = self.b.build_and(cond, aligned, "").map_err(llvm_err)?;
                Some(la)
            }
            None => None,
        };
        let uniform = la.is_none() && self.uniform(guards);
        self.versions(
            cond,
            uniform,
            ["vector", "scalar", "join"],
            |me| match la {
                Some(la) => {
                    let outer = me.lane_align.replace(la);
                    let r = me.body(fast);
                    me.lane_align = outer;
                    r
                }
                None => me.body(fast),
            },
            |me| me.body(slow),
        )
    }

    /// Runs `fast` when `cond` (an i1) holds, else `general`, which is
    /// correct either way. Where the target chooses for the whole wave
    /// ([`Backend::versions_by_wave`]), the branch names the general side
    /// first: AMDGPU's structurizer then lays the fast side out first, so
    /// no load of the general side is in flight when the fast side's loads
    /// reuse its registers (with the fast side second, each waited for
    /// every load before it: bench/amd, layernorm on gfx1100). A
    /// condition the same on every lane (`uniform`) is branched on as it
    /// is: a ballot of it would only cost vector instructions.
    pub(super) fn versions(
        &mut self,
        cond: IntValue<'ctx>,
        uniform: bool,
        names: [&str; 3],
        fast: impl FnOnce(&mut Self) -> R<()>,
        general: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        if uniform || !self.be.versions_by_wave() {
            return self.if_else(cond, names, fast, general);
        }
        let some_fail = self.be.wave_some_fail(&self.ctx(), cond)?;
        self.if_else(some_fail, [names[1], names[0], names[2]], general, fast)
    }

    /// Whether `guards` are the same on every lane of a work-group: they
    /// name no variable that differs between its threads
    /// ([`lane_varying`]).
    pub(super) fn uniform(&self, guards: &[rocmc_ir::schedule::Guard]) -> bool {
        let on = &self.lane_varying;
        !guards
            .iter()
            .any(|g| names_any(&g.value, on) || names_any(&g.extent, on))
    }

    /// Runs `then` when `cond` (an i1) is true, else `otherwise`; `names`
    /// names the two blocks and the join.
    pub(super) fn if_else(
        &mut self,
        cond: IntValue<'ctx>,
        names: [&str; 3],
        then: impl FnOnce(&mut Self) -> R<()>,
        otherwise: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let yes = self.cx.append_basic_block(self.f, names[0]);
        let no = self.cx.append_basic_block(self.f, names[1]);
        let join = self.cx.append_basic_block(self.f, names[2]);
        self.b
            .build_conditional_branch(cond, yes, no)
            .map_err(llvm_err)?;
        self.b.position_at_end(yes);
        then(self)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(no);
        otherwise(self)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// Runs `then` when every guard holds.
    pub(crate) fn guarded(
        &mut self,
        guards: &[rocmc_ir::schedule::Guard],
        then: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let cond = self.all_hold(guards)?;
        self.when(cond, then)
    }

    /// Runs `then` when `cond` (an i1) is true.
    pub(crate) fn when(
        &mut self,
        cond: IntValue<'ctx>,
        then: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let yes = self.cx.append_basic_block(self.f, "then");
        let join = self.cx.append_basic_block(self.f, "join");
        self.b
            .build_conditional_branch(cond, yes, join)
            .map_err(llvm_err)?;
        self.b.position_at_end(yes);
        then(self)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(join);
        Ok(())
    }
}

pub(super) fn has_barrier(s: &Stmt) -> bool {
    match s {
        Stmt::Barrier => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(has_barrier),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).any(has_barrier),
        _ => false,
    }
}

/// Whether every fill of a group is asynchronous.
pub(super) fn all_async(stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Loop { body, .. } => all_async(body),
        Stmt::Fill { asynchronous, .. } => *asynchronous,
        _ => false,
    })
}

/// How many statements at the top level of `stmts` run under a condition
/// ([`FnCx::versioned_body`]).
pub(super) fn conditionals(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .filter(|s| matches!(s, Stmt::If { .. } | Stmt::Unswitch { .. }))
        .count()
}

/// The variables of `g` that may differ between the threads of a
/// work-group, by number: those bound to a thread index, and loops whose
/// extent names one.
pub(crate) fn lane_varying(g: &rocmc_ir::loops::GpuKernel) -> Vec<bool> {
    let mut on = vec![false; g.vars.len()];
    rocmc_ir::loops::visit::walk(&g.body, &mut |s| match s {
        Stmt::Bind {
            var,
            axis: rocmc_ir::schedule::GpuAxis::Thread(_),
        } => on[var.0 as usize] = true,
        Stmt::Loop { var, extent, .. } => on[var.0 as usize] |= names_any(extent, &on),
        _ => {}
    });
    on
}

/// Whether `i` names a variable marked in `on` (by number).
fn names_any(i: &Index, on: &[bool]) -> bool {
    match i {
        Index::Var(v) => on[v.0 as usize],
        Index::Bin(_, a, b) => names_any(a, on) || names_any(b, on),
        Index::Const(_) | Index::Size(_) => false,
    }
}
