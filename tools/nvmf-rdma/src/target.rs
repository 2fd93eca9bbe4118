//! The target side of the RDMA binding: a listener, and one thread per queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cm::{CmId, ConnParam, DataPath, EventParam, QpInitAttr};
use device_open::{Clock, Device};
use nvmf::capsule::{CQE_SIZE, SQE_SIZE};
use nvmf::rdma::{ConnectRequest, Reject, RejectStatus};
use nvmf::target::{RemoteBuffer, Served, Target, TargetTransport, serve};
use verbs::{
    Buffer, MemoryRegion, QpCap, RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::{STALL_LIMIT_NS, now_ms};

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
            target.check_keep_alive(now_ms(clock));
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

/// One accepted queue's RDMA resources: what [`serve`] moves bytes through.
struct Io<'a, D: Device> {
    dp: &'a DataPath<D>,
    staging: &'a Reg<D>,
    resp: &'a Reg<D>,
    clock: &'a Clock,
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
    /// No completion within [`STALL_LIMIT_NS`].
    Stalled,
    /// The transfer exceeds the staging buffer (MDTS).
    TooLong,
    /// A DMA buffer access failed.
    Dma,
}

impl<D: Device> Io<'_, D> {
    /// Posts `wr` (signalled) and waits for its completion (the send CQ sees nothing else
    /// signalled: earlier unsignalled requests complete before it on RC).
    fn post_wait(&self, wr: SendWr<'_, D::Ah>) -> Result<(), IoError> {
        self.dp
            .post_send(std::slice::from_ref(&wr))
            .map_err(IoError::Post)?;
        let start = nic_hal::Platform::now_ns(self.clock);
        let mut wc = [WorkCompletion::default()];
        loop {
            match self.dp.poll_send_cq(&mut wc) {
                Ok(0) => {}
                Ok(_) if wc[0].status == WcStatus::Success => return Ok(()),
                Ok(_) => return Err(IoError::Completion(wc[0].status)),
                Err(e) => return Err(IoError::Poll(e)),
            }
            if nic_hal::Platform::now_ns(self.clock).saturating_sub(start) > STALL_LIMIT_NS {
                return Err(IoError::Stalled);
            }
            nic_hal::Platform::relax(self.clock);
        }
    }
}

impl<D: Device> TargetTransport for Io<'_, D> {
    type Error = IoError;

    fn read_remote(&mut self, remote: RemoteBuffer, buf: &mut [u8]) -> Result<(), IoError> {
        if buf.len() > self.staging.mem.len() {
            return Err(IoError::TooLong);
        }
        let sge = [self.staging.sge(0, buf.len())];
        self.post_wait(SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaRead,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: remote.addr,
                rkey: remote.key,
            },
            ..SendWr::default()
        })?;
        self.staging.mem.read(0, buf).map_err(|_| IoError::Dma)
    }

    fn write_remote(&mut self, remote: RemoteBuffer, data: &[u8]) -> Result<(), IoError> {
        if data.len() > self.staging.mem.len() {
            return Err(IoError::TooLong);
        }
        self.staging.mem.write(0, data).map_err(|_| IoError::Dma)?;
        let sge = [self.staging.sge(0, data.len())];
        // Unsignalled: the response SEND that follows completes after it.
        let wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaWrite,
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: remote.addr,
                rkey: remote.key,
            },
            ..SendWr::default()
        };
        self.dp
            .post_send(std::slice::from_ref(&wr))
            .map_err(IoError::Post)
    }

    fn send_response(
        &mut self,
        cqe: &[u8; CQE_SIZE],
        _invalidate: Option<u32>,
    ) -> Result<(), IoError> {
        // No SEND with invalidate in the verbs layer: a plain SEND (see the crate doc).
        self.resp.mem.write(0, cqe).map_err(|_| IoError::Dma)?;
        let sge = [self.resp.sge(0, CQE_SIZE)];
        self.post_wait(SendWr {
            wr_id: 3,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            ..SendWr::default()
        })
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
    let mut attr = QpInitAttr {
        cap: QpCap {
            // Each command is answered before the next is taken: at most a WRITE and a SEND.
            max_send_wr: 8,
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
        let staging = Reg::<D>::new(&conn, staging.max(4096))?;
        let resp = Reg::<D>::new(&conn, CQE_SIZE)?;
        let r = run_queue(
            &conn, &mut queue, req, ird, acc, depth, slot, &recv, &staging, &resp, clock, stats,
        );
        for b in [recv, staging, resp] {
            let _ = conn.dereg_mr(b.mr);
        }
        r
    })();
    queue.close();
    conn.destroy_ep();
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
    recv: &Reg<D>,
    staging: &Reg<D>,
    resp: &Reg<D>,
    clock: &Clock,
    stats: &ListenerStats,
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
    let mut io = Io {
        dp: &dp,
        staging,
        resp,
        clock,
    };
    let mut wcs = [WorkCompletion::default(); 16];
    let mut capsule = vec![0u8; slot];
    let result = 'run: loop {
        if !queue.is_live() {
            break Ok(());
        }
        let n = match dp.poll_recv_cq(&mut wcs) {
            Ok(n) => n,
            Err(e) => break Err(format!("queue {}: poll: {e:?}", req.qid)),
        };
        if n == 0 {
            nic_hal::Platform::relax(clock);
            continue;
        }
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                // Flushed: the host disconnected (or the QP failed).
                break 'run Ok(());
            }
            let i = wc.wr_id as u32;
            if i >= depth {
                break 'run Err(format!(
                    "queue {}: completion of an unknown receive",
                    req.qid
                ));
            }
            let len = (wc.byte_len as usize).min(slot);
            if recv
                .mem
                .read(i as usize * slot, &mut capsule[..len])
                .is_err()
            {
                break 'run Err(format!("queue {}: reading a capsule", req.qid));
            }
            if let Err(e) = post_recv(i) {
                break 'run Err(e);
            }
            stats.commands.fetch_add(1, Ordering::Relaxed);
            match serve(queue, &mut io, &capsule[..len], now_ms(clock)) {
                Ok(Served::Responded | Served::Held) => {}
                Ok(Served::RespondedAndClosed | Served::Disconnect) => break 'run Ok(()),
                // Flushed: the host disconnected while we answered (the QP is in error).
                Err(IoError::Completion(WcStatus::WrFlushErr)) => break 'run Ok(()),
                Err(e) => break 'run Err(format!("queue {}: transport: {e:?}", req.qid)),
            }
            for r in queue.take_events() {
                if let Err(e) = nvmf::target::send(&mut io, &r) {
                    break 'run Err(format!("queue {}: event: {e:?}", req.qid));
                }
            }
        }
    };
    // Answers the host's DREQ, or sends ours (Disconnect, a failed controller).
    let _ = conn.disconnect();
    result
}

fn stats_accepted(stats: &ListenerStats) {
    stats.accepted.fetch_add(1, Ordering::Relaxed);
}
