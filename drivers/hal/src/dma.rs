//! DMA memory: the allocator trait and the RAII buffer.

use alloc::sync::Arc;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU32;

/// Why a DMA allocation or access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaError {
    /// The allocator has no memory (or no IOVA space) left for this request.
    NoMemory,
    /// Zero length, or an alignment that is not a power of two.
    InvalidRequest,
    /// An access past the end of the buffer, or misaligned for an atomic word.
    OutOfBounds,
    /// The platform refused to map the memory for the device (IOMMU error).
    MapFailed,
}

/// A block of device-reachable memory as an allocator hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRegion {
    /// CPU address of the first byte.
    pub va: NonNull<u8>,
    /// Device (bus) address of the first byte.
    pub iova: u64,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: a DmaRegion is a description (addresses and a length); whoever dereferences `va`
// does so through `DmaBuf`, whose accessors are bounds-checked and whose memory is owned.
unsafe impl Send for DmaRegion {}
// SAFETY: as above, the region itself is plain data.
unsafe impl Sync for DmaRegion {}

/// A source of DMA memory.
///
/// # Safety
///
/// Implementations promise that a region returned by [`allocate`](Self::allocate) is valid for
/// reads and writes of `len` bytes at `va`, aligned to `align` both at `va` and at `iova`,
/// zeroed, reachable by the device at `iova`, and not handed out again until it is passed to
/// [`deallocate`](Self::deallocate).
pub unsafe trait DmaAllocator: Send + Sync {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two) on both sides.
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError>;

    /// Unmaps and frees a region.
    ///
    /// # Safety
    ///
    /// `region` came from `allocate` on this allocator, is passed once, and nothing (CPU or
    /// device) uses it any more.
    unsafe fn deallocate(&self, region: DmaRegion);
}

/// An owned DMA buffer: freed (and unmapped) when dropped.
///
/// The device may write it at any time, so every access is bounds-checked and goes through raw
/// pointers (volatile for single words); no `&[u8]` to the memory is ever handed out.
pub struct DmaBuf {
    region: DmaRegion,
    owner: Arc<dyn DmaAllocator>,
}

impl core::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBuf")
            .field("iova", &format_args!("{:#x}", self.region.iova))
            .field("len", &self.region.len)
            .finish()
    }
}

impl DmaBuf {
    /// Allocates a zeroed buffer of `len` bytes aligned to `align`.
    pub fn new(alloc: &Arc<dyn DmaAllocator>, len: usize, align: usize) -> Result<Self, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let region = alloc.allocate(len, align)?;
        if region.len < len
            || !region.iova.is_multiple_of(align as u64)
            || !(region.va.as_ptr() as usize).is_multiple_of(align)
        {
            // SAFETY: the region came from this allocator and was never used.
            unsafe { alloc.deallocate(region) };
            return Err(DmaError::MapFailed);
        }
        Ok(DmaBuf {
            region: DmaRegion { len, ..region },
            owner: alloc.clone(),
        })
    }

    /// CPU address of the first byte.
    pub fn va(&self) -> *mut u8 {
        self.region.va.as_ptr()
    }

    /// Device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.region.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.region.len
    }

    /// Always false: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    fn check(&self, off: usize, n: usize) -> Result<*mut u8, DmaError> {
        match off.checked_add(n) {
            Some(end) if end <= self.region.len => {
                // SAFETY: off + n <= len, so the pointer stays inside the allocation.
                Ok(unsafe { self.region.va.as_ptr().add(off) })
            }
            _ => Err(DmaError::OutOfBounds),
        }
    }

    /// Copies `data` into the buffer at `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), DmaError> {
        let p = self.check(off, data.len())?;
        // SAFETY: `p..p+len` is inside the owned region (checked), `data` cannot overlap DMA
        // memory we own exclusively through `&self` accessors only.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Copies bytes at `off` out of the buffer.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), DmaError> {
        let p = self.check(off, out.len())?;
        // SAFETY: bounds checked; `out` is caller memory, distinct from the DMA region.
        unsafe { core::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Fills `len` bytes at `off` with `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        let p = self.check(off, len)?;
        // SAFETY: bounds checked.
        unsafe { core::ptr::write_bytes(p, byte, len) };
        Ok(())
    }

    /// Volatile read of one byte.
    pub fn read_u8(&self, off: usize) -> Result<u8, DmaError> {
        let p = self.check(off, 1)?;
        // SAFETY: bounds checked; a byte has no alignment requirement.
        Ok(unsafe { p.read_volatile() })
    }

    /// Volatile write of one byte.
    pub fn write_u8(&self, off: usize, v: u8) -> Result<(), DmaError> {
        let p = self.check(off, 1)?;
        // SAFETY: bounds checked.
        unsafe { p.write_volatile(v) };
        Ok(())
    }

    /// Volatile read of a big-endian u32 (any alignment).
    pub fn read_be32(&self, off: usize) -> Result<u32, DmaError> {
        let p = self.check(off, 4)?;
        // SAFETY: bounds checked; read_unaligned-style volatile access through a byte array.
        let b = unsafe { (p as *const [u8; 4]).read_volatile() };
        Ok(u32::from_be_bytes(b))
    }

    /// Volatile write of a big-endian u32 (any alignment).
    pub fn write_be32(&self, off: usize, v: u32) -> Result<(), DmaError> {
        let p = self.check(off, 4)?;
        // SAFETY: bounds checked; [u8; 4] has alignment 1.
        unsafe { (p as *mut [u8; 4]).write_volatile(v.to_be_bytes()) };
        Ok(())
    }

    /// Volatile read of a big-endian u64 (any alignment).
    pub fn read_be64(&self, off: usize) -> Result<u64, DmaError> {
        let p = self.check(off, 8)?;
        // SAFETY: bounds checked; [u8; 8] has alignment 1.
        let b = unsafe { (p as *const [u8; 8]).read_volatile() };
        Ok(u64::from_be_bytes(b))
    }

    /// Volatile write of a big-endian u64 (any alignment).
    pub fn write_be64(&self, off: usize, v: u64) -> Result<(), DmaError> {
        let p = self.check(off, 8)?;
        // SAFETY: bounds checked; [u8; 8] has alignment 1.
        unsafe { (p as *mut [u8; 8]).write_volatile(v.to_be_bytes()) };
        Ok(())
    }

    /// The 4-byte-aligned word at `off` as an atomic (doorbell records, shared counters).
    pub fn atomic_u32(&self, off: usize) -> Result<&AtomicU32, DmaError> {
        let p = self.check(off, 4)?;
        if !(p as usize).is_multiple_of(4) {
            return Err(DmaError::OutOfBounds);
        }
        // SAFETY: in bounds, aligned, lives as long as `self`; AtomicU32 tolerates concurrent
        // access by the device, and the memory is only ever accessed through raw pointers.
        Ok(unsafe { &*(p as *const AtomicU32) })
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: the region came from `owner`, is released once, and the buffer is gone.
        unsafe { self.owner.deallocate(self.region) };
    }
}

// SAFETY: the buffer owns its region; all accesses are raw-pointer based and bounds-checked, so
// sharing `&DmaBuf` across threads is no different from sharing the device's view of it.
unsafe impl Send for DmaBuf {}
// SAFETY: as above.
unsafe impl Sync for DmaBuf {}
