//! Opens a verbs [`Provider`] for the tools (`rperf`, `rping`) from a device spec, so that
//! their code is written once, generic over the provider, and compiled per device family.
//!
//! - [`Device`]: what the tools need of a provider beyond the verbs (its MAC for the RoCE
//!   path, its firmware version for banners, an orderly shutdown). Implemented for the mlx5
//!   driver and for the EFA driver, each over any register backend.
//! - [`Open`]: one way to get a device, ready for RoCE (probed, GID 0 set to its IPv4 address):
//!   [`VfioNic`] (a real ConnectX function through Linux VFIO), [`VfioEfa`] (an EFA function
//!   through VFIO), and with the `emulator` feature [`UdpEmu`] (an emulated NIC on the UDP
//!   fabric, real time, its own poller thread), [`EthEmu`] (the same on an Ethernet link in
//!   QEMU's socket-netdev format, with ARP) and [`InProcess`] (an emulated NIC in a
//!   `nic_testbed::World`, the embedded modes); the emulated EFA likewise: [`EfaUdpEmu`],
//!   [`EfaEthEmu`], [`EfaInProcess`].
//! - [`Family`] parses `--device` (`emu`, `efa`, `vfio:BDF`) and [`open_remote`] (the UDP
//!   fabric) or [`open_on`] (any `--fabric`) opens the family's device and hands it to a
//!   [`WithDevice`], whose `run` is generic over the device type: the hot loops inside are
//!   monomorphised, never behind `dyn`. Through VFIO the driver is picked by the function's
//!   PCI vendor and device id ([`VfioDriver`]).
//!
//! An EFA has no settable GID and no MAC of its own in the verbs sense: its GID is the device
//! address it reports (an emulated EFA's is the IPv4-mapped GID of its address, so "GID 0 set
//! to its IPv4 address" holds by construction, and a real EFA whose address is not that GID
//! is refused with a clear error), and its MAC is the one its node GUID encodes (EUI-64).
//!
//! - [`fabric`]: `--fabric udp:PORT | eth:LOCAL,REMOTE` and `--mac`, and the emulated NIC on
//!   an Ethernet link in QEMU's socket-netdev format (rping and the storage tools share it).
//!
//! A crate of its own (not a module of either tool) so that both tools share it, and so that
//! the emulator is an optional dependency here: built without `emulator`, this crate (and a
//! tool on top of it) links the mlx5 driver and VFIO only, and an `emu` spec is a clear "not
//! available" error instead of a build dependency.

pub mod fabric;

use std::net::Ipv4Addr;
use std::sync::Arc;

use nic_hal::{Platform, RegisterIo};
use verbs::{Gid, Provider};

/// A provider the tools can run on.
///
/// The device and its objects must cross threads: the tools run one QP, CQ and buffer per
/// thread on one device (and a connection manager shares them between its callers).
pub trait Device:
    Provider<
        Pd: Send + Sync,
        Mr: Send + Sync,
        Cq: Send + Sync,
        Qp: Send + Sync,
        Srq: Send + Sync,
        Ah: Send + Sync,
        CompChannel: Send + Sync,
    > + Send
    + Sync
    + 'static
{
    /// The port's MAC (the RoCE path's source address; the peer's destination).
    fn mac(&self) -> Result<[u8; 6], String>;
    /// Sets GID `index` to the IPv4-mapped `ip` with source MAC `mac`.
    fn set_ipv4_gid(&self, index: u16, ip: Ipv4Addr, mac: [u8; 6]) -> Result<(), String>;
    /// Firmware version (major, minor, subminor), for banners.
    fn fw_version(&self) -> (u16, u16, u16);
    /// Malformed completions `cq` has seen (entries the device wrote that failed the
    /// driver's checks); 0 where the family does not count them.
    fn bad_cqes(cq: &Self::Cq) -> u64;
    /// Tears the device down (every object must be destroyed first).
    fn shutdown(self) -> Result<(), String>;
}

impl<R, Pl> Device for mlx5::Device<R, Pl>
where
    R: RegisterIo + 'static,
    Pl: Platform + 'static,
    mlx5::Device<R, Pl>: Send + Sync,
{
    fn mac(&self) -> Result<[u8; 6], String> {
        mlx5::Device::mac(self).map_err(|e| format!("query the MAC: {e:?}"))
    }

    fn set_ipv4_gid(&self, index: u16, ip: Ipv4Addr, mac: [u8; 6]) -> Result<(), String> {
        self.set_roce_gid(index, Gid::from_ipv4(ip.octets()).0, mac)
            .map_err(|e| format!("program the RoCE GID: {e:?}"))
    }

    fn fw_version(&self) -> (u16, u16, u16) {
        mlx5::Device::fw_version(self)
    }

    fn bad_cqes(cq: &mlx5::Cq) -> u64 {
        cq.bad_cqes().0
    }

    fn shutdown(self) -> Result<(), String> {
        mlx5::Device::shutdown(self).map_err(|e| format!("shutdown: {e:?}"))
    }
}

/// The MAC an EUI-64 node GUID encodes (`ff:fe` in the middle, the universal/local bit
/// flipped back).
pub fn mac_from_guid(guid: u64) -> [u8; 6] {
    let g = guid.to_be_bytes();
    [g[0] ^ 2, g[1], g[2], g[5], g[6], g[7]]
}

/// The EFA driver: its address is the device's (GID 0 is fixed), its MAC the one its node
/// GUID encodes.
impl<R, Pl> Device for efa::Device<R, Pl>
where
    R: RegisterIo + 'static,
    Pl: Platform + 'static,
    efa::Device<R, Pl>: Send + Sync,
{
    fn mac(&self) -> Result<[u8; 6], String> {
        Ok(mac_from_guid(self.attributes().guid))
    }

    /// An EFA's GID is the device address NETWORK_ATTR reported: `ip` is accepted at index 0
    /// when that address is its IPv4-mapped GID, refused otherwise.
    fn set_ipv4_gid(&self, index: u16, ip: Ipv4Addr, _mac: [u8; 6]) -> Result<(), String> {
        let want = Gid::from_ipv4(ip.octets());
        let have = Gid(self.attributes().gid);
        if index == 0 && have == want {
            return Ok(());
        }
        Err(format!(
            "an EFA's GID is the device's own address ({have:?}) and cannot be set: it is not \
             the IPv4-mapped GID of {ip} (index {index})"
        ))
    }

    /// The firmware version's three most significant bytes.
    fn fw_version(&self) -> (u16, u16, u16) {
        let b = self.attributes().fw_version.to_be_bytes();
        (b[0].into(), b[1].into(), b[2].into())
    }

    /// The EFA driver counts refused completions per device (`efa::Device::bad_cqes`), not
    /// per CQ: 0 here.
    fn bad_cqes(_cq: &efa::Cq) -> u64 {
        0
    }

    fn shutdown(self) -> Result<(), String> {
        efa::Device::shutdown(self).map_err(|e| format!("shutdown: {e:?}"))
    }
}

/// A clock and relax hook shared by the driver's and the connection manager's waits.
#[derive(Clone)]
pub struct Clock(Arc<dyn Platform + Send + Sync>);

impl Clock {
    /// Wraps `p`.
    pub fn new(p: impl Platform + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(p))
    }
}

impl Platform for Clock {
    fn relax(&self) {
        self.0.relax();
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn interrupts(&self) -> Option<&dyn nic_hal::Interrupts> {
        self.0.interrupts()
    }
}

/// The same clock for the connection manager's waits, with the OS's entropy for its
/// identities.
impl cm::Platform for Clock {
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

/// 64 bits from the OS's random source (`/dev/urandom`; where that cannot be read, the
/// randomly keyed hasher std seeds from the OS): the connection manager's entropy.
fn os_entropy() -> u64 {
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

/// Real time for a device that makes progress by itself (hardware, or an emulated NIC on its
/// own poller thread): `relax` is a spin hint, `now_ns` the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct RealTime {
    epoch: std::time::Instant,
}

impl RealTime {
    /// A clock whose zero is now.
    pub fn new() -> RealTime {
        RealTime {
            epoch: std::time::Instant::now(),
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
}

/// What keeps an opened device's hardware (or emulation) alive; drop it after the device.
pub struct Backing(Inner);

enum Inner {
    /// A real function through VFIO.
    Vfio(
        // Held for its mappings; never read.
        #[allow(dead_code)] vfio_attach::Attached,
    ),
    /// An emulated NIC on the UDP fabric.
    #[cfg(feature = "emulator")]
    Udp(nic_testbed::UdpNic),
    /// An emulated NIC in a world.
    #[cfg(feature = "emulator")]
    InProcess(nic_testbed::Testbed),
    /// An emulated NIC on an Ethernet link.
    #[cfg(feature = "emulator")]
    Eth(nic_testbed::EthLinkNic),
    /// An emulated EFA on the UDP fabric or an Ethernet link.
    #[cfg(feature = "emulator")]
    EfaPort(nic_testbed::efa::EfaPortNic),
    /// An emulated EFA in a world.
    #[cfg(feature = "emulator")]
    EfaInProcess(nic_testbed::efa::EfaTestbed, Ipv4Addr),
}

impl Backing {
    /// After the device's shutdown: the checks the backing can make (an emulated NIC: no
    /// device-side error logged, no object left on the device, no DMA memory left with the
    /// driver; a real NIC: none).
    pub fn check(&self) -> Result<(), String> {
        match &self.0 {
            Inner::Vfio(_) => Ok(()),
            #[cfg(feature = "emulator")]
            Inner::Udp(nic) => emu_check(&nic.device(), &nic.dma, nic.ip()),
            #[cfg(feature = "emulator")]
            Inner::InProcess(tb) => emu_check(&tb.device(), &tb.dma, tb.ip()),
            #[cfg(feature = "emulator")]
            Inner::Eth(nic) => emu_check(&nic.device(), &nic.dma, nic.ip()),
            #[cfg(feature = "emulator")]
            Inner::EfaPort(nic) => efa_check(&nic.device(), &nic.dma, nic.ip()),
            #[cfg(feature = "emulator")]
            Inner::EfaInProcess(tb, ip) => efa_check(&tb.device(), &tb.dma, *ip),
        }
    }

    /// The emulated NIC's host memory, which is also its IOMMU (where a program's own
    /// memory is mapped for the device: `HeapDma::map_external`); `None` for a real NIC.
    #[cfg(feature = "emulator")]
    pub fn heap_dma(&self) -> Option<&std::sync::Arc<nic_hal::HeapDma>> {
        match &self.0 {
            Inner::Vfio(_) => None,
            Inner::Udp(nic) => Some(&nic.dma),
            Inner::InProcess(tb) => Some(&tb.dma),
            Inner::Eth(nic) => Some(&nic.dma),
            Inner::EfaPort(nic) => Some(&nic.dma),
            Inner::EfaInProcess(tb, _) => Some(&tb.dma),
        }
    }

    /// How a connection manager on this device finds a neighbour's MAC: the UDP fabric's
    /// rule (`02:00` and the address, 127.0.0.0/8 only), ARP on an Ethernet link; `None`
    /// where the caller fills the neighbour table (an in-process world, a real NIC).
    #[cfg(feature = "emulator")]
    pub fn neighbor_resolver(&self) -> Option<Arc<dyn cm::NeighborResolver>> {
        match &self.0 {
            Inner::Udp(_) => Some(Arc::new(nic_testbed::udp::UdpResolver)),
            Inner::Eth(nic) => Some(Arc::new(nic.resolver())),
            Inner::EfaPort(nic) => match nic.resolver() {
                Some(r) => Some(Arc::new(r)),
                None => Some(Arc::new(nic_testbed::udp::UdpResolver)),
            },
            Inner::Vfio(_) | Inner::InProcess(_) | Inner::EfaInProcess(..) => None,
        }
    }

    /// The in-process NIC's testbed (fault knobs, counters), when it is one.
    #[cfg(feature = "emulator")]
    pub fn testbed(&self) -> Option<&nic_testbed::Testbed> {
        match &self.0 {
            Inner::InProcess(tb) => Some(tb),
            _ => None,
        }
    }

    /// The emulated EFA's device model (fault knobs, counters, logs), when it is one.
    #[cfg(feature = "emulator")]
    pub fn efa_model(&self) -> Option<&Arc<std::sync::Mutex<nic_emulator::efa::Device>>> {
        match &self.0 {
            Inner::EfaPort(nic) => Some(&nic.dev),
            Inner::EfaInProcess(tb, _) => Some(&tb.dev),
            _ => None,
        }
    }
}

#[cfg(feature = "emulator")]
fn efa_check(
    dev: &nic_emulator::efa::Device,
    dma: &nic_hal::HeapDma,
    ip: Ipv4Addr,
) -> Result<(), String> {
    if !dev.errors().is_empty() {
        return Err(format!("{ip}: EFA device errors: {:?}", dev.errors()));
    }
    if dev.live() != nic_emulator::efa::Live::default() {
        return Err(format!("{ip}: objects left on the EFA: {:?}", dev.live()));
    }
    if dma.live_buffers() != 0 {
        return Err(format!(
            "{ip}: {} DMA buffers left behind",
            dma.live_buffers()
        ));
    }
    Ok(())
}

#[cfg(feature = "emulator")]
fn emu_check(
    dev: &nic_emulator::Device,
    dma: &nic_hal::HeapDma,
    ip: Ipv4Addr,
) -> Result<(), String> {
    if !dev.errors().is_empty() {
        return Err(format!("{ip}: device errors: {:?}", dev.errors()));
    }
    if dev.live() != nic_emulator::Live::default() {
        return Err(format!(
            "{ip}: objects left on the device: {:?}",
            dev.live()
        ));
    }
    if dma.live_buffers() != 0 {
        return Err(format!(
            "{ip}: {} DMA buffers left behind",
            dma.live_buffers()
        ));
    }
    Ok(())
}

/// A device, probed and ready for RoCE at [`Opened::ip`].
pub struct Opened<D> {
    /// The provider.
    pub dev: D,
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its IPv4 address (GID 0).
    pub ip: Ipv4Addr,
    /// What it is, for banners and messages.
    pub label: String,
    /// The clock for waits on it (a connection manager's too).
    pub clock: Clock,
    /// What keeps it alive: drop after `dev` (or shut `dev` down first).
    pub backing: Backing,
}

/// Programs GID 0 of a probed device and wraps it.
fn ready<D: Device>(
    dev: D,
    ip: Ipv4Addr,
    label: String,
    clock: Clock,
    backing: Backing,
) -> Result<Opened<D>, String> {
    let mac = match dev.mac().and_then(|mac| {
        dev.set_ipv4_gid(0, ip, mac)?;
        Ok(mac)
    }) {
        Ok(m) => m,
        Err(e) => {
            let _ = dev.shutdown();
            return Err(format!("{label}: {e}"));
        }
    };
    Ok(Opened {
        dev,
        mac,
        ip,
        label,
        clock,
        backing,
    })
}

/// One way to get a device.
pub trait Open {
    /// The provider it gives.
    type Device: Device;
    /// Opens it.
    fn open(self) -> Result<Opened<Self::Device>, String>;
}

/// The device type of a VFIO-attached mlx5 function.
pub type VfioDevice = mlx5::Device<Arc<vfio_attach::VfioBar>, RealTime>;

/// A ConnectX function through Linux VFIO at PCI address `bdf`, with IPv4 address `ip`.
#[derive(Clone, Debug)]
pub struct VfioNic<'a> {
    /// The PCI address (`0000:01:00.0`).
    pub bdf: &'a str,
    /// The address GID 0 gets.
    pub ip: Ipv4Addr,
}

impl Open for VfioNic<'_> {
    type Device = VfioDevice;

    /// Attaches the function and probes the mlx5 driver; a function whose PCI id is not a
    /// ConnectX one is refused before the driver touches it.
    fn open(self) -> Result<Opened<VfioDevice>, String> {
        let at = vfio_attach_fn(self.bdf)?;
        match VfioDriver::of(&at) {
            Some(VfioDriver::Mlx5) => vfio_mlx5(at, self.bdf, self.ip),
            _ => Err(vfio_wrong_driver(self.bdf, &at, "an mlx5")),
        }
    }
}

/// The device type of a VFIO-attached EFA function.
pub type VfioEfaDevice = efa::Device<Arc<vfio_attach::VfioBar>, RealTime>;

/// An EFA function through Linux VFIO at PCI address `bdf`, whose device address must be the
/// IPv4-mapped GID of `ip`.
#[derive(Clone, Debug)]
pub struct VfioEfa<'a> {
    /// The PCI address (`0000:00:06.0`).
    pub bdf: &'a str,
    /// The address its GID must be.
    pub ip: Ipv4Addr,
}

impl Open for VfioEfa<'_> {
    type Device = VfioEfaDevice;

    /// Attaches the function and probes the EFA driver; a function whose PCI id is not an
    /// EFA one is refused before the driver touches it.
    fn open(self) -> Result<Opened<VfioEfaDevice>, String> {
        let at = vfio_attach_fn(self.bdf)?;
        match VfioDriver::of(&at) {
            Some(VfioDriver::Efa) => vfio_efa(at, self.bdf, self.ip),
            _ => Err(vfio_wrong_driver(self.bdf, &at, "an EFA")),
        }
    }
}

/// Which driver a PCI function takes, by its vendor and device id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VfioDriver {
    /// A ConnectX function (`mlx5::is_supported_pci`).
    Mlx5,
    /// An EFA function (`efa::is_supported_pci`).
    Efa,
}

impl VfioDriver {
    /// The driver for the function `vendor:device`, `None` when no driver of this build takes
    /// it.
    pub fn for_pci(vendor: u16, device: u16) -> Option<VfioDriver> {
        if mlx5::is_supported_pci(vendor, device) {
            Some(VfioDriver::Mlx5)
        } else if efa::is_supported_pci(vendor, device) {
            Some(VfioDriver::Efa)
        } else {
            None
        }
    }

    fn of(at: &vfio_attach::Attached) -> Option<VfioDriver> {
        VfioDriver::for_pci(at.vendor_id(), at.device_id())
    }
}

/// The error for a function with PCI ids no driver of this build takes.
pub fn unknown_pci_id(bdf: &str, vendor: u16, device: u16) -> String {
    format!(
        "--device vfio:{bdf}: PCI id {vendor:04x}:{device:04x} is neither a ConnectX (mlx5) nor \
         an EFA function: no driver for it"
    )
}

fn vfio_wrong_driver(bdf: &str, at: &vfio_attach::Attached, want: &str) -> String {
    let (v, d) = (at.vendor_id(), at.device_id());
    match VfioDriver::of(at) {
        None => unknown_pci_id(bdf, v, d),
        Some(k) => format!(
            "--device vfio:{bdf}: PCI id {v:04x}:{d:04x} is a {k:?} function, not {want} one"
        ),
    }
}

/// Attaches `bdf` (BAR0 mapped).
fn vfio_attach_fn(bdf: &str) -> Result<vfio_attach::Attached, String> {
    vfio_attach::attach(bdf, &vfio_attach::AttachOptions::default())
        .map_err(|e| format!("--device vfio:{bdf}: {e}"))
}

fn vfio_mlx5(
    at: vfio_attach::Attached,
    bdf: &str,
    ip: Ipv4Addr,
) -> Result<Opened<VfioDevice>, String> {
    let dma = at
        .dma(vfio_attach::DmaOptions::default())
        .map_err(|e| format!("--device vfio:{bdf}: DMA memory: {e}"))?;
    let clock = RealTime::new();
    let dev = mlx5::Device::probe(at.bar(), dma, clock, mlx5::Config::default())
        .map_err(|e| format!("--device vfio:{bdf}: probe: {e:?}"))?;
    ready(
        dev,
        ip,
        format!("mlx5 at {bdf} (VFIO)"),
        Clock::new(clock),
        Backing(Inner::Vfio(at)),
    )
}

fn vfio_efa(
    at: vfio_attach::Attached,
    bdf: &str,
    ip: Ipv4Addr,
) -> Result<Opened<VfioEfaDevice>, String> {
    let dma = at
        .dma(vfio_attach::DmaOptions::default())
        .map_err(|e| format!("--device vfio:{bdf}: DMA memory: {e}"))?;
    let clock = RealTime::new();
    let addr = at.address();
    let config = efa::Config {
        device_id: at.device_id(),
        bdf: u16::from(addr.bus) << 8 | u16::from(addr.device) << 3 | u16::from(addr.function),
        admin_timeout_ns: None,
    };
    let mut dev = efa::Device::probe(at.bar(), dma, clock, config)
        .map_err(|e| format!("--device vfio:{bdf}: EFA probe: {e:?}"))?;
    let db_bar = u32::from(dev.attributes().db_bar);
    let bars = at
        .map_bar(u32::from(EFA_MEM_BAR))
        .and_then(|mem| Ok((mem, at.map_bar(db_bar)?)));
    match bars {
        Ok((mem, db)) => dev.attach_data_bars(mem, db),
        Err(e) => {
            let _ = dev.shutdown();
            return Err(format!("--device vfio:{bdf}: EFA data BARs: {e}"));
        }
    }
    ready(
        dev,
        ip,
        format!("EFA at {bdf} (VFIO)"),
        Clock::new(clock),
        Backing(Inner::Vfio(at)),
    )
}

/// The EFA's memory BAR (the low-latency send queues).
const EFA_MEM_BAR: u8 = 2;

/// The MAC of the emulated NIC at `ip` on the UDP fabric (both ends derive it: that fabric
/// has no ARP).
pub fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// An emulated mlx5 NIC on the UDP fabric: a socket at `ip:fabric_port` (`ip` in
/// 127.0.0.0/8), its device on a poller thread, MAC [`mac_for`]`(ip)`.
#[cfg(feature = "emulator")]
#[derive(Clone, Copy, Debug)]
pub struct UdpEmu {
    /// The NIC's address.
    pub ip: Ipv4Addr,
    /// The fabric's UDP port (the same on every NIC of a run).
    pub fabric_port: u16,
}

#[cfg(feature = "emulator")]
impl Open for UdpEmu {
    type Device = nic_testbed::UdpDevice;

    fn open(self) -> Result<Opened<nic_testbed::UdpDevice>, String> {
        let (ip, port) = (self.ip, self.fabric_port);
        let nic = nic_testbed::UdpNic::new(
            ip,
            port,
            nic_emulator::Profile {
                mac: mac_for(ip),
                ..nic_emulator::Profile::default()
            },
        )
        .map_err(|e| format!("emulated NIC at {ip}:{port} (UDP fabric): {e}"))?;
        let dev = nic
            .probe(mlx5::Config::default())
            .map_err(|e| format!("emulated NIC at {ip}: probe: {e:?}"))?;
        let clock = Clock::new(nic.platform());
        ready(
            dev,
            ip,
            format!("emulated mlx5 at {ip} on the UDP fabric (port {port})"),
            clock,
            Backing(Inner::Udp(nic)),
        )
    }
}

/// An emulated mlx5 NIC on an Ethernet link in QEMU's socket-netdev format (frames from
/// 127.0.0.1:`local` to 127.0.0.1:`remote`, see `nic_testbed::eth::loopback_link`): `ip` is
/// its address on the virtual wire, `mac` its MAC ([`mac_for`]`(ip)` unless given); peers are
/// found by ARP ([`Backing::neighbor_resolver`]). Its device runs on a poller thread.
#[cfg(feature = "emulator")]
#[derive(Clone, Copy, Debug)]
pub struct EthEmu {
    /// The NIC's address on the wire.
    pub ip: Ipv4Addr,
    /// The link's local UDP port.
    pub local: u16,
    /// The link's peer UDP port (QEMU's `localaddr`).
    pub remote: u16,
    /// The MAC, when not [`mac_for`]`(ip)`.
    pub mac: Option<[u8; 6]>,
}

#[cfg(feature = "emulator")]
impl Open for EthEmu {
    type Device = nic_testbed::EthDevice;

    fn open(self) -> Result<Opened<nic_testbed::EthDevice>, String> {
        let EthEmu {
            ip,
            local,
            remote,
            mac,
        } = self;
        let what = format!(
            "emulated NIC at {ip} on the Ethernet link 127.0.0.1:{local} -> 127.0.0.1:{remote}"
        );
        let link = nic_testbed::eth::loopback_link(local, remote, mac.unwrap_or(mac_for(ip)));
        let nic = nic_testbed::EthLinkNic::new(link, ip).map_err(|e| format!("{what}: {e}"))?;
        let dev = nic
            .probe(mlx5::Config::default())
            .map_err(|e| format!("{what}: probe: {e:?}"))?;
        let clock = Clock::new(nic.platform());
        ready(dev, ip, what, clock, Backing(Inner::Eth(nic)))
    }
}

/// An emulated mlx5 NIC at `ip` in `world` (the embedded modes: the world's fabric joins it
/// to the others; waits on it run the world).
#[cfg(feature = "emulator")]
pub struct InProcess<'a> {
    /// The world.
    pub world: &'a Arc<nic_testbed::World>,
    /// The NIC's address.
    pub ip: Ipv4Addr,
    /// Its profile (MAC, limits).
    pub profile: nic_emulator::Profile,
}

#[cfg(feature = "emulator")]
impl Open for InProcess<'_> {
    type Device = nic_testbed::EmuDevice;

    fn open(self) -> Result<Opened<nic_testbed::EmuDevice>, String> {
        let tb = self.world.nic(self.ip, self.profile);
        let dev = tb
            .probe(mlx5::Config::default())
            .map_err(|e| format!("emulated NIC at {}: probe: {e:?}", self.ip))?;
        let clock = Clock::new(tb.platform());
        ready(
            dev,
            self.ip,
            "emulated mlx5".into(),
            clock,
            Backing(Inner::InProcess(tb)),
        )
    }
}

/// The EFA driver's bring-up parameters for an emulated EFA of `profile`.
#[cfg(feature = "emulator")]
fn efa_config(device_id: u16) -> efa::Config {
    efa::Config {
        device_id,
        ..efa::Config::default()
    }
}

/// An emulated EFA on the UDP fabric, driven by the EFA driver: a socket at `ip:fabric_port`
/// (`ip` in 127.0.0.0/8), its device on a poller thread, GID the IPv4-mapped GID of `ip`,
/// MAC [`mac_for`]`(ip)` (its node GUID's).
#[cfg(feature = "emulator")]
#[derive(Clone, Copy, Debug)]
pub struct EfaUdpEmu {
    /// The EFA's address.
    pub ip: Ipv4Addr,
    /// The fabric's UDP port (the same on every NIC of a run).
    pub fabric_port: u16,
}

#[cfg(feature = "emulator")]
impl Open for EfaUdpEmu {
    type Device = nic_testbed::efa::EfaUdpDevice;

    fn open(self) -> Result<Opened<nic_testbed::efa::EfaUdpDevice>, String> {
        let (ip, port) = (self.ip, self.fabric_port);
        let what = format!("emulated EFA at {ip} on the UDP fabric (port {port})");
        let nic = nic_testbed::efa::EfaPortNic::udp(ip, port, Default::default())
            .map_err(|e| format!("{what}: {e}"))?;
        let clock = nic_testbed::RealTime::new();
        let dev = nic
            .probe_with(clock.clone(), efa_config(nic.device_id()))
            .map_err(|e| format!("{what}: probe: {e:?}"))?;
        ready(
            dev,
            ip,
            what,
            Clock::new(clock),
            Backing(Inner::EfaPort(nic)),
        )
    }
}

/// An emulated EFA on an Ethernet link in QEMU's socket-netdev format (frames from
/// 127.0.0.1:`local` to 127.0.0.1:`remote`), driven by the EFA driver: `ip` is its address on
/// the virtual wire (its GID the IPv4-mapped GID of it), `mac` its MAC ([`mac_for`]`(ip)`
/// unless given); its port resolves peers by ARP. Its device runs on a poller thread.
#[cfg(feature = "emulator")]
#[derive(Clone, Copy, Debug)]
pub struct EfaEthEmu {
    /// The EFA's address on the wire.
    pub ip: Ipv4Addr,
    /// The link's local UDP port.
    pub local: u16,
    /// The link's peer UDP port (QEMU's `localaddr`).
    pub remote: u16,
    /// The MAC, when not [`mac_for`]`(ip)`.
    pub mac: Option<[u8; 6]>,
}

#[cfg(feature = "emulator")]
impl Open for EfaEthEmu {
    type Device = nic_testbed::efa::EfaEthDevice;

    fn open(self) -> Result<Opened<nic_testbed::efa::EfaEthDevice>, String> {
        let EfaEthEmu {
            ip,
            local,
            remote,
            mac,
        } = self;
        let what = format!(
            "emulated EFA at {ip} on the Ethernet link 127.0.0.1:{local} -> 127.0.0.1:{remote}"
        );
        let link = nic_testbed::eth::loopback_link(local, remote, mac.unwrap_or(mac_for(ip)));
        let nic = nic_testbed::efa::EfaPortNic::eth(link, ip, Default::default())
            .map_err(|e| format!("{what}: {e}"))?;
        let clock = nic_testbed::YieldingTime::new();
        let dev = nic
            .probe_with(clock, efa_config(nic.device_id()))
            .map_err(|e| format!("{what}: probe: {e:?}"))?;
        ready(
            dev,
            ip,
            what,
            Clock::new(clock),
            Backing(Inner::EfaPort(nic)),
        )
    }
}

/// An emulated EFA at `ip` in `world` (the embedded modes: the world's fabric joins it to the
/// others; waits on it run the world), driven by the EFA driver with BAR2 mapped as memory.
/// Its node GUID (and so its MAC) is made from [`mac_for`]`(ip)`; `profile` gives the rest.
#[cfg(feature = "emulator")]
pub struct EfaInProcess<'a> {
    /// The world.
    pub world: &'a Arc<nic_testbed::World>,
    /// The EFA's address.
    pub ip: Ipv4Addr,
    /// Its profile (limits, capabilities).
    pub profile: nic_emulator::efa::Profile,
}

#[cfg(feature = "emulator")]
impl Open for EfaInProcess<'_> {
    type Device = nic_testbed::efa::EfaDevice;

    fn open(self) -> Result<Opened<nic_testbed::efa::EfaDevice>, String> {
        let ip = self.ip;
        let tb = self.world.efa_at(
            ip,
            nic_emulator::efa::Profile {
                guid: nic_testbed::efa::guid_from_mac(mac_for(ip)),
                ..self.profile
            },
        );
        let id = tb.device().profile().device_id;
        let dev = tb
            .probe_mapped(efa_config(id))
            .map_err(|e| format!("emulated EFA at {ip}: probe: {e:?}"))?;
        let clock = Clock::new(tb.platform());
        ready(
            dev,
            ip,
            "emulated EFA".into(),
            clock,
            Backing(Inner::EfaInProcess(tb, ip)),
        )
    }
}

/// A device family as `--device` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Family {
    /// `emu`: emulated mlx5 NICs (in-process, on the UDP fabric or an Ethernet link).
    Emu,
    /// `vfio:BDF`: a PCI function through VFIO, ConnectX (mlx5) or EFA by its PCI id.
    Vfio(String),
    /// `efa`: emulated EFAs driven by the EFA driver (in-process, on the UDP fabric or an
    /// Ethernet link). `efa:NAME` parses but does not open: EFAs are not opened by name
    /// (a real one opens through `vfio:BDF`).
    Efa(Option<String>),
}

impl std::str::FromStr for Family {
    type Err = String;

    /// Parses `emu`, `vfio:BDF` (a PCI address) or `efa[:NAME]`.
    fn from_str(s: &str) -> Result<Family, String> {
        if s == "emu" {
            return Ok(Family::Emu);
        }
        if s == "efa" {
            return Ok(Family::Efa(None));
        }
        if let Some(n) = s.strip_prefix("efa:") {
            return Ok(Family::Efa(Some(n.to_string())));
        }
        if let Some(bdf) = s.strip_prefix("vfio:") {
            if bdf.is_empty() {
                return Err("vfio: needs a PCI address (vfio:0000:01:00.0)".into());
            }
            bdf.parse::<vfio_attach::PciAddress>()
                .map_err(|e| format!("vfio:{bdf}: {e}"))?;
            return Ok(Family::Vfio(bdf.to_string()));
        }
        Err(format!(
            "'{s}': one of emu (emulated mlx5 NICs), efa (emulated EFAs), vfio:BDF (an mlx5 or \
             EFA function through VFIO)"
        ))
    }
}

impl Family {
    /// Whether this build can open the family: `Err` says why not.
    pub fn available(&self) -> Result<(), String> {
        match self {
            Family::Vfio(_) => Ok(()),
            Family::Emu if cfg!(feature = "emulator") => Ok(()),
            Family::Emu => Err("emulated NICs (emu): not available: this build has no \
                                emulator (built without the `emulator` feature); use \
                                --device vfio:BDF"
                .into()),
            Family::Efa(Some(name)) => Err(format!(
                "efa:{name}: not available: EFAs are not opened by name; use --device efa (the \
                 emulated EFA) or --device vfio:BDF (an EFA function bound to vfio-pci)"
            )),
            Family::Efa(None) if cfg!(feature = "emulator") => Ok(()),
            Family::Efa(None) => Err("emulated EFAs (efa): not available: this build has no \
                                      emulator (built without the `emulator` feature); use \
                                      --device vfio:BDF"
                .into()),
        }
    }

    /// Whether the family's devices are emulated (and so live on a `--fabric`).
    pub fn is_emulated(&self) -> bool {
        matches!(self, Family::Emu | Family::Efa(_))
    }
}

/// Code to run on an opened device, generic over its type (and so compiled per family).
pub trait WithDevice {
    /// What it returns.
    type Output;
    /// Runs on `dev`.
    fn run<D: Device>(self, dev: Opened<D>) -> Self::Output;
}

/// Opens this process's device of `family` at `ip` (an emulated one on the UDP fabric's
/// `fabric_port`) and runs `user` on it; the error of a family this build lacks, or of a
/// device that does not open.
pub fn open_remote<U: WithDevice>(
    family: &Family,
    ip: Ipv4Addr,
    fabric_port: u16,
    user: U,
) -> Result<U::Output, String> {
    family.available()?;
    match family {
        Family::Vfio(bdf) => open_vfio(bdf, ip, user),
        #[cfg(feature = "emulator")]
        Family::Emu => Ok(user.run(UdpEmu { ip, fabric_port }.open()?)),
        #[cfg(feature = "emulator")]
        Family::Efa(None) => Ok(user.run(EfaUdpEmu { ip, fabric_port }.open()?)),
        _ => {
            let _ = fabric_port;
            Err(format!("{family:?}: not available"))
        }
    }
}

/// Attaches the VFIO function `bdf`, picks its driver by PCI id ([`VfioDriver`]), opens it
/// at `ip` and runs `user` on it; an unknown id is an error before any driver touches it.
pub fn open_vfio<U: WithDevice>(bdf: &str, ip: Ipv4Addr, user: U) -> Result<U::Output, String> {
    let at = vfio_attach_fn(bdf)?;
    match VfioDriver::of(&at) {
        Some(VfioDriver::Mlx5) => Ok(user.run(vfio_mlx5(at, bdf, ip)?)),
        Some(VfioDriver::Efa) => Ok(user.run(vfio_efa(at, bdf, ip)?)),
        None => Err(unknown_pci_id(bdf, at.vendor_id(), at.device_id())),
    }
}

/// Opens this process's device of `family` at `ip` where `fabric` says (an emulated one on
/// the UDP fabric or on an Ethernet link, with MAC `mac` there, [`mac_for`]`(ip)` unless
/// given; a VFIO function takes no fabric) and runs `user` on it.
pub fn open_on<U: WithDevice>(
    family: &Family,
    ip: Ipv4Addr,
    fabric: fabric::Fabric,
    mac: Option<[u8; 6]>,
    user: U,
) -> Result<U::Output, String> {
    family.available()?;
    match (family, fabric) {
        (_, fabric::Fabric::Udp(port)) => open_remote(family, ip, port, user),
        (Family::Vfio(_), fabric::Fabric::Eth { .. }) => Err(format!(
            "{family:?}: a VFIO function is a real device: --fabric eth:LOCAL,REMOTE is for \
             emulated ones (emu, efa)"
        )),
        #[cfg(feature = "emulator")]
        (Family::Emu, fabric::Fabric::Eth { local, remote }) => Ok(user.run(
            EthEmu {
                ip,
                local,
                remote,
                mac,
            }
            .open()?,
        )),
        #[cfg(feature = "emulator")]
        (Family::Efa(None), fabric::Fabric::Eth { local, remote }) => Ok(user.run(
            EfaEthEmu {
                ip,
                local,
                remote,
                mac,
            }
            .open()?,
        )),
        _ => {
            let _ = (ip, mac);
            Err(format!("{family:?}: not available"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_and_say_what_is_missing() {
        assert_eq!("emu".parse::<Family>(), Ok(Family::Emu));
        assert_eq!(
            "vfio:0000:01:00.0".parse::<Family>(),
            Ok(Family::Vfio("0000:01:00.0".into()))
        );
        assert!("vfio:".parse::<Family>().is_err());
        assert!("vfio:zz".parse::<Family>().is_err());
        assert!("mlx5_0".parse::<Family>().is_err());
        let efa = "efa:rdmap0s6".parse::<Family>().unwrap();
        assert_eq!(efa, Family::Efa(Some("rdmap0s6".into())));
        let e = efa.available().unwrap_err();
        assert!(
            e.contains("not available") && e.contains("not opened by name"),
            "{e}"
        );
        assert_eq!("efa".parse::<Family>(), Ok(Family::Efa(None)));
        assert_eq!(
            Family::Efa(None).available().is_ok(),
            cfg!(feature = "emulator")
        );
        assert_eq!(Family::Vfio("x".into()).available(), Ok(()));
        assert_eq!(Family::Emu.available().is_ok(), cfg!(feature = "emulator"));
        assert!(Family::Emu.is_emulated() && Family::Efa(None).is_emulated());
        assert!(!Family::Vfio("x".into()).is_emulated());
        let e = "efa0".parse::<Family>().unwrap_err();
        assert!(e.contains("efa (emulated EFAs)"), "{e}");
    }

    #[test]
    fn vfio_picks_the_driver_by_pci_id() {
        assert_eq!(VfioDriver::for_pci(0x15b3, 0x1017), Some(VfioDriver::Mlx5));
        assert_eq!(VfioDriver::for_pci(0x1d0f, 0xefa1), Some(VfioDriver::Efa));
        assert_eq!(VfioDriver::for_pci(0x1d0f, 0xefa4), Some(VfioDriver::Efa));
        // ivshmem, an Amazon id that is no EFA, a Mellanox id that is no ConnectX
        for (v, d) in [(0x1af4, 0x1110), (0x1d0f, 0x8061), (0x15b3, 0x6750)] {
            assert_eq!(VfioDriver::for_pci(v, d), None, "{v:04x}:{d:04x}");
        }
        let e = unknown_pci_id("0000:00:04.0", 0x1af4, 0x1110);
        assert!(
            e.contains("vfio:0000:00:04.0") && e.contains("1af4:1110") && e.contains("EFA"),
            "{e}"
        );
    }

    /// What a user of `open_remote` / `open_on` sees: the device's identity.
    struct Identify;

    impl WithDevice for Identify {
        type Output = (u32, u32, Gid, String, Result<(), String>);
        fn run<D: Device>(self, o: Opened<D>) -> Self::Output {
            let a = o.dev.query_device().unwrap();
            let gid = o.dev.query_gid(1, 0).unwrap();
            let Opened {
                dev,
                backing,
                label,
                ..
            } = o;
            Device::shutdown(dev).unwrap();
            (a.vendor_id, a.vendor_part_id, gid, label, backing.check())
        }
    }

    #[test]
    fn a_function_that_is_not_there_is_a_clear_error() {
        // No such function on any machine (bus ff, device 1f, function 7 of domain ffff).
        let bdf = "ffff:ff:1f.7";
        let e = open_vfio(bdf, Ipv4Addr::new(10, 0, 0, 1), Identify)
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("vfio:ffff:ff:1f.7"), "{e}");
        let e = open_on(
            &Family::Vfio(bdf.into()),
            Ipv4Addr::new(10, 0, 0, 1),
            fabric::Fabric::Eth {
                local: 1000,
                remote: 1001,
            },
            None,
            Identify,
        )
        .map(|_| ())
        .unwrap_err();
        assert!(e.contains("real device"), "{e}");
        let e = open_on(
            &Family::Efa(Some("rdmap0s6".into())),
            Ipv4Addr::new(127, 0, 0, 1),
            fabric::Fabric::Udp(47_950),
            None,
            Identify,
        )
        .map(|_| ())
        .unwrap_err();
        assert!(e.contains("not opened by name"), "{e}");
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn a_nic_on_an_ethernet_link_opens_with_arp_and_closes_clean() {
        let ip = Ipv4Addr::new(10, 79, 0, 1);
        let spec = EthEmu {
            ip,
            local: 48170,
            remote: 48171,
            mac: None,
        };
        let o = spec.open().unwrap();
        assert_eq!(o.dev.query_gid(1, 0).unwrap(), Gid::from_ipv4(ip.octets()));
        assert_eq!(o.mac, mac_for(ip));
        assert!(
            o.label.contains("127.0.0.1:48170 -> 127.0.0.1:48171"),
            "{}",
            o.label
        );
        // the local socket is taken now
        let e = spec.open().map(|_| ()).unwrap_err();
        assert!(e.contains("Ethernet link"), "{e}");
        // the resolver asks by ARP: nobody is at the far end, so "not yet"
        let r = o.backing.neighbor_resolver().expect("ARP");
        assert!(matches!(
            r.resolve_neighbor(Ipv4Addr::new(10, 79, 0, 2)),
            Ok(None)
        ));
        assert!(o.backing.heap_dma().is_some());
        let Opened { dev, backing, .. } = o;
        Device::shutdown(dev).unwrap();
        backing.check().unwrap();
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn an_in_process_nic_opens_ready_for_roce_and_closes_clean() {
        let world = nic_testbed::World::new(1);
        let ip = Ipv4Addr::new(127, 0, 0, 9);
        let o = InProcess {
            world: &world,
            ip,
            profile: nic_emulator::Profile::default(),
        }
        .open()
        .unwrap();
        let gid = o.dev.query_gid(1, 0).unwrap();
        assert_eq!(gid, Gid::from_ipv4(ip.octets()));
        assert_eq!(o.mac, nic_emulator::Profile::default().mac);
        let Opened { dev, backing, .. } = o;
        let pd = Provider::alloc_pd(&dev).unwrap();
        // The check sees what is left on the device.
        assert!(backing.check().unwrap_err().contains("objects left"));
        Provider::dealloc_pd(&dev, pd).map_err(|e| e.error).unwrap();
        Device::shutdown(dev).unwrap();
        backing.check().unwrap();
    }

    #[cfg(feature = "emulator")]
    const EFA_QKEY: u32 = 0x5151;

    /// One end of an SRD exchange on any device.
    #[cfg(feature = "emulator")]
    struct SrdEnd<D: Device> {
        o: Opened<D>,
        pd: D::Pd,
        cq: D::Cq,
        qp: D::Qp,
        mr: D::Mr,
        ah: Option<D::Ah>,
    }

    #[cfg(feature = "emulator")]
    impl<D: Device> SrdEnd<D> {
        fn new(o: Opened<D>) -> SrdEnd<D> {
            use verbs::AccessFlags;
            let d = &o.dev;
            let pd = d.alloc_pd().unwrap();
            let cq = d.create_cq(64, 0, None).unwrap();
            let qp =
                efa::loopback::datagram_qp(d, &pd, &cq, verbs::QpType::Srd, EFA_QKEY, 16).unwrap();
            let buf = d.alloc_buf(1 << 16).unwrap();
            let mr = d
                .reg_mr(
                    &pd,
                    buf,
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                )
                .unwrap();
            SrdEnd {
                o,
                pd,
                cq,
                qp,
                mr,
                ah: None,
            }
        }

        fn connect(&mut self, peer: Gid) {
            let ah = self
                .o
                .dev
                .create_ah(
                    &self.pd,
                    &verbs::AhAttr {
                        dgid: peer,
                        port_num: 1,
                        ..Default::default()
                    },
                )
                .unwrap();
            self.ah = Some(ah);
        }

        fn sge(&self, off: u64, len: u32) -> verbs::Sge {
            use verbs::MemoryRegion;
            verbs::Sge {
                addr: self.mr.addr() + off,
                length: len,
                lkey: self.mr.lkey(),
            }
        }

        /// Polls until one completion came (at most 20 s on the device's clock).
        fn wait(&self) -> verbs::WorkCompletion {
            let mut wc = [verbs::WorkCompletion::default(); 1];
            let end = self.o.clock.now_ns() + 20_000_000_000;
            while self.o.clock.now_ns() < end {
                if self.o.dev.poll_cq(&self.cq, &mut wc).unwrap() == 1 {
                    return wc[0];
                }
                self.o.clock.relax();
                std::thread::yield_now();
            }
            panic!("{}: no completion", self.o.label);
        }

        fn close(self) {
            let SrdEnd {
                o,
                pd,
                cq,
                qp,
                mr,
                ah,
            } = self;
            let d = &o.dev;
            d.destroy_qp(qp).map_err(|e| e.error).unwrap();
            if let Some(ah) = ah {
                d.destroy_ah(ah).map_err(|e| e.error).unwrap();
            }
            d.dereg_mr(mr).map_err(|e| e.error).unwrap();
            d.destroy_cq(cq).map_err(|e| e.error).unwrap();
            d.dealloc_pd(pd).map_err(|e| e.error).unwrap();
            let Opened { dev, backing, .. } = o;
            Device::shutdown(dev).unwrap();
            backing.check().unwrap();
        }
    }

    /// An SRD SEND from `a` to `b` and an RDMA READ of `b`'s buffer by `a`, every byte
    /// checked: the two devices, opened by device-open, reach each other.
    #[cfg(feature = "emulator")]
    fn srd_exchange<D: Device>(a: Opened<D>, b: Opened<D>) {
        use verbs::{MemoryRegion, QueuePair, RecvWr, RemoteOp, SendWr, UdDest, WcOpcode};
        use verbs::{WcStatus, WrOpcode};
        let (ga, gb) = (
            a.dev.query_gid(1, 0).unwrap(),
            b.dev.query_gid(1, 0).unwrap(),
        );
        let mut a = SrdEnd::new(a);
        let mut b = SrdEnd::new(b);
        a.connect(gb);
        b.connect(ga);
        let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
        a.mr.buffer().unwrap().write(0, &msg).unwrap();
        let rsge = [b.sge(0, 4096)];
        b.o.dev
            .post_recv(
                &mut b.qp,
                &[RecvWr {
                    wr_id: 77,
                    sg_list: &rsge,
                }],
            )
            .unwrap();
        let sge = [a.sge(0, msg.len() as u32)];
        let dest = UdDest {
            ah: a.ah.as_ref().unwrap(),
            remote_qpn: b.qp.qp_num(),
            remote_qkey: EFA_QKEY,
        };
        let wr = SendWr {
            wr_id: 5,
            sg_list: &sge,
            dest: Some(dest),
            ..Default::default()
        };
        a.o.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = a.wait();
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (5, WcStatus::Success, WcOpcode::Send)
        );
        let r = b.wait();
        assert_eq!(
            (r.wr_id, r.status, r.byte_len),
            (77, WcStatus::Success, 3000)
        );
        let mut got = vec![0u8; msg.len()];
        b.mr.buffer().unwrap().read(0, &mut got).unwrap();
        assert_eq!(got, msg);

        // RDMA READ of b's 3000 bytes into a's buffer at 8192.
        let rsge = [a.sge(8192, 3000)];
        let dest = UdDest {
            ah: a.ah.as_ref().unwrap(),
            remote_qpn: b.qp.qp_num(),
            remote_qkey: EFA_QKEY,
        };
        let wr = SendWr {
            wr_id: 6,
            opcode: WrOpcode::RdmaRead,
            sg_list: &rsge,
            remote: RemoteOp::Rdma {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            dest: Some(dest),
            ..Default::default()
        };
        a.o.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = a.wait();
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (6, WcStatus::Success, WcOpcode::RdmaRead)
        );
        let mut back = vec![0u8; msg.len()];
        a.mr.buffer().unwrap().read(8192, &mut back).unwrap();
        assert_eq!(back, msg);
        a.close();
        b.close();
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn an_in_process_efa_opens_as_an_efa_and_closes_clean() {
        let world = nic_testbed::World::new(3);
        let ip = Ipv4Addr::new(127, 0, 0, 19);
        let open = |ip| {
            EfaInProcess {
                world: &world,
                ip,
                profile: Default::default(),
            }
            .open()
            .unwrap()
        };
        let o = open(ip);
        let a = o.dev.query_device().unwrap();
        assert_eq!((a.vendor_id, a.vendor_part_id), (0x1d0f, 0xefa1));
        assert_eq!(o.dev.query_gid(1, 0).unwrap(), Gid::from_ipv4(ip.octets()));
        assert_eq!(
            o.dev.query_port(1).unwrap().link_layer,
            verbs::LinkLayer::Unspecified
        );
        assert_eq!(o.mac, mac_for(ip));
        assert_eq!(Device::fw_version(&o.dev), (0, 1, 0));
        assert!(o.backing.efa_model().is_some() && o.backing.heap_dma().is_some());
        assert!(o.backing.neighbor_resolver().is_none());
        // An EFA's GID is its own: another address is refused.
        let e = o
            .dev
            .set_ipv4_gid(0, Ipv4Addr::new(127, 0, 0, 20), o.mac)
            .unwrap_err();
        assert!(e.contains("cannot be set"), "{e}");
        // The check sees the driver's user context until the shutdown.
        assert!(o.backing.check().unwrap_err().contains("objects left"));
        srd_exchange(o, open(Ipv4Addr::new(127, 0, 0, 20)));
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn efas_on_the_udp_fabric_open_through_open_remote_and_exchange_data() {
        let port = 47_951;
        let (ia, ib) = (Ipv4Addr::new(127, 0, 0, 21), Ipv4Addr::new(127, 0, 0, 22));
        let (v, d, gid, label, check) =
            open_remote(&Family::Efa(None), ia, port, Identify).unwrap();
        assert_eq!((v, d), (0x1d0f, 0xefa1));
        assert_eq!(gid, Gid::from_ipv4(ia.octets()));
        assert!(
            label.contains("EFA") && label.contains("UDP fabric"),
            "{label}"
        );
        check.unwrap();

        let a = EfaUdpEmu {
            ip: ia,
            fabric_port: port,
        }
        .open()
        .unwrap();
        assert_eq!(a.mac, mac_for(ia));
        assert!(a.backing.neighbor_resolver().is_some());
        // the address is taken now; and the UDP fabric is loopback only
        let e = EfaUdpEmu {
            ip: ia,
            fabric_port: port,
        }
        .open()
        .map(|_| ())
        .unwrap_err();
        assert!(e.contains("emulated EFA at 127.0.0.21"), "{e}");
        let e = open_remote(
            &Family::Efa(None),
            Ipv4Addr::new(10, 0, 0, 1),
            port,
            Identify,
        )
        .map(|_| ())
        .unwrap_err();
        assert!(e.contains("UDP fabric"), "{e}");
        let b = EfaUdpEmu {
            ip: ib,
            fabric_port: port,
        }
        .open()
        .unwrap();
        srd_exchange(a, b);
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn efas_on_an_ethernet_link_open_through_open_on_and_exchange_data() {
        let (ia, ib) = (Ipv4Addr::new(10, 79, 1, 1), Ipv4Addr::new(10, 79, 1, 2));
        let eth = |local, remote| fabric::Fabric::Eth { local, remote };
        let (v, _, gid, label, check) =
            open_on(&Family::Efa(None), ia, eth(48180, 48181), None, Identify).unwrap();
        assert_eq!(v, 0x1d0f);
        assert_eq!(gid, Gid::from_ipv4(ia.octets()));
        assert!(
            label.contains("127.0.0.1:48180 -> 127.0.0.1:48181"),
            "{label}"
        );
        check.unwrap();

        let mac = [0x02, 0, 0, 0x79, 1, 1];
        let a = EfaEthEmu {
            ip: ia,
            local: 48182,
            remote: 48183,
            mac: Some(mac),
        }
        .open()
        .unwrap();
        assert_eq!(a.mac, mac);
        let r = a.backing.neighbor_resolver().expect("ARP");
        // nobody answered yet: "not yet"
        assert!(matches!(
            r.resolve_neighbor(Ipv4Addr::new(10, 79, 1, 9)),
            Ok(None)
        ));
        let e = open_on(&Family::Efa(None), ia, eth(48182, 48184), None, Identify)
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("Ethernet link"), "{e}");
        let b = EfaEthEmu {
            ip: ib,
            local: 48183,
            remote: 48182,
            mac: None,
        }
        .open()
        .unwrap();
        srd_exchange(a, b);
    }
}
