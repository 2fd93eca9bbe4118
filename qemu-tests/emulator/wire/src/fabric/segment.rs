//! Segments: a run of consecutive packets of one RC message that a fabric carries as one unit
//! (the RoCE counterpart of a NIC's segmentation offload).
//!
//! A sender that would emit packets `index .. index + count` of a message back to back may
//! hand them to its port as one [`Segment`]: the headers every packet shares, what varies
//! from packet to packet as rules (PSN, opcode by [`Position`], which extension headers), and
//! the payload as a [`SegmentPayload`] the receiver reads when it takes the segment in. No
//! frame is built and no ICRC computed on the way.
//!
//! A segment only exists where nothing can tell it from its packets. Wherever frames become
//! bytes, or can be lost, duplicated, corrupted, reordered, jittered or captured one by one,
//! the segment is cut into its packets first ([`Segment::encode_packet`]: real frames, ICRC
//! and all), and those frames go their way. A receiver that cannot take a segment as a whole
//! takes its packets one by one ([`Segment::packet`]), with the same result as if they had
//! arrived as frames.
//!
//! Reading the payload late is sound for RC only: the sender's WQE stays outstanding until
//! the receiver acknowledges what it took in, so the application may not reuse the buffer
//! before the read. A sender that abandons its packets (a QP flushed or destroyed) makes the
//! payload [`PayloadGone`]; the segment is then lost, as frames still in flight would be.

use std::sync::Arc;
use std::vec::Vec;

use crate::packet::{ExtHeaders, Field, Packet, Position, Transport, WireError};
use crate::seg::{MessageOp, segment_opcode};
use crate::transport::psn_add;

/// The payload could no longer be read: the sender withdrew it (see the module text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadGone;

/// Where a segment's payload bytes are read from, at the time they are needed.
pub trait SegmentPayload: Send + Sync {
    /// Copies `dst.len()` bytes from offset `off` of the segment's payload into `dst`.
    /// `off + dst.len()` never exceeds the segment's [`Segment::len`].
    fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), PayloadGone>;
}

/// A payload held in memory (for tests and for senders that have the bytes at hand).
impl SegmentPayload for Vec<u8> {
    fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), PayloadGone> {
        let s = usize::try_from(off).map_err(|_| PayloadGone)?;
        let src = self.get(s..s + dst.len()).ok_or(PayloadGone)?;
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// Which packets of which message a [`Segment`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentShape {
    /// The message kind.
    pub msg: MessageOp,
    /// Index in the message of the segment's first packet.
    pub index: u32,
    /// Packets of the whole message.
    pub msg_pkts: u32,
    /// Packets in the segment.
    pub count: u32,
    /// Payload bytes per packet (all but the message's last).
    pub mtu: u32,
    /// Payload bytes of the whole segment.
    pub len: u64,
}

/// Packets `index .. index + count` of a `msg_pkts`-packet RC message, as one unit.
///
/// Packet `j` (0-based within the segment) has PSN `head.bth.psn + j`, the opcode of
/// position `Position::of(index + j, msg_pkts)`, the extension headers of `ext` that its
/// opcode carries (RETH on a FIRST/ONLY, ImmDt on a LAST/ONLY with immediate, AETH on a
/// response's FIRST/LAST/ONLY), the solicited bit of `head.bth` on the message's last packet
/// only, AckReq on the segment's last packet only (if `head.bth.ack_req`), and the payload
/// bytes `j * mtu .. min(len, (j + 1) * mtu)`. Everything else is `head`'s.
#[derive(Clone)]
pub struct Segment {
    head: Packet<()>,
    shape: SegmentShape,
    payload: Arc<dyn SegmentPayload>,
}

impl core::fmt::Debug for Segment {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Segment")
            .field("src", &self.head.src_ip)
            .field("dst", &self.head.dst_ip)
            .field("dest_qp", &self.head.bth.dest_qp)
            .field("psn", &self.head.bth.psn)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

/// A payload length that does not fit the packet layout a segment describes.
const BAD_LENGTH: WireError = WireError::BadLength;

impl Segment {
    /// A segment of the packets `shape` names (see the type's text for the rules).
    /// `head.ext` holds every extension header any of the packets carries.
    ///
    /// Errors: [`WireError::BadLength`] unless `1 <= count`, `index + count <= msg_pkts`, `mtu`
    /// is 256..=4096 and a power of two, and `len` fills every packet but the message's last
    /// with exactly `mtu` bytes and that one with 1..=`mtu`; [`WireError::HeaderMismatch`] if
    /// some packet's opcode does not exist (RC only) or `ext` lacks a header it needs;
    /// [`WireError::FieldOutOfRange`] as [`Packet::encode`] would for the first packet.
    pub fn new(
        head: Packet<()>,
        shape: SegmentShape,
        payload: Arc<dyn SegmentPayload>,
    ) -> Result<Segment, WireError> {
        let SegmentShape {
            index,
            msg_pkts,
            count,
            mtu,
            len,
            ..
        } = shape;
        if count == 0
            || index.checked_add(count).is_none_or(|e| e > msg_pkts)
            || !(256..=4096).contains(&mtu)
            || !mtu.is_power_of_two()
        {
            return Err(BAD_LENGTH);
        }
        let full = u64::from(count) * u64::from(mtu);
        let ends = index + count == msg_pkts;
        let len_ok = if ends {
            len > full - u64::from(mtu) && len <= full
        } else {
            len == full
        };
        if !len_ok {
            return Err(BAD_LENGTH);
        }
        // The packets' PSNs are counted from it modulo 2^24: it must be a PSN itself.
        if head.bth.psn > 0xff_ffff {
            return Err(WireError::FieldOutOfRange(Field::Psn));
        }
        let seg = Segment {
            head,
            shape,
            payload,
        };
        // Every packet must have an opcode and the headers it needs: the first and the last
        // cover every case (a middle packet has no extension header and a full MTU).
        let e = &seg.head.ext;
        for j in [0, count - 1] {
            let pos = Position::of(index + j, msg_pkts);
            let op = segment_opcode(Transport::Rc, shape.msg, pos)
                .ok_or(WireError::HeaderMismatch(seg.head.bth.opcode))?;
            let want = op.ext_layout();
            if (want.reth && e.reth.is_none())
                || (want.imm_dt && e.imm_dt.is_none())
                || (want.ieth && e.ieth.is_none())
                || (want.aeth && e.aeth.is_none())
            {
                return Err(WireError::HeaderMismatch(op));
            }
        }
        // The fields `Packet::encode` range-checks (the PSN is checked above).
        let bth = &seg.head.bth;
        if bth.tver != 0 {
            return Err(WireError::FieldOutOfRange(Field::Tver));
        }
        if bth.dest_qp > 0xff_ffff {
            return Err(WireError::FieldOutOfRange(Field::DestQp));
        }
        if e.aeth.is_some_and(|a| a.msn > 0xff_ffff) {
            return Err(WireError::FieldOutOfRange(Field::Msn));
        }
        Ok(seg)
    }

    /// The headers every packet shares (the first packet's BTH).
    pub fn head(&self) -> &Packet<()> {
        &self.head
    }

    /// Which packets of which message it holds.
    pub fn shape(&self) -> SegmentShape {
        self.shape
    }

    /// The message kind.
    pub fn msg(&self) -> MessageOp {
        self.shape.msg
    }

    /// Index in its message of the segment's first packet.
    pub fn index(&self) -> u32 {
        self.shape.index
    }

    /// Packets of the whole message.
    pub fn msg_pkts(&self) -> u32 {
        self.shape.msg_pkts
    }

    /// Packets in the segment.
    pub fn count(&self) -> u32 {
        self.shape.count
    }

    /// Payload bytes per packet (all but the message's last).
    pub fn mtu(&self) -> u32 {
        self.shape.mtu
    }

    /// Payload bytes of the whole segment.
    pub fn len(&self) -> u64 {
        self.shape.len
    }

    /// Whether the segment carries no payload (never: a segment has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.shape.len == 0
    }

    /// PSN of the first packet.
    pub fn first_psn(&self) -> u32 {
        self.head.bth.psn
    }

    /// PSN of the last packet.
    pub fn last_psn(&self) -> u32 {
        psn_add(self.head.bth.psn, self.shape.count - 1)
    }

    /// Whether the segment holds the message's first packet.
    pub fn starts_message(&self) -> bool {
        self.shape.index == 0
    }

    /// Whether the segment holds the message's last packet.
    pub fn ends_message(&self) -> bool {
        self.shape.index + self.shape.count == self.shape.msg_pkts
    }

    /// Whether the segment's last packet asks for an acknowledgement.
    pub fn ack_req(&self) -> bool {
        self.head.bth.ack_req
    }

    /// The payload source.
    pub fn payload(&self) -> &Arc<dyn SegmentPayload> {
        &self.payload
    }

    /// Reads `dst.len()` payload bytes at `off` (bounds-checked against [`Segment::len`]).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), PayloadGone> {
        match off.checked_add(dst.len() as u64) {
            Some(end) if end <= self.shape.len => self.payload.read(off, dst),
            _ => Err(PayloadGone),
        }
    }

    /// Packet `j`'s headers, its payload's offset in the segment and its payload length.
    fn packet_headers(&self, j: u32) -> Option<(Packet<()>, u64, usize)> {
        if j >= self.shape.count {
            return None;
        }
        let pos = Position::of(self.shape.index + j, self.shape.msg_pkts);
        let op = segment_opcode(Transport::Rc, self.shape.msg, pos)?;
        let layout = op.ext_layout();
        let e = &self.head.ext;
        let ext = ExtHeaders {
            reth: e.reth.filter(|_| layout.reth),
            imm_dt: e.imm_dt.filter(|_| layout.imm_dt),
            ieth: e.ieth.filter(|_| layout.ieth),
            aeth: e.aeth.filter(|_| layout.aeth),
            ..ExtHeaders::NONE
        };
        let mut p = Packet {
            payload: (),
            ext,
            ..self.head
        };
        p.bth.opcode = op;
        p.bth.psn = psn_add(self.head.bth.psn, j);
        p.bth.solicited = self.head.bth.solicited && pos.ends_message();
        p.bth.ack_req = self.head.bth.ack_req && j + 1 == self.shape.count;
        let off = u64::from(j) * u64::from(self.shape.mtu);
        let plen =
            (self.shape.len - off.min(self.shape.len)).min(u64::from(self.shape.mtu)) as usize;
        // As a decoded frame has it.
        p.bth.pad_count = (plen.wrapping_neg() & 3) as u8;
        Some((p, off, plen))
    }

    /// Packet `j` with its payload read into `buf` (cleared first; its allocation is reused):
    /// what the receiver would have parsed from the packet's frame. `None` if `j` is out of
    /// range; `Some(Err(PayloadGone))` if the payload cannot be read.
    pub fn packet<'b>(
        &self,
        j: u32,
        buf: &'b mut Vec<u8>,
    ) -> Option<Result<Packet<&'b [u8]>, PayloadGone>> {
        let (p, off, plen) = self.packet_headers(j)?;
        buf.clear();
        buf.resize(plen, 0);
        if let Err(e) = self.payload.read(off, buf) {
            return Some(Err(e));
        }
        Some(Ok(p.with_payload(&buf[..])))
    }

    /// Encodes packet `j` as a whole frame (IPv4 … ICRC) into `out` (cleared first), the
    /// payload read straight into it. `None` if `j` is out of range.
    pub fn encode_packet(&self, j: u32, out: &mut Vec<u8>) -> Option<Result<(), PayloadGone>> {
        let (p, off, plen) = self.packet_headers(j)?;
        match p.encode_into_with(out, plen, |dst| self.payload.read(off, dst)) {
            Ok(r) => Some(r),
            // `new` encoded the first, middle and last packets' headers: the others have the
            // same fields, so this cannot fail; report it as an unreadable segment anyway.
            Err(_) => Some(Err(PayloadGone)),
        }
    }

    /// Every packet's frame, in PSN order.
    pub fn frames(&self) -> Result<Vec<Vec<u8>>, PayloadGone> {
        (0..self.shape.count)
            .map(|j| {
                let mut f = Vec::new();
                self.encode_packet(j, &mut f).unwrap_or(Err(PayloadGone))?;
                Ok(f)
            })
            .collect()
    }
}
