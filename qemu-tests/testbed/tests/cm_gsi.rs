//! The connection manager's MADs travel on each device's GSI QP (QP1), as on any RoCE node:
//! QP1 exists on both NICs from `add_device` on, in RTS, is the only QP until endpoints make
//! theirs, and a connection is set up through it.

use firmware_interface::{cmd_status, opcode};
use nic_emulator::syndrome;
use verbs::{Provider, QpCap, QpInitAttr, QpType, QueuePair};

mod cm_support;
use cm_support::*;

/// `qpc.state` RTS.
const RTS: u8 = 3;

#[test]
fn cm_mads_travel_on_qp1() {
    let s = setup(41);
    for n in [&s.client, &s.server] {
        assert_eq!(n.tb.device().qp_state(1), Some(RTS), "QP1 in RTS");
        assert_eq!(n.tb.live().qps, 1, "the MAD QP is QP1 and nothing else");
        assert_eq!(s.cm.device(n.dev).unwrap().cm_qpn, 1);
    }
    // QP1 is taken: another GSI QP on the device is refused (NO_RES, QP1 exists)
    s.cm.with_provider(s.server.dev, |p| {
        let pd = Provider::alloc_pd(p).unwrap();
        let cq = Provider::create_cq(p, 4, 0, None).unwrap();
        let r = Provider::create_qp(
            p,
            &pd,
            &QpInitAttr {
                qp_type: QpType::Gsi,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        );
        assert!(r.is_err());
        Provider::destroy_cq(p, cq).unwrap();
        Provider::dealloc_pd(p, pd).unwrap();
    })
    .unwrap();
    let refused = s
        .server
        .tb
        .device()
        .command_log()
        .iter()
        .rev()
        .find(|c| c.opcode == opcode::CREATE_QP)
        .copied()
        .unwrap();
    assert_eq!(
        (refused.status, refused.syndrome),
        (cmd_status::NO_RES, syndrome::QP1_EXISTS)
    );

    let before = (
        s.client.tb.device().port_stats(),
        s.server.tb.device().port_stats(),
    );
    let (listen, client, conn, ch) = connect_pair(&s, None);
    let st = s.cm.stats();
    // REQ, REP, RTU at least
    assert!(st.mads_sent >= 3 && st.mads_received >= 3, "{st:?}");
    assert_eq!(st.bad_mads, 0);
    assert_eq!(st.send_failures, 0);
    let after = (
        s.client.tb.device().port_stats(),
        s.server.tb.device().port_stats(),
    );
    for (b, a) in [(before.0, after.0), (before.1, after.1)] {
        assert!(a.tx_frames > b.tx_frames && a.rx_frames > b.rx_frames);
        // delivered to QP1 with the GSI Q_Key: nothing dropped
        assert_eq!(a.rx_qkey_mismatch, b.rx_qkey_mismatch);
        assert_eq!(a.rx_dropped, b.rx_dropped);
    }
    for n in [&s.client, &s.server] {
        assert_eq!(n.tb.device().qp_state(1), Some(RTS));
    }
    // the endpoints' QPs are ordinary ones
    for id in [&client, &conn] {
        let q = id.qp_num().unwrap();
        assert!(q > 1, "{q}");
        id.with_verbs(|v| assert_eq!(v.qp.unwrap().qp_type(), QpType::Rc))
            .unwrap();
    }
    drop((conn, client, listen, ch));
    s.teardown();
}

/// Removing a device destroys its QP1; when the device refuses that, the QP may still hold
/// receives posted into the MAD slots (and sends reading them), so the slots stay allocated
/// (a late DMA into them lands in memory nobody else was given) instead of going back to
/// the allocator. When the destroy succeeds, they are freed.
#[test]
fn a_failed_qp1_destroy_leaks_the_mad_slots() {
    use cm::{Cm, CmConfig};
    use nic_emulator::{FailCommand, Profile};
    use nic_testbed::World;
    // 7 + 2 slots of 512 bytes: a length no other buffer of the driver has
    const SLOTS_LEN: usize = 9 * 512;
    for fail in [false, true] {
        let world = World::new(43);
        let tb = world.nic(SERVER.parse().unwrap(), Profile::default());
        let cm = Cm::new(
            tb.platform(),
            CmConfig {
                mad_recv_slots: 7,
                mad_send_slots: 2,
                ..cfg()
            },
        );
        let (dev, mac) = probe(&tb);
        let id = cm.add_device(dev, mac).map_err(|(e, _)| e).unwrap();
        let slots = || -> Vec<(u64, usize)> {
            let all = tb.dma.regions();
            all.into_iter().filter(|&(_, l)| l == SLOTS_LEN).collect()
        };
        let before = slots();
        assert_eq!(before.len(), 1, "one slot buffer");
        if fail {
            tb.device().faults().fail_command = Some(FailCommand {
                opcode: opcode::DESTROY_QP,
                status: cmd_status::BAD_RES_STATE,
                syndrome: 0x42,
                times: Some(1),
            });
        }
        let dev = cm.remove_device(id).unwrap();
        let after = slots();
        if fail {
            assert_eq!(after, before, "the slots are kept");
            let (iova, len) = after[0];
            assert!(
                tb.dma.translate(iova, len).is_some(),
                "still mapped: the device's late DMA lands in them"
            );
            // another allocation does not get them
            let fresh = Provider::alloc_buf(&dev, SLOTS_LEN).unwrap();
            assert_ne!(fresh.addr(), iova);
            assert_eq!(slots().len(), 2);
        } else {
            assert!(after.is_empty(), "freed: {after:?}");
            dev.shutdown().unwrap();
        }
    }
}
