//! Completion queues (`docs/mlx5.md#cq-context`): creation and destruction, and the state their
//! pollers share (consumer index, the table of QPs attached, the arm sequence number). Polling is
//! in `poll.rs`.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use firmware_interface::cmds::{create_cq_in, create_cq_out, destroy_cq_in};
use firmware_interface::ctx::cqc;
use firmware_interface::{cqe, dbr, opcode};
use nic_hal::barrier::dma_rmb;
use nic_hal::{DmaBuf, Platform, RegisterIo};

use crate::caps::PortType;
use crate::channel::ChannelShared;
use crate::device::{Device, cmd_in};
use crate::error::Error;
use crate::mem::{Shared, write_pas};
use crate::ring::{DbRec, Ring};
use crate::wq::QpCore;

/// Size of one CQE (the driver creates CQs with 64-byte CQEs, `cqe_sz = 0`).
const CQE_SIZE: usize = cqe::SIZE;
/// Offset of `op_own` in a CQE.
const OP_OWN: usize = core::mem::offset_of!(cqe::Cqe64, op_own);

/// A QP attached to a CQ: the QPNs CQEs may name.
pub(crate) struct Attached {
    pub(crate) qpn: u32,
    /// This CQ is the QP's send CQ.
    pub(crate) send: bool,
    /// This CQ is the QP's receive CQ.
    pub(crate) recv: bool,
    pub(crate) core: Arc<QpCore>,
}

/// What pollers of one CQ share, under the CQ's lock.
pub(crate) struct PollState {
    /// Consumer index (free running; the doorbell record gets the low 24 bits).
    pub(crate) ci: u32,
    /// Attached QPs, sorted by QPN.
    pub(crate) table: Vec<Attached>,
    /// Index of the last table hit.
    pub(crate) last: usize,
    /// Ring slots whose CQE belongs to a QP destroyed or reset since it was written: consumed
    /// silently (one bit per slot; allocated at the first clean).
    pub(crate) skip: Vec<u64>,
    /// Bits set in `skip`.
    pub(crate) skips: u32,
    /// An error found after completions were returned: reported by the next poll.
    pub(crate) pending: Option<Error>,
    /// Malformed CQEs seen.
    pub(crate) bad_cqes: u64,
    /// The last malformed CQE's error.
    pub(crate) last_bad: Option<Error>,
}

impl PollState {
    /// The table index of the attached QP `qpn`.
    #[inline]
    pub(crate) fn find(&mut self, qpn: u32) -> Option<usize> {
        if self.table.get(self.last).is_some_and(|a| a.qpn == qpn) {
            return Some(self.last);
        }
        let i = self.table.binary_search_by_key(&qpn, |a| a.qpn).ok()?;
        self.last = i;
        Some(i)
    }

    /// Whether slot `idx` is marked to be skipped; clears the mark.
    #[inline]
    pub(crate) fn take_skip(&mut self, idx: u32) -> bool {
        let (w, b) = ((idx / 64) as usize, idx % 64);
        match self.skip.get_mut(w) {
            Some(word) if *word & (1 << b) != 0 => {
                *word &= !(1 << b);
                self.skips -= 1;
                true
            }
            _ => false,
        }
    }
}

/// The part of a CQ shared with the QPs attached to it and with its completion channel.
pub(crate) struct CqCore {
    pub(crate) cqn: u32,
    /// The device it was made on (`Device::uid`).
    pub(crate) dev_uid: u32,
    pub(crate) log_size: u8,
    pub(crate) eqn: u32,
    pub(crate) uar: u32,
    /// RoCE port (service level from the VLAN priority) rather than InfiniBand.
    pub(crate) eth: bool,
    pub(crate) cq_context: u64,
    pub(crate) buf: Shared,
    pub(crate) dbrec: Shared,
    pub(crate) ring: Ring,
    pub(crate) rec: DbRec,
    /// Arm sequence number: completion events received for this CQ.
    pub(crate) arm_sn: AtomicU32,
    pub(crate) poll: spin::Mutex<PollState>,
}

impl core::fmt::Debug for CqCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CqCore")
            .field("cqn", &self.cqn)
            .finish_non_exhaustive()
    }
}

impl CqCore {
    /// Whether the CQE at consumer index `ci` is software owned.
    #[inline(always)]
    pub(crate) fn owned(&self, ci: u32) -> Option<(usize, u8)> {
        let off = (ci as usize).wrapping_mul(CQE_SIZE);
        let op_own = self.ring.read_u8(off + OP_OWN);
        let pass = (ci >> self.log_size) as u8;
        if cqe::opcode_of(op_own) == cqe::opcode::INVALID || (op_own ^ pass) & cqe::OWNER_MASK != 0
        {
            return None;
        }
        Some((off & (self.ring.len() - 1), op_own))
    }

    /// Registers `qp` (replacing a stale entry with the same QPN).
    pub(crate) fn attach(&self, qp: Arc<QpCore>, send: bool, recv: bool) {
        let mut st = self.poll.lock();
        let a = Attached {
            qpn: qp.qpn,
            send,
            recv,
            core: qp,
        };
        match st.table.binary_search_by_key(&a.qpn, |x| x.qpn) {
            Ok(i) => st.table[i] = a,
            Err(i) => st.table.insert(i, a),
        }
        st.last = 0;
    }

    /// Marks every software-owned CQE of `qpn` (not yet polled) to be skipped, and with
    /// `detach` removes the QP from the table. The device must no longer write CQEs for the QP
    /// (it was destroyed or moved to RESET).
    pub(crate) fn clean(&self, qpn: u32, detach: bool) {
        let mut st = self.poll.lock();
        let nent = 1u32 << self.log_size;
        let mut ci = st.ci;
        for _ in 0..nent {
            let Some((off, _)) = self.owned(ci) else {
                break;
            };
            dma_rmb();
            let q = self.ring.read_be32(off + 0x38) & cqe::QPN_MASK;
            if q == qpn {
                if st.skip.is_empty() {
                    st.skip = alloc::vec![0u64; (nent as usize).div_ceil(64)];
                }
                let idx = ci & (nent - 1);
                let (w, b) = ((idx / 64) as usize, idx % 64);
                if let Some(word) = st.skip.get_mut(w)
                    && *word & (1 << b) == 0
                {
                    *word |= 1 << b;
                    st.skips += 1;
                    // A receive completion of a QP on an SRQ that will never be polled: its
                    // SRQ WQE goes back to the SRQ now.
                    let op = cqe::opcode_of(self.ring.read_u8(off + OP_OWN));
                    if op != cqe::opcode::REQ
                        && op != cqe::opcode::REQ_ERR
                        && let Ok(i) = st.table.binary_search_by_key(&qpn, |x| x.qpn)
                        && let Some(srq) = &st.table[i].core.srq
                    {
                        srq.retire(self.ring.read_be16(off + 0x3c));
                    }
                }
            }
            ci = ci.wrapping_add(1);
        }
        if detach && let Ok(i) = st.table.binary_search_by_key(&qpn, |x| x.qpn) {
            st.table.remove(i);
            st.last = 0;
        }
    }
}

/// A completion queue: `2^log_size` 64-byte CQEs (each initialised with `op_own = 0xf0`) and a
/// 64-byte doorbell record (word 0: consumer index, word 1: arm). Poll it with
/// [`Cq::poll`](Cq::poll) (from any thread: pollers of one CQ are serialised by a spin lock
/// taken once per call); arm it with [`Device::req_notify_cq`].
///
/// Dropped without `destroy_cq`, its memory is leaked (the device may still write
/// it).
pub struct Cq {
    pub(crate) core: Arc<CqCore>,
    pub(crate) channel: Option<Arc<ChannelShared>>,
}

impl core::fmt::Debug for Cq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cq")
            .field("cqn", &self.core.cqn)
            .field("log_size", &self.core.log_size)
            .field("eqn", &self.core.eqn)
            .field("ci", &self.consumer_index())
            .finish_non_exhaustive()
    }
}

impl Cq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.core.cqn
    }

    /// log2 of the number of CQEs.
    pub fn log_size(&self) -> u8 {
        self.core.log_size
    }

    /// Number of CQEs.
    pub fn entries(&self) -> u32 {
        1 << self.core.log_size
    }

    /// The EQ receiving this CQ's completion events.
    pub fn eqn(&self) -> u32 {
        self.core.eqn
    }

    /// UAR index whose page takes this CQ's arm doorbell (offset 0x20).
    pub fn uar(&self) -> u32 {
        self.core.uar
    }

    /// The CQE ring (for tests that play the device).
    ///
    /// # Safety
    ///
    /// While the reference is used, no other thread polls or arms this CQ: the driver reads
    /// the ring with plain (volatile) word accesses, which the buffer's accessors would race
    /// with.
    pub unsafe fn buffer(&self) -> &DmaBuf {
        &self.core.buf
    }

    /// The doorbell record (`dbr::CQ_SET_CI`, `dbr::CQ_ARM`; for tests that play the device).
    ///
    /// # Safety
    ///
    /// While the reference is used, no other thread polls or arms this CQ: the driver stores
    /// the record's words as 32-bit atomics, which byte accesses must not race with.
    pub unsafe fn doorbell_record(&self) -> &DmaBuf {
        &self.core.dbrec
    }

    /// The context value given at creation (0 for a CQ made without one).
    pub fn cq_context(&self) -> u64 {
        self.core.cq_context
    }

    /// The consumer index (free running; the device sees its low 24 bits).
    pub fn consumer_index(&self) -> u32 {
        self.core.poll.lock().ci
    }

    /// The arm sequence number (completion events received, modulo 2^32).
    pub fn arm_sn(&self) -> u32 {
        self.core.arm_sn.load(Ordering::Relaxed)
    }

    /// Malformed CQEs seen so far, and the error of the last one.
    pub fn bad_cqes(&self) -> (u64, Option<Error>) {
        let st = self.core.poll.lock();
        (st.bad_cqes, st.last_bad)
    }

    /// Number of QPs attached (their CQEs are accepted here).
    pub fn attached_qps(&self) -> usize {
        self.core.poll.lock().table.len()
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a CQ of `2^log_size` 64-byte CQEs reporting completion events to EQ `eqn`, with
    /// its arm doorbell in the driver's UAR.
    // Only `mlx5::raw` and the unit tests call this; the provider has its own path.
    #[cfg(any(test, feature = "raw"))]
    pub(crate) fn create_cq(&self, log_size: u8, eqn: u32) -> Result<Cq, Error> {
        self.create_cq_with(log_size, eqn, 0)
    }

    pub(crate) fn create_cq_with(
        &self,
        log_size: u8,
        eqn: u32,
        cq_context: u64,
    ) -> Result<Cq, Error> {
        if log_size > self.caps.log_max_cq_sz || eqn > 0xff {
            return Err(Error::InvalidArgument);
        }
        let uar = self.driver_uar()?;
        let nent = 1usize << log_size;
        let bytes = (nent * CQE_SIZE).next_multiple_of(4096);
        let buf = Shared::new(&self.dma, bytes, 4096)?;
        for i in 0..nent {
            buf.write_u8(i * CQE_SIZE + OP_OWN, cqe::OP_OWN_INIT)?;
        }
        let dbrec = Shared::new(&self.dma, dbr::RECORD_SIZE, dbr::RECORD_SIZE)?;
        // SAFETY: the Ring and DbRec live in the CqCore that also owns `buf` and `dbrec`, which
        // are only released when the CqCore is taken apart in `destroy_cq`.
        let (ring, rec) = unsafe {
            (
                Ring::new(&buf, 0, (nent * CQE_SIZE).max(64)),
                DbRec::new(&dbrec),
            )
        };
        let (Some(ring), Some(rec)) = (ring, rec) else {
            buf.release();
            dbrec.release();
            return Err(Error::InvalidArgument);
        };

        let npages = bytes / 4096;
        let mut inp = cmd_in(opcode::CREATE_CQ, 0, create_cq_in::SIZE + npages * 8);
        let ctx = create_cq_in::CQ_CONTEXT.byte_off();
        cqc::CQE_SZ.at(ctx).set(&mut inp, cqc::CQE_SZ_64);
        cqc::LOG_CQ_SIZE.at(ctx).set(&mut inp, log_size as u32);
        cqc::UAR_PAGE.at(ctx).set(&mut inp, uar);
        cqc::C_EQN_OR_APU_ELEMENT.at(ctx).set(&mut inp, eqn);
        cqc::LOG_PAGE_SIZE.at(ctx).set(&mut inp, 0);
        cqc::DBR_ADDR.at(ctx).set64(&mut inp, dbrec.iova());
        write_pas(&buf, &mut inp, create_cq_in::PAS.byte_off());

        let out = match self.cmd(&inp, 16) {
            Ok(out) => out,
            Err(e) => {
                if !crate::device_may_hold(&e) {
                    buf.release();
                    dbrec.release();
                }
                return Err(e);
            }
        };
        // On a bad number the CQ may exist in the device: its memory stays (leaked).
        let cqn = self.object_number(
            opcode::CREATE_CQ,
            &out,
            create_cq_out::CQN,
            self.caps.log_max_cq,
        )?;
        Ok(Cq {
            core: Arc::new(CqCore {
                cqn,
                dev_uid: self.uid,
                log_size,
                eqn,
                uar,
                eth: self.caps.port_type == PortType::Ethernet,
                cq_context,
                buf,
                dbrec,
                ring,
                rec,
                arm_sn: AtomicU32::new(0),
                poll: spin::Mutex::new(PollState {
                    ci: 0,
                    table: Vec::new(),
                    last: 0,
                    skip: Vec::new(),
                    skips: 0,
                    pending: None,
                    bad_cqes: 0,
                    last_bad: None,
                }),
            }),
            channel: None,
        })
    }

    /// Destroys a CQ and frees its memory. A CQ that still has QPs attached
    /// ([`Device::attach_qp`]) is [`Error::Busy`] (and, consumed here, leaked: use the verbs
    /// provider's `destroy_cq` to get it back). If the command fails the memory is leaked.
    // Only `mlx5::raw` and the unit tests call this; the provider has its own path.
    #[cfg(any(test, feature = "raw"))]
    pub(crate) fn destroy_cq(&self, cq: Cq) -> Result<(), Error> {
        self.destroy_cq_keep(cq).map_err(|(e, _)| e)
    }

    /// Destroys a CQ; on failure hands it back when it is still intact (busy, or refused by
    /// the firmware).
    pub(crate) fn destroy_cq_keep(&self, cq: Cq) -> Result<(), (Error, Option<Cq>)> {
        let cqn = cq.core.cqn;
        if let Some(ch) = &cq.channel {
            ch.cqs.lock().remove(&cqn);
        }
        let restore = |cq: &Cq| {
            if let Some(ch) = &cq.channel {
                ch.cqs.lock().insert(cqn, cq.core.clone());
            }
        };
        if Arc::strong_count(&cq.core) != 1 {
            restore(&cq);
            return Err((Error::Busy, Some(cq)));
        }
        let mut inp = cmd_in(opcode::DESTROY_CQ, 0, 16);
        destroy_cq_in::CQN.set(&mut inp, cqn);
        if let Err(e) = self.cmd(&inp, 16) {
            if crate::device_may_hold(&e) {
                return Err((e, None));
            }
            restore(&cq);
            return Err((e, Some(cq)));
        }
        match Arc::try_unwrap(cq.core) {
            Ok(core) => {
                let CqCore { buf, dbrec, .. } = core;
                buf.release();
                dbrec.release();
                Ok(())
            }
            // Not reachable: the count was 1 and the Cq was owned here.
            Err(_) => Err((Error::Busy, None)),
        }
    }
}
