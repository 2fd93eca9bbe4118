//! The per-id protocol state: the rdma_cm state machine ([`Fsm`]), the path, the peer and
//! the IB CM connection record with its retransmission.

use alloc::boxed::Box;
use core::net::{Ipv4Addr, SocketAddrV4};

use verbs::{AhAttr, Gid, Mtu, Provider, QpType};

use crate::addr::PortSpace;
use crate::device::Neighbor;
use crate::event::EventRec;
use crate::mad::{MadBytes, Req};
use crate::resources::{IdSrq, PathCell, QpRec, SavedAttr};
use crate::slab::Key;

/// The rdma_cm id states (kernel `enum rdma_cm_state` plus the IB CM states that matter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fsm {
    Idle,
    AddrQuery,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// Active: REQ (or SIDR_REQ) sent.
    ReqSent,
    /// Active, no QP: REP arrived, waiting for `establish`.
    RepRcvd,
    /// Passive: REQ (or SIDR_REQ) arrived, waiting for accept / reject.
    ReqRcvd,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    Established,
    DreqSent,
    DreqRcvd,
    Disconnected,
    /// Rejected, unreachable or failed: the app must destroy the id.
    Closed,
}

/// A synthesised RoCE path.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Route {
    pub sgid: Gid,
    pub dgid: Gid,
    pub dmac: [u8; 6],
    pub mtu: Mtu,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub traffic_class: u8,
    pub sl: u8,
    pub local_ack_timeout: u8,
}

impl Route {
    pub fn ah_attr(&self) -> AhAttr {
        AhAttr {
            dgid: self.dgid,
            flow_label: self.flow_label,
            sgid_index: 0,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            sl: self.sl,
            is_global: true,
            port_num: 1,
            dmac: self.dmac,
            ..AhAttr::default()
        }
    }
}

/// Where a MAD goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub ip: Ipv4Addr,
    pub mac: [u8; 6],
    pub qpn: u32,
}

impl Default for Peer {
    fn default() -> Self {
        Peer {
            ip: Ipv4Addr::UNSPECIFIED,
            mac: [0; 6],
            qpn: 0,
        }
    }
}

/// A MAD waiting for its answer.
pub(crate) struct Retx {
    pub mad: Box<MadBytes>,
    /// The QP type a SIDR_REQ asks for (the datagram transport's header), 0 for others.
    pub req_qp_type: u8,
    pub deadline: u64,
    pub timeout_ns: u64,
    pub tries_left: u8,
}

/// Protocol state of a connection.
#[derive(Default)]
pub(crate) struct Conn {
    pub active: bool,
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// TID of the REQ (REP/RTU/REJ reuse it).
    pub tid: u64,
    /// TID of the DREQ received (the DREP echoes it).
    pub dreq_tid: u64,
    pub peer: Peer,
    pub remote_qpn: u32,
    /// PSN we expect to receive (sent in our REQ / REP).
    pub local_psn: u32,
    /// The peer's starting PSN (our send PSN).
    pub remote_psn: u32,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub flow_control: bool,
    /// The REQ received (passive).
    pub req: Option<Box<Req>>,
    pub retx: Option<Retx>,
    /// The last reply sent without retransmission (RTU, DREP, REJ), for duplicates.
    pub last_reply: Option<Box<MadBytes>>,
    /// The service ID of the SIDR_REQ answered (the SIDR_REP repeats it).
    pub sidr_service_id: u64,
    /// The REP's initiator depth and responder resources (active side).
    pub peer_initiator_depth: u8,
    pub peer_responder_resources: u8,
    pub peer_rnr_retry: u8,
}

pub(crate) struct IdState<P: Provider> {
    pub ps: PortSpace,
    pub qp_type: QpType,
    pub context: u64,
    pub chan: Key,
    pub sync: bool,
    pub dev: Option<Key>,
    pub pd: Option<Key>,
    pub has_dev_ref: bool,
    pub src: Option<SocketAddrV4>,
    pub dst: Option<SocketAddrV4>,
    pub port_reserved: bool,
    pub fsm: Fsm,
    pub route: Option<Route>,
    /// Device chosen for an address resolution in progress.
    pub resolve_dev: Option<Key>,
    pub addr_deadline: u64,
    pub peer: Option<Neighbor>,
    pub qp: Option<QpRec>,
    /// The id's data-path objects (QP, provider, SRQ handle), behind the id's own lock.
    pub path: PathCell<P>,
    /// The id's SRQ (`id->srq`).
    pub srq: Option<IdSrq<P>>,
    pub saved: Option<SavedAttr<P>>,
    /// A user PD (device, PD) given to a passive `create_ep` (used by `get_request`).
    pub saved_pd: Option<(Key, Key)>,
    pub backlog: u32,
    pub queued_requests: u32,
    pub listener: Option<Key>,
    pub conn: Conn,
    /// The last event of a synchronous call (`id->event`).
    pub last_event: Option<EventRec>,
    /// The application holds a handle (false for a request id not yet delivered).
    pub owned: bool,
    /// Remembered `initiator_depth` / `responder_resources` (librdmacm's).
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// A QP transition after the REP failed: later REJECTED/DISCONNECTED are swallowed.
    pub connect_error: bool,
    /// `RDMA_OPTION_ID_TOS`: traffic class of the paths resolved afterwards.
    pub tos: Option<u8>,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
    /// `RDMA_OPTION_ID_AFONLY` (stored; the stack is IPv4-only).
    pub afonly: bool,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's RTS `timeout`.
    pub ack_timeout: Option<u8>,
    /// End of the IB CM timewait the id is in (after DISCONNECTED).
    pub timewait_until: Option<u64>,
}

impl<P: Provider> IdState<P> {
    /// The id's path as its QP's RTR/RTS transitions use it: the ACK-timeout option, if set,
    /// replaces the computed local ACK timeout (the kernel's `rdma_init_qp_attr`).
    pub(crate) fn rts_route(&self) -> Route {
        let mut r = self.route.unwrap_or_default();
        if let Some(t) = self.ack_timeout {
            r.local_ack_timeout = t;
        }
        r
    }
}

/// A retransmission that outlived its id (a DREQ sent by a destroy).
pub(crate) struct Orphan {
    pub dev: Key,
    pub peer: Peer,
    pub local_comm_id: u32,
    pub retx: Retx,
}
