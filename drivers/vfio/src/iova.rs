//! An address-range allocator: first fit with alignment, an optional "do not cross" boundary,
//! and frees that coalesce with their neighbours.
//!
//! [`VfioDma`](crate::VfioDma) uses it twice: for the IOVA space of
//! [`IovaPolicy::Allocate`](crate::IovaPolicy::Allocate) (one range per mapped block), and
//! inside each block to sub-allocate buffers (offsets from 0, with the boundary set to the
//! physically contiguous chunk size under
//! [`IovaPolicy::PhysicalAddress`](crate::IovaPolicy::PhysicalAddress)).

use std::collections::BTreeMap;
use std::fmt;

/// Why a range could not be allocated or freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeError {
    /// Zero size, an alignment or boundary that is not a power of two, a size larger than the
    /// boundary, or an alignment larger than the boundary.
    InvalidRequest,
    /// No free range is large enough (after alignment) for the request.
    Exhausted,
    /// A free of a range that lies outside the managed space or overlaps free space (a double
    /// free, or a range that was never handed out).
    NotAllocated {
        /// First address of the rejected range.
        start: u64,
        /// Its length.
        len: u64,
    },
    /// The managed space itself is empty or wraps past `u64::MAX`.
    InvalidSpace,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeError::InvalidRequest => write!(
                f,
                "invalid range request (zero size, alignment/boundary not a power of two, or size/alignment above the boundary)"
            ),
            RangeError::Exhausted => write!(f, "address space exhausted: no free range fits"),
            RangeError::NotAllocated { start, len } => write!(
                f,
                "range {start:#x}+{len:#x} is not allocated (double free or foreign range)"
            ),
            RangeError::InvalidSpace => {
                write!(f, "the address space is empty or wraps past 2^64")
            }
        }
    }
}

impl std::error::Error for RangeError {}

/// Manages the half-open space `[base, base + size)`.
///
/// Free space is kept as maximal ranges (no two free ranges touch), so a request fits if and
/// only if some aligned window of free addresses exists: [`allocate`](Self::allocate) returns
/// the lowest such address (first fit in address order).
///
/// ```
/// use vfio_attach::RangeAllocator;
/// let mut r = RangeAllocator::new(0x1000, 0x10000).unwrap();
/// let a = r.allocate(0x100, 0x1000).unwrap();
/// let b = r.allocate(0x100, 0x1000).unwrap();
/// assert_eq!((a, b), (0x1000, 0x2000));
/// r.free(a, 0x100).unwrap();
/// r.free(b, 0x100).unwrap();
/// assert_eq!(r.free_ranges().collect::<Vec<_>>(), vec![(0x1000, 0x10000)]);
/// ```
#[derive(Clone, Debug)]
pub struct RangeAllocator {
    base: u64,
    size: u64,
    /// start -> length of each free range; disjoint, non-adjacent, inside the space.
    free: BTreeMap<u64, u64>,
    allocated: u64,
}

impl RangeAllocator {
    /// A space of `size` bytes from `base`, all free.
    pub fn new(base: u64, size: u64) -> Result<Self, RangeError> {
        if size == 0 || base.checked_add(size).is_none() {
            return Err(RangeError::InvalidSpace);
        }
        let mut free = BTreeMap::new();
        free.insert(base, size);
        Ok(RangeAllocator {
            base,
            size,
            free,
            allocated: 0,
        })
    }

    /// First address of the space.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Size of the space.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes currently handed out.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated
    }

    /// Bytes currently free.
    pub fn free_bytes(&self) -> u64 {
        self.size - self.allocated
    }

    /// Whether nothing is allocated.
    pub fn is_unused(&self) -> bool {
        self.allocated == 0
    }

    /// The free ranges as `(start, len)`, in address order.
    pub fn free_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&s, &l)| (s, l))
    }

    /// Allocates `size` bytes at an address that is a multiple of `align` (a power of two).
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<u64, RangeError> {
        self.allocate_within(size, align, None)
    }

    /// As [`allocate`](Self::allocate), and the range does not cross a multiple of `boundary`
    /// (a power of two at least `align` and at least `size`), so that it lies in one
    /// `boundary`-sized chunk.
    pub fn allocate_within(
        &mut self,
        size: u64,
        align: u64,
        boundary: Option<u64>,
    ) -> Result<u64, RangeError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(RangeError::InvalidRequest);
        }
        if let Some(b) = boundary
            && (!b.is_power_of_two() || size > b || align > b)
        {
            return Err(RangeError::InvalidRequest);
        }
        let found = self.free.iter().find_map(|(&start, &len)| {
            place(start, len, size, align, boundary).map(|a| (start, a))
        });
        let Some((start, at)) = found else {
            return Err(RangeError::Exhausted);
        };
        let len = self.free.remove(&start).unwrap_or(0);
        let end = start + len;
        if at > start {
            self.free.insert(start, at - start);
        }
        let tail = at + size;
        if tail < end {
            self.free.insert(tail, end - tail);
        }
        self.allocated += size;
        Ok(at)
    }

    /// Returns `[start, start + len)` to the free space, merging it with free neighbours.
    ///
    /// The range must be inside the space and must not overlap free space; otherwise nothing
    /// changes and [`RangeError::NotAllocated`] is returned.
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), RangeError> {
        let bad = RangeError::NotAllocated { start, len };
        let end = start.checked_add(len).ok_or(bad)?;
        if len == 0 || start < self.base || end > self.base + self.size {
            return Err(bad);
        }
        let prev = self.free.range(..=start).next_back().map(|(&s, &l)| (s, l));
        let next = self.free.range(start..).next().map(|(&s, &l)| (s, l));
        if let Some((ps, pl)) = prev
            && ps + pl > start
        {
            return Err(bad);
        }
        if let Some((ns, _)) = next
            && ns < end
        {
            return Err(bad);
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((ps, pl)) = prev
            && ps + pl == start
        {
            self.free.remove(&ps);
            new_start = ps;
        }
        if let Some((ns, nl)) = next
            && ns == end
        {
            self.free.remove(&ns);
            new_end = ns + nl;
        }
        self.free.insert(new_start, new_end - new_start);
        self.allocated -= len;
        Ok(())
    }
}

/// The lowest address in the free range `[start, start + len)` where `size` bytes aligned to
/// `align` fit without crossing a multiple of `boundary`.
fn place(start: u64, len: u64, size: u64, align: u64, boundary: Option<u64>) -> Option<u64> {
    let end = start + len;
    let mut at = start.checked_next_multiple_of(align)?;
    if let Some(b) = boundary
        && at / b != (at + size - 1) / b
    {
        // `at` is not on a boundary (the range would cross one), so move to the next one; a
        // boundary is a multiple of `align`, so the new address stays aligned.
        at = at.checked_next_multiple_of(b)?;
    }
    (at.checked_add(size)? <= end).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_fit_alignment_and_coalescing() {
        let mut r = RangeAllocator::new(0x1000, 0x8000).unwrap();
        let a = r.allocate(0x10, 1).unwrap();
        assert_eq!(a, 0x1000);
        // Aligned to 0x4000: 0x1010 is skipped up to 0x4000.
        let b = r.allocate(0x100, 0x4000).unwrap();
        assert_eq!(b, 0x4000);
        // The hole between a and b is used first.
        let c = r.allocate(0x20, 0x10).unwrap();
        assert_eq!(c, 0x1010);
        assert_eq!(r.allocated_bytes(), 0x130);
        r.free(c, 0x20).unwrap();
        r.free(a, 0x10).unwrap();
        r.free(b, 0x100).unwrap();
        assert_eq!(r.free_ranges().collect::<Vec<_>>(), vec![(0x1000, 0x8000)]);
        assert!(r.is_unused());
    }

    #[test]
    fn exhaustion_and_bad_requests() {
        let mut r = RangeAllocator::new(0, 0x3000).unwrap();
        assert_eq!(r.allocate(0, 1), Err(RangeError::InvalidRequest));
        assert_eq!(r.allocate(1, 3), Err(RangeError::InvalidRequest));
        assert_eq!(
            r.allocate_within(0x2000, 0x1000, Some(0x1000)),
            Err(RangeError::InvalidRequest)
        );
        assert_eq!(r.allocate(0x4000, 1), Err(RangeError::Exhausted));
        let a = r.allocate(0x1000, 0x1000).unwrap();
        let _b = r.allocate(0x1000, 0x1000).unwrap();
        let _c = r.allocate(0x1000, 0x1000).unwrap();
        assert_eq!(r.allocate(1, 1), Err(RangeError::Exhausted));
        assert_eq!(r.free_bytes(), 0);
        r.free(a, 0x1000).unwrap();
        // Space for 0x1000 bytes again, but not 0x1001.
        assert_eq!(r.allocate(0x1001, 1), Err(RangeError::Exhausted));
        assert_eq!(r.allocate(0x1000, 1), Ok(0));
        assert_eq!(
            RangeAllocator::new(0, 0).unwrap_err(),
            RangeError::InvalidSpace
        );
        assert_eq!(
            RangeAllocator::new(u64::MAX, 2).unwrap_err(),
            RangeError::InvalidSpace
        );
    }

    #[test]
    fn double_free_and_foreign_ranges_are_refused() {
        let mut r = RangeAllocator::new(0x1000, 0x1000).unwrap();
        let a = r.allocate(0x100, 1).unwrap();
        r.free(a, 0x100).unwrap();
        let err = RangeError::NotAllocated {
            start: a,
            len: 0x100,
        };
        assert_eq!(r.free(a, 0x100), Err(err));
        assert!(r.free(0, 0x10).is_err()); // below the space
        assert!(r.free(0x1ff0, 0x20).is_err()); // past the end
        let b = r.allocate(0x100, 1).unwrap();
        assert!(r.free(b + 0x80, 0x100).is_err()); // overlaps free space
        assert!(r.free(b, 0).is_err());
        r.free(b, 0x100).unwrap();
    }

    #[test]
    fn boundary_is_not_crossed() {
        let mut r = RangeAllocator::new(0, 0x4000).unwrap();
        let a = r.allocate_within(0xc00, 0x40, Some(0x1000)).unwrap();
        assert_eq!(a, 0);
        // 0x800 does not fit in 0xc00..0x1000, so it goes to the next chunk.
        let b = r.allocate_within(0x800, 0x40, Some(0x1000)).unwrap();
        assert_eq!(b, 0x1000);
        // A small one still fills the first chunk's tail.
        let c = r.allocate_within(0x400, 0x40, Some(0x1000)).unwrap();
        assert_eq!(c, 0xc00);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc {
            size: u64,
            align_log2: u32,
            boundary_log2: Option<u32>,
        },
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u64..300, 0u32..7, proptest::option::of(6u32..10)).prop_map(
                |(size, align_log2, boundary_log2)| Op::Alloc { size, align_log2, boundary_log2 }
            ),
            2 => any::<usize>().prop_map(Op::Free),
        ]
    }

    /// The reference: the lowest aligned address whose window is inside the space, crosses
    /// no boundary and overlaps no live allocation.
    fn model_alloc(
        base: u64,
        size: u64,
        live: &[(u64, u64)],
        want: u64,
        align: u64,
        boundary: Option<u64>,
    ) -> Option<u64> {
        if let Some(b) = boundary
            && (want > b || align > b)
        {
            return None;
        }
        let end = base + size;
        let mut a = base.next_multiple_of(align);
        while a + want <= end {
            let crosses = boundary.is_some_and(|b| a / b != (a + want - 1) / b);
            let overlaps = live.iter().any(|&(s, l)| a < s + l && s < a + want);
            if !crosses && !overlaps {
                return Some(a);
            }
            a += align;
        }
        None
    }

    fn check_invariants(r: &RangeAllocator, live: &[(u64, u64)]) {
        let ranges: Vec<_> = r.free_ranges().collect();
        let end = r.base() + r.size();
        let mut free_total = 0;
        for w in ranges.windows(2) {
            // disjoint and coalesced: a gap (allocated bytes) between any two free ranges
            assert!(
                w[0].0 + w[0].1 < w[1].0,
                "free ranges touch or overlap: {ranges:x?}"
            );
        }
        for &(s, l) in &ranges {
            assert!(l > 0 && s >= r.base() && s + l <= end);
            free_total += l;
            for &(a, al) in live {
                assert!(
                    a + al <= s || s + l <= a,
                    "live {a:#x}+{al:#x} is in free space"
                );
            }
        }
        let live_total: u64 = live.iter().map(|&(_, l)| l).sum();
        assert_eq!(free_total + live_total, r.size());
        assert_eq!(r.allocated_bytes(), live_total);
    }

    proptest! {
        #[test]
        fn matches_first_fit_model(base in 0u64..100, size in 1u64..2000,
                                   ops in proptest::collection::vec(op(), 1..60)) {
            let mut r = RangeAllocator::new(base, size).unwrap();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc { size: want, align_log2, boundary_log2 } => {
                        let align = 1u64 << align_log2;
                        let boundary = boundary_log2.map(|b| 1u64 << b);
                        let expect = model_alloc(base, size, &live, want, align, boundary);
                        let got = r.allocate_within(want, align, boundary);
                        match expect {
                            Some(a) => {
                                prop_assert_eq!(got, Ok(a));
                                prop_assert_eq!(a % align, 0);
                                live.push((a, want));
                            }
                            None => prop_assert!(got.is_err(), "got {:?}", got),
                        }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (s, l) = live.swap_remove(i % live.len());
                        prop_assert_eq!(r.free(s, l), Ok(()));
                        // a second free of the same range is refused
                        prop_assert!(r.free(s, l).is_err());
                    }
                    Op::Free(_) => {}
                }
                check_invariants(&r, &live);
            }
            for (s, l) in live.drain(..) {
                prop_assert_eq!(r.free(s, l), Ok(()));
            }
            prop_assert_eq!(r.free_ranges().collect::<Vec<_>>(), vec![(base, size)]);
        }
    }
}
