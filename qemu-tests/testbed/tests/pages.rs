//! Firmware pages at run time: the emulated device asks for pages in the middle of creates
//! (and gives them back after destroys), as ConnectX firmware does when its ICM grows; the
//! driver serves those requests on the page command slot while the create waits, without the
//! application polling events. A page-request storm cannot keep one event call busy.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use firmware_interface::{op_mod, opcode};
use nic_emulator::host::{SharedMapping, ShmBar};
use nic_emulator::{Device, PageRequests, Profile, spawn_poller};
use nic_hal::{HeapDma, MmioBar};
use nic_testbed::{EmuDevice, IommuView, Testbed, YieldingTime};
use verbs::{AccessFlags, Provider, QpCap, QpInitAttr, QpType, SrqAttr};

/// The slot of page commands: the last of the 32.
const PAGE_SLOT: u8 = 31;

fn profile(pages: u32) -> Profile {
    Profile {
        page_requests: PageRequests::each_create(pages),
        ..Profile::default()
    }
}

/// Serves whatever page requests are queued or arrive, until none are left; then the driver's
/// and the device's page counts agree.
fn settle(tb: &Testbed, dev: &EmuDevice) {
    for _ in 0..64 {
        dev.poll_events(|_| {}).unwrap();
        if dev.page_requests_pending() == 0 {
            break;
        }
    }
    assert_eq!(dev.page_requests_pending(), 0);
    assert!(tb.device().waiting_for_pages().is_empty());
    assert_eq!(dev.fw_pages() as u32, tb.live().fw_pages);
}

#[test]
fn creates_that_need_pages_mid_command_complete() {
    const ROUNDS: usize = 100;
    let tb = Testbed::new(profile(2));
    let dev = tb.probe(mlx5::Config::default()).unwrap();
    let boot_pages = dev.fw_pages();
    assert_eq!(boot_pages as u32, tb.live().fw_pages);
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let srq_attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let mut cqs = Vec::new();
    let mut qps = Vec::new();
    let mut mrs = Vec::new();
    let mut srqs = Vec::new();
    for _ in 0..ROUNDS {
        let cq = Provider::create_cq(&dev, 4, 0, None).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let (qp, _) = Provider::create_qp(&dev, &pd, &init).unwrap();
        let buf = Provider::alloc_buf(&dev, 4096).unwrap();
        mrs.push(Provider::reg_mr(&dev, &pd, buf, AccessFlags::LOCAL_WRITE).unwrap());
        srqs.push(Provider::create_srq(&dev, &pd, &srq_attr).unwrap());
        qps.push(qp);
        cqs.push(cq);
    }
    {
        let d = tb.device();
        // Every create asked for pages and got them while it waited: the GIVE on the page
        // slot completed right before it.
        let log = d.command_log();
        let creates: Vec<usize> = (0..log.len())
            .filter(|&i| {
                matches!(
                    log[i].opcode,
                    opcode::CREATE_CQ
                        | opcode::CREATE_QP
                        | opcode::CREATE_MKEY
                        | opcode::CREATE_SRQ
                        | opcode::CREATE_RMP
                )
            })
            .collect();
        // The ones this loop made are the last 4 × ROUNDS.
        assert!(creates.len() >= 4 * ROUNDS);
        for &i in &creates[creates.len() - 4 * ROUNDS..] {
            assert_eq!(log[i].status, 0, "{:?}", log[i]);
            let give = log[i - 1];
            assert_eq!(
                (give.slot, give.opcode, give.op_mod, give.status),
                (
                    PAGE_SLOT,
                    opcode::MANAGE_PAGES,
                    op_mod::MANAGE_PAGES_GIVE,
                    0
                ),
                "the pages of {:?} came while it waited",
                log[i]
            );
        }
        assert!(d.page_requests_raised() >= 4 * ROUNDS as u64);
    }
    // The pages of 400 objects (2 each) are with the device, and both sides agree.
    settle(&tb, &dev);
    assert_eq!(dev.fw_pages(), boot_pages + 2 * 4 * ROUNDS);

    for qp in qps {
        Provider::destroy_qp(&dev, qp).unwrap();
    }
    for srq in srqs {
        Provider::destroy_srq(&dev, srq).unwrap();
    }
    for mr in mrs {
        Provider::dereg_mr(&dev, mr).unwrap();
    }
    for cq in cqs {
        Provider::destroy_cq(&dev, cq).unwrap();
    }
    // Each destroy offered its pages back; the driver took them (during later commands or
    // here).
    settle(&tb, &dev);
    assert_eq!(dev.fw_pages(), boot_pages);
    Provider::dealloc_pd(&dev, pd).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Default::default());
}

#[test]
fn a_driver_without_a_page_slot_cannot_complete_such_a_create() {
    // One command slot: nowhere to serve the page request while the create waits, so the
    // create times out (the device keeps it until the pages come).
    let tb = Testbed::new(Profile {
        log_cmdq_size: 0,
        ..profile(1)
    });
    let config = mlx5::Config {
        cmd_timeout_ns: 2_000_000_000,
        ..mlx5::Config::default()
    };
    let dev = tb.probe(config).unwrap();
    let r = Provider::create_cq(&dev, 4, 0, None);
    assert!(matches!(r, Err(verbs::Error::TimedOut)), "{r:?}");
    assert_eq!(tb.device().waiting_for_pages(), vec![0]);
}

#[test]
fn a_page_request_storm_keeps_no_event_call_busy() {
    let tb = Testbed::new(profile(1));
    let dev = tb.probe(mlx5::Config::default()).unwrap();
    tb.device().faults().page_storm = true;
    // A create completes in the storm: its pages come first.
    let cq = Provider::create_cq(&dev, 4, 0, None).unwrap();
    for _ in 0..20 {
        let before = tb.device().command_log().len();
        assert_eq!(dev.poll_events(|_| {}), Ok(0));
        let after = tb.device().command_log().len();
        // The requests queued when the call began, each one or two commands: bounded.
        assert!(
            after - before <= 8,
            "{} commands in one call",
            after - before
        );
        // And the storm goes on: the last command brought another request.
        assert!(dev.page_requests_pending() > 0);
        assert_eq!(dev.get_async_event(), Ok(None));
    }
    tb.device().faults().page_storm = false;
    settle(&tb, &dev);
    Provider::destroy_cq(&dev, cq).unwrap();
    settle(&tb, &dev);
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Default::default());
}

/// A scratch file under /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The device in poll mode, as nic-emud runs it under a guest: its BAR is shared memory the
/// driver loads from and stores to directly (untrapped), and a thread of its own polls it
/// ([`Device::poll`]); nothing runs inline in a driver's register write. Runtime page
/// requests with reclaim: every destroy of a charged object offers its pages back, and the
/// driver takes them on the page slot while its next ordinary command waits, i.e. it rings
/// the page slot right after ringing that command, usually before the device polled the
/// first ring. Every command completes (the device does not lose the first ring), the pages
/// come back, and teardown finds nothing alive.
#[test]
fn poll_mode_page_requests_lose_no_command() {
    const BAR: u64 = 32 << 20;
    let path = Scratch(PathBuf::from(format!(
        "/dev/shm/nic-testbed-pages-{}",
        std::process::id()
    )));
    let dma = HeapDma::new(0x1_0000_0000);
    let dev = Arc::new(Mutex::new(Device::with_bar(
        profile(2),
        Arc::new(IommuView(dma.clone())),
        Box::new(ShmBar::open(&path.0, Some(BAR)).unwrap()),
    )));
    let poller = spawn_poller(dev.clone());
    let bar = SharedMapping::open(&path.0, None, false).unwrap();
    // SAFETY: the mapping outlives the driver (dropped at the end of the test, after the
    // driver), and no Rust reference to it is formed.
    let regs = unsafe { MmioBar::new(bar.as_ptr(), bar.len()) };
    let drv = mlx5::Device::probe(
        regs,
        dma,
        YieldingTime::new(),
        mlx5::Config {
            // Generous: a lost ring would show as a timeout, a loaded machine must not.
            cmd_timeout_ns: 20_000_000_000,
            bar_size: BAR,
            ..mlx5::Config::default()
        },
    )
    .unwrap();
    let boot_pages = drv.fw_pages();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for _ in 0..8 {
        let pd = Provider::alloc_pd(&drv).unwrap();
        let cq = Provider::create_cq(&drv, 4, 0, None).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let (qp, _) = Provider::create_qp(&drv, &pd, &init).unwrap();
        let buf = Provider::alloc_buf(&drv, 4096).unwrap();
        let mr = Provider::reg_mr(&drv, &pd, buf, AccessFlags::LOCAL_WRITE).unwrap();
        Provider::destroy_qp(&drv, qp).unwrap();
        Provider::dereg_mr(&drv, mr).unwrap();
        Provider::destroy_cq(&drv, cq).unwrap();
        // Waits while the reclaim of the CQ's pages is served on the page slot.
        Provider::dealloc_pd(&drv, pd).unwrap();
    }
    for _ in 0..64 {
        drv.poll_events(|_| {}).unwrap();
        if drv.page_requests_pending() == 0 && drv.fw_pages() == boot_pages {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        drv.fw_pages(),
        boot_pages,
        "the destroyed objects' pages came back"
    );
    {
        let d = dev.lock().unwrap();
        assert_eq!(d.live().fw_pages, boot_pages as u32);
        let log = d.command_log();
        assert!(
            log.iter().any(|c| c.opcode == opcode::MANAGE_PAGES
                && c.op_mod == op_mod::MANAGE_PAGES_TAKE
                && c.status == 0
                && c.slot == PAGE_SLOT),
            "pages were reclaimed on the page slot"
        );
    }
    drv.shutdown().unwrap();
    poller.stop();
    let d = dev.lock().unwrap();
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert_eq!(d.live(), Default::default());
}
