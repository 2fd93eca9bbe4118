//! The verbs provider: [`verbs::Provider`] for [`Device`].
//!
//! | verbs | EFA |
//! |---|---|
//! | `Pd` | [`Pd`] (ALLOC_PD) |
//! | `Mr` | [`Mr`] (REG_MR over 4 KiB pages: up to 4 inline, up to 510 in one page-list buffer, more in a chain of 4 KiB chunks) |
//! | `Cq` | [`Cq`] (CREATE_CQ: `sub_cqs_per_cq` sub-CQs of `2^n ≥ cqe` entries in one DMA ring; 32-byte entries when the device has RDMA write, else 16) |
//! | `Qp` | [`Qp`] (CREATE_QP, UD or SRD; RC and every other type: EOPNOTSUPP) |
//! | `Srq` | [`Srq`]: cannot be made (EOPNOTSUPP) |
//! | `CompChannel` | [`CompChannel`] (CREATE_EQ: an EQ of its own; its CQs are created with interrupts enabled and armed through their doorbell, see the `events` module) |
//! | `Ah` | [`Ah`] (CREATE_AH for the destination GID) |
//!
//! QP sizes (`create_qp`): the SQ is a low-latency queue of `2^n ≥ max(max_send_wr,
//! min_sq_depth)` 64-byte WQEs (at most `max_sq_depth` and `max_llq_size` bytes); the RQ a
//! host ring of `2^n ≥ max_recv_wr × max_recv_sge` 16-byte descriptors. All sizing is checked
//! arithmetic: a size that does not fit the device's limits, or whose computation would
//! overflow, is EINVAL.

use alloc::vec::Vec;
use core::convert::Infallible;

use firmware_interface::Le32;
use firmware_interface::efa::admin::{self, CtrlBuffInfo};
use firmware_interface::efa::cmds::*;
use firmware_interface::efa::feature::device_attr as d;
use firmware_interface::efa::opcode as op;
use firmware_interface::efa::pci;
use nic_hal::{Platform, RegisterIo};
use verbs::{
    AccessFlags, AhAttr, AsyncEvent, AtomicCap, Buffer, CqEvent, DestroyError, DeviceAttr, Gid,
    LinkLayer, MemRegion, PortAttr, PortState, PostError, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, SendWr, SrqAttr, WorkCompletion,
};

use crate::Error;
use crate::device::{Device, release_unless_unknown};
use crate::dp::{CqShared, QpCore, QpDp, SqParams};
use crate::events::{CompChannel, CqNotify};
use crate::mem::{Shared, address_space};

const ENTRY: usize = admin::ENTRY_SIZE;
/// [`Qp::llq_fast`] of a QP with 128-byte WQEs: an offset whose LLQ (of at least 64 bytes)
/// would end past 4 GiB, which the memory BAR never maps (`create_qp` checks it).
pub(crate) const NO_FAST_LLQ: u32 = u32::MAX;
const PAGE: u64 = 4096;
/// Size of an RX descriptor.
const RX_DESC: u32 = 16;

/// A protection domain.
#[derive(Debug, PartialEq, Eq)]
pub struct Pd {
    pdn: u16,
}

impl Pd {
    /// The PD number.
    pub fn pdn(&self) -> u16 {
        self.pdn
    }
}

/// A registered memory region. It holds the [`Buffer`] it was registered over until
/// `dereg_mr` succeeded; dropped any other way it leaks it (the key may still be live).
#[derive(Debug, PartialEq, Eq)]
pub struct Mr {
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    pages: u32,
    mem: Option<Buffer>,
}

impl Mr {
    /// Pages the registration names.
    pub fn page_count(&self) -> u32 {
        self.pages
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Some(b) = self.mem.take() {
            core::mem::forget(b);
        }
    }
}

impl verbs::MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn length(&self) -> u64 {
        self.len
    }
    fn buffer(&self) -> Option<&Buffer> {
        self.mem.as_ref()
    }
}

/// A completion queue: its ring of sub-CQs in DMA memory (leaked when dropped without a
/// successful destroy).
#[derive(Debug)]
pub struct Cq {
    idx: u16,
    depth: u32,
    entry_size: u32,
    sub_cqs: u16,
    db_offset: Option<u32>,
    context: u64,
    ring: Option<Shared>,
    shared: alloc::sync::Arc<CqShared>,
    /// The channel's part and the CQ's event state, for a CQ on a channel.
    channel: Option<(
        alloc::sync::Arc<crate::events::ChannelShared>,
        alloc::sync::Arc<CqNotify>,
    )>,
}

impl Cq {
    pub(crate) fn shared(&self) -> &CqShared {
        &self.shared
    }

    pub(crate) fn notify(&self) -> Option<&CqNotify> {
        self.channel.as_ref().map(|c| &*c.1)
    }

    /// The EQ of the CQ's completion events (a CQ on a completion channel).
    pub fn eqn(&self) -> Option<u16> {
        self.channel.as_ref().map(|c| c.0.eqn)
    }

    /// Completion events of this CQ consumed so far (the CQ doorbell's `cmd_sn` is the low
    /// two bits); 0 for a CQ not on a channel.
    pub fn events(&self) -> u32 {
        self.notify()
            .map_or(0, |n| n.events.load(core::sync::atomic::Ordering::Relaxed))
    }

    /// Entries of each sub-CQ.
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// Entry size in bytes.
    pub fn entry_size(&self) -> u32 {
        self.entry_size
    }
    /// Sub-CQs in the ring.
    pub fn sub_cqs(&self) -> u16 {
        self.sub_cqs
    }
    /// Offset of the CQ doorbell in the doorbell BAR (when the device gave one).
    pub fn db_offset(&self) -> Option<u32> {
        self.db_offset
    }
    /// Device address of the ring.
    pub fn ring_addr(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.iova())
    }
}

impl verbs::CompletionQueue for Cq {
    fn cqe(&self) -> u32 {
        self.depth
    }
    fn cqn(&self) -> u32 {
        self.idx.into()
    }
    fn cq_context(&self) -> u64 {
        self.context
    }
}

/// A UD or SRD queue pair: its receive ring in DMA memory (leaked when dropped without a
/// successful destroy); the send queue lives in the device's memory BAR.
#[derive(Debug)]
pub struct Qp {
    handle: u32,
    qpn: u16,
    pub(crate) qp_type: QpType,
    pub(crate) state: QpState,
    pub(crate) cap: QpCap,
    /// Attributes as last set (what `query_qp` reports beside the device's state and PSN).
    pub(crate) attr: QpAttr,
    send_sub_cq: u16,
    recv_sub_cq: u16,
    pub(crate) sq_db_offset: u32,
    pub(crate) rq_db_offset: u32,
    pub(crate) llq_offset: u32,
    /// Where `post_send`'s 64-byte path looks for the LLQ's mapping: `llq_offset` for 64-byte
    /// WQEs; [`NO_FAST_LLQ`] for 128-byte WQEs, which thus take the unmapped branch and from
    /// there the 128-byte one (the WQE size costs the 64-byte fast path nothing).
    pub(crate) llq_fast: u32,
    rq: Option<Shared>,
    pub(crate) dp: QpDp,
}

impl Qp {
    /// The device's handle of the QP.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// Sub-CQ indices of send and receive completions.
    pub fn sub_cqs(&self) -> (u16, u16) {
        (self.send_sub_cq, self.recv_sub_cq)
    }
    /// SQ and RQ doorbell offsets in the doorbell BAR.
    pub fn db_offsets(&self) -> (u32, u32) {
        (self.sq_db_offset, self.rq_db_offset)
    }
    /// Offset of the SQ (low-latency queue) in the memory BAR.
    pub fn llq_offset(&self) -> u32 {
        self.llq_offset
    }
}

impl verbs::QueuePair for Qp {
    fn qp_num(&self) -> u32 {
        self.qpn.into()
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn state(&self) -> QpState {
        self.state
    }
    fn cap(&self) -> QpCap {
        self.cap
    }
}

/// An address handle.
#[derive(Debug, PartialEq, Eq)]
pub struct Ah {
    ah: u16,
    pd: u16,
    dgid: Gid,
}

impl Ah {
    /// The device's handle (what a TX WQE names).
    pub fn handle(&self) -> u16 {
        self.ah
    }
    /// The destination.
    pub fn dgid(&self) -> Gid {
        self.dgid
    }
}

/// A shared receive queue: EFA has none, so none is ever made.
#[derive(Debug)]
pub struct Srq(Infallible);

impl verbs::SharedReceiveQueue for Srq {
    fn srq_num(&self) -> u32 {
        match self.0 {}
    }
    fn attr(&self) -> SrqAttr {
        match self.0 {}
    }
}

fn state_of(v: u32) -> Option<QpState> {
    Some(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

/// A destroy that failed: the object comes back when the device refused the command (it still
/// exists), is lost otherwise (outcome unknown; its memory leaks with it).
fn destroy_err<T>(e: Error, obj: T) -> DestroyError<T> {
    match e {
        Error::Admin { .. } | Error::AdminDown => DestroyError::keep(e.into(), obj),
        _ => {
            drop(obj);
            DestroyError::lost(e.into())
        }
    }
}

fn bad(opcode: u8, field: &'static str, value: u64) -> Error {
    Error::BadOutput {
        opcode,
        field,
        value,
    }
}

/// A page list of `pages` addresses as REG_MR carries it.
enum PageList {
    /// In the command.
    Inline,
    /// One buffer (flags: ctrl_data).
    Direct(Shared),
    /// A chain of 4 KiB chunks (flags: ctrl_data | ctrl_data_indirect).
    Chained(Vec<Shared>),
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    fn port_ok(port: u8) -> Result<(), verbs::Error> {
        if port != 1 {
            return Err(verbs::Error::InvalidArgument);
        }
        Ok(())
    }

    /// Writes `pages` into REG_MR command `c`: inline up to 4, one buffer up to a chunk's
    /// worth (510), chained 4 KiB chunks beyond (`docs/efa.md#queue-mechanics`). Returns the
    /// submission flags and the buffers to keep until the command completed.
    fn page_list(&self, c: &mut [u8; ENTRY], pages: &[u64]) -> Result<(u8, PageList), Error> {
        let ctrl = |c: &mut [u8; ENTRY], len: usize, addr: u64| {
            let b = CtrlBuffInfo {
                length: Le32::new(len as u32),
                addr_lo: Le32::new(addr as u32),
                addr_hi: Le32::new((addr >> 32) as u32),
            };
            b.write_to(&mut c[reg_mr_cmd::PBL_CTRL_OFF..]);
        };
        if pages.len() <= reg_mr_cmd::INLINE_PBL_ENTRIES {
            for (i, p) in pages.iter().enumerate() {
                c[8 + 8 * i..16 + 8 * i].copy_from_slice(&p.to_le_bytes());
            }
            return Ok((0, PageList::Inline));
        }
        let raw = |list: &[u64]| -> Vec<u8> { list.iter().flat_map(|p| p.to_le_bytes()).collect() };
        if pages.len() <= admin::PBL_CHUNK_ENTRIES {
            let len = pages.len() * 8;
            let buf = Shared::new(&self.dma, len, 8)?;
            buf.write(0, &raw(pages))?;
            ctrl(c, len, buf.iova());
            return Ok((admin::AQ_FLAG_CTRL_DATA, PageList::Direct(buf)));
        }
        let chunks: Vec<&[u64]> = pages.chunks(admin::PBL_CHUNK_ENTRIES).collect();
        let mut bufs: Vec<Shared> = Vec::with_capacity(chunks.len());
        for _ in &chunks {
            match Shared::new(&self.dma, admin::PBL_CHUNK_SIZE, admin::PBL_CHUNK_SIZE) {
                Ok(b) => bufs.push(b),
                Err(e) => {
                    bufs.into_iter().for_each(Shared::release);
                    return Err(e.into());
                }
            }
        }
        let used = |i: usize| {
            chunks[i].len() * 8
                + if i + 1 < chunks.len() {
                    CtrlBuffInfo::SIZE
                } else {
                    0
                }
        };
        for (i, list) in chunks.iter().enumerate() {
            let mut img = raw(list);
            if let Some(next) = bufs.get(i + 1) {
                img.resize(admin::PBL_CHUNK_LINK, 0);
                let link = CtrlBuffInfo {
                    length: Le32::new(used(i + 1) as u32),
                    addr_lo: Le32::new(next.iova() as u32),
                    addr_hi: Le32::new((next.iova() >> 32) as u32),
                };
                img.extend_from_slice(&link.to_bytes());
            }
            bufs[i].write(0, &img)?;
        }
        ctrl(c, used(0), bufs[0].iova());
        Ok((
            admin::AQ_FLAG_CTRL_DATA | admin::AQ_FLAG_CTRL_DATA_INDIRECT,
            PageList::Chained(bufs),
        ))
    }

    /// REG_MR of `mem` (checked: length, access, page count); the memory region holds no
    /// buffer yet.
    fn register(&self, pd: &Pd, mem: &MemRegion<'_>, access: AccessFlags) -> Result<Mr, Error> {
        if !AccessFlags::all().contains(access) {
            return Err(Error::InvalidArgument);
        }
        let a = &self.attrs;
        let mut supported = AccessFlags::LOCAL_WRITE;
        if a.has(d::CAP_RDMA_READ) {
            supported |= AccessFlags::REMOTE_READ;
        }
        if a.has(d::CAP_RDMA_WRITE) {
            supported |= AccessFlags::REMOTE_WRITE;
        }
        if !supported.contains(access) {
            return Err(Error::NotSupported);
        }
        if a.page_size_cap & PAGE == 0 {
            return Err(Error::NotSupported);
        }
        let end = mem
            .addr
            .checked_add(mem.length)
            .ok_or(Error::InvalidArgument)?;
        if mem.length == 0 {
            return Err(Error::InvalidArgument);
        }
        let first = mem.addr & !(PAGE - 1);
        let n = end.div_ceil(PAGE) - first / PAGE;
        if n > u64::from(a.max_mr_pages) || n > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument);
        }
        let contiguous: Vec<u64>;
        let pages = if mem.pages.is_empty() {
            contiguous = (0..n).map(|i| first + i * PAGE).collect();
            &contiguous[..]
        } else {
            if mem.pages.len() as u64 != n || mem.pages.iter().any(|p| p % PAGE != 0) {
                return Err(Error::InvalidArgument);
            }
            mem.pages
        };
        let mut c = [0u8; ENTRY];
        use reg_mr_cmd as m;
        m::PD.set(&mut c, pd.pdn.into());
        m::MR_LENGTH.set64(&mut c, mem.length);
        m::PHYS_PAGE_SIZE_SHIFT.set(&mut c, PAGE.trailing_zeros());
        m::LOCAL_WRITE.set(&mut c, access.contains(AccessFlags::LOCAL_WRITE).into());
        m::REMOTE_WRITE.set(&mut c, access.contains(AccessFlags::REMOTE_WRITE).into());
        m::REMOTE_READ.set(&mut c, access.contains(AccessFlags::REMOTE_READ).into());
        m::PAGE_NUM.set(&mut c, n as u32);
        m::IOVA.set64(&mut c, mem.addr);
        let (flags, list) = self.page_list(&mut c, pages)?;
        let res = self.exec(op::REG_MR, flags, &c);
        match list {
            PageList::Inline => {}
            PageList::Direct(b) => release_unless_unknown(b, &res),
            PageList::Chained(v) => v.into_iter().for_each(|b| release_unless_unknown(b, &res)),
        }
        let out = res?;
        Ok(Mr {
            lkey: reg_mr_resp::L_KEY.get(&out),
            rkey: reg_mr_resp::R_KEY.get(&out),
            addr: mem.addr,
            len: mem.length,
            pages: n as u32,
            mem: None,
        })
    }

    /// Best-effort destroy of an object whose creation answered with output the driver
    /// refuses; `true` when the device destroyed it.
    fn undo(&self, opcode: u8, field: firmware_interface::LeField, handle: u32) -> bool {
        let mut c = [0u8; ENTRY];
        field.set(&mut c, handle);
        self.exec(opcode, 0, &c).is_ok()
    }

    fn create_cq_inner(
        &self,
        cqe: u32,
        context: u64,
        channel: Option<&CompChannel>,
    ) -> Result<Cq, Error> {
        let a = &self.attrs;
        if let Some(ch) = channel
            && ch.cqs() >= ch.shared().max_cqs
        {
            return Err(Error::NoMemory);
        }
        if cqe == 0 || cqe > a.max_cq_depth {
            return Err(Error::InvalidArgument);
        }
        let depth = cqe
            .checked_next_power_of_two()
            .ok_or(Error::InvalidArgument)?;
        if depth > a.max_cq_depth || depth > u32::from(u16::MAX) {
            return Err(Error::InvalidArgument);
        }
        let entry: u32 = if a.has(d::CAP_RDMA_WRITE) { 32 } else { 16 };
        let len = (entry as usize)
            .checked_mul(depth as usize)
            .and_then(|n| n.checked_mul(a.sub_cqs_per_cq.into()))
            .and_then(|n| n.checked_next_multiple_of(PAGE as usize))
            .ok_or(Error::InvalidArgument)?;
        let ring = Shared::new(&self.dma, len, PAGE as usize)?;
        let mut c = [0u8; ENTRY];
        use create_cq_cmd as m;
        m::CQ_ENTRY_SIZE_WORDS.set(&mut c, entry / 4);
        m::CQ_DEPTH.set(&mut c, depth);
        m::CQ_BA_LO.set(&mut c, ring.iova() as u32);
        m::CQ_BA_HI.set(&mut c, (ring.iova() >> 32) as u32);
        m::NUM_SUB_CQS.set(&mut c, a.sub_cqs_per_cq.into());
        m::UAR.set(&mut c, self.uar.into());
        if let Some(ch) = channel {
            m::INTERRUPT_MODE_ENABLED.set(&mut c, 1);
            m::EQN.set(&mut c, ch.eqn().into());
        }
        let out = match self.exec(op::CREATE_CQ, 0, &c) {
            Ok(o) => o,
            Err(e) => {
                release_unless_unknown(ring, &Err::<(), _>(e));
                return Err(e);
            }
        };
        let idx = create_cq_resp::CQ_IDX.get(&out) as u16;
        let actual = create_cq_resp::CQ_ACTUAL_DEPTH.get(&out);
        let db_valid = create_cq_resp::DB_VALID.get(&out) != 0;
        let db = create_cq_resp::DB_OFFSET.get(&out);
        // The ring holds `depth` entries per sub-CQ: a larger actual depth would let the
        // device write past it, a smaller one than asked is not the CQ asked for.
        let fault = if actual < cqe || actual > depth {
            Some(bad(
                op::CREATE_CQ,
                "create_cq_resp.cq_actual_depth",
                actual.into(),
            ))
        } else if db_valid && !db.is_multiple_of(4) {
            Some(bad(op::CREATE_CQ, "create_cq_resp.db_offset", db.into()))
        } else if channel.is_some() && !db_valid {
            // Arming needs the doorbell, which the device gives whenever interrupts are on.
            Some(bad(op::CREATE_CQ, "create_cq_resp.db_valid", 0))
        } else {
            None
        };
        if let Some(e) = fault {
            if self.undo(op::DESTROY_CQ, destroy_cq_cmd::CQ_IDX, idx.into()) {
                ring.release();
            }
            return Err(e);
        }
        // `actual` ≤ `depth` (checked above): the poller walks the entries the device writes.
        let Some(shared) =
            CqShared::new(&ring, actual.next_power_of_two(), entry, a.sub_cqs_per_cq)
        else {
            if self.undo(op::DESTROY_CQ, destroy_cq_cmd::CQ_IDX, idx.into()) {
                ring.release();
            }
            return Err(bad(
                op::CREATE_CQ,
                "create_cq_resp.cq_actual_depth",
                actual.into(),
            ));
        };
        let channel = channel.map(|ch| {
            let n = CqNotify::new(context);
            ch.shared().cqs.lock().insert(idx, n.clone());
            (ch.shared().clone(), n)
        });
        Ok(Cq {
            idx,
            depth: actual,
            entry_size: entry,
            sub_cqs: a.sub_cqs_per_cq,
            db_offset: db_valid.then_some(db),
            context,
            ring: Some(ring),
            shared,
            channel,
        })
    }

    fn create_qp_inner(
        &self,
        pd: &Pd,
        attr: &QpInitAttr<'_, Cq, Srq>,
    ) -> Result<(Qp, QpCap), Error> {
        let qp_type = match attr.qp_type {
            QpType::Ud => create_qp_cmd::QP_TYPE_UD,
            QpType::Srd => create_qp_cmd::QP_TYPE_SRD,
            _ => return Err(Error::NotSupported),
        };
        if attr.srq.is_some() {
            return Err(Error::NotSupported);
        }
        let a = &self.attrs;
        let cap = attr.cap;
        if cap.max_send_wr == 0
            || cap.max_send_wr > a.max_sq_depth
            || cap.max_send_sge > a.max_wr_send_sges.into()
            || cap.max_inline_data > a.max_inline_data()
            || cap.max_recv_wr > a.max_rq_depth
            || cap.max_recv_sge > a.max_wr_recv_sges.into()
            || (cap.max_recv_wr > 0 && cap.max_recv_sge == 0)
        {
            return Err(Error::InvalidArgument);
        }
        let sq_depth = cap
            .max_send_wr
            .max(a.min_sq_depth.into())
            .checked_next_power_of_two()
            .ok_or(Error::InvalidArgument)?;
        // The LLQ: `sq_depth` entries of the WQE size (128 bytes with `data_polling_128`).
        let sq_ring = sq_depth
            .checked_mul(a.tx_wqe_size())
            .ok_or(Error::InvalidArgument)?;
        // Request ids and the SQ counter are 16 bits wide.
        if sq_depth > a.max_sq_depth || sq_ring > a.max_llq_size || sq_depth > 1 << 15 {
            return Err(Error::InvalidArgument);
        }
        // A QP with 128-byte WQEs keeps off `post_send`'s 64-byte path by an LLQ offset no
        // BAR under 4 GiB maps (`Qp::llq_fast`); a BAR that maps it cannot have such QPs.
        if a.tx_wqe_size() == 128
            && self.data.as_ref().is_some_and(|b| {
                let len = sq_depth as usize * firmware_interface::efa::io::TX_WQE_SIZE;
                b.mem.mapped(NO_FAST_LLQ as usize, len).is_some()
            })
        {
            return Err(Error::NotSupported);
        }
        let (rq_depth, rq_ring) = if cap.max_recv_wr == 0 {
            (0, 0)
        } else {
            let depth = cap
                .max_recv_wr
                .checked_next_power_of_two()
                .ok_or(Error::InvalidArgument)?;
            // Room for `depth` WRs of `max_recv_sge` descriptors each.
            let descs = depth
                .checked_mul(cap.max_recv_sge)
                .and_then(u32::checked_next_power_of_two)
                .ok_or(Error::InvalidArgument)?;
            let ring = descs.checked_mul(RX_DESC).ok_or(Error::InvalidArgument)?;
            let limit =
                u64::from(a.max_rq_depth) * u64::from(RX_DESC) * u64::from(a.max_wr_recv_sges);
            // The RQ doorbell counts descriptors in 16 bits.
            if depth > a.max_rq_depth || u64::from(ring) > limit || descs > 1 << 15 {
                return Err(Error::InvalidArgument);
            }
            (depth, ring)
        };
        let rq = if rq_ring > 0 {
            let len = (rq_ring as usize).next_multiple_of(PAGE as usize);
            Some(Shared::new(&self.dma, len, PAGE as usize)?)
        } else {
            None
        };
        let mut c = [0u8; ENTRY];
        use create_qp_cmd as m;
        m::PD.set(&mut c, pd.pdn.into());
        m::QP_TYPE.set(&mut c, qp_type);
        m::RQ_BASE_ADDR.set64(&mut c, rq.as_ref().map_or(0, |b| b.iova()));
        m::SEND_CQ_IDX.set(&mut c, attr.send_cq.idx.into());
        m::RECV_CQ_IDX.set(&mut c, attr.recv_cq.idx.into());
        m::SEND_QUEUE_RING_SIZE.set(&mut c, sq_ring);
        m::SEND_QUEUE_DEPTH.set(&mut c, sq_depth);
        m::RECV_QUEUE_RING_SIZE.set(&mut c, rq_ring);
        m::RECV_QUEUE_DEPTH.set(&mut c, rq_depth);
        m::UAR.set(&mut c, self.uar.into());
        let out = match self.exec(op::CREATE_QP, 0, &c) {
            Ok(o) => o,
            Err(e) => {
                if let Some(b) = rq {
                    release_unless_unknown(b, &Err::<(), _>(e));
                }
                return Err(e);
            }
        };
        use create_qp_resp as o;
        let handle = o::QP_HANDLE.get(&out);
        let send_sub = o::SEND_SUB_CQ_IDX.get(&out) as u16;
        let recv_sub = o::RECV_SUB_CQ_IDX.get(&out) as u16;
        let sq_db = o::SQ_DB_OFFSET.get(&out);
        let rq_db = o::RQ_DB_OFFSET.get(&out);
        let fault = if send_sub >= a.sub_cqs_per_cq {
            Some(("create_qp_resp.send_sub_cq_idx", send_sub.into()))
        } else if recv_sub >= a.sub_cqs_per_cq {
            Some(("create_qp_resp.recv_sub_cq_idx", recv_sub.into()))
        } else if !sq_db.is_multiple_of(4) {
            Some(("create_qp_resp.sq_db_offset", sq_db.into()))
        } else if !rq_db.is_multiple_of(4) {
            Some(("create_qp_resp.rq_db_offset", rq_db.into()))
        } else {
            None
        };
        if let Some((field, value)) = fault {
            if self.undo(op::DESTROY_QP, destroy_qp_cmd::QP_HANDLE, handle)
                && let Some(b) = rq
            {
                b.release();
            }
            return Err(bad(op::CREATE_QP, field, value));
        }
        let actual = QpCap {
            max_send_wr: sq_depth,
            max_recv_wr: rq_depth,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        };
        let qpn = o::QP_NUM.get(&out) as u16;
        let core = QpCore::new(qpn, sq_depth, rq_depth);
        let rq_descs = if rq_ring == 0 { 0 } else { rq_ring / RX_DESC };
        let sq = SqParams {
            depth: sq_depth,
            max_tx_batch: a.max_tx_batch,
            max_sge: cap.max_send_sge,
            max_inline: cap.max_inline_data.min(a.max_inline_data()),
            wide: a.tx_wqe_size() == 128,
            llq: o::LLQ_DESCRIPTORS_OFFSET.get(&out) as usize,
            mtu: a.mtu,
            read_ok: attr.qp_type == QpType::Srd && a.has(d::CAP_RDMA_READ),
            write_ok: attr.qp_type == QpType::Srd && a.has(d::CAP_RDMA_WRITE),
            sig_all: attr.sq_sig_all,
        };
        // SAFETY: the RQ ring is kept by the QP (`rq`, leak-on-drop) as long as its `dp`.
        let dp = unsafe {
            QpDp::new(
                core.clone(),
                (attr.send_cq.shared.clone(), attr.recv_cq.shared.clone()),
                sq,
                rq.as_deref(),
                rq_descs,
            )
        };
        let same = alloc::sync::Arc::ptr_eq(&attr.send_cq.shared, &attr.recv_cq.shared);
        attr.send_cq.shared.attach(&core, true, same);
        if !same {
            attr.recv_cq.shared.attach(&core, false, true);
        }
        let qp = Qp {
            handle,
            qpn,
            qp_type: attr.qp_type,
            state: QpState::Reset,
            cap: actual,
            attr: QpAttr {
                port_num: 1,
                cap: actual,
                ..QpAttr::default()
            },
            send_sub_cq: send_sub,
            recv_sub_cq: recv_sub,
            sq_db_offset: sq_db,
            rq_db_offset: rq_db,
            llq_offset: o::LLQ_DESCRIPTORS_OFFSET.get(&out),
            llq_fast: if a.tx_wqe_size() == 128 {
                NO_FAST_LLQ
            } else {
                o::LLQ_DESCRIPTORS_OFFSET.get(&out)
            },
            rq,
            dp,
        };
        Ok((qp, actual))
    }

    fn modify_qp_inner(&self, qp: &mut Qp, attr: &QpAttr, mask: M) -> Result<(), Error> {
        let next = verbs::check_modify(qp.qp_type, qp.state, attr, mask)
            .map_err(|_| Error::InvalidArgument)?;
        let cur = if mask.contains(M::CUR_STATE) {
            attr.cur_qp_state
        } else {
            qp.state
        };
        // One port, one P_Key.
        if (mask.contains(M::PORT) && attr.port_num != 1)
            || (mask.contains(M::PKEY_INDEX) && attr.pkey_index != 0)
        {
            return Err(Error::InvalidArgument);
        }
        if mask.contains(M::RNR_RETRY) && !self.attrs.has(d::CAP_RNR_RETRY) {
            return Err(Error::NotSupported);
        }
        use modify_qp_cmd as m;
        let mut c = [0u8; ENTRY];
        let mut bits = 0;
        if mask.contains(M::STATE) {
            bits |= m::MASK_QP_STATE | m::MASK_CUR_QP_STATE;
            m::QP_STATE.set(&mut c, next as u32);
            m::CUR_QP_STATE.set(&mut c, cur as u32);
        }
        if mask.contains(M::QKEY) {
            bits |= m::MASK_QKEY;
            m::QKEY.set(&mut c, attr.qkey);
        }
        if mask.contains(M::SQ_PSN) {
            bits |= m::MASK_SQ_PSN;
            m::SQ_PSN.set(&mut c, attr.sq_psn);
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            bits |= m::MASK_SQ_DRAINED_ASYNC_NOTIFY;
            m::SQ_DRAINED_ASYNC_NOTIFY.set(&mut c, attr.en_sqd_async_notify.into());
        }
        if mask.contains(M::RNR_RETRY) {
            bits |= m::MASK_RNR_RETRY;
            m::RNR_RETRY.set(&mut c, attr.rnr_retry.into());
        }
        m::MODIFY_MASK.set(&mut c, bits);
        m::QP_HANDLE.set(&mut c, qp.handle);
        self.exec(op::MODIFY_QP, 0, &c)?;
        qp.state = next;
        let s = &mut qp.attr;
        s.qp_state = next;
        if mask.contains(M::QKEY) {
            s.qkey = attr.qkey;
            qp.dp.ctx.qkey = attr.qkey;
        }
        if mask.contains(M::SQ_PSN) {
            s.sq_psn = attr.sq_psn;
        }
        if mask.contains(M::PKEY_INDEX) {
            s.pkey_index = attr.pkey_index;
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            s.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if mask.contains(M::RNR_RETRY) {
            s.rnr_retry = attr.rnr_retry;
        }
        if next == QpState::Reset {
            s.qkey = 0;
            s.sq_psn = 0;
            s.rnr_retry = 0;
            qp.dp.reset();
        }
        Ok(())
    }

    fn query_qp_inner(&self, qp: &Qp) -> Result<QpAttr, Error> {
        let mut c = [0u8; ENTRY];
        query_qp_cmd::QP_HANDLE.set(&mut c, qp.handle);
        let out = self.exec(op::QUERY_QP, 0, &c)?;
        use query_qp_resp as o;
        let v = o::QP_STATE.get(&out);
        let state =
            state_of(v).ok_or_else(|| bad(op::QUERY_QP, "query_qp_resp.qp_state", v.into()))?;
        let mut a = qp.attr;
        a.qp_state = state;
        a.cur_qp_state = state;
        a.qkey = o::QKEY.get(&out);
        a.sq_psn = o::SQ_PSN.get(&out);
        a.rnr_retry = o::RNR_RETRY.get(&out) as u8;
        a.en_sqd_async_notify = qp.attr.en_sqd_async_notify;
        a.cap = qp.cap;
        Ok(a)
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

    /// From the device attributes: `max_qp`, `max_qp_wr` (the smaller of the deepest SQ and
    /// RQ), `max_sge` (the smaller of send and receive descriptors), `max_sge_rd` (an RDMA
    /// read's local buffers, 0 without RDMA read), `max_inline_data`, CQ, MR and PD limits;
    /// no atomics, no SRQs, one port. `fw_ver` is [`crate::Attributes::fw_version_text`].
    /// The largest RDMA operation and the capability bits are in
    /// [`Device::attributes`].
    fn query_device(&self) -> Result<DeviceAttr, verbs::Error> {
        let a = &self.attrs;
        Ok(DeviceAttr {
            fw_ver: a.fw_version_text(),
            vendor_id: pci::VENDOR_AMAZON.into(),
            vendor_part_id: self.config.device_id.into(),
            max_qp: a.max_qp,
            max_qp_wr: a.max_sq_depth.min(a.max_rq_depth),
            max_sge: u32::from(a.max_wr_send_sges.min(a.max_wr_recv_sges)),
            max_sge_rd: if a.has(d::CAP_RDMA_READ) {
                a.max_wr_rdma_sges.into()
            } else {
                0
            },
            max_inline_data: a.max_inline_data(),
            max_cq: a.max_cq,
            max_cqe: a.max_cq_depth,
            max_mr: a.max_mr,
            max_pd: a.max_pd,
            max_qp_rd_atom: 0,
            max_qp_init_rd_atom: 0,
            atomic_cap: AtomicCap::None,
            max_srq: 0,
            max_srq_wr: 0,
            max_srq_sge: 0,
            phys_port_cnt: 1,
        })
    }

    /// Port 1: active, link layer unspecified, one GID and one P_Key, messages of at most the
    /// device MTU, the verbs MTU 4096 (as Linux reports it).
    fn query_port(&self, port: u8) -> Result<PortAttr, verbs::Error> {
        Self::port_ok(port)?;
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: verbs::Mtu::Mtu4096,
            active_mtu: verbs::Mtu::Mtu4096,
            gid_tbl_len: 1,
            max_msg_sz: self.attrs.mtu,
            pkey_tbl_len: 1,
            lid: 0,
            link_layer: LinkLayer::Unspecified,
        })
    }

    /// Index 0 of port 1: the device address from NETWORK_ATTR.
    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, verbs::Error> {
        Self::port_ok(port)?;
        if index != 0 {
            return Err(verbs::Error::InvalidArgument);
        }
        Ok(Gid(self.attrs.gid))
    }

    fn alloc_pd(&self) -> Result<Pd, verbs::Error> {
        let out = self.exec(op::ALLOC_PD, 0, &[0; ENTRY])?;
        Ok(Pd {
            pdn: alloc_pd_resp::PD.get(&out) as u16,
        })
    }

    fn dealloc_pd(&self, pd: Pd) -> Result<(), DestroyError<Pd>> {
        let mut c = [0u8; ENTRY];
        dealloc_pd_cmd::PD.set(&mut c, pd.pdn.into());
        self.exec(op::DEALLOC_PD, 0, &c)
            .map(|_| ())
            .map_err(|e| destroy_err(e, pd))
    }

    fn alloc_buf(&self, len: usize) -> Result<Buffer, verbs::Error> {
        if len == 0 {
            return Err(verbs::Error::InvalidArgument);
        }
        let buf = nic_hal::DmaBuf::new(&self.dma, len, 4096).map_err(Error::from)?;
        Ok(Buffer::new(buf))
    }

    fn reg_mr(&self, pd: &Pd, mem: Buffer, access: AccessFlags) -> Result<Mr, verbs::Error> {
        if mem.is_empty() || mem.address_space() != address_space(&self.dma) {
            return Err(verbs::Error::InvalidArgument);
        }
        match self.register(pd, &mem.region(), access) {
            Ok(mut mr) => {
                mr.mem = Some(mem);
                Ok(mr)
            }
            Err(e) => {
                if matches!(e, Error::AdminTimeout { .. } | Error::BadCompletion { .. }) {
                    // The key may exist: the memory must outlive it.
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
        Ok(self.register(pd, mem, access)?)
    }

    fn dereg_mr(&self, mr: Mr) -> Result<(), DestroyError<Mr>> {
        let mut c = [0u8; ENTRY];
        dereg_mr_cmd::L_KEY.set(&mut c, mr.lkey);
        match self.exec(op::DEREG_MR, 0, &c) {
            Ok(_) => {
                let mut mr = mr;
                // The key is gone: the memory may be freed with the last handle.
                drop(mr.mem.take());
                Ok(())
            }
            Err(e) => Err(destroy_err(e, mr)),
        }
    }

    /// An EQ of its own (the `events` module); EOPNOTSUPP when the device has no EQs.
    fn create_comp_channel(&self) -> Result<CompChannel, verbs::Error> {
        Ok(self.channel_create()?)
    }

    /// DESTROY_EQ; EBUSY while CQs use the channel.
    fn destroy_comp_channel(&self, channel: CompChannel) -> Result<(), DestroyError<CompChannel>> {
        self.channel_destroy(channel)
    }

    fn get_cq_event(&self, channel: &mut CompChannel) -> Result<Option<CqEvent>, verbs::Error> {
        Ok(self.cq_event(channel)?)
    }

    /// Sleeps on the channel's vector where the platform delivers interrupts.
    fn wait_cq_event(
        &self,
        channel: &mut CompChannel,
        timeout_ns: u64,
    ) -> Result<Option<CqEvent>, verbs::Error> {
        Ok(self.wait_event(channel, timeout_ns)?)
    }

    fn wait_cq_events(
        &self,
        channels: &mut [&mut CompChannel],
        timeout_ns: u64,
    ) -> Result<Option<(usize, CqEvent)>, verbs::Error> {
        Ok(self.wait_events(channels, timeout_ns)?)
    }

    /// A CQ of `sub_cqs_per_cq` sub-CQs of `2^n ≥ cqe` entries each (EINVAL for 0 or more
    /// than `max_cqe`). With a channel, the CQ is created with interrupts enabled on the
    /// channel's EQ (ENOMEM when the channel has as many CQs as its EQ has entries).
    fn create_cq(
        &self,
        cqe: u32,
        cq_context: u64,
        channel: Option<&CompChannel>,
    ) -> Result<Cq, verbs::Error> {
        Ok(self.create_cq_inner(cqe, cq_context, channel)?)
    }

    fn destroy_cq(&self, cq: Cq) -> Result<(), DestroyError<Cq>> {
        let mut c = [0u8; ENTRY];
        destroy_cq_cmd::CQ_IDX.set(&mut c, cq.idx.into());
        match self.exec(op::DESTROY_CQ, 0, &c) {
            Ok(_) => {
                let mut cq = cq;
                if let Some(r) = cq.ring.take() {
                    r.release();
                }
                if let Some((ch, _)) = cq.channel.take() {
                    ch.cqs.lock().remove(&cq.idx);
                }
                Ok(())
            }
            Err(e) => Err(destroy_err(e, cq)),
        }
    }

    /// Completions by phase, every field checked (`dp` module); EIO for a malformed entry
    /// (after the good ones before it); EOPNOTSUPP before [`Device::attach_data_bars`].
    fn poll_cq(&self, cq: &Cq, wc: &mut [WorkCompletion]) -> Result<usize, verbs::Error> {
        if self.data.is_none() {
            return Err(verbs::Error::NotSupported);
        }
        self.poll_cq_dp(cq, wc)
    }

    /// The CQ doorbell with the arm bit (EINVAL for a CQ not on a channel; EOPNOTSUPP for
    /// `solicited_only`).
    fn req_notify_cq(&self, cq: &Cq, solicited_only: bool) -> Result<(), verbs::Error> {
        Ok(self.notify_cq(cq, solicited_only)?)
    }

    /// UD or SRD (every other type: EOPNOTSUPP; with an SRQ: EOPNOTSUPP); sizes as the
    /// module documentation says, EINVAL beyond the device's limits.
    fn create_qp(
        &self,
        pd: &Pd,
        attr: &QpInitAttr<'_, Cq, Srq>,
    ) -> Result<(Qp, QpCap), verbs::Error> {
        Ok(self.create_qp_inner(pd, attr)?)
    }

    /// The transition is checked with [`verbs::check_modify`] (EFA's SRD table for SRD); the
    /// port must be 1 and the P_Key index 0; `RNR_RETRY` needs the device's RNR-retry
    /// capability (else EOPNOTSUPP). A state change sends both the new and the current state.
    fn modify_qp(&self, qp: &mut Qp, attr: &QpAttr, mask: M) -> Result<(), verbs::Error> {
        Ok(self.modify_qp_inner(qp, attr, mask)?)
    }

    fn query_qp(&self, qp: &Qp) -> Result<QpAttr, verbs::Error> {
        Ok(self.query_qp_inner(qp)?)
    }

    fn destroy_qp(&self, qp: Qp) -> Result<(), DestroyError<Qp>> {
        let mut c = [0u8; ENTRY];
        destroy_qp_cmd::QP_HANDLE.set(&mut c, qp.handle);
        match self.exec(op::DESTROY_QP, 0, &c) {
            Ok(_) => {
                let mut qp = qp;
                qp.dp.cqs.0.detach(qp.qpn);
                qp.dp.cqs.1.detach(qp.qpn);
                if let Some(r) = qp.rq.take() {
                    r.release();
                }
                Ok(())
            }
            Err(e) => Err(destroy_err(e, qp)),
        }
    }

    /// One 64-byte WQE per WR through the low-latency queue (`dp` module). The QP must be in
    /// RTS; every WR names a destination (AH, QPN, Q_Key; bit 31 of the Q_Key: the QP's
    /// own). SEND and SEND_WITH_IMM (up to `max_send_sge` SGEs or `max_inline_data` inline
    /// bytes, at most the MTU); on SRD, RDMA READ and RDMA WRITE (also with immediate, which
    /// consumes a receive WR at the target) when the device has them (one local SGE);
    /// everything else EOPNOTSUPP. ENOMEM when the SQ is full.
    fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) -> Result<(), PostError> {
        self.post_send_dp(qp, wrs)
    }

    /// One RX descriptor per SGE (SGEs of at most 65535 bytes); ENOMEM when the RQ is full.
    fn post_recv(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_dp(qp, wrs)
    }

    fn create_srq(&self, _pd: &Pd, _attr: &SrqAttr) -> Result<Srq, verbs::Error> {
        Err(verbs::Error::NotSupported)
    }

    fn destroy_srq(&self, srq: Srq) -> Result<(), DestroyError<Srq>> {
        match srq.0 {}
    }

    fn post_srq_recv(&self, srq: &Srq, _wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        match srq.0 {}
    }

    /// An AH for `attr.dgid` (port 0 or 1; the zero GID is EINVAL). The device expects one AH
    /// per destination: sharing them is the caller's business for now.
    fn create_ah(&self, pd: &Pd, attr: &AhAttr) -> Result<Ah, verbs::Error> {
        if attr.port_num > 1 || attr.dgid.is_zero() {
            return Err(verbs::Error::InvalidArgument);
        }
        let mut c = [0u8; ENTRY];
        if let Some(s) = create_ah_cmd::DEST_ADDR.slice_mut(&mut c) {
            s.copy_from_slice(&attr.dgid.0);
        }
        create_ah_cmd::PD.set(&mut c, pd.pdn.into());
        let out = self.exec(op::CREATE_AH, 0, &c)?;
        let ah = create_ah_resp::AH.get(&out) as u16;
        // 0xffff is what an RX completion names an unknown sender by: no AH has it.
        if ah == u16::MAX {
            let mut d = [0u8; ENTRY];
            destroy_ah_cmd::AH.set(&mut d, ah.into());
            destroy_ah_cmd::PD.set(&mut d, pd.pdn.into());
            let _ = self.exec(op::DESTROY_AH, 0, &d);
            return Err(bad(op::CREATE_AH, "create_ah_resp.ah", ah.into()).into());
        }
        Ok(Ah {
            ah,
            pd: pd.pdn,
            dgid: attr.dgid,
        })
    }

    fn destroy_ah(&self, ah: Ah) -> Result<(), DestroyError<Ah>> {
        let mut c = [0u8; ENTRY];
        destroy_ah_cmd::AH.set(&mut c, ah.ah.into());
        destroy_ah_cmd::PD.set(&mut c, ah.pd.into());
        self.exec(op::DESTROY_AH, 0, &c)
            .map(|_| ())
            .map_err(|e| destroy_err(e, ah))
    }

    /// Fatal-error events of the AENQ (keep-alives are consumed and counted:
    /// [`Device::aenq_counters`]).
    fn get_async_event(&self) -> Result<Option<AsyncEvent>, verbs::Error> {
        Ok(self.next_async_event())
    }
}
