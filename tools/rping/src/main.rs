//! `rping`: librdmacm's `rping` example on the kernel-bypass RDMA stack.
//!
//! Three modes, all through the connection manager (`cm`): `getaddrinfo`, `create_ep`,
//! `listen` / `get_request` / `accept` on the server, `connect` on the client.
//! - EMBEDDED (neither `-s` nor `-c`): the server and the client live in this process, each on
//!   its own thread and its own emulated ConnectX-class NIC (mlx5 driver), the two NICs joined
//!   by the in-process RoCEv2 fabric of one `nic_testbed::World`. Both threads block in
//!   synchronous CM calls, which drive the one shared progress engine.
//! - SERVER (`-s [-a ADDR]`) and CLIENT (`-c -a ADDR [-I SRC]`): one end per process, each on
//!   its own emulated NIC on the UDP fabric (`nic_testbed::UdpNic`: a UDP socket on
//!   `ADDR:FABRIC_PORT` in 127.0.0.0/8 as its port, the device on a poller thread, real time).
//!   There is no ARP on that fabric: an emulated NIC's MAC is derived from its address, and
//!   each end enters the MACs of its own /24 in the CM's neighbour table.
//!
//! Each ping follows rping: the client fills its source buffer with rping's pattern
//! (`rdma-ping-N: ` then a rotating run of ASCII letters starting one further each ping, NUL
//! at the end) and SENDs the buffer's address, rkey and length (16 bytes, network byte order);
//! the server RDMA READs it, SENDs "go ahead"; the client SENDs its sink buffer's address,
//! rkey and length; the server RDMA WRITEs its copy there and SENDs "go ahead"; the client
//! compares sink and source.
//!
//! ```text
//! rping                      # 10 pings of 100 bytes, embedded
//! rping -C 5 -S 64 -v -V     # print each ping, report validation
//! rping -s -a 127.0.0.2 -C 5            # server (one connection)
//! rping -c -a 127.0.0.2 -C 5 -v -V      # client, from 127.0.0.1
//! ```
//!
//! Exit status: 0 all pings verified (server: all pings served), 1 run failure or data
//! mismatch, 2 bad command line.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;

use cm::{AddrInfo, Cm, CmConfig, CmId, Neighbor, QpInitAttr, RaiFlags, getaddrinfo};
use nic_emulator::Profile;
use nic_hal::{DmaAllocator, DmaBuf, Platform, RegisterIo};
use nic_testbed::{EmuDevice, UdpDevice, UdpNic, World};
use verbs::{Gid, MemRegion, MemoryRegion, Provider, QpCap, SendFlags, WcOpcode, WcStatus};

/// The devices rping runs on: the mlx5 driver over any register backend and platform.
trait Dev: Provider<Mr = mlx5::Mr, Cq = mlx5::Cq> {}
impl<P: Provider<Mr = mlx5::Mr, Cq = mlx5::Cq>> Dev for P {}

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

/// The RoCEv2 UDP port: the emulated fabric's default.
const DEFAULT_FABRIC_PORT: u16 = 4791;
/// How long a blocking CM call waits for the peer by default, in seconds.
const DEFAULT_TIMEOUT_S: u64 = 60;

const USAGE: &str = "usage: rping [-v] [-V] [-d] [-C count] [-S size] [-p port]   (embedded)
       rping -s [-a addr] [options]              (server)
       rping -c -a addr [-I src] [options]       (client)
  -s          server: one emulated NIC at addr (default 127.0.0.2), one connection
  -c          client: one emulated NIC at src (default 127.0.0.1), connects to addr
  -a addr     server: address to bind; client: the server's address (127.0.0.0/8)
  -I src      client: source address (its NIC's address; in the server's /24)
  -v          print each ping's data
  -V          validate each ping's data (always checked; reported with -V)
  -d          debug output (the message exchange)
  -C count    number of pings (default 10)
  -S size     ping data size (default 100, range 26..65535)
  -p port     port (default 7174)
  --fabric-port N  UDP port of the emulated fabric, the same on both ends (default 4791)
  --timeout SECS   give up when the peer does not answer for SECS (default 60)";

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
    src: Option<String>,
    fabric_port: u16,
    timeout_s: u64,
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
        src: None,
        fabric_port: DEFAULT_FABRIC_PORT,
        timeout_s: DEFAULT_TIMEOUT_S,
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
            "-I" => o.src = Some(value("-I")?),
            "--fabric-port" => {
                let v = value("--fabric-port")?;
                o.fabric_port = v
                    .parse()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| CliError::Bad(format!("invalid fabric port {v:?}")))?;
            }
            "--timeout" => {
                let v = value("--timeout")?;
                o.timeout_s = v
                    .parse()
                    .ok()
                    .filter(|&t| (1..=86_400).contains(&t))
                    .ok_or_else(|| CliError::Bad(format!("invalid timeout {v:?} (1..86400 s)")))?;
            }
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
    if o.server && o.client {
        return Err(CliError::Bad("-s and -c are exclusive".into()));
    }
    if o.client && o.addr.is_none() {
        return Err(CliError::Bad(
            "-c needs the server's address (-a addr)".into(),
        ));
    }
    if !o.server && !o.client && (o.addr.is_some() || o.src.is_some()) {
        return Err(CliError::Bad(
            "-a and -I need -s or -c (with neither, both ends run in this process)".into(),
        ));
    }
    if o.src.is_some() && !o.client {
        return Err(CliError::Bad("-I applies to the client (-c)".into()));
    }
    for a in [&o.addr, &o.src].into_iter().flatten() {
        match a.parse::<Ipv4Addr>() {
            Ok(ip) if ip.is_loopback() => {}
            Ok(_) => {
                return Err(CliError::Bad(format!(
                    "{a}: not in 127.0.0.0/8 (the emulated fabric never leaves the machine)"
                )));
            }
            Err(_) => return Err(CliError::Bad(format!("{a}: not an IPv4 address"))),
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

    fn free<P: Dev>(self, id: &CmId<P>) {
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
fn send_info<P: Dev>(
    id: &CmId<P>,
    side: &str,
    send: &Buf,
    info: [u8; INFO_LEN],
) -> Result<(), String> {
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
fn recv_info<P: Dev>(id: &CmId<P>, side: &str, recv: &Buf) -> Result<[u8; INFO_LEN], String> {
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
fn server_pings<P: Dev>(
    conn: &CmId<P>,
    o: &Options,
    recv: &Buf,
    send: &Buf,
    rdma: &Buf,
) -> Result<(), String> {
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
        if o.debug || (o.verbose && o.server) {
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
fn server<P: Dev>(
    listen: &CmId<P>,
    dma: &Arc<dyn DmaAllocator>,
    o: &Options,
) -> Result<(), String> {
    let conn = listen
        .get_request()
        .map_err(|e| format!("server: get_request: {e:?}"))?;
    let r = (|| {
        let recv = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
        let send = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
        let rdma = Buf::new(dma, o.size, |m| conn.reg_msgs(m))?;
        let mut accepted = false;
        let r = (|| {
            conn.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
                .map_err(|e| format!("server: post_recv: {e:?}"))?;
            conn.accept(None)
                .map_err(|e| format!("server: accept: {e:?}"))?;
            accepted = true;
            server_pings(&conn, o, &recv, &send, &rdma)
        })();
        if accepted {
            // (an id that never connected has nothing to disconnect: the call would wait)
            conn.disconnect().ok();
        }
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
fn client_pings<P: Dev>(
    id: &CmId<P>,
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
fn client<P: Dev>(id: &CmId<P>, dma: &Arc<dyn DmaAllocator>, o: &Options) -> Result<u32, String> {
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
    add_device(cm, dev, tb.ip())
}

/// A probed device given its RoCE GID (`ip`) and added to the connection manager.
fn add_device<R: RegisterIo, Pl: Platform>(
    cm: &Cm<mlx5::Device<R, Pl>>,
    dev: mlx5::Device<R, Pl>,
    ip: Ipv4Addr,
) -> Result<Arc<dyn DmaAllocator>, String> {
    let mac = dev.mac().map_err(|e| format!("mac: {e:?}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
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

/// The MAC of the emulated NIC at `ip` (the UDP fabric has no ARP: both ends derive it).
fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// One end of a two-process run: an emulated NIC at `ip` on the UDP fabric, its device in a
/// connection manager whose neighbour table knows the NICs of `ip`'s /24.
struct UdpEnd {
    cm: Cm<UdpDevice>,
    dma: Arc<dyn DmaAllocator>,
    // Last: the poller stops after the manager's objects are gone.
    _nic: UdpNic,
}

fn udp_end(ip: Ipv4Addr, o: &Options) -> Result<UdpEnd, String> {
    let nic = UdpNic::new(
        ip,
        o.fabric_port,
        Profile {
            mac: mac_for(ip),
            ..Profile::default()
        },
    )
    .map_err(|e| {
        format!(
            "emulated NIC at {ip} (fabric UDP port {}): {e}",
            o.fabric_port
        )
    })?;
    let cm = Cm::new(
        nic.platform(),
        CmConfig {
            wait_limit_ns: Some(o.timeout_s * 1_000_000_000),
            ..CmConfig::default()
        },
    );
    let dev = nic
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    let dma = add_device(&cm, dev, ip)?;
    let [a, b, c, _] = ip.octets();
    for h in 1..=254 {
        let n = Ipv4Addr::new(a, b, c, h);
        if n != ip {
            cm.add_neighbor(n, Neighbor { mac: mac_for(n) });
        }
    }
    Ok(UdpEnd { cm, dma, _nic: nic })
}

fn ip_of(a: &Option<String>, default: &str) -> Ipv4Addr {
    // parse() checked the options already
    a.as_deref()
        .unwrap_or(default)
        .parse()
        .unwrap_or(Ipv4Addr::LOCALHOST)
}

/// Server mode: listen on this process's NIC, serve one connection.
fn serve(o: &Options) -> Result<(), String> {
    let ip = ip_of(&o.addr, SERVER_IP);
    let end = udp_end(ip, o)?;
    let port = o.port.to_string();
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(&ip.to_string()), Some(&port), Some(&passive))
        .map_err(|e| format!("server: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr();
    let listen = end
        .cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("server: create_ep: {e:?}"))?;
    listen
        .listen(0)
        .map_err(|e| format!("server: listen: {e:?}"))?;
    eprintln!(
        "rping: server: listening on {ip}:{} (fabric UDP port {})",
        o.port, o.fabric_port
    );
    let r = server(&listen, &end.dma, o);
    listen.destroy_ep();
    r
}

/// Client mode: connect from this process's NIC to the server at `-a`; the verified pings.
fn connect(o: &Options) -> Result<u32, String> {
    let src = ip_of(&o.src, CLIENT_IP);
    let dst = ip_of(&o.addr, SERVER_IP);
    let end = udp_end(src, o)?;
    let hints = AddrInfo {
        ai_src_addr: Some(std::net::SocketAddr::from((src, 0))),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&dst.to_string()),
        Some(&o.port.to_string()),
        Some(&hints),
    )
    .map_err(|e| format!("client: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr();
    let id = end
        .cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("client: create_ep: {e:?}"))?;
    let r = client(&id, &end.dma, o);
    id.destroy_ep();
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
    if o.server {
        return match serve(&o) {
            Ok(()) => {
                println!("rping: server: {} pings of {} bytes", o.count, o.size);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rping: {e}");
                ExitCode::from(1)
            }
        };
    }
    let (mode, r) = if o.client {
        ("client", connect(&o))
    } else {
        ("embedded", embedded(&o))
    };
    match r {
        Ok(n) if n == o.count => {
            let v = if o.validate { ", validated" } else { "" };
            println!("rping: {mode}: {n} pings of {} bytes{v}", o.size);
            ExitCode::SUCCESS
        }
        Ok(n) => {
            eprintln!(
                "rping: {mode}: {} of {} pings failed validation",
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
