//! The polled target (`nvmf_rdma_target::PolledTarget`, what the unikernel runs): every queue
//! of the listener from one loop on one thread, against our host on the embedded fixture.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nvmf::host::{ConnectParams, HostError};
use nvmf::namespace::RamNamespace;
use nvmf::rdma::RejectStatus;
use nvmf::status::Status;
use nvmf::target::{Subsystem, Target, TargetConfig};
use nvmf_rdma::host::{ConnectError, QueueConfig, connect_queue};
use nvmf_rdma::net::{EMBEDDED_TARGET_IP, Embedded};
use nvmf_rdma::now_ms;
use nvmf_rdma_target::PolledTarget;

const SUBNQN: &str = "nqn.2024-01.io.rdma-stack:polled";
const PORT: u16 = 4420;

fn params() -> ConnectParams {
    ConnectParams {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002".into(),
        hostid: *b"rdma-host-id-002",
        subnqn: SUBNQN.into(),
        kato: 120_000,
        disable_sqflow: false,
    }
}

#[test]
fn one_loop_serves_the_admin_and_two_io_queues() {
    let mut t = Target::new(TargetConfig {
        max_io_queues: 2,
        mdts: 5,
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(SUBNQN, "SN-POLLED-1", "rdma-stack polled ram");
    s.add_namespace(1, Arc::new(RamNamespace::new(512, 4096).unwrap()))
        .unwrap();
    t.add_subsystem(s).unwrap();
    let t = Arc::new(t);
    let e = Embedded::new(0x706f_6c6c, 5_000_000_000, 60_000_000_000).unwrap();
    let dst = SocketAddr::from((EMBEDDED_TARGET_IP, PORT));
    let stop = AtomicBool::new(false);
    let (commands, accepted, rejected, failed, closed) = std::thread::scope(|sc| {
        let target = sc.spawn(|| {
            let mut pt =
                PolledTarget::listen(&e.target.cm, dst, t.clone(), 1 << 17, None).expect("listen");
            while !stop.load(Ordering::Relaxed) || pt.queues() > 0 {
                if !pt.poll(now_ms(&e.target.clock)) {
                    nic_hal::Platform::relax(&e.target.clock);
                }
            }
            let st = pt.stats();
            let r = (
                st.commands.load(Ordering::Relaxed),
                st.accepted.load(Ordering::Relaxed),
                st.rejected.load(Ordering::Relaxed),
                st.failed.load(Ordering::Relaxed),
                st.closed.load(Ordering::Relaxed),
            );
            pt.shutdown();
            r
        });
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        // An admin queue deeper than 32: rejected with NVMe reject data.
        let deep = QueueConfig {
            qid: 0,
            depth: 64,
            slot_size: 4096,
            inline: 0,
        };
        match connect_queue(&e.host, dst, deep) {
            Err(ConnectError::Rejected(Some(r))) => {
                assert_eq!(r.status, RejectStatus::InvalidHsqsize)
            }
            Err(other) => panic!("deep admin queue: {other}"),
            Ok(_) => panic!("deep admin queue accepted"),
        }
        let mut admin = connect_queue(
            &e.host,
            dst,
            QueueConfig {
                qid: 0,
                depth: 32,
                slot_size: 4096,
                inline: 0,
            },
        )
        .unwrap();
        let cntlid = admin.connect_admin(&params()).unwrap();
        admin.enable(100).unwrap();
        assert_eq!(admin.identify_controller().unwrap().subnqn, SUBNQN);
        let ns = admin.identify_namespace(1).unwrap();
        assert_eq!((ns.nsze, ns.lbads), (4096, 9));
        assert_eq!(admin.set_num_queues(2).unwrap(), 2);
        // Two I/O queues, both open at once: the one loop serves all three.
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
            assert_eq!(q.connect(&params(), cntlid).unwrap(), cntlid);
            io.push(q);
        }
        let small: Vec<u8> = (0..4096u32).map(|i| (i * 5 + 1) as u8).collect();
        let big: Vec<u8> = (0..65536u32).map(|i| (i * 11 + 7) as u8).collect();
        io[0].write(1, 0, 512, &small).unwrap();
        io[1].write(1, 64, 512, &big).unwrap();
        admin.keep_alive().unwrap();
        let mut got = vec![0u8; 65536];
        io[0].read(1, 64, 512, &mut got).unwrap();
        assert!(got == big, "keyed write read back on the other queue");
        let mut got = vec![0u8; 4096];
        io[1].read(1, 0, 512, &mut got).unwrap();
        assert_eq!(got, small);
        io[1].flush(1).unwrap();
        let mut buf = vec![0u8; 1024];
        match io[0].read(1, 4095, 512, &mut buf) {
            Err(HostError::Status(s, _)) => {
                assert_eq!(s.code(), Status::LBA_RANGE);
                assert!(s.is_dnr());
            }
            other => panic!("read past the end: {other:?}"),
        }
        // Queue 1 leaves with a Fabrics Disconnect (the target closes it), queue 2 with the
        // CM disconnect only.
        let mut q1 = io.remove(0);
        q1.disconnect().unwrap();
        q1.transport.close();
        for q in io {
            q.transport.close();
        }
        admin.shutdown().unwrap();
        admin.transport.close();
        drop(_stop);
        target.join().unwrap()
    });
    assert_eq!((accepted, rejected, failed), (3, 1, 0));
    assert_eq!(closed, 3);
    assert!(commands >= 14, "{commands} commands");
}

/// `Embedded::one_loop`: no thread serves the target; the host's own waits poll it (and step
/// the emulated NICs). A verified benchmark session, each command and completion of which
/// needed the target, runs through, and the target saw every queue open and close.
#[test]
fn the_hosts_waits_drive_a_polled_target() {
    use nvmf_rdma::perf::{self, Job, Pattern};
    use std::sync::atomic::AtomicU64;

    let mut t = Target::new(TargetConfig {
        max_io_queues: 2,
        mdts: 5,
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(SUBNQN, "SN-POLLED-2", "rdma-stack polled ram");
    s.add_namespace(1, Arc::new(RamNamespace::new(512, 4096).unwrap()))
        .unwrap();
    t.add_subsystem(s).unwrap();
    let (e, poller) = Embedded::one_loop(0x6f6e_656c, 5_000_000_000, 60_000_000_000).unwrap();
    let dst = SocketAddr::from((EMBEDDED_TARGET_IP, PORT));
    let mut pt = PolledTarget::listen(&e.target.cm, dst, Arc::new(t), 1 << 17, None).unwrap();
    // What the target counted, copied out after each pass (it lives in the poller).
    let seen: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let out = seen.clone();
    let clock = e.target.clock.clone();
    poller.set(move || {
        let busy = pt.poll(now_ms(&clock));
        let st = pt.stats();
        for (o, v) in out
            .iter()
            .zip([&st.accepted, &st.commands, &st.closed, &st.failed])
        {
            o.store(v.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        busy
    });
    let mut session = perf::open_session(&e.host, dst, &params(), 1, 2, 8, 8192).unwrap();
    assert_eq!(session.io.len(), 2);
    for pattern in [Pattern::RandWrite, Pattern::RandRead] {
        let job = Job {
            pattern,
            bs: 4096,
            depth: 8,
            queues: 2,
            count: Some(300),
            ..Job::default()
        };
        let r = perf::run(&mut session, &job).unwrap();
        assert_eq!(r.ios, 300, "{pattern:?}");
        assert_eq!((r.errors, r.mismatches), (0, 0), "{pattern:?}");
        assert!(r.verified_blocks >= 300, "{pattern:?}");
    }
    session.close();
    // The host's last disconnect may return before the target has taken its event: more
    // waits (each polls the target) until every queue closed, for at most 10 s of the
    // fixture's clock.
    let start = nic_hal::Platform::now_ns(&e.host.clock);
    while seen[2].load(Ordering::Relaxed) < 3
        && nic_hal::Platform::now_ns(&e.host.clock) - start < 10_000_000_000
    {
        nic_hal::Platform::relax(&e.host.clock);
    }
    let [accepted, commands, closed, failed] = seen.each_ref().map(|a| a.load(Ordering::Relaxed));
    assert_eq!((accepted, closed, failed), (3, 3, 0));
    // 600 timed I/Os and the 512 writes that fill the range before the verified reads.
    assert!(commands >= 600 + 512, "{commands} commands");
    poller.clear();
}
