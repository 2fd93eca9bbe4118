//! Shared receive queues: CREATE_SRQ / DESTROY_SRQ at ISSI 0, and the receive memory pools
//! that are SRQs at ISSI 1 (CREATE_RMP / MODIFY_RMP / QUERY_RMP / DESTROY_RMP), as Linux's
//! mlx5 driver makes them (`srq_cmd.c`: SRQ commands without ISSI, RMP commands with it).
//! Each family is refused with BAD_OP at the other ISSI, so a driver that negotiated ISSI 1
//! cannot fall back to the SRQ commands unnoticed.
//!
//! Both check the context as firmware does: a ready state, a size within `log_max_srq_sz`, a
//! WQE stride within `max_wqe_sz_rq` that holds the next segment and at least one data
//! segment, an existing PD, a mapped doorbell record and PAS list. The RMP's work queue must
//! be a linked list (`wq_type` 0: each WQE starts with a next segment, the SRQ format);
//! `log_wq_stride` is the log2 of the stride in bytes, where the SRQ context's
//! `log_rq_stride` counts 16-byte units. XRC fields (`xrcd`, `cqn`), WQE signatures,
//! `cont_srq`, `rlky`, end padding, cyclic RMPs and `page_offset` are features this device
//! does not offer (BAD_PARAM / UNSUPPORTED). A destroy refuses a queue a QP still receives
//! from (BAD_RES_STATE / OBJECT_IN_USE). MODIFY_RMP changes the limit watermark (`lwm`, the
//! only field its bitmask selects here), arming the SRQ_RQ_LIMIT event again.

use firmware_interface::ctx::{cmd_hca_cap as g, rmpc, srqc, wq};
use firmware_interface::{Field, cmd_status as st, cmds, wqe};

use super::{CmdResult, Fail, IN_USE, Input, bad_param, fail, no_object, out};
use crate::connectx::objects::Srq;
use crate::{Device, syndrome as syn};

fn cap(d: &Device, f: Field) -> u32 {
    f.get(&d.hca.cap_cur.general)
}

/// The SRQ commands exist at ISSI 0 only, the RMP commands at ISSI 1 only.
fn need_issi(d: &Device, rmp: bool) -> Result<(), Fail> {
    if (d.hca.issi >= 1) != rmp {
        return Err(fail(st::BAD_OP, syn::BAD_OPCODE));
    }
    Ok(())
}

/// What both families check: size, stride (`16 << log_stride16` bytes), PD, doorbell record
/// and PAS list. Returns the SRQ object.
#[allow(clippy::too_many_arguments)]
fn new_srq(
    d: &mut Device,
    input: &Input<'_>,
    log_size: u32,
    log_stride16: u32,
    pd: u32,
    dbr_addr: u64,
    log_page_size: u32,
    page_offset: u32,
    lwm: u32,
) -> Result<Srq, Fail> {
    if log_size > cap(d, g::LOG_MAX_SRQ_SZ) {
        return Err(bad_param(syn::BAD_LOG_SIZE));
    }
    let stride = 16u64 << log_stride16.min(16);
    // The next segment and at least one data segment.
    if stride > u64::from(cap(d, g::MAX_WQE_SZ_RQ))
        || stride < (wqe::SrqNextSeg::SIZE + wqe::DataSeg::SIZE) as u64
    {
        return Err(bad_param(syn::BAD_WQE_SIZE));
    }
    if !d.obj.pds.contains(pd) {
        return Err(bad_param(syn::BAD_PD));
    }
    if lwm >= 1 << log_size {
        return Err(bad_param(syn::BAD_LWM));
    }
    d.check_dbr(dbr_addr)?;
    let bytes = stride << log_size;
    let pas = d.read_pas(input, bytes, log_page_size, page_offset)?;
    Ok(Srq {
        pd,
        log_size: log_size as u8,
        log_stride: log_stride16 as u8,
        dbr_addr,
        log_page_size: log_page_size as u8,
        pas,
        lwm: lwm as u16,
        dp: Default::default(),
    })
}

fn alloc(d: &mut Device, srq: Srq) -> Result<u32, Fail> {
    d.obj
        .srqs
        .alloc(srq)
        .ok_or(fail(st::NO_RES, syn::TABLE_FULL))
}

fn destroy(d: &mut Device, n: u32) -> Result<(), Fail> {
    if !d.obj.srqs.contains(n) {
        return Err(no_object(d.obj.srqs.in_range(n)));
    }
    if d.obj.qps.values().any(|q| q.srqn == Some(n)) {
        return Err(IN_USE);
    }
    d.obj.srqs.remove(n);
    Ok(())
}

pub(super) fn create_srq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_srq_in as i;
    need_issi(d, false)?;
    let base = i::SRQ_CONTEXT_ENTRY.byte_off();
    let c = |f: Field| input.get(f.at(base));
    if c(srqc::STATE) != srqc::STATE_GOOD {
        return Err(bad_param(syn::BAD_INITIAL_STATE));
    }
    if c(srqc::WQ_SIGNATURE) != 0
        || c(srqc::CONT_SRQ) != 0
        || c(srqc::RLKY) != 0
        || c(srqc::XRCD) != 0
        || c(srqc::CQN) != 0
    {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let srq = new_srq(
        d,
        input,
        c(srqc::LOG_SRQ_SIZE),
        c(srqc::LOG_RQ_STRIDE),
        c(srqc::PD),
        input.get64(srqc::DBR_ADDR.at(base)),
        c(srqc::LOG_PAGE_SIZE),
        c(srqc::PAGE_OFFSET),
        c(srqc::LWM),
    )?;
    let srqn = alloc(d, srq)?;
    let mut r = out(cmds::create_srq_out::SIZE);
    cmds::create_srq_out::SRQN.set(&mut r, srqn);
    Ok(r)
}

pub(super) fn destroy_srq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    need_issi(d, false)?;
    destroy(d, input.get(cmds::destroy_srq_in::SRQN))?;
    Ok(out(cmds::destroy_srq_out::SIZE))
}

pub(super) fn create_rmp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_rmp_in as i;
    need_issi(d, true)?;
    let ctx = i::CTX.byte_off();
    let w = ctx + rmpc::WQ.byte_off();
    let c = |f: Field| input.get(f.at(ctx));
    let q = |f: Field| input.get(f.at(w));
    if c(rmpc::STATE) != rmpc::STATE_RDY {
        return Err(bad_param(syn::BAD_INITIAL_STATE));
    }
    if c(rmpc::BASIC_CYCLIC_RCV_WQE) != 0
        || q(wq::WQ_TYPE) != wq::TYPE_LINKED_LIST
        || q(wq::WQ_SIGNATURE) != 0
        || q(wq::END_PADDING_MODE) != 0
        || q(wq::CD_SLAVE) != 0
        || q(wq::UAR_PAGE) != 0
    {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    // Bytes of a stride: at least 16 to be expressible in the SRQ's 16-byte units.
    let log_stride = q(wq::LOG_WQ_STRIDE);
    if log_stride < 4 {
        return Err(bad_param(syn::BAD_WQE_SIZE));
    }
    let srq = new_srq(
        d,
        input,
        q(wq::LOG_WQ_SZ),
        log_stride - 4,
        q(wq::PD),
        input.get64(wq::DBR_ADDR.at(w)),
        q(wq::LOG_WQ_PG_SZ),
        q(wq::PAGE_OFFSET),
        q(wq::LWM),
    )?;
    let rmpn = alloc(d, srq)?;
    let mut r = out(cmds::create_rmp_out::SIZE);
    cmds::create_rmp_out::RMPN.set(&mut r, rmpn);
    Ok(r)
}

pub(super) fn modify_rmp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::modify_rmp_in as i;
    need_issi(d, true)?;
    let rmpn = input.get(i::RMPN);
    let Some(log_size) = d.obj.srqs.get(rmpn).map(|s| s.log_size) else {
        return Err(no_object(d.obj.srqs.in_range(rmpn)));
    };
    let ctx = i::CTX.byte_off();
    let w = ctx + rmpc::WQ.byte_off();
    // Ready to ready: the only state an RMP here has.
    if input.get(i::RMP_STATE) != rmpc::STATE_RDY
        || input.get(rmpc::STATE.at(ctx)) != rmpc::STATE_RDY
    {
        return Err(bad_param(syn::BAD_STATE_TRANSITION));
    }
    // The bitmask (0x10..0x18) selects `lwm` and nothing else.
    let others = input.get64(Field::bytes(0x10, 8)) & !1;
    if others != 0 {
        return Err(bad_param(syn::BAD_FIELD_SELECT));
    }
    if input.get(i::BITMASK_LWM) != 0 {
        let lwm = input.get(wq::LWM.at(w));
        if lwm >= 1 << log_size {
            return Err(bad_param(syn::BAD_LWM));
        }
        if let Some(s) = d.obj.srqs.get_mut(rmpn) {
            s.lwm = lwm as u16;
        }
    }
    Ok(out(cmds::modify_rmp_out::SIZE))
}

pub(super) fn query_rmp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_rmp_out as o;
    need_issi(d, true)?;
    let rmpn = input.get(cmds::query_rmp_in::RMPN);
    let Some(s) = d.obj.srqs.get(rmpn) else {
        return Err(no_object(d.obj.srqs.in_range(rmpn)));
    };
    // The PAS entries the output has room for.
    let room = input.outlen.saturating_sub(o::PAS.byte_off()) / 8;
    let n = s.pas.len().min(room);
    let mut r = out(o::SIZE + 8 * n);
    let ctx = o::RMP_CONTEXT.byte_off();
    let w = ctx + rmpc::WQ.byte_off();
    rmpc::STATE.at(ctx).set(&mut r, rmpc::STATE_RDY);
    wq::WQ_TYPE.at(w).set(&mut r, wq::TYPE_LINKED_LIST);
    wq::LWM.at(w).set(&mut r, u32::from(s.lwm));
    wq::PD.at(w).set(&mut r, s.pd);
    wq::DBR_ADDR.at(w).set64(&mut r, s.dbr_addr);
    wq::HW_COUNTER.at(w).set(&mut r, u32::from(s.dp.ci));
    wq::LOG_WQ_STRIDE
        .at(w)
        .set(&mut r, u32::from(s.log_stride) + 4);
    wq::LOG_WQ_PG_SZ
        .at(w)
        .set(&mut r, u32::from(s.log_page_size));
    wq::LOG_WQ_SZ.at(w).set(&mut r, u32::from(s.log_size));
    for (k, a) in s.pas.iter().take(n).enumerate() {
        let at = o::PAS.byte_off() + 8 * k;
        r[at..at + 8].copy_from_slice(&a.to_be_bytes());
    }
    Ok(r)
}

pub(super) fn destroy_rmp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    need_issi(d, true)?;
    destroy(d, input.get(cmds::destroy_rmp_in::RMPN))?;
    Ok(out(cmds::destroy_rmp_out::SIZE))
}
