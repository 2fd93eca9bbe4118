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

use crate::post::{WR_SHAPES, WrEnt, fill_wr_table};
use crate::ring::{Block, Ring};

/// `SqSlot::meta`: the slot holds the start of a posted WQE.
pub(crate) const META_START: u32 = 1 << 16;
/// `SqSlot::meta`: an atomic (completion byte length 8).
pub(crate) const META_ATOMIC: u32 = 1 << 19;
/// `SqSlot::meta`: an RDMA read (completion byte length from the CQE, at most `len`).
pub(crate) const META_READ: u32 = 1 << 20;
/// `SqSlot::meta`: shift of the completion opcode (`verbs::WcOpcode` value, 0..=4).
pub(crate) const META_WC_SHIFT: u32 = 21;
/// `SqSlot::meta`: shift of the WQE's `fm_ce_se` byte.
pub(crate) const META_FM_SHIFT: u32 = 24;
/// `SqSlot::meta`: the WQE asked for a completion (`fm_ce_se & CE_CQ_UPDATE`).
pub(crate) const META_SIGNALED: u32 =
    (firmware_interface::wqe::CE_CQ_UPDATE as u32) << META_FM_SHIFT;

/// Bookkeeping of one SQ WQEBB (16 bytes: the index scales by a shift).
#[derive(Default)]
#[repr(C)]
pub(crate) struct SqSlot {
    /// `wr_id` of the WQE starting here.
    pub(crate) wr_id: AtomicU64,
    /// bits 31:24 the WQE's `fm_ce_se` (bit 27 signalled); 23:21 completion opcode; 20 RDMA
    /// read; 19 atomic; 16 a WQE starts here (0 for the middle of a multi-WQEBB WQE and for
    /// a slot never posted since the last reset); 15:8 send opcode; 7:0 WQEBBs.
    ///
    /// A slot with bit 16 set inside the outstanding range `[sq_tail, sq_head)` is the start
    /// of a WQE posted in the current lap: the poster rewrites the slot of every WQEBB it
    /// hands out (the start's, and zero for the others), so no older value survives there.
    pub(crate) meta: AtomicU32,
    /// Bytes the WQE gathers (RDMA read: bytes it may scatter).
    pub(crate) len: AtomicU32,
}

const _: () = assert!(core::mem::size_of::<SqSlot>() == 16);

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
    /// `sq.len() - 1`. Private, like `sq` and `sq_ring`, and set only by [`QpCore::new`]:
    /// [`QpCore::sq_view`] relies on the three agreeing.
    sq_mask: u32,
    /// One slot per WQEBB.
    sq: Box<[SqSlot]>,
    /// The SQ's WQEBBs (`sq.len()` of them), for the poster only ([`QpCore::sq_view`]): the
    /// QP that owns their buffer keeps it until it is destroyed, and only its owner (`&mut
    /// Qp`) posts; the CQs' pollers never touch the ring.
    sq_ring: Ring,
    /// RQ producer position (WQEs, free running).
    pub(crate) rq_head: Line,
    /// RQ consumer position.
    pub(crate) rq_tail: Line,
    /// `rq.len() - 1`.
    pub(crate) rq_mask: u32,
    /// One slot per RQ WQE.
    pub(crate) rq: Box<[RqSlot]>,
    /// The SRQ the QP receives from (then the RQ is unused: receive completions name SRQ
    /// WQEs).
    pub(crate) srq: Option<alloc::sync::Arc<crate::srq::SrqCore>>,
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

/// A slot array and its mask (`len - 1`), indexed by free-running positions. Only
/// [`QpCore`] makes these, from arrays whose length is a power of two equal to `mask + 1`.
pub(crate) struct Slots<'a, T> {
    s: &'a [T],
    mask: u32,
}

impl<T> Clone for Slots<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Slots<'_, T> {}

impl<'a, T> Slots<'a, T> {
    /// The slot of position `p` (masked).
    #[inline(always)]
    pub(crate) fn at(self, p: u32) -> &'a T {
        let i = (p & self.mask) as usize;
        debug_assert!(i < self.s.len());
        // SAFETY: `s.len() == mask + 1` (`QpCore::new` builds both from one power of two and
        // `QpCore` hands out no other `Slots`), so the masked index is in bounds.
        unsafe { self.s.get_unchecked(i) }
    }
}

/// The SQ's WQEBBs and their bookkeeping slots under one mask: both have `mask + 1` entries
/// (checked once by [`QpCore::new`], whose fields never change after), so one masked index
/// addresses both.
#[derive(Clone, Copy)]
pub(crate) struct SqView<'a> {
    ring: Ring,
    slots: &'a [SqSlot],
    mask: u32,
    /// `mask << 4`: byte offsets of slots (a WQEBB's byte offset is 4 times its slot's).
    off_mask: usize,
}

impl<'a> SqView<'a> {
    /// The WQEBB of position `p` (masked) and its slot.
    #[inline(always)]
    pub(crate) fn at(&self, p: u32) -> (Block<'_>, &'a SqSlot) {
        let i = (p & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // SAFETY: `i <= mask`; `QpCore::new` checked that there are `mask + 1` slots and WQEBBs, so
        // the slot index is in bounds and the block offset `i * 64` is a multiple of 64 below
        // the ring's length.
        unsafe {
            (
                self.ring.block_unchecked(i << 6),
                self.slots.get_unchecked(i),
            )
        }
    }

    /// The byte offset in the slots of position `p`'s slot (for [`at_off`](Self::at_off);
    /// the next position's is 16 more, before masking). Its WQEBB is at 4 times that in the
    /// ring.
    #[inline(always)]
    pub(crate) fn off(&self, p: u32) -> usize {
        ((p & self.mask) as usize) << 4
    }

    /// The WQEBB and the slot at slot byte offset `off` (masked to a slot of the array).
    #[inline(always)]
    pub(crate) fn at_off(&self, off: usize) -> (Block<'_>, &'a SqSlot) {
        let o = off & self.off_mask;
        debug_assert!(o >> 4 < self.slots.len());
        // SAFETY: `o` is a multiple of 16 at most `mask * 16`; `new` checked that there are
        // `mask + 1` slots and WQEBBs, so the slot index `o / 16` is in bounds and the block
        // at `o * 4`, a multiple of 64 at most `mask * 64`, lies in the ring.
        unsafe {
            (
                self.ring.block_unchecked(o << 2),
                &*self.slots.as_ptr().byte_add(o),
            )
        }
    }

    /// The start of the WQE holding position `p`, or `p` if it is not in a posted WQE:
    /// looks back from `p` over at most 16 WQEBBs for the slot marked as a WQE's start.
    #[inline]
    pub(crate) fn wqe_start(&self, p: u32) -> u32 {
        let mut q = p;
        for _ in 0..16 {
            if self.at(q).1.meta.load(Ordering::Relaxed) & META_START != 0 {
                return q;
            }
            q = q.wrapping_sub(1);
        }
        p
    }
}

fn slots<T: Default>(n: usize) -> Box<[T]> {
    let mut v = Vec::with_capacity(n);
    v.resize_with(n, T::default);
    v.into_boxed_slice()
}

impl QpCore {
    /// Bookkeeping for an SQ of `sq_bbs` WQEBBs in `sq_ring` and an RQ of `rq_wqes` WQEs
    /// (powers of two); `None` unless `sq_ring` holds exactly `sq_bbs` WQEBBs.
    pub(crate) fn new(
        qpn: u32,
        ud: bool,
        sq_bbs: u32,
        rq_wqes: u32,
        sq_ring: Ring,
    ) -> Option<QpCore> {
        assert!(sq_bbs.is_power_of_two() && rq_wqes.is_power_of_two());
        if sq_ring.len() != sq_bbs as usize * 64 {
            return None;
        }
        Some(QpCore {
            qpn,
            ud,
            sq_head: Line::default(),
            sq_tail: Line::default(),
            sq_mask: sq_bbs - 1,
            sq: slots(sq_bbs as usize),
            sq_ring,
            rq_head: Line::default(),
            rq_tail: Line::default(),
            rq_mask: rq_wqes - 1,
            rq: slots(rq_wqes as usize),
            srq: None,
        })
    }

    /// The SQ's WQEBBs and slots under one mask. No check: `new` made the ring and the slots
    /// from one size, and the fields are private and never change after.
    #[inline(always)]
    pub(crate) fn sq_view(&self) -> SqView<'_> {
        debug_assert!(
            self.sq.len() == self.sq_mask as usize + 1 && self.sq_ring.len() == self.sq.len() * 64
        );
        SqView {
            ring: self.sq_ring,
            slots: &self.sq,
            mask: self.sq_mask,
            off_mask: (self.sq_mask as usize) << 4,
        }
    }

    /// The SQ slot of WQEBB position `p`.
    #[inline(always)]
    pub(crate) fn sq_slot(&self, p: u32) -> &SqSlot {
        self.sq_slots().at(p)
    }

    /// The RQ slot of WQE position `p`.
    #[inline(always)]
    pub(crate) fn rq_slot(&self, p: u32) -> &RqSlot {
        self.rq_slots().at(p)
    }

    /// The SQ slots, for a loop to keep in registers.
    #[inline(always)]
    pub(crate) fn sq_slots(&self) -> Slots<'_, SqSlot> {
        Slots {
            s: &self.sq,
            mask: self.sq_mask,
        }
    }

    /// The RQ slots, for a loop to keep in registers.
    #[inline(always)]
    pub(crate) fn rq_slots(&self) -> Slots<'_, RqSlot> {
        Slots {
            s: &self.rq,
            mask: self.rq_mask,
        }
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
pub(crate) struct SqState {
    /// The SQ's WQEBBs.
    pub(crate) ring: Ring,
    /// WQEBBs in the ring (power of two).
    pub(crate) wqe_cnt: u32,
    /// Next WQEBB position to write (free running; `cur_post & 0xffff` is the WQE index).
    pub(crate) cur_post: u32,
    /// Last consumer position read from the poller.
    pub(crate) tail: u32,
    /// Most data segments per WQE (set with [`SqState::set_limits`]).
    pub(crate) max_sge: u32,
    /// Most inline bytes per WQE (set with [`SqState::set_limits`]).
    pub(crate) max_inline: u32,
    /// Every WQE asks for a completion (set with [`SqState::set_sig_all`]).
    pub(crate) sig_all: bool,
    /// QP number (for the control segments).
    qpn: u32,
    /// UD QP.
    ud: bool,
    /// What each opcode and combination of send flags puts in a WQE (`post::fill_wr_table`).
    pub(crate) wrs: Box<[WrEnt; WR_SHAPES]>,
    /// Send doorbell register.
    pub(crate) bf: BfReg,
}

impl core::fmt::Debug for SqState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Without the work-request table (128 entries derived from the rest).
        f.debug_struct("SqState")
            .field("ring", &self.ring)
            .field("wqe_cnt", &self.wqe_cnt)
            .field("cur_post", &self.cur_post)
            .field("tail", &self.tail)
            .field("max_sge", &self.max_sge)
            .field("max_inline", &self.max_inline)
            .field("sig_all", &self.sig_all)
            .field("bf", &self.bf)
            .finish_non_exhaustive()
    }
}

impl SqState {
    /// The SQ of QP `qpn`: `wqe_cnt` WQEBBs in `ring`, limits, doorbell register.
    pub(crate) fn new(
        ring: Ring,
        wqe_cnt: u32,
        qpn: u32,
        ud: bool,
        (max_sge, max_inline): (u32, u32),
        bf: BfReg,
    ) -> SqState {
        SqState {
            ring,
            wqe_cnt,
            cur_post: 0,
            tail: 0,
            max_sge,
            max_inline,
            sig_all: false,
            qpn,
            ud,
            wrs: {
                let mut t = Box::new([WrEnt::default(); WR_SHAPES]);
                fill_wr_table(&mut t, ud, qpn, max_sge, false);
                t
            },
            bf,
        }
    }

    /// Sets the most data segments and inline bytes per WQE (and the tables that depend on
    /// them).
    pub(crate) fn set_limits(&mut self, max_sge: u32, max_inline: u32) {
        self.max_sge = max_sge;
        self.max_inline = max_inline;
        fill_wr_table(&mut self.wrs, self.ud, self.qpn, max_sge, self.sig_all);
    }

    /// Makes every WQE ask for a completion, or only the signalled ones.
    pub(crate) fn set_sig_all(&mut self, on: bool) {
        self.sig_all = on;
        fill_wr_table(&mut self.wrs, self.ud, self.qpn, self.max_sge, on);
    }
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
