//! The data path (`docs/efa.md#data-path`): posting sends through the low-latency queue
//! (the 64-byte WQE, or the 128-byte one on a device with `data_polling_128`, written into
//! the memory BAR, then the SQ doorbell), posting receives (RX
//! descriptors in the host ring, then the RQ doorbell), and polling completions by phase.
//!
//! Bookkeeping lives in driver memory and every value the device wrote is checked before use
//! ([`CqeFault`] lists the checks). SRD completes sends out of order, so a send's `req_id`
//! is not its SQ position but the index of a free send slot (as rdma-core's wrid pool): a
//! slot is free while its meta word is zero; `post_send` (the QP's owner) takes the next
//! slot round robin, searching on when it is still outstanding, and `poll_cq` (the send CQ's
//! poller) frees a slot by zeroing its meta after reading it, so neither side takes a lock.
//! The device takes receive WRs in order, so a receive completion must name the oldest
//! outstanding one.
//!
//! Every WQE asks for a completion (EFA has no unsignalled sends); a successful completion of
//! a WR posted without `SIGNALED` on a QP without `sq_sig_all` is consumed and not reported.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicU32, AtomicU64};

use firmware_interface::efa::io::{
    self, CDESC_HAS_IMM, CDESC_OP_TYPE_MASK, CDESC_OP_TYPE_SHIFT, CTRL1_HAS_IMM, CTRL1_INLINE_MSG,
    CTRL1_META_DESC, CTRL2_COMP_REQ, CTRL2_FIRST, CTRL2_LAST, LKEY_MASK, Q_TYPE_RECV, Q_TYPE_SEND,
    RX_FIRST, RX_LAST, comp_status as cs, op_type,
};
use nic_hal::barrier::{dma_rmb, dma_wmb, mmio_wmb};
use nic_hal::{DmaBuf, Platform, RegisterIo};
use verbs::{
    PostError, QpState, RecvWr, RemoteOp, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::device::Device;
use crate::provider::{Ah, Cq, Qp};

/// What was wrong with a completion entry the device wrote (counted in
/// [`Device::bad_cqes`]; `poll_cq` answers EIO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeFault {
    /// The queue type is neither send nor receive.
    QueueType(u8),
    /// No QP with this number uses the CQ in that role.
    UnknownQp(u16),
    /// A send completion whose request id names no outstanding WQE.
    SendReqId(u16),
    /// A receive completion that does not name the oldest outstanding receive WR.
    RecvReqId(u16),
    /// A receive length beyond the buffers posted.
    Length(u16),
    /// A status the contract does not define.
    Status(u8),
    /// A receive completion of an op type the driver cannot take (an RDMA write without
    /// immediate data).
    OpType(u8),
}

/// The verbs status of an EFA completion status (as rdma-core's EFA provider maps them);
/// `None` for an undefined value.
pub fn wc_status(s: u8) -> Option<WcStatus> {
    Some(match s {
        cs::OK => WcStatus::Success,
        cs::FLUSHED => WcStatus::WrFlushErr,
        cs::LOCAL_ERROR_QP_INTERNAL_ERROR
        | cs::LOCAL_ERROR_UNSUPPORTED_OP
        | cs::LOCAL_ERROR_INVALID_AH => WcStatus::LocQpOpErr,
        cs::LOCAL_ERROR_INVALID_LKEY => WcStatus::LocProtErr,
        cs::LOCAL_ERROR_BAD_LENGTH => WcStatus::LocLenErr,
        cs::REMOTE_ERROR_BAD_ADDRESS => WcStatus::RemAccessErr,
        cs::REMOTE_ERROR_ABORT
        | cs::REMOTE_ERROR_UNKNOWN_PEER
        | cs::LOCAL_ERROR_UNREACH_REMOTE
        | cs::REMOTE_ERROR_FEATURE_MISMATCH => WcStatus::RemAbortErr,
        cs::REMOTE_ERROR_BAD_DEST_QPN => WcStatus::RemInvRdReqErr,
        cs::REMOTE_ERROR_RNR => WcStatus::RnrRetryExcErr,
        cs::REMOTE_ERROR_BAD_LENGTH => WcStatus::RemInvReqErr,
        cs::REMOTE_ERROR_BAD_STATUS => WcStatus::BadRespErr,
        cs::LOCAL_ERROR_UNRESP_REMOTE => WcStatus::RespTimeoutErr,
        _ => return None,
    })
}

/// The memory BAR (low-latency queues) and the doorbell BAR.
pub(crate) struct DataBars<R> {
    pub mem: R,
    pub db: R,
}

/// Send-slot meta: outstanding, and the WR asked for a completion (the sign bit: one test).
const OUT_SIGNALED: u64 = 1 << 63;
/// Send-slot meta: outstanding, its successful completion not reported.
const OUT_SILENT: u64 = 1 << 62;
/// Send-slot meta: the completion opcode (a `WcOpcode` discriminant) in bits 8..16.
const META_OP_SHIFT: u32 = 8;
/// Send-slot meta: the WR's byte count in bits 16..48.
const META_LEN_SHIFT: u32 = 16;

/// A send id's bookkeeping.
#[derive(Debug, Default)]
struct SqSlot {
    wr_id: AtomicU64,
    /// Zero while the slot is free, else `OUT_SIGNALED or OUT_SILENT | opcode << 8 | bytes
    /// << 16` (one load and one store per completion).
    meta: AtomicU64,
}

/// The send-slot meta of an outstanding WR.
#[inline(always)]
fn send_meta(signaled: bool, op: WcOpcode, len: u32) -> u64 {
    OUT_SILENT << u32::from(signaled)
        | u64::from(op as u8) << META_OP_SHIFT
        | u64::from(len) << META_LEN_SHIFT
}

/// A receive WR's bookkeeping.
#[derive(Debug, Default)]
struct RqSlot {
    wr_id: AtomicU64,
    len: AtomicU32,
}

/// What a QP shares with the CQs that hold its completions.
#[derive(Debug)]
pub(crate) struct QpCore {
    qpn: u16,
    /// Send slots (the SQ depth, a power of two), indexed by send id.
    sq: Box<[SqSlot]>,
    rq: Box<[RqSlot]>,
    /// Receive WRs posted (written by `post_recv`) and completed (written by `poll_cq`).
    rq_head: AtomicU32,
    rq_tail: AtomicU32,
}

impl QpCore {
    pub(crate) fn new(qpn: u16, sq_depth: u32, rq_depth: u32) -> Arc<QpCore> {
        Arc::new(QpCore {
            qpn,
            sq: (0..sq_depth).map(|_| SqSlot::default()).collect(),
            rq: (0..rq_depth.max(1)).map(|_| RqSlot::default()).collect(),
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
        })
    }
}

/// A QP attached to a CQ.
#[derive(Debug)]
struct Attached {
    qpn: u16,
    core: Arc<QpCore>,
    send: bool,
    recv: bool,
}

/// A CQ's ring as the poller reads it.
#[derive(Debug)]
struct Ring(NonNull<u8>);

// SAFETY: the pointer is into the CQ's DMA ring, which the `Cq` owns (leaked, never freed,
// if the CQ is dropped without a destroy) for at least as long as the `CqShared` is used
// through it; every access is a volatile read under the CQ's lock.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

/// The poller's state of a CQ.
#[derive(Debug)]
struct PollState {
    /// Consumer counters, one per sub-CQ.
    cc: Vec<u32>,
    qps: Vec<Attached>,
    /// The sub-CQ polled first next time (round robin).
    next: usize,
    /// Index in `qps` of the QP the last completion named.
    last: usize,
}

/// What a CQ shares with its QPs (attach, detach) and pollers.
#[derive(Debug)]
pub(crate) struct CqShared {
    ring: Ring,
    depth: u32,
    entry: usize,
    state: spin::Mutex<PollState>,
}

impl CqShared {
    /// The poll state of the ring `buf` (`subs` sub-CQs of `depth` entries of `entry` bytes).
    pub(crate) fn new(buf: &DmaBuf, depth: u32, entry: u32, subs: u16) -> Option<Arc<CqShared>> {
        let need = (depth as usize)
            .checked_mul(entry as usize)?
            .checked_mul(subs.into())?;
        if need > buf.len() || !depth.is_power_of_two() || entry < 16 {
            return None;
        }
        Some(Arc::new(CqShared {
            ring: Ring(NonNull::new(buf.va())?),
            depth,
            entry: entry as usize,
            state: spin::Mutex::new(PollState {
                cc: alloc::vec![0; subs.into()],
                qps: Vec::new(),
                next: 0,
                last: 0,
            }),
        }))
    }

    /// Lets the poller find QP `core`'s completions (`send` / `recv`: in which role).
    pub(crate) fn attach(&self, core: &Arc<QpCore>, send: bool, recv: bool) {
        let mut st = self.state.lock();
        match st.qps.iter_mut().find(|a| a.qpn == core.qpn) {
            Some(a) => {
                a.core = core.clone();
                a.send |= send;
                a.recv |= recv;
            }
            None => st.qps.push(Attached {
                qpn: core.qpn,
                core: core.clone(),
                send,
                recv,
            }),
        }
    }

    /// Entries consumed in all sub-CQs (what an arming CQ doorbell carries, 16 bits of it).
    pub(crate) fn consumed(&self) -> u32 {
        self.state
            .lock()
            .cc
            .iter()
            .fold(0u32, |a, &c| a.wrapping_add(c))
    }

    /// Forgets QP `qpn`.
    pub(crate) fn detach(&self, qpn: u16) {
        self.state.lock().qps.retain(|a| a.qpn != qpn);
    }
}

/// The SQ's counters (written by `post_send` only).
#[derive(Debug, Default)]
struct SqCursor {
    /// SQ producer counter (what the SQ doorbell receives).
    pc: u16,
    /// The send slot tried first by the next WR (round robin).
    next: u32,
}

/// What every WQE of a QP shares (fixed per QP but the Q_Key, which `modify_qp` sets).
#[derive(Debug)]
pub(crate) struct PostCtx {
    /// The QP's Q_Key (a WR's Q_Key with bit 31 set names it).
    pub(crate) qkey: u32,
    /// SQ depth minus one (the depth is a power of two).
    mask: u32,
    /// log2 of the SQ depth.
    shift: u32,
    /// WQEs per doorbell.
    batch: usize,
    /// The first word of a one-SGE SEND WQE without the send id, the phase, and the
    /// destination QP.
    hdr: u64,
    /// The meta of a fast-path send slot but the byte count and the WR's `SIGNALED`
    /// (`sq_sig_all` decides).
    meta0: u64,
    /// One-SGE SENDs of `1..=fast_len` bytes take the fast path (the MTU; 0 when the QP
    /// takes no send SGE).
    fast_len: u32,
    max_sge: usize,
    mtu: u32,
    read_ok: bool,
    write_ok: bool,
    sig_all: bool,
    max_inline: u32,
    /// 128-byte WQEs (the device's `data_polling_128`): every WR goes through
    /// [`post_wide`].
    wide: bool,
    /// The LLQ's offset in the memory BAR (what [`post_wide`] writes to; the 64-byte path
    /// takes `Qp::llq_fast`).
    llq: usize,
}

/// How `create_qp` sized a QP's send side.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SqParams {
    /// WQEs (a power of two).
    pub depth: u32,
    /// The device's `max_tx_batch` (64-byte units; 0 = unlimited).
    pub max_tx_batch: u16,
    /// `max_send_sge`.
    pub max_sge: u32,
    /// Inline bytes a WR may carry.
    pub max_inline: u32,
    /// The device MTU.
    pub mtu: u32,
    /// RDMA READ and WRITE may be posted.
    pub read_ok: bool,
    /// As `read_ok`, for RDMA WRITE.
    pub write_ok: bool,
    /// `sq_sig_all`.
    pub sig_all: bool,
    /// The LLQ holds 128-byte WQEs (else 64-byte ones).
    pub wide: bool,
    /// The LLQ's offset in the memory BAR.
    pub llq: usize,
}

/// The driver's side of a QP's queues.
pub(crate) struct QpDp {
    pub core: Arc<QpCore>,
    pub cqs: (Arc<CqShared>, Arc<CqShared>),
    sq: SqCursor,
    pub(crate) ctx: PostCtx,
    /// RQ: descriptors posted (what the RQ doorbell receives), descriptor ring.
    rq_pc: u16,
    rq_ring: Option<NonNull<u8>>,
    rq_desc_mask: u32,
}

// SAFETY: `rq_ring` points into the QP's RQ DMA buffer, owned by the same `Qp` (leaked if the
// QP is dropped without a destroy); it is written only through `&mut Qp`.
unsafe impl Send for QpDp {}
// SAFETY: as above: shared references never touch the ring.
unsafe impl Sync for QpDp {}

impl core::fmt::Debug for QpDp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpDp")
            .field("qpn", &self.core.qpn)
            .field("sq_pc", &self.sq.pc)
            .field("rq_pc", &self.rq_pc)
            .finish_non_exhaustive()
    }
}

impl QpDp {
    /// The data-path state of a new QP.
    ///
    /// # Safety
    ///
    /// `rq` (the RQ ring, `rq_descs` descriptors) outlives the returned value: its owner keeps
    /// it (leak-on-drop) at least as long.
    pub(crate) unsafe fn new(
        core: Arc<QpCore>,
        cqs: (Arc<CqShared>, Arc<CqShared>),
        sq: SqParams,
        rq: Option<&DmaBuf>,
        rq_descs: u32,
    ) -> QpDp {
        let depth = sq.depth.max(1);
        // `max_tx_batch` counts 64-byte units (a 128-byte WQE takes two); 0 = unlimited (one
        // doorbell per list).
        let batch = if sq.max_tx_batch == 0 {
            usize::MAX
        } else {
            let units = if sq.wide { 2 } else { 1 };
            (usize::from(sq.max_tx_batch) / units)
                .max(1)
                .min(depth as usize)
        };
        QpDp {
            core,
            cqs,
            sq: SqCursor::default(),
            ctx: PostCtx {
                qkey: 0,
                mask: depth - 1,
                shift: depth.trailing_zeros(),
                batch,
                hdr: u64::from(CTRL1_META_DESC) << 16
                    | u64::from(CTRL2_FIRST | CTRL2_LAST | CTRL2_COMP_REQ) << 24
                    | 1 << 48,
                meta0: send_meta(sq.sig_all, WcOpcode::Send, 0),
                fast_len: if sq.max_sge == 0 { 0 } else { sq.mtu },
                max_sge: (sq.max_sge as usize).min(io::TX_BUF_DESCS),
                mtu: sq.mtu,
                read_ok: sq.read_ok,
                write_ok: sq.write_ok,
                sig_all: sq.sig_all,
                max_inline: sq.max_inline,
                wide: sq.wide,
                llq: sq.llq,
            },
            rq_pc: 0,
            rq_ring: rq.and_then(|b| NonNull::new(b.va())),
            rq_desc_mask: rq_descs.saturating_sub(1),
        }
    }

    /// After a transition to RESET: the device starts its queues over, so does the driver
    /// (outstanding receive WRs are forgotten).
    pub(crate) fn reset(&mut self) {
        self.sq.pc = 0;
        self.ctx.qkey = 0;
        self.rq_pc = 0;
        let head = self.core.rq_head.load(Relaxed);
        self.core.rq_tail.store(head, Release);
    }
}

/// Immediate data in the host order the WQE carries (the WR holds network order).
#[inline(always)]
fn imm_host(v: u32) -> u32 {
    u32::from_be(v)
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// `post_send`: one WQE per WR through the LLQ, a doorbell every `max_tx_batch` 64-byte
    /// units and at the end. With 64-byte WQEs, where the memory BAR is mapped, a one-SGE
    /// SEND takes the fast path (its WQE stored straight into its LLQ slot); any other WR,
    /// every WR where the BAR is not mapped, and every WR of a QP with 128-byte WQEs
    /// ([`post_wide`]) is built by [`build`], every field checked.
    pub(crate) fn post_send_dp(
        &self,
        qp: &mut Qp,
        wrs: &[SendWr<'_, Ah>],
    ) -> Result<(), PostError> {
        let fail = |error, bad_wr| PostError { error, bad_wr };
        let Some(bars) = self.data.as_ref() else {
            return Err(fail(verbs::Error::NotSupported, 0));
        };
        if qp.state != QpState::Rts {
            return Err(fail(verbs::Error::InvalidArgument, 0));
        }
        let (llq, sq_db) = (qp.llq_fast as usize, qp.sq_db_offset as usize);
        let QpDp { core, sq, ctx, .. } = &mut qp.dp;
        let ctx: &PostCtx = ctx;
        // The send slots, `mask + 1` of them (the SQ depth).
        let Some(slots) = core.sq.get(..=ctx.mask as usize) else {
            return Err(fail(verbs::Error::Io, 0));
        };
        // The LLQ's mapping, where the BAR is mapped (8-byte aligned; never for 128-byte
        // WQEs: `Qp::llq_fast`).
        let Some(map) = bars
            .mem
            .mapped(llq, slots.len() * io::TX_WQE_SIZE)
            .filter(|p| p.as_ptr().cast::<u64>().is_aligned())
        else {
            return post_unmapped::<_, 8>(bars, llq, sq_db, slots, sq, ctx, wrs);
        };
        let map = map.as_ptr().cast::<u64>();
        let (mask, fast_len, meta0, qkey0) = (ctx.mask, ctx.fast_len, ctx.meta0, ctx.qkey);
        // The SQ counter, 16 bits wide, in a full register (truncated where it is stored).
        let mut pc = u32::from(sq.pc);
        let mut next = sq.next;
        // The header with the SQ phase of slot `pc` (bit 24: 0 on the first pass, flipped on
        // every wrap).
        let mut hp = ctx.hdr | u64::from((pc >> ctx.shift) & 1) << 24;
        for chunk in wrs.chunks(ctx.batch) {
            let first = pc;
            for wr in chunk {
                let id = next & mask;
                // SAFETY: `id <= mask` and `slots` holds `mask + 1` slots (checked above).
                let slot = unsafe { slots.get_unchecked(id as usize) };
                // SAFETY: slot `pc & mask` of the LLQ, 64 bytes (8 words) at word
                // `(pc & mask) * 8`, lies in the mapped range (`mask + 1` slots), which lives
                // as long as `bars`; the base is 8-byte aligned (checked).
                let q = unsafe { map.add((pc & mask) as usize * 8) };
                if let (RemoteOp::None, WrOpcode::Send, [s], Some(dest)) =
                    (&wr.remote, wr.opcode, wr.sg_list, &wr.dest)
                    && wr.flags.bits() & SendFlags::INLINE.bits() == 0
                    && s.length.wrapping_sub(1) < fast_len
                    && dest.remote_qpn <= 0xffff
                    && slot.meta.load(Acquire) == 0
                {
                    // The common case: a one-SGE SEND, its send slot free at the cursor.
                    next = id.wrapping_add(1);
                    slot.wr_id.store(wr.wr_id, Relaxed);
                    // `OUT_SIGNALED` (bit 63) from `SIGNALED` (bit 1) or `sq_sig_all`
                    // (`meta0`; a slot with both outstanding bits is signalled).
                    let signaled = u64::from(wr.flags.bits() & SendFlags::SIGNALED.bits()) << 62;
                    slot.meta.store(
                        meta0 | signaled | u64::from(s.length) << META_LEN_SHIFT,
                        Relaxed,
                    );
                    let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
                        qkey0
                    } else {
                        dest.remote_qkey
                    };
                    // `desc` with the L_Key's low 24 bits (`LKEY_MASK`) by two shifts.
                    let d0 = (u64::from(s.length) | u64::from(s.lkey << 8) << 24).to_le();
                    let d1 = s.addr.to_le();
                    let w0 = (u64::from(id) | hp | u64::from(dest.remote_qpn) << 32).to_le();
                    let w1 = (u64::from(dest.ah.handle()) << 32).to_le();
                    let w2 = u64::from(qkey).to_le();
                    // SAFETY: `q` is the slot's 8 words (above).
                    unsafe { store_wqe(q, [w0, w1, w2, 0, d0, d1, 0, 0]) };
                } else {
                    let mut w = [0u64; 8];
                    if let Err(e) = build::<8>(slots, &mut next, ctx, wr, hp & 1 << 24, &mut w) {
                        sq.next = next;
                        let pcs = (first as u16, pc as u16);
                        return Err(fail(e, stop(bars, sq_db, sq, pcs, wrs, wr)));
                    }
                    // SAFETY: as above.
                    unsafe { store_wqe(q, w) };
                }
                pc = pc.wrapping_add(1);
                if pc & mask == 0 {
                    hp = next_pass(hp);
                }
            }
            mmio_wmb();
            bars.db.write32(sq_db, pc & 0xffff);
        }
        (sq.pc, sq.next) = (pc as u16, next);
        Ok(())
    }

    /// `post_recv`: one RX descriptor per SGE (at least one), then the RQ doorbell.
    pub(crate) fn post_recv_dp(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let fail = |error, bad_wr| PostError { error, bad_wr };
        let Some(bars) = self.data.as_ref() else {
            return Err(fail(verbs::Error::NotSupported, 0));
        };
        if matches!(qp.state, QpState::Reset | QpState::Err) {
            return Err(fail(verbs::Error::InvalidArgument, 0));
        }
        let rq_db = qp.rq_db_offset as usize;
        let max_sge = qp.cap.max_recv_sge as usize;
        let dp = &mut qp.dp;
        let core = &*dp.core;
        let Some(ring) = dp.rq_ring else {
            return Err(fail(verbs::Error::InvalidArgument, 0));
        };
        let depth = core.rq.len() as u32;
        let mut head = core.rq_head.load(Relaxed);
        let mut result = Ok(());
        let start = dp.rq_pc;
        for (i, wr) in wrs.iter().enumerate() {
            let sges = wr.sg_list.iter().filter(|s| s.length != 0);
            let n = sges.clone().count();
            if n > max_sge || sges.clone().any(|s| s.length > u32::from(u16::MAX)) {
                result = Err(fail(verbs::Error::InvalidArgument, i));
                break;
            }
            if head.wrapping_sub(core.rq_tail.load(Acquire)) >= depth {
                result = Err(fail(verbs::Error::NoMemory, i));
                break;
            }
            let req_id = (head & (depth - 1)) as u16;
            let mut total = 0u32;
            let count = n.max(1);
            let empty = verbs::Sge::default();
            for (j, s) in sges.chain(core::iter::once(&empty)).take(count).enumerate() {
                let mut ctrl = s.lkey & LKEY_MASK;
                if j == 0 {
                    ctrl |= RX_FIRST;
                }
                if j + 1 == count {
                    ctrl |= RX_LAST;
                }
                total += s.length;
                let lo = s.addr;
                let hi = u64::from(req_id) | u64::from(s.length) << 16 | u64::from(ctrl) << 32;
                let at = (u32::from(dp.rq_pc) & dp.rq_desc_mask) as usize * io::RX_DESC_SIZE;
                // SAFETY: `at + 16` is inside the ring (masked by its descriptor count, which
                // the ring holds; `QpDp::new`'s contract keeps it alive); descriptors are
                // 16-byte aligned in a page-aligned ring; the device reads them only after the
                // doorbell that follows the `dma_wmb` below.
                unsafe {
                    let p = ring.as_ptr().add(at) as *mut u64;
                    core::ptr::write_volatile(p, lo.to_le());
                    core::ptr::write_volatile(p.add(1), hi.to_le());
                }
                dp.rq_pc = dp.rq_pc.wrapping_add(1);
            }
            let slot = &core.rq[req_id as usize];
            slot.wr_id.store(wr.wr_id, Relaxed);
            slot.len.store(total, Relaxed);
            head = head.wrapping_add(1);
            core.rq_head.store(head, Release);
        }
        if dp.rq_pc != start {
            dma_wmb();
            bars.db.write32(rq_db, dp.rq_pc.into());
        }
        result
    }

    /// `poll_cq`: the sub-CQs round robin, each entry taken by its phase and checked. A fast
    /// loop takes successful send completions of the QP the last one named; anything else
    /// goes through [`take`], which checks every kind of entry.
    pub(crate) fn poll_cq_dp(
        &self,
        cq: &Cq,
        wc: &mut [WorkCompletion],
    ) -> Result<usize, verbs::Error> {
        let sh = cq.shared();
        let mut guard = sh.state.lock();
        let st = &mut *guard;
        let subs = st.cc.len();
        let (mask, shift, entry) = (sh.depth - 1, sh.depth.trailing_zeros(), sh.entry);
        let mut n = 0;
        for k in 0..subs {
            let sub = if subs == 1 { 0 } else { (st.next + k) % subs };
            let base = sub * sh.depth as usize * entry;
            let mut cc = st.cc[sub];
            while n < wc.len() {
                // The fast loop: successful send completions of the QP seen last, its
                // bookkeeping in registers.
                if let Some(a) = st.qps.get(st.last).filter(|a| a.send) {
                    let k = fast_sends(sh, base, cc, &a.core, a.qpn, &mut wc[n..]);
                    cc = cc.wrapping_add(k as u32);
                    n += k;
                    if n == wc.len() {
                        break;
                    }
                }
                // Any other entry: every check, one field at a time.
                let o = base + (cc & mask) as usize * entry;
                // SAFETY: as above.
                let p = unsafe { sh.ring.0.as_ptr().add(o) as *const u64 };
                // SAFETY: as above.
                let w0 = u64::from_le(unsafe { core::ptr::read_volatile(p) });
                if (w0 >> 24) as u32 & 1 == (cc >> shift) & 1 {
                    break;
                }
                dma_rmb();
                // SAFETY: as above.
                let w0 = u64::from_le(unsafe { core::ptr::read_volatile(p) });
                // SAFETY: as above.
                let w1 = u64::from_le(unsafe { core::ptr::read_volatile(p.add(1)) });
                // Bytes 16..24 of an extended entry (`length_hi`); none in 16-byte entries.
                let w2 = if entry >= 32 {
                    // SAFETY: as above: entries of 32 bytes hold this word.
                    u64::from_le(unsafe { core::ptr::read_volatile(p.add(2)) })
                } else {
                    0
                };
                match take(st, w0, w1, w2, &mut wc[n]) {
                    Ok(report) => {
                        cc = cc.wrapping_add(1);
                        n += usize::from(report);
                    }
                    Err(f) => {
                        if n > 0 {
                            // The good completions first; the bad entry stays for the next call.
                            st.cc[sub] = cc;
                            st.next = sub;
                            return Ok(n);
                        }
                        st.cc[sub] = cc.wrapping_add(1);
                        self.note_bad_cqe(f);
                        return Err(verbs::Error::Io);
                    }
                }
            }
            st.cc[sub] = cc;
        }
        if subs > 1 {
            st.next = (st.next + 1) % subs;
        }
        Ok(n)
    }
}

/// The fast loop of `poll_cq_dp`: from consumer counter `cc` of the sub-CQ at byte `base`
/// of the ring, up to the end of the ring's current pass, the successful send completions of
/// QP `qpn` (`q`) each naming an outstanding signalled send slot; stops at the first entry
/// that is anything else (not written yet, another QP's, an error, an unknown id...: left to
/// [`take`], which checks every kind), or when `wc` is full. Every entry it consumes gives one
/// completion; returns how many.
#[inline(never)]
fn fast_sends(
    sh: &CqShared,
    base: usize,
    cc: u32,
    q: &QpCore,
    qpn: u16,
    wc: &mut [WorkCompletion],
) -> usize {
    let depth = sh.depth;
    let pos = cc & (depth - 1);
    // The entries before the end of this pass (the phase the device writes flips after it).
    let room = wc.len().min((depth - pos) as usize);
    // The first word wanted under `MASK`: status OK (0), the phase of this pass (the
    // complement of the counter's pass bit), a send entry, QP `qpn`.
    const MASK: u64 = 0xffff_07ff << 16;
    let phase = u64::from(((cc >> depth.trailing_zeros()) & 1) ^ 1);
    let want = u64::from(qpn) << 32 | u64::from(Q_TYPE_SEND) << 25 | phase << 24;
    // Bytes 8..16 of the completion but the opcode (see `write_send_wc`).
    let mid = u64::from(qpn) << 32 | WcStatus::Success as u64;
    let entry = sh.entry;
    let mut p = sh
        .ring
        .0
        .as_ptr()
        .wrapping_add(base + pos as usize * entry)
        .cast::<u64>()
        .cast_const();
    let sq = &*q.sq;
    let mut n = 0;
    for out in &mut wc[..room] {
        // SAFETY: `p` is entry `pos + n` of the sub-CQ at `base` and `pos + n < depth`
        // (`room`), so `p + 16 <= depth * subs * entry`, the ring's size (checked by
        // `CqShared::new`), which the CQ keeps alive; entries are 16-byte aligned.
        let w0 = u64::from_le(unsafe { core::ptr::read_volatile(p) });
        if w0 & MASK != want {
            break;
        }
        // Every field used comes from the one 8-byte load that saw the phase (single-copy
        // atomic), so nothing of the entry is read again after the barrier.
        dma_rmb();
        let Some(slot) = sq.get(usize::from(w0 as u16)) else {
            break;
        };
        let meta = slot.meta.load(Relaxed);
        // Outstanding and signalled.
        if meta & OUT_SIGNALED == 0 {
            break;
        }
        write_send_wc(
            out,
            slot.wr_id.load(Relaxed),
            mid | meta & 0xff << META_OP_SHIFT,
            (meta >> META_LEN_SHIFT) as u32,
        );
        // The slot is free again (after its fields were read: the poster reuses it).
        slot.meta.store(0, Release);
        p = p.wrapping_byte_add(entry);
        n += 1;
    }
    n
}

const _: () = {
    use core::mem::{offset_of, size_of};
    // The fast path keeps an L_Key's low 24 bits with two shifts.
    assert!(LKEY_MASK == 0x00ff_ffff);
    assert!(offset_of!(WorkCompletion, wr_id) == 0);
    assert!(offset_of!(WorkCompletion, status) == 8 && size_of::<WcStatus>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == 9 && size_of::<WcOpcode>() == 1);
    assert!(offset_of!(WorkCompletion, sl) == 10);
    assert!(offset_of!(WorkCompletion, dlid_path_bits) == 11);
    assert!(offset_of!(WorkCompletion, qp_num) == 12);
    assert!(offset_of!(WorkCompletion, vendor_err) == 16);
    assert!(offset_of!(WorkCompletion, wc_flags) == 20 && size_of::<WcFlags>() == 4);
    assert!(offset_of!(WorkCompletion, byte_len) == 24);
    assert!(size_of::<WorkCompletion>() == 40);
    // `SEND_OPS` is the identity on the discriminants `send_meta` stores (`take` and
    // `fast_sends` agree).
    assert!(WcOpcode::Send as u8 == 0);
    assert!(WcOpcode::RdmaWrite as u8 == 1);
    assert!(WcOpcode::RdmaRead as u8 == 2);
};

/// Writes a successful send completion: `wr_id`; bytes 8..16 `mid` (`status` Success,
/// `opcode` in byte 9, `sl` and `dlid_path_bits` 0, `qp_num`); `vendor_err` 0, `wc_flags`
/// empty; `byte_len`. The other fields stay as they were (undefined for a send).
#[inline(always)]
fn write_send_wc(w: &mut WorkCompletion, wr_id: u64, mid: u64, byte_len: u32) {
    w.wr_id = wr_id;
    w.byte_len = byte_len;
    let p = core::ptr::from_mut(w).cast::<u8>();
    // SAFETY: unaligned 8-byte writes of bytes 8..16 and 16..24, inside `*w` (40 bytes,
    // exclusively borrowed, `repr(C)`, layout asserted above): byte 8 `status` gets
    // `Success`, byte 9 `opcode` the opcode byte of an outstanding slot's meta (only the
    // driver writes metas, with `send_meta`, which stores a `WcOpcode` discriminant there; the
    // callers pass `mid` with that byte), bytes 10..16 `sl`,
    // `dlid_path_bits`, `qp_num` any value; zero is a valid `vendor_err` and `wc_flags`.
    unsafe {
        p.add(8).cast::<u64>().write_unaligned(mid);
        p.add(16).cast::<u64>().write_unaligned(0);
    }
}

/// Completion opcodes of send slots by their meta's opcode bits (the identity on the
/// discriminants the poster stores).
const SEND_OPS: [WcOpcode; 4] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::Send,
];

/// A buffer descriptor (or remote address) as its two little-endian words.
#[inline(always)]
fn desc(len: u32, key: u32, addr: u64) -> [u64; 2] {
    [
        (u64::from(len) | u64::from(key) << 32).to_le(),
        addr.to_le(),
    ]
}

/// The error for an opcode the QP cannot post: EOPNOTSUPP for what EFA does not have.
#[cold]
fn refused(op: WrOpcode) -> verbs::Error {
    match op {
        WrOpcode::RdmaRead
        | WrOpcode::RdmaWrite
        | WrOpcode::RdmaWriteWithImm
        | WrOpcode::AtomicCmpAndSwp
        | WrOpcode::AtomicFetchAndAdd
        | WrOpcode::SendWithInv => verbs::Error::NotSupported,
        _ => verbs::Error::InvalidArgument,
    }
}

/// The data area of an RDMA WQE (remote address, one local buffer): `(words, length)`.
#[inline(never)]
fn rdma_area(
    wr: &SendWr<'_, Ah>,
    remote_addr: u64,
    rkey: u32,
) -> Result<([u64; 4], u32), verbs::Error> {
    let mut local = wr.sg_list.iter().filter(|s| s.length != 0);
    let (Some(s), None) = (local.next(), local.next()) else {
        return Err(verbs::Error::InvalidArgument);
    };
    let [a, b] = desc(s.length, rkey, remote_addr);
    let [c, d] = desc(s.length, s.lkey & LKEY_MASK, s.addr);
    Ok(([a, b, c, d], s.length))
}

/// The data area of an inline send of at most `max` bytes (and at most the 80 of a
/// 128-byte WQE): `(words, length)`, the words past the data zero.
#[inline(never)]
fn inline_area(wr: &SendWr<'_, Ah>, max: u32) -> Result<([u64; 10], u32), verbs::Error> {
    let d = wr.inline_data;
    if d.len() > io::TX_INLINE_MAX_128 || d.len() as u32 > max {
        return Err(verbs::Error::InvalidArgument);
    }
    let mut b = [0u8; io::TX_INLINE_MAX_128];
    b[..d.len()].copy_from_slice(d);
    let w = core::array::from_fn(|i| {
        u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]))
    });
    Ok((w, d.len() as u32))
}

/// The first free send slot (meta zero) at or after `from`, round robin; `None` when all are
/// outstanding.
fn free_slot(sq: &[SqSlot], from: u32) -> Option<u32> {
    let mask = sq.len().checked_sub(1)? as u32;
    (0..=mask)
        .map(|k| from.wrapping_add(k) & mask)
        .find(|&i| sq[i as usize].meta.load(Acquire) == 0)
}

/// The WQE header of the SQ's next pass (the phase, bit 24, flipped; out of line: once per
/// pass).
#[cold]
#[inline(never)]
fn next_pass(hp: u64) -> u64 {
    hp ^ 1 << 24
}

/// Stores a WQE (`w`: its `N` little-endian words, 8 or 16) at `q`, word by word (what a
/// write-combining BAR takes in as one or two 64-byte lines).
///
/// # Safety
///
/// `q` is valid for volatile writes of `N` aligned words (an LLQ slot in the mapped BAR).
#[inline(always)]
unsafe fn store_wqe<const N: usize>(q: *mut u64, w: [u64; N]) {
    for (k, x) in w.into_iter().enumerate() {
        // SAFETY: word `k < N` of the slot (the caller's contract).
        unsafe { core::ptr::write_volatile(q.add(k), x) };
    }
}

/// A WR refused by `post_send` (`wr`, one of `wrs`): the WQEs of its batch before it (SQ
/// counter `pc.0` to `pc.1`) get their doorbell, the counter is kept; returns the WR's
/// index (`PostError::bad_wr`).
#[cold]
#[inline(never)]
fn stop<R: RegisterIo>(
    bars: &DataBars<R>,
    sq_db: usize,
    sq: &mut SqCursor,
    pc: (u16, u16),
    wrs: &[SendWr<'_, Ah>],
    wr: &SendWr<'_, Ah>,
) -> usize {
    if pc.1 != pc.0 {
        mmio_wmb();
        bars.db.write32(sq_db, pc.1.into());
    }
    sq.pc = pc.1;
    (core::ptr::from_ref(wr).addr() - wrs.as_ptr().addr()) / core::mem::size_of::<SendWr<'_, Ah>>()
}

/// `post_send` where the memory BAR is not mapped: every WQE (`N` words: 8, or 16 for
/// 128-byte WQEs) built by [`build`] and written with one [`RegisterIo::write_block`]. A QP
/// with 128-byte WQEs that arrives here with `N = 8` (the fast path refuses every mapping
/// for it) goes to [`post_wide`].
#[cold]
#[inline(never)]
fn post_unmapped<R: RegisterIo, const N: usize>(
    bars: &DataBars<R>,
    llq: usize,
    sq_db: usize,
    slots: &[SqSlot],
    sq: &mut SqCursor,
    ctx: &PostCtx,
    wrs: &[SendWr<'_, Ah>],
) -> Result<(), PostError> {
    if ctx.wide && N == 8 {
        return post_wide(bars, ctx.llq, sq_db, slots, sq, ctx, wrs);
    }
    let mut pc = sq.pc;
    for chunk in wrs.chunks(ctx.batch) {
        let first = pc;
        for wr in chunk {
            let phase = u64::from((u32::from(pc) >> ctx.shift) & 1) << 24;
            let mut w = [0u64; N];
            if let Err(error) = build(slots, &mut sq.next, ctx, wr, phase, &mut w) {
                let bad_wr = stop(bars, sq_db, sq, (first, pc), wrs, wr);
                return Err(PostError { error, bad_wr });
            }
            // SAFETY: `w` is `N * 8` initialised bytes (the WQE's byte image), borrowed for
            // the call only.
            let bytes = unsafe { core::slice::from_raw_parts(w.as_ptr().cast::<u8>(), N * 8) };
            let at = (u32::from(pc) & ctx.mask) as usize * (N * 8);
            bars.mem.write_block(llq + at, bytes);
            pc = pc.wrapping_add(1);
        }
        mmio_wmb();
        bars.db.write32(sq_db, pc.into());
    }
    sq.pc = pc;
    Ok(())
}

/// `post_send` of a QP with 128-byte WQEs: every WQE built by [`build`] into 16 words and
/// stored into its LLQ slot where the memory BAR is mapped, else written by
/// [`post_unmapped`].
#[cold]
#[inline(never)]
fn post_wide<R: RegisterIo>(
    bars: &DataBars<R>,
    llq: usize,
    sq_db: usize,
    slots: &[SqSlot],
    sq: &mut SqCursor,
    ctx: &PostCtx,
    wrs: &[SendWr<'_, Ah>],
) -> Result<(), PostError> {
    let Some(map) = bars
        .mem
        .mapped(llq, slots.len() * io::TX_WQE128_SIZE)
        .filter(|p| p.as_ptr().cast::<u64>().is_aligned())
    else {
        return post_unmapped::<_, 16>(bars, llq, sq_db, slots, sq, ctx, wrs);
    };
    let map = map.as_ptr().cast::<u64>();
    let mut pc = sq.pc;
    for chunk in wrs.chunks(ctx.batch) {
        let first = pc;
        for wr in chunk {
            let phase = u64::from((u32::from(pc) >> ctx.shift) & 1) << 24;
            let mut w = [0u64; 16];
            if let Err(error) = build(slots, &mut sq.next, ctx, wr, phase, &mut w) {
                let bad_wr = stop(bars, sq_db, sq, (first, pc), wrs, wr);
                return Err(PostError { error, bad_wr });
            }
            // SAFETY: slot `pc & mask` of the LLQ, 128 bytes (16 words) at word
            // `(pc & mask) * 16`, lies in the mapped range (`mask + 1 = slots.len()` slots of
            // 128 bytes), which lives as long as `bars`; the base is 8-byte aligned (checked).
            unsafe { store_wqe(map.add((u32::from(pc) & ctx.mask) as usize * 16), w) };
            pc = pc.wrapping_add(1);
        }
        mmio_wmb();
        bars.db.write32(sq_db, pc.into());
    }
    sq.pc = pc;
    Ok(())
}

/// One WQE for `wr` into `w` (`N` little-endian words: 8 for a 64-byte WQE, 16 for a
/// 128-byte one; zero on entry), its send id a free send slot at or after the cursor `next`
/// (which moves past it); `phase` is the SQ phase of the WQE's slot in bit 24. The words the
/// WR does not use stay zero.
#[inline(never)]
fn build<const N: usize>(
    slots: &[SqSlot],
    next: &mut u32,
    ctx: &PostCtx,
    wr: &SendWr<'_, Ah>,
    phase: u64,
    w: &mut [u64; N],
) -> Result<(), verbs::Error> {
    const { assert!(N == 8 || N == 16) };
    use verbs::Error::{InvalidArgument as Inval, NoMemory};
    let Some(dest) = &wr.dest else {
        return Err(Inval);
    };
    if dest.remote_qpn > 0xffff {
        return Err(Inval);
    }
    let mut ctrl1 = u64::from(CTRL1_META_DESC);
    let mut imm = 0u64;
    let (n, len, wc_op);
    match &wr.remote {
        RemoteOp::None => {
            match wr.opcode {
                WrOpcode::Send => {}
                WrOpcode::SendWithImm => {
                    imm = u64::from(imm_host(wr.imm_data));
                    ctrl1 |= u64::from(CTRL1_HAS_IMM);
                }
                op => return Err(refused(op)),
            }
            wc_op = WcOpcode::Send;
            if wr.flags.contains(SendFlags::INLINE) {
                // The data area holds 32 inline bytes in a 64-byte WQE, 80 in a 128-byte one.
                let room = if N >= 16 {
                    io::TX_INLINE_MAX_128
                } else {
                    io::TX_INLINE_MAX
                };
                let (area, l) = inline_area(wr, ctx.max_inline.min(room as u32))?;
                let k = N.saturating_sub(4).min(area.len());
                w[4..4 + k].copy_from_slice(&area[..k]);
                ctrl1 |= u64::from(CTRL1_INLINE_MSG);
                n = u64::from(l);
                len = l;
            } else if let [s] = wr.sg_list
                && s.length != 0
            {
                // The common case: one buffer.
                if s.length > ctx.mtu || ctx.max_sge == 0 {
                    return Err(Inval);
                }
                [w[4], w[5]] = desc(s.length, s.lkey & LKEY_MASK, s.addr);
                (w[6], w[7]) = (0, 0);
                n = 1;
                len = s.length;
            } else {
                let mut k = 0usize;
                let mut total = 0u32;
                w[4..8].fill(0);
                for s in wr.sg_list {
                    if s.length == 0 {
                        continue;
                    }
                    if k >= ctx.max_sge {
                        return Err(Inval);
                    }
                    let [a, b] = desc(s.length, s.lkey & LKEY_MASK, s.addr);
                    if k == 0 {
                        (w[4], w[5]) = (a, b);
                    } else {
                        (w[6], w[7]) = (a, b);
                    }
                    total = total.checked_add(s.length).ok_or(Inval)?;
                    k += 1;
                }
                if total > ctx.mtu {
                    return Err(Inval);
                }
                n = k as u64;
                len = total;
            }
        }
        RemoteOp::Rdma { remote_addr, rkey } => {
            let op = match wr.opcode {
                WrOpcode::RdmaRead if ctx.read_ok => {
                    wc_op = WcOpcode::RdmaRead;
                    op_type::RDMA_READ
                }
                WrOpcode::RdmaWrite if ctx.write_ok => {
                    wc_op = WcOpcode::RdmaWrite;
                    op_type::RDMA_WRITE
                }
                WrOpcode::RdmaWriteWithImm if ctx.write_ok => {
                    // The responder consumes a receive WR for it (its completion carries the
                    // immediate and the write's length).
                    imm = u64::from(imm_host(wr.imm_data));
                    ctrl1 |= u64::from(CTRL1_HAS_IMM);
                    wc_op = WcOpcode::RdmaWrite;
                    op_type::RDMA_WRITE
                }
                op => return Err(refused(op)),
            };
            let (area, l) = rdma_area(wr, *remote_addr, *rkey)?;
            w[4..8].copy_from_slice(&area);
            ctrl1 |= u64::from(op);
            n = 1;
            len = l;
        }
        _ => return Err(refused(wr.opcode)),
    }
    // A free send slot: the cursor's, else the next free one after it.
    let Some(id) = free_slot(slots, *next) else {
        return Err(NoMemory);
    };
    let slot = &slots[id as usize];
    *next = id.wrapping_add(1);
    slot.wr_id.store(wr.wr_id, Relaxed);
    let signaled = ctx.sig_all || wr.flags.contains(SendFlags::SIGNALED);
    slot.meta.store(send_meta(signaled, wc_op, len), Relaxed);
    let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
        ctx.qkey
    } else {
        dest.remote_qkey
    };
    let ctrl2 = phase >> 24 | u64::from(CTRL2_FIRST | CTRL2_LAST | CTRL2_COMP_REQ);
    w[0] = (u64::from(id) | ctrl1 << 16 | ctrl2 << 24 | u64::from(dest.remote_qpn) << 32 | n << 48)
        .to_le();
    w[1] = (imm | u64::from(dest.ah.handle()) << 32).to_le();
    w[2] = u64::from(qkey).to_le();
    w[3] = 0;
    Ok(())
}

/// Checks one completion entry (`w0`, `w1`: its first two little-endian words; `w2`: the
/// third of an extended entry, else 0) against the bookkeeping and fills `out`; `Ok(false)`
/// for a consumed completion that is not reported.
#[inline(always)]
fn take(
    st: &mut PollState,
    w0: u64,
    w1: u64,
    w2: u64,
    out: &mut WorkCompletion,
) -> Result<bool, CqeFault> {
    let req_id = w0 as u16;
    let status = (w0 >> 16) as u8;
    let flags = (w0 >> 24) as u8;
    let qpn = (w0 >> 32) as u16;
    let q_type = (flags >> 1) & 3;
    let i = st
        .qps
        .iter()
        .position(|a| a.qpn == qpn)
        .ok_or(CqeFault::UnknownQp(qpn))?;
    st.last = i;
    let a = &st.qps[i];
    let wst = wc_status(status).ok_or(CqeFault::Status(status))?;
    let q = &*a.core;
    if q_type == Q_TYPE_SEND && a.send {
        let slot =
            q.sq.get(usize::from(req_id))
                .ok_or(CqeFault::SendReqId(req_id))?;
        let meta = slot.meta.load(Relaxed);
        if meta & (OUT_SIGNALED | OUT_SILENT) == 0 {
            return Err(CqeFault::SendReqId(req_id));
        }
        let op = SEND_OPS[(meta >> META_OP_SHIFT & 3) as usize];
        *out = WorkCompletion {
            wr_id: slot.wr_id.load(Relaxed),
            status: wst,
            opcode: op,
            qp_num: qpn.into(),
            vendor_err: status.into(),
            byte_len: (meta >> META_LEN_SHIFT) as u32,
            ..WorkCompletion::default()
        };
        // The slot is free again (after its fields were read: the poster reuses it).
        slot.meta.store(0, Release);
        return Ok(meta & OUT_SIGNALED != 0 || wst != WcStatus::Success);
    }
    if q_type == Q_TYPE_RECV && a.recv {
        let tail = q.rq_tail.load(Relaxed);
        let depth = q.rq.len() as u32;
        if tail == q.rq_head.load(Acquire) || u32::from(req_id) != tail & (depth - 1) {
            return Err(CqeFault::RecvReqId(req_id));
        }
        let slot = &q.rq[usize::from(req_id)];
        let length = (w0 >> 48) as u16;
        let imm = flags & CDESC_HAS_IMM != 0;
        // An RDMA write with immediate took this receive: the length is the write's (bits
        // 31:16 in `length_hi`), the receive's buffers untouched.
        let write = (flags >> CDESC_OP_TYPE_SHIFT) & CDESC_OP_TYPE_MASK == op_type::RDMA_WRITE;
        let byte_len = if write {
            if !imm {
                return Err(CqeFault::OpType(op_type::RDMA_WRITE));
            }
            u32::from(length) | u32::from(w2 as u16) << 16
        } else if u32::from(length) > slot.len.load(Relaxed) {
            return Err(CqeFault::Length(length));
        } else {
            length.into()
        };
        *out = WorkCompletion {
            wr_id: slot.wr_id.load(Relaxed),
            status: wst,
            opcode: if write {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            qp_num: qpn.into(),
            vendor_err: status.into(),
            byte_len,
            imm_data: if imm { (w1 >> 32) as u32 } else { 0 }.to_be(),
            wc_flags: if imm {
                WcFlags::WITH_IMM
            } else {
                WcFlags::empty()
            },
            src_qp: ((w1 >> 16) as u16).into(),
            ..WorkCompletion::default()
        };
        q.rq_tail.store(tail.wrapping_add(1), Release);
        return Ok(true);
    }
    if q_type == Q_TYPE_SEND || q_type == Q_TYPE_RECV {
        return Err(CqeFault::UnknownQp(qpn));
    }
    Err(CqeFault::QueueType(q_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(metas: &[u64]) -> Vec<SqSlot> {
        metas
            .iter()
            .map(|&m| SqSlot {
                wr_id: AtomicU64::new(0),
                meta: AtomicU64::new(m),
            })
            .collect()
    }

    #[test]
    fn a_send_slot_is_the_first_free_one_from_the_cursor_round_robin() {
        let busy = send_meta(true, WcOpcode::Send, 64);
        let silent = send_meta(false, WcOpcode::RdmaRead, 8);
        let sq = slots(&[0, busy, silent, 0]);
        assert_eq!(free_slot(&sq, 0), Some(0));
        // Slots 1 and 2 are outstanding (signalled or not): the search goes on to 3.
        assert_eq!(free_slot(&sq, 1), Some(3));
        assert_eq!(free_slot(&sq, 2), Some(3));
        // From 3 (and from a cursor past the depth, taken modulo it) round robin.
        assert_eq!(free_slot(&sq, 3), Some(3));
        assert_eq!(free_slot(&sq, 5), Some(3));
        assert_eq!(free_slot(&sq, 7), Some(3));
        assert_eq!(free_slot(&sq, 4), Some(0));
        // All outstanding: none (post_send answers ENOMEM).
        assert_eq!(free_slot(&slots(&[busy, silent]), 1), None);
        assert_eq!(free_slot(&[], 0), None);
    }

    #[test]
    fn the_slot_meta_keeps_opcode_length_and_whether_to_report() {
        let m = send_meta(true, WcOpcode::RdmaRead, 0x1234_5678);
        assert_ne!(m & OUT_SIGNALED, 0);
        assert_eq!(
            SEND_OPS[(m >> META_OP_SHIFT & 3) as usize],
            WcOpcode::RdmaRead
        );
        assert_eq!((m >> META_LEN_SHIFT) as u32, 0x1234_5678);
        let s = send_meta(false, WcOpcode::RdmaWrite, u32::MAX);
        assert_eq!(s & OUT_SIGNALED, 0);
        assert_ne!(s & OUT_SILENT, 0);
        assert_eq!(
            SEND_OPS[(s >> META_OP_SHIFT & 3) as usize],
            WcOpcode::RdmaWrite
        );
        assert_eq!((s >> META_LEN_SHIFT) as u32, u32::MAX);
        // The length never reaches the outstanding bits.
        assert_eq!(s >> 62, 1);
    }
}
