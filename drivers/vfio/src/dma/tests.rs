//! VfioDma against a fake IOMMU: block mapping and sub-allocation, alignment on both sides,
//! zeroing, exhaustion, map/unmap failures, the physical-address policy on this process's
//! real pages.

use super::*;
use nic_hal::DmaBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An IOMMU model: records mappings, refuses overlapping ones, can be told to fail.
#[derive(Default)]
struct FakeIommu {
    maps: Mutex<BTreeMap<u64, (usize, usize)>>, // iova -> (len, va)
    map_calls: AtomicU64,
    fail_map: AtomicBool,
    fail_unmap: AtomicBool,
}

impl FakeIommu {
    fn translate(&self, iova: u64, len: usize) -> Option<usize> {
        let maps = self.maps.lock().unwrap();
        let (&start, &(mlen, va)) = maps.range(..=iova).next_back()?;
        let off = (iova - start) as usize;
        (off + len <= mlen).then_some(va + off)
    }

    fn mapped(&self) -> usize {
        self.maps.lock().unwrap().len()
    }
}

impl DmaMapper for FakeIommu {
    unsafe fn map(&self, iova: u64, len: usize, va: *mut u8) -> std::io::Result<()> {
        self.map_calls.fetch_add(1, Ordering::Relaxed);
        if self.fail_map.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        let mut maps = self.maps.lock().unwrap();
        let overlaps = maps
            .iter()
            .any(|(&s, &(l, _))| iova < s + l as u64 && s < iova + len as u64);
        if overlaps {
            return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
        }
        maps.insert(iova, (len, va as usize));
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> std::io::Result<()> {
        if self.fail_unmap.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        let mut maps = self.maps.lock().unwrap();
        match maps.get(&iova) {
            Some(&(l, _)) if l == len => {
                maps.remove(&iova);
                Ok(())
            }
            _ => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
}

fn opts(iova: IovaPolicy) -> DmaOptions {
    DmaOptions {
        iova,
        hugepages: HugePages::Never,
        ..DmaOptions::default()
    }
}

fn setup(o: DmaOptions) -> (Arc<FakeIommu>, Arc<VfioDma>, Arc<dyn DmaAllocator>) {
    let iommu = Arc::new(FakeIommu::default());
    let dma = VfioDma::new(iommu.clone(), o).unwrap();
    let alloc: Arc<dyn DmaAllocator> = dma.clone();
    (iommu, dma, alloc)
}

#[test]
fn buffers_are_sub_allocated_from_one_mapped_block() {
    let (iommu, dma, alloc) = setup(opts(IovaPolicy::default()));
    let mut bufs = Vec::new();
    for i in 0..200usize {
        let align = [64, 128, 4096, 8192][i % 4];
        let len = 4 + (i * 37) % 3000;
        let b = DmaBuf::new(&alloc, len, align).unwrap();
        assert_eq!(b.iova() % align as u64, 0, "iova alignment");
        assert_eq!(b.va() as usize % align, 0, "va alignment");
        // The device sees exactly this buffer's memory at its IOVA.
        assert_eq!(iommu.translate(b.iova(), len), Some(b.va() as usize));
        assert!(b.iova() >= DEFAULT_IOVA_BASE);
        b.write_be32(0, i as u32).unwrap();
        bufs.push(b);
    }
    // Far fewer map calls than buffers: blocks of 2 MiB.
    let s = dma.stats();
    assert_eq!(s.live_buffers, 200);
    assert_eq!(s.map_calls, s.blocks as u64);
    assert!(s.blocks <= 2, "{s:?}");
    assert_eq!(iommu.map_calls.load(Ordering::Relaxed), s.map_calls);
    // No two buffers overlap, on either side.
    let mut ranges: Vec<_> = bufs.iter().map(|b| (b.iova(), b.len())).collect();
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(w[0].0 + w[0].1 as u64 <= w[1].0, "{w:x?}");
    }
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(b.read_be32(0).unwrap(), i as u32);
    }
    drop(bufs);
    let s = dma.stats();
    assert_eq!((s.live_buffers, s.live_bytes), (0, 0));
    assert_eq!(s.blocks, 1, "one empty block is kept");
    drop(alloc);
    drop(dma);
    assert_eq!(iommu.mapped(), 0, "everything unmapped on drop");
}

#[test]
fn reused_memory_is_zeroed() {
    let (_iommu, _dma, alloc) = setup(opts(IovaPolicy::default()));
    let a = DmaBuf::new(&alloc, 4096, 4096).unwrap();
    let (va, iova) = (a.va(), a.iova());
    a.fill(0, 4096, 0xa5).unwrap();
    drop(a);
    let b = DmaBuf::new(&alloc, 4096, 4096).unwrap();
    assert_eq!((b.va(), b.iova()), (va, iova), "first fit reuses the range");
    let mut out = vec![0xffu8; 4096];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0));
}

#[test]
fn large_buffers_get_their_own_block_and_give_it_back() {
    let (iommu, dma, alloc) = setup(opts(IovaPolicy::default()));
    let small = DmaBuf::new(&alloc, 64, 64).unwrap();
    let big = DmaBuf::new(&alloc, 3 << 20, 1 << 21).unwrap();
    assert_eq!(big.iova() % (1 << 21), 0);
    assert_eq!(big.va() as usize % (1 << 21), 0);
    assert_eq!(
        iommu.translate(big.iova() + (3 << 20) - 1, 1),
        Some(big.va() as usize + (3 << 20) - 1)
    );
    let s = dma.stats();
    assert_eq!((s.blocks, s.map_calls), (2, 2));
    assert_eq!(s.mapped_bytes, (2 << 20) + (3 << 20));
    drop(big);
    let s = dma.stats();
    assert_eq!(
        (s.blocks, s.unmap_calls),
        (1, 1),
        "an empty extra block is released"
    );
    assert_eq!(iommu.mapped(), 1);
    drop(small);
}

#[test]
fn iova_exhaustion_is_no_memory_with_a_clear_reason() {
    let (_iommu, dma, alloc) = setup(DmaOptions {
        block_size: 1 << 20,
        ..opts(IovaPolicy::Allocate {
            base: 0x10_0000,
            size: 2 << 20,
        })
    });
    let a = DmaBuf::new(&alloc, 1 << 20, 4096).unwrap();
    let b = DmaBuf::new(&alloc, 1 << 20, 4096).unwrap();
    assert_eq!(a.iova(), 0x10_0000);
    assert_eq!(b.iova(), 0x20_0000);
    assert_eq!(DmaBuf::new(&alloc, 64, 64).unwrap_err(), DmaError::NoMemory);
    let e = dma.last_error().unwrap();
    assert_eq!(
        e,
        VfioDmaError::IovaExhausted {
            len: 1 << 20,
            range: 2 << 20
        }
    );
    assert!(e.to_string().contains("larger size"));
    let s = dma.stats();
    assert_eq!(
        (s.blocks, s.errors),
        (2, 1),
        "the failed block was not kept"
    );
    drop(b);
    // The freed block was released, so its IOVA range is available again.
    let c = DmaBuf::new(&alloc, 64, 64).unwrap();
    assert_eq!(c.iova(), 0x20_0000);
}

#[test]
fn map_failure_gives_the_iova_back() {
    let (iommu, dma, alloc) = setup(opts(IovaPolicy::default()));
    iommu.fail_map.store(true, Ordering::Relaxed);
    assert_eq!(
        DmaBuf::new(&alloc, 64, 64).unwrap_err(),
        DmaError::MapFailed
    );
    let e = dma.last_error().unwrap();
    assert!(matches!(
        e,
        VfioDmaError::MapDma {
            iova: DEFAULT_IOVA_BASE,
            errno: libc::ENOMEM,
            ..
        }
    ));
    assert!(e.to_string().contains("memlock"), "{e}");
    assert_eq!(dma.stats().blocks, 0);
    iommu.fail_map.store(false, Ordering::Relaxed);
    let b = DmaBuf::new(&alloc, 64, 64).unwrap();
    assert_eq!(b.iova(), DEFAULT_IOVA_BASE);
}

#[test]
fn unmap_failure_leaks_the_block_instead_of_reusing_it() {
    let (iommu, dma, alloc) = setup(opts(IovaPolicy::default()));
    let _keep = DmaBuf::new(&alloc, 64, 64).unwrap();
    let big = DmaBuf::new(&alloc, 4 << 20, 4096).unwrap();
    let big_iova = big.iova();
    iommu.fail_unmap.store(true, Ordering::Relaxed);
    drop(big);
    let e = dma.last_error().unwrap();
    assert!(
        matches!(e, VfioDmaError::UnmapDma { iova, .. } if iova == big_iova),
        "{e:?}"
    );
    assert_eq!(dma.stats().leaked_blocks, 1);
    iommu.fail_unmap.store(false, Ordering::Relaxed);
    let again = DmaBuf::new(&alloc, 4 << 20, 4096).unwrap();
    assert!(
        again.iova() >= big_iova + (4 << 20) || again.iova() + (4 << 20) <= big_iova,
        "a leaked IOVA range is never handed out again"
    );
}

#[test]
fn limit_and_bad_requests() {
    let (_iommu, dma, alloc) = setup(DmaOptions {
        limit: Some(2 << 20),
        ..opts(IovaPolicy::default())
    });
    let _a = DmaBuf::new(&alloc, 2 << 20, 4096).unwrap();
    assert_eq!(DmaBuf::new(&alloc, 64, 64).unwrap_err(), DmaError::NoMemory);
    assert!(matches!(
        dma.last_error(),
        Some(VfioDmaError::LimitReached { limit, wanted }) if limit == 2 << 20 && wanted == 4 << 20
    ));
    assert!(matches!(
        dma.try_allocate(0, 64),
        Err(VfioDmaError::InvalidRequest { len: 0, .. })
    ));
    assert!(dma.try_allocate(8, 3).is_err());
    // Freeing something that was never allocated is reported, not ignored.
    let bogus = DmaRegion {
        va: NonNull::new(0x1000 as *mut u8).unwrap(),
        iova: 0,
        len: 8,
    };
    // SAFETY: the allocator must reject this region without touching it.
    unsafe { dma.deallocate(bogus) };
    assert_eq!(
        dma.last_error(),
        Some(VfioDmaError::UnknownRegion { va: 0x1000 })
    );
}

#[test]
fn option_validation() {
    let iommu: Arc<dyn DmaMapper> = Arc::new(FakeIommu::default());
    let bad = [
        opts(IovaPolicy::Allocate {
            base: 0,
            size: 1 << 20,
        }),
        opts(IovaPolicy::Allocate {
            base: 0x1234,
            size: 1 << 20,
        }),
        opts(IovaPolicy::Allocate {
            base: 1 << 20,
            size: 0,
        }),
        opts(IovaPolicy::Allocate {
            base: u64::MAX - 4095,
            size: 1 << 20,
        }),
        DmaOptions {
            block_size: 100,
            ..DmaOptions::default()
        },
    ];
    for o in bad {
        let e = VfioDma::new(iommu.clone(), o).unwrap_err();
        assert!(matches!(e, VfioDmaError::InvalidOptions(_)), "{o:?}: {e:?}");
    }
}

#[test]
fn threads_share_one_allocator() {
    let (iommu, _dma, alloc) = setup(opts(IovaPolicy::default()));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let alloc = alloc.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..300usize {
                    let b = DmaBuf::new(&alloc, 64 + (i % 7) * 100, 64).unwrap();
                    b.write_be32(0, (t << 16 | i) as u32).unwrap();
                    held.push((b, (t << 16 | i) as u32));
                    if i % 3 == 0 {
                        let (b, v) = held.swap_remove(i % held.len());
                        assert_eq!(b.read_be32(0).unwrap(), v);
                    }
                }
                for (b, v) in &held {
                    assert_eq!(b.read_be32(0).unwrap(), *v);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(iommu.mapped(), 1);
}

#[test]
fn physical_address_policy() {
    let (iommu, dma, alloc) = setup(opts(IovaPolicy::PhysicalAddress));
    let ps = pagemap::page_size();
    if !pagemap::has_cap_sys_admin() {
        assert_eq!(
            DmaBuf::new(&alloc, 64, 64).unwrap_err(),
            DmaError::MapFailed
        );
        assert!(matches!(
            dma.last_error(),
            Some(VfioDmaError::Pagemap(PagemapError::NoPfn { .. }))
        ));
        return;
    }
    let mut bufs = Vec::new();
    for i in 0..40usize {
        let len = [64, 100, 4096, 2000][i % 4];
        let b = DmaBuf::new(&alloc, len, 64).unwrap();
        // IOVA = the physical address of the buffer's first byte, and of its last byte.
        assert_eq!(
            b.iova(),
            pagemap::physical_address(b.va() as usize).unwrap()
        );
        let last = b.va() as usize + len - 1;
        assert_eq!(
            b.iova() + len as u64 - 1,
            pagemap::physical_address(last).unwrap()
        );
        assert_eq!(iommu.translate(b.iova(), len), Some(b.va() as usize));
        bufs.push(b);
    }
    let page = DmaBuf::new(&alloc, ps, ps).unwrap();
    assert_eq!(page.iova() % ps as u64, 0);
    // One block, mapped per physically contiguous run: never more calls than pages.
    let s = dma.stats();
    assert_eq!(s.blocks, 1);
    assert!(s.map_calls as usize <= DEFAULT_BLOCK_SIZE / ps);
    // Larger than a page: refused with a reason, not silently split.
    assert_eq!(
        DmaBuf::new(&alloc, ps + 1, 64).unwrap_err(),
        DmaError::InvalidRequest
    );
    let e = dma.last_error().unwrap();
    assert_eq!(
        e,
        VfioDmaError::NotContiguous {
            len: ps + 1,
            max: ps
        }
    );
    assert!(e.to_string().contains("hugepages"), "{e}");
    assert!(matches!(
        dma.try_allocate(64, 2 * ps),
        Err(VfioDmaError::AlignmentTooLarge { .. })
    ));
    drop(bufs);
    drop(page);
    drop(alloc);
    drop(dma);
    assert_eq!(iommu.mapped(), 0);
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn hugepages_if_available_falls_back_to_small_pages() {
    let (_iommu, dma, alloc) = setup(DmaOptions {
        hugepages: HugePages::IfAvailable,
        ..DmaOptions::default()
    });
    let b = DmaBuf::new(&alloc, 100_000, 4096).unwrap();
    assert_eq!(b.iova() % 4096, 0);
    let s = dma.stats();
    assert_eq!(s.blocks, 1);
    if free_hugepages() == 0 {
        assert_eq!(s.hugetlb_blocks, 0);
    }
}

#[test]
fn hugepages_required_without_any_is_a_clear_error() {
    if free_hugepages() > 0 {
        return; // this machine has huge pages: nothing to check here
    }
    for policy in [IovaPolicy::default(), IovaPolicy::PhysicalAddress] {
        let (_iommu, dma, alloc) = setup(DmaOptions {
            iova: policy,
            hugepages: HugePages::Required,
            ..DmaOptions::default()
        });
        assert_eq!(DmaBuf::new(&alloc, 64, 64).unwrap_err(), DmaError::NoMemory);
        let e = dma.last_error().unwrap();
        assert!(
            matches!(e, VfioDmaError::HugePagesUnavailable { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("nr_hugepages"));
    }
    // PhysicalAddress with IfAvailable: falls back to pages and says how large a buffer can be.
    let (_iommu, dma, alloc) = setup(DmaOptions {
        iova: IovaPolicy::PhysicalAddress,
        hugepages: HugePages::IfAvailable,
        ..DmaOptions::default()
    });
    if pagemap::has_cap_sys_admin() {
        let ps = pagemap::page_size();
        assert_eq!(
            DmaBuf::new(&alloc, 2 * ps, 64).unwrap_err(),
            DmaError::InvalidRequest
        );
        assert_eq!(
            dma.last_error(),
            Some(VfioDmaError::NotContiguous {
                len: 2 * ps,
                max: ps
            })
        );
        assert!(DmaBuf::new(&alloc, ps, ps).is_ok());
    }
}

#[test]
fn errors_map_to_the_hal_error() {
    let cases = [
        (
            VfioDmaError::InvalidRequest { len: 0, align: 1 },
            DmaError::InvalidRequest,
        ),
        (
            VfioDmaError::NotContiguous {
                len: 8192,
                max: 4096,
            },
            DmaError::InvalidRequest,
        ),
        (
            VfioDmaError::IovaExhausted { len: 1, range: 1 },
            DmaError::NoMemory,
        ),
        (
            VfioDmaError::Memlock {
                len: 1,
                errno: libc::ENOMEM,
            },
            DmaError::NoMemory,
        ),
        (
            VfioDmaError::HugePagesUnavailable {
                errno: libc::ENOMEM,
            },
            DmaError::NoMemory,
        ),
        (
            VfioDmaError::MapDma {
                iova: 0,
                len: 1,
                errno: libc::EINVAL,
            },
            DmaError::MapFailed,
        ),
        (
            VfioDmaError::Pagemap(PagemapError::NoPfn { va: 0 }),
            DmaError::MapFailed,
        ),
    ];
    for (e, d) in cases {
        assert_eq!(e.to_dma_error(), d, "{e:?}");
        assert!(!e.to_string().is_empty());
    }
    let e = VfioDmaError::Memlock {
        len: 4096,
        errno: libc::EPERM,
    };
    assert!(e.to_string().contains("ulimit -l"));
}
