//! Targets. The model itself (processors, target IDs, wave sizes, PTX
//! versions, limits) is rocmc-target's, in pure Rust; this module
//! re-exports it and checks both processor tables against the LLVM that
//! rocmc links.

pub use rocmc_target::amdgpu::*;
pub use rocmc_target::{cpu, matrix, nvptx, CpuTarget, NvidiaTarget, Target, Vendor};

#[cfg(test)]
mod llvm_table {
    use std::ffi::{c_char, CString};

    extern "C" {
        fn rocmc_amdgcn_processors(buf: *mut c_char, cap: usize) -> usize;
        fn rocmc_amdgcn_arch_features(name: *const c_char) -> i64;
        fn rocmc_amdgcn_canonical_name(name: *const c_char, buf: *mut c_char, cap: usize) -> usize;
    }

    // llvm::AMDGPU::ArchFeatureKind bits (llvm/TargetParser/TargetParser.h).
    const FEATURE_WAVE32: i64 = 1 << 6;
    const FEATURE_XNACK: i64 = 1 << 7;
    const FEATURE_SRAMECC: i64 = 1 << 8;

    /// LLVM's processor names, in its order.
    pub fn processors() -> Vec<String> {
        // SAFETY: the shim only reads LLVM's static tables and writes at most `cap` bytes.
        let n = unsafe { rocmc_amdgcn_processors(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; n + 1];
        // SAFETY: buf has n + 1 bytes, the size the first call asked for.
        unsafe { rocmc_amdgcn_processors(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// (canonical name, xnack, sramecc, wave32) as LLVM's tables give them.
    pub fn entry(name: &str) -> (String, bool, bool, bool) {
        let c = CString::new(name).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: c is NUL-terminated; the shim writes at most buf.len() bytes including the terminator.
        let n =
            unsafe { rocmc_amdgcn_canonical_name(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        let canonical = String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned();
        let cc = CString::new(canonical.as_str()).unwrap();
        // SAFETY: cc is a valid NUL-terminated string for the duration of the call.
        let f = unsafe { rocmc_amdgcn_arch_features(cc.as_ptr()) };
        (
            canonical,
            f & FEATURE_XNACK != 0,
            f & FEATURE_SRAMECC != 0,
            f & FEATURE_WAVE32 != 0,
        )
    }

    /// rocmc-target's table is LLVM's: the same names in the same order,
    /// each with the same canonical processor and features.
    #[test]
    fn rocmc_target_table_matches_llvm() {
        let llvm = processors();
        let ours: Vec<&str> = super::PROCESSORS.iter().map(|e| e.name).collect();
        assert_eq!(
            ours, llvm,
            "processor lists differ: update rocmc-target's PROCESSORS"
        );
        for e in super::PROCESSORS {
            let (canonical, xnack, sramecc, wave32) = entry(e.name);
            assert_eq!(
                (e.canonical, e.xnack, e.sramecc, e.wave32),
                (canonical.as_str(), xnack, sramecc, wave32),
                "{}",
                e.name
            );
        }
    }
}

#[cfg(test)]
mod nvptx_table {
    use inkwell::context::Context;
    use inkwell::targets::{FileType, TargetTriple};

    extern "C" {
        fn rocmc_nvptx_processors(buf: *mut std::ffi::c_char, cap: usize) -> usize;
    }

    /// LLVM's NVPTX processor names, in its order.
    fn processors() -> Vec<String> {
        // Registers the NVPTX target, which the shim looks up.
        let sm90 = super::NvidiaTarget::parse("sm_90").unwrap();
        crate::backend::nvptx::target_machine(&sm90).unwrap();
        // SAFETY: the shim only reads LLVM's tables and writes at most `cap` bytes.
        let n = unsafe { rocmc_nvptx_processors(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; n + 1];
        // SAFETY: buf has n + 1 bytes, the size the first call asked for.
        unsafe { rocmc_nvptx_processors(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// rocmc-target's NVIDIA table is LLVM's: the same processors in the
    /// same order, each with the PTX ISA version LLVM writes for it by default.
    #[test]
    fn rocmc_target_nvptx_table_matches_llvm() {
        let llvm = processors();
        let ours: Vec<String> = super::nvptx::PROCESSORS
            .iter()
            .map(|e| e.name.to_string())
            .collect();
        assert_eq!(
            ours, llvm,
            "NVPTX processor lists differ: update rocmc-target's nvptx::PROCESSORS"
        );
        for e in super::nvptx::PROCESSORS {
            let t = super::NvidiaTarget {
                processor: e.name.into(),
                ptx_version: 0,
            };
            let tm = crate::backend::nvptx::target_machine_with(&t, "").unwrap();
            let cx = Context::create();
            let m = cx.create_module("empty");
            m.set_triple(&TargetTriple::create(crate::backend::nvptx::TRIPLE));
            let ptx = tm.write_to_memory_buffer(&m, FileType::Assembly).unwrap();
            let text = String::from_utf8_lossy(ptx.as_slice()).into_owned();
            let want = format!(".version {}.{}", e.ptx / 10, e.ptx % 10);
            assert!(
                text.contains(&want),
                "{}: LLVM writes {:?}, the table says {want}",
                e.name,
                text.lines().find(|l| l.starts_with(".version"))
            );
            assert!(text.contains(&format!(".target {}", e.name)), "{}", e.name);
        }
    }
}
