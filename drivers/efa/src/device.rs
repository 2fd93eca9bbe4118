//! Bring-up (`docs/efa.md#bring-up`), the read-less register reads, the admin queue and the
//! async event queue.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use firmware_interface::efa::admin::{self, AcqEntry, AqEntry, CtrlBuffInfo, aenq_group};
use firmware_interface::efa::cmds::{
    alloc_uar_resp, dealloc_uar_cmd, feature_cmd, get_feature_resp,
};
use firmware_interface::efa::feature::{self, id};
use firmware_interface::efa::opcode as op;
use firmware_interface::efa::regs::{self as r, ReadlessResp};
use firmware_interface::{Le32, LeField};
use nic_hal::barrier::{dma_rmb, dma_wmb, mmio_wmb};
use nic_hal::{DmaAllocator, Platform, RegisterIo};
use spin::Mutex;
use verbs::{AsyncElement, AsyncEvent, AsyncEventType};

use crate::mem::Shared;
use crate::{Attributes, Config, Error};

/// Admin command timeout when CAPS.admin_cmd_to is 0 (Linux: 30 s).
pub const DEFAULT_ADMIN_TIMEOUT_NS: u64 = 30_000_000_000;
/// Read-less read timeout unless the HW_HINTS say otherwise (Linux: 50 ms).
pub const DEFAULT_READ_TIMEOUT_NS: u64 = r::READ_TIMEOUT_US as u64 * 1000;
/// Unit of CAPS.reset_timeout and CAPS.admin_cmd_to.
const CAPS_UNIT_NS: u64 = r::caps::TIMEOUT_UNIT_MS as u64 * 1_000_000;
const AQ_DEPTH: u16 = admin::AQ_DEPTH;
const AENQ_DEPTH: u16 = admin::AENQ_DEPTH;
pub(crate) const ENTRY: usize = admin::ENTRY_SIZE;

/// The phase bit of pass `counter / depth` of a ring whose first pass has phase 1.
pub(crate) fn phase(counter: u16, depth: u16) -> u8 {
    (((counter / depth) & 1) ^ 1) as u8
}

/// The read-less mechanism: the response buffer and the request sequence.
struct Readless {
    /// `None` once the device was stopped and the buffer freed.
    resp: Option<Shared>,
    seq: u16,
    timeout_ns: u64,
}

/// The admin submission and completion queues.
struct AdminQueue {
    aq: Shared,
    acq: Shared,
    /// Producer counter of the submission queue (what AQ_PROD_DB receives).
    pc: u16,
    /// Consumer counter of the completion queue.
    cc: u16,
    timeout_ns: u64,
    /// A command timed out or completed wrongly, or the device was stopped.
    down: bool,
}

/// The async event queue and what it delivered.
struct Aenq {
    ring: Shared,
    cc: u16,
    events: VecDeque<AsyncEvent>,
}

/// Counters of the async event queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AenqCounters {
    /// Keep-alive events (the device's heartbeat), consumed by the driver.
    pub keep_alive: u64,
    /// Fatal-error events (each also queued as `DeviceFatal` for `get_async_event`).
    pub fatal: u64,
    /// Warning and notification events (not acted on, as Linux).
    pub unhandled: u64,
    /// Events of a group the driver did not enable (ignored).
    pub unknown: u64,
}

/// An EFA device brought up by [`Device::probe`]; a [`verbs::Provider`].
pub struct Device<R: RegisterIo, P: Platform> {
    pub(crate) regs: R,
    pub(crate) dma: Arc<dyn DmaAllocator>,
    pub(crate) platform: P,
    pub(crate) config: Config,
    readless: Mutex<Readless>,
    admin: Mutex<Option<AdminQueue>>,
    aenq: Mutex<Option<Aenq>>,
    counters: Mutex<AenqCounters>,
    pub(crate) attrs: Attributes,
    /// The driver's UAR (the user context of the verbs provider).
    pub(crate) uar: u16,
    /// Commands the driver completed, in order (for tests and diagnostics).
    commands: AtomicU64,
    stopped: bool,
    /// The last reset completed: the device uses none of the driver's memory.
    quiesced: bool,
    /// The memory and doorbell BARs (the data path), once attached.
    pub(crate) data: Option<crate::dp::DataBars<R>>,
    /// Completion entries refused by `poll_cq`.
    bad_cqes: AtomicU64,
    /// The last refused completion entry.
    last_bad_cqe: Mutex<Option<crate::dp::CqeFault>>,
    /// Completion channels made so far (the next one's vector).
    pub(crate) channels_made: core::sync::atomic::AtomicU32,
}

impl<R: RegisterIo, P: Platform> core::fmt::Debug for Device<R, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("efa::Device")
            .field("attrs", &self.attrs)
            .field("uar", &self.uar)
            .finish_non_exhaustive()
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Gives the driver the data path's BARs: `mem`, the memory BAR (BAR2, where each QP's
    /// low-latency send queue is, at its CREATE_QP `llq_descriptors_offset`; map it
    /// write-combining), and `doorbells`, the BAR `attributes().db_bar` names (SQ, RQ and CQ
    /// doorbells; uncached). Until then `post_send`, `post_recv` and `poll_cq` answer
    /// EOPNOTSUPP.
    pub fn attach_data_bars(&mut self, mem: R, doorbells: R) {
        self.data = Some(crate::dp::DataBars { mem, db: doorbells });
    }

    /// Completion entries `poll_cq` refused (malformed: see [`crate::CqeFault`]) and the last
    /// one's fault.
    pub fn bad_cqes(&self) -> (u64, Option<crate::dp::CqeFault>) {
        (
            self.bad_cqes.load(Ordering::Relaxed),
            *self.last_bad_cqe.lock(),
        )
    }

    pub(crate) fn note_bad_cqe(&self, f: crate::dp::CqeFault) {
        self.bad_cqes.fetch_add(1, Ordering::Relaxed);
        *self.last_bad_cqe.lock() = Some(f);
    }

    /// Brings the device up as Linux's `efa_probe` does (`docs/efa.md#bring-up`):
    ///
    /// 1. the read-less response buffer (MMIO_RESP_HI, then LO);
    /// 2. reset with reason NORMAL: DEV_STS.ready, CAPS.reset_timeout non-zero, assert
    ///    DEV_CTL.dev_reset, rewrite the response address, wait for reset_in_progress, release,
    ///    wait for it to clear (each wait bounded by the reset timeout);
    /// 3. VERSION ≥ 0.1, CONTROLLER_VERSION ≥ 0.0.1, CAPS.dma_addr_width in 32..=64, the admin
    ///    timeout from CAPS;
    /// 4. admin init: DEV_STS.ready, AQ and ACQ (32 entries of 64 bytes), INTR_MASK (masked:
    ///    this driver polls), AENQ (16 entries), AENQ_CONS_DB = 0;
    /// 5. GET_FEATURE DEVICE_ATTR, QUEUE_ATTR, NETWORK_ATTR, EVENT_QUEUE_ATTR (when
    ///    supported), HW_HINTS (when supported; applied);
    /// 6. GET_FEATURE AENQ_CONFIG (groups 1..=4 must be supported), SET_FEATURE AENQ_CONFIG
    ///    enabling them;
    /// 7. SET_FEATURE HOST_INFO when supported (a failure is ignored, as Linux);
    /// 8. ALLOC_UAR: the user context the provider's CQs and QPs belong to.
    ///
    /// Completion EQs (CREATE_EQ) come with the data path. On failure after the reset the
    /// device is reset again with reason INIT_ERR, and its rings are freed only if that reset
    /// completed.
    pub fn probe(
        regs: R,
        dma: Arc<dyn DmaAllocator>,
        platform: P,
        config: Config,
    ) -> Result<Self, Error> {
        let resp = Shared::new(&dma, ReadlessResp::SIZE, 8)?;
        let mut dev = Device {
            regs,
            dma,
            platform,
            config,
            readless: Mutex::new(Readless {
                resp: Some(resp),
                seq: 0,
                timeout_ns: DEFAULT_READ_TIMEOUT_NS,
            }),
            admin: Mutex::new(None),
            aenq: Mutex::new(None),
            counters: Mutex::new(AenqCounters::default()),
            attrs: Attributes::default(),
            uar: 0,
            commands: AtomicU64::new(0),
            stopped: false,
            quiesced: false,
            data: None,
            bad_cqes: AtomicU64::new(0),
            last_bad_cqe: Mutex::new(None),
            channels_made: core::sync::atomic::AtomicU32::new(0),
        };
        dev.write_resp_addr();
        if let Err(e) = dev.bring_up() {
            let _ = dev.stop(r::reset_reason::INIT_ERR);
            return Err(e);
        }
        Ok(dev)
    }

    fn bring_up(&mut self) -> Result<(), Error> {
        let caps = self.reset(r::reset_reason::NORMAL)?;
        self.check_versions(caps)?;
        self.admin_init(caps)?;
        self.attrs = self.get_attributes()?;
        self.set_aenq_config()?;
        if feature::supported(self.attrs.supported_features, id::HOST_INFO) {
            // Informational only: Linux ignores a failure, so does this driver (a timeout
            // still takes the admin queue down, and ALLOC_UAR reports it).
            let _ = self.set_host_info();
        }
        let out = self.exec(op::ALLOC_UAR, 0, &[0; ENTRY])?;
        self.uar = alloc_uar_resp::UAR.get(&out) as u16;
        Ok(())
    }

    /// Stops the device: DEALLOC_UAR, then a reset with reason NORMAL (the device forgets
    /// every object and queue). The admin rings are freed when the reset completed.
    ///
    /// Objects the caller still holds are not destroyed first: the reset drops them in the
    /// device, and their memory stays leaked (their handles leak it on drop).
    pub fn shutdown(mut self) -> Result<(), Error> {
        let uar = self.uar;
        let mut res = Ok(());
        if uar != 0 {
            let mut c = [0u8; ENTRY];
            dealloc_uar_cmd::UAR.set(&mut c, uar.into());
            res = self.exec(op::DEALLOC_UAR, 0, &c).map(|_| ());
        }
        let stopped = self.stop(r::reset_reason::NORMAL);
        res?;
        stopped
    }

    /// Resets the device with `reason` and frees the admin rings if the reset completed
    /// (otherwise the device may still write them: they leak). Idempotent.
    fn stop(&mut self, reason: u32) -> Result<(), Error> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let reset = self.reset(reason).map(|_| ());
        self.quiesced = reset.is_ok();
        let admin = self.admin.lock().take();
        let aenq = self.aenq.lock().take();
        if reset.is_ok() {
            if let Some(a) = admin {
                a.aq.release();
                a.acq.release();
            }
            if let Some(q) = aenq {
                q.ring.release();
            }
        } else {
            // The device may still write them: dropped without `release`, they leak.
            drop((admin, aenq));
        }
        reset
    }

    // ------------------------------------------------------------ registers

    fn write_resp_addr(&self) {
        let Some(a) = self.readless.lock().resp.as_ref().map(|b| b.iova()) else {
            return;
        };
        self.regs.write32(r::MMIO_RESP_HI, (a >> 32) as u32);
        self.regs.write32(r::MMIO_RESP_LO, a as u32);
    }

    /// A register read through the read-less mechanism (`docs/efa.md#read-less-register-reads`).
    pub(crate) fn read_reg(&self, offset: usize) -> Result<u32, Error> {
        let off = offset as u16;
        let mut guard = self.readless.lock();
        let rl = &mut *guard;
        rl.seq = rl.seq.wrapping_add(1);
        let seq = rl.seq;
        let timeout_ns = rl.timeout_ns;
        let resp_buf = rl.resp.as_ref().ok_or(Error::AdminDown)?;
        // A value that is not the new sequence number: a stale response cannot match.
        let junk = ReadlessResp {
            req_id: firmware_interface::Le16::new(seq.wrapping_add(0x9a)),
            ..ReadlessResp::default()
        };
        resp_buf.write(0, &junk.to_bytes())?;
        dma_wmb();
        self.regs.write32(
            r::MMIO_REG_READ,
            (r::mmio_reg_read::REG_OFF.val(off.into()) | r::mmio_reg_read::REQ_ID.val(seq.into()))
                as u32,
        );
        let start = self.platform.now_ns();
        loop {
            let mut b = [0u8; ReadlessResp::SIZE];
            resp_buf.read(0, &mut b)?;
            let resp = ReadlessResp::from_bytes(&b);
            if resp.req_id.get() == seq {
                dma_rmb();
                resp_buf.read(0, &mut b)?;
                let resp = ReadlessResp::from_bytes(&b);
                if resp.reg_off.get() != off {
                    return Err(Error::BadReadless {
                        offset: off,
                        got: resp.reg_off.get(),
                    });
                }
                return Ok(resp.reg_val.get());
            }
            if self.platform.now_ns().saturating_sub(start) > timeout_ns {
                return Err(Error::ReadTimeout { offset: off });
            }
            self.platform.relax();
        }
    }

    fn field(&self, offset: usize, f: LeField) -> Result<u64, Error> {
        Ok(f.of(self.read_reg(offset)?.into()))
    }

    /// Waits until `DEV_STS` field `f` reads `want`, at most `timeout_ns`.
    fn wait_sts(&self, f: LeField, want: u64, timeout_ns: u64) -> Result<bool, Error> {
        let start = self.platform.now_ns();
        loop {
            if self.field(r::DEV_STS, f)? == want {
                return Ok(true);
            }
            if self.platform.now_ns().saturating_sub(start) > timeout_ns {
                return Ok(false);
            }
            self.platform.relax();
        }
    }

    /// The reset sequence (`efa_com_dev_reset`); returns CAPS as read after it.
    fn reset(&self, reason: u32) -> Result<u32, Error> {
        let caps = self.read_reg(r::CAPS)?;
        let units = r::caps::RESET_TIMEOUT.of(caps.into());
        if units == 0 {
            return Err(Error::BadRegister {
                offset: r::CAPS as u16,
                value: caps,
            });
        }
        let timeout = units * CAPS_UNIT_NS;
        if !self.wait_sts(r::dev_sts::READY, 1, timeout)? {
            return Err(Error::NotReady);
        }
        self.regs.write32(
            r::DEV_CTL,
            (r::dev_ctl::DEV_RESET.val(1) | r::dev_ctl::RESET_REASON.val(reason.into())) as u32,
        );
        // The reset forgets the response address.
        self.write_resp_addr();
        if !self.wait_sts(r::dev_sts::RESET_IN_PROGRESS, 1, timeout)? {
            return Err(Error::ResetTimeout { starting: true });
        }
        self.regs.write32(r::DEV_CTL, 0);
        if !self.wait_sts(r::dev_sts::RESET_IN_PROGRESS, 0, timeout)? {
            return Err(Error::ResetTimeout { starting: false });
        }
        self.read_reg(r::CAPS)
    }

    fn check_versions(&self, caps: u32) -> Result<(), Error> {
        let v = self.read_reg(r::VERSION)?;
        let (maj, min) = (
            r::version::MAJOR.of(v.into()) as u32,
            r::version::MINOR.of(v.into()) as u32,
        );
        if (maj, min) < r::version::MIN {
            return Err(Error::BadRegister {
                offset: r::VERSION as u16,
                value: v,
            });
        }
        let c = self.read_reg(r::CONTROLLER_VERSION)?;
        use r::controller_version as cv;
        let ver = (
            cv::MAJOR.of(c.into()) as u32,
            cv::MINOR.of(c.into()) as u32,
            cv::SUBMINOR.of(c.into()) as u32,
        );
        if ver < cv::MIN {
            return Err(Error::BadRegister {
                offset: r::CONTROLLER_VERSION as u16,
                value: c,
            });
        }
        let width = r::caps::DMA_ADDR_WIDTH.of(caps.into());
        if !(32..=64).contains(&width) {
            return Err(Error::BadRegister {
                offset: r::CAPS as u16,
                value: caps,
            });
        }
        Ok(())
    }

    fn admin_init(&mut self, caps: u32) -> Result<(), Error> {
        if self.field(r::DEV_STS, r::dev_sts::READY)? != 1 {
            return Err(Error::NotReady);
        }
        let ring = usize::from(AQ_DEPTH) * ENTRY;
        let aq = Shared::new(&self.dma, ring, 4096)?;
        let acq = Shared::new(&self.dma, ring, 4096)?;
        let aenq = Shared::new(&self.dma, usize::from(AENQ_DEPTH) * ENTRY, 4096)?;
        let (aq_a, acq_a, aenq_a) = (aq.iova(), acq.iova(), aenq.iova());
        let w = |off, v: u32| self.regs.write32(off, v);
        w(r::AQ_BASE_LO, aq_a as u32);
        w(r::AQ_BASE_HI, (aq_a >> 32) as u32);
        w(
            r::AQ_CAPS,
            (r::aq_caps::DEPTH.val(AQ_DEPTH.into()) | r::aq_caps::ENTRY_SIZE.val(ENTRY as u64))
                as u32,
        );
        w(r::ACQ_BASE_LO, acq_a as u32);
        w(r::ACQ_BASE_HI, (acq_a >> 32) as u32);
        w(
            r::ACQ_CAPS,
            (r::acq_caps::DEPTH.val(AQ_DEPTH.into())
                | r::acq_caps::ENTRY_SIZE.val(ENTRY as u64)
                | r::acq_caps::VECTOR.val(0)) as u32,
        );
        // This driver polls: the admin interrupt stays masked.
        w(r::INTR_MASK, r::intr_mask::EN.val(1) as u32);
        w(r::AENQ_BASE_LO, aenq_a as u32);
        w(r::AENQ_BASE_HI, (aenq_a >> 32) as u32);
        w(
            r::AENQ_CAPS,
            (r::aenq_caps::DEPTH.val(AENQ_DEPTH.into())
                | r::aenq_caps::ENTRY_SIZE.val(ENTRY as u64)
                | r::aenq_caps::VECTOR.val(0)) as u32,
        );
        w(r::AENQ_CONS_DB, 0);
        let units = r::caps::ADMIN_CMD_TO.of(caps.into());
        let timeout_ns = if units == 0 {
            DEFAULT_ADMIN_TIMEOUT_NS
        } else {
            units * CAPS_UNIT_NS
        };
        *self.admin.lock() = Some(AdminQueue {
            aq,
            acq,
            pc: 0,
            cc: 0,
            timeout_ns: self.config.admin_timeout_ns.unwrap_or(timeout_ns),
            down: false,
        });
        *self.aenq.lock() = Some(Aenq {
            ring: aenq,
            cc: 0,
            events: VecDeque::new(),
        });
        Ok(())
    }

    // ------------------------------------------------------------ admin commands

    /// Executes one admin command: `cmd` holds the command's fields at their entry offsets
    /// (bytes 0..4 are the driver's: command id, opcode, phase and `flags`, which may add
    /// AQ_FLAG_CTRL_DATA and AQ_FLAG_CTRL_DATA_INDIRECT). Returns the 64-byte completion.
    ///
    /// One command is outstanding at a time. The completion is accepted when its phase is the
    /// expected one and it echoes the command id; a refusal is [`Error::Admin`]; no
    /// completion within the admin timeout is [`Error::AdminTimeout`] and takes the queue
    /// down (the device may still complete the command into the slot).
    pub(crate) fn exec(
        &self,
        opcode: u8,
        flags: u8,
        cmd: &[u8; ENTRY],
    ) -> Result<[u8; ENTRY], Error> {
        let res = self.exec_locked(opcode, flags, cmd);
        self.commands.fetch_add(1, Ordering::Relaxed);
        // The management interrupt would run the AENQ handler; this driver polls it here.
        self.process_aenq();
        res
    }

    fn exec_locked(&self, opcode: u8, flags: u8, cmd: &[u8; ENTRY]) -> Result<[u8; ENTRY], Error> {
        let mut guard = self.admin.lock();
        let q = guard.as_mut().ok_or(Error::AdminDown)?;
        if q.down {
            return Err(Error::AdminDown);
        }
        let slot = q.pc & (AQ_DEPTH - 1);
        // Low bits: the slot (Linux: the completion context); upper bits: entropy from pc.
        let cid = (slot | q.pc << 5) & admin::COMMAND_ID_MASK;
        let mut e = AqEntry::from_bytes(cmd);
        e.command_id = firmware_interface::Le16::new(cid);
        e.opcode = opcode;
        e.flags = (flags & !admin::AQ_FLAG_PHASE) | phase(q.pc, AQ_DEPTH);
        q.aq.write(usize::from(slot) * ENTRY, &e.to_bytes())?;
        q.pc = q.pc.wrapping_add(1);
        dma_wmb();
        mmio_wmb();
        self.regs.write32(r::AQ_PROD_DB, q.pc.into());
        let start = self.platform.now_ns();
        let at = usize::from(q.cc & (AQ_DEPTH - 1)) * ENTRY;
        let want = phase(q.cc, AQ_DEPTH);
        loop {
            if q.acq.read_u8(at + 3)? & admin::PHASE == want {
                break;
            }
            if self.platform.now_ns().saturating_sub(start) > q.timeout_ns {
                q.down = true;
                return Err(Error::AdminTimeout { opcode });
            }
            self.platform.relax();
        }
        dma_rmb();
        let mut raw = [0u8; ENTRY];
        q.acq.read(at, &mut raw)?;
        q.cc = q.cc.wrapping_add(1);
        let c = AcqEntry::from_bytes(&raw);
        let got = c.command.get() & admin::COMMAND_ID_MASK;
        if got != cid {
            q.down = true;
            return Err(Error::BadCompletion {
                opcode,
                fault: crate::CompletionFault::CommandId { expected: cid, got },
            });
        }
        if c.status != admin::status::SUCCESS {
            return Err(Error::Admin {
                opcode,
                status: c.status,
                extended: c.extended_status.get(),
            });
        }
        Ok(raw)
    }

    fn get_feature(&self, fid: u8) -> Result<[u8; ENTRY], Error> {
        let mut c = [0u8; ENTRY];
        feature_cmd::FEATURE_ID.set(&mut c, fid.into());
        let out = self.exec(op::GET_FEATURE, 0, &c)?;
        let mut block = [0u8; ENTRY];
        let n = ENTRY - get_feature_resp::DATA_OFF;
        block[..n].copy_from_slice(&out[get_feature_resp::DATA_OFF..]);
        Ok(block)
    }

    fn get_attributes(&self) -> Result<Attributes, Error> {
        use feature::{device_attr as d, network_attr as n, queue_attr as q};
        let bad = |field, value: u64| Error::BadOutput {
            opcode: op::GET_FEATURE,
            field,
            value,
        };
        let b = self.get_feature(id::DEVICE_ATTR)?;
        let mut a = Attributes {
            supported_features: d::SUPPORTED_FEATURES.get64(&b),
            page_size_cap: d::PAGE_SIZE_CAP.get64(&b),
            fw_version: d::FW_VERSION.get(&b),
            admin_api_version: d::ADMIN_API_VERSION.get(&b),
            device_version: d::DEVICE_VERSION.get(&b),
            db_bar: d::DB_BAR.get(&b) as u16,
            phys_addr_width: d::PHYS_ADDR_WIDTH.get(&b) as u8,
            virt_addr_width: d::VIRT_ADDR_WIDTH.get(&b) as u8,
            device_caps: d::DEVICE_CAPS.get(&b),
            max_rdma_size: d::MAX_RDMA_SIZE.get(&b),
            guid: d::GUID.get64(&b),
            max_link_speed_gbps: d::MAX_LINK_SPEED_GBPS.get(&b) as u16,
            ..Attributes::default()
        };
        if a.admin_api_version < d::MIN_ADMIN_API_VERSION {
            return Err(bad(
                "device_attr.admin_api_version",
                a.admin_api_version.into(),
            ));
        }
        // BARs are numbered 0..=5.
        if a.db_bar > 5 {
            return Err(bad("device_attr.db_bar", a.db_bar.into()));
        }
        if !feature::supported(a.supported_features, id::QUEUE_ATTR)
            || !feature::supported(a.supported_features, id::NETWORK_ATTR)
            || !feature::supported(a.supported_features, id::AENQ_CONFIG)
        {
            return Err(bad("device_attr.supported_features", a.supported_features));
        }
        let b = self.get_feature(id::QUEUE_ATTR)?;
        a.max_qp = q::MAX_QP.get(&b);
        a.max_sq_depth = q::MAX_SQ_DEPTH.get(&b);
        a.inline_buf_size = q::INLINE_BUF_SIZE.get(&b);
        a.max_rq_depth = q::MAX_RQ_DEPTH.get(&b);
        a.max_cq = q::MAX_CQ.get(&b);
        a.max_cq_depth = q::MAX_CQ_DEPTH.get(&b);
        a.sub_cqs_per_cq = q::SUB_CQS_PER_CQ.get(&b) as u16;
        a.min_sq_depth = q::MIN_SQ_DEPTH.get(&b) as u16;
        a.max_wr_send_sges = q::MAX_WR_SEND_SGES.get(&b) as u16;
        a.max_wr_recv_sges = q::MAX_WR_RECV_SGES.get(&b) as u16;
        a.max_mr = q::MAX_MR.get(&b);
        a.max_mr_pages = q::MAX_MR_PAGES.get(&b);
        a.max_pd = q::MAX_PD.get(&b);
        a.max_ah = q::MAX_AH.get(&b);
        a.max_llq_size = q::MAX_LLQ_SIZE.get(&b);
        a.max_wr_rdma_sges = q::MAX_WR_RDMA_SGES.get(&b) as u16;
        a.max_tx_batch = q::MAX_TX_BATCH.get(&b) as u16;
        for (field, v) in [
            ("queue_attr.max_qp", a.max_qp),
            ("queue_attr.max_sq_depth", a.max_sq_depth),
            ("queue_attr.max_cq", a.max_cq),
            ("queue_attr.max_cq_depth", a.max_cq_depth),
            ("queue_attr.sub_cqs_per_cq", a.sub_cqs_per_cq.into()),
            ("queue_attr.max_pd", a.max_pd),
            ("queue_attr.max_wr_send_sges", a.max_wr_send_sges.into()),
            ("queue_attr.max_llq_size", a.max_llq_size),
        ] {
            if v == 0 {
                return Err(bad(field, 0));
            }
        }
        if u32::from(a.min_sq_depth) > a.max_sq_depth {
            return Err(bad("queue_attr.min_sq_depth", a.min_sq_depth.into()));
        }
        let b = self.get_feature(id::NETWORK_ATTR)?;
        if let Some(g) = n::ADDR.slice(&b) {
            a.gid.copy_from_slice(g);
        }
        a.mtu = n::MTU.get(&b);
        if a.mtu == 0 {
            return Err(bad("network_attr.mtu", 0));
        }
        if feature::supported(a.supported_features, id::EVENT_QUEUE_ATTR) {
            use feature::event_queue_attr as e;
            let b = self.get_feature(id::EVENT_QUEUE_ATTR)?;
            a.max_eq = e::MAX_EQ.get(&b);
            a.max_eq_depth = e::MAX_EQ_DEPTH.get(&b);
            a.event_bitmask = e::EVENT_BITMASK.get(&b);
        }
        if feature::supported(a.supported_features, id::HW_HINTS) {
            use feature::hw_hints as h;
            let b = self.get_feature(id::HW_HINTS)?;
            let mmio = u64::from(h::MMIO_READ_TIMEOUT.get(&b));
            let admin_to = u64::from(h::ADMIN_COMPLETION_TIMEOUT.get(&b));
            a.hw_hints = [
                mmio as u16,
                h::DRIVER_WATCHDOG_TIMEOUT.get(&b) as u16,
                admin_to as u16,
                h::POLL_INTERVAL.get(&b) as u16,
            ];
            if mmio != 0 {
                self.readless.lock().timeout_ns = mmio * 1_000_000;
            }
            // Taken in milliseconds, as the header documents it (Linux stores the value in a
            // microsecond field); an explicit `Config::admin_timeout_ns` wins.
            if admin_to != 0
                && self.config.admin_timeout_ns.is_none()
                && let Some(q) = self.admin.lock().as_mut()
            {
                q.timeout_ns = admin_to * 1_000_000;
            }
        }
        Ok(a)
    }

    fn set_aenq_config(&self) -> Result<(), Error> {
        use feature::aenq_config as a;
        let b = self.get_feature(id::AENQ_CONFIG)?;
        let supported = a::SUPPORTED_GROUPS.get(&b);
        if supported & aenq_group::DRIVER_MASK != aenq_group::DRIVER_MASK {
            return Err(Error::NotSupported);
        }
        let mut c = [0u8; ENTRY];
        feature_cmd::FEATURE_ID.set(&mut c, id::AENQ_CONFIG.into());
        a::ENABLED_GROUPS
            .at(feature_cmd::DATA_OFF)
            .set(&mut c, aenq_group::DRIVER_MASK);
        self.exec(op::SET_FEATURE, 0, &c).map(|_| ())
    }

    fn set_host_info(&self) -> Result<(), Error> {
        use feature::host_info as h;
        let mut info = [0u8; h::SIZE];
        let dist = b"rdma-stack (no kernel)";
        if let Some(s) = h::OS_DIST_STR.slice_mut(&mut info) {
            s[..dist.len()].copy_from_slice(dist);
        }
        h::OS_TYPE.set(&mut info, h::OS_TYPE_LINUX);
        let (maj, min, sub) = crate::DRIVER_VERSION;
        h::DRIVER_VER_MAJOR.set(&mut info, maj);
        h::DRIVER_VER_MINOR.set(&mut info, min);
        h::DRIVER_VER_SUB_MINOR.set(&mut info, sub);
        let bdf = self.config.bdf;
        h::BDF_BUS.set(&mut info, u32::from(bdf >> 8));
        h::BDF_DEVICE.set(&mut info, u32::from(bdf >> 3) & 0x1f);
        h::BDF_FUNCTION.set(&mut info, u32::from(bdf) & 7);
        h::SPEC_VER_MAJOR.set(&mut info, h::SPEC_VERSION.0);
        h::SPEC_VER_MINOR.set(&mut info, h::SPEC_VERSION.1);
        let buf = Shared::new(&self.dma, h::SIZE, 8)?;
        buf.write(0, &info)?;
        let mut c = [0u8; ENTRY];
        feature_cmd::FEATURE_ID.set(&mut c, id::HOST_INFO.into());
        let ctrl = CtrlBuffInfo {
            length: Le32::new(h::SIZE as u32),
            addr_lo: Le32::new(buf.iova() as u32),
            addr_hi: Le32::new((buf.iova() >> 32) as u32),
        };
        ctrl.write_to(&mut c[4..]);
        let res = self.exec(op::SET_FEATURE, admin::AQ_FLAG_CTRL_DATA, &c);
        release_unless_unknown(buf, &res);
        res.map(|_| ())
    }

    // ------------------------------------------------------------ async events

    /// Handles every async event the device posted: keep-alives are counted, fatal errors
    /// queued for [`get_async_event`](verbs::Provider::get_async_event), warnings and
    /// notifications counted. Writes AENQ_CONS_DB when it consumed any.
    pub fn process_aenq(&self) {
        let mut guard = self.aenq.lock();
        let Some(q) = guard.as_mut() else { return };
        let mut n = 0u16;
        let mut counters = AenqCounters::default();
        // At most one ring's worth per call (a device writing faster cannot keep us here).
        while n < AENQ_DEPTH {
            let at = usize::from(q.cc & (AENQ_DEPTH - 1)) * ENTRY;
            let Ok(flags) = q.ring.read_u8(at + 4) else {
                break;
            };
            if flags & admin::PHASE != phase(q.cc, AENQ_DEPTH) {
                break;
            }
            dma_rmb();
            let mut raw = [0u8; ENTRY];
            if q.ring.read(at, &mut raw).is_err() {
                break;
            }
            let e = admin::AenqEntry::from_bytes(&raw);
            q.cc = q.cc.wrapping_add(1);
            n += 1;
            match e.group.get() {
                aenq_group::KEEP_ALIVE => counters.keep_alive += 1,
                aenq_group::FATAL_ERROR => {
                    counters.fatal += 1;
                    q.events.push_back(AsyncEvent {
                        event_type: AsyncEventType::DeviceFatal,
                        element: AsyncElement::Device,
                    });
                }
                aenq_group::WARNING | aenq_group::NOTIFICATION => counters.unhandled += 1,
                _ => counters.unknown += 1,
            }
        }
        if n > 0 {
            self.regs.write32(r::AENQ_CONS_DB, q.cc.into());
            let mut c = self.counters.lock();
            c.keep_alive += counters.keep_alive;
            c.fatal += counters.fatal;
            c.unhandled += counters.unhandled;
            c.unknown += counters.unknown;
        }
    }

    /// The next queued async event (after handling the AENQ).
    pub(crate) fn next_async_event(&self) -> Option<AsyncEvent> {
        self.process_aenq();
        self.aenq.lock().as_mut()?.events.pop_front()
    }

    /// What the async event queue delivered so far.
    pub fn aenq_counters(&self) -> AenqCounters {
        *self.counters.lock()
    }

    /// The device attributes read at bring-up.
    pub fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    /// The bring-up parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Admin commands issued so far (completed, refused or failed).
    pub fn admin_commands(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// Whether the admin queue runs (no command timed out or completed wrongly).
    pub fn admin_up(&self) -> bool {
        self.admin.lock().as_ref().is_some_and(|q| !q.down)
    }
}

impl<R: RegisterIo, P: Platform> Drop for Device<R, P> {
    /// A device dropped without [`Device::shutdown`] is reset all the same (reason NORMAL).
    fn drop(&mut self) {
        let _ = self.stop(r::reset_reason::NORMAL);
        // The read-less buffer goes back only when the device was reset (it forgot the
        // address); otherwise it leaks.
        if self.quiesced
            && let Some(b) = self.readless.get_mut().resp.take()
        {
            b.release();
        }
    }
}

/// Frees `buf` (memory a command named) unless the command's outcome is unknown: it
/// completed (successfully or refused) or never reached the device.
pub(crate) fn release_unless_unknown<T>(buf: Shared, res: &Result<T, Error>) {
    match res {
        // A `Shared` dropped without `release` leaks its memory.
        Err(Error::AdminTimeout { .. } | Error::BadCompletion { .. }) => {
            let _leaked = buf;
        }
        _ => buf.release(),
    }
}
