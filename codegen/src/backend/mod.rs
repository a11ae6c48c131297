//! What differs between the machines rocmc generates LLVM IR for.
//!
//! The loop-IR → LLVM lowering ([`crate::function::FnCx`]) is target-neutral:
//! loops, guards, index arithmetic, addresses, expressions, math expansions.
//! Everything a target decides goes through [`Backend`] (in the spirit of
//! CubeCL's `Dialect`): the triple and target machine, module flags, the
//! kernel's ABI (calling convention, attributes, argument address spaces),
//! where shared and per-thread arrays live, thread and block indices,
//! barriers, and which operations the target does natively. A new LLVM
//! backend is one more implementation of this trait in its own module.

pub mod amdgpu;
pub mod host;
pub mod nvptx;

use crate::emit::{Emit, R};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::TargetMachine;
use inkwell::types::ArrayType;
use inkwell::values::{BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::AddressSpace;
use rocmc_ir::loops::{GpuKernel, Local};
use rocmc_ir::schedule::GpuAxis;
use rocmc_ir::{DType, Kernel, MathFn, TensorId};
use std::collections::HashMap;

/// A kernel function as a backend declared it: the function and the values
/// of its arguments, by role.
pub(crate) struct KernelAbi<'ctx> {
    pub f: FunctionValue<'ctx>,
    /// The buffer of each tensor the kernel touches.
    pub bufs: HashMap<TensorId, PointerValue<'ctx>>,
    /// The size arguments, in the kernel's order.
    pub sizes: Vec<IntValue<'ctx>>,
    /// The scalar parameters, in the kernel's order.
    pub params: Vec<BasicValueEnum<'ctx>>,
    /// The hidden last argument of a kernel with tensor copies on a
    /// target that issues them: its tensor maps, 128 bytes each.
    pub tensor_maps: Option<PointerValue<'ctx>>,
}

/// What [`Backend::mbarrier`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MbarrierOp {
    Init,
    Expect,
    TryWait,
    Inval,
}

/// The address space of work-group memory on both GPU targets.
pub(crate) const SHARED_ADDRESS_SPACE: u16 = 3;

/// Calls intrinsic `name` (its full, mangled name) returning `ret`.
pub(crate) fn call_named<'ctx>(
    emit: &Emit<'_, 'ctx>,
    name: &str,
    ret: inkwell::types::BasicTypeEnum<'ctx>,
    args: &[BasicValueEnum<'ctx>],
) -> R<BasicValueEnum<'ctx>> {
    use inkwell::types::BasicType;
    let params: Vec<inkwell::types::BasicMetadataTypeEnum> =
        args.iter().map(|a| a.get_type().into()).collect();
    // LLVM recognises an intrinsic by its name when the function is declared.
    let f = emit
        .m
        .get_function(name)
        .unwrap_or_else(|| emit.m.add_function(name, ret.fn_type(&params, false), None));
    let args: Vec<inkwell::values::BasicMetadataValueEnum> =
        args.iter().map(|a| (*a).into()).collect();
    match emit
        .b
        .build_call(f, &args, "")
        .map_err(crate::emit::llvm_err)?
        .try_as_basic_value()
    {
        inkwell::values::ValueKind::Basic(v) => Ok(v),
        _ => Err(crate::CodegenError::Llvm(format!(
            "{name} returned nothing"
        ))),
    }
}

/// Calls intrinsic `name`, which returns nothing.
pub(crate) fn call_void<'ctx>(
    emit: &Emit<'_, 'ctx>,
    name: &str,
    args: &[BasicValueEnum<'ctx>],
) -> R<()> {
    let params: Vec<inkwell::types::BasicMetadataTypeEnum> =
        args.iter().map(|a| a.get_type().into()).collect();
    let f = emit.m.get_function(name).unwrap_or_else(|| {
        emit.m
            .add_function(name, emit.cx.void_type().fn_type(&params, false), None)
    });
    let args: Vec<inkwell::values::BasicMetadataValueEnum> =
        args.iter().map(|a| (*a).into()).collect();
    emit.b
        .build_call(f, &args, "")
        .map_err(crate::emit::llvm_err)?;
    Ok(())
}

/// A work-group's array as an internal, uninitialised global in `space`.
pub(crate) fn shared_global<'ctx>(
    m: &Module<'ctx>,
    g: &GpuKernel,
    l: &Local,
    at: ArrayType<'ctx>,
    space: u16,
) -> PointerValue<'ctx> {
    let gv = m.add_global(
        at,
        Some(AddressSpace::from(space)),
        &format!("{}.{}", g.name, l.name),
    );
    gv.set_initializer(&at.get_poison());
    gv.set_linkage(inkwell::module::Linkage::Internal);
    let i = g
        .shared
        .iter()
        .position(|x| std::ptr::eq(x, l))
        .unwrap_or(0);
    gv.set_alignment(g.shared_align(i as u32).max(4));
    gv.as_pointer_value()
}

/// The backend of a parsed target: the one place code generation decides
/// by vendor.
pub(crate) fn lookup(t: &rocmc_target::Target) -> Box<dyn Backend + '_> {
    use rocmc_target::Target;
    match t {
        Target::Amd(t) => Box::new(amdgpu::AmdGpu::new(t)),
        Target::Nvidia(t) => Box::new(nvptx::Nvptx::new(t)),
        Target::Cpu(t) => host::cpu_backend(t),
    }
}

/// One target's dialect of LLVM IR.
/// A warpgroup instruction's A: a shared-memory descriptor, or the lane's
/// fragment as 32-bit registers (`wgmma` with A in registers).
pub(crate) enum GroupA<'ctx> {
    Desc(IntValue<'ctx>),
    Regs(Vec<IntValue<'ctx>>),
}

pub(crate) trait Backend {
    /// LLVM's target triple.
    fn triple(&self) -> String;

    /// The target machine code is generated with.
    fn target_machine(&self) -> R<TargetMachine>;

    /// The target machine of a module that is not optimised
    /// ([`emulates_lanes`](crate::llvm::emulates_lanes)); by default the
    /// same as [`Backend::target_machine`].
    fn target_machine_unoptimised(&self) -> R<TargetMachine> {
        self.target_machine()
    }

    /// Module-level flags the target's ABI needs.
    fn configure_module<'ctx>(&self, _cx: &'ctx Context, _m: &Module<'ctx>) {}

    /// Declares the kernel function of `g` with the target's calling
    /// convention and attributes, positions `b` in its entry block, and
    /// returns its arguments.
    fn declare_kernel<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        b: &Builder<'ctx>,
        k: &Kernel,
        g: &GpuKernel,
    ) -> R<KernelAbi<'ctx>>;

    /// Storage of one work-group's shared array: by default an internal
    /// global in address space 3, which is AMD's LDS and NVIDIA's shared
    /// memory alike.
    fn shared_array<'ctx>(
        &self,
        _cx: &'ctx Context,
        m: &Module<'ctx>,
        _b: &Builder<'ctx>,
        g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        Ok(shared_global(m, g, l, at, SHARED_ADDRESS_SPACE))
    }

    /// Where LDS arrays sized at launch ([`GpuKernel::dynamic_shared`])
    /// live: a pointer to the launch's dynamic shared memory and the byte
    /// offset the first of them starts at. `None` (the default, the CPU)
    /// keeps every array at its bound in [`Backend::shared_array`].
    fn dynamic_shared_base<'ctx>(
        &self,
        _cx: &'ctx Context,
        _m: &Module<'ctx>,
        _g: &GpuKernel,
    ) -> Option<(PointerValue<'ctx>, u64)> {
        None
    }

    /// Storage of one thread's private array (reduction accumulators),
    /// allocated in the entry block.
    fn local_array<'ctx>(
        &self,
        b: &Builder<'ctx>,
        _g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        b.build_alloca(at, &l.name).map_err(crate::emit::llvm_err)
    }

    /// The index of the current thread in its block, or of the block in the grid.
    fn axis_index<'ctx>(&self, emit: &Emit<'_, 'ctx>, axis: GpuAxis) -> R<IntValue<'ctx>>;

    /// `__syncthreads()`: every thread of the block reaches it, and shared
    /// memory written before it is visible after it.
    fn barrier(&self, emit: &Emit<'_, '_>) -> R<()>;

    /// `v` as lane `lane ^ mask` of this wave (of `width` lanes) holds it;
    /// `lane` is this lane's index in the wave. Every lane of the wave
    /// executes it together. The CPU never sees one: lowering expands it
    /// into an exchange through LDS.
    fn lane_xor<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _v: FloatValue<'ctx>,
        _lane: IntValue<'ctx>,
        _mask: u32,
        _width: u32,
    ) -> R<FloatValue<'ctx>> {
        Err(crate::CodegenError::Llvm(
            "a lane exchange on a target without one (a rocmc bug: it should have been expanded)"
                .into(),
        ))
    }

    /// Whether integer division by zero traps (the host's `idiv` does), so
    /// that divisors that may be zero must be replaced first.
    fn zero_divisor_traps(&self) -> bool {
        false
    }

    /// Whether `llvm.fma` at `t` rounds once on this target; where it does
    /// not (LLVM goes through a wider fma and rounds twice), rocmc emulates it.
    fn fma_rounds_once(&self, t: DType) -> bool;

    /// Whether `f` at `t` (f32) may use LLVM's own intrinsic (`llvm.exp`,
    /// `llvm.log`, ...) with an accurate expansion on this target; otherwise
    /// rocmc computes it through its f64 expansion and rounds once.
    fn native_f32_math(&self, f: MathFn) -> bool;

    /// The intrinsic `exp2_approx` calls at f32 (overloaded on f32): the
    /// hardware's approximate 2^x where the target has one.
    fn exp2_approx_f32(&self) -> &'static str {
        "llvm.exp2"
    }

    /// 1 / `x` (f32) by the hardware's approximate reciprocal (about
    /// 1 ulp), for a quotient that is rounded to a 16-bit type, where the
    /// IEEE division is a longer sequence; `None` (no such instruction):
    /// the caller divides.
    fn rcp_approx_f32<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _x: FloatValue<'ctx>,
    ) -> R<Option<FloatValue<'ctx>>> {
        Ok(None)
    }

    /// Calls matrix instruction `instr` on one lane's operands, packed as
    /// its `llvm_a`/`llvm_b`/`llvm_c` say; returns D in the shape of C.
    /// Targets without matrix units never see one: lowering refuses it.
    fn matrix<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        instr: &rocmc_target::matrix::MatrixInstr,
        _a: Vec<BasicValueEnum<'ctx>>,
        _b: Vec<BasicValueEnum<'ctx>>,
        _c: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        Err(crate::CodegenError::Llvm(format!(
            "{} reached a backend without matrix instructions (a rocmc bug)",
            instr.name
        )))
    }

    /// Starts copying `bytes` (4, 8 or 16, aligned to that) from global
    /// memory at `src` to LDS at `dst` without waiting for it
    /// ([`Stmt::Fill`](rocmc_ir::loops::Stmt::Fill)`{ asynchronous }`).
    /// Returns false, having emitted nothing, where the target has no such
    /// copy; the caller then copies through registers.
    fn async_copy<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _dst: PointerValue<'ctx>,
        _src: PointerValue<'ctx>,
        _bytes: u32,
    ) -> R<bool> {
        Ok(false)
    }

    /// Closes this thread's group of asynchronous copies (none without them).
    fn async_commit(&self, _emit: &Emit<'_, '_>) -> R<()> {
        Ok(())
    }

    /// Waits until at most `pending` groups are in flight (none without them).
    fn async_wait(&self, _emit: &Emit<'_, '_>, _pending: u32) -> R<()> {
        Ok(())
    }

    /// `count` 8x8 matrices of 16-bit elements loaded by the whole wave,
    /// this lane supplying the row at `row` (`ldmatrix`; see
    /// [`Stmt::MatrixLoad`](rocmc_ir::loops::Stmt::MatrixLoad)): this
    /// lane's 32-bit register of each matrix, or `None`, having emitted
    /// nothing, where the target has no such load.
    fn matrix_load<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _row: PointerValue<'ctx>,
        _count: u32,
        _trans: bool,
    ) -> R<Option<Vec<BasicValueEnum<'ctx>>>> {
        Ok(None)
    }

    /// The 64-bit descriptor of a matrix operand in LDS starting at
    /// `start`, 128-byte swizzled ([`Stmt::MatrixDesc`](rocmc_ir::loops::Stmt::MatrixDesc)),
    /// or `None`, having emitted nothing, where the target's matrix
    /// instructions read registers (the caller runs the fills).
    /// `mn_block`: a transposed (MN-major) operand whose 128-byte column
    /// blocks are that many bytes apart. `row_bytes`: the swizzle's span
    /// (128, 64 or 32; 8 rows of it between groups of rows).
    fn matrix_descriptor<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _start: PointerValue<'ctx>,
        _mn_block: Option<u32>,
        _row_bytes: u32,
    ) -> R<Option<IntValue<'ctx>>> {
        Ok(None)
    }

    /// A warpgroup matrix instruction (`wgmma`) on A (a descriptor or the
    /// lane's registers) and B's descriptor (`trans`: each operand
    /// transposed, MN-major), accumulating into `c` (one value per
    /// accumulator element); returns D, issued asynchronously: see
    /// [`Backend::matrix_async`].
    fn group_matrix<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        instr: &rocmc_target::matrix::MatrixInstr,
        _a: GroupA<'ctx>,
        _b: IntValue<'ctx>,
        _trans: [bool; 2],
        _c: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        Err(crate::CodegenError::Llvm(format!(
            "{} reached a backend without warpgroup instructions (a rocmc bug)",
            instr.name
        )))
    }

    /// Fence, commit or wait of asynchronous matrix instructions; nothing
    /// where they complete at once.
    fn matrix_async(&self, _emit: &Emit<'_, '_>, _op: rocmc_ir::loops::MatrixAsync) -> R<()> {
        Ok(())
    }

    /// Whether the target issues [`Stmt::TensorCopy`](rocmc_ir::loops::Stmt::TensorCopy)s
    /// through the tensor memory accelerator and keeps mbarriers; where
    /// not, the copies' fills run and mbarrier operations are nothing.
    fn tensor_copies(&self) -> bool {
        false
    }

    /// One box of the tensor described by the 128-byte tensor map at
    /// `map` (global memory), its first element at `coords` (innermost
    /// first), copied to `dst` in LDS, completing mbarrier `bar`; issued
    /// by the calling thread alone.
    fn tensor_copy<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _dst: PointerValue<'ctx>,
        _map: PointerValue<'ctx>,
        _coords: &[IntValue<'ctx>],
        _bar: PointerValue<'ctx>,
    ) -> R<()> {
        Err(crate::CodegenError::Llvm(
            "a tensor copy reached a backend without the tensor memory accelerator (a rocmc bug)"
                .into(),
        ))
    }

    /// An mbarrier operation by the calling thread: `Init`, `Expect` and
    /// `Inval` as [`rocmc_ir::loops::Mbarrier`] says (for `Expect`, `arg`
    /// is the bytes), `Wait` one test of phase parity `arg`, returning
    /// whether it has completed (an i1).
    fn mbarrier<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _op: MbarrierOp,
        _bar: PointerValue<'ctx>,
        _arg: Option<IntValue<'ctx>>,
    ) -> R<Option<IntValue<'ctx>>> {
        Err(crate::CodegenError::Llvm(
            "an mbarrier reached a backend without them (a rocmc bug)".into(),
        ))
    }

    /// Makes this thread's LDS writes visible to the asynchronous matrix
    /// instructions that read LDS through descriptors (another "proxy" of
    /// the memory on NVIDIA); emitted before each barrier of a kernel with
    /// descriptors.
    fn async_proxy_fence(&self, _emit: &Emit<'_, '_>) -> R<()> {
        Ok(())
    }

    /// Whether [`Backend::range_checked_load`] has a load to give.
    fn range_checked_loads(&self) -> bool {
        false
    }

    /// A load of `bytes` (1, 2, 4, 8 or 16) bytes at byte `offset` of the
    /// `size` bytes at `base` (global memory) that reads zeros where any
    /// byte of it lies at or past `size`, by the hardware's range check
    /// rather than a branch: how a zero-filled tile copy takes its whole
    /// vectors past the tensor's end without a per-lane path. An integer
    /// (vector) of the bytes; `base` need not be aligned.
    fn range_checked_load<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _base: PointerValue<'ctx>,
        _size: IntValue<'ctx>,
        _offset: IntValue<'ctx>,
        _bytes: u32,
    ) -> R<BasicValueEnum<'ctx>> {
        Err(crate::CodegenError::Llvm(
            "a range-checked load on a target without one (a rocmc bug)".into(),
        ))
    }

    /// Whether a vector fill's alignment is proven from the shape of its
    /// index where it can be, leaving loop-invariant checks only
    /// ([`FnCx::fill_aligned_known`]), rather than tested on each address.
    /// Measured on NVPTX (fewer instructions per staged step); on AMDGPU it
    /// moved instruction counts both ways, so AMD keeps the address test.
    fn alignment_from_index(&self) -> bool {
        false
    }

    /// Whether runs of guarded stores to consecutive elements of a row
    /// become one vector store where all their guards hold and the row is
    /// aligned ([`FnCx::store_vector`]). On NVPTX it halves a matrix
    /// epilogue's store instructions (an accumulator holds column pairs);
    /// AMD's code is left as it was.
    fn vector_stores(&self) -> bool {
        false
    }

    /// Whether LDS stores of register bytes, four to a word, are packed
    /// into word stores by [`Self::byte_select`] (`function::pack`): on
    /// AMD one `v_perm_b32` takes what LLVM otherwise assembles with about
    /// nine instructions a word. The CPU packs too, so that CPU runs of
    /// AMD-lowered kernels take the same path; NVIDIA's code is left as
    /// it was.
    fn packs_bytes(&self) -> bool {
        false
    }

    /// The word whose byte `i` is byte `sel[i]` (0..8) of the 64-bit value
    /// `hi:lo` (bytes 0-3 are `lo`'s, 4-7 `hi`'s). By default shifts and
    /// masks, which every target lowers.
    fn byte_select<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        hi: IntValue<'ctx>,
        lo: IntValue<'ctx>,
        sel: [u8; 4],
    ) -> R<IntValue<'ctx>> {
        let (b, i64t) = (emit.b, emit.cx.i64_type());
        let e = crate::emit::llvm_err;
        let wide = |v| b.build_int_z_extend(v, i64t, "").map_err(e);
        let hi64 = b
            .build_left_shift(wide(hi)?, i64t.const_int(32, false), "")
            .map_err(e)?;
        let x = b.build_or(hi64, wide(lo)?, "").map_err(e)?;
        let mut out = i64t.const_zero();
        for (i, &s) in sel.iter().enumerate() {
            let byte = b
                .build_right_shift(x, i64t.const_int(8 * s as u64, false), false, "")
                .map_err(e)?;
            let byte = b
                .build_and(byte, i64t.const_int(0xff, false), "")
                .map_err(e)?;
            let byte = b
                .build_left_shift(byte, i64t.const_int(8 * i as u64, false), "")
                .map_err(e)?;
            out = b.build_or(out, byte, "").map_err(e)?;
        }
        b.build_int_truncate(out, emit.cx.i32_type(), "").map_err(e)
    }

    /// Whether a byte converts to f16 by its bits (`0x6400 | x` is
    /// 1024 + x, exact, then one f16 subtraction) rather than by the
    /// conversion instruction: NVIDIA's integer-to-half conversions run at
    /// a sixteenth of the f16 rate, which held i8 weights converted in
    /// registers 30 % behind f16 weights (bench/gpu/runs/h200-wq-1).
    fn byte_to_half_by_bits(&self) -> bool {
        false
    }

    /// Whether 8-bit floats decode by a table load rather than integer
    /// code ([`FnCx::f8_decode`]): on the CPU, where loads are cheap and
    /// the integer code's float selects are not.
    fn f8_decode_by_table(&self) -> bool {
        false
    }

    /// Whether `llvm.frexp` may be emitted. LLVM 22's x86 back end crashes
    /// (a segfault in `SimplifyDemandedVectorElts`) on the vector form the
    /// vectorizers make of it, `{<2 x double>, <2 x i32>} llvm.frexp` with
    /// its exponent used; where this is false, [`crate::math`] splits the
    /// float's bits instead. AMD and NVPTX keep the intrinsic (AMD: one
    /// instruction).
    fn frexp_intrinsic(&self) -> bool {
        true
    }

    /// Whether serial loop bodies get a straight-line version
    /// ([`FnCx::versioned_body`]): it pays where the assembler schedules a
    /// staged tile's copies among the compute (ptxas), and doubles the
    /// loop's code. Such a target implements [`Backend::wave_all`].
    fn versions_loop_bodies(&self) -> bool {
        false
    }

    /// Whether a choice between a fast version and the general one (an
    /// unswitch, a group of fills' vector copies) is made once for the
    /// whole wave ([`Backend::wave_all`] of its conditions) rather than per
    /// lane: the general side is always correct, so a wave with a failing
    /// lane runs it alone instead of both sides. Such a target implements
    /// [`Backend::wave_some_fail`].
    fn versions_by_wave(&self) -> bool {
        false
    }

    /// Whether `cond` fails on some active lane of the wave, the same
    /// answer on each (a [`Backend::versions_by_wave`] target).
    fn wave_some_fail<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _cond: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        Err(crate::CodegenError::Llvm(
            "a wave-wide vote on a target without one (a rocmc bug)".into(),
        ))
    }

    /// Whether `cond` holds on every active lane of the wave, the same
    /// answer on each.
    fn wave_all<'ctx>(&self, _emit: &Emit<'_, 'ctx>, _cond: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        Err(crate::CodegenError::Llvm(
            "a wave-wide vote on a target without one (a rocmc bug)".into(),
        ))
    }

    /// The synchronisation scope of a scatter's atomics ("" is LLVM's
    /// system scope): the device's, where the target names one.
    fn atomic_scope(&self) -> &'static str {
        ""
    }

    /// The synchronisation scope of atomics on LDS (a privatized scatter).
    fn atomic_scope_shared(&self) -> &'static str {
        ""
    }

    /// Marks a scatter's atomic instruction with what the target needs to
    /// emit its native form.
    fn tune_atomic<'ctx>(
        &self,
        _emit: &Emit<'_, 'ctx>,
        _inst: inkwell::values::InstructionValue<'ctx>,
    ) -> R<()> {
        Ok(())
    }

    /// Whether the target writes ELF objects (NVPTX writes PTX text only).
    fn emits_objects(&self) -> bool {
        true
    }

    /// The kernels as this target runs them: a GPU runs each matrix
    /// instruction in hardware; the CPU runs it through its lane layout
    /// ([`rocmc_ir::lower::matrix::expand`]).
    fn prepare<'p>(&self, kernels: &'p [GpuKernel]) -> std::borrow::Cow<'p, [GpuKernel]> {
        std::borrow::Cow::Borrowed(kernels)
    }

    /// Whether a kernel's body is the lockstep walk over a block's threads
    /// (the CPU, [`crate::function::lockstep`]) rather than one thread's code.
    fn lockstep(&self) -> bool {
        false
    }

    /// Adds the target's runtime helpers to the finished module.
    fn link_helpers<'ctx>(&self, _cx: &'ctx Context, _m: &Module<'ctx>) -> R<()> {
        Ok(())
    }

    /// Called on the module after optimisation, before code generation.
    fn after_optimise(&self, _m: &Module<'_>) {}

    /// Called after the body of the kernel function is emitted.
    fn finish_kernel<'ctx>(
        &self,
        _cx: &'ctx Context,
        _m: &Module<'ctx>,
        _f: FunctionValue<'ctx>,
        _g: &GpuKernel,
    ) -> R<()> {
        Ok(())
    }
}
