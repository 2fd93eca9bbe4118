//! The manager's state machine over the in-memory provider ([`fake`]): two managers (one
//! device each) exchanging MADs on the fake network, no emulator.

mod fake;

use verbs::{
    AhAttr, CompletionQueue, Gid, Provider, QpCap, QpInitAttr as VerbsQpInitAttr, QpState, QpType,
    SendFlags, SendWr, Sge, UdDest, WcStatus, WrOpcode,
};

use self::fake::{Clock, Fake, Net};
use crate::{
    AddrInfo, Cm, CmConfig, CmEvent, CmId, Error, EventChannel, EventType, IdHandle, Neighbor,
    PortSpace, QpInitAttr,
};

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [10, 0, 0, 2];
const PORT: u16 = 7471;

fn mac(ip: [u8; 4]) -> [u8; 6] {
    [2, 0, ip[0], ip[1], ip[2], ip[3]]
}

/// One side: a manager with one fake device and a non-blocking event channel.
struct Side {
    cm: Cm<Fake>,
    ch: EventChannel<Fake>,
    ip: [u8; 4],
}

fn cfg() -> CmConfig {
    CmConfig {
        // a few retries of a short response timeout (4.096 µs × 2^14 ≈ 67 ms)
        cm_response_timeout: 14,
        max_cm_retries: 3,
        // a hang is a failure (virtual time)
        wait_limit_ns: Some(60_000_000_000),
        ..CmConfig::default()
    }
}

fn side(net: &Net, clock: &Clock, ip: [u8; 4], rd: u32, init_rd: u32) -> Side {
    let cm = Cm::new(clock.clone(), cfg());
    cm.add_device(net.device(ip, rd, init_rd), mac(ip))
        .map_err(|(e, _)| e)
        .unwrap();
    let ch = cm.create_event_channel().unwrap();
    ch.set_nonblocking(true);
    Side { cm, ch, ip }
}

/// Client and server managers on one network, each knowing the other as a neighbour.
fn pair(net: &Net) -> (Clock, Side, Side) {
    let clock = Clock::default();
    let c = side(net, &clock, CLIENT, 300, 4);
    let s = side(net, &clock, SERVER, 7, 3);
    c.cm.add_neighbor(SERVER.into(), Neighbor { mac: mac(SERVER) });
    s.cm.add_neighbor(CLIENT.into(), Neighbor { mac: mac(CLIENT) });
    (clock, c, s)
}

/// Runs both managers until `on` has an event.
fn next_event(sides: [&Side; 2], on: &Side, clock: &Clock) -> CmEvent<Fake> {
    use crate::Platform;
    for _ in 0..200_000 {
        for s in sides {
            s.cm.progress();
        }
        match on.ch.get_cm_event() {
            Ok(ev) => return ev,
            Err(Error::Again) => clock.relax(),
            Err(e) => panic!("get_cm_event: {e:?}"),
        }
    }
    panic!("no event");
}

fn attr() -> QpInitAttr<fake::Cq, fake::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

fn listener(s: &Side) -> CmId<Fake> {
    let l = s.cm.create_id(Some(&s.ch), 9, PortSpace::TCP).unwrap();
    l.bind_addr(&(s.ip, PORT).into()).unwrap();
    l.listen(0).unwrap();
    l
}

/// An asynchronous client id with a QP, its route to the server's `port` resolved.
fn client(
    clock: &Clock,
    c: &Side,
    s: &Side,
    port: u16,
) -> (CmId<Fake>, QpInitAttr<fake::Cq, fake::Srq>) {
    let id = c.cm.create_id(Some(&c.ch), 1, PortSpace::TCP).unwrap();
    id.resolve_addr(None, &(s.ip, port).into(), 2000).unwrap();
    assert_eq!(next_event([c, s], c, clock).event, EventType::AddrResolved);
    id.resolve_route(2000).unwrap();
    assert_eq!(next_event([c, s], c, clock).event, EventType::RouteResolved);
    let mut a = attr();
    id.create_qp(None, &mut a).unwrap();
    (id, a)
}

fn qp_state(net: &Net, ip: [u8; 4], id: &CmId<Fake>) -> QpState {
    net.qp_state(ip, id.qp_num().unwrap()).unwrap()
}

/// Connected ids: (client, its attr, server's request id, listener).
fn connect(
    net: &Net,
    clock: &Clock,
    c: &Side,
    s: &Side,
) -> (
    CmId<Fake>,
    QpInitAttr<fake::Cq, fake::Srq>,
    CmId<Fake>,
    CmId<Fake>,
) {
    let l = listener(s);
    let (id, a) = client(clock, c, s, PORT);
    id.connect(None).unwrap();
    let mut ev = next_event([c, s], s, clock);
    assert_eq!(ev.event, EventType::ConnectRequest);
    // the request names its listener
    assert_eq!(ev.listen_id, Some(l.handle()));
    // the client offered its device's limits: initiator depth 4, responder resources 300
    // saturated to the 8 bits the REQ has (seen from the server: swapped)
    let crate::EventParam::Conn(d) = &ev.param else {
        panic!("{ev:?}")
    };
    assert_eq!((d.responder_resources, d.initiator_depth), (4, 255));
    let conn = ev.take_id().unwrap();
    assert_eq!(conn.context(), 9, "the listener's context");
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    let ev = next_event([c, s], c, clock);
    assert_eq!(ev.event, EventType::Established, "{ev:?}");
    // the server answered with min(what was asked, its device's limits): 4 ≤ 7, 255 → 3
    let crate::EventParam::Conn(d) = &ev.param else {
        panic!("{ev:?}")
    };
    assert_eq!((d.responder_resources, d.initiator_depth), (3, 4));
    let ev = next_event([c, s], s, clock);
    assert_eq!(ev.event, EventType::Established, "{ev:?}");
    assert_eq!(qp_state(net, CLIENT, &id), QpState::Rts);
    assert_eq!(qp_state(net, SERVER, &conn), QpState::Rts);
    (id, a, conn, l)
}

#[test]
fn connect_accept_then_dreq_drep() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let (id, a, conn, l) = connect(&net, &clock, &c, &s);

    // the data path: the id's QP, its CQs written back with the id as their context
    let dp = id.data_path().unwrap();
    assert_eq!(dp.qp_num(), id.qp_num());
    let send_cq = a.send_cq.clone().unwrap();
    assert_eq!(IdHandle::from_cq_context(send_cq.cq_context()), id.handle());
    let mem = id.alloc_buf(64).unwrap();
    let mr = id.reg_msgs(mem).unwrap();
    id.post_send(
        5,
        verbs::MemoryRegion::addr(&mr),
        16,
        &mr,
        SendFlags::SIGNALED,
    )
    .unwrap();
    let wc = id.get_send_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::Success));
    id.dereg_mr(mr).unwrap();

    // DREQ → DISCONNECTED on the server, DREP → DISCONNECTED on the client
    id.disconnect().unwrap();
    assert_eq!(qp_state(&net, CLIENT, &id), QpState::Err);
    let ev = next_event([&c, &s], &s, &clock);
    assert_eq!(ev.event, EventType::Disconnected);
    assert_eq!(qp_state(&net, SERVER, &conn), QpState::Err);
    conn.disconnect().unwrap();
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!(ev.event, EventType::Disconnected);
    // then the timewait ends
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!(ev.event, EventType::TimewaitExit);

    drop((id, conn, l, dp));
    // the written-back CQs are destroyed once the caller lets go of them
    assert!(net.live(CLIENT).1 > 1);
    drop((a, send_cq));
    c.cm.progress();
    assert_eq!(net.live(CLIENT).1, 1, "only the MAD QP's CQ is left");
    assert_eq!(c.cm.stats().transport_resets, 0);
}

#[test]
fn no_listener_is_rej_reason_8() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let (id, _a) = client(&clock, &c, &s, 4000);
    id.connect(None).unwrap();
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
    assert_eq!(qp_state(&net, CLIENT, &id), QpState::Err);
}

#[test]
fn an_unanswered_req_times_out_after_the_retries() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let _l = listener(&s);
    let (id, _a) = client(&clock, &c, &s, PORT);
    net.cut_off(SERVER, true);
    let sent = c.cm.stats().mads_sent;
    id.connect(None).unwrap();
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, -110));
    // the REQ and its 3 retransmissions
    assert_eq!(c.cm.stats().mads_sent - sent, 4);
    assert_eq!(c.cm.stats().retransmits, 3);
}

#[test]
fn read_limits_above_the_device_are_einval() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let _l = listener(&s);
    let (id, _a) = client(&clock, &c, &s, PORT);
    let p = crate::ConnParam {
        initiator_depth: 5,
        ..crate::ConnParam::default()
    };
    assert_eq!(id.connect(Some(&p)), Err(Error::InvalidArgument));
    let p = crate::ConnParam {
        initiator_depth: 4,
        responder_resources: 254,
        ..crate::ConnParam::default()
    };
    id.connect(Some(&p)).unwrap();
}

#[test]
fn getaddrinfo_without_a_device_is_enodev() {
    let cm: Cm<Fake> = Cm::new(Clock::default(), cfg());
    let hints = AddrInfo {
        ai_flags: crate::RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    assert_eq!(
        cm.getaddrinfo(None, Some("7471"), Some(&hints)),
        Err(Error::NoDevice)
    );
    let net = Net::default();
    cm.add_device(net.device(CLIENT, 16, 16), mac(CLIENT))
        .map_err(|(e, _)| e)
        .unwrap();
    let res = cm.getaddrinfo(None, Some("7471"), Some(&hints)).unwrap();
    assert_eq!(res.ai_port_space, Some(PortSpace::TCP));
}

#[test]
fn a_data_path_needs_a_qp_and_follows_it() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let id = c.cm.create_id(Some(&c.ch), 1, PortSpace::TCP).unwrap();
    assert_eq!(id.data_path().unwrap_err(), Error::InvalidArgument);
    let (id2, _a) = client(&clock, &c, &s, PORT);
    let dp = id2.data_path().unwrap();
    let dp2 = dp.clone();
    assert_eq!(dp2.qp_num(), id2.qp_num());
    id2.destroy_qp().unwrap();
    assert_eq!(dp.qp_num(), None);
    let mut wc = [verbs::WorkCompletion::default()];
    assert_eq!(dp.poll_recv_cq(&mut wc), Err(Error::InvalidArgument));
    assert_eq!(
        dp.post_recv(&[]).map_err(|e| e.error),
        Err(verbs::Error::InvalidArgument)
    );
    // a new QP on the id is seen by the old handle
    id2.create_qp(None, &mut attr()).unwrap();
    assert_eq!(dp.qp_num(), id2.qp_num());
    drop(id);
}

/// A GSI QP on a third node (every node owns its QP1), sending `len` bytes to QP1 at `to`.
fn hostile_datagram(net: &Net, to: [u8; 4], len: usize) {
    let h = net.device([10, 0, 0, 66], 1, 1);
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(4, 0, None).unwrap();
    let (mut qp, _) = h
        .create_qp(
            &pd,
            &VerbsQpInitAttr {
                qp_type: QpType::Gsi,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: attr().cap,
                sq_sig_all: true,
            },
        )
        .unwrap();
    crate::qp::qp_init(&h, &mut qp, QpType::Gsi, verbs::AccessFlags::empty(), 0).unwrap();
    let mem = h.alloc_buf(4096).unwrap();
    let mr = h.reg_mr(&pd, mem, verbs::AccessFlags::LOCAL_WRITE).unwrap();
    let ah = h
        .create_ah(
            &pd,
            &AhAttr {
                dgid: Gid::from_ipv4(to),
                is_global: true,
                port_num: 1,
                dmac: mac(to),
                ..AhAttr::default()
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: verbs::MemoryRegion::addr(&mr),
        length: len as u32,
        lkey: verbs::MemoryRegion::lkey(&mr),
    }];
    h.post_send(
        &mut qp,
        &[SendWr {
            wr_id: 1,
            opcode: WrOpcode::Send,
            sg_list: &sge,
            dest: Some(UdDest {
                ah: &ah,
                remote_qpn: 1,
                remote_qkey: 0x8001_0000,
            }),
            ..SendWr::default()
        }],
    )
    .unwrap();
}

#[test]
fn a_qp1_put_in_error_by_an_oversized_datagram_is_reset() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    // 1000 bytes to the server's QP1: this fake device fails the QP on it
    hostile_datagram(&net, SERVER, 1000);
    assert_eq!(net.qp_state(SERVER, 1), Some(QpState::Err));
    s.cm.progress();
    assert_eq!(net.qp_state(SERVER, 1), Some(QpState::Rts));
    assert_eq!(s.cm.stats().transport_resets, 1);
    assert!(s.cm.stats().bad_mads >= 1);
    // connections are made as before
    let (id, _a, conn, l) = connect(&net, &clock, &c, &s);
    drop((id, conn, l));
    assert_eq!(s.cm.stats().transport_reset_failures, 0);
}

#[test]
fn a_dropped_oversized_datagram_changes_nothing() {
    let net = Net::default();
    net.state().drop_too_long = true;
    let (clock, c, s) = pair(&net);
    hostile_datagram(&net, SERVER, 1000);
    s.cm.progress();
    assert_eq!(net.qp_state(SERVER, 1), Some(QpState::Rts));
    assert_eq!(s.cm.stats().transport_resets, 0);
    let (id, _a, conn, l) = connect(&net, &clock, &c, &s);
    drop((id, conn, l));
}

/// A SIDR exchange on UDP port `port`: (client id, server's request id, listener).
fn ud_pair(clock: &Clock, c: &Side, s: &Side) -> (CmId<Fake>, CmId<Fake>, CmId<Fake>) {
    let l = s.cm.create_id(Some(&s.ch), 3, PortSpace::UDP).unwrap();
    l.bind_addr(&(s.ip, PORT).into()).unwrap();
    l.listen(0).unwrap();
    let id = c.cm.create_id(Some(&c.ch), 4, PortSpace::UDP).unwrap();
    id.resolve_addr(None, &(s.ip, PORT).into(), 2000).unwrap();
    assert_eq!(next_event([c, s], c, clock).event, EventType::AddrResolved);
    id.resolve_route(2000).unwrap();
    assert_eq!(next_event([c, s], c, clock).event, EventType::RouteResolved);
    let ud = || QpInitAttr {
        qp_type: QpType::Ud,
        ..attr()
    };
    id.create_qp(None, &mut ud()).unwrap();
    id.connect(None).unwrap();
    let mut ev = next_event([c, s], s, clock);
    assert_eq!(ev.event, EventType::ConnectRequest);
    let conn = ev.take_id().unwrap();
    conn.create_qp(None, &mut ud()).unwrap();
    conn.accept(None).unwrap();
    let ev = next_event([c, s], c, clock);
    assert_eq!(ev.event, EventType::Established, "{ev:?}");
    (id, conn, l)
}

#[test]
fn destroying_ud_ids_sends_no_dreq() {
    use crate::mad::attr;
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let (id, conn, l) = ud_pair(&clock, &c, &s);
    assert_eq!(net.mads_from(CLIENT), [attr::SIDR_REQ]);
    assert_eq!(net.mads_from(SERVER), [attr::SIDR_REP]);
    // disconnecting a UD id is a no-op on the wire, as is destroying it
    id.disconnect().unwrap();
    drop((id, conn, l));
    for _ in 0..100 {
        c.cm.progress();
        s.cm.progress();
        crate::Platform::relax(&clock);
    }
    assert_eq!(net.mads_from(CLIENT), [attr::SIDR_REQ]);
    assert_eq!(net.mads_from(SERVER), [attr::SIDR_REP]);
    assert_eq!(c.cm.live(), (0, 1));
}

/// The client's REQ as sent: (bytes, starting PSN field, local communication ID).
fn first_req(net: &Net) -> Vec<u8> {
    let st = net.state();
    let (_, m) = st
        .mads
        .iter()
        .find(|(ip, m)| {
            *ip == CLIENT && u16::from_be_bytes([m[16], m[17]]) == crate::mad::attr::REQ
        })
        .expect("a REQ");
    m.clone()
}

#[test]
fn two_runs_have_their_own_comm_ids_tids_and_psns() {
    // the same program twice (same configuration, same clock): the REQs differ in
    // transaction ID (8..16), communication ID (24..28) and starting PSN (REQ offset 40)
    let run = || {
        let net = Net::default();
        let (clock, c, s) = pair(&net);
        let _ = connect(&net, &clock, &c, &s);
        first_req(&net)
    };
    let (a, b) = (run(), run());
    let decode = |m: &[u8]| match crate::mad::CmMad::decode(m).unwrap() {
        crate::mad::CmMad {
            tid,
            msg: crate::mad::CmMessage::Req(r),
            ..
        } => (tid, r.local_comm_id, r.starting_psn),
        other => panic!("{other:?}"),
    };
    let (a, b) = (decode(&a), decode(&b));
    assert_ne!(a.0, b.0, "transaction ID");
    assert_ne!(a.1, b.1, "local communication ID");
    assert_ne!(a.2, b.2, "starting PSN");
}

#[test]
fn constant_entropy_gives_reproducible_identities() {
    #[derive(Clone)]
    struct Fixed(Clock);
    impl crate::Platform for Fixed {
        fn relax(&self) {
            self.0.relax()
        }
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
        fn entropy(&self) -> u64 {
            42
        }
    }
    let ids = || {
        let net = Net::default();
        let cm = Cm::new(Fixed(Clock::default()), cfg());
        cm.add_device(net.device(CLIENT, 4, 4), mac(CLIENT))
            .map_err(|(e, _)| e)
            .unwrap();
        cm.with_state(|st| (st.next_comm_id(), st.rng.psn()))
    };
    assert_eq!(ids(), ids());
}

#[test]
fn comm_est_stands_for_a_lost_rtu() {
    use crate::mad::attr;
    use verbs::{AsyncElement, AsyncEvent, AsyncEventType};
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let _l = listener(&s);
    let (id, _a) = client(&clock, &c, &s, PORT);
    net.state().drop_attr = Some(attr::RTU);
    id.connect(None).unwrap();
    let mut ev = next_event([&c, &s], &s, &clock);
    assert_eq!(ev.event, EventType::ConnectRequest);
    let conn = ev.take_id().unwrap();
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    assert_eq!(
        next_event([&c, &s], &c, &clock).event,
        EventType::Established
    );
    for _ in 0..5 {
        c.cm.progress();
        s.cm.progress();
    }
    assert_eq!(
        net.mads_from(CLIENT),
        [attr::REQ, attr::RTU],
        "the RTU was sent"
    );
    assert_eq!(s.ch.get_cm_event().err(), Some(Error::Again), "and lost");
    // the first packet on the server's QP: the device raises COMM_EST
    let qpn = conn.qp_num().unwrap();
    let est = AsyncEvent {
        event_type: AsyncEventType::CommEst,
        element: AsyncElement::Qp(qpn),
    };
    net.raise(SERVER, est);
    s.cm.progress();
    let ev = s.ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    // at once: no REP retransmission
    assert_eq!(s.cm.stats().retransmits, 0);
    assert_eq!(s.cm.stats().comm_est_rtus, 1);
    // and the application still sees the event
    assert_eq!(s.cm.get_async_event(s.cm.devices()[0].id), Ok(Some(est)));
    assert_eq!(s.cm.get_async_event(s.cm.devices()[0].id), Ok(None));
    // a second COMM_EST changes nothing
    net.raise(SERVER, est);
    s.cm.progress();
    assert_eq!(s.ch.get_cm_event().err(), Some(Error::Again));
}

#[test]
fn notify_comm_est_is_rdma_notify() {
    use crate::mad::attr;
    let net = Net::default();
    let clock = Clock::default();
    let c = side(&net, &clock, CLIENT, 4, 4);
    let s = {
        let cm = Cm::new(
            clock.clone(),
            CmConfig {
                watch_async_events: false,
                ..cfg()
            },
        );
        cm.add_device(net.device(SERVER, 4, 4), mac(SERVER))
            .map_err(|(e, _)| e)
            .unwrap();
        let ch = cm.create_event_channel().unwrap();
        ch.set_nonblocking(true);
        Side { cm, ch, ip: SERVER }
    };
    c.cm.add_neighbor(SERVER.into(), Neighbor { mac: mac(SERVER) });
    s.cm.add_neighbor(CLIENT.into(), Neighbor { mac: mac(CLIENT) });
    let _l = listener(&s);
    let (id, _a) = client(&clock, &c, &s, PORT);
    net.state().drop_attr = Some(attr::RTU);
    id.connect(None).unwrap();
    let mut ev = next_event([&c, &s], &s, &clock);
    let conn = ev.take_id().unwrap();
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    assert_eq!(
        next_event([&c, &s], &c, &clock).event,
        EventType::Established
    );
    assert_eq!(
        conn.notify(verbs::AsyncEventType::SqDrained),
        Err(Error::InvalidArgument)
    );
    conn.notify(verbs::AsyncEventType::CommEst).unwrap();
    let ev = s.ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Established);
}

#[test]
fn a_request_id_takes_its_own_context_and_events_carry_it() {
    let net = Net::default();
    let (clock, c, s) = pair(&net);
    let (id, _a, conn, _l) = connect(&net, &clock, &c, &s);
    conn.set_context(0xC0FFEE);
    assert_eq!(conn.context(), 0xC0FFEE);
    id.disconnect().unwrap();
    let ev = next_event([&c, &s], &s, &clock);
    assert_eq!(ev.event, EventType::Disconnected);
    assert_eq!((ev.id, ev.context), (conn.handle(), 0xC0FFEE));
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!((ev.event, ev.context), (EventType::Disconnected, 1));
}

/// A port that learns a MAC after `answer_after` asks (`None`: never), or has no route.
struct Arp {
    asks: std::sync::atomic::AtomicU32,
    answer_after: Option<u32>,
    no_route: bool,
}

impl crate::NeighborResolver for Arp {
    fn resolve_neighbor(&self, ip: std::net::Ipv4Addr) -> Result<Option<Neighbor>, Error> {
        if self.no_route {
            return Err(Error::HostUnreachable);
        }
        let n = self.asks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Ok(self.answer_after.filter(|a| n > *a).map(|_| Neighbor {
            mac: mac(ip.octets()),
        }))
    }
}

/// Client and server, only the server knowing its neighbour; the client's port resolves
/// with `arp`.
fn pair_with_arp(net: &Net, arp: Arp) -> (Clock, Side, Side, std::sync::Arc<Arp>) {
    let clock = Clock::default();
    let c = side(net, &clock, CLIENT, 4, 4);
    let s = side(net, &clock, SERVER, 4, 4);
    s.cm.add_neighbor(CLIENT.into(), Neighbor { mac: mac(CLIENT) });
    let arp = std::sync::Arc::new(arp);
    c.cm.set_neighbor_resolver(c.cm.devices()[0].id, Some(arp.clone()))
        .unwrap();
    (clock, c, s, arp)
}

#[test]
fn address_resolution_asks_the_port() {
    let net = Net::default();
    let arp = Arp {
        asks: Default::default(),
        answer_after: Some(3),
        no_route: false,
    };
    let (clock, c, s, arp) = pair_with_arp(&net, arp);
    assert_eq!(c.cm.neighbor(SERVER.into()), None);
    let _l = listener(&s);
    let (id, _a) = client(&clock, &c, &s, PORT);
    assert!(arp.asks.load(std::sync::atomic::Ordering::Relaxed) >= 4);
    assert_eq!(
        c.cm.neighbor(SERVER.into()),
        Some(Neighbor { mac: mac(SERVER) })
    );
    id.connect(None).unwrap();
    let mut ev = next_event([&c, &s], &s, &clock);
    let conn = ev.take_id().unwrap();
    conn.create_qp(None, &mut attr()).unwrap();
    conn.accept(None).unwrap();
    assert_eq!(
        next_event([&c, &s], &c, &clock).event,
        EventType::Established
    );
}

#[test]
fn an_unanswered_address_is_etimedout_and_no_route_ehostunreach() {
    let net = Net::default();
    let arp = Arp {
        asks: Default::default(),
        answer_after: None,
        no_route: false,
    };
    let (clock, c, s, arp) = pair_with_arp(&net, arp);
    let id = c.cm.create_id(Some(&c.ch), 1, PortSpace::TCP).unwrap();
    id.resolve_addr(None, &(SERVER, PORT).into(), 100).unwrap();
    let ev = next_event([&c, &s], &c, &clock);
    assert_eq!((ev.event, ev.status), (EventType::AddrError, -110));
    // asked on every pass until the timeout (100 ms of 1 ms passes)
    assert!(arp.asks.load(std::sync::atomic::Ordering::Relaxed) > 50);

    let net = Net::default();
    let arp = Arp {
        asks: Default::default(),
        answer_after: None,
        no_route: true,
    };
    let (_clock, c, _s, _arp) = pair_with_arp(&net, arp);
    // a synchronous id: the errno of its ADDR_ERROR
    let id = c.cm.create_id(None, 1, PortSpace::TCP).unwrap();
    assert_eq!(
        id.resolve_addr(None, &(SERVER, PORT).into(), 2000),
        Err(Error::HostUnreachable)
    );
}

#[test]
fn a_ud_reply_address_from_the_work_completion() {
    let net = Net::default();
    let (_clock, _c, s) = pair(&net);
    let dev = s.cm.devices()[0].id;
    // what the fake (as RoCEv2 over IPv4) puts in front of a datagram from the client
    let mut grh = [0u8; 40];
    grh[20] = 0x45;
    grh[28] = 64;
    grh[32..36].copy_from_slice(&CLIENT);
    let wc = verbs::WorkCompletion {
        src_qp: 99,
        ..verbs::WorkCompletion::default()
    };
    let a = s.cm.ah_attr_from_wc(dev, &wc, &grh).unwrap();
    assert_eq!(a.dgid, Gid::from_ipv4(CLIENT));
    assert_eq!(a.dmac, mac(CLIENT));
    assert_eq!(
        s.cm.neighbor(CLIENT.into()),
        Some(Neighbor { mac: mac(CLIENT) })
    );
    // an unknown sender: no MAC to answer to
    grh[32..36].copy_from_slice(&[10, 0, 0, 77]);
    assert_eq!(
        s.cm.ah_attr_from_wc(dev, &wc, &grh),
        Err(Error::HostUnreachable)
    );
    assert_eq!(
        s.cm.ah_attr_from_wc(dev, &wc, &[0u8; 40]),
        Err(Error::InvalidArgument)
    );
}
