//! [`CmId`] (`struct rdma_cm_id`) and its calls.

use alloc::sync::Arc;
use core::net::SocketAddr;

use verbs::{Provider, QpCap, QpType, SrqAttr};

use crate::Cm;
use crate::api::v4;
use crate::datapath::DataPath;
use crate::device::{CmPd, DeviceId};
use crate::error::Error;
use crate::event::{ConnParam, EventChannel, EventParam, EventType};
use crate::resources::PathCell;
use crate::slab::Key;

/// An id's identity, as events name it ([`CmEvent::id`](crate::CmEvent::id)); compare with
/// [`CmId::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdHandle(pub(crate) u64);

impl IdHandle {
    /// The id whose CQ carries this CQ context: the CQs an id creates (`create_qp`,
    /// `create_ep`) are created with [`cq_context`](Self::cq_context) of the id's handle, so a
    /// completion event ([`verbs::CqEvent::cq_context`]) leads back to the id.
    pub const fn from_cq_context(cq_context: u64) -> IdHandle {
        IdHandle(cq_context)
    }

    /// The CQ context value of the CQs the id creates.
    pub const fn cq_context(self) -> u64 {
        self.0
    }
}

/// QP creation attributes (`struct ibv_qp_init_attr` as `rdma_create_qp` takes it); `C` is
/// the provider's CQ type, `S` its SRQ type (`QpInitAttr<P::Cq, P::Srq>`).
///
/// The CQs are optional: missing ones are created with a completion channel each, owned by
/// the id and exposed on it. The caller's own CQs and SRQ are shared handles (`Arc`, as the
/// C pointers are shared): the manager keeps a clone while a QP uses them (so a passive
/// endpoint's saved attributes can give them to every connection) and never destroys them;
/// the caller destroys them (`Arc::try_unwrap` then the provider's `destroy_cq` /
/// `destroy_srq`) once no QP uses them. `cap` receives the actual sizes.
pub struct QpInitAttr<C, S> {
    /// Transport service (set from the `AddrInfo` by `create_ep`).
    pub qp_type: QpType,
    /// Send CQ (`None`: the id creates one of `cap.max_send_wr` entries, unless 0).
    pub send_cq: Option<Arc<C>>,
    /// Receive CQ (`None`: the id creates one of `cap.max_recv_wr` entries, unless 0).
    pub recv_cq: Option<Arc<C>>,
    /// Shared receive queue (`None`: the id's own from [`CmId::create_srq`] if it has one,
    /// written back here; else the QP has a receive queue of its own). With an SRQ set
    /// `cap.max_recv_wr = 0` unless a receive CQ should still be created.
    pub srq: Option<Arc<S>>,
    /// Sizes asked for; the actual ones after the call.
    pub cap: QpCap,
    /// Every send generates a completion.
    pub sq_sig_all: bool,
}

impl<C, S> Default for QpInitAttr<C, S> {
    fn default() -> Self {
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: None,
            recv_cq: None,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

impl<C, S> Clone for QpInitAttr<C, S> {
    fn clone(&self) -> Self {
        QpInitAttr {
            qp_type: self.qp_type,
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            srq: self.srq.clone(),
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

impl<C, S> core::fmt::Debug for QpInitAttr<C, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpInitAttr")
            .field("qp_type", &self.qp_type)
            .field("send_cq", &self.send_cq.is_some())
            .field("recv_cq", &self.recv_cq.is_some())
            .field("srq", &self.srq.is_some())
            .field("cap", &self.cap)
            .field("sq_sig_all", &self.sq_sig_all)
            .finish()
    }
}

/// The event a synchronous call completed with (`id->event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// Event type.
    pub event: EventType,
    /// Status.
    pub status: i32,
    /// Parameters and private data.
    pub param: EventParam,
}

/// The verbs objects of an id, lent by [`CmId::with_verbs`].
pub struct IdVerbs<'a, P: Provider> {
    /// The device's provider.
    pub provider: &'a P,
    /// The id's PD (`id->pd`).
    pub pd: Option<&'a P::Pd>,
    /// The id's QP (`id->qp`).
    pub qp: Option<&'a mut P::Qp>,
    /// The CQ the id created for sends (`id->send_cq`).
    pub send_cq: Option<&'a P::Cq>,
    /// Its completion channel (`id->send_cq_channel`).
    pub send_cq_channel: Option<&'a mut P::CompChannel>,
    /// The CQ the id created for receives (`id->recv_cq`).
    pub recv_cq: Option<&'a P::Cq>,
    /// Its completion channel (`id->recv_cq_channel`).
    pub recv_cq_channel: Option<&'a mut P::CompChannel>,
    /// The id's SRQ (`id->srq`, from [`CmId::create_srq`]).
    pub srq: Option<&'a P::Srq>,
}

/// A communication identifier (`struct rdma_cm_id`).
///
/// Synchronous ids (from [`Cm::create_ep`], [`Cm::create_id`] without a channel, and the
/// requests of a synchronous listener) block in `resolve_*`, `connect`, `accept` and
/// `disconnect` until the operation's event arrives, driving the progress engine meanwhile;
/// asynchronous ids return at once and report on their [`EventChannel`].
///
/// Dropping an id destroys it ([`destroy_ep`](Self::destroy_ep)).
pub struct CmId<P: Provider> {
    pub(crate) cm: Cm<P>,
    pub(crate) key: Key,
    /// The id's data-path objects (shared with the manager's state).
    pub(crate) path: PathCell<P>,
}

impl<P: Provider> core::fmt::Debug for CmId<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CmId").field("key", &self.key).finish()
    }
}

impl<P: Provider> Drop for CmId<P> {
    fn drop(&mut self) {
        let k = self.key;
        self.cm.with_state(|st| st.teardown(k));
    }
}

impl<P: Provider> CmId<P> {
    fn read<R>(&self, f: impl FnOnce(&crate::conn::IdState<P>) -> R) -> Option<R> {
        self.cm.with_state(|st| st.ids.get(self.key).map(f))
    }

    /// The manager the id belongs to.
    pub fn cm(&self) -> &Cm<P> {
        &self.cm
    }

    /// The id's identity in events.
    pub fn handle(&self) -> IdHandle {
        IdHandle(self.key.raw())
    }

    /// The user context given at creation (a request id inherits its listener's).
    pub fn context(&self) -> u64 {
        self.read(|s| s.context).unwrap_or(0)
    }

    /// Sets the user context (librdmacm's `id->context = ...`; on an id from
    /// [`get_request`](Self::get_request) or a connection request, it replaces the one
    /// inherited from the listener). Later events of the id carry it
    /// ([`CmEvent::context`](crate::CmEvent::context)).
    pub fn set_context(&self, context: u64) {
        self.cm.with_state(|st| {
            if let Some(s) = st.ids.get_mut(self.key) {
                s.context = context;
            }
        });
    }

    /// The port space.
    pub fn port_space(&self) -> crate::PortSpace {
        self.read(|s| s.ps).unwrap_or(crate::PortSpace(0))
    }

    /// The QP type connections of this id use.
    pub fn qp_type(&self) -> QpType {
        self.read(|s| s.qp_type).unwrap_or_default()
    }

    /// Whether calls wait for their events (no user channel).
    pub fn is_sync(&self) -> bool {
        self.read(|s| s.sync).unwrap_or(false)
    }

    /// The device the id is bound to (`id->verbs`), if any.
    pub fn device(&self) -> Option<DeviceId> {
        self.cm.with_state(|st| {
            let d = st.ids.get(self.key)?.dev?;
            Some(st.device_id(d))
        })
    }

    /// Local address.
    pub fn src_addr(&self) -> Option<SocketAddr> {
        self.read(|s| s.src.map(SocketAddr::V4)).flatten()
    }

    /// Remote address.
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        self.read(|s| s.dst.map(SocketAddr::V4)).flatten()
    }

    /// The QP number, if the id has a QP.
    pub fn qp_num(&self) -> Option<u32> {
        self.read(|s| s.qp.as_ref().map(|q| q.qpn)).flatten()
    }

    /// The event the last synchronous call completed with (`id->event`): for a request id
    /// from [`get_request`](Self::get_request), the connection request with its private
    /// data; after a failed `connect`, the REJECTED event with the peer's.
    pub fn event(&self) -> Option<EventInfo> {
        self.read(|s| {
            s.last_event.as_ref().map(|e| EventInfo {
                event: e.ty,
                status: e.status,
                param: e.param.clone(),
            })
        })
        .flatten()
    }

    /// Lends the id's verbs objects to `f`, which must not call back into the manager (its
    /// state and the id's data path are locked meanwhile). EINVAL for an id bound to no
    /// device.
    pub fn with_verbs<R>(&self, f: impl FnOnce(IdVerbs<'_, P>) -> R) -> Result<R, Error> {
        self.cm.with_state(|st| {
            let s = st.ids.get_mut(self.key).ok_or(Error::InvalidArgument)?;
            let d = s.dev.ok_or(Error::InvalidArgument)?;
            let dev = st.devs.get(d).ok_or(Error::NoDevice)?;
            let pd = s.pd.and_then(|k| dev.pds.get(k)).map(|r| &r.pd);
            let srq = s.srq.as_ref().map(|x| &*x.srq);
            let mut path = s.path.lock();
            let (qp, send_cq, send_ch, recv_cq, recv_ch) = match path.qp.as_mut() {
                Some(q) => {
                    let (sc, sch) = match q.send_cq.as_mut() {
                        Some(a) => (Some(&*a.cq), a.channel.as_mut()),
                        None => (None, None),
                    };
                    let (rc, rch) = match q.recv_cq.as_mut() {
                        Some(a) => (Some(&*a.cq), a.channel.as_mut()),
                        None => (None, None),
                    };
                    (Some(&mut q.qp), sc, sch, rc, rch)
                }
                None => (None, None, None, None, None),
            };
            Ok(f(IdVerbs {
                provider: &dev.provider,
                pd,
                qp,
                send_cq,
                send_cq_channel: send_ch,
                recv_cq,
                recv_cq_channel: recv_ch,
                srq,
            }))
        })
    }

    /// The id's data path ([`DataPath`]): posts to its QP and SRQ and polls of its QP's CQs
    /// that take only the id's own lock, never the manager's nor a device-wide one, so each
    /// thread of a thread-per-core program drives its connections without contention. The
    /// handle follows the id's QP (one created or destroyed later is seen); it can be cloned
    /// and sent to another thread (where the provider's objects can). EINVAL while the id has
    /// no QP.
    pub fn data_path(&self) -> Result<DataPath<P>, Error> {
        if self.path.lock().qp.is_none() {
            return Err(Error::InvalidArgument);
        }
        Ok(DataPath {
            cell: self.path.clone(),
        })
    }

    // -------------------------------------------------------------- address and route

    /// `rdma_bind_addr`. EINVAL if the id is not idle; EAFNOSUPPORT for IPv6;
    /// EADDRNOTAVAIL for an address no device has (wildcard and loopback addresses bind no
    /// device), or a port conflict involving a wildcard; EADDRINUSE for the same address
    /// and port bound twice. Port 0 picks an ephemeral port.
    pub fn bind_addr(&self, addr: &SocketAddr) -> Result<(), Error> {
        let a = v4(addr)?;
        self.cm.with_state(|st| st.bind(self.key, a))
    }

    /// `rdma_resolve_addr`: binds implicitly if needed (to `src` or a wildcard), picks the
    /// device (the bound one, the one owning `dst`, else the first), and waits (sync ids)
    /// until the neighbour table knows `dst` (→ bound to the device) or `timeout_ms` passed
    /// (ETIMEDOUT). EINVAL in any state but idle or bound.
    pub fn resolve_addr(
        &self,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: u32,
    ) -> Result<(), Error> {
        let src = src.map(v4).transpose()?;
        let dst = v4(dst)?;
        self.cm
            .with_state(|st| st.resolve_addr(self.key, src, dst, timeout_ms))?;
        self.cm.complete(self.key)
    }

    /// `rdma_resolve_route`: EINVAL unless the address is resolved, or for a zero timeout.
    pub fn resolve_route(&self, timeout_ms: u32) -> Result<(), Error> {
        self.cm
            .with_state(|st| st.resolve_route(self.key, timeout_ms))?;
        self.cm.complete(self.key)
    }

    /// `rdma_set_option(id, level, optname, optval, optlen)`, `val` being the option's bytes
    /// as C passes them (`int` in native byte order, `u8`, or `struct ibv_path_data`s).
    /// Errors are the kernel's (`ucma_set_option`):
    ///
    /// * [`OPTION_ID`](crate::OPTION_ID) / [`OPTION_ID_TOS`](crate::OPTION_ID_TOS) (1 byte):
    ///   the traffic class of the path `resolve_route` makes afterwards (REQ primary path,
    ///   GRH of the QP's address vector; SL stays 0, no VLAN). Accepted in any state; a route
    ///   already resolved keeps its class, as in the kernel.
    /// * `OPTION_ID_REUSEADDR` (4-byte int): binds skip ids that set it too (a port shared
    ///   by a connected id, one in timewait, ...); listening on a shared port is still
    ///   EADDRINUSE / EADDRNOTAVAIL. EINVAL to set it on a listener, or to clear it on an id
    ///   that is not idle.
    /// * `OPTION_ID_AFONLY` (4-byte int): stored (the stack is IPv4-only); EINVAL unless the
    ///   id is idle or bound.
    /// * `OPTION_ID_ACK_TIMEOUT` (1 byte, ≤ 31: the 5-bit field; the kernel does not check,
    ///   here a larger value is EINVAL): the RTS `timeout` of the id's QP instead of the
    ///   path's; set before `resolve_route`, it also gives the path's packet life time
    ///   (timeout − 1), hence the REQ's local ACK timeout and the timewait. EINVAL for a UD id.
    /// * [`OPTION_IB`](crate::OPTION_IB) / [`OPTION_IB_PATH`](crate::OPTION_IB_PATH): the
    ///   kernel accepts path records on RoCE too, so this does rather than answering
    ///   EOPNOTSUPP: EINVAL unless `val` is a whole number of 72-byte `ibv_path_data` with one
    ///   flagged GMP | PRIMARY | BIDIRECTIONAL (with an MTU code 1..=5) and the address is
    ///   resolved; then the route is set from it (GIDs and MAC from address resolution, as
    ///   RoCE takes the L2 side from the netdev) and ROUTE_RESOLVED follows (a synchronous
    ///   id has it as its [`event`](Self::event): librdmacm would leave it for the next call).
    /// * another level or name: ENOSYS.
    pub fn set_option(&self, level: i32, optname: i32, val: &[u8]) -> Result<(), Error> {
        let routed = self
            .cm
            .with_state(|st| st.set_option(self.key, level, optname, val))?;
        if routed {
            return self.cm.complete(self.key);
        }
        Ok(())
    }

    /// The options set with [`set_option`](Self::set_option).
    pub fn options(&self) -> crate::IdOptions {
        self.cm
            .with_state(|st| st.options(self.key))
            .unwrap_or_default()
    }

    /// `rdma_init_qp_attr`: the attributes and mask that move a QP of this id to `state`,
    /// for applications that manage their QP themselves (the manager applies the same ones
    /// to the id's own QP). INIT: port 1, P_Key index 0, and the Q_Key 0x01234567 (UD) or
    /// the access flags (RC: none before the request, remote write / read / atomics on a
    /// request id that accepts reads); RTR (address vector, MTU, remote QPN, receive PSN,
    /// responder resources) and RTS (send PSN, ACK timeout (the option's if set), retry
    /// counts, initiator depth) once the peer's QP is known: an active id whose REP arrived
    /// or a connection request (connected or not). EINVAL for an id bound to no device (the
    /// kernel's answer), RTR/RTS before that point or on a UD id, and other states.
    pub fn init_qp_attr(
        &self,
        state: verbs::QpState,
    ) -> Result<(verbs::QpAttr, verbs::QpAttrMask), Error> {
        self.cm.with_state(|st| st.init_qp_attr(self.key, state))
    }

    /// Whether the id is in the IB CM timewait (after DISCONNECTED, until TIMEWAIT_EXIT).
    pub fn in_timewait(&self) -> bool {
        self.read(|s| s.timewait_until.is_some()).unwrap_or(false)
    }

    // -------------------------------------------------------------- passive side

    /// `rdma_listen`: an idle id is bound to 0.0.0.0 and an ephemeral port first; EINVAL
    /// unless bound (listen twice). A backlog ≤ 0 or > 1024 means 1024.
    pub fn listen(&self, backlog: i32) -> Result<(), Error> {
        self.cm.with_state(|st| st.listen(self.key, backlog))
    }

    /// `rdma_get_request`: waits for a connection request on a synchronous listener (an
    /// asynchronous one: EINVAL) and returns its id, synchronous, bound to the device the request
    /// came in on, with the request as its [`event`](Self::event). If the listener saved QP
    /// attributes (passive `create_ep`), the new id gets a QP with CQs of its own, or the CQs and
    /// SRQ the saved attributes name, shared by every request
    /// (`docs/cm.md#requests-from-a-listener`; the id's `send_cq`/`recv_cq` then stay unset).
    ///
    /// A REJECTED event is ECONNREFUSED, another error event its errno, any other event
    /// EINVAL (each kept as the listener's `event`). Where librdmacm leaks the new id when
    /// its QP cannot be created, this destroys it (the peer is rejected) and returns the
    /// error.
    pub fn get_request(&self) -> Result<CmId<P>, Error> {
        let chan = self.cm.with_state(|st| {
            let s = st.ids.get_mut(self.key).ok_or(Error::InvalidArgument)?;
            if !s.sync {
                return Err(Error::InvalidArgument);
            }
            s.last_event = None;
            Ok(s.chan)
        })?;
        let ev = self.cm.pop_event(chan)?;
        let bad = match (ev.ty, crate::api::event_result(&ev)) {
            (_, Err(e)) => Some(e),
            (EventType::ConnectRequest, Ok(())) => None,
            _ => Some(Error::InvalidArgument),
        };
        if let Some(e) = bad {
            self.cm.with_state(|st| {
                if let Some(s) = st.ids.get_mut(self.key) {
                    s.last_event = Some(ev);
                }
            });
            return Err(e);
        }
        let new = ev.id;
        let listener = self.key;
        self.cm.with_state(|st| -> Result<(), Error> {
            let (saved, saved_pd) = match st.ids.get(listener) {
                Some(l) => (l.saved.clone(), l.saved_pd),
                None => (None, None),
            };
            if let Some(a) = saved {
                let pd = saved_pd.map(|(d, key)| CmPd {
                    dev: st.device_id(d),
                    key,
                });
                // The saved CQs and SRQ (if any) are shared by every connection.
                let mut attr = QpInitAttr {
                    qp_type: a.qp_type,
                    send_cq: a.user.send_cq,
                    recv_cq: a.user.recv_cq,
                    srq: a.user.srq,
                    cap: a.cap,
                    sq_sig_all: a.sq_sig_all,
                };
                if let Err(e) = st.create_qp(new, pd.as_ref(), &mut attr) {
                    st.teardown(new);
                    return Err(e);
                }
            }
            if let Some(s) = st.ids.get_mut(new) {
                s.last_event = Some(ev);
            }
            Ok(())
        })?;
        Ok(self.cm.id_of(new))
    }

    /// `rdma_accept`: for a connected id, moves the QP to RTR and RTS with the request's
    /// parameters, sends the REP and (sync ids) waits for the RTU: ESTABLISHED → Ok,
    /// REJECTED → ECONNREFUSED, no RTU after the retries → ETIMEDOUT. A UD id answers the
    /// SIDR_REQ and returns at once.
    ///
    /// EINVAL: not a pending request, no QP and no `param`, read resources above the device
    /// maximum, private data over 196 bytes (136 for UD; RC also rejects the peer with REJ
    /// 28). A failed QP transition returns its error and leaves the request pending.
    pub fn accept(&self, param: Option<&ConnParam<'_>>) -> Result<(), Error> {
        let wait = self.cm.with_state(|st| st.accept(self.key, param))?;
        if !wait {
            self.cm.with_state(|st| {
                if let Some(s) = st.ids.get_mut(self.key) {
                    s.last_event = None;
                }
            });
            return Ok(());
        }
        self.cm.complete(self.key)
    }

    /// `rdma_reject`: REJ reason 28 "consumer defined" with up to 148 bytes of private data
    /// (UD: SIDR_REP status 2, 136 bytes). EINVAL if the id is not a pending request or the
    /// data is too long. Does not wait; the id must still be destroyed.
    pub fn reject(&self, private_data: &[u8]) -> Result<(), Error> {
        self.cm.with_state(|st| st.reject(self.key, private_data))
    }

    // -------------------------------------------------------------- active side

    /// `rdma_connect`: sends the REQ (UD: SIDR_REQ) with the rdma_cm header and up to 56
    /// bytes of private data (UD 180) and, for synchronous ids, waits: ESTABLISHED (the
    /// engine moved the QP to RTR/RTS and sent the RTU) → Ok; REJECTED → ECONNREFUSED (see
    /// [`event`](Self::event) for the reason and the peer's private data); no answer after
    /// the retries → ETIMEDOUT; the QP transition failed → EPERM.
    ///
    /// EINVAL: route not resolved (connect twice, before resolving), no QP and no `param`
    /// (PS_TCP), read resources above the device maximum, too much private data.
    pub fn connect(&self, param: Option<&ConnParam<'_>>) -> Result<(), Error> {
        self.cm.with_state(|st| st.connect(self.key, param))?;
        self.cm.complete(self.key)
    }

    /// `rdma_establish`: for an id without a QP whose REP arrived (CONNECT_RESPONSE), sends
    /// the RTU. EINVAL for an id with a QP or without a REP.
    pub fn establish(&self) -> Result<(), Error> {
        self.cm.with_state(|st| st.establish(self.key))
    }

    /// `rdma_notify`: hands the manager an asynchronous event of the id's QP that the
    /// application read itself (with [`CmConfig::watch_async_events`](crate::CmConfig::watch_async_events)
    /// off). COMM_EST establishes a passive connection whose RTU has not arrived (a no-op in
    /// any other state, as in the IB CM); other event types: EINVAL.
    pub fn notify(&self, event: verbs::AsyncEventType) -> Result<(), Error> {
        if event != verbs::AsyncEventType::CommEst {
            return Err(Error::InvalidArgument);
        }
        self.cm.with_state(|st| {
            st.id(self.key)?;
            st.rtu_received(self.key);
            Ok(())
        })
    }

    /// `rdma_disconnect`: moves the QP to ERR (its posted work requests complete with
    /// WR_FLUSH_ERR), then sends a DREQ (or the DREP to the peer's DREQ) and, for synchronous
    /// ids, waits for the next event: DISCONNECTED → Ok (at once if the peer disconnected
    /// first), −ETIMEDOUT after the DREQ retries. EINVAL for an id never bound or never
    /// connected. A datagram id has no DREQ: its QP moves to ERR; an SRD id returns at once
    /// (no event comes), a synchronous UD id waits as librdmacm's does.
    ///
    /// Once disconnected (DREP received or sent, or the DREQ retries exhausted) the id is in
    /// the IB CM timewait for 4.096 µs × 2^(the path's local ACK timeout) (≈ 537 ms with
    /// the default packet life time 16); its end is TIMEWAIT_EXIT on an asynchronous id.
    /// Meanwhile a late duplicate of that connection's REQ is rejected with REJ 10 "stale
    /// connection", as is a REQ naming the QP of a live connection; a new connection from
    /// the same peer QP number is accepted (as Linux's ib_cm does).
    pub fn disconnect(&self) -> Result<(), Error> {
        let srd = self.cm.with_state(|st| {
            st.disconnect(self.key)?;
            st.id(self.key).map(|s| s.qp_type == verbs::QpType::Srd)
        })?;
        // An SRD id (our extension) has no connection and gets no event to wait for: its QP
        // is in the error state and the call returns at once. (A synchronous UD id waits, as
        // librdmacm's `ucma_complete` does after the kernel's event-less disconnect.)
        if srd {
            return Ok(());
        }
        self.cm.complete(self.key)
    }

    // -------------------------------------------------------------- QP

    /// `rdma_create_qp`: a QP for the id, on `pd` (which must belong to the id's device,
    /// else EINVAL) or the id's PD (the device's default PD, shared by every id bound to it).
    /// Missing CQs are created (`cap.max_send_wr` / `cap.max_recv_wr` entries; 0: none),
    /// each with its own completion channel, exposed on the id and written back into `attr`
    /// as shared handles (as librdmacm writes `id->send_cq` / `id->recv_cq` back), with the
    /// id's [`IdHandle::cq_context`] as their CQ context; the caller's CQs are used
    /// (and held while the QP exists) but not recorded as the id's. `attr.srq` is used as
    /// given, else the id's SRQ ([`create_srq`](Self::create_srq)), written back. The QP is
    /// moved to INIT (UD: to RTS with Q_Key 0x01234567); the actual caps are written back
    /// into `attr`.
    ///
    /// EINVAL: the id has a QP already, is bound to no device, is listening, or `attr`'s QP
    /// type is not the id's, its SRQ is of another device or PD; a provider error otherwise
    /// (everything created is destroyed).
    pub fn create_qp(
        &self,
        pd: Option<&CmPd>,
        attr: &mut QpInitAttr<P::Cq, P::Srq>,
    ) -> Result<(), Error> {
        self.cm.with_state(|st| st.create_qp(self.key, pd, attr))
    }

    /// `rdma_create_srq`: an SRQ for the id (`id->srq`), on `pd` (of the id's device, else
    /// EINVAL) or the id's PD; `attr` receives the actual sizes. A QP created on the id
    /// afterwards takes it when its attributes name no SRQ, and
    /// [`post_recv`](Self::post_recv) posts to it. Destroyed by
    /// [`destroy_srq`](Self::destroy_srq) or with the id (after its QP, CQs and channels).
    ///
    /// EINVAL: the id is bound to no device or has an SRQ already; a provider error
    /// otherwise (EINVAL for sizes it cannot make).
    pub fn create_srq(&self, pd: Option<&CmPd>, attr: &mut SrqAttr) -> Result<(), Error> {
        self.cm.with_state(|st| st.create_srq(self.key, pd, attr))
    }

    /// `rdma_destroy_srq`: EINVAL without an SRQ; EBUSY while a QP uses it (the id's QP, or
    /// another one it was given to).
    pub fn destroy_srq(&self) -> Result<(), Error> {
        self.cm.with_state(|st| st.destroy_srq(self.key))
    }

    /// The id's SRQ (`id->srq`), as a shared handle for other QPs' attributes (a QP holding
    /// it keeps [`destroy_srq`](Self::destroy_srq) from succeeding).
    pub fn srq(&self) -> Option<Arc<P::Srq>> {
        self.read(|s| s.srq.as_ref().map(|x| x.srq.clone()))
            .flatten()
    }

    /// Whether the id has a QP and that QP receives from an SRQ.
    pub fn qp_on_srq(&self) -> bool {
        self.read(|s| s.qp.as_ref().is_some_and(|q| q.on_srq))
            .unwrap_or(false)
    }

    /// `rdma_destroy_qp`: the QP, then the CQs the id created, then their channels. EINVAL
    /// without a QP. A CQ the id created that the caller still holds (the handle written back
    /// by `create_qp`) is the caller's from then on, to destroy with the provider once no QP
    /// uses it (its channel stays with it).
    pub fn destroy_qp(&self) -> Result<(), Error> {
        self.cm.with_state(|st| st.destroy_qp(self.key))
    }

    // -------------------------------------------------------------- lifetime

    /// `rdma_migrate_id`: moves the id (and its unread events) to `channel`, making it
    /// asynchronous; `None` makes an asynchronous id synchronous again (EINVAL for an id that
    /// is synchronous already).
    pub fn migrate_id(&self, channel: Option<&EventChannel<P>>) -> Result<(), Error> {
        self.cm
            .with_state(|st| st.migrate(self.key, channel.map(|c| c.key)))
    }

    /// `rdma_destroy_ep`: the QP, the CQs the id created and their channels, the id's SRQ (the
    /// caller's CQs and SRQ are only released, never destroyed), then the id: a connected id sends
    /// a DREQ (retransmitted until answered), a pending request or reply is rejected (REJ 28; an
    /// outstanding REQ: REJ 4 "timeout"), a listener stops and rejects the requests not yet
    /// retrieved; unread events are discarded; the last id of a device frees the default PD. An id
    /// in timewait goes at once, with its timewait (no TIMEWAIT_EXIT follows, and its peer's QP
    /// number is no longer stale).
    pub fn destroy_ep(self) {
        drop(self);
    }

    /// `rdma_destroy_id`. Unlike librdmacm it also destroys a QP left on the id (which would
    /// otherwise leak), so it is [`destroy_ep`](Self::destroy_ep).
    pub fn destroy_id(self) {
        drop(self);
    }
}
