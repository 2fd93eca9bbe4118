//! Unit tests: the driver against the emulated EFA through a register backend that can
//! corrupt what the device writes (completions, read-less responses), so that every check of
//! device output is exercised; and the pure helpers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use firmware_interface::efa::feature::id;
use firmware_interface::efa::opcode as op;
use firmware_interface::efa::regs as r;
use nic_emulator::efa::{Device as Emu, Live, Profile};
use nic_emulator::{AddressSpace, DmaFault};
use nic_hal::{DmaAllocator, HeapDma, Platform, RegisterIo};
use verbs::{AhAttr, Gid, Provider, QpCap, QpInitAttr, QpType};

use crate::{CompletionFault, Config, Device, Error};

/// The device's view of host memory: the allocator's live buffers.
struct Iommu(Arc<HeapDma>);

impl AddressSpace for Iommu {
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: buf.len(),
            write: false,
        };
        if buf.is_empty() {
            return Ok(());
        }
        let p = self.0.translate(iova, buf.len()).ok_or(fault)?;
        // SAFETY: `translate` checked the range lies in one live allocation; `buf` is not in it.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: data.len(),
            write: true,
        };
        if data.is_empty() {
            return Ok(());
        }
        let p = self.0.translate(iova, data.len()).ok_or(fault)?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
        Ok(())
    }
}

/// Overwrite `bytes` at `offset` of the completion of the `nth` (0-based) command with
/// `opcode`.
#[derive(Clone)]
struct Patch {
    opcode: u8,
    nth: usize,
    offset: usize,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct TamperState {
    acq: [u32; 2],
    resp: [u32; 2],
    /// Completions the device had written when the ACQ was set.
    acq_base: usize,
    patch: Option<Patch>,
    seen: usize,
    /// Replace the register offset of read-less responses.
    readless_off: Option<u16>,
}

/// BAR0 of the emulated EFA, with corruption of what the device writes.
#[derive(Clone)]
struct Regs {
    dev: Arc<Mutex<Emu>>,
    mem: Arc<Iommu>,
    state: Arc<Mutex<TamperState>>,
}

impl RegisterIo for Regs {
    fn read32(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        self.dev.lock().unwrap().mmio_read(offset, &mut b);
        u32::from_ne_bytes(b)
    }
    fn write32(&self, offset: usize, value: u32) {
        let mut dev = self.dev.lock().unwrap();
        let mut st = self.state.lock().unwrap();
        match offset {
            r::ACQ_BASE_LO => st.acq[0] = value,
            r::ACQ_BASE_HI => st.acq[1] = value,
            r::ACQ_CAPS => st.acq_base = dev.command_log().len(),
            r::MMIO_RESP_LO => st.resp[0] = value,
            r::MMIO_RESP_HI => st.resp[1] = value,
            _ => {}
        }
        let before = dev.command_log().len();
        dev.mmio_write(offset, &value.to_ne_bytes());
        if offset == r::MMIO_REG_READ
            && let Some(off) = st.readless_off
        {
            let a = u64::from(st.resp[1]) << 32 | u64::from(st.resp[0]);
            self.mem.write(a + 2, &off.to_le_bytes()).unwrap();
        }
        let log = dev.command_log();
        for (i, rec) in log.iter().enumerate().skip(before) {
            let Some(p) = st.patch.clone() else { break };
            if rec.opcode != p.opcode {
                continue;
            }
            st.seen += 1;
            if st.seen - 1 != p.nth {
                continue;
            }
            let slot = ((i - st.acq_base) % 32) as u64;
            let a = (u64::from(st.acq[1]) << 32 | u64::from(st.acq[0])) + slot * 64;
            self.mem.write(a + p.offset as u64, &p.bytes).unwrap();
            st.patch = None;
        }
    }
    fn write64(&self, offset: usize, value: u64) {
        self.dev
            .lock()
            .unwrap()
            .mmio_write(offset, &value.to_ne_bytes());
    }
}

/// A virtual clock: every relax is a millisecond.
#[derive(Default)]
struct Clock(AtomicU64);

impl Platform for &'static Clock {
    fn relax(&self) {
        self.0.fetch_add(1_000_000, Ordering::Relaxed);
    }
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct Bench {
    regs: Regs,
    dma: Arc<HeapDma>,
}

type Dev = Device<Regs, &'static Clock>;

impl Bench {
    fn new(profile: Profile) -> Bench {
        let dma = HeapDma::new(0x2_0000_0000);
        let mem = Arc::new(Iommu(dma.clone()));
        let dev = Arc::new(Mutex::new(Emu::new(profile, mem.clone())));
        Bench {
            regs: Regs {
                dev,
                mem,
                state: Default::default(),
            },
            dma,
        }
    }

    fn patch(&self, opcode: u8, nth: usize, offset: usize, bytes: &[u8]) {
        let mut st = self.regs.state.lock().unwrap();
        st.seen = 0;
        st.patch = Some(Patch {
            opcode,
            nth,
            offset,
            bytes: bytes.to_vec(),
        });
    }

    fn probe(&self) -> Result<Dev, Error> {
        let clock: &'static Clock = Box::leak(Box::default());
        let dma: Arc<dyn DmaAllocator> = self.dma.clone();
        Device::probe(self.regs.clone(), dma, clock, Config::default())
    }

    fn live(&self) -> Live {
        self.regs.dev.lock().unwrap().live()
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

#[test]
fn a_completion_for_another_command_takes_the_queue_down() {
    let b = Bench::new(Profile::default());
    let dev = b.probe().unwrap();
    b.patch(op::ALLOC_PD, 0, 0, &[0xff, 0x0f]);
    let e = dev.alloc_pd().unwrap_err();
    assert_eq!(e, verbs::Error::Io);
    assert!(!dev.admin_up());
    assert_eq!(dev.alloc_pd().err(), Some(verbs::Error::NoDevice));
    // The driver-level error names the fault.
    let b = Bench::new(Profile::default());
    b.patch(op::GET_FEATURE, 1, 0, &[0xff, 0x0f]);
    assert!(matches!(
        b.probe(),
        Err(Error::BadCompletion {
            opcode: op::GET_FEATURE,
            fault: CompletionFault::CommandId { got: 0xfff, .. }
        })
    ));
}

#[test]
fn bad_create_outputs_are_refused_and_the_objects_destroyed() {
    let b = Bench::new(Profile::default());
    let dev = b.probe().unwrap();
    let buffers = b.dma.live_buffers();
    // A CQ deeper than its ring.
    b.patch(op::CREATE_CQ, 0, 10, &0x4000u16.to_le_bytes());
    assert_eq!(dev.create_cq(16, 0, None).err(), Some(verbs::Error::Io));
    assert_eq!(b.live().cqs, 0, "the CQ was destroyed again");
    assert_eq!(b.dma.live_buffers(), buffers, "and its ring freed");
    // A misaligned CQ doorbell.
    b.patch(op::CREATE_CQ, 0, 12, &3u32.to_le_bytes());
    assert_eq!(dev.create_cq(16, 0, None).err(), Some(verbs::Error::Io));

    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, 0, None).unwrap();
    // A sub-CQ index beyond the CQ's.
    b.patch(op::CREATE_QP, 0, 16, &1u16.to_le_bytes());
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: cap(),
        sq_sig_all: true,
    };
    assert_eq!(dev.create_qp(&pd, &init).err(), Some(verbs::Error::Io));
    assert_eq!(b.live().qps, 0);
    // A QP state that does not exist.
    let (qp, _) = dev.create_qp(&pd, &init).unwrap();
    b.patch(op::QUERY_QP, 0, 8, &9u32.to_le_bytes());
    assert_eq!(dev.query_qp(&qp).err(), Some(verbs::Error::Io));
    assert_eq!(
        dev.query_qp(&qp).map(|a| a.qp_state),
        Ok(verbs::QpState::Reset)
    );
    // The AH number RX completions use for "unknown sender".
    b.patch(op::CREATE_AH, 0, 8, &0xffffu16.to_le_bytes());
    let attr = AhAttr {
        dgid: Gid([1; 16]),
        ..Default::default()
    };
    assert_eq!(dev.create_ah(&pd, &attr).err(), Some(verbs::Error::Io));
    // The destroy named the handle the device answered with, not the one it made: that AH
    // stays (and keeps its PD busy).
    assert_eq!(b.live().ahs, 1);
    dev.destroy_qp(qp).unwrap();
    dev.destroy_cq(cq).unwrap();
    assert_eq!(dev.dealloc_pd(pd).unwrap_err().error, verbs::Error::Busy);
    assert!(dev.admin_up(), "bad output is not a broken queue");
}

#[test]
fn bad_feature_blocks_fail_the_probe() {
    // DEVICE_ATTR (the first GET_FEATURE): the doorbell BAR index at 8 + 28.
    let b = Bench::new(Profile::default());
    b.patch(op::GET_FEATURE, 0, 8 + 28, &9u16.to_le_bytes());
    assert_eq!(
        b.probe().err(),
        Some(Error::BadOutput {
            opcode: op::GET_FEATURE,
            field: "device_attr.db_bar",
            value: 9
        })
    );
    assert_eq!(b.live(), Live::default(), "reset again (INIT_ERR)");
    assert_eq!(b.dma.live_buffers(), 0);
    // QUEUE_ATTR (the second): max_qp of 0.
    let b = Bench::new(Profile::default());
    b.patch(op::GET_FEATURE, 1, 8, &0u32.to_le_bytes());
    assert!(matches!(
        b.probe(),
        Err(Error::BadOutput {
            field: "queue_attr.max_qp",
            ..
        })
    ));
    // A device without the network attributes.
    let b = Bench::new(Profile::default());
    let features = Profile::default().supported_features() & !(1 << id::NETWORK_ATTR);
    b.patch(op::GET_FEATURE, 0, 8, &features.to_le_bytes());
    assert!(matches!(
        b.probe(),
        Err(Error::BadOutput {
            field: "device_attr.supported_features",
            ..
        })
    ));
}

#[test]
fn readless_responses_for_another_register_are_refused() {
    let b = Bench::new(Profile::default());
    b.regs.state.lock().unwrap().readless_off = Some(r::VERSION as u16);
    // The first read (CAPS) comes back naming VERSION.
    assert_eq!(
        b.probe().err(),
        Some(Error::BadReadless {
            offset: r::CAPS as u16,
            got: r::VERSION as u16
        })
    );
}

#[test]
fn hw_hints_set_the_timeouts() {
    let b = Bench::new(Profile {
        hw_hints: [7, 0, 20, 0],
        ..Profile::default()
    });
    let dev = b.probe().unwrap();
    assert_eq!(dev.attributes().hw_hints, [7, 0, 20, 0]);
    b.regs.dev.lock().unwrap().faults().stall_admin = true;
    let clock = dev.platform;
    let t0 = clock.now_ns();
    assert_eq!(dev.alloc_pd().err(), Some(verbs::Error::TimedOut));
    let waited = clock.now_ns() - t0;
    assert!((20_000_000..30_000_000).contains(&waited), "{waited}");
    b.regs.dev.lock().unwrap().faults().drop_readless = true;
    let t0 = clock.now_ns();
    assert_eq!(
        dev.read_reg(r::DEV_STS),
        Err(Error::ReadTimeout { offset: 0x58 })
    );
    let waited = clock.now_ns() - t0;
    assert!((7_000_000..10_000_000).contains(&waited), "{waited}");
}

#[test]
fn errors_map_to_the_verbs_errno() {
    use firmware_interface::efa::admin::status as st;
    let admin = |status| Error::Admin {
        opcode: op::CREATE_QP,
        status,
        extended: 3,
    };
    assert_eq!(
        verbs::Error::from(admin(st::RESOURCE_ALLOCATION_FAILURE)),
        verbs::Error::NoMemory
    );
    assert_eq!(
        verbs::Error::from(admin(st::UNSUPPORTED_OPCODE)),
        verbs::Error::NotSupported
    );
    assert_eq!(
        verbs::Error::from(admin(st::RESOURCE_BUSY)),
        verbs::Error::Busy
    );
    assert_eq!(
        verbs::Error::from(admin(st::ILLEGAL_PARAMETER)),
        verbs::Error::Device(verbs::DeviceFailure::new(1, st::ILLEGAL_PARAMETER, 3))
    );
    assert_eq!(Error::AdminTimeout { opcode: 1 }.errno(), 110);
    assert_eq!(Error::AdminDown.errno(), 19);
    assert_eq!(Error::NotReady.errno(), 110);
    assert!(
        admin(st::ILLEGAL_PARAMETER)
            .to_string()
            .contains("CREATE_QP")
    );
}

#[test]
fn firmware_version_text_and_phases() {
    let a = crate::Attributes {
        fw_version: 0x0102_0304,
        ..Default::default()
    };
    assert_eq!(a.fw_version_text().as_str(), "1.2.3.4");
    let a = crate::Attributes {
        fw_version: u32::MAX,
        ..Default::default()
    };
    assert_eq!(a.fw_version_text().as_str(), "255.255.255.255");
    assert_eq!(crate::device::phase(0, 32), 1);
    assert_eq!(crate::device::phase(31, 32), 1);
    assert_eq!(crate::device::phase(32, 32), 0);
    assert_eq!(crate::device::phase(65535, 32), 0);
    assert_eq!(crate::device::phase(0, 16), 1);
}
