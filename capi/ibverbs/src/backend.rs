//! The device behind the C library: which one (`RDMA_STACK_DEVICE`), opening it once per
//! process, and an object-safe view of its provider for the exported calls.

use std::any::Any;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, Weak};

use device_open::{Device, Open, Opened};
use verbs::{DeviceAttr, Error, Gid, PortAttr, Provider};

/// The environment variable naming the device.
pub const DEVICE_ENV: &str = "RDMA_STACK_DEVICE";

/// The UDP fabric's port when `emu-udp:IP` names none (the tools' default too).
pub const DEFAULT_FABRIC_PORT: u16 = 4791;

/// The address of the in-process emulated NIC when `emu` names none.
pub const DEFAULT_EMU_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// Which device this process uses, from [`DEVICE_ENV`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// `emu` or `emu:IP` (the default: `emu:127.0.0.1`): an emulated mlx5 NIC in this process,
    /// alone in its world.
    InProcess(Ipv4Addr),
    /// `emu-udp:IP` or `emu-udp:IP:PORT`: an emulated mlx5 NIC on the UDP fabric (port
    /// [`DEFAULT_FABRIC_PORT`] unless given), reaching other processes' NICs.
    Udp(Ipv4Addr, u16),
    /// `vfio:BDF@IP`: a ConnectX function through VFIO, GID 0 set to `IP`.
    Vfio(String, Ipv4Addr),
}

impl Spec {
    /// Parses a spec; `None` (the variable unset or empty) gives the default.
    pub fn parse(s: Option<&str>) -> Result<Spec, String> {
        let s = match s {
            None | Some("") => return Ok(Spec::InProcess(DEFAULT_EMU_IP)),
            Some(s) => s,
        };
        let ip = |t: &str| {
            t.parse::<Ipv4Addr>()
                .map_err(|_| format!("{DEVICE_ENV}={s}: '{t}' is not an IPv4 address"))
        };
        if s == "emu" {
            return Ok(Spec::InProcess(DEFAULT_EMU_IP));
        }
        if let Some(a) = s.strip_prefix("emu:") {
            return Ok(Spec::InProcess(ip(a)?));
        }
        if let Some(rest) = s.strip_prefix("emu-udp:") {
            let (a, port) = match rest.split_once(':') {
                None => (rest, DEFAULT_FABRIC_PORT),
                Some((a, p)) => (
                    a,
                    p.parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| format!("{DEVICE_ENV}={s}: '{p}' is not a UDP port"))?,
                ),
            };
            return Ok(Spec::Udp(ip(a)?, port));
        }
        if let Some(rest) = s.strip_prefix("vfio:") {
            let (bdf, a) = rest
                .split_once('@')
                .ok_or_else(|| format!("{DEVICE_ENV}={s}: vfio needs BDF@IP"))?;
            if bdf.is_empty() {
                return Err(format!("{DEVICE_ENV}={s}: vfio needs a PCI address"));
            }
            return Ok(Spec::Vfio(bdf.to_string(), ip(a)?));
        }
        Err(format!(
            "{DEVICE_ENV}={s}: one of emu[:IP], emu-udp:IP[:PORT], vfio:BDF@IP"
        ))
    }
}

/// A protection domain of some provider.
pub type AnyPd = Box<dyn Any + Send + Sync>;

/// What the exported calls need of an opened device, whatever its provider type.
pub trait Backend: Send + Sync {
    /// `ibv_query_device`.
    fn query_device(&self) -> Result<DeviceAttr, Error>;
    /// `ibv_query_port`.
    fn query_port(&self, port: u8) -> Result<PortAttr, Error>;
    /// `ibv_query_gid`.
    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, Error>;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<AnyPd, Error>;
    /// `ibv_dealloc_pd`: on failure the PD back when it is still valid.
    fn dealloc_pd(&self, pd: AnyPd) -> Result<(), (Error, Option<AnyPd>)>;
    /// The port's MAC (the node GUID derives from it).
    fn mac(&self) -> [u8; 6];
}

/// An opened device; shut down when the last context lets it go.
struct Held<D: Device> {
    opened: Option<Opened<D>>,
    /// The in-process NIC's world (kept alive as long as the device).
    _world: Option<Arc<nic_testbed::World>>,
}

impl<D: Device> Drop for Held<D> {
    fn drop(&mut self) {
        if let Some(o) = self.opened.take() {
            let Opened { dev, backing, .. } = o;
            // Objects the program left behind make the shutdown fail; nothing to report
            // to at this point (the program closed the device).
            let _ = Device::shutdown(dev);
            drop(backing);
        }
    }
}

impl<D: Device> Held<D> {
    fn dev(&self) -> Result<&D, Error> {
        self.opened.as_ref().map(|o| &o.dev).ok_or(Error::NoDevice)
    }
}

impl<D> Backend for Held<D>
where
    D: Device,
    D::Pd: 'static,
{
    fn query_device(&self) -> Result<DeviceAttr, Error> {
        self.dev()?.query_device()
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        self.dev()?.query_port(port)
    }

    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, Error> {
        self.dev()?.query_gid(port, index)
    }

    fn alloc_pd(&self) -> Result<AnyPd, Error> {
        Ok(Box::new(Provider::alloc_pd(self.dev()?)?))
    }

    fn dealloc_pd(&self, pd: AnyPd) -> Result<(), (Error, Option<AnyPd>)> {
        let pd = match pd.downcast::<D::Pd>() {
            Ok(pd) => *pd,
            Err(other) => return Err((Error::InvalidArgument, Some(other))),
        };
        let dev = match self.dev() {
            Ok(d) => d,
            Err(e) => return Err((e, Some(Box::new(pd)))),
        };
        Provider::dealloc_pd(dev, pd).map_err(|e| (e.error, e.object.map(|p| Box::new(p) as AnyPd)))
    }

    fn mac(&self) -> [u8; 6] {
        self.opened.as_ref().map(|o| o.mac).unwrap_or_default()
    }
}

fn held<D>(o: Opened<D>, world: Option<Arc<nic_testbed::World>>) -> Arc<dyn Backend>
where
    D: Device,
    D::Pd: 'static,
{
    Arc::new(Held {
        opened: Some(o),
        _world: world,
    })
}

/// Opens the device `spec` names.
fn open(spec: &Spec) -> Result<Arc<dyn Backend>, String> {
    match spec {
        Spec::InProcess(ip) => {
            let world = nic_testbed::World::new(1);
            let o = device_open::InProcess {
                world: &world,
                ip: *ip,
                profile: nic_emulator::Profile {
                    mac: device_open::mac_for(*ip),
                    ..nic_emulator::Profile::default()
                },
            }
            .open()?;
            Ok(held(o, Some(world)))
        }
        Spec::Udp(ip, port) => Ok(held(
            device_open::UdpEmu {
                ip: *ip,
                fabric_port: *port,
            }
            .open()?,
            None,
        )),
        Spec::Vfio(bdf, ip) => Ok(held(device_open::VfioNic { bdf, ip: *ip }.open()?, None)),
    }
}

/// The process's opened device (shared by every context on it).
static OPENED: Mutex<Option<Weak<dyn Backend>>> = Mutex::new(None);

/// The opened device for `spec`: the one already open, or a new one.
pub fn acquire(spec: &Spec) -> Result<Arc<dyn Backend>, String> {
    let mut g = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = g.as_ref().and_then(Weak::upgrade) {
        return Ok(b);
    }
    let b = open(spec)?;
    *g = Some(Arc::downgrade(&b));
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_their_defaults() {
        assert_eq!(Spec::parse(None), Ok(Spec::InProcess(DEFAULT_EMU_IP)));
        assert_eq!(Spec::parse(Some("")), Ok(Spec::InProcess(DEFAULT_EMU_IP)));
        assert_eq!(
            Spec::parse(Some("emu")),
            Ok(Spec::InProcess(DEFAULT_EMU_IP))
        );
        assert_eq!(
            Spec::parse(Some("emu:127.0.0.5")),
            Ok(Spec::InProcess(Ipv4Addr::new(127, 0, 0, 5)))
        );
        assert_eq!(
            Spec::parse(Some("emu-udp:127.0.0.2")),
            Ok(Spec::Udp(Ipv4Addr::new(127, 0, 0, 2), DEFAULT_FABRIC_PORT))
        );
        assert_eq!(
            Spec::parse(Some("emu-udp:127.0.0.2:5000")),
            Ok(Spec::Udp(Ipv4Addr::new(127, 0, 0, 2), 5000))
        );
        assert_eq!(
            Spec::parse(Some("vfio:0000:01:00.0@10.0.0.1")),
            Ok(Spec::Vfio(
                "0000:01:00.0".into(),
                Ipv4Addr::new(10, 0, 0, 1)
            ))
        );
        for bad in [
            "mlx5_0",
            "emu:x",
            "emu-udp:",
            "emu-udp:127.0.0.2:0",
            "emu-udp:127.0.0.2:99999",
            "vfio:0000:01:00.0",
            "vfio:@10.0.0.1",
        ] {
            assert!(Spec::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
