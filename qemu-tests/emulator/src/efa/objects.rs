//! Object tables of the emulated EFA: what admin commands create and destroy.

use std::collections::BTreeMap;

use super::Live;

/// A user access region.
#[derive(Debug)]
pub(crate) struct Uar;

/// A protection domain.
#[derive(Debug)]
pub(crate) struct Pd;

/// An event queue.
#[derive(Debug)]
pub(crate) struct Eq {
    /// Ring DMA address.
    pub base: u64,
    /// Entries.
    pub depth: u16,
    /// MSI-X vector.
    pub vector: u16,
    /// An EQ_DB with the arm bit came since the last interrupt.
    pub armed: bool,
    /// Entries written so far (the producer counter).
    pub pc: u32,
    /// Completion events written.
    pub events: u64,
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    /// Ring DMA address.
    pub base: u64,
    /// Entries per sub-CQ.
    pub depth: u16,
    /// Entry size in bytes (16 or 32).
    pub entry_size: u16,
    /// EQ of completion events (interrupt mode).
    pub eqn: Option<u16>,
    /// UAR.
    pub uar: u16,
    /// Completions written so far, per sub-CQ (the producer counters).
    pub pc: Vec<u32>,
    /// A CQ doorbell with the arm bit came since the last completion event.
    pub armed: bool,
    /// The command sequence number of the last arm.
    pub cmd_sn: u8,
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    /// QP number.
    pub qpn: u16,
    /// Admin QP type (1 UD, 2 SRD).
    pub qp_type: u32,
    /// Protection domain.
    pub pd: u16,
    /// UAR.
    pub uar: u16,
    /// Send and receive CQs.
    pub cqs: (u16, u16),
    /// State (`modify_qp_cmd::QP_STATE_*`).
    pub state: u32,
    /// Q_Key.
    pub qkey: u32,
    /// SQ PSN.
    pub sq_psn: u32,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Sub-CQs of send and receive completions.
    pub subs: (u16, u16),
    /// Queues and transport state of the data path.
    pub dp: super::dp::QpDp,
}

/// An address handle.
#[derive(Debug)]
pub(crate) struct Ah {
    /// Destination GID.
    pub dest: [u8; 16],
    /// Protection domain.
    pub pd: u16,
}

/// A memory region.
#[derive(Debug)]
pub(crate) struct Mr {
    /// Protection domain.
    pub pd: u16,
    /// First I/O virtual address.
    pub iova: u64,
    /// Length in bytes.
    pub len: u64,
    /// log2 of the page size.
    pub page_shift: u8,
    /// Page DMA addresses.
    pub pages: Vec<u64>,
    /// `permissions` bits.
    pub access: u8,
}

/// Every object table, plus what SET_FEATURE stored.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub uars: BTreeMap<u16, Uar>,
    pub pds: BTreeMap<u16, Pd>,
    pub eqs: BTreeMap<u16, Eq>,
    pub cqs: BTreeMap<u16, Cq>,
    /// By handle.
    pub qps: BTreeMap<u32, Qp>,
    pub ahs: BTreeMap<u16, Ah>,
    /// By L_Key.
    pub mrs: BTreeMap<u32, Mr>,
    /// Bumped on every QP and MR creation: the upper bits of handles and keys, so that a
    /// stale one is not silently taken for a new object.
    pub generation: u8,
    /// AENQ groups enabled by SET_FEATURE AENQ_CONFIG.
    pub aenq_enabled: u32,
    /// HOST_INFO as last set.
    pub host_info: Option<Vec<u8>>,
}

fn count<K, V>(m: &BTreeMap<K, V>) -> u32 {
    u32::try_from(m.len()).unwrap_or(u32::MAX)
}

/// The lowest free number in `1..=max` of a table, `None` when full.
pub(crate) fn free_u16<V>(m: &BTreeMap<u16, V>, max: u32) -> Option<u16> {
    if count(m) >= max {
        return None;
    }
    (1..=u16::try_from(max).unwrap_or(u16::MAX)).find(|k| !m.contains_key(k))
}

impl Objects {
    pub(crate) fn live(&self) -> Live {
        Live {
            uars: count(&self.uars),
            pds: count(&self.pds),
            eqs: count(&self.eqs),
            cqs: count(&self.cqs),
            qps: count(&self.qps),
            ahs: count(&self.ahs),
            mrs: count(&self.mrs),
        }
    }

    /// The next generation byte.
    pub(crate) fn next_generation(&mut self) -> u8 {
        self.generation = self.generation.wrapping_add(1);
        self.generation
    }
}
