//! Interop with Linux soft-RoCE (`rdma_rxe`) and rdma-core's `rping` in a QEMU guest
//! (issue 8; facts in `shared/notes/interop-softroce.md`).
//!
//! * [`nic`]: the host end — an emulated NIC on the Ethernet fabric
//!   ([`roce_wire::fabric::EthLink`], QEMU's `-netdev socket,udp=` format) driven by the mlx5
//!   driver, in our connection manager, with real ARP feeding the CM's neighbour table.
//! * [`rping`]: rdma-core's rping exchange on our CM (client and server), byte-compatible
//!   with the real `rping`.
//! * [`guest`]: the Debian guest with soft-RoCE and rdma-core's tools, built at test time.

pub mod guest;
pub mod nic;
pub mod rping;

pub use nic::{HostNic, YieldingTime};
