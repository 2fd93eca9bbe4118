//! Driver for NVIDIA ConnectX (mlx5) NICs, for programs without a kernel RDMA stack.
//!
//! It brings a device up through the firmware command interface (polling mode), creates and
//! destroys the objects the verbs layer needs (UAR, EQ, CQ, PD, transport domain, mkey, QP),
//! moves QPs through their states and tears the device down again. It touches the device only
//! through the [`nic_hal`] traits: [`RegisterIo`](nic_hal::RegisterIo) for BAR0,
//! [`DmaAllocator`](nic_hal::DmaAllocator) for memory the device reads and writes, and
//! [`Platform`](nic_hal::Platform) for the clock and the poll-loop hook.
//!
//! **The device is not trusted.** Every value read from a command output, an event or a
//! register is checked before use (object numbers against 24 bits and the capabilities, UAR
//! indexes against the BAR, page counts against [`Config::max_fw_pages`], returned page
//! addresses against the pages given, EQE ownership and types). A bad value is an
//! [`Error::BadOutput`], never a panic or an out-of-bounds access. DMA memory the device may
//! still use is never handed back to the allocator: an object dropped without its destroy
//! command, or whose destroy failed, leaks its rings on purpose, and a memory region does the
//! same with the [`verbs::Buffer`] it was registered over.
//!
//! Bring-up follows rdma-core's `mlx5_vfio.c` (`docs/mlx5.md#bring-up`): see [`Device::probe`];
//! teardown runs in reverse, see [`Device::shutdown`].
//!
//! ```
//! // Which PCI functions this driver binds to: real ConnectX/BlueField functions only. (A test
//! // harness that puts the emulated NIC behind another function, such as QEMU's ivshmem-plain,
//! // matches that function's ids itself.)
//! assert!(mlx5::is_supported_pci(0x15b3, 0x1017)); // ConnectX-5
//! assert!(!mlx5::is_supported_pci(0x1af4, 0x1110)); // QEMU ivshmem-plain
//! assert!(!mlx5::is_supported_pci(0x8086, 0x1572));
//!
//! // Bring-up parameters; everything has a default.
//! let config = mlx5::Config { log_max_qp_wanted: Some(10), ..Default::default() };
//! assert_eq!(config.cmd_timeout_ns, 60_000_000_000);
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
//!     // driver errors convert to their verbs errno
//!     let dev = mlx5::Device::probe(regs, dma, platform, mlx5::Config::default())?;
//!     let pd = Provider::alloc_pd(&dev)?;
//!     let cq = Provider::create_cq(&dev, 8, 0, None)?;
//!     // ... QPs, memory regions, posting and polling: all through `verbs::Provider`
//!     Provider::destroy_cq(&dev, cq).map_err(|e| e.error)?;
//!     Provider::dealloc_pd(&dev, pd).map_err(|e| e.error)?;
//!     Ok(dev.shutdown()?)
//! }
//! ```
//!
//! # One vocabulary: what is public
//!
//! Programs use the driver through [`verbs::Provider`]: its objects ([`Pd`], [`Mr`], [`Cq`],
//! [`Qp`], [`Srq`], [`Ah`], [`CompChannel`]) are this crate's types, its attributes and work
//! requests are the verbs ones. Beside that, public are only
//!
//! * bring-up and teardown: [`Device::probe`], [`Config`], [`Device::shutdown`], health, the
//!   capabilities ([`Caps`]) and the port setup a program without a kernel must do itself
//!   (the RoCE GID, the MAC);
//! * errors ([`Error`] and what it names), converted to [`verbs::Error`] at the provider;
//! * the fast path's own entry points ([`Device::post_send`], [`Device::post_recv`],
//!   [`Cq::poll`], [`Device::req_notify_cq`]: what the provider's post and poll run) and the
//!   read-only state accessors the harnesses check (ring positions, sizes, counters);
//! * the fake device, `mlx5::fake`, behind the `fake` feature (tests and benches).
//!
//! The driver's native calls that duplicate the verbs API (CREATE_QP with its own
//! `QpCreate`, per-command QP transitions, CREATE_MKEY, CREATE_CQ by log size, ALLOC_PD, the
//! raw command `exec`) are crate-private. The cargo feature `raw` (off by default) makes them
//! public as the trait `mlx5::raw::RawDevice` with their types in `mlx5::raw`, for tests of the firmware
//! commands themselves and for harnesses that need to work below the verbs model; a crate
//! that enables it says so in its manifest.
//!
//! # Data path and verbs provider
//!
//! [`Device`] implements [`verbs::Provider`] (see `provider.rs` for the object mapping and
//! the QP sizing rules). The fast path follows rdma-core's order (`docs/mlx5.md#fast-path`):
//! [`Device::post_send`] builds WQEs in the QP's SQ (control, remote address, atomic,
//! datagram, data or inline segments, wrapping at the ring end), publishes the producer
//! position, `dma_wmb`, doorbell record, `mmio_wmb`, then one 8-byte doorbell per batch (or a
//! BlueFlame copy of a single small WQE); [`Device::post_recv`] writes receive WQEs and the
//! record; [`Cq::poll`] applies the ownership rule, checks every CQE against the driver's own
//! bookkeeping ([`CqeFault`]) and publishes the consumer index once per call;
//! [`Device::req_notify_cq`] arms. None of them allocates. A QP is posted to through
//! `&mut Qp`; a CQ may be polled from any thread. Completion events come from a
//! [`CompChannel`] the caller polls; asynchronous events from [`Device::get_async_event`].
//!
//! **The device is not trusted on the data path either:** a CQE naming a QP not attached to
//! the CQ, a `wqe_counter` that is not an outstanding WQE, an unknown opcode or format, a byte
//! count larger than the buffers posted — each is consumed, counted and reported as
//! [`Error::BadCqe`], never a panic.
//!
//! ```
//! use verbs::{
//!     AccessFlags, MemoryRegion, Provider, QpCap, QpInitAttr, QpType, RecvWr, Sge,
//!     WorkCompletion,
//! };
//! let bench = mlx5::fake::bench(); // a fake device for the example
//! let dev = bench.probe().unwrap();
//! let pd = Provider::alloc_pd(&dev).unwrap();
//! // DMA memory from the device's allocator; the MR holds it until deregistration succeeds
//! let buf = dev.alloc_buf(4096).unwrap();
//! let mr = dev.reg_mr(&pd, buf.clone(), AccessFlags::LOCAL_WRITE).unwrap();
//! let cq = Provider::create_cq(&dev, 64, 0, None).unwrap();
//! let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let init = QpInitAttr { qp_type: QpType::Rc, send_cq: &cq, recv_cq: &cq, srq: None, cap, sq_sig_all: false };
//! let (mut qp, actual) = Provider::create_qp(&dev, &pd, &init).unwrap();
//! assert!(actual.max_send_wr >= 16);
//! // Receives may be posted from INIT on (RESET -> INIT with `modify_qp` first).
//! let sge = [Sge { addr: buf.addr(), length: 4096, lkey: mr.lkey() }];
//! # use verbs::{QpAttr, QpAttrMask as M, QpState};
//! # let a = QpAttr { qp_state: QpState::Init, port_num: 1, ..QpAttr::default() };
//! # Provider::modify_qp(&dev, &mut qp, &a, M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS).unwrap();
//! Provider::post_recv(&dev, &mut qp, &[RecvWr { wr_id: 1, sg_list: &sge }]).unwrap();
//! let mut wc = [WorkCompletion::default(); 8];
//! assert_eq!(Provider::poll_cq(&dev, &cq, &mut wc), Ok(0)); // nothing arrived
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;
#[cfg(all(feature = "fake", not(test)))]
extern crate std;

mod ah;
mod caps;
mod channel;
mod cmdq;
mod cq;
mod device;
#[cfg(test)]
mod dp_tests;
mod eq;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(test)]
mod gsi_tests;
mod mem;
mod mkey;
mod pages;
mod poll;
mod post;
mod provider;
mod qp;
#[cfg(feature = "raw")]
pub mod raw;
mod ring;
mod srq;
#[cfg(test)]
mod tests;
mod wq;

pub use ah::Ah;
pub use caps::{Caps, PortType};
pub use channel::{CHANNEL_MAX_CQS, CompChannel};
pub use cmdq::MAX_MSG_LEN;
pub use cq::Cq;
pub use device::{Device, LiveObjects};
pub use eq::{Eq, Event};
pub use error::{CapField, CqeFault, Error, OutputFault};
pub use provider::{Mr, Pd};
pub use qp::Qp;
pub use srq::Srq;

use firmware_interface::pci;

/// Bring-up and runtime parameters of a [`Device`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long to wait for the `initializing` bit to clear, before and after the command queue
    /// address is written (Linux FW_PRE_INIT_TIMEOUT: 120 s).
    pub init_timeout_ns: u64,
    /// How long one command may take (Linux CMD timeout: 60 s).
    pub cmd_timeout_ns: u64,
    /// `Platform::relax` calls between two reads of a polled register or ownership bit
    /// (at least 1).
    pub poll_interval_hint: u32,
    /// Events the driver's EQ must hold; it gets `roundup_pow2(async_eq_entries + 128)`
    /// entries (128 spare, as Linux).
    pub async_eq_entries: u32,
    /// Lower `log_max_qp` to this in SET_HCA_CAP (never above the device maximum); `None`
    /// keeps the firmware's current value.
    pub log_max_qp_wanted: Option<u8>,
    /// Size of BAR0 in bytes: UAR indexes the firmware returns must lie inside it.
    pub bar_size: u64,
    /// Most 4 KB pages the driver gives the firmware in total (boot + init + runtime
    /// requests); a larger request is [`Error::BadOutput`], not an allocation loop.
    pub max_fw_pages: u32,
    /// How long teardown keeps asking for pages back without progress (Linux: 5 s).
    pub reclaim_timeout_ns: u64,
    /// [`Device::check_health`] reports [`Error::HeartbeatLost`] when the health counter did
    /// not move for this long (Linux: 3 misses of a 2 s poll); `None` disables the check.
    pub heartbeat_timeout_ns: Option<u64>,
    /// PCI vendor id of the function, reported by `query_device`.
    pub vendor_id: u16,
    /// PCI device id of the function, reported by `query_device`.
    pub device_id: u16,
    /// The verbs provider gives each QP a UAR of its own and sends single small WQEs by
    /// BlueFlame (when the device has `bf`); off: every QP rings the driver's UAR with 8-byte
    /// doorbells.
    pub blueflame: bool,
    /// With interrupts, the longest a wait for an event sleeps before it checks the EQ again
    /// without having been woken (default 10 ms): a safety net for a lost wake-up (e.g. an
    /// arm doorbell a device that polls its BAR did not see). `u64::MAX`: only the interrupt
    /// (or the timeout) ends a sleep.
    pub irq_recheck_ns: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            init_timeout_ns: 120_000_000_000,
            cmd_timeout_ns: 60_000_000_000,
            poll_interval_hint: 1,
            async_eq_entries: 128,
            log_max_qp_wanted: None,
            bar_size: 32 << 20,
            max_fw_pages: 1 << 18,
            reclaim_timeout_ns: 5_000_000_000,
            heartbeat_timeout_ns: None,
            vendor_id: pci::VENDOR_MELLANOX,
            device_id: 0,
            blueflame: true,
            irq_recheck_ns: 10_000_000,
        }
    }
}

impl Config {
    /// Whether the function is a virtual function: its [`vendor_id`](Self::vendor_id) /
    /// [`device_id`](Self::device_id) name a ConnectX VF (`docs/mlx5.md#pci-identification`). On a VF the driver skips
    /// what Linux's mlx5_core does on the PF only (the HOST_ENDIANNESS register,
    /// `set_hca_ctrl`).
    pub fn is_vf(&self) -> bool {
        pci::lookup(self.vendor_id, self.device_id).is_some_and(|d| d.vf)
    }
}

/// Whether this driver binds to the PCI function `vendor:device`: a ConnectX / BlueField function
/// (`docs/mlx5.md#pci-identification`).
pub fn is_supported_pci(vendor: u16, device: u16) -> bool {
    pci::is_connectx(vendor, device)
}

/// Whether UAR index `uar` names a 4 KB page inside a BAR of `bar_size` bytes that does not
/// overlap the initialization segment.
pub(crate) fn uar_page_ok(uar: u32, bar_size: u64) -> bool {
    let start = uar as u64 * firmware_interface::uar::PAGE_SIZE as u64;
    uar <= 0xff_ffff
        && start >= firmware_interface::init_seg::SIZE as u64
        && start + firmware_interface::uar::PAGE_SIZE as u64 <= bar_size
}

/// Whether, after a command naming some DMA memory failed with `e`, the device may still use
/// that memory: the command may have executed (it timed out, or it succeeded and only its
/// output was rejected). Otherwise it was not delivered or the firmware refused it.
pub(crate) fn device_may_hold(e: &Error) -> bool {
    matches!(e, Error::CmdTimeout { .. } | Error::BadOutput { .. })
}
