//! The 24-byte MAD common header of QP1 (GSI) traffic and the CM constants
//! (`docs/rocev2.md#qp1-and-cm-mads`).
//!
//! A CM message is a 256-byte MAD carried as the payload of a UD SEND ONLY to QP 1 with
//! Q_Key [`crate::packet::GSI_QKEY`] and DETH SrcQP 1. The CM messages after the header are
//! the `cm` crate's (`docs/cm.md#message-layouts`), not modelled here.

use crate::packet::{HeaderKind, WireError};

/// Size of a MAD.
pub const MAD_SIZE: usize = 256;
/// `base_version` of every MAD.
pub const MAD_BASE_VERSION: u8 = 1;
/// Management class of the connection manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Class version of the connection manager.
pub const CM_CLASS_VERSION: u8 = 2;
/// Method SEND.
pub const METHOD_SEND: u8 = 0x03;

/// CM attribute IDs (`ib_cm.h`).
pub mod cm_attr {
    /// REQ.
    pub const REQ: u16 = 0x0010;
    /// MRA.
    pub const MRA: u16 = 0x0011;
    /// REJ.
    pub const REJ: u16 = 0x0012;
    /// REP.
    pub const REP: u16 = 0x0013;
    /// RTU.
    pub const RTU: u16 = 0x0014;
    /// DREQ.
    pub const DREQ: u16 = 0x0015;
    /// DREP.
    pub const DREP: u16 = 0x0016;
    /// SIDR_REQ.
    pub const SIDR_REQ: u16 = 0x0017;
    /// SIDR_REP.
    pub const SIDR_REP: u16 = 0x0018;
    /// LAP.
    pub const LAP: u16 = 0x0019;
    /// APR.
    pub const APR: u16 = 0x001A;
}

/// The MAD common header (big-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// Offset 0: base version (1).
    pub base_version: u8,
    /// Offset 1: management class ([`MGMT_CLASS_CM`]).
    pub mgmt_class: u8,
    /// Offset 2: class version ([`CM_CLASS_VERSION`]).
    pub class_version: u8,
    /// Offset 3: method ([`METHOD_SEND`]).
    pub method: u8,
    /// Offset 4: status.
    pub status: u16,
    /// Offset 6: class specific.
    pub class_specific: u16,
    /// Offset 8: transaction ID.
    pub tid: u64,
    /// Offset 16: attribute ID ([`cm_attr`]).
    pub attr_id: u16,
    /// Offset 20: attribute modifier (offset 18 is reserved).
    pub attr_mod: u32,
}

impl MadHeader {
    /// Header length.
    pub const LEN: usize = 24;

    /// A CM SEND header for attribute `attr_id` and transaction `tid`.
    pub const fn cm_send(attr_id: u16, tid: u64) -> Self {
        Self {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// The bytes on the wire (reserved bytes zero).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        b[4..6].copy_from_slice(&self.status.to_be_bytes());
        b[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&self.tid.to_be_bytes());
        b[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        b[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
        b
    }

    /// Parses the header from the front of `bytes` (nothing judged; reserved ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(WireError::Truncated(HeaderKind::Mad))?;
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let mut tid = [0u8; 8];
        tid.copy_from_slice(&b[8..16]);
        Ok(Self {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: u16_at(4),
            class_specific: u16_at(6),
            tid: u64::from_be_bytes(tid),
            attr_id: u16_at(16),
            attr_mod: u32::from_be_bytes([b[20], b[21], b[22], b[23]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let h = MadHeader {
            status: 0x0102,
            class_specific: 0x0304,
            attr_mod: 0x0A0B_0C0D,
            ..MadHeader::cm_send(cm_attr::REP, 0x1122_3344_5566_7788)
        };
        let b = h.to_bytes();
        assert_eq!(
            b,
            [
                1, 7, 2, 3, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0x13,
                0, 0, 0x0A, 0x0B, 0x0C, 0x0D
            ]
        );
        assert_eq!(MadHeader::from_bytes(&b), Ok(h));
        assert_eq!(
            MadHeader::from_bytes(&b[..23]),
            Err(WireError::Truncated(HeaderKind::Mad))
        );
    }
}
