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
//! - [`EmuPlatform`] implements [`Platform`]: `relax` lets every device of the test's [`World`]
//!   poll and moves the world's virtual clock when all are idle; `now_ns` is that clock.
//!
//! Several NICs share a [`World`]: an in-process RoCEv2 fabric (deterministic, with seeded
//! faults) and one clock.
//!
//! The emulated AWS EFA ([`nic_emulator::efa::Device`]) attaches the same way for the EFA
//! driver: see [`efa`] ([`efa::EfaTestbed`]).
//!
//! NICs in different processes meet on the UDP fabric instead ([`udp`]): a [`UdpNic`] has a
//! socket on a 127.0.0.x address as its port, runs its device on a poller thread and lives in
//! real time (`relax` is a spin hint, `now_ns` the monotonic clock). The `rc-peer` binary is
//! one end of an RC connection between two such processes.
//!
//! ```
//! use nic_testbed::Testbed;
//! let tb = Testbed::new(Default::default());
//! let dev = tb.probe(Default::default()).unwrap();
//! assert_eq!(dev.fw_version(), nic_emulator::Profile::default().fw_rev);
//! dev.shutdown().unwrap();
//! assert_eq!(tb.live(), Default::default());
//! ```

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use nic_emulator::roce_wire::fabric::InProcessFabric;
use nic_emulator::{AddressSpace, Device, DmaFault, Profile};
use nic_hal::{DmaAllocator, HeapDma, Platform, RegisterIo};

pub mod irq;
pub use irq::IrqLines;
pub mod udp;
pub use udp::{RealTime, UdpDevice, UdpNic};
pub mod efa;
pub mod eth;

/// 64 bits from the OS's random source (`/dev/urandom`; where that cannot be read, the
/// randomly keyed hasher std seeds from the OS): the connection manager's entropy.
pub fn os_entropy() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
pub use eth::{EthDevice, EthLinkNic, EthNic, EthNicError, EthResolver, YieldingTime};

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

    fn readable(&self, iova: u64, len: u64) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: usize::try_from(len).unwrap_or(usize::MAX),
            write: false,
        };
        if len == 0 {
            return Ok(());
        }
        let n = usize::try_from(len).map_err(|_| fault)?;
        self.0.translate(iova, n).map(|_| ()).ok_or(fault)
    }

    fn write_with(
        &self,
        iova: u64,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<bool, DmaFault> {
        if len == 0 {
            return Ok(true);
        }
        let fault = DmaFault {
            iova,
            len,
            write: true,
        };
        let p = self.0.translate(iova, len).ok_or(fault)?;
        // SAFETY: `translate` checked that `iova..iova+len` lies inside one live allocation
        // the driver handed to the device (as for `write`); the device is the only one to
        // write there during its DMA, and `fill` gets the range for the length of the call
        // only (it reads another address space, never this one's buffers).
        let dst = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) };
        Ok(fill(0, dst))
    }
}

/// BAR0 of the emulated device, as the driver's [`RegisterIo`].
#[derive(Clone)]
pub struct EmuRegs(pub Arc<Mutex<Device>>);

pub(crate) fn lock<T>(d: &Mutex<T>) -> MutexGuard<'_, T> {
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

/// Every emulated NIC of a test, the fabric between them, and one virtual clock.
///
/// The world is a discrete-event simulation driven by the drivers' poll loops: each
/// [`Platform::relax`] polls every device once; when none of them made progress, the clock
/// jumps to the next thing that will happen (a frame due on the fabric, a device timer), or by
/// [`IDLE_STEP_NS`] when nothing is scheduled (so that driver timeouts still expire). Runs are
/// therefore reproducible from the fabric's seed, and a retransmission timeout of seconds
/// costs no wall time.
pub struct World {
    fabric: InProcessFabric,
    devices: Mutex<Vec<Arc<Mutex<Device>>>>,
    /// The emulated EFAs attached to the fabric (`efa` module).
    pub(crate) efas: Mutex<Vec<Arc<Mutex<nic_emulator::efa::Device>>>>,
}

/// How far the clock moves when nothing at all is scheduled.
pub const IDLE_STEP_NS: u64 = 1_000_000;

impl World {
    /// A world whose fabric faults are drawn from `seed`.
    pub fn new(seed: u64) -> Arc<World> {
        Arc::new(World {
            fabric: InProcessFabric::new(seed),
            devices: Mutex::new(Vec::new()),
            efas: Mutex::new(Vec::new()),
        })
    }

    /// The fabric (fault knobs, cuts, statistics).
    pub fn fabric(&self) -> &InProcessFabric {
        &self.fabric
    }

    /// Adds a NIC with port address `ip` (a 127.0.0.0/8 address by convention).
    pub fn nic(self: &Arc<Self>, ip: Ipv4Addr, profile: Profile) -> Testbed {
        let dma = HeapDma::new(0x1_0000_0000);
        let mut dev = Device::new(
            Profile {
                ipv4: Some(ip),
                ..profile
            },
            Arc::new(IommuView(dma.clone())),
        );
        let fab = self.fabric.clone();
        dev.set_clock(Arc::new(move || fab.now_ns()));
        dev.attach_to(&self.fabric, ip)
            .expect("attach the NIC to the in-process fabric");
        let dev = Arc::new(Mutex::new(dev));
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dev.clone());
        Testbed {
            dev,
            dma,
            world: self.clone(),
            ip,
        }
    }

    /// Polls every device once; true if any made progress.
    pub fn step(&self) -> bool {
        // Polled under the list's lock (no copy of the list per step): a device's poll never
        // reaches back into the world, and `nic` only waits for the step to end.
        let devs = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let mut progress = false;
        for d in devs.iter() {
            progress |= lock(d).poll();
        }
        drop(devs);
        let efas = self.efas.lock().unwrap_or_else(|e| e.into_inner());
        for d in efas.iter() {
            progress |= lock(d).poll();
        }
        progress
    }

    /// One relax: poll everything, and move the clock if the world is idle.
    pub fn relax(&self) {
        if self.step() {
            return;
        }
        let devs = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.fabric.now_ns();
        let next = devs
            .iter()
            .filter_map(|d| lock(d).next_deadline())
            .chain(self.fabric.next_event_ns())
            .min();
        drop(devs);
        let efas = self.efas.lock().unwrap_or_else(|e| e.into_inner());
        let next = efas
            .iter()
            .filter_map(|d| lock(d).next_deadline())
            .chain(next)
            .min();
        drop(efas);
        match next {
            Some(t) if t > now => {
                self.fabric.advance_to(t);
            }
            Some(_) => {
                self.fabric.advance(1);
            }
            None => {
                self.fabric.advance(IDLE_STEP_NS);
            }
        }
    }

    /// The virtual time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.fabric.now_ns()
    }
}

/// Relax hook and clock for a driver attached to an emulated device: both belong to the
/// device's [`World`]; with interrupt lines (the emulated EFA's), the device's MSI-X vectors.
#[derive(Clone)]
pub struct EmuPlatform {
    world: Arc<World>,
    irq: Option<Arc<irq::IrqLines>>,
}

impl Platform for EmuPlatform {
    fn relax(&self) {
        self.world.relax();
    }
    fn now_ns(&self) -> u64 {
        self.world.now_ns()
    }
    fn interrupts(&self) -> Option<&dyn nic_hal::Interrupts> {
        self.irq.as_deref().map(|i| i as &dyn nic_hal::Interrupts)
    }
}

/// The connection manager's host services are the driver's.
impl cm::Platform for EmuPlatform {
    fn relax(&self) {
        Platform::relax(self)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(self)
    }
    fn entropy(&self) -> u64 {
        os_entropy()
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
    world: Arc<World>,
    ip: Ipv4Addr,
}

impl Testbed {
    /// A device built from `profile`, alone in a world of its own (port 127.0.0.1).
    pub fn new(profile: Profile) -> Testbed {
        World::new(0).nic(Ipv4Addr::new(127, 0, 0, 1), profile)
    }

    /// The world this NIC lives in.
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// The NIC's port address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
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
            world: self.world.clone(),
            irq: None,
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

    /// The device's live-object counters once `dev`, the driver of this NIC, has served the
    /// firmware's page requests: a destroy offers its object's pages back with a
    /// PAGE_REQUEST event, which the driver serves only when it next looks at its events (as
    /// Linux does from a work queue), so until then [`live`](Self::live)`().fw_pages` still
    /// counts them. Other events stay queued for the driver's callers.
    ///
    /// # Panics
    ///
    /// If serving fails, if requests keep coming, if a create still waits for pages, or if
    /// the driver's and the device's counts of the firmware's pages then differ.
    pub fn live_settled(&self, dev: &EmuDevice) -> nic_emulator::Live {
        for _ in 0..16 {
            dev.serve_page_requests_now()
                .expect("serving the firmware's page requests");
            if dev.page_requests_pending() == 0 {
                break;
            }
        }
        assert_eq!(dev.page_requests_pending(), 0, "page requests keep coming");
        let live = self.live();
        assert_eq!(
            self.device().waiting_for_pages(),
            Vec::<u8>::new(),
            "creates wait for pages"
        );
        assert_eq!(
            dev.fw_pages() as u64,
            u64::from(live.fw_pages),
            "the driver and the device count the firmware's pages differently"
        );
        live
    }
}
