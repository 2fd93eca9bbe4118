//! Stage 3: UD (DETH, Q_Key, source QPN, the 40-byte GRH area, the MTU limit) and QP1.

use firmware_interface::cqe::{self, opcode as co, syndrome as cs};
use firmware_interface::ctx::qpc;
use roce_wire::fabric::InProcessFabric;

use super::fabric::{hosts, step};
use super::*;

const QKEY: u32 = 0x1111_2222;
const GSI_QKEY: u32 = 0x8001_0000;

struct Ud {
    fab: InProcessFabric,
    a: Node,
    b: Node,
    cq_a: TCq,
    cq_b: TCq,
    qa: TQp,
    qb: TQp,
}

fn ud(st_b: u32) -> Ud {
    let fab = InProcessFabric::new(11);
    let (mut a, mut b) = hosts(&fab);
    let cq_a = a.cq(6);
    let cq_b = b.cq(6);
    let qa = a.qp(qpc::ST_UD, &cq_a, &cq_a, 6, Some((6, 2)));
    let qb = b.qp(st_b, &cq_b, &cq_b, 6, Some((6, 2)));
    a.ud_up(&qa, QKEY);
    b.ud_up(&qb, QKEY);
    Ud {
        fab,
        a,
        b,
        cq_a,
        cq_b,
        qa,
        qb,
    }
}

impl Ud {
    fn run(&mut self) {
        for _ in 0..10_000 {
            if !step(&self.fab, &mut self.a, &mut self.b) {
                return;
            }
        }
    }

    fn send(&mut self, len: usize, qkey: u32, dqpn: u32, imm: Option<u32>) -> u16 {
        let src = self.a.mr(8192, ALL);
        self.a.h.mem.wr(src.addr, &pattern(len, len as u32));
        let mut wr = Wr::new(if imm.is_some() { SEND_IMM } else { SEND }).sge(&src, 0, len as u32);
        wr.imm = imm.unwrap_or(0);
        wr.av = Some(av(dqpn, qkey, self.b.ip));
        self.a.post_send(&mut self.qa, &wr)
    }
}

#[test]
fn ud_send_carries_the_grh_area_and_the_source_qpn() {
    let mut t = ud(qpc::ST_UD);
    let dst = t.b.mr(8192, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 8192);
    let qb = t.qb.qpn;
    let idx = t.send(1000, QKEY, qb, Some(0xabcd_0001));
    // UD completes when sent.
    t.a.cqe(&mut t.cq_a).req_ok(t.qa.qpn, SEND_IMM, idx);
    t.run();
    let r = t.b.poll_cq(&mut t.cq_b).expect("UD receive");
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm),
        (co::RESP_SEND_IMM, 1040, 0xabcd_0001)
    );
    assert_eq!(r.flags_rqpn & cqe::QPN_MASK, t.qa.qpn, "source QPN");
    assert_ne!(
        (r.flags_rqpn >> cqe::GRH_SHIFT) & cqe::GRH_MASK,
        0,
        "GRH present"
    );
    assert_eq!(
        (r.flags_rqpn >> cqe::L3_HDR_TYPE_SHIFT) & cqe::L3_HDR_TYPE_MASK,
        cqe::L3_HDR_TYPE_IPV4
    );
    let grh = t.b.h.mem.rd(dst.addr, 40);
    assert!(grh[..20].iter().all(|b| *b == 0));
    assert_eq!(grh[20] >> 4, 4, "IPv4 header in the last 20 bytes");
    assert_eq!(grh[32..36], t.a.ip.octets(), "source address");
    assert_eq!(grh[36..40], t.b.ip.octets(), "destination address");
    assert_eq!(t.b.h.mem.rd(dst.addr + 40, 1000), pattern(1000, 1000));
}

#[test]
fn ud_q_key_mismatch_is_dropped_silently() {
    let mut t = ud(qpc::ST_UD);
    let dst = t.b.mr(8192, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 8192);
    let qb = t.qb.qpn;
    t.send(10, 0x1111_3333, qb, None);
    t.a.cqe(&mut t.cq_a);
    t.run();
    assert!(t.b.poll_cq(&mut t.cq_b).is_none());
    assert_eq!(t.b.h.dev.port_stats().rx_qkey_mismatch, 1);
    // A Q_Key with the high bit set means "the sending QP's Q_Key", which matches here.
    t.send(10, 0x8000_0000, qb, None);
    t.a.cqe(&mut t.cq_a);
    t.run();
    assert_eq!(t.b.poll_cq(&mut t.cq_b).expect("CQE").byte_cnt, 50);
    // No receive posted: dropped, counted.
    t.send(10, QKEY, qb, None);
    t.a.cqe(&mut t.cq_a);
    t.run();
    assert!(t.b.poll_cq(&mut t.cq_b).is_none());
    assert_eq!(t.b.h.dev.port_stats().rx_no_wqe, 1);
    assert_eq!(t.b.h.dev.qp_state(qb), Some(qpc::STATE_RTS as u8));
}

#[test]
fn ud_larger_than_the_mtu_is_a_local_length_error() {
    let mut t = ud(qpc::ST_UD);
    let qb = t.qb.qpn;
    t.send(4097, QKEY, qb, None);
    t.a.cqe(&mut t.cq_a).err(co::REQ_ERR, cs::LOCAL_LENGTH_ERR);
    // 4096 is fine to send; a receive buffer too short for GRH + payload drops the message
    // (no completion, the QP stays in RTS) and the WQE takes the next one that fits.
    let mut t = ud(qpc::ST_UD);
    let dst = t.b.mr(8192, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 4096);
    let qb = t.qb.qpn;
    t.send(4096, QKEY, qb, None);
    t.a.cqe(&mut t.cq_a).req_ok(t.qa.qpn, SEND, 0);
    t.run();
    assert!(t.b.poll_cq(&mut t.cq_b).is_none());
    assert_eq!(t.b.h.dev.port_stats().rx_too_long, 1);
    assert_eq!(t.b.h.dev.qp_state(qb), Some(qpc::STATE_RTS as u8));
    let w = t.send(4096 - 40, QKEY, qb, None);
    t.a.cqe(&mut t.cq_a).req_ok(t.qa.qpn, SEND, w);
    t.run();
    assert_eq!(t.b.poll_cq(&mut t.cq_b).expect("CQE").byte_cnt, 4096);
}

#[test]
fn qp1_takes_the_gsi_q_key_only() {
    let mut t = ud(qpc::ST_QP1);
    assert_eq!(t.qb.qpn, 1);
    let dst = t.b.mr(8192, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 8192);
    // A UD QP cannot send the controlled GSI Q_Key: its own Q_Key goes out, QP1 drops it.
    t.send(256, GSI_QKEY, 1, None);
    t.a.cqe(&mut t.cq_a);
    t.run();
    assert!(t.b.poll_cq(&mut t.cq_b).is_none());
    assert_eq!(t.b.h.dev.port_stats().rx_qkey_mismatch, 1);
    // QP1 to QP1: the GSI Q_Key, whatever the address vector says.
    let mut cq1 = t.a.cq(4);
    let mut qp1 = t.a.qp(qpc::ST_QP1, &cq1, &cq1, 4, Some((4, 2)));
    assert_eq!(qp1.qpn, 1);
    t.a.ud_up(&qp1, 0);
    let src = t.a.mr(4096, ALL);
    t.a.h.mem.wr(src.addr, &pattern(256, 256));
    let mut wr = Wr::new(SEND).sge(&src, 0, 256);
    wr.av = Some(av(1, 0x1234, t.b.ip));
    let idx = t.a.post_send(&mut qp1, &wr);
    t.a.cqe(&mut cq1).req_ok(1, SEND, idx);
    t.run();
    let r = t.b.poll_cq(&mut t.cq_b).expect("MAD");
    assert_eq!((r.opcode, r.byte_cnt, r.qpn), (co::RESP_SEND, 296, 1));
    assert_eq!(r.flags_rqpn & cqe::QPN_MASK, 1, "from QP1");
    assert_eq!(r.imm & 0xffff, 0xffff, "P_Key of a QP1 packet");
    assert_eq!(t.b.h.mem.rd(dst.addr + 40, 256), pattern(256, 256));
}

#[test]
fn ud_traffic_within_the_mtu_and_message_limit_set_at_init2rtr() {
    // The Linux values (4096 / 2^12) carry a full 4096-byte datagram (`ud_up`).
    let mut t = ud(qpc::ST_UD);
    let dst = t.b.mr(8192, ALL);
    t.b.recv(&mut t.qb, &dst, 0, 8192);
    let qb = t.qb.qpn;
    let idx = t.send(4096, QKEY, qb, None);
    t.a.cqe(&mut t.cq_a).req_ok(t.qa.qpn, SEND, idx);
    t.run();
    let r = t.b.poll_cq(&mut t.cq_b).expect("datagram");
    assert_eq!((r.opcode, r.byte_cnt), (co::RESP_SEND, 40 + 4096));
    assert_eq!(t.b.h.mem.rd(dst.addr + 40, 4096), pattern(4096, 4096));

    // A smaller path MTU or message limit bounds what a UD QP may send.
    for (mtu, log_msg, limit) in [(qpc::MTU_1024, 12, 1024), (qpc::MTU_4096, 9, 512)] {
        let fab = InProcessFabric::new(12);
        let (mut a, mut b) = hosts(&fab);
        let mut cq_a = a.cq(6);
        let mut cq_b = b.cq(6);
        let mut qa = a.qp(qpc::ST_UD, &cq_a, &cq_a, 6, Some((6, 2)));
        let mut qb = b.qp(qpc::ST_UD, &cq_b, &cq_b, 6, Some((6, 2)));
        a.ud_up_with(&qa, QKEY, mtu, log_msg);
        b.ud_up(&qb, QKEY);
        let src = a.mr(8192, ALL);
        let dst = b.mr(8192, ALL);
        for len in [limit, limit + 1] {
            b.recv(&mut qb, &dst, 0, 8192);
            a.h.mem.wr(src.addr, &pattern(len, 7));
            let mut wr = Wr::new(SEND).sge(&src, 0, len as u32);
            wr.av = Some(av(qb.qpn, QKEY, b.ip));
            let idx = a.post_send(&mut qa, &wr);
            let c = a.cqe(&mut cq_a);
            if len == limit {
                c.req_ok(qa.qpn, SEND, idx);
                for _ in 0..1000 {
                    if !step(&fab, &mut a, &mut b) {
                        break;
                    }
                }
                let r = b.poll_cq(&mut cq_b).expect("datagram at the limit");
                assert_eq!(r.byte_cnt as usize, 40 + len, "mtu {mtu} log {log_msg}");
            } else {
                c.err(co::REQ_ERR, cs::LOCAL_LENGTH_ERR);
            }
        }
        // Beyond 2^log_msg_max the WQE itself is over-long (recorded); beyond the MTU only
        // the datagram is.
        let too_long = a.h.dev.errors().iter().any(|e| {
            matches!(e, crate::DeviceError::BadWqe { fault: crate::WqeFault::TooLong(n), .. }
                if *n == limit as u64 + 1)
        });
        assert_eq!(too_long, log_msg < 12, "mtu {mtu} log {log_msg}");
    }
}

#[test]
fn qp1_sends_at_most_its_256_byte_mtu() {
    let mut t = ud(qpc::ST_QP1);
    let mut cq1 = t.a.cq(4);
    let mut qp1 = t.a.qp(qpc::ST_QP1, &cq1, &cq1, 4, Some((4, 2)));
    t.a.ud_up(&qp1, 0);
    let src = t.a.mr(4096, ALL);
    let mut wr = Wr::new(SEND).sge(&src, 0, 257);
    wr.av = Some(av(1, 0, t.b.ip));
    t.a.post_send(&mut qp1, &wr);
    t.a.cqe(&mut cq1).err(co::REQ_ERR, cs::LOCAL_LENGTH_ERR);
}
