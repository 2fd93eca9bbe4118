//! Physical addresses of this process's pages from `/proc/self/pagemap`.
//!
//! Each virtual page has a 64-bit little-endian entry at byte `(va / page_size) * 8`
//! (Documentation/admin-guide/mm/pagemap.rst):
//!
//! | bits  | meaning |
//! |-------|---------|
//! | 0-54  | page frame number (PFN) when present; zero without `CAP_SYS_ADMIN` |
//! | 55    | soft-dirty |
//! | 56    | exclusively mapped |
//! | 61    | file page or shared anonymous |
//! | 62    | swapped |
//! | 63    | present |

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The pagemap file of this process.
pub const PAGEMAP_PATH: &str = "/proc/self/pagemap";

/// One pagemap entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagemapEntry(pub u64);

impl PagemapEntry {
    /// Bit 63: the page is in RAM.
    pub const PRESENT: u64 = 1 << 63;
    /// Bit 62: the page is swapped out (bits 0-54 then hold the swap type and offset).
    pub const SWAPPED: u64 = 1 << 62;
    /// Bit 61: a file page or shared anonymous page.
    pub const FILE_OR_SHARED: u64 = 1 << 61;
    /// Bit 56: mapped exclusively by this process.
    pub const EXCLUSIVE: u64 = 1 << 56;
    /// Bit 55: soft-dirty.
    pub const SOFT_DIRTY: u64 = 1 << 55;
    /// Bits 0-54: the page frame number.
    pub const PFN_MASK: u64 = (1 << 55) - 1;

    /// Decodes the 8 bytes of an entry (little-endian, as the kernel writes it on every
    /// architecture this crate runs on).
    pub fn from_le_bytes(b: [u8; 8]) -> Self {
        PagemapEntry(u64::from_le_bytes(b))
    }

    /// Whether the page is in RAM.
    pub fn is_present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }

    /// Whether the page is swapped out.
    pub fn is_swapped(self) -> bool {
        self.0 & Self::SWAPPED != 0
    }

    /// The raw PFN field (meaningful only for a present page; zero when the reader lacks
    /// `CAP_SYS_ADMIN`).
    pub fn pfn(self) -> u64 {
        self.0 & Self::PFN_MASK
    }

    /// The physical address of byte `va` of this entry's page.
    pub fn physical_address(self, va: usize, page_size: usize) -> Result<u64, PagemapError> {
        if self.is_swapped() {
            return Err(PagemapError::Swapped { va });
        }
        if !self.is_present() {
            return Err(PagemapError::NotPresent { va });
        }
        let pfn = self.pfn();
        if pfn == 0 {
            return Err(PagemapError::NoPfn { va });
        }
        let page = pfn
            .checked_mul(page_size as u64)
            .ok_or(PagemapError::NotPresent { va })?;
        Ok(page + (va % page_size) as u64)
    }
}

/// Why a physical address could not be found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagemapError {
    /// The page is not in RAM (never touched, or not locked).
    NotPresent {
        /// The virtual address asked about.
        va: usize,
    },
    /// The page is swapped out.
    Swapped {
        /// The virtual address asked about.
        va: usize,
    },
    /// The page is present but the PFN reads as zero: the kernel hides PFNs from readers
    /// without `CAP_SYS_ADMIN`.
    NoPfn {
        /// The virtual address asked about.
        va: usize,
    },
    /// Opening or reading `/proc/self/pagemap` failed.
    Io {
        /// The errno.
        errno: i32,
    },
    /// The read returned fewer bytes than asked.
    ShortRead,
}

impl fmt::Display for PagemapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PagemapError::NotPresent { va } => write!(
                f,
                "{PAGEMAP_PATH}: page {va:#x} is not present in RAM (the memory must be touched and locked first)"
            ),
            PagemapError::Swapped { va } => {
                write!(
                    f,
                    "{PAGEMAP_PATH}: page {va:#x} is swapped out (lock it with mlock)"
                )
            }
            PagemapError::NoPfn { va } => write!(
                f,
                "{PAGEMAP_PATH}: page {va:#x} is present but its frame number reads as 0: the kernel \
                 shows physical addresses only to processes with CAP_SYS_ADMIN (run as root); \
                 the physical-address IOVA policy cannot work without them"
            ),
            PagemapError::Io { errno } => write!(
                f,
                "{PAGEMAP_PATH}: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
            PagemapError::ShortRead => write!(f, "{PAGEMAP_PATH}: short read"),
        }
    }
}

impl std::error::Error for PagemapError {}

/// The system's base page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Reads the entries of `count` consecutive pages starting with the page holding `va`.
pub fn read_entries(va: usize, count: usize) -> Result<Vec<PagemapEntry>, PagemapError> {
    let ps = page_size();
    let file = File::open(PAGEMAP_PATH).map_err(io_err)?;
    let mut buf = vec![0u8; count * 8];
    let off = (va / ps) as u64 * 8;
    let mut done = 0;
    while done < buf.len() {
        let n = file
            .read_at(&mut buf[done..], off + done as u64)
            .map_err(io_err)?;
        if n == 0 {
            return Err(PagemapError::ShortRead);
        }
        done += n;
    }
    Ok(buf
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            PagemapEntry::from_le_bytes(b)
        })
        .collect())
}

/// The physical address of the byte at `va` in this process.
pub fn physical_address(va: usize) -> Result<u64, PagemapError> {
    let e = read_entries(va, 1)?;
    e[0].physical_address(va, page_size())
}

fn io_err(e: std::io::Error) -> PagemapError {
    PagemapError::Io {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// Whether this process has `CAP_SYS_ADMIN` in its effective set (then pagemap shows PFNs).
pub fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::AnonMap;

    #[test]
    fn entry_bits() {
        let e = PagemapEntry(PagemapEntry::PRESENT | 0x12345);
        assert!(e.is_present() && !e.is_swapped());
        assert_eq!(e.pfn(), 0x12345);
        assert_eq!(e.physical_address(0x7000_0abc, 4096), Ok(0x12345abc));
        // Flag bits above the PFN field do not leak into it.
        let e = PagemapEntry(
            PagemapEntry::PRESENT
                | PagemapEntry::SOFT_DIRTY
                | PagemapEntry::EXCLUSIVE
                | PagemapEntry::FILE_OR_SHARED
                | PagemapEntry::PFN_MASK,
        );
        assert_eq!(e.pfn(), (1 << 55) - 1);
        // Little-endian decoding.
        let e = PagemapEntry::from_le_bytes([0x01, 0x02, 0, 0, 0, 0, 0, 0x80]);
        assert!(e.is_present());
        assert_eq!(e.pfn(), 0x0201);
    }

    #[test]
    fn entry_errors() {
        let va = 0x1234_5000;
        assert_eq!(
            PagemapEntry(0).physical_address(va, 4096),
            Err(PagemapError::NotPresent { va })
        );
        // Swapped: the low bits are a swap entry, not a PFN.
        assert_eq!(
            PagemapEntry(PagemapEntry::SWAPPED | 0x55).physical_address(va, 4096),
            Err(PagemapError::Swapped { va })
        );
        // Present with a zero PFN: what an unprivileged reader sees.
        let err = PagemapEntry(PagemapEntry::PRESENT)
            .physical_address(va, 4096)
            .unwrap_err();
        assert_eq!(err, PagemapError::NoPfn { va });
        let msg = err.to_string();
        assert!(msg.contains("CAP_SYS_ADMIN"), "{msg}");
    }

    #[test]
    fn locked_page_of_this_process() {
        let ps = page_size();
        let map = AnonMap::new(ps, ps, false).unwrap();
        map.lock().unwrap();
        let va = map.addr() + 0x10;
        let entry = read_entries(map.addr(), 1).unwrap()[0];
        assert!(entry.is_present(), "a locked page is present: {entry:x?}");
        assert!(!entry.is_swapped());
        if has_cap_sys_admin() {
            let pa = physical_address(va).unwrap();
            assert_ne!(entry.pfn(), 0);
            assert_eq!(pa % ps as u64, 0x10);
            assert_eq!(pa / ps as u64, entry.pfn());
        } else {
            assert_eq!(physical_address(va), Err(PagemapError::NoPfn { va }));
        }
    }
}
