//! The rules of `rdma_create_ep` / `rdma_create_qp` (`docs/cm.md#endpoint-rules`), one test each,
//! and the errno of the calls' argument and state checks (`docs/cm.md#endpoint-api`), against two
//! emulated NICs.

use std::sync::Arc;

use cm::{ConnParam, Error, EventType, PortSpace, QpInitAttr, getaddrinfo};
use verbs::{AccessFlags, Provider, QpCap, QpState, QpType};

mod cm_support;
use cm_support::*;

fn pdn(id: &Id) -> u32 {
    id.with_verbs(|v| v.pd.unwrap().pdn()).unwrap()
}

#[test]
fn b1_passive_endpoint_keeps_pd_and_attr_for_its_requests() {
    let s = setup(11);
    let pd = s.cm.alloc_pd(s.server.dev).unwrap();
    let user_pdn = s.cm.with_pd(&pd, |_, p| p.pdn()).unwrap();
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&passive_hints())).unwrap();
    let mut a = attr();
    a.qp_type = QpType::Ud; // overwritten in the saved copy by the addrinfo's RC
    let listen = s.cm.create_ep(&res, Some(&pd), Some(&mut a)).unwrap();
    assert_eq!(a.qp_type, QpType::Ud, "the caller's attr is not touched");
    assert_eq!(listen.qp_num(), None, "no QP on a listener");
    listen.listen(8).unwrap();
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    assert!(conn.qp_num().is_some());
    assert_eq!(
        pdn(&conn),
        user_pdn,
        "the request's QP is on the listener's PD"
    );
    let (e, pd) = s.cm.dealloc_pd(pd).unwrap_err();
    assert_eq!(e, Error::Busy);
    drop((conn, client, listen, ch));
    s.cm.dealloc_pd(pd).map_err(|(e, _)| e).unwrap();
    s.teardown();
}

#[test]
fn b2_without_attr_no_qp_is_created() {
    let s = setup(12);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&passive_hints())).unwrap();
    let listen = s.cm.create_ep(&res, None, None).unwrap();
    listen.listen(0).unwrap();
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    assert_eq!(conn.qp_num(), None);
    assert_eq!(conn.accept(None), Err(Error::InvalidArgument));
    let mut a = attr();
    conn.create_qp(None, &mut a).unwrap();
    conn.accept(None).unwrap();
    assert_eq!(ch.get_cm_event().unwrap().event, EventType::Established);
    // the written-back CQs outlive the id; the manager destroys them once they are dropped
    drop((conn, client, listen, ch));
    assert_eq!(s.cm.remove_device(s.server.dev).err(), Some(Error::Busy));
    drop(a);
    s.teardown();
}

#[test]
fn b3_one_default_pd_per_device_shared_and_refcounted() {
    let s = setup(13);
    let base = s.live_settled().0;
    let a = active(&s);
    let b = active(&s);
    assert_eq!(pdn(&a), pdn(&b), "one default PD for both ids");
    assert_eq!(s.client.tb.live().pds, base.pds + 1);
    drop(a);
    assert_eq!(s.client.tb.live().pds, base.pds + 1, "b still holds it");
    drop(b);
    assert_eq!(s.live_settled().0, base, "the last id freed it");
    let c = active(&s);
    assert_eq!(s.client.tb.live().pds, base.pds + 1, "allocated again");
    drop(c);
    s.teardown();
}

#[test]
fn b4_auto_cqs_have_channels_user_cqs_stay_the_users() {
    let s = setup(14);
    let user_cq = Arc::new(
        s.cm.with_provider(s.client.dev, |p| Provider::create_cq(p, 16, 0, None))
            .unwrap()
            .unwrap(),
    );
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let mut a = QpInitAttr {
        send_cq: Some(user_cq.clone()),
        ..attr()
    };
    let id = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    // the caller's attr keeps its handle; the manager holds one more while the QP uses it
    assert_eq!(Arc::strong_count(&user_cq), 3);
    drop(a);
    let (send, send_ch, recv, recv_ch) = id
        .with_verbs(|v| {
            (
                v.send_cq.map(|c| c.cqn()),
                v.send_cq_channel.is_some(),
                v.recv_cq.map(|c| c.cqn()),
                v.recv_cq_channel.is_some(),
            )
        })
        .unwrap();
    assert_eq!(
        (send, send_ch),
        (None, false),
        "the user's CQ is not the id's"
    );
    assert!(
        recv.is_some() && recv_ch,
        "an auto recv CQ with its channel"
    );
    assert_eq!(id.get_send_comp(), Err(Error::InvalidArgument));
    id.destroy_qp().unwrap();
    assert_eq!(Arc::strong_count(&user_cq), 1, "released with the QP");
    assert_eq!(id.destroy_qp(), Err(Error::InvalidArgument), "no QP left");
    // max_recv_wr 0: no recv CQ (the send CQ serves both)
    let mut a = QpInitAttr {
        cap: QpCap {
            max_recv_wr: 0,
            ..attr().cap
        },
        ..attr()
    };
    id.create_qp(None, &mut a).unwrap();
    let (send, recv) = id
        .with_verbs(|v| (v.send_cq.is_some(), v.recv_cq.is_some()))
        .unwrap();
    assert_eq!((send, recv), (true, false));
    drop(id);
    drop(a);
    // destroy_ep left the user's CQ alone (and released it)
    let user_cq = Arc::try_unwrap(user_cq).expect("the manager holds no reference");
    s.cm.with_provider(s.client.dev, |p| {
        Provider::destroy_cq(p, user_cq).map_err(|e| e.error)
    })
    .unwrap()
    .unwrap();
    s.teardown();
}

#[test]
fn b5_actual_caps_and_qp_type_are_written_back() {
    let s = setup(15);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let mut a = attr();
    a.qp_type = QpType::Ud;
    a.cap.max_send_wr = 3;
    a.cap.max_inline_data = 1;
    let id = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    assert_eq!(a.qp_type, QpType::Rc, "from the addrinfo");
    assert!(
        a.cap.max_send_wr >= 3 && a.cap.max_inline_data >= 1,
        "{a:?}"
    );
    assert_eq!(query(&id).cap, a.cap, "what the QP has");
    // the CQs the id made are written back, carrying the id's handle as their context
    let (send, recv) = id
        .with_verbs(|v| (v.send_cq.map(|c| c.cqn()), v.recv_cq.map(|c| c.cqn())))
        .unwrap();
    let (wsend, wrecv) = (a.send_cq.as_ref().unwrap(), a.recv_cq.as_ref().unwrap());
    assert_eq!((Some(wsend.cqn()), Some(wrecv.cqn())), (send, recv));
    for cq in [wsend, wrecv] {
        assert_eq!(cm::IdHandle::from_cq_context(cq.cq_context()), id.handle());
    }
    drop(id);
    drop(a);
    s.teardown();
}

#[test]
fn b6_one_qp_per_id_and_the_id_must_be_bound() {
    let s = setup(16);
    let id = active(&s);
    let mut a = attr();
    assert_eq!(
        id.create_qp(None, &mut a),
        Err(Error::InvalidArgument),
        "second QP"
    );
    // a PD of the other device
    let other = s.cm.alloc_pd(s.server.dev).unwrap();
    id.destroy_qp().unwrap();
    assert_eq!(
        id.create_qp(Some(&other), &mut a),
        Err(Error::InvalidArgument)
    );
    // a UD QP on an RC id
    let mut ud = QpInitAttr {
        qp_type: QpType::Ud,
        ..attr()
    };
    assert_eq!(id.create_qp(None, &mut ud), Err(Error::InvalidArgument));
    id.create_qp(None, &mut a)
        .expect("a new QP after destroy_qp");
    // unbound: with and without a PD
    let unbound = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(unbound.create_qp(None, &mut a), Err(Error::InvalidArgument));
    assert_eq!(
        unbound.create_qp(Some(&other), &mut a),
        Err(Error::InvalidArgument)
    );
    // bound to the wildcard: still no device
    unbound.bind_addr(&"0.0.0.0:0".parse().unwrap()).unwrap();
    assert_eq!(unbound.device(), None);
    assert_eq!(unbound.create_qp(None, &mut a), Err(Error::InvalidArgument));
    // a listener bound to a device
    let l = listener(&s);
    assert_eq!(l.create_qp(None, &mut a), Err(Error::InvalidArgument));
    s.cm.dealloc_pd(other).map_err(|(e, _)| e).unwrap();
    drop((id, unbound, l, a));
    s.teardown();
}

#[test]
fn b7_qp_transitions_through_the_connection() {
    let s = setup(17);
    let client = active(&s);
    let q = query(&client);
    assert_eq!(q.qp_state, QpState::Init);
    assert_eq!(q.qp_access_flags, AccessFlags::empty(), "no CM access yet");
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client
        .connect(Some(&ConnParam {
            responder_resources: 4,
            initiator_depth: 2,
            retry_count: 5,
            rnr_retry_count: 3,
            ..ConnParam::default()
        }))
        .unwrap();
    let conn = listen.get_request().unwrap();
    let q = query(&conn);
    assert_eq!(q.qp_state, QpState::Init);
    assert_eq!(
        q.qp_access_flags,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        "the requester will issue reads: the responder allows them"
    );
    let Some(cm::EventParam::Conn(req)) = conn.event().map(|e| e.param) else {
        panic!("request parameters");
    };
    // seen from the passive side: swapped
    assert_eq!((req.responder_resources, req.initiator_depth), (2, 4));
    assert_eq!((req.retry_count, req.rnr_retry_count), (5, 3));
    conn.accept(None).unwrap();
    assert_eq!(ch.get_cm_event().unwrap().event, EventType::Established);
    let (c, v) = (query(&client), query(&conn));
    assert_eq!((c.qp_state, v.qp_state), (QpState::Rts, QpState::Rts));
    // rd-atomic and retry invariants
    assert_eq!((c.max_rd_atomic, v.max_dest_rd_atomic), (2, 2));
    assert_eq!((v.max_rd_atomic, c.max_dest_rd_atomic), (4, 4));
    assert_eq!(
        v.retry_cnt, 5,
        "the REQ's retry count configures the passive QP"
    );
    assert_eq!(c.retry_cnt, 5);
    assert_eq!(
        v.rnr_retry, 3,
        "the REQ's RNR retry count is the passive QP's"
    );
    assert_eq!(c.rnr_retry, 7, "accept(NULL) asks for 7");
    assert_eq!((c.path_mtu, v.path_mtu), (v.path_mtu, c.path_mtu));
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    assert_eq!(ch.get_cm_event().unwrap().event, EventType::Disconnected);
    assert_eq!(
        (query(&client).qp_state, query(&conn).qp_state),
        (QpState::Err, QpState::Err)
    );
    drop((conn, client, listen, ch));
    s.teardown();
}

/// A passive side may accept with more responder resources than the REQ's initiator depth
/// (Linux's rdma_accept passes the application's figure through: perftest's 128 outstanding
/// READs on rxe): the requester's QP keeps the depth it asked for.
#[test]
fn b8_rep_responder_resources_above_the_requested_depth() {
    let s = setup(61);
    let client = active(&s);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client
        .connect(Some(&ConnParam {
            responder_resources: 4,
            initiator_depth: 2,
            ..ConnParam::default()
        }))
        .unwrap();
    let conn = listen.get_request().unwrap();
    conn.accept(Some(&ConnParam {
        responder_resources: 8,
        initiator_depth: 4,
        ..ConnParam::default()
    }))
    .unwrap();
    assert_eq!(ch.get_cm_event().unwrap().event, EventType::Established);
    let (c, v) = (query(&client), query(&conn));
    assert_eq!((c.qp_state, v.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(c.max_rd_atomic, 2, "the requester's own initiator depth");
    assert_eq!(c.max_dest_rd_atomic, 4);
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    assert_eq!(ch.get_cm_event().unwrap().event, EventType::Disconnected);
    drop((conn, client, listen, ch));
    s.teardown();
}

#[test]
fn b9_migrate_rules() {
    let s = setup(18);
    let l = listener(&s);
    assert_eq!(
        l.migrate_id(None),
        Err(Error::InvalidArgument),
        "already synchronous"
    );
    let ch = s.cm.create_event_channel().unwrap();
    l.migrate_id(Some(&ch)).unwrap();
    assert_eq!(l.get_request().unwrap_err(), Error::InvalidArgument);
    l.migrate_id(None).unwrap();
    assert!(l.is_sync());
    drop((l, ch));
    s.teardown();
}

#[test]
fn bind_listen_resolve_and_state_errnos() {
    let s = setup(19);
    let cm = &s.cm;
    assert_eq!(
        cm.create_id(None, 0, PortSpace(0)).unwrap_err(),
        Error::InvalidArgument
    );
    let a = cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(
        a.bind_addr(&"[::1]:1".parse().unwrap()),
        Err(Error::AfNotSupported)
    );
    assert_eq!(
        a.bind_addr(&"10.9.9.9:1".parse().unwrap()),
        Err(Error::AddrNotAvailable)
    );
    let at = format!("{SERVER}:{PORT}").parse().unwrap();
    a.bind_addr(&at).unwrap();
    assert_eq!(
        a.device(),
        Some(s.server.dev),
        "a device address binds the device"
    );
    assert_eq!(a.bind_addr(&at), Err(Error::InvalidArgument), "bind twice");
    let b = cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(b.bind_addr(&at), Err(Error::AddrInUse));
    let wild = format!("0.0.0.0:{PORT}").parse().unwrap();
    assert_eq!(b.bind_addr(&wild), Err(Error::AddrNotAvailable));
    // another port space is another port
    let u = cm.create_id(None, 0, PortSpace::UDP).unwrap();
    u.bind_addr(&at).unwrap();
    a.listen(0).unwrap();
    assert_eq!(a.listen(0), Err(Error::InvalidArgument), "listen twice");
    // listen on an idle id binds the wildcard and an ephemeral port
    b.listen(5).unwrap();
    let p = b.src_addr().unwrap();
    assert!(p.ip().is_unspecified() && p.port() >= 32768, "{p}");
    // route before address, zero timeout
    let c = cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(c.resolve_route(2000), Err(Error::InvalidArgument));
    assert_eq!(c.disconnect(), Err(Error::InvalidArgument), "never bound");
    c.resolve_addr(None, &at, 2000).unwrap();
    assert_eq!(c.resolve_route(0), Err(Error::InvalidArgument));
    assert_eq!(
        c.disconnect(),
        Err(Error::InvalidArgument),
        "never connected"
    );
    assert_eq!(
        c.resolve_addr(None, &at, 2000),
        Err(Error::InvalidArgument),
        "resolved already"
    );
    c.resolve_route(2000).unwrap();
    let long = [0u8; 57];
    let param = ConnParam {
        private_data: &long,
        ..ConnParam::default()
    };
    assert_eq!(
        c.connect(Some(&param)),
        Err(Error::InvalidArgument),
        "56 bytes at most"
    );
    let big = ConnParam {
        responder_resources: 17,
        ..ConnParam::default()
    };
    assert_eq!(
        c.connect(Some(&big)),
        Err(Error::InvalidArgument),
        "above the device max"
    );
    assert_eq!(c.accept(None), Err(Error::InvalidArgument), "not a request");
    assert_eq!(c.reject(&[]), Err(Error::InvalidArgument), "not a request");
    drop((a, b, c, u));
    s.teardown();
}

#[test]
fn accept_with_too_much_private_data_rejects_the_peer() {
    let s = setup(20);
    let listen = listener(&s);
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    let pd = [1u8; 197];
    let param = ConnParam {
        private_data: &pd,
        responder_resources: 0xFF,
        initiator_depth: 0xFF,
        ..ConnParam::default()
    };
    assert_eq!(conn.accept(Some(&param)), Err(Error::InvalidArgument));
    assert_eq!(query(&conn).qp_state, QpState::Err);
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    drop((ev, conn, client, listen, ch));
    s.teardown();
}

#[test]
fn a_requester_that_gives_up_kills_its_request_silently() {
    let s = setup(21);
    let listen = listener(&s);
    let client = active(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    // destroyed with its REQ outstanding: REJ reason 4 follows the REQ
    drop(client);
    let conn = listen.get_request().unwrap();
    assert_eq!(conn.accept(None), Err(Error::InvalidArgument));
    drop((conn, listen, ch));
    s.teardown();
}

#[test]
fn b2_active_without_qp_names_its_qp_and_establishes() {
    let s = setup(22);
    let listen = listener(&s);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let client = s.cm.create_ep(&res, None, None).unwrap();
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    assert_eq!(
        client.establish(),
        Err(Error::InvalidArgument),
        "no REP yet"
    );
    client
        .connect(Some(&ConnParam {
            qp_num: 0x1234,
            ..ConnParam::default()
        }))
        .unwrap();
    let conn = listen.get_request().unwrap();
    let Some(cm::EventParam::Conn(req)) = conn.event().map(|e| e.param) else {
        panic!("request parameters");
    };
    assert_eq!(req.qp_num, 0x1234, "the QP the application named");
    // the server answers asynchronously: it cannot wait for an RTU this thread sends later
    let sch = s.cm.create_event_channel().unwrap();
    conn.migrate_id(Some(&sch)).unwrap();
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(
        ev.event,
        EventType::ConnectResponse,
        "no QP: the app establishes"
    );
    let cm::EventParam::Conn(rep) = &ev.param else {
        panic!("REP parameters")
    };
    assert_eq!(Some(rep.qp_num), conn.qp_num());
    client.establish().unwrap();
    assert_eq!(client.establish(), Err(Error::InvalidArgument), "once");
    let ev = sch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    drop((ev, conn, client, listen, ch, sch));
    s.teardown();
}
