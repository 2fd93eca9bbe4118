//! Incoming RDMA READ and atomic requests: checks, execution, the responder resource table kept
//! for duplicates, and the READ responses at the path MTU.

use roce_wire::fabric::SegmentShape;
use roce_wire::packet::{
    Aeth, AtomicAckEth, Bth, ExtHeaders, Opcode, PacketView, Position, Transport,
};
use roce_wire::seg::MessageOp;
use roce_wire::transport::psn_add;

use super::{MAX_DMA_LEN, Resource, RespErr, mtu_enum};
use crate::Device;
use crate::connectx::dp::QpInfo;
use crate::connectx::dp::mkey::{Sgl, access};

impl Device {
    pub(super) fn recv_read(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
    ) -> Result<u32, RespErr> {
        if self
            .obj
            .qps
            .get(qpn)
            .is_some_and(|q| q.dp.resp.cur.is_some())
        {
            return Err(RespErr::Invalid);
        }
        let reth = pkt.ext.reth.ok_or(RespErr::Invalid)?;
        if reth.dma_len > MAX_DMA_LEN {
            return Err(RespErr::Invalid);
        }
        if !info.rre {
            return Err(RespErr::Access);
        }
        let len = u64::from(reth.dma_len);
        let sgl = if len == 0 {
            Sgl::default()
        } else {
            self.translate(reth.rkey, info.pd, reth.va, len, access::RR)
                .map_err(|_| RespErr::Access)?
        };
        let n = roce_wire::packet_count(reth.dma_len, mtu_enum(info.mtu));
        let psn = pkt.bth.psn;
        self.keep_resource(
            qpn,
            info,
            Resource::Read {
                first: psn,
                last: psn_add(psn, n - 1),
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
            },
        );
        self.set_cur(qpn, None, true);
        self.read_responses(info, pkt, psn, &sgl, len)?;
        Ok(n)
    }

    pub(super) fn keep_resource(&mut self, qpn: u32, info: &QpInfo, r: Resource) {
        if let Some(qp) = self.obj.qps.get_mut(qpn) {
            let res = &mut qp.dp.resp.res;
            res.push_back(r);
            while res.len() > info.rra_max.max(1) as usize {
                res.pop_front();
            }
        }
    }

    /// Sends the READ responses for `len` bytes of `sgl`, PSNs from `psn`.
    pub(super) fn read_responses(
        &mut self,
        info: &QpInfo,
        req: &PacketView<'_>,
        psn: u32,
        sgl: &Sgl,
        len: u64,
    ) -> Result<(), RespErr> {
        let mtu = u64::from(info.mtu);
        let n = roce_wire::packet_count(len as u32, mtu_enum(info.mtu));
        let msn = self
            .obj
            .qps
            .get(req.bth.dest_qp)
            .map_or(0, |q| q.dp.resp.msn)
            & 0xff_ffff;
        if n > 1 && self.segments_to(Some(req.src_ip)) {
            // The whole response as one segment, read when the requester takes it in.
            let bth = Bth::new(Opcode::RcRdmaReadResponseFirst, info.remote_qpn, psn);
            let ext = ExtHeaders {
                aeth: Some(Aeth::ack(msn)),
                ..ExtHeaders::NONE
            };
            let p = self.reply_packet(info, req, bth, ext, &[]);
            let shape = SegmentShape {
                msg: MessageOp::RdmaReadResponse,
                index: 0,
                msg_pkts: n,
                count: n,
                mtu: info.mtu,
                len,
            };
            return self
                .emit_segment(req.bth.dest_qp, &p, shape, sgl, 0)
                .map_err(|_| RespErr::Operational);
        }
        for k in 0..n {
            let off = u64::from(k) * mtu;
            let plen = (len - off.min(len)).min(mtu);
            let pos = Position::of(k, n);
            let op =
                roce_wire::seg::segment_opcode(Transport::Rc, MessageOp::RdmaReadResponse, pos)
                    .unwrap_or(Opcode::RcRdmaReadResponseOnly);
            let bth = Bth::new(op, info.remote_qpn, psn_add(psn, k));
            let ext = ExtHeaders {
                aeth: (pos != Position::Middle).then_some(Aeth::ack(msn)),
                ..ExtHeaders::NONE
            };
            // Read by DMA straight into the frame.
            self.reply_sgl(info, req, bth, ext, sgl, off, plen as usize)
                .map_err(|_| RespErr::Operational)?;
        }
        Ok(())
    }

    pub(super) fn recv_atomic(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
    ) -> Result<u32, RespErr> {
        if self
            .obj
            .qps
            .get(qpn)
            .is_some_and(|q| q.dp.resp.cur.is_some())
        {
            return Err(RespErr::Invalid);
        }
        let a = pkt.ext.atomic_eth.ok_or(RespErr::Invalid)?;
        if !info.rae {
            return Err(RespErr::Access);
        }
        if a.va & 7 != 0 {
            return Err(RespErr::Invalid);
        }
        let sgl = self
            .translate(a.rkey, info.pd, a.va, 8, access::A)
            .map_err(|_| RespErr::Access)?;
        let cur = self
            .sgl_read(&sgl, 0, 8)
            .map_err(|_| RespErr::Operational)?;
        let orig = u64::from_be_bytes(cur.try_into().map_err(|_| RespErr::Operational)?);
        let new = if pkt.bth.opcode == Opcode::RcCompareSwap {
            if orig == a.compare { a.swap_add } else { orig }
        } else {
            orig.wrapping_add(a.swap_add)
        };
        if new != orig {
            self.sgl_write(&sgl, 0, &new.to_be_bytes())
                .map_err(|_| RespErr::Operational)?;
        }
        let psn = pkt.bth.psn;
        self.keep_resource(qpn, info, Resource::Atomic { psn, orig });
        self.set_cur(qpn, None, true);
        self.atomic_reply(qpn, info, pkt, psn, orig);
        Ok(1)
    }

    pub(super) fn atomic_reply(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        req: &PacketView<'_>,
        psn: u32,
        orig: u64,
    ) {
        let msn = self.obj.qps.get(qpn).map_or(0, |q| q.dp.resp.msn) & 0xff_ffff;
        let bth = Bth::new(Opcode::RcAtomicAcknowledge, info.remote_qpn, psn);
        let ext = ExtHeaders {
            aeth: Some(Aeth::ack(msn)),
            atomic_ack_eth: Some(AtomicAckEth { orig }),
            ..ExtHeaders::NONE
        };
        self.reply(info, req, bth, ext, &[]);
    }
}
