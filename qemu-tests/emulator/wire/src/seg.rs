//! Segmentation of messages into packets at a path MTU (`docs/rocev2.md#segmentation`).
//!
//! A message of at most one MTU (zero bytes included) is one ONLY packet. A longer one is a
//! FIRST of exactly MTU bytes, zero or more MIDDLEs of exactly MTU bytes, and a LAST of
//! 1..=MTU bytes.

use crate::packet::{Opcode, Position, Transport};

/// The IB MTU enumeration (`docs/rocev2.md#segmentation`), as carried in QP contexts and CM
/// messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

/// Header bytes rxe reserves when turning a netdev MTU into an IB MTU
/// (`RXE_MAX_HDR_LENGTH`).
pub const MAX_HDR_LENGTH: u32 = 80;

impl Mtu {
    /// The MTU for IB enum value `v` (1..=5).
    pub const fn from_ib(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Mtu256,
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            _ => return None,
        })
    }

    /// The IB enum value.
    pub const fn as_ib(self) -> u8 {
        self as u8
    }

    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest IB MTU whose packets fit a netdev MTU: `netdev_mtu − 80` rounded down to
    /// an IB MTU and limited to 256..=4096 (1500 → 1024, 9000 → 4096).
    pub const fn from_netdev_mtu(netdev_mtu: u32) -> Self {
        let room = netdev_mtu.saturating_sub(MAX_HDR_LENGTH);
        if room >= 4096 {
            Self::Mtu4096
        } else if room >= 2048 {
            Self::Mtu2048
        } else if room >= 1024 {
            Self::Mtu1024
        } else if room >= 512 {
            Self::Mtu512
        } else {
            Self::Mtu256
        }
    }
}

/// Bytes of the IB MTU enum value `ib_mtu` (1 → 256 … 5 → 4096); `None` for other values.
pub const fn mtu_bytes(ib_mtu: u8) -> Option<u32> {
    match Mtu::from_ib(ib_mtu) {
        Some(m) => Some(m.bytes()),
        None => None,
    }
}

/// Packets needed for a message of `len` bytes: `ceil(len / mtu)`, at least 1.
/// Also the number of PSNs an RDMA READ request reserves (`docs/rocev2.md#reliability`).
pub const fn packet_count(len: u32, mtu: Mtu) -> u32 {
    let m = mtu.bytes();
    if len == 0 { 1 } else { len.div_ceil(m) }
}

/// The kind of message being segmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageOp {
    /// SEND.
    Send,
    /// SEND with immediate (ImmDt on the LAST or ONLY packet).
    SendWithImm,
    /// SEND with invalidate (IETH on the LAST or ONLY packet; RC only).
    SendWithInv,
    /// RDMA WRITE (RETH on the FIRST or ONLY packet).
    RdmaWrite,
    /// RDMA WRITE with immediate.
    RdmaWriteWithImm,
    /// RDMA READ response (RC only; AETH on FIRST, LAST and ONLY).
    RdmaReadResponse,
}

/// The opcode of a packet at `pos` in a `msg` message on `transport`; `None` when the
/// transport has no such opcode (UD multi-packet messages, UC invalidate or read responses,
/// anything on the CNP transport).
pub const fn segment_opcode(transport: Transport, msg: MessageOp, pos: Position) -> Option<Opcode> {
    use MessageOp as M;
    use Opcode::*;
    use Position as P;
    let rc = match (msg, pos) {
        (M::Send | M::SendWithImm | M::SendWithInv, P::First) => RcSendFirst,
        (M::Send | M::SendWithImm | M::SendWithInv, P::Middle) => RcSendMiddle,
        (M::Send, P::Last) => RcSendLast,
        (M::Send, P::Only) => RcSendOnly,
        (M::SendWithImm, P::Last) => RcSendLastWithImm,
        (M::SendWithImm, P::Only) => RcSendOnlyWithImm,
        (M::SendWithInv, P::Last) => RcSendLastWithInv,
        (M::SendWithInv, P::Only) => RcSendOnlyWithInv,
        (M::RdmaWrite | M::RdmaWriteWithImm, P::First) => RcRdmaWriteFirst,
        (M::RdmaWrite | M::RdmaWriteWithImm, P::Middle) => RcRdmaWriteMiddle,
        (M::RdmaWrite, P::Last) => RcRdmaWriteLast,
        (M::RdmaWrite, P::Only) => RcRdmaWriteOnly,
        (M::RdmaWriteWithImm, P::Last) => RcRdmaWriteLastWithImm,
        (M::RdmaWriteWithImm, P::Only) => RcRdmaWriteOnlyWithImm,
        (M::RdmaReadResponse, P::First) => RcRdmaReadResponseFirst,
        (M::RdmaReadResponse, P::Middle) => RcRdmaReadResponseMiddle,
        (M::RdmaReadResponse, P::Last) => RcRdmaReadResponseLast,
        (M::RdmaReadResponse, P::Only) => RcRdmaReadResponseOnly,
    };
    match transport {
        Transport::Rc => Some(rc),
        Transport::Uc => match msg {
            M::SendWithInv | M::RdmaReadResponse => None,
            // UC opcodes are the RC ones 0x00..=0x0B with bit 5 set.
            _ => Opcode::from_u8(rc as u8 | 0x20),
        },
        Transport::Ud => match (msg, pos) {
            (M::Send, P::Only) => Some(UdSendOnly),
            (M::SendWithImm, P::Only) => Some(UdSendOnlyWithImm),
            _ => None,
        },
        Transport::Cnp => None,
    }
}

/// One packet's share of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Packet index in the message (PSN offset from the first packet).
    pub index: u32,
    /// Byte offset of this packet's payload in the message.
    pub offset: u32,
    /// Payload bytes in this packet.
    pub len: u32,
    /// FIRST, MIDDLE, LAST or ONLY.
    pub position: Position,
}

/// Iterator over the [`Segment`]s of a message; see [`segments`].
#[derive(Clone, Debug)]
pub struct Segments {
    len: u32,
    mtu: u32,
    count: u32,
    next: u32,
}

impl Iterator for Segments {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.next >= self.count {
            return None;
        }
        let index = self.next;
        self.next += 1;
        let offset = index * self.mtu;
        Some(Segment {
            index,
            offset,
            len: (self.len - offset).min(self.mtu),
            position: Position::of(index, self.count),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments {}

/// The packets of a `len`-byte message at `mtu`, in order.
pub const fn segments(len: u32, mtu: Mtu) -> Segments {
    Segments {
        len,
        mtu: mtu.bytes(),
        count: packet_count(len, mtu),
        next: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn mtu_values() {
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
        assert_eq!(Mtu::from_netdev_mtu(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::from_netdev_mtu(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::from_netdev_mtu(100), Mtu::Mtu256);
        assert_eq!(Mtu::from_netdev_mtu(2128), Mtu::Mtu2048);
        assert_eq!(Mtu::from_netdev_mtu(2127), Mtu::Mtu1024);
    }

    #[test]
    fn counts() {
        let m = Mtu::Mtu1024;
        assert_eq!(packet_count(0, m), 1);
        assert_eq!(packet_count(1, m), 1);
        assert_eq!(packet_count(1024, m), 1);
        assert_eq!(packet_count(1025, m), 2);
        assert_eq!(packet_count(3 * 1024, m), 3);
        assert_eq!(packet_count(u32::MAX, Mtu::Mtu256), (u32::MAX >> 8) + 1);
    }

    #[test]
    fn zero_length_is_one_only_packet() {
        let s: Vec<_> = segments(0, Mtu::Mtu256).collect();
        assert_eq!(
            s,
            [Segment {
                index: 0,
                offset: 0,
                len: 0,
                position: Position::Only
            }]
        );
        let op = segment_opcode(Transport::Rc, MessageOp::Send, s[0].position);
        assert_eq!(op, Some(Opcode::RcSendOnly));
    }

    #[test]
    fn segments_cover_the_message() {
        for len in [1u32, 255, 256, 257, 512, 700, 4096, 10_000] {
            let segs: Vec<_> = segments(len, Mtu::Mtu256).collect();
            assert_eq!(segs.len() as u32, packet_count(len, Mtu::Mtu256));
            assert_eq!(segs.iter().map(|s| s.len).sum::<u32>(), len);
            for (i, s) in segs.iter().enumerate() {
                assert_eq!(s.index as usize, i);
                assert_eq!(s.offset, 256 * i as u32);
                match s.position {
                    Position::First | Position::Middle => assert_eq!(s.len, 256),
                    Position::Last => assert!((1..=256).contains(&s.len)),
                    Position::Only => assert!(s.len <= 256 && segs.len() == 1),
                }
            }
        }
    }

    #[test]
    fn opcodes_per_position() {
        use MessageOp as M;
        use Opcode::*;
        use Position as P;
        let rc = |m, p| segment_opcode(Transport::Rc, m, p).unwrap();
        assert_eq!(rc(M::Send, P::First), RcSendFirst);
        assert_eq!(rc(M::SendWithImm, P::Middle), RcSendMiddle);
        assert_eq!(rc(M::SendWithImm, P::Last), RcSendLastWithImm);
        assert_eq!(rc(M::SendWithInv, P::Only), RcSendOnlyWithInv);
        assert_eq!(rc(M::RdmaWriteWithImm, P::First), RcRdmaWriteFirst);
        assert_eq!(rc(M::RdmaWriteWithImm, P::Only), RcRdmaWriteOnlyWithImm);
        assert_eq!(rc(M::RdmaReadResponse, P::Middle), RcRdmaReadResponseMiddle);
        let uc = |m, p| segment_opcode(Transport::Uc, m, p);
        assert_eq!(uc(M::RdmaWrite, P::Last), Some(UcRdmaWriteLast));
        assert_eq!(uc(M::SendWithImm, P::Only), Some(UcSendOnlyWithImm));
        assert_eq!(uc(M::SendWithInv, P::Only), None);
        assert_eq!(uc(M::RdmaReadResponse, P::First), None);
        let ud = |m, p| segment_opcode(Transport::Ud, m, p);
        assert_eq!(ud(M::Send, P::Only), Some(UdSendOnly));
        assert_eq!(ud(M::SendWithImm, P::Only), Some(UdSendOnlyWithImm));
        assert_eq!(ud(M::Send, P::First), None);
        assert_eq!(ud(M::RdmaWrite, P::Only), None);
        // Every opcode produced agrees with its own position and transport.
        for t in [Transport::Rc, Transport::Uc, Transport::Ud] {
            for m in [
                M::Send,
                M::SendWithImm,
                M::SendWithInv,
                M::RdmaWrite,
                M::RdmaWriteWithImm,
                M::RdmaReadResponse,
            ] {
                for p in [P::First, P::Middle, P::Last, P::Only] {
                    if let Some(op) = segment_opcode(t, m, p) {
                        assert_eq!(op.position(), p, "{op:?}");
                        assert_eq!(op.transport(), t, "{op:?}");
                    }
                }
            }
        }
    }
}
