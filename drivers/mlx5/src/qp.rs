//! Queue pairs (`docs/mlx5.md#qp-context`): creation, state transitions, query, destruction.
//!
//! The work-queue buffer is one DMA buffer: the RQ at offset 0 (`2^log_rq_size` WQEs of
//! `16 << log_rq_stride` bytes), the SQ right after it (`2^log_sq_size` 64-byte WQEBBs). The
//! doorbell record is a separate 64-byte buffer (word 0 receive counter, word 1 send counter).

use alloc::sync::Arc;
use firmware_interface::cmds::{
    create_qp_in, create_qp_out, destroy_qp_in, qp_2err_in, qp_2rst_in, query_qp_in, query_qp_out,
    rst2init_qp_in,
};

use firmware_interface::ctx::{ads, qpc};
use firmware_interface::{Field, dbr, opcode, uar};
use nic_hal::{DmaBuf, Platform, RegisterIo};

use crate::caps::{Caps, PortType};
use crate::cq::{Cq, CqCore};
use crate::device::{Device, cmd_in};
use crate::error::{Error, OutputFault};
use crate::mem::{Shared, write_pas};
use crate::ring::{DbRec, Ring};
use crate::srq::{Srq, SrqCore};
use crate::uar_page_ok;
use crate::wq::{BfReg, QpCore, RqState, SqState, max_wqe_bytes, sq_limits};

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

/// A QP state transition (one modify-QP command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// RST2INIT_QP: port, P_Key index, access flags (RC) or Q_Key (UD).
    Rst2Init,
    /// INIT2RTR_QP: RC: MTU, remote QPN, address path, receive PSN, responder depth,
    /// RNR NAK timer.
    Init2Rtr,
    /// RTR2RTS_QP: send PSN; RC: ACK timeout, retry counts, initiator depth.
    Rtr2Rts,
    /// RTS2RTS_QP: changes what `opt_param_mask` names (RC: ACK timeout, RNR timer; UD: Q_Key).
    Rts2Rts,
    /// 2ERR_QP, from any state.
    ToErr,
    /// 2RST_QP, from any state.
    ToRst,
}

impl Transition {
    fn opcode(self) -> u16 {
        match self {
            Transition::Rst2Init => opcode::RST2INIT_QP,
            Transition::Init2Rtr => opcode::INIT2RTR_QP,
            Transition::Rtr2Rts => opcode::RTR2RTS_QP,
            Transition::Rts2Rts => opcode::RTS2RTS_QP,
            Transition::ToErr => opcode::QP_2ERR,
            Transition::ToRst => opcode::QP_2RST,
        }
    }

    /// `(state required, state after)`; `None`: any state.
    fn states(self) -> (Option<QpState>, QpState) {
        match self {
            Transition::Rst2Init => (Some(QpState::Reset), QpState::Init),
            Transition::Init2Rtr => (Some(QpState::Init), QpState::Rtr),
            Transition::Rtr2Rts => (Some(QpState::Rtr), QpState::Rts),
            Transition::Rts2Rts => (Some(QpState::Rts), QpState::Rts),
            Transition::ToErr => (None, QpState::Error),
            Transition::ToRst => (None, QpState::Reset),
        }
    }
}

/// Path MTU (`qpc.mtu`, IB encoding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    #[default]
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    fn prm(self) -> u32 {
        match self {
            Mtu::Mtu256 => qpc::MTU_256,
            Mtu::Mtu512 => qpc::MTU_512,
            Mtu::Mtu1024 => qpc::MTU_1024,
            Mtu::Mtu2048 => qpc::MTU_2048,
            Mtu::Mtu4096 => qpc::MTU_4096,
        }
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << self.prm()
    }
}

/// Remote access a QP allows as responder (`rre`, `rwe`, `rae`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QpAccess(u8);

impl QpAccess {
    /// No remote access.
    pub const NONE: QpAccess = QpAccess(0);
    /// RDMA write.
    pub const REMOTE_WRITE: QpAccess = QpAccess(1 << 0);
    /// RDMA read.
    pub const REMOTE_READ: QpAccess = QpAccess(1 << 1);
    /// Atomics.
    pub const REMOTE_ATOMIC: QpAccess = QpAccess(1 << 2);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: QpAccess) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for QpAccess {
    type Output = QpAccess;
    fn bitor(self, rhs: QpAccess) -> QpAccess {
        QpAccess(self.0 | rhs.0)
    }
}

/// Primary address path of a connected QP (`ads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressPath {
    /// Destination GID (RoCE v2 over IPv4: IPv4-mapped IPv6 address).
    pub rgid: [u8; 16],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// Source GID index.
    pub src_gid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (RoCE v2: DSCP = `traffic_class >> 2`).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// RoCE v2 UDP source port.
    pub udp_sport: u16,
    /// Service level (IB: SL; RoCE: Ethernet priority = `sl & 7`).
    pub sl: u8,
    /// Destination LID (IB).
    pub dlid: u16,
    /// A GRH is present (IB; RoCE always has one).
    pub grh: bool,
    /// Static rate code (0 = port rate).
    pub stat_rate: u8,
    /// Local ACK timeout (IB 5-bit code: 4.096 µs × 2^n), set at RTR2RTS.
    pub ack_timeout: u8,
}

impl Default for AddressPath {
    fn default() -> Self {
        AddressPath {
            rgid: [0; 16],
            rmac: [0; 6],
            src_gid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            udp_sport: 0,
            sl: 0,
            dlid: 0,
            grh: false,
            stat_rate: 0,
            ack_timeout: 14,
        }
    }
}

/// Parameters of a QP transition; each transition uses the fields its command needs (see
/// [`Transition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpModify {
    /// Port number (1-based).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Remote access (RC).
    pub access: QpAccess,
    /// Path MTU (RC).
    pub mtu: Mtu,
    /// Remote QPN (RC, 24 bits).
    pub remote_qpn: u32,
    /// Receive PSN (24 bits).
    pub rq_psn: u32,
    /// Send PSN (24 bits).
    pub sq_psn: u32,
    /// Primary address path (RC).
    pub path: AddressPath,
    /// Transport retry count (0..=7).
    pub retry_count: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_nak: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// `opt_param_mask` sent with the command (`ctx::qpc::optpar`); RTS2RTS changes only what
    /// it names.
    pub opt_param_mask: u32,
}

impl Default for QpModify {
    fn default() -> Self {
        QpModify {
            port: 1,
            pkey_index: 0,
            qkey: 0,
            access: QpAccess::NONE,
            mtu: Mtu::Mtu1024,
            remote_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            path: AddressPath::default(),
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            opt_param_mask: 0,
        }
    }
}

/// Parameters of [`Device::create_qp`].
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

/// A queue pair. Owns its work-queue buffer (RQ first, then SQ) and doorbell record; the
/// driver tracks its state as the transitions it executed. Dropped without
/// [`Device::destroy_qp`], its memory is leaked (the device may still access it).
///
/// The data path: [`Device::post_send`] / [`Device::post_recv`] (take `&mut Qp`: one poster
/// per QP, no lock), completions through the CQs it is attached to ([`Device::attach_qp`]).
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
    pub fn service(&self) -> ServiceType {
        self.service
    }

    /// State after the last successful transition.
    pub fn state(&self) -> QpState {
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

/// What QUERY_QP reported (the state validated, the rest as read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryQp {
    /// State.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// Path MTU code (`qpc.mtu`).
    pub mtu: u8,
    /// Remote QPN.
    pub remote_qpn: u32,
    /// Next send PSN.
    pub next_send_psn: u32,
    /// Next expected receive PSN.
    pub next_rcv_psn: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_nak: u8,
    /// Port of the primary path.
    pub port: u8,
    /// P_Key index of the primary path.
    pub pkey_index: u16,
    /// SQ WQEBB counter as the hardware sees it.
    pub hw_sq_wqebb_counter: u16,
    /// RQ counter as the hardware sees it.
    pub hw_rq_counter: u32,
}

/// `ceil(log2(n))`, 0 for n ≤ 1 (Linux `fls(n - 1)`).
fn ceil_log2(n: u8) -> u32 {
    if n <= 1 {
        0
    } else {
        u32::BITS - ((n - 1) as u32).leading_zeros()
    }
}

/// Writes `v` into QPC field `f` of a modify/create message.
fn q(buf: &mut [u8], f: Field, v: u32) {
    f.at(rst2init_qp_in::QPC.byte_off()).set(buf, v);
}

/// Writes `v` into field `f` of the QPC's primary address path.
fn pp(buf: &mut [u8], f: Field, v: u32) {
    f.at(rst2init_qp_in::QPC.byte_off() + qpc::PRIMARY_ADDRESS_PATH.byte_off())
        .set(buf, v);
}

fn pp_bytes(buf: &mut [u8], f: Field, v: &[u8]) {
    let f = f.at(rst2init_qp_in::QPC.byte_off() + qpc::PRIMARY_ADDRESS_PATH.byte_off());
    if let Some(d) = f.slice_mut(buf)
        && d.len() == v.len()
    {
        d.copy_from_slice(v);
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a QP in RESET: allocates its work-queue buffer and doorbell record and issues
    /// CREATE_QP. Sizes are checked against the capabilities (`log_max_qp_sz`, the QPC field
    /// widths, `max_wqe_sz_rq`); the RQ must be at least 64 bytes (it precedes the SQ).
    pub fn create_qp(&self, attr: &QpCreate) -> Result<Qp, Error> {
        self.create_qp_on(attr, None)
    }

    /// [`create_qp`](Self::create_qp) for a QP that receives from `srq` (`rq_type` SRQ): no
    /// receive queue of its own (`log_rq_size` and `log_rq_stride` are ignored, the SQ starts
    /// the buffer), receive completions in `attr.recv_cqn` naming SRQ WQEs. The SRQ must be
    /// of this device and of the QP's PD (else [`Error::InvalidArgument`]); it cannot be
    /// destroyed while the QP exists.
    pub fn create_qp_srq(&self, attr: &QpCreate, srq: &Srq) -> Result<Qp, Error> {
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
    pub fn attach_qp(&self, qp: &mut Qp, send_cq: &Cq, recv_cq: &Cq) -> Result<(), Error> {
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
    pub fn destroy_qp(&self, qp: Qp) -> Result<(), Error> {
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

    /// Moves a QP through one state transition. The transition must start from the state
    /// the driver last moved the QP to (`ToErr` and `ToRst` from any state), else
    /// [`Error::InvalidArgument`]; the attributes it uses are range-checked. After `ToRst` the
    /// doorbell record is cleared.
    pub fn modify_qp(
        &self,
        qp: &mut Qp,
        transition: Transition,
        attr: &QpModify,
    ) -> Result<(), Error> {
        let (from, to) = transition.states();
        if from.is_some_and(|s| s != qp.state) {
            return Err(Error::InvalidArgument);
        }
        let inp = match transition {
            Transition::ToErr => {
                let mut inp = cmd_in(opcode::QP_2ERR, 0, 16);
                qp_2err_in::QPN.set(&mut inp, qp.qpn);
                inp
            }
            Transition::ToRst => {
                let mut inp = cmd_in(opcode::QP_2RST, 0, 16);
                qp_2rst_in::QPN.set(&mut inp, qp.qpn);
                inp
            }
            _ => self.modify_input(qp, transition, attr)?,
        };
        self.cmd(&inp, 16)?;
        qp.state = to;
        if transition == Transition::Rst2Init {
            qp.port = attr.port;
        }
        if qp.service.is_datagram() {
            let named = attr.opt_param_mask & qpc::optpar::Q_KEY != 0;
            match transition {
                Transition::Rst2Init => qp.qkey = attr.qkey,
                Transition::Init2Rtr | Transition::Rtr2Rts | Transition::Rts2Rts if named => {
                    qp.qkey = attr.qkey
                }
                _ => {}
            }
        }
        if transition == Transition::ToRst {
            // The device forgot the queues: so does the driver, and the QP's CQEs still in its
            // CQs are dropped.
            qp.clean_cqs(false);
            qp.reset_queues();
            qp.dbrec.write_be32(dbr::QP_RCV, 0)?;
            qp.dbrec.write_be32(dbr::QP_SND, 0)?;
        }
        Ok(())
    }

    /// Builds the input of RST2INIT / INIT2RTR / RTR2RTS / RTS2RTS.
    fn modify_input(
        &self,
        qp: &Qp,
        transition: Transition,
        a: &QpModify,
    ) -> Result<alloc::vec::Vec<u8>, Error> {
        let caps = &self.caps;
        let p = &a.path;
        let port_ok = a.port >= 1 && a.port <= caps.num_ports;
        let log_rra = ceil_log2(a.max_dest_rd_atomic);
        let log_sra = ceil_log2(a.max_rd_atomic);
        if !port_ok
            || a.remote_qpn > 0xff_ffff
            || a.rq_psn > 0xff_ffff
            || a.sq_psn > 0xff_ffff
            || a.retry_count > 7
            || a.rnr_retry > 7
            || a.min_rnr_nak > 31
            || p.ack_timeout > 31
            || p.flow_label > 0xf_ffff
            || p.sl > 15
            || p.stat_rate > 15
            || log_rra > 7
            || log_rra > caps.log_max_ra_res_qp as u32
            || log_sra > 7
            || log_sra > caps.log_max_ra_req_qp as u32
        {
            return Err(Error::InvalidArgument);
        }
        let rc = qp.service == ServiceType::Rc;
        let mut inp = cmd_in(transition.opcode(), 0, rst2init_qp_in::SIZE);
        rst2init_qp_in::QPN.set(&mut inp, qp.qpn);
        rst2init_qp_in::OPT_PARAM_MASK.set(&mut inp, a.opt_param_mask);
        q(&mut inp, qpc::ST, qp.service.st());
        q(&mut inp, qpc::PM_STATE, qpc::PM_STATE_MIGRATED);
        q(&mut inp, qpc::PD, qp.pd);
        q(&mut inp, qpc::CQN_SND, qp.send_cqn);
        q(&mut inp, qpc::CQN_RCV, qp.recv_cqn);
        pp(&mut inp, ads::VHCA_PORT_NUM, a.port as u32);
        pp(&mut inp, ads::PKEY_INDEX, a.pkey_index as u32);
        let access = |inp: &mut [u8]| {
            q(
                inp,
                qpc::RRE,
                a.access.contains(QpAccess::REMOTE_READ) as u32,
            );
            q(
                inp,
                qpc::RWE,
                a.access.contains(QpAccess::REMOTE_WRITE) as u32,
            );
            let rae = a.access.contains(QpAccess::REMOTE_ATOMIC);
            q(inp, qpc::RAE, rae as u32);
            if rae {
                q(inp, qpc::ATOMIC_MODE, qpc::ATOMIC_MODE_IB);
            }
        };
        match transition {
            Transition::Rst2Init => {
                if rc {
                    access(&mut inp);
                } else {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::Init2Rtr => {
                if !rc && a.opt_param_mask & qpc::optpar::Q_KEY != 0 {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
                if rc {
                    q(&mut inp, qpc::MTU, a.mtu.prm());
                    q(&mut inp, qpc::LOG_MSG_MAX, caps.log_max_msg as u32);
                    q(&mut inp, qpc::REMOTE_QPN, a.remote_qpn);
                    q(&mut inp, qpc::NEXT_RCV_PSN, a.rq_psn);
                    q(&mut inp, qpc::LOG_RRA_MAX, log_rra);
                    q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    access(&mut inp);
                    self.write_path(&mut inp, p);
                }
            }
            Transition::Rtr2Rts => {
                q(&mut inp, qpc::NEXT_SEND_PSN, a.sq_psn);
                let opt = a.opt_param_mask;
                if rc {
                    pp(&mut inp, ads::ACK_TIMEOUT, p.ack_timeout as u32);
                    q(&mut inp, qpc::RETRY_COUNT, a.retry_count as u32);
                    q(&mut inp, qpc::RNR_RETRY, a.rnr_retry as u32);
                    q(&mut inp, qpc::LOG_SRA_MAX, log_sra);
                    if opt & (qpc::optpar::RRE | qpc::optpar::RWE | qpc::optpar::RAE) != 0 {
                        access(&mut inp);
                    }
                    if opt & qpc::optpar::RNR_TIMEOUT != 0 {
                        q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    }
                } else if opt & qpc::optpar::Q_KEY != 0 {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::Rts2Rts => {
                if rc {
                    pp(&mut inp, ads::ACK_TIMEOUT, p.ack_timeout as u32);
                    q(&mut inp, qpc::MIN_RNR_NAK, a.min_rnr_nak as u32);
                    let opt = a.opt_param_mask;
                    if opt & (qpc::optpar::RRE | qpc::optpar::RWE | qpc::optpar::RAE) != 0 {
                        access(&mut inp);
                    }
                } else {
                    q(&mut inp, qpc::Q_KEY, a.qkey);
                }
            }
            Transition::ToErr | Transition::ToRst => return Err(Error::InvalidArgument),
        }
        Ok(inp)
    }

    /// The primary path fields of INIT2RTR (`docs/mlx5.md#qp-context`, Linux `mlx5_set_path`).
    fn write_path(&self, inp: &mut [u8], p: &AddressPath) {
        pp(inp, ads::STAT_RATE, p.stat_rate as u32);
        match self.caps.port_type {
            PortType::Ethernet => {
                pp(inp, ads::SRC_ADDR_INDEX, p.src_gid_index as u32);
                pp(inp, ads::HOP_LIMIT, p.hop_limit as u32);
                pp(inp, ads::TCLASS, p.traffic_class as u32);
                pp(inp, ads::FLOW_LABEL, p.flow_label);
                pp_bytes(inp, ads::RGID_RIP, &p.rgid);
                pp_bytes(inp, ads::RMAC, &p.rmac);
                pp(inp, ads::UDP_SPORT, p.udp_sport as u32);
                pp(inp, ads::DSCP, (p.traffic_class >> 2) as u32);
                pp(inp, ads::ETH_PRIO, (p.sl & 7) as u32);
            }
            PortType::InfiniBand => {
                pp(inp, ads::RLID, p.dlid as u32);
                pp(inp, ads::SL, p.sl as u32);
                if p.grh {
                    pp(inp, ads::GRH, 1);
                    pp(inp, ads::SRC_ADDR_INDEX, p.src_gid_index as u32);
                    pp(inp, ads::HOP_LIMIT, p.hop_limit as u32);
                    pp(inp, ads::TCLASS, p.traffic_class as u32);
                    pp(inp, ads::FLOW_LABEL, p.flow_label);
                    pp_bytes(inp, ads::RGID_RIP, &p.rgid);
                }
            }
        }
    }

    /// QUERY_QP: the device's view of the QP. A state value that does not exist, or a service
    /// type other than the QP's, is [`Error::BadOutput`].
    pub fn query_qp(&self, qp: &Qp) -> Result<QueryQp, Error> {
        let mut inp = cmd_in(opcode::QUERY_QP, 0, 16);
        query_qp_in::QPN.set(&mut inp, qp.qpn);
        let out = self.cmd(&inp, query_qp_out::SIZE)?;
        let base = query_qp_out::QPC.byte_off();
        let g = |f: Field| f.at(base).get(&out);
        let ppg = |f: Field| f.at(base + qpc::PRIMARY_ADDRESS_PATH.byte_off()).get(&out);
        let bad = |value| Error::BadOutput {
            opcode: opcode::QUERY_QP,
            what: OutputFault::QpContext { value },
        };
        let raw_state = g(qpc::STATE);
        let state = QpState::from_prm(raw_state).ok_or(bad(raw_state))?;
        let st = g(qpc::ST);
        if st != qp.service.st() {
            return Err(bad(st));
        }
        Ok(QueryQp {
            state,
            pd: g(qpc::PD),
            mtu: g(qpc::MTU) as u8,
            remote_qpn: g(qpc::REMOTE_QPN),
            next_send_psn: g(qpc::NEXT_SEND_PSN),
            next_rcv_psn: g(qpc::NEXT_RCV_PSN),
            qkey: g(qpc::Q_KEY),
            retry_count: g(qpc::RETRY_COUNT) as u8,
            rnr_retry: g(qpc::RNR_RETRY) as u8,
            min_rnr_nak: g(qpc::MIN_RNR_NAK) as u8,
            port: ppg(ads::VHCA_PORT_NUM) as u8,
            pkey_index: ppg(ads::PKEY_INDEX) as u16,
            hw_sq_wqebb_counter: g(qpc::HW_SQ_WQEBB_COUNTER) as u16,
            hw_rq_counter: g(qpc::HW_RQ_COUNTER),
        })
    }
}
