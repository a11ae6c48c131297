//! The CPU as a [`rocmc_device::Device`].

use crate::{Cpu, CpuBuffer, Error, Module};
use rocmc_device::{self as dev, Arg, BufferId, DeviceInfo, ModuleId};
use std::collections::HashMap;
use std::time::Instant;

/// This machine's CPU behind the one device interface: buffers and
/// modules by id, launches timed with the host's clock.
pub struct CpuDevice {
    cpu: Cpu,
    info: DeviceInfo,
    bufs: dev::Buffers<CpuBuffer<u8>>,
    modules: HashMap<ModuleId, Module>,
}

impl CpuDevice {
    /// The CPU device named `cpu`, with a thread per core.
    pub fn open() -> CpuDevice {
        let cpu = Cpu::new();
        CpuDevice {
            info: info(&cpu),
            cpu,
            bufs: dev::Buffers::new("cpu"),
            modules: HashMap::new(),
        }
    }

    fn module(&self, id: &str) -> dev::Result<&Module> {
        self.modules
            .get(id)
            .ok_or_else(|| dev::Error::NoModule(id.to_string()))
    }

    fn run(&self, module: &str, kernel: &str, args: &[Arg]) -> dev::Result<()> {
        let k = self.module(module)?.kernel(kernel).map_err(error)?;
        let a = dev::kernel_args(args, self.bufs.lookup())?;
        k.launch(&a).map_err(error)
    }
}

/// What the CPU device reports about itself.
pub fn info(cpu: &Cpu) -> DeviceInfo {
    DeviceInfo {
        name: "cpu".into(),
        target: cpu.target().to_string(),
        description: format!("host CPU, {} threads", cpu.threads()),
        memory: 0,
        code_object_version: 0,
    }
}

/// The runtime's errors as the device interface's.
fn error(e: Error) -> dev::Error {
    match e {
        Error::BadModule(m) => dev::Error::BadModule(format!("not a rocmc CPU shared object: {m}")),
        Error::BadLaunch { kernel, reason } => dev::Error::BadLaunch { kernel, reason },
        e @ Error::NoKernel { .. } => dev::Error::BadLaunch {
            kernel: String::new(),
            reason: e.to_string(),
        },
        other => dev::Error::Runtime {
            device: "cpu".into(),
            message: other.to_string(),
        },
    }
}

impl dev::Device for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&mut self, bytes: u64) -> dev::Result<BufferId> {
        let n = dev::host_len(bytes)?;
        // The CPU heap hands out zeroed memory.
        self.bufs.insert(self.cpu.alloc::<u8>(n), true)
    }

    fn footprint(&self, bytes: u64) -> u64 {
        crate::footprint(bytes)
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
        let m = self.cpu.load(bytes).map_err(error)?;
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
        dev::timed_launches(
            warmup,
            reps,
            || self.run(module, kernel, args),
            |launch| {
                let t = Instant::now();
                launch()?;
                Ok(t.elapsed().as_secs_f64() * 1e3)
            },
        )
    }

    fn synchronize(&mut self) -> dev::Result<()> {
        // Launches and copies return when done.
        Ok(())
    }
}

impl dev::HostCopy for CpuBuffer<u8> {
    fn bytes(&self) -> usize {
        self.len()
    }
    fn put(&self, at: usize, data: &[u8]) -> Result<(), String> {
        self.copy_from_host_at(at, data)
            .then_some(())
            .ok_or_else(|| "a write outside the buffer".into())
    }
    fn get(&self, at: usize, out: &mut [u8]) -> Result<(), String> {
        let v = self
            .read_at(at, out.len())
            .ok_or_else(|| "a read outside the buffer".to_string())?;
        out.copy_from_slice(&v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dev::Tensor;

    #[test]
    fn typed_tensors_and_views_on_the_cpu_device() {
        let mut d = CpuDevice::open();
        let t = Tensor::<f32>::upload(&mut d, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).unwrap();
        let v = t.view(4, 4).unwrap();
        assert_eq!(v.read(&mut d).unwrap(), [5.0, 6.0, 7.0, 8.0]);
        v.write(&mut d, &[0.5; 4]).unwrap();
        assert_eq!(
            t.read(&mut d).unwrap(),
            [1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, 0.5]
        );
        // A view of a view starts where both say.
        assert_eq!(
            t.view(0, 8)
                .unwrap()
                .view(4, 2)
                .unwrap()
                .read(&mut d)
                .unwrap(),
            [0.5, 0.5]
        );
        let e = t.view(2, 4).unwrap_err().to_string();
        assert!(
            e.contains("starts at byte 8") && e.contains("multiple of 16"),
            "{e}"
        );
        let e = t.view(4, 5).unwrap_err().to_string();
        assert!(e.contains("outside the 8 elements"), "{e}");
        assert!(v.write(&mut d, &[1.0; 3]).is_err());
        // The kernel-argument form of a view: a pointer into the buffer,
        // checked against the buffer's end.
        let inside = dev::kernel_args(&[v.arg()], d.bufs.lookup()).unwrap();
        assert_eq!(inside.len(), 1);
        let past = dev::Arg::Buffer {
            id: t.buffer(),
            dtype: "f32".into(),
            len: 5,
            offset: 4,
        };
        let e = dev::kernel_args(&[past], d.bufs.lookup())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not 5 f32 from element 4 on"), "{e}");
        t.free(&mut d).unwrap();
    }
}
