//! The host side of the RDMA binding: one connected queue.

use std::net::SocketAddr;

use cm::{CmId, ConnParam, DataPath, QpInitAttr};
use device_open::{Clock, Device};
use nvmf::capsule::{CQE_SIZE, Cqe, SQE_SIZE, Sgl, Sqe};
use nvmf::host::{Data, HostQueue, HostQueueState, HostTransport};
use nvmf::rdma::{ConnectRequest, Reject};
use verbs::{
    AccessFlags, Buffer, MemoryRegion, QpCap, RecvWr, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::STALL_LIMIT_NS;
use crate::net::Endpoint;

/// How a host queue is set up.
#[derive(Clone, Copy, Debug)]
pub struct QueueConfig {
    /// Queue id (0: admin).
    pub qid: u16,
    /// Entries (HSQSIZE + 1); at most 32 on the admin queue, 128 on I/O queues.
    pub depth: u16,
    /// Bytes of each command's data slot (the largest transfer of one command).
    pub slot_size: usize,
    /// In-capsule data this host may send (writes up to this size go in the capsule); 0 on
    /// the admin queue (a Linux target takes none there).
    pub inline: usize,
}

/// Why a connection did not come up.
#[derive(Debug)]
pub enum ConnectError {
    /// The target rejected it with NVMe reject data (`None`: without).
    Rejected(Option<Reject>),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Rejected(Some(r)) => {
                write!(
                    f,
                    "rejected: NVMe status {:?} (record format {})",
                    r.status, r.recfmt
                )
            }
            ConnectError::Rejected(None) => write!(f, "rejected without NVMe reject data"),
            ConnectError::Other(s) => f.write_str(s),
        }
    }
}

/// Why a command did not complete.
#[derive(Debug)]
pub enum XferError {
    /// A post failed.
    Post(verbs::PostError),
    /// Polling failed.
    Poll(cm::Error),
    /// A work completion with an error (the connection is gone).
    Completion(WcStatus),
    /// No response within [`STALL_LIMIT_NS`].
    Stalled,
    /// A DMA access, a slot out of range, or a response that is not 16 bytes.
    Bad(&'static str),
}

/// Memory on the queue's device and its registration.
struct Reg<D: Device> {
    mem: Buffer,
    mr: D::Mr,
}

/// One host queue: a connected id with registered capsule, response and data buffers.
///
/// Data slot `t` (`t` the command id's tag, bits 11:0) is `slot_size` bytes of the data
/// buffer, registered for remote read and write: a command's keyed SGL points there.
pub struct HostConn<D: Device> {
    id: CmId<D>,
    dp: DataPath<D>,
    clock: Clock,
    cfg: QueueConfig,
    send: Reg<D>,
    recv: Reg<D>,
    data: Reg<D>,
    /// Unsignalled sends since the last signalled one.
    unsignalled: u32,
    connected: bool,
    /// Keyed SGLs ask the target to invalidate the key (subtype 0xF).
    ask_invalidate: bool,
}

impl<D: Device> HostConn<D> {
    /// Connects queue `cfg.qid` from `ep` to the target at `dst`, with the connect request
    /// private data of `cfg`.
    pub fn connect(
        ep: &Endpoint<D>,
        dst: SocketAddr,
        cfg: QueueConfig,
    ) -> Result<HostConn<D>, ConnectError> {
        let other = |what: &str| {
            let what = what.to_string();
            move |e: cm::Error| ConnectError::Other(format!("queue {}: {what}: {e:?}", cfg.qid))
        };
        let res = ep.route_to(dst).map_err(ConnectError::Other)?;
        let depth = u32::from(cfg.depth.max(1));
        let mut attr = QpInitAttr {
            cap: QpCap {
                // Sends are signalled in batches and their completions may trail the
                // responses: room for a second round.
                max_send_wr: 2 * depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..QpInitAttr::default()
        };
        let id = ep
            .cm
            .create_ep(&res, None, Some(&mut attr))
            .map_err(other("create_ep"))?;
        let reg = |len: usize, access: AccessFlags| -> Result<Reg<D>, ConnectError> {
            let mem = id.alloc_buf(len.max(64)).map_err(other("alloc_buf"))?;
            let mr = id
                .with_verbs(|v| {
                    let pd = v.pd.ok_or(cm::Error::InvalidArgument)?;
                    v.provider
                        .reg_mr(pd, mem.clone(), access)
                        .map_err(cm::Error::from)
                })
                .and_then(|r| r)
                .map_err(other("reg_mr"))?;
            Ok(Reg { mem, mr })
        };
        let slot = SQE_SIZE + cfg.inline;
        let send = reg(depth as usize * slot, AccessFlags::LOCAL_WRITE)?;
        let recv = reg(depth as usize * CQE_SIZE, AccessFlags::LOCAL_WRITE)?;
        let data = reg(
            depth as usize * cfg.slot_size.max(1),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )?;
        let dp = id.data_path().map_err(other("data path"))?;
        let mut q = HostConn {
            id,
            dp,
            clock: ep.clock.clone(),
            cfg,
            send,
            recv,
            data,
            unsignalled: 0,
            connected: false,
            ask_invalidate: false,
        };
        for i in 0..depth {
            q.post_recv(i as usize)
                .map_err(|e| ConnectError::Other(format!("post_recv: {e:?}")))?;
        }
        let req = HostQueueState::new(cfg.qid, cfg.depth).connect_request();
        let pd = req.encode();
        let max_rd =
            q.id.with_verbs(|v| v.provider.query_device().map(|a| a.max_qp_rd_atom))
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or(1)
                .clamp(1, 16) as u8;
        match q.id.connect(Some(&ConnParam {
            private_data: &pd,
            // The target RDMA READs this host's data: offer responder resources.
            responder_resources: max_rd,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        })) {
            Ok(()) => {}
            Err(cm::Error::ConnectionRefused) => {
                let rej =
                    q.id.event()
                        .and_then(|e| Reject::decode(e.param.private_data()));
                return Err(ConnectError::Rejected(rej));
            }
            Err(e) => return Err(other("connect")(e)),
        }
        q.connected = true;
        Ok(q)
    }

    /// The clock of the queue's device (what the target's keep-alive timer runs on in the
    /// embedded mode's virtual time, too).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The queue's setup.
    pub fn config(&self) -> QueueConfig {
        self.cfg
    }

    /// The connect request this queue sent.
    pub fn connect_request(&self) -> ConnectRequest {
        HostQueueState::new(self.cfg.qid, self.cfg.depth).connect_request()
    }

    fn post_recv(&self, i: usize) -> Result<(), verbs::PostError> {
        let sge = [Sge {
            addr: self.recv.mr.addr() + (i * CQE_SIZE) as u64,
            length: CQE_SIZE as u32,
            lkey: self.recv.mr.lkey(),
        }];
        self.dp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: &sge,
        }])
    }

    /// The data slot of tag `t` (to fill before a write, to read after a read).
    pub fn slot(&self, t: usize) -> Option<Buffer> {
        let s = self.cfg.slot_size;
        if t >= usize::from(self.cfg.depth) {
            return None;
        }
        self.data.mem.slice(t * s..t * s + s).ok()
    }

    /// With `on`, keyed SGLs carry the invalidate subtype (0xF): the host asks the target to
    /// answer with SEND with invalidate of the data buffer's key. Off by default: the buffers
    /// are ordinary registrations, which a SEND with invalidate cannot invalidate (the device
    /// refuses it and the queue fails); for tests of a target's answer.
    pub fn set_ask_invalidate(&mut self, on: bool) {
        self.ask_invalidate = on;
    }

    /// Sends `sqe` (its command id already set; tag = data slot) with `len` bytes of data in
    /// its data slot: `to_controller` data goes in the capsule when it fits the queue's
    /// in-capsule size, else (and controller-to-host data always) a keyed SGL names the slot;
    /// no data: a null keyed SGL.
    pub fn submit(
        &mut self,
        sqe: &mut Sqe,
        len: usize,
        to_controller: bool,
    ) -> Result<(), XferError> {
        let tag = usize::from(sqe.cid & 0xFFF);
        if tag >= usize::from(self.cfg.depth) || len > self.cfg.slot_size {
            return Err(XferError::Bad("slot"));
        }
        let slot = SQE_SIZE + self.cfg.inline;
        let off = tag * slot;
        let mut total = SQE_SIZE;
        if len == 0 {
            sqe.sgl = Sgl::NULL;
        } else if to_controller && self.cfg.qid != 0 && len <= self.cfg.inline {
            sqe.sgl = Sgl::InCapsule {
                offset: 0,
                len: len as u32,
            };
            let mut tmp = vec![0u8; len];
            self.data
                .mem
                .read(tag * self.cfg.slot_size, &mut tmp)
                .map_err(|_| XferError::Bad("dma"))?;
            self.send
                .mem
                .write(off + SQE_SIZE, &tmp)
                .map_err(|_| XferError::Bad("dma"))?;
            total += len;
        } else {
            sqe.sgl = Sgl::Keyed {
                addr: self.data.mr.addr() + (tag * self.cfg.slot_size) as u64,
                len: len as u32,
                key: self.data.mr.rkey(),
                invalidate: self.ask_invalidate,
            };
        }
        self.send
            .mem
            .write(off, &sqe.encode())
            .map_err(|_| XferError::Bad("dma"))?;
        // Signal every so often so that the send queue's entries are freed.
        let signal = self.unsignalled + 1 >= u32::from(self.cfg.depth).div_ceil(2);
        let sge = [Sge {
            addr: self.send.mr.addr() + off as u64,
            length: total as u32,
            lkey: self.send.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: tag as u64,
            opcode: WrOpcode::Send,
            flags: if signal {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            },
            sg_list: &sge,
            ..SendWr::default()
        };
        // The send queue holds the SENDs of commands answered before their signalled
        // completion came back: when it is full, reap send completions and post again.
        let start = nic_hal::Platform::now_ns(&self.clock);
        loop {
            match self.dp.post_send(std::slice::from_ref(&wr)) {
                Ok(()) => break,
                Err(e) if e.error == verbs::Error::NoMemory => {
                    self.reap_sends()?;
                    if nic_hal::Platform::now_ns(&self.clock).saturating_sub(start) > STALL_LIMIT_NS
                    {
                        return Err(XferError::Stalled);
                    }
                    nic_hal::Platform::relax(&self.clock);
                }
                Err(e) => return Err(XferError::Post(e)),
            }
        }
        if signal {
            self.unsignalled = 0;
        } else {
            self.unsignalled += 1;
        }
        Ok(())
    }

    /// Reaps send completions (their queue entries become free); errors when one failed.
    fn reap_sends(&mut self) -> Result<(), XferError> {
        let mut wcs = [WorkCompletion::default(); 16];
        let n = self.dp.poll_send_cq(&mut wcs).map_err(XferError::Poll)?;
        if let Some(wc) = wcs[..n].iter().find(|w| w.status != WcStatus::Success) {
            return Err(XferError::Completion(wc.status));
        }
        Ok(())
    }

    /// Responses that arrived (raw 16 bytes each, decoded), appended to `out`; send
    /// completions are reaped on the way. Errors when a completion failed.
    pub fn poll(&mut self, out: &mut Vec<Cqe>) -> Result<usize, XferError> {
        self.reap_sends()?;
        let mut wcs = [WorkCompletion::default(); 16];
        let n = self.dp.poll_recv_cq(&mut wcs).map_err(XferError::Poll)?;
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(XferError::Completion(wc.status));
            }
            let i = wc.wr_id as usize;
            if i >= usize::from(self.cfg.depth) || wc.byte_len as usize != CQE_SIZE {
                return Err(XferError::Bad("response"));
            }
            let mut b = [0u8; CQE_SIZE];
            self.recv
                .mem
                .read(i * CQE_SIZE, &mut b)
                .map_err(|_| XferError::Bad("dma"))?;
            self.post_recv(i).map_err(XferError::Post)?;
            out.push(Cqe::decode(&b).ok_or(XferError::Bad("response"))?);
        }
        Ok(n)
    }

    /// Waits for at least one response.
    pub fn wait(&mut self, out: &mut Vec<Cqe>) -> Result<usize, XferError> {
        let start = nic_hal::Platform::now_ns(&self.clock);
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            if nic_hal::Platform::now_ns(&self.clock).saturating_sub(start) > STALL_LIMIT_NS {
                return Err(XferError::Stalled);
            }
            nic_hal::Platform::relax(&self.clock);
        }
    }

    /// Disconnects (waits for the target's answer) and frees the buffers.
    pub fn close(mut self) {
        if self.connected {
            let _ = self.id.disconnect();
            self.connected = false;
        }
        let HostConn {
            id,
            send,
            recv,
            data,
            dp,
            ..
        } = self;
        drop(dp);
        for r in [send, recv, data] {
            let _ = id.dereg_mr(r.mr);
        }
        id.destroy_ep();
    }
}

impl<D: Device> HostTransport for HostConn<D> {
    type Error = XferError;

    fn execute(&mut self, sqe: &mut Sqe, data: Data<'_>) -> Result<[u8; 16], XferError> {
        let tag = usize::from(sqe.cid & 0xFFF);
        let slot = self.slot(tag).ok_or(XferError::Bad("slot"))?;
        let (len, out) = match &data {
            Data::None => (0, false),
            Data::ToController(d) => {
                if d.len() > slot.len() {
                    return Err(XferError::Bad("transfer above the slot size"));
                }
                slot.write(0, d).map_err(|_| XferError::Bad("dma"))?;
                (d.len(), true)
            }
            Data::FromController(b) => {
                if b.len() > slot.len() {
                    return Err(XferError::Bad("transfer above the slot size"));
                }
                (b.len(), false)
            }
        };
        self.submit(sqe, len, out)?;
        let mut got = Vec::new();
        while got.is_empty() {
            self.wait(&mut got)?;
        }
        let cqe = got[0];
        if let Data::FromController(b) = data
            && cqe.status.is_success()
        {
            slot.read(0, b).map_err(|_| XferError::Bad("dma"))?;
        }
        Ok(cqe.encode())
    }
}

/// A synchronous host queue over RDMA.
pub type RdmaHostQueue<D> = HostQueue<HostConn<D>>;

/// Connects queue `cfg.qid` and wraps it for [`HostQueue`]'s commands.
pub fn connect_queue<D: Device>(
    ep: &Endpoint<D>,
    dst: SocketAddr,
    cfg: QueueConfig,
) -> Result<RdmaHostQueue<D>, ConnectError> {
    let conn = HostConn::connect(ep, dst, cfg)?;
    Ok(HostQueue::new(cfg.qid, cfg.depth, conn))
}
