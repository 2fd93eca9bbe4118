//! Memory protection between two NICs: local keys checked on the gather and scatter lists,
//! remote keys checked by the responder (PD, bounds, access rights of the MR and of the QP).
//! A violation completes the work request with the IB status, leaves the memory it aimed at
//! byte for byte as it was, moves the QP to ERR, and flushes everything posted after it.

mod common;

use common::*;
use mlx5::{Ah, Mr, Qp};
use verbs::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventType, MemoryRegion, Provider, QpState, QpType,
    RemoteOp, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
};

const MEM: usize = 256 * 1024;
/// Where A's payloads are.
const SRC: usize = 0;
/// Where B's receive buffers are.
const RBUF: usize = 64 * 1024;
/// B's RDMA target area.
const TGT: usize = 128 * 1024;
/// Length of the sub-range MRs on B.
const SUB: usize = 8192;

/// A fresh RC QP on each NIC, connected (B's QP grants `b_access`).
fn fresh(a: &Node, b: &Node, b_access: AccessFlags) -> (Qp, Qp) {
    let (mut qa, _) = a.qp(QpType::Rc, CAP, false);
    let (mut qb, _) = b.qp(QpType::Rc, CAP, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, b, nb, &Conn::default());
    b.connect(
        &mut qb,
        a,
        na,
        &Conn {
            access: b_access,
            ..Conn::default()
        },
    );
    (qa, qb)
}

/// Registers an MR on `pd` over `[off, off + len)` of its buffer with `access`.
fn sub_mr(n: &Node, pd: &mlx5::Pd, off: usize, len: usize, access: AccessFlags) -> Mr {
    Provider::reg_mr(&n.dev, pd, n.mem.slice(off..off + len).unwrap(), access).unwrap()
}

/// Posts on A: a signalled good SEND, the `bad` request (signalled), then an unsignalled RDMA
/// WRITE into B's target area and a signalled SEND; B has four receives posted. Checks that
/// the good SEND arrives, `bad` completes with `status`, the rest is flushed, A's QP is in
/// ERR and, when `responder` names an event, B's QP too (its receives flushed, that event
/// posted). Both buffers are compared byte for byte with their state before `bad` was posted.
#[allow(clippy::too_many_arguments)]
fn violation(
    a: &Node,
    b: &Node,
    world: &nic_testbed::World,
    bad: SendWr<'_, Ah>,
    b_access: AccessFlags,
    status: WcStatus,
    responder: Option<AsyncEventType>,
    what: &str,
) {
    let (mut qa, mut qb) = fresh(a, b, b_access);
    a.write(SRC, &pattern(1, 4096));
    let recv_sg: Vec<[Sge; 1]> = (0..4).map(|i| [b.sge(RBUF + i * 4096, 4096)]).collect();
    for (i, sg) in recv_sg.iter().enumerate() {
        b.post_recv(&mut qb, 100 + i as u64, sg);
    }
    // The first SEND goes through before anything else happens.
    let good = [a.sge(SRC, 100)];
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(1, WrOpcode::Send, &good)
        }],
    );
    let s = poll_n(world, a, &a.cq, 1);
    assert_eq!(summary(&s), [(1, WcStatus::Success)], "{what}");
    let r = poll_n(world, b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (100, WcStatus::Success, 100),
        "{what}"
    );
    let before = b.read(0, MEM);
    let before_a = a.read(0, MEM);

    let tail_sg = [a.sge(SRC, 512)];
    let after = [
        SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: b.addr(TGT),
                rkey: b.mr.rkey(),
            },
            ..wr(3, WrOpcode::RdmaWrite, &tail_sg)
        },
        SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(4, WrOpcode::Send, &tail_sg)
        },
    ];
    a.post_send(&mut qa, &[SendWr { wr_id: 2, ..bad }, after[0], after[1]]);
    let s = poll_n(world, a, &a.cq, 3);
    assert_eq!(
        summary(&s),
        [
            (2, status),
            (3, WcStatus::WrFlushErr),
            (4, WcStatus::WrFlushErr)
        ],
        "{what}: {s:?}"
    );
    let posted_op = match bad.opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        other => panic!("{what}: no test posts {other:?}"),
    };
    assert_eq!(
        s[0].opcode, posted_op,
        "{what}: the error names the posted operation"
    );
    assert!(s.iter().all(|w| w.qp_num == qa.qpn()));
    assert_eq!(a.qp_state(&qa), QpState::Err, "{what}");
    // Posting to a QP in ERR is allowed; the request is flushed.
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(5, WrOpcode::Send, &tail_sg)
        }],
    );
    let s = poll_n(world, a, &a.cq, 1);
    assert_eq!(summary(&s), [(5, WcStatus::WrFlushErr)], "{what}");
    assert_eq!(qa.sq_consumer(), qa.sq_producer());

    match responder {
        Some(ev) => {
            // B's QP went to ERR: its receives are flushed, and it says why.
            let r = poll_n(world, b, &b.cq, 3);
            assert_eq!(
                summary(&r),
                [
                    (101, WcStatus::WrFlushErr),
                    (102, WcStatus::WrFlushErr),
                    (103, WcStatus::WrFlushErr)
                ],
                "{what}"
            );
            assert!(r.iter().all(|w| w.opcode == WcOpcode::Recv));
            assert_eq!(b.qp_state(&qb), QpState::Err, "{what}");
            assert_eq!(
                async_events(b),
                [AsyncEvent {
                    event_type: ev,
                    element: AsyncElement::Qp(qb.qpn())
                }],
                "{what}"
            );
        }
        None => {
            // Nothing reached B: its QP still works, its receives are still posted.
            let late = drain(world, b, &b.cq, 20);
            assert!(late.is_empty(), "{what}: {late:?}");
            assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
            assert!(async_events(b).is_empty());
        }
    }
    // The requester learns of the error from its completion only.
    assert!(async_events(a).is_empty(), "{what}");
    // Not a byte of B's memory changed, nor of A's (a READ / atomic result was not written).
    let now_b = b.read(0, MEM);
    if let Some(i) = (0..MEM).find(|&i| now_b[i] != before[i]) {
        panic!("{what}: B's byte {i:#x} changed");
    }
    let now_a = a.read(0, MEM);
    if let Some(i) = (0..MEM).find(|&i| now_a[i] != before_a[i]) {
        panic!("{what}: A's byte {i:#x} changed");
    }
    let late = drain(world, a, &a.cq, 20);
    assert!(late.is_empty(), "{what}: {late:?}");
    Provider::destroy_qp(&a.dev, qa).unwrap();
    Provider::destroy_qp(&b.dev, qb).unwrap();
}

fn rdma(n: &Node, off: usize, rkey: u32) -> RemoteOp {
    RemoteOp::Rdma {
        remote_addr: n.addr(off),
        rkey,
    }
}

#[test]
fn bad_local_keys_give_local_protection_errors() {
    let (world, a, b) = pair(21, MEM);
    a.fill(SRC, 8192, 0x11);
    b.fill(TGT, 8192, 0x22);
    let pd2 = Provider::alloc_pd(&a.dev).unwrap();
    let other_pd = sub_mr(&a, &pd2, 0, MEM, ALL_ACCESS);
    // Local read only: fine to send from, not to receive a READ into.
    let read_only = sub_mr(&a, &a.pd, SRC, SUB, AccessFlags::empty());
    let later = sub_mr(&a, &a.pd, SRC + 4096, 4096, ALL_ACCESS);
    let lkey = a.mr.lkey();
    let cases: Vec<(&str, Sge, WrOpcode)> = vec![
        (
            "SEND, lkey of no MR",
            Sge {
                lkey: lkey ^ 0x100,
                ..a.sge(SRC, 64)
            },
            WrOpcode::Send,
        ),
        (
            "SEND, lkey with a wrong variant byte",
            Sge {
                lkey: lkey ^ 0x01,
                ..a.sge(SRC, 64)
            },
            WrOpcode::Send,
        ),
        (
            "SEND, lkey of another PD",
            Sge {
                lkey: other_pd.lkey(),
                ..a.sge(SRC, 64)
            },
            WrOpcode::Send,
        ),
        (
            "RDMA WRITE, SGE past the end of its MR",
            Sge {
                lkey: read_only.lkey(),
                ..a.sge(SRC + SUB - 10, 11)
            },
            WrOpcode::RdmaWrite,
        ),
        (
            "RDMA WRITE, SGE before the start of its MR",
            Sge {
                lkey: later.lkey(),
                ..a.sge(SRC + 4095, 16)
            },
            WrOpcode::RdmaWrite,
        ),
        (
            "RDMA READ into an MR without LOCAL_WRITE",
            Sge {
                lkey: read_only.lkey(),
                ..a.sge(SRC, 64)
            },
            WrOpcode::RdmaRead,
        ),
    ];
    for (what, sge, opcode) in &cases {
        let sg = [a.sge(SRC, 8), *sge]; // the bad SGE second
        let remote = if *opcode == WrOpcode::Send {
            RemoteOp::None
        } else {
            rdma(&b, TGT, b.mr.rkey())
        };
        let bad = SendWr {
            flags: SendFlags::SIGNALED,
            remote,
            ..wr(0, *opcode, &sg)
        };
        violation(
            &a,
            &b,
            &world,
            bad,
            ALL_ACCESS,
            WcStatus::LocProtErr,
            None,
            what,
        );
    }
    // An atomic whose result buffer is not locally writable.
    let res = [Sge {
        lkey: read_only.lkey(),
        ..a.sge(SRC + 8, 8)
    }];
    let bad = SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Atomic {
            remote_addr: b.addr(TGT),
            rkey: b.mr.rkey(),
            compare_add: 1,
            swap: 0,
        },
        ..wr(0, WrOpcode::AtomicFetchAndAdd, &res)
    };
    violation(
        &a,
        &b,
        &world,
        bad,
        ALL_ACCESS,
        WcStatus::LocProtErr,
        None,
        "FETCH_ADD into an MR without LOCAL_WRITE",
    );
    for mr in [other_pd, read_only, later] {
        Provider::dereg_mr(&a.dev, mr).unwrap();
    }
    Provider::dealloc_pd(&a.dev, pd2).unwrap();
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![]);
    b.teardown(vec![]);
}

#[test]
fn remote_key_violations_give_remote_access_errors_and_change_nothing() {
    let (world, a, b) = pair(22, MEM);
    b.write(TGT, &pattern(7, 16384));
    let pd2 = Provider::alloc_pd(&b.dev).unwrap();
    let other_pd = sub_mr(&b, &pd2, 0, MEM, ALL_ACCESS);
    let sub = sub_mr(&b, &b.pd, TGT + 4096, SUB, ALL_ACCESS);
    let no_rw = sub_mr(
        &b,
        &b.pd,
        TGT,
        SUB,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
    );
    let no_rr = sub_mr(
        &b,
        &b.pd,
        TGT,
        SUB,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let no_atomic = sub_mr(
        &b,
        &b.pd,
        TGT,
        SUB,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let small = [a.sge(SRC, 100)];
    let multi = [a.sge(SRC, 3000)]; // 3 packets at MTU 1024
    let res = [a.sge(SRC + 8192, 8)];
    let w = |sg, off, rkey| SendWr {
        flags: SendFlags::SIGNALED,
        remote: rdma(&b, off, rkey),
        ..wr(0, WrOpcode::RdmaWrite, sg)
    };
    let rd = |sg, off, rkey| SendWr {
        flags: SendFlags::SIGNALED,
        remote: rdma(&b, off, rkey),
        ..wr(0, WrOpcode::RdmaRead, sg)
    };
    let fa = |off: usize, rkey| SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Atomic {
            remote_addr: b.addr(off),
            rkey,
            compare_add: 5,
            swap: 0,
        },
        ..wr(0, WrOpcode::AtomicFetchAndAdd, &res)
    };
    let sub_end = TGT + 4096 + SUB;
    let cases: Vec<(&str, SendWr<'_, Ah>, AccessFlags)> = vec![
        (
            "WRITE, rkey of no MR",
            w(&small, TGT, b.mr.rkey() ^ 0x7700),
            ALL_ACCESS,
        ),
        (
            "WRITE, rkey with a wrong variant byte",
            w(&small, TGT, b.mr.rkey() ^ 1),
            ALL_ACCESS,
        ),
        (
            "WRITE, rkey of another PD",
            w(&small, TGT, other_pd.rkey()),
            ALL_ACCESS,
        ),
        (
            "WRITE, one byte past the MR's end",
            w(&small, sub_end - 99, sub.rkey()),
            ALL_ACCESS,
        ),
        (
            "WRITE, one byte before the MR's start",
            w(&small, TGT + 4095, sub.rkey()),
            ALL_ACCESS,
        ),
        (
            "WRITE of 3 packets, the last one byte past the MR's end",
            w(&multi, sub_end - 2999, sub.rkey()),
            ALL_ACCESS,
        ),
        (
            "WRITE, MR without REMOTE_WRITE",
            w(&small, TGT, no_rw.rkey()),
            ALL_ACCESS,
        ),
        (
            "WRITE with immediate, MR without REMOTE_WRITE",
            SendWr {
                opcode: WrOpcode::RdmaWriteWithImm,
                ..w(&small, TGT, no_rw.rkey())
            },
            ALL_ACCESS,
        ),
        (
            "WRITE, QP without REMOTE_WRITE",
            w(&small, TGT, b.mr.rkey()),
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ),
        (
            "READ, MR without REMOTE_READ",
            rd(&small, TGT, no_rr.rkey()),
            ALL_ACCESS,
        ),
        (
            "READ, one byte past the MR's end",
            rd(&small, sub_end - 99, sub.rkey()),
            ALL_ACCESS,
        ),
        (
            "READ, QP without REMOTE_READ",
            rd(&small, TGT, b.mr.rkey()),
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        ),
        (
            "FETCH_ADD, MR without REMOTE_ATOMIC",
            fa(TGT, no_atomic.rkey()),
            ALL_ACCESS,
        ),
        (
            "FETCH_ADD, rkey of another PD",
            fa(TGT, other_pd.rkey()),
            ALL_ACCESS,
        ),
        (
            "FETCH_ADD, QP without REMOTE_ATOMIC",
            fa(TGT, b.mr.rkey()),
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ),
    ];
    for (what, bad, access) in cases {
        violation(
            &a,
            &b,
            &world,
            bad,
            access,
            WcStatus::RemAccessErr,
            Some(AsyncEventType::QpAccessErr),
            what,
        );
    }
    // A misaligned atomic is an invalid request, not an access error.
    violation(
        &a,
        &b,
        &world,
        fa(TGT + 4, b.mr.rkey()),
        ALL_ACCESS,
        WcStatus::RemInvReqErr,
        Some(AsyncEventType::QpReqErr),
        "FETCH_ADD at an address that is not 8-byte aligned",
    );
    for mr in [other_pd, sub, no_rw, no_rr, no_atomic] {
        Provider::dereg_mr(&b.dev, mr).unwrap();
    }
    Provider::dealloc_pd(&b.dev, pd2).unwrap();
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![]);
    b.teardown(vec![]);
}

/// Errors on the responder's receive WQE: a bad lkey completes the receive with
/// LOC_PROT_ERR and the SEND with REM_OP_ERR; a receive buffer too small completes the
/// receive with LOC_LEN_ERR and the SEND with REM_INV_REQ_ERR. Both QPs end in ERR with
/// everything else flushed, and the memory is untouched.
#[test]
fn receive_side_errors() {
    let (world, a, b) = pair(23, MEM);
    for (what, recv_sge, send_status, recv_status) in [
        (
            "receive with a bad lkey",
            Sge {
                lkey: b.mr.lkey() ^ 0x100,
                ..b.sge(RBUF, 4096)
            },
            WcStatus::RemOpErr,
            WcStatus::LocProtErr,
        ),
        (
            "receive buffer one byte too small",
            b.sge(RBUF, 2999),
            WcStatus::RemInvReqErr,
            WcStatus::LocLenErr,
        ),
    ] {
        let (mut qa, mut qb) = fresh(&a, &b, ALL_ACCESS);
        b.fill(RBUF, 8192, 0x33);
        a.write(SRC, &pattern(3, 3000));
        b.post_recv(&mut qb, 10, &[recv_sge]);
        b.post_recv(&mut qb, 11, &[b.sge(RBUF + 4096, 4096)]);
        let sg = [a.sge(SRC, 3000)];
        a.post_send(
            &mut qa,
            &[
                SendWr {
                    flags: SendFlags::SIGNALED,
                    ..wr(1, WrOpcode::Send, &sg)
                },
                wr(2, WrOpcode::Send, &sg),
            ],
        );
        let s = poll_n(&world, &a, &a.cq, 2);
        assert_eq!(
            summary(&s),
            [(1, send_status), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        let r = poll_n(&world, &b, &b.cq, 2);
        assert_eq!(
            summary(&r),
            [(10, recv_status), (11, WcStatus::WrFlushErr)],
            "{what}"
        );
        assert!(
            r.iter()
                .all(|w| w.opcode == WcOpcode::Recv && w.qp_num == qb.qpn())
        );
        assert_eq!(a.qp_state(&qa), QpState::Err);
        assert_eq!(b.qp_state(&qb), QpState::Err);
        // The responder writes packets as they arrive, so a buffer too small for the last
        // packet holds the first ones (its contents are undefined after an error); nothing
        // is written past it, or into the next receive's buffer, or with a bad key at all.
        let got = b.read(RBUF, 8192);
        assert!(
            got[2999..].iter().all(|&x| x == 0x33),
            "{what}: past the buffer"
        );
        if recv_status == WcStatus::LocProtErr {
            assert!(got.iter().all(|&x| x == 0x33), "{what}: buffer written");
        }
        let late_a = drain(&world, &a, &a.cq, 20);
        let late_b = drain(&world, &b, &b.cq, 20);
        assert!(
            late_a.is_empty() && late_b.is_empty(),
            "{late_a:?} {late_b:?}"
        );
        Provider::destroy_qp(&a.dev, qa).unwrap();
        Provider::destroy_qp(&b.dev, qb).unwrap();
    }
    a.no_device_errors();
    b.no_device_errors();
    assert!(async_events(&a).is_empty());
    a.teardown(vec![]);
    b.teardown(vec![]);
}
