//! NVMe over Fabrics, the protocol: what the storage tools (target and initiator) speak over
//! the RDMA connection manager, written transport-agnostic so that the RDMA binding only
//! moves bytes.
//!
//! * [`capsule`]: the 64-byte submission queue entry, the 16-byte completion queue entry and
//!   SGL descriptors (keyed with invalidate, in-capsule with offset).
//! * [`status`]: completion status values (`SCT << 8 | SC`, DNR, MORE).
//! * [`rdma`]: the RDMA CM private data of connect request, accept and reject.
//! * [`fabrics`]: Connect and its 1024-byte data, Property Get / Set, Disconnect, and the
//!   CAP / VS / CC / CSTS properties.
//! * [`admin`]: Identify, Get Log Page, Set / Get Features, Keep Alive, Asynchronous Event
//!   Request, and their data structures.
//! * [`discovery`]: the discovery log page.
//! * [`io`]: Read, Write, Flush, Write Zeroes, Dataset Management.
//! * [`namespace`]: the [`namespace::Namespace`] backend trait; RAM-backed, and file-backed
//!   with the `std` feature.
//! * [`target`]: subsystems, controllers and queues as a state machine whose outputs are
//!   "read the host's data", "write data then respond", "respond".
//! * [`host`]: building commands and parsing completions, with queue-id and command-id
//!   bookkeeping, and a synchronous session over a [`host::HostTransport`].
//!
//! Bad input never panics: malformed capsules get an NVMe status (or, for a capsule shorter
//! than 64 bytes, a request to disconnect), malformed private data a reject status.
//!
//! ```
//! use nvmf::capsule::{Sgl, Sqe};
//! use nvmf::fabrics::Connect;
//! let mut sqe = Connect { qid: 0, sqsize: 31, kato: 5000, ..Default::default() }.to_sqe();
//! sqe.sgl = Sgl::Keyed { addr: 0x1000, len: 1024, key: 0x42, invalidate: true };
//! let bytes = sqe.encode();
//! assert_eq!((bytes[0], bytes[4], bytes[39]), (0x7F, 0x01, 0x4F));
//! assert_eq!(Sqe::decode(&bytes), Some(sqe));
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod admin;
pub mod capsule;
pub mod discovery;
pub mod fabrics;
pub mod host;
pub mod io;
pub mod namespace;
pub mod rdma;
pub mod status;
pub mod target;
mod wire;

pub use status::Status;
