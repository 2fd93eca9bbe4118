//! `udaddy`: librdmacm's udaddy example on the stack: UD ids on an event channel, SIDR.
//!
//! * server (no `-s`): listens on port 7174 of `-b` (or every address) in the UDP port space,
//!   accepts `-c` requests (each with a PD, one CQ and a UD QP of its own), receives `-C`
//!   messages per connection, builds the reply's address handle from the first receive's
//!   completion and GRH (`ibv_create_ah_from_wc`), and replies with `-C` messages from the
//!   same buffer (the GRH of the last receive and the start of its payload, as the original
//!   does).
//! * client (`-s ADDR`): resolves address and route for `-c` ids, connects (SIDR), builds
//!   the address handle from ESTABLISHED's parameters, sends `-C` messages of `-S` bytes
//!   (default 100) as SEND with immediate data (its QP number), and receives the replies.
//!
//! Output as the original (`udaddy: starting server`, `receiving data transfers`, ...,
//! `test complete`, `return status N`); on stderr what was checked: every receive carries
//! its sender's QP number as immediate data and the GRH; a client also checks that each reply
//! holds the start of what it sent (both the original server and this one echo it).
//!
//! ```text
//! udaddy --ip 10.77.0.1 --fabric eth:48030,48031 [-b addr] [-c n] [-C count] [-S size]
//! udaddy --ip 10.77.0.1 --fabric eth:48030,48031 -s 10.77.0.2 [-c n] [-C count] [-S size]
//! ```

use std::time::Duration;

use cm::{AddrInfo, CmEvent, EventChannel, EventParam, EventType, PortSpace, RaiFlags};
use cm_examples::{
    COMMON_USAGE, EthDevice, EthNic, Node, atoi, event_str, exit_code, getopt, nic_ip, pattern,
    poll_until, split_common, start_nic, stop_nic,
};
use verbs::{Provider, QpType, RecvWr, SendFlags, SendWr, UdDest, WcFlags, WcStatus, WrOpcode};

type P = EthDevice;

/// Bytes of the GRH area in front of every UD receive.
const GRH: usize = 40;

struct Opts {
    dst: Option<String>,
    src: Option<String>,
    connections: usize,
    count: usize,
    size: usize,
    tos: Option<u8>,
    port_space: u16,
    timeout: Duration,
}

struct Test {
    o: Opts,
    nodes: Vec<Option<Node<P>>>,
    conn_index: usize,
    connects_left: usize,
    /// Receives checked (immediate data = sender's QPN).
    received: usize,
    /// Replies whose payload was the start of what this client sent.
    echoed: bool,
}

impl Test {
    fn node(&mut self, ctx: u64) -> Result<&mut Node<P>, String> {
        self.nodes
            .get_mut(ctx as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| format!("event for unknown node {ctx}"))
    }

    fn verify_test_params(&self, n: &Node<P>) -> Result<(), i32> {
        let dev = n.dev().map_err(|_| -22)?;
        let mtu =
            n.id.cm()
                .with_provider(dev, |p| Provider::query_port(p, 1))
                .map_err(|_| -22)?
                .map_err(|_| -22)?
                .active_mtu
                .bytes() as usize;
        if self.o.count > 0 && self.o.size > mtu {
            println!(
                "udaddy: message_size {} is larger than active mtu {mtu}",
                self.o.size
            );
            return Err(-22);
        }
        Ok(())
    }

    /// `init_node`: PD, one CQ, a UD QP; message memory of size + GRH bytes (the ports fill
    /// it with their pattern; the original sends what malloc gave it).
    fn init_node(&self, n: &mut Node<P>) -> Result<(), String> {
        let cqe = if self.o.count > 0 {
            self.o.count * 2
        } else {
            2
        };
        let wr = self.o.count.max(1) as u32;
        let mem = if self.o.count > 0 {
            self.o.size + GRH
        } else {
            0
        };
        n.init("udaddy", QpType::Ud, cqe as u32, wr, true, false, mem)?;
        if let Some(m) = &n.mem {
            m.write(0, &pattern(self.o.size, 0))
                .map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    }

    fn post_recvs(&self, n: &Node<P>) -> Result<(), String> {
        if self.o.count == 0 {
            return Ok(());
        }
        let sge = [n.sge((self.o.size + GRH) as u32)?];
        let dp = n.id.data_path().map_err(|e| format!("{e:?}"))?;
        for _ in 0..self.o.count {
            dp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &sge,
            }])
            .map_err(|e| format!("failed to post receives: {:?}", e.error))?;
        }
        Ok(())
    }

    fn post_sends(&self, n: &Node<P>, flags: SendFlags) -> Result<(), String> {
        if !n.connected || self.o.count == 0 {
            return Ok(());
        }
        let ah = n.ah.as_ref().ok_or("no address handle")?;
        let sge = [n.sge(self.o.size as u32)?];
        let dp = n.id.data_path().map_err(|e| format!("{e:?}"))?;
        let qpn = dp.qp_num().ok_or("no QP")?;
        for _ in 0..self.o.count {
            dp.post_send(&[SendWr {
                wr_id: 0,
                opcode: WrOpcode::SendWithImm,
                flags,
                sg_list: &sge,
                imm_data: qpn.to_be(),
                dest: Some(UdDest {
                    ah,
                    remote_qpn: n.remote_qpn,
                    remote_qkey: n.remote_qkey,
                }),
                ..SendWr::default()
            }])
            .map_err(|e| format!("failed to post sends: {:?}", e.error))?;
        }
        Ok(())
    }

    /// `create_reply_ah`: the address handle to the sender of `wc` from the GRH in front
    /// of the receive, its QP number from the immediate data, the Q_Key our QP has.
    fn create_reply_ah(n: &mut Node<P>, wc: &verbs::WorkCompletion) -> Result<(), String> {
        let dev = n.dev()?;
        let mem = n.mem.as_ref().ok_or("no message memory")?;
        let mut grh = [0u8; GRH];
        mem.read(0, &mut grh).map_err(|e| format!("{e:?}"))?;
        let cm = n.id.cm().clone();
        let attr = cm
            .ah_attr_from_wc(dev, wc, &grh)
            .map_err(|e| format!("udaddy: reply address: {e:?}"))?;
        let pd = n.pd.as_ref().ok_or("no PD")?;
        let ah = cm
            .with_pd(pd, |p, pd| Provider::create_ah(p, pd, &attr))
            .map_err(|e| format!("{e:?}"))?
            .map_err(|e| format!("udaddy: failure creating address handle: {e:?}"))?;
        n.ah = Some(ah);
        n.remote_qpn = u32::from_be(wc.imm_data);
        n.remote_qkey =
            n.id.with_verbs(|v| match (v.qp, v.provider) {
                (Some(q), p) => Provider::query_qp(p, q)
                    .map(|a| a.qkey)
                    .map_err(|e| format!("{e:?}")),
                (None, _) => Err("no QP".to_string()),
            })
            .map_err(|e| format!("{e:?}"))??;
        Ok(())
    }

    /// Polls each connected node's CQ for `count` completions; the first receive of a node
    /// without an address handle gives it one. Every completion must be a success; every
    /// receive must carry the GRH and the sender's QP number as immediate data.
    fn poll_cqs(&mut self) -> Result<(), String> {
        let (count, size, timeout) = (self.o.count, self.o.size, self.o.timeout);
        let mut received = 0;
        for slot in &mut self.nodes {
            let Some(n) = slot.as_mut().filter(|n| n.connected) else {
                continue;
            };
            let dp = n.id.data_path().map_err(|e| format!("{e:?}"))?;
            let mut first = None;
            poll_until(
                count,
                timeout,
                |wc| {
                    dp.poll_recv_cq(wc)
                        .map_err(|e| format!("udaddy: failed polling CQ: {e:?}"))
                },
                |wc| {
                    if wc.status != WcStatus::Success {
                        return Err(format!("udaddy: completion with {:?}", wc.status));
                    }
                    if wc.opcode == verbs::WcOpcode::Recv {
                        if wc.byte_len as usize != size + GRH
                            || !wc.wc_flags.contains(WcFlags::WITH_IMM | WcFlags::GRH)
                            || u32::from_be(wc.imm_data) != wc.src_qp
                        {
                            return Err(format!(
                                "udaddy: receive of {} bytes, flags {:?}, immediate {:#x} \
                                 from QP {:#x}",
                                wc.byte_len,
                                wc.wc_flags,
                                u32::from_be(wc.imm_data),
                                wc.src_qp
                            ));
                        }
                        received += 1;
                        first.get_or_insert(*wc);
                    }
                    Ok(())
                },
            )?;
            if n.ah.is_none()
                && let Some(wc) = first
            {
                Self::create_reply_ah(n, &wc)?;
            }
        }
        self.received += received;
        Ok(())
    }

    /// A client's check of the replies: after the GRH of its own receive and the server's
    /// (the GRH area the server sent from), the start of the pattern it sent.
    fn check_echo(&mut self) {
        let size = self.o.size;
        if size <= GRH {
            return;
        }
        let want = pattern(size, 0);
        self.echoed = self
            .nodes
            .iter()
            .flatten()
            .filter(|n| n.connected)
            .all(|n| {
                let mut got = vec![0u8; size - GRH];
                n.mem
                    .as_ref()
                    .is_some_and(|m| m.read(2 * GRH, &mut got).is_ok() && got == want[..size - GRH])
            });
    }

    fn connect_error(&mut self) {
        self.connects_left = self.connects_left.saturating_sub(1);
    }

    fn addr_handler(&mut self, ctx: u64) -> Result<(), i32> {
        let tos = self.o.tos;
        let n = self.node(ctx).map_err(|_| -22)?;
        if let Some(t) = tos
            && let Err(e) = n.id.set_option(cm::OPTION_ID, cm::OPTION_ID_TOS, &[t])
        {
            eprintln!("udaddy: set TOS option failed: {e:?}");
        }
        if let Err(e) = n.id.resolve_route(2000) {
            eprintln!("udaddy: resolve route failed: {e:?}");
            self.connect_error();
            return Err(-e.errno());
        }
        Ok(())
    }

    fn route_handler(&mut self, ctx: u64) -> Result<(), i32> {
        let Some(mut n) = self.nodes.get_mut(ctx as usize).and_then(Option::take) else {
            return Err(-22);
        };
        let r = self
            .verify_test_params(&n)
            .and_then(|()| self.init_node(&mut n).map_err(|e| fail(&e)))
            .and_then(|()| self.post_recvs(&n).map_err(|e| fail(&e)))
            .and_then(|()| {
                n.id.connect(None).map_err(|e| {
                    eprintln!("udaddy: failure connecting: {e:?}");
                    -e.errno()
                })
            });
        self.nodes[ctx as usize] = Some(n);
        if r.is_err() {
            self.connect_error();
        }
        r
    }

    fn connect_handler(&mut self, mut ev: CmEvent<P>) -> Result<(), i32> {
        let Some(id) = ev.take_id() else {
            return Err(-22);
        };
        if self.conn_index == self.o.connections {
            println!("udaddy: failing connection request");
            let _ = id.reject(&[]);
            return Err(-12);
        }
        let i = self.conn_index;
        self.conn_index += 1;
        id.set_context(i as u64);
        let mut n = Node::new(id);
        let r = self
            .verify_test_params(&n)
            .and_then(|()| self.init_node(&mut n).map_err(|e| fail(&e)))
            .and_then(|()| self.post_recvs(&n).map_err(|e| fail(&e)))
            .and_then(|()| {
                n.id.accept(None).map_err(|e| {
                    eprintln!("udaddy: failure accepting: {e:?}");
                    -e.errno()
                })
            });
        match r {
            Ok(()) => {
                n.connected = true;
                self.connects_left -= 1;
                self.nodes[i] = Some(n);
                Ok(())
            }
            Err(e) => {
                self.connect_error();
                println!("udaddy: failing connection request");
                let _ = n.id.reject(&[]);
                n.destroy();
                Err(e)
            }
        }
    }

    fn resolved_handler(&mut self, ctx: u64, param: &EventParam) -> Result<(), i32> {
        let EventParam::Ud(ud) = param else {
            return Err(-22);
        };
        let n = self.node(ctx).map_err(|_| -22)?;
        n.remote_qpn = ud.qp_num;
        n.remote_qkey = ud.qkey;
        let cm = n.id.cm().clone();
        let ah = match n
            .pd
            .as_ref()
            .map(|pd| cm.with_pd(pd, |p, pd| Provider::create_ah(p, pd, &ud.ah_attr)))
        {
            Some(Ok(Ok(ah))) => ah,
            _ => {
                println!("udaddy: failure creating address handle");
                self.connect_error();
                return Err(-1);
            }
        };
        n.ah = Some(ah);
        n.connected = true;
        self.connects_left -= 1;
        Ok(())
    }

    fn cma_handler(&mut self, ev: CmEvent<P>) -> Result<(), i32> {
        match ev.event {
            EventType::AddrResolved => self.addr_handler(ev.context),
            EventType::RouteResolved => self.route_handler(ev.context),
            EventType::ConnectRequest => self.connect_handler(ev),
            EventType::Established => self.resolved_handler(ev.context, &ev.param),
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                println!(
                    "udaddy: event: {}, error: {}",
                    event_str(ev.event),
                    ev.status
                );
                self.connect_error();
                if ev.status == 0 {
                    Ok(())
                } else {
                    Err(ev.status)
                }
            }
            _ => Ok(()),
        }
    }

    fn connect_events(&mut self, ch: &EventChannel<P>) -> Result<(), i32> {
        while self.connects_left > 0 {
            let ev = ch.get_cm_event().map_err(|e| {
                eprintln!("udaddy: rdma_get_cm_event: {e:?}");
                -e.errno()
            })?;
            self.cma_handler(ev)?;
        }
        Ok(())
    }
}

fn fail(e: &str) -> i32 {
    println!("{e}");
    -1
}

fn run_server(t: &mut Test, nic: &EthNic, ch: &EventChannel<P>) -> i32 {
    println!("udaddy: starting server");
    let listen_id = match nic
        .cm
        .create_id(Some(ch), u64::MAX, PortSpace(t.o.port_space))
    {
        Ok(i) => i,
        Err(e) => {
            eprintln!("udaddy: listen request failed: {e:?}");
            return -e.errno();
        }
    };
    let hints = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ai_port_space: Some(PortSpace(t.o.port_space)),
        ..AddrInfo::default()
    };
    let rai = match nic
        .cm
        .getaddrinfo(t.o.src.as_deref(), Some("7174"), Some(&hints))
    {
        Ok(r) => r,
        Err(e) => {
            println!("udaddy: getrdmaaddr error: {e:?}");
            return -e.errno();
        }
    };
    let Some(src) = rai.ai_src_addr else {
        return -22;
    };
    if let Err(e) = listen_id.bind_addr(&src) {
        eprintln!("udaddy: bind address failed: {e:?}");
        return -e.errno();
    }
    if let Err(e) = listen_id.listen(0) {
        eprintln!("udaddy: failure trying to listen: {e:?}");
        return -e.errno();
    }
    eprintln!("udaddy: listening on {src}");
    // the original ignores connect_events' result here
    let _ = t.connect_events(ch);
    let mut ret = 0;
    if t.o.count > 0 {
        ret = (|| {
            println!("receiving data transfers");
            t.poll_cqs().map_err(|e| fail(&e))?;
            println!("sending replies");
            for n in t.nodes.iter().flatten() {
                t.post_sends(n, SendFlags::SIGNALED).map_err(|e| fail(&e))?;
            }
            t.poll_cqs().map_err(|e| fail(&e))?;
            println!("data transfers complete");
            Ok(())
        })()
        .err()
        .unwrap_or(0);
    }
    listen_id.destroy_id();
    ret
}

fn run_client(t: &mut Test, nic: &EthNic, ch: &EventChannel<P>) -> i32 {
    println!("udaddy: starting client");
    let src =
        t.o.src
            .as_deref()
            .map(|s| format!("{s}:0").parse::<std::net::SocketAddr>());
    let src = match src.transpose() {
        Ok(s) => s,
        Err(_) => {
            println!("udaddy: getaddrinfo error: bad source address");
            return -22;
        }
    };
    let hints = AddrInfo {
        ai_port_space: Some(PortSpace(t.o.port_space)),
        ai_src_addr: src,
        ..AddrInfo::default()
    };
    let rai = match nic
        .cm
        .getaddrinfo(t.o.dst.as_deref(), Some("7174"), Some(&hints))
    {
        Ok(r) => r,
        Err(e) => {
            println!("udaddy: getaddrinfo error: {e:?}");
            return -e.errno();
        }
    };
    let Some(dst) = rai.ai_dst_addr else {
        return -22;
    };
    println!("udaddy: connecting");
    for n in t.nodes.iter().flatten() {
        if let Err(e) = n.id.resolve_addr(rai.ai_src_addr.as_ref(), &dst, 2000) {
            eprintln!("udaddy: failure getting addr: {e:?}");
            t.connect_error();
            return -e.errno();
        }
    }
    if let Err(e) = t.connect_events(ch) {
        return e;
    }
    if t.o.count > 0 {
        println!("initiating data transfers");
        for n in t.nodes.iter().flatten() {
            if let Err(e) = t.post_sends(n, SendFlags::empty()) {
                return fail(&e);
            }
        }
        println!("receiving data transfers");
        if let Err(e) = t.poll_cqs() {
            return fail(&e);
        }
        t.check_echo();
        println!("data transfers complete");
    }
    0
}

fn usage() -> std::process::ExitCode {
    println!(
        "usage: udaddy\n\t[-s server_address]\n\t[-b bind_address]\n\t[-c connections]\n\t\
         [-C message_count]\n\t[-S message_size]\n\t[-t type_of_service]\n\t\
         [-p port_space - 0x111 for UDP (default)]\n{COMMON_USAGE}"
    );
    std::process::ExitCode::from(1)
}

fn main() -> std::process::ExitCode {
    let (common, rest) = match split_common(std::env::args().skip(1).collect()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("udaddy: {e}");
            return usage();
        }
    };
    let mut o = Opts {
        dst: None,
        src: None,
        connections: 1,
        count: 10,
        size: 100,
        tos: None,
        port_space: cm::PortSpace::UDP.0,
        timeout: Duration::from_secs(common.timeout_s),
    };
    let opts = match getopt(&rest, "s:b:c:C:S:t:p:") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("udaddy: {e}");
            return usage();
        }
    };
    for (k, v) in opts {
        match k {
            's' => o.dst = Some(v),
            'b' => o.src = Some(v),
            'c' => o.connections = atoi(&v).max(0) as usize,
            'C' => o.count = atoi(&v).max(0) as usize,
            'S' => o.size = atoi(&v).max(0) as usize,
            't' => o.tos = parse_c_int(&v).map(|x| x as u8),
            _ => o.port_space = parse_c_int(&v).unwrap_or(0) as u16,
        }
    }
    if o.size == 0 {
        o.count = 0;
    }
    let ip = match nic_ip(&common, o.src.as_deref()) {
        Ok(ip) => ip,
        Err(e) => {
            eprintln!("udaddy: {e}");
            return usage();
        }
    };
    let nic = match start_nic(&common, ip) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("udaddy: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let ret = {
        let ch = match nic.cm.create_event_channel() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("failed to create event channel: {e:?}");
                return std::process::ExitCode::from(1);
            }
        };
        let mut t = Test {
            connects_left: o.connections,
            nodes: Vec::new(),
            conn_index: 0,
            received: 0,
            echoed: false,
            o,
        };
        // alloc_nodes: a client's ids exist from the start
        for i in 0..t.o.connections {
            if t.o.dst.is_some() {
                match nic
                    .cm
                    .create_id(Some(&ch), i as u64, PortSpace(t.o.port_space))
                {
                    Ok(id) => t.nodes.push(Some(Node::new(id))),
                    Err(e) => {
                        eprintln!("udaddy: rdma_create_id: {e:?}");
                        return std::process::ExitCode::from(1);
                    }
                }
            } else {
                t.nodes.push(None);
            }
        }
        let client = t.o.dst.is_some();
        let ret = if client {
            run_client(&mut t, &nic, &ch)
        } else {
            run_server(&mut t, &nic, &ch)
        };
        println!("test complete");
        if t.o.count > 0 && ret == 0 {
            eprintln!(
                "udaddy: {} messages received, each with its sender's QP number as immediate data{}",
                t.received,
                match (client, t.o.size > GRH, t.echoed) {
                    (true, true, true) => "; the replies echo the start of what was sent",
                    (true, true, false) => "; the replies do NOT echo what was sent",
                    _ => "",
                }
            );
        }
        let bad_echo = client && ret == 0 && t.o.count > 0 && t.o.size > GRH && !t.echoed;
        for n in t.nodes.drain(..).flatten() {
            n.destroy();
        }
        drop(ch);
        if bad_echo { -1 } else { ret }
    };
    println!("return status {ret}");
    stop_nic(nic, "udaddy");
    exit_code(ret)
}

/// C's `strtoul(s, NULL, 0)`: decimal, `0x` hex or `0` octal.
fn parse_c_int(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}
