//! NVMe completion status.
//!
//! A [`Status`] holds the value the way Linux stores it: `SCT << 8 | SC`, plus the flag bits
//! CRD (12:11, 0x1800), MORE (0x2000) and DNR (0x4000). On the wire (completion queue entry
//! bytes 14-15) the same value is shifted left by one: bit 0 of the wire field is the phase
//! tag.

use core::fmt;

/// A completion status: status code type, status code and the CRD / MORE / DNR flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u16);

impl Status {
    /// Do Not Retry: the same command would fail again.
    pub const DNR_BIT: u16 = 0x4000;
    /// More information is in the Error Information log page.
    pub const MORE_BIT: u16 = 0x2000;
    /// Command Retry Delay index (bits 12:11 of this value).
    pub const CRD_MASK: u16 = 0x1800;

    // Generic command status (SCT 0).
    /// Successful completion.
    pub const SUCCESS: Status = Status(0x000);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Status = Status(0x001);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Status = Status(0x002);
    /// Command ID Conflict.
    pub const CID_CONFLICT: Status = Status(0x003);
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Status = Status(0x004);
    /// Internal Error.
    pub const INTERNAL_ERROR: Status = Status(0x006);
    /// Command Abort Requested.
    pub const ABORT_REQUESTED: Status = Status(0x007);
    /// Invalid Namespace or Format.
    pub const INVALID_NS: Status = Status(0x00B);
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE_ERROR: Status = Status(0x00C);
    /// Invalid SGL Segment Descriptor.
    pub const SGL_INVALID_SEGMENT: Status = Status(0x00D);
    /// Invalid Number of SGL Descriptors.
    pub const SGL_INVALID_COUNT: Status = Status(0x00E);
    /// Data SGL Length Invalid.
    pub const SGL_INVALID_DATA_LENGTH: Status = Status(0x00F);
    /// SGL Descriptor Type Invalid.
    pub const SGL_INVALID_TYPE: Status = Status(0x011);
    /// SGL Offset Invalid.
    pub const SGL_INVALID_OFFSET: Status = Status(0x016);
    /// Keep Alive Timer Expired.
    pub const KEEP_ALIVE_EXPIRED: Status = Status(0x019);
    /// Keep Alive Timeout Invalid.
    pub const KEEP_ALIVE_INVALID: Status = Status(0x01A);
    /// LBA Out of Range (NVM command set).
    pub const LBA_RANGE: Status = Status(0x080);
    /// Capacity Exceeded.
    pub const CAPACITY_EXCEEDED: Status = Status(0x081);
    /// Namespace Not Ready (transient: no DNR).
    pub const NS_NOT_READY: Status = Status(0x082);

    // Command specific status (SCT 1).
    /// Invalid Queue Identifier.
    pub const INVALID_QUEUE_ID: Status = Status(0x101);
    /// Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: Status = Status(0x102);
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT_EXCEEDED: Status = Status(0x105);
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Status = Status(0x109);
    /// Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Status = Status(0x10D);
    /// Feature Not Changeable.
    pub const FEATURE_NOT_CHANGEABLE: Status = Status(0x10E);
    /// Fabrics Connect: Incompatible Format (RECFMT).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status(0x180);
    /// Fabrics Connect: Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status(0x181);
    /// Fabrics Connect: Invalid Parameters (detail in DW0: IATTR bit 16, byte offset 15:0).
    pub const CONNECT_INVALID_PARAMETERS: Status = Status(0x182);
    /// Fabrics Connect: Restart Discovery.
    pub const CONNECT_RESTART_DISCOVERY: Status = Status(0x183);
    /// Fabrics Connect: Invalid Host.
    pub const CONNECT_INVALID_HOST: Status = Status(0x184);
    /// Fabrics: Authentication Required.
    pub const AUTH_REQUIRED: Status = Status(0x191);
    /// NVM: Attempted Write to Read Only Range (same code as Connect Invalid Parameters,
    /// meaning depends on the command).
    pub const WRITE_TO_READ_ONLY: Status = Status(0x182);

    // Media and data integrity errors (SCT 2).
    /// Write Fault.
    pub const WRITE_FAULT: Status = Status(0x280);
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ_ERROR: Status = Status(0x281);

    /// The same status with DNR set.
    pub const fn dnr(self) -> Status {
        Status(self.0 | Self::DNR_BIT)
    }

    /// The same status with MORE set.
    pub const fn more(self) -> Status {
        Status(self.0 | Self::MORE_BIT)
    }

    /// Status code type (3 bits).
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }

    /// Status code (8 bits).
    pub const fn sc(self) -> u8 {
        (self.0 & 0xFF) as u8
    }

    /// `SCT << 8 | SC` without the flags: compare against the constants with this.
    pub const fn code(self) -> Status {
        Status(self.0 & 0x7FF)
    }

    /// Whether DNR is set.
    pub const fn is_dnr(self) -> bool {
        self.0 & Self::DNR_BIT != 0
    }

    /// Whether MORE is set.
    pub const fn is_more(self) -> bool {
        self.0 & Self::MORE_BIT != 0
    }

    /// Whether this is a successful completion (code 0, flags ignored).
    pub const fn is_success(self) -> bool {
        self.0 & 0x7FF == 0
    }

    /// The 16-bit wire field of a completion queue entry with the given phase tag.
    pub const fn to_wire(self, phase: bool) -> u16 {
        ((self.0 & 0x7FFF) << 1) | phase as u16
    }

    /// Splits a 16-bit wire field into the status and the phase tag.
    pub const fn from_wire(v: u16) -> (Status, bool) {
        (Status(v >> 1), v & 1 != 0)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status({:#05x}", self.0 & 0x7FF)?;
        if self.is_more() {
            f.write_str("|MORE")?;
        }
        if self.is_dnr() {
            f.write_str("|DNR")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_is_shifted_by_one() {
        let s = Status::CONNECT_INVALID_PARAMETERS.dnr();
        assert_eq!(s.0, 0x4182);
        assert_eq!(s.to_wire(false), 0x8304);
        assert_eq!(Status::from_wire(0x8305), (s, true));
        assert_eq!(s.sct(), 1);
        assert_eq!(s.sc(), 0x82);
        assert_eq!(s.code(), Status::CONNECT_INVALID_PARAMETERS);
        assert!(s.is_dnr() && !s.is_success());
    }
}
