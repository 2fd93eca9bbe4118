//! The two-process mode: `rperf TEST --server` in one process, `rperf TEST PEER` in another,
//! each with its own NIC (an emulated one on the UDP fabric, [`UdpNic`], or a real one through
//! VFIO), connected through the connection manager (`cm`) with librdmacm's endpoint calls.
//!
//! The client (requester) drives every test, as in the embedded mode; the server answers
//! (`send_lat`, `write_lat`) or stays passive, then checks what arrived. One connection per
//! test and size:
//! - the REQ's private data ([`Req`]) carries the test, the size, the queue parameters and the
//!   client's buffer (address, rkey, the byte pattern's seed); the REP's ([`Rep`]) the
//!   server's buffer;
//! - each side's buffer is `[SRC | DST | CTRL]`; SRC holds a pattern both sides can compute
//!   ([`crate::setup::slot_pattern`]), so each checks what landed in its DST without the
//!   data crossing twice;
//! - after the run the client RDMA-WRITEs the iteration count into the server's CTRL with
//!   immediate data `DONE`; the server checks its DST (or counter) and WRITEs its verdict into
//!   the client's CTRL with immediate `VRFY`. "data verified: yes" needs both sides' checks.
//!
//! On an EFA (`--device efa`) the ids are SRD ids of the UDP port space (EFA has no RC): the
//! manager resolves the service with SIDR and each id remembers its peer, so the exchange
//! posts as on RC. SRD is unordered, so nothing here infers one completion from another
//! (the end-of-run waits take the control write's completion and the verdict in either
//! order) and `send_bw`'s check accepts the client's slots in any receive; inline data stays
//! within the device's; `atomic_lat` is refused (EFA has no atomics).
//!
//! The UDP fabric has no ARP: an emulated NIC's MAC is derived from its address
//! ([`mac_for`]) and each end enters its /24's MACs in the manager's neighbour table.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cm::{
    AddrInfo, Cm, CmConfig, CmId, ConnParam, DataPath, EventParam, Neighbor, QpInitAttr, RaiFlags,
    getaddrinfo,
};
use device_open::{Device, mac_for};
use verbs::{
    AccessFlags, MemoryRegion, Provider, QpCap, QpType, SendFlags, Sge, WcOpcode, WorkCompletion,
    WrOpcode,
};

use crate::bw::{self, BwConfig, BwRun};
use crate::cli::{Plan, Test};
use crate::lat::{self, LatRun};
use crate::port::{Buffer, Pace, PeerBuf, Port, Request, Target, Wait};
use crate::progress::Progress;
use crate::serve::{Peer, Responder, Verdict};
use crate::setup::{Error, MAX_RD_ATOMIC, Result, check_ok, post_err, recv_wr};

/// perftest's default TCP port, used here as the CM port (service ID).
pub const DEFAULT_CM_PORT: u16 = 18515;
/// The RoCEv2 UDP port: the emulated fabric's default.
pub const DEFAULT_FABRIC_PORT: u16 = 4791;
/// Default local address of a server's NIC.
pub const DEFAULT_SERVER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Default local address of a client's NIC.
pub const DEFAULT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// Default seconds a wait for the peer lasts.
pub const DEFAULT_TIMEOUT_S: f64 = 60.0;

/// Magic at the head of rperf's private data.
const MAGIC: &[u8; 4] = b"RPRF";
/// Protocol version.
const VERSION: u8 = 2;
/// Bytes of the CTRL area after DST: `[0, 64)` incoming, `[64, 128)` outgoing.
const CTRL: usize = 4096;
const CTRL_IN: usize = 0;
const CTRL_OUT: usize = 64;
/// Immediate data of the client's end-of-run write (network byte order on the wire).
const IMM_DONE: u32 = u32::from_be_bytes(*b"DONE");
/// Immediate data of the server's verdict.
const IMM_VRFY: u32 = u32::from_be_bytes(*b"VRFY");
/// `wr_id` of the control writes.
const CTRL_WR: u64 = u64::MAX;

/// Longest sleep of one event-mode poll: the waits' time limits are checked in between.
const EVENT_SLICE: Duration = Duration::from_millis(100);

/// Every access right an MR can grant.
const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Where this process's NIC is and how to reach the peer.
#[derive(Clone, Debug)]
pub struct Net {
    /// This NIC's address.
    pub local: Ipv4Addr,
    /// The CM port.
    pub port: u16,
    /// The emulated fabric's UDP port.
    pub fabric_port: u16,
    /// How long a wait for the peer lasts.
    pub timeout: Duration,
    /// Event mode (`-e`): wait for completions on completion channels (the thread sleeps
    /// until the NIC's interrupt) instead of polling the CQs.
    pub events: bool,
    /// The device is an EFA (`--device efa`): the ids are SRD ids of the UDP port space
    /// (EFA has no RC; the connection manager resolves the service with SIDR and each id
    /// remembers its peer, so posts need no destination).
    pub srd: bool,
}

pub(crate) fn cm_err(what: &'static str) -> impl FnOnce(cm::Error) -> Error {
    move |e| Error::Check(format!("{what}: {e:?} (errno {})", e.errno()))
}

/// This process's NIC, probed and added to a connection manager.
pub struct Local<D: Device> {
    /// The manager (which owns the device).
    pub cm: Cm<D>,
    /// Firmware version, for the banner.
    pub fw: (u16, u16, u16),
    /// The port's active MTU in bytes.
    pub mtu: u32,
    /// This NIC's address.
    pub ip: Ipv4Addr,
    /// What the NIC is, for the banner.
    pub label: String,
    /// Most inline bytes of a send the device takes.
    pub max_inline: u32,
    /// The device has atomic operations (an EFA has none).
    pub atomics: bool,
}

/// The device's inline limit and whether it has atomics.
fn limits<P: Provider>(dev: &P) -> Result<(u32, bool)> {
    let attr = Provider::query_device(dev).map_err(|err| Error::Verbs {
        what: "query_device",
        err,
    })?;
    Ok((
        attr.max_inline_data,
        attr.atomic_cap != verbs::AtomicCap::None,
    ))
}

impl<D: Device> Local<D> {
    /// Adds the opened device to a new manager (whose neighbour table knows the MACs of the
    /// emulated NICs of its /24: the UDP fabric has no ARP). The device's backing stays with
    /// the caller, to be dropped after this.
    pub fn new(
        dev: D,
        ip: Ipv4Addr,
        mac: [u8; 6],
        clock: device_open::Clock,
        label: String,
        net: &Net,
    ) -> Result<Self> {
        let fw = dev.fw_version();
        let mtu = Provider::query_port(&dev, 1)
            .map_err(|err| Error::Verbs {
                what: "query_port",
                err,
            })?
            .active_mtu
            .bytes();
        let (max_inline, atomics) = limits(&dev)?;
        let cm = Cm::new(clock, net.cm_config());
        cm.add_device(dev, mac)
            .map_err(|(e, _)| cm_err("add the device to the CM")(e))?;
        let [a, b, c, _] = ip.octets();
        for h in 1..=254 {
            let n = Ipv4Addr::new(a, b, c, h);
            if n != ip {
                cm.add_neighbor(n, Neighbor { mac: mac_for(n) });
            }
        }
        Ok(Local {
            cm,
            fw,
            mtu,
            ip,
            label,
            max_inline,
            atomics,
        })
    }

    /// This process's NIC when a manager holds its device already (the Ethernet fabric's
    /// NIC, whose neighbours ARP finds): `cm` (a handle to it) and the device's id there.
    #[cfg(feature = "emulator")]
    pub fn on_cm(cm: Cm<D>, dev: cm::DeviceId, ip: Ipv4Addr, label: String) -> Result<Self> {
        let (fw, port, lim) = cm
            .with_provider(dev, |d| {
                (d.fw_version(), Provider::query_port(d, 1), limits(d))
            })
            .map_err(cm_err("the device in the CM"))?;
        let (max_inline, atomics) = lim?;
        let mtu = port
            .map_err(|err| Error::Verbs {
                what: "query_port",
                err,
            })?
            .active_mtu
            .bytes();
        Ok(Local {
            cm,
            fw,
            mtu,
            ip,
            label,
            max_inline,
            atomics,
        })
    }
}

impl<D: Device> Local<D> {
    /// The inline threshold of a run that asks for `asked` bytes: on EFA (SRD) at most what
    /// the device takes (32 bytes on the emulated EFA), elsewhere as asked (a QP the device
    /// refuses fails with the reason).
    pub fn inline(&self, asked: u32, net: &Net) -> u32 {
        if net.srd {
            asked.min(self.max_inline)
        } else {
            asked
        }
    }

    /// Refuses a test this device cannot run: `atomic_lat` without atomics (EFA).
    pub fn can_run(&self, test: Test) -> Result<()> {
        if test == Test::AtomicLat && !self.atomics {
            return Err(Error::Check(no_atomics(&self.label)));
        }
        Ok(())
    }
}

/// Why a device without atomics does not run `atomic_lat`.
fn no_atomics(device: &str) -> String {
    format!(
        "atomic_lat needs atomic operations, which this device ({device}) does not have (EFA's SRD has none)"
    )
}

impl Net {
    /// The connection manager's configuration: waits end after [`Net::timeout`] without
    /// progress; in event mode each CQ an id creates gets a completion channel.
    pub fn cm_config(&self) -> CmConfig {
        CmConfig {
            wait_limit_ns: Some(self.timeout.as_nanos().min(u128::from(u64::MAX)) as u64),
            auto_comp_channels: self.events,
            ..CmConfig::default()
        }
    }
}

// ------------------------------------------------------------------ the private data

/// What the client asks for (the REQ's private data, 56 bytes at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    /// The test.
    pub test: Test,
    /// This is the client's last connection (the server exits after it).
    pub last: bool,
    /// Messages go inline.
    pub use_inline: bool,
    /// The client's pattern seed.
    pub who: u8,
    /// Message size.
    pub size: u64,
    /// Bandwidth queue depth.
    pub tx_depth: u32,
    /// Receives the server keeps posted (`send_bw`).
    pub rx_depth: u32,
    /// Bytes of SRC (= of DST) on each side.
    pub region: u32,
    /// The client's buffer (device address) and rkey.
    pub addr: u64,
    /// The client's rkey.
    pub rkey: u32,
    /// The inline threshold.
    pub inline: u32,
    /// Connections of this run (`-q`), each served on a thread of its own.
    pub qps: u8,
    /// Which of them this is (0-based).
    pub lane: u8,
}

impl Req {
    fn encode(&self) -> [u8; 56] {
        let mut b = [0u8; 56];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = Test::ALL.iter().position(|&t| t == self.test).unwrap_or(0) as u8;
        b[6] = u8::from(self.last) | (u8::from(self.use_inline) << 1);
        b[7] = self.who;
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..20].copy_from_slice(&self.tx_depth.to_le_bytes());
        b[20..24].copy_from_slice(&self.rx_depth.to_le_bytes());
        b[24..28].copy_from_slice(&self.region.to_le_bytes());
        b[28..36].copy_from_slice(&self.addr.to_le_bytes());
        b[36..40].copy_from_slice(&self.rkey.to_le_bytes());
        b[40..44].copy_from_slice(&self.inline.to_le_bytes());
        b[44] = self.qps;
        b[45] = self.lane;
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Req, String> {
        if b.len() < 46 || &b[..4] != MAGIC {
            return Err("the connection request is not from rperf".into());
        }
        if b[4] != VERSION {
            return Err(format!("rperf protocol version {} (want {VERSION})", b[4]));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let test = *Test::ALL
            .get(usize::from(b[5]))
            .ok_or_else(|| format!("unknown test number {}", b[5]))?;
        let r = Req {
            test,
            last: b[6] & 1 != 0,
            use_inline: b[6] & 2 != 0,
            who: b[7],
            size: u64_at(8),
            tx_depth: u32_at(16),
            rx_depth: u32_at(20),
            region: u32_at(24),
            addr: u64_at(28),
            rkey: u32_at(36),
            inline: u32_at(40),
            qps: b[44],
            lane: b[45],
        };
        if r.qps == 0 || u32::from(r.qps) > crate::cli::MAX_QPS || r.lane >= r.qps {
            return Err(format!("QP {} of {} out of range", r.lane, r.qps));
        }
        let size = usize::try_from(r.size).unwrap_or(usize::MAX);
        if size == 0 || size > crate::cli::MAX_SIZE {
            return Err(format!("message size {} out of range", r.size));
        }
        if r.region as usize != region_for(test, size) {
            return Err(format!(
                "buffer of {} bytes for {} B messages (want {})",
                r.region,
                r.size,
                region_for(test, size)
            ));
        }
        if r.tx_depth == 0 || r.tx_depth > crate::cli::MAX_DEPTH || r.rx_depth > 2 * 8192 {
            return Err("queue depth out of range".into());
        }
        if r.inline > 1024 {
            return Err("inline size out of range".into());
        }
        Ok(r)
    }
}

/// The server's answer (the REP's private data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rep {
    who: u8,
    addr: u64,
    rkey: u32,
    region: u32,
}

impl Rep {
    fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = self.who;
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.region.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Rep, String> {
        if b.len() < 24 || &b[..4] != MAGIC || b[4] != VERSION {
            return Err("the server's reply is not rperf's".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Ok(Rep {
            who: b[5],
            addr: u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8])),
            rkey: u32_at(16),
            region: u32_at(20),
        })
    }
}

/// Bytes of SRC (and of DST) for `size`-byte messages of `test`.
pub fn region_for(test: Test, size: usize) -> usize {
    let r = if test.is_lat() {
        size.max(8)
    } else {
        bw::slots(size) * size
    };
    r.max(4096).next_multiple_of(4096)
}

// ------------------------------------------------------------------ one connection

/// Queue sizes of one side's QP.
fn caps(test: Test, server: bool, tx_depth: u32, rx_depth: u32, inline: u32) -> QpCap {
    let (sq, rq) = match (test, server) {
        (Test::SendLat, _) => (lat::LAT_SQ, lat::LAT_RQ),
        (Test::WriteLat, _) => (lat::LAT_SQ, 1),
        (Test::SendBw, true) => (4, rx_depth.max(1)),
        (_, true) => (4, 1),
        (t, false) if t.is_lat() => (lat::LAT_SQ, 1),
        (_, false) => (tx_depth, 1),
    };
    QpCap {
        max_send_wr: sq,
        max_recv_wr: rq,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    }
}

/// One side of a connection: the id (with its QP and CQs), the buffer and the peer's.
pub struct Conn<P: Provider> {
    pub(crate) id: CmId<P>,
    /// The id's data path (posts and polls without the manager's lock).
    dp: DataPath<P>,
    mr: Option<P::Mr>,
    /// `[SRC region | DST region | CTRL]`.
    buf: Buffer,
    /// The connection was established (so [`Conn::close`] disconnects it).
    pub(crate) connected: bool,
    /// Event mode: a poll that finds nothing sleeps until a completion event.
    events: bool,
    /// Completion events taken in event mode.
    waited: std::cell::Cell<u64>,
}

impl<P: Provider> Conn<P> {
    /// Allocates and registers the buffer on the id's PD.
    pub(crate) fn new(id: CmId<P>, region: usize, who: u8, events: bool) -> Result<Self> {
        let mem = id
            .with_verbs(|v| v.provider.alloc_buf(2 * region + CTRL))
            .map_err(cm_err("allocate the buffer"))?
            .map_err(|err| Error::Dma {
                what: "allocate the buffer",
                err,
            })?;
        let mr = id
            .with_verbs(|v| {
                let pd = v.pd.ok_or(verbs::Error::InvalidArgument)?;
                // Every right the device has (an EFA refuses REMOTE_ATOMIC).
                let access = if v.provider.query_device()?.atomic_cap == verbs::AtomicCap::None {
                    ALL_ACCESS.difference(AccessFlags::REMOTE_ATOMIC)
                } else {
                    ALL_ACCESS
                };
                v.provider.reg_mr(pd, mem.clone(), access)
            })
            .map_err(cm_err("reg_mr"))?
            .map_err(|err| Error::Verbs {
                what: "reg_mr",
                err,
            })?;
        let buf = Buffer::new(mem, mr.lkey(), mr.rkey(), region, who);
        let dp = id.data_path().map_err(cm_err("the id's data path"))?;
        Ok(Conn {
            id,
            dp,
            mr: Some(mr),
            buf,
            connected: false,
            events,
            waited: std::cell::Cell::new(0),
        })
    }

    /// Polls the send CQ, then the receive CQ, into `wc`, once.
    fn poll_cqs(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let mut n = self.dp.poll_send_cq(wc).map_err(cm_err("poll_cq"))?;
        if n < wc.len() {
            n += self
                .dp
                .poll_recv_cq(&mut wc[n..])
                .map_err(cm_err("poll_cq"))?;
        }
        Ok(n)
    }

    /// Event mode: arms both CQs (a CQ that holds completions already raises its event at
    /// once) and sleeps until one of their channels has an event or [`EVENT_SLICE`] passed;
    /// then takes every event the channels hold (each re-enables arming its CQ).
    fn wait_event(&self) -> Result<()> {
        let verbs_err = |what| move |err| Error::Verbs { what, err };
        let got = self
            .id
            .with_verbs(|v| -> Result<u64> {
                for cq in [v.send_cq, v.recv_cq].into_iter().flatten() {
                    v.provider
                        .req_notify_cq(cq, false)
                        .map_err(verbs_err("req_notify_cq"))?;
                }
                let mut chs: Vec<&mut P::CompChannel> = [v.send_cq_channel, v.recv_cq_channel]
                    .into_iter()
                    .flatten()
                    .collect();
                if chs.is_empty() {
                    return Err(Error::Check("event mode: the CQs have no channel".into()));
                }
                let slice = EVENT_SLICE.as_nanos() as u64;
                let mut got = match v.provider.wait_cq_events(&mut chs, slice) {
                    Ok(ev) => u64::from(ev.is_some()),
                    Err(verbs::Error::NotSupported) => {
                        return Err(Error::Check(
                            "event mode (-e): this device cannot wait for completion events".into(),
                        ));
                    }
                    Err(e) => return Err(verbs_err("wait for a completion event")(e)),
                };
                for ch in chs.iter_mut() {
                    while v
                        .provider
                        .get_cq_event(ch)
                        .map_err(verbs_err("get_cq_event"))?
                        .is_some()
                    {
                        got += 1;
                    }
                }
                Ok(got)
            })
            .map_err(cm_err("wait for a completion event"))??;
        self.waited.set(self.waited.get() + got);
        Ok(())
    }

    fn ctrl(&self) -> usize {
        2 * self.buf.region
    }

    /// The control write: `len` bytes of CTRL's outgoing half into the peer's CTRL, with
    /// immediate data `imm`, signalled.
    fn ctrl_write(&self, len: usize, imm: u32) -> Request {
        let p = &self.buf.peer;
        let off = self.ctrl() + CTRL_OUT;
        let target = Target::Rdma(p.addr + (2 * p.region + CTRL_IN) as u64, p.rkey);
        Request {
            imm,
            ..Request::new(
                CTRL_WR,
                WrOpcode::RdmaWriteWithImm,
                SendFlags::SIGNALED,
                off,
                len,
            )
            .to(target)
        }
    }

    /// Writes `data` into CTRL's outgoing half and posts the control write of it.
    fn send_ctrl(&mut self, data: &[u8], imm: u32) -> Result<()> {
        self.buf
            .mem
            .write(self.ctrl() + CTRL_OUT, data)
            .map_err(|err| Error::Dma {
                what: "write a control message",
                err,
            })?;
        self.post(&self.ctrl_write(data.len(), imm))
    }

    /// Deregisters the buffer, disconnects (waiting for the peer's side) and destroys the id.
    pub(crate) fn close(mut self) -> Result<()> {
        if self.events {
            eprintln!(
                "rperf: event mode: QP {:#x} slept for {} completion events",
                self.id.qp_num().unwrap_or(0),
                self.waited.get()
            );
        }
        let disc = if self.connected {
            self.id.disconnect()
        } else {
            Ok(())
        };
        let dereg = match self.mr.take() {
            Some(mr) => self.id.dereg_mr(mr),
            None => Ok(()),
        };
        self.id.destroy_ep();
        disc.map_err(cm_err("disconnect"))?;
        dereg.map_err(cm_err("dereg_mr"))
    }
}

impl<P: Provider> Port for Conn<P> {
    // Posts and polls go through the id's data path: only the id's own lock, never the
    // connection manager's, so `-q N` threads do not serialise on it.
    fn post(&mut self, r: &Request) -> Result<()> {
        let mut sg = [Sge::default()];
        let wr = self.buf.wr(r, &mut sg)?;
        self.dp.post_send(&[wr]).map_err(post_err("post_send"))
    }

    fn post_recv(&mut self, wr_id: u64, off: usize, len: usize) -> Result<()> {
        let sge = self.buf.sge(off, len);
        self.dp
            .post_recv(&[recv_wr(wr_id, &sge)])
            .map_err(post_err("post_recv"))
    }

    /// Polls the send CQ, then the receive CQ, into `wc`. In event mode a poll that finds
    /// nothing sleeps until a completion event (at most [`EVENT_SLICE`]) and polls again:
    /// the loops call it only when they wait for a completion.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.poll_cqs(wc)?;
        if n > 0 || !self.events {
            return Ok(n);
        }
        self.wait_event()?;
        self.poll_cqs(wc)
    }

    fn buf(&self) -> &Buffer {
        &self.buf
    }

    fn buf_mut(&mut self) -> &mut Buffer {
        &mut self.buf
    }
}

/// Spins waiting for the peer: a wall-clock limit without progress, and a yield now and then
/// (each process's NIC has a poller thread that needs the CPU too).
pub struct Spin {
    since: Instant,
    n: u32,
    limit: Duration,
    what: &'static str,
}

impl Pace for Net {
    type Wait<'a> = Spin;

    fn wait(&self, what: &'static str) -> Spin {
        Spin {
            since: Instant::now(),
            n: 0,
            limit: self.timeout,
            what,
        }
    }
}

impl Wait for Spin {
    fn progress(&mut self) {
        self.since = Instant::now();
    }

    fn relax(&mut self) -> Result<()> {
        self.n = self.n.wrapping_add(1);
        if self.n.is_multiple_of(16) {
            std::thread::yield_now();
            if self.since.elapsed() > self.limit {
                return Err(Error::Check(format!(
                    "{}: the peer made no progress for {:.0} s",
                    self.what,
                    self.limit.as_secs_f64()
                )));
            }
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ client

/// What one client run at one size produced.
pub enum Outcome {
    /// A latency run.
    Lat(LatRun),
    /// A bandwidth run: one per QP (`-q`), their figures summed.
    Bw(Vec<BwRun>),
}

/// Parameters of one client run.
#[derive(Clone, Copy, Debug)]
pub struct ClientRun {
    /// The test.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// Iterations or duration.
    pub plan: Plan,
    /// Bandwidth knobs (`inline` is the threshold of every test).
    pub cfg: BwConfig,
    /// The last connection of this client.
    pub last: bool,
    /// Connections of this run (`-q`: one per thread).
    pub qps: u32,
    /// Which of them this is.
    pub lane: u32,
}

/// What the banner shows of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Addresses {
    /// Local QPN, rkey, buffer address.
    pub local: (u32, u32, u64),
    /// Remote rkey and buffer address (the QPN is the CM's business).
    pub remote: (u32, u64),
}

/// Connects to `peer`, runs `run`, exchanges verdicts, disconnects.
pub fn client<D: Device>(
    local: &Local<D>,
    net: &Net,
    peer: Ipv4Addr,
    run: ClientRun,
    progress: &mut Progress,
    on_connected: &mut dyn FnMut(&Addresses) -> std::io::Result<()>,
) -> std::result::Result<Outcome, Box<dyn std::error::Error>> {
    let ClientRun {
        test, size, cfg, ..
    } = run;
    let region = region_for(test, size);
    local.can_run(test)?;
    let hints = AddrInfo {
        ai_src_addr: Some(SocketAddr::from((local.ip, 0))),
        ai_qp_type: net.srd.then_some(QpType::Srd),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&peer.to_string()),
        Some(&net.port.to_string()),
        Some(&hints),
    )
    .map_err(|e| Error::Check(format!("getaddrinfo {peer}: {e:?}")))?;
    let mut attr = QpInitAttr {
        cap: caps(test, false, cfg.tx_depth, cfg.rx_depth, cfg.inline),
        qp_type: if net.srd { QpType::Srd } else { QpType::Rc },
        ..QpInitAttr::default()
    };
    let id = local
        .cm
        .create_ep(&res, None, Some(&mut attr))
        .map_err(cm_err("create_ep (resolve the server's address and route)"))?;
    let mut c = Conn::new(id, region, lane_seed(local.ip, run.lane), net.events)?;
    let use_inline = test.inline_at(cfg.inline, size);
    let req = Req {
        test,
        last: run.last,
        use_inline,
        who: c.buf.who,
        size: size as u64,
        tx_depth: cfg.tx_depth,
        rx_depth: cfg.rx_depth,
        region: region as u32,
        addr: c.buf.mem.addr(),
        rkey: c.buf.rkey,
        inline: cfg.inline,
        qps: run.qps as u8,
        lane: run.lane as u8,
    }
    .encode();
    let r = (|| -> std::result::Result<Outcome, Box<dyn std::error::Error>> {
        // The receive for the server's verdict (send_lat's ring, which the loop posts, takes
        // it there).
        if test != Test::SendLat {
            c.post_recv(CTRL_WR, c.ctrl(), 8)?;
        }
        let param = ConnParam {
            private_data: &req,
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        if let Err(e) = c.id.connect(Some(&param)) {
            let why = match c.id.event().map(|ev| ev.param) {
                Some(p) if p.private_data().starts_with(MAGIC) => {
                    let t = &p.private_data()[4..];
                    let end = t.iter().position(|&b| b == 0).unwrap_or(t.len());
                    format!(": the server says: {}", String::from_utf8_lossy(&t[..end]))
                }
                _ => String::new(),
            };
            return Err(format!(
                "connect to {peer}:{} (is `rperf --server` running there?): {e:?} (errno {}){why}",
                net.port,
                e.errno()
            )
            .into());
        }
        c.connected = true;
        let rep = match c.id.event().map(|ev| ev.param) {
            Some(p @ (EventParam::Conn(_) | EventParam::Ud(_))) => Rep::decode(p.private_data())?,
            _ => return Err("the server's reply carries no private data".into()),
        };
        if rep.region as usize != region {
            return Err(
                format!("the server's buffer is {} bytes, want {region}", rep.region).into(),
            );
        }
        c.buf.peer = PeerBuf {
            addr: rep.addr,
            rkey: rep.rkey,
            region,
            who: rep.who,
        };
        on_connected(&Addresses {
            local: (c.id.qp_num().unwrap_or(0), c.buf.rkey, c.buf.mem.addr()),
            remote: (rep.rkey, rep.addr),
        })?;
        let mut far = Far {
            net,
            src_last: c.peer_pattern(size, 0)[size - 1],
        };
        let plan = run.plan;
        Ok(if test.is_lat() {
            let r = lat::measure(
                &mut c, &mut far, net, test, size, plan, use_inline, progress,
            )?;
            Outcome::Lat(r)
        } else {
            Outcome::Bw(vec![bw::measure(
                &mut c, &mut far, net, test, size, plan, cfg, progress,
            )?])
        })
    })();
    let closed = c.close();
    let out = r?;
    closed?;
    Ok(out)
}

/// The server process as the client's loops see it: it answers by itself; the count and the
/// verdicts cross at the end.
struct Far<'a> {
    net: &'a Net,
    /// The last byte of the server's SRC slot 0 (which READs fetch; the server leaves it).
    src_last: u8,
}

impl<P: Provider> Peer<Conn<P>> for Far<'_> {
    fn answer(&mut self) -> Result<()> {
        Ok(())
    }

    fn before_read(&mut self, c: &mut Conn<P>, size: usize, _st: u8) -> Result<u8> {
        // Spoil the last byte: only this READ can put it back.
        let at = c.dst_off(0, size) + size - 1;
        c.buf
            .mem
            .write_u8(at, !self.src_last)
            .map_err(|err| Error::Dma {
                what: "reset the target",
                err,
            })?;
        Ok(self.src_last)
    }

    fn serve(&mut self, _limit: u64) -> Result<bool> {
        Ok(false)
    }

    fn received(&self, _limit: u64) -> bool {
        true
    }

    fn finish(&mut self, c: &mut Conn<P>, count: u64) -> Result<Verdict> {
        Ok(finish_client(c, count, self.net)?.map_err(|e| format!("server: {e}")))
    }
}

/// The client's end of run: the count to the server (`DONE`), its verdict back (`VRFY`).
fn finish_client<P: Provider>(c: &mut Conn<P>, count: u64, net: &Net) -> Result<Verdict> {
    c.send_ctrl(&count.to_le_bytes(), IMM_DONE)?;
    let mut wc = [WorkCompletion::default(); 16];
    let (mut verdict, mut sent) = (None, false);
    let mut w = net.wait("the server's verdict");
    while verdict.is_none() || !sent {
        let n = c.poll(&mut wc)?;
        for x in &wc[..n] {
            match x.opcode {
                WcOpcode::RecvRdmaWithImm => {
                    check_ok(x, "the server's verdict")?;
                    if u32::from_be(x.imm_data) != IMM_VRFY {
                        return Err(Error::Completion {
                            what: "the server's verdict",
                            wc: *x,
                        });
                    }
                    verdict = Some(decode_verdict(&c.read(c.ctrl() + CTRL_IN, 64)?));
                }
                // send_lat's receive ring: nothing more arrives on it
                WcOpcode::Recv => {
                    return Err(Error::Completion {
                        what: "a receive after the last iteration",
                        wc: *x,
                    });
                }
                _ => {
                    check_ok(x, "send")?;
                    sent = true;
                }
            }
        }
        if n == 0 {
            w.relax()?;
        }
    }
    Ok(verdict.unwrap_or(Ok(())))
}

fn encode_verdict(v: &std::result::Result<(), String>) -> [u8; 64] {
    let mut b = [0u8; 64];
    if let Err(e) = v {
        b[0] = 1;
        let m = e.as_bytes();
        let n = m.len().min(62);
        b[1] = n as u8;
        b[2..2 + n].copy_from_slice(&m[..n]);
    }
    b
}

fn decode_verdict(b: &[u8]) -> std::result::Result<(), String> {
    match b.first() {
        Some(0) => Ok(()),
        _ => {
            let n = usize::from(b.get(1).copied().unwrap_or(0)).min(b.len().saturating_sub(2));
            Err(String::from_utf8_lossy(&b[2..2 + n]).into_owned())
        }
    }
}

// ------------------------------------------------------------------ server

/// What the server saw of one connection.
#[derive(Debug)]
pub struct Served {
    /// The request.
    pub req: Req,
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// Iterations the client reported.
    pub count: u64,
    /// The server's checks.
    pub verified: std::result::Result<(), String>,
}

/// A listening endpoint on this process's NIC.
pub fn listen<D: Device>(local: &Local<D>, net: &Net) -> Result<CmId<D>> {
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ai_qp_type: net.srd.then_some(QpType::Srd),
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

fn reject_with<P: Provider>(id: &CmId<P>, why: &str) {
    let mut b = Vec::from(&MAGIC[..]);
    // Within a SIDR REP's 136 bytes of private data (SRD) as well as a REJ's 148.
    b.extend_from_slice(&why.as_bytes()[..why.len().min(128)]);
    let _ = id.reject(&b);
}

/// The pattern seed of this NIC's end of connection `lane`: differs per NIC and per lane.
fn lane_seed(ip: Ipv4Addr, lane: u32) -> u8 {
    ip.octets()[3].wrapping_add((lane as u8).wrapping_mul(16))
}

/// The next connection request on `listener`, checked: its id and what it asks for.
fn next_request<D: Device>(
    listener: &CmId<D>,
    only: Option<Test>,
) -> std::result::Result<(CmId<D>, Req), Box<dyn std::error::Error>> {
    let id = listener
        .get_request()
        .map_err(cm_err("get_request (waiting for a client)"))?;
    let peer = id.dst_addr();
    let pd = id
        .event()
        .map(|e| e.param.private_data().to_vec())
        .unwrap_or_default();
    let req = match Req::decode(&pd) {
        Ok(r) => r,
        Err(e) => {
            reject_with(&id, &e);
            return Err(format!("a connection request from {peer:?}: {e}").into());
        }
    };
    if let Some(t) = only
        && t != req.test
    {
        let why = format!("this server runs {}, not {}", t.name(), req.test.name());
        reject_with(&id, &why);
        return Err(why.into());
    }
    Ok((id, req))
}

/// Serves the connections of one client run on `listener` (its `-q` connections, each on a
/// thread of its own): what they ask for, the iterations they counted (summed) and the
/// first failed check.
pub fn serve_group<D: Device>(
    local: &Local<D>,
    listener: &CmId<D>,
    only: Option<Test>,
    net: &Net,
) -> std::result::Result<Served, Box<dyn std::error::Error>> {
    let (id, first) = next_request(listener, only)?;
    let n = first.qps;
    let results: Vec<std::result::Result<Served, String>> = std::thread::scope(|sc| {
        let serve = |id: CmId<D>, req: Req| {
            sc.spawn(move || serve_conn(local, id, req, net).map_err(|e| e.to_string()))
        };
        let mut hs = vec![serve(id, first)];
        let mut err = None;
        for _ in 1..n {
            match next_request(listener, only) {
                Ok((id, r)) => {
                    let same =
                        (r.test, r.size, r.qps, r.last) == (first.test, first.size, n, first.last);
                    if !same {
                        reject_with(&id, "not a connection of the run being served");
                        id.destroy_ep();
                        err = Some(format!(
                            "a connection request that is not of the run being served: {r:?}"
                        ));
                        break;
                    }
                    hs.push(serve(id, r));
                }
                Err(e) => {
                    err = Some(e.to_string());
                    break;
                }
            }
        }
        let mut out: Vec<_> = hs
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a connection's thread panicked".into()))
            })
            .collect();
        if let Some(e) = err {
            out.push(Err(e));
        }
        out
    });
    let mut served: Option<Served> = None;
    let mut lanes = Vec::new();
    for r in results {
        let s = r?;
        lanes.push(s.req.lane);
        match &mut served {
            None => served = Some(s),
            Some(all) => {
                all.count += s.count;
                if all.verified.is_ok() {
                    all.verified = s.verified.map_err(|e| format!("QP {}: {e}", s.req.lane));
                }
            }
        }
    }
    lanes.sort_unstable();
    if lanes != (0..n).collect::<Vec<u8>>() {
        return Err(format!("the run's connections were QPs {lanes:?} of {n}").into());
    }
    served.ok_or_else(|| "no connection".into())
}

/// Serves connection `id`, which asks for `req`: the client's test, then its verdict.
fn serve_conn<D: Device>(
    local: &Local<D>,
    id: CmId<D>,
    req: Req,
    net: &Net,
) -> std::result::Result<Served, Box<dyn std::error::Error>> {
    let peer = id.dst_addr();
    let size = req.size as usize;
    let region = req.region as usize;
    if req.test == Test::AtomicLat && !local.atomics {
        let why = no_atomics(&local.label);
        reject_with(&id, "the server's device has no atomics");
        return Err(why.into());
    }
    // The id's type: SRD on an EFA (the listener's), else RC.
    let mut attr = QpInitAttr {
        cap: caps(req.test, true, req.tx_depth, req.rx_depth, req.inline),
        qp_type: id.qp_type(),
        ..QpInitAttr::default()
    };
    if let Err(e) = id.create_qp(None, &mut attr) {
        reject_with(&id, "the server cannot create a QP of this size");
        return Err(cm_err("create_qp")(e).into());
    }
    // write_lat's pings show in memory, not in a CQ: its responder polls even with -e.
    // Several QPs share the connection manager, which lends a connection's channels under
    // its lock: they poll too.
    let events = net.events && req.test != Test::WriteLat && req.qps <= 1;
    let mut s = Conn::new(id, region, lane_seed(local.ip, u32::from(req.lane)), events)?;
    s.buf.peer = PeerBuf {
        addr: req.addr,
        rkey: req.rkey,
        region,
        who: req.who,
    };
    let r = (|| -> std::result::Result<Served, Box<dyn std::error::Error>> {
        let mut resp = Responder::new(
            &mut s,
            req.test,
            size,
            req.use_inline,
            req.rx_depth,
            u64::MAX,
        )?;
        // SRD delivers SENDs in any order.
        resp.unordered = s.id.qp_type() == QpType::Srd;
        // The responder's receive ring takes the client's DONE, else it gets one of its own.
        if !resp.has_ring() {
            s.post_recv(CTRL_WR, s.ctrl(), 8)?;
        }
        let rep = Rep {
            who: s.buf.who,
            addr: s.buf.mem.addr(),
            rkey: s.buf.rkey,
            region: region as u32,
        }
        .encode();
        s.id.accept(Some(&ConnParam {
            private_data: &rep,
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }))
        .map_err(cm_err("accept"))?;
        s.connected = true;
        let (count, verified) = server_loop(&mut s, &mut resp, net)?;
        // The verdict back to the client.
        s.send_ctrl(&encode_verdict(&verified), IMM_VRFY)?;
        resp.q.outstanding += 1;
        // The client disconnects once it has the verdict, perhaps before this end reaped the
        // verdict's completion: the receives that flushes are the ring's unused rest.
        resp.q.closing = true;
        resp.drain(&mut s, net)?;
        Ok(Served {
            req,
            peer,
            count,
            verified,
        })
    })();
    let closed = s.close();
    let served = r?;
    closed?;
    Ok(served)
}

/// Answers (send_lat, write_lat) or keeps receives posted (send_bw) until the client's DONE;
/// returns the count it carries and the responder's verdict.
fn server_loop<P: Provider>(
    s: &mut Conn<P>,
    resp: &mut Responder,
    net: &Net,
) -> Result<(u64, Verdict)> {
    let mut w = net.wait("the client's next message");
    loop {
        let moved = resp.step(s, net)?;
        if let Some(imm) = resp.q.imm.take() {
            if imm != IMM_DONE {
                return Err(Error::Check(format!(
                    "a control message with immediate data {imm:#x}, want DONE"
                )));
            }
            let c = s.read(s.ctrl() + CTRL_IN, 8)?;
            let count = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            return Ok((count, resp.finish(s, net, count)?));
        }
        if moved {
            w.progress();
        } else {
            w.relax()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_round_trips_and_is_checked() {
        let r = Req {
            test: Test::WriteBw,
            last: true,
            use_inline: false,
            who: 7,
            size: 65536,
            tx_depth: 128,
            rx_depth: 512,
            region: region_for(Test::WriteBw, 65536) as u32,
            addr: 0x1234_5678_9abc,
            rkey: 0xdead_beef,
            inline: 0,
            qps: 2,
            lane: 1,
        };
        let b = r.encode();
        assert_eq!(Req::decode(&b), Ok(r));
        let mut bad = b;
        bad[0] = b'X';
        assert!(Req::decode(&bad).is_err());
        let mut bad = b;
        bad[24] ^= 1; // region
        assert!(Req::decode(&bad).unwrap_err().contains("buffer"));
        let mut bad = b;
        bad[45] = 2; // lane 2 of 2
        assert!(Req::decode(&bad).unwrap_err().contains("QP 2 of 2"));
        let mut bad = b;
        bad[5] = 99;
        assert!(Req::decode(&bad).is_err());
        let p = Rep {
            who: 3,
            addr: 42,
            rkey: 9,
            region: 4096,
        };
        assert_eq!(Rep::decode(&p.encode()), Ok(p));
        assert_eq!(decode_verdict(&encode_verdict(&Ok(()))), Ok(()));
        assert_eq!(
            decode_verdict(&encode_verdict(&Err("slot 3 differs".into()))),
            Err("slot 3 differs".into())
        );
        assert_eq!(mac_for(Ipv4Addr::new(127, 0, 7, 2)), [2, 0, 127, 0, 7, 2]);
    }
}
