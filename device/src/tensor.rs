//! Typed buffers over the one device interface: what the launchers a
//! build script writes take, so an application moves `f16` weights and
//! `i32` ids to any device (`cpu`, `cuda:N`, `amdgpu:N`, a worker's) with
//! one set of calls, and passes a part of a buffer (a KV cache's next
//! rows) to a kernel as a view.

use crate::launch::DeviceScalar;
use crate::{Arg, BufferId, Device, Error, Result, VIEW_ALIGN};
use std::marker::PhantomData;

/// `len` elements of `T` in buffer `id` of a device, from element
/// `offset` on. A `Tensor` is a handle, not an owner: it does not know
/// its device, and [`Tensor::free`] frees the buffer (views of it too).
#[derive(Debug, PartialEq, Eq)]
pub struct Tensor<T> {
    id: BufferId,
    offset: u64,
    len: u64,
    elem: PhantomData<T>,
}

// A handle copies as an id does, whatever `T` is.
impl<T> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Tensor<T> {}

impl<T: DeviceScalar> Tensor<T> {
    /// `len` zeroed elements on `dev`.
    pub fn zeros(dev: &mut dyn Device, len: usize) -> Result<Tensor<T>> {
        let bytes = (len as u64)
            .checked_mul(T::SIZE as u64)
            .ok_or_else(|| Error::Limit(format!("{len} elements of {}", T::DTYPE)))?;
        Ok(Tensor::whole(dev.alloc(bytes)?, len))
    }

    /// A fresh buffer on `dev` holding `data`.
    pub fn upload(dev: &mut dyn Device, data: &[T]) -> Result<Tensor<T>> {
        Ok(Tensor::whole(dev.upload(&bytes_of(data))?, data.len()))
    }

    fn whole(id: BufferId, len: usize) -> Tensor<T> {
        Tensor {
            id,
            offset: 0,
            len: len as u64,
            elem: PhantomData,
        }
    }

    /// Its elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer it lies in.
    pub fn buffer(&self) -> BufferId {
        self.id
    }

    /// Elements `start..start + len` of it, as a tensor of their own. A
    /// kernel reads or writes only those; the start must lie on a
    /// [`VIEW_ALIGN`]-byte boundary, as kernels assume of every tensor.
    pub fn view(&self, start: usize, len: usize) -> Result<Tensor<T>> {
        let refuse = |why: String| Error::Limit(format!("view {start}..{start}+{len}: {why}"));
        if start
            .checked_add(len)
            .is_none_or(|end| end as u64 > self.len)
        {
            return Err(refuse(format!("outside the {} elements", self.len)));
        }
        let offset = self.offset + start as u64;
        if !(offset * T::SIZE as u64).is_multiple_of(VIEW_ALIGN) {
            return Err(refuse(format!(
                "starts at byte {} of buffer #{}, not a multiple of {VIEW_ALIGN}",
                offset * T::SIZE as u64,
                self.id
            )));
        }
        Ok(Tensor {
            id: self.id,
            offset,
            len: len as u64,
            elem: PhantomData,
        })
    }

    /// Copies `data` (exactly its length) into it.
    pub fn write(&self, dev: &mut dyn Device, data: &[T]) -> Result<()> {
        if data.len() as u64 != self.len {
            return Err(Error::Limit(format!(
                "{} elements written to a tensor of {}",
                data.len(),
                self.len
            )));
        }
        dev.write(self.id, self.offset * T::SIZE as u64, &bytes_of(data))
    }

    /// Its elements, copied to the host.
    pub fn read(&self, dev: &mut dyn Device) -> Result<Vec<T>> {
        let size = T::SIZE as u64;
        let bytes = dev.read(self.id, self.offset * size, self.len * size)?;
        Ok(bytes.chunks_exact(T::SIZE).map(T::from_le).collect())
    }

    /// Frees the buffer it lies in.
    pub fn free(self, dev: &mut dyn Device) -> Result<()> {
        dev.free(self.id)
    }

    /// It as a kernel argument.
    pub fn arg(&self) -> Arg {
        Arg::Buffer {
            id: self.id,
            dtype: T::DTYPE.into(),
            len: self.len,
            offset: self.offset,
        }
    }
}

/// A scalar kernel parameter as the device interface carries it.
pub fn scalar_arg<T: DeviceScalar>(v: T) -> Arg {
    let mut bytes = Vec::with_capacity(T::SIZE);
    v.put_le(&mut bytes);
    Arg::Scalar {
        dtype: T::DTYPE.into(),
        bytes,
    }
}

fn bytes_of<T: DeviceScalar>(data: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * T::SIZE);
    for &v in data {
        v.put_le(&mut out);
    }
    out
}
