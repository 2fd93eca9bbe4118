//! The target: subsystems, namespaces, controllers and per-connection queues, as a
//! transport-agnostic state machine.
//!
//! A transport accepts a connection with [`Target::accept`] (the connect request's private
//! data in, a [`Queue`] and the accept's private data out), then hands every received
//! capsule to [`Queue::submit`]. The answer says what to move:
//!
//! * [`Outcome::Fetch`]: RDMA READ the host's data ([`Request::remote`]) into
//!   [`Request::buffer_mut`], then call [`Queue::data_fetched`];
//! * [`Outcome::Respond`]: RDMA WRITE [`Response::data`] (if any) to [`Response::remote`],
//!   then SEND the 16-byte [`Response::cqe`] (with invalidate of [`Response::invalidate`]);
//! * [`Outcome::Held`]: nothing now (an Asynchronous Event Request);
//! * [`Outcome::Disconnect`]: the queue is dead (short capsule, controller gone): disconnect.
//!
//! [`serve`] runs that loop synchronously over a [`TargetTransport`].
//!
//! Each [`Queue`] is owned by one connection and keeps its own state; the only state I/O
//! queues share is the controller's ready flag (one atomic load per command) and the
//! namespaces (`Arc<dyn Namespace>`, synchronised inside the backend). Admin-queue state
//! (CC, CSTS, keep-alive, features, error log) sits behind one lock per controller, and the
//! controller table behind one lock per target, touched by Connect, teardown and the
//! keep-alive scan only.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::admin::{
    self, ErrorLogEntry, GetFeatures, GetLogPage, IDENTIFY_LEN, Identify, IdentifyController,
    IdentifyNamespace, NsDescriptor, SetFeatures, SmartLog, cns, fid, lid,
};
use crate::capsule::{Cqe, FLAGS_FUSE_MASK, FLAGS_PSDT_MASK, FLAGS_PSDT_SGL, SQE_SIZE, Sgl, Sqe};
use crate::discovery::{self, DiscoveryEntry, RdmaTsas};
use crate::fabrics::{
    self, CATTR_DISABLE_SQ_FLOW, CNTLID_DYNAMIC, CNTLID_MAX, Cap, Cc, Connect, ConnectData,
    ConnectDataError, ConnectErrorLocation, Csts, DISCOVERY_NQN, PropertyGet, PropertySet, prop,
};
use crate::io::{
    self, DSM_AD, DSM_MAX_RANGES, DSM_RANGE_LEN, DatasetManagement, DsmRange, ReadWrite,
};
use crate::namespace::Namespace;
use crate::rdma::{self, Accept, ConnectRequest, RejectStatus};
use crate::status::Status;

/// Remote memory named by a keyed SGL descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteBuffer {
    /// Remote virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Remote key.
    pub key: u32,
}

/// A port the target listens on, as the discovery log reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Port id.
    pub portid: u16,
    /// Transport type ([`discovery::trtype`]).
    pub trtype: u8,
    /// Address family ([`discovery::adrfam`]).
    pub adrfam: u8,
    /// Transport address, e.g. "10.0.0.2".
    pub traddr: String,
    /// Transport service id, e.g. "4420".
    pub trsvcid: String,
    /// Transport requirements.
    pub treq: u8,
}

/// Target-wide limits and identity.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// I/O queues per controller (queue ids 1..=this).
    pub max_io_queues: u16,
    /// Largest I/O queue depth (CAP.MQES + 1; at most 128 over RDMA).
    pub max_queue_depth: u16,
    /// In-capsule data bytes an I/O queue accepts after the SQE (0: none).
    pub inline_data_size: u32,
    /// MDTS: largest transfer is 2^mdts × 4 KiB.
    pub mdts: u8,
    /// Keep-alive granularity reported in KAS (100 ms units).
    pub kas: u16,
    /// Firmware revision reported by Identify and the firmware slot log.
    pub firmware_revision: String,
    /// Ports listed in the discovery log.
    pub ports: Vec<Port>,
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            max_io_queues: 16,
            max_queue_depth: rdma::MAX_QUEUE_DEPTH,
            inline_data_size: 4096,
            mdts: 8,
            kas: 10,
            firmware_revision: String::from("0.1.0"),
            ports: Vec::new(),
        }
    }
}

/// Errors while configuring a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// NSID 0 or 0xFFFFFFFF (or above 0xFFFFFFFE).
    InvalidNsid,
    /// The NSID is already used in this subsystem.
    DuplicateNsid,
    /// A subsystem with this NQN exists (or the NQN is the discovery NQN).
    DuplicateNqn,
    /// NQN empty or longer than 222 bytes.
    InvalidNqn,
    /// The namespace's block size is not a power of two in 512..=4096, or it has no blocks.
    InvalidNamespace,
}

struct NsSlot {
    nsid: u32,
    ns: Arc<dyn Namespace>,
    uuid: Option<[u8; 16]>,
    nguid: Option<[u8; 16]>,
}

/// An NVM subsystem: NQN, identity and namespaces, fixed once added to a target.
pub struct Subsystem {
    nqn: String,
    serial: String,
    model: String,
    namespaces: Vec<NsSlot>,
    allowed_hosts: Option<Vec<String>>,
    discovery: bool,
}

impl Subsystem {
    /// A subsystem with no namespaces that admits any host.
    pub fn new(nqn: &str, serial: &str, model: &str) -> Subsystem {
        Subsystem {
            nqn: nqn.into(),
            serial: serial.into(),
            model: model.into(),
            namespaces: Vec::new(),
            allowed_hosts: None,
            discovery: false,
        }
    }

    /// The NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Adds a namespace under `nsid`.
    pub fn add_namespace(&mut self, nsid: u32, ns: Arc<dyn Namespace>) -> Result<(), ConfigError> {
        self.add_namespace_with_ids(nsid, ns, None, None)
    }

    /// Adds a namespace with a UUID and / or NGUID (reported in the descriptor list; keep
    /// them unique across subsystems, a host ignores duplicates).
    pub fn add_namespace_with_ids(
        &mut self,
        nsid: u32,
        ns: Arc<dyn Namespace>,
        uuid: Option<[u8; 16]>,
        nguid: Option<[u8; 16]>,
    ) -> Result<(), ConfigError> {
        if nsid == 0 || nsid >= 0xFFFF_FFFE {
            return Err(ConfigError::InvalidNsid);
        }
        let bs = ns.block_size();
        if !bs.is_power_of_two() || !(512..=4096).contains(&bs) || ns.block_count() == 0 {
            return Err(ConfigError::InvalidNamespace);
        }
        if self.namespaces.iter().any(|s| s.nsid == nsid) {
            return Err(ConfigError::DuplicateNsid);
        }
        let at = self.namespaces.partition_point(|s| s.nsid < nsid);
        self.namespaces.insert(
            at,
            NsSlot {
                nsid,
                ns,
                uuid,
                nguid,
            },
        );
        Ok(())
    }

    /// Restricts the subsystem to listed hosts (call once per host NQN).
    pub fn allow_host(&mut self, hostnqn: &str) {
        self.allowed_hosts
            .get_or_insert_with(Vec::new)
            .push(hostnqn.into());
    }

    fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allowed_hosts
            .as_ref()
            .is_none_or(|l| l.iter().any(|h| h == hostnqn))
    }

    fn namespace(&self, nsid: u32) -> Option<&NsSlot> {
        self.namespaces
            .binary_search_by_key(&nsid, |s| s.nsid)
            .ok()
            .map(|i| &self.namespaces[i])
    }
}

/// Counters one I/O queue keeps (written by that queue only) for the SMART log.
#[derive(Default)]
struct QueueStats {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

impl QueueStats {
    fn add(&self, reads: u64, writes: u64, rb: u64, wb: u64) {
        // Only the owning queue writes: load + store, no read-modify-write needed.
        let bump = |a: &AtomicU64, v: u64| {
            if v != 0 {
                a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed)
            }
        };
        bump(&self.reads, reads);
        bump(&self.writes, writes);
        bump(&self.read_bytes, rb);
        bump(&self.write_bytes, wb);
    }

    fn snapshot(&self) -> [u64; 4] {
        [
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
        ]
    }
}

/// Error log entries a controller keeps.
const ERROR_LOG_ENTRIES: usize = 64;
/// AERL + 1: outstanding asynchronous event requests.
const MAX_AERS: usize = 4;
/// Keep-alive timeout of a discovery controller connected with KATO 0.
const DISCOVERY_KATO_MS: u64 = 120_000;

const STATE_READY: u8 = 1;
const STATE_DEAD: u8 = 2;

struct AdminState {
    cc: u32,
    csts: u32,
    kato_ms: u64,
    deadline: Option<u64>,
    aen_cfg: u32,
    aers: Vec<u16>,
    events: VecDeque<u32>,
    error_count: u64,
    errors: VecDeque<ErrorLogEntry>,
    io_queues: Vec<Option<Arc<QueueStats>>>,
    retired: [u64; 4],
}

/// A controller: created by Connect on an admin queue, joined by I/O queues.
pub struct Controller {
    cntlid: u16,
    subsys: Arc<Subsystem>,
    hostnqn: String,
    hostid: [u8; 16],
    state: AtomicU8,
    /// When a command last arrived on any of its queues (ms): traffic-based keep-alive
    /// (CTRATT.TBKAS) counts every command, not only Keep Alive. An atomic, so that I/O
    /// queues never take the admin lock.
    activity: AtomicU64,
    admin: spin::Mutex<AdminState>,
}

impl Controller {
    /// The controller id.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The host NQN that created it.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// CSTS as the host would read it.
    pub fn csts(&self) -> Csts {
        Csts(self.admin.lock().csts)
    }

    /// Whether the controller failed (keep-alive expiry) or was torn down.
    pub fn is_dead(&self) -> bool {
        self.state.load(Ordering::Acquire) & STATE_DEAD != 0
    }

    fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == STATE_READY
    }

    fn set_ready(&self, ready: bool) {
        if ready {
            self.state.fetch_or(STATE_READY, Ordering::AcqRel);
        } else {
            self.state.fetch_and(!STATE_READY, Ordering::AcqRel);
        }
    }

    fn kill(&self) {
        self.state.fetch_or(STATE_DEAD, Ordering::AcqRel);
        self.state.fetch_and(!STATE_READY, Ordering::AcqRel);
    }

    fn log_error(&self, sqid: u16, cid: u16, status: Status, nsid: u32, lba: u64) {
        let mut a = self.admin.lock();
        a.error_count += 1;
        let e = ErrorLogEntry {
            error_count: a.error_count,
            sqid,
            cid,
            status,
            param_error_location: 0xFFFF,
            lba,
            nsid,
            trtype: discovery::trtype::RDMA,
        };
        if a.errors.len() == ERROR_LOG_ENTRIES {
            a.errors.pop_back();
        }
        a.errors.push_front(e);
    }
}

struct ControllerTable {
    ctrls: Vec<Arc<Controller>>,
    next: u16,
}

/// The target: subsystems, ports and live controllers.
pub struct Target {
    config: TargetConfig,
    subsystems: Vec<Arc<Subsystem>>,
    discovery: Arc<Subsystem>,
    table: spin::Mutex<ControllerTable>,
    genctr: AtomicU64,
}

impl Target {
    /// A target with no subsystems (the discovery subsystem is built in).
    pub fn new(config: TargetConfig) -> Target {
        let mut d = Subsystem::new(DISCOVERY_NQN, "discovery", "discovery controller");
        d.discovery = true;
        Target {
            config,
            subsystems: Vec::new(),
            discovery: Arc::new(d),
            table: spin::Mutex::new(ControllerTable {
                ctrls: Vec::new(),
                next: 1,
            }),
            genctr: AtomicU64::new(1),
        }
    }

    /// Adds a subsystem.
    pub fn add_subsystem(&mut self, s: Subsystem) -> Result<(), ConfigError> {
        if s.nqn.is_empty() || s.nqn.len() > fabrics::NQN_MAX_LEN {
            return Err(ConfigError::InvalidNqn);
        }
        if s.nqn == DISCOVERY_NQN || self.subsystems.iter().any(|x| x.nqn == s.nqn) {
            return Err(ConfigError::DuplicateNqn);
        }
        self.subsystems.push(Arc::new(s));
        self.genctr.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &TargetConfig {
        &self.config
    }

    /// CAP as this target reports it: MQES, TO 15 (7.5 s), NVM command set, MPSMIN 0.
    pub fn cap(&self) -> Cap {
        Cap::new(self.config.max_queue_depth.saturating_sub(1), 15)
    }

    /// Checks a connect request's private data and builds the queue for the connection and
    /// the accept's private data; the error is the reject status to send.
    pub fn accept(self: &Arc<Self>, req: &ConnectRequest) -> Result<(Queue, Accept), RejectStatus> {
        if req.recfmt != 0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        let max = if req.qid == 0 {
            rdma::ADMIN_QUEUE_DEPTH
        } else {
            if req.qid > self.config.max_io_queues {
                return Err(RejectStatus::InvalidQid);
            }
            self.config.max_queue_depth
        };
        if u32::from(req.hsqsize) + 1 > u32::from(max) {
            return Err(RejectStatus::InvalidHsqsize);
        }
        if req.hrqsize == 0 {
            return Err(RejectStatus::InvalidHrqsize);
        }
        let inline = if req.qid == 0 {
            0
        } else {
            self.config.inline_data_size as usize
        };
        let q = Queue {
            target: self.clone(),
            cm: *req,
            conn: None,
            sq_size: u32::from(req.hsqsize) + 1,
            sq_head: 0,
            sq_flow: true,
            inline,
            stats: Arc::new(QueueStats::default()),
            closed: false,
            spare: Vec::new(),
        };
        Ok((
            q,
            Accept {
                recfmt: 0,
                crqsize: req.hsqsize.saturating_add(1),
            },
        ))
    }

    /// Fails every controller whose keep-alive deadline lies before `now` (milliseconds of
    /// the caller's monotonic clock) and that saw no command for KATO either (traffic-based
    /// keep-alive, CTRATT.TBKAS, as the Identify data says): CSTS.CFS set, queues dead (their next
    /// [`Queue::submit`] says [`Outcome::Disconnect`]). Returns the failed controller ids.
    pub fn check_keep_alive(&self, now: u64) -> Vec<u16> {
        let mut t = self.table.lock();
        let mut expired = Vec::new();
        t.ctrls.retain(|c| {
            let mut a = c.admin.lock();
            let active = c.activity.load(Ordering::Relaxed).saturating_add(a.kato_ms);
            let dead = a.deadline.is_some_and(|d| now > d && now > active);
            if dead {
                a.csts |= Csts::CFS;
                a.csts &= !Csts::RDY;
                drop(a);
                c.kill();
                expired.push(c.cntlid);
            }
            !dead
        });
        expired
    }

    /// Live controllers.
    pub fn controller_count(&self) -> usize {
        self.table.lock().ctrls.len()
    }

    /// The live controller `cntlid`.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.table
            .lock()
            .ctrls
            .iter()
            .find(|c| c.cntlid == cntlid)
            .cloned()
    }

    /// Queues an asynchronous event (completion DW0, see [`admin::async_event_result`]) for
    /// controller `cntlid`; its admin queue answers a held request with it
    /// ([`Queue::take_events`]). False if there is no such controller.
    pub fn post_event(&self, cntlid: u16, dw0: u32) -> bool {
        match self.controller(cntlid) {
            Some(c) => {
                c.admin.lock().events.push_back(dw0);
                true
            }
            None => false,
        }
    }

    fn find_subsystem(&self, nqn: &str) -> Option<&Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN {
            return Some(&self.discovery);
        }
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    fn create_controller(
        &self,
        subsys: &Arc<Subsystem>,
        data: &ConnectData,
        kato: u32,
        now: u64,
    ) -> Option<Arc<Controller>> {
        let mut t = self.table.lock();
        let mut id = t.next;
        let mut tries = 0u32;
        while t.ctrls.iter().any(|c| c.cntlid == id) {
            id = if id >= CNTLID_MAX { 1 } else { id + 1 };
            tries += 1;
            if tries > u32::from(CNTLID_MAX) {
                return None;
            }
        }
        t.next = if id >= CNTLID_MAX { 1 } else { id + 1 };
        // KATO is rounded up to whole seconds; a discovery controller without one gets 120 s.
        let kato_ms = match u64::from(kato).div_ceil(1000) * 1000 {
            0 if subsys.discovery => DISCOVERY_KATO_MS,
            v => v,
        };
        let c = Arc::new(Controller {
            cntlid: id,
            subsys: subsys.clone(),
            hostnqn: data.hostnqn.clone(),
            hostid: data.hostid,
            state: AtomicU8::new(0),
            activity: AtomicU64::new(now),
            admin: spin::Mutex::new(AdminState {
                cc: 0,
                csts: 0,
                kato_ms,
                deadline: (kato_ms != 0).then_some(now.saturating_add(kato_ms)),
                aen_cfg: 0,
                aers: Vec::new(),
                events: VecDeque::new(),
                error_count: 0,
                errors: VecDeque::new(),
                io_queues: vec![None; usize::from(self.config.max_io_queues)],
                retired: [0; 4],
            }),
        });
        t.ctrls.push(c.clone());
        Some(c)
    }

    fn remove_controller(&self, cntlid: u16) {
        self.table.lock().ctrls.retain(|c| c.cntlid != cntlid);
    }

    fn discovery_log(&self, hostnqn: &str) -> Vec<u8> {
        let mut entries = Vec::new();
        for p in &self.config.ports {
            let entry = |subtype, nqn: &str| DiscoveryEntry {
                trtype: p.trtype,
                adrfam: p.adrfam,
                subtype,
                treq: p.treq,
                portid: p.portid,
                cntlid: CNTLID_DYNAMIC,
                asqsz: rdma::ADMIN_QUEUE_DEPTH,
                eflags: 0,
                trsvcid: p.trsvcid.clone(),
                subnqn: nqn.into(),
                traddr: p.traddr.clone(),
                tsas: RdmaTsas::DEFAULT,
            };
            entries.push(entry(discovery::subtype::CURRENT_DISCOVERY, DISCOVERY_NQN));
            for s in self.subsystems.iter().filter(|s| s.host_allowed(hostnqn)) {
                entries.push(entry(discovery::subtype::NVME, &s.nqn));
            }
        }
        discovery::encode_log(self.genctr.load(Ordering::Relaxed), &entries)
    }
}

/// A response to send: optional controller-to-host data first, then the completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The completion queue entry.
    pub cqe: Cqe,
    /// Where to RDMA WRITE [`Response::data`] before sending the completion.
    pub remote: Option<RemoteBuffer>,
    /// Controller-to-host data (empty when there is none or the command failed).
    pub data: Vec<u8>,
    /// Send the completion with invalidate of this remote key.
    pub invalidate: Option<u32>,
    /// The queue is finished after this response (Disconnect): disconnect once it is sent.
    pub close: bool,
}

impl Response {
    /// The 16 bytes to send.
    pub fn cqe_bytes(&self) -> [u8; 16] {
        self.cqe.encode()
    }
}

/// A command waiting for its host-to-controller data.
pub struct Request {
    sqe: Sqe,
    cmd: Cmd,
    remote: RemoteBuffer,
    data: Vec<u8>,
    invalidate: Option<u32>,
}

impl Request {
    /// The command.
    pub fn sqe(&self) -> &Sqe {
        &self.sqe
    }

    /// Where the data lies on the host.
    pub fn remote(&self) -> RemoteBuffer {
        self.remote
    }

    /// The buffer to fill (exactly [`RemoteBuffer::len`] bytes).
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

/// What the transport does next for a capsule.
pub enum Outcome {
    /// Read the host's data, then call [`Queue::data_fetched`].
    Fetch(Request),
    /// Send this response.
    Respond(Response),
    /// Nothing to send now.
    Held,
    /// The queue is dead: disconnect it.
    Disconnect,
}

struct Conn {
    ctrl: Arc<Controller>,
    qid: u16,
}

/// One queue (one RDMA connection) of the target.
pub struct Queue {
    target: Arc<Target>,
    cm: ConnectRequest,
    conn: Option<Conn>,
    sq_size: u32,
    sq_head: u32,
    sq_flow: bool,
    inline: usize,
    stats: Arc<QueueStats>,
    closed: bool,
    /// Data buffers handed back by the transport ([`Queue::recycle`]), used again for read
    /// data and fetched or in-capsule write data: no allocation or zeroing per I/O once warm.
    spare: Vec<Vec<u8>>,
}

/// Data buffers a queue keeps for reuse at most.
const MAX_SPARE: usize = 32;

/// A decoded command with what it needs.
enum Cmd {
    Connect(Connect),
    PropertyGet(PropertyGet),
    PropertySet(PropertySet),
    Disconnect,
    Identify(Identify),
    GetLogPage(GetLogPage),
    SetFeatures(SetFeatures),
    GetFeatures(GetFeatures),
    KeepAlive,
    AsyncEvent,
    Read(ReadWrite, Arc<dyn Namespace>),
    Write(ReadWrite, Arc<dyn Namespace>),
    Flush(Arc<dyn Namespace>),
    WriteZeroes(ReadWrite, Arc<dyn Namespace>),
    Dsm(DatasetManagement, Arc<dyn Namespace>),
}

/// The data a command moves.
enum Xfer {
    None,
    /// Host to controller, a length in `min..=max`.
    In(usize, usize),
    /// Controller to host, exactly this length.
    Out(usize),
}

/// How a command fails: status, and (for Connect) the DW0 detail.
struct Fail(Status, u32);

impl From<Status> for Fail {
    fn from(s: Status) -> Fail {
        Fail(s, 0)
    }
}

fn connect_fail(s: Status, loc: ConnectErrorLocation) -> Fail {
    Fail(s.dnr(), loc.to_dw0())
}

impl Queue {
    /// The queue id from the connect request.
    pub fn qid(&self) -> u16 {
        self.cm.qid
    }

    /// The controller this queue belongs to, once connected.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.conn.as_ref().map(|c| &c.ctrl)
    }

    /// Whether Connect succeeded on this queue.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Whether the queue can go on (not closed, controller not failed).
    pub fn is_live(&self) -> bool {
        !self.closed && self.conn.as_ref().is_none_or(|c| !c.ctrl.is_dead())
    }

    /// In-capsule data bytes this queue accepts after the SQE (receive buffers of the
    /// transport: 64 bytes plus this).
    pub fn inline_data_size(&self) -> usize {
        self.inline
    }

    /// Hands a data buffer back (a sent [`Response::data`]) for use by a later command. Its
    /// contents do not matter: a buffer taken from here is entirely overwritten (namespace
    /// read, fetched or in-capsule data) before anything reads it.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && buf.capacity() > 0 {
            self.spare.push(buf);
        }
    }

    /// A buffer of `len` bytes, from the spare ones when there is one (not zeroed: the
    /// caller overwrites all of it).
    fn take_buf(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Handles one received capsule (SQE plus any in-capsule data). `now` is the caller's
    /// monotonic clock in milliseconds.
    pub fn submit(&mut self, capsule: &[u8], now: u64) -> Outcome {
        let Some(sqe) = Sqe::decode(capsule) else {
            // A capsule shorter than an SQE is a fatal transport error.
            return Outcome::Disconnect;
        };
        if !self.is_live() {
            return Outcome::Disconnect;
        }
        if let Some(c) = &self.conn {
            c.ctrl.activity.fetch_max(now, Ordering::Relaxed);
        }
        self.sq_head = (self.sq_head + 1) % self.sq_size.max(1);
        let icd = &capsule[SQE_SIZE..];
        match self.prepare(&sqe, icd) {
            Err(f) => Outcome::Respond(self.fail(&sqe, f)),
            Ok((cmd, Xfer::In(..), Some(remote), inval)) => Outcome::Fetch(Request {
                sqe,
                cmd,
                remote,
                data: self.take_buf(remote.len as usize),
                invalidate: inval,
            }),
            Ok((cmd, xfer, remote, inval)) => {
                let data_in = match xfer {
                    Xfer::In(..) => {
                        // In-capsule: prepare checked the bounds.
                        let Sgl::InCapsule { offset, len } = sqe.sgl else {
                            return Outcome::Respond(
                                self.fail(&sqe, Status::INTERNAL_ERROR.dnr().into()),
                            );
                        };
                        let off = offset as usize;
                        let mut b = self.take_buf(len as usize);
                        b.copy_from_slice(&icd[off..off + len as usize]);
                        b
                    }
                    _ => Vec::new(),
                };
                self.execute(sqe, cmd, data_in, remote, inval, now)
            }
        }
    }

    /// Continues a [`Outcome::Fetch`]: `ok` says whether the RDMA READ completed. A failed
    /// read answers Data Transfer Error.
    pub fn data_fetched(&mut self, req: Request, ok: bool, now: u64) -> Outcome {
        if !self.is_live() {
            return Outcome::Disconnect;
        }
        if !ok {
            let mut r = self.fail(&req.sqe, Status::DATA_TRANSFER_ERROR.into());
            r.invalidate = req.invalidate;
            return Outcome::Respond(r);
        }
        self.execute(req.sqe, req.cmd, req.data, None, req.invalidate, now)
    }

    /// Completions for held Asynchronous Event Requests that have an event to report.
    pub fn take_events(&mut self) -> Vec<Response> {
        let Some(conn) = &self.conn else {
            return Vec::new();
        };
        if conn.qid != 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        let ctrl = conn.ctrl.clone();
        let mut a = ctrl.admin.lock();
        while !a.aers.is_empty() && !a.events.is_empty() {
            let cid = a.aers.remove(0);
            let dw0 = a.events.pop_front().unwrap_or(0);
            out.push(self.response(cid, Status::SUCCESS, u64::from(dw0)));
        }
        out
    }

    /// The connection is gone (or is being torn down): an admin queue takes its controller
    /// with it (held Asynchronous Event Requests come back failed with Internal Error, for a
    /// transport that can still send them); an I/O queue frees its queue id.
    pub fn close(&mut self) -> Vec<Response> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let Some(conn) = self.conn.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if conn.qid == 0 {
            let aers = core::mem::take(&mut conn.ctrl.admin.lock().aers);
            for cid in aers {
                out.push(self.response(cid, Status::INTERNAL_ERROR.dnr(), 0));
            }
            conn.ctrl.kill();
            self.target.remove_controller(conn.ctrl.cntlid);
        } else {
            let mut a = conn.ctrl.admin.lock();
            if let Some(slot) = a.io_queues.get_mut(usize::from(conn.qid) - 1) {
                *slot = None;
            }
            let s = self.stats.snapshot();
            for (r, v) in a.retired.iter_mut().zip(s) {
                *r = r.wrapping_add(v);
            }
        }
        out
    }

    fn response(&self, cid: u16, status: Status, result: u64) -> Response {
        Response {
            cqe: Cqe {
                result,
                sqhd: if self.sq_flow {
                    self.sq_head as u16
                } else {
                    0xFFFF
                },
                sqid: self.cm.qid,
                cid,
                status,
                phase: false,
            },
            remote: None,
            data: Vec::new(),
            invalidate: None,
            close: false,
        }
    }

    fn fail(&self, sqe: &Sqe, f: Fail) -> Response {
        let mut status = f.0;
        if let Some(conn) = &self.conn {
            let lba = if sqe.opcode == io::opcode::READ || sqe.opcode == io::opcode::WRITE {
                u64::from(sqe.cdw10) | (u64::from(sqe.cdw11) << 32)
            } else {
                0
            };
            conn.ctrl
                .log_error(self.cm.qid, sqe.cid, status, sqe.nsid, lba);
            status = status.more();
        }
        self.response(sqe.cid, status, u64::from(f.1))
    }

    /// Checks the command and its SGL; decides the data movement.
    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        sqe: &Sqe,
        icd: &[u8],
    ) -> Result<(Cmd, Xfer, Option<RemoteBuffer>, Option<u32>), Fail> {
        if sqe.flags & FLAGS_FUSE_MASK != 0 || sqe.flags & FLAGS_PSDT_MASK != FLAGS_PSDT_SGL {
            return Err(Status::INVALID_FIELD.dnr().into());
        }
        let (cmd, xfer) = self.classify(sqe)?;
        let max = self.max_transfer();
        let (remote, inval) = match (&sqe.sgl, &xfer) {
            (Sgl::Other(raw), _) => {
                return Err(match raw[15] >> 4 {
                    0 | 4 => Status::INVALID_FIELD.dnr(),
                    _ => Status::SGL_INVALID_TYPE.dnr(),
                }
                .into());
            }
            (Sgl::InCapsule { len, .. }, Xfer::None) if *len == 0 => (None, None),
            (Sgl::InCapsule { .. }, Xfer::None | Xfer::Out(_)) => {
                return Err(Status::INVALID_FIELD.dnr().into());
            }
            (Sgl::InCapsule { offset, len }, Xfer::In(min, maxlen)) => {
                let end = offset.checked_add(u64::from(*len));
                if end.is_none_or(|e| e > self.inline as u64 || e > icd.len() as u64) {
                    return Err(Status::SGL_INVALID_OFFSET.dnr().into());
                }
                if (*len as usize) < *min || *len as usize > *maxlen {
                    return Err(Status::SGL_INVALID_DATA_LENGTH.dnr().into());
                }
                (None, None)
            }
            (
                Sgl::Keyed {
                    addr,
                    len,
                    key,
                    invalidate,
                },
                x,
            ) => {
                let l = *len as usize;
                let ok = match x {
                    Xfer::None => l == 0,
                    Xfer::In(min, maxlen) => l >= *min && l <= *maxlen,
                    Xfer::Out(n) => l == *n,
                };
                if !ok {
                    return Err(Status::SGL_INVALID_DATA_LENGTH.dnr().into());
                }
                if l > max {
                    return Err(Status::INVALID_FIELD.dnr().into());
                }
                let inval = (*invalidate && *len != 0).then_some(*key);
                let remote = (*len != 0).then_some(RemoteBuffer {
                    addr: *addr,
                    len: *len,
                    key: *key,
                });
                (remote, inval)
            }
        };
        Ok((cmd, xfer, remote, inval))
    }

    fn max_transfer(&self) -> usize {
        4096usize << self.target.config.mdts.min(20)
    }

    /// Which command, and what data it moves.
    fn classify(&self, sqe: &Sqe) -> Result<(Cmd, Xfer), Fail> {
        let connected = self.conn.as_ref();
        if sqe.opcode == fabrics::OPCODE_FABRICS {
            let admin = self.cm.qid == 0;
            return match sqe.fctype() {
                fabrics::FCTYPE_CONNECT => {
                    if connected.is_some() {
                        return Err(Status::CONNECT_CONTROLLER_BUSY.dnr().into());
                    }
                    let len = fabrics::CONNECT_DATA_LEN;
                    Ok((Cmd::Connect(Connect::from_sqe(sqe)), Xfer::In(len, len)))
                }
                _ if connected.is_none() => Err(Status::INVALID_OPCODE.dnr().into()),
                fabrics::FCTYPE_PROPERTY_GET if admin => {
                    Ok((Cmd::PropertyGet(PropertyGet::from_sqe(sqe)), Xfer::None))
                }
                fabrics::FCTYPE_PROPERTY_SET if admin => {
                    Ok((Cmd::PropertySet(PropertySet::from_sqe(sqe)), Xfer::None))
                }
                fabrics::FCTYPE_DISCONNECT => Ok((Cmd::Disconnect, Xfer::None)),
                _ => Err(Status::INVALID_OPCODE.dnr().into()),
            };
        }
        let Some(conn) = connected else {
            return Err(Status::INVALID_OPCODE.dnr().into());
        };
        if !conn.ctrl.is_ready() {
            return Err(Status::COMMAND_SEQUENCE_ERROR.dnr().into());
        }
        if conn.qid == 0 {
            self.classify_admin(sqe, &conn.ctrl)
        } else {
            self.classify_io(sqe, &conn.ctrl)
        }
    }

    fn classify_admin(&self, sqe: &Sqe, ctrl: &Controller) -> Result<(Cmd, Xfer), Fail> {
        let disc = ctrl.subsys.discovery;
        let invalid = || Fail::from(Status::INVALID_FIELD.dnr());
        match sqe.opcode {
            admin::opcode::IDENTIFY => {
                let id = Identify::from_sqe(sqe);
                let ok = if disc {
                    id.cns == cns::CONTROLLER
                } else {
                    matches!(
                        id.cns,
                        cns::NAMESPACE
                            | cns::CONTROLLER
                            | cns::ACTIVE_NS_LIST
                            | cns::NS_DESC_LIST
                            | cns::CTRL_CSI
                    )
                };
                if !ok {
                    return Err(invalid());
                }
                Ok((Cmd::Identify(id), Xfer::Out(IDENTIFY_LEN)))
            }
            admin::opcode::GET_LOG_PAGE => {
                let g = GetLogPage::from_sqe(sqe);
                let ok = if disc {
                    g.lid == lid::DISCOVERY
                } else {
                    matches!(
                        g.lid,
                        lid::ERROR | lid::SMART | lid::FIRMWARE_SLOT | lid::CHANGED_NS
                    )
                };
                if !ok || g.lpo & 3 != 0 || g.numd == 0 || g.len() > self.max_transfer() as u64 {
                    return Err(invalid());
                }
                Ok((Cmd::GetLogPage(g), Xfer::Out(g.len() as usize)))
            }
            admin::opcode::SET_FEATURES => {
                let f = SetFeatures::from_sqe(sqe);
                if disc && !matches!(f.fid, fid::KATO | fid::ASYNC_EVENT) {
                    return Err(invalid());
                }
                Ok((Cmd::SetFeatures(f), Xfer::None))
            }
            admin::opcode::GET_FEATURES => {
                let f = GetFeatures::from_sqe(sqe);
                if disc && !matches!(f.fid, fid::KATO | fid::ASYNC_EVENT) {
                    return Err(invalid());
                }
                let x = if f.fid == fid::HOST_ID {
                    if f.cdw11 & 1 == 0 {
                        return Err(invalid());
                    }
                    Xfer::Out(16)
                } else {
                    Xfer::None
                };
                Ok((Cmd::GetFeatures(f), x))
            }
            admin::opcode::KEEP_ALIVE => Ok((Cmd::KeepAlive, Xfer::None)),
            admin::opcode::ASYNC_EVENT => Ok((Cmd::AsyncEvent, Xfer::None)),
            _ => Err(Status::INVALID_OPCODE.dnr().into()),
        }
    }

    fn classify_io(&self, sqe: &Sqe, ctrl: &Controller) -> Result<(Cmd, Xfer), Fail> {
        if !matches!(
            sqe.opcode,
            io::opcode::FLUSH
                | io::opcode::WRITE
                | io::opcode::READ
                | io::opcode::WRITE_ZEROES
                | io::opcode::DSM
        ) {
            return Err(Status::INVALID_OPCODE.dnr().into());
        }
        let Some(slot) = ctrl.subsys.namespace(sqe.nsid) else {
            return Err(Status::INVALID_NS.dnr().into());
        };
        let ns = slot.ns.clone();
        if !ns.is_ready() {
            return Err(Status::NS_NOT_READY.into());
        }
        let bs = u64::from(ns.block_size());
        let range_ok = |slba: u64, blocks: u64| {
            slba.checked_add(blocks)
                .is_some_and(|end| end <= ns.block_count())
        };
        match sqe.opcode {
            io::opcode::FLUSH => Ok((Cmd::Flush(ns), Xfer::None)),
            io::opcode::READ | io::opcode::WRITE => {
                let rw = ReadWrite::from_sqe(sqe);
                let len = rw.blocks() * bs;
                if len > self.max_transfer() as u64 {
                    return Err(Status::INVALID_FIELD.dnr().into());
                }
                if !range_ok(rw.slba, rw.blocks()) {
                    return Err(Status::LBA_RANGE.dnr().into());
                }
                let len = len as usize;
                if sqe.opcode == io::opcode::READ {
                    Ok((Cmd::Read(rw, ns), Xfer::Out(len)))
                } else {
                    if ns.is_read_only() {
                        return Err(Status::WRITE_TO_READ_ONLY.dnr().into());
                    }
                    Ok((Cmd::Write(rw, ns), Xfer::In(len, len)))
                }
            }
            io::opcode::WRITE_ZEROES => {
                let rw = ReadWrite::from_sqe(sqe);
                if !range_ok(rw.slba, rw.blocks()) {
                    return Err(Status::LBA_RANGE.dnr().into());
                }
                Ok((Cmd::WriteZeroes(rw, ns), Xfer::None))
            }
            _ => {
                let d = DatasetManagement::from_sqe(sqe);
                if sqe.cdw10 >> 8 != 0 {
                    return Err(Status::INVALID_FIELD.dnr().into());
                }
                let min = d.ranges() * DSM_RANGE_LEN;
                Ok((
                    Cmd::Dsm(d, ns),
                    Xfer::In(min, DSM_MAX_RANGES * DSM_RANGE_LEN),
                ))
            }
        }
    }

    fn execute(
        &mut self,
        sqe: Sqe,
        cmd: Cmd,
        data_in: Vec<u8>,
        remote: Option<RemoteBuffer>,
        invalidate: Option<u32>,
        now: u64,
    ) -> Outcome {
        let r = match cmd {
            Cmd::Connect(c) => self
                .exec_connect(&c, &data_in, now)
                .map(|v| (v, Vec::new())),
            Cmd::Disconnect => {
                let mut r = self.response(sqe.cid, Status::SUCCESS, 0);
                r.close = true;
                r.invalidate = invalidate;
                return Outcome::Respond(r);
            }
            Cmd::AsyncEvent => {
                let Some(conn) = &self.conn else {
                    return Outcome::Disconnect;
                };
                let mut a = conn.ctrl.admin.lock();
                if a.aers.len() >= MAX_AERS {
                    drop(a);
                    Err(Status::AER_LIMIT_EXCEEDED.dnr().into())
                } else {
                    a.aers.push(sqe.cid);
                    return Outcome::Held;
                }
            }
            Cmd::Read(rw, ns) => self.exec_read(&rw, &*ns),
            Cmd::Write(rw, ns) => self.exec_write(&rw, &*ns, &data_in),
            Cmd::Flush(ns) => ns
                .flush()
                .map(|_| (0, Vec::new()))
                .map_err(|e| e.status().into()),
            Cmd::WriteZeroes(rw, ns) => ns
                .write_zeroes(rw.slba, rw.blocks())
                .map(|_| (0, Vec::new()))
                .map_err(|e| e.status().into()),
            Cmd::Dsm(d, ns) => self.exec_dsm(&d, &*ns, &data_in),
            other => self.exec_admin(other, now),
        };
        self.recycle(data_in);
        let out = match r {
            Ok((result, data)) => {
                let mut resp = self.response(sqe.cid, Status::SUCCESS, result);
                if !data.is_empty() {
                    resp.remote = remote;
                    resp.data = data;
                }
                resp
            }
            Err(f) => self.fail(&sqe, f),
        };
        let mut out = out;
        out.invalidate = invalidate;
        Outcome::Respond(out)
    }

    fn exec_connect(&mut self, c: &Connect, data: &[u8], now: u64) -> Result<u64, Fail> {
        if c.recfmt != 0 {
            return Err(Status::CONNECT_INCOMPATIBLE_FORMAT.dnr().into());
        }
        let d = match ConnectData::decode(data) {
            Ok(d) => d,
            Err(ConnectDataError::Length) => {
                return Err(Status::SGL_INVALID_DATA_LENGTH.dnr().into());
            }
            Err(ConnectDataError::BadNqn(loc)) => {
                return Err(connect_fail(Status::CONNECT_INVALID_PARAMETERS, loc));
            }
        };
        let invalid = Status::CONNECT_INVALID_PARAMETERS;
        if c.qid != self.cm.qid {
            return Err(connect_fail(invalid, ConnectErrorLocation::QID));
        }
        let max_sq = if c.qid == 0 {
            rdma::ADMIN_QUEUE_DEPTH - 1
        } else {
            self.target.config.max_queue_depth.saturating_sub(1)
        };
        if c.sqsize == 0 || c.sqsize > max_sq {
            return Err(connect_fail(invalid, ConnectErrorLocation::SQSIZE));
        }
        let ctrl = if c.qid == 0 {
            if d.cntlid != CNTLID_DYNAMIC {
                return Err(connect_fail(invalid, ConnectErrorLocation::CNTLID));
            }
            let Some(subsys) = self.target.find_subsystem(&d.subnqn).cloned() else {
                return Err(connect_fail(invalid, ConnectErrorLocation::SUBNQN));
            };
            if !subsys.host_allowed(&d.hostnqn) {
                return Err(connect_fail(
                    Status::CONNECT_INVALID_HOST,
                    ConnectErrorLocation::HOSTNQN,
                ));
            }
            let Some(ctrl) = self.target.create_controller(&subsys, &d, c.kato, now) else {
                return Err(Status::CONNECT_CONTROLLER_BUSY.dnr().into());
            };
            ctrl
        } else {
            let found = self
                .target
                .controller(d.cntlid)
                .filter(|x| x.subsys.nqn == d.subnqn && x.hostnqn == d.hostnqn && !x.is_dead());
            let Some(ctrl) = found else {
                return Err(connect_fail(invalid, ConnectErrorLocation::SUBNQN));
            };
            if ctrl.subsys.discovery || c.qid > self.target.config.max_io_queues {
                return Err(connect_fail(invalid, ConnectErrorLocation::QID));
            }
            let mut a = ctrl.admin.lock();
            let slot = &mut a.io_queues[usize::from(c.qid) - 1];
            if slot.is_some() {
                return Err(Status::COMMAND_SEQUENCE_ERROR.dnr().into());
            }
            *slot = Some(self.stats.clone());
            drop(a);
            ctrl
        };
        self.sq_size = u32::from(c.sqsize) + 1;
        self.sq_head %= self.sq_size;
        self.sq_flow = c.cattr & CATTR_DISABLE_SQ_FLOW == 0;
        let cntlid = ctrl.cntlid;
        self.conn = Some(Conn { ctrl, qid: c.qid });
        // DW0: CNTLID; AUTHREQ (17:16) stays 0.
        Ok(u64::from(cntlid))
    }

    fn exec_admin(&mut self, cmd: Cmd, now: u64) -> Result<(u64, Vec<u8>), Fail> {
        let Some(conn) = &self.conn else {
            return Err(Status::INVALID_OPCODE.dnr().into());
        };
        let ctrl = conn.ctrl.clone();
        let invalid = || Fail::from(Status::INVALID_FIELD.dnr());
        match cmd {
            Cmd::PropertyGet(p) => {
                let a = ctrl.admin.lock();
                let v = match (p.offset, p.size8) {
                    (prop::CAP, true) => self.target.cap().0,
                    (prop::VS, false) => u64::from(fabrics::VS_1_3),
                    (prop::CC, false) => u64::from(a.cc),
                    (prop::CSTS, false) => u64::from(a.csts),
                    _ => return Err(invalid()),
                };
                Ok((v, Vec::new()))
            }
            Cmd::PropertySet(p) => {
                if p.offset != prop::CC || p.size8 {
                    return Err(invalid());
                }
                self.update_cc(&ctrl, p.value as u32, now);
                Ok((0, Vec::new()))
            }
            Cmd::Identify(id) => self.exec_identify(&ctrl, &id).map(|d| (0, d)),
            Cmd::GetLogPage(g) => self.exec_get_log(&ctrl, &g).map(|d| (0, d)),
            Cmd::SetFeatures(f) => {
                if f.save {
                    return Err(Status::FEATURE_NOT_SAVEABLE.dnr().into());
                }
                let mut a = ctrl.admin.lock();
                match f.fid {
                    fid::NUM_QUEUES => {
                        if f.cdw11 & 0xFFFF == 0xFFFF || f.cdw11 >> 16 == 0xFFFF {
                            return Err(invalid());
                        }
                        let n = self.target.config.max_io_queues;
                        Ok((u64::from(admin::num_queues_value(n, n)), Vec::new()))
                    }
                    fid::KATO => {
                        a.kato_ms = u64::from(f.cdw11).div_ceil(1000) * 1000;
                        a.deadline = (a.kato_ms != 0).then_some(now.saturating_add(a.kato_ms));
                        Ok((0, Vec::new()))
                    }
                    fid::ASYNC_EVENT => {
                        if f.cdw11 & !admin::AEN_CFG_ALLOWED != 0 {
                            return Err(invalid());
                        }
                        a.aen_cfg = f.cdw11;
                        Ok((0, Vec::new()))
                    }
                    fid::HOST_ID => Err(Status::COMMAND_SEQUENCE_ERROR.dnr().into()),
                    _ => Err(invalid()),
                }
            }
            Cmd::GetFeatures(f) => {
                let a = ctrl.admin.lock();
                let v: u32 = match f.fid {
                    fid::NUM_QUEUES => {
                        let n = self.target.config.max_io_queues;
                        admin::num_queues_value(n, n)
                    }
                    fid::KATO => a.kato_ms as u32,
                    fid::ASYNC_EVENT => a.aen_cfg,
                    fid::VOLATILE_WC => u32::from(vwc(&ctrl.subsys)),
                    fid::ARBITRATION
                    | fid::POWER_MGMT
                    | fid::ERROR_RECOVERY
                    | fid::IRQ_COALESCE
                    | fid::IRQ_CONFIG
                    | fid::WRITE_ATOMIC => 0,
                    fid::HOST_ID => return Ok((0, ctrl.hostid.to_vec())),
                    _ => return Err(invalid()),
                };
                Ok((u64::from(v), Vec::new()))
            }
            Cmd::KeepAlive => {
                let mut a = ctrl.admin.lock();
                if a.kato_ms == 0 {
                    return Err(Status::KEEP_ALIVE_INVALID.into());
                }
                a.deadline = Some(now.saturating_add(a.kato_ms));
                Ok((0, Vec::new()))
            }
            _ => Err(Status::INVALID_OPCODE.dnr().into()),
        }
    }

    fn update_cc(&self, ctrl: &Controller, new: u32, now: u64) {
        let mut a = ctrl.admin.lock();
        let old = Cc(a.cc);
        let new = Cc(new);
        a.cc = new.0;
        if new.en() && !old.en() {
            let entry_sizes_ok = ctrl.subsys.discovery || (new.iosqes() == 6 && new.iocqes() == 4);
            if !entry_sizes_ok || new.mps() != 0 || new.ams() != 0 || new.css() != 0 {
                a.csts = Csts::CFS;
            } else {
                a.csts = Csts::RDY;
                if a.kato_ms != 0 {
                    a.deadline = Some(now.saturating_add(a.kato_ms));
                }
                ctrl.set_ready(true);
            }
        }
        if !new.en() && old.en() {
            a.csts &= !Csts::RDY;
            a.cc = 0;
            ctrl.set_ready(false);
        }
        if new.shn() != 0 && old.shn() == 0 {
            a.csts &= !Csts::RDY;
            a.cc = 0;
            a.csts |= Csts::SHST_COMPLETE;
            ctrl.set_ready(false);
        }
        if new.shn() == 0 && old.shn() != 0 {
            a.csts &= !Csts::SHST_MASK;
        }
    }

    fn exec_identify(&self, ctrl: &Controller, id: &Identify) -> Result<Vec<u8>, Fail> {
        let subsys = &ctrl.subsys;
        let invalid_ns = || Fail::from(Status::INVALID_NS.dnr());
        match id.cns {
            cns::CONTROLLER => Ok(self.identify_controller(ctrl).encode().to_vec()),
            cns::NAMESPACE => {
                if id.nsid == 0 || id.nsid == admin::NSID_ALL {
                    return Err(invalid_ns());
                }
                // An inactive NSID answers a zeroed structure.
                let Some(slot) = subsys.namespace(id.nsid) else {
                    return Ok(vec![0u8; IDENTIFY_LEN]);
                };
                let ns = &slot.ns;
                let n = IdentifyNamespace {
                    nsze: ns.block_count(),
                    ncap: ns.block_count(),
                    nuse: ns.block_count(),
                    nmic: 1,
                    nsattr: u8::from(ns.is_read_only()),
                    nguid: slot.nguid.unwrap_or_default(),
                    lbads: ns.block_size().trailing_zeros() as u8,
                    ..Default::default()
                };
                Ok(n.encode().to_vec())
            }
            cns::ACTIVE_NS_LIST => {
                if id.nsid >= 0xFFFF_FFFE {
                    return Err(invalid_ns());
                }
                let list: Vec<u32> = subsys
                    .namespaces
                    .iter()
                    .map(|s| s.nsid)
                    .filter(|&n| n > id.nsid)
                    .collect();
                Ok(admin::encode_ns_list(&list).to_vec())
            }
            cns::NS_DESC_LIST => {
                let Some(slot) = subsys.namespace(id.nsid) else {
                    return Err(invalid_ns());
                };
                let mut list = Vec::new();
                if let Some(u) = slot.uuid {
                    list.push(NsDescriptor {
                        nidt: admin::nidt::UUID,
                        value: u.to_vec(),
                    });
                }
                if let Some(g) = slot.nguid {
                    list.push(NsDescriptor {
                        nidt: admin::nidt::NGUID,
                        value: g.to_vec(),
                    });
                }
                list.push(NsDescriptor {
                    nidt: admin::nidt::CSI,
                    value: vec![0],
                });
                Ok(admin::encode_ns_descriptors(&list).to_vec())
            }
            cns::CTRL_CSI if id.csi == 0 => Ok(vec![0u8; IDENTIFY_LEN]),
            _ => Err(Status::INVALID_FIELD.dnr().into()),
        }
    }

    /// The Identify Controller data of `ctrl`.
    fn identify_controller(&self, ctrl: &Controller) -> IdentifyController {
        let cfg = &self.target.config;
        let s = &ctrl.subsys;
        let inline = cfg.inline_data_size;
        let mut id = IdentifyController {
            sn: s.serial.clone(),
            mn: s.model.clone(),
            fr: cfg.firmware_revision.clone(),
            rab: 6,
            cmic: 0x02,
            mdts: cfg.mdts,
            cntlid: ctrl.cntlid,
            ver: fabrics::VS_1_3,
            cntrltype: admin::CNTRLTYPE_IO,
            // TBKAS: any command restarts the keep-alive timer
            ctratt: admin::CTRATT_TBKAS,
            acl: 3,
            aerl: (MAX_AERS - 1) as u8,
            frmw: 0x03,
            lpa: 0x04,
            elpe: (ERROR_LOG_ENTRIES - 1) as u8,
            kas: cfg.kas,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: cfg.max_queue_depth,
            nn: s.namespaces.last().map_or(0, |n| n.nsid),
            oncs: admin::ONCS_DSM | admin::ONCS_WRITE_ZEROES,
            vwc: u8::from(vwc(s)),
            sgls: admin::SGLS_KEYED | if inline > 0 { admin::SGLS_OFFSET } else { 0 },
            subnqn: s.nqn.clone(),
            ioccsz: (SQE_SIZE as u32 + inline) / 16,
            iorcsz: 1,
            icdoff: 0,
            msdbd: 1,
            ofcs: 1,
            ..Default::default()
        };
        if s.discovery {
            id.cntrltype = admin::CNTRLTYPE_DISCOVERY;
            id.nn = 0;
            id.oncs = 0;
            id.vwc = 0;
            id.cmic = 0;
        }
        id
    }

    fn exec_get_log(&self, ctrl: &Controller, g: &GetLogPage) -> Result<Vec<u8>, Fail> {
        let log: Vec<u8> = match g.lid {
            lid::DISCOVERY => self.target.discovery_log(&ctrl.hostnqn),
            lid::ERROR => {
                let a = ctrl.admin.lock();
                let mut v = Vec::with_capacity(ERROR_LOG_ENTRIES * admin::ERROR_LOG_ENTRY_LEN);
                for e in &a.errors {
                    v.extend_from_slice(&e.encode());
                }
                v.resize(ERROR_LOG_ENTRIES * admin::ERROR_LOG_ENTRY_LEN, 0);
                v
            }
            lid::SMART => {
                let a = ctrl.admin.lock();
                let mut tot = a.retired;
                for q in a.io_queues.iter().flatten() {
                    for (t, v) in tot.iter_mut().zip(q.snapshot()) {
                        *t = t.wrapping_add(v);
                    }
                }
                // Data units: thousands of 512-byte units, rounded up.
                let units = |bytes: u64| u128::from(bytes.div_ceil(512).div_ceil(1000));
                SmartLog {
                    avail_spare: 100,
                    spare_thresh: 10,
                    host_reads: u128::from(tot[0]),
                    host_writes: u128::from(tot[1]),
                    data_units_read: units(tot[2]),
                    data_units_written: units(tot[3]),
                    num_err_log_entries: u128::from(a.error_count),
                    ..Default::default()
                }
                .encode()
                .to_vec()
            }
            lid::FIRMWARE_SLOT => {
                admin::encode_firmware_slot_log(1, &self.target.config.firmware_revision).to_vec()
            }
            lid::CHANGED_NS => vec![0u8; admin::CHANGED_NS_LOG_LEN],
            _ => return Err(Status::INVALID_FIELD.dnr().into()),
        };
        let off = usize::try_from(g.lpo).unwrap_or(usize::MAX);
        if off > log.len() {
            return Err(Status::INVALID_FIELD.dnr().into());
        }
        let mut out = vec![0u8; g.len() as usize];
        let n = (log.len() - off).min(out.len());
        out[..n].copy_from_slice(&log[off..off + n]);
        Ok(out)
    }

    fn exec_read(&mut self, rw: &ReadWrite, ns: &dyn Namespace) -> Result<(u64, Vec<u8>), Fail> {
        let len = (rw.blocks() * u64::from(ns.block_size())) as usize;
        // A recycled buffer holds an earlier command's data: the read overwrites all of it,
        // and a failed read's buffer is not sent.
        let mut buf = self.take_buf(len);
        if let Err(e) = ns.read(rw.slba, &mut buf) {
            self.recycle(buf);
            return Err(Fail::from(e.status()));
        }
        self.stats.add(1, 0, len as u64, 0);
        Ok((0, buf))
    }

    fn exec_write(
        &self,
        rw: &ReadWrite,
        ns: &dyn Namespace,
        data: &[u8],
    ) -> Result<(u64, Vec<u8>), Fail> {
        ns.write(rw.slba, data)
            .map_err(|e| Fail::from(e.status()))?;
        if rw.control & io::CONTROL_FUA != 0 && ns.volatile_write_cache() {
            ns.flush().map_err(|e| Fail::from(e.status()))?;
        }
        self.stats.add(0, 1, 0, data.len() as u64);
        Ok((0, Vec::new()))
    }

    fn exec_dsm(
        &self,
        d: &DatasetManagement,
        ns: &dyn Namespace,
        data: &[u8],
    ) -> Result<(u64, Vec<u8>), Fail> {
        if d.attr & DSM_AD == 0 {
            return Ok((0, Vec::new()));
        }
        let ranges: Vec<DsmRange> = data
            .chunks_exact(DSM_RANGE_LEN)
            .take(d.ranges())
            .map(|c| {
                let mut b = [0u8; DSM_RANGE_LEN];
                b.copy_from_slice(c);
                DsmRange::decode(&b)
            })
            .collect();
        // Check every range before touching any.
        for r in &ranges {
            let end = r.slba.checked_add(u64::from(r.nlb));
            if end.is_none_or(|e| e > ns.block_count()) {
                return Err(Status::LBA_RANGE.dnr().into());
            }
        }
        for r in ranges.iter().filter(|r| r.nlb != 0) {
            ns.deallocate(r.slba, u64::from(r.nlb))
                .map_err(|e| Fail::from(e.status()))?;
        }
        Ok((0, Vec::new()))
    }
}

fn vwc(s: &Subsystem) -> bool {
    s.namespaces.iter().any(|n| n.ns.volatile_write_cache())
}

/// One-sided access to the host's memory and the response channel: what a target queue
/// needs from its transport.
pub trait TargetTransport {
    /// Transport failure (the connection is then unusable).
    type Error;
    /// RDMA READ `remote` into `buf` (`buf.len() == remote.len`).
    fn read_remote(&mut self, remote: RemoteBuffer, buf: &mut [u8]) -> Result<(), Self::Error>;
    /// RDMA WRITE `data` to `remote`.
    fn write_remote(&mut self, remote: RemoteBuffer, data: &[u8]) -> Result<(), Self::Error>;
    /// SEND the response, with invalidate of `invalidate` when given.
    fn send_response(&mut self, cqe: &[u8; 16], invalidate: Option<u32>)
    -> Result<(), Self::Error>;
}

/// What [`serve`] did with a capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A response went out.
    Responded,
    /// A response went out and the queue asked to be closed (Disconnect).
    RespondedAndClosed,
    /// The command is held (no response yet).
    Held,
    /// The queue is dead: the transport must disconnect it.
    Disconnect,
}

/// Sends one response over `t`: the data WRITE first, then the completion.
pub fn send<T: TargetTransport>(t: &mut T, r: &Response) -> Result<(), T::Error> {
    if let Some(remote) = r.remote
        && !r.data.is_empty()
    {
        t.write_remote(remote, &r.data)?;
    }
    t.send_response(&r.cqe_bytes(), r.invalidate)
}

/// Runs one capsule through `queue` synchronously over `t`.
pub fn serve<T: TargetTransport>(
    queue: &mut Queue,
    t: &mut T,
    capsule: &[u8],
    now: u64,
) -> Result<Served, T::Error> {
    let mut outcome = queue.submit(capsule, now);
    loop {
        match outcome {
            Outcome::Fetch(mut req) => {
                let remote = req.remote();
                let ok = t.read_remote(remote, req.buffer_mut()).is_ok();
                outcome = queue.data_fetched(req, ok, now);
            }
            Outcome::Respond(r) => {
                send(t, &r)?;
                if r.close {
                    queue.close();
                    return Ok(Served::RespondedAndClosed);
                }
                queue.recycle(r.data);
                return Ok(Served::Responded);
            }
            Outcome::Held => return Ok(Served::Held),
            Outcome::Disconnect => return Ok(Served::Disconnect),
        }
    }
}
