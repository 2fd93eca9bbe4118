//! 256 connections between two emulated NICs in one thread: all requested at once, accepted
//! one by one, a message on each, disconnected, destroyed, nothing left behind.

use cm::{CmConfig, ConnParam, EventType, getaddrinfo};
use verbs::{SendFlags, WcStatus};

mod cm_support;
use cm_support::*;

const N: usize = 256;

#[test]
fn two_hundred_fifty_six_connections() {
    // Each connection end has two CQs with a completion channel each (librdmacm's auto CQs),
    // and an mlx5 completion channel is an EQ: 16 in the default profile, at most 256. So
    // the CQs come without channels here (get_*_comp polls them).
    let s = setup_cfg(
        41,
        CmConfig {
            auto_comp_channels: false,
            ..cfg()
        },
    );
    let baseline = s.live_settled();
    let listen = listener(&s);
    let ch = s.cm.create_event_channel().unwrap();
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let clients: Vec<Id> = (0..N)
        .map(|i| {
            let mut a = attr();
            let id =
                s.cm.create_ep(&res, None, Some(&mut a))
                    .unwrap_or_else(|e| panic!("endpoint {i}: {e:?}"));
            id.migrate_id(Some(&ch)).unwrap();
            let tag = (i as u32).to_be_bytes();
            id.connect(Some(&ConnParam {
                private_data: &tag,
                responder_resources: 0xFF,
                initiator_depth: 0xFF,
                retry_count: 7,
                rnr_retry_count: 7,
                ..ConnParam::default()
            }))
            .unwrap();
            id
        })
        .collect();
    // every request is answered; they come in the order they were sent
    let mut servers = Vec::with_capacity(N);
    for i in 0..N {
        let conn = listen.get_request().unwrap_or_else(|e| {
            panic!(
                "request {i}: {e:?} {:?} at {}",
                s.cm.stats(),
                s.world.now_ns()
            )
        });
        let pd = conn.event().unwrap().param.private_data().to_vec();
        assert_eq!(pd[..4], (i as u32).to_be_bytes(), "request {i}");
        servers.push(conn);
    }
    let bufs: Vec<Buf> = servers.iter().map(|c| buf(c, 4096)).collect();
    for (c, b) in servers.iter().zip(&bufs) {
        c.post_recv(1, b.addr(), 16, &b.mr).unwrap();
        if let Err(e) = c.accept(None) {
            panic!(
                "accept: {e:?} {:?} {:?} at {} ns",
                c.event(),
                s.cm.stats(),
                s.world.now_ns()
            );
        }
    }
    let mut established = 0;
    while established < N {
        let ev = ch.get_cm_event().unwrap();
        assert_eq!(ev.event, EventType::Established, "{ev:?}");
        established += 1;
    }
    for (i, c) in clients.iter().enumerate() {
        let tag = [i as u8; 16];
        c.post_send_inline(2, &tag, SendFlags::SIGNALED).unwrap();
        assert_eq!(c.get_send_comp().unwrap().status, WcStatus::Success);
    }
    for (i, (c, b)) in servers.iter().zip(&bufs).enumerate() {
        let wc = c.get_recv_comp().unwrap();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
        let mut got = [0u8; 16];
        b.mem.read(0, &mut got).unwrap();
        assert_eq!(got, [i as u8; 16], "connection {i} got its own message");
    }
    for c in &clients {
        c.disconnect().unwrap();
    }
    for c in &servers {
        c.disconnect().unwrap();
    }
    let mut disconnected = 0;
    while disconnected < N {
        assert_eq!(ch.get_cm_event().unwrap().event, EventType::Disconnected);
        disconnected += 1;
    }
    for (c, b) in servers.iter().zip(bufs) {
        b.free(c);
    }
    let st = s.cm.stats();
    drop((clients, servers, listen, ch));
    assert_eq!(s.live_settled(), baseline);
    // 256 requests at once fit the MAD QP's receive ring: nothing was lost or retried
    assert_eq!(
        (
            st.bad_mads,
            st.send_failures,
            st.retransmits,
            st.backlog_drops
        ),
        (0, 0, 0, 0),
        "{st:?}"
    );
    s.teardown();
}
