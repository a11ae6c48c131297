//! rocmc's target model: everything rocmc knows about a GPU target, in pure
//! Rust, so the compiler, the linker and the runtimes (which link no LLVM)
//! share one definition.
//!
//! A [`Target`] is parsed once, at the CLI or library boundary, from a
//! target ID (`gfx942:sramecc+:xnack-`, or a product name such as `mi300x`)
//! and the wave size and code-object version options; every later phase
//! takes the typed value. The processor table is LLVM 22's
//! ([`amdgpu::PROCESSORS`]); a test in rocmc-codegen-amdgpu checks it against
//! the LLVM that rocmc links.

pub mod amdgpu;
pub mod hardware;

pub use amdgpu::{
    FeatureMode, ProcessorInfo, Target, TargetError, TargetId, CODE_OBJECT_VERSIONS,
    DEFAULT_CODE_OBJECT_VERSION,
};

/// Who makes the GPU a target is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    Amd,
}

/// Threads in one work-group, at most, on every AMD GPU.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;

impl Target {
    pub fn vendor(&self) -> Vendor {
        Vendor::Amd
    }

    /// The hardware facts of the target's processor.
    pub fn hardware(&self) -> hardware::Hardware {
        hardware::hardware(&self.id.processor)
    }

    /// LDS (shared memory) one work-group may use, in bytes.
    pub fn lds_limit(&self) -> u32 {
        self.hardware().lds_per_workgroup
    }

    /// Threads one work-group may have.
    pub fn max_threads_per_block(&self) -> u32 {
        MAX_THREADS_PER_BLOCK
    }
}

impl TargetId {
    /// A device's target ID as a runtime reports it (HIP's `gcnArchName`):
    /// never an error. A processor newer than the table is kept as written;
    /// features other than xnack and sramecc, and malformed ones, are ignored.
    pub fn parse_lenient(s: &str) -> TargetId {
        let mut it = s.split(':');
        let written = it.next().unwrap_or_default();
        let processor = amdgpu::canonical_processor(written).unwrap_or_else(|| written.to_string());
        let mut id = TargetId {
            processor,
            sramecc: FeatureMode::Any,
            xnack: FeatureMode::Any,
        };
        for f in it {
            let (name, mode) = match (f.strip_suffix('+'), f.strip_suffix('-')) {
                (Some(n), _) => (n, FeatureMode::On),
                (_, Some(n)) => (n, FeatureMode::Off),
                _ => continue,
            };
            match name {
                "xnack" => id.xnack = mode,
                "sramecc" => id.sramecc = mode,
                _ => {}
            }
        }
        id
    }

    /// Whether code built for `self` runs on a device reporting `device`:
    /// the same processor, and each feature the code fixes set the same way
    /// on the device (a feature the code leaves unset runs either way).
    pub fn runs_on(&self, device: &TargetId) -> bool {
        let fits = |code: FeatureMode, dev: FeatureMode| {
            code == FeatureMode::Any || dev == FeatureMode::Any || code == dev
        };
        self.processor == device.processor
            && fits(self.xnack, device.xnack)
            && fits(self.sramecc, device.sramecc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_processor() {
        let t = |s: &str| Target::new(TargetId::parse(s).unwrap(), None, 5).unwrap();
        assert_eq!(t("gfx600").lds_limit(), 32 * 1024);
        assert_eq!(t("gfx90a").lds_limit(), 64 * 1024);
        assert_eq!(t("gfx950").lds_limit(), 160 * 1024);
        assert_eq!(t("gfx1100").max_threads_per_block(), 1024);
        assert_eq!(t("mi300x").vendor(), Vendor::Amd);
    }

    #[test]
    fn device_ids_parse_leniently_and_match_code() {
        let d = TargetId::parse_lenient("gfx942:sramecc+:xnack-");
        assert_eq!(d.to_string(), "gfx942:sramecc+:xnack-");
        assert_eq!(TargetId::parse_lenient("gfx9999:foo+").processor, "gfx9999");
        let code = |s: &str| TargetId::parse(s).unwrap();
        assert!(code("gfx942").runs_on(&d));
        assert!(code("gfx942:xnack-").runs_on(&d));
        assert!(!code("gfx942:xnack+").runs_on(&d));
        assert!(!code("gfx90a").runs_on(&d));
    }
}
