//! Device objects through real commands: PD, UAR, CQ, MKEY and QP (RC and UD) made, walked
//! through the PRM's QP states, queried, destroyed; the device's counters follow every step.

use firmware_interface::{cmd_status, opcode};
use mlx5::Error;
use mlx5::raw::{
    AddressPath, MkeyAccess, QpAccess, QpCreate, QpModify, QpState, RawDevice, ServiceType,
    Transition,
};
use nic_emulator::{Live, Profile};
use nic_hal::DmaBuf;
use nic_testbed::Testbed;

#[test]
fn objects_live_and_die_with_their_commands() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(Default::default()).unwrap();
    let base = tb.live_settled(&dev);

    let pd = dev.alloc_pd().unwrap();
    let uar = dev.alloc_uar().unwrap();
    let eqn = dev.driver_eqn().unwrap();
    let scq = dev.create_cq(6, eqn).unwrap();
    let rcq = dev.create_cq(6, eqn).unwrap();
    assert_ne!(scq.cqn(), rcq.cqn());

    // Freed by hand below, only once the key is destroyed (a failing test leaks it).
    let mem = std::mem::ManuallyDrop::new(DmaBuf::new(dev.dma(), 3 * 4096, 4096).unwrap());
    let pages: Vec<u64> = (0..3).map(|i| mem.iova() + i * 4096).collect();
    let access = MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE | MkeyAccess::REMOTE_READ;
    // SAFETY: `mem` is freed only after `destroy_mkey` succeeded.
    let mr = unsafe { dev.create_mkey(pd, mem.iova(), 3 * 4096, access, &pages) }.unwrap();
    assert_eq!(mr.key() >> 8, mr.index());
    assert_eq!(mr.lkey(), mr.rkey());

    let qp = dev
        .create_qp(&QpCreate {
            service: ServiceType::Rc,
            pd,
            send_cqn: scq.cqn(),
            recv_cqn: rcq.cqn(),
            uar: Some(uar),
            ..QpCreate::default()
        })
        .unwrap();
    let ud = dev
        .create_qp(&QpCreate {
            service: ServiceType::Ud,
            pd,
            send_cqn: scq.cqn(),
            recv_cqn: rcq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    assert!(qp.qpn() >= 2 && ud.qpn() >= 2 && qp.qpn() != ud.qpn());

    // The creates may have needed firmware pages (given while they waited): the device
    // holds what the driver gave, no more and no less.
    assert_eq!(
        tb.live_settled(&dev),
        Live {
            pds: base.pds + 1,
            uars: base.uars + 1,
            cqs: base.cqs + 2,
            mkeys: base.mkeys + 1,
            qps: base.qps + 2,
            fw_pages: dev.fw_pages() as u32,
            ..base
        }
    );

    // A PD or CQ still in use cannot go.
    assert!(matches!(
        dev.dealloc_pd(pd),
        Err(Error::Cmd {
            opcode: opcode::DEALLOC_PD,
            status: cmd_status::BAD_RES_STATE,
            ..
        })
    ));

    dev.destroy_qp(ud).unwrap();
    dev.destroy_qp(qp).unwrap();
    dev.destroy_mkey(mr).unwrap();
    dev.destroy_cq(scq).unwrap();
    dev.destroy_cq(rcq).unwrap();
    dev.dealloc_uar(uar).unwrap();
    dev.dealloc_pd(pd).unwrap();
    // The pages of the destroyed objects came back once asked for.
    assert_eq!(tb.live_settled(&dev), base);
    drop(std::mem::ManuallyDrop::into_inner(mem));
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Live::default());
    assert_eq!(tb.dma.live_buffers(), 0);
    assert!(
        tb.device().errors().is_empty(),
        "{:?}",
        tb.device().errors()
    );
}

fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

fn rc_pair_attrs(remote_qpn: u32) -> QpModify {
    QpModify {
        access: QpAccess::REMOTE_WRITE | QpAccess::REMOTE_READ,
        remote_qpn,
        rq_psn: 0x1234,
        sq_psn: 0x5678,
        retry_count: 5,
        rnr_retry: 6,
        min_rnr_nak: 12,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        path: AddressPath {
            rgid: ipv4_gid([127, 0, 0, 2]),
            rmac: [2, 0, 0, 0, 0, 2],
            grh: true,
            ..AddressPath::default()
        },
        ..QpModify::default()
    }
}

#[test]
fn rc_qp_walks_the_prm_state_machine() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(5, dev.driver_eqn().unwrap()).unwrap();
    let mut qp = dev
        .create_qp(&QpCreate {
            pd,
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    // RoCE: the source GID the path names must be programmed first (the device checks it).
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, ipv4_gid([127, 0, 0, 1]), mac).unwrap();
    let attrs = rc_pair_attrs(0x77);
    let qpn = qp.qpn();
    let state = |tb: &Testbed| tb.device().qp_state(qpn);

    assert_eq!(dev.query_qp(&qp).unwrap().state, QpState::Reset);
    // RTR straight from RESET is refused (by the driver's state tracking or by the device).
    assert!(
        dev.modify_qp(&mut qp, Transition::Init2Rtr, &attrs)
            .is_err()
    );
    assert_eq!(state(&tb), Some(0));

    dev.modify_qp(&mut qp, Transition::Rst2Init, &attrs)
        .unwrap();
    assert_eq!(dev.qp_state(&qp), QpState::Init);
    dev.modify_qp(&mut qp, Transition::Init2Rtr, &attrs)
        .unwrap();
    dev.modify_qp(&mut qp, Transition::Rtr2Rts, &attrs).unwrap();
    let q = dev.query_qp(&qp).unwrap();
    assert_eq!(q.state, QpState::Rts);
    assert_eq!(q.remote_qpn, 0x77);
    assert_eq!(q.next_rcv_psn, 0x1234);
    assert_eq!(q.next_send_psn, 0x5678);
    assert_eq!(q.retry_count, 5);
    assert_eq!(q.rnr_retry, 6);
    assert_eq!(q.min_rnr_nak, 12);
    assert_eq!(q.pd, pd);
    dev.modify_qp(&mut qp, Transition::Rts2Rts, &attrs).unwrap();
    dev.modify_qp(&mut qp, Transition::ToErr, &attrs).unwrap();
    assert_eq!(dev.query_qp(&qp).unwrap().state, QpState::Error);
    dev.modify_qp(&mut qp, Transition::ToRst, &attrs).unwrap();
    assert_eq!(state(&tb), Some(0));
    dev.modify_qp(&mut qp, Transition::Rst2Init, &attrs)
        .unwrap();
    assert_eq!(dev.query_qp(&qp).unwrap().state, QpState::Init);

    dev.destroy_qp(qp).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Live::default());
}

#[test]
fn the_device_enforces_illegal_transitions_itself() {
    // Hand-built modify commands, bypassing the driver's own state tracking: the device must
    // answer BAD_QP_STATE.
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(5, dev.driver_eqn().unwrap()).unwrap();
    let qp = dev
        .create_qp(&QpCreate {
            pd,
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    use firmware_interface::{cmds::rst2init_qp_in as m, mbox_in};
    for op in [opcode::INIT2RTR_QP, opcode::RTR2RTS_QP, opcode::RTS2RTS_QP] {
        let mut inp = vec![0u8; m::SIZE];
        mbox_in::OPCODE.set(&mut inp, u32::from(op));
        m::QPN.set(&mut inp, qp.qpn());
        let err = dev.exec(&inp, 16).unwrap_err();
        assert_eq!(
            err,
            Error::Cmd {
                opcode: op,
                status: cmd_status::BAD_QP_STATE,
                syndrome: err_syndrome(&err)
            }
        );
    }
    dev.destroy_qp(qp).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    dev.shutdown().unwrap();
}

fn err_syndrome(e: &Error) -> u32 {
    match e {
        Error::Cmd { syndrome, .. } => *syndrome,
        _ => 0,
    }
}

#[test]
fn object_tables_are_bounded_by_the_profile() {
    let tb = Testbed::new(Profile {
        log_max_pd: 3,
        ..Profile::default()
    });
    let dev = tb.probe(Default::default()).unwrap();
    let mut pds = vec![];
    let err = loop {
        match dev.alloc_pd() {
            Ok(pd) => pds.push(pd),
            Err(e) => break e,
        }
        assert!(pds.len() <= 8, "more PDs than the device has");
    };
    // 8 PD numbers: 0 is reserved by the device and one is the driver's own.
    assert_eq!(pds.len(), 6);
    assert!(
        matches!(
            err,
            Error::Cmd {
                status: cmd_status::NO_RES,
                ..
            } | Error::NoResources
        ),
        "{err:?}"
    );
    assert!(err.errno() == 11 || err.errno() == 12);
    for pd in pds {
        dev.dealloc_pd(pd).unwrap();
    }
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Live::default());
}
