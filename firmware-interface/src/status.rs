//! Command status values and op_mod encodings (`docs/mlx5.md#queue-entry`,
//! `docs/mlx5.md#headers-and-status`, `docs/mlx5.md#operation-modifiers`).

/// Command output `status` (byte 0 of every `_out`; `device.h MLX5_CMD_STAT_*`).
pub mod cmd_status {
    /// 0x00: success.
    pub const OK: u8 = 0x00;
    /// 0x01: internal error.
    pub const INTERNAL_ERR: u8 = 0x01;
    /// 0x02: bad operation (unknown opcode).
    pub const BAD_OP: u8 = 0x02;
    /// 0x03: bad parameter.
    pub const BAD_PARAM: u8 = 0x03;
    /// 0x04: bad system state.
    pub const BAD_SYS_STATE: u8 = 0x04;
    /// 0x05: bad resource.
    pub const BAD_RES: u8 = 0x05;
    /// 0x06: resource busy.
    pub const RES_BUSY: u8 = 0x06;
    /// 0x07: not ready.
    pub const NOT_READY: u8 = 0x07;
    /// 0x08: limits exceeded.
    pub const LIM: u8 = 0x08;
    /// 0x09: bad resource state.
    pub const BAD_RES_STATE: u8 = 0x09;
    /// 0x0a: bad index.
    pub const BAD_INDEX: u8 = 0x0a;
    /// 0x0f: no resources.
    pub const NO_RES: u8 = 0x0f;
    /// 0x10: bad QP state.
    pub const BAD_QP_STATE: u8 = 0x10;
    /// 0x30: bad packet.
    pub const BAD_PKT: u8 = 0x30;
    /// 0x40: bad size / too many outstanding CQEs.
    pub const BAD_SIZE: u8 = 0x40;
    /// 0x50: bad input length.
    pub const BAD_INPUT_LEN: u8 = 0x50;
    /// 0x51: bad output length.
    pub const BAD_OUTPUT_LEN: u8 = 0x51;

    /// The name of a status value, for logs; `None` if unknown.
    pub fn name(status: u8) -> Option<&'static str> {
        Some(match status {
            OK => "OK",
            INTERNAL_ERR => "INTERNAL_ERR",
            BAD_OP => "BAD_OP",
            BAD_PARAM => "BAD_PARAM",
            BAD_SYS_STATE => "BAD_SYS_STATE",
            BAD_RES => "BAD_RES",
            RES_BUSY => "RES_BUSY",
            NOT_READY => "NOT_READY",
            LIM => "LIM",
            BAD_RES_STATE => "BAD_RES_STATE",
            BAD_INDEX => "BAD_INDEX",
            NO_RES => "NO_RES",
            BAD_QP_STATE => "BAD_QP_STATE",
            BAD_PKT => "BAD_PKT",
            BAD_SIZE => "BAD_SIZE",
            BAD_INPUT_LEN => "BAD_INPUT_LEN",
            BAD_OUTPUT_LEN => "BAD_OUTPUT_LEN",
            _ => return None,
        })
    }
}

/// Command delivery status: `status_own >> 1` of a completed command entry
/// (`cmd.c MLX5_CMD_DELIVERY_STAT_*`).
pub mod delivery_status {
    /// 0x0: delivered.
    pub const OK: u8 = 0x0;
    /// 0x1: signature error.
    pub const SIGNATURE_ERR: u8 = 0x1;
    /// 0x2: token error.
    pub const TOKEN_ERR: u8 = 0x2;
    /// 0x3: bad mailbox block number.
    pub const BAD_BLOCK_NUMBER: u8 = 0x3;
    /// 0x4: output pointer not aligned to the block size.
    pub const OUT_PTR_ALIGN: u8 = 0x4;
    /// 0x5: input pointer not aligned to the block size.
    pub const IN_PTR_ALIGN: u8 = 0x5;
    /// 0x6: firmware internal error.
    pub const FW_ERR: u8 = 0x6;
    /// 0x7: input length error.
    pub const IN_LENGTH_ERR: u8 = 0x7;
    /// 0x8: output length error.
    pub const OUT_LENGTH_ERR: u8 = 0x8;
    /// 0x9: reserved fields not cleared.
    pub const RES_FLD_NOT_CLR: u8 = 0x9;
    /// 0x10: bad command descriptor type.
    pub const CMD_DESCRIPTOR_TYPE_ERR: u8 = 0x10;
}

/// `op_mod` values (`docs/mlx5.md#operation-modifiers`).
pub mod op_mod {
    /// QUERY_HCA_CAP mode: maximum (supported) values.
    pub const QUERY_CAP_MAX: u16 = 0;
    /// QUERY_HCA_CAP mode: current values.
    pub const QUERY_CAP_CUR: u16 = 1;
    /// Capability type GENERAL (`cmd_hca_cap`).
    pub const CAP_GENERAL: u16 = 0;
    /// Capability type ETHERNET_OFFLOADS.
    pub const CAP_ETHERNET_OFFLOADS: u16 = 1;
    /// Capability type ODP.
    pub const CAP_ODP: u16 = 2;
    /// Capability type ATOMIC.
    pub const CAP_ATOMIC: u16 = 3;
    /// Capability type ROCE (`roce_cap`).
    pub const CAP_ROCE: u16 = 4;
    /// Capability type GENERAL_2.
    pub const CAP_GENERAL_2: u16 = 0x20;

    /// QUERY_HCA_CAP op_mod: `cap_type << 1 | mode` (e.g. general-current = 1, roce-current = 9).
    pub const fn query_cap(cap_type: u16, mode: u16) -> u16 {
        (cap_type << 1) | (mode & 1)
    }

    /// SET_HCA_CAP op_mod: `cap_type << 1` (general = 0, atomic = 6, roce = 8).
    pub const fn set_cap(cap_type: u16) -> u16 {
        cap_type << 1
    }

    /// QUERY_PAGES: boot pages.
    pub const PAGES_BOOT: u16 = 1;
    /// QUERY_PAGES: init pages.
    pub const PAGES_INIT: u16 = 2;
    /// QUERY_PAGES: regular pages.
    pub const PAGES_REGULAR: u16 = 3;

    /// MANAGE_PAGES: the driver could not allocate the requested pages.
    pub const MANAGE_PAGES_CANT_GIVE: u16 = 0;
    /// MANAGE_PAGES: give pages to firmware.
    pub const MANAGE_PAGES_GIVE: u16 = 1;
    /// MANAGE_PAGES: take (reclaim) pages from firmware.
    pub const MANAGE_PAGES_TAKE: u16 = 2;

    /// ACCESS_REG: write the register.
    pub const ACCESS_REG_WRITE: u16 = 0;
    /// ACCESS_REG: read the register.
    pub const ACCESS_REG_READ: u16 = 1;

    /// TEARDOWN_HCA `profile` (not op_mod, which is 0): graceful close.
    pub const TEARDOWN_GRACEFUL: u16 = 0;
    /// TEARDOWN_HCA `profile`: force close.
    pub const TEARDOWN_FORCE: u16 = 1;
    /// TEARDOWN_HCA `profile`: prepare fast teardown.
    pub const TEARDOWN_PREPARE_FAST: u16 = 2;

    /// QUERY_VPORT_STATE: VNIC vport.
    pub const VPORT_STATE_VNIC: u16 = 0;
    /// QUERY_VPORT_STATE: e-switch vport.
    pub const VPORT_STATE_ESW: u16 = 1;
    /// QUERY_VPORT_STATE: uplink.
    pub const VPORT_STATE_UPLINK: u16 = 2;

    /// MODIFY_CQ: resize.
    pub const MODIFY_CQ_RESIZE: u16 = 1;

    /// ACCESS_REG `register_id` of HOST_ENDIANNESS (see `ctx::host_endianness_reg`).
    pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
}
