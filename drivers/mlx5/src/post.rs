//! Posting work requests (`docs/mlx5.md#work-queue-entries`, `docs/mlx5.md#posting`).
//!
//! Send, per work request: validate it against the QP (opcode for the QP type, remote memory
//! and destination: UD/GSI need a destination and take no remote memory, RC does not read
//! the destination; SGE count, inline size), check ring space, write the transport segments
//! (raddr; raddr + atomic; the 48-byte datagram segment of the AH with the destination QPN
//! and Q_Key), the data segments (zero-length SGEs skipped) or the inline data (header
//! `len | 0x80000000`, wrapping at the end of the ring), then the control segment, and
//! record the WQE in the
//! driver's bookkeeping. Then once for the batch: publish the producer position, `dma_wmb`,
//! doorbell record word 1 = `cur_post & 0xffff`, `mmio_wmb`, and either a BlueFlame copy of the
//! WQE (one small WQE, BlueFlame enabled) or a 64-bit write of the last control segment's first
//! 8 bytes to the doorbell register; `mmio_wmb`; the register half toggles.
//!
//! Receive: data segments plus a terminator (`lkey` 0x100) when the WQE has room left,
//! bookkeeping, `dma_wmb`, doorbell record word 0 = `head & 0xffff`. No MMIO.
//!
//! The send side has two paths that write the same WQEs (`dp_tests` compares them): the fast
//! path takes the usual one-WQEBB WQE (RC/UC send, RDMA write or read, no inline data, the
//! gather list within one WQEBB) with everything that depends only on the QP, the opcode and
//! the flags precomputed in one table entry ([`WrEnt`]: control-segment template with the
//! QPN, `fm_ce_se`, bookkeeping template, the checks' limits), the WQEBB written through one
//! [`Block`] whose bounds are proven once, and no room check per request (the batch is cut at
//! the free WQEBBs known). Anything else, errors included, goes to the general path, which
//! checks and writes every field as `docs/mlx5.md#work-queue-entries` describes.
//!
//! Nothing here allocates.

use core::sync::atomic::AtomicU32;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use firmware_interface::dbr;
use firmware_interface::wqe::{self, FENCE_SMALL_AND, INLINE_SEG, INVALID_LKEY, opcode as op};
use nic_hal::barrier::{dma_wmb, mmio_wmb};
use nic_hal::{Platform, RegisterIo};
use verbs::{RecvWr, RemoteOp, SendFlags, SendWr, Sge, UdDest, WrOpcode};

use crate::ah::Ah;
use crate::device::Device;
use crate::error::Error;
use crate::qp::{Qp, QpState};
use crate::ring::{Block, DbRec, Ring};
use crate::wq::{
    META_ATOMIC, META_FM_SHIFT, META_READ, META_SIGNALED, META_START, META_WC_SHIFT, QpCore, Slots,
    SqSlot, SqState, SqView,
};

/// `WrEnt::kind`: the opcode takes no remote memory.
const KIND_NONE: u8 = 1;
/// `WrEnt::kind`: RDMA (address, rkey).
const KIND_RDMA: u8 = 2;
/// `WrEnt::kind`: atomic.
const KIND_ATOMIC: u8 = 3;
/// `WrEnt::kind`: a datagram destination (`SendWr::dest`), no remote memory.
const KIND_UD: u8 = 4;

/// `WrEnt::flags`: the opcode may be inline.
const INLINE_OK: u8 = 1;
/// `WrEnt::flags`: an atomic (exactly one 8-byte SGE).
const ATOMIC: u8 = 2;

/// Entries of a QP's work-request table: one per `WrOpcode` value (8) and combination of
/// `SendFlags` bits 3:0 (FENCE, SIGNALED, SOLICITED, INLINE), flags major.
pub(crate) const WR_SHAPES: usize = 128;

/// What a QP does with a work request of one opcode and set of flags (`SqState::wrs`,
/// indexed by `shape`), with everything the WQE takes from them and the QP precomputed.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
pub(crate) struct WrEnt {
    /// The control segment as stored, WQE index and immediate data 0: word 0 the bytes 0..8
    /// (`opcode << 32 | qpn << 8 | ds` big-endian, `ds` for one data segment: `hdr + 1`),
    /// word 1 the bytes 8..16 (`signature`, reserved, reserved, `fm_ce_se`, immediate 0).
    /// One 16-byte copy writes it.
    seg: [u64; 2],
    /// `SqSlot::meta` of a one-WQEBB WQE of this shape (`fm_ce_se` included).
    meta: u32,
    /// All ones when the opcode carries immediate data, else 0.
    imm_mask: u32,
    /// The fast path takes a gather list shorter than this: the WQE fits one WQEBB and
    /// `max_sge`. 0 for what it never takes (inline data, atomics, UD, refused opcodes).
    fast_lim: u8,
    /// The remote part the opcode wants (`KIND_*`); 0: the QP cannot post the opcode.
    kind: u8,
    /// 16-byte units before the data (control and transport segments).
    hdr: u8,
    /// `INLINE_OK`, `ATOMIC`.
    flags: u8,
    /// `kind` when the fast path takes one SGE (`fast_lim >= 2`), else 0.
    fast1: u8,
}

/// The `SqState::wrs` index of a work request.
#[inline(always)]
fn shape(opcode: WrOpcode, flags: u32) -> usize {
    // Flags above the opcode: `flags * 8 + opcode` is one address computation.
    (((flags & 15) as usize) << 3) | opcode as usize
}

const _: () =
    assert!(WrOpcode::AtomicFetchAndAdd as usize <= 7 && WrOpcode::SendWithInv as usize <= 7);

/// Fills `t`, the work-request table of a QP of type `ud` with QPN `qpn`, `max_sge` data
/// segments per WQE and (`sig_all`) every WQE signalled.
pub(crate) fn fill_wr_table(
    t: &mut [WrEnt; WR_SHAPES],
    ud: bool,
    qpn: u32,
    max_sge: u32,
    sig_all: bool,
) {
    use verbs::WcOpcode as W;
    // (opcode, completion opcode, hdr, kind, immediate, flags) per `WrOpcode`.
    let mut ops = [(0u8, W::Send, 1u8, 0u8, false, 0u8); 8];
    if ud {
        ops[WrOpcode::Send as usize] = (op::SEND, W::Send, 4, KIND_UD, false, INLINE_OK);
        ops[WrOpcode::SendWithImm as usize] = (op::SEND_IMM, W::Send, 4, KIND_UD, true, INLINE_OK);
    } else {
        ops[WrOpcode::Send as usize] = (op::SEND, W::Send, 1, KIND_NONE, false, INLINE_OK);
        ops[WrOpcode::SendWithImm as usize] =
            (op::SEND_IMM, W::Send, 1, KIND_NONE, true, INLINE_OK);
        // The rkey to invalidate goes into the immediate field (big-endian): the general
        // path writes it (`fast_lim` 0 below).
        ops[WrOpcode::SendWithInv as usize] =
            (op::SEND_INVAL, W::Send, 1, KIND_NONE, false, INLINE_OK);
        ops[WrOpcode::RdmaWrite as usize] =
            (op::RDMA_WRITE, W::RdmaWrite, 2, KIND_RDMA, false, INLINE_OK);
        ops[WrOpcode::RdmaWriteWithImm as usize] = (
            op::RDMA_WRITE_IMM,
            W::RdmaWrite,
            2,
            KIND_RDMA,
            true,
            INLINE_OK,
        );
        ops[WrOpcode::RdmaRead as usize] = (op::RDMA_READ, W::RdmaRead, 2, KIND_RDMA, false, 0);
        ops[WrOpcode::AtomicCmpAndSwp as usize] =
            (op::ATOMIC_CS, W::CompSwap, 3, KIND_ATOMIC, false, ATOMIC);
        ops[WrOpcode::AtomicFetchAndAdd as usize] =
            (op::ATOMIC_FA, W::FetchAdd, 3, KIND_ATOMIC, false, ATOMIC);
    }
    for (i, e) in t.iter_mut().enumerate() {
        let (opc, wc, hdr, kind, imm, flags) = ops[i & 7];
        let f = (i >> 3) as u32;
        let fm = fm_ce_se(f, sig_all);
        let policy = match opc {
            op::RDMA_READ => META_READ,
            op::ATOMIC_CS | op::ATOMIC_FA => META_ATOMIC,
            _ => 0,
        };
        let fast = (kind == KIND_NONE || kind == KIND_RDMA)
            && f & SendFlags::INLINE.bits() == 0
            && opc != op::SEND_INVAL;
        let fast_lim = if fast {
            max_sge.min(4 - hdr as u32) + 1
        } else {
            0
        };
        let ctrl = ((opc as u64) << 32) | ((qpn as u64 & 0xff_ffff) << 8) | (hdr as u64 + 1);
        let mut w1 = [0u8; 8];
        w1[3] = fm;
        *e = WrEnt {
            seg: [ctrl.to_be(), u64::from_ne_bytes(w1)],
            meta: ((fm as u32) << META_FM_SHIFT)
                | ((wc as u32) << META_WC_SHIFT)
                | policy
                | META_START
                | ((opc as u32) << 8)
                | 1,
            imm_mask: if imm { u32::MAX } else { 0 },
            fast_lim: fast_lim as u8,
            kind,
            hdr,
            flags,
            fast1: if fast_lim >= 2 { kind } else { 0 },
        };
    }
}

/// `fm_ce_se` for send flags `f`: small-and-fence, CQ update (always with `sig_all`),
/// solicited event.
const fn fm_ce_se(f: u32, sig_all: bool) -> u8 {
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
    v
}

const _: () = assert!(
    SendFlags::FENCE.bits()
        | SendFlags::SIGNALED.bits()
        | SendFlags::SOLICITED.bits()
        | SendFlags::INLINE.bits()
        == 15
);
const _: () = assert!(META_SIGNALED == (wqe::CE_CQ_UPDATE as u32) << META_FM_SHIFT);

/// A data segment (`byte_count`, `lkey`, `addr`) as two words in device byte order.
#[inline(always)]
pub(crate) fn data_seg(len: u32, lkey: u32, addr: u64) -> (u64, u64) {
    ((((len as u64) << 32) | lkey as u64).to_be(), addr.to_be())
}

// `sge_data_seg` reads `length` and `lkey` as one word.
const _: () = assert!(
    core::mem::offset_of!(Sge, lkey) == core::mem::offset_of!(Sge, length) + 4
        && core::mem::size_of::<Sge>() >= core::mem::offset_of!(Sge, length) + 8
);

/// [`data_seg`] of an SGE, reading its adjacent `length` and `lkey` with one load.
#[inline(always)]
fn sge_data_seg(s: &Sge) -> (u64, u64) {
    // SAFETY: the 8 bytes from `length` are `length` then `lkey` (asserted above), both
    // initialised fields of `*s`; the read has no alignment requirement.
    let v = unsafe { core::ptr::addr_of!(s.length).cast::<u64>().read_unaligned() };
    // `v` holds `length` then `lkey` in native byte order; the segment wants each big-endian.
    #[cfg(target_endian = "little")]
    let v = v.swap_bytes().rotate_left(32);
    (v, s.addr.to_be())
}

/// A remote address segment (`raddr`, `rkey`, reserved) in device byte order.
#[inline(always)]
fn raddr_seg(raddr: u64, rkey: u32) -> (u64, u64) {
    (raddr.to_be(), ((rkey as u64) << 32).to_be())
}

/// The control segment's first 8 bytes in device byte order: the opcode's template, the WQE
/// index (`cur & 0xffff`) and `ds`.
#[inline(always)]
fn ctrl0(e: &WrEnt, cur: u32, ds: u32) -> u64 {
    ((u64::from_be(e.seg[0]) & !0x3f) | (((cur & 0xffff) as u64) << 40) | ds as u64).to_be()
}

/// Writes the data segments of `sg` (zero-length ones skipped) after `hdr` 16-byte units of
/// a one-WQEBB WQE; returns `ds` (the units used) and the bytes gathered. The caller keeps
/// `hdr + sg.len()` within the block's 4 units (the block masks the index anyway). Out of the
/// fast loop: the fast path writes a single SGE itself.
#[inline(never)]
fn gather_list(blk: Block<'_>, hdr: usize, sg: &[Sge]) -> (usize, u32) {
    let mut k = hdr;
    let mut total: u32 = 0;
    for s in sg {
        if s.length != 0 {
            let (a, b) = data_seg(s.length, s.lkey, s.addr);
            blk.put(2 * k, a);
            blk.put(2 * k + 1, b);
            k += 1;
            total = total.wrapping_add(s.length);
        }
    }
    (k, total)
}

/// The state of one `post_send` call, in locals (registers) rather than behind `&mut`.
#[derive(Clone, Copy)]
struct Poster<'q> {
    view: SqView<'q>,
    t: &'q [WrEnt; WR_SHAPES],
}

/// What the general path needs besides the tables.
struct Slow<'q> {
    ring: Ring,
    slots: Slots<'q, SqSlot>,
    t: &'q [WrEnt; WR_SHAPES],
    /// The poller's `sq_tail`.
    tail: &'q AtomicU32,
    bb_mask: u32,
    max_sge: usize,
    max_inline: usize,
    qkey: u32,
}

impl Poster<'_> {
    /// The fast path over `wrs` from position `cur` on (the caller made sure there are as
    /// many free WQEBBs as work requests): returns how many it posted, stopping at the first
    /// it does not take.
    #[inline(always)]
    fn run(&self, wrs: &[SendWr<'_, Ah>], mut cur: u32) -> usize {
        let start = cur;
        let mut off = self.view.off(cur);
        for wr in wrs {
            if !self.fast(wr, cur, off) {
                break;
            }
            cur = cur.wrapping_add(1);
            off += 16;
        }
        cur.wrapping_sub(start) as usize
    }

    /// The fast path: a WQE of one WQEBB at `cur` (free, the caller made sure; `off` the byte
    /// offset of its slot, [`SqView::off`], masked here), for an RC/UC send, RDMA write or read
    /// with a gather list of no zero-length single SGE. `false` for anything else (having maybe
    /// written into the free WQEBB), which [`Slow::write`] then takes, errors included.
    ///
    /// The WQEBB is one 64-byte [`Block`]: `fast_lim` keeps the segments inside it, and the
    /// block masks every index anyway. Checks as many things as the general path, in
    /// another order: the table entry of the opcode and flags says what the QP takes.
    #[inline(always)]
    fn fast(&self, wr: &SendWr<'_, Ah>, cur: u32, off: usize) -> bool {
        let e = &self.t[shape(wr.opcode, wr.flags.bits())];
        let sg = wr.sg_list;
        if !wr.inline_data.is_empty() {
            return false;
        }
        let (blk, slot) = self.view.at_off(off);
        // `ds` when not the template's.
        let ds = if let [s] = sg {
            // The usual single SGE: `ds` is in the template, the segments at fixed places.
            if s.length == 0 {
                return false;
            }
            let (a, b) = sge_data_seg(s);
            // Units 1 and 2: RDMA: the remote address segment, then the data segment; send:
            // the data segment, written twice (the second copy lies past `ds`, in the same
            // free WQEBB, and is never read).
            let (r0, r1) = match wr.remote {
                RemoteOp::Rdma { remote_addr, rkey } if e.fast1 == KIND_RDMA => {
                    raddr_seg(remote_addr, rkey)
                }
                RemoteOp::None if e.fast1 == KIND_NONE => (a, b),
                _ => return false,
            };
            blk.put(2, r0);
            blk.put(3, r1);
            blk.put(4, a);
            blk.put(5, b);
            slot.len.store(s.length, Relaxed);
            // `ds` as in the template.
            None
        } else {
            if sg.len() >= e.fast_lim as usize {
                return false;
            }
            match wr.remote {
                RemoteOp::None if e.kind == KIND_NONE => {}
                RemoteOp::Rdma { remote_addr, rkey } if e.kind == KIND_RDMA => {
                    let (r0, r1) = raddr_seg(remote_addr, rkey);
                    blk.put(2, r0);
                    blk.put(3, r1);
                }
                _ => return false,
            }
            let (ds, total) = gather_list(blk, e.hdr as usize, sg);
            slot.len.store(total, Relaxed);
            Some(ds as u8)
        };
        // The template, then the WQE index (bytes 1..3), `ds` (byte 7) when not the
        // template's, and the immediate data, copied as given (network order).
        blk.put_seg(e.seg);
        blk.put_be16_at(1, cur as u16);
        if let Some(ds) = ds {
            blk.put8_at(7, ds);
        }
        blk.put32(3, wr.imm_data & e.imm_mask);
        slot.wr_id.store(wr.wr_id, Relaxed);
        slot.meta.store(e.meta, Relaxed);
        true
    }
}

impl<'q> Slow<'q> {
    /// The general path for the QP's SQ `sq` (bookkeeping in `core`, `qkey` the QP's).
    #[inline(always)]
    fn new(sq: &'q SqState, core: &'q QpCore, qkey: u32) -> Slow<'q> {
        Slow {
            ring: sq.ring,
            slots: core.sq_slots(),
            t: &sq.wrs,
            tail: &core.sq_tail.0,
            bb_mask: sq.wqe_cnt - 1,
            max_sge: sq.max_sge as usize,
            max_inline: sq.max_inline as usize,
            qkey,
        }
    }

    /// Writes any send WQE at `cur` and records it; returns its WQEBBs. `room`: WQEBBs known
    /// to be free from `cur`, updated.
    #[inline(never)]
    fn write(
        sq: &SqState,
        core: &QpCore,
        qkey: u32,
        wr: &SendWr<'_, Ah>,
        cur: u32,
        room: &mut u32,
    ) -> Result<u32, Error> {
        let this = Slow::new(sq, core, qkey);
        this.write_wqe(wr, cur, room)
    }

    /// [`write`](Self::write), with the QP's state gathered.
    #[inline(always)]
    fn write_wqe(&self, wr: &SendWr<'_, Ah>, cur: u32, room: &mut u32) -> Result<u32, Error> {
        let flags = wr.flags.bits();
        let e = &self.t[shape(wr.opcode, flags)];
        let hdr = e.hdr as u32;
        let nsge = wr.sg_list.len();
        let inline = flags & SendFlags::INLINE.bits() != 0;
        let payload = if !inline {
            if (e.kind == 0) | (nsge > self.max_sge) | !wr.inline_data.is_empty() {
                return Err(Error::InvalidArgument);
            }
            if e.flags & ATOMIC != 0 && (nsge != 1 || wr.sg_list[0].length != 8) {
                return Err(Error::InvalidArgument);
            }
            nsge as u32
        } else {
            let len = wr.inline_data.len();
            if (e.flags & INLINE_OK == 0) | (nsge != 0) | (len > self.max_inline) {
                return Err(Error::InvalidArgument);
            }
            (len as u32 + 4).div_ceil(16) * (len != 0) as u32
        };

        // Room for the largest this WQE can be (zero-length SGEs may make it smaller).
        let bbs_max = (hdr + payload + 3) >> 2;
        if bbs_max > *room {
            *room = self.room(cur);
            if bbs_max > *room {
                return Err(Error::QueueFull);
            }
        }

        let ring = self.ring;
        let base = ((cur & self.bb_mask) as usize) << 6;
        let want = e.kind;
        let opcode = (e.meta >> 8) as u8;
        // The remote memory: what the opcode takes (a datagram QP posts sends only).
        match wr.remote {
            RemoteOp::None if want == KIND_NONE || want == KIND_UD => {}
            RemoteOp::Rdma { remote_addr, rkey } if want == KIND_RDMA => {
                let (a, b) = raddr_seg(remote_addr, rkey);
                ring.put2(base + 16, a, b);
            }
            RemoteOp::Atomic {
                remote_addr,
                rkey,
                compare_add,
                swap,
            } if want == KIND_ATOMIC => {
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
            // Another kind, or one the opcode does not take.
            _ => return Err(Error::InvalidArgument),
        }
        // The destination: a datagram QP's work requests name one. An RC QP's is its
        // connection: it does not read `dest` (as libibverbs' RC does not read `wr.ud`; the
        // fast path does not look at it either).
        if want == KIND_UD {
            let Some(UdDest {
                ah,
                remote_qpn,
                remote_qkey,
            }) = wr.dest
            else {
                return Err(Error::InvalidArgument);
            };
            if remote_qpn > 0xff_ffff {
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
        let blk: Block<'_> = ring.block(base);
        blk.put(0, ctrl0(e, cur, ds));
        // Immediate data is copied as given (network order); SEND_INVAL's rkey (host order)
        // goes in big-endian.
        blk.put(1, e.seg[1]);
        blk.put32(
            3,
            if opcode == op::SEND_INVAL {
                wr.imm_data.to_be()
            } else {
                wr.imm_data & e.imm_mask
            },
        );

        let slot = self.slots.at(cur);
        slot.wr_id.store(wr.wr_id, Relaxed);
        slot.meta.store((e.meta & !0xff) | bbs, Relaxed);
        slot.len.store(total, Relaxed);
        for j in 1..bbs {
            self.slots.at(cur.wrapping_add(j)).meta.store(0, Relaxed);
        }
        *room -= bbs;
        Ok(bbs)
    }

    /// WQEBBs free from `cur`, from the poller's current position (`sq_tail`: the first
    /// WQEBB not yet retired, never beyond `cur`).
    #[inline(always)]
    fn room(&self, cur: u32) -> u32 {
        (self.bb_mask + 1) - cur.wrapping_sub(self.tail.load(Acquire))
    }
}

/// The rest of a `post_send` batch from `wrs[i]` on, at position `cur` with `limit` the
/// first position not known to be free: the fast path where it takes the requests, the
/// general path for the others. Returns the new position and limit, and the result.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn post_rest<const FAST: bool>(
    p: Poster<'_>,
    sq: &SqState,
    core: &QpCore,
    qkey: u32,
    wrs: &[SendWr<'_, Ah>],
    mut i: usize,
    mut cur: u32,
    mut limit: u32,
) -> (u32, u32, Result<(), (Error, usize)>) {
    let wqe_cnt = sq.wqe_cnt;
    while i < wrs.len() {
        if cur == limit {
            // Look at the poller's position again.
            limit = core.sq_tail.0.load(Acquire).wrapping_add(wqe_cnt);
        }
        // The fast path over as many work requests as there are WQEBBs known to be free.
        if FAST && cur != limit {
            let n = (limit.wrapping_sub(cur) as usize).min(wrs.len() - i);
            let done = p.run(&wrs[i..i + n], cur);
            cur = cur.wrapping_add(done as u32);
            i += done;
            if done == n {
                continue;
            }
        }
        // The general path for one work request.
        let mut room = limit.wrapping_sub(cur);
        match Slow::write(sq, core, qkey, &wrs[i], cur, &mut room) {
            Ok(bbs) => {
                cur = cur.wrapping_add(bbs);
                limit = cur.wrapping_add(room);
                i += 1;
            }
            Err(e) => return (cur, limit, Err((e, i))),
        }
    }
    (cur, limit, Ok(()))
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Posts send work requests (`docs/mlx5.md#posting`). On error the work requests before the returned
    /// index were posted (and their doorbell rung); the one at the index and the rest were
    /// not. Errors: [`Error::InvalidArgument`] (QP in RESET/INIT/RTR, an opcode or remote
    /// memory the QP type cannot post, no destination on UD/GSI (RC does not read it), more
    /// SGEs than [`Qp::max_send_sge`], inline data over [`Qp::max_inline_data`], an atomic without exactly one 8-byte SGE, a UD QPN over 24
    /// bits), [`Error::QueueFull`] (no room: ENOMEM). No heap allocation.
    #[inline]
    pub fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) -> Result<(), (Error, usize)> {
        self.post_send_with::<true>(qp, wrs)
    }

    /// [`post_send`](Self::post_send) through the general path only (the fast path's
    /// reference, for tests).
    #[cfg(test)]
    pub(crate) fn post_send_general(
        &self,
        qp: &mut Qp,
        wrs: &[SendWr<'_, Ah>],
    ) -> Result<(), (Error, usize)> {
        self.post_send_with::<false>(qp, wrs)
    }

    /// `post_send`, with (`FAST`) or without the fast path.
    #[inline(always)]
    fn post_send_with<const FAST: bool>(
        &self,
        qp: &mut Qp,
        wrs: &[SendWr<'_, Ah>],
    ) -> Result<(), (Error, usize)> {
        if wrs.is_empty() {
            return Ok(());
        }
        if matches!(qp.state(), QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err((Error::InvalidArgument, 0));
        }
        let (mut done, mut tried) = (0, false);
        if FAST {
            // The usual batch: room for it known without looking at the poller's position,
            // every request taken by the fast path. Anything else continues out of line.
            let core = &*qp.core;
            let sq = &mut qp.sq;
            let start = sq.cur_post;
            let mut room = sq.tail.wrapping_add(sq.wqe_cnt).wrapping_sub(start);
            if (room as usize) < wrs.len() {
                // Look at the poller's position again; remembered for the next call.
                sq.tail = core.sq_tail.0.load(Acquire);
                room = sq.tail.wrapping_add(sq.wqe_cnt).wrapping_sub(start);
            }
            let sq = &qp.sq;
            if room as usize >= wrs.len() {
                let view = core.sq_view();
                done = Poster { view, t: &sq.wrs }.run(wrs, start);
                tried = true;
                if done == wrs.len() {
                    // One WQEBB each: the last WQE is the last WQEBB.
                    let cur = start.wrapping_add(done as u32);
                    let sq = &mut qp.sq;
                    sq.cur_post = cur;
                    core.sq_head.0.store(cur, Release);
                    self.ring_sq(sq, &qp.rec, done == 1, cur.wrapping_sub(1));
                    return Ok(());
                }
            }
        }
        self.post_send_rest::<FAST>(qp, wrs, done, tried)
    }

    /// `post_send` from `wrs[done]` on, the ones before written by the fast path at the
    /// SQ's producer position (not yet published); `tried`: the fast path ran from there.
    #[inline(never)]
    fn post_send_rest<const FAST: bool>(
        &self,
        qp: &mut Qp,
        wrs: &[SendWr<'_, Ah>],
        done: usize,
        tried: bool,
    ) -> Result<(), (Error, usize)> {
        let core = &*qp.core;
        let sq = &qp.sq;
        let view = core.sq_view();
        let p = Poster { view, t: &sq.wrs };
        let wqe_cnt = sq.wqe_cnt;
        let start = sq.cur_post;
        // The first position not known to be free; looked up again from the poller's
        // position when the batch may not fit.
        let mut limit = sq.tail.wrapping_add(wqe_cnt);
        if (limit.wrapping_sub(start) as usize) < wrs.len() {
            limit = core.sq_tail.0.load(Acquire).wrapping_add(wqe_cnt);
        }
        // The whole batch through the fast path when it fits and takes every request; the
        // general loop, out of line, from the first it does not take.
        let mut done = done;
        if FAST && !tried && limit.wrapping_sub(start) as usize >= wrs.len() {
            done = p.run(wrs, start);
        }
        let cur = start.wrapping_add(done as u32);
        let (cur, last, limit, result) = if done == wrs.len() {
            // One WQEBB each: the last WQE is the last WQEBB.
            (cur, cur.wrapping_sub(1), limit, Ok(()))
        } else {
            let (end, limit, result) =
                post_rest::<FAST>(p, sq, core, qp.qkey, wrs, done, cur, limit);
            // The last WQE's start: the last WQEBB's slot, or (a multi-WQEBB WQE) the slot
            // marked as the start before it.
            (end, view.wqe_start(end.wrapping_sub(1)), limit, result)
        };
        // What the poster knows of the consumer position, for the next call.
        let sq = &mut qp.sq;
        sq.tail = limit.wrapping_sub(wqe_cnt);
        if cur != start {
            sq.cur_post = cur;
            core.sq_head.0.store(cur, Release);
            self.ring_sq(sq, &qp.rec, last == start, last);
        }
        result
    }

    /// The send doorbell for a batch whose last WQE starts at `last` (`single`: the batch is
    /// that one WQE).
    #[inline]
    fn ring_sq(&self, sq: &mut SqState, rec: &DbRec, single: bool, last: u32) {
        let cur = sq.cur_post;
        // WQEs before the doorbell record, the record before the MMIO write.
        dma_wmb();
        rec.set(dbr::QP_SND / 4, cur & 0xffff);
        mmio_wmb();
        let reg = sq.bf.reg + sq.bf.offset;
        let bbs = cur.wrapping_sub(last);
        if single && sq.bf.blueflame && (bbs as usize) * 64 <= sq.bf.half {
            // BlueFlame: the WQE in 64-byte stores, the first one (control segment first) at
            // the register's half.
            let bb_mask = sq.wqe_cnt - 1;
            let mut chunk = [0u8; 64];
            for j in 0..bbs {
                let bb = last.wrapping_add(j) & bb_mask;
                sq.ring.get64((bb as usize) << 6, &mut chunk);
                self.regs.write_block(reg + j as usize * 64, &chunk);
            }
        } else {
            // The first 8 bytes of the last control segment, as they are in memory.
            let c0 = sq.ring.block((last as usize) << 6).read_raw64(0);
            self.regs.write64(reg, c0);
        }
        // Flush the write-combining buffer before the next doorbell uses the other half.
        mmio_wmb();
        sq.bf.offset ^= sq.bf.half;
    }

    /// Posts receive work requests (`docs/mlx5.md#receive-wqe`, `docs/mlx5.md#posting`). On error
    /// the work requests before the returned index were posted. Errors: [`Error::InvalidArgument`]
    /// (QP in RESET, more SGEs than [`Qp::max_recv_sge`]), [`Error::QueueFull`] (ENOMEM). No heap
    /// allocation, no MMIO.
    #[inline]
    pub fn post_recv(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), (Error, usize)> {
        if wrs.is_empty() {
            return Ok(());
        }
        // A QP on an SRQ has no receive queue (post to the SRQ).
        if qp.state() == QpState::Reset || qp.srq.is_some() {
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
