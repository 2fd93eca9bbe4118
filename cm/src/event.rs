//! Events (`struct rdma_cm_event`), connection parameters (`struct rdma_conn_param`) and event
//! channels (`struct rdma_event_channel`).

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use verbs::{AhAttr, Provider};

use crate::Cm;
use crate::error::Error;
use crate::id::{CmId, IdHandle};
use crate::slab::Key;

/// Event types (`enum rdma_cm_event_type`, with its ABI values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventType {
    /// Address resolved; the id is bound to a device.
    AddrResolved = 0,
    /// Address resolution failed (status −errno).
    AddrError = 1,
    /// Route resolved.
    RouteResolved = 2,
    /// Route resolution failed.
    RouteError = 3,
    /// A connection request, on the listener's channel; the event carries the new id.
    ConnectRequest = 4,
    /// A REP arrived for an id without a QP ([`CmId::establish`] completes it).
    ConnectResponse = 5,
    /// The connection could not be established (status −1: the QP could not be moved to
    /// RTR/RTS).
    ConnectError = 6,
    /// The peer did not answer (status −ETIMEDOUT), or a SIDR status ≠ 0.
    Unreachable = 7,
    /// The peer rejected (status = the REJ reason).
    Rejected = 8,
    /// Connected.
    Established = 9,
    /// Disconnected (status 0, or −ETIMEDOUT when the DREQ went unanswered).
    Disconnected = 10,
    /// The device went away.
    DeviceRemoval = 11,
    /// Multicast join done (not produced here).
    MulticastJoin = 12,
    /// Multicast join failed (not produced here).
    MulticastError = 13,
    /// Address change (not produced here).
    AddrChange = 14,
    /// The id left the IB CM timewait that followed DISCONNECTED (its peer's QP number may
    /// connect again): asynchronous ids only, status 0.
    TimewaitExit = 15,
}

/// Connection parameters of an event (`event->param.conn`), from the receiver's point of
/// view: `responder_resources` is the sender's initiator depth and vice versa.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnData {
    /// Private data: the whole protocol buffer (REQ 56 after the rdma_cm header, REP 196,
    /// REJ 148), not the length the peer wrote; unused bytes are zero. Empty for events whose
    /// message carries none to the consumer (passive ESTABLISHED, DISCONNECTED).
    pub private_data: Vec<u8>,
    /// RDMA reads/atomics the peer may issue to us.
    pub responder_resources: u8,
    /// RDMA reads/atomics we may issue to the peer.
    pub initiator_depth: u8,
    /// The sender's end-to-end flow control bit.
    pub flow_control: bool,
    /// The REQ's retry count (for the passive QP).
    pub retry_count: u8,
    /// The RNR retry count the sender asks our QP to use.
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// The sender's QP number.
    pub qp_num: u32,
}

/// Connection parameters given to [`CmId::connect`] and [`CmId::accept`]
/// (`struct rdma_conn_param`). `None` instead of a `ConnParam` asks for librdmacm's
/// defaults: the device's maximum RDMA read resources (accept: the request's, capped by the
/// device), retry and RNR retry 7, no flow control. A zeroed `ConnParam` is not the same: it
/// asks for no read resources and RNR retry 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnParam<'a> {
    /// Private data: at most 56 bytes for connect (RC; 180 for UD), 196 for accept (UD 136).
    pub private_data: &'a [u8],
    /// RDMA reads/atomics we accept from the peer (0xFF: the device maximum).
    pub responder_resources: u8,
    /// RDMA reads/atomics we issue (0xFF: the device maximum).
    pub initiator_depth: u8,
    /// End-to-end flow control bit.
    pub flow_control: bool,
    /// ACK-timeout retries of our QP (connect only; at most 7).
    pub retry_count: u8,
    /// RNR retries the peer's QP is to use (at most 7).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ (only when the id has no QP).
    pub srq: bool,
    /// Our QP number (only when the id has no QP).
    pub qp_num: u32,
}

/// Datagram parameters of an event (`event->param.ud`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdData {
    /// Private data (SIDR_REQ 180 after the header, SIDR_REP 136).
    pub private_data: Vec<u8>,
    /// Address of the peer (for `create_ah`).
    pub ah_attr: AhAttr,
    /// The peer's QP number.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
}

/// The parameter part of an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EventParam {
    /// None (address and route events).
    #[default]
    None,
    /// Connected service.
    Conn(ConnData),
    /// Datagram service.
    Ud(UdData),
}

impl EventParam {
    /// The private data, whichever kind (empty for `None`).
    pub fn private_data(&self) -> &[u8] {
        match self {
            EventParam::None => &[],
            EventParam::Conn(c) => &c.private_data,
            EventParam::Ud(u) => &u.private_data,
        }
    }
}

/// An event as stored by the engine.
#[derive(Clone, Debug)]
pub(crate) struct EventRec {
    pub ty: EventType,
    pub status: i32,
    pub id: Key,
    pub listen: Option<Key>,
    pub param: EventParam,
}

/// A connection-manager event (`struct rdma_cm_event`). It is an owned value: acknowledging
/// it ([`ack_cm_event`](crate::ack_cm_event)) or dropping it frees it, and destroying an id
/// never waits for its events (librdmacm's `rdma_destroy_id` blocks until every delivered
/// event is acked; here there is nothing to wait for).
pub struct CmEvent<P: Provider> {
    /// Event type.
    pub event: EventType,
    /// 0, −errno, or a protocol status (REJ reason, SIDR status).
    pub status: i32,
    /// The id it concerns (for a connection request: the new id, see
    /// [`take_id`](Self::take_id)).
    pub id: IdHandle,
    /// The listener, for a connection request.
    pub listen_id: Option<IdHandle>,
    /// The context of the id it concerns when it was read (librdmacm's
    /// `event->id->context`; a connection request's new id starts with its listener's), so
    /// events can be matched to the application's objects without comparing handles.
    pub context: u64,
    /// Parameters and private data.
    pub param: EventParam,
    pub(crate) new_id: Option<CmId<P>>,
}

impl<P: Provider> CmEvent<P> {
    /// The new id of a [`EventType::ConnectRequest`] (once). If it is never taken, dropping
    /// the event destroys it, which rejects the peer (REJ 28), as destroying the id would.
    pub fn take_id(&mut self) -> Option<CmId<P>> {
        self.new_id.take()
    }
}

impl<P: Provider> core::fmt::Debug for CmEvent<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CmEvent")
            .field("event", &self.event)
            .field("status", &self.status)
            .field("id", &self.id)
            .field("listen_id", &self.listen_id)
            .field("context", &self.context)
            .field("param", &self.param)
            .finish()
    }
}

/// `rdma_ack_cm_event`: frees the event (equivalent to dropping it).
pub fn ack_cm_event<P: Provider>(event: CmEvent<P>) {
    drop(event);
}

/// An event channel's queue.
#[derive(Default)]
pub(crate) struct Chan {
    pub queue: VecDeque<EventRec>,
    pub nonblocking: bool,
}

/// An event channel (`rdma_create_event_channel`): ids created on it, or migrated to it,
/// report their events here, and their calls return without waiting (asynchronous ids).
pub struct EventChannel<P: Provider> {
    pub(crate) cm: Cm<P>,
    pub(crate) key: Key,
}

impl<P: Provider> EventChannel<P> {
    /// `rdma_get_cm_event`: the next event, waiting (and driving the progress engine) until
    /// there is one; with [`set_nonblocking`](Self::set_nonblocking), EAGAIN when empty.
    pub fn get_cm_event(&self) -> Result<CmEvent<P>, Error> {
        self.cm.get_event(self.key)
    }

    /// Whether events are queued (what makes a channel's file descriptor readable in
    /// librdmacm); runs no progress.
    pub fn has_events(&self) -> bool {
        self.cm
            .with_state(|st| st.chans.get(self.key).is_some_and(|c| !c.queue.is_empty()))
    }

    /// Sets O_NONBLOCK on the channel.
    pub fn set_nonblocking(&self, on: bool) {
        self.cm.with_state(|st| {
            if let Some(c) = st.chans.get_mut(self.key) {
                c.nonblocking = on;
            }
        });
    }

    /// `rdma_destroy_event_channel`. The ids on it should be destroyed first; events still
    /// queued are discarded (a connection request's new id with them: the peer is rejected).
    pub fn destroy(self) {
        drop(self);
    }
}

impl<P: Provider> Drop for EventChannel<P> {
    fn drop(&mut self) {
        self.cm.destroy_channel(self.key);
    }
}

impl<P: Provider> core::fmt::Debug for EventChannel<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EventChannel")
            .field("key", &self.key)
            .finish()
    }
}
