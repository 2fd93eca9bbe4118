//! Unit tests against the fake device of [`crate::fake`].

use std::vec::Vec;

use firmware_interface::cmds::*;
use firmware_interface::ctx::{cmd_hca_cap as cap, qpc};
use firmware_interface::{Field, eqe, mbox_in, op_mod, opcode};
use nic_hal::Platform;

use crate::dp_tests::{cq_rec, cq_ring};
use crate::fake::*;
use crate::mkey::*;
use crate::qp::*;
use crate::*;

// ------------------------------------------------------------------------------------------
// Bring-up and teardown

#[test]
fn probe_and_shutdown_follow_the_spec_order() {
    let b = bench();
    let dev = b.probe().unwrap();
    let seq: Vec<(u16, u16)> = b.fw().log.clone();
    let boot_give = (opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_GIVE);
    let expected = vec![
        (opcode::ENABLE_HCA, 0),
        (opcode::QUERY_ISSI, 0),
        (opcode::SET_ISSI, 0),
        (opcode::QUERY_PAGES, op_mod::PAGES_BOOT),
        boot_give,
        (opcode::ACCESS_REG, op_mod::ACCESS_REG_WRITE),
        (opcode::QUERY_HCA_CAP, 1),
        (opcode::QUERY_HCA_CAP, 0),
        (opcode::SET_HCA_CAP, 0),
        // Atomic page (cap type 3): current, max, then host-endian responses.
        (opcode::QUERY_HCA_CAP, 7),
        (opcode::QUERY_HCA_CAP, 6),
        (opcode::SET_HCA_CAP, 6),
        (opcode::QUERY_HCA_CAP, 9),
        (opcode::QUERY_HCA_CAP, 8),
        (opcode::SET_HCA_CAP, 8),
        (opcode::QUERY_PAGES, op_mod::PAGES_INIT),
        boot_give,
        (opcode::INIT_HCA, 0),
        (opcode::MODIFY_NIC_VPORT_CONTEXT, 0),
        (opcode::QUERY_HCA_CAP, 1),
        (opcode::QUERY_HCA_CAP, 9),
        (opcode::QUERY_HCA_CAP, 7),
        (opcode::ALLOC_UAR, 0),
        (opcode::CREATE_EQ, 0),
        (opcode::ALLOC_PD, 0),
        (opcode::ALLOC_TRANSPORT_DOMAIN, 0),
    ];
    assert_eq!(seq, expected);
    assert_eq!(dev.issi(), 1);
    assert_eq!(dev.fw_version(), (14, 32, 1010));
    assert_eq!(dev.fw_pages(), 75);
    assert_eq!(b.fw().pages.len(), 75);
    let caps = *dev.caps();
    assert_eq!(caps.log_max_qp, 10);
    assert_eq!(caps.port_type, PortType::Ethernet);
    assert_eq!(caps.cmdif_checksum, 0);
    assert_eq!(caps.roce_address_table_size, 16);
    assert!(caps.sw_r_roce_src_udp_port);
    // Atomic responses in host order, set as Linux sets them: a zeroed block but the mode.
    assert!(caps.atomic_response_host_order);
    assert_eq!(caps.atomic_operations, 0x3);
    let sa = b.fw().inputs[&opcode::SET_HCA_CAP].clone(); // the last one: RoCE
    assert_eq!(mbox_in::OP_MOD.get(&sa), 8);
    let set_atomic = b.fw().atomic_caps.clone();
    assert_eq!(
        firmware_interface::ctx::atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&set_atomic),
        1
    );
    // host endianness: little-endian host writes he = 0
    let ar = b.fw().inputs[&opcode::ACCESS_REG].clone();
    assert_eq!(ar.len(), 32);
    assert_eq!(access_register_in::REGISTER_ID.get(&ar), 0x7004);
    // roce_en requested
    let nv = b.fw().inputs[&opcode::MODIFY_NIC_VPORT_CONTEXT].clone();
    assert_eq!(
        modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN.get(&nv),
        1
    );
    assert_eq!(nv[0x103] & 1, 1);
    // driver EQ: armed through the driver UAR at 0x40 with ci 0, subscribed to CMD
    let uar = dev.driver_uar().unwrap();
    let eqn = dev.driver_eqn().unwrap();
    assert!(
        b.fw()
            .uar_writes
            .contains(&(uar as usize * 4096 + 0x40, eqn << 24))
    );
    let eqin = b.fw().inputs[&opcode::CREATE_EQ].clone();
    let mask = create_eq_in::EVENT_BITMASK_0.get64(&eqin);
    assert_ne!(mask & (1 << eqe::event::CMD), 0);
    assert_ne!(mask & (1 << eqe::event::PAGE_REQUEST), 0);
    assert_eq!(eqin.len(), 0x110 + 4 * 8); // 256 EQEs = 16 KB = 4 pages

    b.fw().log.clear();
    dev.shutdown().unwrap();
    let ops = b.opcodes();
    assert_eq!(
        ops,
        vec![
            opcode::DESTROY_EQ,
            opcode::DEALLOC_TRANSPORT_DOMAIN,
            opcode::DEALLOC_PD,
            opcode::DEALLOC_UAR,
            opcode::TEARDOWN_HCA,
            opcode::MANAGE_PAGES,
            opcode::DISABLE_HCA,
        ]
    );
    assert!(b.fw().pages.is_empty());
    assert_eq!(b.heap.live_buffers(), 0, "all DMA memory freed");
}

#[test]
fn a_virtual_function_skips_host_endianness() {
    // Linux's `set_hca_ctrl` does nothing on a VF; neither does the driver.
    for (device_id, vf) in [(0x1018, true), (0x101e, true), (0x1017, false), (0, false)] {
        let config = Config {
            device_id,
            ..test_config()
        };
        assert_eq!(config.is_vf(), vf, "{device_id:#x}");
        let b = bench();
        let dev = b.probe_with(config).unwrap();
        let wrote = b
            .fw()
            .log
            .contains(&(opcode::ACCESS_REG, op_mod::ACCESS_REG_WRITE));
        assert_eq!(wrote, !vf, "{device_id:#x}");
        dev.shutdown().unwrap();
    }
    // A VF id of another vendor is no ConnectX VF.
    let other = Config {
        vendor_id: 0x8086,
        device_id: 0x1018,
        ..test_config()
    };
    assert!(!other.is_vf());
}

#[test]
fn drop_without_shutdown_tears_down() {
    let b = bench();
    let dev = b.probe().unwrap();
    drop(dev);
    assert!(b.opcodes().ends_with(&[opcode::DISABLE_HCA]));
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn initializing_that_never_clears_is_not_ready() {
    let b = bench();
    b.fw().init_stuck = true;
    assert_eq!(b.probe().unwrap_err(), Error::NotReady);
    assert_eq!(b.heap.live_buffers(), 0);
    assert!(b.clock.now_ns() >= 1_000_000_000);
}

#[test]
fn wrong_cmdif_revision_and_geometry_are_refused() {
    let b = bench();
    b.fw().cmdif = 4 << 16;
    assert_eq!(b.probe().unwrap_err(), Error::UnsupportedCmdIf { rev: 4 });

    for (size, stride) in [(6, 6), (5, 8), (3, 5)] {
        let b = bench();
        b.fw().log_size = size;
        b.fw().log_stride = stride;
        assert_eq!(
            b.probe().unwrap_err(),
            Error::BadCmdqGeometry {
                log_size: size as u8,
                log_stride: stride as u8
            }
        );
        assert_eq!(b.heap.live_buffers(), 0);
    }
}

#[test]
fn single_entry_queue_shares_its_slot() {
    let b = bench();
    b.fw().log_size = 0;
    let dev = b.probe().unwrap();
    dev.shutdown().unwrap();
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn issi_bad_op_stays_at_zero() {
    let b = bench();
    b.hook(on(
        opcode::QUERY_ISSI,
        Reply::ok(out_with(16, |o| {
            o[0] = firmware_interface::cmd_status::BAD_OP
        })),
    ));
    let dev = b.probe().unwrap();
    assert_eq!(dev.issi(), 0);
    assert!(!b.opcodes().contains(&opcode::SET_ISSI));
}

#[test]
fn failed_probe_undoes_what_was_done() {
    let b = bench();
    b.hook(on(
        opcode::INIT_HCA,
        Reply::ok(out_with(16, |o| {
            o[0] = 0x4;
            o[4..8].copy_from_slice(&0xabcdu32.to_be_bytes());
        })),
    ));
    let e = b.probe().unwrap_err();
    assert_eq!(
        e,
        Error::Cmd {
            opcode: opcode::INIT_HCA,
            status: 4,
            syndrome: 0xabcd
        }
    );
    let ops = b.opcodes();
    let tail = &ops[ops.iter().position(|&o| o == opcode::INIT_HCA).unwrap() + 1..];
    assert_eq!(tail, &[opcode::MANAGE_PAGES, opcode::DISABLE_HCA]);
    assert!(!ops.contains(&opcode::TEARDOWN_HCA));
    assert!(b.fw().pages.is_empty());
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn absurd_page_count_is_refused_without_allocating() {
    let b = bench();
    b.fw().boot_pages = 1_000_000_000;
    let e = b.probe().unwrap_err();
    assert_eq!(
        e,
        Error::BadOutput {
            opcode: opcode::QUERY_PAGES,
            what: OutputFault::PageCount {
                value: 1_000_000_000
            }
        }
    );
    assert!(
        !b.fw()
            .log
            .contains(&(opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_GIVE))
    );
    assert_eq!(b.heap.live_buffers(), 0);

    let b = bench();
    b.fw().init_pages = -3;
    assert!(matches!(
        b.probe().unwrap_err(),
        Error::BadOutput {
            what: OutputFault::PageCount { value: -3 },
            ..
        }
    ));
    // the boot pages were taken back
    assert!(b.fw().pages.is_empty());
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn take_returning_a_foreign_address_is_bad_output() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::MANAGE_PAGES
            && mbox_in::OP_MOD.get(inp) as u16 == op_mod::MANAGE_PAGES_TAKE)
            .then(|| {
                Reply::ok(out_with(outlen, |o| {
                    manage_pages_out::OUTPUT_NUM_ENTRIES.set(o, 1);
                    o[16..24].copy_from_slice(&0xdead_0000u64.to_be_bytes());
                }))
            })
    });
    let e = dev.shutdown().unwrap_err();
    assert_eq!(
        e,
        Error::BadOutput {
            opcode: opcode::MANAGE_PAGES,
            what: OutputFault::PageAddress { addr: 0xdead_0000 }
        }
    );
    // DISABLE_HCA still ran; the pages the firmware kept were not freed
    assert!(b.opcodes().ends_with(&[opcode::DISABLE_HCA]));
    assert_eq!(b.heap.live_buffers(), 75);
}

#[test]
fn take_returning_too_many_or_duplicates_is_bad_output() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::MANAGE_PAGES
            && mbox_in::OP_MOD.get(inp) as u16 == op_mod::MANAGE_PAGES_TAKE)
            .then(|| {
                let asked = manage_pages_in::INPUT_NUM_ENTRIES.get(inp);
                Reply::ok(out_with(outlen, |o| {
                    manage_pages_out::OUTPUT_NUM_ENTRIES.set(o, asked + 1);
                }))
            })
    });
    assert!(matches!(
        dev.shutdown().unwrap_err(),
        Error::BadOutput {
            what: OutputFault::PageEntries { .. },
            ..
        }
    ));

    let b = bench();
    let dev = b.probe().unwrap();
    let first = *b.fw().pages.iter().next().unwrap();
    b.hook(move |inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::MANAGE_PAGES
            && mbox_in::OP_MOD.get(inp) as u16 == op_mod::MANAGE_PAGES_TAKE)
            .then(|| {
                Reply::ok(out_with(outlen, |o| {
                    manage_pages_out::OUTPUT_NUM_ENTRIES.set(o, 2);
                    o[16..24].copy_from_slice(&first.to_be_bytes());
                    o[24..32].copy_from_slice(&first.to_be_bytes());
                }))
            })
    });
    assert_eq!(
        dev.shutdown().unwrap_err(),
        Error::BadOutput {
            opcode: opcode::MANAGE_PAGES,
            what: OutputFault::PageAddress { addr: first }
        }
    );
}

#[test]
fn firmware_keeping_its_pages_is_reported_and_bounded() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::MANAGE_PAGES
            && mbox_in::OP_MOD.get(inp) as u16 == op_mod::MANAGE_PAGES_TAKE)
            .then(|| Reply::ok(vec![0u8; outlen]))
    });
    assert_eq!(
        dev.shutdown().unwrap_err(),
        Error::PagesNotReclaimed { left: 75 }
    );
    let takes = b
        .fw()
        .log
        .iter()
        .filter(|&&l| l == (opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE))
        .count();
    assert!(takes <= 16, "{takes} TAKE commands");
}

// ------------------------------------------------------------------------------------------
// Command interface

#[test]
fn command_round_trip_through_mailbox_chains() {
    let b = bench();
    let dev = b.probe().unwrap();
    const OP: u16 = 0x7777;
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == OP).then(|| {
            assert_eq!(inp.len(), 1100);
            for (i, &x) in inp.iter().enumerate().skip(16) {
                assert_eq!(x, (i * 7) as u8, "input byte {i}");
            }
            Reply::ok(out_with(outlen, |o| {
                for (i, x) in o.iter_mut().enumerate().skip(8) {
                    *x = (i * 13) as u8;
                }
            }))
        })
    });
    let mut inp: Vec<u8> = (0..1100).map(|i| (i * 7) as u8).collect();
    inp[..16].fill(0);
    mbox_in::OPCODE.set(&mut inp, OP as u32);
    let out = dev.exec(&inp, 1500).unwrap();
    assert_eq!(out.len(), 1500);
    for (i, &x) in out.iter().enumerate().skip(8) {
        assert_eq!(x, (i * 13) as u8, "output byte {i}");
    }
    // the chains are reused by the next command
    let out = dev.exec(&inp, 1500).unwrap();
    assert_eq!(out[1499], (1499 * 13) as u8);
}

#[test]
fn command_validation_of_lengths() {
    let b = bench();
    let dev = b.probe().unwrap();
    assert_eq!(dev.exec(&[0; 8], 16), Err(Error::InvalidArgument));
    assert_eq!(dev.exec(&[0; 16], 8), Err(Error::InvalidArgument));
    assert_eq!(
        dev.exec(&[0; 16], MAX_MSG_LEN + 1),
        Err(Error::InvalidArgument)
    );
}

#[test]
fn timeout_makes_the_interface_unusable() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(on(
        opcode::NOP,
        Reply {
            hang: true,
            ..Default::default()
        },
    ));
    let nop = crate::device::cmd_in(opcode::NOP, 0, 16);
    let t0 = b.clock.now_ns();
    assert_eq!(
        dev.exec(&nop, 16),
        Err(Error::CmdTimeout {
            opcode: opcode::NOP
        })
    );
    assert!(b.clock.now_ns() - t0 >= 1_000_000_000);
    let rings = b.fw().doorbells;
    assert_eq!(
        dev.exec(&crate::device::cmd_in(opcode::QUERY_ISSI, 0, 16), 112),
        Err(Error::CmdTimeout {
            opcode: opcode::QUERY_ISSI
        })
    );
    assert_eq!(b.fw().doorbells, rings, "no doorbell after a timeout");
    assert!(matches!(dev.shutdown(), Err(Error::CmdTimeout { .. })));
    assert_eq!(b.fw().doorbells, rings);
    // the firmware may still write the queue, the mailboxes and its pages: nothing freed
    assert!(b.heap.live_buffers() > 75);
}

#[test]
fn delivery_status_is_an_error() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(on(
        opcode::NOP,
        Reply {
            delivery: firmware_interface::delivery_status::IN_LENGTH_ERR,
            ..Default::default()
        },
    ));
    let e = dev
        .exec(&crate::device::cmd_in(opcode::NOP, 0, 16), 16)
        .unwrap_err();
    assert_eq!(
        e,
        Error::Delivery {
            opcode: opcode::NOP,
            status: 7
        }
    );
    assert_eq!(e.errno(), 5);
}

#[test]
fn firmware_status_carries_the_syndrome() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(on(
        opcode::ALLOC_PD,
        Reply::ok(out_with(16, |o| {
            o[0] = firmware_interface::cmd_status::BAD_PARAM;
            o[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        })),
    ));
    let e = dev.alloc_pd().unwrap_err();
    assert_eq!(
        e,
        Error::Cmd {
            opcode: opcode::ALLOC_PD,
            status: 3,
            syndrome: 0x1234_5678
        }
    );
    assert_eq!(e.errno(), 22);
    assert_eq!(verbs::Error::from(e), verbs::Error::InvalidArgument);
}

#[test]
fn output_chain_with_wrong_token_or_block_number_is_bad_output() {
    let b = bench();
    let dev = b.probe().unwrap();
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::QUERY_HCA_CAP).then(|| Reply {
            out: vec![0; outlen],
            bad_token_block: Some(3),
            ..Default::default()
        })
    });
    let e = dev.query_caps(0, 1).unwrap_err();
    assert!(matches!(
        e,
        Error::BadOutput {
            opcode: opcode::QUERY_HCA_CAP,
            what: OutputFault::Token { block: 3, .. }
        }
    ));
    b.hook(|inp, outlen| {
        (mbox_in::OPCODE.get(inp) as u16 == opcode::QUERY_HCA_CAP).then(|| Reply {
            out: vec![0; outlen],
            bad_block_num: Some(0),
            ..Default::default()
        })
    });
    assert_eq!(
        dev.query_caps(0, 1).unwrap_err(),
        Error::BadOutput {
            opcode: opcode::QUERY_HCA_CAP,
            what: OutputFault::BlockNumber { block: 0, found: 7 }
        }
    );
    // still usable afterwards
    dev.alloc_pd().unwrap();
}

// ------------------------------------------------------------------------------------------
// Object numbers and capabilities

#[test]
fn impossible_object_numbers_are_bad_output() {
    let b = bench();
    let dev = b.probe().unwrap();
    let eqn = dev.driver_eqn().unwrap();
    // bits above the 24-bit cqn
    b.hook(on(
        opcode::CREATE_CQ,
        Reply::ok(out_with(16, |o| {
            o[8..12].copy_from_slice(&0x0100_0005u32.to_be_bytes())
        })),
    ));
    assert_eq!(
        dev.create_cq(4, eqn).unwrap_err(),
        Error::BadOutput {
            opcode: opcode::CREATE_CQ,
            what: OutputFault::ObjectNumber { value: 0x0100_0005 }
        }
    );
    // a cqn beyond 2^log_max_cq (12)
    b.hook(on(
        opcode::CREATE_CQ,
        Reply::ok(out_with(16, |o| {
            create_cq_out::CQN.set(o, 1 << 12);
        })),
    ));
    assert!(matches!(
        dev.create_cq(4, eqn).unwrap_err(),
        Error::BadOutput {
            what: OutputFault::ObjectNumber { value: 4096 },
            ..
        }
    ));
    // UAR pages outside the BAR or over the init segment
    for uar in [0x2000u32, 0x10000, 1] {
        b.hook(on(
            opcode::ALLOC_UAR,
            Reply::ok(out_with(16, |o| {
                alloc_uar_out::UAR.set(o, uar);
            })),
        ));
        assert_eq!(
            dev.alloc_uar().unwrap_err(),
            Error::BadOutput {
                opcode: opcode::ALLOC_UAR,
                what: OutputFault::UarIndex { value: uar }
            }
        );
    }
    b.hook(on(
        opcode::ALLOC_PD,
        Reply::ok(out_with(16, |o| {
            alloc_pd_out::PD.set(o, 1 << 16);
        })),
    ));
    assert!(matches!(
        dev.alloc_pd().unwrap_err(),
        Error::BadOutput { .. }
    ));
}

#[test]
fn insane_capabilities_fail_probe() {
    // Limits the sizing arithmetic relies on are checked here, once, as device errors (EIO):
    // a later create never turns an impossible capability into EINVAL or an overflow.
    let cases: [(Field, u32, CapField); 10] = [
        (cap::LOG_MAX_QP, 25, CapField::LogMaxQp),
        (cap::MAX_WQE_SZ_SQ, 32, CapField::MaxWqeSzSq),
        (cap::PORT_TYPE, 2, CapField::PortType),
        (cap::NUM_PORTS, 0, CapField::NumPorts),
        (cap::LOG_BF_REG_SIZE, 12, CapField::LogBfRegSize),
        (cap::LOG_MAX_QP_SZ, 17, CapField::LogMaxQpSz),
        (cap::LOG_MAX_SRQ_SZ, 17, CapField::LogMaxSrqSz),
        (cap::LOG_MAX_CQ_SZ, 25, CapField::LogMaxCqSz),
        (cap::MAX_WQE_SZ_RQ, 8, CapField::MaxWqeSzRq),
        (cap::LOG_MAX_EQ_SZ, 25, CapField::LogMaxEqSz),
    ];
    for (f, v, field) in cases {
        let b = bench();
        f.set(&mut b.fw().caps, v);
        let e = b.probe().unwrap_err();
        assert_eq!(
            e,
            Error::BadOutput {
                opcode: opcode::QUERY_HCA_CAP,
                what: OutputFault::Capability { field, value: v }
            }
        );
        assert_eq!(verbs::Error::from(e), verbs::Error::Io);
        assert!(b.opcodes().ends_with(&[
            opcode::TEARDOWN_HCA,
            opcode::MANAGE_PAGES,
            opcode::DISABLE_HCA
        ]));
        assert_eq!(b.heap.live_buffers(), 0);
    }
}

#[test]
fn atomic_response_mode_is_negotiated_as_linux_does() {
    use firmware_interface::ctx::atomic_caps as at;
    // The SET block is all zero but the mode (Linux's `handle_hca_cap_atomic`).
    let b = bench();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    b.hook(move |inp, _| {
        if mbox_in::OPCODE.get(inp) as u16 == opcode::SET_HCA_CAP
            && mbox_in::OP_MOD.get(inp) as u16 == op_mod::set_cap(op_mod::CAP_ATOMIC)
        {
            s2.lock().unwrap().push(inp.to_vec());
        }
        None
    });
    let dev = b.probe().unwrap();
    let sets = seen.lock().unwrap().clone();
    assert_eq!(sets.len(), 1);
    let mut expect = vec![0u8; 4096];
    at::ATOMIC_REQ_8B_ENDIANNESS_MODE.set(&mut expect, at::REQ_MODE_HOST_ENDIANNESS);
    assert_eq!(&sets[0][16..], &expect[..]);
    assert!(dev.caps().atomic_response_host_order);
    dev.shutdown().unwrap();

    // A device without host-endian responses: no SET, responses stay big-endian.
    let b = bench();
    at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.set(&mut b.fw().atomic_caps, 0);
    let dev = b.probe().unwrap();
    assert!(
        !b.fw()
            .log
            .contains(&(opcode::SET_HCA_CAP, op_mod::set_cap(op_mod::CAP_ATOMIC)))
    );
    assert_eq!(
        dev.caps().atomic_response_host_order,
        cfg!(target_endian = "big")
    );
    dev.shutdown().unwrap();

    // No atomics at all: the page is not even queried.
    let b = bench();
    cap::ATOMIC.set(&mut b.fw().caps, 0);
    let dev = b.probe().unwrap();
    assert!(
        b.fw()
            .log
            .iter()
            .all(|&(o, m)| o != opcode::QUERY_HCA_CAP || m >> 1 != op_mod::CAP_ATOMIC)
    );
    assert_eq!(dev.caps().atomic_operations, 0);
    dev.shutdown().unwrap();

    // A mode that does not exist, or one the firmware accepted and then does not apply, is a
    // bad output.
    for (mode, supported) in [(3, 1), (0, 1)] {
        let b = bench();
        b.hook(move |inp, outlen| {
            let om = mbox_in::OP_MOD.get(inp) as u16;
            if mbox_in::OPCODE.get(inp) as u16 == opcode::SET_HCA_CAP
                && om == op_mod::set_cap(op_mod::CAP_ATOMIC)
            {
                return Some(Reply::ok(vec![0; 16]));
            }
            if mbox_in::OPCODE.get(inp) as u16 != opcode::QUERY_HCA_CAP
                || om != op_mod::query_cap(op_mod::CAP_ATOMIC, op_mod::QUERY_CAP_CUR)
            {
                return None;
            }
            Some(Reply::ok(out_with(outlen, |o| {
                at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1
                    .at(16)
                    .set(o, supported);
                at::ATOMIC_REQ_8B_ENDIANNESS_MODE.at(16).set(o, mode);
            })))
        });
        assert_eq!(
            b.probe().unwrap_err(),
            Error::BadOutput {
                opcode: opcode::QUERY_HCA_CAP,
                what: OutputFault::Capability {
                    field: CapField::AtomicReqEndiannessMode,
                    value: mode
                }
            },
            "mode {mode}"
        );
        assert_eq!(b.heap.live_buffers(), 0);
    }
}

#[test]
fn log_max_qp_wanted_is_clamped_to_the_maximum() {
    let b = bench();
    let dev = b
        .probe_with(Config {
            log_max_qp_wanted: Some(20),
            ..test_config()
        })
        .unwrap();
    assert_eq!(dev.caps().log_max_qp, 10);
    let b = bench();
    let dev = b
        .probe_with(Config {
            log_max_qp_wanted: Some(8),
            ..test_config()
        })
        .unwrap();
    assert_eq!(dev.caps().log_max_qp, 8);
}

// ------------------------------------------------------------------------------------------
// Events

fn eqe_bytes(t: u8, f: impl FnOnce(&mut [u8; 64])) -> [u8; 64] {
    let mut e = [0u8; 64];
    e[eqe::TYPE] = t;
    f(&mut e);
    e
}

#[test]
fn eq_owner_rule_and_validation() {
    let b = bench();
    let dev = b.probe().unwrap();
    let mask = eqe::event::mask(eqe::event::PORT_CHANGE);
    let mut eq = dev.create_eq(2, mask).unwrap();
    let n = eq.eqn();
    // every owner byte starts at 1
    for i in 0..4 {
        assert_eq!(eq.buffer().read_u8(i * 64 + 63).unwrap(), 1);
    }
    assert_eq!(dev.poll_eq(&mut eq, |_| panic!("empty")).unwrap(), 0);

    let comp = |cqn: u32| {
        eqe_bytes(eqe::event::COMP, |e| {
            e[0x38..0x3c].copy_from_slice(&cqn.to_be_bytes())
        })
    };
    {
        let mut fw = b.fw();
        fw.post_eqe(n, comp(0x11));
        fw.post_eqe(
            n,
            eqe_bytes(eqe::event::PORT_CHANGE, |e| {
                e[eqe::SUB_TYPE] = eqe::PORT_ACTIVE;
                e[0x28] = 1 << 4;
            }),
        );
    }
    let mut got = Vec::new();
    assert_eq!(dev.poll_eq(&mut eq, |ev| got.push(ev)).unwrap(), 2);
    assert_eq!(
        got,
        vec![
            Event::Completion { cqn: 0x11 },
            Event::PortChange {
                port: 1,
                sub_type: eqe::PORT_ACTIVE
            }
        ]
    );
    assert_eq!(eq.consumer_index(), 2);
    let uar = dev.driver_uar().unwrap() as usize;
    assert_eq!(
        b.fw().uar_writes.last(),
        Some(&(uar * 4096 + 0x40, (n << 24) | 2))
    );

    // second pass around the ring: the owner bit flips
    {
        let mut fw = b.fw();
        fw.post_eqe(n, comp(1));
        fw.post_eqe(n, comp(2));
        fw.post_eqe(n, comp(3));
    }
    got.clear();
    assert_eq!(dev.poll_eq(&mut eq, |ev| got.push(ev)).unwrap(), 3);
    assert_eq!(got.len(), 3);
    assert_eq!(eq.consumer_index(), 5);

    // a type nobody subscribed to, a CQN beyond the caps, a port that does not exist
    {
        let mut fw = b.fw();
        fw.post_eqe(n, eqe_bytes(eqe::event::PAGE_REQUEST, |_| {}));
        fw.post_eqe(n, comp(1 << 20));
        fw.post_eqe(n, eqe_bytes(0x3f, |_| {}));
        fw.post_eqe(n, eqe_bytes(eqe::event::PORT_CHANGE, |e| e[0x28] = 2 << 4));
    }
    got.clear();
    let e = dev.poll_eq(&mut eq, |ev| got.push(ev)).unwrap_err();
    assert_eq!(
        e,
        Error::BadOutput {
            opcode: 0,
            what: OutputFault::EventType {
                event_type: eqe::event::PAGE_REQUEST
            }
        }
    );
    assert!(got.is_empty());
    assert_eq!(eq.consumer_index(), 9, "bad EQEs are consumed");
    dev.destroy_eq(eq).unwrap();
}

#[test]
fn page_requests_are_served_from_the_driver_eq() {
    let b = bench();
    let dev = b.probe().unwrap();
    let n = dev.driver_eqn().unwrap();
    let req = |num: i32| {
        eqe_bytes(eqe::event::PAGE_REQUEST, |e| {
            e[eqe::PAGE_REQ_NUM_PAGES..eqe::PAGE_REQ_NUM_PAGES + 4]
                .copy_from_slice(&num.to_be_bytes())
        })
    };
    b.fw().post_eqe(n, req(10));
    b.fw().post_eqe(
        n,
        eqe_bytes(eqe::event::COMM_EST, |e| {
            e[0x38..0x3c].copy_from_slice(&0x42u32.to_be_bytes())
        }),
    );
    let mut got = Vec::new();
    assert_eq!(dev.poll_events(|ev| got.push(ev)).unwrap(), 1);
    assert_eq!(
        got,
        vec![Event::Qp {
            event_type: eqe::event::COMM_EST,
            resource_type: 0,
            qpn: 0x42
        }]
    );
    assert_eq!(dev.fw_pages(), 85);
    assert_eq!(b.fw().pages.len(), 85);

    b.fw().post_eqe(n, req(-20));
    dev.poll_events(|_| {}).unwrap();
    assert_eq!(dev.fw_pages(), 65);
    assert_eq!(b.fw().pages.len(), 65);

    // an absurd request is refused, the firmware told
    b.fw().post_eqe(n, req(i32::MAX));
    let e = dev.poll_events(|_| {}).unwrap_err();
    assert!(matches!(
        e,
        Error::BadOutput {
            opcode: 0,
            what: OutputFault::PageCount { .. }
        }
    ));
    assert_eq!(
        b.fw().log.last(),
        Some(&(opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_CANT_GIVE))
    );
    dev.shutdown().unwrap();
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn command_completions_do_not_overrun_the_driver_eq() {
    let b = bench();
    let dev = b.probe().unwrap();
    // far more commands than the EQ has entries; every one posts a CMD EQE
    for _ in 0..600 {
        dev.exec(&crate::device::cmd_in(opcode::NOP, 0, 16), 16)
            .unwrap();
    }
    assert_eq!(dev.poll_events(|_| panic!("no events")).unwrap(), 0);
    assert_eq!(dev.events_lost(), 0);
}

// ------------------------------------------------------------------------------------------
// CQ, mkey, QP

#[test]
fn cq_buffers_are_initialised_and_described() {
    let b = bench();
    let dev = b.probe().unwrap();
    let cq = dev.create_cq(7, dev.driver_eqn().unwrap()).unwrap();
    assert_eq!(cq.entries(), 128);
    for i in 0..128 {
        assert_eq!(cq_ring(&cq).read_u8(i * 64 + 63).unwrap(), 0xf0);
    }
    let inp = b.fw().inputs[&opcode::CREATE_CQ].clone();
    let ctx = create_cq_in::CQ_CONTEXT.byte_off();
    use firmware_interface::ctx::cqc;
    assert_eq!(cqc::LOG_CQ_SIZE.at(ctx).get(&inp), 7);
    assert_eq!(cqc::UAR_PAGE.at(ctx).get(&inp), dev.driver_uar().unwrap());
    assert_eq!(cqc::C_EQN_OR_APU_ELEMENT.at(ctx).get(&inp), cq.eqn());
    assert_eq!(cqc::DBR_ADDR.at(ctx).get64(&inp), cq_rec(&cq).iova());
    assert_eq!(inp.len(), 0x110 + 2 * 8);
    assert_eq!(be64(&inp, 0x110), cq_ring(&cq).iova());
    assert_eq!(be64(&inp, 0x118), cq_ring(&cq).iova() + 4096);
    assert_eq!(dev.create_cq(17, 0).unwrap_err(), Error::InvalidArgument);
    dev.destroy_cq(cq).unwrap();
}

#[test]
fn mkey_key_is_index_and_variant() {
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = dev.driver_pd().unwrap();
    let pages = [0x10_0000u64, 0x20_0000, 0x30_0000];
    let access = MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE | MkeyAccess::REMOTE_READ;
    // (Every create_mkey here: the fake device never reads or writes memory through memory
    // keys, so the made-up page addresses are never dereferenced.)
    // SAFETY: as just said.
    let mk = unsafe { dev.create_mkey(pd, 0x7000_0800, 8192, access, &pages) }.unwrap();
    assert_eq!(mk.key() >> 8, mk.index());
    let inp = b.fw().inputs[&opcode::CREATE_MKEY].clone();
    use firmware_interface::ctx::mkc;
    let c = create_mkey_in::MEMORY_KEY_MKEY_ENTRY.byte_off();
    assert_eq!(mkc::MKEY_7_0.at(c).get(&inp), mk.key() & 0xff);
    assert_eq!(mkc::ACCESS_MODE_1_0.at(c).get(&inp), mkc::ACCESS_MODE_MTT);
    assert_eq!(mkc::QPN.at(c).get(&inp), 0xff_ffff);
    assert_eq!(mkc::PD.at(c).get(&inp), pd);
    assert_eq!(mkc::START_ADDR.at(c).get64(&inp), 0x7000_0800);
    assert_eq!(mkc::LEN.at(c).get64(&inp), 8192);
    assert_eq!(mkc::LOG_PAGE_SIZE.at(c).get(&inp), 12);
    assert_eq!(mkc::TRANSLATIONS_OCTWORD_SIZE.at(c).get(&inp), 2);
    assert_eq!((mkc::LR.at(c).get(&inp), mkc::LW.at(c).get(&inp)), (1, 1));
    assert_eq!((mkc::RR.at(c).get(&inp), mkc::RW.at(c).get(&inp)), (1, 1));
    assert_eq!(mkc::A.at(c).get(&inp), 0);
    assert_eq!(inp.len(), 0x110 + 4 * 8);
    assert_eq!(be64(&inp, 0x120), 0x30_0000);
    // SAFETY: as above.
    let mk2 = unsafe { dev.create_mkey(pd, 0, 4096, MkeyAccess::LOCAL_READ, &pages[..1]) }.unwrap();
    assert_ne!(mk.key() & 0xff, mk2.key() & 0xff);
    // variant 0 is never used: index 1 | variant 0 would be 0x100, the scatter terminator
    assert_ne!(mk.key() & 0xff, 0);
    assert_ne!(mk.key(), firmware_interface::wqe::INVALID_LKEY);

    // three pages are needed for 8 KB starting mid-page
    assert_eq!(
        // SAFETY: as above.
        unsafe { dev.create_mkey(pd, 0x800, 8192, access, &pages[..2]) },
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { dev.create_mkey(pd, 0, 4096, MkeyAccess::REMOTE_WRITE, &pages[..1]) },
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { dev.create_mkey(pd, 0, 4096, access, &[0x1234]) },
        Err(Error::InvalidArgument)
    );
    dev.destroy_mkey(mk).unwrap();
    dev.destroy_mkey(mk2).unwrap();
}

#[test]
fn qp_lifecycle() {
    let b = bench();
    let dev = b.probe().unwrap();
    let cq = dev.create_cq(6, dev.driver_eqn().unwrap()).unwrap();
    let attr = QpCreate {
        pd: dev.driver_pd().unwrap(),
        send_cqn: cq.cqn(),
        recv_cqn: cq.cqn(),
        log_sq_size: 6,
        log_rq_size: 5,
        log_rq_stride: 2,
        ..Default::default()
    };
    let mut qp = dev.create_qp(&attr).unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(qp.sq_offset(), 32 * 64);
    assert_eq!(qp.buffer().len(), 8192);
    let inp = b.fw().inputs[&opcode::CREATE_QP].clone();
    let qb = create_qp_in::QPC.byte_off();
    assert_eq!(qpc::LOG_SQ_SIZE.at(qb).get(&inp), 6);
    assert_eq!(qpc::LOG_RQ_SIZE.at(qb).get(&inp), 5);
    assert_eq!(qpc::LOG_RQ_STRIDE.at(qb).get(&inp), 2);
    assert_eq!(qpc::CQN_SND.at(qb).get(&inp), cq.cqn());
    assert_eq!(qpc::UAR_PAGE.at(qb).get(&inp), dev.driver_uar().unwrap());
    assert_eq!(qpc::PM_STATE.at(qb).get(&inp), qpc::PM_STATE_MIGRATED);
    assert_eq!(
        qpc::DBR_ADDR.at(qb).get64(&inp),
        qp.doorbell_record().iova()
    );
    assert_eq!(inp.len(), 0x110 + 2 * 8);

    let m = QpModify {
        access: QpAccess::REMOTE_WRITE | QpAccess::REMOTE_READ,
        remote_qpn: 0x99,
        rq_psn: 0x1234,
        sq_psn: 0x4321,
        mtu: Mtu::Mtu4096,
        path: AddressPath {
            rgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
            rmac: [2, 0, 0, 0, 0, 9],
            udp_sport: 0xc000,
            traffic_class: 0x68,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        dev.modify_qp(&mut qp, Transition::Init2Rtr, &m),
        Err(Error::InvalidArgument)
    );
    dev.modify_qp(&mut qp, Transition::Rst2Init, &m).unwrap();
    let inp = b.fw().inputs[&opcode::RST2INIT_QP].clone();
    let qb = rst2init_qp_in::QPC.byte_off();
    let pb = qb + qpc::PRIMARY_ADDRESS_PATH.byte_off();
    use firmware_interface::ctx::ads;
    assert_eq!(rst2init_qp_in::QPN.get(&inp), qp.qpn());
    assert_eq!(ads::VHCA_PORT_NUM.at(pb).get(&inp), 1);
    assert_eq!(
        (
            qpc::RRE.at(qb).get(&inp),
            qpc::RWE.at(qb).get(&inp),
            qpc::RAE.at(qb).get(&inp)
        ),
        (1, 1, 0)
    );
    dev.modify_qp(&mut qp, Transition::Init2Rtr, &m).unwrap();
    let inp = b.fw().inputs[&opcode::INIT2RTR_QP].clone();
    assert_eq!(qpc::REMOTE_QPN.at(qb).get(&inp), 0x99);
    assert_eq!(qpc::NEXT_RCV_PSN.at(qb).get(&inp), 0x1234);
    assert_eq!(qpc::MTU.at(qb).get(&inp), qpc::MTU_4096);
    assert_eq!(qpc::LOG_MSG_MAX.at(qb).get(&inp), 30);
    assert_eq!(ads::RMAC.at(pb).slice(&inp).unwrap(), &[2, 0, 0, 0, 0, 9]);
    assert_eq!(ads::RGID_RIP.at(pb).slice(&inp).unwrap(), &m.path.rgid);
    assert_eq!(ads::UDP_SPORT.at(pb).get(&inp), 0xc000);
    assert_eq!(ads::HOP_LIMIT.at(pb).get(&inp), 64);
    assert_eq!(ads::DSCP.at(pb).get(&inp), 0x68 >> 2);
    dev.modify_qp(&mut qp, Transition::Rtr2Rts, &m).unwrap();
    let inp = b.fw().inputs[&opcode::RTR2RTS_QP].clone();
    assert_eq!(qpc::NEXT_SEND_PSN.at(qb).get(&inp), 0x4321);
    assert_eq!(ads::ACK_TIMEOUT.at(pb).get(&inp), 14);
    assert_eq!(qpc::RETRY_COUNT.at(qb).get(&inp), 7);
    assert_eq!(qp.state(), QpState::Rts);
    assert_eq!(dev.query_qp(&qp).unwrap().state, QpState::Rts);

    // out-of-range attributes are refused before anything is sent
    let bad = QpModify {
        sq_psn: 1 << 24,
        ..m
    };
    assert_eq!(
        dev.modify_qp(&mut qp, Transition::Rts2Rts, &bad),
        Err(Error::InvalidArgument)
    );
    let bad = QpModify { port: 2, ..m };
    assert_eq!(
        dev.modify_qp(&mut qp, Transition::Rts2Rts, &bad),
        Err(Error::InvalidArgument)
    );

    qp.doorbell_record().write_be32(0, 5).unwrap();
    dev.modify_qp(&mut qp, Transition::ToErr, &m).unwrap();
    dev.modify_qp(&mut qp, Transition::ToRst, &m).unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(qp.doorbell_record().read_be32(0).unwrap(), 0);
    assert_eq!(dev.query_qp(&qp).unwrap().state, QpState::Reset);

    // a device that reports a state that does not exist
    b.hook(on(
        opcode::QUERY_QP,
        Reply::ok(out_with(464, |o| {
            qpc::STATE.at(0x18).set(o, 8);
        })),
    ));
    assert_eq!(
        dev.query_qp(&qp).unwrap_err(),
        Error::BadOutput {
            opcode: opcode::QUERY_QP,
            what: OutputFault::QpContext { value: 8 }
        }
    );
    b.fw().hook = None;

    dev.destroy_qp(qp).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(b.heap.live_buffers(), 0);
}

#[test]
fn qp_sizes_are_checked() {
    let b = bench();
    let dev = b.probe().unwrap();
    let before = b.heap.live_buffers();
    let base = QpCreate {
        pd: 1,
        send_cqn: 1,
        recv_cqn: 1,
        ..Default::default()
    };
    for bad in [
        QpCreate {
            log_sq_size: 13,
            ..base
        },
        QpCreate {
            log_rq_stride: 6, // 1 KB > max_wqe_sz_rq
            ..base
        },
        QpCreate {
            log_rq_size: 0,
            log_rq_stride: 0, // 16-byte RQ
            ..base
        },
        QpCreate {
            send_cqn: 1 << 12,
            ..base
        },
        QpCreate {
            uar: Some(1 << 20),
            ..base
        },
    ] {
        assert_eq!(dev.create_qp(&bad).unwrap_err(), Error::InvalidArgument);
    }
    assert_eq!(b.heap.live_buffers(), before, "nothing allocated or leaked");
}

#[test]
fn lost_objects_keep_their_memory() {
    let b = bench();
    let dev = b.probe().unwrap();
    let before = b.heap.live_buffers();
    let cq = dev.create_cq(4, dev.driver_eqn().unwrap()).unwrap();
    b.hook(on(
        opcode::DESTROY_CQ,
        Reply::ok(out_with(16, |o| {
            o[0] = firmware_interface::cmd_status::BAD_RES_STATE
        })),
    ));
    assert!(dev.destroy_cq(cq).is_err());
    assert_eq!(b.heap.live_buffers(), before + 2, "ring and record leaked");
}

// ------------------------------------------------------------------------------------------
// Health, misc

#[test]
fn health_checks() {
    let b = bench();
    let dev = b.probe().unwrap();
    dev.check_health().unwrap();
    b.fw().health_synd = 0x8;
    assert_eq!(dev.check_health(), Err(Error::Health { syndrome: 8 }));
    b.fw().health_synd = 0;
    b.fw().nic_if = 7;
    assert_eq!(
        dev.check_health(),
        Err(Error::InterfaceDown { nic_interface: 7 })
    );
    b.fw().nic_if = 0;
    b.fw().health_fw_ver = u32::MAX;
    assert_eq!(dev.check_health(), Err(Error::DeviceGone));
    b.fw().health_fw_ver = 1;

    let b = bench();
    let dev = b
        .probe_with(Config {
            heartbeat_timeout_ns: Some(5_000_000),
            ..test_config()
        })
        .unwrap();
    dev.check_health().unwrap();
    for _ in 0..10 {
        b.clock.relax();
    }
    assert_eq!(dev.check_health(), Err(Error::HeartbeatLost));
}

#[test]
fn provider_and_port_queries() {
    use verbs::Provider;
    let b = bench();
    let dev = b
        .probe_with(Config {
            device_id: 0x1017,
            ..test_config()
        })
        .unwrap();
    let a = dev.query_device().unwrap();
    // fw_ver 0x0e20_03f2 in the health buffer: 14.32.1010, as ibv_devinfo prints it.
    assert_eq!(a.fw_ver, "14.32.1010");
    assert_eq!((a.vendor_id, a.vendor_part_id), (0x15b3, 0x1017));
    assert_eq!(a.max_qp, 1024);
    assert_eq!(a.max_cqe, 65535);
    assert_eq!(a.phys_port_cnt, 1);
    // From the fake's capabilities (`default_caps`): max_wqe_sz_sq 1024 (a 1008-byte WQE at
    // most: 63 units), max_wqe_sz_rq 512, log_max_ra_*_qp 4, log_max_srq 10 of 2^12,
    // atomics.
    assert_eq!(
        a.max_sge, 32,
        "512-byte receive WQE: 32 SGEs (a UD send takes 59)"
    );
    assert_eq!(a.max_sge_rd, (1008 - 32) / 16);
    assert_eq!(
        a.max_inline_data,
        1008 - 64 - 4,
        "UD: control + datagram + header"
    );
    assert_eq!((a.max_qp_rd_atom, a.max_qp_init_rd_atom), (16, 16));
    assert_eq!(a.atomic_cap, verbs::AtomicCap::Hca);
    assert_eq!((a.max_srq, a.max_srq_wr, a.max_srq_sge), (1024, 4095, 31));
    assert_eq!(dev.mac().unwrap(), [2, 0, 0, 0, 0, 7]);
    assert!(dev.port_up().unwrap());

    dev.set_roce_gid(
        3,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
        [2, 0, 0, 0, 0, 7],
    )
    .unwrap();
    let inp = b.fw().inputs[&opcode::SET_ROCE_ADDRESS].clone();
    use firmware_interface::ctx::roce_addr_layout as r;
    assert_eq!(set_roce_address_in::ROCE_ADDRESS_INDEX.get(&inp), 3);
    assert_eq!(r::ROCE_L3_TYPE.at(0x10).get(&inp), r::L3_TYPE_IPV4);
    assert_eq!(r::ROCE_VERSION.at(0x10).get(&inp), r::ROCE_VERSION_V2);
    assert_eq!(r::SOURCE_MAC_47_32.at(0x10).get(&inp), 0x0200);
    assert_eq!(r::SOURCE_MAC_31_0.at(0x10).get(&inp), 7);
    assert_eq!(
        dev.set_roce_gid(16, [0; 16], [0; 6]),
        Err(Error::InvalidArgument)
    );
    assert_eq!(dev.dealloc_pd(dev.driver_pd().unwrap()), Err(Error::Busy));
}

#[test]
fn query_device_follows_the_capabilities() {
    use verbs::Provider;
    let b = bench();
    {
        let mut fw = b.fw();
        let c = &mut fw.caps;
        assert!(cap::LOG_MAX_RA_RES_QP.set(c, 9));
        assert!(cap::LOG_MAX_RA_REQ_QP.set(c, 2));
        assert!(cap::ATOMIC.set(c, 0));
        assert!(cap::LOG_MAX_SRQ.set(c, 0));
        assert!(cap::MAX_WQE_SZ_SQ.set(c, 256));
        assert!(cap::MAX_WQE_SZ_RQ.set(c, 100));
    }
    let dev = b.probe().unwrap();
    let a = dev.query_device().unwrap();
    // A QP context takes at most 2^7 outstanding reads.
    assert_eq!((a.max_qp_rd_atom, a.max_qp_init_rd_atom), (128, 4));
    assert_eq!(a.atomic_cap, verbs::AtomicCap::None);
    assert_eq!((a.max_srq, a.max_srq_wr, a.max_srq_sge), (0, 0, 0));
    // 256-byte send WQEs: UD 12 SGEs / 188 inline bytes, RC 14; a 64-byte receive stride.
    assert_eq!((a.max_sge, a.max_sge_rd, a.max_inline_data), (4, 14, 188));
}

#[test]
fn an_srd_qp_is_not_supported() {
    use verbs::Provider;
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 16, 0, None).unwrap();
    let attr = verbs::QpInitAttr {
        qp_type: verbs::QpType::Srd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: verbs::QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let before = b.opcodes().len();
    let err = Provider::create_qp(&dev, &pd, &attr).unwrap_err();
    assert_eq!(err, verbs::Error::NotSupported);
    assert_eq!(err.errno(), 95);
    assert_eq!(b.opcodes().len(), before, "no command for an SRD QP");
}

#[test]
fn a_failed_command_reaches_verbs_with_its_opcode_status_and_syndrome() {
    use firmware_interface::cmd_status as st;
    use verbs::{DeviceFailure, Provider};
    let fail = |opc: u16, status: u8, syndrome: u32| {
        let b = bench();
        let dev = b.probe().unwrap();
        b.hook(on(
            opc,
            Reply::ok(out_with(16, |o| {
                o[0] = status;
                o[4..8].copy_from_slice(&syndrome.to_be_bytes());
            })),
        ));
        (b, dev)
    };
    // INTERNAL_ERR has no errno but EIO: the failure itself comes up.
    let (_b, dev) = fail(opcode::CREATE_CQ, st::INTERNAL_ERR, 0x00c0_ffee);
    let err = Provider::create_cq(&dev, 16, 7, None).unwrap_err();
    assert_eq!(
        err,
        verbs::Error::Device(DeviceFailure::new(
            opcode::CREATE_CQ,
            st::INTERNAL_ERR,
            0x00c0_ffee
        ))
    );
    assert_eq!(err.errno(), 5);
    assert_eq!(
        err.to_string(),
        "device command 0x0400 failed with status 0x01, syndrome 0x00c0ffee (errno 5)"
    );
    let (_b, dev) = fail(opcode::ALLOC_PD, st::BAD_SYS_STATE, 0x1234_5678);
    let Err(verbs::Error::Device(d)) = Provider::alloc_pd(&dev) else {
        panic!("ALLOC_PD failure not kept")
    };
    assert_eq!(
        (d.opcode, d.status, d.syndrome),
        (opcode::ALLOC_PD, st::BAD_SYS_STATE, 0x1234_5678)
    );
    // A status with its own errno keeps the errno libibverbs users compare.
    let (_b, dev) = fail(opcode::ALLOC_PD, st::BAD_PARAM, 1);
    assert_eq!(
        Provider::alloc_pd(&dev).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    let (_b, dev) = fail(opcode::ALLOC_PD, st::LIM, 1);
    assert_eq!(
        Provider::alloc_pd(&dev).unwrap_err(),
        verbs::Error::NoMemory
    );
}

#[test]
fn errno_mapping() {
    assert_eq!(Error::NotReady.errno(), 110);
    assert_eq!(Error::CmdTimeout { opcode: 1 }.errno(), 110);
    assert_eq!(Error::DeviceGone.errno(), 19);
    assert_eq!(Error::Dma(nic_hal::DmaError::NoMemory).errno(), 12);
    assert_eq!(
        Error::Cmd {
            opcode: 0,
            status: firmware_interface::cmd_status::RES_BUSY,
            syndrome: 0
        }
        .errno(),
        16
    );
    assert_eq!(
        verbs::Error::from(Error::DeviceGone),
        verbs::Error::NoDevice
    );
    assert_eq!(
        verbs::Error::from(Error::CmdTimeout { opcode: 1 }),
        verbs::Error::TimedOut
    );
    assert_eq!(
        verbs::Error::from(Error::Cmd {
            opcode: 0,
            status: firmware_interface::cmd_status::LIM,
            syndrome: 0
        }),
        verbs::Error::NoMemory
    );
    assert_eq!(
        verbs::Error::from(Error::NotSupported),
        verbs::Error::NotSupported
    );
    // Statuses Linux maps to EIO keep the command's opcode, status and syndrome.
    use firmware_interface::cmd_status as st;
    for status in [
        st::INTERNAL_ERR,
        st::BAD_SYS_STATE,
        st::BAD_INPUT_LEN,
        st::BAD_OUTPUT_LEN,
        0x99,
    ] {
        let e = Error::Cmd {
            opcode: 0x501,
            status,
            syndrome: 0xabcd,
        };
        assert_eq!(e.errno(), 5);
        assert_eq!(
            verbs::Error::from(e),
            verbs::Error::Device(verbs::DeviceFailure::new(0x501, status, 0xabcd))
        );
    }
    // Failures without a command status stay plain EIO.
    assert_eq!(
        verbs::Error::from(Error::Delivery {
            opcode: 0x501,
            status: 3
        }),
        verbs::Error::Io
    );
    assert_eq!(
        verbs::Error::from(Error::Health { syndrome: 1 }),
        verbs::Error::Io
    );
    assert!(is_supported_pci(0x15b3, 0x101d));
    assert!(!is_supported_pci(0x15b3, 0x6750));
    // QEMU ivshmem-plain is the harnesses' business, not a ConnectX function.
    assert!(!is_supported_pci(0x1af4, 0x1110));
}
