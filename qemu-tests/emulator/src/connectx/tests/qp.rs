//! QP creation, the state machine, QUERY_QP.

use firmware_interface::ctx::{ads, qpc, qpc::optpar as opt};
use firmware_interface::{Field, cmd_status as st, cmds, opcode as op};

use super::objects::{gid_entry, set_gid};
use super::{H, World, msg, set, set64};
use crate::{Profile, syndrome as syn};

const C: usize = 0x18;
const PATH: usize = C + 0x18;

fn modify(opcode: u16, qpn: u32) -> Vec<u8> {
    let mut m = msg(opcode, 0, 272);
    set(&mut m, cmds::rst2init_qp_in::QPN, qpn);
    m
}

fn q(f: Field) -> Field {
    f.at(C)
}

fn p(f: Field) -> Field {
    f.at(PATH)
}

fn rst2init(qpn: u32, ud: bool) -> Vec<u8> {
    let mut m = modify(op::RST2INIT_QP, qpn);
    set(&mut m, p(ads::VHCA_PORT_NUM), 1);
    set(&mut m, q(qpc::PM_STATE), qpc::PM_STATE_MIGRATED);
    if ud {
        set(&mut m, q(qpc::Q_KEY), 0x1111_0000);
    } else {
        set(&mut m, q(qpc::RRE), 1);
        set(&mut m, q(qpc::RWE), 1);
    }
    m
}

fn init2rtr(qpn: u32) -> Vec<u8> {
    let mut m = modify(op::INIT2RTR_QP, qpn);
    set(&mut m, q(qpc::MTU), qpc::MTU_1024);
    set(&mut m, q(qpc::LOG_MSG_MAX), 30);
    set(&mut m, q(qpc::REMOTE_QPN), 0x123);
    set(&mut m, q(qpc::NEXT_RCV_PSN), 0x55_5555);
    set(&mut m, q(qpc::MIN_RNR_NAK), 12);
    set(&mut m, q(qpc::LOG_RRA_MAX), 2);
    set(&mut m, p(ads::VHCA_PORT_NUM), 1);
    set(&mut m, p(ads::SRC_ADDR_INDEX), 0);
    set(&mut m, p(ads::HOP_LIMIT), 64);
    set(&mut m, p(ads::UDP_SPORT), 0xc123);
    let rgid = p(ads::RGID_RIP).slice_mut(&mut m).unwrap();
    rgid[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
    p(ads::RMAC)
        .slice_mut(&mut m)
        .unwrap()
        .copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    m
}

fn rtr2rts(qpn: u32) -> Vec<u8> {
    let mut m = modify(op::RTR2RTS_QP, qpn);
    set(&mut m, q(qpc::NEXT_SEND_PSN), 0x12_3456);
    set(&mut m, q(qpc::RETRY_COUNT), 7);
    set(&mut m, q(qpc::RNR_RETRY), 7);
    set(&mut m, q(qpc::LOG_SRA_MAX), 3);
    set(&mut m, p(ads::ACK_TIMEOUT), 14);
    m
}

fn query(h: &mut H, qpn: u32) -> Vec<u8> {
    let mut m = msg(op::QUERY_QP, 0, 16);
    set(&mut m, cmds::query_qp_in::QPN, qpn);
    h.ok(&m, 464)
}

fn rc_world() -> (World, u32) {
    let mut w = World::new();
    set_gid(&mut w.h, 0, &gid_entry([10, 0, 0, 1])).expect(0, 0);
    let qpn = w.h.create_qp(qpc::ST_RC, w.pd, w.cqn, w.uar);
    (w, qpn)
}

#[test]
fn rc_qp_walks_rst_init_rtr_rts_err_rst() {
    let (mut w, qpn) = rc_world();
    assert_eq!(qpn, 2, "QPNs start at 2");
    let h = &mut w.h;
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_RST as u8));
    h.ok(&rst2init(qpn, false), 16);
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_INIT as u8));
    h.ok(&init2rtr(qpn), 16);
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_RTR as u8));
    h.ok(&rtr2rts(qpn), 16);
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_RTS as u8));
    // QUERY_QP returns what the transitions stored.
    let o = query(h, qpn);
    assert_eq!(q(qpc::STATE).get(&o), qpc::STATE_RTS);
    assert_eq!(q(qpc::ST).get(&o), qpc::ST_RC);
    assert_eq!(q(qpc::PD).get(&o), w.pd);
    assert_eq!(q(qpc::CQN_SND).get(&o), w.cqn);
    assert_eq!(q(qpc::REMOTE_QPN).get(&o), 0x123);
    assert_eq!(q(qpc::NEXT_RCV_PSN).get(&o), 0x55_5555);
    assert_eq!(q(qpc::NEXT_SEND_PSN).get(&o), 0x12_3456);
    assert_eq!(q(qpc::MTU).get(&o), qpc::MTU_1024);
    assert_eq!(q(qpc::RRE).get(&o), 1);
    assert_eq!(q(qpc::RETRY_COUNT).get(&o), 7);
    assert_eq!(q(qpc::MIN_RNR_NAK).get(&o), 12);
    assert_eq!(p(ads::ACK_TIMEOUT).get(&o), 14, "RTR2RTS ack_timeout");
    assert_eq!(
        p(ads::UDP_SPORT).get(&o),
        0xc123,
        "INIT2RTR path kept by RTR2RTS"
    );
    assert_eq!(p(ads::RMAC).slice(&o).unwrap(), [2, 0, 0, 0, 0, 2]);
    let pas = cmds::query_qp_out::QP_PAS_OR_QPC_EXT_AND_PAS.byte_off();
    assert_ne!(
        u64::from_be_bytes(o[pas..pas + 8].try_into().unwrap()),
        0,
        "PAS returned"
    );
    // RTS2RTS with an allowed optional parameter.
    let mut m = modify(op::RTS2RTS_QP, qpn);
    set(
        &mut m,
        cmds::rst2init_qp_in::OPT_PARAM_MASK,
        opt::RNR_TIMEOUT,
    );
    set(&mut m, q(qpc::MIN_RNR_NAK), 3);
    h.ok(&m, 16);
    assert_eq!(q(qpc::MIN_RNR_NAK).get(&query(h, qpn)), 3);
    h.ok(&modify(op::QP_2ERR, qpn)[..16], 16);
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_ERR as u8));
    h.ok(&modify(op::QP_2RST, qpn)[..16], 16);
    assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_RST as u8));
    let o = query(h, qpn);
    assert_eq!(q(qpc::REMOTE_QPN).get(&o), 0, "2RST forgets the connection");
    assert_eq!(q(qpc::PD).get(&o), w.pd, "but keeps what CREATE_QP set");
    // And the walk works again.
    h.ok(&rst2init(qpn, false), 16);
}

#[test]
fn illegal_transitions_are_bad_qp_state() {
    let (mut w, qpn) = rc_world();
    let h = &mut w.h;
    let bad = |h: &mut H, m: &[u8]| {
        let before = h.dev.qp_state(qpn);
        h.cmd(m, 16)
            .expect(st::BAD_QP_STATE, syn::BAD_STATE_TRANSITION);
        assert_eq!(h.dev.qp_state(qpn), before);
    };
    bad(h, &init2rtr(qpn));
    bad(h, &rtr2rts(qpn));
    bad(h, &modify(op::RTS2RTS_QP, qpn));
    bad(h, &modify(op::INIT2INIT_QP, qpn));
    h.ok(&rst2init(qpn, false), 16);
    bad(h, &rst2init(qpn, false));
    bad(h, &rtr2rts(qpn));
    h.ok(&init2rtr(qpn), 16);
    bad(h, &init2rtr(qpn));
    bad(h, &modify(op::RTS2RTS_QP, qpn));
    h.ok(&rtr2rts(qpn), 16);
    bad(h, &modify(op::SQERR2RTS_QP, qpn));
    bad(h, &modify(op::SQD_RTS_QP, qpn));
    // ERR and RST are reachable from anywhere, RST included.
    h.ok(&modify(op::QP_2RST, qpn)[..16], 16);
    h.ok(&modify(op::QP_2ERR, qpn)[..16], 16);
    bad(h, &rst2init(qpn, false));
}

/// INIT2RTR of a datagram QP: the path MTU code and `log_msg_max`, nothing else.
fn ud_init2rtr(qpn: u32, mtu: u32, log_msg_max: u32) -> Vec<u8> {
    let mut m = modify(op::INIT2RTR_QP, qpn);
    set(&mut m, q(qpc::MTU), mtu);
    set(&mut m, q(qpc::LOG_MSG_MAX), log_msg_max);
    m
}

#[test]
fn datagram_init2rtr_needs_a_path_mtu() {
    let mut w = World::new();
    let ud = w.h.create_qp(qpc::ST_UD, w.pd, w.cqn, w.uar);
    let pas = w.h.queue_buf(2048, 0);
    let dbr = w.h.dbr();
    let o = w.h.ok(
        &H::create_qp_msg(qpc::ST_QP1, w.pd, w.cqn, w.uar, dbr, &pas),
        16,
    );
    let gsi = cmds::create_qp_out::QPN.get(&o);
    for (qpn, mtu, log) in [(ud, qpc::MTU_4096, 12), (gsi, qpc::MTU_256, 8)] {
        w.h.ok(&rst2init(qpn, true), 16);
        // No MTU (what a driver that leaves the context empty sends), or a code beyond 4096.
        for bad in [0, 6, 7] {
            w.h.cmd(&ud_init2rtr(qpn, bad, log), 16)
                .expect(st::BAD_PARAM, syn::BAD_MTU);
            assert_eq!(w.h.dev.qp_state(qpn), Some(qpc::STATE_INIT as u8));
        }
        // A message limit above the device's.
        w.h.cmd(&ud_init2rtr(qpn, mtu, 31), 16)
            .expect(st::BAD_PARAM, syn::BAD_MSG_SIZE);
        w.h.ok(&ud_init2rtr(qpn, mtu, log), 16);
        let o = query(&mut w.h, qpn);
        assert_eq!(
            (q(qpc::STATE).get(&o), q(qpc::MTU).get(&o)),
            (qpc::STATE_RTR, mtu)
        );
        assert_eq!(q(qpc::LOG_MSG_MAX).get(&o), log);
    }
}

#[test]
fn ud_qp_walk() {
    let mut w = World::new();
    let qpn = w.h.create_qp(qpc::ST_UD, w.pd, w.cqn, w.uar);
    w.h.ok(&rst2init(qpn, true), 16);
    w.h.ok(&ud_init2rtr(qpn, qpc::MTU_4096, 12), 16);
    let mut m = modify(op::RTR2RTS_QP, qpn);
    set(&mut m, q(qpc::NEXT_SEND_PSN), 7);
    w.h.ok(&m, 16);
    let o = query(&mut w.h, qpn);
    assert_eq!(q(qpc::STATE).get(&o), qpc::STATE_RTS);
    assert_eq!(q(qpc::MTU).get(&o), qpc::MTU_4096);
    assert_eq!(q(qpc::LOG_MSG_MAX).get(&o), 12);
    assert_eq!(q(qpc::Q_KEY).get(&o), 0x1111_0000);
    assert_eq!(q(qpc::NEXT_SEND_PSN).get(&o), 7);
    // An RC-only optional parameter is not allowed for UD.
    let mut m = modify(op::RTS2RTS_QP, qpn);
    set(&mut m, cmds::rst2init_qp_in::OPT_PARAM_MASK, opt::RRE);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_OPT_PARAM);
    set(&mut m, cmds::rst2init_qp_in::OPT_PARAM_MASK, opt::Q_KEY);
    set(&mut m, q(qpc::Q_KEY), 0x2222);
    w.h.ok(&m, 16);
    assert_eq!(q(qpc::Q_KEY).get(&query(&mut w.h, qpn)), 0x2222);
}

#[test]
fn create_qp_checks_its_context() {
    let mut w = World::new();
    let pas = w.h.queue_buf(2048, 0);
    let dbr = w.h.dbr();
    let base = H::create_qp_msg(qpc::ST_RC, w.pd, w.cqn, w.uar, dbr, &pas);
    let cases: Vec<(super::Mutation, u32)> = vec![
        (Box::new(|m| set(m, q(qpc::ST), qpc::ST_XRC)), syn::BAD_ST),
        (
            Box::new(|m| set(m, q(qpc::STATE), qpc::STATE_INIT)),
            syn::BAD_INITIAL_STATE,
        ),
        (Box::new(|m| set(m, q(qpc::PD), 99)), syn::BAD_PD),
        (Box::new(|m| set(m, q(qpc::CQN_SND), 99)), syn::BAD_CQ),
        (Box::new(|m| set(m, q(qpc::CQN_RCV), 99)), syn::BAD_CQ),
        (Box::new(|m| set(m, q(qpc::UAR_PAGE), 0)), syn::BAD_UAR),
        (
            Box::new(|m| set(m, q(qpc::LOG_RQ_STRIDE), 6)),
            syn::BAD_WQE_SIZE,
        ),
        (
            // an SRQ QP naming no SRQ (srqn 0)
            Box::new(|m| set(m, q(qpc::RQ_TYPE), qpc::RQ_TYPE_SRQ)),
            syn::BAD_SRQ,
        ),
        (
            Box::new(|m| {
                set(m, q(qpc::RQ_TYPE), qpc::RQ_TYPE_ZERO);
                set(m, q(qpc::NO_SQ), 1);
            }),
            syn::NO_QUEUES,
        ),
        (
            Box::new(move |m| set64(m, q(qpc::DBR_ADDR), dbr + 2)),
            syn::BAD_DBR,
        ),
        (
            Box::new(|m| set(m, q(qpc::LOG_MSG_MAX), 31)),
            syn::BAD_MSG_SIZE,
        ),
        (
            Box::new(|m| set(m, cmds::create_qp_in::INPUT_QPN, 9)),
            syn::UNSUPPORTED,
        ),
    ];
    for (f, s) in cases {
        let mut m = base.clone();
        f(&mut m);
        w.h.cmd(&m, 16).expect(st::BAD_PARAM, s);
    }
    // RQ 16 × 64 B + SQ 16 × 64 B = 2 KiB; a 64 KiB SQ needs 17 pages.
    let mut m = base.clone();
    set(&mut m, q(qpc::LOG_SQ_SIZE), 10);
    w.h.cmd(&m, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    assert_eq!(w.h.dev.live().qps, 0);
    // Receive-only and send-only QPs are fine.
    let mut m = base.clone();
    set(&mut m, q(qpc::NO_SQ), 1);
    w.h.ok(&m, 16);
    let mut m = base.clone();
    set(&mut m, q(qpc::RQ_TYPE), qpc::RQ_TYPE_ZERO);
    w.h.ok(&m, 16);
    // QP1 once.
    let m = H::create_qp_msg(qpc::ST_QP1, w.pd, w.cqn, w.uar, dbr, &pas);
    let o = w.h.ok(&m, 16);
    assert_eq!(cmds::create_qp_out::QPN.get(&o), 1);
    w.h.cmd(&m, 16).expect(st::NO_RES, syn::QP1_EXISTS);
}

#[test]
fn modify_qp_checks_parameters() {
    let (mut w, qpn) = rc_world();
    let h = &mut w.h;
    // Port other than 1, P_Key index beyond the table.
    let mut m = rst2init(qpn, false);
    set(&mut m, p(ads::VHCA_PORT_NUM), 2);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_PORT);
    let mut m = rst2init(qpn, false);
    set(&mut m, p(ads::PKEY_INDEX), 128);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_PKEY_INDEX);
    // Changing a create-time field.
    let mut m = rst2init(qpn, false);
    set(&mut m, q(qpc::PD), w.pd + 1);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::IMMUTABLE_FIELD);
    // Repeating it is fine.
    let mut m = rst2init(qpn, false);
    set(&mut m, q(qpc::PD), w.pd);
    set(&mut m, q(qpc::CQN_SND), w.cqn);
    h.ok(&m, 16);
    // INIT2RTR parameter checks.
    let cases: Vec<(super::Mutation, u32)> = vec![
        (Box::new(|m| set(m, q(qpc::MTU), 0)), syn::BAD_MTU),
        (Box::new(|m| set(m, q(qpc::MTU), 6)), syn::BAD_MTU),
        (
            Box::new(|m| set(m, q(qpc::REMOTE_QPN), 1)),
            syn::BAD_REMOTE_QPN,
        ),
        (
            Box::new(|m| set(m, p(ads::SRC_ADDR_INDEX), 5)),
            syn::BAD_PATH,
        ),
        (
            Box::new(|m| p(ads::RMAC).slice_mut(m).unwrap().fill(0)),
            syn::BAD_PATH,
        ),
        (
            Box::new(|m| p(ads::RGID_RIP).slice_mut(m).unwrap().fill(0)),
            syn::BAD_PATH,
        ),
        (
            Box::new(|m| set(m, q(qpc::LOG_RRA_MAX), 5)),
            syn::BAD_RA_DEPTH,
        ),
        (
            Box::new(|m| set(m, cmds::rst2init_qp_in::OPT_PARAM_MASK, opt::ALT_ADDR_PATH)),
            syn::BAD_OPT_PARAM,
        ),
    ];
    for (f, s) in cases {
        let mut m = init2rtr(qpn);
        f(&mut m);
        h.cmd(&m, 16).expect(st::BAD_PARAM, s);
        assert_eq!(h.dev.qp_state(qpn), Some(qpc::STATE_INIT as u8));
    }
    // RoCE disabled in the vport context.
    let mut m = msg(op::MODIFY_NIC_VPORT_CONTEXT, 0, 512);
    set(
        &mut m,
        cmds::modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN,
        1,
    );
    h.ok(&m, 16);
    h.cmd(&init2rtr(qpn), 16)
        .expect(st::BAD_PARAM, syn::ROCE_DISABLED);
}

#[test]
fn ib_port_needs_an_rlid() {
    let mut h = H::with(Profile {
        port_type_eth: false,
        ..crate::connectx::tests::quiet()
    });
    h.init_ib();
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 2, 0);
    let pd = h.alloc_pd();
    let cqn = h.create_cq(uar, eqn, 2);
    let qpn = h.create_qp(qpc::ST_RC, pd, cqn, uar);
    h.ok(&rst2init(qpn, false), 16);
    h.cmd(&init2rtr(qpn), 16)
        .expect(st::BAD_PARAM, syn::BAD_PATH);
    let mut m = init2rtr(qpn);
    set(&mut m, p(ads::RLID), 7);
    h.ok(&m, 16);
    // No RoCE addresses on an IB port.
    set_gid(&mut h, 0, &gid_entry([1, 2, 3, 4])).expect(st::BAD_PARAM, syn::NOT_ROCE);
}

impl H {
    /// Bring-up for an IB port (no RoCE page, no vport RoCE enable).
    fn init_ib(&mut self) {
        use firmware_interface::op_mod;
        self.enable();
        let n = self.query_pages(op_mod::PAGES_BOOT) + self.query_pages(op_mod::PAGES_INIT);
        self.give_pages(n);
        self.ok(&msg(op::INIT_HCA, 0, 32), 16);
    }
}

#[test]
fn objects_used_by_a_qp_cannot_go() {
    let (mut w, qpn) = rc_world();
    let h = &mut w.h;
    let mut m = msg(op::DESTROY_CQ, 0, 16);
    set(&mut m, cmds::destroy_cq_in::CQN, w.cqn);
    h.cmd(&m, 16).expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut pd = msg(op::DEALLOC_PD, 0, 16);
    set(&mut pd, cmds::dealloc_pd_in::PD, w.pd);
    h.cmd(&pd, 16).expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut d = msg(op::DESTROY_QP, 0, 16);
    set(&mut d, cmds::destroy_qp_in::QPN, qpn);
    h.ok(&d, 16);
    h.cmd(&d, 16).expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    h.ok(&m, 16);
    h.ok(&pd, 16);
    assert_eq!(h.dev.qp_state(qpn), None);
}

#[test]
fn queue_sizes_are_bounded_by_log_max_qp_sz() {
    let mut h = H::with(Profile {
        log_max_qp_sz: 6,
        ..crate::connectx::tests::quiet()
    });
    h.init();
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 2, 0);
    let pd = h.alloc_pd();
    let cqn = h.create_cq(uar, eqn, 2);
    let pas = h.queue_buf(1 << 16, 0);
    let dbr = h.dbr();
    let base = H::create_qp_msg(qpc::ST_RC, pd, cqn, uar, dbr, &pas);
    for f in [qpc::LOG_SQ_SIZE, qpc::LOG_RQ_SIZE] {
        let mut m = base.clone();
        set(&mut m, q(f), 7);
        h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_LOG_SIZE);
        set(&mut m, q(f), 6);
        h.ok(&m, 16);
    }
}
