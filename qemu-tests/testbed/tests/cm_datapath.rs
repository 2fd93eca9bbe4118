//! Thread-per-core data path: each thread drives its own connection (its own QPs and CQs, on
//! the same two devices) through [`cm::DataPath`] handles, posting and polling concurrently
//! with the data verified, while one more thread runs the emulated devices. The data path
//! takes neither the manager's lock nor a device-wide one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use cm::DataPath;
use nic_testbed::EmuDevice;
use verbs::{RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};

mod cm_support;
use cm_support::*;

const THREADS: usize = 4;
const ROUNDS: usize = 40;
const LEN: usize = 64;

/// The bytes connection `conn` sends in round `round` (`dir` 0: client → server, 1: back).
fn pattern(conn: usize, round: usize, dir: usize) -> [u8; LEN] {
    core::array::from_fn(|k| (conn * 61 + round * 7 + dir * 113 + k) as u8)
}

/// Polls `poll` until one completion arrives (the devices run on the poller thread).
fn one(poll: impl Fn(&mut [WorkCompletion]) -> Result<usize, cm::Error>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default()];
    loop {
        if poll(&mut wc).expect("poll") == 1 {
            return wc[0];
        }
        std::thread::yield_now();
    }
}

fn send(dp: &DataPath<EmuDevice>, b: &Buf, wr_id: u64) {
    let sge = [Sge {
        addr: b.addr(),
        length: LEN as u32,
        lkey: verbs::MemoryRegion::lkey(&b.mr),
    }];
    dp.post_send(&[SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
        ..SendWr::default()
    }])
    .expect("post_send");
}

fn recv(dp: &DataPath<EmuDevice>, b: &Buf, wr_id: u64) {
    let sge = [Sge {
        addr: b.addr() + 2048,
        length: LEN as u32,
        lkey: verbs::MemoryRegion::lkey(&b.mr),
    }];
    dp.post_recv(&[RecvWr {
        wr_id,
        sg_list: &sge,
    }])
    .expect("post_recv");
}

/// One thread's traffic on its connection: ping-pong with every byte checked.
fn traffic(conn: usize, c: &DataPath<EmuDevice>, cb: &Buf, s: &DataPath<EmuDevice>, sb: &Buf) {
    for round in 0..ROUNDS {
        let id = (conn * 1000 + round) as u64;
        recv(s, sb, id);
        recv(c, cb, id);
        cb.mem.write(0, &pattern(conn, round, 0)).unwrap();
        send(c, cb, id);
        let wc = one(|w| s.poll_recv_cq(w));
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (id, WcStatus::Success, WcOpcode::Recv, LEN as u32)
        );
        let mut got = [0u8; LEN];
        sb.mem.read(2048, &mut got).unwrap();
        assert_eq!(got, pattern(conn, round, 0), "conn {conn} round {round}");
        let wc = one(|w| c.poll_send_cq(w));
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));

        sb.mem.write(0, &pattern(conn, round, 1)).unwrap();
        send(s, sb, id);
        let wc = one(|w| c.poll_recv_cq(w));
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (id, WcStatus::Success, LEN as u32)
        );
        cb.mem.read(2048, &mut got).unwrap();
        assert_eq!(
            got,
            pattern(conn, round, 1),
            "conn {conn} round {round} back"
        );
        let wc = one(|w| s.poll_send_cq(w));
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
}

#[test]
fn threads_each_with_a_connection_post_and_poll_concurrently() {
    let s = setup(23);
    let baseline = s.live_settled();
    let listen = listener(&s);
    let mut conns = Vec::new();
    for _ in 0..THREADS {
        let client = active(&s);
        let ch = s.cm.create_event_channel().unwrap();
        client.migrate_id(Some(&ch)).unwrap();
        client.connect(None).unwrap();
        let server = listen.get_request().unwrap();
        server.accept(None).unwrap();
        let ev = ch.get_cm_event().unwrap();
        assert_eq!(ev.event, cm::EventType::Established, "{ev:?}");
        let (cb, sb) = (buf(&client, 4096), buf(&server, 4096));
        conns.push((client, server, ch, cb, sb));
    }
    // every connection has its own QPs (numbers per device) and CQs
    for side in [0, 1] {
        let mut qpns: Vec<u32> = conns
            .iter()
            .map(|(c, s, ..)| [c, s][side].qp_num().unwrap())
            .collect();
        qpns.sort();
        qpns.dedup();
        assert_eq!(qpns.len(), THREADS);
    }

    // The data path takes no manager lock: it works while the manager's state is locked (a
    // wait for that lock would never end: the channel's timeout reports it).
    {
        let (c, sv) = (&conns[0].0, &conns[0].1);
        let (cdp, sdp) = (c.data_path().unwrap(), sv.data_path().unwrap());
        let (tx, rx) = mpsc::channel();
        let qpn = s.cm.with_provider(s.client.dev, |_| {
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    let mut wc = [WorkCompletion::default(); 4];
                    let r = (
                        cdp.qp_num(),
                        cdp.poll_send_cq(&mut wc).unwrap(),
                        sdp.poll_recv_cq(&mut wc).unwrap(),
                    );
                    tx.send(r).unwrap();
                });
                rx.recv_timeout(Duration::from_secs(300))
                    .expect("the data path waited for the manager's lock")
            })
        });
        assert_eq!(qpn.unwrap(), (c.qp_num(), 0, 0));
    }

    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        // the devices' "hardware" thread
        let poller = sc.spawn(|| {
            while !done.load(Ordering::Acquire) {
                s.world.relax();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = conns
            .iter()
            .enumerate()
            .map(|(i, (c, sv, _, cb, sb))| {
                let cdp = c.data_path().unwrap();
                let sdp = sv.data_path().unwrap();
                sc.spawn(move || traffic(i, &cdp, cb, &sdp, sb))
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        done.store(true, Ordering::Release);
        poller.join().unwrap();
    });

    for (client, server, ch, cb, sb) in conns {
        client.disconnect().unwrap();
        server.disconnect().ok();
        cb.free(&client);
        sb.free(&server);
        // after destroy_qp the handle refuses (EINVAL), it does not touch a freed QP
        let dp = client.data_path().unwrap();
        client.destroy_qp().unwrap();
        assert_eq!(client.data_path().unwrap_err(), cm::Error::InvalidArgument);
        let mut wc = [WorkCompletion::default()];
        assert_eq!(dp.poll_send_cq(&mut wc), Err(cm::Error::InvalidArgument));
        assert_eq!(dp.qp_num(), None);
        client.destroy_ep();
        server.destroy_ep();
        drop(ch);
    }
    listen.destroy_ep();
    assert_eq!(s.live_settled(), baseline);
    s.teardown();
}
