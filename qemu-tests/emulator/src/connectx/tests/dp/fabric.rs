//! Stage 2: RC between two devices over the deterministic in-process fabric (virtual clock),
//! with loss, duplication, reordering and cut links.

use firmware_interface::cqe::{opcode as co, syndrome as cs};
use firmware_interface::ctx::qpc;

use roce_wire::fabric::{FaultConfig, InProcessFabric};

use super::local::SIZES;
use super::*;

/// Two hosts on one fabric, one RC QP each, connected.
pub(crate) struct Net2 {
    pub fab: InProcessFabric,
    pub a: Node,
    pub b: Node,
    pub cq_a: TCq,
    pub cq_b: TCq,
    pub qa: TQp,
    pub qb: TQp,
}

/// Two hosts attached to `fab` with their clocks on the fabric's virtual clock.
pub(crate) fn hosts(fab: &InProcessFabric) -> (Node, Node) {
    let mut a = Node::new([10, 0, 0, 1]);
    let mut b = Node::new([10, 0, 0, 2]);
    for n in [&mut a, &mut b] {
        let port = fab.attach_port(n.ip).unwrap();
        assert!(n.h.dev.attach(Box::new(port)).is_none());
        let f = fab.clone();
        n.h.dev.set_clock(Arc::new(move || f.now_ns()));
    }
    (a, b)
}

pub(crate) fn net2(seed: u64, c: Conn, log_q: u32) -> Net2 {
    let fab = InProcessFabric::new(seed);
    let (mut a, mut b) = hosts(&fab);
    let cq_a = a.cq(log_q + 1);
    let cq_b = b.cq(log_q + 1);
    let qa = a.qp(qpc::ST_RC, &cq_a, &cq_a, log_q, Some((log_q, 2)));
    let qb = b.qp(qpc::ST_RC, &cq_b, &cq_b, log_q, Some((log_q, 2)));
    let (ia, ib) = (a.ip, b.ip);
    a.connect(&qa, qb.qpn, ib, c);
    b.connect(&qb, qa.qpn, ia, c);
    Net2 {
        fab,
        a,
        b,
        cq_a,
        cq_b,
        qa,
        qb,
    }
}

/// One round: both devices poll; when neither has anything to do, the virtual clock jumps to
/// the next frame delivery or timer. Returns false when nothing can ever happen again.
pub(crate) fn step(fab: &InProcessFabric, a: &mut Node, b: &mut Node) -> bool {
    let x = a.h.dev.poll();
    let y = b.h.dev.poll();
    if x || y {
        return true;
    }
    let next = [
        fab.next_event_ns(),
        a.h.dev.next_deadline(),
        b.h.dev.next_deadline(),
    ]
    .into_iter()
    .flatten()
    .min();
    match next {
        Some(t) => {
            let now = fab.now_ns();
            fab.advance_to(t.max(now + 1));
            true
        }
        None => false,
    }
}

impl Net2 {
    /// Runs until `a` has a CQE on its CQ.
    #[track_caller]
    fn cqe_a(&mut self) -> Cqe {
        for _ in 0..1_000_000 {
            if let Some(c) = self.a.poll_cq(&mut self.cq_a) {
                return c;
            }
            if !step(&self.fab, &mut self.a, &mut self.b) {
                break;
            }
        }
        panic!("no CQE on A");
    }

    #[track_caller]
    fn cqe_b(&mut self) -> Cqe {
        for _ in 0..1_000_000 {
            if let Some(c) = self.b.poll_cq(&mut self.cq_b) {
                return c;
            }
            if !step(&self.fab, &mut self.a, &mut self.b) {
                break;
            }
        }
        panic!("no CQE on B");
    }

    /// Runs until nothing is left to do.
    fn settle(&mut self) {
        for _ in 0..1_000_000 {
            if !step(&self.fab, &mut self.a, &mut self.b) {
                return;
            }
        }
        panic!("never settled");
    }
}

const BIG: u64 = (1 << 20) + 4096;

#[test]
fn send_write_read_every_size_across_the_fabric() {
    let mut t = net2(1, Conn::default(), 6);
    let src = t.a.mr(BIG, ALL);
    let dst = t.b.mr(BIG, ALL);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 300 + i as u32);
        t.a.h.mem.wr(src.addr, &data);
        // SEND
        t.b.recv(&mut t.qb, &dst, 0, BIG as u32);
        let idx =
            t.a.post_send(&mut t.qa, &Wr::new(SEND).sge(&src, 0, len as u32));
        t.cqe_a().req_ok(t.qa.qpn, SEND, idx);
        let r = t.cqe_b();
        assert_eq!((r.opcode, r.byte_cnt), (co::RESP_SEND, len as u32));
        assert!(t.b.h.mem.rd(dst.addr, len) == data, "SEND {len}");
        // WRITE at an odd offset
        t.b.h.mem.wr(dst.addr, &vec![0u8; BIG as usize]);
        let wr = Wr::new(RDMA_WRITE).sge(&src, 0, len as u32).remote(&dst, 7);
        let idx = t.a.post_send(&mut t.qa, &wr);
        t.cqe_a().req_ok(t.qa.qpn, RDMA_WRITE, idx);
        assert!(t.b.h.mem.rd(dst.addr + 7, len) == data, "WRITE {len}");
        // READ it back
        t.a.h.mem.wr(src.addr, &vec![0u8; BIG as usize]);
        let wr = Wr::new(RDMA_READ).sge(&src, 0, len as u32).remote(&dst, 7);
        let idx = t.a.post_send(&mut t.qa, &wr);
        let c = t.cqe_a();
        c.req_ok(t.qa.qpn, RDMA_READ, idx);
        assert_eq!(c.byte_cnt, len as u32);
        assert!(t.a.h.mem.rd(src.addr, len) == data, "READ {len}");
    }
    for n in [&t.a, &t.b] {
        assert!(n.h.dev.errors().is_empty(), "{:?}", n.h.dev.errors());
    }
    assert_eq!(t.a.h.dev.port_stats().retransmits, 0);
}

#[test]
fn lossy_fabric_delivers_every_message_exactly_once_in_order() {
    lossy(42, 0.10);
}

fn lossy(seed: u64, loss: f64) {
    let c = Conn {
        timeout: 8, // ≈ 1 ms of virtual time
        ..Conn::default()
    };
    let mut t = net2(seed, c, 8);
    t.fab.set_faults(FaultConfig {
        loss,
        duplicate: loss / 2.0,
        reorder: loss,
        reorder_depth: 3,
        reorder_timeout_ns: 50_000,
        corrupt: 0.02,
        delay_ns: 2_000,
        jitter_ns: 3_000,
    });
    const N: usize = 120;
    let src = t.a.mr(N as u64 * 4096, ALL);
    let dst = t.b.mr(N as u64 * 4096, ALL);
    let wdst = t.b.mr(N as u64 * 4096, ALL);
    let back = t.a.mr(N as u64 * 4096, ALL);
    let mut sent = Vec::new();
    for i in 0..N {
        let len = (i * 397) % 3500 + 1; // 1..3500: one to four packets
        let mut data = pattern(len, i as u32);
        data[0] = i as u8;
        t.a.h.mem.wr(src.addr + i as u64 * 4096, &data);
        t.b.recv(&mut t.qb, &dst, i as u64 * 4096, 4096);
        sent.push(data);
    }
    for (i, d) in sent.iter().enumerate() {
        let off = i as u64 * 4096;
        let wr = match i % 3 {
            0 => Wr::new(SEND).sge(&src, off, d.len() as u32),
            1 => Wr::new(RDMA_WRITE)
                .sge(&src, off, d.len() as u32)
                .remote(&wdst, off),
            // READ back what the previous WRITE put there.
            _ => Wr::new(RDMA_READ)
                .sge(&back, off - 4096, sent[i - 1].len() as u32)
                .remote(&wdst, off - 4096),
        };
        let idx = t.a.post_send(&mut t.qa, &wr);
        assert_eq!(usize::from(idx), i);
    }
    // Requester completions: all N, in order, successful.
    for i in 0..N {
        let c = t.cqe_a();
        assert_eq!((c.opcode, c.wqe_counter), (co::REQ, i as u16), "{c:x?}");
    }
    // Responder completions: one per SEND, in order, with the right bytes.
    for i in (0..N).step_by(3) {
        let r = t.cqe_b();
        assert_eq!(r.opcode, co::RESP_SEND, "{r:x?}");
        assert_eq!(r.byte_cnt as usize, sent[i].len());
        let k = r.wqe_counter as usize;
        assert_eq!(k, i / 3, "receive WQEs are consumed in order");
        let got = t.b.h.mem.rd(dst.addr + k as u64 * 4096, sent[i].len());
        assert!(got == sent[i], "message {i}");
    }
    for i in (1..N).step_by(3) {
        let off = i as u64 * 4096;
        assert!(t.b.h.mem.rd(wdst.addr + off, sent[i].len()) == sent[i]);
        assert!(t.a.h.mem.rd(back.addr + off, sent[i].len()) == sent[i]);
    }
    // Exactly once: nothing more ever arrives.
    t.settle();
    assert!(t.b.poll_cq(&mut t.cq_b).is_none());
    assert!(t.a.poll_cq(&mut t.cq_a).is_none());
    let fs = t.fab.stats();
    let (sa, sb) = (t.a.h.dev.port_stats(), t.b.h.dev.port_stats());
    assert!(fs.dropped_loss > 0 && fs.duplicated > 0 && fs.reordered > 0 && fs.corrupted > 0);
    assert!(sa.retransmits > 0, "{sa:?}");
    assert!(sb.rx_duplicates > 0 && sb.seq_naks_sent > 0, "{sb:?}");
    assert!(
        sa.rx_malformed + sb.rx_malformed > 0,
        "corrupted frames are caught"
    );
    for n in [&t.a, &t.b] {
        assert!(n.h.dev.errors().is_empty(), "{:?}", n.h.dev.errors());
    }
}

#[test]
fn duplicated_atomics_are_applied_once() {
    let mut t = net2(7, Conn::default(), 6);
    // Every request from A to B arrives twice.
    t.fab.set_path_faults(
        t.a.ip,
        t.b.ip,
        Some(FaultConfig {
            duplicate: 1.0,
            jitter_ns: 5_000,
            ..FaultConfig::NONE
        }),
    );
    let local = t.a.mr(4096, ALL);
    let counter = t.b.mr(64, ALL);
    t.b.h.mem.wr(counter.addr, &0u64.to_be_bytes());
    for i in 0..10u64 {
        let mut wr = Wr::new(ATOMIC_FA).sge(&local, i * 8, 8).remote(&counter, 0);
        wr.atomic = Some((1, 0));
        t.a.post_send(&mut t.qa, &wr);
    }
    let mut cas = Wr::new(ATOMIC_CS).sge(&local, 80, 8).remote(&counter, 0);
    cas.atomic = Some((1000, 10));
    t.a.post_send(&mut t.qa, &cas);
    for i in 0..11u16 {
        let c = t.cqe_a();
        assert_eq!((c.opcode, c.wqe_counter), (co::REQ, i));
    }
    // Duplicated READ requests are answered again (replayed), completed once.
    t.b.h.mem.wr(counter.addr + 8, &pattern(56, 9));
    let rd = Wr::new(RDMA_READ).sge(&local, 128, 56).remote(&counter, 8);
    let idx = t.a.post_send(&mut t.qa, &rd);
    t.cqe_a().req_ok(t.qa.qpn, RDMA_READ, idx);
    t.settle();
    assert!(t.a.poll_cq(&mut t.cq_a).is_none());
    assert_eq!(t.a.h.mem.rd(local.addr + 128, 56), pattern(56, 9));
    assert_eq!(t.b.h.mem.rd(counter.addr, 8), 1000u64.to_be_bytes());
    for i in 0..11u64 {
        assert_eq!(t.a.h.mem.rd(local.addr + i * 8, 8), i.to_be_bytes());
    }
    assert!(t.b.h.dev.port_stats().rx_duplicates >= 12);
}

#[test]
fn cut_link_ends_in_transport_retry_exceeded() {
    let c = Conn {
        timeout: 10,
        retry: 3,
        ..Conn::default()
    };
    let mut t = net2(3, c, 6);
    let src = t.a.mr(4096, ALL);
    let dst = t.b.mr(4096, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 4096);
    t.a.post_send(&mut t.qa, &Wr::new(SEND).sge(&src, 0, 100));
    t.cqe_a().req_ok(t.qa.qpn, SEND, 0);
    t.fab.cut_link(t.a.ip, t.b.ip);
    let start = t.fab.now_ns();
    let wr = Wr::new(RDMA_WRITE).sge(&src, 0, 100).remote(&dst, 0);
    let i1 = t.a.post_send(&mut t.qa, &wr);
    let i2 = t.a.post_send(&mut t.qa, &Wr::new(NOP));
    let c = t.cqe_a();
    c.err(co::REQ_ERR, cs::TRANSPORT_RETRY_EXC_ERR);
    assert_eq!(c.wqe_counter, i1);
    let c = t.cqe_a();
    c.err(co::REQ_ERR, cs::WR_FLUSH_ERR);
    assert_eq!(c.wqe_counter, i2);
    // The first try and three retries, each after 4.096 µs × 2^10.
    assert_eq!(t.a.h.dev.port_stats().timeouts, 4);
    assert_eq!(t.fab.now_ns() - start, 4 * (4096 << 10));
    assert_eq!(t.a.h.dev.qp_state(t.qa.qpn), Some(qpc::STATE_ERR as u8));
}

#[test]
fn rnr_over_the_fabric_and_the_outstanding_read_limit() {
    let c = Conn {
        min_rnr: 12,
        rnr_retry: 7, // infinite
        log_sra: 0,   // one READ in flight at a time
        ..Conn::default()
    };
    let mut t = net2(9, c, 6);
    let src = t.a.mr(65536, ALL);
    let dst = t.b.mr(65536, ALL);
    t.b.h.mem.wr(dst.addr, &pattern(65536, 1));
    // Four 8 KiB READs: with log_sra_max 0 the second request leaves only after the first
    // is answered.
    for i in 0..4u64 {
        let wr = Wr::new(RDMA_READ)
            .sge(&src, i * 8192, 8192)
            .remote(&dst, i * 8192);
        t.a.post_send(&mut t.qa, &wr);
    }
    for i in 0..4u16 {
        t.cqe_a().req_ok(t.qa.qpn, RDMA_READ, i);
    }
    assert_eq!(t.a.h.mem.rd(src.addr, 32768), pattern(65536, 1)[..32768]);
    // A SEND with no receive posted: RNR NAKs until the receive shows up.
    let idx = t.a.post_send(&mut t.qa, &Wr::new(SEND).sge(&src, 0, 10));
    for _ in 0..50 {
        step(&t.fab, &mut t.a, &mut t.b);
    }
    assert!(t.b.h.dev.port_stats().rnr_naks_sent >= 2);
    t.b.recv(&mut t.qb, &dst, 0, 64);
    t.cqe_a().req_ok(t.qa.qpn, SEND, idx);
    assert_eq!(t.cqe_b().opcode, co::RESP_SEND);
}

#[test]
fn threaded_pollers_over_the_fabric_with_real_time() {
    use std::sync::Mutex;
    let fab = InProcessFabric::with_real_clock(5);
    let prof = Profile {
        ack_timeout_unit_ns: 100,
        rnr_timer_unit_ns: 100,
        ..crate::connectx::tests::quiet()
    };
    let mut a = Node::with([10, 0, 0, 1], prof.clone());
    let mut b = Node::with([10, 0, 0, 2], prof);
    for n in [&mut a, &mut b] {
        n.h.dev.attach_to(&fab, n.ip).unwrap();
    }
    fab.set_faults(FaultConfig {
        loss: 0.05,
        ..FaultConfig::NONE
    });
    let mut cq_a = a.cq(7);
    let mut cq_b = b.cq(7);
    let mut qa = a.qp(qpc::ST_RC, &cq_a, &cq_a, 7, Some((7, 2)));
    let mut qb = b.qp(qpc::ST_RC, &cq_b, &cq_b, 7, Some((7, 2)));
    // ACK timeout 100 ns × 2^22 ≈ 420 ms: the 5% loss is still retransmitted (a few lost
    // packets cost a second or two), and 8 tries (3.4 s) outlast a poller thread that a
    // loaded 2-core machine does not schedule for a while (at 2^16, 6.6 ms, a test run beside
    // QEMU guests exhausted the retries: RETRY_EXC_ERR).
    let c = Conn {
        timeout: 22,
        ..Conn::default()
    };
    let (ia, ib) = (a.ip, b.ip);
    a.connect(&qa, qb.qpn, ib, c);
    b.connect(&qb, qa.qpn, ia, c);
    let src = a.mr(65536, ALL);
    let dst = b.mr(65536, ALL);
    a.h.mem.wr(src.addr, &pattern(65536, 2));
    for i in 0..32u64 {
        b.recv(&mut qb, &dst, i * 2048, 2048);
    }
    // The devices move to pollers; the test keeps the memories and rings doorbells through
    // the shared device.
    let mem_a = a.h.mem.clone();
    let dev_b = Arc::new(Mutex::new(std::mem::replace(
        &mut b.h.dev,
        crate::Device::new(crate::connectx::tests::quiet(), b.h.mem.clone()),
    )));
    let pb = crate::spawn_poller(dev_b.clone());
    let dev_a = Arc::new(Mutex::new(std::mem::replace(
        &mut a.h.dev,
        crate::Device::new(crate::connectx::tests::quiet(), mem_a.clone()),
    )));
    let pa = crate::spawn_poller(dev_a.clone());
    for i in 0..32u64 {
        let wr = Wr::new(SEND).sge(&src, i * 2048, 2048);
        let (_, bytes) = a.write_send(&mut qa, &wr);
        let off = a.uar as usize * 4096 + firmware_interface::uar::BF_OFFSET;
        dev_a.lock().unwrap().mmio_write(off, &bytes[..8]);
    }
    let t0 = std::time::Instant::now();
    let mut got = 0;
    // (a generous bound: the loop ends as soon as everything arrived)
    while got < 32 && t0.elapsed() < std::time::Duration::from_secs(120) {
        if b.poll_cq(&mut cq_b).is_some() {
            got += 1;
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    assert_eq!(got, 32);
    let mut acks = 0;
    while acks < 32 && t0.elapsed() < std::time::Duration::from_secs(120) {
        if let Some(c) = a.poll_cq(&mut cq_a) {
            assert_eq!(c.opcode, co::REQ);
            acks += 1;
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    assert_eq!(acks, 32);
    assert!(pa.is_running() && pb.is_running());
    pa.stop();
    pb.stop();
    assert_eq!(b.h.mem.rd(dst.addr, 65536), pattern(65536, 2));
}

#[test]
fn rc_over_udp_sockets_on_loopback_addresses() {
    use roce_wire::fabric::UdpFabric;
    let fab = UdpFabric::new(47_913);
    let mut a = Node::new([127, 91, 0, 1]);
    let mut b = Node::new([127, 91, 0, 2]);
    for n in [&mut a, &mut b] {
        let Ok(port) = fab.bind(n.ip) else {
            eprintln!("cannot bind {}: skipped", n.ip);
            return;
        };
        n.h.dev.attach(Box::new(port));
    }
    let mut cq_a = a.cq(6);
    let mut cq_b = b.cq(6);
    let mut qa = a.qp(qpc::ST_RC, &cq_a, &cq_a, 6, Some((6, 2)));
    let mut qb = b.qp(qpc::ST_RC, &cq_b, &cq_b, 6, Some((6, 2)));
    let (ia, ib) = (a.ip, b.ip);
    a.connect(&qa, qb.qpn, ib, Conn::default());
    b.connect(&qb, qa.qpn, ia, Conn::default());
    let src = a.mr(65536, ALL);
    let dst = b.mr(65536, ALL);
    a.h.mem.wr(src.addr, &pattern(65536, 6));
    b.recv(&mut qb, &dst, 0, 65536);
    a.post_send(&mut qa, &Wr::new(SEND).sge(&src, 0, 65536));
    let wr = Wr::new(RDMA_READ).sge(&src, 0, 4096).remote(&dst, 4096);
    a.post_send(&mut qa, &wr);
    let t0 = std::time::Instant::now();
    let mut done = Vec::new();
    while done.len() < 2 && t0.elapsed() < std::time::Duration::from_secs(10) {
        a.h.dev.poll();
        b.h.dev.poll();
        if let Some(c) = a.poll_cq(&mut cq_a) {
            done.push(c);
        }
    }
    assert_eq!(done.len(), 2, "{done:x?}");
    done[0].req_ok(qa.qpn, SEND, 0);
    done[1].req_ok(qa.qpn, RDMA_READ, 1);
    let r = b.poll_cq(&mut cq_b).expect("receive");
    assert_eq!(r.byte_cnt, 65536);
    assert_eq!(b.h.mem.rd(dst.addr, 65536), pattern(65536, 6));
    assert_eq!(a.h.mem.rd(src.addr, 4096), pattern(65536, 6)[4096..8192]);
}
