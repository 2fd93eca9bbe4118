//! Bring-up and teardown (`docs/mlx5.md#bring-up`), pages, ISSI, capabilities, ACCESS_REG.

use firmware_interface::ctx::{cmd_hca_cap as g, roce_cap};
use firmware_interface::{cmd_status as st, cmds, op_mod, opcode as op};

use super::{H, World, msg, set};
use crate::{DeviceError, Live, Profile, syndrome as syn};

#[test]
fn full_bring_up_then_teardown_leaves_nothing_live() {
    let mut h = H::new();
    assert_eq!(h.dev.live(), Live::default());
    h.init();
    let uar = h.alloc_uar();
    // Command EQ as rdma-core vfio creates it: CMD | PAGE_REQUEST, 256 entries, armed.
    let mask = 1u64 << 0x0a | 1 << 0x0b;
    let (eqn, _) = h.create_eq(uar, 8, mask);
    h.eq_db(uar, eqn, 0, true);
    let pd = h.alloc_pd();
    let td = h.alloc(
        op::ALLOC_TRANSPORT_DOMAIN,
        cmds::alloc_transport_domain_out::TRANSPORT_DOMAIN,
    );
    let key = h.create_mkey(pd);
    let cqn = h.create_cq(uar, eqn, 6);
    let qpn = h.create_qp(firmware_interface::ctx::qpc::ST_RC, pd, cqn, uar);
    let live = h.dev.live();
    assert_eq!(
        live,
        Live {
            uars: 1,
            pds: 1,
            tds: 1,
            eqs: 1,
            cqs: 1,
            mkeys: 1,
            qps: 1,
            srqs: 0,
            fw_pages: 24,
            hca_enabled: true,
            hca_initialized: true,
        }
    );
    // Teardown in the order of `docs/mlx5.md#teardown`.
    let destroy = |h: &mut H, opcode: u16, f: firmware_interface::Field, n: u32| {
        let mut m = msg(opcode, 0, 16);
        set(&mut m, f, n);
        h.ok(&m, 16);
    };
    destroy(&mut h, op::DESTROY_QP, cmds::destroy_qp_in::QPN, qpn);
    destroy(&mut h, op::DESTROY_CQ, cmds::destroy_cq_in::CQN, cqn);
    destroy(
        &mut h,
        op::DESTROY_MKEY,
        cmds::destroy_mkey_in::MKEY_INDEX,
        key,
    );
    destroy(
        &mut h,
        op::DEALLOC_TRANSPORT_DOMAIN,
        cmds::dealloc_transport_domain_in::TRANSPORT_DOMAIN,
        td,
    );
    destroy(&mut h, op::DEALLOC_PD, cmds::dealloc_pd_in::PD, pd);
    destroy(&mut h, op::DESTROY_EQ, cmds::destroy_eq_in::EQ_NUMBER, eqn);
    destroy(&mut h, op::DEALLOC_UAR, cmds::dealloc_uar_in::UAR, uar);
    h.ok(&msg(op::TEARDOWN_HCA, 0, 16), 16);
    // Reclaim all pages (two TAKEs), then disable.
    let take = |h: &mut H, n: u32| {
        let mut m = msg(op::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE, 16);
        set(&mut m, cmds::manage_pages_in::INPUT_NUM_ENTRIES, n);
        let o = h.ok(&m, 16 + 8 * n as usize);
        cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.get(&o)
    };
    assert_eq!(take(&mut h, 20), 20);
    assert_eq!(take(&mut h, 20), 4);
    assert_eq!(take(&mut h, 20), 0);
    h.ok(&msg(op::DISABLE_HCA, 0, 16), 16);
    assert_eq!(h.dev.live(), Live::default());
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
    assert!(
        h.dev
            .command_log()
            .iter()
            .all(|r| r.status == 0 && r.delivery == 0)
    );
}

#[test]
fn query_pages_reports_what_is_still_needed() {
    let mut h = H::new();
    h.enable();
    assert_eq!(h.query_pages(op_mod::PAGES_BOOT), 8);
    assert_eq!(h.query_pages(op_mod::PAGES_INIT), 16);
    assert_eq!(h.query_pages(op_mod::PAGES_REGULAR), 0);
    h.give_pages(8);
    assert_eq!(h.query_pages(op_mod::PAGES_BOOT), 0);
    assert_eq!(h.query_pages(op_mod::PAGES_INIT), 16);
    h.give_pages(10);
    assert_eq!(h.query_pages(op_mod::PAGES_INIT), 6);
}

#[test]
fn manage_pages_give_checks_every_address() {
    let mut h = H::new();
    h.enable();
    let good = h.mem.alloc(4096, 4096);
    let misaligned = h.mem.alloc(8192, 4096) + 0x800;
    h.cmd(&H::give_msg(&[good, misaligned]), 16)
        .expect(st::BAD_PARAM, syn::BAD_PAGE_ADDRESS);
    h.cmd(&H::give_msg(&[good, good]), 16)
        .expect(st::BAD_PARAM, syn::DUPLICATE_PAGE);
    let unmapped = h.mem.alloc_unmapped(4096, 4096);
    h.cmd(&H::give_msg(&[good, unmapped]), 16)
        .expect(st::BAD_PARAM, syn::PAGE_NOT_MAPPED);
    assert!(
        h.dev
            .errors()
            .iter()
            .any(|e| matches!(e, DeviceError::Dma(f) if f.iova == unmapped))
    );
    assert_eq!(h.dev.live().fw_pages, 0, "a refused GIVE keeps nothing");
    h.ok(&H::give_msg(&[good]), 16);
    h.cmd(&H::give_msg(&[good]), 16)
        .expect(st::BAD_PARAM, syn::DUPLICATE_PAGE);
    assert_eq!(h.dev.live().fw_pages, 1);
    // CANT_GIVE is accepted.
    h.ok(
        &msg(op::MANAGE_PAGES, op_mod::MANAGE_PAGES_CANT_GIVE, 16),
        16,
    );
}

#[test]
fn pages_in_use_are_not_taken_back() {
    let mut w = World::new();
    let mut m = msg(op::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE, 16);
    set(&mut m, cmds::manage_pages_in::INPUT_NUM_ENTRIES, 4);
    let o = w.h.ok(&m, 48);
    assert_eq!(cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.get(&o), 0);
    // Surplus pages beyond the need can be taken back while initialized.
    let extra = w.h.give_pages(3);
    let o = w.h.ok(&m, 48);
    assert_eq!(cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.get(&o), 3);
    assert_eq!(w.h.dev.live().fw_pages, 24);
    let _ = extra;
    // Room for fewer addresses than asked for is an output length error.
    w.h.cmd(&m, 40).expect(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN);
}

#[test]
fn disable_with_pages_held_is_recorded() {
    let mut h = H::new();
    h.enable();
    h.give_pages(2);
    h.ok(&msg(op::DISABLE_HCA, 0, 16), 16);
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::DisabledWithPagesHeld { pages: 2 }]
    );
    assert_eq!(h.dev.live().fw_pages, 2);
    assert!(!h.dev.live().hca_enabled);
}

#[test]
fn issi_query_and_set() {
    let mut h = H::new();
    let o = h.ok(&msg(op::QUERY_ISSI, 0, 16), 112);
    assert_eq!(cmds::query_issi_out::CURRENT_ISSI.get(&o), 0);
    assert_eq!(cmds::query_issi_out::SUPPORTED_ISSI_DW0.get(&o), 0b11);
    let mut m = msg(op::SET_ISSI, 0, 16);
    set(&mut m, cmds::set_issi_in::CURRENT_ISSI, 1);
    h.ok(&m, 16);
    let o = h.ok(&msg(op::QUERY_ISSI, 0, 16), 112);
    assert_eq!(cmds::query_issi_out::CURRENT_ISSI.get(&o), 1);
}

#[test]
fn capabilities_come_from_the_profile() {
    let p = Profile {
        log_max_qp: 12,
        log_max_cq_sz: 20,
        max_wqe_sz_sq: 512,
        log_bf_reg_size: 8,
        port_type_eth: false,
        ..crate::connectx::tests::quiet()
    };
    let mut h = H::with(p);
    h.enable();
    for max in [false, true] {
        let c = h.query_cap(op_mod::CAP_GENERAL, max);
        assert_eq!(g::LOG_MAX_QP.get(&c), 12);
        assert_eq!(g::LOG_MAX_CQ_SZ.get(&c), 20);
        assert_eq!(g::LOG_MAX_EQ.get(&c), 4);
        assert_eq!(g::LOG_MAX_MKEY.get(&c), 12);
        assert_eq!(g::LOG_MAX_PD.get(&c), 10);
        assert_eq!(g::LOG_MAX_TRANSPORT_DOMAIN.get(&c), 8);
        assert_eq!(g::MAX_WQE_SZ_SQ.get(&c), 512);
        assert_eq!(g::MAX_WQE_SZ_RQ.get(&c), 512);
        assert_eq!(g::LOG_BF_REG_SIZE.get(&c), 8);
        assert_eq!(g::PORT_TYPE.get(&c), g::PORT_TYPE_IB);
        assert_eq!(g::NUM_PORTS.get(&c), 1);
        assert_eq!(g::CQE_VERSION.get(&c), 1);
        assert_eq!(g::BF.get(&c), 1);
        assert_eq!((g::RC.get(&c), g::UD.get(&c), g::UC.get(&c)), (1, 1, 1));
        assert_eq!(g::ROCE.get(&c), 0);
        assert_eq!(g::LOG_MAX_MSG.get(&c), 30);
        assert_eq!(g::GID_TABLE_SIZE.get(&c), 1);
        assert_eq!(g::CMDIF_CHECKSUM.get(&c), 0);
        assert_eq!(g::FAST_TEARDOWN.get(&c), 0);
    }
    // No RoCE page on an IB port; unknown cap types are refused.
    h.cmd(
        &msg(
            op::QUERY_HCA_CAP,
            op_mod::query_cap(op_mod::CAP_ROCE, 1),
            16,
        ),
        4112,
    )
    .expect(st::BAD_PARAM, syn::BAD_OP_MOD);
    h.cmd(
        &msg(op::QUERY_HCA_CAP, op_mod::query_cap(op_mod::CAP_ODP, 1), 16),
        4112,
    )
    .expect(st::BAD_PARAM, syn::BAD_OP_MOD);
}

#[test]
fn roce_page_on_an_ethernet_port() {
    let mut h = H::new();
    h.enable();
    let c = h.query_cap(op_mod::CAP_ROCE, true);
    assert_eq!(roce_cap::R_ROCE_DEST_UDP_PORT.get(&c), 4791);
    assert_eq!(roce_cap::ROCE_ADDRESS_TABLE_SIZE.get(&c), 16);
    assert_ne!(roce_cap::ROCE_VERSION.get(&c) & 4, 0, "RoCE v2");
    let g_ = h.query_cap(op_mod::CAP_GENERAL, false);
    assert_eq!(g::ROCE.get(&g_), 1);
    assert_eq!(g::PORT_TYPE.get(&g_), g::PORT_TYPE_ETH);
}

#[test]
fn set_hca_cap_accepts_writable_fields_only() {
    let mut h = H::new();
    h.enable();
    let cur = h.query_cap(op_mod::CAP_GENERAL, false);
    // A read-only field changed.
    let mut c = cur.clone();
    set(&mut c, g::LOG_MAX_CQ, 5);
    h.cmd(&H::set_cap_msg(op_mod::CAP_GENERAL, &c), 16)
        .expect(st::BAD_PARAM, syn::CAP_READ_ONLY);
    // A writable field above its maximum.
    let mut c = cur.clone();
    set(&mut c, g::LOG_MAX_QP, 11);
    h.cmd(&H::set_cap_msg(op_mod::CAP_GENERAL, &c), 16)
        .expect(st::BAD_PARAM, syn::CAP_ABOVE_MAX);
    // 64 KiB UAR pages.
    let mut c = cur.clone();
    set(&mut c, g::LOG_UAR_PAGE_SZ, 4);
    h.cmd(&H::set_cap_msg(op_mod::CAP_GENERAL, &c), 16)
        .expect(st::BAD_PARAM, syn::BAD_UAR_PAGE_SZ);
    // Lowering log_max_qp and setting flags works and reads back.
    let mut c = cur.clone();
    set(&mut c, g::LOG_MAX_QP, 3);
    set(&mut c, g::MKEY_BY_NAME, 1);
    set(&mut c, g::RELEASE_ALL_PAGES, 1);
    h.ok(&H::set_cap_msg(op_mod::CAP_GENERAL, &c), 16);
    let now = h.query_cap(op_mod::CAP_GENERAL, false);
    assert_eq!(g::LOG_MAX_QP.get(&now), 3);
    assert_eq!(g::MKEY_BY_NAME.get(&now), 1);
    let max = h.query_cap(op_mod::CAP_GENERAL, true);
    assert_eq!(g::LOG_MAX_QP.get(&max), 10, "max does not change");
    // The lowered log_max_qp bounds the QP table: QPNs 2..8.
    let boot = h.query_pages(op_mod::PAGES_BOOT);
    h.give_pages(boot);
    let init = h.query_pages(op_mod::PAGES_INIT);
    h.give_pages(init);
    h.ok(&msg(op::INIT_HCA, 0, 32), 16);
    let mut m = msg(op::MODIFY_NIC_VPORT_CONTEXT, 0, 512);
    set(
        &mut m,
        cmds::modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN,
        1,
    );
    h.ok(&m, 16);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 2, 0);
    let pd = h.alloc_pd();
    let cqn = h.create_cq(uar, eqn, 2);
    let qpns: Vec<u32> = (0..6)
        .map(|_| h.create_qp(firmware_interface::ctx::qpc::ST_UD, pd, cqn, uar))
        .collect();
    assert_eq!(qpns, [2, 3, 4, 5, 6, 7]);
    let pas = h.queue_buf(2048, 0);
    let dbr = h.dbr();
    let m = H::create_qp_msg(firmware_interface::ctx::qpc::ST_UD, pd, cqn, uar, dbr, &pas);
    h.cmd(&m, 16).expect(st::NO_RES, syn::TABLE_FULL);
}

#[test]
fn set_roce_cap_page() {
    let mut h = H::new();
    h.enable();
    let cur = h.query_cap(op_mod::CAP_ROCE, false);
    let mut c = cur.clone();
    set(&mut c, roce_cap::SW_R_ROCE_SRC_UDP_PORT, 1);
    h.ok(&H::set_cap_msg(op_mod::CAP_ROCE, &c), 16);
    let mut c = cur.clone();
    set(&mut c, roce_cap::R_ROCE_DEST_UDP_PORT, 1234);
    h.cmd(&H::set_cap_msg(op_mod::CAP_ROCE, &c), 16)
        .expect(st::BAD_PARAM, syn::CAP_READ_ONLY);
    // SET op_mod must be cap_type << 1 (mode bit 0).
    h.cmd(&H::set_cap_msg(op_mod::CAP_GENERAL, &cur).tap_op_mod(1), 16)
        .expect(st::BAD_PARAM, syn::BAD_OP_MOD);
}

#[test]
fn atomic_page_negotiates_the_response_endianness() {
    use firmware_interface::ctx::atomic_caps as at;
    let mut h = H::new();
    h.enable();
    let max = h.query_cap(op_mod::CAP_ATOMIC, true);
    assert_eq!(
        at::ATOMIC_OPERATIONS.get(&max),
        at::OPS_CMP_SWAP | at::OPS_FETCH_ADD
    );
    assert_eq!(at::ATOMIC_SIZE_QP.get(&max), at::SIZE_QP_8BYTES);
    assert_eq!(at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(&max), 1);
    let cur = h.query_cap(op_mod::CAP_ATOMIC, false);
    assert_eq!(
        at::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&cur),
        at::REQ_MODE_BE,
        "big-endian responses after reset"
    );
    // Modes 2 and 3 do not exist.
    for mode in [2, 3] {
        let mut c = cur.clone();
        set(&mut c, at::ATOMIC_REQ_8B_ENDIANNESS_MODE, mode);
        h.cmd(&H::set_cap_msg(op_mod::CAP_ATOMIC, &c), 16)
            .expect(st::BAD_PARAM, syn::BAD_ATOMIC_MODE);
    }
    // A read-only field changed (and not to zero).
    let mut c = cur.clone();
    set(&mut c, at::ATOMIC_OPERATIONS, 0xf);
    h.cmd(&H::set_cap_msg(op_mod::CAP_ATOMIC, &c), 16)
        .expect(st::BAD_PARAM, syn::CAP_READ_ONLY);
    // What Linux sends: a zeroed block with only the mode set to host endianness.
    let mut z = vec![0u8; 4096];
    set(
        &mut z,
        at::ATOMIC_REQ_8B_ENDIANNESS_MODE,
        at::REQ_MODE_HOST_ENDIANNESS,
    );
    h.ok(&H::set_cap_msg(op_mod::CAP_ATOMIC, &z), 16);
    let now = h.query_cap(op_mod::CAP_ATOMIC, false);
    assert_eq!(
        at::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&now),
        at::REQ_MODE_HOST_ENDIANNESS
    );
    assert_eq!(
        at::ATOMIC_OPERATIONS.get(&now),
        at::OPS_CMP_SWAP | at::OPS_FETCH_ADD,
        "the zeros of the SET block did not clear the read-only fields"
    );
    // The current page copied back with the mode set is accepted as well.
    let mut c = now.clone();
    set(&mut c, at::ATOMIC_REQ_8B_ENDIANNESS_MODE, at::REQ_MODE_BE);
    h.ok(&H::set_cap_msg(op_mod::CAP_ATOMIC, &c), 16);

    // A device without host-endian responses refuses mode 1.
    let mut h = H::with(Profile {
        atomic_host_endianness: false,
        ..crate::connectx::tests::quiet()
    });
    h.enable();
    let max = h.query_cap(op_mod::CAP_ATOMIC, true);
    assert_eq!(at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(&max), 0);
    h.cmd(&H::set_cap_msg(op_mod::CAP_ATOMIC, &z), 16)
        .expect(st::BAD_PARAM, syn::BAD_ATOMIC_MODE);
}

trait TapOpMod {
    fn tap_op_mod(self, m: u16) -> Self;
}

impl TapOpMod for Vec<u8> {
    fn tap_op_mod(mut self, m: u16) -> Self {
        firmware_interface::mbox_in::OP_MOD.set(&mut self, u32::from(m));
        self
    }
}

#[test]
fn access_reg_host_endianness() {
    let mut h = H::new();
    let mut m = H::host_endianness_msg();
    m[16] = 0x80;
    h.ok(&m, 32);
    let mut r = H::host_endianness_msg();
    firmware_interface::mbox_in::OP_MOD.set(&mut r, u32::from(op_mod::ACCESS_REG_READ));
    let o = h.ok(&r, 32);
    assert_eq!(o[16], 0x80);
    m[16] = 0x11;
    h.cmd(&m, 32).expect(st::BAD_PARAM, syn::BAD_REGISTER_VALUE);
    let mut other = H::host_endianness_msg();
    set(&mut other, cmds::access_register_in::REGISTER_ID, 0xc00e);
    h.cmd(&other, 32).expect(st::BAD_PARAM, syn::BAD_REGISTER);
    // Register data missing.
    h.cmd(&H::host_endianness_msg()[..16], 32)
        .expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
}

#[test]
fn a_vf_refuses_host_endianness_and_reports_vf_caps() {
    let mut h = H::with(Profile::connectx5_vf());
    assert!(h.dev.profile().is_vf());
    h.enable();
    // HOST_ENDIANNESS belongs to the PF: written or read, refused on the VF.
    h.cmd(&H::host_endianness_msg(), 32)
        .expect(st::BAD_PARAM, syn::REGISTER_NOT_ON_VF);
    let mut r = H::host_endianness_msg();
    firmware_interface::mbox_in::OP_MOD.set(&mut r, u32::from(op_mod::ACCESS_REG_READ));
    h.cmd(&r, 32).expect(st::BAD_PARAM, syn::REGISTER_NOT_ON_VF);
    // A VF is no vport group manager and has a vHCA id of its own; the PF is the manager.
    let c = h.query_cap(op_mod::CAP_GENERAL, false);
    assert_eq!((g::VPORT_GROUP_MANAGER.get(&c), g::VHCA_ID.get(&c)), (0, 1));
    let mut pf = H::new();
    assert!(!pf.dev.profile().is_vf());
    pf.enable();
    let c = pf.query_cap(op_mod::CAP_GENERAL, false);
    assert_eq!((g::VPORT_GROUP_MANAGER.get(&c), g::VHCA_ID.get(&c)), (1, 0));
    pf.ok(&H::host_endianness_msg(), 32);
}

#[test]
fn teardown_profiles() {
    let mut h = H::new();
    h.init();
    let mut m = msg(op::TEARDOWN_HCA, 0, 16);
    set(
        &mut m,
        cmds::teardown_hca_in::PROFILE,
        u32::from(op_mod::TEARDOWN_PREPARE_FAST),
    );
    h.cmd(&m, 16)
        .expect(st::BAD_PARAM, syn::BAD_TEARDOWN_PROFILE);
    // Force teardown frees what is left but records it.
    let _pd = h.alloc_pd();
    set(
        &mut m,
        cmds::teardown_hca_in::PROFILE,
        u32::from(op_mod::TEARDOWN_FORCE),
    );
    h.ok(&m, 16);
    assert!(matches!(
        h.dev.errors(),
        [DeviceError::ForcedTeardownFreed { live }] if live.pds == 1
    ));
    assert_eq!(h.dev.live().pds, 0);
    assert!(!h.dev.live().hca_initialized);
    // INIT_HCA again after a teardown works.
    h.ok(&msg(op::INIT_HCA, 0, 32), 16);
}

#[test]
fn misc_queries() {
    let mut w = World::new();
    let o = w.h.ok(&msg(op::QUERY_ADAPTER, 0, 16), 272);
    assert_eq!(
        firmware_interface::ctx::query_adapter_param_block::IEEE_VENDOR_ID
            .at(16)
            .get(&o),
        0x2c9
    );
    let o = w.h.ok(&msg(op::QUERY_SPECIAL_CONTEXTS, 0, 16), 32);
    assert_ne!(cmds::query_special_contexts_out::RESD_LKEY.get(&o), 0);
    w.h.ok(&msg(op::NOP, 0, 16), 16);
}

/// A disabled function reaches host memory through nothing but its command interface: after
/// DISABLE_HCA a page given with MANAGE_PAGES is not even looked at.
#[test]
fn a_disabled_function_does_no_dma() {
    let mut h = H::new();
    h.init();
    let mut m = msg(op::TEARDOWN_HCA, 0, 16);
    set(
        &mut m,
        cmds::teardown_hca_in::PROFILE,
        u32::from(op_mod::TEARDOWN_GRACEFUL),
    );
    h.ok(&m, 16);
    h.ok(&msg(op::DISABLE_HCA, 0, 16), 16);
    let page = h.mem.alloc(4096, 4096);
    h.cmd(&H::give_msg(&[page]), 16)
        .expect(st::BAD_PARAM, syn::PAGE_NOT_MAPPED);
    assert!(
        h.dev
            .errors()
            .iter()
            .any(|e| matches!(e, DeviceError::DmaWhileDisabled(f) if f.iova == page)),
        "{:?}",
        h.dev.errors()
    );
    // Enabled again, the same page is taken.
    h.enable();
    h.ok(&H::give_msg(&[page]), 16);
}
