//! `rdma_getaddrinfo`: numeric IPv4 addresses and ports into an [`AddrInfo`] for
//! [`Cm::create_ep`](crate::Cm::create_ep).
//!
//! There is no DNS, no services database, no SA and no ibacm here: a node must be a dotted
//! IPv4 address and a service a port number. Within that, the results and errors are
//! librdmacm's (`docs/cm.md#address-resolution`), including glibc's `EAI_*` codes returned as they
//! are.

use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use verbs::QpType;

use crate::error::{Error, GaiError};
use crate::mad::port_space;

/// An rdma_cm port space (`enum rdma_ucm_port_space`). Any value can be named; ids accept
/// only the four below (others: EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: PortSpace = PortSpace(port_space::IPOIB);
    /// `RDMA_PS_TCP`: reliable connected service (RC QPs, REQ/REP/RTU).
    pub const TCP: PortSpace = PortSpace(port_space::TCP);
    /// `RDMA_PS_UDP`: datagram service (UD QPs, SIDR).
    pub const UDP: PortSpace = PortSpace(port_space::UDP);
    /// `RDMA_PS_IB`: either, by QP type.
    pub const IB: PortSpace = PortSpace(port_space::IB);

    /// Whether the kernel's CREATE_ID accepts it.
    pub const fn is_valid(self) -> bool {
        matches!(
            self.0,
            port_space::IPOIB | port_space::TCP | port_space::UDP | port_space::IB
        )
    }

    /// The QP type `rdma_create_id` gives an id of this port space: UD for UDP and IPoIB,
    /// RC otherwise.
    pub const fn default_qp_type(self) -> QpType {
        match self.0 {
            port_space::UDP | port_space::IPOIB => QpType::Ud,
            _ => QpType::Rc,
        }
    }
}

/// Address family of [`AddrInfo::ai_family`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Family {
    /// `AF_UNSPEC`.
    #[default]
    Unspec,
    /// `AF_INET`.
    Inet,
    /// `AF_INET6` (not resolved here).
    Inet6,
    /// `AF_IB` (not resolved here).
    Ib,
}

/// `RAI_*` flags of [`AddrInfo::ai_flags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RaiFlags(pub u32);

impl RaiFlags {
    /// `RAI_PASSIVE`: the address is for a listener (`ai_src_addr`).
    pub const PASSIVE: RaiFlags = RaiFlags(1);
    /// `RAI_NUMERICHOST`: the node is a numeric address (always so here).
    pub const NUMERICHOST: RaiFlags = RaiFlags(2);
    /// `RAI_NOROUTE`: do not resolve a route.
    pub const NOROUTE: RaiFlags = RaiFlags(4);
    /// `RAI_FAMILY`: `ai_family` is binding.
    pub const FAMILY: RaiFlags = RaiFlags(8);
    /// `RAI_SA`: resolve through the IB subnet administrator.
    pub const SA: RaiFlags = RaiFlags(0x10);
    /// `RAI_DNS`: the node is a DNS name.
    pub const DNS: RaiFlags = RaiFlags(0x20);

    /// Whether every bit of `f` is set.
    pub const fn contains(self, f: RaiFlags) -> bool {
        self.0 & f.0 == f.0
    }
}

impl core::ops::BitOr for RaiFlags {
    type Output = RaiFlags;
    fn bitor(self, r: RaiFlags) -> RaiFlags {
        RaiFlags(self.0 | r.0)
    }
}

/// `struct rdma_addrinfo`: hints in, result out (one entry: librdmacm uses only the first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddrInfo {
    /// `RAI_*` flags.
    pub ai_flags: RaiFlags,
    /// Address family.
    pub ai_family: Family,
    /// QP type (`None` = 0: from the socket type, RC for streams, UD for datagrams).
    pub ai_qp_type: Option<QpType>,
    /// Port space (`None` = 0: TCP for RC, UDP for UD).
    pub ai_port_space: Option<PortSpace>,
    /// Source address: where a passive endpoint listens, or the active side's source.
    pub ai_src_addr: Option<SocketAddr>,
    /// Destination address of an active endpoint.
    pub ai_dst_addr: Option<SocketAddr>,
}

/// Parses a strict dotted-quad IPv4 address.
fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut o = [0u8; 4];
    let mut parts = s.split('.');
    for b in &mut o {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *b = p.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(o))
}

/// `rdma_getaddrinfo(node, service, hints, &res)` for numeric IPv4 addresses.
///
/// * all three absent → EINVAL;
/// * `RAI_SA`: with a node or `RAI_DNS` → EOPNOTSUPP, else ENOENT (RoCE has no SA);
/// * with a node or a service, glibc's rules: the service must be a port number
///   (`EAI_SERVICE`), the node a dotted IPv4 address (`EAI_NONAME` for names: no DNS;
///   `EAI_FAMILY` for IPv6 literals and for an IPv6 or AF_IB `ai_family`), the QP type and
///   the port space's protocol must agree (`EAI_SOCKTYPE`). No node gives `0.0.0.0` for a
///   passive result and `127.0.0.1` otherwise. `RAI_PASSIVE` puts the address in
///   `ai_src_addr`, else in `ai_dst_addr`; the QP type defaults to RC (UD for the UDP and
///   IPoIB port spaces) and the port space to TCP for RC, UDP for UD;
/// * with neither: flags, family, QP type, port space and destination come from the hints;
/// * a result without a source address takes the hints' one.
///
/// The pure parsing: [`Cm::getaddrinfo`](crate::Cm::getaddrinfo) adds librdmacm's device
/// check (ENODEV without RDMA devices). There is no ibacm route lookup
/// (so no AF_IB head entry and no `ai_connect`).
///
/// ```
/// use cm::{getaddrinfo, AddrInfo, RaiFlags, PortSpace};
/// let hints = AddrInfo { ai_flags: RaiFlags::PASSIVE, ..Default::default() };
/// let res = getaddrinfo(None, Some("7471"), Some(&hints)).unwrap();
/// assert_eq!(res.ai_src_addr, Some("0.0.0.0:7471".parse().unwrap()));
/// assert_eq!(res.ai_port_space, Some(PortSpace::TCP));
/// ```
pub fn getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<&AddrInfo>,
) -> Result<AddrInfo, Error> {
    if node.is_none() && service.is_none() && hints.is_none() {
        return Err(Error::InvalidArgument);
    }
    let zero = AddrInfo::default();
    let hints = hints.unwrap_or(&zero);
    if hints.ai_flags.contains(RaiFlags::SA) {
        if node.is_some() || hints.ai_flags.contains(RaiFlags::DNS) {
            return Err(Error::NotSupported);
        }
        return Err(Error::NoEntry);
    }
    let mut res = if node.is_some() || service.is_some() {
        libc_style(node, service, hints)?
    } else {
        AddrInfo {
            ai_flags: hints.ai_flags,
            ai_family: hints.ai_family,
            ai_qp_type: hints.ai_qp_type,
            ai_port_space: hints.ai_port_space,
            ai_src_addr: None,
            ai_dst_addr: hints.ai_dst_addr,
        }
    };
    if res.ai_src_addr.is_none() && hints.ai_src_addr.is_some() {
        res.ai_src_addr = hints.ai_src_addr;
    }
    Ok(res)
}

/// Stream (TCP-like) or datagram socket type, as librdmacm maps QP types for glibc.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sock {
    Stream,
    Dgram,
}

fn libc_style(
    node: Option<&str>,
    service: Option<&str>,
    hints: &AddrInfo,
) -> Result<AddrInfo, Error> {
    let gai = |g| Err(Error::Gai(g));
    match hints.ai_family {
        Family::Unspec | Family::Inet => {}
        // AF_IB is not passed to libc; IPv6 is not resolved by this library
        Family::Inet6 | Family::Ib => return gai(GaiError::Family),
    }
    // socket type from the QP type, protocol from the port space
    let sock = match hints.ai_qp_type {
        None => None,
        Some(QpType::Rc) => Some(Sock::Stream),
        // SRD, EFA's reliable datagram, is a datagram type of the UDP port space (librdmacm
        // has no SRD: an extension of ours)
        Some(QpType::Ud | QpType::Srd) => Some(Sock::Dgram),
        // QP1 is the connection manager's, not an endpoint's; a type added later has no
        // rdma_cm socket type
        Some(_) => return gai(GaiError::SockType),
    };
    let proto = hints.ai_port_space.and_then(|ps| match ps.0 {
        port_space::TCP => Some(Sock::Stream),
        port_space::UDP | port_space::IPOIB => Some(Sock::Dgram),
        _ => None, // IB (or unknown): by socket type
    });
    let kind = match (sock, proto) {
        (Some(s), Some(p)) if s != p => return gai(GaiError::SockType),
        (Some(s), _) => s,
        (None, Some(p)) => p,
        (None, None) => Sock::Stream,
    };
    let port = match service {
        None => 0,
        Some(s) => {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return gai(GaiError::Service);
            }
            match s.parse::<u16>() {
                Ok(p) => p,
                Err(_) => return gai(GaiError::Service),
            }
        }
    };
    let passive = hints.ai_flags.contains(RaiFlags::PASSIVE);
    let ip = match node {
        None if passive => Ipv4Addr::UNSPECIFIED,
        None => Ipv4Addr::LOCALHOST,
        Some(n) => match parse_ipv4(n) {
            Some(ip) => ip,
            None if n.contains(':') => return gai(GaiError::Family),
            None => return gai(GaiError::NoName),
        },
    };
    let addr = Some(SocketAddr::V4(SocketAddrV4::new(ip, port)));
    Ok(AddrInfo {
        ai_flags: if passive {
            RaiFlags::PASSIVE
        } else {
            RaiFlags::default()
        },
        ai_family: Family::Inet,
        ai_qp_type: Some(hints.ai_qp_type.unwrap_or(match kind {
            Sock::Stream => QpType::Rc,
            Sock::Dgram => QpType::Ud,
        })),
        ai_port_space: Some(hints.ai_port_space.unwrap_or(match kind {
            Sock::Stream => PortSpace::TCP,
            Sock::Dgram => PortSpace::UDP,
        })),
        ai_src_addr: if passive { addr } else { None },
        ai_dst_addr: if passive { None } else { addr },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn passive_and_active_results() {
        let passive = AddrInfo {
            ai_flags: RaiFlags::PASSIVE,
            ..Default::default()
        };
        let r = getaddrinfo(Some("127.0.0.2"), Some("7471"), Some(&passive)).unwrap();
        assert_eq!(r.ai_flags, RaiFlags::PASSIVE);
        assert_eq!(r.ai_src_addr, v4("127.0.0.2:7471"));
        assert_eq!(r.ai_dst_addr, None);
        assert_eq!(
            (r.ai_family, r.ai_qp_type, r.ai_port_space),
            (Family::Inet, Some(QpType::Rc), Some(PortSpace::TCP))
        );
        // no node: the wildcard for a passive result, loopback for an active one
        let r = getaddrinfo(None, Some("1"), Some(&passive)).unwrap();
        assert_eq!(r.ai_src_addr, v4("0.0.0.0:1"));
        let r = getaddrinfo(None, Some("1"), None).unwrap();
        assert_eq!(r.ai_dst_addr, v4("127.0.0.1:1"));
        // no service: port 0
        let r = getaddrinfo(Some("10.0.0.1"), None, None).unwrap();
        assert_eq!(r.ai_dst_addr, v4("10.0.0.1:0"));
        assert_eq!(r.ai_flags, RaiFlags::default());
        // the hints' source goes into an active result
        let h = AddrInfo {
            ai_src_addr: v4("127.0.0.1:0"),
            ..Default::default()
        };
        let r = getaddrinfo(Some("127.0.0.2"), Some("7471"), Some(&h)).unwrap();
        assert_eq!(
            (r.ai_src_addr, r.ai_dst_addr),
            (v4("127.0.0.1:0"), v4("127.0.0.2:7471"))
        );
    }

    #[test]
    fn port_spaces_for_rc_and_ud() {
        let ud = AddrInfo {
            ai_qp_type: Some(QpType::Ud),
            ..Default::default()
        };
        let r = getaddrinfo(Some("1.2.3.4"), Some("7174"), Some(&ud)).unwrap();
        assert_eq!(
            (r.ai_qp_type, r.ai_port_space),
            (Some(QpType::Ud), Some(PortSpace::UDP))
        );
        let udp = AddrInfo {
            ai_port_space: Some(PortSpace::UDP),
            ..Default::default()
        };
        let r = getaddrinfo(Some("1.2.3.4"), Some("1"), Some(&udp)).unwrap();
        assert_eq!(r.ai_qp_type, Some(QpType::Ud));
        let ib_ud = AddrInfo {
            ai_port_space: Some(PortSpace::IB),
            ai_qp_type: Some(QpType::Ud),
            ..Default::default()
        };
        let r = getaddrinfo(Some("1.2.3.4"), Some("1"), Some(&ib_ud)).unwrap();
        assert_eq!(
            (r.ai_qp_type, r.ai_port_space),
            (Some(QpType::Ud), Some(PortSpace::IB))
        );
        let mismatch = AddrInfo {
            ai_port_space: Some(PortSpace::UDP),
            ai_qp_type: Some(QpType::Rc),
            ..Default::default()
        };
        assert_eq!(
            getaddrinfo(Some("1.2.3.4"), Some("1"), Some(&mismatch)),
            Err(Error::Gai(GaiError::SockType))
        );
    }

    #[test]
    fn errors_as_librdmacm_reports_them() {
        assert_eq!(getaddrinfo(None, None, None), Err(Error::InvalidArgument));
        assert_eq!(Error::InvalidArgument.return_value(), -1);
        let e = getaddrinfo(Some("server.example"), Some("7471"), None).unwrap_err();
        assert_eq!(
            (e, e.return_value(), e.errno()),
            (Error::Gai(GaiError::NoName), -2, 0)
        );
        assert_eq!(
            getaddrinfo(Some("127.0.0.1"), Some("http"), None),
            Err(Error::Gai(GaiError::Service))
        );
        assert_eq!(
            getaddrinfo(Some("127.0.0.1"), Some("65536"), None),
            Err(Error::Gai(GaiError::Service))
        );
        assert_eq!(
            getaddrinfo(Some("::1"), Some("1"), None),
            Err(Error::Gai(GaiError::Family))
        );
        assert_eq!(
            getaddrinfo(Some("1.2.3"), None, None),
            Err(Error::Gai(GaiError::NoName))
        );
        assert_eq!(
            getaddrinfo(Some("1.2.3.256"), None, None),
            Err(Error::Gai(GaiError::NoName))
        );
        let v6 = AddrInfo {
            ai_family: Family::Inet6,
            ..Default::default()
        };
        assert_eq!(
            getaddrinfo(Some("1.2.3.4"), None, Some(&v6)),
            Err(Error::Gai(GaiError::Family))
        );
        let sa = AddrInfo {
            ai_flags: RaiFlags::SA,
            ..Default::default()
        };
        assert_eq!(
            getaddrinfo(Some("1.2.3.4"), None, Some(&sa)),
            Err(Error::NotSupported)
        );
        assert_eq!(getaddrinfo(None, None, Some(&sa)), Err(Error::NoEntry));
        let sa_dns = AddrInfo {
            ai_flags: RaiFlags::SA | RaiFlags::DNS,
            ..Default::default()
        };
        assert_eq!(
            getaddrinfo(None, None, Some(&sa_dns)),
            Err(Error::NotSupported)
        );
    }

    #[test]
    fn hints_only_are_copied() {
        let h = AddrInfo {
            ai_flags: RaiFlags::NOROUTE,
            ai_family: Family::Inet,
            ai_qp_type: Some(QpType::Ud),
            ai_port_space: Some(PortSpace::UDP),
            ai_src_addr: v4("1.1.1.1:1"),
            ai_dst_addr: v4("2.2.2.2:2"),
        };
        assert_eq!(getaddrinfo(None, None, Some(&h)), Ok(h));
    }
}
