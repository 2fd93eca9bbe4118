//! Receive memory pools (the SRQ of ISSI 1): `wq`, `rmpc`, CREATE_RMP / MODIFY_RMP /
//! QUERY_RMP / DESTROY_RMP. The spec has no tables for these; the expected positions are
//! Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_wq_bits`, `mlx5_ifc_rmpc_bits`,
//! `mlx5_ifc_{create,modify,query,destroy}_rmp_{in,out}_bits`, `mlx5_ifc_rmp_bitmask_bits`),
//! converted from bit offsets by hand (each row notes the bit offset it came from).

use super::{Exp::*, check};
use firmware_interface::{cmds, ctx, mbox_in, mbox_out, opcode};

const IN_HEADER: [super::Row; 3] = [
    ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
    ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
    ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
];

const OUT_HEADER: [super::Row; 2] = [
    ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
    ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
];

#[test]
fn wq() {
    use ctx::wq as m;
    check(
        "wq",
        m::FIELDS,
        m::SIZE,
        0xc0,
        &[
            // wq_type[0x4] @0x0, wq_signature @0x4, end_padding_mode[0x2] @0x5, cd_slave @0x7
            ("wq_type", m::WQ_TYPE, 0x0, Dw(0x0, 31, 28), 4),
            ("wq_signature", m::WQ_SIGNATURE, 0x0, Dw(0x0, 27, 27), 1),
            (
                "end_padding_mode",
                m::END_PADDING_MODE,
                0x0,
                Dw(0x0, 26, 25),
                2,
            ),
            ("cd_slave", m::CD_SLAVE, 0x0, Dw(0x0, 24, 24), 1),
            // page_offset[0x5] @0x2b, lwm[0x10] @0x30
            ("page_offset", m::PAGE_OFFSET, 0x5, Dw(0x4, 20, 16), 5),
            ("lwm", m::LWM, 0x6, Dw(0x4, 15, 0), 16),
            // pd[0x18] @0x48, uar_page[0x18] @0x68
            ("pd", m::PD, 0x9, Dw(0x8, 23, 0), 24),
            ("uar_page", m::UAR_PAGE, 0xd, Dw(0xc, 23, 0), 24),
            // dbr_addr[0x40] @0x80, hw_counter[0x20] @0xc0, sw_counter[0x20] @0xe0
            ("dbr_addr", m::DBR_ADDR, 0x10, Bytes(0x10, 0x17), 64),
            ("hw_counter", m::HW_COUNTER, 0x18, Bytes(0x18, 0x1b), 32),
            ("sw_counter", m::SW_COUNTER, 0x1c, Bytes(0x1c, 0x1f), 32),
            // log_wq_stride[0x4] @0x10c, log_wq_pg_sz[0x5] @0x113, log_wq_sz[0x5] @0x11b
            ("log_wq_stride", m::LOG_WQ_STRIDE, 0x21, Dw(0x20, 19, 16), 4),
            ("log_wq_pg_sz", m::LOG_WQ_PG_SZ, 0x22, Dw(0x20, 12, 8), 5),
            ("log_wq_sz", m::LOG_WQ_SZ, 0x23, Dw(0x20, 4, 0), 5),
            // ... reserved up to 0x600 bits, then pas[]
            ("pas", m::PAS, 0xc0, Flex, 0),
        ],
    );
    // MLX5_WQ_TYPE_LINKED_LIST / _CYCLIC
    assert_eq!((m::TYPE_LINKED_LIST, m::TYPE_CYCLIC), (0, 1));
}

#[test]
fn rmpc() {
    use ctx::rmpc as m;
    check(
        "rmpc",
        m::FIELDS,
        m::SIZE,
        0xf0,
        &[
            // state[0x4] @0x8, basic_cyclic_rcv_wqe @0x20, reserved to 0x180, wq @0x180
            ("state", m::STATE, 0x1, Dw(0x0, 23, 20), 4),
            (
                "basic_cyclic_rcv_wqe",
                m::BASIC_CYCLIC_RCV_WQE,
                0x4,
                Dw(0x4, 31, 31),
                1,
            ),
            ("wq", m::WQ, 0x30, Struct(0xc0), 0x600),
        ],
    );
    assert_eq!(
        m::WQ.width as usize,
        ctx::wq::SIZE * 8,
        "rmpc.wq holds one wq"
    );
    // MLX5_RMPC_STATE_RDY / _ERR
    assert_eq!((m::STATE_RDY, m::STATE_ERR), (1, 3));
}

#[test]
fn create_rmp() {
    use cmds::create_rmp_in as m;
    let mut rows = IN_HEADER.to_vec();
    // reserved_at_40[0xc0], ctx @0x100 (0x780 bits); the wq's pas[] ends the message
    rows.push(("ctx", m::CTX, 0x20, Struct(0xf0), 0x780));
    rows.push(("pas", m::PAS, 0x110, Flex, 0));
    check("create_rmp_in", m::FIELDS, m::SIZE, 0x110, &rows);
    assert_eq!(
        m::CTX.byte_off() + ctx::rmpc::WQ.byte_off() + ctx::wq::PAS.byte_off(),
        m::PAS.byte_off(),
        "the PAS list is the context's wq.pas"
    );
    let mut rows = OUT_HEADER.to_vec();
    // rmpn[0x18] @0x48
    rows.push(("rmpn", cmds::create_rmp_out::RMPN, 0x9, Dw(0x8, 23, 0), 24));
    check(
        "create_rmp_out",
        cmds::create_rmp_out::FIELDS,
        cmds::create_rmp_out::SIZE,
        16,
        &rows,
    );
}

#[test]
fn modify_rmp() {
    use cmds::modify_rmp_in as m;
    let mut rows = IN_HEADER.to_vec();
    // rmp_state[0x4] @0x40, rmpn[0x18] @0x48; bitmask @0x80 (rmp_bitmask: lwm at bit 0x3f,
    // i.e. 0xbf); reserved_at_c0[0x40]; ctx @0x100
    rows.push(("rmp_state", m::RMP_STATE, 0x8, Dw(0x8, 31, 28), 4));
    rows.push(("rmpn", m::RMPN, 0x9, Dw(0x8, 23, 0), 24));
    rows.push(("bitmask_lwm", m::BITMASK_LWM, 0x17, Dw(0x14, 0, 0), 1));
    rows.push(("ctx", m::CTX, 0x20, Struct(0xf0), 0x780));
    check("modify_rmp_in", m::FIELDS, m::SIZE, 0x110, &rows);
    check(
        "modify_rmp_out",
        cmds::modify_rmp_out::FIELDS,
        cmds::modify_rmp_out::SIZE,
        16,
        &OUT_HEADER,
    );
}

#[test]
fn query_rmp() {
    use cmds::query_rmp_out as m;
    let mut rows = IN_HEADER.to_vec();
    // rmpn[0x18] @0x48
    rows.push(("rmpn", cmds::query_rmp_in::RMPN, 0x9, Dw(0x8, 23, 0), 24));
    check(
        "query_rmp_in",
        cmds::query_rmp_in::FIELDS,
        cmds::query_rmp_in::SIZE,
        16,
        &rows,
    );
    let mut rows = OUT_HEADER.to_vec();
    // reserved_at_40[0xc0], rmp_context @0x100
    rows.push(("rmp_context", m::RMP_CONTEXT, 0x20, Struct(0xf0), 0x780));
    rows.push(("pas", m::PAS, 0x110, Flex, 0));
    check("query_rmp_out", m::FIELDS, m::SIZE, 0x110, &rows);
}

#[test]
fn destroy_rmp() {
    let mut rows = IN_HEADER.to_vec();
    // rmpn[0x18] @0x48
    rows.push(("rmpn", cmds::destroy_rmp_in::RMPN, 0x9, Dw(0x8, 23, 0), 24));
    check(
        "destroy_rmp_in",
        cmds::destroy_rmp_in::FIELDS,
        cmds::destroy_rmp_in::SIZE,
        16,
        &rows,
    );
    check(
        "destroy_rmp_out",
        cmds::destroy_rmp_out::FIELDS,
        cmds::destroy_rmp_out::SIZE,
        16,
        &OUT_HEADER,
    );
    assert_eq!(
        (
            opcode::CREATE_RMP,
            opcode::MODIFY_RMP,
            opcode::DESTROY_RMP,
            opcode::QUERY_RMP
        ),
        (0x90c, 0x90d, 0x90e, 0x90f)
    );
}
