//! The datagram transport of a device without QP1 (AWS EFA): the manager creates a UD QP of
//! its own on the device and exchanges the IB CM's MADs (SIDR_REQ / SIDR_REP for the UDP
//! port space) through it with the peers' managers (`docs/cm.md#the-connection-manager-on-efa`).
//!
//! * A peer's manager is named by its IPv4 address: its device address is the GID named
//!   for it ([`Cm::set_peer_gid`](crate::Cm::set_peer_gid)), else the one its datagram
//!   header gave once one arrived, else the IPv4-mapped GID of the address; its QP
//!   is the manager's well-known QP number (every manager creates its QP first on a freshly
//!   started device, so all of them hold the same number: the one this manager's QP got),
//!   its Q_Key [`DGRAM_CM_QKEY`](crate::mad::DGRAM_CM_QKEY).
//! * Each message is a 32-byte [`DgramHeader`](crate::mad::DgramHeader) (the sender's IPv4
//!   address, manager QPN and GID: an EFA receive completion carries no GRH; for a SIDR_REQ,
//!   the QP type it asks for) then the 256-byte MAD. Replies go to the QP the request came
//!   from.
//! * Retries and timeouts are the IB CM's (a SIDR_REQ is sent again after the CM response
//!   timeout, 15 times; the passive side answers duplicates with the reply it sent).

use verbs::{Gid, Provider, QpType};

use crate::conn::Peer;
use crate::error::Error;
use crate::gsi::{Framing, Gsi};
use crate::mad::{MadBytes, dgram_qp_type};
use crate::slab::Key;
use crate::transport::{Received, Transport};

/// The code of QP type `t` in the header of a SIDR_REQ ([`dgram_qp_type`]): UD or SRD, else
/// [`UNSAID`](dgram_qp_type::UNSAID) (no other type is resolved with SIDR).
pub(crate) const fn header_qp_type(t: QpType) -> u8 {
    match t {
        QpType::Ud => dgram_qp_type::UD,
        QpType::Srd => dgram_qp_type::SRD,
        _ => dgram_qp_type::UNSAID,
    }
}

/// The manager's UD QP on a device without QP1.
pub(crate) struct Dgram<P: Provider>(Gsi<P>);

impl<P: Provider> Dgram<P> {
    /// Creates the QP (UD, [`DGRAM_CM_QKEY`](crate::mad::DGRAM_CM_QKEY)) and its buffers on
    /// the device whose address is `ip` / `gid`.
    pub(crate) fn create(
        p: &P,
        recv_slots: u16,
        send_slots: u16,
        ip: core::net::Ipv4Addr,
        gid: Gid,
    ) -> Result<Dgram<P>, Error> {
        Gsi::create_framed(p, recv_slots, send_slots, Framing::Header { ip, gid }).map(Dgram)
    }
}

impl<P: Provider> Dgram<P> {
    /// The device address known for the peer at `ip`.
    pub(crate) fn peer_gid(&self, ip: core::net::Ipv4Addr) -> Option<Gid> {
        self.0.peer_gid(ip)
    }

    /// Records the device address of the peer at `ip`.
    pub(crate) fn set_peer_gid(&mut self, ip: core::net::Ipv4Addr, gid: Gid) {
        self.0.set_peer_gid(ip, gid)
    }
}

impl<P: Provider> Transport<P> for Dgram<P> {
    fn local_endpoint(&self) -> u32 {
        self.0.local_endpoint()
    }

    /// The well-known QP number: the one every manager's first QP gets, so ours.
    fn peer_endpoint(&self) -> u32 {
        self.0.local_endpoint()
    }

    fn can_send(&self) -> bool {
        self.0.can_send()
    }

    fn send(&mut self, p: &P, to: &Peer, msg: &MadBytes, req_qp_type: u8) -> bool {
        self.0.send(p, to, msg, req_qp_type)
    }

    fn poll(&mut self, p: &P, dev: Key, out: &mut alloc::vec::Vec<Received>, bad: &mut u64) {
        self.0.poll(p, dev, out, bad)
    }

    fn recover(&mut self, p: &P) -> Option<bool> {
        self.0.recover(p)
    }

    fn destroy(self, p: &P) {
        self.0.destroy(p)
    }
}

#[cfg(test)]
mod tests {
    use verbs::QpType;

    use super::header_qp_type;
    use crate::mad::{DGRAM_HEADER_SIZE, DgramHeader, dgram_qp_type};

    #[test]
    fn the_header_round_trips_and_refuses_strangers() {
        let h = DgramHeader {
            ip: core::net::Ipv4Addr::new(127, 0, 0, 2),
            qpn: 0x12_3456,
            gid: [7; 16],
            qp_type: dgram_qp_type::SRD,
        };
        let b = h.encode();
        assert_eq!(b.len(), DGRAM_HEADER_SIZE);
        assert_eq!(&b[..8], b"EFCM\x01\x02\0\0");
        assert_eq!(&b[8..16], &[127, 0, 0, 2, 0, 0x12, 0x34, 0x56]);
        assert_eq!(DgramHeader::decode(&b), Some(h));
        assert_eq!(DgramHeader::decode(&b[..31]), None);
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(DgramHeader::decode(&bad), None);
        let mut bad = b;
        bad[4] = 2;
        assert_eq!(DgramHeader::decode(&bad), None);
        let mut bad = b;
        bad[12] = 1;
        assert_eq!(DgramHeader::decode(&bad), None, "a QPN wider than 24 bits");
        // an older peer's header: byte 5 reserved, 0, "no QP type said"
        let mut old = b;
        old[5] = 0;
        assert_eq!(
            DgramHeader::decode(&old).map(|h| h.qp_type),
            Some(dgram_qp_type::UNSAID)
        );
    }

    #[test]
    fn sidr_qp_type_codes() {
        assert_eq!(header_qp_type(QpType::Ud), dgram_qp_type::UD);
        assert_eq!(header_qp_type(QpType::Srd), dgram_qp_type::SRD);
        assert_eq!(header_qp_type(QpType::Rc), dgram_qp_type::UNSAID);
        assert_ne!(dgram_qp_type::UD, dgram_qp_type::SRD);
    }
}
