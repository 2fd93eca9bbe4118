//! Event queues (`docs/mlx5.md#event-queue-entries`) and UAR page doorbells
//! (`docs/mlx5.md#uar-pages-and-doorbells`).
//!
//! An EQE for producer count `pi` goes to slot `pi % nent` with `owner = (pi / nent) & 1`, the
//! event bytes first and the owner byte last. The driver reports its consumer index through the
//! UAR doorbells 0x40 (update + arm) and 0x48 (update only). When an EQE would overwrite one
//! the driver has not consumed (`pi - ci >= nent`), the EQ has overrun: the event is dropped,
//! [`DeviceError::EqOverrun`] is recorded and, unless the EQ was created with `oi`, the device
//! raises the fatal health syndrome 0xc (asynchronous EQ buffer overrun), as firmware does.
//!
//! Untrapped BAR: on hardware every store to an EQ doorbell counts, also one that repeats
//! the previous value (re-arming an EQ whose consumer index has not moved). A poll cannot
//! tell a repeated value from an old one, so the device consumes the doorbell words: it
//! swaps each one with 0 atomically ([`BarMemory::swap32`](crate::BarMemory::swap32)) and
//! acts on what it took. 0 never is a valid EQ doorbell (EQ numbers start at 1), and a fresh
//! UAR page reads as zeros. Nothing changes for the driver, which never reads these words.
//!
//! What remains: stores to one word between two polls reach the device as the last of them.
//! For one EQ that is harmless (the consumer index is cumulative, arming twice is arming
//! once; when both 0x40 and 0x48 were written, they are applied in consumer-index order,
//! the order the driver wrote them). For two EQs on the same UAR page writing the same
//! offset within one poll interval, the earlier store is lost: that EQ's consumer index
//! lags in the device until its next doorbell and an arm request of it is lost. Only
//! trapping the stores can fix that; a driver that gives each EQ its own UAR page (valid on
//! hardware) avoids it.

use firmware_interface::init_seg::health_synd;
use firmware_interface::{eqe, uar};

use crate::{Device, DeviceError, UarWrite};

const CI_MASK: u32 = uar::CI_MASK;

fn be_value(data: &[u8]) -> u64 {
    data.iter()
        .take(8)
        .fold(0u64, |a, b| a << 8 | u64::from(*b))
}

impl Device {
    /// The EQs subscribed to event type `ev`.
    pub(crate) fn subscribed(&self, ev: u8) -> Vec<u32> {
        self.obj
            .eqs
            .iter()
            .filter(|(_, eq)| eq.wants(ev))
            .map(|(n, _)| n)
            .collect()
    }

    /// Writes one EQE into EQ `eqn`.
    pub(crate) fn post_eqe(&mut self, eqn: u32, ev: u8, sub_type: u8, data: &[u8; 28]) {
        let Some(eq) = self.obj.eqs.get_mut(eqn) else {
            return;
        };
        if eq.overrun {
            return;
        }
        let log = u32::from(eq.log_size);
        let nent = 1u32 << log;
        let outstanding = eq.pi.wrapping_sub(eq.ci) & CI_MASK;
        if outstanding >= nent && !eq.oi {
            eq.overrun = true;
            self.error(DeviceError::EqOverrun { eqn: eqn as u8 });
            self.fatal(health_synd::ASYNCHRONOUS_EQ_BUF_OVERRUN);
            return;
        }
        let slot = u64::from(eq.pi & (nent - 1));
        let off = slot * eqe::SIZE as u64;
        let page = 4096u64 << eq.log_page_size;
        let Some(base) = eq.pas.get((off / page) as usize).copied() else {
            return;
        };
        let addr = base.wrapping_add(off % page);
        let owner = ((eq.pi >> log) & 1) as u8;
        eq.pi = eq.pi.wrapping_add(1);
        let fire = eq.armed;
        eq.armed = false;
        let intr = eq.intr;
        let mut e = [0u8; eqe::SIZE];
        e[eqe::TYPE] = ev;
        e[eqe::SUB_TYPE] = sub_type;
        e[eqe::DATA..eqe::DATA + 28].copy_from_slice(data);
        e[eqe::OWNER] = owner;
        if self.dma_write(addr, &e[..eqe::OWNER]).is_ok() {
            let _ = self.dma_write(addr + eqe::OWNER as u64, &e[eqe::OWNER..]);
        }
        if fire {
            self.raise_interrupt(intr);
        }
    }

    /// A (trapped) write into a UAR page (`off` ≥ the first UAR page).
    pub(crate) fn uar_write(&mut self, off: usize, data: &[u8]) {
        let idx = u32::try_from(off / uar::PAGE_SIZE).unwrap_or(u32::MAX);
        let in_page = off % uar::PAGE_SIZE;
        let value = be_value(data);
        if !self.obj.uars.contains(idx) {
            self.error(DeviceError::BadDoorbell { offset: off, value });
            return;
        }
        let eq_db = matches!(in_page, uar::EQ_DOORBELL_ARM | uar::EQ_DOORBELL_NOARM);
        if !eq_db {
            // EQ doorbell words stay 0 (consumed), so an untrapped poll never takes this
            // write a second time.
            self.bar.write(off, data);
        }
        self.record_uar_write(UarWrite {
            uar: idx,
            offset: in_page,
            data: data.to_vec(),
        });
        let bf_size = 1usize << self.profile.log_bf_reg_size.clamp(2, 11);
        let bf_end = uar::BF_OFFSET + uar::BFREGS_PER_UAR * bf_size;
        let half = bf_size / 2;
        let ok = match (in_page, data.len()) {
            (uar::CQ_DOORBELL, 8) => {
                // Upper BE32: sn/cmd/ci; lower BE32: cqn. The CQ must exist and belong to
                // this UAR.
                let cqn = (value as u32) & CI_MASK;
                let ok = self.obj.cqs.get(cqn).is_some_and(|cq| cq.uar == idx);
                if ok {
                    self.cq_arm(cqn, (value >> 32) as u32);
                }
                ok
            }
            (uar::EQ_DOORBELL_ARM | uar::EQ_DOORBELL_NOARM, 4) => {
                return self.eq_doorbell(idx, off, value as u32, in_page == uar::EQ_DOORBELL_ARM);
            }
            (o, 8 | 64)
                if (uar::BF_OFFSET..bf_end).contains(&o)
                    && (o - uar::BF_OFFSET).is_multiple_of(half) =>
            {
                // Send doorbell / BlueFlame: bytes 4..6 of the control segment are the QPN.
                let qpn = u32::from_be_bytes([0, data[4], data[5], data[6]]);
                let ok = self.obj.qps.get(qpn).is_some_and(|qp| qp.uar == idx);
                if ok {
                    self.send_doorbell(qpn, data);
                }
                ok
            }
            // The rest of a BlueFlame burst: the WQE is in host memory too.
            (o, 64) => (uar::BF_OFFSET..bf_end).contains(&o),
            _ => false,
        };
        if !ok {
            self.error(DeviceError::BadDoorbell { offset: off, value });
        }
    }

    /// EQ doorbell: `(eqn << 24) | ci` written to UAR `uar` + 0x40 (arm) or + 0x48.
    fn eq_doorbell(&mut self, uar: u32, off: usize, v: u32, arm: bool) {
        let eqn = v >> uar::EQ_DB_EQN_SHIFT;
        let ci = v & CI_MASK;
        let Some(eq) = self.obj.eqs.get_mut(eqn).filter(|eq| eq.uar == uar) else {
            self.error(DeviceError::BadDoorbell {
                offset: off,
                value: u64::from(v),
            });
            return;
        };
        let avail = eq.pi.wrapping_sub(eq.ci) & CI_MASK;
        let advance = ci.wrapping_sub(eq.ci) & CI_MASK;
        if advance > avail {
            let pi = eq.pi & CI_MASK;
            self.error(DeviceError::EqConsumerAhead {
                eqn: eqn as u8,
                ci,
                pi,
            });
            return;
        }
        eq.ci = ci;
        if arm {
            if eq.pi & CI_MASK != ci {
                // Unconsumed EQEs: an armed EQ fires at once.
                let intr = eq.intr;
                eq.armed = false;
                self.raise_interrupt(intr);
            } else {
                eq.armed = true;
            }
        }
    }

    /// How far doorbell value `v` moves its EQ's consumer index (0 if it names no EQ).
    fn ci_advance(&self, v: u32) -> u32 {
        self.obj
            .eqs
            .get(v >> uar::EQ_DB_EQN_SHIFT)
            .map_or(0, |eq| (v & CI_MASK).wrapping_sub(eq.ci) & CI_MASK)
    }

    /// Untrapped mode: takes the EQ doorbell words of the UAR pages that have EQs (see the
    /// module documentation).
    pub(crate) fn poll_uar_doorbells(&mut self) -> bool {
        let mut uars: Vec<u32> = self.obj.eqs.values().map(|eq| eq.uar).collect();
        uars.sort_unstable();
        uars.dedup();
        let mut did = false;
        for idx in uars {
            let base = idx as usize * uar::PAGE_SIZE;
            let arm = (base + uar::EQ_DOORBELL_ARM, true);
            let noarm = (base + uar::EQ_DOORBELL_NOARM, false);
            let a = self.take32(arm.0);
            let n = self.take32(noarm.0);
            // Both written since the last poll: the one that moves the consumer index less
            // was written first (same EQ); for different EQs the order does not matter.
            let mut dbs = [(a, arm), (n, noarm)];
            if a != 0 && n != 0 && self.ci_advance(n) < self.ci_advance(a) {
                dbs.swap(0, 1);
            }
            for (v, (off, is_arm)) in dbs {
                if v != 0 {
                    self.eq_doorbell(idx, off, v, is_arm);
                    did = true;
                }
            }
        }
        // CQ doorbells (64 bits at 0x20) of the pages CQs use: an arm request whose word is
        // 0 (sequence 0, "next", nothing consumed: a fresh CQ's first arm) shows only here.
        let mut cq_uars: Vec<u32> = self.obj.cqs.values().map(|cq| cq.uar).collect();
        cq_uars.sort_unstable();
        cq_uars.dedup();
        for idx in cq_uars {
            let off = idx as usize * uar::PAGE_SIZE + uar::CQ_DOORBELL;
            let v = self.take64(off);
            if v != 0 {
                // One naming no CQ of the page is dropped: the driver may have destroyed the
                // CQ between its store and this poll.
                self.cq_uar_doorbell(idx, v);
                did = true;
            }
        }
        did
    }
}
