//! Taking in a run of RC packets carried as one fabric segment: a WRITE run at the expected PSN
//! in one piece, a wholly duplicate run as one duplicate, anything else packet by packet.

use firmware_interface::ctx::qpc as q;
use roce_wire::fabric::Segment;
use roce_wire::packet::{Packet, PacketView};
use roce_wire::seg::MessageOp;
use roce_wire::transport::{psn_add, psn_diff};

use super::{InMsg, MAX_DMA_LEN, receives};
use crate::Device;
use crate::connectx::dp::QpInfo;
use crate::connectx::dp::mkey::access;
use crate::connectx::dp::net::Placed;

impl Device {
    /// A segment of RC packets: taken whole when it is the run of RDMA WRITE packets the QP
    /// expects next (one PSN range, one key check, one copy from the sender's memory into
    /// the target) or the READ response packets its oldest READ expects next (see
    /// [`Device::read_segment`]), or dropped whole as a duplicate when every packet of a
    /// SEND or WRITE run was executed before (its payload is then never read: the sender may
    /// have completed the WQE and reused the buffer). `false` leaves it to be taken in packet
    /// by packet: every other kind of segment, and every case in which some packet would not
    /// simply be accepted (the per-packet path then fails the right packet with the right
    /// error, as for frames).
    pub(crate) fn rc_segment(&mut self, seg: &Segment) -> bool {
        let head = seg.head();
        let qpn = head.bth.dest_qp;
        let Some(info) = self.qp_info(qpn) else {
            return false;
        };
        if info.st != q::ST_RC || Self::peer_ip(&info) != Some(head.src_ip) {
            return false;
        }
        if seg.msg() == MessageOp::RdmaReadResponse {
            return self.read_segment(qpn, &info, seg);
        }
        if !receives(info.state) {
            return false;
        }
        self.first_packet(qpn);
        let Some(epsn) = self.obj.qps.get(qpn).map(|q| q.dp.resp.epsn) else {
            return false;
        };
        // Only the addresses of the request matter to the ACK.
        let view = Packet::new(head.src_ip, head.dst_ip, head.bth, &[][..]);
        if psn_diff(seg.last_psn(), epsn) < 0 {
            // Executed already: what each duplicate packet would do, once (only the last
            // one can ask for an ACK or end the message).
            self.net.stats.rx_duplicates += u64::from(seg.count());
            if seg.ack_req() || seg.ends_message() {
                self.queue_ack(qpn, &view, psn_add(epsn, 0xff_ffff));
            }
            return true;
        }
        let write = matches!(
            seg.msg(),
            MessageOp::RdmaWrite | MessageOp::RdmaWriteWithImm
        );
        if !write || psn_diff(seg.first_psn(), epsn) != 0 || seg.mtu() != info.mtu {
            return false;
        }
        let mut cur = self.obj.qps.get_mut(qpn).and_then(|q| q.dp.resp.cur.take());
        let taken = self.write_segment(qpn, &info, seg, &view, &mut cur);
        if let Some(c) = cur
            && let Some(qp) = self.obj.qps.get_mut(qpn)
        {
            qp.dp.resp.cur = Some(c);
        }
        taken
    }

    /// [`Device::rc_segment`] for a WRITE run that starts at the expected PSN. `cur` is the
    /// QP's message in progress, moved out; what is left in it goes back. `false`: not taken,
    /// nothing changed.
    pub(super) fn write_segment(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        seg: &Segment,
        view: &PacketView<'_>,
        cur: &mut Option<InMsg>,
    ) -> bool {
        // The checks of the FIRST packet (RETH, key, access) or the message in progress.
        let fresh = if seg.starts_message() {
            let Some(reth) = seg.head().ext.reth else {
                return false;
            };
            if cur.is_some() || reth.dma_len > MAX_DMA_LEN || reth.dma_len == 0 || !info.rwe {
                return false;
            }
            let len = u64::from(reth.dma_len);
            match self.translate(reth.rkey, info.pd, reth.va, len, access::RW) {
                Ok(sgl) => Some((sgl, len)),
                Err(_) => return false,
            }
        } else {
            None
        };
        let (sgl, len, off) = match (&fresh, &*cur) {
            (Some((sgl, len)), _) => (sgl, *len, 0),
            (None, Some(InMsg::Write { sgl, len, off })) => (sgl, *len, *off),
            _ => return false,
        };
        // Every packet but the message's last is a full MTU that ends before the message
        // does (the segment's shape guarantees the sizes); the last ends it exactly.
        let end = off + seg.len();
        let fits = if seg.ends_message() {
            end == len
        } else {
            end < len
        };
        if !fits {
            return false;
        }
        let imm = match seg.msg() {
            MessageOp::RdmaWriteWithImm if seg.ends_message() => seg.head().ext.imm_dt,
            _ => None,
        };
        // The immediate needs a receive WQE, checked before memory is touched.
        if imm.is_some() && self.recv_posted(qpn).is_err() {
            return false;
        }
        // One copy, from the sender's memory straight into the target.
        match self.place(seg, sgl, off) {
            Placed::Done => {}
            // The sender withdrew the data.
            Placed::Gone => return self.segment_lost(seg),
            // A fault of our own memory: the per-packet path fails the right packet.
            Placed::Fault => return false,
        }
        let sgl = match fresh {
            Some((sgl, _)) => sgl,
            None => match cur.take() {
                Some(InMsg::Write { sgl, .. }) => sgl,
                _ => return true,
            },
        };
        if let Some(qp) = self.obj.qps.get_mut(qpn) {
            let r = &mut qp.dp.resp;
            r.nak_sent = false;
            r.epsn = psn_add(seg.last_psn(), 1);
        }
        if seg.ends_message() {
            // A CQ that cannot take the completion has put the QP in a catastrophic error.
            if !self.write_done(qpn, info, len, imm.map(|i| i.imm), seg.head().bth.solicited) {
                return true;
            }
        } else {
            *cur = Some(InMsg::Write { sgl, len, off: end });
        }
        if seg.ack_req() || seg.ends_message() {
            self.queue_ack(qpn, view, seg.last_psn());
        }
        true
    }
}
