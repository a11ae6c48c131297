//! Keeps a session process away from the worker and other sessions. A
//! session runs its client's code (a CPU module's initialisers and kernels,
//! a GPU driver's loader), as the worker's user. Before it reads its first
//! request it confines itself with Landlock (Linux 5.13 on, unprivileged):
//!
//! - every file and folder of the machine stays readable (and executable),
//!   except the worker's state folder (its TLS key, certificate, secret
//!   and module cache), which is out of reach altogether;
//! - nothing can be written, created, renamed or removed anywhere but in
//!   the session's own scratch folder and on device files (a GPU's
//!   `/dev/kfd`, `/dev/dri/*`, `/dev/nvidia*`, and `/dev/null`) and the
//!   session's own threads under `/proc/self/task`: not the worker's
//!   binary or its folder, not the user's home, not `/tmp`;
//! - processes outside the session's own Landlock domain (the worker,
//!   every other session) cannot be traced, so their memory, environment
//!   and open files under `/proc` are out of reach, and (Linux 6.12 on)
//!   cannot be signalled.
//!
//! Landlock only allows, so "everything but the state folder" is spelt as
//! rules for every entry beside the folder and beside each of its
//! ancestors, taken when the session starts. Entries made later in those
//! ancestor folders are out of reach too; the session's temporary files go
//! to a folder of its own (`TMPDIR`), made before the rules and allowed.

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::path::{Path, PathBuf};

/// The newest Landlock ABI these rules were written and tested against.
const ABI_USED: ABI = ABI::V6;

/// How far a session is confined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Every rule holds.
    Full,
    /// The state folder is out of reach, but the kernel lacks some of the
    /// rest (signal scoping needs Linux 6.12).
    Partial,
    /// The kernel has no Landlock (or it is disabled): sessions can read
    /// the worker's identity.
    None,
}

/// The Landlock ABI of the running kernel, 0 without Landlock.
pub fn kernel_abi() -> i64 {
    // SAFETY: the documented version query: null attributes, size 0, the
    // VERSION flag; it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    v.max(0)
}

/// What a session on this kernel gets, for the worker to say at start.
pub fn expected() -> Confinement {
    match kernel_abi() {
        0 => Confinement::None,
        v if v >= ABI_USED as i64 => Confinement::Full,
        _ => Confinement::Partial,
    }
}

/// Confines this process (a session, before it serves anything and while
/// it has one thread): `state` out of reach, writes only to `scratch` (its
/// temporary folder) and device files.
pub fn confine(state: &Path, scratch: &Path) -> Result<Confinement, String> {
    let state = state
        .canonicalize()
        .map_err(|e| format!("the state folder {}: {e}", state.display()))?;
    let mut readable: Vec<PathBuf> = vec![];
    beside(Path::new("/"), &state, &mut readable);
    let mut writable = vec![scratch.canonicalize().unwrap_or(scratch.to_path_buf())];
    devices(Path::new("/dev"), 0, &mut writable);
    // This process's own threads (their names, `comm`): the CUDA driver
    // writes there and fails to initialise without it (error 304, found
    // with scripts/cuda-sandbox-probe.py on the H200).
    writable.push(PathBuf::from("/proc/self/task"));
    let read = AccessFs::from_read(ABI_USED);
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_USED))
        .and_then(|r| r.scope(Scope::from_all(ABI_USED)))
        .and_then(|r| r.create())
        .map_err(|e| format!("Landlock: {e}"))?;
    let mut created = created;
    let rules = readable.into_iter().map(|p| (p, read)).chain(
        writable
            .into_iter()
            .map(|p| (p, AccessFs::from_all(ABI_USED))),
    );
    for (p, access) in rules {
        // A path gone since it was listed, or one this user may not open
        // anyway, needs no rule.
        let Ok(fd) = PathFd::new(&p) else { continue };
        // A file takes only the rights a file can have.
        let access = if p.is_dir() {
            access
        } else {
            access & AccessFs::from_file(ABI_USED)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock rule for {}: {e}", p.display()))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| format!("Landlock: {e}"))?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Confinement::Full,
        RulesetStatus::PartiallyEnforced => Confinement::Partial,
        RulesetStatus::NotEnforced => Confinement::None,
    })
}

/// Adds to `out` every entry of `dir` but `hidden` and the folders on the
/// way to it, into which it recurses. Symbolic links get no rule: a path
/// through one is checked where it leads, so a link into `hidden` leads
/// nowhere and a link elsewhere needs none.
fn beside(dir: &Path, hidden: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p == hidden {
            continue;
        }
        if hidden.starts_with(&p) {
            beside(&p, hidden, out);
        } else if !e.file_type().is_ok_and(|t| t.is_symlink()) {
            out.push(p);
        }
    }
}

/// Adds to `out` every device file (character or block) under `dir`, a few
/// folders deep (`/dev/dri/by-path/…`): what a GPU runtime opens for
/// writing and controls by ioctl. Folders such as `/dev/shm` stay read-only.
fn devices(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_char_device() || t.is_block_device() {
            out.push(e.path());
        } else if t.is_dir() && depth < 3 {
            devices(&e.path(), depth + 1, out);
        }
    }
}
