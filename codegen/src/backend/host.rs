//! Running lowered kernels on the host CPU through LLVM, to check schedules
//! and code generation without a GPU.
//!
//! The same loop IR and the same expression and address code as the GPU
//! path are compiled for the host and run by LLVM's JIT. Work-groups become
//! loops; the threads of a work-group run in lockstep: loops (whose trip
//! counts never depend on the thread) stay loops, and every leaf statement
//! runs in a loop over the block's threads, under the guards that enclose
//! it. Lockstep is one legal interleaving of the GPU's threads, and it keeps
//! barrier semantics for free. Per-thread arrays get one slice per thread.

use super::{Backend, KernelAbi};
use crate::emit::{llvm_err, ty, Emit, R};
use crate::CodegenError;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine,
};
use inkwell::types::{ArrayType, BasicType, BasicTypeEnum};
use inkwell::values::{IntValue, PointerValue};
use inkwell::{AddressSpace, OptimizationLevel};
use rocmc_ir::loops::{ArgKind, GpuKernel, Local};
use rocmc_ir::schedule::GpuAxis;
use rocmc_ir::{DType, Kernel, MathFn};
use std::collections::HashMap;
use std::sync::Once;

/// `void kernel(ptr buffers_in_argument_order, ptr i32_sizes,
/// ptr params_8_byte_slots, i64 first_group, i64 group_count)`: runs the
/// work-groups `first_group ..` (linear, x fastest), at most `group_count`
/// of them, stopping at the grid's end. The CPU runtime spreads ranges of
/// work-groups over threads; the JIT runs them all in one call.
pub type HostFn = unsafe extern "C" fn(*const *mut u8, *const i32, *const u8, i64, i64);

/// The processor the JIT compiles for: x86-64-v3 (AVX2, F16C, FMA; the
/// level of the `x86-64` target's shared objects) where this machine has
/// it, else a generic x86-64. Not the host's own processor: with AVX-512,
/// LLVM 22 turned a triangular argmin's guarded loads into masked gathers
/// that faulted (fuzz seed 952657295, tests/regress/fz766_masked_gather.toml),
/// and AVX512-BF16 flushes bf16 denormals. Not generic where v3 exists:
/// without F16C, LLVM 22's MachineLICM crashed on vectorised half code
/// (fuzz seed 517353052, tests/regress/fz91_half_licm.toml).
pub(crate) fn host_cpu() -> (String, String) {
    let features = TargetMachine::get_host_cpu_features();
    let has = |f: &str| {
        features
            .to_str()
            .unwrap_or("")
            .split(',')
            .any(|x| x == format!("+{f}"))
    };
    let v3 = ["avx2", "f16c", "fma", "bmi2", "movbe"]
        .iter()
        .all(|f| has(f));
    if v3 {
        ("x86-64-v3".to_string(), String::new())
    } else {
        ("x86-64".to_string(), String::new())
    }
}

pub(crate) fn host_machine() -> R<TargetMachine> {
    host_machine_at(OptimizationLevel::Default)
}

/// [`host_machine`] generating code at `level`.
pub(crate) fn host_machine_at(level: OptimizationLevel) -> R<TargetMachine> {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // Native target initialisation only fails on hosts LLVM was not built for.
        let _ = LlvmTarget::initialize_native(&InitializationConfig::default());
    });
    let triple = TargetMachine::get_default_triple();
    let target = LlvmTarget::from_triple(&triple).map_err(llvm_err)?;
    // This machine's own processor: the code runs here and nowhere else.
    // A generic x86-64 (no F16C) made LLVM 22's MachineLICM crash on
    // vectorised half-precision code (`fabs <4 x half>` from an f16 load),
    // a fuzzer find (seed 517353052); with the host's features LLVM
    // converts halves in hardware and takes another path.
    let (cpu, features) = host_cpu();
    target
        .create_target_machine(
            &triple,
            &cpu,
            &features,
            level,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| CodegenError::Llvm("cannot create a target machine for the host".into()))
}

/// The host CPU as a backend: a kernel is `void f(ptr buffers_by_tensor_id,
/// ptr i32_sizes, ptr params_8_byte_slots)`, shared arrays live on the
/// stack (blocks run one after another), and per-thread arrays get one
/// slice per thread of the block. Thread indices and barriers do not exist
/// as such: the lockstep walk below provides them.
pub(crate) struct Host {
    math: HostMath,
    /// For `--mcpu x86-64`: a position-independent shared object for a
    /// portable processor, not JIT code for this machine.
    aot: Option<rocmc_target::CpuTarget>,
}

/// The host backend for JIT code on this machine, with `math`'s f32 functions.
pub(crate) fn jit_backend(math: HostMath) -> Host {
    Host { math, aot: None }
}

/// The host backend for an ahead-of-time CPU target.
pub(crate) fn cpu_backend(t: &rocmc_target::CpuTarget) -> Box<dyn Backend> {
    Box::new(Host {
        math: HostMath::Native,
        aot: Some(t.clone()),
    })
}

/// Adds the conversion functions of `cpu_helpers.ll` to a CPU module.
pub(crate) fn link_cpu_helpers<'ctx>(cx: &'ctx Context, m: &Module<'ctx>) -> R<()> {
    let ir = inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(
        include_bytes!("cpu_helpers.ll"),
        "cpu_helpers.ll",
    );
    let helpers = cx
        .create_module_from_ir(ir)
        .map_err(|e| CodegenError::Llvm(format!("cpu_helpers.ll (a rocmc bug): {e}")))?;
    helpers.set_triple(&m.get_triple());
    helpers.set_data_layout(&m.get_data_layout());
    m.link_in_module(helpers)
        .map_err(|e| CodegenError::Llvm(format!("linking cpu_helpers.ll (a rocmc bug): {e}")))
}

fn aot_machine(t: &rocmc_target::CpuTarget, level: OptimizationLevel) -> R<TargetMachine> {
    static INIT: Once = Once::new();
    INIT.call_once(|| LlvmTarget::initialize_x86(&InitializationConfig::default()));
    let triple = inkwell::targets::TargetTriple::create(t.triple());
    let target = LlvmTarget::from_triple(&triple).map_err(llvm_err)?;
    target
        .create_target_machine(
            &triple,
            rocmc_target::cpu::LLVM_CPU,
            "",
            level,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| CodegenError::Llvm(format!("cannot create a target machine for {t}")))
}

/// Which f32 exp/exp2/log/log2 the host code uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostMath {
    /// libm's, through LLVM's intrinsics (what AMDGPU's code corresponds to).
    #[default]
    Native,
    /// rocmc's own expansions, as on NVPTX: lets the host test them.
    Expanded,
}

impl Backend for Host {
    fn prepare<'p>(&self, kernels: &'p [GpuKernel]) -> std::borrow::Cow<'p, [GpuKernel]> {
        kernels
            .iter()
            .map(|g| {
                rocmc_ir::lower::matrix::expand(
                    g.clone(),
                    rocmc_ir::lower::matrix::Exchange::Barriers,
                )
            })
            .collect()
    }

    fn lockstep(&self) -> bool {
        true
    }

    /// By the default shifts: CPU runs of AMD-lowered kernels pack their
    /// transposed byte tiles as the GPU does.
    fn packs_bytes(&self) -> bool {
        true
    }

    fn link_helpers<'ctx>(&self, cx: &'ctx Context, m: &Module<'ctx>) -> R<()> {
        link_cpu_helpers(cx, m)
    }

    /// Reproduced with stock `llc-22 -O3` on four lines: vector frexp
    /// (found by the differential fuzzer, seed 859124179).
    fn frexp_intrinsic(&self) -> bool {
        false
    }

    fn f8_decode_by_table(&self) -> bool {
        true
    }

    /// As NVIDIA's, so that every CPU run the interpreter checks also
    /// checks the bit conversion the GPU code uses.
    fn byte_to_half_by_bits(&self) -> bool {
        true
    }

    fn range_checked_loads(&self) -> bool {
        true
    }

    /// The GPU's range check as a branch: memory is read only where the
    /// whole load lies inside the `size` bytes (so an empty tensor's
    /// dangling base is never touched), zeros otherwise. It lets CPU runs
    /// of AMD-lowered kernels (`--emulate gfx942`) take the same
    /// whole-vector fills and loop versions as the GPU code.
    fn range_checked_load<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        base: PointerValue<'ctx>,
        size: IntValue<'ctx>,
        offset: IntValue<'ctx>,
        bytes: u32,
    ) -> R<inkwell::values::BasicValueEnum<'ctx>> {
        let (cx, b) = (emit.cx, emit.b);
        let i64t = cx.i64_type();
        let ty = match bytes {
            16 => cx.i128_type(),
            8 => i64t,
            4 => cx.i32_type(),
            2 => cx.i16_type(),
            _ => cx.i8_type(),
        };
        let off = b.build_int_z_extend(offset, i64t, "").map_err(llvm_err)?;
        let end = b
            .build_int_nuw_add(off, i64t.const_int(u64::from(bytes), false), "")
            .map_err(llvm_err)?;
        let size = b.build_int_z_extend(size, i64t, "").map_err(llvm_err)?;
        let inside = b
            .build_int_compare(inkwell::IntPredicate::ULE, end, size, "")
            .map_err(llvm_err)?;
        let pre = b.get_insert_block().expect("positioned");
        let f = pre.get_parent().expect("in a function");
        let read = cx.append_basic_block(f, "range.read");
        let join = cx.append_basic_block(f, "range.join");
        b.build_conditional_branch(inside, read, join)
            .map_err(llvm_err)?;
        b.position_at_end(read);
        // Inside the tensor: the address is in bounds.
        let p =
            unsafe { b.build_in_bounds_gep(cx.i8_type(), base, &[off], "") }.map_err(llvm_err)?;
        let v = b.build_load(ty, p, "").map_err(llvm_err)?;
        inkwell::values::BasicValue::as_instruction_value(&v)
            .expect("load")
            .set_alignment(1)
            .map_err(llvm_err)?;
        b.build_unconditional_branch(join).map_err(llvm_err)?;
        b.position_at_end(join);
        let phi = b.build_phi(ty, "").map_err(llvm_err)?;
        phi.add_incoming(&[(&ty.const_zero(), pre), (&v, read)]);
        Ok(phi.as_basic_value())
    }

    /// As on NVPTX, so that CPU runs check the proofs against the
    /// reference interpreter.
    fn alignment_from_index(&self) -> bool {
        true
    }

    fn triple(&self) -> String {
        if let Some(t) = &self.aot {
            return t.triple().to_string();
        }
        TargetMachine::get_default_triple()
            .as_str()
            .to_string_lossy()
            .into_owned()
    }

    fn target_machine(&self) -> R<TargetMachine> {
        match &self.aot {
            Some(t) => aot_machine(t, OptimizationLevel::Aggressive),
            None => host_machine(),
        }
    }

    /// Instruction selection and scheduling at their quickest: on an
    /// emulated warpgroup GEMM, O3's machine scheduler and block placement
    /// took most of a minute.
    fn target_machine_unoptimised(&self) -> R<TargetMachine> {
        match &self.aot {
            Some(t) => aot_machine(t, OptimizationLevel::None),
            None => host_machine(),
        }
    }

    fn declare_kernel<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        b: &Builder<'ctx>,
        k: &Kernel,
        g: &GpuKernel,
    ) -> R<KernelAbi<'ctx>> {
        let ptr = cx.ptr_type(AddressSpace::default());
        let f = m.add_function(
            &g.name,
            cx.void_type().fn_type(
                &[
                    ptr.into(),
                    ptr.into(),
                    ptr.into(),
                    cx.i64_type().into(),
                    cx.i64_type().into(),
                ],
                false,
            ),
            None,
        );
        b.position_at_end(cx.append_basic_block(f, "entry"));
        let arg = |i: u32| {
            f.get_nth_param(i)
                .expect("five parameters")
                .into_pointer_value()
        };
        let (bufs_p, sizes_p, params_p) = (arg(0), arg(1), arg(2));
        // Entry `i` of an argument table whose entries are `slot` wide, read as `load`.
        let read = |table, slot: BasicTypeEnum<'ctx>, i: u64, load: BasicTypeEnum<'ctx>, name| {
            let index = cx.i32_type().const_int(i, false);
            // SAFETY: the caller passes a table with an entry for every tensor, size and
            // parameter of the kernel (see `HostFn`).
            let p =
                unsafe { b.build_in_bounds_gep(slot, table, &[index], "") }.map_err(llvm_err)?;
            b.build_load(load, p, name).map_err(llvm_err)
        };
        let mut bufs = HashMap::new();
        let buffers = g.args.iter().filter_map(|a| match &a.kind {
            ArgKind::Buffer { tensor, .. } => Some((*tensor, &a.name)),
            ArgKind::Size(_) | ArgKind::Param(_) => None,
        });
        for (i, (tensor, name)) in buffers.enumerate() {
            let v = read(bufs_p, ptr.into(), i as u64, ptr.into(), name)?;
            bufs.insert(tensor, v.into_pointer_value());
        }
        let i32t: BasicTypeEnum = cx.i32_type().into();
        let sizes = (k.sizes.iter().enumerate())
            .map(|(i, s)| Ok(read(sizes_p, i32t, i as u64, i32t, &s.name)?.into_int_value()))
            .collect::<R<Vec<_>>>()?;
        // Parameters sit in 8-byte slots whatever their type.
        let params = (k.params.iter().enumerate())
            .map(|(i, p)| {
                read(
                    params_p,
                    cx.i64_type().into(),
                    i as u64,
                    ty(cx, p.dtype),
                    &p.name,
                )
            })
            .collect::<R<Vec<_>>>()?;
        Ok(KernelAbi {
            f,
            bufs,
            sizes,
            params,
            tensor_maps: None,
        })
    }

    /// One array per kernel: blocks run one after another.
    fn shared_array<'ctx>(
        &self,
        _cx: &'ctx Context,
        _m: &Module<'ctx>,
        b: &Builder<'ctx>,
        g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let p = b.build_alloca(at, &l.name).map_err(llvm_err)?;
        // Vector fills store whole aligned vectors into it.
        let i = g
            .shared
            .iter()
            .position(|x| std::ptr::eq(x, l))
            .unwrap_or(0);
        if let Some(inst) = p.as_instruction() {
            inst.set_alignment(g.shared_align(i as u32).max(4))
                .map_err(llvm_err)?;
        }
        Ok(p)
    }

    /// One slice per thread of the block; `leaf_for_threads` points at the current one.
    fn local_array<'ctx>(
        &self,
        b: &Builder<'ctx>,
        g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let all = at.get_element_type().array_type(l.len * g.threads());
        b.build_alloca(all, &l.name).map_err(llvm_err)
    }

    fn axis_index<'ctx>(&self, _emit: &Emit<'_, 'ctx>, _axis: GpuAxis) -> R<IntValue<'ctx>> {
        Err(CodegenError::Llvm(
            "the host path binds indices in its lockstep walk (a rocmc bug)".into(),
        ))
    }

    /// Lockstep already orders every thread's writes before later reads.
    fn barrier(&self, _emit: &Emit<'_, '_>) -> R<()> {
        Ok(())
    }

    /// `idiv` by zero raises SIGFPE.
    fn zero_divisor_traps(&self) -> bool {
        true
    }

    /// LLVM's x86 lowering of half-precision fma goes through an f32 fma.
    fn fma_rounds_once(&self, t: DType) -> bool {
        !matches!(t, DType::F16 | DType::BF16)
    }

    fn native_f32_math(&self, _f: MathFn) -> bool {
        self.math == HostMath::Native
    }
}
