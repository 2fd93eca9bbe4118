//! The device's two memories: host memory seen through an IOMMU ([`AddressSpace`]) and its own
//! BAR0 backing store ([`BarMemory`]).

/// The device's view of host memory through an IOMMU.
///
/// Every DMA the device does goes through this trait; an address the IOMMU has no mapping for
/// must be refused with a [`DmaFault`] (the device then records a
/// [`DeviceError::Dma`](crate::DeviceError::Dma) and fails whatever needed the access).
pub trait AddressSpace: Send + Sync {
    /// DMA read of `buf.len()` bytes at `iova`.
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault>;
    /// DMA write of `data` at `iova`.
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault>;

    /// Checks that `len` bytes at `iova` could be read now, without moving them. The default
    /// reads them through a bounce buffer; an address space that can check a mapping without
    /// copying should.
    fn readable(&self, iova: u64, len: u64) -> Result<(), DmaFault> {
        let mut bounce = [0u8; BOUNCE];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(BOUNCE as u64) as usize;
            let at = iova.checked_add(done).ok_or(DmaFault {
                iova,
                len: usize::try_from(len).unwrap_or(usize::MAX),
                write: false,
            })?;
            self.read(at, &mut bounce[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// DMA write of `len` bytes at `iova` that `fill(offset, dst)` produces piece by piece
    /// (`offset` counts from `iova`): straight into the target memory where the address space
    /// can lend it (one copy from wherever `fill` reads), else through a bounce buffer (the
    /// default). `fill` returning `false` stops the write: `Ok(false)`, with the pieces
    /// before it written. A fault of the target range is an `Err` (nothing of that piece is
    /// written).
    fn write_with(
        &self,
        iova: u64,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<bool, DmaFault> {
        let mut bounce = [0u8; BOUNCE];
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(BOUNCE);
            if !fill(done, &mut bounce[..n]) {
                return Ok(false);
            }
            let at = iova.checked_add(done as u64).ok_or(DmaFault {
                iova,
                len,
                write: true,
            })?;
            self.write(at, &bounce[..n])?;
            done += n;
        }
        Ok(true)
    }
}

/// DMA read of `buf.len()` bytes at `iova` through `mem`, as every device model does it: an
/// access whose end overflows the 64-bit address space is refused before the IOMMU sees it.
pub(crate) fn dma_read(mem: &dyn AddressSpace, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
    if iova.checked_add(buf.len() as u64).is_none() {
        return Err(DmaFault {
            iova,
            len: buf.len(),
            write: false,
        });
    }
    mem.read(iova, buf)
}

/// DMA write of `data` at `iova` through `mem` (see [`dma_read`]).
pub(crate) fn dma_write(mem: &dyn AddressSpace, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
    if iova.checked_add(data.len() as u64).is_none() {
        return Err(DmaFault {
            iova,
            len: data.len(),
            write: true,
        });
    }
    mem.write(iova, data)
}

/// Bytes of the bounce buffer of [`AddressSpace`]'s default methods.
const BOUNCE: usize = 4096;

/// A DMA access the address space refused (some byte of it is not mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFault {
    /// First I/O virtual address of the access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// Whether the access was a write.
    pub write: bool,
}

/// The BAR0 backing store: bytes as the device lays them out (registers big-endian).
///
/// With a trapped BAR (every access goes through [`Device::mmio_read`](crate::Device::mmio_read)
/// / [`Device::mmio_write`](crate::Device::mmio_write)) this is private to the device; with an
/// untrapped BAR (a shared-memory file) the driver reads and writes it directly and
/// [`Device::poll`](crate::Device::poll) looks at it.
pub trait BarMemory: Send {
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether the BAR has no bytes at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads `buf.len()` bytes at `off`; bytes out of range read as 0xff (like a master abort).
    fn read(&self, off: usize, buf: &mut [u8]);
    /// Writes `data` at `off`; bytes out of range are dropped.
    fn write(&mut self, off: usize, data: &[u8]);
    /// Whether the driver reads and writes this memory directly (untrapped: a shared BAR
    /// that [`Device::poll`](crate::Device::poll) looks at) rather than through
    /// [`Device::mmio_read`](crate::Device::mmio_read) /
    /// [`Device::mmio_write`](crate::Device::mmio_write). Default: trapped.
    fn untrapped(&self) -> bool {
        false
    }
    /// Replaces the 4 bytes at `off` with `new` and returns what was there (all ones out of
    /// range, where nothing is written). An untrapped BAR must do this atomically against
    /// the driver's stores, so that a driver write is either returned or left in place: the
    /// device consumes doorbell words this way. The default (read, then write) is right for
    /// memory nobody else writes.
    fn swap32(&mut self, off: usize, new: [u8; 4]) -> [u8; 4] {
        let mut old = [0u8; 4];
        self.read(off, &mut old);
        self.write(off, &new);
        old
    }
    /// [`swap32`](Self::swap32) for an 8-byte word (a 64-bit doorbell the driver writes with
    /// one store). The default (read, then write) is right for memory nobody else writes.
    fn swap64(&mut self, off: usize, new: [u8; 8]) -> [u8; 8] {
        let mut old = [0u8; 8];
        self.read(off, &mut old);
        self.write(off, &new);
        old
    }
    /// Writes `new` at `off` if the 4 bytes there are `current`; returns whether it did. An
    /// untrapped BAR must do this atomically against the driver's stores (the device uses it
    /// to complete a word the driver wrote without erasing a newer store). The default
    /// (read, compare, write) is right for memory nobody else writes.
    fn compare_exchange32(&mut self, off: usize, current: [u8; 4], new: [u8; 4]) -> bool {
        let mut cur = [0u8; 4];
        self.read(off, &mut cur);
        if cur != current {
            return false;
        }
        self.write(off, &new);
        true
    }
}

/// A `Vec`-backed BAR (the default backing store).
#[derive(Clone, Debug)]
pub struct VecBar(Vec<u8>);

impl VecBar {
    /// A zeroed BAR of `len` bytes.
    pub fn new(len: usize) -> VecBar {
        VecBar(vec![0; len])
    }
}

impl BarMemory for VecBar {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn read(&self, off: usize, buf: &mut [u8]) {
        // The part inside the BAR is copied; bytes past its end read as 0xff.
        let n = self.0.len().saturating_sub(off).min(buf.len());
        let (inside, outside) = buf.split_at_mut(n);
        if n > 0 {
            inside.copy_from_slice(&self.0[off..off + n]);
        }
        outside.fill(0xff);
    }

    fn write(&mut self, off: usize, data: &[u8]) {
        // Bytes past the end of the BAR are dropped.
        let n = self.0.len().saturating_sub(off).min(data.len());
        if n > 0 {
            self.0[off..off + n].copy_from_slice(&data[..n]);
        }
    }
}
