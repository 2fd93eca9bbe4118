//! Firmware-level state of the function: enable/init state, ISSI, capabilities, pages, vport.

use std::collections::{BTreeMap, BTreeSet};

use crate::Profile;
use crate::connectx::commands::caps::{self, Caps};

/// Number of RoCE GID table entries (`gid_table_size` = 1 ⇒ 8 << 1 = 16).
pub(crate) const GID_TABLE_LEN: usize = 16;
/// P_Key table entries (`pkey_table_size` = 0 ⇒ 128).
pub(crate) const PKEY_TABLE_LEN: u32 = 128;
/// Default vport MTU (hardware MTU: 1500 + Ethernet header, VLAN tag and FCS).
pub(crate) const DEFAULT_VPORT_MTU: u16 = 1522;

/// Firmware state of the (single) function.
#[derive(Debug)]
pub(crate) struct Hca {
    /// ENABLE_HCA done.
    pub enabled: bool,
    /// INIT_HCA done (and no TEARDOWN_HCA since).
    pub initialized: bool,
    /// TEARDOWN_HCA done since the last INIT_HCA (pages may be taken back).
    pub torn_down: bool,
    /// Current ISSI.
    pub issi: u16,
    /// Pages the driver gave (4 KiB-aligned DMA addresses).
    pub pages: BTreeSet<u64>,
    /// Runtime page bookkeeping (see `pages.rs`).
    pub rt: RuntimePages,
    /// Maximum capabilities.
    pub cap_max: Caps,
    /// Current capabilities.
    pub cap_cur: Caps,
    /// HOST_ENDIANNESS `he` byte.
    pub host_endianness: u8,
    /// Fatal health syndrome, once raised.
    pub fatal: Option<u8>,
    /// NIC vport `roce_en`.
    pub roce_en: bool,
    /// NIC vport MTU.
    pub vport_mtu: u16,
    /// NIC vport permanent MAC.
    pub mac: [u8; 6],
    /// RoCE GID table (`roce_addr_layout` images; all-zero = empty).
    pub gids: [[u8; 32]; GID_TABLE_LEN],
}

impl Hca {
    pub(crate) fn new(p: &Profile) -> Hca {
        let cap_max = caps::max_caps(p);
        let cap_cur = caps::initial_caps(&cap_max);
        Hca {
            enabled: false,
            initialized: false,
            torn_down: false,
            issi: 0,
            pages: BTreeSet::new(),
            rt: RuntimePages::default(),
            cap_max,
            cap_cur,
            host_endianness: 0,
            fatal: None,
            roce_en: false,
            vport_mtu: DEFAULT_VPORT_MTU,
            mac: p.mac,
            gids: [[0; 32]; GID_TABLE_LEN],
        }
    }

    /// Back to the state after reset (DISABLE_HCA). Pages stay held until taken back.
    pub(crate) fn reset_function(&mut self, p: &Profile) {
        let pages = core::mem::take(&mut self.pages);
        let fatal = self.fatal;
        *self = Hca::new(p);
        self.pages = pages;
        self.fatal = fatal;
    }

    /// Pages firmware needs right now: boot + init while initialized, boot while enabled and
    /// not yet initialized, none before ENABLE_HCA or after TEARDOWN_HCA.
    pub(crate) fn pages_needed(&self, p: &Profile) -> u64 {
        // Pages are in use only while the HCA is initialized; before INIT_HCA (a bring-up that
        // failed half way) and after TEARDOWN_HCA the driver may take every page back, as
        // Linux's reclaim of start-up pages does.
        if self.initialized {
            u64::from(p.boot_pages) + u64::from(p.init_pages) + self.rt.charged()
        } else {
            0
        }
    }
}

/// Pages firmware needs at run time for the objects it holds (see
/// [`PageRequests`](crate::PageRequests)).
#[derive(Debug, Default)]
pub(crate) struct RuntimePages {
    /// Pages each live object holds: (create opcode, object number) -> pages.
    pub charges: BTreeMap<(u16, u32), u32>,
    /// Sum of `charges`.
    pub live: u64,
    /// Creates seen that `every` counts.
    pub creates: u64,
    /// Commands waiting for pages: slot -> pages the create needs. Their pages are reserved
    /// (a TAKE does not return them).
    pub parked: BTreeMap<u8, u32>,
    /// Pages asked for (PAGE_REQUEST > 0) and not given yet.
    pub asked: u64,
    /// Pages offered back (PAGE_REQUEST < 0) and not taken yet.
    pub offered: u64,
    /// PAGE_REQUEST events raised.
    pub posted: u64,
}

impl RuntimePages {
    /// Pages charged to live objects and reserved for waiting creates.
    pub(crate) fn charged(&self) -> u64 {
        self.live + self.parked.values().map(|p| u64::from(*p)).sum::<u64>()
    }

    /// Forgets every object's pages (the objects are gone: teardown, DISABLE_HCA); waiting
    /// commands stay waiting.
    pub(crate) fn objects_gone(&mut self) {
        self.charges.clear();
        self.live = 0;
    }
}
