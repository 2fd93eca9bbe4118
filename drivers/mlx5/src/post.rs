//! Posting work requests (spec §8, §12.1).
//!
//! Send, per work request: validate it against the QP (opcode for the QP type, remote part,
//! SGE count, inline size), check ring space, write the transport segments (raddr; raddr +
//! atomic; the 48-byte datagram segment of the AH with the destination QPN and Q_Key), the
//! data segments (zero-length SGEs skipped) or the inline data (header `len | 0x80000000`,
//! wrapping at the end of the ring), then the control segment, and record the WQE in the
//! driver's bookkeeping. Then once for the batch: publish the producer position, `dma_wmb`,
//! doorbell record word 1 = `cur_post & 0xffff`, `mmio_wmb`, and either a BlueFlame copy of the
//! WQE (one small WQE, BlueFlame enabled) or a 64-bit write of the last control segment's first
//! 8 bytes to the doorbell register; `mmio_wmb`; the register half toggles.
//!
//! Receive: data segments plus a terminator (`lkey` 0x100) when the WQE has room left,
//! bookkeeping, `dma_wmb`, doorbell record word 0 = `head & 0xffff`. No MMIO.
//!
//! Nothing here allocates.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use firmware_interface::dbr;
use firmware_interface::wqe::{self, FENCE_SMALL_AND, INLINE_SEG, INVALID_LKEY, opcode as op};
use nic_hal::barrier::{dma_wmb, mmio_wmb};
use nic_hal::{Platform, RegisterIo};
use verbs::{RecvWr, RemoteOp, SendFlags, SendWr, WrOpcode};

use crate::ah::Ah;
use crate::device::Device;
use crate::error::Error;
use crate::qp::{Qp, QpState};
use crate::ring::{DbRec, Ring};
use crate::wq::{
    META_ATOMIC, META_READ, META_SIGNALED, META_START, META_WC_SHIFT, QpCore, SqState,
};

// An `op_table` entry: bits 31:0 the `SqSlot::meta` template (completion opcode, byte-length
// policy, START, send opcode in 15:8); 39:32 the 16-byte units before the data; 47:40 the
// remote part wanted (`KIND_*`); 48.. flags.
/// `op_table` entry: shift of the units before the data.
const HDR_SHIFT: u32 = 32;
/// `op_table` entry: shift of the remote part wanted.
const KIND_SHIFT: u32 = 40;
/// `op_table` entry: the opcode carries immediate data.
const HAS_IMM: u64 = 1 << 48;
/// `op_table` entry: the opcode may be inline.
const INLINE_OK: u64 = 1 << 49;
/// `op_table` entry: an atomic (exactly one 8-byte SGE).
const ATOMIC: u64 = 1 << 50;

const KIND_NONE: u64 = 1;
const KIND_RDMA: u64 = 2;
const KIND_ATOMIC: u64 = 3;
const KIND_UD: u64 = 4;

/// What a QP of type `ud` does with each `WrOpcode` (indexed by its value): 0 = refused.
pub(crate) const fn op_table(ud: bool) -> [u64; 7] {
    const fn e(op: u8, wc: verbs::WcOpcode, hdr: u64, kind: u64, extra: u64) -> u64 {
        let policy = match op {
            op::RDMA_READ => META_READ,
            op::ATOMIC_CS | op::ATOMIC_FA => META_ATOMIC,
            _ => 0,
        };
        ((wc as u64) << META_WC_SHIFT)
            | policy
            | META_START
            | ((op as u64) << 8)
            | (hdr << HDR_SHIFT)
            | (kind << KIND_SHIFT)
            | extra
    }
    use verbs::WcOpcode as W;
    let mut t = [0u64; 7];
    if ud {
        t[WrOpcode::Send as usize] = e(op::SEND, W::Send, 4, KIND_UD, INLINE_OK);
        t[WrOpcode::SendWithImm as usize] =
            e(op::SEND_IMM, W::Send, 4, KIND_UD, INLINE_OK | HAS_IMM);
    } else {
        t[WrOpcode::Send as usize] = e(op::SEND, W::Send, 1, KIND_NONE, INLINE_OK);
        t[WrOpcode::SendWithImm as usize] =
            e(op::SEND_IMM, W::Send, 1, KIND_NONE, INLINE_OK | HAS_IMM);
        t[WrOpcode::RdmaWrite as usize] = e(op::RDMA_WRITE, W::RdmaWrite, 2, KIND_RDMA, INLINE_OK);
        t[WrOpcode::RdmaWriteWithImm as usize] = e(
            op::RDMA_WRITE_IMM,
            W::RdmaWrite,
            2,
            KIND_RDMA,
            INLINE_OK | HAS_IMM,
        );
        t[WrOpcode::RdmaRead as usize] = e(op::RDMA_READ, W::RdmaRead, 2, KIND_RDMA, 0);
        t[WrOpcode::AtomicCmpAndSwp as usize] =
            e(op::ATOMIC_CS, W::CompSwap, 3, KIND_ATOMIC, ATOMIC);
        t[WrOpcode::AtomicFetchAndAdd as usize] =
            e(op::ATOMIC_FA, W::FetchAdd, 3, KIND_ATOMIC, ATOMIC);
    }
    t
}

/// A data segment (`byte_count`, `lkey`, `addr`) as two words in device byte order.
#[inline(always)]
fn data_seg(len: u32, lkey: u32, addr: u64) -> (u64, u64) {
    ((((len as u64) << 32) | lkey as u64).to_be(), addr.to_be())
}

/// A remote address segment (`raddr`, `rkey`, reserved) in device byte order.
#[inline(always)]
fn raddr_seg(raddr: u64, rkey: u32) -> (u64, u64) {
    (raddr.to_be(), ((rkey as u64) << 32).to_be())
}

/// `fm_ce_se` for each combination of FENCE (bit 0), SIGNALED (bit 1), SOLICITED (bit 2):
/// small-and-fence, CQ update (always with `sig_all`), solicited event.
pub(crate) const fn fm_table(sig_all: bool) -> [u8; 8] {
    let mut t = [0u8; 8];
    let mut f = 0;
    while f < 8 {
        let mut v = 0;
        if f & SendFlags::FENCE.bits() != 0 {
            v |= FENCE_SMALL_AND;
        }
        if sig_all || f & SendFlags::SIGNALED.bits() != 0 {
            v |= wqe::CE_CQ_UPDATE;
        }
        if f & SendFlags::SOLICITED.bits() != 0 {
            v |= wqe::SOLICITED;
        }
        t[f as usize] = v;
        f += 1;
    }
    t
}

/// The state of one `post_send` call, in locals (registers) rather than behind `&mut`.
struct Poster<'q> {
    ring: Ring,
    core: &'q QpCore,
    ops: [u64; 7],
    bb_mask: u32,
    wqe_cnt: u32,
    max_sge: usize,
    max_inline: usize,
    fm: [u8; 8],
    qpn8: u32,
    qkey: u32,
}

impl Poster<'_> {
    /// Writes one send WQE at `cur` and records it; returns its WQEBBs.
    #[inline(always)]
    fn write(&self, wr: &SendWr<'_, Ah>, cur: u32, room: &mut u32) -> Result<u32, Error> {
        let e = self.ops[wr.opcode as usize];
        let flags = wr.flags.bits();
        let hdr = ((e >> HDR_SHIFT) & 0xff) as u32;
        let nsge = wr.sg_list.len();
        let inline = flags & SendFlags::INLINE.bits() != 0;
        let payload = if !inline {
            if (e == 0) | (nsge > self.max_sge) | !wr.inline_data.is_empty() {
                return Err(Error::InvalidArgument);
            }
            if e & ATOMIC != 0 && (nsge != 1 || wr.sg_list[0].length != 8) {
                return Err(Error::InvalidArgument);
            }
            nsge as u32
        } else {
            let len = wr.inline_data.len();
            if (e & INLINE_OK == 0) | (nsge != 0) | (len > self.max_inline) {
                return Err(Error::InvalidArgument);
            }
            (len as u32 + 4).div_ceil(16) * (len != 0) as u32
        };

        // Room for the largest this WQE can be (zero-length SGEs may make it smaller).
        let bbs_max = (hdr + payload + 3) >> 2;
        if bbs_max > *room {
            // `room` is what was free at the last look at the poller's position.
            let tail = self.core.sq_tail.0.load(Acquire);
            *room = self.wqe_cnt - cur.wrapping_sub(tail);
            if bbs_max > *room {
                return Err(Error::QueueFull);
            }
        }

        let ring = self.ring;
        let base = ((cur & self.bb_mask) as usize) << 6;
        let want = (e >> KIND_SHIFT) & 0xff;
        let opcode = (e >> 8) as u8;
        match wr.remote {
            RemoteOp::None => {
                if want != KIND_NONE {
                    return Err(Error::InvalidArgument);
                }
            }
            RemoteOp::Rdma { remote_addr, rkey } => {
                if want != KIND_RDMA {
                    return Err(Error::InvalidArgument);
                }
                let (a, b) = raddr_seg(remote_addr, rkey);
                ring.put2(base + 16, a, b);
            }
            RemoteOp::Atomic {
                remote_addr,
                rkey,
                compare_add,
                swap,
            } => {
                if want != KIND_ATOMIC {
                    return Err(Error::InvalidArgument);
                }
                let (a, b) = raddr_seg(remote_addr, rkey);
                ring.put2(base + 16, a, b);
                // compare-and-swap: swap_add = swap, compare; fetch-and-add: swap_add = add.
                let (swap_add, compare) = if opcode == op::ATOMIC_CS {
                    (swap, compare_add)
                } else {
                    (compare_add, 0)
                };
                ring.put2(base + 32, swap_add.to_be(), compare.to_be());
            }
            RemoteOp::Ud {
                ah,
                remote_qpn,
                remote_qkey,
            } => {
                if want != KIND_UD || remote_qpn > 0xff_ffff {
                    return Err(Error::InvalidArgument);
                }
                // A Q_Key with bit 31 set asks for the QP's own (controlled Q_Key).
                let qkey = if remote_qkey & 0x8000_0000 != 0 {
                    self.qkey
                } else {
                    remote_qkey
                };
                let mut u0 = ah.av[0];
                u0[0..4].copy_from_slice(&qkey.to_be_bytes());
                u0[8..12].copy_from_slice(&(wqe::EXTENDED_UD_AV | remote_qpn).to_be_bytes());
                ring.put16(base + 16, u0);
                ring.put16(base + 32, ah.av[1]);
                ring.put16(base + 48, ah.av[2]);
            }
        }

        let mut off = base + (hdr as usize) * 16;
        let mut total: u32 = 0;
        if !inline {
            for sge in wr.sg_list {
                if sge.length != 0 {
                    let (a, b) = data_seg(sge.length, sge.lkey, sge.addr);
                    ring.put2(off, a, b);
                    off += 16;
                    total = total.wrapping_add(sge.length);
                }
            }
        } else if !wr.inline_data.is_empty() {
            let data = wr.inline_data;
            ring.put_be32(off, data.len() as u32 | INLINE_SEG);
            ring.put_bytes_wrapping(off + 4, data);
            off += payload as usize * 16;
            total = data.len() as u32;
        }

        let ds = ((off - base) / 16) as u32;
        let bbs = (ds + 3) >> 2;
        let fm_ce_se = self.fm[(flags & 7) as usize];
        // Immediate data is copied as given (network order).
        let imm = if e & HAS_IMM != 0 {
            u32::from_be(wr.imm_data)
        } else {
            0
        };
        let w0 = ((cur & 0xffff) << 8) | opcode as u32;
        let w1 = self.qpn8 | ds;
        ring.put2(
            base,
            (((w0 as u64) << 32) | w1 as u64).to_be(),
            (((fm_ce_se as u64) << 32) | imm as u64).to_be(),
        );

        let slot = self.core.sq_slot(cur);
        {
            slot.wr_id.store(wr.wr_id, Relaxed);
            slot.meta.store(
                ((cur as u64) << 32)
                    | (e & 0xffff_ffff)
                    // CE_CQ_UPDATE (0x08) -> META_SIGNALED (1 << 17)
                    | (((fm_ce_se & wqe::CE_CQ_UPDATE) as u64) << 14)
                    | bbs as u64,
                Relaxed,
            );
            slot.len.store(total, Relaxed);
        }
        for j in 1..bbs {
            self.core
                .sq_slot(cur.wrapping_add(j))
                .meta
                .store(0, Relaxed);
        }
        *room -= bbs;
        Ok(bbs)
    }
}

const _: () = assert!((wqe::CE_CQ_UPDATE as u64) << 14 == META_SIGNALED);
const _: () = assert!(
    SendFlags::FENCE.bits() | SendFlags::SIGNALED.bits() | SendFlags::SOLICITED.bits() == 7
);

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Posts send work requests (spec §12.1). On error the work requests before the returned
    /// index were posted (and their doorbell rung); the one at the index and the rest were
    /// not. Errors: [`Error::InvalidArgument`] (QP in RESET/INIT/RTR, an opcode or remote part
    /// the QP type cannot post, more SGEs than [`Qp::max_send_sge`], inline data over
    /// [`Qp::max_inline_data`], an atomic without exactly one 8-byte SGE, a UD QPN over 24
    /// bits), [`Error::QueueFull`] (no room: ENOMEM). No heap allocation.
    #[inline]
    pub fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) -> Result<(), (Error, usize)> {
        if wrs.is_empty() {
            return Ok(());
        }
        if matches!(qp.state(), QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err((Error::InvalidArgument, 0));
        }
        let qpn8 = qp.qpn() << 8;
        let core = &*qp.core;
        let sq = &mut qp.sq;
        let p = Poster {
            ring: sq.ring,
            core,
            ops: sq.ops,
            bb_mask: sq.wqe_cnt - 1,
            wqe_cnt: sq.wqe_cnt,
            max_sge: sq.max_sge as usize,
            max_inline: sq.max_inline as usize,
            fm: sq.fm,
            qpn8,
            qkey: qp.qkey,
        };
        let start = sq.cur_post;
        let mut cur = start;
        let mut room = sq.wqe_cnt - cur.wrapping_sub(sq.tail);
        let mut last = cur;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            match p.write(wr, cur, &mut room) {
                Ok(bbs) => {
                    last = cur;
                    cur = cur.wrapping_add(bbs);
                }
                Err(e) => {
                    result = Err((e, i));
                    break;
                }
            }
        }
        // What the poster knows of the consumer position, for the next call.
        sq.tail = cur.wrapping_add(room).wrapping_sub(sq.wqe_cnt);
        if cur != start {
            let single = last == start;
            sq.cur_post = cur;
            self.ring_sq(sq, core, &qp.rec, single, last);
        }
        result
    }

    /// The send doorbell for a batch whose last WQE starts at `last` (`single`: the batch is
    /// that one WQE).
    #[inline]
    fn ring_sq(&self, sq: &mut SqState, core: &QpCore, rec: &DbRec, single: bool, last: u32) {
        let cur = sq.cur_post;
        core.sq_head.0.store(cur, Release);
        // WQEs before the doorbell record, the record before the MMIO write.
        dma_wmb();
        rec.set(dbr::QP_SND / 4, cur & 0xffff);
        mmio_wmb();
        let reg = sq.bf.reg + sq.bf.offset;
        let bb_mask = sq.wqe_cnt - 1;
        let bytes = (cur.wrapping_sub(last) as usize) * 64;
        if single && sq.bf.blueflame && bytes <= sq.bf.half {
            // BlueFlame: the WQE in 64-byte stores, the first one (control segment first) at
            // the register's half.
            let mut chunk = [0u8; 64];
            for j in 0..cur.wrapping_sub(last) {
                let bb = last.wrapping_add(j) & bb_mask;
                sq.ring.get64((bb as usize) << 6, &mut chunk);
                self.regs.write_block(reg + j as usize * 64, &chunk);
            }
        } else {
            // The first 8 bytes of the last control segment, as they are in memory.
            let mut w = [0u8; 8];
            sq.ring.get64(((last & bb_mask) as usize) << 6, &mut w);
            self.regs.write64(reg, u64::from_ne_bytes(w));
        }
        // Flush the write-combining buffer before the next doorbell uses the other half.
        mmio_wmb();
        sq.bf.offset ^= sq.bf.half;
    }

    /// Posts receive work requests (spec §8.5, §12.1). On error the work requests before the
    /// returned index were posted. Errors: [`Error::InvalidArgument`] (QP in RESET, more SGEs
    /// than [`Qp::max_recv_sge`]), [`Error::QueueFull`] (ENOMEM). No heap allocation, no MMIO.
    #[inline]
    pub fn post_recv(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), (Error, usize)> {
        if wrs.is_empty() {
            return Ok(());
        }
        if qp.state() == QpState::Reset {
            return Err((Error::InvalidArgument, 0));
        }
        let rq = &mut qp.rq;
        let core = &*qp.core;
        let mut head = rq.head;
        let mut result = Ok(());
        let units = 1u32 << (rq.log_stride - 4);
        for (i, wr) in wrs.iter().enumerate() {
            if head.wrapping_sub(rq.tail) >= rq.wqe_cnt {
                rq.tail = core.rq_tail.0.load(Acquire);
                if head.wrapping_sub(rq.tail) >= rq.wqe_cnt {
                    result = Err((Error::QueueFull, i));
                    break;
                }
            }
            if wr.sg_list.len() > rq.max_sge as usize {
                result = Err((Error::InvalidArgument, i));
                break;
            }
            let base = ((head & (rq.wqe_cnt - 1)) as usize) << rq.log_stride;
            let mut k = 0u32;
            let mut total: u32 = 0;
            for sge in wr.sg_list {
                if sge.length == 0 {
                    continue;
                }
                let (a, b) = data_seg(sge.length, sge.lkey, sge.addr);
                rq.ring.put2(base + k as usize * 16, a, b);
                k += 1;
                total = total.wrapping_add(sge.length);
            }
            if k < units {
                let (a, b) = data_seg(0, INVALID_LKEY, 0);
                rq.ring.put2(base + k as usize * 16, a, b);
            }
            let slot = core.rq_slot(head);
            slot.wr_id.store(wr.wr_id, Relaxed);
            slot.len.store(total, Relaxed);
            head = head.wrapping_add(1);
        }
        if head != rq.head {
            rq.head = head;
            core.rq_head.0.store(head, Release);
            dma_wmb();
            qp.rec.set(dbr::QP_RCV / 4, head & 0xffff);
        }
        result
    }
}
