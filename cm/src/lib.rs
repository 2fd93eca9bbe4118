//! A connection manager with librdmacm's endpoint semantics, speaking the IB CM protocol
//! (REQ/REP/RTU, REJ, DREQ/DREP, SIDR) over RoCEv2, for any [`verbs::Provider`].
//!
//! * [`getaddrinfo`] → [`AddrInfo`]; [`Cm::create_ep`] → [`CmId`]; `listen`, `get_request`,
//!   `accept`, `reject`, `connect`, `disconnect`, `destroy_ep` on the id; [`EventChannel`]
//!   and [`CmId::migrate_id`] for asynchronous ids; `create_srq` / `destroy_srq`; the
//!   `rdma_verbs.h` helpers (`reg_msgs`, `post_send`, `post_recv` (to the id's SRQ if it has
//!   one), `get_send_comp`, ...). Errors are librdmacm's errno values ([`Error::errno`]).
//! * [`CmId::set_option`] (`rdma_set_option`, constants [`OPTION_ID`] ...): TOS (the path's
//!   traffic class), REUSEADDR, AFONLY, ACK_TIMEOUT (the QP's RTS timeout) and IB_PATH (a
//!   route from an `ibv_path_data` record), with the kernel's errno (ENOSYS for unknown
//!   levels and names); [`CmId::establish`] and [`CmId::init_qp_attr`] for applications
//!   that run their own QP transitions.
//! * The IB CM timewait: after DISCONNECTED an id waits out its path's local ACK timeout,
//!   then asynchronous ids get TIMEWAIT_EXIT; meanwhile a late duplicate of its REQ, and at
//!   any time a REQ naming the peer QP of a live connection, is rejected with REJ 10 "stale
//!   connection" (a new connection from a QP number in timewait is accepted, as in Linux).
//! * The caller's CQs and SRQs are shared handles ([`alloc::sync::Arc`] in [`QpInitAttr`]):
//!   a passive endpoint's saved attributes give them to every connection, and the manager
//!   never destroys them.
//! * [`mad`]: the wire format (MAD header, CM messages, the rdma_cm private-data header and
//!   service IDs), byte for byte.
//! * One progress engine: no threads. Every blocking call drives
//!   [`Cm::progress`] (received MADs, retransmissions, timeouts for every id of every
//!   device) and the platform's relax hook in turn, so one thread can run both ends of a
//!   connection.
//!
//! Each device's CM MADs travel on its GSI QP (QP1, [`verbs::QpType::Gsi`]) with the GSI
//! Q_Key 0x80010000 and P_Key index 0, to QP1 of the peer ([`mad::GSI_QPN`]), as the IB spec
//! and librdmacm have them (on Linux the kernel's MAD layer owns QP1; there is no kernel
//! here, so the manager creates it). The neighbour table ([`Neighbor`]) stands in for ARP.
//!
//! ```
//! use cm::{getaddrinfo, AddrInfo, Error, PortSpace, RaiFlags, mad};
//! let hints = AddrInfo { ai_flags: RaiFlags::PASSIVE, ..Default::default() };
//! let res = getaddrinfo(Some("127.0.0.2"), Some("7471"), Some(&hints)).unwrap();
//! assert_eq!(res.ai_port_space, Some(PortSpace::TCP));
//! assert_eq!(mad::service_id(PortSpace::TCP.0, 7471), 0x0000_0000_0106_1D2F);
//! assert_eq!(Error::ConnectionRefused.errno(), 111);
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod addr;
mod api;
mod config;
mod conn;
mod datapath;
mod device;
mod engine;
mod error;
mod event;
mod gsi;
mod helpers;
mod id;
pub mod mad;
mod ops;
mod options;
mod platform;
mod ports;
mod qp;
mod resources;
mod slab;
mod state;
mod transport;

#[cfg(test)]
mod tests;

pub use crate::addr::{AddrInfo, Family, PortSpace, RaiFlags, getaddrinfo};
pub use crate::config::{CmConfig, CmStats, RDMA_UDP_QKEY};
pub use crate::datapath::DataPath;
pub use crate::device::{CmPd, DeviceId, DeviceInfo, Neighbor};
pub use crate::error::{Error, GaiError};
pub use crate::event::{
    CmEvent, ConnData, ConnParam, EventChannel, EventParam, EventType, UdData, ack_cm_event,
};
pub use crate::id::{CmId, EventInfo, IdHandle, IdVerbs, QpInitAttr};
pub use crate::options::{
    IdOptions, OPTION_IB, OPTION_IB_PATH, OPTION_ID, OPTION_ID_ACK_TIMEOUT, OPTION_ID_AFONLY,
    OPTION_ID_REUSEADDR, OPTION_ID_TOS, PATH_DATA_SIZE, PATH_FLAGS_GMP_PRIMARY_BIDIR,
};
pub use crate::platform::Platform;
pub use crate::state::Cm;
