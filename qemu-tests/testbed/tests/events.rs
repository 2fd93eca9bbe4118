//! Events between two NICs: a CQ overrun raises the CQ error event and overwrites nothing
//! (the completions already in the ring stay as they were and can be polled); completion
//! events on a channel follow arming, solicited-only arming fires on solicited messages only.

mod common;

use common::*;
use mlx5::Ah;
use nic_emulator::DeviceError;
use verbs::{
    AsyncElement, AsyncEvent, AsyncEventType, CompletionQueue, MemoryRegion, Provider, QpState,
    QpType, RemoteOp, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

const MEM: usize = 256 * 1024;

/// Everything the device wrote of a CQ: its ring and its doorbell record.
fn cq_bytes(cq: &mlx5::Cq) -> (Vec<u8>, Vec<u8>) {
    // SAFETY: the test polls and arms its CQs from this thread only, not while it reads them.
    let (ring_buf, rec_buf) = unsafe { (cq.buffer(), cq.doorbell_record()) };
    let mut ring = vec![0u8; ring_buf.len()];
    ring_buf.read(0, &mut ring).unwrap();
    let mut rec = vec![0u8; rec_buf.len()];
    rec_buf.read(0, &mut rec).unwrap();
    (ring, rec)
}

/// A QP whose CQ has 4 entries gets 4 signalled RDMA WRITEs completed (the ring is full, no
/// one polls), then 3 more: the 5th completion has no room. The device writes nothing into
/// the ring, raises CQ_ERR (IBV_EVENT_CQ_ERR) for the CQ and a fatal error for the QP that
/// could not complete; the 4 completions in the ring are unchanged and poll as before. The
/// other CQ and QPs of the NIC keep working.
#[test]
fn cq_overrun_raises_cq_error_and_corrupts_nothing() {
    let (world, a, b) = pair(41, MEM);
    let small = Provider::create_cq(&a.dev, 3, 0x55, None).unwrap();
    let entries = small.entries() as usize;
    assert_eq!((small.cqe(), entries), (3, 4));
    let (mut qa, _) = a.qp_on(&small, QpType::Rc, CAP, false);
    let (mut qb, _) = b.qp(QpType::Rc, CAP, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, &b, nb, &Conn::default());
    b.connect(&mut qb, &a, na, &Conn::default());
    a.write(0, &pattern(1, 4096));
    let sg: Vec<[Sge; 1]> = (0..8).map(|i| [a.sge(i * 64, 64)]).collect();
    let write = |i: usize| SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Rdma {
            remote_addr: b.addr(0x8000 + i * 64),
            rkey: b.mr.rkey(),
        },
        ..wr(i as u64, WrOpcode::RdmaWrite, &sg[i])
    };
    let first: Vec<SendWr<'_, Ah>> = (0..entries).map(write).collect();
    a.post_send(&mut qa, &first);
    // Let everything happen; nobody polls.
    for _ in 0..200 {
        world.relax();
    }
    assert_bytes(
        &b.read(0x8000, entries * 64),
        &a.read(0, entries * 64),
        "first writes",
    );
    assert!(async_events(&a).is_empty(), "an event before the overrun");
    a.no_device_errors();
    let before = cq_bytes(&small);

    let more: Vec<SendWr<'_, Ah>> = (entries..entries + 3).map(write).collect();
    a.post_send(&mut qa, &more);
    for _ in 0..200 {
        world.relax();
    }
    let ev = async_events(&a);
    assert_eq!(
        ev.first(),
        Some(&AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(small.cqn()),
        }),
        "{ev:?}"
    );
    // The QP whose completion had nowhere to go is in a fatal error.
    assert_eq!(
        ev[1..],
        [AsyncEvent {
            event_type: AsyncEventType::QpFatal,
            element: AsyncElement::Qp(qa.qpn()),
        }],
        "{ev:?}"
    );
    assert_eq!(a.qp_state(&qa), QpState::Err);
    assert_eq!(
        a.tb.device().errors(),
        [DeviceError::CqOverrun { cqn: small.cqn() }]
    );
    // Not a byte of the ring or of its doorbell record changed.
    let after = cq_bytes(&small);
    assert_bytes(&after.0, &before.0, "CQ ring after the overrun");
    assert_bytes(&after.1, &before.1, "CQ doorbell record after the overrun");
    // The completions in the ring are intact, in order, and nothing follows them.
    let mut wc = [WorkCompletion::default(); 16];
    let k = Provider::poll_cq(&a.dev, &small, &mut wc).unwrap();
    assert_eq!(
        wc[..k]
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.qp_num))
            .collect::<Vec<_>>(),
        (0..entries as u64)
            .map(|i| (i, WcStatus::Success, WcOpcode::RdmaWrite, qa.qpn()))
            .collect::<Vec<_>>()
    );
    let late = drain(&world, &a, &small, 50);
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(small.bad_cqes().0, 0);

    // The NIC's other CQ and a new QP on it are unaffected; so is the peer.
    let (mut qa2, _) = a.qp(QpType::Rc, CAP, false);
    let (mut qb2, _) = b.qp(QpType::Rc, CAP, false);
    let (na2, nb2) = (qa2.qpn(), qb2.qpn());
    a.connect(&mut qa2, &b, nb2, &Conn::default());
    b.connect(&mut qb2, &a, na2, &Conn::default());
    b.post_recv(&mut qb2, 5, &[b.sge(0x10000, 4096)]);
    a.post_send(
        &mut qa2,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(6, WrOpcode::Send, &sg[0])
        }],
    );
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (6, WcStatus::Success));
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (5, WcStatus::Success, 64)
    );
    assert_bytes(
        &b.read(0x10000, 64),
        &a.read(0, 64),
        "send after the overrun",
    );
    assert_eq!(b.qp_state(&qb), QpState::Rts);
    assert!(async_events(&b).is_empty());
    b.no_device_errors();

    // Teardown: the CQ in error is destroyed like any other.
    Provider::destroy_qp(&a.dev, qa).unwrap();
    Provider::destroy_cq(&a.dev, small).unwrap();
    a.teardown(vec![qa2]);
    b.teardown(vec![qb, qb2]);
}

/// A CQ on a completion channel: no event while not armed; armed for solicited completions
/// only, an unsolicited SEND and an RDMA WRITE WITH IMM without the solicited flag fire
/// nothing, a SOLICITED one fires; armed for any completion, the next one fires.
#[test]
fn solicited_and_unsolicited_completion_events() {
    let (world, a, b) = pair(42, MEM);
    let mut ch = Provider::create_comp_channel(&b.dev).unwrap();
    let cq = Provider::create_cq(&b.dev, 63, 0xc0ffee, Some(&ch)).unwrap();
    let (mut qa, _) = a.qp(QpType::Rc, CAP, false);
    let (mut qb, _) = b.qp_on(&cq, QpType::Rc, CAP, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, &b, nb, &Conn::default());
    b.connect(&mut qb, &a, na, &Conn::default());
    a.write(0, &pattern(2, 256));
    let sg = [a.sge(0, 256)];
    let events = |ch: &mut mlx5::CompChannel| {
        let mut v = Vec::new();
        for _ in 0..20 {
            while let Some(e) = Provider::get_cq_event(&b.dev, ch).unwrap() {
                v.push(e);
            }
            world.relax();
        }
        v
    };
    let mut recv_id = 0u64;
    let mut exchange = |qa: &mut mlx5::Qp, qb: &mut mlx5::Qp, opcode: WrOpcode, solicited: bool| {
        recv_id += 1;
        b.post_recv(qb, recv_id, &[b.sge(0x1000, 4096)]);
        let mut flags = SendFlags::SIGNALED;
        if solicited {
            flags |= SendFlags::SOLICITED;
        }
        let remote = if matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm) {
            RemoteOp::None
        } else {
            RemoteOp::Rdma {
                remote_addr: b.addr(0x3000),
                rkey: b.mr.rkey(),
            }
        };
        a.post_send(
            qa,
            &[SendWr {
                flags,
                remote,
                imm_data: 7u32.to_be(),
                ..wr(recv_id, opcode, &sg)
            }],
        );
        let s = poll_n(&world, &a, &a.cq, 1);
        assert_eq!(s[0].status, WcStatus::Success);
        // The completion is there; it is polled after the events are looked at.
        recv_id
    };

    // Not armed: nothing.
    let id = exchange(&mut qa, &mut qb, WrOpcode::Send, true);
    assert!(events(&mut ch).is_empty());
    assert_eq!(poll_n(&world, &b, &cq, 1)[0].wr_id, id);

    // Solicited only: the unsolicited ones do not fire.
    Provider::req_notify_cq(&b.dev, &cq, true).unwrap();
    for op in [
        WrOpcode::Send,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::SendWithImm,
    ] {
        let id = exchange(&mut qa, &mut qb, op, false);
        assert!(events(&mut ch).is_empty(), "{op:?} without SOLICITED fired");
        assert_eq!(poll_n(&world, &b, &cq, 1)[0].wr_id, id);
    }
    let id = exchange(&mut qa, &mut qb, WrOpcode::RdmaWriteWithImm, true);
    let ev = events(&mut ch);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!((ev[0].cqn, ev[0].cq_context), (cq.cqn(), 0xc0ffee));
    let r = poll_n(&world, &b, &cq, 1);
    assert_eq!((r[0].wr_id, r[0].opcode), (id, WcOpcode::RecvRdmaWithImm));
    // Fired once: not re-armed, the next solicited message fires nothing.
    let id = exchange(&mut qa, &mut qb, WrOpcode::Send, true);
    assert!(events(&mut ch).is_empty());
    assert_eq!(poll_n(&world, &b, &cq, 1)[0].wr_id, id);

    // Any completion.
    Provider::req_notify_cq(&b.dev, &cq, false).unwrap();
    let id = exchange(&mut qa, &mut qb, WrOpcode::Send, false);
    let ev = events(&mut ch);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(poll_n(&world, &b, &cq, 1)[0].wr_id, id);
    assert_eq!(cq.arm_sn(), 2);

    // Armed with a completion already waiting: the event comes at once.
    let id = exchange(&mut qa, &mut qb, WrOpcode::Send, false);
    Provider::req_notify_cq(&b.dev, &cq, false).unwrap();
    let ev = events(&mut ch);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(poll_n(&world, &b, &cq, 1)[0].wr_id, id);

    let late = drain(&world, &b, &cq, 20);
    assert!(late.is_empty(), "{late:?}");
    assert!(async_events(&a).is_empty() && async_events(&b).is_empty());
    a.no_device_errors();
    b.no_device_errors();
    Provider::destroy_qp(&b.dev, qb).unwrap();
    Provider::destroy_cq(&b.dev, cq).unwrap();
    Provider::destroy_comp_channel(&b.dev, ch).unwrap();
    a.teardown(vec![qa]);
    b.teardown(vec![]);
}

/// Two QPs share a CQ with completions of both waiting in it; one QP is destroyed and a new
/// one made (it may get the same QP number). Polling returns the other QP's completions and
/// the new QP's, never the destroyed QP's, and nothing is malformed.
#[test]
fn destroying_a_qp_discards_its_completions_on_a_shared_cq() {
    let (world, a, b) = pair(43, MEM);
    let conn = Conn::default();
    let make = |a: &Node, b: &Node| {
        let (mut qa, _) = a.qp(QpType::Rc, CAP, false);
        let (mut qb, _) = b.qp(QpType::Rc, CAP, false);
        let (na, nb) = (qa.qpn(), qb.qpn());
        a.connect(&mut qa, b, nb, &conn);
        b.connect(&mut qb, a, na, &conn);
        (qa, qb)
    };
    let (mut qa1, qb1) = make(&a, &b);
    let (mut qa2, qb2) = make(&a, &b);
    let sg = [a.sge(0, 64)];
    let w = |id: u64| SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Rdma {
            remote_addr: b.addr(0x4000),
            rkey: b.mr.rkey(),
        },
        ..wr(id, WrOpcode::RdmaWrite, &sg)
    };
    for i in 0..5 {
        a.post_send(&mut qa1, &[w(100 + i)]);
        a.post_send(&mut qa2, &[w(200 + i)]);
    }
    for _ in 0..200 {
        world.relax();
    }
    let gone = qa1.qpn();
    Provider::destroy_qp(&a.dev, qa1).unwrap();
    let (mut qa3, qb3) = make(&a, &b);
    a.post_send(&mut qa3, &[w(300), w(301)]);
    let wc = poll_n(&world, &a, &a.cq, 7);
    let mut got: Vec<(u32, u64, WcStatus)> =
        wc.iter().map(|w| (w.qp_num, w.wr_id, w.status)).collect();
    got.sort_by_key(|g| g.1);
    let mut want: Vec<(u32, u64, WcStatus)> = (200..205)
        .map(|i| (qa2.qpn(), i, WcStatus::Success))
        .collect();
    want.extend([300, 301].map(|i| (qa3.qpn(), i, WcStatus::Success)));
    assert_eq!(got, want, "QP {gone:#x} was destroyed");
    let late = drain(&world, &a, &a.cq, 20);
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(a.cq.bad_cqes().0, 0);
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![qa2, qa3]);
    b.teardown(vec![qb1, qb2, qb3]);
}
