//! AMDGPU targets. The model itself (processors, target IDs, wave sizes,
//! limits) is rocmc-target's, in pure Rust; this module re-exports it and
//! checks its processor table against the LLVM that rocmc links.

pub use rocmc_target::amdgpu::*;

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
