//! Attaches the mlx5 driver to the in-process emulated NIC, and holds the integration tests.
//!
//! The emulated device ([`nic_emulator::Device`]) and the driver share no code beyond the
//! device contract (`firmware-interface`); this crate is the wiring between them, the
//! in-process counterpart of a PCI slot:
//! - [`EmuRegs`] implements [`RegisterIo`]: a register access becomes a trapped BAR access on the
//!   device, which runs whatever a doorbell triggers before the write returns (inline
//!   execution: one thread, deterministic);
//! - the driver's DMA memory comes from a [`HeapDma`], which is also the device's IOMMU
//!   ([`IommuView`]): the device reaches only buffers the driver allocated and still holds;
//! - [`EmuPlatform`] implements [`Platform`]: `relax` lets the device poll, `now_ns` is the
//!   host's monotonic clock.
//!
//! ```
//! use nic_testbed::Testbed;
//! let tb = Testbed::new(Default::default());
//! let dev = tb.probe(Default::default()).unwrap();
//! assert_eq!(dev.fw_version(), nic_emulator::Profile::default().fw_rev);
//! dev.shutdown().unwrap();
//! assert_eq!(tb.live(), Default::default());
//! ```

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use nic_emulator::{AddressSpace, Device, DmaFault, Profile};
use nic_hal::{DmaAllocator, HeapDma, Platform, RegisterIo};

/// The device's view of host memory: only what the driver's allocator has mapped.
pub struct IommuView(pub Arc<HeapDma>);

impl AddressSpace for IommuView {
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: buf.len(),
            write: false,
        };
        if buf.is_empty() {
            return Ok(());
        }
        let p = self.0.translate(iova, buf.len()).ok_or(fault)?;
        // SAFETY: `translate` checked that `iova..iova+len` lies inside one live allocation;
        // `buf` is device-model memory, disjoint from it.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: data.len(),
            write: true,
        };
        if data.is_empty() {
            return Ok(());
        }
        let p = self.0.translate(iova, data.len()).ok_or(fault)?;
        // SAFETY: as in `read`: the range is inside one live allocation the driver handed to
        // the device.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
        Ok(())
    }
}

/// BAR0 of the emulated device, as the driver's [`RegisterIo`].
#[derive(Clone)]
pub struct EmuRegs(pub Arc<Mutex<Device>>);

fn lock(d: &Mutex<Device>) -> MutexGuard<'_, Device> {
    // A panic while holding the lock is a test failure already; keep going for its report.
    d.lock().unwrap_or_else(|e| e.into_inner())
}

impl RegisterIo for EmuRegs {
    fn read32(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        lock(&self.0).mmio_read(offset, &mut b);
        u32::from_ne_bytes(b)
    }
    fn write32(&self, offset: usize, value: u32) {
        lock(&self.0).mmio_write(offset, &value.to_ne_bytes());
    }
    fn write64(&self, offset: usize, value: u64) {
        lock(&self.0).mmio_write(offset, &value.to_ne_bytes());
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        lock(&self.0).mmio_write(offset, data);
    }
}

/// Relax hook and clock for a driver attached to the emulated device.
#[derive(Clone)]
pub struct EmuPlatform {
    dev: Arc<Mutex<Device>>,
    start: Instant,
}

impl Platform for EmuPlatform {
    fn relax(&self) {
        lock(&self.dev).poll();
        std::hint::spin_loop();
    }
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// The driver type as attached here.
pub type EmuDevice = mlx5::Device<EmuRegs, EmuPlatform>;

/// One emulated NIC with its host memory, ready for a driver to probe.
pub struct Testbed {
    /// The device model (lock it to reach fault knobs, counters and logs).
    pub dev: Arc<Mutex<Device>>,
    /// Host DMA memory, which is also the device's IOMMU.
    pub dma: Arc<HeapDma>,
    start: Instant,
}

impl Testbed {
    /// A device built from `profile`, with a fresh DMA space.
    pub fn new(profile: Profile) -> Testbed {
        let dma = HeapDma::new(0x1_0000_0000);
        let dev = Device::new(profile, Arc::new(IommuView(dma.clone())));
        Testbed {
            dev: Arc::new(Mutex::new(dev)),
            dma,
            start: Instant::now(),
        }
    }

    /// Locks the device model.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// The register backend.
    pub fn regs(&self) -> EmuRegs {
        EmuRegs(self.dev.clone())
    }

    /// The platform backend.
    pub fn platform(&self) -> EmuPlatform {
        EmuPlatform {
            dev: self.dev.clone(),
            start: self.start,
        }
    }

    /// The DMA allocator handed to the driver.
    pub fn allocator(&self) -> Arc<dyn DmaAllocator> {
        self.dma.clone()
    }

    /// Runs the driver's bring-up against this device.
    pub fn probe(&self, config: mlx5::Config) -> Result<EmuDevice, mlx5::Error> {
        mlx5::Device::probe(self.regs(), self.allocator(), self.platform(), config)
    }

    /// The device's live-object counters.
    pub fn live(&self) -> nic_emulator::Live {
        self.device().live()
    }
}
