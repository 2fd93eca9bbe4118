//! DMA memory handed to the device.

use alloc::sync::Arc;
use core::mem::ManuallyDrop;
use core::ops::Deref;
use nic_hal::{DmaAllocator, DmaBuf};

use crate::Error;

/// A DMA buffer the device may read or write (a ring, a doorbell record, a firmware page, the
/// command queue).
///
/// Dropping it **leaks** the memory: only the code that knows the device no longer uses it
/// (the destroy command succeeded, the firmware returned the page, the function was disabled)
/// gives it back with [`release`](Self::release). A buffer freed while the device still holds
/// its address could be reused by someone else and then overwritten by a DMA.
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
/// [`Provider::alloc_buf`](verbs::Provider::alloc_buf) returns.
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

/// The device address space of memory from `dma`: the allocator object's address (it maps
/// the memory for the device, so two devices reach the same bytes at the same addresses
/// exactly when they share it).
pub(crate) fn address_space(dma: &Arc<dyn DmaAllocator>) -> usize {
    Arc::as_ptr(dma) as *const u8 as usize
}

// SAFETY: the DmaBuf owns `len` bytes at `va`, valid until it is dropped (which frees them,
// on any thread: the allocator is Send + Sync); the allocator made them reachable by the
// device at `iova..iova + len`, contiguously, in its own address space; no reference to
// the memory is formed (the DmaBuf's accessors are atomic and `UserMem` uses none of them);
// every method returns fixed values.
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

/// Writes the BE64 address of each 4 KB page of `buf` into `out` from byte `at` (a PAS list,
/// `docs/mlx5.md#page-lists`). Returns `false` if `out` is too short.
pub(crate) fn write_pas(buf: &DmaBuf, out: &mut [u8], at: usize) -> bool {
    let pages = buf.len().div_ceil(4096);
    for i in 0..pages {
        let off = at + i * 8;
        let Some(dst) = out.get_mut(off..off + 8) else {
            return false;
        };
        dst.copy_from_slice(&(buf.iova() + (i as u64) * 4096).to_be_bytes());
    }
    true
}
