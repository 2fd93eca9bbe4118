//! CREATE_SRQ and DESTROY_SRQ.
//!
//! CREATE_SRQ checks the context as firmware does: state GOOD, `log_srq_size` within
//! `log_max_srq_sz`, a WQE stride within `max_wqe_sz_rq` that holds the next segment and at
//! least one data segment, an existing PD, a mapped doorbell record and PAS list; XRC fields
//! (`xrcd`, `cqn`), WQE signatures, `cont_srq`, `rlky` and `page_offset` are features this
//! device does not offer (BAD_PARAM / UNSUPPORTED). DESTROY_SRQ refuses an SRQ a QP still
//! receives from (BAD_RES_STATE / OBJECT_IN_USE).

use firmware_interface::ctx::{cmd_hca_cap as g, srqc};
use firmware_interface::{Field, cmd_status as st, cmds, wqe};

use super::{CmdResult, IN_USE, Input, bad_param, fail, no_object, out};
use crate::connectx::objects::Srq;
use crate::{Device, syndrome as syn};

fn cap(d: &Device, f: Field) -> u32 {
    f.get(&d.hca.cap_cur.general)
}

pub(super) fn create_srq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_srq_in as i;
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
    let log_size = c(srqc::LOG_SRQ_SIZE);
    if log_size > cap(d, g::LOG_MAX_SRQ_SZ) {
        return Err(bad_param(syn::BAD_LOG_SIZE));
    }
    let log_stride = c(srqc::LOG_RQ_STRIDE);
    let stride = 16u64 << log_stride;
    // The next segment and at least one data segment.
    if stride > u64::from(cap(d, g::MAX_WQE_SZ_RQ))
        || stride < (wqe::SrqNextSeg::SIZE + wqe::DataSeg::SIZE) as u64
    {
        return Err(bad_param(syn::BAD_WQE_SIZE));
    }
    let pd = c(srqc::PD);
    if !d.obj.pds.contains(pd) {
        return Err(bad_param(syn::BAD_PD));
    }
    let dbr_addr = input.get64(srqc::DBR_ADDR.at(base));
    d.check_dbr(dbr_addr)?;
    let log_page_size = c(srqc::LOG_PAGE_SIZE);
    let bytes = stride << log_size;
    let pas = d.read_pas(input, bytes, log_page_size, c(srqc::PAGE_OFFSET))?;
    let srq = Srq {
        pd,
        log_size: log_size as u8,
        log_stride: log_stride as u8,
        dbr_addr,
        log_page_size: log_page_size as u8,
        pas,
        lwm: c(srqc::LWM) as u16,
        dp: Default::default(),
    };
    let srqn = d
        .obj
        .srqs
        .alloc(srq)
        .ok_or(fail(st::NO_RES, syn::TABLE_FULL))?;
    let mut r = out(cmds::create_srq_out::SIZE);
    cmds::create_srq_out::SRQN.set(&mut r, srqn);
    Ok(r)
}

pub(super) fn destroy_srq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let srqn = input.get(cmds::destroy_srq_in::SRQN);
    if !d.obj.srqs.contains(srqn) {
        return Err(no_object(d.obj.srqs.in_range(srqn)));
    }
    if d.obj.qps.values().any(|q| q.srqn == Some(srqn)) {
        return Err(IN_USE);
    }
    d.obj.srqs.remove(srqn);
    Ok(out(cmds::destroy_srq_out::SIZE))
}
