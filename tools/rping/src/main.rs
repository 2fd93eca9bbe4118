//! `rping`: librdmacm's `rping` example on the kernel-bypass RDMA stack.
//!
//! Today it runs in EMBEDDED mode only: the server and the client live in this process, each
//! on its own thread and its own emulated ConnectX-class NIC (mlx5 driver), the two NICs joined
//! by the in-process RoCEv2 fabric of one `nic_testbed::World` and connected through the
//! connection manager (`cm`): `getaddrinfo`, `create_ep`, `listen` / `get_request` / `accept`
//! on the server thread, `connect` on the client thread. Both threads block in synchronous CM
//! calls, which drive the one shared progress engine.
//!
//! Each ping follows rping: the client fills its source buffer with rping's pattern
//! (`rdma-ping-N: ` then a rotating run of ASCII letters starting one further each ping, NUL
//! at the end) and SENDs the buffer's address, rkey and length (16 bytes, network byte order);
//! the server RDMA READs it, SENDs "go ahead"; the client SENDs its sink buffer's address,
//! rkey and length; the server RDMA WRITEs its copy there and SENDs "go ahead"; the client
//! compares sink and source.
//!
//! ```text
//! rping                      # 10 pings of 100 bytes
//! rping -C 5 -S 64 -v -V     # print each ping, report validation
//! ```
//!
//! `-s` (server) and `-c -a ADDR` (client) are parsed but refused with exit status 2 until
//! the stack runs on a real network. Exit status: 0 all pings verified, 1 run failure or data
//! mismatch, 2 bad command line or unsupported mode.

use std::process::ExitCode;
use std::sync::Arc;

use cm::{AddrInfo, Cm, CmConfig, CmId, QpInitAttr, RaiFlags, getaddrinfo};
use nic_emulator::Profile;
use nic_hal::{DmaAllocator, DmaBuf};
use nic_testbed::{EmuDevice, World};
use verbs::{Gid, MemRegion, MemoryRegion, QpCap, SendFlags, WcOpcode, WcStatus};

type Id = CmId<EmuDevice>;

const SERVER_IP: &str = "127.0.0.2";
const CLIENT_IP: &str = "127.0.0.1";
/// rping's default port.
const DEFAULT_PORT: u16 = 7174;
/// rping's `RPING_MSG_FMT` prefix.
const MSG_PREFIX: &str = "rdma-ping-";
/// rping's `RPING_MIN_BUFSIZE`: `sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`, the
/// macro expanded first (`"2147483647"` or `"0x7fffffff"`: 11 bytes) = 11 + 15 = 26.
const MIN_SIZE: usize = "2147483647".len() + 1 + "rdma-ping-%d: ".len() + 1;
/// rping's `RPING_BUFSIZE - 1`.
const MAX_SIZE: usize = 64 * 1024 - 1;
/// The advertisement: `struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }`.
const INFO_LEN: usize = 16;

const USAGE: &str = "usage: rping [-v] [-V] [-d] [-C count] [-S size] [-p port]
       rping -s [-a addr] ...  | rping -c -a addr ...   (not yet supported)
  -v          print each ping's data
  -V          validate each ping's data (always checked; reported with -V)
  -d          debug output (the message exchange)
  -C count    number of pings (default 10)
  -S size     ping data size (default 100, range 26..65535)
  -p port     port (default 7174)";

/// The command line.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    count: u32,
    size: usize,
    port: u16,
    verbose: bool,
    validate: bool,
    debug: bool,
    server: bool,
    client: bool,
    addr: Option<String>,
}

/// Why the command line was refused (exit status 2).
#[derive(Debug)]
enum CliError {
    Help,
    Bad(String),
}

fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut o = Options {
        count: 10,
        size: 100,
        port: DEFAULT_PORT,
        verbose: false,
        validate: false,
        debug: false,
        server: false,
        client: false,
        addr: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| CliError::Bad(format!("option {name} needs a value")))
        };
        match a.as_str() {
            "-v" => o.verbose = true,
            "-V" => o.validate = true,
            "-d" => o.debug = true,
            "-s" => o.server = true,
            "-c" => o.client = true,
            "-h" | "--help" => return Err(CliError::Help),
            "-a" => o.addr = Some(value("-a")?),
            "-C" => {
                let v = value("-C")?;
                o.count = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid count {v:?}")))?;
            }
            "-S" => {
                let v = value("-S")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid size {v:?}")))?;
                if !(MIN_SIZE..=MAX_SIZE).contains(&n) {
                    return Err(CliError::Bad(format!(
                        "Invalid size {n} (valid range is {MIN_SIZE} to {MAX_SIZE})"
                    )));
                }
                o.size = n;
            }
            "-p" => {
                let v = value("-p")?;
                o.port = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid port {v:?}")))?;
            }
            other => return Err(CliError::Bad(format!("unknown option {other:?}"))),
        }
    }
    Ok(o)
}

/// rping's source pattern for ping `ping` whose letters start at `start` ('A'..='z').
fn pattern(ping: u32, start: u8, size: usize) -> Vec<u8> {
    let mut buf = format!("{MSG_PREFIX}{ping}: ").into_bytes();
    buf.truncate(size);
    let mut c = start;
    while buf.len() < size {
        buf.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    buf[size - 1] = 0;
    buf
}

/// The bytes up to the first NUL, as text (what rping's `printf("%s")` shows).
fn as_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn encode_info(addr: u64, rkey: u32, len: u32) -> [u8; INFO_LEN] {
    let mut m = [0u8; INFO_LEN];
    m[..8].copy_from_slice(&addr.to_be_bytes());
    m[8..12].copy_from_slice(&rkey.to_be_bytes());
    m[12..].copy_from_slice(&len.to_be_bytes());
    m
}

fn decode_info(m: &[u8; INFO_LEN]) -> (u64, u32, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&m[..8]);
    let mut k = [0u8; 4];
    k.copy_from_slice(&m[8..12]);
    let mut l = [0u8; 4];
    l.copy_from_slice(&m[12..]);
    (
        u64::from_be_bytes(a),
        u32::from_be_bytes(k),
        u32::from_be_bytes(l),
    )
}

/// Memory on one NIC plus its registration.
struct Buf {
    mem: DmaBuf,
    mr: mlx5::Mr,
}

impl Buf {
    fn new(
        dma: &Arc<dyn DmaAllocator>,
        len: usize,
        reg: impl FnOnce(&MemRegion<'_>) -> Result<mlx5::Mr, cm::Error>,
    ) -> Result<Buf, String> {
        let mem = DmaBuf::new(dma, len, 4096).map_err(|e| format!("dma alloc: {e:?}"))?;
        let mr = reg(&MemRegion {
            addr: mem.iova(),
            length: len as u64,
            pages: &[],
        })
        .map_err(|e| format!("reg_mr: {e:?}"))?;
        Ok(Buf { mem, mr })
    }

    fn addr(&self) -> u64 {
        self.mr.addr()
    }

    fn read(&self, len: usize) -> Result<Vec<u8>, String> {
        let mut v = vec![0u8; len];
        self.mem
            .read(0, &mut v)
            .map_err(|e| format!("dma read: {e:?}"))?;
        Ok(v)
    }

    fn write(&self, data: &[u8]) -> Result<(), String> {
        self.mem
            .write(0, data)
            .map_err(|e| format!("dma write: {e:?}"))
    }

    fn free(self, id: &Id) {
        let _ = id.dereg_mr(self.mr);
    }
}

fn qp_attr() -> QpInitAttr<mlx5::Cq, mlx5::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

fn check(
    side: &str,
    what: &str,
    wc: Result<verbs::WorkCompletion, cm::Error>,
) -> Result<verbs::WorkCompletion, String> {
    let wc = wc.map_err(|e| format!("{side}: {what}: {e:?}"))?;
    if wc.status != WcStatus::Success {
        return Err(format!("{side}: {what} completion error {:?}", wc.status));
    }
    Ok(wc)
}

/// Writes `info` into `send`, SENDs it and waits for the send completion.
fn send_info(id: &Id, side: &str, send: &Buf, info: [u8; INFO_LEN]) -> Result<(), String> {
    send.write(&info)?;
    id.post_send(
        2,
        send.addr(),
        INFO_LEN as u32,
        &send.mr,
        SendFlags::SIGNALED,
    )
    .map_err(|e| format!("{side}: post_send: {e:?}"))?;
    check(side, "send", id.get_send_comp())?;
    Ok(())
}

/// Waits for the receive posted in `recv`, reads it and posts the next one.
fn recv_info(id: &Id, side: &str, recv: &Buf) -> Result<[u8; INFO_LEN], String> {
    let wc = check(side, "recv", id.get_recv_comp())?;
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
        return Err(format!(
            "{side}: unexpected receive {:?} of {} bytes",
            wc.opcode, wc.byte_len
        ));
    }
    let mut m = [0u8; INFO_LEN];
    m.copy_from_slice(&recv.read(INFO_LEN)?);
    id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
        .map_err(|e| format!("{side}: post_recv: {e:?}"))?;
    Ok(m)
}

/// The server side on a connected id: `count` pings (rping's `rping_test_server`).
fn server_pings(conn: &Id, o: &Options, recv: &Buf, send: &Buf, rdma: &Buf) -> Result<(), String> {
    for _ in 0..o.count {
        let (addr, rkey, len) = decode_info(&recv_info(conn, "server", recv)?);
        if o.debug {
            println!("server: received source adv: rkey {rkey:#x} addr {addr:#x} len {len}");
        }
        if len as usize > o.size {
            return Err(format!("server: advertised length {len} > {}", o.size));
        }
        conn.post_read(
            3,
            rdma.addr(),
            len,
            &rdma.mr,
            SendFlags::SIGNALED,
            addr,
            rkey,
        )
        .map_err(|e| format!("server: post_read: {e:?}"))?;
        check("server", "rdma read", conn.get_send_comp())?;
        if o.debug {
            println!("server ping data: {}", as_text(&rdma.read(len as usize)?));
        }
        // "go ahead": the client may advertise its sink
        send_info(
            conn,
            "server",
            send,
            encode_info(rdma.addr(), rdma.mr.rkey(), len),
        )?;

        let (addr, rkey, wlen) = decode_info(&recv_info(conn, "server", recv)?);
        if o.debug {
            println!("server: received sink adv: rkey {rkey:#x} addr {addr:#x} len {wlen}");
        }
        let wlen = wlen.min(len);
        conn.post_write(
            4,
            rdma.addr(),
            wlen,
            &rdma.mr,
            SendFlags::SIGNALED,
            addr,
            rkey,
        )
        .map_err(|e| format!("server: post_write: {e:?}"))?;
        check("server", "rdma write", conn.get_send_comp())?;
        // "go ahead": the data is in the client's sink
        send_info(
            conn,
            "server",
            send,
            encode_info(rdma.addr(), rdma.mr.rkey(), wlen),
        )?;
    }
    Ok(())
}

/// The server thread: get_request, buffers, accept, pings, disconnect.
fn server(listen: &Id, dma: &Arc<dyn DmaAllocator>, o: &Options) -> Result<(), String> {
    let conn = listen
        .get_request()
        .map_err(|e| format!("server: get_request: {e:?}"))?;
    let r = (|| {
        let recv = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
        let send = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
        let rdma = Buf::new(dma, o.size, |m| conn.reg_msgs(m))?;
        let r = (|| {
            conn.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
                .map_err(|e| format!("server: post_recv: {e:?}"))?;
            conn.accept(None)
                .map_err(|e| format!("server: accept: {e:?}"))?;
            server_pings(&conn, o, &recv, &send, &rdma)
        })();
        conn.disconnect().ok();
        for b in [recv, send, rdma] {
            b.free(&conn);
        }
        r
    })();
    conn.destroy_ep();
    r
}

/// The client side on a connected id: `count` pings (rping's `rping_test_client`); returns
/// how many pings matched.
fn client_pings(
    id: &Id,
    o: &Options,
    recv: &Buf,
    send: &Buf,
    start: &Buf,
    sink: &Buf,
) -> Result<u32, String> {
    let mut letter = 65u8;
    let mut good = 0;
    for ping in 0..o.count {
        let src = pattern(ping, letter, o.size);
        letter = if letter >= 122 { 65 } else { letter + 1 };
        start.write(&src)?;
        sink.write(&vec![0u8; o.size])?;
        send_info(
            id,
            "client",
            send,
            encode_info(start.addr(), start.mr.rkey(), o.size as u32),
        )?;
        recv_info(id, "client", recv)?; // go ahead
        send_info(
            id,
            "client",
            send,
            encode_info(sink.addr(), sink.mr.rkey(), o.size as u32),
        )?;
        recv_info(id, "client", recv)?; // write complete
        let got = sink.read(o.size)?;
        if got != src {
            eprintln!(
                "rping: data mismatch in ping {ping}: sent {:?} got {:?}",
                as_text(&src),
                as_text(&got)
            );
            continue;
        }
        good += 1;
        if o.verbose {
            println!("ping data: {}", as_text(&got));
        }
    }
    Ok(good)
}

/// The client thread: buffers, connect, pings, disconnect.
fn client(id: &Id, dma: &Arc<dyn DmaAllocator>, o: &Options) -> Result<u32, String> {
    let recv = Buf::new(dma, INFO_LEN, |m| id.reg_msgs(m))?;
    let send = Buf::new(dma, INFO_LEN, |m| id.reg_msgs(m))?;
    let start = Buf::new(dma, o.size, |m| id.reg_read(m))?;
    let sink = Buf::new(dma, o.size, |m| id.reg_write(m))?;
    let r = (|| {
        id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
            .map_err(|e| format!("client: post_recv: {e:?}"))?;
        id.connect(Some(&cm::ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..cm::ConnParam::default()
        }))
        .map_err(|e| format!("client: connect: {e:?}"))?;
        let r = client_pings(id, o, &recv, &send, &start, &sink);
        id.disconnect().ok();
        r
    })();
    for b in [recv, send, start, sink] {
        b.free(id);
    }
    r
}

/// One emulated NIC probed, given its RoCE GID and added to the connection manager.
fn add_nic(cm: &Cm<EmuDevice>, tb: &nic_testbed::Testbed) -> Result<Arc<dyn DmaAllocator>, String> {
    let dev = tb
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    let mac = dev.mac().map_err(|e| format!("mac: {e:?}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(tb.ip().octets()).0, mac)
        .map_err(|e| format!("set gid: {e:?}"))?;
    let dma = dev.dma().clone();
    cm.add_device(dev, dma.clone(), mac)
        .map_err(|(e, _)| format!("add_device: {e:?}"))?;
    Ok(dma)
}

/// Embedded mode: both ends in this process. Returns the number of verified pings.
fn embedded(o: &Options) -> Result<u32, String> {
    let world = World::new(0x0072_7069_6e67);
    let ctb = world.nic(CLIENT_IP.parse().expect("ip"), Profile::default());
    let stb = world.nic(SERVER_IP.parse().expect("ip"), Profile::default());
    let cm = Cm::new(
        ctb.platform(),
        CmConfig {
            // a lost peer is an error, not a hang (virtual time)
            wait_limit_ns: Some(60_000_000_000),
            ..CmConfig::default()
        },
    );
    let cdma = add_nic(&cm, &ctb)?;
    let sdma = add_nic(&cm, &stb)?;
    let port = o.port.to_string();

    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(SERVER_IP), Some(&port), Some(&passive))
        .map_err(|e| format!("server: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr();
    let listen = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("server: create_ep: {e:?}"))?;
    let r = (|| {
        listen
            .listen(0)
            .map_err(|e| format!("server: listen: {e:?}"))?;
        let hints = AddrInfo {
            ai_src_addr: Some(
                format!("{CLIENT_IP}:0")
                    .parse()
                    .map_err(|e| format!("{e:?}"))?,
            ),
            ..AddrInfo::default()
        };
        let res = getaddrinfo(Some(SERVER_IP), Some(&port), Some(&hints))
            .map_err(|e| format!("client: getaddrinfo: {e:?}"))?;
        let mut a = qp_attr();
        let id = cm
            .create_ep(&res, None, Some(&mut a))
            .map_err(|e| format!("client: create_ep: {e:?}"))?;
        let r = std::thread::scope(|sc| {
            let srv = sc.spawn(|| server(&listen, &sdma, o));
            let c = client(&id, &cdma, o);
            let s = srv
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            match (c, s) {
                (Ok(n), Ok(())) => Ok(n),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            }
        });
        id.destroy_ep();
        r
    })();
    listen.destroy_ep();
    r
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(CliError::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(CliError::Bad(m)) => {
            eprintln!("rping: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if o.server || o.client || o.addr.is_some() {
        eprintln!("rping: -s / -c / -a: not yet supported outside embedded mode");
        return ExitCode::from(2);
    }
    match embedded(&o) {
        Ok(n) if n == o.count => {
            let v = if o.validate { ", validated" } else { "" };
            println!("rping: embedded: {n} pings of {} bytes{v}", o.size);
            ExitCode::SUCCESS
        }
        Ok(n) => {
            eprintln!(
                "rping: embedded: {} of {} pings failed validation",
                o.count - n,
                o.count
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_rping() {
        let p = pattern(0, b'A', 26);
        assert_eq!(&p, b"rdma-ping-0: ABCDEFGHIJKL\0");
        let p = pattern(3, b'z', 17);
        assert_eq!(&p, b"rdma-ping-3: zAB\0");
    }

    #[test]
    fn info_round_trip() {
        let m = encode_info(0x1122_3344_5566_7788, 0xaabb_ccdd, 100);
        assert_eq!(&m[..4], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(decode_info(&m), (0x1122_3344_5566_7788, 0xaabb_ccdd, 100));
    }

    #[test]
    fn sizes() {
        let a = |v: &[&str]| parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(MIN_SIZE, 26);
        assert!(a(&["-S", "25"]).is_err());
        assert_eq!(a(&["-S", "26"]).unwrap().size, 26);
        assert_eq!(a(&[]).unwrap().count, 10);
    }
}
