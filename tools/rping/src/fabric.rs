//! The NICs rping runs on and the connections over them: both ends embedded on one in-process
//! fabric, or one end per process on the UDP fabric or on an Ethernet link in QEMU's
//! socket-netdev format (with ARP), and serving or connecting through the CM there.

use std::net::Ipv4Addr;
use std::time::Duration;

use cm::{AddrInfo, Cm, CmConfig, Neighbor, RaiFlags, getaddrinfo};
use nic_emulator::Profile;
use nic_hal::{Platform, RegisterIo};
use nic_testbed::{EmuDevice, EthNic, UdpDevice, UdpNic, World};
use verbs::Gid;

use device_open::{Family, Opened, WithDevice, open_remote};

use crate::Dev;
use crate::cli::{Fabric, Options};
use crate::exchange::{Pinged, Served, client, qp_attr, server};

pub(crate) const SERVER_IP: &str = "127.0.0.2";
pub(crate) const CLIENT_IP: &str = "127.0.0.1";

/// One emulated NIC probed, given its RoCE GID and added to the connection manager.
pub(crate) fn add_nic(cm: &Cm<EmuDevice>, tb: &nic_testbed::Testbed) -> Result<(), String> {
    let dev = tb
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    add_device(cm, dev, tb.ip())
}

/// A probed device given its RoCE GID (`ip`) and added to the connection manager.
pub(crate) fn add_device<R: RegisterIo, Pl: Platform>(
    cm: &Cm<mlx5::Device<R, Pl>>,
    dev: mlx5::Device<R, Pl>,
    ip: Ipv4Addr,
) -> Result<(), String> {
    let mac = dev.mac().map_err(|e| format!("mac: {e:?}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
        .map_err(|e| format!("set gid: {e:?}"))?;
    cm.add_device(dev, mac)
        .map_err(|(e, _)| format!("add_device: {e:?}"))?;
    Ok(())
}

/// Embedded mode: both ends in this process.
pub(crate) fn embedded(o: &Options) -> Result<Pinged, String> {
    let world = World::new(0x0072_7069_6e67);
    let ctb = world.nic(CLIENT_IP.parse().expect("ip"), Profile::default());
    let stb = world.nic(SERVER_IP.parse().expect("ip"), Profile::default());
    let cm = Cm::new(
        ctb.platform(),
        CmConfig {
            // a lost peer is an error, not a hang (virtual time)
            wait_limit_ns: Some(60_000_000_000),
            ..CmConfig::default()
        },
    );
    add_nic(&cm, &ctb)?;
    add_nic(&cm, &stb)?;
    let port = o.port.to_string();

    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(SERVER_IP), Some(&port), Some(&passive))
        .map_err(|e| format!("server: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr::<EmuDevice>();
    let listen = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("server: create_ep: {e:?}"))?;
    let r = (|| {
        listen
            .listen(0)
            .map_err(|e| format!("server: listen: {e:?}"))?;
        let hints = AddrInfo {
            ai_src_addr: Some(
                format!("{CLIENT_IP}:0")
                    .parse()
                    .map_err(|e| format!("{e:?}"))?,
            ),
            ..AddrInfo::default()
        };
        let res = getaddrinfo(Some(SERVER_IP), Some(&port), Some(&hints))
            .map_err(|e| format!("client: getaddrinfo: {e:?}"))?;
        let mut a = qp_attr::<EmuDevice>();
        let id = cm
            .create_ep(&res, None, Some(&mut a))
            .map_err(|e| format!("client: create_ep: {e:?}"))?;
        let r = std::thread::scope(|sc| {
            let srv = sc.spawn(|| server(&listen, o));
            let c = client(&id, o);
            let s = srv
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            match (c, s) {
                (Ok(c), Ok(s)) if s.pings == c.pings => Ok(c),
                (Ok(c), Ok(s)) => Err(format!(
                    "the server served {} pings, the client made {}",
                    s.pings, c.pings
                )),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            }
        });
        id.destroy_ep();
        r
    })();
    listen.destroy_ep();
    r
}

/// The MAC of the emulated NIC at `ip`: 02:00 and the address (the UDP fabric has no ARP, so
/// both ends derive it; the Ethernet fabric's default).
pub(crate) use device_open::mac_for;

pub(crate) use device_open::fabric::fmt_mac;

pub(crate) fn cm_config(o: &Options) -> CmConfig {
    CmConfig {
        wait_limit_ns: Some(o.timeout_s * 1_000_000_000),
        ..CmConfig::default()
    }
}

/// One end of a two-process run on the UDP fabric: an emulated NIC at `ip`, its device in a
/// connection manager whose neighbour table knows the NICs of `ip`'s /24.
pub(crate) struct UdpEnd {
    pub(crate) cm: Cm<UdpDevice>,
    // Last: the poller stops after the manager's objects are gone.
    pub(crate) _nic: UdpNic,
}

pub(crate) fn udp_end(ip: Ipv4Addr, fabric_port: u16, o: &Options) -> Result<UdpEnd, String> {
    let nic = UdpNic::new(
        ip,
        fabric_port,
        Profile {
            mac: mac_for(ip),
            ..Profile::default()
        },
    )
    .map_err(|e| format!("emulated NIC at {ip} (fabric UDP port {fabric_port}): {e}"))?;
    let cm = Cm::new(nic.platform(), cm_config(o));
    let dev = nic
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    add_device(&cm, dev, ip)?;
    add_subnet_neighbors(&cm, ip);
    Ok(UdpEnd { cm, _nic: nic })
}

/// Enters the NICs of `ip`'s /24 in the neighbour table with the UDP fabric's MAC rule (the
/// fabric has no ARP).
fn add_subnet_neighbors<P: Dev>(cm: &Cm<P>, ip: Ipv4Addr) {
    let [a, b, c, _] = ip.octets();
    for h in 1..=254 {
        let n = Ipv4Addr::new(a, b, c, h);
        if n != ip {
            cm.add_neighbor(n, Neighbor { mac: mac_for(n) });
        }
    }
}

/// What a server or a client on an opened device ends with.
enum Outcome {
    Served(Served),
    Pinged(Pinged),
}

/// A server (`dst` none) or client on a device `device-open` opens (`--device vfio:BDF`):
/// a connection manager of its own whose neighbour table knows `ip`'s /24 by the UDP
/// fabric's MAC rule.
struct OnDevice<'a> {
    o: &'a Options,
    dst: Option<Ipv4Addr>,
}

impl WithDevice for OnDevice<'_> {
    type Output = Result<Outcome, String>;

    fn run<D: Dev>(self, opened: Opened<D>) -> Self::Output {
        let Opened {
            dev,
            mac,
            ip,
            clock,
            backing,
            ..
        } = opened;
        let cm = Cm::new(clock, cm_config(self.o));
        cm.add_device(dev, mac)
            .map_err(|(e, _)| format!("add_device: {e:?}"))?;
        add_subnet_neighbors(&cm, ip);
        let r = match self.dst {
            None => serve_on(&cm, ip, self.o).map(Outcome::Served),
            Some(dst) => connect_on(&cm, ip, dst, self.o).map(Outcome::Pinged),
        };
        // The manager (and the device in it) before what keeps the device alive.
        drop(cm);
        drop(backing);
        r
    }
}

/// Runs a server or client on the `--device` family when it is not the emulated NIC;
/// `None` for `emu`.
fn on_device(o: &Options, ip: Ipv4Addr, dst: Option<Ipv4Addr>) -> Option<Result<Outcome, String>> {
    if o.device == Family::Emu {
        return None;
    }
    Some(match o.fabric {
        Fabric::Udp(p) => open_remote(&o.device, ip, p, OnDevice { o, dst }).and_then(|r| r),
        Fabric::Eth { .. } => Err("--fabric eth: is the emulated NIC's; not with --device".into()),
    })
}

/// One end on an Ethernet link: the emulated NIC at `ip` with its MAC on the wire (ARP
/// answered after Linux's rdma_cm is ready for it: `nic_testbed::eth::loopback_link`).
pub(crate) fn eth_end(
    ip: Ipv4Addr,
    local: u16,
    remote: u16,
    o: &Options,
) -> Result<EthNic, String> {
    device_open::fabric::eth_nic(ip, local, remote, o.mac, cm_config(o))
}

/// Where this process's NIC is, for messages.
pub(crate) fn where_(o: &Options, ip: Ipv4Addr) -> String {
    match o.fabric {
        Fabric::Udp(p) => format!("{ip}:{} (fabric UDP port {p})", o.port),
        Fabric::Eth { local, remote } => format!(
            "{ip}:{} (Ethernet link 127.0.0.1:{local} -> 127.0.0.1:{remote}, MAC {})",
            o.port,
            fmt_mac(&o.mac.unwrap_or_else(|| mac_for(ip)))
        ),
    }
}

/// Listens on the NIC at `ip` of `cm` and serves one connection.
pub(crate) fn serve_on<P: Dev>(cm: &Cm<P>, ip: Ipv4Addr, o: &Options) -> Result<Served, String> {
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ai_qp_type: crate::exchange::srd(o).then_some(verbs::QpType::Srd),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&ip.to_string()),
        Some(&o.port.to_string()),
        Some(&passive),
    )
    .map_err(|e| format!("server: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr::<P>();
    let listen = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("server: create_ep: {e:?}"))?;
    let r = listen
        .listen(0)
        .map_err(|e| format!("server: listen: {e:?}"))
        .and_then(|()| {
            eprintln!("rping: server: listening on {}", where_(o, ip));
            server(&listen, o)
        });
    listen.destroy_ep();
    r
}

/// Connects from the NIC at `src` of `cm` to the server at `dst` and pings.
pub(crate) fn connect_on<P: Dev>(
    cm: &Cm<P>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    o: &Options,
) -> Result<Pinged, String> {
    let hints = AddrInfo {
        ai_src_addr: Some(std::net::SocketAddr::from((src, 0))),
        ai_qp_type: crate::exchange::srd(o).then_some(verbs::QpType::Srd),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&dst.to_string()),
        Some(&o.port.to_string()),
        Some(&hints),
    )
    .map_err(|e| format!("client: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr::<P>();
    let id = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("client: create_ep: {e:?}"))?;
    let r = client(&id, o);
    id.destroy_ep();
    r
}

/// Shuts an Ethernet NIC down, reporting leaks with -d.
pub(crate) fn eth_shutdown(nic: EthNic, o: &Options) {
    match nic.shutdown() {
        Ok(live) if live == Default::default() => {}
        Ok(live) => {
            if o.debug {
                eprintln!("rping: device objects left at shutdown: {live:?}");
            }
        }
        Err(e) => {
            if o.debug {
                eprintln!("rping: shutdown: {e}");
            }
        }
    }
}

/// Server mode: listen on this process's NIC, serve one connection until the client
/// disconnects.
pub(crate) fn serve(o: &Options) -> Result<Served, String> {
    let default: Ipv4Addr = SERVER_IP.parse().expect("ip");
    let ip = o.addr.unwrap_or(default);
    if let Some(r) = on_device(o, ip, None) {
        return match r? {
            Outcome::Served(s) => Ok(s),
            Outcome::Pinged(_) => Err("server: ended as a client".into()),
        };
    }
    match o.fabric {
        Fabric::Udp(p) => {
            let end = udp_end(ip, p, o)?;
            serve_on(&end.cm, ip, o)
        }
        Fabric::Eth { local, remote } => {
            let nic = eth_end(ip, local, remote, o)?;
            let r = serve_on(&nic.cm, ip, o);
            eth_shutdown(nic, o);
            r
        }
    }
}

/// Client mode: connect from this process's NIC to the server at `-a`.
pub(crate) fn connect(o: &Options) -> Result<Pinged, String> {
    let default: Ipv4Addr = CLIENT_IP.parse().expect("ip");
    let src = o.src.unwrap_or(default);
    let Some(dst) = o.addr else {
        return Err("client: no server address".into());
    };
    if let Some(r) = on_device(o, src, Some(dst)) {
        return match r? {
            Outcome::Pinged(p) => Ok(p),
            Outcome::Served(_) => Err("client: ended as a server".into()),
        };
    }
    match o.fabric {
        Fabric::Udp(p) => {
            let end = udp_end(src, p, o)?;
            connect_on(&end.cm, src, dst, o)
        }
        Fabric::Eth { local, remote } => {
            let nic = eth_end(src, local, remote, o)?;
            let r = resolve(&nic, dst, o).and_then(|()| connect_on(&nic.cm, src, dst, o));
            eth_shutdown(nic, o);
            r
        }
    }
}

/// Resolves the server's MAC by ARP (a round of requests every 2 s until `--timeout`).
pub(crate) fn resolve(nic: &EthNic, dst: Ipv4Addr, o: &Options) -> Result<(), String> {
    let mac = device_open::fabric::resolve(nic, dst, Duration::from_secs(o.timeout_s))
        .map_err(|e| format!("client: {e}"))?;
    if o.debug {
        println!("client: {dst} is at {}", fmt_mac(&mac));
    }
    Ok(())
}
