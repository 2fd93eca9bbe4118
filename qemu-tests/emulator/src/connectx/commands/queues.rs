//! CREATE/DESTROY of event queues and completion queues.

use firmware_interface::ctx::{cmd_hca_cap as g, cqc, eqc};
use firmware_interface::{cmds, eqe};

use super::{CmdResult, IN_USE, Input, bad_param, no_object, out};
use crate::connectx::objects::{Cq, Eq};
use crate::{Device, syndrome as syn};

/// Largest log2 queue size accepted whatever the profile says (keeps shifts in range).
const MAX_LOG_QUEUE: u32 = 24;

fn cap(d: &Device, f: firmware_interface::Field) -> u32 {
    f.get(&d.hca.cap_cur.general)
}

pub(super) fn create_eq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_eq_in as i;
    let c = |f: firmware_interface::Field| input.get(f.at(i::EQ_CONTEXT_ENTRY.byte_off()));
    let log_size = c(eqc::LOG_EQ_SIZE);
    if log_size > cap(d, g::LOG_MAX_EQ_SZ).min(MAX_LOG_QUEUE) {
        return Err(bad_param(syn::BAD_LOG_SIZE));
    }
    if c(eqc::EC) != 0 {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let uar = c(eqc::UAR_PAGE);
    if !d.obj.uars.contains(uar) {
        return Err(bad_param(syn::BAD_UAR));
    }
    let intr = c(eqc::INTR);
    if intr >= u32::from(d.profile.msix_vectors) {
        return Err(bad_param(syn::BAD_VECTOR));
    }
    let log_page_size = c(eqc::LOG_PAGE_SIZE);
    let bytes = (eqe::SIZE as u64) << log_size;
    let pas = d.read_pas(input, bytes, log_page_size, c(eqc::PAGE_OFFSET))?;
    let mut mask = [0u64; 4];
    for (k, m) in mask.iter_mut().enumerate() {
        *m = input.entry64(i::EVENT_BITMASK.byte_off(), k);
    }
    let eq = Eq {
        log_size: log_size as u8,
        uar,
        log_page_size: log_page_size as u8,
        pas,
        mask,
        intr: intr as u16,
        oi: c(eqc::OI) != 0,
        pi: 0,
        ci: 0,
        armed: false,
        overrun: false,
    };
    let eqn = d.obj.eqs.alloc(eq).ok_or(super::fail(
        firmware_interface::cmd_status::NO_RES,
        syn::TABLE_FULL,
    ))?;
    let mut r = out(cmds::create_eq_out::SIZE);
    cmds::create_eq_out::EQ_NUMBER.set(&mut r, eqn);
    Ok(r)
}

pub(super) fn destroy_eq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let eqn = input.get(cmds::destroy_eq_in::EQ_NUMBER);
    if !d.obj.eqs.contains(eqn) {
        return Err(no_object(d.obj.eqs.in_range(eqn)));
    }
    if d.obj.cqs.values().any(|cq| cq.eqn == eqn) {
        return Err(IN_USE);
    }
    d.obj.eqs.remove(eqn);
    Ok(out(cmds::destroy_eq_out::SIZE))
}

pub(super) fn create_cq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_cq_in as i;
    let base = i::CQ_CONTEXT.byte_off();
    let c = |f: firmware_interface::Field| input.get(f.at(base));
    let cqe_sz = c(cqc::CQE_SZ);
    if cqe_sz != cqc::CQE_SZ_64 && cqe_sz != cqc::CQE_SZ_128 {
        return Err(bad_param(syn::BAD_CQE_SIZE));
    }
    let log_size = c(cqc::LOG_CQ_SIZE);
    if log_size > cap(d, g::LOG_MAX_CQ_SZ).min(MAX_LOG_QUEUE) {
        return Err(bad_param(syn::BAD_LOG_SIZE));
    }
    // Features this device does not advertise.
    if c(cqc::CC) != 0
        || c(cqc::CQE_COMP_EN) != 0
        || c(cqc::APU_CQ) != 0
        || c(cqc::DBR_UMEM_VALID) != 0
        || input.get(i::CQ_UMEM_VALID) != 0
        || c(cqc::CQ_PERIOD) != 0
        || c(cqc::CQ_MAX_COUNT) != 0
        || c(cqc::SCQE_BREAK_MODERATION_EN) != 0
    {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let uar = c(cqc::UAR_PAGE);
    if !d.obj.uars.contains(uar) {
        return Err(bad_param(syn::BAD_UAR));
    }
    let eqn = c(cqc::C_EQN_OR_APU_ELEMENT);
    if !d.obj.eqs.contains(eqn) {
        return Err(bad_param(syn::BAD_EQ));
    }
    let dbr_addr = input.get64(cqc::DBR_ADDR.at(base));
    d.check_dbr(dbr_addr)?;
    let log_page_size = c(cqc::LOG_PAGE_SIZE);
    let bytes = (64u64 << cqe_sz) << log_size;
    let pas = d.read_pas(input, bytes, log_page_size, c(cqc::PAGE_OFFSET))?;
    let cq = Cq {
        log_size: log_size as u8,
        cqe_sz: cqe_sz as u8,
        uar,
        eqn,
        dbr_addr,
        log_page_size: log_page_size as u8,
        pas,
        oi: c(cqc::OI) != 0,
        dp: Default::default(),
    };
    let cqn = d.obj.cqs.alloc(cq).ok_or(super::fail(
        firmware_interface::cmd_status::NO_RES,
        syn::TABLE_FULL,
    ))?;
    let mut r = out(cmds::create_cq_out::SIZE);
    cmds::create_cq_out::CQN.set(&mut r, cqn);
    Ok(r)
}

pub(super) fn destroy_cq(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let cqn = input.get(cmds::destroy_cq_in::CQN);
    if !d.obj.cqs.contains(cqn) {
        return Err(no_object(d.obj.cqs.in_range(cqn)));
    }
    if d.obj
        .qps
        .values()
        .any(|q| q.cqn_snd == Some(cqn) || q.cqn_rcv == Some(cqn))
    {
        return Err(IN_USE);
    }
    d.obj.cqs.remove(cqn);
    Ok(out(cmds::destroy_cq_out::SIZE))
}
