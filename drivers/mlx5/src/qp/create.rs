//! CREATE_QP (the work-queue buffer, the doorbell record, the PAS list), attaching a QP to
//! its CQs, DESTROY_QP.

use alloc::sync::Arc;
use firmware_interface::cmds::{create_qp_in, create_qp_out, destroy_qp_in};
use firmware_interface::ctx::qpc;
use firmware_interface::{dbr, opcode, uar};
use nic_hal::{Platform, RegisterIo};

use crate::caps::Caps;
use crate::cq::Cq;
use crate::device::{Device, cmd_in};
use crate::error::{Error, OutputFault};
use crate::mem::{Shared, write_pas};
use crate::ring::{DbRec, Ring};
use crate::srq::Srq;
use crate::uar_page_ok;
use crate::wq::{BfReg, QpCore, RqState, SqState, max_wqe_bytes, sq_limits};

use super::{GSI_QPN, Qp, QpState, ServiceType, q};

/// Parameters of [`create_qp`](crate::raw::RawDevice::create_qp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCreate {
    /// Service type.
    pub service: ServiceType,
    /// Protection domain.
    pub pd: u32,
    /// CQ for send completions.
    pub send_cqn: u32,
    /// CQ for receive completions.
    pub recv_cqn: u32,
    /// log2 of the SQ size in 64-byte WQEBBs.
    pub log_sq_size: u8,
    /// log2 of the number of RQ WQEs.
    pub log_rq_size: u8,
    /// RQ WQE stride as in the QPC: `16 << log_rq_stride` bytes (0..=7).
    pub log_rq_stride: u8,
    /// UAR index whose BlueFlame registers ring this QP's send doorbell; `None`: the
    /// driver's UAR.
    pub uar: Option<u32>,
    /// Use BlueFlame (copy a single small WQE to the register instead of an 8-byte doorbell)
    /// when the device offers it. Only for a QP that is the only one ringing the first
    /// register of its UAR: the register's two halves alternate per doorbell, tracked per QP.
    pub blueflame: bool,
}

impl Default for QpCreate {
    fn default() -> Self {
        QpCreate {
            service: ServiceType::Rc,
            pd: 0,
            send_cqn: 0,
            recv_cqn: 0,
            log_sq_size: 6,
            log_rq_size: 6,
            log_rq_stride: 2,
            uar: None,
            blueflame: false,
        }
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a QP in RESET: allocates its work-queue buffer and doorbell record and issues
    /// CREATE_QP. Sizes are checked against the capabilities (`log_max_qp_sz`, the QPC field
    /// widths, `max_wqe_sz_rq`); the RQ must be at least 64 bytes (it precedes the SQ).
    pub(crate) fn create_qp(&self, attr: &QpCreate) -> Result<Qp, Error> {
        self.create_qp_on(attr, None)
    }

    /// [`create_qp`](Self::create_qp) for a QP that receives from `srq` (`rq_type` SRQ): no
    /// receive queue of its own (`log_rq_size` and `log_rq_stride` are ignored, the SQ starts
    /// the buffer), receive completions in `attr.recv_cqn` naming SRQ WQEs. The SRQ must be
    /// of this device and of the QP's PD (else [`Error::InvalidArgument`]); it cannot be
    /// destroyed while the QP exists.
    pub(crate) fn create_qp_srq(&self, attr: &QpCreate, srq: &Srq) -> Result<Qp, Error> {
        if srq.core.dev_uid != self.uid || srq.core.pd != attr.pd {
            return Err(Error::InvalidArgument);
        }
        self.create_qp_on(attr, Some(srq))
    }

    fn create_qp_on(&self, attr: &QpCreate, srq: Option<&Srq>) -> Result<Qp, Error> {
        let caps = &self.caps;
        let supported = match attr.service {
            ServiceType::Rc => caps.rc,
            ServiceType::Ud | ServiceType::Gsi => caps.ud,
        };
        if !supported {
            return Err(Error::NotSupported);
        }
        let max_log_wq = caps.log_max_qp_sz.min(15);
        let uar = match attr.uar {
            Some(u) => u,
            None => self.driver_uar()?,
        };
        let rq_stride = 16usize << attr.log_rq_stride.min(7);
        if attr.log_sq_size > max_log_wq
            || attr.log_rq_size > max_log_wq
            || attr.log_rq_stride > 7
            || rq_stride > caps.max_wqe_sz_rq as usize
            || attr.pd > 0xff_ffff
            || !Caps::fits(attr.send_cqn, caps.log_max_cq)
            || !Caps::fits(attr.recv_cqn, caps.log_max_cq)
            || !uar_page_ok(uar, self.config.bar_size)
        {
            return Err(Error::InvalidArgument);
        }
        let rq_bytes = if srq.is_some() {
            0
        } else {
            rq_stride << attr.log_rq_size
        };
        let sq_bytes = 64usize << attr.log_sq_size;
        if rq_bytes < 64 && srq.is_none() {
            return Err(Error::InvalidArgument);
        }
        let bytes = (rq_bytes + sq_bytes).next_multiple_of(4096);
        let buf = Shared::new(&self.dma, bytes, 4096)?;
        let dbrec = Shared::new(&self.dma, dbr::RECORD_SIZE, dbr::RECORD_SIZE)?;

        let npages = bytes / 4096;
        let mut inp = cmd_in(opcode::CREATE_QP, 0, create_qp_in::SIZE + npages * 8);
        q(&mut inp, qpc::ST, attr.service.st());
        q(&mut inp, qpc::PM_STATE, qpc::PM_STATE_MIGRATED);
        q(&mut inp, qpc::PD, attr.pd);
        q(&mut inp, qpc::LOG_MSG_MAX, caps.log_max_msg as u32);
        q(&mut inp, qpc::LOG_RQ_SIZE, attr.log_rq_size as u32);
        q(&mut inp, qpc::LOG_RQ_STRIDE, attr.log_rq_stride as u32);
        q(&mut inp, qpc::LOG_SQ_SIZE, attr.log_sq_size as u32);
        q(&mut inp, qpc::UAR_PAGE, uar);
        if caps.cqe_version == 1 {
            q(&mut inp, qpc::USER_INDEX, qpc::USER_INDEX_NONE);
        }
        q(&mut inp, qpc::LOG_PAGE_SIZE, 0);
        q(&mut inp, qpc::CQN_SND, attr.send_cqn);
        q(&mut inp, qpc::CQN_RCV, attr.recv_cqn);
        match srq {
            Some(s) => {
                q(&mut inp, qpc::LOG_RQ_SIZE, 0);
                q(&mut inp, qpc::LOG_RQ_STRIDE, 0);
                q(&mut inp, qpc::RQ_TYPE, qpc::RQ_TYPE_SRQ);
                q(&mut inp, qpc::SRQN_RMPN_XRQN, s.core.srqn);
            }
            None => q(&mut inp, qpc::RQ_TYPE, qpc::RQ_TYPE_REGULAR),
        }
        qpc::DBR_ADDR
            .at(create_qp_in::QPC.byte_off())
            .set64(&mut inp, dbrec.iova());
        write_pas(&buf, &mut inp, create_qp_in::PAS.byte_off());

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
        let qpn =
            self.object_number(opcode::CREATE_QP, &out, create_qp_out::QPN, caps.log_max_qp)?;
        if attr.service == ServiceType::Gsi && qpn != GSI_QPN {
            // The device made some QP we cannot use as QP1 (left to it, as on other bad
            // outputs: it may hold the buffers).
            return Err(Error::BadOutput {
                opcode: opcode::CREATE_QP,
                what: OutputFault::ObjectNumber { value: qpn },
            });
        }
        let ud = attr.service.is_datagram();
        let sq_cnt = 1u32 << attr.log_sq_size;
        let rq_cnt = 1u32 << attr.log_rq_size;
        let (max_sge, max_inline) = sq_limits(max_wqe_bytes(caps.max_wqe_sz_sq, sq_cnt), ud);
        let half = (1usize << caps.log_bf_reg_size) / 2;
        // SAFETY: the Rings and the DbRec live in the Qp that owns `buf` and `dbrec`; those are
        // only released when the Qp is taken apart in `destroy_qp`.
        // (A QP on an SRQ has no RQ: its ring is a stand-in that nothing posts to.)
        let (sq_ring, rq_ring, rec) = unsafe {
            (
                Ring::new(&buf, rq_bytes, sq_bytes),
                Ring::new(&buf, 0, if srq.is_some() { sq_bytes } else { rq_bytes }),
                DbRec::new(&dbrec),
            )
        };
        let (Some(sq_ring), Some(rq_ring), Some(rec)) = (sq_ring, rq_ring, rec) else {
            // Sizes are powers of two of at least 64 bytes and lie in the buffer: not reached.
            return Err(Error::InvalidArgument);
        };
        let Some(mut core) = QpCore::new(qpn, ud, sq_cnt, rq_cnt, sq_ring) else {
            // The SQ ring is `sq_cnt` WQEBBs (`sq_bytes`): not reached.
            return Err(Error::InvalidArgument);
        };
        core.srq = srq.map(|s| s.core.clone());
        Ok(Qp {
            qpn,
            service: attr.service,
            state: QpState::Reset,
            pd: attr.pd,
            send_cqn: attr.send_cqn,
            recv_cqn: attr.recv_cqn,
            uar,
            port: 1,
            log_sq_size: attr.log_sq_size,
            log_rq_size: attr.log_rq_size,
            log_rq_stride: attr.log_rq_stride,
            sq_offset: rq_bytes,
            buf,
            dbrec,
            core: Arc::new(core),
            sq: SqState::new(
                sq_ring,
                sq_cnt,
                qpn,
                ud,
                (max_sge, max_inline),
                BfReg {
                    reg: uar as usize * uar::PAGE_SIZE + uar::BF_OFFSET,
                    offset: 0,
                    half,
                    blueflame: attr.blueflame && caps.bf && half >= 64,
                },
            ),
            rq: RqState {
                ring: rq_ring,
                wqe_cnt: rq_cnt,
                log_stride: attr.log_rq_stride as u32 + 4,
                head: 0,
                tail: 0,
                max_sge: 1 << attr.log_rq_stride,
            },
            rec,
            cqs: [None, None],
            srq: srq.map(|s| s.core.clone()),
            qkey: 0,
            own_uar: None,
            attr: verbs::QpAttr::default(),
        })
    }

    /// Attaches a QP to its CQs (the ones named at creation): from now on their pollers accept
    /// CQEs naming it. The verbs provider's `create_qp` does this itself. CQs other than the
    /// ones named at creation, or of another device: [`Error::InvalidArgument`].
    pub(crate) fn attach_qp(&self, qp: &mut Qp, send_cq: &Cq, recv_cq: &Cq) -> Result<(), Error> {
        if qp.is_attached()
            || send_cq.cqn() != qp.send_cqn
            || recv_cq.cqn() != qp.recv_cqn
            || send_cq.core.dev_uid != self.uid
            || recv_cq.core.dev_uid != self.uid
        {
            return Err(Error::InvalidArgument);
        }
        let same = Arc::ptr_eq(&send_cq.core, &recv_cq.core);
        send_cq.core.attach(qp.core.clone(), true, same);
        if !same {
            recv_cq.core.attach(qp.core.clone(), false, true);
        }
        qp.cqs = [Some(send_cq.core.clone()), Some(recv_cq.core.clone())];
        Ok(())
    }

    /// Destroys a QP and frees its memory; its completions still in its CQs are discarded
    /// (they are skipped by the next polls) and it is detached from them. A UAR allocated for
    /// it alone is freed too. If the command fails the memory is leaked.
    pub(crate) fn destroy_qp(&self, qp: Qp) -> Result<(), Error> {
        self.destroy_qp_keep(qp).map_err(|(e, _)| e)
    }

    /// Destroys a QP; on failure hands it back when it is still intact (the firmware refused).
    // Handing the object back by value is the point; destroy is not a hot path.
    #[allow(clippy::result_large_err)]
    pub(crate) fn destroy_qp_keep(&self, mut qp: Qp) -> Result<(), (Error, Option<Qp>)> {
        let mut inp = cmd_in(opcode::DESTROY_QP, 0, 16);
        destroy_qp_in::QPN.set(&mut inp, qp.qpn);
        if let Err(e) = self.cmd(&inp, 16) {
            if crate::device_may_hold(&e) {
                return Err((e, None));
            }
            return Err((e, Some(qp)));
        }
        qp.clean_cqs(true);
        let own_uar = qp.own_uar.take();
        qp.buf.release();
        qp.dbrec.release();
        if let Some(u) = own_uar {
            self.dealloc_uar(u).map_err(|e| (e, None))?;
        }
        Ok(())
    }
}
