//! Work queues: the send and receive rings inside a QP's buffer (RQ first, then SQ) and the
//! driver's trusted shadows of them.
//!
//! Everything the device could lie about is kept here, in driver memory: the producer and
//! consumer positions of both queues, and per posted WQE its `wr_id`, where it starts, how many
//! WQEBBs it spans, its opcode, whether it was signalled and how many bytes it names. A CQE is
//! only ever interpreted against this bookkeeping (see `poll.rs`).
//!
//! The bookkeeping is shared between the QP's owner (who posts, `&mut Qp`) and the pollers of
//! its CQs (under the CQ lock), single producer / single consumer: the poster writes slots that
//! are free, then publishes `head` (Release); the poller reads `head` (Acquire), reads only
//! slots in `[tail, head)`, then publishes `tail` (Release); the poster reads `tail` (Acquire)
//! before reusing a slot. The slots are atomics used with Relaxed ordering (plain moves).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::ring::Ring;

/// `SqSlot::meta`: the slot holds the start of a posted WQE.
pub(crate) const META_START: u64 = 1 << 16;
/// `SqSlot::meta`: the WQE asked for a completion.
pub(crate) const META_SIGNALED: u64 = 1 << 17;
/// `SqSlot::meta`: an atomic (completion byte length 8).
pub(crate) const META_ATOMIC: u64 = 1 << 27;
/// `SqSlot::meta`: an RDMA read (completion byte length from the CQE, at most `len`).
pub(crate) const META_READ: u64 = 1 << 28;
/// `SqSlot::meta`: shift of the completion opcode (`verbs::WcOpcode` value, 0..=4).
pub(crate) const META_WC_SHIFT: u32 = 29;

/// Bookkeeping of one SQ WQEBB.
#[derive(Default)]
pub(crate) struct SqSlot {
    /// `wr_id` of the WQE starting here.
    pub(crate) wr_id: AtomicU64,
    /// bits 63:32 free-running WQEBB position of the WQE starting here; 31:29 completion
    /// opcode; 28 RDMA read; 27 atomic; 17 signalled; 16 a WQE starts here (0 for the middle
    /// of a multi-WQEBB WQE); 15:8 send opcode; 7:0 WQEBBs.
    pub(crate) meta: AtomicU64,
    /// Bytes the WQE gathers (RDMA read: bytes it may scatter).
    pub(crate) len: AtomicU32,
}

/// Bookkeeping of one RQ WQE.
#[derive(Default)]
pub(crate) struct RqSlot {
    /// `wr_id`.
    pub(crate) wr_id: AtomicU64,
    /// Bytes its scatter list can take.
    pub(crate) len: AtomicU32,
}

/// An atomic on its own cache line (poster and poller write different counters).
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct Line(pub(crate) AtomicU32);

/// The part of a QP that its CQs' pollers see.
pub(crate) struct QpCore {
    /// QP number.
    pub(crate) qpn: u32,
    /// UD (the responder CQE carries a source QP and GRH flag).
    pub(crate) ud: bool,
    /// SQ producer position (WQEBBs, free running), published after the WQEs are written.
    pub(crate) sq_head: Line,
    /// SQ consumer position: the first WQEBB not yet retired by a CQE.
    pub(crate) sq_tail: Line,
    /// `sq.len() - 1`.
    pub(crate) sq_mask: u32,
    /// One slot per WQEBB.
    pub(crate) sq: Box<[SqSlot]>,
    /// RQ producer position (WQEs, free running).
    pub(crate) rq_head: Line,
    /// RQ consumer position.
    pub(crate) rq_tail: Line,
    /// `rq.len() - 1`.
    pub(crate) rq_mask: u32,
    /// One slot per RQ WQE.
    pub(crate) rq: Box<[RqSlot]>,
}

impl core::fmt::Debug for QpCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpCore")
            .field("qpn", &self.qpn)
            .field("sq_head", &self.sq_head.0.load(Ordering::Relaxed))
            .field("sq_tail", &self.sq_tail.0.load(Ordering::Relaxed))
            .field("rq_head", &self.rq_head.0.load(Ordering::Relaxed))
            .field("rq_tail", &self.rq_tail.0.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn slots<T: Default>(n: usize) -> Box<[T]> {
    let mut v = Vec::with_capacity(n);
    v.resize_with(n, T::default);
    v.into_boxed_slice()
}

impl QpCore {
    /// Bookkeeping for an SQ of `sq_bbs` WQEBBs and an RQ of `rq_wqes` WQEs (powers of two).
    pub(crate) fn new(qpn: u32, ud: bool, sq_bbs: u32, rq_wqes: u32) -> QpCore {
        assert!(sq_bbs.is_power_of_two() && rq_wqes.is_power_of_two());
        QpCore {
            qpn,
            ud,
            sq_head: Line::default(),
            sq_tail: Line::default(),
            sq_mask: sq_bbs - 1,
            sq: slots(sq_bbs as usize),
            rq_head: Line::default(),
            rq_tail: Line::default(),
            rq_mask: rq_wqes - 1,
            rq: slots(rq_wqes as usize),
        }
    }

    /// The SQ slot of WQEBB position `p`.
    #[inline(always)]
    pub(crate) fn sq_slot(&self, p: u32) -> &SqSlot {
        let i = (p & self.sq_mask) as usize;
        debug_assert!(i < self.sq.len());
        // SAFETY: `sq.len() == sq_mask + 1` (both set in `new` from the same power of two), so
        // the masked index is in bounds.
        unsafe { self.sq.get_unchecked(i) }
    }

    /// The RQ slot of WQE position `p`.
    #[inline(always)]
    pub(crate) fn rq_slot(&self, p: u32) -> &RqSlot {
        let i = (p & self.rq_mask) as usize;
        debug_assert!(i < self.rq.len());
        // SAFETY: `rq.len() == rq_mask + 1` (see `new`).
        unsafe { self.rq.get_unchecked(i) }
    }

    /// Forgets everything posted (the QP went to RESET and its CQs were cleaned).
    pub(crate) fn reset(&self) {
        for c in [&self.sq_head, &self.sq_tail, &self.rq_head, &self.rq_tail] {
            c.0.store(0, Ordering::Release);
        }
        for s in self.sq.iter() {
            s.meta.store(0, Ordering::Relaxed);
        }
    }
}

/// The BlueFlame / doorbell register of a QP.
#[derive(Debug)]
pub(crate) struct BfReg {
    /// BAR offset of the register (UAR page + 0x800).
    pub(crate) reg: usize,
    /// Current half (0 or `half`), toggled after every doorbell.
    pub(crate) offset: usize,
    /// Size of one half (`bf_reg_size / 2`).
    pub(crate) half: usize,
    /// Copy single small WQEs to the register (BlueFlame) instead of writing 8 bytes.
    pub(crate) blueflame: bool,
}

/// The poster's side of the SQ.
#[derive(Debug)]
pub(crate) struct SqState {
    /// The SQ's WQEBBs.
    pub(crate) ring: Ring,
    /// WQEBBs in the ring (power of two).
    pub(crate) wqe_cnt: u32,
    /// Next WQEBB position to write (free running; `cur_post & 0xffff` is the WQE index).
    pub(crate) cur_post: u32,
    /// Last consumer position read from the poller.
    pub(crate) tail: u32,
    /// Most data segments per WQE.
    pub(crate) max_sge: u32,
    /// Most inline bytes per WQE.
    pub(crate) max_inline: u32,
    /// Every WQE asks for a completion.
    pub(crate) sig_all: bool,
    /// `fm_ce_se` per `SendFlags & (FENCE | SIGNALED | SOLICITED)` (`post::fm_table`).
    pub(crate) fm: [u8; 8],
    /// Per `verbs::WrOpcode` value: what the QP type does with it (`post::op_table`).
    pub(crate) ops: [u64; 7],
    /// Send doorbell register.
    pub(crate) bf: BfReg,
}

/// The poster's side of the RQ.
#[derive(Debug)]
pub(crate) struct RqState {
    /// The RQ's WQEs.
    pub(crate) ring: Ring,
    /// WQEs in the ring (power of two).
    pub(crate) wqe_cnt: u32,
    /// log2 of the WQE stride in bytes.
    pub(crate) log_stride: u32,
    /// Next WQE position to write (free running).
    pub(crate) head: u32,
    /// Last consumer position read from the poller.
    pub(crate) tail: u32,
    /// Most data segments per WQE (`stride / 16`).
    pub(crate) max_sge: u32,
}

/// Per-QP-type bytes in front of the data segments of the largest WQE: RC ctrl + raddr
/// (RDMA; atomics are a fixed 64 bytes), UD ctrl + datagram.
pub(crate) const fn sq_overhead(ud: bool) -> u32 {
    if ud { 16 + 48 } else { 16 + 16 }
}

/// Largest WQE in bytes: 16 WQEBBs, `ds` ≤ 63 units, the device's `max_wqe_sz_sq`, and the
/// ring itself.
pub(crate) fn max_wqe_bytes(max_wqe_sz_sq: u16, wqe_cnt: u32) -> u32 {
    let bbs = (max_wqe_sz_sq as u32 / 64).min(16).min(wqe_cnt);
    (bbs * 64).min(63 * 16)
}

/// `(max_sge, max_inline)` of a WQE of `bytes` bytes.
pub(crate) fn sq_limits(bytes: u32, ud: bool) -> (u32, u32) {
    let room = bytes.saturating_sub(sq_overhead(ud));
    (room / 16, room.saturating_sub(4))
}
