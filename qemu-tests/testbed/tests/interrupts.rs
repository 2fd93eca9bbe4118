//! Interrupts between an emulated NIC on its own poller thread ([`UdpNic`]) and the driver:
//! the driver's EQ is on MSI-X vector 0 and a completion channel's EQ on a vector of its own;
//! a thread waiting for a completion event sleeps (its CPU time stays a small fraction of the
//! wait) until the device raises the channel's vector; a CQ that was not armed raises
//! nothing, and the wait then ends with its timeout; a wait for an asynchronous event sleeps
//! until a QP error raises vector 0.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use nic_emulator::Profile;
use nic_hal::Interrupts;
use nic_testbed::udp::{UdpDevice, UdpNic};
use verbs::rc::RcParams;
use verbs::{
    AccessFlags, AhAttr, AsyncElement, AsyncEventType, Buffer, Gid, MemoryRegion, Mtu, Provider,
    QpCap, QpInitAttr, QpType, RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcOpcode, WcStatus,
    WrOpcode,
};

const UDP_PORT: u16 = 47_941;
const LEN: usize = 3000;

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: all-zero is a valid `rusage` (integers and timevals); getrusage writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_THREAD names the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(r, 0, "getrusage");
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct Side {
    nic: UdpNic,
    dev: UdpDevice,
    mac: [u8; 6],
}

fn side(last: u8) -> Side {
    let ip = Ipv4Addr::new(127, 0, 0, last);
    let mac = [0x02, 0, 127, 0, 0, last];
    let nic = UdpNic::new(
        ip,
        UDP_PORT,
        Profile {
            mac,
            ..Profile::default()
        },
    )
    .unwrap();
    // Only the interrupt (or the timeout) ends a sleep: a wait that ends early proves the
    // vector fired.
    let dev = nic
        .probe(mlx5::Config {
            irq_recheck_ns: u64::MAX,
            ..mlx5::Config::default()
        })
        .unwrap();
    dev.set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
        .unwrap();
    Side { nic, dev, mac }
}

fn params(peer: &Side, qpn: u32) -> RcParams {
    RcParams {
        access: AccessFlags::REMOTE_WRITE,
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4(peer.nic.ip().octets()),
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: peer.mac,
            ..AhAttr::default()
        },
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: qpn,
        min_rnr_timer: 1,
        ..RcParams::default()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_completion_wait_sleeps_until_the_channel_vector_fires() {
    let a = side(41);
    let b = side(42);
    assert!(a.nic.interrupts().is_enabled(0), "driver EQ on vector 0");

    let mut ch = Provider::create_comp_channel(&b.dev).unwrap();
    assert_eq!(
        ch.vector(),
        1,
        "the first channel takes the first completion vector"
    );
    assert!(b.nic.interrupts().is_enabled(1));

    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let pd_a = Provider::alloc_pd(&a.dev).unwrap();
    let pd_b = Provider::alloc_pd(&b.dev).unwrap();
    let cq_a = Provider::create_cq(&a.dev, 15, 0, None).unwrap();
    let cq_b = Provider::create_cq(&b.dev, 15, 0xfeed, Some(&ch)).unwrap();
    let mem_a: Buffer = Provider::alloc_buf(&a.dev, 2 * LEN).unwrap();
    let mem_b: Buffer = Provider::alloc_buf(&b.dev, 2 * LEN).unwrap();
    let mr_a = Provider::reg_mr(&a.dev, &pd_a, mem_a.clone(), AccessFlags::LOCAL_WRITE).unwrap();
    let mr_b = Provider::reg_mr(&b.dev, &pd_b, mem_b.clone(), AccessFlags::LOCAL_WRITE).unwrap();
    let qp = |dev: &UdpDevice, pd, cq| {
        Provider::create_qp(
            dev,
            pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
                sq_sig_all: false,
            },
        )
        .unwrap()
        .0
    };
    let mut qa = qp(&a.dev, &pd_a, &cq_a);
    let mut qb = qp(&b.dev, &pd_b, &cq_b);
    verbs::rc::connect(&a.dev, &mut qa, &params(&b, qb.qpn())).unwrap();
    verbs::rc::connect(&b.dev, &mut qb, &params(&a, qa.qpn())).unwrap();

    let recv = |qb: &mut mlx5::Qp, id: u64, off: usize| {
        let sg = [Sge {
            addr: mr_b.addr() + off as u64,
            length: LEN as u32,
            lkey: mr_b.lkey(),
        }];
        Provider::post_recv(
            &b.dev,
            qb,
            &[RecvWr {
                wr_id: id,
                sg_list: &sg,
            }],
        )
        .unwrap();
    };
    let send = |qa: &mut mlx5::Qp, id: u64, off: usize, data: &[u8]| {
        mem_a.write(off, data).unwrap();
        let sg = [Sge {
            addr: mr_a.addr() + off as u64,
            length: data.len() as u32,
            lkey: mr_a.lkey(),
        }];
        Provider::post_send(
            &a.dev,
            qa,
            &[SendWr {
                wr_id: id,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                sg_list: &sg,
                remote: RemoteOp::None,
                ..SendWr::default()
            }],
        )
        .unwrap();
    };
    let poll_one = |dev: &UdpDevice, cq: &mlx5::Cq| {
        let t = Instant::now();
        loop {
            let mut wc = [verbs::WorkCompletion::default(); 1];
            if Provider::poll_cq(dev, cq, &mut wc).unwrap() == 1 {
                return wc[0];
            }
            assert!(t.elapsed() < Duration::from_secs(60), "no completion");
            std::thread::yield_now();
        }
    };

    // Armed CQ, nothing sent yet: the waiter sleeps until the SEND arrives, ~1.5 s later.
    recv(&mut qb, 1, 0);
    Provider::req_notify_cq(&b.dev, &cq_b, false).unwrap();
    let data = pattern(7, LEN);
    let fired_before = b.nic.interrupts().count(1);
    let (ev, wall, cpu) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let cpu0 = thread_cpu();
            let t0 = Instant::now();
            let ev = b.dev.wait_cq_event(&mut ch, 120_000_000_000).unwrap();
            (ev, t0.elapsed(), thread_cpu() - cpu0)
        });
        std::thread::sleep(Duration::from_millis(1500));
        send(&mut qa, 10, 0, &data);
        waiter.join().unwrap()
    });
    let ev = ev.expect("the event came before the timeout");
    assert_eq!((ev.cqn, ev.cq_context), (cq_b.cqn(), 0xfeed));
    assert!(
        b.nic.interrupts().count(1) > fired_before,
        "the channel's vector fired"
    );
    assert!(
        wall >= Duration::from_millis(1000),
        "the wait ended before the SEND was posted ({wall:?})"
    );
    assert!(
        cpu * 20 < wall,
        "the waiting thread used {cpu:?} of CPU in a {wall:?} wait (5% allowed)"
    );
    let wc = poll_one(&b.dev, &cq_b);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (1, WcStatus::Success, WcOpcode::Recv, LEN as u32)
    );
    let mut got = vec![0u8; LEN];
    mem_b.read(0, &mut got).unwrap();
    assert_eq!(got, data, "received bytes");
    assert_eq!(poll_one(&a.dev, &cq_a).status, WcStatus::Success);

    // Not armed: the completion arrives, no event, the vector stays quiet and the wait ends
    // with its timeout.
    recv(&mut qb, 2, LEN);
    let quiet = b.nic.interrupts().count(1);
    let data2 = pattern(9, LEN);
    send(&mut qa, 11, LEN, &data2);
    assert_eq!(poll_one(&a.dev, &cq_a).status, WcStatus::Success);
    let wc = poll_one(&b.dev, &cq_b);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    mem_b.read(LEN, &mut got).unwrap();
    assert_eq!(got, data2);
    assert_eq!(b.dev.wait_cq_event(&mut ch, 300_000_000).unwrap(), None);
    assert_eq!(b.nic.interrupts().count(1), quiet, "an unarmed CQ fired");

    // No other asynchronous event (the driver EQ's vector 0 is waited on the same way) than
    // the communication-established event of B's QP, raised by its first packet.
    let est = b.dev.wait_async_event(100_000_000).unwrap();
    assert_eq!(
        est.map(|e| (e.event_type, e.element)),
        Some((AsyncEventType::CommEst, AsyncElement::Qp(qb.qpn())))
    );
    assert_eq!(b.dev.wait_async_event(100_000_000).unwrap(), None);

    assert!(
        a.nic.device().errors().is_empty(),
        "{:?}",
        a.nic.device().errors()
    );
    assert!(
        b.nic.device().errors().is_empty(),
        "{:?}",
        b.nic.device().errors()
    );

    // An RDMA WRITE with a wrong rkey: B's QP raises WQ_ACCESS_ERROR on the driver's EQ,
    // vector 0, which ends a sleeping wait for an asynchronous event.
    let fired_before = b.nic.interrupts().count(0);
    let (ev, wall, cpu) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let cpu0 = thread_cpu();
            let t0 = Instant::now();
            let ev = b.dev.wait_async_event(120_000_000_000).unwrap();
            (ev, t0.elapsed(), thread_cpu() - cpu0)
        });
        std::thread::sleep(Duration::from_millis(1500));
        let sg = [Sge {
            addr: mr_a.addr(),
            length: 64,
            lkey: mr_a.lkey(),
        }];
        Provider::post_send(
            &a.dev,
            &mut qa,
            &[SendWr {
                wr_id: 12,
                opcode: WrOpcode::RdmaWrite,
                flags: SendFlags::SIGNALED,
                sg_list: &sg,
                remote: RemoteOp::Rdma {
                    remote_addr: mr_b.addr(),
                    rkey: mr_b.rkey() ^ 0x5a00,
                },
                ..SendWr::default()
            }],
        )
        .unwrap();
        waiter.join().unwrap()
    });
    let ev = ev.expect("the event came before the timeout");
    assert_eq!(
        (ev.event_type, ev.element),
        (AsyncEventType::QpAccessErr, AsyncElement::Qp(qb.qpn()))
    );
    assert!(b.nic.interrupts().count(0) > fired_before, "vector 0 fired");
    assert!(wall >= Duration::from_millis(1000), "woke early ({wall:?})");
    assert!(
        cpu * 20 < wall,
        "the waiting thread used {cpu:?} of CPU in a {wall:?} wait (5% allowed)"
    );
    assert_eq!(poll_one(&a.dev, &cq_a).status, WcStatus::RemAccessErr);
    assert_eq!(a.nic.interrupts().stray() + b.nic.interrupts().stray(), 0);
    Provider::destroy_qp(&a.dev, qa).unwrap();
    Provider::destroy_qp(&b.dev, qb).unwrap();
    Provider::dereg_mr(&a.dev, mr_a).unwrap();
    Provider::dereg_mr(&b.dev, mr_b).unwrap();
    Provider::destroy_cq(&a.dev, cq_a).unwrap();
    Provider::destroy_cq(&b.dev, cq_b).unwrap();
    Provider::destroy_comp_channel(&b.dev, ch).unwrap();
    Provider::dealloc_pd(&a.dev, pd_a).unwrap();
    Provider::dealloc_pd(&b.dev, pd_b).unwrap();
    a.dev.shutdown().unwrap();
    b.dev.shutdown().unwrap();
}
