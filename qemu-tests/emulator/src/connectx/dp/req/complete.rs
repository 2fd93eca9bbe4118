//! Requester completions: retiring acknowledged WQEs in order, send CQEs, error CQEs and
//! flushing the SQ.

use firmware_interface::cqe::{self, Cqe64, ErrCqe, syndrome as cs};
use firmware_interface::field::{Be16, Be32, Be64};
use firmware_interface::wqe::opcode as wop;
use roce_wire::transport::psn_diff;

use crate::Device;
use crate::connectx::dp::cq::NewCqe;
use crate::connectx::dp::wq::SendWqe;

impl Device {
    /// Completes finished WQEs at the head of the SQ, in order; a WQE in error completes
    /// with an error CQE and moves the QP to ERR.
    pub(crate) fn sq_complete(&mut self, qpn: u32) {
        loop {
            let Some(qp) = self.obj.qps.get_mut(qpn) else {
                return;
            };
            let sq = &mut qp.dp.sq;
            let Some(front) = sq.wqes.front() else {
                return;
            };
            if let Some(synd) = front.err {
                let w = sq.wqes.pop_front();
                sq.tx = sq.tx.saturating_sub(1);
                if let Some(w) = w {
                    self.req_err_cqe(qpn, w.idx, w.opcode, synd);
                }
                self.qp_to_err(qpn, None);
                return;
            }
            if !front.done {
                return;
            }
            let Some(w) = sq.wqes.pop_front() else {
                return;
            };
            if sq.tx == 0 {
                // It was acknowledged while being retransmitted.
                sq.tx_pkt = 0;
                if psn_diff(sq.una, sq.next_psn) > 0 {
                    sq.next_psn = sq.una;
                }
            }
            sq.tx = sq.tx.saturating_sub(1);
            if w.signaled && !self.req_cqe(qpn, &w) {
                self.qp_fatal(qpn);
                return;
            }
        }
    }

    pub(super) fn req_cqe(&mut self, qpn: u32, w: &SendWqe) -> bool {
        let Some(info) = self.qp_info(qpn) else {
            return false;
        };
        let Some(cqn) = info.cqn_snd else {
            return false;
        };
        let mut c = Cqe64::zeroed();
        c.srqn_uidx = Be32::new(info.user_index);
        c.byte_cnt = Be32::new(match w.opcode {
            wop::RDMA_READ => w.len as u32,
            wop::ATOMIC_CS | wop::ATOMIC_FA => 8,
            _ => 0,
        });
        c.timestamp = Be64::new(self.now());
        c.sop_drop_qpn = Be32::new(u32::from(w.opcode) << cqe::SEND_OPCODE_SHIFT | qpn);
        c.wqe_counter = Be16::new(w.idx);
        self.push_cqe(cqn, NewCqe::ok(&c, cqe::opcode::REQ, false))
            .is_ok()
    }

    pub(crate) fn req_err_cqe(&mut self, qpn: u32, idx: u16, opcode: u8, synd: u8) {
        let Some(info) = self.qp_info(qpn) else {
            return;
        };
        let Some(cqn) = info.cqn_snd else {
            return;
        };
        let e = ErrCqe {
            srqn: Be32::new(info.user_index),
            syndrome: synd,
            s_wqe_opcode_qpn: Be32::new(u32::from(opcode) << cqe::SEND_OPCODE_SHIFT | qpn),
            wqe_counter: Be16::new(idx),
            ..ErrCqe::default()
        };
        // A full or broken CQ: the error has nowhere to go (the CQ_ERROR event says so).
        let _ = self.push_cqe(cqn, NewCqe::err(&e, cqe::opcode::REQ_ERR));
    }

    /// A flushed send WQE.
    pub(crate) fn flush_send(&mut self, qpn: u32, idx: u16, opcode: u8) {
        self.req_err_cqe(qpn, idx, opcode, cs::WR_FLUSH_ERR);
    }
}
