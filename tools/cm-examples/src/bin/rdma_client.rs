//! `rdma_client`: librdmacm's rdma_client example on the stack. A synchronous active
//! endpoint to `-s` (default 127.0.0.1) port 7471 (`-p`): a 16-byte receive posted before
//! `connect`, one 16-byte SEND (inline when the QP allows 16 inline bytes), the peer's
//! 16 bytes received, disconnect. Prints `rdma_client: start` and `rdma_client: end N` as the
//! original; on stderr, its addresses and what it received.
//!
//! The address of the server is resolved by the connection manager (ARP through the NIC's
//! port); the program adds nothing to the neighbour table.
//!
//! As in C, the messages live in static memory (`static RECV_MSG: StaticBytes<16>`, made
//! device-reachable with `CmId::map_buf` and registered with `reg_msgs`; device memory where
//! the device's DMA cannot map it), and the SEND is inline (no MR) when the QP allows it.
//!
//! ```text
//! rdma_client --ip 10.77.0.1 --fabric eth:48030,48031 -s 10.77.0.2 [-p port]
//! ```

use cm::{AddrInfo, PortSpace};
use cm_examples::{
    COMMON_USAGE, EthNic, getopt, split_common, start_nic, static_or_device, stop_nic,
};
use verbs::{MemoryRegion, SendFlags};

/// The messages, static as in the C program (registered with `map_buf`; the send buffer
/// only when the QP cannot send 16 bytes inline).
static RECV_MSG: verbs::StaticBytes<16> = verbs::StaticBytes::new();
static SEND_MSG: verbs::StaticBytes<16> = verbs::StaticBytes::new();

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run(nic: &EthNic, server: &str, port: &str) -> i32 {
    let cm = &nic.cm;
    let hints = AddrInfo {
        ai_port_space: Some(PortSpace::TCP),
        ..AddrInfo::default()
    };
    let res = match cm.getaddrinfo(Some(server), Some(port), Some(&hints)) {
        Ok(r) => r,
        Err(e) => {
            println!("rdma_getaddrinfo: {e:?}");
            return -1;
        }
    };
    let mut attr = cm::QpInitAttr::default();
    attr.cap.max_send_wr = 1;
    attr.cap.max_recv_wr = 1;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = 16;
    attr.sq_sig_all = true;
    let r = cm.create_ep(&res, None, Some(&mut attr));
    // the caps written back say whether inline sends are possible
    let inline = attr.cap.max_inline_data >= 16;
    if !inline {
        println!("rdma_client: device doesn't support IBV_SEND_INLINE, using sge sends");
    }
    let id = match r {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rdma_create_ep: {e:?}");
            return -1;
        }
    };
    // the program's static receive buffer, as the C program's `static uint8_t recv_msg[16]`,
    // marked so that a byte the peer did not send shows
    let recv_msg = match RECV_MSG
        .take()
        .ok_or(cm::Error::InvalidArgument)
        .and_then(|m| static_or_device(&id, m))
    {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdma_reg_msgs for recv_msg: {e:?}");
            return -1;
        }
    };
    let _ = recv_msg.write(0, &[0xa5; 16]);
    let mr = match id.reg_msgs(recv_msg.clone()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("rdma_reg_msgs for recv_msg: {e:?}");
            id.destroy_ep();
            return -1;
        }
    };
    let send_msg = [0u8; 16];
    let mut send_mr = None;
    let mut ret = 0;
    'out: {
        if !inline {
            let b = SEND_MSG
                .take()
                .ok_or(cm::Error::InvalidArgument)
                .and_then(|m| static_or_device(&id, m));
            match b.and_then(|b| id.reg_msgs(b)) {
                Ok(m) => send_mr = Some(m),
                Err(e) => {
                    eprintln!("rdma_reg_msgs for send_msg: {e:?}");
                    ret = -1;
                    break 'out;
                }
            }
        }
        if let Err(e) = id.post_recv(0, mr.addr(), 16, &mr) {
            eprintln!("rdma_post_recv: {e:?}");
            ret = -1;
            break 'out;
        }
        if let Err(e) = id.connect(None) {
            eprintln!("rdma_connect: {e:?}");
            ret = -1;
            break 'out;
        }
        eprintln!(
            "rdma_client: connected from {} to {}",
            id.src_addr().map_or("?".into(), |a| a.to_string()),
            id.dst_addr().map_or("?".into(), |a| a.to_string())
        );
        'disc: {
            let sent = match &send_mr {
                None => id.post_send_inline(0, &send_msg, SendFlags::empty()),
                Some(m) => id.post_send(0, m.addr(), 16, m, SendFlags::empty()),
            };
            if let Err(e) = sent {
                eprintln!("rdma_post_send: {e:?}");
                ret = -1;
                break 'disc;
            }
            match id.get_send_comp() {
                Ok(wc) if wc.status == verbs::WcStatus::Success => {}
                Ok(wc) => {
                    eprintln!("rdma_get_send_comp: {:?}", wc.status);
                    ret = -1;
                    break 'disc;
                }
                Err(e) => {
                    eprintln!("rdma_get_send_comp: {e:?}");
                    ret = -1;
                    break 'disc;
                }
            }
            match id.get_recv_comp() {
                Ok(wc) if wc.status == verbs::WcStatus::Success && wc.byte_len == 16 => {
                    let mut got = [0u8; 16];
                    let _ = recv_msg.read(0, &mut got);
                    eprintln!("rdma_client: received 16 bytes: {}", hex(&got));
                }
                Ok(wc) => {
                    eprintln!("rdma_get_recv_comp: {:?}, {} bytes", wc.status, wc.byte_len);
                    ret = -1;
                }
                Err(e) => {
                    eprintln!("rdma_get_recv_comp: {e:?}");
                    ret = -1;
                }
            }
        }
        let _ = id.disconnect();
    }
    if let Some(m) = send_mr {
        let _ = id.dereg_mr(m);
    }
    let _ = id.dereg_mr(mr);
    id.destroy_ep();
    ret
}

fn usage() -> std::process::ExitCode {
    println!("usage: rdma_client\n\t[-s server_address]\n\t[-p port_number]\n{COMMON_USAGE}");
    std::process::ExitCode::from(1)
}

fn main() -> std::process::ExitCode {
    let (common, rest) = match split_common(std::env::args().skip(1).collect()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rdma_client: {e}");
            return usage();
        }
    };
    let mut server = "127.0.0.1".to_string();
    let mut port = "7471".to_string();
    match getopt(&rest, "s:p:") {
        Ok(opts) => {
            for (o, v) in opts {
                match o {
                    's' => server = v,
                    _ => port = v,
                }
            }
        }
        Err(e) => {
            eprintln!("rdma_client: {e}");
            return usage();
        }
    }
    let Some(ip) = common.ip else {
        eprintln!("rdma_client: this NIC's address is needed: --ip ADDR");
        return usage();
    };
    let nic = match start_nic(&common, ip) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("rdma_client: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    println!("rdma_client: start");
    let ret = run(&nic, &server, &port);
    println!("rdma_client: end {ret}");
    stop_nic(nic, "rdma_client");
    cm_examples::exit_code(ret)
}
