//! The loop-IR verifier, in the spirit of Cranelift's `verify_if`: run
//! after lowering and after each rewriting pass in debug builds and tests,
//! it turns a malformed kernel into a precise internal error naming the
//! pass, instead of wrong code or a crash much later.
//!
//! It checks that every loop variable is used only inside the loop or
//! binding that defines it; that barriers sit in uniform control flow (no
//! enclosing guard depends on a thread index, so every thread of the
//! work-group reaches them); that LDS and register arrays and tensors
//! exist and no access lies wholly outside its array (from the intervals
//! of [`Index::range`], refined by simple guards); and that the kernel's
//! LDS fits every AMDGPU.

use super::{GpuKernel, Mem, Stmt};
use crate::index::Index;
use crate::kernel::{Expr, ExprKind, Kernel};
use crate::schedule::GpuAxis;
use crate::VarId;
use std::cell::RefCell;

/// A loop-IR invariant that does not hold: always a bug in rocmc.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("internal error after pass `{pass}` in kernel `{kernel}`: {message} (a rocmc bug)")]
pub struct VerifyError {
    pub pass: &'static str,
    pub kernel: String,
    pub message: String,
}

struct Cx<'a> {
    k: &'a Kernel,
    g: &'a GpuKernel,
    pass: &'static str,
    size_max: Vec<u64>,
    var_max: Vec<u64>,
    /// Variables defined here (loops and bindings enclosing this point).
    scope: Vec<VarId>,
    /// Thread-bound variables.
    threads: Vec<VarId>,
}

impl Cx<'_> {
    fn err(&self, message: String) -> VerifyError {
        VerifyError {
            pass: self.pass,
            kernel: self.g.name.clone(),
            message,
        }
    }

    fn var_name(&self, v: VarId) -> String {
        self.g
            .vars
            .get(v.0 as usize)
            .map_or(format!("#{}", v.0), |l| l.name.clone())
    }

    fn index(&self, ix: &Index, what: &str) -> Result<(), VerifyError> {
        let mut bad = None;
        visit_vars(ix, &mut |v| {
            if bad.is_none() && !self.scope.contains(&v) {
                bad = Some(v);
            }
        });
        match bad {
            Some(v) if (v.0 as usize) >= self.g.vars.len() => Err(self.err(format!(
                "{what} uses variable #{} that the kernel does not have",
                v.0
            ))),
            Some(v) => Err(self.err(format!(
                "{what} uses loop variable `{}` outside its loop",
                self.var_name(v)
            ))),
            None => Ok(()),
        }
    }

    /// An access to element `ix` of an array of `len` elements.
    fn element(&self, ix: &Index, len: u32, what: &str) -> Result<(), VerifyError> {
        self.index(ix, what)?;
        // Intervals ignore most guards (`ty * 32 + tx < 64`), so only an
        // access that can never be inside the array is certain to be wrong;
        // the interpreter's bounds checks cover the rest.
        let (lo, hi) = ix.range(&self.size_max, &self.var_max);
        if hi < 0 || lo >= i128::from(len) {
            return Err(self.err(format!(
                "{what} reaches elements {lo}..={hi} of an array of {len}"
            )));
        }
        Ok(())
    }

    /// LDS array `id` (`shared`) or register array `id`, with a name for messages.
    /// An mbarrier: an i64 of an LDS array.
    fn mbarrier(&self, (id, ix): &(u32, Index)) -> Result<(), VerifyError> {
        let (l, name) = self.array(true, *id)?;
        if l.dtype != crate::DType::I64 {
            return Err(self.err(format!(
                "mbarriers are i64s, not the {}s of {name}",
                l.dtype.name()
            )));
        }
        self.element(ix, l.len, &format!("an mbarrier of {name}"))
    }

    fn array(&self, shared: bool, id: u32) -> Result<(&super::Local, String), VerifyError> {
        let (arrays, what) = if shared {
            (&self.g.shared, "LDS array")
        } else {
            (&self.g.locals, "register array")
        };
        match arrays.get(id as usize) {
            Some(l) => Ok((l, format!("{what} `{}`", l.name))),
            None => Err(self.err(format!("{what} #{id} does not exist"))),
        }
    }

    /// Checks an access `index` of an array; `verb` says how it is accessed.
    fn array_access(
        &self,
        shared: bool,
        id: u32,
        index: &Index,
        verb: &str,
    ) -> Result<(), VerifyError> {
        let (l, name) = self.array(shared, id)?;
        self.element(index, l.len, &format!("a {verb} {name}"))
    }

    /// Checks guards; whether any depends on a thread index.
    fn guards(&self, guards: &[crate::schedule::Guard]) -> Result<bool, VerifyError> {
        let mut thread_dependent = false;
        for g in guards {
            self.index(&g.value, "a guard")?;
            self.index(&g.extent, "a guard")?;
            thread_dependent |= self
                .threads
                .iter()
                .any(|t| g.value.uses_var(*t) || g.extent.uses_var(*t));
        }
        Ok(thread_dependent)
    }

    fn expr(&self, e: &Expr) -> Result<(), VerifyError> {
        let found = RefCell::new(Ok(()));
        e.rewrite(&|x: &Expr| {
            if found.borrow().is_err() {
                return None;
            }
            let r = match &x.kind {
                ExprKind::Load { tensor, indices } => {
                    if (tensor.0 as usize) >= self.k.tensors.len() {
                        Err(self.err(format!(
                            "a load of tensor #{} that does not exist",
                            tensor.0
                        )))
                    } else {
                        let t = self.k.tensor(*tensor);
                        indices
                            .iter()
                            .try_for_each(|ix| self.index(ix, &format!("a load of `{}`", t.name)))
                    }
                }
                ExprKind::Gather { tensor, indices } => {
                    match self.k.tensors.get(tensor.0 as usize) {
                        None => Err(self.err(format!(
                            "a gather from tensor #{} that does not exist",
                            tensor.0
                        ))),
                        Some(t) if t.shape.len() != indices.len() => Err(self.err(format!(
                            "a gather from `{}` with {} subscripts",
                            t.name,
                            indices.len()
                        ))),
                        Some(t) if indices.iter().any(|i| i.dtype != crate::dtype::DType::I32) => {
                            Err(self.err(format!(
                                "a gather from `{}` with a subscript that is not i32",
                                t.name
                            )))
                        }
                        Some(_) => Ok(()),
                    }
                }
                ExprKind::Index(ix) => self.index(ix, "an index value"),
                ExprKind::Local { local, index } => {
                    self.array_access(false, *local, index, "read of")
                }
                ExprKind::Shared { shared, index } => {
                    self.array_access(true, *shared, index, "read of")
                }
                ExprKind::Reduced | ExprKind::Operand { .. } => {
                    Err(self.err("a reduction result outside its stage".into()))
                }
                _ => Ok(()),
            };
            *found.borrow_mut() = r;
            None
        });
        found.into_inner()
    }

    fn body(&mut self, body: &[Stmt], divergent: bool) -> Result<(), VerifyError> {
        let depth = self.scope.len();
        for s in body {
            if divergent {
                if let Some(why) = collective(s) {
                    return Err(self.err(why.into()));
                }
            }
            self.stmt(s, divergent)?;
        }
        self.scope.truncate(depth);
        Ok(())
    }

    /// One statement of a body; a variable it binds stays in scope until
    /// the body ends.
    fn stmt(&mut self, s: &Stmt, divergent: bool) -> Result<(), VerifyError> {
        match s {
            Stmt::Bind { var, axis } => {
                self.scope.push(*var);
                if matches!(axis, GpuAxis::Thread(_)) {
                    self.threads.push(*var);
                }
            }
            Stmt::Loop {
                var, extent, body, ..
            } => {
                self.index(extent, "a loop extent")?;
                self.scope.push(*var);
                self.body(body, divergent)?;
                self.scope.pop();
            }
            Stmt::If { guards, body } => self.guarded(guards, body, divergent)?,
            Stmt::Unswitch { guards, fast, slow } => {
                let thread_dependent = self.guards(guards)?;
                self.body(fast, divergent || thread_dependent)?;
                self.body(slow, divergent || thread_dependent)?;
            }
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                if (tensor.0 as usize) >= self.k.tensors.len() {
                    return Err(self.err(format!(
                        "a store to tensor #{} that does not exist",
                        tensor.0
                    )));
                }
                let name = &self.k.tensor(*tensor).name;
                for ix in indices {
                    self.index(ix, &format!("a store to `{name}`"))?;
                }
                self.expr(value)?;
            }
            Stmt::Scatter {
                tensor,
                indices,
                value,
                shared,
                ..
            } => self.scatter(*tensor, indices, value, *shared)?,
            Stmt::SharedStore {
                shared,
                index,
                value,
            } => {
                self.array_access(true, *shared, index, "store to")?;
                self.expr(value)?;
            }
            Stmt::LocalStore {
                local,
                index,
                value,
            } => {
                self.array_access(false, *local, index, "store to")?;
                self.expr(value)?;
            }
            Stmt::Fill {
                mem,
                array,
                index,
                value,
                width,
                asynchronous,
                zero,
            } => self.fill(*mem, *array, index, value, *width, (*asynchronous, *zero))?,
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } | Stmt::MatrixAsync(_) => {}
            Stmt::MatrixLoad {
                shared,
                row,
                count,
                stores,
                ..
            } => self.matrix_load(*shared, row, *count, stores, divergent)?,
            Stmt::Matrix {
                instr,
                a,
                b,
                acc,
                lane,
                wave,
                desc,
            } => self.matrix_stmt(instr, [a, b, acc], lane, wave, desc)?,
            Stmt::MatrixDesc {
                local,
                index,
                shared,
                start,
                stores,
                ..
            } => {
                let (l, name) = self.array(false, *local)?;
                self.element(index, l.len, &format!("a matrix descriptor in {name}"))?;
                let (s, sname) = self.array(true, *shared)?;
                self.element(start, s.len, &format!("a matrix operand in {sname}"))?;
                self.body(stores, divergent)?;
            }
            Stmt::TensorCopy { .. } => self.tensor_copy(s, divergent)?,
            Stmt::Mbarrier(m) => {
                self.mbarrier(m.bar())?;
                if let crate::loops::Mbarrier::Wait { parity, .. } = m {
                    self.index(parity, "an mbarrier's phase parity")?;
                }
            }
            Stmt::Shuffle {
                local,
                index,
                value,
                mask,
                lane,
                wave,
                width,
            } => {
                self.array_access(false, *local, index, "lane exchange into")?;
                self.expr(value)?;
                if value.dtype != crate::DType::F32 || mask >= width || !width.is_power_of_two() {
                    return Err(self.err(format!(
                        "a lane exchange moves an f32 between lanes of a wave (mask {mask} below its size {width}, a power of two), not {}",
                        value.dtype.name()
                    )));
                }
                self.index(lane, "a lane exchange's lane")?;
                self.index(wave, "a lane exchange's wave")?;
            }
        }
        Ok(())
    }

    fn matrix_stmt(
        &mut self,
        instr: &rocmc_target::matrix::MatrixInstr,
        operands: [&(u32, Index); 3],
        lane: &Index,
        wave: &Index,
        desc: &Option<[Option<crate::loops::OperandDesc>; 2]>,
    ) -> Result<(), VerifyError> {
        self.matrix(instr, operands, lane, wave)?;
        if let Some([a_desc, _]) = desc {
            if a_desc.is_some() != instr.a_in_shared() {
                return Err(self.err(format!(
                    "{}'s A descriptor is {} though A is {}",
                    instr.name,
                    if a_desc.is_some() { "set" } else { "missing" },
                    if instr.a_in_shared() {
                        "in LDS"
                    } else {
                        "in registers"
                    }
                )));
            }
        }
        for d in desc.iter().flatten().flatten() {
            let (l, name) = self.array(false, d.local)?;
            self.element(&d.index, l.len, &format!("a matrix descriptor in {name}"))?;
        }
        Ok(())
    }

    fn tensor_copy(&mut self, s: &Stmt, divergent: bool) -> Result<(), VerifyError> {
        let Stmt::TensorCopy {
            tensor,
            map,
            coords,
            boxes,
            shared,
            start,
            bar,
            fills,
        } = s
        else {
            unreachable!("tensor_copy is called on tensor copies only")
        };
        if *boxes == 0 {
            return Err(self.err("a tensor copy of no boxes".into()));
        }
        let Some(m) = self.g.tensor_maps.get(*map as usize) else {
            return Err(self.err(format!(
                "a tensor copy through tensor map #{map}, which does not exist"
            )));
        };
        let rank = self.k.tensors.get(tensor.0 as usize).map(|t| t.shape.len());
        if m.tensor != *tensor || rank != Some(coords.len()) || m.boxed.len() != coords.len() {
            return Err(self.err(format!(
                "a tensor copy of tensor #{} through map #{map}, which describes tensor #{} with a box of {} dimensions, at {} coordinates",
                tensor.0, m.tensor.0, m.boxed.len(), coords.len()
            )));
        }
        for c in coords {
            self.index(c, "a tensor copy's coordinate")?;
        }
        let (s, sname) = self.array(true, *shared)?;
        self.element(start, s.len, &format!("a tensor copy into {sname}"))?;
        self.mbarrier(bar)?;
        self.body(fills, divergent)?;
        Ok(())
    }

    /// A body under `guards`, which bound the variables they compare.
    fn guarded(
        &mut self,
        guards: &[crate::schedule::Guard],
        body: &[Stmt],
        divergent: bool,
    ) -> Result<(), VerifyError> {
        let thread_dependent = self.guards(guards)?;
        let saved = self.var_max.clone();
        for g in guards {
            // `v < e` bounds v inside the guard (reduction trees: `tx < 64`).
            if let Index::Var(v) = &g.value {
                let (_, hi) = g.extent.range(&self.size_max, &self.var_max);
                if let (Some(m), Ok(hi)) =
                    (self.var_max.get_mut(v.0 as usize), u64::try_from(hi - 1))
                {
                    *m = (*m).min(hi);
                }
            }
        }
        self.body(body, divergent || thread_dependent)?;
        self.var_max = saved;
        Ok(())
    }

    fn scatter(
        &mut self,
        tensor: crate::kernel::TensorId,
        indices: &[crate::kernel::Expr],
        value: &crate::kernel::Expr,
        shared: Option<u32>,
    ) -> Result<(), VerifyError> {
        let Some(t) = self.k.tensors.get(tensor.0 as usize) else {
            return Err(self.err(format!(
                "a scatter to tensor #{} that does not exist",
                tensor.0
            )));
        };
        if let Some(a) = shared {
            let elems: Option<i64> = t.shape.iter().map(|e| e.as_const()).product();
            let (l, name) = self.array(true, a)?;
            if elems != Some(l.len as i64) {
                return Err(self.err(format!(
                    "a scatter into {name}, which is not a copy of `{}`",
                    t.name
                )));
            }
        }
        if t.shape.len() != indices.len()
            || indices.iter().any(|i| i.dtype != crate::dtype::DType::I32)
        {
            return Err(self.err(format!(
                "a scatter to `{}` needs one i32 subscript per dimension",
                t.name
            )));
        }
        for e in indices.iter().chain([value]) {
            self.expr(e)?;
        }
        Ok(())
    }

    /// A fill's `width` registers from `local[index]` are all there.
    fn fill_from_registers(
        &mut self,
        local: u32,
        index: &Index,
        width: u32,
    ) -> Result<(), VerifyError> {
        let last = index.clone() + Index::c(i64::from(width) - 1);
        self.array_access(false, local, index, "fill from")?;
        self.array_access(false, local, &last, "fill from")
    }

    fn fill(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &crate::kernel::Expr,
        width: u32,
        (asynchronous, zero): (bool, bool),
    ) -> Result<(), VerifyError> {
        if asynchronous && (mem != Mem::Shared || !matches!(value.kind, ExprKind::Load { .. })) {
            return Err(self.err("an asynchronous fill must copy a tensor load into LDS".into()));
        }
        if zero && !matches!(value.kind, ExprKind::Load { .. }) {
            return Err(
                self.err("a fill that zeroes past the tensor must copy a tensor load".into())
            );
        }
        let source_ok = match &value.kind {
            ExprKind::Load { tensor, .. } => self
                .k
                .tensors
                .get(tensor.0 as usize)
                .is_some_and(|t| t.dtype == value.dtype),
            ExprKind::Local { local, index } => {
                self.fill_from_registers(*local, index, width)?;
                true
            }
            // Registers converted on their way into a tile (`dtype=`).
            ExprKind::Cast(inner) => match &inner.kind {
                ExprKind::Local { local, index } => {
                    self.fill_from_registers(*local, index, width)?;
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if !source_ok || width == 0 {
            return Err(self.err(
                "a fill of something other than a tensor load or registers, or of width 0".into(),
            ));
        }
        let shared = mem == Mem::Shared;
        let last = index.clone() + Index::c(i64::from(width) - 1);
        self.array_access(shared, array, index, "fill of")?;
        self.array_access(shared, array, &last, "fill of")?;
        self.expr(value)?;
        Ok(())
    }

    fn matrix_load(
        &mut self,
        shared: u32,
        row: &Index,
        count: u32,
        stores: &[Stmt],
        divergent: bool,
    ) -> Result<(), VerifyError> {
        let last = row.clone() + Index::c(7);
        self.array_access(true, shared, row, "matrix load of")?;
        self.array_access(true, shared, &last, "matrix load of")?;
        if !matches!(count, 1 | 2 | 4)
            || stores.len() != 2 * count as usize
            || !stores.iter().all(|s| matches!(s, Stmt::LocalStore { .. }))
        {
            return Err(self.err(format!(
                "a matrix load of {count} matrices must hold {} register stores",
                2 * count
            )));
        }
        self.body(stores, divergent)?;
        Ok(())
    }

    fn matrix(
        &mut self,
        instr: &rocmc_target::matrix::MatrixInstr,
        [a, b, acc]: [&(u32, Index); 3],
        lane: &Index,
        wave: &Index,
    ) -> Result<(), VerifyError> {
        for ((id, base), n, what) in [
            (a, instr.a_per_lane(), "A fragment"),
            (b, instr.b_per_lane(), "B fragment"),
            (acc, instr.acc_per_lane(), "accumulator"),
        ] {
            let (l, name) = self.array(false, *id)?;
            let last = base.clone() + Index::c(i64::from(n) - 1);
            self.element(base, l.len, &format!("a matrix {what} in {name}"))?;
            self.element(&last, l.len, &format!("a matrix {what} in {name}"))?;
        }
        self.index(lane, "a matrix instruction's lane")?;
        self.index(wave, "a matrix instruction's wave")?;
        Ok(())
    }
}

fn visit_vars(ix: &Index, f: &mut impl FnMut(VarId)) {
    match ix {
        Index::Var(v) => f(*v),
        Index::Bin(_, a, b) => {
            visit_vars(a, f);
            visit_vars(b, f);
        }
        _ => {}
    }
}

/// Checks `g` (a kernel of `k`), naming `pass` in the error.
pub fn verify(k: &Kernel, g: &GpuKernel, pass: &'static str) -> Result<(), VerifyError> {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let var_max = g
        .vars
        .iter()
        .map(|v| {
            u64::try_from(v.extent.max_value(&size_max, &[]).saturating_sub(1)).unwrap_or(u64::MAX)
        })
        .collect();
    let mut cx = Cx {
        k,
        g,
        pass,
        size_max,
        var_max,
        scope: Vec::new(),
        threads: Vec::new(),
    };
    let lds: u64 = g.shared.iter().map(|s| s.bytes()).sum();
    let most = u64::from(rocmc_target::hardware::MAX_LDS_PER_WORKGROUP);
    if lds > most {
        return Err(cx.err(format!(
            "{lds} bytes of LDS, more than any AMDGPU has ({most})"
        )));
    }
    cx.body(&g.body, false)
}

/// Why `s` may not run under a guard that depends on a thread index: the
/// lanes, wave or work-group execute it together. `None` for statements
/// each thread runs on its own.
fn collective(s: &Stmt) -> Option<&'static str> {
    Some(match s {
        Stmt::Barrier => "a barrier under a guard that depends on a thread index (threads that skip it hang the work-group)",
        Stmt::MatrixLoad { .. } => "a matrix load under a guard that depends on a thread index (the lanes of a wave execute it together)",
        Stmt::Matrix { .. } => "a matrix instruction under a guard that depends on a thread index (the lanes of a wave execute it together)",
        Stmt::MatrixDesc { .. } => "a matrix descriptor under a guard that depends on a thread index (the lanes of a warpgroup execute its instruction together)",
        Stmt::MatrixAsync(_) => "a matrix fence, commit or wait under a guard that depends on a thread index",
        Stmt::TensorCopy { .. } | Stmt::Mbarrier(_) => "a tensor copy or mbarrier operation under a guard that depends on a thread index (the work-group executes it together)",
        Stmt::Shuffle { .. } => "a lane exchange under a guard that depends on a thread index (the lanes of a wave execute it together)",
        Stmt::Bind { .. }
        | Stmt::Loop { .. }
        | Stmt::If { .. }
        | Stmt::Unswitch { .. }
        | Stmt::Store { .. }
        | Stmt::Scatter { .. }
        | Stmt::SharedStore { .. }
        | Stmt::LocalStore { .. }
        | Stmt::Fill { .. }
        | Stmt::AsyncCommit
        | Stmt::AsyncWait { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn kernel(src_body: &str) -> (Kernel, GpuKernel) {
        let src = format!(
            "[kernel]\nname = \"k\"\nsizes = [\"n\"]\nmax = {{ n = 1000 }}\n[inputs]\nA = {{ dtype = \"f32\", shape = [\"n\"] }}\n[[stage]]\ncompute = \"{src_body}\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n"
        );
        let k = crate::parse_kernel("k.toml", &src).unwrap();
        let p = crate::lower(&k).unwrap();
        let g = p.kernels[0].clone();
        (k, g)
    }

    #[test]
    fn lowered_kernels_verify() {
        let (k, g) = kernel("Y[i] = A[max(i - 1, 0)] * 2.0");
        verify(&k, &g, "lower").unwrap();
    }

    #[test]
    fn a_variable_outside_its_loop_is_caught() {
        let (k, mut g) = kernel("Y[i] = A[i]");
        // Use the thread variable before it is bound.
        let tx = VarId(2);
        g.body.insert(
            0,
            Stmt::Store {
                tensor: crate::TensorId(1),
                indices: vec![Index::Var(tx)],
                value: Expr {
                    kind: ExprKind::Float(0.0),
                    dtype: DType::F32,
                },
            },
        );
        let e = verify(&k, &g, "test").unwrap_err();
        assert!(e.message.contains("outside its loop"), "{e}");
        assert_eq!(e.pass, "test");
    }

    #[test]
    fn an_access_outside_its_array_is_caught() {
        let (k, mut g) = kernel("Y[i] = A[i]");
        g.locals.push(crate::lower::Local {
            name: "acc".into(),
            dtype: DType::F32,
            len: 4,
            span: crate::Span::new(0, 0),
        });
        g.body.push(Stmt::LocalStore {
            local: 0,
            index: Index::c(7),
            value: Expr {
                kind: ExprKind::Float(0.0),
                dtype: DType::F32,
            },
        });
        let e = verify(&k, &g, "test").unwrap_err();
        assert!(e.message.contains("elements 7..=7 of an array of 4"), "{e}");
    }

    #[test]
    fn a_divergent_barrier_is_caught() {
        let (k, mut g) = kernel("Y[i] = A[i]");
        // The body ends with the guarded store: put a barrier under that guard.
        let Some(Stmt::If { body, .. }) = g.body.last_mut() else {
            panic!("{:?}", g.body)
        };
        body.push(Stmt::Barrier);
        let e = verify(&k, &g, "test").unwrap_err();
        assert!(e.message.contains("barrier under a guard"), "{e}");
    }
}
