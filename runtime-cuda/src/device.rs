//! A CUDA GPU as a [`rocmc_device::Device`].

use crate::{Cuda, Device, DeviceBuffer, Error, Module};
use rocmc_device::{self as dev, Arg, BufferId, DeviceInfo, ModuleId};
use std::collections::HashMap;

/// An NVIDIA GPU behind the one device interface: buffers and modules by
/// id, launches timed with CUDA events.
pub struct CudaDevice {
    dev: Device,
    info: DeviceInfo,
    bufs: dev::Buffers<DeviceBuffer<u8>>,
    modules: HashMap<ModuleId, Module>,
    /// The caller's stream launches go to ([`dev::Device::use_stream`]);
    /// `None`: the default stream.
    stream: Option<crate::Stream>,
}

/// What CUDA device `index` reports about itself, as the device interface
/// names it.
pub fn info(cuda: &Cuda, index: usize) -> crate::Result<DeviceInfo> {
    let d = cuda.device_info(index)?;
    Ok(DeviceInfo {
        name: format!("cuda:{index}"),
        target: d.processor(),
        description: d.name.clone(),
        memory: d.total_memory as u64,
        code_object_version: 0,
    })
}

impl CudaDevice {
    /// Opens `cuda:N` (or `cuda`, the first GPU).
    pub fn open(selector: &str) -> dev::Result<CudaDevice> {
        let cuda = Cuda::load().map_err(|e| error(selector, e))?;
        let d = cuda.device(selector).map_err(|e| error(selector, e))?;
        let info = info(&cuda, d.info.index).map_err(|e| error(selector, e))?;
        Ok(CudaDevice {
            dev: d,
            bufs: dev::Buffers::new(&info.name),
            modules: HashMap::new(),
            stream: None,
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
        k.launch(&a, self.stream.as_ref()).map_err(|e| self.err(e))
    }
}

/// The runtime's errors as the device interface's.
fn error(device: &str, e: Error) -> dev::Error {
    match e {
        Error::DeviceSelection(..) | Error::NotFound { .. } | Error::NoDevice { .. } => {
            dev::Error::NoDevice(e.to_string())
        }
        Error::Incompatible(_) | Error::Jit { .. } | Error::Ptx(_) => {
            dev::Error::BadModule(e.to_string())
        }
        Error::BadLaunch { kernel, reason } => dev::Error::BadLaunch { kernel, reason },
        other => dev::Error::Runtime {
            device: device.into(),
            message: other.to_string(),
        },
    }
}

impl dev::Device for CudaDevice {
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
        let text = std::str::from_utf8(bytes)
            .map_err(|_| dev::Error::BadModule("a CUDA module must be PTX text".into()))?;
        let m = self.dev.load_ptx(text).map_err(|e| self.err(e))?;
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
                s.record(self.stream.as_ref()).map_err(e)?;
                launch()?;
                f.record(self.stream.as_ref()).map_err(e)?;
                Ok(f64::from(f.elapsed_since(&s).map_err(e)?))
            },
        )
    }

    fn synchronize(&mut self) -> dev::Result<()> {
        self.dev.synchronize().map_err(|e| self.err(e))
    }

    unsafe fn import(&mut self, address: u64, bytes: u64) -> dev::Result<BufferId> {
        let n = dev::host_len(bytes)?;
        // SAFETY: the caller's contract: `bytes` of this device's memory,
        // live while the id is used (the primary context is PyTorch's too).
        let b = unsafe { self.dev.borrow::<u8>(address, n) };
        // `true`: the memory holds the caller's data, not to be zeroed.
        self.bufs.insert(b, true)
    }

    unsafe fn use_stream(&mut self, stream: u64) -> dev::Result<()> {
        // SAFETY: the caller's contract: a stream of this context that
        // outlives the launches queued on it.
        self.stream = (stream != 0).then(|| unsafe { self.dev.borrow_stream(stream) });
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
