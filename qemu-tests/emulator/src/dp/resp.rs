//! The responder (`docs/rocev2.md#segmentation`, `docs/rocev2.md#reliability`, `docs/rocev2.md#ud`;
//! `docs/mlx5.md#receive-wqe`, `docs/mlx5.md#completion-queue-entries`): expected PSN, duplicates
//! (re-ACK, READ replay, atomic replay from the responder resource table), one sequence NAK per
//! gap, RNR NAK when no receive WQE is posted, opcode sequence and length rules, access checks (QP
//! `rre`/`rwe`/`rae` and the MR's flags), receive scatter, READ responses, atomics, ACKs with the
//! MSN; UC without ACKs; UD with the Q_Key check and the 40-byte GRH.

use std::collections::VecDeque;

use firmware_interface::cqe::{self, Cqe64, ErrCqe, syndrome as cs};
use firmware_interface::ctx::qpc as q;
use firmware_interface::eqe::event;
use firmware_interface::field::{Be16, Be32, Be64};
use firmware_interface::wqe::UD_GRH_SIZE;
use roce_wire::fabric::{Segment, SegmentShape};
use roce_wire::packet::{
    Aeth, AtomicAckEth, Bth, ExtHeaders, GSI_QKEY, IPPROTO_UDP, Ipv4Header, NakCode, OpKind,
    Opcode, Packet, PacketView, Position, Transport,
};
use roce_wire::seg::MessageOp;
use roce_wire::transport::{psn_add, psn_diff};

use super::cq::NewCqe;
use super::mkey::{Sgl, access};
use super::net::Placed;
use super::srq::SrqTake;
use super::wq::rq_geometry;
use super::{QpInfo, STATE_ERR, STATE_RTR, STATE_RTS};
use crate::objects::QP1;
use crate::{Device, DeviceError};

/// Responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: u32,
    /// Messages completed (24 bits on the wire).
    pub msn: u32,
    /// A sequence NAK was sent for the current gap.
    pub nak_sent: bool,
    /// The message being received.
    pub cur: Option<InMsg>,
    /// READ / atomic results kept for duplicates, oldest first.
    pub res: VecDeque<Resource>,
    /// UC: the current message is being dropped until the next FIRST/ONLY.
    pub uc_drop: bool,
    /// A coalesced ACK not sent yet: `(psn, our address, peer address)`.
    pub ack_pending: Option<(u32, std::net::Ipv4Addr, std::net::Ipv4Addr)>,
}

/// A multi-packet message in progress.
#[derive(Clone, Debug)]
pub(crate) enum InMsg {
    /// A SEND scattering into the receive WQE at the RQ consumer counter.
    Send { sgl: Sgl, off: u64 },
    /// An RDMA WRITE into a checked remote range.
    Write { sgl: Sgl, len: u64, off: u64 },
}

/// A responder resource.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resource {
    Read {
        first: u32,
        last: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: u32,
        orig: u64,
    },
}

/// Why a request was not executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RespErr {
    /// No receive WQE: RNR NAK (RC), message dropped (UC).
    Rnr,
    /// Invalid request: NAK, QP to ERR, WQ_INVAL_REQ_ERROR (UC: message dropped).
    Invalid,
    /// Remote access error: NAK, QP to ERR, WQ_ACCESS_ERROR (UC: message dropped).
    Access,
    /// Local error on the receive WQE: error CQE with this syndrome on the RQ, NAK with the
    /// code, QP to ERR.
    Local(u8, NakCode),
    /// The responder could not read or write its own memory through a valid key.
    Operational,
    /// The RQ ring or doorbell record is unreadable: WQ catastrophic error.
    Fatal,
}

/// `len` ≤ 2^31 (C9-94).
const MAX_DMA_LEN: u32 = 1 << 31;

fn mtu_enum(bytes: u32) -> roce_wire::Mtu {
    roce_wire::Mtu::from_ib(match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    })
    .unwrap_or(roce_wire::Mtu::Mtu4096)
}

fn receives(state: u8) -> bool {
    // RTR, RTS, SQER and SQD all take requests.
    matches!(state, STATE_RTR | STATE_RTS | 4 | 5)
}

impl Device {
    /// An RC packet for QP `dest_qp`.
    pub(crate) fn rc_rx(&mut self, pkt: &PacketView<'_>) {
        let qpn = pkt.bth.dest_qp;
        let Some(info) = self.qp_info(qpn) else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        if info.st != q::ST_RC || Self::peer_ip(&info) != Some(pkt.src_ip) {
            self.net.stats.rx_dropped += 1;
            return;
        }
        match pkt.bth.opcode.kind() {
            OpKind::RdmaReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge => {
                self.rc_response(qpn, pkt)
            }
            OpKind::Cnp => self.net.stats.rx_dropped += 1,
            _ => self.request(qpn, &info, pkt, false),
        }
    }

    /// A UC packet for QP `dest_qp`.
    pub(crate) fn uc_rx(&mut self, pkt: &PacketView<'_>) {
        let qpn = pkt.bth.dest_qp;
        let Some(info) = self.qp_info(qpn) else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        if info.st != q::ST_UC
            || Self::peer_ip(&info) != Some(pkt.src_ip)
            || !pkt.bth.opcode.is_request()
        {
            self.net.stats.rx_dropped += 1;
            return;
        }
        self.request(qpn, &info, pkt, true);
    }

    /// A request packet (RC or UC).
    fn request(&mut self, qpn: u32, info: &QpInfo, pkt: &PacketView<'_>, uc: bool) {
        if !receives(info.state) {
            self.net.stats.rx_dropped += 1;
            return;
        }
        let psn = pkt.bth.psn;
        let pos = pkt.bth.opcode.position();
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let r = &mut qp.dp.resp;
        let d = psn_diff(psn, r.epsn);
        if uc {
            if d != 0 {
                // Packets were lost: the message in progress is gone.
                r.cur = None;
                r.uc_drop = !pos.starts_message();
                r.epsn = psn;
            }
            if r.uc_drop {
                if pos.starts_message() {
                    r.uc_drop = false;
                } else {
                    r.epsn = psn_add(psn, 1);
                    return;
                }
            }
        } else if d > 0 {
            if !r.nak_sent {
                r.nak_sent = true;
                let epsn = r.epsn;
                let msn = r.msn;
                self.net.stats.seq_naks_sent += 1;
                self.send_ack(
                    info,
                    pkt,
                    epsn,
                    Aeth::nak(NakCode::PsnSequenceError, msn & 0xff_ffff),
                );
            }
            return;
        } else if d < 0 {
            self.duplicate(qpn, info, pkt);
            return;
        } else {
            r.nak_sent = false;
        }
        let kind = pkt.bth.opcode.kind();
        let res = match kind {
            OpKind::Send => self.recv_send(qpn, info, pkt),
            OpKind::RdmaWrite => self.recv_write(qpn, info, pkt),
            OpKind::RdmaReadRequest if !uc => self.recv_read(qpn, info, pkt),
            OpKind::CompareSwap | OpKind::FetchAdd if !uc => self.recv_atomic(qpn, info, pkt),
            _ => Err(RespErr::Invalid),
        };
        match res {
            Ok(n) => {
                let Some(qp) = self.obj.qps.get_mut(qpn) else {
                    return;
                };
                let r = &mut qp.dp.resp;
                r.epsn = psn_add(psn, n);
                let ack = pkt.bth.ack_req || pos.ends_message();
                if !uc && ack && matches!(kind, OpKind::Send | OpKind::RdmaWrite) {
                    self.queue_ack(qpn, pkt, psn);
                }
            }
            Err(e) => self.request_failed(qpn, info, pkt, uc, e),
        }
    }

    fn request_failed(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
        uc: bool,
        e: RespErr,
    ) {
        let psn = pkt.bth.psn;
        let msn = self.obj.qps.get(qpn).map_or(0, |q| q.dp.resp.msn) & 0xff_ffff;
        if uc && matches!(e, RespErr::Rnr | RespErr::Invalid | RespErr::Access) {
            // UC drops the message silently.
            if e == RespErr::Rnr {
                self.net.stats.rx_no_wqe += 1;
            }
            if let Some(qp) = self.obj.qps.get_mut(qpn) {
                let r = &mut qp.dp.resp;
                r.cur = None;
                r.uc_drop = !pkt.bth.opcode.position().ends_message();
                r.epsn = psn_add(psn, 1);
            }
            return;
        }
        match e {
            RespErr::Rnr => {
                self.net.stats.rnr_naks_sent += 1;
                self.send_ack(info, pkt, psn, Aeth::rnr_nak(info.min_rnr, msn));
            }
            RespErr::Invalid => {
                self.send_ack(info, pkt, psn, Aeth::nak(NakCode::InvalidRequest, msn));
                self.qp_to_err(qpn, Some(event::WQ_INVAL_REQ_ERROR));
            }
            RespErr::Access => {
                self.send_ack(info, pkt, psn, Aeth::nak(NakCode::RemoteAccessError, msn));
                self.qp_to_err(qpn, Some(event::WQ_ACCESS_ERROR));
            }
            RespErr::Local(synd, code) => {
                self.resp_err_cqe(qpn, info, synd);
                if !uc {
                    self.send_ack(info, pkt, psn, Aeth::nak(code, msn));
                }
                self.qp_to_err(qpn, None);
            }
            RespErr::Operational => {
                if !uc {
                    self.send_ack(
                        info,
                        pkt,
                        psn,
                        Aeth::nak(NakCode::RemoteOperationalError, msn),
                    );
                }
                self.qp_fatal(qpn);
            }
            RespErr::Fatal => self.qp_fatal(qpn),
        }
    }

    /// Coalesces an ACK of everything up to `psn`: it goes out at the end of the receive
    /// batch (or before the next NAK / response of the QP), superseded by later ones.
    fn queue_ack(&mut self, qpn: u32, req: &PacketView<'_>, psn: u32) {
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
    fn send_ack(&mut self, info: &QpInfo, req: &PacketView<'_>, psn: u32, aeth: Aeth) {
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
    fn reply_packet<'p>(
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

    fn reply(
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
    fn reply_sgl(
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

    /// Reserves (reads and translates) the receive WQE at the RQ consumer counter.
    fn reserve_recv(&mut self, qpn: u32) -> Result<Sgl, RespErr> {
        if let Some(srqn) = self.srq_of(qpn) {
            return self.reserve_srq(qpn, srqn, true);
        }
        let (n, ci) = {
            let qp = self.obj.qps.get(qpn).ok_or(RespErr::Fatal)?;
            let (n, _) = rq_geometry(qp).ok_or(RespErr::Invalid)?;
            (n, qp.dp.rq_ci)
        };
        let pi = self.rq_producer(qpn).ok_or(RespErr::Fatal)?;
        if pi == ci {
            return Err(RespErr::Rnr);
        }
        if u32::from(pi.wrapping_sub(ci)) > n {
            self.error(DeviceError::WqOverflow {
                qpn,
                sq: false,
                producer: pi,
                consumer: ci,
            });
            return Err(RespErr::Fatal);
        }
        match self.fetch_recv_wqe(qpn, ci) {
            Ok(s) => Ok(s),
            Err(None) => Err(RespErr::Fatal),
            Err(Some(synd)) => Err(RespErr::Local(synd, NakCode::RemoteOperationalError)),
        }
    }

    /// Whether a receive WQE is posted (for WRITE with immediate).
    fn recv_posted(&mut self, qpn: u32) -> Result<(), RespErr> {
        if let Some(srqn) = self.srq_of(qpn) {
            return self.reserve_srq(qpn, srqn, false).map(|_| ());
        }
        let (n, ci) = {
            let qp = self.obj.qps.get(qpn).ok_or(RespErr::Fatal)?;
            let (n, _) = rq_geometry(qp).ok_or(RespErr::Invalid)?;
            (n, qp.dp.rq_ci)
        };
        let pi = self.rq_producer(qpn).ok_or(RespErr::Fatal)?;
        if pi == ci {
            return Err(RespErr::Rnr);
        }
        if u32::from(pi.wrapping_sub(ci)) > n {
            self.error(DeviceError::WqOverflow {
                qpn,
                sq: false,
                producer: pi,
                consumer: ci,
            });
            return Err(RespErr::Fatal);
        }
        Ok(())
    }

    /// [`reserve_recv`](Self::reserve_recv) for a QP attached to SRQ `srqn`.
    fn reserve_srq(&mut self, qpn: u32, srqn: u32, scatter: bool) -> Result<Sgl, RespErr> {
        self.srq_take(qpn, srqn, scatter).map_err(|e| match e {
            SrqTake::Empty => RespErr::Rnr,
            SrqTake::Fatal => RespErr::Fatal,
            SrqTake::Key(synd) => RespErr::Local(synd, NakCode::RemoteOperationalError),
        })
    }

    /// Runs `f` with the QP's message in progress moved out into a slot (no copy of its
    /// scatter list per packet). Whatever `f` leaves in the slot goes back: `f` leaves the
    /// message there on every error (the responder's state is as it was) and takes it when
    /// it sets a new state with [`Device::set_cur`].
    fn with_cur(
        &mut self,
        qpn: u32,
        f: impl FnOnce(&mut Self, &mut Option<InMsg>) -> Result<u32, RespErr>,
    ) -> Result<u32, RespErr> {
        let mut cur = self.obj.qps.get_mut(qpn).and_then(|q| q.dp.resp.cur.take());
        let r = f(self, &mut cur);
        if let Some(c) = cur
            && let Some(qp) = self.obj.qps.get_mut(qpn)
        {
            qp.dp.resp.cur = Some(c);
        }
        r
    }

    fn recv_send(&mut self, qpn: u32, info: &QpInfo, pkt: &PacketView<'_>) -> Result<u32, RespErr> {
        self.with_cur(qpn, |d, cur| d.recv_send_in(qpn, info, pkt, cur))
    }

    fn recv_send_in(
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
        if !len_ok || pkt.ext.ieth.is_some() {
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
            let imm = pkt.ext.imm_dt.map(|i| i.imm);
            let op = if imm.is_some() {
                cqe::opcode::RESP_SEND_IMM
            } else {
                cqe::opcode::RESP_SEND
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
    fn write_done(
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

    fn set_cur(&mut self, qpn: u32, cur: Option<InMsg>, msg_done: bool) {
        if let Some(qp) = self.obj.qps.get_mut(qpn) {
            let r = &mut qp.dp.resp;
            r.cur = cur;
            if msg_done {
                r.msn = r.msn.wrapping_add(1) & 0xff_ffff;
            }
        }
    }

    fn recv_write(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        pkt: &PacketView<'_>,
    ) -> Result<u32, RespErr> {
        self.with_cur(qpn, |d, cur| d.recv_write_in(qpn, info, pkt, cur))
    }

    fn recv_write_in(
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
    fn write_payload(
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

    fn recv_read(&mut self, qpn: u32, info: &QpInfo, pkt: &PacketView<'_>) -> Result<u32, RespErr> {
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

    fn keep_resource(&mut self, qpn: u32, info: &QpInfo, r: Resource) {
        if let Some(qp) = self.obj.qps.get_mut(qpn) {
            let res = &mut qp.dp.resp.res;
            res.push_back(r);
            while res.len() > info.rra_max.max(1) as usize {
                res.pop_front();
            }
        }
    }

    /// Sends the READ responses for `len` bytes of `sgl`, PSNs from `psn`.
    fn read_responses(
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

    fn recv_atomic(
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

    fn atomic_reply(&mut self, qpn: u32, info: &QpInfo, req: &PacketView<'_>, psn: u32, orig: u64) {
        let msn = self.obj.qps.get(qpn).map_or(0, |q| q.dp.resp.msn) & 0xff_ffff;
        let bth = Bth::new(Opcode::RcAtomicAcknowledge, info.remote_qpn, psn);
        let ext = ExtHeaders {
            aeth: Some(Aeth::ack(msn)),
            atomic_ack_eth: Some(AtomicAckEth { orig }),
            ..ExtHeaders::NONE
        };
        self.reply(info, req, bth, ext, &[]);
    }

    /// A request with a PSN already executed (C9-105 and the responder resources).
    fn duplicate(&mut self, qpn: u32, info: &QpInfo, pkt: &PacketView<'_>) {
        self.net.stats.rx_duplicates += 1;
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        let r = &qp.dp.resp;
        let epsn = r.epsn;
        let psn = pkt.bth.psn;
        match pkt.bth.opcode.kind() {
            OpKind::Send | OpKind::RdmaWrite
                if pkt.bth.ack_req || pkt.bth.opcode.position().ends_message() =>
            {
                self.queue_ack(qpn, pkt, psn_add(epsn, 0xff_ffff));
            }
            OpKind::RdmaReadRequest => {
                let Some(reth) = pkt.ext.reth else {
                    return;
                };
                let found = r.res.iter().rev().find_map(|x| match *x {
                    Resource::Read {
                        first,
                        last,
                        va,
                        rkey,
                        len,
                    } if psn_diff(psn, first) >= 0 && psn_diff(psn, last) <= 0 => {
                        Some((va, rkey, len))
                    }
                    _ => None,
                });
                let Some((va, rkey, len)) = found else {
                    return;
                };
                let end = va.saturating_add(u64::from(len));
                let req_end = reth.va.saturating_add(u64::from(reth.dma_len));
                if reth.rkey != rkey || reth.va < va || req_end > end || !info.rre {
                    return;
                }
                let dlen = u64::from(reth.dma_len);
                let sgl = if dlen == 0 {
                    Sgl::default()
                } else {
                    match self.translate(reth.rkey, info.pd, reth.va, dlen, access::RR) {
                        Ok(s) => s,
                        Err(_) => return,
                    }
                };
                let _ = self.read_responses(info, pkt, psn, &sgl, dlen);
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = r.res.iter().rev().find_map(|x| match *x {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                if let Some(orig) = found {
                    self.atomic_reply(qpn, info, pkt, psn, orig);
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ segments

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
    fn write_segment(
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

    // ------------------------------------------------------------------ UD

    /// A UD packet for QP `dest_qp`.
    pub(crate) fn ud_rx(&mut self, pkt: &PacketView<'_>, frame_len: usize) {
        let qpn = pkt.bth.dest_qp;
        let Some(info) = self.qp_info(qpn) else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        let dgram = info.st == q::ST_UD || info.st == q::ST_QP1;
        if !dgram || !receives(info.state) {
            self.net.stats.rx_dropped += 1;
            return;
        }
        let Some(deth) = pkt.ext.deth else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        let want = if qpn == QP1 { GSI_QKEY } else { info.qkey };
        if deth.qkey != want {
            self.net.stats.rx_qkey_mismatch += 1;
            return;
        }
        let sgl = match self.reserve_recv(qpn) {
            Ok(s) => s,
            Err(RespErr::Rnr | RespErr::Invalid) => {
                self.net.stats.rx_no_wqe += 1;
                return;
            }
            Err(RespErr::Local(synd, _)) => {
                self.resp_err_cqe(qpn, &info, synd);
                self.qp_to_err(qpn, None);
                return;
            }
            Err(_) => {
                self.qp_fatal(qpn);
                return;
            }
        };
        let total = UD_GRH_SIZE as u64 + pkt.payload.len() as u64;
        if total > sgl.len {
            self.resp_err_cqe(qpn, &info, cs::LOCAL_LENGTH_ERR);
            self.qp_to_err(qpn, None);
            return;
        }
        // The GRH area for RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
        let ip = Ipv4Header {
            tos: pkt.tos,
            total_length: u16::try_from(frame_len).unwrap_or(u16::MAX),
            identification: pkt.ip_id,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
            ttl: pkt.ttl,
            protocol: IPPROTO_UDP,
            src: pkt.src_ip,
            dst: pkt.dst_ip,
        };
        let mut grh = [0u8; UD_GRH_SIZE];
        grh[20..].copy_from_slice(&ip.to_bytes());
        if self.sgl_write(&sgl, 0, &grh).is_err()
            || self
                .sgl_write(&sgl, UD_GRH_SIZE as u64, pkt.payload)
                .is_err()
        {
            self.resp_err_cqe(qpn, &info, cs::LOCAL_ACCESS_ERR);
            self.qp_to_err(qpn, None);
            return;
        }
        let imm = pkt.ext.imm_dt.map(|i| i.imm);
        let op = if imm.is_some() {
            cqe::opcode::RESP_SEND_IMM
        } else {
            cqe::opcode::RESP_SEND
        };
        self.resp_cqe(
            qpn,
            &info,
            op,
            total as u32,
            imm,
            pkt.bth.solicited,
            deth.src_qp,
            true,
        );
    }

    // ------------------------------------------------------------------ CQEs

    /// A successful receive completion for the WQE at the RQ consumer counter (consumed).
    /// `false` if the CQ could not take it (the QP is then in a catastrophic error).
    #[allow(clippy::too_many_arguments)]
    fn resp_cqe(
        &mut self,
        qpn: u32,
        info: &QpInfo,
        opcode: u8,
        byte_cnt: u32,
        imm: Option<u32>,
        solicited: bool,
        rqpn: u32,
        grh: bool,
    ) -> bool {
        let Some(cqn) = info.cqn_rcv else {
            return false;
        };
        let Some(ci) = self.take_recv_counter(qpn) else {
            return false;
        };
        let mut c = Cqe64::zeroed();
        let mut flags = rqpn & cqe::QPN_MASK;
        if grh {
            flags |= 1 << cqe::GRH_SHIFT | cqe::L3_HDR_TYPE_IPV4 << cqe::L3_HDR_TYPE_SHIFT;
        }
        c.flags_rqpn = Be32::new(flags);
        c.srqn_uidx = Be32::new(info.user_index);
        c.imm_inval_pkey = Be32::new(match imm {
            Some(i) => i,
            None if qpn == QP1 => u32::from(roce_wire::packet::DEFAULT_PKEY),
            None => 0,
        });
        c.byte_cnt = Be32::new(byte_cnt);
        c.timestamp = Be64::new(self.now());
        c.sop_drop_qpn = Be32::new(qpn & cqe::QPN_MASK);
        c.wqe_counter = Be16::new(ci);
        if self
            .push_cqe(cqn, NewCqe::ok(&c, opcode, solicited))
            .is_err()
        {
            self.qp_fatal(qpn);
            return false;
        }
        true
    }

    /// An error completion for the receive WQE at the RQ consumer counter (consumed).
    fn resp_err_cqe(&mut self, qpn: u32, info: &QpInfo, synd: u8) {
        let Some(ci) = self.take_recv_counter(qpn) else {
            return;
        };
        self.recv_err_cqe(qpn, info.cqn_rcv, info.user_index, ci, synd);
    }

    fn recv_err_cqe(&mut self, qpn: u32, cqn: Option<u32>, uidx: u32, ci: u16, synd: u8) {
        let Some(cqn) = cqn else {
            return;
        };
        let e = ErrCqe {
            srqn: Be32::new(uidx),
            syndrome: synd,
            s_wqe_opcode_qpn: Be32::new(qpn & cqe::QPN_MASK),
            wqe_counter: Be16::new(ci),
            ..ErrCqe::default()
        };
        let _ = self.push_cqe(cqn, NewCqe::err(&e, cqe::opcode::RESP_ERR));
    }

    /// A flushed receive WQE (counter `ci`).
    pub(crate) fn flush_recv(&mut self, qpn: u32, ci: u16) {
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        if qp.state != STATE_ERR {
            return;
        }
        let (cqn, uidx) = (qp.cqn_rcv, q::USER_INDEX.get(&qp.qpc));
        self.recv_err_cqe(qpn, cqn, uidx, ci, cs::WR_FLUSH_ERR);
    }
}
