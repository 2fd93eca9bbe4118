//! QP transitions the manager performs: INIT (and UD up to RTS), RTR/RTS of a connection,
//! ERR; and the responder access rdma_cm grants.

use verbs::rc::RcParams;
use verbs::{AccessFlags, Provider, QpAttr, QpAttrMask as M, QpState, QpType};

use crate::conn::Route;
use crate::error::Error;

// ------------------------------------------------------------------ QP transitions

/// A datagram QP type: UD, or EFA's SRD (reliable, unordered datagrams). Ids of these types
/// are in the UDP port space, resolve services with SIDR and have no connection.
pub(crate) const fn datagram(t: QpType) -> bool {
    matches!(t, QpType::Ud | QpType::Srd)
}

/// RESET → INIT of a connected QP, or RESET → INIT → RTR → RTS of a UD (or the GSI) QP.
pub(crate) fn qp_init<P: Provider>(
    p: &P,
    qp: &mut P::Qp,
    qp_type: QpType,
    access: AccessFlags,
    qkey: u32,
) -> Result<(), Error> {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: access,
        qkey,
        ..QpAttr::default()
    };
    match qp_type {
        QpType::Rc => {
            let (a, m) = RcParams {
                access,
                ..RcParams::default()
            }
            .init_attr();
            p.modify_qp(qp, &a, m)?;
        }
        // SRD (EFA's reliable datagram) has UD's state machine and Q_Key
        QpType::Ud | QpType::Gsi | QpType::Srd => {
            p.modify_qp(qp, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)?;
            a.qp_state = QpState::Rtr;
            p.modify_qp(qp, &a, M::STATE)?;
            a.qp_state = QpState::Rts;
            a.sq_psn = 0;
            p.modify_qp(qp, &a, M::STATE | M::SQ_PSN)?;
        }
        // Types the manager does not bring up.
        _ => return Err(Error::NotSupported),
    }
    Ok(())
}

/// Moves a QP to ERR (flushing its work requests); errors are ignored (the QP may already
/// be there).
pub(crate) fn qp_to_err<P: Provider>(p: &P, qp: &mut P::Qp) {
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let _ = p.modify_qp(qp, &a, M::STATE);
}

/// INIT → RTR → RTS of a connected QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connect {
    pub route: Route,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub access: AccessFlags,
}

impl Connect {
    /// The connection as the RC bring-up parameters of [`verbs::rc`]: rdma_cm's RTR asks for
    /// no RNR delay of the peer (`min_rnr_timer` 0) and restates the INIT access; the
    /// retry counts are capped at 7.
    fn params(&self) -> RcParams {
        RcParams {
            access: self.access,
            ah_attr: self.route.ah_attr(),
            path_mtu: self.route.mtu,
            dest_qp_num: self.dest_qpn & 0xFF_FFFF,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: 0,
            sq_psn: self.sq_psn,
            timeout: self.route.local_ack_timeout,
            retry_cnt: self.retry_cnt.min(7),
            rnr_retry: self.rnr_retry.min(7),
            max_rd_atomic: self.max_rd_atomic,
            ..RcParams::default()
        }
    }
}

/// The attributes (and mask) of the INIT → RTR transition of a connection.
pub(crate) fn rtr_attr(c: &Connect) -> (QpAttr, M) {
    c.params().rtr_attr()
}

/// The attributes (and mask) of the RTR → RTS transition of a connection.
pub(crate) fn rts_attr(c: &Connect) -> (QpAttr, M) {
    c.params().rts_attr()
}

/// INIT → RTR → RTS of a connection.
pub(crate) fn qp_rtr_rts<P: Provider>(p: &P, qp: &mut P::Qp, c: &Connect) -> Result<(), Error> {
    Ok(verbs::rc::rtr_rts(p, qp, &c.params())?)
}

/// The responder access rdma_cm gives a connected QP: remote write, plus read and atomics
/// when it accepts RDMA reads (responder resources > 0).
pub(crate) fn cm_access(responder_resources: u8) -> AccessFlags {
    if responder_resources > 0 {
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
    } else {
        AccessFlags::REMOTE_WRITE
    }
}
