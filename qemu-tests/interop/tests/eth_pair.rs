//! Two of our NICs (emulated device + mlx5 driver + our CM) on two ends of an Ethernet link
//! (QEMU's socket-netdev format on 127.0.0.1): real ARP, then rping's exchange through the CM.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cm::CmConfig;
use interop::EthNic;
use interop::rping::{self, Options, Server};
use nic_emulator::roce_wire::fabric::EthLink;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
const A_MAC: [u8; 6] = [0x02, 0, 0, 0x77, 1, 1];
const B_MAC: [u8; 6] = [0x02, 0, 0, 0x77, 1, 2];

fn sa(p: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)
}

fn cfg() -> CmConfig {
    CmConfig {
        wait_limit_ns: Some(30_000_000_000),
        ..CmConfig::default()
    }
}

#[test]
fn two_nics_ping_over_ethernet_links() {
    let a = EthNic::start(EthLink::new(sa(48020), sa(48021), A_MAC), A_IP, cfg()).unwrap();
    let b = EthNic::start(EthLink::new(sa(48021), sa(48020), B_MAC), B_IP, cfg()).unwrap();
    // ARP both ways: A asks, B answers and learns A from the request.
    assert_eq!(
        a.resolve(B_IP, Duration::from_secs(2)).unwrap(),
        Some(B_MAC)
    );
    assert_eq!(b.eth().lookup(A_IP), Some(A_MAC));
    assert_eq!(a.eth().stats().arp_requests_sent, 1);
    assert_eq!(b.eth().stats().arp_replies_sent, 1);

    let o = Options {
        count: 10,
        size: 4096,
        ..Options::default()
    };
    let server = Server::listen(&b, &o).unwrap();
    let srv = std::thread::scope(|s| {
        let h = s.spawn(|| {
            server.serve_one(
                &b,
                &Options {
                    count: 0,
                    ..o.clone()
                },
            )
        });
        let c = rping::client(&a, B_IP, &o).unwrap();
        assert_eq!(c.pings, 10);
        assert_eq!(c.lines.len(), 10);
        assert!(
            c.lines[3].starts_with("ping data: rdma-ping-3: DEFG"),
            "{}",
            c.lines[3]
        );
        h.join().unwrap()
    })
    .unwrap();
    // The server ran until the client disconnected.
    assert_eq!(srv.pings, 10);
    assert!(srv.peer_disconnected);
    assert!(srv.lines[0].starts_with("server ping data: rdma-ping-0: ABC"));
    server.close();
    // 4096-byte pings at MTU 1024: per ping, the server sent a READ request, 4 WRITE packets
    // and 2 SENDs, the client 4 READ responses and 2 SENDs; nothing was malformed.
    let (sa_, sb) = (a.port_stats(), b.port_stats());
    assert!(sa_.tx_frames >= 60 && sb.tx_frames >= 70, "{sa_:?} {sb:?}");
    assert_eq!(sa_.rx_malformed + sb.rx_malformed, 0);
    assert_eq!(
        a.eth().stats().tx_unresolved + b.eth().stats().tx_unresolved,
        0
    );
}
