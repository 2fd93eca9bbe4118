// Reference positions of the PRM layout tables (`mlx5_ifc.h`, see main.rs), one test per layout.
// Generated once from a transcription of those layouts, independently of the crate's constants;
// kept by hand since. Positions use the notation of `docs/mlx5.md#conventions`.

use super::{Exp::*, check};
#[allow(unused_imports)]
use firmware_interface::{cmds, ctx, mbox_in, mbox_out};

#[test]
fn query_hca_cap_in() {
    use cmds::query_hca_cap_in as m;
    check(
        "query_hca_cap_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_function", m::OTHER_FUNCTION, 0x8, Dw(0x8, 31, 31), 1),
            ("ec_vf_function", m::EC_VF_FUNCTION, 0x8, Dw(0x8, 30, 30), 1),
            (
                "function_id_type",
                m::FUNCTION_ID_TYPE,
                0x8,
                Dw(0x8, 28, 28),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn query_hca_cap_out() {
    use cmds::query_hca_cap_out as m;
    check(
        "query_hca_cap_out",
        m::FIELDS,
        m::SIZE,
        4112,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("capability", m::CAPABILITY, 0x10, Struct(4096), 32768),
        ],
    );
}

#[test]
fn set_hca_cap_in() {
    use cmds::set_hca_cap_in as m;
    check(
        "set_hca_cap_in",
        m::FIELDS,
        m::SIZE,
        4112,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_function", m::OTHER_FUNCTION, 0x8, Dw(0x8, 31, 31), 1),
            ("ec_vf_function", m::EC_VF_FUNCTION, 0x8, Dw(0x8, 30, 30), 1),
            (
                "function_id_type",
                m::FUNCTION_ID_TYPE,
                0x8,
                Dw(0x8, 28, 28),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
            ("capability", m::CAPABILITY, 0x10, Struct(4096), 32768),
        ],
    );
}

#[test]
fn query_adapter_in() {
    use cmds::query_adapter_in as m;
    check(
        "query_adapter_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
        ],
    );
}

#[test]
fn query_adapter_out() {
    use cmds::query_adapter_out as m;
    check(
        "query_adapter_out",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "query_adapter_struct",
                m::QUERY_ADAPTER_STRUCT,
                0x10,
                Struct(256),
                2048,
            ),
        ],
    );
}

#[test]
fn init_hca_in() {
    use cmds::init_hca_in as m;
    check(
        "init_hca_in",
        m::FIELDS,
        m::SIZE,
        32,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("sw_vhca_id", m::SW_VHCA_ID, 0xc, Dw(0xc, 29, 16), 14),
            ("sw_owner_id", m::SW_OWNER_ID, 0x10, Bytes(0x10, 0x1f), 128),
        ],
    );
}

#[test]
fn teardown_hca_in() {
    use cmds::teardown_hca_in as m;
    check(
        "teardown_hca_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("profile", m::PROFILE, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn teardown_hca_out() {
    use cmds::teardown_hca_out as m;
    check(
        "teardown_hca_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("state", m::STATE, 0xf, Dw(0xc, 0, 0), 1),
        ],
    );
}

#[test]
fn enable_hca_in() {
    use cmds::enable_hca_in as m;
    check(
        "enable_hca_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "embedded_cpu_function",
                m::EMBEDDED_CPU_FUNCTION,
                0x8,
                Dw(0x8, 31, 31),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn disable_hca_in() {
    use cmds::disable_hca_in as m;
    check(
        "disable_hca_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "embedded_cpu_function",
                m::EMBEDDED_CPU_FUNCTION,
                0x8,
                Dw(0x8, 31, 31),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn query_pages_in() {
    use cmds::query_pages_in as m;
    check(
        "query_pages_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "embedded_cpu_function",
                m::EMBEDDED_CPU_FUNCTION,
                0x8,
                Dw(0x8, 31, 31),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn query_pages_out() {
    use cmds::query_pages_out as m;
    check(
        "query_pages_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "embedded_cpu_function",
                m::EMBEDDED_CPU_FUNCTION,
                0x8,
                Dw(0x8, 31, 31),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
            ("num_pages", m::NUM_PAGES, 0xc, Bytes(0xc, 0xf), 32),
        ],
    );
}

#[test]
fn manage_pages_in() {
    use cmds::manage_pages_in as m;
    check(
        "manage_pages_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "embedded_cpu_function",
                m::EMBEDDED_CPU_FUNCTION,
                0x8,
                Dw(0x8, 31, 31),
                1,
            ),
            ("function_id", m::FUNCTION_ID, 0xa, Dw(0x8, 15, 0), 16),
            (
                "input_num_entries",
                m::INPUT_NUM_ENTRIES,
                0xc,
                Bytes(0xc, 0xf),
                32,
            ),
            ("pas", m::PAS, 0x10, Flex, 0),
        ],
    );
}

#[test]
fn manage_pages_out() {
    use cmds::manage_pages_out as m;
    check(
        "manage_pages_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "output_num_entries",
                m::OUTPUT_NUM_ENTRIES,
                0x8,
                Bytes(0x8, 0xb),
                32,
            ),
            ("pas", m::PAS, 0x10, Flex, 0),
        ],
    );
}

#[test]
fn query_issi_out() {
    use cmds::query_issi_out as m;
    check(
        "query_issi_out",
        m::FIELDS,
        m::SIZE,
        112,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("current_issi", m::CURRENT_ISSI, 0xa, Dw(0x8, 15, 0), 16),
            (
                "supported_issi_dw0",
                m::SUPPORTED_ISSI_DW0,
                0x6c,
                Bytes(0x6c, 0x6f),
                32,
            ),
        ],
    );
}

#[test]
fn set_issi_in() {
    use cmds::set_issi_in as m;
    check(
        "set_issi_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("current_issi", m::CURRENT_ISSI, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn create_mkey_in() {
    use cmds::create_mkey_in as m;
    check(
        "create_mkey_in",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("pg_access", m::PG_ACCESS, 0xc, Dw(0xc, 31, 31), 1),
            (
                "mkey_umem_valid",
                m::MKEY_UMEM_VALID,
                0xc,
                Dw(0xc, 30, 30),
                1,
            ),
            ("data_direct", m::DATA_DIRECT, 0xc, Dw(0xc, 29, 29), 1),
            (
                "memory_key_mkey_entry",
                m::MEMORY_KEY_MKEY_ENTRY,
                0x10,
                Struct(64),
                512,
            ),
            (
                "translations_octword_actual_size",
                m::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
                0x60,
                Bytes(0x60, 0x63),
                32,
            ),
            ("klm_pas_mtt", m::KLM_PAS_MTT, 0x110, Flex, 0),
        ],
    );
}

#[test]
fn create_mkey_out() {
    use cmds::create_mkey_out as m;
    check(
        "create_mkey_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("mkey_index", m::MKEY_INDEX, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn destroy_mkey_in() {
    use cmds::destroy_mkey_in as m;
    check(
        "destroy_mkey_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("mkey_index", m::MKEY_INDEX, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn create_eq_in() {
    use cmds::create_eq_in as m;
    check(
        "create_eq_in",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "eq_context_entry",
                m::EQ_CONTEXT_ENTRY,
                0x10,
                Struct(64),
                512,
            ),
            (
                "event_bitmask",
                m::EVENT_BITMASK,
                0x58,
                Bytes(0x58, 0x77),
                256,
            ),
            ("pas", m::PAS, 0x110, Flex, 0),
        ],
    );
}

#[test]
fn create_eq_out() {
    use cmds::create_eq_out as m;
    check(
        "create_eq_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("eq_number", m::EQ_NUMBER, 0xb, Dw(0x8, 7, 0), 8),
        ],
    );
}

#[test]
fn destroy_eq_in() {
    use cmds::destroy_eq_in as m;
    check(
        "destroy_eq_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("eq_number", m::EQ_NUMBER, 0xb, Dw(0x8, 7, 0), 8),
        ],
    );
}

#[test]
fn create_cq_in() {
    use cmds::create_cq_in as m;
    check(
        "create_cq_in",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("cq_context", m::CQ_CONTEXT, 0x10, Struct(64), 512),
            ("cq_umem_valid", m::CQ_UMEM_VALID, 0x5c, Dw(0x5c, 31, 31), 1),
            ("pas", m::PAS, 0x110, Flex, 0),
        ],
    );
}

#[test]
fn create_cq_out() {
    use cmds::create_cq_out as m;
    check(
        "create_cq_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("cqn", m::CQN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn destroy_cq_in() {
    use cmds::destroy_cq_in as m;
    check(
        "destroy_cq_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("cqn", m::CQN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn create_qp_in() {
    use cmds::create_qp_in as m;
    check(
        "create_qp_in",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpc_ext", m::QPC_EXT, 0x8, Dw(0x8, 31, 31), 1),
            ("input_qpn", m::INPUT_QPN, 0x9, Dw(0x8, 23, 0), 24),
            (
                "opt_param_mask",
                m::OPT_PARAM_MASK,
                0x10,
                Bytes(0x10, 0x13),
                32,
            ),
            ("ece", m::ECE, 0x14, Bytes(0x14, 0x17), 32),
            ("qpc", m::QPC, 0x18, Struct(232), 1856),
            (
                "wq_umem_offset",
                m::WQ_UMEM_OFFSET,
                0x100,
                Bytes(0x100, 0x107),
                64,
            ),
            ("wq_umem_id", m::WQ_UMEM_ID, 0x108, Bytes(0x108, 0x10b), 32),
            (
                "wq_umem_valid",
                m::WQ_UMEM_VALID,
                0x10c,
                Dw(0x10c, 31, 31),
                1,
            ),
            ("pas", m::PAS, 0x110, Flex, 0),
        ],
    );
}

#[test]
fn create_qp_out() {
    use cmds::create_qp_out as m;
    check(
        "create_qp_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
            ("ece", m::ECE, 0xc, Bytes(0xc, 0xf), 32),
        ],
    );
}

#[test]
fn destroy_qp_in() {
    use cmds::destroy_qp_in as m;
    check(
        "destroy_qp_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn rst2init_qp_in() {
    use cmds::rst2init_qp_in as m;
    check(
        "rst2init_qp_in",
        m::FIELDS,
        m::SIZE,
        272,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
            (
                "opt_param_mask",
                m::OPT_PARAM_MASK,
                0x10,
                Bytes(0x10, 0x13),
                32,
            ),
            ("ece", m::ECE, 0x14, Bytes(0x14, 0x17), 32),
            ("qpc", m::QPC, 0x18, Struct(232), 1856),
        ],
    );
}

#[test]
fn qp_2err_in() {
    use cmds::qp_2err_in as m;
    check(
        "qp_2err_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn qp_2rst_in() {
    use cmds::qp_2rst_in as m;
    check(
        "qp_2rst_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn query_qp_in() {
    use cmds::query_qp_in as m;
    check(
        "query_qp_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("qpc_ext", m::QPC_EXT, 0x8, Dw(0x8, 31, 31), 1),
            ("qpn", m::QPN, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn query_qp_out() {
    use cmds::query_qp_out as m;
    check(
        "query_qp_out",
        m::FIELDS,
        m::SIZE,
        464,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "opt_param_mask",
                m::OPT_PARAM_MASK,
                0x10,
                Bytes(0x10, 0x13),
                32,
            ),
            ("ece", m::ECE, 0x14, Bytes(0x14, 0x17), 32),
            ("qpc", m::QPC, 0x18, Struct(232), 1856),
            (
                "qp_pas_or_qpc_ext_and_pas",
                m::QP_PAS_OR_QPC_EXT_AND_PAS,
                0x110,
                Struct(192),
                1536,
            ),
        ],
    );
}

#[test]
fn alloc_pd_out() {
    use cmds::alloc_pd_out as m;
    check(
        "alloc_pd_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("pd", m::PD, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn dealloc_pd_in() {
    use cmds::dealloc_pd_in as m;
    check(
        "dealloc_pd_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("pd", m::PD, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn alloc_uar_out() {
    use cmds::alloc_uar_out as m;
    check(
        "alloc_uar_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("uar", m::UAR, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn dealloc_uar_in() {
    use cmds::dealloc_uar_in as m;
    check(
        "dealloc_uar_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("uar", m::UAR, 0x9, Dw(0x8, 23, 0), 24),
        ],
    );
}

#[test]
fn alloc_transport_domain_out() {
    use cmds::alloc_transport_domain_out as m;
    check(
        "alloc_transport_domain_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "transport_domain",
                m::TRANSPORT_DOMAIN,
                0x9,
                Dw(0x8, 23, 0),
                24,
            ),
        ],
    );
}

#[test]
fn dealloc_transport_domain_in() {
    use cmds::dealloc_transport_domain_in as m;
    check(
        "dealloc_transport_domain_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("uid", mbox_in::UID, 0x2, Dw(0x0, 15, 0), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "transport_domain",
                m::TRANSPORT_DOMAIN,
                0x9,
                Dw(0x8, 23, 0),
                24,
            ),
        ],
    );
}

#[test]
fn query_vport_state_in() {
    use cmds::query_vport_state_in as m;
    check(
        "query_vport_state_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_vport", m::OTHER_VPORT, 0x8, Dw(0x8, 31, 31), 1),
            ("vport_number", m::VPORT_NUMBER, 0xa, Dw(0x8, 15, 0), 16),
        ],
    );
}

#[test]
fn query_vport_state_out() {
    use cmds::query_vport_state_out as m;
    check(
        "query_vport_state_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("admin_state", m::ADMIN_STATE, 0xf, Dw(0xc, 7, 4), 4),
            ("state", m::STATE, 0xf, Dw(0xc, 3, 0), 4),
        ],
    );
}

#[test]
fn query_nic_vport_context_in() {
    use cmds::query_nic_vport_context_in as m;
    check(
        "query_nic_vport_context_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_vport", m::OTHER_VPORT, 0x8, Dw(0x8, 31, 31), 1),
            ("vport_number", m::VPORT_NUMBER, 0xa, Dw(0x8, 15, 0), 16),
            (
                "allowed_list_type",
                m::ALLOWED_LIST_TYPE,
                0xc,
                Dw(0xc, 26, 24),
                3,
            ),
        ],
    );
}

#[test]
fn query_hca_vport_gid_in() {
    use cmds::query_hca_vport_gid_in as m;
    check(
        "query_hca_vport_gid_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_vport", m::OTHER_VPORT, 0x8, Dw(0x8, 31, 31), 1),
            ("port_num", m::PORT_NUM, 0x9, Dw(0x8, 19, 16), 4),
            ("vport_number", m::VPORT_NUMBER, 0xa, Dw(0x8, 15, 0), 16),
            ("gid_index", m::GID_INDEX, 0xe, Dw(0xc, 15, 0), 16),
        ],
    );
}

#[test]
fn query_hca_vport_gid_out() {
    use cmds::query_hca_vport_gid_out as m;
    check(
        "query_hca_vport_gid_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            ("gids_num", m::GIDS_NUM, 0xc, Dw(0xc, 31, 16), 16),
        ],
    );
}

#[test]
fn set_roce_address_in() {
    use cmds::set_roce_address_in as m;
    check(
        "set_roce_address_in",
        m::FIELDS,
        m::SIZE,
        48,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            (
                "roce_address_index",
                m::ROCE_ADDRESS_INDEX,
                0x8,
                Dw(0x8, 31, 16),
                16,
            ),
            ("vhca_port_num", m::VHCA_PORT_NUM, 0xb, Dw(0x8, 3, 0), 4),
            ("roce_address", m::ROCE_ADDRESS, 0x10, Struct(32), 256),
        ],
    );
}

#[test]
fn roce_addr_layout() {
    use ctx::roce_addr_layout as m;
    check(
        "roce_addr_layout",
        m::FIELDS,
        m::SIZE,
        32,
        &[
            (
                "source_l3_address",
                m::SOURCE_L3_ADDRESS,
                0x0,
                Bytes(0x0, 0xf),
                128,
            ),
            ("vlan_valid", m::VLAN_VALID, 0x10, Dw(0x10, 28, 28), 1),
            ("vlan_id", m::VLAN_ID, 0x10, Dw(0x10, 27, 16), 12),
            (
                "source_mac_47_32",
                m::SOURCE_MAC_47_32,
                0x12,
                Dw(0x10, 15, 0),
                16,
            ),
            (
                "source_mac_31_0",
                m::SOURCE_MAC_31_0,
                0x14,
                Bytes(0x14, 0x17),
                32,
            ),
            ("roce_l3_type", m::ROCE_L3_TYPE, 0x1a, Dw(0x18, 11, 8), 4),
            ("roce_version", m::ROCE_VERSION, 0x1b, Dw(0x18, 7, 0), 8),
        ],
    );
}

#[test]
fn modify_nic_vport_context_in() {
    use cmds::modify_nic_vport_context_in as m;
    check(
        "modify_nic_vport_context_in",
        m::FIELDS,
        m::SIZE,
        512,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("other_vport", m::OTHER_VPORT, 0x8, Dw(0x8, 31, 31), 1),
            ("vport_number", m::VPORT_NUMBER, 0xa, Dw(0x8, 15, 0), 16),
            ("field_select", m::FIELD_SELECT, 0xc, Struct(4), 32),
            (
                "nic_vport_context",
                m::NIC_VPORT_CONTEXT,
                0x100,
                Struct(256),
                2048,
            ),
        ],
    );
}

#[test]
fn access_register_in() {
    use cmds::access_register_in as m;
    check(
        "access_register_in",
        m::FIELDS,
        m::SIZE,
        16,
        &[
            ("opcode", mbox_in::OPCODE, 0x0, Dw(0x0, 31, 16), 16),
            ("op_mod", mbox_in::OP_MOD, 0x6, Dw(0x4, 15, 0), 16),
            ("register_id", m::REGISTER_ID, 0xa, Dw(0x8, 15, 0), 16),
            ("argument", m::ARGUMENT, 0xc, Bytes(0xc, 0xf), 32),
            ("register_data", m::REGISTER_DATA, 0x10, Flex, 0),
        ],
    );
}

#[test]
fn query_special_contexts_out() {
    use cmds::query_special_contexts_out as m;
    check(
        "query_special_contexts_out",
        m::FIELDS,
        m::SIZE,
        32,
        &[
            ("status", mbox_out::STATUS, 0x0, Dw(0x0, 31, 24), 8),
            ("syndrome", mbox_out::SYNDROME, 0x4, Bytes(0x4, 0x7), 32),
            (
                "dump_fill_mkey",
                m::DUMP_FILL_MKEY,
                0x8,
                Bytes(0x8, 0xb),
                32,
            ),
            ("resd_lkey", m::RESD_LKEY, 0xc, Bytes(0xc, 0xf), 32),
            ("null_mkey", m::NULL_MKEY, 0x10, Bytes(0x10, 0x13), 32),
            (
                "terminate_scatter_list_mkey",
                m::TERMINATE_SCATTER_LIST_MKEY,
                0x14,
                Bytes(0x14, 0x17),
                32,
            ),
            (
                "repeated_mkey",
                m::REPEATED_MKEY,
                0x18,
                Bytes(0x18, 0x1b),
                32,
            ),
        ],
    );
}

#[test]
fn cmd_hca_cap() {
    use ctx::cmd_hca_cap as m;
    check(
        "cmd_hca_cap",
        m::FIELDS,
        m::SIZE,
        256,
        &[
            (
                "abs_native_port_num",
                m::ABS_NATIVE_PORT_NUM,
                0x0,
                Dw(0x0, 24, 24),
                1,
            ),
            ("hca_cap_2", m::HCA_CAP_2, 0x4, Dw(0x4, 31, 31), 1),
            ("vhca_id", m::VHCA_ID, 0x6, Dw(0x4, 15, 0), 16),
            (
                "log_max_srq_sz",
                m::LOG_MAX_SRQ_SZ,
                0x10,
                Dw(0x10, 31, 24),
                8,
            ),
            ("log_max_qp_sz", m::LOG_MAX_QP_SZ, 0x11, Dw(0x10, 23, 16), 8),
            ("log_max_qp", m::LOG_MAX_QP, 0x13, Dw(0x10, 4, 0), 5),
            ("log_max_srq", m::LOG_MAX_SRQ, 0x15, Dw(0x14, 20, 16), 5),
            (
                "max_sgl_for_optimized_performance",
                m::MAX_SGL_FOR_OPTIMIZED_PERFORMANCE,
                0x18,
                Dw(0x18, 31, 24),
                8,
            ),
            ("log_max_cq_sz", m::LOG_MAX_CQ_SZ, 0x19, Dw(0x18, 23, 16), 8),
            ("log_max_cq", m::LOG_MAX_CQ, 0x1b, Dw(0x18, 4, 0), 5),
            ("log_max_eq_sz", m::LOG_MAX_EQ_SZ, 0x1c, Dw(0x1c, 31, 24), 8),
            (
                "relaxed_ordering_write",
                m::RELAXED_ORDERING_WRITE,
                0x1d,
                Dw(0x1c, 23, 23),
                1,
            ),
            ("log_max_mkey", m::LOG_MAX_MKEY, 0x1d, Dw(0x1c, 21, 16), 6),
            ("fast_teardown", m::FAST_TEARDOWN, 0x1f, Dw(0x1c, 4, 4), 1),
            ("log_max_eq", m::LOG_MAX_EQ, 0x1f, Dw(0x1c, 3, 0), 4),
            (
                "force_teardown",
                m::FORCE_TEARDOWN,
                0x22,
                Dw(0x20, 15, 15),
                1,
            ),
            (
                "log_max_klm_list_size",
                m::LOG_MAX_KLM_LIST_SIZE,
                0x23,
                Dw(0x20, 5, 0),
                6,
            ),
            (
                "release_all_pages",
                m::RELEASE_ALL_PAGES,
                0x28,
                Dw(0x28, 26, 26),
                1,
            ),
            (
                "log_max_ra_req_qp",
                m::LOG_MAX_RA_REQ_QP,
                0x29,
                Dw(0x28, 21, 16),
                6,
            ),
            (
                "log_max_ra_res_qp",
                m::LOG_MAX_RA_RES_QP,
                0x2b,
                Dw(0x28, 5, 0),
                6,
            ),
            (
                "cache_line_128byte",
                m::CACHE_LINE_128BYTE,
                0x2c,
                Dw(0x2c, 27, 27),
                1,
            ),
            (
                "gid_table_size",
                m::GID_TABLE_SIZE,
                0x2e,
                Dw(0x2c, 15, 0),
                16,
            ),
            (
                "pkey_table_size",
                m::PKEY_TABLE_SIZE,
                0x32,
                Dw(0x30, 15, 0),
                16,
            ),
            (
                "vport_group_manager",
                m::VPORT_GROUP_MANAGER,
                0x34,
                Dw(0x34, 31, 31),
                1,
            ),
            ("ib_virt", m::IB_VIRT, 0x34, Dw(0x34, 29, 29), 1),
            (
                "local_ca_ack_delay",
                m::LOCAL_CA_ACK_DELAY,
                0x35,
                Dw(0x34, 20, 16),
                5,
            ),
            (
                "port_module_event",
                m::PORT_MODULE_EVENT,
                0x36,
                Dw(0x34, 15, 15),
                1,
            ),
            ("port_type", m::PORT_TYPE, 0x36, Dw(0x34, 9, 8), 2),
            ("num_ports", m::NUM_PORTS, 0x37, Dw(0x34, 7, 0), 8),
            ("log_max_msg", m::LOG_MAX_MSG, 0x38, Dw(0x38, 28, 24), 5),
            ("cqe_version", m::CQE_VERSION, 0x3f, Dw(0x3c, 3, 0), 4),
            ("drain_sigerr", m::DRAIN_SIGERR, 0x41, Dw(0x40, 16, 16), 1),
            (
                "cmdif_checksum",
                m::CMDIF_CHECKSUM,
                0x42,
                Dw(0x40, 15, 14),
                2,
            ),
            ("sho", m::SHO, 0x42, Dw(0x40, 8, 8), 1),
            ("dct", m::DCT, 0x43, Dw(0x40, 5, 5), 1),
            (
                "eth_net_offloads",
                m::ETH_NET_OFFLOADS,
                0x43,
                Dw(0x40, 3, 3),
                1,
            ),
            ("roce", m::ROCE, 0x43, Dw(0x40, 2, 2), 1),
            ("atomic", m::ATOMIC, 0x43, Dw(0x40, 1, 1), 1),
            ("cq_oi", m::CQ_OI, 0x44, Dw(0x44, 31, 31), 1),
            ("cq_resize", m::CQ_RESIZE, 0x44, Dw(0x44, 30, 30), 1),
            ("cq_moderation", m::CQ_MODERATION, 0x44, Dw(0x44, 29, 29), 1),
            ("pg", m::PG, 0x44, Dw(0x44, 24, 24), 1),
            ("xrc", m::XRC, 0x47, Dw(0x44, 3, 3), 1),
            ("ud", m::UD, 0x47, Dw(0x44, 2, 2), 1),
            ("uc", m::UC, 0x47, Dw(0x44, 1, 1), 1),
            ("rc", m::RC, 0x47, Dw(0x44, 0, 0), 1),
            ("uar_4k", m::UAR_4K, 0x48, Dw(0x48, 31, 31), 1),
            ("uar_sz", m::UAR_SZ, 0x49, Dw(0x48, 21, 16), 6),
            ("umem_uid_0", m::UMEM_UID_0, 0x4a, Dw(0x48, 13, 13), 1),
            ("log_pg_sz", m::LOG_PG_SZ, 0x4b, Dw(0x48, 7, 0), 8),
            ("bf", m::BF, 0x4c, Dw(0x4c, 31, 31), 1),
            (
                "driver_version",
                m::DRIVER_VERSION,
                0x4c,
                Dw(0x4c, 30, 30),
                1,
            ),
            ("mkey_by_name", m::MKEY_BY_NAME, 0x4c, Dw(0x4c, 25, 25), 1),
            (
                "log_bf_reg_size",
                m::LOG_BF_REG_SIZE,
                0x4d,
                Dw(0x4c, 20, 16),
                5,
            ),
            ("max_wqe_sz_sq", m::MAX_WQE_SZ_SQ, 0x52, Dw(0x50, 15, 0), 16),
            ("max_wqe_sz_rq", m::MAX_WQE_SZ_RQ, 0x56, Dw(0x54, 15, 0), 16),
            (
                "max_wqe_sz_sq_dc",
                m::MAX_WQE_SZ_SQ_DC,
                0x5a,
                Dw(0x58, 15, 0),
                16,
            ),
            ("max_qp_mcg", m::MAX_QP_MCG, 0x5c, Dw(0x5c, 24, 0), 25),
            ("log_max_mcg", m::LOG_MAX_MCG, 0x63, Dw(0x60, 7, 0), 8),
            (
                "log_max_transport_domain",
                m::LOG_MAX_TRANSPORT_DOMAIN,
                0x64,
                Dw(0x64, 28, 24),
                5,
            ),
            (
                "relaxed_ordering_read",
                m::RELAXED_ORDERING_READ,
                0x65,
                Dw(0x64, 21, 21),
                1,
            ),
            ("log_max_pd", m::LOG_MAX_PD, 0x65, Dw(0x64, 20, 16), 5),
            ("log_max_xrcd", m::LOG_MAX_XRCD, 0x67, Dw(0x64, 4, 0), 5),
            ("log_max_rq", m::LOG_MAX_RQ, 0x6c, Dw(0x6c, 28, 24), 5),
            ("log_max_sq", m::LOG_MAX_SQ, 0x6d, Dw(0x6c, 20, 16), 5),
            ("log_max_tir", m::LOG_MAX_TIR, 0x6e, Dw(0x6c, 12, 8), 5),
            ("log_max_tis", m::LOG_MAX_TIS, 0x6f, Dw(0x6c, 4, 0), 5),
            ("log_max_rmp", m::LOG_MAX_RMP, 0x70, Dw(0x70, 28, 24), 5),
            ("log_max_rqt", m::LOG_MAX_RQT, 0x71, Dw(0x70, 20, 16), 5),
            (
                "roce_rw_supported",
                m::ROCE_RW_SUPPORTED,
                0x74,
                Dw(0x74, 30, 30),
                1,
            ),
            ("log_max_wq_sz", m::LOG_MAX_WQ_SZ, 0x7b, Dw(0x78, 4, 0), 5),
            ("sq_ts_format", m::SQ_TS_FORMAT, 0x88, Dw(0x88, 31, 30), 2),
            ("rq_ts_format", m::RQ_TS_FORMAT, 0x88, Dw(0x88, 29, 28), 2),
            ("log_max_uctx", m::LOG_MAX_UCTX, 0x8c, Dw(0x8c, 28, 24), 5),
            ("max_num_eqs", m::MAX_NUM_EQS, 0x8e, Dw(0x8c, 15, 0), 16),
            (
                "log_uar_page_sz",
                m::LOG_UAR_PAGE_SZ,
                0x92,
                Dw(0x90, 15, 0),
                16,
            ),
            (
                "device_frequency_mhz",
                m::DEVICE_FREQUENCY_MHZ,
                0x98,
                Bytes(0x98, 0x9b),
                32,
            ),
            (
                "device_frequency_khz",
                m::DEVICE_FREQUENCY_KHZ,
                0x9c,
                Bytes(0x9c, 0x9f),
                32,
            ),
            (
                "num_of_uars_per_page",
                m::NUM_OF_UARS_PER_PAGE,
                0xa4,
                Bytes(0xa4, 0xa7),
                32,
            ),
            ("cqe_128_always", m::CQE_128_ALWAYS, 0xb7, Dw(0xb4, 2, 2), 1),
            (
                "cqe_compression",
                m::CQE_COMPRESSION,
                0xb7,
                Dw(0xb4, 0, 0),
                1,
            ),
            (
                "num_vhca_ports",
                m::NUM_VHCA_PORTS,
                0xc2,
                Dw(0xc0, 15, 8),
                8,
            ),
            ("sw_owner_id", m::SW_OWNER_ID, 0xc3, Dw(0xc0, 1, 1), 1),
        ],
    );
}

#[test]
fn cqc() {
    use ctx::cqc as m;
    check(
        "cqc",
        m::FIELDS,
        m::SIZE,
        64,
        &[
            ("status", m::STATUS, 0x0, Dw(0x0, 31, 28), 4),
            ("dbr_umem_valid", m::DBR_UMEM_VALID, 0x0, Dw(0x0, 25, 25), 1),
            ("apu_cq", m::APU_CQ, 0x0, Dw(0x0, 24, 24), 1),
            ("cqe_sz", m::CQE_SZ, 0x1, Dw(0x0, 23, 21), 3),
            ("cc", m::CC, 0x1, Dw(0x0, 20, 20), 1),
            (
                "scqe_break_moderation_en",
                m::SCQE_BREAK_MODERATION_EN,
                0x1,
                Dw(0x0, 18, 18),
                1,
            ),
            ("oi", m::OI, 0x1, Dw(0x0, 17, 17), 1),
            ("cq_period_mode", m::CQ_PERIOD_MODE, 0x1, Dw(0x0, 16, 15), 2),
            ("cqe_comp_en", m::CQE_COMP_EN, 0x2, Dw(0x0, 14, 14), 1),
            (
                "mini_cqe_res_format",
                m::MINI_CQE_RES_FORMAT,
                0x2,
                Dw(0x0, 13, 12),
                2,
            ),
            ("st", m::ST, 0x2, Dw(0x0, 11, 8), 4),
            (
                "cqe_compression_layout",
                m::CQE_COMPRESSION_LAYOUT,
                0x3,
                Dw(0x0, 1, 0),
                2,
            ),
            ("page_offset", m::PAGE_OFFSET, 0xa, Dw(0x8, 11, 6), 6),
            ("log_cq_size", m::LOG_CQ_SIZE, 0xc, Dw(0xc, 28, 24), 5),
            ("uar_page", m::UAR_PAGE, 0xd, Dw(0xc, 23, 0), 24),
            ("cq_period", m::CQ_PERIOD, 0x10, Dw(0x10, 27, 16), 12),
            ("cq_max_count", m::CQ_MAX_COUNT, 0x12, Dw(0x10, 15, 0), 16),
            (
                "c_eqn_or_apu_element",
                m::C_EQN_OR_APU_ELEMENT,
                0x14,
                Bytes(0x14, 0x17),
                32,
            ),
            ("log_page_size", m::LOG_PAGE_SIZE, 0x18, Dw(0x18, 28, 24), 5),
            (
                "last_notified_index",
                m::LAST_NOTIFIED_INDEX,
                0x21,
                Dw(0x20, 23, 0),
                24,
            ),
            (
                "last_solicit_index",
                m::LAST_SOLICIT_INDEX,
                0x25,
                Dw(0x24, 23, 0),
                24,
            ),
            (
                "consumer_counter",
                m::CONSUMER_COUNTER,
                0x29,
                Dw(0x28, 23, 0),
                24,
            ),
            (
                "producer_counter",
                m::PRODUCER_COUNTER,
                0x2d,
                Dw(0x2c, 23, 0),
                24,
            ),
            ("dbr_addr", m::DBR_ADDR, 0x38, Bytes(0x38, 0x3f), 64),
        ],
    );
}

#[test]
fn eqc() {
    use ctx::eqc as m;
    check(
        "eqc",
        m::FIELDS,
        m::SIZE,
        64,
        &[
            ("status", m::STATUS, 0x0, Dw(0x0, 31, 28), 4),
            ("ec", m::EC, 0x1, Dw(0x0, 18, 18), 1),
            ("oi", m::OI, 0x1, Dw(0x0, 17, 17), 1),
            ("st", m::ST, 0x2, Dw(0x0, 11, 8), 4),
            ("page_offset", m::PAGE_OFFSET, 0xa, Dw(0x8, 11, 6), 6),
            ("log_eq_size", m::LOG_EQ_SIZE, 0xc, Dw(0xc, 28, 24), 5),
            ("uar_page", m::UAR_PAGE, 0xd, Dw(0xc, 23, 0), 24),
            ("intr", m::INTR, 0x16, Dw(0x14, 11, 0), 12),
            ("log_page_size", m::LOG_PAGE_SIZE, 0x18, Dw(0x18, 28, 24), 5),
            (
                "consumer_counter",
                m::CONSUMER_COUNTER,
                0x29,
                Dw(0x28, 23, 0),
                24,
            ),
            (
                "producer_counter",
                m::PRODUCER_COUNTER,
                0x2d,
                Dw(0x2c, 23, 0),
                24,
            ),
        ],
    );
}

#[test]
fn qpc() {
    use ctx::qpc as m;
    check(
        "qpc",
        m::FIELDS,
        m::SIZE,
        232,
        &[
            ("state", m::STATE, 0x0, Dw(0x0, 31, 28), 4),
            (
                "lag_tx_port_affinity",
                m::LAG_TX_PORT_AFFINITY,
                0x0,
                Dw(0x0, 27, 24),
                4,
            ),
            ("st", m::ST, 0x1, Dw(0x0, 23, 16), 8),
            ("isolate_vl_tc", m::ISOLATE_VL_TC, 0x2, Dw(0x0, 13, 13), 1),
            ("pm_state", m::PM_STATE, 0x2, Dw(0x0, 12, 11), 2),
            (
                "req_e2e_credit_mode",
                m::REQ_E2E_CREDIT_MODE,
                0x2,
                Dw(0x0, 9, 8),
                2,
            ),
            ("offload_type", m::OFFLOAD_TYPE, 0x3, Dw(0x0, 7, 4), 4),
            (
                "end_padding_mode",
                m::END_PADDING_MODE,
                0x3,
                Dw(0x0, 3, 2),
                2,
            ),
            ("wq_signature", m::WQ_SIGNATURE, 0x4, Dw(0x4, 31, 31), 1),
            ("block_lb_mc", m::BLOCK_LB_MC, 0x4, Dw(0x4, 30, 30), 1),
            (
                "atomic_like_write_en",
                m::ATOMIC_LIKE_WRITE_EN,
                0x4,
                Dw(0x4, 29, 29),
                1,
            ),
            (
                "latency_sensitive",
                m::LATENCY_SENSITIVE,
                0x4,
                Dw(0x4, 28, 28),
                1,
            ),
            ("drain_sigerr", m::DRAIN_SIGERR, 0x4, Dw(0x4, 26, 26), 1),
            (
                "dp_ordering_force",
                m::DP_ORDERING_FORCE,
                0x4,
                Dw(0x4, 24, 24),
                1,
            ),
            ("pd", m::PD, 0x5, Dw(0x4, 23, 0), 24),
            ("mtu", m::MTU, 0x8, Dw(0x8, 31, 29), 3),
            ("log_msg_max", m::LOG_MSG_MAX, 0x8, Dw(0x8, 28, 24), 5),
            ("log_rq_size", m::LOG_RQ_SIZE, 0x9, Dw(0x8, 22, 19), 4),
            ("log_rq_stride", m::LOG_RQ_STRIDE, 0x9, Dw(0x8, 18, 16), 3),
            ("no_sq", m::NO_SQ, 0xa, Dw(0x8, 15, 15), 1),
            ("log_sq_size", m::LOG_SQ_SIZE, 0xa, Dw(0x8, 14, 11), 4),
            ("retry_mode", m::RETRY_MODE, 0xa, Dw(0x8, 9, 8), 2),
            ("ts_format", m::TS_FORMAT, 0xb, Dw(0x8, 7, 6), 2),
            ("rlky", m::RLKY, 0xb, Dw(0x8, 4, 4), 1),
            (
                "ulp_stateless_offload_mode",
                m::ULP_STATELESS_OFFLOAD_MODE,
                0xb,
                Dw(0x8, 3, 0),
                4,
            ),
            ("counter_set_id", m::COUNTER_SET_ID, 0xc, Dw(0xc, 31, 24), 8),
            ("uar_page", m::UAR_PAGE, 0xd, Dw(0xc, 23, 0), 24),
            ("user_index", m::USER_INDEX, 0x11, Dw(0x10, 23, 0), 24),
            ("log_page_size", m::LOG_PAGE_SIZE, 0x14, Dw(0x14, 28, 24), 5),
            ("remote_qpn", m::REMOTE_QPN, 0x15, Dw(0x14, 23, 0), 24),
            (
                "primary_address_path",
                m::PRIMARY_ADDRESS_PATH,
                0x18,
                Struct(44),
                352,
            ),
            (
                "secondary_address_path",
                m::SECONDARY_ADDRESS_PATH,
                0x44,
                Struct(44),
                352,
            ),
            (
                "log_ack_req_freq",
                m::LOG_ACK_REQ_FREQ,
                0x70,
                Dw(0x70, 31, 28),
                4,
            ),
            ("log_sra_max", m::LOG_SRA_MAX, 0x71, Dw(0x70, 23, 21), 3),
            ("retry_count", m::RETRY_COUNT, 0x71, Dw(0x70, 18, 16), 3),
            ("rnr_retry", m::RNR_RETRY, 0x72, Dw(0x70, 15, 13), 3),
            ("fre", m::FRE, 0x72, Dw(0x70, 11, 11), 1),
            ("cur_rnr_retry", m::CUR_RNR_RETRY, 0x72, Dw(0x70, 10, 8), 3),
            (
                "cur_retry_count",
                m::CUR_RETRY_COUNT,
                0x73,
                Dw(0x70, 7, 5),
                3,
            ),
            ("next_send_psn", m::NEXT_SEND_PSN, 0x79, Dw(0x78, 23, 0), 24),
            (
                "log_num_dci_stream_channels",
                m::LOG_NUM_DCI_STREAM_CHANNELS,
                0x7c,
                Dw(0x7c, 28, 24),
                5,
            ),
            ("cqn_snd", m::CQN_SND, 0x7d, Dw(0x7c, 23, 0), 24),
            (
                "log_num_dci_errored_streams",
                m::LOG_NUM_DCI_ERRORED_STREAMS,
                0x80,
                Dw(0x80, 28, 24),
                5,
            ),
            ("deth_sqpn", m::DETH_SQPN, 0x81, Dw(0x80, 23, 0), 24),
            (
                "last_acked_psn",
                m::LAST_ACKED_PSN,
                0x89,
                Dw(0x88, 23, 0),
                24,
            ),
            ("ssn", m::SSN, 0x8d, Dw(0x8c, 23, 0), 24),
            ("log_rra_max", m::LOG_RRA_MAX, 0x91, Dw(0x90, 23, 21), 3),
            ("atomic_mode", m::ATOMIC_MODE, 0x91, Dw(0x90, 19, 16), 4),
            ("rre", m::RRE, 0x92, Dw(0x90, 15, 15), 1),
            ("rwe", m::RWE, 0x92, Dw(0x90, 14, 14), 1),
            ("rae", m::RAE, 0x92, Dw(0x90, 13, 13), 1),
            ("page_offset", m::PAGE_OFFSET, 0x92, Dw(0x90, 11, 6), 6),
            ("dp_ordering_1", m::DP_ORDERING_1, 0x93, Dw(0x90, 3, 3), 1),
            (
                "cd_slave_receive",
                m::CD_SLAVE_RECEIVE,
                0x93,
                Dw(0x90, 2, 2),
                1,
            ),
            ("cd_slave_send", m::CD_SLAVE_SEND, 0x93, Dw(0x90, 1, 1), 1),
            ("cd_master", m::CD_MASTER, 0x93, Dw(0x90, 0, 0), 1),
            ("min_rnr_nak", m::MIN_RNR_NAK, 0x94, Dw(0x94, 28, 24), 5),
            ("next_rcv_psn", m::NEXT_RCV_PSN, 0x95, Dw(0x94, 23, 0), 24),
            ("xrcd", m::XRCD, 0x99, Dw(0x98, 23, 0), 24),
            ("cqn_rcv", m::CQN_RCV, 0x9d, Dw(0x9c, 23, 0), 24),
            ("dbr_addr", m::DBR_ADDR, 0xa0, Bytes(0xa0, 0xa7), 64),
            ("q_key", m::Q_KEY, 0xa8, Bytes(0xa8, 0xab), 32),
            ("rq_type", m::RQ_TYPE, 0xac, Dw(0xac, 26, 24), 3),
            (
                "srqn_rmpn_xrqn",
                m::SRQN_RMPN_XRQN,
                0xad,
                Dw(0xac, 23, 0),
                24,
            ),
            ("rmsn", m::RMSN, 0xb1, Dw(0xb0, 23, 0), 24),
            (
                "hw_sq_wqebb_counter",
                m::HW_SQ_WQEBB_COUNTER,
                0xb4,
                Dw(0xb4, 31, 16),
                16,
            ),
            (
                "sw_sq_wqebb_counter",
                m::SW_SQ_WQEBB_COUNTER,
                0xb6,
                Dw(0xb4, 15, 0),
                16,
            ),
            (
                "hw_rq_counter",
                m::HW_RQ_COUNTER,
                0xb8,
                Bytes(0xb8, 0xbb),
                32,
            ),
            (
                "sw_rq_counter",
                m::SW_RQ_COUNTER,
                0xbc,
                Bytes(0xbc, 0xbf),
                32,
            ),
            ("cgs", m::CGS, 0xc5, Dw(0xc4, 16, 16), 1),
            ("cs_req", m::CS_REQ, 0xc6, Dw(0xc4, 15, 8), 8),
            ("cs_res", m::CS_RES, 0xc7, Dw(0xc4, 7, 0), 8),
            (
                "dc_access_key",
                m::DC_ACCESS_KEY,
                0xc8,
                Bytes(0xc8, 0xcf),
                64,
            ),
            (
                "dbr_umem_valid",
                m::DBR_UMEM_VALID,
                0xd0,
                Dw(0xd0, 28, 28),
                1,
            ),
        ],
    );
}

#[test]
fn ads() {
    use ctx::ads as m;
    check(
        "ads",
        m::FIELDS,
        m::SIZE,
        44,
        &[
            ("fl", m::FL, 0x0, Dw(0x0, 31, 31), 1),
            ("free_ar", m::FREE_AR, 0x0, Dw(0x0, 30, 30), 1),
            ("pkey_index", m::PKEY_INDEX, 0x2, Dw(0x0, 15, 0), 16),
            ("plane_index", m::PLANE_INDEX, 0x4, Dw(0x4, 31, 24), 8),
            ("grh", m::GRH, 0x5, Dw(0x4, 23, 23), 1),
            ("mlid", m::MLID, 0x5, Dw(0x4, 22, 16), 7),
            ("rlid", m::RLID, 0x6, Dw(0x4, 15, 0), 16),
            ("ack_timeout", m::ACK_TIMEOUT, 0x8, Dw(0x8, 31, 27), 5),
            ("src_addr_index", m::SRC_ADDR_INDEX, 0x9, Dw(0x8, 23, 16), 8),
            ("stat_rate", m::STAT_RATE, 0xa, Dw(0x8, 11, 8), 4),
            ("hop_limit", m::HOP_LIMIT, 0xb, Dw(0x8, 7, 0), 8),
            ("tclass", m::TCLASS, 0xc, Dw(0xc, 27, 20), 8),
            ("flow_label", m::FLOW_LABEL, 0xd, Dw(0xc, 19, 0), 20),
            ("rgid_rip", m::RGID_RIP, 0x10, Bytes(0x10, 0x1f), 128),
            ("f_dscp", m::F_DSCP, 0x20, Dw(0x20, 27, 27), 1),
            ("f_ecn", m::F_ECN, 0x20, Dw(0x20, 26, 26), 1),
            ("f_eth_prio", m::F_ETH_PRIO, 0x20, Dw(0x20, 24, 24), 1),
            ("ecn", m::ECN, 0x21, Dw(0x20, 23, 22), 2),
            ("dscp", m::DSCP, 0x21, Dw(0x20, 21, 16), 6),
            ("udp_sport", m::UDP_SPORT, 0x22, Dw(0x20, 15, 0), 16),
            ("dei_cfi", m::DEI_CFI, 0x24, Dw(0x24, 31, 31), 1),
            ("eth_prio", m::ETH_PRIO, 0x24, Dw(0x24, 30, 28), 3),
            ("sl", m::SL, 0x24, Dw(0x24, 27, 24), 4),
            ("vhca_port_num", m::VHCA_PORT_NUM, 0x25, Dw(0x24, 23, 16), 8),
            ("rmac_47_32", m::RMAC_47_32, 0x26, Dw(0x24, 15, 0), 16),
            ("rmac_31_0", m::RMAC_31_0, 0x28, Bytes(0x28, 0x2b), 32),
        ],
    );
}

#[test]
fn mkc() {
    use ctx::mkc as m;
    check(
        "mkc",
        m::FIELDS,
        m::SIZE,
        64,
        &[
            ("free", m::FREE, 0x0, Dw(0x0, 30, 30), 1),
            (
                "access_mode_4_2",
                m::ACCESS_MODE_4_2,
                0x0,
                Dw(0x0, 28, 26),
                3,
            ),
            (
                "relaxed_ordering_write",
                m::RELAXED_ORDERING_WRITE,
                0x1,
                Dw(0x0, 18, 18),
                1,
            ),
            (
                "small_fence_on_rdma_read_response",
                m::SMALL_FENCE_ON_RDMA_READ_RESPONSE,
                0x1,
                Dw(0x0, 16, 16),
                1,
            ),
            ("umr_en", m::UMR_EN, 0x2, Dw(0x0, 15, 15), 1),
            ("a", m::A, 0x2, Dw(0x0, 14, 14), 1),
            ("rw", m::RW, 0x2, Dw(0x0, 13, 13), 1),
            ("rr", m::RR, 0x2, Dw(0x0, 12, 12), 1),
            ("lw", m::LW, 0x2, Dw(0x0, 11, 11), 1),
            ("lr", m::LR, 0x2, Dw(0x0, 10, 10), 1),
            ("access_mode_1_0", m::ACCESS_MODE_1_0, 0x2, Dw(0x0, 9, 8), 2),
            (
                "ma_translation_mode",
                m::MA_TRANSLATION_MODE,
                0x3,
                Dw(0x0, 5, 4),
                2,
            ),
            ("qpn", m::QPN, 0x4, Dw(0x4, 31, 8), 24),
            ("mkey_7_0", m::MKEY_7_0, 0x7, Dw(0x4, 7, 0), 8),
            ("length64", m::LENGTH64, 0xc, Dw(0xc, 31, 31), 1),
            ("bsf_en", m::BSF_EN, 0xc, Dw(0xc, 30, 30), 1),
            ("sync_umr", m::SYNC_UMR, 0xc, Dw(0xc, 29, 29), 1),
            (
                "expected_sigerr_count",
                m::EXPECTED_SIGERR_COUNT,
                0xc,
                Dw(0xc, 26, 26),
                1,
            ),
            ("en_rinval", m::EN_RINVAL, 0xc, Dw(0xc, 24, 24), 1),
            ("pd", m::PD, 0xd, Dw(0xc, 23, 0), 24),
            ("start_addr", m::START_ADDR, 0x10, Bytes(0x10, 0x17), 64),
            ("len", m::LEN, 0x18, Bytes(0x18, 0x1f), 64),
            (
                "bsf_octword_size",
                m::BSF_OCTWORD_SIZE,
                0x20,
                Bytes(0x20, 0x23),
                32,
            ),
            (
                "crossing_target_vhca_id",
                m::CROSSING_TARGET_VHCA_ID,
                0x30,
                Dw(0x30, 31, 16),
                16,
            ),
            (
                "translations_octword_size",
                m::TRANSLATIONS_OCTWORD_SIZE,
                0x34,
                Bytes(0x34, 0x37),
                32,
            ),
            (
                "relaxed_ordering_read",
                m::RELAXED_ORDERING_READ,
                0x3b,
                Dw(0x38, 6, 6),
                1,
            ),
            ("log_page_size", m::LOG_PAGE_SIZE, 0x3b, Dw(0x38, 5, 0), 6),
        ],
    );
}
