//! Address resolution on the Ethernet fabric: `resolve_addr` / `create_ep` ask the port to
//! ARP for a destination the neighbour table does not know (as a kernel's address resolution
//! does), and an address nobody answers for fails with ETIMEDOUT after the port's retries.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cm::{AddrInfo, CmConfig, Error, RaiFlags, getaddrinfo};
use nic_emulator::roce_wire::fabric::EthLink;
use nic_testbed::eth::EthNic;

fn sa(p: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)
}

fn attr() -> cm::QpInitAttr<mlx5::Cq, mlx5::Srq> {
    cm::QpInitAttr {
        cap: verbs::QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..cm::QpInitAttr::default()
    }
}

fn arp_requests(nic: &EthNic) -> Vec<Ipv4Addr> {
    // ARP (EtherType 0x0806) requests (op 1) sent: their target address
    nic.eth()
        .take_capture()
        .into_iter()
        .filter(|c| {
            c.tx && c.frame.len() >= 42 && c.frame[12..14] == [0x08, 0x06] && c.frame[21] == 1
        })
        .map(|c| Ipv4Addr::new(c.frame[38], c.frame[39], c.frame[40], c.frame[41]))
        .collect()
}

#[test]
fn a_client_that_never_adds_a_neighbour_connects_by_arp() {
    let cfg = CmConfig {
        cm_response_timeout: 18,
        max_cm_retries: 3,
        ..CmConfig::default()
    };
    let (a_ip, b_ip) = (Ipv4Addr::new(10, 79, 0, 1), Ipv4Addr::new(10, 79, 0, 2));
    let a = EthNic::start(
        EthLink::new(sa(48192), sa(48193), [0x02, 0, 0, 0x79, 0, 1]),
        a_ip,
        cfg,
    )
    .unwrap();
    let b = EthNic::start(
        EthLink::new(sa(48193), sa(48192), [0x02, 0, 0, 0x79, 0, 2]),
        b_ip,
        cfg,
    )
    .unwrap();
    // nobody knows anybody
    assert_eq!(a.cm.neighbor(b_ip), None);
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(&b_ip.to_string()), Some("7471"), Some(&passive)).unwrap();
    let l = b.cm.create_ep(&res, None, Some(&mut attr())).unwrap();
    l.listen(1).unwrap();

    a.eth().start_capture();
    let active = AddrInfo {
        ai_src_addr: Some(SocketAddrV4::new(a_ip, 0).into()),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(&b_ip.to_string()), Some("7471"), Some(&active)).unwrap();
    let id = a.cm.create_ep(&res, None, Some(&mut attr())).unwrap();
    assert_eq!(arp_requests(&a), [b_ip], "one ARP request, for the server");
    assert_eq!(a.cm.neighbor(b_ip).map(|n| n.mac), Some(b.mac()));

    // and the connection is made
    let t = std::thread::spawn({
        let cm = b.cm.clone();
        move || {
            let _keep = &cm;
            let conn = l.get_request().unwrap();
            conn.accept(None).unwrap();
            (conn, l)
        }
    });
    let r = id.connect(None);
    assert_eq!(r, Ok(()), "{:?} {:?}", a.cm.stats(), b.cm.stats());
    let (conn, l) = t.join().unwrap();
    assert!(id.qp_num().is_some());
    drop((id, conn, l));
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn an_address_nobody_answers_for_is_etimedout_after_arp_retries() {
    let a_ip = Ipv4Addr::new(10, 79, 1, 1);
    let a = EthNic::start(
        EthLink::new(sa(48194), sa(48195), [0x02, 0, 0, 0x79, 1, 1]),
        a_ip,
        CmConfig::default(),
    )
    .unwrap();
    let ghost = Ipv4Addr::new(10, 79, 1, 9);
    a.eth().start_capture();
    let id = a.cm.create_id(None, 0, cm::PortSpace::TCP).unwrap();
    assert_eq!(
        id.resolve_addr(
            Some(&SocketAddrV4::new(a_ip, 0).into()),
            &SocketAddrV4::new(ghost, 7471).into(),
            1500
        ),
        Err(Error::TimedOut)
    );
    let asked = arp_requests(&a);
    assert!(asked.len() >= 2, "the port retried: {asked:?}");
    assert!(asked.iter().all(|ip| *ip == ghost));
    drop(id);
    std::thread::sleep(Duration::from_millis(10));
    a.shutdown().unwrap();
}
