//! QUERY_QP: the device's view of a QP, checked.

use firmware_interface::cmds::{query_qp_in, query_qp_out};
use firmware_interface::ctx::{ads, qpc};
use firmware_interface::{Field, opcode};
use nic_hal::{Platform, RegisterIo};

use crate::device::{Device, cmd_in};
use crate::error::{Error, OutputFault};

use super::{Qp, QpState};

/// What QUERY_QP reported (the state validated, the rest as read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryQp {
    /// State.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// Path MTU code (`qpc.mtu`).
    pub mtu: u8,
    /// Remote QPN.
    pub remote_qpn: u32,
    /// Next send PSN.
    pub next_send_psn: u32,
    /// Next expected receive PSN.
    pub next_rcv_psn: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_nak: u8,
    /// Port of the primary path.
    pub port: u8,
    /// P_Key index of the primary path.
    pub pkey_index: u16,
    /// SQ WQEBB counter as the hardware sees it.
    pub hw_sq_wqebb_counter: u16,
    /// RQ counter as the hardware sees it.
    pub hw_rq_counter: u32,
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// QUERY_QP: the device's view of the QP. A state value that does not exist, or a service
    /// type other than the QP's, is [`Error::BadOutput`].
    pub(crate) fn query_qp(&self, qp: &Qp) -> Result<QueryQp, Error> {
        let mut inp = cmd_in(opcode::QUERY_QP, 0, 16);
        query_qp_in::QPN.set(&mut inp, qp.qpn);
        let out = self.cmd(&inp, query_qp_out::SIZE)?;
        let base = query_qp_out::QPC.byte_off();
        let g = |f: Field| f.at(base).get(&out);
        let ppg = |f: Field| f.at(base + qpc::PRIMARY_ADDRESS_PATH.byte_off()).get(&out);
        let bad = |value| Error::BadOutput {
            opcode: opcode::QUERY_QP,
            what: OutputFault::QpContext { value },
        };
        let raw_state = g(qpc::STATE);
        let state = QpState::from_prm(raw_state).ok_or(bad(raw_state))?;
        let st = g(qpc::ST);
        if st != qp.service.st() {
            return Err(bad(st));
        }
        Ok(QueryQp {
            state,
            pd: g(qpc::PD),
            mtu: g(qpc::MTU) as u8,
            remote_qpn: g(qpc::REMOTE_QPN),
            next_send_psn: g(qpc::NEXT_SEND_PSN),
            next_rcv_psn: g(qpc::NEXT_RCV_PSN),
            qkey: g(qpc::Q_KEY),
            retry_count: g(qpc::RETRY_COUNT) as u8,
            rnr_retry: g(qpc::RNR_RETRY) as u8,
            min_rnr_nak: g(qpc::MIN_RNR_NAK) as u8,
            port: ppg(ads::VHCA_PORT_NUM) as u8,
            pkey_index: ppg(ads::PKEY_INDEX) as u16,
            hw_sq_wqebb_counter: g(qpc::HW_SQ_WQEBB_COUNTER) as u16,
            hw_rq_counter: g(qpc::HW_RQ_COUNTER),
        })
    }
}
