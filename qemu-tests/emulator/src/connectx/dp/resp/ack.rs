//! Responder replies: coalesced ACKs (one per QP and poll round, flushed before anything else
//! is sent), explicit ACKs and NAKs, and the reply packets (READ responses, atomic
//! acknowledgements) built from a request.

use roce_wire::packet::{Aeth, Bth, ExtHeaders, Opcode, Packet, PacketView};
use roce_wire::transport::psn_diff;

use crate::Device;
use crate::connectx::dp::mkey::Sgl;
use crate::connectx::dp::{QpInfo, STATE_ERR};

impl Device {
    /// Coalesces an ACK of everything up to `psn`: it goes out at the end of the receive
    /// batch (or before the next NAK / response of the QP), superseded by later ones.
    pub(super) fn queue_ack(&mut self, qpn: u32, req: &PacketView<'_>, psn: u32) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let r = &mut qp.dp.resp;
        let newer = r.ack_pending.is_none_or(|(p, _, _)| psn_diff(psn, p) >= 0);
        if newer {
            if r.ack_pending.is_none() {
                self.net.acks.push(qpn);
            }
            r.ack_pending = Some((psn, req.dst_ip, req.src_ip));
        }
    }

    /// Sends the coalesced ACK of QP `qpn`, if one is pending.
    pub(crate) fn flush_ack(&mut self, qpn: u32) {
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let r = &mut qp.dp.resp;
        let Some((psn, src, dst)) = r.ack_pending.take() else {
            return;
        };
        if info.state == STATE_ERR {
            return;
        }
        let msn = r.msn & 0xff_ffff;
        let bth = Bth::new(Opcode::RcAcknowledge, info.remote_qpn, psn);
        let ext = ExtHeaders {
            aeth: Some(Aeth::ack(msn)),
            ..ExtHeaders::NONE
        };
        let mut p = Packet::new(src, dst, bth, &[][..]).with_ext(ext);
        p.udp_src_port = Self::qp_sport(qpn, &info);
        p.tos = info.tclass;
        p.ttl = if info.hop_limit == 0 {
            64
        } else {
            info.hop_limit
        };
        self.emit(&p);
    }

    /// Sends every coalesced ACK; returns whether there was any.
    pub(crate) fn flush_acks(&mut self) -> bool {
        let qps = std::mem::take(&mut self.net.acks);
        let any = !qps.is_empty();
        for qpn in qps {
            self.flush_ack(qpn);
        }
        any
    }

    /// Sends an ACK/NAK (opcode ACKNOWLEDGE) answering `req` now (after the QP's pending
    /// coalesced ACK, which it follows in PSN order).
    pub(super) fn send_ack(&mut self, info: &QpInfo, req: &PacketView<'_>, psn: u32, aeth: Aeth) {
        self.flush_ack(req.bth.dest_qp);
        let bth = Bth::new(Opcode::RcAcknowledge, info.remote_qpn, psn);
        let ext = ExtHeaders {
            aeth: Some(aeth),
            ..ExtHeaders::NONE
        };
        self.reply(info, req, bth, ext, &[]);
    }

    /// The packet answering `req` (addresses swapped, the QP's port, class and hop limit),
    /// after the QP's pending coalesced ACK unless it is an ACK itself.
    pub(super) fn reply_packet<'p>(
        &mut self,
        info: &QpInfo,
        req: &PacketView<'_>,
        bth: Bth,
        ext: ExtHeaders,
        payload: &'p [u8],
    ) -> PacketView<'p> {
        if bth.opcode != Opcode::RcAcknowledge {
            self.flush_ack(req.bth.dest_qp);
        }
        let mut p = Packet::new(req.dst_ip, req.src_ip, bth, payload).with_ext(ext);
        p.udp_src_port = Self::qp_sport(req.bth.dest_qp, info);
        p.tos = info.tclass;
        p.ttl = if info.hop_limit == 0 {
            64
        } else {
            info.hop_limit
        };
        p
    }

    pub(super) fn reply(
        &mut self,
        info: &QpInfo,
        req: &PacketView<'_>,
        bth: Bth,
        ext: ExtHeaders,
        payload: &[u8],
    ) {
        let p = self.reply_packet(info, req, bth, ext, payload);
        self.emit(&p);
    }

    /// [`Device::reply`] with the `len` bytes at `off` of `sgl` as payload, read by DMA
    /// straight into the frame; a DMA fault sends nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reply_sgl(
        &mut self,
        info: &QpInfo,
        req: &PacketView<'_>,
        bth: Bth,
        ext: ExtHeaders,
        sgl: &Sgl,
        off: u64,
        len: usize,
    ) -> Result<(), crate::DmaFault> {
        let p = self.reply_packet(info, req, bth, ext, &[]);
        self.emit_sgl(&p, sgl, off, len)
    }
}
