//! Namespaces: the [`Namespace`] backend trait, a RAM-backed namespace and (with the `std`
//! feature) a file-backed one.
//!
//! The target shares a namespace between all queues of all controllers behind an
//! [`alloc::sync::Arc`]: every method takes `&self`, and a backend synchronises internally
//! where it must ([`RamNamespace`] with one lock per 64 KiB stripe, the file namespace not at
//! all: positioned reads and writes need no lock).

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::status::Status;

/// Why a backend failed; the target turns it into an NVMe status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NsError {
    /// The range is outside the namespace (LBA Out of Range).
    OutOfRange,
    /// Not ready right now (Namespace Not Ready, retryable).
    NotReady,
    /// The namespace refuses writes (Attempted Write to Read Only Range).
    ReadOnly,
    /// The backing store failed (Internal Error).
    Io,
}

impl NsError {
    /// The NVMe status for this error.
    pub fn status(self) -> Status {
        match self {
            NsError::OutOfRange => Status::LBA_RANGE.dnr(),
            NsError::NotReady => Status::NS_NOT_READY,
            NsError::ReadOnly => Status::WRITE_TO_READ_ONLY.dnr(),
            NsError::Io => Status::INTERNAL_ERROR.dnr(),
        }
    }
}

/// A block device the target exports. Offsets and lengths are in whole blocks: `buf.len()`
/// is a multiple of [`Namespace::block_size`] and the range lies inside the namespace (the
/// target checks both before calling; a backend may check again).
pub trait Namespace: Send + Sync {
    /// Block size in bytes: a power of two from 512 to 4096.
    fn block_size(&self) -> u32;
    /// Number of blocks.
    fn block_count(&self) -> u64;
    /// Reads blocks starting at `lba` into `buf`, all of it on success: the target reuses
    /// data buffers, so `buf` may hold an earlier command's data on entry.
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), NsError>;
    /// Writes `data` to the blocks starting at `lba`.
    fn write(&self, lba: u64, data: &[u8]) -> Result<(), NsError>;
    /// Makes completed writes durable.
    fn flush(&self) -> Result<(), NsError>;
    /// Zeroes `blocks` blocks starting at `lba`.
    fn write_zeroes(&self, lba: u64, blocks: u64) -> Result<(), NsError> {
        let bs = u64::from(self.block_size());
        let chunk_blocks = (64 * 1024 / bs).max(1);
        let zero = vec![0u8; (chunk_blocks * bs) as usize];
        let mut done = 0;
        while done < blocks {
            let n = chunk_blocks.min(blocks - done);
            self.write(lba + done, &zero[..(n * bs) as usize])?;
            done += n;
        }
        Ok(())
    }
    /// Deallocates (discards) blocks; later reads return zeroes. The default zeroes them.
    fn deallocate(&self, lba: u64, blocks: u64) -> Result<(), NsError> {
        self.write_zeroes(lba, blocks)
    }
    /// Whether a volatile write cache sits in front of the media (Flush matters).
    fn volatile_write_cache(&self) -> bool {
        false
    }
    /// Whether the namespace can serve I/O right now.
    fn is_ready(&self) -> bool {
        true
    }
    /// Whether writes are refused.
    fn is_read_only(&self) -> bool {
        false
    }
}

/// Stripe size of [`RamNamespace`]'s locks.
const STRIPE: usize = 64 * 1024;

/// A namespace in memory, one lock per 64 KiB stripe: queues touching different stripes
/// never wait for each other.
pub struct RamNamespace {
    block_size: u32,
    blocks: u64,
    stripes: Vec<spin::Mutex<Box<[u8]>>>,
}

impl RamNamespace {
    /// A zeroed namespace of `blocks` blocks of `block_size` bytes; `None` when the block
    /// size is not a power of two in 512..=4096 or the size overflows.
    pub fn new(block_size: u32, blocks: u64) -> Option<RamNamespace> {
        if !block_size.is_power_of_two() || !(512..=4096).contains(&block_size) {
            return None;
        }
        let bytes = usize::try_from(blocks.checked_mul(u64::from(block_size))?).ok()?;
        let stripes = bytes.div_ceil(STRIPE);
        let mut v = Vec::with_capacity(stripes);
        let mut left = bytes;
        for _ in 0..stripes {
            let n = left.min(STRIPE);
            v.push(spin::Mutex::new(vec![0u8; n].into_boxed_slice()));
            left -= n;
        }
        Some(RamNamespace {
            block_size,
            blocks,
            stripes: v,
        })
    }

    fn check(&self, lba: u64, len: usize) -> Result<usize, NsError> {
        let bs = u64::from(self.block_size);
        let len = len as u64;
        if !len.is_multiple_of(bs) {
            return Err(NsError::Io);
        }
        let end = lba.checked_add(len / bs).ok_or(NsError::OutOfRange)?;
        if end > self.blocks {
            return Err(NsError::OutOfRange);
        }
        Ok((lba * bs) as usize)
    }

    /// Visits the stripes covering `[off, off + len)` in order.
    fn for_each_stripe(&self, off: usize, len: usize, mut f: impl FnMut(&mut [u8], usize)) {
        let mut pos = off;
        let end = off + len;
        while pos < end {
            let (i, within) = (pos / STRIPE, pos % STRIPE);
            let n = (STRIPE - within).min(end - pos);
            let mut stripe = self.stripes[i].lock();
            f(&mut stripe[within..within + n], pos - off);
            pos += n;
        }
    }
}

impl Namespace for RamNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), NsError> {
        let off = self.check(lba, buf.len())?;
        self.for_each_stripe(off, buf.len(), |s, at| {
            buf[at..at + s.len()].copy_from_slice(s)
        });
        Ok(())
    }

    fn write(&self, lba: u64, data: &[u8]) -> Result<(), NsError> {
        let off = self.check(lba, data.len())?;
        self.for_each_stripe(off, data.len(), |s, at| {
            s.copy_from_slice(&data[at..at + s.len()])
        });
        Ok(())
    }

    fn flush(&self) -> Result<(), NsError> {
        Ok(())
    }

    fn write_zeroes(&self, lba: u64, blocks: u64) -> Result<(), NsError> {
        let len = blocks
            .checked_mul(u64::from(self.block_size))
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(NsError::OutOfRange)?;
        let off = self.check(lba, len)?;
        self.for_each_stripe(off, len, |s, _| s.fill(0));
        Ok(())
    }
}

#[cfg(feature = "std")]
mod file {
    extern crate std;

    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::{Namespace, NsError};

    /// A namespace backed by a file (or a block device node), through positioned reads and
    /// writes; Flush is `fdatasync`. The block count is the file size divided by the block
    /// size at open time.
    pub struct FileNamespace {
        file: File,
        block_size: u32,
        blocks: u64,
        read_only: bool,
    }

    impl FileNamespace {
        /// Opens `path` read-write (or read-only) with `block_size`-byte blocks.
        pub fn open(
            path: impl AsRef<Path>,
            block_size: u32,
            read_only: bool,
        ) -> std::io::Result<FileNamespace> {
            if !block_size.is_power_of_two() || !(512..=4096).contains(&block_size) {
                return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(!read_only)
                .open(path)?;
            let len = file.metadata()?.len();
            Ok(FileNamespace {
                file,
                block_size,
                blocks: len / u64::from(block_size),
                read_only,
            })
        }

        fn offset(&self, lba: u64, len: usize) -> Result<u64, NsError> {
            let bs = u64::from(self.block_size);
            let end = lba
                .checked_add(len as u64 / bs)
                .ok_or(NsError::OutOfRange)?;
            if !(len as u64).is_multiple_of(bs) {
                return Err(NsError::Io);
            }
            if end > self.blocks {
                return Err(NsError::OutOfRange);
            }
            Ok(lba * bs)
        }
    }

    impl Namespace for FileNamespace {
        fn block_size(&self) -> u32 {
            self.block_size
        }

        fn block_count(&self) -> u64 {
            self.blocks
        }

        fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), NsError> {
            let off = self.offset(lba, buf.len())?;
            self.file.read_exact_at(buf, off).map_err(|_| NsError::Io)
        }

        fn write(&self, lba: u64, data: &[u8]) -> Result<(), NsError> {
            if self.read_only {
                return Err(NsError::ReadOnly);
            }
            let off = self.offset(lba, data.len())?;
            self.file.write_all_at(data, off).map_err(|_| NsError::Io)
        }

        fn flush(&self) -> Result<(), NsError> {
            if self.read_only {
                return Ok(());
            }
            self.file.sync_data().map_err(|_| NsError::Io)
        }

        fn volatile_write_cache(&self) -> bool {
            true
        }

        fn is_read_only(&self) -> bool {
            self.read_only
        }
    }
}

#[cfg(feature = "std")]
pub use file::FileNamespace;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_crosses_stripes() {
        let ns = RamNamespace::new(512, 1024).unwrap();
        let data: Vec<u8> = (0..(STRIPE + 4096)).map(|i| (i % 251) as u8).collect();
        let lba = (STRIPE as u64 - 1024) / 512;
        ns.write(lba, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        ns.read(lba, &mut back).unwrap();
        assert_eq!(back, data);
        ns.write_zeroes(lba + 1, 2).unwrap();
        ns.read(lba, &mut back[..2048]).unwrap();
        assert_eq!(&back[..512], &data[..512]);
        assert!(back[512..1536].iter().all(|&b| b == 0));
        assert_eq!(ns.read(1023, &mut [0u8; 1024]), Err(NsError::OutOfRange));
        assert_eq!(ns.write(u64::MAX, &[0u8; 512]), Err(NsError::OutOfRange));
        assert!(RamNamespace::new(1000, 1).is_none());
        assert!(RamNamespace::new(512, u64::MAX).is_none());
    }
}
