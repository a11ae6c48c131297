//! Running lowered kernels on the host CPU through LLVM's JIT, to check
//! schedules and code generation without a GPU: the same loop IR and the
//! same expression and address code as the GPU path, compiled for the
//! host ([`crate::backend::host`]) and run in this process.

use crate::backend::host::{self, host_cpu};
pub use crate::backend::host::{HostFn, HostMath};
use crate::function::{llvm_err, FnCx, R};
use crate::CodegenError;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::TargetMachine;
use inkwell::OptimizationLevel;
use rocmc_ir::loops::ArgKind;
use rocmc_ir::{Kernel, Program};
use std::sync::Once;

extern "C" {
    // LLVM's process-wide symbol table, which check_symbols searches.
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

/// Registers [`helpers`] with LLVM's process-wide symbol search and
/// checks that every symbol `object` calls resolves: the JIT would
/// otherwise refuse to link it with a message less plain than this one.
fn check_symbols(object: &[u8]) -> R<()> {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: a null name adds the running program (and its libm) to LLVM's search list.
        unsafe { LLVMLoadLibraryPermanently(std::ptr::null()) };
        for (name, f) in helpers() {
            // SAFETY: a NUL-terminated name and the address of a function with the ABI LLVM calls it with.
            unsafe { LLVMAddSymbol(name.as_ptr(), f) };
        }
    });
    let missing = undefined_symbols(object)?
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

/// The host object of `module`: from the cache where an equal module was
/// compiled before, else optimised with `pipeline` and compiled by `tm`
/// (and stored).
fn host_object(module: &Module, tm: &TargetMachine, pipeline: &str) -> R<Vec<u8>> {
    let key = crate::cache::key(module, tm, &["host-jit", pipeline]);
    if let Some(object) = key
        .as_ref()
        .and_then(crate::cache::load)
        .and_then(|o| o.object)
    {
        return Ok(object);
    }
    module
        .run_passes(pipeline, tm, PassBuilderOptions::create())
        .map_err(llvm_err)?;
    let object = tm
        .write_to_memory_buffer(module, inkwell::targets::FileType::Object)
        .map_err(llvm_err)?
        .as_slice()
        .to_vec();
    if let Some(key) = &key {
        crate::cache::store(key, "", None, Some(&object));
    }
    Ok(object)
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
    let host = host::jit_backend(math);
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
    // A kernel that emulates a matrix unit's lanes is not optimised (see
    // llvm::emulates_lanes); the object check_symbols reads is code
    // generated as the JIT does.
    let emulates = !rocmc_ir::lower::matrix::uses_matrix(prog).is_empty();
    let level = if emulates {
        OptimizationLevel::None
    } else {
        OptimizationLevel::Default
    };
    let tm = host::host_machine_at(level)?;
    let cx = Context::create();
    let module = cx.create_module(&format!("{}_host", k.name));
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    // The CPU runs a wave's matrix instruction through its lane layout.
    let prog = &Program {
        kernels: prog
            .kernels
            .iter()
            .map(|g| {
                rocmc_ir::lower::matrix::expand(
                    g.clone(),
                    rocmc_ir::lower::matrix::Exchange::Barriers,
                )
            })
            .collect(),
    };
    for g in &prog.kernels {
        let mut f = FnCx::new(&cx, &module, k, g, &host)?;
        f.host_kernel(fp_contract)?;
    }
    // The functions' attributes name this processor too, as its target
    // machine does (see host_machine).
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
    // A kernel whose matrix instructions run through their lane layouts is
    // not optimised: it is here to check meaning, and O2 spent minutes on
    // a warpgroup GEMM's expanded fragments (see llvm::emulates_lanes).
    let pipeline = if emulates {
        "default<O0>"
    } else {
        "default<O2>"
    };
    let object = host_object(&module, &tm, pipeline)?;
    check_symbols(&object)?;
    let jit = crate::orc::Loaded::new(&object, &helpers()).map_err(CodegenError::Llvm)?;
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
        let addr = jit.lookup(&g.name).map_err(CodegenError::Llvm)?;
        // SAFETY: the object's function `g.name` was generated with exactly the HostFn
        // signature, and `jit` keeps its code alive until after the call.
        let f: HostFn = unsafe { std::mem::transmute::<usize, HostFn>(addr as usize) };
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
        unsafe { f(table.as_ptr(), sizes.as_ptr(), params.as_ptr(), 0, i64::MAX) };
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
