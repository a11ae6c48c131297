//! Where a device name becomes a [`Device`]: `remote://HOST:PORT/DEVICE`
//! connects to a worker; `cpu`, `cuda:N` and `amdgpu:N` (or
//! `amdgpu://GPU-<uuid>`) open this machine's runtimes directly. Every
//! caller (`rocmc run`, the tuner, the worker's sessions) opens devices
//! here and then uses only the [`Device`] interface.

use crate::client::RemoteError;
use crate::proto::{DeviceInfo, WireArg};
use rocmc_device::launch::{ArgRole, KernelLaunch};
use rocmc_device::{Device, Error, Result};

/// The devices this machine has (run in a fresh process where a GPU
/// runtime must not stay initialised: see [`crate::server`]).
pub fn list_devices() -> Vec<DeviceInfo> {
    let mut out = Vec::new();
    if rocmc_target::CpuTarget::parse("x86-64").is_some_and(|t| t.runs_here()) {
        out.push(rocmc_runtime_cpu::CpuDevice::open().info().clone());
    }
    if let Ok(cuda) = rocmc_runtime_cuda::Cuda::load() {
        for i in 0..cuda.device_count().unwrap_or(0) {
            out.extend(rocmc_runtime_cuda::device::info(&cuda, i).ok());
        }
    }
    if let Ok(hip) = rocmc_runtime_hip::Hip::load() {
        for i in 0..hip.device_count().unwrap_or(0) {
            out.extend(rocmc_runtime_hip::device::info(&hip, i).ok());
        }
    }
    out
}

/// Opens a device of this machine by name. A device the machine lacks
/// (no runtime, no GPU, no such index) is refused naming the devices it
/// has and why the runtime found none.
pub fn open_local(name: &str) -> Result<Box<dyn Device>> {
    let opened: Result<Box<dyn Device>> = if name == "cpu" {
        if rocmc_target::CpuTarget::parse("x86-64").is_some_and(|t| t.runs_here()) {
            Ok(Box::new(rocmc_runtime_cpu::CpuDevice::open()))
        } else {
            Err(Error::NoDevice(
                "the cpu device runs x86-64 shared objects, on x86-64 Linux only".into(),
            ))
        }
    } else if name.starts_with("cuda") {
        rocmc_runtime_cuda::CudaDevice::open(name).map(|d| Box::new(d) as _)
    } else if name.starts_with("amdgpu") {
        rocmc_runtime_hip::HipDevice::open(name).map(|d| Box::new(d) as _)
    } else {
        Err(Error::NoDevice(
            "devices are named cpu, cuda:N, amdgpu:N, amdgpu://GPU-<uuid> or remote://HOST:PORT/DEVICE".into(),
        ))
    };
    opened.map_err(|e| match e {
        Error::NoDevice(why) => {
            let have = list_devices()
                .iter()
                .map(|d| format!("{} ({})", d.name, d.target))
                .collect::<Vec<_>>()
                .join(", ");
            Error::NoDevice(format!(
                "no device `{name}`; this machine has: {have} ({why})"
            ))
        }
        other => other,
    })
}

/// Opens `remote://HOST:PORT/DEVICE` (with the connection options from the
/// environment) or a device of this machine.
pub fn open(name: &str) -> Result<Box<dyn Device>> {
    if name.starts_with("remote://") {
        Ok(Box::new(crate::RemoteDevice::connect(
            name,
            &Default::default(),
        )?))
    } else {
        open_local(name)
    }
}

impl From<RemoteError> for Error {
    fn from(e: RemoteError) -> Error {
        match e {
            RemoteError::Address(m) | RemoteError::Local(m) => Error::NoDevice(m),
            RemoteError::BadLaunch { kernel, reason } => Error::BadLaunch { kernel, reason },
            RemoteError::Worker { addr, message } => Error::Runtime {
                device: format!("worker {addr}"),
                message,
            },
            other => Error::Transport(Box::new(other)),
        }
    }
}

/// The elements of each tensor's bytes in `host` (one byte vector per
/// tensor of `k`): the lengths [`wire_args`] takes.
pub fn element_counts(k: &rocmc_ir::Kernel, host: &[Vec<u8>]) -> Vec<u64> {
    k.tensors
        .iter()
        .zip(host)
        .map(|(t, b)| (b.len() / t.dtype.size()) as u64)
        .collect()
}

/// A kernel's arguments on the wire: each argument of the launch document
/// matched by name to the kernel's tensors (buffer `ids[i]` of `lens[i]`
/// elements), sizes and parameters (8-byte slots of `pbytes`).
pub fn wire_args(
    k: &rocmc_ir::Kernel,
    kl: &KernelLaunch,
    ids: &[u32],
    lens: &[u64],
    sizes: &[i64],
    pbytes: &[u8],
) -> std::result::Result<Vec<WireArg>, String> {
    let find = |what: &str, i: Option<usize>, name: &str| {
        i.ok_or_else(|| format!("the launch document names {what} `{name}` the kernel lacks"))
    };
    kl.args
        .iter()
        .map(|a| {
            Ok(match a.role {
                ArgRole::Buffer => {
                    let i = find(
                        "tensor",
                        k.tensors.iter().position(|t| t.name == a.name),
                        &a.name,
                    )?;
                    let t = &k.tensors[i];
                    WireArg::Buffer {
                        id: ids[i],
                        dtype: t.dtype.name().into(),
                        len: lens[i],
                        offset: 0,
                    }
                }
                ArgRole::Size => {
                    let i = find(
                        "size",
                        k.sizes.iter().position(|s| s.name == a.name),
                        &a.name,
                    )?;
                    WireArg::Size(sizes[i] as i32)
                }
                ArgRole::Scalar => {
                    let i = find(
                        "parameter",
                        k.params.iter().position(|p| p.name == a.name),
                        &a.name,
                    )?;
                    let t = k.params[i].dtype;
                    WireArg::Scalar {
                        dtype: t.name().into(),
                        bytes: pbytes[i * 8..i * 8 + t.size()].to_vec(),
                    }
                }
            })
        })
        .collect()
}
