//! The compilation driver: loop IR → LLVM module (through the target's
//! [`Backend`]), `default<O3>`, and the emissions asked for. LLVM's
//! diagnostics and fatal errors are caught here.

use crate::function::{llvm_err, FnCx};
use crate::{CodegenError, Target};
use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetTriple};
use rocmc_ir::{Kernel, Program};

/// What to produce besides the optimised LLVM IR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The optimised module as text ([`Emitted::llvm_ir`]).
    pub llvm_ir: bool,
    pub asm: bool,
    pub object: bool,
    /// Forbid fusing `a * b + c` into one fused multiply-add. By default
    /// contraction is allowed, as clang's HIP default (`-ffp-contract=fast`)
    /// does; the results then differ from the reference interpreter's
    /// separately rounded operations by rounding error.
    pub no_fp_contract: bool,
}

/// The outputs of one compilation for one target.
#[derive(Clone, Debug, Default)]
pub struct Emitted {
    /// Optimised LLVM IR, as text (empty unless [`Request::llvm_ir`]).
    pub llvm_ir: String,
    pub asm: Option<String>,
    /// ELF relocatable object (input to the linker).
    pub object: Option<Vec<u8>>,
    /// Wall time of building the LLVM module, optimising it, and code generation.
    pub timings: Vec<(&'static str, std::time::Duration)>,
}

/// Installs rocmc's handler for LLVM's fatal errors, once per process.
pub(crate) fn install_fatal_error_handler() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    // SAFETY: installs a plain function; LLVM calls it with a NUL-terminated reason.
    INSTALL.call_once(|| unsafe { LLVMInstallFatalErrorHandler(Some(on_fatal_error)) });
}

extern "C" {
    fn LLVMInstallFatalErrorHandler(handler: Option<extern "C" fn(*const std::ffi::c_char)>);
}

/// The kernel file and (kernel, target) being compiled, for the message of
/// an LLVM fatal error.
static CRASH_FILE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
static CRASH_KERNEL: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Names the kernel file being compiled, for the message LLVM's fatal
/// errors print (see [`compile`]).
pub fn set_crash_context(file: &str) {
    if let Ok(mut c) = CRASH_FILE.lock() {
        *c = file.to_string();
    }
}

/// LLVM's fatal errors ("Cannot select", failed assertions of the backend)
/// cannot be recovered from: LLVM exits after this handler. It replaces
/// LLVM's abort (a signal, a core dump and a raw dump of the selection DAG)
/// with a message naming the kernel and the target, and exit code 1.
extern "C" fn on_fatal_error(reason: *const std::ffi::c_char) {
    // SAFETY: LLVM passes a valid NUL-terminated string.
    let reason = unsafe { std::ffi::CStr::from_ptr(reason) }.to_string_lossy();
    let first = reason.lines().next().unwrap_or_default();
    let file = CRASH_FILE.lock().map(|c| c.clone()).unwrap_or_default();
    let kernel = CRASH_KERNEL.lock().map(|c| c.clone()).unwrap_or_default();
    let what = format!("{file} ({kernel})");
    eprintln!(
        "error: LLVM's backend failed while compiling {what}: {first}\n  = help: this is a rocmc bug (no output was written): please report it with the kernel file"
    );
    std::process::exit(1);
}

/// Compiles a lowered program for one target. `module_asm` is appended to
/// the module as top-level assembly (rocmc's launch document: an ELF
/// section for AMDGPU, comment lines in PTX).
pub fn compile(
    k: &Kernel,
    prog: &Program,
    t: &Target,
    module_asm: &str,
    req: Request,
) -> Result<Emitted, CodegenError> {
    let t0 = std::time::Instant::now();
    let be = crate::backend::lookup(t);
    install_fatal_error_handler();
    let light = emulates_lanes(t, prog);
    let tm = if light {
        be.target_machine_unoptimised()?
    } else {
        be.target_machine()?
    };
    if let Ok(mut c) = CRASH_KERNEL.lock() {
        *c = format!("kernel `{}` for {}", k.name, t);
    }
    let diags = Diagnostics::default();
    let cx = Context::create();
    diags.capture(&cx);
    let module = cx.create_module(&k.name);
    module.set_triple(&TargetTriple::create(&be.triple()));
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    be.configure_module(&cx, &module);
    for g in be.prepare(&prog.kernels).iter() {
        let mut fcx = FnCx::new(&cx, &module, k, g, &*be)?;
        fcx.contract = !req.no_fp_contract;
        if be.lockstep() {
            fcx.host_kernel(!req.no_fp_contract)?;
        } else {
            fcx.kernel()?;
        }
        be.finish_kernel(&cx, &module, fcx.f, g)?;
    }
    if !module_asm.is_empty() {
        module.set_inline_assembly(module_asm);
    }
    be.link_helpers(&cx, &module)?;
    module.verify().map_err(|e| {
        CodegenError::Llvm(format!(
            "invalid module before optimisation (a rocmc bug): {e}"
        ))
    })?;
    let t1 = std::time::Instant::now();
    let pipeline = if light { "default<O0>" } else { "default<O3>" };
    let key = crate::cache::key(&module, &tm, &[pipeline, &format!("{req:?}")]);
    if let Some(hit) = key.as_ref().and_then(crate::cache::load) {
        if hit.object.is_some() == req.object && hit.asm.is_some() == req.asm {
            return Ok(Emitted {
                llvm_ir: hit.llvm_ir,
                asm: hit.asm,
                object: hit.object,
                timings: vec![("llvm build", t1 - t0), ("llvm (cached)", t1.elapsed())],
            });
        }
    }
    module
        .run_passes(pipeline, &tm, PassBuilderOptions::create())
        .map_err(llvm_err)?;
    be.after_optimise(&module);
    let t2 = std::time::Instant::now();
    let names: Vec<&str> = prog.kernels.iter().map(|g| g.name.as_str()).collect();
    let mut out = Emitted::default();
    if req.llvm_ir {
        out.llvm_ir = module.print_to_string().to_string();
    }
    // Codegen mutates the module (see DESIGN.md), so each emission works on
    // a clone. Always a clone, even for a single emission: LLVM's code for a
    // clone differs slightly from the original's (use-list order), and the
    // assembly shown must be the code in the object, however they are asked for.
    if req.asm {
        // Verbose assembly carries LLVM's per-kernel resource and occupancy comments.
        tm.set_asm_verbosity(true);
        let m = module.clone();
        let buf = tm
            .write_to_memory_buffer(&m, FileType::Assembly)
            .map_err(llvm_err)?;
        diags.check_each(&names, &module, &tm, FileType::Assembly)?;
        out.asm = Some(String::from_utf8_lossy(buf.as_slice()).into_owned());
    }
    if req.object && !be.emits_objects() {
        return Err(CodegenError::Llvm(format!(
            "{t} has no object files: ask for assembly instead (a rocmc bug)"
        )));
    }
    if req.object {
        tm.set_asm_verbosity(false);
        let m = module.clone();
        let buf = tm
            .write_to_memory_buffer(&m, FileType::Object)
            .map_err(llvm_err)?;
        diags.check_each(&names, &module, &tm, FileType::Object)?;
        out.object = Some(buf.as_slice().to_vec());
    }
    out.timings = vec![
        ("llvm build", t1 - t0),
        (
            if light {
                "llvm optimise (O0)"
            } else {
                "llvm optimise (O3)"
            },
            t2 - t1,
        ),
        ("llvm codegen", t2.elapsed()),
    ];
    if let Some(key) = &key {
        crate::cache::store(key, &out.llvm_ir, out.asm.as_deref(), out.object.as_deref());
    }
    Ok(out)
}

/// Whether `prog`, compiled for `t`, is a CPU module that runs a GPU's
/// matrix instructions through their lane layouts (`--emulate`). Such a
/// module gets no optimisation pipeline (`default<O0>`) and the backend's
/// quickest code generation, here and in the JIT: it exists to check what
/// the kernel means, not to be fast, and its expanded fragments kept O3
/// busy for 140 s (O1 97 s: loop rotation, full unrolling, scalar
/// evolution) on an int8 warpgroup GEMM that then runs in milliseconds.
pub(crate) fn emulates_lanes(t: &Target, prog: &Program) -> bool {
    matches!(t, Target::Cpu(_)) && !rocmc_ir::lower::matrix::uses_matrix(prog).is_empty()
}

/// Error diagnostics LLVM reports while compiling (e.g. "no libcall
/// available for fexp" from instruction selection). Without a handler LLVM
/// prints them and exits the process; with this one they are collected and
/// returned as [`CodegenError::Backend`].
#[derive(Default)]
pub(crate) struct Diagnostics {
    errors: Box<std::cell::RefCell<Vec<String>>>,
}

extern "C" {
    fn LLVMContextSetDiagnosticHandler(
        c: *mut std::ffi::c_void,
        handler: Option<extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void)>,
        ctx: *mut std::ffi::c_void,
    );
    fn LLVMGetDiagInfoDescription(di: *mut std::ffi::c_void) -> *mut std::ffi::c_char;
    fn LLVMGetDiagInfoSeverity(di: *mut std::ffi::c_void) -> std::ffi::c_int;
    fn LLVMDisposeMessage(m: *mut std::ffi::c_char);
}

extern "C" fn on_diagnostic(di: *mut std::ffi::c_void, ctx: *mut std::ffi::c_void) {
    // LLVMDSError is 0; warnings, remarks and notes are not failures.
    // SAFETY: `di` is the diagnostic LLVM passes for the duration of this call.
    if unsafe { LLVMGetDiagInfoSeverity(di) } != 0 {
        return;
    }
    // SAFETY: as above; the returned string is ours to dispose of.
    let text = unsafe {
        let p = LLVMGetDiagInfoDescription(di);
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        LLVMDisposeMessage(p);
        s
    };
    // SAFETY: `ctx` is the RefCell registered by `capture`, alive while the context is
    // (declared before it), and LLVM calls back on the compiling thread only.
    let cell = unsafe { &*(ctx as *const std::cell::RefCell<Vec<String>>) };
    cell.borrow_mut().push(text);
}

impl Diagnostics {
    /// Routes `cx`'s diagnostics here. `self` must outlive `cx`.
    pub(crate) fn capture(&self, cx: &Context) {
        let ctx = &*self.errors as *const std::cell::RefCell<Vec<String>> as *mut std::ffi::c_void;
        // SAFETY: a live context; the handler and its data stay valid while it exists.
        unsafe { LLVMContextSetDiagnosticHandler(cx.raw().cast(), Some(on_diagnostic), ctx) };
    }

    /// The errors so far, as one [`CodegenError::Backend`] about one of
    /// `kernels` (the module's kernel functions) where that can be told.
    pub(crate) fn check(&self, kernels: &[&str]) -> Result<(), CodegenError> {
        let errors = self.errors.borrow();
        if errors.is_empty() {
            return Ok(());
        }
        let message = errors.join("; ");
        let kernel = match kernels {
            [one] => Some(one.to_string()),
            // LLVM names the function in `in function NAME ...`.
            _ => kernels
                .iter()
                .find(|k| message.contains(&format!("in function {k} ")))
                .map(|k| k.to_string()),
        };
        Err(CodegenError::Backend { message, kernel })
    }

    /// [`Diagnostics::check`], and where LLVM's message names none of
    /// several kernels, the one it is about: each kernel function of
    /// `module` generated alone (the others removed) until the error
    /// recurs. Only on the error path, so its cost does not matter.
    pub(crate) fn check_each(
        &self,
        kernels: &[&str],
        module: &inkwell::module::Module,
        tm: &inkwell::targets::TargetMachine,
        ft: FileType,
    ) -> Result<(), CodegenError> {
        match self.check(kernels) {
            Err(CodegenError::Backend {
                message,
                kernel: None,
            }) => {
                let kernel = kernels
                    .iter()
                    .find(|k| {
                        let m = module.clone();
                        for other in kernels.iter().filter(|o| o != k) {
                            if let Some(f) = m.get_function(other) {
                                // SAFETY: kernels are entry points: no function of the module calls or refers to them.
                                unsafe { f.delete() };
                            }
                        }
                        self.errors.borrow_mut().clear();
                        let _ = tm.write_to_memory_buffer(&m, ft);
                        !self.errors.borrow().is_empty()
                    })
                    .map(|k| k.to_string());
                self.errors.borrow_mut().clear();
                Err(CodegenError::Backend { message, kernel })
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::amdgpu::{target_machine, AMDGPU_KERNEL_CC, TRIPLE};
    use inkwell::intrinsics::Intrinsic;
    use inkwell::AddressSpace;

    /// LLVM's own error path, unreachable through rocmc's lowering (which
    /// never emits `llvm.exp.f64` for AMDGPU): the backend's "no libcall"
    /// error becomes a value instead of ending the process.
    #[test]
    fn backend_errors_are_values() {
        let t = crate::AmdTarget::new(crate::TargetId::parse("gfx90a").unwrap(), None, 5).unwrap();
        let tm = target_machine(&t).unwrap();
        let diags = Diagnostics::default();
        let cx = Context::create();
        diags.capture(&cx);
        let m = cx.create_module("k");
        m.set_triple(&TargetTriple::create(TRIPLE));
        let f64t = cx.f64_type();
        let f = m.add_function(
            "k",
            cx.void_type().fn_type(
                &[f64t.into(), cx.ptr_type(AddressSpace::from(1u16)).into()],
                false,
            ),
            None,
        );
        f.set_call_conventions(AMDGPU_KERNEL_CC);
        let b = cx.create_builder();
        b.position_at_end(cx.append_basic_block(f, "entry"));
        let exp = Intrinsic::find("llvm.exp")
            .unwrap()
            .get_declaration(&m, &[f64t.into()])
            .unwrap();
        let x = f.get_nth_param(0).unwrap();
        let v = b
            .build_call(exp, &[x.into()], "")
            .unwrap()
            .try_as_basic_value()
            .unwrap_basic();
        b.build_store(f.get_nth_param(1).unwrap().into_pointer_value(), v)
            .unwrap();
        b.build_return(None).unwrap();
        let _ = tm.write_to_memory_buffer(&m, FileType::Object);
        match diags.check(&["k"]) {
            Err(CodegenError::Backend { message, .. }) => {
                assert!(message.contains("libcall"), "{message}")
            }
            other => panic!("expected a backend error, got {other:?}"),
        }
    }

    /// Of two kernels, the one LLVM's backend fails on is found by
    /// generating each alone, though the message names neither.
    #[test]
    fn a_backend_error_names_the_kernel_it_is_about() {
        let t = crate::AmdTarget::new(crate::TargetId::parse("gfx90a").unwrap(), None, 5).unwrap();
        let tm = target_machine(&t).unwrap();
        let diags = Diagnostics::default();
        let cx = Context::create();
        diags.capture(&cx);
        let m = cx.create_module("two");
        m.set_triple(&TargetTriple::create(TRIPLE));
        let f64t = cx.f64_type();
        let ty = cx.void_type().fn_type(
            &[f64t.into(), cx.ptr_type(AddressSpace::from(1u16)).into()],
            false,
        );
        let b = cx.create_builder();
        for (name, bad) in [("fine", false), ("broken", true), ("also_fine", false)] {
            let f = m.add_function(name, ty, None);
            f.set_call_conventions(AMDGPU_KERNEL_CC);
            b.position_at_end(cx.append_basic_block(f, "entry"));
            let x = f.get_nth_param(0).unwrap();
            let v = if bad {
                let exp = Intrinsic::find("llvm.exp")
                    .unwrap()
                    .get_declaration(&m, &[f64t.into()])
                    .unwrap();
                b.build_call(exp, &[x.into()], "")
                    .unwrap()
                    .try_as_basic_value()
                    .unwrap_basic()
            } else {
                x
            };
            b.build_store(f.get_nth_param(1).unwrap().into_pointer_value(), v)
                .unwrap();
            b.build_return(None).unwrap();
        }
        let _ = tm.write_to_memory_buffer(&m.clone(), FileType::Object);
        let names = ["fine", "broken", "also_fine"];
        match diags.check_each(&names, &m, &tm, FileType::Object) {
            Err(CodegenError::Backend { message, kernel }) => {
                assert!(message.contains("libcall"), "{message}");
                assert_eq!(kernel.as_deref(), Some("broken"), "{message}");
                assert!(!message.contains("broken"), "LLVM named it: {message}");
            }
            other => panic!("expected a backend error, got {other:?}"),
        }
    }
}
