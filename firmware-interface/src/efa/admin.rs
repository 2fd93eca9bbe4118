//! Admin queues (`docs/efa.md#admin-queues`): the 64-byte submission entry, the 64-byte
//! completion entry, the 64-byte async event (AENQ) entry, the 16-byte event queue entry,
//! admin status codes, and the control buffer with its indirect page-list chunks.

use crate::field::{Le16, Le32};

/// Size of every admin submission, completion and AENQ entry.
pub const ENTRY_SIZE: usize = 64;
/// Admin submission and completion queue depth a driver uses (`EFA_ADMIN_QUEUE_DEPTH`).
pub const AQ_DEPTH: u16 = 32;
/// Async event queue depth a driver uses (`EFA_ASYNC_QUEUE_DEPTH`).
pub const AENQ_DEPTH: u16 = 16;
/// Mask of the command id in [`AqEntry::command_id`] / [`AcqEntry::command`] (bits 11:0).
pub const COMMAND_ID_MASK: u16 = 0x0fff;
/// Byte offset of the command-specific data in a submission entry (`inline_data_w4`).
pub const CMD_DATA: usize = 16;
/// Byte offset of the response-specific data in a completion entry.
pub const RESP_DATA: usize = 8;

/// [`AqEntry::flags`] bit 0: phase.
pub const AQ_FLAG_PHASE: u8 = 1 << 0;
/// [`AqEntry::flags`] bit 1: the control buffer (bytes 4..16) is valid.
pub const AQ_FLAG_CTRL_DATA: u8 = 1 << 1;
/// [`AqEntry::flags`] bit 2: the control buffer is a chain of page-list chunks.
pub const AQ_FLAG_CTRL_DATA_INDIRECT: u8 = 1 << 2;
/// [`AcqEntry::flags`] / [`AenqEntry::flags`] bit 0: phase.
pub const PHASE: u8 = 1 << 0;

/// Admin submission entry (`efa_admin_aq_entry`), 64 bytes. Command layouts in
/// [`crate::efa::cmds`] use offsets from byte 0 of this entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AqEntry {
    /// 0x0 bits 11:0 command id (echoed in the completion).
    pub command_id: Le16,
    /// 0x2 admin opcode ([`crate::efa::opcode`]).
    pub opcode: u8,
    /// 0x3 `AQ_FLAG_*`.
    pub flags: u8,
    /// 0x4 control buffer ([`CtrlBuffInfo`]) or inline words 1..3.
    pub ctrl: [u8; 12],
    /// 0x10 command-specific data (`inline_data_w4[12]`).
    pub data: [u8; 48],
}

raw_struct!(AqEntry, 64, [command_id, opcode, flags, ctrl, data]);

impl Default for AqEntry {
    fn default() -> Self {
        Self::from_bytes(&[0; 64])
    }
}

/// Admin completion entry (`efa_admin_acq_entry`), 64 bytes. Response layouts in
/// [`crate::efa::cmds`] use offsets from byte 0 of this entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcqEntry {
    /// 0x0 bits 11:0 the submission's command id.
    pub command: Le16,
    /// 0x2 admin status ([`status`]).
    pub status: u8,
    /// 0x3 bit 0 phase.
    pub flags: u8,
    /// 0x4 extended status (detail, e.g. for ILLEGAL_PARAMETER).
    pub extended_status: Le16,
    /// 0x6 the index of the submission entry the device has consumed.
    pub sq_head_indx: Le16,
    /// 0x8 response-specific data (`response_specific_data[14]`).
    pub data: [u8; 56],
}

raw_struct!(
    AcqEntry,
    64,
    [command, status, flags, extended_status, sq_head_indx, data]
);

impl Default for AcqEntry {
    fn default() -> Self {
        Self::from_bytes(&[0; 64])
    }
}

/// Async event notification entry (`efa_admin_aenq_entry`), 64 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AenqEntry {
    /// 0x0 event group ([`aenq_group`]).
    pub group: Le16,
    /// 0x2 syndrome.
    pub syndrome: Le16,
    /// 0x4 bit 0 phase.
    pub flags: u8,
    /// 0x5 reserved.
    pub rsvd: [u8; 3],
    /// 0x8 timestamp, low word.
    pub timestamp_low: Le32,
    /// 0xc timestamp, high word.
    pub timestamp_high: Le32,
    /// 0x10 inline event data.
    pub data: [u8; 48],
}

raw_struct!(
    AenqEntry,
    64,
    [
        group,
        syndrome,
        flags,
        rsvd,
        timestamp_low,
        timestamp_high,
        data
    ]
);

impl Default for AenqEntry {
    fn default() -> Self {
        Self::from_bytes(&[0; 64])
    }
}

/// AENQ event groups; a group `g` is bit `1 << g` of the AENQ_CONFIG group masks.
pub mod aenq_group {
    /// Fatal error.
    pub const FATAL_ERROR: u16 = 1;
    /// Warning.
    pub const WARNING: u16 = 2;
    /// Notification.
    pub const NOTIFICATION: u16 = 3;
    /// Keep-alive (the device's heartbeat).
    pub const KEEP_ALIVE: u16 = 4;
    /// The groups a driver enables: 1..=4.
    pub const DRIVER_MASK: u32 = 0x1e;
}

/// Event queue entry (`efa_admin_eqe`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Eqe {
    /// 0x0 bit 0 phase, bits 8:1 event type ([`EQE_EVENT_COMPLETION`]).
    pub common: Le32,
    /// 0x4 reserved.
    pub rsvd: Le32,
    /// 0x8 event data; for a completion event `cqn` (u16) at 0x8.
    pub data: [u8; 8],
}

raw_struct!(Eqe, 16, [common, rsvd, data]);

/// Size of an EQE.
pub const EQE_SIZE: usize = 16;
/// [`Eqe::common`] bit 0: phase.
pub const EQE_PHASE: u32 = 1;
/// [`Eqe::common`]: shift of the event type (bits 8:1).
pub const EQE_EVENT_TYPE_SHIFT: u32 = 1;
/// [`Eqe::common`]: mask of the event type after shifting.
pub const EQE_EVENT_TYPE_MASK: u32 = 0xff;
/// Event type: a CQ completion event.
pub const EQE_EVENT_COMPLETION: u32 = 0;

/// Control buffer (`efa_admin_ctrl_buff_info`), 12 bytes: at 0x4 of a submission entry with
/// `AQ_FLAG_CTRL_DATA`, and at the end of each indirect page-list chunk (the link to the
/// next chunk).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CtrlBuffInfo {
    /// 0x0 length in bytes of the buffer (of this chunk's used part when indirect).
    pub length: Le32,
    /// 0x4 DMA address bits 31:0.
    pub addr_lo: Le32,
    /// 0x8 DMA address bits 63:32.
    pub addr_hi: Le32,
}

raw_struct!(CtrlBuffInfo, 12, [length, addr_lo, addr_hi]);

impl CtrlBuffInfo {
    /// The DMA address.
    pub fn addr(&self) -> u64 {
        u64::from(self.addr_hi.get()) << 32 | u64::from(self.addr_lo.get())
    }
}

/// Size of one indirect page-list chunk.
pub const PBL_CHUNK_SIZE: usize = 4096;
/// Page addresses in one chunk: (4096 − 12) / 8.
pub const PBL_CHUNK_ENTRIES: usize = (PBL_CHUNK_SIZE - CtrlBuffInfo::SIZE) / 8;
/// Byte offset of the link ([`CtrlBuffInfo`]) to the next chunk, after the entries.
pub const PBL_CHUNK_LINK: usize = PBL_CHUNK_ENTRIES * 8;
/// The used length of a full chunk (entries and link).
pub const PBL_CHUNK_FULL_LEN: usize = PBL_CHUNK_LINK + CtrlBuffInfo::SIZE;

/// Admin completion status (`efa_admin_aq_completion_status`).
pub mod status {
    /// Success.
    pub const SUCCESS: u8 = 0;
    /// Resource allocation failure (a driver maps it to `ENOMEM`).
    pub const RESOURCE_ALLOCATION_FAILURE: u8 = 1;
    /// Bad opcode.
    pub const BAD_OPCODE: u8 = 2;
    /// Unsupported opcode (a driver maps it to `EOPNOTSUPP`).
    pub const UNSUPPORTED_OPCODE: u8 = 3;
    /// Malformed request.
    pub const MALFORMED_REQUEST: u8 = 4;
    /// Illegal parameter.
    pub const ILLEGAL_PARAMETER: u8 = 5;
    /// Unknown error.
    pub const UNKNOWN_ERROR: u8 = 6;
    /// Resource busy.
    pub const RESOURCE_BUSY: u8 = 7;

    /// The name of a status value, for logs; `None` if unknown.
    pub fn name(status: u8) -> Option<&'static str> {
        Some(match status {
            SUCCESS => "SUCCESS",
            RESOURCE_ALLOCATION_FAILURE => "RESOURCE_ALLOCATION_FAILURE",
            BAD_OPCODE => "BAD_OPCODE",
            UNSUPPORTED_OPCODE => "UNSUPPORTED_OPCODE",
            MALFORMED_REQUEST => "MALFORMED_REQUEST",
            ILLEGAL_PARAMETER => "ILLEGAL_PARAMETER",
            UNKNOWN_ERROR => "UNKNOWN_ERROR",
            RESOURCE_BUSY => "RESOURCE_BUSY",
            _ => return None,
        })
    }
}
