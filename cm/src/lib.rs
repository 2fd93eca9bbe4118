//! A connection manager with librdmacm's endpoint semantics, speaking the IB CM protocol
//! (REQ/REP/RTU, REJ, DREQ/DREP, SIDR) over RoCEv2, for any [`verbs::Provider`].
//!
//! * [`getaddrinfo`] → [`AddrInfo`]; [`Cm::create_ep`] → [`CmId`]; `listen`, `get_request`,
//!   `accept`, `reject`, `connect`, `disconnect`, `destroy_ep` on the id; [`EventChannel`]
//!   and [`CmId::migrate_id`] for asynchronous ids; `create_srq` / `destroy_srq`; the
//!   `rdma_verbs.h` helpers (`reg_msgs`, `post_send`, `post_recv` (to the id's SRQ if it has
//!   one), `get_send_comp` (sleeping on the CQ's completion channel; `poll_send_comp`
//!   polls), `map_buf` for the program's static memory, ...). Errors are librdmacm's errno
//!   values ([`Error::errno`]).
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
//!   device) and the host's relax hook ([`Platform`], the manager's own small trait: a clock
//!   and a relax hook; verbs providers never block, so the device interface carries no host
//!   services) in turn, so one thread can run both ends of a connection.
//! * A thread-per-core data path: [`CmId::data_path`] gives a [`DataPath`] whose posts and
//!   polls take only the id's own lock (which the engine takes for the QP's transitions), never
//!   the manager's or a device-wide one; the device's provider is shared (`Arc`). The
//!   `rdma_verbs.h` helpers on the id go through it.
//! * Device limits: responder resources and initiator depth default to, and are checked
//!   against, the device's `max_qp_rd_atom` / `max_qp_init_rd_atom` (`query_device`).
//!
//! Each device's connection messages go through a transport (a crate-internal trait: send to a
//! peer's manager, poll what arrived, recover, destroy). The first one is the IB CM's: MADs on
//! the device's GSI QP (QP1, [`verbs::QpType::Gsi`]) with the GSI Q_Key 0x80010000 and P_Key
//! index 0, to QP1 of the peer ([`mad::GSI_QPN`]), as the IB spec and librdmacm have them (on
//! Linux the kernel's MAD layer owns QP1; there is no kernel here, so the manager creates it).
//! A NIC family without QP1 brings a datagram exchange of its own as another transport;
//! nothing outside the MAD transport assumes QP1. A transport whose QP goes to the error state
//! (a hostile datagram, a device fault) is reset and its receives posted again by the engine
//! ([`CmStats::transport_resets`]); retransmissions carry the connections in progress over it.
//! Address resolution looks in the neighbour table ([`Neighbor`], [`Cm::add_neighbor`]) and,
//! for what it does not know, asks the device's port ([`NeighborResolver`]: ARP on an
//! Ethernet port), as a kernel's `rdma_resolve_addr` does.
//!
//! Modules: `api` (the manager's calls), `id` (the id's calls), `ops` (what each call does to
//! the state), `engine` (received messages, timers), `state` (the state and the progress
//! pass), `config`, `device`, `conn` (per-id protocol state), `resources` (an id's verbs
//! objects), `datapath`, `ports`, `qp` (QP transitions), `transport` + `gsi` (messages), `mad`
//! (wire format), `event`, `options`, `addr`, `helpers` (`rdma_verbs.h`).
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
mod dgram;
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
pub use crate::device::{CmPd, DeviceId, DeviceInfo, Neighbor, NeighborResolver};
pub use crate::error::{Error, GaiError};
pub use crate::event::{
    CmEvent, ConnData, ConnParam, EventChannel, EventParam, EventType, UdData, ack_cm_event,
};
pub use crate::id::{CmId, EventInfo, IdHandle, IdVerbs, QpInitAttr};
pub use crate::options::{
    IdOptions, OPTION_IB, OPTION_IB_PATH, OPTION_ID, OPTION_ID_ACK_TIMEOUT, OPTION_ID_AFONLY,
    OPTION_ID_REUSEADDR, OPTION_ID_TOS, PATH_DATA_SIZE, PATH_FLAGS_GMP_PRIMARY_BIDIR,
};
pub use crate::platform::{Platform, clock_entropy};
pub use crate::state::Cm;
