//! Shared receive queues: `srqc`, CREATE_SRQ / DESTROY_SRQ and the SRQ WQE's next segment.
//! The expected positions are Linux
//! `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_srqc_bits`, `mlx5_ifc_create_srq_in_bits`,
//! `_out_bits`, `mlx5_ifc_destroy_srq_in_bits`) and `mlx5/qp.h` (`mlx5_wqe_srq_next_seg`),
//! converted from bit offsets by hand.

use core::mem::{offset_of, size_of};

use super::{Exp::*, check};
use firmware_interface::{cmds, ctx, mbox_in, mbox_out, opcode, wqe};

#[test]
fn srqc() {
    use ctx::srqc as m;
    check(
        "srqc",
        m::FIELDS,
        m::SIZE,
        64,
        &[
            // state[0x4] @0x0, log_srq_size[0x4] @0x4
            ("state", m::STATE, 0x0, Dw(0x0, 31, 28), 4),
            ("log_srq_size", m::LOG_SRQ_SIZE, 0x0, Dw(0x0, 27, 24), 4),
            // wq_signature @0x20, cont_srq @0x21, rlky @0x23, log_rq_stride[0x3] @0x25,
            // xrcd[0x18] @0x28
            ("wq_signature", m::WQ_SIGNATURE, 0x4, Dw(0x4, 31, 31), 1),
            ("cont_srq", m::CONT_SRQ, 0x4, Dw(0x4, 30, 30), 1),
            ("rlky", m::RLKY, 0x4, Dw(0x4, 28, 28), 1),
            ("log_rq_stride", m::LOG_RQ_STRIDE, 0x4, Dw(0x4, 26, 24), 3),
            ("xrcd", m::XRCD, 0x5, Dw(0x4, 23, 0), 24),
            // page_offset[0x6] @0x40, cqn[0x18] @0x48
            ("page_offset", m::PAGE_OFFSET, 0x8, Dw(0x8, 31, 26), 6),
            ("cqn", m::CQN, 0x9, Dw(0x8, 23, 0), 24),
            // log_page_size[0x6] @0x82
            ("log_page_size", m::LOG_PAGE_SIZE, 0x10, Dw(0x10, 29, 24), 6),
            // pd[0x18] @0xc8
            ("pd", m::PD, 0x19, Dw(0x18, 23, 0), 24),
            // lwm[0x10] @0xe0, wqe_cnt[0x10] @0xf0
            ("lwm", m::LWM, 0x1c, Dw(0x1c, 31, 16), 16),
            ("wqe_cnt", m::WQE_CNT, 0x1e, Dw(0x1c, 15, 0), 16),
            // dbr_addr[0x40] @0x140
            ("dbr_addr", m::DBR_ADDR, 0x28, Bytes(0x28, 0x2f), 64),
        ],
    );
    assert_eq!((m::STATE_GOOD, m::STATE_ERROR), (0, 1));
}

#[test]
fn create_srq_in() {
    use cmds::create_srq_in as m;
    check(
        "create_srq_in",
        m::FIELDS,
        m::SIZE,
        0x110,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            // srq_context_entry @0x80 (0x200 bits), reserved_at_280[0x600], pas @0x880
            (
                "srq_context_entry",
                m::SRQ_CONTEXT_ENTRY,
                0x10,
                Struct(64),
                512,
            ),
            ("pas", m::PAS, 0x110, Flex, 0),
        ],
    );
    assert_eq!(
        m::SRQ_CONTEXT_ENTRY.width as usize,
        ctx::srqc::SIZE * 8,
        "the context field holds one srqc"
    );
}

#[test]
fn create_srq_out() {
    use cmds::create_srq_out as m;
    check(
        "create_srq_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            // srqn[0x18] @0x48
            ("srqn", m::SRQN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn destroy_srq() {
    use cmds::destroy_srq_in as m;
    check(
        "destroy_srq_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("srqn", m::SRQN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
    check(
        "destroy_srq_out",
        cmds::destroy_srq_out::FIELDS,
        cmds::destroy_srq_out::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
        ],
    );
    assert_eq!((opcode::CREATE_SRQ, opcode::DESTROY_SRQ), (0x700, 0x701));
}

#[test]
fn srq_next_seg() {
    use wqe::SrqNextSeg;
    assert_eq!(size_of::<SrqNextSeg>(), 16);
    assert_eq!(offset_of!(SrqNextSeg, rsvd0), 0);
    assert_eq!(offset_of!(SrqNextSeg, next_wqe_index), 2);
    assert_eq!(offset_of!(SrqNextSeg, signature), 4);
    assert_eq!(offset_of!(SrqNextSeg, rsvd1), 5);
    let s = SrqNextSeg {
        next_wqe_index: firmware_interface::field::Be16::new(0x1234),
        signature: 0xab,
        ..SrqNextSeg::default()
    };
    let b = s.to_bytes();
    assert_eq!(&b[..6], &[0, 0, 0x12, 0x34, 0xab, 0]);
    assert_eq!(SrqNextSeg::from_bytes(&b), s);
}
