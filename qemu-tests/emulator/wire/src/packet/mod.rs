//! RoCEv2 packets: typed headers, the opcode table, and whole-packet encode/decode.
//!
//! Two byte forms exist:
//!
//! * **Frame**: IPv4 header + UDP header + BTH + extension headers + payload + pad + ICRC
//!   ([`Packet::encode`], [`Packet::decode`]). This is what the fabrics carry.
//! * **UDP payload**: BTH … ICRC only, for a UDP socket where the host stack supplies the IP and
//!   UDP headers ([`Packet::encode_udp_payload`], [`Packet::decode_udp_payload`]). The ICRC still
//!   covers a pseudo IPv4 + UDP header (`docs/rocev2.md#icrc`), rebuilt from the socket addresses;
//!   see [`crate::icrc::icrc_udp_payload`] for the exact values.
//!
//! Only `core` and `alloc` are used here.

mod headers;
mod opcode;

use alloc::vec::Vec;
use core::fmt;
use core::net::Ipv4Addr;

pub use headers::{
    AETH_ACK_UNLIMITED, Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, Deth, IPPROTO_UDP, Ieth,
    ImmDt, Ipv4Header, MASK_24, NakCode, Reth, UdpHeader, internet_checksum,
};
pub use opcode::{ExtLayout, OpKind, Opcode, Position, Transport};

use crate::icrc::{self, ICRC_LEN, IPV4_UDP_HEADER_LEN};

/// UDP destination port of RoCEv2 (`ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;
/// Default P_Key, full member (`IB_DEFAULT_PKEY_FULL`).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// Q_Key of QP1 (GSI).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Destination QPN of multicast packets.
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;
/// Lowest UDP source port rxe uses; every RoCEv2 source port it picks has the top two bits set.
pub const ROCE_SPORT_BASE: u16 = 0xC000;
/// TTL given to packets by [`Packet::new`] and to packets decoded from UDP-payload form.
pub const DEFAULT_TTL: u8 = 64;
/// Size of the reserved area that follows a CNP's BTH.
pub const CNP_RESERVED_LEN: usize = 16;
/// Largest UDP payload (BTH … ICRC) that fits in an IPv4 datagram.
pub const MAX_UDP_PAYLOAD: usize = u16::MAX as usize - IPV4_UDP_HEADER_LEN;

/// A header or field named in a [`WireError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    /// IPv4 header.
    Ipv4,
    /// UDP header.
    Udp,
    /// BTH.
    Bth,
    /// DETH.
    Deth,
    /// RETH.
    Reth,
    /// AtomicETH.
    AtomicEth,
    /// ImmDt.
    ImmDt,
    /// IETH.
    Ieth,
    /// AETH.
    Aeth,
    /// AtomicAckETH.
    AtomicAckEth,
    /// The ICRC trailer.
    Icrc,
    /// A MAD header ([`crate::mad`]).
    Mad,
}

/// A field whose value does not fit its wire width (refused by [`Packet::encode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// BTH DestQP (24 bits).
    DestQp,
    /// BTH PSN (24 bits).
    Psn,
    /// BTH TVer (must be 0).
    Tver,
    /// AETH MSN (24 bits).
    Msn,
    /// DETH SrcQP (24 bits).
    SrcQp,
}

/// Why bytes are not a valid RoCEv2 packet, or a [`Packet`] cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The bytes end inside the named header (or before the ICRC).
    Truncated(HeaderKind),
    /// IP version is not 4.
    NotIpv4,
    /// IPv4 header has options (IHL ≠ 5); RoCEv2 senders never add them.
    Ipv4Options,
    /// IPv4 total length disagrees with the frame length.
    BadIpLength,
    /// IPv4 header checksum is wrong.
    BadIpChecksum,
    /// IPv4 protocol is not UDP.
    NotUdp,
    /// The datagram is an IPv4 fragment (MF set or offset ≠ 0).
    Fragmented,
    /// UDP length disagrees with the IPv4 total length.
    BadUdpLength,
    /// A non-zero UDP checksum is wrong.
    BadUdpChecksum,
    /// UDP destination port is not 4791.
    WrongUdpPort(u16),
    /// The ICRC trailer does not match the packet.
    BadIcrc {
        /// ICRC computed over the packet.
        computed: u32,
        /// ICRC found in the trailer.
        found: u32,
    },
    /// BTH opcode not in the table of `docs/rocev2.md#opcodes` (or not supported: RD, FLUSH, ATOMIC
    /// WRITE).
    UnknownOpcode(u8),
    /// BTH TVer is not 0.
    BadTver(u8),
    /// PadCnt is larger than the data after the headers, or non-zero on an opcode without
    /// payload.
    BadPadCount,
    /// The data after the headers is not a multiple of 4 bytes (payload + pad must be).
    BadLength,
    /// A payload on an opcode that carries none (READ request, ACK, atomics).
    UnexpectedPayload,
    /// Encoding: the extension headers present do not match the opcode's layout.
    HeaderMismatch(Opcode),
    /// Encoding: a field is wider than its wire width.
    FieldOutOfRange(Field),
    /// Encoding: the packet would exceed the 65535-byte IPv4 datagram.
    TooLarge,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated(h) => write!(f, "truncated {h:?}"),
            Self::NotIpv4 => f.write_str("not IPv4"),
            Self::Ipv4Options => f.write_str("IPv4 options present"),
            Self::BadIpLength => f.write_str("IPv4 total length mismatch"),
            Self::BadIpChecksum => f.write_str("IPv4 header checksum error"),
            Self::NotUdp => f.write_str("IPv4 protocol is not UDP"),
            Self::Fragmented => f.write_str("IPv4 fragment"),
            Self::BadUdpLength => f.write_str("UDP length mismatch"),
            Self::BadUdpChecksum => f.write_str("UDP checksum error"),
            Self::WrongUdpPort(p) => write!(f, "UDP destination port {p} is not 4791"),
            Self::BadIcrc { computed, found } => {
                write!(
                    f,
                    "ICRC mismatch: computed {computed:#010x}, found {found:#010x}"
                )
            }
            Self::UnknownOpcode(op) => write!(f, "unknown BTH opcode {op:#04x}"),
            Self::BadTver(v) => write!(f, "BTH TVer {v} is not 0"),
            Self::BadPadCount => f.write_str("pad count exceeds the data"),
            Self::BadLength => f.write_str("payload + pad is not a multiple of 4"),
            Self::UnexpectedPayload => f.write_str("payload on an opcode without one"),
            Self::HeaderMismatch(op) => write!(f, "extension headers do not match {op:?}"),
            Self::FieldOutOfRange(fl) => write!(f, "{fl:?} out of range"),
            Self::TooLarge => f.write_str("packet exceeds an IPv4 datagram"),
        }
    }
}

impl core::error::Error for WireError {}

/// The extension headers of a packet; [`Opcode::ext_layout`] says which must be present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders {
    /// DETH (UD sends).
    pub deth: Option<Deth>,
    /// RETH (WRITE FIRST/ONLY, READ request).
    pub reth: Option<Reth>,
    /// AtomicETH (COMPARE SWAP, FETCH ADD).
    pub atomic_eth: Option<AtomicEth>,
    /// ImmDt (… WITH IMMEDIATE).
    pub imm_dt: Option<ImmDt>,
    /// IETH (SEND … WITH INVALIDATE).
    pub ieth: Option<Ieth>,
    /// AETH (ACK, READ response FIRST/LAST/ONLY, ATOMIC ACK).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEth>,
}

impl ExtHeaders {
    /// No extension headers.
    pub const NONE: Self = Self {
        deth: None,
        reth: None,
        atomic_eth: None,
        imm_dt: None,
        ieth: None,
        aeth: None,
        atomic_ack_eth: None,
    };

    /// Which headers are present (the `payload` flag of the result is false).
    pub const fn layout(&self) -> ExtLayout {
        ExtLayout {
            deth: self.deth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            imm_dt: self.imm_dt.is_some(),
            ieth: self.ieth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            payload: false,
        }
    }

    /// Whether exactly the headers of `op` are present.
    pub const fn matches(&self, op: Opcode) -> bool {
        let want = op.ext_layout();
        let have = self.layout();
        want.deth == have.deth
            && want.reth == have.reth
            && want.atomic_eth == have.atomic_eth
            && want.imm_dt == have.imm_dt
            && want.ieth == have.ieth
            && want.aeth == have.aeth
            && want.atomic_ack_eth == have.atomic_ack_eth
    }

    fn write(&self, out: &mut Vec<u8>) {
        if let Some(h) = &self.deth {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.reth {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.atomic_eth {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.imm_dt {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.ieth {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.aeth {
            out.extend_from_slice(&h.to_bytes());
        }
        if let Some(h) = &self.atomic_ack_eth {
            out.extend_from_slice(&h.to_bytes());
        }
    }

    /// Parses the headers of `layout` from the front of `bytes`; returns them and the
    /// number of bytes used.
    fn read(layout: ExtLayout, bytes: &[u8]) -> Result<(Self, usize), WireError> {
        fn step<T>(
            present: bool,
            bytes: &[u8],
            at: &mut usize,
            len: usize,
            parse: fn(&[u8]) -> Result<T, WireError>,
        ) -> Result<Option<T>, WireError> {
            if !present {
                return Ok(None);
            }
            let h = parse(bytes.get(*at..).unwrap_or(&[]))?;
            *at += len;
            Ok(Some(h))
        }
        let mut at = 0;
        let ext = Self {
            deth: step(layout.deth, bytes, &mut at, Deth::LEN, Deth::from_bytes)?,
            reth: step(layout.reth, bytes, &mut at, Reth::LEN, Reth::from_bytes)?,
            atomic_eth: step(
                layout.atomic_eth,
                bytes,
                &mut at,
                AtomicEth::LEN,
                AtomicEth::from_bytes,
            )?,
            imm_dt: step(layout.imm_dt, bytes, &mut at, ImmDt::LEN, ImmDt::from_bytes)?,
            ieth: step(layout.ieth, bytes, &mut at, Ieth::LEN, Ieth::from_bytes)?,
            aeth: step(layout.aeth, bytes, &mut at, Aeth::LEN, Aeth::from_bytes)?,
            atomic_ack_eth: step(
                layout.atomic_ack_eth,
                bytes,
                &mut at,
                AtomicAckEth::LEN,
                AtomicAckEth::from_bytes,
            )?,
        };
        Ok((ext, at))
    }
}

/// A RoCEv2 packet over IPv4: addresses, the IP/UDP fields that matter, BTH, extension
/// headers and payload.
///
/// `P` is the payload storage: `Vec<u8>` for an owned packet ([`Packet::decode`]) or
/// `&[u8]` for a zero-copy view into received bytes ([`PacketView`], [`Packet::parse`]).
/// Any `P: AsRef<[u8]>` encodes.
///
/// Fields not listed are fixed: IPv4 DF set, protocol 17, UDP destination port 4791, UDP
/// checksum 0, BTH pad count derived from the payload length.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packet<P = Vec<u8>> {
    /// IPv4 source address.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port (flow entropy).
    pub udp_src_port: u16,
    /// IPv4 TOS byte (DSCP << 2 | ECN). Masked out of the ICRC.
    pub tos: u8,
    /// IPv4 TTL. Masked out of the ICRC.
    pub ttl: u8,
    /// IPv4 identification. Covered by the ICRC in frame form; taken as 0 in UDP-payload form.
    pub ip_id: u16,
    /// Base transport header.
    pub bth: Bth,
    /// Extension headers; must match `bth.opcode`.
    pub ext: ExtHeaders,
    /// Payload, without pad.
    pub payload: P,
}

/// A decoded packet whose payload borrows the received bytes.
pub type PacketView<'a> = Packet<&'a [u8]>;

/// The 28-byte IPv4 + UDP header [`Packet`]'s UDP-payload form is checked against (see
/// [`icrc::icrc_udp_payload`]); `udp_payload_len` counts BTH … ICRC.
pub(crate) fn pseudo_ip_udp_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    udp_payload_len: usize,
) -> [u8; IPV4_UDP_HEADER_LEN] {
    ip_udp_header(src, dst, src_port, 0, DEFAULT_TTL, 0, udp_payload_len)
}

fn ip_udp_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    tos: u8,
    ttl: u8,
    ip_id: u16,
    udp_payload_len: usize,
) -> [u8; IPV4_UDP_HEADER_LEN] {
    // Callers bound udp_payload_len by MAX_UDP_PAYLOAD; saturate rather than wrap otherwise.
    let udp_len = u16::try_from(udp_payload_len + UdpHeader::LEN).unwrap_or(u16::MAX);
    let total = u16::try_from(udp_payload_len + IPV4_UDP_HEADER_LEN).unwrap_or(u16::MAX);
    let ip = Ipv4Header {
        tos,
        total_length: total,
        identification: ip_id,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
        ttl,
        protocol: IPPROTO_UDP,
        src,
        dst,
    };
    let udp = UdpHeader {
        src_port,
        dst_port: ROCE_V2_UDP_DPORT,
        length: udp_len,
        checksum: 0,
    };
    let mut out = [0u8; IPV4_UDP_HEADER_LEN];
    out[..Ipv4Header::LEN].copy_from_slice(&ip.to_bytes());
    out[Ipv4Header::LEN..].copy_from_slice(&udp.to_bytes());
    out
}

/// The source and destination addresses of an IPv4 frame, read without any validation
/// (for routing). `None` if the bytes are too short or not IPv4.
pub fn peek_ipv4_addrs(frame: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if frame.len() < Ipv4Header::LEN || frame[0] >> 4 != 4 {
        return None;
    }
    let a = |at: usize| Ipv4Addr::new(frame[at], frame[at + 1], frame[at + 2], frame[at + 3]);
    Some((a(12), a(16)))
}

/// Checks a frame's IPv4 and UDP headers (everything [`Packet::decode`] checks before the
/// ICRC) and returns them with the UDP payload (BTH … ICRC).
pub fn split_frame(frame: &[u8]) -> Result<(Ipv4Header, UdpHeader, &[u8]), WireError> {
    let ip = Ipv4Header::from_bytes(frame)?;
    if usize::from(ip.total_length) != frame.len() {
        return Err(WireError::BadIpLength);
    }
    if ip.protocol != IPPROTO_UDP {
        return Err(WireError::NotUdp);
    }
    if ip.more_fragments || ip.fragment_offset != 0 {
        return Err(WireError::Fragmented);
    }
    let datagram = &frame[Ipv4Header::LEN..];
    let udp = UdpHeader::from_bytes(datagram)?;
    if usize::from(udp.length) != datagram.len() {
        return Err(WireError::BadUdpLength);
    }
    if udp.dst_port != ROCE_V2_UDP_DPORT {
        return Err(WireError::WrongUdpPort(udp.dst_port));
    }
    if !UdpHeader::checksum_ok(ip.src, ip.dst, datagram) {
        return Err(WireError::BadUdpChecksum);
    }
    Ok((ip, udp, &datagram[UdpHeader::LEN..]))
}

/// Splits BTH … ICRC into (BTH … pad, ICRC value), checking there is room for both.
fn split_icrc(udp_payload: &[u8]) -> Result<(&[u8], u32), WireError> {
    if udp_payload.len() < Bth::LEN {
        return Err(WireError::Truncated(HeaderKind::Bth));
    }
    if udp_payload.len() < Bth::LEN + ICRC_LEN {
        return Err(WireError::Truncated(HeaderKind::Icrc));
    }
    let (body, trailer) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
    let mut t = [0u8; ICRC_LEN];
    t.copy_from_slice(trailer);
    Ok((body, icrc::from_wire(t)))
}

fn check_icrc(computed: u32, found: u32) -> Result<(), WireError> {
    if computed == found {
        Ok(())
    } else {
        Err(WireError::BadIcrc { computed, found })
    }
}

/// The parsed transport part of a packet.
type Transported<'a> = (Bth, ExtHeaders, &'a [u8]);

/// Parses BTH … pad (ICRC already removed and checked).
fn parse_transport(body: &[u8]) -> Result<Transported<'_>, WireError> {
    let bth = Bth::from_bytes(body)?;
    if bth.tver != 0 {
        return Err(WireError::BadTver(bth.tver));
    }
    let layout = bth.opcode.ext_layout();
    let rest = &body[Bth::LEN..];
    let (ext, used) = ExtHeaders::read(layout, rest)?;
    let data = &rest[used..];
    let pad = usize::from(bth.pad_count);
    if !layout.payload {
        if pad != 0 {
            return Err(WireError::BadPadCount);
        }
        if !data.is_empty() {
            return Err(WireError::UnexpectedPayload);
        }
    }
    if pad > data.len() {
        return Err(WireError::BadPadCount);
    }
    if !data.len().is_multiple_of(4) {
        return Err(WireError::BadLength);
    }
    Ok((bth, ext, &data[..data.len() - pad]))
}

impl<P> Packet<P> {
    /// A packet with no extension headers, UDP source port [`ROCE_SPORT_BASE`], TOS 0, TTL
    /// [`DEFAULT_TTL`] and IP ID 0. Set `ext` (or use [`Packet::with_ext`]) for opcodes that
    /// need headers.
    pub const fn new(src_ip: Ipv4Addr, dst_ip: Ipv4Addr, bth: Bth, payload: P) -> Self {
        Self {
            src_ip,
            dst_ip,
            udp_src_port: ROCE_SPORT_BASE,
            tos: 0,
            ttl: DEFAULT_TTL,
            ip_id: 0,
            bth,
            ext: ExtHeaders::NONE,
            payload,
        }
    }

    /// The same packet with extension headers `ext`.
    pub fn with_ext(mut self, ext: ExtHeaders) -> Self {
        self.ext = ext;
        self
    }

    /// The same headers with payload `payload`.
    pub fn with_payload<Q>(&self, payload: Q) -> Packet<Q> {
        Packet {
            src_ip: self.src_ip,
            dst_ip: self.dst_ip,
            udp_src_port: self.udp_src_port,
            tos: self.tos,
            ttl: self.ttl,
            ip_id: self.ip_id,
            bth: self.bth,
            ext: self.ext,
            payload,
        }
    }
}

impl Packet<Vec<u8>> {
    /// A CNP (`docs/rocev2.md#opcodes`): opcode 0x81, BECN set, DestQP `dest_qp`, PSN 0, P_Key
    /// 0xFFFF, 16 zero bytes after the BTH. ECN bits of the TOS are left to the caller.
    pub fn cnp(src_ip: Ipv4Addr, dst_ip: Ipv4Addr, dest_qp: u32) -> Self {
        let mut bth = Bth::new(Opcode::Cnp, dest_qp, 0);
        bth.becn = true;
        Self::new(src_ip, dst_ip, bth, alloc::vec![0u8; CNP_RESERVED_LEN])
    }

    /// Decodes and validates a whole frame (IPv4 … ICRC) into an owned packet.
    ///
    /// Checks, in order: IPv4 version, IHL, header checksum, total length, protocol, no
    /// fragmentation; UDP length, destination port 4791, checksum if non-zero; the ICRC;
    /// a known opcode, TVer 0, the opcode's extension headers, pad count and length.
    /// Never panics.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        Packet::parse(frame).map(|v| v.to_owned_packet())
    }

    /// Decodes UDP-payload form (BTH … ICRC) received from `src_ip:src_port` at `dst_ip`.
    /// The ICRC is checked against the pseudo header of [`icrc::icrc_udp_payload`]. The
    /// result has TOS 0, TTL [`DEFAULT_TTL`] and IP ID 0.
    pub fn decode_udp_payload(
        src_ip: Ipv4Addr,
        dst_ip: Ipv4Addr,
        src_port: u16,
        bytes: &[u8],
    ) -> Result<Self, WireError> {
        Packet::parse_udp_payload(src_ip, dst_ip, src_port, bytes).map(|v| v.to_owned_packet())
    }
}

impl<'a> Packet<&'a [u8]> {
    /// Like [`Packet::decode`], but the payload borrows `frame`.
    pub fn parse(frame: &'a [u8]) -> Result<Self, WireError> {
        let (ip, udp, udp_payload) = split_frame(frame)?;
        let (body, found) = split_icrc(udp_payload)?;
        let mut hdr = [0u8; IPV4_UDP_HEADER_LEN];
        hdr.copy_from_slice(&frame[..IPV4_UDP_HEADER_LEN]);
        check_icrc(icrc::icrc_ipv4(&hdr, body), found)?;
        let (bth, ext, payload) = parse_transport(body)?;
        Ok(Self {
            src_ip: ip.src,
            dst_ip: ip.dst,
            udp_src_port: udp.src_port,
            tos: ip.tos,
            ttl: ip.ttl,
            ip_id: ip.identification,
            bth,
            ext,
            payload,
        })
    }

    /// Like [`Packet::decode_udp_payload`], but the payload borrows `bytes`.
    pub fn parse_udp_payload(
        src_ip: Ipv4Addr,
        dst_ip: Ipv4Addr,
        src_port: u16,
        bytes: &'a [u8],
    ) -> Result<Self, WireError> {
        if bytes.len() > MAX_UDP_PAYLOAD {
            return Err(WireError::TooLarge);
        }
        let (body, found) = split_icrc(bytes)?;
        check_icrc(
            icrc::icrc_udp_payload(src_ip, dst_ip, src_port, body),
            found,
        )?;
        let (bth, ext, payload) = parse_transport(body)?;
        Ok(Self {
            src_ip,
            dst_ip,
            udp_src_port: src_port,
            tos: 0,
            ttl: DEFAULT_TTL,
            ip_id: 0,
            bth,
            ext,
            payload,
        })
    }
}

impl<P> Packet<P> {
    /// Pad bytes a payload of `len` bytes needs: `(−len) & 3`.
    const fn pad_for(len: usize) -> usize {
        len.wrapping_neg() & 3
    }

    /// Bytes from the BTH through the ICRC with a payload of `len` bytes.
    fn udp_payload_len_for(&self, len: usize) -> usize {
        Bth::LEN + self.bth.opcode.ext_layout().len() + len + Self::pad_for(len) + ICRC_LEN
    }

    /// Every check of [`Packet::encode`], for a payload of `len` bytes.
    pub(crate) fn validate_for(&self, len: usize) -> Result<(), WireError> {
        let op = self.bth.opcode;
        if !self.ext.matches(op) {
            return Err(WireError::HeaderMismatch(op));
        }
        if !op.has_payload() && len != 0 {
            return Err(WireError::UnexpectedPayload);
        }
        if self.bth.tver != 0 {
            return Err(WireError::FieldOutOfRange(Field::Tver));
        }
        if self.bth.dest_qp > MASK_24 {
            return Err(WireError::FieldOutOfRange(Field::DestQp));
        }
        if self.bth.psn > MASK_24 {
            return Err(WireError::FieldOutOfRange(Field::Psn));
        }
        if self.ext.aeth.is_some_and(|a| a.msn > MASK_24) {
            return Err(WireError::FieldOutOfRange(Field::Msn));
        }
        if self.ext.deth.is_some_and(|d| d.src_qp > MASK_24) {
            return Err(WireError::FieldOutOfRange(Field::SrcQp));
        }
        if len > MAX_UDP_PAYLOAD || self.udp_payload_len_for(len) > MAX_UDP_PAYLOAD {
            return Err(WireError::TooLarge);
        }
        Ok(())
    }

    /// Appends BTH and extension headers (pad count for a payload of `len` bytes) to `out`.
    fn write_headers(&self, out: &mut Vec<u8>, len: usize) {
        let mut bth = self.bth;
        bth.pad_count = Self::pad_for(len) as u8;
        out.extend_from_slice(&bth.to_bytes());
        self.ext.write(out);
    }

    /// Encodes the frame of this packet's headers into `out` (cleared first; its allocation
    /// is reused) with a payload of `payload_len` bytes that `fill` writes in place: for
    /// example a DMA read straight into the frame, with no intermediate buffer. The
    /// `payload` field is not used. The ICRC is computed after `fill`.
    ///
    /// Errors: those of [`Packet::encode`] (nothing is filled); `Ok(Err(e))` if `fill`
    /// failed with `e` (`out` then holds no valid frame).
    pub fn encode_into_with<E>(
        &self,
        out: &mut Vec<u8>,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Result<(), E>, WireError> {
        self.validate_for(payload_len)?;
        let udp_payload_len = self.udp_payload_len_for(payload_len);
        out.clear();
        out.reserve(IPV4_UDP_HEADER_LEN + udp_payload_len);
        let hdr = ip_udp_header(
            self.src_ip,
            self.dst_ip,
            self.udp_src_port,
            self.tos,
            self.ttl,
            self.ip_id,
            udp_payload_len,
        );
        out.extend_from_slice(&hdr);
        self.write_headers(out, payload_len);
        let at = out.len();
        // Payload and pad, zeroed, then the payload written in place.
        out.resize(at + payload_len + Self::pad_for(payload_len), 0);
        if let Err(e) = fill(&mut out[at..at + payload_len]) {
            return Ok(Err(e));
        }
        let crc = icrc::icrc_ipv4(&hdr, &out[IPV4_UDP_HEADER_LEN..]);
        out.extend_from_slice(&icrc::to_wire(crc));
        Ok(Ok(()))
    }
}

impl<P: AsRef<[u8]>> Packet<P> {
    /// An owned copy.
    pub fn to_owned_packet(&self) -> Packet {
        self.with_payload(self.payload.as_ref().to_vec())
    }

    /// Pad bytes the payload needs: `(−len) & 3`.
    pub fn pad_len(&self) -> usize {
        Self::pad_for(self.payload.as_ref().len())
    }

    /// Bytes from the BTH through the ICRC.
    pub fn udp_payload_len(&self) -> usize {
        self.udp_payload_len_for(self.payload.as_ref().len())
    }

    /// Bytes of the whole frame (IPv4 header … ICRC).
    pub fn frame_len(&self) -> usize {
        IPV4_UDP_HEADER_LEN + self.udp_payload_len()
    }

    /// Appends BTH … pad (no ICRC) to `out`.
    fn write_transport(&self, out: &mut Vec<u8>) {
        let payload = self.payload.as_ref();
        self.write_headers(out, payload.len());
        out.extend_from_slice(payload);
        out.extend_from_slice(&[0u8; 3][..self.pad_len()]);
    }

    /// Encodes the whole frame: IPv4 header (DF, protocol 17, checksum), UDP header (port
    /// 4791, checksum 0), BTH (pad count from the payload), extension headers, payload, zero
    /// pad, ICRC.
    ///
    /// Errors: [`WireError::HeaderMismatch`] if `ext` is not exactly the opcode's headers,
    /// [`WireError::UnexpectedPayload`], [`WireError::FieldOutOfRange`] for a 24-bit field
    /// over 24 bits or TVer ≠ 0, [`WireError::TooLarge`] past 65535 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// [`Packet::encode`] into `out` (cleared first; its allocation is reused).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let payload = self.payload.as_ref();
        self.encode_into_with(out, payload.len(), |dst| {
            dst.copy_from_slice(payload);
            Ok::<(), core::convert::Infallible>(())
        })
        .map(|_| ())
    }

    /// Encodes UDP-payload form: BTH … pad + ICRC, the ICRC computed over the pseudo header
    /// of [`icrc::icrc_udp_payload`] (addresses, `udp_src_port`, port 4791, IP ID 0). The
    /// receiver must pass the same addresses and source port to
    /// [`Packet::decode_udp_payload`]. Errors as [`Packet::encode`].
    pub fn encode_udp_payload(&self) -> Result<Vec<u8>, WireError> {
        self.validate_for(self.payload.as_ref().len())?;
        let mut out = Vec::with_capacity(self.udp_payload_len());
        self.write_transport(&mut out);
        let crc = icrc::icrc_udp_payload(self.src_ip, self.dst_ip, self.udp_src_port, &out);
        out.extend_from_slice(&icrc::to_wire(crc));
        Ok(out)
    }
}

/// Rewrites the ICRC of a frame as it would be in UDP-payload form from `src_port`, and
/// returns that UDP payload (BTH … ICRC). An ICRC that was wrong in the frame stays wrong by
/// the same amount, so corruption is still detected at the far end. Used by
/// [`crate::fabric::UdpFabric`]; the frame's IPv4/UDP headers are validated first.
pub fn frame_to_udp_payload(frame: &[u8], src_port: u16) -> Result<Vec<u8>, WireError> {
    let (ip, _udp, udp_payload) = split_frame(frame)?;
    let (body, found) = split_icrc(udp_payload)?;
    let mut hdr = [0u8; IPV4_UDP_HEADER_LEN];
    hdr.copy_from_slice(&frame[..IPV4_UDP_HEADER_LEN]);
    let as_sent = icrc::icrc_ipv4(&hdr, body);
    let canonical = icrc::icrc_udp_payload(ip.src, ip.dst, src_port, body);
    let mut out = Vec::with_capacity(udp_payload.len());
    out.extend_from_slice(body);
    out.extend_from_slice(&icrc::to_wire(canonical ^ as_sent ^ found));
    Ok(out)
}

/// Rebuilds a frame from UDP-payload form received from `src_ip:src_port` at `dst_ip`: an
/// IPv4 header (TOS 0, TTL [`DEFAULT_TTL`], ID 0, DF) and a UDP header (destination port
/// 4791, checksum 0) are put in front and the bytes are kept as they are, so the frame's
/// ICRC checks exactly when [`Packet::decode_udp_payload`] would accept the bytes.
pub fn udp_payload_to_frame(
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    src_port: u16,
    bytes: &[u8],
) -> Result<Vec<u8>, WireError> {
    if bytes.len() > MAX_UDP_PAYLOAD {
        return Err(WireError::TooLarge);
    }
    let hdr = pseudo_ip_udp_header(src_ip, dst_ip, src_port, bytes.len());
    let mut out = Vec::with_capacity(IPV4_UDP_HEADER_LEN + bytes.len());
    out.extend_from_slice(&hdr);
    out.extend_from_slice(bytes);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    #[test]
    fn encode_into_with_fills_in_place_and_equals_encode() {
        let mut out = vec![0xAAu8; 7]; // stale contents are discarded
        for len in [0usize, 1, 3, 4, 5, 64, 1000, 1024, 4096] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut bth = Bth::new(Opcode::RcRdmaWriteOnly, 0x42, 7);
            bth.ack_req = true;
            let ext = ExtHeaders {
                reth: Some(Reth {
                    va: 0x1000,
                    rkey: 9,
                    dma_len: len as u32,
                }),
                ..ExtHeaders::NONE
            };
            let pkt = Packet::new(A, B, bth, payload.as_slice()).with_ext(ext);
            let want = pkt.encode().unwrap();
            let header_only = Packet::new(A, B, bth, ()).with_ext(ext);
            let r = header_only.encode_into_with(&mut out, len, |dst| {
                assert_eq!(dst.len(), len);
                dst.copy_from_slice(&payload);
                Ok::<(), ()>(())
            });
            assert_eq!(r, Ok(Ok(())));
            assert_eq!(out, want, "payload length {len}");
            let back = Packet::decode(&out).unwrap();
            assert_eq!(back.payload, payload);
            // encode_into reuses the buffer and gives the same bytes.
            pkt.encode_into(&mut out).unwrap();
            assert_eq!(out, want);
        }
    }

    #[test]
    fn encode_into_with_reports_fill_and_header_errors() {
        let bth = Bth::new(Opcode::RcSendOnly, 1, 1);
        let mut out = Vec::new();
        let r = Packet::new(A, B, bth, ()).encode_into_with(&mut out, 8, |_| Err(5u8));
        assert_eq!(r, Ok(Err(5)));
        // Header errors come before the fill, which is never called.
        let ack = Bth::new(Opcode::RcAcknowledge, 1, 1); // needs an AETH
        let r = Packet::new(A, B, ack, ()).encode_into_with(&mut out, 0, |_| -> Result<(), ()> {
            panic!("fill called for an invalid packet")
        });
        assert_eq!(r, Err(WireError::HeaderMismatch(Opcode::RcAcknowledge)));
        let r =
            Packet::new(A, B, bth, ()).encode_into_with(&mut out, 70_000, |_| -> Result<(), ()> {
                panic!("fill called for an oversized packet")
            });
        assert_eq!(r, Err(WireError::TooLarge));
    }

    #[test]
    fn captured_cnp_decodes() {
        let frame: [u8; 60] = [
            0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00,
            0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,
            0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x82, 0xfd, 0x00, 0x2a,
        ];
        let p = Packet::decode(&frame).unwrap();
        assert_eq!(p.src_ip, Ipv4Addr::new(10, 0, 17, 1));
        assert_eq!(p.dst_ip, Ipv4Addr::new(10, 0, 18, 1));
        assert_eq!(p.tos, 0xC2);
        assert_eq!(p.udp_src_port, 0);
        assert_eq!(p.ip_id, 0x718c);
        assert_eq!(p.bth.opcode, Opcode::Cnp);
        assert!(p.bth.becn && !p.bth.fecn && !p.bth.ack_req);
        assert_eq!(p.bth.dest_qp, 0x118);
        assert_eq!(p.payload, vec![0u8; 16]);
        // Our encoder reproduces the captured bytes exactly.
        let mut cnp = Packet::cnp(p.src_ip, p.dst_ip, 0x118);
        cnp.udp_src_port = 0;
        cnp.tos = 0xC2;
        cnp.ip_id = 0x718c;
        assert_eq!(cnp.encode().unwrap(), frame);
    }

    #[test]
    fn encode_rejects_inconsistent_packets() {
        let p = Packet::new(A, B, Bth::new(Opcode::RcRdmaWriteOnly, 1, 0), vec![1u8]);
        assert_eq!(
            p.encode(),
            Err(WireError::HeaderMismatch(Opcode::RcRdmaWriteOnly))
        );
        let p =
            Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1, 0), vec![]).with_ext(ExtHeaders {
                imm_dt: Some(ImmDt { imm: 1 }),
                ..ExtHeaders::NONE
            });
        assert_eq!(
            p.encode(),
            Err(WireError::HeaderMismatch(Opcode::RcSendOnly))
        );
        let ack = ExtHeaders {
            aeth: Some(Aeth::ack(0)),
            ..ExtHeaders::NONE
        };
        let p =
            Packet::new(A, B, Bth::new(Opcode::RcAcknowledge, 1, 0), vec![0u8; 4]).with_ext(ack);
        assert_eq!(p.encode(), Err(WireError::UnexpectedPayload));
        let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1 << 24, 0), vec![]);
        assert_eq!(p.encode(), Err(WireError::FieldOutOfRange(Field::DestQp)));
        let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1, 1 << 24), vec![]);
        assert_eq!(p.encode(), Err(WireError::FieldOutOfRange(Field::Psn)));
        let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1, 0), vec![0u8; 65_600]);
        assert_eq!(p.encode(), Err(WireError::TooLarge));
        // Payload + pad must fit: 65535 − 28 − 12 − 4 = 65491, rounded down to 4 bytes.
        let biggest = (MAX_UDP_PAYLOAD - Bth::LEN - ICRC_LEN) & !3;
        let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1, 0), vec![0u8; biggest]);
        assert_eq!(p.encode().unwrap().len(), 65_532);
        let p = Packet::new(
            A,
            B,
            Bth::new(Opcode::RcSendOnly, 1, 0),
            vec![0u8; biggest + 1],
        );
        assert_eq!(p.encode(), Err(WireError::TooLarge));
    }

    #[test]
    fn aeth_kinds() {
        assert_eq!(Aeth::ack(5).kind(), AethKind::Ack { credits: 0x1F });
        assert_eq!(Aeth::rnr_nak(14, 5).kind(), AethKind::RnrNak { timer: 14 });
        assert_eq!(Aeth::rnr_nak(14, 5).syndrome, 0x2E);
        assert_eq!(
            Aeth::nak(NakCode::RemoteAccessError, 0).syndrome,
            0x62,
            "NAK codes of docs/rocev2.md#aeth-syndrome"
        );
        assert_eq!(
            Aeth {
                syndrome: 0x60,
                msn: 0
            }
            .kind(),
            AethKind::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Aeth {
                syndrome: 0x65,
                msn: 0
            }
            .kind(),
            AethKind::Reserved(0x65)
        );
        assert_eq!(
            Aeth {
                syndrome: 0x40,
                msn: 0
            }
            .kind(),
            AethKind::Reserved(0x40)
        );
    }

    #[test]
    fn udp_checksum_is_verified_when_present() {
        let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 7, 9), vec![1u8, 2, 3]);
        let mut f = p.encode().unwrap();
        // Fill in a correct UDP checksum: accepted.
        let csum = {
            let mut d = f[20..].to_vec();
            d[6] = 0;
            d[7] = 0;
            let s = A.octets();
            let t = B.octets();
            let pseudo = u32::from(u16::from_be_bytes([s[0], s[1]]))
                + u32::from(u16::from_be_bytes([s[2], s[3]]))
                + u32::from(u16::from_be_bytes([t[0], t[1]]))
                + u32::from(u16::from_be_bytes([t[2], t[3]]))
                + 17
                + d.len() as u32;
            internet_checksum(pseudo, &d)
        };
        f[26..28].copy_from_slice(&csum.to_be_bytes());
        let mut expect = p.clone();
        expect.bth.pad_count = 1;
        assert_eq!(Packet::decode(&f).unwrap(), expect);
        f[27] ^= 1;
        assert_eq!(Packet::decode(&f), Err(WireError::BadUdpChecksum));
    }

    #[test]
    fn frame_and_udp_payload_forms_convert() {
        let mut p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 7, 9), vec![5u8; 5]);
        p.ip_id = 0x1234;
        p.udp_src_port = 0xC123;
        let frame = p.encode().unwrap();
        let udp = frame_to_udp_payload(&frame, 4791).unwrap();
        let back = Packet::decode_udp_payload(A, B, 4791, &udp).unwrap();
        assert_eq!(back.payload, p.payload);
        assert_eq!(back.bth, Packet::decode(&frame).unwrap().bth);
        let rebuilt = udp_payload_to_frame(A, B, 4791, &udp).unwrap();
        assert_eq!(Packet::decode(&rebuilt).unwrap().payload, p.payload);
        // A corrupted frame stays corrupted through the conversion.
        let mut bad = frame.clone();
        bad[45] ^= 0x10;
        let udp = frame_to_udp_payload(&bad, 4791).unwrap();
        assert!(matches!(
            Packet::decode_udp_payload(A, B, 4791, &udp),
            Err(WireError::BadIcrc { .. })
        ));
    }
}
