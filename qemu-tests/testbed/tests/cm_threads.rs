//! librdmacm's rdma_server / rdma_client flow with each end on its own thread: both threads
//! block in synchronous CM calls (get_request, accept, connect, completions) and each drives
//! the one progress engine, which serves every id on every device.

use cm::ConnParam;
use verbs::{SendFlags, WcOpcode, WcStatus};

mod cm_support;
use cm_support::*;

#[test]
fn server_and_client_in_two_threads() {
    let s = setup(11);
    let baseline = s.live_settled();
    let listen = listener(&s);
    let client = active(&s);
    assert!(client.is_sync());

    std::thread::scope(|sc| {
        let server = sc.spawn(|| {
            let conn = listen.get_request().expect("get_request");
            let sbuf = buf(&conn, 4096);
            conn.post_recv(7, sbuf.addr(), 16, &sbuf.mr).unwrap();
            conn.accept(None).expect("accept");
            let wc = conn.get_recv_comp().unwrap();
            assert_eq!(
                (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
                (7, WcStatus::Success, WcOpcode::Recv, 16)
            );
            let mut got = [0u8; 16];
            sbuf.mem.read(0, &mut got).unwrap();
            assert_eq!(&got, b"0123456789abcdef");
            // a receive left posted: the disconnect must flush it
            conn.post_recv(9, sbuf.addr() + 1024, 16, &sbuf.mr).unwrap();
            conn.post_send_inline(8, b"fedcba9876543210", SendFlags::SIGNALED)
                .unwrap();
            assert_eq!(conn.get_send_comp().unwrap().status, WcStatus::Success);
            let wc = conn.get_recv_comp().unwrap();
            assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
            sbuf.free(&conn);
            conn.disconnect().ok();
            conn.destroy_ep();
        });

        let cbuf = buf(&client, 4096);
        client
            .post_recv(1, cbuf.addr() + 2048, 16, &cbuf.mr)
            .unwrap();
        // synchronous connect: returns once the server thread has accepted
        client
            .connect(Some(&ConnParam {
                retry_count: 7,
                rnr_retry_count: 7,
                ..ConnParam::default()
            }))
            .expect("connect");
        cbuf.mem.write(0, b"0123456789abcdef").unwrap();
        client
            .post_send(2, cbuf.addr(), 16, &cbuf.mr, SendFlags::SIGNALED)
            .unwrap();
        let wc = client.get_send_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        let wc = client.get_recv_comp().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::Success, 16)
        );
        let mut got = [0u8; 16];
        cbuf.mem.read(2048, &mut got).unwrap();
        assert_eq!(&got, b"fedcba9876543210");
        client.disconnect().expect("disconnect");
        cbuf.free(&client);
        server.join().expect("server thread");
    });

    client.destroy_ep();
    listen.destroy_ep();
    assert_eq!(s.live_settled(), baseline);
    s.teardown();
}
