//! `#[repr(C)]` struct sizes and field offsets, and constant values, against the reference
//! values (`docs/mlx5.md`).

use core::mem::size_of;
use firmware_interface::{
    Field,
    cmd::{self, CmdLayout, MailboxBlock},
    cmd_status, cqe,
    cqe::{Cqe64, ErrCqe},
    ctx, dbr, delivery_status, eqe,
    eqe::Eqe,
    init_seg, mbox_in, mbox_out, op_mod, opcode, pci, uar, wqe,
    wqe::{AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineHdr, RaddrSeg},
};
use memoffset::offset_of;

macro_rules! offsets {
    ($t:ty { $($f:ident: $off:expr),* $(,)? }) => {
        $( assert_eq!(offset_of!($t, $f), $off, concat!(stringify!($t), ".", stringify!($f))); )*
    };
}

#[test]
fn cmd_layout() {
    // docs/mlx5.md#queue-entry
    assert_eq!(size_of::<CmdLayout>(), 64);
    offsets!(CmdLayout {
        type_: 0x00,
        rsvd0: 0x01,
        inlen: 0x04,
        in_ptr: 0x08,
        in_: 0x10,
        out: 0x20,
        out_ptr: 0x30,
        outlen: 0x38,
        token: 0x3c,
        sig: 0x3d,
        rsvd1: 0x3e,
        status_own: 0x3f,
    });
    assert_eq!(cmd::STATUS_OWN_OFFSET, 0x3f);
    assert_eq!(cmd::SIG_OFFSET, 0x3d);
    assert_eq!(CmdLayout::zeroed(), CmdLayout::default());
}

#[test]
fn mailbox_block() {
    // docs/mlx5.md#mailboxes
    assert_eq!(size_of::<MailboxBlock>(), 576);
    offsets!(MailboxBlock {
        data: 0x000,
        rsvd: 0x200,
        next: 0x230,
        block_num: 0x238,
        rsvd1: 0x23c,
        token: 0x23d,
        ctrl_sig: 0x23e,
        sig: 0x23f,
    });
    assert_eq!(
        (
            cmd::MAILBOX_NEXT_OFFSET,
            cmd::MAILBOX_BLOCK_NUM_OFFSET,
            cmd::MAILBOX_TOKEN_OFFSET
        ),
        (0x230, 0x238, 0x23d)
    );
    assert_eq!(
        (cmd::MAILBOX_CTRL_SIG_OFFSET, cmd::MAILBOX_SIG_OFFSET),
        (0x23e, 0x23f)
    );
    assert_eq!(cmd::MAILBOX_CTRL_SIG_RANGE, 0x200..0x23e);
    assert_eq!(cmd::MAILBOX_SIG_RANGE, 0x000..0x23f);
}

#[test]
fn cmd_constants() {
    assert_eq!(cmd::ENTRY_SIZE, 64);
    assert_eq!(cmd::MAILBOX_SIZE, 576);
    assert_eq!(cmd::MAILBOX_DATA, 512);
    assert_eq!(cmd::MAILBOX_ALIGN, 1024);
    assert_eq!(cmd::XPORT_TYPE_PCI, 7);
    assert_eq!(cmd::OWNER_HW, 1);
    assert_eq!(cmd::INLINE_LEN, 16);
    assert_eq!(cmd::MAX_ENTRIES, 32);
    // "Number of blocks = ceil((len − 16) / 512)".
    for (len, n) in [
        (0, 0),
        (16, 0),
        (17, 1),
        (528, 1),
        (529, 2),
        (4112, 8),
        (0x110, 1),
    ] {
        assert_eq!(cmd::mailbox_count(len), n, "len {len}");
    }
    // The common headers (docs/mlx5.md#headers-and-status).
    assert_eq!(mbox_in::HEADER_SIZE, 16);
    assert_eq!(mbox_out::HEADER_SIZE, 16);
    assert_eq!(mbox_in::OPCODE.dword_bits(), Some((0x0, 31, 16)));
    assert_eq!(mbox_in::UID.dword_bits(), Some((0x0, 15, 0)));
    assert_eq!(mbox_in::UID.byte_off(), 0x2);
    assert_eq!(mbox_in::OP_MOD.dword_bits(), Some((0x4, 15, 0)));
    assert_eq!(mbox_in::OP_MOD.byte_off(), 0x6);
    assert_eq!(mbox_out::STATUS.dword_bits(), Some((0x0, 31, 24)));
    assert_eq!(mbox_out::SYNDROME, Field::bytes(0x4, 4));
}

#[test]
fn status_values() {
    // docs/mlx5.md#headers-and-status
    let s = [
        (cmd_status::OK, 0x00),
        (cmd_status::INTERNAL_ERR, 0x01),
        (cmd_status::BAD_OP, 0x02),
        (cmd_status::BAD_PARAM, 0x03),
        (cmd_status::BAD_SYS_STATE, 0x04),
        (cmd_status::BAD_RES, 0x05),
        (cmd_status::RES_BUSY, 0x06),
        (cmd_status::NOT_READY, 0x07),
        (cmd_status::LIM, 0x08),
        (cmd_status::BAD_RES_STATE, 0x09),
        (cmd_status::BAD_INDEX, 0x0a),
        (cmd_status::NO_RES, 0x0f),
        (cmd_status::BAD_QP_STATE, 0x10),
        (cmd_status::BAD_PKT, 0x30),
        (cmd_status::BAD_SIZE, 0x40),
        (cmd_status::BAD_INPUT_LEN, 0x50),
        (cmd_status::BAD_OUTPUT_LEN, 0x51),
    ];
    for (v, e) in s {
        assert_eq!(v, e);
        assert!(cmd_status::name(v).is_some());
    }
    assert_eq!(cmd_status::name(0x0b), None);
    // docs/mlx5.md#queue-entry
    let d = [
        (delivery_status::OK, 0x0),
        (delivery_status::SIGNATURE_ERR, 0x1),
        (delivery_status::TOKEN_ERR, 0x2),
        (delivery_status::BAD_BLOCK_NUMBER, 0x3),
        (delivery_status::OUT_PTR_ALIGN, 0x4),
        (delivery_status::IN_PTR_ALIGN, 0x5),
        (delivery_status::FW_ERR, 0x6),
        (delivery_status::IN_LENGTH_ERR, 0x7),
        (delivery_status::OUT_LENGTH_ERR, 0x8),
        (delivery_status::RES_FLD_NOT_CLR, 0x9),
        (delivery_status::CMD_DESCRIPTOR_TYPE_ERR, 0x10),
    ];
    for (v, e) in d {
        assert_eq!(v, e);
    }
    let mut e = CmdLayout::zeroed();
    e.status_own = (delivery_status::OUT_LENGTH_ERR << 1) | cmd::OWNER_HW;
    assert_eq!(e.delivery_status(), 8);
    assert!(e.hw_owned());
}

#[test]
fn op_mod_values() {
    // Query: general-current 0x0001, general-max 0x0000, roce-current 0x0009; set: general 0x0,
    // atomic 0x6, roce 0x8 (`docs/mlx5.md#operation-modifiers`).
    assert_eq!(
        op_mod::query_cap(op_mod::CAP_GENERAL, op_mod::QUERY_CAP_CUR),
        0x1
    );
    assert_eq!(
        op_mod::query_cap(op_mod::CAP_GENERAL, op_mod::QUERY_CAP_MAX),
        0x0
    );
    assert_eq!(
        op_mod::query_cap(op_mod::CAP_ROCE, op_mod::QUERY_CAP_CUR),
        0x9
    );
    assert_eq!(op_mod::set_cap(op_mod::CAP_GENERAL), 0x0);
    assert_eq!(op_mod::set_cap(op_mod::CAP_ATOMIC), 0x6);
    assert_eq!(op_mod::set_cap(op_mod::CAP_ROCE), 0x8);
    assert_eq!(
        (
            op_mod::PAGES_BOOT,
            op_mod::PAGES_INIT,
            op_mod::PAGES_REGULAR
        ),
        (1, 2, 3)
    );
    assert_eq!(
        (
            op_mod::MANAGE_PAGES_CANT_GIVE,
            op_mod::MANAGE_PAGES_GIVE,
            op_mod::MANAGE_PAGES_TAKE
        ),
        (0, 1, 2)
    );
    assert_eq!((op_mod::ACCESS_REG_WRITE, op_mod::ACCESS_REG_READ), (0, 1));
    assert_eq!(
        (
            op_mod::TEARDOWN_GRACEFUL,
            op_mod::TEARDOWN_FORCE,
            op_mod::TEARDOWN_PREPARE_FAST
        ),
        (0, 1, 2)
    );
    assert_eq!(op_mod::REG_HOST_ENDIANNESS, 0x7004);
}

#[test]
fn opcodes() {
    // Every opcode the crate names, with its `mlx5_ifc.h` value (docs/mlx5.md#opcodes).
    let spec: &[(u16, &str)] = &[
        (0x100, "QUERY_HCA_CAP"),
        (0x101, "QUERY_ADAPTER"),
        (0x102, "INIT_HCA"),
        (0x103, "TEARDOWN_HCA"),
        (0x104, "ENABLE_HCA"),
        (0x105, "DISABLE_HCA"),
        (0x107, "QUERY_PAGES"),
        (0x108, "MANAGE_PAGES"),
        (0x109, "SET_HCA_CAP"),
        (0x10a, "QUERY_ISSI"),
        (0x10b, "SET_ISSI"),
        (0x10d, "SET_DRIVER_VERSION"),
        (0x200, "CREATE_MKEY"),
        (0x201, "QUERY_MKEY"),
        (0x202, "DESTROY_MKEY"),
        (0x203, "QUERY_SPECIAL_CONTEXTS"),
        (0x301, "CREATE_EQ"),
        (0x302, "DESTROY_EQ"),
        (0x303, "QUERY_EQ"),
        (0x304, "GEN_EQE"),
        (0x400, "CREATE_CQ"),
        (0x401, "DESTROY_CQ"),
        (0x402, "QUERY_CQ"),
        (0x403, "MODIFY_CQ"),
        (0x500, "CREATE_QP"),
        (0x501, "DESTROY_QP"),
        (0x502, "RST2INIT_QP"),
        (0x503, "INIT2RTR_QP"),
        (0x504, "RTR2RTS_QP"),
        (0x505, "RTS2RTS_QP"),
        (0x506, "SQERR2RTS_QP"),
        (0x507, "QP_2ERR"),
        (0x50a, "QP_2RST"),
        (0x50b, "QUERY_QP"),
        (0x50c, "SQD_RTS_QP"),
        (0x50d, "MAD_IFC"),
        (0x50e, "INIT2INIT_QP"),
        (0x700, "CREATE_SRQ"),
        (0x701, "DESTROY_SRQ"),
        (0x750, "QUERY_VPORT_STATE"),
        (0x754, "QUERY_NIC_VPORT_CONTEXT"),
        (0x755, "MODIFY_NIC_VPORT_CONTEXT"),
        (0x760, "QUERY_ROCE_ADDRESS"),
        (0x761, "SET_ROCE_ADDRESS"),
        (0x762, "QUERY_HCA_VPORT_CONTEXT"),
        (0x763, "MODIFY_HCA_VPORT_CONTEXT"),
        (0x764, "QUERY_HCA_VPORT_GID"),
        (0x765, "QUERY_HCA_VPORT_PKEY"),
        (0x800, "ALLOC_PD"),
        (0x801, "DEALLOC_PD"),
        (0x802, "ALLOC_UAR"),
        (0x803, "DEALLOC_UAR"),
        (0x805, "ACCESS_REG"),
        (0x806, "ATTACH_TO_MCG"),
        (0x807, "DETACH_FROM_MCG"),
        (0x80d, "NOP"),
        (0x80e, "ALLOC_XRCD"),
        (0x80f, "DEALLOC_XRCD"),
        (0x816, "ALLOC_TRANSPORT_DOMAIN"),
        (0x817, "DEALLOC_TRANSPORT_DOMAIN"),
    ];
    assert_eq!(opcode::ALL, spec);
    for &(v, n) in spec {
        assert_eq!(opcode::name(v), Some(n));
    }
    assert_eq!(opcode::name(0x106), None);
    // A few by name, so a renamed constant fails to compile.
    assert_eq!(opcode::CREATE_CQ, 0x400);
    assert_eq!(opcode::QP_2ERR, 0x507);
    assert_eq!(opcode::QP_2RST, 0x50a);
    assert_eq!(opcode::NOP, 0x80d);
    assert_eq!(opcode::ACCESS_REG, 0x805);
}

#[test]
fn init_segment() {
    // docs/mlx5.md#initialization-segment
    let offs = [
        (init_seg::FW_REV, 0x0),
        (init_seg::CMDIF_REV_FW_SUB, 0x4),
        (init_seg::CMDQ_ADDR_H, 0x10),
        (init_seg::CMDQ_ADDR_L_SZ, 0x14),
        (init_seg::CMD_DBELL, 0x18),
        (init_seg::INITIALIZING, 0x1fc),
        (init_seg::HEALTH, 0x200),
        (init_seg::CMD_EXEC_TO, 0xff8),
        (init_seg::CMD_Q_INIT_TO, 0xffc),
        (init_seg::INTERNAL_TIMER_H, 0x1000),
        (init_seg::INTERNAL_TIMER_L, 0x1004),
        (init_seg::HEALTH_COUNTER, 0x1010),
        (init_seg::SIZE, 0x2010),
    ];
    for (v, e) in offs {
        assert_eq!(v, e);
    }
    assert_eq!(init_seg::INITIALIZING_BIT, 0x8000_0000);
    assert_eq!(init_seg::CMDIF_REV, 5);
    assert_eq!((init_seg::NIC_IF_SHIFT, init_seg::NIC_IF_MASK), (8, 7));
    assert_eq!(
        (
            init_seg::NIC_IF_FULL_DRIVER,
            init_seg::NIC_IF_DISABLED,
            init_seg::NIC_IF_NO_DRAM,
            init_seg::NIC_IF_SW_RESET
        ),
        (0, 1, 2, 7)
    );
    assert_eq!(
        (
            init_seg::LOG_CMDQ_SIZE_SHIFT,
            init_seg::LOG_CMDQ_SIZE_MASK,
            init_seg::LOG_CMDQ_STRIDE_MASK
        ),
        (4, 0xf, 0xf)
    );
    // docs/mlx5.md#health-buffer
    let h = [
        (init_seg::health::ASSERT_VAR, 0x0),
        (init_seg::health::ASSERT_EXIT_PTR, 0x20),
        (init_seg::health::ASSERT_CALLRA, 0x24),
        (init_seg::health::TIME, 0x2c),
        (init_seg::health::FW_VER, 0x30),
        (init_seg::health::HW_ID, 0x34),
        (init_seg::health::RFR_SEVERITY, 0x38),
        (init_seg::health::IRISC_INDEX, 0x3c),
        (init_seg::health::SYND, 0x3d),
        (init_seg::health::EXT_SYND, 0x3e),
        (init_seg::health::SIZE, 0x40),
    ];
    for (v, e) in h {
        assert_eq!(v, e);
    }
    use init_seg::health_synd as s;
    let syn = [
        (s::FW_INTERNAL_ERR, 0x1),
        (s::DEAD_IRISC, 0x7),
        (s::HW_FATAL_ERR, 0x8),
        (s::FW_CRC_ERR, 0x9),
        (s::ICM_FETCH_PCI_ERR, 0xa),
        (s::ICM_PAGE_ERR, 0xb),
        (s::ASYNCHRONOUS_EQ_BUF_OVERRUN, 0xc),
        (s::EQ_IN_ERR, 0xd),
        (s::EQ_INV, 0xe),
        (s::FFSER_ERR, 0xf),
        (s::HIGH_TEMP_ERR, 0x10),
        (s::ICM_PCI_POISONED_ERR, 0x12),
        (s::TRUST_LOCKDOWN_ERR, 0x13),
    ];
    for (v, e) in syn {
        assert_eq!(v, e);
    }
}

#[test]
fn uar_and_dbr() {
    // docs/mlx5.md#uar-pages-and-doorbells, docs/mlx5.md#doorbell-records
    assert_eq!(uar::PAGE_SIZE, 4096);
    assert_eq!(uar::CQ_DOORBELL, 0x20);
    assert_eq!(uar::EQ_DOORBELL_ARM, 0x40);
    assert_eq!(uar::EQ_DOORBELL_NOARM, 0x48);
    assert_eq!(uar::BF_OFFSET, 0x800);
    assert_eq!(uar::BFREGS_PER_UAR, 4);
    assert_eq!(uar::CQ_DB_REQ_NOT, 0);
    assert_eq!(uar::CQ_DB_REQ_NOT_SOL, 1 << 24);
    assert_eq!(uar::CQ_DB_SN_SHIFT, 28);
    assert_eq!(
        (dbr::QP_RCV, dbr::QP_SND, dbr::CQ_SET_CI, dbr::CQ_ARM),
        (0, 4, 0, 4)
    );
    assert_eq!(dbr::RECORD_SIZE, 64);
    const { assert!(dbr::RECORD_SIZE >= dbr::MIN_RECORD_SIZE) };
}

#[test]
fn wqe_segments() {
    // docs/mlx5.md#control-segment, docs/mlx5.md#other-segments
    assert_eq!(size_of::<CtrlSeg>(), 16);
    offsets!(CtrlSeg {
        opmod_idx_opcode: 0x0,
        qpn_ds: 0x4,
        signature: 0x8,
        rsvd: 0x9,
        fm_ce_se: 0xb,
        imm: 0xc
    });
    assert_eq!(size_of::<RaddrSeg>(), 16);
    offsets!(RaddrSeg {
        raddr: 0x0,
        rkey: 0x8,
        rsvd: 0xc
    });
    assert_eq!(size_of::<AtomicSeg>(), 16);
    offsets!(AtomicSeg {
        swap_add: 0x0,
        compare: 0x8
    });
    assert_eq!(size_of::<DataSeg>(), 16);
    offsets!(DataSeg {
        byte_count: 0x0,
        lkey: 0x4,
        addr: 0x8
    });
    assert_eq!(size_of::<InlineHdr>(), 4);
    offsets!(InlineHdr { byte_count: 0x0 });
    assert_eq!(size_of::<DatagramSeg>(), 48);
    offsets!(DatagramSeg {
        qkey: 0x00,
        rsvd0: 0x04,
        dqp_dct: 0x08,
        stat_rate_sl: 0x0c,
        fl_mlid: 0x0d,
        rlid: 0x0e,
        rsvd1: 0x10,
        rmac: 0x14,
        tclass: 0x1a,
        hop_limit: 0x1b,
        grh_gid_fl: 0x1c,
        rgid: 0x20,
    });
    assert_eq!(
        (
            wqe::SEND_WQE_BB,
            wqe::SEND_WQE_DS,
            wqe::MAX_WQEBBS,
            wqe::DS_MAX
        ),
        (64, 16, 16, 63)
    );
    assert_eq!(wqe::INLINE_SEG, 0x8000_0000);
    assert_eq!(wqe::INVALID_LKEY, 0x100);
    assert_eq!(wqe::EXTENDED_UD_AV, 0x8000_0000);
    assert_eq!(
        (
            wqe::FENCE_SMALL,
            wqe::FENCE,
            wqe::FENCE_STRONG,
            wqe::FENCE_SMALL_AND
        ),
        (0x20, 0x40, 0x60, 0x80)
    );
    assert_eq!(
        (wqe::CE_CQ_UPDATE, wqe::CE_CQ_AND_EQ, wqe::SOLICITED),
        (0x08, 0x0c, 0x02)
    );
    assert_eq!(
        (
            wqe::WQE_IDX_SHIFT,
            wqe::OPMOD_SHIFT,
            wqe::QPN_SHIFT,
            wqe::DS_MASK
        ),
        (8, 24, 8, 0x3f)
    );
    use wqe::opcode as o;
    let ops = [
        (o::NOP, 0x00),
        (o::SEND_INVAL, 0x01),
        (o::RDMA_WRITE, 0x08),
        (o::RDMA_WRITE_IMM, 0x09),
        (o::SEND, 0x0a),
        (o::SEND_IMM, 0x0b),
        (o::RDMA_READ, 0x10),
        (o::ATOMIC_CS, 0x11),
        (o::ATOMIC_FA, 0x12),
        (o::ATOMIC_MASKED_CS, 0x14),
        (o::ATOMIC_MASKED_FA, 0x15),
        (o::LOCAL_INVAL, 0x1b),
        (o::UMR, 0x25),
    ];
    for (v, e) in ops {
        assert_eq!(v, e);
    }
    // `docs/mlx5.md#posting`: opmod_idx_opcode = (opmod << 24) | ((cur_post & 0xffff) << 8) |
    // opcode.
    let c = CtrlSeg {
        opmod_idx_opcode: ((0x1234u32 << wqe::WQE_IDX_SHIFT) | o::SEND as u32).into_be(),
        qpn_ds: ((0xabcdu32 << wqe::QPN_SHIFT) | 3).into_be(),
        fm_ce_se: wqe::CE_CQ_UPDATE,
        ..Default::default()
    };
    assert_eq!(
        c.to_bytes()[..8],
        [0x00, 0x12, 0x34, 0x0a, 0x00, 0xab, 0xcd, 0x03]
    );
    assert_eq!(c.to_bytes()[0xb], 0x08);
}

/// Tiny helper: a host u32 as a big-endian field value.
trait IntoBe {
    fn into_be(self) -> firmware_interface::Be32;
}
impl IntoBe for u32 {
    fn into_be(self) -> firmware_interface::Be32 {
        firmware_interface::Be32::new(self)
    }
}

#[test]
fn cqes() {
    // docs/mlx5.md#cqe-layout
    assert_eq!(size_of::<Cqe64>(), 64);
    offsets!(Cqe64 {
        tls_outer_l3_tunneled: 0x00,
        wqe_id: 0x02,
        rss_hash_result: 0x0c,
        rss_hash_type: 0x10,
        ml_path: 0x11,
        check_sum: 0x14,
        slid: 0x16,
        flags_rqpn: 0x18,
        hds_ip_ext: 0x1c,
        l4_l3_hdr_type: 0x1d,
        vlan_info: 0x1e,
        srqn_uidx: 0x20,
        imm_inval_pkey: 0x24,
        app: 0x28,
        app_op: 0x29,
        app_info: 0x2a,
        byte_cnt: 0x2c,
        timestamp: 0x30,
        sop_drop_qpn: 0x38,
        wqe_counter: 0x3c,
        signature: 0x3e,
        op_own: 0x3f,
    });
    // docs/mlx5.md#error-cqe
    assert_eq!(size_of::<ErrCqe>(), 64);
    offsets!(ErrCqe {
        srqn: 0x20,
        byte_cnt: 0x2c,
        hw_err_synd: 0x34,
        hw_synd_type: 0x35,
        vendor_err_synd: 0x36,
        syndrome: 0x37,
        s_wqe_opcode_qpn: 0x38,
        wqe_counter: 0x3c,
        signature: 0x3e,
        op_own: 0x3f,
    });
    use cqe::opcode as o;
    let ops = [
        (o::REQ, 0),
        (o::RESP_WR_IMM, 1),
        (o::RESP_SEND, 2),
        (o::RESP_SEND_IMM, 3),
        (o::RESP_SEND_INV, 4),
        (o::RESIZE_CQ, 5),
        (o::SIG_ERR, 12),
        (o::REQ_ERR, 13),
        (o::RESP_ERR, 14),
        (o::INVALID, 15),
    ];
    for (v, e) in ops {
        assert_eq!(v, e);
    }
    use cqe::syndrome as s;
    let syn = [
        (s::LOCAL_LENGTH_ERR, 0x01),
        (s::LOCAL_QP_OP_ERR, 0x02),
        (s::LOCAL_PROT_ERR, 0x04),
        (s::WR_FLUSH_ERR, 0x05),
        (s::MW_BIND_ERR, 0x06),
        (s::BAD_RESP_ERR, 0x10),
        (s::LOCAL_ACCESS_ERR, 0x11),
        (s::REMOTE_INVAL_REQ_ERR, 0x12),
        (s::REMOTE_ACCESS_ERR, 0x13),
        (s::REMOTE_OP_ERR, 0x14),
        (s::TRANSPORT_RETRY_EXC_ERR, 0x15),
        (s::RNR_RETRY_EXC_ERR, 0x16),
        (s::REMOTE_ABORTED_ERR, 0x22),
    ];
    for (v, e) in syn {
        assert_eq!(v, e);
    }
    assert_eq!(
        (
            cqe::OWNER_MASK,
            cqe::OP_OWN_INIT,
            cqe::OPCODE_SHIFT,
            cqe::SIZE
        ),
        (1, 0xf0, 4, 64)
    );
    assert_eq!(cqe::opcode_of(cqe::OP_OWN_INIT), o::INVALID);
    assert_eq!(
        (
            cqe::FORMAT_INLINE_SCATTER_32,
            cqe::FORMAT_INLINE_SCATTER_64,
            cqe::FORMAT_COMPRESSED
        ),
        (0x04, 0x08, 0x0c)
    );
    assert_eq!(
        (
            cqe::L3_HDR_TYPE_GRH,
            cqe::L3_HDR_TYPE_IPV6,
            cqe::L3_HDR_TYPE_IPV4
        ),
        (0, 1, 2)
    );
}

#[test]
fn eqes() {
    // docs/mlx5.md#eqe-layout
    assert_eq!(size_of::<Eqe>(), 64);
    offsets!(Eqe {
        rsvd0: 0x00,
        type_: 0x01,
        rsvd1: 0x02,
        sub_type: 0x03,
        rsvd2: 0x04,
        data: 0x20,
        rsvd3: 0x3c,
        signature: 0x3e,
        owner: 0x3f,
    });
    assert_eq!((eqe::OWNER_INIT, eqe::SIZE), (1, 64));
    let offs = [
        (eqe::COMP_CQN, 0x38),
        (eqe::CMD_VECTOR, 0x20),
        (eqe::PAGE_REQ_EC_FUNCTION, 0x20),
        (eqe::PAGE_REQ_FUNC_ID, 0x22),
        (eqe::PAGE_REQ_NUM_PAGES, 0x24),
        (eqe::CQ_ERR_CQN, 0x20),
        (eqe::CQ_ERR_SYNDROME, 0x2b),
        (eqe::QP_EVENT_TYPE, 0x34),
        (eqe::QP_EVENT_QPN, 0x38),
        (eqe::PORT_CHANGE_PORT, 0x28),
    ];
    for (v, e) in offs {
        assert_eq!(v, e);
    }
    assert_eq!(
        (
            eqe::PORT_DOWN,
            eqe::PORT_ACTIVE,
            eqe::PORT_INITIALIZED,
            eqe::PORT_LID
        ),
        (1, 4, 5, 6)
    );
    assert_eq!(
        (eqe::PORT_PKEY, eqe::PORT_GUID, eqe::PORT_CLIENT_REREG),
        (7, 8, 9)
    );
    use eqe::event as e;
    let ev = [
        (e::COMP, 0x00),
        (e::PATH_MIG, 0x01),
        (e::COMM_EST, 0x02),
        (e::SQ_DRAINED, 0x03),
        (e::CQ_ERROR, 0x04),
        (e::WQ_CATAS_ERROR, 0x05),
        (e::PATH_MIG_FAILED, 0x07),
        (e::INTERNAL_ERROR, 0x08),
        (e::PORT_CHANGE, 0x09),
        (e::CMD, 0x0a),
        (e::PAGE_REQUEST, 0x0b),
        (e::PAGE_FAULT, 0x0c),
        (e::NIC_VPORT_CHANGE, 0x0d),
        (e::ESW_FUNCTIONS_CHANGED, 0x0e),
        (e::VHCA_STATE_CHANGE, 0x0f),
        (e::WQ_INVAL_REQ_ERROR, 0x10),
        (e::WQ_ACCESS_ERROR, 0x11),
        (e::SRQ_CATAS_ERROR, 0x12),
        (e::SRQ_LAST_WQE, 0x13),
        (e::SRQ_RQ_LIMIT, 0x14),
        (e::GPIO, 0x15),
        (e::PORT_MODULE, 0x16),
        (e::TEMP_WARN, 0x17),
        (e::XRQ_ERROR, 0x18),
        (e::REMOTE_CONFIG, 0x19),
        (e::DB_BF_CONGESTION, 0x1a),
        (e::STALL, 0x1b),
        (e::DCT_DRAINED, 0x1c),
        (e::DCT_KEY_VIOLATION, 0x1d),
        (e::FPGA_ERROR, 0x20),
        (e::FPGA_QP_ERROR, 0x21),
        (e::GENERAL_EVENT, 0x22),
        (e::MONITOR_COUNTER, 0x24),
        (e::PPS, 0x25),
        (e::DEVICE_TRACER, 0x26),
        (e::OBJECT_CHANGE, 0x27),
    ];
    for (v, x) in ev {
        assert_eq!(v, x);
    }
    assert_eq!(e::mask(e::CMD), 1 << 0x0a);
}

#[test]
fn context_encodings() {
    use ctx::{cmd_hca_cap, cqc, eqc, mkc, qpc};
    // docs/mlx5.md#qp-context
    assert_eq!(
        (
            qpc::ST_RC,
            qpc::ST_UC,
            qpc::ST_UD,
            qpc::ST_XRC,
            qpc::ST_QP0,
            qpc::ST_QP1
        ),
        (0, 1, 2, 3, 7, 8)
    );
    assert_eq!(
        [
            qpc::STATE_RST,
            qpc::STATE_INIT,
            qpc::STATE_RTR,
            qpc::STATE_RTS,
            qpc::STATE_SQER,
            qpc::STATE_SQD,
            qpc::STATE_ERR
        ],
        [0, 1, 2, 3, 4, 5, 6]
    );
    assert_eq!(qpc::PM_STATE_MIGRATED, 3);
    assert_eq!(
        (qpc::RQ_TYPE_REGULAR, qpc::RQ_TYPE_SRQ, qpc::RQ_TYPE_ZERO),
        (0, 1, 3)
    );
    assert_eq!(
        [
            qpc::MTU_256,
            qpc::MTU_512,
            qpc::MTU_1024,
            qpc::MTU_2048,
            qpc::MTU_4096
        ],
        [1, 2, 3, 4, 5]
    );
    assert_eq!((qpc::ATOMIC_MODE_IB, qpc::ATOMIC_MODE_8B), (1, 3));
    use qpc::optpar as p;
    let bits = [
        (p::ALT_ADDR_PATH, 0),
        (p::RRE, 1),
        (p::RAE, 2),
        (p::RWE, 3),
        (p::PKEY_INDEX, 4),
        (p::Q_KEY, 5),
        (p::RNR_TIMEOUT, 6),
        (p::PRIMARY_ADDR_PATH, 7),
        (p::SRA_MAX, 8),
        (p::RRA_MAX, 9),
        (p::PM_STATE, 10),
        (p::RETRY_COUNT, 12),
        (p::RNR_RETRY, 13),
        (p::ACK_TIMEOUT, 14),
        (p::LAG_TX_AFF, 15),
        (p::PRI_PORT, 16),
        (p::PRIMARY_ADDR_PATH_DSCP, 17),
        (p::RMPN_XRQN, 18),
        (p::CQN_RCV, 19),
        (p::DC_HS, 20),
        (p::DC_KEY, 21),
        (p::OFFLOAD_TYPE, 24),
        (p::COUNTER_SET_ID, 25),
    ];
    for (v, b) in bits {
        assert_eq!(v, 1 << b);
    }
    assert_eq!((cqc::CQE_SZ_64, cqc::CQE_SZ_128), (0, 1));
    assert_eq!(
        (
            mkc::ACCESS_MODE_PA,
            mkc::ACCESS_MODE_MTT,
            mkc::ACCESS_MODE_KLM
        ),
        (0, 1, 2)
    );
    assert_eq!((eqc::ARMED, eqc::FIRED, eqc::ALWAYS_ARMED), (0x9, 0xa, 0xb));
    assert_eq!((cqc::ARMED, cqc::FIRED, cqc::ALWAYS_ARMED), (0x9, 0xa, 0xb));
    assert_eq!(
        (cmd_hca_cap::PORT_TYPE_IB, cmd_hca_cap::PORT_TYPE_ETH),
        (0, 1)
    );
    assert_eq!(ctx::CAP_BLOCK_SIZE, 4096);
    // The access bits all live in byte 0x2: bit 7 umr_en, bit 6 a, bit 5 rw, bit 4 rr, bit 3 lw,
    // bit 2 lr, bits 1:0 the access mode (`docs/mlx5.md#mkey-context`).
    let mut b = [0u8; 64];
    for (f, bit) in [
        (mkc::UMR_EN, 7),
        (mkc::A, 6),
        (mkc::RW, 5),
        (mkc::RR, 4),
        (mkc::LW, 3),
        (mkc::LR, 2),
    ] {
        b.fill(0);
        f.set(&mut b, 1);
        assert_eq!(b[2], 1 << bit);
    }
}

#[test]
fn pci_ids() {
    // docs/mlx5.md#pci-identification, every row.
    let spec: &[(u16, bool)] = &[
        (0x1011, false),
        (0x1012, true),
        (0x1013, false),
        (0x1014, true),
        (0x1015, false),
        (0x1016, true),
        (0x1017, false),
        (0x1018, true),
        (0x1019, false),
        (0x101a, true),
        (0x101b, false),
        (0x101c, true),
        (0x101d, false),
        (0x101e, true),
        (0x101f, false),
        (0x1021, false),
        (0x1023, false),
        (0x1025, false),
        (0x1027, false),
        (0x2101, false),
        (0xa2d2, false),
        (0xa2d3, true),
        (0xa2d6, false),
        (0xa2dc, false),
        (0xa2df, false),
    ];
    assert_eq!(pci::CONNECTX_IDS.len(), spec.len());
    for (d, &(id, vf)) in pci::CONNECTX_IDS.iter().zip(spec) {
        assert_eq!((d.device, d.vf), (id, vf), "{}", d.name);
        assert!(pci::is_connectx(0x15b3, id));
        assert!(!pci::is_connectx(0x8086, id));
    }
    assert_eq!(pci::VENDOR_MELLANOX, 0x15b3);
    assert!(!pci::is_connectx(0x15b3, 0x1020));
    // QEMU's ivshmem-plain (behind which the test harnesses put the emulated NIC) is not a
    // ConnectX function: the harnesses name it themselves.
    assert!(!pci::is_connectx(0x1af4, 0x1110));
}
