//! The emulated AWS EFA device (`docs/efa.md`): the BAR0 register file with the read-less
//! register-read responder, the admin queues (submission, completion, async events), the
//! admin command processor and its object tables (PD, UAR, EQ, CQ, QP for UD and SRD, AH,
//! MR with page lists), fault knobs and live-object counters; and the data path
//! ([`Device::bar_write`], [`Device::poll`]): low-latency send queues in BAR2, receive and
//! completion rings in host memory, doorbells in the doorbell BAR, UD and SRD (SEND with
//! immediate, RDMA read and write) on a fabric port ([`Device::attach`]) in the emulator's
//! own encapsulation, with SRD's retransmission and duplicate suppression in the device.
//!
//! Like the ConnectX model it sees only register writes and DMA through an
//! [`AddressSpace`], shares nothing with any driver but the contract
//! (`firmware_interface::efa`), and is as strict as hardware: a bad command completes with
//! the contract's admin status, a driver mistake without a status to carry it is a
//! [`DeviceError`], and nothing a driver writes makes it panic.
//!
//! Not modelled yet: completion EQs and CQ notifications (drivers poll), 128-byte WQEs,
//! RDMA write with immediate (unsolicited receive), GET_STATS counters other than zero,
//! admin-queue restart.
//!
//! ```
//! use std::sync::Arc;
//! use firmware_interface::efa::regs;
//! use nic_emulator::efa::{Device, Profile};
//! use nic_emulator::{AddressSpace, DmaFault};
//!
//! /// An IOMMU with nothing mapped.
//! struct NoMemory;
//! impl AddressSpace for NoMemory {
//!     fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
//!         Err(DmaFault { iova, len: buf.len(), write: false })
//!     }
//!     fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
//!         Err(DmaFault { iova, len: data.len(), write: true })
//!     }
//! }
//!
//! let mut dev = Device::new(Profile::default(), Arc::new(NoMemory));
//! // A read-less register read before the response buffer is set is a driver bug.
//! dev.mmio_write(regs::MMIO_REG_READ, &((regs::DEV_STS as u32) << 16 | 1).to_le_bytes());
//! assert_eq!(dev.errors(), &[nic_emulator::efa::DeviceError::ReadlessWithoutBuffer]);
//! assert_eq!(dev.live(), nic_emulator::efa::Live::default());
//! ```

mod admin;
mod commands;
mod dp;
mod objects;
mod regs;
mod shm;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::{AddressSpace, DmaFault};
use firmware_interface::efa::{feature, pci};

pub use dp::{
    DEDUP_WINDOW, DataStats, MAX_RETRIES, RNR_DELAY_NS, RTO_MAX_NS, RTO_NS, SRD_WINDOW_INIT,
    SRD_WINDOW_MAX, SRD_WINDOW_MIN, rto_after,
};
pub use shm::{HEADER_LEN, HEADER_OFF, MAGIC, ShmHeader, ShmLayout};

/// BAR of the low-latency send queues.
pub const MEM_BAR: u8 = 2;

/// What the device reports about itself and the limits it enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// PCI device id (one of `firmware_interface::efa::pci::DEVICE_IDS`).
    pub device_id: u16,
    /// VERSION: (major, minor) admin API version.
    pub version: (u8, u8),
    /// CONTROLLER_VERSION: (major, minor, subminor, implementation id).
    pub controller_version: (u8, u8, u8, u8),
    /// CAPS.reset_timeout, in 100 ms units (non-zero).
    pub reset_timeout: u8,
    /// CAPS.dma_addr_width in bits.
    pub dma_addr_width: u8,
    /// CAPS.admin_cmd_to, in 100 ms units (0 = the driver's default).
    pub admin_cmd_to: u8,
    /// MSI-X vectors of the function (vector 0 is the management vector).
    pub msix_vectors: u16,
    /// DEVICE_ATTR: firmware version.
    pub fw_version: u32,
    /// DEVICE_ATTR: admin API version.
    pub admin_api_version: u32,
    /// DEVICE_ATTR: device version.
    pub device_version: u32,
    /// DEVICE_ATTR: BAR of the doorbells.
    pub db_bar: u16,
    /// DEVICE_ATTR: bitmap of allowed MR page sizes.
    pub page_size_cap: u64,
    /// DEVICE_ATTR: physical / virtual address widths.
    pub addr_widths: (u8, u8),
    /// DEVICE_ATTR: `device_caps` bits.
    pub device_caps: u32,
    /// DEVICE_ATTR: largest RDMA operation.
    pub max_rdma_size: u32,
    /// DEVICE_ATTR: node GUID.
    pub guid: u64,
    /// DEVICE_ATTR: link speed in Gb/s.
    pub link_speed_gbps: u16,
    /// Most QPs.
    pub max_qp: u32,
    /// Deepest SQ (WQEs).
    pub max_sq_depth: u32,
    /// Shallowest SQ (WQEs).
    pub min_sq_depth: u16,
    /// Inline bytes of a TX WQE.
    pub inline_buf_size: u32,
    /// Deepest RQ (descriptors).
    pub max_rq_depth: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Deepest CQ (entries per sub-CQ).
    pub max_cq_depth: u32,
    /// Sub-CQs per CQ.
    pub sub_cqs_per_cq: u16,
    /// Most buffer descriptors of a send / receive / RDMA WR.
    pub max_sges: (u16, u16, u16),
    /// Most MRs.
    pub max_mr: u32,
    /// Most pages of one MR.
    pub max_mr_pages: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most AHs.
    pub max_ah: u32,
    /// Most UARs.
    pub max_uar: u32,
    /// Largest SQ in bytes.
    pub max_llq_size: u32,
    /// Most SQ bytes between doorbells, in 64-byte units.
    pub max_tx_batch: u16,
    /// NETWORK_ATTR: this device's GID.
    pub gid: [u8; 16],
    /// NETWORK_ATTR: largest payload in bytes.
    pub mtu: u32,
    /// Most EQs.
    pub max_eq: u32,
    /// Deepest EQ.
    pub max_eq_depth: u32,
    /// HW_HINTS (mmio read timeout, watchdog, admin completion timeout, poll interval).
    pub hw_hints: [u16; 4],
    /// AENQ groups the device can report (bit `1 << group`).
    pub aenq_groups: u32,
}

impl Default for Profile {
    fn default() -> Self {
        use feature::device_attr as d;
        Profile {
            device_id: 0xefa1,
            version: (0, 1),
            controller_version: (0, 0, 1, 0),
            reset_timeout: 5,
            dma_addr_width: 48,
            admin_cmd_to: 0,
            msix_vectors: 9,
            fw_version: 0x0001_0000,
            admin_api_version: 1,
            device_version: 1,
            db_bar: 4,
            page_size_cap: 0xffff_f000,
            addr_widths: (48, 48),
            device_caps: d::CAP_RDMA_READ | d::CAP_RNR_RETRY | d::CAP_RDMA_WRITE,
            max_rdma_size: 1 << 30,
            guid: 0x0200_00ff_fe00_0001,
            link_speed_gbps: 100,
            max_qp: 64,
            max_sq_depth: 1024,
            min_sq_depth: 4,
            inline_buf_size: 32,
            max_rq_depth: 4096,
            max_cq: 64,
            max_cq_depth: 8192,
            sub_cqs_per_cq: 1,
            max_sges: (2, 3, 1),
            max_mr: 256,
            max_mr_pages: 1 << 20,
            max_pd: 16,
            max_ah: 128,
            max_uar: 16,
            max_llq_size: 64 << 10,
            max_tx_batch: 16,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, 0x01,
            ],
            mtu: 8928,
            max_eq: 8,
            max_eq_depth: 4096,
            hw_hints: [0, 0, 0, 0],
            aenq_groups: 0x1f,
        }
    }
}

impl Profile {
    /// This profile with 128-byte TX WQEs turned on: `device_caps` gets `data_polling_128`
    /// and `inline_buf_size` the 80 bytes a 128-byte WQE holds. The device then takes a QP
    /// whose CREATE_QP ring size is depth × 128 as an LLQ of 128-byte entries (depth × 64
    /// stays 64-byte entries); without the capability only 64-byte entries are accepted.
    pub fn with_wqe128(self) -> Profile {
        use feature::device_attr as d;
        Profile {
            device_caps: self.device_caps | d::CAP_DATA_POLLING_128,
            inline_buf_size: firmware_interface::efa::io::TX_INLINE_MAX_128 as u32,
            ..self
        }
    }

    /// `supported_features` of DEVICE_ATTR: every feature the model answers.
    pub fn supported_features(&self) -> u64 {
        use feature::id;
        [
            id::DEVICE_ATTR,
            id::AENQ_CONFIG,
            id::NETWORK_ATTR,
            id::QUEUE_ATTR,
            id::HW_HINTS,
            id::HOST_INFO,
            id::EVENT_QUEUE_ATTR,
        ]
        .iter()
        .fold(0, |m, &i| m | 1u64 << i)
    }

    /// The PCI (vendor, device) ids.
    pub fn pci_ids(&self) -> (u16, u16) {
        (pci::VENDOR_AMAZON, self.device_id)
    }
}

/// Live object counts: what the driver created and has not destroyed yet.
/// `Live::default()` means everything was released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// User access regions.
    pub uars: u32,
    /// Protection domains.
    pub pds: u32,
    /// Event queues.
    pub eqs: u32,
    /// Completion queues.
    pub cqs: u32,
    /// Queue pairs.
    pub qps: u32,
    /// Address handles.
    pub ahs: u32,
    /// Memory regions.
    pub mrs: u32,
}

/// One completed admin command (the device's own log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdRecord {
    /// Admin opcode.
    pub opcode: u8,
    /// The submission's command id (bits 11:0).
    pub command_id: u16,
    /// Admin status written.
    pub status: u8,
}

/// Forces an admin status (see [`Faults::fail_command`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailCommand {
    /// Opcode to fail.
    pub opcode: u8,
    /// Status to complete it with.
    pub status: u8,
    /// How many commands to fail; `None` = every one. The knob clears itself when it runs out.
    pub times: Option<u32>,
}

/// Test knobs; `Faults::default()` means a well-behaved device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Commands with this opcode complete with this status and have no other effect.
    pub fail_command: Option<FailCommand>,
    /// DEV_STS.ready never reads 1 (bring-up is refused).
    pub never_ready: bool,
    /// Read-less register reads are not answered (the driver's read times out).
    pub drop_readless: bool,
    /// Admin doorbells are ignored: submissions stay unconsumed and no completion is ever
    /// written (the driver's admin command times out).
    pub stall_admin: bool,
    /// A receive buffer of this many frames in front of the device: of the frames that
    /// arrived since the last [`Device::poll`], those beyond it are dropped (what an
    /// overflowing socket buffer does; counted in [`DataStats::rx_overflow`]).
    pub rx_buffer_frames: Option<u32>,
}

/// Device-side errors a test can see: driver mistakes that have no admin status to carry
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// A DMA the IOMMU refused.
    Dma(DmaFault),
    /// An MMIO access that is not 4 bytes, not aligned, or beyond the register file.
    BadMmio {
        /// BAR0 offset.
        offset: usize,
        /// Access size in bytes.
        len: usize,
    },
    /// A write to a read-only register (ignored).
    ReadOnlyRegister {
        /// BAR0 offset.
        offset: usize,
        /// The value written.
        value: u32,
    },
    /// An access to an offset where no register is defined (ignored; reads as all ones).
    UndefinedRegister {
        /// BAR0 offset.
        offset: usize,
    },
    /// MMIO_REG_READ before the response buffer address was written (since the last reset).
    ReadlessWithoutBuffer,
    /// A write to AQ/ACQ/AENQ_CAPS the device cannot use (depth not a power of two or beyond
    /// its limit, entry size other than 64); the queue stays unset.
    BadQueueCaps {
        /// BAR0 offset of the caps register.
        offset: usize,
        /// The value written.
        value: u32,
    },
    /// An admin doorbell before the admin submission and completion queues were set.
    AdminQueueNotSet,
    /// An admin doorbell while the device is not ready (reset in progress, never ready).
    AdminWhileNotReady,
    /// An admin doorbell more than a queue ahead of what the device consumed (ignored).
    AdminProducerAhead {
        /// The producer counter written.
        producer: u16,
        /// The device's consumer counter.
        consumer: u16,
    },
    /// A submission entry whose phase bit is not the expected one: the driver rang the
    /// doorbell before writing it (processing stops there).
    AdminPhase {
        /// The consumer counter of the entry.
        index: u16,
    },
    /// An async event was due but the AENQ was full (the driver's consumer counter did not
    /// move); the event was dropped.
    AenqOverrun,
    /// An AENQ consumer counter beyond what the device produced (ignored).
    AenqConsumerAhead {
        /// The counter written.
        consumer: u16,
        /// The device's producer counter.
        producer: u16,
    },
    /// An EQ doorbell naming no EQ.
    BadEqDoorbell {
        /// The value written.
        value: u32,
    },
    /// A CQ doorbell with the arm bit for a CQ created without interrupts (no EQ): ignored.
    ArmWithoutEq {
        /// The CQ.
        cq: u16,
    },
    /// CREATE_AH for a destination that already has an AH (allowed, but drivers should
    /// share one AH per destination).
    DuplicateAh {
        /// The destination GID.
        dest: [u8; 16],
    },
    /// A BAR2 write outside every QP's low-latency queue (ignored).
    BadLlqWrite {
        /// BAR2 offset.
        offset: usize,
        /// Bytes written.
        len: usize,
    },
    /// A doorbell-BAR write that is not 4 bytes or names no queue (ignored).
    BadDoorbell {
        /// Offset in the doorbell BAR.
        offset: usize,
        /// The value written.
        value: u32,
    },
    /// An SQ or RQ doorbell more than the queue's depth ahead of what the device consumed
    /// (ignored).
    ProducerAhead {
        /// QP number.
        qpn: u16,
        /// The producer counter written.
        producer: u16,
        /// The device's consumer counter.
        consumer: u16,
    },
    /// A TX WQE whose phase bit is not the expected one: the driver rang the SQ doorbell
    /// before writing it (processing of the SQ stops there).
    SqPhase {
        /// QP number.
        qpn: u16,
        /// The SQ counter of the WQE.
        index: u16,
    },
    /// A TX WQE the device cannot parse (completed with a QP internal error).
    BadWqe {
        /// QP number.
        qpn: u16,
        /// What is wrong.
        reason: &'static str,
    },
    /// RX descriptors that do not form a WR (first/last flags, more than the receive
    /// SGE limit, a WR rung without its last descriptor); the message is dropped.
    BadRxDesc {
        /// QP number.
        qpn: u16,
        /// The RQ counter of the descriptor.
        index: u16,
    },
}

/// The emulated EFA device.
pub struct Device {
    pub(crate) profile: Profile,
    pub(crate) mem: Arc<dyn AddressSpace>,
    pub(crate) faults: Faults,
    pub(crate) regs: regs::Regs,
    pub(crate) queues: admin::Queues,
    pub(crate) obj: objects::Objects,
    pub(crate) log: Vec<CmdRecord>,
    pub(crate) errors: Vec<DeviceError>,
    pub(crate) irqs: BTreeSet<u16>,
    /// Where raised vectors go besides `irqs` (the MSI-X messages of an attachment).
    pub(crate) irq_sink: Option<crate::InterruptSink>,
    pub(crate) net: dp::Net,
    /// The shared BAR of an untrapped device ([`Device::with_shared_bar`]).
    pub(crate) shm: Option<shm::Shm>,
}

impl core::fmt::Debug for Device {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("efa::Device")
            .field("profile", &self.profile)
            .field("live", &self.live())
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// A device fresh out of power-on: ready, no queues, no objects.
    pub fn new(profile: Profile, mem: Arc<dyn AddressSpace>) -> Device {
        Device {
            profile,
            mem,
            faults: Faults::default(),
            regs: regs::Regs::default(),
            queues: admin::Queues::default(),
            obj: objects::Objects::default(),
            log: Vec::new(),
            errors: Vec::new(),
            irqs: BTreeSet::new(),
            irq_sink: None,
            net: dp::Net::default(),
            shm: None,
        }
    }

    /// A write to BAR `bar`: BAR0 (registers, [`Device::mmio_write`]), [`MEM_BAR`] (the
    /// low-latency send queues; a 64-byte WQE should come in one write) or the doorbell BAR
    /// (`Profile::db_bar`; 4-byte doorbells). A doorbell runs what it rings before returning.
    pub fn bar_write(&mut self, bar: u8, off: usize, data: &[u8]) {
        if u16::from(bar) == self.profile.db_bar && bar != 0 && bar != MEM_BAR {
            self.doorbell_write(off, data);
        } else if bar == MEM_BAR {
            self.llq_write(off, data);
        } else if bar == 0 {
            self.reg_write(off, data);
        } else {
            self.error(DeviceError::BadMmio {
                offset: off,
                len: data.len(),
            });
        }
    }

    /// Attaches the device's port to a fabric (replacing and returning any previous one).
    /// The device sends to the IPv4 address in the low four bytes of a destination GID.
    pub fn attach(
        &mut self,
        port: Box<dyn roce_wire::fabric::Port>,
    ) -> Option<Box<dyn roce_wire::fabric::Port>> {
        self.net.port.replace(port)
    }

    /// The address of the attached port.
    pub fn port_addr(&self) -> Option<std::net::Ipv4Addr> {
        self.net.port.as_ref().map(|p| p.addr())
    }

    /// Sets the clock of the SRD timers (default: wall time since the device was made).
    pub fn set_clock(&mut self, clock: crate::Clock) {
        self.net.clock = clock;
    }

    /// Takes frames in from the port and runs the SRD retransmission timers (and, on a
    /// shared BAR, delivers the register and doorbell writes found there first); whether
    /// anything happened.
    pub fn poll(&mut self) -> bool {
        self.poll_shm() | self.poll_net()
    }

    /// The earliest time (on the device clock) at which [`Device::poll`] has timer work.
    pub fn next_deadline(&self) -> Option<u64> {
        self.net_deadline()
    }

    /// SRD operations waiting for their acknowledgements or responses (or, in the device, for
    /// room in their destination's send window).
    pub fn srd_in_flight(&self) -> usize {
        self.net.pending.len()
    }

    /// The data-path counters.
    pub fn data_stats(&self) -> DataStats {
        self.net.stats
    }

    /// A BAR0 write (4 bytes, little-endian): stores it and runs whatever it triggers (a
    /// read-less response, a reset, admin commands) before returning.
    pub fn mmio_write(&mut self, off: usize, data: &[u8]) {
        self.reg_write(off, data);
    }

    /// A BAR0 read (4 bytes). Drivers never read BAR0 (they use the read-less mechanism);
    /// this answers with the register value all the same, all ones where no readable
    /// register is.
    pub fn mmio_read(&mut self, off: usize, buf: &mut [u8]) {
        self.reg_read(off, buf);
    }

    /// Posts a keep-alive event to the AENQ (the device's heartbeat). Returns whether it was
    /// posted: the AENQ must be set, the KEEP_ALIVE group enabled with SET_FEATURE
    /// AENQ_CONFIG, and the queue not full.
    pub fn post_keep_alive(&mut self) -> bool {
        self.post_aenq(
            firmware_interface::efa::admin::aenq_group::KEEP_ALIVE,
            0,
            &[],
        )
    }

    /// The test knobs.
    pub fn faults(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Live object counts (leak check: `Live::default()` after a full teardown).
    pub fn live(&self) -> Live {
        self.obj.live()
    }

    /// Every admin command completed so far, in completion order.
    pub fn command_log(&self) -> &[CmdRecord] {
        &self.log
    }

    /// Every device-side error so far, in order.
    pub fn errors(&self) -> &[DeviceError] {
        &self.errors
    }

    /// The profile the device was made with.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The state of the QP with this handle (`modify_qp_cmd::QP_STATE_*`), `None` if none.
    pub fn qp_state(&self, handle: u32) -> Option<u32> {
        self.obj.qps.get(&handle).map(|q| q.state)
    }

    /// The HOST_INFO block the driver last set, if any.
    pub fn host_info(&self) -> Option<&[u8]> {
        self.obj.host_info.as_deref()
    }

    /// The AENQ groups the driver enabled.
    pub fn enabled_aenq_groups(&self) -> u32 {
        self.obj.aenq_enabled
    }

    /// Whether EQ `eqn` is armed (an EQ_DB with the arm bit since the last event).
    pub fn eq_armed(&self, eqn: u16) -> Option<bool> {
        self.obj.eqs.get(&eqn).map(|e| e.armed)
    }

    /// MSI-X vectors raised since the last call, ascending (admin completions and async
    /// events on the vectors the driver named, none while INTR_MASK masks them; completion
    /// events on the vector of their EQ, only while it is armed).
    pub fn take_interrupts(&mut self) -> Vec<u16> {
        core::mem::take(&mut self.irqs).into_iter().collect()
    }

    /// Sends every vector the device raises to `sink` as well (an MSI-X message; `None`:
    /// only [`Device::take_interrupts`] sees them). The sink runs with the device locked: it
    /// must not call back into it.
    pub fn set_interrupt_sink(&mut self, sink: Option<crate::InterruptSink>) {
        self.irq_sink = sink;
    }

    /// Raises MSI-X vector `v`.
    pub(crate) fn raise(&mut self, v: u16) {
        self.irqs.insert(v);
        if let Some(s) = &self.irq_sink {
            s(v);
        }
    }

    /// The SQ of QP number `qpn` as the device consumes it: its consumer counter (16 bits,
    /// running, as the doorbell counts) and its depth in WQEs; `None` for no such QP. (What an
    /// attachment that maps BAR2 as memory needs to hand over only the WQEs a doorbell adds.)
    pub fn sq_position(&self, qpn: u16) -> Option<(u16, u32)> {
        self.obj
            .qps
            .values()
            .find(|q| q.qpn == qpn)
            .map(|q| (q.dp.sq_cc, q.dp.sq_depth))
    }

    /// The LLQ entry size of QP number `qpn` in bytes (64, or 128 for a QP created with
    /// 128-byte WQEs); `None` for no such QP.
    pub fn sq_wqe_size(&self, qpn: u16) -> Option<usize> {
        self.obj
            .qps
            .values()
            .find(|q| q.qpn == qpn)
            .map(|q| q.dp.wqe_size)
    }

    /// Whether CQ `idx` is armed (a CQ doorbell with the arm bit since its last event).
    pub fn cq_armed(&self, idx: u16) -> Option<bool> {
        self.obj.cqs.get(&idx).map(|c| c.armed)
    }

    /// Completion events written into EQ `eqn` so far.
    pub fn eq_events(&self, eqn: u16) -> Option<u64> {
        self.obj.eqs.get(&eqn).map(|e| e.events)
    }

    pub(crate) fn error(&mut self, e: DeviceError) {
        self.errors.push(e);
    }

    /// DMA read through the IOMMU; a fault is recorded in [`Device::errors`].
    pub(crate) fn dma_read(&mut self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let r = crate::mem::dma_read(&*self.mem, iova, buf);
        if let Err(f) = r {
            self.error(DeviceError::Dma(f));
        }
        r
    }

    /// DMA write through the IOMMU; a fault is recorded in [`Device::errors`].
    pub(crate) fn dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let r = crate::mem::dma_write(&*self.mem, iova, data);
        if let Err(f) = r {
            self.error(DeviceError::Dma(f));
        }
        r
    }

    /// Whether `len` bytes at `iova` are readable now (a fault is recorded).
    pub(crate) fn probe(&mut self, iova: u64, len: u64) -> bool {
        let r = match iova.checked_add(len) {
            Some(_) => self.mem.readable(iova, len),
            None => Err(DmaFault {
                iova,
                len: usize::try_from(len).unwrap_or(usize::MAX),
                write: false,
            }),
        };
        match r {
            Ok(()) => true,
            Err(f) => {
                self.error(DeviceError::Dma(f));
                false
            }
        }
    }
}
