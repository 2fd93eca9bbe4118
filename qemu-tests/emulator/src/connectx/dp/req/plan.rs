//! Segmentation and transmission: the next packet (or run of packets) of the WQE at the send
//! position, cut at the path MTU with its PSN, opcode and headers, and sending it.

use std::collections::VecDeque;

use firmware_interface::cqe::syndrome as cs;
use firmware_interface::wqe::opcode as wop;
use roce_wire::fabric::SegmentShape;
use roce_wire::packet::{
    AtomicEth, Bth, Deth, ExtHeaders, GSI_QKEY, Ieth, ImmDt, Packet, Position, Reth, Transport,
};
use roce_wire::seg::{MessageOp, segment_opcode};
use roce_wire::transport::{psn_add, psn_diff};

use super::{MAX_UNACKED_PSNS, PKTS_PER_ACK_REQ, Plan, mtu_of, transport_of};
use crate::Device;
use crate::connectx::dp::QpInfo;
use crate::connectx::dp::wq::{Local, SendWqe};
use crate::connectx::objects::QP1;

impl Device {
    /// Decides the next packet of the SQ (or the next run of at most `max_run` packets of a
    /// SEND / WRITE message whose data is in memory) and advances the SQ state past it.
    pub(super) fn plan_packet(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        now: u64,
        max_run: u32,
    ) -> Option<Plan> {
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
                        wop::SEND_INVAL => (MessageOp::SendWithInv, false),
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
                        if msg == MessageOp::SendWithInv {
                            // The control segment's immediate field holds the rkey.
                            ext.ieth = Some(Ieth { rkey: w.imm });
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
    pub(super) fn send_plan(&mut self, qpn: u32, plan: Plan) -> bool {
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
    pub(super) fn plan_access_error(&mut self, qpn: u32, plan: &Plan) {
        if let Some(w) = self
            .obj
            .qps
            .get_mut(qpn)
            .and_then(|q| q.dp.sq.wqes.get_mut(plan.wqe))
        {
            w.err = Some(cs::LOCAL_ACCESS_ERR);
        }
    }

    pub(super) fn send_plan_with(&mut self, qpn: u32, plan: &Plan, local: Option<&Local>) -> bool {
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
}
