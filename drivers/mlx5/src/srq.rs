//! Shared receive queues: a ring of receive WQEs any QP created on it (`rq_type` SRQ,
//! `srqn_rmpn_xrqn`) consumes.
//!
//! Made as Linux's `srq_cmd.c` makes them: at ISSI 1 a receive memory pool (CREATE_RMP with an
//! `rmpc` in state RDY whose `wq` is a linked list: `log_wq_stride` = log2 of the WQE stride in
//! bytes, `log_wq_sz`, `pd`, `dbr_addr`, `log_wq_pg_sz` and the page list; the limit armed
//! with MODIFY_RMP, `lwm` selected in its bitmask; DESTROY_RMP), at ISSI 0 CREATE_SRQ
//! (`srqc`, whose `log_rq_stride` counts 16-byte units) / DESTROY_SRQ.
//!
//! The ring is a linked list (as rdma-core's mlx5 provider keeps it): every WQE starts with a
//! 16-byte next segment (`next_wqe_index` BE16 at offset 2), then `max_sge` data segments.
//! The free WQEs form a list from `head` to `tail`; posting writes the WQE at `head`, moves
//! `head` along the list and counts the WQE in doorbell-record word 0 (the device consumes
//! from its own head, following the same links). A receive completion of a QP on the SRQ names
//! the WQE by its index (`wqe_counter`); polling it links the WQE back after `tail`. The tail
//! WQE is never posted (`head == tail` is full), so a ring of `2^n` WQEs holds `2^n - 1`.
//!
//! The links, `wr_id`s and lengths live in driver memory (the shadow the device cannot
//! change): a completion naming a WQE that is not posted is a bad CQE, never an index into
//! the unknown.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec;

use firmware_interface::cmds::{
    create_rmp_in, create_rmp_out, create_srq_in, create_srq_out, destroy_rmp_in, destroy_srq_in,
    modify_rmp_in, query_rmp_in, query_rmp_out,
};
use firmware_interface::ctx::{rmpc, srqc, wq};
use firmware_interface::{dbr, opcode, wqe};
use nic_hal::barrier::dma_wmb;
use nic_hal::{Platform, RegisterIo};
use verbs::{RecvWr, SrqAttr};

use crate::device::{Device, cmd_in};
use crate::error::{Error, OutputFault};
use crate::mem::{Shared, write_pas};
use crate::ring::{DbRec, Ring};

/// Devices of this program, numbered at bring-up (an SRQ names the device it was made on).
pub(crate) static NEXT_DEV_UID: core::sync::atomic::AtomicU32 =
    core::sync::atomic::AtomicU32::new(1);

/// The poster's and the pollers' bookkeeping of an SRQ, under its lock.
pub(crate) struct SrqState {
    /// Next WQE to post (the first free one).
    head: u16,
    /// Last free WQE (never posted while it is the last).
    tail: u16,
    /// WQEs posted, free running (doorbell record word 0).
    counter: u16,
    /// `next[i]`: the WQE after `i` in the list (what the ring's next segment says).
    next: Box<[u16]>,
    /// `wr_id` of each posted WQE.
    wr_id: Box<[u64]>,
    /// Bytes each posted WQE's scatter list takes.
    len: Box<[u32]>,
    /// Whether each WQE is posted (and not yet completed).
    posted: Box<[bool]>,
    /// WQEs posted and not completed.
    outstanding: u32,
}

/// The part of an SRQ the QPs on it and their CQs' pollers share.
pub(crate) struct SrqCore {
    pub(crate) srqn: u32,
    /// Made with CREATE_RMP (ISSI 1), else CREATE_SRQ.
    rmp: bool,
    /// The device (`NEXT_DEV_UID`) and PD it was made on.
    pub(crate) dev_uid: u32,
    pub(crate) pd: u32,
    /// WQEs in the ring (a power of two, at most 2^15).
    wqe_cnt: u32,
    /// log2 of the WQE stride in bytes.
    log_stride: u32,
    /// Data segments per WQE.
    max_sge: u32,
    ring: Ring,
    rec: DbRec,
    buf: Shared,
    dbrec: Shared,
    pub(crate) st: spin::Mutex<SrqState>,
}

impl core::fmt::Debug for SrqCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SrqCore")
            .field("srqn", &self.srqn)
            .field("wqe_cnt", &self.wqe_cnt)
            .finish_non_exhaustive()
    }
}

/// Writes WQE `i`'s next segment (`next_wqe_index = n`).
fn write_next(ring: &Ring, log_stride: u32, i: u16, n: u16) {
    let b = n.to_be_bytes();
    ring.put2(
        (i as usize) << log_stride,
        u64::from_ne_bytes([0, 0, b[0], b[1], 0, 0, 0, 0]),
        0,
    );
}

impl SrqCore {
    /// The `wr_id` and scatter length of posted WQE `idx` (a receive completion's
    /// `wqe_counter`), or `None` if no such WQE is posted.
    pub(crate) fn peek(&self, idx: u16) -> Option<(u64, u32)> {
        let st = self.st.lock();
        let i = idx as usize;
        (*st.posted.get(i)?).then(|| (st.wr_id[i], st.len[i]))
    }

    /// Retires posted WQE `idx` (its completion was polled, or skipped): links it back to the
    /// free list after the tail. False if it was not posted (any more): two completions
    /// naming the same WQE, e.g. on two CQs polled by two threads, cannot both retire it.
    pub(crate) fn retire(&self, idx: u16) -> bool {
        let mut st = self.st.lock();
        let i = idx as usize;
        if !st.posted.get(i).copied().unwrap_or(false) {
            return false;
        }
        st.posted[i] = false;
        st.outstanding -= 1;
        let tail = st.tail;
        st.next[tail as usize] = idx;
        write_next(&self.ring, self.log_stride, tail, idx);
        st.tail = idx;
        true
    }
}

/// A shared receive queue. Post to it with [`Device::post_srq_recv`] (from any thread: posters
/// are serialised by its lock); create QPs on it with the verbs provider's `create_qp`
/// (`QpInitAttr::srq`). Dropped without [`Device::destroy_srq`], its memory is leaked (the
/// device may still read it).
pub struct Srq {
    pub(crate) core: Arc<SrqCore>,
    limit: u32,
}

impl core::fmt::Debug for Srq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.core.srqn)
            .field("max_wr", &(self.core.wqe_cnt - 1))
            .field("max_sge", &self.core.max_sge)
            .finish_non_exhaustive()
    }
}

impl Srq {
    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.core.srqn
    }

    /// The PD it was created on.
    pub fn pd(&self) -> u32 {
        self.core.pd
    }

    /// The WQE ring (`2^n` WQEs of a power-of-two stride, each a next segment and data
    /// segments; for tests that play the device).
    ///
    /// # Safety
    ///
    /// While the reference is used, no other thread posts to this SRQ or polls a CQ of a QP
    /// attached to it: the driver writes and reads the ring with plain (volatile) accesses,
    /// which the buffer's accessors would race with.
    pub unsafe fn buffer(&self) -> &nic_hal::DmaBuf {
        &self.core.buf
    }

    /// The doorbell record (word 0: work requests posted, 16 bits; for tests that play the
    /// device).
    ///
    /// # Safety
    ///
    /// While the reference is used, no other thread posts to this SRQ: the driver stores the
    /// record's words as 32-bit atomics, which byte accesses must not race with.
    pub unsafe fn doorbell_record(&self) -> &nic_hal::DmaBuf {
        &self.core.dbrec
    }

    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.core.st.lock().outstanding
    }
}

impl verbs::SharedReceiveQueue for Srq {
    fn srq_num(&self) -> u32 {
        self.core.srqn
    }
    fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.core.wqe_cnt - 1,
            max_sge: self.core.max_sge,
            srq_limit: self.limit,
        }
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates an SRQ on PD `pdn` for at least `attr.max_wr` work requests of `attr.max_sge`
    /// scatter entries (the ring gets the next power of two above `max_wr`, its WQEs the next
    /// power of two of 16 + 16 × `max_sge` bytes); `attr.srq_limit` (≤ `max_wr`) arms the
    /// limit event. EINVAL for zero sizes, sizes above `log_max_srq_sz` / `max_wqe_sz_rq`, a
    /// limit above `max_wr`.
    pub fn create_srq(&self, pdn: u32, attr: &SrqAttr) -> Result<Srq, Error> {
        let caps = &self.caps;
        let inval = Error::InvalidArgument;
        if attr.max_wr == 0 || attr.max_sge == 0 || attr.srq_limit > attr.max_wr {
            return Err(inval);
        }
        if caps.log_max_srq == 0 {
            return Err(Error::NotSupported);
        }
        let log_max = caps.log_max_srq_sz.min(15) as u32;
        let wqe_cnt = attr
            .max_wr
            .checked_add(1)
            .ok_or(inval)?
            .checked_next_power_of_two()
            .ok_or(inval)?
            .max(2);
        if wqe_cnt.trailing_zeros() > log_max || attr.srq_limit > 0xffff || pdn > 0xff_ffff {
            return Err(inval);
        }
        let stride = attr
            .max_sge
            .checked_mul(16)
            .and_then(|b| b.checked_add(wqe::SrqNextSeg::SIZE as u32))
            .and_then(u32::checked_next_power_of_two)
            .ok_or(inval)?;
        if stride > caps.max_wqe_sz_rq as u32 || stride > 16 << 7 {
            return Err(inval);
        }
        let log_stride = stride.trailing_zeros();
        let max_sge = (stride - wqe::SrqNextSeg::SIZE as u32) / 16;
        let bytes = (wqe_cnt as usize) << log_stride;
        let buf = Shared::new(&self.dma, bytes.next_multiple_of(4096), 4096)?;
        let dbrec = Shared::new(&self.dma, dbr::RECORD_SIZE, dbr::RECORD_SIZE)?;
        // SAFETY: the Ring and the DbRec live in the SrqCore that owns `buf` and `dbrec`,
        // released only when the SrqCore is taken apart in `destroy_srq`.
        let (ring, rec) = unsafe { (Ring::new(&buf, 0, bytes), DbRec::new(&dbrec)) };
        let (Some(ring), Some(rec)) = (ring, rec) else {
            buf.release();
            dbrec.release();
            return Err(inval);
        };
        // The free list: every WQE linked to the next one, the last back to the first.
        let mask = (wqe_cnt - 1) as u16;
        let next: Box<[u16]> = (0..wqe_cnt as u16)
            .map(|i| i.wrapping_add(1) & mask)
            .collect();
        for (i, n) in next.iter().enumerate() {
            write_next(&ring, log_stride, i as u16, *n);
        }

        let rmp = self.issi() >= 1;
        let log_size = wqe_cnt.trailing_zeros();
        let lwm = if rmp { 0 } else { attr.srq_limit };
        let made = self.create_srq_cmd(rmp, pdn, log_size, log_stride, lwm, &buf, &dbrec);
        let srqn = match made {
            Ok(n) => n,
            Err(e) => {
                if !crate::device_may_hold(&e) {
                    buf.release();
                    dbrec.release();
                }
                // else: the device may hold the queue; its memory stays (leaked).
                return Err(e);
            }
        };
        if rmp
            && attr.srq_limit > 0
            && let Err(e) = self.arm_rmp(srqn, attr.srq_limit)
        {
            // Undo the create; if that fails too, the memory stays with the device.
            if self.destroy_srq_cmd(rmp, srqn).is_ok() {
                buf.release();
                dbrec.release();
            }
            return Err(e);
        }
        let n = wqe_cnt as usize;
        Ok(Srq {
            core: Arc::new(SrqCore {
                srqn,
                rmp,
                dev_uid: self.uid,
                pd: pdn,
                wqe_cnt,
                log_stride,
                max_sge,
                ring,
                rec,
                buf,
                dbrec,
                st: spin::Mutex::new(SrqState {
                    head: 0,
                    tail: mask,
                    counter: 0,
                    next,
                    wr_id: vec![0u64; n].into_boxed_slice(),
                    len: vec![0u32; n].into_boxed_slice(),
                    posted: vec![false; n].into_boxed_slice(),
                    outstanding: 0,
                }),
            }),
            limit: attr.srq_limit,
        })
    }

    /// Destroys an SRQ and frees its memory; on failure hands it back when it is still
    /// intact: [`Error::Busy`] while a QP is on it, or the firmware refused.
    // Handing the object back by value is the point; destroy is not a hot path.
    #[allow(clippy::result_large_err)]
    pub fn destroy_srq(&self, srq: Srq) -> Result<(), (Error, Option<Srq>)> {
        if Arc::strong_count(&srq.core) != 1 {
            return Err((Error::Busy, Some(srq)));
        }
        if let Err(e) = self.destroy_srq_cmd(srq.core.rmp, srq.core.srqn) {
            if crate::device_may_hold(&e) {
                return Err((e, None));
            }
            return Err((e, Some(srq)));
        }
        match Arc::try_unwrap(srq.core) {
            Ok(core) => {
                let SrqCore { buf, dbrec, .. } = core;
                buf.release();
                dbrec.release();
                Ok(())
            }
            // Not reachable: the count was 1 and the Srq was owned here.
            Err(_) => Err((Error::Busy, None)),
        }
    }

    /// CREATE_RMP (`rmp`) or CREATE_SRQ for a linked-list ring of `2^log_size` WQEs of
    /// `2^log_stride` bytes in `buf`, doorbell record `dbrec`, on PD `pdn`, with limit `lwm`
    /// (an RMP is made without one and armed with MODIFY_RMP, the SRQ context carries it).
    /// Returns the checked number.
    #[allow(clippy::too_many_arguments)]
    fn create_srq_cmd(
        &self,
        rmp: bool,
        pdn: u32,
        log_size: u32,
        log_stride: u32,
        lwm: u32,
        buf: &Shared,
        dbrec: &Shared,
    ) -> Result<u32, Error> {
        let npages = buf.len() / 4096;
        let log_max = self.caps.log_max_srq;
        if rmp {
            let mut inp = cmd_in(opcode::CREATE_RMP, 0, create_rmp_in::SIZE + npages * 8);
            let ctx = create_rmp_in::CTX.byte_off();
            let w = ctx + rmpc::WQ.byte_off();
            rmpc::STATE.at(ctx).set(&mut inp, rmpc::STATE_RDY);
            wq::WQ_TYPE.at(w).set(&mut inp, wq::TYPE_LINKED_LIST);
            wq::LOG_WQ_PG_SZ.at(w).set(&mut inp, 0);
            wq::LOG_WQ_STRIDE.at(w).set(&mut inp, log_stride);
            wq::LOG_WQ_SZ.at(w).set(&mut inp, log_size);
            wq::PD.at(w).set(&mut inp, pdn);
            wq::DBR_ADDR.at(w).set64(&mut inp, dbrec.iova());
            write_pas(buf, &mut inp, create_rmp_in::PAS.byte_off());
            let out = self.cmd(&inp, 16)?;
            // On a bad number the RMP may exist in the device: the caller leaks its memory.
            self.object_number(opcode::CREATE_RMP, &out, create_rmp_out::RMPN, log_max)
        } else {
            let mut inp = cmd_in(opcode::CREATE_SRQ, 0, create_srq_in::SIZE + npages * 8);
            let ctx = create_srq_in::SRQ_CONTEXT_ENTRY.byte_off();
            srqc::STATE.at(ctx).set(&mut inp, srqc::STATE_GOOD);
            srqc::LOG_SRQ_SIZE.at(ctx).set(&mut inp, log_size);
            srqc::LOG_RQ_STRIDE.at(ctx).set(&mut inp, log_stride - 4);
            srqc::LOG_PAGE_SIZE.at(ctx).set(&mut inp, 0);
            srqc::PD.at(ctx).set(&mut inp, pdn);
            srqc::LWM.at(ctx).set(&mut inp, lwm);
            srqc::DBR_ADDR.at(ctx).set64(&mut inp, dbrec.iova());
            write_pas(buf, &mut inp, create_srq_in::PAS.byte_off());
            let out = self.cmd(&inp, 16)?;
            self.object_number(opcode::CREATE_SRQ, &out, create_srq_out::SRQN, log_max)
        }
    }

    /// DESTROY_RMP or DESTROY_SRQ.
    fn destroy_srq_cmd(&self, rmp: bool, srqn: u32) -> Result<(), Error> {
        if rmp {
            let mut inp = cmd_in(opcode::DESTROY_RMP, 0, 16);
            destroy_rmp_in::RMPN.set(&mut inp, srqn);
            self.cmd(&inp, 16).map(drop)
        } else {
            let mut inp = cmd_in(opcode::DESTROY_SRQ, 0, 16);
            destroy_srq_in::SRQN.set(&mut inp, srqn);
            self.cmd(&inp, 16).map(drop)
        }
    }

    /// MODIFY_RMP RDY -> RDY with `lwm` selected (Linux `arm_rmp_cmd`): the SRQ_RQ_LIMIT
    /// event fires once fewer than `limit` receives stay posted.
    fn arm_rmp(&self, rmpn: u32, limit: u32) -> Result<(), Error> {
        let mut inp = cmd_in(opcode::MODIFY_RMP, 0, modify_rmp_in::SIZE);
        let ctx = modify_rmp_in::CTX.byte_off();
        modify_rmp_in::RMP_STATE.set(&mut inp, rmpc::STATE_RDY);
        modify_rmp_in::RMPN.set(&mut inp, rmpn);
        modify_rmp_in::BITMASK_LWM.set(&mut inp, 1);
        rmpc::STATE.at(ctx).set(&mut inp, rmpc::STATE_RDY);
        wq::LWM.at(ctx + rmpc::WQ.byte_off()).set(&mut inp, limit);
        self.cmd(&inp, 16).map(drop)
    }

    /// Arms the SRQ's limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one SRQ_LIMIT_REACHED
    /// event once fewer than `limit` receives stay posted; 0 disarms. EINVAL for a limit
    /// above the SRQ's `max_wr`; ENOTSUP at ISSI 0 (the SRQ commands have no modify).
    pub fn arm_srq_limit(&self, srq: &mut Srq, limit: u32) -> Result<(), Error> {
        if limit > srq.core.wqe_cnt - 1 {
            return Err(Error::InvalidArgument);
        }
        if !srq.core.rmp {
            return Err(Error::NotSupported);
        }
        self.arm_rmp(srq.core.srqn, limit)?;
        srq.limit = limit;
        Ok(())
    }

    /// The limit armed in the device now (QUERY_RMP `wq.lwm`; 0 once the limit event fired),
    /// checked against the SRQ: a context that is not this SRQ's (another size, stride, PD
    /// or doorbell record, not a linked list) or a limit beyond its size is
    /// [`Error::BadOutput`]. ENOTSUP at ISSI 0.
    pub fn query_srq_limit(&self, srq: &Srq) -> Result<u32, Error> {
        let core = &srq.core;
        if !core.rmp {
            return Err(Error::NotSupported);
        }
        let mut inp = cmd_in(opcode::QUERY_RMP, 0, 16);
        query_rmp_in::RMPN.set(&mut inp, core.srqn);
        let out = self.cmd(&inp, query_rmp_out::SIZE)?;
        let ctx = query_rmp_out::RMP_CONTEXT.byte_off();
        let w = ctx + rmpc::WQ.byte_off();
        let lwm = wq::LWM.at(w).get(&out);
        let same = rmpc::STATE.at(ctx).get(&out) == rmpc::STATE_RDY
            && wq::WQ_TYPE.at(w).get(&out) == wq::TYPE_LINKED_LIST
            && wq::LOG_WQ_SZ.at(w).get(&out) == core.wqe_cnt.trailing_zeros()
            && wq::LOG_WQ_STRIDE.at(w).get(&out) == core.log_stride
            && wq::PD.at(w).get(&out) == core.pd
            && wq::DBR_ADDR.at(w).get64(&out) == core.dbrec.iova();
        if !same || lwm >= core.wqe_cnt {
            return Err(Error::BadOutput {
                opcode: opcode::QUERY_RMP,
                what: OutputFault::SrqContext { lwm },
            });
        }
        Ok(lwm)
    }

    /// Posts receive work requests to an SRQ (see the module documentation): ENOMEM
    /// ([`Error::QueueFull`]) when no free WQE is left, EINVAL for more SGEs than the SRQ's
    /// `max_sge`. On error the requests before the index returned were posted. No MMIO: the
    /// device reads the counter from the doorbell record.
    pub fn post_srq_recv(&self, srq: &Srq, wrs: &[RecvWr<'_>]) -> Result<(), (Error, usize)> {
        let core = &*srq.core;
        let mut st = core.st.lock();
        let start = st.counter;
        let units = 1u32 << (core.log_stride - 4);
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if st.head == st.tail {
                result = Err((Error::QueueFull, i));
                break;
            }
            if wr.sg_list.len() > core.max_sge as usize {
                result = Err((Error::InvalidArgument, i));
                break;
            }
            let idx = st.head;
            let base = (idx as usize) << core.log_stride;
            // Data segments after the next segment, a terminator when there is room.
            let mut k = 1u32;
            let mut total: u32 = 0;
            for sge in wr.sg_list {
                if sge.length == 0 {
                    continue;
                }
                let (a, b) = crate::post::data_seg(sge.length, sge.lkey, sge.addr);
                core.ring.put2(base + k as usize * 16, a, b);
                k += 1;
                total = total.wrapping_add(sge.length);
            }
            if k < units {
                let (a, b) = crate::post::data_seg(0, wqe::INVALID_LKEY, 0);
                core.ring.put2(base + k as usize * 16, a, b);
            }
            let j = idx as usize;
            st.wr_id[j] = wr.wr_id;
            st.len[j] = total;
            st.posted[j] = true;
            st.outstanding += 1;
            st.head = st.next[j];
            st.counter = st.counter.wrapping_add(1);
        }
        if st.counter != start {
            dma_wmb();
            core.rec.set(dbr::QP_RCV / 4, st.counter as u32);
        }
        result
    }
}
