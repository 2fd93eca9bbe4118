//! The std/Linux VFIO attachment: drive a PCI function from a userspace process.
//!
//! - [`attach`] takes a function bound to vfio-pci (`DDDD:BB:DD.F`), opens its IOMMU group in a
//!   type1v2 container through `vfio-ioctls`, resets it, enables memory space and bus
//!   mastering, and maps a BAR as a [`VfioBar`], which is the hal's
//!   [`RegisterIo`](nic_hal::RegisterIo) (an [`nic_hal::MmioBar`] inside).
//! - [`VfioDma`] is the hal's [`DmaAllocator`](nic_hal::DmaAllocator) on locked memory (2 MiB
//!   huge pages when there are some), mapped with `VFIO_IOMMU_MAP_DMA` in blocks and
//!   sub-allocated, with an [`IovaPolicy`]: our own IOVA ranges for a real IOMMU, or
//!   IOVA = physical address for an emulated device behind a virtual IOMMU.
//!
//! - [`VfioInterrupts`] ([`Attached::interrupts`]) is the hal's
//!   [`Interrupts`](nic_hal::Interrupts): every MSI-X vector with an eventfd of its own
//!   (`VFIO_DEVICE_SET_IRQS`), a waiter sleeping in `poll(2)` until one fires or its timeout.
//!
//! Each failure is an [`AttachError`] or [`VfioDmaError`] whose message says what to fix
//! (load vfio-pci, enable the IOMMU, rebind the device, raise the memlock limit, ...).
//!
//! ```no_run
//! use std::sync::Arc;
//! use nic_hal::{DmaAllocator, DmaBuf, RegisterIo};
//! use vfio_attach::{attach, AttachOptions, DmaOptions, IovaPolicy};
//!
//! let dev = attach("0000:3b:00.0", &AttachOptions::default())?;
//! println!("{:04x}:{:04x} in IOMMU group {}", dev.vendor_id(), dev.device_id(), dev.iommu_group());
//! let bar = dev.bar();
//! let fw_rev = u32::from_be(bar.read32(0)); // mlx5 init segment: fw_rev_minor | fw_rev_major
//! let dma: Arc<dyn DmaAllocator> = dev.dma(DmaOptions {
//!     iova: IovaPolicy::Allocate { base: 1 << 32, size: 1 << 30 },
//!     ..DmaOptions::default()
//! })?;
//! let page = DmaBuf::new(&dma, 4096, 4096).expect("DMA memory");
//! println!("fw {fw_rev:#x}, page at IOVA {:#x}", page.iova());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Tested by unit tests (sysfs checks against a fake tree, the IOVA allocator, pagemap
//! decoding, the DMA allocator against a fake IOMMU) and through real kernel VFIO in a QEMU
//! Linux guest against the emulated NIC (`qemu-tests/linux-guest`); never on a real ConnectX.
//! See README.md.

mod attach;
mod dma;
mod error;
mod iova;
mod irq;
pub mod pagemap;
mod pci;
mod sys;

pub use attach::{AttachOptions, Attached, VfioBar, attach, is_vfio_driver};
pub use dma::{
    DEFAULT_BLOCK_SIZE, DEFAULT_IOVA_BASE, DEFAULT_IOVA_SIZE, DmaMapper, DmaOptions, DmaStats,
    HugePages, IovaPolicy, VfioDma, VfioDmaError,
};
pub use error::{AttachError, Stage};
pub use iova::{RangeAllocator, RangeError};
pub use irq::{MsixError, VfioInterrupts};
pub use pci::{
    PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PCI_DEVICE_ID, PCI_VENDOR_ID, PciAddress,
    PciAddressError,
};
pub use sys::HUGE_PAGE_SIZE;

/// Re-exported so users need not depend on `vfio-ioctls` themselves for the device and
/// container types that [`Attached`] hands out.
pub use vfio_ioctls;
