//! Packet encode/decode: golden bytes built by hand from the offsets of `docs/rocev2.md`,
//! rejections, and property tests (round trips, no panics on any input).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use roce_wire::icrc;
use roce_wire::packet::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ExtHeaders, HeaderKind, Ieth, ImmDt, Opcode, Packet,
    PacketView, Reth, WireError,
};

// ---------------------------------------------------------------------------------------
// Independent reference helpers (deliberately not the crate's code).

/// Bit-at-a-time reflected CRC-32 (poly 0xEDB88320, preset ~0, final ~).
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let lsb = crc & 1;
            crc >>= 1;
            if lsb != 0 {
                crc ^= 0xEDB8_8320;
            }
        }
    }
    !crc
}

/// `docs/rocev2.md#icrc`: ICRC of a whole frame (IPv4 … ICRC), last four bytes excluded; wire
/// order.
fn ref_icrc(frame: &[u8]) -> [u8; 4] {
    let mut m = vec![0xFFu8; 8];
    m.extend_from_slice(&frame[..frame.len() - 4]);
    for off in [1usize, 8, 10, 11, 26, 27, 32] {
        if let Some(b) = m.get_mut(8 + off) {
            *b = 0xFF;
        }
    }
    crc32_bitwise(&m).to_le_bytes()
}

/// RFC 1071 checksum of a 20-byte IPv4 header whose checksum field is zero.
fn ref_ip_checksum(h: &[u8]) -> [u8; 2] {
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(w[0]) << 8 | u32::from(w[1]);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    (!(sum as u16)).to_be_bytes()
}

/// Recomputes IPv4 total length + checksum, UDP length and the ICRC of a hand-edited frame.
fn fixup(frame: &mut [u8]) {
    let len = frame.len() as u16;
    frame[2..4].copy_from_slice(&len.to_be_bytes());
    frame[10] = 0;
    frame[11] = 0;
    let c = ref_ip_checksum(&frame[..20]);
    frame[10..12].copy_from_slice(&c);
    frame[24..26].copy_from_slice(&(len - 20).to_be_bytes());
    let n = frame.len();
    let t = ref_icrc(frame);
    frame[n - 4..].copy_from_slice(&t);
}

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

// ---------------------------------------------------------------------------------------
// Golden bytes.

#[test]
fn golden_rc_send_only() {
    let mut bth = Bth::new(Opcode::RcSendOnly, 0x00_0123, 0x00_0456);
    bth.ack_req = true;
    bth.solicited = true;
    let mut p = Packet::new(A, B, bth, b"ABCDE".to_vec());
    p.udp_src_port = 0xC001;
    p.ip_id = 0x0001;
    let got = p.encode().unwrap();

    // UDP payload: BTH 12 + payload 5 + pad 3 + ICRC 4 = 24; UDP length 32; total 52.
    let mut want: Vec<u8> = vec![
        0x45,
        0x00,
        0x00,
        0x34, // version/IHL, TOS, total length
        0x00,
        0x01,
        0x40,
        0x00, // ID, flags DF, fragment offset 0
        0x40,
        0x11,
        0x00,
        0x00, // TTL 64, UDP, checksum (below)
        10,
        0,
        0,
        1, // source
        10,
        0,
        0,
        2, // destination
        0xC0,
        0x01,
        0x12,
        0xB7, // UDP source port, destination 4791
        0x00,
        0x20,
        0x00,
        0x00,        // UDP length 32, checksum 0
        0x04,        // BTH opcode SEND ONLY
        0x80 | 0x30, // SE, M 0, PadCnt 3, TVer 0
        0xFF,
        0xFF, // P_Key
        0x00, // FECN/BECN/Resv6a
        0x00,
        0x01,
        0x23, // DestQP
        0x80, // A
        0x00,
        0x04,
        0x56, // PSN
        b'A',
        b'B',
        b'C',
        b'D',
        b'E', // payload
        0,
        0,
        0, // pad
        0,
        0,
        0,
        0, // ICRC (below)
    ];
    let c = ref_ip_checksum(&want[..20]);
    want[10..12].copy_from_slice(&c);
    let n = want.len();
    let t = ref_icrc(&want);
    want[n - 4..].copy_from_slice(&t);

    assert_eq!(got, want);
    let back = Packet::decode(&want).unwrap();
    assert_eq!(back.payload, b"ABCDE");
    assert_eq!(back.bth.pad_count, 3);
    assert!(back.bth.solicited && back.bth.ack_req);
}

#[test]
fn golden_rc_rdma_write_first_with_reth() {
    let mut bth = Bth::new(Opcode::RcRdmaWriteFirst, 0xAB_CDEF, 0xFF_FFFF);
    bth.pkey = 0x7FFF;
    bth.fecn = true;
    let payload: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
    let reth = Reth {
        va: 0x0102_0304_0506_0708,
        rkey: 0x1122_3344,
        dma_len: 0x0000_2000,
    };
    let mut p = Packet::new(A, B, bth, payload.clone()).with_ext(ExtHeaders {
        reth: Some(reth),
        ..ExtHeaders::NONE
    });
    p.udp_src_port = 0xD00D;
    p.ip_id = 0xBEEF;
    p.tos = (26 << 2) | 2; // DSCP AF31, ECT(0)
    p.ttl = 255;
    let got = p.encode().unwrap();

    // UDP payload: 12 + 16 + 256 + 0 + 4 = 288; UDP length 296; total 316.
    let mut want = vec![0u8; 316];
    want[0] = 0x45;
    want[1] = 0x6A;
    want[2..4].copy_from_slice(&[0x01, 0x3C]);
    want[4..6].copy_from_slice(&[0xBE, 0xEF]);
    want[6] = 0x40;
    want[8] = 0xFF;
    want[9] = 17;
    want[12..16].copy_from_slice(&[10, 0, 0, 1]);
    want[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let c = ref_ip_checksum(&want[..20]);
    want[10..12].copy_from_slice(&c);
    // UDP
    want[20..22].copy_from_slice(&[0xD0, 0x0D]);
    want[22..24].copy_from_slice(&[0x12, 0xB7]);
    want[24..26].copy_from_slice(&[0x01, 0x28]);
    // BTH at 28
    want[28] = 0x06;
    want[29] = 0x00;
    want[30..32].copy_from_slice(&[0x7F, 0xFF]);
    want[32] = 0x80; // FECN
    want[33..36].copy_from_slice(&[0xAB, 0xCD, 0xEF]);
    want[36] = 0x00;
    want[37..40].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    // RETH at 40: VA, R_Key, DMA length
    want[40..48].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    want[48..52].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]);
    want[52..56].copy_from_slice(&[0x00, 0x00, 0x20, 0x00]);
    want[56..312].copy_from_slice(&payload);
    let t = ref_icrc(&want);
    want[312..316].copy_from_slice(&t);

    assert_eq!(got, want);
    let back = Packet::decode(&want).unwrap();
    assert_eq!(back.ext.reth, Some(reth));
    assert!(back.bth.fecn && !back.bth.becn);
    assert_eq!(back.tos, 0x6A);
    // FECN is not covered by the ICRC: a switch may set it in flight.
    let mut marked = want.clone();
    marked[32] = 0xC0;
    assert!(Packet::decode(&marked).unwrap().bth.becn);
}

#[test]
fn golden_udp_payload_form_uses_the_pseudo_header() {
    let p = Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 5, 6), vec![9u8; 4]);
    let udp = p.encode_udp_payload().unwrap();
    // Same bytes as the frame form after the UDP header, but the ICRC is computed as if the
    // IPv4 ID were 0 and the source port p.udp_src_port: identical here, as ip_id is 0.
    let frame = p.encode().unwrap();
    assert_eq!(udp, frame[28..]);
    assert_eq!(
        Packet::decode_udp_payload(A, B, p.udp_src_port, &udp).unwrap(),
        Packet::decode(&frame).unwrap()
    );
    // The receiver must know the right addresses and port.
    for (s, d, port) in [
        (B, A, p.udp_src_port),
        (A, B, 1),
        (A, Ipv4Addr::LOCALHOST, p.udp_src_port),
    ] {
        assert!(matches!(
            Packet::decode_udp_payload(s, d, port, &udp),
            Err(WireError::BadIcrc { .. })
        ));
    }
}

// ---------------------------------------------------------------------------------------
// Rejections.

fn send_only_frame(payload: &[u8]) -> Vec<u8> {
    Packet::new(A, B, Bth::new(Opcode::RcSendOnly, 1, 2), payload.to_vec())
        .encode()
        .unwrap()
}

#[test]
fn rejects_bad_icrc() {
    let mut f = send_only_frame(b"data");
    let n = f.len();
    f[n - 1] ^= 0x80;
    assert!(matches!(Packet::decode(&f), Err(WireError::BadIcrc { .. })));
    let mut f = send_only_frame(b"data");
    f[42] ^= 1; // payload
    assert!(matches!(Packet::decode(&f), Err(WireError::BadIcrc { .. })));
    let mut f = send_only_frame(b"data");
    f[5] ^= 1; // IPv4 ID: covered by the ICRC, not by... the IPv4 checksum catches it first
    assert_eq!(Packet::decode(&f), Err(WireError::BadIpChecksum));
}

#[test]
fn rejects_bad_pad_count() {
    // Zero-length SEND ONLY claiming 3 bytes of pad.
    let mut f = send_only_frame(b"");
    f[29] |= 0x30;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::BadPadCount));
    // 4 data bytes, pad count 3: consistent (1 byte payload) and accepted.
    let mut f = send_only_frame(b"wxyz");
    f[29] |= 0x30;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f).unwrap().payload, b"w");
    // An ACK (no payload) with a pad count.
    let ack =
        Packet::new(A, B, Bth::new(Opcode::RcAcknowledge, 1, 2), vec![]).with_ext(ExtHeaders {
            aeth: Some(Aeth::ack(3)),
            ..ExtHeaders::NONE
        });
    let mut f = ack.encode().unwrap();
    f[29] |= 0x10;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::BadPadCount));
}

#[test]
fn rejects_data_not_multiple_of_four() {
    let mut f = send_only_frame(b"abcd");
    f.insert(44, 0xAA); // 5 data bytes, pad 0
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::BadLength));
}

#[test]
fn rejects_truncated_extension_header() {
    // RDMA WRITE FIRST with only 8 of the RETH's 16 bytes.
    let mut f = vec![0u8; 28 + 12 + 8 + 4];
    f[..28].copy_from_slice(&send_only_frame(b"")[..28]);
    f[28] = 0x06;
    f[30] = 0xFF;
    f[31] = 0xFF;
    fixup(&mut f);
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::Reth))
    );
    // COMPARE SWAP with 27 of 28 AtomicETH bytes (also not a multiple of 4: still the header
    // is what is reported).
    let mut f = vec![0u8; 28 + 12 + 27 + 4];
    f[..28].copy_from_slice(&send_only_frame(b"")[..28]);
    f[28] = 0x13;
    fixup(&mut f);
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::AtomicEth))
    );
    // ATOMIC ACK with its AETH but no AtomicAckETH.
    let mut f = vec![0u8; 28 + 12 + 4 + 4];
    f[..28].copy_from_slice(&send_only_frame(b"")[..28]);
    f[28] = 0x12;
    fixup(&mut f);
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::AtomicAckEth))
    );
    // UD SEND ONLY with a 4-byte DETH.
    let mut f = vec![0u8; 28 + 12 + 4 + 4];
    f[..28].copy_from_slice(&send_only_frame(b"")[..28]);
    f[28] = 0x64;
    fixup(&mut f);
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::Deth))
    );
}

#[test]
fn rejects_ipv4_checksum_error() {
    let mut f = send_only_frame(b"abc");
    f[8] = 1; // TTL changed without fixing the checksum (the ICRC does not cover the TTL)
    assert_eq!(Packet::decode(&f), Err(WireError::BadIpChecksum));
    let mut f = send_only_frame(b"abc");
    f[11] ^= 0xFF;
    assert_eq!(Packet::decode(&f), Err(WireError::BadIpChecksum));
}

#[test]
fn rejects_wrong_udp_port() {
    let mut f = send_only_frame(b"abc");
    f[22..24].copy_from_slice(&4792u16.to_be_bytes());
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::WrongUdpPort(4792)));
}

#[test]
fn rejects_other_malformations() {
    let good = send_only_frame(b"abcd");
    // Version.
    let mut f = good.clone();
    f[0] = 0x65;
    assert_eq!(Packet::decode(&f), Err(WireError::NotIpv4));
    // Options.
    let mut f = good.clone();
    f[0] = 0x46;
    assert_eq!(Packet::decode(&f), Err(WireError::Ipv4Options));
    // Total length.
    let mut f = good.clone();
    f.push(0);
    assert_eq!(Packet::decode(&f), Err(WireError::BadIpLength));
    // Protocol.
    let mut f = good.clone();
    f[9] = 6;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::NotUdp));
    // Fragment.
    let mut f = good.clone();
    f[6] = 0x20;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::Fragmented));
    // UDP length.
    let mut f = good.clone();
    f[25] ^= 4;
    assert_eq!(Packet::decode(&f), Err(WireError::BadUdpLength));
    // TVer.
    let mut f = good.clone();
    f[29] |= 0x01;
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::BadTver(1)));
    // Opcodes outside the table (FLUSH, RD, reserved).
    for op in [0x1Cu8, 0x15, 0x40, 0x80] {
        let mut f = good.clone();
        f[28] = op;
        fixup(&mut f);
        assert_eq!(Packet::decode(&f), Err(WireError::UnknownOpcode(op)));
    }
    // A payload on a READ request.
    let mut f = good.clone();
    f[28] = 0x0C;
    f.splice(40..40, [0u8; 16]); // RETH, then the 4 payload bytes remain
    fixup(&mut f);
    assert_eq!(Packet::decode(&f), Err(WireError::UnexpectedPayload));
    // Too short for an ICRC / a BTH.
    let mut f = good[..28 + 14].to_vec();
    fixup(&mut f);
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::Icrc))
    );
    let mut f = good[..28 + 8].to_vec();
    f[2..4].copy_from_slice(&36u16.to_be_bytes());
    f[10] = 0;
    f[11] = 0;
    let c = ref_ip_checksum(&f[..20]);
    f[10..12].copy_from_slice(&c);
    f[24..26].copy_from_slice(&16u16.to_be_bytes());
    assert_eq!(
        Packet::decode(&f),
        Err(WireError::Truncated(HeaderKind::Bth))
    );
    assert_eq!(
        Packet::decode(&[]),
        Err(WireError::Truncated(HeaderKind::Ipv4))
    );
    assert_eq!(
        Packet::decode(&good[..19]),
        Err(WireError::Truncated(HeaderKind::Ipv4))
    );
    assert_eq!(Packet::decode(&good[..20]), Err(WireError::BadIpLength));
}

// ---------------------------------------------------------------------------------------
// Property tests.

fn ext_for(op: Opcode, r: &[u64; 8]) -> ExtHeaders {
    let l = op.ext_layout();
    ExtHeaders {
        deth: l.deth.then_some(Deth {
            qkey: r[0] as u32,
            src_qp: (r[1] as u32) & 0xFF_FFFF,
        }),
        reth: l.reth.then_some(Reth {
            va: r[2],
            rkey: r[3] as u32,
            dma_len: (r[3] >> 32) as u32,
        }),
        atomic_eth: l.atomic_eth.then_some(AtomicEth {
            va: r[4],
            rkey: (r[5] >> 7) as u32,
            swap_add: r[5],
            compare: r[6],
        }),
        imm_dt: l.imm_dt.then_some(ImmDt { imm: r[7] as u32 }),
        ieth: l.ieth.then_some(Ieth {
            rkey: (r[7] >> 32) as u32,
        }),
        aeth: l.aeth.then_some(Aeth {
            syndrome: (r[0] >> 40) as u8,
            msn: (r[1] >> 24) as u32 & 0xFF_FFFF,
        }),
        atomic_ack_eth: l
            .atomic_ack_eth
            .then_some(AtomicAckEth { orig: r[6] ^ r[2] }),
    }
}

prop_compose! {
    fn arb_packet()(
        op in prop::sample::select(Opcode::ALL),
        src in any::<u32>(), dst in any::<u32>(),
        sport in any::<u16>(), tos in any::<u8>(), ttl in any::<u8>(), ip_id in any::<u16>(),
        flags in any::<u8>(), pkey in any::<u16>(),
        dest_qp in 0u32..=0xFF_FFFF, psn in 0u32..=0xFF_FFFF,
        r in any::<[u64; 8]>(),
        payload in prop::collection::vec(any::<u8>(), 0..=4096),
    ) -> Packet {
        let mut bth = Bth::new(op, dest_qp, psn);
        bth.solicited = flags & 1 != 0;
        bth.mig_req = flags & 2 != 0;
        bth.fecn = flags & 4 != 0;
        bth.becn = flags & 8 != 0;
        bth.ack_req = flags & 16 != 0;
        bth.pkey = pkey;
        let payload = if op.has_payload() { payload } else { Vec::new() };
        let mut p = Packet::new(Ipv4Addr::from(src), Ipv4Addr::from(dst), bth, payload)
            .with_ext(ext_for(op, &r));
        p.udp_src_port = sport;
        p.tos = tos;
        p.ttl = ttl;
        p.ip_id = ip_id;
        p
    }
}

#[test]
fn every_opcode_round_trips_at_every_pad() {
    let r = [
        0x0123_4567_89AB_CDEF,
        0xFEDC_BA98_7654_3210,
        0x1111_2222_3333_4444,
        0x5555_6666_7777_8888,
        0x9999_AAAA_BBBB_CCCC,
        0xDDDD_EEEE_FFFF_0000,
        0x0F0F_0F0F_F0F0_F0F0,
        0xA5A5_5A5A_C3C3_3C3C,
    ];
    for &op in Opcode::ALL {
        for len in [0usize, 1, 2, 3, 4, 5, 255, 256, 4095, 4096] {
            let len = if op.has_payload() { len } else { 0 };
            let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5A).collect();
            let mut bth = Bth::new(op, 0xFF_FFFF, 0xAB_CDEF);
            bth.ack_req = true;
            let p = Packet::new(A, B, bth, payload).with_ext(ext_for(op, &r));
            let frame = p.encode().unwrap();
            let pad = (4 - len % 4) % 4;
            assert_eq!(frame.len(), 28 + 12 + op.ext_layout().len() + len + pad + 4);
            assert_eq!((frame[29] >> 4) & 3, pad as u8, "{op:?} {len}");
            assert_eq!(frame[28], op as u8);
            assert_eq!(&frame[frame.len() - 4..], &ref_icrc(&frame)[..]);
            assert_eq!(
                Packet::decode(&frame).unwrap(),
                with_pad(&p),
                "{op:?} {len}"
            );
            let udp = p.encode_udp_payload().unwrap();
            let back = Packet::decode_udp_payload(A, B, p.udp_src_port, &udp).unwrap();
            assert_eq!(back.ext, p.ext);
            assert_eq!(back.payload, p.payload);
        }
    }
}

fn with_pad(p: &Packet) -> Packet {
    let mut q = p.clone();
    q.bth.pad_count = p.pad_len() as u8;
    q
}

proptest! {
    #[test]
    fn frame_round_trip(p in arb_packet()) {
        let frame = p.encode().unwrap();
        prop_assert_eq!(frame.len(), p.frame_len());
        prop_assert_eq!(frame.len() % 4, 0);
        let pad = p.pad_len();
        prop_assert_eq!((p.payload.len() + pad) % 4, 0);
        let back = Packet::decode(&frame).unwrap();
        prop_assert_eq!(&back, &with_pad(&p));
        // Zero-copy view: same content, payload borrowed from the frame.
        let view = PacketView::parse(&frame).unwrap();
        prop_assert_eq!(view.payload, &p.payload[..]);
        prop_assert_eq!(view.to_owned_packet(), back.clone());
        // Re-encoding the decoded packet gives the same bytes.
        prop_assert_eq!(back.encode().unwrap(), frame.clone());
        prop_assert_eq!(view.encode().unwrap(), frame.clone());
        // The trailer is the crate's and the reference ICRC.
        let n = frame.len();
        prop_assert_eq!(&frame[n - 4..], &ref_icrc(&frame)[..]);
        prop_assert_eq!(icrc::frame_icrc(&frame), Some(icrc::from_wire(ref_icrc(&frame))));
    }

    #[test]
    fn udp_payload_round_trip(p in arb_packet()) {
        let bytes = p.encode_udp_payload().unwrap();
        prop_assert_eq!(bytes.len(), p.udp_payload_len());
        let back = Packet::decode_udp_payload(p.src_ip, p.dst_ip, p.udp_src_port, &bytes).unwrap();
        let mut want = with_pad(&p);
        want.tos = 0;
        want.ttl = 64;
        want.ip_id = 0;
        prop_assert_eq!(&back, &want);
        // With ip_id 0 the frame and UDP-payload forms carry the same ICRC.
        let mut p0 = p.clone();
        p0.ip_id = 0;
        prop_assert_eq!(&p0.encode().unwrap()[28..], &bytes[..]);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256),
                                port in any::<u16>()) {
        let _ = Packet::decode(&bytes);
        let _ = PacketView::parse(&bytes);
        let _ = Packet::decode_udp_payload(A, B, port, &bytes);
        let _ = roce_wire::packet::frame_to_udp_payload(&bytes, port);
        let _ = icrc::frame_icrc(&bytes);
    }

    #[test]
    fn random_ipv4_udp_prefix_never_panics(p in arb_packet(), tail in prop::collection::vec(any::<u8>(), 0..128)) {
        // A valid IPv4/UDP header (lengths fixed up) in front of random transport bytes:
        // exercises the BTH/extension-header parsing paths, which random bytes rarely reach.
        let frame = p.encode().unwrap();
        let mut f = frame[..28].to_vec();
        f.extend_from_slice(&tail);
        if f.len() >= 32 {
            fixup(&mut f);
        }
        let _ = Packet::decode(&f);
        let _ = Packet::decode_udp_payload(A, B, 1, &tail);
    }

    #[test]
    fn truncations_are_rejected(p in arb_packet(), cut in any::<prop::sample::Index>()) {
        let frame = p.encode().unwrap();
        let n = cut.index(frame.len());
        prop_assert!(Packet::decode(&frame[..n]).is_err());
        let udp = p.encode_udp_payload().unwrap();
        let m = cut.index(udp.len());
        // A truncated UDP payload is either too short or fails the ICRC.
        prop_assert!(Packet::decode_udp_payload(p.src_ip, p.dst_ip, p.udp_src_port, &udp[..m]).is_err());
    }

    #[test]
    fn single_byte_changes_are_caught(p in arb_packet(), at in any::<prop::sample::Index>(), x in 1u8..=255) {
        let frame = p.encode().unwrap();
        let i = at.index(frame.len());
        let mut f = frame.clone();
        f[i] ^= x;
        let r = Packet::decode(&f);
        // Only the masked, uncovered fields may change unnoticed: TOS (1), TTL (8), and
        // BTH byte 4 (FECN/BECN/Resv6a); the IPv4 checksum covers TOS and TTL.
        if i == 32 {
            prop_assert!(r.is_ok());
        } else if i == 26 || i == 27 {
            // A non-zero UDP checksum is verified; by chance it may be the right one.
            prop_assert!(r.is_err() || r == Packet::decode(&frame));
        } else {
            prop_assert!(r.is_err(), "offset {} changed unnoticed", i);
        }
    }
}
