//! Typed headers: IPv4, UDP, BTH and the InfiniBand extension headers
//! (`docs/rocev2.md#encapsulation`, `docs/rocev2.md#base-transport-header`,
//! `docs/rocev2.md#extension-headers`).
//!
//! Every header has a `LEN`, `to_bytes` (infallible; a field wider than its wire width is
//! truncated to it, which [`super::Packet::encode`] rejects beforehand) and `from_bytes`
//! (reads the first `LEN` bytes of a slice, [`WireError::Truncated`] if there are fewer).

use core::net::Ipv4Addr;

use super::{HeaderKind, Opcode, WireError};

/// Mask of a 24-bit field (QPN, PSN, MSN).
pub const MASK_24: u32 = 0x00FF_FFFF;

fn take<const N: usize>(bytes: &[u8], kind: HeaderKind) -> Result<[u8; N], WireError> {
    match bytes.get(..N) {
        Some(b) => {
            let mut out = [0u8; N];
            out.copy_from_slice(b);
            Ok(out)
        }
        None => Err(WireError::Truncated(kind)),
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&(v & MASK_24).to_be_bytes()[1..]);
}

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of the ones' complement
/// sum of its 16-bit big-endian words, starting from `initial` (an unfolded partial sum).
pub fn internet_checksum(initial: u32, data: &[u8]) -> u16 {
    let mut sum = u64::from(initial);
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// IPv4 protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// The 20-byte IPv4 header (no options), as rxe sends it (`docs/rocev2.md#encapsulation`).
///
/// The header checksum is not a field: [`Ipv4Header::to_bytes`] computes it and
/// [`Ipv4Header::from_bytes`] verifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// The TOS byte: DSCP in bits 7:2, ECN in bits 1:0 (rxe: the GRH traffic class).
    pub tos: u8,
    /// Total length of the datagram, this header included.
    pub total_length: u16,
    /// Identification.
    pub identification: u16,
    /// DF (don't fragment); rxe always sets it.
    pub dont_fragment: bool,
    /// MF (more fragments).
    pub more_fragments: bool,
    /// Fragment offset in 8-byte units (13 bits).
    pub fragment_offset: u16,
    /// Time to live (rxe: the GRH hop limit).
    pub ttl: u8,
    /// Protocol ([`IPPROTO_UDP`] for RoCEv2).
    pub protocol: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// Header length (IHL 5, no options).
    pub const LEN: usize = 20;

    /// The DSCP (TOS bits 7:2).
    pub const fn dscp(&self) -> u8 {
        self.tos >> 2
    }

    /// The ECN codepoint (TOS bits 1:0): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub const fn ecn(&self) -> u8 {
        self.tos & 3
    }

    /// The bytes on the wire, with a freshly computed header checksum.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = 0x45;
        b[1] = self.tos;
        b[2..4].copy_from_slice(&self.total_length.to_be_bytes());
        b[4..6].copy_from_slice(&self.identification.to_be_bytes());
        let flags_frag = (u16::from(self.dont_fragment) << 14)
            | (u16::from(self.more_fragments) << 13)
            | (self.fragment_offset & 0x1FFF);
        b[6..8].copy_from_slice(&flags_frag.to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let csum = internet_checksum(0, &b);
        b[10..12].copy_from_slice(&csum.to_be_bytes());
        b
    }

    /// Parses and checks the header: version 4 ([`WireError::NotIpv4`]), IHL 5
    /// ([`WireError::Ipv4Options`]), header checksum ([`WireError::BadIpChecksum`]).
    /// The total length, protocol and fragment fields are returned, not judged.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        if let Some(&first) = bytes.first()
            && first >> 4 != 4
        {
            return Err(WireError::NotIpv4);
        }
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Ipv4)?;
        if b[0] & 0x0F != 5 {
            return Err(WireError::Ipv4Options);
        }
        if internet_checksum(0, &b) != 0 {
            return Err(WireError::BadIpChecksum);
        }
        let flags_frag = be16(&b, 6);
        Ok(Self {
            tos: b[1],
            total_length: be16(&b, 2),
            identification: be16(&b, 4),
            dont_fragment: flags_frag & 0x4000 != 0,
            more_fragments: flags_frag & 0x2000 != 0,
            fragment_offset: flags_frag & 0x1FFF,
            ttl: b[8],
            protocol: b[9],
            src: Ipv4Addr::from(be32(&b, 12)),
            dst: Ipv4Addr::from(be32(&b, 16)),
        })
    }
}

/// The 8-byte UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port (RoCEv2: per-QP entropy, see [`crate::transport::udp_source_port`]).
    pub src_port: u16,
    /// Destination port ([`super::ROCE_V2_UDP_DPORT`]).
    pub dst_port: u16,
    /// Length of the UDP header plus its payload.
    pub length: u16,
    /// Checksum; 0 means "not computed", which is what rxe sends (`docs/rocev2.md#encapsulation`).
    pub checksum: u16,
}

impl UdpHeader {
    /// Header length.
    pub const LEN: usize = 8;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        b[4..6].copy_from_slice(&self.length.to_be_bytes());
        b[6..8].copy_from_slice(&self.checksum.to_be_bytes());
        b
    }

    /// Parses the header (no field is judged).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Udp)?;
        Ok(Self {
            src_port: be16(&b, 0),
            dst_port: be16(&b, 2),
            length: be16(&b, 4),
            checksum: be16(&b, 6),
        })
    }

    /// Whether a non-zero checksum is right for a datagram from `src` to `dst` whose UDP
    /// header and payload are `datagram`. A zero checksum is always accepted.
    pub fn checksum_ok(src: Ipv4Addr, dst: Ipv4Addr, datagram: &[u8]) -> bool {
        if datagram.len() < Self::LEN || be16(datagram, 6) == 0 {
            return true;
        }
        let Ok(len) = u16::try_from(datagram.len()) else {
            return false;
        };
        let s = src.octets();
        let d = dst.octets();
        let pseudo = u32::from(u16::from_be_bytes([s[0], s[1]]))
            + u32::from(u16::from_be_bytes([s[2], s[3]]))
            + u32::from(u16::from_be_bytes([d[0], d[1]]))
            + u32::from(u16::from_be_bytes([d[2], d[3]]))
            + u32::from(IPPROTO_UDP)
            + u32::from(len);
        internet_checksum(pseudo, datagram) == 0
    }
}

/// Base Transport Header, 12 bytes (`docs/rocev2.md#base-transport-header`).
///
/// Resv6a (byte 4 bits 5:0) and Resv7 (byte 8 bits 6:0) are written as zero and ignored
/// when read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bth {
    /// OpCode.
    pub opcode: Opcode,
    /// SE: solicited event.
    pub solicited: bool,
    /// M: MigReq.
    pub mig_req: bool,
    /// PadCnt (2 bits): pad bytes before the ICRC. [`super::Packet::encode`] writes the
    /// value the payload length implies and ignores this field; decoding fills it in.
    pub pad_count: u8,
    /// TVer (4 bits); must be 0.
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN (forward explicit congestion notification); not covered by the ICRC.
    pub fecn: bool,
    /// BECN (backward explicit congestion notification); not covered by the ICRC.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// A: acknowledge request.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Bth {
    /// Header length.
    pub const LEN: usize = 12;

    /// A BTH with P_Key 0xFFFF and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        Self {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: super::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.opcode as u8;
        b[1] = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad_count & 3) << 4)
            | (self.tver & 0x0F);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(&mut b, 5, self.dest_qp);
        b[8] = u8::from(self.ack_req) << 7;
        put24(&mut b, 9, self.psn);
        b
    }

    /// Parses the header; an opcode this crate does not know is
    /// [`WireError::UnknownOpcode`]. TVer is returned, not judged.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Bth)?;
        let opcode = Opcode::from_u8(b[0]).ok_or(WireError::UnknownOpcode(b[0]))?;
        Ok(Self {
            opcode,
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 3,
            tver: b[1] & 0x0F,
            pkey: be16(&b, 2),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be24(&b, 5),
            ack_req: b[8] & 0x80 != 0,
            psn: be24(&b, 9),
        })
    }
}

/// RDMA Extended Transport Header, 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length: the whole (remaining) message length.
    pub dma_len: u32,
}

impl Reth {
    /// Header length.
    pub const LEN: usize = 16;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
        b
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Reth)?;
        Ok(Self {
            va: be64(&b, 0),
            rkey: be32(&b, 8),
            dma_len: be32(&b, 12),
        })
    }
}

/// ACK Extended Transport Header, 4 bytes: syndrome and MSN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// Syndrome; see [`Aeth::kind`].
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// Credit count rxe puts in every ACK: "unlimited", no end-to-end flow control.
pub const AETH_ACK_UNLIMITED: u8 = 0x1F;

/// NAK codes (AETH syndrome 011 in bits 7:5, the code in bits 4:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    /// PSN sequence error: the AETH's BTH carries the expected PSN.
    PsnSequenceError = 0,
    /// Invalid request.
    InvalidRequest = 1,
    /// Remote access error.
    RemoteAccessError = 2,
    /// Remote operational error.
    RemoteOperationalError = 3,
    /// Invalid RD request.
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The code for its 5-bit value, if defined.
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// What an AETH syndrome says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// ACK (000) with a credit count ([`AETH_ACK_UNLIMITED`] from rxe).
    Ack {
        /// Bits 4:0.
        credits: u8,
    },
    /// RNR NAK (001) with an RNR timer code (see [`crate::transport::rnr_timer_ns`]).
    RnrNak {
        /// Bits 4:0.
        timer: u8,
    },
    /// NAK (011) with a defined code.
    Nak(NakCode),
    /// The reserved class (010), or a NAK with an undefined code; the whole syndrome.
    Reserved(u8),
}

impl Aeth {
    /// Header length.
    pub const LEN: usize = 4;

    /// An ACK with unlimited credits.
    pub const fn ack(msn: u32) -> Self {
        Self {
            syndrome: AETH_ACK_UNLIMITED,
            msn,
        }
    }

    /// An RNR NAK carrying RNR timer code `timer` (5 bits).
    pub const fn rnr_nak(timer: u8, msn: u32) -> Self {
        Self {
            syndrome: 0x20 | (timer & 0x1F),
            msn,
        }
    }

    /// A NAK with `code`.
    pub const fn nak(code: NakCode, msn: u32) -> Self {
        Self {
            syndrome: 0x60 | code as u8,
            msn,
        }
    }

    /// Classifies the syndrome.
    pub const fn kind(&self) -> AethKind {
        let low = self.syndrome & 0x1F;
        match self.syndrome >> 5 {
            0 => AethKind::Ack { credits: low },
            1 => AethKind::RnrNak { timer: low },
            3 => match NakCode::from_u8(low) {
                Some(c) => AethKind::Nak(c),
                None => AethKind::Reserved(self.syndrome),
            },
            _ => AethKind::Reserved(self.syndrome),
        }
    }

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.syndrome;
        put24(&mut b, 1, self.msn);
        b
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Aeth)?;
        Ok(Self {
            syndrome: b[0],
            msn: be24(&b, 1),
        })
    }
}

/// Atomic Extended Transport Header, 28 bytes (COMPARE_SWAP, FETCH_ADD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap value (COMPARE_SWAP) or add value (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP).
    pub compare: u64,
}

impl AtomicEth {
    /// Header length.
    pub const LEN: usize = 28;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
        b
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::AtomicEth)?;
        Ok(Self {
            va: be64(&b, 0),
            rkey: be32(&b, 8),
            swap_add: be64(&b, 12),
            compare: be64(&b, 20),
        })
    }
}

/// Atomic ACK Extended Transport Header, 8 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// The remote data before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Header length.
    pub const LEN: usize = 8;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        self.orig.to_be_bytes()
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::AtomicAckEth)?;
        Ok(Self { orig: be64(&b, 0) })
    }
}

/// Immediate data, 4 bytes.
///
/// `imm` is the big-endian reading of the four wire bytes; writing it back big-endian (as a CQE's
/// `imm_inval_pkey` does) passes the bytes through unchanged, as `docs/rocev2.md#extension-headers`
/// requires.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImmDt {
    /// The immediate value.
    pub imm: u32,
}

impl ImmDt {
    /// Header length.
    pub const LEN: usize = 4;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        self.imm.to_be_bytes()
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::ImmDt)?;
        Ok(Self {
            imm: u32::from_be_bytes(b),
        })
    }
}

/// Invalidate Extended Transport Header, 4 bytes (SEND with invalidate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Header length.
    pub const LEN: usize = 4;

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        self.rkey.to_be_bytes()
    }

    /// Parses the header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Ieth)?;
        Ok(Self {
            rkey: u32::from_be_bytes(b),
        })
    }
}

/// Datagram Extended Transport Header, 8 bytes (UD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Deth {
    /// Q_Key ([`super::GSI_QKEY`] for QP1).
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Header length.
    pub const LEN: usize = 8;

    /// The bytes on the wire (byte 4 reserved, zero).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.qkey.to_be_bytes());
        put24(&mut b, 5, self.src_qp);
        b
    }

    /// Parses the header (the reserved byte is ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let b: [u8; Self::LEN] = take(bytes, HeaderKind::Deth)?;
        Ok(Self {
            qkey: be32(&b, 0),
            src_qp: be24(&b, 5),
        })
    }
}
