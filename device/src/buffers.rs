//! The bookkeeping every runtime's [`Device`](crate::Device) shares: its
//! buffers by id, with every copy range-checked in one place.

use crate::error::{Error, Result};
use crate::{in_range, BufferId};
use std::collections::HashMap;

/// A runtime's buffer of bytes, as [`Buffers`] copies into and out of it.
pub trait HostCopy {
    /// Its size in bytes.
    fn bytes(&self) -> usize;
    /// Copies `data` in from byte `at` on (the range is checked already).
    fn put(&self, at: usize, data: &[u8]) -> std::result::Result<(), String>;
    /// Copies `out.len()` bytes out from byte `at` on (checked already).
    fn get(&self, at: usize, out: &mut [u8]) -> std::result::Result<(), String>;
}

/// A device's buffers by id.
pub struct Buffers<B> {
    device: String,
    map: HashMap<BufferId, B>,
    next: BufferId,
}

impl<B: HostCopy> Buffers<B> {
    /// No buffers yet, on the device named `device` (for its errors).
    pub fn new(device: &str) -> Buffers<B> {
        Buffers {
            device: device.into(),
            map: HashMap::new(),
            next: 0,
        }
    }

    fn failed(&self, message: String) -> Error {
        Error::Runtime {
            device: self.device.clone(),
            message,
        }
    }

    /// Adds `b`, zeroing it first unless `zeroed` (the interface promises
    /// zeroed buffers; a GPU driver hands out whatever the memory held,
    /// another process's data even).
    pub fn insert(&mut self, b: B, zeroed: bool) -> Result<BufferId> {
        if !zeroed {
            crate::zero_in_parts(b.bytes(), |at, zeros| b.put(at, zeros))
                .map_err(|m| self.failed(m))?;
        }
        let id = self.next;
        self.next += 1;
        self.map.insert(id, b);
        Ok(id)
    }

    /// The buffer `id`.
    pub fn get(&self, id: BufferId) -> Result<&B> {
        self.map.get(&id).ok_or(Error::NoBuffer(id))
    }

    /// Its size in bytes.
    pub fn size(&self, id: BufferId) -> Result<u64> {
        Ok(self.get(id)?.bytes() as u64)
    }

    /// Frees buffer `id`.
    pub fn free(&mut self, id: BufferId) -> Result<()> {
        self.map.remove(&id).map(drop).ok_or(Error::NoBuffer(id))
    }

    /// Copies `data` into buffer `id` from byte `offset` on.
    pub fn write(&self, id: BufferId, offset: u64, data: &[u8]) -> Result<()> {
        let b = self.get(id)?;
        let r = in_range("writing", id, offset, data.len() as u64, b.bytes() as u64)?;
        b.put(r.start, data).map_err(|m| self.failed(m))
    }

    /// Copies `len` bytes out of buffer `id` from byte `offset` on.
    pub fn read(&self, id: BufferId, offset: u64, len: u64) -> Result<Vec<u8>> {
        // Checked before allocating: `len` is the caller's, unbounded.
        let r = in_range("reading", id, offset, len, self.size(id)?)?;
        let mut out = vec![0u8; r.len()];
        self.read_into(id, offset, &mut out)?;
        Ok(out)
    }

    /// Copies `out.len()` bytes out of buffer `id` from byte `offset` on.
    pub fn read_into(&self, id: BufferId, offset: u64, out: &mut [u8]) -> Result<()> {
        let b = self.get(id)?;
        let r = in_range("reading", id, offset, out.len() as u64, b.bytes() as u64)?;
        b.get(r.start, out).map_err(|m| self.failed(m))
    }

    /// The lookup [`kernel_args`](crate::kernel_args) takes.
    pub fn lookup<'s>(&'s self) -> impl Fn(BufferId) -> Option<(&'s B, u64)> + 's {
        move |id| self.map.get(&id).map(|b| (b, b.bytes() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Mem(RefCell<Vec<u8>>);

    impl HostCopy for Mem {
        fn bytes(&self) -> usize {
            self.0.borrow().len()
        }
        fn put(&self, at: usize, data: &[u8]) -> std::result::Result<(), String> {
            self.0.borrow_mut()[at..at + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn get(&self, at: usize, out: &mut [u8]) -> std::result::Result<(), String> {
            out.copy_from_slice(&self.0.borrow()[at..at + out.len()]);
            Ok(())
        }
    }

    #[test]
    fn buffers_are_zeroed_checked_and_freed_by_id() {
        let mut t = Buffers::new("test");
        let a = t.insert(Mem(RefCell::new(vec![7; 10])), false).unwrap();
        let b = t.insert(Mem(RefCell::new(vec![7; 4])), true).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.read(a, 0, 10).unwrap(), vec![0; 10]);
        assert_eq!(t.read(b, 0, 4).unwrap(), vec![7; 4]);
        t.write(a, 8, &[1, 2]).unwrap();
        assert_eq!(t.read(a, 7, 3).unwrap(), [0, 1, 2]);
        assert!(matches!(
            t.write(a, 9, &[1, 2]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(t.read(a, 0, 11), Err(Error::OutOfRange { .. })));
        t.free(a).unwrap();
        assert!(matches!(t.size(a), Err(Error::NoBuffer(_))));
        assert!(matches!(t.free(a), Err(Error::NoBuffer(_))));
    }
}
