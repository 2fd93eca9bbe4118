//! Port reservations: binds, conflicts (REUSEADDR) and ephemeral ports.

use core::net::{Ipv4Addr, SocketAddrV4};

use verbs::Provider;

use crate::addr::PortSpace;
use crate::conn::Fsm;
use crate::error::Error;
use crate::slab::Key;
use crate::state::State;

/// A wildcard address, or a loopback address no device has: rdma_cm's "any" addresses, which
/// bind no device.
fn is_any(ip: Ipv4Addr, dev_ips: &[Ipv4Addr]) -> bool {
    ip.is_unspecified() || (ip.is_loopback() && !dev_ips.contains(&ip))
}

impl<P: Provider> State<P> {
    /// A bind of `(ps, ip, port)` conflicts with another id's (the kernel's
    /// `cma_check_port`): skipped are `skip` and, when `reuse` is on, ids that set
    /// REUSEADDR too; a wildcard on either side is EADDRNOTAVAIL, the same address EADDRINUSE.
    pub(crate) fn port_conflict(
        &self,
        ps: PortSpace,
        ip: Ipv4Addr,
        port: u16,
        reuse: bool,
        skip: Option<Key>,
    ) -> Option<Error> {
        let ips = self.dev_ips();
        for (k, s) in self.ids.iter() {
            let Some(src) = s.src else { continue };
            if !s.port_reserved || s.ps != ps || src.port() != port || Some(k) == skip {
                continue;
            }
            if reuse && s.reuseaddr {
                continue;
            }
            let other = *src.ip();
            let any = is_any(ip, &ips) || is_any(other, &ips);
            if other == ip && !any {
                return Some(Error::AddrInUse);
            }
            if any {
                return Some(Error::AddrNotAvailable);
            }
        }
        None
    }

    pub(crate) fn ephemeral_port(&mut self, ps: PortSpace, ip: Ipv4Addr) -> Result<u16, Error> {
        const LO: u16 = 32768;
        const N: u16 = 60999 - LO + 1;
        for _ in 0..N {
            self.eph_cursor = (self.eph_cursor + 1) % N;
            let port = LO + self.eph_cursor;
            if self.port_conflict(ps, ip, port, false, None).is_none() {
                return Ok(port);
            }
        }
        Err(Error::AddrNotAvailable)
    }

    /// `rdma_bind_addr` (IPv4).
    pub fn bind(&mut self, id: Key, addr: SocketAddrV4) -> Result<(), Error> {
        let s = self.ids.get(id).ok_or(Error::InvalidArgument)?;
        if s.fsm != Fsm::Idle {
            return Err(Error::InvalidArgument);
        }
        let ps = s.ps;
        let reuse = s.reuseaddr;
        let ip = *addr.ip();
        let dev = self.dev_by_ip(ip);
        if dev.is_none() && !ip.is_unspecified() && !ip.is_loopback() {
            return Err(Error::AddrNotAvailable);
        }
        let port = if addr.port() == 0 {
            self.ephemeral_port(ps, ip)?
        } else {
            if let Some(e) = self.port_conflict(ps, ip, addr.port(), reuse, Some(id)) {
                return Err(e);
            }
            addr.port()
        };
        if let Some(s) = self.ids.get_mut(id) {
            s.src = Some(SocketAddrV4::new(ip, port));
            s.port_reserved = true;
            s.fsm = Fsm::AddrBound;
        }
        match dev {
            Some(d) => self.acquire_dev(id, d),
            None => Ok(()),
        }
    }
}
