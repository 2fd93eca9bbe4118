//! Runtime page requests: a create that needs pages waits for them (its entry stays
//! hardware-owned) until MANAGE_PAGES GIVE on another slot; CANT_GIVE fails it; destroyed
//! objects' pages are offered back; the storm knob.

use firmware_interface::{cmd_status as st, cmds, eqe, op_mod, opcode as op};

use super::{H, be32, msg, set};
use crate::{PageRequests, Profile, syndrome as syn};

const SLOT_PAGES: u8 = 31;

/// An initialized device whose every create needs `pages` pages, with a UAR and an EQ that
/// takes page requests; returns (harness, uar, eqn, EQ ring address).
fn device(pages: u32) -> (H, u32, u32, u64) {
    let mut h = H::with(Profile {
        page_requests: PageRequests::each_create(pages),
        ..Profile::default()
    });
    h.init();
    let uar = h.alloc_uar();
    let (eqn, pas) = h.create_eq(uar, 4, eqe::event::mask(eqe::event::PAGE_REQUEST));
    (h, uar, eqn, pas[0])
}

/// The `num_pages` of the PAGE_REQUEST EQE at index `i` of the ring at `ring`.
fn page_request(h: &H, ring: u64, i: u64) -> i32 {
    let e = h.mem.rd(ring + 64 * i, 64);
    assert_eq!(e[eqe::TYPE], eqe::event::PAGE_REQUEST, "EQE {i} type");
    assert_eq!(e[eqe::OWNER], 0, "EQE {i} written on pass 0");
    be32(&e[eqe::PAGE_REQ_NUM_PAGES..]) as i32
}

fn give(h: &mut H, n: u32) {
    let pages: Vec<u64> = (0..n).map(|_| h.mem.alloc(4096, 4096)).collect();
    h.cmd_on(SLOT_PAGES, &H::give_msg(&pages), 16).expect(0, 0);
}

fn take(h: &mut H, n: u32) -> u32 {
    let mut m = msg(op::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE, 16);
    set(&mut m, cmds::manage_pages_in::INPUT_NUM_ENTRIES, n);
    let r = h.cmd_on(SLOT_PAGES, &m, 16 + 8 * n as usize);
    r.expect(0, 0);
    cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.get(&r.out)
}

#[test]
fn a_create_waits_until_its_pages_are_given() {
    let (mut h, uar, eqn, ring) = device(3);
    let held = h.dev.live().fw_pages;
    let pas = h.queue_buf(64 << 4, 0xf0);
    let dbr = h.dbr();
    let b = h.build(0, &H::create_cq_msg(uar, eqn, 4, dbr, &pas), 16);
    h.post(&b);
    // The device asked for the pages and keeps the command.
    assert!(h.result(&b).hw_owned, "the create waits for pages");
    assert_eq!(page_request(&h, ring, 0), 3);
    assert_eq!(h.dev.waiting_for_pages(), vec![0]);
    for _ in 0..8 {
        h.dev.poll();
    }
    assert!(h.result(&b).hw_owned, "polling alone does not complete it");
    assert_eq!(h.dev.live().cqs, 0);
    // A TAKE now returns none of the reserved pages.
    assert_eq!(take(&mut h, 8), 0);
    // Not enough yet.
    give(&mut h, 2);
    assert!(h.result(&b).hw_owned);
    // One request only: what was asked for and not given is not asked for again.
    assert_eq!(h.dev.page_requests_raised(), 1);
    give(&mut h, 1);
    let r = h.result(&b);
    assert!(
        !r.hw_owned,
        "the create completed once its pages were there"
    );
    r.expect(0, 0);
    let cqn = cmds::create_cq_out::CQN.get(&r.out);
    assert_eq!(h.dev.live().cqs, 1);
    assert_eq!(h.dev.live().fw_pages, held + 3);
    assert!(h.dev.waiting_for_pages().is_empty());

    // The destroy frees the CQ's pages: the device offers them back.
    let mut m = msg(op::DESTROY_CQ, 0, 16);
    set(&mut m, cmds::destroy_cq_in::CQN, cqn);
    h.ok(&m, 16);
    assert_eq!(page_request(&h, ring, 1), -3);
    assert_eq!(take(&mut h, 8), 3);
    assert_eq!(h.dev.live().fw_pages, held);
}

#[test]
fn spare_pages_serve_a_create_at_once() {
    let (mut h, uar, eqn, _ring) = device(2);
    give(&mut h, 2);
    let cqn = h.create_cq(uar, eqn, 4);
    assert_ne!(cqn, 0);
    assert_eq!(h.dev.page_requests_raised(), 0);
}

#[test]
fn cant_give_fails_the_waiting_create() {
    let (mut h, uar, eqn, ring) = device(1);
    let pd = h.alloc_pd();
    let b = h.build(0, &H::mkey_pa_msg(pd), 16);
    h.post(&b);
    assert!(h.result(&b).hw_owned);
    assert_eq!(page_request(&h, ring, 0), 1);
    h.cmd_on(
        SLOT_PAGES,
        &msg(op::MANAGE_PAGES, op_mod::MANAGE_PAGES_CANT_GIVE, 16),
        16,
    )
    .expect(0, 0);
    let r = h.result(&b);
    assert!(!r.hw_owned);
    r.expect(st::NO_RES, syn::PAGES_REFUSED);
    assert_eq!(h.dev.live().mkeys, 0);
    // The next create asks again.
    let b = h.build(
        0,
        &H::create_cq_msg(uar, eqn, 4, h.mem.alloc(64, 64), &[]),
        16,
    );
    h.post(&b);
    assert!(h.result(&b).hw_owned);
    assert_eq!(page_request(&h, ring, 1), 1);
}

#[test]
fn a_failed_create_offers_its_pages_back() {
    let (mut h, _uar, _eqn, ring) = device(2);
    // PD 99 does not exist: the MKEY create fails after its pages were given.
    let b = h.build(0, &H::mkey_pa_msg(99), 16);
    h.post(&b);
    give(&mut h, 2);
    let r = h.result(&b);
    r.expect(st::BAD_PARAM, syn::BAD_PD);
    assert_eq!(page_request(&h, ring, 1), -2);
    assert_eq!(take(&mut h, 2), 2);
}

#[test]
fn the_storm_answers_every_page_command_with_another_request() {
    let (mut h, _uar, _eqn, ring) = device(1);
    h.dev.faults().page_storm = true;
    give(&mut h, 4);
    assert_eq!(page_request(&h, ring, 0), -4);
    assert_eq!(take(&mut h, 4), 4);
    assert_eq!(page_request(&h, ring, 1), 4);
    assert_eq!(take(&mut h, 4), 0);
    assert_eq!(page_request(&h, ring, 2), 1);
    assert_eq!(h.dev.page_requests_raised(), 3);
}
