//! DMA memory handed to the device.

use alloc::sync::Arc;
use core::mem::ManuallyDrop;
use core::ops::Deref;
use nic_hal::{DmaAllocator, DmaBuf};

use crate::Error;

/// A DMA buffer the device may read or write (a ring, the read-less response, a page list).
///
/// Dropping it **leaks** the memory: only code that knows the device no longer uses it (the
/// destroy command succeeded, the create was refused, the device was reset) gives it back
/// with [`release`](Self::release).
pub(crate) struct Shared {
    buf: ManuallyDrop<DmaBuf>,
}

impl Shared {
    /// Allocates `len` zeroed bytes aligned to `align`.
    pub(crate) fn new(
        dma: &Arc<dyn DmaAllocator>,
        len: usize,
        align: usize,
    ) -> Result<Self, Error> {
        Ok(Shared {
            buf: ManuallyDrop::new(DmaBuf::new(dma, len, align)?),
        })
    }

    /// Frees the buffer: the device no longer uses it.
    pub(crate) fn release(self) {
        drop(ManuallyDrop::into_inner(self.buf));
    }
}

impl Deref for Shared {
    type Target = DmaBuf;
    fn deref(&self) -> &DmaBuf {
        &self.buf
    }
}

impl core::fmt::Debug for Shared {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.buf.fmt(f)
    }
}

/// A user buffer ([`verbs::Buffer`]) over a [`DmaBuf`] from the device's allocator: what
/// `alloc_buf` returns.
pub(crate) struct UserMem {
    buf: DmaBuf,
}

impl UserMem {
    /// Allocates `len` zeroed, page-aligned bytes from `dma`.
    pub(crate) fn alloc(dma: &Arc<dyn DmaAllocator>, len: usize) -> Result<UserMem, Error> {
        Ok(UserMem {
            buf: DmaBuf::new(dma, len, 4096)?,
        })
    }
}

/// The device address space of memory from `dma`: the allocator object's address.
pub(crate) fn address_space(dma: &Arc<dyn DmaAllocator>) -> usize {
    Arc::as_ptr(dma) as *const u8 as usize
}

// SAFETY: the DmaBuf owns `len` bytes at `va`, valid until it is dropped (which frees them,
// on any thread: the allocator is Send + Sync); the allocator made them reachable by the
// device at `iova..iova + len`, contiguously, in its own address space; no reference to the
// memory is formed (`UserMem` uses none of the DmaBuf's accessors); every method returns
// fixed values.
unsafe impl verbs::DmaMemory for UserMem {
    fn as_ptr(&self) -> *mut u8 {
        self.buf.va()
    }
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn device_addr(&self) -> u64 {
        self.buf.iova()
    }
    fn address_space(&self) -> usize {
        address_space(self.buf.allocator())
    }
}
