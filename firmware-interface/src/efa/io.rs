//! The data path (`docs/efa.md#data-path`): TX WQEs (64 or 128 bytes) written into the
//! low-latency SQ in BAR2, RX descriptors in the host-memory RQ, and the completion entries
//! of the host-memory CQs, with their status codes.

use crate::field::{Le16, Le32};

/// TX meta descriptor (`efa_io_tx_meta_desc`), the first 32 bytes of every TX WQE.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TxMetaDesc {
    /// 0x00 driver cookie, echoed in the completion.
    pub req_id: Le16,
    /// 0x02 bits 3:0 op type ([`op_type`]), 4 has_imm, 5 inline_msg, 6 meta_extension
    /// (must be 0), 7 meta_desc (must be 1).
    pub ctrl1: u8,
    /// 0x03 bit 0 phase, 2 first, 3 last (both must be 1), 4 comp_req.
    pub ctrl2: u8,
    /// 0x04 destination QP number.
    pub dest_qp_num: Le16,
    /// 0x06 inline byte count, or the number of buffer descriptors.
    pub length: Le16,
    /// 0x08 immediate data (host order).
    pub immediate_data: Le32,
    /// 0x0c address handle.
    pub ah: Le16,
    /// 0x0e bits 1:0 processing hints.
    pub ctrl3: u8,
    /// 0x0f reserved.
    pub rsvd0: u8,
    /// 0x10 Q_Key.
    pub qkey: Le32,
    /// 0x14 reserved.
    pub rsvd1: [u8; 6],
    /// 0x1a upper 48 bits of a 64-bit request id (devices with 64-bit SQ request ids).
    pub req_id_ex: [u8; 6],
}

raw_struct!(
    TxMetaDesc,
    32,
    [
        req_id,
        dest_qp_num,
        ctrl1,
        ctrl2,
        length,
        immediate_data,
        ah,
        ctrl3,
        rsvd0,
        qkey,
        rsvd1,
        req_id_ex
    ]
);

/// [`TxMetaDesc::ctrl1`]: mask of the op type (bits 3:0).
pub const CTRL1_OP_TYPE_MASK: u8 = 0x0f;
/// [`TxMetaDesc::ctrl1`] bit 4: immediate data present.
pub const CTRL1_HAS_IMM: u8 = 1 << 4;
/// [`TxMetaDesc::ctrl1`] bit 5: the data area holds the message inline.
pub const CTRL1_INLINE_MSG: u8 = 1 << 5;
/// [`TxMetaDesc::ctrl1`] bit 6: meta extension (must be 0).
pub const CTRL1_META_EXTENSION: u8 = 1 << 6;
/// [`TxMetaDesc::ctrl1`] bit 7: this is a meta descriptor (must be 1).
pub const CTRL1_META_DESC: u8 = 1 << 7;
/// [`TxMetaDesc::ctrl2`] bit 0: phase.
pub const CTRL2_PHASE: u8 = 1 << 0;
/// [`TxMetaDesc::ctrl2`] bit 2: first descriptor (must be 1).
pub const CTRL2_FIRST: u8 = 1 << 2;
/// [`TxMetaDesc::ctrl2`] bit 3: last descriptor (must be 1).
pub const CTRL2_LAST: u8 = 1 << 3;
/// [`TxMetaDesc::ctrl2`] bit 4: completion requested.
pub const CTRL2_COMP_REQ: u8 = 1 << 4;
/// [`TxMetaDesc::ctrl3`]: mask of the processing hints (bits 1:0).
pub const CTRL3_HINTS_MASK: u8 = 0x3;
/// Processing hint: burst / packets-per-second sensitive.
pub const HINT_BURST_PPS_SENSITIVE: u8 = 1;

/// TX op types ([`TxMetaDesc::ctrl1`] bits 3:0; also the completion's op type).
pub mod op_type {
    /// Send.
    pub const SEND: u8 = 0;
    /// RDMA read.
    pub const RDMA_READ: u8 = 1;
    /// RDMA write.
    pub const RDMA_WRITE: u8 = 2;
    /// Fast registration (kernel verbs of newer drivers).
    pub const FAST_REG: u8 = 3;
    /// Fast invalidation (kernel verbs of newer drivers).
    pub const FAST_INV: u8 = 4;
}

/// TX buffer descriptor (`efa_io_tx_buf_desc`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TxBufDesc {
    /// 0x0 length in bytes.
    pub length: Le32,
    /// 0x4 bits 23:0 L_Key.
    pub lkey: Le32,
    /// 0x8 address bits 31:0.
    pub buf_addr_lo: Le32,
    /// 0xc address bits 63:32.
    pub buf_addr_hi: Le32,
}

raw_struct!(TxBufDesc, 16, [length, lkey, buf_addr_lo, buf_addr_hi]);

/// Mask of a 24-bit L_Key in a descriptor.
pub const LKEY_MASK: u32 = 0x00ff_ffff;

/// Remote memory address of an RDMA operation (`efa_io_remote_mem_addr`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RemoteMemAddr {
    /// 0x0 total bytes of the operation.
    pub length: Le32,
    /// 0x4 R_Key.
    pub rkey: Le32,
    /// 0x8 address bits 31:0.
    pub buf_addr_lo: Le32,
    /// 0xc address bits 63:32.
    pub buf_addr_hi: Le32,
}

raw_struct!(RemoteMemAddr, 16, [length, rkey, buf_addr_lo, buf_addr_hi]);

/// The 64-byte TX WQE (`efa_io_tx_wqe`): meta descriptor and a 32-byte data area (two
/// [`TxBufDesc`], 32 inline bytes, or a [`RemoteMemAddr`] and one local [`TxBufDesc`]).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TxWqe {
    /// 0x00 meta descriptor.
    pub meta: TxMetaDesc,
    /// 0x20 data area.
    pub data: [u8; 32],
}

/// The 128-byte TX WQE (`efa_io_tx_wqe_128`, devices with `data_polling_128`): meta
/// descriptor and a 96-byte data area (80 inline bytes usable; RDMA with inline data).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxWqe128 {
    /// 0x00 meta descriptor.
    pub meta: TxMetaDesc,
    /// 0x20 data area.
    pub data: [u8; 96],
}

impl Default for TxWqe128 {
    fn default() -> Self {
        TxWqe128 {
            meta: TxMetaDesc::default(),
            data: [0; 96],
        }
    }
}

const _: () = assert!(core::mem::size_of::<TxWqe>() == 64);
const _: () = assert!(core::mem::size_of::<TxWqe128>() == 128);

/// Size of a TX WQE.
pub const TX_WQE_SIZE: usize = 64;
/// Size of a 128-byte TX WQE.
pub const TX_WQE128_SIZE: usize = 128;
/// Byte offset of the data area in a TX WQE.
pub const TX_DATA_OFF: usize = 32;
/// Inline bytes of a 64-byte WQE.
pub const TX_INLINE_MAX: usize = 32;
/// Inline bytes of a 128-byte WQE.
pub const TX_INLINE_MAX_128: usize = 80;
/// Buffer descriptors of a 64-byte WQE.
pub const TX_BUF_DESCS: usize = 2;

/// RX descriptor (`efa_io_rx_desc`), 16 bytes; one per SGE, no phase bit.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RxDesc {
    /// 0x0 buffer address bits 31:0.
    pub buf_addr_lo: Le32,
    /// 0x4 buffer address bits 63:32.
    pub buf_addr_hi: Le32,
    /// 0x8 driver cookie (the same on every descriptor of one WR).
    pub req_id: Le16,
    /// 0xa length in bytes.
    pub length: Le16,
    /// 0xc bits 23:0 L_Key, 30 first, 31 last.
    pub lkey_ctrl: Le32,
}

raw_struct!(
    RxDesc,
    16,
    [buf_addr_lo, buf_addr_hi, req_id, length, lkey_ctrl]
);

/// Size of an RX descriptor.
pub const RX_DESC_SIZE: usize = 16;
/// [`RxDesc::lkey_ctrl`] bit 30: first descriptor of a WR.
pub const RX_FIRST: u32 = 1 << 30;
/// [`RxDesc::lkey_ctrl`] bit 31: last descriptor of a WR.
pub const RX_LAST: u32 = 1 << 31;

/// TX completion (`efa_io_tx_cdesc`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TxCqe {
    /// 0x0 the WQE's `req_id`.
    pub req_id: Le16,
    /// 0x2 completion status ([`comp_status`]).
    pub status: u8,
    /// 0x3 `CDESC_*` flags.
    pub flags: u8,
    /// 0x4 local QP number.
    pub qp_num: Le16,
    /// 0x6 upper 48 bits of a 64-bit request id.
    pub req_id_ex: [u8; 6],
    /// 0xc reserved.
    pub rsvd: [u8; 4],
}

raw_struct!(TxCqe, 16, [req_id, status, flags, qp_num, req_id_ex, rsvd]);

/// RX completion (`efa_io_rx_cdesc`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RxCqe {
    /// 0x0 the WR's `req_id`.
    pub req_id: Le16,
    /// 0x2 completion status ([`comp_status`]).
    pub status: u8,
    /// 0x3 `CDESC_*` flags.
    pub flags: u8,
    /// 0x4 local QP number.
    pub qp_num: Le16,
    /// 0x6 bytes received, bits 15:0.
    pub length: Le16,
    /// 0x8 the sender's AH ([`UNKNOWN_AH`] if none).
    pub ah: Le16,
    /// 0xa the sender's QP number.
    pub src_qp_num: Le16,
    /// 0xc immediate data (host order).
    pub imm: Le32,
}

raw_struct!(
    RxCqe,
    16,
    [req_id, status, flags, qp_num, length, ah, src_qp_num, imm]
);

/// Extended RX completion (`efa_io_rx_cdesc_ex`), 32 bytes (8-word CQ entries).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RxCqeEx {
    /// 0x00 the 16-byte completion.
    pub base: RxCqe,
    /// 0x10 `length_hi` (u16, bytes 31:16) for RDMA write with immediate, or the sender's
    /// 16-byte GID when `ah` is [`UNKNOWN_AH`] and the CQ was created with `set_src_addr`.
    pub u: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<RxCqeEx>() == 32);

/// Size of a 4-word completion entry.
pub const CQE_SIZE: usize = 16;
/// Size of an 8-word (extended) completion entry.
pub const CQE_EX_SIZE: usize = 32;
/// `ah` of an RX completion from a sender with no AH on this side.
pub const UNKNOWN_AH: u16 = 0xffff;

/// Completion `flags` bit 0: phase.
pub const CDESC_PHASE: u8 = 1 << 0;
/// Completion `flags`: shift of the queue type (bits 2:1).
pub const CDESC_Q_TYPE_SHIFT: u8 = 1;
/// Completion `flags`: mask of the queue type after shifting.
pub const CDESC_Q_TYPE_MASK: u8 = 0x3;
/// Completion `flags` bit 3: immediate data present (RX).
pub const CDESC_HAS_IMM: u8 = 1 << 3;
/// Completion `flags`: shift of the op type (bits 6:4).
pub const CDESC_OP_TYPE_SHIFT: u8 = 4;
/// Completion `flags`: mask of the op type after shifting.
pub const CDESC_OP_TYPE_MASK: u8 = 0x7;
/// Completion `flags` bit 7: unsolicited RDMA write with immediate (matched no WR).
pub const CDESC_UNSOLICITED: u8 = 1 << 7;
/// Queue type: send.
pub const Q_TYPE_SEND: u8 = 1;
/// Queue type: receive.
pub const Q_TYPE_RECV: u8 = 2;

/// Completion status (`efa_io_comp_status`).
pub mod comp_status {
    /// Success.
    pub const OK: u8 = 0;
    /// Flushed (the QP is in error).
    pub const FLUSHED: u8 = 1;
    /// Local QP internal error.
    pub const LOCAL_ERROR_QP_INTERNAL_ERROR: u8 = 2;
    /// Unsupported operation.
    pub const LOCAL_ERROR_UNSUPPORTED_OP: u8 = 3;
    /// Invalid AH.
    pub const LOCAL_ERROR_INVALID_AH: u8 = 4;
    /// Invalid L_Key.
    pub const LOCAL_ERROR_INVALID_LKEY: u8 = 5;
    /// Bad length.
    pub const LOCAL_ERROR_BAD_LENGTH: u8 = 6;
    /// Remote: bad address.
    pub const REMOTE_ERROR_BAD_ADDRESS: u8 = 7;
    /// Remote: aborted.
    pub const REMOTE_ERROR_ABORT: u8 = 8;
    /// Remote: no such destination QP.
    pub const REMOTE_ERROR_BAD_DEST_QPN: u8 = 9;
    /// Remote: receiver not ready (no posted receive).
    pub const REMOTE_ERROR_RNR: u8 = 10;
    /// Remote: bad length.
    pub const REMOTE_ERROR_BAD_LENGTH: u8 = 11;
    /// Remote: bad status.
    pub const REMOTE_ERROR_BAD_STATUS: u8 = 12;
    /// The remote does not respond.
    pub const LOCAL_ERROR_UNRESP_REMOTE: u8 = 13;
    /// Remote: unknown peer.
    pub const REMOTE_ERROR_UNKNOWN_PEER: u8 = 14;
    /// The remote is unreachable.
    pub const LOCAL_ERROR_UNREACH_REMOTE: u8 = 15;
    /// Remote: feature mismatch (newer devices).
    pub const REMOTE_ERROR_FEATURE_MISMATCH: u8 = 18;

    /// Every status as `(value, name)`.
    pub const ALL: &[(u8, &str)] = &[
        (OK, "OK"),
        (FLUSHED, "FLUSHED"),
        (
            LOCAL_ERROR_QP_INTERNAL_ERROR,
            "LOCAL_ERROR_QP_INTERNAL_ERROR",
        ),
        (LOCAL_ERROR_UNSUPPORTED_OP, "LOCAL_ERROR_UNSUPPORTED_OP"),
        (LOCAL_ERROR_INVALID_AH, "LOCAL_ERROR_INVALID_AH"),
        (LOCAL_ERROR_INVALID_LKEY, "LOCAL_ERROR_INVALID_LKEY"),
        (LOCAL_ERROR_BAD_LENGTH, "LOCAL_ERROR_BAD_LENGTH"),
        (REMOTE_ERROR_BAD_ADDRESS, "REMOTE_ERROR_BAD_ADDRESS"),
        (REMOTE_ERROR_ABORT, "REMOTE_ERROR_ABORT"),
        (REMOTE_ERROR_BAD_DEST_QPN, "REMOTE_ERROR_BAD_DEST_QPN"),
        (REMOTE_ERROR_RNR, "REMOTE_ERROR_RNR"),
        (REMOTE_ERROR_BAD_LENGTH, "REMOTE_ERROR_BAD_LENGTH"),
        (REMOTE_ERROR_BAD_STATUS, "REMOTE_ERROR_BAD_STATUS"),
        (LOCAL_ERROR_UNRESP_REMOTE, "LOCAL_ERROR_UNRESP_REMOTE"),
        (REMOTE_ERROR_UNKNOWN_PEER, "REMOTE_ERROR_UNKNOWN_PEER"),
        (LOCAL_ERROR_UNREACH_REMOTE, "LOCAL_ERROR_UNREACH_REMOTE"),
        (
            REMOTE_ERROR_FEATURE_MISMATCH,
            "REMOTE_ERROR_FEATURE_MISMATCH",
        ),
    ];

    /// The name of a status value, for logs; `None` if unknown (16 and 17 are undefined).
    pub fn name(status: u8) -> Option<&'static str> {
        ALL.iter().find(|s| s.0 == status).map(|s| s.1)
    }
}
