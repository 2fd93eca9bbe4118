//! `rdma_server`: librdmacm's rdma_server example on the stack. A synchronous passive
//! endpoint on port 7471 (`-p`) of every address; one connection: a 16-byte receive posted
//! before `accept`, then one 16-byte SEND back (inline when the QP allows 16 inline bytes),
//! then disconnect. Prints `rdma_server: start` and `rdma_server: end N` as the original; on
//! stderr, what it received (16 bytes; the original clients send zeros).
//!
//! As in C, the messages live in static memory (`static RECV_MSG: StaticBytes<16>`, made
//! device-reachable with `CmId::map_buf` and registered with `reg_msgs`; device memory where
//! the device's DMA cannot map it), and the SEND is inline (no MR) when the QP allows it.
//!
//! ```text
//! rdma_server --ip 10.77.0.1 --fabric eth:48030,48031 [-p port]
//! ```

use cm::{AddrInfo, PortSpace, RaiFlags};
use cm_examples::{
    COMMON_USAGE, EthNic, getopt, split_common, start_nic, static_or_device, stop_nic,
};
use verbs::{QueuePair, SendFlags};

/// The messages, static as in the C program (registered with `map_buf`; the send buffer
/// only when the QP cannot send 16 bytes inline).
static RECV_MSG: verbs::StaticBytes<16> = verbs::StaticBytes::new();
static SEND_MSG: verbs::StaticBytes<16> = verbs::StaticBytes::new();

/// What the exchange received, for the stderr report.
fn check_recv(buf: &verbs::Buffer, wc: &verbs::WorkCompletion) -> Result<Vec<u8>, String> {
    if wc.status != verbs::WcStatus::Success {
        return Err(format!("receive completed with {:?}", wc.status));
    }
    if wc.byte_len != 16 {
        return Err(format!("received {} bytes, not 16", wc.byte_len));
    }
    let mut got = [0u8; 16];
    buf.read(0, &mut got).map_err(|e| format!("{e:?}"))?;
    Ok(got.to_vec())
}

fn run(nic: &EthNic, port: &str) -> i32 {
    let cm = &nic.cm;
    let hints = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ai_port_space: Some(PortSpace::TCP),
        ..AddrInfo::default()
    };
    let res = match cm.getaddrinfo(None, Some(port), Some(&hints)) {
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
    let listen_id = match cm.create_ep(&res, None, Some(&mut attr)) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rdma_create_ep: {e:?}");
            return -1;
        }
    };
    if let Err(e) = listen_id.listen(0) {
        eprintln!("rdma_listen: {e:?}");
        return -1;
    }
    eprintln!("rdma_server: listening on port {port}");
    let id = match listen_id.get_request() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rdma_get_request: {e:?}");
            return -1;
        }
    };
    // ibv_query_qp(IBV_QP_CAP): inline sends if the QP takes 16 bytes inline
    let inline = match id.with_verbs(|v| v.qp.map(|q| QueuePair::cap(&*q).max_inline_data)) {
        Ok(Some(n)) => n >= 16,
        _ => {
            eprintln!("ibv_query_qp: no QP");
            return -1;
        }
    };
    if !inline {
        println!("rdma_server: device doesn't support IBV_SEND_INLINE, using sge sends");
    }
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
            return -1;
        }
    };
    let send_msg = [0u8; 16];
    let mut send_mr = None;
    let mut ret = 0;
    'out: {
        if !inline {
            let b = match SEND_MSG
                .take()
                .ok_or(cm::Error::InvalidArgument)
                .and_then(|m| static_or_device(&id, m))
            {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("rdma_reg_msgs for send_msg: {e:?}");
                    ret = -1;
                    break 'out;
                }
            };
            match id.reg_msgs(b) {
                Ok(m) => send_mr = Some(m),
                Err(e) => {
                    eprintln!("rdma_reg_msgs for send_msg: {e:?}");
                    ret = -1;
                    break 'out;
                }
            }
        }
        if let Err(e) = id.post_recv(0, verbs::MemoryRegion::addr(&mr), 16, &mr) {
            eprintln!("rdma_post_recv: {e:?}");
            ret = -1;
            break 'out;
        }
        if let Err(e) = id.accept(None) {
            eprintln!("rdma_accept: {e:?}");
            ret = -1;
            break 'out;
        }
        'disc: {
            match id.get_recv_comp() {
                Ok(wc) => match check_recv(&recv_msg, &wc) {
                    Ok(got) => eprintln!("rdma_server: received 16 bytes: {}", hex(&got)),
                    Err(e) => {
                        eprintln!("rdma_get_recv_comp: {e}");
                        ret = -1;
                        break 'disc;
                    }
                },
                Err(e) => {
                    eprintln!("rdma_get_recv_comp: {e:?}");
                    ret = -1;
                    break 'disc;
                }
            }
            let sent = match &send_mr {
                None => id.post_send_inline(0, &send_msg, SendFlags::empty()),
                Some(m) => id.post_send(0, verbs::MemoryRegion::addr(m), 16, m, SendFlags::empty()),
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
                }
                Err(e) => {
                    eprintln!("rdma_get_send_comp: {e:?}");
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
    listen_id.destroy_ep();
    ret
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn usage() -> std::process::ExitCode {
    println!("usage: rdma_server\n\t[-p port_number]\n{COMMON_USAGE}");
    std::process::ExitCode::from(1)
}

fn main() -> std::process::ExitCode {
    let (common, rest) = match split_common(std::env::args().skip(1).collect()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rdma_server: {e}");
            return usage();
        }
    };
    let mut port = "7471".to_string();
    match getopt(&rest, "p:") {
        Ok(opts) => {
            for (_, v) in opts {
                port = v;
            }
        }
        Err(e) => {
            eprintln!("rdma_server: {e}");
            return usage();
        }
    }
    let Some(ip) = common.ip else {
        eprintln!("rdma_server: this NIC's address is needed: --ip ADDR");
        return usage();
    };
    let nic = match start_nic(&common, ip) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("rdma_server: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    println!("rdma_server: start");
    let ret = run(&nic, &port);
    println!("rdma_server: end {ret}");
    stop_nic(nic, "rdma_server");
    cm_examples::exit_code(ret)
}
