//! Wall-clock cost of setting up one RC connection through the connection manager (criterion),
//! both ends in one thread on two emulated NICs of one world:
//!
//! * `connect+accept`: `connect` (asynchronous) → `get_request` → `accept` (waits for the
//!   RTU) → ESTABLISHED on the client's channel; the QPs are created beforehand;
//! * `create_ep+connect+accept+destroy`: the whole rdma_client / rdma_server life of a
//!   connection: `create_ep` (address and route resolution, QP with its CQs and channels), the
//!   handshake above, `disconnect` on both sides, `destroy_ep` on both sides.
//!
//! ```text
//! cargo bench -p nic-testbed --bench cm_connect
//! ```
//!
//! The emulated device runs inline, so the figures include the device's work (MAD and QP
//! processing on both NICs), not only the manager's. Timings on a shared machine are noisy.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cm::{AddrInfo, Cm, CmConfig, CmId, EventType, QpInitAttr, RaiFlags, getaddrinfo};
use criterion::{Criterion, criterion_group, criterion_main};
use nic_emulator::Profile;
use nic_testbed::{EmuDevice, Testbed, World};
use verbs::{Gid, QpCap};

/// Two NICs (127.0.0.1, 127.0.0.2) of one world under one connection manager.
fn world() -> (Vec<Testbed>, Cm<EmuDevice>) {
    let world = World::new(1);
    let tbs: Vec<Testbed> = ["127.0.0.1", "127.0.0.2"]
        .iter()
        .map(|ip| world.nic(ip.parse().unwrap(), Profile::default()))
        .collect();
    let cm = Cm::new(tbs[0].platform(), CmConfig::default());
    for tb in &tbs {
        let dev = tb.probe(mlx5::Config::default()).unwrap();
        let mac = dev.mac().unwrap();
        dev.set_roce_gid(0, Gid::from_ipv4(tb.ip().octets()).0, mac)
            .unwrap();
        cm.add_device(dev, mac).map_err(|(e, _)| e).unwrap();
    }
    (tbs, cm)
}

fn attr() -> QpInitAttr<mlx5::Cq, mlx5::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
        ..QpInitAttr::default()
    }
}

fn bench(c: &mut Criterion) {
    let (_nics, cm) = world();
    let server = "127.0.0.2";
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(server), Some("7471"), Some(&passive)).unwrap();
    let listen = cm.create_ep(&res, None, Some(&mut attr())).unwrap();
    listen.listen(0).unwrap();
    let hints = AddrInfo {
        ai_src_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(server), Some("7471"), Some(&hints)).unwrap();
    let ch = cm.create_event_channel().unwrap();

    let handshake = |client: &CmId<EmuDevice>| -> CmId<EmuDevice> {
        client.connect(None).unwrap();
        let conn = listen.get_request().unwrap();
        conn.accept(None).unwrap();
        let ev = ch.get_cm_event().unwrap();
        assert_eq!(ev.event, EventType::Established);
        conn
    };
    let close = |client: CmId<EmuDevice>, conn: CmId<EmuDevice>| {
        client.disconnect().unwrap();
        conn.disconnect().unwrap();
        assert_eq!(ch.get_cm_event().unwrap().event, EventType::Disconnected);
        drop((client, conn));
    };

    let mut g = c.benchmark_group("cm");
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("connect+accept", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let client = cm.create_ep(&res, None, Some(&mut attr())).unwrap();
                client.migrate_id(Some(&ch)).unwrap();
                let t = Instant::now();
                let conn = black_box(handshake(&client));
                total += t.elapsed();
                close(client, conn);
            }
            total
        })
    });
    g.bench_function("create_ep+connect+accept+destroy", |b| {
        b.iter(|| {
            let client = cm.create_ep(&res, None, Some(&mut attr())).unwrap();
            client.migrate_id(Some(&ch)).unwrap();
            let conn = handshake(&client);
            close(client, conn);
        })
    });
    g.finish();
    drop((listen, ch));
}

criterion_group!(benches, bench);
criterion_main!(benches);
