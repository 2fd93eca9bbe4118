//! The unikernel's HAL (nic-hal traits): registers are the identity-mapped BAR
//! ([`nic_hal::MmioBar`]), DMA memory is handed out by physical address ([`PhysDma`]: the
//! device sees guest-physical addresses, identity-mapped, so `iova == va`), and time is the
//! TSC calibrated against the PIT ([`TscClock`]).

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use core::alloc::Layout;
use core::ptr::NonNull;

use linked_list_allocator::Heap;
use nic_hal::{DmaAllocator, DmaError, DmaRegion, Platform};
use spin::Mutex;

use crate::io::{inb, outb, rdtsc};

/// Monotonic time from the TSC.
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    hz: u64,
}

impl TscClock {
    /// A clock for a TSC running at `hz`.
    pub fn new(hz: u64) -> TscClock {
        TscClock { hz: hz.max(1) }
    }

    /// TSC frequency in Hz.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Nanoseconds for `ticks` TSC ticks.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        (u128::from(ticks) * 1_000_000_000 / u128::from(self.hz)) as u64
    }
}

impl Platform for TscClock {
    fn relax(&self) {
        core::hint::spin_loop();
    }
    fn now_ns(&self) -> u64 {
        self.ticks_to_ns(rdtsc())
    }
}

/// The connection manager's host services are the driver's.
impl cm::Platform for TscClock {
    fn relax(&self) {
        Platform::relax(self)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(self)
    }
    /// RDRAND where the CPU has it, else the TSC (mixed with a stack address by
    /// [`cm::clock_entropy`]).
    fn entropy(&self) -> u64 {
        crate::io::rdrand().unwrap_or_else(|| cm::clock_entropy(rdtsc()))
    }
}

/// The PIT's input clock.
const PIT_HZ: u64 = 1_193_182;

/// Measures the TSC frequency against PIT channel 2 over `ms` milliseconds (at most 50).
/// `None` if the PIT never signalled (no PIT, or a stuck counter).
pub fn calibrate_tsc(ms: u64) -> Option<u64> {
    let count = (PIT_HZ * ms.clamp(1, 50) / 1000) as u16;
    let ctl = inb(0x61);
    // Gate on, speaker off.
    outb(0x61, (ctl & !0x02) | 0x01);
    // Channel 2, low then high byte, mode 0 (interrupt on terminal count), binary.
    outb(0x43, 0xb0);
    outb(0x42, count as u8);
    outb(0x42, (count >> 8) as u8);
    let t0 = rdtsc();
    let mut spins = 0u64;
    while inb(0x61) & 0x20 == 0 {
        spins += 1;
        if spins > 50_000_000 {
            outb(0x61, ctl);
            return None;
        }
    }
    let t1 = rdtsc();
    outb(0x61, ctl);
    let ticks = t1.wrapping_sub(t0);
    Some(ticks * PIT_HZ / u64::from(count))
}

/// DMA memory from a physical range: identity-mapped, so the device address is the CPU
/// address. First fit with alignment; every region is zeroed before it is handed out.
pub struct PhysDma {
    inner: Mutex<Inner>,
    base: u64,
    size: u64,
}

struct Inner {
    heap: Heap,
    /// Live regions: address → layout they were allocated with.
    live: BTreeMap<usize, Layout>,
}

impl PhysDma {
    /// DMA memory over `[base, base + size)`.
    ///
    /// # Safety
    ///
    /// The range is RAM, identity-mapped, used by nothing else for as long as the allocator
    /// (and every region it handed out) lives.
    pub unsafe fn new(base: usize, size: usize) -> Arc<PhysDma> {
        let mut heap = Heap::empty();
        // SAFETY: per the contract, the range is unused RAM we own.
        unsafe { heap.init(base as *mut u8, size) };
        Arc::new(PhysDma {
            inner: Mutex::new(Inner {
                heap,
                live: BTreeMap::new(),
            }),
            base: base as u64,
            size: size as u64,
        })
    }

    /// Bytes handed out and not returned.
    pub fn used(&self) -> usize {
        self.inner.lock().heap.used()
    }

    /// Regions handed out and not returned.
    pub fn live_regions(&self) -> usize {
        self.inner.lock().live.len()
    }

    /// The range managed: `(base, size)`.
    pub fn range(&self) -> (u64, u64) {
        (self.base, self.size)
    }
}

// SAFETY: regions come from a first-fit heap over RAM owned by this allocator (the `new`
// contract), are zeroed here, are aligned on both sides (va == iova) as the layout asks, and a
// region is not handed out again until `deallocate` returns it.
unsafe impl DmaAllocator for PhysDma {
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let layout =
            Layout::from_size_align(len, align.max(16)).map_err(|_| DmaError::InvalidRequest)?;
        let mut g = self.inner.lock();
        let p = g
            .heap
            .allocate_first_fit(layout)
            .map_err(|_| DmaError::NoMemory)?;
        // SAFETY: `p` is a fresh block of `len` bytes from our heap.
        unsafe { core::ptr::write_bytes(p.as_ptr(), 0, len) };
        g.live.insert(p.as_ptr() as usize, layout);
        Ok(DmaRegion {
            va: p,
            iova: p.as_ptr() as u64,
            len,
        })
    }

    unsafe fn deallocate(&self, region: DmaRegion) {
        let mut g = self.inner.lock();
        let Some(layout) = g.live.remove(&(region.va.as_ptr() as usize)) else {
            // Not ours (a caller bug): keep the heap consistent by ignoring it.
            return;
        };
        // SAFETY: the block came from this heap with this layout and is returned once (it
        // was still in `live`).
        unsafe {
            g.heap
                .deallocate(NonNull::new_unchecked(region.va.as_ptr()), layout)
        };
    }
}
