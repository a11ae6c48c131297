//! NVIDIA GPUs: PTX text, which the CUDA driver compiles at load time;
//! no object or link step; the launch document in a comment line, with
//! each kernel's dynamic shared memory.

use super::{Output, Toolchain};
use crate::{Artifact, Error};
use rocmc_ir::Program;
use rocmc_linker::launch::LaunchInfo;
use rocmc_target::Target;

pub(super) struct Nvptx(pub Target);

impl Toolchain for Nvptx {
    fn target(&self) -> &Target {
        &self.0
    }

    fn summary(&self) -> String {
        let n = self.0.nvidia().expect("an NVIDIA target");
        format!("PTX {}, warp 32", n.ptx_text())
    }

    fn llvm_backend(&self) -> &'static str {
        "NVPTX"
    }

    fn module_output(&self) -> Output {
        Output::Ptx
    }

    fn refuses(&self, out: Output) -> Option<String> {
        let t = &self.0;
        match out {
            Output::Asm | Output::Ptx => None,
            Output::Object | Output::CodeObject => Some(format!(
                "--emit {}: {t} is an NVIDIA target; rocmc writes PTX for it (--emit ptx), which \
                 the CUDA driver compiles when it loads it",
                out.name()
            )),
            Output::SharedObject => Some(format!(
                "--emit so: {t} is a GPU target; shared objects are for the CPU target (--mcpu x86-64)"
            )),
        }
    }

    fn group_name(&self) -> &'static str {
        "block"
    }

    fn embed_launch(&self, launch: &mut LaunchInfo, prog: &Program) -> String {
        let names: Vec<String> = launch.sizes.iter().map(|s| s.name.clone()).collect();
        for (l, g) in launch.kernels.iter_mut().zip(&prog.kernels) {
            l.dynamic_shared = rocmc_codegen::backend::nvptx::dynamic_shared_bytes(g);
            // Arrays sized at launch: all arrays live in the dynamic block,
            // the static ones first.
            l.dynamic_shared_bytes = g
                .dynamic_layout(g.static_shared_bytes())
                .map(|(_, end)| crate::extent(&end, &names));
        }
        launch.ptx_comment()
    }

    fn link(&self, _object: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        None
    }

    fn check_candidate(&self, art: &Artifact, min_occupancy: Option<u32>) -> Result<(), String> {
        let Some(floor) = min_occupancy else {
            return Ok(());
        };
        let text = art.asm.as_deref().unwrap_or_default();
        // Threads per block, and the dynamic shared memory ptxas does not count.
        let block = |name: &str| {
            art.launch.kernel(name).map_or((1, 0), |k| {
                (k.block.iter().product::<u32>(), k.dynamic_shared)
            })
        };
        if let Some((kernel, warps)) = occupancy(&self.0, text, &block)?
            .into_iter()
            .min_by_key(|(_, w)| *w)
            .filter(|(_, w)| *w < floor)
        {
            return Err(format!(
                "{kernel}: occupancy {warps} warps per scheduler (ptxas's registers and shared memory), below the floor of {floor} (--min-occupancy)"
            ));
        }
        Ok(())
    }
}

/// Per kernel, resident warps per warp scheduler (4 per SM) as the
/// occupancy rules of NVIDIA's CUDA guide give them from ptxas's registers
/// and static shared memory, plus the dynamic shared memory `block` gives
/// with each kernel's threads: the NVIDIA counterpart of AMD's waves per
/// SIMD. Spilling kernels are refused outright.
fn occupancy(
    t: &Target,
    ptx: &str,
    block: &dyn Fn(&str) -> (u32, u32),
) -> Result<Vec<(String, u32)>, String> {
    let ptxas = rocmc_linker::ptxas::find().ok_or(
        "--min-occupancy on NVIDIA needs ptxas for register counts (scripts/install-ptxas.sh)",
    )?;
    let sm = t.processor();
    let cc = t.nvidia().map_or((0, 0), |n| n.compute_capability());
    // (max warps, max blocks, shared memory bytes) per SM, by compute capability.
    let (max_warps, max_blocks, smem_per_sm) = match cc.0 * 10 + cc.1 {
        0..=75 => (32, 16, 64 << 10),
        80 => (64, 32, 164 << 10),
        86..=89 => (48, 16, 100 << 10),
        90 => (64, 32, 228 << 10),
        _ => (48, 32, 228 << 10),
    };
    let reports = rocmc_linker::ptxas::assemble(&ptxas, ptx, sm)?;
    let mut out = Vec::new();
    for r in reports {
        if r.spill_stores > 0 {
            return Err(format!(
                "{} spills ({} bytes of spill stores, ptxas)",
                r.kernel, r.spill_stores
            ));
        }
        let (threads, dynamic_shared) = block(&r.kernel);
        let warps_per_block = threads.div_ceil(32).max(1);
        // Registers are allocated per warp in units of 256.
        let regs_per_warp = (r.registers.max(1) * 32).div_ceil(256) * 256;
        let by_regs = 65536 / regs_per_warp / warps_per_block;
        // Each block also reserves 1 KiB of shared memory for the system.
        let by_smem = smem_per_sm / (r.shared_bytes + dynamic_shared + 1024);
        let blocks = by_regs
            .min(by_smem)
            .min(max_blocks)
            .min(max_warps / warps_per_block);
        out.push((r.kernel, blocks * warps_per_block / 4));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dynamic shared memory counts against the SM's like static: eight
    /// 32-deep stages of the example's tiles at 128x128 blocks (148 KiB)
    /// leave room for one block, where its registers would allow two.
    #[test]
    fn nvidia_occupancy_counts_dynamic_shared_memory() {
        if rocmc_linker::ptxas::find().is_none() {
            panic!("ptxas is missing: scripts/install-ptxas.sh installs it");
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let src = std::fs::read_to_string(root.join("examples/gemm_f16_mma.toml"))
            .unwrap()
            .replace("tile(i, j, 128, 256)", "tile(i, j, 128, 128)")
            .replace("split(k, 64)", "split(k, 32)")
            .replace("stages=4)", "stages=8)");
        let opts = crate::Options::new("sm_90");
        let emit = crate::Emit {
            asm: true,
            ..Default::default()
        };
        let art = crate::compile("k.toml", &src, &opts, emit).unwrap();
        let launch = &art.launch.kernels[0];
        assert_eq!(launch.dynamic_shared, 8 * (128 * 40 + 32 * 136) * 2);
        let t = crate::targets(&opts).unwrap().remove(0);
        let ptx = art.asm.unwrap();
        let warps = |dynamic: u32| occupancy(&t, &ptx, &|_| (128, dynamic)).unwrap()[0].1;
        // 4 warps per block: two blocks by registers, one by shared memory.
        assert_eq!(warps(0), 2);
        assert_eq!(warps(launch.dynamic_shared), 1);
    }
}
