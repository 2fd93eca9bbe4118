//! A hostile (or broken) peer cannot stop the connection manager: a datagram to QP1 longer
//! than its receive buffers is dropped by the device (the QP stays in RTS), and a QP1 that
//! goes to the error state whatever the cause is reset and re-posted by the progress engine,
//! while connections keep being made.

use cm::EventType;
use verbs::{
    AccessFlags, AhAttr, Gid, MemoryRegion, Provider, QpAttr, QpAttrMask as M, QpCap, QpInitAttr,
    QpState, QpType, SendFlags, SendWr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};

mod cm_support;
use cm_support::*;

/// `qpc.state` RTS.
const RTS: u8 = 3;
/// The GSI Q_Key (a UD QP given it as its own Q_Key sends it with a controlled-Q_Key WR).
const GSI_QKEY: u32 = 0x8001_0000;

/// One connection through the listener, then both ends torn down.
fn one_connection(s: &Setup) {
    let (listen, client, conn, ch) = connect_pair(s, None);
    client.disconnect().unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Disconnected, "{ev:?}");
    conn.disconnect().ok();
    client.destroy_ep();
    conn.destroy_ep();
    listen.destroy_ep();
    drop(ch);
}

#[test]
fn an_oversized_datagram_to_qp1_is_dropped_and_connects_still_work() {
    let s = setup(47);
    // A third node with a UD QP of its own that speaks the GSI Q_Key.
    let htb = s
        .world
        .nic("127.0.0.3".parse().unwrap(), Default::default());
    let (hdev, _) = probe(&htb);
    let server_mac = s.cm.device(s.server.dev).unwrap().mac;
    let pd = Provider::alloc_pd(&hdev).unwrap();
    let cq = Provider::create_cq(&hdev, 8, 0, None).unwrap();
    let (mut qp, _) = Provider::create_qp(
        &hdev,
        &pd,
        &QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qkey: GSI_QKEY,
        ..QpAttr::default()
    };
    Provider::modify_qp(
        &hdev,
        &mut qp,
        &a,
        M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    Provider::modify_qp(&hdev, &mut qp, &a, M::STATE).unwrap();
    a.qp_state = QpState::Rts;
    Provider::modify_qp(&hdev, &mut qp, &a, M::STATE | M::SQ_PSN).unwrap();
    let mem = Provider::alloc_buf(&hdev, 4096).unwrap();
    mem.fill(0, 1024, 0xA5).unwrap();
    let mr = Provider::reg_mr(&hdev, &pd, mem, AccessFlags::LOCAL_WRITE).unwrap();
    let ah = Provider::create_ah(
        &hdev,
        &pd,
        &AhAttr {
            dgid: Gid::from_ipv4(SERVER.parse::<std::net::Ipv4Addr>().unwrap().octets()),
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: server_mac,
            ..AhAttr::default()
        },
    )
    .unwrap();

    let before = s.server.tb.device().port_stats();
    // 1000 bytes: far more than the 256-byte MAD (plus the 40-byte GRH area) a peer may send
    let sge = [Sge {
        addr: mr.addr(),
        length: 1000,
        lkey: mr.lkey(),
    }];
    Provider::post_send(
        &hdev,
        &mut qp,
        &[SendWr {
            wr_id: 1,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            dest: Some(UdDest {
                ah: &ah,
                remote_qpn: 1,
                remote_qkey: GSI_QKEY,
            }),
            ..SendWr::default()
        }],
    )
    .unwrap();
    let mut wc = [WorkCompletion::default()];
    while Provider::poll_cq(&hdev, &cq, &mut wc).unwrap() == 0 {
        s.world.relax();
    }
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    for _ in 0..100 {
        s.world.relax();
    }
    let after = s.server.tb.device().port_stats();
    assert_eq!(after.rx_too_long, before.rx_too_long + 1, "{after:?}");
    assert_eq!(s.server.tb.device().qp_state(1), Some(RTS));

    // the manager still answers: a connection is set up
    one_connection(&s);
    assert_eq!(s.cm.stats().transport_resets, 0);

    Provider::destroy_ah(&hdev, ah).unwrap();
    Provider::destroy_qp(&hdev, qp).unwrap();
    Provider::dereg_mr(&hdev, mr).unwrap();
    Provider::destroy_cq(&hdev, cq).unwrap();
    Provider::dealloc_pd(&hdev, pd).unwrap();
    hdev.shutdown().unwrap();
    s.teardown();
}

#[test]
fn a_qp1_in_error_is_reset_and_connects_still_work() {
    let s = setup(53);
    // QP1 of the server goes to ERR (as a device-detected error would put it)
    assert!(s.server.tb.device().fail_qp(1));
    // the next pass of the engine sees the flushed receives and resets QP1
    s.cm.progress();
    assert_eq!(s.server.tb.device().qp_state(1), Some(RTS));
    assert_eq!(s.cm.stats().transport_resets, 1);
    one_connection(&s);
    // and again on the client side, this time with the engine driven by the blocking calls
    assert!(s.client.tb.device().fail_qp(1));
    one_connection(&s);
    assert_eq!(s.cm.stats().transport_resets, 2);
    assert_eq!(s.cm.stats().transport_reset_failures, 0);
    s.teardown();
}
