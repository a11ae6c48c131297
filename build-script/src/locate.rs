//! Finding the `rocmc` executable: `Build::rocmc`, then `ROCMC`, then `PATH`
//! (where `pip install rocmc` and `cargo install` put it).

use crate::Error;
use std::path::{Path, PathBuf};

/// Environment variable naming the `rocmc` executable.
pub const ROCMC_ENV: &str = "ROCMC";

fn executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// The executable to run, `None` when there is none (the offline kernels
/// may then serve), or an error when `ROCMC` names a missing file: a
/// variable set by hand that points nowhere is a mistake, not an absence.
pub fn find(given: Option<&Path>) -> Result<Option<PathBuf>, Error> {
    if let Some(p) = given {
        return if executable(p) {
            Ok(Some(p.to_path_buf()))
        } else {
            Err(Error::BadRocmc(p.to_path_buf()))
        };
    }
    if let Some(v) = std::env::var_os(ROCMC_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        return if executable(&p) {
            Ok(Some(p))
        } else {
            Err(Error::BadRocmc(p))
        };
    }
    let name = if cfg!(windows) { "rocmc.exe" } else { "rocmc" };
    Ok(std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| executable(p))
    }))
}

/// Where [`find`] looked, for the message when it found nothing.
pub fn searched() -> String {
    format!("{ROCMC_ENV} is not set and no `rocmc` is on PATH")
}
