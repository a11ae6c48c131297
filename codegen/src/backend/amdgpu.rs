//! AMDGPU (`amdgcn-amd-amdhsa`): the HSA kernel ABI, LDS in address space 3,
//! `llvm.amdgcn.*` indices and `s_barrier` between work-group-scope fences.

use super::{Backend, KernelAbi};
use crate::emit::{enum_attr, llvm_err, ty, Emit, R};
use crate::{CodegenError, Target};
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{FlagBehavior, Module};
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine, TargetTriple,
};
use inkwell::types::{ArrayType, BasicMetadataTypeEnum};
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{AddressSpace, OptimizationLevel};
use rocmc_ir::loops::{Access, ArgKind, GpuKernel, Local};
use rocmc_ir::schedule::GpuAxis;
use rocmc_ir::{DType, Kernel, MathFn};
use std::collections::HashMap;

pub const TRIPLE: &str = "amdgcn-amd-amdhsa";
pub(crate) const AMDGPU_KERNEL_CC: u32 = 91;
const GLOBAL: u16 = 1;

/// The AMDGPU backend for one target (processor, features, wave size, code-object version).
pub(crate) struct AmdGpu<'t> {
    t: &'t rocmc_target::AmdTarget,
}

impl<'t> AmdGpu<'t> {
    pub(crate) fn new(t: &'t rocmc_target::AmdTarget) -> Self {
        AmdGpu { t }
    }
}

/// LLVM's target machine for an AMDGPU target.
pub fn target_machine(t: &rocmc_target::AmdTarget) -> R<TargetMachine> {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| LlvmTarget::initialize_amd_gpu(&InitializationConfig::default()));
    let triple = TargetTriple::create(TRIPLE);
    let target = LlvmTarget::from_triple(&triple).map_err(llvm_err)?;
    target
        .create_target_machine(
            &triple,
            &t.id.processor,
            &t.llvm_features(),
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| {
            CodegenError::Llvm(format!(
                "cannot create a target machine for {}",
                Target::Amd(t.clone())
            ))
        })
}

/// The fourth word of a buffer resource for raw 32-bit data (the format
/// Triton's AMD backend gives its buffer loads), by generation; `None`
/// where rocmc does not make buffer resources (gfx10, gfx12: their words
/// differ and were not checked).
fn buffer_format(processor: &str) -> Option<u32> {
    if processor.starts_with("gfx9") {
        // NUM_FORMAT float (7 << 12), DATA_FORMAT 32 (4 << 15).
        Some(0x0002_7000)
    } else if processor.starts_with("gfx11") {
        // Triton 3.9's word for gfx11: RESOURCE_LEVEL 1 (bit 24) and
        // OOB_SELECT 3 (bits 28-29: a plain byte range check).
        Some(0x3101_4000)
    } else {
        None
    }
}

extern "C" {
    // Not wrapped by inkwell: fences with a synchronisation scope.
    fn LLVMGetSyncScopeID(
        c: *mut std::ffi::c_void,
        name: *const std::ffi::c_char,
        len: usize,
    ) -> std::ffi::c_uint;
    fn LLVMBuildFenceSyncScope(
        b: *mut std::ffi::c_void,
        ordering: std::ffi::c_int,
        ssid: std::ffi::c_uint,
        name: *const std::ffi::c_char,
    ) -> *mut std::ffi::c_void;
}

// LLVMAtomicOrdering values.
const ORDERING_ACQUIRE: std::ffi::c_int = 4;
const ORDERING_RELEASE: std::ffi::c_int = 5;

/// A fence at work-group scope.
fn workgroup_fence(emit: &Emit<'_, '_>, ordering: std::ffi::c_int) {
    let name = "workgroup";
    // SAFETY: the context is live; the scope name is valid for the call.
    let ssid =
        unsafe { LLVMGetSyncScopeID(emit.cx.raw().cast(), name.as_ptr().cast(), name.len()) };
    // SAFETY: the builder is live and positioned in a basic block.
    unsafe { LLVMBuildFenceSyncScope(emit.b.as_mut_ptr().cast(), ordering, ssid, c"".as_ptr()) };
}

/// Declares a GPU kernel whose buffers are `ptr addrspace(global)` with
/// `noalias`, `readonly`/`writeonly` and their element alignment, and whose
/// sizes and parameters are passed by value; the AMDGPU and NVPTX ABIs agree
/// on all of it but the calling convention and the function attributes.
/// `min_align` raises the buffers' alignment where the runtime guarantees
/// more than the element size; `tensor_maps`, where the target issues
/// tensor copies, adds the kernel's maps as a hidden last argument.
pub(crate) fn declare_gpu_kernel<'ctx>(
    cx: &'ctx Context,
    m: &Module<'ctx>,
    b: &Builder<'ctx>,
    (k, g): (&Kernel, &GpuKernel),
    global: u16,
    min_align: u64,
    tensor_maps: bool,
) -> R<KernelAbi<'ctx>> {
    let ptr = cx.ptr_type(AddressSpace::from(global));
    let mut params: Vec<BasicMetadataTypeEnum> = g
        .args
        .iter()
        .map(|a| match &a.kind {
            ArgKind::Buffer { .. } => ptr.into(),
            ArgKind::Size(_) => cx.i32_type().into(),
            ArgKind::Param(p) => ty(cx, k.params[p.0 as usize].dtype).into(),
        })
        .collect();
    let tensor_maps = tensor_maps && !g.tensor_maps.is_empty();
    if tensor_maps {
        params.push(ptr.into());
    }
    let f = m.add_function(&g.name, cx.void_type().fn_type(&params, false), None);
    f.add_attribute(AttributeLoc::Function, enum_attr(cx, "nounwind", 0));
    f.add_attribute(AttributeLoc::Function, enum_attr(cx, "mustprogress", 0));
    let mut abi = KernelAbi {
        f,
        bufs: HashMap::new(),
        sizes: Vec::new(),
        params: Vec::new(),
        tensor_maps: None,
    };
    if tensor_maps {
        let i = g.args.len() as u32;
        let p = f.get_nth_param(i).expect("declared above");
        p.set_name("tensor_maps");
        let loc = AttributeLoc::Param(i);
        for a in ["noundef", "noalias", "readonly"] {
            f.add_attribute(loc, enum_attr(cx, a, 0));
        }
        // The accelerator reads a map from a 64-byte aligned address.
        f.add_attribute(loc, enum_attr(cx, "align", 64));
        abi.tensor_maps = Some(p.into_pointer_value());
    }
    for (i, a) in g.args.iter().enumerate() {
        let p = f.get_nth_param(i as u32).expect("declared above");
        p.set_name(&a.name);
        let loc = AttributeLoc::Param(i as u32);
        f.add_attribute(loc, enum_attr(cx, "noundef", 0));
        match &a.kind {
            ArgKind::Buffer { tensor, access } => {
                // Distinct tensors are distinct allocations: the kernel format has no aliasing.
                f.add_attribute(loc, enum_attr(cx, "noalias", 0));
                f.add_attribute(loc, enum_attr(cx, "captures", 0));
                let align = (k.tensor(*tensor).dtype.size() as u64).max(min_align);
                f.add_attribute(loc, enum_attr(cx, "align", align));
                let acc = match access {
                    Access::Read => Some("readonly"),
                    Access::Write => Some("writeonly"),
                    // A scatter's atomics read and write it.
                    Access::Update => None,
                };
                if let Some(acc) = acc {
                    f.add_attribute(loc, enum_attr(cx, acc, 0));
                }
                abi.bufs.insert(*tensor, p.into_pointer_value());
            }
            ArgKind::Size(_) => abi.sizes.push(p.into_int_value()),
            ArgKind::Param(_) => abi.params.push(p),
        }
    }
    b.position_at_end(cx.append_basic_block(f, "entry"));
    Ok(abi)
}

impl Backend for AmdGpu<'_> {
    /// An LDS array of 8-bit elements starts on 16 bytes: matrix
    /// fragments are read from it 16 bytes at a time at offsets the code
    /// proves aligned, and a tile written element by element (a
    /// transposed one) would otherwise start on 1 and have those reads
    /// split (gfx950's fp8 B fragments: pairs of 4-byte reads). Not 16-bit
    /// arrays: on gfx942 the 16-byte V reads this allows attention at
    /// d = 128 took 178 VGPRs where 164 leave three waves a SIMD (bench/amd:
    /// 0.67x Triton against 0.80x).
    fn shared_array<'ctx>(
        &self,
        _cx: &'ctx Context,
        m: &Module<'ctx>,
        _b: &Builder<'ctx>,
        g: &GpuKernel,
        l: &Local,
        at: ArrayType<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let p = super::shared_global(m, g, l, at, super::SHARED_ADDRESS_SPACE);
        if l.dtype.size() == 1 && l.bytes() >= 16 {
            if let Some(gv) = m.get_global(&format!("{}.{}", g.name, l.name)) {
                gv.set_alignment(gv.get_alignment().max(16));
            }
        }
        Ok(p)
    }

    /// HIP's `extern __shared__`: a zero-length external LDS array, which
    /// LLVM places after the kernel's static LDS; the launch's dynamic LDS
    /// bytes size it.
    fn dynamic_shared_base<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        g: &rocmc_ir::loops::GpuKernel,
    ) -> Option<(inkwell::values::PointerValue<'ctx>, u64)> {
        (!g.dynamic_shared.is_empty()).then_some(())?;
        let name = format!("{}.dynamic_lds", g.name);
        let gv = m.get_global(&name).unwrap_or_else(|| {
            let gv = m.add_global(
                cx.i8_type().array_type(0),
                Some(inkwell::AddressSpace::from(super::SHARED_ADDRESS_SPACE)),
                &name,
            );
            gv.set_linkage(inkwell::module::Linkage::External);
            gv.set_alignment(16);
            gv
        });
        Some((gv.as_pointer_value(), 0))
    }

    fn range_checked_loads(&self) -> bool {
        buffer_format(&self.t.id.processor).is_some()
    }

    fn packs_bytes(&self) -> bool {
        true
    }

    /// `v_perm_b32`: its selector's byte `i` names byte `i`'s source in
    /// `src0:src1`, `src1` the low word (0x0c and up would give constants;
    /// only 0..8 is asked for).
    fn byte_select<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        hi: IntValue<'ctx>,
        lo: IntValue<'ctx>,
        sel: [u8; 4],
    ) -> R<IntValue<'ctx>> {
        let code = sel
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, &s)| acc | ((s as u64) << (8 * i)));
        let i32t = emit.cx.i32_type();
        let v = super::call_named(
            emit,
            "llvm.amdgcn.perm",
            i32t.into(),
            &[hi.into(), lo.into(), i32t.const_int(code, false).into()],
        )?;
        Ok(v.into_int_value())
    }

    /// A raw buffer load (`buffer_load_dwordx4` and narrower) through a
    /// resource of `size` bytes at `base`: the hardware returns zeros for
    /// what lies past `size`. Unaligned `base` and `offset` are allowed:
    /// HSA runs gfx9 and later in unaligned access mode.
    fn range_checked_load<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        base: inkwell::values::PointerValue<'ctx>,
        size: IntValue<'ctx>,
        offset: IntValue<'ctx>,
        bytes: u32,
    ) -> R<BasicValueEnum<'ctx>> {
        let Some(format) = buffer_format(&self.t.id.processor) else {
            return Err(CodegenError::Llvm(format!(
                "no buffer resource format for {} (a rocmc bug)",
                self.t.id.processor
            )));
        };
        let cx = emit.cx;
        let rsrc_ty = cx.ptr_type(AddressSpace::from(8u16));
        let size = emit
            .b
            .build_int_z_extend(size, cx.i64_type(), "")
            .map_err(llvm_err)?;
        let rsrc = emit.call(
            "llvm.amdgcn.make.buffer.rsrc",
            &[rsrc_ty.into(), base.get_type().into()],
            &[
                base.into(),
                cx.i16_type().const_zero().into(),
                size.into(),
                emit.i32(i64::from(format)).into(),
            ],
        )?;
        let i32t = cx.i32_type();
        let ty: inkwell::types::BasicTypeEnum = match bytes {
            16 => i32t.vec_type(4).into(),
            8 => i32t.vec_type(2).into(),
            4 => i32t.into(),
            2 => cx.i16_type().into(),
            1 => cx.i8_type().into(),
            _ => {
                return Err(CodegenError::Llvm(format!(
                    "a {bytes}-byte buffer load (a rocmc bug)"
                )))
            }
        };
        emit.call(
            "llvm.amdgcn.raw.ptr.buffer.load",
            &[ty],
            &[
                rsrc.into(),
                offset.into(),
                emit.i32(0).into(),
                emit.i32(0).into(),
            ],
        )
    }

    // As HIP's atomicAdd: visible to the whole device, not the host.
    fn atomic_scope(&self) -> &'static str {
        "agent"
    }

    fn atomic_scope_shared(&self) -> &'static str {
        "workgroup"
    }

    /// Tensors live in device memory (hipMalloc, coarse-grained), where
    /// the float atomics have native instructions; LLVM emits a
    /// compare-and-swap loop unless told so, as clang's
    /// -munsafe-fp-atomics does (gfx90a's f32 add flushes denormals:
    /// documented for scatters).
    fn tune_atomic<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        inst: inkwell::values::InstructionValue<'ctx>,
    ) -> R<()> {
        let empty = emit.cx.metadata_node(&[]);
        for kind in [
            "amdgpu.no.fine.grained.memory",
            "amdgpu.no.remote.memory",
            "amdgpu.ignore.denormal.mode",
        ] {
            inst.set_metadata(empty, emit.cx.get_kind_id(kind))
                .map_err(crate::emit::llvm_err)?;
        }
        Ok(())
    }

    fn triple(&self) -> String {
        TRIPLE.into()
    }

    fn target_machine(&self) -> R<TargetMachine> {
        target_machine(self.t)
    }

    fn configure_module<'ctx>(&self, cx: &'ctx Context, m: &Module<'ctx>) {
        m.add_basic_value_flag(
            "amdhsa_code_object_version",
            FlagBehavior::Error,
            cx.i32_type()
                .const_int(self.t.code_object_version as u64 * 100, false),
        );
    }

    fn declare_kernel<'ctx>(
        &self,
        cx: &'ctx Context,
        m: &Module<'ctx>,
        b: &Builder<'ctx>,
        k: &Kernel,
        g: &GpuKernel,
    ) -> R<KernelAbi<'ctx>> {
        let abi = declare_gpu_kernel(cx, m, b, (k, g), GLOBAL, 1, false)?;
        let f = abi.f;
        f.set_call_conventions(AMDGPU_KERNEL_CC);
        let s = |k: &str, v: &str| cx.create_string_attribute(k, v);
        let threads = g.threads();
        f.add_attribute(
            AttributeLoc::Function,
            s(
                "amdgpu-flat-work-group-size",
                &format!("{threads},{threads}"),
            ),
        );
        f.add_attribute(AttributeLoc::Function, s("uniform-work-group-size", "true"));
        if let Some(blocks) = g.min_blocks {
            // A SIMD (LLVM's "EU") must hold its share of the blocks' waves:
            // a GCN/CDNA CU has four, an RDNA CU two.
            let gcn = ["gfx6", "gfx7", "gfx8", "gfx9"]
                .iter()
                .any(|g| self.t.id.processor.starts_with(g));
            let simds = if gcn { 4 } else { 2 };
            let waves = threads.div_ceil(self.t.wavefront_size()) * blocks;
            f.add_attribute(
                AttributeLoc::Function,
                s("amdgpu-waves-per-eu", &waves.div_ceil(simds).to_string()),
            );
        }
        Ok(abi)
    }

    fn axis_index<'ctx>(&self, emit: &Emit<'_, 'ctx>, axis: GpuAxis) -> R<IntValue<'ctx>> {
        let (name, d) = match axis {
            GpuAxis::Block(d) => ("llvm.amdgcn.workgroup.id", d),
            GpuAxis::Thread(d) => ("llvm.amdgcn.workitem.id", d),
        };
        let full = format!("{name}.{}", ["x", "y", "z"][d.index()]);
        Ok(emit.call(&full, &[], &[])?.into_int_value())
    }

    /// `ds_bpermute_b32`: each lane pulls from the lane whose byte address
    /// it gives, here its own index with the mask's bits flipped.
    fn lane_xor<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        v: inkwell::values::FloatValue<'ctx>,
        lane: IntValue<'ctx>,
        mask: u32,
        _width: u32,
    ) -> R<inkwell::values::FloatValue<'ctx>> {
        let b = emit.b;
        let i32t = emit.cx.i32_type();
        let from = b
            .build_xor(lane, emit.i32(i64::from(mask)), "")
            .map_err(llvm_err)?;
        let addr = b
            .build_left_shift(from, emit.i32(2), "")
            .map_err(llvm_err)?;
        let bits = b.build_bit_cast(v, i32t, "").map_err(llvm_err)?;
        let got = emit.call("llvm.amdgcn.ds.bpermute", &[], &[addr.into(), bits.into()])?;
        Ok(b.build_bit_cast(got, v.get_type(), "")
            .map_err(llvm_err)?
            .into_float_value())
    }

    /// Whether some active lane fails `cond`, the same answer on each: the
    /// ballot of `cond` is a subset of the active lanes' (`ballot(true)`,
    /// the exec mask), proper, so smaller, exactly when a lane fails. An
    /// unsigned less-than rather than `ne`: InstCombine turns a branch on
    /// `ne` (or on a `not`) into one on `eq` with its sides swapped, which
    /// would undo [`FnCx::versions`]'s order.
    fn wave_some_fail<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        cond: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let mask = if self.t.wavefront_size() == 32 {
            emit.cx.i32_type()
        } else {
            emit.cx.i64_type()
        };
        let ballot = |c: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            Ok(emit
                .call("llvm.amdgcn.ballot", &[mask.into()], &[c.into()])?
                .into_int_value())
        };
        let ok = ballot(cond)?;
        let active = ballot(emit.cx.bool_type().const_all_ones())?;
        emit.b
            .build_int_compare(inkwell::IntPredicate::ULT, ok, active, "")
            .map_err(llvm_err)
    }

    /// A lane-divergent branch runs both sides one after the other under
    /// exec masks, and the first side's loads into the registers the
    /// second side writes make every wait before the second side wait for
    /// all loads in flight: a layernorm row's three vector loads of X,
    /// gamma and beta each waited for the one before (bench/amd, gfx1100).
    fn versions_by_wave(&self) -> bool {
        true
    }

    /// Release fence, `s_barrier`, acquire fence, at work-group scope.
    fn barrier(&self, emit: &Emit<'_, '_>) -> R<()> {
        workgroup_fence(emit, ORDERING_RELEASE);
        emit.call_void("llvm.amdgcn.s.barrier")?;
        workgroup_fence(emit, ORDERING_ACQUIRE);
        Ok(())
    }

    /// MFMA takes its immediates
    /// ([`MatrixInstr::mfma_immediates`](rocmc_target::matrix::MatrixInstr::mfma_immediates)); WMMA
    /// on integers takes each input's signedness and a clamp flag.
    fn matrix<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        instr: &rocmc_target::matrix::MatrixInstr,
        a: Vec<BasicValueEnum<'ctx>>,
        b: Vec<BasicValueEnum<'ctx>>,
        c: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        use rocmc_target::matrix::{Family, MType};
        let ret = crate::emit::llvm_type(emit.cx, instr.llvm_c.0)?;
        let bit = |v: bool| emit.cx.bool_type().const_int(v as u64, false).into();
        let args: Vec<BasicValueEnum> = match instr.family {
            Family::Mfma => {
                let imm = instr.mfma_immediates().into_iter();
                [
                    a,
                    b,
                    c,
                    imm.map(|v| emit.i32(i64::from(v)).into()).collect(),
                ]
                .concat()
            }
            Family::WmmaGfx11 | Family::WmmaGfx12 if instr.a == MType::I8 => {
                [vec![bit(true)], a, vec![bit(true)], b, c, vec![bit(false)]].concat()
            }
            Family::WmmaGfx11 | Family::WmmaGfx12 => [a, b, c].concat(),
            Family::MmaSync | Family::Wgmma | Family::WgmmaRegA => {
                return Err(crate::CodegenError::Llvm(format!(
                    "{} is an NVIDIA instruction (a rocmc bug)",
                    instr.name
                )))
            }
        };
        Ok(vec![super::call_named(emit, instr.intrinsic, ret, &args)?])
    }

    /// `v_fma_f16` rounds once; bf16 has no fma before gfx950 and LLVM goes through f32.
    fn fma_rounds_once(&self, t: DType) -> bool {
        t != DType::BF16
    }

    /// LLVM expands AMDGPU's f32 exp/log around `v_exp_f32`/`v_log_f32` to about 1 ulp.
    fn native_f32_math(&self, _f: MathFn) -> bool {
        true
    }

    /// The bare `v_exp_f32` (1 ulp), without the denormal scaling
    /// `llvm.exp2` wraps around it.
    fn exp2_approx_f32(&self) -> &'static str {
        "llvm.amdgcn.exp2"
    }

    /// `v_rcp_f32` (1 ulp), where the IEEE division is `v_div_scale`,
    /// `v_div_fmas` and `v_div_fixup` around it.
    fn rcp_approx_f32<'ctx>(
        &self,
        emit: &Emit<'_, 'ctx>,
        x: inkwell::values::FloatValue<'ctx>,
    ) -> R<Option<inkwell::values::FloatValue<'ctx>>> {
        let r = emit.call("llvm.amdgcn.rcp", &[x.get_type().into()], &[x.into()])?;
        Ok(Some(r.into_float_value()))
    }
}
