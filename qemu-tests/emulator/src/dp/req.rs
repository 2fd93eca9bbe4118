//! The requester (`docs/rocev2.md#segmentation`, `docs/rocev2.md#reliability`, `docs/rocev2.md#ud`;
//! `docs/mlx5.md#work-queue-entries`, `docs/mlx5.md#completion-queue-entries`): SQ fetch,
//! segmentation at the path MTU, PSNs, ACK/NAK handling, go-back-N retransmission on timeout and
//! sequence NAKs, RNR waits, the READ/atomic outstanding limit, and in-order completion. RC
//! completes a WQE when it is acknowledged (or answered); UC and UD complete it when it is sent.

use std::collections::VecDeque;

use firmware_interface::cqe::{self, Cqe64, ErrCqe, syndrome as cs};
use firmware_interface::ctx::qpc as q;
use firmware_interface::field::{Be16, Be32, Be64};
use firmware_interface::wqe::opcode as wop;
use roce_wire::fabric::{Segment, SegmentShape};
use roce_wire::packet::{
    AethKind, AtomicEth, Bth, Deth, ExtHeaders, GSI_QKEY, ImmDt, NakCode, OpKind, Packet,
    PacketView, Position, Reth, Transport,
};
use roce_wire::seg::{MessageOp, segment_opcode};
use roce_wire::transport::{psn_add, psn_diff};

use super::cq::NewCqe;
use super::net::Placed;
use super::wq::{Fetched, Local, SendWqe};
use super::{QpInfo, STATE_RTS};
use crate::objects::QP1;
use crate::{Device, DeviceError};

/// Most PSNs a requester has outstanding: its send window. rxe stops at 128
/// (`RXE_MAX_UNACKED_PSNS`), a software limit; a ConnectX documents none below the protocol's
/// 2^23. 1024 lets a 1 MiB message at a 1 KiB MTU go out as one run (one segment on the
/// in-process fabric; the measurement is in `docs/bench.md`) while a loss still costs at most
/// 1024 retransmitted packets.
const MAX_UNACKED_PSNS: i32 = 1024;
/// Packets after which an ack request is set inside a long message (rxe
/// `RXE_MAX_PKT_PER_ACK`).
const PKTS_PER_ACK_REQ: u32 = 64;

/// Send queue state.
#[derive(Debug, Default)]
pub(crate) struct SqState {
    /// Next WQEBB counter to fetch.
    pub ci: u16,
    /// A WQE with a local error was fetched: nothing more is fetched.
    pub halted: bool,
    /// Fetched, not yet completed WQEs, in order.
    pub wqes: VecDeque<SendWqe>,
    /// Index in `wqes` of the WQE being transmitted.
    pub tx: usize,
    /// Packets of `wqes[tx]` already sent (READ: the restart point in response packets).
    pub tx_pkt: u32,
    /// PSN of the next packet.
    pub next_psn: u32,
    /// Oldest PSN not yet acknowledged.
    pub una: u32,
    /// One past the highest PSN ever sent (responses beyond it are bogus).
    pub psn_hi: u32,
    pub retry_left: u8,
    pub rnr_left: u8,
    /// Retransmission deadline.
    pub timer: Option<u64>,
    /// RNR wait: nothing is sent before this time.
    pub rnr_until: Option<u64>,
    /// The PSN of the last go-back-N, until progress is made (ignores duplicate triggers).
    pub rewound_at: Option<u32>,
    /// Packets sent since the last ack request.
    pub since_ack_req: u32,
}

impl SqState {
    /// Everything before `una` is acknowledged (or answered): the retry counts start over,
    /// a go-back-N is forgotten, and the retransmission timer runs from `now` while PSNs are
    /// outstanding.
    fn progressed(&mut self, una: u32, info: &QpInfo, now: u64, timeout: Option<u64>) {
        self.una = una;
        self.retry_left = info.retry_count;
        self.rnr_left = info.rnr_retry;
        self.rewound_at = None;
        self.timer = match (self.una != self.psn_hi, timeout) {
            (true, Some(t)) => Some(now.saturating_add(t)),
            _ => None,
        };
    }
}

fn transport_of(st: u32) -> Transport {
    match st {
        q::ST_UC => Transport::Uc,
        q::ST_UD | q::ST_QP1 => Transport::Ud,
        _ => Transport::Rc,
    }
}

/// One packet to send, decided under the QP borrow, built after.
struct Plan {
    bth: Bth,
    ext: ExtHeaders,
    /// Payload: `(offset, length)` in the WQE's local data.
    data: Option<(u64, u64)>,
    dst: Option<std::net::Ipv4Addr>,
    sgid: usize,
    sport: u16,
    tclass: u8,
    ttl: u8,
    /// Index of the WQE in `wqes` (to mark a DMA fault).
    wqe: usize,
    /// More than one packet of the message, sent as one segment (`data` then covers them
    /// all, `bth` is the first one's and `ext` holds the headers of all of them).
    run: Option<SegmentShape>,
}

impl Device {
    /// Runs the SQ of `qpn` as far as it can go now: fetch, transmit, complete (RTS), or flush
    /// (ERR).
    pub(crate) fn sq_kick(&mut self, qpn: u32) {
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        match qp.state {
            STATE_RTS => {
                self.sq_fetch(qpn);
                self.sq_tx(qpn);
                self.sq_complete(qpn);
            }
            super::STATE_ERR => {
                self.flush(qpn);
            }
            _ => {}
        }
    }

    /// Poll-mode work for an RTS QP: new WQEs in the record, timers, transmission.
    pub(crate) fn sq_poll(&mut self, qpn: u32) -> bool {
        let before = self.sq_marks(qpn);
        self.sq_timers(qpn);
        self.sq_kick(qpn);
        before != self.sq_marks(qpn)
    }

    fn sq_marks(&self, qpn: u32) -> Option<(u16, u32, usize, u8)> {
        self.obj
            .qps
            .get(qpn)
            .map(|q| (q.dp.sq.ci, q.dp.sq.next_psn, q.dp.sq.wqes.len(), q.state))
    }

    /// Fetches the WQEs the doorbell record says were posted.
    fn sq_fetch(&mut self, qpn: u32) {
        loop {
            let Some(qp) = self.obj.qps.get(qpn) else {
                return;
            };
            if qp.dp.sq.halted || qp.sq.is_none() || qp.state != STATE_RTS {
                return;
            }
            let ci = qp.dp.sq.ci;
            let nbb = super::wq::sq_bbs(qp);
            let Some(pi) = self.sq_producer(qpn) else {
                self.qp_fatal(qpn);
                return;
            };
            if pi == ci {
                return;
            }
            let posted = pi.wrapping_sub(ci);
            if u32::from(posted) > nbb {
                self.error(DeviceError::WqOverflow {
                    qpn,
                    sq: true,
                    producer: pi,
                    consumer: ci,
                });
                self.qp_fatal(qpn);
                return;
            }
            match self.fetch_send_wqe(qpn, ci) {
                Fetched::Catastrophic => {
                    self.qp_fatal(qpn);
                    return;
                }
                Fetched::Wqe(mut w, bbs) => {
                    if bbs > posted && w.err.is_none() {
                        self.error(DeviceError::BadWqe {
                            qpn,
                            wqe_counter: ci,
                            fault: crate::WqeFault::BeyondProducer,
                        });
                        w.err = Some(cs::LOCAL_QP_OP_ERR);
                    }
                    let Some(qp) = self.obj.qps.get_mut(qpn) else {
                        return;
                    };
                    let sq = &mut qp.dp.sq;
                    sq.ci = ci.wrapping_add(bbs.min(posted));
                    if w.err.is_some() {
                        sq.halted = true;
                    }
                    sq.wqes.push_back(w);
                }
            }
        }
    }

    /// Sends what the window, the READ/atomic limit, fences and RNR waits allow.
    fn sq_tx(&mut self, qpn: u32) {
        // Nothing fetched is left to transmit and no RNR wait to clear (the common case of a
        // poll): skip reading the QP context.
        match self.obj.qps.get(qpn) {
            Some(qp) if qp.dp.sq.tx < qp.dp.sq.wqes.len() || qp.dp.sq.rnr_until.is_some() => {}
            _ => return,
        }
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        if info.state != STATE_RTS {
            return;
        }
        let now = self.now();
        let timeout = self.ack_timeout_ns(info.ack_timeout);
        // RC packets to a fabric that carries segments go as runs of up to the window.
        let max_run = if info.st == q::ST_RC && self.segments_to(Self::peer_ip(&info)) {
            MAX_UNACKED_PSNS as u32
        } else {
            1
        };
        while let Some(plan) = self.plan_packet(qpn, &info, now, max_run) {
            if let Some(qp) = self.obj.qps.get_mut(qpn) {
                let sq = &mut qp.dp.sq;
                if psn_diff(sq.next_psn, sq.psn_hi) > 0 {
                    sq.psn_hi = sq.next_psn;
                }
            }
            if !self.send_plan(qpn, plan) {
                break;
            }
            if info.st == q::ST_RC
                && let Some(qp) = self.obj.qps.get_mut(qpn)
                && qp.dp.sq.timer.is_none()
                && let Some(t) = timeout
            {
                qp.dp.sq.timer = Some(now.saturating_add(t));
            }
        }
    }

    /// Decides the next packet of the SQ (or the next run of at most `max_run` packets of a
    /// SEND / WRITE message whose data is in memory) and advances the SQ state past it.
    fn plan_packet(&mut self, qpn: u32, info: &QpInfo, now: u64, max_run: u32) -> Option<Plan> {
        let transport = transport_of(info.st);
        let mtu = u64::from(info.mtu);
        let peer = Self::peer_ip(info);
        let sport = Self::qp_sport(qpn, info);
        let qp = self.obj.qps.get_mut(qpn)?;
        let sq = &mut qp.dp.sq;
        if let Some(t) = sq.rnr_until {
            if now < t {
                return None;
            }
            sq.rnr_until = None;
        }
        loop {
            let i = sq.tx;
            // READ / atomic requests in flight before this WQE: counted only when a fence or
            // the outstanding limit needs them (a walk over the fetched WQEs).
            let outstanding_rd = |wqes: &VecDeque<SendWqe>| {
                wqes.iter()
                    .take(i)
                    .filter(|w| w.is_rd_atomic() && !w.done && w.first_psn.is_some())
                    .count() as u32
            };
            let window_full = psn_diff(sq.next_psn, sq.una) >= MAX_UNACKED_PSNS;
            let (fence, opcode) = match sq.wqes.get(i) {
                Some(w) => (w.fence && w.first_psn.is_none(), w.opcode),
                None => return None,
            };
            let rd_before =
                if fence || matches!(opcode, wop::RDMA_READ | wop::ATOMIC_CS | wop::ATOMIC_FA) {
                    outstanding_rd(&sq.wqes)
                } else {
                    0
                };
            let w = sq.wqes.get_mut(i)?;
            if w.err.is_some() {
                return None;
            }
            if w.opcode == wop::NOP {
                w.done = true;
                sq.tx += 1;
                sq.tx_pkt = 0;
                continue;
            }
            if fence && rd_before > 0 {
                return None;
            }
            if transport == Transport::Rc && window_full {
                return None;
            }
            let mut bth = Bth::new(
                roce_wire::packet::Opcode::RcSendOnly,
                info.remote_qpn,
                sq.next_psn,
            );
            let mut ext = ExtHeaders::NONE;
            let mut data = None;
            let mut run = None;
            let (mut dst, mut sgid, mut sport, mut tclass, mut ttl) =
                (peer, info.sgid, sport, info.tclass, info.hop_limit);
            match w.opcode {
                wop::RDMA_READ | wop::ATOMIC_CS | wop::ATOMIC_FA => {
                    if rd_before >= info.sra_max {
                        return None;
                    }
                    let r = w.remote?;
                    let first = *w.first_psn.get_or_insert(sq.next_psn);
                    let k = sq.tx_pkt;
                    bth.psn = psn_add(first, k);
                    bth.ack_req = true;
                    if w.opcode == wop::RDMA_READ {
                        w.npkts = roce_wire::seg::packet_count(w.len as u32, mtu_of(info.mtu));
                        w.rd_base = k;
                        let off = u64::from(k) * mtu;
                        bth.opcode = roce_wire::packet::Opcode::RcRdmaReadRequest;
                        ext.reth = Some(Reth {
                            va: r.raddr.wrapping_add(off),
                            rkey: r.rkey,
                            dma_len: (w.len - off.min(w.len)) as u32,
                        });
                        sq.next_psn = psn_add(first, w.npkts);
                    } else {
                        w.npkts = 1;
                        let (swap_add, compare) = w.atomic?;
                        bth.opcode = if w.opcode == wop::ATOMIC_CS {
                            roce_wire::packet::Opcode::RcCompareSwap
                        } else {
                            roce_wire::packet::Opcode::RcFetchAdd
                        };
                        ext.atomic_eth = Some(AtomicEth {
                            va: r.raddr,
                            rkey: r.rkey,
                            swap_add,
                            compare,
                        });
                        sq.next_psn = psn_add(first, 1);
                    }
                    sq.tx += 1;
                    sq.tx_pkt = 0;
                    sq.since_ack_req = 0;
                }
                _ => {
                    let (msg, remote) = match w.opcode {
                        wop::SEND => (MessageOp::Send, false),
                        wop::SEND_IMM => (MessageOp::SendWithImm, false),
                        wop::RDMA_WRITE => (MessageOp::RdmaWrite, true),
                        _ => (MessageOp::RdmaWriteWithImm, true),
                    };
                    if transport == Transport::Ud {
                        if w.len > mtu {
                            w.err = Some(cs::LOCAL_LENGTH_ERR);
                            return None;
                        }
                        let ud = w.ud?;
                        dst = roce_wire::ipv4_from_gid(&ud.rgid);
                        sgid = ud.sgid;
                        sport = if ud.sport != 0 { ud.sport } else { sport };
                        tclass = ud.tclass;
                        ttl = if ud.hop_limit == 0 { 64 } else { ud.hop_limit };
                        bth.dest_qp = ud.dqpn;
                        let qkey = if qpn == QP1 {
                            GSI_QKEY
                        } else if ud.qkey & 0x8000_0000 != 0 {
                            info.qkey
                        } else {
                            ud.qkey
                        };
                        ext.deth = Some(Deth { qkey, src_qp: qpn });
                    }
                    let first = *w.first_psn.get_or_insert(sq.next_psn);
                    w.npkts = roce_wire::seg::packet_count(w.len as u32, mtu_of(info.mtu));
                    let k = sq.tx_pkt;
                    let pos = Position::of(k, w.npkts);
                    bth.opcode = segment_opcode(transport, msg, pos)?;
                    bth.psn = psn_add(first, k);
                    let off = u64::from(k) * mtu;
                    // A run ends at the message's end or the window's edge. Its last packet
                    // asks for an ACK if one of its packets would have: the receiver takes
                    // the run in at once, and the ACK it sends for the last packet is the one
                    // the earlier requests' ACKs would have been coalesced into.
                    let count = if max_run > 1 && matches!(w.local, Local::Sgl(_)) {
                        let room = (MAX_UNACKED_PSNS - psn_diff(sq.next_psn, sq.una)).max(1);
                        (w.npkts - k).min(room as u32).min(max_run)
                    } else {
                        1
                    };
                    let len = (w.len - off.min(w.len)).min(mtu * u64::from(count));
                    data = Some((off, len));
                    if count > 1 {
                        run = Some(SegmentShape {
                            msg,
                            index: k,
                            msg_pkts: w.npkts,
                            count,
                            mtu: info.mtu,
                            len,
                        });
                    }
                    let pos = Position::of(k + count - 1, w.npkts);
                    if remote && k == 0 {
                        let r = w.remote?;
                        ext.reth = Some(Reth {
                            va: r.raddr,
                            rkey: r.rkey,
                            dma_len: w.len as u32,
                        });
                    }
                    if pos.ends_message() {
                        if matches!(msg, MessageOp::SendWithImm | MessageOp::RdmaWriteWithImm) {
                            ext.imm_dt = Some(ImmDt { imm: w.imm });
                        }
                        if w.opcode != wop::RDMA_WRITE {
                            bth.solicited = w.solicited;
                        }
                    }
                    sq.since_ack_req += count;
                    if transport == Transport::Rc
                        && (pos.ends_message() || sq.since_ack_req >= PKTS_PER_ACK_REQ)
                    {
                        bth.ack_req = true;
                        sq.since_ack_req = 0;
                    }
                    sq.next_psn = psn_add(bth.psn, count);
                    sq.tx_pkt += count;
                    if sq.tx_pkt >= w.npkts {
                        sq.tx += 1;
                        sq.tx_pkt = 0;
                        if transport != Transport::Rc {
                            w.done = true;
                        }
                    }
                }
            }
            let wi = i;
            return Some(Plan {
                bth,
                ext,
                data,
                dst,
                sgid,
                sport,
                tclass,
                ttl,
                wqe: wi,
                run,
            });
        }
    }

    /// Builds and sends a planned packet; `false` if the SQ must stop (a local DMA fault).
    fn send_plan(&mut self, qpn: u32, plan: Plan) -> bool {
        // The WQE's local data is lent out for the packet and put back after (no copy of the
        // gather list or inline data per packet).
        let local = match plan.data {
            Some(_) => self
                .obj
                .qps
                .get_mut(qpn)
                .and_then(|q| q.dp.sq.wqes.get_mut(plan.wqe))
                .map(|w| std::mem::replace(&mut w.local, Local::Inline(Vec::new()))),
            None => None,
        };
        let ok = self.send_plan_with(qpn, &plan, local.as_ref());
        if let Some(l) = local
            && let Some(w) = self
                .obj
                .qps
                .get_mut(qpn)
                .and_then(|q| q.dp.sq.wqes.get_mut(plan.wqe))
        {
            w.local = l;
        }
        ok
    }

    /// Marks the WQE of `plan` with a local access error (its data could not be read).
    fn plan_access_error(&mut self, qpn: u32, plan: &Plan) {
        if let Some(w) = self
            .obj
            .qps
            .get_mut(qpn)
            .and_then(|q| q.dp.sq.wqes.get_mut(plan.wqe))
        {
            w.err = Some(cs::LOCAL_ACCESS_ERR);
        }
    }

    fn send_plan_with(&mut self, qpn: u32, plan: &Plan, local: Option<&Local>) -> bool {
        let (Some(src), Some(dst)) = (self.src_ip(plan.sgid), plan.dst) else {
            // No route: the data is still read (a DMA fault is the WQE's error), then the
            // packet is dropped.
            if let (Some((off, len)), Some(Local::Sgl(sgl))) = (plan.data, local)
                && self.sgl_read(sgl, off, len as usize).is_err()
            {
                self.plan_access_error(qpn, plan);
                return false;
            }
            self.net.stats.tx_dropped += plan.run.map_or(1, |r| u64::from(r.count));
            return true;
        };
        let mut pkt = Packet::new(src, dst, plan.bth, &[][..]).with_ext(plan.ext);
        pkt.udp_src_port = plan.sport;
        pkt.tos = plan.tclass;
        pkt.ttl = if plan.ttl == 0 { 64 } else { plan.ttl };
        match (plan.data, local) {
            (Some((off, len)), Some(Local::Sgl(sgl))) => {
                // Read by DMA straight into the frame, or when the receiver takes the
                // segment in.
                let sent = match plan.run {
                    Some(shape) => self.emit_segment(qpn, &pkt, shape, sgl, off),
                    None => self.emit_sgl(&pkt, sgl, off, len as usize),
                };
                if sent.is_err() {
                    self.plan_access_error(qpn, plan);
                    return false;
                }
            }
            (Some((off, len)), Some(Local::Inline(d))) => {
                let s = (off as usize).min(d.len());
                let e = (s + len as usize).min(d.len());
                pkt.payload = &d[s..e];
                self.emit(&pkt);
            }
            _ => self.emit(&pkt),
        }
        true
    }

    /// Completes finished WQEs at the head of the SQ, in order; a WQE in error completes
    /// with an error CQE and moves the QP to ERR.
    pub(crate) fn sq_complete(&mut self, qpn: u32) {
        loop {
            let Some(qp) = self.obj.qps.get_mut(qpn) else {
                return;
            };
            let sq = &mut qp.dp.sq;
            let Some(front) = sq.wqes.front() else {
                return;
            };
            if let Some(synd) = front.err {
                let w = sq.wqes.pop_front();
                sq.tx = sq.tx.saturating_sub(1);
                if let Some(w) = w {
                    self.req_err_cqe(qpn, w.idx, w.opcode, synd);
                }
                self.qp_to_err(qpn, None);
                return;
            }
            if !front.done {
                return;
            }
            let Some(w) = sq.wqes.pop_front() else {
                return;
            };
            if sq.tx == 0 {
                // It was acknowledged while being retransmitted.
                sq.tx_pkt = 0;
                if psn_diff(sq.una, sq.next_psn) > 0 {
                    sq.next_psn = sq.una;
                }
            }
            sq.tx = sq.tx.saturating_sub(1);
            if w.signaled && !self.req_cqe(qpn, &w) {
                self.qp_fatal(qpn);
                return;
            }
        }
    }

    fn req_cqe(&mut self, qpn: u32, w: &SendWqe) -> bool {
        let Some(info) = self.qp_info(qpn) else {
            return false;
        };
        let Some(cqn) = info.cqn_snd else {
            return false;
        };
        let mut c = Cqe64::zeroed();
        c.srqn_uidx = Be32::new(info.user_index);
        c.byte_cnt = Be32::new(match w.opcode {
            wop::RDMA_READ => w.len as u32,
            wop::ATOMIC_CS | wop::ATOMIC_FA => 8,
            _ => 0,
        });
        c.timestamp = Be64::new(self.now());
        c.sop_drop_qpn = Be32::new(u32::from(w.opcode) << cqe::SEND_OPCODE_SHIFT | qpn);
        c.wqe_counter = Be16::new(w.idx);
        self.push_cqe(cqn, NewCqe::ok(&c, cqe::opcode::REQ, false))
            .is_ok()
    }

    pub(crate) fn req_err_cqe(&mut self, qpn: u32, idx: u16, opcode: u8, synd: u8) {
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let Some(cqn) = info.cqn_snd else {
            return;
        };
        let e = ErrCqe {
            srqn: Be32::new(info.user_index),
            syndrome: synd,
            s_wqe_opcode_qpn: Be32::new(u32::from(opcode) << cqe::SEND_OPCODE_SHIFT | qpn),
            wqe_counter: Be16::new(idx),
            ..ErrCqe::default()
        };
        // A full or broken CQ: the error has nowhere to go (the CQ_ERROR event says so).
        let _ = self.push_cqe(cqn, NewCqe::err(&e, cqe::opcode::REQ_ERR));
    }

    /// A flushed send WQE.
    pub(crate) fn flush_send(&mut self, qpn: u32, idx: u16, opcode: u8) {
        self.req_err_cqe(qpn, idx, opcode, cs::WR_FLUSH_ERR);
    }

    // ------------------------------------------------------------------ RC responses

    /// An ACK, NAK, READ response or atomic ACK for the requester of RC QP `qpn`.
    pub(crate) fn rc_response(&mut self, qpn: u32, pkt: &PacketView<'_>) {
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        if qp.state != STATE_RTS {
            self.net.stats.rx_dropped += 1;
            return;
        }
        let (una, hi) = (qp.dp.sq.una, qp.dp.sq.psn_hi);
        let psn = pkt.bth.psn;
        // Only PSNs of requests sent and not yet acknowledged mean anything.
        if psn_diff(psn, una) < 0 || psn_diff(psn, hi) >= 0 {
            self.net.stats.rx_duplicates += 1;
            return;
        }
        match pkt.bth.opcode.kind() {
            OpKind::Acknowledge => {
                let Some(aeth) = pkt.ext.aeth else {
                    return;
                };
                match aeth.kind() {
                    AethKind::Ack { .. } => self.ack_through(qpn, psn),
                    AethKind::RnrNak { timer } => {
                        self.ack_before(qpn, psn);
                        self.rnr_nak(qpn, psn, timer);
                    }
                    AethKind::Nak(NakCode::PsnSequenceError) => {
                        self.ack_before(qpn, psn);
                        self.go_back_n(qpn, psn, false);
                    }
                    AethKind::Nak(NakCode::InvalidRequest) => {
                        self.fail_at(qpn, psn, cs::REMOTE_INVAL_REQ_ERR);
                    }
                    AethKind::Nak(NakCode::RemoteAccessError) => {
                        self.fail_at(qpn, psn, cs::REMOTE_ACCESS_ERR);
                    }
                    AethKind::Nak(_) => self.fail_at(qpn, psn, cs::REMOTE_OP_ERR),
                    AethKind::Reserved(_) => self.fail_at(qpn, psn, cs::BAD_RESP_ERR),
                }
            }
            OpKind::RdmaReadResponse => self.read_response(qpn, pkt),
            OpKind::AtomicAcknowledge => self.atomic_ack(qpn, pkt),
            _ => {}
        }
        self.sq_complete(qpn);
        self.sq_tx(qpn);
        self.sq_complete(qpn);
    }

    /// Everything up to and including `psn` is acknowledged.
    fn ack_through(&mut self, qpn: u32, psn: u32) {
        self.ack_before(qpn, psn_add(psn, 1));
    }

    /// Everything before `psn` is acknowledged (implicitly, by a NAK or a later response).
    /// A READ or atomic entirely before `psn` whose answer has not arrived lost it: the
    /// requester goes back to it.
    fn ack_before(&mut self, qpn: u32, psn: u32) {
        let now = self.now();
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let timeout = self.ack_timeout_ns(info.ack_timeout);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        let mut lost = None;
        let mut new_una = sq.una;
        for w in sq.wqes.iter_mut() {
            let (Some(first), Some(last)) = (w.first_psn, w.last_psn()) else {
                if w.done {
                    continue; // a NOP
                }
                break;
            };
            if psn_diff(last, psn) >= 0 {
                // `psn` falls inside (or before) this WQE.
                if !w.is_rd_atomic() && psn_diff(psn, first) > 0 && psn_diff(psn, new_una) > 0 {
                    new_una = psn;
                }
                break;
            }
            if w.is_rd_atomic() && !w.done {
                lost = Some(psn_add(first, w.rcvd));
                break;
            }
            w.done = true;
            new_una = psn_add(last, 1);
        }
        if psn_diff(new_una, sq.una) > 0 {
            sq.progressed(new_una, &info, now, timeout);
            resync_tx(sq);
        }
        if let Some(p) = lost {
            self.go_back_n(qpn, p, false);
        }
    }

    /// Go-back-N: retransmit from `psn`. Unless `force`, a second request for the same PSN
    /// before any progress is ignored (a duplicated NAK).
    fn go_back_n(&mut self, qpn: u32, psn: u32, force: bool) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if !force && sq.rewound_at == Some(psn) {
            return;
        }
        let Some(j) = sq
            .wqes
            .iter()
            .position(|w| match (w.first_psn, w.last_psn()) {
                (Some(f), Some(l)) => psn_diff(psn, f) >= 0 && psn_diff(psn, l) <= 0,
                _ => false,
            })
        else {
            return;
        };
        let w = &sq.wqes[j];
        let first = w.first_psn.unwrap_or(psn);
        sq.tx_pkt = match w.opcode {
            wop::ATOMIC_CS | wop::ATOMIC_FA => 0,
            wop::RDMA_READ => w.rcvd,
            _ => psn_diff(psn, first).max(0) as u32,
        };
        let restart = psn_add(first, sq.tx_pkt);
        sq.tx = j;
        sq.next_psn = restart;
        sq.since_ack_req = 0;
        sq.rewound_at = Some(psn);
        self.net.stats.retransmits += 1;
    }

    fn rnr_nak(&mut self, qpn: u32, psn: u32, code: u8) {
        let wait = self.rnr_wait_ns(code);
        let now = self.now();
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if sq.rnr_until.is_some() {
            return; // a duplicate of the NAK we are already waiting on
        }
        if sq.rnr_left == 0 {
            self.fail_at(qpn, psn, cs::RNR_RETRY_EXC_ERR);
            return;
        }
        if sq.rnr_left != 7 {
            sq.rnr_left -= 1;
        }
        sq.rnr_until = Some(now.saturating_add(wait));
        sq.timer = None;
        self.go_back_n(qpn, psn, true);
    }

    /// A fatal NAK (or retry exhaustion) for the message at `psn`: it completes with
    /// `synd`; earlier messages count as acknowledged.
    fn fail_at(&mut self, qpn: u32, psn: u32, synd: u8) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        sq.timer = None;
        sq.rnr_until = None;
        let mut hit = false;
        for w in sq.wqes.iter_mut() {
            if w.done && w.first_psn.is_none() {
                continue; // a NOP
            }
            let covers = match (w.first_psn, w.last_psn()) {
                (Some(f), Some(l)) => psn_diff(psn, f) >= 0 && psn_diff(psn, l) <= 0,
                _ => true,
            };
            if covers || w.first_psn.is_none() {
                w.err = Some(synd);
                hit = true;
                break;
            }
            if w.is_rd_atomic() && !w.done {
                // Its answer never came; it fails with the message after it.
                w.err = Some(synd);
                hit = true;
                break;
            }
            w.done = true;
        }
        if !hit && let Some(w) = sq.wqes.front_mut() {
            w.err = Some(synd);
        }
    }

    fn read_response(&mut self, qpn: u32, pkt: &PacketView<'_>) {
        let psn = pkt.bth.psn;
        // Requests before the response were executed by the responder: acknowledged.
        self.ack_before(qpn, psn);
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let mtu = u64::from(info.mtu);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        let Some(j) = sq
            .wqes
            .iter()
            .position(|w| w.first_psn.is_some() && !w.done)
        else {
            return;
        };
        let w = &sq.wqes[j];
        let Some(first) = w.first_psn else {
            return;
        };
        if w.opcode != wop::RDMA_READ || psn != psn_add(first, w.rcvd) || w.err.is_some() {
            self.net.stats.rx_duplicates += 1;
            return;
        }
        let k = w.rcvd;
        let off = u64::from(k) * mtu;
        let want = (w.len - off.min(w.len)).min(mtu);
        let base = w.rd_base.min(k);
        let pos_ok = pkt.bth.opcode.position() == Position::of(k - base, w.npkts - base);
        if !pos_ok || pkt.payload.len() as u64 != want {
            self.net.stats.rx_dropped += 1;
            return;
        }
        let Local::Sgl(sgl) = w.local.clone() else {
            return;
        };
        let ok = self.sgl_write(&sgl, off, pkt.payload).is_ok();
        let now = self.now();
        let timeout = self.ack_timeout_ns(info.ack_timeout);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        let Some(w) = sq.wqes.get_mut(j) else {
            return;
        };
        if !ok {
            w.err = Some(cs::LOCAL_ACCESS_ERR);
            return;
        }
        w.rcvd += 1;
        if w.rcvd >= w.npkts {
            w.done = true;
        }
        sq.progressed(psn_add(psn, 1), &info, now, timeout);
    }

    /// A segment of READ response packets for the requester of QP `qpn`: taken whole (one
    /// copy from the responder's memory into the READ's scatter list) when it is exactly the
    /// continuation the oldest outstanding READ expects; `false` leaves it to be taken in
    /// packet by packet (a duplicate, a gap, another WQE first in line, a fault: the
    /// per-packet path gives each packet its due).
    pub(crate) fn read_segment(&mut self, qpn: u32, info: &QpInfo, seg: &Segment) -> bool {
        let Some(qp) = self.obj.qps.get(qpn) else {
            return false;
        };
        let sq = &qp.dp.sq;
        let (psn, last) = (seg.first_psn(), seg.last_psn());
        if qp.state != STATE_RTS
            || psn_diff(psn, sq.una) < 0
            || psn_diff(last, sq.psn_hi) >= 0
            || seg.mtu() != info.mtu
        {
            return false;
        }
        let Some(j) = sq
            .wqes
            .iter()
            .position(|w| w.first_psn.is_some() && !w.done)
        else {
            return false;
        };
        let w = &sq.wqes[j];
        let (Some(first), Local::Sgl(sgl)) = (w.first_psn, &w.local) else {
            return false;
        };
        let mtu = u64::from(info.mtu);
        let k = w.rcvd;
        let base = w.rd_base.min(k);
        let off = u64::from(k) * mtu;
        let end = w.len.min(u64::from(k + seg.count()) * mtu);
        if w.opcode != wop::RDMA_READ
            || w.err.is_some()
            || psn != psn_add(first, k)
            || seg.index() != k - base
            || seg.msg_pkts() != w.npkts - base
            || end.checked_sub(off) != Some(seg.len())
        {
            return false;
        }
        // One copy, from the responder's memory straight into the READ's buffer.
        match self.place(seg, sgl, off) {
            Placed::Done => {}
            // The responder withdrew the data.
            Placed::Gone => return self.segment_lost(seg),
            // A fault of our own memory: the per-packet path fails the WQE.
            Placed::Fault => return false,
        }
        // What the first packet's `ack_before` does (the WQE found is the oldest one not
        // done, so nothing before it is left to acknowledge or lose); the later packets'
        // fall inside this READ and do nothing.
        self.ack_before(qpn, psn);
        let now = self.now();
        let timeout = self.ack_timeout_ns(info.ack_timeout);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return true;
        };
        let sq = &mut qp.dp.sq;
        let Some(w) = sq.wqes.get_mut(j) else {
            return true;
        };
        w.rcvd += seg.count();
        if w.rcvd >= w.npkts {
            w.done = true;
        }
        sq.progressed(psn_add(last, 1), info, now, timeout);
        self.sq_complete(qpn);
        self.sq_tx(qpn);
        self.sq_complete(qpn);
        true
    }

    fn atomic_ack(&mut self, qpn: u32, pkt: &PacketView<'_>) {
        let psn = pkt.bth.psn;
        let Some(orig) = pkt.ext.atomic_ack_eth.map(|a| a.orig) else {
            return;
        };
        self.ack_before(qpn, psn);
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        let Some(j) = sq
            .wqes
            .iter()
            .position(|w| w.first_psn.is_some() && !w.done)
        else {
            return;
        };
        let w = &sq.wqes[j];
        if !matches!(w.opcode, wop::ATOMIC_CS | wop::ATOMIC_FA)
            || w.first_psn != Some(psn)
            || w.err.is_some()
        {
            self.net.stats.rx_duplicates += 1;
            return;
        }
        let Local::Sgl(sgl) = w.local.clone() else {
            return;
        };
        // The original value lands in local memory big-endian (the PRM's default atomic
        // response mode; no host-endianness mode is advertised).
        let ok = self.sgl_write(&sgl, 0, &orig.to_be_bytes()).is_ok();
        let now = self.now();
        let timeout = self.ack_timeout_ns(info.ack_timeout);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        let Some(w) = sq.wqes.get_mut(j) else {
            return;
        };
        if !ok {
            w.err = Some(cs::LOCAL_ACCESS_ERR);
            return;
        }
        w.done = true;
        sq.progressed(psn_add(psn, 1), &info, now, timeout);
    }

    /// Retransmission timer and RNR wait of an RTS QP.
    fn sq_timers(&mut self, qpn: u32) {
        let now = self.now();
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if sq.rnr_until.is_some_and(|t| t <= now) {
            sq.rnr_until = None;
        }
        if sq.timer.is_none_or(|t| t > now) {
            return;
        }
        sq.timer = None;
        let outstanding = sq.una != sq.psn_hi
            || sq
                .wqes
                .iter()
                .any(|w| w.is_rd_atomic() && w.first_psn.is_some() && !w.done);
        if !outstanding {
            return;
        }
        let una = sq.una;
        let exhausted = sq.retry_left == 0;
        if !exhausted {
            sq.retry_left -= 1;
        }
        self.net.stats.timeouts += 1;
        if exhausted {
            self.fail_at(qpn, una, cs::TRANSPORT_RETRY_EXC_ERR);
            self.sq_complete(qpn);
            return;
        }
        self.go_back_n(qpn, una, true);
    }
}

/// After acknowledgements overtook a go-back-N (the ACKs of the first transmission arrive
/// after the rewind), moves the transmit position forward to the first unacknowledged PSN.
fn resync_tx(sq: &mut SqState) {
    if psn_diff(sq.una, sq.next_psn) <= 0 {
        return;
    }
    let una = sq.una;
    let pos = sq
        .wqes
        .iter()
        .position(|w| match (w.first_psn, w.last_psn()) {
            (Some(f), Some(l)) => psn_diff(una, f) >= 0 && psn_diff(una, l) <= 0,
            (None, _) => !w.done,
            _ => false,
        });
    match pos {
        Some(j) => {
            let w = &sq.wqes[j];
            sq.tx = j;
            sq.tx_pkt = match (w.first_psn, w.opcode) {
                (None, _) | (_, wop::ATOMIC_CS | wop::ATOMIC_FA) => 0,
                (_, wop::RDMA_READ) => w.rcvd,
                (Some(f), _) => psn_diff(una, f).max(0) as u32,
            };
            sq.next_psn = una;
        }
        None => {
            sq.tx = sq.wqes.len();
            sq.tx_pkt = 0;
            sq.next_psn = una;
        }
    }
}

fn mtu_of(bytes: u32) -> roce_wire::Mtu {
    match bytes {
        256 => roce_wire::Mtu::Mtu256,
        512 => roce_wire::Mtu::Mtu512,
        1024 => roce_wire::Mtu::Mtu1024,
        2048 => roce_wire::Mtu::Mtu2048,
        _ => roce_wire::Mtu::Mtu4096,
    }
}
