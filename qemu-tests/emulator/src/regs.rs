//! The initialization segment (BAR0 0x0000..0x2010, spec §1) and the routing of BAR accesses.
//!
//! The BAR backing store holds the register values the driver reads: the device writes them
//! there whenever they change (and on every poll), so a driver that reads an untrapped,
//! shared-memory BAR sees the same thing as one whose reads are trapped.

use std::time::Instant;

use firmware_interface::init_seg::{self as is, health};
use firmware_interface::uar;

use crate::{Device, DeviceError, Profile};

/// First BAR0 page that can be a UAR page: the init segment spans 0x0000..0x2010.
pub(crate) const FIRST_UAR: u32 = (is::SIZE as u32).div_ceil(uar::PAGE_SIZE as u32);
/// `clear_int` (ifc.h; BAR0 0x100c bit 0): a write clears the legacy interrupt. Accepted and
/// ignored. TODO(fi): not in `init_seg`.
const CLEAR_INT: usize = 0x100c;
/// `clr_intx` (BAR0 0x200c): legacy INTx clear. Accepted and ignored. TODO(fi): not in
/// `init_seg`.
const CLR_INTX: usize = 0x200c;
/// `rfr_severity` written on a fatal error: reset required, severity valid, severity 2 (crit).
const FATAL_RFR_SEVERITY: u8 = health::RFR_BIT | 0x08 | 0x02;
/// `internal_timer` frequency: 1 GHz (nanoseconds), reported as `device_frequency_khz`.
pub(crate) const TIMER_KHZ: u32 = 1_000_000;

/// Register-file state that is not simply bytes in the BAR.
#[derive(Debug)]
pub(crate) struct Regs {
    /// Last value written to `cmdq_addr_h`.
    pub cmdq_h: u32,
    /// The latched command queue address (set by a write to `cmdq_addr_l_sz`).
    pub cmdq: Option<u64>,
    /// Address bits 31:12 of the last `cmdq_addr_l_sz` write.
    pub addr_l: u32,
    /// `nic_interface` (bits 10:8 of the last `cmdq_addr_l_sz` write).
    pub nic_interface: u32,
    /// Reads of `initializing` (or polls) left before it clears.
    pub init_left: u32,
    /// The heartbeat.
    pub health_counter: u32,
    /// Time zero of `internal_timer`.
    pub start: Instant,
    /// Value the device last put at 0x10 (to spot untrapped writes).
    pub shown_h: u32,
    /// Value the device last put at 0x14 (to spot untrapped writes).
    pub shown_l: u32,
}

impl Regs {
    pub(crate) fn new(p: &Profile) -> Regs {
        Regs {
            cmdq_h: 0,
            cmdq: None,
            addr_l: 0,
            nic_interface: 0,
            init_left: p.init_delay_reads,
            health_counter: 0,
            start: Instant::now(),
            shown_h: 0,
            shown_l: 0,
        }
    }
}

fn overlaps(off: usize, len: usize, reg: usize, reg_len: usize) -> bool {
    off < reg + reg_len && reg < off.saturating_add(len)
}

impl Device {
    /// Whether the `initializing` bit reads as set.
    pub(crate) fn initializing(&self) -> bool {
        self.faults.never_ready || self.regs.init_left > 0
    }

    pub(crate) fn put32(&mut self, off: usize, v: u32) {
        self.bar.write(off, &v.to_be_bytes());
    }

    pub(crate) fn get32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.bar.read(off, &mut b);
        u32::from_be_bytes(b)
    }

    fn l_sz(&self) -> u32 {
        let p = &self.profile;
        self.regs.addr_l
            | (self.regs.nic_interface & is::NIC_IF_MASK) << is::NIC_IF_SHIFT
            | (u32::from(p.log_cmdq_size) & is::LOG_CMDQ_SIZE_MASK) << is::LOG_CMDQ_SIZE_SHIFT
            | (u32::from(p.log_cmdq_stride) & is::LOG_CMDQ_STRIDE_MASK)
    }

    /// Writes every register value into the BAR (after reset and on every poll, so that a
    /// driver scribbling on read-only registers of a shared BAR is undone).
    pub(crate) fn reset_bar(&mut self) {
        self.publish_static();
        self.put32(is::CMD_DBELL, 0);
        self.publish_dynamic();
    }

    fn publish_static(&mut self) {
        let (maj, min, sub) = self.profile.fw_rev;
        self.put32(is::FW_REV, u32::from(min) << 16 | u32::from(maj));
        self.put32(
            is::CMDIF_REV_FW_SUB,
            is::CMDIF_REV << is::CMDIF_REV_SHIFT | u32::from(sub),
        );
        let h = self.regs.cmdq_h;
        self.put32(is::CMDQ_ADDR_H, h);
        self.regs.shown_h = h;
        let l = self.l_sz();
        self.put32(is::CMDQ_ADDR_L_SZ, l);
        self.regs.shown_l = l;
        self.put32(is::CMD_EXEC_TO, 0);
        self.put32(is::CMD_Q_INIT_TO, 0);
        let fw_ver = u32::from(maj) << 24 | u32::from(min as u8) << 16 | u32::from(sub);
        self.put32(is::HEALTH + health::FW_VER, fw_ver);
        let (rfr, synd) = match self.hca.fatal {
            Some(s) => (FATAL_RFR_SEVERITY, s),
            None => (0, 0),
        };
        self.bar.write(is::HEALTH + health::RFR_SEVERITY, &[rfr]);
        self.bar.write(is::HEALTH + health::SYND, &[synd]);
    }

    fn publish_dynamic(&mut self) {
        self.publish_init();
        self.publish_counter();
        self.publish_timer();
    }

    fn publish_init(&mut self) {
        let v = if self.initializing() {
            is::INITIALIZING_BIT
        } else {
            0
        };
        self.put32(is::INITIALIZING, v);
    }

    fn publish_counter(&mut self) {
        let v = self.regs.health_counter & is::HEALTH_COUNTER_MASK;
        self.put32(is::HEALTH_COUNTER, v);
    }

    fn publish_timer(&mut self) {
        let ns = self.regs.start.elapsed().as_nanos() as u64;
        self.put32(is::INTERNAL_TIMER_H, (ns >> 32) as u32);
        self.put32(is::INTERNAL_TIMER_L, ns as u32);
    }

    fn heartbeat(&mut self) {
        if self.hca.fatal.is_none() {
            self.regs.health_counter = self.regs.health_counter.wrapping_add(1);
        }
        self.publish_counter();
    }

    /// A fatal error: health syndrome + reset-required bit; the heartbeat stops.
    pub(crate) fn fatal(&mut self, synd: u8) {
        if self.hca.fatal.is_none() {
            self.hca.fatal = Some(synd);
        }
        self.publish_static();
    }

    pub(crate) fn reg_read(&mut self, off: usize, buf: &mut [u8]) {
        let len = buf.len();
        let init = overlaps(off, len, is::INITIALIZING, 4);
        if init {
            self.publish_init();
        }
        if overlaps(off, len, is::HEALTH_COUNTER, 4) {
            self.heartbeat();
        }
        if overlaps(off, len, is::INTERNAL_TIMER_H, 8) {
            self.publish_timer();
        }
        self.bar.read(off, buf);
        if init && self.regs.init_left > 0 {
            self.regs.init_left -= 1;
            self.publish_init();
        }
    }

    pub(crate) fn reg_write(&mut self, off: usize, data: &[u8]) {
        let len = data.len();
        let aligned = match len {
            4 => off.is_multiple_of(4),
            8 => off.is_multiple_of(8),
            64 => off.is_multiple_of(64),
            _ => false,
        };
        let in_bar = off
            .checked_add(len)
            .is_some_and(|end| end <= self.bar.len());
        let first_uar = FIRST_UAR as usize * uar::PAGE_SIZE;
        if !aligned || !in_bar || (off < first_uar && len == 64) {
            self.error(DeviceError::BadMmio { offset: off, len });
            return;
        }
        if off < first_uar {
            for (i, dw) in data.chunks_exact(4).enumerate() {
                let v = u32::from_be_bytes([dw[0], dw[1], dw[2], dw[3]]);
                self.reg_write32(off + 4 * i, v);
            }
        } else {
            self.uar_write(off, data);
        }
    }

    fn reg_write32(&mut self, off: usize, v: u32) {
        match off {
            is::CMDQ_ADDR_H => {
                self.regs.cmdq_h = v;
                self.put32(off, v);
                self.regs.shown_h = v;
            }
            is::CMDQ_ADDR_L_SZ => self.latch_cmdq(v),
            is::CMD_DBELL => {
                self.put32(off, v);
                self.ring(v);
                self.put32(off, 0);
            }
            CLEAR_INT | CLR_INTX => {}
            _ => self.error(DeviceError::ReadOnlyRegister {
                offset: off,
                value: v,
            }),
        }
    }

    fn latch_cmdq(&mut self, v: u32) {
        self.regs.addr_l = v & is::CMDQ_ADDR_L_MASK;
        self.regs.nic_interface = (v >> is::NIC_IF_SHIFT) & is::NIC_IF_MASK;
        self.regs.cmdq = Some(u64::from(self.regs.cmdq_h) << 32 | u64::from(self.regs.addr_l));
        let l = self.l_sz();
        self.put32(is::CMDQ_ADDR_L_SZ, l);
        self.regs.shown_l = l;
    }

    pub(crate) fn poll_bar(&mut self) -> bool {
        let mut did = false;
        self.heartbeat();
        if self.regs.init_left > 0 {
            self.regs.init_left -= 1;
        }
        let h = self.get32(is::CMDQ_ADDR_H);
        if h != self.regs.shown_h {
            self.regs.cmdq_h = h;
            self.regs.shown_h = h;
            did = true;
        }
        let l = self.get32(is::CMDQ_ADDR_L_SZ);
        if l != self.regs.shown_l {
            self.latch_cmdq(l);
            did = true;
        }
        let db = self.get32(is::CMD_DBELL);
        if db != 0 {
            self.put32(is::CMD_DBELL, 0);
            self.ring(db);
            did = true;
        }
        self.publish_static();
        self.publish_dynamic();
        did |= self.poll_uar_doorbells();
        did
    }
}
