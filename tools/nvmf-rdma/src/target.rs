//! The target side of the RDMA binding: a listener, and one thread per queue.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cm::{CmId, ConnParam, DataPath, EventParam, QpInitAttr};
use device_open::{Clock, Device};
use nvmf::capsule::{CQE_SIZE, SQE_SIZE};
use nvmf::rdma::{ConnectRequest, Reject, RejectStatus};
use nvmf::target::{Outcome, Request, Response, Target};
use verbs::{
    Buffer, MemoryRegion, QpCap, RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::now_ms;

/// Outstanding RDMA READs the target asks for (the host's responder resources, at most).
pub const MAX_READS: u8 = 16;

/// What a listener counted.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connection requests rejected (with NVMe reject data).
    pub rejected: AtomicU64,
    /// Commands served.
    pub commands: AtomicU64,
    /// Queues that ended with an error (their messages go to stderr).
    pub failed: AtomicU64,
    /// Accepted queues that ended (their QP, buffers and registrations freed).
    pub closed: AtomicU64,
    /// The most commands one queue had in flight at once (received and not yet answered,
    /// held Asynchronous Event Requests not counted).
    pub max_in_flight: AtomicU64,
}

/// Serves connection requests on `listen` until `stop` is set (checked whenever the
/// manager's wait limit ends a `get_request`), each accepted queue on a thread of its own.
/// Returns once every queue thread ended. Controllers whose keep-alive timer ran out are
/// failed from here. `staging` is the largest transfer of one command (MDTS).
pub fn run_listener<D: Device>(
    target: &Arc<Target>,
    listen: &CmId<D>,
    clock: &Clock,
    staging: usize,
    stop: &AtomicBool,
    stats: &ListenerStats,
    verbose: bool,
) {
    std::thread::scope(|s| {
        while !stop.load(Ordering::Relaxed) {
            for cntlid in target.check_keep_alive(now_ms(clock)) {
                if verbose {
                    eprintln!("nvmf-target: controller {cntlid}: keep-alive timeout, failed");
                }
            }
            let conn = match listen.get_request() {
                Ok(c) => c,
                Err(cm::Error::TimedOut) => continue,
                Err(e) => {
                    if verbose {
                        eprintln!("nvmf-target: get_request: {e:?}");
                    }
                    continue;
                }
            };
            let target = target.clone();
            let clock = clock.clone();
            s.spawn(move || {
                match serve_connection(&target, conn, &clock, staging, stats, verbose) {
                    Ok(()) => {}
                    Err(e) => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("nvmf-target: {e}");
                    }
                }
            });
        }
    });
}

/// The request's private data, checked: the connect request, or the reject status.
fn check_request<D: Device>(conn: &CmId<D>) -> Result<(ConnectRequest, u8), RejectStatus> {
    let Some(ev) = conn.event() else {
        return Err(RejectStatus::InvalidLength);
    };
    let req = ConnectRequest::decode(ev.param.private_data())?;
    // The host must let the target read its memory (RDMA READ responder resources). On the
    // passive side the request's `initiator_depth` is what the peer responds to.
    let ird = match &ev.param {
        EventParam::Conn(c) => c.initiator_depth,
        _ => 0,
    };
    if ird == 0 {
        return Err(RejectStatus::InvalidIrd);
    }
    Ok((req, ird.min(MAX_READS)))
}

/// Memory on the connection's device and its registration.
struct Reg<D: Device> {
    mem: Buffer,
    mr: D::Mr,
}

impl<D: Device> Reg<D> {
    fn new(id: &CmId<D>, len: usize) -> Result<Reg<D>, String> {
        let mem = id.alloc_buf(len).map_err(|e| format!("alloc_buf: {e:?}"))?;
        let mr = id
            .reg_msgs(mem.clone())
            .map_err(|e| format!("reg_mr: {e:?}"))?;
        Ok(Reg { mem, mr })
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }
}

/// Why a target-side transfer failed.
#[derive(Debug)]
pub enum IoError {
    /// A post failed.
    Post(verbs::PostError),
    /// Polling failed.
    Poll(cm::Error),
    /// A work completion with an error.
    Completion(WcStatus),
    /// A completion of a work request this queue did not post.
    Unknown(u64),
    /// The transfer exceeds a staging slot (MDTS).
    TooLong,
    /// A DMA buffer access failed.
    Dma,
}

/// Commands one queue runs at the same time at most (each holds a staging slot and a
/// response buffer from its arrival until its response SEND completed).
pub const MAX_IN_FLIGHT: usize = 16;

/// Staging memory a queue may hold for its commands in flight (fewer slots for a large MDTS).
const STAGING_BUDGET: usize = 8 << 20;

/// Slots for a queue of `depth` entries whose largest transfer is `staging` bytes.
fn slots_for(depth: u32, staging: usize) -> usize {
    (STAGING_BUDGET / staging.max(1))
        .clamp(2, MAX_IN_FLIGHT)
        .min(depth as usize)
        .max(1)
}

// Work request ids: the kind in the high half, the slot in the low half.
const WR_READ: u64 = 1 << 32;
const WR_SEND: u64 = 2 << 32;
const WR_WRITE: u64 = 3 << 32;

/// One queue's commands in flight: each in a slot with its own staging region (data fetched
/// or to be written) and response buffer, driven by completions. Only the queue's thread
/// touches it: no lock on the I/O path.
struct Pipeline<'a, D: Device> {
    dp: &'a DataPath<D>,
    staging: &'a Reg<D>,
    slot_len: usize,
    resp: &'a Reg<D>,
    /// Free slots.
    free: Vec<usize>,
    /// Commands waiting for their RDMA READ, by slot.
    fetching: Vec<Option<Request>>,
    /// Slots whose response closes the queue.
    closing: bool,
    /// RDMA READs outstanding (at most the host's responder resources).
    reads: usize,
    max_reads: usize,
    /// Data bytes moving (READs outstanding, WRITEs whose response SEND has not completed),
    /// at most [`DATA_IN_FLIGHT`] unless a single transfer is larger.
    data: usize,
    /// The bytes each slot holds of `data`.
    slot_data: Vec<usize>,
    /// Transfers waiting for `data` to fall, in arrival order.
    deferred: VecDeque<(usize, Outcome)>,
    /// Data buffers of posted responses (copied to staging), for [`nvmf::target::Queue::recycle`].
    spent: Vec<Vec<u8>>,
}

/// Data a queue moves at once at most (a larger single transfer goes alone). A slow peer (a
/// guest's soft-RoCE under emulation) loses frames to bursts of many large transfers, and
/// its retransmission timers then cost far more than the overlap gains.
pub const DATA_IN_FLIGHT: usize = 256 * 1024;

impl<D: Device> Pipeline<'_, D> {
    fn busy(&self) -> usize {
        self.fetching.len() - self.free.len()
    }

    /// Starts RDMA READ of `req`'s data into `slot`.
    fn fetch(&mut self, slot: usize, req: Request) -> Result<(), IoError> {
        let remote = req.remote();
        if remote.len as usize > self.slot_len {
            return Err(IoError::TooLong);
        }
        let sge = [self.staging.sge(slot * self.slot_len, remote.len as usize)];
        self.dp
            .post_send(&[SendWr {
                wr_id: WR_READ | slot as u64,
                opcode: WrOpcode::RdmaRead,
                flags: SendFlags::SIGNALED,
                sg_list: &sge,
                remote: RemoteOp::Rdma {
                    remote_addr: remote.addr,
                    rkey: remote.key,
                },
                ..SendWr::default()
            }])
            .map_err(IoError::Post)?;
        self.fetching[slot] = Some(req);
        self.reads += 1;
        Ok(())
    }

    /// Posts `r` from `slot`: the data WRITE (unsignalled) chained ahead of the response SEND
    /// (signalled; the slot is free again when it completes).
    fn respond(&mut self, slot: usize, r: &Response) -> Result<(), IoError> {
        let base = slot * self.slot_len;
        let mut data_sge = [Sge::default()];
        let write = if let Some(remote) = r.remote
            && !r.data.is_empty()
        {
            if r.data.len() > self.slot_len {
                return Err(IoError::TooLong);
            }
            // SAFETY: the slot belongs to this command: no READ into it is in flight and its
            // previous WRITE completed before its previous response SEND did.
            unsafe { self.staging.mem.write_unsync(base, &r.data) }.map_err(|_| IoError::Dma)?;
            data_sge = [self.staging.sge(base, r.data.len())];
            Some(RemoteOp::Rdma {
                remote_addr: remote.addr,
                rkey: remote.key,
            })
        } else {
            None
        };
        // A plain SEND also when the host asked for invalidation (see the crate doc).
        // SAFETY: the slot's previous response SEND completed (the slot was free since).
        unsafe { self.resp.mem.write_unsync(slot * CQE_SIZE, &r.cqe_bytes()) }
            .map_err(|_| IoError::Dma)?;
        let cqe_sge = [self.resp.sge(slot * CQE_SIZE, CQE_SIZE)];
        let send = SendWr {
            wr_id: WR_SEND | slot as u64,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &cqe_sge,
            ..SendWr::default()
        };
        // The data WRITE (unsignalled) chained ahead of the response SEND: one post.
        let wrs: [SendWr<'_, D::Ah>; 2] = [
            SendWr {
                wr_id: WR_WRITE | slot as u64,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &data_sge,
                remote: write.unwrap_or(RemoteOp::None),
                ..SendWr::default()
            },
            send,
        ];
        let wrs = if write.is_some() { &wrs[..] } else { &wrs[1..] };
        self.dp.post_send(wrs).map_err(IoError::Post)?;
        if r.close {
            self.closing = true;
        }
        Ok(())
    }

    /// The data bytes `o` moves.
    fn data_of(o: &Outcome) -> usize {
        match o {
            Outcome::Fetch(req) => req.remote().len as usize,
            Outcome::Respond(r) if r.remote.is_some() => r.data.len(),
            _ => 0,
        }
    }

    /// Acts on what the queue said of a command in `slot`: false when the queue is dead.
    /// A transfer that does not fit [`DATA_IN_FLIGHT`] next to those moving waits.
    fn outcome(&mut self, slot: usize, o: Outcome) -> Result<bool, IoError> {
        let n = Self::data_of(&o);
        if n > 0 {
            if !self.deferred.is_empty() || (self.data > 0 && self.data + n > DATA_IN_FLIGHT) {
                self.deferred.push_back((slot, o));
                return Ok(true);
            }
            self.data += n;
            self.slot_data[slot] += n;
        }
        self.start(slot, o)
    }

    /// Releases the data bytes `slot` holds.
    fn release(&mut self, slot: usize) {
        self.data -= std::mem::take(&mut self.slot_data[slot]);
    }

    /// Starts the deferred transfers that fit now.
    fn resume(&mut self) -> Result<bool, IoError> {
        while let Some((_, o)) = self.deferred.front() {
            let n = Self::data_of(o);
            let read = matches!(o, Outcome::Fetch(_));
            if (self.data > 0 && self.data + n > DATA_IN_FLIGHT)
                || (read && self.reads >= self.max_reads)
            {
                break;
            }
            let Some((slot, o)) = self.deferred.pop_front() else {
                break;
            };
            self.data += n;
            self.slot_data[slot] += n;
            if !self.start(slot, o)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn start(&mut self, slot: usize, o: Outcome) -> Result<bool, IoError> {
        match o {
            Outcome::Fetch(req) => self.fetch(slot, req).map(|()| true),
            Outcome::Respond(r) => {
                self.respond(slot, &r)?;
                if r.data.capacity() > 0 {
                    self.spent.push(r.data);
                }
                Ok(true)
            }
            Outcome::Held => {
                self.free.push(slot);
                Ok(true)
            }
            Outcome::Disconnect => {
                self.free.push(slot);
                Ok(false)
            }
        }
    }
}

/// Checks one connection request, accepts or rejects it, and serves the queue until the host
/// disconnects, the queue is closed (Disconnect, a fatal capsule) or its controller fails.
pub fn serve_connection<D: Device>(
    target: &Arc<Target>,
    conn: CmId<D>,
    clock: &Clock,
    staging: usize,
    stats: &ListenerStats,
    verbose: bool,
) -> Result<(), String> {
    let checked = check_request(&conn).and_then(|(req, ird)| {
        let (q, acc) = target.accept(&req)?;
        Ok((req, ird, q, acc))
    });
    let (req, ird, mut queue, acc) = match checked {
        Ok(x) => x,
        Err(st) => {
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            if verbose {
                eprintln!("nvmf-target: reject: {st:?}");
            }
            let r = conn.reject(&Reject::new(st).encode());
            conn.destroy_ep();
            return r.map_err(|e| format!("reject: {e:?}"));
        }
    };
    let depth = u32::from(req.hsqsize) + 1;
    let slot = SQE_SIZE + queue.inline_data_size();
    let staging_len = staging.max(4096);
    let slots = slots_for(depth, staging_len);
    let mut attr = QpInitAttr {
        cap: QpCap {
            // Per command in flight: a READ, then a WRITE and the response SEND.
            max_send_wr: 3 * slots as u32 + 2,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..QpInitAttr::default()
    };
    if let Err(e) = conn.create_qp(None, &mut attr) {
        let _ = conn.reject(&Reject::new(RejectStatus::NoResources).encode());
        conn.destroy_ep();
        return Err(format!("queue {}: create_qp: {e:?}", req.qid));
    }
    let r = (|| {
        let recv = Reg::<D>::new(&conn, depth as usize * slot)?;
        let staging = Reg::<D>::new(&conn, slots * staging_len)?;
        let resp = Reg::<D>::new(&conn, slots * CQE_SIZE)?;
        let r = run_queue(
            &conn, &mut queue, req, ird, acc, depth, slot, slots, &recv, &staging, &resp, clock,
            stats, verbose,
        );
        for b in [recv, staging, resp] {
            let _ = conn.dereg_mr(b.mr);
        }
        r
    })();
    queue.close();
    conn.destroy_ep();
    stats.closed.fetch_add(1, Ordering::Relaxed);
    r
}

#[allow(clippy::too_many_arguments)]
fn run_queue<D: Device>(
    conn: &CmId<D>,
    queue: &mut nvmf::target::Queue,
    req: ConnectRequest,
    ird: u8,
    acc: nvmf::rdma::Accept,
    depth: u32,
    slot: usize,
    slots: usize,
    recv: &Reg<D>,
    staging: &Reg<D>,
    resp: &Reg<D>,
    clock: &Clock,
    stats: &ListenerStats,
    verbose: bool,
) -> Result<(), String> {
    let dp = conn.data_path().map_err(|e| format!("data path: {e:?}"))?;
    let post_recv = |i: u32| {
        let sge = [recv.sge(i as usize * slot, slot)];
        dp.post_recv(&[RecvWr {
            wr_id: u64::from(i),
            sg_list: &sge,
        }])
        .map_err(|e| format!("queue {}: post_recv: {e:?}", req.qid))
    };
    for i in 0..depth {
        post_recv(i)?;
    }
    let data = acc.encode();
    conn.accept(Some(&ConnParam {
        private_data: &data,
        responder_resources: 0,
        initiator_depth: ird,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }))
    .map_err(|e| format!("queue {}: accept: {e:?}", req.qid))?;
    stats_accepted(stats);
    let mut p = Pipeline {
        dp: &dp,
        staging,
        slot_len: staging.mem.len() / slots,
        resp,
        free: (0..slots).rev().collect(),
        fetching: (0..slots).map(|_| None).collect(),
        closing: false,
        reads: 0,
        max_reads: usize::from(ird.max(1)),
        data: 0,
        slot_data: vec![0; slots],
        deferred: VecDeque::new(),
        spent: Vec::new(),
    };
    let qid = req.qid;
    let mut io = QueueIo {
        dp: &dp,
        qid,
        recv,
        slot,
        depth,
        pending: VecDeque::new(),
        spare: Vec::new(),
        verbose,
    };
    let mut rwcs = [WorkCompletion::default(); 16];
    let mut swcs = [WorkCompletion::default(); 16];
    let mut events: VecDeque<Response> = VecDeque::new();
    let result: Result<(), String> = 'run: loop {
        if !queue.is_live() && p.busy() == 0 {
            break Ok(());
        }
        if p.closing && p.busy() == 0 {
            queue.close();
            break Ok(());
        }
        let mut progress = false;
        let nr = match dp.poll_recv_cq(&mut rwcs) {
            Ok(n) => n,
            Err(e) => break Err(format!("queue {qid}: poll: {e:?}")),
        };
        let ns = match dp.poll_send_cq(&mut swcs) {
            Ok(n) => n,
            Err(e) => break Err(format!("queue {qid}: poll: {e:?}")),
        };
        let startable =
            !p.closing && p.reads < p.max_reads && !p.free.is_empty() && !io.pending.is_empty();
        if nr > 0 || ns > 0 || startable {
            progress = true;
            if let Some(end) = io.serve(&mut p, queue, &rwcs[..nr], &swcs[..ns], clock, stats) {
                break end;
            }
        }
        // Asynchronous events for held requests.
        events.extend(queue.take_events());
        while !events.is_empty() && !p.closing {
            let Some(slot) = p.free.pop() else { break };
            let Some(r) = events.pop_front() else { break };
            progress = true;
            if let Err(e) = p.respond(slot, &r) {
                break 'run Err(format!("queue {qid}: event: {e:?}"));
            }
        }
        stats
            .max_in_flight
            .fetch_max(p.busy() as u64, Ordering::Relaxed);
        if !progress {
            nic_hal::Platform::relax(clock);
        }
    };
    // Answers the host's DREQ, or sends ours (Disconnect, a failed controller).
    let _ = conn.disconnect();
    result
}

/// The receive side of a queue: its receive buffers and the capsules taken from them.
struct QueueIo<'a, D: Device> {
    dp: &'a DataPath<D>,
    qid: u16,
    recv: &'a Reg<D>,
    /// Bytes of one receive buffer (SQE and in-capsule data).
    slot: usize,
    /// Receive buffers.
    depth: u32,
    /// Capsules received and not yet started, in arrival order.
    pending: VecDeque<Vec<u8>>,
    /// Capsule buffers to use again (no allocation per command once warm).
    spare: Vec<Vec<u8>>,
    verbose: bool,
}

impl<D: Device> QueueIo<'_, D> {
    /// The per-I/O work of one pass of the queue loop, called only when there is some (a
    /// completion polled, or a capsule waiting that can start now; an empty poll never gets
    /// here, so `scripts/nvmf-target-cost.sh` counts the instructions in here per I/O):
    /// takes the capsules of receive completions `recvs`, handles the send-queue completions
    /// `sends`, then starts what slots and read credits allow. `Some` ends the queue.
    #[inline(never)]
    fn serve(
        &mut self,
        p: &mut Pipeline<'_, D>,
        queue: &mut nvmf::target::Queue,
        recvs: &[WorkCompletion],
        sends: &[WorkCompletion],
        clock: &Clock,
        stats: &ListenerStats,
    ) -> Option<Result<(), String>> {
        if !recvs.is_empty()
            && let Some(end) = self.take_capsules(recvs, sends)
        {
            return Some(end);
        }
        if !sends.is_empty()
            && let Some(end) = take_sends(p, queue, sends, clock, self.qid, self.verbose)
        {
            return Some(end);
        }
        let end = self.start_commands(p, queue, clock, stats);
        for b in p.spent.drain(..) {
            queue.recycle(b);
        }
        end
    }

    /// Takes the capsules of receive completions `wcs` (copied out of their buffers, which
    /// are posted again in one batch). `Some` ends the queue: the host went away (a flushed
    /// receive), or an error.
    fn take_capsules(
        &mut self,
        wcs: &[WorkCompletion],
        sends: &[WorkCompletion],
    ) -> Option<Result<(), String>> {
        let qid = self.qid;
        let mut sges = [Sge::default(); 16];
        let mut ids = [0u64; 16];
        let mut n = 0;
        for wc in wcs {
            if wc.status != WcStatus::Success {
                // Flushed: the host disconnected, or the QP failed. A failure of our own
                // (a READ or SEND whose retries ran out) flushes the receives too and its
                // completion may wait behind them on the send queue's CQ: reported as the
                // queue's failure, not taken for the host's disconnect.
                if self.verbose {
                    eprintln!(
                        "nvmf-target: queue {qid}: receive completed with {:?}",
                        wc.status
                    );
                }
                let mut more = [WorkCompletion::default(); 16];
                if let Ok(k) = self.dp.poll_send_cq(&mut more) {
                    let failed = sends
                        .iter()
                        .chain(&more[..k])
                        .find(|c| !matches!(c.status, WcStatus::Success | WcStatus::WrFlushErr));
                    if let Some(c) = failed {
                        return Some(Err(format!(
                            "queue {qid}: transport: {:?}",
                            IoError::Completion(c.status)
                        )));
                    }
                }
                return Some(Ok(()));
            }
            let i = match u32::try_from(wc.wr_id) {
                Ok(i) if i < self.depth => i as usize,
                _ => {
                    return Some(Err(format!(
                        "queue {qid}: completion of an unknown receive"
                    )));
                }
            };
            let len = (wc.byte_len as usize).min(self.slot);
            let mut capsule = self.spare.pop().unwrap_or_default();
            capsule.resize(len, 0);
            // SAFETY: receive buffer `i` completed and is not posted again before this copy
            // ends: neither the device nor another thread writes it meanwhile.
            if unsafe { self.recv.mem.read_unsync(i * self.slot, &mut capsule) }.is_err() {
                return Some(Err(format!("queue {qid}: reading a capsule")));
            }
            self.pending.push_back(capsule);
            if n == sges.len() {
                return Some(Err(format!(
                    "queue {qid}: more than 16 receive completions"
                )));
            }
            sges[n] = self.recv.sge(i * self.slot, self.slot);
            ids[n] = i as u64;
            n += 1;
        }
        let wrs: [RecvWr<'_>; 16] = std::array::from_fn(|k| RecvWr {
            wr_id: ids[k],
            sg_list: std::slice::from_ref(&sges[k]),
        });
        if let Err(e) = self.dp.post_recv(&wrs[..n]) {
            return Some(Err(format!("queue {qid}: post_recv: {e:?}")));
        }
        None
    }

    /// Starts pending capsules while slots and read credits allow.
    fn start_commands(
        &mut self,
        p: &mut Pipeline<'_, D>,
        queue: &mut nvmf::target::Queue,
        clock: &Clock,
        stats: &ListenerStats,
    ) -> Option<Result<(), String>> {
        while !p.closing && p.reads < p.max_reads {
            let Some(slot) = p.free.pop() else { break };
            let Some(capsule) = self.pending.pop_front() else {
                p.free.push(slot);
                break;
            };
            stats.commands.fetch_add(1, Ordering::Relaxed);
            let o = queue.submit(&capsule, now_ms(clock));
            self.spare.push(capsule);
            match p.outcome(slot, o) {
                Ok(true) => {}
                Ok(false) => return Some(Ok(())),
                Err(e) => return Some(Err(format!("queue {}: transport: {e:?}", self.qid))),
            }
        }
        None
    }
}

/// Handles send-queue completions `wcs` (READs: the command goes on; SENDs: the slot is
/// free), then starts deferred transfers that fit now. `Some` ends the queue.
fn take_sends<D: Device>(
    p: &mut Pipeline<'_, D>,
    queue: &mut nvmf::target::Queue,
    wcs: &[WorkCompletion],
    clock: &Clock,
    qid: u16,
    verbose: bool,
) -> Option<Result<(), String>> {
    let io_err = |e: IoError| Some(Err(format!("queue {qid}: transport: {e:?}")));
    let slots = p.fetching.len();
    for wc in wcs {
        let slot = (wc.wr_id & 0xFFFF_FFFF) as usize;
        let kind = wc.wr_id & !0xFFFF_FFFF;
        if slot >= slots || !(kind == WR_READ || kind == WR_SEND) {
            return io_err(IoError::Unknown(wc.wr_id));
        }
        if verbose && wc.status != WcStatus::Success {
            eprintln!(
                "nvmf-target: queue {qid}: {} completed with {:?}",
                if kind == WR_READ { "RDMA READ" } else { "SEND" },
                wc.status
            );
        }
        if wc.status == WcStatus::WrFlushErr {
            // The host disconnected while we answered (the QP is in error).
            return Some(Ok(()));
        }
        if kind == WR_SEND {
            if wc.status != WcStatus::Success {
                return io_err(IoError::Completion(wc.status));
            }
            p.release(slot);
            p.free.push(slot);
            continue;
        }
        p.reads -= 1;
        p.release(slot);
        let Some(mut req) = p.fetching[slot].take() else {
            return io_err(IoError::Unknown(wc.wr_id));
        };
        let ok = wc.status == WcStatus::Success && {
            let len = req.remote().len as usize;
            // SAFETY: the READ into this slot completed; nothing else targets the slot until
            // its command's response is posted.
            unsafe {
                p.staging
                    .mem
                    .read_unsync(slot * p.slot_len, &mut req.buffer_mut()[..len])
            }
            .is_ok()
        };
        let o = queue.data_fetched(req, ok, now_ms(clock));
        match p.outcome(slot, o) {
            Ok(true) => {}
            Ok(false) => return Some(Ok(())),
            Err(e) => return io_err(e),
        }
    }
    match p.resume() {
        Ok(true) => None,
        Ok(false) => Some(Ok(())),
        Err(e) => io_err(e),
    }
}

fn stats_accepted(stats: &ListenerStats) {
    stats.accepted.fetch_add(1, Ordering::Relaxed);
}
