//! Polling a CQ (`docs/mlx5.md#completion-queue-entries`, `docs/mlx5.md#polling`) and arming it
//! (`docs/mlx5.md#uar-pages-and-doorbells`, `docs/mlx5.md#doorbell-records`).
//!
//! Per CQE: the ownership rule with the driver's consumer index, `dma_rmb`, then every field
//! is checked against the driver's bookkeeping before use ([`CqeFault`] lists the checks): the
//! QPN must be a QP attached to this CQ in the right role, a requester `wqe_counter` must be
//! the start of an outstanding send WQE (signalled, of the same opcode, for a success), a
//! responder CQE needs an outstanding receive WQE and must name it, byte counts must fit the
//! buffers posted. A bad CQE is consumed, counted and returned as [`Error::BadCqe`] (after
//! the good completions before it); it never panics or indexes out of bounds.
//!
//! With selective signalling one CQE retires every earlier WQE: the SQ tail moves to the end
//! of the completed WQE. The consumer index is published to doorbell-record word 0 once per
//! call.
//!
//! Two loops, one lock per call: the fast loop takes the usual successful requester CQEs
//! (send, RDMA write) with the QP's send-queue positions in registers while the CQEs name the
//! same QP and send opcode, checking the same things in fewer instructions (owner, opcode and
//! format in one compare of the `op_own` byte; QPN and send opcode in one compare of bytes
//! 0x38..0x3c; start, signalled and opcode of the WQE in one compare of its bookkeeping) and
//! writing only the fields a send completion defines (`verbs::WorkCompletion`: `wr_id`,
//! `status`, `opcode`, `qp_num`, `vendor_err`, `wc_flags`, in three stores); the first CQE it
//! does not take it leaves unconsumed for the general loop, which checks every kind of CQE one
//! field at a time, names the fault, and writes every field.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use firmware_interface::cqe::{self, opcode as cqe_op, syndrome};
use firmware_interface::wqe::opcode as wqe_op;
use firmware_interface::{dbr, uar};
use nic_hal::barrier::{dma_rmb, dma_wmb, mmio_wmb};
use nic_hal::{Platform, RegisterIo};
use verbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

use crate::cq::{Attached, Cq, CqCore, PollState};
use crate::device::Device;
use crate::error::{CqeFault, Error};
use crate::ring::Ring;
use crate::srq::SrqCore;
use crate::wq::{META_ATOMIC, META_READ, META_SIGNALED, META_START, META_WC_SHIFT};

/// CQE field offsets (`docs/mlx5.md#cqe-layout`).
mod off {
    pub(super) const SLID: usize = 0x16;
    pub(super) const FLAGS_RQPN: usize = 0x18;
    pub(super) const L4_L3_HDR_TYPE: usize = 0x1d;
    pub(super) const VLAN_INFO: usize = 0x1e;
    pub(super) const ML_PATH: usize = 0x11;
    pub(super) const IMM_INVAL_PKEY: usize = 0x24;
    pub(super) const BYTE_CNT: usize = 0x2c;
    pub(super) const OP_OWN: usize = 0x3f;
    pub(super) const VENDOR_ERR_SYND: usize = 0x36;
    pub(super) const SYNDROME: usize = 0x37;
    /// The big-endian u64 holding `sop_drop_qpn`, `wqe_counter`, `signature`, `op_own`.
    pub(super) const TAIL: usize = 0x38;
}

/// The verbs status of an error CQE syndrome (`docs/mlx5.md#error-cqe`, one to one; others
/// GENERAL_ERR).
pub fn wc_status(syn: u8) -> WcStatus {
    match syn {
        syndrome::LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
        syndrome::LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
        syndrome::LOCAL_PROT_ERR => WcStatus::LocProtErr,
        syndrome::WR_FLUSH_ERR => WcStatus::WrFlushErr,
        syndrome::MW_BIND_ERR => WcStatus::MwBindErr,
        syndrome::BAD_RESP_ERR => WcStatus::BadRespErr,
        syndrome::LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
        syndrome::REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
        syndrome::REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
        syndrome::REMOTE_OP_ERR => WcStatus::RemOpErr,
        syndrome::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        syndrome::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        syndrome::REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
        _ => WcStatus::GeneralErr,
    }
}

/// Completion opcodes by `SqSlot::meta` index (`verbs::WcOpcode` values 0..=4).
const WC_OPS: [WcOpcode; 8] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::CompSwap,
    WcOpcode::FetchAdd,
    WcOpcode::Send,
    WcOpcode::Send,
    WcOpcode::Send,
];

/// A requester CQE (success or error) of QP `a`.
#[inline(always)]
fn requester(
    ring: Ring,
    a: &Attached,
    o: usize,
    tail_word: u64,
    op_own: u8,
    w: &mut WorkCompletion,
) -> Result<(), CqeFault> {
    let qpn = a.qpn;
    let opcode = cqe::opcode_of(op_own);
    if !a.send {
        return Err(CqeFault::WrongQueue { qpn, opcode });
    }
    let q = &*a.core;
    let counter = (tail_word >> 16) as u16;
    let tail = q.sq_tail.0.load(Relaxed);
    let head = q.sq_head.0.load(Acquire);
    // The free-running position the 16-bit counter names, taken at or after `tail`.
    let p = tail.wrapping_add(counter.wrapping_sub(tail as u16) as u32);
    let bad = CqeFault::WqeCounter {
        qpn,
        wqe_counter: counter,
    };
    if p.wrapping_sub(tail) >= head.wrapping_sub(tail) {
        return Err(bad);
    }
    // `p` is outstanding; its slot is a WQE's start only if one was posted there in this lap.
    let slot = q.sq_slot(p);
    let meta = slot.meta.load(Relaxed);
    if meta & META_START == 0 {
        return Err(bad);
    }
    let posted = (meta >> 8) as u8;
    let end = p.wrapping_add(meta & 0xff);
    let mut status = WcStatus::Success;
    let mut vendor_err = 0;
    let mut byte_len = 0;
    if opcode == cqe_op::REQ {
        let found = (tail_word >> 56) as u8;
        if found != posted {
            return Err(CqeFault::SendOpcode { qpn, posted, found });
        }
        if meta & META_SIGNALED == 0 {
            return Err(CqeFault::Unsignaled {
                qpn,
                wqe_counter: counter,
            });
        }
        if meta & (META_READ | META_ATOMIC) != 0 {
            byte_len = if meta & META_ATOMIC != 0 {
                8
            } else {
                let b = ring.read_be32(o + off::BYTE_CNT);
                let len = slot.len.load(Relaxed);
                if b > len {
                    return Err(CqeFault::ByteCount {
                        qpn,
                        byte_cnt: b,
                        posted: len,
                    });
                }
                b
            };
        }
    } else {
        status = wc_status(ring.read_u8(o + off::SYNDROME));
        vendor_err = ring.read_u8(o + off::VENDOR_ERR_SYND) as u32;
    }
    // This WQE and every unsignalled one before it are done.
    q.sq_tail.0.store(end, Release);
    *w = WorkCompletion {
        wr_id: slot.wr_id.load(Relaxed),
        status,
        opcode: WC_OPS[((meta >> META_WC_SHIFT) & 7) as usize],
        vendor_err,
        byte_len,
        imm_data: 0,
        qp_num: qpn,
        src_qp: 0,
        wc_flags: WcFlags::empty(),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    };
    Ok(())
}

/// A responder CQE (success or error) of QP `a`.
#[inline(always)]
fn responder(
    core: &CqCore,
    a: &Attached,
    o: usize,
    tail_word: u64,
    op_own: u8,
    w: &mut WorkCompletion,
) -> Result<(), CqeFault> {
    let qpn = a.qpn;
    let opcode = cqe::opcode_of(op_own);
    if !a.recv {
        return Err(CqeFault::WrongQueue { qpn, opcode });
    }
    let q = &*a.core;
    let counter = (tail_word >> 16) as u16;
    // A QP on an SRQ: the CQE names a WQE of the SRQ (out of line, its own lock).
    let (wr_id, len, tail) = match &q.srq {
        Some(srq) => {
            let (wr_id, len) = srq_wqe(srq, qpn, counter)?;
            (wr_id, len, 0)
        }
        None => {
            let tail = q.rq_tail.0.load(Relaxed);
            let head = q.rq_head.0.load(Acquire);
            if tail == head {
                return Err(CqeFault::RqEmpty { qpn });
            }
            if counter != tail as u16 {
                return Err(CqeFault::WqeCounter {
                    qpn,
                    wqe_counter: counter,
                });
            }
            let slot = q.rq_slot(tail);
            (slot.wr_id.load(Relaxed), slot.len.load(Relaxed), tail)
        }
    };
    let mut wc = WorkCompletion {
        wr_id,
        opcode: WcOpcode::Recv,
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    if opcode == cqe_op::RESP_ERR {
        wc.status = wc_status(core.ring.read_u8(o + off::SYNDROME));
        wc.vendor_err = core.ring.read_u8(o + off::VENDOR_ERR_SYND) as u32;
    } else {
        let byte_cnt = core.ring.read_be32(o + off::BYTE_CNT);
        match opcode {
            cqe_op::RESP_WR_IMM => {
                // The data went where the RDMA write pointed, not into the receive buffers.
                wc.opcode = WcOpcode::RecvRdmaWithImm;
                wc.wc_flags = WcFlags::WITH_IMM;
                wc.imm_data = core.ring.read_raw32(o + off::IMM_INVAL_PKEY);
            }
            _ => {
                if byte_cnt > len {
                    return Err(CqeFault::ByteCount {
                        qpn,
                        byte_cnt,
                        posted: len,
                    });
                }
                if opcode == cqe_op::RESP_SEND_IMM {
                    wc.wc_flags = WcFlags::WITH_IMM;
                    wc.imm_data = core.ring.read_raw32(o + off::IMM_INVAL_PKEY);
                } else if opcode == cqe_op::RESP_SEND_INV {
                    wc.wc_flags = WcFlags::WITH_INV;
                    wc.imm_data = core.ring.read_be32(o + off::IMM_INVAL_PKEY);
                }
            }
        }
        wc.byte_len = byte_cnt;
        if q.ud {
            let f = core.ring.read_be32(o + off::FLAGS_RQPN);
            wc.src_qp = f & cqe::QPN_MASK;
            if (f >> cqe::GRH_SHIFT) & cqe::GRH_MASK != 0 {
                wc.wc_flags |= WcFlags::GRH;
            }
            if opcode == cqe_op::RESP_SEND {
                wc.pkey_index = core.ring.read_be32(o + off::IMM_INVAL_PKEY) as u16;
            }
            if core.eth {
                if core.ring.read_u8(o + off::L4_L3_HDR_TYPE) & cqe::VLAN_PRESENT != 0 {
                    wc.sl = (core.ring.read_be16(o + off::VLAN_INFO) >> 13) as u8;
                }
            } else {
                wc.sl = ((f >> cqe::SL_SHIFT) & cqe::SL_MASK) as u8;
                wc.slid = core.ring.read_be16(o + off::SLID);
                wc.dlid_path_bits = core.ring.read_u8(o + off::ML_PATH) & 0x7f;
            }
        }
    }
    match &q.srq {
        // The SRQ WQE goes back to the SRQ's free list, unless another completion (another
        // CQ's poller) took it since `srq_wqe` looked: then this CQE names a WQE not posted.
        Some(srq) => {
            if !srq.retire(counter) {
                return Err(CqeFault::WqeCounter {
                    qpn,
                    wqe_counter: counter,
                });
            }
        }
        None => q.rq_tail.0.store(tail.wrapping_add(1), Release),
    }
    *w = wc;
    Ok(())
}

/// The `wr_id` and scatter length of the SRQ WQE a receive CQE of QP `qpn` names (its index
/// in `wqe_counter`); a WQE not posted is a bad counter.
#[cold]
#[inline(never)]
fn srq_wqe(srq: &SrqCore, qpn: u32, counter: u16) -> Result<(u64, u32), CqeFault> {
    srq.peek(counter).ok_or(CqeFault::WqeCounter {
        qpn,
        wqe_counter: counter,
    })
}

/// `SqSlot::meta` bits a successful requester CQE of the fast loop checks: the send opcode,
/// start of a WQE, signalled, neither RDMA read nor atomic (their byte count is checked by
/// the general path).
const FAST_REQ_MASK: u32 = 0xff00 | META_START | META_SIGNALED | META_READ | META_ATOMIC;
/// Their wanted values (the send opcode, bits 15:8, added per CQE opcode).
const FAST_REQ_WANT: u32 = META_START | META_SIGNALED;

/// The completion opcode of a WQE of send opcode `op` that the fast loop takes (the meta
/// check then proves the WQE was posted with `op`), or `None`: the general loop's.
#[inline(always)]
fn fast_wc_opcode(op: u8) -> Option<WcOpcode> {
    match op {
        wqe_op::SEND | wqe_op::SEND_IMM => Some(WcOpcode::Send),
        wqe_op::RDMA_WRITE | wqe_op::RDMA_WRITE_IMM => Some(WcOpcode::RdmaWrite),
        _ => None,
    }
}

/// A position in a CQ's ring: the CQE at byte offset `off` and the `op_own` byte a
/// software-owned successful requester CQE of plain format has in this pass (opcode `REQ`
/// is 0: just the owner bit). `off` is always a multiple of 64 below `end`, the ring's
/// length (made so by [`Cursor::new`], kept by the fast loop, which moves it only while
/// below `end` and back to 0 at `end`).
struct Cursor {
    ring: Ring,
    off: usize,
    end: usize,
    owner: u8,
}

const _: () = assert!(cqe_op::REQ == 0);

impl Cursor {
    /// The CQE at consumer index `ci` of `core`'s ring of `2^log_size` CQEs. The offset is
    /// masked to the ring whatever its size (a power of two of at least 64 bytes, `Ring`'s
    /// invariant), so the cursor's invariant holds; `create_cq` makes the ring `2^log_size`
    /// CQEs, which the owner bit of the pass assumes.
    #[inline(always)]
    fn new(core: &CqCore, ci: u32) -> Cursor {
        let end = core.ring.len();
        Cursor {
            ring: core.ring,
            off: ((ci as usize) << 6) & (end - 1),
            end,
            // `log_size` is at most `log_max_cq_sz` (`create_cq`), below 32: the mask only
            // spares the shift a range check.
            owner: ((ci >> (core.log_size & 31)) & 1) as u8,
        }
    }

    /// The tail word (bytes 0x38..0x40: `sop_drop_qpn`, `wqe_counter`, `signature`,
    /// `op_own`) as a little-endian number, byte 0x38 lowest, of the CQE here if it is
    /// software owned, a successful requester CQE (`REQ`), of the plain format and without
    /// the solicited bit; else `None`.
    #[inline(always)]
    fn req(&self) -> Option<u64> {
        self.req_as(self.owner)
    }

    /// [`req`](Self::req) with `owner`, which is `self.owner`, from elsewhere.
    #[inline(always)]
    fn req_as(&self, owner: u8) -> Option<u64> {
        debug_assert!(self.off < self.end && self.end == self.ring.len());
        debug_assert_eq!(owner, self.owner);
        // SAFETY: `off` is a multiple of 64 below the ring's length (the type's invariant).
        let blk = unsafe { self.ring.block_unchecked(self.off) };
        // Software owned (the owner bit of this pass; INVALID is opcode 0xf), opcode REQ,
        // no inline scatter, compression or SE: the whole byte is the expected owner bit.
        if blk.read_u8(off::OP_OWN) != owner {
            return None;
        }
        dma_rmb();
        Some(u64::from_le(blk.read_raw64(off::TAIL / 8)))
    }
}

/// The start of the next pass over a CQ ring (out of line: once per pass).
#[cold]
#[inline(never)]
fn next_pass(owner: u8) -> (usize, u8) {
    (0, owner ^ 1)
}

// `write_send_wc` writes bytes 0..24 of a completion as three words.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(WorkCompletion, wr_id) == 0);
    assert!(offset_of!(WorkCompletion, status) == 8 && size_of::<WcStatus>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == 9 && size_of::<WcOpcode>() == 1);
    assert!(offset_of!(WorkCompletion, sl) == 10);
    assert!(offset_of!(WorkCompletion, dlid_path_bits) == 11);
    assert!(offset_of!(WorkCompletion, qp_num) == 12);
    assert!(offset_of!(WorkCompletion, vendor_err) == 16);
    assert!(offset_of!(WorkCompletion, wc_flags) == 20 && size_of::<WcFlags>() == 4);
    assert!(size_of::<WorkCompletion>() == 40);
};

/// Bytes 8..16 of a successful send completion of opcode `op` of QP `qpn`, as
/// [`write_send_wc`] stores them: `status` Success, `opcode`, `sl` and `dlid_path_bits` 0
/// (undefined for a send completion), `qp_num`.
#[inline(always)]
fn send_wc_mid(op: WcOpcode, qpn: u32) -> u64 {
    let q = qpn.to_ne_bytes();
    u64::from_ne_bytes([
        WcStatus::Success as u8,
        op as u8,
        0,
        0,
        q[0],
        q[1],
        q[2],
        q[3],
    ])
}

/// Writes the fields a successful send completion defines (`WorkCompletion`: `wr_id`,
/// `status`, `opcode`, `qp_num`, `vendor_err` 0, `wc_flags` empty; `sl` and
/// `dlid_path_bits`, undefined here, as 0) as three 8-byte stores; `mid` from
/// [`send_wc_mid`]. The other fields stay as they were.
#[inline(always)]
fn write_send_wc(w: &mut WorkCompletion, wr_id: u64, mid: u64) {
    w.wr_id = wr_id;
    let p = core::ptr::from_mut(w).cast::<u8>();
    // Bytes 8..24: `WorkCompletion` is `repr(C)` with bytes 8..16 holding `status` (u8 enum),
    // `opcode` (u8 enum), `sl`, `dlid_path_bits` and `qp_num`, and bytes 16..24 `vendor_err`
    // and `wc_flags` (asserted above); `mid` (from `send_wc_mid`) puts valid discriminants
    // (`Success`, a `WcOpcode`) in the enum bytes, and zero is a valid `vendor_err` and
    // `wc_flags`. On x86-64 one 16-byte store of `mid` zero-extended (SSE2, part of the
    // x86-64 baseline; the loop-invariant vector stays in an XMM register, which measured
    // cheaper than two 8-byte stores: `docs/bench.md`), elsewhere two 8-byte stores.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an unaligned 16-byte write of bytes 8..24, inside `*w` (40 bytes, exclusively
    // borrowed), of valid field values (above); SSE2 is always available on x86-64.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_cvtsi64_si128, _mm_storeu_si128};
        _mm_storeu_si128(p.add(8).cast::<__m128i>(), _mm_cvtsi64_si128(mid as i64));
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: unaligned 8-byte writes of bytes 8..16 and 16..24, inside `*w` (40 bytes,
    // exclusively borrowed), of valid field values (above).
    unsafe {
        p.add(8).cast::<u64>().write_unaligned(mid);
        p.add(16).cast::<u64>().write_unaligned(0);
    }
}

/// The QPN in the low 32 bits of a tail word from [`Cursor::req`] (bytes 0x38..0x3c:
/// send opcode, QPN big-endian).
#[inline(always)]
fn key_qpn(key: u32) -> u32 {
    key.swap_bytes() & cqe::QPN_MASK
}

/// The fast loop: takes, from consumer index `ci` on, the successful requester CQEs (send,
/// RDMA write, of an attached QP whose send queue is on this CQ, naming an outstanding
/// signalled WQE of the same opcode), writing their completions to `wc` (only the fields a
/// send completion defines, see [`WorkCompletion`]). Stops at the first CQE that is anything
/// else (not owned, other opcodes, errors, other formats, an unknown QP, a bad counter...),
/// which it leaves unconsumed for the general loop. Returns the completions written: every CQE
/// it consumes gives one, so the consumer index moves by as many.
#[inline(never)]
fn fast_loop(core: &CqCore, table: &[Attached], ci: u32, wc: &mut [WorkCompletion]) -> usize {
    // Every CQE the loop consumes gives one completion: the consumer index at the end is
    // `ci` plus the completions written.
    let mut at = Cursor::new(core, ci);
    let mut n = 0;
    while n < wc.len() {
        let Some(tw) = at.req() else {
            break;
        };
        // The run: CQEs of one QP and one send opcode (the same bytes 0x38..0x3c), its send
        // queue's positions in registers while they last.
        let key = tw as u32;
        let qpn = key_qpn(key);
        let Some(wc_op) = fast_wc_opcode(key as u8) else {
            break;
        };
        // The meta bits wanted (`FAST_REQ_MASK`), and in bits 7:0, which the mask leaves
        // out, the `op_own` byte wanted (the owner bit of this pass).
        let want = FAST_REQ_WANT | (key as u8 as u32) << 8 | at.owner as u32;
        let Ok(i) = table.binary_search_by_key(&qpn, |a| a.qpn) else {
            break;
        };
        let a = &table[i];
        if !a.send {
            break;
        }
        let q = &*a.core;
        let slots = q.sq_slots();
        let mut tail = q.sq_tail.0.load(Relaxed);
        // A WQE posted after this look is left to the general path.
        let head = q.sq_head.0.load(Acquire);
        // Outstanding WQEBBs: `head - tail`, kept with `tail`.
        let mut lim = head.wrapping_sub(tail);
        // The CQEs this run may take: the free completions, and the CQEs before the end of
        // the ring (`off < end`, both multiples of 64: at least one).
        let room = (wc.len() - n).min((at.end - at.off) >> 6);
        // SAFETY: `n < wc.len()` (the loop's condition) and `off < end`, both multiples of 64
        // (the cursor's invariant), so both terms are at least 1.
        unsafe { core::hint::assert_unchecked(room != 0) };
        let start = at.off;
        let mut ws = wc[n..n + room].iter_mut();
        // Bytes 8..16 of every completion of the run (status, opcode, sl, dlid_path_bits,
        // qp_num: see `write_send_wc`).
        let mid = send_wc_mid(wc_op, qpn);
        // Why the run ended: `true` when the next CQE may be taken by another run.
        let more = loop {
            let Some(w) = ws.next() else {
                // No more room: at the end of the ring (the next pass) or of `wc`.
                break at.off == at.end;
            };
            // `at.req()` with the owner byte from `want`'s low byte (the same value; this
            // way the loop compiles with fewer spills, see `docs/bench.md`).
            let Some(tw) = at.req_as(want as u8) else {
                break false;
            };
            if tw as u32 != key {
                // Another QP's or another opcode: the outer loop looks again.
                break true;
            }
            // The outstanding WQEBB position the 16-bit counter names, at or after the tail.
            let counter = ((tw >> 32) as u16).swap_bytes();
            let d = counter.wrapping_sub(tail as u16) as u32;
            if d >= lim {
                break false;
            }
            let slot = slots.at(tail.wrapping_add(d));
            let meta = slot.meta.load(Relaxed);
            // Read with `meta`, before the check (one slot address serves both; a plain load
            // of the driver's own slot, used only if the check passes).
            let wr_id = slot.wr_id.load(Relaxed);
            if (meta ^ want) & FAST_REQ_MASK != 0 {
                break false;
            }
            // The opcode the WQE was posted with gives the completion opcode of the run.
            debug_assert_eq!(WC_OPS[((meta >> META_WC_SHIFT) & 7) as usize], wc_op);
            // This WQE and every unsignalled one before it are done: the tail moves past
            // it (at most to `head`: the WQE is outstanding).
            let step = d + (meta & 0xff);
            tail = tail.wrapping_add(step);
            lim = lim.wrapping_sub(step);
            write_send_wc(w, wr_id, mid);
            // `off + 64 <= end` (multiples of 64, `off < end`).
            at.off += 64;
        };
        let k = (at.off - start) >> 6;
        // Publish the consumer position (the slots up to it were read before).
        q.sq_tail.0.store(tail, Release);
        n += k;
        if at.off == at.end {
            // The next pass.
            (at.off, at.owner) = next_pass(at.owner);
        }
        if !more {
            break;
        }
    }
    n
}

impl Cq {
    /// Polls up to `wc.len()` completions; returns how many were written.
    ///
    /// A malformed CQE is consumed and counted ([`bad_cqes`](Self::bad_cqes)); if good
    /// completions were found before it they are returned and the error comes from the next
    /// call, else the error ([`Error::BadCqe`]) is returned now. No heap allocation.
    #[inline]
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize, Error> {
        let core = &*self.core;
        let mut guard = core.poll.lock();
        let st = &mut *guard;
        if let Some(e) = st.pending {
            st.pending = None;
            return Err(e);
        }
        let start = st.ci;
        // Every CQE the fast loop consumes gives one completion.
        let mut n = if st.skips == 0 {
            fast_loop(core, &st.table, start, wc)
        } else {
            0
        };
        let mut ci = start.wrapping_add(n as u32);
        if n < wc.len() {
            let fault;
            (ci, n, fault) = general_loop(core, st, ci, n, wc);
            publish_ci(core, st, start, ci);
            if let Some(fault) = fault {
                let e = Error::BadCqe {
                    cqn: core.cqn,
                    ci: ci.wrapping_sub(1),
                    fault,
                };
                st.bad_cqes += 1;
                st.last_bad = Some(e);
                if n == 0 {
                    return Err(e);
                }
                st.pending = Some(e);
            }
            return Ok(n);
        }
        publish_ci(core, st, start, ci);
        Ok(n)
    }
}

/// Publishes consumer index `ci` (in `st` and the doorbell record) if it moved from `start`.
#[inline(always)]
fn publish_ci(core: &CqCore, st: &mut PollState, start: u32, ci: u32) {
    if ci != start {
        st.ci = ci;
        // CQE reads are done before the device may reuse the entries.
        dma_wmb();
        core.rec.set(dbr::CQ_SET_CI / 4, ci & uar::CI_MASK);
    }
}

/// The general loop: from consumer index `ci` on, with `n` completions in `wc` already, every
/// kind of CQE, each checked ([`CqeFault`]), until `wc` is full, the CQ is empty or a CQE is
/// bad (consumed and returned). Returns the new consumer index, the completions in `wc`, and
/// the fault.
#[inline(never)]
fn general_loop(
    core: &CqCore,
    st: &mut PollState,
    mut ci: u32,
    mut n: usize,
    wc: &mut [WorkCompletion],
) -> (u32, usize, Option<CqeFault>) {
    let ring = core.ring;
    let log = core.log_size;
    let idx_mask = (1u32 << log) - 1;
    let mut skips = st.skips != 0;
    // The QP of the last CQE: (qpn, table index), in registers for the batch.
    let mut hit = (u32::MAX, 0usize);
    while n < wc.len() {
        let o = ((ci & idx_mask) as usize) << 6;
        let op_own = ring.read_u8(o + off::OP_OWN);
        // Software owned: a real opcode and the owner bit of this pass.
        if (cqe::opcode_of(op_own) == cqe_op::INVALID) | ((op_own ^ (ci >> log) as u8) & 1 != 0) {
            break;
        }
        dma_rmb();
        ci = ci.wrapping_add(1);
        if skips && st.take_skip((ci.wrapping_sub(1)) & idx_mask) {
            skips = st.skips != 0;
            continue;
        }
        let tail_word = ring.read_be64(o + off::TAIL);
        let qpn = (tail_word >> 32) as u32 & cqe::QPN_MASK;
        let w = &mut wc[n];
        let r = if op_own & cqe::FORMAT_MASK != 0 {
            Err(CqeFault::Format { op_own })
        } else {
            if hit.0 != qpn {
                hit = (qpn, st.find(qpn).unwrap_or(usize::MAX));
            }
            match st.table.get(hit.1) {
                None => Err(CqeFault::UnknownQp { qpn }),
                Some(a) => match cqe::opcode_of(op_own) {
                    cqe_op::REQ | cqe_op::REQ_ERR => requester(ring, a, o, tail_word, op_own, w),
                    cqe_op::RESP_SEND
                    | cqe_op::RESP_SEND_IMM
                    | cqe_op::RESP_SEND_INV
                    | cqe_op::RESP_WR_IMM
                    | cqe_op::RESP_ERR => responder(core, a, o, tail_word, op_own, w),
                    _ => Err(CqeFault::Opcode { op_own }),
                },
            }
        };
        if let Err(f) = r {
            return (ci, n, Some(f));
        }
        n += 1;
    }
    (ci, n, None)
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Requests a completion event (`docs/mlx5.md#uar-pages-and-doorbells`,
    /// `docs/mlx5.md#polling`): writes the arm record (doorbell-record word 1 = `sn << 28 | cmd |
    /// ci`) and then the 64-bit CQ doorbell at UAR offset 0x20 (`arm record << 32 | cqn`). `sn` is
    /// the number of events received for the CQ (see [`Cq::arm_sn`]); with `solicited_only` only a
    /// solicited completion fires.
    pub fn req_notify_cq(&self, cq: &Cq, solicited_only: bool) -> Result<(), Error> {
        let core = &*cq.core;
        let ci = core.poll.lock().ci & uar::CI_MASK;
        let sn = core.arm_sn.load(Relaxed) & uar::CQ_DB_SN_MASK;
        let cmd = if solicited_only {
            uar::CQ_DB_REQ_NOT_SOL
        } else {
            uar::CQ_DB_REQ_NOT
        };
        let v = (sn << uar::CQ_DB_SN_SHIFT) | cmd | ci;
        core.rec.set(dbr::CQ_ARM / 4, v);
        mmio_wmb();
        let db = ((v as u64) << 32) | core.cqn as u64;
        self.regs.write64(
            core.uar as usize * uar::PAGE_SIZE + uar::CQ_DOORBELL,
            db.to_be(),
        );
        mmio_wmb();
        Ok(())
    }
}
