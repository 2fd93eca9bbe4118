//! Layouts the spec sheet leaves open or states only in part, checked against Linux
//! `include/linux/mlx5/mlx5_ifc.h` (bit offsets converted by hand) and `lib/tout.c`:
//! the HCA vport context and its query, the atomic capability page, the SQERR2RTS / SQD2RTS
//! inputs (which have no ECE word), and the timeout registers' multiplier.

use super::{Exp::*, check};
use firmware_interface::{Field, cmds, ctx, init_seg, mbox_in, op_mod, opcode};

#[test]
fn hca_vport_context() {
    // field_select @0x0, reserved_at_20[0xe0]; sm_virt_aware .. vport_state in the dword at
    // 0x100 (port_state[0x4] @0x118); system_image_guid @0x140, port_guid @0x180,
    // node_guid @0x1c0; lid[0x10] @0x300; sm_lid[0x10] @0x320; the last field,
    // reserved_at_360[0xca0], ends at 0x1000 bits = 512 bytes.
    use ctx::hca_vport_context as c;
    check(
        "hca_vport_context",
        c::FIELDS,
        c::SIZE,
        512,
        &[
            ("port_state", c::PORT_STATE, 0x23, Dw(0x20, 7, 4), 4),
            ("port_guid", c::PORT_GUID, 0x30, Bytes(0x30, 0x37), 64),
            ("node_guid", c::NODE_GUID, 0x38, Bytes(0x38, 0x3f), 64),
            ("lid", c::LID, 0x60, Dw(0x60, 31, 16), 16),
            ("sm_lid", c::SM_LID, 0x64, Dw(0x64, 31, 16), 16),
        ],
    );
    use cmds::{query_hca_vport_context_in as i, query_hca_vport_context_out as o};
    // other_vport[0x1] @0x40, port_num[0x4] @0x4c, vport_number[0x10] @0x50; 0x80 bits.
    check(
        "query_hca_vport_context_in",
        i::FIELDS,
        i::SIZE,
        16,
        &[
            ("other_vport", i::OTHER_VPORT, 0x8, Dw(0x8, 31, 31), 1),
            ("port_num", i::PORT_NUM, 0x9, Dw(0x8, 19, 16), 4),
            ("vport_number", i::VPORT_NUMBER, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
    // status, syndrome, reserved_at_40[0x40], hca_vport_context @0x80: 0x80 + 0x1000 bits.
    check(
        "query_hca_vport_context_out",
        o::FIELDS,
        o::SIZE,
        528,
        &[(
            "hca_vport_context",
            o::HCA_VPORT_CONTEXT,
            0x10,
            Struct(512),
            4096,
        )],
    );
    assert_eq!(o::HCA_VPORT_CONTEXT.end(), o::SIZE);
    assert_eq!(o::HCA_VPORT_CONTEXT.width as usize, c::SIZE * 8);
}

#[test]
fn atomic_caps() {
    // reserved_at_0[0x40]; atomic_req_8B_endianness_mode[0x2] @0x40,
    // reserved_at_42[0x4], supported_atomic_req_8B_endianness_mode_1[0x1] @0x46;
    // atomic_operations[0x10] @0x90; atomic_size_qp[0x10] @0xb0; atomic_size_dc[0x10] @0xd0.
    use ctx::atomic_caps as c;
    check(
        "atomic_caps",
        c::FIELDS,
        c::SIZE,
        256,
        &[
            (
                "atomic_req_8b_endianness_mode",
                c::ATOMIC_REQ_8B_ENDIANNESS_MODE,
                0x8,
                Dw(0x8, 31, 30),
                2,
            ),
            (
                "supported_atomic_req_8b_endianness_mode_1",
                c::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1,
                0x8,
                Dw(0x8, 25, 25),
                1,
            ),
            (
                "atomic_operations",
                c::ATOMIC_OPERATIONS,
                0x12,
                Dw(0x10, 15, 0),
                16,
            ),
            (
                "atomic_size_qp",
                c::ATOMIC_SIZE_QP,
                0x16,
                Dw(0x14, 15, 0),
                16,
            ),
            (
                "atomic_size_dc",
                c::ATOMIC_SIZE_DC,
                0x1a,
                Dw(0x18, 15, 0),
                16,
            ),
        ],
    );
    // main.c: MLX5_ATOMIC_REQ_MODE_BE = 0, MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS = 1;
    // device.h: MLX5_ATOMIC_OPS_*; MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES = 0x8.
    assert_eq!((c::REQ_MODE_BE, c::REQ_MODE_HOST_ENDIANNESS), (0, 1));
    assert_eq!(
        (
            c::OPS_CMP_SWAP,
            c::OPS_FETCH_ADD,
            c::OPS_EXTENDED_CMP_SWAP,
            c::OPS_EXTENDED_FETCH_ADD
        ),
        (1, 2, 4, 8)
    );
    assert_eq!(c::SIZE_QP_8BYTES, 0x8);
    // SET_HCA_CAP of this page: op_mod = MLX5_SET_HCA_CAP_OP_MOD_ATOMIC (3) << 1.
    assert_eq!(op_mod::set_cap(op_mod::CAP_ATOMIC), 6);
}

/// The rows of a modify-QP input without an ECE word.
fn modify_rows(qpn: Field, mask: Field, qpc: Field) -> Vec<super::Row> {
    vec![
        ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
        ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
        ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
        ("qpn", qpn, 0x9, Dw(0x8, 23, 0), 24),
        ("opt_param_mask", mask, 0x10, Bytes(0x10, 0x13), 32),
        ("qpc", qpc, 0x18, Struct(232), 1856),
    ]
}

#[test]
fn sqerr2rts_and_sqd2rts_have_no_ece() {
    // qpn[0x18] @0x48, reserved_at_60[0x20], opt_param_mask @0x80, reserved_at_a0[0x20]
    // (where the other transitions have `ece`), qpc @0xc0, reserved_at_800[0x80]: 0x880 bits.
    use cmds::{sqd2rts_qp_in as d, sqerr2rts_qp_in as e};
    check(
        "sqerr2rts_qp_in",
        e::FIELDS,
        e::SIZE,
        272,
        &modify_rows(e::QPN, e::OPT_PARAM_MASK, e::QPC),
    );
    check(
        "sqd2rts_qp_in",
        d::FIELDS,
        d::SIZE,
        272,
        &modify_rows(d::QPN, d::OPT_PARAM_MASK, d::QPC),
    );
    // No field of either covers the reserved word at 0x14 that RST2INIT calls `ece`.
    for (name, fields) in [("sqerr2rts", e::FIELDS), ("sqd2rts", d::FIELDS)] {
        for (f, field) in fields {
            assert!(
                field.end() <= 0x14 || field.byte_off() >= 0x18,
                "{name}.{f} overlaps the reserved word at 0x14"
            );
        }
    }
    assert_eq!(cmds::rst2init_qp_in::ECE, Field::bytes(0x14, 4));
    assert_eq!(cmds::init2init_qp_in::ECE, Field::bytes(0x14, 4));
    assert_eq!((opcode::SQERR2RTS_QP, opcode::SQD_RTS_QP), (0x506, 0x50c));
}

#[test]
fn timeout_register_multiplier_is_two_bits() {
    // lib/tout.c: tout_convert_iseg_to_ms(to) = tout_convert_reg_field_to_ms(to >> 29,
    // to & 0xfffff), which masks `to_mul &= 0x3` (ms, s, min, h).
    assert_eq!(init_seg::TO_MULT_SHIFT, 29);
    assert_eq!(init_seg::TO_MULT_MASK, 0x3);
    assert_eq!(init_seg::TO_VAL_MASK, 0xf_ffff);
    // Bit 31 set on top of "2 minutes" still reads as minutes.
    let reg: u32 = (1 << 31) | (2 << 29) | 5;
    assert_eq!((reg >> init_seg::TO_MULT_SHIFT) & init_seg::TO_MULT_MASK, 2);
    assert_eq!(reg & init_seg::TO_VAL_MASK, 5);
}
