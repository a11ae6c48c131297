//! What both build APIs — this crate's and the linked `rocmc::Build` — read
//! from the environment, decided once: the offline manifest hashes the
//! inputs `rocmc-build` sees, which must be the ones the compile uses.

use std::path::{Path, PathBuf};

/// Environment variable that replaces the targets a build script names
/// (comma-separated target IDs), e.g. to build for the GPU at hand.
pub const MCPU_ENV: &str = "ROCMC_MCPU";

/// The tuning database a package keeps beside its Cargo.toml (the
/// tuner's `db::DEFAULT_FILE`; the compiler's tests check they agree).
pub const TUNING_FILE: &str = "rocmc-tuning.toml";

/// Whether to print `cargo:` lines: as given, else when run by Cargo
/// (`OUT_DIR` set).
pub fn cargo_metadata(given: Option<bool>) -> bool {
    given.unwrap_or_else(|| std::env::var_os("OUT_DIR").is_some())
}

/// Where to write: as given, else `OUT_DIR`.
pub fn out_dir(given: Option<&Path>) -> Result<PathBuf, String> {
    match given {
        Some(d) => Ok(d.to_path_buf()),
        None => std::env::var_os("OUT_DIR")
            .map(PathBuf::from)
            .ok_or_else(|| "OUT_DIR is not set: run from a build script or call out_dir()".into()),
    }
}

/// The targets, comma-separated: `ROCMC_MCPU` when set, else the script's.
pub fn targets(given: &[String]) -> Result<String, String> {
    match std::env::var(MCPU_ENV) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ if given.is_empty() => Err(format!(
            "no target; call .mcpu(\"gfx942\") or set {MCPU_ENV}"
        )),
        _ => Ok(given.join(",")),
    }
}

/// Whether `path` is a kernel file the build script itself wrote (under
/// `OUT_DIR`): declared to Cargo, it would be newer than the run and rerun
/// the script on every build.
pub fn generated(path: &Path) -> bool {
    std::env::var_os("OUT_DIR").is_some_and(|o| path.starts_with(o))
}

/// The tuning database a build reads: as given, else `TUNING_FILE` in
/// the package's folder when there is one; none with `no_tuning`.
pub fn tuning_database(given: Option<&Path>, no_tuning: bool) -> Option<PathBuf> {
    if no_tuning {
        return None;
    }
    given.map(Path::to_path_buf).or_else(|| {
        let d = std::env::var_os("CARGO_MANIFEST_DIR")?;
        Some(Path::new(&d).join(TUNING_FILE)).filter(|p| p.exists())
    })
}
