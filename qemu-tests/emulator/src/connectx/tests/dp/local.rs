//! Stage 1: execution on one device. Two RC QPs whose paths point at the device's own GID talk
//! through the internal loopback (the same transport code as over a fabric).

use firmware_interface::cqe::{opcode as co, syndrome as cs};
use firmware_interface::ctx::qpc;
use firmware_interface::eqe::{self, event};
use firmware_interface::wqe;

use super::*;
use crate::{DeviceError, WqeFault};

/// Message sizes every operation is tried with.
pub(crate) const SIZES: &[usize] = &[0, 1, 4095, 4096, 4097, 1 << 20];
const BIG: u64 = (1 << 20) + 4096;

pub(crate) struct Pair {
    pub n: Node,
    pub cq_a: TCq,
    pub cq_b: TCq,
    pub a: TQp,
    pub b: TQp,
}

pub(crate) fn pair_with(ca: Conn, cb: Conn, log_cq: u32) -> Pair {
    pair_on(Node::new([10, 0, 0, 1]), ca, cb, log_cq)
}

/// Two connected RC QPs on node `n`.
pub(crate) fn pair_on(mut n: Node, ca: Conn, cb: Conn, log_cq: u32) -> Pair {
    let cq_a = n.cq(log_cq);
    let cq_b = n.cq(log_cq);
    let a = n.qp(qpc::ST_RC, &cq_a, &cq_a, 6, Some((6, 2)));
    let b = n.qp(qpc::ST_RC, &cq_b, &cq_b, 6, Some((6, 2)));
    let ip = n.ip;
    n.connect(&a, b.qpn, ip, ca);
    n.connect(&b, a.qpn, ip, cb);
    Pair {
        n,
        cq_a,
        cq_b,
        a,
        b,
    }
}

pub(crate) fn pair() -> Pair {
    pair_with(Conn::default(), Conn::default(), 6)
}

#[test]
fn send_every_size() {
    let mut t = pair();
    let src = t.n.mr(BIG, ALL);
    let dst = t.n.mr(BIG, ALL);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, i as u32);
        t.n.h.mem.wr(src.addr, &data);
        t.n.recv(&mut t.b, &dst, 0, BIG as u32);
        let idx =
            t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, len as u32));
        t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
        let r = t.n.cqe(&mut t.cq_b);
        assert_eq!(
            (
                r.opcode,
                r.qpn,
                r.byte_cnt,
                r.wqe_counter,
                r.flags_rqpn & 0xff_ffff
            ),
            (co::RESP_SEND, t.b.qpn, len as u32, i as u16, t.a.qpn),
            "{r:x?}"
        );
        assert_eq!(r.uidx, 0x77, "user index from the QPC");
        assert!(t.n.h.mem.rd(dst.addr, len) == data, "size {len}");
    }
    assert!(t.n.h.dev.errors().is_empty(), "{:?}", t.n.h.dev.errors());
}

#[test]
fn the_first_packet_raises_comm_est_once() {
    let mut t = pair();
    let _ = t.n.eqes(true);
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    let comm_est = |ev: &[(u8, [u8; 28])]| -> Vec<u32> {
        ev.iter()
            .filter(|(ty, _)| *ty == event::COMM_EST)
            .map(|(_, d)| data32(d, eqe::QP_EVENT_QPN))
            .collect()
    };
    for i in 0..2 {
        t.n.recv(&mut t.b, &dst, 0, 4096);
        let idx = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 64));
        t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
        let _ = t.n.cqe(&mut t.cq_b);
        let ev = t.n.eqes(true);
        // the receiver's (in RTS since before the packet, as rdma_accept leaves it) once;
        // the ACKs the sender got are responses, not requests: none for it
        let want: Vec<u32> = if i == 0 { vec![t.b.qpn] } else { vec![] };
        assert_eq!(comm_est(&ev), want, "send {i}");
    }
}

#[test]
fn send_with_immediate_inline_and_several_sges() {
    let mut t = pair();
    let src = t.n.mr(8192, ALL);
    let dst = t.n.mr(8192, ALL);
    let data = pattern(3000, 7);
    t.n.h.mem.wr(src.addr, &data);
    // Three gather entries, two scatter entries.
    t.n.post_recv(
        &mut t.b,
        &[(dst.addr, 1000, dst.key), (dst.addr + 4096, 3000, dst.key)],
    );
    let mut wr = Wr::new(SEND_IMM)
        .sge(&src, 0, 100)
        .sge(&src, 100, 2000)
        .sge(&src, 2100, 900);
    wr.imm = 0x1234_5678;
    wr.solicited = true;
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND_IMM, idx);
    let r = t.n.cqe(&mut t.cq_b);
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm, r.se),
        (co::RESP_SEND_IMM, 3000, 0x1234_5678, true)
    );
    assert_eq!(t.n.h.mem.rd(dst.addr, 1000), data[..1000]);
    assert_eq!(t.n.h.mem.rd(dst.addr + 4096, 2000), data[1000..]);
    // Inline data.
    t.n.recv(&mut t.b, &dst, 0, 8192);
    let mut wr = Wr::new(SEND);
    wr.inline = Some(b"inline payload!".to_vec());
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
    let r = t.n.cqe(&mut t.cq_b);
    assert_eq!((r.opcode, r.byte_cnt), (co::RESP_SEND, 15));
    assert_eq!(t.n.h.mem.rd(dst.addr, 15), b"inline payload!");
}

#[test]
fn write_every_size_and_write_with_immediate() {
    let mut t = pair();
    let src = t.n.mr(BIG, ALL);
    let dst = t.n.mr(BIG, ALL);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 100 + i as u32);
        t.n.h.mem.wr(src.addr, &data);
        let wr = Wr::new(RDMA_WRITE).sge(&src, 0, len as u32).remote(&dst, 3);
        let idx = t.n.post_send(&mut t.a, &wr);
        t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE, idx);
        assert!(t.n.h.mem.rd(dst.addr + 3, len) == data, "size {len}");
        assert!(
            t.n.poll_cq(&mut t.cq_b).is_none(),
            "a WRITE consumes no receive"
        );
    }
    // WRITE with immediate consumes a receive WQE and reports the write's length.
    t.n.recv(&mut t.b, &dst, 0, 16);
    let data = pattern(5000, 9);
    t.n.h.mem.wr(src.addr, &data);
    let mut wr = Wr::new(RDMA_WRITE_IMM).sge(&src, 0, 5000).remote(&dst, 0);
    wr.imm = 0xdead_beef;
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE_IMM, idx);
    let r = t.n.cqe(&mut t.cq_b);
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm),
        (co::RESP_WR_IMM, 5000, 0xdead_beef)
    );
    assert_eq!(t.n.h.mem.rd(dst.addr, 5000), data);
}

#[test]
fn read_every_size() {
    let mut t = pair();
    let local = t.n.mr(BIG, ALL);
    let remote = t.n.mr(BIG, ALL);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 200 + i as u32);
        t.n.h.mem.wr(remote.addr + 5, &data);
        let wr = Wr::new(RDMA_READ)
            .sge(&local, 0, len as u32)
            .remote(&remote, 5);
        let idx = t.n.post_send(&mut t.a, &wr);
        let c = t.n.cqe(&mut t.cq_a);
        c.req_ok(t.a.qpn, RDMA_READ, idx);
        assert_eq!(c.byte_cnt, len as u32);
        assert!(t.n.h.mem.rd(local.addr, len) == data, "size {len}");
    }
}

#[test]
fn atomics_are_big_endian_and_return_the_old_value() {
    let mut t = pair();
    let local = t.n.mr(64, ALL);
    let remote = t.n.mr(64, ALL);
    t.n.h.mem.wr(remote.addr + 8, &100u64.to_be_bytes());
    // FETCH_ADD 5: 100 → 105, returns 100.
    let mut wr = Wr::new(ATOMIC_FA).sge(&local, 0, 8).remote(&remote, 8);
    wr.atomic = Some((5, 0));
    let idx = t.n.post_send(&mut t.a, &wr);
    let c = t.n.cqe(&mut t.cq_a);
    c.req_ok(t.a.qpn, ATOMIC_FA, idx);
    assert_eq!(c.byte_cnt, 8);
    assert_eq!(t.n.h.mem.rd(local.addr, 8), 100u64.to_be_bytes());
    assert_eq!(t.n.h.mem.rd(remote.addr + 8, 8), 105u64.to_be_bytes());
    // CMP_SWP that fails (compare 7 ≠ 105): unchanged, returns 105.
    let mut wr = Wr::new(ATOMIC_CS).sge(&local, 8, 8).remote(&remote, 8);
    wr.atomic = Some((999, 7));
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, ATOMIC_CS, idx);
    assert_eq!(t.n.h.mem.rd(local.addr + 8, 8), 105u64.to_be_bytes());
    assert_eq!(t.n.h.mem.rd(remote.addr + 8, 8), 105u64.to_be_bytes());
    // CMP_SWP that succeeds.
    let mut wr = Wr::new(ATOMIC_CS).sge(&local, 16, 8).remote(&remote, 8);
    wr.atomic = Some((999, 105));
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a);
    assert_eq!(t.n.h.mem.rd(local.addr + 16, 8), 105u64.to_be_bytes());
    assert_eq!(t.n.h.mem.rd(remote.addr + 8, 8), 999u64.to_be_bytes());
    // A misaligned target is an invalid request.
    let mut wr = Wr::new(ATOMIC_FA).sge(&local, 0, 8).remote(&remote, 4);
    wr.atomic = Some((1, 0));
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a)
        .err(co::REQ_ERR, cs::REMOTE_INVAL_REQ_ERR);
    let ev = t.n.eqes(true);
    assert!(
        ev.iter()
            .any(|(ty, d)| *ty == event::WQ_INVAL_REQ_ERROR
                && data32(d, eqe::QP_EVENT_QPN) == t.b.qpn),
        "{ev:?}"
    );
}

#[test]
fn atomic_responses_follow_the_negotiated_endianness() {
    // With `atomic_req_8B_endianness_mode` = host endianness (and HOST_ENDIANNESS `he` =
    // little, as the bring-up wrote), the original value lands little-endian; the target
    // stays as the responder computes it (big-endian).
    let node = Node::with_atomic_mode(
        [10, 0, 0, 1],
        profile(),
        Some(firmware_interface::ctx::atomic_caps::REQ_MODE_HOST_ENDIANNESS),
    );
    let mut t = pair_on(node, Conn::default(), Conn::default(), 6);
    let local = t.n.mr(64, ALL);
    let remote = t.n.mr(64, ALL);
    t.n.h
        .mem
        .wr(remote.addr, &0x0102_0304_0506_0708u64.to_be_bytes());
    let mut wr = Wr::new(ATOMIC_FA).sge(&local, 0, 8).remote(&remote, 0);
    wr.atomic = Some((1, 0));
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, ATOMIC_FA, idx);
    assert_eq!(
        t.n.h.mem.rd(local.addr, 8),
        0x0102_0304_0506_0708u64.to_le_bytes()
    );
    assert_eq!(
        t.n.h.mem.rd(remote.addr, 8),
        0x0102_0304_0506_0709u64.to_be_bytes()
    );
    let mut wr = Wr::new(ATOMIC_CS).sge(&local, 8, 8).remote(&remote, 0);
    wr.atomic = Some((7, 0x0102_0304_0506_0709));
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, ATOMIC_CS, idx);
    assert_eq!(
        t.n.h.mem.rd(local.addr + 8, 8),
        0x0102_0304_0506_0709u64.to_le_bytes()
    );
    assert_eq!(t.n.h.mem.rd(remote.addr, 8), 7u64.to_be_bytes());
}

#[test]
fn atomic_with_a_bad_local_key_is_a_protection_error_not_a_length_error() {
    // The SGE names the right 8 bytes; its key is what is wrong (a wrong variant byte, or no
    // local write access for the result).
    for read_only in [false, true] {
        let mut t = pair();
        let local = t.n.mr(64, if read_only { LR } else { ALL });
        let remote = t.n.mr(64, ALL);
        t.n.h.mem.wr(remote.addr, &7u64.to_be_bytes());
        let key = if read_only {
            local
        } else {
            Mr {
                key: local.key ^ 0x01,
                ..local
            }
        };
        let mut wr = Wr::new(ATOMIC_FA).sge(&key, 0, 8).remote(&remote, 0);
        wr.atomic = Some((1, 0));
        t.n.post_send(&mut t.a, &wr);
        t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::LOCAL_PROT_ERR);
        assert_eq!(t.n.h.mem.rd(remote.addr, 8), 7u64.to_be_bytes());
    }
}

#[test]
fn mtt_keys_translate_page_by_page() {
    let mut t = pair();
    // Three physical pages that are not contiguous, mapped at one virtual range.
    let mut pages = Vec::new();
    for _ in 0..3 {
        pages.push(t.n.h.mem.alloc(4096, 4096));
        t.n.h.mem.alloc(4096, 4096); // a gap
    }
    let va = 0x5000_0000_0800u64;
    let dst = t.n.mr_mtt(va, 8192, &pages, ALL);
    let src = t.n.mr(8192, ALL);
    let data = pattern(8192, 3);
    t.n.h.mem.wr(src.addr, &data);
    let wr = Wr::new(RDMA_WRITE).sge(&src, 0, 8192).remote(&dst, 0);
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE, 0);
    assert_eq!(t.n.h.mem.rd(pages[0] + 0x800, 0x800), data[..0x800]);
    assert_eq!(t.n.h.mem.rd(pages[1], 4096), data[0x800..0x1800]);
    assert_eq!(t.n.h.mem.rd(pages[2], 0x800), data[0x1800..]);
    // Reading it back through the MTT key as the local key of a READ.
    let back = t.n.mr(8192, ALL);
    let wr = Wr::new(RDMA_READ).sge(&back, 0, 8192).remote(&dst, 0);
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a);
    assert_eq!(t.n.h.mem.rd(back.addr, 8192), data);
}

#[test]
fn mtt_extents_of_contiguous_pages_translate_as_one_piece_each() {
    let mut t = pair();
    // Pages 0-1 contiguous, a gap, page 2 alone, a gap, pages 3-4 contiguous: the key's
    // range starts and ends inside a page.
    let first = t.n.h.mem.alloc(2 * 4096, 4096);
    t.n.h.mem.alloc(4096, 4096);
    let alone = t.n.h.mem.alloc(4096, 4096);
    t.n.h.mem.alloc(4096, 4096);
    let last = t.n.h.mem.alloc(2 * 4096, 4096);
    let pages = [first, first + 4096, alone, last, last + 4096];
    let va = 0x6000_0000_0800u64;
    let len = 5 * 4096 - 0x1000;
    let dst = t.n.mr_mtt(va, len, &pages, ALL);
    let src = t.n.mr(len, ALL);
    let data = pattern(len as usize, 9);
    t.n.h.mem.wr(src.addr, &data);
    // One WRITE over the whole key, then one from inside the first extent into the last.
    let wr = Wr::new(RDMA_WRITE).sge(&src, 0, len as u32).remote(&dst, 0);
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE, 0);
    let mut got = t.n.h.mem.rd(first + 0x800, 2 * 4096 - 0x800);
    got.extend(t.n.h.mem.rd(alone, 4096));
    got.extend(t.n.h.mem.rd(last, 4096 + 0x800));
    assert_eq!(got, data);
    // Nothing outside the key's range moved.
    assert_eq!(t.n.h.mem.rd(first, 0x800), vec![0u8; 0x800]);
    assert_eq!(t.n.h.mem.rd(last + 4096 + 0x800, 0x800), vec![0u8; 0x800]);
    let back = t.n.mr(0x3000, ALL);
    let wr = Wr::new(RDMA_READ)
        .sge(&back, 0, 0x3000)
        .remote(&dst, 0x1000);
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a);
    assert_eq!(t.n.h.mem.rd(back.addr, 0x3000), data[0x1000..0x4000]);
}

#[test]
fn bad_lkey_is_a_local_protection_error_and_the_rest_is_flushed() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.recv(&mut t.a, &dst, 0, 4096); // will be flushed
    t.n.recv(&mut t.b, &dst, 0, 4096);
    let bad = Mr {
        key: src.key ^ 0x01, // wrong variant byte
        ..src
    };
    let i0 = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&bad, 0, 10));
    let i1 =
        t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 10).unsignaled());
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::LOCAL_PROT_ERR);
    assert_eq!((c.wqe_counter, c.send_opcode, c.qpn), (i0, SEND, t.a.qpn));
    // Flushes: the unsignaled send (flush CQEs are always written) and the posted receive.
    let mut flushed = [t.n.cqe(&mut t.cq_a), t.n.cqe(&mut t.cq_a)];
    flushed.sort_by_key(|c| c.opcode);
    flushed[0].err(co::REQ_ERR, cs::WR_FLUSH_ERR);
    assert_eq!(flushed[0].wqe_counter, i1);
    flushed[1].err(co::RESP_ERR, cs::WR_FLUSH_ERR);
    assert_eq!(flushed[1].wqe_counter, 0);
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_ERR as u8));
    // Posting in ERR: flushed on the next poll.
    let i2 = t.n.post_send(&mut t.a, &Wr::new(NOP));
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::WR_FLUSH_ERR);
    assert_eq!(c.wqe_counter, i2);
    t.n.recv(&mut t.a, &dst, 0, 64);
    t.n.cqe(&mut t.cq_a).err(co::RESP_ERR, cs::WR_FLUSH_ERR);
    // A PD mismatch and a read-only key are local protection errors too.
    let mut t = pair();
    let pd2 = t.n.h.alloc_pd();
    let addr = t.n.h.mem.alloc(4096, 4096);
    let other = t.n.mr_at(addr, 4096, ALL, pd2);
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&other, 0, 10));
    t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::LOCAL_PROT_ERR);
    let ro = t.n.mr(4096, LR);
    let remote = t.n.mr(4096, ALL);
    t.n.post_send(
        &mut t.b,
        &Wr::new(RDMA_READ).sge(&ro, 0, 8).remote(&remote, 0),
    );
    t.n.cqe(&mut t.cq_b).err(co::REQ_ERR, cs::LOCAL_PROT_ERR);
}

/// A remote write that the responder must refuse: the requester gets REMOTE_ACCESS_ERR, the
/// target is untouched, both QPs end in ERR, the responder posts WQ_ACCESS_ERROR.
fn refused_write(t: &mut Pair, target: Mr, off: u64, len: u32) {
    let src = t.n.mr(8192, ALL);
    t.n.h.mem.wr(src.addr, &pattern(8192, 1));
    let before = t.n.h.mem.rd(target.addr, target.len as usize);
    t.n.recv(&mut t.b, &src, 0, 64); // flushed when B goes to ERR
    let i0 = t.n.post_send(
        &mut t.a,
        &Wr::new(RDMA_WRITE).sge(&src, 0, len).remote(&target, off),
    );
    let i1 = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 8));
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::REMOTE_ACCESS_ERR);
    assert_eq!(c.wqe_counter, i0);
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::WR_FLUSH_ERR);
    assert_eq!(c.wqe_counter, i1);
    assert_eq!(t.n.h.mem.rd(target.addr, target.len as usize), before);
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_ERR as u8));
    assert_eq!(t.n.h.dev.qp_state(t.b.qpn), Some(qpc::STATE_ERR as u8));
    t.n.cqe(&mut t.cq_b).err(co::RESP_ERR, cs::WR_FLUSH_ERR);
    let ev = t.n.eqes(true);
    assert!(
        ev.iter().any(|(ty, d)| *ty == event::WQ_ACCESS_ERROR
            && d[eqe::QP_EVENT_TYPE - eqe::DATA] == eqe::RES_QP
            && data32(d, eqe::QP_EVENT_QPN) == t.b.qpn),
        "{ev:?}"
    );
}

#[test]
fn remote_write_with_wrong_pd_is_refused() {
    let mut t = pair();
    let pd2 = t.n.h.alloc_pd();
    let addr = t.n.h.mem.alloc(4096, 4096);
    let target = t.n.mr_at(addr, 4096, ALL, pd2);
    refused_write(&mut t, target, 0, 100);
}

#[test]
fn remote_write_out_of_bounds_is_refused() {
    let mut t = pair();
    let target = t.n.mr(4096, ALL);
    // 3000 bytes at offset 2000 run 904 bytes past the key (a multi-packet write: nothing of
    // it may land).
    refused_write(&mut t, target, 2000, 3000);
}

#[test]
fn remote_write_without_remote_write_access_is_refused() {
    let mut t = pair();
    let target = t.n.mr(4096, LR | LW | RR);
    refused_write(&mut t, target, 0, 100);
}

#[test]
fn remote_write_to_a_qp_without_rwe_is_refused() {
    let no_rwe = Conn {
        rwe: false,
        ..Conn::default()
    };
    let mut t = pair_with(Conn::default(), no_rwe, 6);
    let target = t.n.mr(4096, ALL);
    refused_write(&mut t, target, 0, 100);
}

#[test]
fn remote_read_without_access_is_refused() {
    let mut t = pair();
    let local = t.n.mr(4096, ALL);
    let target = t.n.mr(4096, LR | LW | RW);
    t.n.post_send(
        &mut t.a,
        &Wr::new(RDMA_READ).sge(&local, 0, 16).remote(&target, 0),
    );
    t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::REMOTE_ACCESS_ERR);
}

#[test]
fn message_longer_than_the_receive_buffer_is_a_length_error() {
    let mut t = pair();
    let src = t.n.mr(8192, ALL);
    let dst = t.n.mr(8192, ALL);
    t.n.recv(&mut t.b, &dst, 0, 2000);
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 3000));
    t.n.cqe(&mut t.cq_b).err(co::RESP_ERR, cs::LOCAL_LENGTH_ERR);
    t.n.cqe(&mut t.cq_a)
        .err(co::REQ_ERR, cs::REMOTE_INVAL_REQ_ERR);
    assert_eq!(t.n.h.dev.qp_state(t.b.qpn), Some(qpc::STATE_ERR as u8));
}

#[test]
fn rnr_then_success_when_the_receive_is_posted_in_time() {
    let c = Conn {
        min_rnr: 14, // 1.28 ms
        rnr_retry: 3,
        ..Conn::default()
    };
    let mut t = pair_with(c, c, 6);
    let clock = t.n.manual_clock();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.h.mem.wr(src.addr, b"late receiver");
    let idx = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 13));
    assert_eq!(t.n.h.dev.port_stats().rnr_naks_sent, 1);
    assert!(t.n.poll_cq(&mut t.cq_a).is_none());
    let deadline = t.n.h.dev.next_deadline().expect("RNR wait");
    assert_eq!(deadline - clock.load(Ordering::SeqCst), 1_280_000);
    // Not yet: nothing is resent before the RNR timer expires.
    clock.fetch_add(1_000_000, Ordering::SeqCst);
    t.n.h.dev.poll();
    assert_eq!(t.n.h.dev.port_stats().rnr_naks_sent, 1);
    t.n.recv(&mut t.b, &dst, 0, 4096);
    clock.fetch_add(300_000, Ordering::SeqCst);
    t.n.h.dev.poll();
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
    let r = t.n.cqe(&mut t.cq_b);
    assert_eq!((r.opcode, r.byte_cnt), (co::RESP_SEND, 13));
    assert_eq!(t.n.h.mem.rd(dst.addr, 13), b"late receiver");
}

#[test]
fn rnr_retry_exceeded_when_no_receive_comes() {
    let c = Conn {
        min_rnr: 1, // 10 µs
        rnr_retry: 2,
        ..Conn::default()
    };
    let mut t = pair_with(c, c, 6);
    let clock = t.n.manual_clock();
    let src = t.n.mr(4096, ALL);
    let idx = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 13));
    for _ in 0..10 {
        clock.fetch_add(20_000, Ordering::SeqCst);
        t.n.h.dev.poll();
    }
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::RNR_RETRY_EXC_ERR);
    assert_eq!(c.wqe_counter, idx);
    // The first try and two retries.
    assert_eq!(t.n.h.dev.port_stats().rnr_naks_sent, 3);
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_ERR as u8));
}

#[test]
fn cq_overrun_raises_cq_error_and_overwrites_nothing() {
    let mut t = pair_with(Conn::default(), Conn::default(), 6);
    // A's send CQ of 4 entries that nobody consumes.
    let mut small = t.n.cq(2);
    let mut a = t.n.qp(qpc::ST_RC, &small, &small, 6, Some((4, 2)));
    let mut cq_c = t.n.cq(6);
    let mut c = t.n.qp(qpc::ST_RC, &cq_c, &cq_c, 6, Some((6, 2)));
    let ip = t.n.ip;
    t.n.connect(&a, c.qpn, ip, Conn::default());
    t.n.connect(&c, a.qpn, ip, Conn::default());
    let src = t.n.mr(4096, ALL);
    for _ in 0..5 {
        t.n.recv(&mut c, &src, 0, 4096);
    }
    for _ in 0..4 {
        t.n.post_send(&mut a, &Wr::new(SEND).sge(&src, 0, 4));
    }
    let before = t.n.h.mem.rd(small.base, 256);
    assert!(t.n.h.dev.errors().is_empty());
    t.n.post_send(&mut a, &Wr::new(SEND).sge(&src, 0, 4));
    assert!(
        t.n.h
            .dev
            .errors()
            .contains(&DeviceError::CqOverrun { cqn: small.cqn }),
        "{:?}",
        t.n.h.dev.errors()
    );
    assert_eq!(t.n.h.mem.rd(small.base, 256), before, "nothing overwritten");
    let ev = t.n.eqes(true);
    let cq_err = ev
        .iter()
        .find(|(ty, _)| *ty == event::CQ_ERROR)
        .expect("CQ_ERROR event");
    assert_eq!(data32(&cq_err.1, eqe::CQ_ERR_CQN), small.cqn);
    assert_eq!(cq_err.1[eqe::CQ_ERR_SYNDROME - eqe::DATA], 1, "overrun");
    // The QP that could not complete went to ERR with a catastrophic error.
    assert!(
        ev.iter()
            .any(|(ty, d)| *ty == event::WQ_CATAS_ERROR && data32(d, eqe::QP_EVENT_QPN) == a.qpn)
    );
    assert_eq!(t.n.h.dev.qp_state(a.qpn), Some(qpc::STATE_ERR as u8));
    // The four CQEs are intact and in order.
    for i in 0..4u16 {
        let c = t.n.poll_cq(&mut small).expect("CQE");
        c.req_ok(a.qpn, SEND, i);
    }
    assert!(t.n.poll_cq(&mut small).is_none());
    let _ = t.n.cqe(&mut cq_c);
}

#[test]
fn cqe_owner_bit_follows_the_pass_over_several_wraps() {
    let mut t = pair_with(Conn::default(), Conn::default(), 2);
    let src = t.n.mr(4096, ALL);
    for i in 0..20u32 {
        let idx = t.n.post_send(&mut t.a, &Wr::new(NOP));
        let c = t.n.cqe(&mut t.cq_a);
        c.req_ok(t.a.qpn, NOP, idx);
        assert_eq!(u32::from(c.owner), (i >> 2) & 1, "CQE {i}");
    }
    // Several in flight at once, consumed after.
    for _ in 0..4 {
        t.n.recv(&mut t.b, &src, 0, 64);
        t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 8));
    }
    for i in 20..24u32 {
        let c = t.n.poll_cq(&mut t.cq_a).expect("CQE");
        assert_eq!(u32::from(c.owner), (i >> 2) & 1);
    }
    assert!(t.n.h.dev.errors().is_empty(), "{:?}", t.n.h.dev.errors());
}

#[test]
fn selective_signaling_and_nop() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.recv(&mut t.b, &dst, 0, 4096);
    t.n.post_send(&mut t.a, &Wr::new(NOP).unsignaled());
    let w = Wr::new(RDMA_WRITE)
        .sge(&src, 0, 10)
        .remote(&dst, 0)
        .unsignaled();
    t.n.post_send(&mut t.a, &w);
    let idx = t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 10));
    // One CQE, for the last WQE only.
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
    assert!(t.n.poll_cq(&mut t.cq_a).is_none());
    assert_eq!(idx, 2);
}

#[test]
fn completion_events_follow_arming() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    // Armed: the next CQE posts one COMP EQE naming the CQ, then the CQ is disarmed.
    t.n.arm(&t.cq_a, 0, false);
    t.n.post_send(&mut t.a, &Wr::new(NOP));
    t.n.post_send(&mut t.a, &Wr::new(NOP));
    let ev = t.n.eqes(false);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, event::COMP);
    assert_eq!(data32(&ev[0].1, eqe::COMP_CQN), t.cq_a.cqn);
    // Arming with CQEs not yet consumed fires at once.
    t.n.arm(&t.cq_a, 1, false);
    assert_eq!(t.n.eqes(false).len(), 1);
    t.n.poll_cq(&mut t.cq_a).unwrap();
    t.n.poll_cq(&mut t.cq_a).unwrap();
    // Solicited only: an unsolicited receive posts nothing, a solicited one does.
    t.n.arm(&t.cq_b, 0, true);
    t.n.recv(&mut t.b, &src, 0, 64);
    t.n.recv(&mut t.b, &src, 0, 64);
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 8));
    assert!(t.n.eqes(false).is_empty());
    let mut wr = Wr::new(SEND).sge(&src, 0, 8);
    wr.solicited = true;
    t.n.post_send(&mut t.a, &wr);
    let ev = t.n.eqes(false);
    assert_eq!(ev.len(), 1);
    assert_eq!(data32(&ev[0].1, eqe::COMP_CQN), t.cq_b.cqn);
    let r1 = t.n.poll_cq(&mut t.cq_b).unwrap();
    let r2 = t.n.poll_cq(&mut t.cq_b).unwrap();
    assert!(!r1.se && r2.se);
}

#[test]
fn arming_through_the_doorbell_record_alone_works_when_polled() {
    let mut t = pair();
    let word = 2u32 << 28 | (t.cq_a.ci & 0xff_ffff);
    t.n.h.mem.wr(t.cq_a.dbr + 4, &word.to_be_bytes());
    t.n.h.dev.poll();
    t.n.post_send(&mut t.a, &Wr::new(NOP));
    assert_eq!(t.n.eqes(false).len(), 1);
    // Polling again sees no new arm request.
    t.n.h.dev.poll();
    t.n.post_send(&mut t.a, &Wr::new(NOP));
    assert!(t.n.eqes(false).is_empty());
}

#[test]
fn wqes_posted_before_rts_run_at_rts_and_reset_doorbells_are_errors() {
    let mut n = Node::new([10, 0, 0, 1]);
    let mut cq = n.cq(6);
    let mut a = n.qp(qpc::ST_RC, &cq, &cq, 6, Some((6, 2)));
    let mut b = n.qp(qpc::ST_RC, &cq, &cq, 6, Some((6, 2)));
    let ip = n.ip;
    // RESET: a doorbell is a driver bug.
    let (_, w) = n.write_send(&mut a, &Wr::new(NOP));
    n.ring(&mut a, &w[..8]);
    assert!(n.h.dev.errors().contains(&DeviceError::SqDoorbellBadState {
        qpn: a.qpn,
        state: qpc::STATE_RST as u8
    }));
    n.h.mem.wr(a.dbr + 4, &0u32.to_be_bytes());
    a.sq_pi = 0;
    n.connect(&b, a.qpn, ip, Conn::default());
    n.rst2init_rc(&a, Conn::default());
    n.init2rtr_rc(&a, b.qpn, ip, Conn::default());
    let src = n.mr(4096, ALL);
    n.recv(&mut b, &src, 0, 64);
    // RTR: posted and rung, not executed.
    let idx = n.post_send(&mut a, &Wr::new(SEND).sge(&src, 0, 8));
    n.h.dev.poll();
    assert!(n.poll_cq(&mut cq).is_none());
    n.rtr2rts(&a, Conn::default());
    let mut got = [n.cqe(&mut cq), n.cqe(&mut cq)];
    got.sort_by_key(|c| c.opcode);
    got[0].req_ok(a.qpn, SEND, idx);
    assert_eq!(got[1].opcode, co::RESP_SEND);
}

#[test]
fn untrapped_send_record_without_doorbell_runs_on_poll() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.h.mem.wr(src.addr, b"no doorbell");
    t.n.recv(&mut t.b, &dst, 0, 64);
    let (idx, _) = t.n.write_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 11));
    assert!(t.n.poll_cq(&mut t.cq_a).is_none());
    t.n.h.dev.poll();
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, idx);
    assert_eq!(t.n.h.mem.rd(dst.addr, 11), b"no doorbell");
}

#[test]
fn blueflame_bursts_are_doorbells() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    // A 2-WQEBB WQE (inline data) copied whole into the BlueFlame register.
    let mut wr = Wr::new(RDMA_WRITE).remote(&dst, 0);
    wr.inline = Some(pattern(80, 5));
    let (idx, b) = t.n.write_send(&mut t.a, &wr);
    assert_eq!(b.len(), 128);
    let off = t.n.uar as usize * 4096 + firmware_interface::uar::BF_OFFSET + 256;
    t.n.h.dev.mmio_write(off, &b[..64]);
    t.n.h.dev.mmio_write(off + 64, &b[64..]);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE, idx);
    assert_eq!(t.n.h.mem.rd(dst.addr, 80), pattern(80, 5));
    let _ = src;
    assert!(t.n.h.dev.errors().is_empty(), "{:?}", t.n.h.dev.errors());
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    let mut t = pair();
    // A WQE whose index is not its SQ position.
    let mut b = Wr::new(NOP).bytes(t.a.qpn, 5);
    t.n.h.mem.wr(t.a.base + t.a.rq_bytes, &b);
    t.a.sq_pi = 1;
    t.n.h.mem.wr(t.a.dbr + 4, &1u32.to_be_bytes());
    t.n.ring(&mut t.a, &b[..8]);
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::LOCAL_QP_OP_ERR);
    assert!(t.n.h.dev.errors().contains(&DeviceError::BadWqe {
        qpn: t.a.qpn,
        wqe_counter: 0,
        fault: WqeFault::BadIndex {
            expected: 0,
            found: 5
        }
    }));
    // ds = 0, an opcode RC does not run, another QP's number.
    type Mangle = fn(&mut Vec<u8>);
    type Expect = fn(u32) -> WqeFault;
    let cases: [(Mangle, Expect); 3] = [
        (|b| b[7] &= 0xc0, |_| WqeFault::BadDs(0)),
        (
            |b| b[3] = wqe::opcode::UMR,
            |_| WqeFault::BadOpcode(wqe::opcode::UMR),
        ),
        (|b| b[6] ^= 0x40, |qpn| WqeFault::QpnMismatch(qpn ^ 0x40)),
    ];
    for (mangle, fault) in cases {
        let mut t = pair();
        b = Wr::new(NOP).bytes(t.a.qpn, 0);
        mangle(&mut b);
        t.n.h.mem.wr(t.a.base + t.a.rq_bytes, &b);
        t.n.h.mem.wr(t.a.dbr + 4, &1u32.to_be_bytes());
        t.a.sq_pi = 1;
        t.n.h.dev.poll();
        t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::LOCAL_QP_OP_ERR);
        let want = DeviceError::BadWqe {
            qpn: t.a.qpn,
            wqe_counter: 0,
            fault: fault(t.a.qpn),
        };
        assert!(
            t.n.h.dev.errors().contains(&want),
            "{:?}",
            t.n.h.dev.errors()
        );
    }
}

#[test]
fn a_producer_more_than_a_ring_ahead_is_catastrophic() {
    let mut t = pair();
    t.n.h.mem.wr(t.a.dbr + 4, &200u32.to_be_bytes());
    t.n.h.dev.poll();
    assert!(t.n.h.dev.errors().iter().any(|e| matches!(
        e,
        DeviceError::WqOverflow {
            sq: true,
            producer: 200,
            ..
        }
    )));
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_ERR as u8));
    let ev = t.n.eqes(true);
    assert!(ev.iter().any(|(ty, _)| *ty == event::WQ_CATAS_ERROR));
}

#[test]
fn modify_to_err_flushes_everything_posted() {
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    for _ in 0..3 {
        t.n.recv(&mut t.a, &src, 0, 64);
    }
    t.n.modify_to_err(&t.a);
    for i in 0..3 {
        let c = t.n.cqe(&mut t.cq_a);
        c.err(co::RESP_ERR, cs::WR_FLUSH_ERR);
        assert_eq!(c.wqe_counter, i);
    }
    // Back to RESET: the counters start over.
    let m = {
        let mut m = super::super::msg(firmware_interface::opcode::QP_2RST, 0, 16);
        set(&mut m, cmds::qp_2rst_in::QPN, t.a.qpn);
        m
    };
    t.n.h.ok(&m, 16);
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_RST as u8));
}

#[test]
fn psns_wrap_and_query_qp_shows_the_live_counters() {
    let c = Conn {
        sq_psn: 0xff_fff0,
        rq_psn: 0xff_fff0,
        ..Conn::default()
    };
    let mut t = pair_with(c, c, 6);
    let src = t.n.mr(65536, ALL);
    let dst = t.n.mr(65536, ALL);
    t.n.h.mem.wr(src.addr, &pattern(65536, 4));
    t.n.recv(&mut t.b, &dst, 0, 65536);
    // 64 packets at MTU 1024: PSNs 0xfffff0 … 0x2f.
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 65536));
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND, 0);
    assert_eq!(t.n.cqe(&mut t.cq_b).byte_cnt, 65536);
    assert_eq!(t.n.h.mem.rd(dst.addr, 65536), pattern(65536, 4));
    let query = |n: &mut Node, qpn: u32| {
        let mut m = super::super::msg(firmware_interface::opcode::QUERY_QP, 0, 16);
        set(&mut m, cmds::query_qp_in::QPN, qpn);
        n.h.ok(&m, 464)
    };
    let o = query(&mut t.n, t.a.qpn);
    assert_eq!(q(qpc::NEXT_SEND_PSN).get(&o), 0x30);
    assert_eq!(q(qpc::LAST_ACKED_PSN).get(&o), 0x2f);
    assert_eq!(q(qpc::HW_SQ_WQEBB_COUNTER).get(&o), 1);
    let o = query(&mut t.n, t.b.qpn);
    assert_eq!(q(qpc::NEXT_RCV_PSN).get(&o), 0x30);
    assert_eq!(q(qpc::RMSN).get(&o), 1);
    assert_eq!(q(qpc::HW_RQ_COUNTER).get(&o), 1);
}

#[test]
fn uc_sends_and_writes_without_acks() {
    let mut n = Node::new([10, 0, 0, 1]);
    let mut cq_a = n.cq(6);
    let mut cq_b = n.cq(6);
    let mut a = n.qp(qpc::ST_UC, &cq_a, &cq_a, 6, Some((6, 2)));
    let mut b = n.qp(qpc::ST_UC, &cq_b, &cq_b, 6, Some((6, 2)));
    let ip = n.ip;
    n.connect(&a, b.qpn, ip, Conn::default());
    n.connect(&b, a.qpn, ip, Conn::default());
    let src = n.mr(8192, ALL);
    let dst = n.mr(8192, ALL);
    n.h.mem.wr(src.addr, &pattern(5000, 8));
    n.recv(&mut b, &dst, 0, 8192);
    let idx = n.post_send(&mut a, &Wr::new(SEND).sge(&src, 0, 5000));
    n.cqe(&mut cq_a).req_ok(a.qpn, SEND, idx);
    assert_eq!(n.cqe(&mut cq_b).byte_cnt, 5000);
    assert_eq!(n.h.mem.rd(dst.addr, 5000), pattern(5000, 8));
    // No receive posted: UC drops the message; the sender completes anyway.
    let idx = n.post_send(&mut a, &Wr::new(SEND).sge(&src, 0, 10));
    n.cqe(&mut cq_a).req_ok(a.qpn, SEND, idx);
    assert!(n.poll_cq(&mut cq_b).is_none());
    assert_eq!(n.h.dev.port_stats().rx_no_wqe, 1);
    assert_eq!(n.h.dev.qp_state(b.qpn), Some(qpc::STATE_RTS as u8));
    // WRITE with immediate.
    n.recv(&mut b, &dst, 0, 16);
    let mut wr = Wr::new(RDMA_WRITE_IMM)
        .sge(&src, 0, 3000)
        .remote(&dst, 4096);
    wr.imm = 5;
    n.post_send(&mut a, &wr);
    n.cqe(&mut cq_a);
    let r = n.cqe(&mut cq_b);
    assert_eq!((r.opcode, r.byte_cnt, r.imm), (co::RESP_WR_IMM, 3000, 5));
    assert_eq!(n.h.mem.rd(dst.addr + 4096, 3000), pattern(5000, 8)[..3000]);
    // READ is not a UC operation.
    n.post_send(&mut a, &Wr::new(RDMA_READ).sge(&src, 0, 8).remote(&dst, 0));
    n.cqe(&mut cq_a).err(co::REQ_ERR, cs::LOCAL_QP_OP_ERR);
}

/// A small deterministic generator for the hostile-input test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn garbage_rings_records_doorbells_and_packets_never_panic() {
    use roce_wire::packet::{
        Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ExtHeaders, ImmDt, Opcode, Packet, Reth,
    };
    for seed in 1..=48u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut t = pair();
        let mr = t.n.mr(65536, ALL);
        // Send WQEs: garbage, half of them with a plausible control segment.
        for bb in 0..t.a.sq_bbs {
            let mut b = pattern(64, r.next() as u32);
            if r.below(2) == 0 {
                let ops = [
                    SEND, SEND_IMM, RDMA_WRITE, RDMA_READ, ATOMIC_CS, ATOMIC_FA, NOP,
                ];
                b[0] = 0;
                b[1..3].copy_from_slice(&(bb as u16).to_be_bytes());
                b[3] = ops[r.below(ops.len() as u64) as usize];
                b[4..7].copy_from_slice(&t.a.qpn.to_be_bytes()[1..]);
                b[7] = r.below(8) as u8;
                if r.below(2) == 0 {
                    // a real key and address in the first data segment slot
                    b[16..20].copy_from_slice(&(r.below(70000) as u32).to_be_bytes());
                    b[20..24].copy_from_slice(&mr.key.to_be_bytes());
                    b[24..32].copy_from_slice(&(mr.addr + r.below(65536)).to_be_bytes());
                }
            }
            t.n.h
                .mem
                .wr(t.a.base + t.a.rq_bytes + u64::from(bb) * 64, &b);
        }
        // Receive WQEs: garbage with some real keys.
        for k in 0..t.b.rq_n {
            let mut b = pattern(t.b.rq_stride as usize, r.next() as u32);
            if r.below(2) == 0 {
                b[0..4].copy_from_slice(&(r.below(9000) as u32).to_be_bytes());
                b[4..8].copy_from_slice(&mr.key.to_be_bytes());
                b[8..16].copy_from_slice(&(mr.addr + r.below(65536)).to_be_bytes());
            }
            t.n.h.mem.wr(t.b.base + u64::from(k) * t.b.rq_stride, &b);
        }
        t.n.h.mem.wr(t.b.dbr, &(r.below(80) as u32).to_be_bytes());
        t.n.h
            .mem
            .wr(t.a.dbr + 4, &(r.below(80) as u32).to_be_bytes());
        t.n.h.mem.wr(t.cq_a.dbr, &(r.next() as u32).to_be_bytes());
        for _ in 0..4 {
            let junk = pattern(64, r.next() as u32);
            let bf = t.n.uar as usize * 4096 + 0x800 + 64 * r.below(16) as usize;
            t.n.h
                .dev
                .mmio_write(bf, &junk[..if r.below(2) == 0 { 8 } else { 64 }]);
            let mut db = junk[..8].to_vec();
            db[4..7].copy_from_slice(&t.a.qpn.to_be_bytes()[1..]);
            t.n.h.dev.mmio_write(t.n.uar as usize * 4096 + 0x800, &db);
            t.n.h.dev.poll();
        }
        // Packets from a hostile peer at the QPs' own address.
        let ip = t.n.ip;
        for _ in 0..64 {
            let op = Opcode::ALL[r.below(Opcode::ALL.len() as u64) as usize];
            let dqp = if r.below(4) == 0 {
                r.below(8) as u32
            } else {
                [t.a.qpn, t.b.qpn][r.below(2) as usize]
            };
            let mut bth = Bth::new(op, dqp, (0x10 + r.below(40) as u32) & 0xff_ffff);
            bth.ack_req = r.below(2) == 0;
            let l = op.ext_layout();
            let va = if r.below(2) == 0 {
                mr.addr + r.below(65536)
            } else {
                r.next()
            };
            let key = if r.below(2) == 0 {
                mr.key
            } else {
                r.next() as u32
            };
            let ext = ExtHeaders {
                deth: l.deth.then_some(Deth {
                    qkey: r.next() as u32,
                    src_qp: r.below(16) as u32,
                }),
                reth: l.reth.then_some(Reth {
                    va,
                    rkey: key,
                    dma_len: r.below(1 << 17) as u32,
                }),
                atomic_eth: l.atomic_eth.then_some(AtomicEth {
                    va,
                    rkey: key,
                    swap_add: r.next(),
                    compare: r.next(),
                }),
                imm_dt: l.imm_dt.then_some(ImmDt {
                    imm: r.next() as u32,
                }),
                ieth: l.ieth.then_some(roce_wire::packet::Ieth { rkey: key }),
                aeth: l.aeth.then_some(Aeth {
                    syndrome: r.next() as u8,
                    msn: r.below(1 << 24) as u32,
                }),
                atomic_ack_eth: l.atomic_ack_eth.then_some(AtomicAckEth { orig: r.next() }),
            };
            let payload = if l.payload {
                pattern(r.below(5000) as usize, r.next() as u32)
            } else {
                Vec::new()
            };
            let pkt = Packet::new(ip, ip, bth, payload).with_ext(ext);
            let Ok(mut frame) = pkt.encode() else {
                continue;
            };
            if r.below(8) == 0 {
                let i = r.below(frame.len() as u64) as usize;
                frame[i] ^= 1 + r.below(255) as u8;
            }
            if r.below(16) == 0 {
                frame.truncate(r.below(frame.len() as u64) as usize);
            }
            t.n.h.dev.rx_frame(&frame);
            t.n.h.dev.poll();
        }
        // The device is still a device: CQEs are well formed, nothing panicked.
        while let Some(c) = t.n.poll_cq(&mut t.cq_a) {
            assert!(c.opcode <= co::RESP_ERR);
        }
        while let Some(c) = t.n.poll_cq(&mut t.cq_b) {
            assert!(c.opcode <= co::RESP_ERR);
        }
    }
}

#[test]
fn iommu_faults_become_access_errors() {
    // Requester: the gather buffer is no longer mapped.
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.recv(&mut t.b, &dst, 0, 4096);
    t.n.h.mem.unmap(src.addr, 4096);
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 100));
    t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::LOCAL_ACCESS_ERR);
    assert!(
        t.n.h
            .dev
            .errors()
            .iter()
            .any(|e| matches!(e, DeviceError::Dma(f) if f.iova == src.addr && !f.write))
    );
    // Responder: the WRITE target is no longer mapped.
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.h.mem.unmap(dst.addr, 4096);
    let wr = Wr::new(RDMA_WRITE).sge(&src, 0, 100).remote(&dst, 0);
    t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::REMOTE_ACCESS_ERR);
    assert!(
        t.n.h
            .dev
            .errors()
            .iter()
            .any(|e| matches!(e, DeviceError::Dma(f) if f.iova == dst.addr && f.write))
    );
    // Responder: the receive buffer is no longer mapped.
    let mut t = pair();
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.recv(&mut t.b, &dst, 0, 4096);
    t.n.h.mem.unmap(dst.addr, 4096);
    t.n.post_send(&mut t.a, &Wr::new(SEND).sge(&src, 0, 100));
    t.n.cqe(&mut t.cq_b).err(co::RESP_ERR, cs::LOCAL_ACCESS_ERR);
    t.n.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::REMOTE_OP_ERR);
}

/// A READ whose last responses were lost is asked again for the rest of its data (from the
/// first missing PSN); the responder may answer it as a new message (FIRST, as the IBA
/// says) or, as Linux's rxe does, replay the original one (MIDDLE / LAST at the requested
/// PSN). Both complete the READ with the data in place.
#[test]
fn a_retried_read_takes_a_fresh_or_a_replayed_response() {
    use roce_wire::packet::{Aeth, Bth, ExtHeaders, Opcode, Packet};
    for replay in [false, true] {
        let mut n = Node::new([10, 0, 0, 1]);
        let clock = n.manual_clock();
        let mut cq = n.cq(6);
        let mut a = n.qp(qpc::ST_RC, &cq, &cq, 6, Some((6, 2)));
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let c = Conn::default();
        n.connect(&a, 0x77, peer, c);
        let local = n.mr(4096, ALL);
        let remote = Mr {
            addr: 0x10_0000,
            len: 4096,
            key: 0x4242,
        };
        let data = pattern(4096, 77);
        let idx = n.post_send(
            &mut a,
            &Wr::new(RDMA_READ).sge(&local, 0, 4096).remote(&remote, 0),
        );
        let respond = |n: &mut Node, op: Opcode, k: u32| {
            let mut ext = ExtHeaders::NONE;
            if op.ext_layout().aeth {
                ext.aeth = Some(Aeth {
                    syndrome: 0x1f,
                    msn: 1,
                });
            }
            let bth = Bth::new(op, a.qpn, c.sq_psn + k);
            let off = k as usize * 1024;
            let pkt = Packet::new(peer, n.ip, bth, data[off..off + 1024].to_vec()).with_ext(ext);
            n.h.dev.rx_frame(&pkt.encode().unwrap());
            n.h.dev.poll();
        };
        // The first two of four responses arrive, the last two are lost.
        respond(&mut n, Opcode::RcRdmaReadResponseFirst, 0);
        respond(&mut n, Opcode::RcRdmaReadResponseMiddle, 1);
        assert!(n.poll_cq(&mut cq).is_none());
        // The ACK timeout (4.096 µs × 2^14) runs out: the READ is asked again from PSN + 2.
        clock.fetch_add(100_000_000, Ordering::SeqCst);
        n.h.dev.poll();
        assert_eq!(n.h.dev.port_stats().timeouts, 1);
        if replay {
            respond(&mut n, Opcode::RcRdmaReadResponseMiddle, 2);
        } else {
            respond(&mut n, Opcode::RcRdmaReadResponseFirst, 2);
        }
        respond(&mut n, Opcode::RcRdmaReadResponseLast, 3);
        let cqe = n.cqe(&mut cq);
        cqe.req_ok(a.qpn, RDMA_READ, idx);
        assert_eq!(cqe.byte_cnt, 4096);
        assert!(n.h.mem.rd(local.addr, 4096) == data, "replay {replay}");
    }
}

#[test]
fn send_with_invalidate_invalidates_the_key_and_later_access_fails() {
    let mut t = pair();
    let src = t.n.mr(8192, ALL);
    let dst = t.n.mr(8192, ALL);
    let pd = t.n.pd;
    // Two keys that may be invalidated: one by a one-packet SEND, one by a three-packet SEND
    // (FIRST, MIDDLE, LAST_WITH_INVALIDATE at MTU 1024).
    for (i, len) in [100u32, 2500].into_iter().enumerate() {
        let target = t.n.mr_rinval(4096, ALL, pd);
        let data = pattern(len as usize, 40 + i as u32);
        t.n.h.mem.wr(src.addr, &data);
        // The key works before.
        let w = t.n.post_send(
            &mut t.a,
            &Wr::new(RDMA_WRITE).sge(&src, 0, 16).remote(&target, 0),
        );
        t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, RDMA_WRITE, w);
        assert_eq!(t.n.h.mem.rd(target.addr, 16), data[..16]);
        t.n.recv(&mut t.b, &dst, 0, 8192);
        let mut wr = Wr::new(SEND_INVAL).sge(&src, 0, len);
        wr.imm = target.key;
        let idx = t.n.post_send(&mut t.a, &wr);
        t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND_INVAL, idx);
        let r = t.n.cqe(&mut t.cq_b);
        assert_eq!(
            (r.opcode, r.byte_cnt, r.imm, r.qpn),
            (co::RESP_SEND_INV, len, target.key, t.b.qpn)
        );
        assert_eq!(t.n.h.mem.rd(dst.addr, len as usize), data);
        // Invalidating it again: the key names nothing any more.
        assert_eq!(
            t.n.h.dev.remote_invalidate(target.key, pd),
            Err(crate::connectx::dp::mkey::KeyError::NoKey)
        );
    }
    // A later access through an invalidated key is a remote access error.
    let target = t.n.mr_rinval(4096, ALL, pd);
    t.n.recv(&mut t.b, &dst, 0, 8192);
    let mut wr = Wr::new(SEND_INVAL).sge(&src, 0, 8);
    wr.imm = target.key;
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_a).req_ok(t.a.qpn, SEND_INVAL, idx);
    assert_eq!(t.n.cqe(&mut t.cq_b).opcode, co::RESP_SEND_INV);
    refused_write(&mut t, target, 0, 100);
}

/// A SEND with invalidate whose key the responder may not invalidate: the receive completes
/// with REMOTE_INVAL_REQ_ERR, the sender gets NAK invalid request (REMOTE_INVAL_REQ_ERR), both
/// QPs end in ERR and the key stays valid.
fn refused_invalidate(t: &mut Pair, key: u32) {
    let src = t.n.mr(4096, ALL);
    let dst = t.n.mr(4096, ALL);
    t.n.recv(&mut t.b, &dst, 0, 4096);
    let mut wr = Wr::new(SEND_INVAL).sge(&src, 0, 64);
    wr.imm = key;
    let idx = t.n.post_send(&mut t.a, &wr);
    t.n.cqe(&mut t.cq_b)
        .err(co::RESP_ERR, cs::REMOTE_INVAL_REQ_ERR);
    let c = t.n.cqe(&mut t.cq_a);
    c.err(co::REQ_ERR, cs::REMOTE_INVAL_REQ_ERR);
    assert_eq!(c.wqe_counter, idx);
    assert_eq!(t.n.h.dev.qp_state(t.a.qpn), Some(qpc::STATE_ERR as u8));
    assert_eq!(t.n.h.dev.qp_state(t.b.qpn), Some(qpc::STATE_ERR as u8));
}

#[test]
fn send_with_invalidate_of_an_ordinary_key_is_refused() {
    let mut t = pair();
    let pd = t.n.pd;
    let plain = t.n.mr(4096, ALL);
    refused_invalidate(&mut t, plain.key);
    // Not invalidated: the key still names its memory.
    assert!(t.n.h.dev.translate(plain.key, pd, plain.addr, 8, 0).is_ok());
}

#[test]
fn send_with_invalidate_of_another_pds_or_unknown_key_is_refused() {
    let mut t = pair();
    let pd2 = t.n.h.alloc_pd();
    let other = t.n.mr_rinval(4096, ALL, pd2);
    refused_invalidate(&mut t, other.key);
    assert!(
        t.n.h
            .dev
            .translate(other.key, pd2, other.addr, 8, 0)
            .is_ok()
    );
    let mut t = pair();
    let pd = t.n.pd;
    let k = t.n.mr_rinval(4096, ALL, pd);
    // The right index with another variant byte.
    refused_invalidate(&mut t, k.key ^ 0x80);
}

#[test]
fn send_with_invalidate_is_rc_only() {
    // A UC QP refuses the opcode: a local QP operation error on the WQE.
    let mut n = Node::new([10, 0, 0, 1]);
    let mut cq_a = n.cq(6);
    let mut a = n.qp(qpc::ST_UC, &cq_a, &cq_a, 6, Some((6, 2)));
    let b = n.qp(qpc::ST_UC, &cq_a, &cq_a, 6, Some((6, 2)));
    let ip = n.ip;
    n.connect(&a, b.qpn, ip, Conn::default());
    n.connect(&b, a.qpn, ip, Conn::default());
    let src = n.mr(4096, ALL);
    let mut wr = Wr::new(SEND_INVAL).sge(&src, 0, 8);
    wr.imm = src.key;
    n.post_send(&mut a, &wr);
    n.cqe(&mut cq_a).err(co::REQ_ERR, cs::LOCAL_QP_OP_ERR);
    assert!(n.h.dev.errors().contains(&DeviceError::BadWqe {
        qpn: a.qpn,
        wqe_counter: 0,
        fault: WqeFault::BadOpcode(SEND_INVAL),
    }));
}
