//! The lifetime of a CQ against the completion events reported for it, as libibverbs defines
//! it: `ibv_destroy_cq` returns only after every event `ibv_get_cq_event` reported for the CQ
//! has been acknowledged with `ibv_ack_cq_events` (another thread may still be reading the
//! CQ), an event still queued on the channel for a destroyed CQ is never reported, and
//! `ibv_destroy_comp_channel` fails with EBUSY while a CQ uses the channel.
//! A C program (`tests/c/destroy_cq_while_held.c`, built against rdma-core's headers) runs
//! the cases on the in-process NIC.

#[path = "../../test-support/mod.rs"]
mod support;

use std::path::Path;

#[test]
fn destroy_cq_waits_for_the_held_event_and_drops_queued_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/destroy_cq_while_held.c");
    support::run_c_test(
        "destroy-cq-while-held",
        &src,
        &["ibverbs"],
        &[
            "handler: event for the CQ",
            "handler: cq context intact",
            "destroy returned after the acknowledgement",
            "after destroy: -1 Resource temporarily unavailable",
            "destroy channel with a CQ: Device or resource busy",
            "destroy channel without CQs: destroyed",
            "ok",
        ],
    );
}
