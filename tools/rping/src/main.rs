//! `rping`: librdmacm's `rping` example on the kernel-bypass RDMA stack, interoperating with
//! rdma-core's own `rping` (librdmacm/examples/rping.c).
//!
//! Three modes, all through the connection manager (`cm`): `getaddrinfo`, `create_ep`,
//! `listen` / `get_request` / `accept` on the server, `connect` on the client.
//! - EMBEDDED (neither `-s` nor `-c`): the server and the client live in this process, each on
//!   its own thread and its own emulated ConnectX-class NIC (mlx5 driver), the two NICs joined
//!   by the in-process RoCEv2 fabric of one `nic_testbed::World`. Both threads block in
//!   synchronous CM calls, which drive the one shared progress engine.
//! - SERVER (`-s -a ADDR`) and CLIENT (`-c -a ADDR [-I SRC]`): one end per process, each on
//!   its own emulated NIC (the device on a poller thread, real time), on one of two fabrics:
//!   * `--fabric udp:PORT` (the default, port 4791): `nic_testbed::UdpNic`, a UDP socket on
//!     `ADDR:PORT` in 127.0.0.0/8 as the NIC's port. There is no ARP on that fabric: an
//!     emulated NIC's MAC is derived from its address, and each end enters the MACs of its
//!     own /24 in the CM's neighbour table.
//!   * `--fabric eth:LOCAL,REMOTE`: `nic_testbed::EthNic`, raw Ethernet frames over UDP in
//!     the format of QEMU's socket netdev (`-netdev socket,udp=127.0.0.1:LOCAL,
//!     localaddr=127.0.0.1:REMOTE` is the other end). The NIC has a MAC and an IPv4 address
//!     on that virtual wire (`-a` for the server, `-I` for the client), answers ARP and
//!     resolves its peers by ARP; on the host only the two 127.0.0.1 sockets are used. This
//!     is how it talks to Linux soft-RoCE (`rdma_rxe`) and rdma-core's `rping` in a guest.
//!
//! Each ping follows rping: the client fills its source buffer with rping's pattern
//! (`rdma-ping-N: ` then a rotating run of ASCII letters starting one further each ping, NUL
//! at the end) and SENDs the buffer's address, rkey and length (`struct rping_rdma_info
//! { __be64 buf; __be32 rkey; __be32 size; }`: 16 bytes, network byte order); the server RDMA
//! READs that many bytes, SENDs "go ahead"; the client SENDs its sink buffer's address, rkey
//! and length; the server RDMA WRITEs `strlen(data) + 1` bytes there and SENDs "go ahead";
//! the client compares sink and source. As rdma-core's, the server serves one connection and
//! loops until the client disconnects (`-C` does not limit it), and its buffer takes any
//! ping size rping allows; the default size is rping's 64 bytes.
//!
//! ```text
//! rping                      # 10 pings of 64 bytes, embedded
//! rping -C 5 -S 4096 -v -V   # print each ping, report validation
//! rping -s -a 127.0.0.2                 # server (one connection)
//! rping -c -a 127.0.0.2 -C 5 -v -V      # client, from 127.0.0.1
//! rping -s -a 10.77.0.1 --fabric eth:48030,48031 -v       # server on an Ethernet link
//! rping -c -a 10.77.0.2 -I 10.77.0.1 --fabric eth:48030,48031 -C 10 -v -V
//! ```
//!
//! Exit status: 0 all pings verified (server: the client disconnected after its pings), 1 run
//! failure or data mismatch, 2 bad command line.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cm::{AddrInfo, Cm, CmConfig, CmId, Neighbor, QpInitAttr, RaiFlags, getaddrinfo};
use nic_emulator::Profile;
use nic_emulator::roce_wire::fabric::{ArpConfig, EthLink};
use nic_hal::{Platform, RegisterIo};
use nic_testbed::{EmuDevice, EthNic, UdpDevice, UdpNic, World};
use verbs::{Buffer, Gid, MemoryRegion, Provider, QpCap, SendFlags, WcOpcode, WcStatus};

/// The devices rping runs on: the mlx5 driver over any register backend and platform.
trait Dev: Provider<Mr = mlx5::Mr, Cq = mlx5::Cq, Srq = mlx5::Srq> {}
impl<P: Provider<Mr = mlx5::Mr, Cq = mlx5::Cq, Srq = mlx5::Srq>> Dev for P {}

const SERVER_IP: &str = "127.0.0.2";
const CLIENT_IP: &str = "127.0.0.1";
/// rping's default port.
const DEFAULT_PORT: u16 = 7174;
/// rping's default ping size (`cb->size = 64`).
const DEFAULT_SIZE: usize = 64;
/// rping's `RPING_MSG_FMT` prefix.
const MSG_PREFIX: &str = "rdma-ping-";
/// rping's `RPING_MIN_BUFSIZE`: `sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`, the
/// macro expanded first (`"2147483647"` or `"0x7fffffff"`: 11 bytes) = 11 + 15 = 26.
const MIN_SIZE: usize = "2147483647".len() + 1 + "rdma-ping-%d: ".len() + 1;
/// rping's `RPING_BUFSIZE`: the server's buffer, which holds any ping.
const RPING_BUFSIZE: usize = 64 * 1024;
/// rping's largest ping (`RPING_BUFSIZE - 1`).
const MAX_SIZE: usize = RPING_BUFSIZE - 1;
/// The advertisement: `struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }`.
const INFO_LEN: usize = 16;
/// rping's `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;

/// The RoCEv2 UDP port: the emulated fabric's default.
const DEFAULT_FABRIC_PORT: u16 = 4791;
/// How long a blocking CM call waits for the peer by default, in seconds.
const DEFAULT_TIMEOUT_S: u64 = 60;
/// Delay before our ARP replies on the Ethernet fabric: Linux's rdma_cm can miss a reply
/// that comes back before its resolve request is queued, and then waits 2 s.
const ARP_REPLY_DELAY: Duration = Duration::from_millis(20);

const USAGE: &str = "usage: rping [-v] [-V] [-d] [-C count] [-S size] [-p port]        (embedded)
       rping -s -a addr [options] [fabric]                       (server)
       rping -c -a addr [-I src] [options] [fabric]              (client)
  -s          server: one emulated NIC at addr; serves one connection until the client
              disconnects (-C does not limit it; any ping size up to 65535 is taken)
  -c          client: one emulated NIC at src, connects to the server at addr
  -a addr     server: this NIC's address (udp fabric: default 127.0.0.2);
              client: the server's address
  -I src      client: this NIC's address (udp fabric: default 127.0.0.1, in addr's /24)
  -v          print each ping's data (client \"ping data: ...\", server \"server ping data: ...\")
  -V          validate: the client compares sink and source (always; reported with -V),
              the server checks each READ against rping's pattern
  -d          debug output (the message exchange)
  -C count    number of pings (default 10; 0: until interrupted)
  -S size     ping data size (default 64, range 26..65535)
  -p port     port (default 7174)
  --timeout SECS   give up when the peer does not answer for SECS (default 60; the
                   server also waits this long for a connection)
fabric (server and client):
  --fabric udp:PORT        the UDP fabric on 127.0.0.0/8, PORT the same on both ends
                           (default udp:4791; --fabric-port PORT is the same)
  --fabric eth:LOCAL,REMOTE  an Ethernet link in QEMU's socket netdev format: frames from
                           127.0.0.1:LOCAL to 127.0.0.1:REMOTE (QEMU: -netdev socket,
                           udp=127.0.0.1:LOCAL,localaddr=127.0.0.1:REMOTE); addr and src are
                           addresses on that virtual wire, peers are resolved by ARP
  --mac MAC                eth: this NIC's MAC (default 02:00 then the address's 4 bytes)";

/// Where a server or client NIC lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fabric {
    /// The UDP fabric on 127.0.0.0/8: every NIC's socket on this port.
    Udp(u16),
    /// An Ethernet link: our socket on 127.0.0.1:`local`, the far end's on `remote`.
    Eth { local: u16, remote: u16 },
}

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
    addr: Option<Ipv4Addr>,
    src: Option<Ipv4Addr>,
    fabric: Fabric,
    mac: Option<[u8; 6]>,
    timeout_s: u64,
}

/// Why the command line was refused (exit status 2).
#[derive(Debug)]
enum CliError {
    Help,
    Bad(String),
}

fn bad<T>(m: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Bad(m.into()))
}

fn parse_port(v: &str, what: &str) -> Result<u16, CliError> {
    match v.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => bad(format!("invalid {what} {v:?}")),
    }
}

fn parse_fabric(v: &str) -> Result<Fabric, CliError> {
    if let Some(p) = v.strip_prefix("udp:") {
        return Ok(Fabric::Udp(parse_port(p, "fabric port")?));
    }
    if let Some(rest) = v.strip_prefix("eth:") {
        let Some((l, r)) = rest.split_once(',') else {
            return bad(format!(
                "invalid fabric {v:?}: eth:LOCAL,REMOTE (two UDP ports)"
            ));
        };
        let (local, remote) = (parse_port(l, "UDP port")?, parse_port(r, "UDP port")?);
        if local == remote {
            return bad(format!(
                "invalid fabric {v:?}: LOCAL and REMOTE must differ"
            ));
        }
        return Ok(Fabric::Eth { local, remote });
    }
    bad(format!(
        "invalid fabric {v:?} (udp:PORT or eth:LOCAL,REMOTE)"
    ))
}

fn parse_mac(v: &str) -> Result<[u8; 6], CliError> {
    let parts: Vec<&str> = v.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return bad(format!("invalid MAC {v:?} (xx:xx:xx:xx:xx:xx)"));
    }
    for (b, p) in m.iter_mut().zip(&parts) {
        *b = match (p.len(), u8::from_str_radix(p, 16)) {
            (1 | 2, Ok(x)) => x,
            _ => return bad(format!("invalid MAC {v:?} (xx:xx:xx:xx:xx:xx)")),
        };
    }
    if m[0] & 1 != 0 || m == [0; 6] {
        return bad(format!("invalid MAC {v:?}: multicast or zero"));
    }
    Ok(m)
}

fn parse_ip(v: &str) -> Result<Ipv4Addr, CliError> {
    v.parse()
        .or_else(|_| bad(format!("{v}: not an IPv4 address")))
}

fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut o = Options {
        count: 10,
        size: DEFAULT_SIZE,
        port: DEFAULT_PORT,
        verbose: false,
        validate: false,
        debug: false,
        server: false,
        client: false,
        addr: None,
        src: None,
        fabric: Fabric::Udp(DEFAULT_FABRIC_PORT),
        mac: None,
        timeout_s: DEFAULT_TIMEOUT_S,
    };
    let mut fabric_set = false;
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
            "-a" => o.addr = Some(parse_ip(&value("-a")?)?),
            "-I" => o.src = Some(parse_ip(&value("-I")?)?),
            "--fabric" | "--fabric-port" => {
                let v = value(a)?;
                let f = if a == "--fabric" {
                    parse_fabric(&v)?
                } else {
                    Fabric::Udp(parse_port(&v, "fabric port")?)
                };
                if fabric_set && f != o.fabric {
                    return bad("--fabric / --fabric-port given twice");
                }
                fabric_set = true;
                o.fabric = f;
            }
            "--mac" => o.mac = Some(parse_mac(&value("--mac")?)?),
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
                    return bad(format!(
                        "Invalid size {n} (valid range is {MIN_SIZE} to {MAX_SIZE})"
                    ));
                }
                o.size = n;
            }
            "-p" => {
                let v = value("-p")?;
                o.port = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid port {v:?}")))?;
            }
            other => return bad(format!("unknown option {other:?}")),
        }
    }
    check(&o, fabric_set)?;
    Ok(o)
}

/// The rules between options.
fn check(o: &Options, fabric_set: bool) -> Result<(), CliError> {
    if o.server && o.client {
        return bad("-s and -c are exclusive");
    }
    if o.client && o.addr.is_none() {
        return bad("-c needs the server's address (-a addr)");
    }
    if !o.server && !o.client {
        if o.addr.is_some() || o.src.is_some() {
            return bad("-a and -I need -s or -c (with neither, both ends run in this process)");
        }
        if fabric_set || o.mac.is_some() {
            return bad("--fabric and --mac need -s or -c (embedded mode has its own fabric)");
        }
    }
    if o.src.is_some() && !o.client {
        return bad("-I applies to the client (-c)");
    }
    let addrs = [o.addr, o.src].into_iter().flatten();
    match o.fabric {
        Fabric::Udp(_) => {
            if o.mac.is_some() {
                return bad("--mac applies to the Ethernet fabric (--fabric eth:LOCAL,REMOTE)");
            }
            for ip in addrs {
                if !ip.is_loopback() {
                    return bad(format!(
                        "{ip}: not in 127.0.0.0/8 (the UDP fabric never leaves the machine; \
                         --fabric eth:LOCAL,REMOTE takes addresses on a virtual wire)"
                    ));
                }
            }
        }
        Fabric::Eth { .. } => {
            if o.server && o.addr.is_none() {
                return bad(
                    "-s on the Ethernet fabric needs this NIC's address on the wire (-a addr)",
                );
            }
            if o.client && o.src.is_none() {
                return bad(
                    "-c on the Ethernet fabric needs this NIC's address on the wire (-I src)",
                );
            }
            for ip in addrs {
                if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast()
                {
                    return bad(format!(
                        "{ip}: not a unicast address for the virtual wire (the link itself \
                         uses 127.0.0.1)"
                    ));
                }
            }
            if o.client && o.addr == o.src {
                return bad("-a and -I are the same address");
            }
        }
    }
    Ok(())
}

/// rping's source pattern for ping `ping`: its letters start at 'A' + `ping` mod 58
/// ('A'..='z').
fn pattern(ping: u32, size: usize) -> Vec<u8> {
    let mut buf = format!("{MSG_PREFIX}{ping}: ").into_bytes();
    buf.truncate(size);
    let mut c = b'A' + (ping % 58) as u8;
    while buf.len() < size {
        buf.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
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
    (
        u64::from_be_bytes(a),
        u32::from_be_bytes([m[8], m[9], m[10], m[11]]),
        u32::from_be_bytes([m[12], m[13], m[14], m[15]]),
    )
}

/// Memory on one NIC plus its registration.
struct Buf {
    mem: Buffer,
    mr: mlx5::Mr,
}

impl Buf {
    fn new<P: Dev>(
        id: &CmId<P>,
        len: usize,
        reg: impl FnOnce(Buffer) -> Result<mlx5::Mr, cm::Error>,
    ) -> Result<Buf, String> {
        let mem = id.alloc_buf(len).map_err(|e| format!("dma alloc: {e:?}"))?;
        let mr = reg(mem.clone()).map_err(|e| format!("reg_mr: {e:?}"))?;
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
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

/// rping's connection parameters (both sides).
fn conn_param<'a>() -> cm::ConnParam<'a> {
    cm::ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..cm::ConnParam::default()
    }
}

fn check_wc(
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
    check_wc(side, "send", id.get_send_comp())?;
    Ok(())
}

/// Waits for the receive posted in `recv`, reads it and posts the next one. `Ok(None)`: the
/// receive was flushed, the peer disconnected.
fn recv_info<P: Dev>(
    id: &CmId<P>,
    side: &str,
    recv: &Buf,
) -> Result<Option<[u8; INFO_LEN]>, String> {
    let wc = id
        .get_recv_comp()
        .map_err(|e| format!("{side}: recv: {e:?}"))?;
    if wc.status == WcStatus::WrFlushErr {
        return Ok(None);
    }
    if wc.status != WcStatus::Success {
        return Err(format!("{side}: recv completion error {:?}", wc.status));
    }
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
        // rping: "Received bogus data"
        return Err(format!(
            "{side}: received bogus data: {:?} of {} bytes",
            wc.opcode, wc.byte_len
        ));
    }
    let mut m = [0u8; INFO_LEN];
    m.copy_from_slice(&recv.read(INFO_LEN)?);
    id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
        .map_err(|e| format!("{side}: post_recv: {e:?}"))?;
    Ok(Some(m))
}

/// What a server run did.
#[derive(Debug, Default)]
struct Served {
    pings: u32,
    /// The last ping's length.
    len: u32,
    /// From the first advertisement to the last "go ahead".
    elapsed: Duration,
}

/// The server side on a connected id (rping's `rping_test_server`): pings until the client
/// disconnects.
fn server_pings<P: Dev>(
    conn: &CmId<P>,
    o: &Options,
    recv: &Buf,
    send: &Buf,
    rdma: &Buf,
) -> Result<Served, String> {
    let mut s = Served::default();
    let mut t0 = None;
    loop {
        let Some(adv) = recv_info(conn, "server", recv)? else {
            return Ok(s);
        };
        let t0 = *t0.get_or_insert_with(Instant::now);
        let (addr, rkey, len) = decode_info(&adv);
        if o.debug {
            println!("server: received source adv: rkey {rkey:#x} addr {addr:#x} len {len}");
        }
        if len == 0 || len as usize > RPING_BUFSIZE {
            return Err(format!(
                "server: the client advertised {len} bytes (this server's buffer holds 1 to \
                 {RPING_BUFSIZE})"
            ));
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
        check_wc("server", "rdma read", conn.get_send_comp())?;
        let data = rdma.read(len as usize)?;
        if o.debug || (o.verbose && o.server) {
            println!("server ping data: {}", as_text(&data));
        }
        if o.validate {
            let want = pattern(s.pings, len as usize);
            if data != want {
                return Err(format!(
                    "server: data mismatch in ping {}: read {:?}, rping's pattern is {:?}",
                    s.pings,
                    as_text(&data),
                    as_text(&want)
                ));
            }
        }
        // "go ahead": the client may advertise its sink (rping's server sends its send
        // buffer, which it never fills in)
        send_info(conn, "server", send, [0u8; INFO_LEN])?;

        let Some(adv) = recv_info(conn, "server", recv)? else {
            return Err(format!(
                "server: the client disconnected in ping {} (before its sink advertisement)",
                s.pings
            ));
        };
        let (addr, rkey, sink_len) = decode_info(&adv);
        if o.debug {
            println!("server: received sink adv: rkey {rkey:#x} addr {addr:#x} len {sink_len}");
        }
        // as rping: the string and its NUL
        let wlen = data
            .iter()
            .position(|&c| c == 0)
            .map_or(len, |n| n as u32 + 1);
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
        check_wc("server", "rdma write", conn.get_send_comp())?;
        // "go ahead": the data is in the client's sink
        send_info(conn, "server", send, [0u8; INFO_LEN])?;
        s.pings += 1;
        s.len = len;
        s.elapsed = t0.elapsed();
    }
}

/// The server thread: get_request, buffers, accept, pings until the client disconnects,
/// disconnect.
fn server<P: Dev>(listen: &CmId<P>, o: &Options) -> Result<Served, String> {
    let conn = listen
        .get_request()
        .map_err(|e| format!("server: get_request: {e:?}"))?;
    let r = (|| {
        let recv = Buf::new(&conn, INFO_LEN, |m| conn.reg_msgs(m))?;
        let send = Buf::new(&conn, INFO_LEN, |m| conn.reg_msgs(m))?;
        let rdma = Buf::new(&conn, RPING_BUFSIZE, |m| conn.reg_msgs(m))?;
        let mut accepted = false;
        let r = (|| {
            conn.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
                .map_err(|e| format!("server: post_recv: {e:?}"))?;
            conn.accept(Some(&conn_param()))
                .map_err(|e| format!("server: accept: {e:?}"))?;
            accepted = true;
            server_pings(&conn, o, &recv, &send, &rdma)
        })();
        if accepted {
            // answers the client's DREQ (or sends ours after an error); an id that never
            // connected has nothing to disconnect: the call would wait
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

/// What a client run did.
#[derive(Debug, Default)]
struct Pinged {
    pings: u32,
    /// From the first advertisement to the last comparison.
    elapsed: Duration,
}

/// The client side on a connected id (rping's `rping_test_client`): `count` pings (0:
/// forever), each compared; stops at the first mismatch.
fn client_pings<P: Dev>(
    id: &CmId<P>,
    o: &Options,
    recv: &Buf,
    send: &Buf,
    start: &Buf,
    sink: &Buf,
) -> Result<Pinged, String> {
    let t0 = Instant::now();
    let mut ping = 0;
    while o.count == 0 || ping < o.count {
        let src = pattern(ping, o.size);
        start.write(&src)?;
        sink.write(&vec![0u8; o.size])?;
        send_info(
            id,
            "client",
            send,
            encode_info(start.addr(), start.mr.rkey(), o.size as u32),
        )?;
        if recv_info(id, "client", recv)?.is_none() {
            return Err(format!(
                "client: the server disconnected in ping {ping} (before its go-ahead)"
            ));
        }
        send_info(
            id,
            "client",
            send,
            encode_info(sink.addr(), sink.mr.rkey(), o.size as u32),
        )?;
        if recv_info(id, "client", recv)?.is_none() {
            return Err(format!(
                "client: the server disconnected in ping {ping} (before its write)"
            ));
        }
        let got = sink.read(o.size)?;
        if got != src {
            return Err(format!(
                "client: data mismatch in ping {ping}: sent {:?} got {:?}",
                as_text(&src),
                as_text(&got)
            ));
        }
        if o.verbose {
            println!("ping data: {}", as_text(&got));
        }
        ping += 1;
    }
    Ok(Pinged {
        pings: ping,
        elapsed: t0.elapsed(),
    })
}

/// The client thread: buffers, connect, pings, disconnect.
fn client<P: Dev>(id: &CmId<P>, o: &Options) -> Result<Pinged, String> {
    let recv = Buf::new(id, INFO_LEN, |m| id.reg_msgs(m))?;
    let send = Buf::new(id, INFO_LEN, |m| id.reg_msgs(m))?;
    let start = Buf::new(id, o.size, |m| id.reg_read(m))?;
    let sink = Buf::new(id, o.size, |m| id.reg_write(m))?;
    let r = (|| {
        id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
            .map_err(|e| format!("client: post_recv: {e:?}"))?;
        id.connect(Some(&conn_param()))
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
fn add_nic(cm: &Cm<EmuDevice>, tb: &nic_testbed::Testbed) -> Result<(), String> {
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
) -> Result<(), String> {
    let mac = dev.mac().map_err(|e| format!("mac: {e:?}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
        .map_err(|e| format!("set gid: {e:?}"))?;
    cm.add_device(dev, mac)
        .map_err(|(e, _)| format!("add_device: {e:?}"))?;
    Ok(())
}

/// Embedded mode: both ends in this process.
fn embedded(o: &Options) -> Result<Pinged, String> {
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
    add_nic(&cm, &ctb)?;
    add_nic(&cm, &stb)?;
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
            let srv = sc.spawn(|| server(&listen, o));
            let c = client(&id, o);
            let s = srv
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            match (c, s) {
                (Ok(c), Ok(s)) if s.pings == c.pings => Ok(c),
                (Ok(c), Ok(s)) => Err(format!(
                    "the server served {} pings, the client made {}",
                    s.pings, c.pings
                )),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            }
        });
        id.destroy_ep();
        r
    })();
    listen.destroy_ep();
    r
}

/// The MAC of the emulated NIC at `ip`: 02:00 and the address (the UDP fabric has no ARP, so
/// both ends derive it; the Ethernet fabric's default).
fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn cm_config(o: &Options) -> CmConfig {
    CmConfig {
        wait_limit_ns: Some(o.timeout_s * 1_000_000_000),
        ..CmConfig::default()
    }
}

/// One end of a two-process run on the UDP fabric: an emulated NIC at `ip`, its device in a
/// connection manager whose neighbour table knows the NICs of `ip`'s /24.
struct UdpEnd {
    cm: Cm<UdpDevice>,
    // Last: the poller stops after the manager's objects are gone.
    _nic: UdpNic,
}

fn udp_end(ip: Ipv4Addr, fabric_port: u16, o: &Options) -> Result<UdpEnd, String> {
    let nic = UdpNic::new(
        ip,
        fabric_port,
        Profile {
            mac: mac_for(ip),
            ..Profile::default()
        },
    )
    .map_err(|e| format!("emulated NIC at {ip} (fabric UDP port {fabric_port}): {e}"))?;
    let cm = Cm::new(nic.platform(), cm_config(o));
    let dev = nic
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    add_device(&cm, dev, ip)?;
    let [a, b, c, _] = ip.octets();
    for h in 1..=254 {
        let n = Ipv4Addr::new(a, b, c, h);
        if n != ip {
            cm.add_neighbor(n, Neighbor { mac: mac_for(n) });
        }
    }
    Ok(UdpEnd { cm, _nic: nic })
}

/// One end on an Ethernet link: the emulated NIC at `ip` with its MAC on the wire.
fn eth_end(ip: Ipv4Addr, local: u16, remote: u16, o: &Options) -> Result<EthNic, String> {
    let mac = o.mac.unwrap_or_else(|| mac_for(ip));
    let sa = |p| SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
    let mut link = EthLink::new(sa(local), sa(remote), mac);
    link.arp = ArpConfig {
        reply_delay: ARP_REPLY_DELAY,
        ..ArpConfig::default()
    };
    EthNic::start(link, ip, cm_config(o)).map_err(|e| {
        format!("emulated NIC at {ip} on the Ethernet link 127.0.0.1:{local} -> :{remote}: {e}")
    })
}

/// Where this process's NIC is, for messages.
fn where_(o: &Options, ip: Ipv4Addr) -> String {
    match o.fabric {
        Fabric::Udp(p) => format!("{ip}:{} (fabric UDP port {p})", o.port),
        Fabric::Eth { local, remote } => format!(
            "{ip}:{} (Ethernet link 127.0.0.1:{local} -> 127.0.0.1:{remote}, MAC {})",
            o.port,
            fmt_mac(&o.mac.unwrap_or_else(|| mac_for(ip)))
        ),
    }
}

/// Listens on the NIC at `ip` of `cm` and serves one connection.
fn serve_on<P: Dev>(cm: &Cm<P>, ip: Ipv4Addr, o: &Options) -> Result<Served, String> {
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&ip.to_string()),
        Some(&o.port.to_string()),
        Some(&passive),
    )
    .map_err(|e| format!("server: getaddrinfo: {e:?}"))?;
    let mut a = qp_attr();
    let listen = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("server: create_ep: {e:?}"))?;
    let r = listen
        .listen(0)
        .map_err(|e| format!("server: listen: {e:?}"))
        .and_then(|()| {
            eprintln!("rping: server: listening on {}", where_(o, ip));
            server(&listen, o)
        });
    listen.destroy_ep();
    r
}

/// Connects from the NIC at `src` of `cm` to the server at `dst` and pings.
fn connect_on<P: Dev>(
    cm: &Cm<P>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    o: &Options,
) -> Result<Pinged, String> {
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
    let id = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("client: create_ep: {e:?}"))?;
    let r = client(&id, o);
    id.destroy_ep();
    r
}

/// Shuts an Ethernet NIC down, reporting leaks with -d.
fn eth_shutdown(nic: EthNic, o: &Options) {
    match nic.shutdown() {
        Ok(live) if live == Default::default() => {}
        Ok(live) => {
            if o.debug {
                eprintln!("rping: device objects left at shutdown: {live:?}");
            }
        }
        Err(e) => {
            if o.debug {
                eprintln!("rping: shutdown: {e}");
            }
        }
    }
}

/// Server mode: listen on this process's NIC, serve one connection until the client
/// disconnects.
fn serve(o: &Options) -> Result<Served, String> {
    let default: Ipv4Addr = SERVER_IP.parse().expect("ip");
    let ip = o.addr.unwrap_or(default);
    match o.fabric {
        Fabric::Udp(p) => {
            let end = udp_end(ip, p, o)?;
            serve_on(&end.cm, ip, o)
        }
        Fabric::Eth { local, remote } => {
            let nic = eth_end(ip, local, remote, o)?;
            let r = serve_on(&nic.cm, ip, o);
            eth_shutdown(nic, o);
            r
        }
    }
}

/// Client mode: connect from this process's NIC to the server at `-a`.
fn connect(o: &Options) -> Result<Pinged, String> {
    let default: Ipv4Addr = CLIENT_IP.parse().expect("ip");
    let src = o.src.unwrap_or(default);
    let Some(dst) = o.addr else {
        return Err("client: no server address".into());
    };
    match o.fabric {
        Fabric::Udp(p) => {
            let end = udp_end(src, p, o)?;
            connect_on(&end.cm, src, dst, o)
        }
        Fabric::Eth { local, remote } => {
            let nic = eth_end(src, local, remote, o)?;
            let r = resolve(&nic, dst, o).and_then(|()| connect_on(&nic.cm, src, dst, o));
            eth_shutdown(nic, o);
            r
        }
    }
}

/// Resolves the server's MAC by ARP (a round of requests every 2 s until `--timeout`).
fn resolve(nic: &EthNic, dst: Ipv4Addr, o: &Options) -> Result<(), String> {
    let end = Instant::now() + Duration::from_secs(o.timeout_s);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match nic.resolve(dst, left.min(Duration::from_secs(2))) {
            Ok(Some(mac)) => {
                if o.debug {
                    println!("client: {dst} is at {}", fmt_mac(&mac));
                }
                return Ok(());
            }
            Ok(None) if Instant::now() < end => {}
            Ok(None) => {
                return Err(format!(
                    "client: no ARP reply from {dst} within {} s",
                    o.timeout_s
                ));
            }
            Err(e) => return Err(format!("client: resolving {dst}: {e}")),
        }
    }
}

fn per_ping(elapsed: Duration, n: u32) -> String {
    let ms = elapsed.as_secs_f64() * 1e3;
    if n == 0 {
        return format!("{ms:.1} ms");
    }
    format!("{ms:.1} ms, {:.3} ms per ping", ms / f64::from(n))
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
    let v = if o.validate { ", validated" } else { "" };
    if o.server {
        return match serve(&o) {
            Ok(s) => {
                eprintln!(
                    "rping: server: {} pings in {}",
                    s.pings,
                    per_ping(s.elapsed, s.pings)
                );
                println!(
                    "rping: server: {} pings of {} bytes{v}; the client disconnected",
                    s.pings, s.len
                );
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
        Ok(c) => {
            eprintln!(
                "rping: {mode}: {} pings in {}",
                c.pings,
                per_ping(c.elapsed, c.pings)
            );
            println!("rping: {mode}: {} pings of {} bytes{v}", c.pings, o.size);
            ExitCode::SUCCESS
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

    fn a(v: &[&str]) -> Result<Options, CliError> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn pattern_matches_rping() {
        assert_eq!(&pattern(0, 26), b"rdma-ping-0: ABCDEFGHIJKL\0");
        assert_eq!(&pattern(1, 20), b"rdma-ping-1: BCDEFG\0");
        // letters wrap from 'z' to 'A'; the start letter advances one per ping and wraps too
        assert_eq!(pattern(57, 18)[14..], *b"zAB\0");
        assert_eq!(pattern(58, 18)[14..], *b"ABC\0");
        assert_eq!(pattern(3, 64).len(), 64);
    }

    #[test]
    fn info_round_trip() {
        let m = encode_info(0x1122_3344_5566_7788, 0xaabb_ccdd, 100);
        // network byte order, as `struct rping_rdma_info`
        assert_eq!(
            m,
            [
                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0,
                100
            ]
        );
        assert_eq!(decode_info(&m), (0x1122_3344_5566_7788, 0xaabb_ccdd, 100));
    }

    #[test]
    fn sizes_and_defaults() {
        assert_eq!(MIN_SIZE, 26);
        assert!(a(&["-S", "25"]).is_err());
        assert_eq!(a(&["-S", "26"]).unwrap().size, 26);
        assert_eq!(a(&["-S", "65535"]).unwrap().size, 65535);
        assert!(a(&["-S", "65536"]).is_err());
        let d = a(&[]).unwrap();
        // rping's defaults
        assert_eq!((d.count, d.size, d.port), (10, 64, 7174));
        assert_eq!(d.fabric, Fabric::Udp(4791));
    }

    #[test]
    fn fabrics() {
        let o = a(&["-s", "-a", "10.77.0.1", "--fabric", "eth:48030,48031"]).unwrap();
        assert_eq!(
            o.fabric,
            Fabric::Eth {
                local: 48030,
                remote: 48031
            }
        );
        let o = a(&[
            "-c",
            "-a",
            "10.77.0.2",
            "-I",
            "10.77.0.1",
            "--fabric",
            "eth:1,2",
            "--mac",
            "02:00:00:77:00:01",
        ])
        .unwrap();
        assert_eq!(o.mac, Some([2, 0, 0, 0x77, 0, 1]));
        assert_eq!(
            a(&["-s", "--fabric", "udp:47000"]).unwrap().fabric,
            Fabric::Udp(47000)
        );
        assert_eq!(
            a(&["-s", "--fabric-port", "47000"]).unwrap().fabric,
            Fabric::Udp(47000)
        );
        for bad in [
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:1"][..],
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:1,1"],
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:0,1"],
            &["-s", "-a", "10.77.0.1", "--fabric", "tcp:1"],
            &["-s", "--fabric", "eth:1,2"],
            &["-s", "-a", "127.0.0.1", "--fabric", "eth:1,2"],
            &["-s", "-a", "224.0.0.1", "--fabric", "eth:1,2"],
            &["-c", "-a", "10.77.0.2", "--fabric", "eth:1,2"],
            &[
                "-c",
                "-a",
                "10.77.0.2",
                "-I",
                "10.77.0.2",
                "--fabric",
                "eth:1,2",
            ],
            &["-s", "--mac", "02:00:00:00:00:01"],
            &[
                "-s",
                "-a",
                "10.77.0.1",
                "--fabric",
                "eth:1,2",
                "--mac",
                "01:00:00:00:00:01",
            ],
            &[
                "-s",
                "-a",
                "10.77.0.1",
                "--fabric",
                "eth:1,2",
                "--mac",
                "02:00:00:00:01",
            ],
            &["--fabric", "eth:1,2"],
            &["-s", "--fabric", "udp:1", "--fabric-port", "2"],
        ] {
            assert!(a(bad).is_err(), "{bad:?}");
        }
    }
}
