//! The connection manager (`cm`) over the mlx5 driver and two emulated NICs of one world,
//! in one thread: librdmacm's rdma_server / rdma_client flow, rejects, disconnects, lost and
//! unanswered requests, and leak checks.

use std::net::Ipv4Addr;

use cm::{ConnParam, Error, EventType, Neighbor, getaddrinfo};
use nic_emulator::Profile;
use verbs::{QpType, SendFlags, WcOpcode, WcStatus};

mod cm_support;
use cm_support::*;

#[test]
fn server_and_client_in_one_thread() {
    let s = setup(1);
    let baseline = s.live_settled();
    let listen = listener(&s);
    let client = active(&s);
    // the client goes asynchronous so that its connect returns while the server is not
    // accepting yet; this thread then plays the server
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    assert!(!client.is_sync());
    let cbuf = buf(&client, 4096);
    client
        .post_recv(1, cbuf.addr() + 2048, 16, &cbuf.mr)
        .unwrap();
    client
        .connect(Some(&ConnParam {
            private_data: b"hello server",
            responder_resources: 0xFF,
            initiator_depth: 0xFF,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }))
        .unwrap();

    let conn = listen.get_request().expect("get_request");
    assert!(conn.is_sync());
    assert_eq!(conn.device(), Some(s.server.dev));
    let req = conn.event().expect("the request event stays on the new id");
    assert_eq!(req.event, EventType::ConnectRequest);
    let pd = req.param.private_data();
    assert_eq!(pd.len(), 56, "the REQ buffer minus the rdma_cm header");
    assert_eq!(&pd[..12], b"hello server");
    assert!(pd[12..].iter().all(|&b| b == 0));
    assert_eq!(
        conn.src_addr(),
        Some(format!("{SERVER}:{PORT}").parse().unwrap())
    );
    assert_eq!(
        conn.dst_addr().map(|a| a.port()),
        client.src_addr().map(|a| a.port())
    );
    assert!(
        conn.qp_num().is_some(),
        "a QP from the listener's saved attributes"
    );

    let sbuf = buf(&conn, 4096);
    conn.post_recv(7, sbuf.addr(), 16, &sbuf.mr).unwrap();
    conn.accept(None).expect("accept");

    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    assert_eq!(ev.id, client.handle());
    assert_eq!(ev.param.private_data().len(), 196);
    cm::ack_cm_event(ev);

    // a 16-byte message and an answer
    let msg = *b"0123456789abcdef";
    cbuf.mem.write(0, &msg).unwrap();
    client
        .post_send(2, cbuf.addr(), 16, &cbuf.mr, SendFlags::SIGNALED)
        .unwrap();
    let wc = client.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::Success, WcOpcode::Send)
    );
    let wc = conn.get_recv_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 16)
    );
    let mut got = [0u8; 16];
    sbuf.mem.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
    conn.post_send_inline(8, b"fedcba9876543210", SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(conn.get_send_comp().unwrap().status, WcStatus::Success);
    let wc = client.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (1, 16));
    cbuf.mem.read(2048, &mut got).unwrap();
    assert_eq!(&got, b"fedcba9876543210");

    // the PSNs the exchange set up: each side sends what the other expects
    let psns = |id: &Id| {
        id.with_verbs(|v| {
            let a = verbs::Provider::query_qp(v.provider, v.qp.unwrap()).unwrap();
            (a.sq_psn, a.rq_psn, a.dest_qp_num, a.qp_state)
        })
        .unwrap()
    };
    let (csq, crq, cdest, cstate) = psns(&client);
    let (ssq, srq, sdest, sstate) = psns(&conn);
    assert_eq!(
        (csq, ssq),
        (srq, crq),
        "sq_psn of one side = rq_psn of the other"
    );
    assert_eq!(
        (cdest, sdest),
        (conn.qp_num().unwrap(), client.qp_num().unwrap())
    );
    assert_eq!((cstate, sstate), (verbs::QpState::Rts, verbs::QpState::Rts));

    // disconnect: receives still posted on both sides are flushed
    client
        .post_recv(3, cbuf.addr() + 1024, 16, &cbuf.mr)
        .unwrap();
    conn.post_recv(9, sbuf.addr() + 1024, 16, &sbuf.mr).unwrap();
    client.disconnect().unwrap();
    conn.disconnect()
        .expect("server disconnect: the DREQ is already there");
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Disconnected, 0));
    let wc = client.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::WrFlushErr));
    let wc = conn.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));

    cbuf.free(&client);
    sbuf.free(&conn);
    client.destroy_ep();
    conn.destroy_ep();
    listen.destroy_ep();
    ch.destroy();
    // the default PDs, QPs, CQs and MRs are gone: the NICs are as the CM found them
    assert_eq!(s.live_settled(), baseline);
    let st = s.cm.stats();
    assert_eq!(
        (st.bad_mads, st.send_failures, st.retransmits),
        (0, 0, 0),
        "{st:?}"
    );
    let _ = &s.world;
    s.teardown();
}

#[test]
fn no_listener_is_rejected_with_reason_8() {
    let s = setup(2);
    let res = getaddrinfo(Some(SERVER), Some("4000"), Some(&client_hints())).unwrap();
    let mut a = attr();
    let id = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    let e = id.connect(None).unwrap_err();
    assert_eq!((e, e.errno()), (Error::ConnectionRefused, 111));
    let ev = id.event().expect("the REJECTED event");
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
    // the QP went to ERR
    let st = id
        .with_verbs(|v| {
            verbs::Provider::query_qp(v.provider, v.qp.unwrap())
                .unwrap()
                .qp_state
        })
        .unwrap();
    assert_eq!(st, verbs::QpState::Err);
    id.destroy_ep();
    drop(a);
    s.teardown();
}

#[test]
fn reject_with_private_data_reaches_the_peer() {
    let s = setup(3);
    let listen = listener(&s);
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    assert_eq!(
        conn.reject(&[0u8; 149]),
        Err(Error::InvalidArgument),
        "148 bytes at most"
    );
    conn.reject(b"go away").unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    let pd = ev.param.private_data();
    assert_eq!(pd.len(), 148);
    assert_eq!(&pd[..7], b"go away");
    // accept after reject: the request is gone
    assert_eq!(conn.accept(None), Err(Error::InvalidArgument));
    drop(ev);
    conn.destroy_ep();
    client.destroy_ep();
    listen.destroy_ep();
    ch.destroy();
    s.teardown();
}

#[test]
fn an_asynchronous_listener_reports_requests_on_its_channel() {
    let s = setup(4);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    listen.migrate_id(Some(&ch)).unwrap();
    assert_eq!(listen.get_request().unwrap_err(), Error::InvalidArgument);
    let client = active(&s);
    let cch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&cch)).unwrap();
    client.connect(None).unwrap();
    let mut ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::ConnectRequest);
    assert_eq!(ev.listen_id, Some(listen.handle()));
    let conn = ev.take_id().unwrap();
    assert_eq!(ev.id, conn.handle());
    conn.reject(b"no").unwrap();
    let ev = cch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    drop((conn, client, listen, ch, cch));
    s.teardown();
}

#[test]
fn lost_req_is_retried() {
    let s = setup(5);
    let listen = listener(&s);
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    let (c, sv): (Ipv4Addr, Ipv4Addr) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    s.world.fabric().cut_path(c, sv);
    client.connect(None).unwrap();
    // let the first REQ die on the cut path
    let t0 = s.world.now_ns();
    while s.world.now_ns() - t0 < 1_000_000_000 {
        s.cm.progress();
        s.world.relax();
    }
    s.world.fabric().heal_path(c, sv);
    let conn = listen.get_request().unwrap();
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Established);
    assert!(s.cm.stats().retransmits >= 1);
    drop(ev);
    drop((conn, client, listen, ch));
    // the DREQ of the destroyed connection is answered
    s.teardown();
}

#[test]
fn a_peer_that_never_answers_times_out() {
    let s = setup(6);
    // a NIC in the world whose connection manager never runs: its MAD QP does not exist
    let dead: Ipv4Addr = "127.0.0.3".parse().unwrap();
    let _tb = s.world.nic(dead, Profile::default());
    s.cm.add_neighbor(
        dead,
        Neighbor {
            mac: [2, 0, 0, 0, 0, 3],
        },
    );
    let res = getaddrinfo(Some("127.0.0.3"), Some(PORT), Some(&client_hints())).unwrap();
    let id = s.cm.create_ep(&res, None, Some(&mut attr())).unwrap();
    let t0 = s.world.now_ns();
    assert_eq!(id.connect(None), Err(Error::TimedOut));
    let ev = id.event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, -110));
    let waited = s.world.now_ns() - t0;
    // 16 tries of 4.096 µs × 2^20 + 2 × 4.096 µs × 2^16
    assert!(
        waited > 70_000_000_000 && waited < 80_000_000_000,
        "{waited}"
    );
    assert_eq!(s.cm.stats().retransmits, 15);
    id.destroy_ep();
    s.teardown();
}

#[test]
fn unknown_neighbor_is_an_address_timeout() {
    let s = setup(7);
    let res = getaddrinfo(Some("127.0.0.9"), Some(PORT), Some(&client_hints())).unwrap();
    let t0 = s.world.now_ns();
    assert_eq!(
        s.cm.create_ep(&res, None, Some(&mut attr())).unwrap_err(),
        Error::TimedOut
    );
    assert!(
        s.world.now_ns() - t0 >= 2_000_000_000,
        "create_ep waits 2000 ms"
    );
    s.teardown();
}

#[test]
fn qp_type_and_port_space_follow_the_addrinfo() {
    let s = setup(8);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    assert_eq!(res.ai_qp_type, Some(QpType::Rc));
    let id = s.cm.create_ep(&res, None, None).unwrap();
    assert_eq!(id.qp_num(), None, "no attr, no QP");
    // connect without a QP and without parameters: EINVAL (PS_TCP)
    assert_eq!(id.connect(None), Err(Error::InvalidArgument));
    id.destroy_ep();
    s.teardown();
}
