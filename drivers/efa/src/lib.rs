//! Driver for AWS EFA (Elastic Fabric Adapter) devices, for programs without a kernel RDMA
//! stack: the control plane.
//!
//! It brings a device up the way Linux's `efa_probe` does (reset, read-less register reads,
//! admin queue, async event queue, the device's feature blocks; see [`Device::probe`]), runs
//! admin commands by polling, and implements [`verbs::Provider`] for the objects the device
//! manages: protection domains, completion queues (their rings in DMA memory), UD and SRD queue
//! pairs with EFA's state machine, address handles and memory regions (inline or chained page
//! lists). It touches the device only through the [`nic_hal`] traits:
//! [`RegisterIo`](nic_hal::RegisterIo) for BAR0 (writes only: every read goes through the
//! read-less mechanism), [`DmaAllocator`](nic_hal::DmaAllocator) for memory the device reads
//! and writes, and [`Platform`](nic_hal::Platform) for the clock and the poll-loop hook. The
//! contract it speaks is `firmware_interface::efa` (`docs/efa.md`).
//!
//! **The device is not trusted.** Every read-less response is matched by request id and
//! register offset; every admin completion by phase and command id, within a timeout; every
//! feature block and response is checked before use (versions, the doorbell BAR index,
//! zero limits, sub-CQ indices, completion depths, QP states, doorbell offsets). A bad value is
//! an [`Error`] (EIO), never a panic. A command whose outcome is unknown (a timeout, a
//! completion for another command) takes the admin queue down and leaks the memory it named:
//! DMA memory is freed only when the device is known not to use it (the create was refused,
//! the destroy succeeded, the device was reset).
//!
//! **The data path** needs the memory BAR (BAR2) and the doorbell BAR
//! ([`Device::attach_data_bars`]): `post_send` writes each 64-byte WQE (128-byte where the
//! device offers `data_polling_128`: [`Attributes::tx_wqe_size`]) into the low-latency
//! queue and rings the SQ doorbell, `post_recv` writes RX descriptors into the host ring and
//! rings the RQ doorbell, `poll_cq` takes completions by phase and checks every field against
//! the driver's bookkeeping (see the `dp` module's rules: send ids are free send slots,
//! since SRD completes out of order). Without the data BARs, post and poll answer
//! EOPNOTSUPP. SRQs and atomics do not exist on EFA (EOPNOTSUPP).
//!
//! ```
//! // Which PCI functions this driver binds to.
//! assert!(efa::is_supported_pci(0x1d0f, 0xefa1));
//! assert!(!efa::is_supported_pci(0x15b3, 0x1017));
//! ```
//!
//! With a device backend (`regs: impl RegisterIo`, `dma: Arc<dyn DmaAllocator>`,
//! `platform: impl Platform`):
//!
//! ```
//! use std::sync::Arc;
//! use nic_hal::{DmaAllocator, Platform, RegisterIo};
//! use verbs::Provider;
//!
//! fn bring_up<R: RegisterIo, P: Platform>(
//!     regs: R,
//!     dma: Arc<dyn DmaAllocator>,
//!     platform: P,
//! ) -> Result<(), verbs::Error> {
//!     let dev = efa::Device::probe(regs, dma, platform, efa::Config::default())?;
//!     let pd = dev.alloc_pd()?;
//!     let cq = dev.create_cq(256, 0, None)?;
//!     // ... UD/SRD QPs, address handles, memory regions: all through `verbs::Provider`
//!     dev.destroy_cq(cq).map_err(|e| e.error)?;
//!     dev.dealloc_pd(pd).map_err(|e| e.error)?;
//!     Ok(dev.shutdown()?)
//! }
//! ```
//!
//! [`loopback`] is the exchange a test runs once a device is up on a new path: SRD and UD
//! SENDs and an SRD RDMA READ of the device to itself, every completion and byte checked.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod device;
mod dp;
mod error;
mod events;
pub mod loopback;
mod mem;
mod provider;
#[cfg(test)]
mod tests;

pub use device::{AenqCounters, DEFAULT_ADMIN_TIMEOUT_NS, DEFAULT_READ_TIMEOUT_NS, Device};
pub use dp::{CqeFault, wc_status};
pub use error::{CompletionFault, Error};
pub use events::{CHANNEL_EQ_DEPTH, CompChannel, WAIT_RECHECK_NS};
pub use provider::{Ah, Cq, Mr, Pd, Qp, Srq};

use firmware_interface::efa::pci;

/// The driver version HOST_INFO reports: (major, minor, sub-minor).
pub const DRIVER_VERSION: (u32, u32, u32) = (0, 1, 0);

/// Bring-up parameters of a [`Device`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// PCI device id of the function (reported by `query_device`).
    pub device_id: u16,
    /// PCI bus/device/function (`bus << 8 | device << 3 | function`), reported in HOST_INFO.
    pub bdf: u16,
    /// Admin command timeout; `None`: CAPS.admin_cmd_to (or the HW_HINTS), else 30 s.
    pub admin_timeout_ns: Option<u64>,
}

/// Whether this driver binds to the PCI function `vendor:device` (an EFA function).
pub fn is_supported_pci(vendor: u16, device: u16) -> bool {
    pci::is_efa(vendor, device)
}

/// What the device reported about itself at bring-up (GET_FEATURE DEVICE_ATTR, QUEUE_ATTR,
/// NETWORK_ATTR, EVENT_QUEUE_ATTR, HW_HINTS; `docs/efa.md#features`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Supported feature ids (bit `1 << id`).
    pub supported_features: u64,
    /// Allowed MR page sizes (bit `n`: 2^n bytes).
    pub page_size_cap: u64,
    /// Firmware version.
    pub fw_version: u32,
    /// Admin API version.
    pub admin_api_version: u32,
    /// Device version.
    pub device_version: u32,
    /// BAR of the doorbells.
    pub db_bar: u16,
    /// Physical address width.
    pub phys_addr_width: u8,
    /// Virtual address width.
    pub virt_addr_width: u8,
    /// `device_caps` (`firmware_interface::efa::feature::device_attr::CAP_*`).
    pub device_caps: u32,
    /// Largest RDMA operation in bytes.
    pub max_rdma_size: u32,
    /// Node GUID.
    pub guid: u64,
    /// Link speed in Gb/s.
    pub max_link_speed_gbps: u16,
    /// Most QPs.
    pub max_qp: u32,
    /// Deepest SQ.
    pub max_sq_depth: u32,
    /// Inline bytes of a TX WQE.
    pub inline_buf_size: u32,
    /// Deepest RQ.
    pub max_rq_depth: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Deepest sub-CQ.
    pub max_cq_depth: u32,
    /// Sub-CQs per CQ.
    pub sub_cqs_per_cq: u16,
    /// Shallowest SQ.
    pub min_sq_depth: u16,
    /// Most buffer descriptors of a send.
    pub max_wr_send_sges: u16,
    /// Most descriptors of a receive.
    pub max_wr_recv_sges: u16,
    /// Most MRs.
    pub max_mr: u32,
    /// Most pages of one MR.
    pub max_mr_pages: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most AHs.
    pub max_ah: u32,
    /// Largest SQ in bytes.
    pub max_llq_size: u32,
    /// Most local buffers of an RDMA operation.
    pub max_wr_rdma_sges: u16,
    /// Most SQ bytes between doorbells, in 64-byte units (0 = unlimited).
    pub max_tx_batch: u16,
    /// The device's GID (its address).
    pub gid: [u8; 16],
    /// Largest payload in bytes.
    pub mtu: u32,
    /// Most EQs (0 when EVENT_QUEUE_ATTR is not supported).
    pub max_eq: u32,
    /// Deepest EQ.
    pub max_eq_depth: u32,
    /// Event types the EQs report.
    pub event_bitmask: u32,
    /// HW_HINTS: mmio read timeout (ms), watchdog (ms), admin completion timeout (ms), poll
    /// interval (ms); zeros when not supported.
    pub hw_hints: [u16; 4],
}

impl Attributes {
    /// Whether `device_caps` has `cap`.
    pub fn has(&self, cap: u32) -> bool {
        self.device_caps & cap == cap
    }

    /// The size of the TX WQEs this driver writes: 128 bytes when the device offers
    /// `data_polling_128` (`CAP_DATA_POLLING_128`), else 64. Every QP's LLQ is made of
    /// entries of this size (CREATE_QP's `send_queue_ring_size` is depth × this).
    pub fn tx_wqe_size(&self) -> u32 {
        if self.has(firmware_interface::efa::feature::device_attr::CAP_DATA_POLLING_128) {
            firmware_interface::efa::io::TX_WQE128_SIZE as u32
        } else {
            firmware_interface::efa::io::TX_WQE_SIZE as u32
        }
    }

    /// The most inline bytes a send may carry (`max_inline_data`): the device's
    /// `inline_buf_size`, at most what the data area of a [`Attributes::tx_wqe_size`] WQE
    /// holds (32 bytes in a 64-byte WQE, 80 in a 128-byte one).
    pub fn max_inline_data(&self) -> u32 {
        let area = if self.tx_wqe_size() == 128 {
            firmware_interface::efa::io::TX_INLINE_MAX_128
        } else {
            firmware_interface::efa::io::TX_INLINE_MAX
        };
        self.inline_buf_size.min(area as u32)
    }

    /// The firmware version as this driver prints it: the four bytes of `fw_version`, most
    /// significant first (`major.minor.sub-minor.build`).
    pub fn fw_version_text(&self) -> verbs::FwVersion {
        use core::fmt::Write;
        let b = self.fw_version.to_be_bytes();
        let mut v = verbs::FwVersion::default();
        // Four numbers of at most 3 digits always fit.
        let _ = write!(v, "{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        v
    }
}
