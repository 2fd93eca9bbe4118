//! Rules of libibverbs that programs rely on, each shown by a C program built against
//! rdma-core's headers (`tests/c/`) on the in-process NIC:
//! - the lifetime of a CQ against the completion events reported for it: `ibv_destroy_cq`
//!   returns only after every event `ibv_get_cq_event` reported for the CQ has been
//!   acknowledged with `ibv_ack_cq_events` (another thread may still be reading the CQ), an
//!   event still queued on the channel for a destroyed CQ is never reported, and
//!   `ibv_destroy_comp_channel` fails with EBUSY while a CQ uses the channel
//!   (`destroy_cq_while_held.c`);
//! - a list of work requests is posted up to the first bad one, which `*bad_wr` names
//!   (`post_list.c`).

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

/// A list of work requests is posted in order up to the first one that cannot be taken: its
/// errno is returned and `*bad_wr` names it; the ones before it were posted, the ones after
/// it were not (only the first receive is flushed when the QP goes to the error state).
#[test]
fn a_list_stops_at_the_bad_request_and_names_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/post_list.c");
    support::run_c_test(
        "post-list",
        &src,
        &["ibverbs"],
        &[
            "post_recv: Invalid argument, bad_wr the second",
            "post_send: Invalid argument, bad_wr the first",
            "flushed: 1 completion(s) wr_id 10 status flushed",
            "ok",
        ],
    );
}
