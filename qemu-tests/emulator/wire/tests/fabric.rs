//! Fabrics: the deterministic in-process network and the loopback UDP one.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use roce_wire::fabric::{
    Fabric, FabricError, FaultConfig, InProcessFabric, Port, UdpFabric, is_loopback,
};
use roce_wire::packet::{Bth, HeaderKind, Opcode, Packet, WireError};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

/// A SEND ONLY from `src` to `dst` whose PSN is `psn` and whose payload names it.
fn frame(src: Ipv4Addr, dst: Ipv4Addr, psn: u32) -> Vec<u8> {
    let mut bth = Bth::new(Opcode::RcSendOnly, 0x11, psn);
    bth.ack_req = true;
    Packet::new(src, dst, bth, psn.to_be_bytes().to_vec())
        .encode()
        .unwrap()
}

fn psn_of(f: &[u8]) -> u32 {
    Packet::decode(f).unwrap().bth.psn
}

fn drain(p: &dyn Port) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(f) = p.recv().unwrap() {
        out.push(f);
    }
    out
}

// ---------------------------------------------------------------------------------------
// In-process fabric.

#[test]
fn delivers_in_order_without_faults() {
    let fab = InProcessFabric::new(1);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    assert_eq!(a.addr(), A);
    for psn in 0..10 {
        a.send(frame(A, B, psn)).unwrap();
    }
    b.send(frame(B, A, 99)).unwrap();
    let got: Vec<u32> = drain(b.as_ref()).iter().map(|f| psn_of(f)).collect();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(psn_of(&a.recv().unwrap().unwrap()), 99);
    assert_eq!(a.recv().unwrap(), None);
    let s = fab.stats();
    assert_eq!((s.sent, s.delivered, s.dropped()), (11, 11, 0));
    assert_eq!(fab.in_flight(), 0);
}

#[test]
fn send_checks_and_routing() {
    let fab = InProcessFabric::new(1);
    let a = fab.attach_port(A).unwrap();
    assert_eq!(fab.attach(A).err(), Some(FabricError::AddrInUse(A)));
    // The frame must come from the port's address.
    assert_eq!(
        a.send(frame(B, A, 0)),
        Err(FabricError::SourceMismatch { port: A, frame: B })
    );
    assert_eq!(
        a.send(vec![0x45; 10]),
        Err(FabricError::Malformed(WireError::Truncated(
            HeaderKind::Ipv4
        )))
    );
    assert_eq!(
        a.send(vec![0x60; 40]),
        Err(FabricError::Malformed(WireError::NotIpv4))
    );
    // Nobody at C: dropped, counted.
    a.send(frame(A, C, 0)).unwrap();
    assert_eq!(fab.stats().dropped_no_route, 1);
    // Detaching drops what was queued and frees the address.
    let c = fab.attach(C).unwrap();
    a.send(frame(A, C, 1)).unwrap();
    a.send(frame(A, C, 2)).unwrap();
    drop(c);
    assert_eq!(fab.stats().dropped_no_route, 3);
    let c = fab.attach(C).unwrap();
    assert_eq!(c.recv().unwrap(), None);
    // A port can send to itself.
    a.send(frame(A, A, 7)).unwrap();
    assert_eq!(psn_of(&a.recv().unwrap().unwrap()), 7);
}

#[test]
fn delay_and_jitter_follow_the_virtual_clock() {
    let fab = InProcessFabric::new(5);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    fab.set_faults(FaultConfig {
        delay_ns: 1_000,
        ..FaultConfig::NONE
    });
    a.send(frame(A, B, 1)).unwrap();
    assert_eq!(fab.next_event_ns(), Some(1_000));
    fab.advance(999);
    assert_eq!(b.recv().unwrap(), None);
    fab.advance(1);
    assert_eq!(psn_of(&b.recv().unwrap().unwrap()), 1);
    assert_eq!(fab.next_event_ns(), None);

    fab.set_faults(FaultConfig {
        delay_ns: 1_000,
        jitter_ns: 500,
        ..FaultConfig::NONE
    });
    let t0 = fab.now_ns();
    for psn in 0..200 {
        a.send(frame(A, B, psn)).unwrap();
    }
    fab.advance(999);
    assert_eq!(b.recv().unwrap(), None);
    let mut got = Vec::new();
    while let Some(t) = fab.next_event_ns() {
        assert!((t0 + 1_000..=t0 + 1_500).contains(&t), "{t}");
        fab.advance_to(t);
        got.extend(drain(b.as_ref()).iter().map(|f| psn_of(f)));
    }
    assert_eq!(got.len(), 200);
    // Jitter reorders; nothing is lost or duplicated.
    assert_ne!(got, (0..200).collect::<Vec<_>>());
    got.sort_unstable();
    assert_eq!(got, (0..200).collect::<Vec<_>>());
}

/// Runs a fixed exchange with every fault enabled and records what each port received, when.
fn scenario(
    seed: u64,
) -> (
    Vec<(u64, Ipv4Addr, Vec<u8>)>,
    roce_wire::fabric::FabricStats,
) {
    let fab = InProcessFabric::new(seed);
    fab.set_faults(FaultConfig {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.1,
        delay_ns: 1_000,
        jitter_ns: 700,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    let mut log = Vec::new();
    for i in 0..500u32 {
        a.send(frame(A, B, i)).unwrap();
        if i % 3 == 0 {
            b.send(frame(B, A, i)).unwrap();
        }
        fab.advance(100);
        for (addr, p) in [(A, &a), (B, &b)] {
            for f in drain(p.as_ref()) {
                log.push((fab.now_ns(), addr, f));
            }
        }
    }
    while let Some(t) = fab.next_event_ns() {
        fab.advance_to(t);
        for (addr, p) in [(A, &a), (B, &b)] {
            for f in drain(p.as_ref()) {
                log.push((fab.now_ns(), addr, f));
            }
        }
    }
    let s = fab.stats();
    assert_eq!(
        s.sent + s.duplicated,
        s.delivered + s.dropped() + fab.in_flight() as u64
    );
    assert_eq!(fab.in_flight(), 0);
    (log, s)
}

#[test]
fn same_seed_same_deliveries() {
    let (log1, s1) = scenario(0xDEAD_BEEF);
    let (log2, s2) = scenario(0xDEAD_BEEF);
    assert_eq!(s1, s2);
    assert_eq!(log1, log2);
    assert!(s1.dropped_loss > 0 && s1.duplicated > 0 && s1.reordered > 0 && s1.corrupted > 0);
    let (log3, _) = scenario(42);
    assert_ne!(log1, log3);
}

#[test]
fn loss_rate_is_about_ten_percent() {
    let fab = InProcessFabric::new(2024);
    fab.set_faults(FaultConfig {
        loss: 0.10,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    let f = frame(A, B, 0);
    for _ in 0..10_000 {
        a.send(f.clone()).unwrap();
    }
    let received = drain(b.as_ref()).len() as u64;
    let s = fab.stats();
    assert_eq!(s.sent, 10_000);
    assert!(
        (800..=1_200).contains(&s.dropped_loss),
        "{}",
        s.dropped_loss
    );
    assert_eq!(received, 10_000 - s.dropped_loss);
    assert_eq!(s.delivered, received);
}

#[test]
fn duplication_is_observed() {
    let fab = InProcessFabric::new(77);
    fab.set_faults(FaultConfig {
        duplicate: 0.2,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    for psn in 0..1_000 {
        a.send(frame(A, B, psn)).unwrap();
    }
    let got: Vec<u32> = drain(b.as_ref()).iter().map(|f| psn_of(f)).collect();
    let s = fab.stats();
    assert!((120..=280).contains(&s.duplicated), "{}", s.duplicated);
    assert_eq!(got.len() as u64, 1_000 + s.duplicated);
    let twice = got.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    assert_eq!(
        twice, s.duplicated,
        "without delay a copy follows its original"
    );
}

#[test]
fn reordering_is_observed_and_nothing_is_lost() {
    let fab = InProcessFabric::new(99);
    fab.set_faults(FaultConfig {
        reorder: 0.2,
        reorder_depth: 3,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    let mut got = Vec::new();
    for psn in 0..1_000 {
        a.send(frame(A, B, psn)).unwrap();
        got.extend(drain(b.as_ref()).iter().map(|f| psn_of(f)));
    }
    // Frames still held at the end come out once their reorder timeout passes.
    fab.advance(FaultConfig::NONE.reorder_timeout_ns);
    got.extend(drain(b.as_ref()).iter().map(|f| psn_of(f)));
    let s = fab.stats();
    assert!(s.reordered > 100, "{}", s.reordered);
    let inversions = got.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 100, "{inversions}");
    // A held frame is overtaken by at most `reorder_depth` later frames.
    for (pos, &psn) in got.iter().enumerate() {
        assert!(pos <= psn as usize + 3 * 4, "psn {psn} at {pos}");
    }
    got.sort_unstable();
    assert_eq!(got, (0..1_000).collect::<Vec<_>>());
}

#[test]
fn held_frame_is_released_by_timeout() {
    let fab = InProcessFabric::new(3);
    fab.set_faults(FaultConfig {
        reorder: 1.0,
        reorder_timeout_ns: 5_000,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    a.send(frame(A, B, 1)).unwrap();
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(fab.next_event_ns(), Some(5_000));
    fab.advance(4_999);
    assert_eq!(b.recv().unwrap(), None);
    fab.advance(1);
    assert_eq!(psn_of(&b.recv().unwrap().unwrap()), 1);
}

#[test]
fn corruption_is_caught_by_the_icrc() {
    let fab = InProcessFabric::new(11);
    fab.set_faults(FaultConfig {
        corrupt: 1.0,
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    for psn in 0..500 {
        a.send(frame(A, B, psn)).unwrap();
    }
    let got = drain(b.as_ref());
    assert_eq!(got.len(), 500);
    assert_eq!(fab.stats().corrupted, 500);
    for f in got {
        assert!(
            matches!(Packet::decode(&f), Err(WireError::BadIcrc { .. })),
            "{:?}",
            Packet::decode(&f)
        );
    }
}

#[test]
fn cut_links_and_paths() {
    let fab = InProcessFabric::new(8);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    fab.cut_link(A, B);
    assert!(fab.is_cut(A, B) && fab.is_cut(B, A));
    a.send(frame(A, B, 1)).unwrap();
    b.send(frame(B, A, 2)).unwrap();
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(a.recv().unwrap(), None);
    assert_eq!(fab.stats().dropped_cut, 2);
    fab.heal_link(A, B);
    a.send(frame(A, B, 3)).unwrap();
    assert_eq!(psn_of(&b.recv().unwrap().unwrap()), 3);
    // One way only: requests get through, responses do not.
    fab.cut_path(B, A);
    a.send(frame(A, B, 4)).unwrap();
    b.send(frame(B, A, 5)).unwrap();
    assert_eq!(psn_of(&b.recv().unwrap().unwrap()), 4);
    assert_eq!(a.recv().unwrap(), None);
    fab.heal_path(B, A);
    b.send(frame(B, A, 6)).unwrap();
    assert_eq!(psn_of(&a.recv().unwrap().unwrap()), 6);
}

#[test]
fn per_path_faults_override_the_default() {
    let fab = InProcessFabric::new(4);
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    fab.set_path_faults(
        A,
        B,
        Some(FaultConfig {
            loss: 1.0,
            ..FaultConfig::NONE
        }),
    );
    a.send(frame(A, B, 1)).unwrap();
    b.send(frame(B, A, 2)).unwrap();
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(psn_of(&a.recv().unwrap().unwrap()), 2);
    fab.set_path_faults(A, B, None);
    a.send(frame(A, B, 3)).unwrap();
    assert_eq!(psn_of(&b.recv().unwrap().unwrap()), 3);
}

#[test]
fn threaded_recv_timeout_virtual_clock() {
    let fab = InProcessFabric::new(6);
    let a: Arc<dyn Port> = Arc::from(fab.attach(A).unwrap());
    let b: Arc<dyn Port> = Arc::from(fab.attach(B).unwrap());
    assert_eq!(b.recv_timeout(Duration::from_millis(5)).unwrap(), None);
    let rx = thread::spawn({
        let b = Arc::clone(&b);
        move || {
            let mut got = Vec::new();
            while got.len() < 100 {
                match b.recv_timeout(Duration::from_secs(10)).unwrap() {
                    Some(f) => got.push(psn_of(&f)),
                    None => break,
                }
            }
            got
        }
    });
    for psn in 0..100 {
        a.send(frame(A, B, psn)).unwrap();
    }
    assert_eq!(rx.join().unwrap(), (0..100).collect::<Vec<_>>());

    // A delayed frame waits for the clock; advancing wakes the receiver.
    fab.set_faults(FaultConfig {
        delay_ns: 10_000,
        ..FaultConfig::NONE
    });
    let rx = thread::spawn({
        let b = Arc::clone(&b);
        move || b.recv_timeout(Duration::from_secs(10)).unwrap()
    });
    a.send(frame(A, B, 500)).unwrap();
    thread::sleep(Duration::from_millis(20));
    fab.advance(10_000);
    assert_eq!(psn_of(&rx.join().unwrap().unwrap()), 500);
}

#[test]
fn threaded_recv_timeout_real_clock() {
    let fab = InProcessFabric::with_real_clock(6);
    fab.set_faults(FaultConfig {
        delay_ns: 2_000_000, // 2 ms of real time
        ..FaultConfig::NONE
    });
    let a = fab.attach(A).unwrap();
    let b = fab.attach(B).unwrap();
    a.send(frame(A, B, 1)).unwrap();
    let got = b.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(psn_of(&got), 1);
    assert!(fab.now_ns() >= 2_000_000);
    assert_eq!(b.recv_timeout(Duration::from_millis(1)).unwrap(), None);
}

// ---------------------------------------------------------------------------------------
// UDP fabric on loopback. Each test uses its own 127.0.0.x addresses and a port of its own.

const UDP_TEST_PORT: u16 = 47_917;

#[test]
fn udp_round_trip_on_loopback() {
    let fab = UdpFabric::new(UDP_TEST_PORT);
    let (xa, xb) = (Ipv4Addr::new(127, 0, 0, 201), Ipv4Addr::new(127, 0, 0, 202));
    let a = fab.attach(xa).unwrap();
    let b = fab.attach(xb).unwrap();
    assert_eq!(b.recv().unwrap(), None);

    let mut bth = Bth::new(Opcode::RcSendOnlyWithImm, 0x42, 0xFF_FFFF);
    bth.solicited = true;
    let mut pkt = Packet::new(xa, xb, bth, b"over the loopback".to_vec()).with_ext(
        roce_wire::packet::ExtHeaders {
            imm_dt: Some(roce_wire::packet::ImmDt { imm: 0xCAFE_F00D }),
            ..Default::default()
        },
    );
    pkt.udp_src_port = 0xC123; // not carried by the socket
    pkt.ip_id = 0x7777; // nor this
    a.send(pkt.encode().unwrap()).unwrap();
    let got = b
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("frame");
    let back = Packet::decode(&got).unwrap();
    assert_eq!((back.src_ip, back.dst_ip), (xa, xb));
    assert_eq!(back.udp_src_port, UDP_TEST_PORT);
    assert_eq!(back.payload, pkt.payload);
    assert_eq!(back.ext, pkt.ext);
    assert_eq!(back.bth.psn, 0xFF_FFFF);
    assert!(back.bth.solicited);

    // The reply path, and the UDP-payload decoder directly on the datagram bytes.
    b.send(frame(xb, xa, 9)).unwrap();
    let f = a.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(psn_of(&f), 9);
    let direct = Packet::decode_udp_payload(xb, xa, UDP_TEST_PORT, &f[28..]).unwrap();
    assert_eq!(direct.bth.psn, 9);

    // Corruption before the socket is still caught after it.
    let mut bad = frame(xa, xb, 10);
    bad[44] ^= 0x04;
    a.send(bad).unwrap();
    let f = b.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(matches!(Packet::decode(&f), Err(WireError::BadIcrc { .. })));

    // Non-blocking receive after a blocking one.
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(b.recv_timeout(Duration::ZERO).unwrap(), None);
    assert_eq!(b.recv_timeout(Duration::from_millis(10)).unwrap(), None);
}

#[test]
fn udp_many_frames_threaded() {
    let fab = UdpFabric::new(UDP_TEST_PORT);
    let (xa, xb) = (Ipv4Addr::new(127, 0, 0, 203), Ipv4Addr::new(127, 0, 0, 204));
    let a = fab.bind(xa).unwrap();
    let b: Arc<dyn Port> = Arc::from(fab.attach(xb).unwrap());
    let rx = thread::spawn({
        let b = Arc::clone(&b);
        move || {
            let mut got = Vec::new();
            while let Some(f) = b.recv_timeout(Duration::from_secs(5)).unwrap() {
                got.push(psn_of(&f));
                if got.len() == 200 {
                    break;
                }
            }
            got
        }
    });
    for psn in 0..200 {
        a.send(frame(xa, xb, psn)).unwrap();
        if psn % 50 == 49 {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let got = rx.join().unwrap();
    // Loopback UDP does not reorder; it could drop under buffer pressure, which 200 small
    // frames with pauses do not reach.
    assert_eq!(got, (0..200).collect::<Vec<_>>());
}

#[test]
fn udp_refuses_non_loopback_addresses() {
    let fab = UdpFabric::new(UDP_TEST_PORT);
    for addr in [
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(192, 168, 1, 1),
        Ipv4Addr::new(128, 0, 0, 1),
        Ipv4Addr::BROADCAST,
    ] {
        assert!(!is_loopback(addr));
        assert_eq!(fab.attach(addr).err(), Some(FabricError::NotLoopback(addr)));
    }
    let xa = Ipv4Addr::new(127, 0, 0, 205);
    let a = fab.attach(xa).unwrap();
    assert_eq!(fab.attach(xa).err(), Some(FabricError::AddrInUse(xa)));
    let outside = Ipv4Addr::new(8, 8, 8, 8);
    assert_eq!(
        a.send(frame(xa, outside, 0)),
        Err(FabricError::NotLoopback(outside))
    );
    assert_eq!(
        a.send(frame(Ipv4Addr::new(127, 0, 0, 206), xa, 0)),
        Err(FabricError::SourceMismatch {
            port: xa,
            frame: Ipv4Addr::new(127, 0, 0, 206)
        })
    );
    // Nobody bound at the destination: the datagram is lost, no error surfaces.
    let nobody = Ipv4Addr::new(127, 0, 0, 210);
    a.send(frame(xa, nobody, 0)).unwrap();
    assert_eq!(a.recv_timeout(Duration::from_millis(20)).unwrap(), None);
    assert_eq!(a.recv().unwrap(), None);
    let mut broken = frame(xa, Ipv4Addr::new(127, 0, 0, 207), 0);
    broken[11] ^= 1;
    assert_eq!(
        a.send(broken),
        Err(FabricError::Malformed(WireError::BadIpChecksum))
    );
}

#[test]
fn fabrics_are_interchangeable() {
    fn ping(fab: &dyn Fabric, x: Ipv4Addr, y: Ipv4Addr) {
        let a = fab.attach(x).unwrap();
        let b = fab.attach(y).unwrap();
        a.send(frame(x, y, 1234)).unwrap();
        let f = b.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(psn_of(&f), 1234);
    }
    ping(&InProcessFabric::new(0), A, B);
    ping(
        &UdpFabric::new(UDP_TEST_PORT),
        Ipv4Addr::new(127, 0, 0, 208),
        Ipv4Addr::new(127, 0, 0, 209),
    );
}
