//! The data path (`docs/mlx5.md#uar-pages-and-doorbells` through `docs/mlx5.md#fast-path`;
//! `docs/rocev2.md#segmentation`, `docs/rocev2.md#reliability`, `docs/rocev2.md#ud`).
//!
//! * [`wq`]: the QP buffer, doorbell records, send and receive WQE parsing;
//! * [`mkey`]: lkey/rkey checks and translation, DMA over scatter/gather lists;
//! * [`cq`]: CQE writing, overrun, arming, completion and error events;
//! * [`req`]: the requester (SQ execution, segmentation, PSNs, ACK/NAK, retransmission);
//! * [`resp`]: the responder (PSN checks, duplicates, RNR, receive scatter, READ and atomic
//!   execution with the responder resource table, UD receive);
//! * [`srq`]: shared receive queues (receive WQEs any attached QP takes, the limit event);
//! * [`net`]: the port (addresses, fabric, loopback, packet encode/decode).
//!
//! Doorbells are hints: the SQ producer is read from doorbell record word 1, the RQ (and
//! SRQ) producer from word 0, CQ consumer indexes from the CQ records. A send doorbell runs
//! the SQ at once (and everything that loops back on this device); [`Device::poll`] takes in
//! fabric frames, notices records written without a doorbell, and runs the timers.

pub(crate) mod cq;
pub(crate) mod mkey;
pub(crate) mod net;
pub(crate) mod req;
pub(crate) mod resp;
pub(crate) mod srq;
pub(crate) mod wq;

use std::net::Ipv4Addr;

use firmware_interface::ctx::{ads as a, qpc as q};
use firmware_interface::{Field, eqe::event, wqe};

pub(crate) use cq::CqDp;
pub use net::{Clock, PortStats};
pub(crate) use srq::SrqDp;

use crate::{Device, DeviceError};

/// Per-QP data-path state.
#[derive(Debug, Default)]
pub(crate) struct QpDp {
    pub sq: req::SqState,
    /// RQ WQEs consumed (the next one is at this counter).
    pub rq_ci: u16,
    /// The SRQ WQE (index) the message in progress took (QPs attached to an SRQ).
    pub srq_wqe: Option<u16>,
    pub resp: resp::RespState,
    /// The QP context as [`QpInfo`], read when a command last changed it
    /// ([`Device::qp_transition`] follows every such change); `None` before the first.
    pub info: Option<QpInfo>,
    /// What the QP's segments in flight read their payload under (made by the first one).
    pub lease: Option<net::TxLease>,
}

/// What the transports need from a QP context, read in one go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpInfo {
    pub st: u32,
    pub state: u8,
    pub pd: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    pub remote_qpn: u32,
    pub cqn_snd: Option<u32>,
    pub cqn_rcv: Option<u32>,
    pub user_index: u32,
    pub sgid: usize,
    pub rgid: [u8; 16],
    pub sport: u16,
    pub tclass: u8,
    pub hop_limit: u8,
    pub ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub min_rnr: u8,
    /// Outstanding RDMA READ / atomic requests allowed as requester.
    pub sra_max: u32,
    /// Responder resources (READ / atomic) kept for duplicates.
    pub rra_max: u32,
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    pub qkey: u32,
}

const PATH: usize = q::PRIMARY_ADDRESS_PATH.byte_off();

const fn p(f: Field) -> Field {
    f.at(PATH)
}

pub(crate) const STATE_RST: u8 = q::STATE_RST as u8;
pub(crate) const STATE_INIT: u8 = q::STATE_INIT as u8;
pub(crate) const STATE_RTR: u8 = q::STATE_RTR as u8;
pub(crate) const STATE_RTS: u8 = q::STATE_RTS as u8;
pub(crate) const STATE_ERR: u8 = q::STATE_ERR as u8;

impl Device {
    /// What the transports need from the QP context: the copy taken at the last command that
    /// changed it, with the fields that change without a command (the state) read live.
    pub(crate) fn qp_info(&self, qpn: u32) -> Option<QpInfo> {
        let qp = self.obj.qps.get(qpn)?;
        match &qp.dp.info {
            Some(i) => Some(QpInfo {
                st: qp.st,
                state: qp.state,
                pd: qp.pd,
                cqn_snd: qp.cqn_snd,
                cqn_rcv: qp.cqn_rcv,
                ..*i
            }),
            None => self.read_qp_info(qpn),
        }
    }

    /// Decodes [`QpInfo`] from the QP context.
    fn read_qp_info(&self, qpn: u32) -> Option<QpInfo> {
        let qp = self.obj.qps.get(qpn)?;
        let c = &qp.qpc;
        let g = |f: Field| f.get(c);
        let datagram = qp.st == q::ST_UD || qp.st == q::ST_QP1;
        let mtu = match roce_wire::mtu_bytes(g(q::MTU) as u8) {
            Some(m) => m,
            // Datagram QPs get theirs at INIT2RTR (which refuses none); before, the port's.
            None if datagram => 4096,
            None => 256,
        };
        let mut rgid = [0u8; 16];
        if let Some(s) = p(a::RGID_RIP).slice(c) {
            rgid.copy_from_slice(s);
        }
        let qkey = q::Q_KEY
            .slice(c)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        Some(QpInfo {
            st: qp.st,
            state: qp.state,
            pd: qp.pd,
            mtu,
            remote_qpn: g(q::REMOTE_QPN),
            cqn_snd: qp.cqn_snd,
            cqn_rcv: qp.cqn_rcv,
            user_index: g(q::USER_INDEX),
            sgid: g(p(a::SRC_ADDR_INDEX)) as usize,
            rgid,
            sport: g(p(a::UDP_SPORT)) as u16,
            tclass: g(p(a::TCLASS)) as u8,
            hop_limit: g(p(a::HOP_LIMIT)) as u8,
            ack_timeout: g(p(a::ACK_TIMEOUT)) as u8,
            retry_count: g(q::RETRY_COUNT) as u8,
            rnr_retry: g(q::RNR_RETRY) as u8,
            min_rnr: g(q::MIN_RNR_NAK) as u8,
            sra_max: 1 << g(q::LOG_SRA_MAX),
            rra_max: 1 << g(q::LOG_RRA_MAX),
            rre: g(q::RRE) != 0,
            rwe: g(q::RWE) != 0,
            rae: g(q::RAE) != 0,
            qkey,
        })
    }

    /// The peer's address of a connected QP (IPv4-mapped destination GID).
    pub(crate) fn peer_ip(info: &QpInfo) -> Option<Ipv4Addr> {
        roce_wire::ipv4_from_gid(&info.rgid)
    }

    /// The UDP source port of a connected QP: the path's `udp_sport`, or rxe's hash.
    pub(crate) fn qp_sport(qpn: u32, info: &QpInfo) -> u16 {
        if info.sport != 0 {
            info.sport
        } else {
            roce_wire::transport::udp_source_port(0, qpn, info.remote_qpn)
        }
    }

    /// The retransmission timeout of a QP in device nanoseconds (`None`: disabled).
    pub(crate) fn ack_timeout_ns(&self, code: u8) -> Option<u64> {
        if code == 0 {
            return None;
        }
        Some(
            self.profile
                .ack_timeout_unit_ns
                .saturating_mul(1u64 << (code & 0x1f))
                .max(1),
        )
    }

    /// The wait an RNR NAK timer code asks for, in device nanoseconds.
    pub(crate) fn rnr_wait_ns(&self, code: u8) -> u64 {
        let units = roce_wire::transport::rnr_timer_ns(code) / 10_000;
        units.saturating_mul(self.profile.rnr_timer_unit_ns).max(1)
    }

    /// Called after every QP state change made by a command.
    pub(crate) fn qp_transition(&mut self, qpn: u32, from: u8, to: u8) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        if to == STATE_RST || (to == STATE_INIT && from == STATE_RST) {
            qp.dp = QpDp::default();
        }
        // The context may have changed: take a fresh copy for the data path.
        let info = self.read_qp_info(qpn);
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        qp.dp.info = info;
        match to {
            STATE_RTR if from != STATE_RTR => {
                let epsn = q::NEXT_RCV_PSN.get(&qp.qpc);
                let r = &mut qp.dp.resp;
                r.epsn = epsn;
                r.msn = 0;
                r.nak_sent = false;
                r.cur = None;
                r.res.clear();
                r.comm_est = false;
            }
            STATE_RTS => {
                if from == STATE_RTR {
                    let psn = q::NEXT_SEND_PSN.get(&qp.qpc);
                    let retry = q::RETRY_COUNT.get(&qp.qpc) as u8;
                    let rnr = q::RNR_RETRY.get(&qp.qpc) as u8;
                    let sq = &mut qp.dp.sq;
                    sq.next_psn = psn;
                    sq.una = psn;
                    sq.psn_hi = psn;
                    sq.retry_left = retry;
                    sq.rnr_left = rnr;
                }
                // WQEs posted in INIT/RTR run now.
                self.sq_kick(qpn);
                self.pump();
            }
            STATE_ERR => {
                self.flush(qpn);
                self.pump();
            }
            _ => {}
        }
    }

    /// Moves a QP to ERR (posting `event` if given) and flushes its queues.
    pub(crate) fn qp_to_err(&mut self, qpn: u32, event: Option<u8>) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let was = qp.state;
        qp.state = STATE_ERR;
        if was != STATE_ERR
            && let Some(ev) = event
        {
            self.qp_event(qpn, ev);
        }
        self.flush(qpn);
    }

    /// A work queue catastrophic error (ring unreadable, ring overflow, CQ in error).
    pub(crate) fn qp_fatal(&mut self, qpn: u32) {
        self.qp_to_err(qpn, Some(event::WQ_CATAS_ERROR));
    }

    /// Completes every outstanding and posted WQE of a QP in ERR with WR_FLUSH_ERR. Returns
    /// whether anything was flushed.
    pub(crate) fn flush(&mut self, qpn: u32) -> bool {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return false;
        };
        if qp.state != STATE_ERR {
            return false;
        }
        let mut did = false;
        // The WQEs complete now: segments still in flight may no longer read their data.
        qp.dp.lease = None;
        let sq = &mut qp.dp.sq;
        let fetched: Vec<(u16, u8)> = sq.wqes.drain(..).map(|w| (w.idx, w.opcode)).collect();
        sq.tx = 0;
        sq.tx_pkt = 0;
        sq.timer = None;
        sq.rnr_until = None;
        qp.dp.resp.cur = None;
        let srq_wqe = qp.dp.srq_wqe.take();
        let has_sq = qp.sq.is_some();
        let nbb = wq::sq_bbs(qp);
        for (idx, opcode) in fetched {
            did = true;
            self.flush_send(qpn, idx, opcode);
        }
        if has_sq && let Some(pi) = self.sq_producer(qpn) {
            let mut ci = self.obj.qps.get(qpn).map_or(pi, |q| q.dp.sq.ci);
            let mut walked = 0u32;
            while ci != pi && walked < nbb {
                let (opcode, bbs) = match self.peek_ctrl(qpn, ci) {
                    Some((c, bbs)) => ((c.opmod_idx_opcode.get() & wqe::OPCODE_MASK) as u8, bbs),
                    None => (0, 1),
                };
                // Never step past the producer.
                let bbs = bbs.min(pi.wrapping_sub(ci));
                self.flush_send(qpn, ci, opcode);
                did = true;
                ci = ci.wrapping_add(bbs);
                walked += u32::from(bbs);
            }
            if let Some(qp) = self.obj.qps.get_mut(qpn) {
                qp.dp.sq.ci = pi;
            }
        }
        // The SRQ WQE a message had taken completes with the QP (the SRQ's other WQEs stay
        // posted for the other QPs).
        if let Some(idx) = srq_wqe {
            self.flush_recv(qpn, idx);
            did = true;
        }
        let rq_n = self
            .obj
            .qps
            .get(qpn)
            .and_then(wq::rq_geometry)
            .map(|(n, _)| n);
        if let Some(n) = rq_n
            && let Some(pi) = self.rq_producer(qpn)
        {
            let mut ci = self.obj.qps.get(qpn).map_or(pi, |q| q.dp.rq_ci);
            let mut walked = 0;
            while ci != pi && walked < n {
                self.flush_recv(qpn, ci);
                did = true;
                ci = ci.wrapping_add(1);
                walked += 1;
            }
            if let Some(qp) = self.obj.qps.get_mut(qpn) {
                qp.dp.rq_ci = pi;
            }
        }
        did
    }

    /// A send doorbell (8 bytes or a BlueFlame burst whose first 8 bytes are the control
    /// segment's) for `qpn`.
    pub(crate) fn send_doorbell(&mut self, qpn: u32, data: &[u8]) {
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        let state = qp.state;
        let nbb = wq::sq_bbs(qp);
        if state == STATE_RST || qp.sq.is_none() {
            self.error(DeviceError::SqDoorbellBadState { qpn, state });
            return;
        }
        self.sq_kick(qpn);
        // The doorbell names the last WQE posted: the record must already cover it.
        let idx = u16::from_be_bytes([data[1], data[2]]);
        if let Some(pi) = self.sq_producer(qpn) {
            let ahead = u32::from(pi.wrapping_sub(idx));
            if ahead == 0 || ahead > nbb {
                self.error(DeviceError::SqDoorbellBeyondRecord {
                    qpn,
                    wqe_index: idx,
                    producer: pi,
                });
            }
        }
        self.pump();
    }

    /// Data-path work for [`Device::poll`]: fabric input, the loopback, SQ records written
    /// without a doorbell, flushes of WQEs posted to QPs in ERR, timers, CQ arm records.
    pub(crate) fn progress(&mut self) -> bool {
        let mut did = self.drain_port();
        did |= self.pump();
        // The QP list is copied into a buffer kept between polls (no allocation per poll).
        let mut qps = std::mem::take(&mut self.net.scratch_qps);
        qps.clear();
        qps.extend(self.obj.qps.iter().map(|(n, q)| (n, q.state)));
        for &(qpn, state) in &qps {
            match state {
                STATE_RTS => did |= self.sq_poll(qpn),
                STATE_ERR => did |= self.flush(qpn),
                _ => {}
            }
        }
        self.net.scratch_qps = qps;
        did |= self.pump();
        did |= self.poll_cq_arms();
        did
    }

    /// The earliest time (device clock) at which a QP timer (retransmission or RNR wait)
    /// expires; `None` if no timer runs.
    pub fn next_deadline(&self) -> Option<u64> {
        self.obj
            .qps
            .values()
            .filter(|q| q.state == STATE_RTS)
            .flat_map(|q| [q.dp.sq.timer, q.dp.sq.rnr_until])
            .flatten()
            .min()
    }
}
