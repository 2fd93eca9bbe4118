//! The admin queues (`docs/efa.md#admin-queues`): submission entries consumed up to the
//! producer doorbell, completions written with the running phase, async events.

use firmware_interface::efa::admin::{self, AcqEntry, AenqEntry, AqEntry};
use firmware_interface::efa::regs as r;
use firmware_interface::{Le16, Le32};

use super::{CmdRecord, Device, DeviceError};

/// Deepest admin or async event queue the device accepts.
pub(crate) const MAX_QUEUE_DEPTH: u32 = 4096;

/// One ring the device produces into or consumes from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ring {
    /// DMA address of entry 0.
    pub base: u64,
    /// Entries (a power of two).
    pub depth: u16,
    /// MSI-X vector (completion and event rings).
    pub vector: u16,
    /// The device's running counter (consumer for the AQ, producer otherwise).
    pub counter: u16,
}

impl Ring {
    /// Slot address of the device's counter.
    fn slot(&self) -> u64 {
        self.base + u64::from(self.counter & (self.depth - 1)) * admin::ENTRY_SIZE as u64
    }

    /// The phase of the counter's pass: 1 on the first pass, flipping on each wrap.
    fn phase(&self) -> u8 {
        // depth is a power of two ≤ 4096, so the pass number is counter / depth.
        (((u32::from(self.counter) / u32::from(self.depth)) & 1) ^ 1) as u8
    }
}

/// The admin queue state.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    /// Admin submission queue (counter = the device's consumer counter).
    pub aq: Option<Ring>,
    /// Admin completion queue (counter = the device's producer counter).
    pub acq: Option<Ring>,
    /// Async event queue (counter = the device's producer counter).
    pub aenq: Option<Ring>,
    /// The AENQ consumer counter the driver last wrote.
    pub aenq_cc: u16,
}

impl Device {
    /// AQ_CAPS / ACQ_CAPS / AENQ_CAPS: latch the queue (address from the base registers).
    pub(crate) fn set_queue_caps(&mut self, off: usize, v: u32) {
        let (depth, entry, vector) = match off {
            r::AQ_CAPS => (
                r::aq_caps::DEPTH.of(v.into()),
                r::aq_caps::ENTRY_SIZE.of(v.into()),
                0,
            ),
            r::ACQ_CAPS => (
                r::acq_caps::DEPTH.of(v.into()),
                r::acq_caps::ENTRY_SIZE.of(v.into()),
                r::acq_caps::VECTOR.of(v.into()),
            ),
            _ => (
                r::aenq_caps::DEPTH.of(v.into()),
                r::aenq_caps::ENTRY_SIZE.of(v.into()),
                r::aenq_caps::VECTOR.of(v.into()),
            ),
        };
        let base = match off {
            r::AQ_CAPS => self.regs.aq_base(),
            r::ACQ_CAPS => self.regs.acq_base(),
            _ => self.regs.aenq_base(),
        };
        let ok = depth.is_power_of_two()
            && depth <= u64::from(MAX_QUEUE_DEPTH)
            && entry == admin::ENTRY_SIZE as u64
            && vector < u64::from(self.profile.msix_vectors)
            && base.is_multiple_of(admin::ENTRY_SIZE as u64);
        if !ok {
            self.error(DeviceError::BadQueueCaps {
                offset: off,
                value: v,
            });
            return;
        }
        let ring = Ring {
            base,
            depth: depth as u16,
            vector: vector as u16,
            counter: 0,
        };
        match off {
            r::AQ_CAPS => self.queues.aq = Some(ring),
            r::ACQ_CAPS => self.queues.acq = Some(ring),
            _ => {
                self.queues.aenq = Some(ring);
                self.queues.aenq_cc = 0;
            }
        }
    }

    /// AQ_PROD_DB: execute every submission entry up to the driver's producer counter.
    pub(crate) fn admin_doorbell(&mut self, pc: u16) {
        if self.faults.stall_admin {
            return;
        }
        if !self.ready() {
            self.error(DeviceError::AdminWhileNotReady);
            return;
        }
        let (Some(aq), Some(_)) = (self.queues.aq, self.queues.acq) else {
            self.error(DeviceError::AdminQueueNotSet);
            return;
        };
        let pending = pc.wrapping_sub(aq.counter);
        if pending > aq.depth {
            self.error(DeviceError::AdminProducerAhead {
                producer: pc,
                consumer: aq.counter,
            });
            return;
        }
        for _ in 0..pending {
            let Some(aq) = self.queues.aq else { return };
            let mut raw = [0u8; admin::ENTRY_SIZE];
            if self.dma_read(aq.slot(), &mut raw).is_err() {
                return;
            }
            let e = AqEntry::from_bytes(&raw);
            if e.flags & admin::AQ_FLAG_PHASE != aq.phase() {
                self.error(DeviceError::AdminPhase { index: aq.counter });
                return;
            }
            if let Some(q) = self.queues.aq.as_mut() {
                q.counter = q.counter.wrapping_add(1);
            }
            let (status, resp) = self.execute(&raw);
            self.complete(&e, status, &resp);
        }
    }

    /// Writes the completion of `e` (response bytes from offset 8) with the running phase.
    fn complete(&mut self, e: &AqEntry, status: u8, resp: &[u8; admin::ENTRY_SIZE]) {
        let command_id = e.command_id.get() & admin::COMMAND_ID_MASK;
        self.log.push(CmdRecord {
            opcode: e.opcode,
            command_id,
            status,
        });
        let (Some(acq), Some(aq)) = (self.queues.acq, self.queues.aq) else {
            return;
        };
        let mut c = AcqEntry::from_bytes(resp);
        c.command = Le16::new(command_id);
        c.status = status;
        c.flags = acq.phase();
        c.extended_status = Le16::new(0);
        c.sq_head_indx = Le16::new(aq.counter & (aq.depth - 1));
        if status != admin::status::SUCCESS {
            c.data = [0; 56];
        }
        if self.dma_write(acq.slot(), &c.to_bytes()).is_err() {
            return;
        }
        if let Some(q) = self.queues.acq.as_mut() {
            q.counter = q.counter.wrapping_add(1);
        }
        if !self.regs.intr_masked {
            self.raise(acq.vector);
        }
    }

    /// Posts an async event; `false` if the AENQ is not set, the group is not enabled or the
    /// queue is full.
    pub(crate) fn post_aenq(&mut self, group: u16, syndrome: u16, data: &[u8]) -> bool {
        let Some(q) = self.queues.aenq else {
            return false;
        };
        if group >= 32 || self.obj.aenq_enabled & (1 << group) == 0 {
            return false;
        }
        if q.counter.wrapping_sub(self.queues.aenq_cc) >= q.depth {
            self.error(DeviceError::AenqOverrun);
            return false;
        }
        let mut e = AenqEntry {
            group: Le16::new(group),
            syndrome: Le16::new(syndrome),
            flags: q.phase(),
            ..AenqEntry::default()
        };
        let n = data.len().min(e.data.len());
        e.data[..n].copy_from_slice(&data[..n]);
        let ts = self.log.len() as u64;
        e.timestamp_low = Le32::new(ts as u32);
        e.timestamp_high = Le32::new((ts >> 32) as u32);
        if self.dma_write(q.slot(), &e.to_bytes()).is_err() {
            return false;
        }
        if let Some(q) = self.queues.aenq.as_mut() {
            q.counter = q.counter.wrapping_add(1);
        }
        self.raise(q.vector);
        true
    }

    /// AENQ_CONS_DB: the driver's consumer counter.
    pub(crate) fn aenq_doorbell(&mut self, cc: u16) {
        let Some(q) = self.queues.aenq else {
            self.queues.aenq_cc = cc;
            return;
        };
        // The consumer may not pass the producer.
        if q.counter.wrapping_sub(cc) > q.depth {
            self.error(DeviceError::AenqConsumerAhead {
                consumer: cc,
                producer: q.counter,
            });
            return;
        }
        self.queues.aenq_cc = cc;
    }
}
