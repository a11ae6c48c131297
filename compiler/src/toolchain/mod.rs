//! The toolchain of a target: looked up once from a parsed [`Target`]
//! ([`lookup`], in the manner of Cranelift's `isa::lookup`) and then asked.
//! It answers what differs between AMD, NVIDIA and CPU targets after the
//! kernel is lowered: which outputs a build may write, how the launch
//! document is embedded, how an object is linked, which matrix
//! instructions `mma` steps use, what a written schedule must bind, and
//! how the tuner judges a candidate's occupancy.
//!
//! [`lookup`] is the one place outside `target-model/` that decides by
//! vendor; everything else in the compiler asks the returned object. A new
//! target is one more implementation here (and a `Backend` in
//! rocmc-codegen, which writes its LLVM IR).

mod amdgpu;
mod cpu;
mod nvptx;

use crate::{Artifact, Emit, Error, Options};
use rocmc_ir::lower::matrix::MatrixUnit;
use rocmc_ir::Program;
use rocmc_linker::launch::LaunchInfo;
use rocmc_target::Target;

/// What a build writes for a target besides the loop IR and LLVM IR,
/// which every target has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Target assembly (GCN, or x86-64): `--emit asm`.
    Asm,
    /// The relocatable ELF object the linker reads: `--emit obj`.
    Object,
    /// A linked AMDGPU code object: `--emit hsaco`.
    CodeObject,
    /// PTX text, which the CUDA driver compiles at load time: `--emit ptx`.
    Ptx,
    /// An ELF shared object for rocmc's CPU runtime: `--emit so`.
    SharedObject,
}

impl Output {
    /// Its name in `--emit`.
    pub fn name(self) -> &'static str {
        match self {
            Output::Asm => "asm",
            Output::Object => "obj",
            Output::CodeObject => "hsaco",
            Output::Ptx => "ptx",
            Output::SharedObject => "so",
        }
    }

    /// The file extension.
    pub fn ext(self) -> &'static str {
        match self {
            Output::Asm => "s",
            Output::Object => "o",
            Output::CodeObject => "hsaco",
            Output::Ptx => "ptx",
            Output::SharedObject => "so",
        }
    }
}

/// One target's answers. See the module documentation.
pub trait Toolchain: Send + Sync {
    /// The target it was looked up for.
    fn target(&self) -> &Target;

    /// What selects the machine code besides the processor, for people:
    /// `code object v5, wave64`, `PTX 7.8, warp 32`.
    fn summary(&self) -> String;

    /// The name of LLVM's backend, for messages: `AMDGPU`, `NVPTX`.
    fn llvm_backend(&self) -> &'static str;

    /// What devices load, and what a build writes by default.
    fn module_output(&self) -> Output;

    /// Why `out` cannot be written for this target, or `None` when it can.
    fn refuses(&self, out: Output) -> Option<String>;

    /// Whether the assembly is itself the module (PTX): `--emit asm` then
    /// writes the module's file.
    fn asm_is_module(&self) -> bool {
        self.module_output() == Output::Ptx
    }

    /// The emissions that produce the module devices load.
    fn module_emit(&self) -> Emit {
        if self.asm_is_module() {
            Emit {
                asm: true,
                ..Emit::default()
            }
        } else {
            Emit {
                code_object: true,
                ..Emit::default()
            }
        }
    }

    /// The module devices load, out of an artifact compiled with [`Toolchain::module_emit`].
    fn module_bytes(&self, art: Artifact) -> Vec<u8> {
        if self.asm_is_module() {
            art.asm.unwrap_or_default().into_bytes()
        } else {
            art.code_object.unwrap_or_default()
        }
    }

    /// Which matrix instructions `mma` steps use: a GPU's own; on the CPU,
    /// those of the GPU `opts.emulate` names.
    fn matrix_unit(&self, opts: &Options) -> Result<Option<MatrixUnit>, Error> {
        let _ = opts;
        Ok(MatrixUnit::of(self.target()))
    }

    /// The target default schedules are written for, and the shared memory
    /// they may use when it is not that target's own.
    fn rules_target(&self, opts: &Options) -> Result<(Target, Option<u32>), Error> {
        let _ = opts;
        Ok((self.target().clone(), None))
    }

    /// Whether a written schedule must bind some loop to the GPU's
    /// indices (on the CPU an unbound nest is the serial loops it is).
    fn needs_bound_schedule(&self) -> bool {
        true
    }

    /// What one work-group is called on this target, for messages.
    fn group_name(&self) -> &'static str {
        "work-group"
    }

    /// Completes the launch document for the compiled program and returns
    /// the module-level assembly that embeds it.
    fn embed_launch(&self, launch: &mut LaunchInfo, prog: &Program) -> String;

    /// Links the relocatable object into the module devices load; `None`
    /// where the target has no link step (PTX).
    fn link(&self, object: &[u8]) -> Option<Result<Vec<u8>, Error>>;

    /// What the tuner must compile to judge a candidate, besides the module.
    fn candidate_emit(&self, min_occupancy: Option<u32>) -> Emit {
        let _ = min_occupancy;
        self.module_emit()
    }

    /// Refuses a tuning candidate that spills or runs below the occupancy
    /// floor, with the reason.
    fn check_candidate(&self, art: &Artifact, min_occupancy: Option<u32>) -> Result<(), String> {
        let _ = (art, min_occupancy);
        Ok(())
    }
}

/// The toolchain of `target`.
pub fn lookup(target: &Target) -> Box<dyn Toolchain> {
    match target {
        Target::Amd(_) => Box::new(amdgpu::AmdGpu(target.clone())),
        Target::Nvidia(_) => Box::new(nvptx::Nvptx(target.clone())),
        Target::Cpu(_) => Box::new(cpu::Cpu(target.clone())),
    }
}
