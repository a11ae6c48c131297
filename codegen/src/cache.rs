//! A content-addressed cache of LLVM's work, as ccache is for a C
//! compiler: where `ROCMC_CACHE_DIR` names a folder, each compilation's
//! optimisation and code generation ([`crate::llvm::compile`]) is stored
//! there under a SHA-256 of everything that decides its output, and an
//! equal compilation later reads it instead of running LLVM again.
//!
//! The key is the verified module before optimisation (printed: the loop
//! IR's whole effect on LLVM), the target machine (triple, processor,
//! features), the pass pipeline, what was asked for, the LLVM version and
//! a digest of this crate's own source (which holds the code that runs
//! after the key is taken: the pipeline, `after_optimise`, the emissions).
//! So a change to lowering or scheduling reaches LLVM only where it
//! changes a module, and any change to code generation starts afresh.
//! Only successful compilations are stored; an unreadable or truncated
//! entry counts as absent. Nothing is ever evicted: delete the folder.

use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The first line of every entry; a format change bumps it.
const MAGIC: &[u8] = b"rocmc-llvm-cache 1\n";

/// What an entry holds: a compilation's emissions (`llvm::Emitted`
/// without its timings).
pub(crate) struct Outputs {
    pub llvm_ir: String,
    pub asm: Option<String>,
    pub object: Option<Vec<u8>>,
}

/// An entry's name: the SHA-256 of its key's parts, in hex.
pub(crate) struct Key(String);

/// The cache folder, where one is configured.
fn folder() -> Option<PathBuf> {
    std::env::var_os("ROCMC_CACHE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// The key of compiling `module` with `tm` (its triple, processor and
/// features) and what else decides the output (`how`: the pipeline, the
/// request), or `None` where no cache is configured (then the module is
/// not even printed).
pub(crate) fn key(
    module: &inkwell::module::Module,
    tm: &inkwell::targets::TargetMachine,
    how: &[&str],
) -> Option<Key> {
    folder()?;
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(MAGIC);
    part(env!("ROCMC_CODEGEN_SOURCE").as_bytes());
    part(env!("ROCMC_LLVM_VERSION").as_bytes());
    part(tm.get_triple().as_str().to_bytes());
    part(tm.get_cpu().to_bytes());
    part(tm.get_feature_string().to_bytes());
    for m in how {
        part(m.as_bytes());
    }
    part(module.print_to_string().to_bytes());
    Some(Key(format!("{:x}", h.finalize())))
}

fn path(key: &Key) -> Option<PathBuf> {
    Some(folder()?.join(&key.0[..2]).join(&key.0))
}

/// The stored outputs of `key`, if any.
pub(crate) fn load(key: &Key) -> Option<Outputs> {
    let bytes = std::fs::read(path(key)?).ok()?;
    let mut rest = bytes.strip_prefix(MAGIC)?;
    let mut field = || -> Option<Option<Vec<u8>>> {
        let (&present, after) = rest.split_first()?;
        let len = u64::from_le_bytes(after.get(..8)?.try_into().ok()?) as usize;
        let data = after.get(8..8 + len)?;
        rest = &after[8 + len..];
        Some((present == 1).then(|| data.to_vec()))
    };
    let llvm_ir = String::from_utf8(field()?.unwrap_or_default()).ok()?;
    let asm = match field()? {
        Some(a) => Some(String::from_utf8(a).ok()?),
        None => None,
    };
    let object = field()?;
    Some(Outputs {
        llvm_ir,
        asm,
        object,
    })
}

/// Stores a compilation's emissions under `key`; a failure to write only costs the next
/// compilation its hit.
pub(crate) fn store(key: &Key, llvm_ir: &str, asm: Option<&str>, object: Option<&[u8]>) {
    let Some(file) = path(key) else { return };
    let mut bytes = MAGIC.to_vec();
    let mut field = |data: Option<&[u8]>| {
        bytes.push(data.is_some() as u8);
        let data = data.unwrap_or_default();
        bytes.extend((data.len() as u64).to_le_bytes());
        bytes.extend(data);
    };
    field(Some(llvm_ir.as_bytes()));
    field(asm.map(str::as_bytes));
    field(object);
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    // Written aside and renamed: a reader sees a whole entry or none, even
    // with several compilers writing the same one at once.
    static WRITER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{}.{}-{n}.tmp", key.0, std::process::id()));
    if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, &file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
