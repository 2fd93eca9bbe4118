//! A freestanding image stand-in: `#![no_std]`, its own panic handler and allocator, and a
//! reference to every no_std crate. If any of them (or a dependency) links `std`, the build
//! fails with a duplicate `panic_impl` lang item.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};

struct NoHeap;

// SAFETY: never hands out memory, so there is nothing to misuse.
unsafe impl GlobalAlloc for NoHeap {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        core::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static HEAP: NoHeap = NoHeap;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// A platform without a clock (only for instantiating the driver's generic code).
struct NoClock;

impl nic_hal::Platform for NoClock {
    fn relax(&self) {}
    fn now_ns(&self) -> u64 {
        0
    }
}

/// Touches each crate so that it is linked.
#[unsafe(no_mangle)]
pub extern "C" fn nostd_check_entry() -> u32 {
    let mut sum = firmware_interface::Field::dw(0x8, 23, 0).width;
    sum += verbs::Error::NoMemory.errno() as u32;
    sum += mlx5::is_supported_pci(0x15b3, 0x1017) as u32;
    sum += efa::is_supported_pci(0x1d0f, 0xefa1) as u32;
    sum += efa::Error::AdminDown.errno() as u32;
    sum += cm::Error::ConnectionRefused.errno() as u32;
    sum +=
        nvmf::capsule::Sqe::decode(core::hint::black_box(&[0u8; 64])).map_or(0, |s| s.cid as u32);
    let _ = core::hint::black_box(nvmf::target::Target::new as fn(_) -> _);
    sum += nvmf_rdma_target::check_request(core::hint::black_box(&cm::EventParam::None))
        .map_or(1, |(_, ird)| ird as u32);
    // The polled target over the mlx5 driver (its generic code compiled for this target).
    type Mlx5 = mlx5::Device<nic_hal::MmioBar, NoClock>;
    let _ = core::hint::black_box(
        nvmf_rdma_target::PolledTarget::<Mlx5>::poll as fn(&mut _, u64) -> bool,
    );
    // The barriers are `#[inline(always)]` and mostly called from generic code: take each one's
    // address so that its architecture-specific body is compiled for the target at hand.
    let _ = core::hint::black_box(nic_hal::barrier::dma_wmb as fn());
    let _ = core::hint::black_box(nic_hal::barrier::dma_rmb as fn());
    let _ = core::hint::black_box(nic_hal::barrier::mmio_wmb as fn());
    sum
}
