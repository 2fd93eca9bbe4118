//! Opens a verbs [`Provider`] for the tools (`rperf`, `rping`) from a device spec, so that
//! their code is written once, generic over the provider, and compiled per device family.
//!
//! - [`Device`]: what the tools need of a provider beyond the verbs (its MAC for the RoCE
//!   path, its firmware version for banners, an orderly shutdown). Implemented for the mlx5
//!   driver over any register backend; another family (EFA) implements it for its own driver.
//! - [`Open`]: one way to get a device, ready for RoCE (probed, GID 0 set to its IPv4 address):
//!   [`VfioNic`] (a real ConnectX function through Linux VFIO), and with the `emulator` feature
//!   [`UdpEmu`] (an emulated NIC on the UDP fabric, real time, its own poller thread) and
//!   [`InProcess`] (an emulated NIC in a `nic_testbed::World`, the embedded modes).
//! - [`Family`] parses `--device` (`emu`, `vfio:BDF`, `efa[:NAME]`) and [`open_remote`] opens
//!   the family's device and hands it to a [`WithDevice`], whose `run` is generic over the
//!   device type: the hot loops inside are monomorphised, never behind `dyn`.
//!
//! A crate of its own (not a module of either tool) so that both tools share it, and so that
//! the emulator is an optional dependency here: built without `emulator`, this crate (and a
//! tool on top of it) links the mlx5 driver and VFIO only, and an `emu` spec is a clear "not
//! available" error instead of a build dependency.

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

    fn open(self) -> Result<Opened<VfioDevice>, String> {
        let bdf = self.bdf;
        let at = vfio_attach::attach(bdf, &vfio_attach::AttachOptions::default())
            .map_err(|e| format!("--device vfio:{bdf}: {e}"))?;
        let dma = at
            .dma(vfio_attach::DmaOptions::default())
            .map_err(|e| format!("--device vfio:{bdf}: DMA memory: {e}"))?;
        let clock = RealTime::new();
        let dev = mlx5::Device::probe(at.bar(), dma, clock, mlx5::Config::default())
            .map_err(|e| format!("--device vfio:{bdf}: probe: {e:?}"))?;
        ready(
            dev,
            self.ip,
            format!("mlx5 at {bdf} (VFIO)"),
            Clock::new(clock),
            Backing(Inner::Vfio(at)),
        )
    }
}

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

/// A device family as `--device` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Family {
    /// `emu`: emulated mlx5 NICs (in-process, or on the UDP fabric).
    Emu,
    /// `vfio:BDF`: a ConnectX function through VFIO.
    Vfio(String),
    /// `efa` or `efa:NAME`: an AWS EFA device.
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
            "'{s}': one of emu (emulated NICs), vfio:BDF (mlx5 through VFIO), efa[:NAME]"
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
            Family::Efa(_) => Err("efa: not available: this build has no EFA provider".into()),
        }
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
        Family::Vfio(bdf) => Ok(user.run(VfioNic { bdf, ip }.open()?)),
        #[cfg(feature = "emulator")]
        Family::Emu => Ok(user.run(UdpEmu { ip, fabric_port }.open()?)),
        _ => {
            let _ = fabric_port;
            Err(format!("{family:?}: not available"))
        }
    }
}

/// An emulated NIC on an Ethernet link in the format of QEMU's socket netdev (`--fabric
/// eth:LOCAL,REMOTE` of both tools): raw frames over two 127.0.0.1 UDP sockets, ARP on the
/// virtual wire; how the tools meet Linux soft-RoCE in a guest.
#[cfg(feature = "emulator")]
pub mod eth {
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::{Duration, Instant};

    use cm::CmConfig;
    use nic_emulator::roce_wire::fabric::{ArpConfig, EthLink};
    pub use nic_testbed::{EthDevice, EthNic};

    /// Delay before our ARP replies: Linux's rdma_cm can miss a reply that comes back before
    /// its resolve request is queued, and then waits 2 s.
    pub const ARP_REPLY_DELAY: Duration = Duration::from_millis(20);

    /// `aa:bb:cc:dd:ee:ff`.
    pub fn fmt_mac(m: &[u8; 6]) -> String {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The emulated NIC at `ip` with `mac` on the link from our socket 127.0.0.1:`local` to
    /// the far end's 127.0.0.1:`remote`, in a connection manager configured by `cfg`.
    pub fn start(
        ip: Ipv4Addr,
        local: u16,
        remote: u16,
        mac: [u8; 6],
        cfg: CmConfig,
    ) -> Result<EthNic, String> {
        let sa = |p| SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
        let mut link = EthLink::new(sa(local), sa(remote), mac);
        link.arp = ArpConfig {
            reply_delay: ARP_REPLY_DELAY,
            ..ArpConfig::default()
        };
        EthNic::start(link, ip, cfg).map_err(|e| {
            format!("emulated NIC at {ip} on the Ethernet link 127.0.0.1:{local} -> :{remote}: {e}")
        })
    }

    /// Resolves `dst`'s MAC by ARP (a round of requests every 2 s) within `timeout`, and
    /// enters it in the NIC's connection manager.
    pub fn resolve(nic: &EthNic, dst: Ipv4Addr, timeout: Duration) -> Result<[u8; 6], String> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match nic.resolve(dst, left.min(Duration::from_secs(2))) {
                Ok(Some(mac)) => return Ok(mac),
                Ok(None) if Instant::now() < end => {}
                Ok(None) => {
                    return Err(format!(
                        "no ARP reply from {dst} within {:.0} s",
                        timeout.as_secs_f64()
                    ));
                }
                Err(e) => return Err(format!("resolving {dst}: {e}")),
            }
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
        assert!(efa.available().unwrap_err().contains("not available"));
        assert_eq!(Family::Vfio("x".into()).available(), Ok(()));
        assert_eq!(Family::Emu.available().is_ok(), cfg!(feature = "emulator"));
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
}
