//! rocmc's target model: everything rocmc knows about a GPU target (AMD or
//! NVIDIA), in pure Rust, so the compiler, the linker and the runtimes (which link no LLVM)
//! share one definition.
//!
//! A [`Target`] is parsed once, at the CLI or library boundary, from a
//! target ID (`gfx942:sramecc+:xnack-`, or a product name such as `mi300x`)
//! and the wave size and code-object version options; every later phase
//! takes the typed value. The processor table is LLVM 22's
//! ([`amdgpu::PROCESSORS`]); a test in rocmc-codegen checks it against
//! the LLVM that rocmc links.

pub mod amdgpu;
pub mod cpu;
pub mod hardware;
pub mod matrix;
pub mod nvptx;

pub use amdgpu::{
    AmdTarget, FeatureMode, ProcessorInfo, TargetError, TargetId, CODE_OBJECT_VERSIONS,
    DEFAULT_CODE_OBJECT_VERSION,
};
pub use cpu::CpuTarget;
pub use nvptx::NvidiaTarget;

use std::fmt;

/// Who makes the GPU a target is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    Amd,
    Nvidia,
    /// The host CPU (x86-64), through rocmc's CPU runtime.
    Cpu,
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Amd => "AMD",
            Vendor::Nvidia => "NVIDIA",
            Vendor::Cpu => "CPU",
        })
    }
}

/// Threads in one work-group, at most, on every AMD GPU.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;

/// A GPU target, parsed once from `--mcpu` and passed to every later phase.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// An AMDGPU target ID with its wave size and code-object version.
    Amd(AmdTarget),
    /// An NVIDIA `sm_NN` processor with its PTX ISA version.
    Nvidia(NvidiaTarget),
    /// The host CPU: shared objects for rocmc's CPU runtime.
    Cpu(CpuTarget),
}

impl Target {
    /// Parses one `--mcpu` entry: an AMDGPU target ID or product
    /// (`gfx942:xnack-`, `mi300x`), or an NVIDIA processor or product
    /// (`sm_90`, `h100`). `wave_size` and `code_object_version` apply to AMD
    /// targets; NVIDIA warps are 32 wide.
    pub fn parse(
        s: &str,
        wave_size: Option<u32>,
        code_object_version: u32,
    ) -> Result<Target, TargetError> {
        if let Some(t) = CpuTarget::parse(s) {
            if let Some(w) = wave_size {
                return Err(TargetError::Unsupported(format!(
                    "{t}: CPU targets have no waves; --wave-size {w} applies to AMD targets"
                )));
            }
            return Ok(Target::Cpu(t));
        }
        if nvptx::is_nvidia_name(s) {
            let t = NvidiaTarget::parse(s).ok_or_else(|| TargetError::UnknownNvidiaProcessor {
                near: amdgpu::nearest_of(
                    s,
                    &nvptx::PROCESSORS
                        .iter()
                        .map(|p| p.name.to_string())
                        .chain(nvptx::PRODUCT_ALIASES.iter().map(|(a, _)| a.to_string()))
                        .collect::<Vec<_>>(),
                ),
                name: s.to_string(),
            })?;
            if let Some(w) = wave_size.filter(|w| *w != 32) {
                return Err(TargetError::Unsupported(format!(
                    "{t}: NVIDIA GPUs run 32-wide warps; --wave-size {w} applies to AMD targets"
                )));
            }
            return Ok(Target::Nvidia(t));
        }
        Ok(Target::Amd(AmdTarget::new(
            TargetId::parse(s)?,
            wave_size,
            code_object_version,
        )?))
    }

    pub fn vendor(&self) -> Vendor {
        match self {
            Target::Amd(_) => Vendor::Amd,
            Target::Nvidia(_) => Vendor::Nvidia,
            Target::Cpu(_) => Vendor::Cpu,
        }
    }

    /// The AMDGPU target, if this is one.
    pub fn amd(&self) -> Option<&AmdTarget> {
        match self {
            Target::Amd(t) => Some(t),
            Target::Nvidia(_) | Target::Cpu(_) => None,
        }
    }

    /// The NVIDIA target, if this is one.
    pub fn nvidia(&self) -> Option<&NvidiaTarget> {
        match self {
            Target::Nvidia(t) => Some(t),
            Target::Amd(_) | Target::Cpu(_) => None,
        }
    }

    /// The processor: `gfx942`, `sm_90`.
    pub fn processor(&self) -> &str {
        match self {
            Target::Amd(t) => &t.id.processor,
            Target::Nvidia(t) => &t.processor,
            Target::Cpu(t) => &t.arch,
        }
    }

    /// Whether a tuning-database entry recorded for `key` (a target as
    /// [`Display`](fmt::Display) writes it, or a device's report) applies
    /// to a build for this target: the same target, or, where this target
    /// fixes no feature, any feature setting of its processor.
    pub fn takes_tuning_of(&self, key: &str) -> bool {
        let me = self.to_string();
        if me.contains(':') {
            key == me
        } else {
            key.split(':').next() == Some(me.as_str())
        }
    }

    /// Shared memory (AMD's LDS) one work-group may use, in bytes.
    pub fn lds_limit(&self) -> u32 {
        match self {
            Target::Amd(t) => t.hardware().lds_per_workgroup,
            Target::Nvidia(t) => t.max_shared_per_block(),
            Target::Cpu(_) => cpu::SHARED_PER_BLOCK,
        }
    }

    /// What the vendor calls that memory, for messages.
    pub fn shared_memory_name(&self) -> &'static str {
        match self {
            Target::Amd(_) => "LDS",
            Target::Nvidia(_) | Target::Cpu(_) => "shared memory",
        }
    }

    /// Threads one work-group may have.
    pub fn max_threads_per_block(&self) -> u32 {
        match self {
            Target::Amd(_) => MAX_THREADS_PER_BLOCK,
            Target::Nvidia(_) => nvptx::MAX_THREADS_PER_BLOCK,
            Target::Cpu(_) => cpu::MAX_THREADS_PER_BLOCK,
        }
    }

    /// Work-groups a grid may have along dimension `dim` (0 = x) with
    /// `block` threads per work-group along it. AMD's dispatch counts work
    /// items in 32 bits per dimension; NVIDIA counts blocks, y and z in 16.
    pub fn max_grid(&self, dim: usize, block: u32) -> u64 {
        match self {
            Target::Amd(_) => u64::from(u32::MAX) / u64::from(block.max(1)),
            Target::Nvidia(_) => nvptx::MAX_GRID[dim.min(2)],
            Target::Cpu(_) => i32::MAX as u64,
        }
    }

    /// Threads that run in lockstep: AMD's wave, NVIDIA's warp.
    pub fn wave_size(&self) -> u32 {
        match self {
            Target::Amd(t) => t.wavefront_size(),
            Target::Nvidia(_) => 32,
            // The threads of a work-group run in lockstep, one at a time.
            Target::Cpu(_) => 1,
        }
    }
}

/// The target ID (AMD) or processor (NVIDIA), as `--mcpu` takes it.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Amd(t) => t.id.fmt(f),
            Target::Nvidia(t) => t.fmt(f),
            Target::Cpu(t) => t.fmt(f),
        }
    }
}

impl AmdTarget {
    /// The hardware facts of the target's processor.
    pub fn hardware(&self) -> hardware::Hardware {
        hardware::hardware(&self.id.processor)
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
        let t = |s: &str| Target::parse(s, None, 5).unwrap();
        assert_eq!(t("gfx600").lds_limit(), 32 * 1024);
        assert_eq!(t("gfx90a").lds_limit(), 64 * 1024);
        assert_eq!(t("gfx950").lds_limit(), 160 * 1024);
        assert_eq!(t("gfx1100").max_threads_per_block(), 1024);
        assert_eq!(t("mi300x").vendor(), Vendor::Amd);
        assert_eq!(t("h100").vendor(), Vendor::Nvidia);
        assert_eq!(t("sm_90").lds_limit(), 227 * 1024);
        assert_eq!(t("sm_86").lds_limit(), 99 * 1024);
        assert_eq!(t("sm_80").lds_limit(), 163 * 1024);
        assert_eq!(t("sm_60").lds_limit(), 48 * 1024);
        assert_eq!(t("sm_90").wave_size(), 32);
        assert!(Target::parse("sm_90", Some(64), 5).is_err());
        match Target::parse("sm_91", None, 5) {
            Err(TargetError::UnknownNvidiaProcessor { near, .. }) => {
                assert!(near.contains(&"sm_90".to_string()), "{near:?}")
            }
            other => panic!("{other:?}"),
        }
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
