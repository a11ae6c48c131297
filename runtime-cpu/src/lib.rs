//! rocmc's CPU runtime: the host CPU as an ahead-of-time device.
//!
//! `rocmc build --mcpu x86-64` writes an ELF shared object with one
//! function per kernel, `void k(ptr buffers, ptr sizes, ptr params, i64
//! first_group, i64 group_count)`, and rocmc's launch document in a
//! `.rocmc.launch` section. This crate loads it (no LLVM, nothing to
//! install), checks every launch against the document exactly as the GPU
//! runtimes do, and runs the grid's work-groups spread over a pool of OS
//! threads. The threads of one work-group run in lockstep inside one OS
//! thread, which honours barriers by construction.
//!
//! ```no_run
//! use rocmc_runtime_cpu::{Cpu, KernelArg};
//! let dev = Cpu::new();
//! let module = dev.load(&std::fs::read("vadd.so").unwrap())?;
//! let vadd = module.kernel("vadd")?;
//! let a = dev.upload(&[1.0f32; 1000]);
//! let b = dev.upload(&[2.0f32; 1000]);
//! let c = dev.alloc::<f32>(1000);
//! vadd.launch(&[KernelArg::buffer(&a), KernelArg::buffer(&b), KernelArg::buffer(&c), KernelArg::size(1000)])?;
//! assert_eq!(c.to_vec()[0], 3.0);
//! # Ok::<(), rocmc_runtime_cpu::Error>(())
//! ```

#![deny(missing_docs)]

mod device;
pub use device::CpuDevice;
pub use half::{bf16, f16};
pub use rocmc_device::launch::{ArgValue, Bool8, DeviceMemory, DeviceScalar, KernelArg};

use rocmc_device::launch::{ArgRole, KernelLaunch, LaunchInfo};
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// What can go wrong loading or launching.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a shared object rocmc built for this CPU.
    #[error("not a rocmc CPU shared object: {0}")]
    BadModule(String),
    /// The dynamic loader refused the shared object.
    #[error("loading the shared object: {0}")]
    Load(String),
    /// The module has no kernel of that name.
    #[error("no kernel `{name}` in the module (it has: {have})")]
    NoKernel {
        /// The name asked for.
        name: String,
        /// The kernels it has.
        have: String,
    },
    /// A launch that does not match the kernel's launch document.
    #[error("launch of `{kernel}` refused: {reason}")]
    BadLaunch {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the shared object where the loader can read it.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A kernel wrote into the guard band around a buffer: outside it.
    #[error(
        "kernel `{kernel}` wrote outside buffer `{buffer}` ({where_}); the guard band was restored"
    )]
    OutOfBounds {
        /// The kernel that ran.
        kernel: String,
        /// The buffer argument, by name.
        buffer: String,
        /// Before or after it, and how far.
        where_: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

type KernelFn = unsafe extern "C" fn(*const *mut u8, *const i32, *const u8, i64, i64);

/// The allocations of one device: address → (length in bytes, storage).
/// Launches accept only buffers registered here, so a forged address in a
/// [`KernelArg`] is refused instead of being written through.
#[derive(Default)]
struct Heap {
    /// Each live buffer's address and byte length.
    live: BTreeMap<u64, usize>,
}

impl Heap {
    /// The live buffer that `addr` points into (a view may start inside
    /// one): its address, and the bytes from `addr` to its end.
    fn containing(&self, addr: u64) -> Option<(u64, usize)> {
        let (&base, &len) = self.live.range(..=addr).next_back()?;
        let into = usize::try_from(addr - base).ok()?;
        (into <= len).then(|| (base, len - into))
    }
}

/// The guard band on each side of every buffer, in 8-byte words, and what
/// it holds.
const GUARD_WORDS: usize = 1 << 13;

/// The bytes [`Cpu::alloc`] takes for a buffer of `bytes`: whole words, at
/// least one, and a guard band on each side.
pub fn footprint(bytes: u64) -> u64 {
    bytes
        .div_ceil(8)
        .max(1)
        .saturating_add(2 * GUARD_WORDS as u64)
        .saturating_mul(8)
}
const GUARD_PATTERN: u64 = 0xA5A5_A5A5_A5A5_A5A5;

/// Stack of each thread that runs work-groups: a work-group's shared arrays
/// and its threads' register arrays live there (reserved, not committed).
const WORKER_STACK: usize = 256 << 20;

/// Where a buffer's guard bands were written, if anywhere: checks and
/// restores them. `addr` and `bytes` are a live buffer's, under the heap lock.
fn check_guards(addr: u64, bytes: usize) -> Option<String> {
    let words = bytes.div_ceil(8).max(1);
    // SAFETY: a live buffer's store holds GUARD_WORDS words before `addr`
    // and after its `words` words (see `Cpu::alloc`); the heap lock is held,
    // so no kernel runs and the store is not freed.
    let (before, after) = unsafe {
        let base = (addr as *mut u64).sub(GUARD_WORDS);
        (
            std::slice::from_raw_parts_mut(base, GUARD_WORDS),
            std::slice::from_raw_parts_mut(base.add(GUARD_WORDS + words), GUARD_WORDS),
        )
    };
    // The buffer's last word may be partly padding: a write there is inside
    // the allocation but outside the buffer only when bytes % 8 != 0, which
    // rocmc's element sizes never make a kernel reach.
    let hit_before = before.iter().rposition(|w| *w != GUARD_PATTERN);
    let hit_after = after.iter().position(|w| *w != GUARD_PATTERN);
    let what = match (hit_before, hit_after) {
        (Some(i), _) => format!("{} bytes before it", (GUARD_WORDS - i) * 8),
        (None, Some(i)) => format!("{} bytes after its end", i * 8 + 8),
        (None, None) => return None,
    };
    before.fill(GUARD_PATTERN);
    after.fill(GUARD_PATTERN);
    Some(what)
}

/// The host CPU as a device.
#[derive(Clone)]
pub struct Cpu {
    heap: Arc<Mutex<Heap>>,
    threads: usize,
}

impl Default for Cpu {
    fn default() -> Self {
        Cpu::new()
    }
}

impl Cpu {
    /// A device using every hardware thread (`ROCMC_CPU_THREADS` overrides).
    pub fn new() -> Cpu {
        let threads = std::env::var("ROCMC_CPU_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n: &usize| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Cpu::with_threads(threads)
    }

    /// A device running work-groups on `threads` OS threads (at least 1).
    pub fn with_threads(threads: usize) -> Cpu {
        Cpu {
            heap: Arc::default(),
            threads: threads.max(1),
        }
    }

    /// OS threads a launch uses.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The target this device runs: `x86-64`.
    pub fn target(&self) -> rocmc_target::CpuTarget {
        rocmc_target::CpuTarget::parse("x86-64").expect("a CPU target name")
    }

    /// A zero-filled buffer of `len` elements.
    pub fn alloc<T: DeviceScalar>(&self, len: usize) -> CpuBuffer<T> {
        // u64 storage keeps every element type aligned; a guard band on
        // each side catches a kernel's writes outside the buffer.
        let words = (len * std::mem::size_of::<T>()).div_ceil(8).max(1);
        let mut store = vec![0u64; words + 2 * GUARD_WORDS].into_boxed_slice();
        store[..GUARD_WORDS].fill(GUARD_PATTERN);
        store[GUARD_WORDS + words..].fill(GUARD_PATTERN);
        let addr = store[GUARD_WORDS..].as_mut_ptr() as u64;
        self.heap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .insert(addr, len * std::mem::size_of::<T>());
        CpuBuffer {
            store: std::cell::UnsafeCell::new(store),
            addr,
            len,
            heap: self.heap.clone(),
            _t: PhantomData,
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: DeviceScalar>(&self, data: &[T]) -> CpuBuffer<T> {
        let b = self.alloc::<T>(data.len());
        b.copy_from_host(data);
        b
    }

    /// Loads a shared object built by `rocmc build --mcpu x86-64`.
    pub fn load(&self, so: &[u8]) -> Result<Module> {
        let info = read_launch(so)?;
        if !self.target().runs_here() {
            return Err(Error::Load(
                "x86-64 shared objects run only on x86-64 Linux".into(),
            ));
        }
        libm()?;
        // The loader reads files: a private one, removed once loaded.
        let mut file = tempfile::Builder::new()
            .prefix("rocmc-kernel")
            .suffix(".so")
            .tempfile()?;
        std::io::Write::write_all(&mut file, so)?;
        let path = file.into_temp_path();
        // SAFETY: the object carries rocmc's launch document (checked above);
        // rocmc's own objects have no initialisers and call only libm, loaded
        // here. Another's initialisers run too: in a worker, inside the
        // session process, which has confined itself (rocmc-remote's confine).
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(&*path),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        }
        .map_err(|e| Error::Load(e.to_string()))?;
        drop(path);
        let mut fns = HashMap::new();
        for k in &info.kernels {
            let name = std::ffi::CString::new(k.name.as_str())
                .map_err(|_| Error::BadModule(format!("kernel name {:?}", k.name)))?;
            // SAFETY: rocmc's CPU kernels have exactly the KernelFn signature.
            let f: libloading::os::unix::Symbol<KernelFn> = unsafe { lib.get(name.as_bytes()) }
                .map_err(|e| Error::BadModule(format!("kernel `{}`: {e}", k.name)))?;
            fns.insert(k.name.clone(), *f);
        }
        Ok(Module {
            cpu: self.clone(),
            info,
            fns,
            _lib: Arc::new(lib),
        })
    }
}

/// Makes libm's symbols visible to the shared objects loaded later (their
/// only undefined symbols): a Rust program need not have loaded it.
fn libm() -> Result<()> {
    static LIBM: std::sync::OnceLock<std::result::Result<libloading::os::unix::Library, String>> =
        std::sync::OnceLock::new();
    LIBM.get_or_init(|| {
        // SAFETY: glibc's libm has no initialisers with preconditions.
        unsafe {
            libloading::os::unix::Library::open(
                Some("libm.so.6"),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
            )
        }
        .map_err(|e| e.to_string())
    })
    .as_ref()
    .map(|_| ())
    .map_err(|e| Error::Load(format!("libm: {e}")))
}

/// Reads and checks the launch document of a CPU shared object.
pub fn read_launch(so: &[u8]) -> Result<LaunchInfo> {
    let elf = goblin::elf::Elf::parse(so).map_err(|e| Error::BadModule(e.to_string()))?;
    if elf.header.e_type != goblin::elf::header::ET_DYN
        || elf.header.e_machine != goblin::elf::header::EM_X86_64
    {
        return Err(Error::BadModule(
            "not an x86-64 ELF shared object (built with --mcpu x86-64?)".into(),
        ));
    }
    rocmc_device::elf_launch(so).map_err(Error::BadModule)
}

/// A buffer in the CPU device's memory. Its bytes are read and written
/// (by copies and by kernels) only under the device's heap lock.
pub struct CpuBuffer<T: DeviceScalar> {
    store: std::cell::UnsafeCell<Box<[u64]>>,
    addr: u64,
    len: usize,
    heap: Arc<Mutex<Heap>>,
    _t: PhantomData<T>,
}

// SAFETY: every access to the store goes through the heap lock.
unsafe impl<T: DeviceScalar> Sync for CpuBuffer<T> {}
// SAFETY: the store is owned memory; T is a plain scalar.
unsafe impl<T: DeviceScalar> Send for CpuBuffer<T> {}

impl<T: DeviceScalar> CpuBuffer<T> {
    /// Length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` (at most the buffer's length) into the buffer.
    pub fn copy_from_host(&self, data: &[T]) {
        let n = data.len().min(self.len) * std::mem::size_of::<T>();
        let _heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the heap lock excludes every other access to the store; both
        // ranges hold at least n bytes; T is a plain scalar.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().cast::<u8>(),
                (*self.store.get())
                    .as_mut_ptr()
                    .add(GUARD_WORDS)
                    .cast::<u8>(),
                n,
            )
        };
    }

    /// Copies `data` into the elements from `offset` on; false (nothing
    /// copied) where they do not fit.
    pub fn copy_from_host_at(&self, offset: usize, data: &[T]) -> bool {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        let size = std::mem::size_of::<T>();
        let _heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the heap lock excludes every other access to the store;
        // the range was checked to lie inside it; T is a plain scalar.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().cast::<u8>(),
                (*self.store.get())
                    .as_mut_ptr()
                    .add(GUARD_WORDS)
                    .cast::<u8>()
                    .add(offset * size),
                std::mem::size_of_val(data),
            )
        };
        true
    }

    /// The `n` elements from `offset` on; `None` where they do not fit.
    pub fn read_at(&self, offset: usize, n: usize) -> Option<Vec<T>> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return None;
        }
        let size = std::mem::size_of::<T>();
        let mut out = vec![T::default(); n];
        let _heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the heap lock excludes kernels writing the store; the
        // range was checked to lie inside it; every bit pattern is a T.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (*self.store.get())
                    .as_ptr()
                    .add(GUARD_WORDS)
                    .cast::<u8>()
                    .add(offset * size),
                out.as_mut_ptr().cast::<u8>(),
                n * size,
            )
        };
        Some(out)
    }

    /// The buffer's elements.
    pub fn to_vec(&self) -> Vec<T> {
        let mut out = vec![T::default(); self.len];
        let _heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the heap lock excludes kernels writing the store; it holds
        // len elements' bytes; T is a plain scalar for which every bit
        // pattern is a value (the DeviceScalar types).
        unsafe {
            std::ptr::copy_nonoverlapping(
                (*self.store.get()).as_ptr().add(GUARD_WORDS).cast::<u8>(),
                out.as_mut_ptr().cast::<u8>(),
                self.len * std::mem::size_of::<T>(),
            )
        };
        out
    }
}

impl<T: DeviceScalar> Drop for CpuBuffer<T> {
    fn drop(&mut self) {
        self.heap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .remove(&self.addr);
    }
}

impl<T: DeviceScalar> DeviceMemory for CpuBuffer<T> {
    type Elem = T;
    fn device_address(&self) -> u64 {
        self.addr
    }
    fn elements(&self) -> usize {
        self.len
    }
}

/// A loaded shared object.
pub struct Module {
    cpu: Cpu,
    info: LaunchInfo,
    fns: HashMap<String, KernelFn>,
    _lib: Arc<libloading::os::unix::Library>,
}

impl Module {
    /// The launch document.
    pub fn launch_info(&self) -> &LaunchInfo {
        &self.info
    }

    /// One of the module's kernels.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>> {
        let launch = self.info.kernels.iter().find(|k| k.name == name);
        match (launch, self.fns.get(name)) {
            (Some(launch), Some(f)) => Ok(Kernel {
                module: self,
                launch,
                f: *f,
            }),
            _ => Err(Error::NoKernel {
                name: name.into(),
                have: self
                    .info
                    .kernels
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// A kernel of a loaded module.
pub struct Kernel<'m> {
    module: &'m Module,
    launch: &'m KernelLaunch,
    f: KernelFn,
}

/// Raw argument tables, shared by the threads of one launch.
struct Tables {
    bufs: Vec<*mut u8>,
    sizes: Vec<i32>,
    params: Vec<u8>,
}

// SAFETY: the tables are only read during the launch; the buffers they point
// at are device memory the launch holds the heap lock for.
unsafe impl Sync for Tables {}

impl Kernel<'_> {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.launch.name
    }

    /// Runs the kernel over its whole grid and returns when it is done.
    pub fn launch(&self, args: &[KernelArg]) -> Result<()> {
        let refuse = |reason: String| Error::BadLaunch {
            kernel: self.launch.name.clone(),
            reason,
        };
        let values: Vec<ArgValue> = args.iter().map(|a| a.value().clone()).collect();
        let (grid, _block) = self
            .module
            .info
            .check_args(self.launch, &values)
            .map_err(refuse)?;
        // Held for the launch: no buffer is freed while the kernel runs.
        let heap = self
            .module
            .cpu
            .heap
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut t = Tables {
            bufs: Vec::new(),
            sizes: Vec::new(),
            params: Vec::new(),
        };
        // The allocation each buffer argument lies in (views: inside one).
        let mut bases: Vec<u64> = Vec::new();
        for ((la, a), v) in self.launch.args.iter().zip(args).zip(&values) {
            let bytes = a.bytes();
            match la.role {
                ArgRole::Buffer => {
                    let addr =
                        u64::from_le_bytes(bytes.try_into().map_err(|_| {
                            refuse(format!("buffer `{}` is not an address", la.name))
                        })?);
                    let (base, have) = heap.containing(addr).ok_or_else(|| {
                        refuse(format!(
                            "buffer `{}` is not memory of this CPU device",
                            la.name
                        ))
                    })?;
                    let ArgValue::Buffer { dtype: _, len } = v else {
                        unreachable!("checked by check_args")
                    };
                    let elem = rocmc_device::launch::dtype(&la.dtype).map_or(1, |(_, n)| n);
                    if len.saturating_mul(elem) > have {
                        return Err(refuse(format!(
                            "buffer `{}` claims {len} elements but holds {} bytes",
                            la.name, have
                        )));
                    }
                    t.bufs.push(addr as *mut u8);
                    bases.push(base);
                }
                ArgRole::Size => t.sizes.push(i32::from_le_bytes(
                    bytes
                        .try_into()
                        .map_err(|_| refuse(format!("size `{}` is not an i32", la.name)))?,
                )),
                ArgRole::Scalar => {
                    let mut slot = [0u8; 8];
                    let n = bytes.len().min(8);
                    slot[..n].copy_from_slice(&bytes[..n]);
                    t.params.extend_from_slice(&slot);
                }
            }
        }
        // Non-empty tables, so every pointer handed to the kernel is valid.
        t.sizes.push(0);
        t.params.extend_from_slice(&[0; 8]);
        t.bufs.push(std::ptr::null_mut());
        let groups: i64 = grid.iter().map(|g| i64::from(*g)).product();
        if groups == 0 {
            return Ok(());
        }
        let workers = (self.module.cpu.threads as i64).min(groups);
        // Several chunks per worker even out work-groups of unequal cost.
        let chunk = (groups / (workers * 4)).max(1);
        let next = std::sync::atomic::AtomicI64::new(0);
        let f = self.f;
        let t = &t;
        let work = || loop {
            let first = next.fetch_add(chunk, std::sync::atomic::Ordering::Relaxed);
            if first >= groups {
                break;
            }
            // SAFETY: the arguments passed check_args (kinds, dtypes, sizes within the
            // compiled bounds, buffers long enough for the shapes) and every buffer is
            // live memory of this device of the length claimed; the kernel keeps its
            // accesses inside the shapes, and work-groups write disjoint outputs.
            unsafe {
                f(
                    t.bufs.as_ptr(),
                    t.sizes.as_ptr(),
                    t.params.as_ptr(),
                    first,
                    chunk,
                )
            };
        };
        // Starting threads costs more than a small grid's work: one worker
        // runs on the caller's thread (whose stack must then hold a
        // work-group's arrays, as a program's main thread's 8 MiB do).
        if workers == 1 {
            work();
        } else {
            std::thread::scope(|s| {
                let spawned: Vec<_> = (0..workers)
                    .map(|_| {
                        std::thread::Builder::new()
                            .stack_size(WORKER_STACK)
                            .spawn_scoped(s, work)
                    })
                    .collect();
                spawned.into_iter().find_map(|h| h.err())
            })
            .map_or(Ok(()), |e| Err(Error::Io(e)))?;
        }
        // Buffer arguments in order, as `t.bufs` holds their addresses.
        let buffers = self
            .launch
            .args
            .iter()
            .filter(|la| la.role == ArgRole::Buffer);
        for (la, base) in buffers.zip(&bases) {
            let bytes = heap.live.get(base).copied().unwrap_or(0);
            if let Some(where_) = check_guards(*base, bytes) {
                return Err(Error::OutOfBounds {
                    kernel: self.launch.name.clone(),
                    buffer: la.name.clone(),
                    where_,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write just outside a buffer, on either side, is found, located
    /// and repaired; the buffer's own bytes stay as they were.
    #[test]
    fn guard_bands_catch_writes_outside_a_buffer() {
        let cpu = Cpu::with_threads(1);
        let b = cpu.upload::<u32>(&[1, 2, 3]);
        assert_eq!(check_guards(b.addr, 12), None);
        // SAFETY: inside the guard bands `Cpu::alloc` placed around the buffer.
        unsafe { (b.addr as *mut u8).sub(3).write(0) };
        assert_eq!(
            check_guards(b.addr, 12).as_deref(),
            Some("8 bytes before it")
        );
        assert_eq!(check_guards(b.addr, 12), None, "restored");
        // SAFETY: as above, after the buffer's (padded) last word.
        unsafe { (b.addr as *mut u8).add(16 + 8).write(7) };
        assert_eq!(
            check_guards(b.addr, 12).as_deref(),
            Some("16 bytes after its end")
        );
        assert_eq!(b.to_vec(), [1, 2, 3]);
    }
}
