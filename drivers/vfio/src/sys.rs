//! Thin wrappers over the libc calls this crate makes itself.

use std::os::fd::RawFd;

/// Size of a 2 MiB huge page (`MAP_HUGETLB | MAP_HUGE_2MB`).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// The calling thread's errno (EIO if there is none).
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub struct AnonMap {
    addr: usize,
    len: usize,
    hugetlb: bool,
}

impl AnonMap {
    /// Maps `len` bytes (a multiple of the page or huge page size) aligned to `align` (a power
    /// of two, at least the page or huge page size), backed by 2 MiB huge pages if `hugetlb`.
    ///
    /// The memory is zeroed by the kernel and not yet populated: [`lock`](Self::lock) faults it
    /// in. With `hugetlb` the huge pages are reserved here, so a system without free ones
    /// fails now (ENOMEM) rather than with SIGBUS later.
    pub fn new(len: usize, align: usize, hugetlb: bool) -> Result<AnonMap, i32> {
        let granule = if hugetlb {
            HUGE_PAGE_SIZE
        } else {
            crate::pagemap::page_size()
        };
        let align = align.max(granule);
        if len == 0 || !len.is_multiple_of(granule) || !align.is_power_of_two() {
            return Err(libc::EINVAL);
        }
        // Over-reserve so an aligned window exists, then trim both ends.
        let reserve = len.checked_add(align - granule).ok_or(libc::ENOMEM)?;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if hugetlb {
            flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing affects no
        // existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        let start = p as usize;
        let addr = start.next_multiple_of(align);
        let head = addr - start;
        let tail = reserve - head - len;
        if head > 0 {
            // SAFETY: [start, addr) is part of the mapping just made and nothing uses it.
            unsafe { libc::munmap(start as *mut libc::c_void, head) };
        }
        if tail > 0 {
            // SAFETY: [addr + len, start + reserve) is part of the mapping just made and
            // nothing uses it.
            unsafe { libc::munmap((addr + len) as *mut libc::c_void, tail) };
        }
        Ok(AnonMap { addr, len, hugetlb })
    }

    /// First address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is backed by huge pages.
    pub fn is_hugetlb(&self) -> bool {
        self.hugetlb
    }

    /// Locks the pages in RAM (faulting them in). Fails with ENOMEM/EPERM/EAGAIN when the
    /// memlock limit does not allow it.
    pub fn lock(&self) -> Result<(), i32> {
        // SAFETY: the range is our own mapping; mlock does not change its contents.
        let r = unsafe { libc::mlock(self.addr as *const libc::c_void, self.len) };
        if r != 0 { Err(errno()) } else { Ok(()) }
    }

    /// Asks the kernel not to back this range with transparent huge pages (whose collapse
    /// would move the pages before the IOMMU pins them).
    pub fn no_thp(&self) {
        // SAFETY: advice on our own mapping; MADV_NOHUGEPAGE does not change its contents.
        // A failure (THP not built in) only means there is nothing to turn off.
        unsafe {
            libc::madvise(
                self.addr as *mut libc::c_void,
                self.len,
                libc::MADV_NOHUGEPAGE,
            )
        };
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the mapping is owned by this value; whoever handed out pointers into it
        // (VfioDma) guarantees none is used any more and the IOMMU no longer maps it.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// `pread` of exactly `buf.len()` bytes at `offset` of `fd`.
pub fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let off = libc::off_t::try_from(offset + done as u64).map_err(|_| libc::EINVAL)?;
        // SAFETY: the destination is the unfilled tail of `buf`, valid for its length.
        let n = unsafe { libc::pread(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done, off) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
    Ok(())
}

/// `pwrite` of all of `buf` at `offset` of `fd`.
pub fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let off = libc::off_t::try_from(offset + done as u64).map_err(|_| libc::EINVAL)?;
        // SAFETY: the source is the unwritten tail of `buf`, valid for its length.
        let n = unsafe { libc::pwrite(fd, buf[done..].as_ptr().cast(), buf.len() - done, off) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_anonymous_mapping() {
        let align = 1 << 21;
        let m = AnonMap::new(8192, align, false).unwrap();
        assert_eq!(m.addr() % align, 0);
        assert_eq!(m.len(), 8192);
        m.lock().unwrap();
        // SAFETY: the mapping is ours, readable, 8192 bytes long.
        let b = unsafe { (m.addr() as *const u8).add(8191).read_volatile() };
        assert_eq!(b, 0);
        assert_eq!(AnonMap::new(100, 4096, false).unwrap_err(), libc::EINVAL);
    }

    #[test]
    fn pread_pwrite_on_a_file() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("vfio-attach-io-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        pwrite_all(f.as_raw_fd(), &[1, 2, 3, 4], 4).unwrap();
        let mut b = [0u8; 4];
        pread_exact(f.as_raw_fd(), &mut b, 4).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        // Past the end: a short read is an error, not silently zero.
        assert_eq!(pread_exact(f.as_raw_fd(), &mut b, 6), Err(libc::EIO));
        assert_eq!(pread_exact(-1, &mut b, 0), Err(libc::EBADF));
        drop(f);
        let _ = std::fs::remove_file(path);
    }
}
