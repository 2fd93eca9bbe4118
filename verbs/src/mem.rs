//! Memory the device can reach, with an owner: the [`DmaMemory`] trait a provider (or a
//! platform) implements for its DMA memory, and [`Buffer`], the shared handle users and
//! memory regions hold.
//! See [`Buffer`] for the ownership and race rules.

use alloc::sync::Arc;
use core::cell::UnsafeCell;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::error::Error;
use crate::types::MemRegion;

/// Size of the pages of a [`DmaMemory::pages`] list.
pub const DMA_PAGE_SIZE: usize = 4096;

/// Memory a device can reach: a CPU mapping and the device addresses of the same bytes.
///
/// Providers implement it for the DMA memory they allocate
/// ([`Provider::alloc_buf`](crate::Provider::alloc_buf)); [`Buffer`] is the shared handle
/// over it. Dropping the value frees the memory.
///
/// # Safety
///
/// An implementation promises, for as long as the value lives (until it is dropped):
///
/// * `len()` bytes at `as_ptr()` are allocated, valid for reads and writes and not null;
///   `len()` is at most `isize::MAX`, and `device_addr() + len()` does not overflow;
/// * every method returns the same value on every call;
/// * no Rust reference (`&[u8]`, `&mut [u8]`, `&T`) to those bytes exists, and whoever else
///   knows their address (the implementation itself, the driver that allocated them) touches
///   them only as [`Buffer`]'s accessors do: with atomic byte accesses, or with plain copies
///   that race with nothing. The device's DMA is the only other access;
/// * the device reaches byte `i` at device address `device_addr() + i` when `pages()` is
///   `None`; with `pages()` = `Some(list)`, at
///   `list[(device_addr() % 4096 + i) / 4096] + (device_addr() + i) % 4096`, where every
///   entry is 4 KiB aligned and the list has exactly the entries needed to cover
///   `device_addr()..device_addr() + len()`;
/// * those device addresses are valid in the device address space (IOMMU domain) named by
///   `address_space()`: any device translating through that space reaches exactly these
///   bytes at them, and nothing else is mapped there while the value lives;
/// * dropping the value (on any thread) is the only thing that unmaps and frees the memory.
pub unsafe trait DmaMemory: Send + Sync {
    /// CPU address of the first byte.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the memory has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Device address of the first byte: the address work requests (SGEs) and memory
    /// registrations name it by.
    fn device_addr(&self) -> u64;
    /// Device addresses of the 4 KiB pages holding the memory, the first being the page of
    /// `device_addr()` (which then is an I/O virtual address the registration translates
    /// through this list); `None` when the memory is device-contiguous at `device_addr()`.
    fn pages(&self) -> Option<&[u64]> {
        None
    }
    /// Which device address space the device addresses belong to (an IOMMU domain; for
    /// example the address of the allocator object that maps it). Providers refuse memory of
    /// a space their device does not translate through.
    fn address_space(&self) -> usize;
}

/// A shared handle to (a window of) device-reachable memory: cloneable, `Send + Sync`, with
/// race-free CPU accessors.
///
/// Offsets of the accessors count from the start of the window; bad offsets and lengths are
/// [`Error::InvalidArgument`]. The memory is freed when the last handle (including those held
/// by memory regions) is dropped.
///
/// # Ownership
///
/// A [`Buffer`] is a clone of an `Arc` over the memory: the memory is freed when the last
/// handle is dropped. [`Provider::reg_mr`](crate::Provider::reg_mr) takes a handle, and the
/// memory region keeps it until [`dereg_mr`](crate::Provider::dereg_mr) **succeeded**; a
/// memory region dropped without a successful deregistration (a failed destroy that did not
/// hand it back, or one never destroyed) leaks its handle, so the memory stays allocated for as
/// long as the device might still write it. Safe code therefore cannot free memory the device
/// may touch through a registration.
///
/// # Races
///
/// The CPU and the device (and several CPU threads, since `Buffer` is `Send + Sync` and
/// cloneable) touch the same bytes. Every safe accessor of `Buffer` does each of its byte
/// accesses as one relaxed [`AtomicU8`] load or store, and nothing else ever forms a Rust
/// reference to the memory (the [`DmaMemory`] contract), so two threads reading and writing
/// the same bytes is a race between atomics of the same size: defined, with each byte reading
/// as some value written to it. Multi-byte values may tear (a word read while another thread
/// writes it can mix old and new bytes); order them with a completion, a lock, or an
/// ownership hand-over, as with the device. (Mixed-size atomic accesses that race are not
/// defined in Rust's model, so the safe accessors never use wider atomics.)
///
/// Byte-at-a-time copies are slow for bulk data. [`Buffer::read_unsync`] and
/// [`Buffer::write_unsync`] copy with `memcpy` and are `unsafe`: nothing else (no other
/// thread, no device DMA) may write the range while they read it, or touch it while they write
/// it, e.g. after the completion of the receive that filled it and before the range is
/// posted again.
///
/// ```
/// use std::sync::Arc;
/// use verbs::{Buffer, DmaMemory};
///
/// /// Heap memory the "device" reaches at device address 0x10000 (an illustration: a real
/// /// implementation is DMA-mapped memory from the provider, see `Provider::alloc_buf`).
/// struct Heap(*mut u8, usize);
/// // SAFETY: the allocation is owned by `Heap`, valid for `len` bytes until drop, and no
/// // reference to it is ever formed; the "device" address is fixed.
/// unsafe impl DmaMemory for Heap {
///     fn as_ptr(&self) -> *mut u8 { self.0 }
///     fn len(&self) -> usize { self.1 }
///     fn device_addr(&self) -> u64 { 0x10000 }
///     fn address_space(&self) -> usize { 1 }
/// }
/// impl Drop for Heap {
///     fn drop(&mut self) {
///         // SAFETY: the pointer came from `Box::into_raw` of a boxed slice of this length.
///         drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.0, self.1)) });
///     }
/// }
/// // SAFETY: the pointer is owned; all access goes through `Buffer`'s atomic accessors.
/// unsafe impl Send for Heap {}
/// // SAFETY: as above.
/// unsafe impl Sync for Heap {}
///
/// let raw = Box::into_raw(vec![0u8; 8192].into_boxed_slice()) as *mut u8;
/// let buf = Buffer::new(Heap(raw, 8192));
/// buf.write(100, b"hello").unwrap();
/// let mut out = [0u8; 5];
/// buf.read(100, &mut out).unwrap();
/// assert_eq!(&out, b"hello");
/// assert_eq!(buf.read(8190, &mut out), Err(verbs::Error::InvalidArgument)); // past the end
/// let tail = buf.slice(4096..8192).unwrap(); // the second page, as its own handle
/// assert_eq!(tail.addr(), 0x10000 + 4096);
/// let other = buf.clone();
/// std::thread::spawn(move || other.write_u32(0, 7).unwrap()).join().unwrap();
/// assert_eq!(buf.read_u32(0), Ok(7));
/// ```
///
/// Registering memory safely always goes through a [`Buffer`]; naming a raw device-address
/// range is `unsafe` ([`Provider::reg_mr_raw`](crate::Provider::reg_mr_raw)):
///
/// ```compile_fail,E0133
/// fn register<P: verbs::Provider>(p: &P, pd: &P::Pd) {
///     let raw = verbs::MemRegion { addr: 0x1000, length: 4096, pages: &[] };
///     // error: call to unsafe function requires an unsafe block
///     let _ = p.reg_mr_raw(pd, &raw, verbs::AccessFlags::LOCAL_WRITE);
/// }
/// ```
///
/// and so is wrapping a raw range in a `Buffer` ([`DmaMemory`] is an `unsafe trait`):
///
/// ```compile_fail,E0200
/// struct Raw;
/// // error: the trait `DmaMemory` requires an `unsafe impl` declaration
/// impl verbs::DmaMemory for Raw {
///     fn as_ptr(&self) -> *mut u8 { 0x1000 as *mut u8 }
///     fn len(&self) -> usize { 4096 }
///     fn device_addr(&self) -> u64 { 0x1000 }
///     fn address_space(&self) -> usize { 0 }
/// }
/// ```
#[derive(Clone)]
pub struct Buffer {
    mem: Arc<dyn DmaMemory>,
    /// Start of the window in `mem`.
    off: usize,
    /// Length of the window.
    len: usize,
}

impl core::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .finish()
    }
}

/// Two handles are equal when they are the same window of the same memory.
impl PartialEq for Buffer {
    fn eq(&self, other: &Buffer) -> bool {
        self.same_memory(other) && self.off == other.off && self.len == other.len
    }
}

impl Eq for Buffer {}

impl Buffer {
    /// A handle owning `mem` (the whole of it).
    pub fn new<M: DmaMemory + 'static>(mem: M) -> Buffer {
        Buffer::from_arc(Arc::new(mem))
    }

    /// A handle sharing `mem` (the whole of it).
    pub fn from_arc(mem: Arc<dyn DmaMemory>) -> Buffer {
        let len = mem.len();
        Buffer { mem, off: 0, len }
    }

    /// A handle to `range` of this window (same memory, kept alive as long as either handle
    /// lives). EINVAL if the range is reversed or not inside the window.
    pub fn slice(&self, range: Range<usize>) -> Result<Buffer, Error> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::InvalidArgument);
        }
        Ok(Buffer {
            mem: self.mem.clone(),
            off: self.off + range.start,
            len: range.end - range.start,
        })
    }

    /// Device address of the first byte of the window (what SGEs name).
    pub fn addr(&self) -> u64 {
        self.mem.device_addr() + self.off as u64
    }

    /// Length of the window in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device addresses of the 4 KiB pages covering the window, the first holding
    /// [`addr`](Self::addr); `None` when the memory is device-contiguous.
    pub fn pages(&self) -> Option<&[u64]> {
        let all = self.mem.pages()?;
        let first = (self.mem.device_addr() % DMA_PAGE_SIZE as u64) as usize + self.off;
        let end = first + self.len.max(1);
        all.get(first / DMA_PAGE_SIZE..end.div_ceil(DMA_PAGE_SIZE))
    }

    /// The window as a raw registration names it (the range `reg_mr` registers).
    pub fn region(&self) -> MemRegion<'_> {
        MemRegion {
            addr: self.addr(),
            length: self.len as u64,
            pages: self.pages().unwrap_or(&[]),
        }
    }

    /// The device address space of the memory ([`DmaMemory::address_space`]).
    pub fn address_space(&self) -> usize {
        self.mem.address_space()
    }

    /// CPU address of the first byte of the window. Dereferencing it is up to the caller's
    /// `unsafe` code, under the rules above.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `off <= mem.len()`, so the pointer stays inside (or one past) the
        // allocation.
        unsafe { self.mem.as_ptr().add(self.off) }
    }

    /// Whether both handles share the same memory (any windows of it).
    pub fn same_memory(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.mem, &other.mem)
    }

    /// The CPU address of `n` bytes at `off`, if they lie inside the window.
    fn at(&self, off: usize, n: usize) -> Result<*mut u8, Error> {
        match off.checked_add(n) {
            // SAFETY: `off + n <= len`: inside the window, hence inside the allocation.
            Some(end) if end <= self.len => Ok(unsafe { self.as_ptr().add(off) }),
            _ => Err(Error::InvalidArgument),
        }
    }

    /// Reads one byte.
    pub fn read_u8(&self, off: usize) -> Result<u8, Error> {
        let p = self.at(off, 1)?;
        // SAFETY: in bounds of live memory (the handle keeps it); accessed only atomically
        // (the `DmaMemory` contract), a byte needs no alignment.
        Ok(unsafe { load(p) })
    }

    /// Writes one byte.
    pub fn write_u8(&self, off: usize, v: u8) -> Result<(), Error> {
        let p = self.at(off, 1)?;
        // SAFETY: as in `read_u8`.
        unsafe { store(p, v) };
        Ok(())
    }

    /// Reads `N` bytes at `off` (any alignment; byte by byte, so a concurrent writer can
    /// tear it).
    pub fn read_array<const N: usize>(&self, off: usize) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        self.read(off, &mut out)?;
        Ok(out)
    }

    /// Reads a native-endian u16 (any alignment; see [`read_array`](Self::read_array)).
    pub fn read_u16(&self, off: usize) -> Result<u16, Error> {
        self.read_array(off).map(u16::from_ne_bytes)
    }

    /// Reads a native-endian u32 (any alignment; see [`read_array`](Self::read_array)).
    pub fn read_u32(&self, off: usize) -> Result<u32, Error> {
        self.read_array(off).map(u32::from_ne_bytes)
    }

    /// Reads a native-endian u64 (any alignment; see [`read_array`](Self::read_array)).
    pub fn read_u64(&self, off: usize) -> Result<u64, Error> {
        self.read_array(off).map(u64::from_ne_bytes)
    }

    /// Writes a native-endian u16 (any alignment, byte by byte).
    pub fn write_u16(&self, off: usize, v: u16) -> Result<(), Error> {
        self.write(off, &v.to_ne_bytes())
    }

    /// Writes a native-endian u32 (any alignment, byte by byte).
    pub fn write_u32(&self, off: usize, v: u32) -> Result<(), Error> {
        self.write(off, &v.to_ne_bytes())
    }

    /// Writes a native-endian u64 (any alignment, byte by byte).
    pub fn write_u64(&self, off: usize, v: u64) -> Result<(), Error> {
        self.write(off, &v.to_ne_bytes())
    }

    /// Copies `out.len()` bytes at `off` into `out` (atomic byte loads).
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), Error> {
        let p = self.at(off, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: `p + i` is inside the checked range of live memory, accessed only
            // atomically.
            *b = unsafe { load(p.add(i)) };
        }
        Ok(())
    }

    /// Copies `data` to `off` (atomic byte stores).
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), Error> {
        let p = self.at(off, data.len())?;
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { store(p.add(i), b) };
        }
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte` (atomic byte stores).
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), Error> {
        let p = self.at(off, len)?;
        for i in 0..len {
            // SAFETY: as in `read`.
            unsafe { store(p.add(i), byte) };
        }
        Ok(())
    }

    /// Copies `out.len()` bytes at `off` into `out` with a plain `memcpy` (fast).
    ///
    /// # Safety
    ///
    /// Nothing writes the range while the copy runs: no other thread through any handle, and
    /// not the device (no receive, RDMA write or atomic that can target it is in flight: e.g.
    /// the completion of the operation that filled it was polled, and the range was not
    /// posted or exposed for remote writes again since).
    pub unsafe fn read_unsync(&self, off: usize, out: &mut [u8]) -> Result<(), Error> {
        let p = self.at(off, out.len())?;
        // SAFETY: in bounds of live memory; the caller promises no concurrent writer, so a
        // plain read races with nothing; `out` is caller memory, not this allocation (no
        // reference to it exists).
        unsafe { core::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `off` with a plain `memcpy` (fast).
    ///
    /// # Safety
    ///
    /// Nothing else touches the range while the copy runs: no other thread reads or writes it
    /// through any handle, and the device neither reads nor writes it (it is not the target
    /// or source of an operation in flight, nor exposed to remote peers meanwhile).
    pub unsafe fn write_unsync(&self, off: usize, data: &[u8]) -> Result<(), Error> {
        let p = self.at(off, data.len())?;
        // SAFETY: in bounds of live memory; the caller promises nothing else accesses the
        // range; `data` cannot point into this allocation (no reference to it exists).
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
}

/// Relaxed atomic load of the byte at `p`.
///
/// # Safety
///
/// `p` points into live memory that is accessed only atomically (or by non-racing plain
/// copies) for the duration of the call.
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

/// `N` bytes of static memory a program hands to the device once, as C programs register a
/// `static uint8_t msg[N]`: [`take`](Self::take) gives the one `&'static mut` borrow of it,
/// for [`Provider::map_buf`](crate::Provider::map_buf) to make it device-reachable (a
/// [`Buffer`] to register). The bytes are reached through that buffer from then on.
///
/// ```
/// use verbs::StaticBytes;
/// static RECV_MSG: StaticBytes<16> = StaticBytes::new();
/// let mem: &'static mut [u8] = RECV_MSG.take().unwrap();
/// assert_eq!(mem.len(), 16);
/// assert!(RECV_MSG.take().is_none()); // once only
/// ```
pub struct StaticBytes<const N: usize> {
    taken: AtomicBool,
    bytes: UnsafeCell<[u8; N]>,
}

// SAFETY: the bytes are only reached through `take`, which hands out the one mutable borrow
// of them at most once (the atomic swap decides which caller gets it); `[u8; N]` is `Send`.
unsafe impl<const N: usize> Sync for StaticBytes<N> {}

impl<const N: usize> StaticBytes<N> {
    /// Zeroed bytes, not taken yet.
    pub const fn new() -> StaticBytes<N> {
        StaticBytes {
            taken: AtomicBool::new(false),
            bytes: UnsafeCell::new([0; N]),
        }
    }

    /// The bytes, for the rest of the program: `Some` the first time, `None` after.
    // The one mutable borrow comes out of a shared one on purpose: the atomic flag makes it
    // unique (interior mutability, as `OnceLock` or a static cell).
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut [u8]> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: the swap above returned false exactly once, so this is the only borrow of
        // the bytes ever made; they live as long as `self`, which is 'static.
        Some(unsafe { &mut *self.bytes.get() })
    }
}

impl<const N: usize> Default for StaticBytes<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::vec::Vec;

    /// Heap memory posing as DMA memory; counts its frees.
    struct Heap {
        p: *mut u8,
        len: usize,
        dev: u64,
        pages: Option<Vec<u64>>,
        freed: Arc<AtomicUsize>,
    }

    impl Heap {
        fn new(len: usize, dev: u64, pages: Option<Vec<u64>>, freed: &Arc<AtomicUsize>) -> Heap {
            let p = std::boxed::Box::into_raw(std::vec![0u8; len].into_boxed_slice()) as *mut u8;
            Heap {
                p,
                len,
                dev,
                pages,
                freed: freed.clone(),
            }
        }
    }

    impl Drop for Heap {
        fn drop(&mut self) {
            // SAFETY: `p` came from `Box::into_raw` of a boxed slice of `len` bytes.
            drop(unsafe {
                std::boxed::Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.p, self.len))
            });
            self.freed.fetch_add(1, Ordering::Relaxed);
        }
    }

    // SAFETY: the allocation is owned and valid until drop; no reference to it is formed;
    // the values are fixed; the page list (when given) covers the range.
    unsafe impl DmaMemory for Heap {
        fn as_ptr(&self) -> *mut u8 {
            self.p
        }
        fn len(&self) -> usize {
            self.len
        }
        fn device_addr(&self) -> u64 {
            self.dev
        }
        fn pages(&self) -> Option<&[u64]> {
            self.pages.as_deref()
        }
        fn address_space(&self) -> usize {
            7
        }
    }

    // SAFETY: the pointer is owned; all accesses go through Buffer.
    unsafe impl Send for Heap {}
    // SAFETY: as above.
    unsafe impl Sync for Heap {}

    fn buf(len: usize) -> (Buffer, Arc<AtomicUsize>) {
        let freed = Arc::new(AtomicUsize::new(0));
        (Buffer::new(Heap::new(len, 0x4000, None, &freed)), freed)
    }

    #[test]
    fn accessors_round_trip_and_check_bounds() {
        let (b, _) = buf(100);
        assert_eq!((b.len(), b.addr(), b.is_empty()), (100, 0x4000, false));
        b.write_u8(99, 1).unwrap();
        assert_eq!(b.read_u8(99), Ok(1));
        assert_eq!(b.read_u8(100), Err(Error::InvalidArgument));
        assert_eq!(b.write_u8(100, 1), Err(Error::InvalidArgument));
        b.write_u16(1, 0xbeef).unwrap();
        assert_eq!(b.read_u16(1), Ok(0xbeef));
        b.write_u32(3, 0xdead_beef).unwrap();
        assert_eq!(b.read_u32(3), Ok(0xdead_beef));
        b.write_u64(92, u64::MAX - 5).unwrap();
        assert_eq!(b.read_u64(92), Ok(u64::MAX - 5));
        assert_eq!(b.read_u64(93), Err(Error::InvalidArgument));
        assert_eq!(b.write_u32(97, 0), Err(Error::InvalidArgument));
        assert_eq!(
            b.read_array::<4>(3).map(u32::from_ne_bytes),
            Ok(0xdead_beef)
        );
        b.fill(10, 20, 0x5a).unwrap();
        assert_eq!(b.read_array::<3>(29), Ok([0x5a, 0, 0]));
        assert_eq!(b.fill(90, 11, 0), Err(Error::InvalidArgument));
        assert_eq!(b.write(usize::MAX, &[1]), Err(Error::InvalidArgument));
        let mut out = [0u8; 8];
        assert_eq!(
            b.read(usize::MAX - 2, &mut out),
            Err(Error::InvalidArgument)
        );
        b.write(50, b"abcdefgh").unwrap();
        b.read(50, &mut out).unwrap();
        assert_eq!(&out, b"abcdefgh");
        // empty accesses at the end are fine, past it are not
        b.read(100, &mut []).unwrap();
        assert_eq!(b.read(101, &mut []), Err(Error::InvalidArgument));
        // SAFETY: no other thread and no device touches the buffer.
        unsafe {
            b.write_unsync(60, b"fast").unwrap();
            let mut f = [0u8; 4];
            b.read_unsync(60, &mut f).unwrap();
            assert_eq!(&f, b"fast");
            assert_eq!(b.read_unsync(97, &mut f), Err(Error::InvalidArgument));
            assert_eq!(b.write_unsync(97, &f), Err(Error::InvalidArgument));
        }
    }

    #[test]
    fn windows_share_the_memory_and_are_bounded() {
        let (b, freed) = buf(8192);
        let w = b.slice(100..300).unwrap();
        assert_eq!((w.addr(), w.len()), (0x4000 + 100, 200));
        assert!(w.same_memory(&b) && w != b);
        assert_eq!(w, b.slice(100..300).unwrap());
        w.write_u8(0, 9).unwrap();
        assert_eq!(b.read_u8(100), Ok(9));
        assert_eq!(w.read_u8(200), Err(Error::InvalidArgument));
        assert_eq!(w.slice(1..201), Err(Error::InvalidArgument));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = w.slice(5..4);
        assert_eq!(reversed, Err(Error::InvalidArgument));
        let ww = w.slice(10..20).unwrap();
        assert_eq!(ww.addr(), 0x4000 + 110);
        assert_eq!(ww.as_ptr(), b.as_ptr().wrapping_add(110));
        assert_eq!(ww.region().length, 10);
        assert!(ww.region().pages.is_empty());
        // the memory goes with the last handle, whichever it is
        drop(b);
        drop(w);
        assert_eq!(freed.load(Ordering::Relaxed), 0);
        drop(ww);
        assert_eq!(freed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn windows_of_paged_memory_name_their_pages() {
        let freed = Arc::new(AtomicUsize::new(0));
        // 3 pages, the memory starting 0x800 into the first one
        let pages = std::vec![0x10_0000, 0x50_0000, 0x30_0000];
        let b = Buffer::new(Heap::new(8192, 0x7000_0800, Some(pages), &freed));
        assert_eq!(b.pages(), Some(&[0x10_0000, 0x50_0000, 0x30_0000][..]));
        let w = b.slice(0x800..0x1000).unwrap(); // all of the second page
        assert_eq!(w.addr(), 0x7000_1000);
        assert_eq!(w.pages(), Some(&[0x50_0000][..]));
        let r = w.region();
        assert_eq!(
            (r.addr, r.length, r.pages),
            (0x7000_1000, 0x800, &[0x50_0000u64][..])
        );
        let w = b.slice(0x7ff..0x801).unwrap(); // across the first page boundary
        assert_eq!(w.pages(), Some(&[0x10_0000, 0x50_0000][..]));
        let w = b.slice(0x1800..0x2000).unwrap(); // the tail, in the third page
        assert_eq!(w.pages(), Some(&[0x30_0000][..]));
        assert_eq!(b.address_space(), 7);
    }

    /// Threads (standing in for CPU users and a device) write and read the same bytes at
    /// once, through clones of one handle and overlapping windows: every access is an atomic
    /// byte access, so this is defined behaviour and every byte reads as a value someone
    /// wrote.
    #[test]
    fn threads_race_on_the_same_bytes_without_undefined_behaviour() {
        let (b, freed) = buf(512);
        b.fill(0, 512, 1).unwrap();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let w = b.slice(t as usize * 16..512).unwrap();
                    let mut seen = [0u8; 512];
                    for i in 0..200u32 {
                        let v = 1 + t * 50 + (i % 50) as u8;
                        w.fill(0, w.len(), v).unwrap();
                        w.write_u64(3, u64::from_ne_bytes([v; 8])).unwrap();
                        b.read(0, &mut seen).unwrap();
                        assert!(seen.iter().all(|&x| (1..=200).contains(&x)), "{seen:?}");
                        let word = b.read_u32(16).unwrap().to_ne_bytes();
                        assert!(word.iter().all(|&x| (1..=200).contains(&x)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(freed.load(Ordering::Relaxed), 0);
        b.fill(0, 512, 0).unwrap();
        assert_eq!(b.read_array::<4>(508), Ok([0; 4]));
        drop(b);
        assert_eq!(freed.load(Ordering::Relaxed), 1);
    }
}
