//! UARs, EQs (CMD events, ownership, overrun), CQs, MKEYs, vport and GID table.

use firmware_interface::ctx::{cqc, eqc, mkc, nic_vport_context as nvc, roce_addr_layout as ral};
use firmware_interface::init_seg::{self as is, health, health_synd};
use firmware_interface::{cmd_status as st, cmds, eqe, opcode as op};

use super::{H, World, be32, msg, set, set64};
use crate::{DeviceError, syndrome as syn};

const CMD_MASK: u64 = 1 << 0x0a;

#[test]
fn uar_doorbells_need_an_allocated_page() {
    let mut w = World::new();
    // A write into a UAR page nobody allocated.
    let stray = (w.uar as usize + 1) * 4096 + 0x40;
    w.h.wr32(stray, 0x0100_0000);
    assert_eq!(
        w.h.dev.errors(),
        &[DeviceError::BadDoorbell {
            offset: stray,
            value: 0x0100_0000
        }]
    );
    // A write to an allocated page, at an offset that is no doorbell.
    let base = w.uar as usize * 4096;
    w.h.wr32(base + 0x100, 5);
    assert_eq!(w.h.dev.errors().len(), 2);
    // A CQ doorbell naming a CQ of this UAR is fine and recorded.
    let v = (1u64 << 32) | u64::from(w.cqn);
    w.h.dev.mmio_write(base + 0x20, &v.to_be_bytes());
    assert_eq!(w.h.dev.errors().len(), 2);
    let last = w.h.dev.uar_writes().last().unwrap();
    assert_eq!((last.uar, last.offset, last.data.len()), (w.uar, 0x20, 8));
    // ... naming an unknown CQ is not.
    w.h.dev
        .mmio_write(base + 0x20, &((1u64 << 32) | 99).to_be_bytes());
    assert_eq!(w.h.dev.errors().len(), 3);
}

#[test]
fn eq_creation_checks_its_context() {
    let mut w = World::new();
    let pas = w.h.queue_buf(64 << 4, 1);
    // log_eq_size above the capability.
    let mut m = H::create_eq_msg(w.uar, 4, 0, &pas);
    set(&mut m, eqc::LOG_EQ_SIZE.at(0x10), 23);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_LOG_SIZE);
    // UAR not allocated.
    let m = H::create_eq_msg(w.uar + 1, 4, 0, &pas);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_UAR);
    // PAS entry not page aligned.
    let m = H::create_eq_msg(w.uar, 4, 0, &[pas[0] + 64]);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_PAS);
    // PAS page not mapped.
    let unmapped = w.h.mem.alloc_unmapped(4096, 4096);
    let m = H::create_eq_msg(w.uar, 4, 0, &[unmapped]);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::PAS_NOT_MAPPED);
    assert!(matches!(w.h.dev.errors().last(), Some(DeviceError::Dma(f)) if f.iova == unmapped));
    // Two pages needed (log 7 ⇒ 8 KiB), one given.
    let m = H::create_eq_msg(w.uar, 7, 0, &pas);
    w.h.cmd(&m, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    // One contiguous buffer with a bigger page works (rdma-core style).
    let big = w.h.mem.alloc(8192, 8192);
    let mut m = H::create_eq_msg(w.uar, 7, 0, &[big]);
    set(&mut m, eqc::LOG_PAGE_SIZE.at(0x10), 1);
    w.h.ok(&m, 16);
    assert_eq!(w.h.dev.live().eqs, 2);
}

/// Reads EQE `i` of a 4 KiB-page EQ.
fn eqe_at(h: &H, pas: &[u64], i: u64) -> Vec<u8> {
    let off = i * 64;
    h.mem.rd(pas[(off / 4096) as usize] + off % 4096, 64)
}

#[test]
fn cmd_events_have_the_right_owner_bit_across_wraps() {
    let mut h = H::new();
    h.init();
    let uar = h.alloc_uar();
    let (eqn, pas) = h.create_eq(uar, 2, CMD_MASK); // 4 entries
    h.eq_db(uar, eqn, 0, true);
    let mut ci = 0u32;
    for n in 0..11u32 {
        let slot = (n % 3) as u8 * 7;
        h.cmd_on(slot, &msg(op::NOP, 0, 16), 16).expect(0, 0);
        // The driver's view: EQE at ci & 3 is valid iff owner == (ci >> 2) & 1.
        let e = eqe_at(&h, &pas, u64::from(ci & 3));
        assert_eq!(
            e[eqe::OWNER] & 1,
            ((ci >> 2) & 1) as u8,
            "owner of EQE {ci}"
        );
        assert_eq!(e[eqe::TYPE], eqe::event::CMD);
        assert_eq!(be32(&e[eqe::CMD_VECTOR..]), 1 << slot, "vector of EQE {ci}");
        ci += 1;
        // Nothing newer is valid yet.
        let next = eqe_at(&h, &pas, u64::from(ci & 3));
        assert_ne!(
            next[eqe::OWNER] & 1,
            ((ci >> 2) & 1) as u8,
            "stale EQE looks valid"
        );
        h.eq_db(uar, eqn, ci, true);
    }
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
    assert_eq!(h.dev.take_interrupts(), [0], "armed EQ fired on vector 0");
}

#[test]
fn eq_overrun_is_fatal() {
    let mut h = H::new();
    h.init();
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 1, CMD_MASK); // 2 entries
    h.eq_db(uar, eqn, 0, true);
    for _ in 0..2 {
        h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    }
    // The driver never moved its consumer index: the third CMD EQE overruns.
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.errors(), &[DeviceError::EqOverrun { eqn: eqn as u8 }]);
    let mut b = [0u8; 4];
    h.dev.mmio_read(is::HEALTH + 0x3c, &mut b);
    assert_eq!(b[1], health_synd::ASYNCHRONOUS_EQ_BUF_OVERRUN);
    h.dev.mmio_read(is::HEALTH + health::RFR_SEVERITY, &mut b);
    assert_ne!(b[0] & health::RFR_BIT, 0);
    h.cmd(&msg(op::NOP, 0, 16), 16)
        .expect(st::INTERNAL_ERR, syn::HEALTH_FATAL);
}

#[test]
fn eq_with_oi_does_not_overrun() {
    let mut h = H::new();
    h.init();
    let uar = h.alloc_uar();
    let pas = h.queue_buf(128, 1);
    let mut m = H::create_eq_msg(uar, 1, CMD_MASK, &pas);
    set(&mut m, eqc::OI.at(0x10), 1);
    h.ok(&m, 16);
    for _ in 0..5 {
        h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    }
    assert!(h.dev.errors().is_empty());
}

#[test]
fn eq_doorbell_checks() {
    let mut h = H::new();
    h.init();
    let uar = h.alloc_uar();
    let uar2 = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 3, CMD_MASK);
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    // Consumer index beyond the producer.
    h.eq_db(uar, eqn, 5, false);
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::EqConsumerAhead {
            eqn: eqn as u8,
            ci: 5,
            pi: 1
        }]
    );
    // The EQ's doorbell on another UAR page, and an unknown EQ.
    h.eq_db(uar2, eqn, 1, false);
    h.eq_db(uar, 9, 0, false);
    assert!(matches!(
        h.dev.errors()[1..],
        [
            DeviceError::BadDoorbell { .. },
            DeviceError::BadDoorbell { .. }
        ]
    ));
    // Arming with unconsumed EQEs fires at once.
    assert!(h.dev.take_interrupts().is_empty());
    h.eq_db(uar, eqn, 0, true);
    assert_eq!(h.dev.take_interrupts(), [0]);
    // Consumed and armed: the next EQE fires; one not armed does not.
    h.eq_db(uar, eqn, 1, true);
    assert!(h.dev.take_interrupts().is_empty());
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.take_interrupts(), [0]);
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert!(h.dev.take_interrupts().is_empty(), "fired while not armed");
}

#[test]
fn eq_vector_is_checked_and_delivered_to_the_sink() {
    use std::sync::{Arc, Mutex};
    let mut h = H::new();
    h.init();
    let uar = h.alloc_uar();
    let vectors = h.dev.profile().msix_vectors;
    // A vector beyond the MSI-X table.
    let pas = h.queue_buf(64 << 2, eqe::OWNER_INIT);
    let mut m = H::create_eq_msg(uar, 2, CMD_MASK, &pas);
    set(&mut m, eqc::INTR.at(0x10), u32::from(vectors));
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_VECTOR);
    // The last vector is fine; its EQ fires that vector, into the sink.
    set(&mut m, eqc::INTR.at(0x10), u32::from(vectors - 1));
    let o = h.ok(&m, 16);
    let eqn = cmds::create_eq_out::EQ_NUMBER.get(&o);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    h.dev
        .set_interrupt_sink(Some(Arc::new(move |v| g.lock().unwrap().push(v))));
    // Not armed: an EQE raises nothing.
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert!(got.lock().unwrap().is_empty(), "fired while not armed");
    // Armed with that EQE unconsumed: fires at once, once.
    h.eq_db(uar, eqn, 0, true);
    assert_eq!(*got.lock().unwrap(), [vectors - 1]);
    // Consumed and armed: the next EQE fires again.
    h.eq_db(uar, eqn, 1, true);
    assert_eq!(got.lock().unwrap().len(), 1);
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(*got.lock().unwrap(), [vectors - 1, vectors - 1]);
    assert_eq!(h.dev.take_interrupts(), [vectors - 1]);
    h.dev.set_interrupt_sink(None);
    h.eq_db(uar, eqn, 2, true);
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(got.lock().unwrap().len(), 2, "no sink, no delivery");
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
}

#[test]
fn cq_creation_checks_its_context() {
    let mut w = World::new();
    let pas = w.h.queue_buf(64 << 4, 0xf0);
    let dbr = w.h.dbr();
    let base = H::create_cq_msg(w.uar, w.eqn, 4, dbr, &pas);
    let bad = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = base.clone();
        f(&mut m);
        m
    };
    let c = 0x10;
    let cases: Vec<(Vec<u8>, u32)> = vec![
        (bad(&|m| set(m, cqc::CQE_SZ.at(c), 2)), syn::BAD_CQE_SIZE),
        (
            bad(&|m| set(m, cqc::LOG_CQ_SIZE.at(c), 23)),
            syn::BAD_LOG_SIZE,
        ),
        (bad(&|m| set(m, cqc::UAR_PAGE.at(c), 60)), syn::BAD_UAR),
        (
            bad(&|m| set(m, cqc::C_EQN_OR_APU_ELEMENT.at(c), 9)),
            syn::BAD_EQ,
        ),
        (
            bad(&|m| set64(m, cqc::DBR_ADDR.at(c), dbr + 4)),
            syn::BAD_DBR,
        ),
        (
            bad(&|m| set(m, cqc::CQE_COMP_EN.at(c), 1)),
            syn::UNSUPPORTED,
        ),
        (
            bad(&|m| set(m, cqc::PAGE_OFFSET.at(c), 1)),
            syn::BAD_PAGE_OFFSET,
        ),
    ];
    for (m, s) in cases {
        w.h.cmd(&m, 16).expect(st::BAD_PARAM, s);
    }
    let unmapped = w.h.mem.alloc_unmapped(64, 64);
    let m = bad(&|m| set64(m, cqc::DBR_ADDR.at(c), unmapped));
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_DBR);
    assert_eq!(w.h.dev.live().cqs, 1);
    w.h.ok(&base, 16);
    // 128-byte CQEs need twice the buffer.
    let m = bad(&|m| set(m, cqc::CQE_SZ.at(c), 1));
    let mut m2 = m.clone();
    set(&mut m2, cqc::LOG_CQ_SIZE.at(c), 6);
    w.h.cmd(&m2, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    assert_eq!(w.h.dev.live().cqs, 2);
}

fn mtt_msg(pd: u32, start: u64, len: u64, pages: &[u64], octwords: u32) -> Vec<u8> {
    let mut m = msg(op::CREATE_MKEY, 0, 0x110 + 16 * octwords as usize);
    let c = 0x10;
    set(&mut m, mkc::ACCESS_MODE_1_0.at(c), mkc::ACCESS_MODE_MTT);
    set(&mut m, mkc::LR.at(c), 1);
    set(&mut m, mkc::LW.at(c), 1);
    set(&mut m, mkc::RR.at(c), 1);
    set(&mut m, mkc::RW.at(c), 1);
    set(&mut m, mkc::QPN.at(c), mkc::QPN_NONE);
    set(&mut m, mkc::PD.at(c), pd);
    set64(&mut m, mkc::START_ADDR.at(c), start);
    set64(&mut m, mkc::LEN.at(c), len);
    set(&mut m, mkc::LOG_PAGE_SIZE.at(c), 12);
    set(&mut m, mkc::TRANSLATIONS_OCTWORD_SIZE.at(c), octwords);
    set(
        &mut m,
        cmds::create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
        octwords,
    );
    for (i, p) in pages.iter().enumerate() {
        m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
    }
    m
}

#[test]
fn mkeys_pa_and_mtt() {
    let mut w = World::new();
    let k1 = w.h.create_mkey(w.pd);
    let k2 = w.h.create_mkey(w.pd);
    assert_eq!((k1, k2), (1, 2));
    assert_eq!(w.h.dev.obj.mkeys.get(k1).unwrap().key_7_0, 0x42);
    // MTT: 3 pages for 0x2100 bytes starting 0x100 into a page, padded to 2 octwords.
    let pages: Vec<u64> = (0..4).map(|_| w.h.mem.alloc(4096, 4096)).collect();
    let ok = mtt_msg(w.pd, 0x7000_0100, 0x2100, &pages, 2);
    w.h.ok(&ok, 16);
    let k = w.h.dev.obj.mkeys.get(3).unwrap();
    assert_eq!(k.mtt, pages[..3]);
    // One octword (2 entries) cannot cover 3 pages.
    w.h.cmd(&mtt_msg(w.pd, 0x7000_0100, 0x2100, &pages[..2], 1), 16)
        .expect(st::BAD_PARAM, syn::MTT_TOO_SHORT);
    // The list claims more octwords than inlen carries.
    let mut m = mtt_msg(w.pd, 0x7000_0100, 0x2100, &pages, 2);
    set(
        &mut m,
        cmds::create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
        3,
    );
    set(&mut m, mkc::TRANSLATIONS_OCTWORD_SIZE.at(0x10), 3);
    w.h.cmd(&m, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    // Misaligned MTT entry.
    let mut bad = pages.clone();
    bad[1] += 8;
    w.h.cmd(&mtt_msg(w.pd, 0x7000_0100, 0x2100, &bad, 2), 16)
        .expect(st::BAD_PARAM, syn::BAD_MTT);
    // Context checks.
    let c = 0x10;
    let cases: Vec<(super::Mutation, u32)> = vec![
        (Box::new(|m| set(m, mkc::PD.at(c), 77)), syn::BAD_PD),
        (Box::new(|m| set(m, mkc::FREE.at(c), 1)), syn::MKEY_FREE),
        (
            Box::new(|m| set(m, mkc::ACCESS_MODE_1_0.at(c), mkc::ACCESS_MODE_KLM)),
            syn::BAD_ACCESS_MODE,
        ),
        (Box::new(|m| set(m, mkc::QPN.at(c), 5)), syn::BAD_MKEY_QPN),
        (
            Box::new(|m| set(m, mkc::LW.at(c), 0)),
            syn::BAD_ACCESS_FLAGS,
        ),
        (
            Box::new(|m| set(m, mkc::LOG_PAGE_SIZE.at(c), 40)),
            syn::BAD_LOG_PAGE_SIZE,
        ),
        (
            Box::new(|m| set(m, cmds::create_mkey_in::PG_ACCESS, 1)),
            syn::UNSUPPORTED,
        ),
    ];
    for (f, s) in cases {
        let mut m = ok.clone();
        f(&mut m);
        w.h.cmd(&m, 16).expect(st::BAD_PARAM, s);
    }
    assert_eq!(w.h.dev.live().mkeys, 3);
    let mut m = msg(op::DESTROY_MKEY, 0, 16);
    set(&mut m, cmds::destroy_mkey_in::MKEY_INDEX, 2);
    w.h.ok(&m, 16);
    w.h.cmd(&m, 16).expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
}

#[test]
fn nic_vport_context_and_state() {
    let mut w = World::new();
    let o = w.h.ok(&msg(op::QUERY_NIC_VPORT_CONTEXT, 0, 16), 0x110);
    assert_eq!(o[0x106..0x10c], [2, 0, 0, 0, 0, 1], "permanent MAC");
    assert_eq!(nvc::ROCE_EN.at(0x10).get(&o), 1, "enabled by init()");
    let o = w.h.ok(&msg(op::QUERY_VPORT_STATE, 0, 16), 16);
    assert_eq!(cmds::query_vport_state_out::STATE.get(&o), 1);
    let mut m = msg(op::QUERY_VPORT_STATE, 0, 16);
    set(&mut m, cmds::query_vport_state_in::OTHER_VPORT, 1);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_VPORT);
    // Disable RoCE again; an unknown field_select bit is refused.
    let mut m = msg(op::MODIFY_NIC_VPORT_CONTEXT, 0, 512);
    set(
        &mut m,
        cmds::modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN,
        1,
    );
    w.h.ok(&m, 16);
    let o = w.h.ok(&msg(op::QUERY_NIC_VPORT_CONTEXT, 0, 16), 0x110);
    assert_eq!(nvc::ROCE_EN.at(0x10).get(&o), 0);
    set(
        &mut m,
        cmds::modify_nic_vport_context_in::FIELD_SELECT,
        1 << 9,
    );
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_FIELD_SELECT);
}

/// A RoCE v2 IPv4 GID entry.
pub(crate) fn gid_entry(ip: [u8; 4]) -> [u8; 32] {
    let mut e = [0u8; 32];
    e[10] = 0xff;
    e[11] = 0xff;
    e[12..16].copy_from_slice(&ip);
    set(&mut e, ral::SOURCE_MAC_47_32, 0x0200);
    set(&mut e, ral::SOURCE_MAC_31_0, 1);
    set(&mut e, ral::ROCE_L3_TYPE, ral::L3_TYPE_IPV4);
    set(&mut e, ral::ROCE_VERSION, ral::ROCE_VERSION_V2);
    e
}

pub(crate) fn set_gid(h: &mut H, idx: u32, e: &[u8; 32]) -> super::Resp {
    let mut m = msg(op::SET_ROCE_ADDRESS, 0, 48);
    set(&mut m, cmds::set_roce_address_in::ROCE_ADDRESS_INDEX, idx);
    set(&mut m, cmds::set_roce_address_in::VHCA_PORT_NUM, 1);
    m[16..48].copy_from_slice(e);
    h.cmd(&m, 16)
}

#[test]
fn roce_address_table() {
    let mut w = World::new();
    let e = gid_entry([10, 0, 0, 1]);
    set_gid(&mut w.h, 3, &e).expect(0, 0);
    let mut q = msg(op::QUERY_ROCE_ADDRESS, 0, 16);
    set(&mut q, cmds::query_roce_address_in::ROCE_ADDRESS_INDEX, 3);
    let o = w.h.ok(&q, 48);
    assert_eq!(o[16..48], e);
    set_gid(&mut w.h, 16, &e).expect(st::BAD_PARAM, syn::BAD_GID_INDEX);
    let mut v1 = e;
    set(&mut v1, ral::ROCE_VERSION, ral::ROCE_VERSION_V1);
    set_gid(&mut w.h, 4, &v1).expect(st::BAD_PARAM, syn::BAD_GID_ENTRY);
    // Clearing an entry (all zero) is allowed.
    set_gid(&mut w.h, 3, &[0; 32]).expect(0, 0);
    let o = w.h.ok(&q, 48);
    assert!(o[16..48].iter().all(|b| *b == 0));
}
