//! An emulated NIC on the UDP fabric, in real time: the attachment for NICs in different
//! processes.
//!
//! Where a [`World`](crate::World) is a discrete-event simulation that the drivers' poll loops
//! drive, a [`UdpNic`] runs like hardware: its port is a UDP socket on a loopback address
//! ([`UdpFabric`]), its device runs on a poller thread of its own ([`spawn_poller`]: frames
//! from the socket, transport timers), and time is the real monotonic clock. The driver's
//! [`Platform`] is therefore what it would be on a real machine: [`RealTime::relax`] is a spin
//! hint and [`RealTime::now_ns`] the monotonic clock. Register accesses are still trapped
//! ([`EmuRegs`]): a doorbell runs the send queue inline, under the device lock that the
//! poller thread takes for each poll.
//!
//! Every NIC of one test uses the same UDP port number on its own 127.0.0.x address; pick a
//! port number no other test uses, so tests can run in parallel.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use nic_testbed::udp::UdpNic;
//!
//! let nic = UdpNic::new(Ipv4Addr::new(127, 0, 0, 30), 47_912, Default::default()).unwrap();
//! assert_eq!(nic.device().port_addr(), Some(nic.ip()));
//! let dev = nic.probe(Default::default()).unwrap();
//! dev.shutdown().unwrap();
//! assert_eq!(nic.live(), Default::default());
//!
//! // Test traffic never leaves the machine.
//! assert!(UdpNic::new(Ipv4Addr::new(10, 0, 0, 1), 47_912, Default::default()).is_err());
//! ```

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use nic_emulator::roce_wire::fabric::{FabricError, UdpFabric};
use nic_emulator::{Device, Poller, Profile, spawn_poller};
use nic_hal::{DmaAllocator, HeapDma, Interrupts, Platform};

use crate::{EmuRegs, IommuView, IrqLines, lock};

/// Real time for a driver whose device runs on its own thread.
///
/// `relax` is a spin hint (the device makes progress on its poller thread, not in the
/// driver's poll loops); `now_ns` is monotonic time since the NIC was created, the same clock
/// the device's transport timers run on. A NIC's platform also carries its MSI-X vectors
/// ([`IrqLines`]), so the driver can sleep until the device raises one.
#[derive(Clone, Debug)]
pub struct RealTime {
    epoch: Instant,
    irq: Option<Arc<IrqLines>>,
}

impl RealTime {
    /// A clock whose zero is now, without interrupts.
    pub fn new() -> RealTime {
        RealTime {
            epoch: Instant::now(),
            irq: None,
        }
    }

    /// The same clock, delivering the interrupts of `irq`.
    pub fn with_interrupts(self, irq: Arc<IrqLines>) -> RealTime {
        RealTime {
            irq: Some(irq),
            ..self
        }
    }
}

impl Default for RealTime {
    fn default() -> Self {
        Self::new()
    }
}

impl Platform for RealTime {
    fn relax(&self) {
        std::hint::spin_loop();
    }
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    fn interrupts(&self) -> Option<&dyn Interrupts> {
        self.irq.as_deref().map(|i| i as &dyn Interrupts)
    }
}

/// The connection manager's host services are the driver's.
impl cm::Platform for RealTime {
    fn relax(&self) {
        Platform::relax(self)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(self)
    }
    fn entropy(&self) -> u64 {
        crate::os_entropy()
    }
}

/// Address resolution on the UDP fabric, which has no ARP: every NIC is at a 127.0.0.0/8
/// address with the MAC [`UdpResolver::mac_for`] derives from it; anything else has no
/// route (EHOSTUNREACH).
#[derive(Clone, Copy, Debug, Default)]
pub struct UdpResolver;

impl UdpResolver {
    /// The MAC of the NIC at `ip` by the fabric's rule: `02:00:` and the address.
    pub fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
        let o = ip.octets();
        [0x02, 0x00, o[0], o[1], o[2], o[3]]
    }
}

impl cm::NeighborResolver for UdpResolver {
    fn resolve_neighbor(&self, ip: Ipv4Addr) -> Result<Option<cm::Neighbor>, cm::Error> {
        if ip.is_loopback() {
            Ok(Some(cm::Neighbor {
                mac: Self::mac_for(ip),
            }))
        } else {
            Err(cm::Error::HostUnreachable)
        }
    }
}

/// The driver type as attached to a [`UdpNic`].
pub type UdpDevice = mlx5::Device<EmuRegs, RealTime>;

/// One emulated NIC on a [`UdpFabric`] port, with its host memory and a device poller thread.
///
/// The poller is stopped (and joined) when the NIC is dropped; shut the driver down first.
pub struct UdpNic {
    /// The device model (lock it to reach counters and logs; the poller thread takes the same
    /// lock for each poll).
    pub dev: Arc<Mutex<Device>>,
    /// Host DMA memory, which is also the device's IOMMU.
    pub dma: Arc<HeapDma>,
    ip: Ipv4Addr,
    udp_port: u16,
    clock: RealTime,
    irq: Arc<IrqLines>,
    poller: Option<Poller>,
}

impl UdpNic {
    /// A NIC built from `profile` whose port is a UDP socket bound to `ip:udp_port` (`ip` must
    /// be in 127.0.0.0/8), with the device polled on a thread of its own.
    ///
    /// The profile's `ipv4` is set to `ip`. Fails if the address is not loopback or is
    /// already bound.
    pub fn new(ip: Ipv4Addr, udp_port: u16, profile: Profile) -> Result<UdpNic, FabricError> {
        let port = UdpFabric::new(udp_port).bind(ip)?;
        let dma = HeapDma::new(0x1_0000_0000);
        let mut dev = Device::new(
            Profile {
                ipv4: Some(ip),
                ..profile
            },
            Arc::new(IommuView(dma.clone())),
        );
        let irq = IrqLines::new(dev.profile().msix_vectors);
        dev.set_interrupt_sink(Some(irq.sink()));
        let clock = RealTime::new().with_interrupts(irq.clone());
        let c = clock.clone();
        dev.set_clock(Arc::new(move || c.now_ns()));
        dev.attach(Box::new(port));
        let dev = Arc::new(Mutex::new(dev));
        let poller = spawn_poller(dev.clone());
        Ok(UdpNic {
            dev,
            dma,
            ip,
            udp_port,
            clock,
            irq,
            poller: Some(poller),
        })
    }

    /// The NIC's port address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The UDP port number of the fabric.
    pub fn udp_port(&self) -> u16 {
        self.udp_port
    }

    /// Locks the device model.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// The register backend.
    pub fn regs(&self) -> EmuRegs {
        EmuRegs(self.dev.clone())
    }

    /// The platform backend (real time; the device's clock too).
    pub fn platform(&self) -> RealTime {
        self.clock.clone()
    }

    /// The NIC's MSI-X vectors.
    pub fn interrupts(&self) -> &Arc<IrqLines> {
        &self.irq
    }

    /// The DMA allocator handed to the driver.
    pub fn allocator(&self) -> Arc<dyn DmaAllocator> {
        self.dma.clone()
    }

    /// Runs the driver's bring-up against this device.
    pub fn probe(&self, config: mlx5::Config) -> Result<UdpDevice, mlx5::Error> {
        mlx5::Device::probe(self.regs(), self.allocator(), self.platform(), config)
    }

    /// Whether the poller thread is running (false after it died with a panic).
    pub fn poller_running(&self) -> bool {
        self.poller.as_ref().is_some_and(Poller::is_running)
    }

    /// Stops the poller thread and waits for it; the device then makes progress only through
    /// trapped register accesses. Idempotent.
    pub fn stop_poller(&mut self) {
        if let Some(p) = self.poller.take() {
            p.stop();
        }
    }

    /// The device's live-object counters.
    pub fn live(&self) -> nic_emulator::Live {
        self.device().live()
    }
}

impl Drop for UdpNic {
    fn drop(&mut self) {
        self.stop_poller();
    }
}
