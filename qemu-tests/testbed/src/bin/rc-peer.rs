//! One end of an RC connection between two processes, over the UDP fabric, through the mlx5
//! driver and its verbs provider.
//!
//! ```text
//! rc-peer <server|client> [--ip A.B.C.D] [--udp-port P] [--iters N] [--max-len BYTES]
//!         [--timeout-s S]
//! ```
//!
//! Brings up an emulated NIC ([`UdpNic`]) on `ip:udp-port` (127.0.0.0/8 only), creates an RC
//! QP and a memory region, and talks to its peer through lines on stdin/stdout (whoever starts
//! the two processes relays each one's stdout to the other's stdin):
//!
//! ```text
//! HELLO qpn=.. psn=.. gid=.. mac=.. rkey=.. waddr=.. raddr=.. slot=.. iters=.. max_len=..
//! READY                      (QP in RTS, receives posted)
//! DONE                       (all exchanges done, every send completed)
//! RESULT ok role=.. iters=.. ...   or   RESULT fail <why>     (for the parent; not relayed)
//! ```
//!
//! Then the two take turns, client first, `iters` times each. A turn is: an RDMA WRITE into
//! the peer's write area (slot `i`), an RDMA READ of the peer's read area (slot `i`, checked
//! against the peer's pattern), then a SEND with immediate `i`. The receiving side checks the
//! message, the immediate, and that the WRITE placed before the SEND is in its memory (RC
//! ordering), then takes its own turn. Lengths vary per exchange (1 byte to `max-len`,
//! crossing MTU boundaries); every byte is a function of (who, what, `i`, offset).
//!
//! After DONE both tear everything down and check that the device holds no live objects, no
//! DMA buffer is left and the device recorded no error. Exit status 0 only if all of that
//! held; diagnostics go to stderr.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mlx5::{Ah, Cq, Mr, Pd, Qp};
use nic_emulator::Profile;
use nic_hal::Platform;
use nic_testbed::udp::{UdpDevice, UdpNic};
use verbs::rc::RcParams;
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Mtu, Provider, QpCap, QpInitAttr, QpType,
    QueuePair, RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Receive buffers kept posted (the peer has at most one SEND in flight).
const RECV_DEPTH: usize = 4;

type Res<T> = Result<T, String>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Server,
    Client,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
    fn peer(self) -> Role {
        match self {
            Role::Server => Role::Client,
            Role::Client => Role::Server,
        }
    }
}

struct Args {
    role: Role,
    ip: Ipv4Addr,
    udp_port: u16,
    iters: usize,
    max_len: usize,
    timeout: Duration,
}

fn parse_args() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let role = match it.next().as_deref() {
        Some("server") => Role::Server,
        Some("client") => Role::Client,
        other => {
            return Err(format!(
                "first argument must be server or client, not {other:?}"
            ));
        }
    };
    let mut a = Args {
        role,
        ip: match role {
            Role::Server => Ipv4Addr::new(127, 0, 0, 20),
            Role::Client => Ipv4Addr::new(127, 0, 0, 21),
        },
        udp_port: 47_910,
        iters: 32,
        max_len: 8192,
        timeout: Duration::from_secs(20),
    };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--ip" => a.ip = v.parse().map_err(|e| bad(&e))?,
            "--udp-port" => a.udp_port = v.parse().map_err(|e| bad(&e))?,
            "--iters" => a.iters = v.parse().map_err(|e| bad(&e))?,
            "--max-len" => a.max_len = v.parse().map_err(|e| bad(&e))?,
            "--timeout-s" => a.timeout = Duration::from_secs(v.parse().map_err(|e| bad(&e))?),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if !(1..=1024).contains(&a.iters) || !(1..=65536).contains(&a.max_len) {
        return Err("--iters must be 1..=1024 and --max-len 1..=65536".into());
    }
    Ok(a)
}

/// What a byte stream is for: the pattern of each differs.
#[derive(Clone, Copy)]
enum Kind {
    Write = 1,
    Read = 2,
    Send = 3,
}

/// The bytes `who` produces for `kind` in exchange `i`.
fn pattern(who: Role, kind: Kind, i: usize, len: usize) -> Vec<u8> {
    let seed = (who as u32) << 24 | (kind as u32) << 16 | i as u32;
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..len)
        .map(|_| {
            // xorshift32: offsets and exchanges are told apart by every byte.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// The length of `kind` in exchange `i`: the first exchanges hit the edges (1 byte, one MTU,
/// one MTU + 1, the maximum), the rest are spread over 1..=max.
fn msg_len(kind: Kind, i: usize, max: usize) -> usize {
    let edges = [1, 1024, 1025, max];
    let k = i + kind as usize;
    if i < edges.len() {
        return edges[k % edges.len()].min(max);
    }
    let h = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    1 + (h as usize) % max
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Res<[u8; N]> {
    let mut out = [0u8; N];
    if s.len() != 2 * N {
        return Err(format!("{s:?}: want {N} hex bytes"));
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| format!("{s:?}: {e}"))?;
    }
    Ok(out)
}

/// The peer's side of the handshake.
struct Hello {
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
    rkey: u32,
    waddr: u64,
    raddr: u64,
    slot: usize,
    iters: usize,
    max_len: usize,
}

impl Hello {
    fn line(&self) -> String {
        format!(
            "HELLO qpn={:#x} psn={:#x} gid={} mac={} rkey={:#x} waddr={:#x} raddr={:#x} slot={} iters={} max_len={}",
            self.qpn,
            self.psn,
            hex(&self.gid),
            hex(&self.mac),
            self.rkey,
            self.waddr,
            self.raddr,
            self.slot,
            self.iters,
            self.max_len
        )
    }

    fn parse(line: &str) -> Res<Hello> {
        let kv: HashMap<&str, &str> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.split_once('='))
            .collect();
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("HELLO without {k}"))
        };
        let num = |k: &str| -> Res<u64> {
            let v = get(k)?;
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|e| format!("HELLO {k}={v}: {e}"))
        };
        let small = |k: &str| -> Res<u32> {
            u32::try_from(num(k)?).map_err(|_| format!("HELLO {k} out of range"))
        };
        Ok(Hello {
            qpn: small("qpn")?,
            psn: small("psn")?,
            gid: unhex(get("gid")?)?,
            mac: unhex(get("mac")?)?,
            rkey: small("rkey")?,
            waddr: num("waddr")?,
            raddr: num("raddr")?,
            slot: num("slot")? as usize,
            iters: num("iters")? as usize,
            max_len: num("max_len")? as usize,
        })
    }
}

/// The stdin/stdout line channel to the peer.
struct Pipe {
    lines: std::io::Lines<std::io::StdinLock<'static>>,
}

impl Pipe {
    fn say(&self, line: &str) -> Res<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))
    }

    /// The next line starting with `word` (other lines are skipped).
    fn expect(&mut self, word: &str) -> Res<String> {
        loop {
            let line = self
                .lines
                .next()
                .ok_or_else(|| format!("peer closed the pipe before {word}"))?
                .map_err(|e| format!("stdin: {e}"))?;
            if line.split_whitespace().next() == Some(word) {
                return Ok(line);
            }
            if line.starts_with("RESULT fail") {
                return Err(format!("peer failed: {line}"));
            }
        }
    }
}

/// Where things are in the one registered buffer, in slots of `slot` bytes.
struct Layout {
    slot: usize,
    iters: usize,
    /// Longest message (both ends agree on it in the handshake).
    max_len: usize,
}

impl Layout {
    /// The peer writes exchange `i` here.
    fn write_area(&self, i: usize) -> usize {
        i * self.slot
    }
    /// The peer reads exchange `i` from here.
    fn read_area(&self, i: usize) -> usize {
        (self.iters + i) * self.slot
    }
    fn recv_buf(&self, k: usize) -> usize {
        (2 * self.iters + k) * self.slot
    }
    fn send_src(&self) -> usize {
        (2 * self.iters + RECV_DEPTH) * self.slot
    }
    fn write_src(&self) -> usize {
        self.send_src() + self.slot
    }
    fn read_dst(&self) -> usize {
        self.send_src() + 2 * self.slot
    }
    fn total(&self) -> usize {
        self.send_src() + 3 * self.slot
    }
}

/// The driver and its objects.
struct Node {
    dev: UdpDevice,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mem: Buffer,
    mr: Mr,
    lay: Layout,
    /// Completions polled but not consumed yet.
    sends: VecDeque<WorkCompletion>,
    recvs: VecDeque<WorkCompletion>,
    timeout: Duration,
}

fn verr(what: &str) -> impl Fn(verbs::Error) -> String + '_ {
    move |e| format!("{what}: {e} ({e:?})")
}

impl Node {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.addr() + off as u64,
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }

    fn read(&self, off: usize, len: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.mem
            .read(off, &mut v)
            .map_err(|e| format!("read {off:#x}+{len}: {e:?}"))?;
        Ok(v)
    }

    fn write(&self, off: usize, data: &[u8]) -> Res<()> {
        self.mem
            .write(off, data)
            .map_err(|e| format!("write {off:#x}+{}: {e:?}", data.len()))
    }

    fn post_recv(&mut self, k: usize) -> Res<()> {
        let sg = [self.sge(self.lay.recv_buf(k), self.lay.slot)];
        Provider::post_recv(
            &self.dev,
            &mut self.qp,
            &[RecvWr {
                wr_id: k as u64,
                sg_list: &sg,
            }],
        )
        .map_err(|e| format!("post_recv: {e:?}"))
    }

    fn post_send(&mut self, wrs: &[SendWr<'_, Ah>]) -> Res<()> {
        Provider::post_send(&self.dev, &mut self.qp, wrs).map_err(|e| format!("post_send: {e:?}"))
    }

    /// Polls the CQ once into the send and receive queues; whether anything came.
    fn poll(&mut self) -> Res<bool> {
        let mut wc = [WorkCompletion::default(); 8];
        let n = Provider::poll_cq(&self.dev, &self.cq, &mut wc).map_err(verr("poll_cq"))?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!("error completion: {w:?}"));
            }
            if w.opcode == WcOpcode::Recv {
                self.recvs.push_back(*w);
            } else {
                self.sends.push_back(*w);
            }
        }
        Ok(n > 0)
    }

    /// Waits until `ready` holds, polling the CQ; spins briefly, then sleeps between polls so
    /// that the device poller threads (ours and the peer's) get the CPU.
    fn wait(&mut self, what: &str, ready: impl Fn(&Node) -> bool) -> Res<()> {
        let start = Instant::now();
        let mut idle = 0u32;
        while !ready(self) {
            if self.poll()? {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < 256 {
                self.dev.platform().relax();
            } else {
                if start.elapsed() > self.timeout {
                    return Err(format!("timed out waiting for {what}"));
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    }

    /// The next send completion, which must be `wr_id` with `opcode`.
    fn send_done(&mut self, wr_id: u64, opcode: WcOpcode, byte_len: Option<usize>) -> Res<()> {
        self.wait("a send completion", |n| !n.sends.is_empty())?;
        let w = self.sends.pop_front().ok_or("no send completion")?;
        if w.wr_id != wr_id || w.opcode != opcode || w.qp_num != self.qp.qpn() {
            return Err(format!("want {opcode:?} wr_id {wr_id}, got {w:?}"));
        }
        if let Some(len) = byte_len
            && w.byte_len as usize != len
        {
            return Err(format!("{opcode:?} byte_len {} != {len}", w.byte_len));
        }
        Ok(())
    }

    /// Our turn in exchange `i`: WRITE, READ (checked), SEND with immediate `i`.
    fn active(&mut self, me: Role, peer: &Hello, i: usize) -> Res<u64> {
        let max = self.lay.max_len;
        let (lw, lr, ls) = (
            msg_len(Kind::Write, i, max),
            msg_len(Kind::Read, i, max),
            msg_len(Kind::Send, i, max),
        );
        let lay = &self.lay;
        let (wsrc, rdst, ssrc) = (lay.write_src(), lay.read_dst(), lay.send_src());
        self.write(wsrc, &pattern(me, Kind::Write, i, lw))?;
        self.write(rdst, &vec![0u8; lr])?;
        let wsg = [self.sge(wsrc, lw)];
        let rsg = [self.sge(rdst, lr)];
        let rkey = peer.rkey;
        let base = 3 * i as u64;
        self.post_send(&[
            SendWr {
                wr_id: base,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &wsg,
                flags: SendFlags::SIGNALED,
                remote: RemoteOp::Rdma {
                    remote_addr: peer.waddr + (i * peer.slot) as u64,
                    rkey,
                },
                ..SendWr::default()
            },
            SendWr {
                wr_id: base + 1,
                opcode: WrOpcode::RdmaRead,
                sg_list: &rsg,
                flags: SendFlags::SIGNALED,
                remote: RemoteOp::Rdma {
                    remote_addr: peer.raddr + (i * peer.slot) as u64,
                    rkey,
                },
                ..SendWr::default()
            },
        ])?;
        self.send_done(base, WcOpcode::RdmaWrite, None)?;
        self.send_done(base + 1, WcOpcode::RdmaRead, Some(lr))?;
        if self.read(rdst, lr)? != pattern(me.peer(), Kind::Read, i, lr) {
            return Err(format!(
                "exchange {i}: RDMA READ of {lr} bytes brought wrong data"
            ));
        }

        self.write(ssrc, &pattern(me, Kind::Send, i, ls))?;
        let ssg = [self.sge(ssrc, ls)];
        self.post_send(&[SendWr {
            wr_id: base + 2,
            opcode: WrOpcode::SendWithImm,
            sg_list: &ssg,
            flags: SendFlags::SIGNALED,
            imm_data: (i as u32).to_be(),
            ..SendWr::default()
        }])?;
        self.send_done(base + 2, WcOpcode::Send, None)?;
        Ok((lw + lr + ls) as u64)
    }

    /// The peer's turn in exchange `i`: its SEND arrives; check it and the WRITE before it.
    fn passive(&mut self, me: Role, i: usize, next_recv: &mut usize) -> Res<u64> {
        let max = self.lay.max_len;
        let (lw, ls) = (msg_len(Kind::Write, i, max), msg_len(Kind::Send, i, max));
        self.wait("the peer's SEND", |n| !n.recvs.is_empty())?;
        let w = self.recvs.pop_front().ok_or("no receive completion")?;
        let k = *next_recv % RECV_DEPTH;
        if w.wr_id != k as u64 || w.byte_len as usize != ls || w.qp_num != self.qp.qpn() {
            return Err(format!(
                "exchange {i}: want receive {k} of {ls} bytes, got {w:?}"
            ));
        }
        if !w.wc_flags.contains(WcFlags::WITH_IMM) || u32::from_be(w.imm_data) != i as u32 {
            return Err(format!("exchange {i}: bad immediate in {w:?}"));
        }
        let them = me.peer();
        if self.read(self.lay.recv_buf(k), ls)? != pattern(them, Kind::Send, i, ls) {
            return Err(format!("exchange {i}: SEND of {ls} bytes arrived wrong"));
        }
        // RC: the WRITE was executed before the SEND that followed it.
        if self.read(self.lay.write_area(i), lw)? != pattern(them, Kind::Write, i, lw) {
            return Err(format!(
                "exchange {i}: RDMA WRITE of {lw} bytes landed wrong"
            ));
        }
        self.post_recv(k)?;
        *next_recv += 1;
        Ok((lw + ls) as u64)
    }
}

fn setup(nic: &UdpNic, args: &Args) -> Res<Node> {
    let dev = nic
        .probe(mlx5::Config::default())
        .map_err(|e| format!("probe: {e:?}"))?;
    let gid = Gid::from_ipv4(nic.ip().octets());
    let mac = dev.mac().map_err(|e| format!("mac: {e:?}"))?;
    dev.set_roce_gid(0, gid.0, mac)
        .map_err(|e| format!("set_roce_gid: {e:?}"))?;
    let pd = Provider::alloc_pd(&dev).map_err(verr("alloc_pd"))?;
    let cq = Provider::create_cq(&dev, 63, 0, None).map_err(verr("create_cq"))?;
    let lay = Layout {
        slot: args.max_len.next_multiple_of(64),
        iters: args.iters,
        max_len: args.max_len,
    };
    let mem = Provider::alloc_buf(&dev, lay.total()).map_err(verr("alloc_buf"))?;
    let mr = dev
        .reg_mr(
            &pd,
            mem.clone(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .map_err(verr("reg_mr"))?;
    let (qp, _) = Provider::create_qp(
        &dev,
        &pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: RECV_DEPTH as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )
    .map_err(verr("create_qp"))?;
    Ok(Node {
        dev,
        pd,
        cq,
        qp,
        mem,
        mr,
        lay,
        sends: VecDeque::new(),
        recvs: VecDeque::new(),
        timeout: args.timeout,
    })
}

/// RESET -> INIT -> RTR -> RTS towards the peer.
fn connect(n: &mut Node, my_psn: u32, peer: &Hello) -> Res<()> {
    let p = RcParams {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ah_attr: AhAttr {
            dgid: Gid(peer.gid),
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: peer.mac,
            ..AhAttr::default()
        },
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: peer.qpn,
        rq_psn: peer.psn,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        sq_psn: my_psn,
        max_rd_atomic: 4,
        ..RcParams::default()
    };
    verbs::rc::connect(&n.dev, &mut n.qp, &p).map_err(|e| {
        let reached = QueuePair::state(&n.qp);
        format!("bringing the QP up (stopped in {reached:?}): {e} ({e:?})")
    })
}

fn run(args: &Args, pipe: &mut Pipe) -> Res<String> {
    let ip = args.ip.octets();
    let profile = Profile {
        mac: [0x02, 0x00, ip[0], ip[1], ip[2], ip[3]],
        ..Profile::default()
    };
    let nic = UdpNic::new(args.ip, args.udp_port, profile)
        .map_err(|e| format!("UDP fabric port {}:{}: {e}", args.ip, args.udp_port))?;
    let mut n = setup(&nic, args)?;
    let me = args.role;
    for i in 0..args.iters {
        n.write(n.lay.read_area(i), &pattern(me, Kind::Read, i, n.lay.slot))?;
    }
    let my_psn = u32::from(args.ip) & 0xFF_FFFF;
    let mine = Hello {
        qpn: n.qp.qpn(),
        psn: my_psn,
        gid: Gid::from_ipv4(ip).0,
        mac: n.dev.mac().map_err(|e| format!("mac: {e:?}"))?,
        rkey: n.mr.rkey(),
        waddr: n.mem.addr() + n.lay.write_area(0) as u64,
        raddr: n.mem.addr() + n.lay.read_area(0) as u64,
        slot: n.lay.slot,
        iters: args.iters,
        max_len: args.max_len,
    };
    pipe.say(&mine.line())?;
    let peer = Hello::parse(&pipe.expect("HELLO")?)?;
    if (peer.iters, peer.max_len) != (args.iters, args.max_len) {
        return Err(format!(
            "peer runs {} exchanges of up to {} bytes, we run {} of up to {}",
            peer.iters, peer.max_len, args.iters, args.max_len
        ));
    }
    connect(&mut n, my_psn, &peer)?;
    for k in 0..RECV_DEPTH {
        n.post_recv(k)?;
    }
    pipe.say("READY")?;
    pipe.expect("READY")?;

    let t0 = Instant::now();
    let (mut next_recv, mut bytes) = (0usize, 0u64);
    for i in 0..args.iters {
        if me == Role::Client {
            bytes += n.active(me, &peer, i)?;
            bytes += n.passive(me, i, &mut next_recv)?;
        } else {
            bytes += n.passive(me, i, &mut next_recv)?;
            bytes += n.active(me, &peer, i)?;
        }
    }
    let elapsed = t0.elapsed();
    if !n.sends.is_empty() || !n.recvs.is_empty() {
        return Err(format!(
            "unexpected completions: {:?} {:?}",
            n.sends, n.recvs
        ));
    }
    pipe.say("DONE")?;
    // The peer's last ACKs and READ responses are ours to send until it is done too.
    pipe.expect("DONE")?;

    let stats = nic.device().port_stats();
    let Node {
        dev,
        pd,
        cq,
        qp,
        mem,
        mr,
        ..
    } = n;
    let derr = |what: &'static str| move |e: verbs::Error| format!("{what}: {e} ({e:?})");
    Provider::destroy_qp(&dev, qp).map_err(|e| derr("destroy_qp")(e.error))?;
    Provider::dereg_mr(&dev, mr).map_err(|e| derr("dereg_mr")(e.error))?;
    Provider::destroy_cq(&dev, cq).map_err(|e| derr("destroy_cq")(e.error))?;
    Provider::dealloc_pd(&dev, pd).map_err(|e| derr("dealloc_pd")(e.error))?;
    drop(mem);
    dev.shutdown().map_err(|e| format!("shutdown: {e:?}"))?;
    let live = nic.live();
    if live != nic_emulator::Live::default() {
        return Err(format!("device objects left after teardown: {live:?}"));
    }
    if nic.dma.live_buffers() != 0 {
        return Err(format!(
            "{} DMA buffers left after teardown",
            nic.dma.live_buffers()
        ));
    }
    let errors = nic.device().errors().to_vec();
    if !errors.is_empty() {
        return Err(format!("device errors: {errors:?}"));
    }
    Ok(format!(
        "RESULT ok role={} iters={} verified_bytes={bytes} elapsed_ms={:.1} tx_frames={} rx_frames={} retransmits={} timeouts={} rx_dropped={}",
        me.name(),
        args.iters,
        elapsed.as_secs_f64() * 1e3,
        stats.tx_frames,
        stats.rx_frames,
        stats.retransmits,
        stats.timeouts,
        stats.rx_dropped,
    ))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rc-peer: {e}");
            std::process::exit(2);
        }
    };
    let mut pipe = Pipe {
        lines: std::io::stdin().lock().lines(),
    };
    match run(&args, &mut pipe) {
        Ok(result) => {
            eprintln!("rc-peer {}: {result}", args.role.name());
            if pipe.say(&result).is_err() {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("rc-peer {}: {e}", args.role.name());
            let _ = pipe.say(&format!("RESULT fail role={} {e}", args.role.name()));
            std::process::exit(1);
        }
    }
}
