//! The one instance of the stack in a process: the opened device inside a connection manager
//! ([`cm::Cm`]), the verbs objects C programs hold (PD, MR, completion channel, CQ, QP, AH)
//! and the connection manager's (event channel, id, event), and the progress thread.
//!
//! Everything is generic over the device type ([`Stack`]) and reached through the object-safe
//! [`Backend`] trait, whose methods take and return the C objects; `librdmacm.so.1` reaches
//! the connection-manager half through this library's `rdma_stack_*` entry points, so both
//! libraries share this one instance.
//!
//! # Progress
//!
//! A thread started with the stack runs the connection manager's progress engine (received
//! MADs, retransmissions, timeouts) every millisecond, moves completion events from the
//! provider's channels to their C channels, and makes every channel's file descriptor (an
//! eventfd) readable while it holds events: programs `poll()` them. The device itself runs
//! on its own thread (the UDP fabric's emulated NIC) or in the calls that wait on it.
//!
//! # Memory
//!
//! `ibv_reg_mr` registers the program's own memory. On an emulated NIC it is mapped into
//! the NIC's IOMMU ([`nic_hal::HeapDma::map_external`]) and registered raw
//! ([`verbs::Provider::reg_mr_raw`]); the contract is the caller's (libibverbs' own): the
//! memory stays allocated until `ibv_dereg_mr`. A real NIC would need the pages pinned and
//! mapped through VFIO: EOPNOTSUPP there for now.

use core::ffi::{c_int, c_uint, c_void};
use core::mem::size_of;
use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::ptr::{self, NonNull, null_mut};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use capi_abi::ibv::*;
use capi_abi::rdmacm::*;
use cm::{
    AddrInfo, Cm, CmConfig, CmId, CmPd, ConnParam, DataPath, DeviceId, EventChannel, EventParam,
    EventType, PortSpace, QpInitAttr, RaiFlags,
};
use device_open::Device;
use libc::{EAGAIN, EINVAL, ENOMEM, EOPNOTSUPP};
use verbs::{
    AccessFlags, CompletionQueue, MemRegion, MemoryRegion, QpCap, QpType, QueuePair, RecvWr,
    RemoteOp, SendFlags, SendWr, Sge, UdDest, WcFlags, WorkCompletion, WrOpcode,
};

use crate::set_errno;

/// Locks `m`, recovering from a poisoned lock (a panic elsewhere leaves the data usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Event file descriptors.

/// An eventfd: readable while its counter is not zero.
struct EventFd(c_int);

impl EventFd {
    /// A blocking eventfd (so that a program can tell `O_NONBLOCK` it set from our own).
    fn new() -> Result<EventFd, c_int> {
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(errno());
        }
        Ok(EventFd(fd))
    }

    /// Makes the descriptor readable.
    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd (never blocks: the counter is
        // far from its maximum).
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    /// Makes the descriptor unreadable again. Callers serialise their clears (the channel's
    /// lock), so a readable descriptor is still readable when read.
    fn clear(&self) {
        if self.ready(0) {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a local from our eventfd, which is readable.
            let _ = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// Waits up to `ms` milliseconds for the descriptor to become readable (a cancellation
    /// point: nothing with a destructor may be live in the caller's frame across it);
    /// whether it is.
    fn ready(&self, ms: c_int) -> bool {
        let mut p = libc::pollfd {
            fd: self.0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    /// Whether the program put the descriptor in non-blocking mode (`fcntl(O_NONBLOCK)` on
    /// the channel's fd, as librdmacm and libibverbs document for their channels): the
    /// blocking calls then answer EAGAIN instead of waiting.
    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our descriptor.
        let fl = unsafe { libc::fcntl(self.0, libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno location is always valid.
    unsafe { *libc::__errno_location() }
}

// ---------------------------------------------------------------------------------------------
// The C objects.

/// A protection domain: the manager's PD.
#[repr(C)]
pub struct Pd {
    c: ibv_pd,
    pd: CmPd,
}

/// A memory region.
#[repr(C)]
pub struct Mr<D: Device> {
    c: ibv_mr,
    mr: Option<D::Mr>,
    /// The device address the program's memory was mapped at (emulated NICs).
    mapped: Option<u64>,
}

/// A completion channel: the provider's channel, the events taken from it, and the fd.
///
/// Lock order: the stack's `comp_channels`, then `ch`, then `queue`, then the stack's
/// `cq_events`.
#[repr(C)]
pub struct Channel<D: Device> {
    c: ibv_comp_channel,
    /// The provider's channel. Held while its events move to `queue`, so that a CQ's events
    /// are either still in the provider (which drops those of destroyed CQs) or in `queue`
    /// (where ibv_destroy_cq removes them).
    ch: Mutex<D::CompChannel>,
    /// CQ contexts (our `Cq` addresses) of events not yet read; the fd is readable while
    /// this is not empty (both change under this lock).
    queue: Mutex<VecDeque<u64>>,
    efd: EventFd,
    /// The CQs using the channel (changed under the stack's `comp_channels` lock):
    /// ibv_destroy_comp_channel answers EBUSY while there are any, as libibverbs does.
    cqs: AtomicU32,
}

/// A completion queue.
#[repr(C)]
pub struct Cq<D: Device> {
    c: ibv_cq,
    cq: Arc<D::Cq>,
    /// Completion events ibv_get_cq_event reported for the CQ (counted under its channel's
    /// `queue` lock and the stack's `cq_events` lock) and those ibv_ack_cq_events
    /// acknowledged (under `cq_events`): ibv_destroy_cq frees the CQ only once they are
    /// equal, as libibverbs' does.
    reported: AtomicU64,
    acked: AtomicU64,
    /// Set (under the channel's `queue` lock) when ibv_destroy_cq starts: the CQ's events
    /// still queued are no longer reported.
    dying: AtomicBool,
}

/// Who holds a QP.
enum QpKind<D: Device> {
    /// A connection manager id (`rdma_create_qp`): posts go through its data path.
    Cm(DataPath<D>),
    /// The program's own (`ibv_create_qp`); `None` once destroyed.
    Own(Mutex<Option<D::Qp>>),
}

/// A queue pair.
#[repr(C)]
pub struct Qp<D: Device> {
    c: ibv_qp,
    kind: QpKind<D>,
    /// The connection manager id whose QP it is.
    id: *mut Id<D>,
    /// The actual sizes.
    cap: ibv_qp_cap,
    sq_sig_all: c_int,
}

/// An address handle.
#[repr(C)]
pub struct Ah<D: Device> {
    c: ibv_ah,
    ah: Option<D::Ah>,
}

/// A connection manager event channel.
#[repr(C)]
pub struct EvChannel<D: Device> {
    c: rdma_event_channel,
    ch: EventChannel<D>,
    efd: EventFd,
    signalled: AtomicBool,
    clear: Mutex<()>,
}

/// What a passive endpoint (`rdma_create_ep` with `RAI_PASSIVE`) keeps for its requests.
#[derive(Clone, Copy)]
struct Saved {
    pd: *mut ibv_pd,
    attr: Option<ibv_qp_init_attr>,
}

/// A connection manager id.
#[repr(C)]
pub struct Id<D: Device> {
    c: rdma_cm_id,
    id: Option<CmId<D>>,
    saved: Option<Saved>,
    /// The CQs (and their channels) the library created for the id's QP.
    own_cqs: bool,
    /// Events reported against this id and not yet acknowledged (changed under the stack's
    /// `ids` lock): rdma_destroy_id waits for them, as librdmacm's does.
    unacked: AtomicU32,
}

/// A connection manager event and the private data it points to.
#[repr(C)]
pub struct Event {
    c: rdma_cm_event,
    pdata: Vec<u8>,
    /// The `Id` whose `unacked` count this event holds (its own id, or the listener for a
    /// connect request, as librdmacm counts them), or 0.
    counted: usize,
}

// ---------------------------------------------------------------------------------------------
// The stack.

/// The opened device inside its connection manager, and what the progress thread serves.
pub struct Stack<D: Device> {
    cm: Cm<D>,
    dev: DeviceId,
    prov: Arc<D>,
    /// The NIC's IOMMU, when it is an emulated one.
    dma: Option<Arc<nic_hal::HeapDma>>,
    /// The device's port attributes, MAC, GID (answered without the manager's lock).
    mac: [u8; 6],
    /// Live completion channels and event channels (addresses), served by the progress
    /// thread; an object leaves the list (under its lock) before it is freed.
    comp_channels: Mutex<Vec<usize>>,
    ev_channels: Mutex<Vec<usize>>,
    /// Connection manager ids by handle (their `Id` addresses).
    ids: Mutex<HashMap<u64, usize>>,
    /// Signalled (with `ids`) when an event is acknowledged.
    acked: Condvar,
    /// Guards the CQs' completion event counts (`Cq::reported`, `Cq::acked`);
    /// `cq_acked` is signalled with it when events are acknowledged.
    cq_events: Mutex<()>,
    cq_acked: Condvar,
    /// The context ids report (`id->verbs`) and the PD of ids given none.
    context: Mutex<Option<(usize, usize)>>,
    /// The port's address resolution, for address vectors the program gives (`ibv_modify_qp`,
    /// `ibv_create_ah`) whose MAC the neighbour table does not know.
    resolver: Option<Arc<dyn cm::NeighborResolver>>,
    /// The device's clock and relax hook: relaxing runs an in-process NIC's world.
    clock: device_open::Clock,
    /// Keeps the device alive (never dropped: the stack lives as long as the process).
    _backing: device_open::Backing,
}

// SAFETY: the raw addresses in the registries are only dereferenced under their locks, and
// the objects they name are Send + Sync (their provider parts are, by `Device`'s bounds).
unsafe impl<D: Device> Send for Stack<D> {}
// SAFETY: as above.
unsafe impl<D: Device> Sync for Stack<D> {}

/// The CM's configuration for C programs: librdmacm's defaults.
fn cm_config() -> CmConfig {
    CmConfig::default()
}

impl<D: Device> Stack<D> {
    /// Puts an opened device into a connection manager and starts the progress thread.
    pub fn start(
        opened: device_open::Opened<D>,
        resolver: Option<Arc<dyn cm::NeighborResolver>>,
    ) -> Result<Arc<Stack<D>>, String> {
        let device_open::Opened {
            dev,
            mac,
            clock,
            backing,
            ..
        } = opened;
        let dma = backing.heap_dma().cloned();
        let cm = Cm::new(clock.clone(), cm_config());
        let devid = cm
            .add_device(dev, mac)
            .map_err(|(e, _)| format!("connection manager: add the device: {e:?}"))?;
        if resolver.is_some() {
            cm.set_neighbor_resolver(devid, resolver.clone())
                .map_err(|e| format!("connection manager: neighbour resolver: {e:?}"))?;
        }
        let prov = cm
            .provider(devid)
            .map_err(|e| format!("connection manager: {e:?}"))?;
        let s = Arc::new(Stack {
            cm,
            dev: devid,
            prov,
            dma,
            mac,
            comp_channels: Mutex::new(Vec::new()),
            ev_channels: Mutex::new(Vec::new()),
            ids: Mutex::new(HashMap::new()),
            acked: Condvar::new(),
            cq_events: Mutex::new(()),
            cq_acked: Condvar::new(),
            context: Mutex::new(None),
            resolver,
            clock,
            _backing: backing,
        });
        let t = s.clone();
        std::thread::Builder::new()
            .name("rdma-stack-progress".into())
            .spawn(move || t.progress_loop())
            .map_err(|e| format!("progress thread: {e}"))?;
        Ok(s)
    }

    /// The progress thread: forever (the stack is never torn down).
    fn progress_loop(&self) {
        loop {
            self.progress_once();
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }

    fn progress_once(&self) {
        nic_hal::Platform::relax(&self.clock);
        self.cm.progress();
        {
            let list = lock(&self.comp_channels);
            for &a in list.iter() {
                // SAFETY: a listed channel is live until it leaves the list, which takes
                // this lock.
                let ch = unsafe { &*(a as *const Channel<D>) };
                self.drain_channel(ch);
            }
        }
        let list = lock(&self.ev_channels);
        for &a in list.iter() {
            // SAFETY: as above, for event channels.
            let ch = unsafe { &*(a as *const EvChannel<D>) };
            if !ch.signalled.load(Ordering::Acquire) && ch.ch.has_events() {
                ch.signalled.store(true, Ordering::Release);
                ch.efd.signal();
            }
        }
    }

    /// Moves the provider's completion events of `ch` to its queue; signals the fd. The
    /// provider's channel stays locked until the events are queued (see [`Channel::ch`]).
    fn drain_channel(&self, ch: &Channel<D>) {
        let mut got = Vec::new();
        let mut pch = lock(&ch.ch);
        while let Ok(Some(ev)) = self.prov.get_cq_event(&mut pch) {
            got.push(ev.cq_context);
        }
        if !got.is_empty() {
            let mut q = lock(&ch.queue);
            q.extend(got);
            ch.efd.signal();
        }
        drop(pch);
    }

    /// Removes the queued events of the CQ at `cq` from its channel `ch`, after setting
    /// `dying` (the CQ's flag) when given. The provider's channel is held: no event of the
    /// CQ is on its way from the provider to the queue meanwhile.
    fn purge_cq_events(&self, ch: &Channel<D>, cq: u64, dying: Option<&AtomicBool>) {
        let _pch = lock(&ch.ch);
        let mut q = lock(&ch.queue);
        if let Some(d) = dying {
            d.store(true, Ordering::Relaxed);
        }
        q.retain(|&a| a != cq);
        if q.is_empty() {
            ch.efd.clear();
        }
    }

    /// The context ids report and the default PD, made on first use by `open`.
    pub fn cm_context(
        &self,
        open: impl FnOnce() -> *mut ibv_context,
    ) -> (*mut ibv_context, *mut ibv_pd) {
        let mut g = lock(&self.context);
        if let Some((c, p)) = *g {
            return (c as *mut ibv_context, p as *mut ibv_pd);
        }
        let ctx = open();
        if ctx.is_null() {
            return (null_mut(), null_mut());
        }
        // SAFETY: `ctx` is a context just opened.
        let pd = unsafe { self.alloc_pd(ctx) };
        *g = Some((ctx as usize, pd as usize));
        (ctx, pd)
    }

    fn context_or_null(&self) -> (*mut ibv_context, *mut ibv_pd) {
        lock(&self.context)
            .map(|(c, p)| (c as *mut ibv_context, p as *mut ibv_pd))
            .unwrap_or((null_mut(), null_mut()))
    }
}

/// What the exported calls need of the stack, whatever its device type: each method is the
/// C call of the same name with its C arguments and C error convention.
#[allow(missing_docs, clippy::missing_safety_doc)]
pub trait Backend: Send + Sync {
    fn query_device(&self) -> Result<verbs::DeviceAttr, verbs::Error>;
    fn query_port(&self, port: u8) -> Result<verbs::PortAttr, verbs::Error>;
    fn query_gid(&self, port: u8, index: u16) -> Result<verbs::Gid, verbs::Error>;
    fn mac(&self) -> [u8; 6];
    /// Opens (once) the context and default PD connection manager ids report.
    fn cm_context(&self, open: &mut dyn FnMut() -> *mut ibv_context) -> *mut ibv_context;

    unsafe fn alloc_pd(&self, ctx: *mut ibv_context) -> *mut ibv_pd;
    unsafe fn dealloc_pd(&self, pd: *mut ibv_pd) -> c_int;
    unsafe fn reg_mr(
        &self,
        pd: *mut ibv_pd,
        addr: *mut c_void,
        len: usize,
        access: c_int,
    ) -> *mut ibv_mr;
    unsafe fn dereg_mr(&self, mr: *mut ibv_mr) -> c_int;
    unsafe fn create_comp_channel(&self, ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    unsafe fn destroy_comp_channel(&self, ch: *mut ibv_comp_channel) -> c_int;
    unsafe fn create_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut ibv_comp_channel,
    ) -> *mut ibv_cq;
    unsafe fn destroy_cq(&self, cq: *mut ibv_cq) -> c_int;
    unsafe fn get_cq_event(
        &self,
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int;
    unsafe fn ack_cq_events(&self, cq: *mut ibv_cq, nevents: c_uint);
    unsafe fn poll_cq(&self, cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int;
    unsafe fn req_notify_cq(&self, cq: *mut ibv_cq, solicited: c_int) -> c_int;
    unsafe fn post_send(
        &self,
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
    ) -> c_int;
    unsafe fn post_recv(
        &self,
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int;
    unsafe fn query_qp(
        &self,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        mask: c_int,
        init: *mut ibv_qp_init_attr,
    ) -> c_int;
    unsafe fn destroy_qp_verbs(&self, qp: *mut ibv_qp) -> c_int;
    unsafe fn create_qp_verbs(&self, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    unsafe fn modify_qp(&self, qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    unsafe fn init_qp_attr(
        &self,
        id: *mut rdma_cm_id,
        attr: *mut ibv_qp_attr,
        mask: *mut c_int,
    ) -> c_int;
    unsafe fn establish(&self, id: *mut rdma_cm_id) -> c_int;
    unsafe fn create_ah(&self, pd: *mut ibv_pd, attr: *const ibv_ah_attr) -> *mut ibv_ah;
    unsafe fn destroy_ah(&self, ah: *mut ibv_ah) -> c_int;
    unsafe fn init_ah_from_wc(
        &self,
        wc: *const ibv_wc,
        grh: *const ibv_grh,
        attr: *mut ibv_ah_attr,
    ) -> c_int;

    // librdmacm
    unsafe fn create_event_channel(&self) -> *mut rdma_event_channel;
    unsafe fn destroy_event_channel(&self, ch: *mut rdma_event_channel);
    unsafe fn create_id(
        &self,
        ch: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int;
    unsafe fn destroy_id(&self, id: *mut rdma_cm_id) -> c_int;
    unsafe fn bind_addr(&self, id: *mut rdma_cm_id, addr: *const libc::sockaddr) -> c_int;
    unsafe fn resolve_addr(
        &self,
        id: *mut rdma_cm_id,
        src: *const libc::sockaddr,
        dst: *const libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int;
    unsafe fn resolve_route(&self, id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    unsafe fn listen(&self, id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    unsafe fn connect(&self, id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int;
    unsafe fn accept(&self, id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int;
    unsafe fn reject(&self, id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int;
    unsafe fn disconnect(&self, id: *mut rdma_cm_id) -> c_int;
    unsafe fn get_cm_event(
        &self,
        ch: *mut rdma_event_channel,
        ev: *mut *mut rdma_cm_event,
    ) -> c_int;
    unsafe fn ack_cm_event(&self, ev: *mut rdma_cm_event) -> c_int;
    unsafe fn create_qp(
        &self,
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    unsafe fn destroy_qp(&self, id: *mut rdma_cm_id);
    unsafe fn create_ep(
        &self,
        id: *mut *mut rdma_cm_id,
        res: *const rdma_addrinfo,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    unsafe fn destroy_ep(&self, id: *mut rdma_cm_id);
    unsafe fn get_request(&self, listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int;
    unsafe fn set_option(
        &self,
        id: *mut rdma_cm_id,
        level: c_int,
        name: c_int,
        val: *const c_void,
        len: usize,
    ) -> c_int;
    unsafe fn migrate_id(&self, id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int;
}

// ---------------------------------------------------------------------------------------------
// Conversions.

/// -1 with errno `e` (librdmacm's convention).
fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// Posts a C list of work requests one at a time: `post` for each, from `first` along `next`,
/// until one fails; then `*bad` (when not NULL) names the failed request and its errno is
/// returned (libibverbs' convention); 0 when all were posted.
///
/// # Safety
///
/// `first` is NULL or the head of a list of valid work requests linked by `next`; `bad` is
/// NULL or writable.
unsafe fn post_list<W>(
    first: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W,
    mut post: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut cur = first;
    while !cur.is_null() {
        // SAFETY: the caller's list of valid work requests.
        let w = unsafe { &*cur };
        if let Err(e) = post(w) {
            if !bad.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = next(w);
    }
    0
}

fn cm_errno(e: cm::Error) -> c_int {
    e.errno()
}

fn access_of(a: c_int) -> AccessFlags {
    AccessFlags::from_bits_retain((a as u32) & 0xf)
}

/// A socket address from C (IPv4 only).
///
/// # Safety
///
/// `a` is NULL or points to a sockaddr of its family's size.
unsafe fn sockaddr_in(a: *const libc::sockaddr) -> Result<Option<SocketAddr>, c_int> {
    if a.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise: at least a sockaddr's family field.
    let fam = unsafe { (*a).sa_family } as c_int;
    if fam != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    // SAFETY: an AF_INET address is a sockaddr_in.
    let sin = unsafe { &*a.cast::<libc::sockaddr_in>() };
    let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
    Ok(Some(SocketAddr::V4(SocketAddrV4::new(
        ip,
        u16::from_be(sin.sin_port),
    ))))
}

fn to_sockaddr(a: Option<SocketAddr>) -> rdma_sockaddr {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut s: rdma_sockaddr = unsafe { core::mem::zeroed() };
    if let Some(SocketAddr::V4(v4)) = a {
        s.sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
    }
    s
}

fn gid_c(g: verbs::Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

fn ah_attr_c(a: &verbs::AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: gid_c(a.dgid),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global as u8,
        port_num: a.port_num,
    }
}

fn qp_type_of(t: ibv_qp_type) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

fn qp_state_of(s: ibv_qp_state) -> Option<verbs::QpState> {
    Some(match s {
        IBV_QPS_RESET => verbs::QpState::Reset,
        IBV_QPS_INIT => verbs::QpState::Init,
        IBV_QPS_RTR => verbs::QpState::Rtr,
        IBV_QPS_RTS => verbs::QpState::Rts,
        IBV_QPS_SQD => verbs::QpState::Sqd,
        IBV_QPS_SQE => verbs::QpState::Sqe,
        IBV_QPS_ERR => verbs::QpState::Err,
        _ => return None,
    })
}

/// C QP attributes from verbs ones (`rdma_init_qp_attr`).
fn qp_attr_c(a: &verbs::QpAttr) -> ibv_qp_attr {
    // SAFETY: zeroed attributes are valid; filled below.
    let mut c: ibv_qp_attr = unsafe { core::mem::zeroed() };
    c.qp_state = a.qp_state as u8 as ibv_qp_state;
    c.cur_qp_state = a.cur_qp_state as u8 as ibv_qp_state;
    c.path_mtu = a.path_mtu as u8 as ibv_mtu;
    c.qkey = a.qkey;
    c.rq_psn = a.rq_psn;
    c.sq_psn = a.sq_psn;
    c.dest_qp_num = a.dest_qp_num;
    c.qp_access_flags = a.qp_access_flags.bits() as c_uint;
    c.cap = cap_c(&a.cap);
    c.ah_attr = ah_attr_c(&a.ah_attr);
    c.pkey_index = a.pkey_index;
    c.en_sqd_async_notify = a.en_sqd_async_notify as u8;
    c.port_num = a.port_num;
    c.max_rd_atomic = a.max_rd_atomic;
    c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    c.min_rnr_timer = a.min_rnr_timer;
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c
}

fn qp_type_c(t: QpType) -> ibv_qp_type {
    match t {
        QpType::Ud => IBV_QPT_UD,
        _ => IBV_QPT_RC,
    }
}

fn cap_of(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn cap_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn event_c(t: EventType) -> rdma_cm_event_type {
    t as u8 as rdma_cm_event_type
}

fn wc_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u8 as ibv_wc_status,
        opcode: w.opcode as u8 as ibv_wc_opcode,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm: ibv_wc_imm {
            imm_data: w.imm_data,
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits() as c_uint,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// The scatter list of a C work request.
///
/// # Safety
///
/// `sg` points to `n` entries (or `n` is 0).
unsafe fn sges(sg: *const ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(EINVAL);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the caller's promise: `n` readable entries.
        let s = unsafe { *sg.add(i) };
        v.push(Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
    }
    Ok(v)
}

impl<D: Device> Stack<D> {
    /// The MAC of `ip`: the neighbour table's, else the port's resolver's.
    fn mac_of(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        if let Some(n) = self.cm.neighbor(ip) {
            return Some(n.mac);
        }
        let n = self.resolver.as_ref()?.resolve_neighbor(ip).ok()??;
        self.cm.add_neighbor(ip, n);
        Some(n.mac)
    }

    /// A verbs address vector from C (the MAC from the destination GID's IPv4 address).
    fn ah_attr_of(&self, a: &ibv_ah_attr) -> Result<verbs::AhAttr, c_int> {
        // SAFETY: the raw bytes of the GID union.
        let dgid = verbs::Gid(unsafe { a.grh.dgid.raw });
        let ip = dgid.ipv4().map(Ipv4Addr::from).ok_or(EINVAL)?;
        let mac = self.mac_of(ip).ok_or(libc::EHOSTUNREACH)?;
        Ok(verbs::AhAttr {
            dgid,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            dlid: a.dlid,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            is_global: true,
            port_num: a.port_num.max(1),
            dmac: mac,
        })
    }

    /// Verbs QP attributes from C, for the fields `mask` names.
    fn qp_attr_of(&self, a: &ibv_qp_attr, mask: c_int) -> Result<verbs::QpAttr, c_int> {
        let ah_attr = if mask & IBV_QP_AV != 0 {
            self.ah_attr_of(&a.ah_attr)?
        } else {
            verbs::AhAttr::default()
        };
        let mtu = match a.path_mtu {
            IBV_MTU_256 => verbs::Mtu::Mtu256,
            IBV_MTU_512 => verbs::Mtu::Mtu512,
            IBV_MTU_2048 => verbs::Mtu::Mtu2048,
            IBV_MTU_4096 => verbs::Mtu::Mtu4096,
            _ => verbs::Mtu::Mtu1024,
        };
        Ok(verbs::QpAttr {
            qp_state: qp_state_of(a.qp_state).ok_or(EINVAL)?,
            cur_qp_state: qp_state_of(a.cur_qp_state).unwrap_or_default(),
            path_mtu: mtu,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: access_of(a.qp_access_flags as c_int),
            cap: cap_of(&a.cap),
            ah_attr,
            pkey_index: a.pkey_index,
            en_sqd_async_notify: a.en_sqd_async_notify != 0,
            port_num: a.port_num,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
        })
    }

    /// The `Id` behind a C id.
    ///
    /// # Safety
    ///
    /// `id` is NULL or an id of this library not destroyed.
    unsafe fn id<'a>(&self, id: *mut rdma_cm_id) -> Result<&'a mut Id<D>, c_int> {
        if id.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: every rdma_cm_id we hand out is the first field of a boxed Id<D>.
        Ok(unsafe { &mut *id.cast::<Id<D>>() })
    }

    fn cm_id<'a>(&self, id: &'a Id<D>) -> Result<&'a CmId<D>, c_int> {
        id.id.as_ref().ok_or(EINVAL)
    }

    /// Refreshes the C view of an id (addresses, QP type) from the manager.
    fn refresh(&self, id: &mut Id<D>) {
        if let Some(c) = id.id.as_ref() {
            id.c.route.addr.src = to_sockaddr(c.src_addr());
            id.c.route.addr.dst = to_sockaddr(c.dst_addr());
            id.c.qp_type = qp_type_c(c.qp_type());
            id.c.ps = c.port_space().0 as rdma_port_space;
            if c.device().is_some() {
                let (ctx, _) = self.context_or_null();
                id.c.verbs = ctx;
                id.c.port_num = 1;
                // SAFETY: all-zero GIDs are replaced by the device's and the peer's.
                let info = self.cm.device(self.dev);
                if let Some(info) = info {
                    id.c.route.addr.addr.ibaddr.sgid = gid_c(info.gid);
                }
                if let Some(SocketAddr::V4(d)) = c.dst_addr() {
                    id.c.route.addr.addr.ibaddr.dgid =
                        gid_c(verbs::Gid::from_ipv4(d.ip().octets()));
                }
                id.c.route.addr.addr.ibaddr.pkey = 0xffff;
            }
        }
    }

    /// A new C id around `cm_id`, registered by handle.
    fn new_id(
        &self,
        cm_id: CmId<D>,
        channel: *mut rdma_event_channel,
        context: *mut c_void,
    ) -> *mut Id<D> {
        let handle = cm_id.handle().cq_context();
        // SAFETY: an all-zero rdma_cm_id (NULL pointers, zero addresses) is valid.
        let c: rdma_cm_id = unsafe { core::mem::zeroed() };
        let mut b = Box::new(Id {
            c,
            id: Some(cm_id),
            saved: None,
            own_cqs: false,
            unacked: AtomicU32::new(0),
        });
        b.c.channel = channel;
        b.c.context = context;
        self.refresh(&mut b);
        let p = Box::into_raw(b);
        lock(&self.ids).insert(handle, p as usize);
        p
    }

    /// A library-created completion channel and CQ for one direction of `id`'s QP.
    ///
    /// # Safety
    ///
    /// `ctx` is the manager's context.
    unsafe fn auto_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: u32,
        id: *mut rdma_cm_id,
    ) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
        // SAFETY: our context.
        let ch = unsafe { self.create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(errno());
        }
        // SAFETY: as above; `ch` was just made.
        let cq = unsafe { self.create_cq(ctx, cqe.max(1) as c_int, id.cast(), ch) };
        if cq.is_null() {
            let e = errno();
            // SAFETY: the channel we just made, unused.
            unsafe { self.destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok((ch, cq))
    }

    /// The C event for a manager event; `None` for an event of an id no longer known.
    fn make_event(
        &self,
        mut ev: cm::CmEvent<D>,
        ch: *mut rdma_event_channel,
    ) -> Option<*mut Event> {
        // The id the event is counted against is found and counted under the `ids` lock, so
        // that rdma_destroy_id (which unregisters under the same lock) either discards the
        // event or waits for its acknowledgement before freeing the id.
        let ids = lock(&self.ids);
        let get = |h: cm::IdHandle| ids.get(&h.cq_context()).map(|&a| a as *mut Id<D>);
        let listen = ev.listen_id.and_then(get);
        let new = ev.take_id();
        let existing = match new {
            Some(_) => None,
            // An event of an id destroyed meanwhile is dropped.
            None => Some(get(ev.id)?),
        };
        let counted = existing.or(listen);
        if let Some(c) = counted {
            // SAFETY: a registered id is live (unregistered under this lock before it is
            // freed).
            unsafe { (*c).unacked.fetch_add(1, Ordering::Relaxed) };
        }
        drop(ids);
        let id: *mut Id<D> = if let Some(new) = new {
            let (lch, lctx) = match listen {
                // SAFETY: a registered id is live.
                Some(l) => unsafe { ((*l).c.channel, (*l).c.context) },
                None => (ch, null_mut()),
            };
            let n = self.new_id(new, lch, lctx);
            if let Some(l) = listen {
                // SAFETY: `n` was just made; `l` is a registered, hence live, id.
                unsafe {
                    (*n).saved = (*l).saved;
                    (*n).c.ps = (*l).c.ps;
                }
            }
            n
        } else {
            let id = existing?;
            // SAFETY: counted above, so not freed before this event is acknowledged.
            self.refresh(unsafe { &mut *id });
            id
        };
        let pdata = ev.param.private_data().to_vec();
        // SAFETY: an all-zero parameter union is valid.
        let mut param: rdma_cm_event_param = unsafe { core::mem::zeroed() };
        match &ev.param {
            EventParam::None => {}
            EventParam::Conn(c) => {
                param.conn = rdma_conn_param {
                    private_data: ptr::null(),
                    private_data_len: c.private_data.len().min(255) as u8,
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    flow_control: c.flow_control as u8,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                    srq: c.srq as u8,
                    qp_num: c.qp_num,
                }
            }
            EventParam::Ud(u) => {
                param.ud = rdma_ud_param {
                    private_data: ptr::null(),
                    private_data_len: u.private_data.len().min(255) as u8,
                    ah_attr: ah_attr_c(&u.ah_attr),
                    qp_num: u.qp_num,
                    qkey: u.qkey,
                }
            }
        }
        let mut e = Box::new(Event {
            c: rdma_cm_event {
                id: id.cast(),
                listen_id: listen.map_or(null_mut(), |l| l.cast()),
                event: event_c(ev.event),
                status: ev.status,
                param,
            },
            pdata,
            counted: counted.map_or(0, |c| c as usize),
        });
        let pd_ptr = if e.pdata.is_empty() {
            ptr::null()
        } else {
            e.pdata.as_ptr().cast::<c_void>()
        };
        // both union variants start with the private data pointer
        e.c.param.conn.private_data = pd_ptr;
        Some(Box::into_raw(e))
    }

    /// Converts a C connection parameter block.
    ///
    /// # Safety
    ///
    /// `p` is NULL or valid, its private data `private_data_len` readable bytes.
    unsafe fn conn_param<'a>(p: *const rdma_conn_param) -> Option<ConnParam<'a>> {
        // SAFETY: the caller's promise.
        let p = unsafe { p.as_ref() }?;
        let pd: &[u8] = if p.private_data.is_null() || p.private_data_len == 0 {
            &[]
        } else {
            // SAFETY: the caller's promise.
            unsafe {
                core::slice::from_raw_parts(p.private_data.cast(), p.private_data_len as usize)
            }
        };
        Some(ConnParam {
            private_data: pd,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control != 0,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq != 0,
            qp_num: p.qp_num,
        })
    }

    /// Destroys the library-made CQs and channels of an id (after its QP).
    ///
    /// # Safety
    ///
    /// The id's CQ fields are ours when `own_cqs`.
    unsafe fn drop_own_cqs(&self, id: &mut Id<D>) {
        if !id.own_cqs {
            return;
        }
        id.own_cqs = false;
        // SAFETY: CQs and channels this library made for the id; the QP using them is gone.
        unsafe {
            if id.c.send_cq == id.c.recv_cq {
                self.destroy_cq(id.c.send_cq);
            } else {
                self.destroy_cq(id.c.send_cq);
                self.destroy_cq(id.c.recv_cq);
            }
            if id.c.send_cq_channel == id.c.recv_cq_channel {
                self.destroy_comp_channel(id.c.send_cq_channel);
            } else {
                self.destroy_comp_channel(id.c.send_cq_channel);
                self.destroy_comp_channel(id.c.recv_cq_channel);
            }
        }
        id.c.send_cq = null_mut();
        id.c.recv_cq = null_mut();
        id.c.send_cq_channel = null_mut();
        id.c.recv_cq_channel = null_mut();
    }
}

impl<D: Device> Backend for Stack<D> {
    fn query_device(&self) -> Result<verbs::DeviceAttr, verbs::Error> {
        self.prov.query_device()
    }

    fn query_port(&self, port: u8) -> Result<verbs::PortAttr, verbs::Error> {
        self.prov.query_port(port)
    }

    fn query_gid(&self, port: u8, index: u16) -> Result<verbs::Gid, verbs::Error> {
        self.prov.query_gid(port, index)
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn cm_context(&self, open: &mut dyn FnMut() -> *mut ibv_context) -> *mut ibv_context {
        Stack::cm_context(self, open).0
    }

    unsafe fn alloc_pd(&self, ctx: *mut ibv_context) -> *mut ibv_pd {
        match self.cm.alloc_pd(self.dev) {
            Ok(pd) => Box::into_raw(Box::new(Pd {
                c: ibv_pd {
                    context: ctx,
                    handle: 0,
                },
                pd,
            }))
            .cast(),
            Err(e) => {
                set_errno(cm_errno(e));
                null_mut()
            }
        }
    }

    unsafe fn dealloc_pd(&self, pd: *mut ibv_pd) -> c_int {
        if pd.is_null() {
            return EINVAL;
        }
        let p = pd.cast::<Pd>();
        // SAFETY: a PD of ours is a boxed Pd (first field the ibv_pd); its contents are
        // moved out here and either freed with it or written back.
        let Pd { c, pd: cmpd } = unsafe { ptr::read(p) };
        match self.cm.dealloc_pd(cmpd) {
            Ok(()) => {
                // SAFETY: the box's contents were moved out above; free its memory only.
                unsafe { std::alloc::dealloc(p.cast(), std::alloc::Layout::new::<Pd>()) };
                0
            }
            Err((e, back)) => {
                // SAFETY: the PD stays valid at the caller's address.
                unsafe { ptr::write(p, Pd { c, pd: back }) };
                cm_errno(e)
            }
        }
    }

    unsafe fn reg_mr(
        &self,
        pd: *mut ibv_pd,
        addr: *mut c_void,
        len: usize,
        access: c_int,
    ) -> *mut ibv_mr {
        if pd.is_null() || addr.is_null() || len == 0 {
            set_errno(EINVAL);
            return null_mut();
        }
        // SAFETY: a PD of ours.
        let p = unsafe { &*pd.cast::<Pd>() };
        let Some(dma) = self.dma.as_ref() else {
            set_errno(EOPNOTSUPP);
            return null_mut();
        };
        let Some(va) = NonNull::new(addr.cast::<u8>()) else {
            set_errno(EINVAL);
            return null_mut();
        };
        // SAFETY: `ibv_reg_mr`'s contract: the program keeps the memory allocated until
        // `ibv_dereg_mr`, which unmaps it only after the device let go of it.
        let iova = match unsafe { dma.map_external(va, len) } {
            Ok(i) => i,
            Err(_) => {
                set_errno(ENOMEM);
                return null_mut();
            }
        };
        let first = iova & !0xfff;
        let last = (iova + len as u64 - 1) & !0xfff;
        let pages: Vec<u64> = (first..=last).step_by(4096).collect();
        let region = MemRegion {
            addr: addr as u64,
            length: len as u64,
            pages: &pages,
        };
        let r = self.cm.with_pd(&p.pd, |prov, ppd| {
            // SAFETY: the pages are the program's memory, mapped above until dereg_mr
            // succeeds (the contract above); CPU accesses are the program's, racing with
            // the device as with any NIC.
            unsafe { prov.reg_mr_raw(ppd, &region, access_of(access)) }
        });
        match r {
            Ok(Ok(mr)) => {
                let (lkey, rkey) = (mr.lkey(), mr.rkey());
                Box::into_raw(Box::new(Mr::<D> {
                    c: ibv_mr {
                        context: p.c.context,
                        pd,
                        addr,
                        length: len,
                        handle: 0,
                        lkey,
                        rkey,
                    },
                    mr: Some(mr),
                    mapped: Some(iova),
                }))
                .cast()
            }
            Ok(Err(e)) => {
                dma.unmap_external(iova);
                set_errno(e.errno());
                null_mut()
            }
            Err(e) => {
                dma.unmap_external(iova);
                set_errno(cm_errno(e));
                null_mut()
            }
        }
    }

    unsafe fn dereg_mr(&self, mr: *mut ibv_mr) -> c_int {
        if mr.is_null() {
            return EINVAL;
        }
        // SAFETY: an MR of ours is a boxed Mr<D>.
        let m = unsafe { &mut *mr.cast::<Mr<D>>() };
        let Some(inner) = m.mr.take() else {
            return EINVAL;
        };
        match self.prov.dereg_mr(inner) {
            Ok(()) => {
                if let (Some(iova), Some(dma)) = (m.mapped, self.dma.as_ref()) {
                    dma.unmap_external(iova);
                }
                // SAFETY: boxed by reg_mr; the caller gives it up.
                drop(unsafe { Box::from_raw(mr.cast::<Mr<D>>()) });
                0
            }
            Err(e) => {
                m.mr = e.object;
                e.error.errno()
            }
        }
    }

    unsafe fn create_comp_channel(&self, ctx: *mut ibv_context) -> *mut ibv_comp_channel {
        let efd = match EventFd::new() {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        let ch = match self.prov.create_comp_channel() {
            Ok(c) => c,
            Err(e) => {
                set_errno(e.errno());
                return null_mut();
            }
        };
        let b = Box::new(Channel::<D> {
            c: ibv_comp_channel {
                context: ctx,
                fd: efd.0,
                refcnt: 0,
            },
            ch: Mutex::new(ch),
            queue: Mutex::new(VecDeque::new()),
            efd,
            cqs: AtomicU32::new(0),
        });
        let p = Box::into_raw(b);
        lock(&self.comp_channels).push(p as usize);
        p.cast()
    }

    unsafe fn destroy_comp_channel(&self, ch: *mut ibv_comp_channel) -> c_int {
        if ch.is_null() {
            return EINVAL;
        }
        let p = ch.cast::<Channel<D>>();
        let mut list = lock(&self.comp_channels);
        let Some(i) = list.iter().position(|&a| a == p as usize) else {
            return EINVAL;
        };
        // As in libibverbs: not while CQs use the channel (their count changes under the
        // list lock held here).
        // SAFETY: a listed channel is live.
        if unsafe { (*p).cqs.load(Ordering::Relaxed) } != 0 {
            return libc::EBUSY;
        }
        // SAFETY: a listed channel is live; the list lock keeps the progress thread off it.
        let c = unsafe { Box::from_raw(p) };
        let Channel {
            c: cc,
            ch: inner,
            queue,
            efd,
            cqs,
        } = *c;
        match self
            .prov
            .destroy_comp_channel(inner.into_inner().unwrap_or_else(|p| p.into_inner()))
        {
            Ok(()) => {
                list.swap_remove(i);
                0
            }
            Err(e) => {
                let err = e.error.errno();
                match e.object {
                    Some(back) => {
                        // SAFETY: put the channel back at the caller's address.
                        unsafe {
                            ptr::write(
                                p,
                                Channel {
                                    c: cc,
                                    ch: Mutex::new(back),
                                    queue,
                                    efd,
                                    cqs,
                                },
                            )
                        };
                    }
                    None => {
                        list.swap_remove(i);
                    }
                }
                err
            }
        }
    }

    unsafe fn create_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut ibv_comp_channel,
    ) -> *mut ibv_cq {
        if cqe < 1 {
            set_errno(EINVAL);
            return null_mut();
        }
        let slot: Box<core::mem::MaybeUninit<Cq<D>>> = Box::new_uninit();
        let addr = Box::into_raw(slot);
        // The channel is counted under the channels' lock, held from the check that it is
        // ours until the CQ is made (ibv_destroy_comp_channel takes it too).
        let channels = lock(&self.comp_channels);
        let chan = if ch.is_null() {
            None
        } else if channels.contains(&(ch as usize)) {
            // SAFETY: a listed channel is live while the list is locked.
            Some(unsafe { &*ch.cast::<Channel<D>>() })
        } else {
            // SAFETY: the box we made, never initialised.
            drop(unsafe { Box::from_raw(addr) });
            set_errno(EINVAL);
            return null_mut();
        };
        let r = match chan {
            None => self.prov.create_cq(cqe as u32, addr as u64, None),
            Some(c) => {
                let g = lock(&c.ch);
                self.prov.create_cq(cqe as u32, addr as u64, Some(&g))
            }
        };
        if r.is_ok()
            && let Some(c) = chan
        {
            c.cqs.fetch_add(1, Ordering::Relaxed);
        }
        drop(channels);
        match r {
            Ok(cq) => {
                let n = cq.cqe();
                // SAFETY: an all-zero pthread mutex/cond are their static initialisers on
                // glibc; the rest is set here.
                let mut c: ibv_cq = unsafe { core::mem::zeroed() };
                c.context = ctx;
                c.channel = ch;
                c.cq_context = cq_context;
                c.cqe = n.min(c_int::MAX as u32) as c_int;
                // SAFETY: `addr` is our uninitialised box, written once.
                unsafe {
                    ptr::write(
                        addr.cast::<Cq<D>>(),
                        Cq {
                            c,
                            cq: Arc::new(cq),
                            reported: AtomicU64::new(0),
                            acked: AtomicU64::new(0),
                            dying: AtomicBool::new(false),
                        },
                    )
                };
                addr.cast()
            }
            Err(e) => {
                // SAFETY: the box we made, never initialised.
                drop(unsafe { Box::from_raw(addr) });
                set_errno(e.errno());
                null_mut()
            }
        }
    }

    unsafe fn destroy_cq(&self, cq: *mut ibv_cq) -> c_int {
        if cq.is_null() {
            return EINVAL;
        }
        let p = cq.cast::<Cq<D>>();
        // SAFETY: a CQ of ours, live until freed below.
        let c = unsafe { &*p };
        if Arc::strong_count(&c.cq) != 1 {
            // a QP still uses it
            return libc::EBUSY;
        }
        // As in libibverbs, the CQ is freed only once every completion event reported for
        // it has been acknowledged (another thread may still be handling one), and its
        // events still queued on the channel are never reported: they are dropped now, and
        // those arriving until the provider's CQ is gone are skipped (`dying`).
        let chan = if c.c.channel.is_null() {
            None
        } else {
            // SAFETY: the CQ's channel is live while the CQ is (ibv_destroy_comp_channel
            // refuses while the channel counts CQs).
            Some(unsafe { &*c.c.channel.cast::<Channel<D>>() })
        };
        if let Some(ch) = chan {
            self.purge_cq_events(ch, p as u64, Some(&c.dying));
        }
        // No event of the CQ is reported after the purge (counts change under the channel's
        // queue lock, which the purge took), so the wait ends once the handlers acknowledge
        // what they hold.
        let mut g = lock(&self.cq_events);
        while c.acked.load(Ordering::Relaxed) < c.reported.load(Ordering::Relaxed) {
            g = self.cq_acked.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        drop(g);
        // `c` is not used past this point: the provider CQ moves out of the box.
        // SAFETY: the CQ's provider object, moved out here and either destroyed or written
        // back below.
        let arc = unsafe { ptr::read(&raw const (*p).cq) };
        let undo = |arc: Arc<D::Cq>| {
            // SAFETY: put the provider CQ back for the caller; events are reported again.
            unsafe { ptr::write(&raw mut (*p).cq, arc) };
            // SAFETY: as above: the CQ stays the caller's.
            unsafe { (*p).dying.store(false, Ordering::Relaxed) };
        };
        let inner = match Arc::try_unwrap(arc) {
            Ok(i) => i,
            Err(arc) => {
                // a QP was made on it meanwhile
                undo(arc);
                return libc::EBUSY;
            }
        };
        if let Err(e) = self.prov.destroy_cq(inner) {
            let err = e.error.errno();
            if let Some(back) = e.object {
                undo(Arc::new(back));
            }
            return err;
        }
        if let Some(ch) = chan {
            // Events the provider produced before its CQ went away (skipped as `dying`
            // meanwhile); the channel is live: the CQ still counts in it.
            self.purge_cq_events(ch, p as u64, None);
            let _list = lock(&self.comp_channels);
            ch.cqs.fetch_sub(1, Ordering::Relaxed);
        }
        // SAFETY: the box's provider CQ was moved out and destroyed above; the other fields
        // have no destructor. Nothing refers to the CQ any more: no queued event, no
        // unacknowledged one. Free the memory only.
        unsafe { std::alloc::dealloc(p.cast(), std::alloc::Layout::new::<Cq<D>>()) };
        0
    }

    unsafe fn get_cq_event(
        &self,
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int {
        if ch.is_null() || cq.is_null() || ctx.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: a channel of ours, live while the caller waits on it.
        let c = unsafe { &*ch.cast::<Channel<D>>() };
        loop {
            let got = {
                let mut q = lock(&c.queue);
                let mut got = None;
                while let Some(a) = q.pop_front() {
                    // SAFETY: a queued event's CQ is live: ibv_destroy_cq removes the CQ's
                    // events from the queue (under this lock) before freeing it.
                    let p = unsafe { &*(a as *const Cq<D>) };
                    // The events of a CQ being destroyed are not reported.
                    if p.dying.load(Ordering::Relaxed) {
                        continue;
                    }
                    // Counted under the queue lock: ibv_destroy_cq, having purged the queue
                    // under it, sees every event reported before and waits for its
                    // acknowledgement.
                    let g = lock(&self.cq_events);
                    p.reported.fetch_add(1, Ordering::Relaxed);
                    drop(g);
                    got = Some(a);
                    break;
                }
                if q.is_empty() {
                    c.efd.clear();
                }
                got
            };
            if let Some(a) = got {
                let p = a as *mut Cq<D>;
                // SAFETY: the CQ is live until this event is acknowledged (counted above).
                unsafe {
                    *cq = p.cast();
                    *ctx = (*p).c.cq_context;
                }
                return 0;
            }
            self.drain_channel(c);
            if !lock(&c.queue).is_empty() {
                continue;
            }
            if c.efd.nonblocking() {
                return fail(EAGAIN);
            }
            c.efd.ready(2);
        }
    }

    unsafe fn ack_cq_events(&self, cq: *mut ibv_cq, nevents: c_uint) {
        if cq.is_null() || nevents == 0 {
            return;
        }
        // SAFETY: a CQ of ours, live until its reported events are acknowledged (these
        // among them); not used after the lock is released.
        let c = unsafe { &*cq.cast::<Cq<D>>() };
        let g = lock(&self.cq_events);
        c.acked.fetch_add(u64::from(nevents), Ordering::Relaxed);
        drop(g);
        // The condition variable is the stack's (never freed), not the CQ's.
        self.cq_acked.notify_all();
    }

    unsafe fn poll_cq(&self, cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        if cq.is_null() || n < 0 || (n > 0 && wc.is_null()) {
            return -EINVAL;
        }
        // SAFETY: a CQ of ours.
        let c = unsafe { &*cq.cast::<Cq<D>>() };
        let mut buf = [WorkCompletion::default(); 16];
        let mut done = 0usize;
        let want = n as usize;
        while done < want {
            let k = (want - done).min(buf.len());
            match self.prov.poll_cq(&c.cq, &mut buf[..k]) {
                Ok(0) => break,
                Ok(got) => {
                    for (i, w) in buf[..got].iter().enumerate() {
                        // SAFETY: the caller's array has `n` entries; done + i < n.
                        unsafe { *wc.add(done + i) = wc_c(w) };
                    }
                    done += got;
                    if got < k {
                        break;
                    }
                }
                Err(e) => {
                    if done > 0 {
                        break;
                    }
                    return -e.errno();
                }
            }
        }
        done as c_int
    }

    unsafe fn req_notify_cq(&self, cq: *mut ibv_cq, solicited: c_int) -> c_int {
        if cq.is_null() {
            return EINVAL;
        }
        // SAFETY: a CQ of ours.
        let c = unsafe { &*cq.cast::<Cq<D>>() };
        match self.prov.req_notify_cq(&c.cq, solicited != 0) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    }

    unsafe fn post_send(
        &self,
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
    ) -> c_int {
        if qp.is_null() {
            if !bad.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *bad = wr };
            }
            return EINVAL;
        }
        // SAFETY: a QP of ours.
        let q = unsafe { &*qp.cast::<Qp<D>>() };
        let post = |w: &ibv_send_wr| -> Result<(), c_int> {
            // SAFETY: the work request's scatter list.
            let sg = unsafe { sges(w.sg_list, w.num_sge) }?;
            let opcode = match w.opcode {
                IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
                IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
                IBV_WR_SEND => WrOpcode::Send,
                IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
                IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
                IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
                IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
                // `invalidate_rkey` shares `imm_data`'s bits, which the work request carries.
                IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv,
                _ => {
                    return Err(EINVAL);
                }
            };
            // SAFETY: reading the union member the opcode uses.
            let remote = unsafe {
                match opcode {
                    WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                        RemoteOp::Rdma {
                            remote_addr: w.wr.rdma.remote_addr,
                            rkey: w.wr.rdma.rkey,
                        }
                    }
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => RemoteOp::Atomic {
                        remote_addr: w.wr.atomic.remote_addr,
                        rkey: w.wr.atomic.rkey,
                        compare_add: w.wr.atomic.compare_add,
                        swap: w.wr.atomic.swap,
                    },
                    _ => RemoteOp::None,
                }
            };
            let flags = SendFlags::from_bits_retain(w.send_flags & 0xf);
            let mut inline = Vec::new();
            if flags.contains(SendFlags::INLINE) {
                for s in &sg {
                    if s.length > 0 {
                        // SAFETY: inline data is read from the program's memory now (the
                        // work request's buffers must be readable at post time).
                        let b = unsafe {
                            core::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
                        };
                        inline.extend_from_slice(b);
                    }
                }
            }
            let is_ud = q.c.qp_type == IBV_QPT_UD;
            // SAFETY: the UD member of the union, for UD QPs.
            let ud = unsafe { w.wr.ud };
            let ah = if is_ud {
                if ud.ah.is_null() {
                    return Err(EINVAL);
                }
                // SAFETY: an AH of ours.
                let a = unsafe { &*ud.ah.cast::<Ah<D>>() };
                match a.ah.as_ref() {
                    Some(x) => Some(x),
                    None => {
                        return Err(EINVAL);
                    }
                }
            } else {
                None
            };
            let swr = SendWr {
                wr_id: w.wr_id,
                opcode,
                flags,
                sg_list: if flags.contains(SendFlags::INLINE) {
                    &[]
                } else {
                    &sg
                },
                inline_data: &inline,
                // SAFETY: the immediate member (a plain u32 either way).
                imm_data: unsafe { w.imm.imm_data },
                remote,
                dest: ah.map(|ah| UdDest {
                    ah,
                    remote_qpn: ud.remote_qpn,
                    remote_qkey: ud.remote_qkey,
                }),
            };
            let r = match &q.kind {
                QpKind::Cm(dp) => dp.post_send(&[swr]),
                QpKind::Own(m) => match lock(m).as_mut() {
                    Some(qp) => self.prov.post_send(qp, &[swr]),
                    None => {
                        return Err(EINVAL);
                    }
                },
            };
            r.map_err(|e| e.error.errno())
        };
        // SAFETY: the caller's list of valid work requests and out-pointer.
        unsafe { post_list(wr, bad, |w| w.next, post) }
    }

    unsafe fn post_recv(
        &self,
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        if qp.is_null() {
            if !bad.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *bad = wr };
            }
            return EINVAL;
        }
        // SAFETY: a QP of ours.
        let q = unsafe { &*qp.cast::<Qp<D>>() };
        let post = |w: &ibv_recv_wr| -> Result<(), c_int> {
            // SAFETY: its scatter list.
            let sg = unsafe { sges(w.sg_list, w.num_sge) }?;
            let rwr = RecvWr {
                wr_id: w.wr_id,
                sg_list: &sg,
            };
            let r = match &q.kind {
                QpKind::Cm(dp) => dp.post_recv(&[rwr]),
                QpKind::Own(m) => match lock(m).as_mut() {
                    Some(qp) => self.prov.post_recv(qp, &[rwr]),
                    None => {
                        return Err(EINVAL);
                    }
                },
            };
            r.map_err(|e| e.error.errno())
        };
        // SAFETY: the caller's list of valid work requests and out-pointer.
        unsafe { post_list(wr, bad, |w| w.next, post) }
    }

    unsafe fn query_qp(
        &self,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        _mask: c_int,
        init: *mut ibv_qp_init_attr,
    ) -> c_int {
        if qp.is_null() || attr.is_null() {
            return EINVAL;
        }
        // SAFETY: a QP of ours.
        let q = unsafe { &*qp.cast::<Qp<D>>() };
        // SAFETY: zeroed attributes are valid; filled below.
        let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
        a.qp_state = q.c.state;
        a.cur_qp_state = q.c.state;
        a.qkey = if q.c.qp_type == IBV_QPT_UD {
            RDMA_UDP_QKEY
        } else {
            0
        };
        a.port_num = 1;
        a.cap = q.cap;
        // SAFETY: the caller's out-parameters.
        unsafe {
            *attr = a;
            if let Some(i) = init.as_mut() {
                i.qp_context = q.c.qp_context;
                i.send_cq = q.c.send_cq;
                i.recv_cq = q.c.recv_cq;
                i.srq = q.c.srq;
                i.qp_type = q.c.qp_type;
                i.cap = q.cap;
                i.sq_sig_all = q.sq_sig_all;
            }
        }
        0
    }

    unsafe fn destroy_qp_verbs(&self, qp: *mut ibv_qp) -> c_int {
        if qp.is_null() {
            return EINVAL;
        }
        // SAFETY: a QP of ours.
        let q = unsafe { &*qp.cast::<Qp<D>>() };
        if let QpKind::Own(m) = &q.kind {
            let Some(inner) = lock(m).take() else {
                return EINVAL;
            };
            return match self.prov.destroy_qp(inner) {
                Ok(()) => {
                    // SAFETY: our Qp box; the caller gives it up.
                    drop(unsafe { Box::from_raw(qp.cast::<Qp<D>>()) });
                    0
                }
                Err(e) => {
                    *lock(m) = e.object;
                    e.error.errno()
                }
            };
        }
        let id = q.id;
        if id.is_null() {
            // its id was destroyed, and the QP with it
            // SAFETY: our Qp box; the caller gives it up.
            drop(unsafe { Box::from_raw(qp.cast::<Qp<D>>()) });
            return 0;
        }
        // A connection manager's QP: what rdma_destroy_qp does, without the id's own CQs
        // (librdmacm's ibv_destroy_qp on an id's QP leaves them to rdma_destroy_id).
        // SAFETY: the QP's id is live while its QP is (destroying the id frees the QP).
        let i = unsafe { &mut *id };
        if let Some(c) = i.id.as_ref()
            && let Err(e) = c.destroy_qp()
        {
            return cm_errno(e);
        }
        i.c.qp = null_mut();
        // SAFETY: our Qp box; the caller gives it up.
        drop(unsafe { Box::from_raw(qp.cast::<Qp<D>>()) });
        0
    }

    unsafe fn create_qp_verbs(&self, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        if pd.is_null() || attr.is_null() {
            set_errno(EINVAL);
            return null_mut();
        }
        // SAFETY: the caller's attributes and our PD.
        let (a, p) = unsafe { (&mut *attr, &*pd.cast::<Pd>()) };
        let Some(qpt) = qp_type_of(a.qp_type) else {
            set_errno(EOPNOTSUPP);
            return null_mut();
        };
        if a.send_cq.is_null() || a.recv_cq.is_null() || !a.srq.is_null() {
            set_errno(if a.srq.is_null() { EINVAL } else { EOPNOTSUPP });
            return null_mut();
        }
        // SAFETY: CQs of ours.
        let (scq, rcq) = unsafe { (&*a.send_cq.cast::<Cq<D>>(), &*a.recv_cq.cast::<Cq<D>>()) };
        let va = verbs::QpInitAttr {
            qp_type: qpt,
            send_cq: &*scq.cq,
            recv_cq: &*rcq.cq,
            srq: None,
            cap: cap_of(&a.cap),
            sq_sig_all: a.sq_sig_all != 0,
        };
        let r = self.cm.with_pd(&p.pd, |prov, ppd| prov.create_qp(ppd, &va));
        let (inner, cap) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                set_errno(e.errno());
                return null_mut();
            }
            Err(e) => {
                set_errno(cm_errno(e));
                return null_mut();
            }
        };
        a.cap = cap_c(&cap);
        // SAFETY: zeroed ibv_qp (NULL pointers, static mutex/cond initialisers) filled below.
        let mut c: ibv_qp = unsafe { core::mem::zeroed() };
        c.context = p.c.context;
        c.qp_context = a.qp_context;
        c.pd = pd;
        c.send_cq = a.send_cq;
        c.recv_cq = a.recv_cq;
        c.qp_num = inner.qp_num();
        c.state = IBV_QPS_RESET;
        c.qp_type = a.qp_type;
        Box::into_raw(Box::new(Qp::<D> {
            c,
            kind: QpKind::Own(Mutex::new(Some(inner))),
            id: null_mut(),
            cap: a.cap,
            sq_sig_all: a.sq_sig_all,
        }))
        .cast()
    }

    unsafe fn modify_qp(&self, qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
        if qp.is_null() || attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's QP and attributes.
        let (q, a) = unsafe { (&mut *qp.cast::<Qp<D>>(), &*attr) };
        let va = match self.qp_attr_of(a, mask) {
            Ok(v) => v,
            Err(e) => return e,
        };
        // INIT -> INIT (a program repeating the INIT step, as `rdma_init_qp_attr` users do):
        // legal in the IB state machine, not a transition the provider knows; the INIT
        // attributes (port, P_Key index, access flags) are those the QP has.
        if mask & IBV_QP_STATE != 0 && a.qp_state == IBV_QPS_INIT && q.c.state == IBV_QPS_INIT {
            return 0;
        }
        let vmask = verbs::QpAttrMask::from_bits_retain(mask as u32);
        let r = match &q.kind {
            QpKind::Own(m) => match lock(m).as_mut() {
                Some(inner) => self.prov.modify_qp(inner, &va, vmask),
                None => return EINVAL,
            },
            QpKind::Cm(_) => {
                if q.id.is_null() {
                    return EINVAL;
                }
                // SAFETY: the QP's id is live while its QP is (a destroyed id's QP has none).
                let i = unsafe { &*q.id };
                match i.id.as_ref().map(|c| {
                    c.with_verbs(|v| match v.qp {
                        Some(inner) => v.provider.modify_qp(inner, &va, vmask),
                        None => Err(verbs::Error::InvalidArgument),
                    })
                }) {
                    Some(Ok(r)) => r,
                    Some(Err(e)) => return cm_errno(e),
                    None => return EINVAL,
                }
            }
        };
        match r {
            Ok(()) => {
                if mask & IBV_QP_STATE != 0 {
                    q.c.state = a.qp_state;
                }
                if mask & IBV_QP_CAP != 0 {
                    q.cap = a.cap;
                }
                0
            }
            Err(e) => e.errno(),
        }
    }

    unsafe fn init_qp_attr(
        &self,
        id: *mut rdma_cm_id,
        attr: *mut ibv_qp_attr,
        mask: *mut c_int,
    ) -> c_int {
        if attr.is_null() || mask.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: the caller's id and out-parameters.
        let r = unsafe { self.id(id) }.and_then(|i| {
            // SAFETY: the caller's attributes: the state wanted is in them.
            let want = qp_state_of(unsafe { (*attr).qp_state }).ok_or(EINVAL)?;
            let (a, m) = self.cm_id(i)?.init_qp_attr(want).map_err(cm_errno)?;
            // SAFETY: the caller's out-parameters.
            unsafe {
                *attr = qp_attr_c(&a);
                *mask = m.bits() as c_int;
            }
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn establish(&self, id: *mut rdma_cm_id) -> c_int {
        // SAFETY: the caller's id.
        let r = unsafe { self.id(id) }.and_then(|i| self.cm_id(i)?.establish().map_err(cm_errno));
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn create_ah(&self, pd: *mut ibv_pd, attr: *const ibv_ah_attr) -> *mut ibv_ah {
        if pd.is_null() || attr.is_null() {
            set_errno(EINVAL);
            return null_mut();
        }
        // SAFETY: the caller's attributes and our PD.
        let (a, p) = unsafe { (&*attr, &*pd.cast::<Pd>()) };
        let va = match self.ah_attr_of(a) {
            Ok(v) => v,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        match self.cm.with_pd(&p.pd, |prov, ppd| prov.create_ah(ppd, &va)) {
            Ok(Ok(ah)) => Box::into_raw(Box::new(Ah::<D> {
                c: ibv_ah {
                    context: p.c.context,
                    pd,
                    handle: 0,
                },
                ah: Some(ah),
            }))
            .cast(),
            Ok(Err(e)) => {
                set_errno(e.errno());
                null_mut()
            }
            Err(e) => {
                set_errno(cm_errno(e));
                null_mut()
            }
        }
    }

    unsafe fn destroy_ah(&self, ah: *mut ibv_ah) -> c_int {
        if ah.is_null() {
            return EINVAL;
        }
        // SAFETY: an AH of ours.
        let a = unsafe { &mut *ah.cast::<Ah<D>>() };
        let Some(inner) = a.ah.take() else {
            return EINVAL;
        };
        match self.prov.destroy_ah(inner) {
            Ok(()) => {
                // SAFETY: boxed by create_ah.
                drop(unsafe { Box::from_raw(ah.cast::<Ah<D>>()) });
                0
            }
            Err(e) => {
                a.ah = e.object;
                e.error.errno()
            }
        }
    }

    unsafe fn init_ah_from_wc(
        &self,
        wc: *const ibv_wc,
        grh: *const ibv_grh,
        attr: *mut ibv_ah_attr,
    ) -> c_int {
        if wc.is_null() || grh.is_null() || attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's completion and the 40 bytes of GRH area it points to.
        let (w, g) = unsafe { (&*wc, core::slice::from_raw_parts(grh.cast::<u8>(), 40)) };
        let vw = WorkCompletion {
            wr_id: w.wr_id,
            qp_num: w.qp_num,
            byte_len: w.byte_len,
            src_qp: w.src_qp,
            wc_flags: WcFlags::from_bits_retain(w.wc_flags),
            ..WorkCompletion::default()
        };
        match self.cm.ah_attr_from_wc(self.dev, &vw, g) {
            Ok(a) => {
                // SAFETY: the caller's out-parameter.
                unsafe { *attr = ah_attr_c(&a) };
                0
            }
            Err(e) => cm_errno(e),
        }
    }

    // ------------------------------------------------------------------ librdmacm

    unsafe fn create_event_channel(&self) -> *mut rdma_event_channel {
        let efd = match EventFd::new() {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        let ch = match self.cm.create_event_channel() {
            Ok(c) => c,
            Err(e) => {
                set_errno(cm_errno(e));
                return null_mut();
            }
        };
        ch.set_nonblocking(true);
        let p = Box::into_raw(Box::new(EvChannel::<D> {
            c: rdma_event_channel { fd: efd.0 },
            ch,
            efd,
            signalled: AtomicBool::new(false),
            clear: Mutex::new(()),
        }));
        lock(&self.ev_channels).push(p as usize);
        p.cast()
    }

    unsafe fn destroy_event_channel(&self, ch: *mut rdma_event_channel) {
        if ch.is_null() {
            return;
        }
        let p = ch.cast::<EvChannel<D>>();
        let mut list = lock(&self.ev_channels);
        if let Some(i) = list.iter().position(|&a| a == p as usize) {
            list.swap_remove(i);
            drop(list);
            // Threads may still be blocked in rdma_get_cm_event on it (rping's cm_thread
            // at exit): the channel is left allocated (its fd stays open) so that they keep
            // waiting instead of failing.
            let _ = p;
        }
    }

    unsafe fn create_id(
        &self,
        ch: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        if id.is_null() {
            return fail(EINVAL);
        }
        let chan = if ch.is_null() {
            None
        } else {
            // SAFETY: a channel of ours.
            Some(unsafe { &(*ch.cast::<EvChannel<D>>()).ch })
        };
        let Ok(ps16) = u16::try_from(ps) else {
            return fail(EINVAL);
        };
        match self.cm.create_id(chan, context as u64, PortSpace(ps16)) {
            Ok(c) => {
                let p = self.new_id(c, ch, context);
                // SAFETY: the caller's out-pointer.
                unsafe { *id = p.cast() };
                0
            }
            Err(e) => fail(cm_errno(e)),
        }
    }

    unsafe fn destroy_id(&self, id: *mut rdma_cm_id) -> c_int {
        // SAFETY: an id of ours.
        let i = match unsafe { self.id(id) } {
            Ok(i) => i,
            Err(e) => return fail(e),
        };
        // As in librdmacm: the id is torn down only once every event reported for it has
        // been acknowledged (another thread may still be handling one: rping's cm_thread
        // gets the client's DISCONNECTED while its main thread destroys the id, and the
        // event's making reads the manager's id). It leaves `ids` first, so that no new
        // event is reported for it; then the wait; only then is the manager's id taken.
        let handle = i.id.as_ref().map(|c| c.handle().cq_context());
        let mut ids = lock(&self.ids);
        if let Some(h) = handle {
            ids.remove(&h);
        }
        while i.unacked.load(Ordering::Relaxed) != 0 {
            ids = self.acked.wait(ids).unwrap_or_else(|p| p.into_inner());
        }
        drop(ids);
        if let Some(c) = i.id.take() {
            c.destroy_id();
        }
        // The manager destroyed a QP left on the id; as in librdmacm the program still holds
        // `id->qp` and frees it with ibv_destroy_qp (rping destroys the id first): the C
        // object stays, detached (its posts fail).
        if !i.c.qp.is_null() {
            // SAFETY: our Qp box, still the program's.
            unsafe { (*i.c.qp.cast::<Qp<D>>()).id = null_mut() };
            i.c.qp = null_mut();
        }
        // SAFETY: the id's own CQs, its QP gone.
        unsafe { self.drop_own_cqs(i) };
        // SAFETY: boxed by new_id; the caller gives it up.
        drop(unsafe { Box::from_raw(id.cast::<Id<D>>()) });
        0
    }

    unsafe fn bind_addr(&self, id: *mut rdma_cm_id, addr: *const libc::sockaddr) -> c_int {
        // SAFETY: the caller's id and address.
        let r = unsafe { self.id(id) }.and_then(|i| {
            // SAFETY: the caller's pointers, valid by this call's contract.
            let a = unsafe { sockaddr_in(addr) }?.ok_or(EINVAL)?;
            self.cm_id(i)?.bind_addr(&a).map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn resolve_addr(
        &self,
        id: *mut rdma_cm_id,
        src: *const libc::sockaddr,
        dst: *const libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int {
        // SAFETY: the caller's id and addresses.
        let r = unsafe { self.id(id) }.and_then(|i| {
            // SAFETY: the caller's pointers, valid by this call's contract.
            let s = unsafe { sockaddr_in(src) }?;
            // SAFETY: the caller's pointers, valid by this call's contract.
            let d = unsafe { sockaddr_in(dst) }?.ok_or(EINVAL)?;
            let (ctx, _) = self.context_or_null();
            let _ = ctx;
            self.cm_id(i)?
                .resolve_addr(s.as_ref(), &d, timeout_ms.max(1) as u32)
                .map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn resolve_route(&self, id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        // SAFETY: the caller's id.
        let r = unsafe { self.id(id) }.and_then(|i| {
            self.cm_id(i)?
                .resolve_route(timeout_ms.max(1) as u32)
                .map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn listen(&self, id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        // SAFETY: the caller's id.
        let r = unsafe { self.id(id) }.and_then(|i| {
            self.cm_id(i)?.listen(backlog).map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn connect(&self, id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int {
        // SAFETY: the caller's id and parameters.
        let r = unsafe { self.id(id) }.and_then(|i| {
            // SAFETY: the caller's pointers, valid by this call's contract.
            let param = unsafe { Self::conn_param(p) };
            self.cm_id(i)?.connect(param.as_ref()).map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn accept(&self, id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int {
        // SAFETY: the caller's id and parameters.
        let r = unsafe { self.id(id) }.and_then(|i| {
            // SAFETY: the caller's pointers, valid by this call's contract.
            let param = unsafe { Self::conn_param(p) };
            self.cm_id(i)?.accept(param.as_ref()).map_err(cm_errno)?;
            self.refresh(i);
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn reject(&self, id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
        // SAFETY: the caller's id and private data.
        let r = unsafe { self.id(id) }.and_then(|i| {
            let pd: &[u8] = if data.is_null() || len == 0 {
                &[]
            } else {
                // SAFETY: the caller's pointers, valid by this call's contract.
                unsafe { core::slice::from_raw_parts(data.cast(), len as usize) }
            };
            self.cm_id(i)?.reject(pd).map_err(cm_errno)
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn disconnect(&self, id: *mut rdma_cm_id) -> c_int {
        // SAFETY: the caller's id.
        let r = unsafe { self.id(id) }.and_then(|i| {
            let r = self.cm_id(i)?.disconnect().map_err(cm_errno);
            if !i.c.qp.is_null() {
                // SAFETY: our QP.
                unsafe { (*i.c.qp).state = IBV_QPS_ERR };
            }
            r
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn get_cm_event(
        &self,
        ch: *mut rdma_event_channel,
        ev: *mut *mut rdma_cm_event,
    ) -> c_int {
        if ch.is_null() || ev.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: a channel of ours (never freed: see destroy_event_channel).
        let c = unsafe { &*ch.cast::<EvChannel<D>>() };
        loop {
            match c.ch.get_cm_event() {
                Ok(e) => {
                    if let Some(p) = self.make_event(e, ch) {
                        // SAFETY: the caller's out-pointer.
                        unsafe { *ev = p.cast() };
                        return 0;
                    }
                }
                Err(cm::Error::Again) => {
                    {
                        let _g = lock(&c.clear);
                        c.efd.clear();
                        c.signalled.store(false, Ordering::Release);
                    }
                    if c.ch.has_events() {
                        continue;
                    }
                    if c.efd.nonblocking() {
                        return fail(EAGAIN);
                    }
                    c.efd.ready(5);
                }
                Err(e) => return fail(cm_errno(e)),
            }
        }
    }

    unsafe fn ack_cm_event(&self, ev: *mut rdma_cm_event) -> c_int {
        if ev.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: an event of ours, acknowledged once.
        let e = unsafe { Box::from_raw(ev.cast::<Event>()) };
        if e.counted != 0 {
            let ids = lock(&self.ids);
            // SAFETY: the id this event counts against is not freed while the count holds
            // (rdma_destroy_id waits for it).
            unsafe {
                (*(e.counted as *mut Id<D>))
                    .unacked
                    .fetch_sub(1, Ordering::Relaxed)
            };
            drop(ids);
            self.acked.notify_all();
        }
        0
    }

    unsafe fn create_qp(
        &self,
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        // SAFETY: the caller's id.
        let i = match unsafe { self.id(id) } {
            Ok(i) => i,
            Err(e) => return fail(e),
        };
        if attr.is_null() || !i.c.qp.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        let (ctx, default_pd) = self.context_or_null();
        let pd = if pd.is_null() {
            if i.c.pd.is_null() { default_pd } else { i.c.pd }
        } else {
            pd
        };
        if pd.is_null() {
            return fail(EINVAL);
        }
        let Some(qpt) = qp_type_of(a.qp_type) else {
            return fail(EOPNOTSUPP);
        };
        let (mut scq, mut rcq) = (a.send_cq, a.recv_cq);
        let mut own = false;
        if scq.is_null() || rcq.is_null() {
            // SAFETY: the manager's context.
            let s = match unsafe { self.auto_cq(ctx, a.cap.max_send_wr, id) } {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            // SAFETY: as above.
            let r = match unsafe { self.auto_cq(ctx, a.cap.max_recv_wr, id) } {
                Ok(x) => x,
                Err(e) => {
                    // SAFETY: just made, unused.
                    unsafe {
                        self.destroy_cq(s.1);
                        self.destroy_comp_channel(s.0);
                    }
                    return fail(e);
                }
            };
            i.c.send_cq_channel = s.0;
            i.c.send_cq = s.1;
            i.c.recv_cq_channel = r.0;
            i.c.recv_cq = r.1;
            scq = s.1;
            rcq = r.1;
            own = true;
        }
        // SAFETY: CQs of ours.
        let (sarc, rarc) = unsafe {
            (
                (*scq.cast::<Cq<D>>()).cq.clone(),
                (*rcq.cast::<Cq<D>>()).cq.clone(),
            )
        };
        // SAFETY: a PD of ours.
        let p = unsafe { &*pd.cast::<Pd>() };
        let mut qa = QpInitAttr {
            qp_type: qpt,
            send_cq: Some(sarc),
            recv_cq: Some(rarc),
            srq: None,
            cap: cap_of(&a.cap),
            sq_sig_all: a.sq_sig_all != 0,
        };
        let cmid = match self.cm_id(i) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let r = cmid.create_qp(Some(&p.pd), &mut qa);
        drop(qa);
        if let Err(e) = r {
            i.own_cqs = own;
            // SAFETY: the CQs made above (no QP uses them).
            unsafe { self.drop_own_cqs(i) };
            return fail(cm_errno(e));
        }
        let dp = match cmid.data_path() {
            Ok(d) => d,
            Err(e) => return fail(cm_errno(e)),
        };
        let qpn = cmid.qp_num().unwrap_or(0);
        let caps = cmid
            .with_verbs(|v| v.qp.map(|q| q.cap()))
            .ok()
            .flatten()
            .unwrap_or_else(|| cap_of(&a.cap));
        a.cap = cap_c(&caps);
        // SAFETY: zeroed ibv_qp (NULL pointers, static mutex/cond initialisers) filled below.
        let mut c: ibv_qp = unsafe { core::mem::zeroed() };
        c.context = ctx;
        c.qp_context = a.qp_context;
        c.pd = pd;
        c.send_cq = scq;
        c.recv_cq = rcq;
        c.srq = a.srq;
        c.qp_num = qpn;
        c.state = if qpt == QpType::Ud {
            IBV_QPS_RTS
        } else {
            IBV_QPS_INIT
        };
        c.qp_type = a.qp_type;
        let q = Box::into_raw(Box::new(Qp::<D> {
            c,
            kind: QpKind::Cm(dp),
            id: id.cast(),
            cap: a.cap,
            sq_sig_all: a.sq_sig_all,
        }));
        i.c.qp = q.cast();
        i.c.pd = pd;
        i.own_cqs = own;
        0
    }

    unsafe fn destroy_qp(&self, id: *mut rdma_cm_id) {
        // SAFETY: the caller's id.
        let Ok(i) = (unsafe { self.id(id) }) else {
            return;
        };
        if let Some(c) = i.id.as_ref() {
            let _ = c.destroy_qp();
        }
        if !i.c.qp.is_null() {
            // SAFETY: our Qp box.
            drop(unsafe { Box::from_raw(i.c.qp.cast::<Qp<D>>()) });
            i.c.qp = null_mut();
        }
        // SAFETY: the id's own CQs; its QP is gone.
        unsafe { self.drop_own_cqs(i) };
    }

    unsafe fn create_ep(
        &self,
        id: *mut *mut rdma_cm_id,
        res: *const rdma_addrinfo,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        if id.is_null() || res.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: the caller's address information.
        let r = unsafe { &*res };
        // SAFETY: the caller's pointers, valid by this call's contract.
        let src = match unsafe { sockaddr_in(r.ai_src_addr) } {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        // SAFETY: as above.
        let dst = match unsafe { sockaddr_in(r.ai_dst_addr) } {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        let ai = AddrInfo {
            ai_flags: RaiFlags(r.ai_flags as u32),
            ai_qp_type: qp_type_of(r.ai_qp_type as ibv_qp_type),
            ai_port_space: u16::try_from(r.ai_port_space).ok().map(PortSpace),
            ai_src_addr: src,
            ai_dst_addr: dst,
            ..AddrInfo::default()
        };
        let cmid = match self.cm.create_ep(&ai, None, None) {
            Ok(c) => c,
            Err(e) => return fail(cm_errno(e)),
        };
        // librdmacm: the QP type of the endpoint's QPs follows the address information
        let qpt = qp_type_c(cmid.qp_type());
        // SAFETY: the caller's attributes (NULL or valid).
        if let Some(a) = unsafe { attr.as_mut() } {
            a.qp_type = qpt;
        }
        let p = self.new_id(cmid, null_mut(), null_mut());
        // SAFETY: just made.
        let i = unsafe { &mut *p };
        if ai.ai_flags.contains(RaiFlags::PASSIVE) {
            i.saved = Some(Saved {
                pd,
                // SAFETY: the caller's attributes, copied.
                attr: unsafe { attr.as_ref() }.copied(),
            });
        } else if !attr.is_null() {
            // SAFETY: our id; the caller's attributes.
            if unsafe { self.create_qp(p.cast(), pd, attr) } != 0 {
                let e = errno();
                // SAFETY: ours, not handed out.
                unsafe { self.destroy_id(p.cast()) };
                return fail(e);
            }
        }
        // SAFETY: the caller's out-pointer.
        unsafe { *id = p.cast() };
        0
    }

    unsafe fn destroy_ep(&self, id: *mut rdma_cm_id) {
        // SAFETY: the caller's id.
        unsafe {
            self.destroy_qp(id);
            self.destroy_id(id);
        }
    }

    unsafe fn get_request(&self, listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        if id.is_null() {
            return fail(EINVAL);
        }
        // SAFETY: the caller's listener.
        let l = match unsafe { self.id(listen) } {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let cmid = match self
            .cm_id(l)
            .and_then(|c| c.get_request().map_err(cm_errno))
        {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let saved = l.saved;
        let p = self.new_id(cmid, null_mut(), l.c.context);
        if let Some(s) = saved
            && let Some(mut a) = s.attr
        {
            // SAFETY: our id; a copy of the saved attributes.
            if unsafe { self.create_qp(p.cast(), s.pd, &mut a) } != 0 {
                let e = errno();
                // SAFETY: ours, not handed out.
                unsafe { self.destroy_id(p.cast()) };
                return fail(e);
            }
        }
        // SAFETY: the caller's out-pointer.
        unsafe { *id = p.cast() };
        0
    }

    unsafe fn set_option(
        &self,
        id: *mut rdma_cm_id,
        level: c_int,
        name: c_int,
        val: *const c_void,
        len: usize,
    ) -> c_int {
        // SAFETY: the caller's id and option value.
        let r = unsafe { self.id(id) }.and_then(|i| {
            let v: &[u8] = if val.is_null() || len == 0 {
                &[]
            } else {
                // SAFETY: the caller's pointers, valid by this call's contract.
                unsafe { core::slice::from_raw_parts(val.cast(), len) }
            };
            self.cm_id(i)?.set_option(level, name, v).map_err(cm_errno)
        });
        r.map_or_else(fail, |()| 0)
    }

    unsafe fn migrate_id(&self, id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int {
        // SAFETY: the caller's id and channel.
        let r = unsafe { self.id(id) }.and_then(|i| {
            let chan = if ch.is_null() {
                None
            } else {
                // SAFETY: the caller's pointers, valid by this call's contract.
                Some(unsafe { &(*ch.cast::<EvChannel<D>>()).ch })
            };
            self.cm_id(i)?.migrate_id(chan).map_err(cm_errno)?;
            i.c.channel = ch;
            Ok(())
        });
        r.map_or_else(fail, |()| 0)
    }
}

/// Keeps `size_of` used for the layout assertions below.
const _: () = assert!(size_of::<Pd>() >= size_of::<ibv_pd>());
