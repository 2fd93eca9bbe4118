//! Event queue entries (`docs/mlx5.md#event-queue-entries`).

/// Size of an EQE.
pub const SIZE: usize = 64;
/// Initial `owner` byte of every EQE (`MLX5_EQE_OWNER_INIT_VAL`).
pub const OWNER_INIT: u8 = 1;
/// Byte offset of `type` in an EQE.
pub const TYPE: usize = 0x01;
/// Byte offset of `sub_type` in an EQE.
pub const SUB_TYPE: usize = 0x03;
/// Byte offset of the 28-byte event data.
pub const DATA: usize = 0x20;
/// Byte offset of `signature`.
pub const SIGNATURE: usize = 0x3e;
/// Byte offset of `owner` (bit 0).
pub const OWNER: usize = 0x3f;

/// COMP: BE32 `cqn` (low 24 bits).
pub const COMP_CQN: usize = 0x38;
/// CMD: BE32 bitmask of completed command slots.
pub const CMD_VECTOR: usize = 0x20;
/// PAGE_REQUEST: BE16 `ec_function` (bit 15 EC function, bit 14 release all).
pub const PAGE_REQ_EC_FUNCTION: usize = 0x20;
/// PAGE_REQUEST: BE16 `func_id`.
pub const PAGE_REQ_FUNC_ID: usize = 0x22;
/// PAGE_REQUEST: signed BE32 `num_pages` (> 0 give, < 0 take back).
pub const PAGE_REQ_NUM_PAGES: usize = 0x24;
/// PAGE_REQUEST `ec_function` bit: embedded-CPU function.
pub const PAGE_REQ_EC_BIT: u16 = 1 << 15;
/// PAGE_REQUEST `ec_function` bit: release all pages.
pub const PAGE_REQ_RELEASE_ALL_BIT: u16 = 1 << 14;
/// CQ_ERROR: BE32 `cqn` (low 24 bits).
pub const CQ_ERR_CQN: usize = 0x20;
/// CQ_ERROR: u8 syndrome.
pub const CQ_ERR_SYNDROME: usize = 0x2b;
/// QP/SRQ events: u8 resource type (`RES_*`).
pub const QP_EVENT_TYPE: usize = 0x34;
/// QP/SRQ events: BE32 `qp_srq_n` (low 24 bits).
pub const QP_EVENT_QPN: usize = 0x38;
/// PORT_CHANGE: port number in the high nibble of this byte.
pub const PORT_CHANGE_PORT: usize = 0x28;
/// PORT_CHANGE: shift of the port number in its byte.
pub const PORT_CHANGE_PORT_SHIFT: u8 = 4;

/// QP/SRQ event resource type: QP.
pub const RES_QP: u8 = 0;
/// QP/SRQ event resource type: RQ.
pub const RES_RQ: u8 = 1;
/// QP/SRQ event resource type: SQ.
pub const RES_SQ: u8 = 2;
/// QP/SRQ event resource type: DCT.
pub const RES_DCT: u8 = 6;

/// PORT_CHANGE `sub_type`: port down.
pub const PORT_DOWN: u8 = 1;
/// PORT_CHANGE `sub_type`: port active.
pub const PORT_ACTIVE: u8 = 4;
/// PORT_CHANGE `sub_type`: initialized.
pub const PORT_INITIALIZED: u8 = 5;
/// PORT_CHANGE `sub_type`: LID change.
pub const PORT_LID: u8 = 6;
/// PORT_CHANGE `sub_type`: P_Key change.
pub const PORT_PKEY: u8 = 7;
/// PORT_CHANGE `sub_type`: GUID change.
pub const PORT_GUID: u8 = 8;
/// PORT_CHANGE `sub_type`: client re-register.
pub const PORT_CLIENT_REREG: u8 = 9;

/// Event types (`device.h enum mlx5_event`); CREATE_EQ mask bit = `1 << type`.
pub mod event {
    /// Completion.
    pub const COMP: u8 = 0x00;
    /// Path migrated.
    pub const PATH_MIG: u8 = 0x01;
    /// Communication established.
    pub const COMM_EST: u8 = 0x02;
    /// Send queue drained.
    pub const SQ_DRAINED: u8 = 0x03;
    /// CQ error.
    pub const CQ_ERROR: u8 = 0x04;
    /// WQ catastrophic error.
    pub const WQ_CATAS_ERROR: u8 = 0x05;
    /// Path migration failed.
    pub const PATH_MIG_FAILED: u8 = 0x07;
    /// Internal error.
    pub const INTERNAL_ERROR: u8 = 0x08;
    /// Port state change.
    pub const PORT_CHANGE: u8 = 0x09;
    /// Command completion.
    pub const CMD: u8 = 0x0a;
    /// Firmware page request.
    pub const PAGE_REQUEST: u8 = 0x0b;
    /// Page fault (ODP).
    pub const PAGE_FAULT: u8 = 0x0c;
    /// NIC vport change.
    pub const NIC_VPORT_CHANGE: u8 = 0x0d;
    /// E-switch functions changed.
    pub const ESW_FUNCTIONS_CHANGED: u8 = 0x0e;
    /// vHCA state change.
    pub const VHCA_STATE_CHANGE: u8 = 0x0f;
    /// WQ invalid request error.
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    /// WQ access error.
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    /// SRQ catastrophic error.
    pub const SRQ_CATAS_ERROR: u8 = 0x12;
    /// SRQ last WQE reached.
    pub const SRQ_LAST_WQE: u8 = 0x13;
    /// SRQ limit reached.
    pub const SRQ_RQ_LIMIT: u8 = 0x14;
    /// GPIO.
    pub const GPIO: u8 = 0x15;
    /// Port module.
    pub const PORT_MODULE: u8 = 0x16;
    /// Temperature warning.
    pub const TEMP_WARN: u8 = 0x17;
    /// XRQ error.
    pub const XRQ_ERROR: u8 = 0x18;
    /// Remote configuration.
    pub const REMOTE_CONFIG: u8 = 0x19;
    /// Doorbell/BlueFlame congestion.
    pub const DB_BF_CONGESTION: u8 = 0x1a;
    /// Stall.
    pub const STALL: u8 = 0x1b;
    /// DCT drained.
    pub const DCT_DRAINED: u8 = 0x1c;
    /// DCT key violation.
    pub const DCT_KEY_VIOLATION: u8 = 0x1d;
    /// FPGA error.
    pub const FPGA_ERROR: u8 = 0x20;
    /// FPGA QP error.
    pub const FPGA_QP_ERROR: u8 = 0x21;
    /// General event.
    pub const GENERAL_EVENT: u8 = 0x22;
    /// Monitor counter.
    pub const MONITOR_COUNTER: u8 = 0x24;
    /// PPS.
    pub const PPS: u8 = 0x25;
    /// Device tracer.
    pub const DEVICE_TRACER: u8 = 0x26;
    /// Object change.
    pub const OBJECT_CHANGE: u8 = 0x27;

    /// The CREATE_EQ `event_bitmask` word-0 bit for an event type below 64.
    pub const fn mask(event: u8) -> u64 {
        1u64 << (event & 63)
    }
}

/// 64-byte EQE (`mlx5_eqe`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Eqe {
    /// 0x00 reserved.
    pub rsvd0: u8,
    /// 0x01 event type (see [`event`]).
    pub type_: u8,
    /// 0x02 reserved.
    pub rsvd1: u8,
    /// 0x03 event sub type.
    pub sub_type: u8,
    /// 0x04..0x1f reserved.
    pub rsvd2: [u8; 28],
    /// 0x20..0x3b event data.
    pub data: [u8; 28],
    /// 0x3c..0x3d reserved.
    pub rsvd3: [u8; 2],
    /// 0x3e signature.
    pub signature: u8,
    /// 0x3f owner (bit 0).
    pub owner: u8,
}
raw_struct!(
    Eqe,
    64,
    [
        rsvd0, type_, rsvd1, sub_type, rsvd2, data, rsvd3, signature, owner
    ]
);
