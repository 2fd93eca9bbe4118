//! The provider trait: what a device driver offers the verbs layer.

use crate::error::{DestroyError, Error, PostError};
use crate::flags::{AccessFlags, QpAttrMask};
use crate::mem::Buffer;
use crate::types::{
    AhAttr, DeviceAttr, Gid, MemRegion, PortAttr, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    SrqAttr,
};
use crate::wr::{AsyncEvent, CqEvent, RecvWr, SendWr, WorkCompletion};

/// A registered memory region.
pub trait MemoryRegion {
    /// Local key (for SGEs).
    fn lkey(&self) -> u32;
    /// Remote key (for peers' RDMA and atomics).
    fn rkey(&self) -> u32;
    /// First address covered.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn length(&self) -> u64;
    /// The memory it covers, when registered with [`Provider::reg_mr`] (`None` for a raw
    /// registration): write into registered memory through it. The region holds this handle
    /// until it is deregistered successfully.
    fn buffer(&self) -> Option<&Buffer>;
}

/// A completion queue.
pub trait CompletionQueue {
    /// Number of completions it can hold (at least what was asked for).
    fn cqe(&self) -> u32;
    /// CQ number.
    fn cqn(&self) -> u32;
    /// The context value it was created with (returned by completion events).
    fn cq_context(&self) -> u64;
}

/// A queue pair.
pub trait QueuePair {
    /// QP number.
    fn qp_num(&self) -> u32;
    /// Transport service.
    fn qp_type(&self) -> QpType;
    /// State after the last successful modify (the provider's view; `query_qp` asks the
    /// device).
    fn state(&self) -> QpState;
    /// Actual queue sizes.
    fn cap(&self) -> QpCap;
}

/// A shared receive queue (`ibv_srq`): receive work requests any QP attached to it consumes.
pub trait SharedReceiveQueue {
    /// SRQ number.
    fn srq_num(&self) -> u32;
    /// Actual attributes (`ibv_query_srq`: `max_wr`, `max_sge`, the limit as last armed).
    fn attr(&self) -> SrqAttr;
}

/// What a device driver offers the verbs layer: libibverbs' verbs with Rust ownership.
///
/// Objects are values owned by the caller. Destroying one consumes it; if the provider finds
/// it busy, or the device refuses the command, the object comes back in
/// [`DestroyError::object`].
///
/// The fast path takes `&mut` QPs (one poster per QP, no lock) and `&` CQs (a CQ may be polled
/// from any thread; the provider serialises pollers of one CQ). Neither allocates.
///
/// Events are polled: a completion channel is a queue the caller drains with
/// [`get_cq_event`](Self::get_cq_event); asynchronous events come from
/// [`get_async_event`](Self::get_async_event). A provider whose platform delivers interrupts
/// may also let the caller sleep until one arrives ([`wait_cq_event`](Self::wait_cq_event),
/// [`wait_async_event`](Self::wait_async_event)); the defaults say NotSupported.
pub trait Provider {
    /// Protection domain.
    type Pd;
    /// Memory region.
    type Mr: MemoryRegion;
    /// Completion queue.
    type Cq: CompletionQueue;
    /// Queue pair.
    type Qp: QueuePair;
    /// Shared receive queue.
    type Srq: SharedReceiveQueue;
    /// Address handle (UD destinations).
    type Ah;
    /// Completion channel.
    type CompChannel;

    /// Device attributes (`ibv_query_device`).
    fn query_device(&self) -> Result<DeviceAttr, Error>;
    /// Port attributes (`ibv_query_port`); ports are numbered from 1.
    fn query_port(&self, port: u8) -> Result<PortAttr, Error>;
    /// GID table entry (`ibv_query_gid`); an unset entry reads as the zero GID.
    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, Error>;

    /// Allocates a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(&self) -> Result<Self::Pd, Error>;
    /// Frees a protection domain (`ibv_dealloc_pd`); EBUSY while objects use it.
    fn dealloc_pd(&self, pd: Self::Pd) -> Result<(), DestroyError<Self::Pd>>;

    /// Allocates `len` bytes (not 0) of zeroed, page-aligned memory the device can reach, from
    /// the device's own DMA allocator: the memory to register with [`reg_mr`](Self::reg_mr).
    /// ENOMEM when none is left, EINVAL for a length of 0.
    fn alloc_buf(&self, len: usize) -> Result<Buffer, Error>;

    /// Makes memory the program gives up for good (`&'static mut`: a
    /// [`StaticBytes`](crate::StaticBytes) taken once, a leaked allocation) reachable by the
    /// device, as a [`Buffer`] to register with [`reg_mr`](Self::reg_mr): registering the
    /// program's own memory, as `ibv_reg_mr` on a static array does in C. The bytes are
    /// reached through the buffer from then on; when its last handle is dropped the device's
    /// mapping goes away (the memory is never freed: it is the program's). The default:
    /// NotSupported (DMA that cannot map memory it did not allocate); EINVAL for no bytes.
    fn map_buf(&self, mem: &'static mut [u8]) -> Result<Buffer, Error> {
        let _ = mem;
        Err(Error::NotSupported)
    }

    /// Registers memory (`ibv_reg_mr`): the window `mem` (use [`Buffer::slice`] to register a
    /// part). The memory region holds the handle until [`dereg_mr`](Self::dereg_mr)
    /// succeeded, and leaks it if it is dropped without that (so the memory is never freed
    /// while the device may still use it). EINVAL for an empty window, for memory of a device
    /// address space the device does not translate through ([`Buffer::address_space`]), or
    /// for access flags the provider does not know.
    fn reg_mr(&self, pd: &Self::Pd, mem: Buffer, access: AccessFlags) -> Result<Self::Mr, Error>;

    /// Registers a raw range of device addresses (see [`MemRegion`]); the memory region holds
    /// no [`Buffer`] ([`MemoryRegion::buffer`] is `None`).
    ///
    /// # Safety
    ///
    /// The caller owns the memory the range names (in the device's address space) and keeps it
    /// allocated, mapped for the device and otherwise unused (nothing else is given those
    /// bytes) until [`dereg_mr`](Self::dereg_mr) of the region returned `Ok`, or forever if no
    /// deregistration succeeds (a failed one, or a region dropped without one). CPU accesses to
    /// the memory meanwhile race with the device's; they follow the rules of [`Buffer`]'s
    /// accessors (atomic byte accesses, or plain copies that race with nothing).
    unsafe fn reg_mr_raw(
        &self,
        pd: &Self::Pd,
        mem: &MemRegion<'_>,
        access: AccessFlags,
    ) -> Result<Self::Mr, Error>;

    /// Deregisters memory (`ibv_dereg_mr`); after success the device no longer touches it and
    /// the region's [`Buffer`] handle is dropped. On failure, a region handed back in
    /// [`DestroyError::object`] keeps its memory; one not handed back leaks it.
    fn dereg_mr(&self, mr: Self::Mr) -> Result<(), DestroyError<Self::Mr>>;

    /// Creates a completion channel (`ibv_create_comp_channel`).
    fn create_comp_channel(&self) -> Result<Self::CompChannel, Error>;
    /// Destroys a completion channel; EBUSY while CQs use it.
    fn destroy_comp_channel(
        &self,
        channel: Self::CompChannel,
    ) -> Result<(), DestroyError<Self::CompChannel>>;
    /// The next completion event of the channel, if any (`ibv_get_cq_event`, non-blocking).
    /// Each event re-enables the CQ for one [`req_notify_cq`](Self::req_notify_cq).
    fn get_cq_event(&self, channel: &mut Self::CompChannel) -> Result<Option<CqEvent>, Error>;
    /// Waits up to `timeout_ns` nanoseconds for the channel's next completion event (the
    /// blocking `ibv_get_cq_event`); `None` when the time ran out. The default: NotSupported
    /// (poll [`get_cq_event`](Self::get_cq_event) instead).
    fn wait_cq_event(
        &self,
        channel: &mut Self::CompChannel,
        timeout_ns: u64,
    ) -> Result<Option<CqEvent>, Error> {
        let _ = (channel, timeout_ns);
        Err(Error::NotSupported)
    }
    /// Waits up to `timeout_ns` nanoseconds for the next completion event of any of
    /// `channels` (`poll(2)` on their descriptors, then `ibv_get_cq_event` on the ready one):
    /// the index of its channel and the event, `None` when the time ran out. The default
    /// serves one channel with [`wait_cq_event`](Self::wait_cq_event) and says NotSupported
    /// for more.
    fn wait_cq_events(
        &self,
        channels: &mut [&mut Self::CompChannel],
        timeout_ns: u64,
    ) -> Result<Option<(usize, CqEvent)>, Error> {
        match channels {
            [one] => Ok(self.wait_cq_event(one, timeout_ns)?.map(|e| (0, e))),
            _ => Err(Error::NotSupported),
        }
    }

    /// Creates a CQ of at least `cqe` entries (`ibv_create_cq`); its completion events go to
    /// `channel` (none: events are not delivered).
    fn create_cq(
        &self,
        cqe: u32,
        cq_context: u64,
        channel: Option<&Self::CompChannel>,
    ) -> Result<Self::Cq, Error>;
    /// Destroys a CQ (`ibv_destroy_cq`); EBUSY while QPs use it.
    fn destroy_cq(&self, cq: Self::Cq) -> Result<(), DestroyError<Self::Cq>>;
    /// Polls up to `wc.len()` completions (`ibv_poll_cq`); returns how many were written. A
    /// malformed completion from the device is consumed and reported as an error (after the
    /// good completions before it were returned).
    ///
    /// As with `ibv_poll_cq`, a completion's fields that do not apply to its opcode and
    /// status are undefined (see [`WorkCompletion`]): the provider may leave them as the
    /// caller's slice held them, and callers must not read them.
    fn poll_cq(&self, cq: &Self::Cq, wc: &mut [WorkCompletion]) -> Result<usize, Error>;
    /// Requests a completion event for the next completion (`ibv_req_notify_cq`; with
    /// `solicited_only`, the next solicited one).
    fn req_notify_cq(&self, cq: &Self::Cq, solicited_only: bool) -> Result<(), Error>;

    /// Creates a QP in RESET (`ibv_create_qp`); returns it and the actual sizes.
    fn create_qp(
        &self,
        pd: &Self::Pd,
        attr: &QpInitAttr<'_, Self::Cq, Self::Srq>,
    ) -> Result<(Self::Qp, QpCap), Error>;
    /// Modifies a QP (`ibv_modify_qp`); the mask is checked with
    /// [`check_modify`](crate::check_modify) first.
    fn modify_qp(&self, qp: &mut Self::Qp, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error>;
    /// Queries a QP (`ibv_query_qp`): the state and PSNs from the device, the other
    /// attributes as last set.
    fn query_qp(&self, qp: &Self::Qp) -> Result<QpAttr, Error>;
    /// Destroys a QP (`ibv_destroy_qp`); its completions still in its CQs are discarded.
    fn destroy_qp(&self, qp: Self::Qp) -> Result<(), DestroyError<Self::Qp>>;
    /// Posts send work requests (`ibv_post_send`). On error, the requests before
    /// [`PostError::bad_wr`] were posted.
    fn post_send(&self, qp: &mut Self::Qp, wrs: &[SendWr<'_, Self::Ah>]) -> Result<(), PostError>;
    /// Posts receive work requests (`ibv_post_recv`). On error, the requests before
    /// [`PostError::bad_wr`] were posted.
    fn post_recv(&self, qp: &mut Self::Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;

    /// Creates a shared receive queue (`ibv_create_srq`) of at least `attr.max_wr` work
    /// requests of `attr.max_sge` scatter entries; its actual attributes are
    /// [`SharedReceiveQueue::attr`]. EINVAL for zero or too large sizes or a limit above
    /// `max_wr`.
    fn create_srq(&self, pd: &Self::Pd, attr: &SrqAttr) -> Result<Self::Srq, Error>;
    /// Destroys an SRQ (`ibv_destroy_srq`); EBUSY while QPs use it.
    fn destroy_srq(&self, srq: Self::Srq) -> Result<(), DestroyError<Self::Srq>>;
    /// Posts receive work requests to an SRQ (`ibv_post_srq_recv`); any QP attached to it
    /// takes them, in order. Takes `&` (an SRQ is shared by its QPs and their owners): the
    /// provider serialises posters. ENOMEM when the SRQ is full, EINVAL for too many SGEs.
    /// On error, the requests before [`PostError::bad_wr`] were posted.
    fn post_srq_recv(&self, srq: &Self::Srq, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;

    /// Creates an address handle (`ibv_create_ah`).
    fn create_ah(&self, pd: &Self::Pd, attr: &AhAttr) -> Result<Self::Ah, Error>;
    /// Destroys an address handle (`ibv_destroy_ah`).
    fn destroy_ah(&self, ah: Self::Ah) -> Result<(), DestroyError<Self::Ah>>;

    /// The next asynchronous event, if any (`ibv_get_async_event`, non-blocking).
    fn get_async_event(&self) -> Result<Option<AsyncEvent>, Error>;
    /// Waits up to `timeout_ns` nanoseconds for the next asynchronous event (the blocking
    /// `ibv_get_async_event`); `None` when the time ran out. The default: NotSupported.
    fn wait_async_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>, Error> {
        let _ = timeout_ns;
        Err(Error::NotSupported)
    }
}
