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
//! blocking.
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

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cm::{Cm, CmConfig, DeviceId, Neighbor};
use nic_emulator::roce_wire::eth::Mac;
use nic_emulator::roce_wire::fabric::{EthHandle, EthLink, FabricError};
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

/// The port's ARP as the CM's address resolution: the cached MAC, else an ARP request (the
/// port retries it) and "not yet".
struct EthResolver(EthHandle);

impl cm::NeighborResolver for EthResolver {
    fn resolve_neighbor(&self, ip: Ipv4Addr) -> Result<Option<Neighbor>, cm::Error> {
        Ok(self.0.solicit(ip).map(|mac| Neighbor { mac }))
    }
}

/// The driver type of an [`EthNic`].
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
    eth: EthHandle,
    ip: Ipv4Addr,
    poller: Option<Poller>,
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
        let port = link.bind(ip).map_err(EthNicError::Fabric)?;
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
        let mut poller = Some(spawn_poller(dev.clone()));
        let stop_poller = |p: &mut Option<Poller>| {
            if let Some(p) = p.take() {
                p.stop();
            }
        };
        let allocator: Arc<dyn DmaAllocator> = dma;
        let driver = match mlx5::Device::probe(
            EmuRegs(dev.clone()),
            allocator,
            clock,
            mlx5::Config::default(),
        ) {
            Ok(d) => d,
            Err(e) => {
                stop_poller(&mut poller);
                return Err(EthNicError::Driver(format!("probe: {e:?}")));
            }
        };
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
                stop_poller(&mut poller);
                return Err(EthNicError::Driver(e));
            }
        };
        let dma = driver.dma().clone();
        let cm = Cm::new(clock, cfg);
        let dev_id = match cm.add_device(driver, mac) {
            Ok(id) => id,
            Err((e, driver)) => {
                let _ = driver.shutdown();
                stop_poller(&mut poller);
                return Err(EthNicError::Cm(e));
            }
        };
        let mut nic = EthNic {
            dev,
            cm,
            dev_id,
            dma,
            eth,
            ip,
            poller,
            sync_stop: Arc::new(AtomicBool::new(false)),
            sync: None,
        };
        let resolver: Arc<dyn cm::NeighborResolver> = Arc::new(EthResolver(nic.eth.clone()));
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
        let eth = self.eth.clone();
        let cm = self.cm.clone();
        let stop = self.sync_stop.clone();
        let me = self.ip;
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
        self.ip
    }

    /// The port's MAC.
    pub fn mac(&self) -> Mac {
        self.eth.mac()
    }

    /// The Ethernet port (neighbour cache, ARP, counters, capture).
    pub fn eth(&self) -> &EthHandle {
        &self.eth
    }

    /// Resolves `ip` by ARP (up to `timeout`) and gives the CM the entry; `None` when nobody
    /// answered.
    pub fn resolve(&self, ip: Ipv4Addr, timeout: Duration) -> Result<Option<Mac>, FabricError> {
        let mac = self.eth.resolve(ip, timeout)?;
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
        if let Some(p) = self.poller.take() {
            p.stop();
        }
    }
}
