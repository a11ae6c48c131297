//! lld, in this process.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Mutex;

extern "C" {
    fn rocmc_lld_link(
        argv: *const *const c_char,
        argc: c_int,
        diag: *mut *mut c_char,
        can_run_again: *mut c_int,
    ) -> c_int;
    fn rocmc_lld_free(p: *mut c_char);
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("lld failed (exit code {code}):\n{diagnostics}")]
    Failed { code: i32, diagnostics: String },
    #[error("lld cannot be used again in this process after an earlier crash; restart rocmc")]
    Poisoned,
    #[error("linker I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// lld keeps global state and is not re-entrant: one link at a time. The
/// bool records that lld asked not to be called again.
static LLD: Mutex<bool> = Mutex::new(false);

/// Runs `ld.lld` with `args` (not including argv[0]).
pub fn run_lld(args: &[&str]) -> Result<String, LinkError> {
    let mut poisoned = LLD.lock().unwrap_or_else(|e| e.into_inner());
    if *poisoned {
        return Err(LinkError::Poisoned);
    }
    let owned: Vec<CString> = std::iter::once("ld.lld")
        .chain(args.iter().copied())
        .map(|a| {
            CString::new(a).map_err(|_| LinkError::Failed {
                code: -1,
                diagnostics: format!("argument with a NUL byte: {a:?}"),
            })
        })
        .collect::<Result<_, _>>()?;
    let argv: Vec<*const c_char> = owned.iter().map(|a| a.as_ptr()).collect();
    let mut diag: *mut c_char = std::ptr::null_mut();
    let mut again: c_int = 1;
    // SAFETY: argv points at live CStrings for the call; the shim writes diag and again.
    let code = unsafe { rocmc_lld_link(argv.as_ptr(), argv.len() as c_int, &mut diag, &mut again) };
    let text = if diag.is_null() {
        String::new()
    } else {
        // SAFETY: diag is a NUL-terminated buffer from the shim, freed right after copying.
        let s = unsafe { CStr::from_ptr(diag) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: diag came from the shim's malloc and is freed once.
        unsafe { rocmc_lld_free(diag) };
        s
    };
    if again == 0 {
        *poisoned = true;
    }
    if code != 0 {
        return Err(LinkError::Failed {
            code,
            diagnostics: text,
        });
    }
    Ok(text)
}

/// Links one AMDGPU relocatable object into a code object (an ELF shared
/// object) and returns its bytes. Files live in a private temporary folder
/// because lld reads and writes paths.
pub fn link_code_object(object: &[u8]) -> Result<Vec<u8>, LinkError> {
    let dir = tempfile::Builder::new().prefix("rocmc-link").tempdir()?;
    let input = dir.path().join("kernel.o");
    let output = dir.path().join("kernel.hsaco");
    std::fs::write(&input, object)?;
    let (i, o) = (input.to_string_lossy(), output.to_string_lossy());
    run_lld(&["-shared", "--threads=1", "--no-undefined", "-o", &o, &i])?;
    Ok(std::fs::read(&output)?)
}

/// Links one x86-64 relocatable object (a `--mcpu x86-64` build) into an
/// ELF shared object that rocmc's CPU runtime loads. The only symbols it
/// may leave undefined are libm's, which every process that can run Rust
/// (the runtime) has loaded.
pub fn link_shared_object(object: &[u8]) -> Result<Vec<u8>, LinkError> {
    let dir = tempfile::Builder::new().prefix("rocmc-link").tempdir()?;
    let input = dir.path().join("kernel.o");
    let output = dir.path().join("kernel.so");
    std::fs::write(&input, object)?;
    let (i, o) = (input.to_string_lossy(), output.to_string_lossy());
    run_lld(&[
        "-shared",
        "--threads=1",
        "--hash-style=gnu",
        "-z",
        "noexecstack",
        "-z",
        "now",
        "--build-id=none",
        "-o",
        &o,
        &i,
    ])?;
    Ok(std::fs::read(&output)?)
}
