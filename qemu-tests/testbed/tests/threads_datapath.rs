//! Several threads on one pair of NICs at the verbs level, without the connection manager:
//! each thread owns an RC QP and a CQ on each NIC (its "lane") and posts and polls them while
//! the other threads do the same on theirs. A poller thread runs the world (the fabric and
//! both devices) meanwhile, as a NIC's own engine would; the lanes only poll their CQs.
//!
//! Every lane moves data the others do not (a pattern seeded with the lane and iteration),
//! through RDMA WRITE, SEND/RECV and RDMA READ into its own part of the buffers, and checks
//! every byte after each transfer: a completion or a byte from another lane, a lost or
//! duplicated completion, or a torn doorbell shows as a mismatch.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use mlx5::{Cq, Qp};
use verbs::{
    Provider, QpCap, QpType, RemoteOp, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

/// Threads (lanes).
const LANES: usize = 4;
/// Round trips per lane.
const ITERS: usize = 40;
/// Bytes of each message.
const MSG: usize = 3000;
/// Bytes of buffer each lane owns on each NIC: `[SRC | DST | READ-BACK]`.
const LANE_BYTES: usize = 3 * 4096;
/// A wait that sees nothing for this long fails the test (a hang, not a timing assertion).
const HANG: Duration = Duration::from_secs(300);

/// One lane's objects: a QP and a CQ on each NIC, connected to each other.
struct Lane {
    cq_a: Cq,
    qp_a: Qp,
    cq_b: Cq,
    qp_b: Qp,
}

/// Polls `cq` of `n` until one completion arrives (the poller thread runs the world).
fn one(n: &Node, cq: &Cq, what: &str) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let since = Instant::now();
    loop {
        if Provider::poll_cq(&n.dev, cq, &mut wc).expect("poll_cq") == 1 {
            assert_eq!(wc[0].status, WcStatus::Success, "{what}: {:?}", wc[0]);
            return wc[0];
        }
        assert!(since.elapsed() < HANG, "{what}: no completion");
        std::thread::yield_now();
    }
}

/// Lane `k`'s traffic: per iteration, A WRITEs a pattern into B's DST, SENDs another into
/// B's SRC (a receive B posted), and READs B's DST back into its READ-BACK area; each byte
/// is checked. Returns the completions seen on A and on B.
fn run_lane(k: usize, a: &Node, b: &Node, lane: &mut Lane) -> (usize, usize) {
    let base = k * LANE_BYTES;
    let (src, dst, back) = (base, base + 4096, base + 2 * 4096);
    let (mut on_a, mut on_b) = (0, 0);
    for i in 0..ITERS {
        let seed = ((k as u64) << 32) | i as u64;
        let w = pattern(seed, MSG);
        let s = pattern(seed ^ 0x5a5a_5a5a_5a5a, MSG);
        // B's receive for the SEND lands in B's SRC.
        b.post_recv(&mut lane.qp_b, seed, &[b.sge(src, MSG)]);
        // RDMA WRITE into B's DST.
        a.write(src, &w);
        let sg = [a.sge(src, MSG)];
        let req = SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: b.addr(dst),
                rkey: b.mr_rkey(),
            },
            flags: SendFlags::SIGNALED,
            ..wr(seed, WrOpcode::RdmaWrite, &sg)
        };
        a.post_send(&mut lane.qp_a, &[req]);
        let c = one(a, &lane.cq_a, "write");
        assert_eq!((c.wr_id, c.opcode), (seed, WcOpcode::RdmaWrite), "lane {k}");
        on_a += 1;
        assert_bytes(
            &b.read(dst, MSG),
            &w,
            &format!("lane {k} iteration {i}: WRITE"),
        );
        // SEND into B's posted receive.
        a.write(src, &s);
        let req = SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(seed + 1, WrOpcode::Send, &sg)
        };
        a.post_send(&mut lane.qp_a, &[req]);
        let c = one(a, &lane.cq_a, "send");
        assert_eq!((c.wr_id, c.opcode), (seed + 1, WcOpcode::Send), "lane {k}");
        on_a += 1;
        let r = one(b, &lane.cq_b, "receive");
        assert_eq!(
            (r.wr_id, r.opcode, r.byte_len as usize),
            (seed, WcOpcode::Recv, MSG),
            "lane {k}"
        );
        on_b += 1;
        assert_bytes(
            &b.read(src, MSG),
            &s,
            &format!("lane {k} iteration {i}: SEND"),
        );
        // RDMA READ of B's DST (the WRITE's bytes) into A's READ-BACK.
        a.fill(back, MSG, 0);
        let rsg = [a.sge(back, MSG)];
        let req = SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: b.addr(dst),
                rkey: b.mr_rkey(),
            },
            flags: SendFlags::SIGNALED,
            ..wr(seed + 2, WrOpcode::RdmaRead, &rsg)
        };
        a.post_send(&mut lane.qp_a, &[req]);
        let c = one(a, &lane.cq_a, "read");
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len as usize),
            (seed + 2, WcOpcode::RdmaRead, MSG),
            "lane {k}"
        );
        on_a += 1;
        assert_bytes(
            &a.read(back, MSG),
            &w,
            &format!("lane {k} iteration {i}: READ"),
        );
    }
    (on_a, on_b)
}

trait Rkey {
    fn mr_rkey(&self) -> u32;
}

impl Rkey for Node {
    fn mr_rkey(&self) -> u32 {
        verbs::MemoryRegion::rkey(&self.mr)
    }
}

#[test]
fn threads_post_and_poll_their_own_qps_on_one_device_pair() {
    let (world, a, b) = pair(0x7468_7264, LANES * LANE_BYTES);
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut lanes: Vec<Lane> = (0..LANES)
        .map(|k| {
            let cq_a = Provider::create_cq(&a.dev, 31, 0, None).expect("create_cq A");
            let cq_b = Provider::create_cq(&b.dev, 31, 0, None).expect("create_cq B");
            let (mut qp_a, _) = a.qp_on(&cq_a, QpType::Rc, cap, false);
            let (mut qp_b, _) = b.qp_on(&cq_b, QpType::Rc, cap, false);
            let psn = 0x100 + 0x1000 * k as u32;
            let c = Conn {
                sq_psn: psn,
                rq_psn: psn,
                ..Conn::default()
            };
            let (qpn_a, qpn_b) = (
                verbs::QueuePair::qp_num(&qp_a),
                verbs::QueuePair::qp_num(&qp_b),
            );
            a.connect(&mut qp_a, &b, qpn_b, &c);
            b.connect(&mut qp_b, &a, qpn_a, &c);
            Lane {
                cq_a,
                qp_a,
                cq_b,
                qp_b,
            }
        })
        .collect();

    let stop = AtomicBool::new(false);
    let counts: Vec<(usize, usize)> = std::thread::scope(|sc| {
        // The world's engine: steps the fabric and both devices until the lanes are done.
        let poller = sc.spawn(|| {
            let mut relaxes = 0u64;
            while !stop.load(Ordering::Acquire) {
                world.relax();
                relaxes += 1;
                if relaxes.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        });
        let workers: Vec<_> = lanes
            .iter_mut()
            .enumerate()
            .map(|(k, lane)| {
                let (a, b) = (&a, &b);
                sc.spawn(move || run_lane(k, a, b, lane))
            })
            .collect();
        let counts = workers
            .into_iter()
            .map(|w| w.join().expect("a lane panicked"))
            .collect();
        stop.store(true, Ordering::Release);
        poller.join().expect("the poller panicked");
        counts
    });

    // Every lane saw exactly its own completions: 3 on A and 1 on B per iteration.
    assert_eq!(counts, vec![(3 * ITERS, ITERS); LANES]);
    // Nothing left over on any CQ, and the QPs are still connected.
    let mut wc = [WorkCompletion::default(); 4];
    for (k, l) in lanes.iter().enumerate() {
        assert_eq!(
            Provider::poll_cq(&a.dev, &l.cq_a, &mut wc).unwrap(),
            0,
            "lane {k}"
        );
        assert_eq!(
            Provider::poll_cq(&b.dev, &l.cq_b, &mut wc).unwrap(),
            0,
            "lane {k}"
        );
        assert_eq!(a.qp_state(&l.qp_a), verbs::QpState::Rts, "lane {k}");
        assert_eq!(b.qp_state(&l.qp_b), verbs::QpState::Rts, "lane {k}");
    }
    a.no_device_errors();
    b.no_device_errors();
    // The lanes' QPs, then their CQs; then each node's own objects.
    for l in lanes {
        Provider::destroy_qp(&a.dev, l.qp_a).expect("destroy_qp A");
        Provider::destroy_qp(&b.dev, l.qp_b).expect("destroy_qp B");
        assert_eq!(l.cq_a.bad_cqes().0, 0, "malformed CQEs on A");
        assert_eq!(l.cq_b.bad_cqes().0, 0, "malformed CQEs on B");
        Provider::destroy_cq(&a.dev, l.cq_a).expect("destroy_cq A");
        Provider::destroy_cq(&b.dev, l.cq_b).expect("destroy_cq B");
    }
    a.teardown(Vec::new());
    b.teardown(Vec::new());
}
