//! The target-neutral half of code generation: one loop-IR kernel becomes
//! the body of one LLVM function. Everything a target decides is asked of
//! its [`Backend`](crate::backend::Backend). Split by topic, one
//! `impl FnCx` block each:
//!
//! - this file: the function context [`FnCx`], its set-up and small helpers;
//! - [`stmt`]: statements, merged vector stores, the leaves;
//! - [`control`]: loops, loop versioning, unswitching, guards;
//! - [`fill`]: `cache_read` fills, vectorised and asynchronous;
//! - [`lanes`]: a vectorised loop's loads, aligned where its fast path checks it;
//! - [`buffer`]: zero fills as whole vectors by the target's range-checked
//!   loads (AMD buffer loads), and the loop version that allows them;
//! - [`matrix`]: matrix instructions and their fragment loads;
//! - [`pack`]: register bytes packed into LDS words by byte permutes;
//! - [`address`]: element addresses (affine and gathered) at the proven width;
//! - [`expr`]: expressions and operators; [`cast`]: dtype conversions.
//!
//! Math functions are in `math.rs`, index arithmetic in `index.rs`.

mod address;
mod buffer;
mod cast;
mod control;
mod expr;
mod fill;
pub(crate) mod index;
mod lanes;
mod lockstep;
mod math;
mod matrix;
mod pack;
mod scatter;
mod stmt;
mod tensor_copy;

use crate::backend::Backend;
pub(crate) use crate::emit::{llvm_err, llvm_type, ty, Emit, R};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, FunctionValue, IntValue, PointerValue,
};
use rocmc_ir::loops::GpuKernel;
use rocmc_ir::{DType, Index, Kernel, TensorId};
use std::collections::HashMap;

/// Size of the zeros a gather from an empty tensor reads.
const ZERO_BYTES: i64 = 256;

pub(crate) struct FnCx<'a, 'ctx> {
    pub(crate) cx: &'ctx Context,
    pub(crate) m: &'a Module<'ctx>,
    pub(crate) k: &'a Kernel,
    pub(crate) g: &'a GpuKernel,
    pub(crate) f: FunctionValue<'ctx>,
    pub(crate) b: Builder<'ctx>,
    /// Buffer argument of each tensor.
    pub(crate) bufs: HashMap<TensorId, PointerValue<'ctx>>,
    pub(crate) sizes: Vec<IntValue<'ctx>>,
    /// The kernel's `divisible` facts by size, for alignment proofs.
    divisors: Vec<u64>,
    pub(crate) params: Vec<BasicValueEnum<'ctx>>,
    /// Current value of each loop variable.
    pub(crate) vars: Vec<Option<IntValue<'ctx>>>,
    /// Per-thread arrays (reduction accumulators), allocated in the entry block.
    pub(crate) locals: Vec<(PointerValue<'ctx>, inkwell::types::ArrayType<'ctx>)>,
    /// Mark float add/sub/mul as contractible into FMAs.
    pub(crate) contract: bool,
    /// LDS arrays of the work-group (host: one array per block being run).
    pub(crate) shared: Vec<(PointerValue<'ctx>, inkwell::types::ArrayType<'ctx>)>,
    /// Upper bounds of sizes and loop variables, for index ranges.
    pub(crate) bounds: index::Bounds,
    /// The target's dialect.
    pub(crate) be: &'a dyn Backend,
    /// The kernel's tensor maps, where the target issues its tensor copies.
    pub(crate) tensor_maps: Option<PointerValue<'ctx>>,
    /// Inside a loop version for which every zero fill's row length was
    /// checked to be a multiple of its width ([`FnCx::whole_rows_loop`]).
    pub(crate) whole_rows: bool,
    /// Inside a vectorised loop's fast path whose loads' alignment was
    /// checked ([`FnCx::lane_alignment`]).
    pub(crate) lane_align: Option<lanes::LaneAlign>,
    /// The variables that may differ between a work-group's threads
    /// ([`control::lane_varying`]).
    pub(crate) lane_varying: Vec<bool>,
}

/// In memory a bool is a byte.
fn mem_ty<'ctx>(cx: &'ctx Context, d: DType) -> BasicTypeEnum<'ctx> {
    if d == DType::Bool {
        cx.i8_type().into()
    } else {
        ty(cx, d)
    }
}

/// The size arguments with their `divisible` facts made visible to LLVM:
/// a size stated to be a multiple of d is used as `n & -d` (d a power of
/// two) or `(n / d) * d`, equal to `n` for every launch the runtimes
/// accept, so that known-bits analysis proves the alignment of row
/// offsets (`r * cols`) and LLVM's load-store vectorizer may widen
/// accesses into rows.
fn known_multiples<'ctx>(
    b: &Builder<'ctx>,
    k: &Kernel,
    g: &GpuKernel,
    sizes: Vec<IntValue<'ctx>>,
) -> R<Vec<IntValue<'ctx>>> {
    let ids = g.args.iter().filter_map(|a| match a.kind {
        rocmc_ir::loops::ArgKind::Size(s) => Some(s),
        _ => None,
    });
    ids.zip(sizes)
        .map(|(s, v)| {
            let d = k.sizes.get(s.0 as usize).map_or(1, |s| s.divisor);
            let t = v.get_type();
            match d {
                0 | 1 => Ok(v),
                d if d.is_power_of_two() => b
                    .build_and(v, t.const_int((!(d - 1)) & 0xffff_ffff, false), "")
                    .map_err(llvm_err),
                d => {
                    let q = b
                        .build_int_unsigned_div(v, t.const_int(d, false), "")
                        .map_err(llvm_err)?;
                    b.build_int_nuw_mul(q, t.const_int(d, false), "")
                        .map_err(llvm_err)
                }
            }
        })
        .collect()
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// Declares `g`'s kernel function through `be` and allocates its arrays.
    pub(crate) fn new(
        cx: &'ctx Context,
        m: &'a Module<'ctx>,
        k: &'a Kernel,
        g: &'a GpuKernel,
        be: &'a dyn Backend,
    ) -> R<Self> {
        let b = cx.create_builder();
        let abi = be.declare_kernel(cx, m, &b, k, g)?;
        let mut locals = Vec::new();
        for l in &g.locals {
            let at = ty(cx, l.dtype).array_type(l.len);
            locals.push((be.local_array(&b, g, l, at)?, at));
        }
        let mut shared = Vec::new();
        for l in &g.shared {
            let at = ty(cx, l.dtype).array_type(l.len);
            shared.push((be.shared_array(cx, m, &b, g, l, at)?, at));
        }
        let sizes = known_multiples(&b, k, g, abi.sizes)?;
        let dynamic = be.dynamic_shared_base(cx, m, g);
        let mut fc = FnCx {
            cx,
            m,
            k,
            g,
            f: abi.f,
            b,
            bufs: abi.bufs,
            sizes,
            divisors: k.size_divisors(),
            params: abi.params,
            vars: vec![None; g.vars.len()],
            locals,
            contract: false,
            shared,
            bounds: index::Bounds::of(k, g),
            be,
            tensor_maps: abi.tensor_maps,
            whole_rows: false,
            lane_align: None,
            lane_varying: control::lane_varying(g),
        };
        // Arrays sized at launch, at their offsets in the launch's dynamic
        // shared memory (expressions of the sizes, computed once here).
        if let Some((base, start)) = dynamic {
            let (offsets, _) = g.dynamic_layout(start).expect("arrays sized at launch");
            for (i, _) in &g.dynamic_shared {
                let off = fc.index(&offsets[*i as usize])?;
                // SAFETY: an offset inside the dynamic shared memory the
                // launch sizes to hold every array (`dynamic_shared_bytes`).
                let p =
                    unsafe { fc.b.build_gep(cx.i8_type(), base, &[off], "") }.map_err(llvm_err)?;
                fc.shared[*i as usize].0 = p;
            }
        }
        Ok(fc)
    }

    /// Emits `g`'s body and the return: the whole kernel function.
    pub(crate) fn kernel(&mut self) -> R<()> {
        let g = self.g;
        self.body(&g.body)?;
        self.b.build_return(None).map_err(llvm_err)?;
        Ok(())
    }

    /// Address of `shared[shared][index]` in LDS.
    fn shared_ptr(&self, shared: u32, index: &Index) -> R<PointerValue<'ctx>> {
        let i = self.index(index)?;
        self.shared_ptr_at(shared, i)
    }

    /// Element `i` (an `i32` below the array's length) of LDS array `shared`.
    pub(crate) fn shared_ptr_at(&self, shared: u32, i: IntValue<'ctx>) -> R<PointerValue<'ctx>> {
        let (p, at) = self.shared[shared as usize];
        // SAFETY: LDS indices stay below the array length (block size) by construction.
        unsafe { self.b.build_in_bounds_gep(at, p, &[self.i32(0), i], "") }.map_err(llvm_err)
    }

    /// Address of `locals[local][index]`.
    fn local_ptr(&self, local: u32, index: &Index) -> R<PointerValue<'ctx>> {
        let (p, at) = self.locals[local as usize];
        let i = self.index(index)?;
        // SAFETY: accumulator indices stay below the array length by construction of the loop IR.
        unsafe { self.b.build_in_bounds_gep(at, p, &[self.i32(0), i], "") }.map_err(llvm_err)
    }

    pub(crate) fn i32(&self, v: i64) -> IntValue<'ctx> {
        self.ctx().i32(v)
    }

    pub(crate) fn call(
        &self,
        name: &str,
        tys: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        self.ctx().call(name, tys, args)
    }

    /// What a backend writes with: the context, module and builder.
    pub(crate) fn ctx(&self) -> Emit<'_, 'ctx> {
        Emit {
            cx: self.cx,
            m: self.m,
            b: &self.b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stmt::store_run;
    use rocmc_ir::index::VarId;
    use rocmc_ir::loops::Stmt;
    use rocmc_ir::schedule::Guard;
    use rocmc_ir::{DType, Expr, ExprKind, Index, TensorId};

    fn value(read: Option<TensorId>, dt: DType) -> Expr {
        let kind = match read {
            Some(t) => ExprKind::Load {
                tensor: t,
                indices: vec![Index::c(0), Index::c(0)],
            },
            None => ExprKind::Float(1.0),
        };
        Expr { kind, dtype: dt }
    }

    /// `C[row, col0 + l] = value`, under a guard on the column.
    fn store(row: &Index, col0: &Index, l: i64, read: Option<TensorId>, dt: DType) -> Stmt {
        let col = col0.clone() + Index::c(l);
        Stmt::If {
            guards: vec![Guard {
                value: col.clone(),
                extent: Index::Size(rocmc_ir::index::SizeId(1)),
            }],
            body: vec![Stmt::Store {
                tensor: TensorId(2),
                indices: vec![row.clone(), col],
                value: value(read, dt),
            }],
        }
    }

    #[test]
    fn runs_need_consecutive_aligned_elements_of_one_row() {
        let row = Index::Var(VarId(0));
        // A multiple of 8 plus twice a lane term: known even, not a known
        // multiple of 4.
        let even = Index::Var(VarId(1)) * Index::c(8) + Index::Var(VarId(2)) * Index::c(2);
        let quad = Index::Var(VarId(1)) * Index::c(8);
        let f32s = |col0: &Index, ls: &[i64]| -> Vec<Stmt> {
            ls.iter()
                .map(|&l| store(&row, col0, l, None, DType::F32))
                .collect()
        };
        assert_eq!(store_run(&f32s(&even, &[0, 1, 0, 1]), &[]), 2);
        assert_eq!(store_run(&f32s(&even, &[0, 1, 2, 3]), &[]), 2, "only even");
        assert_eq!(store_run(&f32s(&quad, &[0, 1, 2, 3]), &[]), 4);
        assert_eq!(store_run(&f32s(&quad, &[0, 1, 2]), &[]), 2);
        assert_eq!(store_run(&f32s(&even, &[0]), &[]), 0);
        assert_eq!(store_run(&f32s(&even, &[0, 2]), &[]), 0, "a gap");
        assert_eq!(store_run(&f32s(&even, &[1, 2]), &[]), 0, "odd start");
        let odd = Index::Var(VarId(1)) * Index::c(8) + Index::c(1);
        assert_eq!(store_run(&f32s(&odd, &[0, 1]), &[]), 0, "unknown alignment");
        // A column offset of a size stated to be a multiple of 4 (divisible).
        let sized = Index::Size(rocmc_ir::index::SizeId(0)) + Index::Var(VarId(1)) * Index::c(4);
        assert_eq!(store_run(&f32s(&sized, &[0, 1, 2, 3]), &[]), 0, "no fact");
        assert_eq!(
            store_run(&f32s(&sized, &[0, 1, 2, 3]), &[4]),
            4,
            "divisible = 4"
        );
        assert_eq!(
            store_run(&f32s(&sized, &[0, 1, 2, 3]), &[2]),
            2,
            "divisible = 2"
        );
        // Another row, another dtype, a value reading C, a bool: no run.
        let mut other_row = f32s(&even, &[0]);
        other_row.push(store(
            &(row.clone() + Index::c(8)),
            &even,
            1,
            None,
            DType::F32,
        ));
        assert_eq!(store_run(&other_row, &[]), 0);
        let mixed = vec![
            store(&row, &even, 0, None, DType::F32),
            store(&row, &even, 1, None, DType::F16),
        ];
        assert_eq!(store_run(&mixed, &[]), 0);
        let reading = vec![
            store(&row, &even, 0, None, DType::F32),
            store(&row, &even, 1, Some(TensorId(2)), DType::F32),
        ];
        assert_eq!(store_run(&reading, &[]), 0);
        let other_input = vec![
            store(&row, &even, 0, Some(TensorId(0)), DType::F32),
            store(&row, &even, 1, Some(TensorId(0)), DType::F32),
        ];
        assert_eq!(store_run(&other_input, &[]), 2);
        let bools = vec![
            store(&row, &even, 0, None, DType::Bool),
            store(&row, &even, 1, None, DType::Bool),
        ];
        assert_eq!(store_run(&bools, &[]), 0);
        // An If holding more than the store is not part of a run.
        let mut wide = f32s(&even, &[0, 1]);
        if let Stmt::If { body, .. } = &mut wide[1] {
            body.push(Stmt::Barrier);
        }
        assert_eq!(store_run(&wide, &[]), 0);
    }
}
