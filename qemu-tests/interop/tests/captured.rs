//! Byte-level checks of our codecs against frames captured from (or accepted by) Linux
//! soft-RoCE on QEMU's socket netdev (`docs/qemu.md#soft-roce-interop`).

use std::net::Ipv4Addr;

use cm::mad::{CmMad, CmMessage, CmaAddrs, CmaHeader, port_space, service_id, transport};
use roce_wire::eth::{ETHERTYPE_IPV4, EthHeader};
use roce_wire::packet::{DEFAULT_PKEY, GSI_QKEY, Opcode, Packet};

const GUEST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const HOST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];

fn hex(s: &str) -> Vec<u8> {
    let h: Vec<u8> = s.bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    h.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Splits an Ethernet frame: header, IPv4 datagram.
fn eth(frame: &[u8]) -> (EthHeader, &[u8]) {
    let h = EthHeader::from_bytes(frame).unwrap();
    assert_eq!(h.ethertype, ETHERTYPE_IPV4);
    (h, &frame[EthHeader::LEN..])
}

/// A QP1 MAD packet: checks the GSI fields and returns the packet.
fn gsi(ip: &[u8]) -> Packet {
    let p = Packet::decode(ip).expect("our decoder accepts the frame, ICRC included");
    assert_eq!(p.bth.opcode, Opcode::UdSendOnly);
    assert_eq!(p.bth.pkey, DEFAULT_PKEY);
    assert_eq!(p.bth.dest_qp, 1);
    let d = p.ext.deth.unwrap();
    assert_eq!((d.qkey, d.src_qp), (GSI_QKEY, 1));
    assert_eq!(p.payload.len(), 256);
    // rxe's QP1 source port: 0xC000 + hash_32(1, 14).
    assert_eq!(p.udp_src_port, 0xd872);
    p
}

/// The first REQ rxe sent for the guest's `rping -c -a 10.77.0.1 -C 1 -v`.
#[test]
fn rxe_req_decodes_and_reencodes_byte_for_byte() {
    let frame = hex(include_str!("frames/req.hex"));
    assert_eq!(frame.len(), 322);
    let (h, ip) = eth(&frame);
    assert_eq!((h.dst, h.src), (HOST_MAC, GUEST_MAC));
    let p = gsi(ip);
    assert_eq!((p.src_ip, p.dst_ip), (GUEST, HOST));
    assert!(p.bth.ack_req, "rxe sets AckReq on QP1 sends");
    assert_eq!((p.tos, p.ttl, p.ip_id, p.bth.psn), (0, 64, 0x0945, 0));
    // Our encoder rebuilds the IPv4 … ICRC bytes exactly (IPv4 checksum, UDP checksum 0, ICRC
    // stored little-endian).
    assert_eq!(p.encode().unwrap(), ip);

    let mad = CmMad::decode(&p.payload).unwrap();
    assert_eq!(mad.tid, 0x0000_0002_8054_7070);
    let CmMessage::Req(r) = mad.msg else {
        panic!("not a REQ: {:?}", mad.msg)
    };
    assert_eq!(r.local_comm_id, 0x7070_5480);
    assert_eq!(r.service_id, service_id(port_space::TCP, 7174));
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe12_3456);
    assert_eq!(r.local_qpn, 0x11);
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!(r.transport_service_type, transport::RC);
    assert_eq!(r.starting_psn, 0xb4_94b8);
    assert_eq!(
        (r.remote_cm_response_timeout, r.local_cm_response_timeout),
        (20, 20)
    );
    assert_eq!((r.retry_count, r.rnr_retry_count), (7, 7));
    assert_eq!(r.partition_key, 0xffff);
    assert_eq!(r.path_mtu, 3, "1024 on a 1500-byte Ethernet MTU");
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq);
    let pp = r.primary_path;
    assert_eq!((pp.local_lid, pp.remote_lid), (0xffff, 0xffff));
    assert_eq!(pp.local_gid, roce_wire::gid_from_ipv4(GUEST));
    assert_eq!(pp.remote_gid, roce_wire::gid_from_ipv4(HOST));
    assert_eq!(pp.flow_label, 0x021f4);
    assert_eq!((pp.traffic_class, pp.hop_limit, pp.sl), (0, 64, 0));
    assert_eq!(pp.local_ack_timeout, 19);
    assert_eq!(r.alternate_path, Default::default());
    let cma = CmaHeader::decode(&r.private_data).unwrap();
    assert_eq!(
        cma,
        CmaHeader {
            src_port: 33874,
            addrs: CmaAddrs::V4 {
                src: GUEST,
                dst: HOST
            }
        }
    );
    assert_eq!(&r.private_data[..36], &cma.encode());
    assert!(r.private_data[36..].iter().all(|&b| b == 0));
    // Our CM codec writes the same 256 bytes.
    assert_eq!(&mad.encode()[..], &p.payload[..]);
}

/// The guest's REP to a host-built REQ (guest `rping -s`).
#[test]
fn rxe_rep_decodes_and_reencodes() {
    let frame = hex(include_str!("frames/rep.hex"));
    let (_, ip) = eth(&frame);
    let p = gsi(ip);
    assert_eq!(p.encode().unwrap(), ip);
    let mad = CmMad::decode(&p.payload).unwrap();
    assert_eq!(mad.tid, 0x0000_0001_0000_0001, "the REQ's TID");
    let CmMessage::Rep(r) = mad.msg else {
        panic!("not a REP")
    };
    assert_eq!(r.local_comm_id, 0x408f_8e67);
    assert_eq!(r.remote_comm_id, 0x0102_0304);
    assert_eq!(r.local_qpn, 0x11);
    assert_eq!(r.starting_psn, 0xc5_ae53);
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!(r.target_ack_delay, 15);
    assert_eq!(r.rnr_retry_count, 7);
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe12_3456);
    assert_eq!(&mad.encode()[..], &p.payload[..]);
}

/// Host-built REQ and REJ that the guest's rxe accepted (REP / REJECTED): our encoders make
/// the same bytes from the same fields.
#[test]
fn accepted_host_frames_match_our_encoding() {
    for name in ["hreq", "rej"] {
        let frame = hex(match name {
            "hreq" => include_str!("frames/hreq.hex"),
            _ => include_str!("frames/rej.hex"),
        });
        let (h, ip) = eth(&frame);
        assert_eq!((h.dst, h.src), (GUEST_MAC, HOST_MAC));
        let p = gsi(ip);
        assert_eq!((p.src_ip, p.dst_ip), (HOST, GUEST));
        let mut ours = Packet::new(HOST, GUEST, p.bth, p.payload.clone()).with_ext(p.ext);
        ours.udp_src_port = p.udp_src_port;
        ours.ip_id = p.ip_id;
        assert_eq!(ours.encode().unwrap(), ip, "{name}");
        let mad = CmMad::decode(&p.payload).unwrap();
        assert_eq!(&mad.encode()[..], &p.payload[..], "{name}");
        if let CmMessage::Rej(r) = mad.msg {
            assert_eq!(r.reason, 28);
            // The REQ of that run: its comm ID, whose bytes swapped are the TID's low half.
            assert_eq!(r.remote_comm_id, 0x34bf_f7ee);
            assert_eq!(mad.tid as u32, r.remote_comm_id.swap_bytes());
        }
    }
}

/// One flipped ICRC bit (the negative control the guest dropped) is caught by our decoder.
#[test]
fn flipped_icrc_is_refused() {
    let frame = hex(include_str!("frames/rej.hex"));
    let (_, ip) = eth(&frame);
    let mut bad = ip.to_vec();
    let n = bad.len();
    bad[n - 4] ^= 1;
    assert!(matches!(
        Packet::decode(&bad),
        Err(roce_wire::WireError::BadIcrc { .. })
    ));
}

/// RC frames rxe sent during the interop scenarios (`INTEROP_DUMP_DIR`, tests/softroce.rs):
/// our decoder accepts them and our encoder rebuilds them byte for byte; the fields are
/// rxe's rules (`docs/rocev2.md`: #opcodes, #extension-headers, #segmentation, #reliability).
#[test]
fn rxe_rc_frames_decode_and_reencode() {
    use roce_wire::packet::{AETH_ACK_UNLIMITED, AethKind};
    let frames = [
        include_str!("frames/rxe_rc_rdma_read_request.hex"),
        include_str!("frames/rxe_rc_rdma_read_response_first.hex"),
        include_str!("frames/rxe_rc_rdma_read_response_middle.hex"),
        include_str!("frames/rxe_rc_rdma_read_response_last.hex"),
        include_str!("frames/rxe_rc_rdma_write_only.hex"),
        include_str!("frames/rxe_rc_send_only.hex"),
        include_str!("frames/rxe_rc_acknowledge.hex"),
        include_str!("frames/rxe_ud_send_only.hex"),
    ];
    for f in frames {
        let frame = hex(f);
        assert!(frame.len() <= 1514, "fits a 1500-byte Ethernet MTU");
        let (h, ip) = eth(&frame);
        assert_eq!((h.dst, h.src), (HOST_MAC, GUEST_MAC));
        let p = Packet::decode(ip).unwrap();
        assert_eq!((p.src_ip, p.dst_ip), (GUEST, HOST));
        assert_eq!((p.tos, p.ttl), (0, 64));
        assert_eq!(p.bth.pkey, DEFAULT_PKEY);
        assert_eq!(p.encode().unwrap(), ip, "{:?}", p.bth.opcode);
        let aeth = p.ext.aeth;
        match p.bth.opcode {
            Opcode::UdSendOnly => {
                assert_eq!(p.udp_src_port, roce_wire::transport::qp_source_port(1));
                continue;
            }
            Opcode::RcRdmaReadRequest => {
                let r = p.ext.reth.unwrap();
                assert_eq!(r.dma_len, 64, "rping's default size");
                assert!(p.bth.ack_req && p.payload.is_empty());
            }
            Opcode::RcRdmaReadResponseFirst | Opcode::RcRdmaReadResponseLast => {
                let a = aeth.unwrap();
                assert_eq!(
                    a.kind(),
                    AethKind::Ack {
                        credits: AETH_ACK_UNLIMITED
                    }
                );
                assert!(!p.bth.ack_req);
                assert!(p.payload.len() <= 1024 && !p.payload.is_empty());
            }
            Opcode::RcRdmaReadResponseMiddle => {
                assert_eq!(aeth, None, "no AETH in a middle response");
                assert_eq!(p.payload.len(), 1024, "exactly path MTU 1024");
            }
            Opcode::RcRdmaWriteOnly => {
                let r = p.ext.reth.unwrap();
                assert_eq!(r.dma_len as usize, p.payload.len());
                assert!(p.bth.ack_req);
                // rping's echo: the pattern of some ping, NUL-terminated
                assert!(p.payload.starts_with(b"rdma-ping-"));
                assert_eq!(p.payload.last(), Some(&0));
            }
            Opcode::RcSendOnly => {
                assert_eq!(p.payload.len(), 16, "sizeof(struct rping_rdma_info)");
                assert!(p.bth.ack_req);
            }
            Opcode::RcAcknowledge => {
                assert_eq!(
                    aeth.unwrap().kind(),
                    AethKind::Ack {
                        credits: AETH_ACK_UNLIMITED
                    }
                );
                assert!(!p.bth.ack_req);
            }
            op => panic!("unexpected {op:?}"),
        }
        // rxe's RC port comes from the connection's flow label (the REQ's, which our CM
        // chose; tests/softroce.rs checks that both sides use the same one)
        assert!(p.udp_src_port >= 0xc000);
    }
}
