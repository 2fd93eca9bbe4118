//! Teardown always stops the device: with objects still alive (QPs connected to a peer) the
//! driver falls back from the graceful TEARDOWN_HCA to the forced one and disables the
//! function, reports what was left, and from then on a peer's RDMA WRITE reaches nothing.
//! A create whose outcome is unknown (the device may have made the object) leaves its memory
//! leaked, never freed.

mod common;

use common::*;
use firmware_interface::{cmd_status, op_mod, opcode};
use mlx5::{Error, LiveObjects};
use nic_emulator::{DeviceError, FailCommand, Live};
use verbs::{
    AccessFlags, Buffer, MemoryRegion, Provider, QpInitAttr, QpType, RemoteOp, SendFlags, SendWr,
    SrqAttr, WcStatus, WrOpcode,
};

/// Two nodes with a connected RC QP pair; one RDMA WRITE from `a` into `b` went through.
fn connected(
    seed: u64,
) -> (
    std::sync::Arc<nic_testbed::World>,
    Node,
    Node,
    mlx5::Qp,
    mlx5::Qp,
) {
    let (world, a, b) = pair(seed, 1 << 14);
    let (mut qa, _) = a.qp(QpType::Rc, CAP, true);
    let (mut qb, _) = b.qp(QpType::Rc, CAP, true);
    let c = Conn {
        // Short retries: the write to a stopped peer fails fast on the virtual clock.
        timeout: 8,
        retry_cnt: 2,
        ..Conn::default()
    };
    a.connect(&mut qa, &b, qb.qpn(), &c);
    b.connect(&mut qb, &a, qa.qpn(), &c);
    a.write(0, b"before the teardown");
    rdma_write(&a, &mut qa, &b, 1);
    let wc = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(&b.read(0x100, 19), b"before the teardown");
    (world, a, b, qa, qb)
}

/// An RDMA WRITE of `a`'s first 19 bytes to offset 0x100 of `b`'s buffer.
fn rdma_write(a: &Node, qa: &mut mlx5::Qp, b: &Node, wr_id: u64) {
    let sg = [a.sge(0, 19)];
    a.post_send(
        qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Rdma {
                remote_addr: b.addr(0x100),
                rkey: b.mr.rkey(),
            },
            ..wr(wr_id, WrOpcode::RdmaWrite, &sg)
        }],
    );
}

/// The bytes of `mem`.
fn snapshot(mem: &Buffer) -> Vec<u8> {
    let mut v = vec![0u8; mem.len()];
    mem.read(0, &mut v).unwrap();
    v
}

/// The TEARDOWN_HCA / DISABLE_HCA records of `b`'s device log from `from` on:
/// `(opcode, status)`.
fn stop_commands(b: &nic_testbed::Testbed, from: usize) -> Vec<(u16, u8)> {
    b.device().command_log()[from..]
        .iter()
        .filter(|r| matches!(r.opcode, opcode::TEARDOWN_HCA | opcode::DISABLE_HCA))
        .map(|r| (r.opcode, r.status))
        .collect()
}

#[test]
fn shutdown_with_connected_qps_stops_the_device() {
    let (world, a, b, mut qa, qb) = connected(81);
    assert_eq!(
        b.dev.live_objects(),
        LiveObjects {
            qps: 1,
            cqs: 1,
            mkeys: 1,
            pds: 1,
            // the QP's own UAR page (BlueFlame)
            uars: 1,
            ..LiveObjects::default()
        }
    );
    let Node {
        tb: btb,
        dev: bdev,
        mem: bmem,
        pd: bpd,
        cq: bcq,
        mr: bmr,
        ..
    } = b;
    let rkey = bmr.rkey();
    let target = bmem.addr() + 0x100;
    let from = btb.device().command_log().len();
    let err = bdev.shutdown().unwrap_err();
    let Error::ObjectsAlive { live, stopped } = err else {
        panic!("{err:?}");
    };
    assert!(stopped, "{err}");
    // The caller's objects, and the driver's EQ and PD that could not go before them.
    assert_eq!((live.qps, live.cqs, live.mkeys), (1, 1, 1), "{live}");
    assert!(live.pds >= 1 && live.eqs >= 1, "{live}");
    assert_eq!(err.errno(), 16, "EBUSY");
    // Graceful refused, force done, then disabled.
    assert_eq!(
        stop_commands(&btb, from),
        vec![
            (opcode::TEARDOWN_HCA, cmd_status::BAD_RES_STATE),
            (opcode::TEARDOWN_HCA, 0),
            (opcode::DISABLE_HCA, 0),
        ]
    );
    assert!(matches!(
        btb.device().errors(),
        [DeviceError::ForcedTeardownFreed { .. }]
    ));
    assert_eq!(btb.live(), Live::default(), "the device holds nothing");

    // The peer writes into the memory the QP and key named: nothing arrives.
    let before = snapshot(&bmem);
    a.write(0, b"after the teardown!");
    let sg = [a.sge(0, 19)];
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Rdma {
                remote_addr: target,
                rkey,
            },
            ..wr(2, WrOpcode::RdmaWrite, &sg)
        }],
    );
    let wc = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(wc[0].status, WcStatus::RetryExcErr, "{wc:?}");
    assert_eq!(
        snapshot(&bmem),
        before,
        "the stopped device wrote host memory"
    );
    assert!(btb.live().fw_pages == 0 && !btb.live().hca_enabled);
    // The objects the caller still held go without commands; their memory stays leaked.
    drop((qb, bcq, bmr, bpd));
    a.teardown(vec![qa]);
}

#[test]
fn dropping_the_driver_with_objects_alive_stops_the_device_too() {
    let (world, a, b, mut qa, qb) = connected(82);
    let Node {
        tb: btb,
        dev: bdev,
        mem: bmem,
        mr: bmr,
        ..
    } = b;
    let (rkey, target) = (bmr.rkey(), bmem.addr() + 0x100);
    let from = btb.device().command_log().len();
    drop(bdev);
    assert_eq!(
        stop_commands(&btb, from),
        vec![
            (opcode::TEARDOWN_HCA, cmd_status::BAD_RES_STATE),
            (opcode::TEARDOWN_HCA, 0),
            (opcode::DISABLE_HCA, 0),
        ]
    );
    assert!(!btb.live().hca_enabled);
    let before = snapshot(&bmem);
    a.write(0, b"after the teardown!");
    let sg = [a.sge(0, 19)];
    a.post_send(
        &mut qa,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Rdma {
                remote_addr: target,
                rkey,
            },
            ..wr(2, WrOpcode::RdmaWrite, &sg)
        }],
    );
    assert_eq!(
        poll_n(&world, &a, &a.cq, 1)[0].status,
        WcStatus::RetryExcErr
    );
    assert_eq!(snapshot(&bmem), before);
    drop((qb, bmr));
    a.teardown(vec![qa]);
}

/// Every create whose outcome is unknown (here: an output the driver refuses, a number with
/// reserved bits set) leaves the memory it gave the device allocated; a create the firmware
/// refused frees it.
#[test]
fn a_create_that_may_have_happened_leaks_its_memory() {
    let (_world, _a, n) = pair(83, 1 << 12);
    // Every command slot keeps its mailboxes for later commands; the page slot makes the
    // output mailbox of MANAGE_PAGES TAKE when it first takes pages back. Let that happen
    // here (a destroy's pages asked back), so that it is not counted against a create below
    // whose wait serves a reclaim.
    let took = || {
        n.tb.device()
            .command_log()
            .iter()
            .any(|c| c.opcode == opcode::MANAGE_PAGES && c.op_mod == op_mod::MANAGE_PAGES_TAKE)
    };
    for _ in 0..8 {
        if took() {
            break;
        }
        let cq = Provider::create_cq(&n.dev, 4, 0, None).unwrap();
        Provider::destroy_cq(&n.dev, cq).unwrap();
        n.tb.live_settled(&n.dev);
    }
    let creates = [
        opcode::CREATE_CQ,
        opcode::CREATE_QP,
        opcode::CREATE_RMP,
        opcode::CREATE_MKEY,
        opcode::CREATE_EQ,
    ];
    for op in creates {
        for lie in [true, false] {
            {
                let mut d = n.tb.device();
                if lie {
                    d.faults().output_hook = Some(Box::new(move |o, out: &mut Vec<u8>| {
                        if o == op {
                            out[8] = 0x5a;
                        }
                    }));
                } else {
                    d.faults().fail_command = Some(FailCommand {
                        opcode: op,
                        status: cmd_status::BAD_PARAM,
                        syndrome: 0,
                        times: Some(1),
                    });
                }
            }
            // The MR's buffer is allocated before the count: it is the memory at stake (handed
            // to reg_mr, which holds the only handle).
            let mut buf =
                (op == opcode::CREATE_MKEY).then(|| Provider::alloc_buf(&n.dev, 4096).unwrap());
            // DMA buffers other than the firmware's pages: a create may need pages, given
            // while it waits and asked back after it failed (see `pages.rs`).
            let buffers = || n.tb.dma.live_buffers() - n.dev.fw_pages();
            let before = buffers();
            let r = match op {
                opcode::CREATE_CQ => Provider::create_cq(&n.dev, 4, 0, None).map(drop),
                opcode::CREATE_QP => Provider::create_qp(
                    &n.dev,
                    &n.pd,
                    &QpInitAttr {
                        qp_type: QpType::Rc,
                        send_cq: &n.cq,
                        recv_cq: &n.cq,
                        srq: None,
                        cap: CAP,
                        sq_sig_all: false,
                    },
                )
                .map(drop),
                opcode::CREATE_RMP => Provider::create_srq(
                    &n.dev,
                    &n.pd,
                    &SrqAttr {
                        max_wr: 4,
                        max_sge: 1,
                        srq_limit: 0,
                    },
                )
                .map(drop),
                opcode::CREATE_MKEY => {
                    let b = buf.take().unwrap();
                    Provider::reg_mr(&n.dev, &n.pd, b, AccessFlags::LOCAL_WRITE).map(drop)
                }
                _ => n.dev.create_comp_channel().map(drop).map_err(Into::into),
            };
            assert!(r.is_err(), "{op:#x}: {r:?}");
            let after = buffers();
            if lie {
                // The rings (or the MR's buffer) stay.
                assert!(
                    after >= before,
                    "{op:#x}: {before} buffers before, {after} after a create of unknown outcome"
                );
                if op != opcode::CREATE_MKEY {
                    assert!(after > before, "{op:#x}: nothing was given to the device?");
                }
            } else {
                // Refused: everything given back (the MR's buffer too).
                assert_eq!(
                    after + usize::from(op == opcode::CREATE_MKEY),
                    before,
                    "{op:#x}: a refused create leaked"
                );
            }
            n.tb.device().faults().output_hook = None;
            // Whatever pages the create was given, driver and device agree on them.
            n.tb.live_settled(&n.dev);
        }
    }
}
