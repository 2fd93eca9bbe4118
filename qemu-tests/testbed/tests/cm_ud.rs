//! Datagram endpoints: service ID resolution (SIDR_REQ / SIDR_REP) between two emulated NICs,
//! then a datagram to the QP it named; SIDR statuses as librdmacm reports them.

use cm::{AddrInfo, ConnParam, Error, EventParam, EventType, PortSpace, RaiFlags, getaddrinfo};
use verbs::{Provider, QpType, SendFlags, WcStatus};

mod cm_support;
use cm_support::*;

fn ud_hints(passive: bool) -> AddrInfo {
    AddrInfo {
        ai_flags: if passive {
            RaiFlags::PASSIVE
        } else {
            RaiFlags::default()
        },
        ai_qp_type: Some(QpType::Ud),
        ai_src_addr: (!passive).then(|| format!("{CLIENT}:0").parse().unwrap()),
        ..AddrInfo::default()
    }
}

fn ud_listener(s: &Setup) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&ud_hints(true))).unwrap();
    assert_eq!(res.ai_port_space, Some(PortSpace::UDP));
    let mut a = attr();
    let l = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    l.listen(0).unwrap();
    l
}

fn ud_client(s: &Setup) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&ud_hints(false))).unwrap();
    let mut a = attr();
    let id = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    assert_eq!(a.qp_type, QpType::Ud);
    // a UD QP is ready to send as soon as it exists
    let q = query(&id);
    assert_eq!(
        (q.qp_state, q.qkey),
        (verbs::QpState::Rts, cm::RDMA_UDP_QKEY)
    );
    id
}

#[test]
fn sidr_resolves_the_service_and_a_datagram_follows() {
    let s = setup(31);
    let listen = ud_listener(&s);
    let client = ud_client(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client
        .connect(Some(&ConnParam {
            private_data: b"ud hello",
            ..ConnParam::default()
        }))
        .unwrap();
    let conn = listen.get_request().unwrap();
    let req = conn.event().unwrap();
    let EventParam::Ud(ud) = &req.param else {
        panic!("{req:?}")
    };
    assert_eq!(ud.private_data.len(), 180);
    assert_eq!(&ud.private_data[..8], b"ud hello");
    let rbuf = buf(&conn, 4096);
    conn.post_recv(5, rbuf.addr(), 40 + 64, &rbuf.mr).unwrap();
    conn.accept(Some(&ConnParam {
        private_data: b"welcome",
        ..ConnParam::default()
    }))
    .unwrap();

    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    let EventParam::Ud(ud) = ev.param else {
        panic!("UD parameters")
    };
    assert_eq!(ud.qp_num, conn.qp_num().unwrap());
    assert_eq!(ud.qkey, cm::RDMA_UDP_QKEY);
    assert_eq!(ud.private_data.len(), 136);
    assert_eq!(&ud.private_data[..7], b"welcome");

    let ah = client
        .with_verbs(|v| Provider::create_ah(v.provider, v.pd.unwrap(), &ud.ah_attr))
        .unwrap()
        .unwrap();
    let sbuf = buf(&client, 4096);
    sbuf.mem.write(0, b"a datagram!").unwrap();
    client
        .post_ud_send(
            1,
            sbuf.addr(),
            11,
            &sbuf.mr,
            SendFlags::SIGNALED,
            &ah,
            ud.qp_num,
        )
        .unwrap();
    assert_eq!(client.get_send_comp().unwrap().status, WcStatus::Success);
    let wc = conn.get_recv_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (5, WcStatus::Success, 40 + 11)
    );
    assert_eq!(wc.src_qp, client.qp_num().unwrap());
    let mut got = [0u8; 11];
    rbuf.mem.read(40, &mut got).unwrap();
    assert_eq!(&got, b"a datagram!");

    client
        .with_verbs(|v| Provider::destroy_ah(v.provider, ah).map_err(|e| e.error))
        .unwrap()
        .unwrap();
    sbuf.free(&client);
    rbuf.free(&conn);
    drop((conn, client, listen, ch));
    s.teardown();
}

#[test]
fn sidr_statuses_become_errno_1_and_2() {
    let s = setup(32);
    // nobody listens: SIDR status 1 "unsupported" → UNREACHABLE, errno 1 (EPERM)
    let client = ud_client(&s);
    assert_eq!(client.connect(None), Err(Error::Permission));
    let ev = client.event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, 1));
    drop(client);
    // rejected: status 2 → errno 2 (ENOENT), with the private data
    let listen = ud_listener(&s);
    let client = ud_client(&s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    conn.reject(b"nope").unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, 2));
    assert_eq!(&ev.param.private_data()[..4], b"nope");
    assert_eq!(Error::from_errno(ev.status), Error::NoEntry);
    drop((ev, conn, client, listen, ch));
    s.teardown();
}
