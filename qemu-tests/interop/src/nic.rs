//! An emulated NIC on the Ethernet fabric, in real time, with the mlx5 driver and our
//! connection manager on top: the host end of the interop tests.
//!
//! The device runs on a poller thread (like [`nic_testbed::UdpNic`]); its port is an
//! [`EthPort`] on an [`EthLink`]. [`HostNic::start`] probes the driver, programs GID 0 with
//! the port's IPv4 address, adds the device to a [`Cm`] and starts a thread that copies the
//! neighbours the port learns by ARP into the CM's neighbour table (the CM resolves addresses
//! from that table; a passive side needs the requester's entry before the REQ arrives) and
//! drives the CM's progress engine, so that a REQ to a port nobody listens on is rejected
//! even while no CM call is blocking.

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
use nic_testbed::{EmuRegs, IommuView};
use verbs::Gid;

/// Real time for a driver whose device runs on a thread of its own, with a relax hook that
/// yields the CPU briefly: the host shares two cores with a TCG guest, and the CM's and the
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

/// The driver type of a [`HostNic`].
pub type HostDevice = mlx5::Device<EmuRegs, YieldingTime>;

/// Why a host NIC could not be set up.
#[derive(Debug)]
pub enum NicError {
    /// The Ethernet link (sockets).
    Fabric(FabricError),
    /// Driver bring-up or a driver command.
    Driver(String),
    /// The connection manager refused the device.
    Cm(cm::Error),
}

impl std::fmt::Display for NicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fabric(e) => write!(f, "fabric: {e}"),
            Self::Driver(e) => write!(f, "driver: {e}"),
            Self::Cm(e) => write!(f, "cm: {e:?}"),
        }
    }
}

impl std::error::Error for NicError {}

/// An emulated NIC on an Ethernet link, driven by the mlx5 driver, in a [`Cm`].
pub struct HostNic {
    /// The device model.
    pub dev: Arc<Mutex<Device>>,
    /// The connection manager the device was added to.
    pub cm: Cm<HostDevice>,
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

impl HostNic {
    /// Binds `link` at `ip`, builds a device with MAC `link.mac`, probes the driver, sets GID
    /// 0 to `ip` and adds the device to a new [`Cm`] configured by `cfg`.
    pub fn start(link: EthLink, ip: Ipv4Addr, cfg: CmConfig) -> Result<HostNic, NicError> {
        let port = link.bind(ip).map_err(NicError::Fabric)?;
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
        let poller = spawn_poller(dev.clone());
        let allocator: Arc<dyn DmaAllocator> = dma;
        let driver = mlx5::Device::probe(
            EmuRegs(dev.clone()),
            allocator.clone(),
            clock,
            mlx5::Config::default(),
        )
        .map_err(|e| NicError::Driver(format!("probe: {e:?}")))?;
        let mac = driver
            .mac()
            .map_err(|e| NicError::Driver(format!("mac: {e:?}")))?;
        driver
            .set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
            .map_err(|e| NicError::Driver(format!("set gid: {e:?}")))?;
        let dma = driver.dma().clone();
        let cm = Cm::new(clock, cfg);
        let dev_id = cm
            .add_device(driver, dma.clone(), mac)
            .map_err(|(e, _)| NicError::Cm(e))?;
        let mut nic = HostNic {
            dev,
            cm,
            dev_id,
            dma,
            eth,
            ip,
            poller: Some(poller),
            sync_stop: Arc::new(AtomicBool::new(false)),
            sync: None,
        };
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
            .name("interop-neighbors".into())
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

    /// The Ethernet port (neighbour cache, ARP, counters).
    pub fn eth(&self) -> &EthHandle {
        &self.eth
    }

    /// Resolves `ip` by ARP (up to `timeout`) and gives the CM the entry.
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
    pub fn shutdown(self) -> Result<nic_emulator::Live, NicError> {
        let driver = self.cm.remove_device(self.dev_id).map_err(NicError::Cm)?;
        driver
            .shutdown()
            .map_err(|e| NicError::Driver(format!("shutdown: {e:?}")))?;
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

impl Drop for HostNic {
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
