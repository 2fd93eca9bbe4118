//! The verbs provider: [`verbs::Provider`] for [`Device`], over the driver's objects.
//!
//! | verbs | mlx5 |
//! |---|---|
//! | `Pd` | [`Pd`] (ALLOC_PD) |
//! | `Mr` | [`Mr`] (an MTT mkey over the pages of a [`verbs::Buffer`] it holds, or of a raw [`verbs::MemRegion`]) |
//! | `Cq` | [`Cq`] (64-byte CQEs, `2^n ≥ cqe + 1` entries) |
//! | `Qp` | [`Qp`] (RC or UD; its own UAR when BlueFlame is used; on an SRQ: no RQ) |
//! | `Srq` | [`Srq`] (CREATE_RMP at ISSI 1, CREATE_SRQ at ISSI 0: a linked ring of `2^n > max_wr` WQEs) |
//! | `Ah` | [`Ah`] (a prepared datagram segment) |
//! | `CompChannel` | [`CompChannel`] (an EQ the caller polls) |
//!
//! QP sizes (`create_qp`): a send WQE is sized for the largest of `max_send_sge` data
//! segments and `max_inline_data` inline bytes after the QP type's headers (RC: control +
//! remote address, at least the 64-byte atomic WQE; UD: control + datagram), rounded up to
//! WQEBBs; the SQ holds `max_send_wr` of those, rounded up to a power of two. The RQ stride is
//! `max_recv_sge` × 16 rounded up to a power of two. The actual values are reported back.
//! All of this sizing (and that of `create_srq`, `create_cq`, `reg_mr`) is checked arithmetic:
//! a size whose computation would overflow is EINVAL, in release builds as in debug ones.
//! Capabilities the sizes are bounded by were validated at probe (an impossible one is
//! [`Error::BadOutput`], EIO).

use alloc::vec::Vec;

use firmware_interface::cmds::{query_nic_vport_context_out, query_roce_address_in};
use firmware_interface::ctx::{nic_vport_context, qpc, roce_addr_layout};
use firmware_interface::{cmds::query_roce_address_out, opcode, wqe};
use nic_hal::{Platform, RegisterIo};
use verbs::{
    AccessFlags, AhAttr, AsyncEvent, AtomicCap, Buffer, CqEvent, DestroyError, DeviceAttr, Gid,
    LinkLayer, MemRegion, PortAttr, PortState, PostError, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpType, RecvWr, SendWr, WorkCompletion,
};

use crate::ah::{Ah, roce_udp_sport};
use crate::caps::PortType;
use crate::channel::CompChannel;
use crate::cq::Cq;
use crate::device::{Device, cmd_in};
use crate::error::Error;
use crate::mkey::{Mkey, MkeyAccess};
use crate::qp::{
    AddressPath, Mtu, Qp, QpAccess, QpCreate, QpModify, QpState, ServiceType, Transition,
};
use crate::srq::Srq;
use crate::wq::{max_wqe_bytes, sq_limits, sq_overhead};

/// A protection domain.
#[derive(Debug, PartialEq, Eq)]
pub struct Pd {
    pdn: u32,
}

impl Pd {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }
}

/// A registered memory region.
///
/// It holds the [`Buffer`] it was registered over until [`dereg_mr`](verbs::Provider::dereg_mr)
/// succeeded. Dropped any other way (never deregistered, or a failed deregistration that did
/// not hand it back) it leaks the buffer: the device may still reach the memory through the
/// key, so the memory must never be freed and reused.
#[derive(Debug, PartialEq, Eq)]
pub struct Mr {
    mkey: Mkey,
    mem: Option<Buffer>,
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Some(b) = self.mem.take() {
            // The key may still be live in the device: keep the memory forever.
            core::mem::forget(b);
        }
    }
}

impl verbs::MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        self.mkey.lkey()
    }
    fn rkey(&self) -> u32 {
        self.mkey.rkey()
    }
    fn addr(&self) -> u64 {
        self.mkey.iova()
    }
    fn length(&self) -> u64 {
        self.mkey.len()
    }
    fn buffer(&self) -> Option<&Buffer> {
        self.mem.as_ref()
    }
}

impl verbs::CompletionQueue for Cq {
    fn cqe(&self) -> u32 {
        self.entries() - 1
    }
    fn cqn(&self) -> u32 {
        Cq::cqn(self)
    }
    fn cq_context(&self) -> u64 {
        Cq::cq_context(self)
    }
}

/// The verbs state of a driver QP state.
pub(crate) fn verbs_state(s: QpState) -> verbs::QpState {
    match s {
        QpState::Reset => verbs::QpState::Reset,
        QpState::Init => verbs::QpState::Init,
        QpState::Rtr => verbs::QpState::Rtr,
        QpState::Rts => verbs::QpState::Rts,
        QpState::SqError => verbs::QpState::Sqe,
        QpState::SqDrained | QpState::SqDraining => verbs::QpState::Sqd,
        QpState::Error | QpState::Suspended => verbs::QpState::Err,
    }
}

impl Qp {
    /// Actual queue sizes (what `create_qp` reports).
    pub fn cap(&self) -> QpCap {
        let ud = self.service().is_datagram();
        let data = (self.sq.max_sge * 16).max((self.sq.max_inline + 4).next_multiple_of(16));
        let bytes = (sq_overhead(ud) + data).max(64);
        let bbs = bytes.div_ceil(64).max(1);
        let on_srq = self.srq.is_some();
        QpCap {
            max_send_wr: self.sq.wqe_cnt / bbs,
            max_recv_wr: if on_srq { 0 } else { self.rq.wqe_cnt },
            max_send_sge: self.sq.max_sge,
            max_recv_sge: if on_srq { 0 } else { self.rq.max_sge },
            max_inline_data: self.sq.max_inline,
        }
    }
}

impl verbs::QueuePair for Qp {
    fn qp_num(&self) -> u32 {
        self.qpn()
    }
    fn qp_type(&self) -> QpType {
        match self.service() {
            ServiceType::Rc => QpType::Rc,
            ServiceType::Ud => QpType::Ud,
            ServiceType::Gsi => QpType::Gsi,
        }
    }
    fn state(&self) -> verbs::QpState {
        verbs_state(Qp::state(self))
    }
    fn cap(&self) -> QpCap {
        Qp::cap(self)
    }
}

fn mtu(m: verbs::Mtu) -> Mtu {
    match m {
        verbs::Mtu::Mtu256 => Mtu::Mtu256,
        verbs::Mtu::Mtu512 => Mtu::Mtu512,
        verbs::Mtu::Mtu1024 => Mtu::Mtu1024,
        verbs::Mtu::Mtu2048 => Mtu::Mtu2048,
        verbs::Mtu::Mtu4096 => Mtu::Mtu4096,
    }
}

fn qp_access(a: AccessFlags) -> QpAccess {
    let mut r = QpAccess::NONE;
    if a.contains(AccessFlags::REMOTE_WRITE) {
        r = r | QpAccess::REMOTE_WRITE;
    }
    if a.contains(AccessFlags::REMOTE_READ) {
        r = r | QpAccess::REMOTE_READ;
    }
    if a.contains(AccessFlags::REMOTE_ATOMIC) {
        r = r | QpAccess::REMOTE_ATOMIC;
    }
    r
}

/// Copies the attributes `mask` names from `a` into `s`.
fn merge(s: &mut QpAttr, a: &QpAttr, mask: M) {
    let has = |b| mask.contains(b);
    if has(M::STATE) {
        s.qp_state = a.qp_state;
    }
    if has(M::ACCESS_FLAGS) {
        s.qp_access_flags = a.qp_access_flags;
    }
    if has(M::PKEY_INDEX) {
        s.pkey_index = a.pkey_index;
    }
    if has(M::PORT) {
        s.port_num = a.port_num;
    }
    if has(M::QKEY) {
        s.qkey = a.qkey;
    }
    if has(M::AV) {
        s.ah_attr = a.ah_attr;
    }
    if has(M::PATH_MTU) {
        s.path_mtu = a.path_mtu;
    }
    if has(M::TIMEOUT) {
        s.timeout = a.timeout;
    }
    if has(M::RETRY_CNT) {
        s.retry_cnt = a.retry_cnt;
    }
    if has(M::RNR_RETRY) {
        s.rnr_retry = a.rnr_retry;
    }
    if has(M::RQ_PSN) {
        s.rq_psn = a.rq_psn;
    }
    if has(M::MAX_QP_RD_ATOMIC) {
        s.max_rd_atomic = a.max_rd_atomic;
    }
    if has(M::MIN_RNR_TIMER) {
        s.min_rnr_timer = a.min_rnr_timer;
    }
    if has(M::SQ_PSN) {
        s.sq_psn = a.sq_psn;
    }
    if has(M::MAX_DEST_RD_ATOMIC) {
        s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(M::DEST_QPN) {
        s.dest_qp_num = a.dest_qp_num;
    }
}

/// The driver's modify parameters for the verbs attributes `s`, naming in `opt_param_mask`
/// the attributes of `optional` (the transition's optional attributes the caller gave).
fn modify_params(s: &QpAttr, optional: M) -> QpModify {
    let mask = optional;
    let ah = &s.ah_attr;
    let mut opt = 0;
    if mask.contains(M::ACCESS_FLAGS) {
        opt |= qpc::optpar::RRE | qpc::optpar::RWE | qpc::optpar::RAE;
    }
    if mask.contains(M::PKEY_INDEX) {
        opt |= qpc::optpar::PKEY_INDEX;
    }
    if mask.contains(M::QKEY) {
        opt |= qpc::optpar::Q_KEY;
    }
    if mask.contains(M::MIN_RNR_TIMER) {
        opt |= qpc::optpar::RNR_TIMEOUT;
    }
    QpModify {
        port: s.port_num,
        pkey_index: s.pkey_index,
        qkey: s.qkey,
        access: qp_access(s.qp_access_flags),
        mtu: mtu(s.path_mtu),
        remote_qpn: s.dest_qp_num,
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        path: AddressPath {
            rgid: ah.dgid.0,
            rmac: ah.dmac,
            src_gid_index: ah.sgid_index,
            hop_limit: ah.hop_limit,
            traffic_class: ah.traffic_class,
            flow_label: ah.flow_label,
            udp_sport: roce_udp_sport(ah.flow_label),
            sl: ah.sl,
            dlid: ah.dlid,
            grh: ah.is_global,
            stat_rate: ah.static_rate,
            ack_timeout: s.timeout,
        },
        retry_count: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        min_rnr_nak: s.min_rnr_timer,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        opt_param_mask: opt,
    }
}

/// A verbs destroy error from a driver one.
fn destroy_err<T>(e: Error, obj: Option<T>) -> DestroyError<T> {
    DestroyError {
        error: e.into(),
        object: obj,
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// The Ethernet MTU of the port's vport (QUERY_NIC_VPORT_CONTEXT).
    pub fn vport_mtu(&self) -> Result<u16, Error> {
        if self.caps.port_type != PortType::Ethernet {
            return Err(Error::NotSupported);
        }
        let out = self.cmd(
            &cmd_in(opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            query_nic_vport_context_out::SIZE,
        )?;
        Ok(nic_vport_context::MTU
            .at(query_nic_vport_context_out::NIC_VPORT_CONTEXT.byte_off())
            .get(&out) as u16)
    }

    /// RoCE GID table entry `index` (QUERY_ROCE_ADDRESS); zero when unset.
    pub fn roce_gid(&self, index: u16) -> Result<[u8; 16], Error> {
        if self.caps.port_type != PortType::Ethernet {
            return Err(Error::NotSupported);
        }
        if self.caps.roce_address_table_size != 0 && index >= self.caps.roce_address_table_size {
            return Err(Error::InvalidArgument);
        }
        let mut inp = cmd_in(opcode::QUERY_ROCE_ADDRESS, 0, query_roce_address_in::SIZE);
        query_roce_address_in::ROCE_ADDRESS_INDEX.set(&mut inp, index as u32);
        if self.caps.num_vhca_ports > 0 {
            query_roce_address_in::VHCA_PORT_NUM.set(&mut inp, 1);
        }
        let out = self.cmd(&inp, query_roce_address_out::SIZE)?;
        let mut gid = [0u8; 16];
        if let Some(src) = roce_addr_layout::SOURCE_L3_ADDRESS
            .at(query_roce_address_out::ROCE_ADDRESS.byte_off())
            .slice(&out)
        {
            gid.copy_from_slice(src);
        }
        Ok(gid)
    }

    fn port_ok(&self, port: u8) -> Result<(), verbs::Error> {
        if port == 0 || port > self.caps.num_ports {
            return Err(verbs::Error::InvalidArgument);
        }
        Ok(())
    }
}

/// The largest power of two not above `n` (0 for 0).
fn prev_power_of_two(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// `reg_mr_raw` with the driver's error (the safe `reg_mr` needs to know whether the
    /// device may hold the key after a failure).
    ///
    /// # Safety
    ///
    /// As [`verbs::Provider::reg_mr_raw`]: the memory stays allocated, mapped and unused by
    /// anything else until the key's deregistration succeeded, forever if none does.
    unsafe fn register(
        &self,
        pd: &Pd,
        mem: &MemRegion<'_>,
        access: AccessFlags,
    ) -> Result<Mr, Error> {
        if !AccessFlags::all().contains(access) {
            return Err(Error::InvalidArgument);
        }
        let mut a = MkeyAccess::LOCAL_READ;
        for (v, m) in [
            (AccessFlags::LOCAL_WRITE, MkeyAccess::LOCAL_WRITE),
            (AccessFlags::REMOTE_WRITE, MkeyAccess::REMOTE_WRITE),
            (AccessFlags::REMOTE_READ, MkeyAccess::REMOTE_READ),
            (AccessFlags::REMOTE_ATOMIC, MkeyAccess::REMOTE_ATOMIC),
        ] {
            if access.contains(v) {
                a |= m;
            }
        }
        let end = mem
            .addr
            .checked_add(mem.length)
            .ok_or(Error::InvalidArgument)?;
        let contiguous: Vec<u64>;
        let pages = if mem.pages.is_empty() {
            let first = mem.addr & !0xfff;
            let n = end.div_ceil(4096).saturating_sub(first / 4096);
            // More pages than one mkey translates: refused before the list is built (a
            // length near 2^64 would otherwise ask for an impossible allocation).
            if mem.length == 0 || n > crate::mkey::MAX_MTT as u64 {
                return Err(Error::InvalidArgument);
            }
            contiguous = (0..n).map(|i| first + i * 4096).collect();
            &contiguous[..]
        } else {
            mem.pages
        };
        // SAFETY: the caller's contract (`reg_mr_raw`'s) is `create_mkey`'s: the memory stays
        // valid until `dereg_mr` (= `destroy_mkey`) succeeded.
        let mkey = unsafe { self.create_mkey(pd.pdn, mem.addr, mem.length, a, pages)? };
        Ok(Mr { mkey, mem: None })
    }
}

impl<R: RegisterIo, P: Platform> verbs::Provider for Device<R, P> {
    type Pd = Pd;
    type Mr = Mr;
    type Cq = Cq;
    type Qp = Qp;
    type Srq = Srq;
    type Ah = Ah;
    type CompChannel = CompChannel;

    /// The limits are the ones `create_qp`, `create_srq` and `modify_qp` apply to the
    /// capabilities (so what is reported is accepted), where Linux' mlx5 derives them from the
    /// same fields:
    ///
    /// * `max_sge` / `max_inline_data`: what a send WQE of the largest size
    ///   (`max_wqe_sz_sq`, at most 16 WQEBBs and 63 units) holds after the headers of every QP
    ///   type (UD's datagram segment is the largest), and what a receive WQE of the largest
    ///   power-of-two stride within `max_wqe_sz_rq` holds;
    /// * `max_sge_rd`: an RDMA read's scatter list after the control and remote address
    ///   segments (RC);
    /// * `max_qp_rd_atom` / `max_qp_init_rd_atom`: `2^log_max_ra_res_qp` /
    ///   `2^log_max_ra_req_qp`, at most 128 (the QP context's 3-bit log fields);
    /// * `atomic_cap`: HCA when the `atomic` capability is set (ConnectX atomics are atomic
    ///   among the device's own accesses);
    /// * SRQs: `2^log_max_srq` (none when 0) of up to `2^log_max_srq_sz - 1` work requests
    ///   (one WQE stays free), `max_wqe_sz_rq` stride less the next-WQE segment;
    /// * `fw_ver`: `major.minor.subminor` as `ibv_devinfo` prints an mlx5's
    ///   (`%d.%d.%04d`).
    fn query_device(&self) -> Result<DeviceAttr, verbs::Error> {
        use core::fmt::Write;
        let c = &self.caps;
        let (maj, min, sub) = self.fw_version();
        let mut fw_ver = verbs::FwVersion::default();
        // Three numbers of at most 5 digits each always fit.
        write!(fw_ver, "{maj}.{min}.{sub:04}").map_err(|_| verbs::Error::InvalidArgument)?;
        let sq_bytes = max_wqe_bytes(c.max_wqe_sz_sq, 16);
        // UD has the largest headers: its limits hold for every QP type.
        let (max_send_sge, max_inline_data) = sq_limits(sq_bytes, true);
        let (max_sge_rd, _) = sq_limits(sq_bytes, false);
        // The largest power-of-two receive stride (`create_qp`, `create_srq`).
        let rq_stride = prev_power_of_two((c.max_wqe_sz_rq as u32).min(16 << 7));
        let max_recv_sge = rq_stride / 16;
        let (max_srq, max_srq_wr, max_srq_sge) = if c.log_max_srq == 0 {
            (0, 0, 0)
        } else {
            (
                1u32 << c.log_max_srq.min(24),
                (1u32 << c.log_max_srq_sz.min(15)) - 1,
                rq_stride.saturating_sub(wqe::SrqNextSeg::SIZE as u32) / 16,
            )
        };
        Ok(DeviceAttr {
            fw_ver,
            vendor_id: self.config.vendor_id as u32,
            vendor_part_id: self.config.device_id as u32,
            max_qp: 1u32 << c.log_max_qp.min(24),
            max_qp_wr: 1u32 << c.log_max_qp_sz.min(15),
            max_sge: max_send_sge.min(max_recv_sge),
            max_sge_rd,
            max_inline_data,
            max_cq: 1u32 << c.log_max_cq.min(24),
            max_cqe: (1u32 << c.log_max_cq_sz.min(24)) - 1,
            max_mr: 1u32 << c.log_max_mkey.min(24),
            max_pd: 1u32 << c.log_max_pd.min(24),
            max_qp_rd_atom: 1u32 << c.log_max_ra_res_qp.min(7),
            max_qp_init_rd_atom: 1u32 << c.log_max_ra_req_qp.min(7),
            atomic_cap: if c.atomic {
                AtomicCap::Hca
            } else {
                AtomicCap::None
            },
            max_srq,
            max_srq_wr,
            max_srq_sge,
            phys_port_cnt: c.num_ports,
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, verbs::Error> {
        self.port_ok(port)?;
        let c = &self.caps;
        let state = if self.port_up()? {
            PortState::Active
        } else {
            PortState::Down
        };
        let max_msg_sz = if c.log_max_msg >= 32 {
            u32::MAX
        } else {
            1u32 << c.log_max_msg
        };
        Ok(match c.port_type {
            PortType::Ethernet => {
                let eth = self.vport_mtu()? as u32;
                PortAttr {
                    state,
                    max_mtu: verbs::Mtu::Mtu4096,
                    active_mtu: verbs::Mtu::for_ethernet(eth).unwrap_or(verbs::Mtu::Mtu1024),
                    gid_tbl_len: c.roce_address_table_size as u32,
                    max_msg_sz,
                    pkey_tbl_len: 1,
                    lid: 0,
                    link_layer: LinkLayer::Ethernet,
                }
            }
            PortType::InfiniBand => PortAttr {
                state,
                max_mtu: verbs::Mtu::Mtu4096,
                active_mtu: verbs::Mtu::Mtu4096,
                gid_tbl_len: c.gid_table_size as u32,
                max_msg_sz,
                pkey_tbl_len: c.pkey_table_size,
                lid: 0,
                link_layer: LinkLayer::InfiniBand,
            },
        })
    }

    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, verbs::Error> {
        self.port_ok(port)?;
        Ok(Gid(self.roce_gid(index)?))
    }

    fn alloc_pd(&self) -> Result<Pd, verbs::Error> {
        Ok(Pd {
            pdn: Device::alloc_pd(self)?,
        })
    }

    fn dealloc_pd(&self, pd: Pd) -> Result<(), DestroyError<Pd>> {
        Device::dealloc_pd(self, pd.pdn).map_err(|e| {
            let keep = !crate::device_may_hold(&e);
            destroy_err(e, keep.then_some(pd))
        })
    }

    fn alloc_buf(&self, len: usize) -> Result<Buffer, verbs::Error> {
        let buf = nic_hal::DmaBuf::new(self.dma(), len, 4096).map_err(Error::from)?;
        Ok(Buffer::new(buf))
    }

    fn map_buf(&self, mem: &'static mut [u8]) -> Result<Buffer, verbs::Error> {
        match nic_hal::StaticDma::map(self.dma(), mem) {
            Ok(m) => Ok(Buffer::new(m)),
            Err(nic_hal::DmaError::InvalidRequest) => Err(verbs::Error::InvalidArgument),
            // DMA that cannot map memory it did not allocate (or an IOMMU refusal)
            Err(nic_hal::DmaError::MapFailed) => Err(verbs::Error::NotSupported),
            Err(e) => Err(Error::from(e).into()),
        }
    }

    fn reg_mr(&self, pd: &Pd, mem: Buffer, access: AccessFlags) -> Result<Mr, verbs::Error> {
        if mem.address_space() != crate::mem::address_space(self.dma()) {
            return Err(verbs::Error::InvalidArgument);
        }
        // SAFETY: the Mr holds `mem` until `dereg_mr` succeeded, and leaks it otherwise (its
        // Drop), so the memory stays allocated and mapped (`DmaMemory`'s contract) for as
        // long as the key may be live; it is in this device's address space (checked above).
        // A registration whose outcome is unknown (the device may have made the key) leaks
        // `mem` below.
        match unsafe { self.register(pd, &mem.region(), access) } {
            Ok(mut mr) => {
                mr.mem = Some(mem);
                Ok(mr)
            }
            Err(e) => {
                if crate::device_may_hold(&e) {
                    // The key may exist and reach the memory: never freed.
                    core::mem::forget(mem);
                }
                Err(e.into())
            }
        }
    }

    unsafe fn reg_mr_raw(
        &self,
        pd: &Pd,
        mem: &MemRegion<'_>,
        access: AccessFlags,
    ) -> Result<Mr, verbs::Error> {
        // SAFETY: the caller's contract is `register`'s.
        Ok(unsafe { self.register(pd, mem, access) }?)
    }

    fn dereg_mr(&self, mut mr: Mr) -> Result<(), DestroyError<Mr>> {
        match self.destroy_mkey(mr.mkey) {
            Ok(()) => {
                // The device no longer reaches the memory: its handle may go.
                drop(mr.mem.take());
                Ok(())
            }
            Err(e) => {
                // Handed back: the Mr keeps its memory. Not handed back: dropping it leaks the
                // memory (`Mr`'s Drop).
                let keep = !crate::device_may_hold(&e);
                Err(destroy_err(e, keep.then_some(mr)))
            }
        }
    }

    fn create_comp_channel(&self) -> Result<CompChannel, verbs::Error> {
        Ok(Device::create_comp_channel(self)?)
    }

    fn destroy_comp_channel(&self, ch: CompChannel) -> Result<(), DestroyError<CompChannel>> {
        Device::destroy_comp_channel(self, ch).map_err(|(e, o)| destroy_err(e, o))
    }

    fn get_cq_event(&self, ch: &mut CompChannel) -> Result<Option<CqEvent>, verbs::Error> {
        Ok(Device::get_cq_event(self, ch)?)
    }

    fn wait_cq_event(
        &self,
        ch: &mut CompChannel,
        timeout_ns: u64,
    ) -> Result<Option<CqEvent>, verbs::Error> {
        Ok(Device::wait_cq_event(self, ch, timeout_ns)?)
    }

    fn wait_cq_events(
        &self,
        channels: &mut [&mut CompChannel],
        timeout_ns: u64,
    ) -> Result<Option<(usize, CqEvent)>, verbs::Error> {
        Ok(Device::wait_cq_events(self, channels, timeout_ns)?)
    }

    fn create_cq(
        &self,
        cqe: u32,
        cq_context: u64,
        channel: Option<&CompChannel>,
    ) -> Result<Cq, verbs::Error> {
        let max = 1u32 << self.caps.log_max_cq_sz.min(24);
        if cqe == 0 || cqe >= max {
            return Err(verbs::Error::InvalidArgument);
        }
        let log = (cqe + 1).next_power_of_two().trailing_zeros() as u8;
        Ok(self.create_cq_on(log.max(1), cq_context, channel)?)
    }

    fn destroy_cq(&self, cq: Cq) -> Result<(), DestroyError<Cq>> {
        self.destroy_cq_keep(cq).map_err(|(e, o)| destroy_err(e, o))
    }

    #[inline]
    fn poll_cq(&self, cq: &Cq, wc: &mut [WorkCompletion]) -> Result<usize, verbs::Error> {
        Ok(cq.poll(wc)?)
    }

    fn req_notify_cq(&self, cq: &Cq, solicited_only: bool) -> Result<(), verbs::Error> {
        Ok(Device::req_notify_cq(self, cq, solicited_only)?)
    }

    fn create_qp(
        &self,
        pd: &Pd,
        attr: &QpInitAttr<'_, Cq, Srq>,
    ) -> Result<(Qp, QpCap), verbs::Error> {
        let caps = &self.caps;
        let service = match attr.qp_type {
            QpType::Rc => ServiceType::Rc,
            QpType::Ud => ServiceType::Ud,
            QpType::Gsi => ServiceType::Gsi,
            // SRD is EFA's; a ConnectX has no such transport. Any type added later is not
            // one this driver implements either.
            _ => return Err(verbs::Error::NotSupported),
        };
        let ud = service.is_datagram();
        let c = attr.cap;
        let log_max = caps.log_max_qp_sz.min(15);
        let max_wr = 1u32 << log_max;
        let inval = verbs::Error::InvalidArgument;
        // CQs (and the SRQ, checked by `create_qp_srq`) of this device only.
        if attr.send_cq.core.dev_uid != self.uid || attr.recv_cq.core.dev_uid != self.uid {
            return Err(inval);
        }
        // On an SRQ the receive sizes do not apply.
        let c = if attr.srq.is_some() {
            QpCap {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..c
            }
        } else {
            c
        };
        if c.max_send_wr > max_wr || c.max_recv_wr > max_wr {
            return Err(inval);
        }
        // Every step is checked arithmetic: a size that overflows is EINVAL (in release builds
        // as in debug ones), never a wrapped, smaller queue.
        // Send WQE size: headers + the larger of the gather list and the inline data.
        let inline = if c.max_inline_data > 0 {
            c.max_inline_data
                .checked_add(4)
                .and_then(|n| n.checked_next_multiple_of(16))
                .ok_or(inval)?
        } else {
            0
        };
        let data = c.max_send_sge.checked_mul(16).ok_or(inval)?.max(inline);
        let need = sq_overhead(ud).checked_add(data).ok_or(inval)?;
        // The largest WQE (≤ 63 16-byte units, `max_wqe_sz_sq`, 16 WQEBBs).
        let max_wqe = max_wqe_bytes(caps.max_wqe_sz_sq, 16);
        if need > max_wqe {
            return Err(inval);
        }
        // ≤ 1008 bytes here: no overflow.
        let bytes = need.max(64).next_multiple_of(64);
        let bbs = bytes / 64;
        let sq_cnt = c
            .max_send_wr
            .max(1)
            .checked_mul(bbs)
            .and_then(u32::checked_next_power_of_two)
            .ok_or(inval)?;
        let log_sq = sq_cnt.trailing_zeros();
        // Receive WQE stride.
        let stride = c
            .max_recv_sge
            .max(1)
            .checked_mul(16)
            .and_then(u32::checked_next_power_of_two)
            .ok_or(inval)?;
        if stride > caps.max_wqe_sz_rq as u32 || stride > 16 << 7 {
            return Err(inval);
        }
        // At least 64 bytes of RQ (it precedes the SQ in the buffer); stride ≤ 2 KiB here.
        let rq_cnt = c
            .max_recv_wr
            .max(1)
            .checked_next_power_of_two()
            .ok_or(inval)?
            .max(64 / stride.min(64));
        let log_rq = rq_cnt.trailing_zeros();
        if log_sq > log_max as u32 || log_rq > log_max as u32 {
            return Err(inval);
        }
        // BlueFlame needs a register no other QP rings: a UAR of its own.
        let own_uar = if self.config.blueflame && caps.bf {
            self.alloc_uar().ok()
        } else {
            None
        };
        let create = QpCreate {
            service,
            pd: pd.pdn,
            send_cqn: attr.send_cq.cqn(),
            recv_cqn: attr.recv_cq.cqn(),
            log_sq_size: log_sq as u8,
            log_rq_size: log_rq as u8,
            log_rq_stride: (stride.trailing_zeros() - 4) as u8,
            uar: own_uar,
            blueflame: own_uar.is_some(),
        };
        let made = match attr.srq {
            Some(srq) => Device::create_qp_srq(
                self,
                &QpCreate {
                    log_rq_size: 0,
                    log_rq_stride: 0,
                    ..create
                },
                srq,
            ),
            None => Device::create_qp(self, &create),
        };
        let mut qp = match made {
            Ok(qp) => qp,
            Err(e) => {
                if let Some(u) = own_uar {
                    let _ = self.dealloc_uar(u);
                }
                return Err(e.into());
            }
        };
        qp.own_uar = own_uar;
        let (max_sge, max_inline) = sq_limits(bytes.min(max_wqe), ud);
        qp.sq.set_limits(max_sge, max_inline);
        qp.set_sq_sig_all(attr.sq_sig_all);
        if let Err(e) = self.attach_qp(&mut qp, attr.send_cq, attr.recv_cq) {
            let _ = Device::destroy_qp(self, qp);
            return Err(e.into());
        }
        let cap = qp.cap();
        qp.attr.cap = cap;
        Ok((qp, cap))
    }

    fn modify_qp(&self, qp: &mut Qp, attr: &QpAttr, mask: M) -> Result<(), verbs::Error> {
        let qp_type = verbs::QueuePair::qp_type(qp);
        let cur = verbs_state(qp.state());
        let next = verbs::check_modify(qp_type, cur, attr, mask)?;
        if mask.intersects(M::ALT_PATH | M::PATH_MIG_STATE | M::EN_SQD_ASYNC_NOTIFY) {
            return Err(verbs::Error::NotSupported);
        }
        let from = if mask.contains(M::CUR_STATE) {
            attr.cur_qp_state
        } else {
            cur
        };
        use verbs::QpState as S;
        let transition = match (from, next) {
            (_, S::Reset) => {
                if from == S::Reset {
                    return Ok(());
                }
                Transition::ToRst
            }
            (_, S::Err) => Transition::ToErr,
            (S::Reset, S::Init) => Transition::Rst2Init,
            (S::Init, S::Rtr) => Transition::Init2Rtr,
            (S::Rtr, S::Rts) => Transition::Rtr2Rts,
            (S::Rts, S::Rts) => Transition::Rts2Rts,
            _ => return Err(verbs::Error::NotSupported),
        };
        let mut shadow = qp.attr;
        merge(&mut shadow, attr, mask);
        if transition == Transition::ToRst {
            // RESET forgets the attributes (the cap stays).
            shadow = QpAttr {
                cap: shadow.cap,
                ..QpAttr::default()
            };
        }
        // Only the transition's optional attributes are opt-params (a required one is a plain
        // field of the command).
        let optional = verbs::transition_params(qp_type, from, next)
            .map_or(M::empty(), |t| t.optional.intersection(mask));
        let params = modify_params(&shadow, optional);
        Device::modify_qp(self, qp, transition, &params)?;
        shadow.qp_state = next;
        shadow.cur_qp_state = next;
        qp.attr = shadow;
        Ok(())
    }

    fn query_qp(&self, qp: &Qp) -> Result<QpAttr, verbs::Error> {
        let q = Device::query_qp(self, qp)?;
        let mut a = qp.attr;
        a.qp_state = verbs_state(q.state);
        a.cur_qp_state = a.qp_state;
        a.sq_psn = q.next_send_psn;
        a.rq_psn = q.next_rcv_psn;
        a.cap = qp.cap();
        Ok(a)
    }

    fn destroy_qp(&self, qp: Qp) -> Result<(), DestroyError<Qp>> {
        self.destroy_qp_keep(qp).map_err(|(e, o)| destroy_err(e, o))
    }

    #[inline]
    fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) -> Result<(), PostError> {
        Device::post_send(self, qp, wrs).map_err(|(e, i)| PostError {
            error: e.into(),
            bad_wr: i,
        })
    }

    fn create_srq(&self, pd: &Pd, attr: &verbs::SrqAttr) -> Result<Srq, verbs::Error> {
        Ok(Device::create_srq(self, pd.pdn, attr)?)
    }

    fn destroy_srq(&self, srq: Srq) -> Result<(), DestroyError<Srq>> {
        Device::destroy_srq(self, srq).map_err(|(e, o)| destroy_err(e, o))
    }

    fn post_srq_recv(&self, srq: &Srq, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        Device::post_srq_recv(self, srq, wrs).map_err(|(e, i)| PostError {
            error: e.into(),
            bad_wr: i,
        })
    }

    #[inline]
    fn post_recv(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        Device::post_recv(self, qp, wrs).map_err(|(e, i)| PostError {
            error: e.into(),
            bad_wr: i,
        })
    }

    fn create_ah(&self, pd: &Pd, attr: &AhAttr) -> Result<Ah, verbs::Error> {
        Ok(Device::create_ah(self, pd.pdn, attr)?)
    }

    fn destroy_ah(&self, _ah: Ah) -> Result<(), DestroyError<Ah>> {
        Ok(())
    }

    fn get_async_event(&self) -> Result<Option<AsyncEvent>, verbs::Error> {
        Ok(Device::get_async_event(self)?)
    }

    fn wait_async_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>, verbs::Error> {
        Ok(Device::wait_async_event(self, timeout_ns)?)
    }
}
