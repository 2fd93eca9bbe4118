//! NVMe over Fabrics on RDMA: the transport binding of the [`nvmf`] protocol crate over the
//! connection manager ([`cm`]) and [`verbs`], and what the `nvmf-target` and `nvmf-perf` tools
//! share.
//!
//! * [`net`]: a connection manager on one opened device ([`device_open`]), and the embedded
//!   fixture (two emulated NICs on one in-process fabric, each with its own manager).
//! * [`target`]: the target side. A listener takes connection requests and runs each queue
//!   on a thread of its own. What a queue does is [`nvmf_rdma_target`]'s, a `no_std` crate
//!   shared with the unikernel (which drives every queue from one loop): [`target::admit`]
//!   checks the RDMA CM private data with [`nvmf::target::Target::accept`] (a reject carries
//!   the NVMe reject status), creates the QP with the queue sizes of the request (HSQSIZE + 1
//!   receives), posts one receive buffer per entry (64 bytes on the admin queue, 64 bytes
//!   plus the in-capsule size on I/O queues) before it accepts with the accept private data;
//!   [`target::QueueConn::poll`] drives [`nvmf::target::Queue`] from completions: up to
//!   [`target::MAX_IN_FLIGHT`] commands in flight per queue (as many as the host sends, its
//!   queue depth), each with its own staging slot and response buffer; host data named by a
//!   keyed SGL is RDMA READ (at most the host's responder resources at once) before the
//!   command runs, controller data RDMA WRITTEN chained ahead of the response SEND. The
//!   queue's state is its thread's alone: no lock on the I/O path.
//! * [`host`]: the host side. A queue registers its data buffers (remote read and write) and
//!   puts keyed SGLs into its commands (in-capsule data for small writes on I/O queues), SENDs
//!   capsules and receives responses; [`host::HostConn`] implements
//!   [`nvmf::host::HostTransport`] for [`nvmf::host::HostQueue`], and also submits and polls
//!   several commands at once for the benchmark.
//! * [`perf`]: the benchmark (fio-like workloads, latency percentiles, JSON).
//!
//! SEND with invalidate: the target answers a keyed SGL with the invalidate subtype (and a
//! length other than 0) with SEND with invalidate of that key (a Linux host's fast-registration
//! key). Our host never asks: its buffers are ordinary registrations, kept for the queue's
//! life, which cannot be invalidated remotely.
//!
//! The tools need `std` (threads for the queues, files, sockets); the protocol crate and the
//! target's queue engine stay `no_std`.

pub mod host;
pub mod net;
pub mod perf;
pub mod target;

/// Milliseconds on `clock` (the target's keep-alive clock).
pub fn now_ms(clock: &device_open::Clock) -> u64 {
    nic_hal::Platform::now_ns(clock) / 1_000_000
}

/// A completion wait gives up after this much time on the device's clock without progress
/// (RC retransmission reports a lost peer long before).
pub const STALL_LIMIT_NS: u64 = 60_000_000_000;
