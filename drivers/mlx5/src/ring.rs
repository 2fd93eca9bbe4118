//! Fast-path access to rings and doorbell records in DMA memory.
//!
//! [`DmaBuf`]'s accessors check bounds and return `Result`s, which is right for the command
//! path and too slow for the fast path. A [`Ring`] is a power-of-two window of a `DmaBuf`
//! addressed by *masked* offsets, so every access is in bounds by construction and needs no
//! check. Writes of work-queue entries are plain stores (the device reads them only after the
//! `dma_wmb` that precedes the doorbell record, as rdma-core does); reads of device-written
//! entries (CQEs) are volatile.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use nic_hal::DmaBuf;

/// A power-of-two window of a DMA buffer. `Copy` so that a fast path can keep it in registers
/// (a copy is only used while its owner keeps the buffer).
#[derive(Clone, Copy)]
pub(crate) struct Ring {
    base: NonNull<u8>,
    /// `len - 1`; `len` is a power of two and at least 64.
    mask: usize,
}

// SAFETY: a Ring is a pointer into a DMA buffer owned by the same object that owns the Ring
// (see `Ring::new`); `DmaBuf` itself is Send + Sync, and every access goes through raw pointers.
unsafe impl Send for Ring {}
// SAFETY: as above; concurrent users of one Ring are serialised by its owner (`&mut` QP or the
// CQ lock).
unsafe impl Sync for Ring {}

impl core::fmt::Debug for Ring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ring({:p}, {} bytes)", self.base, self.mask + 1)
    }
}

impl Ring {
    /// The window `[off, off + len)` of `buf`; `None` unless `len` is a power of two of at
    /// least 64 bytes, `off` is 64-byte aligned and the window lies inside the buffer.
    ///
    /// # Safety
    ///
    /// The Ring must not be used after `buf` is freed: its owner keeps `buf` (usually as a
    /// leak-on-drop `Shared`) at least as long as the Ring.
    pub(crate) unsafe fn new(buf: &DmaBuf, off: usize, len: usize) -> Option<Ring> {
        if !len.is_power_of_two() || len < 64 || !off.is_multiple_of(64) {
            return None;
        }
        if off.checked_add(len)? > buf.len() {
            return None;
        }
        // SAFETY: off + len <= buf.len(), so the pointer is inside the allocation.
        let p = unsafe { buf.va().add(off) };
        Some(Ring {
            base: NonNull::new(p)?,
            mask: len - 1,
        })
    }

    /// Size of the window in bytes.
    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }

    /// Pointer to the `W`-byte aligned slot holding byte `off` (masked).
    #[inline(always)]
    fn at<const W: usize>(&self, off: usize) -> *mut u8 {
        let o = off & self.mask & !(W - 1);
        // SAFETY: `o + W <= len` because `o` is a multiple of `W` below `len` and `W` divides
        // `len` (both powers of two, W <= 64 <= len); the window lies inside the buffer.
        unsafe { self.base.as_ptr().add(o) }
    }

    /// The 64-byte block holding byte `off` (masked): one WQEBB or one CQE, addressed by
    /// fixed offsets with no further masking.
    #[inline(always)]
    pub(crate) fn block(&self, off: usize) -> Block<'_> {
        Block {
            // `at::<64>` points at 64 in-bounds bytes, 64-byte aligned (the window base is).
            p: self.at::<64>(off),
            _ring: core::marker::PhantomData,
        }
    }

    /// The 64-byte block at `off`, without masking.
    ///
    /// # Safety
    ///
    /// `off` is a multiple of 64 below [`len`](Self::len).
    #[inline(always)]
    pub(crate) unsafe fn block_unchecked(&self, off: usize) -> Block<'_> {
        debug_assert!(off.is_multiple_of(64) && off < self.len());
        Block {
            // SAFETY: `off + 64 <= len` (the caller's promise, `len` a multiple of 64), and the
            // window lies inside the buffer.
            p: unsafe { self.base.as_ptr().add(off) },
            _ring: core::marker::PhantomData,
        }
    }

    /// Writes a 16-byte segment at `off` (masked, 16-byte aligned).
    #[inline(always)]
    pub(crate) fn put16<T: Copy>(&self, off: usize, v: T) {
        const { assert!(core::mem::size_of::<T>() == 16) };
        // SAFETY: `at::<16>` points at 16 in-bounds bytes; `write_unaligned` has no alignment
        // requirement; the memory is only shared with the device, which reads it after the
        // doorbell barrier.
        unsafe { self.at::<16>(off).cast::<T>().write_unaligned(v) }
    }

    /// Writes a big-endian u32 at `off` (masked, 4-byte aligned).
    #[inline(always)]
    pub(crate) fn put_be32(&self, off: usize, v: u32) {
        // SAFETY: 4 in-bounds bytes (see `at`).
        unsafe { self.at::<4>(off).cast::<[u8; 4]>().write(v.to_be_bytes()) }
    }

    /// Writes a 16-byte segment given as two u64s already in device (big-endian) byte order,
    /// at `off` (masked, 16-byte aligned).
    #[inline(always)]
    pub(crate) fn put2(&self, off: usize, a: u64, b: u64) {
        let p = self.at::<16>(off).cast::<u64>();
        // SAFETY: 16 in-bounds bytes (see `at`), 8-byte aligned (the window base is 64-byte
        // aligned and `off` is masked to a multiple of 16).
        unsafe {
            p.write(a);
            p.add(1).write(b);
        }
    }

    /// Copies `data` to `off` (masked), continuing at offset 0 past the end of the window.
    /// `data` must be at most the window's size.
    #[inline]
    pub(crate) fn put_bytes_wrapping(&self, off: usize, data: &[u8]) {
        let o = off & self.mask;
        let n = data.len().min(self.len());
        let first = n.min(self.len() - o);
        // SAFETY: `o + first <= len` and `n - first <= len`; `data` is CPU memory disjoint
        // from the DMA window.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(o), first);
            core::ptr::copy_nonoverlapping(data.as_ptr().add(first), self.base.as_ptr(), n - first);
        }
    }

    /// Copies (the start of) the 64-byte block holding `off` (masked) into `out`.
    #[inline]
    pub(crate) fn get64(&self, off: usize, out: &mut [u8]) {
        let n = out.len().min(64);
        // SAFETY: n <= 64 in-bounds bytes (see `at`); `out` is CPU memory of at least n bytes.
        unsafe { core::ptr::copy_nonoverlapping(self.at::<64>(off), out.as_mut_ptr(), n) }
    }

    /// Volatile read of the byte at `off` (masked).
    #[inline(always)]
    pub(crate) fn read_u8(&self, off: usize) -> u8 {
        // SAFETY: one in-bounds byte; volatile because the device writes it concurrently.
        unsafe { self.at::<1>(off).read_volatile() }
    }

    /// Volatile read of the big-endian u32 at `off` (masked, 4-byte aligned).
    #[inline(always)]
    pub(crate) fn read_be32(&self, off: usize) -> u32 {
        // SAFETY: 4 in-bounds bytes, aligned (the window base is 64-byte aligned).
        u32::from_be(unsafe { self.at::<4>(off).cast::<u32>().read_volatile() })
    }

    /// Volatile read of the u32 at `off` (masked, 4-byte aligned) as stored (its bytes in
    /// memory order: network order for immediate data).
    #[inline(always)]
    pub(crate) fn read_raw32(&self, off: usize) -> u32 {
        // SAFETY: as `read_be32`.
        unsafe { self.at::<4>(off).cast::<u32>().read_volatile() }
    }

    /// Volatile read of the big-endian u16 at `off` (masked, 2-byte aligned).
    #[inline(always)]
    pub(crate) fn read_be16(&self, off: usize) -> u16 {
        // SAFETY: 2 in-bounds bytes, aligned.
        u16::from_be(unsafe { self.at::<2>(off).cast::<u16>().read_volatile() })
    }

    /// Volatile read of the big-endian u64 at `off` (masked, 8-byte aligned).
    #[inline(always)]
    pub(crate) fn read_be64(&self, off: usize) -> u64 {
        // SAFETY: 8 in-bounds bytes, aligned.
        u64::from_be(unsafe { self.at::<8>(off).cast::<u64>().read_volatile() })
    }
}

/// One 64-byte, 64-byte aligned block of a [`Ring`] (from [`Ring::block`]). Its accessors
/// take word indexes inside the block, masked to it: every access is in bounds whatever the
/// index.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    p: *mut u8,
    _ring: core::marker::PhantomData<&'a Ring>,
}

impl Block<'_> {
    /// Stores `v` (already in device byte order) as the 8-byte word `i` (masked to 0..8).
    #[inline(always)]
    pub(crate) fn put(&self, i: usize, v: u64) {
        // SAFETY: `p` points at 64 in-bounds bytes aligned to 64 (see `Ring::block`; the
        // Ring's buffer outlives the borrow `'a`); `i & 7` keeps the word inside them. Plain
        // store: the device reads WQEs only after the doorbell barrier.
        unsafe { self.p.cast::<u64>().add(i & 7).write(v) }
    }

    /// Stores the 16 bytes `v` (already in device byte order) at the start of the block.
    #[inline(always)]
    pub(crate) fn put_seg(&self, v: [u64; 2]) {
        // SAFETY: as `put`, the block's first 16 bytes.
        unsafe { self.p.cast::<[u64; 2]>().write(v) }
    }

    /// Stores `v` big-endian at byte `off` (reduced modulo 63, any alignment).
    #[inline(always)]
    pub(crate) fn put_be16_at(&self, off: usize, v: u16) {
        // SAFETY: bytes `off % 63` and the next, both below 64: inside the block (see `put`);
        // a `[u8; 2]` has no alignment requirement.
        unsafe {
            self.p
                .add(off % 63)
                .cast::<[u8; 2]>()
                .write(v.to_be_bytes())
        }
    }

    /// Stores the byte `v` at byte `off` (masked to 0..64).
    #[inline(always)]
    pub(crate) fn put8_at(&self, off: usize, v: u8) {
        // SAFETY: one of the block's bytes (see `put`).
        unsafe { self.p.add(off & 63).write(v) }
    }

    /// Stores `v` (already in device byte order) as the 4-byte word `i` (masked to 0..16).
    #[inline(always)]
    pub(crate) fn put32(&self, i: usize, v: u32) {
        // SAFETY: as `put`, with 16 aligned 4-byte words.
        unsafe { self.p.cast::<u32>().add(i & 15).write(v) }
    }

    /// Volatile read of the byte at `off` (masked to 0..64).
    #[inline(always)]
    pub(crate) fn read_u8(&self, off: usize) -> u8 {
        // SAFETY: one of the block's bytes; volatile because the device writes it.
        unsafe { self.p.add(off & 63).read_volatile() }
    }

    /// Volatile read of the 8-byte word `i` (masked to 0..8) as stored.
    #[inline(always)]
    pub(crate) fn read_raw64(&self, i: usize) -> u64 {
        // SAFETY: as `put`; volatile because the device writes it.
        unsafe { self.p.cast::<u64>().add(i & 7).read_volatile() }
    }
}

/// The two big-endian words of a doorbell record (QP: receive / send counter; CQ: consumer
/// index / arm).
pub(crate) struct DbRec {
    words: NonNull<AtomicU32>,
}

// SAFETY: points into a DMA buffer owned alongside it (see `DbRec::new`); the words are atomics.
unsafe impl Send for DbRec {}
// SAFETY: as above.
unsafe impl Sync for DbRec {}

impl core::fmt::Debug for DbRec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "DbRec({:p})", self.words)
    }
}

impl DbRec {
    /// The record at the start of `buf` (at least 8 bytes, 4-byte aligned).
    ///
    /// # Safety
    ///
    /// The DbRec must not be used after `buf` is freed (as for [`Ring::new`]).
    pub(crate) unsafe fn new(buf: &DmaBuf) -> Option<DbRec> {
        // SAFETY: the record's words are touched by the CPU only through the DbRec (32-bit
        // atomics) or, by code holding the queue exclusively (`&mut`), through the buffer's
        // accessors, which then race with no DbRec access.
        let w0 = unsafe {
            buf.atomic_u32(4).ok()?;
            buf.atomic_u32(0).ok()?
        };
        Some(DbRec {
            words: NonNull::from(w0),
        })
    }

    /// Stores `v` big-endian into word `i` (0 or 1).
    #[inline(always)]
    pub(crate) fn set(&self, i: usize, v: u32) {
        // SAFETY: `new` checked that words 0 and 1 are in bounds and aligned; `i & 1` keeps the
        // index there; the buffer outlives `self`.
        let w = unsafe { &*self.words.as_ptr().add(i & 1) };
        w.store(v.to_be(), Ordering::Relaxed);
    }
}
