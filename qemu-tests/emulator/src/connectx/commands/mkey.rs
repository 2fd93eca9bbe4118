//! CREATE_MKEY / DESTROY_MKEY (PA and MTT access modes).

use firmware_interface::cmds;
use firmware_interface::ctx::mkc;

use super::{CmdResult, Input, bad_param, fail, no_object, out};
use crate::connectx::cmdq::MAX_MSG;
use crate::connectx::objects::Mkey;
use crate::{Device, syndrome as syn};

/// MKEY `log_page_size` (absolute) range.
const MKEY_LOG_PAGE: core::ops::RangeInclusive<u32> = 12..=30;

pub(super) fn create_mkey(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_mkey_in as i;
    let base = i::MEMORY_KEY_MKEY_ENTRY.byte_off();
    let c = |f: firmware_interface::Field| input.get(f.at(base));
    if input.get(i::PG_ACCESS) != 0
        || input.get(i::MKEY_UMEM_VALID) != 0
        || input.get(i::DATA_DIRECT) != 0
        || c(mkc::BSF_EN) != 0
        || c(mkc::SYNC_UMR) != 0
        || c(mkc::EXPECTED_SIGERR_COUNT) != 0
        || c(mkc::CROSSING_TARGET_VHCA_ID) != 0
    {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    if c(mkc::FREE) != 0 {
        return Err(bad_param(syn::MKEY_FREE));
    }
    let mode = c(mkc::ACCESS_MODE_4_2) << 2 | c(mkc::ACCESS_MODE_1_0);
    if mode != mkc::ACCESS_MODE_PA && mode != mkc::ACCESS_MODE_MTT {
        return Err(bad_param(syn::BAD_ACCESS_MODE));
    }
    if c(mkc::QPN) != mkc::QPN_NONE {
        return Err(bad_param(syn::BAD_MKEY_QPN));
    }
    let pd = c(mkc::PD);
    if !d.obj.pds.contains(pd) {
        return Err(bad_param(syn::BAD_PD));
    }
    let (a, rw, lw) = (c(mkc::A), c(mkc::RW), c(mkc::LW));
    if (a != 0 || rw != 0) && lw == 0 {
        return Err(bad_param(syn::BAD_ACCESS_FLAGS));
    }
    let access = input.msg[base + 2] & 0x7c;
    let start = input.get64(mkc::START_ADDR.at(base));
    let len = input.get64(mkc::LEN.at(base));
    let length64 = c(mkc::LENGTH64) != 0;
    let mut mtt = Vec::new();
    let mut log_page_size = 0;
    if mode == mkc::ACCESS_MODE_MTT {
        log_page_size = c(mkc::LOG_PAGE_SIZE);
        if !MKEY_LOG_PAGE.contains(&log_page_size) {
            return Err(bad_param(syn::BAD_LOG_PAGE_SIZE));
        }
        if length64 {
            return Err(bad_param(syn::MTT_TOO_SHORT));
        }
        let octwords = input.get(i::TRANSLATIONS_OCTWORD_ACTUAL_SIZE) as usize;
        let list = i::KLM_PAS_MTT.byte_off();
        if octwords > MAX_MSG / 16 || input.msg.len() < list + 16 * octwords {
            return Err(fail(
                firmware_interface::cmd_status::BAD_INPUT_LEN,
                syn::BAD_INLEN,
            ));
        }
        if (c(mkc::TRANSLATIONS_OCTWORD_SIZE) as usize) < octwords {
            return Err(bad_param(syn::MTT_TOO_SHORT));
        }
        let page = 1u64 << log_page_size;
        let span = (start & (page - 1))
            .checked_add(len)
            .ok_or(bad_param(syn::MTT_TOO_SHORT))?;
        let npages = span.div_ceil(page);
        if npages > 2 * octwords as u64 {
            return Err(bad_param(syn::MTT_TOO_SHORT));
        }
        for k in 0..npages as usize {
            let e = input.entry64(list, k);
            if e & (page - 1) != 0 {
                return Err(bad_param(syn::BAD_MTT));
            }
            mtt.push(e);
        }
    } else if !length64 && start.checked_add(len).is_none() {
        return Err(bad_param(syn::MTT_TOO_SHORT));
    }
    let key_7_0 = c(mkc::MKEY_7_0) as u8;
    let m = Mkey {
        key_7_0,
        pd,
        mode,
        start,
        len,
        length64,
        access,
        rinval: c(mkc::EN_RINVAL) != 0,
        invalidated: false,
        log_page_size: log_page_size as u8,
        contig: crate::connectx::objects::contiguous_runs(&mtt, 1u64 << log_page_size),
        mtt,
    };
    let idx = d.obj.mkeys.alloc(m).ok_or(fail(
        firmware_interface::cmd_status::NO_RES,
        syn::TABLE_FULL,
    ))?;
    let mut r = out(cmds::create_mkey_out::SIZE);
    cmds::create_mkey_out::MKEY_INDEX.set(&mut r, idx);
    Ok(r)
}

pub(super) fn destroy_mkey(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let idx = input.get(cmds::destroy_mkey_in::MKEY_INDEX);
    if d.obj.mkeys.remove(idx).is_none() {
        return Err(no_object(d.obj.mkeys.in_range(idx)));
    }
    Ok(out(cmds::destroy_mkey_out::SIZE))
}
