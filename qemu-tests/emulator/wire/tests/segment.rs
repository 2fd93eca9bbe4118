//! Segments (a run of packets of one RC message carried as one unit): shape checks, packet
//! `j` against the per-packet rules, real frames cut from a segment, and how the fabrics
//! carry them (whole on a fault-free in-process path, as frames everywhere else).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use roce_wire::fabric::{
    Fabric, FabricError, FabricStats, FaultConfig, InProcessFabric, PayloadGone, Port, Received,
    Segment, SegmentPayload, SegmentShape, UdpFabric,
};
use roce_wire::packet::{
    Aeth, Bth, ExtHeaders, Field, ImmDt, Opcode, Packet, Position, Reth, WireError,
};
use roce_wire::seg::MessageOp;
use roce_wire::transport::psn_add;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 9, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 9, 2);
const C: Ipv4Addr = Ipv4Addr::new(10, 0, 9, 3);

const RETH: Reth = Reth {
    va: 0x1234_5678_9abc_def0,
    rkey: 0x00ab_cdef,
    dma_len: 0,
};
const IMM: ImmDt = ImmDt { imm: 0xfeed_f00d };
const AETH: Aeth = Aeth::ack(0x00_1234);

/// Every extension header any test message needs (a segment's head carries all of them).
fn all_ext(msg: MessageOp, msg_len: u64) -> ExtHeaders {
    let mut e = ExtHeaders::NONE;
    match msg {
        MessageOp::RdmaWrite | MessageOp::RdmaWriteWithImm => {
            e.reth = Some(Reth {
                dma_len: msg_len as u32,
                ..RETH
            });
        }
        MessageOp::RdmaReadResponse => e.aeth = Some(AETH),
        _ => {}
    }
    if matches!(msg, MessageOp::SendWithImm | MessageOp::RdmaWriteWithImm) {
        e.imm_dt = Some(IMM);
    }
    e
}

/// `len` bytes of a pattern depending on `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(seed) * 7) as u8
                ^ (i >> 8) as u8
        })
        .collect()
}

/// One message of `msg_pkts` packets of `mtu` bytes (the last one `last` bytes), the whole
/// message's payload, and its first PSN.
#[derive(Clone, Copy, Debug)]
struct Msg {
    msg: MessageOp,
    msg_pkts: u32,
    mtu: u32,
    last: u32,
    psn0: u32,
    solicited: bool,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

impl Msg {
    fn len(&self) -> u64 {
        u64::from(self.msg_pkts - 1) * u64::from(self.mtu) + u64::from(self.last)
    }

    fn data(&self) -> Vec<u8> {
        pattern(self.msg_pkts as u8 ^ self.last as u8, self.len() as usize)
    }

    /// The head of the segment of packets `index..index + count`.
    fn head(&self, index: u32, ack_req: bool) -> Packet<()> {
        let op = opcode(self.msg, Position::of(index, self.msg_pkts));
        let mut bth = Bth::new(op, 0x00_0abc, psn_add(self.psn0, index));
        bth.ack_req = ack_req;
        bth.solicited = self.solicited;
        let mut p =
            Packet::new(self.src, self.dst, bth, ()).with_ext(all_ext(self.msg, self.len()));
        p.udp_src_port = 0xc0de;
        p.tos = 0x02;
        p.ttl = 33;
        p.ip_id = 0x4242;
        p
    }

    /// The shape of packets `index..index + count`.
    fn shape(&self, index: u32, count: u32) -> SegmentShape {
        let start = u64::from(index) * u64::from(self.mtu);
        let end = (u64::from(index + count) * u64::from(self.mtu)).min(self.len());
        SegmentShape {
            msg: self.msg,
            index,
            msg_pkts: self.msg_pkts,
            count,
            mtu: self.mtu,
            len: end - start,
        }
    }

    /// The segment of packets `index..index + count` with its payload taken from `data`.
    fn segment(&self, index: u32, count: u32, ack_req: bool, data: &[u8]) -> Segment {
        let start = index as usize * self.mtu as usize;
        let shape = self.shape(index, count);
        let bytes = data[start..start + shape.len as usize].to_vec();
        Segment::new(self.head(index, ack_req), shape, Arc::new(bytes)).expect("valid segment")
    }

    /// Packet `k` of the message as a per-packet sender builds it and the receiver parses it
    /// from its frame (the rules written out independently of the segment code): `seg_last`
    /// tells whether it ends its segment.
    fn expected(&self, k: u32, ack_req: bool, seg_last: bool, data: &[u8]) -> Packet {
        let pos = Position::of(k, self.msg_pkts);
        let mut bth = Bth::new(opcode(self.msg, pos), 0x00_0abc, psn_add(self.psn0, k));
        bth.solicited = self.solicited && k + 1 == self.msg_pkts;
        bth.ack_req = ack_req && seg_last;
        let mut ext = ExtHeaders::NONE;
        let first = k == 0;
        let last = k + 1 == self.msg_pkts;
        match self.msg {
            MessageOp::RdmaWrite | MessageOp::RdmaWriteWithImm if first => {
                ext.reth = Some(Reth {
                    dma_len: self.len() as u32,
                    ..RETH
                });
            }
            MessageOp::RdmaReadResponse if first || last => ext.aeth = Some(AETH),
            _ => {}
        }
        if last
            && matches!(
                self.msg,
                MessageOp::SendWithImm | MessageOp::RdmaWriteWithImm
            )
        {
            ext.imm_dt = Some(IMM);
        }
        let from = k as usize * self.mtu as usize;
        let to = (from + self.mtu as usize).min(data.len());
        // The pad count as the receiver parses it from the frame.
        bth.pad_count = ((to - from).wrapping_neg() & 3) as u8;
        let mut p = Packet::new(self.src, self.dst, bth, data[from..to].to_vec()).with_ext(ext);
        p.udp_src_port = 0xc0de;
        p.tos = 0x02;
        p.ttl = 33;
        p.ip_id = 0x4242;
        p
    }
}

/// The RC opcode of a packet at `pos` of a `msg` message (spelled out, not computed).
fn opcode(msg: MessageOp, pos: Position) -> Opcode {
    use MessageOp as M;
    use Opcode::*;
    use Position as P;
    match (msg, pos) {
        (M::Send | M::SendWithImm, P::First) => RcSendFirst,
        (M::Send | M::SendWithImm, P::Middle) => RcSendMiddle,
        (M::Send, P::Last) => RcSendLast,
        (M::Send, P::Only) => RcSendOnly,
        (M::SendWithImm, P::Last) => RcSendLastWithImm,
        (M::SendWithImm, P::Only) => RcSendOnlyWithImm,
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
        (m, p) => panic!("no test opcode for {m:?} at {p:?}"),
    }
}

/// The test messages: WRITE spanning first/middle/last with an odd-length last packet and a
/// PSN range that wraps, WRITE with immediate (solicited), SEND with immediate (full last
/// packet), an RDMA READ response, a plain SEND, a one-packet WRITE with immediate.
fn messages() -> Vec<Msg> {
    vec![
        Msg {
            msg: MessageOp::RdmaWrite,
            msg_pkts: 10,
            mtu: 1024,
            last: 333,
            psn0: 0xff_fffb,
            solicited: false,
            src: A,
            dst: B,
        },
        Msg {
            msg: MessageOp::RdmaWriteWithImm,
            msg_pkts: 7,
            mtu: 256,
            last: 1,
            psn0: 0x10,
            solicited: true,
            src: A,
            dst: B,
        },
        Msg {
            msg: MessageOp::SendWithImm,
            msg_pkts: 4,
            mtu: 4096,
            last: 4096,
            psn0: 0x7f_0000,
            solicited: true,
            src: A,
            dst: B,
        },
        Msg {
            msg: MessageOp::RdmaReadResponse,
            msg_pkts: 6,
            mtu: 512,
            last: 510,
            psn0: 0x100,
            solicited: false,
            src: A,
            dst: B,
        },
        Msg {
            msg: MessageOp::Send,
            msg_pkts: 5,
            mtu: 2048,
            last: 2047,
            psn0: 0,
            solicited: true,
            src: A,
            dst: B,
        },
        Msg {
            msg: MessageOp::RdmaWriteWithImm,
            msg_pkts: 1,
            mtu: 1024,
            last: 1000,
            psn0: 0xff_ffff,
            solicited: true,
            src: A,
            dst: B,
        },
    ]
}

/// Ways to cut a message of `n` packets into segments: whole, and (for longer ones) the
/// first two, one middle one, the rest; and one packet each.
fn cuts(n: u32) -> Vec<Vec<(u32, u32)>> {
    let mut v = vec![vec![(0, n)]];
    if n >= 4 {
        v.push(vec![(0, 2), (2, 1), (3, n - 3)]);
        v.push(vec![(0, 1), (1, n - 2), (n - 1, 1)]);
    }
    v.push((0..n).map(|i| (i, 1)).collect());
    v
}

/// `sent + duplicated == delivered + dropped() + in_flight`.
#[track_caller]
fn invariant(fab: &InProcessFabric) -> FabricStats {
    let s = fab.stats();
    assert_eq!(
        s.sent + s.duplicated,
        s.delivered + s.dropped() + fab.in_flight() as u64,
        "{s:?}, in flight {}",
        fab.in_flight()
    );
    s
}

// ---------------------------------------------------------------------------------------
// Shapes.

#[test]
fn new_rejects_bad_shapes() {
    let m = Msg {
        msg: MessageOp::RdmaWrite,
        msg_pkts: 8,
        mtu: 1024,
        last: 100,
        psn0: 5,
        solicited: false,
        src: A,
        dst: B,
    };
    let data: Arc<dyn SegmentPayload> = Arc::new(m.data());
    let try_shape = |index: u32, shape: SegmentShape| {
        Segment::new(m.head(index, true), shape, Arc::clone(&data)).map(|s| s.count())
    };
    let good = |index, count| m.shape(index, count);
    // The good ones first (the checks below change one field each).
    for (i, c) in [(0, 8), (0, 1), (0, 3), (3, 2), (5, 3), (7, 1)] {
        assert_eq!(try_shape(i, good(i, c)), Ok(c), "({i}, {c})");
    }
    let bad = Err(WireError::BadLength);
    // No packet, or past the message's end.
    assert_eq!(
        try_shape(
            0,
            SegmentShape {
                count: 0,
                len: 0,
                ..good(0, 1)
            }
        ),
        bad
    );
    assert_eq!(
        try_shape(
            7,
            SegmentShape {
                count: 2,
                ..good(7, 1)
            }
        ),
        bad
    );
    assert_eq!(
        try_shape(
            6,
            SegmentShape {
                count: 3,
                ..good(6, 2)
            }
        ),
        bad
    );
    assert_eq!(
        try_shape(
            0,
            SegmentShape {
                index: u32::MAX,
                ..good(0, 2)
            }
        ),
        bad,
        "index + count overflows"
    );
    assert_eq!(
        try_shape(
            0,
            SegmentShape {
                msg_pkts: 1,
                ..good(0, 2)
            }
        ),
        bad
    );
    // MTU: 256..=4096, a power of two.
    for mtu in [0u32, 1, 128, 255, 257, 1000, 1536, 3000, 8192, u32::MAX] {
        let s = SegmentShape {
            mtu,
            len: 2 * u64::from(mtu),
            ..good(0, 2)
        };
        assert_eq!(try_shape(0, s), bad, "mtu {mtu}");
    }
    // Length: every packet but the message's last exactly one MTU; the last 1..=MTU.
    for len in [0u64, 1, 2047, 2049, 3072] {
        assert_eq!(
            try_shape(0, SegmentShape { len, ..good(0, 2) }),
            bad,
            "middle, {len}"
        );
    }
    for len in [
        0u64,
        2 * 1024,        // the message's last packet empty
        2 * 1024 + 1025, // the last one over-long
        3 * 1024 + 1,    // one byte more than three full packets
        u64::MAX,
    ] {
        assert_eq!(
            try_shape(5, SegmentShape { len, ..good(5, 3) }),
            bad,
            "last, {len}"
        );
    }
    // A last packet of one byte or of a full MTU is fine.
    for len in [2 * 1024 + 1, 3 * 1024] {
        assert_eq!(
            try_shape(5, SegmentShape { len, ..good(5, 3) }),
            Ok(3),
            "last, {len}"
        );
    }
    // A message whose only packet is empty is no segment.
    let only = SegmentShape {
        msg_pkts: 1,
        count: 1,
        len: 0,
        ..good(0, 1)
    };
    assert_eq!(try_shape(0, only), bad);
}

#[test]
fn new_rejects_missing_headers_and_bad_fields() {
    let write = Msg {
        msg: MessageOp::RdmaWriteWithImm,
        msg_pkts: 4,
        mtu: 256,
        last: 9,
        psn0: 0,
        solicited: false,
        src: A,
        dst: B,
    };
    let data: Arc<dyn SegmentPayload> = Arc::new(write.data());
    let with_ext = |index: u32, count: u32, ext: ExtHeaders| {
        let head = Packet {
            ext,
            ..write.head(index, false)
        };
        Segment::new(head, write.shape(index, count), Arc::clone(&data)).map(|s| s.count())
    };
    let full = all_ext(write.msg, write.len());
    let no_reth = ExtHeaders { reth: None, ..full };
    let no_imm = ExtHeaders {
        imm_dt: None,
        ..full
    };
    // The FIRST needs the RETH, the LAST the immediate; a middle run needs neither.
    assert_eq!(
        with_ext(0, 2, no_reth),
        Err(WireError::HeaderMismatch(Opcode::RcRdmaWriteFirst))
    );
    assert_eq!(with_ext(0, 2, no_imm), Ok(2));
    assert_eq!(
        with_ext(2, 2, no_imm),
        Err(WireError::HeaderMismatch(Opcode::RcRdmaWriteLastWithImm))
    );
    assert_eq!(
        with_ext(0, 4, no_imm),
        Err(WireError::HeaderMismatch(Opcode::RcRdmaWriteLastWithImm))
    );
    assert_eq!(with_ext(1, 2, ExtHeaders::NONE), Ok(2));
    assert_eq!(with_ext(1, 3, no_reth), Ok(3));
    // A read response needs its AETH on the FIRST and the LAST.
    let resp = Msg {
        msg: MessageOp::RdmaReadResponse,
        ..write
    };
    let rdata: Arc<dyn SegmentPayload> = Arc::new(resp.data());
    let r = |index: u32, count: u32, ext: ExtHeaders| {
        let head = Packet {
            ext,
            ..resp.head(index, false)
        };
        Segment::new(head, resp.shape(index, count), Arc::clone(&rdata)).map(|s| s.count())
    };
    assert_eq!(
        r(0, 2, ExtHeaders::NONE),
        Err(WireError::HeaderMismatch(Opcode::RcRdmaReadResponseFirst))
    );
    assert_eq!(
        r(3, 1, ExtHeaders::NONE),
        Err(WireError::HeaderMismatch(Opcode::RcRdmaReadResponseLast))
    );
    assert_eq!(r(1, 2, ExtHeaders::NONE), Ok(2));
    // Fields the first packet's encoding would refuse.
    let mut head = write.head(0, false);
    head.bth.dest_qp = 1 << 24;
    assert_eq!(
        Segment::new(head, write.shape(0, 4), Arc::clone(&data)).err(),
        Some(WireError::FieldOutOfRange(Field::DestQp))
    );
    let mut head = resp.head(0, false);
    head.ext.aeth = Some(Aeth {
        msn: 1 << 24,
        ..AETH
    });
    assert_eq!(
        Segment::new(head, resp.shape(0, 2), Arc::clone(&rdata)).err(),
        Some(WireError::FieldOutOfRange(Field::Msn))
    );
}

/// `Segment::new` is documented to refuse what `Packet::encode` refuses for the first packet;
/// a PSN over 24 bits is one of those (the segment must not silently send PSN 0 instead).
#[test]
fn new_refuses_a_psn_over_24_bits() {
    let m = messages()[1];
    let data = m.data();
    let mut head = m.head(0, false);
    head.bth.psn = 1 << 24;
    let first = Packet {
        payload: vec![0u8; 256],
        ..m.expected(0, false, false, &data)
    };
    let first = Packet {
        bth: head.bth,
        ..first
    };
    assert_eq!(first.encode(), Err(WireError::FieldOutOfRange(Field::Psn)));
    let seg = Segment::new(head, m.shape(0, 3), Arc::new(data[..768].to_vec()));
    match seg {
        Err(e) => assert_eq!(e, WireError::FieldOutOfRange(Field::Psn)),
        Ok(s) => {
            let mut buf = Vec::new();
            let p0 = s.packet(0, &mut buf).unwrap().unwrap().bth.psn;
            panic!(
                "accepted: first_psn() {:#x}, packet(0) PSN {p0:#x}, last_psn() {:#x}",
                s.first_psn(),
                s.last_psn()
            );
        }
    }
}

#[test]
fn accessors_and_bounded_reads() {
    let m = messages()[0];
    let data = m.data();
    let s = m.segment(3, 7, true, &data);
    assert_eq!(
        (s.index(), s.count(), s.msg_pkts(), s.mtu(), s.msg()),
        (3, 7, 10, 1024, MessageOp::RdmaWrite)
    );
    assert_eq!(s.len(), 6 * 1024 + 333);
    assert!(!s.is_empty());
    assert_eq!(s.first_psn(), 0xff_fffe);
    assert_eq!(s.last_psn(), 0x00_0004, "wraps at 2^24");
    assert!(!s.starts_message() && s.ends_message() && s.ack_req());
    assert_eq!(s.head().src_ip, A);
    let mut buf = [0u8; 10];
    s.read(s.len() - 10, &mut buf).unwrap();
    assert_eq!(&buf[..], &data[data.len() - 10..]);
    assert_eq!(s.read(s.len() - 9, &mut buf), Err(PayloadGone));
    assert_eq!(s.read(u64::MAX - 2, &mut buf), Err(PayloadGone));
    let mut v = Vec::new();
    assert!(s.packet(7, &mut v).is_none());
    assert!(s.encode_packet(7, &mut v).is_none());
    let head = m.segment(0, 2, false, &data);
    assert!(head.starts_message() && !head.ends_message() && !head.ack_req());
}

// ---------------------------------------------------------------------------------------
// Packets.

#[test]
fn packets_follow_the_per_packet_rules() {
    for m in messages() {
        let data = m.data();
        for cut in cuts(m.msg_pkts) {
            for ack_req in [false, true] {
                let mut buf = Vec::new();
                let mut frame = Vec::new();
                let mut k = 0;
                for &(index, count) in &cut {
                    let seg = m.segment(index, count, ack_req, &data);
                    let frames = seg.frames().unwrap();
                    assert_eq!(frames.len(), count as usize);
                    for j in 0..count {
                        let what = format!(
                            "{m:?}, segment ({index}, {count}), packet {j}, ack_req {ack_req}"
                        );
                        let want = m.expected(index + j, ack_req, j + 1 == count, &data);
                        let got = seg.packet(j, &mut buf).unwrap().unwrap().to_owned_packet();
                        assert_eq!(got, want, "{what}: packet()");
                        seg.encode_packet(j, &mut frame).unwrap().unwrap();
                        assert_eq!(frame, frames[j as usize], "{what}: encode_packet vs frames");
                        // The frame is what a per-packet sender would have built, byte for byte.
                        assert_eq!(frame, want.encode().unwrap(), "{what}: frame bytes");
                        let back = Packet::decode(&frame).unwrap();
                        assert_eq!(back, want, "{what}: decoded frame");
                        k += 1;
                    }
                }
                assert_eq!(k, m.msg_pkts);
            }
        }
    }
}

/// `packet(j)` is documented as what the receiver would have parsed from packet j's frame:
/// that includes the BTH pad count of a payload that is not a multiple of four bytes.
#[test]
fn packet_matches_the_decoded_frame_exactly() {
    for m in messages() {
        let data = m.data();
        let seg = m.segment(0, m.msg_pkts, true, &data);
        let mut buf = Vec::new();
        for (j, f) in seg.frames().unwrap().iter().enumerate() {
            let got = seg
                .packet(j as u32, &mut buf)
                .unwrap()
                .unwrap()
                .to_owned_packet();
            assert_eq!(got, Packet::decode(f).unwrap(), "{m:?}, packet {j}");
        }
    }
}

/// A payload whose bytes can be withdrawn, as a flushed sender's are.
struct Withdrawable {
    bytes: Vec<u8>,
    gone: AtomicBool,
}

impl SegmentPayload for Withdrawable {
    fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), PayloadGone> {
        if self.gone.load(Ordering::SeqCst) {
            return Err(PayloadGone);
        }
        self.bytes.read(off, dst)
    }
}

fn withdrawable(m: &Msg, index: u32, count: u32) -> (Segment, Arc<Withdrawable>) {
    let data = m.data();
    let shape = m.shape(index, count);
    let start = index as usize * m.mtu as usize;
    let p = Arc::new(Withdrawable {
        bytes: data[start..start + shape.len as usize].to_vec(),
        gone: AtomicBool::new(false),
    });
    let seg = Segment::new(m.head(index, true), shape, p.clone()).unwrap();
    (seg, p)
}

#[test]
fn a_withdrawn_payload_reads_as_gone() {
    let m = messages()[0];
    let (seg, p) = withdrawable(&m, 0, 10);
    let mut buf = Vec::new();
    assert!(seg.packet(3, &mut buf).unwrap().is_ok());
    p.gone.store(true, Ordering::SeqCst);
    assert_eq!(seg.packet(3, &mut buf).unwrap().err(), Some(PayloadGone));
    assert_eq!(seg.encode_packet(0, &mut buf), Some(Err(PayloadGone)));
    assert_eq!(seg.frames().err(), Some(PayloadGone));
    let mut b = [0u8; 4];
    assert_eq!(seg.read(0, &mut b), Err(PayloadGone));
}

// ---------------------------------------------------------------------------------------
// The in-process fabric.

fn big() -> Msg {
    Msg {
        msg: MessageOp::RdmaWrite,
        msg_pkts: 12,
        mtu: 1024,
        last: 77,
        psn0: 0x40,
        solicited: false,
        src: A,
        dst: B,
    }
}

/// Takes everything `p` has now with `recv_any`.
fn drain_any(p: &dyn Port) -> Vec<Received> {
    let mut v = Vec::new();
    while let Some(r) = p.recv_any().unwrap() {
        v.push(r);
    }
    v
}

fn drain_frames(p: &dyn Port) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Some(f) = p.recv().unwrap() {
        v.push(f);
    }
    v
}

/// A single frame from `src` to `dst` with PSN `psn` (a SEND ONLY).
fn small_frame(src: Ipv4Addr, dst: Ipv4Addr, psn: u32) -> Vec<u8> {
    Packet::new(
        src,
        dst,
        Bth::new(Opcode::RcSendOnly, 1, psn),
        vec![1, 2, 3, 4],
    )
    .encode()
    .unwrap()
}

#[test]
fn fault_free_path_carries_a_segment_whole() {
    let fab = InProcessFabric::new(1);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    assert!(a.takes_segments());
    let m = big();
    let data = m.data();
    a.send_segment(m.segment(0, 12, true, &data)).unwrap();
    assert_eq!(fab.in_flight(), 12);
    let s = invariant(&fab);
    assert_eq!((s.sent, s.delivered, s.segments), (12, 0, 1));
    assert!(a.recv_any().unwrap().is_none(), "nothing for the sender");
    let got = drain_any(b.as_ref());
    assert_eq!(got.len(), 1, "{got:?}");
    let Received::Segment(seg) = &got[0] else {
        panic!("a frame, not the segment: {got:?}");
    };
    assert_eq!(
        (seg.first_psn(), seg.count(), seg.len()),
        (0x40, 12, data.len() as u64)
    );
    let mut buf = Vec::new();
    for j in 0..12 {
        let p = seg.packet(j, &mut buf).unwrap().unwrap().to_owned_packet();
        assert_eq!(p, m.expected(j, true, j == 11, &data), "packet {j}");
    }
    let s = invariant(&fab);
    assert_eq!(
        (s.sent, s.delivered, s.segments, s.dropped(), s.duplicated),
        (12, 12, 1, 0, 0)
    );
    assert_eq!(fab.in_flight(), 0);
}

#[test]
fn recv_cuts_a_segment_into_its_frames_in_order() {
    let fab = InProcessFabric::new(1);
    let a = fab.attach(A).unwrap();
    let c = fab.attach(C).unwrap();
    let b = fab.attach(B).unwrap();
    let m = big();
    let data = m.data();
    // A frame before and after the segment, from another sender; the segment in two parts.
    c.send(small_frame(C, B, 1)).unwrap();
    a.send_segment(m.segment(0, 5, false, &data)).unwrap();
    a.send_segment(m.segment(5, 7, true, &data)).unwrap();
    c.send(small_frame(C, B, 2)).unwrap();
    assert_eq!(fab.in_flight(), 14);
    // The first frame, then the first segment's first frame: the rest of it stays queued.
    let f = b.recv().unwrap().unwrap();
    assert_eq!(Packet::decode(&f).unwrap().src_ip, C);
    let f = b.recv().unwrap().unwrap();
    assert_eq!(
        Packet::decode(&f).unwrap(),
        m.expected(0, false, false, &data)
    );
    assert_eq!(fab.in_flight(), 12);
    invariant(&fab);
    let mut rest = drain_frames(b.as_ref());
    assert_eq!(rest.len(), 12);
    let last = rest.pop().unwrap();
    assert_eq!(
        Packet::decode(&last).unwrap().bth.psn,
        2,
        "the trailing frame last"
    );
    for (i, f) in rest.iter().enumerate() {
        let k = i as u32 + 1;
        // The first segment did not ask for an ACK, the second on its last packet.
        let want = m.expected(k, k >= 5, k == 11, &data);
        assert_eq!(Packet::decode(f).unwrap(), want, "packet {k}");
    }
    let s = invariant(&fab);
    assert_eq!(
        (s.sent, s.delivered, s.segments, s.dropped()),
        (14, 14, 2, 0)
    );
    // recv_timeout cuts them too.
    a.send_segment(m.segment(0, 12, true, &data)).unwrap();
    let mut n = 0;
    while let Some(f) = b.recv_timeout(Duration::from_millis(1)).unwrap() {
        assert_eq!(Packet::decode(&f).unwrap().bth.psn, psn_add(0x40, n));
        n += 1;
    }
    assert_eq!(n, 12);
    let s = invariant(&fab);
    assert_eq!((s.sent, s.delivered, s.segments), (26, 26, 3));
}

#[test]
fn any_per_frame_fault_makes_frames() {
    let faults = [
        (
            "loss",
            FaultConfig {
                loss: 0.3,
                ..FaultConfig::NONE
            },
        ),
        (
            "duplicate",
            FaultConfig {
                duplicate: 1.0,
                ..FaultConfig::NONE
            },
        ),
        (
            "corrupt",
            FaultConfig {
                corrupt: 1.0,
                ..FaultConfig::NONE
            },
        ),
        (
            "reorder",
            FaultConfig {
                reorder: 0.5,
                ..FaultConfig::NONE
            },
        ),
        (
            "jitter",
            FaultConfig {
                jitter_ns: 500,
                ..FaultConfig::NONE
            },
        ),
        (
            "tiny loss",
            FaultConfig {
                loss: 1e-12,
                ..FaultConfig::NONE
            },
        ),
    ];
    let m = big();
    let data = m.data();
    for (what, f) in faults {
        for per_path in [false, true] {
            let what = format!("{what}, per path {per_path}");
            let fab = InProcessFabric::new(17);
            let a = fab.attach(A).unwrap();
            let b = fab.attach(B).unwrap();
            let mut sent = 12;
            if per_path {
                fab.set_path_faults(A, B, Some(f));
                // The other direction stays clean: segments still go whole there.
                let back = Msg {
                    src: B,
                    dst: A,
                    ..m
                };
                b.send_segment(back.segment(0, 12, true, &data)).unwrap();
                let got = drain_any(a.as_ref());
                assert!(
                    matches!(got.as_slice(), [Received::Segment(s)] if s.count() == 12),
                    "{what}: {got:?}"
                );
                sent += 12;
            } else {
                fab.set_faults(f);
            }
            a.send_segment(m.segment(0, 12, true, &data)).unwrap();
            let mut got = Vec::new();
            loop {
                for r in drain_any(b.as_ref()) {
                    match r {
                        Received::Frame(f) => got.push(f),
                        Received::Segment(s) => panic!("{what}: a segment crossed: {s:?}"),
                    }
                }
                match fab.next_event_ns() {
                    Some(t) => {
                        fab.advance_to(t.max(fab.now_ns() + 1));
                    }
                    None => break,
                }
            }
            let s = invariant(&fab);
            assert_eq!(fab.in_flight(), 0, "{what}");
            assert_eq!(s.sent, sent, "{what}: {s:?}");
            assert_eq!(s.segments, u64::from(per_path), "{what}: {s:?}");
            let on_ab = s.delivered - (sent - 12);
            assert_eq!(on_ab, got.len() as u64, "{what}");
            assert_eq!(
                got.len() as u64,
                12 - s.dropped_loss + s.duplicated,
                "{what}"
            );
            // Whatever arrived decodes (or fails its ICRC when corrupted) and is a packet
            // of the message.
            let mut psns = Vec::new();
            for f in &got {
                match Packet::decode(f) {
                    Ok(p) => {
                        let k = psn_add(p.bth.psn, 0x100_0000 - 0x40);
                        assert_eq!(p, m.expected(k, true, k == 11, &data), "{what}");
                        psns.push(k);
                    }
                    Err(e) => {
                        assert!(matches!(e, WireError::BadIcrc { .. }), "{what}: {e:?}");
                        assert!(f.len() > 40);
                    }
                }
            }
            match what.split(',').next().unwrap() {
                "loss" => assert!(s.dropped_loss > 0 && s.dropped_loss < 12, "{what}: {s:?}"),
                "duplicate" => assert_eq!((s.duplicated, got.len()), (12, 24), "{what}"),
                "corrupt" => assert_eq!((s.corrupted, psns.len()), (12, 0), "{what}"),
                "reorder" => {
                    assert!(s.reordered > 0, "{what}: {s:?}");
                    assert_ne!(psns, (0..12).collect::<Vec<_>>(), "{what}");
                }
                "jitter" => {
                    psns.sort_unstable();
                    assert_eq!(psns, (0..12).collect::<Vec<_>>(), "{what}");
                }
                _ => assert_eq!(psns, (0..12).collect::<Vec<_>>(), "{what}"),
            }
        }
    }
}

#[test]
fn cut_path_and_no_route_drop_every_packet() {
    let fab = InProcessFabric::new(3);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    let m = big();
    let data = m.data();
    fab.cut_path(A, B);
    a.send_segment(m.segment(0, 12, true, &data)).unwrap();
    assert!(b.recv_any().unwrap().is_none());
    let s = invariant(&fab);
    assert_eq!(
        (s.sent, s.dropped_cut, s.segments, s.delivered),
        (12, 12, 0, 0)
    );
    // The cut is one way.
    let back = Msg {
        src: B,
        dst: A,
        ..m
    };
    b.send_segment(back.segment(0, 3, false, &data)).unwrap();
    assert!(matches!(a.recv_any().unwrap(), Some(Received::Segment(_))));
    fab.heal_path(A, B);
    a.send_segment(m.segment(2, 4, false, &data)).unwrap();
    assert!(matches!(b.recv_any().unwrap(), Some(Received::Segment(s)) if s.count() == 4));
    // Nobody at C.
    let to_c = || {
        Segment::new(
            Packet {
                dst_ip: C,
                ..m.head(0, true)
            },
            m.shape(0, 12),
            Arc::new(data.clone()),
        )
        .unwrap()
    };
    a.send_segment(to_c()).unwrap();
    let s = invariant(&fab);
    assert_eq!(s.dropped_no_route, 12);
    assert_eq!(
        (s.sent, s.delivered, s.dropped(), s.segments),
        (12 + 3 + 4 + 12, 7, 24, 2)
    );
    // A port that goes away drops what was queued for it, packets and all.
    let c = fab.attach(C).unwrap();
    a.send_segment(to_c()).unwrap();
    assert_eq!(fab.in_flight(), 12);
    drop(c);
    let s = invariant(&fab);
    assert_eq!((s.dropped_no_route, fab.in_flight()), (24, 0));
    // The segment must come from the port's address.
    assert_eq!(
        b.send_segment(m.segment(0, 12, true, &data)).err(),
        Some(FabricError::SourceMismatch { port: B, frame: A })
    );
    invariant(&fab);
}

#[test]
fn fixed_delay_delays_the_segment_whole() {
    let fab = InProcessFabric::new(4);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    fab.set_faults(FaultConfig {
        delay_ns: 5_000,
        ..FaultConfig::NONE
    });
    let m = big();
    let data = m.data();
    fab.advance(100);
    a.send_segment(m.segment(0, 12, true, &data)).unwrap();
    assert_eq!(fab.next_event_ns(), Some(5_100));
    fab.advance(4_999);
    assert!(b.recv_any().unwrap().is_none());
    assert!(b.recv().unwrap().is_none());
    assert_eq!(fab.in_flight(), 12);
    invariant(&fab);
    fab.advance(1);
    let got = drain_any(b.as_ref());
    assert!(
        matches!(got.as_slice(), [Received::Segment(s)] if s.count() == 12),
        "{got:?}"
    );
    let s = invariant(&fab);
    assert_eq!((s.segments, s.sent, s.delivered), (1, 12, 12));
    // The same with recv(): no frame before the due time, all twelve after it.
    a.send_segment(m.segment(0, 12, true, &data)).unwrap();
    fab.advance(4_999);
    assert!(b.recv().unwrap().is_none());
    fab.advance(1);
    assert_eq!(drain_frames(b.as_ref()).len(), 12);
    let s = invariant(&fab);
    assert_eq!((s.segments, s.sent, s.delivered), (2, 24, 24));
}

#[test]
fn a_withdrawn_payload_is_dropped_as_gone() {
    let fab = InProcessFabric::new(5);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    let m = big();
    let data = m.data();
    // Queued whole, then withdrawn: recv() cannot cut it and drops all its packets.
    let (seg, p) = withdrawable(&m, 0, 12);
    a.send_segment(seg).unwrap();
    a.send_segment(Msg { psn0: 0x80, ..m }.segment(0, 2, false, &data))
        .unwrap();
    p.gone.store(true, Ordering::SeqCst);
    let got = drain_frames(b.as_ref());
    assert_eq!(got.len(), 2, "only the second segment's frames");
    assert_eq!(Packet::decode(&got[0]).unwrap().bth.psn, 0x80);
    let s = invariant(&fab);
    assert_eq!(
        (s.dropped_gone, s.delivered, s.sent, s.segments),
        (12, 2, 14, 2)
    );
    assert_eq!(s.dropped(), 12);
    assert_eq!(fab.in_flight(), 0);
    // recv_any hands it over whole (the receiver finds it gone when it reads).
    let (seg, p) = withdrawable(&m, 3, 4);
    a.send_segment(seg).unwrap();
    p.gone.store(true, Ordering::SeqCst);
    match b.recv_any().unwrap() {
        Some(Received::Segment(s)) => {
            let mut buf = Vec::new();
            assert_eq!(s.packet(0, &mut buf).unwrap().err(), Some(PayloadGone));
        }
        other => panic!("{other:?}"),
    }
    let s = invariant(&fab);
    assert_eq!((s.dropped_gone, s.delivered, s.sent), (12, 6, 18));
    // Gone before it is sent on a path that cuts it into frames: the send fails.
    fab.set_path_faults(
        A,
        B,
        Some(FaultConfig {
            duplicate: 0.5,
            ..FaultConfig::NONE
        }),
    );
    let (seg, p) = withdrawable(&m, 0, 12);
    p.gone.store(true, Ordering::SeqCst);
    assert_eq!(a.send_segment(seg).err(), Some(FabricError::PayloadGone));
    invariant(&fab);
    assert!(b.recv().unwrap().is_none());
}

// ---------------------------------------------------------------------------------------
// A port that does not take segments: the default `send_segment` sends real frames.

#[test]
fn udp_port_sends_a_segment_as_frames() {
    const UDP_PORT: u16 = 47_931;
    let (xa, xb) = (Ipv4Addr::new(127, 0, 90, 1), Ipv4Addr::new(127, 0, 90, 2));
    let fab = UdpFabric::new(UDP_PORT);
    let a = fab.attach(xa).unwrap();
    let b = fab.attach(xb).unwrap();
    assert!(!a.takes_segments());
    for m in [messages()[0], messages()[1], messages()[3]] {
        let data = m.data();
        let m = Msg {
            src: xa,
            dst: xb,
            ..m
        };
        a.send_segment(m.segment(0, m.msg_pkts, true, &data))
            .unwrap();
        for k in 0..m.msg_pkts {
            let f = b
                .recv_timeout(Duration::from_secs(5))
                .unwrap()
                .unwrap_or_else(|| panic!("{m:?}: packet {k} missing"));
            let got = Packet::decode(&f).unwrap();
            let want = m.expected(k, true, k + 1 == m.msg_pkts, &data);
            assert_eq!((got.src_ip, got.dst_ip), (xa, xb));
            assert_eq!(got.bth.opcode, want.bth.opcode, "{m:?}: packet {k}");
            assert_eq!(got.bth, want.bth, "{m:?}: packet {k}");
            assert_eq!(got.ext, want.ext, "{m:?}: packet {k}");
            assert_eq!(got.payload, want.payload, "{m:?}: packet {k}");
        }
        // recv_any on a port without segments hands frames.
        assert!(b.recv_any().unwrap().is_none());
    }
    // A withdrawn payload: nothing is sent, the error says why.
    let m = Msg {
        src: xa,
        dst: xb,
        ..messages()[0]
    };
    let (seg, p) = withdrawable(&m, 0, 10);
    p.gone.store(true, Ordering::SeqCst);
    assert_eq!(a.send_segment(seg).err(), Some(FabricError::PayloadGone));
    assert_eq!(b.recv_timeout(Duration::from_millis(20)).unwrap(), None);
    // recv_any's default: a frame.
    a.send(small_frame(xa, xb, 9)).unwrap();
    let mut got = None;
    for _ in 0..500 {
        if let Some(r) = b.recv_any().unwrap() {
            got = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    match got {
        Some(Received::Frame(f)) => assert_eq!(Packet::decode(&f).unwrap().bth.psn, 9),
        other => panic!("{other:?}"),
    }
}
