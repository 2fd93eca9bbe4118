//! Bringing up a reliable connected QP: the attributes of RESET → INIT → RTR → RTS, in one
//! place.
//!
//! Every program that connects an RC QP without a connection manager (and the connection
//! manager itself) moves it through the same three transitions with the same attribute sets.
//! [`RcParams`] holds what differs between connections; [`RcParams::init_attr`],
//! [`RcParams::rtr_attr`] and [`RcParams::rts_attr`] give each transition's attributes and
//! mask, and [`connect`] (all three) or [`rtr_rts`] (the last two, for a QP already in INIT)
//! run them on a [`Provider`].
//!
//! The masks are exactly the transition's required attributes (see
//! [`transition_params`](crate::transition_params)) plus, at INIT → RTR, `ACCESS_FLAGS`: the
//! responder access is restated there so that a QP brought to INIT earlier (as a connection
//! manager does when it creates the QP) ends with the access of this connection, which is
//! what rdma_cm gets from its INIT → INIT before RTR.
//!
//! ```
//! use verbs::rc::RcParams;
//! use verbs::{check_modify, AccessFlags, Mtu, QpAttrMask as M, QpState, QpType};
//! let p = RcParams {
//!     access: AccessFlags::REMOTE_WRITE,
//!     path_mtu: Mtu::Mtu4096,
//!     dest_qp_num: 0x12,
//!     rq_psn: 0x100,
//!     sq_psn: 0x200,
//!     ..RcParams::default()
//! };
//! let (rtr, mask) = p.rtr_attr();
//! assert_eq!((rtr.qp_state, rtr.dest_qp_num, rtr.path_mtu), (QpState::Rtr, 0x12, Mtu::Mtu4096));
//! assert!(mask.contains(M::AV | M::DEST_QPN | M::RQ_PSN));
//! assert_eq!(check_modify(QpType::Rc, QpState::Init, &rtr, mask), Ok(QpState::Rtr));
//! ```

use crate::error::Error;
use crate::flags::{AccessFlags, QpAttrMask as M};
use crate::provider::Provider;
use crate::types::{AhAttr, Mtu, QpAttr, QpState};

/// What an RC connection's bring-up sets: the local port and access (RESET → INIT), the path
/// and the remote QP (INIT → RTR), and the requester's timers and depths (RTR → RTS).
///
/// Numbers go to the device as given: the provider refuses a value out of its field's range
/// (a PSN or QPN above 24 bits, a retry count above 7, a depth above the device's) with
/// [`Error::InvalidArgument`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcParams {
    /// Port (1-based). Default 1.
    pub port_num: u8,
    /// P_Key index. Default 0.
    pub pkey_index: u16,
    /// Remote access the QP allows as responder (INIT, restated at RTR). Default none.
    pub access: AccessFlags,
    /// The primary path to the peer (RoCE: its GID and MAC, `is_global`). Default: all zero
    /// but `port_num` 1.
    pub ah_attr: AhAttr,
    /// Path MTU. Default 1024.
    pub path_mtu: Mtu,
    /// The peer's QP number (24 bits).
    pub dest_qp_num: u32,
    /// First PSN expected from the peer (the peer's send PSN; 24 bits).
    pub rq_psn: u32,
    /// RDMA reads and atomics the QP handles at once as responder. Default 0.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code this QP asks the peer to wait (0..=31). Default 12
    /// (0.64 ms).
    pub min_rnr_timer: u8,
    /// First PSN this QP sends (24 bits).
    pub sq_psn: u32,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 0 waits forever). Default 14 (67 ms).
    pub timeout: u8,
    /// Transport retries (0..=7). Default 7.
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = retry forever). Default 7.
    pub rnr_retry: u8,
    /// RDMA reads and atomics the QP has outstanding at once as requester. Default 0.
    pub max_rd_atomic: u8,
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            port_num: 1,
            pkey_index: 0,
            access: AccessFlags::empty(),
            ah_attr: AhAttr {
                port_num: 1,
                ..AhAttr::default()
            },
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 0,
            rq_psn: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 12,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 0,
        }
    }
}

impl RcParams {
    /// RESET → INIT: port, P_Key index and responder access.
    pub fn init_attr(&self) -> (QpAttr, M) {
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: self.port_num,
            pkey_index: self.pkey_index,
            qp_access_flags: self.access,
            ..QpAttr::default()
        };
        (a, M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS)
    }

    /// INIT → RTR: path, MTU, remote QP, receive PSN, responder depth and RNR timer (and the
    /// responder access again).
    pub fn rtr_attr(&self) -> (QpAttr, M) {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: self.ah_attr,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            qp_access_flags: self.access,
            ..QpAttr::default()
        };
        let m = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER
            | M::ACCESS_FLAGS;
        (a, m)
    }

    /// RTR → RTS: send PSN, ACK timeout, retry counts and requester depth.
    pub fn rts_attr(&self) -> (QpAttr, M) {
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..QpAttr::default()
        };
        let m =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        (a, m)
    }
}

/// Moves the RC QP `qp` from RESET through INIT and RTR to RTS with `params`.
///
/// The first failing transition's error is returned; the QP stays in the state it reached
/// ([`QueuePair::state`](crate::QueuePair::state) says which).
pub fn connect<P: Provider>(provider: &P, qp: &mut P::Qp, params: &RcParams) -> Result<(), Error> {
    let (a, m) = params.init_attr();
    provider.modify_qp(qp, &a, m)?;
    rtr_rts(provider, qp, params)
}

/// Moves the RC QP `qp`, in INIT, through RTR to RTS with `params` (its `port_num` and
/// `pkey_index` are not used: they were set at INIT).
///
/// The first failing transition's error is returned; the QP stays in the state it reached.
pub fn rtr_rts<P: Provider>(provider: &P, qp: &mut P::Qp, params: &RcParams) -> Result<(), Error> {
    let (a, m) = params.rtr_attr();
    provider.modify_qp(qp, &a, m)?;
    let (a, m) = params.rts_attr();
    provider.modify_qp(qp, &a, m)
}
