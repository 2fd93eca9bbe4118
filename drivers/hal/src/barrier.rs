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
//!
//! Per architecture:
//!
//! | barrier    | x86-64                    | aarch64     | any other target   |
//! |------------|---------------------------|-------------|--------------------|
//! | `dma_wmb`  | compiler barrier          | `dmb oshst` | sequential fence   |
//! | `dma_rmb`  | compiler barrier          | `dmb oshld` | sequential fence   |
//! | `mmio_wmb` | `sfence` + `mfence`       | `dsb st`    | sequential fence   |
//!
//! x86-64 keeps stores in order and loads in order for write-back memory, so the two DMA
//! barriers only have to stop the compiler from reordering. aarch64 needs real barriers: the
//! outer-shareable `dmb` variants order CPU accesses against a DMA-capable observer, and
//! `dsb st` waits until earlier stores (including write-combined device stores) have completed
//! before the doorbell store is issued. Targets without a dedicated mapping get the strongest
//! fence the language offers; that is correct wherever the platform's `SeqCst` fence orders
//! device-visible memory, and nothing in this stack runs on such a target today.
//!
//! On aarch64 and x86-64 the inline assembly is written without `nomem`, so it is also a
//! compiler barrier: no memory access is moved across it.

#[cfg(not(target_arch = "aarch64"))]
use core::sync::atomic::{Ordering, fence};

/// Stores to DMA memory become visible to the device before later stores.
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(target_arch = "x86_64")]
    {
        // Stores to write-back memory are not reordered with other stores on x86-64; a release
        // fence compiles to nothing but keeps the compiler from sinking the stores past it.
        fence(Ordering::Release);
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders memory accesses; it reads and writes no memory and no
    // register, and is available on every AArch64 core.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fence(Ordering::SeqCst);
    }
}

/// Loads of a device-written entry happen after the ownership check that preceded this call.
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(target_arch = "x86_64")]
    {
        // Loads from write-back memory are not reordered with other loads on x86-64; an acquire
        // fence keeps the compiler from hoisting the entry's loads above the ownership check.
        fence(Ordering::Acquire);
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` only orders memory accesses; it reads and writes no memory and no
    // register, and is available on every AArch64 core.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fence(Ordering::SeqCst);
    }
}

/// DMA-memory stores are visible before the next MMIO store; write-combining buffers flushed.
#[inline(always)]
pub fn mmio_wmb() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `sfence` has no memory-safety preconditions; SSE is part of the x86_64
        // baseline.
        unsafe {
            core::arch::x86_64::_mm_sfence();
        }
        fence(Ordering::SeqCst);
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb st` waits for earlier stores to complete; it reads and writes no memory and
    // no register, and is available on every AArch64 core.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fence(Ordering::SeqCst);
    }
}
