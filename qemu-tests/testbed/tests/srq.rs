//! Shared receive queues end to end: the verbs calls (`create_srq`, `post_srq_recv`,
//! `destroy_srq`, QPs created with `srq`), the mlx5 driver (at ISSI 1 a receive memory pool:
//! CREATE_RMP, the limit armed with MODIFY_RMP, QUERY_RMP, DESTROY_RMP; the linked WQE ring,
//! receive completions resolved by `wqe_counter` within the SRQ) and the emulated device
//! (SRQ objects, receives taken by whichever QP a message arrives on), with their errors.

mod common;

use common::*;
use firmware_interface::{cmd_status, opcode};
use mlx5::Srq;
use verbs::{
    AsyncElement, AsyncEventType, Error, PostError, Provider, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, SharedReceiveQueue, SrqAttr, WcOpcode, WcStatus, WrOpcode,
};

const SRQ_CAP: QpCap = QpCap {
    max_recv_wr: 0,
    max_recv_sge: 0,
    ..CAP
};

fn srq_attr(max_wr: u32, max_sge: u32, srq_limit: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge,
        srq_limit,
    }
}

/// An RC QP of `n` on `srq` (receive completions in `n.cq`).
fn qp_on_srq(n: &Node, srq: &Srq) -> Result<(mlx5::Qp, QpCap), Error> {
    Provider::create_qp(
        &n.dev,
        &n.pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &n.cq,
            recv_cq: &n.cq,
            srq: Some(srq),
            cap: SRQ_CAP,
            sq_sig_all: true,
        },
    )
}

/// Two connections (a1 ↔ b1, a2 ↔ b2) whose receiving ends on `b` share one SRQ: every
/// message takes the next receive posted to it, whichever connection it arrives on; the
/// completion names the right QP and the data lands in the buffer of the receive it took.
/// Three rounds through a 7-entry SRQ reuse every WQE of its ring (the free list wraps).
#[test]
fn two_connections_receive_through_one_srq() {
    let (world, a, b) = pair(71, 1 << 16);
    let srq = Provider::create_srq(&b.dev, &b.pd, &srq_attr(7, 2, 0)).unwrap();
    let got = srq.attr();
    assert_eq!((got.max_wr, got.max_sge, got.srq_limit), (7, 3, 0));
    let (mut b1, cap1) = qp_on_srq(&b, &srq).unwrap();
    let (mut b2, _) = qp_on_srq(&b, &srq).unwrap();
    assert_eq!(
        (cap1.max_recv_wr, cap1.max_recv_sge),
        (0, 0),
        "no RQ of its own"
    );
    assert_eq!(b1.srqn(), Some(srq.srqn()));
    let (mut a1, _) = a.qp(QpType::Rc, CAP, true);
    let (mut a2, _) = a.qp(QpType::Rc, CAP, true);
    let c = Conn::default();
    a.connect(&mut a1, &b, b1.qpn(), &c);
    b.connect(&mut b1, &a, a1.qpn(), &c);
    a.connect(&mut a2, &b, b2.qpn(), &c);
    b.connect(&mut b2, &a, a2.qpn(), &c);

    const LEN: usize = 256;
    let mut next_wr = 1000u64;
    for round in 0..3u64 {
        // six receives (posted in one call, then one more) into distinct buffers
        let sges: Vec<[verbs::Sge; 1]> = (0..6).map(|i| [b.sge(0x1000 + i * LEN, LEN)]).collect();
        let wrs: Vec<RecvWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: next_wr + i as u64,
                sg_list: s,
            })
            .collect();
        Provider::post_srq_recv(&b.dev, &srq, &wrs).unwrap();
        assert_eq!(srq.outstanding(), 6);
        // a1, a2, a1, a2, a2, a1: each message a pattern of its own
        let order = [1u8, 2, 1, 2, 2, 1];
        for (i, who) in order.iter().enumerate() {
            let data = pattern(round * 100 + i as u64, 200 - i * 10);
            let off = 0x8000 + i * LEN;
            a.write(off, &data);
            let sg = [a.sge(off, data.len())];
            let qp = if *who == 1 { &mut a1 } else { &mut a2 };
            a.post_send(qp, &[wr(i as u64, WrOpcode::Send, &sg)]);
            // one at a time: the arrival order is the send order
            let w = poll_n(&world, &b, &b.cq, 1);
            let w = w[0];
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            assert_eq!(w.opcode, WcOpcode::Recv);
            assert_eq!(
                w.wr_id,
                next_wr + i as u64,
                "the SRQ's receives in posting order"
            );
            let want_qp = if *who == 1 { b1.qpn() } else { b2.qpn() };
            assert_eq!(w.qp_num, want_qp, "the QP the message arrived on");
            assert_eq!(w.byte_len as usize, data.len());
            assert_eq!(
                b.read(0x1000 + i * LEN, data.len()),
                data,
                "round {round} msg {i}"
            );
        }
        let sends = poll_n(&world, &a, &a.cq, 6);
        assert!(sends.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(srq.outstanding(), 0);
        next_wr += 6;
    }
    b.no_device_errors();
    a.no_device_errors();
    // destroying the SRQ waits for its QPs
    let srq = match Provider::destroy_srq(&b.dev, srq) {
        Err(e) => {
            assert_eq!(e.error, Error::Busy);
            e.object.expect("handed back")
        }
        Ok(()) => panic!("SRQ destroyed under its QPs"),
    };
    Provider::destroy_qp(&b.dev, b1).unwrap();
    Provider::destroy_qp(&b.dev, b2).unwrap();
    assert_eq!(b.tb.live().srqs, 1);
    Provider::destroy_srq(&b.dev, srq).unwrap();
    assert_eq!(b.tb.live().srqs, 0);
    a.teardown(vec![a1, a2]);
    b.teardown(vec![]);
}

/// The error cases: sizes, a full SRQ (ENOMEM at the first request that does not fit), too
/// many SGEs, an SRQ of another PD or device, `post_recv` on a QP that has no RQ, the device
/// refusing an SRQ on a PD it does not have; a QP that goes to ERR leaves the SRQ's other
/// receives to the QPs still working; everything released at the end.
#[test]
fn srq_error_cases() {
    let (world, a, b) = pair(72, 1 << 16);
    let inval = Error::InvalidArgument;
    for bad in [
        srq_attr(0, 1, 0),
        srq_attr(4, 0, 0),
        srq_attr(4, 1, 5),
        srq_attr(1 << 20, 1, 0),
        srq_attr(4, 1000, 0),
    ] {
        assert_eq!(
            Provider::create_srq(&b.dev, &b.pd, &bad).map(|_| ()),
            Err(inval),
            "{bad:?}"
        );
    }
    // the device checks what the driver sends: a PD it does not have
    match b.dev.create_srq(0xabcd, &srq_attr(4, 1, 0)) {
        Err(mlx5::Error::Cmd { status, .. }) => assert_eq!(status, cmd_status::BAD_PARAM),
        other => panic!("{other:?}"),
    }
    let srq = Provider::create_srq(&b.dev, &b.pd, &srq_attr(3, 1, 0)).unwrap();
    assert_eq!(srq.attr().max_wr, 3);
    // a full SRQ: the fourth receive is ENOMEM, the three before it were posted
    let sg = [b.sge(0, 64)];
    let wrs: Vec<RecvWr<'_>> = (0..5)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: &sg,
        })
        .collect();
    assert_eq!(
        Provider::post_srq_recv(&b.dev, &srq, &wrs),
        Err(PostError {
            error: Error::NoMemory,
            bad_wr: 3
        })
    );
    assert_eq!(srq.outstanding(), 3);
    // more SGEs than max_sge
    let srq2 = Provider::create_srq(&b.dev, &b.pd, &srq_attr(4, 1, 0)).unwrap();
    let many = [b.sge(0, 8), b.sge(64, 8)];
    assert_eq!(
        Provider::post_srq_recv(
            &b.dev,
            &srq2,
            &[RecvWr {
                wr_id: 1,
                sg_list: &many
            }]
        ),
        Err(PostError {
            error: inval,
            bad_wr: 0
        })
    );
    // an SRQ of another PD, of another device
    let pd2 = Provider::alloc_pd(&b.dev).unwrap();
    let other_pd = Provider::create_srq(&b.dev, &pd2, &srq_attr(4, 1, 0)).unwrap();
    assert_eq!(qp_on_srq(&b, &other_pd).map(|_| ()), Err(inval));
    let other_dev = Provider::create_srq(&a.dev, &a.pd, &srq_attr(4, 1, 0)).unwrap();
    assert_eq!(qp_on_srq(&b, &other_dev).map(|_| ()), Err(inval));
    // a CQ of another device is refused the same way
    assert_eq!(
        Provider::create_qp(
            &b.dev,
            &b.pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &a.cq,
                recv_cq: &b.cq,
                srq: None,
                cap: CAP,
                sq_sig_all: false,
            },
        )
        .map(|_| ()),
        Err(inval)
    );
    Provider::destroy_srq(&b.dev, other_pd).unwrap();
    Provider::dealloc_pd(&b.dev, pd2).unwrap();
    Provider::destroy_srq(&a.dev, other_dev).unwrap();

    // two QPs on the SRQ; the first goes to ERR: the SRQ's receives are not flushed, the
    // second QP still gets them
    let (mut b1, _) = qp_on_srq(&b, &srq).unwrap();
    let (mut b2, _) = qp_on_srq(&b, &srq).unwrap();
    assert_eq!(
        Provider::post_recv(
            &b.dev,
            &mut b1,
            &[RecvWr {
                wr_id: 9,
                sg_list: &sg
            }]
        ),
        Err(PostError {
            error: inval,
            bad_wr: 0
        }),
        "a QP on an SRQ has no RQ"
    );
    let (mut a2, _) = a.qp(QpType::Rc, CAP, true);
    let c = Conn::default();
    a.connect(&mut a2, &b, b2.qpn(), &c);
    b.connect(&mut b2, &a, a2.qpn(), &c);
    let init = verbs::QpAttr {
        qp_state: QpState::Err,
        ..verbs::QpAttr::default()
    };
    Provider::modify_qp(&b.dev, &mut b1, &init, verbs::QpAttrMask::STATE).unwrap();
    assert!(
        drain(&world, &b, &b.cq, 50).is_empty(),
        "no flush for the SRQ's receives"
    );
    a.write(0x8000, b"through the second QP");
    let s = [a.sge(0x8000, 21)];
    a.post_send(&mut a2, &[wr(1, WrOpcode::Send, &s)]);
    let w = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (w[0].wr_id, w[0].qp_num, w[0].status),
        (0, b2.qpn(), WcStatus::Success)
    );
    assert_eq!(b.read(0, 21), b"through the second QP");
    poll_n(&world, &a, &a.cq, 1);
    assert_eq!(srq.outstanding(), 2);
    b.no_device_errors();
    Provider::destroy_qp(&b.dev, b1).unwrap();
    Provider::destroy_qp(&b.dev, b2).unwrap();
    // posted receives do not keep an SRQ alive
    Provider::destroy_srq(&b.dev, srq).unwrap();
    Provider::destroy_srq(&b.dev, srq2).unwrap();
    a.teardown(vec![a2]);
    b.teardown(vec![]);
}

/// The limit: when fewer receives than `srq_limit` stay posted, one SRQ_LIMIT_REACHED event
/// names the SRQ.
#[test]
fn srq_limit_event() {
    let (world, a, b) = pair(73, 1 << 16);
    let srq = Provider::create_srq(&b.dev, &b.pd, &srq_attr(8, 1, 2)).unwrap();
    assert_eq!(srq.attr().srq_limit, 2);
    let (mut b1, _) = qp_on_srq(&b, &srq).unwrap();
    let (mut a1, _) = a.qp(QpType::Rc, CAP, true);
    let c = Conn::default();
    a.connect(&mut a1, &b, b1.qpn(), &c);
    b.connect(&mut b1, &a, a1.qpn(), &c);
    let sg = [b.sge(0, 64)];
    let wrs: Vec<RecvWr<'_>> = (0..4)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: &sg,
        })
        .collect();
    Provider::post_srq_recv(&b.dev, &srq, &wrs).unwrap();
    let _ = async_events(&b);
    let s = [a.sge(0x8000, 8)];
    for i in 0..3 {
        a.post_send(&mut a1, &[wr(i, WrOpcode::Send, &s)]);
        poll_n(&world, &b, &b.cq, 1);
        let ev = async_events(&b);
        let limit: Vec<_> = ev
            .iter()
            .filter(|e| e.event_type == AsyncEventType::SrqLimitReached)
            .collect();
        // 4 posted: after the 3rd receive 1 < 2 are left
        if i == 2 {
            assert_eq!(limit.len(), 1, "{ev:?}");
            assert_eq!(limit[0].element, AsyncElement::Srq(srq.srqn()));
        } else {
            assert!(limit.is_empty(), "after {} receives: {ev:?}", i + 1);
        }
    }
    poll_n(&world, &a, &a.cq, 3);
    // The event disarmed the limit in the device; arming it again (MODIFY_RMP) brings one
    // more event when receives leave fewer than 2 posted (3 posted: after the 2nd).
    let mut srq = srq;
    assert_eq!(b.dev.query_srq_limit(&srq), Ok(0));
    Provider::post_srq_recv(&b.dev, &srq, &wrs[..2]).unwrap();
    b.dev.arm_srq_limit(&mut srq, 2).unwrap();
    assert_eq!(b.dev.query_srq_limit(&srq), Ok(2));
    assert_eq!(srq.attr().srq_limit, 2);
    let above = srq.attr().max_wr + 1;
    assert_eq!(
        b.dev.arm_srq_limit(&mut srq, above),
        Err(mlx5::Error::InvalidArgument)
    );
    for i in 0..2 {
        a.post_send(&mut a1, &[wr(9, WrOpcode::Send, &s)]);
        poll_n(&world, &b, &b.cq, 1);
        poll_n(&world, &a, &a.cq, 1);
        let limit = async_events(&b)
            .into_iter()
            .filter(|e| e.event_type == AsyncEventType::SrqLimitReached)
            .count();
        assert_eq!(limit, i, "after {} more receives", i + 1);
    }
    b.no_device_errors();
    Provider::destroy_qp(&b.dev, b1).unwrap();
    Provider::destroy_srq(&b.dev, srq).unwrap();
    a.teardown(vec![a1]);
    b.teardown(vec![]);
}

/// At ISSI 1 an SRQ is a receive memory pool, as Linux makes it: CREATE_RMP (no CREATE_SRQ,
/// which the device refuses there), the limit armed by MODIFY_RMP, DESTROY_RMP.
#[test]
fn srqs_are_receive_memory_pools() {
    let (_world, _a, b) = pair(74, 1 << 12);
    assert_eq!(b.dev.issi(), 1);
    let start = b.tb.device().command_log().len();
    let plain = Provider::create_srq(&b.dev, &b.pd, &srq_attr(4, 1, 0)).unwrap();
    let limited = Provider::create_srq(&b.dev, &b.pd, &srq_attr(4, 1, 3)).unwrap();
    assert_eq!(b.dev.query_srq_limit(&plain), Ok(0));
    assert_eq!(b.dev.query_srq_limit(&limited), Ok(3));
    Provider::destroy_srq(&b.dev, plain).unwrap();
    Provider::destroy_srq(&b.dev, limited).unwrap();
    // (the firmware's page commands, on their own slot, are not the SRQs')
    let ops: Vec<(u16, u8)> = b.tb.device().command_log()[start..]
        .iter()
        .filter(|r| r.opcode != opcode::MANAGE_PAGES)
        .map(|r| (r.opcode, r.status))
        .collect();
    assert_eq!(
        ops,
        vec![
            (opcode::CREATE_RMP, 0),
            (opcode::CREATE_RMP, 0),
            (opcode::MODIFY_RMP, 0),
            (opcode::QUERY_RMP, 0),
            (opcode::QUERY_RMP, 0),
            (opcode::DESTROY_RMP, 0),
            (opcode::DESTROY_RMP, 0),
        ]
    );
    b.no_device_errors();
    b.teardown(vec![]);
}
