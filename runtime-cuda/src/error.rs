//! Errors of the CUDA runtime: every driver failure carries the CUDA error
//! name and what rocmc was doing.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
/// What went wrong, with enough context to act on.
pub enum Error {
    #[error("CUDA driver not found (looked in {}; set ROCMC_CUDA_LIBRARY to libcuda.so.1 or its folder)", looked_in.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    /// No CUDA driver library could be loaded.
    NotFound {
        /// Every file or soname tried.
        looked_in: Vec<PathBuf>,
    },
    #[error("{path}: not a usable CUDA driver: {reason}")]
    /// A library was found but lacks the driver API.
    BadLibrary {
        /// The library file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    #[error("no NVIDIA GPU visible ({detail}){}", env_hint())]
    /// The driver is loaded but sees no GPU.
    NoDevice {
        /// Which call said so, through which library.
        detail: String,
    },
    #[error("{doing}: {name} (CUDA error {code})")]
    /// A driver call failed.
    Cuda {
        /// The driver's error code.
        code: i32,
        /// Its name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// What rocmc was doing.
        doing: String,
    },
    #[error("device `{0}`: {1}")]
    /// A device selector that names no visible device.
    DeviceSelection(String, String),
    #[error("{0}")]
    /// The PTX does not fit the device or the driver.
    Incompatible(String),
    #[error("the CUDA driver could not compile the PTX for {device}: {name}\n{log}")]
    /// The driver's PTX compiler refused the module; its error log.
    Jit {
        /// The device compiled for.
        device: String,
        /// The driver's error name.
        name: String,
        /// The JIT's error log.
        log: String,
    },
    #[error("launch of `{kernel}`: {reason}")]
    /// A launch whose arguments do not match the kernel.
    BadLaunch {
        /// The kernel's name.
        kernel: String,
        /// Which argument is wrong, and how.
        reason: String,
    },
    #[error("PTX module: {0}")]
    /// PTX that rocmc did not write, or that is damaged.
    Ptx(String),
}

fn env_hint() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("; note CUDA_VISIBLE_DEVICES={v}"),
        Err(_) => String::new(),
    }
}

/// Results of the runtime.
pub type Result<T> = std::result::Result<T, Error>;
