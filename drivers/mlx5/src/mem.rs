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
