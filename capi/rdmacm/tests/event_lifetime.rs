//! The lifetime of an `rdma_cm_id` against the events reported for it, as librdmacm defines
//! it: `rdma_destroy_id` returns only after every event reported for the id has been
//! acknowledged (a handler thread may still be reading the id: rping's client relies on it
//! at exit), an event of an id destroyed before anyone took it is never reported, and ids
//! destroyed while another thread takes their events (one may be in the making) leave no
//! event naming a freed id (before that was ordered, this crashed 2 runs in 5).
//! A C program (`tests/c/destroy_while_held.c`, built against rdma-core's headers) runs the
//! two cases on the in-process NIC.

#[path = "../../test-support/mod.rs"]
mod support;

use std::path::Path;

#[test]
fn destroy_waits_for_the_held_event_and_drops_queued_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/destroy_while_held.c");
    support::run_c_test(
        "destroy-while-held",
        &src,
        &["rdmacm", "ibverbs"],
        &[
            "handler: RDMA_CM_EVENT_ADDR_RESOLVED",
            "handler: id context intact",
            "destroy returned after the acknowledgement",
            "after destroy: -1 Resource temporarily unavailable",
            "churn: every event's id intact: yes",
            "ok",
        ],
    );
}
