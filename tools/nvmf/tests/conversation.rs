//! A host and a target talking through the in-memory loopback: bring-up, I/O, keep-alive,
//! discovery, and the errors with their NVMe status codes.

mod common;

use common::*;
use nvmf::Status;
use nvmf::admin::{self, fid, lid};
use nvmf::capsule::{Sgl, Sqe};
use nvmf::discovery::{self, subtype};
use nvmf::fabrics::{Cap, Csts, DISCOVERY_NQN, prop};
use nvmf::host::{Data, HostError, HostQueue, cmd};
use nvmf::io::{self, DsmRange};
use nvmf::rdma::{ConnectRequest, RejectStatus};

type Q = HostQueue<Loopback>;

fn status_of(r: Result<impl std::fmt::Debug, HostError<LoopError>>) -> (Status, u32) {
    match r {
        Err(HostError::Status(s, dw0)) => (s, dw0),
        other => panic!("expected an NVMe error status, got {other:?}"),
    }
}

/// Asserts a failure with `code` and the given DNR; MORE is set when the error was logged.
fn assert_status(r: Result<impl std::fmt::Debug, HostError<LoopError>>, code: Status, dnr: bool) {
    let (s, _) = status_of(r);
    assert_eq!(s.code(), code, "status {s:?}");
    assert_eq!(s.is_dnr(), dnr, "DNR of {s:?}");
}

/// Admin queue connected and enabled; returns it with the controller id.
fn bring_up(s: &Setup, subnqn: &str, kato: u32) -> (Q, u16) {
    let mut a = open_queue(s, 0, 32);
    let cntlid = a.connect_admin(&params(subnqn, kato)).unwrap();
    a.enable(4).unwrap();
    (a, cntlid)
}

fn io_queue(s: &Setup, qid: u16, cntlid: u16) -> Q {
    let mut q = open_queue(s, qid, 128);
    assert_eq!(q.connect(&params(SUBNQN, 0), cntlid).unwrap(), cntlid);
    q
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn bring_up_identify_and_io_on_two_queues() {
    let s = setup();
    let mut a = open_queue(&s, 0, 32);
    let cntlid = a.connect_admin(&params(SUBNQN, 5000)).unwrap();
    assert!((1..=0xFFEF).contains(&cntlid));
    // The admin Connect data went by RDMA READ (no in-capsule data on the admin queue).
    assert_eq!((a.transport.keyed_sent, a.transport.inline_sent), (1, 0));

    // Before CC.EN: admin commands are a command sequence error.
    assert_status(
        a.identify_controller(),
        Status::COMMAND_SEQUENCE_ERROR,
        true,
    );

    // The handshake, step by step.
    let cap = Cap(a.property_get(prop::CAP, true).unwrap());
    assert_eq!((cap.mqes(), cap.css(), cap.mpsmin()), (127, 1, 0));
    assert!(cap.to() >= 1);
    assert_eq!(a.property_get(prop::CSTS, false).unwrap(), 0);
    a.property_set(prop::CC, 0x0046_0000).unwrap();
    a.property_set(prop::CC, 0x0046_0001).unwrap();
    assert_eq!(a.property_get(prop::CC, false).unwrap(), 0x0046_0001);
    assert!(Csts(a.property_get(prop::CSTS, false).unwrap() as u32).rdy());
    assert_eq!(a.property_get(prop::VS, false).unwrap(), 0x0001_0300);

    let id = a.identify_controller().unwrap();
    assert_eq!(id.cntlid, cntlid);
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(
        (id.sn.as_str(), id.mn.as_str()),
        ("SN-0001", "rdma-stack nvmf")
    );
    assert_eq!(id.cntrltype, admin::CNTRLTYPE_IO);
    assert!(id.kas >= 1 && id.maxcmd >= 128);
    assert_eq!(id.sgls, 0x0010_0005);
    assert_eq!((id.ioccsz, id.iorcsz, id.icdoff), (260, 1, 0));
    assert_eq!((id.mdts, id.nn, id.sqes, id.cqes), (8, 3, 0x66, 0x44));
    assert_eq!(id.oncs, admin::ONCS_DSM | admin::ONCS_WRITE_ZEROES);

    assert_eq!(a.active_namespaces(0).unwrap(), vec![1, 2, 3]);
    assert_eq!(a.active_namespaces(1).unwrap(), vec![2, 3]);
    let ns1 = a.identify_namespace(1).unwrap();
    assert_eq!(
        (ns1.nsze, ns1.ncap, ns1.block_size()),
        (4096, 4096, Some(512))
    );
    let ns2 = a.identify_namespace(2).unwrap();
    assert_eq!((ns2.nsze, ns2.block_size()), (64, Some(4096)));
    // An inactive NSID: zeroed structure, success.
    assert_eq!(a.identify_namespace(9).unwrap().nsze, 0);
    let d = a.ns_descriptors(1).unwrap();
    assert_eq!(d[0].nidt, admin::nidt::UUID);
    assert_eq!(d[0].value, NS1_UUID);
    assert_eq!(d.last().unwrap().nidt, admin::nidt::CSI);
    assert_eq!(a.set_num_queues(2).unwrap(), 2);
    assert_eq!(a.get_features(fid::NUM_QUEUES, 0).unwrap(), 0x0003_0003);
    assert_eq!(a.get_features(fid::KATO, 0).unwrap(), 5000);

    let mut q1 = io_queue(&s, 1, cntlid);
    let mut q2 = io_queue(&s, 2, cntlid);

    // A 4 KiB write goes in the capsule, a 64 KiB one by RDMA READ; both read back through
    // the other queue (by RDMA WRITE).
    let small = pattern(4096, 1);
    let big = pattern(64 * 1024, 2);
    q1.write(1, 8, 512, &small).unwrap();
    q1.write(1, 100, 512, &big).unwrap();
    assert_eq!((q1.transport.inline_sent, q1.transport.keyed_sent), (2, 1));
    let mut back = vec![0u8; 4096];
    q2.read(1, 8, 512, &mut back).unwrap();
    assert_eq!(back, small);
    let mut back = vec![0u8; big.len()];
    q2.read(1, 100, 512, &mut back).unwrap();
    assert_eq!(back, big);
    q1.flush(1).unwrap();

    // Namespace 2 has 4 KiB blocks.
    let b2 = pattern(8192, 3);
    q2.write(2, 62, 4096, &b2).unwrap();
    let mut back = vec![0u8; 8192];
    q1.read(2, 62, 4096, &mut back).unwrap();
    assert_eq!(back, b2);

    // Write Zeroes: blocks 101..=102 become zero, the rest of the big write stays.
    q1.write_zeroes(1, 101, 2).unwrap();
    let mut back = vec![0u8; 4 * 512];
    q2.read(1, 100, 512, &mut back).unwrap();
    assert_eq!(&back[..512], &big[..512]);
    assert!(back[512..1536].iter().all(|&b| b == 0));
    assert_eq!(&back[1536..], &big[1536..2048]);

    // Deallocate two ranges: they read back as zeroes.
    q2.deallocate(
        1,
        &[
            DsmRange {
                cattr: 0,
                nlb: 4,
                slba: 110,
            },
            DsmRange {
                cattr: 0,
                nlb: 1,
                slba: 8,
            },
        ],
    )
    .unwrap();
    let mut back = vec![0u8; 6 * 512];
    q1.read(1, 109, 512, &mut back).unwrap();
    assert_eq!(&back[..512], &big[9 * 512..10 * 512]);
    assert!(back[512..5 * 512].iter().all(|&b| b == 0));
    assert_eq!(&back[5 * 512..], &big[14 * 512..15 * 512]);
    let mut back = vec![0u8; 1024];
    q1.read(1, 8, 512, &mut back).unwrap();
    assert!(back[..512].iter().all(|&b| b == 0));
    assert_eq!(&back[512..], &small[512..1024]);

    a.keep_alive().unwrap();

    // SMART: 3 writes and 6 reads so far on the I/O queues.
    let mut smart = vec![0u8; admin::SMART_LOG_LEN];
    a.get_log_page(lid::SMART, admin::NSID_ALL, 0, false, &mut smart)
        .unwrap();
    let smart = admin::SmartLog::decode(&smart).unwrap();
    assert_eq!((smart.host_writes, smart.host_reads), (3, 6));
    assert_eq!(smart.data_units_written, 1); // 76 KiB = 152 units of 512 B -> 1 thousand
    let mut fw = vec![0u8; admin::FIRMWARE_SLOT_LOG_LEN];
    a.get_log_page(lid::FIRMWARE_SLOT, 0, 0, false, &mut fw)
        .unwrap();
    assert_eq!((fw[0], &fw[8..13]), (1, &b"0.1.0"[..]));

    // Disconnect frees queue id 2 for a new connection.
    q2.disconnect().unwrap();
    assert!(q2.transport.closed);
    let mut q2 = io_queue(&s, 2, cntlid);
    let mut back = vec![0u8; 512];
    q2.read(1, 9, 512, &mut back).unwrap();
    assert_eq!(back, small[512..1024]);

    // Shutdown: SHST complete, RDY clear, and I/O is refused.
    let csts = a.shutdown().unwrap();
    assert_eq!((csts.shst(), csts.rdy()), (2, false));
    assert_status(
        q1.read(1, 0, 512, &mut back),
        Status::COMMAND_SEQUENCE_ERROR,
        true,
    );
}

/// Traffic-based keep-alive (CTRATT.TBKAS, as Identify says): any command on any of the
/// controller's queues restarts the timer; silence for KATO fails the controller.
#[test]
fn traffic_keeps_a_controller_alive() {
    let s = setup();
    let (mut a, cntlid) = bring_up(&s, SUBNQN, 5000);
    let ctrl = a.identify_controller().unwrap();
    assert_ne!(ctrl.ctratt & nvmf::admin::CTRATT_TBKAS, 0);
    let mut q1 = io_queue(&s, 1, cntlid);
    let mut buf = vec![0u8; 512];
    // Reads only, never a Keep Alive, every 4 s: alive long past the first deadline.
    for t in [4_000, 8_000, 12_000, 16_000] {
        s.now.set(t);
        q1.read(1, 0, 512, &mut buf).unwrap();
        s.now.set(t + 3_999);
        assert!(s.target.check_keep_alive(s.now.get()).is_empty(), "at {t}");
    }
    // Then silence for more than KATO.
    s.now.set(16_000 + 5_001);
    assert_eq!(s.target.check_keep_alive(s.now.get()), vec![cntlid]);
}

#[test]
fn keep_alive_timer_and_expiry() {
    let s = setup();
    let (mut a, cntlid) = bring_up(&s, SUBNQN, 5000);
    let mut q1 = io_queue(&s, 1, cntlid);
    s.now.set(4_000);
    a.keep_alive().unwrap();
    s.now.set(8_900);
    assert!(s.target.check_keep_alive(s.now.get()).is_empty());
    // KATO 3500 ms rounds up to 4 s, from the Set Features on.
    a.set_features(fid::KATO, 3500).unwrap();
    assert_eq!(a.get_features(fid::KATO, 0).unwrap(), 4000);
    s.now.set(12_900);
    assert!(s.target.check_keep_alive(s.now.get()).is_empty());
    let ctrl = s.target.controller(cntlid).unwrap();
    s.now.set(12_901);
    assert_eq!(s.target.check_keep_alive(s.now.get()), vec![cntlid]);
    assert!(ctrl.csts().cfs() && !ctrl.csts().rdy() && ctrl.is_dead());
    assert_eq!(s.target.controller_count(), 0);
    // Every queue of the controller is dead: the transport is told to disconnect.
    assert_eq!(
        a.keep_alive(),
        Err(HostError::Transport(LoopError::Disconnected))
    );
    let mut buf = vec![0u8; 512];
    assert_eq!(
        q1.read(1, 0, 512, &mut buf),
        Err(HostError::Transport(LoopError::Disconnected))
    );
    // The controller id can no longer be joined.
    let mut q2 = open_queue(&s, 2, 128);
    let (st, dw0) = status_of(q2.connect(&params(SUBNQN, 0), cntlid));
    assert_eq!(
        (st.code(), dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 0x1_0100)
    );

    // No KATO: no timer, and Keep Alive is "Keep Alive Timeout Invalid".
    let (mut a, _) = bring_up(&s, SUBNQN, 0);
    s.now.set(10_000_000);
    assert!(s.target.check_keep_alive(s.now.get()).is_empty());
    assert_status(a.keep_alive(), Status::KEEP_ALIVE_INVALID, false);
}

#[test]
fn discovery_controller_and_log() {
    let s = setup();
    let (mut a, _) = bring_up(&s, DISCOVERY_NQN, 0);
    let id = a.identify_controller().unwrap();
    assert_eq!(id.cntrltype, admin::CNTRLTYPE_DISCOVERY);
    assert_eq!(id.subnqn, DISCOVERY_NQN);
    // 1 current-discovery entry + 4 subsystems open to this host = 5 entries: 6 KiB, read in
    // two pieces.
    let (genctr, entries) = a.discovery_log(3).unwrap();
    assert!(genctr >= 1);
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[0].subtype, subtype::CURRENT_DISCOVERY);
    assert_eq!(entries[0].subnqn, DISCOVERY_NQN);
    let e = &entries[1];
    assert_eq!((e.trtype, e.adrfam, e.subtype), (1, 1, subtype::NVME));
    assert_eq!((e.portid, e.cntlid, e.asqsz), (1, 0xFFFF, 32));
    assert_eq!(e.treq, 0x06);
    assert_eq!(
        (e.trsvcid.as_str(), e.traddr.as_str()),
        ("4420", "10.0.0.2")
    );
    assert_eq!(e.subnqn, SUBNQN);
    assert_eq!(e.tsas, discovery::RdmaTsas::DEFAULT);
    assert!(
        entries
            .iter()
            .all(|e| e.subnqn != "nqn.2024-01.io.test:private")
    );
    // Past the end of the log: zeroes; an LPO beyond it or not dword aligned: invalid field.
    let mut tail = vec![0xAAu8; 1024];
    a.get_log_page(lid::DISCOVERY, 0, 6 * 1024, false, &mut tail)
        .unwrap();
    assert!(tail.iter().all(|&b| b == 0));
    assert_status(
        a.get_log_page(lid::DISCOVERY, 0, 7 * 1024, false, &mut tail),
        Status::INVALID_FIELD,
        true,
    );
    assert_status(
        a.get_log_page(lid::DISCOVERY, 0, 2, false, &mut tail),
        Status::INVALID_FIELD,
        true,
    );
    // A discovery controller has no namespaces or SMART log.
    assert_status(a.identify_namespace(1), Status::INVALID_FIELD, true);
    let mut smart = vec![0u8; 512];
    assert_status(
        a.get_log_page(lid::SMART, 0, 0, false, &mut smart),
        Status::INVALID_FIELD,
        true,
    );
    // KATO 0 on discovery: 120 s.
    s.now.set(119_000);
    assert!(s.target.check_keep_alive(s.now.get()).is_empty());
    a.keep_alive().unwrap();
    // A discovery controller takes no I/O queues.
    let cntlid = a.cntlid.unwrap();
    let mut q = open_queue(&s, 1, 32);
    let mut p = params(DISCOVERY_NQN, 0);
    p.subnqn = DISCOVERY_NQN.into();
    let (st, dw0) = status_of(q.connect(&p, cntlid));
    assert_eq!((st.code(), dw0), (Status::CONNECT_INVALID_PARAMETERS, 42));
}

#[test]
fn connect_errors() {
    let s = setup();
    // Unknown subsystem: Invalid Parameters, data offset 256.
    let mut a = open_queue(&s, 0, 32);
    let (st, dw0) = status_of(a.connect_admin(&params("nqn.2024-01.io.test:nope", 0)));
    assert_eq!(
        (st, dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 0x1_0100)
    );
    // A host the subsystem does not allow: Invalid Host, data offset 512.
    let (st, dw0) = status_of(a.connect_admin(&params("nqn.2024-01.io.test:private", 0)));
    assert_eq!((st, dw0), (Status::CONNECT_INVALID_HOST.dnr(), 0x1_0200));
    // A host NQN without its terminating NUL.
    let mut p = params(SUBNQN, 0);
    p.hostnqn = "x".repeat(300);
    let (st, dw0) = status_of(a.connect_admin(&p));
    assert_eq!(
        (st, dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 0x1_0200)
    );
    // Admin Connect naming a controller: data offset 16.
    let (st, dw0) = status_of(a.connect(&params(SUBNQN, 0), 7));
    assert_eq!(
        (st, dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 0x1_0010)
    );
    // SQSIZE 0 and RECFMT 1, through raw commands.
    let data = cmd::connect_data(&params(SUBNQN, 0), 0xFFFF);
    let sqe = cmd::connect(0, 0, 0, false);
    let c = a.execute(sqe, Data::ToController(&data)).unwrap();
    assert_eq!(
        (c.status, c.dw0()),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 44)
    );
    let mut sqe = cmd::connect(0, 31, 0, false);
    sqe.cdw10 |= 1;
    let c = a.execute(sqe, Data::ToController(&data)).unwrap();
    assert_eq!(c.status, Status::CONNECT_INCOMPATIBLE_FORMAT.dnr());
    // Connect data that is not 1024 bytes.
    let c = a
        .execute(
            cmd::connect(0, 31, 0, false),
            Data::ToController(&data[..512]),
        )
        .unwrap();
    assert_eq!(c.status, Status::SGL_INVALID_DATA_LENGTH.dnr());
    // Commands other than Connect on an unconnected queue.
    let c = a
        .execute(cmd::property_get(prop::CAP, true), Data::None)
        .unwrap();
    assert_eq!(c.status, Status::INVALID_OPCODE.dnr());
    let c = a.execute(cmd::keep_alive(), Data::None).unwrap();
    assert_eq!(c.status, Status::INVALID_OPCODE.dnr());
    // None of that created a controller; now a good one, and a second Connect on the same
    // queue is "controller busy".
    assert_eq!(s.target.controller_count(), 0);
    let cntlid = a.connect_admin(&params(SUBNQN, 0)).unwrap();
    assert_status(
        a.connect_admin(&params(SUBNQN, 0)),
        Status::CONNECT_CONTROLLER_BUSY,
        true,
    );

    // I/O Connect: unknown controller id; QID not what the CM request said; QID taken.
    let mut q = open_queue(&s, 1, 128);
    let (st, dw0) = status_of(q.connect(&params(SUBNQN, 0), cntlid + 100));
    assert_eq!(
        (st.code(), dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 0x1_0100)
    );
    let sqe = cmd::connect(3, 127, 0, false);
    let data = cmd::connect_data(&params(SUBNQN, 0), cntlid);
    let c = q.execute(sqe, Data::ToController(&data)).unwrap();
    assert_eq!(
        (c.status.code(), c.dw0()),
        (Status::CONNECT_INVALID_PARAMETERS, 42)
    );
    q.connect(&params(SUBNQN, 0), cntlid).unwrap();
    let mut again = open_queue(&s, 1, 128);
    assert_status(
        again.connect(&params(SUBNQN, 0), cntlid),
        Status::COMMAND_SEQUENCE_ERROR,
        true,
    );
    // I/O SQSIZE above MQES: the CM already refuses a 129-entry queue; Connect refuses
    // SQSIZE 128 on a queue the CM took.
    let mut q2 = open_queue(&s, 2, 128);
    let c = q2
        .execute(cmd::connect(2, 128, 0, false), Data::ToController(&data))
        .unwrap();
    assert_eq!(
        (c.status.code(), c.dw0()),
        (Status::CONNECT_INVALID_PARAMETERS, 44)
    );

    // CM private data checks.
    let req = |qid, hsqsize| ConnectRequest {
        recfmt: 0,
        qid,
        hrqsize: hsqsize + 1,
        hsqsize,
        cntlid: 0,
    };
    assert_eq!(
        s.target.accept(&req(0, 32)).err(),
        Some(RejectStatus::InvalidHsqsize)
    );
    assert_eq!(
        s.target.accept(&req(1, 128)).err(),
        Some(RejectStatus::InvalidHsqsize)
    );
    assert_eq!(
        s.target.accept(&req(5, 31)).err(),
        Some(RejectStatus::InvalidQid)
    );
    let mut r = req(0, 31);
    r.recfmt = 1;
    assert_eq!(s.target.accept(&r).err(), Some(RejectStatus::InvalidRecfmt));
    assert_eq!(
        ConnectRequest::decode(&[0u8; 16]),
        Err(RejectStatus::InvalidLength)
    );
}

#[test]
fn command_errors() {
    let s = setup();
    let mut a = open_queue(&s, 0, 32);
    let cntlid = a.connect_admin(&params(SUBNQN, 0)).unwrap();
    // I/O before CC.EN.
    let mut q = io_queue(&s, 1, cntlid);
    let mut buf = vec![0u8; 512];
    assert_status(
        q.read(1, 0, 512, &mut buf),
        Status::COMMAND_SEQUENCE_ERROR,
        true,
    );
    // A CC with the wrong queue entry sizes: CSTS.CFS instead of RDY.
    a.property_set(prop::CC, 0x0000_0001).unwrap();
    let csts = Csts(a.property_get(prop::CSTS, false).unwrap() as u32);
    assert!(csts.cfs() && !csts.rdy());
    a.property_set(prop::CC, 0).unwrap();
    a.enable(4).unwrap();

    // Properties: unknown offset, CAP as 4 bytes, setting anything but CC.
    assert_status(a.property_get(0x40, false), Status::INVALID_FIELD, true);
    assert_status(
        a.property_get(prop::CAP, false),
        Status::INVALID_FIELD,
        true,
    );
    assert_status(a.property_set(prop::VS, 0), Status::INVALID_FIELD, true);
    assert_status(
        a.property_set(prop::NSSR, 0x4E56_4D65),
        Status::INVALID_FIELD,
        true,
    );

    // Admin: unknown opcode, unknown CNS, unknown log page, unknown feature, save bit.
    let c = a.execute(Sqe::new(0x7E), Data::None).unwrap();
    assert_eq!(c.status.code(), Status::INVALID_OPCODE);
    assert!(c.status.is_dnr() && c.status.is_more());
    assert_status(a.identify(0x1F, 0), Status::INVALID_FIELD, true);
    assert_status(
        a.identify_namespace(admin::NSID_ALL),
        Status::INVALID_NS,
        true,
    );
    assert_status(a.ns_descriptors(9), Status::INVALID_NS, true);
    let mut page = vec![0u8; 512];
    assert_status(
        a.get_log_page(0x7F, 0, 0, false, &mut page),
        Status::INVALID_FIELD,
        true,
    );
    assert_status(a.set_features(0x55, 0), Status::INVALID_FIELD, true);
    let mut sqe = cmd::set_features(fid::KATO, 1000);
    sqe.cdw10 |= 1 << 31;
    let c = a.execute(sqe, Data::None).unwrap();
    assert_eq!(c.status.code(), Status::FEATURE_NOT_SAVEABLE);
    assert_status(
        a.set_features(fid::NUM_QUEUES, 0xFFFF_FFFF),
        Status::INVALID_FIELD,
        true,
    );
    assert_status(
        a.set_features(fid::ASYNC_EVENT, 1 << 20),
        Status::INVALID_FIELD,
        true,
    );
    a.set_features(fid::ASYNC_EVENT, 1 << 8).unwrap();
    assert_eq!(a.get_features(fid::ASYNC_EVENT, 0).unwrap(), 1 << 8);

    // Flags: fused, or PSDT not 01b.
    let mut sqe = cmd::keep_alive();
    sqe.flags |= 1;
    assert_eq!(
        a.execute(sqe, Data::None).unwrap().status.code(),
        Status::INVALID_FIELD
    );
    let mut sqe = cmd::keep_alive();
    sqe.flags = 0;
    assert_eq!(
        a.execute(sqe, Data::None).unwrap().status.code(),
        Status::INVALID_FIELD
    );

    // I/O: unknown namespace, LBA out of range, not ready, unknown opcode, too long.
    assert_status(q.read(7, 0, 512, &mut buf), Status::INVALID_NS, true);
    assert_status(q.read(1, 4096, 512, &mut buf), Status::LBA_RANGE, true);
    assert_status(q.write(1, 4095, 512, &[0u8; 1024]), Status::LBA_RANGE, true);
    assert_status(q.write_zeroes(1, u64::MAX, 2), Status::LBA_RANGE, true);
    assert_status(
        q.deallocate(
            1,
            &[DsmRange {
                cattr: 0,
                nlb: 2,
                slba: 4095,
            }],
        ),
        Status::LBA_RANGE,
        true,
    );
    s.ns3
        .ready
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert_status(q.read(3, 0, 512, &mut buf), Status::NS_NOT_READY, false);
    s.ns3
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    q.read(3, 0, 512, &mut buf).unwrap();
    let c = q.execute(Sqe::new(0x42), Data::None).unwrap();
    assert_eq!(c.status.code(), Status::INVALID_OPCODE);
    let mut big = vec![0u8; 2 * 1024 * 1024];
    assert_status(q.read(1, 0, 512, &mut big), Status::INVALID_FIELD, true);

    // SGLs: length not matching the transfer; in-capsule data for a read; in-capsule data
    // past the capsule; a descriptor type the target does not take (last segment); a keyed
    // descriptor with a reserved subtype.
    let mut sqe = cmd::rw(io::opcode::WRITE, 1, 0, 2);
    let c = q.execute(sqe, Data::ToController(&[0u8; 512])).unwrap();
    assert_eq!(c.status, Status::SGL_INVALID_DATA_LENGTH.dnr().more());
    sqe = cmd::rw(io::opcode::READ, 1, 0, 1);
    q.transport.tamper = Some(Box::new(|c: &mut Vec<u8>| {
        c[24..40].copy_from_slice(
            &Sgl::InCapsule {
                offset: 0,
                len: 512,
            }
            .encode(),
        );
        c.resize(64 + 512, 0);
    }));
    assert_eq!(
        q.execute(sqe, Data::None).unwrap().status.code(),
        Status::INVALID_FIELD
    );
    q.transport.tamper = Some(Box::new(|c: &mut Vec<u8>| c.truncate(64 + 100)));
    let c = q
        .execute(
            cmd::rw(io::opcode::WRITE, 1, 0, 1),
            Data::ToController(&[7u8; 512]),
        )
        .unwrap();
    assert_eq!(c.status.code(), Status::SGL_INVALID_OFFSET);
    q.transport.tamper = Some(Box::new(|c: &mut Vec<u8>| c[39] = 0x31));
    let c = q.execute(cmd::flush(1), Data::None).unwrap();
    assert_eq!(c.status.code(), Status::SGL_INVALID_TYPE);
    q.transport.tamper = Some(Box::new(|c: &mut Vec<u8>| c[39] = 0x45));
    let c = q.execute(cmd::flush(1), Data::None).unwrap();
    assert_eq!(c.status.code(), Status::INVALID_FIELD);
    // A capsule shorter than an SQE: the queue must be disconnected.
    q.transport.tamper = Some(Box::new(|c: &mut Vec<u8>| c.truncate(40)));
    assert_eq!(
        q.execute(cmd::flush(1), Data::None),
        Err(HostError::Transport(LoopError::Disconnected))
    );

    // A failed RDMA READ: Data Transfer Error (retryable), with the key invalidated.
    let mut q2 = io_queue(&s, 2, cntlid);
    q2.transport.inline = 0;
    q2.transport.mem.fail_reads = true;
    assert_status(
        q2.write(1, 0, 512, &[1u8; 512]),
        Status::DATA_TRANSFER_ERROR,
        false,
    );
    q2.transport.mem.fail_reads = false;
    q2.write(1, 0, 512, &[1u8; 512]).unwrap();

    // The error log has the latest error first.
    let mut log = vec![0u8; 64 * 4];
    a.get_log_page(lid::ERROR, 0, 0, false, &mut log).unwrap();
    let e0 = admin::ErrorLogEntry::decode(&log).unwrap();
    let e1 = admin::ErrorLogEntry::decode(&log[64..]).unwrap();
    assert_eq!(
        (e0.sqid, e0.status.code()),
        (2, Status::DATA_TRANSFER_ERROR)
    );
    assert!(e0.error_count == e1.error_count + 1);

    // Asynchronous Event Requests: four are held, the fifth fails; an event completes one.
    for _ in 0..4 {
        assert_eq!(
            a.execute(cmd::async_event(), Data::None),
            Err(HostError::Transport(LoopError::Held))
        );
    }
    let c = a.execute(cmd::async_event(), Data::None).unwrap();
    assert_eq!(c.status.code(), Status::AER_LIMIT_EXCEEDED);
    let dw0 = admin::async_event_result(2, 0, lid::CHANGED_NS);
    assert!(s.target.post_event(cntlid, dw0));
    let ev = a.transport.queue.take_events();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].cqe.status, ev[0].cqe.dw0()),
        (Status::SUCCESS, 0x0004_0002)
    );
    // Tearing the admin queue down fails the three still held.
    let failed = a.transport.queue.close();
    assert_eq!(failed.len(), 3);
    assert!(
        failed
            .iter()
            .all(|r| r.cqe.status == Status::INTERNAL_ERROR.dnr())
    );
    assert_eq!(s.target.controller_count(), 0);
}

#[test]
fn sq_flow_control_off_reports_sqhd_ffff() {
    let s = setup();
    let mut a = open_queue(&s, 0, 32);
    let mut p = params(SUBNQN, 0);
    a.connect_admin(&p).unwrap();
    assert_eq!(a.state.sqhd, 1);
    a.enable(4).unwrap();
    assert_eq!(a.state.sqhd, 5);
    let mut b = open_queue(&s, 0, 32);
    p.disable_sqflow = true;
    b.connect_admin(&p).unwrap();
    assert_eq!(b.state.sqhd, 0xFFFF);
}

/// The target reuses data buffers (a read's, a write's): reads of other sizes and places, a
/// failed read, keyed and in-capsule writes in between, and every read still returns exactly
/// the blocks asked for, never an earlier command's bytes.
#[test]
fn reused_data_buffers_never_leak_earlier_data() {
    let s = setup();
    let (_a, cntlid) = bring_up(&s, SUBNQN, 0);
    let mut q = io_queue(&s, 1, cntlid);
    let bs = 512u32;
    // 16 blocks of one pattern at 0, 4 blocks of another at 100 (keyed: above the
    // in-capsule size), 2 blocks in-capsule at 200.
    let a = pattern(16 * 512, 1);
    let b = pattern(4 * 512, 2);
    let c = pattern(2 * 512, 3);
    q.write(1, 0, bs, &a).unwrap();
    q.transport.inline = 0;
    q.write(1, 100, bs, &b).unwrap();
    q.transport.inline = q.transport.queue.inline_data_size();
    q.write(1, 200, bs, &c).unwrap();
    assert!(q.transport.inline_sent > 0 && q.transport.keyed_sent > 0);
    for round in 0..3 {
        let mut big = vec![0u8; 16 * 512];
        q.read(1, 0, bs, &mut big).unwrap();
        assert!(big == a, "round {round}: 16 blocks at 0");
        let mut small = vec![0u8; 512];
        q.read(1, 101, bs, &mut small).unwrap();
        assert!(small[..] == b[512..1024], "round {round}: 1 block at 101");
        // Past the end: fails, and its buffer goes back unsent.
        assert_status(q.read(1, 4096, bs, &mut small), Status::LBA_RANGE, true);
        let mut two = vec![0u8; 2 * 512];
        q.read(1, 200, bs, &mut two).unwrap();
        assert!(two == c, "round {round}: 2 blocks at 200");
        // Blocks never written read as zeroes, whatever the reused buffer held.
        let mut zero = vec![0xFFu8; 8 * 512];
        q.read(1, 300, bs, &mut zero).unwrap();
        assert!(
            zero.iter().all(|&x| x == 0),
            "round {round}: unwritten blocks"
        );
    }
}
