//! `docs/cm.md#requests-from-a-listener` (user CQs named by a passive endpoint's saved attributes
//! are shared by every connection) and `docs/cm.md#srqs` (SRQs: `qp_init_attr.srq` as given or the
//! id's own from `create_srq`, `post_recv` to the id's SRQ, `srq = 1` in the REQ/REP, `destroy_ep`
//! order), with their error cases, traffic through a shared SRQ, and the live-object counters.

mod cm_support;

use std::sync::Arc;

use cm::{CmPd, Error, EventParam, EventType, QpInitAttr, getaddrinfo};
use cm_support::*;
use verbs::{
    AccessFlags, MemoryRegion, Provider, QpCap, RecvWr, SharedReceiveQueue, SrqAttr, WcOpcode,
    WcStatus, WorkCompletion,
};

type Cq = mlx5::Cq;
type Srq = mlx5::Srq;

/// A user CQ on `n`'s device.
fn user_cq(s: &Setup, n: &Nic) -> Arc<Cq> {
    Arc::new(
        s.cm.with_provider(n.dev, |p| Provider::create_cq(p, 64, 7, None))
            .unwrap()
            .unwrap(),
    )
}

/// Destroys a user CQ the manager must have released.
fn destroy_cq(s: &Setup, n: &Nic, cq: Arc<Cq>) {
    let cq = Arc::try_unwrap(cq).expect("the manager still holds the user CQ");
    s.cm.with_provider(n.dev, |p| Provider::destroy_cq(p, cq).map_err(|e| e.error))
        .unwrap()
        .expect("destroy user CQ");
}

/// Polls a user CQ (running the world and the manager) until `want` completions arrived.
fn poll_user(s: &Setup, n: &Nic, cq: &Cq, want: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    for _ in 0..100_000 {
        let k =
            s.cm.with_provider(n.dev, |p| Provider::poll_cq(p, cq, &mut wc))
                .unwrap()
                .unwrap();
        got.extend_from_slice(&wc[..k]);
        if got.len() >= want {
            assert_eq!(got.len(), want, "{got:?}");
            return got;
        }
        s.world.relax();
        s.cm.progress();
    }
    panic!("{} of {want} completions: {got:?}", got.len());
}

/// A passive endpoint (listening) created with `a` and `pd`.
fn listener_with(s: &Setup, pd: Option<&CmPd>, a: &mut QpInitAttr<Cq, Srq>) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&passive_hints())).unwrap();
    let id =
        s.cm.create_ep(&res, pd, Some(a))
            .expect("passive create_ep");
    id.listen(0).unwrap();
    id
}

/// A client connected (asynchronously) to `listen`; returns it, the server's id, and the
/// client's ESTABLISHED event parameters.
fn connect_one(s: &Setup, listen: &Id, a: &mut QpInitAttr<Cq, Srq>) -> (Id, Id, EventParam) {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let client =
        s.cm.create_ep(&res, None, Some(a))
            .expect("active create_ep");
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Established, "{ev:?}");
    let param = ev.param.clone();
    cm::ack_cm_event(ev);
    client.migrate_id(None).unwrap();
    drop(ch);
    (client, conn, param)
}

fn conn_data(p: &EventParam) -> &cm::ConnData {
    match p {
        EventParam::Conn(c) => c,
        other => panic!("{other:?}"),
    }
}

/// Listener CQs: the saved attributes name user CQs; both accepted connections complete on them
/// (receives and sends), the ids expose no CQs of their own (`get_recv_comp` is EINVAL), and
/// neither destroying the connections nor the listener destroys the user CQs.
#[test]
fn b8_accepted_connections_share_the_users_cqs() {
    let s = setup(81);
    let scq = user_cq(&s, &s.server);
    let rcq = user_cq(&s, &s.server);
    let mut saved = QpInitAttr {
        send_cq: Some(scq.clone()),
        recv_cq: Some(rcq.clone()),
        ..attr()
    };
    let listen = listener_with(&s, None, &mut saved);
    drop(saved);
    // the saved copy holds them
    assert_eq!((Arc::strong_count(&scq), Arc::strong_count(&rcq)), (2, 2));
    let (c1, conn1, _) = connect_one(&s, &listen, &mut attr());
    let (c2, conn2, _) = connect_one(&s, &listen, &mut attr());
    assert_eq!((Arc::strong_count(&scq), Arc::strong_count(&rcq)), (4, 4));
    for conn in [&conn1, &conn2] {
        let (send, recv) = conn
            .with_verbs(|v| (v.send_cq.is_some(), v.recv_cq.is_some()))
            .unwrap();
        assert_eq!(
            (send, recv),
            (false, false),
            "id.send_cq/recv_cq stay unset"
        );
        assert_eq!(conn.get_recv_comp(), Err(Error::InvalidArgument));
    }
    // each connection receives one message; both complete on the user's receive CQ
    let sbuf = buf(&conn1, 4096);
    conn1.post_recv(1, sbuf.addr(), 1024, &sbuf.mr).unwrap();
    conn2
        .post_recv(2, sbuf.addr() + 1024, 1024, &sbuf.mr)
        .unwrap();
    let b1 = buf(&c1, 4096);
    let b2 = buf(&c2, 4096);
    b1.mem.write(0, b"first connection").unwrap();
    b2.mem.write(0, b"second connection").unwrap();
    c1.post_send(10, b1.addr(), 16, &b1.mr, verbs::SendFlags::SIGNALED)
        .unwrap();
    c2.post_send(20, b2.addr(), 17, &b2.mr, verbs::SendFlags::SIGNALED)
        .unwrap();
    let mut got = poll_user(&s, &s.server, &rcq, 2);
    got.sort_by_key(|w| w.wr_id);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.qp_num, w.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (
                1,
                WcStatus::Success,
                WcOpcode::Recv,
                conn1.qp_num().unwrap(),
                16
            ),
            (
                2,
                WcStatus::Success,
                WcOpcode::Recv,
                conn2.qp_num().unwrap(),
                17
            ),
        ]
    );
    let mut m = [0u8; 17];
    sbuf.mem.read(0, &mut m[..16]).unwrap();
    assert_eq!(&m[..16], b"first connection");
    sbuf.mem.read(1024, &mut m).unwrap();
    assert_eq!(&m, b"second connection");
    for c in [&c1, &c2] {
        assert_eq!(c.get_send_comp().unwrap().status, WcStatus::Success);
    }
    // a send of a server connection completes on the user's send CQ
    c1.post_recv(40, b1.addr() + 1024, 64, &b1.mr).unwrap();
    conn1
        .post_send(30, sbuf.addr(), 4, &sbuf.mr, verbs::SendFlags::SIGNALED)
        .unwrap();
    let w = poll_user(&s, &s.server, &scq, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].qp_num),
        (30, WcStatus::Success, conn1.qp_num().unwrap())
    );
    assert_eq!(c1.get_recv_comp().unwrap().wr_id, 40);
    b1.free(&c1);
    b2.free(&c2);
    sbuf.free(&conn1);
    // destroy_ep releases the user CQs without destroying them
    drop((c1, c2, conn1, conn2));
    assert_eq!((Arc::strong_count(&scq), Arc::strong_count(&rcq)), (2, 2));
    drop(listen);
    destroy_cq(&s, &s.server, scq);
    destroy_cq(&s, &s.server, rcq);
    s.teardown();
}

/// An SRQ on `pd` (of the PD's device), as a shared handle.
fn user_srq(s: &Setup, pd: &CmPd, max_wr: u32) -> Arc<Srq> {
    let a = SrqAttr {
        max_wr,
        max_sge: 1,
        srq_limit: 0,
    };
    Arc::new(
        s.cm.with_pd(pd, |p, pd| Provider::create_srq(p, pd, &a))
            .unwrap()
            .unwrap(),
    )
}

fn destroy_srq(s: &Setup, n: &Nic, srq: Arc<Srq>) {
    let srq = Arc::try_unwrap(srq).expect("the manager still holds the SRQ");
    s.cm.with_provider(n.dev, |p| {
        Provider::destroy_srq(p, srq).map_err(|e| e.error)
    })
    .unwrap()
    .expect("destroy SRQ");
}

/// Attributes for a QP on an SRQ: no receive queue, no receive CQ to create.
fn srq_qp_attr(srq: Option<Arc<Srq>>, recv_cq: Option<Arc<Cq>>) -> QpInitAttr<Cq, Srq> {
    let a = attr();
    QpInitAttr {
        srq,
        recv_cq,
        cap: QpCap {
            max_recv_wr: 0,
            ..a.cap
        },
        ..a
    }
}

/// SRQs with shared listener attributes: the listener's saved attributes name an SRQ (and a receive
/// CQ); both accepted connections take their receives from it, in the order they were posted,
/// whichever connection a message arrives on, and their REPs say `srq = 1`. The data lands where
/// each receive pointed. Everything is released, nothing left on the devices.
#[test]
fn b10_two_connections_share_one_srq() {
    let s = setup(82);
    let pd = s.cm.alloc_pd(s.server.dev).unwrap();
    let srq = user_srq(&s, &pd, 16);
    let rcq = user_cq(&s, &s.server);
    let mut saved = srq_qp_attr(Some(srq.clone()), Some(rcq.clone()));
    let listen = listener_with(&s, Some(&pd), &mut saved);
    drop(saved);
    let (c1, conn1, p1) = connect_one(&s, &listen, &mut attr());
    let (c2, conn2, p2) = connect_one(&s, &listen, &mut attr());
    assert!(
        conn_data(&p1).srq && conn_data(&p2).srq,
        "the REPs carry srq = 1"
    );
    // the REQs did not (the clients have no SRQ)
    assert!(!conn_data(&conn1.event().unwrap().param).srq);
    assert!(conn1.qp_on_srq() && conn2.qp_on_srq());
    assert_eq!(
        Arc::strong_count(&srq),
        4,
        "the saved attr and two QPs hold it"
    );
    // the connections' ids have no SRQ of their own: post_recv goes to the QP, which has no
    // receive queue
    let mr =
        s.cm.with_pd(&pd, |p, pd| {
            let mem = Provider::alloc_buf(p, 8192)?;
            Provider::reg_mr(p, pd, mem, AccessFlags::LOCAL_WRITE)
        })
        .unwrap()
        .unwrap();
    assert_eq!(
        conn1.post_recv(1, mr.addr(), 64, &mr),
        Err(Error::InvalidArgument)
    );
    const LEN: u64 = 512;
    let sges: Vec<[verbs::Sge; 1]> = (0..6)
        .map(|i| {
            [verbs::Sge {
                addr: mr.addr() + i * LEN,
                length: LEN as u32,
                lkey: mr.lkey(),
            }]
        })
        .collect();
    let wrs: Vec<RecvWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, sg)| RecvWr {
            wr_id: 100 + i as u64,
            sg_list: sg,
        })
        .collect();
    s.cm.with_provider(s.server.dev, |p| Provider::post_srq_recv(p, &srq, &wrs))
        .unwrap()
        .unwrap();
    let b1 = buf(&c1, 4096);
    let b2 = buf(&c2, 4096);
    // c1, c2, c2, c1, c1, c2: each message its own bytes
    for (i, first) in [true, false, false, true, true, false]
        .into_iter()
        .enumerate()
    {
        let (c, b, conn) = if first {
            (&c1, &b1, &conn1)
        } else {
            (&c2, &b2, &conn2)
        };
        let msg = format!("message {i} on connection {}", if first { 1 } else { 2 });
        b.mem.write(0, msg.as_bytes()).unwrap();
        c.post_send(
            i as u64,
            b.addr(),
            msg.len() as u32,
            &b.mr,
            verbs::SendFlags::SIGNALED,
        )
        .unwrap();
        let w = poll_user(&s, &s.server, &rcq, 1)[0];
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        assert_eq!(
            w.wr_id,
            100 + i as u64,
            "the SRQ's receives in posting order"
        );
        assert_eq!(
            w.qp_num,
            conn.qp_num().unwrap(),
            "the connection it came on"
        );
        assert_eq!(w.byte_len as usize, msg.len());
        let mut got = vec![0u8; msg.len()];
        // the receive landed in the registered memory, read through the MR's buffer
        let mem = mr.buffer().unwrap();
        mem.read(i * LEN as usize, &mut got).unwrap();
        assert_eq!(got, msg.as_bytes());
        assert_eq!(c.get_send_comp().unwrap().status, WcStatus::Success);
    }
    assert_eq!(srq.outstanding(), 0);
    b1.free(&c1);
    b2.free(&c2);
    s.cm.dereg_mr(s.server.dev, mr).unwrap();
    drop((c1, c2, conn1, conn2, listen));
    assert_eq!(
        s.server.tb.live().srqs,
        1,
        "the manager did not destroy the user's SRQ"
    );
    destroy_srq(&s, &s.server, srq);
    destroy_cq(&s, &s.server, rcq);
    s.cm.dealloc_pd(pd).map_err(|(e, _)| e).unwrap();
    assert_eq!(s.server.tb.live().srqs, 0);
    s.teardown();
}

/// SRQs on an id: `create_srq` (written-back sizes; twice, unbound, PD of another device:
/// EINVAL), a QP without `srq` takes the id's (written back), `post_recv` goes to it (ENOMEM
/// past `max_wr`), the REQ says `srq = 1`, `destroy_srq` under the QP is EBUSY, an SRQ of
/// another device or PD is EINVAL, and `destroy_ep` destroys QP → CQs → channels → SRQ.
#[test]
fn b10_id_srq_rules_and_destroy_order() {
    let s = setup(83);
    let listen = listener(&s);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let id = s.cm.create_ep(&res, None, None).unwrap();
    let mut sa = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    // an id bound to no device
    let unbound = s.cm.create_id(None, 0, cm::PortSpace::TCP).unwrap();
    assert_eq!(
        unbound.create_srq(None, &mut sa),
        Err(Error::InvalidArgument)
    );
    drop(unbound);
    // a PD of the other device
    let server_pd = s.cm.alloc_pd(s.server.dev).unwrap();
    assert_eq!(
        id.create_srq(Some(&server_pd), &mut sa),
        Err(Error::InvalidArgument)
    );
    id.create_srq(None, &mut sa).unwrap();
    assert_eq!(sa.max_wr, 15, "the actual size written back");
    assert_eq!(id.create_srq(None, &mut sa), Err(Error::InvalidArgument));
    assert_eq!(s.client.tb.live().srqs, 1);
    // a QP naming no SRQ takes the id's; with max_recv_wr > 0 it still gets a recv CQ
    let mut a = attr();
    assert!(a.srq.is_none());
    id.create_qp(None, &mut a).unwrap();
    assert!(
        a.srq
            .as_ref()
            .is_some_and(|x| x.srq_num() == id.srq().unwrap().srq_num())
    );
    assert!(id.qp_on_srq());
    drop(a);
    assert_eq!(id.destroy_srq(), Err(Error::Busy), "its QP uses it");
    // an SRQ of the other device, an SRQ of another PD
    let other = s.cm.create_ep(&res, None, None).unwrap();
    let server_srq = user_srq(&s, &server_pd, 4);
    let mut a = srq_qp_attr(Some(server_srq.clone()), None);
    assert_eq!(other.create_qp(None, &mut a), Err(Error::InvalidArgument));
    drop(a);
    let pd2 = s.cm.alloc_pd(s.client.dev).unwrap();
    let pd2_srq = user_srq(&s, &pd2, 4);
    let mut a = srq_qp_attr(Some(pd2_srq.clone()), None);
    assert_eq!(other.create_qp(None, &mut a), Err(Error::InvalidArgument));
    drop(a);
    // on its own PD it works
    let mut a = srq_qp_attr(Some(pd2_srq.clone()), None);
    other.create_qp(Some(&pd2), &mut a).unwrap();
    drop(a);
    drop(other);
    destroy_srq(&s, &s.client, pd2_srq);
    destroy_srq(&s, &s.server, server_srq);
    s.cm.dealloc_pd(pd2).map_err(|(e, _)| e).unwrap();
    s.cm.dealloc_pd(server_pd).map_err(|(e, _)| e).unwrap();

    // post_recv goes to the SRQ: max_wr receives fit, the next is ENOMEM
    let b = buf(&id, 64 * 16);
    for i in 0..15u64 {
        id.post_recv(i, b.addr() + i * 64, 64, &b.mr).unwrap();
    }
    assert_eq!(id.post_recv(99, b.addr(), 64, &b.mr), Err(Error::NoMemory));
    // the REQ carries srq = 1
    let ch = s.cm.create_event_channel().unwrap();
    id.migrate_id(Some(&ch)).unwrap();
    id.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    assert!(conn_data(&conn.event().unwrap().param).srq, "REQ srq = 1");
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Established);
    // the REP does not (the server's QP has no SRQ)
    assert!(!conn_data(&ev.param).srq);
    cm::ack_cm_event(ev);
    id.migrate_id(None).unwrap();
    drop(ch);
    let sb = buf(&conn, 4096);
    sb.mem.write(0, b"into the id's SRQ").unwrap();
    conn.post_send(1, sb.addr(), 17, &sb.mr, verbs::SendFlags::SIGNALED)
        .unwrap();
    let w = id.get_recv_comp().unwrap();
    assert_eq!((w.wr_id, w.status, w.byte_len), (0, WcStatus::Success, 17));
    let mut got = [0u8; 17];
    b.mem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"into the id's SRQ");
    assert_eq!(conn.get_send_comp().unwrap().status, WcStatus::Success);
    // the receive is back in the SRQ's free list: one more fits
    id.post_recv(15, b.addr(), 64, &b.mr).unwrap();
    sb.free(&conn);
    b.free(&id);
    drop(conn);
    // destroy_ep: QP, then its CQs, then their channels (EQs), then the SRQ (an RMP at ISSI 1)
    let before = s.client.tb.device().command_log().len();
    drop(id);
    let log: Vec<u16> = s.client.tb.device().command_log()[before..]
        .iter()
        .map(|r| r.opcode)
        .filter(|o| {
            use firmware_interface::opcode as op;
            [
                op::DESTROY_QP,
                op::DESTROY_CQ,
                op::DESTROY_EQ,
                op::DESTROY_RMP,
            ]
            .contains(o)
        })
        .collect();
    {
        use firmware_interface::opcode as op;
        assert_eq!(
            log,
            vec![
                op::DESTROY_QP,
                op::DESTROY_CQ,
                op::DESTROY_CQ,
                op::DESTROY_EQ,
                op::DESTROY_EQ,
                op::DESTROY_RMP
            ]
        );
    }
    assert_eq!(s.client.tb.live().srqs, 0);
    drop(listen);
    s.teardown();
}

/// Listener CQs, error case: saved attributes naming a CQ of another device. `get_request` cannot
/// make the QP: EINVAL, the new id is destroyed and the peer rejected (no leak on either side).
#[test]
fn b8_saved_cq_of_another_device_is_einval() {
    let s = setup(84);
    let foreign = user_cq(&s, &s.client);
    let mut saved = QpInitAttr {
        send_cq: Some(foreign.clone()),
        recv_cq: Some(foreign.clone()),
        ..attr()
    };
    let listen = listener_with(&s, None, &mut saved);
    drop(saved);
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let client = s.cm.create_ep(&res, None, Some(&mut attr())).unwrap();
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    assert_eq!(listen.get_request().err(), Some(Error::InvalidArgument));
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Rejected, "{ev:?}");
    cm::ack_cm_event(ev);
    drop(client);
    drop(ch);
    drop(listen);
    destroy_cq(&s, &s.client, foreign);
    s.teardown();
}
