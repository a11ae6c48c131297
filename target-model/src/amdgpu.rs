//! AMDGPU targets: processors, target IDs (`gfx90a:xnack-`), wave size and
//! code-object version. The processor table is LLVM 22's, copied here so
//! that the runtimes (which link no LLVM) share it; a test in
//! rocmc-codegen compares it with the linked LLVM.

use std::fmt;

/// Product names accepted for `--mcpu`, and the processor each one is.
pub const PRODUCT_ALIASES: &[(&str, &str)] = &[
    ("mi50", "gfx906"),
    ("mi60", "gfx906"),
    ("radeon-vii", "gfx906"),
    ("vega64", "gfx900"),
    ("mi100", "gfx908"),
    ("mi210", "gfx90a"),
    ("mi250", "gfx90a"),
    ("mi250x", "gfx90a"),
    ("mi300a", "gfx942"),
    ("mi300x", "gfx942"),
    ("mi325x", "gfx942"),
    ("mi350x", "gfx950"),
    ("mi355x", "gfx950"),
    ("rx6800xt", "gfx1030"),
    ("rx6900xt", "gfx1030"),
    ("w6800", "gfx1030"),
    ("rx6700xt", "gfx1031"),
    ("rx7900xtx", "gfx1100"),
    ("rx7900xt", "gfx1100"),
    ("w7900", "gfx1100"),
    ("rx7800xt", "gfx1101"),
    ("rx7600", "gfx1102"),
    ("rx9070xt", "gfx1201"),
    ("rx9070", "gfx1201"),
    ("rx9060xt", "gfx1200"),
];

/// The canonical `gfx` name of `name`: itself, a product alias
/// (`mi300x` → `gfx942`, case and `-`/`_` ignored) or one of LLVM's legacy
/// names (`tahiti` → `gfx600`). `None` if nothing matches.
pub fn canonical_processor(name: &str) -> Option<String> {
    let key: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .collect();
    if let Some((_, p)) = PRODUCT_ALIASES
        .iter()
        .find(|(a, _)| a.replace('-', "") == key)
    {
        return Some(p.to_string());
    }
    PROCESSORS
        .iter()
        .find(|e| e.name == name)
        .map(|e| e.canonical.to_string())
}

/// Every processor under its canonical name (no legacy names), in LLVM's order.
pub fn canonical_processors() -> Vec<String> {
    processors()
        .into_iter()
        .filter(|p| p.starts_with("gfx"))
        .collect()
}

/// Other names for a processor: LLVM's legacy names and product aliases.
pub fn aliases_of(processor: &str) -> Vec<String> {
    let mut v: Vec<String> = processors()
        .into_iter()
        .filter(|p| !p.starts_with("gfx") && canonical_processor(p).as_deref() == Some(processor))
        .collect();
    v.extend(
        PRODUCT_ALIASES
            .iter()
            .filter(|(_, p)| *p == processor)
            .map(|(a, _)| a.to_string()),
    );
    v
}

/// One entry of LLVM 22's AMDGCN processor table (`llvm::AMDGPU`'s
/// `parseArchAMDGCN`/`getArchAttrAMDGCN`): a name (canonical `gfxNNN` or a
/// legacy one), the canonical processor it is, and its xnack, sramecc and
/// wave32 support. rocmc-codegen's tests check this table against
/// the LLVM it links, entry by entry, so it cannot drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableEntry {
    pub name: &'static str,
    pub canonical: &'static str,
    pub xnack: bool,
    pub sramecc: bool,
    pub wave32: bool,
}

const fn p(
    name: &'static str,
    canonical: &'static str,
    xnack: bool,
    sramecc: bool,
    wave32: bool,
) -> TableEntry {
    TableEntry {
        name,
        canonical,
        xnack,
        sramecc,
        wave32,
    }
}

/// LLVM 22's AMDGCN processors, in LLVM's order.
pub const PROCESSORS: &[TableEntry] = &[
    p("gfx600", "gfx600", false, false, false),
    p("tahiti", "gfx600", false, false, false),
    p("gfx601", "gfx601", false, false, false),
    p("pitcairn", "gfx601", false, false, false),
    p("verde", "gfx601", false, false, false),
    p("gfx602", "gfx602", false, false, false),
    p("hainan", "gfx602", false, false, false),
    p("oland", "gfx602", false, false, false),
    p("gfx700", "gfx700", false, false, false),
    p("kaveri", "gfx700", false, false, false),
    p("gfx701", "gfx701", false, false, false),
    p("hawaii", "gfx701", false, false, false),
    p("gfx702", "gfx702", false, false, false),
    p("gfx703", "gfx703", false, false, false),
    p("kabini", "gfx703", false, false, false),
    p("mullins", "gfx703", false, false, false),
    p("gfx704", "gfx704", false, false, false),
    p("bonaire", "gfx704", false, false, false),
    p("gfx705", "gfx705", false, false, false),
    p("gfx801", "gfx801", true, false, false),
    p("carrizo", "gfx801", true, false, false),
    p("gfx802", "gfx802", false, false, false),
    p("iceland", "gfx802", false, false, false),
    p("tonga", "gfx802", false, false, false),
    p("gfx803", "gfx803", false, false, false),
    p("fiji", "gfx803", false, false, false),
    p("polaris10", "gfx803", false, false, false),
    p("polaris11", "gfx803", false, false, false),
    p("gfx805", "gfx805", false, false, false),
    p("tongapro", "gfx805", false, false, false),
    p("gfx810", "gfx810", true, false, false),
    p("stoney", "gfx810", true, false, false),
    p("gfx900", "gfx900", true, false, false),
    p("gfx902", "gfx902", true, false, false),
    p("gfx904", "gfx904", true, false, false),
    p("gfx906", "gfx906", true, true, false),
    p("gfx908", "gfx908", true, true, false),
    p("gfx909", "gfx909", true, false, false),
    p("gfx90a", "gfx90a", true, true, false),
    p("gfx90c", "gfx90c", true, false, false),
    p("gfx942", "gfx942", true, true, false),
    p("gfx950", "gfx950", true, true, false),
    p("gfx1010", "gfx1010", true, false, true),
    p("gfx1011", "gfx1011", true, false, true),
    p("gfx1012", "gfx1012", true, false, true),
    p("gfx1013", "gfx1013", true, false, true),
    p("gfx1030", "gfx1030", false, false, true),
    p("gfx1031", "gfx1031", false, false, true),
    p("gfx1032", "gfx1032", false, false, true),
    p("gfx1033", "gfx1033", false, false, true),
    p("gfx1034", "gfx1034", false, false, true),
    p("gfx1035", "gfx1035", false, false, true),
    p("gfx1036", "gfx1036", false, false, true),
    p("gfx1100", "gfx1100", false, false, true),
    p("gfx1101", "gfx1101", false, false, true),
    p("gfx1102", "gfx1102", false, false, true),
    p("gfx1103", "gfx1103", false, false, true),
    p("gfx1150", "gfx1150", false, false, true),
    p("gfx1151", "gfx1151", false, false, true),
    p("gfx1152", "gfx1152", false, false, true),
    p("gfx1153", "gfx1153", false, false, true),
    p("gfx1200", "gfx1200", false, false, true),
    p("gfx1201", "gfx1201", false, false, true),
    p("gfx1250", "gfx1250", false, false, true),
    p("gfx1251", "gfx1251", false, false, true),
    p("gfx9-generic", "gfx9-generic", true, false, false),
    p("gfx10-1-generic", "gfx10-1-generic", true, false, true),
    p("gfx10-3-generic", "gfx10-3-generic", false, false, true),
    p("gfx11-generic", "gfx11-generic", false, false, true),
    p("gfx12-generic", "gfx12-generic", false, false, true),
    p("gfx9-4-generic", "gfx9-4-generic", true, true, false),
];

/// Every AMDGCN processor name LLVM 22 knows (canonical and legacy), in LLVM's order.
pub fn processors() -> Vec<String> {
    PROCESSORS.iter().map(|e| e.name.to_string()).collect()
}

/// A processor's properties as LLVM's table gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessorInfo {
    pub supports_xnack: bool,
    pub supports_sramecc: bool,
    /// gfx10 and later run wave32 by default and may choose wave64.
    pub wave32: bool,
}

pub fn processor_info(name: &str) -> Option<ProcessorInfo> {
    // Legacy names resolve through `canonical_processor`; only canonical names are target IDs.
    PROCESSORS
        .iter()
        .find(|e| e.name == name && e.canonical == name)
        .map(|e| ProcessorInfo {
            supports_xnack: e.xnack,
            supports_sramecc: e.sramecc,
            wave32: e.wave32,
        })
}

/// The state of a target feature in a target ID. `Any` (unset) makes code
/// that loads in either mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FeatureMode {
    #[default]
    Any,
    On,
    Off,
}

/// A processor plus its xnack/sramecc settings, e.g. `gfx942:sramecc+:xnack-`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetId {
    pub processor: String,
    pub sramecc: FeatureMode,
    pub xnack: FeatureMode,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("unknown AMDGPU processor `{name}`{}", suggestion(.near))]
    UnknownProcessor { name: String, near: Vec<String> },
    #[error("unknown NVIDIA processor `{name}`{}", suggestion(.near))]
    UnknownNvidiaProcessor { name: String, near: Vec<String> },
    #[error("target ID `{id}`: {reason}")]
    BadFeature { id: String, reason: String },
    #[error("{0}")]
    Unsupported(String),
}

fn suggestion(near: &[String]) -> String {
    if near.is_empty() {
        "; run `rocmc targets` for the list".into()
    } else {
        format!(
            "; did you mean {}? (run `rocmc targets` for the list)",
            near.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Nearest names to `name` among `all`, by edit distance.
pub(crate) fn nearest_of(name: &str, all: &[String]) -> Vec<String> {
    nearest(name, all)
}

/// Nearest processor names, by edit distance on the part after `gfx`.
fn nearest(name: &str, all: &[String]) -> Vec<String> {
    let mut scored: Vec<(usize, &String)> = all
        .iter()
        .map(|p| (strsim::damerau_levenshtein(&name.to_lowercase(), p), p))
        .collect();
    scored.sort();
    let best = scored.first().map_or(usize::MAX, |s| s.0);
    scored
        .into_iter()
        .filter(|(d, _)| *d <= best.max(1) && *d <= 3)
        .take(4)
        .map(|(_, p)| p.clone())
        .collect()
}

impl TargetId {
    pub fn parse(s: &str) -> Result<TargetId, TargetError> {
        let mut parts = s.split(':');
        let written = parts.next().unwrap_or_default().to_string();
        let Some(processor) = canonical_processor(&written) else {
            let mut all = canonical_processors();
            all.extend(PRODUCT_ALIASES.iter().map(|(a, _)| a.to_string()));
            return Err(TargetError::UnknownProcessor {
                near: nearest(&written, &all),
                name: written,
            });
        };
        let Some(info) = processor_info(&processor) else {
            return Err(TargetError::UnknownProcessor {
                near: vec![],
                name: written,
            });
        };
        let mut id = TargetId {
            processor,
            sramecc: FeatureMode::Any,
            xnack: FeatureMode::Any,
        };
        let bad = |reason: String| TargetError::BadFeature {
            id: s.to_string(),
            reason,
        };
        let mut seen = Vec::new();
        for f in parts {
            let (name, mode) = match f.strip_suffix('+') {
                Some(n) => (n, FeatureMode::On),
                None => match f.strip_suffix('-') {
                    Some(n) => (n, FeatureMode::Off),
                    None => {
                        return Err(bad(format!(
                            "feature `{f}` needs `+` or `-` (e.g. `xnack-`)"
                        )))
                    }
                },
            };
            if seen.contains(&name) {
                return Err(bad(format!("`{name}` is given more than once")));
            }
            seen.push(name);
            match name {
                "xnack" if info.supports_xnack => id.xnack = mode,
                "sramecc" if info.supports_sramecc => id.sramecc = mode,
                "xnack" | "sramecc" => {
                    return Err(bad(format!("{} has no `{name}` setting", id.processor)))
                }
                other => {
                    return Err(bad(format!(
                        "unknown feature `{other}`; target IDs accept `xnack` and `sramecc`"
                    )))
                }
            }
        }
        Ok(id)
    }

    pub fn info(&self) -> ProcessorInfo {
        processor_info(&self.processor).expect("a parsed target ID names a known processor")
    }

    /// LLVM subtarget features for this ID (`+xnack`, `-sramecc`, ...).
    pub fn llvm_features(&self) -> Vec<String> {
        let mut f = Vec::new();
        for (name, mode) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            match mode {
                FeatureMode::On => f.push(format!("+{name}")),
                FeatureMode::Off => f.push(format!("-{name}")),
                FeatureMode::Any => {}
            }
        }
        f
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        // Canonical order is alphabetical: sramecc before xnack.
        for (name, mode) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            match mode {
                FeatureMode::On => write!(f, ":{name}+")?,
                FeatureMode::Off => write!(f, ":{name}-")?,
                FeatureMode::Any => {}
            }
        }
        Ok(())
    }
}

/// Everything that selects the machine code: target ID, wave size, code-object version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AmdTarget {
    pub id: TargetId,
    pub wave64: bool,
    pub code_object_version: u32,
}

pub const CODE_OBJECT_VERSIONS: [u32; 3] = [4, 5, 6];
pub const DEFAULT_CODE_OBJECT_VERSION: u32 = 5;

impl AmdTarget {
    /// `wave_size`: `None` for the processor's default (64 on gfx9 and
    /// older, 32 on gfx10 and later), or 32 / 64 explicitly.
    pub fn new(
        id: TargetId,
        wave_size: Option<u32>,
        code_object_version: u32,
    ) -> Result<AmdTarget, TargetError> {
        if !CODE_OBJECT_VERSIONS.contains(&code_object_version) {
            return Err(TargetError::Unsupported(format!(
                "code object version {code_object_version} is not supported; choose 4, 5 (default) or 6"
            )));
        }
        if id.processor.contains("generic") && code_object_version < 6 {
            return Err(TargetError::Unsupported(format!(
                "{} is a generic target and needs code object version 6 (--code-object-version 6)",
                id.processor
            )));
        }
        let has_wave32 = id.info().wave32;
        let wave64 = match wave_size {
            None => !has_wave32,
            Some(64) => true,
            Some(32) if has_wave32 => false,
            Some(32) => {
                return Err(TargetError::Unsupported(format!(
                    "{} runs only 64-wide waves; wave32 needs gfx10 or later",
                    id.processor
                )))
            }
            Some(w) => {
                return Err(TargetError::Unsupported(format!(
                    "wave size {w} does not exist; AMD GPUs run 32- or 64-wide waves"
                )))
            }
        };
        Ok(AmdTarget {
            id,
            wave64,
            code_object_version,
        })
    }

    pub fn wavefront_size(&self) -> u32 {
        if self.wave64 {
            64
        } else {
            32
        }
    }

    pub fn llvm_features(&self) -> String {
        let mut f = self.id.llvm_features();
        if self.id.info().wave32 {
            f.push(if self.wave64 {
                "+wavefrontsize64".into()
            } else {
                "+wavefrontsize32".into()
            });
        }
        f.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_the_processors_we_test() {
        let p = processors();
        for name in [
            "gfx900", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201",
        ] {
            assert!(p.iter().any(|x| x == name), "{name} missing from {p:?}");
        }
    }

    #[test]
    fn target_ids_parse_and_print_canonically() {
        let t = TargetId::parse("gfx942:xnack-:sramecc+").unwrap();
        assert_eq!(t.to_string(), "gfx942:sramecc+:xnack-");
        assert_eq!(TargetId::parse("gfx90a").unwrap().xnack, FeatureMode::Any);
    }

    #[test]
    fn bad_target_ids_are_refused() {
        match TargetId::parse("gfx9O0") {
            Err(TargetError::UnknownProcessor { near, .. }) => {
                assert!(near.contains(&"gfx900".to_string()), "{near:?}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            TargetId::parse("gfx1100:xnack+"),
            Err(TargetError::BadFeature { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx90a:xnack+:xnack-"),
            Err(TargetError::BadFeature { .. })
        ));
        assert!(matches!(
            TargetId::parse("gfx90a:xnack"),
            Err(TargetError::BadFeature { .. })
        ));
    }

    #[test]
    fn aliases_resolve_to_processors() {
        assert_eq!(TargetId::parse("mi300x").unwrap().processor, "gfx942");
        assert_eq!(
            TargetId::parse("MI250X:xnack-").unwrap().to_string(),
            "gfx90a:xnack-"
        );
        assert_eq!(TargetId::parse("rx7900xtx").unwrap().processor, "gfx1100");
        assert_eq!(TargetId::parse("tahiti").unwrap().processor, "gfx600");
        assert!(aliases_of("gfx942").contains(&"mi300x".to_string()));
        for (_, p) in PRODUCT_ALIASES {
            assert!(
                processor_info(p).is_some(),
                "alias target {p} unknown to LLVM"
            );
        }
    }

    #[test]
    fn wave_size_follows_the_family() {
        let t = |s: &str, w| {
            AmdTarget::new(TargetId::parse(s).unwrap(), w, 5)
                .unwrap()
                .wavefront_size()
        };
        assert_eq!(t("gfx900", None), 64);
        assert_eq!(t("gfx1100", None), 32);
        assert_eq!(t("gfx1100", Some(64)), 64);
        assert_eq!(t("gfx1030", Some(32)), 32);
        assert!(AmdTarget::new(TargetId::parse("gfx900").unwrap(), Some(32), 5).is_err());
        assert!(AmdTarget::new(TargetId::parse("gfx900").unwrap(), None, 3).is_err());
        assert!(AmdTarget::new(TargetId::parse("gfx11-generic").unwrap(), None, 5).is_err());
        assert!(AmdTarget::new(TargetId::parse("gfx11-generic").unwrap(), None, 6).is_ok());
    }
}
