//! The host CPU's kernel body: work-groups become loops, and the threads
//! of a work-group run in lockstep. Loops (whose trip counts never depend
//! on the thread) stay loops, and every leaf statement runs in a loop over
//! the block's threads, under the guards that enclose it. Lockstep is one
//! legal interleaving of the GPU's threads, and it keeps barrier semantics
//! for free. Per-thread arrays get one slice per thread.

use crate::function::pack::byte_pack_run;
use crate::function::{llvm_err, FnCx, R};
use inkwell::types::BasicType;
use inkwell::values::IntValue;
use inkwell::IntPredicate;
use rocmc_ir::loops::Stmt;
use rocmc_ir::schedule::{GpuAxis, Guard};
use rocmc_ir::VarId;

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// Emits the whole kernel: a loop over the work-groups of its range
    /// around the body.
    pub(crate) fn host_kernel(&mut self, contract: bool) -> R<()> {
        self.contract = contract;
        let grid: Vec<IntValue<'ctx>> = self
            .g
            .grid
            .iter()
            .map(|e| self.index(e))
            .collect::<R<_>>()?;
        let i64t = self.cx.i64_type();
        let b = &self.b;
        let wide = |v: IntValue<'ctx>| b.build_int_z_extend(v, i64t, "").map_err(llvm_err);
        let (gx, gy, gz) = (wide(grid[0])?, wide(grid[1])?, wide(grid[2])?);
        let gxy = b.build_int_nuw_mul(gx, gy, "").map_err(llvm_err)?;
        let total = b.build_int_nuw_mul(gxy, gz, "groups").map_err(llvm_err)?;
        let param = |i: u32| {
            self.f
                .get_nth_param(i)
                .expect("five parameters")
                .into_int_value()
        };
        let (first, count) = (param(3), param(4));
        // end = first + min(count, total - first), computed without overflow
        // (count may be i64::MAX: "to the end").
        let first_ok = b
            .build_int_compare(IntPredicate::ULT, first, total, "")
            .map_err(llvm_err)?;
        let room = b.build_int_sub(total, first, "").map_err(llvm_err)?;
        let room = b
            .build_select(first_ok, room, i64t.const_zero(), "")
            .map_err(llvm_err)?
            .into_int_value();
        let less = b
            .build_int_compare(IntPredicate::ULT, count, room, "")
            .map_err(llvm_err)?;
        let n = b
            .build_select(less, count, room, "n")
            .map_err(llvm_err)?
            .into_int_value();
        let whole = self.locals.clone();
        let pre = b.get_insert_block().expect("positioned");
        let header = self.cx.append_basic_block(self.f, "groups");
        let inner = self.cx.append_basic_block(self.f, "group");
        let exit = self.cx.append_basic_block(self.f, "done");
        b.build_unconditional_branch(header).map_err(llvm_err)?;
        b.position_at_end(header);
        let phi = b.build_phi(i64t, "i").map_err(llvm_err)?;
        let i = phi.as_basic_value().into_int_value();
        let go = b
            .build_int_compare(IntPredicate::ULT, i, n, "")
            .map_err(llvm_err)?;
        b.build_conditional_branch(go, inner, exit)
            .map_err(llvm_err)?;
        b.position_at_end(inner);
        let g = b.build_int_nuw_add(first, i, "").map_err(llvm_err)?;
        let narrow = |v: IntValue<'ctx>| {
            b.build_int_truncate(v, self.cx.i32_type(), "")
                .map_err(llvm_err)
        };
        let bx = narrow(b.build_int_unsigned_rem(g, gx, "").map_err(llvm_err)?)?;
        let rest = b.build_int_unsigned_div(g, gx, "").map_err(llvm_err)?;
        let by = narrow(b.build_int_unsigned_rem(rest, gy, "").map_err(llvm_err)?)?;
        let bz = narrow(b.build_int_unsigned_div(g, gxy, "").map_err(llvm_err)?)?;
        let mut st = Lockstep {
            block: [bx, by, bz],
            threads: Vec::new(),
            guards: Vec::new(),
            negated: Vec::new(),
            whole,
        };
        self.host_body(&self.g.body.clone(), &mut st)?;
        let latch = self.b.get_insert_block().expect("positioned");
        let next = self
            .b
            .build_int_nuw_add(i, i64t.const_int(1, false), "")
            .map_err(llvm_err)?;
        self.b
            .build_unconditional_branch(header)
            .map_err(llvm_err)?;
        phi.add_incoming(&[(&i64t.const_zero(), pre), (&next, latch)]);
        self.b.position_at_end(exit);
        self.b.build_return(None).map_err(llvm_err)?;
        Ok(())
    }

    fn host_body(&mut self, stmts: &[Stmt], st: &mut Lockstep<'ctx>) -> R<()> {
        let mut rest = stmts;
        while let Some(s) = rest.first() {
            // A run of register stores: each thread's writes are its own and
            // nothing in the run writes memory another thread reads, so one
            // loop over the threads running the whole run is lockstep's
            // meaning too, and far fewer loops for LLVM (flash's register
            // softmax has hundreds per tile).
            let run = rest
                .iter()
                .take_while(|s| matches!(s, Stmt::LocalStore { .. }))
                .count();
            if run > 1 {
                self.leaves_for_threads(&rest[..run], st)?;
                rest = &rest[run..];
                continue;
            }
            // LDS stores of register bytes: each thread's words, as the
            // GPU packs them; they read registers only, so the threads'
            // runs commute as single stores do.
            let packed = if self.be.packs_bytes() {
                byte_pack_run(&self.g.locals, rest, &self.divisors)
            } else {
                0
            };
            if packed > 0 {
                self.packed_for_threads(&rest[..packed], st)?;
                rest = &rest[packed..];
                continue;
            }
            rest = &rest[1..];
            match s {
                Stmt::Bind {
                    var,
                    axis: GpuAxis::Block(d),
                } => self.vars[var.0 as usize] = Some(st.block[d.index()]),
                Stmt::Bind {
                    var,
                    axis: GpuAxis::Thread(d),
                } => st.threads.push((*var, d.index())),
                Stmt::Loop {
                    var, extent, body, ..
                } => {
                    // A triangular loop whose trip count differs between the
                    // threads runs to the largest, each thread's leaves
                    // guarded by its own count.
                    let per_thread = st.threads.iter().any(|(v, _)| extent.uses_var(*v));
                    let n = match per_thread {
                        true => self.max_over_threads(extent, st)?,
                        false => self.index(extent)?,
                    };
                    let name = self.g.vars[var.0 as usize].name.clone();
                    let guards = st.guards.len();
                    if per_thread {
                        st.guards.push(rocmc_ir::schedule::Guard {
                            value: rocmc_ir::Index::Var(*var),
                            extent: extent.clone(),
                        });
                    }
                    // The GPU's loop versions for whole-vector fills, so
                    // that CPU runs of AMD-lowered kernels run them too.
                    self.whole_rows_loop(body, &mut |me| {
                        me.counted_loop(n, &name, |me, i| {
                            me.vars[var.0 as usize] = Some(i);
                            me.host_body(body, st)
                        })
                    })?;
                    st.guards.truncate(guards);
                }
                Stmt::If { guards, body } => {
                    let n = st.guards.len();
                    st.guards.extend(guards.iter().cloned());
                    self.host_body(body, st)?;
                    st.guards.truncate(n);
                }
                // Lockstep already orders every thread's writes before later reads.
                Stmt::Barrier => {}
                // Copies complete as they are issued here, one order the semantics allow.
                Stmt::AsyncCommit | Stmt::AsyncWait { .. } => {}
                // Each thread's share of the wave's load is its stores.
                Stmt::MatrixLoad { stores, .. } | Stmt::MatrixDesc { stores, .. } => {
                    self.host_body(stores, st)?
                }
                // Each thread's share of the tensor copy is its fills.
                Stmt::TensorCopy { fills, .. } => self.host_body(fills, st)?,
                // Matrix instructions and tensor copies complete at once here.
                Stmt::MatrixAsync(_) | Stmt::Mbarrier(_) => {}
                Stmt::Unswitch { guards, fast, slow } => {
                    // Per thread: the fast path where every guard holds, the slow one elsewhere.
                    let n = st.guards.len();
                    st.guards.extend(guards.iter().cloned());
                    self.host_body(fast, st)?;
                    st.guards.truncate(n);
                    st.negated.push(guards.clone());
                    self.host_body(slow, st)?;
                    st.negated.pop();
                }
                leaf => self.leaves_for_threads(std::slice::from_ref(leaf), st)?,
            }
        }
        Ok(())
    }

    /// Sets the thread-bound variables to those of linear thread `tid`.
    fn set_thread_vars(&mut self, tid: IntValue<'ctx>, st: &Lockstep<'ctx>) -> R<()> {
        let [bx, by, _] = self.g.block;
        let b = &self.b;
        let x = b
            .build_int_unsigned_rem(tid, self.i32(bx as i64), "")
            .map_err(llvm_err)?;
        let xy = b
            .build_int_unsigned_div(tid, self.i32(bx as i64), "")
            .map_err(llvm_err)?;
        let y = b
            .build_int_unsigned_rem(xy, self.i32(by as i64), "")
            .map_err(llvm_err)?;
        let z = b
            .build_int_unsigned_div(xy, self.i32(by as i64), "")
            .map_err(llvm_err)?;
        for (var, d) in &st.threads {
            self.vars[var.0 as usize] = Some([x, y, z][*d]);
        }
        Ok(())
    }

    /// The largest value `extent` takes over the block's threads (at least
    /// 0), kept in a stack slot of the entry block.
    fn max_over_threads(
        &mut self,
        extent: &rocmc_ir::Index,
        st: &Lockstep<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let i32t = self.cx.i32_type();
        let entry = self.f.get_first_basic_block().expect("an entry block");
        let at = self.cx.create_builder();
        match entry.get_first_instruction() {
            Some(first) => at.position_before(&first),
            None => at.position_at_end(entry),
        }
        let slot = at.build_alloca(i32t, "max_extent").map_err(llvm_err)?;
        self.b
            .build_store(slot, i32t.const_zero())
            .map_err(llvm_err)?;
        let n = self.i32(self.g.threads() as i64);
        self.counted_loop(n, "tid", |me, tid| {
            me.set_thread_vars(tid, st)?;
            let e = me.index(extent)?;
            let cur =
                me.b.build_load(i32t, slot, "")
                    .map_err(llvm_err)?
                    .into_int_value();
            let more =
                me.b.build_int_compare(IntPredicate::SGT, e, cur, "")
                    .map_err(llvm_err)?;
            let m = me.b.build_select(more, e, cur, "").map_err(llvm_err)?;
            me.b.build_store(slot, m).map_err(llvm_err)?;
            Ok(())
        })?;
        Ok(self
            .b
            .build_load(i32t, slot, "")
            .map_err(llvm_err)?
            .into_int_value())
    }

    /// Runs a leaf statement for every thread of the block, in order.
    /// `leaves` in order, each thread running them all in turn.
    fn leaves_for_threads(&mut self, leaves: &[Stmt], st: &Lockstep<'ctx>) -> R<()> {
        self.for_threads(st, &mut |me| {
            leaves.iter().try_for_each(|leaf| me.leaf(leaf))
        })
    }

    /// A [`byte_pack_run`] for every thread of the block, in order.
    fn packed_for_threads(&mut self, run: &[Stmt], st: &Lockstep<'ctx>) -> R<()> {
        self.for_threads(st, &mut |me| me.byte_pack(run))
    }

    /// `each` for every thread of the block, in order, under the guards
    /// that enclose it, with the thread's variables and register slices.
    fn for_threads(
        &mut self,
        st: &Lockstep<'ctx>,
        each: &mut dyn FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        let n = self.i32(self.g.threads() as i64);
        self.counted_loop(n, "tid", |me, tid| {
            me.set_thread_vars(tid, st)?;
            let b = &me.b;
            for (i, (all, at)) in st.whole.iter().enumerate() {
                let len = at.len() as i64;
                let start = b
                    .build_int_nuw_mul(tid, me.i32(len), "")
                    .map_err(llvm_err)?;
                let elem = at.get_element_type();
                let whole_ty = elem.array_type(len as u32 * me.g.threads());
                // SAFETY: tid < threads, so the slice lies inside the per-block array.
                let p = unsafe { b.build_in_bounds_gep(whole_ty, *all, &[me.i32(0), start], "") }
                    .map_err(llvm_err)?;
                me.locals[i] = (p, *at);
            }
            let all = |me: &mut Self| each(me);
            if st.negated.is_empty() {
                return me.guarded(&st.guards, all);
            }
            let mut cond = me.all_hold(&st.guards)?;
            for set in &st.negated {
                let all = me.all_hold(set)?;
                let not = me.b.build_not(all, "").map_err(llvm_err)?;
                cond = me.b.build_and(cond, not, "").map_err(llvm_err)?;
            }
            me.when(cond, all)
        })
    }
}

/// What the lockstep walk knows at a point of the body.
struct Lockstep<'ctx> {
    block: [IntValue<'ctx>; 3],
    /// Thread-bound variables seen so far, with their dimension.
    threads: Vec<(VarId, usize)>,
    /// Guards of the enclosing `If`s, checked per thread at each leaf.
    guards: Vec<Guard>,
    /// Guard sets of which not all may hold (the slow side of an unswitch).
    negated: Vec<Vec<Guard>>,
    whole: Vec<(
        inkwell::values::PointerValue<'ctx>,
        inkwell::types::ArrayType<'ctx>,
    )>,
}
