//! Responder completions: receive CQEs, error CQEs on the RQ, and flushing the RQ.

use firmware_interface::cqe::{self, Cqe64, ErrCqe, syndrome as cs};
use firmware_interface::ctx::qpc as q;
use firmware_interface::field::{Be16, Be32, Be64};

use crate::Device;
use crate::connectx::dp::cq::NewCqe;
use crate::connectx::dp::{QpInfo, STATE_ERR};
use crate::connectx::objects::QP1;

impl Device {
    /// A successful receive completion for the WQE at the RQ consumer counter (consumed).
    /// `false` if the CQ could not take it (the QP is then in a catastrophic error).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn resp_cqe(
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
    pub(super) fn resp_err_cqe(&mut self, qpn: u32, info: &QpInfo, synd: u8) {
        let Some(ci) = self.take_recv_counter(qpn) else {
            return;
        };
        self.recv_err_cqe(qpn, info.cqn_rcv, info.user_index, ci, synd);
    }

    pub(super) fn recv_err_cqe(
        &mut self,
        qpn: u32,
        cqn: Option<u32>,
        uidx: u32,
        ci: u16,
        synd: u8,
    ) {
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
