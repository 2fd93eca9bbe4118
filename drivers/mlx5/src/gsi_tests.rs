//! The GSI QP (QP1): created with `qpc.st` QP1, numbered 1 by the device, UD work requests.

use firmware_interface::ctx::qpc;
use firmware_interface::wqe::DatagramSeg;
use firmware_interface::{cmd_status, opcode};
use verbs::{
    AhAttr, Gid, Provider, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpType, QueuePair, SendWr,
    Sge, UdDest, WrOpcode,
};

use crate::fake::*;
use crate::qp::*;
use crate::*;

const GSI_QKEY: u32 = 0x8001_0000;

fn init<'a>(cq: &'a Cq) -> QpInitAttr<'a, Cq, crate::Srq> {
    QpInitAttr {
        qp_type: QpType::Gsi,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    }
}

#[test]
fn gsi_qp_is_qp1_once_and_posts_datagram_wqes() {
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 32, 0, None).unwrap();
    let (mut qp, cap) = Provider::create_qp(&dev, &pd, &init(&cq)).unwrap();
    assert_eq!(qp.qp_num(), 1);
    assert_eq!(QueuePair::qp_type(&qp), QpType::Gsi);
    assert_eq!(qp.service(), ServiceType::Gsi);
    assert_eq!(b.fw().qp_state[&1], (qpc::STATE_RST, qpc::ST_QP1));
    // datagram WQE sizes, as UD
    assert_eq!((cap.max_send_wr, cap.max_send_sge), (8, 4));

    // a second one: the device refuses, nothing is left behind
    let live = b.heap.live_buffers();
    let e = Provider::create_qp(&dev, &pd, &init(&cq)).unwrap_err();
    assert_ne!(e, verbs::Error::InvalidArgument, "{e:?}");
    assert_eq!(b.heap.live_buffers(), live);

    // RESET -> INIT -> RTR -> RTS with the UD attributes
    let mut a = QpAttr {
        qp_state: verbs::QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qkey: GSI_QKEY,
        ..QpAttr::default()
    };
    // access flags are not a GSI attribute
    assert!(
        Provider::modify_qp(
            &dev,
            &mut qp,
            &a,
            M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS
        )
        .is_err()
    );
    Provider::modify_qp(
        &dev,
        &mut qp,
        &a,
        M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY,
    )
    .unwrap();
    a.qp_state = verbs::QpState::Rtr;
    Provider::modify_qp(&dev, &mut qp, &a, M::STATE).unwrap();
    // As Linux's mlx5_ib: QP1 reaches RTR with a 256-byte MTU and 2^8-byte messages.
    let rtr = b.fw().inputs[&opcode::INIT2RTR_QP].clone();
    let qb = firmware_interface::cmds::init2rtr_qp_in::QPC.byte_off();
    assert_eq!(
        (qpc::MTU.at(qb).get(&rtr), qpc::LOG_MSG_MAX.at(qb).get(&rtr)),
        (qpc::MTU_256, 8)
    );
    a.qp_state = verbs::QpState::Rts;
    Provider::modify_qp(&dev, &mut qp, &a, M::STATE | M::SQ_PSN).unwrap();
    assert_eq!(qp.qkey(), GSI_QKEY);
    assert_eq!(QueuePair::state(&qp), verbs::QpState::Rts);

    let ah = Provider::create_ah(
        &dev,
        &pd,
        &AhAttr {
            dgid: Gid::from_ipv4([10, 0, 0, 9]),
            is_global: true,
            port_num: 1,
            dmac: [2, 0, 0, 0, 0, 9],
            ..AhAttr::default()
        },
    )
    .unwrap();
    let sg = [Sge {
        addr: 0x10_0000,
        length: 256,
        lkey: 0x77,
    }];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: &sg,
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 1,
            remote_qkey: GSI_QKEY,
        }),
        ..SendWr::default()
    };
    Provider::post_send(&dev, &mut qp, &[wr]).unwrap();
    // control segment, then the datagram segment naming QP1 and the GSI Q_Key
    let mut av = [0u8; 48];
    qp.buffer().read(qp.sq_offset() + 16, &mut av).unwrap();
    let d = DatagramSeg::from_bytes(&av);
    assert_eq!(d.qkey.get(), GSI_QKEY);
    assert_eq!(d.dqp_dct.get() & 0xff_ffff, 1);

    Provider::destroy_ah(&dev, ah).unwrap();
    Provider::destroy_qp(&dev, qp).unwrap();
    // QP1 is free again
    let (qp, _) = Provider::create_qp(&dev, &pd, &init(&cq)).unwrap();
    assert_eq!(qp.qp_num(), 1);
    Provider::destroy_qp(&dev, qp).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
}

#[test]
fn gsi_qp_numbered_other_than_1_is_bad_output() {
    let b = bench();
    let dev = b.probe().unwrap();
    let cq = dev.create_cq(4, dev.driver_eqn().unwrap()).unwrap();
    b.hook(on(
        opcode::CREATE_QP,
        Reply::ok(out_with(16, |o| {
            o[0] = cmd_status::OK;
            firmware_interface::cmds::create_qp_out::QPN.set(o, 5);
        })),
    ));
    let e = dev
        .create_qp(&QpCreate {
            service: ServiceType::Gsi,
            pd: dev.driver_pd().unwrap(),
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            log_sq_size: 3,
            log_rq_size: 3,
            ..QpCreate::default()
        })
        .unwrap_err();
    assert_eq!(
        e,
        Error::BadOutput {
            opcode: opcode::CREATE_QP,
            what: OutputFault::ObjectNumber { value: 5 },
        }
    );
}
