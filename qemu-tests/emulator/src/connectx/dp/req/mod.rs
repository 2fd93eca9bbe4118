//! The requester (`docs/rocev2.md#segmentation`, `docs/rocev2.md#reliability`, `docs/rocev2.md#ud`;
//! `docs/mlx5.md#work-queue-entries`, `docs/mlx5.md#completion-queue-entries`): SQ fetch,
//! segmentation at the path MTU, PSNs, ACK/NAK handling, go-back-N retransmission on timeout and
//! sequence NAKs, RNR waits, the READ/atomic outstanding limit, and in-order completion. RC
//! completes a WQE when it is acknowledged (or answered); UC and UD complete it when it is sent.
//!
//! This module holds the send queue's state and drives it: a doorbell or a poll fetches new
//! WQEs and transmits while the window allows. The rest, one job per file:
//! * `plan`: segmentation, the next packet or run of a WQE, and sending it;
//! * `response`: ACKs, NAKs, READ responses and atomic acknowledgements;
//! * `retry`: go-back-N, RNR waits, the retransmit timer and retry exhaustion;
//! * `complete`: retiring WQEs in order, send and error CQEs, SQ flushes.

mod complete;
mod plan;
mod response;
mod retry;

use std::collections::VecDeque;

use firmware_interface::cqe::syndrome as cs;
use firmware_interface::ctx::qpc as q;
use firmware_interface::wqe::opcode as wop;
use roce_wire::fabric::SegmentShape;
use roce_wire::packet::{Bth, ExtHeaders, Transport};
use roce_wire::transport::psn_diff;

use super::wq::{Fetched, SendWqe};
use super::{QpInfo, STATE_RTS};
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

    // ------------------------------------------------------------------ RC responses
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
