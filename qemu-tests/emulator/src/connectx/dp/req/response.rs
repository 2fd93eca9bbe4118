//! ACK and response processing: ACKs and NAKs, READ responses (packets and segments) and
//! atomic acknowledgements, and what they acknowledge.

use firmware_interface::cqe::syndrome as cs;
use firmware_interface::wqe::opcode as wop;
use roce_wire::fabric::Segment;
use roce_wire::packet::{AethKind, NakCode, OpKind, PacketView, Position};
use roce_wire::transport::{psn_add, psn_diff};

use super::resync_tx;
use crate::Device;
use crate::connectx::dp::net::Placed;
use crate::connectx::dp::wq::Local;
use crate::connectx::dp::{QpInfo, STATE_RTS};

impl Device {
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
    pub(super) fn ack_through(&mut self, qpn: u32, psn: u32) {
        self.ack_before(qpn, psn_add(psn, 1));
    }

    /// Everything before `psn` is acknowledged (implicitly, by a NAK or a later response).
    /// A READ or atomic entirely before `psn` whose answer has not arrived lost it: the
    /// requester goes back to it.
    pub(super) fn ack_before(&mut self, qpn: u32, psn: u32) {
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

    pub(super) fn read_response(&mut self, qpn: u32, pkt: &PacketView<'_>) {
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
        // A READ re-requested from packet `base` on is answered as a new message (FIRST
        // first, as the IBA has it); Linux's rxe replays the original message instead and
        // goes on with MIDDLE / LAST at the requested PSN. Either numbering places the data
        // by the PSN alone, so both are taken; refusing rxe's made every retry fail until
        // the retry count ran out.
        let pos = pkt.bth.opcode.position();
        let pos_ok =
            pos == Position::of(k - base, w.npkts - base) || pos == Position::of(k, w.npkts);
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
            || !((seg.index() == k - base && seg.msg_pkts() == w.npkts - base)
                || (seg.index() == k && seg.msg_pkts() == w.npkts))
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

    pub(super) fn atomic_ack(&mut self, qpn: u32, pkt: &PacketView<'_>) {
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
        // The original value lands in local memory in the negotiated response byte order.
        let ok = self.sgl_write(&sgl, 0, &self.atomic_response(orig)).is_ok();
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
}
