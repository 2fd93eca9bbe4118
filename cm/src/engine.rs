//! The protocol engine: what a received MAD or an expired timer does to the ids
//! (`docs/cm.md#connection-sequences`, `docs/cm.md#ib-cm-wire-protocol`).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::{Ipv4Addr, SocketAddrV4};

use verbs::{Gid, Provider};

use crate::conn::{Fsm, Peer, Route};
use crate::error::Error;
use crate::event::{ConnData, EventParam, EventType, UdData};
use crate::mad::{
    CmMad, CmMessage, CmaAddrs, CmaHeader, Drep, Dreq, MadBytes, Mra, Rej, Rep, Req, Rtu, SidrRep,
    SidrReq, dgram_qp_type, limits, msg_kind, parse_service_id, rej_reason, sidr_status, transport,
};
use crate::qp::{Connect, cm_access, qp_rtr_rts, qp_to_err};
use crate::slab::Key;
use crate::state::{State, ib_time_ns};

/// Service timeout of the MRAs sent for requests the application has not answered yet
/// (4.096 µs × 2^24 ≈ 67 s, rdma_cm's).
const MRA_SERVICE_TIMEOUT: u8 = 24;

/// Who sent a SIDR_REQ: its manager's address and QP, and the QP type it asks for
/// ([`dgram_qp_type`]).
#[derive(Clone, Copy)]
struct Requester {
    ip: Ipv4Addr,
    qpn: u32,
    qp_type: u8,
}

/// −ETIMEDOUT, the status of timed-out events.
pub(crate) const ETIMEDOUT_STATUS: i32 = -110;

impl<P: Provider> State<P> {
    /// Dispatches one received MAD; `req_qp_type` is the QP type the transport says a
    /// SIDR_REQ asks for ([`dgram_qp_type`]).
    pub(crate) fn on_mad(
        &mut self,
        d: Key,
        src: Ipv4Addr,
        src_qp: u32,
        req_qp_type: u8,
        bytes: &MadBytes,
    ) {
        let Ok(mad) = CmMad::decode(bytes) else {
            self.stats.bad_mads += 1;
            return;
        };
        match &mad.msg {
            CmMessage::Req(r) => self.on_req(d, src, src_qp, mad.tid, r),
            CmMessage::Rep(r) => self.on_rep(d, r),
            CmMessage::Rtu(r) => self.on_rtu(d, r),
            CmMessage::Rej(r) => self.on_rej(d, src, r),
            CmMessage::Mra(r) => self.on_mra(d, r),
            CmMessage::Dreq(r) => self.on_dreq(d, src, src_qp, mad.tid, r),
            CmMessage::Drep(r) => self.on_drep(d, r),
            CmMessage::SidrReq(r) => {
                let from = Requester {
                    ip: src,
                    qpn: src_qp,
                    qp_type: req_qp_type,
                };
                self.on_sidr_req(d, from, mad.tid, mad.attr_mod, r)
            }
            CmMessage::SidrRep(r) => self.on_sidr_rep(d, r),
        }
    }

    fn find(&self, pred: impl Fn(&crate::conn::IdState<P>) -> bool) -> Option<Key> {
        self.ids.iter().find(|(_, s)| pred(s)).map(|(k, _)| k)
    }

    fn reply(&mut self, d: Key, to: &Peer, tid: u64, msg: CmMessage) {
        let bytes = CmMad {
            tid,
            attr_mod: 0,
            msg,
        }
        .encode();
        self.send_to(d, to, &bytes, dgram_qp_type::UNSAID);
    }

    /// The listener of `(ps, port)` on device `d` for destination `dst`: `Err(true)` when
    /// nobody listens on the service at all (REJ 8), `Err(false)` when listeners exist but
    /// none for that address (REJ 28).
    fn listener_for(&self, d: Key, sid: u64, dst: Option<Ipv4Addr>) -> Result<Key, bool> {
        let Some((ps, port)) = parse_service_id(sid) else {
            return Err(true);
        };
        let mut any = false;
        for (k, s) in self.ids.iter() {
            let Some(src) = s.src else { continue };
            if s.fsm != Fsm::Listen || s.ps.0 != ps || src.port() != port {
                continue;
            }
            if s.dev.is_some_and(|x| x != d) {
                continue;
            }
            any = true;
            if src.ip().is_unspecified() || dst == Some(*src.ip()) {
                return Ok(k);
            }
        }
        Err(!any)
    }

    /// Creates the id of an incoming request under listener `l`; `None` if it cannot be set
    /// up (the caller rejects).
    fn request_id(&mut self, l: Key, d: Key, src: SocketAddrV4, dst: SocketAddrV4) -> Option<Key> {
        let ls = self.ids.get(l)?;
        let (sync, context, ps, qp_type, lchan) = (ls.sync, ls.context, ls.ps, ls.qp_type, ls.chan);
        let chan = if sync {
            self.chans.insert(crate::event::Chan::default())
        } else {
            lchan
        };
        let k = self.new_id(chan, sync, context, ps, qp_type);
        if self.acquire_dev(k, d).is_err() {
            self.ids.remove(k);
            if sync {
                self.chans.remove(chan);
            }
            return None;
        }
        let local_comm_id = self.next_comm_id();
        let psn = self.rng.psn();
        let s = self.ids.get_mut(k)?;
        s.conn.local_psn = psn;
        s.owned = false;
        s.listener = Some(l);
        s.src = Some(src);
        s.dst = Some(dst);
        s.fsm = Fsm::ReqRcvd;
        s.conn.local_comm_id = local_comm_id;
        Some(k)
    }

    fn on_req(&mut self, d: Key, src: Ipv4Addr, src_qp: u32, tid: u64, r: &Req) {
        // a device without the IB CM (EFA) has no connections: a REQ is a stranger's
        if !self.ib_cm(d) {
            self.stats.bad_mads += 1;
            return;
        }
        let Some(peer) = self.peer(d, src, src_qp) else {
            self.stats.send_failures += 1;
            return;
        };
        // a retransmission of a REQ we know
        if let Some(k) = self.find(|s| {
            !s.conn.active
                && s.dev == Some(d)
                && s.conn.remote_comm_id == r.local_comm_id
                && s.conn.peer.ip == src
                && s.conn.req.is_some()
        }) {
            // a duplicate of the REQ of a connection in timewait: stale (ib_cm's
            // `cm_dup_req_handler`)
            if self.ids.get(k).is_some_and(|s| s.timewait_until.is_some()) {
                let m = self.rej_msg(
                    0,
                    r.local_comm_id,
                    msg_kind::REQ,
                    rej_reason::STALE_CONNECTION,
                    &[],
                );
                self.reply(d, &peer, tid, m);
                return;
            }
            self.resend_reply(k);
            return;
        }
        let rej = |st: &mut Self, reason| {
            let m = st.rej_msg(0, r.local_comm_id, msg_kind::REQ, reason, &[]);
            st.reply(d, &peer, tid, m);
        };
        // the peer's QP is still part of a live connection of ours: a stale connection
        // (REJ 10). A QP whose connection is in timewait may connect again, as with Linux's
        // ib_cm, which drops the remote QP number from its stale check on entering timewait
        // (a NIC that reuses QP numbers at once, as the emulated one does, reconnects fine).
        if self.ids.iter().any(|(_, s)| {
            s.dev == Some(d)
                && s.qp_type == verbs::QpType::Rc
                && s.conn.peer.ip == src
                && s.conn.remote_qpn == r.local_qpn
                && s.timewait_until.is_none()
                && matches!(
                    s.fsm,
                    Fsm::ReqRcvd
                        | Fsm::RepSent
                        | Fsm::RepRcvd
                        | Fsm::Established
                        | Fsm::DreqSent
                        | Fsm::DreqRcvd
                )
                && (s.conn.active || s.conn.req.is_some())
        }) {
            return rej(self, rej_reason::STALE_CONNECTION);
        }
        let hdr = CmaHeader::decode(&r.private_data);
        let dst_ip = match hdr {
            Ok(CmaHeader {
                addrs: CmaAddrs::V4 { dst, .. },
                ..
            }) => Some(dst),
            _ => None,
        };
        let l = match self.listener_for(d, r.service_id, dst_ip) {
            Ok(l) => l,
            Err(true) => return rej(self, rej_reason::INVALID_SERVICE_ID),
            Err(false) => return rej(self, rej_reason::CONSUMER_DEFINED),
        };
        let Ok(CmaHeader {
            src_port,
            addrs:
                CmaAddrs::V4 {
                    src: hsrc,
                    dst: hdst,
                },
        }) = hdr
        else {
            return rej(self, rej_reason::CONSUMER_DEFINED);
        };
        let Some(ls) = self.ids.get(l) else { return };
        if r.transport_service_type != transport::RC || ls.qp_type != verbs::QpType::Rc {
            return rej(self, rej_reason::CONSUMER_DEFINED);
        }
        if ls.queued_requests >= ls.backlog {
            self.stats.backlog_drops += 1;
            return;
        }
        let port = ls.src.map_or(0, |a| a.port());
        let Some(k) = self.request_id(
            l,
            d,
            SocketAddrV4::new(hdst, port),
            SocketAddrV4::new(hsrc, src_port),
        ) else {
            return rej(self, rej_reason::CONSUMER_DEFINED);
        };
        let (gid, mtu) = match self.devs.get(d) {
            Some(dev) => (dev.gid, dev.mtu),
            None => return,
        };
        let mtu = crate::state::mtu_from_code(r.path_mtu).map_or(mtu, |m| m.min(mtu));
        let p = &r.primary_path;
        let route = Route {
            sgid: gid,
            dgid: Gid(p.local_gid),
            dmac: peer.mac,
            mtu,
            hop_limit: p.hop_limit,
            flow_label: p.flow_label,
            traffic_class: p.traffic_class,
            sl: p.sl,
            local_ack_timeout: p.local_ack_timeout,
        };
        let data = ConnData {
            private_data: r.private_data[limits::CMA_HEADER..].to_vec(),
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.end_to_end_flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        if let Some(s) = self.ids.get_mut(k) {
            s.route = Some(route);
            s.responder_resources = r.initiator_depth;
            s.initiator_depth = r.responder_resources;
            let c = &mut s.conn;
            c.remote_comm_id = r.local_comm_id;
            c.tid = tid;
            c.peer = peer;
            c.remote_qpn = r.local_qpn;
            c.remote_psn = r.starting_psn;
            c.retry_count = r.retry_count;
            c.rnr_retry_count = r.rnr_retry_count;
            c.flow_control = r.end_to_end_flow_control;
            c.req = Some(Box::new(*r));
        }
        if let Some(ls) = self.ids.get_mut(l) {
            ls.queued_requests += 1;
        }
        self.push_event(
            k,
            EventType::ConnectRequest,
            0,
            EventParam::Conn(data),
            Some(l),
        );
    }

    /// Answers a duplicate of the message that created or advanced id `k`: the pending
    /// retransmission (REP, DREQ) or the last reply (RTU, REJ, DREP, SIDR_REP).
    ///
    /// A duplicate REQ for a request the application has not answered yet gets an MRA (its
    /// service timeout tells the requester to wait longer instead of retrying).
    fn resend_reply(&mut self, k: Key) {
        let Some(s) = self.ids.get(k) else { return };
        let Some(d) = s.dev else { return };
        let peer = s.conn.peer;
        if s.fsm == Fsm::ReqRcvd && s.qp_type == verbs::QpType::Rc {
            let mra = CmMessage::Mra(Mra {
                local_comm_id: s.conn.local_comm_id,
                remote_comm_id: s.conn.remote_comm_id,
                message_mraed: msg_kind::REQ,
                service_timeout: MRA_SERVICE_TIMEOUT,
                private_data: [0; limits::MRA],
            });
            let tid = s.conn.tid;
            return self.reply(d, &peer, tid, mra);
        }
        let bytes = match (&s.conn.retx, &s.conn.last_reply) {
            (Some(r), _) if s.fsm == Fsm::RepSent => Some(*r.mad),
            (_, Some(b)) => Some(**b),
            _ => None,
        };
        if let Some(b) = bytes {
            self.send_to(d, &peer, &b, dgram_qp_type::UNSAID);
        }
    }

    fn on_rep(&mut self, d: Key, r: &Rep) {
        let Some(k) = self.find(|s| {
            s.conn.active && s.dev == Some(d) && s.conn.local_comm_id == r.remote_comm_id
        }) else {
            return;
        };
        let Some(s) = self.ids.get(k) else { return };
        match s.fsm {
            Fsm::ReqSent => {}
            Fsm::Established => return self.resend_reply(k),
            _ => return,
        }
        let data = ConnData {
            private_data: r.private_data.to_vec(),
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.end_to_end_flow_control,
            retry_count: 0,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        let (Some(dev), Some(s)) = (self.devs.get(d), self.ids.get_mut(k)) else {
            return;
        };
        s.conn.retx = None;
        s.conn.remote_comm_id = r.local_comm_id;
        s.conn.remote_qpn = r.local_qpn;
        s.conn.remote_psn = r.starting_psn;
        s.conn.peer_initiator_depth = r.initiator_depth;
        s.conn.peer_responder_resources = r.responder_resources;
        s.conn.peer_rnr_retry = r.rnr_retry_count;
        let tid = s.conn.tid;
        let (local, remote) = (s.conn.local_comm_id, r.local_comm_id);
        let rts_route = s.rts_route();
        if s.qp.is_none() {
            s.fsm = Fsm::RepRcvd;
            self.push_event(
                k,
                EventType::ConnectResponse,
                0,
                EventParam::Conn(data),
                None,
            );
            return;
        };
        let c = Connect {
            route: rts_route,
            dest_qpn: r.local_qpn,
            rq_psn: s.conn.local_psn,
            sq_psn: r.starting_psn,
            // A peer may answer with more than this side asked for or its device takes
            // (Linux's rdma_accept passes the application's figures through unclamped, e.g.
            // perftest's 128 outstanding READs on rxe): what the QP takes is the smaller.
            max_dest_rd_atomic: r.initiator_depth.min(dev.max_responder_resources),
            max_rd_atomic: r.responder_resources.min(s.initiator_depth),
            retry_cnt: s.conn.retry_count,
            rnr_retry: r.rnr_retry_count,
            access: cm_access(s.responder_resources),
        };
        let moved = {
            let mut path = s.path.lock();
            match path.qp.as_mut() {
                Some(q) => {
                    let r = qp_rtr_rts(&*dev.provider, &mut q.qp, &c);
                    if r.is_err() {
                        qp_to_err(&*dev.provider, &mut q.qp);
                    }
                    r
                }
                None => Err(Error::InvalidArgument),
            }
        };
        match moved {
            Ok(()) => {
                s.fsm = Fsm::Established;
                let rtu = CmMessage::Rtu(Rtu {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    private_data: [0; limits::RTU],
                });
                self.send_for(k, tid, rtu, None);
                self.push_event(k, EventType::Established, 0, EventParam::Conn(data), None);
            }
            Err(_) => {
                s.fsm = Fsm::Closed;
                s.connect_error = true;
                self.push_event(k, EventType::ConnectError, -1, EventParam::None, None);
            }
        }
    }

    fn on_rtu(&mut self, d: Key, r: &Rtu) {
        let Some(k) = self.find(|s| {
            !s.conn.active
                && s.dev == Some(d)
                && s.fsm == Fsm::RepSent
                && s.conn.local_comm_id == r.remote_comm_id
        }) else {
            return;
        };
        self.rtu_received(k);
    }

    /// The communication-established event of QP `qpn` of device `d` (its first packet
    /// arrived): for a passive id waiting for its RTU, the RTU was lost on the way and the
    /// connection is established all the same, as the IB CM's `cm_establish` has it.
    /// Anything else (an active QP, an id already established) ignores it.
    pub(crate) fn comm_est(&mut self, d: Key, qpn: u32) {
        let Some(k) = self.find(|s| {
            !s.conn.active
                && s.dev == Some(d)
                && s.fsm == Fsm::RepSent
                && s.qp.as_ref().is_some_and(|q| q.qpn == qpn)
        }) else {
            return;
        };
        self.stats.comm_est_rtus += 1;
        self.rtu_received(k);
    }

    /// A passive id in REP_SENT gets its RTU (or what stands for it).
    pub(crate) fn rtu_received(&mut self, k: Key) {
        let Some(s) = self.ids.get_mut(k) else { return };
        if s.fsm != Fsm::RepSent {
            return;
        }
        s.conn.retx = None;
        s.fsm = Fsm::Established;
        let data = ConnData {
            qp_num: s.conn.remote_qpn,
            ..ConnData::default()
        };
        self.push_event(k, EventType::Established, 0, EventParam::Conn(data), None);
    }

    fn on_rej(&mut self, d: Key, src: Ipv4Addr, r: &Rej) {
        // a REJ names our id, unless it rejects a REQ whose receiver we are (the active
        // side gave up: it does not know our id yet)
        let Some(k) = self.find(|s| {
            s.dev == Some(d)
                && if r.remote_comm_id != 0 {
                    s.conn.local_comm_id == r.remote_comm_id
                } else {
                    !s.conn.active
                        && s.conn.remote_comm_id == r.local_comm_id
                        && s.conn.peer.ip == src
                }
        }) else {
            return;
        };
        let (Some(dev), Some(s)) = (self.devs.get(d), self.ids.get_mut(k)) else {
            return;
        };
        match s.fsm {
            Fsm::ReqSent | Fsm::RepSent | Fsm::RepRcvd => {
                s.conn.retx = None;
                if let Some(q) = s.path.lock().qp.as_mut() {
                    qp_to_err(&*dev.provider, &mut q.qp);
                }
                s.fsm = Fsm::Closed;
                if !s.connect_error {
                    let data = ConnData {
                        private_data: r.private_data.to_vec(),
                        ..ConnData::default()
                    };
                    self.push_event(
                        k,
                        EventType::Rejected,
                        r.reason as i32,
                        EventParam::Conn(data),
                        None,
                    );
                }
            }
            // the requester gave up before we accepted: the id dies silently
            Fsm::ReqRcvd => s.fsm = Fsm::Closed,
            _ => {}
        }
    }

    fn on_mra(&mut self, d: Key, r: &Mra) {
        let now = self.now;
        let waiting = match r.message_mraed {
            msg_kind::REQ => Fsm::ReqSent,
            msg_kind::REP => Fsm::RepSent,
            _ => return,
        };
        if let Some(k) = self.find(|s| {
            s.dev == Some(d) && s.fsm == waiting && s.conn.local_comm_id == r.remote_comm_id
        }) && let Some(s) = self.ids.get_mut(k)
            && let Some(x) = s.conn.retx.as_mut()
        {
            // the peer got it and needs time: wait its service timeout plus ours
            x.deadline = now + ib_time_ns(r.service_timeout) + x.timeout_ns;
        }
    }

    fn on_dreq(&mut self, d: Key, src: Ipv4Addr, src_qp: u32, tid: u64, r: &Dreq) {
        let drep = CmMessage::Drep(Drep {
            local_comm_id: r.remote_comm_id,
            remote_comm_id: r.local_comm_id,
            private_data: [0; limits::DREP],
        });
        let found = self.find(|s| {
            s.dev == Some(d)
                && s.conn.local_comm_id == r.remote_comm_id
                && s.conn.remote_comm_id == r.local_comm_id
        });
        let Some(k) = found else {
            // nobody: answer anyway so that the peer stops asking
            if let Some(to) = self.peer(d, src, src_qp) {
                self.reply(d, &to, tid, drep);
            }
            return;
        };
        let (Some(dev), Some(s)) = (self.devs.get(d), self.ids.get_mut(k)) else {
            return;
        };
        match s.fsm {
            Fsm::Established | Fsm::RepSent => {
                // As the kernel's rdma_cm does on DREQ: the QP goes to ERR at once, so that
                // posted receives flush while the consumer has not called disconnect yet.
                if let Some(q) = s.path.lock().qp.as_mut() {
                    qp_to_err(&*dev.provider, &mut q.qp);
                }
                s.conn.retx = None;
                s.conn.dreq_tid = tid;
                s.fsm = Fsm::DreqRcvd;
                if !s.connect_error {
                    self.push_event(k, EventType::Disconnected, 0, EventParam::None, None);
                }
            }
            Fsm::DreqSent => {
                // both sides disconnect at once: answer, and we are done
                s.conn.retx = None;
                s.fsm = Fsm::Disconnected;
                self.send_for(k, tid, drep, None);
                self.push_event(k, EventType::Disconnected, 0, EventParam::None, None);
                self.enter_timewait(k);
            }
            Fsm::Disconnected => self.send_for(k, tid, drep, None),
            _ => {}
        }
    }

    fn on_drep(&mut self, d: Key, r: &Drep) {
        self.orphans_drop(r.remote_comm_id);
        let Some(k) = self.find(|s| {
            s.dev == Some(d) && s.fsm == Fsm::DreqSent && s.conn.local_comm_id == r.remote_comm_id
        }) else {
            return;
        };
        if let Some(s) = self.ids.get_mut(k) {
            s.conn.retx = None;
            s.fsm = Fsm::Disconnected;
            if !s.connect_error {
                self.push_event(k, EventType::Disconnected, 0, EventParam::None, None);
            }
            self.enter_timewait(k);
        }
    }

    fn on_sidr_req(&mut self, d: Key, from: Requester, tid: u64, attr_mod: u32, r: &SidrReq) {
        let (src, src_qp) = (from.ip, from.qpn);
        let Some(peer) = self.peer(d, src, src_qp) else {
            self.stats.send_failures += 1;
            return;
        };
        if let Some(k) = self.find(|s| {
            !s.conn.active
                && s.dev == Some(d)
                && s.conn.remote_comm_id == r.request_id
                && s.conn.peer.ip == src
                && s.conn.sidr_service_id == r.service_id
                && crate::qp::datagram(s.qp_type)
        }) {
            self.resend_reply(k);
            return;
        }
        let status_rep = |st: &mut Self, status| {
            let m = CmMessage::SidrRep(SidrRep {
                request_id: r.request_id,
                status,
                additional_info_length: 0,
                qpn: 0,
                service_id: r.service_id,
                qkey: 0,
                additional_info: [0; limits::SIDR_REP_INFO],
                private_data: [0; limits::SIDR_REP],
            });
            st.reply(d, &peer, tid, m);
        };
        let hdr = CmaHeader::decode(&r.private_data);
        let dst_ip = match hdr {
            Ok(CmaHeader {
                addrs: CmaAddrs::V4 { dst, .. },
                ..
            }) => Some(dst),
            _ => None,
        };
        let l = match self.listener_for(d, r.service_id, dst_ip) {
            Ok(l) => l,
            Err(_) => return status_rep(self, sidr_status::UNSUPPORTED),
        };
        let Ok(CmaHeader {
            src_port,
            addrs:
                CmaAddrs::V4 {
                    src: hsrc,
                    dst: hdst,
                },
        }) = hdr
        else {
            return status_rep(self, sidr_status::REJECT);
        };
        let Some(ls) = self.ids.get(l) else { return };
        if !crate::qp::datagram(ls.qp_type) {
            return status_rep(self, sidr_status::UNSUPPORTED);
        }
        // The requester said which QP type it wants (the datagram transport's header): a UD
        // client cannot talk to an SRD QP nor the reverse, so a listener of the other type
        // refuses it here, before the application sees a request ("rejected"). An older
        // peer says nothing and is answered as before.
        if from.qp_type != dgram_qp_type::UNSAID
            && from.qp_type != crate::dgram::header_qp_type(ls.qp_type)
        {
            self.stats.qp_type_mismatches += 1;
            return status_rep(self, sidr_status::REJECT);
        }
        if ls.queued_requests >= ls.backlog {
            self.stats.backlog_drops += 1;
            return;
        }
        let port = ls.src.map_or(0, |a| a.port());
        let Some(k) = self.request_id(
            l,
            d,
            SocketAddrV4::new(hdst, port),
            SocketAddrV4::new(hsrc, src_port),
        ) else {
            return status_rep(self, sidr_status::REJECT);
        };
        let Some(route) = self.synth_route(d, hsrc, peer.mac, port, src_port) else {
            return;
        };
        if let Some(s) = self.ids.get_mut(k) {
            s.route = Some(route);
            let c = &mut s.conn;
            c.remote_comm_id = r.request_id;
            c.tid = tid;
            c.peer = peer;
            c.sidr_service_id = r.service_id;
            // an SRD peer's QP (its SIDR_REQ's attribute modifier)
            c.remote_qpn = if s.qp_type == verbs::QpType::Srd {
                attr_mod & 0xFF_FFFF
            } else {
                0
            };
        }
        let peer_qpn = self.ids.get(k).map_or(0, |s| s.conn.remote_qpn);
        if let Some(ls) = self.ids.get_mut(l) {
            ls.queued_requests += 1;
        }
        let data = UdData {
            private_data: r.private_data[limits::CMA_HEADER..].to_vec(),
            ah_attr: route.ah_attr(),
            // SRD: the active side's QP (UD: unknown, 0, as librdmacm)
            qp_num: peer_qpn,
            qkey: if peer_qpn != 0 {
                crate::config::RDMA_UDP_QKEY
            } else {
                0
            },
        };
        self.push_event(
            k,
            EventType::ConnectRequest,
            0,
            EventParam::Ud(data),
            Some(l),
        );
    }

    fn on_sidr_rep(&mut self, d: Key, r: &SidrRep) {
        let Some(k) = self.find(|s| {
            s.conn.active
                && s.dev == Some(d)
                && s.fsm == Fsm::ReqSent
                && crate::qp::datagram(s.qp_type)
                && s.conn.local_comm_id == r.request_id
        }) else {
            return;
        };
        let Some(s) = self.ids.get_mut(k) else { return };
        s.conn.retx = None;
        let data = UdData {
            private_data: r.private_data.to_vec(),
            ah_attr: s.route.unwrap_or_default().ah_attr(),
            qp_num: r.qpn,
            qkey: r.qkey,
        };
        if r.status == sidr_status::SUCCESS {
            s.fsm = Fsm::Established;
            if s.qp_type == verbs::QpType::Srd {
                self.set_srd_peer(k, r.qpn & 0xFF_FFFF, r.qkey);
            }
            self.push_event(k, EventType::Established, 0, EventParam::Ud(data), None);
        } else {
            s.fsm = Fsm::Closed;
            self.push_event(
                k,
                EventType::Unreachable,
                r.status as i32,
                EventParam::Ud(data),
                None,
            );
        }
    }

    /// A RoCE path from device `d` to `dst` (GIDs from the IPs, flow label from the ports).
    pub(crate) fn synth_route(
        &self,
        d: Key,
        dst: Ipv4Addr,
        dmac: [u8; 6],
        sport: u16,
        dport: u16,
    ) -> Option<Route> {
        let dev = self.devs.get(d)?;
        // the datagram transport (EFA) may know the peer's device address
        let dgid = dev
            .transport
            .as_ref()
            .and_then(|t| t.peer_gid(dst))
            .unwrap_or(Gid::from_ipv4(dst.octets()));
        Some(Route {
            sgid: dev.gid,
            dgid,
            dmac,
            mtu: dev.mtu,
            hop_limit: self.cfg.hop_limit,
            flow_label: (sport as u32 * 31 + dport as u32) & 0xF_FFFF,
            traffic_class: 0,
            sl: 0,
            local_ack_timeout: (self.cfg.packet_life_time + 1).min(31),
        })
    }

    /// A REJ message.
    pub(crate) fn rej_msg(
        &self,
        local: u32,
        remote: u32,
        kind: u8,
        reason: u16,
        pd: &[u8],
    ) -> CmMessage {
        let mut private_data = [0u8; limits::REJ];
        let n = pd.len().min(limits::REJ);
        private_data[..n].copy_from_slice(&pd[..n]);
        CmMessage::Rej(Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: kind,
            reject_info_length: 0,
            reason,
            ari: [0; limits::REJ_ARI],
            private_data,
        })
    }

    // -------------------------------------------------------------- timers

    /// Address resolution of id `k`: done when the neighbour is known, an error when its
    /// deadline passed.
    pub(crate) fn try_resolve(&mut self, k: Key) {
        let Some(s) = self.ids.get(k) else { return };
        if s.fsm != Fsm::AddrQuery {
            return;
        }
        let (Some(dst), Some(d)) = (s.dst, s.resolve_dev) else {
            return;
        };
        let deadline = s.addr_deadline;
        let has_ref = s.has_dev_ref;
        let mut known = self.neighbor(*dst.ip());
        // a device without Ethernet (EFA) has nothing to resolve: the peer's device address
        // is its IPv4-mapped GID (`docs/cm.md#the-connection-manager-on-efa`)
        if known.is_none() && !self.ib_cm(d) {
            known = Some(crate::device::Neighbor { mac: [0; 6] });
        }
        if known.is_none()
            && let Some(r) = self.devs.get(d).and_then(|x| x.resolver.clone())
        {
            match r.resolve_neighbor(*dst.ip()) {
                Ok(Some(nb)) => {
                    self.set_neighbor(*dst.ip(), nb);
                    known = Some(nb);
                }
                Ok(None) => {}
                Err(e) => {
                    if let Some(s) = self.ids.get_mut(k) {
                        s.fsm = Fsm::AddrBound;
                    }
                    self.push_event(
                        k,
                        EventType::AddrError,
                        match e.errno() {
                            0 => -113,
                            n => -n,
                        },
                        EventParam::None,
                        None,
                    );
                    return;
                }
            }
        }
        let Some(nb) = known else {
            if self.now >= deadline
                && let Some(s) = self.ids.get_mut(k)
            {
                s.fsm = Fsm::AddrBound;
                self.push_event(
                    k,
                    EventType::AddrError,
                    ETIMEDOUT_STATUS,
                    EventParam::None,
                    None,
                );
            }
            return;
        };
        if !has_ref && self.acquire_dev(k, d).is_err() {
            if let Some(s) = self.ids.get_mut(k) {
                s.fsm = Fsm::AddrBound;
            }
            self.push_event(k, EventType::AddrError, -19, EventParam::None, None);
            return;
        }
        let dev_ip = self.devs.get(d).map(|x| x.ip);
        let Some(s) = self.ids.get_mut(k) else { return };
        if let (Some(src), Some(ip)) = (s.src, dev_ip)
            && (src.ip().is_unspecified() || src.ip().is_loopback() && *src.ip() != ip)
        {
            s.src = Some(SocketAddrV4::new(ip, src.port()));
        }
        s.peer = Some(nb);
        s.fsm = Fsm::AddrResolved;
        self.push_event(k, EventType::AddrResolved, 0, EventParam::None, None);
    }

    /// Retransmissions, their exhaustion, and address-resolution deadlines.
    pub(crate) fn timers(&mut self) {
        let now = self.now;
        let mut resend: Vec<(Key, Peer, MadBytes, u8)> = Vec::new();
        let mut expired: Vec<Key> = Vec::new();
        let mut resolving: Vec<Key> = Vec::new();
        for (k, s) in self.ids.iter() {
            if s.fsm == Fsm::AddrQuery {
                resolving.push(k);
            }
            if let Some(x) = &s.conn.retx
                && x.deadline <= now
            {
                expired.push(k);
            }
        }
        for k in resolving {
            self.try_resolve(k);
        }
        for k in expired {
            let Some(s) = self.ids.get_mut(k) else {
                continue;
            };
            let Some(d) = s.dev else { continue };
            let Some(x) = s.conn.retx.as_mut() else {
                continue;
            };
            if x.tries_left > 0 {
                x.tries_left -= 1;
                x.deadline = now + x.timeout_ns;
                resend.push((d, s.conn.peer, *x.mad, x.req_qp_type));
                continue;
            }
            s.conn.retx = None;
            let (ty, fsm) = match s.fsm {
                Fsm::ReqSent | Fsm::RepSent => (EventType::Unreachable, Fsm::Closed),
                Fsm::DreqSent => (EventType::Disconnected, Fsm::Disconnected),
                _ => continue,
            };
            s.fsm = fsm;
            self.push_event(k, ty, ETIMEDOUT_STATUS, EventParam::None, None);
            if fsm == Fsm::Disconnected {
                self.enter_timewait(k);
            }
        }
        self.timewait_timers();
        for (d, peer, bytes, req_qp_type) in resend {
            self.stats.retransmits += 1;
            self.send_to(d, &peer, &bytes, req_qp_type);
        }
        self.orphan_timers();
    }

    /// Id `k` is disconnected: it enters the IB CM timewait for the local ACK timeout of its
    /// path (4.096 µs × 2^t, t = packet life time + 1: an ACK-timeout option set before the
    /// route was resolved is in it, one set later is not), as ib_cm's `cm_enter_timewait`
    /// waits `av.timeout`.
    pub(crate) fn enter_timewait(&mut self, k: Key) {
        let now = self.now;
        if let Some(s) = self.ids.get_mut(k) {
            let t = s.route.unwrap_or_default().local_ack_timeout;
            s.timewait_until = Some(now + ib_time_ns(t));
        }
    }

    /// Timewaits that ended: TIMEWAIT_EXIT on asynchronous ids (a synchronous id has no call
    /// waiting for it, so it is not queued there).
    fn timewait_timers(&mut self) {
        let now = self.now;
        let done: Vec<Key> = self
            .ids
            .iter()
            .filter(|(_, s)| s.timewait_until.is_some_and(|t| t <= now))
            .map(|(k, _)| k)
            .collect();
        for k in done {
            let Some(s) = self.ids.get_mut(k) else {
                continue;
            };
            s.timewait_until = None;
            if !s.sync {
                self.push_event(k, EventType::TimewaitExit, 0, EventParam::None, None);
            }
        }
    }

    /// An abandoned DREQ: retransmitted like the id's own until answered or exhausted.
    pub(crate) fn orphan_dreq(&mut self, k: Key) {
        let Some(s) = self.ids.get_mut(k) else { return };
        let (Some(d), Some(retx)) = (s.dev, s.conn.retx.take()) else {
            return;
        };
        let (peer, id) = (s.conn.peer, s.conn.local_comm_id);
        self.push_orphan(d, peer, id, retx);
    }
}

/// Convenience for the DREQ a connected id sends.
pub(crate) fn dreq_msg(local: u32, remote: u32, remote_qpn: u32) -> CmMessage {
    CmMessage::Dreq(Dreq {
        local_comm_id: local,
        remote_comm_id: remote,
        remote_qpn_eecn: remote_qpn & 0xFF_FFFF,
        private_data: [0; limits::DREQ],
    })
}

/// The local QP number of an id's QP (or the one given in the connection parameters).
pub(crate) fn qpn_of(q: Option<&crate::resources::QpRec>, given: u32) -> u32 {
    q.map_or(given & 0xFF_FFFF, |q| q.qpn)
}
