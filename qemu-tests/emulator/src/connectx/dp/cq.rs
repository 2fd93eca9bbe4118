//! Completion queues on the data path (`docs/mlx5.md#completion-queue-entries`,
//! `docs/mlx5.md#event-queue-entries`): CQE writing with the owner rule, overrun detection against
//! the consumer index in the doorbell record, arming (UAR 0x20 and record word 1) and completion /
//! CQ error / QP events.

use firmware_interface::cqe::{self, Cqe64, ErrCqe};
use firmware_interface::eqe::{self, event};
use firmware_interface::uar::{self, dbr};

use crate::{Device, DeviceError};

/// CQ_ERROR syndrome: CQ overrun (`MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN`).
pub(crate) const CQ_ERR_OVERRUN: u8 = 0x01;
/// CQ_ERROR syndrome: access violation on the CQ buffer.
pub(crate) const CQ_ERR_ACCESS: u8 = 0x02;

/// Data-path state of a CQ.
#[derive(Debug, Default)]
pub(crate) struct CqDp {
    /// CQEs written (free running, 24 bits significant).
    pub pi: u32,
    /// Armed: `Some(solicited_only)`.
    pub armed: Option<bool>,
    /// Last arm word seen in the doorbell record (word 1) or at the UAR doorbell.
    pub arm_seen: u32,
    /// An arm request was taken at least once (`arm_seen` is one, not the initial 0).
    pub armed_ever: bool,
    /// The CQ overran or faulted: nothing more is written.
    pub error: bool,
    /// Producer count just after the last solicited CQE.
    pub last_sol: Option<u32>,
}

/// Why a CQE could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CqFull;

/// A CQE ready to be written: the 64 bytes (owner bit not yet set) and whether it is
/// solicited.
pub(crate) struct NewCqe {
    pub bytes: [u8; cqe::SIZE],
    pub solicited: bool,
}

impl NewCqe {
    pub(crate) fn ok(c: &Cqe64, opcode: u8, solicited: bool) -> NewCqe {
        let mut bytes = c.to_bytes();
        bytes[cqe::OP_OWN_OFFSET] =
            opcode << cqe::OPCODE_SHIFT | if solicited { cqe::SE_MASK } else { 0 };
        NewCqe { bytes, solicited }
    }

    pub(crate) fn err(c: &ErrCqe, opcode: u8) -> NewCqe {
        let mut bytes = c.to_bytes();
        bytes[cqe::OP_OWN_OFFSET] = opcode << cqe::OPCODE_SHIFT;
        NewCqe {
            bytes,
            solicited: false,
        }
    }
}

const CI_MASK: u32 = uar::CI_MASK;

impl Device {
    /// Writes a CQE into CQ `cqn`. On overrun (the driver has not consumed an entry the new
    /// CQE would overwrite) nothing is written: the CQ goes to error and a CQ_ERROR event is
    /// posted, unless the CQ was created with `oi`.
    pub(crate) fn push_cqe(&mut self, cqn: u32, c: NewCqe) -> Result<(), CqFull> {
        let Some(cq) = self.obj.cqs.get(cqn) else {
            return Err(CqFull);
        };
        if cq.dp.error {
            return Err(CqFull);
        }
        let (dbr_addr, log, cqe_sz, oi, pi) =
            (cq.dbr_addr, cq.log_size, cq.cqe_sz, cq.oi, cq.dp.pi);
        let nent = 1u32 << log;
        let mut ci_b = [0u8; 4];
        if self
            .dma_read(dbr_addr + dbr::CQ_SET_CI as u64, &mut ci_b)
            .is_err()
        {
            self.cq_error(cqn, CQ_ERR_ACCESS);
            return Err(CqFull);
        }
        let ci = u32::from_be_bytes(ci_b) & CI_MASK;
        let used = pi.wrapping_sub(ci) & CI_MASK;
        if used > nent {
            // The consumer index claims entries the device never wrote.
            self.error(DeviceError::CqConsumerAhead {
                cqn,
                ci,
                pi: pi & CI_MASK,
            });
        } else if used == nent && !oi {
            self.error(DeviceError::CqOverrun { cqn });
            self.cq_error(cqn, CQ_ERR_OVERRUN);
            return Err(CqFull);
        }
        let slot = u64::from(pi & (nent - 1));
        let stride = 64u64 << cqe_sz;
        // With 128-byte CQEs the 64-byte CQE is the second half of the slot.
        let off = slot * stride + (stride - cqe::SIZE as u64);
        let Some(addr) = self.cq_addr(cqn, off) else {
            self.cq_error(cqn, CQ_ERR_ACCESS);
            return Err(CqFull);
        };
        let mut bytes = c.bytes;
        let owner = ((pi >> log) & 1) as u8;
        bytes[cqe::OP_OWN_OFFSET] = (bytes[cqe::OP_OWN_OFFSET] & !cqe::OWNER_MASK) | owner;
        // Everything but op_own first, op_own last: the driver checks ownership there.
        let body = &bytes[..cqe::OP_OWN_OFFSET];
        if self.dma_write(addr, body).is_err()
            || self
                .dma_write(
                    addr + cqe::OP_OWN_OFFSET as u64,
                    &bytes[cqe::OP_OWN_OFFSET..],
                )
                .is_err()
        {
            self.cq_error(cqn, CQ_ERR_ACCESS);
            return Err(CqFull);
        }
        let Some(cq) = self.obj.cqs.get_mut(cqn) else {
            return Err(CqFull);
        };
        cq.dp.pi = pi.wrapping_add(1);
        if c.solicited {
            cq.dp.last_sol = Some(cq.dp.pi);
        }
        let fire = match cq.dp.armed {
            Some(sol_only) => !sol_only || c.solicited,
            None => false,
        };
        if fire {
            cq.dp.armed = None;
            let eqn = cq.eqn;
            self.comp_event(eqn, cqn);
        }
        Ok(())
    }

    /// The DMA address of byte `off` of CQ `cqn`'s buffer.
    fn cq_addr(&self, cqn: u32, off: u64) -> Option<u64> {
        let cq = self.obj.cqs.get(cqn)?;
        let page = 4096u64 << cq.log_page_size;
        let base = cq.pas.get(usize::try_from(off / page).ok()?)?;
        Some(base + off % page)
    }

    fn comp_event(&mut self, eqn: u32, cqn: u32) {
        let mut data = [0u8; 28];
        let at = eqe::COMP_CQN - eqe::DATA;
        data[at..at + 4].copy_from_slice(&(cqn & CI_MASK).to_be_bytes());
        self.post_eqe(eqn, event::COMP, 0, &data);
    }

    /// The CQ goes to error: no more CQEs; CQ_ERROR on the EQs that take it.
    fn cq_error(&mut self, cqn: u32, synd: u8) {
        let Some(cq) = self.obj.cqs.get_mut(cqn) else {
            return;
        };
        if cq.dp.error {
            return;
        }
        cq.dp.error = true;
        cq.dp.armed = None;
        let mut data = [0u8; 28];
        let at = eqe::CQ_ERR_CQN - eqe::DATA;
        data[at..at + 4].copy_from_slice(&(cqn & CI_MASK).to_be_bytes());
        data[eqe::CQ_ERR_SYNDROME - eqe::DATA] = synd;
        for eqn in self.subscribed(event::CQ_ERROR) {
            self.post_eqe(eqn, event::CQ_ERROR, 0, &data);
        }
    }

    /// Posts a QP affiliated event (`ev`) for `qpn` on the EQs that take it.
    pub(crate) fn qp_event(&mut self, qpn: u32, ev: u8) {
        let mut data = [0u8; 28];
        data[eqe::QP_EVENT_TYPE - eqe::DATA] = eqe::RES_QP;
        let at = eqe::QP_EVENT_QPN - eqe::DATA;
        data[at..at + 4].copy_from_slice(&(qpn & CI_MASK).to_be_bytes());
        for eqn in self.subscribed(ev) {
            self.post_eqe(eqn, ev, 0, &data);
        }
    }

    /// A request for a completion event: `word` is `sn << 28 | cmd | ci` (the upper half of the
    /// UAR CQ doorbell, or doorbell record word 1).
    pub(crate) fn cq_arm(&mut self, cqn: u32, word: u32) {
        let Some(cq) = self.obj.cqs.get_mut(cqn) else {
            return;
        };
        cq.dp.arm_seen = word;
        cq.dp.armed_ever = true;
        if cq.dp.error {
            return;
        }
        let sol_only = word & uar::CQ_DB_REQ_NOT_SOL != 0;
        let ci = word & CI_MASK;
        let pi = cq.dp.pi & CI_MASK;
        let pending = pi.wrapping_sub(ci) & CI_MASK;
        let nent = 1u32 << cq.log_size;
        // CQEs at or after `ci` already written: the event fires at once.
        let fire_now = pending != 0
            && pending <= nent
            && (!sol_only
                || cq.dp.last_sol.is_some_and(|s| {
                    let back = pi.wrapping_sub(s & CI_MASK) & CI_MASK;
                    back < pending
                }));
        if fire_now {
            cq.dp.armed = None;
            let eqn = cq.eqn;
            self.comp_event(eqn, cqn);
        } else {
            cq.dp.armed = Some(sol_only);
        }
    }

    /// Untrapped mode: a 64-bit CQ doorbell taken from UAR page `uar` (`value`: the arm word
    /// in the upper half, the CQN in the lower; CQNs start at 1, so a doorbell is never 0).
    /// The driver writes the doorbell record first: an arm already taken from there (the
    /// same word) is not taken twice, except the very first, whose word may be 0 and so
    /// invisible in the record. Returns whether the doorbell named a CQ of that page.
    pub(crate) fn cq_uar_doorbell(&mut self, uar: u32, value: u64) -> bool {
        let cqn = (value as u32) & CI_MASK;
        let word = (value >> 32) as u32;
        let Some(cq) = self.obj.cqs.get(cqn).filter(|cq| cq.uar == uar) else {
            return false;
        };
        if !cq.dp.armed_ever || cq.dp.arm_seen != word {
            self.cq_arm(cqn, word);
        }
        true
    }

    /// Untrapped mode: arm requests written to CQ doorbell records (word 1) since last seen.
    pub(crate) fn poll_cq_arms(&mut self) -> bool {
        let mut cqs = std::mem::take(&mut self.net.scratch_cqs);
        cqs.clear();
        cqs.extend(
            self.obj
                .cqs
                .iter()
                .filter(|(_, cq)| !cq.dp.error)
                .map(|(n, cq)| (n, cq.dbr_addr, cq.dp.arm_seen)),
        );
        let mut did = false;
        for &(cqn, dbr_addr, seen) in &cqs {
            let mut b = [0u8; 4];
            if self
                .mem
                .read(dbr_addr + dbr::CQ_ARM as u64, &mut b)
                .is_err()
            {
                continue;
            }
            let w = u32::from_be_bytes(b);
            if w != seen {
                self.cq_arm(cqn, w);
                did = true;
            }
        }
        self.net.scratch_cqs = cqs;
        did
    }
}
