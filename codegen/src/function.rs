//! The target-neutral half of code generation: one loop-IR kernel becomes
//! the body of one LLVM function (loops, guards, index arithmetic,
//! addresses, loads and stores, expressions; math in `math.rs`, indices in
//! `index.rs`). Everything a target decides is asked of its
//! [`Backend`](crate::backend::Backend).

use crate::backend::Backend;
use crate::CodegenError;
use inkwell::attributes::Attribute;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FloatValue, FunctionValue, IntValue,
    PointerValue,
};
use inkwell::{FloatPredicate, IntPredicate};
use rocmc_ir::index::IOp;
use rocmc_ir::loops::{Addressing, GpuKernel, Mem, Stmt};
use rocmc_ir::{BinOp, DType, Expr, ExprKind, Index, Kernel, MathFn, TensorId, UnaryOp};
use rocmc_target::matrix::MatrixInstr;
use std::collections::HashMap;

pub(crate) fn llvm_err(e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Llvm(e.to_string())
}

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
    pub(crate) bounds: crate::index::Bounds,
    /// The target's dialect.
    pub(crate) be: &'a dyn Backend,
}

/// An LLVM type as the matrix table writes it: `float`, `i32`, `<4 x half>`.
pub(crate) fn llvm_type<'ctx>(cx: &'ctx Context, s: &str) -> R<BasicTypeEnum<'ctx>> {
    let scalar = |t: &str| -> R<BasicTypeEnum<'ctx>> {
        Ok(match t {
            "half" => cx.f16_type().into(),
            "bfloat" => cx.bf16_type().into(),
            "float" => cx.f32_type().into(),
            "i16" => cx.i16_type().into(),
            "i32" => cx.i32_type().into(),
            "i64" => cx.i64_type().into(),
            other => {
                return Err(CodegenError::Llvm(format!(
                    "unknown matrix operand type {other}"
                )))
            }
        })
    };
    match s.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
        Some(inner) => {
            let (n, t) = inner
                .split_once(" x ")
                .ok_or_else(|| CodegenError::Llvm(format!("bad vector type {s}")))?;
            let n: u32 = n
                .parse()
                .map_err(|_| CodegenError::Llvm(format!("bad vector type {s}")))?;
            Ok(match scalar(t)? {
                BasicTypeEnum::FloatType(f) => f.vec_type(n).into(),
                BasicTypeEnum::IntType(i) => i.vec_type(n).into(),
                _ => unreachable!("scalars only"),
            })
        }
        None => scalar(s),
    }
}

pub(crate) fn ty<'ctx>(cx: &'ctx Context, d: DType) -> BasicTypeEnum<'ctx> {
    match d {
        DType::Bool => cx.bool_type().into(),
        DType::I8 | DType::U8 => cx.i8_type().into(),
        DType::I32 | DType::U32 => cx.i32_type().into(),
        DType::I64 => cx.i64_type().into(),
        DType::F16 => cx.f16_type().into(),
        DType::BF16 => cx.bf16_type().into(),
        DType::F32 => cx.f32_type().into(),
        DType::F64 => cx.f64_type().into(),
        // 8-bit floats are their encoding's bits: no LLVM type holds them
        // on every target, and nothing computes in them.
        DType::F8E4M3FN | DType::F8E5M2 | DType::F8E4M3FNUZ | DType::F8E5M2FNUZ => {
            cx.i8_type().into()
        }
    }
}

/// In memory a bool is a byte.
fn mem_ty<'ctx>(cx: &'ctx Context, d: DType) -> BasicTypeEnum<'ctx> {
    if d == DType::Bool {
        cx.i8_type().into()
    } else {
        ty(cx, d)
    }
}

pub(crate) type R<T> = Result<T, CodegenError>;

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
        Ok(FnCx {
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
            bounds: crate::index::Bounds::of(k, g),
            be,
        })
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

    pub(crate) fn call_void(&self, name: &str) -> R<()> {
        let f = self.intrinsic(name, &[])?;
        self.b.build_call(f, &[], "").map_err(llvm_err)?;
        Ok(())
    }

    /// Address of `locals[local][index]`.
    fn local_ptr(&self, local: u32, index: &Index) -> R<PointerValue<'ctx>> {
        let (p, at) = self.locals[local as usize];
        let i = self.index(index)?;
        // SAFETY: accumulator indices stay below the array length by construction of the loop IR.
        unsafe { self.b.build_in_bounds_gep(at, p, &[self.i32(0), i], "") }.map_err(llvm_err)
    }

    pub(crate) fn i32(&self, v: i64) -> IntValue<'ctx> {
        self.cx.i32_type().const_int(v as u64, true)
    }

    pub(crate) fn intrinsic(
        &self,
        name: &str,
        tys: &[BasicTypeEnum<'ctx>],
    ) -> R<FunctionValue<'ctx>> {
        let i = Intrinsic::find(name)
            .ok_or_else(|| CodegenError::Llvm(format!("no intrinsic {name}")))?;
        i.get_declaration(self.m, tys)
            .ok_or_else(|| CodegenError::Llvm(format!("cannot declare {name}")))
    }

    pub(crate) fn call(
        &self,
        name: &str,
        tys: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let f = self.intrinsic(name, tys)?;
        let v = self.b.build_call(f, args, "").map_err(llvm_err)?;
        match v.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            _ => Err(CodegenError::Llvm(format!("{name} returns nothing"))),
        }
    }

    /// Address of element `indices` of `tensor`, in the kernel's addressing
    /// mode. With `Offset32` the byte offset is formed in 32 bits and
    /// zero-extended, which lets the backend use the scalar-base + 32-bit
    /// vector-offset mode of global memory; the wider modes are chosen by
    /// lowering when sizes could overflow that.
    fn address(&self, tensor: TensorId, indices: &[Index]) -> R<PointerValue<'ctx>> {
        let wide = self.g.addressing == Addressing::Index64;
        // Constant terms of the last index (unrolled loop steps, `x + 1`)
        // become a second, constant GEP: accesses that differ only by them
        // then share one base, and LLVM merges them into vector accesses
        // with immediate offsets instead of forming each address.
        let last = indices.len().saturating_sub(1);
        let (last_value, step) = match indices.last() {
            Some(ix) => self.split_constant(ix, wide)?,
            None => (self.i32(0), 0),
        };
        let mut values = Vec::with_capacity(indices.len());
        for (d, ix) in indices.iter().enumerate() {
            values.push(if d == last {
                last_value
            } else {
                self.at_width(ix)?
            });
        }
        self.element_address_in(tensor, &values, step, None)
    }

    /// Loads an element of dtype `t` from global memory (bools are bytes).
    fn load_element(&self, p: PointerValue<'ctx>, t: DType) -> R<BasicValueEnum<'ctx>> {
        let v = self
            .b
            .build_load(mem_ty(self.cx, t), p, "")
            .map_err(llvm_err)?;
        v.as_instruction_value()
            .expect("load")
            .set_alignment(t.size() as u32)
            .map_err(llvm_err)?;
        if t != DType::Bool {
            return Ok(v);
        }
        let z = self.cx.i8_type().const_zero();
        Ok(self
            .b
            .build_int_compare(IntPredicate::NE, v.into_int_value(), z, "")
            .map_err(llvm_err)?
            .into())
    }

    /// A gathered element.
    fn gather(&self, tensor: TensorId, subs: &[Expr], t: DType) -> R<BasicValueEnum<'ctx>> {
        let p = self.gather_address(tensor, subs)?;
        self.load_element(p, t)
    }

    /// [`ZERO_BYTES`] of zeros in address space `space` (every dtype's
    /// zero, for the lanes of a vector access too), read by the module's
    /// gathers from tensors that turn out to be empty.
    fn zero_global(&self, space: inkwell::AddressSpace) -> R<PointerValue<'ctx>> {
        let digits: String = format!("{space:?}")
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let name = format!("rocmc_zero_as{digits}");
        if let Some(g) = self.m.get_global(&name) {
            return Ok(g.as_pointer_value());
        }
        let ty = self.cx.i8_type().array_type(ZERO_BYTES as u32);
        let g = self.m.add_global(ty, Some(space), &name);
        g.set_initializer(&ty.const_zero());
        g.set_constant(true);
        g.set_linkage(inkwell::module::Linkage::Internal);
        g.set_alignment(16);
        Ok(g.as_pointer_value())
    }

    /// An `i32` subscript known to be non-negative at the kernel's
    /// addressing width.
    pub(crate) fn to_addressing_width(&self, v: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        if self.g.addressing != Addressing::Index64 {
            return Ok(v);
        }
        self.b
            .build_int_z_extend(v, self.cx.i64_type(), "")
            .map_err(llvm_err)
    }

    /// An index at the kernel's addressing width.
    fn at_width(&self, ix: &Index) -> R<IntValue<'ctx>> {
        if self.g.addressing == Addressing::Index64 {
            self.index_wide(ix)
        } else {
            self.index(ix)
        }
    }

    /// The address of a gathered element. Data subscripts are clamped into
    /// `0..=extent - 1` (the meaning of [`ExprKind::Gather`]), so the
    /// address is inside the tensor; where the tensor may be empty it is
    /// instead a constant of zeros ([`Self::zero_global`]), chosen by a
    /// select, so the expression stays straight-line code. An affine last
    /// subscript keeps its constant terms apart, as in [`Self::address`],
    /// so the lanes of a vectorized loop share one base.
    fn gather_address(&self, tensor: TensorId, subs: &[Expr]) -> R<PointerValue<'ctx>> {
        let t = self.k.tensor(tensor);
        let wide = self.g.addressing == Addressing::Index64;
        let mut values = Vec::with_capacity(subs.len());
        let mut nonempty: Option<IntValue<'ctx>> = None;
        let mut step = 0;
        for (d, (sub, ext)) in subs.iter().zip(&t.shape).enumerate() {
            if let ExprKind::Index(ix) = &sub.kind {
                if d + 1 == subs.len() {
                    let (v, k) = self.split_constant(ix, wide)?;
                    if (k + 1) * t.dtype.size() as i64 <= ZERO_BYTES {
                        values.push(v);
                        step = k;
                        continue;
                    }
                }
                values.push(self.at_width(ix)?);
                continue;
            }
            let v = self.expr(sub)?.into_int_value();
            let e = self.index(ext)?;
            if ext.as_const().is_none_or(|c| c <= 0) {
                let has = self
                    .b
                    .build_int_compare(IntPredicate::SGT, e, self.i32(0), "")
                    .map_err(llvm_err)?;
                nonempty = Some(match nonempty {
                    Some(n) => self.b.build_and(n, has, "").map_err(llvm_err)?,
                    None => has,
                });
            }
            let hi = self.b.build_int_sub(e, self.i32(1), "").map_err(llvm_err)?;
            let i32t = self.cx.i32_type().into();
            let v = self.call("llvm.smin", &[i32t], &[v.into(), hi.into()])?;
            let v = self.call("llvm.smax", &[i32t], &[v.into(), self.i32(0).into()])?;
            values.push(self.to_addressing_width(v.into_int_value())?);
        }
        self.element_address_in(tensor, &values, step, nonempty)
    }

    /// The address of the element at `values` (one per dimension, at the
    /// addressing width, each inside its dimension) plus `step` elements;
    /// where `nonempty` is false, the same offset `step` into
    /// [`Self::zero_global`] instead.
    pub(crate) fn element_address_in(
        &self,
        tensor: TensorId,
        values: &[IntValue<'ctx>],
        step: i64,
        nonempty: Option<IntValue<'ctx>>,
    ) -> R<PointerValue<'ctx>> {
        let t = self.k.tensor(tensor);
        let i64t = self.cx.i64_type();
        let wide = self.g.addressing == Addressing::Index64;
        let mut off = if wide { i64t.const_zero() } else { self.i32(0) };
        for (d, i) in values.iter().enumerate() {
            off = if d == 0 {
                *i
            } else {
                let ext = self.at_width(&t.shape[d])?;
                let m = self.b.build_int_nuw_mul(off, ext, "").map_err(llvm_err)?;
                self.b.build_int_nuw_add(m, *i, "").map_err(llvm_err)?
            };
        }
        let size = t.dtype.size() as u64;
        let bytes = match self.g.addressing {
            Addressing::Offset32 => {
                let b32 = self
                    .b
                    .build_int_nuw_mul(off, self.i32(size as i64), "")
                    .map_err(llvm_err)?;
                self.b.build_int_z_extend(b32, i64t, "").map_err(llvm_err)?
            }
            Addressing::Index32 => {
                let e = self.b.build_int_z_extend(off, i64t, "").map_err(llvm_err)?;
                self.b
                    .build_int_nuw_mul(e, i64t.const_int(size, false), "")
                    .map_err(llvm_err)?
            }
            Addressing::Index64 => self
                .b
                .build_int_nuw_mul(off, i64t.const_int(size, false), "")
                .map_err(llvm_err)?,
        };
        let mut base = self.bufs[&tensor];
        let mut bytes = bytes;
        if let Some(n) = nonempty {
            let zero = self.zero_global(base.get_type().get_address_space())?;
            base = self
                .b
                .build_select(n, base, zero, "")
                .map_err(llvm_err)?
                .into_pointer_value();
            bytes = self
                .b
                .build_select(n, bytes, i64t.const_zero(), "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        // SAFETY: in-bounds by the kernel's guards (the first pointer lies at
        // or before the element); inkwell marks GEP unsafe because LLVM cannot check it.
        let p = unsafe {
            self.b
                .build_in_bounds_gep(self.cx.i8_type(), base, &[bytes], "")
        }
        .map_err(llvm_err)?;
        if step == 0 {
            return Ok(p);
        }
        let k = i64t.const_int(step as u64 * size, false);
        // SAFETY: as above, `p` plus the constant is the element itself.
        unsafe { self.b.build_in_bounds_gep(self.cx.i8_type(), p, &[k], "") }.map_err(llvm_err)
    }

    /// An index as (value without its constant terms, their positive sum),
    /// when every term is non-negative (so the rest cannot be negative);
    /// else (value, 0). Unrolled loop variables count as constants. The
    /// value is an `i64` when `wide`, else an `i32`.
    fn split_constant(&self, ix: &Index, wide: bool) -> R<(IntValue<'ctx>, i64)> {
        fn terms<'a>(e: &'a Index, out: &mut Vec<&'a Index>) {
            match e {
                Index::Bin(IOp::Add, a, b) => {
                    terms(a, out);
                    terms(b, out);
                }
                other => out.push(other),
            }
        }
        fn has_sub(e: &Index) -> bool {
            match e {
                Index::Bin(IOp::Sub, ..) => true,
                Index::Bin(_, a, b) => has_sub(a) || has_sub(b),
                Index::Const(c) => *c < 0,
                _ => false,
            }
        }
        let whole = |ix: &Index| {
            if wide {
                self.index_wide(ix)
            } else {
                self.index(ix)
            }
        };
        let mut ts = Vec::new();
        terms(ix, &mut ts);
        if ts.len() < 2
            || self.needs_wide(ix)
            || ts.iter().any(|t| has_sub(t) || self.range(t).0 < 0)
        {
            return Ok((whole(ix)?, 0));
        }
        let mut step = 0i64;
        let mut rest: Option<IntValue<'ctx>> = None;
        for t in ts {
            let v = whole(t)?;
            match v.get_zero_extended_constant() {
                Some(c) if v.is_const() => step += c as i64,
                _ => {
                    rest = Some(match rest {
                        None => v,
                        Some(r) => self.b.build_int_nuw_add(r, v, "").map_err(llvm_err)?,
                    })
                }
            }
        }
        // Every term is already emitted: reuse them rather than the whole index.
        Ok(match rest {
            Some(r) if step > 0 => (r, step),
            Some(r) => (r, 0),
            None if wide => (self.cx.i64_type().const_int(step as u64, false), 0),
            None => (self.i32(step), 0),
        })
    }

    pub(crate) fn body(&mut self, stmts: &[Stmt]) -> R<()> {
        let mut i = 0;
        while i < stmts.len() {
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
    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Bind { var, axis } => {
                let v = self.be.axis_index(self, *axis)?;
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
            Stmt::Barrier => self.be.barrier(self)?,
            Stmt::AsyncCommit => self.be.async_commit(self)?,
            Stmt::AsyncWait { pending } => self.be.async_wait(self, *pending)?,
            Stmt::Unswitch { guards, fast, slow } => self.unswitch(guards, fast, slow)?,
            Stmt::Matrix {
                instr, a, b, acc, ..
            } => self.matrix(instr, a, b, acc)?,
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
    fn store_vector(&mut self, run: &[Stmt]) -> R<()> {
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

    /// A [`Stmt::MatrixLoad`]: the target's instruction, each 32-bit
    /// register split into the two 16-bit elements its stores name; the
    /// stores themselves where the target has none.
    fn matrix_load(
        &mut self,
        shared: u32,
        row: &Index,
        count: u32,
        trans: bool,
        stores: &[Stmt],
    ) -> R<()> {
        let p = self.shared_ptr(shared, row)?;
        let Some(regs) = self.be.matrix_load(self, p, count, trans)? else {
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

    fn serial_loop(&mut self, var: rocmc_ir::VarId, extent: &Index, body: &[Stmt]) -> R<()> {
        let n = self.index(extent)?;
        let name = self.g.vars[var.0 as usize].name.clone();
        self.counted_loop(n, &name, |me, i| {
            me.vars[var.0 as usize] = Some(i);
            me.versioned_body(body)
        })?;
        self.vars[var.0 as usize] = None;
        Ok(())
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
        if !self.be.versions_loop_bodies() || conditionals(tail) < 2 || tail.iter().any(has_barrier)
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
        let all = self.be.wave_all(self, all)?;
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
    fn straight_body(&mut self, stmts: &[Stmt]) -> R<()> {
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
                        self.be.async_commit(self)?;
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
    fn release(&mut self, held: &mut Option<&[Stmt]>, commit: &mut bool) -> R<()> {
        if let Some(fills) = held.take() {
            self.fill_group_vector(fills)?;
        }
        if std::mem::take(commit) {
            self.be.async_commit(self)?;
        }
        Ok(())
    }

    /// `fast` with the vector fills of `fills` spread over its unrolled
    /// loop at `at` ([`matrix_steps`]): an equal share before the first
    /// matrix instruction of each iteration.
    fn interleave(&mut self, fast: &[Stmt], at: usize, fills: &[Stmt]) -> R<()> {
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
    fn unswitch(
        &mut self,
        guards: &[rocmc_ir::schedule::Guard],
        fast: &[Stmt],
        slow: &[Stmt],
    ) -> R<()> {
        let cond = self.all_hold(guards)?;
        self.if_else(
            cond,
            ["vector", "scalar", "join"],
            |me| me.body(fast),
            |me| me.body(slow),
        )
    }

    /// Runs `then` when `cond` (an i1) is true, else `otherwise`; `names`
    /// names the two blocks and the join.
    fn if_else(
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

    /// One matrix instruction: the lane's fragments packed into the
    /// intrinsic's operand types, the backend's call, D back into the
    /// accumulator elements.
    fn matrix(
        &mut self,
        instr: &MatrixInstr,
        a: &(u32, Index),
        b: &(u32, Index),
        acc: &(u32, Index),
    ) -> R<()> {
        let av = self.matrix_operands(a, instr.a_per_lane(), instr.llvm_a)?;
        let bv = self.matrix_operands(b, instr.b_per_lane(), instr.llvm_b)?;
        let cv = self.matrix_operands(acc, instr.acc_per_lane(), instr.llvm_c)?;
        let d = self.be.matrix(self, instr, av, bv, cv)?;
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

    /// `count` elements of `locals[id]` from `base` as `spec.1` operands of
    /// the LLVM type `spec.0` (`<4 x half>`, `i32` holding four i8 …).
    fn matrix_operands(
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
                st.set_alignment(value.dtype.size() as u32)
                    .map_err(llvm_err)?;
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
            } => self.fill(*mem, *array, index, value, *width, *asynchronous)?,
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

    /// A [`Stmt::Fill`]: from a tensor, one W-wide load where every lane
    /// lies inside the tensor and the address is aligned to the whole
    /// vector, otherwise each lane's clamped scalar load (the alignment is
    /// checked at run time: it depends on the row length and the base
    /// address); from registers, the W values. Into LDS, one aligned vector
    /// store; into registers, W scalars. An asynchronous fill's vector path
    /// is the target's asynchronous copy where it has one; its lanes path
    /// copies at once, which its semantics allow.
    fn fill(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        width: u32,
        asynchronous: bool,
    ) -> R<()> {
        let Some(vt) = self.fill_vector_type(value.dtype, width) else {
            return self.fill_lanes(mem, array, index, value, width);
        };
        let (tensor, indices) = match &value.kind {
            ExprKind::Load { tensor, indices } => (*tensor, indices),
            ExprKind::Local { .. } => {
                let mut acc = vt.into_vector_type().get_poison();
                for l in 0..width {
                    let x = self.expr(&rocmc_ir::loops::fill_lane(self.k, value, l))?;
                    acc = self
                        .b
                        .build_insert_element(acc, x, self.i32(i64::from(l)), "")
                        .map_err(llvm_err)?;
                }
                return self.fill_store_vector(mem, array, index, value.dtype, width, acc.into());
            }
            _ => return self.fill_lanes(mem, array, index, value, width),
        };
        let Some(inside) = self.fill_inside(tensor, indices, width)? else {
            return self.fill_lanes(mem, array, index, value, width);
        };
        let check = self.cx.append_basic_block(self.f, "fill.align");
        let vector = self.cx.append_basic_block(self.f, "fill.vector");
        let lanes = self.cx.append_basic_block(self.f, "fill.lanes");
        let join = self.cx.append_basic_block(self.f, "fill.join");
        self.b
            .build_conditional_branch(inside, check, lanes)
            .map_err(llvm_err)?;
        // Only formed where the lanes are inside: out-of-range indices
        // would make the address arithmetic's no-wrap flags poison.
        self.b.position_at_end(check);
        let p = self.address(tensor, indices)?;
        let aligned = self.fill_aligned_at(tensor, indices, p, value.dtype, width)?;
        self.b
            .build_conditional_branch(aligned, vector, lanes)
            .map_err(llvm_err)?;
        self.b.position_at_end(vector);
        self.fill_vector(mem, array, index, p, vt, value.dtype, width, asynchronous)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(lanes);
        self.fill_lanes(mem, array, index, value, width)?;
        self.b.build_unconditional_branch(join).map_err(llvm_err)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// Several fills from tensors (a tile's copy, each thread's share of
    /// it): when every one of them takes its vector path, they run as
    /// straight-line vector copies with no branch between them (which lets
    /// the assembler schedule them among other work), else each fill checks
    /// its own lanes. One branch instead of two per fill.
    fn fill_group(&mut self, stmts: &[Stmt]) -> R<()> {
        let all = self.fill_group_ok(stmts)?;
        self.if_else(
            all,
            ["fills.vector", "fills.checked", "fills.join"],
            |me| me.fill_group_vector(stmts),
            |me| me.body(stmts),
        )
    }

    /// Whether every fill of a group may take its vector path: all lanes
    /// inside the tensor, the address aligned.
    fn fill_group_ok(&mut self, stmts: &[Stmt]) -> R<IntValue<'ctx>> {
        let mut all = self.cx.bool_type().const_int(1, false);
        self.fill_group_each(stmts, &mut |me, tensor, indices, f| {
            let Stmt::Fill { value, width, .. } = f else {
                return Ok(());
            };
            let Some(inside) = me.fill_inside(tensor, indices, *width)? else {
                return Err(CodegenError::Llvm(
                    "a grouped fill without a last dimension (a rocmc bug)".into(),
                ));
            };
            let p = me.address(tensor, indices)?;
            let aligned = me.fill_aligned_at(tensor, indices, p, value.dtype, *width)?;
            // A select, not an and: out of range, the address arithmetic's
            // no-wrap flags may make `aligned` poison.
            let no = me.cx.bool_type().const_zero();
            let ok =
                me.b.build_select(inside, aligned, no, "")
                    .map_err(llvm_err)?
                    .into_int_value();
            all = me.b.build_and(all, ok, "").map_err(llvm_err)?;
            Ok(())
        })?;
        Ok(all)
    }

    /// A group's fills as straight-line vector copies, where
    /// [`Self::fill_group_ok`] holds.
    fn fill_group_vector(&mut self, stmts: &[Stmt]) -> R<()> {
        self.fill_group_range(stmts, 0..usize::MAX)
    }

    /// The vector copies of the fills numbered `range` of a group, in
    /// [`Self::fill_group_each`]'s order.
    fn fill_group_range(&mut self, stmts: &[Stmt], range: std::ops::Range<usize>) -> R<()> {
        let mut n = 0;
        self.fill_group_each(stmts, &mut |me, tensor, indices, f| {
            n += 1;
            if !range.contains(&(n - 1)) {
                return Ok(());
            }
            let Stmt::Fill {
                mem,
                array,
                index,
                value,
                width,
                asynchronous,
            } = f
            else {
                return Ok(());
            };
            let vt = me.fill_vector_type(value.dtype, *width).ok_or_else(|| {
                CodegenError::Llvm("a grouped fill without a vector type (a rocmc bug)".into())
            })?;
            let p = me.address(tensor, indices)?;
            me.fill_vector(
                *mem,
                *array,
                index,
                p,
                vt,
                value.dtype,
                *width,
                *asynchronous,
            )
        })
    }

    /// Calls `f` on each fill of a group ([`fill_group_size`]) with its
    /// source tensor and indices, unrolled loops' variables bound.
    fn fill_group_each(&mut self, stmts: &[Stmt], f: &mut GroupedFill<'_, 'a, 'ctx>) -> R<()> {
        for s in stmts {
            match s {
                Stmt::Loop {
                    var, extent, body, ..
                } => {
                    for i in 0..extent.as_const().unwrap_or(0) {
                        self.vars[var.0 as usize] = Some(self.i32(i));
                        self.fill_group_each(body, f)?;
                    }
                    self.vars[var.0 as usize] = None;
                }
                Stmt::Fill { value, .. } => {
                    if let ExprKind::Load { tensor, indices } = &value.kind {
                        f(self, *tensor, indices, s)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The W-wide vector a fill of `dt` moves in one access, if any.
    fn fill_vector_type(&self, dt: DType, width: u32) -> Option<BasicTypeEnum<'ctx>> {
        match mem_ty(self.cx, dt) {
            BasicTypeEnum::FloatType(t) if dt != DType::Bool => {
                Some(t.vec_type(width).as_basic_type_enum())
            }
            BasicTypeEnum::IntType(t) if dt != DType::Bool => {
                Some(t.vec_type(width).as_basic_type_enum())
            }
            _ => None,
        }
    }

    /// Whether a fill's W lanes `tensor[.., c..c + W]` all lie inside the
    /// tensor's last dimension; `None` for a tensor without one.
    fn fill_inside(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        width: u32,
    ) -> R<Option<IntValue<'ctx>>> {
        let (Some(last), Some(ext)) = (indices.last(), self.k.tensor(tensor).shape.last()) else {
            return Ok(None);
        };
        let c = self.index(last)?;
        let ext = self.index(ext)?;
        let end = self
            .b
            .build_int_nsw_add(c, self.i32(i64::from(width)), "")
            .map_err(llvm_err)?;
        let lo = self
            .b
            .build_int_compare(IntPredicate::SGE, c, self.i32(0), "")
            .map_err(llvm_err)?;
        let hi = self
            .b
            .build_int_compare(IntPredicate::SLE, end, ext, "")
            .map_err(llvm_err)?;
        Ok(Some(self.b.build_and(lo, hi, "").map_err(llvm_err)?))
    }

    /// Whether a fill's W lanes `tensor[indices..+W]` start on a whole
    /// W-wide vector, from the shape of the index rather than the address:
    /// the last index is a known multiple of W, and the row length and the
    /// tensor's base are (checked at run time where not known; both are
    /// loop-invariant, so the check leaves the loop). `None` where the last
    /// index is not a known multiple of W: the address must be checked.
    fn fill_aligned_known(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        dt: DType,
        width: u32,
    ) -> R<Option<IntValue<'ctx>>> {
        let w = u64::from(width);
        let Some(last) = indices.last() else {
            return Ok(None);
        };
        let d = last.known_divisor_in(&self.divisors);
        if d != 0 && !d.is_multiple_of(w) {
            return Ok(None);
        }
        let i32t = self.cx.i32_type();
        let mut ok = self.cx.bool_type().const_int(1, false);
        let shape = &self.k.tensor(tensor).shape;
        if indices.len() >= 2 {
            let row = &shape[shape.len() - 1];
            let d = row.known_divisor_in(&self.divisors);
            if d != 0 && !d.is_multiple_of(w) {
                let n = self.index(row)?;
                let rem = self
                    .b
                    .build_int_unsigned_rem(n, i32t.const_int(w, false), "")
                    .map_err(llvm_err)?;
                ok = self
                    .b
                    .build_int_compare(IntPredicate::EQ, rem, i32t.const_zero(), "")
                    .map_err(llvm_err)?;
            }
        }
        let base = self.bufs[&tensor];
        let based = self.fill_aligned(base, dt, width)?;
        Ok(Some(self.b.build_and(ok, based, "").map_err(llvm_err)?))
    }

    /// A fill's alignment check: from the index where the backend asks for
    /// that and it is known ([`Self::fill_aligned_known`]), else from the
    /// address `p`.
    fn fill_aligned_at(
        &mut self,
        tensor: TensorId,
        indices: &[Index],
        p: PointerValue<'ctx>,
        dt: DType,
        width: u32,
    ) -> R<IntValue<'ctx>> {
        if !self.be.alignment_from_index() {
            return self.fill_aligned(p, dt, width);
        }
        match self.fill_aligned_known(tensor, indices, dt, width)? {
            Some(ok) => Ok(ok),
            None => self.fill_aligned(p, dt, width),
        }
    }

    /// Whether `p` is aligned to a whole W-wide vector of `dt`.
    fn fill_aligned(&mut self, p: PointerValue<'ctx>, dt: DType, width: u32) -> R<IntValue<'ctx>> {
        let bytes = u64::from(width) * dt.size() as u64;
        let i64t = self.cx.i64_type();
        let pi = self.b.build_ptr_to_int(p, i64t, "").map_err(llvm_err)?;
        let rem = self
            .b
            .build_and(pi, i64t.const_int(bytes - 1, false), "")
            .map_err(llvm_err)?;
        self.b
            .build_int_compare(IntPredicate::EQ, rem, i64t.const_zero(), "")
            .map_err(llvm_err)
    }

    /// A fill's vector path from the aligned address `p` of its lanes:
    /// the target's asynchronous copy where the fill allows one, else one
    /// vector load and the store into `mem`.
    #[allow(clippy::too_many_arguments)]
    fn fill_vector(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        p: PointerValue<'ctx>,
        vt: BasicTypeEnum<'ctx>,
        dt: DType,
        width: u32,
        asynchronous: bool,
    ) -> R<()> {
        let bytes = u64::from(width) * dt.size() as u64;
        let sent = asynchronous && mem == Mem::Shared && {
            let sp = self.shared_ptr(array, index)?;
            self.be.async_copy(self, sp, p, bytes as u32)?
        };
        if !sent {
            let v = self.b.build_load(vt, p, "").map_err(llvm_err)?;
            v.as_instruction_value()
                .expect("load")
                .set_alignment(bytes as u32)
                .map_err(llvm_err)?;
            self.fill_store_vector(mem, array, index, dt, width, v)?;
        }
        Ok(())
    }

    /// Stores the W values (of `dt`) of `v` into `mem` array `array` at `index`.
    fn fill_store_vector(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        dt: DType,
        width: u32,
        v: BasicValueEnum<'ctx>,
    ) -> R<()> {
        match mem {
            Mem::Shared => {
                let sp = self.shared_ptr(array, index)?;
                let st = self.b.build_store(sp, v).map_err(llvm_err)?;
                st.set_alignment(width * dt.size() as u32).map_err(llvm_err)
            }
            Mem::Local => {
                for l in 0..width {
                    let x = self
                        .b
                        .build_extract_element(v.into_vector_value(), self.i32(i64::from(l)), "")
                        .map_err(llvm_err)?;
                    let p = self.local_ptr(array, &(index.clone() + Index::c(i64::from(l))))?;
                    self.b.build_store(p, x).map_err(llvm_err)?;
                }
                Ok(())
            }
        }
    }

    /// A fill lane by lane: each lane's own (clamped) value.
    fn fill_lanes(
        &mut self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        width: u32,
    ) -> R<()> {
        for l in 0..width {
            let index = index.clone() + Index::c(i64::from(l));
            let v = rocmc_ir::loops::fill_lane(self.k, value, l);
            self.leaf(&match mem {
                Mem::Shared => Stmt::SharedStore {
                    shared: array,
                    index,
                    value: v,
                },
                Mem::Local => Stmt::LocalStore {
                    local: array,
                    index,
                    value: v,
                },
            })?;
        }
        Ok(())
    }

    fn to_mem(&self, d: DType, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        if d == DType::Bool {
            return Ok(self
                .b
                .build_int_z_extend(v.into_int_value(), self.cx.i8_type(), "")
                .map_err(llvm_err)?
                .into());
        }
        Ok(v)
    }

    pub(crate) fn expr(&self, e: &Expr) -> R<BasicValueEnum<'ctx>> {
        let t = e.dtype;
        let lt = ty(self.cx, t);
        let b = &self.b;
        Ok(match &e.kind {
            ExprKind::Int(v) => lt
                .into_int_type()
                .const_int(*v as u64, t.is_signed())
                .into(),
            ExprKind::Float(v) => match e.dtype.f8_format() {
                Some(f) => self
                    .cx
                    .i8_type()
                    .const_int(u64::from(f.encode(*v)), false)
                    .into(),
                None => lt.into_float_type().const_float(*v).into(),
            },
            ExprKind::Param(p) => self.params[p.0 as usize],
            ExprKind::Reduced | ExprKind::Operand { .. } => {
                return Err(CodegenError::Llvm(
                    "a reduction result outside its stage (a rocmc bug)".into(),
                ))
            }
            ExprKind::Shared { shared, index } => {
                let p = self.shared_ptr(*shared, index)?;
                b.build_load(lt, p, "").map_err(llvm_err)?
            }
            ExprKind::Local { local, index } => {
                let p = self.local_ptr(*local, index)?;
                b.build_load(lt, p, "").map_err(llvm_err)?
            }
            ExprKind::Index(i) => self.index(i)?.into(),
            ExprKind::Gather { tensor, indices } => self.gather(*tensor, indices, t)?,
            ExprKind::Load { tensor, indices } => {
                let p = self.address(*tensor, indices)?;
                self.load_element(p, t)?
            }
            ExprKind::Unary(UnaryOp::Neg, a) => {
                let a = self.expr(a)?;
                if t.is_float() {
                    b.build_float_neg(a.into_float_value(), "")
                        .map_err(llvm_err)?
                        .into()
                } else {
                    b.build_int_neg(a.into_int_value(), "")
                        .map_err(llvm_err)?
                        .into()
                }
            }
            ExprKind::Unary(UnaryOp::Not, a) => b
                .build_not(self.expr(a)?.into_int_value(), "")
                .map_err(llvm_err)?
                .into(),
            ExprKind::Cast(a) => self.cast(a.dtype, t, self.expr(a)?)?,
            ExprKind::Bitcast(a) => {
                let v = self.expr(a)?;
                b.build_bit_cast(v, lt, "").map_err(llvm_err)?
            }
            ExprKind::Select(c, x, y) => {
                let c = self.expr(c)?.into_int_value();
                b.build_select(c, self.expr(x)?, self.expr(y)?, "")
                    .map_err(llvm_err)?
            }
            ExprKind::Binary(op, x, y) => match self.fused(*op, t, x, y)? {
                Some(v) => v,
                None => self.binary(*op, x.dtype, self.expr(x)?, self.expr(y)?)?,
            },
            ExprKind::Call(f, args) => {
                let xs = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                self.math(*f, t, &xs)?
            }
        })
    }

    /// `a * b + c` and `a * b - c` (either operand order) as
    /// `llvm.fmuladd` when contraction is on, as clang emits for
    /// `-ffp-contract=on`: the multiply and the add stay one operation, so
    /// the SLP vectorizer cannot pair the multiplies into packed ones and
    /// leave the adds unfused.
    fn fused(&self, op: BinOp, t: DType, x: &Expr, y: &Expr) -> R<Option<BasicValueEnum<'ctx>>> {
        if !self.contract || !matches!(t, DType::F32 | DType::F64 | DType::F16) {
            return Ok(None);
        }
        fn product(e: &Expr) -> Option<(&Expr, &Expr)> {
            match &e.kind {
                ExprKind::Binary(BinOp::Mul, a, b) => Some((a, b)),
                _ => None,
            }
        }
        // (a, b, c, negate c, negate a): the result is (±a)·b + (±c).
        let (a, b, c, neg_c, neg_a) = match (op, product(x), product(y)) {
            (BinOp::Add, Some((a, b)), _) => (a, b, y, false, false),
            (BinOp::Add, None, Some((a, b))) => (a, b, x, false, false),
            (BinOp::Sub, Some((a, b)), _) => (a, b, y, true, false),
            (BinOp::Sub, None, Some((a, b))) => (a, b, x, false, true),
            _ => return Ok(None),
        };
        let bld = &self.b;
        let neg = |v: BasicValueEnum<'ctx>, yes: bool| -> R<BasicValueEnum<'ctx>> {
            Ok(if yes {
                bld.build_float_neg(v.into_float_value(), "")
                    .map_err(llvm_err)?
                    .into()
            } else {
                v
            })
        };
        let a = neg(self.expr(a)?, neg_a)?;
        let b = self.expr(b)?;
        let c = neg(self.expr(c)?, neg_c)?;
        let lt = ty(self.cx, t);
        self.call("llvm.fmuladd", &[lt], &[a.into(), b.into(), c.into()])
            .map(Some)
    }

    fn binary(
        &self,
        op: BinOp,
        t: DType,
        x: BasicValueEnum<'ctx>,
        y: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let b = &self.b;
        let lt = ty(self.cx, t);
        if t.is_float() {
            let (x, y) = (x.into_float_value(), y.into_float_value());
            let cmp = |p| -> R<BasicValueEnum<'ctx>> {
                Ok(b.build_float_compare(p, x, y, "").map_err(llvm_err)?.into())
            };
            let contract = |v: FloatValue<'ctx>| -> R<BasicValueEnum<'ctx>> {
                if self.contract {
                    if let Some(i) = v.as_instruction_value() {
                        i.set_fast_math_flags(inkwell::values::FastMathFlags::AllowContract)
                            .map_err(llvm_err)?;
                    }
                }
                Ok(v.into())
            };
            return match op {
                BinOp::Add => contract(b.build_float_add(x, y, "").map_err(llvm_err)?),
                BinOp::Sub => contract(b.build_float_sub(x, y, "").map_err(llvm_err)?),
                BinOp::Mul => contract(b.build_float_mul(x, y, "").map_err(llvm_err)?),
                BinOp::Div => Ok(b.build_float_div(x, y, "").map_err(llvm_err)?.into()),
                BinOp::Min => self.call("llvm.minnum", &[lt], &[x.into(), y.into()]),
                BinOp::Max => self.call("llvm.maxnum", &[lt], &[x.into(), y.into()]),
                BinOp::Eq => cmp(FloatPredicate::OEQ),
                BinOp::Ne => cmp(FloatPredicate::UNE),
                BinOp::Lt => cmp(FloatPredicate::OLT),
                BinOp::Le => cmp(FloatPredicate::OLE),
                BinOp::Gt => cmp(FloatPredicate::OGT),
                BinOp::Ge => cmp(FloatPredicate::OGE),
                BinOp::Rem
                | BinOp::And
                | BinOp::Or
                | BinOp::BitAnd
                | BinOp::BitOr
                | BinOp::BitXor
                | BinOp::Shl
                | BinOp::Shr => Err(CodegenError::Llvm(format!(
                    "{op:?} on floats (a rocmc bug)"
                ))),
            };
        }
        let (x, y) = (x.into_int_value(), y.into_int_value());
        let s = t.is_signed();
        let cmp = |p| -> R<BasicValueEnum<'ctx>> {
            Ok(b.build_int_compare(p, x, y, "").map_err(llvm_err)?.into())
        };
        let pick = |sp, up| if s { sp } else { up };
        let y = if matches!(op, BinOp::Div | BinOp::Rem) {
            self.safe_divisor(x, y, s)?
        } else {
            y
        };
        Ok(match op {
            BinOp::Add => b.build_int_add(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Sub => b.build_int_sub(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Mul => b.build_int_mul(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Div if s => b.build_int_signed_div(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Div => b.build_int_unsigned_div(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Rem if s => b.build_int_signed_rem(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Rem => b.build_int_unsigned_rem(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Min => self.call(
                if s { "llvm.smin" } else { "llvm.umin" },
                &[lt],
                &[x.into(), y.into()],
            )?,
            BinOp::Max => self.call(
                if s { "llvm.smax" } else { "llvm.umax" },
                &[lt],
                &[x.into(), y.into()],
            )?,
            BinOp::And | BinOp::BitAnd => b.build_and(x, y, "").map_err(llvm_err)?.into(),
            BinOp::Or | BinOp::BitOr => b.build_or(x, y, "").map_err(llvm_err)?.into(),
            BinOp::BitXor => b.build_xor(x, y, "").map_err(llvm_err)?.into(),
            // The amount modulo the width: LLVM's shifts are poison beyond it.
            BinOp::Shl | BinOp::Shr => {
                let bits = u64::from(x.get_type().get_bit_width());
                let mask = x.get_type().const_int(bits - 1, false);
                let n = b.build_and(y, mask, "").map_err(llvm_err)?;
                match op {
                    BinOp::Shl => b.build_left_shift(x, n, "").map_err(llvm_err)?.into(),
                    _ => b.build_right_shift(x, n, s, "").map_err(llvm_err)?.into(),
                }
            }
            BinOp::Eq => cmp(IntPredicate::EQ)?,
            BinOp::Ne => cmp(IntPredicate::NE)?,
            BinOp::Lt => cmp(pick(IntPredicate::SLT, IntPredicate::ULT))?,
            BinOp::Le => cmp(pick(IntPredicate::SLE, IntPredicate::ULE))?,
            BinOp::Gt => cmp(pick(IntPredicate::SGT, IntPredicate::UGT))?,
            BinOp::Ge => cmp(pick(IntPredicate::SGE, IntPredicate::UGE))?,
        })
    }

    /// The divisor to use for `x / y` so that the division never traps or
    /// is undefined: `i32::MIN / -1` wraps, as the kernel format says (the
    /// divisor becomes 1, giving `x`); on the host, where `idiv` by zero
    /// raises SIGFPE, a zero divisor becomes 1 too (the interpreter reports
    /// that division as an error; the result is unspecified).
    fn safe_divisor(
        &self,
        x: IntValue<'ctx>,
        y: IntValue<'ctx>,
        signed: bool,
    ) -> R<IntValue<'ctx>> {
        let b = &self.b;
        let it = y.get_type();
        let one = it.const_int(1, false);
        let mut y = y;
        if self.be.zero_divisor_traps() {
            let zero = b
                .build_int_compare(IntPredicate::EQ, y, it.const_zero(), "")
                .map_err(llvm_err)?;
            y = b
                .build_select(zero, one, y, "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        if signed {
            let bits = it.get_bit_width();
            let min = it.const_int(1u64 << (bits - 1), false);
            let x_min = b
                .build_int_compare(IntPredicate::EQ, x, min, "")
                .map_err(llvm_err)?;
            let y_m1 = b
                .build_int_compare(IntPredicate::EQ, y, it.const_all_ones(), "")
                .map_err(llvm_err)?;
            let both = b.build_and(x_min, y_m1, "").map_err(llvm_err)?;
            y = b
                .build_select(both, one, y, "")
                .map_err(llvm_err)?
                .into_int_value();
        }
        Ok(y)
    }

    fn cast(&self, from: DType, to: DType, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        if to.is_f8() {
            return Err(CodegenError::Llvm(format!(
                "a conversion to {to} (the front end refuses them; a rocmc bug)"
            )));
        }
        if let Some(f) = from.f8_format() {
            // Exact in f32, then as from f32.
            let x = self.f8_decode(f, v.into_int_value())?;
            return self.cast(DType::F32, to, x.into());
        }
        let b = &self.b;
        let lt = ty(self.cx, to);
        Ok(match (from.is_float(), to.is_float()) {
            // f16 ↔ bf16: neither holds the other, so through f32 (exact), then one rounding.
            (true, true) if from != to && from.size() == 2 && to.size() == 2 => {
                let wide = b
                    .build_float_ext(v.into_float_value(), self.cx.f32_type(), "")
                    .map_err(llvm_err)?;
                b.build_float_trunc(wide, lt.into_float_type(), "")
                    .map_err(llvm_err)?
                    .into()
            }
            (true, true) => b
                .build_float_cast(v.into_float_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (false, true) if from == DType::Bool || !from.is_signed() => b
                .build_unsigned_int_to_float(v.into_int_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (false, true) => b
                .build_signed_int_to_float(v.into_int_value(), lt.into_float_type(), "")
                .map_err(llvm_err)?
                .into(),
            (true, false) if to == DType::Bool => {
                let z = v.into_float_value().get_type().const_zero();
                b.build_float_compare(FloatPredicate::UNE, v.into_float_value(), z, "")
                    .map_err(llvm_err)?
                    .into()
            }
            // Saturating conversion matches the interpreter and never yields poison.
            (true, false) => self.call(
                if to.is_signed() {
                    "llvm.fptosi.sat"
                } else {
                    "llvm.fptoui.sat"
                },
                &[lt, v.get_type()],
                &[v.into()],
            )?,
            (false, false) if to == DType::Bool => {
                let z = v.into_int_value().get_type().const_zero();
                b.build_int_compare(IntPredicate::NE, v.into_int_value(), z, "")
                    .map_err(llvm_err)?
                    .into()
            }
            (false, false) => {
                let (x, it) = (v.into_int_value(), lt.into_int_type());
                let (fw, tw) = (x.get_type().get_bit_width(), it.get_bit_width());
                if fw == tw {
                    x.into()
                } else if fw > tw {
                    b.build_int_truncate(x, it, "").map_err(llvm_err)?.into()
                } else if from.is_signed() {
                    b.build_int_s_extend(x, it, "").map_err(llvm_err)?.into()
                } else {
                    b.build_int_z_extend(x, it, "").map_err(llvm_err)?.into()
                }
            }
        })
    }

    /// The f32 value of an 8-bit float's bits `b` (an i8), by the format's
    /// definition: sign, exponent and mantissa moved into an f32's fields,
    /// subnormals scaled from the integer mantissa, and the format's NaN
    /// and infinity encodings. Every target and the CPU run the same
    /// integer code, so it means what [`rocmc_ir::dtype::F8Format::decode`]
    /// means.
    fn f8_decode(&self, f: rocmc_ir::dtype::F8Format, b: IntValue<'ctx>) -> R<FloatValue<'ctx>> {
        use rocmc_ir::dtype::F8Kind;
        let (bd, i32t, f32t) = (&self.b, self.cx.i32_type(), self.cx.f32_type());
        let c = |v: i64| i32t.const_int(v as u64, true);
        let x = bd.build_int_z_extend(b, i32t, "").map_err(llvm_err)?;
        let (eb, mb) = (i64::from(f.exp), i64::from(f.man));
        let e = bd
            .build_and(
                bd.build_right_shift(x, c(mb), false, "")
                    .map_err(llvm_err)?,
                c((1 << eb) - 1),
                "",
            )
            .map_err(llvm_err)?;
        let m = bd.build_and(x, c((1 << mb) - 1), "").map_err(llvm_err)?;
        // Normal: exponent rebiased into f32's, mantissa at its top.
        let fe = bd
            .build_int_add(e, c(127 - i64::from(f.bias)), "")
            .map_err(llvm_err)?;
        let bits = bd
            .build_or(
                bd.build_left_shift(fe, c(23), "").map_err(llvm_err)?,
                bd.build_left_shift(m, c(23 - mb), "").map_err(llvm_err)?,
                "",
            )
            .map_err(llvm_err)?;
        let normal = bd
            .build_bit_cast(bits, f32t, "")
            .map_err(llvm_err)?
            .into_float_value();
        // Subnormal: the mantissa times the smallest step.
        let sub = bd
            .build_float_mul(
                bd.build_unsigned_int_to_float(m, f32t, "")
                    .map_err(llvm_err)?,
                f32t.const_float(2f64.powi(1 - f.bias - f.man as i32)),
                "",
            )
            .map_err(llvm_err)?;
        let zero_e = bd
            .build_int_compare(IntPredicate::EQ, e, c(0), "")
            .map_err(llvm_err)?;
        let mag = bd
            .build_select(zero_e, sub, normal, "")
            .map_err(llvm_err)?
            .into_float_value();
        let neg = bd
            .build_int_compare(IntPredicate::UGE, x, c(0x80), "")
            .map_err(llvm_err)?;
        let signed = bd
            .build_select(neg, bd.build_float_neg(mag, "").map_err(llvm_err)?, mag, "")
            .map_err(llvm_err)?
            .into_float_value();
        let top = c((1 << eb) - 1);
        let (special, value) = match f.kind {
            F8Kind::Fnuz => (
                bd.build_int_compare(IntPredicate::EQ, x, c(0x80), "")
                    .map_err(llvm_err)?,
                f32t.const_float(f64::NAN),
            ),
            F8Kind::Fn => (
                bd.build_int_compare(
                    IntPredicate::EQ,
                    bd.build_and(x, c(0x7f), "").map_err(llvm_err)?,
                    c(0x7f),
                    "",
                )
                .map_err(llvm_err)?,
                f32t.const_float(f64::NAN),
            ),
            F8Kind::Ieee => {
                let top_e = bd
                    .build_int_compare(IntPredicate::EQ, e, top, "")
                    .map_err(llvm_err)?;
                let inf = bd
                    .build_select(
                        neg,
                        f32t.const_float(f64::NEG_INFINITY),
                        f32t.const_float(f64::INFINITY),
                        "",
                    )
                    .map_err(llvm_err)?
                    .into_float_value();
                let no_m = bd
                    .build_int_compare(IntPredicate::EQ, m, c(0), "")
                    .map_err(llvm_err)?;
                let v = bd
                    .build_select(no_m, inf, f32t.const_float(f64::NAN), "")
                    .map_err(llvm_err)?
                    .into_float_value();
                (top_e, v)
            }
        };
        Ok(bd
            .build_select(special, value, signed, "")
            .map_err(llvm_err)?
            .into_float_value())
    }

    fn math(&self, f: MathFn, t: DType, xs: &[BasicValueEnum<'ctx>]) -> R<BasicValueEnum<'ctx>> {
        if t.is_float() {
            return self.math_float(f, t, xs);
        }
        // Only abs accepts integers.
        let lt = ty(self.cx, t);
        let fals = self.cx.bool_type().const_zero();
        self.call("llvm.abs", &[lt], &[xs[0].into(), fals.into()])
    }
}

pub(crate) fn enum_attr(cx: &Context, name: &str, v: u64) -> Attribute {
    cx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), v)
}

/// What [`FnCx::fill_group_each`] calls on each fill: the fill with its
/// source tensor and indices.
type GroupedFill<'f, 'a, 'ctx> =
    dyn FnMut(&mut FnCx<'a, 'ctx>, TensorId, &[Index], &Stmt) -> R<()> + 'f;

/// Whether `s` is or holds a barrier.
/// A store to a tensor, alone or as the whole body of an `If`, with the
/// `If`'s guards.
fn guarded_store(s: &Stmt) -> Option<(&[rocmc_ir::schedule::Guard], &Stmt)> {
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
fn store_run(stmts: &[Stmt], size_divisors: &[u64]) -> usize {
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

fn has_barrier(s: &Stmt) -> bool {
    match s {
        Stmt::Barrier => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(has_barrier),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).any(has_barrier),
        _ => false,
    }
}

/// Whether every fill of a group is asynchronous.
fn all_async(stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Loop { body, .. } => all_async(body),
        Stmt::Fill { asynchronous, .. } => *asynchronous,
        _ => false,
    })
}

/// Whether `s` is or holds a matrix instruction.
fn contains_matrix(s: &Stmt) -> bool {
    match s {
        Stmt::Matrix { .. } => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(contains_matrix),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).any(contains_matrix),
        _ => false,
    }
}

/// Whether `s` only reads memory and writes registers: no barrier, wait,
/// commit, fill or store to a tensor or to LDS anywhere inside.
fn register_only(s: &Stmt) -> bool {
    match s {
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().all(register_only),
        Stmt::Unswitch { fast, slow, .. } => fast.iter().chain(slow).all(register_only),
        Stmt::MatrixLoad { stores, .. } => stores.iter().all(register_only),
        Stmt::LocalStore { .. } | Stmt::Matrix { .. } => true,
        _ => false,
    }
}

/// Where held-back fills may be spread ([`FnCx::interleave`]): the
/// position of the one unrolled loop of constant extent in `fast` that
/// holds matrix instructions, when every statement of `fast` is
/// [`register_only`].
fn matrix_steps(fast: &[Stmt]) -> Option<usize> {
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

/// How many statements at the top level of `stmts` run under a condition
/// ([`FnCx::versioned_body`]).
fn conditionals(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .filter(|s| matches!(s, Stmt::If { .. } | Stmt::Unswitch { .. }))
        .count()
}

/// How many fills `stmts` holds when it is nothing but fills from tensors
/// that have a vector path, inside unrolled loops of constant extent
/// ([`FnCx::fill_group`]); 0 when it holds anything else.
fn fill_group_size(stmts: &[Stmt]) -> usize {
    let mut n = 0;
    for s in stmts {
        match s {
            Stmt::Loop {
                extent,
                unroll: true,
                body,
                ..
            } => match (extent.as_const(), fill_group_size(body)) {
                (Some(k), m) if k > 0 && m > 0 => n += k as usize * m,
                _ => return 0,
            },
            Stmt::Fill { value, width, .. }
                if *width > 1
                    && value.dtype != DType::Bool
                    && matches!(&value.kind, ExprKind::Load { indices, .. } if !indices.is_empty()) =>
            {
                n += 1
            }
            _ => return 0,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::store_run;
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
