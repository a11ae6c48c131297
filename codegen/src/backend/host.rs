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
use crate::function::{llvm_err, ty, FnCx, R};
use crate::CodegenError;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::execution_engine::JitFunction;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine,
};
use inkwell::types::{ArrayType, BasicType, BasicTypeEnum};
use inkwell::values::{IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate, OptimizationLevel};
use rocmc_ir::loops::{ArgKind, GpuKernel, Local, Stmt};
use rocmc_ir::schedule::{GpuAxis, Guard};
use rocmc_ir::{DType, Kernel, MathFn, Program, VarId};
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
fn host_cpu() -> (String, String) {
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

fn host_machine() -> R<TargetMachine> {
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
            OptimizationLevel::Default,
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
struct Host {
    math: HostMath,
    /// For `--mcpu x86-64`: a position-independent shared object for a
    /// portable processor, not JIT code for this machine.
    aot: Option<rocmc_target::CpuTarget>,
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

fn aot_machine(t: &rocmc_target::CpuTarget) -> R<TargetMachine> {
    static INIT: Once = Once::new();
    INIT.call_once(|| LlvmTarget::initialize_x86(&InitializationConfig::default()));
    let triple = inkwell::targets::TargetTriple::create(t.triple());
    let target = LlvmTarget::from_triple(&triple).map_err(llvm_err)?;
    target
        .create_target_machine(
            &triple,
            rocmc_target::cpu::LLVM_CPU,
            "",
            OptimizationLevel::Aggressive,
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
            .map(|g| rocmc_ir::lower::matrix::expand(g.clone()))
            .collect()
    }

    fn emit_body(&self, fcx: &mut FnCx<'_, '_>, contract: bool) -> R<()> {
        fcx.host_kernel(contract)
    }

    fn link_helpers<'ctx>(&self, cx: &'ctx Context, m: &Module<'ctx>) -> R<()> {
        link_cpu_helpers(cx, m)
    }

    /// Reproduced with stock `llc-22 -O3` on four lines: vector frexp
    /// (found by the differential fuzzer, seed 859124179).
    fn frexp_intrinsic(&self) -> bool {
        false
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
            Some(t) => aot_machine(t),
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

    fn axis_index<'ctx>(&self, _fcx: &FnCx<'_, 'ctx>, _axis: GpuAxis) -> R<IntValue<'ctx>> {
        Err(CodegenError::Llvm(
            "the host path binds indices in its lockstep walk (a rocmc bug)".into(),
        ))
    }

    /// Lockstep already orders every thread's writes before later reads.
    fn barrier(&self, _fcx: &FnCx<'_, '_>) -> R<()> {
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
        for s in stmts {
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
                    self.counted_loop(n, &name, |me, i| {
                        me.vars[var.0 as usize] = Some(i);
                        me.host_body(body, st)
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
                Stmt::MatrixLoad { stores, .. } => self.host_body(stores, st)?,
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
                leaf => self.leaf_for_threads(leaf, st)?,
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
    fn leaf_for_threads(&mut self, leaf: &Stmt, st: &Lockstep<'ctx>) -> R<()> {
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
            if st.negated.is_empty() {
                return me.guarded(&st.guards, |me| me.leaf(leaf));
            }
            let mut cond = me.all_hold(&st.guards)?;
            for set in &st.negated {
                let all = me.all_hold(set)?;
                let not = me.b.build_not(all, "").map_err(llvm_err)?;
                cond = me.b.build_and(cond, not, "").map_err(llvm_err)?;
            }
            me.when(cond, |me| me.leaf(leaf))
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

extern "C" {
    // LLVM's process-wide symbol table, which MCJIT searches before dlsym.
    fn LLVMAddSymbol(name: *const std::ffi::c_char, value: *mut std::ffi::c_void);
    fn LLVMSearchForAddressOfSymbol(name: *const std::ffi::c_char) -> *mut std::ffi::c_void;
    fn LLVMLoadLibraryPermanently(filename: *const std::ffi::c_char) -> i32;
}

// Runtime helpers LLVM calls for bf16 on x86-64 and AArch64 but which
// libgcc before GCC 13 lacks. A bf16 result travels in the low 16 bits of
// the first floating-point register, where an f32 result's low bits go too.
extern "C" fn trunc_f32_bf16(x: f32) -> f32 {
    f32::from_bits(u32::from(half::bf16::from_f32(x).to_bits()))
}
extern "C" fn trunc_f64_bf16(x: f64) -> f32 {
    f32::from_bits(u32::from(rocmc_ir::dtype::f64_to_bf16(x).to_bits()))
}
extern "C" fn trunc_f32_f16(x: f32) -> f32 {
    f32::from_bits(u32::from(half::f16::from_f32(x).to_bits()))
}
extern "C" fn trunc_f64_f16(x: f64) -> f32 {
    f32::from_bits(u32::from(rocmc_ir::dtype::f64_to_f16(x).to_bits()))
}
extern "C" fn extend_f16_f32(x: f32) -> f32 {
    half::f16::from_bits(x.to_bits() as u16).to_f32()
}
extern "C" fn extend_bf16_f32(x: f32) -> f32 {
    half::bf16::from_bits(x.to_bits() as u16).to_f32()
}

/// The helpers rocmc provides to JIT-compiled host code, by symbol name.
fn helpers() -> [(&'static std::ffi::CStr, *mut std::ffi::c_void); 8] {
    type F32 = extern "C" fn(f32) -> f32;
    type F64 = extern "C" fn(f64) -> f32;
    [
        (c"__truncsfbf2", trunc_f32_bf16 as F32 as *mut _),
        (c"__truncdfbf2", trunc_f64_bf16 as F64 as *mut _),
        (c"__extendbfsf2", extend_bf16_f32 as F32 as *mut _),
        (c"__truncsfhf2", trunc_f32_f16 as F32 as *mut _),
        (c"__truncdfhf2", trunc_f64_f16 as F64 as *mut _),
        (c"__extendhfsf2", extend_f16_f32 as F32 as *mut _),
        (c"__gnu_f2h_ieee", trunc_f32_f16 as F32 as *mut _),
        (c"__gnu_h2f_ieee", extend_f16_f32 as F32 as *mut _),
    ]
}

/// Registers [`helpers`] and checks that every symbol the host code calls
/// resolves, compiling a copy of the module to an object to list them: an
/// unresolved call would otherwise crash the process when the kernel runs.
fn check_symbols(tm: &TargetMachine, module: &Module) -> R<()> {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: a null name adds the running program (and its libm) to LLVM's search list.
        unsafe { LLVMLoadLibraryPermanently(std::ptr::null()) };
        for (name, f) in helpers() {
            // SAFETY: a NUL-terminated name and the address of a function with the ABI LLVM calls it with.
            unsafe { LLVMAddSymbol(name.as_ptr(), f) };
        }
    });
    let copy = module.clone();
    let obj = tm
        .write_to_memory_buffer(&copy, inkwell::targets::FileType::Object)
        .map_err(llvm_err)?;
    let missing = undefined_symbols(obj.as_slice())?
        .into_iter()
        .filter(|name| {
            let Ok(c) = std::ffi::CString::new(name.as_str()) else {
                return true;
            };
            // SAFETY: a NUL-terminated name; the search only reads it.
            unsafe { LLVMSearchForAddressOfSymbol(c.as_ptr()) }.is_null()
        })
        .collect::<Vec<_>>();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CodegenError::Llvm(format!(
            "the host code calls runtime functions this process does not have: {} (a rocmc bug: \
             nothing was run)",
            missing.join(", ")
        )))
    }
}

/// Names of the undefined symbols of an ELF object.
fn undefined_symbols(obj: &[u8]) -> R<Vec<String>> {
    let elf = goblin::elf::Elf::parse(obj)
        .map_err(|e| CodegenError::Llvm(format!("reading the host object: {e}")))?;
    Ok(elf
        .syms
        .iter()
        .filter(|s| s.st_shndx == 0 && s.st_name != 0)
        .filter_map(|s| elf.strtab.get_at(s.st_name).map(str::to_string))
        .collect())
}

/// Bytes of guard band on each side of every buffer, and their value.
const GUARD: usize = 1 << 16;
const GUARD_BYTE: u8 = 0xA5;

/// Compiles every kernel of `prog` for the host and runs them in order,
/// with libm's f32 exp and log ([`run_on_host_with`] chooses).
pub fn run_on_host(
    k: &Kernel,
    prog: &Program,
    sizes: &[i32],
    params: &[u8],
    buffers: &mut [Vec<u8>],
    fp_contract: bool,
) -> Result<(), CodegenError> {
    run_on_host_with(
        k,
        prog,
        sizes,
        params,
        buffers,
        fp_contract,
        HostMath::Native,
    )
}

/// Compiles every kernel of `prog` for the host and runs them in order.
/// `buffers` holds one byte vector per tensor of `k` (by tensor ID), each
/// exactly as large as its shape for `sizes`; `params` one 8-byte
/// little-endian slot per parameter.
pub fn run_on_host_with(
    k: &Kernel,
    prog: &Program,
    sizes: &[i32],
    params: &[u8],
    buffers: &mut [Vec<u8>],
    fp_contract: bool,
    math: HostMath,
) -> Result<(), CodegenError> {
    let host = Host { math, aot: None };
    if sizes.len() != k.sizes.len()
        || params.len() != 8 * k.params.len()
        || buffers.len() != k.tensors.len()
    {
        return Err(CodegenError::Llvm(
            "run_on_host: argument counts do not match the kernel".into(),
        ));
    }
    let size_vals: Vec<i64> = sizes.iter().map(|s| i64::from(*s)).collect();
    for (t, b) in k.tensors.iter().zip(buffers.iter()) {
        let elems = t
            .shape
            .iter()
            .try_fold(1i64, |acc, e| e.eval(&size_vals, &[])?.checked_mul(acc));
        let want = elems
            .filter(|e| *e >= 0)
            .and_then(|e| usize::try_from(e).ok())
            .and_then(|e| e.checked_mul(t.dtype.size()));
        if want != Some(b.len()) {
            return Err(CodegenError::Llvm(format!(
                "run_on_host: tensor `{}` has {} bytes; its shape needs {:?}",
                t.name,
                b.len(),
                want
            )));
        }
    }
    let tm = host_machine()?;
    let cx = Context::create();
    let module = cx.create_module(&format!("{}_host", k.name));
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    // The CPU runs a wave's matrix instruction through its lane layout.
    let prog = &Program {
        kernels: prog
            .kernels
            .iter()
            .map(|g| rocmc_ir::lower::matrix::expand(g.clone()))
            .collect(),
    };
    for g in &prog.kernels {
        let mut f = FnCx::new(&cx, &module, k, g, &host)?;
        f.host_kernel(fp_contract)?;
    }
    // MCJIT builds its own target machine for a generic processor; the
    // functions' attributes make it compile for this one (see host_machine).
    let (cpu, features) = host_cpu();
    for f in module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
    {
        for (key, value) in [("target-cpu", &cpu), ("target-features", &features)] {
            let a = cx.create_string_attribute(key, value);
            f.add_attribute(inkwell::attributes::AttributeLoc::Function, a);
        }
    }
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(format!("invalid host module (a rocmc bug): {e}")))?;
    module
        .run_passes("default<O2>", &tm, PassBuilderOptions::create())
        .map_err(llvm_err)?;
    check_symbols(&tm, &module)?;
    let ee = module
        .create_jit_execution_engine(OptimizationLevel::Default)
        .map_err(llvm_err)?;
    // Each buffer runs inside a larger allocation with a guard band on both
    // sides: a kernel that writes out of bounds (a lowering bug) is then
    // reported instead of silently corrupting this process's heap.
    let mut guarded: Vec<Vec<u8>> = buffers
        .iter()
        .map(|b| {
            let mut g = vec![GUARD_BYTE; b.len() + 2 * GUARD];
            g[GUARD..GUARD + b.len()].copy_from_slice(b);
            g
        })
        .collect();
    let ptrs: Vec<*mut u8> = guarded
        .iter_mut()
        // SAFETY: GUARD is within the allocation.
        .map(|b| unsafe { b.as_mut_ptr().add(GUARD) })
        .collect();
    for g in &prog.kernels {
        // SAFETY: the function was generated above with exactly the HostFn signature.
        let f: JitFunction<HostFn> = unsafe { ee.get_function(&g.name) }.map_err(llvm_err)?;
        let table: Vec<*mut u8> = g
            .args
            .iter()
            .filter_map(|a| match &a.kind {
                ArgKind::Buffer { tensor, .. } => Some(ptrs[tensor.0 as usize]),
                ArgKind::Size(_) | ArgKind::Param(_) => None,
            })
            .collect();
        // SAFETY: every buffer the kernel touches has the size its shape implies (checked
        // above), sizes and params have one slot each; the loop IR keeps accesses in bounds,
        // and the guard bands catch the writes of a kernel that does not.
        unsafe { f.call(table.as_ptr(), sizes.as_ptr(), params.as_ptr(), 0, i64::MAX) };
        for (t, b) in k.tensors.iter().zip(&guarded) {
            let n = b.len() - 2 * GUARD;
            if b[..GUARD]
                .iter()
                .chain(&b[GUARD + n..])
                .any(|x| *x != GUARD_BYTE)
            {
                return Err(CodegenError::Llvm(format!(
                    "kernel `{}` wrote outside tensor `{}` on the host (a rocmc bug)",
                    g.name, t.name
                )));
            }
        }
    }
    for (b, g) in buffers.iter_mut().zip(&guarded) {
        let n = b.len();
        b.copy_from_slice(&g[GUARD..GUARD + n]);
    }
    Ok(())
}
