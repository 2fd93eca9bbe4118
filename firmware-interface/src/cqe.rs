//! Completion queue entries (`docs/mlx5.md#completion-queue-entries`).

use crate::field::{Be16, Be32, Be64};

/// Size of a CQE (with 128-byte CQEs this CQE is the second half of the slot).
pub const SIZE: usize = 64;
/// `op_own` bit 0: owner.
pub const OWNER_MASK: u8 = 1;
/// `op_own` bit 1: solicited event.
pub const SE_MASK: u8 = 0x02;
/// `op_own` bits 3:2: CQE format mask.
pub const FORMAT_MASK: u8 = 0x0c;
/// Format: no inline data.
pub const FORMAT_NONE: u8 = 0x00;
/// Format: 32-byte inline scatter (`MLX5_INLINE_SCATTER_32`).
pub const FORMAT_INLINE_SCATTER_32: u8 = 0x04;
/// Format: 64-byte inline scatter (`MLX5_INLINE_SCATTER_64`).
pub const FORMAT_INLINE_SCATTER_64: u8 = 0x08;
/// Format: compressed.
pub const FORMAT_COMPRESSED: u8 = 0x0c;
/// Initial `op_own` of every CQE: opcode INVALID, owner 0.
pub const OP_OWN_INIT: u8 = 0xf0;
/// Shift of the opcode in `op_own` (bits 7:4).
pub const OPCODE_SHIFT: u8 = 4;
/// Mask of 24-bit numbers (QPN, SRQN, user index).
pub const QPN_MASK: u32 = 0x00ff_ffff;
/// `flags_rqpn`: shift of the GRH-present indication (bits 29:28).
pub const GRH_SHIFT: u32 = 28;
/// `flags_rqpn`: mask of the GRH-present indication after shifting.
pub const GRH_MASK: u32 = 0x3;
/// `flags_rqpn`: shift of the L3 header type (RoCE, bits 25:24) / SL (IB, bits 27:24).
pub const L3_HDR_TYPE_SHIFT: u32 = 24;
/// `flags_rqpn`: mask of the L3 header type after shifting.
pub const L3_HDR_TYPE_MASK: u32 = 0x3;
/// L3 header type: GRH (RoCE v1).
pub const L3_HDR_TYPE_GRH: u32 = 0;
/// L3 header type: IPv6.
pub const L3_HDR_TYPE_IPV6: u32 = 1;
/// L3 header type: IPv4.
pub const L3_HDR_TYPE_IPV4: u32 = 2;
/// `flags_rqpn`: shift of the SL (IB, bits 27:24).
pub const SL_SHIFT: u32 = 24;
/// `flags_rqpn`: mask of the SL after shifting.
pub const SL_MASK: u32 = 0xf;
/// `l4_l3_hdr_type` bit 0: VLAN present (RoCE).
pub const VLAN_PRESENT: u8 = 0x01;
/// `sop_drop_qpn` / `s_wqe_opcode_qpn`: shift of the send opcode (bits 31:24).
pub const SEND_OPCODE_SHIFT: u32 = 24;

/// The opcode of a CQE from its `op_own` byte.
pub const fn opcode_of(op_own: u8) -> u8 {
    op_own >> OPCODE_SHIFT
}

/// CQE opcodes (`op_own >> 4`).
pub mod opcode {
    /// Requester (send side) success.
    pub const REQ: u8 = 0;
    /// RDMA write with immediate received.
    pub const RESP_WR_IMM: u8 = 1;
    /// Send received.
    pub const RESP_SEND: u8 = 2;
    /// Send with immediate received.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Send with invalidate received.
    pub const RESP_SEND_INV: u8 = 4;
    /// CQ resize.
    pub const RESIZE_CQ: u8 = 5;
    /// No packet (tag matching).
    pub const NO_PACKET: u8 = 6;
    /// Signature error.
    pub const SIG_ERR: u8 = 12;
    /// Requester error ([`super::ErrCqe`]).
    pub const REQ_ERR: u8 = 13;
    /// Responder error ([`super::ErrCqe`]).
    pub const RESP_ERR: u8 = 14;
    /// Invalid: never written by hardware; initial value.
    pub const INVALID: u8 = 15;
}

/// Error CQE syndromes (`MLX5_CQE_SYNDROME_*`).
pub mod syndrome {
    /// Local length error.
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    /// Local QP operation error.
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    /// Local protection error.
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    /// Work request flushed.
    pub const WR_FLUSH_ERR: u8 = 0x05;
    /// Memory window bind error.
    pub const MW_BIND_ERR: u8 = 0x06;
    /// Bad response.
    pub const BAD_RESP_ERR: u8 = 0x10;
    /// Local access error.
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    /// Remote invalid request.
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    /// Remote access error.
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    /// Remote operation error.
    pub const REMOTE_OP_ERR: u8 = 0x14;
    /// Transport retry counter exceeded.
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    /// RNR retry counter exceeded.
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    /// Remote aborted.
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;
    /// Vendor syndrome: ODP page fault.
    pub const VENDOR_ODP_PAGE_FAULT: u8 = 0x93;
}

/// 64-byte CQE (`mlx5_cqe64`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Cqe64 {
    /// 0x00 (Eth) tls/outer L3 tunneled; 0 for RDMA.
    pub tls_outer_l3_tunneled: u8,
    /// 0x01 reserved.
    pub rsvd0: u8,
    /// 0x02 (Eth / striding RQ) WQE id.
    pub wqe_id: Be16,
    /// 0x04..0x0b (Eth) LRO fields.
    pub lro: [u8; 8],
    /// 0x0c (Eth) RSS hash result.
    pub rss_hash_result: Be32,
    /// 0x10 (Eth) RSS hash type.
    pub rss_hash_type: u8,
    /// 0x11 IB: destination LID path bits.
    pub ml_path: u8,
    /// 0x12 reserved.
    pub rsvd1: [u8; 2],
    /// 0x14 (Eth) checksum.
    pub check_sum: Be16,
    /// 0x16 IB: source LID.
    pub slid: Be16,
    /// 0x18 bits 23:0 remote QPN; 29:28 GRH; IB 27:24 SL; RoCE 25:24 L3 header type.
    pub flags_rqpn: Be32,
    /// 0x1c header-data-split / IP extension.
    pub hds_ip_ext: u8,
    /// 0x1d bit 0 VLAN present; L3/L4 types.
    pub l4_l3_hdr_type: u8,
    /// 0x1e VLAN info.
    pub vlan_info: Be16,
    /// 0x20 bits 23:0 SRQN or user index (CQE version 1).
    pub srqn_uidx: Be32,
    /// 0x24 immediate data / invalidated rkey / P_Key.
    pub imm_inval_pkey: Be32,
    /// 0x28 application (tag matching).
    pub app: u8,
    /// 0x29 application opcode.
    pub app_op: u8,
    /// 0x2a application info.
    pub app_info: Be16,
    /// 0x2c byte count.
    pub byte_cnt: Be32,
    /// 0x30 completion timestamp.
    pub timestamp: Be64,
    /// 0x38 bits 23:0 local QPN; requester: bits 31:24 send opcode.
    pub sop_drop_qpn: Be32,
    /// 0x3c WQE counter.
    pub wqe_counter: Be16,
    /// 0x3e signature / validity iteration count.
    pub signature: u8,
    /// 0x3f opcode (7:4), format (3:2), SE (1), owner (0).
    pub op_own: u8,
}
raw_struct!(
    Cqe64,
    64,
    [
        tls_outer_l3_tunneled,
        rsvd0,
        wqe_id,
        lro,
        rss_hash_result,
        rss_hash_type,
        ml_path,
        rsvd1,
        check_sum,
        slid,
        flags_rqpn,
        hds_ip_ext,
        l4_l3_hdr_type,
        vlan_info,
        srqn_uidx,
        imm_inval_pkey,
        app,
        app_op,
        app_info,
        byte_cnt,
        timestamp,
        sop_drop_qpn,
        wqe_counter,
        signature,
        op_own
    ]
);

impl Cqe64 {
    /// An all-zero CQE.
    pub const fn zeroed() -> Self {
        Cqe64 {
            tls_outer_l3_tunneled: 0,
            rsvd0: 0,
            wqe_id: Be16::new(0),
            lro: [0; 8],
            rss_hash_result: Be32::new(0),
            rss_hash_type: 0,
            ml_path: 0,
            rsvd1: [0; 2],
            check_sum: Be16::new(0),
            slid: Be16::new(0),
            flags_rqpn: Be32::new(0),
            hds_ip_ext: 0,
            l4_l3_hdr_type: 0,
            vlan_info: Be16::new(0),
            srqn_uidx: Be32::new(0),
            imm_inval_pkey: Be32::new(0),
            app: 0,
            app_op: 0,
            app_info: Be16::new(0),
            byte_cnt: Be32::new(0),
            timestamp: Be64::new(0),
            sop_drop_qpn: Be32::new(0),
            wqe_counter: Be16::new(0),
            signature: 0,
            op_own: 0,
        }
    }

    /// CQE opcode (`op_own >> 4`, see [`opcode`]).
    pub const fn opcode(&self) -> u8 {
        opcode_of(self.op_own)
    }

    /// Owner bit (`op_own & 1`).
    pub const fn owner(&self) -> u8 {
        self.op_own & OWNER_MASK
    }
}

/// Error CQE (`mlx5_err_cqe`, opcode 13 or 14).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ErrCqe {
    /// 0x00..0x1f reserved.
    pub rsvd0: [u8; 32],
    /// 0x20 bits 23:0 SRQN / user index.
    pub srqn: Be32,
    /// 0x24..0x2b reserved.
    pub rsvd1: [u8; 8],
    /// 0x2c byte count (DPDK).
    pub byte_cnt: Be32,
    /// 0x30..0x33 reserved.
    pub rsvd2: [u8; 4],
    /// 0x34 hardware error syndrome (DPDK).
    pub hw_err_synd: u8,
    /// 0x35 hardware syndrome type (DPDK).
    pub hw_synd_type: u8,
    /// 0x36 vendor error syndrome (`wc.vendor_err`).
    pub vendor_err_synd: u8,
    /// 0x37 syndrome (see [`syndrome`]).
    pub syndrome: u8,
    /// 0x38 bits 31:24 send opcode, 23:0 QPN.
    pub s_wqe_opcode_qpn: Be32,
    /// 0x3c WQE counter.
    pub wqe_counter: Be16,
    /// 0x3e signature.
    pub signature: u8,
    /// 0x3f opcode/owner.
    pub op_own: u8,
}
raw_struct!(
    ErrCqe,
    64,
    [
        rsvd0,
        srqn,
        rsvd1,
        byte_cnt,
        rsvd2,
        hw_err_synd,
        hw_synd_type,
        vendor_err_synd,
        syndrome,
        s_wqe_opcode_qpn,
        wqe_counter,
        signature,
        op_own
    ]
);

/// Byte offset of `op_own` inside a 64-byte CQE.
pub const OP_OWN_OFFSET: usize = 0x3f;
