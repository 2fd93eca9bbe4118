//! Retransmission: go-back-N from an acknowledged PSN, RNR waits, the retransmit timer, and
//! failing a WQE when its retries run out.

use firmware_interface::cqe::syndrome as cs;
use firmware_interface::wqe::opcode as wop;
use roce_wire::transport::{psn_add, psn_diff};

use crate::Device;

impl Device {
    /// Go-back-N: retransmit from `psn`. Unless `force`, a second request for the same PSN
    /// before any progress is ignored (a duplicated NAK).
    pub(super) fn go_back_n(&mut self, qpn: u32, psn: u32, force: bool) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if !force && sq.rewound_at == Some(psn) {
            return;
        }
        let Some(j) = sq
            .wqes
            .iter()
            .position(|w| match (w.first_psn, w.last_psn()) {
                (Some(f), Some(l)) => psn_diff(psn, f) >= 0 && psn_diff(psn, l) <= 0,
                _ => false,
            })
        else {
            return;
        };
        let w = &sq.wqes[j];
        let first = w.first_psn.unwrap_or(psn);
        sq.tx_pkt = match w.opcode {
            wop::ATOMIC_CS | wop::ATOMIC_FA => 0,
            wop::RDMA_READ => w.rcvd,
            _ => psn_diff(psn, first).max(0) as u32,
        };
        let restart = psn_add(first, sq.tx_pkt);
        sq.tx = j;
        sq.next_psn = restart;
        sq.since_ack_req = 0;
        sq.rewound_at = Some(psn);
        self.net.stats.retransmits += 1;
    }

    pub(super) fn rnr_nak(&mut self, qpn: u32, psn: u32, code: u8) {
        let wait = self.rnr_wait_ns(code);
        let now = self.now();
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if sq.rnr_until.is_some() {
            return; // a duplicate of the NAK we are already waiting on
        }
        if sq.rnr_left == 0 {
            self.fail_at(qpn, psn, cs::RNR_RETRY_EXC_ERR);
            return;
        }
        if sq.rnr_left != 7 {
            sq.rnr_left -= 1;
        }
        sq.rnr_until = Some(now.saturating_add(wait));
        sq.timer = None;
        self.go_back_n(qpn, psn, true);
    }

    /// A fatal NAK (or retry exhaustion) for the message at `psn`: it completes with
    /// `synd`; earlier messages count as acknowledged.
    pub(super) fn fail_at(&mut self, qpn: u32, psn: u32, synd: u8) {
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        sq.timer = None;
        sq.rnr_until = None;
        let mut hit = false;
        for w in sq.wqes.iter_mut() {
            if w.done && w.first_psn.is_none() {
                continue; // a NOP
            }
            let covers = match (w.first_psn, w.last_psn()) {
                (Some(f), Some(l)) => psn_diff(psn, f) >= 0 && psn_diff(psn, l) <= 0,
                _ => true,
            };
            if covers || w.first_psn.is_none() {
                w.err = Some(synd);
                hit = true;
                break;
            }
            if w.is_rd_atomic() && !w.done {
                // Its answer never came; it fails with the message after it.
                w.err = Some(synd);
                hit = true;
                break;
            }
            w.done = true;
        }
        if !hit && let Some(w) = sq.wqes.front_mut() {
            w.err = Some(synd);
        }
    }

    /// Retransmission timer and RNR wait of an RTS QP.
    pub(super) fn sq_timers(&mut self, qpn: u32) {
        let now = self.now();
        let Some(qp) = self.obj.qps.get_mut(qpn) else {
            return;
        };
        let sq = &mut qp.dp.sq;
        if sq.rnr_until.is_some_and(|t| t <= now) {
            sq.rnr_until = None;
        }
        if sq.timer.is_none_or(|t| t > now) {
            return;
        }
        sq.timer = None;
        let outstanding = sq.una != sq.psn_hi
            || sq
                .wqes
                .iter()
                .any(|w| w.is_rd_atomic() && w.first_psn.is_some() && !w.done);
        if !outstanding {
            return;
        }
        let una = sq.una;
        let exhausted = sq.retry_left == 0;
        if !exhausted {
            sq.retry_left -= 1;
        }
        self.net.stats.timeouts += 1;
        if exhausted {
            self.fail_at(qpn, una, cs::TRANSPORT_RETRY_EXC_ERR);
            self.sq_complete(qpn);
            return;
        }
        self.go_back_n(qpn, una, true);
    }
}
