//! The data path of the emulated EFA (`docs/efa.md#data-path`, `docs/efa.md#device-model`):
//! low-latency send queues in BAR2, receive rings and completion rings in host memory, the
//! doorbell BAR, UD (Q_Key checked, unreliable) and SRD (reliable, unordered, at most once,
//! retransmitted by the device) over a fabric port in the emulator's own encapsulation
//! ([`super::wire`]).
//!
//! Model rules beyond the contract:
//! * the device routes by the low four bytes of a destination GID, taken as an IPv4 address
//!   (the testbed gives each device the IPv4-mapped GID of its port address);
//! * SRD: every message is numbered in its context (sender QP incarnation, destination
//!   address and QP); the responder remembers the outcome of the last [`DEDUP_WINDOW`]
//!   messages of a context and answers a duplicate with it without delivering it again. The
//!   requester retransmits what is unacknowledged [`MAX_RETRIES`] times, waiting [`RTO_NS`]
//!   before the first and doubling the wait each time up to [`RTO_MAX_NS`] ([`rto_after`]:
//!   about 1.5 s in all, so a peer descheduled for a moment on a loaded host, or an ARP
//!   exchange on an Ethernet link, is not mistaken for a dead one), then completes with
//!   LOCAL_ERROR_UNRESP_REMOTE. A NAK with REMOTE_ERROR_RNR is retried
//!   after [`RNR_DELAY_NS`] while the QP's `rnr_retry` allows (7: for ever);
//! * SRD paces what it sends with a send window per destination address (not per QP: what
//!   overflows is the receiving port, one socket or link shared by every QP of the peer
//!   device, so every QP sending to a peer shares one budget). A packet counts while it is
//!   unacknowledged: a send or write chunk until its acknowledgement (or NAK), a read
//!   response chunk from the request that asks for it until it arrives. At most the window
//!   ([`SRD_WINDOW_INIT`] at first, between [`SRD_WINDOW_MIN`] and [`SRD_WINDOW_MAX`]) is
//!   in flight; the rest of a WQE, and WQEs behind it, wait in the device (in the order they
//!   were posted) and go as acknowledgements free room. A timeout takes the operation's
//!   unacknowledged packets out of flight as lost and halves the window (at most once per
//!   [`RTO_NS`]); they are sent again through the window like new ones (retransmissions
//!   count against it). Acknowledgements grow it again by one packet per window's worth
//!   (AIMD; no slow start: a burst never exceeds the window it starts with). A read asks
//!   for as many response chunks as there is room for (a request names its first chunk and
//!   count), so a large read is spread over several requests; a read that lost chunks asks
//!   again for those only. The retransmission timer of an operation runs while it has
//!   packets in flight and restarts from [`RTO_NS`] whenever one of them is acknowledged;
//!   waiting for room is not a retry;
//! * RDMA read and write move up to `max_rdma_size` bytes in chunks of at most the MTU, each
//!   acknowledged (write) or answered (read) on its own; a lost chunk is asked for again;
//! * completion events: a CQ doorbell with the arm bit arms an interrupt-mode CQ for one
//!   event; the next completion written to it (any sub-CQ) writes one completion EQE into
//!   its EQ and disarms it. Completions that came before the arm raise nothing. An EQ raises
//!   its MSI-X vector for an EQE only while armed (an EQ_DB with the arm bit), and disarms;
//!   EQEs written while it is not armed wait in the ring for the driver. Arming a CQ that
//!   has no EQ is a driver mistake (recorded, ignored).

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;

use firmware_interface::efa::admin;
use firmware_interface::efa::cmds::{create_qp_cmd, modify_qp_cmd};
use firmware_interface::efa::feature::device_attr as d;
use firmware_interface::efa::io::{
    self, CDESC_HAS_IMM, CDESC_OP_TYPE_SHIFT, CDESC_Q_TYPE_SHIFT, CTRL1_HAS_IMM, CTRL1_INLINE_MSG,
    CTRL1_META_DESC, CTRL1_META_EXTENSION, CTRL1_OP_TYPE_MASK, CTRL2_COMP_REQ, CTRL2_FIRST,
    CTRL2_LAST, CTRL2_PHASE, LKEY_MASK, Q_TYPE_RECV, Q_TYPE_SEND, RX_FIRST, RX_LAST, RemoteMemAddr,
    RxCqe, RxDesc, TxBufDesc, TxCqe, TxMetaDesc, comp_status as cs, op_type,
};
use firmware_interface::{Le16, Le32};

use super::wire::{self, Hdr};
use super::{Device, DeviceError};

/// SRD retransmission timeout of a first transmission.
pub const RTO_NS: u64 = 1_000_000;
/// The longest SRD retransmission timeout (the doubling stops there).
pub const RTO_MAX_NS: u64 = 512 * RTO_NS;

/// The wait before retransmitting again after `retries` retransmissions: [`RTO_NS`] doubled
/// per retransmission, at most [`RTO_MAX_NS`].
pub const fn rto_after(retries: u8) -> u64 {
    let shift = if retries > 9 { 9 } else { retries as u32 };
    let t = RTO_NS << shift;
    if t > RTO_MAX_NS { RTO_MAX_NS } else { t }
}
/// Retransmissions before an SRD operation fails with LOCAL_ERROR_UNRESP_REMOTE.
pub const MAX_RETRIES: u8 = 10;
/// Delay before an SRD send that met an RNR NAK is tried again.
pub const RNR_DELAY_NS: u64 = 1_000_000;
/// Message outcomes an SRD responder remembers per context.
pub const DEDUP_WINDOW: usize = 4096;
/// Frames taken from the port per [`Device::poll`].
const RX_BUDGET: usize = 1024;
/// The SRD send window of a destination the device has not sent to yet, in packets.
pub const SRD_WINDOW_INIT: u32 = 32;
/// The smallest SRD send window (a timeout halves it down to this).
pub const SRD_WINDOW_MIN: u32 = 4;
/// The largest SRD send window: 128 packets of at most an MTU (8928 bytes by default) are
/// about 1.1 MiB, a fraction of the 4 MiB receive buffer the UDP fabric asks for, so a few
/// senders' full windows still fit in one receiver's socket.
pub const SRD_WINDOW_MAX: u32 = 128;

/// REG_MR permission bits.
const PERM_LOCAL_WRITE: u8 = 1;
const PERM_REMOTE_WRITE: u8 = 2;
const PERM_REMOTE_READ: u8 = 4;

/// Counters of the data path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataStats {
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames the port refused, or that had no port to go to.
    pub tx_dropped: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Received frames that were not this encapsulation or failed its checks (ICRC).
    pub rx_malformed: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub rx_qkey_mismatch: u64,
    /// UD packets dropped: no such QP, QP not ready, no receive posted.
    pub rx_dropped: u64,
    /// SRD messages received again after they were delivered (answered, not delivered).
    pub rx_duplicates: u64,
    /// SRD packets sent again (timeouts and RNR retries).
    pub retransmits: u64,
    /// SRD messages delivered to a receive queue.
    pub srd_delivered: u64,
    /// The most SRD packets that were ever unacknowledged to one destination at once (never
    /// above [`SRD_WINDOW_MAX`], nor above that destination's window at the time).
    pub srd_window_peak: u64,
    /// Times an SRD send window was halved after a timeout.
    pub srd_window_cuts: u64,
    /// Received frames dropped by the simulated receive buffer
    /// ([`super::Faults::rx_buffer_frames`]).
    pub rx_overflow: u64,
}

/// The data-path state of a QP.
#[derive(Debug, Default)]
pub(crate) struct QpDp {
    /// SQ depth (WQEs).
    pub sq_depth: u32,
    /// Bytes of an LLQ entry: 64, or 128 on a device with `data_polling_128` when CREATE_QP
    /// asked for them (ring size = depth × 128).
    pub wqe_size: usize,
    /// The LLQ: the SQ ring as written into BAR2.
    pub llq: Vec<u8>,
    /// WQEs consumed (16-bit running counter, like the doorbell).
    pub sq_cc: u16,
    /// RQ ring address and descriptor count.
    pub rq_base: u64,
    pub rq_descs: u32,
    /// RQ producer (last doorbell) and consumer, in descriptors.
    pub rq_pc: u16,
    pub rq_cc: u16,
    /// Next message number per SRD context `(destination, destination QP)`.
    pub msg_seq: BTreeMap<(Ipv4Addr, u16), u32>,
}

/// Where one packet of an SRD operation is (a send or write chunk, or a read response
/// chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// Not sent (or, for a read, not asked for) yet.
    Unsent,
    /// Sent and taken for lost (a timeout or an RNR NAK): to be sent again.
    Lost,
    /// In flight: counts against the destination's window.
    Sent,
    /// Acknowledged (send, write) or received (read).
    Done,
}

impl Unit {
    fn to_send(self) -> bool {
        matches!(self, Unit::Unsent | Unit::Lost)
    }
}

/// An SRD operation waiting for its acknowledgements (send, write) or responses (read).
#[derive(Debug)]
pub(crate) struct Pending {
    handle: u32,
    req_id: u16,
    op: u8,
    comp: bool,
    /// The frame of each unit (send, write); empty for a read, whose requests are made as
    /// room allows from `read`.
    frames: Vec<Vec<u8>>,
    /// Read: the request header (its `chunk` and `imm` are set per request).
    read: Option<Hdr>,
    /// Every unit's state.
    units: Vec<Unit>,
    /// Units not done.
    left: usize,
    /// Units in flight ([`Unit::Sent`]).
    in_flight: usize,
    /// Read: where the response goes `(lkey, addr, len)`.
    local: Option<(u32, u64, u32)>,
    /// Write with immediate: the notice to send once every chunk is acknowledged.
    notice: Option<Hdr>,
    retries: u8,
    rnr_left: u8,
    /// Retransmission timer (while units are in flight), or the end of an RNR wait.
    deadline: Option<u64>,
    /// Waiting out an RNR NAK: not sent before `deadline`.
    rnr_hold: bool,
    /// In its destination's queue.
    queued: bool,
}

/// The send window of one destination.
#[derive(Debug)]
pub(crate) struct Flow {
    /// Packets that may be in flight.
    cwnd: u32,
    /// Acknowledgements counted towards the next increase.
    acked: u32,
    /// Packets in flight.
    in_flight: u32,
    /// Operations with units to send, in the order they became ready.
    queue: VecDeque<PendingKey>,
    /// When the window was last halved.
    last_cut: Option<u64>,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            cwnd: SRD_WINDOW_INIT,
            acked: 0,
            in_flight: 0,
            queue: VecDeque::new(),
            last_cut: None,
        }
    }

    /// An acknowledgement: one more packet per window's worth of them (additive increase).
    fn on_ack(&mut self) {
        self.acked += 1;
        if self.acked >= self.cwnd {
            self.acked = 0;
            self.cwnd = (self.cwnd + 1).min(SRD_WINDOW_MAX);
        }
    }

    /// A timeout: halves the window unless it was halved less than [`RTO_NS`] ago (every
    /// operation of a burst times out together); whether it did.
    fn on_loss(&mut self, now: u64) -> bool {
        if self
            .last_cut
            .is_some_and(|t| now < t.saturating_add(RTO_NS))
        {
            return false;
        }
        self.last_cut = Some(now);
        self.cwnd = (self.cwnd / 2).max(SRD_WINDOW_MIN);
        self.acked = 0;
        true
    }
}

/// `(local QPN, peer address, peer QPN, message)`.
type PendingKey = (u16, Ipv4Addr, u16, u32);
/// `(peer address, peer QP incarnation, local QPN)`.
type ContextKey = (Ipv4Addr, u32, u16);

/// The port and the transport state.
pub(crate) struct Net {
    pub port: Option<Box<dyn roce_wire::fabric::Port>>,
    pub clock: crate::Clock,
    pub pending: BTreeMap<PendingKey, Pending>,
    pub outcomes: BTreeMap<ContextKey, BTreeMap<u32, u8>>,
    /// The send window of every destination.
    pub flows: BTreeMap<Ipv4Addr, Flow>,
    pub stats: DataStats,
}

impl Default for Net {
    fn default() -> Self {
        let start = std::time::Instant::now();
        Net {
            port: None,
            clock: std::sync::Arc::new(move || {
                u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }),
            pending: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            flows: BTreeMap::new(),
            stats: DataStats::default(),
        }
    }
}

/// The IPv4 address a GID routes to (its low four bytes).
pub(crate) fn ip_of(gid: &[u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15])
}

/// The status a requester sees for a responder-side receive failure.
fn remote_status(rx: u8) -> u8 {
    match rx {
        cs::OK => cs::OK,
        cs::LOCAL_ERROR_BAD_LENGTH => cs::REMOTE_ERROR_BAD_LENGTH,
        _ => cs::REMOTE_ERROR_ABORT,
    }
}

impl Device {
    fn now(&self) -> u64 {
        (self.net.clock)()
    }

    /// The handle of the QP numbered `qpn`.
    fn handle_of(&self, qpn: u16) -> Option<u32> {
        self.obj
            .qps
            .iter()
            .find(|(_, q)| q.qpn == qpn)
            .map(|(h, _)| *h)
    }

    // ------------------------------------------------------------ BARs

    /// A write to BAR2, the low-latency queues: the LLQ of QP number `n` is at
    /// `n * max_llq_size`.
    pub(crate) fn llq_write(&mut self, off: usize, data: &[u8]) {
        let size = self.profile.max_llq_size as usize;
        let qpn = off.checked_div(size).unwrap_or(usize::MAX);
        let at = off.checked_rem(size).unwrap_or(0);
        let h = u16::try_from(qpn).ok().and_then(|n| self.handle_of(n));
        let q = h.and_then(|h| self.obj.qps.get_mut(&h));
        match q {
            Some(q) if at + data.len() <= q.dp.llq.len() => {
                q.dp.llq[at..at + data.len()].copy_from_slice(data);
            }
            _ => self.error(DeviceError::BadLlqWrite {
                offset: off,
                len: data.len(),
            }),
        }
    }

    /// A write to the doorbell BAR: SQ doorbell of QP `n` at `n * 8`, RQ doorbell at
    /// `n * 8 + 4`, CQ doorbells from `CQ_DB_BASE`.
    pub(crate) fn doorbell_write(&mut self, off: usize, data: &[u8]) {
        let Ok(b) = <[u8; 4]>::try_from(data) else {
            self.error(DeviceError::BadDoorbell {
                offset: off,
                value: 0,
            });
            return;
        };
        let v = u32::from_le_bytes(b);
        let cq_base = super::commands::CQ_DB_BASE as usize;
        if off >= cq_base {
            // CQ consumer index (a hint) and arm.
            let idx = u16::try_from((off - cq_base) / 4).ok();
            let cq = idx.filter(|_| off.is_multiple_of(4)).and_then(|i| {
                let c = self.obj.cqs.get_mut(&i)?;
                Some((i, c))
            });
            let Some((i, c)) = cq else {
                self.error(DeviceError::BadDoorbell {
                    offset: off,
                    value: v,
                });
                return;
            };
            if v & 1 << 31 != 0 {
                if c.eqn.is_none() {
                    self.error(DeviceError::ArmWithoutEq { cq: i });
                } else {
                    c.armed = true;
                    c.cmd_sn = (v >> 29 & 3) as u8;
                }
            }
            return;
        }
        let h = u16::try_from(off / 8).ok().and_then(|n| self.handle_of(n));
        match (h, off % 8) {
            (Some(h), 0) => self.sq_doorbell(h, v as u16),
            (Some(h), 4) => self.rq_doorbell(h, v as u16),
            _ => self.error(DeviceError::BadDoorbell {
                offset: off,
                value: v,
            }),
        }
    }

    fn rq_doorbell(&mut self, h: u32, pc: u16) {
        let Some(q) = self.obj.qps.get_mut(&h) else {
            return;
        };
        let (qpn, cc) = (q.qpn, q.dp.rq_cc);
        if u32::from(pc.wrapping_sub(cc)) > q.dp.rq_descs {
            self.error(DeviceError::ProducerAhead {
                qpn,
                producer: pc,
                consumer: cc,
            });
            return;
        }
        q.dp.rq_pc = pc;
    }

    fn sq_doorbell(&mut self, h: u32, pc: u16) {
        loop {
            let Some(q) = self.obj.qps.get_mut(&h) else {
                return;
            };
            let depth = q.dp.sq_depth;
            let i = q.dp.sq_cc;
            let ahead = pc.wrapping_sub(i);
            if ahead == 0 {
                return;
            }
            if u32::from(ahead) > depth || depth == 0 {
                let qpn = q.qpn;
                self.error(DeviceError::ProducerAhead {
                    qpn,
                    producer: pc,
                    consumer: i,
                });
                return;
            }
            let size = q.dp.wqe_size;
            let slot = (u32::from(i) % depth) as usize * size;
            let mut w = [0u8; io::TX_WQE128_SIZE];
            let Some(src) = q.dp.llq.get(slot..slot + size) else {
                return;
            };
            w[..size].copy_from_slice(src);
            let phase = ((u32::from(i) / depth) & 1) as u8;
            if w[3] & CTRL2_PHASE != phase {
                let qpn = q.qpn;
                self.error(DeviceError::SqPhase { qpn, index: i });
                return;
            }
            q.dp.sq_cc = i.wrapping_add(1);
            self.tx(h, &w[..size]);
        }
    }

    // ------------------------------------------------------------ memory

    /// The DMA pieces of `len` bytes at `addr` in the MR of `key` (PD `pd`, with `perm`);
    /// `None` when the key, PD, bounds or permissions do not allow it.
    fn translate(
        &self,
        key: u32,
        pd: u16,
        addr: u64,
        len: u64,
        perm: u8,
    ) -> Option<Vec<(u64, usize)>> {
        let mr = self.obj.mrs.get(&key)?;
        if mr.pd != pd || mr.access & perm != perm {
            return None;
        }
        let end = addr.checked_add(len)?;
        if addr < mr.iova || end > mr.iova.checked_add(mr.len)? {
            return None;
        }
        let page = 1u64 << mr.page_shift;
        let base = mr.iova & !(page - 1);
        let mut out = Vec::new();
        let mut at = addr;
        while at < end {
            let rel = at - base;
            let idx = usize::try_from(rel >> mr.page_shift).ok()?;
            let in_page = rel & (page - 1);
            let n = (page - in_page).min(end - at);
            out.push((mr.pages.get(idx)?.checked_add(in_page)?, n as usize));
            at += n;
        }
        Some(out)
    }

    fn read_pieces(&mut self, pieces: &[(u64, usize)], out: &mut Vec<u8>) -> bool {
        for &(a, n) in pieces {
            let at = out.len();
            out.resize(at + n, 0);
            if self.dma_read(a, &mut out[at..]).is_err() {
                return false;
            }
        }
        true
    }

    fn write_pieces(&mut self, pieces: &[(u64, usize)], mut data: &[u8]) -> bool {
        for &(a, n) in pieces {
            let n = n.min(data.len());
            if self.dma_write(a, &data[..n]).is_err() {
                return false;
            }
            data = &data[n..];
        }
        true
    }

    // ------------------------------------------------------------ completions

    /// Writes a 16-byte completion to sub-CQ `sub` of CQ `cq`: everything but the flags
    /// byte first, then the flags with the phase (a poller never sees a torn entry).
    fn write_cqe(&mut self, cq: u16, sub: u16, e: [u8; 16]) {
        self.write_cqe_ext(cq, sub, e, [0; 16]);
    }

    /// [`Device::write_cqe`] with `ext` as bytes 16..32 of an extended (32-byte) entry
    /// (dropped with 16-byte entries).
    fn write_cqe_ext(&mut self, cq: u16, sub: u16, mut e: [u8; 16], ext: [u8; 16]) {
        let Some(c) = self.obj.cqs.get_mut(&cq) else {
            return;
        };
        let depth = u32::from(c.depth).max(1);
        let Some(pc) = c.pc.get_mut(usize::from(sub)) else {
            return;
        };
        let n = *pc;
        *pc = n.wrapping_add(1);
        let slot = u64::from(sub) * u64::from(depth) + u64::from(n % depth);
        let size = usize::from(c.entry_size);
        let addr = c.base + slot * size as u64;
        e[3] = (e[3] & !io::CDESC_PHASE) | (((n / depth) & 1) ^ 1) as u8;
        let mut full = vec![0u8; size.max(16)];
        full[..16].copy_from_slice(&e);
        if size >= 32 {
            full[16..32].copy_from_slice(&ext);
        }
        let _ = self.dma_write(addr, &full[..3]);
        let _ = self.dma_write(addr + 4, &full[4..]);
        let _ = self.dma_write(addr + 3, &full[3..4]);
        if let Some(c) = self.obj.cqs.get_mut(&cq)
            && c.armed
            && let Some(eqn) = c.eqn
        {
            c.armed = false;
            self.completion_event(eqn, cq);
        }
    }

    /// Writes a completion EQE for CQ `cq` into EQ `eqn` (the common word, with the phase,
    /// last); raises the EQ's vector if it is armed.
    fn completion_event(&mut self, eqn: u16, cq: u16) {
        let Some(e) = self.obj.eqs.get_mut(&eqn) else {
            return;
        };
        let depth = u32::from(e.depth).max(1);
        let n = e.pc;
        e.pc = n.wrapping_add(1);
        e.events += 1;
        let addr = e.base + u64::from(n % depth) * admin::EQE_SIZE as u64;
        let phase = ((n / depth) & 1) ^ 1;
        let common = phase | admin::EQE_EVENT_COMPLETION << admin::EQE_EVENT_TYPE_SHIFT;
        let raise = std::mem::take(&mut e.armed).then_some(e.vector);
        let mut data = [0u8; 12];
        data[4..6].copy_from_slice(&cq.to_le_bytes());
        let _ = self.dma_write(addr + 4, &data);
        let _ = self.dma_write(addr, &common.to_le_bytes());
        if let Some(v) = raise {
            self.raise(v);
        }
    }

    fn tx_complete(&mut self, h: u32, req_id: u16, op: u8, status: u8, comp: bool) {
        let Some(q) = self.obj.qps.get(&h) else {
            return;
        };
        if !comp && status == cs::OK {
            return;
        }
        let c = TxCqe {
            req_id: Le16::new(req_id),
            status,
            flags: Q_TYPE_SEND << CDESC_Q_TYPE_SHIFT | (op & 7) << CDESC_OP_TYPE_SHIFT,
            qp_num: Le16::new(q.qpn),
            ..Default::default()
        };
        let (cq, sub) = (q.cqs.0, q.subs.0);
        self.write_cqe(cq, sub, c.to_bytes());
    }

    // ------------------------------------------------------------ transmit

    /// Executes the WQE `w` (64 or 128 bytes, the QP's LLQ entry size) and completes it.
    fn tx(&mut self, h: u32, w: &[u8]) {
        let Some(m) = TxMetaDesc::read_from(w) else {
            return;
        };
        let op = m.ctrl1 & CTRL1_OP_TYPE_MASK;
        let comp = m.ctrl2 & CTRL2_COMP_REQ != 0;
        match self.tx_inner(h, &m, &w[io::TX_DATA_OFF..]) {
            Ok(true) => {}
            Ok(false) => self.tx_complete(h, m.req_id.get(), op, cs::OK, comp),
            Err(s) => self.tx_complete(h, m.req_id.get(), op, s, comp),
        }
    }

    /// Executes one WQE: `Ok(true)` when it waits for the responder (SRD), `Ok(false)`
    /// when it is done, `Err(status)` when it failed.
    fn tx_inner(&mut self, h: u32, m: &TxMetaDesc, data: &[u8]) -> Result<bool, u8> {
        let q = self
            .obj
            .qps
            .get(&h)
            .ok_or(cs::LOCAL_ERROR_QP_INTERNAL_ERROR)?;
        let (qpn, pd, srd) = (q.qpn, q.pd, q.qp_type == create_qp_cmd::QP_TYPE_SRD);
        match q.state {
            modify_qp_cmd::QP_STATE_RTS => {}
            modify_qp_cmd::QP_STATE_ERR => return Err(cs::FLUSHED),
            _ => return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR),
        }
        let well_formed = m.ctrl1 & CTRL1_META_DESC != 0
            && m.ctrl1 & CTRL1_META_EXTENSION == 0
            && m.ctrl2 & (CTRL2_FIRST | CTRL2_LAST) == CTRL2_FIRST | CTRL2_LAST;
        if !well_formed {
            self.error(DeviceError::BadWqe {
                qpn,
                reason: "meta descriptor flags",
            });
            return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
        }
        let op = m.ctrl1 & CTRL1_OP_TYPE_MASK;
        let has_imm = m.ctrl1 & CTRL1_HAS_IMM != 0;
        let caps = self.profile.device_caps;
        match op {
            op_type::SEND => {}
            op_type::RDMA_READ if srd && caps & d::CAP_RDMA_READ != 0 && !has_imm => {}
            op_type::RDMA_WRITE if srd && caps & d::CAP_RDMA_WRITE != 0 => {}
            _ => return Err(cs::LOCAL_ERROR_UNSUPPORTED_OP),
        }
        // A 128-byte WQE's data area is 96 bytes, of which a WR uses its inline bytes, its
        // buffer descriptors or (RDMA) a remote address and one local buffer; the rest must be
        // zero (what a driver writes that builds its WQE in a zeroed buffer). A 64-byte WQE in
        // a 128-byte LLQ shows as the next WQE in that rest.
        if data.len() > io::TX_WQE_SIZE - io::TX_DATA_OFF {
            let used = match op {
                op_type::SEND if m.ctrl1 & CTRL1_INLINE_MSG != 0 => usize::from(m.length.get()),
                op_type::SEND => 16 * usize::from(m.length.get()),
                _ => 32,
            };
            if data.get(used..).is_some_and(|r| r.iter().any(|&b| b != 0)) {
                self.error(DeviceError::BadWqe {
                    qpn,
                    reason: "bytes past the WR's data in a 128-byte WQE (a 64-byte WQE?)",
                });
                return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
            }
        } else if op == op_type::SEND
            && m.ctrl1 & CTRL1_INLINE_MSG != 0
            && usize::from(m.length.get()) > io::TX_INLINE_MAX
        {
            // More inline bytes than a 64-byte WQE holds: a 128-byte WQE in a 64-byte LLQ.
            self.error(DeviceError::BadWqe {
                qpn,
                reason: "inline bytes past a 64-byte WQE (a 128-byte WQE?)",
            });
            return Err(cs::LOCAL_ERROR_BAD_LENGTH);
        }
        let ah = self
            .obj
            .ahs
            .get(&m.ah.get())
            .filter(|a| a.pd == pd)
            .ok_or(cs::LOCAL_ERROR_INVALID_AH)?;
        let dst = ip_of(&ah.dest);
        if self.net.port.is_none() {
            return Err(cs::LOCAL_ERROR_UNREACH_REMOTE);
        }
        let mut hdr = Hdr {
            dest_qpn: m.dest_qp_num.get(),
            src_qpn: qpn,
            src_qp_id: h,
            qkey: m.qkey.get(),
            src_gid: self.profile.gid,
            chunks: 1,
            ..Hdr::default()
        };
        let mtu = (self.profile.mtu as usize).max(1);
        if op == op_type::SEND {
            let len = usize::from(m.length.get());
            let mut payload = Vec::new();
            if m.ctrl1 & CTRL1_INLINE_MSG != 0 {
                // 32 inline bytes fit a 64-byte WQE, 80 a 128-byte one.
                let room = if data.len() > io::TX_WQE_SIZE - io::TX_DATA_OFF {
                    io::TX_INLINE_MAX_128
                } else {
                    io::TX_INLINE_MAX
                };
                if len > room || len > self.profile.inline_buf_size as usize {
                    return Err(cs::LOCAL_ERROR_BAD_LENGTH);
                }
                payload.extend_from_slice(&data[..len]);
            } else {
                if len > io::TX_BUF_DESCS || len > usize::from(self.profile.max_sges.0) {
                    return Err(cs::LOCAL_ERROR_BAD_LENGTH);
                }
                for i in 0..len {
                    let Some(b) = TxBufDesc::read_from(&data[16 * i..]) else {
                        return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
                    };
                    let pieces = self
                        .translate(
                            b.lkey.get() & LKEY_MASK,
                            pd,
                            b.addr(),
                            b.length.get().into(),
                            0,
                        )
                        .ok_or(cs::LOCAL_ERROR_INVALID_LKEY)?;
                    if payload.len() + b.length.get() as usize > mtu {
                        return Err(cs::LOCAL_ERROR_BAD_LENGTH);
                    }
                    if !self.read_pieces(&pieces, &mut payload) {
                        return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
                    }
                }
            }
            if payload.len() > mtu {
                return Err(cs::LOCAL_ERROR_BAD_LENGTH);
            }
            if has_imm {
                hdr.flags |= wire::FLAG_IMM;
                hdr.imm = m.immediate_data.get();
            }
            hdr.total = payload.len() as u32;
            if !srd {
                hdr.op = wire::OP_UD_SEND;
                self.send_frame(dst, &hdr, &payload);
                return Ok(false);
            }
            hdr.op = wire::OP_SRD_SEND;
            let frames = vec![payload];
            return self.start(h, m, dst, hdr, frames, None, None);
        }
        // RDMA: the remote address, then one local buffer.
        let (Some(r), Some(l)) = (
            RemoteMemAddr::read_from(data),
            TxBufDesc::read_from(&data[16..]),
        ) else {
            return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
        };
        let len = r.length.get();
        if m.length.get() != 1 || l.length.get() != len || len > self.profile.max_rdma_size {
            return Err(cs::LOCAL_ERROR_BAD_LENGTH);
        }
        hdr.rkey = r.rkey.get();
        hdr.raddr = u64::from(r.buf_addr_hi.get()) << 32 | u64::from(r.buf_addr_lo.get());
        hdr.total = len;
        let lkey = l.lkey.get() & LKEY_MASK;
        let chunks = (len as usize).div_ceil(mtu).max(1);
        if chunks > usize::from(u16::MAX) {
            return Err(cs::LOCAL_ERROR_BAD_LENGTH);
        }
        hdr.chunks = chunks as u16;
        if op == op_type::RDMA_READ {
            self.translate(lkey, pd, l.addr(), len.into(), PERM_LOCAL_WRITE)
                .ok_or(cs::LOCAL_ERROR_INVALID_LKEY)?;
            hdr.op = wire::OP_SRD_READ_REQ;
            return self.start(
                h,
                m,
                dst,
                hdr,
                vec![Vec::new()],
                Some((lkey, l.addr(), len)),
                None,
            );
        }
        let pieces = self
            .translate(lkey, pd, l.addr(), len.into(), 0)
            .ok_or(cs::LOCAL_ERROR_INVALID_LKEY)?;
        let mut all = Vec::with_capacity(len as usize);
        if !self.read_pieces(&pieces, &mut all) {
            return Err(cs::LOCAL_ERROR_QP_INTERNAL_ERROR);
        }
        hdr.op = wire::OP_SRD_WRITE;
        let notice = has_imm.then(|| Hdr {
            op: wire::OP_SRD_WRITE_IMM,
            flags: wire::FLAG_IMM,
            imm: m.immediate_data.get(),
            chunks: 1,
            rkey: 0,
            raddr: 0,
            ..hdr
        });
        let frames = all.chunks(mtu.max(1)).map(<[u8]>::to_vec).collect();
        self.start(h, m, dst, hdr, frames, None, notice)
    }

    /// Starts an SRD operation: numbers it in its context, sends its packets, and waits.
    /// `bodies` are the payloads of the chunks to send (one empty body for a read request);
    /// `notice`, of a write with immediate, follows once every chunk is acknowledged.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        h: u32,
        m: &TxMetaDesc,
        dst: Ipv4Addr,
        mut hdr: Hdr,
        bodies: Vec<Vec<u8>>,
        local: Option<(u32, u64, u32)>,
        notice: Option<Hdr>,
    ) -> Result<bool, u8> {
        let src = self
            .net
            .port
            .as_ref()
            .map(|p| p.addr())
            .ok_or(cs::LOCAL_ERROR_UNREACH_REMOTE)?;
        let q = self
            .obj
            .qps
            .get_mut(&h)
            .ok_or(cs::LOCAL_ERROR_QP_INTERNAL_ERROR)?;
        let seq = q.dp.msg_seq.entry((dst, hdr.dest_qpn)).or_insert(0);
        hdr.msg = *seq;
        *seq = seq.wrapping_add(1);
        let rnr = q.rnr_retry;
        let read = hdr.op == wire::OP_SRD_READ_REQ;
        let mut frames = Vec::with_capacity(bodies.len());
        let mut offset = 0u32;
        if !read {
            for (i, b) in bodies.iter().enumerate() {
                let mut c = hdr;
                if hdr.op == wire::OP_SRD_WRITE {
                    c.chunk = i as u16;
                    c.offset = offset;
                    offset += b.len() as u32;
                }
                frames.push(wire::frame(src, dst, &c, b).ok_or(cs::LOCAL_ERROR_BAD_LENGTH)?);
            }
        }
        let parts = if read {
            usize::from(hdr.chunks)
        } else {
            frames.len()
        };
        let key = (hdr.src_qpn, dst, hdr.dest_qpn, hdr.msg);
        self.net.pending.insert(
            key,
            Pending {
                handle: h,
                req_id: m.req_id.get(),
                op: m.ctrl1 & CTRL1_OP_TYPE_MASK,
                comp: m.ctrl2 & CTRL2_COMP_REQ != 0,
                frames,
                read: read.then_some(hdr),
                units: vec![Unit::Unsent; parts],
                left: parts,
                in_flight: 0,
                local,
                notice,
                retries: 0,
                rnr_left: rnr,
                deadline: None,
                rnr_hold: false,
                queued: false,
            },
        );
        self.enqueue(key);
        self.pump(dst);
        Ok(true)
    }

    /// A write with immediate whose chunks are all acknowledged: its notice goes out as a
    /// message of its own (numbered in the same context), and the WQE now waits for the
    /// notice's acknowledgement (RNR and retransmission as for a send).
    fn send_notice(&mut self, key: PendingKey, mut n: Hdr) {
        let Some(mut p) = self.take_pending(key) else {
            return;
        };
        let (_, dst, dest_qpn, _) = key;
        let src = self.net.port.as_ref().map(|p| p.addr());
        let Some(q) = self.obj.qps.get_mut(&p.handle) else {
            return;
        };
        let seq = q.dp.msg_seq.entry((dst, dest_qpn)).or_insert(0);
        n.msg = *seq;
        *seq = seq.wrapping_add(1);
        let rnr = q.rnr_retry;
        let Some(f) = src.and_then(|src| wire::frame(src, dst, &n, &[])) else {
            self.tx_complete(
                p.handle,
                p.req_id,
                p.op,
                cs::LOCAL_ERROR_UNREACH_REMOTE,
                p.comp,
            );
            return;
        };
        p.frames = vec![f];
        p.units = vec![Unit::Unsent];
        p.left = 1;
        p.in_flight = 0;
        p.retries = 0;
        p.rnr_left = rnr;
        p.deadline = None;
        p.rnr_hold = false;
        p.queued = false;
        let key = (key.0, dst, dest_qpn, n.msg);
        self.net.pending.insert(key, p);
        self.enqueue(key);
        self.pump(dst);
    }

    fn push_frame(&mut self, f: Vec<u8>) {
        let r = match &self.net.port {
            Some(p) => p.send(f).is_ok(),
            None => false,
        };
        if r {
            self.net.stats.tx_frames += 1;
        } else {
            self.net.stats.tx_dropped += 1;
        }
    }

    fn send_frame(&mut self, dst: Ipv4Addr, h: &Hdr, payload: &[u8]) {
        let Some(src) = self.net.port.as_ref().map(|p| p.addr()) else {
            self.net.stats.tx_dropped += 1;
            return;
        };
        match wire::frame(src, dst, h, payload) {
            Some(f) => self.push_frame(f),
            None => self.net.stats.tx_dropped += 1,
        }
    }

    fn finish(&mut self, key: PendingKey, status: u8) {
        if let Some(p) = self.take_pending(key) {
            self.tx_complete(p.handle, p.req_id, p.op, status, p.comp);
        }
    }

    /// Removes an operation; its units in flight leave its destination's window.
    fn take_pending(&mut self, key: PendingKey) -> Option<Pending> {
        let p = self.net.pending.remove(&key)?;
        if let Some(f) = self.net.flows.get_mut(&key.1) {
            f.in_flight = f.in_flight.saturating_sub(p.in_flight as u32);
        }
        Some(p)
    }

    /// Puts operation `key` in its destination's queue (once).
    fn enqueue(&mut self, key: PendingKey) {
        let Some(p) = self.net.pending.get_mut(&key) else {
            return;
        };
        if p.queued || p.rnr_hold {
            return;
        }
        p.queued = true;
        self.net
            .flows
            .entry(key.1)
            .or_insert_with(Flow::new)
            .queue
            .push_back(key);
    }

    /// Sends what the window of `dst` has room for, oldest operation first.
    fn pump(&mut self, dst: Ipv4Addr) {
        let src = self.net.port.as_ref().map(|p| p.addr());
        let now = self.now();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let net = &mut self.net;
        let flow = net.flows.entry(dst).or_insert_with(Flow::new);
        while flow.in_flight < flow.cwnd {
            let Some(&key) = flow.queue.front() else {
                break;
            };
            let room = (flow.cwnd - flow.in_flight) as usize;
            let p = match net.pending.get_mut(&key) {
                Some(p) if !p.rnr_hold => p,
                Some(p) => {
                    p.queued = false;
                    flow.queue.pop_front();
                    continue;
                }
                None => {
                    flow.queue.pop_front();
                    continue;
                }
            };
            let mut sent = 0usize;
            if let Some(rh) = p.read {
                // A request per run of chunks to ask for, as many as there is room for.
                let mut i = 0;
                while i < p.units.len() && sent < room {
                    if !p.units[i].to_send() {
                        i += 1;
                        continue;
                    }
                    let first = i;
                    while i < p.units.len() && p.units[i].to_send() && sent < room {
                        if p.units[i] == Unit::Lost {
                            net.stats.retransmits += 1;
                        }
                        p.units[i] = Unit::Sent;
                        sent += 1;
                        i += 1;
                    }
                    let mut r = rh;
                    r.chunk = first as u16;
                    r.imm = (i - first) as u32;
                    match src.and_then(|src| wire::frame(src, dst, &r, &[])) {
                        Some(f) => out.push(f),
                        None => net.stats.tx_dropped += 1,
                    }
                }
            } else {
                for (u, f) in p.units.iter_mut().zip(&p.frames) {
                    if sent == room {
                        break;
                    }
                    if u.to_send() {
                        if *u == Unit::Lost {
                            net.stats.retransmits += 1;
                        }
                        *u = Unit::Sent;
                        out.push(f.clone());
                        sent += 1;
                    }
                }
            }
            p.in_flight += sent;
            if sent > 0 && p.deadline.is_none() {
                p.deadline = Some(now.saturating_add(rto_after(p.retries)));
            }
            flow.in_flight += sent as u32;
            net.stats.srd_window_peak = net.stats.srd_window_peak.max(flow.in_flight.into());
            if !p.units.iter().any(|u| u.to_send()) {
                p.queued = false;
                flow.queue.pop_front();
            }
        }
        for f in out {
            self.push_frame(f);
        }
    }

    /// Sends what every window has room for.
    fn pump_all(&mut self) {
        let dsts: Vec<Ipv4Addr> = self
            .net
            .flows
            .iter()
            .filter(|(_, f)| !f.queue.is_empty() && f.in_flight < f.cwnd)
            .map(|(d, _)| *d)
            .collect();
        for d in dsts {
            self.pump(d);
        }
    }

    /// Unit `i` of operation `key` was acknowledged or answered: whether it was news.
    fn unit_done(&mut self, key: PendingKey, i: usize) -> bool {
        let now = self.now();
        let Some(p) = self.net.pending.get_mut(&key) else {
            return false;
        };
        let Some(u) = p.units.get_mut(i) else {
            return false;
        };
        let was = *u;
        if was == Unit::Done {
            return false;
        }
        *u = Unit::Done;
        p.left -= 1;
        p.retries = 0;
        if was == Unit::Sent {
            p.in_flight -= 1;
            if let Some(f) = self.net.flows.get_mut(&key.1) {
                f.in_flight = f.in_flight.saturating_sub(1);
                f.on_ack();
            }
        }
        if !p.rnr_hold {
            p.deadline = (p.in_flight > 0).then(|| now.saturating_add(RTO_NS));
        }
        true
    }

    // ------------------------------------------------------------ receive

    /// Takes frames in and runs the retransmission timers; whether anything happened.
    pub(crate) fn poll_net(&mut self) -> bool {
        let mut progress = false;
        // A simulated receive buffer: what arrived since the last poll beyond it is dropped.
        let cap = self.faults.rx_buffer_frames.map(|c| c as usize);
        let mut taken = 0usize;
        loop {
            if cap.is_none() && taken >= RX_BUDGET {
                break;
            }
            let f = match &self.net.port {
                Some(p) => match p.recv() {
                    Ok(Some(f)) => f,
                    _ => break,
                },
                None => break,
            };
            progress = true;
            taken += 1;
            self.net.stats.rx_frames += 1;
            if cap.is_some_and(|c| taken > c) {
                self.net.stats.rx_overflow += 1;
                continue;
            }
            self.rx_frame(&f);
        }
        progress |= self.run_timers();
        self.pump_all();
        progress
    }

    /// The earliest retransmission deadline.
    pub(crate) fn net_deadline(&self) -> Option<u64> {
        self.net.pending.values().filter_map(|p| p.deadline).min()
    }

    fn run_timers(&mut self) -> bool {
        let now = self.now();
        let due: Vec<PendingKey> = self
            .net
            .pending
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| *k)
            .collect();
        for key in &due {
            let Some(p) = self.net.pending.get_mut(key) else {
                continue;
            };
            p.deadline = None;
            if p.rnr_hold {
                // The RNR wait is over: the send goes again through the window.
                p.rnr_hold = false;
                self.enqueue(*key);
                continue;
            }
            if p.retries >= MAX_RETRIES {
                self.finish(*key, cs::LOCAL_ERROR_UNRESP_REMOTE);
                continue;
            }
            p.retries += 1;
            // What is still in flight is taken for lost: out of the window, to send again.
            let mut lost = 0u32;
            for u in &mut p.units {
                if *u == Unit::Sent {
                    *u = Unit::Lost;
                    lost += 1;
                }
            }
            p.in_flight = 0;
            let flow = self.net.flows.entry(key.1).or_insert_with(Flow::new);
            flow.in_flight = flow.in_flight.saturating_sub(lost);
            if flow.on_loss(now) {
                self.net.stats.srd_window_cuts += 1;
            }
            self.enqueue(*key);
        }
        !due.is_empty()
    }

    fn rx_frame(&mut self, f: &[u8]) {
        let Some((src, h, payload)) = wire::parse(f) else {
            self.net.stats.rx_malformed += 1;
            return;
        };
        match h.op {
            wire::OP_UD_SEND => self.rx_ud(src, &h, payload),
            wire::OP_SRD_SEND => self.rx_srd_send(src, &h, payload),
            wire::OP_SRD_ACK => self.rx_ack(src, &h),
            wire::OP_SRD_READ_REQ => self.rx_read_req(src, &h),
            wire::OP_SRD_READ_RESP => self.rx_read_resp(src, &h, payload),
            wire::OP_SRD_WRITE => self.rx_write(src, &h, payload),
            wire::OP_SRD_WRITE_IMM if payload.is_empty() => self.rx_srd_send(src, &h, payload),
            _ => self.net.stats.rx_malformed += 1,
        }
    }

    /// The QP `h.dest_qpn` if it is of `qp_type`, takes packets (RTR, RTS, SQD) and has the
    /// packet's Q_Key: `(handle, pd)`, or the reason it is refused (`true`: a Q_Key mismatch).
    fn target(&self, h: &Hdr, qp_type: u32) -> Result<(u32, u16), bool> {
        let handle = self.handle_of(h.dest_qpn).ok_or(false)?;
        let q = self.obj.qps.get(&handle).ok_or(false)?;
        use modify_qp_cmd::{QP_STATE_RTR, QP_STATE_RTS, QP_STATE_SQD};
        if q.qp_type != qp_type || !matches!(q.state, QP_STATE_RTR | QP_STATE_RTS | QP_STATE_SQD) {
            return Err(false);
        }
        if q.qkey != h.qkey {
            return Err(true);
        }
        Ok((handle, q.pd))
    }

    fn rx_ud(&mut self, _src: Ipv4Addr, h: &Hdr, payload: &[u8]) {
        match self.target(h, create_qp_cmd::QP_TYPE_UD) {
            Ok((handle, _)) => {
                if self.deliver(handle, h, payload).is_none() {
                    self.net.stats.rx_dropped += 1;
                }
            }
            Err(true) => self.net.stats.rx_qkey_mismatch += 1,
            Err(false) => self.net.stats.rx_dropped += 1,
        }
    }

    /// Takes the next receive WR of QP `handle`, scatters `payload` into it and writes its
    /// completion: the completion status, or `None` when no receive was posted.
    fn deliver(&mut self, handle: u32, h: &Hdr, payload: &[u8]) -> Option<u8> {
        let q = self.obj.qps.get(&handle)?;
        let (qpn, pd, base, descs, cq, sub) =
            (q.qpn, q.pd, q.dp.rq_base, q.dp.rq_descs, q.cqs.1, q.subs.1);
        let (pc, mut cc) = (q.dp.rq_pc, q.dp.rq_cc);
        let max = usize::from(self.profile.max_sges.1).max(1);
        let mut list: Vec<RxDesc> = Vec::new();
        loop {
            if pc == cc || descs == 0 {
                if list.is_empty() {
                    return None;
                }
                // A WR without its last descriptor yet: the driver rang too early.
                self.error(DeviceError::BadRxDesc { qpn, index: cc });
                return None;
            }
            let at = base + u64::from(u32::from(cc) % descs) * io::RX_DESC_SIZE as u64;
            let mut raw = [0u8; io::RX_DESC_SIZE];
            if self.dma_read(at, &mut raw).is_err() {
                return None;
            }
            let dsc = RxDesc::from_bytes(&raw);
            let ctrl = dsc.lkey_ctrl.get();
            let first = ctrl & RX_FIRST != 0;
            cc = cc.wrapping_add(1);
            if first != list.is_empty() || list.len() >= max {
                self.error(DeviceError::BadRxDesc {
                    qpn,
                    index: cc.wrapping_sub(1),
                });
                if let Some(q) = self.obj.qps.get_mut(&handle) {
                    q.dp.rq_cc = cc;
                }
                return None;
            }
            list.push(dsc);
            if ctrl & RX_LAST != 0 {
                break;
            }
        }
        if let Some(q) = self.obj.qps.get_mut(&handle) {
            q.dp.rq_cc = cc;
        }
        let req_id = list[0].req_id.get();
        let room: u64 = list.iter().map(|d| u64::from(d.length.get())).sum();
        let mut status = cs::OK;
        if payload.len() as u64 > room {
            status = cs::LOCAL_ERROR_BAD_LENGTH;
        } else {
            let mut rest = payload;
            for dsc in &list {
                if rest.is_empty() {
                    break;
                }
                let n = rest.len().min(usize::from(dsc.length.get()));
                let addr =
                    u64::from(dsc.buf_addr_hi.get()) << 32 | u64::from(dsc.buf_addr_lo.get());
                let key = dsc.lkey_ctrl.get() & LKEY_MASK;
                let ok = match self.translate(key, pd, addr, n as u64, PERM_LOCAL_WRITE) {
                    Some(p) => self.write_pieces(&p, &rest[..n]),
                    None => false,
                };
                if !ok {
                    status = cs::LOCAL_ERROR_INVALID_LKEY;
                    break;
                }
                rest = &rest[n..];
            }
        }
        let ah = self
            .obj
            .ahs
            .iter()
            .find(|(_, a)| a.dest == h.src_gid && a.pd == pd)
            .map_or(io::UNKNOWN_AH, |(k, _)| *k);
        let has_imm = h.flags & wire::FLAG_IMM != 0;
        // A write with immediate's notice: the completion says RDMA write and carries the
        // write's length (bits 31:16 in the extended entry's `length_hi`).
        let write_imm = h.op == wire::OP_SRD_WRITE_IMM;
        let (op, len) = if write_imm {
            (op_type::RDMA_WRITE, h.total)
        } else {
            (op_type::SEND, payload.len().min(u32::MAX as usize) as u32)
        };
        let c = RxCqe {
            req_id: Le16::new(req_id),
            status,
            flags: Q_TYPE_RECV << CDESC_Q_TYPE_SHIFT
                | if has_imm { CDESC_HAS_IMM } else { 0 }
                | op << CDESC_OP_TYPE_SHIFT,
            qp_num: Le16::new(qpn),
            length: Le16::new(if write_imm {
                len as u16
            } else {
                len.min(u32::from(u16::MAX)) as u16
            }),
            ah: Le16::new(ah),
            src_qp_num: Le16::new(h.src_qpn),
            imm: Le32::new(if has_imm { h.imm } else { 0 }),
        };
        let mut ext = [0u8; 16];
        if write_imm {
            ext[..2].copy_from_slice(&((len >> 16) as u16).to_le_bytes());
        }
        self.write_cqe_ext(cq, sub, c.to_bytes(), ext);
        Some(status)
    }

    /// A QP moved to ERR: every receive WR posted and not yet taken completes with FLUSHED,
    /// in order (its `req_id` from its first descriptor, length 0); the RQ is then empty.
    pub(crate) fn flush_rq(&mut self, handle: u32) {
        let Some(q) = self.obj.qps.get(&handle) else {
            return;
        };
        let (qpn, base, descs, cq, sub) = (q.qpn, q.dp.rq_base, q.dp.rq_descs, q.cqs.1, q.subs.1);
        let (pc, mut cc) = (q.dp.rq_pc, q.dp.rq_cc);
        let mut first: Option<u16> = None;
        while cc != pc && descs > 0 {
            let at = base + u64::from(u32::from(cc) % descs) * io::RX_DESC_SIZE as u64;
            let mut raw = [0u8; io::RX_DESC_SIZE];
            if self.dma_read(at, &mut raw).is_err() {
                break;
            }
            cc = cc.wrapping_add(1);
            let dsc = RxDesc::from_bytes(&raw);
            let ctrl = dsc.lkey_ctrl.get();
            if ctrl & RX_FIRST != 0 {
                first = Some(dsc.req_id.get());
            }
            if ctrl & RX_LAST != 0
                && let Some(req_id) = first.take()
            {
                let c = RxCqe {
                    req_id: Le16::new(req_id),
                    status: cs::FLUSHED,
                    flags: Q_TYPE_RECV << CDESC_Q_TYPE_SHIFT,
                    qp_num: Le16::new(qpn),
                    ah: Le16::new(io::UNKNOWN_AH),
                    ..Default::default()
                };
                self.write_cqe(cq, sub, c.to_bytes());
            }
        }
        if let Some(q) = self.obj.qps.get_mut(&handle) {
            q.dp.rq_cc = pc;
        }
    }

    fn ack(&mut self, to: Ipv4Addr, h: &Hdr, chunk: u16, status: u8) {
        let a = Hdr {
            op: wire::OP_SRD_ACK,
            dest_qpn: h.src_qpn,
            src_qpn: h.dest_qpn,
            msg: h.msg,
            chunk,
            chunks: h.chunks,
            status,
            src_gid: self.profile.gid,
            ..Hdr::default()
        };
        self.send_frame(to, &a, &[]);
    }

    fn rx_srd_send(&mut self, src: Ipv4Addr, h: &Hdr, payload: &[u8]) {
        let ctx = (src, h.src_qp_id, h.dest_qpn);
        if let Some(&s) = self.net.outcomes.get(&ctx).and_then(|m| m.get(&h.msg)) {
            self.net.stats.rx_duplicates += 1;
            self.ack(src, h, 0, s);
            return;
        }
        let handle = match self.target(h, create_qp_cmd::QP_TYPE_SRD) {
            Ok((handle, _)) => handle,
            Err(_) => {
                self.ack(src, h, 0, cs::REMOTE_ERROR_BAD_DEST_QPN);
                return;
            }
        };
        let Some(rx) = self.deliver(handle, h, payload) else {
            self.ack(src, h, 0, cs::REMOTE_ERROR_RNR);
            return;
        };
        let s = remote_status(rx);
        self.net.stats.srd_delivered += 1;
        let m = self.net.outcomes.entry(ctx).or_default();
        m.insert(h.msg, s);
        if m.len() > DEDUP_WINDOW {
            m.pop_first();
        }
        self.ack(src, h, 0, s);
    }

    fn rx_ack(&mut self, src: Ipv4Addr, h: &Hdr) {
        let key = (h.dest_qpn, src, h.src_qpn, h.msg);
        let now = self.now();
        let Some(p) = self.net.pending.get_mut(&key) else {
            return;
        };
        match h.status {
            cs::OK => {
                if p.read.is_some() || !self.unit_done(key, usize::from(h.chunk)) {
                    return;
                }
                let Some(p) = self.net.pending.get_mut(&key) else {
                    return;
                };
                if p.left == 0 {
                    match p.notice.take() {
                        Some(n) => self.send_notice(key, n),
                        None => self.finish(key, cs::OK),
                    }
                }
            }
            cs::REMOTE_ERROR_RNR if p.rnr_left > 0 && p.read.is_none() => {
                if p.rnr_left < 7 {
                    p.rnr_left -= 1;
                }
                p.retries = 0;
                // The send was answered: out of the window, sent again after the wait.
                let i = usize::from(h.chunk);
                if p.units.get(i) == Some(&Unit::Sent) {
                    p.units[i] = Unit::Lost;
                    p.in_flight -= 1;
                    if let Some(f) = self.net.flows.get_mut(&key.1) {
                        f.in_flight = f.in_flight.saturating_sub(1);
                    }
                }
                if p.units.get(i) == Some(&Unit::Lost) {
                    p.rnr_hold = true;
                    p.deadline = Some(now.saturating_add(RNR_DELAY_NS));
                }
            }
            s => self.finish(key, s),
        }
    }

    /// The MR of an RDMA request for QP `handle` (`perm` on it); the DMA pieces of the
    /// operation's range.
    fn remote_range(
        &self,
        pd: u16,
        h: &Hdr,
        perm: u8,
        off: u32,
        len: usize,
    ) -> Option<Vec<(u64, usize)>> {
        let at = h.raddr.checked_add(off.into())?;
        self.translate(h.rkey & LKEY_MASK, pd, at, len as u64, perm)
    }

    fn rx_read_req(&mut self, src: Ipv4Addr, h: &Hdr) {
        let mut r = Hdr {
            op: wire::OP_SRD_READ_RESP,
            dest_qpn: h.src_qpn,
            src_qpn: h.dest_qpn,
            msg: h.msg,
            chunks: h.chunks,
            total: h.total,
            src_gid: self.profile.gid,
            ..Hdr::default()
        };
        let pd = match self.target(h, create_qp_cmd::QP_TYPE_SRD) {
            Ok((_, pd)) => pd,
            Err(_) => {
                r.status = cs::REMOTE_ERROR_BAD_DEST_QPN;
                self.send_frame(src, &r, &[]);
                return;
            }
        };
        let mtu = (self.profile.mtu as usize).max(1);
        let total = h.total as usize;
        let chunks = total.div_ceil(mtu).max(1);
        // The chunks asked for: `count` from `first`.
        let (first, count) = (usize::from(h.chunk), h.imm as usize);
        // The request's shape is checked before any memory is touched; the whole range
        // must be readable, the asked-for part is read.
        let sane = chunks == usize::from(h.chunks)
            && h.total <= self.profile.max_rdma_size
            && count > 0
            && first.checked_add(count).is_some_and(|e| e <= chunks);
        let lo = first.saturating_mul(mtu).min(total);
        let hi = first.saturating_add(count).saturating_mul(mtu).min(total);
        let data = if sane
            && self
                .remote_range(pd, h, PERM_REMOTE_READ, 0, total)
                .is_some()
        {
            self.remote_range(pd, h, PERM_REMOTE_READ, lo as u32, hi - lo)
                .and_then(|p| {
                    let mut v = Vec::with_capacity(hi - lo);
                    self.read_pieces(&p, &mut v).then_some(v)
                })
        } else {
            None
        };
        let Some(data) = data else {
            r.status = cs::REMOTE_ERROR_BAD_ADDRESS;
            self.send_frame(src, &r, &[]);
            return;
        };
        for i in first..first + count {
            let a = i * mtu;
            let b = (a + mtu).min(total);
            r.chunk = i as u16;
            r.offset = a as u32;
            self.send_frame(src, &r, &data[a - lo..b - lo]);
        }
    }

    fn rx_read_resp(&mut self, src: Ipv4Addr, h: &Hdr, payload: &[u8]) {
        let key = (h.dest_qpn, src, h.src_qpn, h.msg);
        let Some(p) = self.net.pending.get(&key) else {
            return;
        };
        let Some((lkey, addr, len)) = p.local else {
            return;
        };
        if h.status != cs::OK {
            self.finish(key, h.status);
            return;
        }
        let i = usize::from(h.chunk);
        let fits = i < p.units.len()
            && u64::from(h.offset) + payload.len() as u64 <= u64::from(len)
            && h.total == len;
        if !fits || p.units[i] == Unit::Done {
            return;
        }
        let Some(pd) = self.obj.qps.get(&p.handle).map(|q| q.pd) else {
            return;
        };
        let at = addr + u64::from(h.offset);
        let ok = match self.translate(lkey, pd, at, payload.len() as u64, PERM_LOCAL_WRITE) {
            Some(pieces) => self.write_pieces(&pieces, payload),
            None => false,
        };
        if !ok {
            self.finish(key, cs::LOCAL_ERROR_INVALID_LKEY);
            return;
        }
        if !self.unit_done(key, i) {
            return;
        }
        if self.net.pending.get(&key).is_some_and(|p| p.left == 0) {
            self.finish(key, cs::OK);
        }
    }

    fn rx_write(&mut self, src: Ipv4Addr, h: &Hdr, payload: &[u8]) {
        let status = match self.target(h, create_qp_cmd::QP_TYPE_SRD) {
            Ok((_, pd)) => {
                match self.remote_range(pd, h, PERM_REMOTE_WRITE, h.offset, payload.len()) {
                    Some(p) if self.write_pieces(&p, payload) => cs::OK,
                    _ => cs::REMOTE_ERROR_BAD_ADDRESS,
                }
            }
            Err(_) => cs::REMOTE_ERROR_BAD_DEST_QPN,
        };
        self.ack(src, h, h.chunk, status);
    }

    /// Forgets the transport state of QP `handle` (destroyed or reset): its operations in
    /// flight complete as flushed when `flush`, else silently go away.
    pub(crate) fn drop_qp_transport(&mut self, handle: u32, flush: bool) {
        let keys: Vec<PendingKey> = self
            .net
            .pending
            .iter()
            .filter(|(_, p)| p.handle == handle)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if flush {
                self.finish(k, cs::FLUSHED);
            } else {
                self.take_pending(k);
            }
        }
        self.pump_all();
        if let Some(q) = self.obj.qps.get(&handle) {
            let qpn = q.qpn;
            self.net.outcomes.retain(|k, _| k.2 != qpn);
        }
    }
}

trait Addr {
    fn addr(&self) -> u64;
}

impl Addr for TxBufDesc {
    fn addr(&self) -> u64 {
        u64::from(self.buf_addr_hi.get()) << 32 | u64::from(self.buf_addr_lo.get())
    }
}

#[cfg(test)]
mod window_tests {
    use super::{Flow, RTO_NS, SRD_WINDOW_INIT, SRD_WINDOW_MAX, SRD_WINDOW_MIN};

    #[test]
    fn the_window_halves_once_per_timeout_burst_down_to_its_floor_and_grows_back_to_its_cap() {
        let mut f = Flow::new();
        assert_eq!(f.cwnd, SRD_WINDOW_INIT);
        // Every operation of a burst times out at once: one halving.
        assert!(f.on_loss(10 * RTO_NS));
        assert!(!f.on_loss(10 * RTO_NS + 1));
        assert_eq!(f.cwnd, SRD_WINDOW_INIT / 2);
        // Timeouts an RTO apart halve it down to the floor, never below.
        for i in 0..10 {
            f.on_loss((11 + i) * RTO_NS);
        }
        assert_eq!(f.cwnd, SRD_WINDOW_MIN);
        // One more packet per window's worth of acknowledgements.
        for _ in 0..SRD_WINDOW_MIN - 1 {
            f.on_ack();
        }
        assert_eq!(f.cwnd, SRD_WINDOW_MIN);
        f.on_ack();
        assert_eq!(f.cwnd, SRD_WINDOW_MIN + 1);
        // It grows back, to the cap and no further.
        for _ in 0..100_000 {
            f.on_ack();
        }
        assert_eq!(f.cwnd, SRD_WINDOW_MAX);
    }
}
