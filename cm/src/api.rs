//! The public calls of [`Cm`]: devices, PDs, channels, ids, endpoints; and the waiting
//! machinery every blocking call shares.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::{SocketAddr, SocketAddrV4};
use core::sync::atomic::Ordering;

use crate::platform::Platform;
use verbs::Provider;

use crate::Cm;
use crate::addr::{AddrInfo, PortSpace, RaiFlags};
use crate::config::{CmConfig, CmStats};
use crate::device::{CmPd, Dev, DeviceId, DeviceInfo, Neighbor, PdRec, guid_of};
use crate::dgram::Dgram;
use crate::error::Error;
use crate::event::{Chan, CmEvent, EventChannel, EventRec, EventType};
use crate::gsi::Gsi;
use crate::id::{CmId, IdHandle, QpInitAttr};
use crate::ops::saved_attr;
use crate::slab::Key;
use crate::state::{NEXT_CM, Shared, State};
use crate::transport::{DevTransport, Transport};

/// Time `create_ep` gives address and route resolution (librdmacm's).
const EP_TIMEOUT_MS: u32 = 2000;

/// The IPv4 address of a socket address (IPv6: EAFNOSUPPORT).
pub(crate) fn v4(a: &SocketAddr) -> Result<SocketAddrV4, Error> {
    match a {
        SocketAddr::V4(a) => Ok(*a),
        SocketAddr::V6(_) => Err(Error::AfNotSupported),
    }
}

/// The error a synchronous call returns for the event that completed it (librdmacm's
/// `ucma_complete`): REJECTED → ECONNREFUSED whatever the reason, another non-zero status →
/// that errno (its absolute value).
pub(crate) fn event_result(ev: &EventRec) -> Result<(), Error> {
    if ev.ty == EventType::Rejected {
        return Err(Error::ConnectionRefused);
    }
    match ev.status {
        0 => Ok(()),
        s => Err(Error::from_errno(s.saturating_abs())),
    }
}

impl<P: Provider> Cm<P> {
    /// A connection manager with no device yet. `platform` supplies the clock for timeouts
    /// and the relax hook blocking calls spin on (where an in-process device makes progress).
    pub fn new(platform: impl Platform + Send + Sync + 'static, cfg: CmConfig) -> Cm<P> {
        let uid = NEXT_CM.fetch_add(1, Ordering::Relaxed);
        let entropy = platform.entropy();
        Cm {
            sh: Arc::new(Shared {
                platform: Box::new(platform),
                st: spin::Mutex::new(State::new(cfg, uid, entropy)),
            }),
        }
    }

    /// Runs `f` on the state (after refreshing the clock), without the progress engine.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State<P>) -> R) -> R {
        let now = self.sh.platform.now_ns();
        let mut st = self.sh.st.lock();
        st.now = now;
        f(&mut st)
    }

    /// Runs the progress engine until `f` has an answer, relaxing in between.
    pub(crate) fn wait<R>(
        &self,
        f: impl FnMut(&mut State<P>) -> Option<Result<R, Error>>,
    ) -> Result<R, Error> {
        self.wait_sleeping(f, || Ok(false))
    }

    /// [`wait`](Self::wait) whose pauses between two passes are `sleep`'s (a wait for an
    /// interrupt, bounded in time) when it says it slept (`Ok(true)`), else the platform's
    /// relax hook; an error of `sleep` ends the wait.
    pub(crate) fn wait_sleeping<R>(
        &self,
        mut f: impl FnMut(&mut State<P>) -> Option<Result<R, Error>>,
        mut sleep: impl FnMut() -> Result<bool, Error>,
    ) -> Result<R, Error> {
        let start = self.sh.platform.now_ns();
        loop {
            let now = self.sh.platform.now_ns();
            let limit = {
                let mut st = self.sh.st.lock();
                st.now = now;
                st.progress();
                if let Some(r) = f(&mut st) {
                    return r;
                }
                st.cfg.wait_limit_ns
            };
            if limit.is_some_and(|l| now.saturating_sub(start) > l) {
                return Err(Error::TimedOut);
            }
            if !sleep()? {
                self.sh.platform.relax();
            }
        }
    }

    /// The application's handle of id `key`.
    pub(crate) fn id_of(&self, key: Key) -> CmId<P> {
        let path = self.with_state(|st| st.ids.get(key).map(|s| s.path.clone()));
        CmId {
            cm: self.clone(),
            key,
            path: path.unwrap_or_else(crate::resources::new_path),
        }
    }

    /// One pass of the progress engine (for programs that poll instead of blocking).
    pub fn progress(&self) {
        self.with_state(|st| st.progress());
    }

    /// Live ids (all of them, including requests not yet retrieved) and event channels
    /// (user and private): both 0 once everything is destroyed.
    pub fn live(&self) -> (usize, usize) {
        self.with_state(|st| (st.ids.len(), st.chans.len()))
    }

    /// The engine's counters.
    pub fn stats(&self) -> CmStats {
        self.with_state(|st| st.stats)
    }

    /// The configuration.
    pub fn config(&self) -> CmConfig {
        self.with_state(|st| st.cfg)
    }

    // -------------------------------------------------------------- devices

    /// Adds an RDMA device (librdmacm finds them with `ibv_get_device_list`). Its port 1 must
    /// have an IPv4-mapped GID at index 0 (that is the device's address); `mac` is its
    /// Ethernet address. The manager creates the device's GSI QP (QP1, [`verbs::QpType::Gsi`],
    /// Q_Key 0x80010000, P_Key index 0), which carries its CM MADs to and from the peers'
    /// QP1 as librdmacm's do through the kernel's MAD layer; so the device must not have a
    /// GSI QP already (the device allows one per port: EAGAIN from the mlx5 provider). The
    /// device is entered in the neighbour table. The MAD buffers come from the provider
    /// ([`Provider::alloc_buf`]). On failure the provider is handed back.
    ///
    /// A device without QP1 (its provider refuses a GSI QP with EOPNOTSUPP: EFA; `mac` is
    /// not used) gets the datagram transport instead: the manager creates a UD QP of its own
    /// (Q_Key [`mad::DGRAM_CM_QKEY`](crate::mad::DGRAM_CM_QKEY)), which must be the first QP
    /// made on the device, since peers reach their managers at the QP number every manager's
    /// first QP gets ([`DeviceInfo::cm_qpn`]). Its ids serve the UDP port space with UD and
    /// SRD QPs; connected (RC) ids fail as librdmacm's do on a device without a CM
    /// (`docs/cm.md#the-connection-manager-on-efa`).
    pub fn add_device(&self, provider: P, mac: [u8; 6]) -> Result<DeviceId, (Error, P)> {
        let gid = match provider.query_gid(1, 0) {
            Ok(g) => g,
            Err(e) => return Err((e.into(), provider)),
        };
        let Some(ip) = gid.ipv4().map(core::net::Ipv4Addr::from) else {
            return Err((Error::NoDevice, provider));
        };
        let mtu = match provider.query_port(1) {
            Ok(p) => p.active_mtu,
            Err(e) => return Err((e.into(), provider)),
        };
        // librdmacm's per-device limits (it casts them to 8 bits; they saturate here)
        let (max_responder_resources, max_initiator_depth, max_wr) = match provider.query_device() {
            Ok(a) => (
                u8::try_from(a.max_qp_rd_atom).unwrap_or(u8::MAX),
                u8::try_from(a.max_qp_init_rd_atom).unwrap_or(u8::MAX),
                u16::try_from(a.max_qp_wr).unwrap_or(u16::MAX),
            ),
            Err(e) => return Err((e.into(), provider)),
        };
        let (rs, ss) = self.with_state(|st| (st.cfg.mad_recv_slots, st.cfg.mad_send_slots));
        let transport = match Gsi::create(&provider, rs, ss) {
            Ok(g) => DevTransport::Mad(g),
            // no QP1 on this device (EFA's provider refuses the GSI type)
            Err(Error::NotSupported) => {
                match Dgram::create(&provider, rs.min(max_wr), ss.min(max_wr), ip, gid) {
                    Ok(g) => DevTransport::Dgram(g),
                    Err(e) => return Err((e, provider)),
                }
            }
            Err(e) => return Err((e, provider)),
        };
        Ok(self.with_state(|st| {
            let agent = st.rng.next() as u32;
            let key = st.devs.insert(Dev {
                provider: Arc::new(provider),
                max_responder_resources,
                max_initiator_depth,
                ip,
                gid,
                mac,
                guid: guid_of(mac),
                mtu,
                agent,
                pds: Default::default(),
                default_pd: None,
                refcnt: 0,
                held_cqs: Vec::new(),
                transport: Some(transport),
                async_events: Default::default(),
                resolver: None,
            });
            st.set_neighbor(ip, Neighbor { mac });
            st.device_id(key)
        }))
    }

    /// Removes a device and hands its provider back: EBUSY while ids are bound to it, a QP
    /// that could not be destroyed still holds it, the caller still holds a CQ an id created
    /// (a handle `create_qp` wrote back), or a PD of it cannot be freed (user PDs, MRs still
    /// registered on the default PD).
    pub fn remove_device(&self, dev: DeviceId) -> Result<P, Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            if st.ids.iter().any(|(_, s)| s.dev == Some(d)) {
                return Err(Error::Busy);
            }
            let x = st.devs.get_mut(d).ok_or(Error::NoDevice)?;
            x.release_held_cqs();
            if !x.held_cqs.is_empty() || Arc::strong_count(&x.provider) > 1 {
                return Err(Error::Busy);
            }
            for k in x.pds.keys() {
                if let Some(rec) = x.pds.remove(k)
                    && let Err(e) = x.provider.dealloc_pd(rec.pd)
                {
                    if let Some(pd) = e.object {
                        x.pds.insert(PdRec { pd, users: 0 });
                    }
                    return Err(Error::Busy);
                }
            }
            x.default_pd = None;
            let mut x = st.devs.remove(d).ok_or(Error::NoDevice)?;
            if let Some(t) = x.transport.take() {
                t.destroy(&x.provider);
            }
            st.forget_device(d, x.ip);
            // the count was checked above, under the lock every new holder takes
            Arc::try_unwrap(x.provider).map_err(|_| Error::Busy)
        })
    }

    /// What the manager knows of a device.
    pub fn device(&self, dev: DeviceId) -> Option<DeviceInfo> {
        self.with_state(|st| st.dev_key(dev).and_then(|k| st.device_info(k)))
    }

    /// Every device.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.with_state(|st| {
            st.devs
                .keys()
                .into_iter()
                .filter_map(|k| st.device_info(k))
                .collect()
        })
    }

    /// Runs `f` with a device's provider (its own verbs: memory, queries, ...). `f` must not
    /// call back into the manager (the state is locked meanwhile).
    pub fn with_provider<R>(&self, dev: DeviceId, f: impl FnOnce(&P) -> R) -> Result<R, Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let x = st.devs.get(d).ok_or(Error::NoDevice)?;
            Ok(f(&x.provider))
        })
    }

    /// A shared handle of a device's provider, for a data path of the caller's own (polling
    /// CQs it created through [`with_provider`](Self::with_provider) without the manager's
    /// lock). While the caller holds it, [`remove_device`](Self::remove_device) is EBUSY.
    pub fn provider(&self, dev: DeviceId) -> Result<Arc<P>, Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let x = st.devs.get(d).ok_or(Error::NoDevice)?;
            Ok(x.provider.clone())
        })
    }

    /// Adds or replaces a neighbour-table entry (the address resolution a kernel does with
    /// ARP): `resolve_addr` to `ip` waits for one, or for the device's
    /// [`NeighborResolver`](crate::NeighborResolver) to find it.
    pub fn add_neighbor(&self, ip: core::net::Ipv4Addr, n: Neighbor) {
        self.with_state(|st| st.set_neighbor(ip, n));
    }

    /// Names the device address (GID) of the peer at `ip` on device `dev`, a device with the
    /// datagram transport (EFA), whose GIDs are not derived from IPv4 addresses (real EFAs
    /// have `fe80::` GIDs): routes to `ip` and the manager's messages use it. Without an
    /// entry the peer's IPv4-mapped GID is used, until a datagram from the peer names its own.
    /// ENODEV for an unknown device, EINVAL for a device with the IB CM (RoCE: the GID is the
    /// IPv4-mapped address).
    pub fn set_peer_gid(
        &self,
        dev: DeviceId,
        ip: core::net::Ipv4Addr,
        gid: verbs::Gid,
    ) -> Result<(), Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let x = st.devs.get_mut(d).ok_or(Error::NoDevice)?;
            if x.transport
                .as_mut()
                .is_some_and(|t| t.set_peer_gid(ip, gid))
            {
                Ok(())
            } else {
                Err(Error::InvalidArgument)
            }
        })
    }

    /// What the neighbour table knows of `ip` (a device's own address included): the MAC a
    /// reply to a sender at `ip` goes to, say a UD server's address handle built from a
    /// received datagram ([`verbs::init_ah_from_wc`]).
    pub fn neighbor(&self, ip: core::net::Ipv4Addr) -> Option<Neighbor> {
        self.with_state(|st| st.neighbor(ip))
    }

    /// The address attributes of a reply to the sender of a UD receive on device `dev`
    /// ([`verbs::init_ah_from_wc`] on the receive's work completion and the 40 bytes in
    /// front of its payload), with the sender's MAC from the neighbour table (or the
    /// device's resolver): what a UD server hands [`Provider::create_ah`] to answer. EINVAL
    /// for a GRH area holding no header, EHOSTUNREACH for a sender whose MAC is not known
    /// (yet: the resolver was asked), ENODEV for a device not of this manager.
    pub fn ah_attr_from_wc(
        &self,
        dev: DeviceId,
        wc: &verbs::WorkCompletion,
        grh: &[u8],
    ) -> Result<verbs::AhAttr, Error> {
        let mut a = verbs::init_ah_from_wc(1, 0, wc, grh)?;
        let ip = a
            .dgid
            .ipv4()
            .map(core::net::Ipv4Addr::from)
            .ok_or(Error::HostUnreachable)?;
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let p = st.peer(d, ip, 0).ok_or(Error::HostUnreachable)?;
            a.dmac = p.mac;
            Ok(a)
        })
    }

    /// Gives a device its port's address resolution (ARP on an Ethernet port): address
    /// resolution asks it for destinations the neighbour table does not know (`None` takes
    /// it away again). ENODEV for a device not of this manager.
    pub fn set_neighbor_resolver(
        &self,
        dev: DeviceId,
        resolver: Option<Arc<dyn crate::NeighborResolver>>,
    ) -> Result<(), Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            st.devs.get_mut(d).ok_or(Error::NoDevice)?.resolver = resolver;
            Ok(())
        })
    }

    /// The next asynchronous event of a device (`ibv_get_async_event` on the manager's
    /// context, non-blocking) while [`CmConfig::watch_async_events`] is on: the engine reads
    /// the provider's events (COMM_EST completes a passive handshake whose RTU is missing)
    /// and keeps them here, the last 256. Off, the provider's own, read directly. ENODEV for
    /// a device not of this manager.
    pub fn get_async_event(&self, dev: DeviceId) -> Result<Option<verbs::AsyncEvent>, Error> {
        self.with_state(|st| {
            st.progress();
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let watch = st.cfg.watch_async_events;
            let x = st.devs.get_mut(d).ok_or(Error::NoDevice)?;
            if watch {
                Ok(x.async_events.pop_front())
            } else {
                Ok(x.provider.get_async_event()?)
            }
        })
    }

    /// Allocates a PD on a device (`ibv_alloc_pd` on the manager's context).
    pub fn alloc_pd(&self, dev: DeviceId) -> Result<CmPd, Error> {
        self.with_state(|st| {
            let d = st.dev_key(dev).ok_or(Error::NoDevice)?;
            let x = st.devs.get_mut(d).ok_or(Error::NoDevice)?;
            let pd = x.provider.alloc_pd()?;
            let key = x.pds.insert(PdRec { pd, users: 0 });
            Ok(CmPd { dev, key })
        })
    }

    /// Frees a PD: EBUSY while QPs or passive endpoints use it; the provider's error (EBUSY
    /// with MRs on it) otherwise. On failure the handle comes back.
    pub fn dealloc_pd(&self, pd: CmPd) -> Result<(), (Error, CmPd)> {
        self.with_state(|st| {
            let Some(d) = st.dev_key(pd.dev) else {
                return Err((Error::NoDevice, pd));
            };
            let Some(x) = st.devs.get_mut(d) else {
                return Err((Error::NoDevice, pd));
            };
            match x.pds.get(pd.key) {
                None => return Err((Error::InvalidArgument, pd)),
                Some(r) if r.users > 0 || x.default_pd == Some(pd.key) => {
                    return Err((Error::Busy, pd));
                }
                Some(_) => {}
            }
            let Some(rec) = x.pds.remove(pd.key) else {
                return Err((Error::InvalidArgument, pd));
            };
            match x.provider.dealloc_pd(rec.pd) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let error = e.error.into();
                    match e.object {
                        Some(p) => {
                            let key = x.pds.insert(PdRec { pd: p, users: 0 });
                            Err((error, CmPd { dev: pd.dev, key }))
                        }
                        None => Err((error, pd)),
                    }
                }
            }
        })
    }

    /// Runs `f` with a PD's provider object (to register memory on it, say). `f` must not
    /// call back into the manager.
    pub fn with_pd<R>(&self, pd: &CmPd, f: impl FnOnce(&P, &P::Pd) -> R) -> Result<R, Error> {
        self.with_state(|st| {
            let d = st.dev_key(pd.dev).ok_or(Error::NoDevice)?;
            let x = st.devs.get(d).ok_or(Error::NoDevice)?;
            let rec = x.pds.get(pd.key).ok_or(Error::InvalidArgument)?;
            Ok(f(&x.provider, &rec.pd))
        })
    }

    /// Deregisters an MR of a device (`rdma_dereg_mr`).
    pub fn dereg_mr(&self, dev: DeviceId, mr: P::Mr) -> Result<(), Error> {
        self.with_provider(dev, |p| p.dereg_mr(mr).map_err(|e| e.error.into()))?
    }

    /// `rdma_getaddrinfo` as librdmacm runs it: ENODEV while the manager has no device (its
    /// device check), then [`getaddrinfo`](crate::getaddrinfo)'s parsing and rules.
    pub fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfo>,
    ) -> Result<AddrInfo, Error> {
        if self.with_state(|st| st.devs.len() == 0) {
            return Err(Error::NoDevice);
        }
        crate::addr::getaddrinfo(node, service, hints)
    }

    // -------------------------------------------------------------- channels and ids

    /// `rdma_create_event_channel`.
    pub fn create_event_channel(&self) -> Result<EventChannel<P>, Error> {
        let key = self.with_state(|st| st.chans.insert(Chan::default()));
        Ok(EventChannel {
            cm: self.clone(),
            key,
        })
    }

    pub(crate) fn destroy_channel(&self, key: Key) {
        let orphans: Vec<Key> = self.with_state(|st| {
            let Some(c) = st.chans.remove(key) else {
                return Vec::new();
            };
            // requests nobody will read
            c.queue
                .iter()
                .filter(|e| e.ty == EventType::ConnectRequest)
                .map(|e| e.id)
                .collect()
        });
        self.with_state(|st| {
            for k in orphans {
                if st.ids.get(k).is_some_and(|s| !s.owned) {
                    st.teardown(k);
                }
            }
        });
    }

    /// `rdma_create_id`: an id on `channel` (asynchronous), or synchronous with a private
    /// channel when `channel` is `None`. The QP type follows the port space (UD for UDP and
    /// IPoIB, RC otherwise); a port space other than TCP, UDP, IPoIB, IB is EINVAL.
    pub fn create_id(
        &self,
        channel: Option<&EventChannel<P>>,
        context: u64,
        ps: PortSpace,
    ) -> Result<CmId<P>, Error> {
        self.create_id2(channel, context, ps, ps.default_qp_type())
    }

    /// `rdma_create_id2` (with an explicit QP type; used for PS_IB).
    fn create_id2(
        &self,
        channel: Option<&EventChannel<P>>,
        context: u64,
        ps: PortSpace,
        qp_type: verbs::QpType,
    ) -> Result<CmId<P>, Error> {
        let key =
            self.with_state(|st| st.create_id(channel.map(|c| c.key), context, ps, qp_type))?;
        Ok(self.id_of(key))
    }

    /// `rdma_create_ep`: a synchronous id from an [`AddrInfo`].
    ///
    /// * Passive (`RAI_PASSIVE`): bound to `ai_src_addr` (none: EINVAL); `pd` and a copy of
    ///   `qp_init_attr` are kept for the QPs [`CmId::get_request`] creates; no QP, no CQ, the
    ///   caller's attr is not touched. Without CQs in the saved attr each request gets CQs
    ///   of its own; CQs (and an SRQ) it names are shared by every request's QP
    ///   (`docs/cm.md#requests-from-a-listener`), held
    ///   by the endpoint until it is destroyed, never destroyed by it.
    /// * Active: address (from `ai_src_addr` if any, to `ai_dst_addr`) and route resolved
    ///   with 2000 ms timeouts; with `qp_init_attr`, its `qp_type` is set from `res` and a QP
    ///   is created as [`CmId::create_qp`] does (actual caps written back).
    ///
    /// Any failure destroys the id.
    pub fn create_ep(
        &self,
        res: &AddrInfo,
        pd: Option<&CmPd>,
        qp_init_attr: Option<&mut QpInitAttr<P::Cq, P::Srq>>,
    ) -> Result<CmId<P>, Error> {
        let ps = res.ai_port_space.unwrap_or(PortSpace(0));
        let qp_type = res.ai_qp_type.unwrap_or(ps.default_qp_type());
        let id = self.create_id2(None, 0, ps, qp_type)?;
        // on error `id` is dropped, which destroys it
        if res.ai_flags.contains(RaiFlags::PASSIVE) {
            let src = res.ai_src_addr.as_ref().ok_or(Error::InvalidArgument)?;
            id.bind_addr(src)?;
            let k = id.key;
            self.with_state(|st| -> Result<(), Error> {
                if let Some(pd) = pd {
                    let d = st.dev_key(pd.dev).ok_or(Error::InvalidArgument)?;
                    let rec = st
                        .devs
                        .get_mut(d)
                        .and_then(|x| x.pds.get_mut(pd.key))
                        .ok_or(Error::InvalidArgument)?;
                    rec.users += 1;
                    if let Some(s) = st.ids.get_mut(k) {
                        s.saved_pd = Some((d, pd.key));
                    }
                }
                if let Some(a) = qp_init_attr.as_deref()
                    && let Some(s) = st.ids.get_mut(k)
                {
                    s.saved = Some(saved_attr(qp_type, a));
                }
                Ok(())
            })?;
            return Ok(id);
        }
        let dst = res.ai_dst_addr.as_ref().ok_or(Error::InvalidArgument)?;
        id.resolve_addr(res.ai_src_addr.as_ref(), dst, EP_TIMEOUT_MS)?;
        id.resolve_route(EP_TIMEOUT_MS)?;
        if let Some(a) = qp_init_attr {
            a.qp_type = qp_type;
            id.create_qp(pd, a)?;
        }
        Ok(id)
    }

    // -------------------------------------------------------------- events

    /// Pops the next event of channel `chan`, waiting for one (EAGAIN on a non-blocking
    /// channel). A connection request's new id becomes the application's.
    pub(crate) fn pop_event(&self, chan: Key) -> Result<EventRec, Error> {
        self.wait(|st| {
            let Some(c) = st.chans.get_mut(chan) else {
                return Some(Err(Error::InvalidArgument));
            };
            let nonblocking = c.nonblocking;
            match c.queue.pop_front() {
                Some(ev) => {
                    st.delivered(&ev);
                    Some(Ok(ev))
                }
                None if nonblocking => Some(Err(Error::Again)),
                None => None,
            }
        })
    }

    /// `rdma_get_cm_event` on channel `chan`.
    pub(crate) fn get_event(&self, chan: Key) -> Result<CmEvent<P>, Error> {
        let ev = self.pop_event(chan)?;
        let new_id = (ev.ty == EventType::ConnectRequest).then(|| self.id_of(ev.id));
        let context = self.with_state(|st| st.ids.get(ev.id).map_or(0, |s| s.context));
        Ok(CmEvent {
            event: ev.ty,
            context,
            status: ev.status,
            id: IdHandle(ev.id.raw()),
            listen_id: ev.listen.map(|l| IdHandle(l.raw())),
            param: ev.param,
            new_id,
        })
    }

    /// `ucma_complete`: a synchronous id waits for its next event, keeps it as `id->event`
    /// and turns its status into the call's result; an asynchronous id returns at once.
    pub(crate) fn complete(&self, k: Key) -> Result<(), Error> {
        let chan = self.with_state(|st| {
            let s = st.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
            s.last_event = None;
            Ok::<_, Error>(s.sync.then_some(s.chan))
        })?;
        let Some(chan) = chan else { return Ok(()) };
        let ev = self.pop_event(chan)?;
        let r = event_result(&ev);
        self.with_state(|st| {
            if let Some(s) = st.ids.get_mut(k) {
                s.last_event = Some(ev);
            }
        });
        r
    }
}

impl<P: Provider> State<P> {
    pub(crate) fn set_neighbor(&mut self, ip: core::net::Ipv4Addr, n: Neighbor) {
        self.neighbors.retain(|(i, _)| *i != ip);
        self.neighbors.push((ip, n));
    }

    pub(crate) fn forget_device(&mut self, d: Key, ip: core::net::Ipv4Addr) {
        self.neighbors.retain(|(i, _)| *i != ip);
        self.orphans.retain(|o| o.dev != d);
    }

    pub(crate) fn device_info(&self, k: Key) -> Option<DeviceInfo> {
        let x = self.devs.get(k)?;
        Some(DeviceInfo {
            id: self.device_id(k),
            ip: x.ip,
            gid: x.gid,
            mac: x.mac,
            guid: x.guid,
            cm_qpn: x.transport.as_ref().map_or(0, |t| t.local_endpoint()),
            active_mtu: x.mtu,
        })
    }

    /// An event left its channel: a connection request's id now belongs to the application
    /// and frees a backlog slot.
    pub(crate) fn delivered(&mut self, ev: &EventRec) {
        if ev.ty != EventType::ConnectRequest {
            return;
        }
        if let Some(s) = self.ids.get_mut(ev.id) {
            s.owned = true;
        }
        if let Some(l) = ev.listen.and_then(|l| self.ids.get_mut(l)) {
            l.queued_requests = l.queued_requests.saturating_sub(1);
        }
    }
}
