//! The EFA driver against the emulated EFA: bring-up in `efa_probe`'s order, the reported
//! attributes, every control-plane object through `verbs::Provider` and back to zero, and the
//! refusals (by the driver, by the device, by a device that never answers).

use firmware_interface::efa::admin::status as st;
use firmware_interface::efa::feature::host_info;
use firmware_interface::efa::opcode as op;
use nic_emulator::efa::{FailCommand, Live, Profile};
use nic_testbed::efa::{EfaDevice, EfaTestbed};
use verbs::{
    AccessFlags, AhAttr, AsyncEvent, DeviceFailure, Error, Gid, LinkLayer, MemoryRegion, Provider,
    QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, QueuePair,
};

fn up() -> (EfaTestbed, EfaDevice) {
    let tb = EfaTestbed::new(Profile::default());
    let dev = tb
        .probe(efa::Config {
            device_id: 0xefa1,
            ..Default::default()
        })
        .expect("bring-up");
    (tb, dev)
}

fn cap(send: u32, recv: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn init<'a>(qp_type: QpType, cq: &'a efa::Cq, cap: QpCap) -> QpInitAttr<'a, efa::Cq, efa::Srq> {
    QpInitAttr {
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
    }
}

/// RESET → INIT → RTR → RTS with a Q_Key and an SQ PSN.
fn to_rts(dev: &EfaDevice, qp: &mut efa::Qp, qkey: u32, psn: u32) {
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qkey,
        ..Default::default()
    };
    dev.modify_qp(qp, &a, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
        .unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    dev.modify_qp(qp, &a, M::STATE).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: psn,
        ..Default::default()
    };
    dev.modify_qp(qp, &a, M::STATE | M::SQ_PSN).unwrap();
}

#[test]
fn bring_up_follows_efa_probe_and_shutdown_releases_everything() {
    let (tb, dev) = up();
    {
        let d = tb.device();
        let ops: Vec<u8> = d.command_log().iter().map(|r| r.opcode).collect();
        // DEVICE_ATTR, QUEUE_ATTR, NETWORK_ATTR, EVENT_QUEUE_ATTR, HW_HINTS, AENQ_CONFIG;
        // SET AENQ_CONFIG, SET HOST_INFO; the user context's UAR.
        assert_eq!(
            ops,
            [
                op::GET_FEATURE,
                op::GET_FEATURE,
                op::GET_FEATURE,
                op::GET_FEATURE,
                op::GET_FEATURE,
                op::GET_FEATURE,
                op::SET_FEATURE,
                op::SET_FEATURE,
                op::ALLOC_UAR,
            ]
        );
        assert!(d.command_log().iter().all(|r| r.status == st::SUCCESS));
        assert_eq!(d.errors(), &[], "no driver mistake seen by the device");
        assert_eq!(d.enabled_aenq_groups(), 0x1e);
        let hi = d.host_info().expect("HOST_INFO set");
        assert_eq!(hi.len(), host_info::SIZE);
        assert_eq!(host_info::SPEC_VER_MAJOR.get(hi), 2);
        assert_eq!(host_info::DRIVER_VER_MINOR.get(hi), efa::DRIVER_VERSION.1);
        assert_eq!(
            d.live(),
            Live {
                uars: 1,
                ..Live::default()
            }
        );
    }
    assert!(dev.admin_up());
    dev.shutdown().expect("shutdown");
    assert_eq!(tb.live(), Live::default());
    assert_eq!(tb.dma.live_buffers(), 0, "every ring and buffer freed");
    assert_eq!(tb.device().errors(), &[]);
}

#[test]
fn device_port_and_gid_match_the_profile() {
    let (_tb, dev) = up();
    let p = Profile::default();
    let a = dev.query_device().unwrap();
    assert_eq!(a.vendor_id, 0x1d0f);
    assert_eq!(a.vendor_part_id, 0xefa1);
    assert_eq!(a.fw_ver.as_str(), "0.1.0.0");
    assert_eq!(a.max_qp, p.max_qp);
    assert_eq!(a.max_qp_wr, p.max_sq_depth.min(p.max_rq_depth));
    assert_eq!(a.max_sge, u32::from(p.max_sges.0.min(p.max_sges.1)));
    assert_eq!(a.max_sge_rd, u32::from(p.max_sges.2));
    assert_eq!(a.max_inline_data, p.inline_buf_size);
    assert_eq!((a.max_cq, a.max_cqe), (p.max_cq, p.max_cq_depth));
    assert_eq!((a.max_mr, a.max_pd), (p.max_mr, p.max_pd));
    assert_eq!((a.max_srq, a.phys_port_cnt), (0, 1));
    let at = dev.attributes();
    assert_eq!(at.max_rdma_size, p.max_rdma_size);
    assert_eq!(at.device_caps, p.device_caps);
    assert_eq!(at.db_bar, p.db_bar);
    assert_eq!(at.guid, p.guid);
    assert_eq!(at.max_llq_size, p.max_llq_size);
    assert_eq!(at.max_eq, p.max_eq);

    let port = dev.query_port(1).unwrap();
    assert_eq!(port.max_msg_sz, p.mtu);
    assert_eq!(port.link_layer, LinkLayer::Unspecified);
    assert_eq!((port.gid_tbl_len, port.pkey_tbl_len), (1, 1));
    assert_eq!(dev.query_port(2), Err(Error::InvalidArgument));
    assert_eq!(dev.query_port(0), Err(Error::InvalidArgument));
    assert_eq!(dev.query_gid(1, 0), Ok(Gid(p.gid)));
    assert_eq!(dev.query_gid(1, 1), Err(Error::InvalidArgument));
}

#[test]
fn objects_through_the_provider_and_back_to_zero() {
    let (tb, dev) = up();
    let buffers = tb.dma.live_buffers();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(100, 7, None).unwrap();
    assert_eq!(verbs::CompletionQueue::cqe(&cq), 128);
    assert_eq!(verbs::CompletionQueue::cq_context(&cq), 7);
    assert_eq!(
        cq.entry_size(),
        32,
        "RDMA write devices get extended entries"
    );
    assert!(cq.db_offset().is_some());

    for (t, qkey) in [(QpType::Ud, 0x1111), (QpType::Srd, 0x2222)] {
        let (mut qp, actual) = dev.create_qp(&pd, &init(t, &cq, cap(100, 33))).unwrap();
        assert_eq!((actual.max_send_wr, actual.max_recv_wr), (128, 64));
        assert_eq!(qp.qp_type(), t);
        assert_eq!(qp.state(), QpState::Reset);
        to_rts(&dev, &mut qp, qkey, 0x42);
        assert_eq!(qp.state(), QpState::Rts);
        assert_eq!(tb.device().qp_state(qp.handle()), Some(3));
        let q = dev.query_qp(&qp).unwrap();
        assert_eq!((q.qp_state, q.qkey, q.sq_psn), (QpState::Rts, qkey, 0x42));
        assert_eq!(q.cap, actual);
        if t == QpType::Srd {
            // RTS -> RTS may not take an RNR retry count; RTR -> RTS does (SRD, with the
            // device's capability): through ERR and RESET again.
            let e = QpAttr {
                qp_state: QpState::Err,
                ..Default::default()
            };
            dev.modify_qp(&mut qp, &e, M::STATE).unwrap();
            let r = QpAttr::default();
            dev.modify_qp(&mut qp, &r, M::STATE).unwrap();
            assert_eq!(dev.query_qp(&qp).unwrap().qp_state, QpState::Reset);
            let a = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey,
                ..Default::default()
            };
            dev.modify_qp(&mut qp, &a, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
                .unwrap();
            dev.modify_qp(
                &mut qp,
                &QpAttr {
                    qp_state: QpState::Rtr,
                    ..Default::default()
                },
                M::STATE,
            )
            .unwrap();
            let a = QpAttr {
                qp_state: QpState::Rts,
                sq_psn: 9,
                rnr_retry: 5,
                ..Default::default()
            };
            dev.modify_qp(&mut qp, &a, M::STATE | M::SQ_PSN | M::RNR_RETRY)
                .unwrap();
            assert_eq!(dev.query_qp(&qp).unwrap().rnr_retry, 5);
        }
        dev.destroy_qp(qp).unwrap();
    }

    let ah = dev
        .create_ah(
            &pd,
            &AhAttr {
                dgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(tb.live().ahs, 1);

    // Inline (≤ 4 pages), one page-list buffer (≤ 510), a chain of chunks (> 510).
    for pages in [1usize, 4, 5, 510, 511, 1100] {
        let buf = dev.alloc_buf(pages * 4096).unwrap();
        let mr = dev
            .reg_mr(
                &pd,
                buf.clone(),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )
            .unwrap_or_else(|e| panic!("{pages} pages: {e}"));
        assert_eq!(mr.page_count(), pages as u32);
        assert_eq!((mr.addr(), mr.length()), (buf.addr(), buf.len() as u64));
        assert!(mr.buffer().is_some());
        dev.dereg_mr(mr).unwrap();
    }
    // A window that straddles pages.
    let buf = dev.alloc_buf(3 * 4096).unwrap();
    let mr = dev
        .reg_mr(&pd, buf.slice(100..8200).unwrap(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(mr.page_count(), 3);
    assert_eq!(tb.live().mrs, 1);
    dev.dereg_mr(mr).unwrap();
    drop(buf);

    dev.destroy_ah(ah).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    assert_eq!(
        tb.live(),
        Live {
            uars: 1,
            ..Live::default()
        }
    );
    assert_eq!(
        tb.dma.live_buffers(),
        buffers,
        "rings, RQs and page lists freed"
    );
    assert_eq!(tb.device().errors(), &[]);
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Live::default());
}

#[test]
fn the_driver_refuses_what_efa_does_not_do() {
    let (tb, dev) = up();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, 0, None).unwrap();
    for t in [QpType::Rc, QpType::Gsi] {
        assert_eq!(
            dev.create_qp(&pd, &init(t, &cq, cap(8, 8))).err(),
            Some(Error::NotSupported)
        );
    }
    let p = Profile::default();
    for bad in [
        cap(0, 8),
        cap(p.max_sq_depth + 1, 8),
        cap(8, p.max_rq_depth + 1),
        QpCap {
            max_send_sge: u32::from(p.max_sges.0) + 1,
            ..cap(8, 8)
        },
        QpCap {
            max_recv_sge: u32::from(p.max_sges.1) + 1,
            ..cap(8, 8)
        },
        QpCap {
            max_inline_data: p.inline_buf_size + 1,
            ..cap(8, 8)
        },
        QpCap {
            max_recv_sge: 0,
            ..cap(8, 8)
        },
        cap(u32::MAX, u32::MAX),
    ] {
        assert_eq!(
            dev.create_qp(&pd, &init(QpType::Srd, &cq, bad)).err(),
            Some(Error::InvalidArgument),
            "{bad:?}"
        );
    }
    assert_eq!(
        dev.create_cq(0, 0, None).err(),
        Some(Error::InvalidArgument)
    );
    assert_eq!(
        dev.create_cq(p.max_cq_depth + 1, 0, None).err(),
        Some(Error::InvalidArgument)
    );
    assert_eq!(
        dev.create_cq(u32::MAX, 0, None).err(),
        Some(Error::InvalidArgument)
    );
    // A completion channel is an EQ of its own, gone with the channel.
    let ch = dev.create_comp_channel().unwrap();
    assert_eq!(tb.live().eqs, 1);
    dev.destroy_comp_channel(ch).unwrap();
    assert_eq!(tb.live().eqs, 0);
    assert_eq!(
        dev.create_srq(&pd, &Default::default()).err(),
        Some(Error::NotSupported)
    );
    assert_eq!(dev.alloc_buf(0).err(), Some(Error::InvalidArgument));
    let buf = dev.alloc_buf(4096).unwrap();
    assert_eq!(
        dev.reg_mr(&pd, buf.slice(0..0).unwrap(), AccessFlags::LOCAL_WRITE)
            .err(),
        Some(Error::InvalidArgument)
    );
    assert_eq!(
        dev.reg_mr(&pd, buf.clone(), AccessFlags::REMOTE_ATOMIC)
            .err(),
        Some(Error::NotSupported)
    );
    // Memory of another allocator (another device address space).
    let other = EfaTestbed::new(Profile::default());
    let odev = other.probe(Default::default()).unwrap();
    let foreign = odev.alloc_buf(4096).unwrap();
    assert_eq!(
        dev.reg_mr(&pd, foreign, AccessFlags::LOCAL_WRITE).err(),
        Some(Error::InvalidArgument)
    );
    assert_eq!(
        dev.create_ah(&pd, &AhAttr::default()).err(),
        Some(Error::InvalidArgument),
        "the zero GID"
    );

    let (mut qp, _) = dev
        .create_qp(&pd, &init(QpType::Ud, &cq, cap(8, 8)))
        .unwrap();
    // The transition table: RESET -> RTR does not exist; INIT needs the Q_Key.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    assert_eq!(
        dev.modify_qp(&mut qp, &rtr, M::STATE),
        Err(Error::InvalidArgument)
    );
    let i = QpAttr {
        qp_state: QpState::Init,
        port_num: 2,
        ..Default::default()
    };
    assert_eq!(
        dev.modify_qp(&mut qp, &i, M::STATE | M::PORT | M::PKEY_INDEX),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        dev.modify_qp(&mut qp, &i, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY),
        Err(Error::InvalidArgument),
        "port 2"
    );
    assert_eq!(qp.state(), QpState::Reset);
    // Nothing of the refused modifies reached the device.
    assert_eq!(tb.device().qp_state(qp.handle()), Some(0));
    // Receives need a QP past RESET; an empty CQ polls nothing; no completion events yet.
    let sge = [];
    assert_eq!(
        dev.post_recv(
            &mut qp,
            &[verbs::RecvWr {
                wr_id: 1,
                sg_list: &sge
            }]
        )
        .map_err(|e| e.error),
        Err(Error::InvalidArgument)
    );
    let mut wc = [verbs::WorkCompletion::default(); 1];
    assert_eq!(dev.poll_cq(&cq, &mut wc), Ok(0));
    // A CQ not on a channel has no EQ to notify.
    assert_eq!(dev.req_notify_cq(&cq, false), Err(Error::InvalidArgument));

    // The device refuses a CQ with a QP on it: EBUSY, and the CQ comes back.
    let e = dev.destroy_cq(cq).unwrap_err();
    assert_eq!(e.error, Error::Busy);
    let cq = e.object.expect("the CQ is handed back");
    let e = dev.dealloc_pd(pd).unwrap_err();
    assert_eq!(e.error, Error::Busy);
    let pd = e.object.unwrap();
    dev.destroy_qp(qp).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    drop(buf);
    assert_eq!(tb.live().pds + tb.live().cqs + tb.live().qps, 0);
}

#[test]
fn commands_the_device_fails_surface_with_their_status() {
    let (tb, dev) = up();
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::ALLOC_PD,
        status: st::UNKNOWN_ERROR,
        times: Some(1),
    });
    assert_eq!(
        dev.alloc_pd().err(),
        Some(Error::Device(DeviceFailure::new(
            op::ALLOC_PD.into(),
            st::UNKNOWN_ERROR,
            0
        )))
    );
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, 0, None).unwrap();
    let buffers = tb.dma.live_buffers();
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::CREATE_QP,
        status: st::ILLEGAL_PARAMETER,
        times: Some(1),
    });
    let e = dev
        .create_qp(&pd, &init(QpType::Srd, &cq, cap(8, 8)))
        .unwrap_err();
    assert_eq!(
        e,
        Error::Device(DeviceFailure::new(
            op::CREATE_QP.into(),
            st::ILLEGAL_PARAMETER,
            0
        ))
    );
    assert_eq!(e.errno(), 5);
    assert_eq!(
        tb.dma.live_buffers(),
        buffers,
        "a refused create frees its RQ ring"
    );
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::CREATE_CQ,
        status: st::RESOURCE_ALLOCATION_FAILURE,
        times: Some(1),
    });
    assert_eq!(dev.create_cq(16, 0, None).err(), Some(Error::NoMemory));
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::REG_MR,
        status: st::MALFORMED_REQUEST,
        times: Some(1),
    });
    let buf = dev.alloc_buf(8 * 4096).unwrap();
    assert_eq!(
        dev.reg_mr(&pd, buf.clone(), AccessFlags::LOCAL_WRITE).err(),
        Some(Error::Device(DeviceFailure::new(
            op::REG_MR.into(),
            st::MALFORMED_REQUEST,
            0
        )))
    );
    // A refused destroy hands the object back, intact.
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::DESTROY_CQ,
        status: st::UNKNOWN_ERROR,
        times: Some(1),
    });
    let e = dev.destroy_cq(cq).unwrap_err();
    assert!(matches!(e.error, Error::Device(_)));
    dev.destroy_cq(e.object.unwrap()).unwrap();
    dev.dealloc_pd(pd).unwrap();
    assert!(dev.admin_up(), "a refusal leaves the admin queue running");
    drop(buf);
}

#[test]
fn refused_bring_ups_are_reported() {
    let tb = EfaTestbed::new(Profile::default());
    tb.device().faults().never_ready = true;
    let e = tb.probe(Default::default()).unwrap_err();
    assert_eq!(e, efa::Error::NotReady);
    assert_eq!(verbs::Error::from(e), Error::TimedOut);
    assert!(tb.device().command_log().is_empty());

    let tb = EfaTestbed::new(Profile {
        version: (0, 0),
        ..Profile::default()
    });
    assert!(matches!(
        tb.probe(Default::default()),
        Err(efa::Error::BadRegister { offset: 0, .. })
    ));

    let tb = EfaTestbed::new(Profile {
        reset_timeout: 0,
        ..Profile::default()
    });
    assert!(matches!(
        tb.probe(Default::default()),
        Err(efa::Error::BadRegister { offset: 8, .. })
    ));

    // Without the async event groups the driver needs.
    let tb = EfaTestbed::new(Profile {
        aenq_groups: 0b110,
        ..Profile::default()
    });
    assert_eq!(
        tb.probe(Default::default()).err(),
        Some(efa::Error::NotSupported)
    );
    // The failed probe reset the device (reason INIT_ERR): nothing is left.
    assert_eq!(tb.live(), Live::default());
    assert_eq!(tb.dma.live_buffers(), 0);

    // A device failing a bring-up command.
    let tb = EfaTestbed::new(Profile::default());
    tb.device().faults().fail_command = Some(FailCommand {
        opcode: op::GET_FEATURE,
        status: st::UNKNOWN_ERROR,
        times: Some(1),
    });
    let e = tb.probe(Default::default()).unwrap_err();
    assert_eq!(
        e,
        efa::Error::Admin {
            opcode: op::GET_FEATURE,
            status: st::UNKNOWN_ERROR,
            extended: 0
        }
    );
    assert!(e.to_string().contains("GET_FEATURE"), "{e}");

    // Read-less reads never answered.
    let tb = EfaTestbed::new(Profile::default());
    tb.device().faults().drop_readless = true;
    assert!(matches!(
        tb.probe(Default::default()),
        Err(efa::Error::ReadTimeout { .. })
    ));
}

#[test]
fn a_device_that_never_completes_times_out() {
    let (tb, dev) = up();
    tb.device().faults().stall_admin = true;
    let t0 = tb.world().now_ns();
    assert_eq!(dev.alloc_pd().err(), Some(Error::TimedOut));
    assert!(
        tb.world().now_ns() - t0 >= efa::DEFAULT_ADMIN_TIMEOUT_NS,
        "the default timeout of 30 s (virtual time)"
    );
    assert!(!dev.admin_up());
    // The queue stays down: the device may still complete the command.
    tb.device().faults().stall_admin = false;
    assert_eq!(dev.alloc_pd().err(), Some(Error::NoDevice));
    // Teardown still resets the device.
    assert!(dev.shutdown().is_err());
    assert_eq!(tb.live(), Live::default());

    // With a short configured timeout.
    let tb = EfaTestbed::new(Profile::default());
    let dev = tb
        .probe(efa::Config {
            admin_timeout_ns: Some(5_000_000),
            ..Default::default()
        })
        .unwrap();
    tb.device().faults().stall_admin = true;
    let t0 = tb.world().now_ns();
    assert_eq!(dev.create_cq(8, 0, None).err(), Some(Error::TimedOut));
    assert!(tb.world().now_ns() - t0 < 1_000_000_000);
}

#[test]
fn keep_alive_events_are_consumed_and_counted() {
    let (tb, dev) = up();
    // More than the queue holds, in two rounds: the driver's consumer doorbell frees it.
    for round in 0..2 {
        for _ in 0..12 {
            assert!(tb.device().post_keep_alive());
        }
        assert_eq!(dev.get_async_event(), Ok(None::<AsyncEvent>));
        assert_eq!(dev.aenq_counters().keep_alive, 12 * (round + 1));
    }
    // Admin commands handle them too.
    assert!(tb.device().post_keep_alive());
    let pd = dev.alloc_pd().unwrap();
    assert_eq!(dev.aenq_counters().keep_alive, 25);
    dev.dealloc_pd(pd).unwrap();
    assert_eq!(tb.device().errors(), &[], "no overrun, no stray doorbell");
}
