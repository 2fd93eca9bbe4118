//! The RC transport between two NICs when things go wrong: receiver not ready (RNR NAKs,
//! retries, exhaustion), a lossy fabric that also duplicates and reorders (every message
//! arrives exactly once, in order), duplicated atomics (applied once), and a cut link
//! (retries exhausted).

mod common;

use common::*;
use mlx5::{Ah, Qp};
use nic_emulator::roce_wire::fabric::FaultConfig;
use verbs::{
    Mtu, Provider, QpCap, QpState, QpType, RemoteOp, SendFlags, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

const MEM: usize = 2 << 20;

fn connected(a: &Node, b: &Node, cap: QpCap, ca: &Conn, cb: &Conn) -> (Qp, Qp) {
    let (mut qa, _) = a.qp(QpType::Rc, cap, false);
    let (mut qb, _) = b.qp(QpType::Rc, cap, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, b, nb, ca);
    b.connect(&mut qb, a, na, cb);
    (qa, qb)
}

/// A SEND (or WRITE with immediate) to a QP with no receive posted is answered with RNR NAKs;
/// with `rnr_retry` < 7 the requester retries that often, then completes it with
/// RNR_RETRY_EXC_ERR, flushes the rest and goes to ERR. The responder is not harmed.
#[test]
fn rnr_retries_then_fails() {
    let (world, a, b) = pair(31, MEM);
    for (rnr_retry, opcode) in [
        (0u8, WrOpcode::Send),
        (3, WrOpcode::Send),
        (6, WrOpcode::RdmaWriteWithImm),
    ] {
        let what = format!("{opcode:?} with rnr_retry {rnr_retry}");
        // min_rnr_timer 14 (the responder's): 1.28 ms of virtual time between tries.
        let (mut qa, mut qb) = connected(
            &a,
            &b,
            CAP,
            &Conn {
                rnr_retry,
                ..Conn::default()
            },
            &Conn {
                min_rnr_timer: 14,
                ..Conn::default()
            },
        );
        a.write(0, &pattern(5, 200));
        b.fill(4096, 8192, 0x77);
        let naks0 = b.stats().rnr_naks_sent;
        let t0 = world.now_ns();
        let sg = [a.sge(0, 200)];
        let remote = if opcode == WrOpcode::Send {
            RemoteOp::None
        } else {
            RemoteOp::Rdma {
                remote_addr: b.addr(4096),
                rkey: verbs::MemoryRegion::rkey(&b.mr),
            }
        };
        a.post_send(
            &mut qa,
            &[
                SendWr {
                    flags: SendFlags::SIGNALED,
                    remote,
                    ..wr(1, opcode, &sg)
                },
                SendWr {
                    flags: SendFlags::SIGNALED,
                    ..wr(2, WrOpcode::Send, &sg)
                },
            ],
        );
        let s = poll_n(&world, &a, &a.cq, 2);
        assert_eq!(
            summary(&s),
            [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        assert_eq!(
            b.stats().rnr_naks_sent - naks0,
            u64::from(rnr_retry) + 1,
            "{what}: one RNR NAK for the first try and one per retry"
        );
        // Each retry waited the responder's RNR timer (1.28 ms).
        let waited = world.now_ns() - t0;
        assert!(
            waited >= u64::from(rnr_retry) * 1_280_000,
            "{what}: only {waited} ns"
        );
        assert_eq!(a.qp_state(&qa), QpState::Err, "{what}");
        // The responder is fine: a receive posted now stays posted, and nothing was written.
        assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
        b.post_recv(&mut qb, 9, &[b.sge(4096, 4096)]);
        let late = drain(&world, &b, &b.cq, 20);
        assert!(late.is_empty(), "{what}: {late:?}");
        assert!(b.read(4096, 8192).iter().all(|&x| x == 0x77), "{what}");
        Provider::destroy_qp(&a.dev, qa).unwrap();
        Provider::destroy_qp(&b.dev, qb).unwrap();
    }
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![]);
    b.teardown(vec![]);
}

/// The receive is posted after the first RNR NAK (seen in the responder's port counters):
/// the retry finds it, the SEND completes, the data arrives once. With `rnr_retry` 7 the
/// requester retries for as long as it takes.
#[test]
fn rnr_recovers_when_the_receive_is_posted_in_time() {
    let (world, a, b) = pair(32, MEM);
    for (rnr_retry, naks_before_post) in [(1u8, 1u64), (7, 50)] {
        let what = format!("rnr_retry {rnr_retry}, receive after {naks_before_post} NAKs");
        let (mut qa, mut qb) = connected(
            &a,
            &b,
            CAP,
            &Conn {
                rnr_retry,
                ..Conn::default()
            },
            &Conn {
                min_rnr_timer: 14,
                ..Conn::default()
            },
        );
        let data = pattern(rnr_retry.into(), 3000);
        a.write(0, &data);
        b.fill(8192, 4096, 0x77);
        let naks0 = b.stats().rnr_naks_sent;
        let sg = [a.sge(0, 3000)];
        a.post_send(
            &mut qa,
            &[SendWr {
                flags: SendFlags::SIGNALED,
                imm_data: 0x0102_0304u32.to_be(),
                ..wr(1, WrOpcode::SendWithImm, &sg)
            }],
        );
        assert!(
            run_until(&world, 100_000, || b.stats().rnr_naks_sent - naks0
                >= naks_before_post),
            "{what}: no RNR NAK"
        );
        // Not completed yet, on either side.
        assert!(drain(&world, &a, &a.cq, 0).is_empty(), "{what}");
        assert!(drain(&world, &b, &b.cq, 0).is_empty(), "{what}");
        b.post_recv(&mut qb, 7, &[b.sge(8192, 4096)]);
        let s = poll_n(&world, &a, &a.cq, 1);
        assert_eq!(summary(&s), [(1, WcStatus::Success)], "{what}");
        let r = poll_n(&world, &b, &b.cq, 1);
        assert_eq!(
            (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
            (7, WcStatus::Success, WcOpcode::Recv, 3000),
            "{what}"
        );
        assert_eq!(u32::from_be(r[0].imm_data), 0x0102_0304);
        assert_bytes(&b.read(8192, 3000), &data, &what);
        assert!(b.read(8192 + 3000, 1096).iter().all(|&x| x == 0x77));
        assert_eq!(
            b.stats().rnr_naks_sent - naks0,
            naks_before_post,
            "{what}: no RNR NAK after the receive was posted"
        );
        // Both QPs carry on.
        assert_eq!(a.qp_state(&qa), QpState::Rts);
        assert_eq!(b.qp_state(&qb), QpState::Rts);
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
    a.teardown(vec![]);
    b.teardown(vec![]);
}

/// Messages sent on the lossy fabric.
const LOSSY_N: u64 = 100_000;
const SLOT: usize = 4096;

/// The length of message `seq`: 9 in 10 between 8 and 263 bytes, 1 in 10 between one and a
/// bit over three MTUs (1024).
fn msg_len(seq: u64) -> usize {
    let h = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    if h % 10 == 9 {
        1025 + (h / 10 % 2600) as usize
    } else {
        8 + (h / 10 % 256) as usize
    }
}

/// Message `seq`: its sequence number, then a pattern.
fn message(seq: u64) -> Vec<u8> {
    let len = msg_len(seq);
    let mut m = seq.to_le_bytes().to_vec();
    m.extend(pattern(seq, len - 8));
    m
}

/// 100,000 SENDs of mixed sizes over a fabric that loses 10% of the frames and duplicates
/// and reorders others: every message arrives exactly once, in order, intact (the sender's
/// and the receiver's hashes over the payloads agree), and every send completes.
#[test]
fn lossy_fabric_delivers_every_message_once_in_order() {
    let (world, a, b) = pair(33, MEM);
    world.fabric().set_faults(FaultConfig {
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.05,
        reorder_depth: 4,
        ..FaultConfig::NONE
    });
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 256,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    // A short ACK timeout (4.096 µs × 2^8 ≈ 1 ms of virtual time); the largest retry count;
    // PSNs that wrap around 2^24 early in the run.
    let conn = Conn {
        timeout: 8,
        sq_psn: 0xff_f000,
        rq_psn: 0xff_f000,
        ..Conn::default()
    };
    let (mut qa, mut qb) = connected(&a, &b, cap, &conn, &conn);
    let sq = u64::from(qa.cap().max_send_wr).min(32);
    let rq = u64::from(qb.cap().max_recv_wr);
    assert!((sq + rq) as usize * SLOT <= MEM);
    let sbuf = |seq: u64| (seq % sq) as usize * SLOT;
    let rbuf = |k: u64| (sq + k % rq) as usize * SLOT;
    for k in 0..rq {
        b.post_recv(&mut qb, k, &[b.sge(rbuf(k), SLOT)]);
    }
    let (mut posted, mut completed, mut received, mut reposted) = (0u64, 0u64, 0u64, rq);
    let (mut tx_hash, mut rx_hash) = (FNV0, FNV0);
    let mut wc = [WorkCompletion::default(); 64];
    let mut relaxes = 0u64;
    while received < LOSSY_N || completed < LOSSY_N {
        // Fill the SQ; a slot is reused only after the SEND that used it completed.
        let mut wrs_sg: Vec<(u64, [Sge; 1])> = Vec::new();
        while posted + (wrs_sg.len() as u64) < LOSSY_N
            && posted + (wrs_sg.len() as u64) - completed < sq
        {
            let seq = posted + wrs_sg.len() as u64;
            let m = message(seq);
            tx_hash = fnv(tx_hash, &m);
            a.write(sbuf(seq), &m);
            wrs_sg.push((seq, [a.sge(sbuf(seq), m.len())]));
        }
        if !wrs_sg.is_empty() {
            let wrs: Vec<SendWr<'_, Ah>> = wrs_sg
                .iter()
                .map(|(seq, sg)| SendWr {
                    flags: SendFlags::SIGNALED,
                    ..wr(*seq, WrOpcode::Send, sg)
                })
                .collect();
            match Provider::post_send(&a.dev, &mut qa, &wrs) {
                Ok(()) => posted += wrs.len() as u64,
                Err(e) => panic!("post_send at {posted}: {e:?}"),
            }
        }
        let k = Provider::poll_cq(&a.dev, &a.cq, &mut wc).unwrap();
        for w in &wc[..k] {
            assert_eq!(
                (w.wr_id, w.status, w.opcode),
                (completed, WcStatus::Success, WcOpcode::Send),
                "send completion"
            );
            completed += 1;
        }
        let k = Provider::poll_cq(&b.dev, &b.cq, &mut wc).unwrap();
        for w in &wc[..k] {
            let want = msg_len(received);
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len as usize),
                (received, WcStatus::Success, WcOpcode::Recv, want),
                "receive {received}"
            );
            let m = b.read(rbuf(received), want);
            let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
            assert_eq!(seq, received, "out of order or duplicated");
            rx_hash = fnv(rx_hash, &m);
            received += 1;
            b.post_recv(&mut qb, reposted, &[b.sge(rbuf(reposted), SLOT)]);
            reposted += 1;
        }
        world.relax();
        relaxes += 1;
        assert!(
            relaxes < 50_000_000,
            "stuck: {posted} posted, {completed} completed, {received} received"
        );
    }
    assert_eq!(tx_hash, rx_hash, "payload hashes differ");
    world.fabric().set_faults(FaultConfig::NONE);
    let late_a = drain(&world, &a, &a.cq, 100);
    let late_b = drain(&world, &b, &b.cq, 100);
    assert!(
        late_a.is_empty() && late_b.is_empty(),
        "{late_a:?} {late_b:?}"
    );
    // The faults did happen, and the transport worked for it.
    let f = world.fabric().stats();
    let (sa, sb) = (a.stats(), b.stats());
    eprintln!("fabric {f:?}\nA {sa:?}\nB {sb:?}\n{relaxes} relaxes");
    assert!(
        f.dropped_loss > 0 && f.duplicated > 0 && f.reordered > 0,
        "{f:?}"
    );
    assert!(sa.retransmits > 0 && sb.rx_duplicates > 0 && sb.seq_naks_sent > 0);
    assert_eq!(sb.rnr_naks_sent, 0);
    let psn = Provider::query_qp(&a.dev, &qa).unwrap().sq_psn;
    assert!(psn < 0xff_f000, "send PSN {psn:#x} did not wrap");
    assert_eq!(a.qp_state(&qa), QpState::Rts);
    assert_eq!(b.qp_state(&qb), QpState::Rts);
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![qa]);
    b.teardown(vec![qb]);
}

/// Every request frame is duplicated on the wire (and, in a second round, a fifth of the
/// responses are lost, so that the requester retransmits and the responder must answer from
/// its responder resources): N FETCH_ADDs of 1 leave N, each fetching the value before it.
#[test]
fn duplicated_atomics_apply_once() {
    const N: u64 = 200;
    let (world, a, b) = pair(34, MEM);
    let dup = FaultConfig {
        duplicate: 1.0,
        ..FaultConfig::NONE
    };
    world.fabric().set_path_faults(IP_A, IP_B, Some(dup));
    let conn = Conn {
        timeout: 8,
        ..Conn::default()
    };
    let (mut qa, qb) = connected(&a, &b, CAP, &conn, &conn);
    let target = 0x1000;
    let res = 0x2000;
    let mut total = 0u64;
    for round in 0..2 {
        if round == 1 {
            world.fabric().set_path_faults(
                IP_B,
                IP_A,
                Some(FaultConfig {
                    loss: 0.2,
                    ..FaultConfig::NONE
                }),
            );
        }
        b.write(target, &0u64.to_be_bytes());
        let dups0 = b.stats().rx_duplicates;
        // Posted 8 at a time (more than max_rd_atomic: the requester holds them back).
        let mut done = Vec::new();
        for chunk in 0..N / 8 {
            let sgs: Vec<[Sge; 1]> = (0..8)
                .map(|i| [a.sge(res + ((chunk * 8 + i) * 8) as usize, 8)])
                .collect();
            let wrs: Vec<SendWr<'_, Ah>> = (0..8)
                .map(|i| SendWr {
                    flags: SendFlags::SIGNALED,
                    remote: RemoteOp::Atomic {
                        remote_addr: b.addr(target),
                        rkey: verbs::MemoryRegion::rkey(&b.mr),
                        compare_add: 1,
                        swap: 0,
                    },
                    ..wr(chunk * 8 + i, WrOpcode::AtomicFetchAndAdd, &sgs[i as usize])
                })
                .collect();
            a.post_send(&mut qa, &wrs);
            done.extend(poll_n(&world, &a, &a.cq, 8));
        }
        for (i, w) in done.iter().enumerate() {
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len),
                (i as u64, WcStatus::Success, WcOpcode::FetchAdd, 8),
                "round {round}"
            );
            // Atomic responses in host order (negotiated at bring-up).
            let got = u64::from_ne_bytes(a.read(res + i * 8, 8).try_into().unwrap());
            assert_eq!(got, i as u64, "round {round}: fetch-add {i} saw {got}");
        }
        let value = u64::from_be_bytes(b.read(target, 8).try_into().unwrap());
        assert_eq!(value, N, "round {round}: the duplicates were applied");
        let dups = b.stats().rx_duplicates - dups0;
        assert!(dups >= N, "round {round}: only {dups} duplicates seen");
        total += dups;
    }
    assert!(a.stats().retransmits > 0, "no response was lost in round 1");
    assert!(total >= 2 * N);
    world.fabric().set_path_faults(IP_A, IP_B, None);
    world.fabric().set_path_faults(IP_B, IP_A, None);
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![qa]);
    b.teardown(vec![qb]);
}

/// A cut link: the requester retransmits `retry_cnt` times on its ACK timeout, then
/// completes the request with RETRY_EXC_ERR and flushes the rest. With only the ACK path
/// cut, the responder executes the SEND once (the retransmissions are duplicates) even though
/// the requester gives up.
#[test]
fn cut_link_ends_in_retry_exceeded() {
    let (world, a, b) = pair(35, MEM);
    for (retry_cnt, ack_path_only) in [(2u8, false), (0, false), (3, true)] {
        let what = format!("retry_cnt {retry_cnt}, ack path only {ack_path_only}");
        let conn = Conn {
            timeout: 10, // 4.096 µs × 2^10 ≈ 4.2 ms
            retry_cnt,
            ..Conn::default()
        };
        let (mut qa, mut qb) = connected(&a, &b, CAP, &conn, &conn);
        b.post_recv(&mut qb, 50, &[b.sge(0x8000, 4096)]);
        b.post_recv(&mut qb, 51, &[b.sge(0x9000, 4096)]);
        if ack_path_only {
            world.fabric().cut_path(IP_B, IP_A);
        } else {
            world.fabric().cut_link(IP_A, IP_B);
        }
        let data = pattern(77, 2000);
        a.write(0, &data);
        let sg = [a.sge(0, 2000)];
        let (t0, timeouts0) = (world.now_ns(), a.stats().timeouts);
        let (rx0, dups0) = (b.stats().rx_frames, b.stats().rx_duplicates);
        a.post_send(
            &mut qa,
            &[
                SendWr {
                    flags: SendFlags::SIGNALED,
                    ..wr(1, WrOpcode::Send, &sg)
                },
                SendWr {
                    flags: SendFlags::SIGNALED,
                    remote: RemoteOp::Rdma {
                        remote_addr: b.addr(0x10000),
                        rkey: verbs::MemoryRegion::rkey(&b.mr),
                    },
                    ..wr(2, WrOpcode::RdmaWrite, &sg)
                },
            ],
        );
        let s = poll_n(&world, &a, &a.cq, 2);
        assert_eq!(
            summary(&s),
            [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        assert_eq!(
            a.stats().timeouts - timeouts0,
            u64::from(retry_cnt) + 1,
            "{what}: one timeout per try"
        );
        let waited = world.now_ns() - t0;
        assert!(
            waited >= (u64::from(retry_cnt) + 1) * (4096 << 10),
            "{what}: gave up after {waited} ns"
        );
        assert_eq!(a.qp_state(&qa), QpState::Err, "{what}");
        world.fabric().heal_link(IP_A, IP_B);
        let r = drain(&world, &b, &b.cq, 20);
        if ack_path_only {
            // Every try reached B, and B executed the SEND once: one receive consumed, the
            // retransmissions seen as duplicates.
            assert_eq!(summary(&r), [(50, WcStatus::Success)], "{what}");
            assert_eq!(r[0].byte_len, 2000);
            assert_bytes(&b.read(0x8000, 2000), &data, &what);
            assert!(b.stats().rx_duplicates > dups0, "{what}");
        } else {
            assert!(r.is_empty(), "{what}: {r:?}");
            assert_eq!(
                b.stats().rx_frames,
                rx0,
                "{what}: a frame crossed a cut link"
            );
        }
        assert_eq!(b.qp_state(&qb), QpState::Rts, "{what}");
        Provider::destroy_qp(&a.dev, qa).unwrap();
        Provider::destroy_qp(&b.dev, qb).unwrap();
    }
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![]);
    b.teardown(vec![]);
}

/// RC traffic in both directions at once on a fabric with loss, duplication, reordering,
/// jitter and corruption (caught by the ICRC): SENDs, WRITEs and READs all complete and all
/// data is intact.
#[test]
fn mixed_traffic_both_ways_on_a_bad_fabric() {
    let (world, a, b) = pair(36, MEM);
    world.fabric().set_faults(FaultConfig {
        loss: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        corrupt: 0.02,
        delay_ns: 2_000,
        jitter_ns: 3_000,
        ..FaultConfig::NONE
    });
    let conn = Conn {
        timeout: 8,
        mtu: Mtu::Mtu1024,
        ..Conn::default()
    };
    let (mut qa, mut qb) = connected(&a, &b, CAP, &conn, &conn);
    const ROUNDS: u64 = 40;
    for round in 0..ROUNDS {
        let len = 1 + (round as usize * 997) % 9000;
        let (da, db) = (pattern(round * 2, len), pattern(round * 2 + 1, len));
        // Each side: SEND to the peer, WRITE into the peer, READ from the peer.
        a.write(0, &da);
        b.write(0, &db);
        a.fill(0x10000, 3 * 0x4000, 0);
        b.fill(0x10000, 3 * 0x4000, 0);
        b.post_recv(&mut qb, round, &[b.sge(0x10000, 0x4000)]);
        a.post_recv(&mut qa, round, &[a.sge(0x10000, 0x4000)]);
        for (me, peer, q) in [(&a, &b, &mut qa), (&b, &a, &mut qb)] {
            let sg = [me.sge(0, len)];
            let rsg = [me.sge(0x18000, len)];
            let rkey = verbs::MemoryRegion::rkey(&peer.mr);
            me.post_send(
                q,
                &[
                    SendWr {
                        flags: SendFlags::SIGNALED,
                        ..wr(round * 3, WrOpcode::Send, &sg)
                    },
                    SendWr {
                        flags: SendFlags::SIGNALED,
                        remote: RemoteOp::Rdma {
                            remote_addr: peer.addr(0x14000),
                            rkey,
                        },
                        ..wr(round * 3 + 1, WrOpcode::RdmaWrite, &sg)
                    },
                    SendWr {
                        flags: SendFlags::SIGNALED,
                        remote: RemoteOp::Rdma {
                            remote_addr: peer.addr(0),
                            rkey,
                        },
                        ..wr(round * 3 + 2, WrOpcode::RdmaRead, &rsg)
                    },
                ],
            );
        }
        // Both sides' completions first: a WRITE into A completes at B.
        let wcs = [poll_n(&world, &a, &a.cq, 4), poll_n(&world, &b, &b.cq, 4)];
        for (wc, me, peer_data, my_data) in [(&wcs[0], &a, &db, &da), (&wcs[1], &b, &da, &db)] {
            let mut ids: Vec<(u64, WcStatus, WcOpcode)> =
                wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
            ids.sort_by_key(|x| (x.2 as u8, x.0));
            assert_eq!(
                ids,
                [
                    (round * 3, WcStatus::Success, WcOpcode::Send),
                    (round * 3 + 1, WcStatus::Success, WcOpcode::RdmaWrite),
                    (round * 3 + 2, WcStatus::Success, WcOpcode::RdmaRead),
                    (round, WcStatus::Success, WcOpcode::Recv),
                ],
                "round {round}"
            );
            let at = me.tb.ip();
            assert_bytes(
                &me.read(0x10000, len),
                peer_data,
                &format!("round {round} {at}: SEND"),
            );
            assert_bytes(
                &me.read(0x14000, len),
                peer_data,
                &format!("round {round} {at}: WRITE"),
            );
            assert_bytes(
                &me.read(0x18000, len),
                peer_data,
                &format!("round {round} {at}: READ"),
            );
            assert_bytes(
                &me.read(0, len),
                my_data,
                &format!("round {round} {at}: source"),
            );
        }
    }
    let f = world.fabric().stats();
    assert!(f.corrupted > 0 && f.dropped_loss > 0, "{f:?}");
    assert!(a.stats().rx_malformed + b.stats().rx_malformed >= f.corrupted.min(1));
    world.fabric().set_faults(FaultConfig::NONE);
    let late_a = drain(&world, &a, &a.cq, 100);
    let late_b = drain(&world, &b, &b.cq, 100);
    assert!(
        late_a.is_empty() && late_b.is_empty(),
        "{late_a:?} {late_b:?}"
    );
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![qa]);
    b.teardown(vec![qb]);
}

/// Large RDMA READs and WRITEs (256 KiB, 256 packets, more than the 128-PSN window) on a
/// fabric that loses 10% of the frames and duplicates and reorders others: a READ whose
/// responses are lost part way is resumed from the first missing byte, a WRITE from the
/// first missing packet; every byte arrives.
#[test]
fn large_reads_and_writes_on_a_lossy_fabric() {
    const LEN: usize = 256 * 1024;
    let (world, a, b) = pair(37, MEM);
    world.fabric().set_faults(FaultConfig {
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.05,
        ..FaultConfig::NONE
    });
    let conn = Conn {
        timeout: 8,
        ..Conn::default()
    };
    let (mut qa, qb) = connected(&a, &b, CAP, &conn, &conn);
    for round in 0..6u64 {
        let (dw, dr) = (pattern(round * 2, LEN), pattern(round * 2 + 1, LEN));
        a.write(0, &dw);
        b.write(LEN, &dr);
        a.fill(LEN, LEN, 0);
        b.fill(0, LEN, 0);
        // Three SGEs on the local side of each, cut at odd offsets.
        let [x, y, z] = split3(LEN);
        let wsg = [a.sge(0, x), a.sge(x, y), a.sge(x + y, z)];
        let rsg = [a.sge(LEN, x), a.sge(LEN + x, y), a.sge(LEN + x + y, z)];
        let rkey = verbs::MemoryRegion::rkey(&b.mr);
        a.post_send(
            &mut qa,
            &[
                SendWr {
                    flags: SendFlags::SIGNALED,
                    remote: RemoteOp::Rdma {
                        remote_addr: b.addr(0),
                        rkey,
                    },
                    ..wr(round * 2, WrOpcode::RdmaWrite, &wsg)
                },
                SendWr {
                    flags: SendFlags::SIGNALED,
                    remote: RemoteOp::Rdma {
                        remote_addr: b.addr(LEN),
                        rkey,
                    },
                    ..wr(round * 2 + 1, WrOpcode::RdmaRead, &rsg)
                },
            ],
        );
        let s = poll_n(&world, &a, &a.cq, 2);
        assert_eq!(
            s.iter()
                .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
                .collect::<Vec<_>>(),
            [
                (round * 2, WcStatus::Success, WcOpcode::RdmaWrite, 0),
                (
                    round * 2 + 1,
                    WcStatus::Success,
                    WcOpcode::RdmaRead,
                    LEN as u32
                )
            ],
            "round {round}"
        );
        assert_bytes(&b.read(0, LEN), &dw, &format!("round {round}: WRITE"));
        assert_bytes(&a.read(LEN, LEN), &dr, &format!("round {round}: READ"));
    }
    let (f, sa) = (world.fabric().stats(), a.stats());
    assert!(
        f.dropped_loss > 0 && sa.timeouts > 0 && sa.retransmits > 0,
        "{f:?} {sa:?}"
    );
    world.fabric().set_faults(FaultConfig::NONE);
    let late_a = drain(&world, &a, &a.cq, 100);
    let late_b = drain(&world, &b, &b.cq, 100);
    assert!(
        late_a.is_empty() && late_b.is_empty(),
        "{late_a:?} {late_b:?}"
    );
    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![qa]);
    b.teardown(vec![qb]);
}
