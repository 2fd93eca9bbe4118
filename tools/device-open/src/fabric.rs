//! Where a tool's emulated NIC lives, as `--fabric` names it (`udp:PORT` or
//! `eth:LOCAL,REMOTE`), `--mac`, and the Ethernet link's NIC: what rping and the storage
//! tools share, so that each runs on a QEMU socket-netdev link the same way.
//!
//! ```
//! use device_open::fabric::{Fabric, parse_fabric, parse_mac};
//! assert_eq!(parse_fabric("udp:4791"), Ok(Fabric::Udp(4791)));
//! assert_eq!(parse_fabric("eth:48030,48031"), Ok(Fabric::Eth { local: 48030, remote: 48031 }));
//! assert!(parse_fabric("eth:1,1").is_err());
//! assert_eq!(parse_mac("02:00:00:77:00:01"), Ok([2, 0, 0, 0x77, 0, 1]));
//! ```

use std::net::Ipv4Addr;
#[cfg(feature = "emulator")]
use std::time::{Duration, Instant};

/// Where a server's or a client's emulated NIC lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// The UDP fabric on 127.0.0.0/8: every NIC's socket on this port.
    Udp(u16),
    /// An Ethernet link in QEMU's socket-netdev format: our socket on 127.0.0.1:`local`, the
    /// far end's on `remote`.
    Eth {
        /// Our UDP port.
        local: u16,
        /// The far end's UDP port.
        remote: u16,
    },
}

/// A UDP port (1..=65535); the error names `what`.
pub fn parse_port(v: &str, what: &str) -> Result<u16, String> {
    match v.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(format!("invalid {what} {v:?}")),
    }
}

/// Parses `udp:PORT` or `eth:LOCAL,REMOTE` (two different ports).
pub fn parse_fabric(v: &str) -> Result<Fabric, String> {
    if let Some(p) = v.strip_prefix("udp:") {
        return Ok(Fabric::Udp(parse_port(p, "fabric port")?));
    }
    if let Some(rest) = v.strip_prefix("eth:") {
        let Some((l, r)) = rest.split_once(',') else {
            return Err(format!(
                "invalid fabric {v:?}: eth:LOCAL,REMOTE (two UDP ports)"
            ));
        };
        let (local, remote) = (parse_port(l, "UDP port")?, parse_port(r, "UDP port")?);
        if local == remote {
            return Err(format!(
                "invalid fabric {v:?}: LOCAL and REMOTE must differ"
            ));
        }
        return Ok(Fabric::Eth { local, remote });
    }
    Err(format!(
        "invalid fabric {v:?} (udp:PORT or eth:LOCAL,REMOTE)"
    ))
}

/// Parses a unicast, non-zero MAC `xx:xx:xx:xx:xx:xx`.
pub fn parse_mac(v: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = v.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("invalid MAC {v:?} (xx:xx:xx:xx:xx:xx)"));
    }
    for (b, p) in m.iter_mut().zip(&parts) {
        *b = match (p.len(), u8::from_str_radix(p, 16)) {
            (1 | 2, Ok(x)) => x,
            _ => return Err(format!("invalid MAC {v:?} (xx:xx:xx:xx:xx:xx)")),
        };
    }
    if m[0] & 1 != 0 || m == [0; 6] {
        return Err(format!("invalid MAC {v:?}: multicast or zero"));
    }
    Ok(m)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Whether `ip` can be a NIC's address on the virtual wire of an Ethernet link (unicast, not
/// loopback: the link itself uses 127.0.0.1).
pub fn wire_address_ok(ip: Ipv4Addr) -> bool {
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast())
}

/// The emulated NIC at `ip` on the Ethernet link from 127.0.0.1:`local` to 127.0.0.1:`remote`,
/// with MAC `mac` (default [`crate::mac_for`]`(ip)`), in a connection manager configured by
/// `cfg` (ARP as its address resolution, see [`nic_testbed::EthNic`]).
#[cfg(feature = "emulator")]
pub fn eth_nic(
    ip: Ipv4Addr,
    local: u16,
    remote: u16,
    mac: Option<[u8; 6]>,
    cfg: cm::CmConfig,
) -> Result<nic_testbed::EthNic, String> {
    let mac = mac.unwrap_or_else(|| crate::mac_for(ip));
    let link = nic_testbed::eth::loopback_link(local, remote, mac);
    nic_testbed::EthNic::start(link, ip, cfg).map_err(|e| {
        format!("emulated NIC at {ip} on the Ethernet link 127.0.0.1:{local} -> :{remote}: {e}")
    })
}

/// Resolves `dst`'s MAC by ARP on `nic` (a round of requests every 2 s until `timeout`).
#[cfg(feature = "emulator")]
pub fn resolve(
    nic: &nic_testbed::EthNic,
    dst: Ipv4Addr,
    timeout: Duration,
) -> Result<[u8; 6], String> {
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match nic.resolve(dst, left.min(Duration::from_secs(2))) {
            Ok(Some(mac)) => return Ok(mac),
            Ok(None) if Instant::now() < end => {}
            Ok(None) => {
                return Err(format!(
                    "no ARP reply from {dst} within {} s",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("resolving {dst}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabrics_and_macs_parse_and_refuse() {
        assert_eq!(parse_fabric("udp:47000"), Ok(Fabric::Udp(47000)));
        for bad in ["eth:1", "eth:1,1", "eth:0,1", "tcp:1", "udp:0", "udp:x"] {
            assert!(parse_fabric(bad).is_err(), "{bad}");
        }
        for bad in [
            "01:00:00:00:00:01",
            "00:00:00:00:00:00",
            "02:00:00:00:00",
            "zz:0:0:0:0:1",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        assert_eq!(fmt_mac(&[2, 0, 0, 0x77, 0, 0xab]), "02:00:00:77:00:ab");
        assert!(wire_address_ok(Ipv4Addr::new(10, 77, 0, 1)));
        assert!(!wire_address_ok(Ipv4Addr::new(127, 0, 0, 1)));
        assert!(!wire_address_ok(Ipv4Addr::new(224, 0, 0, 1)));
    }
}
