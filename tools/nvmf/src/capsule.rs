//! Command and response capsules: the 64-byte submission queue entry ([`Sqe`]), the 16-byte
//! completion queue entry ([`Cqe`]) and the SGL descriptor in SQE bytes 24-39 ([`Sgl`]).

use crate::status::Status;
use crate::wire::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

/// Size of a submission queue entry.
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry.
pub const CQE_SIZE: usize = 16;

/// PSDT 01b in the flags byte: "SGLs for data, metadata as a contiguous buffer"; every
/// command on a fabric carries it.
pub const FLAGS_PSDT_SGL: u8 = 0x40;
/// The FUSE bits of the flags byte.
pub const FLAGS_FUSE_MASK: u8 = 0x03;
/// The PSDT bits of the flags byte.
pub const FLAGS_PSDT_MASK: u8 = 0xC0;

/// SGL descriptor type byte: keyed data block, address subtype.
pub const SGL_KEYED_ADDRESS: u8 = 0x40;
/// SGL descriptor type byte: keyed data block, invalidate-key subtype.
pub const SGL_KEYED_INVALIDATE: u8 = 0x4F;
/// SGL descriptor type byte: data block, offset subtype (in-capsule data).
pub const SGL_DATA_OFFSET: u8 = 0x01;
/// SGL descriptor type byte: data block, address subtype.
pub const SGL_DATA_ADDRESS: u8 = 0x00;
/// SGL descriptor type byte: last segment, offset subtype (a list of descriptors in the
/// capsule).
pub const SGL_LAST_SEGMENT_OFFSET: u8 = 0x31;
/// Largest length a keyed descriptor can carry (24 bits).
pub const SGL_KEYED_MAX_LEN: u32 = 0x00FF_FFFF;

/// An SGL descriptor (16 bytes). Keyed: address 0-7, length 8-10 (24 bits), key 11-14, type
/// byte 15. Unkeyed: address 0-7, length 8-11, type byte 15. The type byte has the type in
/// its high nibble and the subtype in its low nibble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sgl {
    /// Keyed data block (type 4) with subtype 0 (address) or 0xF (invalidate the key after
    /// the transfer): remote memory the target reads or writes with RDMA.
    Keyed {
        /// Remote virtual address.
        addr: u64,
        /// Length in bytes (24 bits; larger values are cut on encode).
        len: u32,
        /// Remote key.
        key: u32,
        /// Subtype 0xF: the host asks the target to invalidate `key` with its response.
        invalidate: bool,
    },
    /// Data block (type 0), offset subtype (1): in-capsule data `offset` bytes after the SQE.
    InCapsule {
        /// Offset of the data from the end of the SQE.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Any other descriptor, kept byte for byte.
    Other([u8; 16]),
}

impl Sgl {
    /// The null descriptor Linux sends on commands without data: keyed, address 0, length 0,
    /// key 0.
    pub const NULL: Sgl = Sgl::Keyed {
        addr: 0,
        len: 0,
        key: 0,
        invalidate: false,
    };

    /// Decodes 16 bytes. Never fails: unknown types land in [`Sgl::Other`], and so do keyed
    /// descriptors with other subtypes, so that `decode(b).encode() == b` for every `b` but
    /// one kind: the reserved bytes 12..15 of a data-block (in-capsule) descriptor are
    /// ignored and encode as zero. Linux's host fills only address, length and type of that
    /// descriptor and leaves those bytes as the previous command of the same request slot
    /// left them (often a keyed descriptor's key); Linux's target ignores them too.
    pub fn decode(b: &[u8; 16]) -> Sgl {
        match b[15] {
            SGL_KEYED_ADDRESS | SGL_KEYED_INVALIDATE => Sgl::Keyed {
                addr: get_u64(b, 0),
                len: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                key: get_u32(b, 11),
                invalidate: b[15] == SGL_KEYED_INVALIDATE,
            },
            SGL_DATA_OFFSET => Sgl::InCapsule {
                offset: get_u64(b, 0),
                len: get_u32(b, 8),
            },
            _ => Sgl::Other(*b),
        }
    }

    /// Encodes to 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        match *self {
            Sgl::Keyed {
                addr,
                len,
                key,
                invalidate,
            } => {
                put_u64(&mut b, 0, addr);
                b[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
                put_u32(&mut b, 11, key);
                b[15] = if invalidate {
                    SGL_KEYED_INVALIDATE
                } else {
                    SGL_KEYED_ADDRESS
                };
            }
            Sgl::InCapsule { offset, len } => {
                put_u64(&mut b, 0, offset);
                put_u32(&mut b, 8, len);
                b[15] = SGL_DATA_OFFSET;
            }
            Sgl::Other(raw) => b = raw,
        }
        b
    }

    /// The descriptor's type byte.
    pub fn type_byte(&self) -> u8 {
        self.encode()[15]
    }

    /// The data length the descriptor names (0 for [`Sgl::Other`]).
    pub fn len(&self) -> u32 {
        match *self {
            Sgl::Keyed { len, .. } | Sgl::InCapsule { len, .. } => len,
            Sgl::Other(_) => 0,
        }
    }

    /// Whether the descriptor names no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A submission queue entry, every field of the common command layout. Fabrics commands
/// keep FCTYPE in byte 4 (the low byte of `nsid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sqe {
    /// Byte 0: opcode (0x7F = Fabrics).
    pub opcode: u8,
    /// Byte 1: FUSE (1:0) and PSDT (7:6).
    pub flags: u8,
    /// Bytes 2-3: command identifier, echoed in the completion.
    pub cid: u16,
    /// Bytes 4-7: namespace identifier (Fabrics: byte 4 is FCTYPE).
    pub nsid: u32,
    /// Bytes 8-11.
    pub cdw2: u32,
    /// Bytes 12-15.
    pub cdw3: u32,
    /// Bytes 16-23: metadata pointer.
    pub mptr: u64,
    /// Bytes 24-39: SGL descriptor 1.
    pub sgl: Sgl,
    /// Bytes 40-43.
    pub cdw10: u32,
    /// Bytes 44-47.
    pub cdw11: u32,
    /// Bytes 48-51.
    pub cdw12: u32,
    /// Bytes 52-55.
    pub cdw13: u32,
    /// Bytes 56-59.
    pub cdw14: u32,
    /// Bytes 60-63.
    pub cdw15: u32,
}

impl Default for Sqe {
    fn default() -> Self {
        Sqe::new(0)
    }
}

impl Sqe {
    /// An entry with `opcode`, PSDT 01b, the null SGL and every other field zero.
    pub const fn new(opcode: u8) -> Sqe {
        Sqe {
            opcode,
            flags: FLAGS_PSDT_SGL,
            cid: 0,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            sgl: Sgl::NULL,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    /// Decodes the first 64 bytes of a capsule; `None` when there are fewer.
    pub fn decode(b: &[u8]) -> Option<Sqe> {
        let b: &[u8; SQE_SIZE] = b.get(..SQE_SIZE)?.try_into().ok()?;
        let mut sgl = [0u8; 16];
        sgl.copy_from_slice(&b[24..40]);
        Some(Sqe {
            opcode: b[0],
            flags: b[1],
            cid: get_u16(b, 2),
            nsid: get_u32(b, 4),
            cdw2: get_u32(b, 8),
            cdw3: get_u32(b, 12),
            mptr: get_u64(b, 16),
            sgl: Sgl::decode(&sgl),
            cdw10: get_u32(b, 40),
            cdw11: get_u32(b, 44),
            cdw12: get_u32(b, 48),
            cdw13: get_u32(b, 52),
            cdw14: get_u32(b, 56),
            cdw15: get_u32(b, 60),
        })
    }

    /// Encodes to 64 bytes.
    pub fn encode(&self) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        b[0] = self.opcode;
        b[1] = self.flags;
        put_u16(&mut b, 2, self.cid);
        put_u32(&mut b, 4, self.nsid);
        put_u32(&mut b, 8, self.cdw2);
        put_u32(&mut b, 12, self.cdw3);
        put_u64(&mut b, 16, self.mptr);
        b[24..40].copy_from_slice(&self.sgl.encode());
        put_u32(&mut b, 40, self.cdw10);
        put_u32(&mut b, 44, self.cdw11);
        put_u32(&mut b, 48, self.cdw12);
        put_u32(&mut b, 52, self.cdw13);
        put_u32(&mut b, 56, self.cdw14);
        put_u32(&mut b, 60, self.cdw15);
        b
    }

    /// Fabrics command type (byte 4).
    pub const fn fctype(&self) -> u8 {
        (self.nsid & 0xFF) as u8
    }

    /// Whether data moves host → controller: bit 0 of the opcode, or of FCTYPE for Fabrics
    /// commands.
    pub const fn is_write(&self) -> bool {
        if self.opcode == crate::fabrics::OPCODE_FABRICS {
            self.fctype() & 1 != 0
        } else {
            self.opcode & 1 != 0
        }
    }
}

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Cqe {
    /// Bytes 0-7: command specific result, DW0 in the low half, DW1 in the high half.
    pub result: u64,
    /// Bytes 8-9: submission queue head pointer (0xFFFF with SQ flow control disabled).
    pub sqhd: u16,
    /// Bytes 10-11: submission queue identifier.
    pub sqid: u16,
    /// Bytes 12-13: command identifier.
    pub cid: u16,
    /// Bytes 14-15 bits 15:1: the status.
    pub status: Status,
    /// Bytes 14-15 bit 0: phase tag (no ring on a fabric: 0).
    pub phase: bool,
}

impl Cqe {
    /// Decodes the first 16 bytes of a response; `None` when there are fewer.
    pub fn decode(b: &[u8]) -> Option<Cqe> {
        let b = b.get(..CQE_SIZE)?;
        let (status, phase) = Status::from_wire(get_u16(b, 14));
        Some(Cqe {
            result: get_u64(b, 0),
            sqhd: get_u16(b, 8),
            sqid: get_u16(b, 10),
            cid: get_u16(b, 12),
            status,
            phase,
        })
    }

    /// Encodes to 16 bytes.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        put_u64(&mut b, 0, self.result);
        put_u16(&mut b, 8, self.sqhd);
        put_u16(&mut b, 10, self.sqid);
        put_u16(&mut b, 12, self.cid);
        put_u16(&mut b, 14, self.status.to_wire(self.phase));
        b
    }

    /// Result DW0.
    pub const fn dw0(&self) -> u32 {
        self.result as u32
    }

    /// Result DW1.
    pub const fn dw1(&self) -> u32 {
        (self.result >> 32) as u32
    }
}
