//! A heap-backed DMA allocator for tests and for emulated devices in the same process.

use crate::dma::{DmaAllocator, DmaError, DmaRegion};
use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use alloc::collections::BTreeMap;
use core::ptr::NonNull;
use spin::Mutex;

struct Mapping {
    va: NonNull<u8>,
    len: usize,
    layout: Layout,
}

struct State {
    next_iova: u64,
    /// iova -> mapping
    maps: BTreeMap<u64, Mapping>,
    limit: Option<usize>,
    live_bytes: usize,
}

/// Heap memory given IOVAs from a private range, acting as its own IOMMU: it knows which
/// device addresses are mapped, so an emulated device can [`translate`](HeapDma::translate)
/// them and refuse anything else.
pub struct HeapDma {
    base: u64,
    state: Mutex<State>,
}

// SAFETY: all state sits behind a mutex; the raw pointers are owned allocations.
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

    /// The CPU address of `len` bytes at device address `iova`, if that whole range lies in
    /// one live buffer.
    pub fn translate(&self, iova: u64, len: usize) -> Option<NonNull<u8>> {
        let st = self.state.lock();
        let (&start, m) = st.maps.range(..=iova).next_back()?;
        let off = usize::try_from(iova - start).ok()?;
        if off.checked_add(len)? > m.len {
            return None;
        }
        // SAFETY: off + len <= m.len, inside the allocation.
        Some(unsafe { NonNull::new_unchecked(m.va.as_ptr().add(off)) })
    }

    /// The IOVA base this allocator hands out from.
    pub fn iova_base(&self) -> u64 {
        self.base
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
        st.maps.insert(iova, Mapping { va, len, layout });
        st.live_bytes += len;
        Ok(DmaRegion { va, iova, len })
    }

    unsafe fn deallocate(&self, region: DmaRegion) {
        let mut st = self.state.lock();
        if let Some(m) = st.maps.remove(&region.iova) {
            st.live_bytes -= m.len;
            // SAFETY: `m` was allocated with this layout and is removed from the map, so no
            // translation can reach it any more.
            unsafe { dealloc(m.va.as_ptr(), m.layout) };
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
        let iova = b.iova();
        drop(b);
        assert_eq!(h.live_buffers(), 0);
        assert!(h.translate(iova, 1).is_none());
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
        assert!(b.atomic_u32(4).is_ok());
        assert!(b.atomic_u32(2).is_err());
        assert!(b.atomic_u32(62).is_err());
    }
}
