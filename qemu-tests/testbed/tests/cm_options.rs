//! `rdma_set_option` (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH), the IB CM timewait with
//! TIMEWAIT_EXIT and stale-connection rejects, `rdma_establish` and `rdma_init_qp_attr`
//! (`docs/cm.md#options`, `docs/cm.md#event-types`, `docs/cm.md#rej-reasons`), against two emulated
//! NICs under one manager.

use std::net::SocketAddr;

use cm::{
    ConnParam, Error, EventChannel, EventType, OPTION_IB, OPTION_IB_PATH, OPTION_ID,
    OPTION_ID_ACK_TIMEOUT, OPTION_ID_AFONLY, OPTION_ID_REUSEADDR, OPTION_ID_TOS, PortSpace,
};
use nic_testbed::EmuDevice;

mod cm_support;
use cm_support::*;

fn int(v: i32) -> [u8; 4] {
    v.to_ne_bytes()
}

fn server_addr() -> SocketAddr {
    format!("{SERVER}:{PORT}").parse().unwrap()
}

/// The next event of `ch`, which must be `ty` with status 0.
fn expect(ch: &EventChannel<EmuDevice>, ty: EventType) {
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (ty, 0), "{ev:?}");
}

/// An asynchronous client id on `ch`: `before` runs on the idle id, the address is
/// resolved, `route` resolves the route (None: `resolve_route`), then a QP is created.
fn client_on(
    s: &Setup,
    ch: &EventChannel<EmuDevice>,
    before: impl FnOnce(&Id),
    route: Option<&dyn Fn(&Id)>,
) -> Id {
    let id = s.cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    before(&id);
    let src: SocketAddr = format!("{CLIENT}:0").parse().unwrap();
    id.resolve_addr(Some(&src), &server_addr(), 2000).unwrap();
    expect(ch, EventType::AddrResolved);
    match route {
        Some(f) => f(&id),
        None => id.resolve_route(2000).unwrap(),
    }
    expect(ch, EventType::RouteResolved);
    id.create_qp(None, &mut attr()).unwrap();
    id
}

/// Connects `client` (asynchronous, on `ch`) to the synchronous `listen`; `on_req` runs on
/// the request id before it is accepted.
fn connect_to(
    listen: &Id,
    client: &Id,
    ch: &EventChannel<EmuDevice>,
    on_req: impl FnOnce(&Id),
) -> Id {
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    on_req(&conn);
    conn.accept(None).unwrap();
    expect(ch, EventType::Established);
    conn
}

#[test]
fn unknown_levels_and_names_are_enosys() {
    let s = setup(301);
    let id = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    for (level, name) in [
        (7, 0),
        (-1, 0),
        (OPTION_ID, 4),
        (OPTION_ID, -1),
        (OPTION_IB, 0),
        (OPTION_IB, 2),
    ] {
        let e = id.set_option(level, name, &[0; 4]).unwrap_err();
        assert_eq!(
            (e, e.errno()),
            (Error::NotImplemented, 38),
            "level {level} name {name}"
        );
    }
    assert_eq!(id.options(), cm::IdOptions::default(), "nothing stored");
    drop(id);
    s.teardown();
}

#[test]
fn tos_is_the_traffic_class_of_the_req_path_and_both_qps() {
    let s = setup(302);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    let client = client_on(
        &s,
        &ch,
        |id| {
            assert_eq!(
                id.set_option(OPTION_ID, OPTION_ID_TOS, &[]),
                Err(Error::InvalidArgument)
            );
            assert_eq!(
                id.set_option(OPTION_ID, OPTION_ID_TOS, &int(0x68)),
                Err(Error::InvalidArgument),
                "an int is not a u8"
            );
            assert_eq!(id.options().tos, None);
            id.set_option(OPTION_ID, OPTION_ID_TOS, &[0x68]).unwrap();
            assert_eq!(id.options().tos, Some(0x68));
        },
        None,
    );
    let conn = connect_to(&listen, &client, &ch, |_| {});
    assert_eq!(
        query(&client).ah_attr.traffic_class,
        0x68,
        "the active QP's AV"
    );
    // the passive QP's AV is made from the REQ's primary path
    assert_eq!(
        query(&conn).ah_attr.traffic_class,
        0x68,
        "carried in the REQ"
    );
    // accepted in any state (the kernel's rdma_set_service_type), no effect on this route
    client
        .set_option(OPTION_ID, OPTION_ID_TOS, &[0x10])
        .unwrap();
    assert_eq!(query(&client).ah_attr.traffic_class, 0x68);

    // without the option: class 0
    let c2 = client_on(&s, &ch, |_| {}, None);
    let conn2 = connect_to(&listen, &c2, &ch, |_| {});
    assert_eq!(query(&c2).ah_attr.traffic_class, 0);
    assert_eq!(query(&conn2).ah_attr.traffic_class, 0);
    drop((conn, client, conn2, c2, listen, ch));
    s.teardown();
}

#[test]
fn ack_timeout_replaces_the_rts_timeout_on_both_sides() {
    let s = setup(303);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    // defaults: packet life time 16 + 1
    let c0 = client_on(&s, &ch, |_| {}, None);
    let k0 = connect_to(&listen, &c0, &ch, |_| {});
    assert_eq!((query(&c0).timeout, query(&k0).timeout), (17, 17));

    let client = client_on(
        &s,
        &ch,
        |id| {
            assert_eq!(
                id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[32]),
                Err(Error::InvalidArgument)
            );
            assert_eq!(
                id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[1, 2]),
                Err(Error::InvalidArgument)
            );
            id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[20])
                .unwrap();
        },
        None,
    );
    // set before the route: the REQ's local ACK timeout is 20 too, which the passive QP takes
    let conn = connect_to(&listen, &client, &ch, |_| {});
    assert_eq!((query(&client).timeout, query(&conn).timeout), (20, 20));

    // on the passive side, set on the request id before accept
    let c2 = client_on(&s, &ch, |_| {}, None);
    let conn2 = connect_to(&listen, &c2, &ch, |id| {
        id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[9])
            .unwrap();
        assert_eq!(id.options().ack_timeout, Some(9));
    });
    assert_eq!((query(&c2).timeout, query(&conn2).timeout), (17, 9));

    // a UD id has no ACK timeout
    let ud = s.cm.create_id(None, 0, PortSpace::UDP).unwrap();
    assert_eq!(
        ud.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[14]),
        Err(Error::InvalidArgument)
    );
    drop((c0, k0, conn, client, conn2, c2, listen, ch, ud));
    s.teardown();
}

#[test]
fn reuseaddr_shares_a_port_but_not_for_listening() {
    let s = setup(304);
    let addr: SocketAddr = format!("{CLIENT}:5000").parse().unwrap();
    let a = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    let b = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    a.bind_addr(&addr).unwrap();
    // default off: as before
    assert_eq!(b.bind_addr(&addr), Err(Error::AddrInUse));
    assert_eq!(
        b.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &[1]),
        Err(Error::InvalidArgument),
        "an int"
    );
    b.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1))
        .unwrap();
    assert_eq!(
        b.bind_addr(&addr),
        Err(Error::AddrInUse),
        "both ids must set it"
    );
    // on is allowed on a bound id, off only on an idle one
    a.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1))
        .unwrap();
    b.bind_addr(&addr).unwrap();
    assert_eq!(b.src_addr(), Some(addr));
    assert_eq!(
        a.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(0)),
        Err(Error::InvalidArgument)
    );
    // a shared port cannot be listened on (`cma_bind_listen` checks without reuse)
    assert_eq!(b.listen(0), Err(Error::AddrInUse));
    drop(a);
    b.listen(0).unwrap();
    assert_eq!(
        b.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1)),
        Err(Error::InvalidArgument),
        "not on a listener"
    );
    let c = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    c.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1))
        .unwrap();
    c.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(0))
        .unwrap();
    assert!(!c.options().reuseaddr, "cleared while idle");
    assert_eq!(c.bind_addr(&addr), Err(Error::AddrInUse));
    drop((b, c));
    s.teardown();
}

#[test]
fn reuseaddr_binds_the_port_of_an_id_in_timewait() {
    let s = setup(305);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    let port: SocketAddr = format!("{CLIENT}:6000").parse().unwrap();
    let bind = |id: &Id| {
        id.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1))
            .unwrap();
        id.bind_addr(&port).unwrap();
    };
    let client = client_on(&s, &ch, bind, None);
    let conn = connect_to(&listen, &client, &ch, |_| {});
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    expect(&ch, EventType::Disconnected);
    assert!(client.in_timewait());
    // the old id still holds the port: without the option, EADDRINUSE
    let plain = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(plain.bind_addr(&port), Err(Error::AddrInUse));
    let again = s.cm.create_id(Some(&ch), 0, PortSpace::TCP).unwrap();
    bind(&again);
    assert_eq!(again.src_addr(), Some(port));
    drop((again, plain, conn, client, listen, ch));
    s.teardown();
}

#[test]
fn afonly_is_stored_while_idle_or_bound() {
    let s = setup(306);
    let id = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    assert_eq!(
        id.set_option(OPTION_ID, OPTION_ID_AFONLY, &[1]),
        Err(Error::InvalidArgument)
    );
    id.set_option(OPTION_ID, OPTION_ID_AFONLY, &int(1)).unwrap();
    assert!(id.options().afonly);
    id.bind_addr(&server_addr()).unwrap();
    id.set_option(OPTION_ID, OPTION_ID_AFONLY, &int(0)).unwrap();
    assert!(!id.options().afonly);
    id.listen(0).unwrap();
    assert_eq!(
        id.set_option(OPTION_ID, OPTION_ID_AFONLY, &int(1)),
        Err(Error::InvalidArgument)
    );
    assert!(!id.options().afonly);
    drop(id);
    s.teardown();
}

/// An `ibv_path_data` with `flags`, traffic class `tclass`, MTU code `mtu`, packet life
/// time `plt`, hop limit 32, flow label 0x12345.
fn path_data(flags: u32, tclass: u8, mtu: u8, plt: u8) -> [u8; 72] {
    let mut d = [0u8; 72];
    d[..4].copy_from_slice(&flags.to_ne_bytes());
    let r = &mut d[8..];
    r[44..48].copy_from_slice(&((0x12345u32 << 8) | 32).to_be_bytes());
    r[48] = tclass;
    r[54] = 0x80 | mtu;
    r[56] = 0x80 | plt;
    d
}

#[test]
fn ib_path_sets_the_route_from_a_record() {
    let s = setup(307);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    const OK: u32 = cm::PATH_FLAGS_GMP_PRIMARY_BIDIR;
    let idle = s.cm.create_id(Some(&ch), 0, PortSpace::TCP).unwrap();
    assert_eq!(
        idle.set_option(OPTION_IB, OPTION_IB_PATH, &path_data(OK, 0, 3, 16)),
        Err(Error::InvalidArgument),
        "address not resolved"
    );
    let with_path = |id: &Id| {
        let good = path_data(OK, 0x20, 3, 18);
        assert_eq!(
            id.set_option(OPTION_IB, OPTION_IB_PATH, &good[..71]),
            Err(Error::InvalidArgument)
        );
        assert_eq!(
            id.set_option(OPTION_IB, OPTION_IB_PATH, &[]),
            Err(Error::InvalidArgument)
        );
        assert_eq!(
            id.set_option(
                OPTION_IB,
                OPTION_IB_PATH,
                &path_data(OK & !0x20, 0x20, 3, 18)
            ),
            Err(Error::InvalidArgument),
            "no bidirectional primary GMP record"
        );
        assert_eq!(
            id.set_option(OPTION_IB, OPTION_IB_PATH, &path_data(OK, 0x20, 0, 18)),
            Err(Error::InvalidArgument),
            "MTU code 0"
        );
        // the kernel takes the first record with the right flags
        let mut two = path_data(0x1 | 0x4, 0x40, 3, 10).to_vec();
        two.extend_from_slice(&good);
        id.set_option(OPTION_IB, OPTION_IB_PATH, &two).unwrap();
        assert_eq!(
            id.set_option(OPTION_IB, OPTION_IB_PATH, &good),
            Err(Error::InvalidArgument),
            "the route is resolved already"
        );
    };
    let client = client_on(&s, &ch, |_| {}, Some(&with_path));
    let conn = connect_to(&listen, &client, &ch, |_| {});
    let (ca, sa) = (query(&client), query(&conn));
    assert_eq!(
        (ca.ah_attr.traffic_class, sa.ah_attr.traffic_class),
        (0x20, 0x20)
    );
    assert_eq!((ca.ah_attr.hop_limit, ca.ah_attr.flow_label), (32, 0x12345));
    assert_eq!(
        (ca.path_mtu, sa.path_mtu),
        (verbs::Mtu::Mtu1024, verbs::Mtu::Mtu1024)
    );
    // packet life time 18 → local ACK timeout 19, in the REQ too
    assert_eq!((ca.timeout, sa.timeout), (19, 19));
    drop((idle, conn, client, listen, ch));
    s.teardown();
}

#[test]
fn ib_path_on_a_synchronous_id_completes_at_once() {
    let s = setup(308);
    let id = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    let src: SocketAddr = format!("{CLIENT}:0").parse().unwrap();
    id.resolve_addr(Some(&src), &server_addr(), 2000).unwrap();
    let d = path_data(cm::PATH_FLAGS_GMP_PRIMARY_BIDIR, 0, 3, 16);
    id.set_option(OPTION_IB, OPTION_IB_PATH, &d).unwrap();
    assert_eq!(id.event().map(|e| e.event), Some(EventType::RouteResolved));
    // the route is there: a QP and a connect that the (absent) listener rejects
    id.create_qp(None, &mut attr()).unwrap();
    assert_eq!(id.connect(None), Err(Error::ConnectionRefused));
    assert_eq!(
        id.event().map(|e| (e.event, e.status)),
        Some((EventType::Rejected, 8))
    );
    drop(id);
    s.teardown();
}

/// Relaxes the world until `f` holds or 10 s of virtual time passed.
fn until(s: &Setup, mut f: impl FnMut() -> bool) -> bool {
    let end = s.world.now_ns() + 10_000_000_000;
    while s.world.now_ns() < end {
        s.cm.progress();
        if f() {
            return true;
        }
        s.world.relax();
    }
    false
}

#[test]
fn timewait_exit_follows_disconnected_on_async_ids_only() {
    let s = setup(309);
    let (listen, client, conn, ch) = connect_pair(&s, None);
    assert!(!client.in_timewait() && !conn.in_timewait());
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    expect(&ch, EventType::Disconnected);
    let t0 = s.world.now_ns();
    assert!(client.in_timewait() && conn.in_timewait());
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(
        (ev.event, ev.status, ev.id),
        (EventType::TimewaitExit, 0, client.handle())
    );
    assert_eq!(EventType::TimewaitExit as u8, 15);
    // 4.096 µs × 2^17 (packet life time 16 + 1)
    let waited = s.world.now_ns() - t0;
    assert!((400_000_000..700_000_000).contains(&waited), "{waited}");
    assert!(!client.in_timewait());
    assert!(
        until(&s, || !conn.in_timewait()),
        "the passive side leaves it too"
    );
    // the synchronous id saw nothing: its next call is not completed by a stray event
    assert_eq!(conn.event().map(|e| e.event), Some(EventType::Disconnected));
    ch.set_nonblocking(true);
    assert_eq!(
        ch.get_cm_event().unwrap_err(),
        Error::Again,
        "one TIMEWAIT_EXIT"
    );
    drop((conn, client, listen, ch));
    s.teardown();
}

#[test]
fn ack_timeout_sets_the_timewait() {
    let s = setup(310);
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    let client = client_on(
        &s,
        &ch,
        |id| {
            id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[10])
                .unwrap()
        },
        None,
    );
    let conn = connect_to(&listen, &client, &ch, |_| {});
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    expect(&ch, EventType::Disconnected);
    let t0 = s.world.now_ns();
    expect(&ch, EventType::TimewaitExit);
    // 4.096 µs × 2^10 ≈ 4.2 ms
    let waited = s.world.now_ns() - t0;
    assert!(waited < 50_000_000, "{waited}");
    drop((conn, client, listen, ch));
    s.teardown();
}

#[test]
fn a_qp_number_in_timewait_may_connect_again() {
    // Linux's ib_cm drops a connection's remote QP number from its stale check when the
    // connection enters timewait, so a peer that reuses the QP number at once (the emulated
    // NIC hands out the lowest free number) reconnects while the old id still waits.
    let s = setup(311);
    let (listen, client, conn, ch) = connect_pair(&s, None);
    let qpn = client.qp_num().unwrap();
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    expect(&ch, EventType::Disconnected);
    assert!(conn.in_timewait());
    drop(client);
    let again = active(&s);
    assert_eq!(again.qp_num(), Some(qpn), "the same QP number again");
    let ch2 = s.cm.create_event_channel().unwrap();
    again.migrate_id(Some(&ch2)).unwrap();
    let conn2 = connect_to(&listen, &again, &ch2, |_| {});
    assert!(
        conn.in_timewait(),
        "the old id still waits out its timewait"
    );
    // the old id's timewait still ends; the new connection is not in one
    assert!(until(&s, || !conn.in_timewait()));
    assert!(!again.in_timewait());
    drop((conn2, again, ch2, conn, listen, ch));
    s.teardown();
}

#[test]
fn a_req_from_a_connected_qp_is_a_stale_connection() {
    let s = setup(312);
    let (listen, client, conn, ch) = connect_pair(&s, None);
    // a second REQ naming the QP of a live connection (an id without a QP may name any)
    let res = cm::getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let other = s.cm.create_ep(&res, None, None).unwrap();
    let e = other.connect(Some(&ConnParam {
        qp_num: client.qp_num().unwrap(),
        ..ConnParam::default()
    }));
    assert_eq!(e, Err(Error::ConnectionRefused));
    assert_eq!(
        other.event().map(|e| (e.event, e.status)),
        Some((EventType::Rejected, 10))
    );
    drop((other, conn, client, listen, ch));
    s.teardown();
}

#[test]
fn destroy_during_timewait_releases_everything() {
    let s = setup(313);
    let base = s.live_settled();
    let (listen, client, conn, ch) = connect_pair(&s, None);
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    expect(&ch, EventType::Disconnected);
    assert!(client.in_timewait() && conn.in_timewait());
    client.destroy_id();
    conn.destroy_id();
    drop(listen);
    ch.set_nonblocking(true);
    assert_eq!(
        ch.get_cm_event().unwrap_err(),
        Error::Again,
        "no TIMEWAIT_EXIT for a destroyed id"
    );
    drop(ch);
    assert_eq!(s.cm.live(), (0, 0));
    assert_eq!(s.live_settled(), base);
    s.teardown();
}

#[test]
fn establish_on_an_id_with_a_qp_is_einval() {
    let s = setup(314);
    let (listen, client, conn, ch) = connect_pair(&s, None);
    assert_eq!(client.establish(), Err(Error::InvalidArgument));
    assert_eq!(conn.establish(), Err(Error::InvalidArgument));
    drop((conn, client, listen, ch));
    s.teardown();
}

#[test]
fn init_qp_attr_gives_the_transitions_the_manager_applies() {
    use verbs::{AccessFlags, QpAttrMask as M, QpState};
    let s = setup(315);
    let unbound = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        assert_eq!(
            unbound.init_qp_attr(st).unwrap_err(),
            Error::InvalidArgument,
            "{st:?}"
        );
    }
    let (listen, client, conn, ch) = connect_pair(&s, None);
    assert_eq!(
        listen.init_qp_attr(QpState::Rtr).unwrap_err(),
        Error::InvalidArgument
    );
    for id in [&client, &conn] {
        let q = query(id);
        let (init, m) = id.init_qp_attr(QpState::Init).unwrap();
        assert_eq!(
            (init.qp_state, init.port_num, init.pkey_index),
            (QpState::Init, 1, 0)
        );
        assert_eq!(m, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        let (rtr, m) = id.init_qp_attr(QpState::Rtr).unwrap();
        assert!(m.contains(M::AV | M::DEST_QPN | M::RQ_PSN | M::PATH_MTU));
        assert_eq!(
            (
                rtr.dest_qp_num,
                rtr.rq_psn,
                rtr.path_mtu,
                rtr.ah_attr,
                rtr.max_dest_rd_atomic
            ),
            (
                q.dest_qp_num,
                q.rq_psn,
                q.path_mtu,
                q.ah_attr,
                q.max_dest_rd_atomic
            )
        );
        assert_eq!(rtr.qp_access_flags, q.qp_access_flags);
        let (rts, m) = id.init_qp_attr(QpState::Rts).unwrap();
        assert!(m.contains(M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY));
        assert_eq!(
            (
                rts.sq_psn,
                rts.timeout,
                rts.retry_cnt,
                rts.rnr_retry,
                rts.max_rd_atomic
            ),
            (
                q.sq_psn,
                q.timeout,
                q.retry_cnt,
                q.rnr_retry,
                q.max_rd_atomic
            )
        );
        assert_eq!(
            id.init_qp_attr(QpState::Sqd).unwrap_err(),
            Error::InvalidArgument
        );
    }
    assert_eq!(
        client.init_qp_attr(QpState::Rtr).unwrap().0.dest_qp_num,
        conn.qp_num().unwrap()
    );
    drop((conn, client, listen, ch));

    // a request without a QP: the PSN given out before accept is the one the REP carries
    let res = cm::getaddrinfo(Some(SERVER), Some(PORT), Some(&passive_hints())).unwrap();
    let listen = s.cm.create_ep(&res, None, None).unwrap();
    listen.listen(0).unwrap();
    let client = active(&s);
    assert_eq!(
        client.init_qp_attr(QpState::Rtr).unwrap_err(),
        Error::InvalidArgument,
        "the peer's QP is not known yet"
    );
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    let (init, _) = conn.init_qp_attr(QpState::Init).unwrap();
    assert!(
        init.qp_access_flags.contains(AccessFlags::REMOTE_READ),
        "reads offered"
    );
    let (rtr, _) = conn.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, client.qp_num().unwrap());
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    expect(&ch, EventType::Established);
    assert_eq!(query(&conn).rq_psn, rtr.rq_psn);
    assert_eq!(query(&client).sq_psn, rtr.rq_psn);
    drop((conn, client, listen, ch));

    let ud = s.cm.create_id(None, 0, PortSpace::UDP).unwrap();
    ud.bind_addr(&server_addr()).unwrap();
    let (init, m) = ud.init_qp_attr(QpState::Init).unwrap();
    assert_eq!((init.qkey, m.contains(M::QKEY)), (cm::RDMA_UDP_QKEY, true));
    assert_eq!(
        ud.init_qp_attr(QpState::Rtr).unwrap_err(),
        Error::InvalidArgument
    );
    drop((ud, unbound));
    s.teardown();
}

#[test]
fn options_after_connect_get_the_kernels_answers() {
    let s = setup(316);
    let (listen, client, conn, ch) = connect_pair(&s, None);
    for id in [&client, &conn] {
        let before = query(id);
        assert_eq!(
            id.set_option(OPTION_ID, OPTION_ID_AFONLY, &int(1)),
            Err(Error::InvalidArgument),
            "rdma_set_afonly: not after bind"
        );
        assert_eq!(
            id.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(0)),
            Err(Error::InvalidArgument),
            "rdma_set_reuseaddr: off only while idle"
        );
        id.set_option(OPTION_ID, OPTION_ID_REUSEADDR, &int(1))
            .unwrap();
        // stored, but the QP already in RTS keeps its path and timeout
        id.set_option(OPTION_ID, OPTION_ID_TOS, &[0x48]).unwrap();
        id.set_option(OPTION_ID, OPTION_ID_ACK_TIMEOUT, &[5])
            .unwrap();
        let after = query(id);
        assert_eq!(
            (after.timeout, after.ah_attr.traffic_class),
            (before.timeout, before.ah_attr.traffic_class)
        );
        assert_eq!(
            id.options(),
            cm::IdOptions {
                tos: Some(0x48),
                reuseaddr: true,
                afonly: false,
                ack_timeout: Some(5),
            }
        );
    }
    drop((conn, client, listen, ch));
    s.teardown();
}

/// The next event of a non-blocking channel, driving both managers and the world (at most
/// 200 s of virtual time).
fn poll_event(
    cms: &[&cm::Cm<EmuDevice>],
    world: &nic_testbed::World,
    ch: &EventChannel<EmuDevice>,
) -> cm::CmEvent<EmuDevice> {
    let end = world.now_ns() + 200_000_000_000;
    while world.now_ns() < end {
        for c in cms {
            c.progress();
        }
        match ch.get_cm_event() {
            Ok(ev) => return ev,
            Err(Error::Again) => world.relax(),
            Err(e) => panic!("{e:?}"),
        }
    }
    panic!("no event");
}

#[test]
fn an_unanswered_dreq_ends_in_timewait_too() {
    use nic_emulator::Profile;
    // two managers, one per NIC: the server's stops running after the connection is up
    let world = nic_testbed::World::new(317);
    let ctb = world.nic(CLIENT.parse().unwrap(), Profile::default());
    let stb = world.nic(SERVER.parse().unwrap(), Profile::default());
    let ccm = cm::Cm::new(ctb.platform(), cfg());
    let scm = cm::Cm::new(stb.platform(), cfg());
    let cn = add(&ccm, ctb);
    let sn = add(&scm, stb);
    let (cmac, smac) = (
        ccm.device(cn.dev).unwrap().mac,
        scm.device(sn.dev).unwrap().mac,
    );
    ccm.add_neighbor(SERVER.parse().unwrap(), cm::Neighbor { mac: smac });
    scm.add_neighbor(CLIENT.parse().unwrap(), cm::Neighbor { mac: cmac });
    let both = [&ccm, &scm];

    let sch = scm.create_event_channel().unwrap();
    sch.set_nonblocking(true);
    let listen = scm.create_id(Some(&sch), 0, PortSpace::TCP).unwrap();
    listen.bind_addr(&server_addr()).unwrap();
    listen.listen(0).unwrap();
    let cch = ccm.create_event_channel().unwrap();
    cch.set_nonblocking(true);
    let client = ccm.create_id(Some(&cch), 0, PortSpace::TCP).unwrap();
    client.resolve_addr(None, &server_addr(), 2000).unwrap();
    assert_eq!(
        poll_event(&both, &world, &cch).event,
        EventType::AddrResolved
    );
    client.resolve_route(2000).unwrap();
    assert_eq!(
        poll_event(&both, &world, &cch).event,
        EventType::RouteResolved
    );
    client.create_qp(None, &mut attr()).unwrap();
    client.connect(None).unwrap();
    let mut req = poll_event(&both, &world, &sch);
    assert_eq!(req.event, EventType::ConnectRequest);
    let conn = req.take_id().unwrap();
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    assert_eq!(
        poll_event(&both, &world, &cch).event,
        EventType::Established
    );
    assert_eq!(
        poll_event(&both, &world, &sch).event,
        EventType::Established
    );

    // the server's manager is no longer driven: the DREQ goes unanswered
    client.disconnect().unwrap();
    let only = [&ccm];
    let ev = poll_event(&only, &world, &cch);
    assert_eq!((ev.event, ev.status), (EventType::Disconnected, -110));
    assert!(client.in_timewait());
    let ev = poll_event(&only, &world, &cch);
    assert_eq!((ev.event, ev.status), (EventType::TimewaitExit, 0));
    assert!(!client.in_timewait());
    drop((ev, req, client, cch, conn, listen, sch));
    for (c, n) in [(&ccm, cn), (&scm, sn)] {
        assert_eq!(c.live(), (0, 0));
        let p = c.remove_device(n.dev).unwrap();
        p.shutdown().unwrap();
    }
}
