//! Errors of the runtime: every HIP failure carries the HIP error name and
//! what rocmc was doing.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
/// What went wrong, with enough context to act on.
pub enum Error {
    #[error("HIP runtime not found (looked in {}; set ROCMC_HIP_LIBRARY to the file or its folder)", looked_in.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    /// No HIP runtime library could be loaded.
    NotFound {
        /// Every file or soname tried.
        looked_in: Vec<PathBuf>,
    },
    #[error("{path}: not a usable HIP runtime: {reason}")]
    /// A library was found but lacks HIP's API.
    BadLibrary {
        /// The library file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    #[error("no AMD GPU visible ({detail}){}", env_hint())]
    /// HIP is loaded but sees no AMD GPU.
    NoDevice {
        /// Which call said so, through which library.
        detail: String,
    },
    #[error("{doing}: {name} (HIP error {code})")]
    /// A HIP call failed: the HIP error and what rocmc was doing.
    Hip {
        /// HIP's error code.
        code: i32,
        /// HIP's error name, e.g. `hipErrorOutOfMemory`.
        name: String,
        /// What rocmc was doing.
        doing: String,
    },
    #[error("device `{0}`: {1}")]
    /// A device selector that names no visible device.
    DeviceSelection(String, String),
    #[error("{0}")]
    /// The code object does not fit the device or runtime.
    Incompatible(String),
    #[error("launch of `{kernel}`: {reason}")]
    /// A launch whose arguments do not match the kernel.
    BadLaunch {
        /// The kernel's name.
        kernel: String,
        /// Which argument is wrong, and how.
        reason: String,
    },
    #[error("code object: {0}")]
    /// An unreadable code object or bundle.
    CodeObject(#[from] rocmc_device::codeobject::ReadError),
}

fn env_hint() -> String {
    let vars: Vec<String> = [
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ]
    .iter()
    .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
    .collect();
    if vars.is_empty() {
        String::new()
    } else {
        format!("; note {}", vars.join(", "))
    }
}

/// Results of the runtime.
pub type Result<T> = std::result::Result<T, Error>;
