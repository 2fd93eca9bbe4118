//! Queue pairs (`docs/mlx5.md#qp-context`): the [`Qp`] object and its service type and state. The commands
//! that act on it are in the submodules, one concern each:
//!
//! * `create`: CREATE_QP (the work-queue buffer and doorbell record), attaching to the CQs,
//!   DESTROY_QP;
//! * `modify`: the state transitions (RST2INIT … RTS2RTS, 2ERR, 2RST) and the contexts they
//!   send;
//! * `path`: the address path and the path MTU (connected QPs; the fixed values of datagram
//!   QPs);
//! * `query`: QUERY_QP.
//!
//! The work-queue buffer is one DMA buffer: the RQ at offset 0 (`2^log_rq_size` WQEs of
//! `16 << log_rq_stride` bytes), the SQ right after it (`2^log_sq_size` 64-byte WQEBBs). The
//! doorbell record is a separate 64-byte buffer (word 0 receive counter, word 1 send counter).

mod create;
mod modify;
mod path;
mod query;

pub use create::QpCreate;
pub use modify::{QpAccess, QpModify, Transition};
pub use path::{AddressPath, Mtu};
#[cfg(any(test, feature = "raw"))]
pub use query::QueryQp;

use alloc::sync::Arc;
use firmware_interface::Field;
use firmware_interface::cmds::rst2init_qp_in;
use firmware_interface::ctx::qpc;
use nic_hal::DmaBuf;

use crate::cq::CqCore;
use crate::mem::Shared;
use crate::ring::DbRec;
use crate::srq::SrqCore;
use crate::wq::{QpCore, RqState, SqState};

/// Transport service of a QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable datagram.
    Ud,
    /// The GSI QP of the port (`qpc.st` QP1): a datagram QP the device numbers 1, one per
    /// port, receiving only the GSI Q_Key and sending with it. Same WQEs as UD.
    Gsi,
}

impl ServiceType {
    fn st(self) -> u32 {
        match self {
            ServiceType::Rc => qpc::ST_RC,
            ServiceType::Ud => qpc::ST_UD,
            ServiceType::Gsi => qpc::ST_QP1,
        }
    }

    /// UD or GSI: datagram WQEs (with a datagram segment), a Q_Key.
    pub fn is_datagram(self) -> bool {
        matches!(self, ServiceType::Ud | ServiceType::Gsi)
    }
}

/// QP number the device gives the GSI QP.
pub(crate) const GSI_QPN: u32 = 1;

/// QP state (`qpc.state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QpState {
    /// RST (0).
    #[default]
    Reset,
    /// INIT (1).
    Init,
    /// RTR (2).
    Rtr,
    /// RTS (3).
    Rts,
    /// SQER (4).
    SqError,
    /// SQD (5).
    SqDrained,
    /// ERR (6).
    Error,
    /// SQ_DRAINING (7).
    SqDraining,
    /// SUSPENDED (9).
    Suspended,
}

impl QpState {
    fn from_prm(v: u32) -> Option<QpState> {
        Some(match v {
            qpc::STATE_RST => QpState::Reset,
            qpc::STATE_INIT => QpState::Init,
            qpc::STATE_RTR => QpState::Rtr,
            qpc::STATE_RTS => QpState::Rts,
            qpc::STATE_SQER => QpState::SqError,
            qpc::STATE_SQD => QpState::SqDrained,
            qpc::STATE_ERR => QpState::Error,
            qpc::STATE_SQ_DRAINING => QpState::SqDraining,
            qpc::STATE_SUSPENDED => QpState::Suspended,
            _ => return None,
        })
    }
}

/// A queue pair. Owns its work-queue buffer (RQ first, then SQ) and doorbell record; the
/// driver tracks its state as the transitions it executed. Dropped without
/// `destroy_qp`, its memory is leaked (the device may still access it).
///
/// The data path: [`Device::post_send`](crate::Device::post_send) / [`Device::post_recv`](crate::Device::post_recv) (take `&mut Qp`: one poster
/// per QP, no lock), completions through the CQs it is attached to.
#[derive(Debug)]
pub struct Qp {
    qpn: u32,
    service: ServiceType,
    state: QpState,
    pd: u32,
    send_cqn: u32,
    recv_cqn: u32,
    uar: u32,
    port: u8,
    log_sq_size: u8,
    log_rq_size: u8,
    log_rq_stride: u8,
    sq_offset: usize,
    buf: Shared,
    dbrec: Shared,
    pub(crate) core: Arc<QpCore>,
    pub(crate) sq: SqState,
    pub(crate) rq: RqState,
    pub(crate) rec: DbRec,
    /// Send and receive CQ while attached.
    pub(crate) cqs: [Option<Arc<CqCore>>; 2],
    /// The SRQ it receives from (it has no RQ then).
    pub(crate) srq: Option<Arc<SrqCore>>,
    /// Q_Key (UD), as last set.
    pub(crate) qkey: u32,
    /// A UAR allocated for this QP alone (freed with it).
    pub(crate) own_uar: Option<u32>,
    /// The verbs attributes as last set (provider bookkeeping).
    pub(crate) attr: verbs::QpAttr,
}

impl Qp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Service type.
    pub(crate) fn service(&self) -> ServiceType {
        self.service
    }

    /// State after the last successful transition.
    pub(crate) fn state(&self) -> QpState {
        self.state
    }

    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Send CQ number.
    pub fn send_cqn(&self) -> u32 {
        self.send_cqn
    }

    /// Receive CQ number.
    pub fn recv_cqn(&self) -> u32 {
        self.recv_cqn
    }

    /// UAR index of the send doorbell.
    pub fn uar(&self) -> u32 {
        self.uar
    }

    /// Port set at RST2INIT (1 before).
    pub fn port(&self) -> u8 {
        self.port
    }

    /// log2 of the SQ size in WQEBBs.
    pub fn log_sq_size(&self) -> u8 {
        self.log_sq_size
    }

    /// log2 of the number of RQ WQEs.
    pub fn log_rq_size(&self) -> u8 {
        self.log_rq_size
    }

    /// RQ WQE stride in bytes.
    pub fn rq_stride(&self) -> usize {
        16 << self.log_rq_stride
    }

    /// Offset of the RQ in [`buffer`](Self::buffer) (always 0).
    pub fn rq_offset(&self) -> usize {
        0
    }

    /// Offset of the SQ in [`buffer`](Self::buffer) (the RQ size in bytes).
    pub fn sq_offset(&self) -> usize {
        self.sq_offset
    }

    /// The work-queue buffer.
    pub fn buffer(&self) -> &DmaBuf {
        &self.buf
    }

    /// The doorbell record (`dbr::QP_RCV`, `dbr::QP_SND`).
    pub fn doorbell_record(&self) -> &DmaBuf {
        &self.dbrec
    }

    /// Number of SQ WQEBBs.
    pub fn sq_wqebbs(&self) -> u32 {
        self.sq.wqe_cnt
    }

    /// SQ producer position in WQEBBs (free running; the WQE index is its low 16 bits).
    pub fn sq_producer(&self) -> u32 {
        self.sq.cur_post
    }

    /// SQ consumer position: the first WQEBB not retired by a completion.
    pub fn sq_consumer(&self) -> u32 {
        self.core
            .sq_tail
            .0
            .load(core::sync::atomic::Ordering::Acquire)
    }

    /// RQ producer position (WQEs posted, free running).
    pub fn rq_producer(&self) -> u32 {
        self.rq.head
    }

    /// RQ consumer position (WQEs completed).
    pub fn rq_consumer(&self) -> u32 {
        self.core
            .rq_tail
            .0
            .load(core::sync::atomic::Ordering::Acquire)
    }

    /// Most data segments per send WQE.
    pub fn max_send_sge(&self) -> u32 {
        self.sq.max_sge
    }

    /// Most inline bytes per send WQE.
    pub fn max_inline_data(&self) -> u32 {
        self.sq.max_inline
    }

    /// Most data segments per receive WQE.
    pub fn max_recv_sge(&self) -> u32 {
        self.rq.max_sge
    }

    /// Every send WQE asks for a completion.
    pub fn sq_sig_all(&self) -> bool {
        self.sq.sig_all
    }

    /// Makes every send WQE ask for a completion (or only the SIGNALED ones).
    pub fn set_sq_sig_all(&mut self, on: bool) {
        self.sq.set_sig_all(on);
    }

    /// Whether single small WQEs are sent by BlueFlame.
    pub fn blueflame(&self) -> bool {
        self.sq.bf.blueflame
    }

    /// BAR offset of the send doorbell register (UAR page + 0x800) and the half in use next.
    pub fn doorbell_register(&self) -> (usize, usize) {
        (self.sq.bf.reg, self.sq.bf.offset)
    }

    /// Q_Key (UD) as last set by RST2INIT or RTS2RTS.
    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    /// The SRQ number it receives from, if it is on an SRQ.
    pub fn srqn(&self) -> Option<u32> {
        self.srq.as_ref().map(|s| s.srqn)
    }

    /// Whether the QP is attached to its CQs.
    pub fn is_attached(&self) -> bool {
        self.cqs[0].is_some()
    }

    /// Forgets everything posted: positions back to 0 (after RESET; the CQs were cleaned).
    fn reset_queues(&mut self) {
        self.core.reset();
        self.sq.cur_post = 0;
        self.sq.tail = 0;
        self.rq.head = 0;
        self.rq.tail = 0;
    }

    /// Marks this QP's unpolled CQEs in its CQs to be skipped; with `detach`, removes it from
    /// their tables.
    fn clean_cqs(&mut self, detach: bool) {
        let cqs = if detach {
            [self.cqs[0].take(), self.cqs[1].take()]
        } else {
            self.cqs.clone()
        };
        for (i, cq) in cqs.iter().enumerate() {
            if let Some(cq) = cq {
                let same = i == 1 && cqs[0].as_ref().is_some_and(|c| Arc::ptr_eq(c, cq));
                if !same {
                    cq.clean(self.qpn, detach);
                }
            }
        }
    }
}

/// Writes `v` into QPC field `f` of a modify/create message.
fn q(buf: &mut [u8], f: Field, v: u32) {
    f.at(rst2init_qp_in::QPC.byte_off()).set(buf, v);
}
