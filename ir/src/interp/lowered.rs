//! The loop IR run as the GPU would run it (work-groups, threads in
//! lockstep, LDS), checking for LDS races and divergent barriers.

use super::*;
use crate::kernel::*;
use crate::loops::{Program, Stmt};
use crate::schedule::GpuAxis;

/// Executes lowered loop IR the way the GPU does, block by block and thread
/// by thread. Same inputs and result layout as [`run`].
pub fn run_lowered(
    k: &Kernel,
    prog: &Program,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[Buffer],
) -> Result<Vec<Buffer>, InterpError> {
    let shapes = check_inputs(k, sizes, params, inputs)?;
    let mut bufs = all_buffers(k, &shapes, inputs);
    // Matrix instructions run as a wave does, through their lane layout.
    let expanded: Vec<(usize, crate::loops::GpuKernel)> = prog
        .kernels
        .iter()
        .map(|g| {
            let own = g.shared.len();
            let lockstep = crate::lower::matrix::Exchange::Lockstep;
            (own, crate::lower::matrix::expand(g.clone(), lockstep))
        })
        .collect();
    let out_of_range = std::cell::RefCell::new(None);
    let mut lanes = FillLanes::default();
    for (own, g) in &expanded {
        let st = k.stage(g.stage);
        let env = Env {
            out_of_range: &out_of_range,
            races: std::cell::RefCell::new(Races {
                kernel: g.name.clone(),
                names: g.shared.iter().map(|l| l.name.clone()).collect(),
                checked: *own,
                ..Default::default()
            }),
            k,
            sizes,
            params,
            shapes: &shapes,
            stage: &st.name,
            lazy: None,
            bound: Default::default(),
        };
        let grid: Vec<i64> = g
            .grid
            .iter()
            .map(|e| {
                e.eval(sizes, &[])
                    .ok_or_else(|| InterpError::DivisionByZero {
                        stage: st.name.clone(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let threads = g.threads() as usize;
        for bz in 0..grid[2] {
            for by in 0..grid[1] {
                for bx in 0..grid[0] {
                    let ids: Vec<Ids> = (0..threads as i64)
                        .map(|t| {
                            let (x, y) = (g.block[0] as i64, g.block[1] as i64);
                            Ids {
                                block: [bx, by, bz],
                                thread: [t % x, (t / x) % y, t / (x * y)],
                            }
                        })
                        .collect();
                    let mut th: Vec<Thread> = (0..threads)
                        .map(|_| Thread {
                            vars: vec![UNSET; g.vars.len()],
                            locals: g
                                .locals
                                .iter()
                                .map(|l| vec![Scalar::I(0); l.len as usize])
                                .collect(),
                            in_flight: Vec::new(),
                            open: Vec::new(),
                        })
                        .collect();
                    let mut shared: Vec<Vec<Scalar>> = g
                        .shared
                        .iter()
                        .map(|l| vec![Scalar::I(0); l.len as usize])
                        .collect();
                    {
                        let mut r = env.races.borrow_mut();
                        r.epoch = 1;
                        r.cells = g
                            .shared
                            .iter()
                            .map(|l| vec![Cell::default(); l.len as usize])
                            .collect();
                    }
                    let active = vec![true; threads];
                    Block {
                        env: &env,
                        lanes: &mut lanes,
                        ids: &ids,
                        th: &mut th,
                        bufs: &mut bufs,
                        shared: &mut shared,
                    }
                    .exec(&g.body, &active)?;
                }
            }
        }
    }
    Ok(bufs)
}

pub(super) struct Ids {
    block: [i64; 3],
    thread: [i64; 3],
}

/// One thread's state while it runs loop IR.
pub(super) struct Thread {
    vars: Vec<i64>,
    locals: Vec<Vec<Scalar>>,
    /// Asynchronous LDS fills committed and not yet waited for, oldest
    /// first. They land at the [`Stmt::AsyncWait`] that completes them, the
    /// latest moment the hardware may, so a read before it sees the old
    /// contents, as it may on a GPU; the race check counts them as writes
    /// from their issue on.
    in_flight: Vec<Vec<InFlight>>,
    /// Asynchronous fills issued since the last commit.
    open: Vec<InFlight>,
}

/// An asynchronous fill of one LDS element.
pub(super) struct InFlight {
    array: u32,
    element: usize,
    value: Scalar,
    /// The epoch it was issued in.
    issued: u64,
}

/// The threads `active` marks, with their numbers in the block.
fn active_threads<'t, T>(
    threads: impl Iterator<Item = T> + 't,
    active: &'t [bool],
) -> impl Iterator<Item = (usize, T)> + 't {
    threads
        .zip(active)
        .enumerate()
        .filter(|(_, (_, a))| **a)
        .map(|(n, (t, _))| (n, t))
}

/// The error of an index that divides by zero.
fn dz(env: &Env) -> InterpError {
    InterpError::DivisionByZero {
        stage: env.stage.to_string(),
    }
}

/// Each fill's lanes as expressions ([`crate::loops::fill_lane`]), built
/// once per fill statement rather than once per thread and trip: a fill
/// runs for every thread of every work-group, and rebuilding its lanes'
/// expression trees there was most of the race check's time. Keyed by the
/// statement's value, which the program holds unmoved while it runs.
#[derive(Default)]
struct FillLanes(std::collections::HashMap<(*const Expr, u32, bool), std::rc::Rc<[Expr]>>);

impl FillLanes {
    fn of(&mut self, k: &Kernel, value: &Expr, width: u32, zero: bool) -> std::rc::Rc<[Expr]> {
        self.0
            .entry((value as *const Expr, width, zero))
            .or_insert_with(|| {
                (0..width)
                    .map(|l| crate::loops::fill_lane(k, value, l, zero))
                    .collect()
            })
            .clone()
    }
}

/// One block's threads running loop IR in lockstep: what every statement
/// reads and writes.
struct Block<'a, 'e> {
    env: &'a Env<'e>,
    lanes: &'a mut FillLanes,
    ids: &'a [Ids],
    th: &'a mut [Thread],
    bufs: &'a mut [Buffer],
    shared: &'a mut [Vec<Scalar>],
}

impl Block<'_, '_> {
    /// Runs `body` for the threads `active` marks. Loops (whose trip
    /// counts never depend on the thread) are shared, guards mask threads
    /// out, and every leaf runs for each active thread in order. Lockstep
    /// orders every thread's writes before later reads, so it alone cannot
    /// show a missing barrier: LDS accesses are checked for races instead,
    /// epoch by epoch between barriers.
    fn exec(&mut self, body: &[Stmt], active: &[bool]) -> Result<(), InterpError> {
        for s in body {
            match s {
                Stmt::Bind { var, axis } => {
                    for (t, id) in self.th.iter_mut().zip(self.ids) {
                        t.vars[var.0 as usize] = match axis {
                            GpuAxis::Block(d) => id.block[d.index()],
                            GpuAxis::Thread(d) => id.thread[d.index()],
                        }
                    }
                }
                Stmt::Loop {
                    var, extent, body, ..
                } => self.run_loop(*var, extent, body, active)?,
                Stmt::If { guards, body } => {
                    let mask = self.mask(guards, active)?;
                    if mask.iter().any(|m| *m) {
                        self.exec(body, &mask)?;
                    }
                }
                Stmt::Matrix { .. } | Stmt::Shuffle { .. } => {
                    unreachable!("run_lowered expands matrix instructions and lane exchanges")
                }
                // Its meaning is its stores (see `Stmt::MatrixLoad`).
                Stmt::MatrixLoad { stores, .. } => self.exec(stores, active)?,
                // A warpgroup instruction's operand read through its
                // descriptor: the reads stay in flight until a wait
                // retires their group (`Races::matrix_async`).
                Stmt::MatrixDesc { stores, .. } => {
                    self.env.races.borrow_mut().capturing = true;
                    let done = self.exec(stores, active);
                    self.env.races.borrow_mut().capturing = false;
                    done?
                }
                // Its meaning is its fills (see `Stmt::TensorCopy`).
                Stmt::TensorCopy { fills, .. } => self.exec(fills, active)?,
                // Matrix instructions compute at once here, their LDS
                // reads held in flight until their wait.
                Stmt::MatrixAsync(op) => {
                    for (n, _) in active_threads(self.th.iter_mut(), active) {
                        let mut r = self.env.races.borrow_mut();
                        r.current = n;
                        r.matrix_async(*op);
                    }
                }
                Stmt::Mbarrier(_) => {}
                Stmt::Barrier => {
                    // On a GPU, a barrier some threads skip hangs or corrupts the work-group.
                    if let Some(t) = active.iter().position(|a| !*a) {
                        let r = self.env.races.borrow();
                        return Err(InterpError::DivergentBarrier {
                            kernel: r.kernel.clone(),
                            thread: t,
                        });
                    }
                    self.env.races.borrow_mut().epoch += 1;
                }
                Stmt::Unswitch { guards, fast, slow } => {
                    let yes = self.mask(guards, active)?;
                    let no: Vec<bool> = active.iter().zip(&yes).map(|(a, y)| *a && !*y).collect();
                    if yes.iter().any(|m| *m) {
                        self.exec(fast, &yes)?;
                    }
                    if no.iter().any(|m| *m) {
                        self.exec(slow, &no)?;
                    }
                }
                Stmt::Store {
                    tensor,
                    indices,
                    value,
                } => self.store(*tensor, indices, value, active)?,
                Stmt::Scatter {
                    tensor,
                    indices,
                    op,
                    value,
                    shared: place,
                } => self.scatter(*tensor, indices, *op, value, *place, active)?,
                Stmt::LocalStore {
                    local,
                    index,
                    value,
                } => self.local_store(*local, index, value, active)?,
                Stmt::AsyncCommit => {
                    for (t, _) in self.th.iter_mut().zip(active).filter(|(_, a)| **a) {
                        let group = std::mem::take(&mut t.open);
                        t.in_flight.push(group);
                    }
                }
                Stmt::AsyncWait { pending } => self.async_wait(*pending, active)?,
                Stmt::Fill {
                    mem,
                    array,
                    index,
                    value,
                    width,
                    asynchronous,
                    zero,
                } => self.fill(
                    *mem,
                    *array,
                    index,
                    value,
                    (*width, *zero),
                    *asynchronous,
                    active,
                )?,
                Stmt::SharedStore {
                    shared: a,
                    index,
                    value,
                } => self.shared_store(*a, index, value, active)?,
            }
        }
        Ok(())
    }

    /// `active` narrowed to the threads for which every guard holds.
    fn mask(
        &self,
        guards: &[crate::schedule::Guard],
        active: &[bool],
    ) -> Result<Vec<bool>, InterpError> {
        let env = self.env;
        let dz = || dz(env);
        let mut mask = active.to_vec();
        for (m, t) in mask.iter_mut().zip(self.th.iter()) {
            for gd in guards {
                *m &= gd.value.eval(env.sizes, &t.vars).ok_or_else(dz)?
                    < gd.extent.eval(env.sizes, &t.vars).ok_or_else(dz)?;
            }
        }
        Ok(mask)
    }

    /// Each thread's own trip count (a triangular loop's may differ);
    /// lockstep runs to the largest, masking the rest.
    fn run_loop(
        &mut self,
        var: crate::index::VarId,
        extent: &crate::index::Index,
        body: &[Stmt],
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let counts = self
            .th
            .iter()
            .map(|t| extent.eval(env.sizes, &t.vars).ok_or_else(|| dz(env)))
            .collect::<Result<Vec<_>, _>>()?;
        let n = counts
            .iter()
            .zip(active)
            .filter(|(_, a)| **a)
            .map(|(c, _)| *c)
            .max()
            .unwrap_or(0);
        for i in 0..n {
            for t in self.th.iter_mut() {
                t.vars[var.0 as usize] = i;
            }
            let mask: Vec<bool> = active
                .iter()
                .zip(&counts)
                .map(|(a, c)| *a && i < *c)
                .collect();
            self.exec(body, &mask)?;
        }
        Ok(())
    }

    fn store(
        &mut self,
        tensor: TensorId,
        indices: &[crate::index::Index],
        value: &Expr,
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let dz = || dz(env);
        for (n, t) in active_threads(self.th.iter(), active) {
            env.races.borrow_mut().current = n;
            let at = |d: usize| indices[d].eval(env.sizes, &t.vars).ok_or_else(dz);
            let off = on_stack(0, indices.len(), at, |idx| env.offset(tensor, idx))?;
            let v = env.eval(value, &t.vars, self.bufs, &t.locals, self.shared)?;
            self.bufs[tensor.0 as usize].set(off, v);
        }
        Ok(())
    }

    fn scatter(
        &mut self,
        tensor: TensorId,
        indices: &[Expr],
        op: ReduceOp,
        value: &Expr,
        place: Option<u32>,
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let (bufs, shared) = (&mut *self.bufs, &mut *self.shared);
        for (n, t) in active_threads(self.th.iter(), active) {
            env.races.borrow_mut().current = n;
            match place {
                None => {
                    env.scatter(tensor, indices, op, value, &t.vars, bufs, &t.locals, shared)?
                }
                Some(a) => {
                    let at =
                        env.scatter_place(tensor, indices, &t.vars, bufs, &t.locals, shared)?;
                    let v = env.eval(value, &t.vars, bufs, &t.locals, shared)?;
                    // Atomic updates of one LDS element by several
                    // threads are no race: they are not recorded.
                    if let Some(i) = at {
                        let dt = env.k.tensor(tensor).dtype;
                        let cell = &mut shared[a as usize][i];
                        *cell = env.combine(op, dt, *cell, v)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn local_store(
        &mut self,
        local: u32,
        index: &crate::index::Index,
        value: &Expr,
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let (bufs, shared) = (&*self.bufs, &*self.shared);
        for (n, t) in active_threads(self.th.iter_mut(), active) {
            env.races.borrow_mut().current = n;
            let i = index.eval(env.sizes, &t.vars).ok_or_else(|| dz(env))? as usize;
            let v = normalize(
                value.dtype,
                env.eval(value, &t.vars, bufs, &t.locals, shared)?,
            );
            t.locals[local as usize][i] = v;
        }
        Ok(())
    }

    fn async_wait(&mut self, pending: u32, active: &[bool]) -> Result<(), InterpError> {
        let env = self.env;
        for (n, t) in active_threads(self.th.iter_mut(), active) {
            env.races.borrow_mut().current = n;
            while t.in_flight.len() > pending as usize {
                for f in t.in_flight.remove(0) {
                    let (a, i) = (f.array as usize, f.element);
                    env.races.borrow_mut().write_since(a, i, f.issued)?;
                    self.shared[a][i] = f.value;
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        mem: crate::loops::Mem,
        a: u32,
        index: &crate::index::Index,
        value: &Expr,
        (width, zero): (u32, bool),
        asynchronous: bool,
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let lane_exprs = self.lanes.of(env.k, value, width, zero);
        let (bufs, shared) = (&*self.bufs, &mut *self.shared);
        let mut lanes = Vec::with_capacity(width as usize);
        for (n, t) in active_threads(self.th.iter_mut(), active) {
            env.races.borrow_mut().current = n;
            let i = index.eval(env.sizes, &t.vars).ok_or_else(|| dz(env))? as usize;
            // Every lane is read before any is written, as one access does.
            lanes.clear();
            for lane in lane_exprs.iter() {
                lanes.push(normalize(
                    value.dtype,
                    env.eval(lane, &t.vars, bufs, &t.locals, shared)?,
                ));
            }
            for (l, v) in lanes.iter().copied().enumerate() {
                match mem {
                    crate::loops::Mem::Shared if asynchronous => t.open.push(InFlight {
                        array: a,
                        element: i + l,
                        value: v,
                        issued: env.races.borrow().epoch,
                    }),
                    crate::loops::Mem::Shared => {
                        env.races.borrow_mut().write(a as usize, i + l)?;
                        shared[a as usize][i + l] = v;
                    }
                    crate::loops::Mem::Local => t.locals[a as usize][i + l] = v,
                }
            }
        }
        Ok(())
    }

    fn shared_store(
        &mut self,
        a: u32,
        index: &crate::index::Index,
        value: &Expr,
        active: &[bool],
    ) -> Result<(), InterpError> {
        let env = self.env;
        let dz = || dz(env);
        for (n, t) in active_threads(self.th.iter(), active) {
            env.races.borrow_mut().current = n;
            let i = index.eval(env.sizes, &t.vars).ok_or_else(dz)? as usize;
            let v = normalize(
                value.dtype,
                env.eval(value, &t.vars, self.bufs, &t.locals, self.shared)?,
            );
            env.races.borrow_mut().write(a as usize, i)?;
            self.shared[a as usize][i] = v;
        }
        Ok(())
    }
}
