//! perftest's connection exchange in its rdma_cm mode (`-R`), so that rperf and rdma-core's
//! `ib_send_lat`, `ib_send_bw`, `ib_write_lat`, `ib_write_bw` and `ib_read_bw` (perftest
//! 6.06, Debian's `perftest` 4.5-0.17) can be the two ends of one test. docs/perftest.md has
//! the exchange in full; in brief:
//!
//! - Two RC connections through the connection manager, both to the same port (18515 by
//!   default), neither with private data of its own: first the *control* connection, on
//!   which every exchange runs, then the *test* connection, whose QP carries the measured
//!   traffic. perftest's server destroys its listener after accepting the control connection
//!   and listens again for the test connection, so a client retries that connect a few times.
//! - Every exchange is one SEND each way of a few bytes (at most 56): the client sends first
//!   and then receives, the server receives first and then sends. Each side keeps receives
//!   posted for it.
//! - In order: the version (16 bytes, a NUL-padded decimal string; both ends need 5.70 or
//!   later), the page size and the cache-line size (4-byte big-endian integers each), the MTU
//!   (2 bytes: the decimal digit of the `ibv_mtu` value and a NUL); then a handshake
//!   ([`Dest`], 56 bytes), the test connection, another handshake; then the test's own
//!   sequence of handshakes around the run ([`Steps`]), and for `write_bw`/`read_bw` the
//!   client's figures (five 8-byte big-endian values).
//! - A handshake carries `struct pingpong_dest` as perftest lays it out on x86-64, with its
//!   integers in network byte order: the QPN, the buffer's rkey and address the peer targets.
//!
//! Both ends must be given the same test, message size (`-s`) and iterations (`-n`), as with
//! perftest itself. Data is not verified in this mode (perftest does not exchange patterns).

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cm::{AddrInfo, CmId, ConnParam, QpInitAttr, RaiFlags, getaddrinfo};
use device_open::Device;
use verbs::{Gid, Provider, QpCap, SendFlags, WcOpcode, WorkCompletion, WrOpcode};

use crate::cli::Test;
use crate::port::{Pace, Port, Request, Target, Wait};
use crate::remote::{Conn, Local, Net, cm_err};
use crate::setup::{Error, MAX_RD_ATOMIC, Result, check_ok};
use crate::stats::{BwStats, LatStats, lat_stats};

/// The perftest version rperf announces (the exchange below is that version's).
pub const VERSION: &str = "6.06";
/// The oldest peer version whose exchange this is (perftest refuses older ones too).
const MIN_PEER_VERSION: f64 = 5.70;
/// Bytes of the version message.
const VERSION_LEN: usize = 16;
/// Bytes of a handshake (`struct pingpong_dest`).
pub const DEST_LEN: usize = 56;
/// Bytes of each receive slot of the control connection (every message fits).
const SLOT: usize = 64;
/// Receives kept posted on the control connection.
const CTRL_RECVS: usize = 4;
/// The page size and cache-line size rperf reports.
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// Connect attempts for the test connection at least (then until `--timeout`), and the
/// pause between attempts (perftest's).
const CONNECT_TRIES: u32 = 20;
const CONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Send-queue depth of the latency tests; receive queue of the SEND tests.
const LAT_SQ: u32 = 16;
const SEND_RQ: u32 = 512;
/// `wr_id` of the control sends.
const CTRL_SEND: u64 = u64::MAX;

/// `struct pingpong_dest`: what a handshake tells the peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u32,
    /// Outstanding RDMA READs.
    pub out_reads: u32,
    /// The test QP's number.
    pub qpn: u32,
    /// Its starting PSN (the connection manager's business here).
    pub psn: u32,
    /// The rkey of the buffer the peer targets.
    pub rkey: u32,
    /// The address of that buffer.
    pub vaddr: u64,
    /// The port's GID.
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only).
    pub srqn: u32,
    /// GID index.
    pub gid_index: u32,
}

impl Dest {
    /// The 56 bytes on the wire: integers big-endian at 0, 4, 8, 12, 16, the address at 24
    /// (after 4 bytes of padding), the GID at 32, then SRQN and GID index.
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        for (off, v) in [
            (0, self.lid),
            (4, self.out_reads),
            (8, self.qpn),
            (12, self.psn),
            (16, self.rkey),
            (48, self.srqn),
            (52, self.gid_index),
        ] {
            b[off..off + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b
    }

    /// Parses a handshake message.
    pub fn decode(b: &[u8]) -> std::result::Result<Dest, String> {
        if b.len() < DEST_LEN {
            return Err(format!(
                "a handshake of {} bytes (perftest's is {DEST_LEN})",
                b.len()
            ));
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        Ok(Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: u32_at(48),
            gid_index: u32_at(52),
        })
    }
}

/// The version message: `v` NUL-padded to 16 bytes.
pub fn version_msg(v: &str) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    b[..n].copy_from_slice(&v.as_bytes()[..n]);
    b
}

/// The peer's version from its message; an error below [`MIN_PEER_VERSION`].
pub fn peer_version(b: &[u8]) -> std::result::Result<String, String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]).into_owned();
    match s.trim().parse::<f64>() {
        Ok(v) if v >= MIN_PEER_VERSION => Ok(s),
        _ => Err(format!(
            "the peer speaks perftest version '{s}'; this is the exchange of {MIN_PEER_VERSION:.2} and later"
        )),
    }
}

/// The MTU message: the `ibv_mtu` value (1 = 256 .. 5 = 4096) as a decimal digit and a NUL.
pub fn mtu_msg(bytes: u32) -> [u8; 2] {
    let e = match bytes {
        256 => b'1',
        512 => b'2',
        1024 => b'3',
        2048 => b'4',
        _ => b'5',
    };
    [e, 0]
}

/// The bandwidth figures a `write_bw`/`read_bw` client reports to the server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak, MB/s.
    pub peak: f64,
    /// Average, MB/s.
    pub avg: f64,
    /// Message rate, Mpps.
    pub rate: f64,
}

impl BwReport {
    /// The five 8-byte messages, big-endian (the doubles' bits byte-swapped as integers).
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.peak.to_bits().to_be_bytes(),
            self.avg.to_bits().to_be_bytes(),
            self.rate.to_bits().to_be_bytes(),
        ]
    }

    /// From the five messages.
    pub fn decode(m: &[Vec<u8>]) -> std::result::Result<BwReport, String> {
        let at = |k: usize| -> std::result::Result<u64, String> {
            let b = m.get(k).ok_or("a missing report value")?;
            let a: [u8; 8] = b
                .get(..8)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| format!("a report value of {} bytes", b.len()))?;
            Ok(u64::from_be_bytes(a))
        };
        Ok(BwReport {
            size: at(0)?,
            iters: at(1)?,
            peak: f64::from_bits(at(2)?),
            avg: f64::from_bits(at(3)?),
            rate: f64::from_bits(at(4)?),
        })
    }
}

/// The handshakes of a test after the test connection's own two: `before` before the run
/// (the receives of the SEND tests are posted before the last), then `reports` (the client's
/// figures follow a handshake) and `close` (one more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steps {
    /// Handshakes before the run.
    pub before: u32,
    /// A handshake, then the client's five figures.
    pub reports: bool,
    /// A last handshake.
    pub close: bool,
}

/// The sequence of `test` in perftest's rdma_cm mode (single QP, not bidirectional).
pub fn steps(test: Test) -> Option<Steps> {
    let s = |before, reports, close| Steps {
        before,
        reports,
        close,
    };
    Some(match test {
        Test::WriteBw | Test::ReadBw => s(3, true, true),
        Test::SendBw | Test::SendLat => s(4, false, true),
        Test::WriteLat => s(4, false, false),
        _ => return None,
    })
}

// ------------------------------------------------------------------ the control connection

/// The control connection: messages one at a time each way.
struct Ctrl<P: Provider> {
    c: Conn<P>,
    client: bool,
    got: VecDeque<Vec<u8>>,
}

impl<P: Provider> Ctrl<P> {
    /// The connection on `id` (its QP created): buffer and receives.
    fn new(id: CmId<P>, client: bool) -> Result<Self> {
        let mut c = Conn::new(id, 4096, 0, false)?;
        for k in 0..CTRL_RECVS {
            let off = c.buf().region + k * SLOT;
            c.post_recv(k as u64, off, SLOT)?;
        }
        Ok(Ctrl {
            c,
            client,
            got: VecDeque::new(),
        })
    }

    /// Polls once: receives are queued (and re-posted), sends counted in `sent`.
    fn pump(&mut self, sent: &mut u32) -> Result<bool> {
        let mut wc = [WorkCompletion::default(); 8];
        let n = self.c.poll(&mut wc)?;
        for x in &wc[..n] {
            match x.opcode {
                WcOpcode::Recv => {
                    check_ok(x, "a perftest message")?;
                    let k = usize::try_from(x.wr_id)
                        .ok()
                        .filter(|&k| k < CTRL_RECVS)
                        .ok_or(Error::Completion {
                            what: "a perftest message",
                            wc: *x,
                        })?;
                    let len = (x.byte_len as usize).min(SLOT);
                    let off = self.c.buf().region + k * SLOT;
                    self.got.push_back(self.c.read(off, len)?);
                    self.c.post_recv(x.wr_id, off, SLOT)?;
                }
                _ => {
                    check_ok(x, "a message to the peer")?;
                    *sent += 1;
                }
            }
        }
        Ok(n > 0)
    }

    fn send(&mut self, data: &[u8], net: &Net) -> Result<()> {
        self.c.buf().mem.write(0, data).map_err(|err| Error::Dma {
            what: "write a message",
            err,
        })?;
        self.c.post(&Request::new(
            CTRL_SEND,
            WrOpcode::Send,
            SendFlags::SIGNALED,
            0,
            data.len(),
        ))?;
        let mut sent = 0;
        let mut w = net.wait("the peer to take a message");
        while sent == 0 {
            if self.pump(&mut sent)? {
                w.progress();
            } else {
                w.relax()?;
            }
        }
        Ok(())
    }

    fn recv(&mut self, net: &Net) -> Result<Vec<u8>> {
        let mut w = net.wait("the peer's next message");
        let mut sent = 0;
        loop {
            if let Some(m) = self.got.pop_front() {
                return Ok(m);
            }
            if self.pump(&mut sent)? {
                w.progress();
            } else {
                w.relax()?;
            }
        }
    }

    /// One exchange: the client sends first, the server receives first.
    fn xchg(&mut self, mine: &[u8], net: &Net) -> Result<Vec<u8>> {
        if self.client {
            self.send(mine, net)?;
            self.recv(net)
        } else {
            let m = self.recv(net)?;
            self.send(mine, net)?;
            Ok(m)
        }
    }

    fn hand_shake(&mut self, me: &Dest, net: &Net) -> Result<Dest> {
        let m = self.xchg(&me.encode(), net)?;
        Dest::decode(&m).map_err(Error::Check)
    }

    /// Version, page size, cache-line size, MTU; the peer's version.
    fn prefix(&mut self, mtu: u32, net: &Net) -> Result<String> {
        let v = self.xchg(&version_msg(VERSION), net)?;
        let v = peer_version(&v).map_err(Error::Check)?;
        self.xchg(&CYCLE_BUFFER.to_be_bytes(), net)?;
        self.xchg(&CACHE_LINE.to_be_bytes(), net)?;
        self.xchg(&mtu_msg(mtu), net)?;
        Ok(v)
    }
}

// ------------------------------------------------------------------ one run

/// What one end was asked to run.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// Iterations.
    pub iters: u64,
    /// Bandwidth window.
    pub tx_depth: u32,
}

/// What a run produced at this end.
#[derive(Debug)]
pub enum Figures {
    /// Latency samples (µs).
    Lat(Vec<f64>),
    /// Bandwidth measured here.
    Bw(BwReport),
    /// The server of `write_bw`/`read_bw`: the client's figures.
    Reported(BwReport),
    /// Nothing measured here.
    None,
}

/// What the banner shows of a run.
#[derive(Debug)]
pub struct Ran {
    /// The peer's perftest version.
    pub peer_version: String,
    /// This end's handshake.
    pub me: Dest,
    /// The peer's.
    pub peer: Dest,
    /// The peer's address.
    pub peer_addr: Option<SocketAddr>,
    /// The figures.
    pub figures: Figures,
}

fn qp_attr<P: Provider>(p: &Params) -> QpInitAttr<P::Cq, P::Srq> {
    let send = matches!(p.test, Test::SendLat | Test::SendBw);
    let sq = if p.test.is_lat() {
        LAT_SQ
    } else {
        p.tx_depth.max(1) + 4
    };
    QpInitAttr {
        cap: QpCap {
            max_send_wr: sq,
            max_recv_wr: if send { SEND_RQ } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..QpInitAttr::default()
    }
}

fn ctrl_attr<P: Provider>() -> QpInitAttr<P::Cq, P::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: CTRL_RECVS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..QpInitAttr::default()
    }
}

fn conn_param() -> ConnParam<'static> {
    ConnParam {
        private_data: &[],
        responder_resources: MAX_RD_ATOMIC,
        initiator_depth: MAX_RD_ATOMIC,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// Bytes of each half of the test buffer (perftest's: the message, at least a page).
fn region(size: usize) -> usize {
    size.max(CYCLE_BUFFER as usize).next_multiple_of(4096)
}

fn my_dest<P: Provider>(t: &Conn<P>, ip: Ipv4Addr) -> Dest {
    Dest {
        out_reads: u32::from(MAX_RD_ATOMIC),
        qpn: t.id.qp_num().unwrap_or(0),
        rkey: t.buf().rkey,
        // The peer targets our second half (DST), as perftest's buffers.
        vaddr: t.buf().mem.addr() + t.buf().region as u64,
        gid: Gid::from_ipv4(ip.octets()).0,
        ..Dest::default()
    }
}

fn active(local_ip: Ipv4Addr, peer: Ipv4Addr, port: u16) -> Result<cm::AddrInfo> {
    let hints = AddrInfo {
        ai_src_addr: Some(SocketAddr::from((local_ip, 0))),
        ..AddrInfo::default()
    };
    getaddrinfo(
        Some(&peer.to_string()),
        Some(&port.to_string()),
        Some(&hints),
    )
    .map_err(|e| Error::Check(format!("getaddrinfo {peer}: {e:?}")))
}

/// Closes both connections; the test's first. Errors of the disconnect itself (the peer
/// may have destroyed its ends already) are only reported.
fn close_all<P: Provider>(t: Option<Conn<P>>, ctrl: Ctrl<P>) {
    if let Some(t) = t
        && let Err(e) = t.close()
    {
        eprintln!("rperf: closing the test connection: {e}");
    }
    if let Err(e) = ctrl.c.close() {
        eprintln!("rperf: closing the control connection: {e}");
    }
}

/// The client end: connects to perftest's (or rperf's) server at `peer`.
pub fn client<D: Device>(
    local: &Local<D>,
    net: &Net,
    peer: Ipv4Addr,
    p: Params,
) -> std::result::Result<Ran, Box<dyn std::error::Error>> {
    let steps = steps(p.test).ok_or("this test has no perftest -R exchange here")?;
    let res = active(local.ip, peer, net.port)?;
    // A server that is not listening yet rejects: try again until --timeout.
    let until = Instant::now() + net.timeout;
    let mut ctrl = loop {
        let mut attr = ctrl_attr::<D>();
        let id = local
            .cm
            .create_ep(&res, None, Some(&mut attr))
            .map_err(cm_err("create_ep (resolve the server's address and route)"))?;
        let ctrl = Ctrl::new(id, true)?;
        match ctrl.c.id.connect(Some(&conn_param())) {
            Ok(()) => break ctrl,
            Err(e) => {
                let _ = ctrl.c.close();
                if Instant::now() >= until {
                    return Err(format!(
                        "connect to {peer}:{} (is a perftest server with -R running there?): \
                         {e:?} (errno {})",
                        net.port,
                        e.errno()
                    )
                    .into());
                }
                std::thread::sleep(CONNECT_PAUSE);
            }
        }
    };
    ctrl.c.connected = true;
    let mut test: Option<Conn<D>> = None;
    let r = (|| -> std::result::Result<Ran, Box<dyn std::error::Error>> {
        let peer_version = ctrl.prefix(local.mtu, net)?;
        ctrl.hand_shake(&Dest::default(), net)?;
        // perftest's server listens for the test connection only after that handshake.
        let mut tries = 0;
        let t = loop {
            tries += 1;
            let mut attr = qp_attr::<D>(&p);
            let id = local
                .cm
                .create_ep(&res, None, Some(&mut attr))
                .map_err(cm_err("create_ep (the test connection)"))?;
            let mut t = Conn::new(id, region(p.size), 0, false)?;
            match t.id.connect(Some(&conn_param())) {
                Ok(()) => {
                    t.connected = true;
                    break t;
                }
                Err(_) if tries < CONNECT_TRIES || Instant::now() < until => {
                    let _ = t.close();
                    std::thread::sleep(CONNECT_PAUSE);
                }
                Err(e) => {
                    let _ = t.close();
                    return Err(format!(
                        "the test connection to {peer}:{}: {e:?} (errno {}) after {tries} tries",
                        net.port,
                        e.errno()
                    )
                    .into());
                }
            }
        };
        let t = test.insert(t);
        let me = my_dest(t, local.ip);
        ctrl.hand_shake(&me, net)?;
        let mut rem = Dest::default();
        for k in 0..steps.before {
            if k + 1 == steps.before && matches!(p.test, Test::SendLat) {
                post_recvs(t, &p)?;
            }
            let d = ctrl.hand_shake(&me, net)?;
            if k == 0 {
                rem = d;
            }
        }
        let samples_or_bw = run_client(t, &p, &rem, net)?;
        if steps.reports {
            ctrl.hand_shake(&me, net)?;
            let rep = match &samples_or_bw {
                Figures::Bw(r) => *r,
                _ => return Err("a bandwidth test without figures".into()),
            };
            for m in rep.encode() {
                ctrl.xchg(&m, net)?;
            }
        }
        if steps.close {
            ctrl.hand_shake(&me, net)?;
        }
        Ok(Ran {
            peer_version,
            me,
            peer: rem,
            peer_addr: Some(SocketAddr::from((peer, net.port))),
            figures: samples_or_bw,
        })
    })();
    close_all(test, ctrl);
    r
}

/// The server end: serves one perftest (or rperf) client on `listener`.
pub fn server<D: Device>(
    local: &Local<D>,
    listener: &CmId<D>,
    net: &Net,
    p: Params,
) -> std::result::Result<Ran, Box<dyn std::error::Error>> {
    let steps = steps(p.test).ok_or("this test has no perftest -R exchange here")?;
    let id = listener.get_request().map_err(cm_err(
        "get_request (waiting for the client's control connection)",
    ))?;
    let peer_addr = id.dst_addr();
    let mut attr = ctrl_attr::<D>();
    if let Err(e) = id.create_qp(None, &mut attr) {
        let _ = id.reject(&[]);
        id.destroy_ep();
        return Err(cm_err("create_qp")(e).into());
    }
    let mut ctrl = Ctrl::new(id, false)?;
    if let Err(e) = ctrl.c.id.accept(Some(&conn_param())) {
        let _ = ctrl.c.close();
        return Err(cm_err("accept")(e).into());
    }
    ctrl.c.connected = true;
    let mut test: Option<Conn<D>> = None;
    let r = (|| -> std::result::Result<Ran, Box<dyn std::error::Error>> {
        let peer_version = ctrl.prefix(local.mtu, net)?;
        ctrl.hand_shake(&Dest::default(), net)?;
        let id = listener
            .get_request()
            .map_err(cm_err("get_request (waiting for the test connection)"))?;
        let mut attr = qp_attr::<D>(&p);
        if let Err(e) = id.create_qp(None, &mut attr) {
            let _ = id.reject(&[]);
            id.destroy_ep();
            return Err(cm_err("create_qp (the test connection)")(e).into());
        }
        let mut t = Conn::new(id, region(p.size), 0, false)?;
        if let Err(e) = t.id.accept(Some(&conn_param())) {
            let _ = t.close();
            return Err(cm_err("accept (the test connection)")(e).into());
        }
        t.connected = true;
        let t = test.insert(t);
        let me = my_dest(t, local.ip);
        ctrl.hand_shake(&me, net)?;
        let mut rem = Dest::default();
        for k in 0..steps.before {
            if k + 1 == steps.before && matches!(p.test, Test::SendLat | Test::SendBw) {
                post_recvs(t, &p)?;
            }
            let d = ctrl.hand_shake(&me, net)?;
            if k == 0 {
                rem = d;
            }
        }
        let mut figures = run_server(t, &p, &rem, net)?;
        if steps.reports {
            ctrl.hand_shake(&me, net)?;
            let mut m = Vec::new();
            for v in (BwReport {
                size: p.size as u64,
                iters: p.iters,
                peak: 0.0,
                avg: 0.0,
                rate: 0.0,
            })
            .encode()
            {
                m.push(ctrl.xchg(&v, net)?);
            }
            figures = Figures::Reported(BwReport::decode(&m).map_err(Error::Check)?);
        }
        if steps.close {
            ctrl.hand_shake(&me, net)?;
        }
        Ok(Ran {
            peer_version,
            me,
            peer: rem,
            peer_addr,
            figures,
        })
    })();
    close_all(test, ctrl);
    r
}

/// A listener on this NIC at the CM port.
pub fn listen<D: Device>(local: &Local<D>, net: &Net) -> Result<CmId<D>> {
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&local.ip.to_string()),
        Some(&net.port.to_string()),
        Some(&passive),
    )
    .map_err(|e| Error::Check(format!("getaddrinfo: {e:?}")))?;
    let id = local
        .cm
        .create_ep(&res, None, None)
        .map_err(cm_err("create_ep"))?;
    id.listen(0).map_err(cm_err("listen"))?;
    Ok(id)
}

// ------------------------------------------------------------------ the runs

/// Receives of the SEND tests (into the DST half), as many as the run needs up to the queue.
fn post_recvs<P: Provider>(t: &mut Conn<P>, p: &Params) -> Result<()> {
    let n = p.iters.min(u64::from(SEND_RQ));
    let off = t.buf().region;
    for k in 0..n {
        t.post_recv(k, off, p.size)?;
    }
    Ok(())
}

/// Completions seen by [`pump`].
#[derive(Default)]
struct Seen {
    sends: u64,
    recvs: u64,
}

fn pump<P: Provider>(t: &Conn<P>, seen: &mut Seen) -> Result<bool> {
    let mut wc = [WorkCompletion::default(); 32];
    let n = t.poll(&mut wc)?;
    for x in &wc[..n] {
        match x.opcode {
            WcOpcode::Recv => {
                check_ok(x, "a receive")?;
                seen.recvs += 1;
            }
            _ => {
                check_ok(x, "a send request")?;
                seen.sends += 1;
            }
        }
    }
    Ok(n > 0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Waits until `done` holds, pumping completions.
fn wait_until<P: Provider>(
    t: &Conn<P>,
    seen: &mut Seen,
    net: &Net,
    what: &'static str,
    mut done: impl FnMut(&Conn<P>, &Seen) -> Result<bool>,
) -> Result<()> {
    let mut w = net.wait(what);
    while !done(t, seen)? {
        if pump(t, seen)? {
            w.progress();
        } else {
            w.relax()?;
        }
    }
    Ok(())
}

fn send_req(p: &Params, rem: &Dest, k: u64, region: usize) -> Request {
    let (op, off, target) = match p.test {
        Test::SendLat | Test::SendBw => (WrOpcode::Send, 0, Target::None),
        Test::ReadBw => (
            WrOpcode::RdmaRead,
            region,
            Target::Rdma(rem.vaddr, rem.rkey),
        ),
        _ => (WrOpcode::RdmaWrite, 0, Target::Rdma(rem.vaddr, rem.rkey)),
    };
    Request::new(k, op, SendFlags::SIGNALED, off, p.size).to(target)
}

/// Bandwidth figures of `n` messages of `size` bytes in `dt` (MB = 2^20 bytes, as perftest).
fn bw(size: usize, n: u64, dt: Duration) -> BwReport {
    let s = dt.as_secs_f64().max(1e-9);
    let mbs = size as f64 * n as f64 / s / f64::from(1u32 << 20);
    BwReport {
        size: size as u64,
        iters: n,
        peak: mbs,
        avg: mbs,
        rate: n as f64 / s / 1e6,
    }
}

/// Streams `p.iters` requests with at most `p.tx_depth` outstanding.
fn stream<P: Provider>(t: &mut Conn<P>, p: &Params, rem: &Dest, net: &Net) -> Result<BwReport> {
    let region = t.buf().region;
    let depth = u64::from(p.tx_depth.max(1));
    let mut seen = Seen::default();
    let mut posted = 0u64;
    let t0 = Instant::now();
    let mut w = net.wait("the stream's completions");
    while seen.sends < p.iters {
        while posted < p.iters && posted - seen.sends < depth {
            t.post(&send_req(p, rem, posted, region))?;
            posted += 1;
        }
        if pump(t, &mut seen)? {
            w.progress();
        } else {
            w.relax()?;
        }
    }
    Ok(bw(p.size, p.iters, t0.elapsed()))
}

/// The client's run.
fn run_client<P: Provider>(t: &mut Conn<P>, p: &Params, rem: &Dest, net: &Net) -> Result<Figures> {
    let region = t.buf().region;
    let n = p.iters;
    match p.test {
        Test::SendLat => {
            // SEND, then wait for the server's SEND.
            let mut seen = Seen::default();
            let mut samples = Vec::with_capacity(n as usize);
            let mut posted_recvs = n.min(u64::from(SEND_RQ));
            for k in 0..n {
                let t0 = Instant::now();
                t.post(&send_req(p, rem, k, region))?;
                wait_until(t, &mut seen, net, "the server's answer", |_, s| {
                    Ok(s.recvs > k)
                })?;
                samples.push(us(t0.elapsed()) / 2.0);
                if posted_recvs < n {
                    t.post_recv(posted_recvs, region, p.size)?;
                    posted_recvs += 1;
                }
            }
            wait_until(t, &mut seen, net, "the last sends", |_, s| Ok(s.sends >= n))?;
            Ok(Figures::Lat(samples))
        }
        Test::WriteLat => {
            // perftest's server writes first: wait for its i-th WRITE, write ours.
            let mut seen = Seen::default();
            let mut samples = Vec::with_capacity(n as usize);
            let mut last: Option<Instant> = None;
            let at = region + p.size - 1;
            for k in 1..=n {
                let stamp = k as u8;
                wait_until(t, &mut seen, net, "the server's WRITE", |c, _| {
                    Ok(c.read_u8(at)? == stamp)
                })?;
                if let Some(t0) = last {
                    samples.push(us(t0.elapsed()) / 2.0);
                }
                t.stamp(p.size, stamp)?;
                last = Some(Instant::now());
                t.post(&send_req(p, rem, k, region))?;
            }
            wait_until(t, &mut seen, net, "the last WRITE", |_, s| Ok(s.sends >= n))?;
            Ok(Figures::Lat(samples))
        }
        Test::SendBw | Test::WriteBw | Test::ReadBw => Ok(Figures::Bw(stream(t, p, rem, net)?)),
        _ => Err(Error::Check("not a perftest -R test".into())),
    }
}

/// The server's run.
fn run_server<P: Provider>(t: &mut Conn<P>, p: &Params, rem: &Dest, net: &Net) -> Result<Figures> {
    let region = t.buf().region;
    let n = p.iters;
    match p.test {
        Test::SendLat => {
            // Wait for the client's SEND, answer it.
            let mut seen = Seen::default();
            let mut samples = Vec::new();
            let mut posted_recvs = n.min(u64::from(SEND_RQ));
            let mut last: Option<Instant> = None;
            for k in 0..n {
                wait_until(t, &mut seen, net, "the client's SEND", |_, s| {
                    Ok(s.recvs > k)
                })?;
                if let Some(t0) = last {
                    samples.push(us(t0.elapsed()) / 2.0);
                }
                if posted_recvs < n {
                    t.post_recv(posted_recvs, region, p.size)?;
                    posted_recvs += 1;
                }
                last = Some(Instant::now());
                t.post(&send_req(p, rem, k, region))?;
            }
            wait_until(t, &mut seen, net, "the last sends", |_, s| Ok(s.sends >= n))?;
            Ok(Figures::Lat(samples))
        }
        Test::WriteLat => {
            // The server writes first, then waits for the client's WRITE.
            let mut seen = Seen::default();
            let mut samples = Vec::with_capacity(n as usize);
            let at = region + p.size - 1;
            for k in 1..=n {
                let stamp = k as u8;
                t.stamp(p.size, stamp)?;
                let t0 = Instant::now();
                t.post(&send_req(p, rem, k, region))?;
                wait_until(t, &mut seen, net, "the client's WRITE", |c, _| {
                    Ok(c.read_u8(at)? == stamp)
                })?;
                samples.push(us(t0.elapsed()) / 2.0);
            }
            wait_until(t, &mut seen, net, "the last WRITE", |_, s| Ok(s.sends >= n))?;
            Ok(Figures::Lat(samples))
        }
        Test::SendBw => {
            // Count the client's SENDs, keeping receives posted.
            let mut seen = Seen::default();
            let mut posted = n.min(u64::from(SEND_RQ));
            let mut first: Option<Instant> = None;
            let mut w = net.wait("the client's SENDs");
            while seen.recvs < n {
                let before = seen.recvs;
                if pump(t, &mut seen)? {
                    w.progress();
                    if before == 0 && seen.recvs > 0 {
                        first = Some(Instant::now());
                    }
                    for _ in before..seen.recvs {
                        if posted < n {
                            t.post_recv(posted, region, p.size)?;
                            posted += 1;
                        }
                    }
                } else {
                    w.relax()?;
                }
            }
            let dt = first.map_or(Duration::ZERO, |f| f.elapsed());
            Ok(Figures::Bw(bw(p.size, n, dt)))
        }
        // The client's WRITEs and READs need nothing of the server.
        Test::WriteBw | Test::ReadBw => Ok(Figures::None),
        _ => Err(Error::Check("not a perftest -R test".into())),
    }
}

/// Latency figures of `samples`, if any.
pub fn lat_figures(samples: &[f64]) -> Option<LatStats> {
    lat_stats(samples)
}

impl BwReport {
    /// As rperf's bandwidth row figures.
    pub fn stats(&self) -> BwStats {
        BwStats {
            peak_mbs: self.peak,
            avg_mbs: self.avg,
            msg_rate_mpps: self.rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_is_perftests_layout_in_network_order() {
        let d = Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x0000_7f00_dead_b000,
            gid: Gid::from_ipv4([10, 77, 0, 2]).0,
            srqn: 0,
            gid_index: 1,
        };
        let b = d.encode();
        assert_eq!(&b[4..8], &[0, 0, 0, 16]);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[20..24], &[0; 4], "padding before the address");
        assert_eq!(&b[24..32], &[0, 0, 0x7f, 0, 0xde, 0xad, 0xb0, 0]);
        assert_eq!(&b[42..48], &[0xff, 0xff, 10, 77, 0, 2]);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(Dest::decode(&b), Ok(d));
        assert!(Dest::decode(&b[..40]).is_err());
    }

    #[test]
    fn prefix_messages() {
        let v = version_msg(VERSION);
        assert_eq!(&v[..5], b"6.06\0");
        assert_eq!(peer_version(&v).unwrap(), "6.06");
        assert!(peer_version(&version_msg("5.60")).is_err());
        assert!(peer_version(b"x\0").is_err());
        assert_eq!(mtu_msg(1024), [b'3', 0]);
        assert_eq!(mtu_msg(4096), [b'5', 0]);
        let r = BwReport {
            size: 65536,
            iters: 1000,
            peak: 1234.5,
            avg: 1000.25,
            rate: 0.016,
        };
        let m: Vec<Vec<u8>> = r.encode().iter().map(|x| x.to_vec()).collect();
        assert_eq!(m[0], 65536u64.to_be_bytes());
        assert_eq!(m[2], 1234.5f64.to_bits().to_be_bytes());
        assert_eq!(BwReport::decode(&m), Ok(r));
        assert!(BwReport::decode(&m[..4]).is_err());
    }

    #[test]
    fn sequences() {
        assert_eq!(steps(Test::WriteBw).unwrap().before, 3);
        assert!(steps(Test::ReadBw).unwrap().reports);
        assert!(!steps(Test::WriteLat).unwrap().close);
        assert!(steps(Test::SendLat).unwrap().close);
        assert_eq!(steps(Test::ReadLat), None);
        assert_eq!(region(2), 4096);
        assert_eq!(region(65536), 65536);
    }
}
