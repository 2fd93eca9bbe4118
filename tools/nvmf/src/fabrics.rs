//! Fabrics commands (opcode 0x7F): Connect and its 1024-byte data, Property Get / Set,
//! Disconnect; and the controller properties they reach (CAP, VS, CC, CSTS, NSSR).

use alloc::string::String;

use crate::capsule::Sqe;
use crate::wire::{get_nul_str, get_u16, put_str, put_u16};

/// The Fabrics opcode.
pub const OPCODE_FABRICS: u8 = 0x7F;
/// FCTYPE Property Set.
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
/// FCTYPE Connect.
pub const FCTYPE_CONNECT: u8 = 0x01;
/// FCTYPE Property Get.
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// FCTYPE Authentication Send.
pub const FCTYPE_AUTH_SEND: u8 = 0x05;
/// FCTYPE Authentication Receive.
pub const FCTYPE_AUTH_RECEIVE: u8 = 0x06;
/// FCTYPE Disconnect (newer definitions; advertised by Identify OFCS bit 0).
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// Size of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Size of an NQN field.
pub const NQN_FIELD_LEN: usize = 256;
/// Longest NQN Linux accepts (characters, without the terminating NUL).
pub const NQN_MAX_LEN: usize = 222;
/// Connect CNTLID asking for a dynamic controller.
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Highest controller id a subsystem hands out.
pub const CNTLID_MAX: u16 = 0xFFEF;
/// Connect CATTR bit 2: disable submission queue flow control (SQHD 0xFFFF).
pub const CATTR_DISABLE_SQ_FLOW: u8 = 0x04;
/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Connect command (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Connect {
    /// Bytes 40-41: record format (0).
    pub recfmt: u16,
    /// Bytes 42-43: queue id.
    pub qid: u16,
    /// Bytes 44-45: submission queue size (0-based).
    pub sqsize: u16,
    /// Byte 46: connect attributes (bit 2: disable SQ flow control).
    pub cattr: u8,
    /// Bytes 48-51: keep alive timeout in milliseconds (admin queue only).
    pub kato: u32,
}

impl Connect {
    /// Reads the Connect fields of an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Connect {
        Connect {
            recfmt: sqe.cdw10 as u16,
            qid: (sqe.cdw10 >> 16) as u16,
            sqsize: sqe.cdw11 as u16,
            cattr: (sqe.cdw11 >> 16) as u8,
            kato: sqe.cdw12,
        }
    }

    /// An SQE carrying this Connect (command id and SGL left to the caller).
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(OPCODE_FABRICS);
        s.nsid = u32::from(FCTYPE_CONNECT);
        s.cdw10 = u32::from(self.recfmt) | (u32::from(self.qid) << 16);
        s.cdw11 = u32::from(self.sqsize) | (u32::from(self.cattr) << 16);
        s.cdw12 = self.kato;
        s
    }
}

/// Where a Connect parameter error lies, reported in the completion's DW0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectErrorLocation {
    /// A byte offset into the SQE.
    Sqe(u16),
    /// A byte offset into the Connect data.
    Data(u16),
}

impl ConnectErrorLocation {
    /// Offset of the Connect data's CNTLID.
    pub const CNTLID: ConnectErrorLocation = ConnectErrorLocation::Data(16);
    /// Offset of the Connect data's SUBNQN.
    pub const SUBNQN: ConnectErrorLocation = ConnectErrorLocation::Data(256);
    /// Offset of the Connect data's HOSTNQN.
    pub const HOSTNQN: ConnectErrorLocation = ConnectErrorLocation::Data(512);
    /// Offset of the SQE's QID.
    pub const QID: ConnectErrorLocation = ConnectErrorLocation::Sqe(42);
    /// Offset of the SQE's SQSIZE.
    pub const SQSIZE: ConnectErrorLocation = ConnectErrorLocation::Sqe(44);

    /// DW0: IATTR (bit 16: 1 = data, 0 = SQE) and the byte offset (15:0).
    pub fn to_dw0(self) -> u32 {
        match self {
            ConnectErrorLocation::Sqe(o) => u32::from(o),
            ConnectErrorLocation::Data(o) => (1 << 16) | u32::from(o),
        }
    }

    /// From DW0.
    pub fn from_dw0(v: u32) -> ConnectErrorLocation {
        if v & (1 << 16) != 0 {
            ConnectErrorLocation::Data(v as u16)
        } else {
            ConnectErrorLocation::Sqe(v as u16)
        }
    }
}

/// The Connect command's 1024-byte data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnectData {
    /// Bytes 0-15: host identifier.
    pub hostid: [u8; 16],
    /// Bytes 16-17: controller id (0xFFFF on the admin queue).
    pub cntlid: u16,
    /// Bytes 256-511: subsystem NQN.
    pub subnqn: String,
    /// Bytes 512-767: host NQN.
    pub hostnqn: String,
}

/// Why the Connect data could not be read, with the offset to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectDataError {
    /// The data is not 1024 bytes.
    Length,
    /// An NQN field has no terminator, is not UTF-8, is empty or too long.
    BadNqn(ConnectErrorLocation),
}

impl ConnectData {
    /// Decodes the data.
    pub fn decode(b: &[u8]) -> Result<ConnectData, ConnectDataError> {
        if b.len() != CONNECT_DATA_LEN {
            return Err(ConnectDataError::Length);
        }
        let nqn = |off: usize, loc| {
            get_nul_str(&b[off..off + NQN_FIELD_LEN])
                .filter(|s| !s.is_empty() && s.len() <= NQN_MAX_LEN)
                .map(String::from)
                .ok_or(ConnectDataError::BadNqn(loc))
        };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[..16]);
        Ok(ConnectData {
            hostid,
            cntlid: get_u16(b, 16),
            subnqn: nqn(256, ConnectErrorLocation::SUBNQN)?,
            hostnqn: nqn(512, ConnectErrorLocation::HOSTNQN)?,
        })
    }

    /// Encodes to 1024 bytes; NQNs longer than 255 bytes are cut (the target then refuses
    /// them).
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[..16].copy_from_slice(&self.hostid);
        put_u16(&mut b, 16, self.cntlid);
        put_str(&mut b, 256, NQN_FIELD_LEN - 1, &self.subnqn, 0);
        put_str(&mut b, 512, NQN_FIELD_LEN - 1, &self.hostnqn, 0);
        b
    }
}

/// Property offsets.
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
    /// Controller Ready Timeouts (4 bytes).
    pub const CRTO: u32 = 0x68;
}

/// Property Get (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PropertyGet {
    /// Byte 40 bit 0: 8-byte property.
    pub size8: bool,
    /// Bytes 44-47: property offset.
    pub offset: u32,
}

impl PropertyGet {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> PropertyGet {
        PropertyGet {
            size8: s.cdw10 & 1 != 0,
            offset: s.cdw11,
        }
    }

    /// An SQE for this command.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(OPCODE_FABRICS);
        s.nsid = u32::from(FCTYPE_PROPERTY_GET);
        s.cdw10 = u32::from(self.size8);
        s.cdw11 = self.offset;
        s
    }
}

/// Property Set (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PropertySet {
    /// Byte 40 bit 0: 8-byte property.
    pub size8: bool,
    /// Bytes 44-47: property offset.
    pub offset: u32,
    /// Bytes 48-55: value.
    pub value: u64,
}

impl PropertySet {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> PropertySet {
        PropertySet {
            size8: s.cdw10 & 1 != 0,
            offset: s.cdw11,
            value: u64::from(s.cdw12) | (u64::from(s.cdw13) << 32),
        }
    }

    /// An SQE for this command.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(OPCODE_FABRICS);
        s.nsid = u32::from(FCTYPE_PROPERTY_SET);
        s.cdw10 = u32::from(self.size8);
        s.cdw11 = self.offset;
        s.cdw12 = self.value as u32;
        s.cdw13 = (self.value >> 32) as u32;
        s
    }
}

/// Disconnect (SQE fields): RECFMT in bytes 40-41.
pub fn disconnect_sqe() -> Sqe {
    let mut s = Sqe::new(OPCODE_FABRICS);
    s.nsid = u32::from(FCTYPE_DISCONNECT);
    s
}

/// Controller Capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// MQES (15:0): largest queue size, 0-based.
    pub const fn mqes(self) -> u16 {
        self.0 as u16
    }
    /// TO (31:24): worst-case ready time in 500 ms units.
    pub const fn to(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// DSTRD (35:32).
    pub const fn dstrd(self) -> u8 {
        ((self.0 >> 32) & 0xF) as u8
    }
    /// NSSRS (36): NVM subsystem reset supported.
    pub const fn nssrs(self) -> bool {
        self.0 & (1 << 36) != 0
    }
    /// CSS (44:37); bit 0 of this field (bit 37) = NVM command set.
    pub const fn css(self) -> u8 {
        (self.0 >> 37) as u8
    }
    /// MPSMIN (51:48).
    pub const fn mpsmin(self) -> u8 {
        ((self.0 >> 48) & 0xF) as u8
    }
    /// MPSMAX (55:52).
    pub const fn mpsmax(self) -> u8 {
        ((self.0 >> 52) & 0xF) as u8
    }
    /// CRWMS (59).
    pub const fn crwms(self) -> bool {
        self.0 & (1 << 59) != 0
    }
    /// Builds a CAP with MQES, TO and the NVM command set only (MPSMIN = MPSMAX = 0).
    pub const fn new(mqes: u16, to: u8) -> Cap {
        Cap(mqes as u64 | ((to as u64) << 24) | (1 << 37))
    }
}

/// Controller Configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// The value a Linux host writes to enable an NVM-only controller: IOSQES 6, IOCQES 4,
    /// EN 1.
    pub const LINUX_ENABLE: Cc = Cc(0x0046_0001);
    /// EN (0).
    pub const fn en(self) -> bool {
        self.0 & 1 != 0
    }
    /// CSS (6:4).
    pub const fn css(self) -> u8 {
        ((self.0 >> 4) & 0x7) as u8
    }
    /// MPS (10:7).
    pub const fn mps(self) -> u8 {
        ((self.0 >> 7) & 0xF) as u8
    }
    /// AMS (13:11).
    pub const fn ams(self) -> u8 {
        ((self.0 >> 11) & 0x7) as u8
    }
    /// SHN (15:14).
    pub const fn shn(self) -> u8 {
        ((self.0 >> 14) & 0x3) as u8
    }
    /// IOSQES (19:16).
    pub const fn iosqes(self) -> u8 {
        ((self.0 >> 16) & 0xF) as u8
    }
    /// IOCQES (23:20).
    pub const fn iocqes(self) -> u8 {
        ((self.0 >> 20) & 0xF) as u8
    }
}

/// Controller Status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Csts(pub u32);

impl Csts {
    /// RDY (0).
    pub const RDY: u32 = 1;
    /// CFS (1): controller fatal status.
    pub const CFS: u32 = 2;
    /// SHST (3:2) = 10b: shutdown complete.
    pub const SHST_COMPLETE: u32 = 2 << 2;
    /// SHST mask.
    pub const SHST_MASK: u32 = 3 << 2;
    /// RDY.
    pub const fn rdy(self) -> bool {
        self.0 & Self::RDY != 0
    }
    /// CFS.
    pub const fn cfs(self) -> bool {
        self.0 & Self::CFS != 0
    }
    /// SHST (3:2).
    pub const fn shst(self) -> u8 {
        ((self.0 >> 2) & 3) as u8
    }
}

/// Version: major 31:16, minor 15:8, tertiary 7:0.
pub const fn version(major: u16, minor: u8, tertiary: u8) -> u32 {
    ((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32
}

/// NVMe 1.3.0, the version this target reports.
pub const VS_1_3: u32 = version(1, 3, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_capabilities_decode() {
        // The CAP nvmet reports: CSS bits 37 and 43, TO 15, MQES 127.
        let cap = Cap(0x0000_0820_0F00_007F);
        assert_eq!(cap.mqes(), 127);
        assert_eq!(cap.to(), 15);
        assert_eq!(cap.css(), 0x41);
        assert_eq!(cap.mpsmin(), 0);
        assert_eq!(Cap::new(127, 15).0, 0x0000_0020_0F00_007F);
        let cc = Cc(0x0046_0061);
        assert!(cc.en());
        assert_eq!((cc.css(), cc.iosqes(), cc.iocqes(), cc.mps()), (6, 6, 4, 0));
        assert_eq!(Cc(0x0046_4001).shn(), 1);
        assert_eq!(VS_1_3, 0x0001_0300);
    }

    #[test]
    fn connect_error_location_dw0() {
        assert_eq!(ConnectErrorLocation::HOSTNQN.to_dw0(), 0x1_0200);
        assert_eq!(ConnectErrorLocation::SQSIZE.to_dw0(), 44);
        assert_eq!(
            ConnectErrorLocation::from_dw0(0x1_0100),
            ConnectErrorLocation::SUBNQN
        );
    }
}
