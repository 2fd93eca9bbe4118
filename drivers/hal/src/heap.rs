//! A heap-backed DMA allocator for tests and for emulated devices in the same process.

use crate::dma::{DmaAllocator, DmaError, DmaRegion};
use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use alloc::collections::BTreeMap;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};
use spin::Mutex;

struct Mapping {
    va: NonNull<u8>,
    len: usize,
    /// The allocation's layout; `None` for memory the allocator does not own
    /// ([`HeapDma::map_external`], [`DmaAllocator::map_static`]): never freed here.
    layout: Option<Layout>,
}

/// One translation: a copy of a live mapping (`start..end` at `va`).
#[derive(Clone, Copy)]
struct Hit {
    start: u64,
    end: u64,
    va: NonNull<u8>,
}

/// Entries in the translation cache (a power of two).
const CACHE: usize = 16;

/// A translation cache entry, read without the lock (the device's accesses run on another
/// thread than the driver's allocations, and taking the lock on every access bounces its
/// cache line between them). Written only under the allocator lock, as a sequence lock: `seq`
/// is odd while the fields change, and a reader that sees `seq` change or odd ignores what
/// it read.
struct Slot {
    seq: AtomicU32,
    start: AtomicU64,
    end: AtomicU64,
    va: AtomicPtr<u8>,
}

impl Slot {
    /// An entry no access matches (an access needs `start <= iova` and `iova + len <= end`).
    fn empty() -> Slot {
        Slot {
            seq: AtomicU32::new(0),
            start: AtomicU64::new(u64::MAX),
            end: AtomicU64::new(0),
            va: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The entry, if it was not being written meanwhile.
    fn load(&self) -> Option<(u64, u64, *mut u8)> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let e = (
            self.start.load(Ordering::Relaxed),
            self.end.load(Ordering::Relaxed),
            self.va.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(e)
    }

    /// Sets the entry (`start = u64::MAX, end = 0`: empty). Only with the allocator lock held
    /// (one writer at a time).
    fn store(&self, start: u64, end: u64, va: *mut u8) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.start.store(start, Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
        self.va.store(va, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

struct State {
    next_iova: u64,
    /// iova -> mapping
    maps: BTreeMap<u64, Mapping>,
    limit: Option<usize>,
    live_bytes: usize,
}

/// The cache slot for `iova`: direct-mapped by 4 KiB page.
fn slot(iova: u64) -> usize {
    (iova >> 12) as usize & (CACHE - 1)
}

impl State {
    /// The mapping holding `iova..end` (whole), if any.
    fn find(&self, iova: u64, end: u64) -> Option<Hit> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let h = Hit {
            start,
            end: start.checked_add(m.len as u64)?,
            va: m.va,
        };
        (end <= h.end).then_some(h)
    }
}

/// Heap memory given IOVAs from a private range, acting as its own IOMMU: it knows which
/// device addresses are mapped, so an emulated device can [`translate`](HeapDma::translate)
/// them and refuse anything else.
pub struct HeapDma {
    base: u64,
    state: Mutex<State>,
    /// Recently used mappings. Every entry is a copy of a mapping in `state.maps` (or empty):
    /// `deallocate` empties a mapping's entries before it frees the memory, under the lock
    /// that entries are written under.
    cache: [Slot; CACHE],
}

// SAFETY: all state sits behind a mutex or in atomics; the raw pointers are owned
// allocations.
unsafe impl Send for HeapDma {}
// SAFETY: as above.
unsafe impl Sync for HeapDma {}

impl HeapDma {
    /// An allocator whose IOVAs start at `iova_base` (rounded up to 4 KiB).
    pub fn new(iova_base: u64) -> alloc::sync::Arc<HeapDma> {
        let base = iova_base.next_multiple_of(4096).max(4096);
        alloc::sync::Arc::new(HeapDma {
            base,
            state: Mutex::new(State {
                next_iova: base,
                maps: BTreeMap::new(),
                limit: None,
                live_bytes: 0,
            }),
            cache: core::array::from_fn(|_| Slot::empty()),
        })
    }

    /// Fails allocations once `bytes` are live (to test out-of-memory paths).
    pub fn set_limit(&self, bytes: Option<usize>) {
        self.state.lock().limit = bytes;
    }

    /// Number of live buffers.
    pub fn live_buffers(&self) -> usize {
        self.state.lock().maps.len()
    }

    /// Bytes in live buffers.
    pub fn live_bytes(&self) -> usize {
        self.state.lock().live_bytes
    }

    /// The live buffers as (IOVA, length), by IOVA: what a test inspects to see that memory
    /// the device may still use was kept.
    pub fn regions(&self) -> alloc::vec::Vec<(u64, usize)> {
        let st = self.state.lock();
        st.maps.iter().map(|(&iova, m)| (iova, m.len)).collect()
    }

    /// The CPU address of `len` bytes at device address `iova`, if that whole range lies in
    /// one live buffer.
    ///
    /// Device accesses come in runs on a few buffers (queues, doorbell records, data), so the
    /// mappings recently found are cached (direct-mapped by page); a miss searches the tree.
    /// A hit takes no lock (the entries are sequence-locked), so a device thread translating
    /// does not bounce the allocator lock with the driver's thread. As before, the pointer is
    /// valid while the buffer is not freed; freeing a buffer the device is accessing is the
    /// caller's bug.
    pub fn translate(&self, iova: u64, len: usize) -> Option<NonNull<u8>> {
        let end = iova.checked_add(u64::try_from(len).ok()?)?;
        let slot = &self.cache[slot(iova)];
        let (start, va) = match slot.load() {
            Some((start, e, va)) if start <= iova && end <= e && !va.is_null() => (start, va),
            _ => {
                let st = self.state.lock();
                let h = st.find(iova, end)?;
                slot.store(h.start, h.end, h.va.as_ptr());
                (h.start, h.va.as_ptr())
            }
        };
        let off = usize::try_from(iova - start).ok()?;
        // SAFETY: start <= iova and iova + len <= end, where `start..end` at `va` is a live
        // mapping (from the tree, or a cache entry, which is emptied before its mapping is
        // freed): the range lies inside that allocation, and `va` is not null.
        Some(unsafe { NonNull::new_unchecked(va.add(off)) })
    }

    /// The IOVA base this allocator hands out from.
    pub fn iova_base(&self) -> u64 {
        self.base
    }

    /// Maps `len` bytes of the caller's memory at `va` for the device (what an IOMMU mapping
    /// of user memory is: `VFIO_IOMMU_MAP_DMA` of a process's pages): the device address of
    /// `va`, page-aligned as `va` is page-aligned (`va % 4096 == iova % 4096`). The memory is
    /// not counted in [`live_bytes`](Self::live_bytes) and never freed here; undo it with
    /// [`unmap_external`](Self::unmap_external). EINVAL-style `InvalidRequest` for a length
    /// of 0.
    ///
    /// # Safety
    ///
    /// `va..va + len` stays allocated and readable and writable until `unmap_external` of the
    /// returned address returned (the device may read and write it at any time meanwhile,
    /// racing with the CPU's accesses, which the caller makes atomic or tolerates as a
    /// device's).
    pub unsafe fn map_external(&self, va: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        self.map_foreign(va, len)
    }

    /// Maps memory the allocator does not own at a fresh device address with the same offset
    /// in its page as `va` (as an IOMMU maps pages), past a guard gap. Not counted in
    /// [`live_bytes`](Self::live_bytes); counted in [`live_buffers`](Self::live_buffers).
    fn map_foreign(&self, va: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        if len == 0 {
            return Err(DmaError::InvalidRequest);
        }
        let off = (va.as_ptr() as usize % 4096) as u64;
        let mut st = self.state.lock();
        let iova = st.next_iova.next_multiple_of(4096) + off;
        st.next_iova = (iova + len as u64 + 4096).next_multiple_of(4096);
        st.maps.insert(
            iova,
            Mapping {
                va,
                len,
                layout: None,
            },
        );
        Ok(iova)
    }

    /// Removes a mapping made with [`map_external`](Self::map_external): the device faults
    /// on the range afterwards. Unknown addresses are ignored.
    pub fn unmap_external(&self, iova: u64) {
        let mut st = self.state.lock();
        if st.maps.get(&iova).is_some_and(|m| m.layout.is_none()) {
            st.maps.remove(&iova);
            for e in &self.cache {
                if e.load().is_none_or(|(start, _, _)| start == iova) {
                    e.store(u64::MAX, 0, core::ptr::null_mut());
                }
            }
        }
    }
}

// SAFETY: regions are fresh zeroed heap allocations of at least `len` bytes, aligned as asked
// on both sides (IOVAs are aligned by the same rule), and stay alive until `deallocate`.
unsafe impl DmaAllocator for HeapDma {
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let align = align.max(64);
        let layout = Layout::from_size_align(len, align).map_err(|_| DmaError::InvalidRequest)?;
        let mut st = self.state.lock();
        if let Some(limit) = st.limit
            && st.live_bytes + len > limit
        {
            return Err(DmaError::NoMemory);
        }
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let va = NonNull::new(p).ok_or(DmaError::NoMemory)?;
        let iova = st.next_iova.next_multiple_of(align as u64);
        // leave a guard gap so that a one-past-the-end device access is not in another buffer
        st.next_iova = (iova + len as u64 + 4096).next_multiple_of(4096);
        st.maps.insert(
            iova,
            Mapping {
                va,
                len,
                layout: Some(layout),
            },
        );
        st.live_bytes += len;
        Ok(DmaRegion { va, iova, len })
    }

    fn map_static(&self, mem: &'static mut [u8]) -> Result<DmaRegion, DmaError> {
        let len = mem.len();
        let va = NonNull::new(mem.as_mut_ptr()).ok_or(DmaError::InvalidRequest)?;
        let iova = self.map_foreign(va, len)?;
        Ok(DmaRegion { va, iova, len })
    }

    unsafe fn unmap_static(&self, region: DmaRegion) {
        self.unmap_external(region.iova);
    }

    unsafe fn deallocate(&self, region: DmaRegion) {
        let mut st = self.state.lock();
        if st
            .maps
            .get(&region.iova)
            .is_some_and(|m| m.layout.is_some())
            && let Some(m) = st.maps.remove(&region.iova)
        {
            st.live_bytes -= m.len;
            for e in &self.cache {
                if e.load().is_none_or(|(start, _, _)| start == region.iova) {
                    // (an entry being written cannot be: writers hold the lock we hold)
                    e.store(u64::MAX, 0, core::ptr::null_mut());
                }
            }
            if let Some(layout) = m.layout {
                // SAFETY: `m` was allocated with this layout and is removed from the map, so
                // no translation can reach it any more.
                unsafe { dealloc(m.va.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DmaBuf;
    use alloc::sync::Arc;

    #[test]
    fn alloc_translate_free() {
        let h = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = h.clone();
        let b = DmaBuf::new(&a, 100, 4096).unwrap();
        assert_eq!(b.iova() % 4096, 0);
        assert!(h.translate(b.iova() + 50, 50).is_some());
        assert!(h.translate(b.iova() + 50, 51).is_none());
        assert!(h.translate(b.iova() - 1, 1).is_none());
        b.write_be32(96, 7).unwrap();
        assert_eq!(b.read_be32(96).unwrap(), 7);
        assert_eq!(b.write_be32(97, 7), Err(DmaError::OutOfBounds));
        assert_eq!(b.read_u8(99).unwrap(), 7);
        assert_eq!(b.read_u8(98).unwrap(), 0);
        assert_eq!(b.read_u8(100), Err(DmaError::OutOfBounds));
        assert_eq!(h.live_buffers(), 1);
        assert_eq!(h.regions(), [(b.iova(), 100)]);
        let iova = b.iova();
        drop(b);
        assert!(h.regions().is_empty());
        assert_eq!(h.live_buffers(), 0);
        assert!(h.translate(iova, 1).is_none());
    }

    #[test]
    fn external_memory_maps_translates_and_unmaps() {
        let h = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = h.clone();
        let inner = DmaBuf::new(&a, 64, 64).unwrap();
        let mut mine = alloc::vec![0u8; 3 * 4096];
        let va = NonNull::new(mine.as_mut_ptr().wrapping_add(100)).unwrap();
        // SAFETY: `mine` outlives the mapping (unmapped below, before it is dropped).
        let iova = unsafe { h.map_external(va, 2 * 4096) }.unwrap();
        assert_eq!(iova % 4096, va.as_ptr() as u64 % 4096);
        assert_eq!(h.translate(iova, 8).unwrap(), va);
        assert_eq!(
            h.translate(iova + 4096, 8).unwrap().as_ptr(),
            va.as_ptr().wrapping_add(4096)
        );
        assert!(h.translate(iova + 2 * 4096 - 4, 8).is_none());
        // not counted as allocated memory; the allocator's own buffers are untouched
        assert_eq!(h.live_bytes(), 64);
        assert!(h.translate(inner.iova(), 64).is_some());
        // SAFETY: zero length is refused before anything is mapped.
        assert!(unsafe { h.map_external(va, 0) }.is_err());
        h.unmap_external(iova);
        assert!(h.translate(iova, 1).is_none());
        // unmapping an allocator buffer's address is not an unmap of it
        h.unmap_external(inner.iova());
        assert!(h.translate(inner.iova(), 64).is_some());
        drop(mine);
    }

    #[test]
    fn cached_translations_keep_every_check() {
        let h = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = h.clone();
        // A multi-page buffer and small ones sharing cache slots with its pages.
        let big = DmaBuf::new(&a, 5 * 4096 + 100, 4096).unwrap();
        let small: Vec<DmaBuf> = (0..40)
            .map(|i| DmaBuf::new(&a, 64 + i, 64).unwrap())
            .collect();
        for _ in 0..3 {
            for (i, b) in small.iter().enumerate() {
                let p = h.translate(b.iova() + 3, 60).unwrap();
                assert_eq!(p.as_ptr(), b.va().wrapping_add(3));
                // past the end of a buffer that was just hit: still refused
                assert!(h.translate(b.iova() + 3, 62 + i).is_none());
                assert!(h.translate(b.iova() - 1, 2).is_none());
                assert!(h.translate(b.iova() + 64 + i as u64, 1).is_none());
            }
            for pg in 0..6u64 {
                let iova = big.iova() + pg * 4096;
                assert_eq!(
                    h.translate(iova, 64).unwrap().as_ptr(),
                    big.va().wrapping_add(pg as usize * 4096)
                );
            }
            // an access that starts inside the buffer and runs past it
            assert!(h.translate(big.iova() + 5 * 4096, 101).is_none());
            assert!(h.translate(big.iova() + 5 * 4096 + 100, 1).is_none());
            assert!(h.translate(u64::MAX - 2, 8).is_none());
        }
        // freeing a buffer whose translation is cached: the address faults afterwards
        let (iova, bi) = (big.iova(), small[7].iova());
        drop(big);
        drop(small);
        assert!(h.translate(iova, 1).is_none());
        assert!(h.translate(iova + 4096, 1).is_none());
        assert!(h.translate(bi, 1).is_none());
        // a new buffer (its pages share cache slots with freed ones) translates to itself
        let again = DmaBuf::new(&a, 4096, 4096).unwrap();
        let p = h.translate(again.iova(), 8).unwrap();
        assert_eq!(p.as_ptr(), again.va());
    }

    #[test]
    fn translations_stay_exact_while_another_thread_allocates_and_frees() {
        extern crate std;
        let h = HeapDma::new(0x10_0000);
        let a: Arc<dyn DmaAllocator> = h.clone();
        let big = DmaBuf::new(&a, 16 * 4096, 4096).unwrap();
        let (iova, va) = (big.iova(), big.va() as usize);
        let h2 = h.clone();
        let reader = std::thread::spawn(move || {
            for i in 0..200_000u64 {
                let off = (i * 4096 + i % 61) % (16 * 4096 - 8);
                let p = h2.translate(iova + off, 8).unwrap();
                assert_eq!(p.as_ptr() as usize, va + off as usize);
                assert!(h2.translate(iova + 16 * 4096 - 4, 8).is_none());
            }
        });
        for i in 0..20_000usize {
            let b = DmaBuf::new(&a, 64 + i % 5000, 64).unwrap();
            let p = h.translate(b.iova() + 8, 8).unwrap();
            assert_eq!(p.as_ptr(), b.va().wrapping_add(8));
            let gone = b.iova();
            drop(b);
            assert!(
                h.translate(gone + 8, 8).is_none(),
                "freed buffer still translates"
            );
        }
        reader.join().unwrap();
    }

    #[test]
    fn limit_and_bad_requests() {
        let h = HeapDma::new(0);
        h.set_limit(Some(8192));
        let a: Arc<dyn DmaAllocator> = h.clone();
        let _x = DmaBuf::new(&a, 8192, 4096).unwrap();
        assert_eq!(DmaBuf::new(&a, 1, 8).unwrap_err(), DmaError::NoMemory);
        assert_eq!(DmaBuf::new(&a, 0, 8).unwrap_err(), DmaError::InvalidRequest);
        assert_eq!(DmaBuf::new(&a, 8, 3).unwrap_err(), DmaError::InvalidRequest);
    }

    #[test]
    fn atomics_need_alignment() {
        let h = HeapDma::new(0);
        let a: Arc<dyn DmaAllocator> = h.clone();
        let b = DmaBuf::new(&a, 64, 64).unwrap();
        // SAFETY: nothing else accesses the buffer.
        unsafe {
            assert!(b.atomic_u32(4).is_ok());
            assert!(b.atomic_u32(2).is_err());
            assert!(b.atomic_u32(62).is_err());
        }
    }
}
