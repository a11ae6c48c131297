//! What a processor's hardware allows: register files, LDS and waves, for
//! occupancy estimates. The rules follow LLVM's AMDGPU backend
//! (AMDGPUBaseInfo: getMaxWavesPerEU, getTotalNumVGPRs, getVGPRAllocGranule),
//! so the estimate agrees with the `; Occupancy:` LLVM prints in assembly.

/// Hardware facts about one processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hardware {
    pub family: &'static str,
    /// LDS one work-group can use at most, in bytes.
    pub lds_per_workgroup: u32,
    /// LDS shared by the work-groups on one CU (WGP on gfx10+), in bytes.
    pub lds_per_cu: u32,
    /// SIMDs (execution units) sharing that LDS.
    pub simds: u32,
    pub max_waves_per_simd: u32,
    /// gfx90a/gfx94x/gfx95x: VGPRs and AGPRs share one 512-entry file.
    pub unified_vgpr_file: bool,
    /// 1.5x-sized VGPR file (gfx1100, gfx1101, gfx1151, gfx12).
    pub big_vgpr_file: bool,
    pub gfx10_plus: bool,
    pub gfx10_3_plus: bool,
}

fn gen(p: &str) -> (u32, u32) {
    // "gfx1100" -> (11, 0x00); "gfx90a" -> (9, 0x0a); "gfx9-4-generic" -> (9, 4 << 4)
    let digits = p.trim_start_matches("gfx");
    if let Some(g) = digits.strip_suffix("-generic") {
        let mut it = g.split('-').map(|x| x.parse::<u32>().unwrap_or(0));
        return (it.next().unwrap_or(0), it.next().unwrap_or(0) << 4);
    }
    let major_len = if digits.len() >= 4 { 2 } else { 1 };
    let major = digits
        .get(..major_len)
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let minor = digits
        .get(major_len..)
        .and_then(|m| u32::from_str_radix(m, 16).ok())
        .unwrap_or(0);
    (major, minor)
}

/// Hardware of a processor named by LLVM (`gfx942`, `gfx1100`, `gfx11-generic`).
pub fn hardware(processor: &str) -> Hardware {
    let (major, minor) = gen(processor);
    let cdna_unified = major == 9 && (minor == 0x0a || minor >= 0x40);
    let family = match (major, minor) {
        (6, _) => "GCN1 (Southern Islands)",
        (7, _) => "GCN2 (Sea Islands)",
        (8, _) => "GCN3 (Volcanic Islands)",
        (9, 0x08) => "CDNA1",
        (9, 0x0a) => "CDNA2",
        (9, 0x40..=0x4f) => "CDNA3",
        (9, 0x50..=0x5f) => "CDNA4",
        (9, _) if processor.ends_with("generic") => "GCN5 / CDNA (generic)",
        (9, _) => "GCN5 (Vega)",
        (10, m) if m < 0x30 => "RDNA1",
        (10, _) => "RDNA2",
        (11, m) if m >= 0x50 => "RDNA3.5",
        (11, _) => "RDNA3",
        (12, m) if m >= 0x50 => "GFX12.5",
        (12, _) => "RDNA4",
        _ => "unknown",
    };
    let lds_per_workgroup = match (major, minor) {
        (6, _) => 32 * 1024,
        (9, 0x50..=0x5f) => 160 * 1024,
        (12, m) if m >= 0x50 => 320 * 1024,
        _ => 64 * 1024,
    };
    let gfx10_plus = major >= 10;
    Hardware {
        family,
        lds_per_workgroup,
        lds_per_cu: if gfx10_plus {
            lds_per_workgroup.max(128 * 1024)
        } else {
            lds_per_workgroup.max(64 * 1024)
        },
        simds: 4,
        max_waves_per_simd: if cdna_unified {
            8
        } else if !gfx10_plus {
            10
        } else if major > 10 || minor >= 0x30 {
            16
        } else {
            20
        },
        unified_vgpr_file: cdna_unified,
        big_vgpr_file: matches!(processor, "gfx1100" | "gfx1101" | "gfx1151")
            || (major == 12 && minor < 0x50),
        gfx10_plus,
        gfx10_3_plus: major > 10 || (major == 10 && minor >= 0x30),
    }
}

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

/// Waves per SIMD the resources allow, and what limits them.
pub fn occupancy(h: &Hardware, u: &Usage) -> (u32, &'static str) {
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
    let mut best = (h.max_waves_per_simd, "wave slots");
    let mut limit = |w: u32, why: &'static str| {
        if w < best.0 {
            best = (w, why);
        }
    };
    if regs > granule {
        limit(
            (total / regs.div_ceil(granule).saturating_mul(granule)).max(1),
            "VGPRs",
        );
    }
    if !h.gfx10_plus {
        let s = u.sgprs;
        limit(
            match s {
                0..=80 => 10,
                81..=88 => 9,
                89..=100 => 8,
                _ => 7,
            },
            "SGPRs",
        );
    }
    // Whole work-groups share a CU: a group of 16 waves fits twice into 40 slots.
    if u.workgroup_size > 0 {
        let waves_per_group = u.workgroup_size.div_ceil(u.wave_size.max(1));
        let groups = h.max_waves_per_simd * h.simds / waves_per_group.max(1);
        limit(
            (groups * waves_per_group / h.simds).max(1),
            "work-group size",
        );
    }
    if u.lds_bytes > 0 && u.workgroup_size > 0 {
        let groups = h.lds_per_cu / u.lds_bytes;
        let waves_per_group = u.workgroup_size.div_ceil(u.wave_size.max(1));
        limit(
            (groups * waves_per_group / h.simds).max(if groups > 0 { 1 } else { 0 }),
            "LDS",
        );
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_limits() {
        assert_eq!(hardware("gfx942").family, "CDNA3");
        assert_eq!(hardware("gfx90a").max_waves_per_simd, 8);
        assert_eq!(hardware("gfx900").max_waves_per_simd, 10);
        assert_eq!(hardware("gfx1030").max_waves_per_simd, 16);
        assert_eq!(hardware("gfx1010").max_waves_per_simd, 20);
        assert_eq!(hardware("gfx950").lds_per_workgroup, 160 * 1024);
        assert_eq!(hardware("gfx1201").family, "RDNA4");
        assert_eq!(hardware("gfx11-generic").family, "RDNA3");
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
}
