//! The runtime an application depends on: a device by name behind the one
//! device interface ([`Device`], from `rocmc-device`), each kind of device
//! a Cargo feature, so an application pulls only what it opens — a
//! CPU-only program (`default-features = false, features = ["cpu"]`) no
//! GPU runtime and no TLS.
//!
//! | name | feature | what opens it |
//! |---|---|---|
//! | `cpu` | `cpu` (default) | `rocmc-runtime-cpu`, x86-64 Linux |
//! | `amdgpu`, `amdgpu:N`, `amdgpu://GPU-<uuid>` | `hip` (default) | `rocmc-runtime-hip`, HIP loaded at run time |
//! | `cuda`, `cuda:N`, `cuda://GPU-<uuid>` | `cuda` (default) | `rocmc-runtime-cuda`, the CUDA driver loaded at run time |
//! | `remote://HOST:PORT/DEVICE` | `remote` | `rocmc-remote`: a worker's device over TLS |
//!
//! Launchers written by `rocmc_build::Build::any_device` take the opened
//! `&mut dyn Device`. The runtime's version is the compiler's: a module
//! runs on the runtime of the same minor version (0.1.x).

#![deny(missing_docs)]

pub use rocmc_device::{Code, Device, DeviceInfo, Error, Result, Tensor};

/// The device crate (tensors, launch documents, module readers).
pub use rocmc_device as device;
#[cfg(feature = "remote")]
pub use rocmc_remote as remote;
#[cfg(feature = "cpu")]
pub use rocmc_runtime_cpu as cpu;
#[cfg(feature = "cuda")]
pub use rocmc_runtime_cuda as cuda;
#[cfg(feature = "hip")]
pub use rocmc_runtime_hip as hip;

/// Whether the CPU device runs on this machine (x86-64 Linux).
#[cfg(feature = "cpu")]
fn cpu_here() -> bool {
    rocmc_target::CpuTarget::parse("x86-64").is_some_and(|t| t.runs_here())
}

/// The devices of this machine that the enabled features can open.
pub fn list_devices() -> Vec<DeviceInfo> {
    #[allow(unused_mut)]
    let mut out = Vec::new();
    #[cfg(feature = "cpu")]
    if cpu_here() {
        out.push(rocmc_runtime_cpu::CpuDevice::open().info().clone());
    }
    #[cfg(feature = "cuda")]
    if let Ok(cuda) = rocmc_runtime_cuda::Cuda::load() {
        for i in 0..cuda.device_count().unwrap_or(0) {
            out.extend(rocmc_runtime_cuda::device::info(&cuda, i).ok());
        }
    }
    #[cfg(feature = "hip")]
    if let Ok(hip) = rocmc_runtime_hip::Hip::load() {
        for i in 0..hip.device_count().unwrap_or(0) {
            out.extend(rocmc_runtime_hip::device::info(&hip, i).ok());
        }
    }
    out
}

/// The refusal of a device whose feature this program was built without.
#[allow(dead_code)]
fn without(name: &str, feature: &str) -> Error {
    Error::NoDevice(format!(
        "device `{name}`: this program was built without rocmc-runtime's `{feature}` feature"
    ))
}

/// Opens a device of this machine by name. A device the machine lacks
/// (no runtime, no GPU, no such index) is refused naming the devices it
/// has and why the runtime found none.
pub fn open_local(name: &str) -> Result<Box<dyn Device>> {
    let opened: Result<Box<dyn Device>> = if name == "cpu" {
        #[cfg(feature = "cpu")]
        {
            if cpu_here() {
                Ok(Box::new(rocmc_runtime_cpu::CpuDevice::open()))
            } else {
                Err(Error::NoDevice(
                    "the cpu device runs x86-64 shared objects, on x86-64 Linux only".into(),
                ))
            }
        }
        #[cfg(not(feature = "cpu"))]
        {
            return Err(without(name, "cpu"));
        }
    } else if name.starts_with("cuda") {
        #[cfg(feature = "cuda")]
        {
            rocmc_runtime_cuda::CudaDevice::open(name).map(|d| Box::new(d) as _)
        }
        #[cfg(not(feature = "cuda"))]
        {
            return Err(without(name, "cuda"));
        }
    } else if name.starts_with("amdgpu") {
        #[cfg(feature = "hip")]
        {
            rocmc_runtime_hip::HipDevice::open(name).map(|d| Box::new(d) as _)
        }
        #[cfg(not(feature = "hip"))]
        {
            return Err(without(name, "hip"));
        }
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
/// environment, `remote` feature) or a device of this machine.
pub fn open(name: &str) -> Result<Box<dyn Device>> {
    if name.starts_with("remote://") {
        #[cfg(feature = "remote")]
        {
            let d = rocmc_remote::RemoteDevice::connect(name, &Default::default())?;
            Ok(Box::new(d))
        }
        #[cfg(not(feature = "remote"))]
        {
            Err(without(name, "remote"))
        }
    } else {
        open_local(name)
    }
}

#[cfg(test)]
mod tests {
    /// Built without a kind of device, the program says which feature
    /// it lacks instead of claiming the machine has no such device.
    /// (`cargo test -p rocmc-runtime --no-default-features --features cpu`,
    /// run by tests/build_script.rs.)
    #[cfg(not(feature = "hip"))]
    #[test]
    fn a_device_kind_left_out_names_its_feature() {
        let e = super::open("amdgpu:0").err().expect("refused");
        assert!(
            e.to_string()
                .contains("built without rocmc-runtime's `hip` feature"),
            "{e}"
        );
        #[cfg(not(feature = "remote"))]
        {
            let e = super::open("remote://h:1/cpu").err().expect("refused");
            assert!(e.to_string().contains("`remote` feature"), "{e}");
        }
    }

    #[cfg(feature = "cpu")]
    #[test]
    fn the_cpu_opens_by_name() {
        let d = super::open("cpu").expect("the cpu device");
        assert_eq!(d.info().name, "cpu");
        assert!(super::list_devices().iter().any(|i| i.name == "cpu"));
    }
}
