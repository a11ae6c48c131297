//! The one device interface of rocmc: every place that runs a kernel
//! (`rocmc run`, the worker's session, the tuner, `rocmc-gpu-check`) uses a
//! `dyn` [`Device`], and every runtime implements it — this machine's CPU
//! (`rocmc-runtime-cpu`), CUDA (`rocmc-runtime-cuda`), HIP
//! (`rocmc-runtime-hip`), and a worker's device over the network
//! (`rocmc-remote`'s client). In the manner of CubeCL's `ComputeServer`: one
//! small set of operations on buffers and modules by id, implemented once
//! per backend.
//!
//! The crate also holds what a device needs to know about a module without
//! any compiler: the launch document rocmc stores in every module
//! ([`launch`]) with its argument checks, and readers of AMD code objects
//! ([`codeobject`]) and offload bundles ([`bundle`]). It links no LLVM and
//! loads no GPU runtime.

#![deny(missing_docs)]

mod args;
mod buffers;
mod code;
// The three readers came from `rocmc-linker`, which did not require docs on
// every field; their fields are the keys of the formats they read.
#[allow(missing_docs)]
pub mod bundle;
#[allow(missing_docs)]
pub mod codeobject;
mod error;
#[allow(missing_docs)]
pub mod launch;
mod tensor;

pub use args::{check_launch, kernel_args, known_dtype, random_bytes, Arg, VIEW_ALIGN};
pub use buffers::{Buffers, HostCopy};
pub use code::Code;
pub use error::{Error, Result};
pub use half::{bf16, f16};
pub use launch::Bool8;
pub use tensor::{scalar_arg, Tensor};

use serde::{Deserialize, Serialize};

/// A buffer of a device, named by the id the device gave it.
pub type BufferId = u32;

/// A module loaded on a device, named by the id the device gave it.
pub type ModuleId = String;

/// What a device is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceInfo {
    /// How it is named: `cpu`, `cuda:0`, `amdgpu:1`.
    pub name: String,
    /// Its `--mcpu`: `x86-64`, `sm_90`, `gfx942:sramecc+:xnack-`.
    pub target: String,
    /// For people: `NVIDIA H100 80GB HBM3`.
    pub description: String,
    /// Device memory in bytes (0: the host's).
    pub memory: u64,
    /// Highest code-object version its runtime loads (AMD only; 0 otherwise).
    pub code_object_version: u32,
}

impl DeviceInfo {
    /// The processor to compile for: the target without its features
    /// (`gfx942` of `gfx942:sramecc+:xnack-`).
    pub fn processor(&self) -> &str {
        self.target.split(':').next().unwrap_or_default()
    }

    /// The target to compile for, parsed once here: the processor (every
    /// feature setting of it runs the code), at the highest code-object
    /// version both `code_object_version` (what the caller asks) and the
    /// device's runtime allow.
    pub fn compile_target(
        &self,
        code_object_version: u32,
        wave_size: Option<u32>,
    ) -> std::result::Result<rocmc_target::Target, rocmc_target::TargetError> {
        let cov = match self.code_object_version {
            0 => code_object_version,
            most => code_object_version.min(most),
        };
        rocmc_target::Target::parse(self.processor(), wave_size, cov)
    }
}

/// A device that holds buffers, loads modules and runs their kernels.
///
/// Operations may be queued (a worker's device sends several at once);
/// an error of a queued one is reported at the latest by the next call
/// that returns data, or by [`Device::synchronize`]. Buffers are zeroed
/// when allocated, so no caller sees memory another one left.
pub trait Device {
    /// What the device is and which target to compile for.
    fn info(&self) -> &DeviceInfo;

    /// Allocates `bytes` zeroed bytes.
    fn alloc(&mut self, bytes: u64) -> Result<BufferId>;

    /// The memory an allocation of `bytes` takes on this device, with what
    /// the device adds around it (the CPU's guard bands): what a worker's
    /// session charges against its memory limit.
    fn footprint(&self, bytes: u64) -> u64 {
        bytes
    }

    /// Frees a buffer.
    fn free(&mut self, id: BufferId) -> Result<()>;

    /// The size of a buffer in bytes.
    fn size(&self, id: BufferId) -> Result<u64>;

    /// Copies `data` into buffer `id` from byte `offset` on.
    fn write(&mut self, id: BufferId, offset: u64, data: &[u8]) -> Result<()>;

    /// Copies `len` bytes of buffer `id` from byte `offset` on.
    fn read(&mut self, id: BufferId, offset: u64, len: u64) -> Result<Vec<u8>>;

    /// Copies `out.len()` bytes of buffer `id` from byte `offset` on into
    /// `out` (a worker's transfer window: no allocation per part).
    fn read_into(&mut self, id: BufferId, offset: u64, out: &mut [u8]) -> Result<()> {
        let data = self.read(id, offset, out.len() as u64)?;
        out.copy_from_slice(&data);
        Ok(())
    }

    /// Fills buffer `id` with the seeded random `dtype` values of
    /// [`random_bytes`] (a worker makes them on its side, sending nothing).
    fn fill(&mut self, id: BufferId, dtype: &str, seed: u64) -> Result<()> {
        // In parts: a 1 GiB fill costs 16 MiB of host memory, not 1 GiB.
        const PART: usize = 16 << 20;
        let n = host_len(self.size(id)?)?;
        let mut state = args::random_state(seed);
        let mut at = 0;
        while at < n {
            let part = args::random_part(&mut state, dtype, PART.min(n - at));
            self.write(id, at as u64, &part)?;
            at += part.len();
        }
        Ok(())
    }

    /// Loads a module built for this device's target (a code object or
    /// bundle, PTX text, or a CPU shared object).
    fn load_module(&mut self, bytes: &[u8]) -> Result<ModuleId>;

    /// Launches `kernel` of a loaded module, after checking `args` against
    /// the module's launch document.
    fn launch(&mut self, module: &str, kernel: &str, args: &[Arg]) -> Result<()>;

    /// Launches `warmup + reps` times and returns each of the last `reps`
    /// launches' time in ms, measured with the device's own clock.
    fn time(
        &mut self,
        module: &str,
        kernel: &str,
        args: &[Arg],
        warmup: u32,
        reps: u32,
    ) -> Result<Vec<f64>>;

    /// Waits for everything queued; reports an earlier queued failure.
    fn synchronize(&mut self) -> Result<()>;

    /// Memory the caller owns on this device (a framework's tensor), as a
    /// buffer of it without a copy: launches read and write it in place,
    /// and freeing the id forgets it. Devices that cannot (the default)
    /// refuse.
    ///
    /// # Safety
    /// `address` must be `bytes` of this device's memory, valid (not freed
    /// or moved) for as long as the id is used.
    unsafe fn import(&mut self, address: u64, bytes: u64) -> Result<BufferId> {
        let _ = (address, bytes);
        Err(Error::Limit(format!(
            "{} cannot use memory it did not allocate",
            self.info().name
        )))
    }

    /// Queues later launches (and their timing) on the caller's stream
    /// `stream` (a `CUstream`; 0: the default stream), so they order with
    /// a framework's work there. Devices without streams refuse any other.
    ///
    /// # Safety
    /// `stream` must be a stream of this device's context that outlives
    /// the launches queued on it.
    unsafe fn use_stream(&mut self, stream: u64) -> Result<()> {
        if stream == 0 {
            Ok(())
        } else {
            Err(Error::Limit(format!(
                "{} has no streams to launch on",
                self.info().name
            )))
        }
    }

    /// A fresh buffer holding `data`.
    fn upload(&mut self, data: &[u8]) -> Result<BufferId> {
        let id = self.alloc(data.len() as u64)?;
        self.write(id, 0, data)?;
        Ok(id)
    }

    /// The whole of buffer `id`.
    fn read_all(&mut self, id: BufferId) -> Result<Vec<u8>> {
        let n = self.size(id)?;
        self.read(id, 0, n)
    }
}

/// `bytes` as a length this machine can hold, or a [`Error::Limit`].
pub fn host_len(bytes: u64) -> Result<usize> {
    usize::try_from(bytes).map_err(|_| Error::Limit(format!("{bytes} bytes")))
}

/// Checks that a copy of `len` bytes at `offset` stays inside a buffer of
/// `size` bytes; the range as `usize`s for the copy.
pub fn in_range(
    what: &'static str,
    id: BufferId,
    offset: u64,
    len: u64,
    size: u64,
) -> Result<std::ops::Range<usize>> {
    offset
        .checked_add(len)
        .filter(|&end| end <= size)
        .map(|end| offset as usize..end as usize)
        .ok_or(Error::OutOfRange {
            what,
            id,
            offset,
            len,
            size,
        })
}

/// Writes zeros over `size` bytes with `put(offset, zeros)`, 16 MiB at a
/// time (what a GPU runtime without a memset call does to zero a buffer).
pub fn zero_in_parts<E>(
    size: usize,
    mut put: impl FnMut(usize, &[u8]) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    const PART: usize = 16 << 20;
    let zeros = vec![0u8; PART.min(size)];
    let mut at = 0;
    while at < size {
        let n = PART.min(size - at);
        put(at, &zeros[..n])?;
        at += n;
    }
    Ok(())
}

/// How many launches one [`Device::time`] may ask for: a request must end.
pub const MAX_LAUNCHES: u32 = 1_000_000;

/// `warmup + reps`, refused over [`MAX_LAUNCHES`] (and never overflowing).
pub fn launch_count(warmup: u32, reps: u32) -> Result<u32> {
    warmup
        .checked_add(reps)
        .filter(|&n| n <= MAX_LAUNCHES)
        .ok_or_else(|| {
            Error::Limit(format!(
                "{warmup} warm-up and {reps} timed launches: at most {MAX_LAUNCHES} in one request"
            ))
        })
}

/// Times `warmup + reps` runs of `launch` with `clock` (which runs one
/// launch and returns its time in ms); each of the last `reps` times.
pub fn timed_launches(
    warmup: u32,
    reps: u32,
    mut launch: impl FnMut() -> Result<()>,
    mut clock: impl FnMut(&mut dyn FnMut() -> Result<()>) -> Result<f64>,
) -> Result<Vec<f64>> {
    let total = launch_count(warmup, reps)?;
    let mut times = Vec::with_capacity(reps as usize);
    for i in 0..total {
        if i < warmup {
            launch()?;
        } else {
            times.push(clock(&mut launch)?);
        }
    }
    Ok(times)
}

/// The launch document of module bytes as a device receives them: PTX
/// text (its `// rocmc.launch` line), an ELF code object or shared object
/// (its `.rocmc.launch` section), or an offload bundle (its first code
/// object's).
pub fn module_launch(bytes: &[u8]) -> Result<launch::LaunchInfo> {
    let bad = |m: String| Error::BadModule(m);
    if bundle::is_bundle(bytes) {
        let entries = bundle::read(bytes).map_err(|e| bad(e.to_string()))?;
        let e = entries
            .iter()
            .find(|e| !e.range.is_empty())
            .ok_or_else(|| bad("the bundle holds no code object".into()))?;
        return module_launch(&bytes[e.range.clone()]);
    }
    if bytes.starts_with(b"\x7fELF") {
        return elf_launch(bytes).map_err(bad);
    }
    let text =
        std::str::from_utf8(bytes).map_err(|_| bad("neither an ELF object nor PTX text".into()))?;
    launch::LaunchInfo::from_ptx(text)
        .ok_or_else(|| bad("the PTX has no rocmc launch document (was it built by rocmc?)".into()))?
        .map_err(|e| bad(format!("the PTX's launch document: {e}")))
}

/// The `.rocmc.launch` section of an ELF file.
pub fn elf_launch(bytes: &[u8]) -> std::result::Result<launch::LaunchInfo, String> {
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| e.to_string())?;
    launch_section(&elf, bytes).unwrap_or_else(|| {
        Err(format!(
            "no {} section (was it built by rocmc?)",
            launch::SECTION
        ))
    })
}

/// The launch document in `elf`'s `.rocmc.launch` section, if it has one
/// (shared by [`elf_launch`] and the code-object reader).
pub(crate) fn launch_section(
    elf: &goblin::elf::Elf,
    bytes: &[u8],
) -> Option<std::result::Result<launch::LaunchInfo, String>> {
    let sh = elf
        .section_headers
        .iter()
        .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(launch::SECTION))?;
    let data = sh
        .file_range()
        .and_then(|r| bytes.get(r))
        .ok_or_else(|| format!("section {} lies outside the file", launch::SECTION));
    Some(data.and_then(|d| {
        launch::LaunchInfo::from_json(d).map_err(|e| format!("{}: {e}", launch::SECTION))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_report_a_parsed_target() {
        let info = |target: &str, cov| DeviceInfo {
            name: "d".into(),
            target: target.into(),
            description: String::new(),
            memory: 0,
            code_object_version: cov,
        };
        let t = info("gfx942:sramecc+:xnack-", 5)
            .compile_target(6, None)
            .unwrap();
        assert_eq!(t.processor(), "gfx942");
        assert_eq!(t.amd().unwrap().code_object_version, 5);
        let t = info("sm_90", 0).compile_target(6, None).unwrap();
        assert!(t.nvidia().is_some(), "{t}");
        assert!(info("gfx9999", 5).compile_target(6, None).is_err());
    }

    #[test]
    fn ranges_are_checked_without_overflow() {
        assert_eq!(in_range("reading", 0, 2, 3, 5).unwrap(), 2..5);
        assert!(in_range("reading", 0, 3, 3, 5).is_err());
        assert!(in_range("writing", 0, u64::MAX, 2, 5).is_err());
        let e = in_range("writing", 7, 4, 2, 5).unwrap_err().to_string();
        assert_eq!(e, "writing 2 bytes at byte 4 of buffer #7 of 5 bytes");
    }

    #[test]
    fn random_bytes_made_in_parts_are_the_whole_stream() {
        for dtype in ["f32", "f16", "i8", "f64", "bool"] {
            let whole = random_bytes(dtype, 1003, 42);
            let mut state = args::random_state(42);
            let mut parts = vec![];
            for n in [16, 512, 475] {
                parts.extend(args::random_part(&mut state, dtype, n));
            }
            assert_eq!(parts, whole, "{dtype}");
        }
    }

    #[test]
    fn zeros_cover_every_byte_in_parts() {
        // Over one 16 MiB part, and not a multiple of it.
        let n = (16 << 20) + 12_345;
        let mut buf = vec![0xa5u8; n];
        zero_in_parts(n, |at, z| {
            buf[at..at + z.len()].copy_from_slice(z);
            Ok::<_, ()>(())
        })
        .unwrap();
        assert!(buf.iter().all(|&x| x == 0));
    }

    #[test]
    fn launch_counts_are_capped() {
        assert_eq!(launch_count(2, 3).unwrap(), 5);
        assert!(launch_count(u32::MAX, 2).is_err());
        assert!(launch_count(MAX_LAUNCHES, 1).is_err());
        let mut n = 0;
        let t = timed_launches(
            2,
            3,
            || {
                n += 1;
                Ok(())
            },
            |f| f().map(|_| 1.5),
        )
        .unwrap();
        assert_eq!((t, n), (vec![1.5; 3], 5));
    }

    #[test]
    fn modules_without_a_launch_document_are_refused_by_name() {
        for (bytes, says) in [
            (&b"\xff\xfe"[..], "neither an ELF"),
            (b".version 8.0\n", "no rocmc launch document"),
            (b"\x7fELF\x02", ""),
        ] {
            let e = module_launch(bytes).unwrap_err();
            assert!(matches!(e, Error::BadModule(_)));
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
