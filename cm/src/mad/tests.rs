//! Golden bytes for every CM message, built here from the offset tables of `docs/cm.md`
//! (#mad-header, #message-layouts, #cma-header-and-service-id), not from the encoder; round trips
//! and garbage input as property tests.

use super::*;
use proptest::prelude::*;

/// A 256-byte MAD being written field by field at absolute offsets.
struct Golden([u8; MAD_SIZE]);

impl Golden {
    /// The common header of a CM Send (`docs/cm.md#mad-header`).
    fn cm(attr_id: u16, tid: u64, attr_mod: u32) -> Golden {
        let mut g = Golden([0u8; MAD_SIZE]);
        g.at(0, &[1]); // BaseVersion
        g.at(1, &[0x07]); // MgmtClass CM
        g.at(2, &[2]); // ClassVersion
        g.at(3, &[0x03]); // Method Send
        g.at(8, &tid.to_be_bytes());
        g.at(16, &attr_id.to_be_bytes());
        g.at(20, &attr_mod.to_be_bytes());
        g
    }
    /// Bytes at message-data offset `off` (MAD offset 24 + off).
    fn d(&mut self, off: usize, bytes: &[u8]) -> &mut Self {
        self.at(24 + off, bytes)
    }
    fn at(&mut self, off: usize, bytes: &[u8]) -> &mut Self {
        self.0[off..off + bytes.len()].copy_from_slice(bytes);
        self
    }
}

fn be24(v: u32) -> [u8; 3] {
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

fn pattern<const N: usize>(seed: u8) -> [u8; N] {
    let mut a = [0u8; N];
    for (i, b) in a.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8).wrapping_mul(7);
    }
    a
}

fn gid(last: u8) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, last]
}

#[test]
fn header_fields_at_spec_offsets() {
    let h = MadHeader {
        base_version: 1,
        mgmt_class: 0x07,
        class_version: 2,
        method: 0x81,
        status: 0x000C,
        class_specific: 0xA5A5,
        tid: 0x0102_0304_0506_0708,
        attr_id: 0x0001,
        attr_mod: 0xDEAD_BEEF,
    };
    let mut b = [0xEEu8; MAD_SIZE];
    h.encode_into(&mut b);
    let want: [u8; 24] = [
        1, 0x07, 2, 0x81, 0x00, 0x0C, 0xA5, 0xA5, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x01, 0, 0, 0xDE,
        0xAD, 0xBE, 0xEF,
    ];
    assert_eq!(b[..24], want);
    assert_eq!(MadHeader::decode(&b[..24]), Ok(h));
    assert_eq!(
        MadHeader::decode(&b[..23]),
        Err(MadError::Truncated { len: 23 })
    );
}

#[test]
fn req_golden() {
    let path = ReqPath {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFE,
        local_gid: gid(1),
        remote_gid: gid(2),
        flow_label: 0xA_BCDE,
        packet_rate: 0x2A,
        traffic_class: 0x60,
        hop_limit: 64,
        sl: 0xB,
        subnet_local: true,
        local_ack_timeout: 17,
    };
    let alt = ReqPath {
        local_lid: 0x1234,
        remote_lid: 0x5678,
        local_gid: gid(3),
        remote_gid: gid(4),
        flow_label: 0x1,
        packet_rate: 0x3F,
        traffic_class: 1,
        hop_limit: 2,
        sl: 0x3,
        subnet_local: false,
        local_ack_timeout: 31,
    };
    let req = Req {
        local_comm_id: 0x1122_3344,
        service_id: 0x0000_0000_0106_1D2F,
        local_ca_guid: 0x0202_03FF_FE04_0506,
        local_qkey: 0x0123_4567,
        local_qpn: 0x00AB_CDEF,
        responder_resources: 0x10,
        local_eecn: 0x0012_3456,
        initiator_depth: 0x08,
        remote_eecn: 0x0065_4321,
        remote_cm_response_timeout: 20,
        transport_service_type: transport::UC,
        end_to_end_flow_control: true,
        starting_psn: 0x00FE_DCBA,
        local_cm_response_timeout: 19,
        retry_count: 7,
        partition_key: 0xFFFF,
        path_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 6,
        max_cm_retries: 15,
        srq: true,
        extended_transport_type: 5,
        primary_path: path,
        alternate_path: alt,
        sap_supported: true,
        private_data: pattern(3),
    };
    let mad = CmMad {
        tid: 0x0000_0001_1122_3344,
        attr_mod: 0,
        msg: CmMessage::Req(req),
    };
    let mut g = Golden::cm(0x0010, 0x0000_0001_1122_3344, 0);
    g.d(0, &0x1122_3344u32.to_be_bytes())
        .d(8, &0x0000_0000_0106_1D2Fu64.to_be_bytes())
        .d(16, &0x0202_03FF_FE04_0506u64.to_be_bytes())
        .d(28, &0x0123_4567u32.to_be_bytes())
        .d(32, &be24(0xAB_CDEF))
        .d(35, &[0x10])
        .d(36, &be24(0x12_3456))
        .d(39, &[0x08])
        .d(40, &be24(0x65_4321))
        // remote CM response timeout 20 (5) | transport UC=1 (2) | flow control (1)
        .d(43, &[(20 << 3) | (1 << 1) | 1])
        .d(44, &be24(0xFE_DCBA))
        // local CM response timeout 19 (5) | retry count 7 (3)
        .d(47, &[(19 << 3) | 7])
        .d(48, &[0xFF, 0xFF])
        // path MTU 3 (4) | RDC exists (1) | RNR retry 6 (3)
        .d(50, &[(3 << 4) | (1 << 3) | 6])
        // max CM retries 15 (4) | SRQ (1) | extended transport 5 (3)
        .d(51, &[(15 << 4) | (1 << 3) | 5])
        .d(52, &[0xFF, 0xFF])
        .d(54, &[0xFF, 0xFE])
        .d(56, &gid(1))
        .d(72, &gid(2))
        // flow label 0xABCDE (20) | reserved (6) | packet rate 0x2A (6)
        .d(88, &[0xAB, 0xCD, 0xE0, 0x2A])
        .d(92, &[0x60])
        .d(93, &[64])
        // SL 0xB (4) | subnet local (1)
        .d(94, &[(0xB << 4) | (1 << 3)])
        // local ACK timeout 17 (5)
        .d(95, &[17 << 3])
        .d(96, &[0x12, 0x34])
        .d(98, &[0x56, 0x78])
        .d(100, &gid(3))
        .d(116, &gid(4))
        .d(132, &[0x00, 0x00, 0x10, 0x3F])
        .d(136, &[1])
        .d(137, &[2])
        .d(138, &[0x3 << 4])
        // alternate local ACK timeout 31 (5) | SAP supported (1)
        .d(139, &[(31 << 3) | (1 << 2)])
        .d(140, &pattern::<92>(3));
    assert_eq!(mad.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(mad));
}

#[test]
fn rep_golden() {
    let rep = Rep {
        local_comm_id: 0xA1A2_A3A4,
        remote_comm_id: 0x1122_3344,
        local_qkey: 0x8765_4321,
        local_qpn: 0x12_3456,
        local_eecn: 0xAB_CDEF,
        starting_psn: 0x55_AA55,
        responder_resources: 4,
        initiator_depth: 2,
        target_ack_delay: 15,
        failover_accepted: 1,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0x0011_2233_4455_6677,
        private_data: pattern(9),
    };
    let mad = CmMad {
        tid: 42,
        attr_mod: 0,
        msg: CmMessage::Rep(rep),
    };
    let mut g = Golden::cm(0x0013, 42, 0);
    g.d(0, &0xA1A2_A3A4u32.to_be_bytes())
        .d(4, &0x1122_3344u32.to_be_bytes())
        .d(8, &0x8765_4321u32.to_be_bytes())
        .d(12, &be24(0x12_3456))
        .d(16, &be24(0xAB_CDEF))
        .d(20, &be24(0x55_AA55))
        .d(24, &[4, 2])
        // target ACK delay 15 (5) | failover accepted 1 (2) | flow control (1)
        .d(26, &[(15 << 3) | (1 << 1) | 1])
        // RNR retry 7 (3) | SRQ (1)
        .d(27, &[(7 << 5) | (1 << 4)])
        .d(28, &0x0011_2233_4455_6677u64.to_be_bytes())
        .d(36, &pattern::<196>(9));
    assert_eq!(mad.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(mad));
}

#[test]
fn rtu_golden() {
    let mad = CmMad {
        tid: 7,
        attr_mod: 0,
        msg: CmMessage::Rtu(Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: pattern(1),
        }),
    };
    let mut g = Golden::cm(0x0014, 7, 0);
    g.d(0, &[0, 0, 0, 1])
        .d(4, &[0, 0, 0, 2])
        .d(8, &pattern::<224>(1));
    assert_eq!(mad.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(mad));
}

#[test]
fn rej_golden() {
    let mad = CmMad {
        tid: 0xFFFF_FFFF_0000_0001,
        attr_mod: 0,
        msg: CmMessage::Rej(Rej {
            local_comm_id: 0x0BAD_F00D,
            remote_comm_id: 0x1122_3344,
            message_rejected: msg_kind::REP,
            reject_info_length: 8,
            reason: rej_reason::CONSUMER_DEFINED,
            ari: pattern(5),
            private_data: pattern(6),
        }),
    };
    let mut g = Golden::cm(0x0012, 0xFFFF_FFFF_0000_0001, 0);
    g.d(0, &0x0BAD_F00Du32.to_be_bytes())
        .d(4, &0x1122_3344u32.to_be_bytes())
        .d(8, &[1 << 6]) // message REJected: REP (2 bits)
        .d(9, &[8 << 1]) // reject info length (7 bits)
        .d(10, &[0, 28])
        .d(12, &pattern::<72>(5))
        .d(84, &pattern::<148>(6));
    assert_eq!(mad.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(mad));
}

#[test]
fn mra_golden() {
    let mad = CmMad {
        tid: 3,
        attr_mod: 0,
        msg: CmMessage::Mra(Mra {
            local_comm_id: 5,
            remote_comm_id: 6,
            message_mraed: msg_kind::OTHER,
            service_timeout: 24,
            private_data: pattern(2),
        }),
    };
    let mut g = Golden::cm(0x0011, 3, 0);
    g.d(0, &[0, 0, 0, 5])
        .d(4, &[0, 0, 0, 6])
        .d(8, &[2 << 6])
        .d(9, &[24 << 3])
        .d(10, &pattern::<222>(2));
    assert_eq!(mad.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(mad));
}

#[test]
fn dreq_and_drep_golden() {
    let dreq = CmMad {
        tid: 0x10,
        attr_mod: 0,
        msg: CmMessage::Dreq(Dreq {
            local_comm_id: 0xC0C0_C0C0,
            remote_comm_id: 0x0D0D_0D0D,
            remote_qpn_eecn: 0x00_0123,
            private_data: pattern(4),
        }),
    };
    let mut g = Golden::cm(0x0015, 0x10, 0);
    g.d(0, &0xC0C0_C0C0u32.to_be_bytes())
        .d(4, &0x0D0D_0D0Du32.to_be_bytes())
        .d(8, &be24(0x123))
        .d(12, &pattern::<220>(4));
    assert_eq!(dreq.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(dreq));

    let drep = CmMad {
        tid: 0x10,
        attr_mod: 0,
        msg: CmMessage::Drep(Drep {
            local_comm_id: 0x0D0D_0D0D,
            remote_comm_id: 0xC0C0_C0C0,
            private_data: pattern(8),
        }),
    };
    let mut g = Golden::cm(0x0016, 0x10, 0);
    g.d(0, &0x0D0D_0D0Du32.to_be_bytes())
        .d(4, &0xC0C0_C0C0u32.to_be_bytes())
        .d(8, &pattern::<224>(8));
    assert_eq!(drep.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(drep));
}

#[test]
fn sidr_golden() {
    let req = CmMad {
        tid: 0x99,
        attr_mod: 0,
        msg: CmMessage::SidrReq(SidrReq {
            request_id: 0x0102_0304,
            partition_key: 0xFFFF,
            service_id: service_id(port_space::UDP, 7174),
            private_data: pattern(11),
        }),
    };
    let mut g = Golden::cm(0x0017, 0x99, 0);
    g.d(0, &[1, 2, 3, 4])
        .d(4, &[0xFF, 0xFF])
        .d(8, &[0, 0, 0, 0, 0x01, 0x11, 0x1C, 0x06])
        .d(16, &pattern::<216>(11));
    assert_eq!(req.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(req));

    let rep = CmMad {
        tid: 0x99,
        attr_mod: 0,
        msg: CmMessage::SidrRep(SidrRep {
            request_id: 0x0102_0304,
            status: sidr_status::REJECT,
            additional_info_length: 0,
            qpn: 0x00_00AB,
            service_id: 0x0000_0000_0111_1C06,
            qkey: 0x0123_4567,
            additional_info: pattern(12),
            private_data: pattern(13),
        }),
    };
    let mut g = Golden::cm(0x0018, 0x99, 0);
    g.d(0, &[1, 2, 3, 4])
        .d(4, &[2])
        .d(5, &[0])
        .d(8, &be24(0xAB))
        .d(12, &[0, 0, 0, 0, 0x01, 0x11, 0x1C, 0x06])
        .d(20, &0x0123_4567u32.to_be_bytes())
        .d(24, &pattern::<72>(12))
        .d(96, &pattern::<136>(13));
    assert_eq!(rep.encode(), g.0);
    assert_eq!(CmMad::decode(&g.0), Ok(rep));
}

#[test]
fn cma_header_golden() {
    let h = CmaHeader {
        src_port: 0xC350,
        addrs: CmaAddrs::V4 {
            src: Ipv4Addr::new(127, 0, 0, 1),
            dst: Ipv4Addr::new(10, 1, 2, 3),
        },
    };
    let mut want = [0u8; 36];
    want[1] = 0x40;
    want[2..4].copy_from_slice(&[0xC3, 0x50]);
    want[16..20].copy_from_slice(&[127, 0, 0, 1]);
    want[32..36].copy_from_slice(&[10, 1, 2, 3]);
    assert_eq!(h.encode(), want);
    assert_eq!(CmaHeader::decode(&want), Ok(h));

    let v6 = CmaHeader {
        src_port: 1,
        addrs: CmaAddrs::V6 {
            src: Ipv6Addr::from(gid(1)),
            dst: Ipv6Addr::LOCALHOST,
        },
    };
    let mut want = [0u8; 36];
    want[1] = 0x60;
    want[3] = 1;
    want[4..20].copy_from_slice(&gid(1));
    want[35] = 1;
    assert_eq!(v6.encode(), want);
    assert_eq!(CmaHeader::decode(&want), Ok(v6));

    // what the passive kernel refuses
    let mut bad = h.encode();
    bad[0] = 1;
    assert_eq!(CmaHeader::decode(&bad), Err(MadError::CmaVersion(1)));
    let mut bad = h.encode();
    bad[1] = 0x50;
    assert_eq!(CmaHeader::decode(&bad), Err(MadError::IpVersion(5)));
    assert_eq!(
        CmaHeader::decode(&want[..35]),
        Err(MadError::Truncated { len: 35 })
    );
}

#[test]
fn service_ids_and_limits() {
    assert_eq!(
        service_id(port_space::TCP, 7471),
        0x0000_0000_0106_1D2F,
        "the PS_TCP example of docs/cm.md#cma-header-and-service-id"
    );
    assert_eq!(service_id(port_space::UDP, 7174), 0x0000_0000_0111_1C06);
    assert_eq!(service_id(port_space::IB, 0xABCD), 0x0000_0000_013F_ABCD);
    assert_eq!(service_id(port_space::IPOIB, 1), 0x0000_0000_0002_0001);
    assert_eq!(
        parse_service_id(0x0000_0000_0106_1D2F),
        Some((0x0106, 7471))
    );
    assert_eq!(parse_service_id(0x0000_0001_0106_1D2F), None);
    assert_eq!(
        (
            limits::CONNECT,
            limits::REP,
            limits::REJ,
            limits::SIDR_CONNECT
        ),
        (56, 196, 148, 180)
    );
    assert_eq!(
        (
            limits::RTU,
            limits::DREQ,
            limits::DREP,
            limits::MRA,
            limits::SIDR_REP
        ),
        (224, 220, 224, 222, 136)
    );
}

#[test]
fn header_checks() {
    let good = CmMad {
        tid: 1,
        attr_mod: 0,
        msg: CmMessage::Drep(Drep {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; 224],
        }),
    }
    .encode();
    let with = |off: usize, v: u8| {
        let mut b = good;
        b[off] = v;
        CmMad::decode(&b)
    };
    assert_eq!(with(0, 2), Err(MadError::BaseVersion(2)));
    assert_eq!(with(1, 0x81), Err(MadError::MgmtClass(0x81)));
    assert_eq!(with(2, 1), Err(MadError::ClassVersion(1)));
    assert_eq!(with(3, 0x81), Err(MadError::Method(0x81)));
    assert_eq!(with(17, 0x19), Err(MadError::Attribute(attr::LAP)));
    assert_eq!(with(17, 0x01), Err(MadError::Attribute(1)));
    assert_eq!(
        CmMad::decode(&good[..255]),
        Err(MadError::Truncated { len: 255 })
    );
    // a longer buffer (a UD receive) decodes from its first 256 bytes
    let mut long = [0u8; 300];
    long[..256].copy_from_slice(&good);
    assert!(CmMad::decode(&long).is_ok());
}

// ------------------------------------------------------------------ properties

fn arr<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    proptest::collection::vec(any::<u8>(), N).prop_map(|v| {
        let mut a = [0u8; N];
        a.copy_from_slice(&v);
        a
    })
}

prop_compose! {
    fn path()(
        local_lid in any::<u16>(), remote_lid in any::<u16>(),
        local_gid in any::<[u8; 16]>(), remote_gid in any::<[u8; 16]>(),
        flow_label in 0u32..1 << 20, packet_rate in 0u8..64,
        traffic_class in any::<u8>(), hop_limit in any::<u8>(),
        sl in 0u8..16, subnet_local in any::<bool>(), local_ack_timeout in 0u8..32,
    ) -> ReqPath {
        ReqPath { local_lid, remote_lid, local_gid, remote_gid, flow_label, packet_rate,
            traffic_class, hop_limit, sl, subnet_local, local_ack_timeout }
    }
}

prop_compose! {
    fn req_fields()(
        ids in any::<(u32, u64, u64, u32)>(),
        qpn in 0u32..1 << 24, rr in any::<u8>(), leecn in 0u32..1 << 24, id in any::<u8>(),
        reecn in 0u32..1 << 24, rcmt in 0u8..32, tst in 0u8..4, fc in any::<bool>(),
        psn in 0u32..1 << 24, lcmt in 0u8..32, retry in 0u8..8, pkey in any::<u16>(),
        mtu in 0u8..16, rdc in any::<bool>(), rnr in 0u8..8, maxr in 0u8..16,
        srq in any::<bool>(), ext in 0u8..8,
    ) -> Req {
        Req {
            local_comm_id: ids.0, service_id: ids.1, local_ca_guid: ids.2, local_qkey: ids.3,
            local_qpn: qpn, responder_resources: rr, local_eecn: leecn, initiator_depth: id,
            remote_eecn: reecn, remote_cm_response_timeout: rcmt, transport_service_type: tst,
            end_to_end_flow_control: fc, starting_psn: psn, local_cm_response_timeout: lcmt,
            retry_count: retry, partition_key: pkey, path_mtu: mtu, rdc_exists: rdc,
            rnr_retry_count: rnr, max_cm_retries: maxr, srq, extended_transport_type: ext,
            ..Req::default()
        }
    }
}

prop_compose! {
    fn req()(r in req_fields(), p in path(), a in path(), sap in any::<bool>(), pd in arr::<92>())
        -> Req {
        Req { primary_path: p, alternate_path: a, sap_supported: sap, private_data: pd, ..r }
    }
}

prop_compose! {
    fn rep()(
        ids in any::<(u32, u32, u32)>(), qpn in 0u32..1 << 24, eecn in 0u32..1 << 24,
        psn in 0u32..1 << 24, rr in any::<u8>(), id in any::<u8>(), tad in 0u8..32,
        fo in 0u8..4, fc in any::<bool>(), rnr in 0u8..8, srq in any::<bool>(),
        guid in any::<u64>(), pd in arr::<196>(),
    ) -> Rep {
        Rep { local_comm_id: ids.0, remote_comm_id: ids.1, local_qkey: ids.2, local_qpn: qpn,
            local_eecn: eecn, starting_psn: psn, responder_resources: rr, initiator_depth: id,
            target_ack_delay: tad, failover_accepted: fo, end_to_end_flow_control: fc,
            rnr_retry_count: rnr, srq, local_ca_guid: guid, private_data: pd }
    }
}

fn message() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        req().prop_map(CmMessage::Req),
        rep().prop_map(CmMessage::Rep),
        (any::<(u32, u32)>(), arr::<224>()).prop_map(|(c, pd)| CmMessage::Rtu(Rtu {
            local_comm_id: c.0,
            remote_comm_id: c.1,
            private_data: pd
        })),
        (
            any::<(u32, u32, u16)>(),
            0u8..4,
            0u8..128,
            arr::<72>(),
            arr::<148>()
        )
            .prop_map(|(c, m, l, ari, pd)| CmMessage::Rej(Rej {
                local_comm_id: c.0,
                remote_comm_id: c.1,
                message_rejected: m,
                reject_info_length: l,
                reason: c.2,
                ari,
                private_data: pd
            })),
        (any::<(u32, u32)>(), 0u8..4, 0u8..32, arr::<222>()).prop_map(|(c, m, t, pd)| {
            CmMessage::Mra(Mra {
                local_comm_id: c.0,
                remote_comm_id: c.1,
                message_mraed: m,
                service_timeout: t,
                private_data: pd,
            })
        }),
        (any::<(u32, u32)>(), 0u32..1 << 24, arr::<220>()).prop_map(|(c, q, pd)| {
            CmMessage::Dreq(Dreq {
                local_comm_id: c.0,
                remote_comm_id: c.1,
                remote_qpn_eecn: q,
                private_data: pd,
            })
        }),
        (any::<(u32, u32)>(), arr::<224>()).prop_map(|(c, pd)| CmMessage::Drep(Drep {
            local_comm_id: c.0,
            remote_comm_id: c.1,
            private_data: pd
        })),
        (any::<(u32, u16, u64)>(), arr::<216>()).prop_map(|(c, pd)| {
            CmMessage::SidrReq(SidrReq {
                request_id: c.0,
                partition_key: c.1,
                service_id: c.2,
                private_data: pd,
            })
        }),
        (
            any::<(u32, u8, u8, u64, u32)>(),
            0u32..1 << 24,
            arr::<72>(),
            arr::<136>()
        )
            .prop_map(|(c, q, info, pd)| CmMessage::SidrRep(SidrRep {
                request_id: c.0,
                status: c.1,
                additional_info_length: c.2,
                qpn: q,
                service_id: c.3,
                qkey: c.4,
                additional_info: info,
                private_data: pd,
            })),
    ]
}

proptest! {
    #[test]
    fn decode_inverts_encode(msg in message(), tid in any::<u64>(), attr_mod in any::<u32>()) {
        let mad = CmMad { tid, attr_mod, msg };
        let bytes = mad.encode();
        prop_assert_eq!(CmMad::decode(&bytes), Ok(mad));
        // the header is the CM's, with the message's attribute
        let h = MadHeader::decode(&bytes).unwrap();
        prop_assert_eq!(h, MadHeader::cm(msg.attr_id(), tid, attr_mod));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::decode(&bytes);
        let _ = MadHeader::decode(&bytes);
        let _ = CmaHeader::decode(&bytes);
    }

    #[test]
    fn garbage_with_a_cm_header_decodes_or_names_the_attribute(
        body in proptest::collection::vec(any::<u8>(), 232), attr_id in 0u16..0x20,
    ) {
        let mut b = [0u8; MAD_SIZE];
        MadHeader::cm(attr_id, 5, 0).encode_into(&mut b);
        b[24..].copy_from_slice(&body);
        match CmMad::decode(&b) {
            Ok(m) => {
                prop_assert_eq!(m.msg.attr_id(), attr_id);
                // re-encoding keeps every byte the message defines
                let again = CmMad::decode(&m.encode()).unwrap();
                prop_assert_eq!(again, m);
            }
            Err(e) => prop_assert_eq!(e, MadError::Attribute(attr_id)),
        }
    }

    #[test]
    fn truncated_input_is_an_error(msg in message(), len in 0usize..256) {
        let bytes = CmMad { tid: 1, attr_mod: 0, msg }.encode();
        prop_assert_eq!(CmMad::decode(&bytes[..len]), Err(MadError::Truncated { len }));
    }

    #[test]
    fn cma_header_round_trip(
        port in any::<u16>(), s in any::<[u8; 4]>(), d in any::<[u8; 4]>(),
        s6 in any::<[u8; 16]>(), d6 in any::<[u8; 16]>(), v6 in any::<bool>(),
    ) {
        let addrs = if v6 {
            CmaAddrs::V6 { src: Ipv6Addr::from(s6), dst: Ipv6Addr::from(d6) }
        } else {
            CmaAddrs::V4 { src: Ipv4Addr::from(s), dst: Ipv4Addr::from(d) }
        };
        let h = CmaHeader { src_port: port, addrs };
        prop_assert_eq!(CmaHeader::decode(&h.encode()), Ok(h));
    }
}
