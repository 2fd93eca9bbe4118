//! The CM context ([`Cm`]), its devices, the MAD QP of each device, and the progress engine.
//!
//! All state lives in one [`State`] behind a spin lock. Every public call takes the lock,
//! runs [`State::progress`] (which services every device and every id: received MADs,
//! retransmission timers, address resolution), does its work and lets go; a blocking call
//! repeats that with [`Platform::relax`] in between until its condition holds. So one thread
//! can run both ends of a connection: while it waits in one id's call, the engine answers
//! the other id's peer.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::sync::atomic::AtomicU32;

use crate::platform::Platform;
use verbs::{Mtu, Provider, QpType};

use crate::addr::PortSpace;
use crate::config::{CmConfig, CmStats};
use crate::conn::{Conn, Fsm, IdState, Orphan, Peer, Retx};
use crate::device::{Dev, DeviceId, Neighbor, PdRec};
use crate::error::Error;
use crate::event::{Chan, EventParam, EventRec, EventType};
use crate::mad::{CmMad, CmMessage, MadBytes};
use crate::resources::new_path;
use crate::slab::{Key, Slab};
use crate::transport::{Received, Transport};

/// Random numbers for communication IDs and PSNs (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn psn(&mut self) -> u32 {
        (self.next() >> 40) as u32 & 0xFF_FFFF
    }
}

pub(crate) struct State<P: Provider> {
    pub cfg: CmConfig,
    pub now: u64,
    pub cm_uid: u32,
    pub devs: Slab<Dev<P>>,
    pub ids: Slab<IdState<P>>,
    pub chans: Slab<Chan>,
    pub neighbors: Vec<(Ipv4Addr, Neighbor)>,
    pub orphans: Vec<Orphan>,
    /// Received MADs not yet dispatched.
    rx: Vec<Received>,
    pub rng: Rng,
    comm_id_seq: u32,
    comm_id_mask: u32,
    pub eph_cursor: u16,
    pub stats: CmStats,
}

pub(crate) struct Shared<P: Provider> {
    pub platform: Box<dyn Platform + Send + Sync>,
    pub st: spin::Mutex<State<P>>,
}

/// The connection manager of one program: its RDMA devices, ids and event channels
/// (librdmacm's process-wide state). Cloning gives another handle to the same manager.
pub struct Cm<P: Provider> {
    pub(crate) sh: Arc<Shared<P>>,
}

impl<P: Provider> Clone for Cm<P> {
    fn clone(&self) -> Self {
        Cm {
            sh: self.sh.clone(),
        }
    }
}

pub(crate) static NEXT_CM: AtomicU32 = AtomicU32::new(1);

/// 4.096 µs × 2^exp, in ns.
pub(crate) const fn ib_time_ns(exp: u8) -> u64 {
    4096u64 << (exp as u32 & 31)
}

pub(crate) fn mtu_from_code(c: u8) -> Option<Mtu> {
    Some(match c {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// A zero-padded copy of `data` in an array of `N` bytes (`data.len() <= N` checked by the
/// caller).
pub(crate) fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = data.len().min(N);
    a[..n].copy_from_slice(&data[..n]);
    a
}

// ------------------------------------------------------------------ state: devices, ids, events

impl<P: Provider> State<P> {
    /// A manager's state; `entropy` (the platform's) is mixed into the configured seed, so
    /// `0` keeps the configured seed as it is.
    pub(crate) fn new(cfg: CmConfig, cm_uid: u32, entropy: u64) -> State<P> {
        let mut rng = Rng((cfg.seed ^ entropy) | 1);
        let comm_id_mask = rng.next() as u32;
        let eph_cursor = (rng.next() % 28232) as u16;
        State {
            cfg,
            now: 0,
            cm_uid,
            devs: Slab::default(),
            ids: Slab::default(),
            chans: Slab::default(),
            neighbors: Vec::new(),
            orphans: Vec::new(),
            rx: Vec::new(),
            rng,
            comm_id_seq: 0,
            comm_id_mask,
            eph_cursor,
            stats: CmStats::default(),
        }
    }

    pub fn device_id(&self, key: Key) -> DeviceId {
        DeviceId {
            cm: self.cm_uid,
            key,
        }
    }

    /// The key of a device id of this manager.
    pub fn dev_key(&self, d: DeviceId) -> Option<Key> {
        (d.cm == self.cm_uid && self.devs.contains(d.key)).then_some(d.key)
    }

    pub fn neighbor(&self, ip: Ipv4Addr) -> Option<Neighbor> {
        self.neighbors
            .iter()
            .find(|(i, _)| *i == ip)
            .map(|(_, n)| *n)
    }

    /// The peer at `ip` on QP `qpn`, if its MAC is known: from the neighbour table, else
    /// from device `d`'s resolver (which, not knowing it yet, sends an ARP request: the
    /// message that asked is dropped, and its retransmission finds the answer, as a kernel's
    /// CM resolves the sender of a REQ).
    pub(crate) fn peer(&mut self, d: Key, ip: Ipv4Addr, qpn: u32) -> Option<Peer> {
        let no_link = !self.ib_cm(d);
        let known = self.neighbor(ip).or_else(|| {
            // a device without Ethernet (EFA): no link address to resolve
            if no_link {
                return Some(Neighbor { mac: [0; 6] });
            }
            let r = self.devs.get(d)?.resolver.clone()?;
            let nb = r.resolve_neighbor(ip).ok()??;
            self.set_neighbor(ip, nb);
            Some(nb)
        });
        known.map(|nb| Peer {
            ip,
            mac: nb.mac,
            qpn,
        })
    }

    /// Whether device `d` has the IB CM on QP1 (the MAD transport). A device with the
    /// datagram transport (EFA) has neither the IB CM nor iWARP's: as on Linux, its ids can
    /// resolve addresses but connected (RC) ids cannot resolve routes, listen or connect
    /// (ENOSYS, the kernel rdma_cm's answer for such a device in `rdma_resolve_route`,
    /// `rdma_listen` and `rdma_connect`).
    pub(crate) fn ib_cm(&self, d: Key) -> bool {
        self.devs
            .get(d)
            .and_then(|x| x.transport.as_ref())
            .is_none_or(|t| t.ib_cm())
    }

    pub(crate) fn dev_ips(&self) -> Vec<Ipv4Addr> {
        self.devs.iter().map(|(_, d)| d.ip).collect()
    }

    pub fn dev_by_ip(&self, ip: Ipv4Addr) -> Option<Key> {
        self.devs.iter().find(|(_, d)| d.ip == ip).map(|(k, _)| k)
    }

    pub(crate) fn next_comm_id(&mut self) -> u32 {
        loop {
            self.comm_id_seq = self.comm_id_seq.wrapping_add(1);
            let id = self.comm_id_seq ^ self.comm_id_mask;
            if id != 0 && !self.ids.iter().any(|(_, s)| s.conn.local_comm_id == id) {
                return id;
            }
        }
    }

    /// Binds an id to a device: one reference, the default PD allocated if needed.
    pub fn acquire_dev(&mut self, id: Key, d: Key) -> Result<(), Error> {
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        if dev.default_pd.is_none() {
            let pd = dev.provider.alloc_pd()?;
            dev.default_pd = Some(dev.pds.insert(PdRec { pd, users: 0 }));
        }
        dev.refcnt += 1;
        let pd = dev.default_pd;
        let s = self.ids.get_mut(id).ok_or(Error::InvalidArgument)?;
        s.path.lock().provider = Some(dev.provider.clone());
        s.dev = Some(d);
        s.pd = pd;
        s.has_dev_ref = true;
        Ok(())
    }

    /// Drops an id's device reference; the last one frees the default PD (an EBUSY from the
    /// provider, MRs still registered on it, leaves it allocated but no longer default, as
    /// librdmacm drops it).
    pub(crate) fn release_dev(&mut self, id: Key) {
        let Some(s) = self.ids.get_mut(id) else {
            return;
        };
        if !s.has_dev_ref {
            return;
        }
        s.has_dev_ref = false;
        {
            // a QP that could not be destroyed keeps the provider it needs
            let mut path = s.path.lock();
            if path.qp.is_none() {
                path.provider = None;
            }
        }
        let Some(d) = s.dev else { return };
        let Some(dev) = self.devs.get_mut(d) else {
            return;
        };
        dev.refcnt = dev.refcnt.saturating_sub(1);
        if dev.refcnt == 0
            && let Some(k) = dev.default_pd.take()
            && dev.pds.get(k).is_some_and(|r| r.users == 0)
            && let Some(rec) = dev.pds.remove(k)
            && let Err(e) = dev.provider.dealloc_pd(rec.pd)
            && let Some(pd) = e.object
        {
            dev.pds.insert(PdRec { pd, users: 0 });
        }
    }

    pub fn new_id(
        &mut self,
        chan: Key,
        sync: bool,
        context: u64,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Key {
        self.ids.insert(IdState {
            ps,
            qp_type,
            context,
            chan,
            sync,
            dev: None,
            pd: None,
            has_dev_ref: false,
            src: None,
            dst: None,
            port_reserved: false,
            fsm: Fsm::Idle,
            route: None,
            resolve_dev: None,
            addr_deadline: 0,
            peer: None,
            qp: None,
            path: new_path(),
            srq: None,
            saved: None,
            saved_pd: None,
            backlog: 0,
            queued_requests: 0,
            listener: None,
            conn: Conn::default(),
            last_event: None,
            owned: true,
            initiator_depth: 0,
            responder_resources: 0,
            connect_error: false,
            tos: None,
            reuseaddr: false,
            afonly: false,
            ack_timeout: None,
            timewait_until: None,
        })
    }

    /// Queues an event on the id's channel (a connection request: on the listener's).
    pub fn push_event(
        &mut self,
        id: Key,
        ty: EventType,
        status: i32,
        param: EventParam,
        listen: Option<Key>,
    ) {
        let chan_owner = listen.unwrap_or(id);
        let Some(ch) = self.ids.get(chan_owner).map(|s| s.chan) else {
            return;
        };
        if let Some(c) = self.chans.get_mut(ch) {
            c.queue.push_back(EventRec {
                ty,
                status,
                id,
                listen,
                param,
            });
        }
    }

    // -------------------------------------------------------------- MAD sending

    /// Sends `mad` to `to` on device `d`'s transport; `req_qp_type` is the QP type a SIDR_REQ
    /// asks for ([`dgram_qp_type`](crate::mad::dgram_qp_type), 0 for other messages).
    pub(crate) fn send_to(&mut self, d: Key, to: &Peer, mad: &MadBytes, req_qp_type: u8) {
        let mut bad = 0;
        let ok = match self.devs.get_mut(d) {
            Some(dev) => match dev.transport.as_mut() {
                Some(t) => {
                    if !t.can_send() {
                        // reap send completions; what arrived meanwhile waits in `rx`
                        t.poll(&dev.provider, d, &mut self.rx, &mut bad);
                    }
                    t.send(&dev.provider, to, mad, req_qp_type)
                }
                None => false,
            },
            None => false,
        };
        self.stats.bad_mads += bad;
        if ok {
            self.stats.mads_sent += 1;
        } else {
            self.stats.send_failures += 1;
        }
    }

    pub(crate) fn tid(&self, d: Key, comm_id: u32) -> u64 {
        let agent = self.devs.get(d).map_or(0, |x| x.agent);
        (agent as u64) << 32 | comm_id as u64
    }

    /// Sends `msg` for id `k` to its peer; with `retx`, arms the retransmission timer with
    /// `timeout_ns` and `retries`.
    pub(crate) fn send_for(&mut self, k: Key, tid: u64, msg: CmMessage, retx: Option<(u64, u8)>) {
        self.send_for_attr(k, tid, 0, msg, retx)
    }

    /// [`send_for`](Self::send_for) with the MAD header's attribute modifier `attr_mod`.
    pub(crate) fn send_for_attr(
        &mut self,
        k: Key,
        tid: u64,
        attr_mod: u32,
        msg: CmMessage,
        retx: Option<(u64, u8)>,
    ) {
        let Some(s) = self.ids.get(k) else { return };
        let Some(d) = s.dev else { return };
        let peer = s.conn.peer;
        // a SIDR_REQ says which QP type it wants (where the transport has room for it)
        let req_qp_type = match msg {
            CmMessage::SidrReq(_) => crate::dgram::header_qp_type(s.qp_type),
            _ => crate::mad::dgram_qp_type::UNSAID,
        };
        let bytes = CmMad { tid, attr_mod, msg }.encode();
        self.send_to(d, &peer, &bytes, req_qp_type);
        let now = self.now;
        if let Some(s) = self.ids.get_mut(k) {
            match retx {
                Some((timeout_ns, tries)) => {
                    s.conn.retx = Some(Retx {
                        mad: Box::new(bytes),
                        req_qp_type,
                        deadline: now + timeout_ns,
                        timeout_ns,
                        tries_left: tries,
                    })
                }
                None => s.conn.last_reply = Some(Box::new(bytes)),
            }
        }
    }

    pub(crate) fn cm_timeout_ns(&self, exp: u8) -> u64 {
        ib_time_ns(exp) + 2 * ib_time_ns(self.cfg.packet_life_time)
    }

    pub(crate) fn push_orphan(&mut self, dev: Key, peer: Peer, local_comm_id: u32, retx: Retx) {
        self.orphans.push(Orphan {
            dev,
            peer,
            local_comm_id,
            retx,
        });
    }

    /// A DREP answered an orphaned DREQ.
    pub(crate) fn orphans_drop(&mut self, local_comm_id: u32) {
        self.orphans.retain(|o| o.local_comm_id != local_comm_id);
    }

    pub(crate) fn orphan_timers(&mut self) {
        let now = self.now;
        let mut resend = Vec::new();
        self.orphans.retain_mut(|o| {
            if o.retx.deadline > now {
                return true;
            }
            if o.retx.tries_left == 0 {
                return false;
            }
            o.retx.tries_left -= 1;
            o.retx.deadline = now + o.retx.timeout_ns;
            resend.push((o.dev, o.peer, *o.retx.mad, o.retx.req_qp_type));
            true
        });
        for (d, peer, bytes, req_qp_type) in resend {
            self.stats.retransmits += 1;
            self.send_to(d, &peer, &bytes, req_qp_type);
        }
    }

    // -------------------------------------------------------------- progress

    /// Services every device and id once.
    /// Reads the devices' asynchronous events (a bounded number per pass): COMM_EST of a
    /// QP stands for its RTU; each is kept for the application.
    fn async_events(&mut self) {
        let mut est: Vec<(Key, u32)> = Vec::new();
        for k in self.devs.keys() {
            let Some(dev) = self.devs.get_mut(k) else {
                continue;
            };
            for _ in 0..64 {
                let Ok(Some(ev)) = dev.provider.get_async_event() else {
                    break;
                };
                if let (verbs::AsyncEventType::CommEst, verbs::AsyncElement::Qp(qpn)) =
                    (ev.event_type, ev.element)
                {
                    est.push((k, qpn));
                }
                if dev.async_events.len() >= crate::device::ASYNC_EVENT_QUEUE {
                    dev.async_events.pop_front();
                    self.stats.async_events_dropped += 1;
                }
                dev.async_events.push_back(ev);
            }
        }
        for (d, qpn) in est {
            self.comm_est(d, qpn);
        }
    }

    pub fn progress(&mut self) {
        let mut bad = 0;
        for k in self.devs.keys() {
            if let Some(dev) = self.devs.get_mut(k) {
                dev.release_held_cqs();
            }
            if let Some(dev) = self.devs.get_mut(k)
                && let Some(t) = dev.transport.as_mut()
            {
                t.poll(&dev.provider, k, &mut self.rx, &mut bad);
                // a transport in error (a hostile datagram, a device fault) is reset here,
                // and the ids' retransmissions carry on over it
                match t.recover(&dev.provider) {
                    Some(true) => self.stats.transport_resets += 1,
                    Some(false) => self.stats.transport_reset_failures += 1,
                    None => {}
                }
            }
        }
        self.stats.bad_mads += bad;
        if self.cfg.watch_async_events {
            self.async_events();
        }
        let got = core::mem::take(&mut self.rx);
        self.stats.mads_received += got.len() as u64;
        for r in got {
            self.on_mad(r.dev, r.src, r.src_qp, r.req_qp_type, &r.bytes);
        }
        self.timers();
    }
}
