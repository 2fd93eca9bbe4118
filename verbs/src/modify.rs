//! The QP state transition table of the IB specification (chapter 11, "Modify Queue Pair"),
//! as libibverbs' `ibv_modify_qp` lets the kernel check it (`ib_modify_qp_is_ok`): which
//! transitions exist, and for each QP type which attributes a transition requires and which it
//! may take.
//!
//! SRD (EFA) is not in the IB specification. Its table is the one the Linux EFA driver
//! applies to SRD QPs (its own table, `efa_modify_srd_qp_is_ok`; UD QPs on EFA go through the
//! IB table): the UD column, plus `RNR_RETRY` as an optional attribute of RTR → RTS (the
//! device's RNR retry count for SRD, taken when the device reports RNR-retry support), and
//! without RESET → ERR (the EFA table has no such entry; from every other state ERR is
//! allowed). Unsure: nothing we found says whether the missing RESET → ERR is deliberate or
//! an omission of that table; this follows the table as the driver applies it. Which
//! attributes a given EFA device then accepts (port 1 only, P_Key index 0, `RNR_RETRY` only
//! with the device's RNR-retry capability) is its provider's check, not this table's.

use crate::error::Error;
use crate::flags::QpAttrMask as M;
use crate::types::{QpAttr, QpState, QpType};

/// Required and optional attributes of one transition for one QP type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionParams {
    /// Attributes that must be in the mask (besides `STATE` for a change of state).
    pub required: M,
    /// Attributes that may be in the mask.
    pub optional: M,
}

const fn p(required: M, optional: M) -> TransitionParams {
    TransitionParams { required, optional }
}

const NONE: M = M::empty();

/// The parameters of the transition `cur → next` for `qp_type`, or `None` if the transition
/// does not exist for that type.
pub const fn transition_params(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
) -> Option<TransitionParams> {
    use QpState::*;
    // UD, GSI (QP1) and SRD take the same attributes, but for SRD's two differences.
    let rc = matches!(qp_type, QpType::Rc);
    let srd = matches!(qp_type, QpType::Srd);
    Some(match (cur, next) {
        // SRD: the Linux EFA driver's table has no RESET -> ERR.
        (Reset, Err) if srd => return None,
        // Any state may go to RESET or ERR, with no attributes.
        (_, Reset) | (_, Err) => p(NONE, NONE),
        (Reset, Init) => {
            if rc {
                p(M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS), NONE)
            } else {
                p(M::PKEY_INDEX.union(M::PORT).union(M::QKEY), NONE)
            }
        }
        (Init, Init) => {
            if rc {
                p(NONE, M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS))
            } else {
                p(NONE, M::PKEY_INDEX.union(M::PORT).union(M::QKEY))
            }
        }
        (Init, Rtr) => {
            if rc {
                p(
                    M::AV
                        .union(M::PATH_MTU)
                        .union(M::DEST_QPN)
                        .union(M::RQ_PSN)
                        .union(M::MAX_DEST_RD_ATOMIC)
                        .union(M::MIN_RNR_TIMER),
                    M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
                )
            } else {
                p(NONE, M::PKEY_INDEX.union(M::QKEY))
            }
        }
        (Rtr, Rts) => {
            if rc {
                p(
                    M::SQ_PSN
                        .union(M::TIMEOUT)
                        .union(M::RETRY_CNT)
                        .union(M::RNR_RETRY)
                        .union(M::MAX_QP_RD_ATOMIC),
                    M::CUR_STATE
                        .union(M::ALT_PATH)
                        .union(M::ACCESS_FLAGS)
                        .union(M::MIN_RNR_TIMER)
                        .union(M::PATH_MIG_STATE),
                )
            } else if srd {
                // SRD: the RNR retry count may be set here (EFA's MODIFY_QP `rnr_retry`).
                p(M::SQ_PSN, M::CUR_STATE.union(M::QKEY).union(M::RNR_RETRY))
            } else {
                p(M::SQ_PSN, M::CUR_STATE.union(M::QKEY))
            }
        }
        (Rts, Rts) | (Sqd, Rts) => {
            if rc {
                p(
                    NONE,
                    M::CUR_STATE
                        .union(M::ACCESS_FLAGS)
                        .union(M::ALT_PATH)
                        .union(M::PATH_MIG_STATE)
                        .union(M::MIN_RNR_TIMER),
                )
            } else {
                p(NONE, M::CUR_STATE.union(M::QKEY))
            }
        }
        (Rts, Sqd) => p(NONE, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => {
            if rc {
                p(
                    NONE,
                    M::PORT
                        .union(M::AV)
                        .union(M::TIMEOUT)
                        .union(M::RETRY_CNT)
                        .union(M::RNR_RETRY)
                        .union(M::MAX_QP_RD_ATOMIC)
                        .union(M::MAX_DEST_RD_ATOMIC)
                        .union(M::ALT_PATH)
                        .union(M::ACCESS_FLAGS)
                        .union(M::PKEY_INDEX)
                        .union(M::MIN_RNR_TIMER)
                        .union(M::PATH_MIG_STATE),
                )
            } else {
                p(NONE, M::PKEY_INDEX.union(M::QKEY))
            }
        }
        // SQE exists for unreliable types only (an RC send error moves the QP to ERR).
        (Sqe, Rts) => {
            if rc {
                return None;
            }
            p(NONE, M::CUR_STATE.union(M::QKEY))
        }
        _ => return None,
    })
}

/// Checks a modify-QP request the way `ib_modify_qp_is_ok` does and returns the state the QP
/// will be in.
///
/// * The current state is `attr.cur_qp_state` when the mask names `CUR_STATE` (allowed only
///   from RTR, RTS, SQD and SQE), else `cur_state`.
/// * The next state is `attr.qp_state` when the mask names `STATE`, else the current state.
/// * The transition must exist for `qp_type`; the mask must contain all its required
///   attributes and nothing but `STATE` and its required and optional ones.
///
/// Anything else is [`Error::InvalidArgument`] (EINVAL).
///
/// ```
/// use verbs::{check_modify, QpAttr, QpAttrMask as M, QpState, QpType};
/// let attr = QpAttr { qp_state: QpState::Init, ..Default::default() };
/// let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
/// assert_eq!(check_modify(QpType::Rc, QpState::Reset, &attr, mask), Ok(QpState::Init));
/// // a UD QP needs a Q_Key instead of access flags
/// assert!(check_modify(QpType::Ud, QpState::Reset, &attr, mask).is_err());
/// // and so does an SRD QP
/// let srd = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
/// assert_eq!(check_modify(QpType::Srd, QpState::Reset, &attr, srd), Ok(QpState::Init));
/// ```
pub fn check_modify(
    qp_type: QpType,
    cur_state: QpState,
    attr: &QpAttr,
    mask: M,
) -> Result<QpState, Error> {
    let cur = if mask.contains(M::CUR_STATE) {
        if !matches!(
            attr.cur_qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(Error::InvalidArgument);
        }
        attr.cur_qp_state
    } else {
        cur_state
    };
    let next = if mask.contains(M::STATE) {
        attr.qp_state
    } else {
        cur
    };
    let params = transition_params(qp_type, cur, next).ok_or(Error::InvalidArgument)?;
    if !mask.contains(params.required) {
        return Err(Error::InvalidArgument);
    }
    let allowed = params.required.union(params.optional).union(M::STATE);
    if !mask.difference(allowed).is_empty() {
        return Err(Error::InvalidArgument);
    }
    Ok(next)
}
