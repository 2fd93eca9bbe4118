//! DMA memory: the allocator trait and the RAII buffer.

use alloc::sync::Arc;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU32, Ordering};

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
/// reads and writes of `len` bytes at `va` (at least the length asked for), aligned to
/// `align` both at `va` and at `iova`, zeroed, reachable by the device at `iova`, and not
/// handed out again until it is passed to [`deallocate`](Self::deallocate). They form no
/// reference to the memory while it is handed out. A region from
/// [`map_static`](Self::map_static) has `va` and `len` of the memory given, and the device
/// reaches exactly those bytes at `iova` until it is passed to
/// [`unmap_static`](Self::unmap_static).
pub unsafe trait DmaAllocator: Send + Sync {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two) on both sides.
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError>;

    /// Makes memory the program gave up for good (the one `&'static mut` borrow of it)
    /// reachable by the device: the region's `va` and `len` are `mem`'s, its `iova` where the
    /// device reaches it. The default cannot ([`DmaError::MapFailed`]): an allocator that only
    /// reaches memory it allocated. [`DmaError::InvalidRequest`] for no bytes.
    fn map_static(&self, mem: &'static mut [u8]) -> Result<DmaRegion, DmaError> {
        let _ = mem;
        Err(DmaError::MapFailed)
    }

    /// Takes the device's access to a region of [`map_static`](Self::map_static) away (the
    /// memory is not freed: it is the program's).
    ///
    /// # Safety
    ///
    /// `region` is exactly a value `map_static` on this allocator returned, is passed once,
    /// and nothing (CPU or device) uses it through the mapping any more.
    unsafe fn unmap_static(&self, region: DmaRegion) {
        let _ = region;
    }

    /// Unmaps and frees a region.
    ///
    /// # Safety
    ///
    /// `region` is exactly a value `allocate` on this allocator returned (all fields
    /// unchanged), is passed once, and nothing (CPU or device) uses it any more.
    unsafe fn deallocate(&self, region: DmaRegion);
}

/// An owned DMA buffer: freed (and unmapped) when dropped.
///
/// The device may write it at any time, so no `&[u8]` to the memory is ever handed out, every
/// access is bounds-checked, and the safe accessors do each byte access as one relaxed atomic
/// byte load or store (see the crate documentation's aliasing model); [`read_unsync`] and
/// [`write_unsync`] are the fast, `unsafe` copies.
///
/// [`read_unsync`]: Self::read_unsync
/// [`write_unsync`]: Self::write_unsync
pub struct DmaBuf {
    /// The region exactly as the allocator returned it (given back unchanged on drop).
    region: DmaRegion,
    /// The length asked for (at most `region.len`): what the accessors allow.
    len: usize,
    owner: Arc<dyn DmaAllocator>,
}

impl core::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBuf")
            .field("iova", &format_args!("{:#x}", self.region.iova))
            .field("len", &self.len)
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
            region,
            len,
            owner: alloc.clone(),
        })
    }

    /// CPU address of the first byte. Dereferencing it is `unsafe` and must follow the
    /// crate's aliasing model.
    pub fn va(&self) -> *mut u8 {
        self.region.va.as_ptr()
    }

    /// Device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.region.iova
    }

    /// Length in bytes (as asked for; the allocator may have given more, which stays unused).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The allocator this buffer goes back to.
    pub fn allocator(&self) -> &Arc<dyn DmaAllocator> {
        &self.owner
    }

    fn check(&self, off: usize, n: usize) -> Result<*mut u8, DmaError> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => {
                // SAFETY: off + n <= len <= region.len, so the pointer stays inside the
                // allocation.
                Ok(unsafe { self.region.va.as_ptr().add(off) })
            }
            _ => Err(DmaError::OutOfBounds),
        }
    }

    /// Copies `data` into the buffer at `off` (atomic byte stores).
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), DmaError> {
        let p = self.check(off, data.len())?;
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: `p + i` is inside the owned region (checked), which is only accessed
            // atomically or by non-racing copies (the aliasing model).
            unsafe { store(p.add(i), b) };
        }
        Ok(())
    }

    /// Copies bytes at `off` out of the buffer (atomic byte loads).
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), DmaError> {
        let p = self.check(off, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: as in `write`.
            *b = unsafe { load(p.add(i)) };
        }
        Ok(())
    }

    /// Fills `len` bytes at `off` with `byte` (atomic byte stores).
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        let p = self.check(off, len)?;
        for i in 0..len {
            // SAFETY: as in `write`.
            unsafe { store(p.add(i), byte) };
        }
        Ok(())
    }

    /// Copies bytes at `off` out of the buffer with a plain `memcpy` (fast).
    ///
    /// # Safety
    ///
    /// Nothing writes the range while the copy runs: no other thread (through this buffer or
    /// a raw pointer) and not the device (no DMA that can write it is in flight).
    pub unsafe fn read_unsync(&self, off: usize, out: &mut [u8]) -> Result<(), DmaError> {
        let p = self.check(off, out.len())?;
        // SAFETY: bounds checked; the caller promises no concurrent writer; `out` is caller
        // memory, distinct from the DMA region (no reference to it exists).
        unsafe { core::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into the buffer at `off` with a plain `memcpy` (fast).
    ///
    /// # Safety
    ///
    /// Nothing else reads or writes the range while the copy runs: no other thread and not the
    /// device.
    pub unsafe fn write_unsync(&self, off: usize, data: &[u8]) -> Result<(), DmaError> {
        let p = self.check(off, data.len())?;
        // SAFETY: bounds checked; the caller promises exclusive access to the range; `data`
        // cannot point into the DMA region (no reference to it exists).
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Reads one byte (atomic).
    pub fn read_u8(&self, off: usize) -> Result<u8, DmaError> {
        let p = self.check(off, 1)?;
        // SAFETY: bounds checked; a byte has no alignment requirement.
        Ok(unsafe { load(p) })
    }

    /// Writes one byte (atomic).
    pub fn write_u8(&self, off: usize, v: u8) -> Result<(), DmaError> {
        let p = self.check(off, 1)?;
        // SAFETY: bounds checked.
        unsafe { store(p, v) };
        Ok(())
    }

    fn read_array<const N: usize>(&self, off: usize) -> Result<[u8; N], DmaError> {
        let mut b = [0u8; N];
        self.read(off, &mut b)?;
        Ok(b)
    }

    /// Reads a big-endian u32 (any alignment; byte by byte, so a concurrent writer can tear
    /// it).
    pub fn read_be32(&self, off: usize) -> Result<u32, DmaError> {
        self.read_array(off).map(u32::from_be_bytes)
    }

    /// Writes a big-endian u32 (any alignment, byte by byte).
    pub fn write_be32(&self, off: usize, v: u32) -> Result<(), DmaError> {
        self.write(off, &v.to_be_bytes())
    }

    /// Reads a big-endian u64 (any alignment; byte by byte, so a concurrent writer can tear
    /// it).
    pub fn read_be64(&self, off: usize) -> Result<u64, DmaError> {
        self.read_array(off).map(u64::from_be_bytes)
    }

    /// Writes a big-endian u64 (any alignment, byte by byte).
    pub fn write_be64(&self, off: usize, v: u64) -> Result<(), DmaError> {
        self.write(off, &v.to_be_bytes())
    }

    /// The 4-byte-aligned word at `off` as an atomic (doorbell records, shared counters).
    ///
    /// # Safety
    ///
    /// While the reference lives, no CPU access to those 4 bytes of another kind (the byte
    /// accessors or copies of this buffer, a raw pointer) races with an access through it:
    /// Rust does not define racing atomic accesses of different sizes. (Accesses ordered by
    /// `&mut` ownership or a lock do not race.)
    pub unsafe fn atomic_u32(&self, off: usize) -> Result<&AtomicU32, DmaError> {
        let p = self.check(off, 4)?;
        if !(p as usize).is_multiple_of(4) {
            return Err(DmaError::OutOfBounds);
        }
        // SAFETY: in bounds, aligned, lives as long as `self`; AtomicU32 tolerates concurrent
        // access by the device, no reference to the memory exists, and the caller keeps other
        // CPU accesses to the word the same size.
        Ok(unsafe { AtomicU32::from_ptr(p as *mut u32) })
    }
}

/// Relaxed atomic load of the byte at `p`.
///
/// # Safety
///
/// `p` points into a live DMA region accessed as the aliasing model says.
unsafe fn load(p: *mut u8) -> u8 {
    // SAFETY: the caller's contract; AtomicU8 has the size and alignment of u8.
    unsafe { AtomicU8::from_ptr(p) }.load(Ordering::Relaxed)
}

/// Relaxed atomic store of `v` to the byte at `p`.
///
/// # Safety
///
/// As for [`load`].
unsafe fn store(p: *mut u8, v: u8) {
    // SAFETY: the caller's contract; AtomicU8 has the size and alignment of u8.
    unsafe { AtomicU8::from_ptr(p) }.store(v, Ordering::Relaxed)
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: `region` is exactly what `owner.allocate` returned, released once, and the
        // buffer is gone.
        unsafe { self.owner.deallocate(self.region) };
    }
}

// SAFETY: a DmaBuf owns its region. Moving it to another thread moves the obligation to free
// it, which `DmaAllocator: Send + Sync` allows from any thread; it holds no thread-bound
// state.
unsafe impl Send for DmaBuf {}
// SAFETY: every `&self` access to the memory is a bounds-checked atomic byte access (any
// number of threads and the device may race on the same bytes without undefined behaviour),
// and the accesses that would not be race-free (`read_unsync`, `write_unsync`, `atomic_u32`)
// are `unsafe` with the caller promising the absence of conflicting accesses.
unsafe impl Sync for DmaBuf {}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::HeapDma;
    use alloc::vec::Vec;
    use spin::Mutex;

    /// An allocator that hands out more than asked (rounded up to 4 KiB, as page allocators
    /// do) and asserts that every region comes back exactly as it was handed out.
    struct Exact {
        heap: Arc<HeapDma>,
        out: Mutex<Vec<DmaRegion>>,
        back: Mutex<Vec<DmaRegion>>,
    }

    // SAFETY: forwards to HeapDma with a longer length, which HeapDma then owns as a whole.
    unsafe impl DmaAllocator for Exact {
        fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
            let r = self.heap.allocate(len.next_multiple_of(4096), align)?;
            self.out.lock().push(r);
            Ok(r)
        }
        unsafe fn deallocate(&self, region: DmaRegion) {
            let mut out = self.out.lock();
            let i = out
                .iter()
                .position(|r| *r == region)
                .unwrap_or_else(|| panic!("deallocate of a region never handed out: {region:?}"));
            out.swap_remove(i);
            self.back.lock().push(region);
            // SAFETY: exactly what HeapDma returned, once.
            unsafe { self.heap.deallocate(region) };
        }
    }

    #[test]
    fn deallocate_gets_exactly_the_region_allocate_returned() {
        let heap = HeapDma::new(0x10_0000);
        let exact = Arc::new(Exact {
            heap: heap.clone(),
            out: Mutex::new(Vec::new()),
            back: Mutex::new(Vec::new()),
        });
        let a: Arc<dyn DmaAllocator> = exact.clone();
        let b = DmaBuf::new(&a, 100, 64).unwrap();
        assert_eq!(b.len(), 100, "the buffer is as long as asked");
        assert_eq!(b.write_u8(100, 1), Err(DmaError::OutOfBounds));
        let given = exact.out.lock()[0];
        assert_eq!(given.len, 4096);
        drop(b);
        assert!(exact.out.lock().is_empty());
        assert_eq!(
            *exact.back.lock(),
            [given],
            "the full 4 KiB region came back"
        );
        assert_eq!(heap.live_bytes(), 0);
    }

    #[test]
    fn accessors_check_bounds_and_round_trip() {
        let heap = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = heap;
        let b = DmaBuf::new(&a, 64, 64).unwrap();
        b.write(60, &[1, 2, 3, 4]).unwrap();
        assert_eq!(b.write(61, &[1, 2, 3, 4]), Err(DmaError::OutOfBounds));
        assert_eq!(b.write(usize::MAX, &[1]), Err(DmaError::OutOfBounds));
        let mut out = [0u8; 4];
        b.read(60, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(b.read(61, &mut out), Err(DmaError::OutOfBounds));
        assert_eq!(b.fill(0, 65, 0), Err(DmaError::OutOfBounds));
        b.fill(0, 8, 0xab).unwrap();
        assert_eq!(b.read_be64(0), Ok(0xabab_abab_abab_abab));
        b.write_be64(3, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(b.read_u8(3), Ok(1));
        assert_eq!(b.read_be32(7), Ok(0x0506_0708));
        assert_eq!(b.read_be64(57), Err(DmaError::OutOfBounds));
        // SAFETY: no other thread and no device touches the buffer.
        unsafe {
            b.write_unsync(10, b"fast").unwrap();
            let mut f = [0u8; 4];
            b.read_unsync(10, &mut f).unwrap();
            assert_eq!(&f, b"fast");
            assert_eq!(b.read_unsync(62, &mut f), Err(DmaError::OutOfBounds));
            assert_eq!(b.write_unsync(62, &f), Err(DmaError::OutOfBounds));
        }
    }

    #[test]
    fn threads_racing_on_the_same_bytes() {
        let heap = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = heap;
        let b = Arc::new(DmaBuf::new(&a, 256, 64).unwrap());
        let threads: Vec<_> = (0..3u8)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut seen = [0u8; 256];
                    for i in 0..300 {
                        b.fill(0, 256, t * 16 + (i % 16) as u8).unwrap();
                        b.write(7, &[t; 33]).unwrap();
                        b.read(0, &mut seen).unwrap();
                        // every byte holds some value a thread wrote (no tearing below a byte)
                        assert!(seen.iter().all(|&x| x < 3 * 16), "{seen:?}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        b.fill(0, 256, 9).unwrap();
        assert!((0..256).all(|i| b.read_u8(i) == Ok(9)));
    }
}
