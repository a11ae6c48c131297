//! Which of a launcher's embedded modules a device loads: the AMD bundle
//! on `gfx…` devices (the runtime picks the code object inside), the
//! newest PTX a CUDA device runs, the CPU's shared object.

use crate::{DeviceInfo, Error, Result};

/// One kernel file's compiled code for every target a build named (what
/// `rocmc::Build::any_device` embeds in each launcher).
#[derive(Clone, Copy, Debug)]
pub struct Code {
    /// The kernel's name, for errors.
    pub kernel: &'static str,
    /// The offload bundle of the AMD targets, if any.
    pub amd: Option<&'static [u8]>,
    /// `(sm_NN, PTX)` of each NVIDIA target.
    pub ptx: &'static [(&'static str, &'static str)],
    /// `(target, shared object)` of each CPU target.
    pub cpu: &'static [(&'static str, &'static [u8])],
}

/// `sm_90a` as (90, true); `None` for anything else.
fn sm(target: &str) -> Option<(u32, bool)> {
    let n = target.strip_prefix("sm_")?;
    let (digits, arch) = match n.strip_suffix('a') {
        Some(d) => (d, true),
        None => (n, false),
    };
    Some((digits.parse().ok()?, arch))
}

impl Code {
    /// The module to load on the device `info` describes.
    pub fn for_device(&self, info: &DeviceInfo) -> Result<&'static [u8]> {
        let processor = info.processor();
        let found = if processor.starts_with("gfx") {
            self.amd
        } else if let Some((have, _)) = sm(processor) {
            // PTX runs on its own and later processors; `a` targets
            // (architecture-specific features) on their own only.
            self.ptx
                .iter()
                .filter_map(|(t, text)| sm(t).map(|s| (s, text)))
                .filter(|((n, arch), _)| if *arch { *n == have } else { *n <= have })
                .max_by_key(|(s, _)| *s)
                .map(|(_, text)| text.as_bytes())
        } else {
            self.cpu
                .iter()
                .find(|(t, _)| *t == processor)
                .map(|(_, so)| *so)
        };
        found.ok_or_else(|| {
            let mut built: Vec<&str> = self.ptx.iter().map(|(t, _)| *t).collect();
            built.extend(self.cpu.iter().map(|(t, _)| *t));
            if self.amd.is_some() {
                built.push("AMD (gfx…)");
            }
            Error::BadModule(format!(
                "kernel `{}` has no code for device {} ({}); it was built for {}: add .mcpu(\"{}\") to the build script",
                self.kernel,
                info.name,
                info.target,
                if built.is_empty() { "nothing".into() } else { built.join(", ") },
                processor
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(target: &str) -> DeviceInfo {
        DeviceInfo {
            name: "d".into(),
            target: target.into(),
            description: String::new(),
            memory: 0,
            code_object_version: 0,
        }
    }

    const CODE: Code = Code {
        kernel: "k",
        amd: Some(b"bundle"),
        ptx: &[("sm_80", "p80"), ("sm_90a", "p90a"), ("sm_86", "p86")],
        cpu: &[("x86-64", b"so")],
    };

    #[test]
    fn each_device_gets_its_vendors_newest_module() {
        let pick = |t| CODE.for_device(&dev(t)).map(|b| b.to_vec());
        assert_eq!(pick("gfx942:sramecc+:xnack-").unwrap(), b"bundle");
        assert_eq!(pick("sm_90").unwrap(), b"p90a");
        assert_eq!(pick("sm_89").unwrap(), b"p86");
        assert_eq!(pick("sm_80").unwrap(), b"p80");
        assert_eq!(pick("x86-64").unwrap(), b"so");
        let e = pick("sm_75").unwrap_err().to_string();
        assert!(
            e.contains("no code for device d (sm_75)")
                && e.contains("sm_80, sm_90a, sm_86, x86-64"),
            "{e}"
        );
    }

    #[test]
    fn arch_specific_ptx_only_on_its_own_processor() {
        let only_a = Code {
            ptx: &[("sm_90a", "p90a")],
            ..CODE
        };
        assert_eq!(only_a.for_device(&dev("sm_90")).unwrap(), b"p90a");
        assert!(only_a.for_device(&dev("sm_100")).is_err());
    }
}
