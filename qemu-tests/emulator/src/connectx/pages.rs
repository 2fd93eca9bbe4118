//! Firmware pages at run time ([`PageRequests`](crate::PageRequests)): creates that need
//! pages wait for them, destroyed objects give theirs back, and the PAGE_REQUEST events that
//! ask the driver for both.
//!
//! The accounting: the device needs `boot + init` pages while initialized, plus the pages of
//! every live object that was charged some, plus the pages reserved for creates that wait.
//! A create that needs pages and finds fewer spare ones than it needs waits in its slot (the
//! entry stays hardware-owned, no CMD event) and the shortfall is asked for once (pages asked
//! for and not given yet are not asked for again). Every MANAGE_PAGES GIVE that completes
//! lets the waiting creates whose pages are now there run, in slot order. A TAKE returns only
//! spare pages (what is held beyond the need), so a waiting create's pages stay.

use firmware_interface::{Field, cmds, eqe, op_mod, opcode as op};

use crate::Device;

/// The creates whose objects hold pages, with their destroy.
const CHARGED: &[(u16, u16)] = &[
    (op::CREATE_QP, op::DESTROY_QP),
    (op::CREATE_CQ, op::DESTROY_CQ),
    (op::CREATE_MKEY, op::DESTROY_MKEY),
    (op::CREATE_SRQ, op::DESTROY_SRQ),
    (op::CREATE_RMP, op::DESTROY_RMP),
];

/// The object number in dword 2 (bits 23:0) of a create output or a destroy input.
const OBJECT: Field = Field::dw(0x8, 23, 0);

/// What became of one command, for the page accounting.
pub(crate) struct Done<'a> {
    pub opcode: u16,
    pub op_mod: u16,
    /// The first 16 bytes of the input.
    pub input: &'a [u8],
    /// The first 16 bytes of the output, when it was delivered.
    pub output: Option<&'a [u8]>,
    /// Pages the command was charged (a create that needed pages).
    pub charge: u32,
}

impl Device {
    /// Pages the create `opcode`, handed over now, needs (0: none). Counts the create.
    pub(crate) fn page_charge(&mut self, opcode: u16) -> u32 {
        let pr = self.profile.page_requests;
        if pr.every == 0 || !self.hca.initialized || !CHARGED.iter().any(|c| c.0 == opcode) {
            return 0;
        }
        self.hca.rt.creates += 1;
        if !self.hca.rt.creates.is_multiple_of(u64::from(pr.every)) {
            return 0;
        }
        pr.pages.max(1)
    }

    /// Whether a create needing `charge` pages must wait for them: then it is parked on
    /// `slot` and what is missing is asked for.
    pub(crate) fn park_for_pages(&mut self, slot: u8, charge: u32) -> bool {
        let held = self.hca.pages.len() as u64;
        let need = self.hca.pages_needed(&self.profile) + u64::from(charge);
        if held >= need {
            return false;
        }
        self.hca.rt.parked.insert(slot, charge);
        let ask = (need - held).saturating_sub(self.hca.rt.asked);
        if ask > 0 {
            self.hca.rt.asked += ask;
            self.page_request(i64::try_from(ask).unwrap_or(i64::MAX));
        }
        true
    }

    /// The parked command that can run now (its pages are there), taken off the list.
    pub(crate) fn next_unparked(&mut self) -> Option<(u8, u32)> {
        let held = self.hca.pages.len() as u64;
        let rt = &self.hca.rt;
        let base = self
            .hca
            .pages_needed(&self.profile)
            .saturating_sub(rt.charged());
        let spare = held.saturating_sub(base + rt.live);
        let (slot, charge) = rt
            .parked
            .iter()
            .find(|(_, c)| u64::from(**c) <= spare)
            .map(|(s, c)| (*s, *c))?;
        self.hca.rt.parked.remove(&slot);
        Some((slot, charge))
    }

    /// The parked commands (all of them: the driver cannot give pages), taken off the list.
    pub(crate) fn take_parked(&mut self) -> Vec<u8> {
        let slots = self.hca.rt.parked.keys().copied().collect();
        self.hca.rt.parked.clear();
        slots
    }

    /// Books a completed command: a charged create's pages go to its object (or become spare
    /// when it failed), a destroy frees its object's pages, MANAGE_PAGES settles what was asked
    /// for or offered. Returns whether waiting creates may be able to run now (pages were
    /// given).
    pub(crate) fn pages_after(&mut self, d: &Done<'_>) -> bool {
        let ok = d
            .output
            .is_some_and(|o| firmware_interface::mbox_out::STATUS.get(o) == 0);
        if CHARGED.iter().any(|c| c.0 == d.opcode) && d.charge > 0 {
            match d.output.filter(|_| ok) {
                Some(o) => {
                    let rt = &mut self.hca.rt;
                    let n = OBJECT.get(o);
                    if let Some(old) = rt.charges.insert((d.opcode, n), d.charge) {
                        rt.live -= u64::from(old);
                    }
                    rt.live += u64::from(d.charge);
                }
                None => self.offer_spare(),
            }
            return false;
        }
        if let Some((create, _)) = CHARGED.iter().find(|c| c.1 == d.opcode) {
            if ok {
                let n = OBJECT.get(d.input);
                if let Some(c) = self.hca.rt.charges.remove(&(*create, n)) {
                    self.hca.rt.live -= u64::from(c);
                    self.offer_spare();
                }
            }
            return false;
        }
        if d.opcode != op::MANAGE_PAGES || !ok {
            return false;
        }
        let storm = self.faults.page_storm;
        match d.op_mod {
            op_mod::MANAGE_PAGES_GIVE => {
                let k = u64::from(cmds::manage_pages_in::INPUT_NUM_ENTRIES.get(d.input));
                self.hca.rt.asked = self.hca.rt.asked.saturating_sub(k);
                if storm {
                    self.page_request(-i64::try_from(k.max(1)).unwrap_or(i64::MAX));
                }
                true
            }
            op_mod::MANAGE_PAGES_TAKE => {
                let k = d
                    .output
                    .map_or(0, |o| cmds::manage_pages_out::OUTPUT_NUM_ENTRIES.get(o));
                self.hca.rt.offered = self.hca.rt.offered.saturating_sub(u64::from(k));
                if storm {
                    self.page_request(i64::from(k.max(1)));
                }
                false
            }
            _ => {
                // CANT_GIVE: nothing asked for is coming.
                self.hca.rt.asked = 0;
                false
            }
        }
    }

    /// With `reclaim`, asks for the pages held beyond the need back (those not offered yet).
    fn offer_spare(&mut self) {
        if !self.profile.page_requests.reclaim {
            return;
        }
        let held = self.hca.pages.len() as u64;
        let spare = held.saturating_sub(self.hca.pages_needed(&self.profile));
        let extra = spare.saturating_sub(self.hca.rt.offered);
        if extra > 0 {
            self.hca.rt.offered += extra;
            self.page_request(-i64::try_from(extra).unwrap_or(i64::MAX));
        }
    }

    /// A PAGE_REQUEST event for this function (`num_pages` > 0: give, < 0: take back) on
    /// every EQ subscribed to page requests.
    pub(crate) fn page_request(&mut self, num_pages: i64) {
        let n = num_pages.clamp(i64::from(i32::MIN + 1), i64::from(i32::MAX)) as i32;
        let mut data = [0u8; 28];
        let at = eqe::PAGE_REQ_NUM_PAGES - eqe::DATA;
        data[at..at + 4].copy_from_slice(&n.to_be_bytes());
        self.hca.rt.posted += 1;
        for eqn in self.subscribed(eqe::event::PAGE_REQUEST) {
            self.post_eqe(eqn, eqe::event::PAGE_REQUEST, 0, &data);
        }
    }
}
