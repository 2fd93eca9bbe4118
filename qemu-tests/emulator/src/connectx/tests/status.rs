//! One test per command status the device returns (syndromes are the emulator's own).

use firmware_interface::ctx::cmd_hca_cap as g;
use firmware_interface::{cmd_status as st, cmds, op_mod, opcode as op};

use super::{H, World, msg, set};
use crate::{Profile, syndrome as syn};

#[test]
fn bad_op_for_unknown_opcode() {
    let mut h = H::new();
    h.cmd(&msg(0x7ff, 0, 16), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
    // An opcode of the PRM this device does not implement is the same.
    h.cmd(&msg(op::ALLOC_XRCD, 0, 16), 16)
        .expect(st::BAD_OP, syn::BAD_OPCODE);
}

#[test]
fn bad_param_for_bad_op_mod_uid_reserved_and_values() {
    let mut h = H::new();
    h.cmd(&msg(op::ENABLE_HCA, 1, 16), 16)
        .expect(st::BAD_PARAM, syn::BAD_OP_MOD);
    h.cmd(&msg(op::QUERY_PAGES, 4, 16), 16)
        .expect(st::BAD_PARAM, syn::BAD_OP_MOD);
    let mut m = msg(op::ENABLE_HCA, 0, 16);
    set(&mut m, firmware_interface::mbox_in::UID, 7);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_UID);
    let mut m = msg(op::ENABLE_HCA, 0, 16);
    m[4] = 1;
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::RESERVED_NOT_ZERO);
    let mut m = msg(op::ENABLE_HCA, 0, 16);
    set(&mut m, cmds::enable_hca_in::FUNCTION_ID, 1);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_FUNCTION_ID);
    let mut m = msg(op::SET_ISSI, 0, 16);
    set(&mut m, cmds::set_issi_in::CURRENT_ISSI, 2);
    h.cmd(&m, 16).expect(st::BAD_PARAM, syn::BAD_ISSI);
    assert!(
        h.dev
            .command_log()
            .iter()
            .all(|r| r.status == st::BAD_PARAM)
    );
}

#[test]
fn bad_sys_state_for_commands_out_of_order() {
    let mut h = H::new();
    // Object commands before ENABLE_HCA, before INIT_HCA.
    h.cmd(&msg(op::ALLOC_PD, 0, 16), 16)
        .expect(st::BAD_SYS_STATE, syn::NOT_ENABLED);
    h.cmd(&msg(op::INIT_HCA, 0, 32), 16)
        .expect(st::BAD_SYS_STATE, syn::NOT_ENABLED);
    h.enable();
    h.cmd(&msg(op::ENABLE_HCA, 0, 16), 16)
        .expect(st::BAD_SYS_STATE, syn::ALREADY_ENABLED);
    h.cmd(&msg(op::ALLOC_PD, 0, 16), 16)
        .expect(st::BAD_SYS_STATE, syn::NOT_INITIALIZED);
    h.cmd(&msg(op::TEARDOWN_HCA, 0, 16), 16)
        .expect(st::BAD_SYS_STATE, syn::NOT_INITIALIZED);
    // INIT_HCA before the pages were given.
    h.cmd(&msg(op::INIT_HCA, 0, 32), 16)
        .expect(st::BAD_SYS_STATE, syn::PAGES_MISSING);
    h.give_pages(8 + 15);
    h.cmd(&msg(op::INIT_HCA, 0, 32), 16)
        .expect(st::BAD_SYS_STATE, syn::PAGES_MISSING);
    h.give_pages(1);
    h.ok(&msg(op::INIT_HCA, 0, 32), 16);
    h.cmd(&msg(op::INIT_HCA, 0, 32), 16)
        .expect(st::BAD_SYS_STATE, syn::ALREADY_INITIALIZED);
    let cur = h.query_cap(op_mod::CAP_GENERAL, false);
    h.cmd(&H::set_cap_msg(op_mod::CAP_GENERAL, &cur), 16)
        .expect(st::BAD_SYS_STATE, syn::ALREADY_INITIALIZED);
    h.cmd(&msg(op::DISABLE_HCA, 0, 16), 16)
        .expect(st::BAD_SYS_STATE, syn::STILL_INITIALIZED);
}

#[test]
fn bad_res_for_unknown_object_in_range() {
    let mut w = World::new();
    let mut m = msg(op::DEALLOC_PD, 0, 16);
    set(&mut m, cmds::dealloc_pd_in::PD, w.pd + 1);
    w.h.cmd(&m, 16).expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    let mut m = msg(op::DESTROY_CQ, 0, 16);
    set(&mut m, cmds::destroy_cq_in::CQN, w.cqn + 5);
    w.h.cmd(&m, 16).expect(st::BAD_RES, syn::NO_SUCH_OBJECT);
    let mut m = msg(op::QP_2ERR, 0, 16);
    set(&mut m, cmds::qp_2err_in::QPN, 7);
    w.h.cmd(&m, 16).expect(st::BAD_RES, syn::BAD_QPN);
}

#[test]
fn bad_index_for_object_number_out_of_range() {
    let mut w = World::new();
    let mut m = msg(op::DEALLOC_PD, 0, 16);
    set(&mut m, cmds::dealloc_pd_in::PD, 0);
    w.h.cmd(&m, 16).expect(st::BAD_INDEX, syn::BAD_INDEX);
    set(&mut m, cmds::dealloc_pd_in::PD, 1 << 10);
    w.h.cmd(&m, 16).expect(st::BAD_INDEX, syn::BAD_INDEX);
    let mut m = msg(op::DEALLOC_UAR, 0, 16);
    set(&mut m, cmds::dealloc_uar_in::UAR, 2);
    w.h.cmd(&m, 16).expect(st::BAD_INDEX, syn::BAD_INDEX);
    let mut m = msg(op::QUERY_QP, 0, 16);
    set(&mut m, cmds::query_qp_in::QPN, 0xff_ffff);
    w.h.cmd(&m, 0x110).expect(st::BAD_INDEX, syn::BAD_QPN);
}

#[test]
fn bad_res_state_for_objects_in_use() {
    let mut w = World::new();
    let key = w.h.create_mkey(w.pd);
    // PD used by an MKEY.
    let mut m = msg(op::DEALLOC_PD, 0, 16);
    set(&mut m, cmds::dealloc_pd_in::PD, w.pd);
    w.h.cmd(&m, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    // EQ used by a CQ, UAR used by an EQ/CQ.
    let mut m = msg(op::DESTROY_EQ, 0, 16);
    set(&mut m, cmds::destroy_eq_in::EQ_NUMBER, w.eqn);
    w.h.cmd(&m, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    let mut m = msg(op::DEALLOC_UAR, 0, 16);
    set(&mut m, cmds::dealloc_uar_in::UAR, w.uar);
    w.h.cmd(&m, 16)
        .expect(st::BAD_RES_STATE, syn::OBJECT_IN_USE);
    // Graceful teardown with live objects.
    w.h.cmd(&msg(op::TEARDOWN_HCA, 0, 16), 16)
        .expect(st::BAD_RES_STATE, syn::OBJECTS_ALIVE);
    assert!(w.h.dev.live().hca_initialized);
    // Once the key is gone the PD can go.
    let mut m = msg(op::DESTROY_MKEY, 0, 16);
    set(&mut m, cmds::destroy_mkey_in::MKEY_INDEX, key);
    w.h.ok(&m, 16);
    let mut m = msg(op::DEALLOC_PD, 0, 16);
    set(&mut m, cmds::dealloc_pd_in::PD, w.pd);
    w.h.ok(&m, 16);
}

#[test]
fn no_res_when_a_table_is_full() {
    let mut h = H::with(Profile {
        log_max_pd: 2,
        max_uars: 2,
        ..crate::connectx::tests::quiet()
    });
    h.init();
    let pds: Vec<u32> = (0..3).map(|_| h.alloc_pd()).collect();
    assert_eq!(pds, [1, 2, 3]);
    h.cmd(&msg(op::ALLOC_PD, 0, 16), 16)
        .expect(st::NO_RES, syn::TABLE_FULL);
    let uars: Vec<u32> = (0..2).map(|_| h.alloc_uar()).collect();
    assert_eq!(uars, [3, 4], "UAR indexes start above the init segment");
    h.cmd(&msg(op::ALLOC_UAR, 0, 16), 16)
        .expect(st::NO_RES, syn::TABLE_FULL);
    // A freed number is handed out again.
    let mut m = msg(op::DEALLOC_PD, 0, 16);
    set(&mut m, cmds::dealloc_pd_in::PD, 2);
    h.ok(&m, 16);
    assert_eq!(h.alloc_pd(), 2);
}

#[test]
fn bad_qp_state_for_illegal_transition() {
    let mut w = World::new();
    let qpn =
        w.h.create_qp(firmware_interface::ctx::qpc::ST_RC, w.pd, w.cqn, w.uar);
    let mut m = msg(op::RTR2RTS_QP, 0, 272);
    set(&mut m, cmds::rst2init_qp_in::QPN, qpn);
    w.h.cmd(&m, 16)
        .expect(st::BAD_QP_STATE, syn::BAD_STATE_TRANSITION);
    assert_eq!(w.h.dev.qp_state(qpn), Some(0));
}

#[test]
fn bad_input_len() {
    let mut w = World::new();
    // Shorter than the fixed input.
    w.h.cmd(&msg(op::INIT_HCA, 0, 16), 16)
        .expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    w.h.cmd(&msg(op::CREATE_CQ, 0, 0x100), 16)
        .expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    // PAS list shorter than the context implies (log_cq_size 7 ⇒ 2 pages, 1 given).
    let pas = w.h.queue_buf(8192, 0xf0);
    let dbr = w.h.dbr();
    let m = H::create_cq_msg(w.uar, w.eqn, 7, dbr, &pas[..1]);
    w.h.cmd(&m, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
    // MANAGE_PAGES entries beyond inlen.
    let p = w.h.mem.alloc(4096, 4096);
    let mut m = H::give_msg(&[p]);
    set(&mut m, cmds::manage_pages_in::INPUT_NUM_ENTRIES, 2);
    w.h.cmd(&m, 16).expect(st::BAD_INPUT_LEN, syn::BAD_INLEN);
}

#[test]
fn bad_output_len() {
    let mut h = H::new();
    h.enable();
    h.cmd(&msg(op::QUERY_HCA_CAP, 1, 16), 16)
        .expect(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN);
    h.cmd(&msg(op::QUERY_ISSI, 0, 16), 64)
        .expect(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN);
    let mut m = H::host_endianness_msg();
    set(
        &mut m,
        cmds::access_register_in::REGISTER_ID,
        u32::from(op_mod::REG_HOST_ENDIANNESS),
    );
    h.cmd(&m, 16).expect(st::BAD_OUTPUT_LEN, syn::BAD_OUTLEN);
}

#[test]
fn internal_err_after_a_fatal_health_event() {
    let mut h = H::new();
    h.enable();
    h.dev
        .raise_health(firmware_interface::init_seg::health_synd::HW_FATAL_ERR);
    h.cmd(&msg(op::NOP, 0, 16), 16)
        .expect(st::INTERNAL_ERR, syn::HEALTH_FATAL);
    let hb = firmware_interface::init_seg::HEALTH;
    let mut b = [0u8; 4];
    h.dev.mmio_read(hb + 0x3c, &mut b);
    assert_eq!(b[1], 0x8, "synd");
    h.dev.mmio_read(hb + 0x38, &mut b);
    assert_ne!(b[0] & 0x80, 0, "rfr");
    // The heartbeat stops.
    let c = h.rd32(firmware_interface::init_seg::HEALTH_COUNTER);
    assert_eq!(h.rd32(firmware_interface::init_seg::HEALTH_COUNTER), c);
    let _ = g::RC;
}
