//! The EFA model driven exactly as a driver drives it: register writes, read-less register
//! reads, admin submissions and completions in (test) host memory.

use std::sync::Arc;

use firmware_interface::efa::admin::{
    self, AcqEntry, AenqEntry, AqEntry, CtrlBuffInfo, aenq_group, status as st,
};
use firmware_interface::efa::cmds::*;
use firmware_interface::efa::feature::{self, id};
use firmware_interface::efa::opcode as op;
use firmware_interface::efa::regs::{self as r, ReadlessResp};
use firmware_interface::{Le16, Le32, LeField};

use super::{Device, DeviceError, FailCommand, Live, Profile};
use crate::testmem::TestMem;

/// A minimal EFA driver over [`TestMem`].
struct Drv {
    dev: Device,
    mem: Arc<TestMem>,
    resp: u64,
    seq: u16,
    aq: u64,
    acq: u64,
    aenq: u64,
    /// Admin producer counter.
    pc: u16,
    /// Admin completion consumer counter.
    acq_cc: u16,
    /// AENQ consumer counter.
    aenq_cc: u16,
}

const DEPTH: u16 = admin::AQ_DEPTH;

impl Drv {
    /// A device and a driver that has set the read-less response buffer only.
    fn new(profile: Profile) -> Drv {
        let mem = TestMem::new();
        let dev = Device::new(profile, mem.clone());
        let resp = mem.alloc(8, 8);
        let mut d = Drv {
            dev,
            mem,
            resp,
            seq: 0,
            aq: 0,
            acq: 0,
            aenq: 0,
            pc: 0,
            acq_cc: 0,
            aenq_cc: 0,
        };
        d.set_resp();
        d
    }

    fn w(&mut self, off: usize, v: u32) {
        self.dev.mmio_write(off, &v.to_le_bytes());
    }

    fn set_resp(&mut self) {
        let a = self.resp;
        self.w(r::MMIO_RESP_HI, (a >> 32) as u32);
        self.w(r::MMIO_RESP_LO, a as u32);
    }

    /// A read-less register read; `None` when the device did not answer it.
    fn rd(&mut self, off: usize) -> Option<u32> {
        self.seq = self.seq.wrapping_add(1);
        let junk = ReadlessResp {
            req_id: Le16::new(self.seq.wrapping_add(0x9a)),
            ..Default::default()
        };
        self.mem.wr(self.resp, &junk.to_bytes());
        self.w(r::MMIO_REG_READ, (off as u32) << 16 | u32::from(self.seq));
        let b: [u8; 8] = self.mem.rd(self.resp, 8).try_into().unwrap();
        let got = ReadlessResp::from_bytes(&b);
        (got.req_id.get() == self.seq && usize::from(got.reg_off.get()) == off)
            .then(|| got.reg_val.get())
    }

    fn sts(&mut self, f: LeField) -> u64 {
        f.of(self.rd(r::DEV_STS).unwrap().into())
    }

    /// The reset sequence of a driver's probe.
    fn reset(&mut self, reason: u32) {
        assert_eq!(self.sts(r::dev_sts::READY), 1);
        let caps = self.rd(r::CAPS).unwrap();
        assert_ne!(r::caps::RESET_TIMEOUT.of(caps.into()), 0);
        self.w(
            r::DEV_CTL,
            (r::dev_ctl::DEV_RESET.val(1) | r::dev_ctl::RESET_REASON.val(reason.into())) as u32,
        );
        self.set_resp();
        assert_eq!(self.sts(r::dev_sts::RESET_IN_PROGRESS), 1);
        self.w(r::DEV_CTL, 0);
        assert_eq!(self.sts(r::dev_sts::RESET_IN_PROGRESS), 0);
        self.pc = 0;
        self.acq_cc = 0;
        self.aenq_cc = 0;
    }

    /// Admin init: AQ, ACQ, interrupts on, AENQ.
    fn admin_init(&mut self) {
        assert_eq!(self.sts(r::dev_sts::READY), 1);
        let n = u64::from(DEPTH) * 64;
        self.aq = self.mem.alloc(n, 4096);
        self.acq = self.mem.alloc(n, 4096);
        self.aenq = self.mem.alloc(u64::from(admin::AENQ_DEPTH) * 64, 4096);
        let (aq, acq, aenq) = (self.aq, self.acq, self.aenq);
        self.w(r::AQ_BASE_LO, aq as u32);
        self.w(r::AQ_BASE_HI, (aq >> 32) as u32);
        self.w(
            r::AQ_CAPS,
            (r::aq_caps::DEPTH.val(DEPTH.into()) | r::aq_caps::ENTRY_SIZE.val(64)) as u32,
        );
        self.w(r::ACQ_BASE_LO, acq as u32);
        self.w(r::ACQ_BASE_HI, (acq >> 32) as u32);
        self.w(
            r::ACQ_CAPS,
            (r::acq_caps::DEPTH.val(DEPTH.into()) | r::acq_caps::ENTRY_SIZE.val(64)) as u32,
        );
        self.w(r::INTR_MASK, 0);
        self.w(r::AENQ_BASE_LO, aenq as u32);
        self.w(r::AENQ_BASE_HI, (aenq >> 32) as u32);
        self.w(
            r::AENQ_CAPS,
            (r::aenq_caps::DEPTH.val(admin::AENQ_DEPTH.into()) | r::aenq_caps::ENTRY_SIZE.val(64))
                as u32,
        );
        self.w(r::AENQ_CONS_DB, 0);
    }

    /// A device brought up as a driver's probe does.
    fn up() -> Drv {
        let mut d = Drv::new(Profile::default());
        d.reset(r::reset_reason::NORMAL);
        d.admin_init();
        d
    }

    /// Writes one submission (without the doorbell); returns its command id.
    fn submit(&mut self, opcode: u8, flags: u8, body: &[u8; 64]) -> u16 {
        let slot = self.aq + u64::from(self.pc & (DEPTH - 1)) * 64;
        let phase = ((self.pc / DEPTH) & 1 ^ 1) as u8;
        let cid = (self.pc & (DEPTH - 1)) | (self.pc << 5) & 0xfe0;
        let mut e = AqEntry::from_bytes(body);
        e.command_id = Le16::new(cid & admin::COMMAND_ID_MASK);
        e.opcode = opcode;
        e.flags = flags | phase;
        self.mem.wr(slot, &e.to_bytes());
        self.pc = self.pc.wrapping_add(1);
        cid & admin::COMMAND_ID_MASK
    }

    /// The next completion if its phase is current.
    fn poll(&mut self) -> Option<AcqEntry> {
        let slot = self.acq + u64::from(self.acq_cc & (DEPTH - 1)) * 64;
        let phase = ((self.acq_cc / DEPTH) & 1 ^ 1) as u8;
        let b: [u8; 64] = self.mem.rd(slot, 64).try_into().unwrap();
        let e = AcqEntry::from_bytes(&b);
        if e.flags & admin::PHASE != phase {
            return None;
        }
        self.acq_cc = self.acq_cc.wrapping_add(1);
        Some(e)
    }

    /// One admin command: `(status, completion bytes)`.
    fn cmd_flags(&mut self, opcode: u8, flags: u8, body: [u8; 64]) -> (u8, [u8; 64]) {
        let cid = self.submit(opcode, flags, &body);
        let pc = self.pc;
        self.w(r::AQ_PROD_DB, pc.into());
        let e = self.poll().expect("no completion");
        assert_eq!(e.command.get(), cid, "command id echo");
        assert_eq!(self.poll(), None, "one completion per command");
        (e.status, e.to_bytes())
    }

    fn cmd(&mut self, opcode: u8, body: [u8; 64]) -> (u8, [u8; 64]) {
        self.cmd_flags(opcode, 0, body)
    }

    /// A command that must succeed; returns the completion.
    fn ok(&mut self, opcode: u8, body: [u8; 64]) -> [u8; 64] {
        let (s, o) = self.cmd(opcode, body);
        assert_eq!(s, st::SUCCESS, "{}", op::name(opcode).unwrap_or("?"));
        o
    }

    fn get_feature(&mut self, fid: u8) -> (u8, [u8; 64]) {
        let mut b = [0u8; 64];
        feature_cmd::FEATURE_ID.set(&mut b, fid.into());
        self.cmd(op::GET_FEATURE, b)
    }

    fn set_aenq_groups(&mut self, groups: u32) -> u8 {
        let mut b = [0u8; 64];
        feature_cmd::FEATURE_ID.set(&mut b, id::AENQ_CONFIG.into());
        feature::aenq_config::ENABLED_GROUPS
            .at(feature_cmd::DATA_OFF)
            .set(&mut b, groups);
        self.cmd(op::SET_FEATURE, b).0
    }

    fn alloc_pd(&mut self) -> u16 {
        alloc_pd_resp::PD.get(&self.ok(op::ALLOC_PD, [0; 64])) as u16
    }

    fn alloc_uar(&mut self) -> u16 {
        alloc_uar_resp::UAR.get(&self.ok(op::ALLOC_UAR, [0; 64])) as u16
    }

    fn create_eq(&mut self) -> u16 {
        let ring = self.mem.alloc(64 * 16, 4096);
        let mut b = [0u8; 64];
        create_eq_cmd::DEPTH.set(&mut b, 64);
        create_eq_cmd::MSIX_VEC.set(&mut b, 1);
        create_eq_cmd::ENTRY_SIZE_WORDS.set(&mut b, 4);
        create_eq_cmd::BA_LO.set(&mut b, ring as u32);
        create_eq_cmd::BA_HI.set(&mut b, (ring >> 32) as u32);
        create_eq_cmd::EVENT_BITMASK.set(&mut b, create_eq_cmd::EVENT_COMPLETION);
        create_eq_resp::EQN.get(&self.ok(op::CREATE_EQ, b)) as u16
    }

    fn cq_cmd(&mut self, uar: u16, eqn: Option<u16>, depth: u32) -> [u8; 64] {
        let ring = self.mem.alloc(u64::from(depth) * 32, 4096);
        let mut b = [0u8; 64];
        use create_cq_cmd as m;
        m::CQ_ENTRY_SIZE_WORDS.set(&mut b, 8);
        m::CQ_DEPTH.set(&mut b, depth);
        if let Some(e) = eqn {
            m::INTERRUPT_MODE_ENABLED.set(&mut b, 1);
            m::EQN.set(&mut b, e.into());
        }
        m::CQ_BA_LO.set(&mut b, ring as u32);
        m::CQ_BA_HI.set(&mut b, (ring >> 32) as u32);
        m::NUM_SUB_CQS.set(&mut b, 1);
        m::UAR.set(&mut b, uar.into());
        b
    }

    fn create_cq(&mut self, uar: u16, eqn: Option<u16>) -> u16 {
        let b = self.cq_cmd(uar, eqn, 256);
        let o = self.ok(op::CREATE_CQ, b);
        assert_eq!(create_cq_resp::CQ_ACTUAL_DEPTH.get(&o), 256);
        assert_eq!(create_cq_resp::DB_VALID.get(&o), 1);
        create_cq_resp::CQ_IDX.get(&o) as u16
    }

    fn qp_cmd(&mut self, pd: u16, uar: u16, cq: u16, qp_type: u32) -> [u8; 64] {
        let rq = self.mem.alloc(256 * 16, 4096);
        let mut b = [0u8; 64];
        use create_qp_cmd as m;
        m::PD.set(&mut b, pd.into());
        m::QP_TYPE.set(&mut b, qp_type);
        m::RQ_BASE_ADDR.set64(&mut b, rq);
        m::SEND_CQ_IDX.set(&mut b, cq.into());
        m::RECV_CQ_IDX.set(&mut b, cq.into());
        m::SEND_QUEUE_DEPTH.set(&mut b, 128);
        m::SEND_QUEUE_RING_SIZE.set(&mut b, 128 * 64);
        m::RECV_QUEUE_DEPTH.set(&mut b, 256);
        m::RECV_QUEUE_RING_SIZE.set(&mut b, 256 * 16);
        m::UAR.set(&mut b, uar.into());
        b
    }

    /// Creates a QP: `(handle, qp number)`.
    fn create_qp(&mut self, pd: u16, uar: u16, cq: u16, qp_type: u32) -> (u32, u16) {
        let b = self.qp_cmd(pd, uar, cq, qp_type);
        let o = self.ok(op::CREATE_QP, b);
        (
            create_qp_resp::QP_HANDLE.get(&o),
            create_qp_resp::QP_NUM.get(&o) as u16,
        )
    }

    fn modify(
        &mut self,
        handle: u32,
        mask: u32,
        state: u32,
        cur: u32,
        f: impl Fn(&mut [u8; 64]),
    ) -> u8 {
        use modify_qp_cmd as m;
        let mut b = [0u8; 64];
        m::MODIFY_MASK.set(&mut b, mask);
        m::QP_HANDLE.set(&mut b, handle);
        m::QP_STATE.set(&mut b, state);
        m::CUR_QP_STATE.set(&mut b, cur);
        f(&mut b);
        self.cmd(op::MODIFY_QP, b).0
    }

    /// RESET → INIT → RTR → RTS as a driver does it.
    fn bring_to_rts(&mut self, handle: u32) {
        use modify_qp_cmd as m;
        let st2 = m::MASK_QP_STATE | m::MASK_CUR_QP_STATE;
        let s = self.modify(
            handle,
            st2 | m::MASK_QKEY,
            m::QP_STATE_INIT,
            m::QP_STATE_RESET,
            |b| {
                m::QKEY.set(b, 0x1111_2222);
            },
        );
        assert_eq!(s, st::SUCCESS);
        assert_eq!(
            self.modify(handle, st2, m::QP_STATE_RTR, m::QP_STATE_INIT, |_| {}),
            st::SUCCESS
        );
        let s = self.modify(
            handle,
            st2 | m::MASK_SQ_PSN,
            m::QP_STATE_RTS,
            m::QP_STATE_RTR,
            |b| {
                m::SQ_PSN.set(b, 77);
            },
        );
        assert_eq!(s, st::SUCCESS);
    }

    fn create_ah(&mut self, pd: u16, gid: [u8; 16]) -> (u8, u16) {
        let mut b = [0u8; 64];
        create_ah_cmd::DEST_ADDR
            .slice_mut(&mut b)
            .unwrap()
            .copy_from_slice(&gid);
        create_ah_cmd::PD.set(&mut b, pd.into());
        let (s, o) = self.cmd(op::CREATE_AH, b);
        (s, create_ah_resp::AH.get(&o) as u16)
    }

    /// A REG_MR command for `pages` 4 KiB pages at `iova` (page list not filled in).
    fn mr_cmd(&mut self, pd: u16, pages: u32, iova: u64) -> [u8; 64] {
        use reg_mr_cmd as m;
        let mut b = [0u8; 64];
        m::PD.set(&mut b, pd.into());
        m::MR_LENGTH.set64(&mut b, u64::from(pages) * 4096);
        m::PHYS_PAGE_SIZE_SHIFT.set(&mut b, 12);
        m::LOCAL_WRITE.set(&mut b, 1);
        m::REMOTE_READ.set(&mut b, 1);
        m::PAGE_NUM.set(&mut b, pages);
        m::IOVA.set64(&mut b, iova);
        b
    }

    /// The entry's control buffer (at 4).
    fn ctrl(b: &mut [u8; 64], len: u32, addr: u64) {
        Drv::ctrl_at(b, 4, len, addr);
    }

    /// REG_MR's page-list control buffer (in the page-list union).
    fn pbl(b: &mut [u8; 64], len: u32, addr: u64) {
        Drv::ctrl_at(b, reg_mr_cmd::PBL_CTRL_OFF, len, addr);
    }

    fn ctrl_at(b: &mut [u8; 64], at: usize, len: u32, addr: u64) {
        let c = CtrlBuffInfo {
            length: Le32::new(len),
            addr_lo: Le32::new(addr as u32),
            addr_hi: Le32::new((addr >> 32) as u32),
        };
        b[at..at + CtrlBuffInfo::SIZE].copy_from_slice(&c.to_bytes());
    }

    /// An indirect page list of `pages` addresses (chunks of 510 + link); returns the
    /// head `(length, address)`.
    fn chunk_list(&mut self, pages: &[u64]) -> (u32, u64) {
        let chunks: Vec<&[u64]> = pages.chunks(admin::PBL_CHUNK_ENTRIES).collect();
        let addrs: Vec<u64> = chunks.iter().map(|_| self.mem.alloc(4096, 4096)).collect();
        let len =
            |i: usize| (chunks[i].len() * 8 + if i + 1 < chunks.len() { 12 } else { 0 }) as u32;
        for (i, c) in chunks.iter().enumerate() {
            let mut raw = vec![0u8; 4096];
            for (j, a) in c.iter().enumerate() {
                raw[j * 8..j * 8 + 8].copy_from_slice(&a.to_le_bytes());
            }
            if i + 1 < chunks.len() {
                let link = CtrlBuffInfo {
                    length: Le32::new(len(i + 1)),
                    addr_lo: Le32::new(addrs[i + 1] as u32),
                    addr_hi: Le32::new((addrs[i + 1] >> 32) as u32),
                };
                raw[admin::PBL_CHUNK_LINK..admin::PBL_CHUNK_FULL_LEN]
                    .copy_from_slice(&link.to_bytes());
            }
            self.mem.wr(addrs[i], &raw);
        }
        (len(0), addrs[0])
    }

    fn next_aenq(&mut self) -> Option<AenqEntry> {
        let slot = self.aenq + u64::from(self.aenq_cc & (admin::AENQ_DEPTH - 1)) * 64;
        let phase = ((self.aenq_cc / admin::AENQ_DEPTH) & 1 ^ 1) as u8;
        let b: [u8; 64] = self.mem.rd(slot, 64).try_into().unwrap();
        let e = AenqEntry::from_bytes(&b);
        if e.flags & admin::PHASE != phase {
            return None;
        }
        self.aenq_cc = self.aenq_cc.wrapping_add(1);
        Some(e)
    }
}

fn page_addrs(mem: &TestMem, n: usize) -> Vec<u64> {
    (0..n).map(|_| mem.alloc(4096, 4096)).collect()
}

#[test]
fn readless_register_reads() {
    let mut d = Drv::new(Profile::default());
    let v = d.rd(r::VERSION).unwrap();
    assert_eq!(
        (
            r::version::MAJOR.of(v.into()),
            r::version::MINOR.of(v.into())
        ),
        (0, 1)
    );
    let cv = d.rd(r::CONTROLLER_VERSION).unwrap();
    use r::controller_version as c;
    assert_eq!(
        (
            c::MAJOR.of(cv.into()),
            c::MINOR.of(cv.into()),
            c::SUBMINOR.of(cv.into())
        ),
        (0, 0, 1)
    );
    let caps = u64::from(d.rd(r::CAPS).unwrap());
    assert_eq!(r::caps::DMA_ADDR_WIDTH.of(caps), 48);
    assert_eq!(r::caps::RESET_TIMEOUT.of(caps), 5);
    assert_eq!(d.sts(r::dev_sts::READY), 1);
    assert_eq!(d.sts(r::dev_sts::RESET_IN_PROGRESS), 0);
    // Consecutive reads carry their own request ids; the response names the register.
    for _ in 0..3 {
        assert!(d.rd(r::VERSION).is_some());
    }
    assert!(d.dev.errors().is_empty(), "{:?}", d.dev.errors());
    // A write-only or undefined register reads as all ones (the undefined one is an error).
    assert_eq!(d.rd(r::AQ_CAPS), Some(r::READ_FAILED));
    assert_eq!(d.rd(0x0c), Some(r::READ_FAILED));
    assert_eq!(
        d.dev.errors(),
        &[
            DeviceError::UndefinedRegister { offset: r::AQ_CAPS },
            DeviceError::UndefinedRegister { offset: 0x0c }
        ]
    );
    // Knob: the read is never answered, as with a device that hung.
    d.dev.faults().drop_readless = true;
    assert_eq!(d.rd(r::VERSION), None);
}

#[test]
fn reset_forgets_the_response_buffer_and_every_object() {
    let mut d = Drv::up();
    let pd = d.alloc_pd();
    assert_ne!(pd, 0);
    assert_eq!(d.dev.live().pds, 1);
    d.w(r::DEV_CTL, r::dev_ctl::DEV_RESET.val(1) as u32);
    // Until the driver writes the address again, a read has nowhere to go.
    assert_eq!(d.rd(r::DEV_STS), None);
    assert_eq!(d.dev.errors(), &[DeviceError::ReadlessWithoutBuffer]);
    d.set_resp();
    let sts = u64::from(d.rd(r::DEV_STS).unwrap());
    assert_eq!(r::dev_sts::RESET_IN_PROGRESS.of(sts), 1);
    assert_eq!(r::dev_sts::READY.of(sts), 0);
    // Admin commands while resetting are refused.
    d.w(r::AQ_PROD_DB, 1);
    assert_eq!(
        d.dev.errors().last(),
        Some(&DeviceError::AdminWhileNotReady)
    );
    d.w(r::DEV_CTL, 0);
    let sts = u64::from(d.rd(r::DEV_STS).unwrap());
    assert_eq!(r::dev_sts::RESET_IN_PROGRESS.of(sts), 0);
    assert_eq!(r::dev_sts::RESET_FINISHED.of(sts), 1);
    assert_eq!(r::dev_sts::READY.of(sts), 1);
    assert_eq!(d.dev.live(), Live::default());
    // The admin queue is gone too: a doorbell before admin init is an error.
    d.w(r::AQ_PROD_DB, 1);
    assert_eq!(d.dev.errors().last(), Some(&DeviceError::AdminQueueNotSet));
    // A second bring-up works from scratch.
    d.pc = 0;
    d.acq_cc = 0;
    d.admin_init();
    assert_eq!(d.alloc_pd(), pd);
}

#[test]
fn admin_queue_phases_wrap_and_interrupts() {
    let mut d = Drv::up();
    assert!(d.dev.take_interrupts().is_empty());
    // 3 passes over the 32-entry rings: the phase flips on every wrap on both sides.
    for i in 0..(3 * DEPTH) {
        let (s, o) = d.cmd(op::ALLOC_PD, [0; 64]);
        assert_eq!(s, st::SUCCESS, "command {i}");
        let e = AcqEntry::from_bytes(&o);
        // Two commands per round: this ALLOC_PD is entry 2i.
        assert_eq!(e.sq_head_indx.get(), (2 * i + 1) & (DEPTH - 1));
        let pd = alloc_pd_resp::PD.get(&o);
        let mut b = [0u8; 64];
        dealloc_pd_cmd::PD.set(&mut b, pd);
        d.ok(op::DEALLOC_PD, b);
    }
    assert_eq!(d.dev.take_interrupts(), vec![0]);
    // Masked: no interrupt.
    d.w(r::INTR_MASK, 1);
    d.alloc_pd();
    assert!(d.dev.take_interrupts().is_empty());
    // Several entries behind one doorbell complete in order.
    let a = d.submit(op::ALLOC_UAR, 0, &[0; 64]);
    let b = d.submit(op::ALLOC_UAR, 0, &[0; 64]);
    let pc = d.pc;
    d.w(r::AQ_PROD_DB, pc.into());
    assert_eq!(d.poll().unwrap().command.get(), a);
    assert_eq!(d.poll().unwrap().command.get(), b);
    assert_eq!(d.dev.live().uars, 2);
    assert_eq!(d.dev.command_log().len(), 6 * DEPTH as usize + 3);
    assert!(d.dev.errors().is_empty(), "{:?}", d.dev.errors());
}

#[test]
fn admin_doorbell_mistakes() {
    let mut d = Drv::up();
    // The doorbell before the entry was written: the slot still has phase 0.
    d.pc = 1;
    d.w(r::AQ_PROD_DB, 1);
    assert_eq!(d.dev.errors(), &[DeviceError::AdminPhase { index: 0 }]);
    assert!(d.dev.command_log().is_empty());
    // A producer more than a queue ahead.
    d.w(r::AQ_PROD_DB, u32::from(DEPTH) + 1);
    assert_eq!(
        d.dev.errors().last(),
        Some(&DeviceError::AdminProducerAhead {
            producer: DEPTH + 1,
            consumer: 0
        })
    );
    // The entry written now completes normally.
    d.pc = 0;
    d.alloc_pd();
    // Bad queue caps: entry size 32, depth 24.
    d.w(
        r::AQ_CAPS,
        (r::aq_caps::DEPTH.val(24) | r::aq_caps::ENTRY_SIZE.val(64)) as u32,
    );
    d.w(
        r::ACQ_CAPS,
        (r::acq_caps::DEPTH.val(32) | r::acq_caps::ENTRY_SIZE.val(32)) as u32,
    );
    assert!(matches!(
        d.dev.errors()[d.dev.errors().len() - 2..],
        [
            DeviceError::BadQueueCaps {
                offset: r::AQ_CAPS,
                ..
            },
            DeviceError::BadQueueCaps {
                offset: r::ACQ_CAPS,
                ..
            }
        ]
    ));
}

#[test]
fn mmio_strictness() {
    let mut d = Drv::new(Profile::default());
    d.w(r::VERSION, 5);
    d.w(0x30, 1);
    d.dev.mmio_write(r::AQ_PROD_DB, &[1, 0]);
    d.dev.mmio_write(0x1000, &[0; 4]);
    d.w(r::EQ_DB, 7);
    assert_eq!(
        d.dev.errors(),
        &[
            DeviceError::ReadOnlyRegister {
                offset: r::VERSION,
                value: 5
            },
            DeviceError::UndefinedRegister { offset: 0x30 },
            DeviceError::BadMmio {
                offset: r::AQ_PROD_DB,
                len: 2
            },
            DeviceError::BadMmio {
                offset: 0x1000,
                len: 4
            },
            DeviceError::BadEqDoorbell { value: 7 },
        ]
    );
    // A direct (trapped) read answers with the register value.
    let mut b = [0u8; 4];
    d.dev.mmio_read(r::CAPS, &mut b);
    assert_eq!(r::caps::DMA_ADDR_WIDTH.of(u32::from_le_bytes(b).into()), 48);
}

#[test]
fn get_feature_answers_every_feature() {
    let mut d = Drv::up();
    let p = Profile::default();
    let at = get_feature_resp::DATA_OFF;
    let (s, o) = d.get_feature(id::DEVICE_ATTR);
    assert_eq!(s, st::SUCCESS);
    use feature::device_attr as da;
    let sup = da::SUPPORTED_FEATURES.at(at).get64(&o);
    for f in [
        id::AENQ_CONFIG,
        id::NETWORK_ATTR,
        id::QUEUE_ATTR,
        id::HW_HINTS,
        id::HOST_INFO,
        id::EVENT_QUEUE_ATTR,
    ] {
        assert!(feature::supported(sup, f), "feature {f}");
    }
    assert!(da::ADMIN_API_VERSION.at(at).get(&o) >= da::MIN_ADMIN_API_VERSION);
    assert_eq!(da::DB_BAR.at(at).get(&o), 4);
    assert_eq!(da::PAGE_SIZE_CAP.at(at).get64(&o), 0xffff_f000);
    assert_eq!(da::GUID.at(at).get64(&o), p.guid);
    assert_eq!(da::DEVICE_CAPS.at(at).get(&o), p.device_caps);
    assert_eq!(da::PHYS_ADDR_WIDTH.at(at).get(&o), 48);

    let (s, o) = d.get_feature(id::QUEUE_ATTR);
    assert_eq!(s, st::SUCCESS);
    use feature::queue_attr as q;
    assert_eq!(q::MAX_QP.at(at).get(&o), p.max_qp);
    assert_eq!(q::SUB_CQS_PER_CQ.at(at).get(&o), 1);
    assert_eq!(q::MAX_LLQ_SIZE.at(at).get(&o), p.max_llq_size);
    assert_eq!(q::MAX_WR_RECV_SGES.at(at).get(&o), 3);
    assert_eq!(q::MAX_TX_BATCH.at(at).get(&o), 16);
    assert_eq!(q::MIN_SQ_DEPTH.at(at).get(&o), 4);

    let (s, o) = d.get_feature(id::NETWORK_ATTR);
    assert_eq!(s, st::SUCCESS);
    use feature::network_attr as n;
    assert_eq!(n::ADDR.at(at).slice(&o).unwrap(), &p.gid);
    assert_eq!(n::MTU.at(at).get(&o), 8928);

    let (s, o) = d.get_feature(id::AENQ_CONFIG);
    assert_eq!(s, st::SUCCESS);
    let supported = feature::aenq_config::SUPPORTED_GROUPS.at(at).get(&o);
    assert_eq!(supported & aenq_group::DRIVER_MASK, aenq_group::DRIVER_MASK);
    assert_eq!(feature::aenq_config::ENABLED_GROUPS.at(at).get(&o), 0);

    let (s, o) = d.get_feature(id::EVENT_QUEUE_ATTR);
    assert_eq!(s, st::SUCCESS);
    assert_eq!(feature::event_queue_attr::MAX_EQ.at(at).get(&o), 8);
    assert_eq!(feature::event_queue_attr::MAX_EQ_DEPTH.at(at).get(&o), 4096);

    let (s, o) = d.get_feature(id::HW_HINTS);
    assert_eq!(s, st::SUCCESS);
    assert_eq!(feature::hw_hints::POLL_INTERVAL.at(at).get(&o), 0);

    // HOST_INFO is set-only; unknown ids are refused.
    assert_eq!(d.get_feature(id::HOST_INFO).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.get_feature(99).0, st::ILLEGAL_PARAMETER);
    // A refused command carries no response data.
    assert_eq!(&d.get_feature(0).1[8..], &[0u8; 56][..]);
}

#[test]
fn set_feature_aenq_config_and_host_info() {
    let mut d = Drv::up();
    assert_eq!(d.set_aenq_groups(aenq_group::DRIVER_MASK), st::SUCCESS);
    assert_eq!(d.dev.enabled_aenq_groups(), 0x1e);
    // A group the device does not report.
    assert_eq!(d.set_aenq_groups(1 << 9), st::ILLEGAL_PARAMETER);
    assert_eq!(d.dev.enabled_aenq_groups(), 0x1e);
    let (_, o) = d.get_feature(id::AENQ_CONFIG);
    assert_eq!(
        feature::aenq_config::ENABLED_GROUPS
            .at(get_feature_resp::DATA_OFF)
            .get(&o),
        0x1e
    );

    // HOST_INFO through the control buffer.
    use feature::host_info as h;
    let buf = d.mem.alloc(4096, 4096);
    let mut info = vec![0u8; h::SIZE];
    h::OS_DIST_STR.slice_mut(&mut info).unwrap()[..5].copy_from_slice(b"linux");
    h::DRIVER_VER_MAJOR.set(&mut info, 2);
    h::SPEC_VER_MAJOR.set(&mut info, 2);
    d.mem.wr(buf, &info);
    let mut b = [0u8; 64];
    feature_cmd::FEATURE_ID.set(&mut b, id::HOST_INFO.into());
    Drv::ctrl(&mut b, h::SIZE as u32, buf);
    let (s, _) = d.cmd_flags(op::SET_FEATURE, admin::AQ_FLAG_CTRL_DATA, b);
    assert_eq!(s, st::SUCCESS);
    let got = d.dev.host_info().unwrap();
    assert_eq!(&got[..5], b"linux");
    assert_eq!(h::DRIVER_VER_MAJOR.get(got), 2);
    // Without the ctrl_data flag, too short, or unreadable.
    assert_eq!(d.cmd(op::SET_FEATURE, b).0, st::ILLEGAL_PARAMETER);
    Drv::ctrl(&mut b, 100, buf);
    assert_eq!(
        d.cmd_flags(op::SET_FEATURE, admin::AQ_FLAG_CTRL_DATA, b).0,
        st::MALFORMED_REQUEST
    );
    let unmapped = d.mem.alloc_unmapped(4096, 4096);
    Drv::ctrl(&mut b, h::SIZE as u32, unmapped);
    assert_eq!(
        d.cmd_flags(op::SET_FEATURE, admin::AQ_FLAG_CTRL_DATA, b).0,
        st::MALFORMED_REQUEST
    );
    // Features that cannot be set.
    let mut b = [0u8; 64];
    feature_cmd::FEATURE_ID.set(&mut b, id::DEVICE_ATTR.into());
    assert_eq!(d.cmd(op::SET_FEATURE, b).0, st::ILLEGAL_PARAMETER);
}

#[test]
fn every_object_created_and_destroyed() {
    let mut d = Drv::up();
    let uar = d.alloc_uar();
    let pd = d.alloc_pd();
    let eqn = d.create_eq();
    d.w(
        r::EQ_DB,
        (r::eq_db::EQN.val(eqn.into()) | r::eq_db::ARM.val(1)) as u32,
    );
    assert_eq!(d.dev.eq_armed(eqn), Some(true));
    let cq = d.create_cq(uar, Some(eqn));
    let cq2 = d.create_cq(uar, None);
    assert_ne!(cq, cq2);
    let (ud, ud_num) = d.create_qp(pd, uar, cq, create_qp_cmd::QP_TYPE_UD);
    let (srd, srd_num) = d.create_qp(pd, uar, cq2, create_qp_cmd::QP_TYPE_SRD);
    assert_ne!(ud_num, srd_num);
    assert_eq!(d.dev.qp_state(ud), Some(modify_qp_cmd::QP_STATE_RESET));
    d.bring_to_rts(ud);
    d.bring_to_rts(srd);
    // SRD takes an RNR retry count.
    use modify_qp_cmd as m;
    assert_eq!(
        d.modify(srd, m::MASK_RNR_RETRY, 0, 0, |b| {
            m::RNR_RETRY.set(b, 7);
        }),
        st::SUCCESS
    );
    let mut b = [0u8; 64];
    query_qp_cmd::QP_HANDLE.set(&mut b, srd);
    let o = d.ok(op::QUERY_QP, b);
    assert_eq!(query_qp_resp::QP_STATE.get(&o), m::QP_STATE_RTS);
    assert_eq!(query_qp_resp::QKEY.get(&o), 0x1111_2222);
    assert_eq!(query_qp_resp::SQ_PSN.get(&o), 77);
    assert_eq!(query_qp_resp::RNR_RETRY.get(&o), 7);

    let (s, ah) = d.create_ah(pd, [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(s, st::SUCCESS);

    // MRs: 3 inline pages, 8 pages in one contiguous list, 1100 pages in a chunk chain.
    let pages = page_addrs(&d.mem, 3);
    let mut b = d.mr_cmd(pd, 3, 0x7000_0000);
    for (i, a) in pages.iter().enumerate() {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let o = d.ok(op::REG_MR, b);
    let k1 = reg_mr_resp::L_KEY.get(&o);
    assert_eq!(reg_mr_resp::R_KEY.get(&o), k1);

    let pages = page_addrs(&d.mem, 8);
    let list = d.mem.alloc(64, 8);
    for (i, a) in pages.iter().enumerate() {
        d.mem.wr(list + 8 * i as u64, &a.to_le_bytes());
    }
    let mut b = d.mr_cmd(pd, 8, 0x100);
    reg_mr_cmd::MR_LENGTH.set64(&mut b, 8 * 4096 - 0x100);
    Drv::pbl(&mut b, 64, list);
    let (s, o) = d.cmd_flags(op::REG_MR, admin::AQ_FLAG_CTRL_DATA, b);
    assert_eq!(s, st::SUCCESS);
    let k2 = reg_mr_resp::L_KEY.get(&o);

    // Chunk addresses need not be real pages for the device: any 4 KiB-aligned addresses.
    let many: Vec<u64> = (0..1100u64).map(|i| 0x10_0000_0000 + i * 4096).collect();
    let (len, head) = d.chunk_list(&many);
    assert_eq!(len, 4092);
    let mut b = d.mr_cmd(pd, 1100, 0);
    Drv::pbl(&mut b, len, head);
    let flags = admin::AQ_FLAG_CTRL_DATA | admin::AQ_FLAG_CTRL_DATA_INDIRECT;
    let (s, o) = d.cmd_flags(op::REG_MR, flags, b);
    assert_eq!(s, st::SUCCESS);
    let k3 = reg_mr_resp::L_KEY.get(&o);
    assert!(k1 != k2 && k2 != k3 && k1 != k3);

    assert_eq!(
        d.dev.live(),
        Live {
            uars: 1,
            pds: 1,
            eqs: 1,
            cqs: 2,
            qps: 2,
            ahs: 1,
            mrs: 3
        }
    );

    // Teardown in the driver's order.
    for k in [k1, k2, k3] {
        let mut b = [0u8; 64];
        dereg_mr_cmd::L_KEY.set(&mut b, k);
        d.ok(op::DEREG_MR, b);
    }
    let mut b = [0u8; 64];
    destroy_ah_cmd::AH.set(&mut b, ah.into());
    destroy_ah_cmd::PD.set(&mut b, pd.into());
    d.ok(op::DESTROY_AH, b);
    for h in [ud, srd] {
        let mut b = [0u8; 64];
        destroy_qp_cmd::QP_HANDLE.set(&mut b, h);
        d.ok(op::DESTROY_QP, b);
    }
    for c in [cq, cq2] {
        let mut b = [0u8; 64];
        destroy_cq_cmd::CQ_IDX.set(&mut b, c.into());
        d.ok(op::DESTROY_CQ, b);
    }
    let mut b = [0u8; 64];
    destroy_eq_cmd::EQN.set(&mut b, eqn.into());
    d.ok(op::DESTROY_EQ, b);
    let mut b = [0u8; 64];
    dealloc_pd_cmd::PD.set(&mut b, pd.into());
    d.ok(op::DEALLOC_PD, b);
    let mut b = [0u8; 64];
    dealloc_uar_cmd::UAR.set(&mut b, uar.into());
    d.ok(op::DEALLOC_UAR, b);
    assert_eq!(d.dev.live(), Live::default());
    assert!(d.dev.errors().is_empty(), "{:?}", d.dev.errors());
}

#[test]
fn refusals_carry_the_contract_status() {
    let mut d = Drv::up();
    // Opcodes.
    assert_eq!(d.cmd(0, [0; 64]).0, st::BAD_OPCODE);
    assert_eq!(d.cmd(77, [0; 64]).0, st::BAD_OPCODE);
    assert_eq!(d.cmd(op::ALLOC_MR, [0; 64]).0, st::UNSUPPORTED_OPCODE);

    // Handles naming nothing.
    let mut b = [0u8; 64];
    dealloc_pd_cmd::PD.set(&mut b, 9);
    assert_eq!(d.cmd(op::DEALLOC_PD, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DEALLOC_UAR, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DESTROY_CQ, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DESTROY_EQ, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DESTROY_QP, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DEREG_MR, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::DESTROY_AH, b).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.cmd(op::QUERY_QP, b).0, st::ILLEGAL_PARAMETER);

    let uar = d.alloc_uar();
    let pd = d.alloc_pd();
    let cq = d.create_cq(uar, None);

    // CQ: depth not a power of two, wrong sub-CQ count, 16-byte entries with source
    // addresses, unknown UAR, unknown EQ, unreadable ring.
    let mut b = d.cq_cmd(uar, None, 100);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::ILLEGAL_PARAMETER);
    create_cq_cmd::CQ_DEPTH.set(&mut b, 64);
    create_cq_cmd::NUM_SUB_CQS.set(&mut b, 2);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::ILLEGAL_PARAMETER);
    create_cq_cmd::NUM_SUB_CQS.set(&mut b, 1);
    create_cq_cmd::CQ_ENTRY_SIZE_WORDS.set(&mut b, 4);
    create_cq_cmd::SET_SRC_ADDR.set(&mut b, 1);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::ILLEGAL_PARAMETER);
    let mut b = d.cq_cmd(uar + 5, None, 64);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::ILLEGAL_PARAMETER);
    create_cq_cmd::UAR.set(&mut b, uar.into());
    create_cq_cmd::INTERRUPT_MODE_ENABLED.set(&mut b, 1);
    create_cq_cmd::EQN.set(&mut b, 3);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::ILLEGAL_PARAMETER);
    create_cq_cmd::INTERRUPT_MODE_ENABLED.set(&mut b, 0);
    let unmapped = d.mem.alloc_unmapped(1 << 16, 4096);
    create_cq_cmd::CQ_BA_LO.set(&mut b, unmapped as u32);
    create_cq_cmd::CQ_BA_HI.set(&mut b, (unmapped >> 32) as u32);
    assert_eq!(d.cmd(op::CREATE_CQ, b).0, st::MALFORMED_REQUEST);
    assert!(matches!(d.dev.errors().last(), Some(DeviceError::Dma(_))));

    // EQ: vector 0 is the management vector; 16-byte entries only.
    let mut b = [0u8; 64];
    create_eq_cmd::DEPTH.set(&mut b, 16);
    create_eq_cmd::ENTRY_SIZE_WORDS.set(&mut b, 4);
    create_eq_cmd::MSIX_VEC.set(&mut b, 0);
    assert_eq!(d.cmd(op::CREATE_EQ, b).0, st::ILLEGAL_PARAMETER);
    create_eq_cmd::MSIX_VEC.set(&mut b, 1);
    create_eq_cmd::ENTRY_SIZE_WORDS.set(&mut b, 8);
    assert_eq!(d.cmd(op::CREATE_EQ, b).0, st::ILLEGAL_PARAMETER);

    // QP: type 3, unknown PD, unknown CQ, SQ depth not a power of two, ring beyond the LLQ
    // limit, virtual queues.
    let b = d.qp_cmd(pd, uar, cq, 3);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    let b = d.qp_cmd(pd + 1, uar, cq, create_qp_cmd::QP_TYPE_UD);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    let b = d.qp_cmd(pd, uar, cq + 1, create_qp_cmd::QP_TYPE_UD);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    let mut b = d.qp_cmd(pd, uar, cq, create_qp_cmd::QP_TYPE_SRD);
    create_qp_cmd::SEND_QUEUE_DEPTH.set(&mut b, 100);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    create_qp_cmd::SEND_QUEUE_DEPTH.set(&mut b, 128);
    create_qp_cmd::SEND_QUEUE_RING_SIZE.set(&mut b, 1 << 20);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    create_qp_cmd::SEND_QUEUE_RING_SIZE.set(&mut b, 128 * 64);
    create_qp_cmd::SQ_VIRT.set(&mut b, 1);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    create_qp_cmd::SQ_VIRT.set(&mut b, 0);
    create_qp_cmd::RQ_BASE_ADDR.set64(&mut b, unmapped);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::MALFORMED_REQUEST);

    // QP state machine.
    let (ud, _) = d.create_qp(pd, uar, cq, create_qp_cmd::QP_TYPE_UD);
    use modify_qp_cmd as m;
    let st2 = m::MASK_QP_STATE | m::MASK_CUR_QP_STATE;
    // RESET → RTS is no transition; RESET → INIT needs the Q_Key; a wrong current state.
    assert_eq!(
        d.modify(ud, st2, m::QP_STATE_RTS, 0, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(
        d.modify(ud, st2, m::QP_STATE_INIT, 0, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(
        d.modify(
            ud,
            st2 | m::MASK_QKEY,
            m::QP_STATE_INIT,
            m::QP_STATE_RTR,
            |_| {}
        ),
        st::ILLEGAL_PARAMETER
    );
    // Unknown mask bits, a state beyond ERR, RNR retry on UD, an unknown handle.
    assert_eq!(d.modify(ud, 1 << 6, 0, 0, |_| {}), st::ILLEGAL_PARAMETER);
    assert_eq!(
        d.modify(ud, m::MASK_QP_STATE, 7, 0, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(
        d.modify(ud, m::MASK_RNR_RETRY, 0, 0, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(
        d.modify(ud ^ 0x10000, st2, 1, 0, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(d.dev.qp_state(ud), Some(m::QP_STATE_RESET));
    // INIT → RTR → RTS without the SQ PSN is refused; anything → ERR → RESET is fine.
    d.modify(ud, st2 | m::MASK_QKEY, m::QP_STATE_INIT, 0, |_| {});
    d.modify(ud, st2, m::QP_STATE_RTR, m::QP_STATE_INIT, |_| {});
    assert_eq!(
        d.modify(ud, st2, m::QP_STATE_RTS, m::QP_STATE_RTR, |_| {}),
        st::ILLEGAL_PARAMETER
    );
    assert_eq!(
        d.modify(ud, st2, m::QP_STATE_ERR, m::QP_STATE_RTR, |_| {}),
        st::SUCCESS
    );
    assert_eq!(
        d.modify(ud, st2, m::QP_STATE_RESET, m::QP_STATE_ERR, |_| {}),
        st::SUCCESS
    );

    // AH: unknown PD, zero GID; DESTROY_AH with the wrong PD.
    assert_eq!(d.create_ah(pd + 1, [1; 16]).0, st::ILLEGAL_PARAMETER);
    assert_eq!(d.create_ah(pd, [0; 16]).0, st::ILLEGAL_PARAMETER);
    let (_, ah) = d.create_ah(pd, [1; 16]);
    let mut b = [0u8; 64];
    destroy_ah_cmd::AH.set(&mut b, ah.into());
    destroy_ah_cmd::PD.set(&mut b, (pd + 1).into());
    assert_eq!(d.cmd(op::DESTROY_AH, b).0, st::ILLEGAL_PARAMETER);
    // A second AH for the same destination works but is noted.
    let (s, ah2) = d.create_ah(pd, [1; 16]);
    assert_eq!(s, st::SUCCESS);
    assert_eq!(
        d.dev.errors().last(),
        Some(&DeviceError::DuplicateAh { dest: [1; 16] })
    );

    // MR: page size the device does not offer, length beyond the pages, misaligned page,
    // five pages inline, direct list of the wrong length, indirect chunk of the wrong length,
    // unreadable list, physical mode, unknown permission bits.
    let pages = page_addrs(&d.mem, 2);
    let mut good = d.mr_cmd(pd, 2, 0);
    for (i, a) in pages.iter().enumerate() {
        good[8 + 8 * i..16 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let mut b = good;
    reg_mr_cmd::PHYS_PAGE_SIZE_SHIFT.set(&mut b, 11);
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let mut b = good;
    reg_mr_cmd::MR_LENGTH.set64(&mut b, 2 * 4096 + 1);
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let mut b = good;
    b[8] = 0x80;
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let mut b = good;
    reg_mr_cmd::PAGE_NUM.set(&mut b, 5);
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let list = d.mem.alloc(16, 8);
    let mut b = good;
    Drv::pbl(&mut b, 24, list);
    assert_eq!(
        d.cmd_flags(op::REG_MR, admin::AQ_FLAG_CTRL_DATA, b).0,
        st::MALFORMED_REQUEST
    );
    let many: Vec<u64> = (0..600u64).map(|i| i * 4096).collect();
    let (len, head) = d.chunk_list(&many);
    let mut b = d.mr_cmd(pd, 600, 0);
    Drv::pbl(&mut b, len - 12, head);
    let ind = admin::AQ_FLAG_CTRL_DATA | admin::AQ_FLAG_CTRL_DATA_INDIRECT;
    assert_eq!(d.cmd_flags(op::REG_MR, ind, b).0, st::MALFORMED_REQUEST);
    Drv::pbl(&mut b, 16, unmapped);
    reg_mr_cmd::PAGE_NUM.set(&mut b, 2);
    reg_mr_cmd::MR_LENGTH.set64(&mut b, 8192);
    assert_eq!(
        d.cmd_flags(op::REG_MR, admin::AQ_FLAG_CTRL_DATA, b).0,
        st::MALFORMED_REQUEST
    );
    let mut b = good;
    reg_mr_cmd::MEM_ADDR_PHY_MODE_EN.set(&mut b, 1);
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let mut b = good;
    reg_mr_cmd::PERMISSIONS.set(&mut b, 0x8);
    assert_eq!(d.cmd(op::REG_MR, b).0, st::ILLEGAL_PARAMETER);
    let mr = reg_mr_resp::L_KEY.get(&d.ok(op::REG_MR, good));

    // Objects in use: PD with a QP, AHs and an MR; CQ and UAR with a QP.
    let mut b = [0u8; 64];
    dealloc_pd_cmd::PD.set(&mut b, pd.into());
    assert_eq!(d.cmd(op::DEALLOC_PD, b).0, st::RESOURCE_BUSY);
    let mut b = [0u8; 64];
    destroy_cq_cmd::CQ_IDX.set(&mut b, cq.into());
    assert_eq!(d.cmd(op::DESTROY_CQ, b).0, st::RESOURCE_BUSY);
    let mut b = [0u8; 64];
    dealloc_uar_cmd::UAR.set(&mut b, uar.into());
    assert_eq!(d.cmd(op::DEALLOC_UAR, b).0, st::RESOURCE_BUSY);

    // GET_STATS: a type beyond NETWORK, a queue that does not exist.
    let mut b = [0u8; 64];
    get_stats_cmd::TYPE.set(&mut b, 5);
    assert_eq!(d.cmd(op::GET_STATS, b).0, st::ILLEGAL_PARAMETER);
    get_stats_cmd::TYPE.set(&mut b, get_stats_cmd::TYPE_BASIC);
    get_stats_cmd::SCOPE.set(&mut b, get_stats_cmd::SCOPE_QUEUE);
    get_stats_cmd::SCOPE_MODIFIER.set(&mut b, 999);
    assert_eq!(d.cmd(op::GET_STATS, b).0, st::ILLEGAL_PARAMETER);
    get_stats_cmd::SCOPE.set(&mut b, get_stats_cmd::SCOPE_ALL);
    let o = d.ok(op::GET_STATS, b);
    assert_eq!(get_stats_resp::COUNTER_0.get64(&o), 0);

    // Everything the refusals touched is unchanged; clean up.
    assert_eq!(
        d.dev.live(),
        Live {
            uars: 1,
            pds: 1,
            eqs: 0,
            cqs: 1,
            qps: 1,
            ahs: 2,
            mrs: 1
        }
    );
    let mut b = [0u8; 64];
    dereg_mr_cmd::L_KEY.set(&mut b, mr);
    d.ok(op::DEREG_MR, b);
    for a in [ah, ah2] {
        let mut b = [0u8; 64];
        destroy_ah_cmd::AH.set(&mut b, a.into());
        destroy_ah_cmd::PD.set(&mut b, pd.into());
        d.ok(op::DESTROY_AH, b);
    }
    let mut b = [0u8; 64];
    destroy_qp_cmd::QP_HANDLE.set(&mut b, ud);
    d.ok(op::DESTROY_QP, b);
    // A stale handle is refused.
    assert_eq!(d.cmd(op::DESTROY_QP, b).0, st::ILLEGAL_PARAMETER);
    let mut b = [0u8; 64];
    destroy_cq_cmd::CQ_IDX.set(&mut b, cq.into());
    d.ok(op::DESTROY_CQ, b);
    let mut b = [0u8; 64];
    dealloc_pd_cmd::PD.set(&mut b, pd.into());
    d.ok(op::DEALLOC_PD, b);
    let mut b = [0u8; 64];
    dealloc_uar_cmd::UAR.set(&mut b, uar.into());
    d.ok(op::DEALLOC_UAR, b);
    assert_eq!(d.dev.live(), Live::default());
}

#[test]
fn table_limits_are_resource_allocation_failures() {
    let mut d = Drv::new(Profile {
        max_pd: 2,
        max_uar: 1,
        ..Profile::default()
    });
    d.reset(r::reset_reason::NORMAL);
    d.admin_init();
    d.alloc_pd();
    d.alloc_pd();
    assert_eq!(
        d.cmd(op::ALLOC_PD, [0; 64]).0,
        st::RESOURCE_ALLOCATION_FAILURE
    );
    d.alloc_uar();
    assert_eq!(
        d.cmd(op::ALLOC_UAR, [0; 64]).0,
        st::RESOURCE_ALLOCATION_FAILURE
    );
    assert_eq!(d.dev.live().pds, 2);
}

#[test]
fn keep_alive_events() {
    let mut d = Drv::up();
    // Not enabled yet: nothing is posted.
    assert!(!d.dev.post_keep_alive());
    assert_eq!(d.next_aenq(), None);
    assert_eq!(d.set_aenq_groups(aenq_group::DRIVER_MASK), st::SUCCESS);
    d.dev.take_interrupts();
    assert!(d.dev.post_keep_alive());
    let e = d.next_aenq().expect("keep-alive");
    assert_eq!(e.group.get(), aenq_group::KEEP_ALIVE);
    assert_eq!(e.flags & admin::PHASE, 1);
    assert_eq!(d.dev.take_interrupts(), vec![0]);
    let cc = d.aenq_cc;
    d.w(r::AENQ_CONS_DB, cc.into());
    // Fill the queue: the 16th outstanding event overruns.
    for _ in 0..admin::AENQ_DEPTH {
        assert!(d.dev.post_keep_alive());
    }
    assert!(!d.dev.post_keep_alive());
    assert_eq!(d.dev.errors(), &[DeviceError::AenqOverrun]);
    // The driver takes them (the second pass has phase 0) and reports its consumer counter.
    for i in 0..admin::AENQ_DEPTH {
        let e = d.next_aenq().expect("event");
        let pass = (i + 1) / admin::AENQ_DEPTH;
        assert_eq!(e.flags & admin::PHASE, (pass & 1 ^ 1) as u8);
    }
    assert_eq!(d.next_aenq(), None);
    let cc = d.aenq_cc;
    d.w(r::AENQ_CONS_DB, cc.into());
    assert!(d.dev.post_keep_alive());
    assert_eq!(d.next_aenq().unwrap().flags & admin::PHASE, 0);
    // A consumer counter beyond what was produced is refused.
    d.w(r::AENQ_CONS_DB, (cc + 10).into());
    assert!(matches!(
        d.dev.errors().last(),
        Some(DeviceError::AenqConsumerAhead { .. })
    ));
}

#[test]
fn fault_knobs() {
    let mut d = Drv::up();
    d.dev.faults().fail_command = Some(FailCommand {
        opcode: op::ALLOC_PD,
        status: st::RESOURCE_BUSY,
        times: Some(2),
    });
    assert_eq!(d.cmd(op::ALLOC_PD, [0; 64]).0, st::RESOURCE_BUSY);
    assert_eq!(d.cmd(op::ALLOC_UAR, [0; 64]).0, st::SUCCESS);
    assert_eq!(d.cmd(op::ALLOC_PD, [0; 64]).0, st::RESOURCE_BUSY);
    assert_eq!(d.dev.live().pds, 0);
    assert_eq!(d.cmd(op::ALLOC_PD, [0; 64]).0, st::SUCCESS);
    assert_eq!(d.dev.faults().fail_command, None);
    let log = d.dev.command_log();
    assert_eq!(log[0].status, st::RESOURCE_BUSY);
    assert_eq!(log[0].opcode, op::ALLOC_PD);

    // A device that refuses bring-up: ready never reads 1, admin doorbells are refused.
    let mut d = Drv::new(Profile::default());
    d.dev.faults().never_ready = true;
    assert_eq!(d.sts(r::dev_sts::READY), 0);
    d.admin_init_unchecked();
    d.submit(op::ALLOC_PD, 0, &[0; 64]);
    d.w(r::AQ_PROD_DB, 1);
    assert_eq!(d.poll(), None);
    assert_eq!(d.dev.errors(), &[DeviceError::AdminWhileNotReady]);

    // A stalled admin queue: the doorbell is ignored, nothing completes; once the knob is
    // cleared the next doorbell executes the pending submission.
    let mut d = Drv::up();
    d.dev.faults().stall_admin = true;
    d.submit(op::ALLOC_PD, 0, &[0; 64]);
    let pc = d.pc;
    d.w(r::AQ_PROD_DB, pc.into());
    assert_eq!(d.poll(), None);
    assert!(d.dev.command_log().is_empty());
    d.dev.faults().stall_admin = false;
    d.w(r::AQ_PROD_DB, pc.into());
    assert_eq!(d.poll().map(|e| e.status), Some(st::SUCCESS));
    assert_eq!(d.dev.live().pds, 1);
}

impl Drv {
    /// Admin init without the readiness check (for a device that refuses bring-up).
    fn admin_init_unchecked(&mut self) {
        let never = self.dev.faults.never_ready;
        self.dev.faults.never_ready = false;
        self.admin_init();
        self.dev.faults.never_ready = never;
    }
}

#[test]
fn cq_doorbells_arm_only_interrupt_mode_cqs() {
    let mut d = Drv::up();
    let uar = d.alloc_uar();
    let eqn = d.create_eq();
    let cq = d.create_cq(uar, Some(eqn));
    let plain = d.create_cq(uar, None);
    let db = d.dev.profile().db_bar as u8;
    let at = |c: u16| super::commands::CQ_DB_BASE as usize + usize::from(c) * 4;
    // The consumer index alone arms nothing.
    d.dev.bar_write(db, at(cq), &5u32.to_le_bytes());
    assert_eq!(d.dev.cq_armed(cq), Some(false));
    // The arm bit (with a command sequence number) arms a CQ that has an EQ.
    d.dev
        .bar_write(db, at(cq), &(1u32 << 31 | 2 << 29 | 5).to_le_bytes());
    assert_eq!(d.dev.cq_armed(cq), Some(true));
    assert_eq!(d.dev.eq_events(eqn), Some(0));
    assert!(d.dev.errors().is_empty());
    // A CQ without interrupts cannot be armed: a recorded driver mistake, nothing armed.
    d.dev.bar_write(db, at(plain), &(1u32 << 31).to_le_bytes());
    assert_eq!(d.dev.cq_armed(plain), Some(false));
    assert_eq!(
        d.dev.errors().last(),
        Some(&DeviceError::ArmWithoutEq { cq: plain })
    );
}

#[test]
fn srd_retransmission_backs_off_to_a_cap_and_gives_up_after_about_one_and_a_half_seconds() {
    use super::{MAX_RETRIES, RTO_MAX_NS, RTO_NS, rto_after};
    assert_eq!(rto_after(0), RTO_NS);
    assert_eq!(rto_after(1), 2 * RTO_NS);
    assert_eq!(rto_after(9), RTO_MAX_NS);
    assert_eq!(rto_after(u8::MAX), RTO_MAX_NS);
    // The first wait, then one per retransmission: long enough for a descheduled peer or an
    // ARP exchange, short enough for a test of an unreachable peer.
    let total: u64 = RTO_NS + (1..=MAX_RETRIES).map(rto_after).sum::<u64>();
    assert!(
        (1_000 * RTO_NS..=2_000 * RTO_NS).contains(&total),
        "{total}"
    );
}

/// A SEND meta descriptor with phase 0 (`inline` bytes inline, else one buffer descriptor).
fn send_meta(req_id: u16, inline: Option<u16>) -> [u8; 32] {
    use firmware_interface::efa::io::{self, TxMetaDesc};
    let ctrl1 = io::CTRL1_META_DESC | io::op_type::SEND;
    let (ctrl1, length) = match inline {
        Some(n) => (ctrl1 | io::CTRL1_INLINE_MSG, n),
        None => (ctrl1, 1),
    };
    TxMetaDesc {
        req_id: Le16::new(req_id),
        ctrl1,
        ctrl2: io::CTRL2_FIRST | io::CTRL2_LAST | io::CTRL2_COMP_REQ,
        length: Le16::new(length),
        ..Default::default()
    }
    .to_bytes()
}

#[test]
fn wqe128_llqs_come_with_the_capability_and_wqe_sizes_must_match_the_llq() {
    use firmware_interface::efa::io::{TX_INLINE_MAX_128, TX_WQE_SIZE, TX_WQE128_SIZE};
    let qp_cmd = |d: &mut Drv, ring: u32| {
        let (pd, uar) = (d.alloc_pd(), d.alloc_uar());
        let cq = d.create_cq(uar, None);
        let mut b = d.qp_cmd(pd, uar, cq, create_qp_cmd::QP_TYPE_SRD);
        create_qp_cmd::SEND_QUEUE_RING_SIZE.set(&mut b, ring);
        b
    };
    // Without `data_polling_128` (the default profile): 64-byte entries only.
    let mut d = Drv::up();
    let (_, a) = d.get_feature(id::DEVICE_ATTR);
    let caps = feature::device_attr::DEVICE_CAPS.at(get_feature_resp::DATA_OFF);
    assert_eq!(caps.get(&a) & feature::device_attr::CAP_DATA_POLLING_128, 0);
    let b = qp_cmd(&mut d, 128 * 128);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    let b = qp_cmd(&mut d, 128 * 64);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::SUCCESS);

    // With it: the capability and 80 inline bytes are reported; depth × 128 makes a 128-byte
    // LLQ, depth × 64 a 64-byte one, anything else is refused.
    let mut d = Drv::new(Profile::default().with_wqe128());
    d.reset(r::reset_reason::NORMAL);
    d.admin_init();
    let (_, a) = d.get_feature(id::DEVICE_ATTR);
    assert_ne!(caps.get(&a) & feature::device_attr::CAP_DATA_POLLING_128, 0);
    let (_, q) = d.get_feature(id::QUEUE_ATTR);
    let inline = feature::queue_attr::INLINE_BUF_SIZE.at(get_feature_resp::DATA_OFF);
    assert_eq!(inline.get(&q), TX_INLINE_MAX_128 as u32);
    let b = qp_cmd(&mut d, 128 * 96);
    assert_eq!(d.cmd(op::CREATE_QP, b).0, st::ILLEGAL_PARAMETER);
    let llq_size = d.dev.profile().max_llq_size as usize;
    let db = d.dev.profile().db_bar as u8;
    let rts_qp = |d: &mut Drv, ring: u32| {
        let b = qp_cmd(d, ring);
        let o = d.ok(op::CREATE_QP, b);
        let handle = create_qp_resp::QP_HANDLE.get(&o);
        d.bring_to_rts(handle);
        create_qp_resp::QP_NUM.get(&o) as usize
    };
    let wide = rts_qp(&mut d, 128 * TX_WQE128_SIZE as u32);
    let narrow = rts_qp(&mut d, 128 * TX_WQE_SIZE as u32);
    assert!(d.dev.errors().is_empty(), "{:?}", d.dev.errors());

    // Two 64-byte WQEs (one buffer descriptor each) in the 128-byte LLQ: the device takes
    // both as its first entry, whose second half is not zero: recorded, and the WQE fails.
    let mut two = [0u8; 128];
    two[..32].copy_from_slice(&send_meta(0, None));
    two[64..96].copy_from_slice(&send_meta(1, None));
    d.dev.bar_write(2, wide * llq_size, &two);
    d.dev.bar_write(db, wide * 8, &1u32.to_le_bytes());
    assert!(
        matches!(
            d.dev.errors(),
            [DeviceError::BadWqe { qpn, reason }] if *qpn as usize == wide && reason.contains("128-byte")
        ),
        "{:?}",
        d.dev.errors()
    );

    // A 128-byte WQE with 80 inline bytes in the 64-byte LLQ: its inline length does not fit
    // a 64-byte WQE: recorded.
    let mut big = [0u8; 128];
    big[..32].copy_from_slice(&send_meta(0, Some(TX_INLINE_MAX_128 as u16)));
    big[32..112].fill(0xab);
    d.dev.bar_write(2, narrow * llq_size, &big);
    d.dev.bar_write(db, narrow * 8, &1u32.to_le_bytes());
    assert!(
        matches!(
            d.dev.errors().last(),
            Some(DeviceError::BadWqe { qpn, reason }) if *qpn as usize == narrow && reason.contains("64-byte")
        ),
        "{:?}",
        d.dev.errors()
    );
}
