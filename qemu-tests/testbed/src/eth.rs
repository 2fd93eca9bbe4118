//! An emulated NIC on the Ethernet fabric, in real time, with the mlx5 driver and a connection
//! manager on top: the host end of a link in the format of QEMU's socket netdev
//! (`-netdev socket,udp=127.0.0.1:A,localaddr=127.0.0.1:B`), used by `tools/rping` and the
//! interop tests against Linux soft-RoCE.
//!
//! The device runs on a poller thread (like [`UdpNic`](crate::UdpNic)); its port is an
//! [`EthPort`](nic_emulator::roce_wire::fabric::EthPort) on an [`EthLink`]: a MAC and an IPv4
//! address on the virtual wire (ARP, ICMP echo, filtering), two 127.0.0.1 UDP sockets on the
//! host. [`EthNic::start`] probes the driver, programs GID 0 with the port's IPv4 address,
//! adds the device to a [`Cm`] with the port's ARP as its address resolution
//! ([`cm::NeighborResolver`]: `resolve_addr` sends ARP requests for an unknown destination)
//! and starts a thread that copies the neighbours the port learns by ARP into the CM's
//! neighbour table (a passive side needs the requester's entry before the REQ arrives) and
//! drives the CM's progress engine, so that a REQ to a port nobody listens on is rejected even while no CM call is
//! blocking. [`EthLinkNic`] is the NIC without the driver and the CM (for a caller with a
//! connection manager of its own, which takes [`EthResolver`] as its address resolution);
//! [`loopback_link`] is the host end of a link to a QEMU guest.
//!
//! ```
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use std::time::Duration;
//! use nic_emulator::roce_wire::fabric::EthLink;
//! use nic_testbed::eth::EthNic;
//!
//! let sa = |p| SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
//! let (a_ip, b_ip) = (Ipv4Addr::new(10, 78, 0, 1), Ipv4Addr::new(10, 78, 0, 2));
//! let b_mac = [0x02, 0, 0, 0x78, 0, 2];
//! let a = EthNic::start(EthLink::new(sa(48092), sa(48093), [0x02, 0, 0, 0x78, 0, 1]), a_ip,
//!     Default::default()).unwrap();
//! let b = EthNic::start(EthLink::new(sa(48093), sa(48092), b_mac), b_ip, Default::default())
//!     .unwrap();
//! assert_eq!(a.resolve(b_ip, Duration::from_secs(2)).unwrap(), Some(b_mac));
//! assert_eq!(a.shutdown().unwrap(), Default::default());
//! assert_eq!(b.shutdown().unwrap(), Default::default());
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cm::{Cm, CmConfig, DeviceId, Neighbor};
use nic_emulator::roce_wire::eth::Mac;
use nic_emulator::roce_wire::fabric::{ArpConfig, EthHandle, EthLink, FabricError};
use nic_emulator::{Device, Poller, Profile, spawn_poller};
use nic_hal::{DmaAllocator, HeapDma, Platform};
use verbs::Gid;

use crate::{EmuRegs, IommuView};

/// Real time for a driver whose device runs on a thread of its own, with a relax hook that
/// yields the CPU briefly: the host may share its cores with a TCG guest, and the CM's and the
/// driver's poll loops must not starve it.
#[derive(Clone, Copy, Debug)]
pub struct YieldingTime {
    epoch: Instant,
}

impl YieldingTime {
    /// A clock whose zero is now.
    pub fn new() -> YieldingTime {
        YieldingTime {
            epoch: Instant::now(),
        }
    }
}

impl Default for YieldingTime {
    fn default() -> Self {
        Self::new()
    }
}

impl Platform for YieldingTime {
    fn relax(&self) {
        std::thread::sleep(Duration::from_micros(50));
    }
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The connection manager's host services are the driver's.
impl cm::Platform for YieldingTime {
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

/// How long our ARP replies wait on a link to a Linux host: Linux's rdma_cm can miss a reply
/// that comes back before its resolve request is queued, and then waits 2 s.
pub const LINUX_ARP_REPLY_DELAY: Duration = Duration::from_millis(20);

/// The host end of a link in QEMU's socket-netdev format: frames from 127.0.0.1:`local` to
/// 127.0.0.1:`remote` (QEMU: `-netdev socket,udp=127.0.0.1:local,localaddr=127.0.0.1:remote`),
/// MAC `mac`, ARP answered after [`LINUX_ARP_REPLY_DELAY`].
pub fn loopback_link(local: u16, remote: u16, mac: Mac) -> EthLink {
    let sa = |p| SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
    let mut link = EthLink::new(sa(local), sa(remote), mac);
    link.arp = ArpConfig {
        reply_delay: LINUX_ARP_REPLY_DELAY,
        ..ArpConfig::default()
    };
    link
}

/// The port's ARP as a connection manager's address resolution
/// ([`cm::NeighborResolver`]): the cached MAC, else an ARP request (the port retries it) and
/// "not yet".
#[derive(Clone)]
pub struct EthResolver(pub EthHandle);

impl cm::NeighborResolver for EthResolver {
    fn resolve_neighbor(&self, ip: Ipv4Addr) -> Result<Option<Neighbor>, cm::Error> {
        Ok(self.0.solicit(ip).map(|mac| Neighbor { mac }))
    }
}

/// The driver type of an [`EthNic`] (and of an [`EthLinkNic`]).
pub type EthDevice = mlx5::Device<EmuRegs, YieldingTime>;

/// Why an [`EthNic`] could not be set up.
#[derive(Debug)]
pub enum EthNicError {
    /// The Ethernet link (sockets, addresses).
    Fabric(FabricError),
    /// Driver bring-up or a driver command.
    Driver(String),
    /// The connection manager refused the device.
    Cm(cm::Error),
}

impl std::fmt::Display for EthNicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fabric(e) => write!(f, "fabric: {e}"),
            Self::Driver(e) => write!(f, "driver: {e}"),
            Self::Cm(e) => write!(f, "cm: {e:?}"),
        }
    }
}

impl std::error::Error for EthNicError {}

/// An emulated NIC on an Ethernet link, with its host memory and its device on a poller
/// thread, before any driver: what [`EthNic::start`] builds on, and what a caller with a
/// connection manager of its own opens (the C libraries' stack, through `device-open`).
/// The counterpart of [`UdpNic`](crate::UdpNic) on the Ethernet fabric.
///
/// Dropping it stops the poller: shut the driver down first.
pub struct EthLinkNic {
    /// The device model.
    pub dev: Arc<Mutex<Device>>,
    /// The NIC's host memory, which is also its IOMMU.
    pub dma: Arc<HeapDma>,
    eth: EthHandle,
    ip: Ipv4Addr,
    clock: YieldingTime,
    poller: Option<Poller>,
}

impl EthLinkNic {
    /// Binds `link` at `ip` and builds a device with MAC `link.mac` whose port is the link,
    /// polled on a thread of its own.
    ///
    /// Errors: the link's sockets are not on 127.0.0.0/8, the MAC is multicast or zero, or
    /// the local socket is taken.
    pub fn new(link: EthLink, ip: Ipv4Addr) -> Result<EthLinkNic, FabricError> {
        let port = link.bind(ip)?;
        let eth = port.handle();
        let dma = HeapDma::new(0x1_0000_0000);
        let clock = YieldingTime::new();
        let mut dev = Device::new(
            Profile {
                ipv4: Some(ip),
                mac: link.mac,
                ..Profile::default()
            },
            Arc::new(IommuView(dma.clone())),
        );
        dev.set_clock(Arc::new(move || clock.now_ns()));
        dev.attach(Box::new(port));
        let dev = Arc::new(Mutex::new(dev));
        let poller = Some(spawn_poller(dev.clone()));
        Ok(EthLinkNic {
            dev,
            dma,
            eth,
            ip,
            clock,
            poller,
        })
    }

    /// Attaches the mlx5 driver (the device's clock is the driver's).
    pub fn probe(&self, config: mlx5::Config) -> Result<EthDevice, mlx5::Error> {
        let allocator: Arc<dyn DmaAllocator> = self.dma.clone();
        mlx5::Device::probe(EmuRegs(self.dev.clone()), allocator, self.clock, config)
    }

    /// The clock and relax hook of waits on this NIC (the driver's, a connection manager's).
    pub fn platform(&self) -> YieldingTime {
        self.clock
    }

    /// The port's IPv4 address on the virtual wire.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The Ethernet port (neighbour cache, ARP, counters, capture).
    pub fn eth(&self) -> &EthHandle {
        &self.eth
    }

    /// The port's ARP as a connection manager's address resolution.
    pub fn resolver(&self) -> EthResolver {
        EthResolver(self.eth.clone())
    }

    /// The device model, locked.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the device's poller (after the driver's shutdown; dropping does it too).
    pub fn stop_poller(&mut self) {
        if let Some(p) = self.poller.take() {
            p.stop();
        }
    }
}

impl Drop for EthLinkNic {
    fn drop(&mut self) {
        self.stop_poller();
    }
}

/// An emulated NIC on an Ethernet link, driven by the mlx5 driver, in a [`Cm`].
///
/// Dropping it stops the neighbour thread and the poller; call [`shutdown`](Self::shutdown)
/// first for an orderly driver teardown.
pub struct EthNic {
    /// The device model.
    pub dev: Arc<Mutex<Device>>,
    /// The connection manager the device was added to.
    pub cm: Cm<EthDevice>,
    /// The device's id in `cm`.
    pub dev_id: DeviceId,
    /// The driver's DMA allocator.
    pub dma: Arc<dyn DmaAllocator>,
    nic: EthLinkNic,
    sync_stop: Arc<AtomicBool>,
    sync: Option<JoinHandle<()>>,
}

impl EthNic {
    /// Binds `link` at `ip`, builds a device with MAC `link.mac`, probes the driver, sets GID
    /// 0 to `ip` and adds the device to a new [`Cm`] configured by `cfg`.
    ///
    /// Errors: [`EthNicError::Fabric`] when the link's sockets are not on 127.0.0.0/8, the
    /// MAC is multicast or zero, or the local socket is taken; driver and CM failures.
    pub fn start(link: EthLink, ip: Ipv4Addr, cfg: CmConfig) -> Result<EthNic, EthNicError> {
        // dropping `nic` on an error stops its poller
        let nic = EthLinkNic::new(link, ip).map_err(EthNicError::Fabric)?;
        let driver = nic
            .probe(mlx5::Config::default())
            .map_err(|e| EthNicError::Driver(format!("probe: {e:?}")))?;
        let gid = driver
            .mac()
            .map_err(|e| format!("mac: {e:?}"))
            .and_then(|mac| {
                driver
                    .set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
                    .map(|()| mac)
                    .map_err(|e| format!("set gid: {e:?}"))
            });
        let mac = match gid {
            Ok(m) => m,
            Err(e) => {
                let _ = driver.shutdown();
                return Err(EthNicError::Driver(e));
            }
        };
        let dma = driver.dma().clone();
        let cm = Cm::new(nic.platform(), cfg);
        let dev_id = match cm.add_device(driver, mac) {
            Ok(id) => id,
            Err((e, driver)) => {
                let _ = driver.shutdown();
                return Err(EthNicError::Cm(e));
            }
        };
        let mut nic = EthNic {
            dev: nic.dev.clone(),
            cm,
            dev_id,
            dma,
            nic,
            sync_stop: Arc::new(AtomicBool::new(false)),
            sync: None,
        };
        let resolver: Arc<dyn cm::NeighborResolver> = Arc::new(nic.nic.resolver());
        nic.cm
            .set_neighbor_resolver(nic.dev_id, Some(resolver))
            .map_err(EthNicError::Cm)?;
        nic.start_neighbor_sync();
        Ok(nic)
    }

    /// Copies every neighbour the port learns into the CM's table, and drives the CM's
    /// progress engine (so that MADs are answered while no CM call is blocking), every
    /// millisecond.
    fn start_neighbor_sync(&mut self) {
        let eth = self.nic.eth.clone();
        let cm = self.cm.clone();
        let stop = self.sync_stop.clone();
        let me = self.nic.ip;
        self.sync = std::thread::Builder::new()
            .name("eth-nic-neighbors".into())
            .spawn(move || {
                let mut known: Vec<(Ipv4Addr, Mac)> = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    for (ip, mac) in eth.neighbors() {
                        if ip != me && !known.contains(&(ip, mac)) {
                            cm.add_neighbor(ip, Neighbor { mac });
                            known.retain(|(i, _)| *i != ip);
                            known.push((ip, mac));
                        }
                    }
                    cm.progress();
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .ok();
    }

    /// The port's IPv4 address on the virtual wire.
    pub fn ip(&self) -> Ipv4Addr {
        self.nic.ip
    }

    /// The port's MAC.
    pub fn mac(&self) -> Mac {
        self.nic.eth.mac()
    }

    /// The Ethernet port (neighbour cache, ARP, counters, capture).
    pub fn eth(&self) -> &EthHandle {
        &self.nic.eth
    }

    /// Resolves `ip` by ARP (up to `timeout`) and gives the CM the entry; `None` when nobody
    /// answered.
    pub fn resolve(&self, ip: Ipv4Addr, timeout: Duration) -> Result<Option<Mac>, FabricError> {
        let mac = self.nic.eth.resolve(ip, timeout)?;
        if let Some(mac) = mac {
            self.cm.add_neighbor(ip, Neighbor { mac });
        }
        Ok(mac)
    }

    /// Takes the device out of the CM, shuts the driver down (teardown commands) and returns
    /// what the device still holds ([`nic_emulator::Live::default`] when nothing leaked).
    /// Fails while CM ids still use the device.
    pub fn shutdown(self) -> Result<nic_emulator::Live, EthNicError> {
        // the neighbour thread calls into the CM: stop it before the device leaves
        self.sync_stop.store(true, Ordering::Release);
        let driver = self
            .cm
            .remove_device(self.dev_id)
            .map_err(EthNicError::Cm)?;
        driver
            .shutdown()
            .map_err(|e| EthNicError::Driver(format!("shutdown: {e:?}")))?;
        let live = self.dev.lock().unwrap_or_else(|e| e.into_inner()).live();
        Ok(live)
    }

    /// The device's port counters.
    pub fn port_stats(&self) -> nic_emulator::PortStats {
        self.dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .port_stats()
    }
}

impl Drop for EthNic {
    fn drop(&mut self) {
        self.sync_stop.store(true, Ordering::Release);
        if let Some(h) = self.sync.take() {
            let _ = h.join();
        }
        // before the manager (and the driver in it) drops: the poller goes last
        self.nic.stop_poller();
    }
}
