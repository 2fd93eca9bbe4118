//! Interop with Linux soft-RoCE (`rdma_rxe`) and rdma-core's `rping` in a QEMU guest
//! (issue 8; facts in `shared/notes/interop-softroce.md`).
//!
//! * The host end is `tools/rping` itself (our `rping` binary on the Ethernet fabric,
//!   `--fabric eth:LOCAL,REMOTE`), or for the tests that need the NIC in-process (lost
//!   frames, port counters, a NIC without a listener) [`EthNic`]: an emulated NIC on the
//!   Ethernet fabric ([`roce_wire::fabric::EthLink`], QEMU's `-netdev socket,udp=` format)
//!   driven by the mlx5 driver, in our connection manager, with real ARP feeding the CM's
//!   neighbour table (it lives in `nic_testbed::eth`, shared with `tools/rping`).
//! * [`rping`]: rdma-core's rping exchange on our CM (client and server) in-process, for
//!   those tests.
//! * [`guest`]: the Debian guest with soft-RoCE and rdma-core's tools, built at test time.
//! * [`tools`]: builds our `rping` binary for the tests, and a relay that records the frames
//!   between QEMU and it.

pub mod guest;
pub mod rping;
pub mod tools;

pub use nic_testbed::eth::{EthDevice, EthNic, EthNicError, YieldingTime};
