//! Hardware abstraction for the NIC drivers.
//!
//! Three things stand between a driver and a machine:
//! - [`RegisterIo`]: 32/64-bit accesses to a BAR by offset. Real backends map the BAR and use
//!   volatile accesses ([`MmioBar`]); the in-process emulator backend hands the access to the
//!   device model.
//!   No Rust reference to MMIO is ever formed.
//! - [`DmaAllocator`] and the RAII [`DmaBuf`]: zeroed memory the device can reach, known by a
//!   CPU address (`va`) and a device address (`iova`). The buffer is unmapped and freed on drop.
//! - [`Platform`]: a relax hook for poll loops (where an inline emulator makes progress), a
//!   monotonic clock for timeouts and, where the backend can deliver them, the device's
//!   interrupt vectors ([`Interrupts`]) to sleep on instead of spinning. [`wait_for`] and
//!   [`wait_for_any`] are the drivers' blocking wait built on them: check, sleep on the
//!   vectors, check again, until the check finds something or a deadline passed.
//!
//! and the named barriers of [`barrier`], which follow rdma-core's `udma_barrier.h`.
//!
//! # Aliasing model of DMA memory
//!
//! DMA memory is shared between the CPU (possibly several threads) and the device, which
//! reads and writes it whenever it likes. Rust's rules make a plain access that races with
//! another access undefined behaviour, and a Rust reference (`&[u8]`, `&mut [u8]`) to memory
//! that changes underneath it is undefined behaviour too. So:
//!
//! 1. **No references.** Nobody forms a Rust reference to DMA memory (an allocator neither,
//!    while a region is handed out). It is reached through raw pointers (`DmaBuf::va`,
//!    `DmaRegion::va`) or through the accessors of [`DmaBuf`].
//! 2. **Safe accessors are atomic bytes.** Every safe accessor of `DmaBuf` (`read`, `write`,
//!    `fill`, `read_u8`, `write_be32`, ...) is bounds-checked and performs each byte access as
//!    one relaxed `AtomicU8` load or store. Any number of threads and the device may race on
//!    the same bytes: the races are between atomics of one size, which Rust defines, so safe
//!    code cannot cause undefined behaviour through them (a multi-byte value read while
//!    someone writes it may mix old and new bytes; ordering comes from ownership hand-overs,
//!    barriers and locks, not from the accessors). They never use wider atomics, because
//!    racing atomic accesses of different sizes are not defined.
//! 3. **Fast copies are `unsafe`.** `DmaBuf::read_unsync` / `write_unsync` copy with
//!    `memcpy`; their caller promises that nothing writes the range during a read and nothing
//!    touches it during a write: no other thread, and no DMA in flight (the completion of the
//!    operation that filled it was seen, and it was not handed to the device again).
//!    `DmaBuf::atomic_u32` hands out a 32-bit atomic and is `unsafe` for the same reason: the
//!    caller keeps CPU accesses of other sizes to that word from racing with it.
//! 4. **Driver rings** (work queues, completion queues, doorbell records) are accessed by the
//!    driver through raw pointers with volatile or atomic word accesses, by the one owner of
//!    the queue (a QP is posted to through `&mut`, a CQ is polled under its lock), ordered
//!    against the device with the [`barrier`]s; they are never exposed to users.
//! 5. **Ownership.** A `DmaBuf` frees its region on drop; memory the device may still use
//!    (a ring whose destroy command failed, memory registered with a key that was not
//!    destroyed) is leaked instead (`core::mem::forget`), never freed.
//!
//! The device itself is not Rust code: its DMA is outside the language's model, like another
//! process writing shared memory, and rules 1-3 make the CPU's side of it sound. (An
//! in-process device model standing in for hardware reaches the memory through
//! [`HeapDma::translate`]; it is test scaffolding that plays the device's part.)
//!
//! ```
//! use std::sync::Arc;
//! use nic_hal::{DmaAllocator, DmaBuf, HeapDma};
//! let dma: Arc<dyn DmaAllocator> = HeapDma::new(0x1000_0000);
//! let buf = DmaBuf::new(&dma, 4096, 4096).unwrap();
//! assert_eq!(buf.iova() % 4096, 0);
//! buf.write_be32(8, 0xdead_beef).unwrap();
//! assert_eq!(buf.read_be32(8).unwrap(), 0xdead_beef);
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod barrier;
mod device_mem;
mod dma;
mod heap;
pub mod irq;
mod mmio;
mod wait;

pub use device_mem::{DeviceBuf, StaticDma, address_space};
pub use dma::{DmaAllocator, DmaBuf, DmaError, DmaRegion};
pub use heap::HeapDma;
pub use irq::{Interrupts, IrqError, IrqWatch};
pub use mmio::MmioBar;
pub use wait::{wait_for, wait_for_any};

/// Access to one device BAR by byte offset.
///
/// Values are passed as the CPU would load or store them (native order): a driver for a
/// big-endian device converts with `to_be`/`from_be` itself, exactly as with a volatile access
/// to a mapped BAR.
///
/// Implementations must tolerate any offset: an access outside the BAR reads as all ones and
/// drops writes (what a PCI master abort gives), it never faults.
pub trait RegisterIo {
    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: usize) -> u32;
    /// Writes the 32-bit register at `offset`.
    fn write32(&self, offset: usize, value: u32);
    /// Writes 64 bits at `offset` as one access where the platform can (doorbells).
    fn write64(&self, offset: usize, value: u64);
    /// Copies `data` to the register window at `offset` with 64-byte stores where possible
    /// (BlueFlame). The default writes it as 64-bit words.
    fn write_block(&self, offset: usize, data: &[u8]) {
        for (i, c) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write64(offset + i * 8, u64::from_ne_bytes(w));
        }
    }
    /// The CPU mapping of the `len` bytes at `offset`, where the backend maps the BAR and
    /// the range lies inside it, for a driver that writes device memory with plain stores
    /// (EFA's low-latency queue: a WQE as eight 8-byte volatile stores); `None` (the default)
    /// where it does not. The pointer stays valid for volatile reads and writes of those
    /// bytes for as long as `self` lives; no Rust reference may be formed to them.
    fn mapped(&self, offset: usize, len: usize) -> Option<core::ptr::NonNull<u8>> {
        let _ = (offset, len);
        None
    }
}

/// The platform services a polling driver needs.
pub trait Platform {
    /// Called in every poll loop iteration: a spin hint on hardware; with an inline emulator it
    /// runs the device.
    fn relax(&self);
    /// Monotonic time in nanoseconds, for timeouts.
    fn now_ns(&self) -> u64;
    /// The device's interrupt vectors, if this backend delivers them. The default has none:
    /// the driver then polls (a wait for an event spins on [`relax`](Self::relax)).
    fn interrupts(&self) -> Option<&dyn Interrupts> {
        None
    }
}

impl<T: RegisterIo + ?Sized> RegisterIo for &T {
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        (**self).write64(offset, value)
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        (**self).write_block(offset, data)
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<core::ptr::NonNull<u8>> {
        (**self).mapped(offset, len)
    }
}

impl<T: RegisterIo + ?Sized> RegisterIo for alloc::sync::Arc<T> {
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        (**self).write64(offset, value)
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        (**self).write_block(offset, data)
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<core::ptr::NonNull<u8>> {
        (**self).mapped(offset, len)
    }
}

impl<T: Platform + ?Sized> Platform for alloc::sync::Arc<T> {
    fn relax(&self) {
        (**self).relax()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn interrupts(&self) -> Option<&dyn Interrupts> {
        (**self).interrupts()
    }
}
