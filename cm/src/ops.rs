//! What each librdmacm call does to the state, up to the point where a synchronous id would
//! wait for its event (`docs/cm.md#endpoint-api`, `docs/cm.md#endpoint-rules`).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::{Ipv4Addr, SocketAddrV4};

use verbs::{Provider, QpInitAttr as VerbsQpInitAttr, QpType, QueuePair};

use crate::addr::PortSpace;
use crate::config::RDMA_UDP_QKEY;
use crate::conn::{Fsm, Peer};
use crate::device::CmPd;
use crate::engine::{dreq_msg, qpn_of};
use crate::error::Error;
use crate::event::{Chan, ConnParam, EventParam, EventType};
use crate::id::QpInitAttr;
use crate::mad::{
    CmMessage, CmaAddrs, CmaHeader, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq, limits, msg_kind,
    rej_reason, service_id, sidr_status, transport,
};
use crate::qp::{Connect, cm_access, qp_init, qp_rtr_rts, qp_to_err};
use crate::resources::{AutoCq, IdSrq, LiveQp, QpRec, SavedAttr, UserObjs};
use crate::slab::Key;
use crate::state::{State, padded};
use crate::transport::Transport;

/// librdmacm's `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "as much as the device allows".
const MAX_RD: u8 = 0xFF;

impl<P: Provider> State<P> {
    /// `rdma_create_id2`: a new id on `chan`, or (None) synchronous with a private channel.
    pub(crate) fn create_id(
        &mut self,
        chan: Option<Key>,
        context: u64,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Result<Key, Error> {
        if !ps.is_valid() {
            return Err(Error::InvalidArgument);
        }
        let qp_type = match ps {
            PortSpace::TCP => QpType::Rc,
            // SRD is a datagram type of the UDP port space (EFA's; an extension of ours)
            PortSpace::UDP if qp_type == QpType::Srd => QpType::Srd,
            PortSpace::UDP | PortSpace::IPOIB => QpType::Ud,
            _ => qp_type,
        };
        let (chan, sync) = match chan {
            Some(c) if self.chans.contains(c) => (c, false),
            Some(_) => return Err(Error::InvalidArgument),
            None => (self.chans.insert(Chan::default()), true),
        };
        Ok(self.new_id(chan, sync, context, ps, qp_type))
    }

    pub(crate) fn id(&self, k: Key) -> Result<&crate::conn::IdState<P>, Error> {
        self.ids.get(k).ok_or(Error::InvalidArgument)
    }

    /// `rdma_resolve_addr` up to the ADDR_RESOLVED / ADDR_ERROR event.
    pub(crate) fn resolve_addr(
        &mut self,
        k: Key,
        src: Option<SocketAddrV4>,
        dst: SocketAddrV4,
        timeout_ms: u32,
    ) -> Result<(), Error> {
        match self.id(k)?.fsm {
            Fsm::Idle => self.bind(
                k,
                src.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            )?,
            Fsm::AddrBound => {}
            _ => return Err(Error::InvalidArgument),
        }
        let s = self.id(k)?;
        let d = s
            .dev
            .or_else(|| self.dev_by_ip(*dst.ip()))
            .or_else(|| self.devs.keys().first().copied());
        let deadline = self.now + timeout_ms as u64 * 1_000_000;
        let Some(s) = self.ids.get_mut(k) else {
            return Err(Error::InvalidArgument);
        };
        s.dst = Some(dst);
        let Some(d) = d else {
            self.push_event(k, EventType::AddrError, -19, EventParam::None, None);
            return Ok(());
        };
        s.resolve_dev = Some(d);
        s.addr_deadline = deadline;
        s.fsm = Fsm::AddrQuery;
        self.try_resolve(k);
        Ok(())
    }

    /// `rdma_resolve_route`: RoCE paths are synthesised at once (GIDs from the IPs, P_Key
    /// 0xFFFF, the port's MTU, flow label from the ports).
    pub(crate) fn resolve_route(&mut self, k: Key, timeout_ms: u32) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.fsm != Fsm::AddrResolved || timeout_ms == 0 {
            return Err(Error::InvalidArgument);
        }
        let (Some(d), Some(src), Some(dst), Some(nb)) = (s.dev, s.src, s.dst, s.peer) else {
            return Err(Error::InvalidArgument);
        };
        // no IB CM on the device (EFA): the kernel's `rdma_resolve_route` gives ENOSYS; our
        // datagram transport serves datagram ids
        if !crate::qp::datagram(s.qp_type) && !self.ib_cm(d) {
            return Err(Error::NotImplemented);
        }
        let (tos, ack) = (s.tos, s.ack_timeout);
        let mut route = self
            .synth_route(d, *dst.ip(), nb.mac, src.port(), dst.port())
            .ok_or(Error::NoDevice)?;
        // the kernel's `cma_resolve_iboe_route`: the ToS is the path's traffic class (SL 0
        // without a VLAN), an ACK timeout set before gives the packet life time (timeout − 1)
        if let Some(t) = tos {
            route.traffic_class = t;
        }
        if let Some(t) = ack.filter(|t| *t > 0) {
            route.local_ack_timeout = t;
        }
        if let Some(s) = self.ids.get_mut(k) {
            s.route = Some(route);
            s.fsm = Fsm::RouteResolved;
        }
        self.push_event(k, EventType::RouteResolved, 0, EventParam::None, None);
        Ok(())
    }

    /// `rdma_listen`.
    pub(crate) fn listen(&mut self, k: Key, backlog: i32) -> Result<(), Error> {
        if self.id(k)?.fsm == Fsm::Idle {
            self.bind(k, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
        }
        let s = self.ids.get(k).ok_or(Error::InvalidArgument)?;
        if s.fsm != Fsm::AddrBound {
            return Err(Error::InvalidArgument);
        }
        // bound to a device without IB CM (EFA): the kernel's `rdma_listen` gives ENOSYS for
        // a connected id (a wildcard listener skips such devices)
        if let Some(d) = s.dev
            && !crate::qp::datagram(s.qp_type)
            && !self.ib_cm(d)
        {
            return Err(Error::NotImplemented);
        }
        // REUSEADDR lets ids share a port, not listen on a shared one (`cma_bind_listen`)
        if s.reuseaddr
            && let Some(src) = s.src
            && let Some(e) = self.port_conflict(s.ps, *src.ip(), src.port(), false, Some(k))
        {
            return Err(e);
        }
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        s.backlog = if backlog <= 0 || backlog > 1024 {
            1024
        } else {
            backlog as u32
        };
        s.fsm = Fsm::Listen;
        Ok(())
    }

    /// The PD a QP of id `k` goes on: `pd` (which must be of the id's device) or the id's.
    fn qp_pd(&self, k: Key, pd: Option<&CmPd>) -> Result<(Key, Key), Error> {
        let s = self.id(k)?;
        let d = s.dev.ok_or(Error::InvalidArgument)?;
        let pdk = match pd {
            Some(p) => {
                if self.dev_key(p.dev) != Some(d) {
                    return Err(Error::InvalidArgument);
                }
                p.key
            }
            None => s.pd.ok_or(Error::InvalidArgument)?,
        };
        let dev = self.devs.get(d).ok_or(Error::NoDevice)?;
        if !dev.pds.contains(pdk) {
            return Err(Error::InvalidArgument);
        }
        Ok((d, pdk))
    }

    /// `rdma_create_qp`: checks (one QP per id, bound id, PD of the id's device, not a
    /// listener), auto CQs with their channels, the QP, and its first transitions. The actual
    /// caps are written back into `attr`.
    pub(crate) fn create_qp(
        &mut self,
        k: Key,
        pd: Option<&CmPd>,
        attr: &mut QpInitAttr<P::Cq, P::Srq>,
    ) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.qp.is_some() {
            return Err(Error::InvalidArgument);
        }
        let (d, pdk) = self.qp_pd(k, pd)?;
        let s = self.id(k)?;
        // `attr.srq` as given, else the id's own (written back).
        if attr.srq.is_none()
            && let Some(x) = &s.srq
        {
            attr.srq = Some(x.srq.clone());
        }
        let user = UserObjs {
            send_cq: attr.send_cq.clone(),
            recv_cq: attr.recv_cq.clone(),
            srq: attr.srq.clone(),
        };
        // QP1 belongs to the manager
        if s.fsm == Fsm::Listen || attr.qp_type != s.qp_type || attr.qp_type == QpType::Gsi {
            return Err(Error::InvalidArgument);
        }
        // The manager brings up RC, UD and SRD QPs; whether the device has the type is the
        // provider's answer (EFA: RC is EOPNOTSUPP, as rdma-core's efa provider and the
        // kernel's efa driver answer `ibv_create_qp`; mlx5: SRD is EOPNOTSUPP).
        if !matches!(attr.qp_type, QpType::Rc | QpType::Ud | QpType::Srd) {
            return Err(Error::NotSupported);
        }
        let passive_req = s.fsm == Fsm::ReqRcvd;
        let resp_res = s.responder_resources;
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        let p = &*dev.provider;
        let with_channel = self.cfg.auto_comp_channels;
        let auto = |want: bool, n: u32| -> Result<Option<AutoCq<P>>, Error> {
            if !want || n == 0 {
                return Ok(None);
            }
            // A provider without completion channels (EFA's): the CQ has none, and
            // `get_*_comp` polls
            let channel = if with_channel {
                match p.create_comp_channel() {
                    Ok(c) => Some(c),
                    Err(verbs::Error::NotSupported) => None,
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            match p.create_cq(n, k.raw(), channel.as_ref()) {
                Ok(cq) => Ok(Some(AutoCq {
                    cq: Arc::new(cq),
                    channel,
                })),
                Err(e) => {
                    if let Some(c) = channel {
                        let _ = p.destroy_comp_channel(c);
                    }
                    Err(e.into())
                }
            }
        };
        let drop_auto = |a: Option<AutoCq<P>>| {
            if let Some(a) = a {
                if let Ok(cq) = Arc::try_unwrap(a.cq) {
                    let _ = p.destroy_cq(cq);
                }
                if let Some(c) = a.channel {
                    let _ = p.destroy_comp_channel(c);
                }
            }
        };
        let send_auto = auto(attr.send_cq.is_none(), attr.cap.max_send_wr)?;
        let recv_auto = match auto(attr.recv_cq.is_none(), attr.cap.max_recv_wr) {
            Ok(r) => r,
            Err(e) => {
                drop_auto(send_auto);
                return Err(e);
            }
        };
        let send_ref = user
            .send_cq
            .as_deref()
            .or(send_auto.as_ref().map(|a| &*a.cq))
            .or(recv_auto.as_ref().map(|a| &*a.cq))
            .or(user.recv_cq.as_deref());
        let recv_ref = user
            .recv_cq
            .as_deref()
            .or(recv_auto.as_ref().map(|a| &*a.cq))
            .or(send_ref);
        let (Some(send_cq), Some(recv_cq)) = (send_ref, recv_ref) else {
            drop_auto(send_auto);
            drop_auto(recv_auto);
            return Err(Error::InvalidArgument);
        };
        let Some(pd_rec) = dev.pds.get(pdk) else {
            drop_auto(send_auto);
            drop_auto(recv_auto);
            return Err(Error::InvalidArgument);
        };
        let made = p.create_qp(
            &pd_rec.pd,
            &VerbsQpInitAttr {
                qp_type: attr.qp_type,
                send_cq,
                recv_cq,
                srq: user.srq.as_deref(),
                cap: attr.cap,
                sq_sig_all: attr.sq_sig_all,
            },
        );
        let (mut qp, cap) = match made {
            Ok(v) => v,
            Err(e) => {
                drop_auto(send_auto);
                drop_auto(recv_auto);
                return Err(e.into());
            }
        };
        let init = match attr.qp_type {
            QpType::Ud | QpType::Srd => qp_init(
                p,
                &mut qp,
                attr.qp_type,
                verbs::AccessFlags::empty(),
                RDMA_UDP_QKEY,
            ),
            QpType::Rc => {
                let access = if passive_req {
                    cm_access(resp_res)
                } else {
                    verbs::AccessFlags::empty()
                };
                qp_init(p, &mut qp, QpType::Rc, access, 0)
            }
            QpType::Gsi => Err(Error::InvalidArgument),
            _ => Err(Error::NotSupported),
        };
        if let Err(e) = init {
            let _ = p.destroy_qp(qp);
            drop_auto(send_auto);
            drop_auto(recv_auto);
            return Err(e);
        }
        attr.cap = cap;
        // the CQs the id made, as `rdma_create_qp` writes them back (`id->send_cq`, ...)
        if let Some(a) = &send_auto {
            attr.send_cq = Some(a.cq.clone());
        }
        if let Some(a) = &recv_auto {
            attr.recv_cq = Some(a.cq.clone());
        }
        if let Some(r) = dev.pds.get_mut(pdk) {
            r.users += 1;
        }
        let provider = dev.provider.clone();
        if let Some(s) = self.ids.get_mut(k) {
            let rec = QpRec {
                pd: pdk,
                qpn: qp.qp_num(),
                on_srq: user.srq.is_some(),
            };
            let mut path = s.path.lock();
            path.provider = Some(provider);
            path.qp = Some(LiveQp {
                qp,
                send_cq: send_auto,
                recv_cq: recv_auto,
                user,
                peer: None,
            });
            drop(path);
            s.qp = Some(rec);
            s.pd = Some(pdk);
        }
        Ok(())
    }

    /// An SRD id's peer (QP `qpn` with `qkey` on its route's address), where the
    /// `rdma_verbs.h` helpers send work requests that name no destination: an AH on the
    /// QP's PD (a failure leaves the id without one; the application can still name its own).
    pub(crate) fn set_srd_peer(&mut self, k: Key, qpn: u32, qkey: u32) {
        let Some(s) = self.ids.get(k) else { return };
        let (Some(d), Some(rec), Some(route)) = (s.dev, s.qp, s.route) else {
            return;
        };
        let Some(dev) = self.devs.get(d) else { return };
        let Some(pd) = dev.pds.get(rec.pd) else {
            return;
        };
        let p = &*dev.provider;
        let mut path = s.path.lock();
        let Some(q) = path.qp.as_mut() else { return };
        if let Some(old) = q.peer.take() {
            let _ = p.destroy_ah(old.ah);
        }
        if let Ok(ah) = p.create_ah(&pd.pd, &route.ah_attr()) {
            q.peer = Some(crate::resources::PeerDest { ah, qpn, qkey });
        }
    }

    /// `rdma_destroy_qp`: the QP, then the auto CQs, then their channels (waiting for a post
    /// or poll in progress on the id's data path, which holds the id's lock).
    pub(crate) fn destroy_qp(&mut self, k: Key) -> Result<(), Error> {
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        let d = s.dev.ok_or(Error::InvalidArgument)?;
        let rec = s.qp.ok_or(Error::InvalidArgument)?;
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        let p = &*dev.provider;
        let mut path = s.path.lock();
        let q = path.qp.take().ok_or(Error::InvalidArgument)?;
        let LiveQp {
            qp,
            send_cq,
            recv_cq,
            user,
            peer,
        } = q;
        if let Err(e) = p.destroy_qp(qp) {
            if let Some(qp) = e.object {
                path.qp = Some(LiveQp {
                    qp,
                    send_cq,
                    recv_cq,
                    user,
                    peer,
                });
            }
            return Err(e.error.into());
        }
        drop(path);
        if let Some(d) = peer {
            let _ = p.destroy_ah(d.ah);
        }
        s.qp = None;
        // The caller's CQs and SRQ: released, not destroyed.
        drop(user);
        if let Some(r) = dev.pds.get_mut(rec.pd) {
            r.users = r.users.saturating_sub(1);
        }
        // The CQs (receive, then send), then their channels
        // (`docs/cm.md#destroying-endpoints`).
        let mut channels = Vec::new();
        for a in [recv_cq, send_cq].into_iter().flatten() {
            // A CQ the caller still holds (from the attributes written back) waits, with its
            // channel, until they let go of it.
            match Arc::try_unwrap(a.cq) {
                Ok(cq) => {
                    let _ = p.destroy_cq(cq);
                    channels.extend(a.channel);
                }
                Err(cq) => dev.held_cqs.push(AutoCq {
                    cq,
                    channel: a.channel,
                }),
            }
        }
        for c in channels {
            let _ = p.destroy_comp_channel(c);
        }
        Ok(())
    }

    /// `rdma_create_srq`: an SRQ on the given PD (of the id's device) or the id's.
    pub(crate) fn create_srq(
        &mut self,
        k: Key,
        pd: Option<&CmPd>,
        attr: &mut verbs::SrqAttr,
    ) -> Result<(), Error> {
        if self.id(k)?.srq.is_some() {
            return Err(Error::InvalidArgument);
        }
        let (d, pdk) = self.qp_pd(k, pd)?;
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        let rec = dev.pds.get_mut(pdk).ok_or(Error::InvalidArgument)?;
        let srq = dev.provider.create_srq(&rec.pd, attr)?;
        rec.users += 1;
        *attr = verbs::SharedReceiveQueue::attr(&srq);
        if let Some(s) = self.ids.get_mut(k) {
            let srq = Arc::new(srq);
            s.path.lock().srq = Some(srq.clone());
            s.srq = Some(IdSrq { srq, pd: pdk });
        }
        Ok(())
    }

    /// `rdma_destroy_srq`: EBUSY while a QP (or the caller) holds it.
    pub(crate) fn destroy_srq(&mut self, k: Key) -> Result<(), Error> {
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        let d = s.dev.ok_or(Error::InvalidArgument)?;
        let IdSrq { srq, pd } = s.srq.take().ok_or(Error::InvalidArgument)?;
        // the data path's handle goes first (it comes back if the SRQ stays)
        let path_srq = s.path.lock().srq.take();
        drop(path_srq);
        let srq = match Arc::try_unwrap(srq) {
            Ok(x) => x,
            Err(srq) => {
                s.path.lock().srq = Some(srq.clone());
                s.srq = Some(IdSrq { srq, pd });
                return Err(Error::Busy);
            }
        };
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        if let Err(e) = dev.provider.destroy_srq(srq) {
            if let Some(srq) = e.object
                && let Some(s) = self.ids.get_mut(k)
            {
                let srq = Arc::new(srq);
                s.path.lock().srq = Some(srq.clone());
                s.srq = Some(IdSrq { srq, pd });
            }
            return Err(e.error.into());
        }
        if let Some(r) = dev.pds.get_mut(pd) {
            r.users = r.users.saturating_sub(1);
        }
        Ok(())
    }

    /// The (responder resources, initiator depth) limits of the id's device (0 without one).
    fn rd_limits(&self, k: Key) -> (u8, u8) {
        self.ids
            .get(k)
            .and_then(|s| s.dev)
            .and_then(|d| self.devs.get(d))
            .map_or((0, 0), |x| {
                (x.max_responder_resources, x.max_initiator_depth)
            })
    }

    /// Device limits librdmacm checks `rdma_conn_param` against (PS_TCP only).
    fn check_param(&self, k: Key, param: Option<&ConnParam<'_>>) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.ps != PortSpace::TCP {
            return Ok(());
        }
        let Some(p) = param else {
            return if s.qp.is_none() {
                Err(Error::InvalidArgument)
            } else {
                Ok(())
            };
        };
        let (max_resp, max_init) = self.rd_limits(k);
        if (p.responder_resources != MAX_RD && p.responder_resources > max_resp)
            || (p.initiator_depth != MAX_RD && p.initiator_depth > max_init)
        {
            return Err(Error::InvalidArgument);
        }
        Ok(())
    }

    /// `rdma_connect` up to the REQ (or SIDR_REQ) being on the wire.
    pub(crate) fn connect(&mut self, k: Key, param: Option<&ConnParam<'_>>) -> Result<(), Error> {
        self.check_param(k, param)?;
        let cfg = self.cfg;
        let pick = |v: Option<u8>, max: u8| match v {
            Some(v) if v != MAX_RD => v,
            _ => max,
        };
        let (max_resp, max_init) = self.rd_limits(k);
        let init_depth = pick(param.map(|p| p.initiator_depth), max_init);
        let resp_res = pick(param.map(|p| p.responder_resources), max_resp);
        let retry = param.map_or(7, |p| p.retry_count.min(7));
        let rnr = param.map_or(7, |p| p.rnr_retry_count.min(7));
        let fc = param.is_some_and(|p| p.flow_control);
        let user_pd = param.map_or(&[][..], |p| p.private_data);
        let s = self.id(k)?;
        if s.fsm != Fsm::RouteResolved {
            return Err(Error::InvalidArgument);
        }
        let ud = crate::qp::datagram(s.qp_type);
        let s_type = s.qp_type;
        let limit = if ud {
            limits::SIDR_CONNECT
        } else {
            limits::CONNECT
        };
        if user_pd.len() > limit {
            return Err(Error::InvalidArgument);
        }
        let (Some(d), Some(src), Some(dst), Some(nb), Some(route)) =
            (s.dev, s.src, s.dst, s.peer, s.route)
        else {
            return Err(Error::InvalidArgument);
        };
        // the kernel's `rdma_connect` on a device with neither IB CM nor iWARP CM: ENOSYS
        if !ud && !self.ib_cm(d) {
            return Err(Error::NotImplemented);
        }
        let qpn = qpn_of(s.qp.as_ref(), param.map_or(0, |p| p.qp_num));
        // From the QP if the id has one (does it receive from an SRQ?), else from `param`.
        let srq = match &s.qp {
            Some(q) => q.on_srq,
            None => param.is_some_and(|p| p.srq),
        };
        let ps = s.ps;
        let guid = self.devs.get(d).map_or(0, |x| x.guid);
        let hdr = CmaHeader {
            src_port: src.port(),
            addrs: CmaAddrs::V4 {
                src: *src.ip(),
                dst: *dst.ip(),
            },
        }
        .encode();
        let mut pd = Vec::with_capacity(limits::CMA_HEADER + user_pd.len());
        pd.extend_from_slice(&hdr);
        pd.extend_from_slice(user_pd);
        let local_comm_id = self.next_comm_id();
        let psn = self.rng.psn();
        let tid = self.tid(d, local_comm_id);
        let sid = service_id(ps.0, dst.port());
        let msg = if ud {
            CmMessage::SidrReq(SidrReq {
                request_id: local_comm_id,
                partition_key: crate::mad::DEFAULT_PKEY,
                service_id: sid,
                private_data: padded(&pd),
            })
        } else {
            let path = ReqPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: route.sgid.0,
                remote_gid: route.dgid.0,
                flow_label: route.flow_label,
                packet_rate: 0,
                traffic_class: route.traffic_class,
                hop_limit: route.hop_limit,
                sl: route.sl,
                subnet_local: route.hop_limit <= 1,
                local_ack_timeout: route.local_ack_timeout,
            };
            CmMessage::Req(Req {
                local_comm_id,
                service_id: sid,
                local_ca_guid: guid,
                local_qkey: 0,
                local_qpn: qpn,
                responder_resources: resp_res,
                initiator_depth: init_depth,
                remote_cm_response_timeout: cfg.cm_response_timeout,
                transport_service_type: transport::RC,
                end_to_end_flow_control: fc,
                starting_psn: psn,
                local_cm_response_timeout: cfg.cm_response_timeout,
                retry_count: retry,
                partition_key: crate::mad::DEFAULT_PKEY,
                path_mtu: route.mtu as u8,
                rnr_retry_count: rnr,
                max_cm_retries: cfg.max_cm_retries.min(15),
                srq,
                primary_path: path,
                private_data: padded(&pd),
                ..Req::default()
            })
        };
        // the peer's manager, where the device's transport reaches it
        let cm_qpn = self
            .devs
            .get(d)
            .and_then(|x| x.transport.as_ref())
            .map_or(0, |t| t.peer_endpoint());
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        s.initiator_depth = init_depth;
        s.responder_resources = resp_res;
        s.fsm = Fsm::ReqSent;
        let c = &mut s.conn;
        c.active = true;
        c.local_comm_id = local_comm_id;
        c.tid = tid;
        c.local_psn = psn;
        c.retry_count = retry;
        c.rnr_retry_count = rnr;
        c.flow_control = fc;
        c.peer = Peer {
            ip: *dst.ip(),
            mac: nb.mac,
            qpn: cm_qpn,
        };
        let timeout = self.cm_timeout_ns(cfg.cm_response_timeout);
        // an SRD id's SIDR_REQ names its QP in the attribute modifier (the IB CM leaves it 0;
        // SRD exists only on the datagram transport, our own protocol), so that the passive
        // side knows where its sends go
        let attr_mod = if s_type == QpType::Srd { qpn } else { 0 };
        self.send_for_attr(
            k,
            tid,
            attr_mod,
            msg,
            Some((timeout, cfg.max_cm_retries.min(15))),
        );
        Ok(())
    }

    /// `rdma_accept` up to the REP (or SIDR_REP) being on the wire. `Ok(true)` when there is
    /// an RTU to wait for.
    pub(crate) fn accept(&mut self, k: Key, param: Option<&ConnParam<'_>>) -> Result<bool, Error> {
        let s = self.id(k)?;
        if s.fsm != Fsm::ReqRcvd || s.conn.active {
            return Err(Error::InvalidArgument);
        }
        if s.qp.is_none() && param.is_none() {
            return Err(Error::InvalidArgument);
        }
        self.check_param(k, param)?;
        let (max_resp, max_init) = self.rd_limits(k);
        let s = self.id(k)?;
        let pick = |v: Option<u8>, req: u8, max: u8| match v {
            Some(v) if v != MAX_RD => v,
            _ => req.min(max),
        };
        let init_depth = pick(
            param.map(|p| p.initiator_depth),
            s.initiator_depth,
            max_init,
        );
        let resp_res = pick(
            param.map(|p| p.responder_resources),
            s.responder_resources,
            max_resp,
        );
        let rnr = param.map_or(7, |p| p.rnr_retry_count.min(7));
        let fc = param.is_some_and(|p| p.flow_control);
        let user_pd = param.map_or(&[][..], |p| p.private_data);
        let qpn = qpn_of(s.qp.as_ref(), param.map_or(0, |p| p.qp_num));
        // From the QP if the id has one (does it receive from an SRQ?), else from `param`.
        let srq = match &s.qp {
            Some(q) => q.on_srq,
            None => param.is_some_and(|p| p.srq),
        };
        let d = s.dev.ok_or(Error::InvalidArgument)?;
        let (local, remote, tid) = (s.conn.local_comm_id, s.conn.remote_comm_id, s.conn.tid);
        if crate::qp::datagram(s.qp_type) {
            if user_pd.len() > limits::SIDR_REP {
                return Err(Error::InvalidArgument);
            }
            let msg = CmMessage::SidrRep(SidrRep {
                request_id: remote,
                status: sidr_status::SUCCESS,
                additional_info_length: 0,
                qpn,
                service_id: s.conn.sidr_service_id,
                qkey: RDMA_UDP_QKEY,
                additional_info: [0; limits::SIDR_REP_INFO],
                private_data: padded(user_pd),
            });
            let (srd, peer_qpn) = (s.qp_type == QpType::Srd, s.conn.remote_qpn);
            if let Some(s) = self.ids.get_mut(k) {
                s.fsm = Fsm::Established;
            }
            if srd && peer_qpn != 0 {
                self.set_srd_peer(k, peer_qpn, RDMA_UDP_QKEY);
            }
            self.send_for(k, tid, msg, None);
            return Ok(false);
        }
        let Some(req) = s.conn.req.as_deref().copied() else {
            return Err(Error::InvalidArgument);
        };
        // chosen when the request arrived (`init_qp_attr` may have given it out already)
        let psn = s.conn.local_psn;
        let guid = self.devs.get(d).map_or(0, |x| x.guid);
        let (Some(dev), Some(s)) = (self.devs.get(d), self.ids.get_mut(k)) else {
            return Err(Error::InvalidArgument);
        };
        s.conn.local_psn = psn;
        s.initiator_depth = init_depth;
        s.responder_resources = resp_res;
        let rts_route = s.rts_route();
        if s.qp.is_some()
            && let Some(q) = s.path.lock().qp.as_mut()
        {
            let c = Connect {
                route: rts_route,
                dest_qpn: s.conn.remote_qpn,
                rq_psn: psn,
                sq_psn: s.conn.remote_psn,
                max_dest_rd_atomic: resp_res,
                max_rd_atomic: init_depth,
                retry_cnt: req.retry_count,
                rnr_retry: req.rnr_retry_count,
                access: cm_access(resp_res),
            };
            // a failed transition returns without rejecting: the request stays pending
            qp_rtr_rts(&*dev.provider, &mut q.qp, &c)?;
        }
        if user_pd.len() > limits::REP {
            // the kernel refuses the ACCEPT and rejects the peer; librdmacm moves the QP to ERR
            if let Some(q) = s.path.lock().qp.as_mut() {
                qp_to_err(&*dev.provider, &mut q.qp);
            }
            s.fsm = Fsm::Closed;
            let m = self.rej_msg(
                local,
                remote,
                msg_kind::REQ,
                rej_reason::CONSUMER_DEFINED,
                &[],
            );
            self.send_for(k, tid, m, None);
            return Err(Error::InvalidArgument);
        }
        s.fsm = Fsm::RepSent;
        let msg = CmMessage::Rep(Rep {
            local_comm_id: local,
            remote_comm_id: remote,
            local_qkey: 0,
            local_qpn: qpn,
            local_eecn: 0,
            starting_psn: psn,
            responder_resources: resp_res,
            initiator_depth: init_depth,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: fc,
            rnr_retry_count: rnr,
            srq,
            local_ca_guid: guid,
            private_data: padded(user_pd),
        });
        let timeout = self.cm_timeout_ns(req.local_cm_response_timeout);
        self.send_for(k, tid, msg, Some((timeout, req.max_cm_retries)));
        Ok(true)
    }

    /// `rdma_reject`: REJ reason 28 (UD: SIDR_REP status 2) with the private data.
    pub(crate) fn reject(&mut self, k: Key, private_data: &[u8]) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.fsm != Fsm::ReqRcvd || s.conn.active {
            return Err(Error::InvalidArgument);
        }
        let (local, remote, tid) = (s.conn.local_comm_id, s.conn.remote_comm_id, s.conn.tid);
        let msg = if crate::qp::datagram(s.qp_type) {
            if private_data.len() > limits::SIDR_REP {
                return Err(Error::InvalidArgument);
            }
            CmMessage::SidrRep(SidrRep {
                request_id: remote,
                status: sidr_status::REJECT,
                additional_info_length: 0,
                qpn: 0,
                service_id: s.conn.sidr_service_id,
                qkey: 0,
                additional_info: [0; limits::SIDR_REP_INFO],
                private_data: padded(private_data),
            })
        } else {
            if private_data.len() > limits::REJ {
                return Err(Error::InvalidArgument);
            }
            self.rej_msg(
                local,
                remote,
                msg_kind::REQ,
                rej_reason::CONSUMER_DEFINED,
                private_data,
            )
        };
        if let Some(s) = self.ids.get_mut(k) {
            s.fsm = Fsm::Closed;
        }
        self.send_for(k, tid, msg, None);
        Ok(())
    }

    /// `rdma_disconnect` up to the DREQ or DREP: the QP goes to ERR first (flushing its work
    /// requests).
    pub(crate) fn disconnect(&mut self, k: Key) -> Result<(), Error> {
        let dreq_tid_low = self.rng.next() as u32;
        let timeout = self.cm_timeout_ns(self.cfg.cm_response_timeout);
        let retries = self.cfg.max_cm_retries.min(15);
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        let d = s.dev.ok_or(Error::InvalidArgument)?;
        if let (Some(dev), Some(q)) = (self.devs.get(d), s.path.lock().qp.as_mut()) {
            qp_to_err(&*dev.provider, &mut q.qp);
        }
        // A UD id has no connection: no DREQ or DREP (the kernel's `ib_send_cm_dreq` and
        // `ib_send_cm_drep` refuse its SIDR id, and `rdma_disconnect` returns 0).
        if crate::qp::datagram(s.qp_type) {
            return Ok(());
        }
        let c = &s.conn;
        match s.fsm {
            Fsm::Established => {
                let msg = dreq_msg(c.local_comm_id, c.remote_comm_id, c.remote_qpn);
                s.fsm = Fsm::DreqSent;
                let tid = self.tid(d, dreq_tid_low);
                self.send_for(k, tid, msg, Some((timeout, retries)));
                Ok(())
            }
            Fsm::DreqRcvd => {
                let msg = CmMessage::Drep(crate::mad::Drep {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    private_data: [0; limits::DREP],
                });
                let tid = c.dreq_tid;
                s.fsm = Fsm::Disconnected;
                self.send_for(k, tid, msg, None);
                self.enter_timewait(k);
                Ok(())
            }
            Fsm::ReqSent
            | Fsm::ReqRcvd
            | Fsm::RepSent
            | Fsm::RepRcvd
            | Fsm::DreqSent
            | Fsm::Disconnected
            | Fsm::Closed => Ok(()),
            _ => Err(Error::InvalidArgument),
        }
    }

    /// `rdma_establish`: the RTU of an id without a QP whose REP arrived.
    pub(crate) fn establish(&mut self, k: Key) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.qp.is_some() || s.fsm != Fsm::RepRcvd {
            return Err(Error::InvalidArgument);
        }
        let msg = CmMessage::Rtu(Rtu {
            local_comm_id: s.conn.local_comm_id,
            remote_comm_id: s.conn.remote_comm_id,
            private_data: [0; limits::RTU],
        });
        let tid = s.conn.tid;
        if let Some(s) = self.ids.get_mut(k) {
            s.fsm = Fsm::Established;
        }
        self.send_for(k, tid, msg, None);
        Ok(())
    }

    /// `rdma_migrate_id`.
    pub(crate) fn migrate(&mut self, k: Key, chan: Option<Key>) -> Result<(), Error> {
        let s = self.id(k)?;
        if s.sync && chan.is_none() {
            return Err(Error::InvalidArgument);
        }
        if chan.is_some_and(|c| !self.chans.contains(c)) {
            return Err(Error::InvalidArgument);
        }
        let old = s.chan;
        let was_sync = s.sync;
        let new = chan.unwrap_or_else(|| self.chans.insert(Chan::default()));
        // the id's events not yet read move with it
        let mut moved = Vec::new();
        if let Some(c) = self.chans.get_mut(old) {
            let (mine, rest): (Vec<_>, Vec<_>) = c
                .queue
                .drain(..)
                .partition(|e| e.id == k && e.listen.is_none());
            c.queue = rest.into();
            moved = mine;
        }
        if let Some(c) = self.chans.get_mut(new) {
            c.queue.extend(moved);
        }
        if was_sync && old != new {
            self.chans.remove(old);
        }
        if let Some(s) = self.ids.get_mut(k) {
            s.chan = new;
            s.sync = chan.is_none();
            s.last_event = None;
        }
        Ok(())
    }

    /// `rdma_destroy_id` / `rdma_destroy_ep`: what the peer must hear (REJ, DREQ, DREP), the
    /// QP and its CQs, queued events, undelivered requests of a listener, the device
    /// reference, the private channel.
    pub(crate) fn teardown(&mut self, k: Key) {
        let Some(s) = self.ids.get(k) else { return };
        let fsm = s.fsm;
        let ud = crate::qp::datagram(s.qp_type);
        let (local, remote, tid) = (s.conn.local_comm_id, s.conn.remote_comm_id, s.conn.tid);
        let d = s.dev;
        match fsm {
            Fsm::Listen => {
                let children: Vec<Key> = self
                    .ids
                    .iter()
                    .filter(|(_, c)| c.listener == Some(k) && !c.owned)
                    .map(|(ck, _)| ck)
                    .collect();
                for c in children {
                    self.teardown(c);
                }
            }
            Fsm::ReqSent if !ud => {
                let guid = d.and_then(|d| self.devs.get(d)).map_or(0, |x| x.guid);
                if let CmMessage::Rej(mut rej) =
                    self.rej_msg(local, 0, msg_kind::REQ, rej_reason::TIMEOUT, &[])
                {
                    rej.ari[..8].copy_from_slice(&guid.to_be_bytes());
                    rej.reject_info_length = 8;
                    self.send_for(k, tid, CmMessage::Rej(rej), None);
                }
            }
            Fsm::ReqRcvd if ud => {
                let _ = self.reject(k, &[]);
            }
            Fsm::ReqRcvd | Fsm::RepSent | Fsm::RepRcvd => {
                let kind = if fsm == Fsm::ReqRcvd {
                    msg_kind::REQ
                } else {
                    msg_kind::REP
                };
                let m = self.rej_msg(local, remote, kind, rej_reason::CONSUMER_DEFINED, &[]);
                self.send_for(k, tid, m, None);
            }
            // a UD id has no connection to tear down: nothing goes on the wire
            Fsm::Established | Fsm::DreqRcvd if !ud => {
                let _ = self.disconnect(k);
                self.orphan_dreq(k);
            }
            Fsm::DreqSent if !ud => self.orphan_dreq(k),
            _ => {}
        }
        // QP → the CQs it created → their channels → the SRQ
        // (`docs/cm.md#destroying-endpoints`).
        if self.ids.get(k).is_some_and(|s| s.qp.is_some()) {
            let _ = self.destroy_qp(k);
        }
        if self.ids.get(k).is_some_and(|s| s.srq.is_some()) {
            let _ = self.destroy_srq(k);
        }
        // The saved passive attributes release the caller's CQs and SRQ.
        if let Some(s) = self.ids.get_mut(k) {
            s.saved = None;
        }
        let Some(s) = self.ids.get(k) else { return };
        let (chan, sync, listener, owned, saved_pd) =
            (s.chan, s.sync, s.listener, s.owned, s.saved_pd);
        if let Some((pd_dev, pk)) = saved_pd
            && let Some(r) = self.devs.get_mut(pd_dev).and_then(|x| x.pds.get_mut(pk))
        {
            r.users = r.users.saturating_sub(1);
        }
        // an undelivered request: its event leaves the listener's queue
        if !owned
            && let Some(l) = listener
            && let Some(lc) = self.ids.get(l).map(|x| x.chan)
        {
            let mut dropped = false;
            if let Some(c) = self.chans.get_mut(lc) {
                let before = c.queue.len();
                c.queue.retain(|e| e.id != k);
                dropped = c.queue.len() != before;
            }
            if dropped && let Some(ls) = self.ids.get_mut(l) {
                ls.queued_requests = ls.queued_requests.saturating_sub(1);
            }
        }
        if sync {
            self.chans.remove(chan);
        } else if let Some(c) = self.chans.get_mut(chan) {
            c.queue.retain(|e| e.id != k);
        }
        self.release_dev(k);
        self.ids.remove(k);
    }
}

/// Needed by `create_ep` for passive endpoints.
pub(crate) fn saved_attr<P: Provider>(
    res_qp_type: QpType,
    attr: &QpInitAttr<P::Cq, P::Srq>,
) -> SavedAttr<P> {
    SavedAttr {
        qp_type: res_qp_type,
        cap: attr.cap,
        sq_sig_all: attr.sq_sig_all,
        user: UserObjs {
            send_cq: attr.send_cq.clone(),
            recv_cq: attr.recv_cq.clone(),
            srq: attr.srq.clone(),
        },
    }
}
