//! CREATE_SRQ / DESTROY_SRQ and QPs on SRQs: the firmware checks, the object counts.

use firmware_interface::ctx::{qpc, srqc};
use firmware_interface::{Field, cmd_status as st, cmds, opcode as op};

use super::{H, World, msg, set, set64};
use crate::connectx::syndrome as syn;

/// Offset of the SRQ context in CREATE_SRQ.
const C: usize = 0x10;

fn s(f: Field) -> Field {
    f.at(C)
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

fn destroy_srq_msg(srqn: u32) -> Vec<u8> {
    let mut m = msg(op::DESTROY_SRQ, 0, 16);
    set(&mut m, cmds::destroy_srq_in::SRQN, srqn);
    m
}

#[test]
fn create_srq_checks_its_context() {
    let mut w = World::new();
    let pas = w.h.queue_buf(1024, 0);
    let dbr = w.h.dbr();
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
        // 16-byte WQEs hold only the next segment
        (
            Box::new(|m| set(m, s(srqc::LOG_RQ_STRIDE), 0)),
            st::BAD_PARAM,
            syn::BAD_WQE_SIZE,
        ),
        (
            Box::new(|m| set(m, s(srqc::LOG_RQ_STRIDE), 7)),
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
            Box::new(|m| set(m, s(srqc::WQ_SIGNATURE), 1)),
            st::BAD_PARAM,
            syn::UNSUPPORTED,
        ),
        (
            Box::new(move |m| set64(m, s(srqc::DBR_ADDR), dbr + 2)),
            st::BAD_PARAM,
            syn::BAD_DBR,
        ),
        (
            Box::new(|m| set(m, s(srqc::PAGE_OFFSET), 1)),
            st::BAD_PARAM,
            syn::BAD_PAGE_OFFSET,
        ),
        // 2^8 WQEs of 64 B need 4 pages; one is listed
        (
            Box::new(|m| set(m, s(srqc::LOG_SRQ_SIZE), 8)),
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
    let srqn = cmds::create_srq_out::SRQN.get(&o);
    assert!(srqn >= 1);
    assert_eq!(w.h.dev.live().srqs, 1);

    // a QP on it; the SRQ is in use until the QP goes, the PD too
    let qpas = w.h.queue_buf(2048, 0);
    let qdbr = w.h.dbr();
    let mut m = H::create_qp_msg(qpc::ST_RC, w.pd, w.cqn, w.uar, qdbr, &qpas);
    let c = cmds::create_qp_in::QPC.byte_off();
    set(&mut m, qpc::RQ_TYPE.at(c), qpc::RQ_TYPE_SRQ);
    set(&mut m, qpc::SRQN_RMPN_XRQN.at(c), srqn + 1);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_SRQ);
    set(&mut m, qpc::SRQN_RMPN_XRQN.at(c), srqn);
    set(&mut m, qpc::CQN_RCV.at(c), 99);
    w.h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_CQ);
    set(&mut m, qpc::CQN_RCV.at(c), w.cqn);
    let qpn = cmds::create_qp_out::QPN.get(&w.h.ok(&m, 16));
    w.h.cmd(&destroy_srq_msg(srqn), 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut d = msg(op::DEALLOC_PD, 0, 16);
    set(&mut d, cmds::dealloc_pd_in::PD, w.pd);
    w.h.cmd(&d, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut dq = msg(op::DESTROY_QP, 0, 16);
    set(&mut dq, cmds::destroy_qp_in::QPN, qpn);
    w.h.ok(&dq, 16);
    // the SRQ alone keeps its PD
    w.h.cmd(&d, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    w.h.ok(&destroy_srq_msg(srqn), 16);
    assert_eq!(w.h.dev.live().srqs, 0);
    // gone, and never there
    w.h.cmd(&destroy_srq_msg(srqn), 16)
        .expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    w.h.cmd(&destroy_srq_msg(0xff_ffff), 16)
        .expect(st::BAD_INDEX, syn::BAD_INDEX);
}
