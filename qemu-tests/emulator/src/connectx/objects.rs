//! Object tables (bounded by the profile) and the objects the commands create. Every queue
//! object keeps its buffer description (PAS list, doorbell record) for the data path.

use std::collections::{BTreeMap, BTreeSet};

use crate::Profile;
use crate::connectx::regs::FIRST_UAR;

/// `1 << log`, saturated to `cap`.
pub(crate) fn pow2(log: u8, cap: u32) -> u32 {
    1u32.checked_shl(u32::from(log))
        .unwrap_or(u32::MAX)
        .min(cap)
}

/// A table of numbered objects: numbers `first..end`, lowest free number first.
#[derive(Debug)]
pub(crate) struct Table<T> {
    first: u32,
    end: u32,
    map: BTreeMap<u32, T>,
    free: BTreeSet<u32>,
    fresh: u32,
}

impl<T> Table<T> {
    pub(crate) fn new(first: u32, end: u32) -> Table<T> {
        Table {
            first,
            end: end.max(first),
            map: BTreeMap::new(),
            free: BTreeSet::new(),
            fresh: first,
        }
    }

    /// Stores `v` under the lowest free number; `None` when the table is full.
    pub(crate) fn alloc(&mut self, v: T) -> Option<u32> {
        let idx = match self.free.pop_first() {
            Some(i) => i,
            None if self.fresh < self.end => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        self.map.insert(idx, v);
        Some(idx)
    }

    /// Stores `v` under a number outside the allocation range (QP1).
    pub(crate) fn insert_special(&mut self, idx: u32, v: T) {
        self.map.insert(idx, v);
    }

    /// Changes the end of the range (only while the table is empty).
    pub(crate) fn set_end(&mut self, end: u32) {
        if self.map.is_empty() {
            self.end = end.max(self.first);
            self.free.clear();
            self.fresh = self.first;
        }
    }

    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        self.map.get(&i)
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.map.get_mut(&i)
    }

    pub(crate) fn contains(&self, i: u32) -> bool {
        self.map.contains_key(&i)
    }

    pub(crate) fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.map.remove(&i)?;
        if (self.first..self.end).contains(&i) {
            self.free.insert(i);
        }
        Some(v)
    }

    /// Whether `i` is a number this table can hand out.
    pub(crate) fn in_range(&self, i: u32) -> bool {
        (self.first..self.end).contains(&i)
    }

    pub(crate) fn len(&self) -> u32 {
        u32::try_from(self.map.len()).unwrap_or(u32::MAX)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.map.iter().map(|(k, v)| (*k, v))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.map.values()
    }

    pub(crate) fn clear(&mut self) {
        let keys: Vec<u32> = self.map.keys().copied().collect();
        for k in keys {
            self.remove(k);
        }
    }
}

/// An allocated UAR page.
#[derive(Debug, Default)]
pub(crate) struct Uar {}

/// An event queue.
#[derive(Debug)]
pub(crate) struct Eq {
    pub log_size: u8,
    pub uar: u32,
    pub log_page_size: u8,
    pub pas: Vec<u64>,
    pub mask: [u64; 4],
    pub intr: u16,
    /// Ignore overrun.
    pub oi: bool,
    /// Producer counter (EQEs written).
    pub pi: u32,
    /// Consumer index from the last doorbell (24 bits).
    pub ci: u32,
    pub armed: bool,
    /// The driver let it overflow; no more EQEs are written.
    pub overrun: bool,
}

impl Eq {
    /// Whether the EQ takes events of type `ev`.
    pub(crate) fn wants(&self, ev: u8) -> bool {
        let w = usize::from(ev / 64);
        self.mask[w] & (1u64 << (ev % 64)) != 0
    }
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    pub log_size: u8,
    /// 0 = 64-byte CQEs, 1 = 128-byte CQEs.
    pub cqe_sz: u8,
    pub uar: u32,
    pub eqn: u32,
    pub dbr_addr: u64,
    pub log_page_size: u8,
    pub pas: Vec<u64>,
    pub oi: bool,
    /// Data-path state (producer index, arming, error).
    pub dp: crate::connectx::dp::CqDp,
}

/// A memory key.
#[derive(Debug)]
pub(crate) struct Mkey {
    pub key_7_0: u8,
    pub pd: u32,
    /// `ctx::mkc::ACCESS_MODE_*`.
    pub mode: u32,
    pub start: u64,
    pub len: u64,
    pub length64: bool,
    /// mkc byte 2: bit 6 a, 5 rw, 4 rr, 3 lw, 2 lr.
    pub access: u8,
    /// mkc `en_rinval`: a SEND with invalidate may invalidate the key.
    pub rinval: bool,
    /// Invalidated by a SEND with invalidate: every access through the key fails (as
    /// through a free mkey) until it is destroyed.
    pub invalidated: bool,
    /// Absolute log2 page size (MTT mode).
    pub log_page_size: u8,
    /// Page addresses (MTT mode), as many as `start`/`len` need.
    pub mtt: Vec<u64>,
    /// For each MTT page, how many pages from it on are physically contiguous (so that a
    /// translation takes one step per contiguous extent, not one per page).
    pub contig: Vec<u32>,
}

/// [`Mkey::contig`] for page list `mtt` of `page`-byte pages.
pub(crate) fn contiguous_runs(mtt: &[u64], page: u64) -> Vec<u32> {
    let mut contig = vec![1u32; mtt.len()];
    for k in (0..mtt.len().saturating_sub(1)).rev() {
        if mtt[k].checked_add(page) == Some(mtt[k + 1]) {
            contig[k] = contig[k + 1].saturating_add(1);
        }
    }
    contig
}

/// A shared receive queue: a ring of `2^log_size` WQEs of `16 << log_stride` bytes, each
/// starting with a next segment (`wqe::SrqNextSeg`); the driver posts along that list and
/// counts the WQEs posted in doorbell-record word 0.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: u32,
    pub log_size: u8,
    /// `log_rq_stride`: a WQE is `16 << log_stride` bytes.
    pub log_stride: u8,
    pub dbr_addr: u64,
    pub log_page_size: u8,
    pub pas: Vec<u64>,
    /// Limit water mark (0: no limit event armed).
    pub lwm: u16,
    /// Data-path state.
    pub dp: crate::connectx::dp::SrqDp,
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub st: u32,
    pub state: u8,
    pub pd: u32,
    pub cqn_snd: Option<u32>,
    pub cqn_rcv: Option<u32>,
    pub uar: u32,
    pub dbr_addr: u64,
    pub log_page_size: u8,
    pub pas: Vec<u64>,
    /// `(log_rq_size, log_rq_stride)` when there is an RQ (RQ at offset 0 of the buffer).
    pub rq: Option<(u8, u8)>,
    /// `log_sq_size` when there is an SQ (SQ right after the RQ).
    pub sq: Option<u8>,
    /// The SRQ its receives come from (`rq_type` SRQ; then there is no RQ).
    pub srqn: Option<u32>,
    /// The context as it is now (QUERY_QP returns it with the current state).
    pub qpc: Vec<u8>,
    /// The context as created (2RST goes back to it).
    pub created: Vec<u8>,
    /// Data-path state (rings, transport).
    pub dp: crate::connectx::dp::QpDp,
}

/// All object tables.
#[derive(Debug)]
pub(crate) struct Objects {
    pub uars: Table<Uar>,
    pub pds: Table<()>,
    pub tds: Table<()>,
    pub eqs: Table<Eq>,
    pub cqs: Table<Cq>,
    pub mkeys: Table<Mkey>,
    pub qps: Table<Qp>,
    pub srqs: Table<Srq>,
}

/// QP number of the GSI QP.
pub(crate) const QP1: u32 = 1;

impl Objects {
    pub(crate) fn new(p: &Profile, bar_len: usize) -> Objects {
        let bar_pages =
            u32::try_from(bar_len / firmware_interface::uar::PAGE_SIZE).unwrap_or(u32::MAX);
        let uar_end = FIRST_UAR.saturating_add(p.max_uars).min(bar_pages);
        Objects {
            uars: Table::new(FIRST_UAR, uar_end),
            pds: Table::new(1, pow2(p.log_max_pd, 1 << 24)),
            tds: Table::new(1, pow2(p.log_max_td, 1 << 24)),
            eqs: Table::new(1, pow2(p.log_max_eq, 256)),
            cqs: Table::new(1, pow2(p.log_max_cq, 1 << 24)),
            mkeys: Table::new(1, pow2(p.log_max_mkey, 1 << 24)),
            qps: Table::new(2, pow2(p.log_max_qp, 1 << 24)),
            srqs: Table::new(1, pow2(p.log_max_qp, 1 << 24)),
        }
    }

    /// Number of live objects of every kind.
    pub(crate) fn alive(&self) -> u32 {
        self.uars.len()
            + self.pds.len()
            + self.tds.len()
            + self.eqs.len()
            + self.cqs.len()
            + self.mkeys.len()
            + self.qps.len()
            + self.srqs.len()
    }

    pub(crate) fn clear(&mut self) {
        self.qps.clear();
        self.srqs.clear();
        self.mkeys.clear();
        self.cqs.clear();
        self.eqs.clear();
        self.tds.clear();
        self.pds.clear();
        self.uars.clear();
    }
}
