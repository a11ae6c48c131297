//! NVPTX (`nvptx64-nvidia-cuda`): `ptx_kernel` functions whose buffers are
//! global-space pointers, shared memory in address space 3, `%tid`/`%ctaid`
//! through `llvm.nvvm.read.ptx.sreg.*`, `bar.sync 0`, and the block size as
//! `.reqntid`/`.maxntid`. The output is PTX text; the CUDA driver compiles
//! it for the device when the module is loaded.

use super::amdgpu::declare_gpu_kernel;
use super::{Backend, KernelAbi, SHARED_ADDRESS_SPACE};
use crate::emit::{llvm_err, Emit, R};
use crate::CodegenError;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine, TargetTriple,
};
use inkwell::types::ArrayType;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, IntValue, PointerValue};
use inkwell::AddressSpace;
use inkwell::OptimizationLevel;
use rocmc_ir::loops::{GpuKernel, Local};
use rocmc_ir::schedule::GpuAxis;
use rocmc_ir::{DType, Kernel, MathFn};
use rocmc_target::NvidiaTarget;

pub const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// LLVM's `ptx_kernel` calling convention (CallingConv::PTX_Kernel).
const PTX_KERNEL_CC: u32 = 71;
const GLOBAL: u16 = 1;
/// The alignment rocmc's CUDA runtime guarantees for every buffer argument.
pub const BUFFER_ALIGN: u64 = 16;

/// One PTX statement as inline assembly that LLVM neither removes nor
/// moves across memory accesses.
fn asm_statement(emit: &Emit<'_, '_>, text: &str) -> R<()> {
    let fty = emit.cx.void_type().fn_type(&[], false);
    let f = emit.cx.create_inline_asm(
        fty,
        text.to_string(),
        "~{memory}".to_string(),
        true,
        false,
        None,
        false,
    );
    emit.b
        .build_indirect_call(fty, f, &[], "")
        .map_err(llvm_err)?;
    Ok(())
}

/// PTX as inline assembly with operands, ordered among memory accesses;
/// returns its result where it has one.
fn asm_with<'ctx>(
    emit: &Emit<'_, 'ctx>,
    text: &str,
    constraints: &str,
    args: &[BasicMetadataValueEnum<'ctx>],
    ret: Option<inkwell::types::BasicTypeEnum<'ctx>>,
) -> R<Option<BasicValueEnum<'ctx>>> {
    use inkwell::types::BasicType;
    // Every operand rocmc passes is an integer (addresses as i64).
    let params: Vec<inkwell::types::BasicMetadataTypeEnum> = args
        .iter()
        .map(|a| a.into_int_value().get_type().into())
        .collect();
    let fty = match ret {
        Some(t) => t.fn_type(&params, false),
        None => emit.cx.void_type().fn_type(&params, false),
    };
    let f = emit.cx.create_inline_asm(
        fty,
        text.to_string(),
        constraints.to_string(),
        true,
        false,
        None,
        false,
    );
    let r = emit
        .b
        .build_indirect_call(fty, f, args, "")
        .map_err(llvm_err)?;
    Ok(match r.try_as_basic_value() {
        inkwell::values::ValueKind::Basic(v) => Some(v),
        _ => None,
    })
}

/// The NVPTX backend for one processor and PTX version.
pub(crate) struct Nvptx<'t> {
    t: &'t NvidiaTarget,
}

impl<'t> Nvptx<'t> {
    pub(crate) fn new(t: &'t NvidiaTarget) -> Self {
        Nvptx { t }
    }
}

/// LLVM's target machine for an NVIDIA processor, with the PTX ISA version set.
pub fn target_machine(t: &NvidiaTarget) -> R<TargetMachine> {
    target_machine_with(t, &t.llvm_features())
}

/// The same with the subtarget features given (none: LLVM's default PTX version).
pub(crate) fn target_machine_with(t: &NvidiaTarget, features: &str) -> R<TargetMachine> {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| LlvmTarget::initialize_nvptx(&InitializationConfig::default()));
    let triple = TargetTriple::create(TRIPLE);
    let target = LlvmTarget::from_triple(&triple).map_err(llvm_err)?;
    target
        .create_target_machine(
            &triple,
            &t.processor,
            features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| CodegenError::Llvm(format!("cannot create a target machine for {t}")))
}

/// The bytes of dynamic shared memory kernel `g` is launched with: all its
/// shared arrays when they exceed what a block may declare statically
/// (the runtime then raises the kernel's limit), else 0 and the arrays stay
/// `.shared` globals.
pub fn dynamic_shared_bytes(g: &GpuKernel) -> u32 {
    if !g.dynamic_shared.is_empty() {
        // Every array at its bound, each arrays sized at launch 16-aligned:
        // the most any launch asks for, which the kernel is opted in to.
        let most = g.shared_layout().1 + 16 * (g.dynamic_shared.len() as u64 + 1);
        return u32::try_from(most).unwrap_or(u32::MAX);
    }
    dynamic_total(g.shared_layout().1)
}

/// [`dynamic_shared_bytes`] for a layout of `total` bytes.
fn dynamic_total(total: u64) -> u32 {
    if total > u64::from(rocmc_target::nvptx::STATIC_SHARED_PER_BLOCK) {
        u32::try_from(total).unwrap_or(u32::MAX)
    } else {
        0
    }
}

impl Backend for Nvptx<'_> {
    fn emits_objects(&self) -> bool {
        false
    }

    fn triple(&self) -> String {
        TRIPLE.into()
    }

    fn target_machine(&self) -> R<TargetMachine> {
        target_machine(self.t)
    }

    fn declare_kernel<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        b: &Builder<'ctx>,
        k: &Kernel,
        g: &GpuKernel,
    ) -> R<KernelAbi<'ctx>> {
        // cuMemAlloc returns 256-byte aligned memory and rocmc's CUDA runtime
        // passes whole allocations: 16-byte alignment lets LLVM form the
        // 16-byte vector accesses `vectorize` asks for (NVPTX, unlike
        // AMDGPU, has no misaligned vector loads).
        let abi = declare_gpu_kernel(cx, m, b, (k, g), GLOBAL, BUFFER_ALIGN, self.tensor_copies())?;
        let f = abi.f;
        f.set_call_conventions(PTX_KERNEL_CC);
        // The block size is a constant of the kernel: `.reqntid` lets ptxas
        // budget registers for exactly that many threads (as AMDGPU's
        // flat-work-group-size does), and the driver refuses other sizes.
        let [x, y, z] = g.block;
        let s = |k: &str, v: &str| cx.create_string_attribute(k, v);
        f.add_attribute(
            AttributeLoc::Function,
            s("nvvm.reqntid", &format!("{x},{y},{z}")),
        );
        f.add_attribute(
            AttributeLoc::Function,
            s("nvvm.maxntid", &format!("{x},{y},{z}")),
        );
        // `.minnctapersm`: ptxas budgets registers for that many blocks per SM.
        if let Some(blocks) = g.min_blocks {
            f.add_attribute(
                AttributeLoc::Function,
                s("nvvm.minctasm", &blocks.to_string()),
            );
        }
        Ok(abi)
    }

    fn shared_array<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        _b: &Builder<'ctx>,
        g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let (offsets, total) = g.shared_layout();
        let sized_at_launch = g.dynamic_layout(g.static_shared_bytes());
        if dynamic_total(total) == 0 && sized_at_launch.is_none() {
            return Ok(super::shared_global(m, g, l, at, SHARED_ADDRESS_SPACE));
        }
        // One `.extern .shared` array (clang's `extern __shared__`), each
        // of the kernel's arrays at its offset in `shared_layout`.
        let name = format!("{}_dynamic_shared", g.name);
        let base = m.get_global(&name).unwrap_or_else(|| {
            let gv = m.add_global(
                cx.i8_type().array_type(0),
                Some(AddressSpace::from(SHARED_ADDRESS_SPACE)),
                &name,
            );
            gv.set_linkage(inkwell::module::Linkage::External);
            let align = (0..g.shared.len() as u32)
                .map(|i| g.shared_align(i))
                .max()
                .unwrap_or(16)
                .max(16);
            gv.set_alignment(align);
            gv
        });
        let i = g
            .shared
            .iter()
            .position(|x| std::ptr::eq(x, l))
            .ok_or_else(|| {
                CodegenError::Llvm(format!(
                    "`{}` is not a shared array of `{}`",
                    l.name, g.name
                ))
            })?;
        // With arrays sized at launch, the static ones come first; those
        // sized at launch are placed by `dynamic_shared_base` (the base here).
        let offset = match &sized_at_launch {
            Some((at, _)) => at[i].as_const().unwrap_or(0) as u64,
            None => offsets[i],
        };
        let offset = cx.i64_type().const_int(offset, false);
        // SAFETY: a constant byte offset into the dynamic block, which the
        // launch sizes to hold every array (`dynamic_shared_bytes`).
        Ok(unsafe { base.as_pointer_value().const_gep(cx.i8_type(), &[offset]) })
    }

    fn dynamic_shared_base<'ctx>(
        &self,
        _cx: &'ctx Context,
        m: &Module<'ctx>,
        g: &GpuKernel,
    ) -> Option<(PointerValue<'ctx>, u64)> {
        (!g.dynamic_shared.is_empty()).then_some(())?;
        // The block `shared_array` declared: the static arrays, then these.
        let gv = m.get_global(&format!("{}_dynamic_shared", g.name))?;
        Some((gv.as_pointer_value(), g.static_shared_bytes()))
    }

    fn axis_index<'ctx>(&self, emit: &Emit<'_, 'ctx>, axis: GpuAxis) -> R<IntValue<'ctx>> {
        let (reg, d) = match axis {
            GpuAxis::Block(d) => ("ctaid", d),
            GpuAxis::Thread(d) => ("tid", d),
        };
        let name = format!(
            "llvm.nvvm.read.ptx.sreg.{reg}.{}",
            ["x", "y", "z"][d.index()]
        );
        Ok(emit.call(&name, &[], &[])?.into_int_value())
    }

    /// `bar.sync 0`, which also orders shared and global memory among the block's threads.
    fn barrier(&self, emit: &Emit<'_, '_>) -> R<()> {
        let f = emit.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.all", &[])?;
        emit.b
            .build_call(f, &[emit.i32(0).into()], "")
            .map_err(llvm_err)?;
        Ok(())
    }

    /// `shfl.sync.bfly.b32` over the whole warp (31: the clamp of a butterfly).
    fn lane_xor<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        v: inkwell::values::FloatValue<'ctx>,
        _lane: IntValue<'ctx>,
        mask: u32,
        _width: u32,
    ) -> R<inkwell::values::FloatValue<'ctx>> {
        let f = emit.intrinsic("llvm.nvvm.shfl.sync.bfly.f32", &[])?;
        let all = emit.cx.i32_type().const_all_ones();
        let got = emit
            .b
            .build_call(
                f,
                &[
                    all.into(),
                    v.into(),
                    emit.i32(i64::from(mask)).into(),
                    emit.i32(31).into(),
                ],
                "",
            )
            .map_err(llvm_err)?;
        match got.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(r) => Ok(r.into_float_value()),
            _ => Err(CodegenError::Llvm("shfl.sync returned nothing".into())),
        }
    }

    /// `mma.sync` returns D as a struct of its registers.
    fn matrix<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        instr: &rocmc_target::matrix::MatrixInstr,
        a: Vec<BasicValueEnum<'ctx>>,
        b: Vec<BasicValueEnum<'ctx>>,
        c: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let n = instr.llvm_c.1;
        let field = crate::emit::llvm_type(emit.cx, instr.llvm_c.0)?;
        let ret = emit.cx.struct_type(&vec![field; n as usize], false);
        let d = super::call_named(emit, instr.intrinsic, ret.into(), &[a, b, c].concat())?;
        (0..n)
            .map(|i| {
                emit.b
                    .build_extract_value(d.into_struct_value(), i, "")
                    .map_err(llvm_err)
            })
            .collect()
    }

    fn alignment_from_index(&self) -> bool {
        true
    }

    fn vector_stores(&self) -> bool {
        true
    }

    fn byte_to_half_by_bits(&self) -> bool {
        true
    }

    /// ptxas schedules only within a basic block: a staged tile's copies
    /// and the compute on the previous tile must share one to overlap.
    fn versions_loop_bodies(&self) -> bool {
        // The vote reads `activemask`, which PTX has from 6.2: the PTX
        // written for sm_72 and older cannot express it (fuzzer kernel
        // fz804, tests/regress/vote_old_ptx.toml), and those processors
        // have none of the staged copies the straight version is for.
        self.t.ptx_version >= 62
    }

    // Scatters need the GPU's scope, not the system's (host included).
    fn atomic_scope(&self) -> &'static str {
        "device"
    }

    /// `vote.sync.all` over the active lanes.
    fn wave_all<'ctx>(&self, emit: &Emit<'_, 'ctx>, cond: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let i32t = emit.cx.i32_type();
        let mask = super::call_named(emit, "llvm.nvvm.activemask", i32t.into(), &[])?;
        let all = super::call_named(
            emit,
            "llvm.nvvm.vote.all.sync",
            emit.cx.bool_type().into(),
            &[mask, cond.into()],
        )?;
        Ok(all.into_int_value())
    }

    /// `cp.async` from sm_80: `.cg` (through L2 only) for 16 bytes, `.ca`
    /// for 4 and 8, which `.cg` does not allow.
    fn async_copy<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        dst: PointerValue<'ctx>,
        src: PointerValue<'ctx>,
        bytes: u32,
    ) -> R<bool> {
        if self.t.compute_capability() < (8, 0) || !matches!(bytes, 4 | 8 | 16) {
            return Ok(false);
        }
        let level = if bytes == 16 { "cg" } else { "ca" };
        let name = format!("llvm.nvvm.cp.async.{level}.shared.global.{bytes}");
        super::call_void(emit, &name, &[dst.into(), src.into()])?;
        Ok(true)
    }

    /// `ldmatrix` from sm_75.
    fn matrix_load<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        row: PointerValue<'ctx>,
        count: u32,
        trans: bool,
    ) -> R<Option<Vec<BasicValueEnum<'ctx>>>> {
        if self.t.compute_capability() < (7, 5) || !matches!(count, 1 | 2 | 4) {
            return Ok(None);
        }
        let name = format!(
            "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{}.b16.p3",
            if trans { ".trans" } else { "" }
        );
        let i32t = emit.cx.i32_type();
        if count == 1 {
            let r = super::call_named(emit, &name, i32t.into(), &[row.into()])?;
            return Ok(Some(vec![r]));
        }
        let ret = emit
            .cx
            .struct_type(&vec![i32t.into(); count as usize], false);
        let v = super::call_named(emit, &name, ret.into(), &[row.into()])?;
        (0..count)
            .map(|i| {
                emit.b
                    .build_extract_value(v.into_struct_value(), i, "")
                    .map_err(llvm_err)
            })
            .collect::<R<Vec<_>>>()
            .map(Some)
    }

    /// Hopper's shared-memory matrix descriptor: the address's bits 4-17;
    /// 8 rows of the swizzle's span between groups of 8 rows (the
    /// stride-dimension offset: 1024 bytes for 128-byte rows); the
    /// leading-dimension offset 1 (unused) for a K-major operand, the
    /// distance between 128-byte column blocks (64 f16 of n) for a
    /// transposed one; the layout type of the span in bits 62-63 (1:
    /// 128-byte swizzle, 2: 64-byte, 3: 32-byte).
    fn matrix_descriptor<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        start: PointerValue<'ctx>,
        mn_block: Option<u32>,
        row_bytes: u32,
    ) -> R<Option<IntValue<'ctx>>> {
        let layout: u64 = match row_bytes {
            128 => 1,
            64 => 2,
            32 => 3,
            other => {
                return Err(CodegenError::Llvm(format!(
                    "no descriptor layout for {other}-byte swizzled rows (a rocmc bug)"
                )))
            }
        };
        let i64t = emit.cx.i64_type();
        let addr = emit.b.build_ptr_to_int(start, i64t, "").map_err(llvm_err)?;
        let c = |v: u64| i64t.const_int(v, false);
        let bits = emit.b.build_and(addr, c(0x3ffff), "").map_err(llvm_err)?;
        let field = emit
            .b
            .build_right_shift(bits, c(4), false, "")
            .map_err(llvm_err)?;
        let leading = mn_block.map_or(1, |b| u64::from(b >> 4) & 0x3fff);
        let stride = (8 * u64::from(row_bytes)) >> 4;
        let fixed = (leading << 16) | (stride << 32) | (layout << 62);
        Ok(Some(
            emit.b.build_or(field, c(fixed), "").map_err(llvm_err)?,
        ))
    }

    /// `wgmma.mma_async` as inline PTX (LLVM 22 has no intrinsic for it):
    /// D in registers tied to C, A's descriptor or its four 32-bit
    /// registers, B's descriptor, scale-d as a predicate set from 1
    /// (accumulate), neither operand negated, `trans` as the descriptors
    /// say (A in registers has no transpose).
    fn group_matrix<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        instr: &rocmc_target::matrix::MatrixInstr,
        a: super::GroupA<'ctx>,
        b: IntValue<'ctx>,
        trans: [bool; 2],
        c: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        use inkwell::types::BasicMetadataTypeEnum;
        use rocmc_target::matrix::MType;
        let n = c.len();
        let (acc_t, reg): (inkwell::types::BasicTypeEnum, &str) = match instr.acc {
            MType::I32 => (emit.cx.i32_type().into(), "=r"),
            _ => (emit.cx.f32_type().into(), "=f"),
        };
        let a_regs: Vec<IntValue<'ctx>> = match &a {
            super::GroupA::Desc(d) => vec![*d],
            super::GroupA::Regs(r) => r.clone(),
        };
        let in_regs = matches!(a, super::GroupA::Regs(_));
        // Integer products take scale-d only; 8-bit floats no transposes.
        let rest = match (instr.a, in_regs) {
            (MType::I8, _) => String::new(),
            (MType::Fp8 | MType::Bf8, _) => ", 1, 1".into(),
            (_, true) => format!(", 1, 1, {}", u8::from(trans[1])),
            (_, false) => format!(", 1, 1, {}, {}", u8::from(trans[0]), u8::from(trans[1])),
        };
        let regs: Vec<String> = (0..n).map(|i| format!("${i}")).collect();
        let na = a_regs.len();
        let a_text = if in_regs {
            let r: Vec<String> = (0..na).map(|i| format!("${}", 2 * n + i)).collect();
            format!("{{{}}}", r.join(", "))
        } else {
            format!("${}", 2 * n)
        };
        let asm = format!(
            "{{\n.reg .pred p;\nsetp.ne.b32 p, ${}, 0;\n{} {{{}}}, {a_text}, ${}, p{rest};\n}}",
            2 * n + na + 1,
            instr.name,
            regs.join(", "),
            2 * n + na
        );
        let a_constraint = if in_regs { "r" } else { "l" };
        let constraints: Vec<String> = (0..n)
            .map(|_| reg.to_string())
            .chain((0..n).map(|i| i.to_string()))
            .chain((0..na).map(|_| a_constraint.to_string()))
            .chain(["l".into(), "r".into()])
            .collect();
        let ret = emit.cx.struct_type(&vec![acc_t; n], false);
        let params: Vec<BasicMetadataTypeEnum> = (0..n)
            .map(|_| acc_t.into())
            .chain(a_regs.iter().map(|v| v.get_type().into()))
            .chain([emit.cx.i64_type().into(), emit.cx.i32_type().into()])
            .collect();
        let fty = ret.fn_type(&params, false);
        let f =
            emit.cx
                .create_inline_asm(fty, asm, constraints.join(","), true, false, None, false);
        let args: Vec<inkwell::values::BasicMetadataValueEnum> = c
            .into_iter()
            .map(Into::into)
            .chain(a_regs.into_iter().map(Into::into))
            .chain([b.into(), emit.i32(1).into()])
            .collect();
        let d = emit
            .b
            .build_indirect_call(fty, f, &args, "")
            .map_err(llvm_err)?;
        let inkwell::values::ValueKind::Basic(d) = d.try_as_basic_value() else {
            return Err(CodegenError::Llvm("wgmma returned nothing".into()));
        };
        (0..n as u32)
            .map(|i| {
                emit.b
                    .build_extract_value(d.into_struct_value(), i, "")
                    .map_err(llvm_err)
            })
            .collect()
    }

    fn matrix_async(&self, emit: &Emit<'_, '_>, op: rocmc_ir::loops::MatrixAsync) -> R<()> {
        use rocmc_ir::loops::MatrixAsync;
        let text = match op {
            MatrixAsync::Fence => "wgmma.fence.sync.aligned;".to_string(),
            MatrixAsync::Commit => "wgmma.commit_group.sync.aligned;".to_string(),
            MatrixAsync::Wait(n) => format!("wgmma.wait_group.sync.aligned {n};"),
        };
        asm_statement(emit, &text)
    }

    /// Hopper's tensor memory accelerator, from PTX 8.0 (sm_90 and later).
    fn tensor_copies(&self) -> bool {
        self.t.compute_capability() >= (9, 0) && self.t.ptx_version >= 80
    }

    /// `cp.async.bulk.tensor` as inline PTX (one statement per rank; the
    /// tile mode, completion counted in bytes on the mbarrier).
    fn tensor_copy<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        dst: PointerValue<'ctx>,
        map: PointerValue<'ctx>,
        coords: &[IntValue<'ctx>],
        bar: PointerValue<'ctx>,
    ) -> R<()> {
        let i64t = emit.cx.i64_type();
        let to_int = |p: PointerValue<'ctx>| emit.b.build_ptr_to_int(p, i64t, "").map_err(llvm_err);
        // The map's generic address.
        let generic = emit
            .b
            .build_address_space_cast(map, emit.cx.ptr_type(AddressSpace::default()), "")
            .map_err(llvm_err)?;
        let n = coords.len();
        let c: Vec<String> = (0..n).map(|i| format!("${}", i + 2)).collect();
        let text = format!(
            "cp.async.bulk.tensor.{n}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {{{}}}], [${}];",
            c.join(", "),
            n + 2
        );
        let constraints = format!("l,l,{}l,~{{memory}}", "r,".repeat(n));
        let mut args: Vec<BasicMetadataValueEnum> =
            vec![to_int(dst)?.into(), to_int(generic)?.into()];
        args.extend(coords.iter().map(|v| BasicMetadataValueEnum::from(*v)));
        args.push(to_int(bar)?.into());
        asm_with(emit, &text, &constraints, &args, None)?;
        Ok(())
    }

    fn mbarrier<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        op: super::MbarrierOp,
        bar: PointerValue<'ctx>,
        arg: Option<IntValue<'ctx>>,
    ) -> R<Option<IntValue<'ctx>>> {
        use super::MbarrierOp;
        let addr = emit
            .b
            .build_ptr_to_int(bar, emit.cx.i64_type(), "")
            .map_err(llvm_err)?;
        let arg = || {
            arg.ok_or_else(|| CodegenError::Llvm(format!("mbarrier {op:?} without its operand")))
        };
        match op {
            // The fence makes the initialisation visible to the accelerator.
            MbarrierOp::Init => asm_with(
                emit,
                "mbarrier.init.shared::cta.b64 [$0], 1;\n\tfence.mbarrier_init.release.cluster;",
                "l,~{memory}",
                &[addr.into()],
                None,
            )
            .map(|_| None),
            MbarrierOp::Expect => asm_with(
                emit,
                "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
                "l,r,~{memory}",
                &[addr.into(), arg()?.into()],
                None,
            )
            .map(|_| None),
            MbarrierOp::Inval => asm_with(
                emit,
                "mbarrier.inval.shared::cta.b64 [$0];",
                "l,~{memory}",
                &[addr.into()],
                None,
            )
            .map(|_| None),
            MbarrierOp::TryWait => {
                let done = asm_with(
                    emit,
                    "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\tselp.u32 $0, 1, 0, p;\n\t}",
                    "=r,l,r,~{memory}",
                    &[addr.into(), arg()?.into()],
                    Some(emit.cx.i32_type().into()),
                )?
                .expect("asm with a result")
                .into_int_value();
                let zero = emit.cx.i32_type().const_zero();
                Ok(Some(
                    emit.b
                        .build_int_compare(inkwell::IntPredicate::NE, done, zero, "")
                        .map_err(llvm_err)?,
                ))
            }
        }
    }

    fn async_proxy_fence(&self, emit: &Emit<'_, '_>) -> R<()> {
        asm_statement(emit, "fence.proxy.async.shared::cta;")
    }

    fn async_commit(&self, emit: &Emit<'_, '_>) -> R<()> {
        if self.t.compute_capability() >= (8, 0) {
            super::call_void(emit, "llvm.nvvm.cp.async.commit.group", &[])?;
        }
        Ok(())
    }

    fn async_wait(&self, emit: &Emit<'_, '_>, pending: u32) -> R<()> {
        if self.t.compute_capability() >= (8, 0) {
            let n = emit.i32(i64::from(pending));
            super::call_void(emit, "llvm.nvvm.cp.async.wait.group", &[n.into()])?;
        }
        Ok(())
    }

    /// `fma.rn.f16` from sm_53, `fma.rn.bf16` from sm_90; before, LLVM
    /// goes through a wider fma and rounds twice.
    fn fma_rounds_once(&self, t: DType) -> bool {
        match t {
            DType::F16 => self.t.has_f16_math(),
            DType::BF16 => self.t.has_bf16_math(),
            _ => true,
        }
    }

    /// Keeps one launch-bound directive per kernel: PTX ISA versions before
    /// 8.x refuse `.maxntid` beside `.reqntid`, which LLVM's O3 pipeline
    /// derives from it. `.reqntid` stays: rocmc always launches the block
    /// size of the launch document.
    fn after_optimise(&self, m: &Module<'_>) {
        let mut f = m.get_first_function();
        while let Some(func) = f {
            let loc = AttributeLoc::Function;
            if func.get_string_attribute(loc, "nvvm.reqntid").is_some() {
                func.remove_string_attribute(loc, "nvvm.maxntid");
            }
            f = func.get_next_function();
        }
    }

    /// NVPTX has only `ex2.approx`/`lg2.approx` (about 2 ulp, no denormals)
    /// and no libdevice here: f32 exp is rocmc's f32 expansion, exp2, log
    /// and log2 go through its f64 ones.
    fn native_f32_math(&self, f: MathFn) -> bool {
        !matches!(f, MathFn::Exp | MathFn::Exp2 | MathFn::Log | MathFn::Log2)
    }

    /// One `MUFU.EX2`; flushing denormal results costs nothing here and
    /// keeps ptxas from adding the scaling the non-ftz form needs.
    fn exp2_approx_f32(&self) -> &'static str {
        "llvm.nvvm.ex2.approx.ftz"
    }

    /// `rcp.approx.ftz.f32`: one `MUFU.RCP`, where `div.rn.f32` is a
    /// Newton sequence with a slow path.
    fn rcp_approx_f32<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        x: inkwell::values::FloatValue<'ctx>,
    ) -> R<Option<inkwell::values::FloatValue<'ctx>>> {
        let r = emit.call("llvm.nvvm.rcp.approx.ftz.f", &[], &[x.into()])?;
        Ok(Some(r.into_float_value()))
    }
}
