//! The connection manager on EFA: two emulated EFAs on the in-process fabric under one
//! manager, whose messages travel on the datagram transport (the manager's own UD QP, no QP1).
//! create_ep + connect (SIDR) + SEND/RECV on UD and on SRD; SRD RDMA READ and WRITE with the
//! keys exchanged in the private data; a service nobody listens on; a client of the other QP
//! type (UD to SRD, SRD to UD) refused with SIDR status 2 before the listener hears of it, and
//! a SIDR_REQ that names no QP type (an older manager's) answered as before; the exchange over
//! a lossy, duplicating fabric; connected (RC) ids get librdmacm's errno.

use std::net::Ipv4Addr;
use std::sync::Arc;

use cm::{
    AddrInfo, Cm, CmConfig, ConnParam, DeviceId, Error, EventParam, EventType, PortSpace,
    QpInitAttr, RaiFlags, UdData, getaddrinfo,
};
use nic_emulator::efa::{DeviceError, Profile};
use nic_emulator::roce_wire::fabric::FaultConfig;
use nic_testbed::World;
use nic_testbed::efa::{EfaDevice, EfaTestbed};
use verbs::{
    MemoryRegion, Provider, QpCap, QpType, RemoteOp, SendFlags, SendWr, Sge, UdDest, WcOpcode,
    WcStatus, WrOpcode,
};

type Id = cm::CmId<EfaDevice>;

const SERVER: &str = "127.0.0.2";
const CLIENT: &str = "127.0.0.1";
const PORT: &str = "7471";

struct Node {
    tb: EfaTestbed,
    dev: DeviceId,
}

struct Setup {
    world: Arc<World>,
    cm: Cm<EfaDevice>,
    client: Node,
    server: Node,
}

fn add(cm: &Cm<EfaDevice>, tb: EfaTestbed) -> Node {
    let dev = tb.probe(efa::Config::default()).expect("bring-up");
    // EFA has no MAC: the manager does not use it
    let id = cm.add_device(dev, [0; 6]).map_err(|(e, _)| e).unwrap();
    Node { tb, dev: id }
}

fn setup(seed: u64) -> Setup {
    let world = World::new(seed);
    let ctb = world.efa_at(CLIENT.parse().unwrap(), Profile::default());
    let stb = world.efa_at(SERVER.parse().unwrap(), Profile::default());
    let cm = Cm::new(
        ctb.platform(),
        CmConfig {
            // a hang is a test failure (virtual time: 10 minutes)
            wait_limit_ns: Some(600_000_000_000),
            ..CmConfig::default()
        },
    );
    let client = add(&cm, ctb);
    let server = add(&cm, stb);
    Setup {
        world,
        cm,
        client,
        server,
    }
}

impl Setup {
    /// Every device removed and shut down, nothing left on the emulated EFAs. The device
    /// notes an AH made twice for one destination (the manager's and the application's) and
    /// nothing else.
    fn teardown(self) {
        assert_eq!(self.cm.live(), (0, 0), "ids and channels left");
        for n in [self.client, self.server] {
            let p = self.cm.remove_device(n.dev).expect("remove device");
            p.shutdown().unwrap();
            assert_eq!(n.tb.live(), Default::default());
            let errors: Vec<DeviceError> =
                n.tb.device()
                    .errors()
                    .iter()
                    .filter(|e| !matches!(e, DeviceError::DuplicateAh { .. }))
                    .cloned()
                    .collect();
            assert_eq!(errors, vec![]);
        }
    }
}

fn hints(passive: bool, qp_type: QpType) -> AddrInfo {
    AddrInfo {
        ai_flags: if passive {
            RaiFlags::PASSIVE
        } else {
            RaiFlags::default()
        },
        ai_qp_type: Some(qp_type),
        ai_src_addr: (!passive).then(|| format!("{CLIENT}:0").parse().unwrap()),
        ..AddrInfo::default()
    }
}

fn attr() -> QpInitAttr<efa::Cq, efa::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

fn listener(s: &Setup, qp_type: QpType) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&hints(true, qp_type))).unwrap();
    assert_eq!(
        (res.ai_port_space, res.ai_qp_type),
        (Some(PortSpace::UDP), Some(qp_type))
    );
    let mut a = attr();
    let l = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    l.listen(0).unwrap();
    l
}

fn client(s: &Setup, qp_type: QpType) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&hints(false, qp_type))).unwrap();
    let mut a = attr();
    let id = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    assert_eq!(a.qp_type, qp_type);
    assert_eq!(id.device(), Some(s.client.dev));
    let q = id
        .with_verbs(|v| v.provider.query_qp(v.qp.unwrap()))
        .unwrap()
        .unwrap();
    // a datagram QP is ready to send as soon as it exists
    assert_eq!(
        (q.qp_state, q.qkey),
        (verbs::QpState::Rts, cm::RDMA_UDP_QKEY)
    );
    id
}

struct Buf {
    mem: verbs::Buffer,
    mr: efa::Mr,
}

fn buf(id: &Id, len: usize) -> Buf {
    let mem = id.alloc_buf(len).unwrap();
    let mr = id.reg_msgs(mem.clone()).unwrap();
    Buf { mem, mr }
}

/// The client connects with `hello`, the server accepts with `welcome`; returns (listener,
/// client, server side, the client's ESTABLISHED parameters). The server side has a receive
/// of 64 bytes posted (wr_id 5) before it accepts.
fn connect(s: &Setup, qp_type: QpType, hello: &[u8], welcome: &[u8]) -> (Id, Id, Id, UdData, Buf) {
    let listen = listener(s, qp_type);
    let (client, conn, ud, rbuf) = connect_to(s, &listen, qp_type, hello, welcome);
    (listen, client, conn, ud, rbuf)
}

/// [`connect`] to the (synchronous) listener `listen`: returns (client, server side, the
/// client's ESTABLISHED parameters, the server side's receive buffer).
fn connect_to(
    s: &Setup,
    listen: &Id,
    qp_type: QpType,
    hello: &[u8],
    welcome: &[u8],
) -> (Id, Id, UdData, Buf) {
    let client = client(s, qp_type);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client
        .connect(Some(&ConnParam {
            private_data: hello,
            ..ConnParam::default()
        }))
        .unwrap();
    let conn = listen.get_request().unwrap();
    let req = conn.event().unwrap();
    let EventParam::Ud(ud) = &req.param else {
        panic!("{req:?}")
    };
    assert_eq!(ud.private_data.len(), 180);
    assert_eq!(&ud.private_data[..hello.len()], hello);
    assert!(conn.qp_num().is_some());
    let rbuf = buf(&conn, 4096);
    conn.post_recv(5, rbuf.mem.addr(), 64, &rbuf.mr).unwrap();
    conn.accept(Some(&ConnParam {
        private_data: welcome,
        ..ConnParam::default()
    }))
    .unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    let EventParam::Ud(ud) = ev.param.clone() else {
        panic!("datagram parameters")
    };
    assert_eq!(ud.qp_num, conn.qp_num().unwrap());
    assert_eq!(ud.qkey, cm::RDMA_UDP_QKEY);
    assert_eq!(ud.private_data.len(), 136);
    assert_eq!(&ud.private_data[..welcome.len()], welcome);
    // the peer's device address: its IPv4-mapped GID
    assert_eq!(
        ud.ah_attr.dgid,
        verbs::Gid::from_ipv4(SERVER.parse::<Ipv4Addr>().unwrap().octets())
    );
    drop(ev);
    client.migrate_id(None).unwrap();
    drop(ch);
    (client, conn, ud, rbuf)
}

/// A datagram from the client to the server's posted receive, checked.
fn datagram(client: &Id, conn: &Id, ud: &UdData, rbuf: &Buf, ah: &efa::Ah) {
    let sbuf = buf(client, 4096);
    sbuf.mem.write(0, b"a datagram!").unwrap();
    client
        .post_ud_send(
            1,
            sbuf.mem.addr(),
            11,
            &sbuf.mr,
            SendFlags::SIGNALED,
            ah,
            ud.qp_num,
        )
        .unwrap();
    assert_eq!(client.get_send_comp().unwrap().status, WcStatus::Success);
    let wc = conn.get_recv_comp().unwrap();
    // no GRH on EFA: the payload starts at the buffer
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (5, WcStatus::Success, 11)
    );
    assert_eq!(wc.src_qp, client.qp_num().unwrap());
    let mut got = [0u8; 11];
    rbuf.mem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"a datagram!");
    client.dereg_mr(sbuf.mr).unwrap();
}

fn create_ah(id: &Id, ud: &UdData) -> efa::Ah {
    id.with_verbs(|v| v.provider.create_ah(v.pd.unwrap(), &ud.ah_attr))
        .unwrap()
        .unwrap()
}

fn destroy_ah(id: &Id, ah: efa::Ah) {
    id.with_verbs(|v| v.provider.destroy_ah(ah).map_err(|e| e.error))
        .unwrap()
        .unwrap();
}

#[test]
fn both_managers_sit_on_the_same_well_known_qp() {
    let s = setup(1);
    let c = s.cm.device(s.client.dev).unwrap();
    let v = s.cm.device(s.server.dev).unwrap();
    assert_eq!(c.cm_qpn, v.cm_qpn);
    assert_ne!(c.cm_qpn, 1 << 24);
    assert_eq!(
        (c.ip, v.ip),
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap())
    );
    s.teardown();
}

#[test]
fn ud_create_ep_connect_and_a_datagram() {
    let s = setup(2);
    let (listen, client, conn, ud, rbuf) = connect(&s, QpType::Ud, b"ud hello", b"welcome");
    let ah = create_ah(&client, &ud);
    datagram(&client, &conn, &ud, &rbuf, &ah);
    destroy_ah(&client, ah);
    conn.dereg_mr(rbuf.mr).unwrap();
    drop((conn, client, listen));
    let st = s.cm.stats();
    assert_eq!((st.bad_mads, st.send_failures), (0, 0));
    s.teardown();
}

#[test]
fn srd_create_ep_connect_send_and_rdma_with_keys_in_the_private_data() {
    let s = setup(3);
    let listen = listener(&s, QpType::Srd);
    let client = client(&s, QpType::Srd);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    // the server's memory for the client's RDMA: one region it may write, one it may read
    let wmem = conn.alloc_buf(4096).unwrap();
    let wmr = conn.reg_write(wmem.clone()).unwrap();
    let rmem = conn.alloc_buf(4096).unwrap();
    let rmr = conn.reg_read(rmem.clone()).unwrap();
    rmem.write(0, b"the server's bytes to read").unwrap();
    let rbuf = buf(&conn, 4096);
    conn.post_recv(5, rbuf.mem.addr(), 64, &rbuf.mr).unwrap();
    let mut keys = Vec::new();
    for mr in [&wmr, &rmr] {
        keys.extend_from_slice(&mr.addr().to_be_bytes());
        keys.extend_from_slice(&mr.rkey().to_be_bytes());
    }
    conn.accept(Some(&ConnParam {
        private_data: &keys,
        ..ConnParam::default()
    }))
    .unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Established, 0));
    let EventParam::Ud(ud) = ev.param.clone() else {
        panic!("datagram parameters")
    };
    drop(ev);
    client.migrate_id(None).unwrap();
    drop(ch);
    assert_eq!(ud.qp_num, conn.qp_num().unwrap());
    let pd = &ud.private_data;
    let key = |o: usize| {
        (
            u64::from_be_bytes(pd[o..o + 8].try_into().unwrap()),
            u32::from_be_bytes(pd[o + 8..o + 12].try_into().unwrap()),
        )
    };
    let ((waddr, wkey), (raddr, rkey)) = (key(0), key(12));
    assert_eq!((waddr, wkey), (wmr.addr(), wmr.rkey()));

    let ah = create_ah(&client, &ud);
    // SEND / RECV on SRD
    datagram(&client, &conn, &ud, &rbuf, &ah);

    // RDMA WRITE and READ: every SRD work request names its destination
    let local = buf(&client, 4096);
    local.mem.write(0, b"written by the client").unwrap();
    let dp = client.data_path().unwrap();
    let sge = [Sge {
        addr: local.mem.addr(),
        length: 21,
        lkey: local.mr.lkey(),
    }];
    let dest = || {
        Some(UdDest {
            ah: &ah,
            remote_qpn: ud.qp_num,
            remote_qkey: ud.qkey,
        })
    };
    dp.post_send(&[SendWr {
        wr_id: 7,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: waddr,
            rkey: wkey,
        },
        dest: dest(),
        ..SendWr::default()
    }])
    .unwrap();
    let wc = client.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = [0u8; 21];
    wmem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"written by the client");

    let sge = [Sge {
        addr: local.mem.addr() + 1024,
        length: 26,
        lkey: local.mr.lkey(),
    }];
    dp.post_send(&[SendWr {
        wr_id: 8,
        opcode: WrOpcode::RdmaRead,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: raddr,
            rkey,
        },
        dest: dest(),
        ..SendWr::default()
    }])
    .unwrap();
    let wc = client.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (8, WcStatus::Success, WcOpcode::RdmaRead, 26)
    );
    let mut got = [0u8; 26];
    local.mem.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"the server's bytes to read");

    drop(dp);
    destroy_ah(&client, ah);
    client.dereg_mr(local.mr).unwrap();
    for mr in [wmr, rmr, rbuf.mr] {
        conn.dereg_mr(mr).unwrap();
    }
    drop((conn, client, listen));
    s.teardown();
}

#[test]
fn a_service_nobody_listens_on_is_unreachable_with_status_1() {
    let s = setup(4);
    for t in [QpType::Ud, QpType::Srd] {
        let c = client(&s, t);
        // SIDR status 1 "no listener" → UNREACHABLE, errno 1 (EPERM), as librdmacm
        assert_eq!(c.connect(None), Err(Error::Permission));
        let ev = c.event().unwrap();
        assert_eq!((ev.event, ev.status), (EventType::Unreachable, 1));
    }
    // rejected: status 2, ENOENT
    let listen = listener(&s, QpType::Srd);
    let c = client(&s, QpType::Srd);
    let ch = s.cm.create_event_channel().unwrap();
    c.migrate_id(Some(&ch)).unwrap();
    c.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    conn.reject(b"nope").unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, 2));
    assert_eq!(&ev.param.private_data()[..4], b"nope");
    drop((ev, conn, c, listen, ch));
    s.teardown();
}

#[test]
fn a_silent_address_times_out_after_the_retries() {
    let s = setup(5);
    let res = getaddrinfo(
        Some("127.0.0.9"),
        Some(PORT),
        Some(&hints(false, QpType::Srd)),
    )
    .unwrap();
    let mut a = attr();
    let c = s.cm.create_ep(&res, None, Some(&mut a)).unwrap();
    assert_eq!(c.connect(None), Err(Error::TimedOut));
    let ev = c.event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, -110));
    // the first try and 15 retries
    assert_eq!(s.cm.stats().retransmits, 15);
    drop((c, a));
    s.teardown();
}

#[test]
fn the_exchange_completes_over_a_lossy_duplicating_fabric() {
    let s = setup(6);
    s.world.fabric().set_faults(FaultConfig {
        loss: 0.4,
        duplicate: 0.3,
        reorder: 0.2,
        ..FaultConfig::NONE
    });
    for round in 0..4u8 {
        let hello = [b'h', round];
        let (listen, client, conn, ud, rbuf) = connect(&s, QpType::Srd, &hello, b"welcome");
        // SRD data is reliable over the same fabric
        let ah = create_ah(&client, &ud);
        datagram(&client, &conn, &ud, &rbuf, &ah);
        destroy_ah(&client, ah);
        conn.dereg_mr(rbuf.mr).unwrap();
        drop((conn, client, listen));
    }
    let st = s.cm.stats();
    assert!(st.retransmits > 0, "{st:?}");
    s.world.fabric().set_faults(FaultConfig::NONE);
    s.teardown();
}

#[test]
fn connected_ids_get_librdmacm_errnos_on_efa() {
    let s = setup(7);
    // active PS_TCP: the route cannot be resolved on a device without a CM (ENOSYS)
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&AddrInfo::default())).unwrap();
    assert_eq!(res.ai_port_space, Some(PortSpace::TCP));
    let mut a = attr();
    assert_eq!(
        s.cm.create_ep(&res, None, Some(&mut a)).err(),
        Some(Error::NotImplemented)
    );
    assert_eq!(Error::NotImplemented.errno(), 38);
    // passive PS_TCP: binding works, listening does not
    let res = getaddrinfo(
        Some(SERVER),
        Some(PORT),
        Some(&AddrInfo {
            ai_flags: RaiFlags::PASSIVE,
            ..AddrInfo::default()
        }),
    )
    .unwrap();
    let l = s.cm.create_ep(&res, None, None).unwrap();
    assert_eq!(l.listen(0), Err(Error::NotImplemented));
    drop(l);
    // an RC QP on an id bound to the EFA: the provider's EOPNOTSUPP (rdma-core's efa)
    let id = s.cm.create_id(None, 0, PortSpace::TCP).unwrap();
    id.resolve_addr(
        Some(&format!("{CLIENT}:0").parse().unwrap()),
        &format!("{SERVER}:{PORT}").parse().unwrap(),
        2000,
    )
    .unwrap();
    let mut a = attr();
    a.qp_type = QpType::Rc;
    assert_eq!(id.create_qp(None, &mut a), Err(Error::NotSupported));
    assert_eq!(Error::NotSupported.errno(), 95);
    assert_eq!(id.resolve_route(2000), Err(Error::NotImplemented));
    drop(id);
    s.teardown();
}

#[test]
fn srd_ids_post_through_the_helpers_to_their_resolved_peer_both_ways() {
    let s = setup(8);
    let listen = listener(&s, QpType::Srd);
    let client = client(&s, QpType::Srd);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(None).unwrap();
    let conn = listen.get_request().unwrap();
    // the request names the active side's QP (SRD only)
    let req = conn.event().unwrap();
    let EventParam::Ud(ud) = &req.param else {
        panic!("{req:?}")
    };
    assert_eq!(ud.qp_num, client.qp_num().unwrap());
    assert_eq!(ud.qkey, cm::RDMA_UDP_QKEY);
    let sbuf = buf(&conn, 4096);
    let cbuf = buf(&client, 4096);
    conn.post_recv(1, sbuf.mem.addr(), 64, &sbuf.mr).unwrap();
    client
        .post_recv(2, cbuf.mem.addr() + 2048, 64, &cbuf.mr)
        .unwrap();
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, EventType::Established);
    drop(ev);

    // client → server: a SEND with no destination goes to the peer
    cbuf.mem.write(0, b"ping").unwrap();
    client
        .post_send(3, cbuf.mem.addr(), 4, &cbuf.mr, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(client.get_send_comp().unwrap().status, WcStatus::Success);
    let wc = conn.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (1, 4));
    let mut got = [0u8; 4];
    sbuf.mem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"ping");
    // server → client, and an RDMA WRITE and READ of the client's memory by the server
    let wmem = client.alloc_buf(4096).unwrap();
    let wmr = client.reg_write(wmem.clone()).unwrap();
    let rmem = client.alloc_buf(4096).unwrap();
    let rmr = client.reg_read(rmem.clone()).unwrap();
    rmem.write(0, b"read me").unwrap();
    sbuf.mem.write(100, b"pong").unwrap();
    conn.post_send(4, sbuf.mem.addr() + 100, 4, &sbuf.mr, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(conn.get_send_comp().unwrap().status, WcStatus::Success);
    let wc = client.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (2, 4));
    cbuf.mem.read(2048, &mut got).unwrap();
    assert_eq!(&got, b"pong");
    conn.post_write(
        5,
        sbuf.mem.addr() + 100,
        4,
        &sbuf.mr,
        SendFlags::SIGNALED,
        wmr.addr(),
        wmr.rkey(),
    )
    .unwrap();
    assert_eq!(conn.get_send_comp().unwrap().status, WcStatus::Success);
    wmem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"pong");
    conn.post_read(
        6,
        sbuf.mem.addr() + 200,
        7,
        &sbuf.mr,
        SendFlags::SIGNALED,
        rmr.addr(),
        rmr.rkey(),
    )
    .unwrap();
    let wc = conn.get_send_comp().unwrap();
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 7));
    let mut got = [0u8; 7];
    sbuf.mem.read(200, &mut got).unwrap();
    assert_eq!(&got, b"read me");

    // the id's data path (the thread-per-core posts) likewise, for a batch of two
    conn.post_recv(9, sbuf.mem.addr() + 300, 64, &sbuf.mr)
        .unwrap();
    conn.post_recv(10, sbuf.mem.addr() + 400, 64, &sbuf.mr)
        .unwrap();
    cbuf.mem.write(100, b"dp!").unwrap();
    let sge = [Sge {
        addr: cbuf.mem.addr() + 100,
        length: 3,
        lkey: cbuf.mr.lkey(),
    }];
    let wr = |wr_id| SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
        ..SendWr::default()
    };
    client
        .data_path()
        .unwrap()
        .post_send(&[wr(11), wr(12)])
        .unwrap();
    for _ in 0..2 {
        assert_eq!(client.get_send_comp().unwrap().status, WcStatus::Success);
    }
    let mut ids = Vec::new();
    for _ in 0..2 {
        let wc = conn.get_recv_comp().unwrap();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 3));
        ids.push(wc.wr_id);
    }
    ids.sort();
    assert_eq!(ids, [9, 10]);
    let mut got = [0u8; 3];
    sbuf.mem.read(400, &mut got).unwrap();
    assert_eq!(&got, b"dp!");

    for mr in [cbuf.mr, wmr, rmr] {
        client.dereg_mr(mr).unwrap();
    }
    conn.dereg_mr(sbuf.mr).unwrap();
    client.migrate_id(None).unwrap();
    // a synchronous datagram id has no connection and no event to wait for
    client.disconnect().unwrap();
    conn.disconnect().unwrap();
    let q = client
        .with_verbs(|v| v.provider.query_qp(v.qp.unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(q.qp_state, verbs::QpState::Err);
    drop((ch, conn, client, listen));
    s.teardown();
}

#[test]
fn a_peer_gid_given_to_the_manager_names_the_peer() {
    let s = setup(9);
    let server_ip: Ipv4Addr = SERVER.parse().unwrap();
    let client_ip: Ipv4Addr = CLIENT.parse().unwrap();
    let nowhere = verbs::Gid::from_ipv4([127, 0, 0, 9]);
    // a wrong device address for the server: the messages go there and nobody answers
    // (at the right one, with no listener yet, the server's manager would answer status 1)
    s.cm.set_peer_gid(s.client.dev, server_ip, nowhere).unwrap();
    let c = client(&s, QpType::Srd);
    assert_eq!(c.connect(None), Err(Error::TimedOut));
    let ev = c.event().unwrap();
    assert_eq!((ev.event, ev.status), (EventType::Unreachable, -110));
    drop((ev, c));
    // the right one: the service resolves
    let right = verbs::Gid::from_ipv4(server_ip.octets());
    s.cm.set_peer_gid(s.client.dev, server_ip, right).unwrap();
    let (listen, c, conn, ud, rbuf) = connect(&s, QpType::Srd, b"again", b"yes");
    assert_eq!(ud.ah_attr.dgid, right);
    conn.dereg_mr(rbuf.mr).unwrap();
    drop((listen, c, conn));
    // the server's manager learnt the client's address from its header
    assert_eq!(
        s.cm.set_peer_gid(
            s.server.dev,
            client_ip,
            verbs::Gid::from_ipv4(client_ip.octets())
        ),
        Ok(())
    );
    s.teardown();
}

#[test]
fn a_client_of_the_other_qp_type_is_refused_before_the_listener_hears_of_it() {
    let s = setup(10);
    for (want, serve) in [(QpType::Ud, QpType::Srd), (QpType::Srd, QpType::Ud)] {
        let listen = listener(&s, serve);
        let lch = s.cm.create_event_channel().unwrap();
        listen.migrate_id(Some(&lch)).unwrap();
        let c = client(&s, want);
        // SIDR status 2 "rejected" → UNREACHABLE with that status, errno ENOENT (librdmacm)
        assert_eq!(
            c.connect(None),
            Err(Error::NoEntry),
            "{want:?} to {serve:?}"
        );
        let ev = c.event().unwrap();
        assert_eq!((ev.event, ev.status), (EventType::Unreachable, 2));
        // the passive side answered without a CONNECT_REQUEST (it would be queued by now:
        // the REP went out in the same pass that took the SIDR_REQ)
        assert!(
            !lch.has_events(),
            "{want:?} to {serve:?}: the listener heard of it"
        );
        drop((ev, c));
        // the same listener serves a client of its own type, and data flows
        listen.migrate_id(None).unwrap();
        drop(lch);
        let (client, conn, ud, rbuf) = connect_to(&s, &listen, serve, b"same type", b"ok");
        let ah = create_ah(&client, &ud);
        datagram(&client, &conn, &ud, &rbuf, &ah);
        destroy_ah(&client, ah);
        conn.dereg_mr(rbuf.mr).unwrap();
        drop((conn, client, listen));
    }
    let st = s.cm.stats();
    assert_eq!(st.qp_type_mismatches, 2, "{st:?}");
    assert_eq!((st.bad_mads, st.send_failures), (0, 0), "{st:?}");
    s.teardown();
}

/// A UD id's QP playing a peer's manager: its Q_Key made the managers' (so that a SIDR_REP
/// reaches it), receives posted for `reps` replies, an AH to the server's manager.
struct RawPeer {
    id: Id,
    b: Buf,
    ah: efa::Ah,
    cm_qpn: u32,
    sent: u64,
}

const RAW_LEN: usize = cm::mad::DGRAM_HEADER_SIZE + cm::mad::MAD_SIZE;

impl RawPeer {
    fn new(s: &Setup, reps: u64) -> RawPeer {
        use cm::mad::DGRAM_CM_QKEY;
        let id = client(s, QpType::Ud);
        id.with_verbs(|v| {
            v.provider.modify_qp(
                v.qp.unwrap(),
                &verbs::QpAttr {
                    qkey: DGRAM_CM_QKEY,
                    ..verbs::QpAttr::default()
                },
                verbs::QpAttrMask::QKEY,
            )
        })
        .unwrap()
        .unwrap();
        let b = buf(&id, 8192);
        for i in 0..reps {
            let at = 4096 + i * 512;
            id.post_recv(100 + i, b.mem.addr() + at, RAW_LEN as u32, &b.mr)
                .unwrap();
        }
        let cm_qpn = s.cm.device(s.server.dev).unwrap().cm_qpn;
        let server: Ipv4Addr = SERVER.parse().unwrap();
        let ah = create_ah(
            &id,
            &UdData {
                private_data: Vec::new(),
                ah_attr: verbs::AhAttr {
                    dgid: verbs::Gid::from_ipv4(server.octets()),
                    port_num: 1,
                    is_global: true,
                    ..verbs::AhAttr::default()
                },
                qp_num: cm_qpn,
                qkey: DGRAM_CM_QKEY,
            },
        );
        RawPeer {
            id,
            b,
            ah,
            cm_qpn,
            sent: 0,
        }
    }

    /// Sends a SIDR_REQ for the listener's service as a peer's manager would, with `qp_type`
    /// in byte 5 of the header and request ID `request_id` (also the first byte of the
    /// application's private data).
    fn sidr_req(&mut self, qp_type: u8, request_id: u32) {
        use cm::mad::{
            CmMad, CmMessage, CmaAddrs, CmaHeader, DGRAM_CM_QKEY, DGRAM_HEADER_SIZE, DgramHeader,
            SidrReq, limits, port_space, service_id,
        };
        let client: Ipv4Addr = CLIENT.parse().unwrap();
        let mut pd = [0u8; limits::SIDR_REQ];
        pd[..limits::CMA_HEADER].copy_from_slice(
            &CmaHeader {
                src_port: 4791,
                addrs: CmaAddrs::V4 {
                    src: client,
                    dst: SERVER.parse().unwrap(),
                },
            }
            .encode(),
        );
        pd[limits::CMA_HEADER] = request_id as u8;
        let header = DgramHeader {
            ip: client,
            qpn: self.id.qp_num().unwrap(),
            gid: verbs::Gid::from_ipv4(client.octets()).0,
            qp_type,
        }
        .encode();
        let mad = CmMad {
            tid: (0x77 << 32) | u64::from(request_id),
            attr_mod: 0,
            msg: CmMessage::SidrReq(SidrReq {
                request_id,
                partition_key: 0xFFFF,
                service_id: service_id(port_space::UDP, PORT.parse().unwrap()),
                private_data: pd,
            }),
        }
        .encode();
        let at = self.sent * 512;
        self.sent += 1;
        self.b.mem.write(at as usize, &header).unwrap();
        self.b
            .mem
            .write(at as usize + DGRAM_HEADER_SIZE, &mad)
            .unwrap();
        let sge = [Sge {
            addr: self.b.mem.addr() + at,
            length: RAW_LEN as u32,
            lkey: self.b.mr.lkey(),
        }];
        self.id
            .data_path()
            .unwrap()
            .post_send(&[SendWr {
                wr_id: self.sent,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                sg_list: &sge,
                dest: Some(UdDest {
                    ah: &self.ah,
                    remote_qpn: self.cm_qpn,
                    remote_qkey: DGRAM_CM_QKEY,
                }),
                ..SendWr::default()
            }])
            .unwrap();
        assert_eq!(self.id.get_send_comp().unwrap().status, WcStatus::Success);
    }

    /// The next SIDR_REP from the server's manager: (request ID, status).
    fn sidr_rep(&self) -> (u32, u8) {
        use cm::mad::{CmMad, CmMessage, DGRAM_HEADER_SIZE, DgramHeader};
        let wc = self.id.get_recv_comp().unwrap();
        assert_eq!(
            (wc.status, wc.byte_len as usize),
            (WcStatus::Success, RAW_LEN)
        );
        let mut got = [0u8; RAW_LEN];
        self.b
            .mem
            .read(4096 + (wc.wr_id as usize - 100) * 512, &mut got)
            .unwrap();
        let h = DgramHeader::decode(&got).expect("the manager's header");
        // only a SIDR_REQ says a QP type
        assert_eq!((h.ip, h.qp_type), (SERVER.parse::<Ipv4Addr>().unwrap(), 0));
        let mad = CmMad::decode(got[DGRAM_HEADER_SIZE..].try_into().unwrap()).unwrap();
        let CmMessage::SidrRep(rep) = mad.msg else {
            panic!("{mad:?}")
        };
        (rep.request_id, rep.status)
    }

    fn destroy(self) {
        destroy_ah(&self.id, self.ah);
        self.id.dereg_mr(self.b.mr).unwrap();
    }
}

/// The listener's next request: the first byte of its application private data.
fn next_request(listen: &Id) -> (Id, u8) {
    let c = listen.get_request().unwrap();
    let ev = c.event().unwrap();
    assert_eq!(ev.event, EventType::ConnectRequest);
    let EventParam::Ud(ud) = &ev.param else {
        panic!("{ev:?}")
    };
    let first = ud.private_data[0];
    drop(ev);
    (c, first)
}

#[test]
fn a_sidr_req_that_names_no_qp_type_is_answered_as_before_the_check() {
    use cm::mad::dgram_qp_type;
    let s = setup(11);
    let listen = listener(&s, QpType::Srd);
    let mut raw = RawPeer::new(&s, 4);
    // UD (refused), a type nobody serves (refused), SRD (the listener's), in this order: the
    // listener's first request is the SRD one
    raw.sidr_req(dgram_qp_type::UD, 1);
    raw.sidr_req(9, 2);
    raw.sidr_req(dgram_qp_type::SRD, 3);
    let (c, first) = next_request(&listen);
    assert_eq!(
        first, 3,
        "the listener heard of a request of the wrong type"
    );
    c.accept(None).unwrap();
    let mut reps = [raw.sidr_rep(), raw.sidr_rep(), raw.sidr_rep()];
    reps.sort();
    // status 2: "rejected"
    assert_eq!(reps, [(1, 2), (2, 2), (3, 0)]);
    assert_eq!(s.cm.stats().qp_type_mismatches, 2);
    drop(c);
    // one that says nothing (an older manager): answered as before, whatever the listener's
    // type
    raw.sidr_req(dgram_qp_type::UNSAID, 4);
    let (c, first) = next_request(&listen);
    assert_eq!(first, 4);
    c.accept(None).unwrap();
    assert_eq!(raw.sidr_rep(), (4, 0));
    assert_eq!(s.cm.stats().qp_type_mismatches, 2);
    drop(c);
    raw.destroy();
    drop(listen);
    s.teardown();
}
