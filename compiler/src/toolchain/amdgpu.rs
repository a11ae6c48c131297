//! AMD GPUs: GCN assembly, relocatable objects linked by lld into code
//! objects, the launch document in a section of its own.

use super::{Output, Toolchain};
use crate::{Artifact, Emit, Error};
use rocmc_ir::Program;
use rocmc_linker::launch::LaunchInfo;
use rocmc_target::Target;

pub(super) struct AmdGpu(pub Target);

impl Toolchain for AmdGpu {
    fn target(&self) -> &Target {
        &self.0
    }

    fn summary(&self) -> String {
        let a = self.0.amd().expect("an AMD target");
        format!(
            "code object v{}, wave{}",
            a.code_object_version,
            a.wavefront_size()
        )
    }

    fn llvm_backend(&self) -> &'static str {
        "AMDGPU"
    }

    fn module_output(&self) -> Output {
        Output::CodeObject
    }

    fn refuses(&self, out: Output) -> Option<String> {
        let t = &self.0;
        match out {
            Output::Asm | Output::Object | Output::CodeObject => None,
            Output::SharedObject => Some(format!(
                "--emit so: {t} is a GPU target; shared objects are for the CPU target (--mcpu x86-64)"
            )),
            Output::Ptx => Some(format!(
                "--emit ptx: {t} is an AMD target; PTX is for NVIDIA targets (sm_NN)"
            )),
        }
    }

    fn embed_launch(&self, launch: &mut LaunchInfo, prog: &Program) -> String {
        // LDS sized at launch follows the static LDS, which LLVM lays out.
        let names: Vec<String> = launch.sizes.iter().map(|s| s.name.clone()).collect();
        for (l, g) in launch.kernels.iter_mut().zip(&prog.kernels) {
            l.dynamic_shared_bytes = g
                .dynamic_layout(0)
                .map(|(_, end)| crate::extent(&end, &names));
        }
        launch.module_asm()
    }

    fn link(&self, object: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        Some(rocmc_linker::link_code_object(object).map_err(Error::from))
    }

    /// LLVM states each kernel's occupancy in its assembly.
    fn candidate_emit(&self, min_occupancy: Option<u32>) -> Emit {
        Emit {
            asm: min_occupancy.is_some(),
            ..self.module_emit()
        }
    }

    fn check_candidate(&self, art: &Artifact, min_occupancy: Option<u32>) -> Result<(), String> {
        if let (Some(floor), Some(asm)) = (min_occupancy, &art.asm) {
            if let Some(low) = asm
                .lines()
                .filter_map(|l| l.trim().strip_prefix("; Occupancy:"))
                .filter_map(|v| v.trim().parse::<u32>().ok())
                .min()
                .filter(|&w| w < floor)
            {
                return Err(format!(
                    "occupancy {low} waves per SIMD, below the floor of {floor} (--min-occupancy)"
                ));
            }
        }
        let Some(Ok(co)) = art
            .code_object
            .as_deref()
            .map(rocmc_linker::codeobject::read)
        else {
            return Ok(());
        };
        for k in &co.kernels {
            if k.vgpr_spill_count > 0 || k.sgpr_spill_count > 0 || k.private_segment_fixed_size > 0
            {
                return Err(format!(
                    "{} spills ({} VGPRs, {} SGPRs spilled, {} bytes of scratch)",
                    k.name, k.vgpr_spill_count, k.sgpr_spill_count, k.private_segment_fixed_size
                ));
            }
        }
        Ok(())
    }
}
