//! Function-level commands: ENABLE/DISABLE_HCA, ISSI, pages, ACCESS_REG, INIT/TEARDOWN_HCA,
//! NOP, QUERY_ADAPTER, QUERY_SPECIAL_CONTEXTS.

use firmware_interface::ctx::{
    cmd_hca_cap as g, host_endianness_reg, query_adapter_param_block as qa,
};
use firmware_interface::{cmd_status as st, cmds, op_mod};

use super::{CmdResult, Input, bad_param, fail, out};
use crate::{Device, DeviceError, syndrome as syn};

/// Most pages the device holds at once.
const MAX_PAGES: usize = 1 << 20;
/// ISSI values supported (`supported_issi_dw0`): 0 and 1.
const SUPPORTED_ISSI: u32 = 0b11;
/// Mellanox IEEE OUI (QUERY_ADAPTER `ieee_vendor_id`).
const IEEE_VENDOR_ID: u32 = 0x0002c9;
/// PSID reported by QUERY_ADAPTER.
const PSID: &[u8; 16] = b"EMU0000000001\0\0\0";

/// Reserved keys (QUERY_SPECIAL_CONTEXTS): indexes above every mkey table, variant 0.
pub(crate) const DUMP_FILL_MKEY: u32 = 0xffff_fb00;
/// `resd_lkey`: the reserved lkey (physical addressing) for `rlky` QPs.
pub(crate) const RESD_LKEY: u32 = 0xffff_fc00;
/// `null_mkey`.
pub(crate) const NULL_MKEY: u32 = 0xffff_fd00;
/// `terminate_scatter_list_mkey`.
pub(crate) const TERMINATE_SCATTER_LIST_MKEY: u32 = 0xffff_fe00;
/// `repeated_mkey`.
pub(crate) const REPEATED_MKEY: u32 = 0xffff_ff00;

/// HOST_ENDIANNESS register id. TODO(fi): firmware-interface has it in `op_mod`
/// (`REG_HOST_ENDIANNESS`) rather than in a register-id module.
const REG_HOST_ENDIANNESS: u32 = op_mod::REG_HOST_ENDIANNESS as u32;

pub(super) fn enable_hca(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::enable_hca_in as i;
    if input.get(i::FUNCTION_ID) != 0 || input.get(i::EMBEDDED_CPU_FUNCTION) != 0 {
        return Err(bad_param(syn::BAD_FUNCTION_ID));
    }
    if d.hca.enabled {
        return Err(fail(st::BAD_SYS_STATE, syn::ALREADY_ENABLED));
    }
    d.hca.enabled = true;
    d.hca.torn_down = false;
    Ok(out(cmds::enable_hca_out::SIZE))
}

pub(super) fn disable_hca(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::disable_hca_in as i;
    if input.get(i::FUNCTION_ID) != 0 || input.get(i::EMBEDDED_CPU_FUNCTION) != 0 {
        return Err(bad_param(syn::BAD_FUNCTION_ID));
    }
    if d.hca.initialized {
        return Err(fail(st::BAD_SYS_STATE, syn::STILL_INITIALIZED));
    }
    let pages = d.hca.pages.len();
    if pages != 0 {
        d.error(DeviceError::DisabledWithPagesHeld {
            pages: u32::try_from(pages).unwrap_or(u32::MAX),
        });
    }
    let p = d.profile.clone();
    d.hca.reset_function(&p);
    d.obj = crate::connectx::objects::Objects::new(&p, d.bar.len());
    Ok(out(cmds::disable_hca_out::SIZE))
}

pub(super) fn query_issi(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    use cmds::query_issi_out as o;
    let mut r = out(o::SIZE);
    o::CURRENT_ISSI.set(&mut r, u32::from(d.hca.issi));
    o::SUPPORTED_ISSI_DW0.set(&mut r, SUPPORTED_ISSI);
    Ok(r)
}

pub(super) fn set_issi(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let issi = input.get(cmds::set_issi_in::CURRENT_ISSI);
    if issi > 31 || SUPPORTED_ISSI & (1 << issi) == 0 {
        return Err(bad_param(syn::BAD_ISSI));
    }
    if d.hca.initialized {
        return Err(fail(st::BAD_SYS_STATE, syn::ALREADY_INITIALIZED));
    }
    d.hca.issi = issi as u16;
    Ok(out(cmds::set_issi_out::SIZE))
}

/// Pages firmware still asks for with QUERY_PAGES(`op_mod`).
fn pages_wanted(d: &Device, op: u16) -> u64 {
    let given = d.hca.pages.len() as u64;
    let boot = u64::from(d.profile.boot_pages);
    match op {
        op_mod::PAGES_BOOT => boot.saturating_sub(given),
        op_mod::PAGES_INIT => {
            u64::from(d.profile.init_pages).saturating_sub(given.saturating_sub(boot))
        }
        _ => 0,
    }
}

pub(super) fn query_pages(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_pages_in as i;
    use cmds::query_pages_out as o;
    if input.get(i::FUNCTION_ID) != 0 || input.get(i::EMBEDDED_CPU_FUNCTION) != 0 {
        return Err(bad_param(syn::BAD_FUNCTION_ID));
    }
    let n = pages_wanted(d, input.op_mod());
    let mut r = out(o::SIZE);
    o::FUNCTION_ID.set(&mut r, 0);
    o::NUM_PAGES.set(&mut r, u32::try_from(n).unwrap_or(i32::MAX as u32));
    Ok(r)
}

pub(super) fn manage_pages(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::manage_pages_in as i;
    use cmds::manage_pages_out as o;
    if input.get(i::FUNCTION_ID) != 0 || input.get(i::EMBEDDED_CPU_FUNCTION) != 0 {
        return Err(bad_param(syn::BAD_FUNCTION_ID));
    }
    let n = input.get(i::INPUT_NUM_ENTRIES) as usize;
    let list = i::PAS.byte_off();
    match input.op_mod() {
        op_mod::MANAGE_PAGES_CANT_GIVE => Ok(out(o::SIZE)),
        op_mod::MANAGE_PAGES_GIVE => {
            if input.msg.len() < list + 8 * n {
                return Err(fail(st::BAD_INPUT_LEN, syn::BAD_INLEN));
            }
            let mut new = std::collections::BTreeSet::new();
            for k in 0..n {
                let a = input.entry64(list, k);
                if !a.is_multiple_of(4096) {
                    return Err(bad_param(syn::BAD_PAGE_ADDRESS));
                }
                if d.hca.pages.contains(&a) || !new.insert(a) {
                    return Err(bad_param(syn::DUPLICATE_PAGE));
                }
            }
            if d.hca.pages.len() + new.len() > MAX_PAGES {
                return Err(fail(st::NO_RES, syn::TOO_MANY_PAGES));
            }
            for a in &new {
                if d.probe(*a, 4096).is_err() {
                    return Err(bad_param(syn::PAGE_NOT_MAPPED));
                }
            }
            d.hca.pages.extend(new);
            Ok(out(o::SIZE))
        }
        _ => {
            // TAKE: return up to `n` pages firmware does not need any more.
            if input.outlen < o::PAS.byte_off() + 8 * n {
                return Err(fail(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN));
            }
            let need = d.hca.pages_needed(&d.profile);
            let spare = (d.hca.pages.len() as u64).saturating_sub(need) as usize;
            let k = n.min(spare);
            let mut r = out(o::PAS.byte_off() + 8 * k);
            for j in 0..k {
                let Some(a) = d.hca.pages.pop_last() else {
                    break;
                };
                let at = o::PAS.byte_off() + 8 * j;
                r[at..at + 8].copy_from_slice(&a.to_be_bytes());
            }
            o::OUTPUT_NUM_ENTRIES.set(&mut r, k as u32);
            Ok(r)
        }
    }
}

pub(super) fn access_reg(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::access_register_in as i;
    use cmds::access_register_out as o;
    if input.get(i::REGISTER_ID) != REG_HOST_ENDIANNESS {
        return Err(bad_param(syn::BAD_REGISTER));
    }
    // HOST_ENDIANNESS belongs to the PF (Linux writes it only there, `set_hca_ctrl`).
    if d.profile.is_vf() {
        return Err(bad_param(syn::REGISTER_NOT_ON_VF));
    }
    let len = host_endianness_reg::SIZE;
    if input.msg.len() < i::REGISTER_DATA.byte_off() + len {
        return Err(fail(st::BAD_INPUT_LEN, syn::BAD_INLEN));
    }
    if input.outlen < o::REGISTER_DATA.byte_off() + len {
        return Err(fail(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN));
    }
    if input.get(i::ARGUMENT) != 0 {
        return Err(bad_param(syn::BAD_REGISTER_VALUE));
    }
    let reg = &input.msg[i::REGISTER_DATA.byte_off()..][..len];
    if input.op_mod() == op_mod::ACCESS_REG_WRITE {
        let he = reg[host_endianness_reg::HE.byte_off()];
        let rest_zero = reg.iter().skip(1).all(|b| *b == 0);
        if !(he == host_endianness_reg::HE_LITTLE || he == host_endianness_reg::HE_BIG)
            || !rest_zero
        {
            return Err(bad_param(syn::BAD_REGISTER_VALUE));
        }
        d.hca.host_endianness = he;
    }
    let mut r = out(o::REGISTER_DATA.byte_off() + len);
    r[o::REGISTER_DATA.byte_off() + host_endianness_reg::HE.byte_off()] = d.hca.host_endianness;
    Ok(r)
}

pub(super) fn nop(_d: &mut Device, _input: &Input<'_>) -> CmdResult {
    Ok(out(cmds::nop_out::SIZE))
}

pub(super) fn query_adapter(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    use cmds::query_adapter_out as o;
    let mut r = out(o::SIZE);
    let base = o::QUERY_ADAPTER_STRUCT.byte_off();
    qa::IEEE_VENDOR_ID.at(base).set(&mut r, IEEE_VENDOR_ID);
    if let Some(psid) = qa::VSD_CONTD_PSID.at(base).slice_mut(&mut r) {
        psid.copy_from_slice(PSID);
    }
    let _ = d;
    Ok(r)
}

pub(super) fn init_hca(d: &mut Device, _input: &Input<'_>) -> CmdResult {
    if d.hca.initialized {
        return Err(fail(st::BAD_SYS_STATE, syn::ALREADY_INITIALIZED));
    }
    let need = u64::from(d.profile.boot_pages) + u64::from(d.profile.init_pages);
    if (d.hca.pages.len() as u64) < need {
        return Err(fail(st::BAD_SYS_STATE, syn::PAGES_MISSING));
    }
    // The QP table follows the current log_max_qp (the driver may have lowered it).
    let log_qp = g::LOG_MAX_QP.get(&d.hca.cap_cur.general).min(24) as u8;
    d.obj
        .qps
        .set_end(crate::connectx::objects::pow2(log_qp, 1 << 24));
    d.hca.initialized = true;
    d.hca.torn_down = false;
    Ok(out(cmds::init_hca_out::SIZE))
}

pub(super) fn teardown_hca(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let profile = input.get(cmds::teardown_hca_in::PROFILE) as u16;
    if profile != op_mod::TEARDOWN_GRACEFUL && profile != op_mod::TEARDOWN_FORCE {
        return Err(bad_param(syn::BAD_TEARDOWN_PROFILE));
    }
    if !d.hca.initialized {
        return Err(fail(st::BAD_SYS_STATE, syn::NOT_INITIALIZED));
    }
    if d.obj.alive() != 0 {
        if profile == op_mod::TEARDOWN_GRACEFUL {
            return Err(fail(st::BAD_RES_STATE, syn::OBJECTS_ALIVE));
        }
        let live = d.live();
        d.error(DeviceError::ForcedTeardownFreed { live });
        d.obj.clear();
    }
    d.hca.rt.objects_gone();
    d.hca.initialized = false;
    d.hca.torn_down = true;
    Ok(out(cmds::teardown_hca_out::SIZE))
}

pub(super) fn query_special_contexts(_d: &mut Device, _input: &Input<'_>) -> CmdResult {
    use cmds::query_special_contexts_out as o;
    let mut r = out(o::SIZE);
    o::DUMP_FILL_MKEY.set(&mut r, DUMP_FILL_MKEY);
    o::RESD_LKEY.set(&mut r, RESD_LKEY);
    o::NULL_MKEY.set(&mut r, NULL_MKEY);
    o::TERMINATE_SCATTER_LIST_MKEY.set(&mut r, TERMINATE_SCATTER_LIST_MKEY);
    o::REPEATED_MKEY.set(&mut r, REPEATED_MKEY);
    Ok(r)
}
