//! The Ethernet fabric: raw Ethernet frames over UDP on loopback, one frame per datagram, in
//! the format of QEMU's `-netdev socket,udp=HOST:A,localaddr=HOST:B` backend (no length
//! prefix, no virtio-net header, no FCS; see `docs/qemu.md#the-socket-netdev`).
//!
//! An [`EthLink`] is one point-to-point link: a socket bound at `local` that sends to
//! `remote`. The port on it is a station with a MAC and an IPv4 address *on the virtual wire*
//! (the address never touches the host's network stack; only the two 127.0.0.1 sockets do).
//! The port
//!
//! * wraps the IPv4 frames the NIC sends in Ethernet, resolving the destination's MAC by ARP
//!   (requests retried every [`ArpConfig::retry_interval`], at most
//!   [`ArpConfig::max_requests`] of them; frames wait in a small queue meanwhile; entries
//!   learnt are kept in a small cache);
//! * answers ARP requests for its address (optionally after [`ArpConfig::reply_delay`]) and
//!   ICMP echo requests to it (so `ping` works from a guest);
//! * hands the NIC only IPv4/UDP datagrams to port 4791 addressed to its MAC and IPv4
//!   address, trimmed to the IPv4 total length (e1000 pads short frames); everything else —
//!   IPv6 (neighbour discovery, MLD), multicast, other stations' unicast, other EtherTypes —
//!   is counted and ignored.
//!
//! [`EthHandle`] (from [`EthPort::handle`]) reaches the same port from another thread while
//! the NIC owns the port: the neighbour cache (static entries, the stand-in for the CM's
//! `add_neighbor`, and the learnt ones), resolving an address, counters.

use std::boxed::Box;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use std::vec;
use std::vec::Vec;

use super::{Fabric, FabricError, Port, is_loopback};
use crate::eth::{
    ArpOp, ArpPacket, ETHERTYPE_ARP, ETHERTYPE_IPV4, EthHeader, Mac, frame_for_me, is_multicast,
};
use crate::packet::{
    Ipv4Header, Opcode, ROCE_V2_UDP_DPORT, WireError, internet_checksum, peek_ipv4_addrs,
};

/// IPv4 protocol number of ICMP.
const IPPROTO_ICMP: u8 = 1;
/// Largest Ethernet frame taken from the socket (jumbo frames included).
const MAX_FRAME: usize = 1 << 16;

/// ARP behaviour of an [`EthPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// Wait between ARP requests for an unresolved address.
    pub retry_interval: Duration,
    /// Requests sent for one address before its queued frames are dropped.
    pub max_requests: u32,
    /// Frames queued per unresolved address (the oldest is dropped beyond it).
    pub queue_limit: usize,
    /// Learnt (not static) entries kept; the oldest is evicted beyond it.
    pub cache_limit: usize,
    /// Delay before answering an ARP request. Linux's rdma_cm can miss a reply that arrives
    /// before its resolve request is queued (then it waits out its 2 s timeout); a short
    /// delay avoids that (notes, pitfall 1).
    pub reply_delay: Duration,
}

impl Default for ArpConfig {
    /// 250 ms between requests, 5 requests, 64 queued frames, 256 entries, no reply delay.
    fn default() -> Self {
        Self {
            retry_interval: Duration::from_millis(250),
            max_requests: 5,
            queue_limit: 64,
            cache_limit: 256,
            reply_delay: Duration::ZERO,
        }
    }
}

/// Counters of an [`EthPort`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthStats {
    /// Ethernet frames sent (IPv4, ARP and ICMP).
    pub tx_frames: u64,
    /// Datagrams received from the socket (any content, from the link's peer).
    pub rx_frames: u64,
    /// RoCEv2 IPv4 packets handed to the NIC.
    pub rx_delivered: u64,
    /// ARP requests sent.
    pub arp_requests_sent: u64,
    /// ARP replies sent.
    pub arp_replies_sent: u64,
    /// ARP requests for this port's address received.
    pub arp_requests_received: u64,
    /// ARP replies received.
    pub arp_replies_received: u64,
    /// ICMP echo replies sent.
    pub icmp_echo_replies: u64,
    /// Frames ignored: other stations' unicast, multicast, IPv6, other EtherTypes, IPv4 not
    /// for this address or not RoCEv2, malformed ARP or IPv4, datagrams from a socket other
    /// than the link's peer.
    pub rx_ignored: u64,
    /// Frames dropped because their destination did not resolve (or the queue overflowed).
    pub tx_unresolved: u64,
    /// RoCEv2 frames dropped on purpose ([`EthHandle::drop_next`]).
    pub test_drops: u64,
}

/// A point-to-point Ethernet link over two loopback UDP sockets, the format of QEMU's
/// `-netdev socket,udp=REMOTE,localaddr=LOCAL`, seen from the other end: our socket binds
/// `local` (QEMU's `udp=`) and sends to `remote` (QEMU's `localaddr=`).
///
/// Two of our ports talk to each other over two links with the socket addresses swapped.
/// [`Fabric::attach`] binds the one port of the link (a second attach fails with
/// [`FabricError::AddrInUse`] from the socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthLink {
    /// The socket this end binds.
    pub local: SocketAddrV4,
    /// The socket the far end binds (frames are sent there).
    pub remote: SocketAddrV4,
    /// The port's Ethernet address.
    pub mac: Mac,
    /// ARP behaviour.
    pub arp: ArpConfig,
}

impl EthLink {
    /// A link between `local` and `remote` for a port with address `mac`, default ARP.
    pub const fn new(local: SocketAddrV4, remote: SocketAddrV4, mac: Mac) -> Self {
        Self {
            local,
            remote,
            mac,
            arp: ArpConfig {
                retry_interval: Duration::from_millis(250),
                max_requests: 5,
                queue_limit: 64,
                cache_limit: 256,
                reply_delay: Duration::ZERO,
            },
        }
    }

    /// Binds the socket and returns the port at IPv4 address `ip` on the virtual wire.
    ///
    /// The socket asks for a receive buffer of [`super::SOCKET_RCVBUF`] bytes.
    ///
    /// Errors: [`FabricError::NotLoopback`] if either socket address is outside 127.0.0.0/8,
    /// [`FabricError::Malformed`] for a multicast or all-zero MAC, [`FabricError::AddrInUse`]
    /// if `local` is taken, [`FabricError::ReceiveBuffer`] if the OS refuses the receive
    /// buffer, [`FabricError::Io`] for other socket errors.
    pub fn bind(&self, ip: Ipv4Addr) -> Result<EthPort, FabricError> {
        for a in [self.local, self.remote] {
            if !is_loopback(*a.ip()) {
                return Err(FabricError::NotLoopback(*a.ip()));
            }
        }
        if is_multicast(&self.mac) || self.mac == [0; 6] {
            return Err(FabricError::Malformed(WireError::NotIpv4));
        }
        let socket = UdpSocket::bind(self.local).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                FabricError::AddrInUse(*self.local.ip())
            } else {
                FabricError::from(e)
            }
        })?;
        socket.set_nonblocking(true)?;
        super::set_receive_buffer(&socket, super::SOCKET_RCVBUF)?;
        Ok(EthPort {
            shared: Arc::new(Shared {
                socket,
                remote: self.remote,
                mac: self.mac,
                ip,
                cfg: self.arp,
                state: Mutex::new(State::default()),
                rx_buf: Mutex::new(vec![0u8; MAX_FRAME]),
            }),
        })
    }
}

impl Fabric for EthLink {
    fn attach(&self, addr: Ipv4Addr) -> Result<Box<dyn Port>, FabricError> {
        Ok(Box::new(self.bind(addr)?))
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: Mac,
    fixed: bool,
    /// Insertion order, for eviction.
    seq: u64,
}

struct Pending {
    frames: VecDeque<Vec<u8>>,
    sent: u32,
    next: Instant,
}

#[derive(Default)]
struct State {
    cache: BTreeMap<Ipv4Addr, Entry>,
    pending: BTreeMap<Ipv4Addr, Pending>,
    /// ARP replies waiting out the reply delay.
    delayed: Vec<(Instant, Vec<u8>)>,
    /// IPv4 frames for the NIC.
    rxq: VecDeque<Vec<u8>>,
    seq: u64,
    stats: EthStats,
    /// Frames recorded for [`EthHandle::take_capture`] (both directions), if capturing.
    capture: Option<Vec<Captured>>,
    /// Frames to lose on purpose: (sent by us, BTH opcode), each matching once.
    drops: Vec<(bool, Opcode)>,
}

/// The BTH opcode of an IPv4 RoCEv2 frame (IPv4 header without options).
fn bth_opcode(ip: &[u8]) -> Option<Opcode> {
    ip.get(28).and_then(|&b| Opcode::from_u8(b))
}

/// Whether a planned drop matches this frame (and consumes it).
fn take_drop(st: &mut State, tx: bool, ip: &[u8]) -> bool {
    let Some(op) = bth_opcode(ip) else {
        return false;
    };
    match st.drops.iter().position(|d| *d == (tx, op)) {
        Some(i) => {
            st.drops.remove(i);
            st.stats.test_drops += 1;
            true
        }
        None => false,
    }
}

/// A frame seen by a capturing [`EthPort`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Sent by the port (true) or received from the link (false).
    pub tx: bool,
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
}

/// Frames kept by one capture at most (later ones are not recorded).
pub const CAPTURE_LIMIT: usize = 4096;

fn record(st: &mut State, tx: bool, frame: &[u8]) {
    if let Some(c) = st.capture.as_mut()
        && c.len() < CAPTURE_LIMIT
    {
        c.push(Captured {
            tx,
            frame: frame.to_vec(),
        });
    }
}

struct Shared {
    socket: UdpSocket,
    remote: SocketAddrV4,
    mac: Mac,
    ip: Ipv4Addr,
    cfg: ArpConfig,
    state: Mutex<State>,
    rx_buf: Mutex<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn send_raw(&self, st: &mut State, frame: &[u8]) {
        loop {
            match self.socket.send_to(frame, self.remote) {
                Ok(_) => {
                    st.stats.tx_frames += 1;
                    record(st, true, frame);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Nobody listening at the far end yet (ECONNREFUSED from an earlier datagram's
                // ICMP error), or a full buffer: a frame lost on the wire.
                Err(_) => return,
            }
        }
    }

    fn send_ipv4(&self, st: &mut State, dst_mac: Mac, ip_frame: &[u8]) {
        if take_drop(st, true, ip_frame) {
            return;
        }
        let f = EthHeader {
            dst: dst_mac,
            src: self.mac,
            ethertype: ETHERTYPE_IPV4,
        }
        .frame(ip_frame);
        self.send_raw(st, &f);
    }

    fn send_request(&self, st: &mut State, target: Ipv4Addr) {
        let f = ArpPacket::request(self.mac, self.ip, target).frame();
        self.send_raw(st, &f);
        st.stats.arp_requests_sent += 1;
    }

    fn learn(&self, st: &mut State, ip: Ipv4Addr, mac: Mac, create: bool) {
        if is_multicast(&mac) || mac == [0; 6] || ip.is_unspecified() {
            return;
        }
        st.seq += 1;
        let seq = st.seq;
        match st.cache.get_mut(&ip) {
            Some(e) if e.fixed => {}
            Some(e) => {
                e.mac = mac;
                e.seq = seq;
            }
            None if create => {
                st.cache.insert(
                    ip,
                    Entry {
                        mac,
                        fixed: false,
                        seq,
                    },
                );
                let learnt = st.cache.values().filter(|e| !e.fixed).count();
                if learnt > self.cfg.cache_limit
                    && let Some((&old, _)) = st
                        .cache
                        .iter()
                        .filter(|(_, e)| !e.fixed)
                        .min_by_key(|(_, e)| e.seq)
                {
                    st.cache.remove(&old);
                }
            }
            None => {}
        }
        self.flush_pending(st, ip);
    }

    /// Sends the frames waiting for `ip` if it has resolved.
    fn flush_pending(&self, st: &mut State, ip: Ipv4Addr) {
        let Some(mac) = st.cache.get(&ip).map(|e| e.mac) else {
            return;
        };
        if let Some(p) = st.pending.remove(&ip) {
            for f in p.frames {
                self.send_ipv4(st, mac, &f);
            }
        }
    }

    /// Runs the ARP timers: retries, give-ups, delayed replies.
    fn timers(&self, st: &mut State) {
        let now = Instant::now();
        if !st.delayed.is_empty() {
            let (due, later): (Vec<_>, Vec<_>) = st.delayed.drain(..).partition(|(t, _)| *t <= now);
            st.delayed = later;
            for (_, f) in due {
                self.send_raw(st, &f);
                st.stats.arp_replies_sent += 1;
            }
        }
        let due: Vec<Ipv4Addr> = st
            .pending
            .iter()
            .filter(|(_, p)| p.next <= now)
            .map(|(ip, _)| *ip)
            .collect();
        for ip in due {
            let give_up = st
                .pending
                .get(&ip)
                .is_some_and(|p| p.sent >= self.cfg.max_requests);
            if give_up {
                if let Some(p) = st.pending.remove(&ip) {
                    st.stats.tx_unresolved += p.frames.len() as u64;
                }
                continue;
            }
            self.send_request(st, ip);
            if let Some(p) = st.pending.get_mut(&ip) {
                p.sent += 1;
                p.next = now + self.cfg.retry_interval;
            }
        }
    }

    /// Starts resolving `ip` (no-op if known or already in progress).
    fn start_resolve(&self, st: &mut State, ip: Ipv4Addr) {
        if st.cache.contains_key(&ip) || st.pending.contains_key(&ip) {
            return;
        }
        self.send_request(st, ip);
        st.pending.insert(
            ip,
            Pending {
                frames: VecDeque::new(),
                sent: 1,
                next: Instant::now() + self.cfg.retry_interval,
            },
        );
    }

    fn on_arp(&self, st: &mut State, body: &[u8]) {
        let Ok(arp) = ArpPacket::from_bytes(body) else {
            st.stats.rx_ignored += 1;
            return;
        };
        let for_me = arp.target_ip == self.ip;
        match arp.op {
            ArpOp::Request if for_me => {
                st.stats.arp_requests_received += 1;
                // RFC 826: the requester is a neighbour worth knowing.
                self.learn(st, arp.sender_ip, arp.sender_mac, true);
                let reply = ArpPacket::reply_to(&arp, self.mac, self.ip).frame();
                if self.cfg.reply_delay.is_zero() {
                    self.send_raw(st, &reply);
                    st.stats.arp_replies_sent += 1;
                } else {
                    st.delayed
                        .push((Instant::now() + self.cfg.reply_delay, reply));
                }
            }
            ArpOp::Request => {
                // Someone else's question; refresh an entry we already have (gratuitous ARP).
                self.learn(st, arp.sender_ip, arp.sender_mac, false);
                st.stats.rx_ignored += 1;
            }
            ArpOp::Reply => {
                st.stats.arp_replies_received += 1;
                let asked = st.pending.contains_key(&arp.sender_ip);
                self.learn(st, arp.sender_ip, arp.sender_mac, for_me || asked);
            }
        }
    }

    /// An ICMP echo request to us: the reply, or `None` if `ip` is not one.
    fn echo_reply(&self, hdr: &Ipv4Header, ip: &[u8]) -> Option<Vec<u8>> {
        let icmp = ip.get(Ipv4Header::LEN..)?;
        if hdr.protocol != IPPROTO_ICMP || icmp.len() < 8 || icmp[0] != 8 || icmp[1] != 0 {
            return None;
        }
        if internet_checksum(0, icmp) != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(ip.len());
        let h = Ipv4Header {
            src: hdr.dst,
            dst: hdr.src,
            ttl: 64,
            ..*hdr
        };
        out.extend_from_slice(&h.to_bytes());
        let mut body = icmp.to_vec();
        body[0] = 0;
        body[2] = 0;
        body[3] = 0;
        let c = internet_checksum(0, &body);
        body[2..4].copy_from_slice(&c.to_be_bytes());
        out.extend_from_slice(&body);
        Some(out)
    }

    fn on_ipv4(&self, st: &mut State, eth: &EthHeader, data: &[u8]) {
        if eth.dst != self.mac {
            st.stats.rx_ignored += 1;
            return;
        }
        let Ok(hdr) = Ipv4Header::from_bytes(data) else {
            st.stats.rx_ignored += 1;
            return;
        };
        let total = usize::from(hdr.total_length);
        if total < Ipv4Header::LEN || total > data.len() || hdr.dst != self.ip {
            st.stats.rx_ignored += 1;
            return;
        }
        // Padding after the datagram (e1000 pads to 60 bytes) is not part of it.
        let ip = &data[..total];
        if let Some(reply) = self.echo_reply(&hdr, ip) {
            self.send_ipv4(st, eth.src, &reply);
            st.stats.icmp_echo_replies += 1;
            return;
        }
        let roce = hdr.protocol == crate::packet::IPPROTO_UDP
            && !hdr.more_fragments
            && hdr.fragment_offset == 0
            && ip.len() >= Ipv4Header::LEN + 8
            && u16::from_be_bytes([ip[22], ip[23]]) == ROCE_V2_UDP_DPORT;
        if !roce {
            st.stats.rx_ignored += 1;
            return;
        }
        if take_drop(st, false, ip) {
            return;
        }
        st.stats.rx_delivered += 1;
        st.rxq.push_back(ip.to_vec());
    }

    fn on_frame(&self, st: &mut State, f: &[u8]) {
        let Ok(eth) = EthHeader::from_bytes(f) else {
            st.stats.rx_ignored += 1;
            return;
        };
        if !frame_for_me(&eth.dst, &self.mac) {
            st.stats.rx_ignored += 1;
            return;
        }
        let data = &f[EthHeader::LEN..];
        match eth.ethertype {
            ETHERTYPE_ARP => self.on_arp(st, data),
            ETHERTYPE_IPV4 => self.on_ipv4(st, &eth, data),
            _ => st.stats.rx_ignored += 1,
        }
    }

    /// Takes in everything the socket has, then runs the timers.
    fn pump(&self) -> Result<(), FabricError> {
        let mut buf = lock(&self.rx_buf);
        loop {
            let (n, from) = match self.socket.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let mut st = self.state();
            st.stats.rx_frames += 1;
            record(&mut st, false, &buf[..n]);
            // Only the link's peer is on this wire.
            if from != SocketAddr::V4(self.remote) {
                st.stats.rx_ignored += 1;
                continue;
            }
            self.on_frame(&mut st, &buf[..n]);
        }
        drop(buf);
        let mut st = self.state();
        self.timers(&mut st);
        Ok(())
    }
}

/// A port on an [`EthLink`]: a station with a MAC and an IPv4 address on the virtual wire.
pub struct EthPort {
    shared: Arc<Shared>,
}

impl EthPort {
    /// The socket's receive buffer as the OS reports it (`SO_RCVBUF`; the link asked for
    /// [`super::SOCKET_RCVBUF`]).
    pub fn receive_buffer(&self) -> Result<usize, FabricError> {
        super::receive_buffer(&self.shared.socket)
    }

    /// A handle on this port for other threads (neighbour cache, counters).
    pub fn handle(&self) -> EthHandle {
        EthHandle {
            shared: self.shared.clone(),
        }
    }

    /// The port's Ethernet address.
    pub fn mac(&self) -> Mac {
        self.shared.mac
    }
}

impl Port for EthPort {
    fn addr(&self) -> Ipv4Addr {
        self.shared.ip
    }

    fn send(&self, frame: Vec<u8>) -> Result<(), FabricError> {
        let (src, dst) =
            peek_ipv4_addrs(&frame).ok_or(FabricError::Malformed(WireError::NotIpv4))?;
        if src != self.shared.ip {
            return Err(FabricError::SourceMismatch {
                port: self.shared.ip,
                frame: src,
            });
        }
        let s = &self.shared;
        let mut st = s.state();
        if let Some(e) = st.cache.get(&dst) {
            let mac = e.mac;
            s.send_ipv4(&mut st, mac, &frame);
            return Ok(());
        }
        s.start_resolve(&mut st, dst);
        let limit = s.cfg.queue_limit.max(1);
        let mut dropped = 0;
        if let Some(p) = st.pending.get_mut(&dst) {
            p.frames.push_back(frame);
            while p.frames.len() > limit {
                p.frames.pop_front();
                dropped += 1;
            }
        }
        st.stats.tx_unresolved += dropped;
        Ok(())
    }

    fn recv(&self) -> Result<Option<Vec<u8>>, FabricError> {
        if let Some(f) = self.shared.state().rxq.pop_front() {
            return Ok(Some(f));
        }
        self.shared.pump()?;
        Ok(self.shared.state().rxq.pop_front())
    }

    fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, FabricError> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(f) = self.recv()? {
                return Ok(Some(f));
            }
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            std::thread::sleep((end - now).min(Duration::from_micros(200)));
        }
    }
}

/// Another thread's view of an [`EthPort`]: its neighbour cache and counters.
#[derive(Clone)]
pub struct EthHandle {
    shared: Arc<Shared>,
}

impl EthHandle {
    /// The port's Ethernet address.
    pub fn mac(&self) -> Mac {
        self.shared.mac
    }

    /// The port's IPv4 address on the virtual wire.
    pub fn ip(&self) -> Ipv4Addr {
        self.shared.ip
    }

    /// The counters.
    pub fn stats(&self) -> EthStats {
        self.shared.state().stats
    }

    /// The MAC of `ip` if the cache has it.
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<Mac> {
        self.shared.state().cache.get(&ip).map(|e| e.mac)
    }

    /// Every cache entry (static and learnt), by address.
    pub fn neighbors(&self) -> Vec<(Ipv4Addr, Mac)> {
        self.shared
            .state()
            .cache
            .iter()
            .map(|(ip, e)| (*ip, e.mac))
            .collect()
    }

    /// Adds (or replaces) a static entry, which ARP never changes: the equivalent of
    /// `arp -s` (and of the CM's `add_neighbor`). Frames waiting for `ip` go out at once.
    pub fn add_static(&self, ip: Ipv4Addr, mac: Mac) {
        let s = &self.shared;
        let mut st = s.state();
        st.seq += 1;
        let seq = st.seq;
        st.cache.insert(
            ip,
            Entry {
                mac,
                fixed: true,
                seq,
            },
        );
        s.flush_pending(&mut st, ip);
    }

    /// Starts recording every frame sent and received (up to [`CAPTURE_LIMIT`]), dropping
    /// what an earlier capture recorded.
    pub fn start_capture(&self) {
        self.shared.state().capture = Some(Vec::new());
    }

    /// Stops recording and returns the frames, in order.
    pub fn take_capture(&self) -> Vec<Captured> {
        self.shared.state().capture.take().unwrap_or_default()
    }

    /// Loses the next RoCEv2 frame with BTH opcode `op` that this port sends (`tx`) or
    /// receives (`!tx`), once: a fault for retransmission tests. Counted in
    /// [`EthStats::test_drops`].
    pub fn drop_next(&self, tx: bool, op: Opcode) {
        self.shared.state().drops.push((tx, op));
    }

    /// Removes an entry (static or learnt).
    pub fn remove(&self, ip: Ipv4Addr) {
        self.shared.state().cache.remove(&ip);
    }

    /// The cached MAC of `ip`, else starts resolving it by ARP without waiting (a request
    /// now, retried by the port's timers as configured; nothing new while one is in
    /// progress) and gives `None`: what a connection manager's address resolution asks on
    /// each of its passes.
    pub fn solicit(&self, ip: Ipv4Addr) -> Option<Mac> {
        let s = &self.shared;
        let mut st = s.state();
        if let Some(e) = st.cache.get(&ip) {
            return Some(e.mac);
        }
        s.start_resolve(&mut st, ip);
        None
    }

    /// Resolves `ip` by ARP, waiting up to `timeout`: the cached MAC at once, else ARP
    /// requests (retried as configured) until a reply arrives. Takes in frames meanwhile (IPv4
    /// frames are kept for the port's owner). `None` when nobody answered.
    pub fn resolve(&self, ip: Ipv4Addr, timeout: Duration) -> Result<Option<Mac>, FabricError> {
        let end = Instant::now() + timeout;
        {
            let s = &self.shared;
            let mut st = s.state();
            if let Some(e) = st.cache.get(&ip) {
                return Ok(Some(e.mac));
            }
            s.start_resolve(&mut st, ip);
        }
        loop {
            self.shared.pump()?;
            if let Some(m) = self.lookup(ip) {
                return Ok(Some(m));
            }
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            std::thread::sleep((end - now).min(Duration::from_millis(1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Bth, Opcode, Packet};

    fn sa(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
    }

    const HOST_MAC: Mac = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];
    const PEER_MAC: Mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const PEER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

    /// Our port on one end, a raw socket standing in for QEMU on the other.
    fn port_and_raw(a: u16, b: u16, arp: ArpConfig) -> (EthPort, UdpSocket) {
        let mut link = EthLink::new(sa(a), sa(b), HOST_MAC);
        link.arp = arp;
        let port = link.bind(HOST).unwrap();
        let raw = UdpSocket::bind(sa(b)).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        (port, raw)
    }

    fn raw_recv(raw: &UdpSocket) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let (n, from) = raw.recv_from(&mut buf).unwrap();
        assert_eq!(from.ip(), std::net::IpAddr::V4(Ipv4Addr::LOCALHOST));
        buf.truncate(n);
        buf
    }

    fn raw_none(raw: &UdpSocket, wait: Duration) {
        raw.set_read_timeout(Some(wait)).unwrap();
        let mut buf = vec![0u8; 2048];
        let r = raw.recv_from(&mut buf);
        assert!(
            r.is_err(),
            "unexpected frame {:02x?}",
            r.map(|(n, _)| buf[..n].to_vec())
        );
        raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }

    /// Pumps the port until `cond` holds (2 s at most).
    fn pump_until(port: &EthPort, mut cond: impl FnMut(&EthPort) -> bool) {
        let end = Instant::now() + Duration::from_secs(2);
        while !cond(port) {
            assert!(Instant::now() < end, "timed out");
            let _ = port.recv().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The link's socket asks for a larger receive buffer than the OS's default (Linux caps
    /// the request at `net.core.rmem_max` and counts its bookkeeping in, never below the
    /// default).
    #[test]
    fn socket_asks_for_a_larger_receive_buffer() {
        let plain = UdpSocket::bind(sa(0)).unwrap();
        let default = crate::fabric::receive_buffer(&plain).unwrap();
        let (port, _raw) = port_and_raw(48094, 48095, ArpConfig::default());
        let got = port.receive_buffer().unwrap();
        assert!(got > default, "SO_RCVBUF {got}, the default {default}");
        let e = FabricError::ReceiveBuffer {
            bytes: crate::fabric::SOCKET_RCVBUF,
            error: io::ErrorKind::PermissionDenied,
        };
        assert!(e.to_string().contains("SO_RCVBUF"), "{e}");
    }

    #[test]
    fn answers_captured_arp_request() {
        let (port, raw) = port_and_raw(48000, 48001, ArpConfig::default());
        let req = ArpPacket::request(PEER_MAC, PEER, HOST).frame();
        raw.send_to(&req, sa(48000)).unwrap();
        pump_until(&port, |p| p.handle().stats().arp_replies_sent == 1);
        // The reply the guest accepted in the probe, byte for byte.
        let expect: [u8; 42] = [
            0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x06,
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01,
            0x0a, 0x4d, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x4d, 0x00, 0x02,
        ];
        assert_eq!(raw_recv(&raw), expect);
        // The requester was learnt.
        assert_eq!(port.handle().lookup(PEER), Some(PEER_MAC));
        // A request for another address is not answered.
        let other = ArpPacket::request(PEER_MAC, PEER, Ipv4Addr::new(10, 77, 0, 9)).frame();
        raw.send_to(&other, sa(48000)).unwrap();
        pump_until(&port, |p| p.handle().stats().rx_frames == 2);
        raw_none(&raw, Duration::from_millis(100));
        assert_eq!(port.handle().stats().arp_replies_sent, 1);
    }

    #[test]
    fn resolves_with_retries_then_sends_queued_frames() {
        let arp = ArpConfig {
            retry_interval: Duration::from_millis(30),
            ..ArpConfig::default()
        };
        let (port, raw) = port_and_raw(48002, 48003, arp);
        let pkt = Packet::new(
            HOST,
            PEER,
            Bth::new(Opcode::RcSendOnly, 0x11, 5),
            vec![7u8; 8],
        );
        let ip_frame = pkt.encode().unwrap();
        port.send(ip_frame.clone()).unwrap();
        port.send(ip_frame.clone()).unwrap();
        // First request at once, a retry after the interval (unanswered).
        let want_req = ArpPacket::request(HOST_MAC, HOST, PEER).frame();
        assert_eq!(raw_recv(&raw), want_req);
        pump_until(&port, |p| p.handle().stats().arp_requests_sent == 2);
        assert_eq!(raw_recv(&raw), want_req);
        // Answer: both queued frames go out, wrapped in Ethernet to the peer's MAC.
        let rep =
            ArpPacket::reply_to(&ArpPacket::request(HOST_MAC, HOST, PEER), PEER_MAC, PEER).frame();
        raw.send_to(&rep, sa(48002)).unwrap();
        pump_until(&port, |p| p.handle().lookup(PEER).is_some());
        for _ in 0..2 {
            let f = raw_recv(&raw);
            assert_eq!(&f[..6], &PEER_MAC);
            assert_eq!(&f[6..12], &HOST_MAC);
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            assert_eq!(&f[14..], &ip_frame[..]);
        }
        // Resolved: the next frame goes straight out.
        port.send(ip_frame.clone()).unwrap();
        assert_eq!(&raw_recv(&raw)[14..], &ip_frame[..]);
        assert_eq!(port.handle().stats().tx_unresolved, 0);
        // A planned loss takes the next matching frame, once.
        port.handle().drop_next(true, Opcode::RcSendOnly);
        port.handle().drop_next(true, Opcode::RcAcknowledge); // never matches here
        port.send(ip_frame.clone()).unwrap();
        raw_none(&raw, Duration::from_millis(50));
        port.send(ip_frame.clone()).unwrap();
        assert_eq!(&raw_recv(&raw)[14..], &ip_frame[..]);
        assert_eq!(port.handle().stats().test_drops, 1);
        // …and on receive.
        let back = Packet::new(
            PEER,
            HOST,
            Bth::new(Opcode::RcSendOnly, 0x12, 9),
            vec![1u8; 4],
        )
        .encode()
        .unwrap();
        let eth = EthHeader {
            dst: HOST_MAC,
            src: PEER_MAC,
            ethertype: ETHERTYPE_IPV4,
        };
        port.handle().drop_next(false, Opcode::RcSendOnly);
        raw.send_to(&eth.frame(&back), sa(48002)).unwrap();
        raw.send_to(&eth.frame(&back), sa(48002)).unwrap();
        assert_eq!(
            port.recv_timeout(Duration::from_secs(2)).unwrap(),
            Some(back)
        );
        assert_eq!(port.recv_timeout(Duration::from_millis(50)).unwrap(), None);
        assert_eq!(port.handle().stats().test_drops, 2);
    }

    #[test]
    fn gives_up_after_max_requests() {
        let arp = ArpConfig {
            retry_interval: Duration::from_millis(5),
            max_requests: 3,
            ..ArpConfig::default()
        };
        let (port, raw) = port_and_raw(48004, 48005, arp);
        let pkt = Packet::new(HOST, PEER, Bth::new(Opcode::RcSendOnly, 0x11, 5), vec![]);
        port.send(pkt.encode().unwrap()).unwrap();
        pump_until(&port, |p| p.handle().stats().tx_unresolved == 1);
        assert_eq!(port.handle().stats().arp_requests_sent, 3);
        for _ in 0..3 {
            assert_eq!(raw_recv(&raw)[12..14], [0x08, 0x06]);
        }
        raw_none(&raw, Duration::from_millis(50));
        // The handle's resolve gives up too, with None.
        assert_eq!(
            port.handle()
                .resolve(PEER, Duration::from_millis(30))
                .unwrap(),
            None
        );
        // Bad source address is refused.
        let bad = Packet::new(PEER, HOST, Bth::new(Opcode::RcSendOnly, 0x11, 5), vec![]);
        assert!(matches!(
            port.send(bad.encode().unwrap()),
            Err(FabricError::SourceMismatch { .. })
        ));
        assert!(matches!(
            port.send(vec![0x60; 40]),
            Err(FabricError::Malformed(_))
        ));
    }

    #[test]
    fn filters_traffic_not_for_it() {
        let (port, raw) = port_and_raw(48006, 48007, ArpConfig::default());
        let roce = Packet::new(
            PEER,
            HOST,
            Bth::new(Opcode::RcSendOnly, 0x11, 5),
            vec![1u8; 4],
        )
        .encode()
        .unwrap();
        let eth = |dst: Mac, ethertype: u16, body: &[u8]| {
            EthHeader {
                dst,
                src: PEER_MAC,
                ethertype,
            }
            .frame(body)
        };
        // IPv6 MLD report to 33:33:00:00:00:16, an IPv6 NS, multicast IPv4, another MAC,
        // another IP, not-RoCE UDP, a runt frame.
        raw.send_to(
            &eth([0x33, 0x33, 0, 0, 0, 0x16], 0x86DD, &[0x60; 76]),
            sa(48006),
        )
        .unwrap();
        raw.send_to(&eth(HOST_MAC, 0x86DD, &[0x60; 72]), sa(48006))
            .unwrap();
        raw.send_to(&eth([0x01, 0, 0x5e, 0, 0, 1], 0x0800, &roce), sa(48006))
            .unwrap();
        raw.send_to(&eth([0x02, 9, 9, 9, 9, 9], 0x0800, &roce), sa(48006))
            .unwrap();
        let other_ip = Packet::new(
            PEER,
            Ipv4Addr::new(10, 77, 0, 3),
            Bth::new(Opcode::RcSendOnly, 0x11, 5),
            vec![],
        )
        .encode()
        .unwrap();
        raw.send_to(&eth(HOST_MAC, 0x0800, &other_ip), sa(48006))
            .unwrap();
        let mut not_roce = roce.clone();
        not_roce[22] = 0x30; // destination port 0x30b7
        raw.send_to(&eth(HOST_MAC, 0x0800, &not_roce), sa(48006))
            .unwrap();
        raw.send_to(&[0u8; 10], sa(48006)).unwrap();
        // Then a real one, padded to 60+ bytes like e1000 does (it is longer anyway: pad
        // explicitly with 8 zero bytes to check trimming).
        let mut padded = eth(HOST_MAC, 0x0800, &roce);
        padded.extend_from_slice(&[0u8; 8]);
        raw.send_to(&padded, sa(48006)).unwrap();
        let end = Instant::now() + Duration::from_secs(2);
        let got = loop {
            if let Some(f) = port.recv().unwrap() {
                break f;
            }
            assert!(Instant::now() < end);
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, roce);
        let st = port.handle().stats();
        assert_eq!(st.rx_ignored, 7, "{st:?}");
        assert_eq!(st.rx_delivered, 1);
        assert_eq!(port.recv().unwrap(), None);
        // A datagram from a socket that is not the link's peer is ignored.
        let stranger = UdpSocket::bind(sa(48008)).unwrap();
        stranger
            .send_to(&eth(HOST_MAC, 0x0800, &roce), sa(48006))
            .unwrap();
        pump_until(&port, |p| p.handle().stats().rx_ignored == 8);
        assert_eq!(port.recv().unwrap(), None);
    }

    #[test]
    fn answers_ping() {
        let (port, raw) = port_and_raw(48009, 48010, ArpConfig::default());
        port.handle().start_capture();
        // The guest's echo request from the probe (98 bytes).
        let mut bytes: Vec<u8> = vec![
            0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x54, 0x13, 0x24, 0x40, 0x00, 0x40, 0x01, 0x12, 0xe9, 0x0a, 0x4d,
            0x00, 0x02, 0x0a, 0x4d, 0x00, 0x01, 0x08, 0x00, 0x97, 0xd3, 0x00, 0x94, 0x00, 0x00,
            0x3a, 0x98, 0x25, 0x00,
        ];
        bytes.resize(98, 0);
        assert_eq!(bytes.len(), 98);
        raw.send_to(&bytes, sa(48009)).unwrap();
        pump_until(&port, |p| p.handle().stats().icmp_echo_replies == 1);
        let r = raw_recv(&raw);
        // The reply the probe sent (and the guest accepted), byte for byte.
        let mut want = bytes.clone();
        want[..6].copy_from_slice(&PEER_MAC);
        want[6..12].copy_from_slice(&HOST_MAC);
        want[26..30].copy_from_slice(&[10, 77, 0, 1]);
        want[30..34].copy_from_slice(&[10, 77, 0, 2]);
        want[34] = 0;
        want[36..38].copy_from_slice(&[0x9f, 0xd3]);
        assert_eq!(r, want);
        let cap = port.handle().take_capture();
        assert_eq!(cap.len(), 2);
        assert_eq!((cap[0].tx, &cap[0].frame), (false, &bytes));
        assert_eq!((cap[1].tx, &cap[1].frame), (true, &want));
        assert!(port.handle().take_capture().is_empty(), "capture stopped");
    }

    #[test]
    fn refuses_non_loopback_sockets() {
        let link = EthLink::new(
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 48011),
            sa(48012),
            HOST_MAC,
        );
        assert!(matches!(link.bind(HOST), Err(FabricError::NotLoopback(_))));
        let link = EthLink::new(sa(48011), sa(48012), [0x01, 0, 0x5e, 0, 0, 1]);
        assert!(link.bind(HOST).is_err());
        let link = EthLink::new(sa(48011), sa(48012), HOST_MAC);
        let _p = link.bind(HOST).unwrap();
        assert!(matches!(link.bind(HOST), Err(FabricError::AddrInUse(_))));
    }

    #[test]
    fn static_entries_win_over_arp() {
        let (port, raw) = port_and_raw(48013, 48014, ArpConfig::default());
        let h = port.handle();
        h.add_static(PEER, [0x02, 1, 2, 3, 4, 5]);
        // A reply claiming another MAC does not change a static entry.
        let rep = ArpPacket {
            op: ArpOp::Reply,
            sender_mac: PEER_MAC,
            sender_ip: PEER,
            target_mac: HOST_MAC,
            target_ip: HOST,
        }
        .frame();
        raw.send_to(&rep, sa(48013)).unwrap();
        pump_until(&port, |p| p.handle().stats().arp_replies_received == 1);
        assert_eq!(h.lookup(PEER), Some([0x02, 1, 2, 3, 4, 5]));
        assert_eq!(h.neighbors(), vec![(PEER, [0x02, 1, 2, 3, 4, 5])]);
        h.remove(PEER);
        assert_eq!(h.lookup(PEER), None);
        // An unsolicited reply for us creates the entry.
        raw.send_to(&rep, sa(48013)).unwrap();
        pump_until(&port, |p| p.handle().stats().arp_replies_received == 2);
        assert_eq!(h.lookup(PEER), Some(PEER_MAC));
    }
}
