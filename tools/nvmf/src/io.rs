//! NVM command set I/O commands: Flush, Write, Read, Write Zeroes, Dataset Management.

use alloc::vec::Vec;

use crate::capsule::Sqe;
use crate::wire::{get_u32, get_u64, put_u32, put_u64};

/// I/O opcodes.
pub mod opcode {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// CONTROL bit 14: force unit access.
pub const CONTROL_FUA: u16 = 1 << 14;
/// CONTROL bit 15: limited retry.
pub const CONTROL_LR: u16 = 1 << 15;

/// Read / Write / Write Zeroes fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReadWrite {
    /// Bytes 4-7.
    pub nsid: u32,
    /// Bytes 40-47: starting LBA.
    pub slba: u64,
    /// Bytes 48-49: number of logical blocks, 0-based.
    pub nlb: u16,
    /// Bytes 50-51: control (FUA, LR, PRINFO).
    pub control: u16,
    /// Bytes 52-55: dataset management hints.
    pub dsmgmt: u32,
    /// Bytes 56-59: reference tag.
    pub reftag: u32,
    /// Bytes 60-61: application tag.
    pub apptag: u16,
    /// Bytes 62-63: application tag mask.
    pub appmask: u16,
}

impl ReadWrite {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> ReadWrite {
        ReadWrite {
            nsid: s.nsid,
            slba: u64::from(s.cdw10) | (u64::from(s.cdw11) << 32),
            nlb: s.cdw12 as u16,
            control: (s.cdw12 >> 16) as u16,
            dsmgmt: s.cdw13,
            reftag: s.cdw14,
            apptag: s.cdw15 as u16,
            appmask: (s.cdw15 >> 16) as u16,
        }
    }

    /// An SQE for `opcode` with these fields.
    pub fn to_sqe(&self, opcode: u8) -> Sqe {
        let mut s = Sqe::new(opcode);
        s.nsid = self.nsid;
        s.cdw10 = self.slba as u32;
        s.cdw11 = (self.slba >> 32) as u32;
        s.cdw12 = u32::from(self.nlb) | (u32::from(self.control) << 16);
        s.cdw13 = self.dsmgmt;
        s.cdw14 = self.reftag;
        s.cdw15 = u32::from(self.apptag) | (u32::from(self.appmask) << 16);
        s
    }

    /// Number of blocks (1-based).
    pub fn blocks(&self) -> u64 {
        u64::from(self.nlb) + 1
    }
}

/// DSM attribute bit 0: integral dataset for read.
pub const DSM_IDR: u32 = 1 << 0;
/// DSM attribute bit 1: integral dataset for write.
pub const DSM_IDW: u32 = 1 << 1;
/// DSM attribute bit 2: deallocate.
pub const DSM_AD: u32 = 1 << 2;
/// Size of one DSM range.
pub const DSM_RANGE_LEN: usize = 16;
/// Most ranges in one command.
pub const DSM_MAX_RANGES: usize = 256;

/// Dataset Management fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DatasetManagement {
    /// Bytes 4-7.
    pub nsid: u32,
    /// Bytes 40-43 (7:0): number of ranges, 0-based.
    pub nr: u8,
    /// Bytes 44-47: attributes.
    pub attr: u32,
}

impl DatasetManagement {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> DatasetManagement {
        DatasetManagement {
            nsid: s.nsid,
            nr: s.cdw10 as u8,
            attr: s.cdw11,
        }
    }

    /// An SQE with these fields.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(opcode::DSM);
        s.nsid = self.nsid;
        s.cdw10 = u32::from(self.nr);
        s.cdw11 = self.attr;
        s
    }

    /// Number of ranges (1-based).
    pub fn ranges(&self) -> usize {
        usize::from(self.nr) + 1
    }
}

/// One DSM range: context attributes 0-3, length in blocks 4-7 (1-based), starting LBA 8-15.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DsmRange {
    /// Context attributes.
    pub cattr: u32,
    /// Length in blocks.
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

impl DsmRange {
    /// Encodes 16 bytes.
    pub fn encode(&self) -> [u8; DSM_RANGE_LEN] {
        let mut b = [0u8; DSM_RANGE_LEN];
        put_u32(&mut b, 0, self.cattr);
        put_u32(&mut b, 4, self.nlb);
        put_u64(&mut b, 8, self.slba);
        b
    }

    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; DSM_RANGE_LEN]) -> DsmRange {
        DsmRange {
            cattr: get_u32(b, 0),
            nlb: get_u32(b, 4),
            slba: get_u64(b, 8),
        }
    }
}

/// Encodes a range list (Linux always sends 4096 bytes; pad with `pad_to`).
pub fn encode_dsm_ranges(ranges: &[DsmRange], pad_to: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(pad_to.max(ranges.len() * DSM_RANGE_LEN));
    for r in ranges {
        out.extend_from_slice(&r.encode());
    }
    if out.len() < pad_to {
        out.resize(pad_to, 0);
    }
    out
}
