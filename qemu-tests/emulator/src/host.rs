//! Host-side backends for running the device behind a virtual machine (`nic-emud`): the BAR
//! as a shared-memory file that QEMU maps into the guest (`ivshmem-plain` BAR2), and guest
//! RAM as the `memory-backend-file` QEMU shares with us, addressed by guest-physical address.
//!
//! Neither file is trusted: the guest writes both at any time. Every access is bounds-checked
//! against the mapping; register-sized BAR accesses are single volatile loads and stores so a
//! 32-bit doorbell written by the guest is never seen torn.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::mem::{AddressSpace, BarMemory, DmaFault};

/// A shared (`MAP_SHARED`) read-write mapping of a whole file.
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
    _file: File,
}

// SAFETY: the mapping is plain shared memory; every access through this type goes through raw
// pointers (volatile for register words) and never forms a Rust reference to it, so moving or
// sharing the handle between threads is as safe as sharing the file.
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Opens (creating it if `create` and it does not exist) the file at `path`, makes it
    /// `len` bytes long if given (a shorter file is extended with zeros; a longer file is an
    /// error, so a wrong size is never silently cut), and maps all of it shared.
    pub fn open(path: &Path, len: Option<u64>, create: bool) -> io::Result<SharedMapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        let cur = file.metadata()?.len();
        let len = match len {
            Some(want) if cur == want => want,
            Some(want) if cur < want => {
                file.set_len(want)?;
                want
            }
            Some(want) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: file is {cur} bytes, larger than the {want} bytes asked for",
                        path.display()
                    ),
                ));
            }
            None => cur,
        };
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: empty file", path.display()),
            ));
        }
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of an open file descriptor; the kernel picks the
        // address, so no existing memory is affected. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(SharedMapping {
            base,
            len,
            _file: file,
        })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `open` refuses empty files).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte of the mapping (valid for [`SharedMapping::len`] bytes while `self`
    /// lives): for a host-side stand-in of the guest, e.g. an `MmioBar` over a second mapping
    /// of the BAR file. Other processes write the memory at any time: access it with raw
    /// pointers only.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.base
    }

    /// The range `off..off+n` as a pointer, if it lies inside the mapping.
    fn range(&self, off: usize, n: usize) -> Option<*mut u8> {
        let end = off.checked_add(n)?;
        if end > self.len {
            return None;
        }
        // SAFETY: off + n <= len: the pointer stays inside the mapping.
        Some(unsafe { self.base.as_ptr().add(off) })
    }

    /// Copies `buf.len()` bytes at `off` out of the mapping; `false` if out of range.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        let Some(p) = self.range(off, buf.len()) else {
            return false;
        };
        // SAFETY: `p..p+len` is inside the mapping (checked); `buf` is our own memory, which
        // cannot overlap a shared file mapping.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Copies `data` into the mapping at `off`; `false` (nothing written) if out of range.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        let Some(p) = self.range(off, data.len()) else {
            return false;
        };
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        true
    }

    /// Register-style read: aligned 8- and 4-byte accesses are single volatile loads, the
    /// rest bytewise volatile. `false` if out of range.
    fn read_volatile(&self, off: usize, buf: &mut [u8]) -> bool {
        let Some(p) = self.range(off, buf.len()) else {
            return false;
        };
        let n = buf.len();
        if n == 8 && (p as usize).is_multiple_of(8) {
            // SAFETY: in range (checked) and 8-aligned.
            let v = unsafe { std::ptr::read_volatile(p.cast::<u64>()) };
            buf.copy_from_slice(&v.to_ne_bytes());
        } else if n.is_multiple_of(4) && (p as usize).is_multiple_of(4) {
            for (i, c) in buf.chunks_exact_mut(4).enumerate() {
                // SAFETY: in range (checked) and 4-aligned (p and the chunk offset are).
                let v = unsafe { std::ptr::read_volatile(p.add(4 * i).cast::<u32>()) };
                c.copy_from_slice(&v.to_ne_bytes());
            }
        } else {
            for (i, b) in buf.iter_mut().enumerate() {
                // SAFETY: in range (checked).
                *b = unsafe { std::ptr::read_volatile(p.add(i)) };
            }
        }
        true
    }

    /// Register-style write (see [`SharedMapping::read_volatile`]). `false` if out of range.
    fn write_volatile(&self, off: usize, data: &[u8]) -> bool {
        let Some(p) = self.range(off, data.len()) else {
            return false;
        };
        let n = data.len();
        if n == 8 && (p as usize).is_multiple_of(8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(data);
            // SAFETY: in range (checked) and 8-aligned.
            unsafe { std::ptr::write_volatile(p.cast::<u64>(), u64::from_ne_bytes(w)) };
        } else if n.is_multiple_of(4) && (p as usize).is_multiple_of(4) {
            for (i, c) in data.chunks_exact(4).enumerate() {
                let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                // SAFETY: in range (checked) and 4-aligned.
                unsafe { std::ptr::write_volatile(p.add(4 * i).cast::<u32>(), v) };
            }
        } else {
            for (i, b) in data.iter().enumerate() {
                // SAFETY: in range (checked).
                unsafe { std::ptr::write_volatile(p.add(i), *b) };
            }
        }
        true
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping `open` made; nothing uses it after drop.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// The NIC's BAR0 as a shared-memory file: QEMU maps the same file as the `ivshmem-plain`
/// function's BAR2, so the guest's loads and stores land here untrapped and the device sees
/// them through [`Device::poll`](crate::Device::poll).
///
/// BAR0 starts at offset 0 of the file; the BAR is the whole file.
///
/// Register-sized accesses are single volatile loads and stores. The device writes a word
/// the guest writes only atomically: a doorbell is consumed with an atomic swap
/// ([`BarMemory::swap32`]), so a guest store is either what the swap returns or stays for
/// the next one; `cmdq_addr_l_sz` gets its geometry bits back with a compare-and-swap
/// ([`BarMemory::compare_exchange32`]) that fails if the guest stored meanwhile (see
/// `regs.rs`).
#[derive(Debug)]
pub struct ShmBar {
    map: SharedMapping,
}

impl ShmBar {
    /// Maps `path` as the BAR, creating it or extending it to `len` bytes if given (QEMU
    /// wants a power of two for ivshmem).
    pub fn open(path: &Path, len: Option<u64>) -> io::Result<ShmBar> {
        Ok(ShmBar::from_mapping(SharedMapping::open(path, len, true)?))
    }

    /// Wraps an existing mapping.
    pub fn from_mapping(map: SharedMapping) -> ShmBar {
        ShmBar { map }
    }

    /// The word at `off` (in range and 4-aligned) as an atomic.
    fn atomic(&self, off: usize) -> Option<&AtomicU32> {
        let p = self.map.range(off, 4)?;
        if !(p as usize).is_multiple_of(4) {
            return None;
        }
        // SAFETY: in range, 4-aligned, and shared memory stays mapped while `self` lives;
        // our other accesses to the word are volatile or atomic and the guest's are single
        // aligned 32-bit stores, so no access tears.
        Some(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }
}

impl BarMemory for ShmBar {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn untrapped(&self) -> bool {
        true
    }

    fn read(&self, off: usize, buf: &mut [u8]) {
        if !self.map.read_volatile(off, buf) {
            // Partly or wholly out of range: byte by byte, 0xff beyond the end.
            for (i, b) in buf.iter_mut().enumerate() {
                let mut one = [0xffu8];
                if let Some(o) = off.checked_add(i) {
                    self.map.read_volatile(o, &mut one);
                }
                *b = one[0];
            }
        }
    }

    fn write(&mut self, off: usize, data: &[u8]) {
        if !self.map.write_volatile(off, data) {
            for (i, b) in data.iter().enumerate() {
                if let Some(o) = off.checked_add(i) {
                    self.map.write_volatile(o, &[*b]);
                }
            }
        }
    }

    fn compare_exchange32(&mut self, off: usize, current: [u8; 4], new: [u8; 4]) -> bool {
        match self.atomic(off) {
            Some(a) => a
                .compare_exchange(
                    u32::from_ne_bytes(current),
                    u32::from_ne_bytes(new),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok(),
            None => false,
        }
    }

    fn swap64(&mut self, off: usize, new: [u8; 8]) -> [u8; 8] {
        let word = self
            .map
            .range(off, 8)
            .filter(|p| (*p as usize).is_multiple_of(8));
        match word {
            Some(p) => {
                // SAFETY: in range and 8-aligned in shared memory that stays mapped while
                // `self` lives; the driver's stores to the word are single aligned 64-bit
                // stores, so nothing tears.
                let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
                a.swap(u64::from_ne_bytes(new), Ordering::SeqCst)
                    .to_ne_bytes()
            }
            None => {
                let mut old = [0u8; 8];
                self.read(off, &mut old);
                self.write(off, &new);
                old
            }
        }
    }

    fn swap32(&mut self, off: usize, new: [u8; 4]) -> [u8; 4] {
        match self.atomic(off) {
            Some(a) => a
                .swap(u32::from_ne_bytes(new), Ordering::SeqCst)
                .to_ne_bytes(),
            None => {
                // Unaligned or out of range: the device only swaps aligned doorbell words;
                // do what the default does.
                let mut old = [0u8; 4];
                self.read(off, &mut old);
                self.write(off, &new);
                old
            }
        }
    }
}

/// Where guest RAM sits in guest-physical space, as QEMU 7.2's `q35` machine lays out a RAM
/// backend of `ram_size` bytes: below 4 GiB up to `below_4g`, the rest from 4 GiB up; the
/// backend file holds the low part at offset 0 and the high part right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamLayout {
    /// Bytes of RAM mapped at guest-physical 0 (file offset 0).
    pub below_4g: u64,
    /// Bytes of RAM mapped at guest-physical 4 GiB (file offset `below_4g`).
    pub above_4g: u64,
}

/// 4 GiB.
const FOUR_GIB: u64 = 1 << 32;

impl RamLayout {
    /// QEMU 7.2 `q35`: with less than 0xb000_0000 bytes of RAM everything is below 4 GiB;
    /// otherwise 2 GiB is below and the rest starts at 4 GiB.
    pub fn q35(ram_size: u64) -> RamLayout {
        let below_4g = if ram_size < 0xb000_0000 {
            ram_size
        } else {
            0x8000_0000
        };
        RamLayout {
            below_4g,
            above_4g: ram_size - below_4g,
        }
    }

    /// Total RAM in bytes (the backend file's size).
    pub fn size(&self) -> u64 {
        self.below_4g + self.above_4g
    }

    /// The file offset of `len` bytes of guest-physical memory at `gpa`, if all of them are
    /// RAM of one contiguous piece (an access crossing the end of low RAM or of high RAM is
    /// refused). A zero-length access is accepted anywhere inside or at the end of RAM.
    pub fn offset(&self, gpa: u64, len: u64) -> Option<u64> {
        let end = gpa.checked_add(len)?;
        if end <= self.below_4g {
            return Some(gpa);
        }
        if gpa >= FOUR_GIB && end <= FOUR_GIB.checked_add(self.above_4g)? {
            return Some(gpa - FOUR_GIB + self.below_4g);
        }
        None
    }
}

/// Guest RAM (a `memory-backend-file,share=on` file) as the device's DMA address space,
/// addressed by guest-physical address: the unikernel hands the device physical addresses,
/// and a Linux guest driving the NIC through VFIO without a vIOMMU uses IOVA = GPA too.
/// Anything outside guest RAM is a [`DmaFault`].
#[derive(Debug)]
pub struct GuestRam {
    map: SharedMapping,
    layout: RamLayout,
}

impl GuestRam {
    /// Maps the RAM backend file at `path` (created or extended to `ram_size` bytes; QEMU
    /// uses an existing file of the right size as it is) with the q35 layout for `ram_size`.
    pub fn open(path: &Path, ram_size: u64) -> io::Result<GuestRam> {
        let map = SharedMapping::open(path, Some(ram_size), true)?;
        Ok(GuestRam {
            map,
            layout: RamLayout::q35(ram_size),
        })
    }

    /// Wraps a mapping with an explicit layout (the mapping must cover `layout.size()`).
    pub fn with_layout(map: SharedMapping, layout: RamLayout) -> io::Result<GuestRam> {
        if (map.len() as u64) < layout.size() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping smaller than the RAM layout",
            ));
        }
        Ok(GuestRam { map, layout })
    }

    /// The layout in use.
    pub fn layout(&self) -> RamLayout {
        self.layout
    }

    fn locate(&self, gpa: u64, len: usize, write: bool) -> Result<usize, DmaFault> {
        let fault = DmaFault {
            iova: gpa,
            len,
            write,
        };
        let off = self.layout.offset(gpa, len as u64).ok_or(fault)?;
        usize::try_from(off).map_err(|_| fault)
    }
}

impl AddressSpace for GuestRam {
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let off = self.locate(iova, buf.len(), false)?;
        if self.map.read(off, buf) {
            Ok(())
        } else {
            Err(DmaFault {
                iova,
                len: buf.len(),
                write: false,
            })
        }
    }

    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let off = self.locate(iova, data.len(), true)?;
        if self.map.write(off, data) {
            Ok(())
        } else {
            Err(DmaFault {
                iova,
                len: data.len(),
                write: true,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    static COUNTER: AtomicU32 = AtomicU32::new(0);

    /// A unique scratch file under /dev/shm, removed on drop.
    /// A device over a 32 MiB shared BAR file and 1 MiB of guest RAM file (both removed
    /// when the returned scratch files drop), and the guest's own mapping of the BAR.
    fn untrapped(tag: &str) -> ([Scratch; 2], crate::Device, SharedMapping) {
        let f = Scratch::new(tag);
        let r = Scratch::new(&format!("{tag}ram"));
        let bar = ShmBar::open(&f.0, Some(32 << 20)).unwrap();
        let ram = GuestRam::open(&r.0, 1 << 20).unwrap();
        let dev = crate::Device::with_bar(
            crate::Profile::default(),
            std::sync::Arc::new(ram),
            Box::new(bar),
        );
        let guest = SharedMapping::open(&f.0, None, false).unwrap();
        ([f, r], dev, guest)
    }

    struct Scratch(std::path::PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            Scratch(std::path::PathBuf::from(format!(
                "/dev/shm/nic-emu-host-{}-{tag}-{n}",
                std::process::id()
            )))
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn q35_layout_small_and_large() {
        let l = RamLayout::q35(256 << 20);
        assert_eq!(
            l,
            RamLayout {
                below_4g: 256 << 20,
                above_4g: 0
            }
        );
        assert_eq!(l.offset(0, 4096), Some(0));
        assert_eq!(l.offset(0x0123_4000, 8), Some(0x0123_4000));
        assert_eq!(l.offset((256 << 20) - 8, 8), Some((256 << 20) - 8));
        assert_eq!(
            l.offset((256 << 20) - 8, 9),
            None,
            "runs past the end of RAM"
        );
        assert_eq!(l.offset(256 << 20, 1), None);
        assert_eq!(l.offset(FOUR_GIB, 1), None, "no high RAM");
        assert_eq!(l.offset(u64::MAX, 2), None, "overflow");

        // just below the threshold: all low
        let l = RamLayout::q35(0xb000_0000 - 4096);
        assert_eq!((l.below_4g, l.above_4g), (0xb000_0000 - 4096, 0));
        // at the threshold: 2 GiB low, the rest at 4 GiB
        let l = RamLayout::q35(0xb000_0000);
        assert_eq!((l.below_4g, l.above_4g), (0x8000_0000, 0x3000_0000));
        let l = RamLayout::q35(6 << 30);
        assert_eq!((l.below_4g, l.above_4g), (2 << 30, 4 << 30));
        assert_eq!(l.size(), 6 << 30);
        assert_eq!(l.offset(0x7fff_f000, 0x1000), Some(0x7fff_f000));
        assert_eq!(l.offset(0x7fff_f000, 0x1001), None, "crosses into the hole");
        assert_eq!(l.offset(0x8000_0000, 4), None, "the PCI hole is not RAM");
        assert_eq!(l.offset(0xfee0_0000, 4), None);
        assert_eq!(l.offset(FOUR_GIB, 16), Some(2 << 30));
        assert_eq!(l.offset(FOUR_GIB + 0x1234, 16), Some((2 << 30) + 0x1234));
        assert_eq!(l.offset(FOUR_GIB - 4, 8), None, "crosses 4 GiB");
        assert_eq!(l.offset((8 << 30) - 8, 8), Some((6 << 30) - 8));
        assert_eq!(l.offset((8 << 30) - 8, 9), None);
    }

    #[test]
    fn guest_ram_maps_gpa_to_file_offsets() {
        let f = Scratch::new("ram");
        let ram = GuestRam::open(&f.0, 1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&f.0).unwrap().len(), 1 << 20);
        ram.write(0x1000, b"guest-physical").unwrap();
        let mut b = [0u8; 14];
        ram.read(0x1000, &mut b).unwrap();
        assert_eq!(&b, b"guest-physical");
        // the bytes are in the file at the same offset
        let bytes = std::fs::read(&f.0).unwrap();
        assert_eq!(&bytes[0x1000..0x100e], b"guest-physical");
        // outside RAM: refused, nothing written
        assert_eq!(
            ram.write((1 << 20) - 4, &[1; 8]),
            Err(DmaFault {
                iova: (1 << 20) - 4,
                len: 8,
                write: true
            })
        );
        assert_eq!(
            ram.read(FOUR_GIB, &mut b),
            Err(DmaFault {
                iova: FOUR_GIB,
                len: 14,
                write: false
            })
        );
        let bytes = std::fs::read(&f.0).unwrap();
        assert!(bytes[(1 << 20) - 4..].iter().all(|&x| x == 0));
    }

    #[test]
    fn guest_ram_high_part_follows_low_part_in_the_file() {
        let f = Scratch::new("ramhi");
        let map = SharedMapping::open(&f.0, Some(3 << 20), true).unwrap();
        let layout = RamLayout {
            below_4g: 2 << 20,
            above_4g: 1 << 20,
        };
        let ram = GuestRam::with_layout(map, layout).unwrap();
        ram.write(FOUR_GIB + 16, b"high").unwrap();
        ram.write(16, b"low!").unwrap();
        let bytes = std::fs::read(&f.0).unwrap();
        assert_eq!(&bytes[(2 << 20) + 16..(2 << 20) + 20], b"high");
        assert_eq!(&bytes[16..20], b"low!");
        assert!(ram.read((2 << 20) - 2, &mut [0; 4]).is_err());
        // a layout bigger than the mapping is refused
        let map = SharedMapping::open(&f.0, None, false).unwrap();
        assert!(
            GuestRam::with_layout(
                map,
                RamLayout {
                    below_4g: 4 << 20,
                    above_4g: 0
                }
            )
            .is_err()
        );
    }

    #[test]
    fn shm_bar_is_the_file_and_out_of_range_is_master_abort() {
        let f = Scratch::new("bar");
        let mut bar = ShmBar::open(&f.0, Some(64 << 10)).unwrap();
        assert_eq!(bar.len(), 64 << 10);
        bar.write(0x18, &0x8000_0001u32.to_be_bytes());
        bar.write(0x3000, &0x0102_0304_0506_0708u64.to_be_bytes());
        // another mapping of the same file (what QEMU gives the guest) sees the writes ...
        let other = SharedMapping::open(&f.0, None, false).unwrap();
        let mut w = [0u8; 4];
        assert!(other.read(0x18, &mut w));
        assert_eq!(u32::from_be_bytes(w), 0x8000_0001);
        // ... and the device sees the guest's
        assert!(other.write(0x1c, &0xdead_beefu32.to_be_bytes()));
        let mut r = [0u8; 4];
        bar.read(0x1c, &mut r);
        assert_eq!(u32::from_be_bytes(r), 0xdead_beef);
        let mut r8 = [0u8; 8];
        bar.read(0x3000, &mut r8);
        assert_eq!(u64::from_be_bytes(r8), 0x0102_0304_0506_0708);
        // straddling the end: the part inside is read, the rest is all ones; writes beyond
        // the end are dropped
        bar.write((64 << 10) - 2, &[0xaa, 0xbb, 0xcc, 0xdd]);
        let mut r = [0u8; 4];
        bar.read((64 << 10) - 2, &mut r);
        assert_eq!(r, [0xaa, 0xbb, 0xff, 0xff]);
        bar.read(usize::MAX - 1, &mut r);
        assert_eq!(r, [0xff; 4]);
        assert_eq!(std::fs::metadata(&f.0).unwrap().len(), 64 << 10);
    }

    #[test]
    fn doorbells_are_taken_by_atomic_swap_and_nothing_else_is_written_back() {
        use firmware_interface::init_seg;
        let f = Scratch::new("race");
        let mut bar = ShmBar::open(&f.0, Some(64 << 10)).unwrap();
        assert!(bar.untrapped());
        let guest = SharedMapping::open(&f.0, None, false).unwrap();
        let doorbell = init_seg::CMD_DBELL;
        let mut w = [0u8; 4];
        // the device takes doorbell bit 0 and leaves 0
        guest.write(doorbell, &1u32.to_be_bytes());
        assert_eq!(u32::from_be_bytes(bar.swap32(doorbell, [0; 4])), 1);
        assert!(guest.read(doorbell, &mut w));
        assert_eq!(w, [0; 4]);
        // a guest store right after the take stays for the next take
        guest.write(doorbell, &2u32.to_be_bytes());
        assert_eq!(u32::from_be_bytes(bar.swap32(doorbell, [0; 4])), 2);
        assert_eq!(bar.swap32(doorbell, [0; 4]), [0; 4]);
        // out of range: all ones, nothing written
        assert_eq!(bar.swap32((64 << 10) - 2, [0; 4]), [0, 0, 0xff, 0xff]);
        // a guest thread storing doorbells while the device swaps: every store is taken once
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f2, stop2) = (f.0.clone(), stop.clone());
        let writer = std::thread::spawn(move || {
            let g = SharedMapping::open(&f2, None, false).unwrap();
            let p = g.as_ptr().as_ptr();
            for i in 1..=20_000u32 {
                // SAFETY: offset 0x100 is inside the 64 KiB mapping and 4-aligned.
                let a = unsafe { AtomicU32::from_ptr(p.add(0x100).cast::<u32>()) };
                // wait until the device took the previous value, then store the next
                while a.load(Ordering::SeqCst) != 0 {
                    std::hint::spin_loop();
                }
                a.store(i, Ordering::SeqCst);
            }
            stop2.store(true, Ordering::SeqCst);
        });
        let mut got = Vec::new();
        loop {
            let done = stop.load(Ordering::SeqCst);
            let v = u32::from_ne_bytes(bar.swap32(0x100, [0; 4]));
            if v != 0 {
                got.push(v);
            } else if done {
                break;
            }
        }
        writer.join().unwrap();
        assert_eq!(got, (1..=20_000).collect::<Vec<_>>());
    }

    #[test]
    fn an_untrapped_device_keeps_the_queue_address_words_as_written() {
        use firmware_interface::init_seg;
        let (_files, mut dev, guest) = untrapped("owned");
        let (h, l) = (init_seg::CMDQ_ADDR_H, init_seg::CMDQ_ADDR_L_SZ);
        let rd = |off| {
            let mut w = [0u8; 4];
            assert!(guest.read(off, &mut w));
            u32::from_be_bytes(w)
        };
        assert_eq!(rd(l) & 0xff, 0x56, "queue geometry published at reset");
        // the guest writes the address; the device never stores over it (a plain write-back
        // would erase a guest store landing between the device's read and its write)
        guest.write(h, &0u32.to_be_bytes());
        guest.write(l, &0x8_0000u32.to_be_bytes());
        for _ in 0..20 {
            dev.poll();
        }
        // the device shows the geometry again in the low word (compare-and-swap)
        assert_eq!((rd(h), rd(l)), (0, 0x8_0056));
        // a scribble over a read-only word is undone and recorded
        guest.write(init_seg::FW_REV, &[0; 4]);
        dev.poll();
        assert_ne!(rd(init_seg::FW_REV), 0);
        assert_eq!(
            dev.errors(),
            &[crate::DeviceError::ReadOnlyRegister {
                offset: init_seg::FW_REV,
                value: 0
            }]
        );
    }

    #[test]
    fn bad_files_are_errors() {
        let f = Scratch::new("missing");
        assert!(SharedMapping::open(&f.0, None, false).is_err(), "no file");
        std::fs::write(&f.0, b"").unwrap();
        assert!(SharedMapping::open(&f.0, None, false).is_err(), "empty");
        std::fs::write(&f.0, [0u8; 8192]).unwrap();
        let e = SharedMapping::open(&f.0, Some(4096), false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "larger than asked");
    }

    #[test]
    fn the_device_runs_untrapped_over_a_shared_bar() {
        // The init segment as the device publishes it into the file.
        let (_files, mut dev, guest) = untrapped("dev");
        let mut w = [0u8; 4];
        guest.read(4, &mut w);
        assert_eq!(u32::from_be_bytes(w) >> 16, 5, "cmdif revision");
        let doorbell = firmware_interface::init_seg::CMD_DBELL;
        // a command doorbell before the queue address: recorded, and the word is cleared
        for _ in 0..4 {
            dev.poll();
        }
        guest.write(doorbell, &1u32.to_be_bytes());
        assert!(dev.poll());
        assert_eq!(dev.errors(), &[crate::DeviceError::CmdqNotSet]);
        guest.read(doorbell, &mut w);
        assert_eq!(w, [0; 4]);
    }
}
