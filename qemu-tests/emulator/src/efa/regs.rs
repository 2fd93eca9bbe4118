//! The BAR0 register file (`docs/efa.md#bar0-registers`), the read-less register-read
//! responder (`docs/efa.md#read-less-register-reads`) and device reset.

use firmware_interface::efa::regs::{self as r, ReadlessResp};
use firmware_interface::{Le16, Le32};

use super::{Device, DeviceError};

/// Register-file state.
#[derive(Debug, Default)]
pub(crate) struct Regs {
    /// Last AQ_BASE_LO / AQ_BASE_HI values.
    pub aq_base: [u32; 2],
    /// Last ACQ_BASE_LO / ACQ_BASE_HI values.
    pub acq_base: [u32; 2],
    /// Last AENQ_BASE_LO / AENQ_BASE_HI values.
    pub aenq_base: [u32; 2],
    /// MMIO_RESP_HI as last written.
    pub resp_hi: u32,
    /// The read-less response address, latched by a write to MMIO_RESP_LO.
    pub resp: Option<u64>,
    /// INTR_MASK bit 0: the admin interrupt is masked.
    pub intr_masked: bool,
    /// DEV_CTL.dev_reset is held at 1.
    pub reset_in_progress: bool,
    /// A reset completed since power-on.
    pub reset_finished: bool,
    /// The reason of the last reset.
    pub reset_reason: u32,
}

fn addr(v: [u32; 2]) -> u64 {
    u64::from(v[1]) << 32 | u64::from(v[0])
}

impl Regs {
    pub(crate) fn aq_base(&self) -> u64 {
        addr(self.aq_base)
    }
    pub(crate) fn acq_base(&self) -> u64 {
        addr(self.acq_base)
    }
    pub(crate) fn aenq_base(&self) -> u64 {
        addr(self.aenq_base)
    }
}

impl Device {
    /// Whether DEV_STS.ready reads 1.
    pub(crate) fn ready(&self) -> bool {
        !self.faults.never_ready && !self.regs.reset_in_progress
    }

    /// The value of a readable register, `None` where there is none.
    pub(crate) fn register(&self, off: usize) -> Option<u32> {
        let p = &self.profile;
        let v = match off {
            r::VERSION => {
                r::version::MINOR.val(p.version.1.into())
                    | r::version::MAJOR.val(p.version.0.into())
            }
            r::CONTROLLER_VERSION => {
                let (maj, min, sub, imp) = p.controller_version;
                use r::controller_version as c;
                c::SUBMINOR.val(sub.into())
                    | c::MINOR.val(min.into())
                    | c::MAJOR.val(maj.into())
                    | c::IMPL_ID.val(imp.into())
            }
            r::CAPS => {
                use r::caps as c;
                c::RESET_TIMEOUT.val(p.reset_timeout.into())
                    | c::DMA_ADDR_WIDTH.val(p.dma_addr_width.into())
                    | c::ADMIN_CMD_TO.val(p.admin_cmd_to.into())
            }
            r::DEV_STS => {
                use r::dev_sts as s;
                s::READY.val(self.ready().into())
                    | s::RESET_IN_PROGRESS.val(self.regs.reset_in_progress.into())
                    | s::RESET_FINISHED.val(self.regs.reset_finished.into())
            }
            _ => return None,
        };
        Some(v as u32)
    }

    pub(crate) fn reg_read(&mut self, off: usize, buf: &mut [u8]) {
        buf.fill(0xff);
        if buf.len() != 4 || !off.is_multiple_of(4) || off >= r::END {
            self.error(DeviceError::BadMmio {
                offset: off,
                len: buf.len(),
            });
            return;
        }
        match self.register(off) {
            Some(v) => buf.copy_from_slice(&v.to_le_bytes()),
            None if r::lookup(off).is_none() => {
                self.error(DeviceError::UndefinedRegister { offset: off })
            }
            // Write-only registers read as all ones.
            None => {}
        }
    }

    pub(crate) fn reg_write(&mut self, off: usize, data: &[u8]) {
        let Ok(b) = <[u8; 4]>::try_from(data) else {
            self.error(DeviceError::BadMmio {
                offset: off,
                len: data.len(),
            });
            return;
        };
        if !off.is_multiple_of(4) || off >= r::END {
            self.error(DeviceError::BadMmio {
                offset: off,
                len: 4,
            });
            return;
        }
        let v = u32::from_le_bytes(b);
        match r::lookup(off) {
            None => {
                self.error(DeviceError::UndefinedRegister { offset: off });
                return;
            }
            Some((_, true)) => {
                self.error(DeviceError::ReadOnlyRegister {
                    offset: off,
                    value: v,
                });
                return;
            }
            Some(_) => {}
        }
        match off {
            r::AQ_BASE_LO => self.regs.aq_base[0] = v,
            r::AQ_BASE_HI => self.regs.aq_base[1] = v,
            r::ACQ_BASE_LO => self.regs.acq_base[0] = v,
            r::ACQ_BASE_HI => self.regs.acq_base[1] = v,
            r::AENQ_BASE_LO => self.regs.aenq_base[0] = v,
            r::AENQ_BASE_HI => self.regs.aenq_base[1] = v,
            r::AQ_CAPS | r::ACQ_CAPS | r::AENQ_CAPS => self.set_queue_caps(off, v),
            r::AQ_PROD_DB => self.admin_doorbell(v as u16),
            r::AENQ_CONS_DB => self.aenq_doorbell(v as u16),
            r::INTR_MASK => self.regs.intr_masked = r::intr_mask::EN.of(v.into()) != 0,
            r::DEV_CTL => self.dev_ctl(v),
            r::MMIO_REG_READ => self.readless(v),
            r::MMIO_RESP_LO => {
                self.regs.resp = Some(u64::from(self.regs.resp_hi) << 32 | u64::from(v));
            }
            r::MMIO_RESP_HI => self.regs.resp_hi = v,
            r::EQ_DB => self.eq_doorbell(v),
            _ => {}
        }
    }

    /// MMIO_REG_READ: DMA-write `{req_id, reg_off, reg_val}` to the response buffer.
    fn readless(&mut self, v: u32) {
        let req_id = r::mmio_reg_read::REQ_ID.of(v.into()) as u16;
        let off = r::mmio_reg_read::REG_OFF.of(v.into()) as u16;
        let Some(resp) = self.regs.resp else {
            self.error(DeviceError::ReadlessWithoutBuffer);
            return;
        };
        if self.faults.drop_readless {
            return;
        }
        let val = match self.register(usize::from(off)) {
            Some(v) => v,
            None => {
                self.error(DeviceError::UndefinedRegister {
                    offset: usize::from(off),
                });
                r::READ_FAILED
            }
        };
        let out = ReadlessResp {
            req_id: Le16::new(req_id),
            reg_off: Le16::new(off),
            reg_val: Le32::new(val),
        };
        let _ = self.dma_write(resp, &out.to_bytes());
    }

    /// DEV_CTL: asserting dev_reset starts a reset (the response address is forgotten, the
    /// queues and objects are dropped); releasing it finishes the reset.
    fn dev_ctl(&mut self, v: u32) {
        use r::dev_ctl as c;
        let reset = c::DEV_RESET.of(v.into()) != 0;
        if reset && !self.regs.reset_in_progress {
            self.regs.reset_in_progress = true;
            self.regs.reset_finished = false;
            self.regs.reset_reason = c::RESET_REASON.of(v.into()) as u32;
            self.regs.resp = None;
            self.regs.resp_hi = 0;
            self.reset_state();
        } else if !reset && self.regs.reset_in_progress {
            self.regs.reset_in_progress = false;
            self.regs.reset_finished = true;
        }
        // aq_restart is not modelled: the admin queue never needs one here.
    }

    /// Drops every queue, object and setting a reset clears.
    fn reset_state(&mut self) {
        self.queues = Default::default();
        self.obj = Default::default();
        // Operations in flight are forgotten; the port and clock stay.
        self.net.pending.clear();
        self.net.outcomes.clear();
        self.net.flows.clear();
        let resp = self.regs.resp;
        let (rip, reason) = (self.regs.reset_in_progress, self.regs.reset_reason);
        self.regs = Regs {
            resp,
            reset_in_progress: rip,
            reset_reason: reason,
            ..Regs::default()
        };
    }

    /// EQ_DB: arm (or just acknowledge) an EQ.
    fn eq_doorbell(&mut self, v: u32) {
        let eqn = r::eq_db::EQN.of(v.into()) as u16;
        let arm = r::eq_db::ARM.of(v.into()) != 0;
        match self.obj.eqs.get_mut(&eqn) {
            Some(e) => e.armed |= arm,
            None => self.error(DeviceError::BadEqDoorbell { value: v }),
        }
    }
}
