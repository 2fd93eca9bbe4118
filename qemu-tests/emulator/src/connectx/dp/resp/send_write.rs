//! Incoming SEND and RDMA WRITE messages, packet by packet: length and opcode-sequence rules,
//! key and access checks, the scatter into the receive WQE or the target range, and the
//! message completion.

use firmware_interface::cqe::{self, syndrome as cs};
use roce_wire::packet::{NakCode, PacketView, Position};

use super::{InMsg, MAX_DMA_LEN, RespErr};
use crate::Device;
use crate::connectx::dp::QpInfo;
use crate::connectx::dp::mkey::{Sgl, access};

impl Device {
    pub(super) fn recv_send(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
    ) -> Result<u32, RespErr> {
        self.with_cur(qpn, |d, cur| d.recv_send_in(qpn, info, pkt, cur))
    }

    pub(super) fn recv_send_in(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
        slot: &mut Option<InMsg>,
    ) -> Result<u32, RespErr> {
        let pos = pkt.bth.opcode.position();
        let plen = pkt.payload.len() as u64;
        let mtu = u64::from(info.mtu);
        let len_ok = match pos {
            Position::First | Position::Middle => plen == mtu,
            Position::Last => (1..=mtu).contains(&plen),
            Position::Only => plen <= mtu,
        };
        if !len_ok {
            return Err(RespErr::Invalid);
        }
        let first = pos.starts_message();
        let (sgl, off) = if first {
            if slot.is_some() {
                return Err(RespErr::Invalid);
            }
            (self.reserve_recv(qpn)?, 0)
        } else {
            match slot.take() {
                Some(InMsg::Send { sgl, off }) => (sgl, off),
                other => {
                    *slot = other;
                    return Err(RespErr::Invalid);
                }
            }
        };
        let err = if off + plen > sgl.len {
            Some(RespErr::Local(
                cs::LOCAL_LENGTH_ERR,
                NakCode::InvalidRequest,
            ))
        } else if self.sgl_write(&sgl, off, pkt.payload).is_err() {
            Some(RespErr::Local(
                cs::LOCAL_ACCESS_ERR,
                NakCode::RemoteOperationalError,
            ))
        } else if let Some(ieth) = pkt.ext.ieth
            && self.remote_invalidate(ieth.rkey, info.pd).is_err()
        {
            // SEND with invalidate (the IETH rides on the LAST/ONLY packet) naming no key of
            // this QP's PD that may be invalidated remotely (mkc `en_rinval`): the receive
            // completes with the remote invalid request error, the sender gets NAK invalid
            // request, both QPs go to error.
            Some(RespErr::Local(
                cs::REMOTE_INVAL_REQ_ERR,
                NakCode::InvalidRequest,
            ))
        } else {
            None
        };
        if let Some(e) = err {
            if !first {
                *slot = Some(InMsg::Send { sgl, off });
            }
            return Err(e);
        }
        let off = off + plen;
        if pos.ends_message() {
            let (op, imm) = match (pkt.ext.imm_dt, pkt.ext.ieth) {
                (Some(i), _) => (cqe::opcode::RESP_SEND_IMM, Some(i.imm)),
                // The key was invalidated above; the CQE reports it.
                (None, Some(i)) => (cqe::opcode::RESP_SEND_INV, Some(i.rkey)),
                (None, None) => (cqe::opcode::RESP_SEND, None),
            };
            self.set_cur(qpn, None, true);
            if !self.resp_cqe(
                qpn,
                info,
                op,
                off as u32,
                imm,
                pkt.bth.solicited,
                info.remote_qpn,
                false,
            ) {
                return Err(RespErr::Fatal);
            }
        } else {
            self.set_cur(qpn, Some(InMsg::Send { sgl, off }), false);
        }
        Ok(1)
    }

    /// A WRITE message of `len` bytes has all arrived: the message count moves on and an
    /// immediate completes the receive WQE. `false` if the CQ could not take the completion
    /// (the QP is then in a catastrophic error).
    pub(super) fn write_done(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        len: u64,
        imm: Option<u32>,
        solicited: bool,
    ) -> bool {
        self.set_cur(qpn, None, true);
        match imm {
            Some(imm) => self.resp_cqe(
                qpn,
                info,
                cqe::opcode::RESP_WR_IMM,
                len as u32,
                Some(imm),
                solicited,
                info.remote_qpn,
                false,
            ),
            None => true,
        }
    }

    pub(super) fn recv_write(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
    ) -> Result<u32, RespErr> {
        self.with_cur(qpn, |d, cur| d.recv_write_in(qpn, info, pkt, cur))
    }

    pub(super) fn recv_write_in(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
        slot: &mut Option<InMsg>,
    ) -> Result<u32, RespErr> {
        let pos = pkt.bth.opcode.position();
        let plen = pkt.payload.len() as u64;
        let mtu = u64::from(info.mtu);
        let first = pos.starts_message();
        let (sgl, len, off) = if first {
            if slot.is_some() {
                return Err(RespErr::Invalid);
            }
            let reth = pkt.ext.reth.ok_or(RespErr::Invalid)?;
            if reth.dma_len > MAX_DMA_LEN {
                return Err(RespErr::Invalid);
            }
            if !info.rwe {
                return Err(RespErr::Access);
            }
            let len = u64::from(reth.dma_len);
            let sgl = if len == 0 {
                Sgl::default() // C9-88: the R_Key is not checked
            } else {
                self.translate(reth.rkey, info.pd, reth.va, len, access::RW)
                    .map_err(|_| RespErr::Access)?
            };
            (sgl, len, 0)
        } else {
            match slot.take() {
                Some(InMsg::Write { sgl, len, off }) => (sgl, len, off),
                other => {
                    *slot = other;
                    return Err(RespErr::Invalid);
                }
            }
        };
        let end = off + plen;
        let imm = pkt.ext.imm_dt.map(|i| i.imm);
        if let Err(e) = self.write_payload(qpn, pkt, pos, mtu, &sgl, len, off) {
            if !first {
                *slot = Some(InMsg::Write { sgl, len, off });
            }
            return Err(e);
        }
        if pos.ends_message() {
            if !self.write_done(qpn, info, len, imm, pkt.bth.solicited) {
                return Err(RespErr::Fatal);
            }
        } else {
            self.set_cur(qpn, Some(InMsg::Write { sgl, len, off: end }), false);
        }
        Ok(1)
    }

    /// The checks and the memory write of one RDMA WRITE packet at offset `off` of a
    /// message of `len` bytes into `sgl`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_payload(
        &mut self,
        qpn: u32,
        pkt: &PacketView<'_>,
        pos: Position,
        mtu: u64,
        sgl: &Sgl,
        len: u64,
        off: u64,
    ) -> Result<(), RespErr> {
        let plen = pkt.payload.len() as u64;
        let end = off + plen;
        let len_ok = match pos {
            Position::First | Position::Middle => plen == mtu && end < len,
            Position::Last => (1..=mtu).contains(&plen) && end == len,
            Position::Only => plen <= mtu && end == len,
        };
        if !len_ok {
            return Err(RespErr::Invalid);
        }
        if pkt.ext.imm_dt.is_some() {
            // The immediate needs a receive WQE: check before touching memory.
            self.recv_posted(qpn)?;
        }
        if self.sgl_write(sgl, off, pkt.payload).is_err() {
            return Err(RespErr::Access);
        }
        Ok(())
    }
}
