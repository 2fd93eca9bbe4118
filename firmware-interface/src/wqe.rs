//! Work queue entries (`docs/mlx5.md#work-queue-entries`): send WQE segments and geometry.

use crate::field::{Be16, Be32, Be64};

/// Send WQE basic block size (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// Send WQE data unit size (`MLX5_SEND_WQE_DS`).
pub const SEND_WQE_DS: usize = 16;
/// Maximum WQEBBs per WQE (`MLX5_SEND_WQE_MAX_WQEBBS`).
pub const MAX_WQEBBS: usize = 16;
/// Maximum `ds` value (6-bit field, `MLX5_DSEG_MAX`).
pub const DS_MAX: usize = 63;
/// Inline segment header flag (`MLX5_INLINE_SEG`), ORed into `byte_count`.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Terminating lkey of a receive scatter list (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// `dqp_dct` bit 31: full 48-byte address vector (`MLX5_EXTENDED_UD_AV`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// `fm_ce_se` fence: initiator small fence.
pub const FENCE_SMALL: u8 = 0x20;
/// `fm_ce_se` fence: fence.
pub const FENCE: u8 = 0x40;
/// `fm_ce_se` fence: strong ordering.
pub const FENCE_STRONG: u8 = 0x60;
/// `fm_ce_se` fence: small-and-fence (rdma-core `MLX5_WQE_CTRL_FENCE`).
pub const FENCE_SMALL_AND: u8 = 0x80;
/// `fm_ce_se` fence mode mask (bits 7:5).
pub const FENCE_MASK: u8 = 0xe0;
/// `fm_ce_se` CE: always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const CE_CQ_UPDATE: u8 = 0x08;
/// `fm_ce_se` CE: generate a CQE and an EQE.
pub const CE_CQ_AND_EQ: u8 = 0x0c;
/// `fm_ce_se` CE: CQE only on first error.
pub const CE_FIRST_ERR: u8 = 0x04;
/// `fm_ce_se` CE mask (bits 3:2; 0 = CQE only on error).
pub const CE_MASK: u8 = 0x0c;
/// `fm_ce_se` SE: solicited event.
pub const SOLICITED: u8 = 0x02;
/// `opmod_idx_opcode`: shift of the WQE index (bits 23:8).
pub const WQE_IDX_SHIFT: u32 = 8;
/// `opmod_idx_opcode`: mask of the WQE index after shifting.
pub const WQE_IDX_MASK: u32 = 0xffff;
/// `opmod_idx_opcode`: shift of the opmod (bits 31:24).
pub const OPMOD_SHIFT: u32 = 24;
/// `opmod_idx_opcode`: mask of the opcode (bits 7:0).
pub const OPCODE_MASK: u32 = 0xff;
/// `qpn_ds`: shift of the QPN (bits 31:8).
pub const QPN_SHIFT: u32 = 8;
/// `qpn_ds`: mask of `ds` (bits 5:0).
pub const DS_MASK: u32 = 0x3f;
/// Size of the GRH area at the start of a UD receive buffer.
pub const UD_GRH_SIZE: usize = 40;
/// `grh_gid_fl` bit 30: GRH present (IB).
pub const AV_GRH: u32 = 1 << 30;
/// `grh_gid_fl`: shift of the source GID index (bits 27:20).
pub const AV_SGID_INDEX_SHIFT: u32 = 20;
/// `grh_gid_fl`: mask of the flow label (bits 19:0).
pub const AV_FLOW_LABEL_MASK: u32 = 0xf_ffff;

/// Send opcodes (`MLX5_OPCODE_*`), in `opmod_idx_opcode` bits 7:0.
pub mod opcode {
    /// No operation.
    pub const NOP: u8 = 0x00;
    /// Send with invalidate.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA write.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA write with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// Send.
    pub const SEND: u8 = 0x0a;
    /// Send with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// LSO / TSO.
    pub const LSO: u8 = 0x0e;
    /// RDMA read.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare-and-swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch-and-add.
    pub const ATOMIC_FA: u8 = 0x12;
    /// Masked atomic compare-and-swap.
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// Masked atomic fetch-and-add.
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// Bind memory window.
    pub const BIND_MW: u8 = 0x18;
    /// Local invalidate.
    pub const LOCAL_INVAL: u8 = 0x1b;
    /// User-mode memory registration.
    pub const UMR: u8 = 0x25;
}

/// Control segment (`mlx5_wqe_ctrl_seg`, 16 bytes, first in every send WQE).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    /// `opmod << 24 | wqe_index << 8 | opcode`.
    pub opmod_idx_opcode: Be32,
    /// `qpn << 8 | ds` (ds = WQE size in 16-byte units).
    pub qpn_ds: Be32,
    /// WQE signature (only with `wq_signature`).
    pub signature: u8,
    /// Reserved (DC stream channel id).
    pub rsvd: [u8; 2],
    /// Fence mode (7:5), completion mode (3:2), solicited (1).
    pub fm_ce_se: u8,
    /// Immediate data / invalidate rkey / UMR mkey.
    pub imm: Be32,
}
raw_struct!(
    CtrlSeg,
    16,
    [opmod_idx_opcode, qpn_ds, signature, rsvd, fm_ce_se, imm]
);

/// Remote address segment (`mlx5_wqe_raddr_seg`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: Be64,
    /// Remote key.
    pub rkey: Be32,
    /// Reserved, 0.
    pub rsvd: Be32,
}
raw_struct!(RaddrSeg, 16, [raddr, rkey, rsvd]);

/// Atomic segment (`mlx5_wqe_atomic_seg`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AtomicSeg {
    /// Swap value (CS) or add value (FA).
    pub swap_add: Be64,
    /// Compare value (CS).
    pub compare: Be64,
}
raw_struct!(AtomicSeg, 16, [swap_add, compare]);

/// Data (scatter/gather) segment (`mlx5_wqe_data_seg`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Length in bytes.
    pub byte_count: Be32,
    /// Local key.
    pub lkey: Be32,
    /// Address.
    pub addr: Be64,
}
raw_struct!(DataSeg, 16, [byte_count, lkey, addr]);

/// Inline data header (4 bytes): `byte_count = length | INLINE_SEG`, data follows.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct InlineHdr {
    /// `length | INLINE_SEG`.
    pub byte_count: Be32,
}
raw_struct!(InlineHdr, 4, [byte_count]);

/// Datagram segment / address vector (`mlx5_wqe_av`, 48 bytes) of a UD send.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DatagramSeg {
    /// Q_Key.
    pub qkey: Be32,
    /// Reserved.
    pub rsvd0: Be32,
    /// Bit 31 [`EXTENDED_UD_AV`], bits 23:0 destination QPN.
    pub dqp_dct: Be32,
    /// Static rate (7:4), SL / priority (3:0).
    pub stat_rate_sl: u8,
    /// IB: source path bits (6:0).
    pub fl_mlid: u8,
    /// IB: destination LID; RoCE v2: UDP source port.
    pub rlid: Be16,
    /// Reserved.
    pub rsvd1: [u8; 4],
    /// RoCE: destination MAC.
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Bit 30 GRH (IB), 27:20 source GID index, 19:0 flow label.
    pub grh_gid_fl: Be32,
    /// Destination GID.
    pub rgid: [u8; 16],
}
raw_struct!(
    DatagramSeg,
    48,
    [
        qkey,
        rsvd0,
        dqp_dct,
        stat_rate_sl,
        fl_mlid,
        rlid,
        rsvd1,
        rmac,
        tclass,
        hop_limit,
        grh_gid_fl,
        rgid
    ]
);

/// Size of the XRC segment (`xrc_srqn` BE32 + 12 reserved).
pub const XRC_SEG_SIZE: usize = 16;

/// Next segment of a shared receive queue WQE (`mlx5_wqe_srq_next_seg`, 16 bytes): SRQ WQEs
/// are a linked list in the ring; each starts with this header, then its data segments.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// Index of the WQE that follows this one in the free list.
    pub next_wqe_index: Be16,
    /// WQE signature (0 unless `wq_signature`).
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}
raw_struct!(SrqNextSeg, 16, [rsvd0, next_wqe_index, signature, rsvd1]);
