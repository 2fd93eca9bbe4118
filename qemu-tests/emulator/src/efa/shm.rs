//! The emulated EFA untrapped, behind a QEMU guest: its BARs are windows of one shared memory
//! BAR (an `ivshmem` function's BAR2, which `nic-emud --family efa` maps too), and the device
//! finds the driver's register and doorbell writes by polling ([`Device::with_shared_bar`]).
//!
//! Layout of the shared BAR ([`ShmLayout`]): the EFA's BAR0 register file at 0, an identity
//! page at [`HEADER_OFF`] ([`ShmHeader`]: magic, PCI ids, where the other windows are), the
//! doorbell BAR at [`ShmLayout::doorbells`], the memory BAR (the low-latency send queues) at
//! [`ShmLayout::llq`]. A guest driver takes each window as that BAR.
//!
//! How writes are found, since nothing traps them:
//! - **Registers** are edge-triggered: every write-only register has a shadow copy; a word
//!   that differs from its shadow was written and is delivered as a BAR0 write, in the order
//!   the bring-up writes them (response address, reset, queue bases before their caps, then
//!   doorbells and read-less requests). The words are read in the reverse of that order, so
//!   that a request seen implies the writes before it are seen too. A driver writes each register again only after the
//!   device answered the previous write (a read-less response, an admin completion), so no
//!   write is lost between two polls. A reset clears the register file: the device zeroes
//!   the queue registers and doorbells in the shared BAR (the driver writes them again only
//!   once the reset finished) and takes the response address again as it stands.
//! - **Doorbells**: each live QP's SQ and RQ producer counters are read every poll and
//!   handed to the device when they differ from what it was last given for that QP (a new
//!   QP starts at zero: its doorbell words are zeroed when it is created, before its
//!   completion tells the driver where they are). Before an SQ doorbell, the WQEs
//!   between the device's consumer and the new producer are copied from the shared memory
//!   BAR. CQ doorbells (a consumer-index hint) are not read.

use std::sync::atomic::{Ordering, fence};

use firmware_interface::efa::io;
use firmware_interface::efa::regs as r;

use super::{Device, Profile};
use crate::BarMemory;

/// Offset of the identity page in the shared BAR.
pub const HEADER_OFF: usize = 0x1000;
/// The identity page's magic.
pub const MAGIC: [u8; 8] = *b"EFAEMU01";
/// Bytes of the identity page's contents ([`ShmHeader::to_bytes`]).
pub const HEADER_LEN: usize = 40;

/// Where the EFA's BARs are in the shared BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmLayout {
    /// Offset of the register file (BAR0).
    pub regs: usize,
    /// Offset of the doorbell BAR.
    pub doorbells: usize,
    /// Its length.
    pub doorbells_len: usize,
    /// Offset of the memory BAR (the low-latency queues).
    pub llq: usize,
    /// Its length.
    pub llq_len: usize,
    /// The smallest shared BAR that holds them all (a power of two, as QEMU wants).
    pub len: usize,
}

impl ShmLayout {
    /// The layout for a device of `profile`: registers at 0, the identity page at
    /// [`HEADER_OFF`], doorbells at 128 KiB (the QP doorbells and the CQ doorbells above
    /// them), the low-latency queues at 1 MiB (`max_qp + 1` queues of `max_llq_size`: QP
    /// numbers start at 1).
    pub fn for_profile(p: &Profile) -> ShmLayout {
        let cq_db = super::commands::CQ_DB_BASE as usize;
        let doorbells_len = (cq_db + p.max_cq as usize * 4).next_multiple_of(4096);
        let doorbells = 0x2_0000;
        let llq = (doorbells + doorbells_len).next_multiple_of(0x10_0000);
        let llq_len = (p.max_qp as usize + 1) * p.max_llq_size as usize;
        ShmLayout {
            regs: 0,
            doorbells,
            doorbells_len,
            llq,
            llq_len,
            len: (llq + llq_len).next_power_of_two(),
        }
    }
}

/// The identity page: what a guest needs to find the device in the shared BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmHeader {
    /// PCI vendor id of the emulated function.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// Offset and length of the register file.
    pub regs: (u32, u32),
    /// The doorbell BAR's index (as DEVICE_ATTR reports it), offset and length.
    pub doorbells: (u32, u32, u32),
    /// Offset and length of the memory BAR.
    pub llq: (u32, u32),
}

impl ShmHeader {
    /// The header of a device of `profile` laid out as `l`.
    pub fn new(p: &Profile, l: &ShmLayout) -> ShmHeader {
        let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        ShmHeader {
            vendor: p.pci_ids().0,
            device: p.pci_ids().1,
            regs: (u(l.regs), 0x1000),
            doorbells: (u32::from(p.db_bar), u(l.doorbells), u(l.doorbells_len)),
            llq: (u(l.llq), u(l.llq_len)),
        }
    }

    /// Little-endian: magic (8 bytes), vendor and device (u16 each), then u32s: register
    /// offset and length, doorbell BAR index, offset and length, memory BAR offset and
    /// length.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&self.vendor.to_le_bytes());
        b[10..12].copy_from_slice(&self.device.to_le_bytes());
        let words = [
            self.regs.0,
            self.regs.1,
            self.doorbells.0,
            self.doorbells.1,
            self.doorbells.2,
            self.llq.0,
            self.llq.1,
        ];
        for (i, w) in words.iter().enumerate() {
            b[12 + i * 4..16 + i * 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Parses [`to_bytes`](Self::to_bytes)' format; `None` without the magic.
    pub fn parse(b: &[u8]) -> Option<ShmHeader> {
        if b.len() < HEADER_LEN || b[..8] != MAGIC {
            return None;
        }
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(ShmHeader {
            vendor: u16::from_le_bytes([b[8], b[9]]),
            device: u16::from_le_bytes([b[10], b[11]]),
            regs: (w(12), w(16)),
            doorbells: (w(20), w(24), w(28)),
            llq: (w(32), w(36)),
        })
    }
}

/// The write-only registers in the order a poll delivers them.
const ORDER: &[usize] = &[
    r::MMIO_RESP_HI,
    r::MMIO_RESP_LO,
    r::DEV_CTL,
    r::AQ_BASE_LO,
    r::AQ_BASE_HI,
    r::AQ_CAPS,
    r::ACQ_BASE_LO,
    r::ACQ_BASE_HI,
    r::ACQ_CAPS,
    r::INTR_MASK,
    r::AENQ_BASE_LO,
    r::AENQ_BASE_HI,
    r::AENQ_CAPS,
    r::AENQ_CONS_DB,
    r::AQ_PROD_DB,
    r::EQ_DB,
    r::MMIO_REG_READ,
];

/// Registers a reset clears (everything but the response address and DEV_CTL).
const CLEARED_BY_RESET: &[usize] = &[
    r::AQ_BASE_LO,
    r::AQ_BASE_HI,
    r::AQ_CAPS,
    r::ACQ_BASE_LO,
    r::ACQ_BASE_HI,
    r::ACQ_CAPS,
    r::INTR_MASK,
    r::AENQ_BASE_LO,
    r::AENQ_BASE_HI,
    r::AENQ_CAPS,
    r::AENQ_CONS_DB,
    r::AQ_PROD_DB,
    r::EQ_DB,
];

/// The shared BAR and what the device last saw in it.
pub(crate) struct Shm {
    bar: Box<dyn BarMemory>,
    layout: ShmLayout,
    /// Last seen value of each BAR0 word.
    shadow: [u32; r::END / 4],
    /// The SQ and RQ producers last handed to the device, by QP handle.
    doorbells: std::collections::BTreeMap<u32, (u16, u16)>,
}

impl Shm {
    fn read32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.bar.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn clear32(&mut self, off: usize) {
        self.bar.write(off, &[0; 4]);
    }
}

impl Device {
    /// A device whose BARs are windows of the shared memory `bar` ([`ShmLayout::for_profile`];
    /// the identity page written at [`HEADER_OFF`], the register file and doorbells zeroed,
    /// as at power-on), polled for the driver's writes by [`Device::poll`].
    ///
    /// Fails when `bar` is smaller than the layout needs.
    pub fn with_shared_bar(
        profile: Profile,
        mem: std::sync::Arc<dyn crate::AddressSpace>,
        mut bar: Box<dyn BarMemory>,
    ) -> Result<Device, String> {
        let layout = ShmLayout::for_profile(&profile);
        if bar.len() < layout.llq + layout.llq_len {
            return Err(format!(
                "the shared BAR has {:#x} bytes; the EFA's windows need {:#x}",
                bar.len(),
                layout.llq + layout.llq_len
            ));
        }
        bar.write(layout.regs, &[0; 0x1000]);
        bar.write(HEADER_OFF, &[0; 0x1000]);
        bar.write(HEADER_OFF, &ShmHeader::new(&profile, &layout).to_bytes());
        bar.write(layout.doorbells, &vec![0; layout.doorbells_len]);
        let mut dev = Device::new(profile, mem);
        dev.shm = Some(Shm {
            bar,
            layout,
            shadow: [0; r::END / 4],
            doorbells: Default::default(),
        });
        Ok(dev)
    }

    /// The shared BAR's layout, when the device has one.
    pub fn shared_layout(&self) -> Option<ShmLayout> {
        self.shm.as_ref().map(|s| s.layout)
    }

    /// One look at the shared BAR: registers written since the last one, then every live
    /// QP's doorbells; whether anything was delivered.
    pub(crate) fn poll_shm(&mut self) -> bool {
        // The shared BAR stays in place while the writes are delivered: a CREATE_QP they run
        // zeroes its doorbell words there.
        let Some(shm) = &self.shm else {
            return false;
        };
        let mut progress = false;
        // Read in the reverse of the driver's write order, each read ordered before the next:
        // a word seen written implies every word written before it is seen too.
        let mut seen = [0u32; ORDER.len()];
        for (i, &off) in ORDER.iter().enumerate().rev() {
            seen[i] = shm.read32(shm.layout.regs + off);
            fence(Ordering::Acquire);
        }
        // The response address is latched by the LO write, which may store the value LO
        // already had (a buffer at a 4 GiB boundary): a change of either half is both.
        let resp_changed = ORDER.iter().zip(&seen).any(|(&a, &v)| {
            (a == r::MMIO_RESP_HI || a == r::MMIO_RESP_LO) && v != shm.shadow[a / 4]
        });
        for i in 0..ORDER.len() {
            let (off, v) = (ORDER[i], seen[i]);
            let resp = off == r::MMIO_RESP_HI || off == r::MMIO_RESP_LO;
            let Some(shm) = &mut self.shm else {
                return progress;
            };
            if v == shm.shadow[off / 4] && !(resp && resp_changed) {
                continue;
            }
            shm.shadow[off / 4] = v;
            progress = true;
            self.reg_write(off, &v.to_le_bytes());
            if off == r::DEV_CTL && self.regs.reset_in_progress {
                let Some(shm) = &mut self.shm else {
                    return progress;
                };
                for &c in CLEARED_BY_RESET {
                    shm.clear32(shm.layout.regs + c);
                    shm.shadow[c / 4] = 0;
                }
                // What this poll saw of them predates the reset.
                for (s, &o) in seen.iter_mut().zip(ORDER) {
                    if CLEARED_BY_RESET.contains(&o) {
                        *s = 0;
                    }
                }
                let db = shm.layout.doorbells;
                let len = shm.layout.doorbells_len;
                shm.bar.write(db, &vec![0; len]);
                // The reset forgot the response address: take it again as it stands.
                let mut again = [(r::MMIO_RESP_HI, 0), (r::MMIO_RESP_LO, 0)];
                for (a, v) in &mut again {
                    *v = shm.read32(shm.layout.regs + *a);
                    shm.shadow[*a / 4] = *v;
                }
                for (a, v) in again {
                    self.reg_write(a, &v.to_le_bytes());
                }
            }
        }
        progress |= self.poll_shm_doorbells();
        progress
    }

    fn poll_shm_doorbells(&mut self) -> bool {
        let Some(mut shm) = self.shm.take() else {
            return false;
        };
        let mut progress = false;
        let qps: Vec<(u32, u16, u16, u32, usize)> = self
            .obj
            .qps
            .iter()
            .map(|(h, q)| (*h, q.qpn, q.dp.sq_cc, q.dp.sq_depth, q.dp.wqe_size))
            .collect();
        shm.doorbells.retain(|h, _| self.obj.qps.contains_key(h));
        let llq_size = self.profile.max_llq_size as usize;
        for (h, qpn, cc, depth, size) in qps {
            let base = shm.layout.doorbells + usize::from(qpn) * 8;
            let sq = shm.read32(base) as u16;
            let rq = shm.read32(base + 4) as u16;
            // The WQEs and descriptors the driver wrote before ringing are visible now.
            fence(Ordering::Acquire);
            let last = shm.doorbells.entry(h).or_insert((0, 0));
            let (last_sq, last_rq) = *last;
            *last = (sq, rq);
            if rq != last_rq {
                progress = true;
                self.doorbell_write(usize::from(qpn) * 8 + 4, &u32::from(rq).to_le_bytes());
            }
            if sq == last_sq {
                continue;
            }
            progress = true;
            // The WQEs from the device's consumer up to the producer (at most a ring's worth;
            // the device refuses a producer further ahead).
            if depth > 0 {
                let n = u32::from(sq.wrapping_sub(cc)).min(depth);
                let llq = shm.layout.llq + usize::from(qpn) * llq_size;
                for k in 0..n {
                    let slot = ((u32::from(cc) + k) % depth) as usize * size;
                    let mut w = [0u8; io::TX_WQE128_SIZE];
                    let w = &mut w[..size.min(io::TX_WQE128_SIZE)];
                    shm.bar.read(llq + slot, w);
                    self.llq_write(usize::from(qpn) * llq_size + slot, w);
                }
            }
            self.doorbell_write(usize::from(qpn) * 8, &u32::from(sq).to_le_bytes());
        }
        self.shm = Some(shm);
        progress
    }

    /// A QP numbered `qpn` was created: its doorbell words start at zero (before the
    /// completion names them to the driver).
    pub(crate) fn shm_new_qp(&mut self, qpn: u16) {
        if let Some(shm) = &mut self.shm {
            let base = shm.layout.doorbells + usize::from(qpn) * 8;
            shm.bar.write(base, &[0; 8]);
        }
    }
}
