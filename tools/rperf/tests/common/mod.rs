//! What the integration tests of both modes share.

/// The banner titles of the default suite's tests, in order.
pub const SUITE_TITLES: [&str; 5] = [
    "Send Latency Test",
    "RDMA_Write Latency Test",
    "RDMA_Read Latency Test",
    "RDMA_Write BW Test",
    "RDMA_Read BW Test",
];
