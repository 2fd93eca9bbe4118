//! The emulated EFA's own wire encapsulation (`docs/efa.md#the-emulators-wire-format`).
//!
//! SRD's real wire format is not public; this one is the emulator's, and no interoperability
//! with real EFA devices is claimed. It rides the same fabrics as the ConnectX model's RoCEv2
//! traffic: an IPv4 / UDP (destination port 4791) frame whose UDP payload starts with a
//! 12-byte header shaped like an InfiniBand BTH, with an opcode from the range the IB
//! specification leaves to manufacturers (0xC0..=0xFF, so no RoCE endpoint takes it for its
//! own), then the 60-byte EFA header, the payload and a 4-byte ICRC computed exactly as
//! RoCEv2's (so every fabric's corruption is caught and the UDP fabric's ICRC rewrite works).
//! Multi-byte fields are big-endian (network order).

use std::net::Ipv4Addr;

use roce_wire::icrc;
use roce_wire::packet::{ROCE_SPORT_BASE, split_frame, udp_payload_to_frame};

/// UD send.
pub(crate) const OP_UD_SEND: u8 = 0xe0;
/// SRD send (acknowledged).
pub(crate) const OP_SRD_SEND: u8 = 0xe1;
/// SRD acknowledgement (status 0) or negative acknowledgement (an `efa_io_comp_status`).
pub(crate) const OP_SRD_ACK: u8 = 0xe2;
/// SRD RDMA read request: chunks `chunk .. chunk + imm` of the read that `raddr`, `total`
/// and `chunks` describe (a read asks for what its send window has room for).
pub(crate) const OP_SRD_READ_REQ: u8 = 0xe3;
/// SRD RDMA read response (one chunk).
pub(crate) const OP_SRD_READ_RESP: u8 = 0xe4;
/// SRD RDMA write (one chunk).
pub(crate) const OP_SRD_WRITE: u8 = 0xe5;
/// SRD notice that an RDMA write with immediate landed whole (sent once every chunk was
/// acknowledged; consumes a receive at the responder; `total` is the write's length, the
/// immediate in `imm`).
pub(crate) const OP_SRD_WRITE_IMM: u8 = 0xe6;

/// Header flag: immediate data present.
pub(crate) const FLAG_IMM: u8 = 1;

/// Bytes of the BTH-shaped header and the EFA header.
pub(crate) const HDR_LEN: usize = 72;

/// One packet's header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hdr {
    /// `OP_*`.
    pub op: u8,
    /// `FLAG_*`.
    pub flags: u8,
    /// Destination QP number.
    pub dest_qpn: u16,
    /// Source QP number.
    pub src_qpn: u16,
    /// Status (acks, read responses): an `efa_io_comp_status`.
    pub status: u8,
    /// The sender QP's incarnation (its device handle): with the source address and the
    /// destination QP it names the SRD context messages are numbered in.
    pub src_qp_id: u32,
    /// Message number within the SRD context.
    pub msg: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Immediate data (host order, as the WQE carries it); a read request's chunk count.
    pub imm: u32,
    /// Chunk of a multi-packet RDMA operation.
    pub chunk: u16,
    /// Chunks of the operation.
    pub chunks: u16,
    /// Byte offset of this chunk in the operation.
    pub offset: u32,
    /// Bytes of the whole operation.
    pub total: u32,
    /// R_Key (RDMA).
    pub rkey: u32,
    /// Remote address of the operation's first byte (RDMA).
    pub raddr: u64,
    /// The sender's GID.
    pub src_gid: [u8; 16],
}

impl Hdr {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.op);
        out.push(self.flags);
        out.extend_from_slice(&[0xff, 0xff, 0]);
        out.push(0);
        out.extend_from_slice(&self.dest_qpn.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.src_qpn.to_be_bytes());
        out.push(self.status);
        out.push(0);
        for v in [self.src_qp_id, self.msg, self.qkey, self.imm] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.chunk.to_be_bytes());
        out.extend_from_slice(&self.chunks.to_be_bytes());
        for v in [self.offset, self.total, self.rkey] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.raddr.to_be_bytes());
        out.extend_from_slice(&self.src_gid);
    }

    fn decode(b: &[u8]) -> Option<Hdr> {
        let b = b.get(..HDR_LEN)?;
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if !(0xc0..=0xff).contains(&b[0]) || b[5] != 0 {
            return None;
        }
        let mut src_gid = [0u8; 16];
        src_gid.copy_from_slice(&b[56..72]);
        Some(Hdr {
            op: b[0],
            flags: b[1],
            dest_qpn: u16_at(6),
            src_qpn: u16_at(12),
            status: b[14],
            src_qp_id: u32_at(16),
            msg: u32_at(20),
            qkey: u32_at(24),
            imm: u32_at(28),
            chunk: u16_at(32),
            chunks: u16_at(34),
            offset: u32_at(36),
            total: u32_at(40),
            rkey: u32_at(44),
            raddr: u64::from_be_bytes(b[48..56].try_into().ok()?),
            src_gid,
        })
    }
}

/// A whole frame from `src` to `dst` (IPv4 … ICRC).
pub(crate) fn frame(src: Ipv4Addr, dst: Ipv4Addr, h: &Hdr, payload: &[u8]) -> Option<Vec<u8>> {
    let mut t = Vec::with_capacity(HDR_LEN + payload.len() + icrc::ICRC_LEN);
    h.encode(&mut t);
    t.extend_from_slice(payload);
    t.extend_from_slice(&[0; icrc::ICRC_LEN]);
    // The UDP source port spreads SRD contexts over paths as RoCEv2's does flows.
    let sport = ROCE_SPORT_BASE | (h.src_qpn & 0x3fff);
    let mut f = udp_payload_to_frame(src, dst, sport, &t).ok()?;
    let crc = icrc::frame_icrc(&f)?;
    let n = f.len();
    f[n - icrc::ICRC_LEN..].copy_from_slice(&icrc::to_wire(crc));
    Some(f)
}

/// The source address, header and payload of a frame whose IPv4/UDP headers and ICRC check
/// and whose opcode is one of this encapsulation's; `None` for anything else.
pub(crate) fn parse(f: &[u8]) -> Option<(Ipv4Addr, Hdr, &[u8])> {
    let (ip, _udp, body) = split_frame(f).ok()?;
    if body.len() < HDR_LEN + icrc::ICRC_LEN {
        return None;
    }
    let want = icrc::frame_icrc(f)?;
    let n = f.len();
    let got = icrc::from_wire(f[n - icrc::ICRC_LEN..].try_into().ok()?);
    if want != got {
        return None;
    }
    let h = Hdr::decode(body)?;
    Some((ip.src, h, &body[HDR_LEN..body.len() - icrc::ICRC_LEN]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_caught() {
        let h = Hdr {
            op: OP_SRD_WRITE,
            flags: FLAG_IMM,
            dest_qpn: 7,
            src_qpn: 9,
            status: 3,
            src_qp_id: 0x0102_0009,
            msg: 42,
            qkey: 0x1111,
            imm: 5,
            chunk: 1,
            chunks: 3,
            offset: 8928,
            total: 20000,
            rkey: 0x300,
            raddr: 0x1234_5678_9abc,
            src_gid: [7; 16],
        };
        let a = Ipv4Addr::new(127, 0, 0, 1);
        let b = Ipv4Addr::new(127, 0, 0, 2);
        let f = frame(a, b, &h, b"payload").unwrap();
        let (src, back, p) = parse(&f).unwrap();
        assert_eq!((src, back, p), (a, h, &b"payload"[..]));
        for i in 28..f.len() {
            if i == 28 + 4 {
                continue;
            }
            let mut bad = f.clone();
            bad[i] ^= 0x10;
            assert!(parse(&bad).is_none(), "byte {i}");
        }
    }
}
