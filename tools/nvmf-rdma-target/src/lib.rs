//! The target side of NVMe over Fabrics on RDMA, `no_std` + `alloc`: what a queue needs from
//! its connection request to its disconnect, over the connection manager ([`cm`]) and
//! [`verbs`], driven by polling.
//!
//! * [`admit`]: checks a connection request's RDMA CM private data with
//!   [`nvmf::target::Target::accept`] (a reject carries the NVMe reject status), creates the QP
//!   with the queue sizes of the request (HSQSIZE + 1 receives), posts one receive buffer per
//!   entry (64 bytes on the admin queue, 64 bytes plus the in-capsule size on I/O queues) and
//!   accepts with the accept private data.
//! * [`QueueConn`]: one accepted queue, driven by [`QueueConn::poll`] from its completions:
//!   up to [`MAX_IN_FLIGHT`] commands in flight (as many as the host sends, its queue depth),
//!   each with its own staging slot and response buffer; host data named by a keyed SGL is
//!   RDMA READ (at most the host's responder resources at once) before the command runs,
//!   controller data RDMA WRITTEN chained ahead of the response SEND. The queue's state is
//!   its owner's alone: no lock on the I/O path.
//! * [`PolledTarget`]: every queue of a listener from one loop (a single-threaded program such
//!   as the unikernel): an asynchronous listener on a non-blocking event channel, connection
//!   requests admitted as they come, each queue polled in turn.
//!
//! The threaded tool (`nvmf-rdma`'s `target` module: one thread per queue, synchronous ids)
//! and the polled loop run the same [`admit`] and [`QueueConn`]: there is one target.
//!
//! SEND with invalidate: a command whose keyed SGL has the invalidate subtype (0xF) and a
//! length other than 0 is answered with SEND with invalidate of that key (as nvmet does), any
//! other with a plain SEND. The host's device invalidates the key (a Linux host's FRWR
//! registration); our own host never asks (its buffers are ordinary registrations, which
//! cannot be invalidated remotely).
#![no_std]

extern crate alloc;

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};

use cm::{Cm, CmId, ConnParam, DataPath, EventChannel, EventParam, EventType, QpInitAttr};
use nvmf::capsule::{CQE_SIZE, SQE_SIZE};
use nvmf::rdma::{ConnectRequest, Reject, RejectStatus};
use nvmf::target::{Outcome, Request, Response, Target};
use verbs::{
    Buffer, MemoryRegion, Provider, QpCap, RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Outstanding RDMA READs the target asks for (the host's responder resources, at most).
pub const MAX_READS: u8 = 16;

/// Commands one queue runs at the same time at most (each holds a staging slot and a
/// response buffer from its arrival until its response SEND completed).
pub const MAX_IN_FLIGHT: usize = 16;

/// Staging memory a queue may hold for its commands in flight (fewer slots for a large MDTS).
const STAGING_BUDGET: usize = 8 << 20;

/// Data a queue moves at once at most (a larger single transfer goes alone). A slow peer (a
/// guest's soft-RoCE under emulation) loses frames to bursts of many large transfers, and
/// its retransmission timers then cost far more than the overlap gains.
pub const DATA_IN_FLIGHT: usize = 256 * 1024;

/// Where diagnostics go (`None`: nowhere): one line per call, without a newline.
pub type Log = fn(fmt::Arguments<'_>);

/// What a listener counted.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connection requests rejected (with NVMe reject data).
    pub rejected: AtomicU64,
    /// Commands served.
    pub commands: AtomicU64,
    /// Queues that ended with an error (their messages go to the log).
    pub failed: AtomicU64,
    /// Accepted queues that ended (their QP, buffers and registrations freed).
    pub closed: AtomicU64,
    /// The most commands one queue had in flight at once (received and not yet answered,
    /// held Asynchronous Event Requests not counted).
    pub max_in_flight: AtomicU64,
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

/// A connection request's private data, checked: the connect request and the RDMA READ
/// depth to use (the request's initiator depth, at most [`MAX_READS`]), or the reject status.
pub fn check_request(param: &EventParam) -> Result<(ConnectRequest, u8), RejectStatus> {
    let req = ConnectRequest::decode(param.private_data())?;
    // The host must let the target read its memory (RDMA READ responder resources). On the
    // passive side the request's `initiator_depth` is what the peer responds to.
    let ird = match param {
        EventParam::Conn(c) => c.initiator_depth,
        _ => 0,
    };
    if ird == 0 {
        return Err(RejectStatus::InvalidIrd);
    }
    Ok((req, ird.min(MAX_READS)))
}

/// Memory on the connection's device and its registration.
struct Reg<D: Provider> {
    mem: Buffer,
    mr: D::Mr,
}

impl<D: Provider> Reg<D> {
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

/// What one [`QueueConn::poll`] did.
#[derive(Debug)]
pub enum Step {
    /// Something happened (a completion, a command started): poll again at once.
    Busy,
    /// Nothing to do: the caller may relax before polling again.
    Idle,
    /// The queue is over: the host disconnected, the queue was closed (Disconnect, a fatal
    /// capsule) or its controller failed (`Ok`), or its transport failed (`Err`). Call
    /// [`QueueConn::finish`].
    Done(Result<(), String>),
}

/// One accepted queue: its QP's data path, receive, staging and response buffers, the
/// controller's queue and the commands in flight. Only its owner touches it.
pub struct QueueConn<D: Provider> {
    qid: u16,
    queue: nvmf::target::Queue,
    dp: DataPath<D>,
    depth: u32,
    /// Bytes of one receive buffer (a capsule).
    slot: usize,
    recv: Reg<D>,
    staging: Reg<D>,
    slot_len: usize,
    resp: Reg<D>,
    slots: usize,
    /// Free slots.
    free: Vec<usize>,
    /// Commands waiting for their RDMA READ, by slot.
    fetching: Vec<Option<Request>>,
    /// A response that closes the queue is on its way.
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
    /// Capsules received and not started yet.
    pending: VecDeque<Vec<u8>>,
    /// Asynchronous event responses waiting for a slot.
    events: VecDeque<Response>,
    /// Capsule buffers to use again (no allocation per command once warm).
    spare: Vec<Vec<u8>>,
    /// Data buffers of posted responses (copied to staging), for
    /// [`nvmf::target::Queue::recycle`].
    spent: Vec<Vec<u8>>,
    log: Option<Log>,
}

macro_rules! log {
    ($l:expr, $($arg:tt)*) => {
        if let Some(f) = $l {
            f(format_args!($($arg)*));
        }
    };
}

/// Checks the connection request `conn` (whose request event carried `param`), and accepts
/// or rejects it: on success the queue, with its QP, buffers and receives in place and the
/// accept sent (a synchronous id returns once the connection is established, an asynchronous
/// one at once). `Ok(None)`: rejected with the NVMe reject status. `staging` is the largest
/// transfer of one command (MDTS). The caller destroys `conn` unless a queue came back (and
/// then after [`QueueConn::finish`]).
pub fn admit<D: Provider>(
    target: &Arc<Target>,
    conn: &CmId<D>,
    param: &EventParam,
    staging: usize,
    stats: &ListenerStats,
    log: Option<Log>,
) -> Result<Option<QueueConn<D>>, String> {
    let checked = check_request(param).and_then(|(req, ird)| {
        let (q, acc) = target.accept(&req)?;
        Ok((req, ird, q, acc))
    });
    let (req, ird, mut queue, acc) = match checked {
        Ok(x) => x,
        Err(st) => {
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            log!(log, "reject: {st:?}");
            return conn
                .reject(&Reject::new(st).encode())
                .map(|()| None)
                .map_err(|e| format!("reject: {e:?}"));
        }
    };
    let qid = req.qid;
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
        queue.close();
        return Err(format!("queue {qid}: create_qp: {e:?}"));
    }
    let mut regs: Vec<Reg<D>> = Vec::with_capacity(3);
    let r = (|| {
        for len in [depth as usize * slot, slots * staging_len, slots * CQE_SIZE] {
            regs.push(Reg::new(conn, len).map_err(|e| format!("queue {qid}: {e}"))?);
        }
        let dp = conn
            .data_path()
            .map_err(|e| format!("queue {qid}: data path: {e:?}"))?;
        for i in 0..depth {
            post_recv(&dp, &regs[0], slot, i).map_err(|e| format!("queue {qid}: {e}"))?;
        }
        conn.accept(Some(&ConnParam {
            private_data: &acc.encode(),
            responder_resources: 0,
            initiator_depth: ird,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }))
        .map_err(|e| format!("queue {qid}: accept: {e:?}"))?;
        Ok(dp)
    })();
    let dp = match r {
        Ok(dp) => dp,
        Err(e) => {
            for b in regs {
                let _ = conn.dereg_mr(b.mr);
            }
            queue.close();
            return Err(e);
        }
    };
    stats.accepted.fetch_add(1, Ordering::Relaxed);
    let mut it = regs.into_iter();
    let (Some(recv), Some(staging), Some(resp)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("queue {qid}: buffers"));
    };
    Ok(Some(QueueConn {
        qid,
        queue,
        dp,
        depth,
        slot,
        recv,
        slot_len: staging_len,
        staging,
        resp,
        slots,
        free: (0..slots).rev().collect(),
        fetching: (0..slots).map(|_| None).collect(),
        closing: false,
        reads: 0,
        max_reads: usize::from(ird.max(1)),
        data: 0,
        slot_data: vec![0; slots],
        deferred: VecDeque::new(),
        pending: VecDeque::new(),
        events: VecDeque::new(),
        spare: Vec::new(),
        spent: Vec::new(),
        log,
    }))
}

fn post_recv<D: Provider>(
    dp: &DataPath<D>,
    recv: &Reg<D>,
    slot: usize,
    i: u32,
) -> Result<(), String> {
    let sge = [recv.sge(i as usize * slot, slot)];
    dp.post_recv(&[RecvWr {
        wr_id: u64::from(i),
        sg_list: &sge,
    }])
    .map_err(|e| format!("post_recv: {e:?}"))
}

impl<D: Provider> QueueConn<D> {
    /// The queue id (0: admin).
    pub fn qid(&self) -> u16 {
        self.qid
    }

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
    /// (signalled; the slot is free again when it completes), in one post.
    fn respond(&mut self, slot: usize, r: &Response) -> Result<(), IoError> {
        let base = slot * self.slot_len;
        let mut data_sge = [Sge::default()];
        let write = if let Some(remote) = r.remote
            && !r.data.is_empty()
        {
            if r.data.len() > self.slot_len {
                return Err(IoError::TooLong);
            }
            // SAFETY: the slot belongs to this command: no READ into it is in flight (a
            // fetched command's READ completed before it ran) and the slot's previous WRITE
            // completed before its previous response SEND did, after which the slot was free.
            // The staging registration allows no remote access.
            unsafe { self.staging.mem.write_unsync(base, &r.data) }.map_err(|_| IoError::Dma)?;
            data_sge = [self.staging.sge(base, r.data.len())];
            Some(RemoteOp::Rdma {
                remote_addr: remote.addr,
                rkey: remote.key,
            })
        } else {
            None
        };
        // SEND with invalidate of the host's key when its keyed SGL asked for it (subtype
        // 0xF, length not 0), as nvmet does; else a plain SEND.
        let (opcode, imm_data) = match r.invalidate {
            Some(key) => (WrOpcode::SendWithInv, key),
            None => (WrOpcode::Send, 0),
        };
        // SAFETY: the slot's previous response SEND completed (the slot was free since), so
        // the device does not read this response buffer now; only this queue's owner writes it.
        unsafe { self.resp.mem.write_unsync(slot * CQE_SIZE, &r.cqe_bytes()) }
            .map_err(|_| IoError::Dma)?;
        let cqe_sge = [self.resp.sge(slot * CQE_SIZE, CQE_SIZE)];
        let wrs: [SendWr<'_, D::Ah>; 2] = [
            SendWr {
                wr_id: WR_WRITE | slot as u64,
                opcode: WrOpcode::RdmaWrite,
                sg_list: &data_sge,
                remote: write.unwrap_or(RemoteOp::None),
                ..SendWr::default()
            },
            SendWr {
                wr_id: WR_SEND | slot as u64,
                opcode,
                flags: SendFlags::SIGNALED,
                sg_list: &cqe_sge,
                imm_data,
                ..SendWr::default()
            },
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
        self.data -= core::mem::take(&mut self.slot_data[slot]);
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

    fn io_err(&self, e: IoError) -> String {
        format!("queue {}: transport: {e:?}", self.qid)
    }

    /// One pass over the queue at time `now_ms` (the keep-alive clock, milliseconds): new
    /// capsules (copied out, their receives re-posted), completions of the READs and SENDs,
    /// commands started as slots and read credits allow, asynchronous events.
    pub fn poll(&mut self, now_ms: u64, stats: &ListenerStats) -> Step {
        match self.pass(now_ms, stats) {
            Ok(true) => Step::Busy,
            Ok(false) => Step::Idle,
            Err(r) => Step::Done(r),
        }
    }

    /// [`poll`](Self::poll): whether something happened, or the queue's end.
    fn pass(&mut self, now_ms: u64, stats: &ListenerStats) -> Result<bool, Result<(), String>> {
        let qid = self.qid;
        if !self.queue.is_live() && self.busy() == 0 {
            return Err(Ok(()));
        }
        if self.closing && self.busy() == 0 {
            self.queue.close();
            return Err(Ok(()));
        }
        let mut progress = false;
        let mut rwcs = [WorkCompletion::default(); 16];
        let mut swcs = [WorkCompletion::default(); 16];
        let nr = self
            .dp
            .poll_recv_cq(&mut rwcs)
            .map_err(|e| Err(format!("queue {qid}: poll: {e:?}")))?;
        let ns = self
            .dp
            .poll_send_cq(&mut swcs)
            .map_err(|e| Err(format!("queue {qid}: poll: {e:?}")))?;
        let startable = !self.closing
            && self.reads < self.max_reads
            && !self.free.is_empty()
            && !self.pending.is_empty();
        if nr > 0 || ns > 0 || startable {
            progress = true;
            self.serve(&rwcs[..nr], &swcs[..ns], now_ms, stats)?;
        }
        // Asynchronous events for held requests.
        let evs = self.queue.take_events();
        self.events.extend(evs);
        while !self.events.is_empty() && !self.closing {
            let Some(slot) = self.free.pop() else { break };
            let Some(r) = self.events.pop_front() else {
                break;
            };
            progress = true;
            if let Err(e) = self.respond(slot, &r) {
                return Err(Err(format!("queue {qid}: event: {e:?}")));
            }
        }
        stats
            .max_in_flight
            .fetch_max(self.busy() as u64, Ordering::Relaxed);
        Ok(progress)
    }

    /// The per-I/O work of one pass, called only when there is some (a completion polled, or
    /// a capsule waiting that can start now; an empty poll never gets here, so
    /// `scripts/nvmf-target-cost.sh` counts the instructions in here per I/O): takes the
    /// capsules of receive completions `recvs`, handles the send-queue completions `sends`,
    /// then starts what slots and read credits allow, and hands the data buffers of the
    /// responses posted back to the controller's queue. `Err`: the queue's end.
    #[inline(never)]
    fn serve(
        &mut self,
        recvs: &[WorkCompletion],
        sends: &[WorkCompletion],
        now_ms: u64,
        stats: &ListenerStats,
    ) -> Result<(), Result<(), String>> {
        if !recvs.is_empty() {
            self.take_capsules(recvs, sends)?;
        }
        if !sends.is_empty() {
            self.take_sends(sends, now_ms)?;
        }
        let r = self.start_commands(now_ms, stats);
        for b in self.spent.drain(..) {
            self.queue.recycle(b);
        }
        r
    }

    /// Takes the capsules of receive completions `wcs` (copied out of their buffers, which
    /// are posted again in one batch); `sends` are the send-queue completions polled with
    /// them. `Err`: the host went away (a flushed receive), or an error.
    fn take_capsules(
        &mut self,
        wcs: &[WorkCompletion],
        sends: &[WorkCompletion],
    ) -> Result<(), Result<(), String>> {
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
                log!(
                    self.log,
                    "queue {qid}: receive completed with {:?}",
                    wc.status
                );
                let mut more = [WorkCompletion::default(); 16];
                let k = self.dp.poll_send_cq(&mut more).unwrap_or(0);
                let failed = sends
                    .iter()
                    .chain(&more[..k])
                    .find(|c| !matches!(c.status, WcStatus::Success | WcStatus::WrFlushErr));
                if let Some(c) = failed {
                    return Err(Err(self.io_err(IoError::Completion(c.status))));
                }
                return Err(Ok(()));
            }
            let i = match u32::try_from(wc.wr_id) {
                Ok(i) if i < self.depth => i as usize,
                _ => {
                    return Err(Err(format!(
                        "queue {qid}: completion of an unknown receive"
                    )));
                }
            };
            if n == sges.len() {
                return Err(Err(format!(
                    "queue {qid}: more than 16 receive completions"
                )));
            }
            // The device's byte count is not trusted: at most the buffer.
            let len = (wc.byte_len as usize).min(self.slot);
            let mut capsule = self.spare.pop().unwrap_or_default();
            capsule.resize(len, 0);
            // SAFETY: receive buffer `i` completed and is not posted again before this copy
            // ends: neither the device nor another thread writes it meanwhile.
            if unsafe { self.recv.mem.read_unsync(i * self.slot, &mut capsule) }.is_err() {
                return Err(Err(format!("queue {qid}: reading a capsule")));
            }
            self.pending.push_back(capsule);
            sges[n] = self.recv.sge(i * self.slot, self.slot);
            ids[n] = i as u64;
            n += 1;
        }
        let wrs: [RecvWr<'_>; 16] = core::array::from_fn(|k| RecvWr {
            wr_id: ids[k],
            sg_list: core::slice::from_ref(&sges[k]),
        });
        self.dp
            .post_recv(&wrs[..n])
            .map_err(|e| Err(format!("queue {qid}: post_recv: {e:?}")))
    }

    /// Handles send-queue completions `wcs` (READs: the command goes on; SENDs: the slot is
    /// free), then starts deferred transfers that fit now. `Err`: the queue's end.
    fn take_sends(
        &mut self,
        wcs: &[WorkCompletion],
        now_ms: u64,
    ) -> Result<(), Result<(), String>> {
        let qid = self.qid;
        for wc in wcs {
            let slot = (wc.wr_id & 0xFFFF_FFFF) as usize;
            let kind = wc.wr_id & !0xFFFF_FFFF;
            if slot >= self.slots || !(kind == WR_READ || kind == WR_SEND) {
                return Err(Err(self.io_err(IoError::Unknown(wc.wr_id))));
            }
            if wc.status != WcStatus::Success {
                log!(
                    self.log,
                    "queue {qid}: {} completed with {:?}",
                    if kind == WR_READ { "RDMA READ" } else { "SEND" },
                    wc.status
                );
            }
            if wc.status == WcStatus::WrFlushErr {
                // The host disconnected while we answered (the QP is in error).
                return Err(Ok(()));
            }
            if kind == WR_SEND {
                if wc.status != WcStatus::Success {
                    return Err(Err(self.io_err(IoError::Completion(wc.status))));
                }
                self.release(slot);
                self.free.push(slot);
                continue;
            }
            let Some(mut req) = self.fetching[slot].take() else {
                return Err(Err(self.io_err(IoError::Unknown(wc.wr_id))));
            };
            self.reads -= 1;
            self.release(slot);
            let ok = wc.status == WcStatus::Success && {
                let len = req.remote().len as usize;
                // SAFETY: the READ into this slot completed; nothing else targets the slot
                // until its command's response is posted, and the staging registration
                // allows no remote access.
                unsafe {
                    self.staging
                        .mem
                        .read_unsync(slot * self.slot_len, &mut req.buffer_mut()[..len])
                }
                .is_ok()
            };
            let o = self.queue.data_fetched(req, ok, now_ms);
            if !self.outcome(slot, o).map_err(|e| Err(self.io_err(e)))? {
                return Err(Ok(()));
            }
        }
        if !self.resume().map_err(|e| Err(self.io_err(e)))? {
            return Err(Ok(()));
        }
        Ok(())
    }

    /// Starts pending capsules while slots and read credits allow (a command may need an
    /// RDMA READ). `Err`: the queue's end.
    fn start_commands(
        &mut self,
        now_ms: u64,
        stats: &ListenerStats,
    ) -> Result<(), Result<(), String>> {
        while !self.closing && self.reads < self.max_reads {
            let Some(slot) = self.free.pop() else { break };
            let Some(capsule) = self.pending.pop_front() else {
                self.free.push(slot);
                break;
            };
            stats.commands.fetch_add(1, Ordering::Relaxed);
            let o = self.queue.submit(&capsule, now_ms);
            self.spare.push(capsule);
            if !self.outcome(slot, o).map_err(|e| Err(self.io_err(e)))? {
                return Err(Ok(()));
            }
        }
        Ok(())
    }

    /// Ends the queue: disconnects `conn` (answers the host's DREQ, or sends ours: a
    /// Disconnect command, a failed controller), frees the registrations and closes the
    /// controller's queue. The caller then destroys `conn`. (A queue dropped without this
    /// leaves its registrations to the device's teardown.)
    pub fn finish(self, conn: &CmId<D>) {
        let _ = conn.disconnect();
        let QueueConn {
            mut queue,
            dp,
            recv,
            staging,
            resp,
            ..
        } = self;
        drop(dp);
        for b in [recv, staging, resp] {
            let _ = conn.dereg_mr(b.mr);
        }
        queue.close();
    }
}

/// One queue of a [`PolledTarget`] (its id is destroyed after [`QueueConn::finish`]).
struct Served<D: Provider> {
    id: CmId<D>,
    conn: QueueConn<D>,
}

/// Every queue of one listener from one loop: an asynchronous listener on a non-blocking
/// event channel; [`poll`](Self::poll) takes the manager's events (connection requests are
/// admitted at once, a peer's disconnect ends its queue) and polls each queue once.
pub struct PolledTarget<D: Provider> {
    target: Arc<Target>,
    // Dropped after the ids on it.
    queues: Vec<Served<D>>,
    listen: Option<CmId<D>>,
    chan: Option<EventChannel<D>>,
    staging: usize,
    stats: ListenerStats,
    log: Option<Log>,
    /// When the keep-alive timers were last checked (ms).
    checked_ms: u64,
}

impl<D: Provider> PolledTarget<D> {
    /// Listens on `addr` (an address of one of `cm`'s devices; port 4420 is NVMe-oF's) for
    /// `target`; `staging` is the largest transfer of one command (MDTS).
    pub fn listen(
        cm: &Cm<D>,
        addr: SocketAddr,
        target: Arc<Target>,
        staging: usize,
        log: Option<Log>,
    ) -> Result<PolledTarget<D>, cm::Error> {
        let chan = cm.create_event_channel()?;
        chan.set_nonblocking(true);
        let listen = cm.create_id(Some(&chan), 0, cm::PortSpace::TCP)?;
        listen.bind_addr(&addr)?;
        listen.listen(128)?;
        Ok(PolledTarget {
            target,
            queues: Vec::new(),
            listen: Some(listen),
            chan: Some(chan),
            staging,
            stats: ListenerStats::default(),
            log,
            checked_ms: 0,
        })
    }

    /// What the listener counted.
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }

    /// Queues being served.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// One pass at time `now_ms` (the keep-alive clock, milliseconds): the manager's events,
    /// then each queue once. True when something happened (poll again at once); false: the
    /// caller may relax.
    pub fn poll(&mut self, now_ms: u64) -> bool {
        let mut progress = false;
        if now_ms.saturating_sub(self.checked_ms) >= 100 {
            self.checked_ms = now_ms;
            for cntlid in self.target.check_keep_alive(now_ms) {
                log!(self.log, "controller {cntlid}: keep-alive timeout, failed");
            }
        }
        while let Some(Ok(mut ev)) = self.chan.as_ref().map(EventChannel::get_cm_event) {
            progress = true;
            match ev.event {
                EventType::ConnectRequest => {
                    let Some(id) = ev.take_id() else { continue };
                    match admit(
                        &self.target,
                        &id,
                        &ev.param,
                        self.staging,
                        &self.stats,
                        self.log,
                    ) {
                        Ok(Some(conn)) => {
                            log!(self.log, "queue {} accepted", conn.qid());
                            self.queues.push(Served { id, conn });
                        }
                        Ok(None) => id.destroy_ep(),
                        Err(e) => {
                            self.stats.failed.fetch_add(1, Ordering::Relaxed);
                            log!(self.log, "{e}");
                            id.destroy_ep();
                        }
                    }
                }
                EventType::Established => {}
                EventType::Disconnected
                | EventType::ConnectError
                | EventType::Unreachable
                | EventType::Rejected
                | EventType::DeviceRemoval => {
                    // The peer is gone (or never came): the queue ends now (its flushed
                    // receives would tell the same).
                    if let Some(i) = self.queues.iter().position(|s| s.id.handle() == ev.id) {
                        let s = self.queues.swap_remove(i);
                        if ev.event != EventType::Disconnected {
                            self.stats.failed.fetch_add(1, Ordering::Relaxed);
                        }
                        if ev.event == EventType::Disconnected {
                            log!(
                                self.log,
                                "queue {} closed: the host disconnected",
                                s.conn.qid()
                            );
                        } else {
                            log!(self.log, "queue {}: {:?}", s.conn.qid(), ev.event);
                        }
                        self.end(s);
                    }
                }
                _ => {}
            }
        }
        let mut i = 0;
        while i < self.queues.len() {
            match self.queues[i].conn.poll(now_ms, &self.stats) {
                Step::Busy => {
                    progress = true;
                    i += 1;
                }
                Step::Idle => i += 1,
                Step::Done(r) => {
                    progress = true;
                    let s = self.queues.swap_remove(i);
                    match r {
                        Ok(()) => log!(self.log, "queue {} closed", s.conn.qid()),
                        Err(e) => {
                            self.stats.failed.fetch_add(1, Ordering::Relaxed);
                            log!(self.log, "{e}");
                        }
                    }
                    self.end(s);
                }
            }
        }
        progress
    }

    fn end(&self, s: Served<D>) {
        s.conn.finish(&s.id);
        s.id.destroy_ep();
        self.stats.closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops listening and ends every queue still served (disconnecting its host); what
    /// dropping the target does too.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl<D: Provider> Drop for PolledTarget<D> {
    fn drop(&mut self) {
        for s in core::mem::take(&mut self.queues) {
            self.end(s);
        }
        if let Some(l) = self.listen.take() {
            l.destroy_ep();
        }
        if let Some(c) = self.chan.take() {
            c.destroy();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cm::ConnData;

    fn request(qid: u16, initiator_depth: u8) -> EventParam {
        let req = ConnectRequest {
            recfmt: 0,
            qid,
            hrqsize: 32,
            hsqsize: 31,
            cntlid: 0xffff,
        };
        EventParam::Conn(ConnData {
            private_data: req.encode().to_vec(),
            initiator_depth,
            ..ConnData::default()
        })
    }

    #[test]
    fn a_request_is_checked_before_any_resource_is_made() {
        let (req, ird) = check_request(&request(1, 4)).unwrap();
        assert_eq!((req.qid, req.hsqsize, ird), (1, 31, 4));
        // The read depth is the host's, at most MAX_READS.
        assert_eq!(check_request(&request(0, 200)).unwrap().1, MAX_READS);
        // A host that allows no RDMA READ of its memory cannot send keyed writes.
        assert_eq!(
            check_request(&request(0, 0)).unwrap_err(),
            RejectStatus::InvalidIrd
        );
        // No private data (a request id without its event), or a short one.
        assert_eq!(
            check_request(&EventParam::None).unwrap_err(),
            RejectStatus::InvalidLength
        );
        let EventParam::Conn(mut c) = request(0, 1) else {
            unreachable!()
        };
        c.private_data.truncate(8);
        assert_eq!(
            check_request(&EventParam::Conn(c)).unwrap_err(),
            RejectStatus::InvalidLength
        );
    }

    #[test]
    fn slots_follow_the_depth_and_the_staging_budget() {
        assert_eq!(slots_for(32, 128 << 10), MAX_IN_FLIGHT);
        assert_eq!(slots_for(4, 4096), 4);
        assert_eq!(slots_for(1, 4096), 1);
        // 4 MiB transfers: two slots fit the 8 MiB budget.
        assert_eq!(slots_for(32, 4 << 20), 2);
        assert_eq!(slots_for(32, 16 << 20), 2);
    }
}
