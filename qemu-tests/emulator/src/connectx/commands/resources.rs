//! ALLOC/DEALLOC of UAR pages, protection domains and transport domains.

use firmware_interface::{cmd_status as st, cmds};

use super::{CmdResult, IN_USE, Input, fail, no_object, out};
use crate::connectx::objects::Uar;
use crate::{Device, syndrome as syn};

const FULL: super::Fail = fail(st::NO_RES, syn::TABLE_FULL);

pub(super) fn alloc_uar(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    let idx = d.obj.uars.alloc(Uar::default()).ok_or(FULL)?;
    // A fresh UAR page reads as zeros.
    let base = idx as usize * firmware_interface::uar::PAGE_SIZE;
    d.bar
        .write(base, &[0u8; firmware_interface::uar::PAGE_SIZE]);
    let mut r = out(cmds::alloc_uar_out::SIZE);
    cmds::alloc_uar_out::UAR.set(&mut r, idx);
    Ok(r)
}

pub(super) fn dealloc_uar(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let idx = input.get(cmds::dealloc_uar_in::UAR);
    if !d.obj.uars.contains(idx) {
        return Err(no_object(d.obj.uars.in_range(idx)));
    }
    let o = &d.obj;
    if o.eqs.values().any(|x| x.uar == idx)
        || o.cqs.values().any(|x| x.uar == idx)
        || o.qps.values().any(|x| x.uar == idx)
    {
        return Err(IN_USE);
    }
    d.obj.uars.remove(idx);
    Ok(out(cmds::dealloc_uar_out::SIZE))
}

pub(super) fn alloc_pd(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    let pd = d.obj.pds.alloc(()).ok_or(FULL)?;
    let mut r = out(cmds::alloc_pd_out::SIZE);
    cmds::alloc_pd_out::PD.set(&mut r, pd);
    Ok(r)
}

pub(super) fn dealloc_pd(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let pd = input.get(cmds::dealloc_pd_in::PD);
    if !d.obj.pds.contains(pd) {
        return Err(no_object(d.obj.pds.in_range(pd)));
    }
    if d.obj.mkeys.values().any(|m| m.pd == pd)
        || d.obj.qps.values().any(|q| q.pd == pd)
        || d.obj.srqs.values().any(|s| s.pd == pd)
    {
        return Err(IN_USE);
    }
    d.obj.pds.remove(pd);
    Ok(out(cmds::dealloc_pd_out::SIZE))
}

pub(super) fn alloc_td(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    let td = d.obj.tds.alloc(()).ok_or(FULL)?;
    let mut r = out(cmds::alloc_transport_domain_out::SIZE);
    cmds::alloc_transport_domain_out::TRANSPORT_DOMAIN.set(&mut r, td);
    Ok(r)
}

pub(super) fn dealloc_td(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let td = input.get(cmds::dealloc_transport_domain_in::TRANSPORT_DOMAIN);
    if d.obj.tds.remove(td).is_none() {
        return Err(no_object(d.obj.tds.in_range(td)));
    }
    Ok(out(cmds::dealloc_transport_domain_out::SIZE))
}
