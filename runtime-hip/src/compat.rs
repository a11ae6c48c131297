//! Does a code object fit a device? Checked before HIP sees it, so the
//! answer names both sides and the `--mcpu` that would fit instead of a bare
//! `hipErrorNoBinaryForGpu`.

use crate::error::{Error, Result};

/// Target IDs are rocmc-target's: the one model the compiler uses too.
pub use rocmc_target::TargetId;

/// Whether code built for `code` runs on a device whose `gcnArchName` is
/// `device`: same processor, and every feature the code fixes (`+`/`-`) is
/// set the same way on the device. Features the code leaves unset run in
/// either mode.
pub fn compatible(code: &str, device: &str) -> bool {
    TargetId::parse_lenient(code).runs_on(&TargetId::parse_lenient(device))
}

/// Checks a code object's target ID against a device, with an actionable message.
pub fn check_target(code: &str, device: &str, device_index: usize) -> Result<()> {
    if compatible(code, device) {
        return Ok(());
    }
    let d = TargetId::parse_lenient(device);
    Err(Error::Incompatible(format!(
        "the code object is for {code} but device {device_index} is {device}; rebuild with `--mcpu {}` (or `--mcpu {device}`)",
        d.processor
    )))
}

/// The newest code-object version a HIP runtime loads, from
/// `hipRuntimeGetVersion` (major·10⁷ + minor·10⁵ + patch): v5 from ROCm 5.3,
/// v6 from ROCm 6.3.
pub fn max_code_object_version(runtime_version: i32) -> u32 {
    match runtime_version {
        v if v >= 60_300_000 => 6,
        v if v >= 50_300_000 => 5,
        _ => 4,
    }
}

/// `5.2.21153` for the runtime version 50221153.
pub fn runtime_version_text(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

/// Refuses a code object newer than the runtime loads, naming both.
pub fn check_code_object_version(cov: u32, runtime_version: i32) -> Result<()> {
    let max = max_code_object_version(runtime_version);
    if cov > max {
        return Err(Error::Incompatible(format!(
            "the code object is version {cov}, but the HIP runtime {} loads versions up to {max}; rebuild with `--code-object-version {max}`",
            runtime_version_text(runtime_version)
        )));
    }
    Ok(())
}

/// A device chosen by `amdgpu`, `amdgpu:N` or `amdgpu://GPU-<uuid>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The first visible device.
    Default,
    /// The N-th visible device.
    Index(usize),
    /// The device whose UUID starts with these hex digits.
    Uuid(String),
}

impl DeviceSelector {
    /// Parses `amdgpu`, `amdgpu:N` or `amdgpu://GPU-<uuid>`.
    pub fn parse(s: &str) -> Result<DeviceSelector> {
        let bad = |why: &str| {
            Error::DeviceSelection(
                s.to_string(),
                format!("{why}; write `amdgpu`, `amdgpu:N` or `amdgpu://GPU-<uuid>`"),
            )
        };
        if s == "amdgpu" {
            return Ok(DeviceSelector::Default);
        }
        if let Some(uuid) = s.strip_prefix("amdgpu://") {
            let hex = uuid
                .strip_prefix("GPU-")
                .ok_or_else(|| bad("a UUID starts with GPU-"))?;
            if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Err(bad("the UUID is not hexadecimal"));
            }
            return Ok(DeviceSelector::Uuid(hex.to_ascii_lowercase()));
        }
        if let Some(n) = s.strip_prefix("amdgpu:") {
            return n
                .parse()
                .map(DeviceSelector::Index)
                .map_err(|_| bad("the index is not a number"));
        }
        Err(bad("unknown device"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gcnArchName strings as real devices report them.
    const DEVICES: [&str; 8] = [
        "gfx906:sramecc+:xnack-",
        "gfx908:sramecc+:xnack-",
        "gfx90a:sramecc+:xnack-",
        "gfx90a:sramecc+:xnack+",
        "gfx942:sramecc+:xnack-",
        "gfx1030",
        "gfx1100",
        "gfx1201",
    ];

    #[test]
    fn any_features_run_in_either_mode() {
        assert!(compatible("gfx90a", "gfx90a:sramecc+:xnack-"));
        assert!(compatible("gfx90a", "gfx90a:sramecc+:xnack+"));
        assert!(compatible("gfx90a:xnack-", "gfx90a:sramecc+:xnack-"));
        assert!(!compatible("gfx90a:xnack-", "gfx90a:sramecc+:xnack+"));
        assert!(!compatible("gfx90a:sramecc-", "gfx90a:sramecc+:xnack-"));
        assert!(compatible(
            "gfx942:sramecc+:xnack-",
            "gfx942:sramecc+:xnack-"
        ));
        assert!(!compatible("gfx942", "gfx90a:sramecc+:xnack-"));
        assert!(!compatible("gfx1100", "gfx1101"));
    }

    #[test]
    fn every_real_device_accepts_its_own_processor_and_refuses_others() {
        for d in DEVICES {
            let p = TargetId::parse_lenient(d).processor;
            assert!(compatible(&p, d), "{d}");
            assert!(compatible(d, d), "{d}");
            for other in DEVICES
                .iter()
                .filter(|o| TargetId::parse_lenient(o).processor != p)
            {
                assert!(!compatible(other, d), "{other} on {d}");
            }
        }
    }

    #[test]
    fn mismatch_names_both_and_the_fix() {
        let e = check_target("gfx942", "gfx90a:sramecc+:xnack-", 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("for gfx942 but device 0 is gfx90a:sramecc+:xnack-"),
            "{e}"
        );
        assert!(e.contains("--mcpu gfx90a"), "{e}");
    }

    #[test]
    fn code_object_versions_follow_the_runtime() {
        assert_eq!(max_code_object_version(50_221_153), 4);
        assert_eq!(max_code_object_version(50_300_000), 5);
        assert_eq!(max_code_object_version(60_241_134), 5);
        assert_eq!(max_code_object_version(60_300_000), 6);
        let e = check_code_object_version(5, 50_221_153)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("HIP runtime 5.2.21153 loads versions up to 4")
                && e.contains("--code-object-version 4"),
            "{e}"
        );
        assert!(check_code_object_version(4, 50_221_153).is_ok());
    }

    #[test]
    fn device_selection_syntax() {
        assert_eq!(
            DeviceSelector::parse("amdgpu").unwrap(),
            DeviceSelector::Default
        );
        assert_eq!(
            DeviceSelector::parse("amdgpu:3").unwrap(),
            DeviceSelector::Index(3)
        );
        assert_eq!(
            DeviceSelector::parse("amdgpu://GPU-5FA1B2").unwrap(),
            DeviceSelector::Uuid("5fa1b2".into())
        );
        for bad in [
            "gpu",
            "amdgpu:x",
            "amdgpu://5FA1",
            "amdgpu://GPU-zz",
            "cuda:0",
        ] {
            assert!(DeviceSelector::parse(bad).is_err(), "{bad}");
        }
    }
}
