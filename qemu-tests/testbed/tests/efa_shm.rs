//! The emulated EFA untrapped on a shared BAR file, as `nic-emud --family efa` serves it to a
//! QEMU guest: the driver finds its BARs through the identity page, the device finds the
//! driver's register and doorbell writes by polling. Bring-up, an SRD loopback (SEND and
//! RDMA READ to its own address) and a UD loopback with every byte checked (the shared
//! `efa::loopback` exchange), teardown, and a second bring-up on the same file (what a reset
//! must clear).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use efa::loopback::{self, LoopbackConfig, LoopbackError, LoopbackReport, Progress, Step};
use nic_testbed::YieldingTime;
use nic_testbed::efa::EfaShmNic;
use verbs::{Provider, QpType};

/// A BAR file under /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(PathBuf::from(format!(
            "/dev/shm/efa-shm-test-{}-{tag}",
            std::process::id()
        )))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Five messages a QP (so that the SQ and RQ producers move more than once), SRD ones of odd
/// lengths from 4000 bytes, a 4000-byte READ; `round` varies the data.
fn config(ip: Ipv4Addr, round: u8) -> LoopbackConfig {
    LoopbackConfig {
        qkey: 0x600d,
        messages: 5,
        srd_len: 4000,
        srd_len_step: 7,
        ud_len: 1000,
        read_len: 4000,
        seed: round,
        gid: Some(verbs::Gid::from_ipv4(ip.octets())),
        ..LoopbackConfig::default()
    }
}

/// Bring-up, the loopback exchange (`cfg`), shutdown, nothing left on the device; the
/// exchange's outcome.
fn session(nic: &EfaShmNic, cfg: &LoopbackConfig) -> Result<LoopbackReport, LoopbackError> {
    let dev = match nic.probe() {
        Ok(d) => d,
        Err(e) => panic!(
            "bring-up through the shared BAR: {e}; device errors {:?}",
            nic.device().errors()
        ),
    };
    let a = dev.query_device().unwrap();
    assert_eq!((a.vendor_id, a.vendor_part_id), (0x1d0f, 0xefa1));
    let mut parts = Vec::new();
    let r = loopback::run(&dev, &YieldingTime::new(), cfg, &mut |p| parts.push(p));
    let bad = dev.bad_cqes();
    dev.shutdown().unwrap();
    // Also after a failure: the exchange destroyed what it created.
    assert_eq!(nic.device().live(), Default::default(), "{r:?}");
    assert_eq!(nic.dma.live_buffers(), 0);
    if r.is_ok() {
        assert_eq!(nic.device().errors(), &[]);
        assert_eq!(bad.0, 0);
        assert_eq!(
            parts,
            [
                Progress::Sent {
                    qp_type: QpType::Srd,
                    messages: cfg.messages,
                    len: cfg.srd_len
                },
                Progress::Read { len: cfg.read_len },
                Progress::Sent {
                    qp_type: QpType::Ud,
                    messages: cfg.messages,
                    len: cfg.ud_len
                },
            ]
        );
    } else {
        let d = nic.device();
        eprintln!(
            "refused entries {bad:?}; device errors {:?}, stats {:?}",
            d.errors(),
            d.data_stats()
        );
    }
    r
}

#[test]
fn an_untrapped_efa_on_a_shared_bar_runs_srd_and_ud_loopback_twice() {
    let f = Scratch::new("loop");
    let ip = Ipv4Addr::new(127, 0, 0, 41);
    let nic = EfaShmNic::new(&f.0, ip, 47_961, Default::default()).unwrap();
    let h = nic.header().expect("identity page");
    assert_eq!((h.vendor, h.device), (0x1d0f, 0xefa1));
    let want = LoopbackReport {
        sends: 10,
        reads: 1,
        read_bytes: 4000,
    };
    assert_eq!(session(&nic, &config(ip, 0)), Ok(want));
    // A second driver on the same BAR: the reset must have cleared what the first left.
    assert_eq!(session(&nic, &config(ip, 0x5a)), Ok(want));
}

/// A failing exchange reports the step and destroys what it created: a UD message longer than
/// the port's MTU (after the SRD part passed), and a GID the port does not have.
#[test]
fn a_failing_loopback_names_its_step_and_leaves_nothing_behind() {
    let f = Scratch::new("fail");
    let ip = Ipv4Addr::new(127, 0, 0, 42);
    let nic = EfaShmNic::new(&f.0, ip, 47_962, Default::default()).unwrap();
    let big = LoopbackConfig {
        ud_len: loopback::AREA_LEN,
        timeout_ns: 5_000_000_000,
        ..config(ip, 1)
    };
    let e = session(&nic, &big).unwrap_err();
    assert!(
        matches!(
            e,
            LoopbackError::Verbs {
                call: "post_send",
                ..
            } | LoopbackError::Completions {
                step: Step::Send(QpType::Ud, 0),
                ..
            }
        ),
        "{e}"
    );
    let other = verbs::Gid::from_ipv4([127, 0, 0, 43]);
    let wrong = LoopbackConfig {
        gid: Some(other),
        ..config(ip, 2)
    };
    assert!(matches!(
        session(&nic, &wrong),
        Err(LoopbackError::Gid { want, .. }) if want == other
    ));
    let none = LoopbackConfig {
        messages: 0,
        ..config(ip, 3)
    };
    assert!(matches!(
        session(&nic, &none),
        Err(LoopbackError::Config(_))
    ));
    // And the device still runs the exchange.
    assert!(session(&nic, &config(ip, 4)).is_ok());
}

#[test]
fn a_shared_bar_too_small_is_refused() {
    let f = Scratch::new("small");
    let map = nic_emulator::host::SharedMapping::open(&f.0, Some(1 << 20), true).unwrap();
    let heap = nic_hal::HeapDma::new(1 << 20);
    let e = nic_emulator::efa::Device::with_shared_bar(
        Default::default(),
        std::sync::Arc::new(nic_testbed::IommuView(heap)),
        Box::new(nic_emulator::host::ShmBar::from_mapping(map)),
    )
    .unwrap_err();
    assert!(e.contains("need"), "{e}");
}
