//! The host CPU: an ELF shared object for rocmc's CPU runtime, the launch
//! document in the same section as in an AMDGPU code object. On the CPU,
//! `mma` steps run a GPU's matrix instructions through their lane layouts
//! when `--emulate` names that GPU.

use super::{Output, Toolchain};
use crate::{Error, Options};
use rocmc_ir::lower::matrix::MatrixUnit;
use rocmc_ir::Program;
use rocmc_linker::launch::LaunchInfo;
use rocmc_target::Target;

pub(super) struct Cpu(pub Target);

impl Cpu {
    /// The GPU `--emulate` names, parsed; refused when it is not a GPU.
    fn emulated(&self, opts: &Options) -> Result<Option<Target>, Error> {
        let Some(p) = &opts.emulate else {
            return Ok(None);
        };
        let t = Target::parse(p, opts.wave_size, opts.code_object_version)?;
        if MatrixUnit::of(&t).is_none() {
            return Err(Error::Usage(format!(
                "--emulate {p}: name a GPU processor whose matrix instructions the CPU should run (gfx942, gfx1100, sm_90)"
            )));
        }
        Ok(Some(t))
    }
}

impl Toolchain for Cpu {
    fn target(&self) -> &Target {
        &self.0
    }

    fn summary(&self) -> String {
        format!(
            "ELF shared object for {}, rocmc's CPU runtime",
            rocmc_target::cpu::LLVM_CPU
        )
    }

    fn llvm_backend(&self) -> &'static str {
        "x86-64"
    }

    fn module_output(&self) -> Output {
        Output::SharedObject
    }

    fn refuses(&self, out: Output) -> Option<String> {
        let t = &self.0;
        match out {
            Output::Asm | Output::Object | Output::SharedObject => None,
            Output::CodeObject | Output::Ptx => Some(format!(
                "--emit {}: {t} is the CPU target; rocmc writes a shared object for it (--emit so)",
                out.name()
            )),
        }
    }

    fn matrix_unit(&self, opts: &Options) -> Result<Option<MatrixUnit>, Error> {
        Ok(self
            .emulated(opts)?
            .and_then(|gpu| MatrixUnit::emulated(&self.0, &gpu)))
    }

    /// Written for the emulated GPU, within the CPU's shared memory.
    fn rules_target(&self, opts: &Options) -> Result<(Target, Option<u32>), Error> {
        Ok(match &opts.emulate {
            Some(p) => (
                Target::parse(p, opts.wave_size, opts.code_object_version)?,
                Some(self.0.lds_limit()),
            ),
            None => (self.0.clone(), None),
        })
    }

    fn needs_bound_schedule(&self) -> bool {
        false
    }

    fn embed_launch(&self, launch: &mut LaunchInfo, _prog: &Program) -> String {
        launch.module_asm()
    }

    fn link(&self, object: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        Some(rocmc_linker::link_shared_object(object).map_err(Error::from))
    }
}
