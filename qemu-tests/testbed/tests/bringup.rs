//! Bring-up and teardown of the mlx5 driver against the emulated device: the PRM order, the
//! objects, and nothing left behind.

use firmware_interface::{op_mod, opcode};
use nic_emulator::{CmdRecord, Live, Profile};
use nic_testbed::Testbed;

/// Asserts that `want` occurs in `log` in this order (other commands may stand between).
fn assert_in_order(log: &[CmdRecord], want: &[(u16, Option<u16>)]) {
    let mut it = log.iter();
    for &(op, m) in want {
        let found = it.any(|r| r.opcode == op && m.is_none_or(|m| m == r.op_mod));
        assert!(
            found,
            "command {} (op_mod {m:?}) missing or out of order in {:#?}",
            opcode::name(op).unwrap_or("?"),
            log.iter()
                .map(|r| (opcode::name(r.opcode).unwrap_or("?"), r.op_mod, r.status))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn bring_up_follows_the_prm_order_and_teardown_releases_everything() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(Default::default()).expect("bring-up");

    let live = tb.live();
    assert!(live.hca_enabled && live.hca_initialized);
    assert_eq!(live.uars, 1, "the driver's own UAR");
    assert_eq!(live.eqs, 1, "the async/command EQ");
    assert!(live.fw_pages >= Profile::default().boot_pages + Profile::default().init_pages);

    {
        let d = tb.device();
        let log = d.command_log();
        assert!(
            log.iter().all(|r| r.delivery == 0 && r.status == 0),
            "{log:#?}"
        );
        let cap_cur = (op_mod::CAP_GENERAL << 1) | op_mod::QUERY_CAP_CUR;
        assert_in_order(
            log,
            &[
                (opcode::ENABLE_HCA, None),
                (opcode::QUERY_ISSI, None),
                (opcode::SET_ISSI, None),
                (opcode::QUERY_PAGES, Some(op_mod::PAGES_BOOT)),
                (opcode::MANAGE_PAGES, Some(op_mod::MANAGE_PAGES_GIVE)),
                (opcode::ACCESS_REG, None),
                (opcode::QUERY_HCA_CAP, Some(cap_cur)),
                (opcode::SET_HCA_CAP, Some(op_mod::CAP_GENERAL << 1)),
                (opcode::QUERY_PAGES, Some(op_mod::PAGES_INIT)),
                (opcode::MANAGE_PAGES, Some(op_mod::MANAGE_PAGES_GIVE)),
                (opcode::INIT_HCA, None),
                (opcode::ALLOC_UAR, None),
                (opcode::CREATE_EQ, None),
                (opcode::ALLOC_PD, None),
            ],
        );
        // Nothing but ENABLE_HCA may precede ENABLE_HCA.
        assert_eq!(log[0].opcode, opcode::ENABLE_HCA);
    }

    let n = tb.device().command_log().len();
    dev.shutdown().expect("teardown");
    assert_eq!(tb.live(), Live::default());
    let d = tb.device();
    let tail = &d.command_log()[n..];
    assert!(
        tail.iter().all(|r| r.delivery == 0 && r.status == 0),
        "{tail:#?}"
    );
    assert_in_order(
        tail,
        &[
            (opcode::DESTROY_EQ, None),
            (opcode::DEALLOC_UAR, None),
            (opcode::TEARDOWN_HCA, None),
            (opcode::MANAGE_PAGES, Some(op_mod::MANAGE_PAGES_TAKE)),
            (opcode::DISABLE_HCA, None),
        ],
    );
    assert!(d.errors().is_empty(), "device saw errors: {:?}", d.errors());
    drop(d);
    assert_eq!(tb.dma.live_buffers(), 0, "driver DMA memory left behind");
}

#[test]
fn dropping_the_device_tears_it_down_too() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(Default::default()).unwrap();
    drop(dev);
    assert_eq!(tb.live(), Live::default());
    assert_eq!(tb.dma.live_buffers(), 0);
}

#[test]
fn reported_caps_come_from_the_device_profile() {
    let p = Profile {
        log_max_qp: 7,
        log_max_cq: 6,
        ..Profile::default()
    };
    let tb = Testbed::new(p.clone());
    let dev = tb.probe(Default::default()).unwrap();
    assert_eq!(dev.caps().log_max_qp, 7);
    assert_eq!(dev.caps().log_max_cq, 6);
    assert_eq!(dev.fw_version(), p.fw_rev);
    let attr = verbs::Provider::query_device(&dev).unwrap();
    assert_eq!(attr.max_qp, 1 << 7);
    let (maj, min, sub) = p.fw_rev;
    assert_eq!(attr.fw_ver, format!("{maj}.{min}.{sub:04}").as_str());
    dev.shutdown().unwrap();
}

#[test]
fn a_virtual_function_comes_up_without_the_pf_register() {
    // The driver told it drives a ConnectX-5 VF (as the PCI id says) skips HOST_ENDIANNESS, as
    // Linux's mlx5_core does on a VF; everything else is the PF's bring-up.
    let vf = mlx5::Config {
        device_id: 0x1018,
        ..Default::default()
    };
    assert!(vf.is_vf());
    let tb = Testbed::new(Profile::connectx5_vf());
    let dev = tb.probe(vf).expect("VF bring-up");
    assert_eq!(dev.caps().vhca_id, 1, "the VF's own vHCA");
    {
        let d = tb.device();
        let log = d.command_log();
        assert!(
            log.iter().all(|r| r.delivery == 0 && r.status == 0),
            "{log:#?}"
        );
        assert!(
            log.iter().all(|r| r.opcode != opcode::ACCESS_REG),
            "{log:#?}"
        );
        assert_in_order(
            log,
            &[
                (opcode::ENABLE_HCA, None),
                (opcode::MANAGE_PAGES, Some(op_mod::MANAGE_PAGES_GIVE)),
                (opcode::SET_HCA_CAP, Some(op_mod::CAP_GENERAL << 1)),
                (opcode::INIT_HCA, None),
                (opcode::CREATE_EQ, None),
            ],
        );
        assert!(d.errors().is_empty(), "{:?}", d.errors());
    }
    // The VF works: a CQ and an RC QP through the whole state machine's first step.
    {
        use verbs::{Provider, QpCap, QpInitAttr, QpType};
        let pd = Provider::alloc_pd(&dev).unwrap();
        let cq = Provider::create_cq(&dev, 15, 0, None).unwrap();
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let (mut qp, _) = Provider::create_qp(&dev, &pd, &init).unwrap();
        let rc = verbs::rc::RcParams::default();
        let (a, m) = rc.init_attr();
        Provider::modify_qp(&dev, &mut qp, &a, m).unwrap();
        Provider::destroy_qp(&dev, qp).unwrap();
        Provider::destroy_cq(&dev, cq).unwrap();
        Provider::dealloc_pd(&dev, pd).unwrap();
    }
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Live::default());

    // A driver that takes the VF for a PF writes HOST_ENDIANNESS: the VF refuses it and the
    // bring-up fails, undone.
    let tb = Testbed::new(Profile::connectx5_vf());
    let pf = mlx5::Config {
        device_id: 0x1017,
        ..Default::default()
    };
    let e = tb.probe(pf).expect_err("HOST_ENDIANNESS on a VF");
    assert!(
        matches!(
            e,
            mlx5::Error::Cmd {
                opcode: opcode::ACCESS_REG,
                status: 0x03,
                syndrome: nic_emulator::syndrome::REGISTER_NOT_ON_VF,
            }
        ),
        "{e:?}"
    );
    assert_eq!(tb.live(), Live::default());
}
