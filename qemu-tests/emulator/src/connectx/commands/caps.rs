//! QUERY_HCA_CAP / SET_HCA_CAP: the capability pages (general, atomic, RoCE).
//!
//! SET_HCA_CAP is strict: the block must equal the current one except in the writable fields,
//! and each writable field must stay within its maximum. A driver that writes a field at the
//! wrong offset therefore gets BAD_PARAM ([`syn::CAP_READ_ONLY`]) instead of silently setting
//! nothing. The atomic page may also come all-zero outside its writable field: Linux sets it
//! from a zeroed block (`handle_hca_cap_atomic`).
//!
//! The atomic page's one writable field, `atomic_req_8B_endianness_mode`, decides how the
//! requester writes the 8-byte result of an atomic into local memory:
//! [`Device::atomic_response`].

use firmware_interface::ctx::{
    CAP_BLOCK_SIZE, atomic_caps as at, cmd_hca_cap as g, host_endianness_reg, roce_cap as r,
};
use firmware_interface::{Field, cmd_status as st, cmds, op_mod};

use super::{CmdResult, Input, bad_param, fail, out};
use crate::connectx::objects::pow2;
use crate::connectx::regs::TIMER_KHZ;
use crate::{Device, Profile, syndrome as syn};

/// The capability pages this device has.
#[derive(Clone, Debug)]
pub(crate) struct Caps {
    /// `cmd_hca_cap` (cap type GENERAL), 4096 bytes.
    pub general: Vec<u8>,
    /// Cap type ATOMIC, 4096 bytes.
    pub atomic: Vec<u8>,
    /// `roce_cap` (cap type ROCE), 4096 bytes.
    pub roce: Vec<u8>,
}

/// `cmdif_checksum` value "enabled" (`MLX5_CAP_CMDIF_CSUM_ENABLED`). TODO(fi): not in
/// `ctx::cmd_hca_cap`.
const CMDIF_CHECKSUM_ON: u32 = 3;

/// How a writable field may change.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// Any value up to the maximum.
    LeMax,
    /// 0 or the maximum.
    ZeroOrMax,
    /// Only 0.
    Zero,
    /// `atomic_req_8B_endianness_mode`: big-endian (0), or host endianness (1) when the
    /// maximum page has `supported_atomic_req_8B_endianness_mode_1`.
    AtomicMode,
}

/// Writable fields of the general page (the fields Linux changes,
/// `docs/mlx5.md#capabilities`).
const GENERAL_WRITABLE: &[(Field, Rule)] = &[
    (g::CMDIF_CHECKSUM, Rule::ZeroOrMax),
    (g::LOG_UAR_PAGE_SZ, Rule::Zero),
    (g::PKEY_TABLE_SIZE, Rule::LeMax),
    (g::LOG_MAX_QP, Rule::LeMax),
    (g::DRAIN_SIGERR, Rule::LeMax),
    (g::MKEY_BY_NAME, Rule::LeMax),
    (g::RELEASE_ALL_PAGES, Rule::LeMax),
    (g::CACHE_LINE_128BYTE, Rule::LeMax),
    (g::DCT, Rule::LeMax),
    (g::NUM_VHCA_PORTS, Rule::LeMax),
    (g::ROCE, Rule::LeMax),
    (g::ABS_NATIVE_PORT_NUM, Rule::LeMax),
    (g::UAR_4K, Rule::LeMax),
    (g::SW_OWNER_ID, Rule::LeMax),
];

/// Writable fields of the RoCE page.
const ROCE_WRITABLE: &[(Field, Rule)] = &[(r::SW_R_ROCE_SRC_UDP_PORT, Rule::LeMax)];

/// Writable fields of the atomic page.
const ATOMIC_WRITABLE: &[(Field, Rule)] = &[(at::ATOMIC_REQ_8B_ENDIANNESS_MODE, Rule::AtomicMode)];

/// `roce_version` capability bits: RoCE v2 only (`1 << MLX5_ROCE_VERSION_2`). TODO(fi): the
/// capability encodings are not in `ctx::roce_cap`.
const ROCE_VERSION_2_CAP: u32 = 1 << 2;
/// `l3_type` capability bits: IPv4 (`1 << 1`) and IPv6 (`1 << 2`). TODO(fi): as above.
const L3_TYPE_IPV4_IPV6_CAP: u32 = (1 << 1) | (1 << 2);
/// RoCE v2 UDP destination port.
pub(crate) const ROCE_V2_PORT: u32 = 4791;

/// The maximum capabilities of a device with profile `p`.
pub(crate) fn max_caps(p: &Profile) -> Caps {
    let mut gen_ = vec![0u8; CAP_BLOCK_SIZE];
    let b = &mut gen_;
    let eth = p.port_type_eth;
    for (f, v) in [
        (g::LOG_MAX_QP_SZ, u32::from(p.log_max_qp_sz)),
        (g::LOG_MAX_QP, u32::from(p.log_max_qp)),
        // SRQs: as many and as large as QPs and their receive queues.
        (g::LOG_MAX_SRQ, u32::from(p.log_max_qp)),
        (g::LOG_MAX_SRQ_SZ, u32::from(p.log_max_qp_sz)),
        (g::LOG_MAX_CQ_SZ, u32::from(p.log_max_cq_sz)),
        (g::LOG_MAX_CQ, u32::from(p.log_max_cq)),
        (g::LOG_MAX_EQ_SZ, u32::from(p.log_max_eq_sz)),
        (g::LOG_MAX_MKEY, u32::from(p.log_max_mkey)),
        (g::LOG_MAX_EQ, u32::from(p.log_max_eq)),
        (g::FORCE_TEARDOWN, 1),
        (g::LOG_MAX_RA_REQ_QP, 4),
        (g::LOG_MAX_RA_RES_QP, 4),
        (g::GID_TABLE_SIZE, 1),
        (g::PKEY_TABLE_SIZE, 0),
        (g::LOCAL_CA_ACK_DELAY, 16),
        (
            g::PORT_TYPE,
            if eth {
                g::PORT_TYPE_ETH
            } else {
                g::PORT_TYPE_IB
            },
        ),
        (g::NUM_PORTS, 1),
        (g::LOG_MAX_MSG, u32::from(p.log_max_msg)),
        (g::CQE_VERSION, 1),
        (g::DRAIN_SIGERR, 1),
        (
            g::CMDIF_CHECKSUM,
            if p.cmd_signatures {
                CMDIF_CHECKSUM_ON
            } else {
                0
            },
        ),
        (g::ROCE, u32::from(eth)),
        (g::ATOMIC, 1),
        (g::CQ_OI, 1),
        (g::UD, 1),
        (g::UC, 1),
        (g::RC, 1),
        (g::UAR_4K, 1),
        (g::LOG_PG_SZ, 12),
        (g::BF, 1),
        (g::MKEY_BY_NAME, 1),
        (g::RELEASE_ALL_PAGES, 1),
        (g::CACHE_LINE_128BYTE, 1),
        (g::NUM_VHCA_PORTS, 1),
        (g::LOG_BF_REG_SIZE, u32::from(p.log_bf_reg_size)),
        (g::MAX_WQE_SZ_SQ, u32::from(p.max_wqe_sz_sq)),
        (g::MAX_WQE_SZ_RQ, u32::from(p.max_wqe_sz_rq)),
        (g::LOG_MAX_TRANSPORT_DOMAIN, u32::from(p.log_max_td)),
        (g::LOG_MAX_PD, u32::from(p.log_max_pd)),
        (g::MAX_NUM_EQS, pow2(p.log_max_eq, 256)),
        (g::LOG_UAR_PAGE_SZ, 0),
        (g::DEVICE_FREQUENCY_MHZ, TIMER_KHZ / 1000),
        (g::DEVICE_FREQUENCY_KHZ, TIMER_KHZ),
        (g::NUM_OF_UARS_PER_PAGE, 1),
        // A PF manages the e-switch vports; a VF is one of them, with a vHCA id of its own.
        (g::VPORT_GROUP_MANAGER, u32::from(!p.is_vf())),
        (g::VHCA_ID, u32::from(p.is_vf())),
    ] {
        f.set(b, v);
    }
    let mut roce = vec![0u8; CAP_BLOCK_SIZE];
    if eth {
        for (f, v) in [
            (r::SW_R_ROCE_SRC_UDP_PORT, 1),
            (r::L3_TYPE, L3_TYPE_IPV4_IPV6_CAP),
            (r::ROCE_VERSION, ROCE_VERSION_2_CAP),
            (r::R_ROCE_DEST_UDP_PORT, ROCE_V2_PORT),
            (r::R_ROCE_MAX_SRC_UDP_PORT, 0xffff),
            (r::R_ROCE_MIN_SRC_UDP_PORT, 0xc000),
            (
                r::ROCE_ADDRESS_TABLE_SIZE,
                crate::connectx::state::GID_TABLE_LEN as u32,
            ),
        ] {
            f.set(&mut roce, v);
        }
    }
    // Atomics: 8-byte compare-and-swap and fetch-and-add on QPs (masked atomics are not
    // modelled); responses big-endian until the driver asks for host endianness.
    let mut atomic = vec![0u8; CAP_BLOCK_SIZE];
    for (f, v) in [
        (at::ATOMIC_OPERATIONS, at::OPS_CMP_SWAP | at::OPS_FETCH_ADD),
        (at::ATOMIC_SIZE_QP, at::SIZE_QP_8BYTES),
        (
            at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1,
            u32::from(p.atomic_host_endianness),
        ),
        (at::ATOMIC_REQ_8B_ENDIANNESS_MODE, at::REQ_MODE_BE),
    ] {
        f.set(&mut atomic, v);
    }
    Caps {
        general: gen_,
        atomic,
        roce,
    }
}

/// The current capabilities after reset: the maximum, with the optional behaviours off.
pub(crate) fn initial_caps(max: &Caps) -> Caps {
    let mut c = max.clone();
    for f in [
        g::DRAIN_SIGERR,
        g::MKEY_BY_NAME,
        g::RELEASE_ALL_PAGES,
        g::CACHE_LINE_128BYTE,
        g::UAR_4K,
    ] {
        f.set(&mut c.general, 0);
    }
    r::SW_R_ROCE_SRC_UDP_PORT.set(&mut c.roce, 0);
    c
}

/// The page for a capability type, if this device has it.
fn page(d: &Device, cap_type: u16, max: bool) -> Option<&Vec<u8>> {
    let c = if max { &d.hca.cap_max } else { &d.hca.cap_cur };
    match cap_type {
        op_mod::CAP_GENERAL => Some(&c.general),
        op_mod::CAP_ATOMIC if g::ATOMIC.get(&d.hca.cap_max.general) != 0 => Some(&c.atomic),
        op_mod::CAP_ROCE if d.profile.port_type_eth => Some(&c.roce),
        _ => None,
    }
}

fn check_function(input: &Input<'_>) -> Result<(), super::Fail> {
    use cmds::query_hca_cap_in as q;
    if input.get(q::OTHER_FUNCTION) != 0
        || input.get(q::EC_VF_FUNCTION) != 0
        || input.get(q::FUNCTION_ID_TYPE) != 0
        || input.get(q::FUNCTION_ID) != 0
    {
        return Err(bad_param(syn::BAD_FUNCTION_ID));
    }
    Ok(())
}

pub(super) fn query_hca_cap(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let m = input.op_mod();
    let cap_type = m >> 1;
    let max = m & 1 == op_mod::QUERY_CAP_MAX;
    let Some(p) = page(d, cap_type, max) else {
        return Err(bad_param(syn::BAD_OP_MOD));
    };
    let p = p.clone();
    check_function(input)?;
    let mut o = out(cmds::query_hca_cap_out::SIZE);
    if let Some(dst) = cmds::query_hca_cap_out::CAPABILITY.slice_mut(&mut o) {
        dst.copy_from_slice(&p);
    }
    Ok(o)
}

pub(super) fn set_hca_cap(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let m = input.op_mod();
    if m & 1 != 0 {
        return Err(bad_param(syn::BAD_OP_MOD));
    }
    let cap_type = m >> 1;
    let writable = match cap_type {
        op_mod::CAP_GENERAL => GENERAL_WRITABLE,
        op_mod::CAP_ATOMIC => ATOMIC_WRITABLE,
        op_mod::CAP_ROCE => ROCE_WRITABLE,
        _ => return Err(bad_param(syn::BAD_OP_MOD)),
    };
    let Some(max) = page(d, cap_type, true).cloned() else {
        return Err(bad_param(syn::BAD_OP_MOD));
    };
    check_function(input)?;
    if d.hca.initialized {
        return Err(fail(st::BAD_SYS_STATE, syn::ALREADY_INITIALIZED));
    }
    let new = input.bytes(cmds::set_hca_cap_in::CAPABILITY);
    let cur = page(d, cap_type, false).cloned().unwrap_or_default();
    let (mut a, mut b) = (new.to_vec(), cur);
    for (f, _) in writable {
        f.set(&mut a, 0);
        f.set(&mut b, 0);
    }
    // The atomic page: Linux sends a zeroed block with only the writable field set.
    let zero_ok = cap_type == op_mod::CAP_ATOMIC && a.iter().all(|x| *x == 0);
    if a != b && !zero_ok {
        return Err(bad_param(syn::CAP_READ_ONLY));
    }
    for (f, rule) in writable {
        let (v, mx) = (f.get(new), f.get(&max));
        let ok = match rule {
            Rule::LeMax => v <= mx,
            Rule::ZeroOrMax => v == 0 || v == mx,
            Rule::Zero => v == 0,
            Rule::AtomicMode => {
                v == at::REQ_MODE_BE
                    || (v == at::REQ_MODE_HOST_ENDIANNESS
                        && at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(&max) != 0)
            }
        };
        if !ok {
            return Err(bad_param(match rule {
                Rule::Zero => syn::BAD_UAR_PAGE_SZ,
                Rule::AtomicMode => syn::BAD_ATOMIC_MODE,
                _ => syn::CAP_ABOVE_MAX,
            }));
        }
    }
    let c = &mut d.hca.cap_cur;
    if cap_type == op_mod::CAP_ATOMIC {
        // Only the writable field changes (the rest may have come as zeros).
        for (f, _) in writable {
            f.set(&mut c.atomic, f.get(new));
        }
        return Ok(out(cmds::set_hca_cap_out::SIZE));
    }
    let dst = match cap_type {
        op_mod::CAP_GENERAL => &mut c.general,
        _ => &mut c.roce,
    };
    dst.copy_from_slice(new);
    Ok(out(cmds::set_hca_cap_out::SIZE))
}

impl Device {
    /// The 8 bytes a requester writes to local memory for the original value `orig` of an
    /// atomic: big-endian unless the driver set `atomic_req_8B_endianness_mode` to host
    /// endianness, then in the byte order HOST_ENDIANNESS names (little-endian unless the
    /// driver wrote `he` = big).
    pub(crate) fn atomic_response(&self, orig: u64) -> [u8; 8] {
        let mode = at::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&self.hca.cap_cur.atomic);
        if mode == at::REQ_MODE_HOST_ENDIANNESS
            && self.hca.host_endianness == host_endianness_reg::HE_LITTLE
        {
            orig.to_le_bytes()
        } else {
            orig.to_be_bytes()
        }
    }
}
