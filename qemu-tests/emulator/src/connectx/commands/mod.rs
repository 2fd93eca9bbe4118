//! Firmware command execution: one table entry per opcode (input/output minimum lengths, the
//! HCA state it needs, the `op_mod` values it accepts, the handler), then the handlers in the
//! submodules.
//!
//! Checks in order, each with its status (syndromes in [`crate::connectx::syndrome`]):
//! 1. the opcode is known — else BAD_OP;
//! 2. `inlen` ≥ the fixed input — else BAD_INPUT_LEN; `outlen` ≥ the output — else
//!    BAD_OUTPUT_LEN;
//! 3. `op_mod` is one the command defines — else BAD_PARAM; reserved header bits and `uid`
//!    are 0 — else BAD_PARAM;
//! 4. HCA state: only ENABLE_HCA, QUERY_ISSI, SET_ISSI, QUERY_PAGES, MANAGE_PAGES,
//!    QUERY_HCA_CAP, SET_HCA_CAP, ACCESS_REG, NOP and QUERY_ADAPTER work before ENABLE_HCA;
//!    object, vport and QP commands need INIT_HCA — else BAD_SYS_STATE;
//! 5. the handler's own checks.

pub(crate) mod caps;
mod hca;
mod mkey;
mod qp;
mod queues;
mod resources;
mod srq;
mod vport;

use firmware_interface::{Field, cmd_status as st, cmds, mbox_in, mbox_out, opcode as op};

use crate::{Device, syndrome as syn};

/// The input message of a command and the room for its output.
pub(crate) struct Input<'a> {
    /// The whole input message (`inlen` bytes, header included).
    pub msg: &'a [u8],
    /// `outlen` from the entry.
    pub outlen: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(msg: &'a [u8], outlen: usize) -> Input<'a> {
        Input { msg, outlen }
    }

    pub(crate) fn get(&self, f: Field) -> u32 {
        f.get(self.msg)
    }

    pub(crate) fn get64(&self, f: Field) -> u64 {
        f.get64(self.msg)
    }

    /// The bytes of a byte-aligned field (empty if the message is too short).
    pub(crate) fn bytes(&self, f: Field) -> &'a [u8] {
        f.slice(self.msg).unwrap_or(&[])
    }

    pub(crate) fn opcode(&self) -> u16 {
        mbox_in::OPCODE.get(self.msg) as u16
    }

    pub(crate) fn op_mod(&self) -> u16 {
        mbox_in::OP_MOD.get(self.msg) as u16
    }

    /// The BE64 entry `i` of a list starting at byte `off`.
    pub(crate) fn entry64(&self, off: usize, i: usize) -> u64 {
        let at = off + 8 * i;
        match self.msg.get(at..at + 8) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_be_bytes(a)
            }
            None => 0,
        }
    }
}

/// A failed command: output status and syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fail {
    pub status: u8,
    pub syndrome: u32,
}

/// A handler's result: the output message (its own size, header zero) or a failure.
pub(crate) type CmdResult = Result<Vec<u8>, Fail>;

pub(crate) const fn fail(status: u8, syndrome: u32) -> Fail {
    Fail { status, syndrome }
}

pub(crate) const fn bad_param(syndrome: u32) -> Fail {
    fail(st::BAD_PARAM, syndrome)
}

/// BAD_RES_STATE / OBJECT_IN_USE.
pub(crate) const IN_USE: Fail = fail(st::BAD_RES_STATE, syn::OBJECT_IN_USE);

/// The failure for an object number that names nothing: BAD_INDEX when out of the table's
/// range, BAD_RES when in range but not allocated.
pub(crate) const fn no_object(in_range: bool) -> Fail {
    if in_range {
        fail(st::BAD_RES, syn::NO_SUCH_OBJECT)
    } else {
        fail(st::BAD_INDEX, syn::BAD_INDEX)
    }
}

/// An all-zero output of `size` bytes.
pub(crate) fn out(size: usize) -> Vec<u8> {
    vec![0; size]
}

/// Which HCA state a command needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Works before ENABLE_HCA.
    Any,
    /// Needs ENABLE_HCA.
    Enabled,
    /// Needs INIT_HCA.
    Initialized,
}

type Handler = fn(&mut Device, &Input<'_>) -> CmdResult;

struct Spec {
    opcode: u16,
    in_min: usize,
    out_min: usize,
    stage: Stage,
    /// Accepted `op_mod` values; empty = the handler checks.
    op_mods: &'static [u16],
    run: Handler,
}

const Z: &[u16] = &[0];
const ANY_OPMOD: &[u16] = &[];

macro_rules! spec {
    ($op:expr, $in:expr, $out:expr, $stage:ident, $mods:expr, $run:expr) => {
        Spec {
            opcode: $op,
            in_min: $in,
            out_min: $out,
            stage: Stage::$stage,
            op_mods: $mods,
            run: $run,
        }
    };
}

/// The dispatch table: one row per implemented opcode.
static TABLE: &[Spec] = &[
    // ---- HCA bring-up / teardown
    spec!(
        op::ENABLE_HCA,
        cmds::enable_hca_in::SIZE,
        cmds::enable_hca_out::SIZE,
        Any,
        Z,
        hca::enable_hca
    ),
    spec!(
        op::DISABLE_HCA,
        cmds::disable_hca_in::SIZE,
        cmds::disable_hca_out::SIZE,
        Enabled,
        Z,
        hca::disable_hca
    ),
    spec!(
        op::QUERY_ISSI,
        cmds::query_issi_in::SIZE,
        cmds::query_issi_out::SIZE,
        Any,
        Z,
        hca::query_issi
    ),
    spec!(
        op::SET_ISSI,
        cmds::set_issi_in::SIZE,
        cmds::set_issi_out::SIZE,
        Any,
        Z,
        hca::set_issi
    ),
    spec!(
        op::QUERY_PAGES,
        cmds::query_pages_in::SIZE,
        cmds::query_pages_out::SIZE,
        Any,
        &[1, 2, 3],
        hca::query_pages
    ),
    spec!(
        op::MANAGE_PAGES,
        cmds::manage_pages_in::SIZE,
        cmds::manage_pages_out::SIZE,
        Any,
        &[0, 1, 2],
        hca::manage_pages
    ),
    spec!(
        op::QUERY_HCA_CAP,
        cmds::query_hca_cap_in::SIZE,
        cmds::query_hca_cap_out::SIZE,
        Any,
        ANY_OPMOD,
        caps::query_hca_cap
    ),
    spec!(
        op::SET_HCA_CAP,
        cmds::set_hca_cap_in::SIZE,
        cmds::set_hca_cap_out::SIZE,
        Any,
        ANY_OPMOD,
        caps::set_hca_cap
    ),
    spec!(
        op::ACCESS_REG,
        cmds::access_register_in::SIZE,
        cmds::access_register_out::SIZE,
        Any,
        &[0, 1],
        hca::access_reg
    ),
    spec!(
        op::NOP,
        cmds::nop_in::SIZE,
        cmds::nop_out::SIZE,
        Any,
        Z,
        hca::nop
    ),
    spec!(
        op::QUERY_ADAPTER,
        cmds::query_adapter_in::SIZE,
        cmds::query_adapter_out::SIZE,
        Any,
        Z,
        hca::query_adapter
    ),
    spec!(
        op::INIT_HCA,
        cmds::init_hca_in::SIZE,
        cmds::init_hca_out::SIZE,
        Enabled,
        Z,
        hca::init_hca
    ),
    spec!(
        op::TEARDOWN_HCA,
        cmds::teardown_hca_in::SIZE,
        cmds::teardown_hca_out::SIZE,
        Enabled,
        Z,
        hca::teardown_hca
    ),
    spec!(
        op::QUERY_SPECIAL_CONTEXTS,
        cmds::query_special_contexts_in::SIZE,
        cmds::query_special_contexts_out::SIZE,
        Initialized,
        Z,
        hca::query_special_contexts
    ),
    // ---- simple resources
    spec!(
        op::ALLOC_UAR,
        cmds::alloc_uar_in::SIZE,
        cmds::alloc_uar_out::SIZE,
        Initialized,
        Z,
        resources::alloc_uar
    ),
    spec!(
        op::DEALLOC_UAR,
        cmds::dealloc_uar_in::SIZE,
        cmds::dealloc_uar_out::SIZE,
        Initialized,
        Z,
        resources::dealloc_uar
    ),
    spec!(
        op::ALLOC_PD,
        cmds::alloc_pd_in::SIZE,
        cmds::alloc_pd_out::SIZE,
        Initialized,
        Z,
        resources::alloc_pd
    ),
    spec!(
        op::DEALLOC_PD,
        cmds::dealloc_pd_in::SIZE,
        cmds::dealloc_pd_out::SIZE,
        Initialized,
        Z,
        resources::dealloc_pd
    ),
    spec!(
        op::ALLOC_TRANSPORT_DOMAIN,
        cmds::alloc_transport_domain_in::SIZE,
        cmds::alloc_transport_domain_out::SIZE,
        Initialized,
        Z,
        resources::alloc_td
    ),
    spec!(
        op::DEALLOC_TRANSPORT_DOMAIN,
        cmds::dealloc_transport_domain_in::SIZE,
        cmds::dealloc_transport_domain_out::SIZE,
        Initialized,
        Z,
        resources::dealloc_td
    ),
    // ---- queues
    spec!(
        op::CREATE_EQ,
        cmds::create_eq_in::SIZE,
        cmds::create_eq_out::SIZE,
        Initialized,
        Z,
        queues::create_eq
    ),
    spec!(
        op::DESTROY_EQ,
        cmds::destroy_eq_in::SIZE,
        cmds::destroy_eq_out::SIZE,
        Initialized,
        Z,
        queues::destroy_eq
    ),
    spec!(
        op::CREATE_CQ,
        cmds::create_cq_in::SIZE,
        cmds::create_cq_out::SIZE,
        Initialized,
        Z,
        queues::create_cq
    ),
    spec!(
        op::DESTROY_CQ,
        cmds::destroy_cq_in::SIZE,
        cmds::destroy_cq_out::SIZE,
        Initialized,
        Z,
        queues::destroy_cq
    ),
    spec!(
        op::CREATE_SRQ,
        cmds::create_srq_in::SIZE,
        cmds::create_srq_out::SIZE,
        Initialized,
        Z,
        srq::create_srq
    ),
    spec!(
        op::DESTROY_SRQ,
        cmds::destroy_srq_in::SIZE,
        cmds::destroy_srq_out::SIZE,
        Initialized,
        Z,
        srq::destroy_srq
    ),
    spec!(
        op::CREATE_RMP,
        cmds::create_rmp_in::SIZE,
        cmds::create_rmp_out::SIZE,
        Initialized,
        Z,
        srq::create_rmp
    ),
    spec!(
        op::MODIFY_RMP,
        cmds::modify_rmp_in::SIZE,
        cmds::modify_rmp_out::SIZE,
        Initialized,
        Z,
        srq::modify_rmp
    ),
    spec!(
        op::QUERY_RMP,
        cmds::query_rmp_in::SIZE,
        cmds::query_rmp_out::SIZE,
        Initialized,
        Z,
        srq::query_rmp
    ),
    spec!(
        op::DESTROY_RMP,
        cmds::destroy_rmp_in::SIZE,
        cmds::destroy_rmp_out::SIZE,
        Initialized,
        Z,
        srq::destroy_rmp
    ),
    spec!(
        op::CREATE_MKEY,
        cmds::create_mkey_in::SIZE,
        cmds::create_mkey_out::SIZE,
        Initialized,
        Z,
        mkey::create_mkey
    ),
    spec!(
        op::DESTROY_MKEY,
        cmds::destroy_mkey_in::SIZE,
        cmds::destroy_mkey_out::SIZE,
        Initialized,
        Z,
        mkey::destroy_mkey
    ),
    // ---- QPs
    spec!(
        op::CREATE_QP,
        cmds::create_qp_in::SIZE,
        cmds::create_qp_out::SIZE,
        Initialized,
        Z,
        qp::create_qp
    ),
    spec!(
        op::DESTROY_QP,
        cmds::destroy_qp_in::SIZE,
        cmds::destroy_qp_out::SIZE,
        Initialized,
        Z,
        qp::destroy_qp
    ),
    spec!(
        op::RST2INIT_QP,
        cmds::rst2init_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::INIT2INIT_QP,
        cmds::rst2init_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::INIT2RTR_QP,
        cmds::rst2init_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::RTR2RTS_QP,
        cmds::rst2init_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::RTS2RTS_QP,
        cmds::rst2init_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::SQERR2RTS_QP,
        cmds::sqerr2rts_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::SQD_RTS_QP,
        cmds::sqd2rts_qp_in::SIZE,
        cmds::modify_qp_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::QP_2ERR,
        cmds::qp_2err_in::SIZE,
        cmds::qp_2err_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::QP_2RST,
        cmds::qp_2rst_in::SIZE,
        cmds::qp_2rst_out::SIZE,
        Initialized,
        Z,
        qp::modify_qp
    ),
    spec!(
        op::QUERY_QP,
        cmds::query_qp_in::SIZE,
        cmds::create_qp_in::PAS.byte_off(),
        Initialized,
        Z,
        qp::query_qp
    ),
    // ---- vport / RoCE addresses
    spec!(
        op::QUERY_VPORT_STATE,
        cmds::query_vport_state_in::SIZE,
        cmds::query_vport_state_out::SIZE,
        Initialized,
        &[0, 1, 2],
        vport::query_vport_state
    ),
    spec!(
        op::QUERY_NIC_VPORT_CONTEXT,
        cmds::query_nic_vport_context_in::SIZE,
        cmds::query_nic_vport_context_out::SIZE,
        Initialized,
        Z,
        vport::query_nic_vport_context
    ),
    spec!(
        op::MODIFY_NIC_VPORT_CONTEXT,
        cmds::modify_nic_vport_context_in::SIZE,
        cmds::modify_nic_vport_context_out::SIZE,
        Initialized,
        Z,
        vport::modify_nic_vport_context
    ),
    spec!(
        op::SET_ROCE_ADDRESS,
        cmds::set_roce_address_in::SIZE,
        cmds::set_roce_address_out::SIZE,
        Initialized,
        Z,
        vport::set_roce_address
    ),
    spec!(
        op::QUERY_ROCE_ADDRESS,
        cmds::query_roce_address_in::SIZE,
        cmds::query_roce_address_out::SIZE,
        Initialized,
        Z,
        vport::query_roce_address
    ),
];

fn lookup(opcode: u16) -> Option<&'static Spec> {
    TABLE.iter().find(|s| s.opcode == opcode)
}

/// Input header dword 1 bits 31:16 (reserved).
const HDR_RESERVED: Field = Field::dw(0x4, 31, 16);

/// An output message of just a header with `status` and `syndrome`.
pub(crate) fn header(status: u8, syndrome: u32) -> Vec<u8> {
    let mut o = out(mbox_out::HEADER_SIZE);
    mbox_out::STATUS.set(&mut o, u32::from(status));
    mbox_out::SYNDROME.set(&mut o, syndrome);
    o
}

impl Device {
    /// Executes one delivered command; returns its output message (status set).
    pub(crate) fn execute(&mut self, input: &Input<'_>) -> Vec<u8> {
        let opcode = input.opcode();
        if let Some(fc) = self.faults.fail_command
            && fc.opcode == opcode
            && fc.times != Some(0)
        {
            self.faults.fail_command = match fc.times {
                Some(1) => None,
                Some(n) => Some(crate::FailCommand {
                    times: Some(n - 1),
                    ..fc
                }),
                None => Some(fc),
            };
            return header(fc.status, fc.syndrome);
        }
        if self.hca.fatal.is_some() {
            return header(st::INTERNAL_ERR, syn::HEALTH_FATAL);
        }
        match self.dispatch(input) {
            Ok(mut o) => {
                if o.len() < mbox_out::HEADER_SIZE {
                    o.resize(mbox_out::HEADER_SIZE, 0);
                }
                mbox_out::STATUS.set(&mut o, u32::from(st::OK));
                mbox_out::SYNDROME.set(&mut o, 0);
                o
            }
            Err(f) => header(f.status, f.syndrome),
        }
    }

    fn dispatch(&mut self, input: &Input<'_>) -> CmdResult {
        let spec = lookup(input.opcode()).ok_or(fail(st::BAD_OP, syn::BAD_OPCODE))?;
        if input.msg.len() < spec.in_min {
            return Err(fail(st::BAD_INPUT_LEN, syn::BAD_INLEN));
        }
        if input.outlen < spec.out_min {
            return Err(fail(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN));
        }
        if !spec.op_mods.is_empty() && !spec.op_mods.contains(&input.op_mod()) {
            return Err(bad_param(syn::BAD_OP_MOD));
        }
        if input.get(HDR_RESERVED) != 0 {
            return Err(bad_param(syn::RESERVED_NOT_ZERO));
        }
        if input.get(mbox_in::UID) != 0 {
            return Err(bad_param(syn::BAD_UID));
        }
        match spec.stage {
            Stage::Any => {}
            Stage::Enabled if !self.hca.enabled => {
                return Err(fail(st::BAD_SYS_STATE, syn::NOT_ENABLED));
            }
            Stage::Enabled => {}
            Stage::Initialized if !self.hca.enabled => {
                return Err(fail(st::BAD_SYS_STATE, syn::NOT_ENABLED));
            }
            Stage::Initialized if !self.hca.initialized => {
                return Err(fail(st::BAD_SYS_STATE, syn::NOT_INITIALIZED));
            }
            Stage::Initialized => {}
        }
        (spec.run)(self, input)
    }

    /// Checks a queue buffer described by the PAS list at byte 0x110 of the input: `bytes`
    /// long, pages of `4096 << log_page_size`; every entry aligned and every byte used mapped.
    pub(crate) fn read_pas(
        &mut self,
        input: &Input<'_>,
        bytes: u64,
        log_page_size: u32,
        page_offset: u32,
    ) -> Result<Vec<u64>, Fail> {
        /// Queues: pages of 4 KiB .. 1 GiB.
        const MAX_LOG_PAGE_SIZE: u32 = 18;
        if page_offset != 0 {
            return Err(bad_param(syn::BAD_PAGE_OFFSET));
        }
        if log_page_size > MAX_LOG_PAGE_SIZE {
            return Err(bad_param(syn::BAD_LOG_PAGE_SIZE));
        }
        let page = 4096u64 << log_page_size;
        let npages = bytes.div_ceil(page);
        let pas_off = cmds::create_cq_in::PAS.byte_off();
        if (input.msg.len() as u64) < pas_off as u64 + 8 * npages {
            return Err(fail(st::BAD_INPUT_LEN, syn::BAD_INLEN));
        }
        let mut pas = Vec::with_capacity(npages as usize);
        for i in 0..npages as usize {
            let a = input.entry64(pas_off, i);
            if a & (page - 1) != 0 {
                return Err(bad_param(syn::BAD_PAS));
            }
            pas.push(a);
        }
        for (i, a) in pas.iter().enumerate() {
            let used = page.min(bytes - i as u64 * page);
            if self.probe(*a, used).is_err() {
                return Err(bad_param(syn::PAS_NOT_MAPPED));
            }
        }
        Ok(pas)
    }

    /// Checks a doorbell record address: 8-byte aligned and mapped.
    pub(crate) fn check_dbr(&mut self, addr: u64) -> Result<(), Fail> {
        if !addr.is_multiple_of(8) || self.probe(addr, 8).is_err() {
            return Err(bad_param(syn::BAD_DBR));
        }
        Ok(())
    }
}
