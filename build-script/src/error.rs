use std::fmt;
use std::path::PathBuf;

/// Why a build did not produce its kernels.
#[derive(Debug)]
pub enum Error {
    /// No `rocmc` executable was found and no offline kernels were named.
    NoCompiler {
        /// Where it was looked for, in order.
        searched: String,
    },
    /// `ROCMC` names a file that is not there.
    BadRocmc(PathBuf),
    /// `rocmc` ran and refused: its message (file, line and column of a
    /// kernel mistake), printed once.
    Failed {
        /// The executable that ran.
        rocmc: PathBuf,
        /// What it printed to stderr.
        message: String,
    },
    /// The offline kernels are missing or do not match the build's inputs.
    Offline {
        /// The offline folder.
        dir: PathBuf,
        /// What differs, one item per line.
        why: String,
    },
    /// A mistake in the build script's use of this crate.
    Usage(String),
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// How to refresh the offline kernels, said wherever they fall short.
pub(crate) const REFRESH: &str =
    "with rocmc installed, build once with ROCMC_OFFLINE=write to write them anew";

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoCompiler { searched } => write!(
                f,
                "rocmc-build: no `rocmc` executable found ({searched}); install it \
                 (`pip install rocmc`, or `cargo install --path compiler` in rocmc's \
                 repository), set ROCMC to its path, or commit offline kernels \
                 (Build::offline, docs/own-crate.md)"
            ),
            Error::BadRocmc(p) => write!(
                f,
                "rocmc-build: ROCMC={} is not an executable file",
                p.display()
            ),
            Error::Failed { message, .. } => f.write_str(message.trim_end()),
            Error::Offline { dir, why } => write!(
                f,
                "rocmc-build: the offline kernels in {} cannot be used:\n{}\n{REFRESH}",
                dir.display(),
                why.trim_end()
            ),
            Error::Usage(m) => write!(f, "rocmc-build: {m}"),
            Error::Io { path, source } => {
                write!(f, "rocmc-build: {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The error of an I/O failure on `path`.
pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}
