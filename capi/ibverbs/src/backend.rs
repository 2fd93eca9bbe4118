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
    /// `emu-eth:IP:LOCAL,PEER`: an emulated mlx5 NIC at `IP` on an Ethernet link in QEMU's
    /// socket-netdev format (frames from UDP 127.0.0.1:LOCAL to 127.0.0.1:PEER, as
    /// `-netdev socket,udp=127.0.0.1:LOCAL,localaddr=127.0.0.1:PEER` has them), peers found
    /// by ARP; `IP` is an address on that virtual wire.
    Eth {
        /// The NIC's address on the wire.
        ip: Ipv4Addr,
        /// The link's local UDP port.
        local: u16,
        /// The peer's UDP port.
        peer: u16,
    },
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
        if let Some(rest) = s.strip_prefix("emu-eth:") {
            let form = "emu-eth:IP:LOCAL,PEER (this NIC's address on the virtual wire, then \
                        the link's two UDP ports on 127.0.0.1: ours and the peer's)";
            let (a, ports) = rest
                .split_once(':')
                .ok_or_else(|| format!("{DEVICE_ENV}={s}: {form}"))?;
            let (l, p) = ports
                .split_once(',')
                .ok_or_else(|| format!("{DEVICE_ENV}={s}: {form}"))?;
            let port = |t: &str| {
                t.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{DEVICE_ENV}={s}: '{t}' is not a UDP port; {form}"))
            };
            let (ip, local, peer) = (ip(a)?, port(l)?, port(p)?);
            if local == peer {
                return Err(format!(
                    "{DEVICE_ENV}={s}: the local and the peer's UDP port must differ"
                ));
            }
            if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
                return Err(format!(
                    "{DEVICE_ENV}={s}: {ip} is not a unicast address for the virtual wire \
                     (the link itself uses 127.0.0.1)"
                ));
            }
            return Ok(Spec::Eth { ip, local, peer });
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
            "{DEVICE_ENV}={s}: one of emu[:IP], emu-udp:IP[:PORT], emu-eth:IP:LOCAL,PEER, \
             vfio:BDF@IP"
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
        Spec::Udp(ip, port) => {
            let o = device_open::UdpEmu {
                ip: *ip,
                fabric_port: *port,
            }
            .open()?;
            let resolver = o.backing.neighbor_resolver();
            Ok(Stack::start(o, resolver)?)
        }
        Spec::Eth { ip, local, peer } => {
            let o = device_open::EthEmu {
                ip: *ip,
                local: *local,
                remote: *peer,
                mac: None,
            }
            .open()?;
            let resolver = o.backing.neighbor_resolver();
            Ok(Stack::start(o, resolver)?)
        }
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
            Spec::parse(Some("emu-eth:10.77.0.1:48030,48031")),
            Ok(Spec::Eth {
                ip: Ipv4Addr::new(10, 77, 0, 1),
                local: 48030,
                peer: 48031
            })
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

    #[test]
    fn an_ethernet_link_spec_says_what_is_wrong() {
        let err = |s: &str| Spec::parse(Some(s)).unwrap_err();
        // the form, for a value missing a part
        for bad in ["emu-eth:", "emu-eth:10.77.0.1", "emu-eth:10.77.0.1:48030"] {
            let e = err(bad);
            assert!(e.starts_with(&format!("{DEVICE_ENV}={bad}: ")), "{e}");
            assert!(e.contains("emu-eth:IP:LOCAL,PEER"), "{e}");
        }
        assert!(err("emu-eth:x:1,2").contains("'x' is not an IPv4 address"));
        let e = err("emu-eth:10.77.0.1:0,48031");
        assert!(e.contains("'0' is not a UDP port"), "{e}");
        let e = err("emu-eth:10.77.0.1:48030,70000");
        assert!(e.contains("'70000' is not a UDP port"), "{e}");
        assert!(err("emu-eth:10.77.0.1:48030,48030").contains("must differ"));
        for ip in ["127.0.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255"] {
            let e = err(&format!("emu-eth:{ip}:48030,48031"));
            assert!(e.contains("not a unicast address"), "{e}");
        }
        assert!(err("emu-ethx").contains("emu-eth:IP:LOCAL,PEER"));
    }
}
