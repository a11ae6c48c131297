//! What a processor's hardware allows: LDS, waves and register files. The
//! rules follow LLVM's AMDGPU backend (AMDGPUBaseInfo), so limits and the
//! occupancy estimates built on them (rocmc-linker) agree with LLVM's.

/// The most LDS one work-group may use on any AMDGPU (gfx1250's), in
/// bytes: the bound target-independent lowering checks against, before a
/// target's own limit ([`crate::Target::lds_limit`]) is known.
pub const MAX_LDS_PER_WORKGROUP: u32 = 320 * 1024;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lds_bound_is_the_largest_processors() {
        let most = crate::amdgpu::canonical_processors()
            .iter()
            .map(|p| hardware(p).lds_per_workgroup)
            .max();
        assert_eq!(most, Some(MAX_LDS_PER_WORKGROUP));
    }

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
}
