//! How connection messages travel between the managers of two nodes ([`Transport`]), and
//! the transports a device can have ([`DevTransport`]).
//!
//! The IB CM carries its messages as MADs between the peers' GSI QPs (QP1): that is the MAD
//! transport ([`Gsi`]), the first implementation. A NIC family without QP1 (EFA) brings a
//! datagram exchange of the manager's own as another variant of [`DevTransport`]; nothing
//! outside a transport's implementation assumes QP1 (a peer's endpoint comes from
//! [`Transport::peer_endpoint`], a reply goes to the endpoint the request came from).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::Ipv4Addr;

use verbs::Provider;

use crate::conn::Peer;
use crate::dgram::Dgram;
use crate::gsi::Gsi;
use crate::mad::MadBytes;
use crate::slab::Key;

/// A connection message received on a device: its source address and endpoint, the QP type
/// it asks for ([`dgram_qp_type`](crate::mad::dgram_qp_type): the datagram transport's
/// header says it for a SIDR_REQ; 0 otherwise), and its 256 bytes.
pub(crate) struct Received {
    pub dev: Key,
    pub src: Ipv4Addr,
    pub src_qp: u32,
    pub req_qp_type: u8,
    pub bytes: Box<MadBytes>,
}

/// The exchange of connection messages of one device with its peers' managers.
pub(crate) trait Transport<P: Provider> {
    /// The endpoint (QP number) the peers reach this manager at.
    fn local_endpoint(&self) -> u32;
    /// The endpoint of a peer's manager that has not written to us yet (the MAD transport:
    /// QP1 of every node).
    fn peer_endpoint(&self) -> u32;
    /// Whether a send can be taken now (else poll first: completed sends free room).
    fn can_send(&self) -> bool;
    /// Sends one message to `to`; false if it could not be sent (no room, no address, the
    /// device refused it). `req_qp_type` is the QP type a SIDR_REQ asks for
    /// ([`dgram_qp_type`](crate::mad::dgram_qp_type), 0 for other messages): the datagram
    /// transport puts it in its header, the MAD transport has nowhere to put it (the IB CM
    /// has no SRD, a RoCE SIDR_REQ is always for UD).
    fn send(&mut self, p: &P, to: &Peer, msg: &MadBytes, req_qp_type: u8) -> bool;
    /// Collects the messages received meanwhile into `out`, frees the room of completed
    /// sends; `bad` counts receives that failed or did not decode.
    fn poll(&mut self, p: &P, dev: Key, out: &mut Vec<Received>, bad: &mut u64);
    /// Brings a transport that failed (its QP in error, whatever the cause) back to work.
    /// `None`: it had not failed; `Some(ok)`: a recovery was tried.
    fn recover(&mut self, p: &P) -> Option<bool>;
    /// Destroys it (teardown goes on past failures; memory the device may still use leaks).
    fn destroy(self, p: &P);
}

/// The transport of a device.
pub(crate) enum DevTransport<P: Provider> {
    /// IB CM MADs on the GSI QP.
    Mad(Gsi<P>),
    /// The datagram exchange of a device without QP1 (EFA): the same MADs on a UD QP of the
    /// manager's, behind a header naming the sender.
    Dgram(Dgram<P>),
}

impl<P: Provider> DevTransport<P> {
    /// Whether the device has the IB CM (QP1): only then can connected (RC) ids use it. A
    /// device without it is as the kernel's rdma_cm sees an EFA: neither IB CM nor iWARP CM.
    pub(crate) fn ib_cm(&self) -> bool {
        matches!(self, DevTransport::Mad(_))
    }

    /// The device address known for the peer at `ip` (the datagram transport; RoCE peers'
    /// GIDs come from their IPv4 addresses).
    pub(crate) fn peer_gid(&self, ip: Ipv4Addr) -> Option<verbs::Gid> {
        match self {
            DevTransport::Mad(_) => None,
            DevTransport::Dgram(g) => g.peer_gid(ip),
        }
    }

    /// Records the device address of the peer at `ip`; false for the MAD transport.
    pub(crate) fn set_peer_gid(&mut self, ip: Ipv4Addr, gid: verbs::Gid) -> bool {
        match self {
            DevTransport::Mad(_) => false,
            DevTransport::Dgram(g) => {
                g.set_peer_gid(ip, gid);
                true
            }
        }
    }
}

impl<P: Provider> Transport<P> for DevTransport<P> {
    fn local_endpoint(&self) -> u32 {
        match self {
            DevTransport::Mad(g) => g.local_endpoint(),
            DevTransport::Dgram(g) => g.local_endpoint(),
        }
    }
    fn peer_endpoint(&self) -> u32 {
        match self {
            DevTransport::Mad(g) => g.peer_endpoint(),
            DevTransport::Dgram(g) => g.peer_endpoint(),
        }
    }
    fn can_send(&self) -> bool {
        match self {
            DevTransport::Mad(g) => g.can_send(),
            DevTransport::Dgram(g) => g.can_send(),
        }
    }
    fn send(&mut self, p: &P, to: &Peer, msg: &MadBytes, req_qp_type: u8) -> bool {
        match self {
            DevTransport::Mad(g) => g.send(p, to, msg, req_qp_type),
            DevTransport::Dgram(g) => g.send(p, to, msg, req_qp_type),
        }
    }
    fn poll(&mut self, p: &P, dev: Key, out: &mut Vec<Received>, bad: &mut u64) {
        match self {
            DevTransport::Mad(g) => g.poll(p, dev, out, bad),
            DevTransport::Dgram(g) => g.poll(p, dev, out, bad),
        }
    }
    fn recover(&mut self, p: &P) -> Option<bool> {
        match self {
            DevTransport::Mad(g) => g.recover(p),
            DevTransport::Dgram(g) => g.recover(p),
        }
    }
    fn destroy(self, p: &P) {
        match self {
            DevTransport::Mad(g) => g.destroy(p),
            DevTransport::Dgram(g) => g.destroy(p),
        }
    }
}
