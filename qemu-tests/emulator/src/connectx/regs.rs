//! The initialization segment (BAR0 0x0000..0x2010, `docs/mlx5.md#initialization-segment`) and the
//! routing of BAR accesses.
//!
//! The BAR backing store holds the register values the driver reads.
//!
//! * Trapped BAR (every access goes through [`Device::mmio_read`] / [`Device::mmio_write`]):
//!   the device refreshes a register when it is read and stores what a write leaves behind.
//! * Untrapped BAR ([`BarMemory::untrapped`](crate::BarMemory::untrapped), e.g. a
//!   shared-memory file the driver maps): the device owns some words and the driver others.
//!   Device-owned words (revisions, timeouts, `initializing`, health, `internal_timer`) are
//!   written by [`Device::poll`] only when their value changes, or when the driver wrote over
//!   one (then the value is restored and the write recorded as
//!   [`DeviceError::ReadOnlyRegister`]). Words the driver writes are never simply stored
//!   over, so no driver store can be lost to a device write-back: `cmdq_addr_h` is only
//!   read; `cmdq_addr_l_sz` gets the queue geometry bits back (the next driver instance reads
//!   them there) with a compare-and-swap against the value the device read
//!   ([`BarMemory::compare_exchange32`](crate::BarMemory::compare_exchange32)), which fails
//!   if the driver stored again; doorbell words (the command doorbell, the EQ doorbells of
//!   UAR pages) are consumed with an atomic swap to 0
//!   ([`BarMemory::swap32`](crate::BarMemory::swap32)): every value the driver writes is
//!   taken once, also a value equal to the one before.
//!
//! Untrapped-mode differences from hardware that drivers do not depend on: `internal_timer`
//! is refreshed by polls at a bounded rate (every idle poll and every [`TIMER_POLLS`]th busy
//! one), not continuously; `cmdq_addr_l_sz` shows the geometry again only from the poll after
//! the driver's write; and stores to one doorbell word between two polls reach the device as
//! the last of them (see `eq.rs`). For the command doorbell that would lose commands (a
//! driver rings the page slot while an ordinary command waits for pages, often before the
//! device polled the first ring), so every command ring taken also runs the other
//! hardware-owned entries that do not wait for pages (see `cmdq.rs`).

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
/// Untrapped BAR: busy polls between two refreshes of `internal_timer` (an idle poll always
/// refreshes it). A trapped BAR refreshes it when it is read, never from a poll, so polls
/// read no clock.
pub(crate) const TIMER_POLLS: u32 = 8;

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
    /// The BAR is untrapped (memory the driver accesses directly).
    pub untrapped: bool,
    /// `cmdq_addr_h` as the device last read or stored it.
    pub seen_h: u32,
    /// `cmdq_addr_l_sz` as the device last read or stored it.
    pub seen_l: u32,
    /// The `initializing` word the device last put in the BAR.
    pub shown_init: u32,
    /// Untrapped: busy polls left before `internal_timer` is refreshed.
    pub timer_polls: u32,
    /// The last poll found nothing to do (set by [`Device::poll`]).
    pub idle: bool,
    /// Untrapped: command slots run without their ring (a lost ring, see `cmdq.rs`); a
    /// later ring of such a slot whose entry is software-owned again is that command's.
    pub unrung: u32,
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
            untrapped: false,
            seen_h: 0,
            seen_l: 0,
            shown_init: 0,
            timer_polls: 0,
            idle: true,
            unrung: 0,
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

    /// Takes a doorbell word of an untrapped BAR: returns it and leaves 0 (atomically, so a
    /// driver write is either returned now or found by the next take).
    pub(crate) fn take32(&mut self, off: usize) -> u32 {
        u32::from_be_bytes(self.bar.swap32(off, [0; 4]))
    }

    /// [`Device::take32`] for a 64-bit doorbell (big-endian).
    pub(crate) fn take64(&mut self, off: usize) -> u64 {
        u64::from_be_bytes(self.bar.swap64(off, [0; 8]))
    }

    fn l_sz(&self) -> u32 {
        let p = &self.profile;
        self.regs.addr_l
            | (self.regs.nic_interface & is::NIC_IF_MASK) << is::NIC_IF_SHIFT
            | (u32::from(p.log_cmdq_size) & is::LOG_CMDQ_SIZE_MASK) << is::LOG_CMDQ_SIZE_SHIFT
            | (u32::from(p.log_cmdq_stride) & is::LOG_CMDQ_STRIDE_MASK)
    }

    /// Puts a device-owned word. Untrapped: only if the BAR does not hold it already; with
    /// `check`, a different value there is the driver's write to a read-only register
    /// (restored and recorded).
    fn publish32(&mut self, off: usize, v: u32, check: bool) {
        if !self.regs.untrapped {
            self.put32(off, v);
            return;
        }
        let cur = self.get32(off);
        if cur != v {
            if check {
                self.error(DeviceError::ReadOnlyRegister {
                    offset: off,
                    value: cur,
                });
            }
            self.put32(off, v);
        }
    }

    /// [`Device::publish32`] for a device-owned byte.
    fn publish8(&mut self, off: usize, v: u8, check: bool) {
        if self.regs.untrapped {
            let mut cur = [0u8];
            self.bar.read(off, &mut cur);
            if cur[0] == v {
                return;
            }
            if check {
                self.error(DeviceError::ReadOnlyRegister {
                    offset: off,
                    value: u32::from(cur[0]),
                });
            }
        }
        self.bar.write(off, &[v]);
    }

    /// Writes every register value into the BAR (after reset).
    pub(crate) fn reset_bar(&mut self) {
        self.regs.untrapped = self.bar.untrapped();
        self.publish_static(false);
        // The driver-owned words get their reset values here and are never written by a
        // poll (an untrapped driver may be writing them at any time).
        let h = self.regs.cmdq_h;
        let l = self.l_sz();
        self.put32(is::CMDQ_ADDR_H, h);
        self.put32(is::CMDQ_ADDR_L_SZ, l);
        self.put32(is::CMD_DBELL, 0);
        self.regs.seen_h = h;
        self.regs.seen_l = l;
        self.publish_init(false);
        self.publish_counter();
        self.publish_timer();
    }

    /// The read-only words that change only on a fatal error.
    fn publish_static(&mut self, check: bool) {
        let (maj, min, sub) = self.profile.fw_rev;
        self.publish32(is::FW_REV, u32::from(min) << 16 | u32::from(maj), check);
        self.publish32(
            is::CMDIF_REV_FW_SUB,
            is::CMDIF_REV << is::CMDIF_REV_SHIFT | u32::from(sub),
            check,
        );
        self.publish32(is::CMD_EXEC_TO, 0, check);
        self.publish32(is::CMD_Q_INIT_TO, 0, check);
        let fw_ver = u32::from(maj) << 24 | u32::from(min as u8) << 16 | u32::from(sub);
        self.publish32(is::HEALTH + health::FW_VER, fw_ver, check);
        let (rfr, synd) = match self.hca.fatal {
            Some(s) => (FATAL_RFR_SEVERITY, s),
            None => (0, 0),
        };
        self.publish8(is::HEALTH + health::RFR_SEVERITY, rfr, check);
        self.publish8(is::HEALTH + health::SYND, synd, check);
    }

    /// `initializing`. The value changes without a write of the device's (the countdown,
    /// `never_ready`), so a scribble is what differs from the value last put there.
    fn publish_init(&mut self, check: bool) {
        let v = if self.initializing() {
            is::INITIALIZING_BIT
        } else {
            0
        };
        if self.regs.untrapped {
            let cur = self.get32(is::INITIALIZING);
            if check && cur != self.regs.shown_init {
                self.error(DeviceError::ReadOnlyRegister {
                    offset: is::INITIALIZING,
                    value: cur,
                });
            }
            if cur != v {
                self.put32(is::INITIALIZING, v);
            }
        } else {
            self.put32(is::INITIALIZING, v);
        }
        self.regs.shown_init = v;
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
        self.publish_static(false);
    }

    pub(crate) fn reg_read(&mut self, off: usize, buf: &mut [u8]) {
        let len = buf.len();
        let init = overlaps(off, len, is::INITIALIZING, 4);
        if init {
            self.publish_init(false);
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
            self.publish_init(false);
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

    /// A trapped register write: the device stores what the register then reads as.
    fn reg_write32(&mut self, off: usize, v: u32) {
        match off {
            is::CMDQ_ADDR_H => {
                self.regs.cmdq_h = v;
                self.put32(off, v);
                self.regs.seen_h = v;
            }
            is::CMDQ_ADDR_L_SZ => {
                self.latch_cmdq(v);
                let l = self.l_sz();
                self.put32(is::CMDQ_ADDR_L_SZ, l);
                self.regs.seen_l = l;
            }
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

    /// Latches the command queue address: `cmdq_addr_h` and the written `cmdq_addr_l_sz`.
    fn latch_cmdq(&mut self, v: u32) {
        self.regs.addr_l = v & is::CMDQ_ADDR_L_MASK;
        self.regs.nic_interface = (v >> is::NIC_IF_SHIFT) & is::NIC_IF_MASK;
        self.regs.cmdq = Some(u64::from(self.regs.cmdq_h) << 32 | u64::from(self.regs.addr_l));
    }

    /// The register part of [`Device::poll`]: the heartbeat and the `initializing`
    /// countdown; with an untrapped BAR also the driver's writes.
    pub(crate) fn poll_bar(&mut self) -> bool {
        self.heartbeat();
        if self.regs.init_left > 0 {
            self.regs.init_left -= 1;
        }
        if !self.regs.untrapped {
            // Trapped: every register is refreshed when it is read; nothing to look at.
            self.publish_init(false);
            return false;
        }
        self.poll_untrapped()
    }

    fn poll_untrapped(&mut self) -> bool {
        let mut did = false;
        // The doorbell before the queue address: the driver writes the address before it
        // rings, so the reads below see at least the address this doorbell goes with.
        let db = self.take32(is::CMD_DBELL);
        // The low word before the high word: a new low word then comes with its high word
        // (or a newer one, whose low word the next poll finds). A changed high word alone
        // latches too, as a write of the same low word would on hardware.
        let l = self.get32(is::CMDQ_ADDR_L_SZ);
        let h = self.get32(is::CMDQ_ADDR_H);
        if (h, l) != (self.regs.seen_h, self.regs.seen_l) {
            self.regs.seen_h = h;
            self.regs.seen_l = l;
            self.regs.cmdq_h = h;
            self.latch_cmdq(l);
            // The word reads back with the queue geometry, as on hardware: a driver (the
            // next one, after this one exits) reads `log_cmdq_size` / `log_cmdq_stride`
            // there. Only if the driver has not stored again since it was read; then the
            // next poll latches that store and tries again.
            let shown = self.l_sz();
            if shown != l
                && self.bar.compare_exchange32(
                    is::CMDQ_ADDR_L_SZ,
                    l.to_be_bytes(),
                    shown.to_be_bytes(),
                )
            {
                self.regs.seen_l = shown;
            }
            did = true;
        }
        if db != 0 {
            self.ring(db);
            did = true;
        }
        self.publish_static(true);
        self.publish_init(true);
        if self.regs.idle || self.regs.timer_polls == 0 {
            self.publish_timer();
            self.regs.timer_polls = TIMER_POLLS;
        } else {
            self.regs.timer_polls -= 1;
        }
        did |= self.poll_uar_doorbells();
        did
    }
}
