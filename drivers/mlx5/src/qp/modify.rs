//! The QP state transitions: RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS (the QP context each one
//! sends) and 2ERR / 2RST.

use firmware_interface::cmds::{qp_2err_in, qp_2rst_in, rst2init_qp_in};
use firmware_interface::ctx::{ads, qpc};
use firmware_interface::{dbr, opcode};
use nic_hal::{Platform, RegisterIo};

use crate::device::{Device, cmd_in};
use crate::error::Error;

use super::path::{datagram_mtu, pp};
use super::{AddressPath, Mtu, Qp, QpState, ServiceType, q};

/// A QP state transition (one modify-QP command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// RST2INIT_QP: port, P_Key index, access flags (RC) or Q_Key (UD).
    Rst2Init,
    /// INIT2RTR_QP: RC: MTU, remote QPN, address path, receive PSN, responder depth,
    /// RNR NAK timer.
    Init2Rtr,
    /// RTR2RTS_QP: send PSN; RC: ACK timeout, retry counts, initiator depth.
    Rtr2Rts,
    /// RTS2RTS_QP: changes what `opt_param_mask` names (RC: ACK timeout, RNR timer; UD: Q_Key).
    Rts2Rts,
    /// 2ERR_QP, from any state.
    ToErr,
    /// 2RST_QP, from any state.
    ToRst,
}

impl Transition {
    fn opcode(self) -> u16 {
        match self {
            Transition::Rst2Init => opcode::RST2INIT_QP,
            Transition::Init2Rtr => opcode::INIT2RTR_QP,
            Transition::Rtr2Rts => opcode::RTR2RTS_QP,
            Transition::Rts2Rts => opcode::RTS2RTS_QP,
            Transition::ToErr => opcode::QP_2ERR,
            Transition::ToRst => opcode::QP_2RST,
        }
    }

    /// `(state required, state after)`; `None`: any state.
    fn states(self) -> (Option<QpState>, QpState) {
        match self {
            Transition::Rst2Init => (Some(QpState::Reset), QpState::Init),
            Transition::Init2Rtr => (Some(QpState::Init), QpState::Rtr),
            Transition::Rtr2Rts => (Some(QpState::Rtr), QpState::Rts),
            Transition::Rts2Rts => (Some(QpState::Rts), QpState::Rts),
            Transition::ToErr => (None, QpState::Error),
            Transition::ToRst => (None, QpState::Reset),
        }
    }
}

/// Remote access a QP allows as responder (`rre`, `rwe`, `rae`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QpAccess(u8);

impl QpAccess {
    /// No remote access.
    pub const NONE: QpAccess = QpAccess(0);
    /// RDMA write.
    pub const REMOTE_WRITE: QpAccess = QpAccess(1 << 0);
    /// RDMA read.
    pub const REMOTE_READ: QpAccess = QpAccess(1 << 1);
    /// Atomics.
    pub const REMOTE_ATOMIC: QpAccess = QpAccess(1 << 2);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: QpAccess) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for QpAccess {
    type Output = QpAccess;
    fn bitor(self, rhs: QpAccess) -> QpAccess {
        QpAccess(self.0 | rhs.0)
    }
}

/// Parameters of a QP transition; each transition uses the fields its command needs (see
/// [`Transition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpModify {
    /// Port number (1-based).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Remote access (RC).
    pub access: QpAccess,
    /// Path MTU (RC; datagram QPs get Linux's fixed values: UD 4096, GSI 256).
    pub mtu: Mtu,
    /// Remote QPN (RC, 24 bits).
    pub remote_qpn: u32,
    /// Receive PSN (24 bits).
    pub rq_psn: u32,
    /// Send PSN (24 bits).
    pub sq_psn: u32,
    /// Primary address path (RC).
    pub path: AddressPath,
    /// Transport retry count (0..=7).
    pub retry_count: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_nak: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// `opt_param_mask` sent with the command (`ctx::qpc::optpar`); RTS2RTS changes only what
    /// it names.
    pub opt_param_mask: u32,
}

impl Default for QpModify {
    fn default() -> Self {
        QpModify {
            port: 1,
            pkey_index: 0,
            qkey: 0,
            access: QpAccess::NONE,
            mtu: Mtu::Mtu1024,
            remote_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            path: AddressPath::default(),
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            opt_param_mask: 0,
        }
    }
}

/// `ceil(log2(n))`, 0 for n ≤ 1 (Linux `fls(n - 1)`).
fn ceil_log2(n: u8) -> u32 {
    if n <= 1 {
        0
    } else {
        u32::BITS - ((n - 1) as u32).leading_zeros()
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Moves a QP through one state transition. The transition must start from the state
    /// the driver last moved the QP to (`ToErr` and `ToRst` from any state), else
    /// [`Error::InvalidArgument`]; the attributes it uses are range-checked. After `ToRst` the
    /// doorbell record is cleared.
    pub(crate) fn modify_qp(
        &self,
        qp: &mut Qp,
        transition: Transition,
        attr: &QpModify,
    ) -> Result<(), Error> {
        let (from, to) = transition.states();
        if from.is_some_and(|s| s != qp.state) {
            return Err(Error::InvalidArgument);
        }
        let inp = match transition {
            Transition::ToErr => {
                let mut inp = cmd_in(opcode::QP_2ERR, 0, 16);
                qp_2err_in::QPN.set(&mut inp, qp.qpn);
                inp
            }
            Transition::ToRst => {
                let mut inp = cmd_in(opcode::QP_2RST, 0, 16);
                qp_2rst_in::QPN.set(&mut inp, qp.qpn);
                inp
            }
            _ => self.modify_input(qp, transition, attr)?,
        };
        self.cmd(&inp, 16)?;
        qp.state = to;
        if transition == Transition::Rst2Init {
            qp.port = attr.port;
        }
        if qp.service.is_datagram() {
            let named = attr.opt_param_mask & qpc::optpar::Q_KEY != 0;
            match transition {
                Transition::Rst2Init => qp.qkey = attr.qkey,
                Transition::Init2Rtr | Transition::Rtr2Rts | Transition::Rts2Rts if named => {
                    qp.qkey = attr.qkey
                }
                _ => {}
            }
        }
        if transition == Transition::ToRst {
            // The device forgot the queues: so does the driver, and the QP's CQEs still in its
            // CQs are dropped.
            qp.clean_cqs(false);
            qp.reset_queues();
            qp.dbrec.write_be32(dbr::QP_RCV, 0)?;
            qp.dbrec.write_be32(dbr::QP_SND, 0)?;
        }
        Ok(())
    }

    /// Builds the input of RST2INIT / INIT2RTR / RTR2RTS / RTS2RTS.
    fn modify_input(
        &self,
        qp: &Qp,
        transition: Transition,
        a: &QpModify,
    ) -> Result<alloc::vec::Vec<u8>, Error> {
        let caps = &self.caps;
        let p = &a.path;
        let port_ok = a.port >= 1 && a.port <= caps.num_ports;
        let log_rra = ceil_log2(a.max_dest_rd_atomic);
        let log_sra = ceil_log2(a.max_rd_atomic);
        if !port_ok
            || a.remote_qpn > 0xff_ffff
            || a.rq_psn > 0xff_ffff
            || a.sq_psn > 0xff_ffff
            || a.retry_count > 7
            || a.rnr_retry > 7
            || a.min_rnr_nak > 31
            || p.ack_timeout > 31
            || p.flow_label > 0xf_ffff
            || p.sl > 15
            || p.stat_rate > 15
            || log_rra > 7
            || log_rra > caps.log_max_ra_res_qp as u32
            || log_sra > 7
            || log_sra > caps.log_max_ra_req_qp as u32
        {
            return Err(Error::InvalidArgument);
        }
        let rc = qp.service == ServiceType::Rc;
        let mut inp = cmd_in(transition.opcode(), 0, rst2init_qp_in::SIZE);
        rst2init_qp_in::QPN.set(&mut inp, qp.qpn);
        rst2init_qp_in::OPT_PARAM_MASK.set(&mut inp, a.opt_param_mask);
        q(&mut inp, qpc::ST, qp.service.st());
        q(&mut inp, qpc::PM_STATE, qpc::PM_STATE_MIGRATED);
        q(&mut inp, qpc::PD, qp.pd);
        q(&mut inp, qpc::CQN_SND, qp.send_cqn);
        q(&mut inp, qpc::CQN_RCV, qp.recv_cqn);
        pp(&mut inp, ads::VHCA_PORT_NUM, a.port as u32);
        pp(&mut inp, ads::PKEY_INDEX, a.pkey_index as u32);
        if let Some((mtu, log_msg_max)) = datagram_mtu(qp.service) {
            // As Linux's `__mlx5_ib_modify_qp`, in every transition's context; the device
            // takes them at INIT2RTR (and refuses a datagram QP without an MTU there).
            q(&mut inp, qpc::MTU, mtu);
            q(
                &mut inp,
                qpc::LOG_MSG_MAX,
                log_msg_max.min(caps.log_max_msg as u32),
            );
        }
        let access = |inp: &mut [u8]| {
            q(
                inp,
                qpc::RRE,
                a.access.contains(QpAccess::REMOTE_READ) as u32,
            );
            q(
                inp,
                qpc::RWE,
                a.access.contains(QpAccess::REMOTE_WRITE) as u32,
            );
            let rae = a.access.contains(QpAccess::REMOTE_ATOMIC);
            q(inp, qpc::RAE, rae as u32);
            if rae {
                q(inp, qpc::ATOMIC_MODE, qpc::ATOMIC_MODE_IB);
            }
        };
        match transition {
            Transition::Rst2Init => {
                if rc {
                    access(&mut inp);
                } else {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::Init2Rtr => {
                if !rc && a.opt_param_mask & qpc::optpar::Q_KEY != 0 {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
                if rc {
                    q(&mut inp, qpc::MTU, a.mtu.prm());
                    q(&mut inp, qpc::LOG_MSG_MAX, caps.log_max_msg as u32);
                    q(&mut inp, qpc::REMOTE_QPN, a.remote_qpn);
                    q(&mut inp, qpc::NEXT_RCV_PSN, a.rq_psn);
                    q(&mut inp, qpc::LOG_RRA_MAX, log_rra);
                    q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    access(&mut inp);
                    self.write_path(&mut inp, p);
                }
            }
            Transition::Rtr2Rts => {
                q(&mut inp, qpc::NEXT_SEND_PSN, a.sq_psn);
                let opt = a.opt_param_mask;
                if rc {
                    pp(&mut inp, ads::ACK_TIMEOUT, p.ack_timeout as u32);
                    q(&mut inp, qpc::RETRY_COUNT, a.retry_count as u32);
                    q(&mut inp, qpc::RNR_RETRY, a.rnr_retry as u32);
                    q(&mut inp, qpc::LOG_SRA_MAX, log_sra);
                    if opt & (qpc::optpar::RRE | qpc::optpar::RWE | qpc::optpar::RAE) != 0 {
                        access(&mut inp);
                    }
                    if opt & qpc::optpar::RNR_TIMEOUT != 0 {
                        q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    }
                } else if opt & qpc::optpar::Q_KEY != 0 {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::Rts2Rts => {
                if rc {
                    pp(&mut inp, ads::ACK_TIMEOUT, p.ack_timeout as u32);
                    q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    let opt = a.opt_param_mask;
                    if opt & (qpc::optpar::RRE | qpc::optpar::RWE | qpc::optpar::RAE) != 0 {
                        access(&mut inp);
                    }
                } else {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::ToErr | Transition::ToRst => return Err(Error::InvalidArgument),
        }
        Ok(inp)
    }
}
