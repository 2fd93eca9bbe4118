//! SRQs: at ISSI 1 receive memory pools (CREATE_RMP / MODIFY_RMP / QUERY_RMP /
//! DESTROY_RMP), at ISSI 0 CREATE_SRQ / DESTROY_SRQ; each family refused at the other ISSI;
//! the firmware checks, QPs on them, the object counts.

use firmware_interface::ctx::{qpc, rmpc, srqc, wq};
use firmware_interface::{Field, cmd_status as st, cmds, opcode as op};

use super::{H, World, msg, set, set64};
use crate::connectx::syndrome as syn;

/// Offset of the SRQ context in CREATE_SRQ.
const C: usize = 0x10;
/// Offset of the RMP context in CREATE_RMP / MODIFY_RMP / QUERY_RMP output.
const R: usize = 0x20;
/// Offset of the RMP's work queue.
const W: usize = R + 0x30;

fn s(f: Field) -> Field {
    f.at(C)
}

fn q(f: Field) -> Field {
    f.at(W)
}

/// CREATE_SRQ input: 2^4 WQEs of 64 bytes (next segment + 3 data segments) on `pd`.
fn create_srq_msg(pd: u32, dbr: u64, pas: &[u64]) -> Vec<u8> {
    let mut m = msg(op::CREATE_SRQ, 0, 0x110 + 8 * pas.len());
    set(&mut m, s(srqc::LOG_SRQ_SIZE), 4);
    set(&mut m, s(srqc::LOG_RQ_STRIDE), 2);
    set(&mut m, s(srqc::PD), pd);
    set64(&mut m, s(srqc::DBR_ADDR), dbr);
    for (i, p) in pas.iter().enumerate() {
        m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
    }
    m
}

/// CREATE_RMP input as Linux builds it for an SRQ: state RDY, a linked-list WQ of 2^4 WQEs
/// of 64 bytes (`log_wq_stride` 6) on `pd`, limit `lwm`.
fn create_rmp_msg(pd: u32, dbr: u64, pas: &[u64], lwm: u32) -> Vec<u8> {
    let mut m = msg(op::CREATE_RMP, 0, 0x110 + 8 * pas.len());
    set(&mut m, rmpc::STATE.at(R), rmpc::STATE_RDY);
    set(&mut m, q(wq::WQ_TYPE), wq::TYPE_LINKED_LIST);
    set(&mut m, q(wq::LOG_WQ_SZ), 4);
    set(&mut m, q(wq::LOG_WQ_STRIDE), 6);
    set(&mut m, q(wq::PD), pd);
    set(&mut m, q(wq::LWM), lwm);
    set64(&mut m, q(wq::DBR_ADDR), dbr);
    for (i, p) in pas.iter().enumerate() {
        m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
    }
    m
}

fn destroy_srq_msg(srqn: u32) -> Vec<u8> {
    let mut m = msg(op::DESTROY_SRQ, 0, 16);
    set(&mut m, cmds::destroy_srq_in::SRQN, srqn);
    m
}

fn destroy_rmp_msg(rmpn: u32) -> Vec<u8> {
    let mut m = msg(op::DESTROY_RMP, 0, 16);
    set(&mut m, cmds::destroy_rmp_in::RMPN, rmpn);
    m
}

/// MODIFY_RMP input arming the limit at `lwm` (Linux `arm_rmp_cmd`).
fn arm_rmp_msg(rmpn: u32, lwm: u32) -> Vec<u8> {
    let mut m = msg(op::MODIFY_RMP, 0, 0x110);
    set(&mut m, cmds::modify_rmp_in::RMP_STATE, rmpc::STATE_RDY);
    set(&mut m, cmds::modify_rmp_in::RMPN, rmpn);
    set(&mut m, cmds::modify_rmp_in::BITMASK_LWM, 1);
    set(&mut m, rmpc::STATE.at(R), rmpc::STATE_RDY);
    set(&mut m, q(wq::LWM), lwm);
    m
}

fn query_rmp(h: &mut H, rmpn: u32) -> super::Resp {
    let mut m = msg(op::QUERY_RMP, 0, 16);
    set(&mut m, cmds::query_rmp_in::RMPN, rmpn);
    h.cmd(&m, 0x110 + 8)
}

#[test]
fn create_rmp_checks_its_context() {
    let mut w = World::new();
    let pas = w.h.queue_buf(1024, 0);
    let dbr = w.h.dbr();
    let base = create_rmp_msg(w.pd, dbr, &pas, 0);
    let cases: Vec<(super::Mutation, u8, u32)> = vec![
        (
            Box::new(|m| set(m, rmpc::STATE.at(R), rmpc::STATE_ERR)),
            st::BAD_PARAM,
            syn::BAD_INITIAL_STATE,
        ),
        (
            Box::new(|m| set(m, q(wq::PD), 99)),
            st::BAD_PARAM,
            syn::BAD_PD,
        ),
        // a cyclic WQ is no SRQ ring
        (
            Box::new(|m| set(m, q(wq::WQ_TYPE), wq::TYPE_CYCLIC)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        (
            Box::new(|m| set(m, rmpc::BASIC_CYCLIC_RCV_WQE.at(R), 1)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        (
            Box::new(|m| set(m, q(wq::WQ_SIGNATURE), 1)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        // 16-byte WQEs hold only the next segment; 2 KiB is above max_wqe_sz_rq
        (
            Box::new(|m| set(m, q(wq::LOG_WQ_STRIDE), 4)),
            st::BAD_PARAM,
            syn::BAD_WQE_SIZE,
        ),
        (
            Box::new(|m| set(m, q(wq::LOG_WQ_STRIDE), 2)),
            st::BAD_PARAM,
            syn::BAD_WQE_SIZE,
        ),
        (
            Box::new(|m| set(m, q(wq::LOG_WQ_STRIDE), 11)),
            st::BAD_PARAM,
            syn::BAD_WQE_SIZE,
        ),
        (
            Box::new(move |m| set64(m, q(wq::DBR_ADDR), dbr + 2)),
            st::BAD_PARAM,
            syn::BAD_DBR,
        ),
        (
            Box::new(|m| set(m, q(wq::PAGE_OFFSET), 1)),
            st::BAD_PARAM,
            syn::BAD_PAGE_OFFSET,
        ),
        (
            Box::new(|m| set(m, q(wq::LWM), 16)),
            st::BAD_PARAM,
            syn::BAD_LWM,
        ),
        // 2^8 WQEs of 64 B need 4 pages; one is listed
        (
            Box::new(|m| set(m, q(wq::LOG_WQ_SZ), 8)),
            st::BAD_INPUT_LEN,
            syn::BAD_INLEN,
        ),
    ];
    for (f, status, synd) in cases {
        let mut m = base.clone();
        f(&mut m);
        w.h.cmd(&m, 16).expect(status, synd);
    }
    assert_eq!(w.h.dev.live().srqs, 0);
    let o = w.h.ok(&base, 16);
    let rmpn = cmds::create_rmp_out::RMPN.get(&o);
    assert!(rmpn >= 1);
    assert_eq!(w.h.dev.live().srqs, 1);

    // a QP on it (`srqn_rmpn_xrqn` names the RMP); in use until the QP goes, the PD too
    let qpas = w.h.queue_buf(2048, 0);
    let qdbr = w.h.dbr();
    let mut m = H::create_qp_msg(qpc::ST_RC, w.pd, w.cqn, w.uar, qdbr, &qpas);
    let c = cmds::create_qp_in::QPC.byte_off();
    set(&mut m, qpc::RQ_TYPE.at(c), qpc::RQ_TYPE_SRQ);
    set(&mut m, qpc::SRQN_RMPN_XRQN.at(c), rmpn + 1);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_SRQ);
    set(&mut m, qpc::SRQN_RMPN_XRQN.at(c), rmpn);
    set(&mut m, qpc::CQN_RCV.at(c), 99);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_CQ);
    set(&mut m, qpc::CQN_RCV.at(c), w.cqn);
    let qpn = cmds::create_qp_out::QPN.get(&w.h.ok(&m, 16));
    w.h.cmd(&destroy_rmp_msg(rmpn), 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut d = msg(op::DEALLOC_PD, 0, 16);
    set(&mut d, cmds::dealloc_pd_in::PD, w.pd);
    w.h.cmd(&d, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut dq = msg(op::DESTROY_QP, 0, 16);
    set(&mut dq, cmds::destroy_qp_in::QPN, qpn);
    w.h.ok(&dq, 16);
    // the RMP alone keeps its PD
    w.h.cmd(&d, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    w.h.ok(&destroy_rmp_msg(rmpn), 16);
    assert_eq!(w.h.dev.live().srqs, 0);
    // gone, and never there
    w.h.cmd(&destroy_rmp_msg(rmpn), 16)
        .expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    w.h.cmd(&destroy_rmp_msg(0xff_ffff), 16)
        .expect(st::BAD_INDEX, syn::BAD_INDEX);
}

#[test]
fn modify_rmp_arms_the_limit_and_query_rmp_reads_it_back() {
    let mut w = World::new();
    let pas = w.h.queue_buf(1024, 0);
    let dbr = w.h.dbr();
    let rmpn = cmds::create_rmp_out::RMPN.get(&w.h.ok(&create_rmp_msg(w.pd, dbr, &pas, 0), 16));

    let r = query_rmp(&mut w.h, rmpn);
    r.expect(0, 0);
    let o = &r.out;
    assert_eq!(rmpc::STATE.at(R).get(o), rmpc::STATE_RDY);
    assert_eq!(q(wq::WQ_TYPE).get(o), wq::TYPE_LINKED_LIST);
    assert_eq!(q(wq::PD).get(o), w.pd);
    assert_eq!(q(wq::DBR_ADDR).get64(o), dbr);
    assert_eq!(q(wq::LOG_WQ_SZ).get(o), 4);
    assert_eq!(q(wq::LOG_WQ_STRIDE).get(o), 6);
    assert_eq!(q(wq::LWM).get(o), 0);
    assert_eq!(&o[0x110..0x118], &pas[0].to_be_bytes());

    w.h.ok(&arm_rmp_msg(rmpn, 5), 16);
    assert_eq!(q(wq::LWM).get(&query_rmp(&mut w.h, rmpn).out), 5);

    // Only `lwm` is selectable; the RMP stays ready; the limit is below the size.
    let mut m = arm_rmp_msg(rmpn, 5);
    set(&mut m, cmds::modify_rmp_in::BITMASK_LWM, 0);
    m[0x13] = 0x2;
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_FIELD_SELECT);
    let mut m = arm_rmp_msg(rmpn, 5);
    set(&mut m, rmpc::STATE.at(R), rmpc::STATE_ERR);
    w.h.cmd(&m, 16)
        .expect(st::BAD_PARAM, syn::BAD_STATE_TRANSITION);
    w.h.cmd(&arm_rmp_msg(rmpn, 16), 16)
        .expect(st::BAD_PARAM, syn::BAD_LWM);
    w.h.cmd(&arm_rmp_msg(rmpn + 1, 1), 16)
        .expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    // Without the bitmask nothing changes.
    let mut m = arm_rmp_msg(rmpn, 9);
    set(&mut m, cmds::modify_rmp_in::BITMASK_LWM, 0);
    w.h.ok(&m, 16);
    assert_eq!(q(wq::LWM).get(&query_rmp(&mut w.h, rmpn).out), 5);

    w.h.ok(&destroy_rmp_msg(rmpn), 16);
    query_rmp(&mut w.h, rmpn).expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
}

#[test]
fn at_issi_1_srqs_are_rmps_only() {
    let mut w = World::new();
    let pas = w.h.queue_buf(1024, 0);
    let dbr = w.h.dbr();
    w.h.cmd(&create_srq_msg(w.pd, dbr, &pas), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
    let rmpn = cmds::create_rmp_out::RMPN.get(&w.h.ok(&create_rmp_msg(w.pd, dbr, &pas, 0), 16));
    w.h.cmd(&destroy_srq_msg(rmpn), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
    assert_eq!(w.h.dev.live().srqs, 1);
    w.h.ok(&destroy_rmp_msg(rmpn), 16);
}

#[test]
fn at_issi_0_srqs_are_srqs_only() {
    let mut w = World::with_issi(0);
    let pas = w.h.queue_buf(1024, 0);
    let dbr = w.h.dbr();
    w.h.cmd(&create_rmp_msg(w.pd, dbr, &pas, 0), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
    let base = create_srq_msg(w.pd, dbr, &pas);
    let cases: Vec<(super::Mutation, u8, u32)> = vec![
        (
            Box::new(|m| set(m, s(srqc::STATE), srqc::STATE_ERROR)),
            st::BAD_PARAM,
            syn::BAD_INITIAL_STATE,
        ),
        (
            Box::new(|m| set(m, s(srqc::PD), 99)),
            st::BAD_PARAM,
            syn::BAD_PD,
        ),
        (
            Box::new(|m| set(m, s(srqc::LOG_RQ_STRIDE), 0)),
            st::BAD_PARAM,
            syn::BAD_WQE_SIZE,
        ),
        (
            Box::new(|m| set(m, s(srqc::XRCD), 3)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        (
            Box::new(|m| set(m, s(srqc::CQN), 1)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        (
            Box::new(move |m| set64(m, s(srqc::DBR_ADDR), dbr + 2)),
            st::BAD_PARAM,
            syn::BAD_DBR,
        ),
    ];
    for (f, status, synd) in cases {
        let mut m = base.clone();
        f(&mut m);
        w.h.cmd(&m, 16).expect(status, synd);
    }
    let srqn = cmds::create_srq_out::SRQN.get(&w.h.ok(&base, 16));
    assert_eq!(w.h.dev.live().srqs, 1);
    w.h.cmd(&destroy_rmp_msg(srqn), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
    w.h.ok(&destroy_srq_msg(srqn), 16);
    assert_eq!(w.h.dev.live().srqs, 0);
}
