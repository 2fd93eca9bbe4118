//! The EFA contract (`firmware_interface::efa`) against reference positions typed from the
//! EFA device-interface tables (`docs/efa.md`, which follows Linux's
//! `drivers/infiniband/hw/efa/efa_{regs,admin,admin_cmds}_defs.h` and rdma-core's
//! `providers/efa/efa_io_defs.h`), independently of the crate's constants.
//!
//! A reference row is `(name, field, byte, hi, lo)`: bits `hi..=lo` of the little-endian word
//! at `byte` (for byte arrays: `hi = 8 * len - 1`, `lo = 0`).

use core::mem::size_of;
use firmware_interface::LeField;
use firmware_interface::efa::{admin, cmds, feature, io, opcode, pci, regs};
use memoffset::offset_of;

type Row = (&'static str, LeField, usize, u32, u32);

/// Checks every row's position and width, that the rows name every field of the module (and
/// nothing else), the size, and that every field lies inside it.
fn check(name: &str, fields: &[(&str, LeField)], size: usize, spec_size: usize, rows: &[Row]) {
    assert_eq!(size, spec_size, "{name}: SIZE");
    for &(field, f, byte, hi, lo) in rows {
        let ctx = format!("{name}.{field}");
        assert_eq!(f.bit_off, byte as u32 * 8 + lo, "{ctx}: bit offset");
        assert_eq!(f.width, hi - lo + 1, "{ctx}: width");
        assert!(f.end() <= size, "{ctx}: beyond SIZE");
    }
    assert_eq!(fields.len(), rows.len(), "{name}: field count");
    for &(fname, f) in fields {
        let r = rows
            .iter()
            .find(|r| r.0.to_uppercase() == fname)
            .unwrap_or_else(|| panic!("{name}.{fname}: not in the reference table"));
        assert_eq!(r.1, f, "{name}.{fname}: row names another field");
    }
}

/// A register field: (name, field, hi, lo) of the 32-bit register.
fn reg(name: &str, f: LeField, hi: u32, lo: u32) {
    assert_eq!((f.bit_off, f.width), (lo, hi - lo + 1), "{name}");
}

macro_rules! offsets {
    ($t:ty { $($f:ident: $off:expr),* $(,)? }) => {
        $( assert_eq!(offset_of!($t, $f), $off, concat!(stringify!($t), ".", stringify!($f))); )*
    };
}

#[test]
fn register_map() {
    // docs/efa.md#bar0-registers
    let spec: &[(&str, usize, bool)] = &[
        ("VERSION", 0x00, true),
        ("CONTROLLER_VERSION", 0x04, true),
        ("CAPS", 0x08, true),
        ("AQ_BASE_LO", 0x10, false),
        ("AQ_BASE_HI", 0x14, false),
        ("AQ_CAPS", 0x18, false),
        ("ACQ_BASE_LO", 0x20, false),
        ("ACQ_BASE_HI", 0x24, false),
        ("ACQ_CAPS", 0x28, false),
        ("AQ_PROD_DB", 0x2c, false),
        ("AENQ_CAPS", 0x34, false),
        ("AENQ_BASE_LO", 0x38, false),
        ("AENQ_BASE_HI", 0x3c, false),
        ("AENQ_CONS_DB", 0x40, false),
        ("INTR_MASK", 0x4c, false),
        ("DEV_CTL", 0x54, false),
        ("DEV_STS", 0x58, true),
        ("MMIO_REG_READ", 0x5c, false),
        ("MMIO_RESP_LO", 0x60, false),
        ("MMIO_RESP_HI", 0x64, false),
        ("EQ_DB", 0x68, false),
    ];
    assert_eq!(regs::REGISTERS, spec);
    let consts = [
        regs::VERSION,
        regs::CONTROLLER_VERSION,
        regs::CAPS,
        regs::AQ_BASE_LO,
        regs::AQ_BASE_HI,
        regs::AQ_CAPS,
        regs::ACQ_BASE_LO,
        regs::ACQ_BASE_HI,
        regs::ACQ_CAPS,
        regs::AQ_PROD_DB,
        regs::AENQ_CAPS,
        regs::AENQ_BASE_LO,
        regs::AENQ_BASE_HI,
        regs::AENQ_CONS_DB,
        regs::INTR_MASK,
        regs::DEV_CTL,
        regs::DEV_STS,
        regs::MMIO_REG_READ,
        regs::MMIO_RESP_LO,
        regs::MMIO_RESP_HI,
        regs::EQ_DB,
    ];
    for (c, s) in consts.iter().zip(spec) {
        assert_eq!(*c, s.1, "{}", s.0);
    }
    // The undefined offsets.
    for off in [0x0c, 0x1c, 0x30, 0x44, 0x48, 0x50] {
        assert_eq!(regs::lookup(off), None, "{off:#x}");
    }
    assert_eq!(regs::lookup(0x58), Some(("DEV_STS", true)));
    assert_eq!(regs::END, 0x6c);
}

#[test]
fn register_fields() {
    reg("version.minor", regs::version::MINOR, 7, 0);
    reg("version.major", regs::version::MAJOR, 15, 8);
    reg("cv.subminor", regs::controller_version::SUBMINOR, 7, 0);
    reg("cv.minor", regs::controller_version::MINOR, 15, 8);
    reg("cv.major", regs::controller_version::MAJOR, 23, 16);
    reg("cv.impl_id", regs::controller_version::IMPL_ID, 31, 24);
    reg("caps.contig", regs::caps::CONTIGUOUS_QUEUE_REQUIRED, 0, 0);
    reg("caps.reset_timeout", regs::caps::RESET_TIMEOUT, 5, 1);
    reg("caps.dma_addr_width", regs::caps::DMA_ADDR_WIDTH, 15, 8);
    reg("caps.admin_cmd_to", regs::caps::ADMIN_CMD_TO, 19, 16);
    reg("aq_caps.depth", regs::aq_caps::DEPTH, 15, 0);
    reg("aq_caps.entry_size", regs::aq_caps::ENTRY_SIZE, 31, 16);
    reg("acq_caps.depth", regs::acq_caps::DEPTH, 15, 0);
    reg("acq_caps.entry_size", regs::acq_caps::ENTRY_SIZE, 23, 16);
    reg("acq_caps.vector", regs::acq_caps::VECTOR, 31, 24);
    reg("aenq_caps.depth", regs::aenq_caps::DEPTH, 15, 0);
    reg("aenq_caps.entry_size", regs::aenq_caps::ENTRY_SIZE, 23, 16);
    reg("aenq_caps.vector", regs::aenq_caps::VECTOR, 31, 24);
    reg("intr_mask.en", regs::intr_mask::EN, 0, 0);
    reg("dev_ctl.dev_reset", regs::dev_ctl::DEV_RESET, 0, 0);
    reg("dev_ctl.aq_restart", regs::dev_ctl::AQ_RESTART, 1, 1);
    reg("dev_ctl.reset_reason", regs::dev_ctl::RESET_REASON, 31, 28);
    reg("dev_sts.ready", regs::dev_sts::READY, 0, 0);
    reg(
        "dev_sts.aq_rip",
        regs::dev_sts::AQ_RESTART_IN_PROGRESS,
        1,
        1,
    );
    reg("dev_sts.aq_rf", regs::dev_sts::AQ_RESTART_FINISHED, 2, 2);
    reg("dev_sts.rip", regs::dev_sts::RESET_IN_PROGRESS, 3, 3);
    reg("dev_sts.rf", regs::dev_sts::RESET_FINISHED, 4, 4);
    reg("dev_sts.fatal", regs::dev_sts::FATAL_ERROR, 5, 5);
    reg("mmio_reg_read.req_id", regs::mmio_reg_read::REQ_ID, 15, 0);
    reg(
        "mmio_reg_read.reg_off",
        regs::mmio_reg_read::REG_OFF,
        31,
        16,
    );
    reg("eq_db.eqn", regs::eq_db::EQN, 15, 0);
    reg("eq_db.arm", regs::eq_db::ARM, 31, 31);
    reg("cq_db.ci", regs::cq_db::CONSUMER_INDEX, 15, 0);
    reg("cq_db.cmd_sn", regs::cq_db::CMD_SN, 30, 29);
    reg("cq_db.arm", regs::cq_db::ARM, 31, 31);
    // The values a driver writes: AQ 32 | 64 << 16, AENQ 16 | 64 << 16 | vec << 24.
    assert_eq!(
        regs::aq_caps::DEPTH.val(32) | regs::aq_caps::ENTRY_SIZE.val(64),
        0x0040_0020
    );
    assert_eq!(
        regs::aenq_caps::DEPTH.val(16)
            | regs::aenq_caps::ENTRY_SIZE.val(64)
            | regs::aenq_caps::VECTOR.val(0),
        0x0040_0010
    );
    assert_eq!(
        regs::dev_ctl::DEV_RESET.val(1)
            | regs::dev_ctl::RESET_REASON.val(u64::from(regs::reset_reason::SHUTDOWN)),
        0x6000_0001
    );
    let reasons = [
        regs::reset_reason::NORMAL,
        regs::reset_reason::KEEP_ALIVE_TO,
        regs::reset_reason::ADMIN_TO,
        regs::reset_reason::INIT_ERR,
        regs::reset_reason::DRIVER_INVALID_STATE,
        regs::reset_reason::OS_TRIGGER,
        regs::reset_reason::SHUTDOWN,
        regs::reset_reason::USER_TRIGGER,
        regs::reset_reason::GENERIC,
    ];
    assert_eq!(reasons, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(regs::version::MIN, (0, 1));
    assert_eq!(regs::controller_version::MIN, (0, 0, 1));
}

#[test]
fn readless_response() {
    // docs/efa.md#read-less-register-reads: req_id u16 @0, reg_off u16 @2, reg_val u32 @4.
    assert_eq!(size_of::<regs::ReadlessResp>(), 8);
    offsets!(regs::ReadlessResp {
        req_id: 0,
        reg_off: 2,
        reg_val: 4
    });
    let r = regs::ReadlessResp::from_bytes(&[0x34, 0x12, 0x58, 0, 0x78, 0x56, 0x34, 0x12]);
    assert_eq!(
        (r.req_id.get(), r.reg_off.get(), r.reg_val.get()),
        (0x1234, 0x58, 0x1234_5678)
    );
    assert_eq!(regs::READ_FAILED, 0xffff_ffff);
}

#[test]
fn admin_entries() {
    // docs/efa.md#admin-queues
    assert_eq!(size_of::<admin::AqEntry>(), 64);
    offsets!(admin::AqEntry {
        command_id: 0,
        opcode: 2,
        flags: 3,
        ctrl: 4,
        data: 16
    });
    assert_eq!(size_of::<admin::AcqEntry>(), 64);
    offsets!(admin::AcqEntry {
        command: 0,
        status: 2,
        flags: 3,
        extended_status: 4,
        sq_head_indx: 6,
        data: 8
    });
    assert_eq!(size_of::<admin::AenqEntry>(), 64);
    offsets!(admin::AenqEntry {
        group: 0,
        syndrome: 2,
        flags: 4,
        rsvd: 5,
        timestamp_low: 8,
        timestamp_high: 12,
        data: 16
    });
    assert_eq!(size_of::<admin::Eqe>(), 16);
    offsets!(admin::Eqe {
        common: 0,
        rsvd: 4,
        data: 8
    });
    assert_eq!(size_of::<admin::CtrlBuffInfo>(), 12);
    offsets!(admin::CtrlBuffInfo {
        length: 0,
        addr_lo: 4,
        addr_hi: 8
    });
    assert_eq!((admin::AQ_FLAG_PHASE, admin::AQ_FLAG_CTRL_DATA), (0x1, 0x2));
    assert_eq!(admin::AQ_FLAG_CTRL_DATA_INDIRECT, 0x4);
    assert_eq!(admin::COMMAND_ID_MASK, 0xfff);
    assert_eq!((admin::AQ_DEPTH, admin::AENQ_DEPTH), (32, 16));
    assert_eq!((admin::CMD_DATA, admin::RESP_DATA), (16, 8));
    // A page-list chunk: 510 addresses, then the 12-byte link; a full chunk uses 4092 bytes.
    assert_eq!(admin::PBL_CHUNK_ENTRIES, 510);
    assert_eq!(admin::PBL_CHUNK_LINK, 4080);
    assert_eq!(admin::PBL_CHUNK_FULL_LEN, 4092);
    // EQE common word: bit 0 phase, bits 8:1 event type.
    assert_eq!(admin::EQE_PHASE, 1);
    assert_eq!(admin::EQE_EVENT_TYPE_SHIFT, 1);
    assert_eq!(admin::EQE_EVENT_TYPE_MASK, 0xff);
    assert_eq!(admin::EQE_EVENT_COMPLETION, 0);
    // Bytes: a completion with command 0x123, status 5, phase 1.
    let mut b = [0u8; 64];
    b[0] = 0x23;
    b[1] = 0x01;
    b[2] = 5;
    b[3] = 1;
    let e = admin::AcqEntry::from_bytes(&b);
    assert_eq!((e.command.get(), e.status, e.flags), (0x123, 5, 1));
    assert_eq!(e.to_bytes(), b);
}

#[test]
fn status_and_groups() {
    use admin::{aenq_group as g, status as s};
    let spec = [
        (s::SUCCESS, 0),
        (s::RESOURCE_ALLOCATION_FAILURE, 1),
        (s::BAD_OPCODE, 2),
        (s::UNSUPPORTED_OPCODE, 3),
        (s::MALFORMED_REQUEST, 4),
        (s::ILLEGAL_PARAMETER, 5),
        (s::UNKNOWN_ERROR, 6),
        (s::RESOURCE_BUSY, 7),
    ];
    for (v, e) in spec {
        assert_eq!(v, e);
        assert!(s::name(v).is_some());
    }
    assert_eq!(s::name(8), None);
    assert_eq!(
        (g::FATAL_ERROR, g::WARNING, g::NOTIFICATION, g::KEEP_ALIVE),
        (1, 2, 3, 4)
    );
    assert_eq!(g::DRIVER_MASK, 0x1e);
}

#[test]
fn opcodes() {
    let spec: &[(u8, &str)] = &[
        (1, "CREATE_QP"),
        (2, "MODIFY_QP"),
        (3, "QUERY_QP"),
        (4, "DESTROY_QP"),
        (5, "CREATE_AH"),
        (6, "DESTROY_AH"),
        (7, "REG_MR"),
        (8, "DEREG_MR"),
        (9, "CREATE_CQ"),
        (10, "DESTROY_CQ"),
        (11, "GET_FEATURE"),
        (12, "SET_FEATURE"),
        (13, "GET_STATS"),
        (14, "ALLOC_PD"),
        (15, "DEALLOC_PD"),
        (16, "ALLOC_UAR"),
        (17, "DEALLOC_UAR"),
        (18, "CREATE_EQ"),
        (19, "DESTROY_EQ"),
        (20, "ALLOC_MR"),
    ];
    assert_eq!(opcode::ALL, spec);
    assert_eq!(opcode::CREATE_QP, 1);
    assert_eq!(opcode::GET_FEATURE, 11);
    assert_eq!(opcode::DESTROY_EQ, 19);
    assert_eq!(opcode::name(21), None);
}

#[test]
fn qp_commands() {
    use cmds::{create_qp_cmd as c, create_qp_resp as r};
    check(
        "create_qp_cmd",
        c::FIELDS,
        c::SIZE,
        64,
        &[
            ("pd", c::PD, 4, 15, 0),
            ("qp_type", c::QP_TYPE, 6, 7, 0),
            ("sq_virt", c::SQ_VIRT, 7, 0, 0),
            ("rq_virt", c::RQ_VIRT, 7, 1, 1),
            ("unsolicited_write_recv", c::UNSOLICITED_WRITE_RECV, 7, 2, 2),
            ("sq_base_addr", c::SQ_BASE_ADDR, 8, 63, 0),
            ("rq_base_addr", c::RQ_BASE_ADDR, 16, 63, 0),
            ("send_cq_idx", c::SEND_CQ_IDX, 24, 31, 0),
            ("recv_cq_idx", c::RECV_CQ_IDX, 28, 31, 0),
            ("sq_l_key", c::SQ_L_KEY, 32, 31, 0),
            ("rq_l_key", c::RQ_L_KEY, 36, 31, 0),
            ("send_queue_ring_size", c::SEND_QUEUE_RING_SIZE, 40, 31, 0),
            ("send_queue_depth", c::SEND_QUEUE_DEPTH, 44, 31, 0),
            ("recv_queue_ring_size", c::RECV_QUEUE_RING_SIZE, 48, 31, 0),
            ("recv_queue_depth", c::RECV_QUEUE_DEPTH, 52, 31, 0),
            ("uar", c::UAR, 56, 15, 0),
            ("sl", c::SL, 58, 7, 0),
        ],
    );
    assert_eq!((c::QP_TYPE_UD, c::QP_TYPE_SRD), (1, 2));
    check(
        "create_qp_resp",
        r::FIELDS,
        r::SIZE,
        32,
        &[
            ("qp_handle", r::QP_HANDLE, 8, 31, 0),
            ("qp_num", r::QP_NUM, 12, 15, 0),
            ("send_sub_cq_idx", r::SEND_SUB_CQ_IDX, 16, 15, 0),
            ("recv_sub_cq_idx", r::RECV_SUB_CQ_IDX, 18, 15, 0),
            ("sq_db_offset", r::SQ_DB_OFFSET, 20, 31, 0),
            ("rq_db_offset", r::RQ_DB_OFFSET, 24, 31, 0),
            (
                "llq_descriptors_offset",
                r::LLQ_DESCRIPTORS_OFFSET,
                28,
                31,
                0,
            ),
        ],
    );
    use cmds::modify_qp_cmd as m;
    check(
        "modify_qp_cmd",
        m::FIELDS,
        m::SIZE,
        32,
        &[
            ("modify_mask", m::MODIFY_MASK, 4, 31, 0),
            ("qp_handle", m::QP_HANDLE, 8, 31, 0),
            ("qp_state", m::QP_STATE, 12, 31, 0),
            ("cur_qp_state", m::CUR_QP_STATE, 16, 31, 0),
            ("qkey", m::QKEY, 20, 31, 0),
            ("sq_psn", m::SQ_PSN, 24, 31, 0),
            (
                "sq_drained_async_notify",
                m::SQ_DRAINED_ASYNC_NOTIFY,
                28,
                7,
                0,
            ),
            ("rnr_retry", m::RNR_RETRY, 29, 7, 0),
        ],
    );
    assert_eq!(
        [
            m::MASK_QP_STATE,
            m::MASK_CUR_QP_STATE,
            m::MASK_QKEY,
            m::MASK_SQ_PSN,
            m::MASK_SQ_DRAINED_ASYNC_NOTIFY,
            m::MASK_RNR_RETRY
        ],
        [1, 2, 4, 8, 16, 32]
    );
    assert_eq!(
        [
            m::QP_STATE_RESET,
            m::QP_STATE_INIT,
            m::QP_STATE_RTR,
            m::QP_STATE_RTS,
            m::QP_STATE_SQD,
            m::QP_STATE_SQE,
            m::QP_STATE_ERR
        ],
        [0, 1, 2, 3, 4, 5, 6]
    );
    check("modify_qp_resp", cmds::modify_qp_resp::FIELDS, 8, 8, &[]);
    use cmds::{query_qp_cmd as qc, query_qp_resp as qr};
    check(
        "query_qp_cmd",
        qc::FIELDS,
        qc::SIZE,
        8,
        &[("qp_handle", qc::QP_HANDLE, 4, 31, 0)],
    );
    check(
        "query_qp_resp",
        qr::FIELDS,
        qr::SIZE,
        24,
        &[
            ("qp_state", qr::QP_STATE, 8, 31, 0),
            ("qkey", qr::QKEY, 12, 31, 0),
            ("sq_psn", qr::SQ_PSN, 16, 31, 0),
            ("sq_draining", qr::SQ_DRAINING, 20, 7, 0),
            ("rnr_retry", qr::RNR_RETRY, 21, 7, 0),
        ],
    );
    use cmds::destroy_qp_cmd as d;
    check(
        "destroy_qp_cmd",
        d::FIELDS,
        d::SIZE,
        8,
        &[("qp_handle", d::QP_HANDLE, 4, 31, 0)],
    );
}

#[test]
fn ah_mr_commands() {
    use cmds::{create_ah_cmd as c, create_ah_resp as r, destroy_ah_cmd as d};
    check(
        "create_ah_cmd",
        c::FIELDS,
        c::SIZE,
        24,
        &[
            ("dest_addr", c::DEST_ADDR, 4, 127, 0),
            ("pd", c::PD, 20, 15, 0),
        ],
    );
    check(
        "create_ah_resp",
        r::FIELDS,
        r::SIZE,
        16,
        &[("ah", r::AH, 8, 15, 0)],
    );
    check(
        "destroy_ah_cmd",
        d::FIELDS,
        d::SIZE,
        8,
        &[("ah", d::AH, 4, 15, 0), ("pd", d::PD, 6, 15, 0)],
    );
    use cmds::{dereg_mr_cmd as dm, reg_mr_cmd as m, reg_mr_resp as mr};
    check(
        "reg_mr_cmd",
        m::FIELDS,
        m::SIZE,
        64,
        &[
            ("pd", m::PD, 4, 15, 0),
            ("pbl", m::PBL, 8, 255, 0),
            ("pbl_length", m::PBL_LENGTH, 8, 31, 0),
            ("pbl_addr_lo", m::PBL_ADDR_LO, 12, 31, 0),
            ("pbl_addr_hi", m::PBL_ADDR_HI, 16, 31, 0),
            ("mr_length", m::MR_LENGTH, 40, 63, 0),
            ("phys_page_size_shift", m::PHYS_PAGE_SIZE_SHIFT, 48, 4, 0),
            ("mem_addr_phy_mode_en", m::MEM_ADDR_PHY_MODE_EN, 48, 7, 7),
            ("local_write", m::LOCAL_WRITE, 49, 0, 0),
            ("remote_write", m::REMOTE_WRITE, 49, 1, 1),
            ("remote_read", m::REMOTE_READ, 49, 2, 2),
            ("page_num", m::PAGE_NUM, 52, 31, 0),
            ("iova", m::IOVA, 56, 63, 0),
        ],
    );
    assert_eq!(m::INLINE_PBL_ENTRIES, 4);
    // The page-list control buffer lives in the union at 8 (Linux `mr_cmd.pbl.pbl`).
    assert_eq!(m::PBL_CTRL_OFF, 8);
    check(
        "reg_mr_resp",
        mr::FIELDS,
        mr::SIZE,
        24,
        &[
            ("l_key", mr::L_KEY, 8, 31, 0),
            ("r_key", mr::R_KEY, 12, 31, 0),
            ("validity", mr::VALIDITY, 16, 7, 0),
            ("recv_ic_id", mr::RECV_IC_ID, 17, 7, 0),
            ("rdma_read_ic_id", mr::RDMA_READ_IC_ID, 18, 7, 0),
            ("rdma_recv_ic_id", mr::RDMA_RECV_IC_ID, 19, 7, 0),
        ],
    );
    check(
        "dereg_mr_cmd",
        dm::FIELDS,
        dm::SIZE,
        8,
        &[("l_key", dm::L_KEY, 4, 31, 0)],
    );
    use cmds::{alloc_mr_cmd as ac, alloc_mr_resp as ar};
    check(
        "alloc_mr_cmd",
        ac::FIELDS,
        ac::SIZE,
        12,
        &[
            ("pd", ac::PD, 4, 15, 0),
            ("max_pages", ac::MAX_PAGES, 8, 31, 0),
        ],
    );
    check(
        "alloc_mr_resp",
        ar::FIELDS,
        ar::SIZE,
        16,
        &[
            ("l_key", ar::L_KEY, 8, 31, 0),
            ("r_key", ar::R_KEY, 12, 31, 0),
        ],
    );
}

#[test]
fn cq_eq_pd_uar_commands() {
    use cmds::{create_cq_cmd as c, create_cq_resp as r, destroy_cq_cmd as d};
    check(
        "create_cq_cmd",
        c::FIELDS,
        c::SIZE,
        28,
        &[
            ("interrupt_mode_enabled", c::INTERRUPT_MODE_ENABLED, 4, 5, 5),
            ("virt", c::VIRT, 4, 6, 6),
            ("cq_entry_size_words", c::CQ_ENTRY_SIZE_WORDS, 5, 4, 0),
            ("set_src_addr", c::SET_SRC_ADDR, 5, 5, 5),
            ("cq_depth", c::CQ_DEPTH, 6, 15, 0),
            ("eqn", c::EQN, 8, 15, 0),
            ("cq_ba_lo", c::CQ_BA_LO, 12, 31, 0),
            ("cq_ba_hi", c::CQ_BA_HI, 16, 31, 0),
            ("l_key", c::L_KEY, 20, 31, 0),
            ("num_sub_cqs", c::NUM_SUB_CQS, 24, 15, 0),
            ("uar", c::UAR, 26, 15, 0),
        ],
    );
    check(
        "create_cq_resp",
        r::FIELDS,
        r::SIZE,
        20,
        &[
            ("cq_idx", r::CQ_IDX, 8, 15, 0),
            ("cq_actual_depth", r::CQ_ACTUAL_DEPTH, 10, 15, 0),
            ("db_offset", r::DB_OFFSET, 12, 31, 0),
            ("db_valid", r::DB_VALID, 16, 0, 0),
        ],
    );
    check(
        "destroy_cq_cmd",
        d::FIELDS,
        d::SIZE,
        8,
        &[("cq_idx", d::CQ_IDX, 4, 15, 0)],
    );
    use cmds::{create_eq_cmd as e, create_eq_resp as er, destroy_eq_cmd as ed};
    check(
        "create_eq_cmd",
        e::FIELDS,
        e::SIZE,
        24,
        &[
            ("depth", e::DEPTH, 4, 15, 0),
            ("msix_vec", e::MSIX_VEC, 6, 7, 0),
            ("entry_size_words", e::ENTRY_SIZE_WORDS, 7, 4, 0),
            ("ba_lo", e::BA_LO, 8, 31, 0),
            ("ba_hi", e::BA_HI, 12, 31, 0),
            ("event_bitmask", e::EVENT_BITMASK, 16, 31, 0),
        ],
    );
    assert_eq!(e::EVENT_COMPLETION, 1);
    check(
        "create_eq_resp",
        er::FIELDS,
        er::SIZE,
        12,
        &[("eqn", er::EQN, 8, 15, 0)],
    );
    check(
        "destroy_eq_cmd",
        ed::FIELDS,
        ed::SIZE,
        8,
        &[("eqn", ed::EQN, 4, 15, 0)],
    );
    use cmds::dealloc_uar_cmd as du;
    use cmds::{alloc_pd_resp as ap, alloc_uar_resp as au, dealloc_pd_cmd as dp};
    check(
        "alloc_pd_resp",
        ap::FIELDS,
        ap::SIZE,
        12,
        &[("pd", ap::PD, 8, 15, 0)],
    );
    check(
        "dealloc_pd_cmd",
        dp::FIELDS,
        dp::SIZE,
        8,
        &[("pd", dp::PD, 4, 15, 0)],
    );
    check(
        "alloc_uar_resp",
        au::FIELDS,
        au::SIZE,
        12,
        &[("uar", au::UAR, 8, 15, 0)],
    );
    check(
        "dealloc_uar_cmd",
        du::FIELDS,
        du::SIZE,
        8,
        &[("uar", du::UAR, 4, 15, 0)],
    );
}

#[test]
fn feature_and_stats_commands() {
    use cmds::{feature_cmd as f, get_feature_resp as r};
    check(
        "feature_cmd",
        f::FIELDS,
        f::SIZE,
        64,
        &[
            ("control_buffer", f::CONTROL_BUFFER, 4, 95, 0),
            ("feature_id", f::FEATURE_ID, 17, 7, 0),
            ("data", f::DATA, 20, 351, 0),
        ],
    );
    assert_eq!((f::DATA_OFF, r::DATA_OFF), (20, 8));
    check(
        "get_feature_resp",
        r::FIELDS,
        r::SIZE,
        64,
        &[("data", r::DATA, 8, 447, 0)],
    );
    // SET AENQ_CONFIG: supported_groups @20, enabled_groups @24 of the entry.
    assert_eq!(
        feature::aenq_config::SUPPORTED_GROUPS
            .at(f::DATA_OFF)
            .byte_off(),
        20
    );
    assert_eq!(
        feature::aenq_config::ENABLED_GROUPS
            .at(f::DATA_OFF)
            .byte_off(),
        24
    );
    use cmds::{get_stats_cmd as s, get_stats_resp as sr};
    check(
        "get_stats_cmd",
        s::FIELDS,
        s::SIZE,
        20,
        &[
            ("type", s::TYPE, 16, 7, 0),
            ("scope", s::SCOPE, 17, 7, 0),
            ("scope_modifier", s::SCOPE_MODIFIER, 18, 15, 0),
        ],
    );
    assert_eq!(
        [
            s::TYPE_BASIC,
            s::TYPE_MESSAGES,
            s::TYPE_RDMA_READ,
            s::TYPE_RDMA_WRITE,
            s::TYPE_NETWORK
        ],
        [0, 1, 2, 3, 4]
    );
    assert_eq!((s::SCOPE_ALL, s::SCOPE_QUEUE), (0, 1));
    check(
        "get_stats_resp",
        sr::FIELDS,
        sr::SIZE,
        64,
        &[("counter_0", sr::COUNTER_0, 8, 63, 0)],
    );
    assert_eq!(sr::counter(5).byte_off(), 48);
    assert!(sr::counter(sr::MAX_COUNTERS - 1).end() <= 64);
}

#[test]
fn feature_blocks() {
    use feature::id;
    assert_eq!(
        [
            id::DEVICE_ATTR,
            id::AENQ_CONFIG,
            id::NETWORK_ATTR,
            id::QUEUE_ATTR,
            id::HW_HINTS,
            id::HOST_INFO,
            id::EVENT_QUEUE_ATTR
        ],
        [1, 2, 3, 4, 5, 6, 7]
    );
    assert!(feature::supported(0, id::DEVICE_ATTR));
    assert!(!feature::supported(1 << 5, id::HOST_INFO));
    assert!(feature::supported(1 << 6, id::HOST_INFO));
    use feature::device_attr as d;
    check(
        "device_attr",
        d::FIELDS,
        d::SIZE,
        56,
        &[
            ("supported_features", d::SUPPORTED_FEATURES, 0, 63, 0),
            ("page_size_cap", d::PAGE_SIZE_CAP, 8, 63, 0),
            ("fw_version", d::FW_VERSION, 16, 31, 0),
            ("admin_api_version", d::ADMIN_API_VERSION, 20, 31, 0),
            ("device_version", d::DEVICE_VERSION, 24, 31, 0),
            ("db_bar", d::DB_BAR, 28, 15, 0),
            ("phys_addr_width", d::PHYS_ADDR_WIDTH, 30, 7, 0),
            ("virt_addr_width", d::VIRT_ADDR_WIDTH, 31, 7, 0),
            ("device_caps", d::DEVICE_CAPS, 32, 31, 0),
            ("max_rdma_size", d::MAX_RDMA_SIZE, 36, 31, 0),
            ("guid", d::GUID, 40, 63, 0),
            ("max_link_speed_gbps", d::MAX_LINK_SPEED_GBPS, 48, 15, 0),
        ],
    );
    assert_eq!(
        [
            d::CAP_RDMA_READ,
            d::CAP_RNR_RETRY,
            d::CAP_DATA_POLLING_128,
            d::CAP_RDMA_WRITE,
            d::CAP_UNSOLICITED_WRITE_RECV
        ],
        [1, 2, 4, 8, 16]
    );
    use feature::queue_attr as q;
    check(
        "queue_attr",
        q::FIELDS,
        q::SIZE,
        56,
        &[
            ("max_qp", q::MAX_QP, 0, 31, 0),
            ("max_sq_depth", q::MAX_SQ_DEPTH, 4, 31, 0),
            ("inline_buf_size", q::INLINE_BUF_SIZE, 8, 31, 0),
            ("max_rq_depth", q::MAX_RQ_DEPTH, 12, 31, 0),
            ("max_cq", q::MAX_CQ, 16, 31, 0),
            ("max_cq_depth", q::MAX_CQ_DEPTH, 20, 31, 0),
            ("sub_cqs_per_cq", q::SUB_CQS_PER_CQ, 24, 15, 0),
            ("min_sq_depth", q::MIN_SQ_DEPTH, 26, 15, 0),
            ("max_wr_send_sges", q::MAX_WR_SEND_SGES, 28, 15, 0),
            ("max_wr_recv_sges", q::MAX_WR_RECV_SGES, 30, 15, 0),
            ("max_mr", q::MAX_MR, 32, 31, 0),
            ("max_mr_pages", q::MAX_MR_PAGES, 36, 31, 0),
            ("max_pd", q::MAX_PD, 40, 31, 0),
            ("max_ah", q::MAX_AH, 44, 31, 0),
            ("max_llq_size", q::MAX_LLQ_SIZE, 48, 31, 0),
            ("max_wr_rdma_sges", q::MAX_WR_RDMA_SGES, 52, 15, 0),
            ("max_tx_batch", q::MAX_TX_BATCH, 54, 15, 0),
        ],
    );
    use feature::network_attr as n;
    check(
        "network_attr",
        n::FIELDS,
        n::SIZE,
        20,
        &[("addr", n::ADDR, 0, 127, 0), ("mtu", n::MTU, 16, 31, 0)],
    );
    use feature::aenq_config as a;
    check(
        "aenq_config",
        a::FIELDS,
        a::SIZE,
        8,
        &[
            ("supported_groups", a::SUPPORTED_GROUPS, 0, 31, 0),
            ("enabled_groups", a::ENABLED_GROUPS, 4, 31, 0),
        ],
    );
    use feature::event_queue_attr as e;
    check(
        "event_queue_attr",
        e::FIELDS,
        e::SIZE,
        12,
        &[
            ("max_eq", e::MAX_EQ, 0, 31, 0),
            ("max_eq_depth", e::MAX_EQ_DEPTH, 4, 31, 0),
            ("event_bitmask", e::EVENT_BITMASK, 8, 31, 0),
        ],
    );
    use feature::hw_hints as h;
    check(
        "hw_hints",
        h::FIELDS,
        h::SIZE,
        8,
        &[
            ("mmio_read_timeout", h::MMIO_READ_TIMEOUT, 0, 15, 0),
            (
                "driver_watchdog_timeout",
                h::DRIVER_WATCHDOG_TIMEOUT,
                2,
                15,
                0,
            ),
            (
                "admin_completion_timeout",
                h::ADMIN_COMPLETION_TIMEOUT,
                4,
                15,
                0,
            ),
            ("poll_interval", h::POLL_INTERVAL, 6, 15, 0),
        ],
    );
    use feature::host_info as i;
    check(
        "host_info",
        i::FIELDS,
        i::SIZE,
        180,
        &[
            ("os_dist_str", i::OS_DIST_STR, 0, 1023, 0),
            ("os_type", i::OS_TYPE, 128, 31, 0),
            ("kernel_ver_str", i::KERNEL_VER_STR, 132, 255, 0),
            ("kernel_ver", i::KERNEL_VER, 164, 31, 0),
            (
                "driver_ver_module_type",
                i::DRIVER_VER_MODULE_TYPE,
                168,
                7,
                0,
            ),
            ("driver_ver_sub_minor", i::DRIVER_VER_SUB_MINOR, 168, 15, 8),
            ("driver_ver_minor", i::DRIVER_VER_MINOR, 168, 23, 16),
            ("driver_ver_major", i::DRIVER_VER_MAJOR, 168, 31, 24),
            ("bdf_function", i::BDF_FUNCTION, 172, 2, 0),
            ("bdf_device", i::BDF_DEVICE, 172, 7, 3),
            ("bdf_bus", i::BDF_BUS, 172, 15, 8),
            ("spec_ver_minor", i::SPEC_VER_MINOR, 174, 7, 0),
            ("spec_ver_major", i::SPEC_VER_MAJOR, 174, 15, 8),
            ("flags_intree", i::FLAGS_INTREE, 176, 0, 0),
            ("flags_gdr", i::FLAGS_GDR, 176, 1, 1),
        ],
    );
    // Every GET_FEATURE block fits the 56-byte response area, every SET block the 44 bytes.
    for size in [d::SIZE, q::SIZE, n::SIZE, a::SIZE, e::SIZE, h::SIZE] {
        assert!(size <= 56);
    }
    const { assert!(a::SIZE <= 44) };
}

#[test]
fn tx_descriptors() {
    // docs/efa.md#tx-wqe
    assert_eq!(size_of::<io::TxMetaDesc>(), 32);
    offsets!(io::TxMetaDesc {
        req_id: 0,
        ctrl1: 2,
        ctrl2: 3,
        dest_qp_num: 4,
        length: 6,
        immediate_data: 8,
        ah: 12,
        ctrl3: 14,
        rsvd0: 15,
        qkey: 16,
        rsvd1: 20,
        req_id_ex: 26
    });
    assert_eq!(
        (
            io::CTRL1_OP_TYPE_MASK,
            io::CTRL1_HAS_IMM,
            io::CTRL1_INLINE_MSG,
            io::CTRL1_META_EXTENSION,
            io::CTRL1_META_DESC
        ),
        (0x0f, 0x10, 0x20, 0x40, 0x80)
    );
    assert_eq!(
        (
            io::CTRL2_PHASE,
            io::CTRL2_FIRST,
            io::CTRL2_LAST,
            io::CTRL2_COMP_REQ
        ),
        (0x01, 0x04, 0x08, 0x10)
    );
    assert_eq!(io::CTRL3_HINTS_MASK, 0x3);
    assert_eq!(
        [
            io::op_type::SEND,
            io::op_type::RDMA_READ,
            io::op_type::RDMA_WRITE,
            io::op_type::FAST_REG,
            io::op_type::FAST_INV
        ],
        [0, 1, 2, 3, 4]
    );
    assert_eq!(size_of::<io::TxBufDesc>(), 16);
    offsets!(io::TxBufDesc {
        length: 0,
        lkey: 4,
        buf_addr_lo: 8,
        buf_addr_hi: 12
    });
    assert_eq!(size_of::<io::RemoteMemAddr>(), 16);
    offsets!(io::RemoteMemAddr {
        length: 0,
        rkey: 4,
        buf_addr_lo: 8,
        buf_addr_hi: 12
    });
    assert_eq!(size_of::<io::TxWqe>(), 64);
    offsets!(io::TxWqe { meta: 0, data: 32 });
    assert_eq!(size_of::<io::TxWqe128>(), 128);
    offsets!(io::TxWqe128 { meta: 0, data: 32 });
    assert_eq!(
        (io::TX_WQE_SIZE, io::TX_WQE128_SIZE, io::TX_DATA_OFF),
        (64, 128, 32)
    );
    assert_eq!((io::TX_INLINE_MAX, io::TX_INLINE_MAX_128), (32, 80));
    assert_eq!(io::LKEY_MASK, 0xff_ffff);
    // Byte image: req_id 0x0102, ctrl1 = meta_desc | SEND, qkey 0x11223344.
    let mut m = io::TxMetaDesc::default();
    m.req_id.set(0x0102);
    m.ctrl1 = io::CTRL1_META_DESC;
    m.qkey.set(0x1122_3344);
    let b = m.to_bytes();
    assert_eq!(&b[0..3], &[0x02, 0x01, 0x80]);
    assert_eq!(&b[16..20], &[0x44, 0x33, 0x22, 0x11]);
}

#[test]
fn rx_and_completions() {
    // docs/efa.md#rx-descriptor and #completions
    assert_eq!(size_of::<io::RxDesc>(), 16);
    offsets!(io::RxDesc {
        buf_addr_lo: 0,
        buf_addr_hi: 4,
        req_id: 8,
        length: 10,
        lkey_ctrl: 12
    });
    assert_eq!((io::RX_FIRST, io::RX_LAST), (1 << 30, 1 << 31));
    assert_eq!(size_of::<io::TxCqe>(), 16);
    offsets!(io::TxCqe {
        req_id: 0,
        status: 2,
        flags: 3,
        qp_num: 4,
        req_id_ex: 6,
        rsvd: 12
    });
    assert_eq!(size_of::<io::RxCqe>(), 16);
    offsets!(io::RxCqe {
        req_id: 0,
        status: 2,
        flags: 3,
        qp_num: 4,
        length: 6,
        ah: 8,
        src_qp_num: 10,
        imm: 12
    });
    assert_eq!(size_of::<io::RxCqeEx>(), 32);
    offsets!(io::RxCqeEx { base: 0, u: 16 });
    assert_eq!(
        (
            io::CDESC_PHASE,
            io::CDESC_Q_TYPE_SHIFT,
            io::CDESC_HAS_IMM,
            io::CDESC_OP_TYPE_SHIFT,
            io::CDESC_UNSOLICITED
        ),
        (0x01, 1, 0x08, 4, 0x80)
    );
    assert_eq!((io::CDESC_Q_TYPE_MASK, io::CDESC_OP_TYPE_MASK), (3, 7));
    assert_eq!((io::Q_TYPE_SEND, io::Q_TYPE_RECV), (1, 2));
    assert_eq!(io::UNKNOWN_AH, 0xffff);
    use io::comp_status as s;
    let spec: &[(u8, u8)] = &[
        (s::OK, 0),
        (s::FLUSHED, 1),
        (s::LOCAL_ERROR_QP_INTERNAL_ERROR, 2),
        (s::LOCAL_ERROR_UNSUPPORTED_OP, 3),
        (s::LOCAL_ERROR_INVALID_AH, 4),
        (s::LOCAL_ERROR_INVALID_LKEY, 5),
        (s::LOCAL_ERROR_BAD_LENGTH, 6),
        (s::REMOTE_ERROR_BAD_ADDRESS, 7),
        (s::REMOTE_ERROR_ABORT, 8),
        (s::REMOTE_ERROR_BAD_DEST_QPN, 9),
        (s::REMOTE_ERROR_RNR, 10),
        (s::REMOTE_ERROR_BAD_LENGTH, 11),
        (s::REMOTE_ERROR_BAD_STATUS, 12),
        (s::LOCAL_ERROR_UNRESP_REMOTE, 13),
        (s::REMOTE_ERROR_UNKNOWN_PEER, 14),
        (s::LOCAL_ERROR_UNREACH_REMOTE, 15),
        (s::REMOTE_ERROR_FEATURE_MISMATCH, 18),
    ];
    for &(v, e) in spec {
        assert_eq!(v, e);
    }
    assert_eq!(s::ALL.len(), spec.len());
    assert_eq!(s::name(16), None);
    assert_eq!(s::name(17), None);
    assert_eq!(s::name(10), Some("REMOTE_ERROR_RNR"));
}

#[test]
fn pci_identity() {
    assert_eq!(pci::VENDOR_AMAZON, 0x1d0f);
    for d in [0xefa0, 0xefa1, 0xefa2, 0xefa3, 0xefa4] {
        assert!(pci::is_efa(0x1d0f, d), "{d:#x}");
    }
    assert!(!pci::is_efa(0x15b3, 0xefa0));
    assert!(!pci::is_efa(0x1d0f, 0xec20));
    assert_eq!((pci::REG_BAR, pci::MEM_BAR), (0, 2));
    assert_eq!((pci::MGMNT_MSIX_VEC, pci::COMP_EQS_VEC_BASE), (0, 1));
}
