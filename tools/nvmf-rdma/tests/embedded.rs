//! Host and target in one process on two emulated NICs, through the connection manager:
//! the RDMA binding end to end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nvmf::fabrics::DISCOVERY_NQN;
use nvmf::host::{ConnectParams, HostError};
use nvmf::namespace::RamNamespace;
use nvmf::rdma::RejectStatus;
use nvmf::status::Status;
use nvmf::target::{Port, Subsystem, Target, TargetConfig};
use nvmf_rdma::host::{ConnectError, QueueConfig, connect_queue};
use nvmf_rdma::net::{EMBEDDED_TARGET_IP, Embedded};
use nvmf_rdma::perf::{self, Job, Pattern};
use nvmf_rdma::target::{ListenerStats, run_listener};

const SUBNQN: &str = "nqn.2024-01.io.rdma-stack:ram0";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
const PORT: u16 = 4420;

fn target() -> Arc<Target> {
    let mut t = Target::new(TargetConfig {
        max_io_queues: 4,
        mdts: 5,
        ports: vec![Port {
            portid: 1,
            trtype: nvmf::discovery::trtype::RDMA,
            adrfam: nvmf::discovery::adrfam::IPV4,
            traddr: EMBEDDED_TARGET_IP.to_string(),
            trsvcid: PORT.to_string(),
            treq: nvmf::discovery::TREQ_SECURE_NOT_REQUIRED,
        }],
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(SUBNQN, "SN-RDMA-1", "rdma-stack ram");
    s.add_namespace(1, Arc::new(RamNamespace::new(512, 8192).unwrap()))
        .unwrap();
    t.add_subsystem(s).unwrap();
    Arc::new(t)
}

fn params(subnqn: &str, kato: u32) -> ConnectParams {
    ConnectParams {
        hostnqn: HOSTNQN.into(),
        hostid: *b"rdma-host-id-001",
        subnqn: subnqn.into(),
        kato,
        disable_sqflow: false,
    }
}

/// Runs `f` (the host) against a target listening on the embedded fixture.
fn with_target<R>(f: impl FnOnce(&Embedded, SocketAddr, &ListenerStats) -> R) -> R {
    with_target_of(target(), true, f)
}

/// Runs `f` (the host) against `t` listening on the embedded fixture.
/// With `strict`, no queue may fail; a test that cuts a host off with I/O in flight lets the
/// target's transport fail on that queue (its READ of the gone host's buffer may run out of
/// retries before the disconnect reaches it).
fn with_target_of<R>(
    t: Arc<Target>,
    strict: bool,
    f: impl FnOnce(&Embedded, SocketAddr, &ListenerStats) -> R,
) -> R {
    // The target's waits end every 5 s of virtual time (its listener checks `stop` and the
    // keep-alive deadlines).
    let e = Embedded::new(0x6e76_6d65, 5_000_000_000, 60_000_000_000).unwrap();
    let stop = AtomicBool::new(false);
    let stats = ListenerStats::default();
    let listen = e.target.listen(PORT).unwrap();
    let dst = SocketAddr::from((EMBEDDED_TARGET_IP, PORT));
    let r = std::thread::scope(|s| {
        s.spawn(|| run_listener(&t, &listen, &e.target.clock, 1 << 17, &stop, &stats, false));
        // Stops the listener also when the host panics.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        f(&e, dst, &stats)
    });
    listen.destroy_ep();
    let failed = stats.failed.load(Ordering::Relaxed);
    if strict {
        assert_eq!(failed, 0, "a queue failed");
    } else {
        assert!(failed <= 1, "{failed} queues failed; only the cut one may");
    }
    r
}

fn admin_cfg() -> QueueConfig {
    QueueConfig {
        qid: 0,
        depth: 32,
        slot_size: 4096,
        inline: 0,
    }
}

#[test]
fn admin_and_two_io_queues_move_verified_data() {
    with_target(|e, dst, stats| {
        let mut admin = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        let cntlid = admin.connect_admin(&params(SUBNQN, 120_000)).unwrap();
        admin.enable(100).unwrap();
        let ctrl = admin.identify_controller().unwrap();
        assert_eq!(ctrl.cntlid, cntlid);
        assert_eq!(ctrl.subnqn, SUBNQN);
        assert_eq!(ctrl.ioccsz, 260, "4096 bytes of in-capsule data");
        assert_eq!(admin.active_namespaces(0).unwrap(), vec![1]);
        let ns = admin.identify_namespace(1).unwrap();
        assert_eq!((ns.nsze, ns.lbads), (8192, 9));
        assert_eq!(admin.set_num_queues(2).unwrap(), 2);
        admin.keep_alive().unwrap();

        let mut io = Vec::new();
        for qid in 1..=2 {
            let mut q = connect_queue(
                &e.host,
                dst,
                QueueConfig {
                    qid,
                    depth: 16,
                    slot_size: 64 * 1024,
                    inline: 4096,
                },
            )
            .unwrap();
            assert_eq!(q.connect(&params(SUBNQN, 120_000), cntlid).unwrap(), cntlid);
            io.push(q);
        }
        // In-capsule (4 KiB fits) on queue 1, keyed (32 KiB: RDMA READ) on queue 2.
        let small: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let big: Vec<u8> = (0..32768u32).map(|i| (i * 13 + 1) as u8).collect();
        io[0].write(1, 0, 512, &small).unwrap();
        io[1].write(1, 100, 512, &big).unwrap();
        // Read back across queues (RDMA WRITE to the host).
        let mut got = vec![0u8; 32768];
        io[0].read(1, 100, 512, &mut got).unwrap();
        assert_eq!(got, big);
        let mut got = vec![0u8; 4096];
        io[1].read(1, 0, 512, &mut got).unwrap();
        assert_eq!(got, small);
        io[0].flush(1).unwrap();
        // Out of range: LBA Out of Range, DNR.
        let mut buf = vec![0u8; 1024];
        match io[1].read(1, 8191, 512, &mut buf) {
            Err(HostError::Status(s, _)) => {
                assert_eq!(s.code(), Status::LBA_RANGE);
                assert!(s.is_dnr());
            }
            other => panic!("read past the end: {other:?}"),
        }
        admin.keep_alive().unwrap();
        for q in io {
            q.transport.close();
        }
        admin.shutdown().unwrap();
        admin.transport.close();
        assert!(stats.commands.load(Ordering::Relaxed) >= 15);
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 3);
    });
}

#[test]
fn discovery_log_lists_the_subsystem() {
    with_target(|e, dst, _| {
        let mut d = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        d.connect_admin(&params(DISCOVERY_NQN, 0)).unwrap();
        d.enable(100).unwrap();
        let (_, entries) = d.discovery_log(3).unwrap();
        let nqns: Vec<&str> = entries.iter().map(|e| e.subnqn.as_str()).collect();
        assert_eq!(nqns, vec![DISCOVERY_NQN, SUBNQN]);
        assert_eq!(entries[1].traddr, EMBEDDED_TARGET_IP.to_string());
        assert_eq!(entries[1].trsvcid, PORT.to_string());
        d.transport.close();
    });
}

#[test]
fn errors_reject_and_status() {
    with_target(|e, dst, stats| {
        // An admin queue deeper than 32: the CM request is rejected with NVMe data.
        let deep = QueueConfig {
            depth: 64,
            ..admin_cfg()
        };
        match connect_queue(&e.host, dst, deep) {
            Err(ConnectError::Rejected(Some(r))) => {
                assert_eq!(r.status, RejectStatus::InvalidHsqsize)
            }
            Err(other) => panic!("deep admin queue: {other}"),
            Ok(_) => panic!("deep admin queue accepted"),
        }
        assert_eq!(stats.rejected.load(Ordering::Relaxed), 1);
        // An I/O queue before any controller: QID above the target's count is refused too.
        let io9 = QueueConfig {
            qid: 9,
            depth: 8,
            slot_size: 4096,
            inline: 0,
        };
        match connect_queue(&e.host, dst, io9) {
            Err(ConnectError::Rejected(Some(r))) => assert_eq!(r.status, RejectStatus::InvalidQid),
            Err(other) => panic!("qid 9: {other}"),
            Ok(_) => panic!("qid 9 accepted"),
        }
        // An unknown subsystem NQN: the Connect command fails with Invalid Parameters
        // pointing at SUBNQN in the data.
        let mut a = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        match a.connect_admin(&params("nqn.2024-01.io.rdma-stack:nope", 0)) {
            Err(HostError::Status(s, dw0)) => {
                assert_eq!(s.code(), Status::CONNECT_INVALID_PARAMETERS);
                assert!(s.is_dnr());
                assert_eq!(dw0, (1 << 16) | 256);
            }
            other => panic!("unknown NQN: {other:?}"),
        }
        a.transport.close();
    });
}

#[test]
fn perf_workloads_verify_their_data() {
    with_target(|e, dst, stats| {
        let mut s = perf::open_session(&e.host, dst, &params(SUBNQN, 0), 0, 2, 8, 8192).unwrap();
        assert_eq!(s.io.len(), 2);
        assert_eq!(s.inline, 4096);
        for (pattern, bs) in [
            (Pattern::RandWrite, 4096),
            (Pattern::Read, 8192),
            (Pattern::Write, 8192),
            (Pattern::RandRead, 512),
        ] {
            let job = Job {
                pattern,
                bs,
                depth: 8,
                queues: 2,
                count: Some(200),
                range_blocks: 2048,
                ..Job::default()
            };
            let r = perf::run(&mut s, &job).unwrap();
            assert_eq!(r.ios, 200, "{pattern:?}");
            assert_eq!((r.errors, r.mismatches), (0, 0), "{pattern:?}");
            assert!(r.verified_blocks > 0, "{pattern:?}");
            assert!(r.lat.p50 <= r.lat.p99 && r.lat.p99 <= r.lat.max);
            let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
            assert_eq!(j["ios"], 200);
            assert_eq!(j["pattern"], pattern.name());
        }
        // The target ran several of a queue's commands at the same time (the host keeps 8
        // in flight per queue).
        let most = stats.max_in_flight.load(Ordering::Relaxed);
        assert!(
            most > 1 && most <= 8,
            "most commands in flight on a queue: {most}"
        );
        s.close();
    });
}

/// A host that stops talking (no Keep Alive within KATO) is noticed by the target's
/// keep-alive scan: its controller fails, both its queues are disconnected by the target and
/// their resources freed, and the host's next command fails.
#[test]
fn a_silent_host_is_disconnected_by_keep_alive() {
    let t = target();
    with_target_of(t.clone(), true, |e, dst, stats| {
        let mut a = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        // KATO 60 s of the devices' virtual time: it leaps ahead whenever every device is
        // idle (up to the listener's next 5 s wake-up), so a host thread descheduled on a
        // loaded machine must not look silent during the bring-up.
        let kato = 60_000;
        let cntlid = a.connect_admin(&params(SUBNQN, kato)).unwrap();
        a.enable(100).unwrap();
        a.keep_alive().unwrap();
        let mut q = connect_queue(
            &e.host,
            dst,
            QueueConfig {
                qid: 1,
                depth: 8,
                slot_size: 4096,
                inline: 4096,
            },
        )
        .unwrap();
        q.connect(&params(SUBNQN, kato), cntlid).unwrap();
        assert_eq!(t.controller_count(), 1);
        // Silence: the target's listener (waking every 5 s of the devices' virtual time)
        // finds the deadline passed. Bounded in real time so that a failure cannot hang.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while t.controller_count() != 0 || stats.closed.load(Ordering::Relaxed) != 2 {
            assert!(
                std::time::Instant::now() < end,
                "controllers {}, queues closed {}",
                t.controller_count(),
                stats.closed.load(Ordering::Relaxed)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(t.controller(cntlid).is_none());
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 2);
        // The target disconnected both queues: the host's commands fail.
        assert!(a.keep_alive().is_err());
        let mut buf = vec![0u8; 512];
        assert!(q.read(1, 0, 512, &mut buf).is_err());
        q.transport.close();
        a.transport.close();
    });
}

/// Bad input over RDMA gets NVMe statuses (with DNR), and the queue goes on serving.
#[test]
fn bad_io_commands_get_nvme_statuses() {
    with_target(|e, dst, _| {
        let mut a = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        let cntlid = a.connect_admin(&params(SUBNQN, 0)).unwrap();
        a.enable(100).unwrap();
        let mut q = connect_queue(
            &e.host,
            dst,
            QueueConfig {
                qid: 1,
                depth: 8,
                slot_size: 8192,
                inline: 4096,
            },
        )
        .unwrap();
        q.connect(&params(SUBNQN, 0), cntlid).unwrap();
        let expect = |r: Result<(), HostError<_>>, code: Status| match r {
            Err(HostError::Status(s, _)) => {
                assert_eq!(s.code(), code);
                assert!(s.is_dnr(), "{s:?}");
            }
            other => panic!("expected {code:?}, got {other:?}"),
        };
        let mut buf = vec![0u8; 1024];
        // an inactive namespace
        expect(q.read(7, 0, 512, &mut buf), Status::INVALID_NS);
        // past the end of the namespace (8192 blocks): a read, and a write by RDMA READ
        expect(q.read(1, 8191, 512, &mut buf), Status::LBA_RANGE);
        expect(q.write(1, 8190, 512, &vec![1u8; 8192]), Status::LBA_RANGE);
        // an opcode the I/O queue does not know (0x7E), and an admin opcode on it
        for op in [0x7E, 0x06] {
            let mut sqe = nvmf::host::cmd::flush(1);
            sqe.opcode = op;
            // `execute` hands back any completion as it is
            let c = q.execute(sqe, nvmf::host::Data::None).unwrap();
            assert_eq!(c.status.code(), Status::INVALID_OPCODE, "opcode {op:#x}");
            assert!(c.status.is_dnr(), "opcode {op:#x}");
        }
        // the queue still serves
        q.write(1, 10, 512, &[7u8; 1024]).unwrap();
        q.read(1, 10, 512, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        q.transport.close();
        a.transport.close();
    });
}

/// A host that disconnects while several writes are in flight, connects again and reads
/// everything back: every 8 KiB unit is wholly the old or wholly the new data, units whose
/// completion arrived hold the new data, units never sent the old.
#[test]
fn disconnect_in_the_middle_of_writes_then_reconnect_and_read_back() {
    use nvmf::io::opcode;
    const UNITS: u64 = 64;
    const UNIT_BLOCKS: u64 = 16;
    let fill = |seed: u8, unit: u64| -> Vec<u8> {
        (0..UNIT_BLOCKS as usize * 512)
            .map(|i| seed ^ (unit as u8).wrapping_mul(31) ^ (i as u8))
            .collect()
    };
    with_target_of(target(), false, |e, dst, stats| {
        let mut a = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        let cntlid = a.connect_admin(&params(SUBNQN, 0)).unwrap();
        a.enable(100).unwrap();
        let cfg = |qid| QueueConfig {
            qid,
            depth: 8,
            slot_size: 8192,
            // no in-capsule data: every write is RDMA READ by the target
            inline: 0,
        };
        let mut q = connect_queue(&e.host, dst, cfg(1)).unwrap();
        q.connect(&params(SUBNQN, 0), cntlid).unwrap();
        for u in 0..UNITS {
            q.write(1, u * UNIT_BLOCKS, 512, &fill(0xA0, u)).unwrap();
        }
        // New data, 8 writes in flight, cut after 20 completions.
        let mut conn = q.transport;
        let mut in_flight: Vec<Option<u64>> = vec![None; 8];
        let mut completed = Vec::new();
        let mut next = 0u64;
        let mut out = Vec::new();
        loop {
            for (tag, slot) in in_flight.iter_mut().enumerate() {
                if slot.is_none() && next < UNITS {
                    conn.slot(tag).unwrap().write(0, &fill(0xB0, next)).unwrap();
                    let mut sqe = nvmf::host::cmd::rw(
                        opcode::WRITE,
                        1,
                        next * UNIT_BLOCKS,
                        UNIT_BLOCKS as u32,
                    );
                    sqe.cid = tag as u16;
                    conn.submit(&mut sqe, 8192, true).unwrap();
                    *slot = Some(next);
                    next += 1;
                }
            }
            if completed.len() >= 20 {
                break;
            }
            out.clear();
            conn.wait(&mut out).unwrap();
            for c in &out {
                assert_eq!(c.status.code(), Status::SUCCESS);
                let u = in_flight[usize::from(c.cid)]
                    .take()
                    .expect("a write in flight");
                completed.push(u);
            }
        }
        assert!(
            in_flight.iter().any(Option::is_some),
            "nothing in flight at the cut"
        );
        conn.close();
        // Another I/O queue of the same controller (the cut one's id frees when the target
        // has seen the disconnect).
        let mut q2 = connect_queue(&e.host, dst, cfg(2)).unwrap();
        q2.connect(&params(SUBNQN, 0), cntlid).unwrap();
        let mut buf = vec![0u8; 8192];
        for u in 0..UNITS {
            q2.read(1, u * UNIT_BLOCKS, 512, &mut buf).unwrap();
            let (old, new) = (fill(0xA0, u), fill(0xB0, u));
            if completed.contains(&u) {
                assert!(buf == new, "unit {u}: completed but not the new data");
            } else if u >= next {
                assert!(buf == old, "unit {u}: never sent but changed");
            } else {
                assert!(buf == old || buf == new, "unit {u}: torn");
            }
        }
        // The cut queue's resources were freed.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while stats.closed.load(Ordering::Relaxed) < 1 {
            assert!(std::time::Instant::now() < end, "the cut queue never ended");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        q2.transport.close();
        a.transport.close();
    });
}

#[test]
fn an_invalidate_sgl_is_answered_with_send_with_invalidate() {
    // Our host's buffers are ordinary registrations: asked to invalidate the key, the target
    // answers with SEND with invalidate, which the host's NIC refuses (remote invalid
    // request) as a real ConnectX does: the command fails on the transport, not with a
    // status. A plain SGL (the default) works on a fresh queue.
    with_target_of(target(), false, |e, dst, _| {
        let mut admin = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        admin.connect_admin(&params(SUBNQN, 120_000)).unwrap();
        admin.enable(100).unwrap();
        admin.transport.set_ask_invalidate(true);
        match admin.identify_controller() {
            Err(HostError::Transport(nvmf_rdma::host::XferError::Completion(s))) => {
                assert_eq!(s, verbs::WcStatus::RemInvReqErr);
            }
            other => panic!("identify with an invalidate SGL: {other:?}"),
        }
        admin.transport.close();
        let mut admin = connect_queue(&e.host, dst, admin_cfg()).unwrap();
        admin.connect_admin(&params(SUBNQN, 120_000)).unwrap();
        admin.enable(100).unwrap();
        assert_eq!(admin.identify_controller().unwrap().subnqn, SUBNQN);
        admin.shutdown().unwrap();
        admin.transport.close();
    });
}
