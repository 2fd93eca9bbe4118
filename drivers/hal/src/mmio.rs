//! A mapped BAR as [`RegisterIo`]: the backend of every real attachment (a VFIO mmap in a
//! Linux process, an identity-mapped physical BAR in a unikernel).

use crate::RegisterIo;
use core::ptr::NonNull;
use volatile::VolatilePtr;

/// A memory-mapped BAR accessed with volatile loads and stores by offset. No Rust reference to
/// the MMIO range is ever formed.
///
/// Accesses outside the mapping, or not naturally aligned, read as all ones and drop writes,
/// as a PCI master abort would: the driver then sees a dead device, never undefined behaviour.
#[derive(Debug)]
pub struct MmioBar {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: MMIO registers are shared with the device by nature; every access is a single
// volatile load or store, which is what concurrent users of a BAR do on real hardware.
unsafe impl Send for MmioBar {}
// SAFETY: as above.
unsafe impl Sync for MmioBar {}

impl MmioBar {
    /// Wraps the mapping of `len` bytes at `base`.
    ///
    /// # Safety
    ///
    /// `base..base+len` must be a mapping of device registers (or of memory standing in for
    /// them) that stays valid, readable and writable for the life of the returned value, and
    /// that no Rust reference covers.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> MmioBar {
        MmioBar { base, len }
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr<T>(&self, offset: usize) -> Option<NonNull<T>> {
        let size = core::mem::size_of::<T>();
        let end = offset.checked_add(size)?;
        if end > self.len || !offset.is_multiple_of(size) {
            return None;
        }
        let p = (self.base.as_ptr() as usize).checked_add(offset)?;
        if !p.is_multiple_of(core::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: offset + size <= len, so the pointer stays inside the mapping given to `new`.
        Some(unsafe { self.base.add(offset) }.cast())
    }
}

impl RegisterIo for MmioBar {
    fn read32(&self, offset: usize) -> u32 {
        match self.ptr::<u32>(offset) {
            // SAFETY: in bounds and aligned (checked by `ptr`); the mapping is valid per `new`.
            Some(p) => unsafe { VolatilePtr::new(p) }.read(),
            None => u32::MAX,
        }
    }

    fn write32(&self, offset: usize, value: u32) {
        if let Some(p) = self.ptr::<u32>(offset) {
            // SAFETY: in bounds and aligned (checked by `ptr`); the mapping is valid per `new`.
            unsafe { VolatilePtr::new(p) }.write(value);
        }
    }

    fn write64(&self, offset: usize, value: u64) {
        if let Some(p) = self.ptr::<u64>(offset) {
            // SAFETY: in bounds and aligned (checked by `ptr`); the mapping is valid per `new`.
            unsafe { VolatilePtr::new(p) }.write(value);
        }
    }

    fn mapped(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: offset + len <= len of the mapping given to `new`, so the pointer stays
        // inside it.
        Some(unsafe { self.base.add(offset) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_access_by_offset_and_master_abort_semantics() {
        let mut backing = vec![0u64; 16]; // 128 bytes, 8-aligned
        let base = NonNull::new(backing.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `backing` outlives `bar` and is not referenced while `bar` is used.
        let bar = unsafe { MmioBar::new(base, 128) };
        assert_eq!(bar.len(), 128);
        bar.write32(4, 0x1234_5678u32.to_be());
        assert_eq!(u32::from_be(bar.read32(4)), 0x1234_5678);
        bar.write64(8, 0x0102_0304_0506_0708u64.to_be());
        assert_eq!(u32::from_be(bar.read32(8)), 0x0102_0304);
        assert_eq!(u32::from_be(bar.read32(12)), 0x0506_0708);
        // Out of range or misaligned: all ones, writes dropped.
        assert_eq!(bar.read32(128), u32::MAX);
        assert_eq!(bar.read32(126), u32::MAX);
        assert_eq!(bar.read32(2), u32::MAX);
        bar.write32(126, 0);
        bar.write64(4, 0);
        assert_eq!(u32::from_be(bar.read32(4)), 0x1234_5678);
        let at = bar.mapped(120, 8).map(|p| p.as_ptr() as usize);
        assert_eq!(at, Some(base.as_ptr() as usize + 120));
        assert_eq!(bar.mapped(121, 8), None);
        assert_eq!(bar.mapped(usize::MAX, 2), None);
        bar.write_block(16, &[0xaa; 12]);
        assert_eq!(bar.read32(24), u32::from_ne_bytes([0xaa; 4]));
        assert_eq!(bar.read32(28), 0);
        let _ = bar;
        assert_eq!(backing[0].to_ne_bytes()[4..], 0x1234_5678u32.to_be_bytes());
    }
}
