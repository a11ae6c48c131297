//! The host CPU as an ahead-of-time target: `--mcpu x86-64` (or `host`)
//! writes an ELF shared object that rocmc's CPU runtime loads.
//!
//! The code is for x86-64-v3 (Haswell, Zen 1 and later: AVX2, FMA, F16C),
//! so that it runs on any server of the last decade while f16 conversions
//! and fused multiply-adds are instructions rather than library calls.

use std::fmt;

/// Names `--mcpu` accepts for the CPU target.
pub const NAMES: [&str; 4] = ["x86-64", "x86_64", "host", "cpu"];

/// The LLVM processor and features the code is compiled for.
pub const LLVM_CPU: &str = "x86-64-v3";

/// What the CPU runtime gives a work-group's shared arrays: they live on
/// the stack of the thread that runs it (rocmc's CPU runtime gives its
/// threads 256 MiB of stack). As much as any GPU target has, so that the
/// CPU can run (`--emulate`) every GPU schedule.
pub const SHARED_PER_BLOCK: u32 = 256 * 1024;

/// Threads of one work-group; they run in lockstep in one OS thread.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;

/// The CPU target (one today: x86-64 Linux).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CpuTarget {
    /// `x86-64`.
    pub arch: String,
}

impl CpuTarget {
    /// `Some` for the names of [`NAMES`].
    pub fn parse(s: &str) -> Option<CpuTarget> {
        NAMES.contains(&s).then(|| CpuTarget {
            arch: "x86-64".into(),
        })
    }

    /// The target triple of the shared objects.
    pub fn triple(&self) -> &'static str {
        "x86_64-unknown-linux-gnu"
    }

    /// Whether code for this target runs on the machine rocmc runs on.
    pub fn runs_here(&self) -> bool {
        cfg!(all(target_arch = "x86_64", target_os = "linux"))
    }
}

impl fmt::Display for CpuTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.arch)
    }
}
