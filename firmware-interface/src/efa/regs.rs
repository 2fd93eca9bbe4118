//! BAR0 registers (`docs/efa.md#bar0-registers`) and the read-less register-read response
//! (`docs/efa.md#read-less-register-reads`).
//!
//! Every register is 32 bits, little-endian. The driver never loads from BAR0: reads go
//! through [`MMIO_REG_READ`] and the device DMA-writes a [`ReadlessResp`]. Register fields
//! are [`LeField`]s on the register value (`FIELD.of(v)`, `FIELD.val(x)`).

use crate::field::{Le16, Le32, LeField};

/// `VERSION` (RO): admin API version, [`version`] fields.
pub const VERSION: usize = 0x00;
/// `CONTROLLER_VERSION` (RO): [`controller_version`] fields.
pub const CONTROLLER_VERSION: usize = 0x04;
/// `CAPS` (RO): [`caps`] fields.
pub const CAPS: usize = 0x08;
/// `AQ_BASE_LO` (WO): admin submission queue DMA address bits 31:0.
pub const AQ_BASE_LO: usize = 0x10;
/// `AQ_BASE_HI` (WO): admin submission queue DMA address bits 63:32.
pub const AQ_BASE_HI: usize = 0x14;
/// `AQ_CAPS` (WO): [`aq_caps`] fields.
pub const AQ_CAPS: usize = 0x18;
/// `ACQ_BASE_LO` (WO): admin completion queue DMA address bits 31:0.
pub const ACQ_BASE_LO: usize = 0x20;
/// `ACQ_BASE_HI` (WO): admin completion queue DMA address bits 63:32.
pub const ACQ_BASE_HI: usize = 0x24;
/// `ACQ_CAPS` (WO): [`acq_caps`] fields.
pub const ACQ_CAPS: usize = 0x28;
/// `AQ_PROD_DB` (WO): the driver's running (unmasked, 16-bit) admin producer counter.
pub const AQ_PROD_DB: usize = 0x2c;
/// `AENQ_CAPS` (WO): [`aenq_caps`] fields.
pub const AENQ_CAPS: usize = 0x34;
/// `AENQ_BASE_LO` (WO): async event queue DMA address bits 31:0.
pub const AENQ_BASE_LO: usize = 0x38;
/// `AENQ_BASE_HI` (WO): async event queue DMA address bits 63:32.
pub const AENQ_BASE_HI: usize = 0x3c;
/// `AENQ_CONS_DB` (WO): the driver's running async event consumer counter.
pub const AENQ_CONS_DB: usize = 0x40;
/// `INTR_MASK` (WO): bit 0 set masks the admin interrupt (polling mode).
pub const INTR_MASK: usize = 0x4c;
/// `DEV_CTL` (WO): [`dev_ctl`] fields.
pub const DEV_CTL: usize = 0x54;
/// `DEV_STS` (RO): [`dev_sts`] fields.
pub const DEV_STS: usize = 0x58;
/// `MMIO_REG_READ` (WO): [`mmio_reg_read`] fields; starts a read-less register read.
pub const MMIO_REG_READ: usize = 0x5c;
/// `MMIO_RESP_LO` (WO): read-less response buffer DMA address bits 31:0.
pub const MMIO_RESP_LO: usize = 0x60;
/// `MMIO_RESP_HI` (WO): read-less response buffer DMA address bits 63:32.
pub const MMIO_RESP_HI: usize = 0x64;
/// `EQ_DB` (WO): [`eq_db`] fields (event-queue doorbell).
pub const EQ_DB: usize = 0x68;
/// One past the last defined register.
pub const END: usize = 0x6c;

/// Every register as `(name, offset, read-only)`, in address order.
pub const REGISTERS: &[(&str, usize, bool)] = &[
    ("VERSION", VERSION, true),
    ("CONTROLLER_VERSION", CONTROLLER_VERSION, true),
    ("CAPS", CAPS, true),
    ("AQ_BASE_LO", AQ_BASE_LO, false),
    ("AQ_BASE_HI", AQ_BASE_HI, false),
    ("AQ_CAPS", AQ_CAPS, false),
    ("ACQ_BASE_LO", ACQ_BASE_LO, false),
    ("ACQ_BASE_HI", ACQ_BASE_HI, false),
    ("ACQ_CAPS", ACQ_CAPS, false),
    ("AQ_PROD_DB", AQ_PROD_DB, false),
    ("AENQ_CAPS", AENQ_CAPS, false),
    ("AENQ_BASE_LO", AENQ_BASE_LO, false),
    ("AENQ_BASE_HI", AENQ_BASE_HI, false),
    ("AENQ_CONS_DB", AENQ_CONS_DB, false),
    ("INTR_MASK", INTR_MASK, false),
    ("DEV_CTL", DEV_CTL, false),
    ("DEV_STS", DEV_STS, true),
    ("MMIO_REG_READ", MMIO_REG_READ, false),
    ("MMIO_RESP_LO", MMIO_RESP_LO, false),
    ("MMIO_RESP_HI", MMIO_RESP_HI, false),
    ("EQ_DB", EQ_DB, false),
];

/// The register at `off`, if one is defined there: `(name, read-only)`.
pub fn lookup(off: usize) -> Option<(&'static str, bool)> {
    REGISTERS
        .iter()
        .find(|r| r.1 == off)
        .map(|&(name, _, ro)| (name, ro))
}

/// `VERSION` fields.
pub mod version {
    use super::LeField;
    /// Minor admin API version.
    pub const MINOR: LeField = LeField::bits(0, 7, 0);
    /// Major admin API version.
    pub const MAJOR: LeField = LeField::bits(0, 15, 8);
    /// The lowest version a driver accepts: (major, minor) = (0, 1).
    pub const MIN: (u32, u32) = (0, 1);
}

/// `CONTROLLER_VERSION` fields.
pub mod controller_version {
    use super::LeField;
    /// Sub-minor.
    pub const SUBMINOR: LeField = LeField::bits(0, 7, 0);
    /// Minor.
    pub const MINOR: LeField = LeField::bits(0, 15, 8);
    /// Major.
    pub const MAJOR: LeField = LeField::bits(0, 23, 16);
    /// Implementation id (ignored by drivers).
    pub const IMPL_ID: LeField = LeField::bits(0, 31, 24);
    /// The lowest (major, minor, subminor) a driver accepts.
    pub const MIN: (u32, u32, u32) = (0, 0, 1);
}

/// `CAPS` fields.
pub mod caps {
    use super::LeField;
    /// Queues must be physically contiguous.
    pub const CONTIGUOUS_QUEUE_REQUIRED: LeField = LeField::bits(0, 0, 0);
    /// Reset timeout in 100 ms units; must be non-zero.
    pub const RESET_TIMEOUT: LeField = LeField::bits(0, 5, 1);
    /// DMA address width in bits (32..=64).
    pub const DMA_ADDR_WIDTH: LeField = LeField::bits(0, 15, 8);
    /// Admin command timeout in 100 ms units (0 = the driver's default of 30 s).
    pub const ADMIN_CMD_TO: LeField = LeField::bits(0, 19, 16);
    /// Unit of [`RESET_TIMEOUT`] and [`ADMIN_CMD_TO`], in milliseconds.
    pub const TIMEOUT_UNIT_MS: u32 = 100;
}

/// `AQ_CAPS` fields.
pub mod aq_caps {
    use super::LeField;
    /// Depth in entries.
    pub const DEPTH: LeField = LeField::bits(0, 15, 0);
    /// Entry size in bytes.
    pub const ENTRY_SIZE: LeField = LeField::bits(0, 31, 16);
}

/// `ACQ_CAPS` fields.
pub mod acq_caps {
    use super::LeField;
    /// Depth in entries.
    pub const DEPTH: LeField = LeField::bits(0, 15, 0);
    /// Entry size in bytes.
    pub const ENTRY_SIZE: LeField = LeField::bits(0, 23, 16);
    /// MSI-X vector of admin completions.
    pub const VECTOR: LeField = LeField::bits(0, 31, 24);
}

/// `AENQ_CAPS` fields.
pub mod aenq_caps {
    use super::LeField;
    /// Depth in entries.
    pub const DEPTH: LeField = LeField::bits(0, 15, 0);
    /// Entry size in bytes.
    pub const ENTRY_SIZE: LeField = LeField::bits(0, 23, 16);
    /// MSI-X vector of async events.
    pub const VECTOR: LeField = LeField::bits(0, 31, 24);
}

/// `INTR_MASK` fields.
pub mod intr_mask {
    use super::LeField;
    /// 1 = admin interrupt masked (polling mode).
    pub const EN: LeField = LeField::bits(0, 0, 0);
}

/// `DEV_CTL` fields.
pub mod dev_ctl {
    use super::LeField;
    /// Assert a device reset (write 1, then 0 once `reset_in_progress` reads 1).
    pub const DEV_RESET: LeField = LeField::bits(0, 0, 0);
    /// Restart the admin queue.
    pub const AQ_RESTART: LeField = LeField::bits(0, 1, 1);
    /// Reason of the reset ([`super::reset_reason`]).
    pub const RESET_REASON: LeField = LeField::bits(0, 31, 28);
}

/// `DEV_STS` fields.
pub mod dev_sts {
    use super::LeField;
    /// The device is ready.
    pub const READY: LeField = LeField::bits(0, 0, 0);
    /// An admin queue restart is in progress.
    pub const AQ_RESTART_IN_PROGRESS: LeField = LeField::bits(0, 1, 1);
    /// An admin queue restart finished.
    pub const AQ_RESTART_FINISHED: LeField = LeField::bits(0, 2, 2);
    /// A reset is in progress (`DEV_CTL.dev_reset` held at 1).
    pub const RESET_IN_PROGRESS: LeField = LeField::bits(0, 3, 3);
    /// A reset finished.
    pub const RESET_FINISHED: LeField = LeField::bits(0, 4, 4);
    /// The device hit a fatal error.
    pub const FATAL_ERROR: LeField = LeField::bits(0, 5, 5);
}

/// `MMIO_REG_READ` fields.
pub mod mmio_reg_read {
    use super::LeField;
    /// Request id the device echoes in [`super::ReadlessResp::req_id`].
    pub const REQ_ID: LeField = LeField::bits(0, 15, 0);
    /// BAR0 offset of the register to read.
    pub const REG_OFF: LeField = LeField::bits(0, 31, 16);
}

/// `EQ_DB` fields.
pub mod eq_db {
    use super::LeField;
    /// EQ number.
    pub const EQN: LeField = LeField::bits(0, 15, 0);
    /// Arm the EQ (raise an interrupt on the next event).
    pub const ARM: LeField = LeField::bits(0, 31, 31);
}

/// CQ doorbell fields (a per-CQ register in the doorbell BAR, at the CREATE_CQ `db_offset`).
pub mod cq_db {
    use super::LeField;
    /// Consumer index (16 bits, running).
    pub const CONSUMER_INDEX: LeField = LeField::bits(0, 15, 0);
    /// Command sequence number (counts consumed CQ events).
    pub const CMD_SN: LeField = LeField::bits(0, 30, 29);
    /// Arm for one completion event.
    pub const ARM: LeField = LeField::bits(0, 31, 31);
}

/// Reset reasons (`DEV_CTL.reset_reason`).
pub mod reset_reason {
    /// Normal reset (probe, remove).
    pub const NORMAL: u32 = 0;
    /// Keep-alive timeout.
    pub const KEEP_ALIVE_TO: u32 = 1;
    /// Admin command timeout.
    pub const ADMIN_TO: u32 = 2;
    /// Initialization error.
    pub const INIT_ERR: u32 = 3;
    /// Driver in an invalid state.
    pub const DRIVER_INVALID_STATE: u32 = 4;
    /// Operating-system trigger.
    pub const OS_TRIGGER: u32 = 5;
    /// Shutdown.
    pub const SHUTDOWN: u32 = 6;
    /// User trigger.
    pub const USER_TRIGGER: u32 = 7;
    /// Generic.
    pub const GENERIC: u32 = 8;
}

/// The 8-byte read-less response the device DMA-writes for each `MMIO_REG_READ`
/// (`efa_admin_mmio_req_read_less_resp`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ReadlessResp {
    /// 0x0 the request id of the read (the driver polls for it).
    pub req_id: Le16,
    /// 0x2 the register offset read.
    pub reg_off: Le16,
    /// 0x4 the register value.
    pub reg_val: Le32,
}

raw_struct!(ReadlessResp, 8, [req_id, reg_off, reg_val]);

/// The value a driver returns for a read-less read that timed out or came back wrong.
pub const READ_FAILED: u32 = 0xffff_ffff;
/// The driver's default read-less timeout, in microseconds.
pub const READ_TIMEOUT_US: u32 = 50_000;
