//! Vport queries, NIC vport context (MAC, RoCE enable, MTU) and the RoCE GID table.

use firmware_interface::ctx::{nic_vport_context as nvc, roce_addr_layout as ral};
use firmware_interface::{Field, cmds};

use super::{CmdResult, Input, bad_param, out};
use crate::connectx::state::GID_TABLE_LEN;
use crate::{Device, syndrome as syn};

/// Vport state "up" (`state` / `admin_state`). TODO(fi): no encoding in `cmds::query_vport_state_out`.
const VPORT_STATE_UP: u32 = 1;

/// MODIFY_NIC_VPORT_CONTEXT `field_select` bits this device implements (ifc.h
/// `modify_nic_vport_field_select_bits`). TODO(fi): only `roce_en` and `permanent_address`
/// are in firmware-interface.
mod select {
    /// roce_en.
    pub const ROCE_EN: u32 = 1 << 1;
    /// permanent_address.
    pub const PERMANENT_ADDRESS: u32 = 1 << 3;
    /// promisc (accepted, no effect).
    pub const PROMISC: u32 = 1 << 4;
    /// change_event (accepted, no effect).
    pub const CHANGE_EVENT: u32 = 1 << 5;
    /// mtu.
    pub const MTU: u32 = 1 << 6;
    /// disable_mc_local_lb (accepted, no effect yet).
    pub const DISABLE_MC_LOCAL_LB: u32 = 1 << 10;
    /// disable_uc_local_lb (accepted, no effect yet).
    pub const DISABLE_UC_LOCAL_LB: u32 = 1 << 11;
    /// Every implemented bit.
    pub const ALL: u32 = ROCE_EN
        | PERMANENT_ADDRESS
        | PROMISC
        | CHANGE_EVENT
        | MTU
        | DISABLE_MC_LOCAL_LB
        | DISABLE_UC_LOCAL_LB;
}

fn check_vport(input: &Input<'_>, other: Field, number: Field) -> Result<(), super::Fail> {
    if input.get(other) != 0 || input.get(number) != 0 {
        return Err(bad_param(syn::BAD_VPORT));
    }
    Ok(())
}

/// EUI-64 from a MAC (port and node GUIDs).
fn eui64(mac: [u8; 6]) -> u64 {
    let b = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    u64::from_be_bytes(b)
}

pub(super) fn query_vport_state(_d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_vport_state_in as i;
    use cmds::query_vport_state_out as o;
    check_vport(input, i::OTHER_VPORT, i::VPORT_NUMBER)?;
    let mut r = out(o::SIZE);
    o::STATE.set(&mut r, VPORT_STATE_UP);
    o::ADMIN_STATE.set(&mut r, VPORT_STATE_UP);
    Ok(r)
}

pub(super) fn query_nic_vport_context(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_nic_vport_context_in as i;
    use cmds::query_nic_vport_context_out as o;
    check_vport(input, i::OTHER_VPORT, i::VPORT_NUMBER)?;
    if input.get(i::ALLOWED_LIST_TYPE) != 0 {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let mut r = out(o::SIZE);
    let base = o::NIC_VPORT_CONTEXT.byte_off();
    nvc::ROCE_EN.at(base).set(&mut r, u32::from(d.hca.roce_en));
    nvc::MTU.at(base).set(&mut r, u32::from(d.hca.vport_mtu));
    let guid = eui64(d.hca.mac);
    for f in [nvc::SYSTEM_IMAGE_GUID, nvc::PORT_GUID, nvc::NODE_GUID] {
        f.at(base).set64(&mut r, guid);
    }
    if let Some(m) = nvc::PERMANENT_MAC.at(base).slice_mut(&mut r) {
        m.copy_from_slice(&d.hca.mac);
    }
    Ok(r)
}

pub(super) fn modify_nic_vport_context(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::modify_nic_vport_context_in as i;
    check_vport(input, i::OTHER_VPORT, i::VPORT_NUMBER)?;
    let sel = input.get(i::FIELD_SELECT);
    if sel & !select::ALL != 0 {
        return Err(bad_param(syn::BAD_FIELD_SELECT));
    }
    let base = i::NIC_VPORT_CONTEXT.byte_off();
    let mtu = input.get(nvc::MTU.at(base));
    if sel & select::MTU != 0 && !(64..=9216).contains(&mtu) {
        return Err(bad_param(syn::BAD_FIELD_SELECT));
    }
    if sel & select::PERMANENT_ADDRESS != 0 {
        let mac = input.bytes(nvc::PERMANENT_MAC.at(base));
        if mac.len() != 6 || mac[0] & 1 != 0 || mac.iter().all(|b| *b == 0) {
            return Err(bad_param(syn::BAD_FIELD_SELECT));
        }
        d.hca.mac.copy_from_slice(mac);
    }
    if sel & select::ROCE_EN != 0 {
        d.hca.roce_en = input.get(nvc::ROCE_EN.at(base)) != 0;
    }
    if sel & select::MTU != 0 {
        d.hca.vport_mtu = mtu as u16;
    }
    Ok(out(cmds::modify_nic_vport_context_out::SIZE))
}

fn gid_index(d: &Device, f: Field, input: &Input<'_>) -> Result<usize, super::Fail> {
    if !d.profile.port_type_eth {
        return Err(bad_param(syn::NOT_ROCE));
    }
    let idx = input.get(f) as usize;
    if idx >= GID_TABLE_LEN {
        return Err(bad_param(syn::BAD_GID_INDEX));
    }
    Ok(idx)
}

pub(super) fn set_roce_address(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::set_roce_address_in as i;
    let idx = gid_index(d, i::ROCE_ADDRESS_INDEX, input)?;
    if input.get(i::VHCA_PORT_NUM) > 1 {
        return Err(bad_param(syn::BAD_PORT));
    }
    let entry = input.bytes(i::ROCE_ADDRESS);
    let empty = entry.iter().all(|b| *b == 0);
    let version = ral::ROCE_VERSION.get(entry);
    let l3 = ral::ROCE_L3_TYPE.get(entry);
    if !empty
        && (version != ral::ROCE_VERSION_V2 || (l3 != ral::L3_TYPE_IPV4 && l3 != ral::L3_TYPE_IPV6))
    {
        return Err(bad_param(syn::BAD_GID_ENTRY));
    }
    d.hca.gids[idx].copy_from_slice(entry);
    Ok(out(cmds::set_roce_address_out::SIZE))
}

pub(super) fn query_roce_address(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_roce_address_in as i;
    use cmds::query_roce_address_out as o;
    let idx = gid_index(d, i::ROCE_ADDRESS_INDEX, input)?;
    if input.get(i::VHCA_PORT_NUM) > 1 {
        return Err(bad_param(syn::BAD_PORT));
    }
    let mut r = out(o::SIZE);
    if let Some(dst) = o::ROCE_ADDRESS.slice_mut(&mut r) {
        dst.copy_from_slice(&d.hca.gids[idx]);
    }
    Ok(r)
}
