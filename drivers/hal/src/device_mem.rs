//! DMA memory as the drivers hand it to a device: buffers the device may still use (freed only
//! on purpose) and user buffers behind [`verbs::Buffer`].

use alloc::sync::Arc;
use core::mem::ManuallyDrop;
use core::ops::Deref;

use crate::{DmaAllocator, DmaBuf, DmaError};

/// A DMA buffer the device may read or write (a ring, a doorbell record, a firmware page, a
/// page list, a command queue).
///
/// Dropping it **leaks** the memory: only the code that knows the device no longer uses it
/// (the destroy command succeeded, the create was refused, the firmware returned the page,
/// the function was disabled or reset) gives it back with [`release`](Self::release). A
/// buffer freed while the device still holds its address could be reused by someone else and
/// then overwritten by a DMA.
pub struct DeviceBuf {
    buf: ManuallyDrop<DmaBuf>,
}

impl DeviceBuf {
    /// Allocates `len` zeroed bytes aligned to `align`.
    pub fn new(dma: &Arc<dyn DmaAllocator>, len: usize, align: usize) -> Result<Self, DmaError> {
        Ok(DeviceBuf {
            buf: ManuallyDrop::new(DmaBuf::new(dma, len, align)?),
        })
    }

    /// Frees the buffer: the device no longer uses it.
    pub fn release(self) {
        drop(ManuallyDrop::into_inner(self.buf));
    }
}

impl Deref for DeviceBuf {
    type Target = DmaBuf;
    fn deref(&self) -> &DmaBuf {
        &self.buf
    }
}

impl core::fmt::Debug for DeviceBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.buf.fmt(f)
    }
}

/// The device address space of memory from `dma`: the allocator object's address (it maps
/// the memory for the device, so two devices reach the same bytes at the same addresses
/// exactly when they share it). What [`verbs::DmaMemory::address_space`] reports for a
/// [`DmaBuf`], and what a provider compares a registered buffer's with.
pub fn address_space(dma: &Arc<dyn DmaAllocator>) -> usize {
    Arc::as_ptr(dma) as *const u8 as usize
}

// SAFETY: the DmaBuf owns `len` bytes at `va`, valid until it is dropped (which frees them,
// on any thread: the allocator is Send + Sync); the allocator made them reachable by the
// device at `iova..iova + len`, contiguously, in its own address space; no reference to the
// memory is formed (the DmaBuf's accessors are byte atomics or `unsafe` copies with the same
// contract as `verbs::Buffer`'s); every method returns fixed values.
unsafe impl verbs::DmaMemory for DmaBuf {
    fn as_ptr(&self) -> *mut u8 {
        self.va()
    }
    fn len(&self) -> usize {
        DmaBuf::len(self)
    }
    fn device_addr(&self) -> u64 {
        self.iova()
    }
    fn address_space(&self) -> usize {
        address_space(self.allocator())
    }
}

/// The program's own memory made reachable by the device ([`DmaAllocator::map_static`]):
/// what a provider wraps in a [`verbs::Buffer`] for `map_buf`. Dropping it takes the mapping
/// away; the memory stays the program's (unreachable to safe code: its one `&'static mut`
/// borrow was given up).
pub struct StaticDma {
    region: crate::DmaRegion,
    owner: Arc<dyn DmaAllocator>,
}

impl StaticDma {
    /// Maps `mem` with `dma`.
    pub fn map(dma: &Arc<dyn DmaAllocator>, mem: &'static mut [u8]) -> Result<Self, DmaError> {
        let region = dma.map_static(mem)?;
        Ok(StaticDma {
            region,
            owner: dma.clone(),
        })
    }
}

impl Drop for StaticDma {
    fn drop(&mut self) {
        // SAFETY: the region came from `map_static` on `owner` and is given back once (here);
        // the last `verbs::Buffer` handle (memory regions hold one until deregistered) is
        // what drops this, so nothing reaches the memory through the mapping any more.
        unsafe { self.owner.unmap_static(self.region) };
    }
}

// SAFETY: `len` bytes at `va` are the program's memory, given up for good (the one
// `&'static mut` borrow was consumed by `map_static`), so they stay valid and no reference to
// them exists; the allocator made them reachable by the device at `iova..iova + len` in its
// own address space until `unmap_static` (in Drop); every method returns fixed values.
unsafe impl verbs::DmaMemory for StaticDma {
    fn as_ptr(&self) -> *mut u8 {
        self.region.va.as_ptr()
    }
    fn len(&self) -> usize {
        self.region.len
    }
    fn device_addr(&self) -> u64 {
        self.region.iova
    }
    fn address_space(&self) -> usize {
        address_space(&self.owner)
    }
}
