//! What a processor's hardware allows: register files, LDS and waves, for
//! occupancy estimates. The rules follow LLVM's AMDGPU backend
//! (AMDGPUBaseInfo: getMaxWavesPerEU, getTotalNumVGPRs, getVGPRAllocGranule),
//! so the estimate agrees with the `; Occupancy:` LLVM prints in assembly.

pub use rocmc_target::hardware::{hardware, Hardware};

/// Resources of one kernel, as its metadata gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub vgprs: u32,
    pub agprs: u32,
    pub sgprs: u32,
    pub lds_bytes: u32,
    pub workgroup_size: u32,
    pub wave_size: u32,
}

impl Usage {
    /// The resources a code object's metadata records for a kernel.
    pub fn of(k: &crate::codeobject::KernelInfo) -> Usage {
        Usage {
            vgprs: k.vgpr_count as u32,
            agprs: k.agpr_count.unwrap_or(0) as u32,
            sgprs: k.sgpr_count as u32,
            lds_bytes: k.group_segment_fixed_size as u32,
            workgroup_size: k.max_flat_workgroup_size as u32,
            wave_size: k.wavefront_size as u32,
        }
    }
}

/// Occupancy of a kernel on the processor of `target_id` (`gfx90a:xnack-`).
pub fn kernel_occupancy(target_id: &str, k: &crate::codeobject::KernelInfo) -> (u32, &'static str) {
    occupancy(
        &hardware(target_id.split(':').next().unwrap_or_default()),
        &Usage::of(k),
    )
}

/// Waves per SIMD the resources allow, and what limits them, as LLVM
/// counts them: whole waves, at least 1 where a work-group fits at all.
pub fn occupancy(h: &Hardware, u: &Usage) -> (u32, &'static str) {
    let (w, why) = occupancy_exact(h, u);
    let whole = w.ceil() as u32;
    if whole >= h.max_waves_per_simd {
        return (h.max_waves_per_simd, "wave slots");
    }
    (whole.max(u32::from(w > 0.0)), why)
}

/// [`occupancy`] as the average over a CU's SIMDs: one work-group of two
/// waves on a 4-SIMD CU is 0.5 (half the SIMDs idle), which LLVM's whole
/// count rounds up to 1.
pub fn occupancy_exact(h: &Hardware, u: &Usage) -> (f64, &'static str) {
    let wave32 = u.wave_size == 32;
    let (total, granule) = if h.unified_vgpr_file {
        (512, 8)
    } else if !h.gfx10_plus {
        (256, 4)
    } else if h.big_vgpr_file {
        if wave32 {
            (1536, 24)
        } else {
            (768, 12)
        }
    } else if h.gfx10_3_plus {
        if wave32 {
            (1024, 16)
        } else {
            (512, 8)
        }
    } else if wave32 {
        (1024, 8)
    } else {
        (512, 4)
    };
    let regs = if h.unified_vgpr_file {
        u.vgprs.div_ceil(4) * 4 + u.agprs
    } else {
        u.vgprs.max(u.agprs)
    };
    let mut best = (f64::from(h.max_waves_per_simd), "wave slots");
    let mut limit = |w: f64, why: &'static str| {
        if w < best.0 {
            best = (w, why);
        }
    };
    if regs > granule {
        limit(
            f64::from((total / regs.div_ceil(granule).saturating_mul(granule)).max(1)),
            "VGPRs",
        );
    }
    if !h.gfx10_plus {
        let s = u.sgprs;
        limit(
            match s {
                0..=80 => 10.0,
                81..=88 => 9.0,
                89..=100 => 8.0,
                _ => 7.0,
            },
            "SGPRs",
        );
    }
    // Whole work-groups share a CU: a group of 16 waves fits twice into 40
    // slots, and LDS may admit fewer groups. The groups' waves spread over
    // the SIMDs as evenly as they can, so the fullest SIMD holds
    // ceil(waves / SIMDs), as LLVM counts (AMDGPUSubtarget::
    // getOccupancyWithWorkGroupSizes): 5 groups of 6 waves on gfx90a's 32
    // slots leave 8 waves on the fullest SIMD, not 30 / 4.
    if u.workgroup_size > 0 {
        let waves_per_group = u.workgroup_size.div_ceil(u.wave_size.max(1)).max(1);
        let by_slots = h.max_waves_per_simd * h.simds / waves_per_group;
        let by_lds = match u.lds_bytes {
            0 => u32::MAX,
            b => h.lds_per_cu / b,
        };
        let (groups, why) = if by_lds < by_slots {
            (by_lds, "LDS")
        } else {
            (by_slots, "work-group size")
        };
        // A group always fits where LDS does not limit (the wave slots
        // hold at least one).
        let groups = if why == "LDS" { groups } else { groups.max(1) };
        limit(
            f64::from(groups * waves_per_group) / f64::from(h.simds),
            why,
        );
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups whose waves do not divide among the SIMDs: LLVM counts the
    /// fullest SIMD (llc's `; Occupancy:` for a 384-thread kernel).
    #[test]
    fn uneven_groups_count_the_fullest_simd() {
        let u = Usage {
            vgprs: 8,
            agprs: 0,
            sgprs: 16,
            lds_bytes: 0,
            workgroup_size: 384,
            wave_size: 64,
        };
        assert_eq!(occupancy(&hardware("gfx90a"), &u), (8, "wave slots"));
        assert_eq!(occupancy(&hardware("gfx900"), &u), (9, "work-group size"));
    }

    #[test]
    fn vgprs_limit_waves() {
        let u = |v| Usage {
            vgprs: v,
            agprs: 0,
            sgprs: 16,
            lds_bytes: 0,
            workgroup_size: 256,
            wave_size: 64,
        };
        assert_eq!(occupancy(&hardware("gfx900"), &u(3)).0, 10);
        assert_eq!(occupancy(&hardware("gfx900"), &u(64)).0, 4);
        assert_eq!(occupancy(&hardware("gfx90a"), &u(128)), (4, "VGPRs"));
    }

    /// One 2-wave work-group per CU (its LDS): half the SIMDs idle, which
    /// LLVM's whole count shows as 1.
    #[test]
    fn a_lone_small_group_leaves_simds_idle() {
        let u = Usage {
            vgprs: 240,
            agprs: 0,
            sgprs: 40,
            lds_bytes: 58_880,
            workgroup_size: 128,
            wave_size: 64,
        };
        assert_eq!(occupancy_exact(&hardware("gfx942"), &u), (0.5, "LDS"));
        assert_eq!(occupancy(&hardware("gfx942"), &u), (1, "LDS"));
    }
}
