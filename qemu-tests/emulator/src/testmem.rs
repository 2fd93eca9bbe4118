//! Test host memory shared by the device models' unit tests: a Vec-backed memory behind an
//! IOMMU map.

use std::sync::{Arc, Mutex};

use crate::{AddressSpace, DmaFault};

/// Base IOVA of the test memory (above 4 GiB so `cmdq_addr_h` matters).
pub(crate) const MEM_BASE: u64 = 0x1_0000_0000;
const MEM_SIZE: usize = 16 << 20;

/// A Vec-backed host memory with an IOMMU map: only mapped ranges are accessible.
pub(crate) struct TestMem {
    data: Mutex<Vec<u8>>,
    mapped: Mutex<Vec<(u64, u64)>>,
    next: Mutex<u64>,
}

impl TestMem {
    pub(crate) fn new() -> Arc<TestMem> {
        Arc::new(TestMem {
            data: Mutex::new(vec![0; MEM_SIZE]),
            mapped: Mutex::new(Vec::new()),
            next: Mutex::new(MEM_BASE),
        })
    }

    /// Allocates `len` bytes aligned to `align` without mapping them.
    pub(crate) fn alloc_unmapped(&self, len: u64, align: u64) -> u64 {
        let mut n = self.next.lock().unwrap();
        let a = n.div_ceil(align) * align;
        *n = a + len;
        assert!(*n <= MEM_BASE + MEM_SIZE as u64, "test memory exhausted");
        a
    }

    /// Allocates and maps `len` bytes aligned to `align`.
    pub(crate) fn alloc(&self, len: u64, align: u64) -> u64 {
        let a = self.alloc_unmapped(len, align);
        self.map(a, len);
        a
    }

    pub(crate) fn map(&self, a: u64, len: u64) {
        self.mapped.lock().unwrap().push((a, a + len));
    }

    /// Removes every mapping overlapping `[a, a+len)` (whole mappings).
    pub(crate) fn unmap(&self, a: u64, len: u64) {
        self.mapped
            .lock()
            .unwrap()
            .retain(|(s, e)| *e <= a || *s >= a + len);
    }

    fn covered(&self, a: u64, len: usize) -> bool {
        let m = self.mapped.lock().unwrap();
        let end = a + len as u64;
        let mut pos = a;
        while pos < end {
            match m.iter().find(|(s, e)| *s <= pos && pos < *e) {
                Some((_, e)) => pos = *e,
                None => return false,
            }
        }
        true
    }

    fn off(a: u64, len: usize) -> Option<usize> {
        let o = a.checked_sub(MEM_BASE)? as usize;
        (o + len <= MEM_SIZE).then_some(o)
    }

    /// Reads memory directly (the test's CPU view, no IOMMU).
    pub(crate) fn rd(&self, a: u64, len: usize) -> Vec<u8> {
        let o = Self::off(a, len).expect("rd out of test memory");
        self.data.lock().unwrap()[o..o + len].to_vec()
    }

    /// Writes memory directly (the test's CPU view, no IOMMU).
    pub(crate) fn wr(&self, a: u64, d: &[u8]) {
        let o = Self::off(a, d.len()).expect("wr out of test memory");
        self.data.lock().unwrap()[o..o + d.len()].copy_from_slice(d);
    }
}

impl AddressSpace for TestMem {
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let f = DmaFault {
            iova,
            len: buf.len(),
            write: false,
        };
        if !self.covered(iova, buf.len()) {
            return Err(f);
        }
        let o = Self::off(iova, buf.len()).ok_or(f)?;
        buf.copy_from_slice(&self.data.lock().unwrap()[o..o + buf.len()]);
        Ok(())
    }

    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let f = DmaFault {
            iova,
            len: data.len(),
            write: true,
        };
        if !self.covered(iova, data.len()) {
            return Err(f);
        }
        let o = Self::off(iova, data.len()).ok_or(f)?;
        self.data.lock().unwrap()[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}
