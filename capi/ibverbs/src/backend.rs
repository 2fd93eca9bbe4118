//! The device behind the C library: which one (`RDMA_STACK_DEVICE`), opening it once per
//! process, and an object-safe view of its provider for the exported calls.

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use device_open::Open;

pub use crate::stack::Backend;
use crate::stack::Stack;

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

/// Opens the device `spec` names and starts the stack on it.
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
            // the world lives as long as the process (so does the stack)
            std::mem::forget(world);
            Ok(Stack::start(o, None)?)
        }
        Spec::Udp(ip, port) => Ok(Stack::start(
            device_open::UdpEmu {
                ip: *ip,
                fabric_port: *port,
            }
            .open()?,
            Some(Arc::new(nic_testbed::udp::UdpResolver)),
        )?),
        Spec::Vfio(bdf, ip) => Ok(Stack::start(
            device_open::VfioNic { bdf, ip: *ip }.open()?,
            None,
        )?),
    }
}

/// The process's stack: opened on first use, kept until the process exits (the connection
/// manager's ids, the progress thread and C objects the program never freed refer to it).
static OPENED: OnceLock<Result<Arc<dyn Backend>, String>> = OnceLock::new();

/// The stack for `spec` (the same one for every caller).
pub fn acquire(spec: &Spec) -> Result<Arc<dyn Backend>, String> {
    OPENED.get_or_init(|| open(spec)).clone()
}

/// The stack for `spec`, if it opens.
pub fn acquire_ref(spec: &Spec) -> Option<&'static Arc<dyn Backend>> {
    OPENED.get_or_init(|| open(spec)).as_ref().ok()
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
