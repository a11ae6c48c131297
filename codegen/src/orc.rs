//! Loading a compiled host object into this process with LLVM's ORC JIT
//! (LLJIT): the CPU path compiles its kernels once, to an ELF object
//! (which the cache can hand back on a rerun, see [`crate::cache`]), and
//! links that object here against rocmc's runtime helpers and the
//! process's own libraries (libm). MCJIT, used before, could only take a
//! module, so every run generated machine code twice (once for the
//! object the symbol check reads, once inside MCJIT) and never reused it.
//!
//! Every call into ORC's C API is in this file.

use inkwell::llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy;
use inkwell::llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use inkwell::llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup,
    LLVMOrcLLJITMangleAndIntern, LLVMOrcLLJITRef,
};
use inkwell::llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCSymbolMapPair, LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess,
    LLVMOrcDisposeMaterializationUnit, LLVMOrcJITDylibAddGenerator, LLVMOrcJITDylibDefine,
};
use std::ffi::{c_void, CStr, CString};

/// An object linked into this process; its code lives until this drops.
pub(crate) struct Loaded {
    jit: LLVMOrcLLJITRef,
}

/// The message of an LLVM error, consuming it; `Ok` for none.
fn check(err: LLVMErrorRef, what: &str) -> Result<(), String> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null error from an ORC call; taking its message consumes it.
    let msg = unsafe { LLVMGetErrorMessage(err) };
    // SAFETY: LLVM returned a NUL-terminated string, freed right after the copy.
    let text = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: the message came from LLVMGetErrorMessage and is freed once.
    unsafe { LLVMDisposeErrorMessage(msg) };
    Err(format!("{what}: {text}"))
}

impl Loaded {
    /// Links `object` (an ELF relocatable object for this machine) with
    /// `helpers` (symbol name, address) and the process's libraries.
    pub(crate) fn new(object: &[u8], helpers: &[(&CStr, *mut c_void)]) -> Result<Loaded, String> {
        let mut jit: LLVMOrcLLJITRef = std::ptr::null_mut();
        // SAFETY: a null builder asks for the default LLJIT; `jit` receives it.
        check(
            unsafe { LLVMOrcCreateLLJIT(&mut jit, std::ptr::null_mut()) },
            "creating the host JIT",
        )?;
        let loaded = Loaded { jit };
        // SAFETY: `jit` is live; its main dylib is owned by it.
        let jd = unsafe { LLVMOrcLLJITGetMainJITDylib(jit) };
        let mut pairs: Vec<LLVMOrcCSymbolMapPair> = helpers
            .iter()
            .map(|(name, addr)| LLVMOrcCSymbolMapPair {
                // SAFETY: a NUL-terminated name; the pool entry goes to the map below.
                Name: unsafe { LLVMOrcLLJITMangleAndIntern(jit, name.as_ptr()) },
                Sym: LLVMJITEvaluatedSymbol {
                    Address: *addr as u64,
                    Flags: LLVMJITSymbolFlags {
                        GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported
                            as u8
                            | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
                        TargetFlags: 0,
                    },
                },
            })
            .collect();
        // SAFETY: `pairs` is a valid array; the unit takes the names' references.
        let mu = unsafe { LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len()) };
        // SAFETY: `jd` and `mu` are live; on success the dylib owns `mu`.
        let defined = check(
            unsafe { LLVMOrcJITDylibDefine(jd, mu) },
            "defining rocmc's helpers",
        );
        if defined.is_err() {
            // SAFETY: a failed define leaves `mu` with the caller.
            unsafe { LLVMOrcDisposeMaterializationUnit(mu) };
        }
        defined?;
        let mut gen = std::ptr::null_mut();
        // SAFETY: `gen` receives a generator resolving names with dlsym in this process.
        check(
            unsafe {
                LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                    &mut gen,
                    LLVMOrcLLJITGetGlobalPrefix(jit),
                    None,
                    std::ptr::null_mut(),
                )
            },
            "searching this process's libraries",
        )?;
        // SAFETY: the dylib takes ownership of the generator.
        unsafe { LLVMOrcJITDylibAddGenerator(jd, gen) };
        // SAFETY: LLVM copies the bytes; the name is NUL-terminated.
        let buf = unsafe {
            LLVMCreateMemoryBufferWithMemoryRangeCopy(
                object.as_ptr().cast(),
                object.len(),
                c"rocmc-host-object".as_ptr(),
            )
        };
        // SAFETY: `jit`, `jd` and `buf` are live; the call takes `buf` whatever it returns.
        check(
            unsafe { LLVMOrcLLJITAddObjectFile(jit, jd, buf) },
            "adding the host object",
        )?;
        Ok(loaded)
    }

    /// The address of function `name`, linking the object on first use.
    pub(crate) fn lookup(&self, name: &str) -> Result<u64, String> {
        let c = CString::new(name).map_err(|_| format!("`{name}` holds a NUL byte"))?;
        let mut addr = 0u64;
        // SAFETY: `self.jit` is live; `addr` receives the address.
        check(
            unsafe { LLVMOrcLLJITLookup(self.jit, &mut addr, c.as_ptr()) },
            &format!("linking `{name}`"),
        )?;
        Ok(addr)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the JIT was created by `new` and is disposed once; its code is not used after.
        let err = unsafe { LLVMOrcDisposeLLJIT(self.jit) };
        let _ = check(err, "disposing the host JIT");
    }
}
