//! RC SEND / WRITE runs that cross a fault-free in-process path as one segment (the GSO-style
//! offload of the emulated NIC): large WRITEs arrive byte-exact with one copy, SENDs fall
//! back to per-packet processing, errors (remote access, RNR) are those of frames, duplicate
//! segments after a lost ACK are recognised, a segment whose sender flushed its QP is not
//! placed, and a lossy fabric turns every segment into frames.

mod common;

use common::*;
use mlx5::{Ah, Qp};
use nic_emulator::roce_wire::fabric::{FabricStats, FaultConfig};
use verbs::{
    AsyncElement, AsyncEvent, AsyncEventType, MemoryRegion, Provider, QpAttr, QpAttrMask, QpState,
    QpType, RemoteOp, SendFlags, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

const MEM: usize = 4 << 20;
const MIB: usize = 1 << 20;

fn connected(a: &Node, b: &Node, ca: &Conn, cb: &Conn) -> (Qp, Qp) {
    let (mut qa, _) = a.qp(QpType::Rc, CAP, false);
    let (mut qb, _) = b.qp(QpType::Rc, CAP, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, b, nb, ca);
    b.connect(&mut qb, a, na, cb);
    (qa, qb)
}

/// A signalled RDMA WRITE (or WRITE with immediate `imm`) of `sg` to `b`'s buffer at `off`.
fn write_wr<'a>(
    wr_id: u64,
    b: &Node,
    off: usize,
    sg: &'a [Sge],
    imm: Option<u32>,
) -> SendWr<'a, Ah> {
    let opcode = if imm.is_some() {
        WrOpcode::RdmaWriteWithImm
    } else {
        WrOpcode::RdmaWrite
    };
    SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Rdma {
            remote_addr: b.addr(off),
            rkey: MemoryRegion::rkey(&b.mr),
        },
        imm_data: imm.unwrap_or(0).to_be(),
        ..wr(wr_id, opcode, sg)
    }
}

/// `sent + duplicated == delivered + dropped() + in_flight` on the world's fabric.
#[track_caller]
fn fabric_balanced(world: &nic_testbed::World) -> FabricStats {
    let s = world.fabric().stats();
    assert_eq!(
        s.sent + s.duplicated,
        s.delivered + s.dropped() + world.fabric().in_flight() as u64,
        "{s:?}"
    );
    s
}

/// Asserts that `node`'s buffer holds `byte` everywhere outside `[from, to)`.
#[track_caller]
/// Neither node had a device error; both are torn down with these QPs.
fn finish(a: Node, b: Node, qa: Vec<Qp>, qb: Vec<Qp>) {
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(qa);
    b.teardown(qb);
}

/// Nothing more completes on the requester's CQ and both QPs are still in RTS.
fn quiet_and_connected(world: &nic_testbed::World, a: &Node, b: &Node, qa: &Qp, qb: &Qp) {
    assert!(drain(world, a, &a.cq, 50).is_empty());
    assert_eq!(
        (a.qp_state(qa), b.qp_state(qb)),
        (QpState::Rts, QpState::Rts)
    );
}

fn untouched_outside(node: &Node, from: usize, to: usize, byte: u8, what: &str) {
    let all = node.read(0, MEM);
    if let Some(i) = (0..MEM).find(|&i| (i < from || i >= to) && all[i] != byte) {
        panic!("{what}: byte {i:#x} outside {from:#x}..{to:#x} changed");
    }
}

/// (a) A 1 MiB WRITE (three local SGEs) and a 200 KiB WRITE with immediate over a fault-free
/// fabric arrive byte-exact, the receive completion carries the immediate and the length, and
/// the fabric carried segments (the offload was used) with no retransmission.
#[test]
fn large_writes_cross_as_segments() {
    let (world, a, b) = pair(61, MEM);
    let (mut qa, mut qb) = connected(&a, &b, &Conn::default(), &Conn::default());
    let data = pattern(0x5e6, MIB);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    let [x, y, z] = split3(MIB);
    let sg = [a.sge(0, x), a.sge(x, y), a.sge(x + y, z)];
    let rx0 = b.stats().rx_frames;
    a.post_send(&mut qa, &[write_wr(1, &b, 4096, &sg, None)]);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_bytes(&b.read(4096, MIB), &data, "1 MiB WRITE");
    untouched_outside(&b, 4096, 4096 + MIB, 0x5a, "1 MiB WRITE");
    let f = fabric_balanced(&world);
    assert!(f.segments > 0, "no segment was carried: {f:?}");
    // 1024 packets of 1 KiB, in runs of more than one packet.
    assert!(f.segments < 1024, "{f:?}");
    assert_eq!(b.stats().rx_frames - rx0, 1024, "packets taken in");
    assert_eq!(f.dropped(), 0);
    let seg0 = f.segments;

    // WRITE with immediate: 200 KiB, from an odd local offset to an odd remote one.
    let imm_data = pattern(0x1a, 200 * 1024);
    let src = MIB + 4097;
    a.write(src, &imm_data);
    b.post_recv(&mut qb, 77, &[b.sge(3 * MIB, 64)]);
    let sg = [a.sge(src, imm_data.len())];
    a.post_send(
        &mut qa,
        &[write_wr(2, &b, 2 * MIB + 3, &sg, Some(0xa1b2_c3d4))],
    );
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(2, WcStatus::Success)]);
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (77, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 200 * 1024)
    );
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM), "{:?}", r[0]);
    assert_eq!(u32::from_be(r[0].imm_data), 0xa1b2_c3d4);
    assert_eq!(r[0].qp_num, qb.qpn());
    assert_bytes(
        &b.read(2 * MIB + 3, imm_data.len()),
        &imm_data,
        "WRITE with imm",
    );
    // The receive buffer is not written by a WRITE with immediate.
    assert!(b.read(3 * MIB, 64).iter().all(|&x| x == 0x5a));
    assert_bytes(&b.read(4096, MIB), &data, "1 MiB WRITE, after");
    let f = fabric_balanced(&world);
    assert!(f.segments > seg0, "{f:?}");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (
            sa.retransmits,
            sa.timeouts,
            sb.rx_duplicates,
            sb.seq_naks_sent,
            sb.rx_dropped
        ),
        (0, 0, 0, 0, 0),
        "{sa:?} {sb:?}"
    );
    let late = drain(&world, &b, &b.cq, 20);
    assert!(late.is_empty(), "{late:?}");
    finish(a, b, vec![qa], vec![qb]);
}

/// (b) A 64 KiB SEND goes as segments too; the responder takes them in packet by packet
/// (the fallback) into a scattered receive, exactly.
#[test]
fn multi_packet_send_falls_back_to_packets() {
    let (world, a, b) = pair(62, MEM);
    let (mut qa, mut qb) = connected(&a, &b, &Conn::default(), &Conn::default());
    const LEN: usize = 64 * 1024;
    let data = pattern(0x5e4d, LEN);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    let lay = place(MIB, &split3(LEN + 1000), 512);
    b.post_recv(&mut qb, 9, &b.sges(&lay));
    let seg0 = world.fabric().stats().segments;
    let rx0 = b.stats().rx_frames;
    let sg = [a.sge(0, LEN)];
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            ..wr(3, WrOpcode::Send, &sg)
        }],
    );
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode),
        (3, WcStatus::Success, WcOpcode::Send)
    );
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, LEN as u32)
    );
    assert!(!r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_bytes(&b.read_gathered(&lay, LEN), &data, "SEND");
    // Nothing beyond the message's bytes in the receive layout, nor in the gaps.
    let mut left = LEN;
    for &(o, l) in &lay {
        let used = l.min(left);
        left -= used;
        assert!(
            b.read(o + used, l - used + 512).iter().all(|&x| x == 0x5a),
            "past piece at {o:#x}"
        );
    }
    let f = fabric_balanced(&world);
    assert!(f.segments > seg0, "the SEND went as frames: {f:?}");
    assert_eq!(b.stats().rx_frames - rx0, 64);
    assert_eq!((b.stats().rx_dropped, b.stats().rx_duplicates), (0, 0));
    finish(a, b, vec![qa], vec![qb]);
}

/// (c) A multi-packet WRITE that runs past the end of the remote MR: the requester completes
/// it with REM_ACCESS_ERR (and flushes the next one), the responder's QP goes to ERR with an
/// access-error event, and not a byte of the responder's memory changes.
#[test]
fn write_past_the_remote_mr_is_a_remote_access_error() {
    let (world, a, b) = pair(63, MEM);
    let (mut qa, qb) = connected(&a, &b, &Conn::default(), &Conn::default());
    const LEN: usize = 64 * 1024;
    a.write(0, &pattern(3, LEN));
    b.fill(0, MEM, 0x5a);
    let seg0 = world.fabric().stats().segments;
    let sg = [a.sge(0, LEN)];
    // Starts inside the MR, ends 32 KiB past it.
    a.post_send(
        &mut qa,
        &[
            write_wr(4, &b, MEM - LEN / 2, &sg, None),
            write_wr(5, &b, 0, &sg, None),
        ],
    );
    let s = poll_n(&world, &a, &a.cq, 2);
    assert_eq!(
        summary(&s),
        [(4, WcStatus::RemAccessErr), (5, WcStatus::WrFlushErr)]
    );
    assert_eq!(a.qp_state(&qa), QpState::Err);
    assert_eq!(b.qp_state(&qb), QpState::Err);
    assert_eq!(
        async_events(&b),
        [AsyncEvent {
            event_type: AsyncEventType::QpAccessErr,
            element: AsyncElement::Qp(qb.qpn())
        }]
    );
    assert!(async_events(&a).is_empty());
    untouched_outside(&b, 0, 0, 0x5a, "WRITE past the MR");
    assert!(
        world.fabric().stats().segments > seg0,
        "the WRITE did not go as a segment"
    );
    fabric_balanced(&world);
    finish(a, b, vec![qa], vec![qb]);
}

/// (d) A 32 KiB WRITE with immediate to a QP with no receive posted: RNR NAKs; with
/// `rnr_retry` 7 it completes once a receive is posted (data and immediate right), with
/// `rnr_retry` 0 the requester gives up with RNR_RETRY_EXC_ERR.
#[test]
fn write_with_imm_without_a_receive_is_rnr_naked() {
    let (world, a, b) = pair(64, MEM);
    const LEN: usize = 32 * 1024;
    for rnr_retry in [7u8, 0] {
        let what = format!("rnr_retry {rnr_retry}");
        let (mut qa, mut qb) = connected(
            &a,
            &b,
            &Conn {
                rnr_retry,
                ..Conn::default()
            },
            &Conn {
                min_rnr_timer: 14,
                ..Conn::default()
            },
        );
        let data = pattern(u64::from(rnr_retry) + 40, LEN);
        a.write(0, &data);
        b.fill(0, MEM, 0x5a);
        let (naks0, seg0) = (b.stats().rnr_naks_sent, world.fabric().stats().segments);
        let sg = [a.sge(0, LEN)];
        a.post_send(&mut qa, &[write_wr(6, &b, 8192, &sg, Some(0x0bad_cafe))]);
        if rnr_retry == 0 {
            let s = poll_n(&world, &a, &a.cq, 1);
            assert_eq!(summary(&s), [(6, WcStatus::RnrRetryExcErr)], "{what}");
            assert_eq!(b.stats().rnr_naks_sent - naks0, 1, "{what}");
            assert_eq!(a.qp_state(&qa), QpState::Err, "{what}");
            // The responder is fine and completes nothing.
            assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
            b.post_recv(&mut qb, 8, &[b.sge(0, 16)]);
            let late = drain(&world, &b, &b.cq, 20);
            assert!(late.is_empty(), "{what}: {late:?}");
        } else {
            assert!(
                run_until(&world, 100_000, || b.stats().rnr_naks_sent - naks0 >= 2),
                "{what}: no RNR NAK"
            );
            assert!(drain(&world, &a, &a.cq, 0).is_empty(), "{what}");
            assert!(drain(&world, &b, &b.cq, 0).is_empty(), "{what}");
            let naks = b.stats().rnr_naks_sent;
            b.post_recv(&mut qb, 8, &[b.sge(0, 16)]);
            let s = poll_n(&world, &a, &a.cq, 1);
            assert_eq!(summary(&s), [(6, WcStatus::Success)], "{what}");
            let r = poll_n(&world, &b, &b.cq, 1);
            assert_eq!(
                (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
                (8, WcStatus::Success, WcOpcode::RecvRdmaWithImm, LEN as u32),
                "{what}"
            );
            assert_eq!(u32::from_be(r[0].imm_data), 0x0bad_cafe, "{what}");
            assert_bytes(&b.read(8192, LEN), &data, &what);
            untouched_outside(&b, 8192, 8192 + LEN, 0x5a, &what);
            assert!(
                b.stats().rnr_naks_sent - naks <= 1,
                "{what}: RNR NAKs after the receive was posted"
            );
            assert_eq!(a.qp_state(&qa), QpState::Rts, "{what}");
            assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
            let late = drain(&world, &b, &b.cq, 20);
            assert!(late.is_empty(), "{what}: {late:?}");
        }
        assert!(world.fabric().stats().segments > seg0, "{what}");
        fabric_balanced(&world);
        Provider::destroy_qp(&a.dev, qa).unwrap();
        Provider::destroy_qp(&b.dev, qb).unwrap();
    }
    finish(a, b, vec![], vec![]);
}

/// (e) The ACK path is cut while a 256 KiB WRITE (more than the 128-PSN window) is under
/// way: the requester times out and resends; the responder recognises the resent segments as
/// duplicates (re-ACKs, does not write twice); once the path heals the WRITE completes once
/// with the right data.
#[test]
fn lost_acks_make_duplicate_segments() {
    let (world, a, b) = pair(65, MEM);
    let conn = Conn {
        timeout: 10, // 4.096 µs × 2^10 ≈ 4.2 ms
        retry_cnt: 7,
        ..Conn::default()
    };
    let (mut qa, qb) = connected(&a, &b, &conn, &conn);
    const LEN: usize = 256 * 1024;
    let data = pattern(0xacc, LEN);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    world.fabric().cut_path(IP_B, IP_A);
    let (dups0, timeouts0) = (b.stats().rx_duplicates, a.stats().timeouts);
    let sg = [a.sge(0, LEN)];
    a.post_send(&mut qa, &[write_wr(7, &b, MIB, &sg, None)]);
    assert!(
        run_until(&world, 200_000, || b.stats().rx_duplicates > dups0),
        "no duplicate at the responder"
    );
    let f = fabric_balanced(&world);
    assert!(f.dropped_cut > 0 && f.segments > 0, "{f:?}");
    assert!(a.stats().timeouts > timeouts0);
    assert!(
        drain(&world, &a, &a.cq, 0).is_empty(),
        "completed without an ACK"
    );
    // What arrived so far is in place (the window's worth), the rest not yet.
    assert_bytes(
        &b.read(MIB, 128 * 1024),
        &data[..128 * 1024],
        "first window",
    );
    world.fabric().heal_path(IP_B, IP_A);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(7, WcStatus::Success)]);
    assert_bytes(&b.read(MIB, LEN), &data, "256 KiB WRITE");
    untouched_outside(&b, MIB, MIB + LEN, 0x5a, "256 KiB WRITE");
    let late = drain(&world, &a, &a.cq, 50);
    assert!(late.is_empty(), "completed twice: {late:?}");
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sa.retransmits > 0, "{sa:?}");
    // Whole duplicate segments: a multiple of their packets, at least one full run.
    assert!(sb.rx_duplicates - dups0 >= 2, "{sb:?}");
    assert_eq!(sb.rx_dropped, 0, "{sb:?}");
    assert_eq!(a.qp_state(&qa), QpState::Rts);
    assert_eq!(b.qp_state(&qb), QpState::Rts);
    let f = fabric_balanced(&world);
    assert_eq!(world.fabric().in_flight(), 0, "{f:?}");
    finish(a, b, vec![qa], vec![qb]);
}

/// How the sender gives up on a QP with a segment still in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
enum GiveUp {
    /// Moved to ERR: its WQEs complete flushed.
    Err,
    /// Moved straight from RTS to RESET.
    Reset,
    /// Destroyed.
    Destroy,
}

/// (f) A segment still in flight when its sender's QP is moved to ERR, to RESET or destroyed
/// is not placed, even though the application then reuses the source buffer: the
/// responder's memory does not change and it counts the segment's packets as dropped; a
/// QP moved to ERR completes the WRITE flushed.
#[test]
fn a_segment_whose_sender_gave_up_is_not_placed() {
    let (world, a, b) = pair(66, MEM);
    const LEN: usize = 64 * 1024;
    for how in [GiveUp::Err, GiveUp::Reset, GiveUp::Destroy] {
        let what = format!("{how:?}");
        let (mut qa, qb) = connected(&a, &b, &Conn::default(), &Conn::default());
        a.write(0, &pattern(0xf1, LEN));
        b.fill(0, MEM, 0x5a);
        let f0 = fabric_balanced(&world);
        let sb0 = b.stats();
        let sg = [a.sge(0, LEN)];
        a.post_send(&mut qa, &[write_wr(8, &b, 0x2000, &sg, None)]);
        // Only the requester's device runs: it sends the message as one 64-packet
        // segment, which then waits in the fabric for the responder's device.
        for _ in 0..10 {
            if world.fabric().stats().segments > f0.segments {
                break;
            }
            a.tb.device().poll();
        }
        let f1 = fabric_balanced(&world);
        assert_eq!(f1.segments, f0.segments + 1, "{what}: {f1:?}");
        assert_eq!(world.fabric().in_flight(), 64, "{what}");
        assert_eq!(
            b.stats().rx_frames,
            sb0.rx_frames,
            "{what}: the responder ran"
        );
        // The requester gives up on the QP. Every step of the world polls the requester's
        // device (which withdraws the data) before the responder's (which then takes the
        // segment in).
        let qa = match how {
            GiveUp::Destroy => {
                Provider::destroy_qp(&a.dev, qa).unwrap();
                None
            }
            GiveUp::Err | GiveUp::Reset => {
                let state = if how == GiveUp::Err {
                    QpState::Err
                } else {
                    QpState::Reset
                };
                Provider::modify_qp(
                    &a.dev,
                    &mut qa,
                    &QpAttr {
                        qp_state: state,
                        ..QpAttr::default()
                    },
                    QpAttrMask::STATE,
                )
                .unwrap();
                Some(qa)
            }
        };
        // The application reuses the buffer at once.
        a.fill(0, LEN, 0xee);
        if how == GiveUp::Err {
            let s = poll_n(&world, &a, &a.cq, 1);
            assert_eq!(summary(&s), [(8, WcStatus::WrFlushErr)], "{what}");
        }
        assert!(
            run_until(&world, 100, || world.fabric().in_flight() == 0),
            "{what}"
        );
        let sb = b.stats();
        assert_eq!(sb.rx_frames - sb0.rx_frames, 64, "{what}: {sb:?}");
        assert_eq!(sb.rx_dropped - sb0.rx_dropped, 64, "{what}: {sb:?}");
        untouched_outside(&b, 0, 0, 0x5a, &what);
        // No ACK or NAK went back, no completion, and the responder's QP is unharmed.
        assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
        assert!(drain(&world, &b, &b.cq, 20).is_empty(), "{what}");
        assert!(drain(&world, &a, &a.cq, 20).is_empty(), "{what}");
        assert!(async_events(&b).is_empty(), "{what}");
        let f = fabric_balanced(&world);
        assert_eq!(f.dropped(), 0, "{what}: {f:?}");
        assert_eq!(
            f.sent, f1.sent,
            "{what}: something was sent after the segment"
        );
        if let Some(qa) = qa {
            Provider::destroy_qp(&a.dev, qa).unwrap();
        }
        Provider::destroy_qp(&b.dev, qb).unwrap();
    }
    finish(a, b, vec![], vec![]);
}

/// (g) The 1 MiB WRITE on a fabric that loses 1% of the frames: no segment is carried (every
/// run is cut into frames, some lost and resent), and every byte arrives.
#[test]
fn lossy_fabric_carries_frames_only() {
    let (world, a, b) = pair(67, MEM);
    world.fabric().set_faults(FaultConfig {
        loss: 0.01,
        ..FaultConfig::NONE
    });
    let conn = Conn {
        timeout: 8,
        ..Conn::default()
    };
    let (mut qa, qb) = connected(&a, &b, &conn, &conn);
    let data = pattern(0x1055, MIB);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    let [x, y, z] = split3(MIB);
    let sg = [a.sge(0, x), a.sge(x, y), a.sge(x + y, z)];
    a.post_send(&mut qa, &[write_wr(9, &b, 4096, &sg, None)]);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(9, WcStatus::Success)]);
    assert_bytes(&b.read(4096, MIB), &data, "1 MiB WRITE, 1% loss");
    untouched_outside(&b, 4096, 4096 + MIB, 0x5a, "1 MiB WRITE, 1% loss");
    let f = fabric_balanced(&world);
    assert_eq!(f.segments, 0, "{f:?}");
    assert!(f.dropped_loss > 0 && f.sent >= 1024, "{f:?}");
    assert!(a.stats().retransmits > 0, "{:?}", a.stats());
    world.fabric().set_faults(FaultConfig::NONE);
    let late = drain(&world, &a, &a.cq, 50);
    assert!(late.is_empty(), "{late:?}");
    finish(a, b, vec![qa], vec![qb]);
}

/// What a scenario of [`run_case`] left behind, on both sides.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// `(wr_id, status)` of the requester's completions.
    sent: Vec<(u64, WcStatus)>,
    /// `(wr_id, status, opcode, byte_len, imm)` of the responder's completions.
    received: Vec<(u64, WcStatus, WcOpcode, u32, u32)>,
    states: (QpState, QpState),
    events: (Vec<AsyncEvent>, Vec<AsyncEvent>),
    /// FNV of the requester's and the responder's whole buffers.
    memory: (u64, u64),
    /// `rnr_naks_sent, seq_naks_sent, rx_duplicates, rx_no_wqe, rx_malformed` of the
    /// responder, `retransmits, timeouts` of the requester.
    counters: [u64; 7],
}

/// Runs error case `case` between two fresh NICs, over a fabric that carries segments whole
/// (`frames` false) or one whose per-frame fault knob is on but never fires (`frames` true:
/// a loss probability of 1e-300 makes every run go as frames, none of which is lost).
fn run_case(case: u32, frames: bool) -> (Outcome, FabricStats) {
    const LEN: usize = 64 * 1024;
    let (world, a, b) = pair(70 + u64::from(case), MEM);
    if frames {
        world.fabric().set_faults(FaultConfig {
            loss: 1e-300,
            ..FaultConfig::NONE
        });
    }
    let responder = Conn {
        min_rnr_timer: 14,
        // Cases 7 and 8: the responder's path MTU is not the requester's.
        mtu: match case {
            7 => verbs::Mtu::Mtu4096,
            8 => verbs::Mtu::Mtu512,
            _ => Conn::default().mtu,
        },
        access: if case == 4 {
            verbs::AccessFlags::REMOTE_READ
        } else {
            Conn::default().access
        },
        ..Conn::default()
    };
    let requester = Conn {
        rnr_retry: 0,
        ..Conn::default()
    };
    let (mut qa, mut qb) = connected(&a, &b, &requester, &responder);
    a.write(0, &pattern(0xca5e, 2 * LEN));
    b.fill(0, MEM, 0x5a);
    let sg = [a.sge(0, LEN)];
    let half = [a.sge(LEN, LEN / 2)];
    let bad_rkey = SendWr {
        remote: RemoteOp::Rdma {
            remote_addr: b.addr(0),
            rkey: MemoryRegion::rkey(&b.mr) ^ 0x100,
        },
        ..write_wr(1, &b, 0, &sg, None)
    };
    let send = |wr_id| SendWr {
        flags: SendFlags::SIGNALED,
        ..wr(wr_id, WrOpcode::Send, &sg)
    };
    // RDMA READs of 256 KiB into three SGEs at 1 MiB of the requester's buffer.
    const RLEN: usize = 256 * 1024;
    let [x, y, z] = split3(RLEN);
    let rsg = [a.sge(MIB, x), a.sge(MIB + x, y), a.sge(MIB + x + y, z)];
    let read = |remote: usize| SendWr {
        opcode: WrOpcode::RdmaRead,
        ..write_wr(1, &b, remote, &rsg, None)
    };
    let first = match case {
        // Past the MR's end.
        0 => write_wr(1, &b, MEM - LEN / 2, &sg, None),
        1 => bad_rkey,
        // No receive for the immediate; no RNR retry.
        2 => write_wr(1, &b, 4096, &half, Some(0x1234)),
        // A SEND larger than the receive buffer.
        3 => {
            b.post_recv(&mut qb, 31, &[b.sge(MIB, LEN / 4)]);
            send(1)
        }
        // The responder QP grants no remote write.
        4 => write_wr(1, &b, 4096, &sg, None),
        // A SEND with no receive; no RNR retry.
        5 => send(1),
        // A READ that goes right (responses as one run).
        9 => {
            b.write(0x4000, &pattern(0x4ead, RLEN));
            read(0x4000)
        }
        // A READ past the responder's MR.
        10 => read(MEM - RLEN / 2),
        // Everything right: a WRITE, then a WRITE with immediate into a posted receive
        // (with the MTUs of cases 7 and 8).
        _ => {
            b.post_recv(&mut qb, 32, &[b.sge(MIB, 16)]);
            write_wr(1, &b, 4096, &sg, None)
        }
    };
    let second = if (6..=8).contains(&case) {
        write_wr(2, &b, 2 * MIB + 1, &half, Some(0x5678))
    } else {
        write_wr(2, &b, 3 * MIB, &half, None)
    };
    a.post_send(&mut qa, &[first, second]);
    let sent = summary(&poll_n(&world, &a, &a.cq, 2));
    let received = drain(&world, &b, &b.cq, 100)
        .iter()
        .map(|w| {
            (
                w.wr_id,
                w.status,
                w.opcode,
                w.byte_len,
                u32::from_be(w.imm_data),
            )
        })
        .collect();
    let (sa, sb) = (a.stats(), b.stats());
    let out = Outcome {
        sent,
        received,
        states: (a.qp_state(&qa), b.qp_state(&qb)),
        events: (async_events(&a), async_events(&b)),
        memory: (fnv(FNV0, &a.read(0, MEM)), fnv(FNV0, &b.read(0, MEM))),
        counters: [
            sb.rnr_naks_sent,
            sb.seq_naks_sent,
            sb.rx_duplicates,
            sb.rx_no_wqe,
            sb.rx_malformed,
            sa.retransmits,
            sa.timeouts,
        ],
    };
    if case == 9 {
        assert_bytes(&a.read(MIB, RLEN), &pattern(0x4ead, RLEN), "READ");
    }
    let f = fabric_balanced(&world);
    finish(a, b, vec![qa], vec![qb]);
    (out, f)
}

/// The per-packet fallback gives exactly what frames give: for WRITEs past the MR, with a
/// bad rkey, without remote-write access, WRITE with immediate and SEND without a receive
/// (RNR, no retry), a SEND larger than its receive, a responder whose path MTU is larger or
/// smaller than the requester's, a READ past the MR, and runs that go right (WRITE, WRITE
/// with immediate, a 256 KiB READ), the completions on both sides, QP states, async events,
/// both sides' memory and the error counters are the same whether the runs crossed as
/// segments or as frames.
#[test]
fn segments_and_frames_give_the_same_outcome() {
    for case in 0..11 {
        let (seg, fs) = run_case(case, false);
        let (frm, ff) = run_case(case, true);
        assert!(fs.segments > 0, "case {case}: no segment: {fs:?}");
        assert_eq!(ff.segments, 0, "case {case}: {ff:?}");
        assert_eq!(seg, frm, "case {case}: segments (left) vs frames (right)");
        // And the cases are what they say (the comparison alone would pass if both broke).
        let want = match case {
            0 | 1 | 4 | 10 => WcStatus::RemAccessErr,
            2 | 5 => WcStatus::RnrRetryExcErr,
            // The SEND does not fit its receive; a FIRST / MIDDLE packet that is not the
            // responder's path MTU.
            3 | 7 | 8 => WcStatus::RemInvReqErr,
            _ => WcStatus::Success,
        };
        assert_eq!(seg.sent[0], (1, want), "case {case}: {seg:?}");
    }
}

/// Runs across the PSN wrap (2^24 → 0): a 256 KiB WRITE starting 64 PSNs before it, with its
/// ACKs lost until the resent segments are seen as duplicates, completes once with the right
/// data; the WRITE with immediate after it, wholly past the wrap, too.
#[test]
fn runs_across_the_psn_wrap() {
    let (world, a, b) = pair(68, MEM);
    let conn = Conn {
        timeout: 10,
        sq_psn: 0xff_ffc0,
        rq_psn: 0xff_ffc0,
        ..Conn::default()
    };
    let (mut qa, mut qb) = connected(&a, &b, &conn, &conn);
    const LEN: usize = 256 * 1024;
    let data = pattern(0x3a9, LEN);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    world.fabric().cut_path(IP_B, IP_A);
    let dups0 = b.stats().rx_duplicates;
    let sg = [a.sge(0, LEN)];
    a.post_send(&mut qa, &[write_wr(1, &b, 0x1000, &sg, None)]);
    assert!(
        run_until(&world, 200_000, || b.stats().rx_duplicates > dups0),
        "no duplicate at the responder"
    );
    world.fabric().heal_path(IP_B, IP_A);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(1, WcStatus::Success)]);
    assert_bytes(&b.read(0x1000, LEN), &data, "WRITE across the wrap");
    let imm = pattern(0x3aa, 100 * 1024 + 3);
    a.write(LEN, &imm);
    b.post_recv(&mut qb, 2, &[b.sge(3 * MIB, 8)]);
    let sg = [a.sge(LEN, imm.len())];
    a.post_send(&mut qa, &[write_wr(3, &b, 2 * MIB, &sg, Some(0x77))]);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(3, WcStatus::Success)]);
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (
            2,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            imm.len() as u32
        )
    );
    assert_eq!(u32::from_be(r[0].imm_data), 0x77);
    assert_bytes(
        &b.read(2 * MIB, imm.len()),
        &imm,
        "WRITE with imm after the wrap",
    );
    assert_bytes(&b.read(0x1000, LEN), &data, "WRITE across the wrap, after");
    let all = b.read(0, MEM);
    let outside = |i: usize| {
        !(0x1000..0x1000 + LEN).contains(&i) && !(2 * MIB..2 * MIB + imm.len()).contains(&i)
    };
    assert!(
        (0..MEM).filter(|&i| outside(i)).all(|i| all[i] == 0x5a),
        "a byte outside the two WRITEs changed"
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.retransmits > 0 && sb.rx_duplicates > dups0,
        "{sa:?} {sb:?}"
    );
    assert_eq!((sb.seq_naks_sent, sb.rx_dropped), (0, 0), "{sb:?}");
    assert!(world.fabric().stats().segments > 0);
    fabric_balanced(&world);
    quiet_and_connected(&world, &a, &b, &qa, &qb);
    finish(a, b, vec![qa], vec![qb]);
}

/// A 512 KiB WRITE begun as frames on a lossy path (so the responder holds a message in
/// progress) and finished after the path is clean again: the resent runs, which start in
/// the middle of the message, go as segments and continue the message in progress; every
/// byte arrives once.
#[test]
fn a_message_begun_as_frames_ends_as_segments() {
    let (world, a, b) = pair(69, MEM);
    let conn = Conn {
        timeout: 8,
        ..Conn::default()
    };
    let (mut qa, qb) = connected(&a, &b, &conn, &conn);
    const LEN: usize = 512 * 1024;
    let data = pattern(0x111, LEN);
    a.write(0, &data);
    b.fill(0, MEM, 0x5a);
    world.fabric().set_path_faults(
        IP_A,
        IP_B,
        Some(FaultConfig {
            loss: 0.05,
            ..FaultConfig::NONE
        }),
    );
    let rx0 = b.stats().rx_frames;
    let sg = [a.sge(0, LEN)];
    a.post_send(&mut qa, &[write_wr(1, &b, 0x3000, &sg, None)]);
    assert!(run_until(&world, 100_000, || b.stats().rx_frames - rx0 >= 100));
    let f = fabric_balanced(&world);
    assert_eq!(f.segments, 0, "{f:?}");
    assert!(f.dropped_loss > 0, "{f:?}");
    assert!(drain(&world, &a, &a.cq, 0).is_empty());
    world.fabric().set_path_faults(IP_A, IP_B, None);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(summary(&s), [(1, WcStatus::Success)]);
    assert_bytes(&b.read(0x3000, LEN), &data, "WRITE begun as frames");
    untouched_outside(&b, 0x3000, 0x3000 + LEN, 0x5a, "WRITE begun as frames");
    let f = fabric_balanced(&world);
    assert!(f.segments > 0, "the resent runs went as frames: {f:?}");
    assert!(a.stats().retransmits > 0);
    quiet_and_connected(&world, &a, &b, &qa, &qb);
    finish(a, b, vec![qa], vec![qb]);
}

/// A READ posted right behind a 1 MiB WRITE of the same remote range (no wait between them)
/// returns what the WRITE wrote: the responder took the WRITE's segments in before the READ.
#[test]
fn a_read_behind_a_write_sees_its_data() {
    let (world, a, b) = pair(60, MEM);
    let (mut qa, qb) = connected(&a, &b, &Conn::default(), &Conn::default());
    let data = pattern(0x2ead, MIB);
    a.write(0, &data);
    a.fill(MIB, MIB, 0);
    b.fill(0, MEM, 0x5a);
    let sg = [a.sge(0, MIB)];
    let rsg = [a.sge(MIB, MIB)];
    a.post_send(
        &mut qa,
        &[
            write_wr(1, &b, 0x5000, &sg, None),
            SendWr {
                opcode: WrOpcode::RdmaRead,
                ..write_wr(2, &b, 0x5000, &rsg, None)
            },
        ],
    );
    let s = poll_n(&world, &a, &a.cq, 2);
    assert_eq!(
        summary(&s),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_bytes(&a.read(MIB, MIB), &data, "READ after WRITE");
    assert_bytes(&b.read(0x5000, MIB), &data, "WRITE");
    assert!(world.fabric().stats().segments > 0);
    fabric_balanced(&world);
    finish(a, b, vec![qa], vec![qb]);
}
