//! `ucmatose`: librdmacm's cmatose example (installed as `ucmatose`) on the stack: `-c` RC
//! connections on one event channel, messages both ways, disconnect.
//!
//! * server (no `-s`): listens on port 7471 (`-p`) of `-b` (or every address), accepts `-c`
//!   connections (each with a PD, a send and a receive CQ, an RC QP and `-C` receives posted
//!   before `accept`), sends `-C` messages of `-S` bytes (default 100) on each, completes
//!   them, receives the clients' `-C` replies, then disconnects every connection and waits
//!   for their DISCONNECTED events.
//! * client (`-s ADDR`): resolves address and route for `-c` ids, connects each (receives
//!   posted first), receives `-C` messages per connection, replies with `-C` messages from
//!   the same buffer (the last message received, so a client echoes the server's data), and
//!   waits for the server's disconnects.
//!
//! Output as the original (`cmatose: starting server`, `initiating data transfers`, ...,
//! `disconnected`, `test complete`, `return status N`). The port's server fills its
//! messages with a pattern and checks on stderr that the replies echo it (the original
//! client echoes too); every completion must be a success.
//!
//! ```text
//! ucmatose --ip 10.77.0.1 --fabric eth:48030,48031 [-b addr] [-p port] [-c n] [-C count] [-S size]
//! ucmatose --ip 10.77.0.1 --fabric eth:48030,48031 -s 10.77.0.2 [-p port] [-c n] [-C count] [-S size]
//! ```

use std::time::Duration;

use cm::{AddrInfo, CmEvent, ConnParam, EventChannel, EventType, PortSpace, RaiFlags};
use cm_examples::{
    COMMON_USAGE, EthDevice, EthNic, Node, atoi, event_str, exit_code, getopt, nic_ip, pattern,
    poll_until, split_common, start_nic, stop_nic,
};
use verbs::{QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};

type P = EthDevice;

struct Opts {
    dst: Option<String>,
    src: Option<String>,
    port: String,
    connections: usize,
    count: usize,
    size: usize,
    tos: Option<u8>,
    timeout: Duration,
}

struct Test {
    o: Opts,
    nodes: Vec<Option<Node<P>>>,
    conn_index: usize,
    connects_left: usize,
    disconnects_left: usize,
    /// Messages received (all successful).
    received: usize,
}

fn fail(e: &str) -> i32 {
    println!("{e}");
    -1
}

impl Test {
    fn init_node(&self, n: &mut Node<P>) -> Result<(), String> {
        let cqe = self.o.count.max(1) as u32;
        let mem = if self.o.count > 0 { self.o.size } else { 0 };
        n.init("cmatose", QpType::Rc, cqe, cqe, false, true, mem)?;
        if let Some(m) = &n.mem {
            m.write(0, &pattern(self.o.size, 7))
                .map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    }

    fn post_recvs(&self, n: &Node<P>) -> Result<(), String> {
        if self.o.count == 0 {
            return Ok(());
        }
        let sge = [n.sge(self.o.size as u32)?];
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

    fn post_sends(&self, n: &Node<P>) -> Result<(), String> {
        if !n.connected || self.o.count == 0 {
            return Ok(());
        }
        let sge = [n.sge(self.o.size as u32)?];
        let dp = n.id.data_path().map_err(|e| format!("{e:?}"))?;
        for _ in 0..self.o.count {
            dp.post_send(&[SendWr {
                wr_id: 0,
                opcode: WrOpcode::Send,
                flags: SendFlags::empty(),
                sg_list: &sge,
                ..SendWr::default()
            }])
            .map_err(|e| format!("failed to post sends: {:?}", e.error))?;
        }
        Ok(())
    }

    /// Polls each connected node's send (`send`) or receive CQ for `count` successful
    /// completions (receives of exactly `size` bytes).
    fn poll_cqs(&mut self, send: bool) -> Result<(), String> {
        let (count, size, timeout) = (self.o.count, self.o.size, self.o.timeout);
        let mut received = 0;
        for n in self.nodes.iter().flatten().filter(|n| n.connected) {
            let dp = n.id.data_path().map_err(|e| format!("{e:?}"))?;
            poll_until(
                count,
                timeout,
                |wc| {
                    if send {
                        dp.poll_send_cq(wc)
                    } else {
                        dp.poll_recv_cq(wc)
                    }
                    .map_err(|e| format!("cmatose: failed polling CQ: {e:?}"))
                },
                |wc| {
                    if wc.status != WcStatus::Success {
                        return Err(format!("cmatose: completion with {:?}", wc.status));
                    }
                    if !send {
                        if wc.byte_len as usize != size {
                            return Err(format!(
                                "cmatose: received {} bytes, not {size}",
                                wc.byte_len
                            ));
                        }
                        received += 1;
                    }
                    Ok(())
                },
            )?;
        }
        self.received += received;
        Ok(())
    }

    /// Whether every connected node's buffer holds the server's pattern again (the clients'
    /// replies echo what they received).
    fn echoed(&self) -> bool {
        let want = pattern(self.o.size, 7);
        self.nodes
            .iter()
            .flatten()
            .filter(|n| n.connected)
            .all(|n| {
                let mut got = vec![0u8; self.o.size];
                n.mem
                    .as_ref()
                    .is_some_and(|m| m.read(0, &mut got).is_ok() && got == want)
            })
    }

    fn connect_error(&mut self) {
        self.connects_left = self.connects_left.saturating_sub(1);
    }

    fn node(&mut self, ctx: u64) -> Option<&mut Node<P>> {
        self.nodes.get_mut(ctx as usize).and_then(Option::as_mut)
    }

    fn addr_handler(&mut self, ctx: u64) -> Result<(), i32> {
        let tos = self.o.tos;
        let Some(n) = self.node(ctx) else {
            return Err(-22);
        };
        if let Some(t) = tos
            && let Err(e) = n.id.set_option(cm::OPTION_ID, cm::OPTION_ID_TOS, &[t])
        {
            eprintln!("cmatose: set TOS option failed: {e:?}");
        }
        if let Err(e) = n.id.resolve_route(2000) {
            eprintln!("cmatose: resolve route failed: {e:?}");
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
            .init_node(&mut n)
            .and_then(|()| self.post_recvs(&n))
            .map_err(|e| fail(&e))
            .and_then(|()| {
                let p = ConnParam {
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 5,
                    ..ConnParam::default()
                };
                n.id.connect(Some(&p)).map_err(|e| {
                    eprintln!("cmatose: failure connecting: {e:?}");
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
            println!("cmatose: failing connection request");
            let _ = id.reject(&[]);
            return Err(-12);
        }
        let i = self.conn_index;
        self.conn_index += 1;
        id.set_context(i as u64);
        let mut n = Node::new(id);
        let r = self
            .init_node(&mut n)
            .and_then(|()| self.post_recvs(&n))
            .map_err(|e| fail(&e))
            .and_then(|()| {
                n.id.accept(None).map_err(|e| {
                    eprintln!("cmatose: failure accepting: {e:?}");
                    -e.errno()
                })
            });
        match r {
            Ok(()) => {
                self.nodes[i] = Some(n);
                Ok(())
            }
            Err(e) => {
                self.connect_error();
                println!("cmatose: failing connection request");
                let _ = n.id.reject(&[]);
                n.destroy();
                Err(e)
            }
        }
    }

    fn cma_handler(&mut self, ev: CmEvent<P>) -> Result<(), i32> {
        match ev.event {
            EventType::AddrResolved => self.addr_handler(ev.context),
            EventType::RouteResolved => self.route_handler(ev.context),
            EventType::ConnectRequest => self.connect_handler(ev),
            EventType::Established => {
                if let Some(n) = self.node(ev.context) {
                    n.connected = true;
                }
                self.connects_left = self.connects_left.saturating_sub(1);
                self.disconnects_left += 1;
                Ok(())
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                println!(
                    "cmatose: event: {}, error: {}",
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
            EventType::Disconnected => {
                if let Some(n) = self.node(ev.context) {
                    let _ = n.id.disconnect();
                }
                self.disconnects_left = self.disconnects_left.saturating_sub(1);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn connect_events(&mut self, ch: &EventChannel<P>) -> Result<(), i32> {
        while self.connects_left > 0 {
            let ev = ch.get_cm_event().map_err(|e| {
                eprintln!("cmatose: failure in rdma_get_cm_event in connect events: {e:?}");
                e.errno()
            })?;
            self.cma_handler(ev)?;
        }
        Ok(())
    }

    fn disconnect_events(&mut self, ch: &EventChannel<P>) -> Result<(), i32> {
        while self.disconnects_left > 0 {
            let ev = ch.get_cm_event().map_err(|e| {
                eprintln!("cmatose: failure in rdma_get_cm_event in disconnect events: {e:?}");
                e.errno()
            })?;
            self.cma_handler(ev)?;
        }
        Ok(())
    }
}

fn run_server(t: &mut Test, nic: &EthNic, ch: &EventChannel<P>) -> i32 {
    println!("cmatose: starting server");
    let listen_id = match nic.cm.create_id(Some(ch), u64::MAX, PortSpace::TCP) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("cmatose: listen request failed: {e:?}");
            return -e.errno();
        }
    };
    let hints = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ai_port_space: Some(PortSpace::TCP),
        ..AddrInfo::default()
    };
    let rai = match nic
        .cm
        .getaddrinfo(t.o.src.as_deref(), Some(&t.o.port), Some(&hints))
    {
        Ok(r) => r,
        Err(e) => {
            println!("cmatose: getrdmaaddr error: {e:?}");
            return -e.errno();
        }
    };
    let Some(src) = rai.ai_src_addr else {
        return -22;
    };
    if let Err(e) = listen_id.bind_addr(&src) {
        eprintln!("cmatose: bind address failed: {e:?}");
        return -e.errno();
    }
    if let Err(e) = listen_id.listen(0) {
        eprintln!("cmatose: failure trying to listen: {e:?}");
        return -e.errno();
    }
    eprintln!("cmatose: listening on {src}");
    let ret = (|| {
        t.connect_events(ch)?;
        if t.o.count > 0 {
            println!("initiating data transfers");
            for n in t.nodes.iter().flatten() {
                t.post_sends(n).map_err(|e| fail(&e))?;
            }
            println!("completing sends");
            t.poll_cqs(true).map_err(|e| fail(&e))?;
            println!("receiving data transfers");
            t.poll_cqs(false).map_err(|e| fail(&e))?;
            println!("data transfers complete");
            if t.echoed() {
                eprintln!(
                    "cmatose: {} messages received; the replies echo what was sent",
                    t.received
                );
            } else {
                eprintln!("cmatose: the replies do NOT echo what was sent");
                return Err(-1);
            }
        }
        println!("cmatose: disconnecting");
        for n in t.nodes.iter_mut().flatten() {
            if n.connected {
                n.connected = false;
                let _ = n.id.disconnect();
            }
        }
        let r = t.disconnect_events(ch);
        println!("disconnected");
        r
    })()
    .err()
    .unwrap_or(0);
    listen_id.destroy_id();
    ret
}

fn run_client(t: &mut Test, nic: &EthNic, ch: &EventChannel<P>) -> i32 {
    println!("cmatose: starting client");
    let src =
        t.o.src
            .as_deref()
            .map(|s| format!("{s}:0").parse::<std::net::SocketAddr>());
    let src = match src.transpose() {
        Ok(s) => s,
        Err(_) => {
            println!("cmatose: getaddrinfo error: bad source address");
            return -22;
        }
    };
    let hints = AddrInfo {
        ai_port_space: Some(PortSpace::TCP),
        ai_src_addr: src,
        ..AddrInfo::default()
    };
    let rai = match nic
        .cm
        .getaddrinfo(t.o.dst.as_deref(), Some(&t.o.port), Some(&hints))
    {
        Ok(r) => r,
        Err(e) => {
            println!("cmatose: getaddrinfo error: {e:?}");
            return -e.errno();
        }
    };
    let Some(dst) = rai.ai_dst_addr else {
        return -22;
    };
    println!("cmatose: connecting");
    for n in t.nodes.iter().flatten() {
        if let Err(e) = n.id.resolve_addr(rai.ai_src_addr.as_ref(), &dst, 2000) {
            eprintln!("cmatose: failure getting addr: {e:?}");
            t.connect_error();
            return -e.errno();
        }
    }
    let mut ret = (|| {
        t.connect_events(ch)?;
        if t.o.count > 0 {
            println!("receiving data transfers");
            t.poll_cqs(false).map_err(|e| fail(&e))?;
            println!("sending replies");
            for n in t.nodes.iter().flatten() {
                t.post_sends(n).map_err(|e| fail(&e))?;
            }
            println!("data transfers complete");
            eprintln!("cmatose: {} messages received", t.received);
        }
        Ok(())
    })()
    .err()
    .unwrap_or(0);
    if let Err(e) = t.disconnect_events(ch) {
        ret = e;
    }
    ret
}

fn usage() -> std::process::ExitCode {
    println!(
        "usage: ucmatose\n\t[-s server_address]\n\t[-b bind_address]\n\t[-c connections]\n\t\
         [-C message_count]\n\t[-S message_size]\n\t[-t type_of_service]\n\t\
         [-p port_number]\n{COMMON_USAGE}"
    );
    std::process::ExitCode::from(1)
}

fn main() -> std::process::ExitCode {
    let (common, rest) = match split_common(std::env::args().skip(1).collect()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ucmatose: {e}");
            return usage();
        }
    };
    let mut o = Opts {
        dst: None,
        src: None,
        port: "7471".into(),
        connections: 1,
        count: 10,
        size: 100,
        tos: None,
        timeout: Duration::from_secs(common.timeout_s),
    };
    let opts = match getopt(&rest, "s:b:c:C:S:t:p:") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ucmatose: {e}");
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
            't' => o.tos = v.parse().ok(),
            _ => o.port = v,
        }
    }
    if o.size == 0 {
        o.count = 0;
    }
    let ip = match nic_ip(&common, o.src.as_deref()) {
        Ok(ip) => ip,
        Err(e) => {
            eprintln!("ucmatose: {e}");
            return usage();
        }
    };
    let nic = match start_nic(&common, ip) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("ucmatose: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let ret = {
        let ch = match nic.cm.create_event_channel() {
            Ok(c) => c,
            Err(e) => {
                println!("failed to create event channel: {e:?}");
                return std::process::ExitCode::from(1);
            }
        };
        let mut t = Test {
            connects_left: o.connections,
            disconnects_left: 0,
            nodes: Vec::new(),
            conn_index: 0,
            received: 0,
            o,
        };
        for i in 0..t.o.connections {
            if t.o.dst.is_some() {
                match nic.cm.create_id(Some(&ch), i as u64, PortSpace::TCP) {
                    Ok(id) => t.nodes.push(Some(Node::new(id))),
                    Err(e) => {
                        eprintln!("cmatose: rdma_create_id: {e:?}");
                        return std::process::ExitCode::from(1);
                    }
                }
            } else {
                t.nodes.push(None);
            }
        }
        let ret = if t.o.dst.is_some() {
            run_client(&mut t, &nic, &ch)
        } else {
            run_server(&mut t, &nic, &ch)
        };
        println!("test complete");
        for n in t.nodes.drain(..).flatten() {
            n.destroy();
        }
        drop(ch);
        ret
    };
    println!("return status {ret}");
    stop_nic(nic, "ucmatose");
    exit_code(ret)
}
