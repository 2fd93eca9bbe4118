//! The verbs API (libibverbs semantics with Rust types) and the provider trait that device
//! drivers implement.
//!
//! * [`Buffer`] and [`DmaMemory`]: memory the device can reach, with an owner (a memory
//!   region holds its buffer until deregistration succeeded) and race-free CPU accessors;
//! * [`Provider`]: PD, MR, CQ (with completion channels), QP, SRQ, AH, post/poll, events — what
//!   `ibv_*` offers, with owned objects and `Result`s;
//! * attribute and work-request types with libibverbs' numeric values ([`WcStatus`],
//!   [`WcOpcode`], [`WrOpcode`], [`QpState`], [`AccessFlags`], [`SendFlags`],
//!   [`QpAttrMask`], ...), so ported code compares the same numbers;
//! * [`check_modify`]: the IB specification's QP state transition table (required and
//!   optional attributes per transition and QP type), as `ibv_modify_qp` applies it, and
//!   EFA's for SRD;
//! * [`rc`]: the attributes of an RC QP's RESET → INIT → RTR → RTS ([`rc::RcParams`]), and
//!   [`rc::connect`] to run them;
//! * [`Error`], each variant an errno libibverbs returns ([`Error::errno`]); a command the
//!   device failed keeps its opcode, status and syndrome ([`DeviceFailure`]).
//!
//! Family-neutral: the types cover what ConnectX (RC, UD, GSI; atomics) and AWS EFA (UD and
//! SRD, whose RDMA read/write names both a datagram destination and a remote buffer:
//! [`SendWr::dest`] and [`SendWr::remote`]) need. Enums that will grow are
//! `#[non_exhaustive]`: match them with a wildcard arm.
//!
//! ```
//! use verbs::{check_modify, Error, QpAttr, QpAttrMask as M, QpState, QpType, WcStatus};
//! assert_eq!(Error::NoMemory.errno(), 12);
//! assert_eq!(WcStatus::WrFlushErr as u8, 5);
//! let rtr = QpAttr { qp_state: QpState::Rtr, ..Default::default() };
//! // INIT -> RTR of an RC QP needs the path, MTU, remote QPN, PSN, depth and RNR timer
//! assert_eq!(check_modify(QpType::Rc, QpState::Init, &rtr, M::STATE), Err(Error::InvalidArgument));
//! let all = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
//!     | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
//! assert_eq!(check_modify(QpType::Rc, QpState::Init, &rtr, all), Ok(QpState::Rtr));
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod ah;
mod error;
mod flags;
mod mem;
mod modify;
mod provider;
pub mod rc;
mod types;
mod wr;

pub use ah::{GRH_SIZE, create_ah_from_wc, init_ah_from_wc};
pub use error::{DestroyError, DeviceFailure, Error, PostError};
pub use flags::{AccessFlags, QpAttrMask, SendFlags, WcFlags};
pub use mem::{Buffer, DMA_PAGE_SIZE, DmaMemory, StaticBytes};
pub use modify::{TransitionParams, check_modify, transition_params};
pub use provider::{CompletionQueue, MemoryRegion, Provider, QueuePair, SharedReceiveQueue};
pub use types::{
    AhAttr, AtomicCap, DeviceAttr, FwVersion, Gid, LinkLayer, MemRegion, Mtu, PortAttr, PortState,
    QpAttr, QpCap, QpInitAttr, QpState, QpType, SrqAttr,
};
pub use wr::{
    AsyncElement, AsyncEvent, AsyncEventType, CqEvent, RecvWr, RemoteOp, SendWr, Sge, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

#[cfg(test)]
mod tests;
