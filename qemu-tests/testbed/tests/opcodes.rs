//! Every RC opcode between two NICs on the fabric, at every interesting size, gathered from
//! and scattered to several SGEs at odd offsets, inline, with immediate data, selectively
//! signalled; UD SEND/RECV with the GRH area. Every byte that should change is checked, and
//! every byte around it that should not.

mod common;

use common::*;
use mlx5::{Ah, Qp};
use verbs::{
    AtomicCap, MemoryRegion, Mtu, PostError, Provider, QpCap, QpInitAttr, QpState, QpType,
    RemoteOp, SendFlags, SendWr, SrqAttr, UdDest, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

const MIB: usize = 1 << 20;
/// The sizes every data-moving opcode is run at.
const SIZES: [usize; 7] = [0, 1, 64, 4095, 4096, 4097, MIB];
/// Registered memory per NIC: a gather / scatter area at 0, a target area at 2 MiB.
const MEM: usize = 4 * MIB + 64 * 1024;
const SRC: usize = 0;
const DST: usize = 2 * MIB;
/// Scratch area (receive buffers that must stay untouched, atomics).
const MISC: usize = 4 * MIB;
/// What memory that must not be written holds.
const CANARY: u8 = 0x5a;
/// Bytes checked on each side of a target range.
const PAD: usize = 64;

/// An RC QP on each NIC, connected to each other.
struct Rc {
    world: std::sync::Arc<nic_testbed::World>,
    a: Node,
    b: Node,
    qa: Qp,
    qb: Qp,
}

fn rc(seed: u64, mtu: Mtu, cap: QpCap) -> Rc {
    let (world, a, b) = pair(seed, MEM);
    let (mut qa, _) = a.qp(QpType::Rc, cap, false);
    let (mut qb, _) = b.qp(QpType::Rc, cap, false);
    // PSNs start just below the 24-bit wrap: a 1 MiB message wraps in its middle.
    let c = Conn {
        mtu,
        sq_psn: 0xff_fe00,
        rq_psn: 0xff_fe00,
        ..Conn::default()
    };
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, &b, nb, &c);
    b.connect(&mut qb, &a, na, &c);
    Rc {
        world,
        a,
        b,
        qa,
        qb,
    }
}

impl Rc {
    /// No stray completions on either side, no device errors, everything released.
    fn finish(self) {
        let Rc {
            world,
            a,
            b,
            qa,
            qb,
        } = self;
        let late_a = drain(&world, &a, &a.cq, 50);
        let late_b = drain(&world, &b, &b.cq, 50);
        assert!(late_a.is_empty(), "stray completions on A: {late_a:?}");
        assert!(late_b.is_empty(), "stray completions on B: {late_b:?}");
        assert_eq!(a.qp_state(&qa), verbs::QpState::Rts);
        assert_eq!(b.qp_state(&qb), verbs::QpState::Rts);
        a.no_device_errors();
        b.no_device_errors();
        a.teardown(vec![qa]);
        b.teardown(vec![qb]);
    }
}

/// The gather (or scatter) layout of `len` bytes in `nsge` SGEs from `base`.
fn local_layout(base: usize, len: usize, nsge: usize) -> Vec<(usize, usize)> {
    if nsge == 3 {
        place(base, &split3(len), 13)
    } else {
        place(base, &[len], 0)
    }
}

/// A receive layout for `len` bytes: cut elsewhere than the send side (`len / 4 | 1`,
/// `len / 2 | 1`), the last piece `slack` bytes longer than needed.
fn recv_layout(base: usize, len: usize, nsge: usize, slack: usize) -> Vec<(usize, usize)> {
    if nsge == 3 {
        let c1 = ((len / 4) | 1).min(len);
        let c2 = ((len / 2) | 1).clamp(c1, len);
        place(base, &[c1, c2 - c1, len - c2 + slack], 11)
    } else {
        place(base, &[len + slack], 0)
    }
}

/// Fills `[lo, hi)` with the canary.
fn canary(n: &Node, lo: usize, hi: usize) {
    n.fill(lo, hi - lo, CANARY);
}

/// Checks `[lo, hi)` of `n` byte for byte: `data` scattered over `lay` (first bytes of each
/// piece, in order), the canary everywhere else.
fn check_region(n: &Node, lo: usize, hi: usize, lay: &[(usize, usize)], data: &[u8], what: &str) {
    let mut want = vec![CANARY; hi - lo];
    let mut at = 0;
    for &(o, l) in lay {
        let k = l.min(data.len() - at);
        want[o - lo..o - lo + k].copy_from_slice(&data[at..at + k]);
        at += k;
    }
    assert_eq!(at, data.len(), "{what}: layout too short");
    let got = n.read(lo, hi - lo);
    if got != want {
        let first = got.iter().zip(&want).position(|(g, w)| g != w).unwrap();
        panic!(
            "{what}: byte {first} of [{lo:#x}, {hi:#x}) is {:#04x}, want {:#04x}",
            got[first], want[first]
        );
    }
}

/// One data-moving operation of `len` bytes from A to B (READ: from B into A), local side in
/// `nsge` SGEs, every result checked.
fn run_case(t: &mut Rc, opcode: WrOpcode, len: usize, nsge: usize, case: u64) {
    let what = format!("{opcode:?} len {len} sges {nsge}");
    let data = pattern(case, len);
    let imm: u32 = 0xa500_0000 | case as u32;
    let with_imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    let (a, b) = (&t.a, &t.b);
    let local = local_layout(SRC, len, nsge);
    let local_hi = layout_end(&local) + PAD;
    let sg = a.sges(&local);
    // Target of WRITE / source of READ on B, at an odd address.
    let target = DST + PAD + 7;
    let target_lo = DST;
    let target_hi = target + len + PAD;

    let mut recv_lay = Vec::new();
    let mut recv_hi = 0;
    match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => {
            recv_lay = recv_layout(DST, len, nsge, 100);
            recv_hi = layout_end(&recv_lay) + PAD;
            canary(b, DST, recv_hi);
            let rsg = b.sges(&recv_lay);
            b.post_recv(&mut t.qb, 1000 + case, &rsg);
        }
        WrOpcode::RdmaWriteWithImm => {
            // The data goes to the target; the receive buffer stays as it is.
            canary(b, MISC, MISC + 256);
            b.post_recv(&mut t.qb, 1000 + case, &[b.sge(MISC + 64, 128)]);
        }
        _ => {}
    }
    match opcode {
        WrOpcode::RdmaRead => {
            canary(a, SRC, local_hi);
            canary(b, target_lo, target_hi);
            b.write(target, &data);
        }
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
            canary(a, SRC, local_hi);
            a.write_scattered(&local, &data);
            canary(b, target_lo, target_hi);
        }
        _ => {
            canary(a, SRC, local_hi);
            a.write_scattered(&local, &data);
        }
    }
    let remote = match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => RemoteOp::None,
        _ => RemoteOp::Rdma {
            remote_addr: b.addr(target),
            rkey: b.mr.rkey(),
        },
    };
    a.post_send(
        &mut t.qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            imm_data: imm.to_be(),
            remote,
            ..wr(case, opcode, &sg)
        }],
    );

    let s = poll_n(&t.world, a, &a.cq, 1);
    let want_op = match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        _ => WcOpcode::RdmaRead,
    };
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode, s[0].qp_num),
        (case, WcStatus::Success, want_op, t.qa.qpn()),
        "{what}: {s:?}"
    );
    // `byte_len` is defined for RDMA read completions only (send and RDMA write leave it
    // undefined, as libibverbs does).
    if opcode == WrOpcode::RdmaRead {
        assert_eq!(s[0].byte_len, len as u32, "{what}: {s:?}");
    }
    match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
            let r = poll_n(&t.world, b, &b.cq, 1);
            let r = r[0];
            let rop = if opcode == WrOpcode::RdmaWriteWithImm {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len, r.qp_num),
                (1000 + case, WcStatus::Success, rop, len as u32, t.qb.qpn()),
                "{what}: {r:?}"
            );
            assert_eq!(r.wc_flags.contains(WcFlags::WITH_IMM), with_imm, "{what}");
            assert!(!r.wc_flags.contains(WcFlags::GRH), "{what}");
            if with_imm {
                assert_eq!(u32::from_be(r.imm_data), imm, "{what}");
            }
        }
        _ => {}
    }
    match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => {
            check_region(b, DST, recv_hi, &recv_lay, &data, &what);
        }
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
            check_region(b, target_lo, target_hi, &[(target, len)], &data, &what);
            if opcode == WrOpcode::RdmaWriteWithImm {
                check_region(
                    b,
                    MISC,
                    MISC + 256,
                    &[],
                    &[],
                    &format!("{what}: recv buffer"),
                );
            }
        }
        WrOpcode::RdmaRead => {
            check_region(a, SRC, local_hi, &local, &data, &what);
            // The source is left as it was.
            check_region(b, target_lo, target_hi, &[(target, len)], &data, &what);
        }
        _ => unreachable!(),
    }
    // The sender's buffer is never written by SEND / WRITE.
    if opcode != WrOpcode::RdmaRead {
        check_region(a, SRC, local_hi, &local, &data, &format!("{what}: source"));
    }
}

fn all_sizes(opcode: WrOpcode, seed: u64) {
    let mut t = rc(seed, Mtu::Mtu1024, CAP);
    let mut case = seed << 8;
    for nsge in [1, 3] {
        for len in SIZES {
            run_case(&mut t, opcode, len, nsge, case);
            case += 1;
        }
    }
    // The two 1 MiB messages alone are 2048 packets at MTU 1024 (on A's port for SEND and
    // WRITE, on B's for READ responses).
    let frames = t.a.stats().tx_frames + t.b.stats().tx_frames;
    assert!(frames > 2048, "only {frames} frames on the wire");
    // ... and took the PSNs past 2^24.
    let psn = Provider::query_qp(&t.a.dev, &t.qa).unwrap().sq_psn;
    assert!(psn < 0xff_fe00, "send PSN {psn:#x} did not wrap");
    t.finish();
}

#[test]
fn send_every_size_and_sge_layout() {
    all_sizes(WrOpcode::Send, 1);
}

#[test]
fn send_with_imm_every_size_and_sge_layout() {
    all_sizes(WrOpcode::SendWithImm, 2);
}

#[test]
fn rdma_write_every_size_and_sge_layout() {
    all_sizes(WrOpcode::RdmaWrite, 3);
}

#[test]
fn rdma_write_with_imm_every_size_and_sge_layout() {
    all_sizes(WrOpcode::RdmaWriteWithImm, 4);
}

#[test]
fn rdma_read_every_size_and_sge_layout() {
    all_sizes(WrOpcode::RdmaRead, 5);
}

/// Every opcode at MTU 256 and MTU 4096 (the segmentation boundaries move), 3 SGEs, on one
/// connection.
#[test]
fn every_opcode_at_mtu_256_and_4096() {
    for (mtu, seed) in [(Mtu::Mtu256, 6), (Mtu::Mtu4096, 7)] {
        let mut t = rc(seed, mtu, CAP);
        let mut case = seed << 8;
        for opcode in [
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::RdmaRead,
        ] {
            for len in [0, 1, 255, 256, 257, 4095, 4096, 4097, 3 * 4096 + 1] {
                run_case(&mut t, opcode, len, 3, case);
                case += 1;
            }
        }
        t.finish();
    }
}

/// Posts one atomic and returns (completion, value fetched into the local buffer, remote
/// value after).
fn atomic(
    t: &mut Rc,
    wr_id: u64,
    op: WrOpcode,
    remote_off: usize,
    compare_add: u64,
    swap: u64,
) -> (u64, u64) {
    let (a, b) = (&t.a, &t.b);
    // The local result at an odd offset, with canaries around it.
    let res = MISC + 1001;
    canary(a, res - PAD, res + 8 + PAD);
    a.post_send(
        &mut t.qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Atomic {
                remote_addr: b.addr(remote_off),
                rkey: b.mr.rkey(),
                compare_add,
                swap,
            },
            ..wr(wr_id, op, &[a.sge(res, 8)])
        }],
    );
    let s = poll_n(&t.world, a, &a.cq, 1);
    let want_op = if op == WrOpcode::AtomicCmpAndSwp {
        WcOpcode::CompSwap
    } else {
        WcOpcode::FetchAdd
    };
    assert_eq!(
        (
            s[0].wr_id,
            s[0].status,
            s[0].opcode,
            s[0].byte_len,
            s[0].qp_num
        ),
        (wr_id, WcStatus::Success, want_op, 8, t.qa.qpn()),
        "{s:?}"
    );
    let fetched = a.read(res, 8);
    // Only the 8 bytes of the result were written.
    check_region(
        a,
        res - PAD,
        res + 8 + PAD,
        &[(res, 8)],
        &fetched,
        "atomic result",
    );
    // The responder computes on big-endian operands; the driver negotiated host-endian
    // atomic responses (as Linux does), so the original value lands in host order.
    let fetched = u64::from_ne_bytes(fetched.try_into().unwrap());
    let after = u64::from_be_bytes(b.read(remote_off, 8).try_into().unwrap());
    (fetched, after)
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let mut t = rc(8, Mtu::Mtu1024, CAP);
    let target = MISC + 4096; // 8-byte aligned
    canary(&t.b, target - PAD, target + 8 + PAD);
    t.b.write(target, &0x1122_3344_5566_7788u64.to_be_bytes());

    // CAS that matches: swapped.
    let (f, v) = atomic(
        &mut t,
        1,
        WrOpcode::AtomicCmpAndSwp,
        target,
        0x1122_3344_5566_7788,
        42,
    );
    assert_eq!((f, v), (0x1122_3344_5566_7788, 42));
    // CAS that does not match: nothing changes, the current value comes back.
    let (f, v) = atomic(&mut t, 2, WrOpcode::AtomicCmpAndSwp, target, 41, 7);
    assert_eq!((f, v), (42, 42));
    // FETCH_ADD.
    let (f, v) = atomic(&mut t, 3, WrOpcode::AtomicFetchAndAdd, target, 100, 0xdead);
    assert_eq!((f, v), (42, 142));
    // FETCH_ADD wraps around 2^64.
    let (f, v) = atomic(&mut t, 4, WrOpcode::AtomicFetchAndAdd, target, u64::MAX, 0);
    assert_eq!((f, v), (142, 141));
    // CAS with all bits set.
    let (f, v) = atomic(&mut t, 5, WrOpcode::AtomicCmpAndSwp, target, 141, u64::MAX);
    assert_eq!((f, v), (141, u64::MAX));
    let (f, v) = atomic(&mut t, 6, WrOpcode::AtomicFetchAndAdd, target, 1, 0);
    assert_eq!((f, v), (u64::MAX, 0));
    // Only the 8 target bytes were ever written.
    check_region(
        &t.b,
        target - PAD,
        target + 8 + PAD,
        &[(target, 8)],
        &0u64.to_be_bytes(),
        "atomic target",
    );

    // A batch of fetch-adds back to back (several outstanding, max_rd_atomic 4): each sees
    // the one before.
    let res = MISC + 8192;
    let sgs: Vec<[verbs::Sge; 1]> = (0..16).map(|i| [t.a.sge(res + i * 8, 8)]).collect();
    let wrs: Vec<SendWr<'_, Ah>> = (0..16)
        .map(|i| SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Atomic {
                remote_addr: t.b.addr(target),
                rkey: t.b.mr.rkey(),
                compare_add: 1 << i,
                swap: 0,
            },
            ..wr(100 + i as u64, WrOpcode::AtomicFetchAndAdd, &sgs[i])
        })
        .collect();
    t.a.post_send(&mut t.qa, &wrs);
    let s = poll_n(&t.world, &t.a, &t.a.cq, 16);
    let mut expect = 0u64;
    for (i, w) in s.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (100 + i as u64, WcStatus::Success));
        let got = u64::from_ne_bytes(t.a.read(res + i * 8, 8).try_into().unwrap());
        assert_eq!(got, expect, "fetch-add {i}");
        expect += 1 << i;
    }
    assert_eq!(
        u64::from_be_bytes(t.b.read(target, 8).try_into().unwrap()),
        0xffff
    );
    t.finish();
}

/// Inline SEND, SEND_WITH_IMM, RDMA_WRITE and RDMA_WRITE_WITH_IMM at every size up to the
/// QP's `max_inline_data`; one byte more is refused at post time and nothing is posted.
#[test]
fn inline_data_up_to_max_inline() {
    // A small SQ (32 WQEBBs), so that WQEs of up to 4 WQEBBs and their inline data wrap
    // around the end of the ring many times.
    let cap = QpCap {
        max_send_wr: 8,
        max_inline_data: 200,
        ..CAP
    };
    let mut t = rc(9, Mtu::Mtu256, cap);
    let max = t.qa.max_inline_data() as usize;
    assert!(max >= 200, "max_inline_data {max}");
    assert!(t.qa.sq_wqebbs() <= 32, "SQ of {} WQEBBs", t.qa.sq_wqebbs());
    let mut sizes = vec![
        0, 1, 3, 4, 11, 12, 13, 15, 16, 17, 27, 28, 29, 44, 45, 60, 61, 64, 100,
    ];
    sizes.extend([127, 128, 199, 200, max - 1, max]);
    let mut case = 0u64;
    for opcode in [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
    ] {
        for &len in &sizes {
            case += 1;
            let what = format!("inline {opcode:?} len {len}");
            let data = pattern(900 + case, len);
            let imm = 0x1e00_0000 | case as u32;
            let (a, b) = (&t.a, &t.b);
            let target = DST + PAD + 3;
            canary(b, DST, DST + 2 * PAD + 512);
            let recv = [b.sge(target, max + 1)];
            let remote = match opcode {
                WrOpcode::Send | WrOpcode::SendWithImm => {
                    b.post_recv(&mut t.qb, case, &recv);
                    RemoteOp::None
                }
                _ => {
                    if opcode == WrOpcode::RdmaWriteWithImm {
                        b.post_recv(&mut t.qb, case, &[]);
                    }
                    RemoteOp::Rdma {
                        remote_addr: b.addr(target),
                        rkey: b.mr.rkey(),
                    }
                }
            };
            a.post_send(
                &mut t.qa,
                &[SendWr {
                    flags: SendFlags::SIGNALED | SendFlags::INLINE,
                    inline_data: &data,
                    imm_data: imm.to_be(),
                    remote,
                    ..wr(case, opcode, &[])
                }],
            );
            let s = poll_n(&t.world, a, &a.cq, 1);
            assert_eq!(
                (s[0].wr_id, s[0].status),
                (case, WcStatus::Success),
                "{what}"
            );
            if opcode != WrOpcode::RdmaWrite {
                let r = poll_n(&t.world, b, &b.cq, 1);
                assert_eq!(
                    (r[0].wr_id, r[0].status, r[0].byte_len),
                    (case, WcStatus::Success, len as u32),
                    "{what}"
                );
                let imm_flag = opcode != WrOpcode::Send;
                assert_eq!(
                    r[0].wc_flags.contains(WcFlags::WITH_IMM),
                    imm_flag,
                    "{what}"
                );
                if imm_flag {
                    assert_eq!(u32::from_be(r[0].imm_data), imm, "{what}");
                }
            }
            check_region(b, DST, DST + 2 * PAD + 512, &[(target, len)], &data, &what);
        }
    }
    // One byte over the limit: refused, not posted.
    let big = vec![0u8; max + 1];
    let before = t.qa.sq_producer();
    let err = Provider::post_send(
        &t.a.dev,
        &mut t.qa,
        &[SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: &big,
            remote: RemoteOp::Rdma {
                remote_addr: t.b.addr(DST),
                rkey: t.b.mr.rkey(),
            },
            ..wr(7777, WrOpcode::RdmaWrite, &[])
        }],
    )
    .unwrap_err();
    assert_eq!(
        err,
        PostError {
            error: verbs::Error::InvalidArgument,
            bad_wr: 0
        }
    );
    assert_eq!(t.qa.sq_producer(), before);
    // In a batch, the WRs before the bad one are posted (and complete).
    let ok = pattern(1, 8);
    let err = Provider::post_send(
        &t.a.dev,
        &mut t.qa,
        &[
            SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                inline_data: &ok,
                remote: RemoteOp::Rdma {
                    remote_addr: t.b.addr(DST),
                    rkey: t.b.mr.rkey(),
                },
                ..wr(7778, WrOpcode::RdmaWrite, &[])
            },
            SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                inline_data: &big,
                remote: RemoteOp::Rdma {
                    remote_addr: t.b.addr(DST),
                    rkey: t.b.mr.rkey(),
                },
                ..wr(7779, WrOpcode::RdmaWrite, &[])
            },
        ],
    )
    .unwrap_err();
    assert_eq!(err.bad_wr, 1);
    let s = poll_n(&t.world, &t.a, &t.a.cq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (7778, WcStatus::Success));
    assert_eq!(t.b.read(DST, 8), ok);
    t.finish();
}

/// 1000 SENDs with every 8th signalled through a small SQ: exactly the signalled wr_ids
/// complete, in order; a full SQ refuses the post (ENOMEM) instead of overflowing; every
/// message arrives intact. The WQEs vary in size (inline data of up to 180 bytes is up to 4
/// WQEBBs; gathers of 1 to 3 SGEs are 1 or 2), so the ring wraps in the middle of batches
/// and the space one completion frees varies.
#[test]
fn unsignaled_sends_every_eighth_signaled() {
    const N: u64 = 1000;
    const SLOT: usize = 256;
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_inline_data: 180,
        ..CAP
    };
    let mut t = rc(10, Mtu::Mtu1024, cap);
    let sq_bbs = t.qa.sq_wqebbs();
    let rq_depth = t.qb.cap().max_recv_wr as u64;
    // Message i: its number, then a pattern; 16 to 180 bytes; inline for every third.
    let len = |i: u64| 16 + (i as usize * 37) % 165;
    let inline = |i: u64| i.is_multiple_of(3);
    let msg = |i: u64| {
        let mut m = i.to_le_bytes().to_vec();
        m.extend(pattern(i, len(i) - 8));
        m
    };
    let msgs: Vec<Vec<u8>> = (0..N).map(msg).collect();
    for i in 0..N {
        t.a.write(SRC + i as usize * SLOT, &msgs[i as usize]);
    }
    // The gather list of message i: 1, 2 or 3 pieces of its slot.
    let gather = |i: u64| -> Vec<verbs::Sge> {
        let (base, l) = (SRC + i as usize * SLOT, len(i));
        match i % 3 {
            1 => vec![t.a.sge(base, l)],
            _ => {
                let [x, y, z] = split3(l);
                vec![
                    t.a.sge(base, x),
                    t.a.sge(base + x, y),
                    t.a.sge(base + x + y, z),
                ]
            }
        }
    };
    let rbuf = |i: u64| DST + (i % rq_depth) as usize * SLOT;
    let mut next_recv = 0u64;
    while next_recv < rq_depth {
        let s = [t.b.sge(rbuf(next_recv), SLOT)];
        t.b.post_recv(&mut t.qb, next_recv, &s);
        next_recv += 1;
    }
    let mut sent_wc = Vec::new();
    let mut received = 0u64;
    let mut posted = 0u64;
    let mut refused = 0u32;
    let mut batch = 1usize;
    let mut wc = [verbs::WorkCompletion::default(); 32];
    let mut relaxes = 0u32;
    while received < N {
        // Post until the SQ refuses (or everything is posted), then let the world run.
        while posted < N {
            let n = batch.min((N - posted) as usize);
            batch = batch % 13 + 1;
            let sgs: Vec<Vec<verbs::Sge>> = (posted..posted + n as u64).map(gather).collect();
            let wrs: Vec<SendWr<'_, Ah>> = (0..n)
                .map(|k| {
                    let i = posted + k as u64;
                    let mut flags = if i % 8 == 7 {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty()
                    };
                    if inline(i) {
                        flags |= SendFlags::INLINE;
                        SendWr {
                            flags,
                            inline_data: &msgs[i as usize],
                            ..wr(i, WrOpcode::Send, &[])
                        }
                    } else {
                        SendWr {
                            flags,
                            ..wr(i, WrOpcode::Send, &sgs[k])
                        }
                    }
                })
                .collect();
            let full = match Provider::post_send(&t.a.dev, &mut t.qa, &wrs) {
                Ok(()) => {
                    posted += n as u64;
                    false
                }
                Err(PostError {
                    error: verbs::Error::NoMemory,
                    bad_wr,
                }) => {
                    posted += bad_wr as u64;
                    refused += 1;
                    true
                }
                Err(e) => panic!("post_send: {e:?}"),
            };
            let inflight = t.qa.sq_producer().wrapping_sub(t.qa.sq_consumer());
            assert!(inflight <= sq_bbs, "{inflight} WQEBBs in an SQ of {sq_bbs}");
            if full {
                break;
            }
        }
        let k = Provider::poll_cq(&t.a.dev, &t.a.cq, &mut wc).unwrap();
        sent_wc.extend_from_slice(&wc[..k]);
        let k = Provider::poll_cq(&t.b.dev, &t.b.cq, &mut wc).unwrap();
        for w in &wc[..k] {
            let l = len(received);
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len as usize),
                (received, WcStatus::Success, WcOpcode::Recv, l),
                "{w:?}"
            );
            assert_bytes(
                &t.b.read(rbuf(received), l),
                &msgs[received as usize],
                &format!("message {received}"),
            );
            received += 1;
            let s = [t.b.sge(rbuf(next_recv), SLOT)];
            t.b.post_recv(&mut t.qb, next_recv, &s);
            next_recv += 1;
        }
        t.world.relax();
        relaxes += 1;
        assert!(
            relaxes < 1_000_000,
            "stuck: {posted} posted, {received} received"
        );
    }
    let rest = drain(&t.world, &t.a, &t.a.cq, 20);
    sent_wc.extend(rest);
    assert!(refused > 10, "the SQ filled up only {refused} times");
    let ids: Vec<u64> = sent_wc.iter().map(|w| w.wr_id).collect();
    let want: Vec<u64> = (0..N).filter(|i| i % 8 == 7).collect();
    assert_eq!(ids, want);
    assert!(
        sent_wc
            .iter()
            .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send)
    );
    assert_eq!(t.qa.sq_consumer(), t.qa.sq_producer());
    assert_eq!(t.b.stats().rnr_naks_sent, 0);
    // The receives still posted go with the QP.
    t.finish();
}

/// UD SEND / SEND_WITH_IMM between the NICs: the receive buffer gets 40 bytes of GRH (for
/// RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header) and the payload, scattered over 3
/// SGEs that split the GRH; the completion says GRH, the source QP and payload + 40 bytes. A
/// message larger than any MTU completes with LOC_LEN_ERR.
#[test]
fn ud_send_recv_with_grh() {
    const QKEY: u32 = 0x1111_2222;
    let (world, a, b) = pair(11, MEM);
    let ud_cap = QpCap {
        max_inline_data: 0,
        ..CAP
    };
    let (mut ua, _) = a.qp(QpType::Ud, ud_cap, false);
    let (mut ub, _) = b.qp(QpType::Ud, ud_cap, false);
    a.ud_up(&mut ua, QKEY);
    b.ud_up(&mut ub, QKEY);
    let ah = a.ah_to(&b);
    let port = Provider::query_port(&a.dev, 1).unwrap();
    let mtu = port.active_mtu.bytes() as usize;
    let mut case = 0u64;
    for opcode in [WrOpcode::Send, WrOpcode::SendWithImm] {
        for len in [0, 1, 64, 1000, mtu - 1, mtu] {
            case += 1;
            let what = format!("UD {opcode:?} len {len}");
            let data = pattern(500 + case, len);
            let local = local_layout(SRC, len, 3);
            canary(&a, SRC, layout_end(&local) + PAD);
            a.write_scattered(&local, &data);
            let total = 40 + len;
            // 17 bytes, then the rest of the GRH and part of the payload, then the rest.
            let c2 = (((17 + total) / 2) | 1).clamp(17, total);
            let rl = place(DST, &[17, c2 - 17, total - c2 + 50], 9);
            let rhi = layout_end(&rl) + PAD;
            canary(&b, DST, rhi);
            let rsg = b.sges(&rl);
            b.post_recv(&mut ub, case, &rsg);
            let sg = a.sges(&local);
            let imm = 0x0d00_0000 | case as u32;
            a.post_send(
                &mut ua,
                &[SendWr {
                    flags: SendFlags::SIGNALED,
                    imm_data: imm.to_be(),
                    dest: Some(UdDest {
                        ah: &ah,
                        remote_qpn: ub.qpn(),
                        remote_qkey: QKEY,
                    }),
                    ..wr(case, opcode, &sg)
                }],
            );
            let s = poll_n(&world, &a, &a.cq, 1);
            assert_eq!(
                (s[0].wr_id, s[0].status, s[0].opcode),
                (case, WcStatus::Success, WcOpcode::Send),
                "{what}"
            );
            let r = poll_n(&world, &b, &b.cq, 1)[0];
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len, r.src_qp, r.qp_num),
                (
                    case,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    total as u32,
                    ua.qpn(),
                    ub.qpn()
                ),
                "{what}"
            );
            assert!(
                r.wc_flags.contains(WcFlags::GRH),
                "{what}: {:?}",
                r.wc_flags
            );
            let with_imm = opcode == WrOpcode::SendWithImm;
            assert_eq!(r.wc_flags.contains(WcFlags::WITH_IMM), with_imm, "{what}");
            if with_imm {
                assert_eq!(u32::from_be(r.imm_data), imm, "{what}");
            }
            let got = b.read_gathered(&rl, total);
            assert_eq!(&got[..20], &[0u8; 20], "{what}: GRH area, first 20 bytes");
            let ip = &got[20..40];
            assert_eq!(ip[0], 0x45, "{what}: IPv4 version / IHL");
            assert_eq!(ip[9], 17, "{what}: IP protocol UDP");
            assert_eq!(
                u16::from_be_bytes([ip[2], ip[3]]) as usize,
                20 + 8 + 12 + 8 + if with_imm { 4 } else { 0 } + len.next_multiple_of(4) + 4,
                "{what}: IP total length (IP + UDP + BTH + DETH + [ImmDt] + padded payload + ICRC)"
            );
            assert_eq!(&ip[12..16], &IP_A.octets(), "{what}: source address");
            assert_eq!(&ip[16..20], &IP_B.octets(), "{what}: destination address");
            assert_eq!(&got[40..], &data[..], "{what}: payload");
            // Nothing beyond the message and nothing in the gaps was written.
            check_region(&b, DST, rhi, &rl, &got, &what);
        }
    }
    // A UD message longer than the largest MTU (and than the 2^12-byte `log_msg_max` the
    // driver sets, as Linux does): a local length error, and the QP goes to ERR.
    let big = 4097;
    let sg = [a.sge(SRC, big)];
    a.post_send(
        &mut ua,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            dest: Some(UdDest {
                ah: &ah,
                remote_qpn: ub.qpn(),
                remote_qkey: QKEY,
            }),
            ..wr(99, WrOpcode::Send, &sg)
        }],
    );
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(
        (s[0].wr_id, s[0].status),
        (99, WcStatus::LocLenErr),
        "{s:?}"
    );
    assert_eq!(a.qp_state(&ua), verbs::QpState::Err);
    let late = drain(&world, &b, &b.cq, 20);
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(b.stats().rx_no_wqe, 0);
    // The device checks the message against `log_msg_max` when it reads the WQE, and records
    // the over-long WQE.
    assert!(
        matches!(
            a.tb.device().errors(),
            [nic_emulator::DeviceError::BadWqe {
                fault: nic_emulator::WqeFault::TooLong(4097),
                ..
            }]
        ),
        "{:?}",
        a.tb.device().errors()
    );
    b.no_device_errors();
    Provider::destroy_ah(&a.dev, ah).unwrap();
    a.teardown(vec![ua]);
    b.teardown(vec![ub]);
}

/// Work requests the QP cannot carry are refused at post time (EINVAL, nothing posted):
/// more SGEs than `max_send_sge` / `max_recv_sge`, an atomic without exactly one 8-byte
/// SGE, a remote part that does not fit the opcode, RDMA on a UD QP, a UD send without a
/// destination. The QP keeps working.
#[test]
fn post_time_validation() {
    let mut t = rc(12, Mtu::Mtu1024, CAP);
    let (a, b) = (&t.a, &t.b);
    // The QP's actual limits (at least what was asked for).
    let max_send = t.qa.cap().max_send_sge as usize;
    let max_recv = t.qb.cap().max_recv_sge as usize;
    assert!(max_send >= 3 && max_recv >= 3);
    let sges: Vec<verbs::Sge> = (0..=max_send).map(|i| a.sge(i * 8, 8)).collect();
    let too_many_recv: Vec<verbs::Sge> = (0..=max_recv).map(|i| b.sge(i * 8, 8)).collect();
    let short = [verbs::Sge {
        length: 4,
        ..sges[0]
    }];
    let rdma = RemoteOp::Rdma {
        remote_addr: b.addr(DST),
        rkey: b.mr.rkey(),
    };
    let atomic = RemoteOp::Atomic {
        remote_addr: b.addr(MISC),
        rkey: b.mr.rkey(),
        compare_add: 1,
        swap: 0,
    };
    let bad: Vec<(&str, SendWr<'_, Ah>)> = vec![
        (
            "one SGE more than max_send_sge",
            wr(1, WrOpcode::Send, &sges),
        ),
        (
            "FETCH_ADD with a 4-byte SGE",
            SendWr {
                remote: atomic,
                ..wr(2, WrOpcode::AtomicFetchAndAdd, &short)
            },
        ),
        (
            "FETCH_ADD with two SGEs",
            SendWr {
                remote: atomic,
                ..wr(3, WrOpcode::AtomicFetchAndAdd, &sges[..2])
            },
        ),
        (
            "RDMA WRITE without a remote address",
            wr(4, WrOpcode::RdmaWrite, &sges[..1]),
        ),
        (
            "SEND with a remote address",
            SendWr {
                remote: rdma,
                ..wr(5, WrOpcode::Send, &sges[..1])
            },
        ),
        (
            "RDMA READ inline",
            SendWr {
                flags: SendFlags::INLINE,
                inline_data: b"x",
                remote: rdma,
                ..wr(6, WrOpcode::RdmaRead, &[])
            },
        ),
        (
            "inline data without INLINE",
            SendWr {
                inline_data: b"x",
                ..wr(7, WrOpcode::Send, &[])
            },
        ),
    ];
    for (what, w) in &bad {
        let before = t.qa.sq_producer();
        let err = Provider::post_send(&a.dev, &mut t.qa, &[*w]).unwrap_err();
        assert_eq!(
            err,
            PostError {
                error: verbs::Error::InvalidArgument,
                bad_wr: 0
            },
            "{what}"
        );
        assert_eq!(t.qa.sq_producer(), before, "{what}: something was posted");
    }
    let err = Provider::post_recv(
        &b.dev,
        &mut t.qb,
        &[verbs::RecvWr {
            wr_id: 1,
            sg_list: &too_many_recv,
        }],
    )
    .unwrap_err();
    assert_eq!(err.error, verbs::Error::InvalidArgument);
    assert_eq!(t.qb.rq_producer(), 0);
    // RDMA and atomics on a UD QP, and a UD send without an AH.
    let (mut ud, _) = a.qp(QpType::Ud, CAP, false);
    a.ud_up(&mut ud, 0x1234);
    for (what, w) in [
        (
            "RDMA WRITE on UD",
            SendWr {
                remote: rdma,
                ..wr(8, WrOpcode::RdmaWrite, &sges[..1])
            },
        ),
        (
            "FETCH_ADD on UD",
            SendWr {
                remote: atomic,
                ..wr(9, WrOpcode::AtomicFetchAndAdd, &sges[..1])
            },
        ),
        (
            "UD SEND without a destination",
            wr(10, WrOpcode::Send, &sges[..1]),
        ),
    ] {
        let err = Provider::post_send(&a.dev, &mut ud, &[w]).unwrap_err();
        assert_eq!(err.error, verbs::Error::InvalidArgument, "{what}");
    }
    assert_eq!(ud.sq_producer(), 0);
    // The RC QP still works.
    run_case(&mut t, WrOpcode::Send, 100, 3, 12 << 8);
    // A full RQ refuses the receive (ENOMEM) at the index where it ran out of room.
    let depth = t.qb.cap().max_recv_wr as usize;
    let sg = [t.b.sge(DST, 64)];
    let recvs: Vec<verbs::RecvWr<'_>> = (0..=depth)
        .map(|i| verbs::RecvWr {
            wr_id: i as u64,
            sg_list: &sg,
        })
        .collect();
    let before = t.qb.rq_producer();
    let err = Provider::post_recv(&t.b.dev, &mut t.qb, &recvs).unwrap_err();
    assert_eq!(
        err,
        PostError {
            error: verbs::Error::NoMemory,
            bad_wr: depth
        }
    );
    assert_eq!(t.qb.rq_producer().wrapping_sub(before) as usize, depth);
    Provider::destroy_qp(&t.a.dev, ud).unwrap();
    t.finish();
}

/// What `query_device` reports is what the device takes: QPs and SRQs at the reported SGE and
/// inline limits (one SGE more is refused), an RC connection at the reported read/atomic
/// depths (a deeper one is refused) over which an RDMA READ scattering into `max_sge_rd`
/// SGEs lands every byte.
#[test]
fn query_device_reports_the_limits_the_device_takes() {
    let (world, a, b) = pair(0x51, MEM);
    let attr = Provider::query_device(&a.dev).unwrap();
    // The emulated device's capabilities: atomics, 2^4 outstanding reads each way,
    // 1024-byte send and 512-byte receive WQEs, 2^log_max_qp SRQs of 2^15 WQEs.
    let p = nic_emulator::Profile::default();
    let (maj, min, sub) = p.fw_rev;
    assert_eq!(attr.fw_ver, format!("{maj}.{min}.{sub:04}").as_str());
    assert_eq!(attr.atomic_cap, AtomicCap::Hca);
    assert_eq!((attr.max_qp_rd_atom, attr.max_qp_init_rd_atom), (16, 16));
    assert_eq!((attr.max_sge, attr.max_sge_rd), (32, 61));
    assert_eq!(attr.max_inline_data, 1008 - 64 - 4);
    assert_eq!(
        (attr.max_srq, attr.max_srq_wr, attr.max_srq_sge),
        (1 << p.log_max_qp, (1 << 15) - 1, 31)
    );

    let create = |n: &Node, qp_type, cap| {
        Provider::create_qp(
            &n.dev,
            &n.pd,
            &QpInitAttr {
                qp_type,
                send_cq: &n.cq,
                recv_cq: &n.cq,
                srq: None,
                cap,
                sq_sig_all: false,
            },
        )
    };
    let full = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: attr.max_sge,
        max_recv_sge: attr.max_sge,
        max_inline_data: attr.max_inline_data,
    };
    let (ud, ud_cap) = create(&a, QpType::Ud, full).expect("UD QP at the limits");
    assert!(ud_cap.max_send_sge >= attr.max_sge && ud_cap.max_recv_sge >= attr.max_sge);
    assert!(ud_cap.max_inline_data >= attr.max_inline_data);
    let over = QpCap {
        max_recv_sge: attr.max_sge + 1,
        ..full
    };
    assert_eq!(
        create(&a, QpType::Ud, over).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    let srq_attr = SrqAttr {
        max_wr: 16,
        max_sge: attr.max_srq_sge,
        srq_limit: 0,
    };
    let srq = Provider::create_srq(&a.dev, &a.pd, &srq_attr).expect("SRQ at max_srq_sge");
    assert!(verbs::SharedReceiveQueue::attr(&srq).max_sge >= attr.max_srq_sge);
    let too_wide = SrqAttr {
        max_sge: attr.max_srq_sge + 1,
        ..srq_attr
    };
    assert_eq!(
        Provider::create_srq(&a.dev, &a.pd, &too_wide).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    Provider::destroy_srq(&a.dev, srq).unwrap();

    // RC at the reported depths, sending up to max_sge_rd SGEs.
    let rc_cap = QpCap {
        max_send_sge: attr.max_sge_rd,
        ..full
    };
    let (mut qa, _) = create(&a, QpType::Rc, rc_cap).expect("RC QP at max_sge_rd");
    let (mut qb, _) = create(&b, QpType::Rc, rc_cap).unwrap();
    let c = Conn {
        max_rd_atomic: attr.max_qp_init_rd_atom as u8,
        max_dest_rd_atomic: attr.max_qp_rd_atom as u8,
        ..Conn::default()
    };
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, &b, nb, &c);
    b.connect(&mut qb, &a, na, &c);
    let sizes = vec![7; attr.max_sge_rd as usize];
    let lay = place(SRC, &sizes, 3);
    let want = pattern(0x51, layout_end(&lay) - SRC);
    let total: usize = sizes.iter().sum();
    b.write(DST, &want[..total]);
    let sg = a.sges(&lay);
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Rdma {
                remote_addr: b.addr(DST),
                rkey: b.mr.rkey(),
            },
            ..wr(1, WrOpcode::RdmaRead, &sg)
        }],
    );
    let wc = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(wc[0].byte_len as usize, total);
    assert_bytes(&a.read_gathered(&lay, total), &want[..total], "RDMA READ");

    // One outstanding read more than reported is refused at INIT -> RTR.
    let (mut deep, _) = create(&a, QpType::Rc, full).unwrap();
    let mut p = verbs::rc::RcParams {
        ah_attr: a.path_to(&b),
        dest_qp_num: nb,
        max_dest_rd_atomic: attr.max_qp_rd_atom as u8 + 1,
        ..verbs::rc::RcParams::default()
    };
    assert_eq!(
        verbs::rc::connect(&a.dev, &mut deep, &p).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    assert_eq!(
        verbs::QueuePair::state(&deep),
        QpState::Init,
        "refused at INIT -> RTR"
    );
    p.max_dest_rd_atomic = attr.max_qp_rd_atom as u8;
    verbs::rc::rtr_rts(&a.dev, &mut deep, &p).expect("INIT -> RTR at the depth");

    a.no_device_errors();
    b.no_device_errors();
    a.teardown(vec![ud, qa, deep]);
    b.teardown(vec![qb]);
}
