//! An AMD GPU as a [`rocmc_device::Device`].

use crate::{Device, DeviceBuffer, Error, Hip, Module};
use rocmc_device::{self as dev, Arg, BufferId, DeviceInfo, ModuleId};
use std::collections::HashMap;

/// An AMD GPU behind the one device interface: buffers and modules by
/// id, launches timed with HIP events.
pub struct HipDevice {
    dev: Device,
    info: DeviceInfo,
    bufs: dev::Buffers<DeviceBuffer<u8>>,
    modules: HashMap<ModuleId, Module>,
}

/// What HIP device `index` reports about itself, as the device interface
/// names it: the code-object version is the highest its runtime loads.
pub fn info(hip: &Hip, index: usize) -> crate::Result<DeviceInfo> {
    let d = hip.device_info(index)?;
    Ok(DeviceInfo {
        name: format!("amdgpu:{index}"),
        target: d.arch.clone(),
        description: d.name.clone(),
        memory: d.total_memory as u64,
        code_object_version: crate::compat::max_code_object_version(hip.runtime_version()),
    })
}

impl HipDevice {
    /// Opens `amdgpu:N` or `amdgpu://GPU-<uuid>`.
    pub fn open(selector: &str) -> dev::Result<HipDevice> {
        let hip = Hip::load().map_err(|e| error(selector, e))?;
        let d = hip.device(selector).map_err(|e| error(selector, e))?;
        let info = info(&hip, d.info.index).map_err(|e| error(selector, e))?;
        Ok(HipDevice {
            dev: d,
            bufs: dev::Buffers::new(&info.name),
            modules: HashMap::new(),
            info,
        })
    }

    fn err(&self, e: Error) -> dev::Error {
        error(&self.info.name, e)
    }

    fn run(&self, module: &str, kernel: &str, args: &[Arg]) -> dev::Result<()> {
        let m = self
            .modules
            .get(module)
            .ok_or_else(|| dev::Error::NoModule(module.to_string()))?;
        let k = m.kernel(kernel).map_err(|e| self.err(e))?;
        let a = dev::kernel_args(args, self.bufs.lookup())?;
        k.launch(&a, None).map_err(|e| self.err(e))
    }
}

/// The runtime's errors as the device interface's.
fn error(device: &str, e: Error) -> dev::Error {
    match e {
        Error::DeviceSelection(..) | Error::NotFound { .. } | Error::NoDevice { .. } => {
            dev::Error::NoDevice(e.to_string())
        }
        Error::Incompatible(_) | Error::CodeObject(_) => dev::Error::BadModule(e.to_string()),
        Error::BadLaunch { kernel, reason } => dev::Error::BadLaunch { kernel, reason },
        other => dev::Error::Runtime {
            device: device.into(),
            message: other.to_string(),
        },
    }
}

impl dev::Device for HipDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&mut self, bytes: u64) -> dev::Result<BufferId> {
        let n = dev::host_len(bytes)?;
        let b = self.dev.alloc::<u8>(n).map_err(|e| self.err(e))?;
        self.bufs.insert(b, false)
    }

    fn free(&mut self, id: BufferId) -> dev::Result<()> {
        self.bufs.free(id)
    }

    fn size(&self, id: BufferId) -> dev::Result<u64> {
        self.bufs.size(id)
    }

    fn write(&mut self, id: BufferId, offset: u64, data: &[u8]) -> dev::Result<()> {
        self.bufs.write(id, offset, data)
    }

    fn read(&mut self, id: BufferId, offset: u64, len: u64) -> dev::Result<Vec<u8>> {
        self.bufs.read(id, offset, len)
    }

    fn read_into(&mut self, id: BufferId, offset: u64, out: &mut [u8]) -> dev::Result<()> {
        self.bufs.read_into(id, offset, out)
    }

    fn load_module(&mut self, bytes: &[u8]) -> dev::Result<ModuleId> {
        let m = self.dev.load_module(bytes).map_err(|e| self.err(e))?;
        let id = format!("m{}", self.modules.len());
        self.modules.insert(id.clone(), m);
        Ok(id)
    }

    fn launch(&mut self, module: &str, kernel: &str, args: &[Arg]) -> dev::Result<()> {
        self.run(module, kernel, args)
    }

    fn time(
        &mut self,
        module: &str,
        kernel: &str,
        args: &[Arg],
        warmup: u32,
        reps: u32,
    ) -> dev::Result<Vec<f64>> {
        let e = |x| error(&self.info.name, x);
        dev::timed_launches(
            warmup,
            reps,
            || self.run(module, kernel, args),
            |launch| {
                let (s, f) = (self.dev.event().map_err(e)?, self.dev.event().map_err(e)?);
                s.record(None).map_err(e)?;
                launch()?;
                f.record(None).map_err(e)?;
                Ok(f64::from(f.elapsed_since(&s).map_err(e)?))
            },
        )
    }

    fn synchronize(&mut self) -> dev::Result<()> {
        // An event after everything queued, waited for.
        let e = |x| error(&self.info.name, x);
        let ev = self.dev.event().map_err(e)?;
        ev.record(None).map_err(e)?;
        ev.elapsed_since(&ev).map_err(e)?;
        Ok(())
    }
}

impl dev::HostCopy for DeviceBuffer<u8> {
    fn bytes(&self) -> usize {
        self.len()
    }
    fn put(&self, at: usize, data: &[u8]) -> Result<(), String> {
        self.copy_from_host_at(at, data).map_err(|e| e.to_string())
    }
    fn get(&self, at: usize, out: &mut [u8]) -> Result<(), String> {
        self.copy_to_host_at(at, out).map_err(|e| e.to_string())
    }
}
