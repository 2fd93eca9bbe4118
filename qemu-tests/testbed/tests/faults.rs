//! Each fault knob of the emulated device gives the documented driver error, within a bounded
//! time, with no panic and nothing left behind; a device that lies in its command outputs is
//! caught by the driver's checks.

use firmware_interface::{Field, cmd_status, cmds, delivery_status, init_seg, mbox_out, opcode};
use mlx5::raw::RawDevice;
use mlx5::{Config, Error, OutputFault};
use nic_emulator::{FailCommand, Live, Profile};
use nic_testbed::Testbed;

/// Short timeouts so that a fault ends the test quickly (they bound the test, they are not a
/// performance assertion).
fn quick() -> Config {
    Config {
        init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 200_000_000,
        reclaim_timeout_ns: 200_000_000,
        ..Config::default()
    }
}

/// After a failed probe, the device holds nothing the driver made (the HCA is disabled again
/// and every page was taken back) and the driver holds no DMA memory.
fn assert_released(tb: &Testbed) {
    assert_eq!(
        tb.live(),
        Live::default(),
        "objects or pages left on the device after a failed bring-up"
    );
    assert_eq!(tb.dma.live_buffers(), 0, "driver DMA memory left behind");
}

#[test]
fn never_ready_gives_not_ready() {
    let tb = Testbed::new(Profile::default());
    tb.device().faults().never_ready = true;
    let err = tb.probe(quick()).unwrap_err();
    assert_eq!(err, Error::NotReady);
    assert_eq!(err.errno(), 110);
    assert!(tb.device().command_log().is_empty());
    assert_eq!(tb.dma.live_buffers(), 0);
}

#[test]
fn stalled_command_interface_gives_a_command_timeout() {
    let tb = Testbed::new(Profile::default());
    tb.device().faults().stall_commands = true;
    let err = tb.probe(quick()).unwrap_err();
    assert_eq!(
        err,
        Error::CmdTimeout {
            opcode: opcode::ENABLE_HCA
        }
    );
    // The stalled entry still belongs to the device, so its page may not be freed: the driver
    // keeps the command page (leaks it on purpose) rather than let the device write freed
    // memory. Everything else is released.
    assert!(tb.dma.live_buffers() <= 3, "{}", tb.dma.live_buffers());
}

#[test]
fn failed_command_gives_its_status_and_syndrome_and_unwinds() {
    for (op, status) in [
        (opcode::INIT_HCA, cmd_status::NO_RES),
        (opcode::ALLOC_UAR, cmd_status::LIM),
        (opcode::CREATE_EQ, cmd_status::BAD_PARAM),
        (opcode::ALLOC_PD, cmd_status::NO_RES),
        (opcode::QUERY_HCA_CAP, cmd_status::INTERNAL_ERR),
    ] {
        let tb = Testbed::new(Profile::default());
        tb.device().faults().fail_command = Some(FailCommand {
            opcode: op,
            status,
            syndrome: 0x1234_5678,
            times: None,
        });
        let err = tb.probe(quick()).unwrap_err();
        assert_eq!(
            err,
            Error::Cmd {
                opcode: op,
                status,
                syndrome: 0x1234_5678
            },
            "{}",
            opcode::name(op).unwrap()
        );
        assert_released(&tb);
        assert_eq!(tb.live().fw_pages, 0, "pages not reclaimed after {op:#x}");
    }
}

/// A command the firmware fails after bring-up reaches the verbs caller with its opcode,
/// status and syndrome (EIO statuses), or as the errno its status maps to; the device is left
/// as it was and the same call then succeeds.
#[test]
fn a_failed_command_reaches_the_verbs_caller_intact() {
    use verbs::{DeviceFailure, Provider};
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(quick()).unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let before = tb.live();
    for (op, status, want) in [
        (
            opcode::CREATE_CQ,
            cmd_status::INTERNAL_ERR,
            verbs::Error::Device(DeviceFailure::new(
                opcode::CREATE_CQ,
                cmd_status::INTERNAL_ERR,
                0x0bad_cafe,
            )),
        ),
        (opcode::CREATE_CQ, cmd_status::NO_RES, verbs::Error::Again),
        (
            opcode::ALLOC_PD,
            cmd_status::BAD_SYS_STATE,
            verbs::Error::Device(DeviceFailure::new(
                opcode::ALLOC_PD,
                cmd_status::BAD_SYS_STATE,
                0x0bad_cafe,
            )),
        ),
    ] {
        tb.device().faults().fail_command = Some(FailCommand {
            opcode: op,
            status,
            syndrome: 0x0bad_cafe,
            times: Some(1),
        });
        let err = if op == opcode::CREATE_CQ {
            Provider::create_cq(&dev, 64, 0, None)
                .map(|_| ())
                .unwrap_err()
        } else {
            Provider::alloc_pd(&dev).map(|_| ()).unwrap_err()
        };
        assert_eq!(err, want, "{}", opcode::name(op).unwrap());
        if let verbs::Error::Device(d) = err {
            assert_eq!(err.errno(), 5);
            assert_eq!((d.opcode, d.status, d.syndrome), (op, status, 0x0bad_cafe));
            assert!(err.to_string().contains(&format!("{op:#06x}")), "{err}");
        }
        assert_eq!(tb.live(), before, "a failed command left something behind");
    }
    // The knob ran out: the calls go through again.
    let cq = Provider::create_cq(&dev, 64, 0, None).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
    dev.shutdown().unwrap();
}

#[test]
fn delivery_failure_gives_a_delivery_error() {
    let tb = Testbed::new(Profile::default());
    tb.device().faults().fail_delivery = Some((opcode::QUERY_ISSI, delivery_status::TOKEN_ERR));
    let err = tb.probe(quick()).unwrap_err();
    assert_eq!(
        err,
        Error::Delivery {
            opcode: opcode::QUERY_ISSI,
            status: delivery_status::TOKEN_ERR
        }
    );
    assert_released(&tb);
}

#[test]
fn health_syndrome_is_reported_by_the_health_check() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(quick()).unwrap();
    assert_eq!(dev.check_health(), Ok(()));
    tb.device()
        .raise_health(init_seg::health_synd::FW_INTERNAL_ERR);
    assert_eq!(
        dev.check_health(),
        Err(Error::Health {
            syndrome: init_seg::health_synd::FW_INTERNAL_ERR
        })
    );
    // Commands to a device in that state fail; teardown still ends (with an error) and does
    // not hang or panic.
    assert!(dev.alloc_pd().is_err());
    let _ = dev.shutdown();
}

#[test]
fn corrupted_output_mailbox_is_caught() {
    let tb = Testbed::new(Profile::default());
    tb.device().faults().corrupt_output_mailbox = Some(opcode::QUERY_HCA_CAP);
    let err = tb.probe(quick()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadOutput {
                opcode: opcode::QUERY_HCA_CAP,
                what: OutputFault::Token { .. } | OutputFault::BlockNumber { .. }
            }
        ),
        "{err:?}"
    );
    assert_released(&tb);
}

/// Makes the device rewrite field `f` of the output of `op` to `value`.
fn lie(tb: &Testbed, op: u16, f: Field, value: u32) {
    tb.device().faults().output_hook = Some(Box::new(move |o, out: &mut Vec<u8>| {
        if o == op {
            f.set(out, value);
        }
    }));
}

#[test]
fn impossible_object_numbers_are_refused() {
    // A CQN wider than the table the device advertised.
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(quick()).unwrap();
    lie(&tb, opcode::CREATE_CQ, cmds::create_cq_out::CQN, 0xff_ffff);
    let eqn = dev.driver_eqn().unwrap();
    let err = dev.create_cq(4, eqn).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadOutput {
                opcode: opcode::CREATE_CQ,
                what: OutputFault::ObjectNumber { value: 0xff_ffff }
            }
        ),
        "{err:?}"
    );
    tb.device().faults().output_hook = None;
    // The driver did not act on the lie: the real CQ the device made is leaked on the device
    // side, the driver's state is intact and the device keeps working.
    let pd = dev.alloc_pd().unwrap();
    dev.dealloc_pd(pd).unwrap();
    let _ = dev.shutdown();

    // A UAR index whose page lies past the BAR.
    let tb = Testbed::new(Profile::default());
    lie(&tb, opcode::ALLOC_UAR, cmds::alloc_uar_out::UAR, 0x80_0000);
    let err = tb.probe(quick()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadOutput {
                opcode: opcode::ALLOC_UAR,
                what: OutputFault::UarIndex { .. }
            }
        ),
        "{err:?}"
    );
}

#[test]
fn absurd_page_request_is_an_error_not_an_allocation_loop() {
    let tb = Testbed::new(Profile::default());
    lie(
        &tb,
        opcode::QUERY_PAGES,
        cmds::query_pages_out::NUM_PAGES,
        1 << 30,
    );
    let err = tb.probe(quick()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadOutput {
                opcode: opcode::QUERY_PAGES,
                what: OutputFault::PageCount { .. }
            }
        ),
        "{err:?}"
    );
    assert_released(&tb);
    // Negative boot page counts are just as impossible.
    let tb = Testbed::new(Profile::default());
    lie(
        &tb,
        opcode::QUERY_PAGES,
        cmds::query_pages_out::NUM_PAGES,
        (-5i32) as u32,
    );
    assert!(matches!(
        tb.probe(quick()).unwrap_err(),
        Error::BadOutput {
            what: OutputFault::PageCount { value: -5 },
            ..
        }
    ));
}

#[test]
fn a_status_written_over_a_successful_output_is_an_error() {
    let tb = Testbed::new(Profile::default());
    lie(
        &tb,
        opcode::ALLOC_PD,
        mbox_out::STATUS,
        u32::from(cmd_status::BAD_RES),
    );
    let err = tb.probe(quick()).unwrap_err();
    assert_eq!(
        err,
        Error::Cmd {
            opcode: opcode::ALLOC_PD,
            status: cmd_status::BAD_RES,
            syndrome: 0
        }
    );
}

#[test]
fn returned_pages_that_were_never_given_are_refused() {
    let tb = Testbed::new(Profile::default());
    let dev = tb.probe(quick()).unwrap();
    // The device answers TAKE with more entries than asked for.
    tb.device().faults().output_hook = Some(Box::new(|op, out: &mut Vec<u8>| {
        if op == opcode::MANAGE_PAGES {
            cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.set(out, 0x7fff_ffff);
        }
    }));
    let err = dev.shutdown().unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadOutput {
                opcode: opcode::MANAGE_PAGES,
                what: OutputFault::PageEntries { .. }
            }
        ),
        "{err:?}"
    );
}
