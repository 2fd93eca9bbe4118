//! Named barriers, after rdma-core's `util/udma_barrier.h`.
//!
//! Rings and doorbell records are ordinary (cache-coherent) shared memory, so ordering between
//! the CPU and the device is expressed with these fences:
//! - [`dma_wmb`] (`udma_to_device_barrier`): stores to DMA memory are visible to the device
//!   before later stores (WQE before doorbell record);
//! - [`dma_rmb`] (`udma_from_device_barrier`): after an ownership check, later loads of the
//!   entry see what the device wrote;
//! - [`mmio_wmb`] (`mmio_flush_writes` / `mmio_wc_start`): DMA-memory stores are visible before a
//!   following MMIO store, and write-combined MMIO is flushed.

use core::sync::atomic::{Ordering, fence};

/// Stores to DMA memory become visible to the device before later stores.
#[inline(always)]
pub fn dma_wmb() {
    // x86 keeps store order for write-back memory; a release fence is a compiler barrier there
    // and a `dmb ishst`-class fence elsewhere.
    fence(Ordering::Release);
}

/// Loads of a device-written entry happen after the ownership check that preceded this call.
#[inline(always)]
pub fn dma_rmb() {
    fence(Ordering::Acquire);
}

/// DMA-memory stores are visible before the next MMIO store; write-combining buffers flushed.
#[inline(always)]
pub fn mmio_wmb() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no memory-safety preconditions; SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    fence(Ordering::SeqCst);
}
