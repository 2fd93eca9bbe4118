//! Interop with Linux soft-RoCE (`rdma_rxe`) and rdma-core's `rping` in a QEMU guest
//! (facts in `docs/qemu.md#the-socket-netdev` and `docs/qemu.md#soft-roce-interop`).
//!
//! * The host end is `tools/rping` itself (our `rping` binary on the Ethernet fabric,
//!   `--fabric eth:LOCAL,REMOTE`), or for the test that needs a NIC without a listener
//!   [`EthNic`]: an emulated NIC on the Ethernet fabric ([`roce_wire::fabric::EthLink`],
//!   QEMU's `-netdev socket,udp=` format) driven by the mlx5 driver, in our connection
//!   manager, with real ARP feeding the CM's neighbour table (it lives in `nic_testbed::eth`,
//!   shared with `tools/rping`).
//! * Or Debian's compiled `rping` on this project's C libraries (`tests/debian_rping.rs`:
//!   `RDMA_STACK_DEVICE=emu-eth:IP:LOCAL,PEER`).
//! * [`guest`]: the Debian guest with soft-RoCE and rdma-core's tools, built at test time.
//! * [`tools`]: builds our `rping` binary for the tests, and a relay between QEMU and it that
//!   records the frames and loses chosen ones on purpose.

pub mod guest;
pub mod tools;

pub use nic_testbed::eth::{EthDevice, EthNic, EthNicError, YieldingTime};
