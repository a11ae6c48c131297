//! Errors of the runtime: every HIP failure carries the HIP error name and
//! what rocmc was doing.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("HIP runtime not found (looked in {}; set ROCMC_HIP_LIBRARY to the file or its folder)", looked_in.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotFound { looked_in: Vec<PathBuf> },
    #[error("{path}: not a usable HIP runtime: {reason}")]
    BadLibrary { path: PathBuf, reason: String },
    #[error("no AMD GPU visible ({detail}){}", env_hint())]
    NoDevice { detail: String },
    #[error("{doing}: {name} (HIP error {code})")]
    Hip {
        code: i32,
        name: String,
        doing: String,
    },
    #[error("device `{0}`: {1}")]
    DeviceSelection(String, String),
    #[error("{0}")]
    Incompatible(String),
    #[error("launch of `{kernel}`: {reason}")]
    BadLaunch { kernel: String, reason: String },
    #[error("code object: {0}")]
    CodeObject(#[from] rocmc_linker::codeobject::ReadError),
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

pub type Result<T> = std::result::Result<T, Error>;
