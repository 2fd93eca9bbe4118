//! [`VfioDma`]: DMA memory for a device behind VFIO.
//!
//! Memory comes in locked blocks (2 MiB by default, from 2 MiB huge pages when the system has
//! them) that are mapped for the device with one `VFIO_IOMMU_MAP_DMA` each, and buffers are
//! sub-allocated inside the blocks, as rdma-core's `mlx5_vfio` does: a map call per buffer would
//! run into the container's `dma_entry_limit` (64K by default) and cost an IOMMU update each.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use nic_hal::{DmaAllocator, DmaError, DmaRegion};

use crate::iova::RangeAllocator;
use crate::pagemap::{self, PagemapError};
use crate::sys::{AnonMap, HUGE_PAGE_SIZE};

/// Default first IOVA of [`IovaPolicy::Allocate`]: 4 GiB, clear of the low addresses where
/// platforms put reserved windows (the x86 MSI range at 0xfee00000).
pub const DEFAULT_IOVA_BASE: u64 = 1 << 32;
/// Default size of the IOVA range: 64 GiB, so the range ends below 2^39, the address width of
/// QEMU's intel-iommu by default and of many real IOMMUs' second-level tables.
pub const DEFAULT_IOVA_SIZE: u64 = 1 << 36;
/// Default size of a mapped block.
pub const DEFAULT_BLOCK_SIZE: usize = 2 << 20;
/// Buffers are sub-allocated in multiples of this (a cache line), at least this aligned.
const MIN_GRANULE: usize = 64;
/// How often a physical-address mapping is retried when pinning moved a page.
const PHYS_RETRIES: usize = 3;

/// How device addresses (IOVAs) are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IovaPolicy {
    /// Our own IOVAs from `[base, base + size)`, for a real IOMMU (or a virtual one whose
    /// device model translates): each block gets a range from a first-fit allocator.
    Allocate {
        /// First IOVA (page-aligned, non-zero).
        base: u64,
        /// Size of the range in bytes (page multiple).
        size: u64,
    },
    /// IOVA = the physical address of the page, read from `/proc/self/pagemap` (needs
    /// `CAP_SYS_ADMIN`). For an emulated device behind a virtual IOMMU whose host-side model
    /// reads guest-physical memory directly (the vIOMMU translates only QEMU's own device
    /// models). A buffer must then be physically contiguous: with 4 KiB pages a buffer is at
    /// most one page; with 2 MiB huge pages at most one huge page. Larger requests are refused
    /// with [`VfioDmaError::NotContiguous`].
    PhysicalAddress,
}

impl Default for IovaPolicy {
    fn default() -> Self {
        IovaPolicy::Allocate {
            base: DEFAULT_IOVA_BASE,
            size: DEFAULT_IOVA_SIZE,
        }
    }
}

/// Whether blocks use 2 MiB huge pages (`MAP_HUGETLB`; the system must have some reserved,
/// see `/proc/sys/vm/nr_hugepages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// Always 4 KiB pages.
    Never,
    /// Huge pages while they can be had, else 4 KiB pages (after the first failure the
    /// allocator stops trying).
    #[default]
    IfAvailable,
    /// Huge pages or an error.
    Required,
}

/// Settings of a [`VfioDma`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaOptions {
    /// How IOVAs are chosen.
    pub iova: IovaPolicy,
    /// Huge page use.
    pub hugepages: HugePages,
    /// Size of a block (a page multiple); a larger buffer gets a block of its own.
    pub block_size: usize,
    /// At most this many bytes mapped at once (`None`: no limit but the memlock rlimit).
    pub limit: Option<usize>,
}

impl Default for DmaOptions {
    fn default() -> Self {
        DmaOptions {
            iova: IovaPolicy::default(),
            hugepages: HugePages::default(),
            block_size: DEFAULT_BLOCK_SIZE,
            limit: None,
        }
    }
}

/// Something that maps memory for a device: the VFIO container, or a fake in tests.
pub trait DmaMapper: Send + Sync {
    /// Makes `[va, va + len)` reachable by the device at `[iova, iova + len)`.
    ///
    /// # Safety
    ///
    /// The memory must stay mapped in this process until [`unmap`](Self::unmap) of the same
    /// `iova` and `len` succeeds, and while it is mapped it may only be accessed through raw
    /// pointers (atomics, volatile, copies): the device reads and writes it concurrently, so
    /// a Rust reference to it is undefined behaviour.
    unsafe fn map(&self, iova: u64, len: usize, va: *mut u8) -> std::io::Result<()>;

    /// Removes the mapping made by `map(iova, len, _)`.
    fn unmap(&self, iova: u64, len: usize) -> std::io::Result<()>;
}

fn vfio_io_error(e: vfio_ioctls::VfioError) -> std::io::Error {
    match e {
        vfio_ioctls::VfioError::IommuDmaMap(se) | vfio_ioctls::VfioError::IommuDmaUnmap(se) => {
            std::io::Error::from_raw_os_error(se.errno())
        }
        other => std::io::Error::other(other.to_string()),
    }
}

impl DmaMapper for vfio_ioctls::VfioContainer {
    unsafe fn map(&self, iova: u64, len: usize, va: *mut u8) -> std::io::Result<()> {
        // SAFETY: the caller upholds `DmaMapper::map`'s contract, which is the contract of
        // `VfioContainer::vfio_dma_map` (memory stays mapped until unmapped; raw access only).
        unsafe { self.vfio_dma_map(iova, len, va) }.map_err(vfio_io_error)
    }

    fn unmap(&self, iova: u64, len: usize) -> std::io::Result<()> {
        self.vfio_dma_unmap(iova, len).map_err(vfio_io_error)
    }
}

/// Why [`VfioDma`] could not allocate (or free, or unmap). Each `Display` says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VfioDmaError {
    /// Zero length or an alignment that is not a power of two.
    InvalidRequest {
        /// Requested length.
        len: usize,
        /// Requested alignment.
        align: usize,
    },
    /// The options are inconsistent.
    InvalidOptions(&'static str),
    /// The IOVA range of [`IovaPolicy::Allocate`] has no room for another block.
    IovaExhausted {
        /// Bytes of the block that did not fit.
        len: usize,
        /// Size of the whole IOVA range.
        range: u64,
    },
    /// [`DmaOptions::limit`] would be exceeded.
    LimitReached {
        /// The limit.
        limit: usize,
        /// Bytes that would be mapped with the new block.
        wanted: usize,
    },
    /// `mmap` of anonymous memory failed.
    Mmap {
        /// Bytes asked for.
        len: usize,
        /// The errno.
        errno: i32,
    },
    /// [`HugePages::Required`] and no 2 MiB huge page could be mapped.
    HugePagesUnavailable {
        /// The errno of the `MAP_HUGETLB` mmap.
        errno: i32,
    },
    /// `mlock` failed: the memlock rlimit is too low.
    Memlock {
        /// Bytes to lock.
        len: usize,
        /// The errno.
        errno: i32,
    },
    /// `VFIO_IOMMU_MAP_DMA` failed.
    MapDma {
        /// IOVA of the mapping.
        iova: u64,
        /// Its length.
        len: usize,
        /// The errno.
        errno: i32,
    },
    /// `VFIO_IOMMU_UNMAP_DMA` failed; the block (memory and IOVA) is leaked rather than reused
    /// while the device might still reach it.
    UnmapDma {
        /// IOVA of the mapping.
        iova: u64,
        /// Its length.
        len: usize,
        /// The errno.
        errno: i32,
    },
    /// [`IovaPolicy::PhysicalAddress`] and the buffer would not be physically contiguous.
    NotContiguous {
        /// Requested length.
        len: usize,
        /// The largest contiguous buffer available.
        max: usize,
    },
    /// [`IovaPolicy::PhysicalAddress`] and the alignment exceeds what physical pages give.
    AlignmentTooLarge {
        /// Requested alignment.
        align: usize,
        /// The largest alignment available.
        max: usize,
    },
    /// Reading a physical address failed.
    Pagemap(PagemapError),
    /// A page's physical address kept changing while it was being pinned.
    PhysicalAddressUnstable {
        /// The page.
        va: usize,
    },
    /// `deallocate` of a region this allocator did not hand out (or a double free).
    UnknownRegion {
        /// Its CPU address.
        va: usize,
    },
}

fn os(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

impl fmt::Display for VfioDmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioDmaError::InvalidRequest { len, align } => write!(
                f,
                "invalid DMA request: {len} bytes aligned to {align} (length must be non-zero, \
                 alignment a power of two)"
            ),
            VfioDmaError::InvalidOptions(why) => write!(f, "invalid DMA options: {why}"),
            VfioDmaError::IovaExhausted { len, range } => write!(
                f,
                "IOVA range exhausted: no room for a {len}-byte block in the {range:#x}-byte \
                 range; give IovaPolicy::Allocate a larger size"
            ),
            VfioDmaError::LimitReached { limit, wanted } => write!(
                f,
                "DMA limit reached: {wanted} bytes would be mapped, the limit is {limit}"
            ),
            VfioDmaError::Mmap { len, errno } => {
                write!(
                    f,
                    "mmap of {len} bytes of DMA memory failed: {}",
                    os(*errno)
                )
            }
            VfioDmaError::HugePagesUnavailable { errno } => write!(
                f,
                "no 2 MiB huge pages available ({}); reserve some with \
                 `echo 512 > /proc/sys/vm/nr_hugepages` (or hugepages=N on the kernel command \
                 line), or use HugePages::IfAvailable",
                os(*errno)
            ),
            VfioDmaError::Memlock { len, errno } => write!(
                f,
                "cannot lock {len} bytes of DMA memory ({}): raise the memlock limit \
                 (`ulimit -l unlimited`, or `memlock` in /etc/security/limits.conf) or run as root",
                os(*errno)
            ),
            VfioDmaError::MapDma { iova, len, errno } => write!(
                f,
                "VFIO_IOMMU_MAP_DMA of {len:#x} bytes at IOVA {iova:#x} failed: {}{}",
                os(*errno),
                if *errno == libc::ENOMEM || *errno == libc::EPERM {
                    " (VFIO counts pinned memory against the memlock limit: raise `ulimit -l`)"
                } else if *errno == libc::ENOSPC {
                    " (the container's dma_entry_limit is reached)"
                } else if *errno == libc::EINVAL || *errno == libc::EEXIST {
                    " (the IOVA is outside the IOMMU's valid ranges, or already mapped)"
                } else {
                    ""
                }
            ),
            VfioDmaError::UnmapDma { iova, len, errno } => write!(
                f,
                "VFIO_IOMMU_UNMAP_DMA of {len:#x} bytes at IOVA {iova:#x} failed: {}; the block \
                 is leaked so the device cannot reach reused memory",
                os(*errno)
            ),
            VfioDmaError::NotContiguous { len, max } => write!(
                f,
                "a {len}-byte buffer cannot be physically contiguous: with IOVA = physical \
                 address a buffer must fit in one page, and the largest available here is {max} \
                 bytes; reserve 2 MiB huge pages (`echo 512 > /proc/sys/vm/nr_hugepages`) for \
                 buffers up to 2 MiB"
            ),
            VfioDmaError::AlignmentTooLarge { align, max } => write!(
                f,
                "alignment {align} is larger than the physically contiguous page size {max} \
                 (IOVA = physical address)"
            ),
            VfioDmaError::Pagemap(e) => write!(f, "{e}"),
            VfioDmaError::PhysicalAddressUnstable { va } => write!(
                f,
                "the physical address of page {va:#x} changed while it was being pinned, \
                 {PHYS_RETRIES} times"
            ),
            VfioDmaError::UnknownRegion { va } => write!(
                f,
                "deallocate of {va:#x}, which this allocator did not hand out (or freed twice)"
            ),
        }
    }
}

impl std::error::Error for VfioDmaError {}

impl From<PagemapError> for VfioDmaError {
    fn from(e: PagemapError) -> Self {
        VfioDmaError::Pagemap(e)
    }
}

impl VfioDmaError {
    /// The hal's coarse error for this one.
    pub fn to_dma_error(&self) -> DmaError {
        match self {
            VfioDmaError::InvalidRequest { .. }
            | VfioDmaError::InvalidOptions(_)
            | VfioDmaError::NotContiguous { .. }
            | VfioDmaError::AlignmentTooLarge { .. }
            | VfioDmaError::UnknownRegion { .. } => DmaError::InvalidRequest,
            VfioDmaError::IovaExhausted { .. }
            | VfioDmaError::LimitReached { .. }
            | VfioDmaError::Mmap { .. }
            | VfioDmaError::HugePagesUnavailable { .. }
            | VfioDmaError::Memlock { .. } => DmaError::NoMemory,
            VfioDmaError::MapDma { .. }
            | VfioDmaError::UnmapDma { .. }
            | VfioDmaError::Pagemap(_)
            | VfioDmaError::PhysicalAddressUnstable { .. } => DmaError::MapFailed,
        }
    }
}

/// Counters of a [`VfioDma`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaStats {
    /// Blocks held (mapped).
    pub blocks: usize,
    /// Of those, blocks of 2 MiB huge pages.
    pub hugetlb_blocks: usize,
    /// Bytes in held blocks.
    pub mapped_bytes: usize,
    /// Buffers handed out and not yet freed.
    pub live_buffers: usize,
    /// Bytes in those buffers (rounded up to 64).
    pub live_bytes: usize,
    /// `VFIO_IOMMU_MAP_DMA` calls made.
    pub map_calls: u64,
    /// `VFIO_IOMMU_UNMAP_DMA` calls made.
    pub unmap_calls: u64,
    /// Blocks leaked because their unmap failed.
    pub leaked_blocks: usize,
    /// Errors reported through the `DmaAllocator` trait (see [`VfioDma::last_error`]).
    pub errors: u64,
}

enum BlockIova {
    /// Offset `o` is at IOVA `base + o`.
    Linear(u64),
    /// Offset `o` is at IOVA `pa[o / chunk] + o % chunk`.
    Physical(Vec<u64>),
}

struct Block {
    mem: AnonMap,
    /// Under `PhysicalAddress`, the physically contiguous unit (page or huge page); buffers do
    /// not cross it. Otherwise the block length.
    chunk: usize,
    /// `va` and IOVA of every offset that is a multiple of this are aligned to it.
    align: usize,
    iova: BlockIova,
    /// Free offsets within the block.
    sub: RangeAllocator,
    live: usize,
    /// The IOMMU mappings to undo: (iova, len).
    maps: Vec<(u64, usize)>,
}

impl Block {
    fn iova_at(&self, off: usize) -> u64 {
        match &self.iova {
            BlockIova::Linear(base) => base + off as u64,
            BlockIova::Physical(pas) => pas[off / self.chunk] + (off % self.chunk) as u64,
        }
    }

    fn boundary(&self, physical: bool) -> Option<u64> {
        physical.then_some(self.chunk as u64)
    }
}

struct State {
    iova_space: Option<RangeAllocator>,
    /// Blocks by CPU address.
    blocks: BTreeMap<usize, Block>,
    /// Live buffers by CPU address: (block va, offset, rounded size).
    allocs: HashMap<usize, (usize, u64, u64)>,
    huge_failed: bool,
    stats: DmaStats,
    last_error: Option<VfioDmaError>,
}

/// DMA memory for a device behind VFIO (or any [`DmaMapper`]): locked blocks mapped in one
/// piece, buffers sub-allocated inside them, everything unmapped when the allocator is
/// dropped (which [`DmaBuf`](nic_hal::DmaBuf)'s reference keeps from happening while a buffer
/// lives).
///
/// ```no_run
/// use std::sync::Arc;
/// use nic_hal::{DmaAllocator, DmaBuf};
/// use vfio_attach::{attach, AttachOptions, DmaOptions};
/// let dev = attach("0000:00:02.0", &AttachOptions::default())?;
/// let dma: Arc<dyn DmaAllocator> = dev.dma(DmaOptions::default())?;
/// let ring = DmaBuf::new(&dma, 4096, 4096).unwrap();
/// println!("ring at IOVA {:#x}", ring.iova());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct VfioDma {
    mapper: Arc<dyn DmaMapper>,
    opts: DmaOptions,
    page_size: usize,
    state: Mutex<State>,
}

impl fmt::Debug for VfioDma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioDma")
            .field("opts", &self.opts)
            .field("stats", &self.stats())
            .finish()
    }
}

impl VfioDma {
    /// An allocator that maps its blocks through `mapper` (for a VFIO container, use
    /// [`Attached::dma`](crate::Attached::dma)).
    pub fn new(mapper: Arc<dyn DmaMapper>, opts: DmaOptions) -> Result<Arc<VfioDma>, VfioDmaError> {
        let ps = pagemap::page_size();
        if opts.block_size == 0 || !opts.block_size.is_multiple_of(ps) {
            return Err(VfioDmaError::InvalidOptions(
                "block_size must be a non-zero multiple of the page size",
            ));
        }
        let iova_space = match opts.iova {
            IovaPolicy::Allocate { base, size } => {
                if base == 0 {
                    return Err(VfioDmaError::InvalidOptions(
                        "IOVA base 0 is refused, so that a zeroed address field never points at a buffer",
                    ));
                }
                if !base.is_multiple_of(ps as u64) || !size.is_multiple_of(ps as u64) {
                    return Err(VfioDmaError::InvalidOptions(
                        "IOVA base and size must be page multiples",
                    ));
                }
                Some(RangeAllocator::new(base, size).map_err(|_| {
                    VfioDmaError::InvalidOptions("IOVA range is empty or wraps past 2^64")
                })?)
            }
            IovaPolicy::PhysicalAddress => None,
        };
        Ok(Arc::new(VfioDma {
            mapper,
            opts,
            page_size: ps,
            state: Mutex::new(State {
                iova_space,
                blocks: BTreeMap::new(),
                allocs: HashMap::new(),
                huge_failed: false,
                stats: DmaStats::default(),
                last_error: None,
            }),
        }))
    }

    /// The options in force.
    pub fn options(&self) -> DmaOptions {
        self.opts
    }

    /// Counters.
    pub fn stats(&self) -> DmaStats {
        self.lock().stats
    }

    /// The detailed error behind the last failure reported through the [`DmaAllocator`]
    /// trait (whose [`DmaError`] is coarse), or of a `deallocate` (which cannot return one).
    pub fn last_error(&self) -> Option<VfioDmaError> {
        self.lock().last_error.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (every update is completed
        // before anything that can panic), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn physical(&self) -> bool {
        self.opts.iova == IovaPolicy::PhysicalAddress
    }

    /// Allocates `len` zeroed bytes aligned to `align` on both the CPU and the device side,
    /// with a detailed error. Free with [`DmaAllocator::deallocate`].
    pub fn try_allocate(&self, len: usize, align: usize) -> Result<DmaRegion, VfioDmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(VfioDmaError::InvalidRequest { len, align });
        }
        let size = len
            .checked_next_multiple_of(MIN_GRANULE)
            .ok_or(VfioDmaError::InvalidRequest { len, align })?;
        let align = align.max(MIN_GRANULE);
        let physical = self.physical();
        if physical {
            let max = if self.opts.hugepages == HugePages::Never {
                self.page_size
            } else {
                HUGE_PAGE_SIZE
            };
            if size > max {
                return Err(VfioDmaError::NotContiguous { len, max });
            }
            if align > max {
                return Err(VfioDmaError::AlignmentTooLarge { align, max });
            }
        }
        let mut st = self.lock();
        let mut found = None;
        for (&bva, b) in st.blocks.iter_mut() {
            if align > b.align || (physical && size > b.chunk) {
                continue;
            }
            if let Ok(off) = b
                .sub
                .allocate_within(size as u64, align as u64, b.boundary(physical))
            {
                found = Some((bva, off));
                break;
            }
        }
        let (bva, off) = match found {
            Some(x) => x,
            None => {
                let block = self.new_block(&mut st, size, align)?;
                let bva = block.mem.addr();
                st.blocks.insert(bva, block);
                let b = st.blocks.get_mut(&bva).expect("just inserted");
                if physical && (size > b.chunk || align > b.chunk) {
                    // Huge pages were wanted but not had: the block is fine for small buffers.
                    let max = b.chunk;
                    return Err(if size > max {
                        VfioDmaError::NotContiguous { len, max }
                    } else {
                        VfioDmaError::AlignmentTooLarge { align, max }
                    });
                }
                let off = b
                    .sub
                    .allocate_within(size as u64, align as u64, b.boundary(physical))
                    .expect("a fresh block fits the request it was made for");
                (bva, off)
            }
        };
        let b = st.blocks.get_mut(&bva).expect("block exists");
        b.live += 1;
        let va = bva + off as usize;
        let iova = b.iova_at(off as usize);
        // SAFETY: [va, va + size) lies inside the block's mapping (the sub-allocator only hands
        // out offsets within it) and is not handed out to anyone else; freed buffers may hold
        // old data, so it is zeroed before use.
        unsafe { std::ptr::write_bytes(va as *mut u8, 0, size) };
        st.allocs.insert(va, (bva, off, size as u64));
        st.stats.live_buffers += 1;
        st.stats.live_bytes += size;
        Ok(DmaRegion {
            va: NonNull::new(va as *mut u8).expect("mapping is never at address 0"),
            iova,
            len,
        })
    }

    /// Maps, locks and IOMMU-maps a block of at least `size` bytes whose offsets aligned to
    /// `align` are aligned on both sides.
    fn new_block(&self, st: &mut State, size: usize, align: usize) -> Result<Block, VfioDmaError> {
        let physical = self.physical();
        let want = size.max(self.opts.block_size);
        let try_huge = match self.opts.hugepages {
            HugePages::Never => false,
            HugePages::IfAvailable => !st.huge_failed,
            HugePages::Required => true,
        };
        let mut mem = None;
        if try_huge {
            let len = want
                .checked_next_multiple_of(HUGE_PAGE_SIZE)
                .ok_or(VfioDmaError::Mmap {
                    len: want,
                    errno: libc::ENOMEM,
                })?;
            let va_align = if physical {
                HUGE_PAGE_SIZE
            } else {
                align.max(HUGE_PAGE_SIZE)
            };
            match AnonMap::new(len, va_align, true) {
                Ok(m) => mem = Some((m, va_align)),
                Err(errno) if self.opts.hugepages == HugePages::Required => {
                    return Err(VfioDmaError::HugePagesUnavailable { errno });
                }
                Err(_) => st.huge_failed = true,
            }
        }
        let (mem, va_align) = match mem {
            Some(m) => m,
            None => {
                let ps = self.page_size;
                let len = want
                    .checked_next_multiple_of(ps)
                    .ok_or(VfioDmaError::Mmap {
                        len: want,
                        errno: libc::ENOMEM,
                    })?;
                let va_align = if physical {
                    ps
                } else {
                    // Align blocks up to 2 MiB so that the IOMMU can use large pages and
                    // buffers may ask for large alignments.
                    align
                        .max(len.next_power_of_two().min(HUGE_PAGE_SIZE))
                        .max(ps)
                };
                let m = AnonMap::new(len, va_align, false)
                    .map_err(|errno| VfioDmaError::Mmap { len, errno })?;
                if physical {
                    m.no_thp();
                }
                (m, va_align)
            }
        };
        let len = mem.len();
        if let Some(limit) = self.opts.limit {
            let wanted = st.stats.mapped_bytes + len;
            if wanted > limit {
                return Err(VfioDmaError::LimitReached { limit, wanted });
            }
        }
        mem.lock()
            .map_err(|errno| VfioDmaError::Memlock { len, errno })?;
        let hugetlb = mem.is_hugetlb();
        // Under PhysicalAddress a buffer stays inside one page (or huge page), whose physical
        // address is aligned to its size. Otherwise the block's va is aligned to `va_align`
        // and its IOVA is allocated with the same alignment.
        let granule = if hugetlb {
            HUGE_PAGE_SIZE
        } else {
            self.page_size
        };
        let (chunk, block_align) = if physical {
            (granule, granule)
        } else {
            (len, va_align)
        };
        let sub = RangeAllocator::new(0, len as u64)
            .map_err(|_| VfioDmaError::InvalidRequest { len: size, align })?;
        let (iova, maps) = if physical {
            self.map_physical(st, &mem, chunk)?
        } else {
            let space = st
                .iova_space
                .as_mut()
                .expect("Allocate policy has an IOVA space");
            let range = space.size();
            let iova = space
                .allocate(len as u64, block_align as u64)
                .map_err(|_| VfioDmaError::IovaExhausted { len, range })?;
            st.stats.map_calls += 1;
            // SAFETY: the block's memory is owned by the `Block` built below, stays mapped
            // until `release_block` has unmapped it from the IOMMU, and is only ever accessed
            // through raw pointers (DmaBuf's accessors).
            if let Err(e) = unsafe { self.mapper.map(iova, len, mem.addr() as *mut u8) } {
                let _ = space.free(iova, len as u64);
                return Err(VfioDmaError::MapDma {
                    iova,
                    len,
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                });
            }
            (BlockIova::Linear(iova), vec![(iova, len)])
        };
        st.stats.blocks += 1;
        st.stats.mapped_bytes += len;
        if hugetlb {
            st.stats.hugetlb_blocks += 1;
        }
        Ok(Block {
            mem,
            chunk,
            align: block_align,
            iova,
            sub,
            live: 0,
            maps,
        })
    }

    /// The physical address of each `chunk` of the block, checking that each chunk is
    /// contiguous and aligned.
    fn chunk_addresses(&self, mem: &AnonMap, chunk: usize) -> Result<Vec<u64>, VfioDmaError> {
        let ps = self.page_size;
        let per_chunk = chunk / ps;
        let entries = pagemap::read_entries(mem.addr(), mem.len() / ps)?;
        let mut pas = Vec::with_capacity(mem.len() / chunk);
        for (c, pages) in entries.chunks(per_chunk).enumerate() {
            let va = mem.addr() + c * chunk;
            let first = pages[0].physical_address(va, ps)?;
            for (j, e) in pages.iter().enumerate().skip(1) {
                let pa = e.physical_address(va + j * ps, ps)?;
                if pa != first + (j * ps) as u64 {
                    return Err(VfioDmaError::PhysicalAddressUnstable { va: va + j * ps });
                }
            }
            if !first.is_multiple_of(chunk as u64) {
                return Err(VfioDmaError::PhysicalAddressUnstable { va });
            }
            pas.push(first);
        }
        Ok(pas)
    }

    /// IOMMU-maps a block with IOVA = physical address, one mapping per physically contiguous
    /// run of chunks, re-reading the addresses after pinning (pinning may migrate a page).
    fn map_physical(
        &self,
        st: &mut State,
        mem: &AnonMap,
        chunk: usize,
    ) -> Result<(BlockIova, Vec<(u64, usize)>), VfioDmaError> {
        for _ in 0..PHYS_RETRIES {
            let pas = self.chunk_addresses(mem, chunk)?;
            let mut maps: Vec<(u64, usize)> = Vec::new();
            let mut i = 0;
            while i < pas.len() {
                let mut n = 1;
                while i + n < pas.len() && pas[i + n] == pas[i] + (n * chunk) as u64 {
                    n += 1;
                }
                let (iova, len) = (pas[i], n * chunk);
                st.stats.map_calls += 1;
                // SAFETY: as in `new_block`: the memory outlives the mapping (the block owns
                // it and unmaps before freeing) and is accessed through raw pointers only.
                let r = unsafe {
                    self.mapper
                        .map(iova, len, (mem.addr() + i * chunk) as *mut u8)
                };
                if let Err(e) = r {
                    self.unmap_all(st, &maps);
                    return Err(VfioDmaError::MapDma {
                        iova,
                        len,
                        errno: e.raw_os_error().unwrap_or(libc::EIO),
                    });
                }
                maps.push((iova, len));
                i += n;
            }
            if self.chunk_addresses(mem, chunk)? == pas {
                return Ok((BlockIova::Physical(pas), maps));
            }
            self.unmap_all(st, &maps);
        }
        Err(VfioDmaError::PhysicalAddressUnstable { va: mem.addr() })
    }

    /// Undoes mappings of a block that is being abandoned before it was handed out.
    fn unmap_all(&self, st: &mut State, maps: &[(u64, usize)]) {
        for &(iova, len) in maps {
            st.stats.unmap_calls += 1;
            if let Err(e) = self.mapper.unmap(iova, len) {
                st.last_error = Some(VfioDmaError::UnmapDma {
                    iova,
                    len,
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                });
            }
        }
    }

    /// Unmaps a block from the IOMMU and frees it; on an unmap failure the block's memory and
    /// IOVA range are leaked (never reused) and the error is returned.
    fn release_block(&self, st: &mut State, block: Block) -> Result<(), VfioDmaError> {
        let mut failed = None;
        for &(iova, len) in &block.maps {
            st.stats.unmap_calls += 1;
            if let Err(e) = self.mapper.unmap(iova, len) {
                failed.get_or_insert(VfioDmaError::UnmapDma {
                    iova,
                    len,
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                });
            }
        }
        st.stats.blocks -= 1;
        st.stats.mapped_bytes -= block.mem.len();
        if block.mem.is_hugetlb() {
            st.stats.hugetlb_blocks -= 1;
        }
        if let Some(e) = failed {
            st.stats.leaked_blocks += 1;
            // The device may still reach the memory: keep it (and its IOVA) out of use forever.
            std::mem::forget(block.mem);
            return Err(e);
        }
        if let (BlockIova::Linear(iova), Some(space)) = (&block.iova, st.iova_space.as_mut()) {
            let _ = space.free(*iova, block.mem.len() as u64);
        }
        Ok(())
    }

    fn free_region(&self, region: DmaRegion) -> Result<(), VfioDmaError> {
        let va = region.va.as_ptr() as usize;
        let mut st = self.lock();
        let (bva, off, size) = st
            .allocs
            .remove(&va)
            .ok_or(VfioDmaError::UnknownRegion { va })?;
        st.stats.live_buffers -= 1;
        st.stats.live_bytes -= size as usize;
        let several = st.blocks.len() > 1;
        let b = st
            .blocks
            .get_mut(&bva)
            .expect("a live buffer's block exists");
        b.sub
            .free(off, size)
            .expect("a live buffer's range is allocated in its block");
        b.live -= 1;
        // Keep one empty block so that an alloc/free loop does not map and unmap each time.
        if b.live == 0 && several {
            let block = st.blocks.remove(&bva).expect("block exists");
            self.release_block(&mut st, block)?;
        }
        Ok(())
    }

    fn record(&self, e: VfioDmaError) {
        let mut st = self.lock();
        st.stats.errors += 1;
        st.last_error = Some(e);
    }
}

// SAFETY: a region is a sub-range of a block that is mmapped, locked and IOMMU-mapped at the
// IOVA reported (the whole block is mapped before any of it is handed out), zeroed in
// `try_allocate`, aligned to `align` at `va` (the block's va is aligned to at least the request
// and the offset is a multiple of it) and at `iova` (the block's IOVA is aligned alike; under
// PhysicalAddress the chunk's physical address is chunk-aligned and buffers stay in one chunk),
// and it is not handed out again until `deallocate` returns its range to the sub-allocator.
unsafe impl DmaAllocator for VfioDma {
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.try_allocate(len, align).map_err(|e| {
            let d = e.to_dma_error();
            self.record(e);
            d
        })
    }

    unsafe fn deallocate(&self, region: DmaRegion) {
        if let Err(e) = self.free_region(region) {
            self.record(e);
        }
    }
}

impl Drop for VfioDma {
    fn drop(&mut self) {
        let mut st = self.lock();
        let blocks = std::mem::take(&mut st.blocks);
        for (_, block) in blocks {
            if let Err(e) = self.release_block(&mut st, block) {
                // Nothing can be returned from a drop; say it where an operator will see it.
                eprintln!("vfio-attach: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
