//! The responder (`docs/rocev2.md#segmentation`, `docs/rocev2.md#reliability`, `docs/rocev2.md#ud`;
//! `docs/mlx5.md#receive-wqe`, `docs/mlx5.md#completion-queue-entries`): expected PSN, duplicates
//! (re-ACK, READ replay, atomic replay from the responder resource table), one sequence NAK per
//! gap, RNR NAK when no receive WQE is posted, opcode sequence and length rules, access checks (QP
//! `rre`/`rwe`/`rae` and the MR's flags), receive scatter, READ responses, atomics, ACKs with the
//! MSN; UC without ACKs; UD with the Q_Key check and the 40-byte GRH.
//!
//! This module holds the responder's state and its intake: an RC or UC packet is checked
//! against the QP and the expected PSN and handed to the handler of its opcode; a failed
//! request becomes a NAK, a dropped message or a QP error here. The rest, one job per file:
//! * `recv_wqe`: taking the receive WQE (RQ or SRQ) an incoming message lands in;
//! * `send_write`: incoming SEND and RDMA WRITE messages;
//! * `read_atomic`: READ and atomic requests and the responder resource table;
//! * `duplicate`: requests with a PSN already seen;
//! * `segment`: runs of RC packets taken in as one fabric segment;
//! * `ack`: ACKs, NAKs and reply packets;
//! * `ud`: UD receive;
//! * `completion`: receive CQEs, error CQEs and RQ flushes.

mod ack;
mod completion;
mod duplicate;
mod read_atomic;
mod recv_wqe;
mod segment;
mod send_write;
mod ud;

use std::collections::VecDeque;

use firmware_interface::ctx::qpc as q;
use firmware_interface::eqe::event;
use roce_wire::packet::{Aeth, NakCode, OpKind, PacketView};
use roce_wire::transport::{psn_add, psn_diff};

use super::mkey::Sgl;
use super::{QpInfo, STATE_RTR, STATE_RTS};
use crate::Device;

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
    /// COMM_EST was raised since the QP entered RTR.
    pub comm_est: bool,
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
    /// The communication-established event: the first packet a connected QP receives after
    /// entering RTR raises COMM_EST once (also when the QP moved on to RTS before it came,
    /// as ConnectX does: a CM whose RTU was lost learns from it that the peer is there).
    pub(crate) fn first_packet(&mut self, qpn: u32) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        if qp.dp.resp.comm_est {
            return;
        }
        qp.dp.resp.comm_est = true;
        self.qp_event(qpn, event::COMM_EST);
    }

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
        self.first_packet(qpn);
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

    fn set_cur(&mut self, qpn: u32, cur: Option<InMsg>, msg_done: bool) {
        if let Some(qp) = self.obj.qps.get_mut(qpn) {
            let r = &mut qp.dp.resp;
            r.cur = cur;
            if msg_done {
                r.msn = r.msn.wrapping_add(1) & 0xff_ffff;
            }
        }
    }

    // ------------------------------------------------------------------ segments

    // ------------------------------------------------------------------ UD

    // ------------------------------------------------------------------ CQEs
}
